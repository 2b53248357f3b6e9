#!/usr/bin/env python3
"""Plots for docs/perf/ from bench/compare_torch.py JSON (and commgemm-bench JSON).

    python3 bench/plot_perf.py compare.json [sweep.json] [p2p.json ...] [--out docs/perf] [--prefix NAME]

Writes, per op (and per mode, eager or graph, for compare_torch rows):
  <prefix>ratio_<op>[_graph].png    ratio to ideal (time / max(gemm, comm)) per shape, one bar per
                                    candidate, a line at 1.0 (perfect overlap)
  <prefix>speedup_<op>[_graph].png  speed-up of each commgemm backend over torch's fused op (solid)
                                    and over NCCL + cuBLAS in sequence (dashed), shapes ordered by
                                    their ideal time (written when there are torch or nccl+cublas rows)

commgemm-bench JSON rows (`"tool": "commgemm-bench"`, see docs/BENCH.md) become candidates
`bench-<backend>` (its ratio) and `bench-<backend>-seq` (seq_us / ideal_us). Headless: matplotlib's
Agg backend; only the standard library and matplotlib are needed.
"""

import argparse
import json
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
TORCH = "torch_symm_mem"
SEQ = "nccl+cublas"
BASELINES = ("gemm", "comm")


def load_rows(path):
    """Rows of one JSON file as dicts with op, m, n, k, mode, candidate, ratio,
    time_us, ideal_us, speedup_vs_torch, speedup_vs_seq, source."""
    path = pathlib.Path(path)
    doc = json.loads(path.read_text())
    tool = doc.get("tool")
    rows = []
    if tool == "compare_torch":
        for r in doc.get("rows", []):
            if r.get("candidate") in BASELINES or r.get("time_us") is None:
                continue
            rows.append({"op": r["op"], "m": r["m"], "n": r["n"], "k": r["k"], "mode": r.get("mode", "eager"),
                         "candidate": r["candidate"], "ratio": r.get("ratio"), "time_us": r.get("time_us"),
                         "ideal_us": r.get("ideal_us"), "speedup_vs_torch": r.get("speedup_vs_torch"),
                         "speedup_vs_seq": r.get("speedup_vs_seq"), "source": path.stem})
    elif tool == "commgemm-bench":
        for r in doc.get("rows", []):
            if r.get("failed") or r.get("time_us") is None:
                continue
            base = {"op": r["op"], "m": r["m"], "n": r["n"], "k": r["k"], "mode": "eager",
                    "ideal_us": r.get("ideal_us"), "speedup_vs_torch": None, "speedup_vs_seq": None,
                    "source": path.stem}
            name = f"bench-{r.get('backend', '?')}"
            rows.append(dict(base, candidate=name, ratio=r.get("ratio"), time_us=r["time_us"]))
            ideal, seq = r.get("ideal_us"), r.get("seq_us")
            if ideal and seq:
                rows.append(dict(base, candidate=name + "-seq", ratio=seq / ideal, time_us=seq))
    else:
        raise ValueError(f"{path}: unknown JSON (tool = {tool!r}); expected compare_torch or commgemm-bench output")
    return rows


def merge(files):
    """Rows of several files; a candidate that appears in more than one file
    is labelled with its file's name so that the bars stay apart."""
    per_file = [load_rows(f) for f in files]
    seen = {}
    for i, rows in enumerate(per_file):
        for r in rows:
            seen.setdefault(r["candidate"], set()).add(i)
    out = []
    for rows in per_file:
        for r in rows:
            if len(seen[r["candidate"]]) > 1:
                r = dict(r, candidate=f"{r['candidate']} [{r['source']}]")
            out.append(r)
    return out


def shape_label(r):
    return f"{r['m']}x{r['n']}x{r['k']}"


