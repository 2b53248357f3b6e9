#!/usr/bin/env python3
"""commgemm against its peers, in one process group and one run.

    torchrun --nproc-per-node 2 bench/compare_torch.py [--shapes MxNxK,...] [--sweep]
        [--ops ag_gemm,gemm_rs] [--backends p2p,nccl,cublasmp] [--dtype bf16|fp16|fp32|fp8]
        [--warmup 5 --iters 20] [--graph] [--json out.json]

For each shape and op (AG+GEMM, GEMM+RS, optionally GEMM+AR) it measures,
interleaved in alternating rounds (round i runs every candidate once, the
order rotated by i, a barrier before each measurement; with --pad-us N
--align the GPUs also meet in a one-element all_reduce right before the
start event, so host launch skew between ranks is not timed):

  gemm            the unsplit local GEMM alone (torch.matmul, i.e. cuBLAS)   baseline
  comm            the NCCL collective alone (torch.distributed)              baseline
  nccl+cublas     the collective then the GEMM (or the GEMM then the collective), no overlap
  torch_symm_mem  torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter
  gemm-commgemm   with --cgm-gemm: the same unsplit GEMM through commgemm (bulk_matmul_collective
                  without a collective, the first backend of --backends: its cuBLASLt algorithm
                  choice), a baseline beside torch.matmul that does not enter the ideal
  commgemm-<b>    commgemm.torch.all_gather_matmul / matmul_reduce_scatter / matmul_all_reduce
                  on backend b, for each b of --backends

With --dtype fp8, X and W are float8_e4m3fn with per-tensor scales (the
same X scale on every rank: PyTorch's fused AG op takes one A_scale for the
gathered A), Y is bf16, and the GEMMs are torch._scaled_mm: gemm and
nccl+cublas use it (the collective moves fp8 codes for AG, the bf16 product
for RS and AR), torch_symm_mem is fused_all_gather_scaled_matmul /
fused_scaled_matmul_reduce_scatter, commgemm-<b> the same functional ops
with x_scale=, w_scale=, out_dtype=bfloat16. Every output, nccl+cublas's
included, is then checked against the exact product of the dequantized
inputs (fp32, exact for these inputs), within fp8_tolerance().

ideal = max(gemm, comm); ratio = time / ideal; speed-ups are the peer's time
over the candidate's. Times: CUDA events on the current stream, each rank's
median over --iters, then the slowest rank (all_reduce MAX). Every output is
checked against nccl+cublas (first call and last timed call).

Shapes mean what they mean in commgemm-bench (docs/BENCH.md, "Shapes"): m, n,
k are the layer's whole problem Y[m, n] = X[m, k] . W[n, k]^T, given as MxNxK;
AG+GEMM splits n over the P ranks (rank r: X_r [m/P, k] gathered to [m, k],
times W_r [n/P, k]^T -> Y [m, n/P]); GEMM+RS and GEMM+AR split k (rank r:
X [m, k/P] . W [n, k/P]^T, reduced, RS scattering rows: Y_r [m/P, n]).
The pure helpers (parsing, ordering, statistics, rows, table, JSON) import
nothing beyond the standard library, so tests and --help run without a GPU.
"""

import argparse
import datetime
import json
import math
import os
import re
import pathlib
import platform
import socket
import statistics
import sys
import time
import traceback
import warnings

REPO = pathlib.Path(__file__).resolve().parents[1]

OPS = ("ag_gemm", "gemm_rs", "gemm_ar")
# "p2p-fused", "p2p-split": the p2p backend with that algorithm as the comm's
# default (COMMGEMM_ALGO for this comm only) instead of the tuner's choice.
GPU_BACKENDS = ("p2p", "nccl", "cublasmp", "p2p-fused", "p2p-split")
DTYPES = ("bf16", "fp16", "fp32", "fp8")

# --dtype fp8: e4m3 codes (multiples of 1/8 in [-1, 1], exact in e4m3) times
# these per-tensor scales, the same on every rank; Y in bf16.
FP8_X_SCALE = 0.5
FP8_W_SCALE = 0.25
FP8_OUT = "bf16"
BF16_UNIT = 2.0 ** -8  # bf16's unit roundoff (8 significant bits)
DEFAULT_TOL = 2e-2  # bf16, fp16, fp32: relative to max|ref|, ref = nccl+cublas's output

GEMM = "gemm"
COMM = "comm"
SEQ = "nccl+cublas"
TORCH = "torch_symm_mem"
CGM_GEMM = "gemm-commgemm"
BASELINES = (GEMM, COMM, CGM_GEMM)

# Shapes as MxNxK (commgemm-bench order). The reference shapes, as (m, k, n):
# AG+GEMM (16384, 8192, 2048), (8192, 4096, 4096); GEMM+RS (16384, 2048, 8192),
# (8192, 4096, 4096); docs/PERFORMANCE.md runs both ops on the same three shapes.
DEFAULT_SHAPES = "16384x2048x8192,8192x4096x4096,16384x8192x2048"

# PyTorch SymmetricMemory's reference ratios on those shapes, (op, m, n, k) -> ratio.
REFERENCE_TORCH_RATIOS = {
    ("ag_gemm", 16384, 2048, 8192): 1.27,
    ("ag_gemm", 8192, 4096, 4096): 1.57,
    ("gemm_rs", 16384, 8192, 2048): 1.52,
    ("gemm_rs", 8192, 4096, 4096): 1.68,
}

# PyTorch's fused ops: [False] for bf16/fp16/fp32, [True] for fp8 (scaled).
FUSED_OPS = {False: ("fused_all_gather_matmul", "fused_matmul_reduce_scatter"),
             True: ("fused_all_gather_scaled_matmul", "fused_scaled_matmul_reduce_scatter")}

# Environment that keeps NVLink multicast (NVLS) out of every library here.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# --------------------------------------------------------------------------
# Pure helpers (no torch)
# --------------------------------------------------------------------------


def parse_size(text):
    """'4096', '4k' (x1024) or '1M' (x1024^2) -> int > 0."""
    t = text.strip()
    mult = 1
    if t[-1:] in ("k", "K"):
        mult, t = 1024, t[:-1]
    elif t[-1:] in ("m", "M"):
        mult, t = 1024 * 1024, t[:-1]
    if not t.isdigit():
        raise ValueError(f"bad size {text!r}: expected a positive integer, optionally with a k or M suffix")
    value = int(t) * mult
    if value <= 0:
        raise ValueError(f"bad size {text!r}: must be positive")
    return value


