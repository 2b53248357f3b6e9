#!/usr/bin/env python3
"""Speed-ups over PyTorch's fused ops from bench/compare_torch.py JSON files.

    python3 bench/sweep_summary.py [--mode graph] [--candidate commgemm-p2p] A.json [B.json ...]

One row per (op, m, n, k), one column per file: torch time / the candidate's
time (> 1: the candidate is faster), with the candidate's time in us. Then,
per file: how many rows are faster and the geometric mean of the speed-ups
per op. With several files, rows where the files disagree on "faster" are
marked: the sweeps of docs/PERFORMANCE.md are compared this way.
"""
import argparse
import json
import math
import sys

TORCH = "torch_symm_mem"


def load(path, mode, candidate):
    """{(op, m, n, k): (speed-up, candidate us)} for the rows of `mode` that
    have both the candidate and torch timed."""
    with open(path) as f:
        doc = json.load(f)
    by_shape = {}
    for r in doc.get("rows", []):
        if r.get("mode") != mode or r.get("status", "ok") != "ok":
            continue
        by_shape.setdefault((r["op"], r["m"], r["n"], r["k"]), {})[r["candidate"]] = r
    out = {}
    for key, c in by_shape.items():
        ours, torch = c.get(candidate), c.get(TORCH)
        if not ours or not torch or not ours.get("time_us") or not torch.get("time_us"):
            continue
        out[key] = (torch["time_us"] / ours["time_us"], ours["time_us"])
    return out


def summarize(table):
    """(rows faster, rows, {op: geometric mean speed-up})."""
    logs = {}
    for (op, *_), (s, _) in table.items():
        logs.setdefault(op, []).append(math.log(s))
    faster = sum(1 for s, _ in table.values() if s > 1)
    return faster, len(table), {op: math.exp(sum(v) / len(v)) for op, v in sorted(logs.items())}


def render(paths, tables):
    lines = ["| op | m x n x k | " + " | ".join(paths) + " |",
             "|---|---|" + "---|" * len(paths)]
    keys = sorted(set().union(*tables), key=lambda k: (k[0], k[1], k[2], k[3]))
    for key in keys:
        cells, verdicts = [], set()
        for t in tables:
            if key in t:
                s, us = t[key]
                cells.append(f"{s:.3f}× ({us:.1f} us)")
                verdicts.add(s > 1)
            else:
                cells.append("–")
        mark = " (differs)" if len(verdicts) > 1 else ""
        lines.append(f"| {key[0]} | {key[1]}x{key[2]}x{key[3]}{mark} | " + " | ".join(cells) + " |")
    lines.append("")
    for path, t in zip(paths, tables):
        faster, total, means = summarize(t)
        geo = ", ".join(f"{op} {m:.3f}×" for op, m in means.items())
        lines.append(f"{path}: {faster} of {total} faster than torch; geometric mean {geo}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="graph", help="rows of this mode (graph or eager)")
    ap.add_argument("--candidate", default="commgemm-p2p", help="the candidate set against torch")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args(argv)
    tables = [load(p, a.mode, a.candidate) for p in a.files]
    if not any(tables):
        print(f"no {a.mode} rows with both {a.candidate} and {TORCH}", file=sys.stderr)
        return 1
    print(render(a.files, tables))
    return 0


if __name__ == "__main__":
    sys.exit(main())