def groups(rows):
    """(op, mode) -> rows, in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["op"], r["mode"]), []).append(r)
    return out


def _ordered(values):
    return list(dict.fromkeys(values))


def plot_ratio(plt, op, mode, rows, path):
    shapes = _ordered(shape_label(r) for r in rows)
    cands = _ordered(r["candidate"] for r in rows)
    table = {(shape_label(r), r["candidate"]): r.get("ratio") for r in rows}
    width = 0.8 / max(len(cands), 1)
    fig, ax = plt.subplots(figsize=(min(16.0, max(6.0, 1.2 + len(shapes) * (0.3 + 0.12 * len(cands)))), 4.5))
    top = 0.0
    for j, c in enumerate(cands):
        xs, ys = [], []
        for i, s in enumerate(shapes):
            v = table.get((s, c))
            if v is not None:
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(v)
        ax.bar(xs, ys, width=width, label=c)
        top = max([top] + ys)
    ax.set_ylim(0, max(top, 1.0) * 1.3)  # room for the legend
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, rotation=30 if len(shapes) > 4 else 0, ha="right" if len(shapes) > 4 else "center",
                       fontsize=8)
    ax.set_xlabel("shape m x n x k")
    ax.set_ylabel("time / max(gemm, comm)  (1.0 = perfect overlap)")
    ax.set_title(f"{op} ({mode}): ratio to ideal, lower is better")
    ax.legend(fontsize=7, ncol=min(len(cands), 4), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_speedup(plt, op, mode, rows, path):
    """Speed-up of each commgemm candidate over the peers, shapes ordered by ideal time."""
    mine = [r for r in rows if r["candidate"].startswith("commgemm-")]
    if not mine or not any(r.get("speedup_vs_torch") or r.get("speedup_vs_seq") for r in mine):
        return False
    ideal = {}
    for r in rows:
        if r.get("ideal_us"):
            ideal.setdefault(shape_label(r), r["ideal_us"])
    shapes = sorted(_ordered(shape_label(r) for r in mine), key=lambda s: ideal.get(s, 0.0))
    fig, ax = plt.subplots(figsize=(min(16.0, max(6.0, 1.5 + 0.45 * len(shapes))), 4.5))
    for c in _ordered(r["candidate"] for r in mine):
        by_shape = {shape_label(r): r for r in mine if r["candidate"] == c}
        for key, style, label in (("speedup_vs_torch", "-o", "vs torch fused"), ("speedup_vs_seq", "--s",
                                                                                 "vs nccl+cublas")):
            xs = [i for i, s in enumerate(shapes) if s in by_shape and by_shape[s].get(key)]
            ys = [by_shape[shapes[i]][key] for i in xs]
            if xs:
                ax.plot(xs, ys, style, label=f"{c} {label}", markersize=4)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, rotation=35, ha="right", fontsize=7)
    ax.set_xlabel("shape m x n x k, by ideal time")
    ax.set_ylabel("speed-up (peer time / commgemm time)")
    ax.set_title(f"{op} ({mode}): commgemm speed-up, higher is better")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def plot_all(files, out_dir, prefix=None):
    """Writes the PNGs; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = merge(files)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if prefix is None:
        prefix = pathlib.Path(files[0]).stem + "_"
    written = []
    for (op, mode), rs in groups(rows).items():
        suffix = "" if mode == "eager" else f"_{mode}"
        path = out_dir / f"{prefix}ratio_{op}{suffix}.png"
        plot_ratio(plt, op, mode, rs, path)
        written.append(path)
        path = out_dir / f"{prefix}speedup_{op}{suffix}.png"
        if plot_speedup(plt, op, mode, rs, path):
            written.append(path)
    return written


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Inputs: compare_torch.py --json files and commgemm-bench --json files.")
    p.add_argument("files", nargs="+", help="JSON files")
    p.add_argument("--out", default=str(REPO / "docs" / "perf"), help="output directory (default docs/perf)")
    p.add_argument("--prefix", default=None, help="file name prefix (default: the first file's stem and '_')")
    args = p.parse_args(argv)
    try:
        written = plot_all(args.files, args.out, args.prefix)
    except (OSError, ValueError, KeyError) as e:
        print(f"plot_perf.py: {e}", file=sys.stderr)
        return 2
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