def parse_shapes(text):
    """'MxNxK[,MxNxK...]' -> [(m, n, k), ...] (commgemm-bench's --shapes)."""
    shapes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.lower().split("x")
        if len(parts) != 3:
            raise ValueError(f"bad shape {item!r}: expected MxNxK, e.g. 16384x2048x8192")
        shapes.append(tuple(parse_size(p) for p in parts))
    if not shapes:
        raise ValueError(f"no shapes in {text!r}")
    return shapes


def format_shape(shape):
    return "x".join(str(v) for v in shape)


def sweep_shapes():
    """The --sweep grid as (m, n, k): m 1024..32768, n and k 1024..28672.
    Llama-like projections (hidden 4096/8192, FFN 14336/28672) at four token
    counts, plus a few small and square shapes where latency dominates."""
    shapes = [(1024, 1024, 1024), (2048, 2048, 2048)]
    for m in (1024, 4096, 16384, 32768):
        for n, k in ((4096, 4096), (28672, 8192), (8192, 28672)):
            shapes.append((m, n, k))
    shapes += [(8192, 14336, 4096), (8192, 4096, 14336)]
    return shapes


def parse_list(text, allowed, what):
    items = [s.strip() for s in text.split(",") if s.strip()]
    if items == ["all"]:
        return list(allowed)
    for s in items:
        if s not in allowed:
            raise ValueError(f"bad {what} {s!r}: expected one of {', '.join(allowed)} (comma list) or all")
    if not items:
        raise ValueError(f"no {what} given")
    return list(dict.fromkeys(items))


def split_dim(op):
    """Which of (m, n, k) the op splits over the ranks besides m's rows."""
    return "n" if op == "ag_gemm" else "k"


def shape_problem(op, m, n, k, nranks):
    """None when every candidate can run (op, m, n, k) on nranks, else why not.
    The peers need equal shards: PyTorch's fused ops and NCCL's
    all_gather_into_tensor / reduce_scatter_tensor take m / P rows each."""
    if m % nranks:
        return f"m = {m} is not a multiple of P = {nranks} (the peers need equal row shards)"
    dim = split_dim(op)
    value = n if dim == "n" else k
    if value % nranks:
        return f"{dim} = {value} is not a multiple of P = {nranks} ({op} splits {dim} over the ranks)"
    return None


