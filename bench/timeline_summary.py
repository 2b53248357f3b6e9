#!/usr/bin/env python3
"""Summarizes p2p step timelines (COMMGEMM_TIMELINE traces) into where the
time of each op goes.

    python3 bench/timeline_summary.py TRACE.json [TRACE.json ...]

For each trace (one rank, one call): the op's span (first step start to last
step end), the GEMM steps' total and their share of the span, the compute
queues' idle time inside the span (time no GEMM or reduce runs: exposed
communication and waits), the comm queue's busy time (copies and flags), and
the time before the first GEMM and after the last copy (the pipeline's head
and tail).
"""
import json
import sys


def summarize(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    if not events:
        return None
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    span = end - start
    gemm = [e for e in events if e["cat"] == "gemm"]
    compute = [e for e in events if e["tid"] > 0 and e["cat"] in ("gemm", "reduce")]
    copies = [e for e in events if e["cat"] == "copy"]
    comm_busy = sum(e["dur"] for e in events if e["tid"] == 0)
    # Union of compute intervals: the time at least one GEMM/reduce runs.
    intervals = sorted((e["ts"], e["ts"] + e["dur"]) for e in compute)
    covered, cur_s, cur_e = 0.0, None, None
    for s, e in intervals:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                covered += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        covered += cur_e - cur_s
    head = (min(e["ts"] for e in gemm) - start) if gemm else 0.0
    tail = (end - max(e["ts"] + e["dur"] for e in copies)) if copies else 0.0
    return {
        "trace": path,
        "span_us": span,
        "gemm_us": sum(e["dur"] for e in gemm),
        "gemm_steps": len(gemm),
        "compute_idle_us": span - covered,
        "comm_busy_us": comm_busy,
        "head_us": head,
        "tail_after_last_copy_us": tail,
    }


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    rows = [r for r in (summarize(p) for p in argv[1:]) if r]
    print("| trace | span µs | GEMM steps µs (n) | GEMM share | compute idle µs | comm queue busy µs | head µs | tail µs |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| {} | {:.1f} | {:.1f} ({}) | {:.0%} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |".format(
            r["trace"].split("/")[-1], r["span_us"], r["gemm_us"], r["gemm_steps"],
            r["gemm_us"] / r["span_us"] if r["span_us"] else 0, r["compute_idle_us"],
            r["comm_busy_us"], r["head_us"], r["tail_after_last_copy_us"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