def local_shapes(op, m, n, k, nranks):
    """Per-rank tensor shapes: {'x': ..., 'w': ..., 'y': ...} for (m, n, k) on
    nranks equal shards, as in commgemm-bench."""
    if op == "ag_gemm":
        return {"x": (m // nranks, k), "w": (n // nranks, k), "y": (m, n // nranks)}
    kl = k // nranks
    if op == "gemm_rs":
        return {"x": (m, kl), "w": (n, kl), "y": (m // nranks, n)}
    return {"x": (m, kl), "w": (n, kl), "y": (m, n)}


def candidate_names(op, backends, cgm_gemm=False):
    """Every candidate of an op, in the base round order."""
    names = [GEMM, COMM, SEQ] + ([CGM_GEMM] if cgm_gemm and backends else [])
    if op in ("ag_gemm", "gemm_rs"):
        names.append(TORCH)
    names += [f"commgemm-{b}" for b in backends]
    return names


def candidate_kind(name):
    if name in BASELINES:
        return "baseline"
    if name.startswith("commgemm-"):
        return "commgemm"
    return "peer"


def round_order(names, i):
    """Round i runs every candidate once, the order rotated by i, so each
    candidate takes every position (first after the barrier, after each
    other candidate) equally often."""
    n = len(names)
    if n == 0:
        return []
    s = i % n
    return list(names[s:]) + list(names[:s])


def median(values):
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.median(vals) if vals else None


def slowest(per_rank_medians):
    vals = [v for v in per_rank_medians if v is not None]
    return max(vals) if vals else None


def _div(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def fp8_tolerance(op, nranks):
    """--dtype fp8's bound on |out - ref| / max|ref|, ref the exact product of
    the dequantized inputs. The inputs make every fp32 sum exact (codes k/8,
    power-of-two scales), so the error is bf16 rounding: AG+GEMM rounds Y
    once (u = 2^-8), with one u of slack for the fp8 tensor cores'
    accumulation: 2u. GEMM+RS and GEMM+AR may round each of the P partials
    to bf16 before the sum (PyTorch's scaled RS and NCCL's bf16 reduction
    do), the sum may round at each of its P - 1 steps, and Y once: (2P + 1)u
    (each partial's magnitude bounded by max|ref|'s order, the inputs being
    random signs)."""
    if op == "ag_gemm":
        return 2 * BF16_UNIT
    return (2 * nranks + 1) * BF16_UNIT


def tolerance(tol, dtype, op, nranks):
    """The check's bound: --tol when given, else fp8_tolerance for fp8 and
    DEFAULT_TOL for the others."""
    if tol is not None:
        return tol
    return fp8_tolerance(op, nranks) if dtype == "fp8" else DEFAULT_TOL


def reference_name(dtype):
    """What outputs are checked against."""
    if dtype == "fp8":
        return "the exact product of the dequantized fp8 inputs (fp32)"
    return SEQ


def failure_status(name, nranks):
    """A candidate that raised on its first call is an 'error' row (the run
    fails), except PyTorch's fused ops on a group of one rank: symmetric
    memory's ops are made for several, so that is a 'skipped' row with the
    error as the reason."""
    return "skipped" if name == TORCH and nranks == 1 else "error"


def schema_arg_names(schema):
    """Argument names of an operator schema string, e.g.
    'symm_mem::f(Tensor A, Tensor[] Bs, *, bool x=True) -> (Tensor, Tensor[])'
    -> ['A', 'Bs', 'x']."""
    start = schema.find("(")
    depth, end = 0, -1
    for i in range(max(start, 0), len(schema)):
        if schema[i] == "(":
            depth += 1
        elif schema[i] == ")":
            depth -= 1
            if depth == 0:
                end = i
                break
    if start < 0 or end < 0:
        raise ValueError(f"not an operator schema: {schema!r}")
    names = []
    for part in schema[start + 1:end].split(","):
        part = part.strip()
        if not part or part == "*":
            continue
        decl = part.split("=", 1)[0].strip()
        names.append(decl.split()[-1])
    return names


def schema_kwargs(schema, values):
    """Keyword arguments for an operator from the names in its schema, so one
    call fits torch versions that added, renamed or reordered arguments
    (fused_scaled_matmul_reduce_scatter's scatter_dim became orig_scatter_dim
    + scatter_dim_after_maybe_reshape + output_shape). values: name -> value
    for every name this script can fill; an argument with a default that
    values lacks is left out, one without a default raises ValueError."""
    args = schema[schema.find("("):]
    names = schema_arg_names(schema)
    defaults = {n for n in names if re.search(r"\b" + re.escape(n) + r"\s*=", args)}
    missing = [n for n in names if n not in values and n not in defaults]
    if missing:
        raise ValueError(f"the schema {schema!r} has arguments this script cannot fill: {', '.join(missing)}")
    return {n: values[n] for n in names if n in values}


def build_rows(op, shape, mode, results, names=None, extra=None):
    """Rows for one (op, shape, mode). results: name -> dict with time_us
    (slowest rank's median or None), wrong (int or None), status ('ok',
    'skipped' or 'error'), reason (str), plus anything else (copied).
    extra: fields every row gets (dtype, tol)."""
    m, n, k = shape
    names = names or list(results)
    gemm = results.get(GEMM, {}).get("time_us")
    comm = results.get(COMM, {}).get("time_us")
    ideal = max(gemm, comm) if gemm is not None and comm is not None else None
    t_torch = results.get(TORCH, {}).get("time_us")
    t_seq = results.get(SEQ, {}).get("time_us")
    rows = []
    for name in names:
        r = results.get(name, {"status": "skipped", "reason": "not run"})
        t = r.get("time_us")
        row = {"op": op, "m": m, "n": n, "k": k, "mode": mode, "candidate": name, "kind": candidate_kind(name),
               "status": r.get("status", "ok" if t is not None else "skipped"), "reason": r.get("reason", ""),
               "time_us": t, "gemm_us": gemm, "comm_us": comm, "ideal_us": ideal, "ratio": _div(t, ideal),
               "speedup_vs_torch": _div(t_torch, t), "speedup_vs_seq": _div(t_seq, t),
               "tflops": (2.0 * m * n * k / (t * 1e-6) / 1e12) if t else None,
               "wrong": r.get("wrong")}
        row.update(extra or {})
        for key, value in r.items():
            if key not in row:
                row[key] = value
        reference = REFERENCE_TORCH_RATIOS.get((op, m, n, k))
        if reference is not None and name == TORCH:
            row["reference_ratio"] = reference
        rows.append(row)
    return rows


def _fmt(value, spec, none="-"):
    return none if value is None else format(value, spec)


TABLE_HEAD = ("| op | m | n | k | mode | candidate | time µs | ratio | vs torch | vs nccl+cublas | TFLOP/s | #wrong "
              "| note |")


def table_line(row):
    wrong = "-" if row.get("wrong") is None else str(row["wrong"])
    note = row.get("reason") or ""
    if row.get("status") == "error":
        note = f"ERROR: {note}"
    elif row.get("status") == "skipped":
        note = f"skipped: {note}"
    if row.get("reference_ratio") is not None:
        note = (note + "; " if note else "") + f"reference: {row['reference_ratio']:.2f}"
    note = note.replace("|", "/").replace("\n", " ")
    return (f"| {row['op']} | {row['m']} | {row['n']} | {row['k']} | {row['mode']} | {row['candidate']} "
            f"| {_fmt(row.get('time_us'), '.1f')} | {_fmt(row.get('ratio'), '.2f')} "
            f"| {_fmt(row.get('speedup_vs_torch'), '.2f')} | {_fmt(row.get('speedup_vs_seq'), '.2f')} "
            f"| {_fmt(row.get('tflops'), '.0f')} | {wrong} | {note} |")


def format_table(rows):
    lines = [TABLE_HEAD, "|" + "---|" * (TABLE_HEAD.count("|") - 1)]
    lines += [table_line(r) for r in rows]
    return "\n".join(lines)


def total_wrong(rows):
    return sum(r["wrong"] for r in rows if r.get("wrong"))


def errors(rows):
    return [r for r in rows if r.get("status") == "error"]


def build_report(rows, machine, options, complete=True):
    """The JSON document rank 0 writes."""
    wrong = total_wrong(rows)
    errs = errors(rows)
    ref = reference_name(options.get("dtype", "bf16"))
    return {"tool": "compare_torch", "version": 1, "complete": complete, "machine": machine, "options": options,
            "columns": {"time_us": "slowest rank's median, microseconds", "ideal_us": "max(gemm_us, comm_us)",
                        "ratio": "time_us / ideal_us", "speedup_vs_torch": "torch_symm_mem time / this time",
                        "speedup_vs_seq": "nccl+cublas time / this time",
                        "wrong": f"output elements outside tolerance (tol) vs {ref}, summed over ranks and checks"},
            "rows": rows, "wrong": wrong, "errors": len(errs), "ok": complete and wrong == 0 and not errs}


def dtype_line(args):
    """The table header's words for --dtype (and the check's reference)."""
    if args.dtype != "fp8":
        return f"{args.dtype}, checked against {SEQ}"
    return (f"fp8: e4m3 X and W, per-tensor scales X {FP8_X_SCALE} W {FP8_W_SCALE} (the same on every rank), "
            f"{FP8_OUT} Y, checked against {reference_name('fp8')}")


def write_json(path, report):
    path = pathlib.Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    os.replace(tmp, path)


def make_parser():
    p = argparse.ArgumentParser(
        prog="compare_torch.py",
        description="commgemm vs PyTorch SymmetricMemory fused ops vs NCCL+cuBLAS, one process group, one run. "
                    "Launch with: torchrun --nproc-per-node P bench/compare_torch.py [options]",
        epilog="Shapes are commgemm-bench's: MxNxK of the whole layer; AG+GEMM splits n over the ranks, "
               "GEMM+RS and GEMM+AR split k. Sets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, "
               "NVSHMEM_DISABLE_NVLS=1 before torch starts. See docs/BENCH.md, 'bench/compare_torch.py'.")
    p.add_argument("--shapes", default=None,
                   help=f"MxNxK[,MxNxK...] (default: {DEFAULT_SHAPES}: the reference shapes of docs/PERFORMANCE.md)")
    p.add_argument("--sweep", action="store_true",
                   help=f"run the sweep grid ({len(sweep_shapes())} shapes, m 1024..32768, n, k 1024..28672) "
                        "instead of the default shapes (with --shapes: both)")
    p.add_argument("--ops", default="ag_gemm,gemm_rs", help="ag_gemm, gemm_rs, gemm_ar, a comma list or all "
                                                              "(default ag_gemm,gemm_rs)")
    p.add_argument("--backends", default="p2p,nccl,cublasmp",
                   help="commgemm GPU backends to run, comma list (default p2p,nccl,cublasmp; also p2p-fused "
                        "and p2p-split: p2p with that algorithm instead of the tuner's pick); an unavailable "
                        "one is a skipped row with the reason")
    p.add_argument("--dtype", default="bf16", choices=DTYPES,
                   help="inputs' dtype (default bf16); fp8: float8_e4m3fn X and W with per-tensor scales "
                        f"(X {FP8_X_SCALE}, W {FP8_W_SCALE}, the same on every rank), bf16 Y, torch._scaled_mm "
                        "GEMMs and PyTorch's scaled fused ops, every output checked against the exact product "
                        "of the dequantized inputs")
    p.add_argument("-w", "--warmup", type=int, default=5, help="untimed rounds (default 5)")
    p.add_argument("-i", "--iters", type=int, default=20, help="timed rounds, >= 1; medians (default 20)")
    p.add_argument("--graph", action="store_true",
                   help="also capture each candidate in a CUDA graph after the eager rounds and time replays "
                        "(rows with mode=graph; candidates that cannot be captured are skipped with the reason)")
    p.add_argument("--no-torch", action="store_true", help="leave out the torch_symm_mem candidate")
    p.add_argument("--cgm-gemm", action="store_true",
                   help="also time the unsplit GEMM through commgemm (gemm-commgemm: the first backend's "
                        "cuBLASLt choice) beside torch.matmul; a baseline outside the ideal")
    p.add_argument("--pad-us", type=float, default=0.0,
                   help="a GPU sleep of this many µs before each start event, so the host's enqueue time is "
                        "hidden and eager times are GPU times (default 0: the host's time counts where the GPU "
                        "waits for it, as in commgemm-bench)")
    p.add_argument("--align", action="store_true",
                   help="start each measurement together on every GPU: after the barrier and the --pad-us sleep "
                        "(needs --pad-us > 0, long enough for the host to enqueue the measured work), a one-element "
                        "all_reduce on the stream, then the start event. Without it the ranks start when their "
                        "hosts return from the barrier, tens of µs apart, and the earlier rank's time includes the "
                        "wait for the later one (it dominates ops under ~100 µs)")
    p.add_argument("--tol", type=float, default=None,
                   help=f"an element is wrong when |out - ref| > tol * max|ref| (default {DEFAULT_TOL}; fp8: "
                        "(2P + 1) * 2^-8 for GEMM+RS and GEMM+AR, 2 * 2^-8 for AG+GEMM)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout-ms", type=int, default=60000, help="commgemm comms' timeout_ms (default 60000)")
    p.add_argument("--json", default=None, help="rank 0 writes every number here (rewritten after each shape)")
    p.add_argument("--table", default=None, help="rank 0 also writes the markdown table here")
    return p


def parse_args(argv=None):
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        shapes = []
        if args.shapes or not args.sweep:
            shapes += parse_shapes(args.shapes or DEFAULT_SHAPES)
        if args.sweep:
            shapes += sweep_shapes()
        args.shape_list = list(dict.fromkeys(shapes))
        args.op_list = parse_list(args.ops, OPS, "op")
        args.backend_list = parse_list(args.backends, GPU_BACKENDS, "backend")
    except ValueError as e:
        parser.error(str(e))
    if args.iters < 1 or args.warmup < 0:
        parser.error(f"--iters must be >= 1 and --warmup >= 0 (got {args.iters}, {args.warmup})")
    if args.align and args.pad_us <= 0:
        parser.error("--align needs --pad-us > 0 (e.g. 300): the host must enqueue the all_reduce and the "
                     "measured work while the GPU sleeps")
    return args


def options_dict(args):
    opts = {"shapes": [format_shape(s) for s in args.shape_list], "ops": args.op_list,
            "backends": args.backend_list, "dtype": args.dtype, "warmup": args.warmup, "iters": args.iters,
            "graph": args.graph, "pad_us": args.pad_us, "align": args.align, "torch": not args.no_torch,
            "tol": args.tol, "seed": args.seed, "sweep": args.sweep, "timeout_ms": args.timeout_ms}
    if args.dtype == "fp8":
        opts["fp8"] = {"inputs": "float8_e4m3fn", "scaling": "per tensor", "x_scale": FP8_X_SCALE,
                       "w_scale": FP8_W_SCALE, "scales": "the same on every rank", "output": FP8_OUT,
                       "fast_accum": False}
    return opts


# --------------------------------------------------------------------------
# GPU part (torch, torch.distributed, commgemm)
# --------------------------------------------------------------------------


def _short(e, limit=300):
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


class Runner:
    """Everything that needs the GPUs: one instance per rank."""

    def __init__(self, args):
        import torch
        import torch.distributed as dist
        self.torch, self.dist, self.args = torch, dist, args
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(self.local_rank)
        self.device = torch.device("cuda", self.local_rank)
        dist.init_process_group("nccl", device_id=self.device, timeout=datetime.timedelta(seconds=600))
        self.world = dist.group.WORLD
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
                      "fp8": torch.float8_e4m3fn}[args.dtype]
        self.out_dtype = torch.bfloat16 if args.dtype == "fp8" else self.dtype
        self.torch_schemas = {}
        self._flag = torch.zeros(1, device=self.device)
        self.group_name = getattr(self.world, "group_name", None)
        self.torch_reason = None if not args.no_torch else "--no-torch"
        self.ag_return_a_kw = False
        self.pad_cycles = 0
        self.comms, self.comm_reasons = {}, {}
        self.machine = {}

    # ---- device hooks (a CPU test double replaces these) ----

    def sync(self):
        self.torch.cuda.synchronize()

    def event(self):
        return self.torch.cuda.Event(enable_timing=True)

    def release(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def graph_capture(self, fn):
        """(graph, static output) of fn captured in a CUDA graph."""
        torch = self.torch
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            out = fn()
        torch.cuda.synchronize()
        return g, out

    def pad(self):
        """--pad-us: a GPU sleep before the start event, so that the host
        enqueues the measured work while the GPU is busy (GPU time only)."""
        if self.pad_cycles:
            self.torch.cuda._sleep(self.pad_cycles)

    def calibrate_pad(self):
        """Cycles of torch.cuda._sleep per microsecond, measured."""
        torch = self.torch
        if self.args.pad_us <= 0:
            return 0
        cycles = 10_000_000
        torch.cuda._sleep(cycles)  # warm
        start, end = self.event(), self.event()
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        per_us = cycles / max(start.elapsed_time(end) * 1000.0, 1.0)
        return int(per_us * self.args.pad_us)

    # ---- collective helpers ----

    def barrier(self):
        self.dist.all_reduce(self._flag, group=self.world)
        self.sync()

    def align(self):
        """--align: a device-side barrier (no host sync): the start event
        after it is reached on every GPU within a few µs."""
        self.dist.all_reduce(self._flag, group=self.world)

    def agree(self, ok):
        """True on every rank only when ok on every rank."""
        t = self.torch.tensor([1.0 if ok else 0.0], device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, group=self.world)
        return bool(t.item() > 0.5)

    def gather_floats(self, values):
        """values (list of float or None) from every rank: [rank][i] (None kept)."""
        torch = self.torch
        if not values:  # the same length on every rank
            return [[] for _ in range(self.size)]
        t = torch.tensor([float("nan") if v is None else float(v) for v in values], dtype=torch.float64,
                         device=self.device)
        out = [torch.empty_like(t) for _ in range(self.size)]
        self.dist.all_gather(out, t, group=self.world)
        return [[None if math.isnan(x) else x for x in o.tolist()] for o in out]

    def sum_int(self, value):
        t = self.torch.tensor([int(value)], dtype=self.torch.int64, device=self.device)
        self.dist.all_reduce(t, group=self.world)
        return int(t.item())

    # ---- setup ----

    def setup(self):
        torch = self.torch
        self.machine = self.machine_info()
        self.pad_cycles = self.calibrate_pad()
        self.machine["pad_cycles"] = self.pad_cycles
        if self.torch_reason is None:
            reason = self.setup_symm_mem()
            if not self.agree(reason is None):  # the candidate lists must agree across ranks
                self.torch_reason = reason or "torch's fused ops are unavailable on another rank"
        self.setup_commgemm()
        self.machine["torch_symm_mem"] = self.torch_reason or "ok"
        self.machine["commgemm_backends"] = {b: (self.comm_reasons.get(b) or "ok") for b in self.args.backend_list}
        torch.cuda.synchronize()

    def machine_info(self):
        torch = self.torch
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception as e:  # noqa: BLE001
            nccl = f"unknown ({_short(e, 80)})"
        props = torch.cuda.get_device_properties(self.device)
        info = {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                "host": socket.gethostname(), "python": platform.python_version(), "torch": torch.__version__,
                "cuda": torch.version.cuda, "nccl": nccl, "gpu": torch.cuda.get_device_name(self.device),
                "gpu_memory_gib": round(props.total_memory / 2**30, 1), "nranks": self.size,
                "gpus": [n for n in self.gather_names()],
                "env": {k: os.environ.get(k) for k in sorted(set(NO_MULTICAST_ENV) | {
                    "COMMGEMM_LIB", "COMMGEMM_BACKEND", "COMMGEMM_CUBLASMP_LIB", "NCCL_P2P_DISABLE",
                    "NCCL_SHM_DISABLE", "TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP", "CUDA_DEVICE_MAX_CONNECTIONS"})}}
        return info

    def gather_names(self):
        names = [None] * self.size
        self.dist.all_gather_object(names, f"{socket.gethostname()}:cuda:{self.local_rank}:"
                                           f"{self.torch.cuda.get_device_name(self.device)}", group=self.world)
        return names

    def setup_symm_mem(self):
        """None when torch.ops.symm_mem's fused ops are usable, else why not."""
        torch = self.torch
        try:
            import torch.distributed._symmetric_memory as symm_mem
        except Exception as e:  # noqa: BLE001
            return f"torch {torch.__version__} has no torch.distributed._symmetric_memory ({_short(e, 120)})"
        ops = getattr(torch.ops, "symm_mem", None)
        fused = FUSED_OPS[self.args.dtype == "fp8"]
        for name in fused:
            if ops is None or not hasattr(ops, name):
                return f"torch {torch.__version__} has no torch.ops.symm_mem.{name}"
        if not self.group_name:
            return "the world process group has no group_name"
        # Older torch (<= 2.9) needs the group registered for symmetric memory;
        # newer ones deprecate the call (a FutureWarning) and need nothing.
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    enable(self.group_name)
            except Exception as e:  # noqa: BLE001
                return f"enable_symm_mem_for_group failed: {_short(e, 200)}"
        try:
            from torch._C._autograd import DeviceType
            from torch._C._distributed_c10d import _SymmetricMemory
            mc = bool(_SymmetricMemory.has_multicast_support(DeviceType.CUDA, self.device.index))
        except Exception as e:  # noqa: BLE001
            mc = f"unknown ({_short(e, 120)})"
        self.machine["symm_mem_multicast_support"] = mc
        if mc is True:
            # Multicast must never be used here; torch takes its multimem path
            # for small m when the device reports support.
            return ("symmetric memory reports multicast support although TORCH_SYMM_MEM_DISABLE_MULTICAST=1; "
                    "refusing to run torch's fused ops (they may use NVLS multicast)")
        sig = {}
        for name in fused:
            try:
                sig[name] = str(getattr(ops, name).default._schema)
            except Exception:  # noqa: BLE001
                sig[name] = "?"
        self.machine["symm_mem_schemas"] = sig
        self.ag_return_a_kw = "return_A" in sig.get("fused_all_gather_matmul", "")
        self.torch_schemas = sig
        try:
            get_backend = getattr(symm_mem, "get_backend", None)
            if get_backend is not None:
                self.machine["symm_mem_backend"] = str(get_backend(self.device))
        except Exception:  # noqa: BLE001
            pass
        return None

    def setup_commgemm(self):
        if str(REPO / "python") not in sys.path:
            sys.path.insert(0, str(REPO / "python"))
        try:
            import commgemm
            import commgemm.torch as cgt
            self.commgemm, self.cgt = commgemm, cgt
            self.machine["commgemm_library"] = str(commgemm.library_path())
            v = commgemm.library_version()
            self.machine["commgemm_version"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
            reason = None
        except Exception as e:  # noqa: BLE001
            reason = f"commgemm not importable/loadable: {_short(e, 200)}"
        if not self.agree(reason is None):
            for b in self.args.backend_list:
                self.comm_reasons[b] = reason or "commgemm not loadable on another rank"
            return
        self.cg_group = self.dist.new_group(backend="nccl")
        max_m = max(s[0] for s in self.args.shape_list)
        max_nk = max(max(s[1], s[2]) for s in self.args.shape_list)
        for b in self.args.backend_list:
            comm, reason = None, None
            try:
                base, _, algo = b.partition("-")
                kw = {"backend": base, "max_m": max(max_m, self.size), "max_n": max_nk, "max_k": max_nk,
                      "timeout_ms": self.args.timeout_ms}
                if algo:
                    kw["algo"] = algo
                if b == "cublasmp":
                    kw["op_backend"] = {"bulk": "nccl"}  # cuBLASMp has no bulk overlap (as commgemm-bench)
                comm = commgemm.Comm.from_process_group(self.cg_group, **kw)
                for op in self.args.op_list:
                    got = comm.backend(op)
                    if got != base:
                        reason = f"asked for backend {base}, the comm runs {op} on {got}"
            except Exception as e:  # noqa: BLE001
                reason = f"backend {b} unavailable: {_short(e)}"
            ok = self.agree(reason is None)
            if not ok and reason is None:
                reason = f"backend {b} unavailable on another rank"
            if ok:
                self.comms[b] = comm
            else:
                self.comm_reasons[b] = reason
                if comm is not None:
                    try:
                        comm.close()
                    except Exception:  # noqa: BLE001
                        pass

    def close(self):
        for comm in self.comms.values():
            try:
                comm.close()
            except Exception:  # noqa: BLE001
                pass
        self.torch.cuda.synchronize()
        self.dist.destroy_process_group()

    # ---- inputs and candidates ----

    def random(self, shape, salt):
        """Multiples of 1/8 in [-1, 1] (exact in bf16/fp16), different per rank and tensor."""
        torch = self.torch
        g = torch.Generator(device=self.device)
        g.manual_seed(self.args.seed * 1000003 + self.rank * 7919 + salt)
        return (torch.randint(-8, 9, shape, generator=g, device=self.device, dtype=torch.int32)
                .to(torch.float32) / 8).to(self.dtype).contiguous()

    def candidates(self, op, shape):
        """name -> callable returning the op's output (or None for a skipped
        candidate: name -> reason string)."""
        if self.args.dtype == "fp8":
            return self.candidates_fp8(op, shape)
        torch, dist, world = self.torch, self.dist, self.world
        m, n, k = shape
        P = self.size
        ls = local_shapes(op, m, n, k, P)
        x = self.random(ls["x"], 1)
        w = self.random(ls["w"], 2)
        wt = w.t()
        fns, skipped = {}, {}
        if op == "ag_gemm":
            x_full = torch.empty((m, k), dtype=self.dtype, device=self.device)
            dist.all_gather_into_tensor(x_full, x, group=world)  # the GEMM baseline's input
            gathered = torch.empty((m, k), dtype=self.dtype, device=self.device)

            def gemm():
                return torch.matmul(x_full, wt)

            def comm():
                dist.all_gather_into_tensor(gathered, x, group=world)
                return gathered

            def seq():
                g = torch.empty((m, k), dtype=self.dtype, device=self.device)
                dist.all_gather_into_tensor(g, x, group=world)
                return torch.matmul(g, wt)

            def fused():
                if self.ag_return_a_kw:
                    _, outs = torch.ops.symm_mem.fused_all_gather_matmul(x, [wt], 0, self.group_name,
                                                                         return_A=False)
                else:
                    _, outs = torch.ops.symm_mem.fused_all_gather_matmul(x, [wt], 0, self.group_name)
                return outs[0]

            def cg(b):
                comm_b = self.comms[b]
                return lambda: self.cgt.all_gather_matmul(x, w, comm=comm_b, m=m)  # the comm's backend: b
        else:
            partial = torch.matmul(x, wt)  # the collective baseline's input [m, n]
            if op == "gemm_rs":
                scattered = torch.empty((m // P, n), dtype=self.dtype, device=self.device)
            else:
                reduced = partial.clone()

            def gemm():
                return torch.matmul(x, wt)

            def comm():
                if op == "gemm_rs":
                    dist.reduce_scatter_tensor(scattered, partial, group=world)
                    return scattered
                dist.all_reduce(reduced, group=world)  # in place: the values grow, the time does not
                return reduced

            def seq():
                p = torch.matmul(x, wt)
                if op == "gemm_rs":
                    out = torch.empty((m // P, n), dtype=self.dtype, device=self.device)
                    dist.reduce_scatter_tensor(out, p, group=world)
                    return out
                dist.all_reduce(p, group=world)
                return p

            def fused():
                return torch.ops.symm_mem.fused_matmul_reduce_scatter(x, wt, "sum", 0, self.group_name)

            def cg(b):
                comm_b = self.comms[b]
                if op == "gemm_rs":
                    return lambda: self.cgt.matmul_reduce_scatter(x, w, comm=comm_b)
                return lambda: self.cgt.matmul_all_reduce(x, w, comm=comm_b)

        fns[GEMM], fns[COMM], fns[SEQ] = gemm, comm, seq
        if self.args.cgm_gemm and self.args.backend_list:
            first = self.args.backend_list[0]
            if first in self.comms:
                a = x_full if op == "ag_gemm" else x
                comm_first = self.comms[first]
                fns[CGM_GEMM] = lambda: self.cgt.bulk_matmul_collective(a, w, comm=comm_first)[0]
            else:
                skipped[CGM_GEMM] = self.comm_reasons.get(first, "not created")
        if op in ("ag_gemm", "gemm_rs"):
            if self.torch_reason is None:
                fns[TORCH] = fused
            else:
                skipped[TORCH] = self.torch_reason
        self.add_commgemm(fns, skipped, cg)
        return fns, skipped

    def add_commgemm(self, fns, skipped, cg):
        """One candidate per --backend: cg(backend) where its comm was made, else
        a skipped row saying why."""
        for b in self.args.backend_list:
            if b in self.comms:
                fns[f"commgemm-{b}"] = cg(b)
            else:
                skipped[f"commgemm-{b}"] = self.comm_reasons.get(b, "not created")

    def fp8_inputs(self, op, shape):
        """This rank's fp8 X and W (the codes of random(), so the same on every
        call) and their per-tensor scales (0-d float32, the same on every rank)."""
        torch = self.torch
        ls = local_shapes(op, *shape, self.size)
        sx = torch.tensor(FP8_X_SCALE, dtype=torch.float32, device=self.device)
        sw = torch.tensor(FP8_W_SCALE, dtype=torch.float32, device=self.device)
        return self.random(ls["x"], 1), self.random(ls["w"], 2), sx, sw

    def candidates_fp8(self, op, shape):
        """--dtype fp8: candidates() with e4m3 X and W, per-tensor scales, bf16 Y."""
        torch, dist, world = self.torch, self.dist, self.world
        m, n, k = shape
        P = self.size
        x, w, sx, sw = self.fp8_inputs(op, shape)
        wt = w.t()  # [k, n_loc], column-major: what _scaled_mm's B must be
        out = self.out_dtype
        fns, skipped = {}, {}

        def mm(a):
            return torch._scaled_mm(a, wt, scale_a=sx, scale_b=sw, out_dtype=out)

        def gather(dst):  # NCCL moves the fp8 codes as bytes
            dist.all_gather_into_tensor(dst.view(torch.uint8), x.view(torch.uint8), group=world)
            return dst

        if op == "ag_gemm":
            x_full = gather(torch.empty((m, k), dtype=self.dtype, device=self.device))
            gathered = torch.empty((m, k), dtype=self.dtype, device=self.device)
            fns[GEMM] = lambda: mm(x_full)
            fns[COMM] = lambda: gather(gathered)
            fns[SEQ] = lambda: mm(gather(torch.empty((m, k), dtype=self.dtype, device=self.device)))
            kw = {"A": x, "Bs": [wt], "A_scale": sx, "B_scales": [sw], "gather_dim": 0,
                  "group_name": self.group_name, "biases": [None], "result_scales": [None], "out_dtypes": [out],
                  "use_fast_accum": [False], "return_A": False}
            fused_name = "fused_all_gather_scaled_matmul"

            def cg(b):
                comm_b = self.comms[b]
                return lambda: self.cgt.all_gather_matmul(x, w, comm=comm_b, m=m, x_scale=sx, w_scale=sw,
                                                          out_dtype=out)
        else:
            partial = mm(x)  # the collective baseline's input [m, n], bf16
            reduced = partial.clone()

            def collective(src):
                if op == "gemm_rs":
                    dst = torch.empty((m // P, n), dtype=out, device=self.device)
                    dist.reduce_scatter_tensor(dst, src, group=world)
                    return dst
                dist.all_reduce(src, group=world)  # in place: the values grow, the time does not
                return src

            fns[GEMM] = lambda: mm(x)
            fns[COMM] = lambda: collective(partial if op == "gemm_rs" else reduced)
            fns[SEQ] = lambda: collective(mm(x))
            kw = {"A": x, "B": wt, "A_scale": sx, "B_scale": sw, "reduce_op": "sum", "scatter_dim": 0,
                  "orig_scatter_dim": 0, "scatter_dim_after_maybe_reshape": 0, "group_name": self.group_name,
                  "output_shape": [m, n], "bias": None, "result_scale": None, "out_dtype": out,
                  "use_fast_accum": False}
            fused_name = "fused_scaled_matmul_reduce_scatter"

            def cg(b):
                comm_b = self.comms[b]
                f = self.cgt.matmul_reduce_scatter if op == "gemm_rs" else self.cgt.matmul_all_reduce
                return lambda: f(x, w, comm=comm_b, x_scale=sx, w_scale=sw, out_dtype=out)

        if self.args.cgm_gemm and self.args.backend_list:
            skipped[CGM_GEMM] = "no fp8 form: commgemm.torch.bulk_matmul_collective takes no scales"
        if op in ("ag_gemm", "gemm_rs"):
            reason = self.torch_reason
            if reason is None:
                try:
                    fused_kw = schema_kwargs(self.torch_schemas[fused_name], kw)
                    fused_op = getattr(torch.ops.symm_mem, fused_name)
                    pick = (lambda r: r[1][0]) if op == "ag_gemm" else (lambda r: r)
                    fns[TORCH] = lambda: pick(fused_op(**fused_kw))
                except (KeyError, ValueError) as e:
                    reason = f"torch.ops.symm_mem.{fused_name}: {_short(e)}"
            if reason is not None:
                skipped[TORCH] = reason
        self.add_commgemm(fns, skipped, cg)
        return fns, skipped

    def fp8_reference(self, op, shape):
        """The exact result of --dtype fp8's op on this rank, fp32: the
        dequantized inputs (codes k/8 times powers of two) multiplied without
        TF32 and, for RS and AR, summed over the ranks in fp32 by NCCL; every
        product and sum is a multiple of 2^-6 * x_scale * w_scale below 2^24 of
        those units, so exact in any order."""
        torch, dist, world = self.torch, self.dist, self.world
        m, n, k = shape
        x, w, sx, sw = self.fp8_inputs(op, shape)
        if op == "ag_gemm":
            full = torch.empty((m, k), dtype=self.dtype, device=self.device)
            dist.all_gather_into_tensor(full.view(torch.uint8), x.view(torch.uint8), group=world)
            x = full
        xf, wf = x.float() * sx, w.float() * sw
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            r = torch.matmul(xf, wf.t())
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        if op == "gemm_rs":
            out = torch.empty((m // self.size, n), dtype=torch.float32, device=self.device)
            dist.reduce_scatter_tensor(out, r, group=world)
            return out
        if op == "gemm_ar":
            dist.all_reduce(r, group=world)
        return r

    def reference(self, op, shape, outs, failed):
        """(reference output, None) or (None, why there is none)."""
        if self.args.dtype == "fp8":
            try:
                ref = self.fp8_reference(op, shape)
                self.sync()
                err = None
            except Exception as e:  # noqa: BLE001
                ref, err = None, _short(e)
            if not self.agree(err is None):
                return None, f"no reference: the dequantized product failed ({err or 'on another rank'})"
            return ref, None
        if SEQ not in outs:
            return None, f"no reference: {SEQ} failed ({failed.get(SEQ)})"
        return outs[SEQ], None

    # ---- checking ----

    def count_wrong(self, out, ref, tol):
        """Elements with |out - ref| > tol * max|ref| (NaN/Inf count), and max|diff| / max|ref|."""
        if out is None or tuple(out.shape) != tuple(ref.shape):
            return max(ref.numel(), 1), float("inf")
        if ref.numel() == 0:
            return 0, 0.0
        r = ref.float()
        d = (out.float() - r).abs()
        scale = max(r.abs().max().item(), 1e-30)
        bad = ~(d <= tol * scale)  # NaN compares false: counted
        return int(bad.sum().item()), float(d.max().item() / scale)

    # ---- measuring ----

    def probe(self, fns):
        """One call of each candidate (with a barrier before each). Returns
        (outputs, reasons): candidates that failed on any rank are dropped."""
        outs, reasons = {}, {}
        for name, fn in list(fns.items()):
            self.barrier()
            err = None
            try:
                out = fn()
                self.sync()
            except Exception as e:  # noqa: BLE001
                err = _short(e)
                out = None
                if os.environ.get("COMPARE_TORCH_TRACEBACK"):
                    traceback.print_exc()
            ok = self.agree(err is None)
            if ok:
                outs[name] = out
            else:
                reasons[name] = err or "failed on another rank"
                del fns[name]
        return outs, reasons

    def time_rounds(self, fns, rounds_warm, rounds, replay=None):
        """Interleaved rounds: every candidate once per round, order rotated,
        a barrier before each measurement. Returns (name -> [ms per timed
        round], name -> last output)."""
        names = list(fns)
        times = {nm: [] for nm in names}
        last = {}
        for i in range(rounds_warm + rounds):
            events = []
            for nm in round_order(names, i):
                self.barrier()
                start, end = self.event(), self.event()
                self.pad()
                if self.args.align:
                    self.align()
                start.record()
                if replay is not None:
                    replay[nm].replay()
                else:
                    last[nm] = fns[nm]()
                end.record()
                events.append((nm, start, end))
            self.sync()
            if i >= rounds_warm:
                for nm, start, end in events:
                    times[nm].append(start.elapsed_time(end))
        self.barrier()
        return times, last

    def summarize(self, names, times):
        """name -> (slowest rank's median µs, per-rank medians µs)."""
        mine = [median([t * 1000.0 for t in times.get(nm, [])]) for nm in names]
        allr = self.gather_floats(mine)
        return {nm: (slowest([allr[r][j] for r in range(self.size)]), [allr[r][j] for r in range(self.size)])
                for j, nm in enumerate(names)}

    def check_all(self, outs, ref, tol):
        """name -> (wrong summed over ranks, max relative diff over ranks)."""
        names = [nm for nm in outs if nm not in BASELINES]
        local = {nm: self.count_wrong(outs[nm], ref, tol) for nm in names}
        rel = self.gather_floats([local[nm][1] if math.isfinite(local[nm][1]) else 1e30 for nm in names])
        res = {}
        for j, nm in enumerate(names):
            res[nm] = (self.sum_int(local[nm][0]), max(rel[r][j] for r in range(self.size)))
        return res

    def capture(self, fns):
        """CUDA graphs of each candidate (after the eager rounds). Returns
        (graphs, static outputs, reasons for those that could not be captured)."""
        graphs, outs, reasons = {}, {}, {}
        for name, fn in fns.items():
            self.barrier()
            err, g, out = None, None, None
            try:
                g, out = self.graph_capture(fn)
            except Exception as e:  # noqa: BLE001
                err = _short(e)
                g = out = None
                try:
                    self.sync()
                except Exception:  # noqa: BLE001
                    pass
            if self.agree(err is None):
                graphs[name], outs[name] = g, out
            else:
                reasons[name] = f"not capturable: {err or 'capture failed on another rank'}"
        return graphs, outs, reasons

    def run_shape(self, op, shape):
        """Rows (rank 0's view; every rank computes the same) for one (op, shape)."""
        args = self.args
        problem = shape_problem(op, *shape, self.size)
        names = candidate_names(op, args.backend_list, args.cgm_gemm)
        if args.no_torch and TORCH in names:
            names.remove(TORCH)
        tol = tolerance(args.tol, args.dtype, op, self.size)
        extra = {"dtype": args.dtype, "tol": tol}
        if problem:
            return build_rows(op, shape, "eager", {nm: {"status": "skipped", "reason": problem} for nm in names},
                              names, extra)
        fns, skipped = self.candidates(op, shape)
        results = {nm: {"status": "skipped", "reason": why} for nm, why in skipped.items()}
        outs, failed = self.probe(fns)
        for nm, why in failed.items():
            status = failure_status(nm, self.size)
            results[nm] = {"status": status, "reason": why if status == "error" else f"fails on one rank: {why}"}
        ref, why = self.reference(op, shape, outs, failed)
        if ref is None:
            for nm in fns:
                results[nm] = {"status": "error", "reason": why}
            return build_rows(op, shape, "eager", results, names, extra)
        first = self.check_all(outs, ref, tol)
        del outs
        times, last = self.time_rounds(fns, args.warmup, args.iters)
        final = self.check_all(last, ref, tol)
        del last
        summary = self.summarize(list(fns), times)
        for nm in fns:
            t, per_rank = summary[nm]
            res = {"status": "ok", "time_us": t, "per_rank_median_us": per_rank}
            if nm in first:
                res["wrong"] = first[nm][0] + final[nm][0]
                res["max_rel_diff"] = max(first[nm][1], final[nm][1])
            results[nm] = res
        rows = build_rows(op, shape, "eager", results, names, extra)
        if args.graph:
            rows += self.run_graph(op, shape, fns, ref, results, names, extra)
        del fns
        self.release()
        return rows

    def run_graph(self, op, shape, fns, ref, eager, names, extra):
        args = self.args
        graphs, gouts, reasons = self.capture(fns)
        results = {nm: dict(r) for nm, r in eager.items() if r.get("status") != "ok"}
        for nm, why in reasons.items():
            results[nm] = {"status": "skipped", "reason": why}
        if graphs:
            times, _ = self.time_rounds({nm: None for nm in graphs}, args.warmup, args.iters, replay=graphs)
            checked = self.check_all(gouts, ref, extra["tol"])  # the graphs' static outputs after the replays
            summary = self.summarize(list(graphs), times)
            for nm in graphs:
                t, per_rank = summary[nm]
                res = {"status": "ok", "time_us": t, "per_rank_median_us": per_rank}
                if nm in checked:
                    res["wrong"], res["max_rel_diff"] = checked[nm]
                results[nm] = res
        for base in BASELINES:  # ideal from the eager baselines when a baseline could not be captured
            if results.get(base, {}).get("time_us") is None and eager.get(base, {}).get("time_us") is not None:
                results[base] = dict(eager[base], reason="eager time (not capturable)")
        del graphs, gouts
        self.release()
        return build_rows(op, shape, "graph", results, names, extra)


def main(argv=None):
    args = parse_args(argv)
    os.environ.update(NO_MULTICAST_ENV)  # before torch, NCCL or NVSHMEM start: no NVLS/multicast anywhere
    runner = Runner(args)
    rank0 = runner.rank == 0

    def log(msg):
        if rank0:
            print(msg, file=sys.stderr, flush=True)

    runner.setup()
    log(f"# compare_torch: {runner.size} ranks, {runner.machine.get('gpu')}, torch {runner.machine.get('torch')}, "
        f"NCCL {runner.machine.get('nccl')}; torch_symm_mem: {runner.machine.get('torch_symm_mem')}; "
        f"commgemm: {runner.machine.get('commgemm_backends')}")
    opts = options_dict(args)
    rows = []
    t0 = time.time()
    for shape in args.shape_list:
        for op in args.op_list:
            ts = time.time()
            new = runner.run_shape(op, shape)
            rows += new
            if rank0:
                log(format_table(new).split("\n", 2)[2] + f"\n# {op} {format_shape(shape)}: {time.time() - ts:.1f} s")
                if args.json:
                    write_json(args.json, build_report(rows, runner.machine, opts, complete=False))
    report = build_report(rows, runner.machine, opts, complete=True)
    report["wall_s"] = round(time.time() - t0, 1)
    if rank0:
        m = runner.machine
        head = (f"# compare_torch.py: {m.get('date_utc')}, {runner.size} x {m.get('gpu')}, torch {m.get('torch')}, "
                f"CUDA {m.get('cuda')}, NCCL {m.get('nccl')}, commgemm {m.get('commgemm_version', '?')}\n"
                f"# {dtype_line(args)}, warmup {args.warmup}, iters {args.iters}; time = slowest rank's median (µs); "
                f"ideal = max(gemm, comm); ratio = time / ideal; vs X = X's time / this time\n")
        text = head + "\n" + format_table(rows) + "\n\n" + (
            f"# wrong values: {report['wrong']}; errors: {report['errors']}; {'OK' if report['ok'] else 'FAILED'}")
        print(text, flush=True)
        if args.table:
            pathlib.Path(args.table).write_text(text + "\n")
        if args.json:
            write_json(args.json, report)
    runner.close()
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
