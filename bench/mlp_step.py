"""The fused MLP step against the same step with separate bias and GELU kernels.

A Megatron MLP block, sequence parallel: fc1 column-parallel (AG+GEMM) with a bias and the
tanh GELU, fc2 row-parallel (GEMM+RS) with a bias. Two ways of running it on the same
commgemm comm, parameters and inputs:

  fused     commgemm.torch.ParallelMLP as the layers run it: fc1's AG+GEMM applies bias and
            GELU in its GELU_AUX epilogue, fc2's GEMM+RS adds its bias; the backward's fc2
            dgrad is an AG+GEMM with DGELU_BGRAD (gelu' and fc1's bias gradient), fc2's weight
            gradient a GEMM with BGRAD (fc2's bias gradient).
  separate  ColumnParallelLinear and RowParallelLinear with skip_bias_add=True, no activation:
            the same overlapped GEMMs without epilogues; the biases, the GELU, its derivative
            and the bias gradients are torch's own kernels (y + b, F.gelu(approximate="tanh"),
            autograd's sums; fc2's bias gradient summed over the ranks as the layer does).

    torchrun --standalone --nproc-per-node 1 bench/mlp_step.py                  # one GPU
    torchrun --standalone --nproc-per-node 2 bench/mlp_step.py --json mlp.json
    python3 bench/mlp_step.py --device cpu --tokens 64 --hidden 32 --ffn 64   # host backend, CPU

Modes: "fwd" (the forward with autograd on, as in training) and "fwd+bwd" (forward, then
torch.autograd.grad of the output for dY: dX and every parameter's gradient). Each mode runs
both ways once (checked: the fused output and gradients against the separate ones, elements
outside tol * max|separate| are wrong, summed over ranks), then --warmup + --iters rounds, each
running both ways in an order rotated by the round, each measurement after a barrier and
bracketed by CUDA events (wall clock on CPU); time = each rank's median, then the slowest
rank's; the last timed round's results are checked again. A backend where ParallelMLP would
not fuse (Comm.supports("epilogue") false, as on p2p, or an ffn split whose shards are not
multiples of 8 on a GPU backend) is a skipped row saying why. Exit status 1 when a value is
wrong or a way failed.
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import socket
import statistics
import sys
import time
import uuid

# NVLink multicast stays off (as compare_torch.py): set before torch starts
for _name in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(_name, "0" if _name == "NCCL_NVLS_ENABLE" else "1")

# Llama-3 8B's hidden size and FFN width, 8192 tokens (sequence 4096 x batch 2)
DEFAULT_TOKENS, DEFAULT_HIDDEN, DEFAULT_FFN = 8192, 4096, 14336
MODES = ("fwd", "fwd+bwd")
WAYS = ("separate", "fused")
GRAD_NAMES = ("dx", "dw1", "db1", "dw2", "db2")
DEFAULT_TOL = {"bf16": 2e-2, "fp16": 5e-3, "fp32": 1e-4}
REPO = pathlib.Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS, help="rows m over all ranks (any count)")
    p.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN)
    p.add_argument("--ffn", type=int, default=DEFAULT_FFN)
    p.add_argument("--dtype", choices=sorted(DEFAULT_TOL), default="bf16")
    p.add_argument("--device", choices=["gpu", "cpu"], default="gpu",
                   help="gpu (NCCL group, CUDA events) or cpu (host backend, gloo, wall clock)")
    p.add_argument("--backends", default=None,
                   help="commgemm backends, comma-separated (default: p2p,nccl on gpu, host on cpu)")
    p.add_argument("--modes", default=",".join(MODES), help="fwd, fwd+bwd or both (default both)")
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("-i", "--iters", type=int, default=20)
    p.add_argument("--tol", type=float, default=None, help="relative tolerance (default: 2e-2 bf16, "
                   "5e-3 fp16, 1e-4 fp32), of max|separate| per tensor")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=None, help="write the rows as JSON (rank 0)")
    p.add_argument("--inject-wrong-value", action="store_true",
                   help="rank 0 corrupts one value of the fused output before each check (a test of the check)")
    args = p.parse_args(argv)
    args.backend_list = [b for b in (args.backends or ("host" if args.device == "cpu" else "p2p,nccl"))
                         .split(",") if b]
    args.mode_list = [m for m in args.modes.split(",") if m]
    bad = [m for m in args.mode_list if m not in MODES]
    if bad or not args.mode_list:
        p.error(f"--modes {args.modes}: expected fwd, fwd+bwd or both, comma-separated")
    for name in ("tokens", "hidden", "ffn", "iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name} {getattr(args, name)}: expected at least 1")
    if args.warmup < 0:
        p.error(f"--warmup {args.warmup}: expected 0 or more")
    if args.tol is None:
        args.tol = DEFAULT_TOL[args.dtype]
    return args


# --------------------------------------------------------------------------
# pure parts
# --------------------------------------------------------------------------


def round_order(i):
    """The ways of round i: rotated, so that neither always runs first."""
    return WAYS[i % 2:] + WAYS[:i % 2]


def compare(ref, got, tol):
    """(elements of `got` outside tol * max|ref| of `ref`, NaN included; the largest finite
    difference relative to max|ref|) for two tensors of one shape."""
    r, g = ref.float(), got.float()
    if r.shape != g.shape:
        return r.numel() or 1, float("inf")
    scale = max(float(r.abs().max()) if r.numel() else 0.0, 1e-30)
    diff = (g - r).abs()
    bad = ~(diff <= tol * scale)  # NaN counts
    finite = diff[~diff.isnan()]
    worst = float(finite.max()) / scale if finite.numel() else 0.0
    return int(bad.sum()), worst


def compare_results(ref, got, tol):
    """compare() over the output and gradients of a step: (wrong, worst relative difference)."""
    wrong, worst = 0, 0.0
    for r, g in zip(ref, got):
        w, d = compare(r, g, tol)
        wrong, worst = wrong + w, max(worst, d)
    return wrong, worst


def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


def format_table(rows):
    lines = ["| backend | mode | tokens | hidden | ffn | separate µs | fused µs | speed-up | #wrong | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['mode']} | {r['tokens']} | {r['hidden']} | {r['ffn']} | "
                     f"{_fmt(r.get('separate_us'), '.1f')} | {_fmt(r.get('fused_us'), '.1f')} | "
                     f"{_fmt(r.get('speedup'), '.3f')} | {_fmt(r.get('wrong'), 'd')} | {r.get('reason') or ''} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# the two ways
# --------------------------------------------------------------------------


class SeparateMLP:
    """The layers without fused epilogues: bias, GELU and their gradients as torch kernels."""

    def __init__(self, torch, cgt, hidden, ffn, comm, dtype, device, backend):
        self.F = torch.nn.functional
        kw = {"bias": True, "skip_bias_add": True, "dtype": dtype, "device": device, "backend": backend}
        self.fc1 = cgt.ColumnParallelLinear(hidden, ffn, comm, **kw)
        self.fc2 = cgt.RowParallelLinear(ffn, hidden, comm, **kw)

    def params(self):
        return [self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias]

    def __call__(self, x, m):
        y1, b1 = self.fc1(x, m)
        h = self.F.gelu(y1 + b1, approximate="tanh")
        y2, b2 = self.fc2(h)
        return y2 + b2


class FusedMLP:
    """commgemm.torch.ParallelMLP with the separate way's parameters."""

    def __init__(self, torch, cgt, hidden, ffn, comm, dtype, device, backend, like):
        self.mlp = cgt.ParallelMLP(hidden, ffn, comm, bias=True, dtype=dtype, device=device, backend=backend)
        with torch.no_grad():
            for mine, theirs in zip(self.params(), like.params()):
                mine.copy_(theirs)

    def params(self):
        return [self.mlp.fc1.weight, self.mlp.fc1.bias, self.mlp.fc2.weight, self.mlp.fc2.bias]

    def fuses(self, torch):
        with torch.enable_grad():
            return self.mlp._fused()

    def __call__(self, x, m):
        return self.mlp(x, m)


def fill_parameters(torch, sep, hidden, ffn, seed, device):
    """The full parameters (the same on every rank, uniform in +-1/sqrt(fan_in)), this rank's shards."""
    g = torch.Generator(device=device).manual_seed(seed)

    def uniform(shape, fan_in):
        return (torch.rand(shape, generator=g, device=device) * 2 - 1) / fan_in ** 0.5

    w1, b1 = uniform((ffn, hidden), hidden), uniform((ffn,), hidden)
    w2, b2 = uniform((hidden, ffn), ffn), uniform((hidden,), ffn)
    o1, n1 = sep.fc1.out_offset, sep.fc1.out_local
    o2, n2 = sep.fc2.in_offset, sep.fc2.in_local
    with torch.no_grad():
        for mine, full in zip(sep.params(), (w1[o1:o1 + n1], b1[o1:o1 + n1], w2[:, o2:o2 + n2], b2)):
            mine.copy_(full)


class Runner:
    """One rank: torch.distributed, the device, the timers."""

    def __init__(self, args):
        import torch
        import torch.distributed as dist
        if str(REPO / "python") not in sys.path:  # the checkout's package (COMMGEMM_LIB: its library)
            sys.path.insert(0, str(REPO / "python"))
        from commgemm import torch as cgt
        import commgemm
        self.torch, self.dist, self.cgt, self.commgemm, self.args = torch, dist, cgt, commgemm, args
        self.gpu = args.device == "gpu"
        launched = "RANK" in os.environ
        if self.gpu:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        kw = {"timeout": datetime.timedelta(seconds=600)}
        if self.gpu:
            kw["device_id"] = self.device
        if not launched:  # one rank, no launcher
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            kw.update(init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        dist.init_process_group("nccl" if self.gpu else "gloo", **kw)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize()

    def barrier(self):
        t = self.torch.ones(1, device=self.device)
        self.dist.all_reduce(t)
        self.sync()

    def all_reduce(self, value, op):
        t = self.torch.tensor([float(value)], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=op)
        return t.item()

    def timed(self, fn):
        """(fn's result, its time in µs)."""
        self.barrier()
        if self.gpu:
            start, stop = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            out = fn()
            stop.record()
            stop.synchronize()
            return out, start.elapsed_time(stop) * 1e3
        t0 = time.perf_counter()
        out = fn()
        return out, (time.perf_counter() - t0) * 1e6

    def make_comm(self, backend):
        """(comm, None) or (None, why), agreed by every rank."""
        comm, reason = None, None
        try:
            if self.gpu:
                comm = self.commgemm.Comm.from_process_group(
                    self.dist.new_group(backend="nccl"), backend=backend,
                    max_m=max(self.args.tokens, self.size), max_n=max(self.args.hidden, self.args.ffn),
                    max_k=max(self.args.hidden, self.args.ffn))
            else:
                name = [f"mlp-step-{os.getpid()}-{uuid.uuid4().hex[:8]}"]
                self.dist.broadcast_object_list(name, src=0)
                comm = self.commgemm.Comm.local(self.rank, self.size, name[0], backend=backend, timeout_ms=60000)
            got = {comm.backend(op) for op in ("ag_gemm", "gemm_rs")}
            if got != {backend}:
                reason = f"asked for backend {backend}, the comm runs ag_gemm/gemm_rs on {sorted(got)}"
        except Exception as e:  # noqa: BLE001
            reason = f"backend {backend} unavailable: {type(e).__name__}: {e}".replace("\n", " ")[:300]
        if self.all_reduce(0 if reason is None else 1, self.dist.ReduceOp.MAX) and reason is None:
            reason = f"backend {backend} unavailable on another rank"
        if reason is not None and comm is not None:
            comm.close()
            comm = None
        return comm, reason

    def inputs(self):
        """This rank's rows of X (requires grad) and of dY."""
        torch, a = self.torch, self.args
        rows = self.commgemm.shard_rows(a.tokens, self.rank, self.size)
        g = torch.Generator(device=self.device).manual_seed(a.seed * 1000 + self.rank + 1)
        x = torch.randn((rows, a.hidden), generator=g, device=self.device).to(self.dtype).requires_grad_()
        dy = torch.randn((rows, a.hidden), generator=g, device=self.device).to(self.dtype)
        return x, dy

    def step_fn(self, way, mode, x, dy):
        """The call that runs one way in one mode: returns (y,) or (y, dX, dW1, db1, dW2, db2)."""
        torch, m = self.torch, self.args.tokens

        def fwd():
            with torch.enable_grad():
                return (way(x, m),)

        def fwd_bwd():
            with torch.enable_grad():
                y = way(x, m)
                return (y,) + tuple(torch.autograd.grad(y, [x] + way.params(), dy))
        return fwd if mode == "fwd" else fwd_bwd

    def check(self, ref, got):
        """Wrong elements over ranks and the worst relative difference over ranks."""
        got = list(got)
        if self.args.inject_wrong_value and self.rank == 0 and got[0].numel():
            got[0] = got[0].detach().clone()
            got[0].view(-1)[0] = 1e6
        wrong, worst = compare_results([t.detach() for t in ref], [t.detach() for t in got], self.args.tol)
        return (int(self.all_reduce(wrong, self.dist.ReduceOp.SUM)),
                self.all_reduce(worst, self.dist.ReduceOp.MAX))

    def run_backend(self, backend):
        a = self.args
        base = {"backend": backend, "tokens": a.tokens, "hidden": a.hidden, "ffn": a.ffn, "dtype": a.dtype,
                "nranks": self.size}
        comm, reason = self.make_comm(backend)
        if comm is None:
            return [dict(base, mode=mode, status="skipped", reason=reason) for mode in a.mode_list]
        try:
            sep = SeparateMLP(self.torch, self.cgt, a.hidden, a.ffn, comm, self.dtype, self.device, backend)
            fill_parameters(self.torch, sep, a.hidden, a.ffn, a.seed, self.device)
            fused = FusedMLP(self.torch, self.cgt, a.hidden, a.ffn, comm, self.dtype, self.device, backend, sep)
            if not fused.fuses(self.torch):
                why = (f"ParallelMLP does not fuse on {backend}: Comm.supports('epilogue') = "
                       f"{comm.supports('epilogue', backend)}, ('bulk_epilogue') = "
                       f"{comm.supports('bulk_epilogue')}, epilogue_fits(ffn shards "
                       f"{list(sep.fc1.partition)}) = {all(comm.epilogue_fits(w, backend) for w in sep.fc1.partition)}")
                return [dict(base, mode=mode, status="skipped", reason=why) for mode in a.mode_list]
            x, dy = self.inputs()
            ways = {"separate": sep, "fused": fused}
            return [self.run_mode(dict(base, mode=mode), ways, mode, x, dy) for mode in a.mode_list]
        finally:
            comm.close()

    def run_mode(self, row, ways, mode, x, dy):
        a = self.args
        fns = {name: self.step_fn(way, mode, x, dy) for name, way in ways.items()}
        try:
            first = {name: fns[name]() for name in WAYS}
            wrong, worst = self.check(first["separate"], first["fused"])
            del first
            times = {name: [] for name in WAYS}
            last = {}
            for i in range(a.warmup + a.iters):
                for name in round_order(i):
                    out, us = self.timed(fns[name])
                    if i >= a.warmup:
                        times[name].append(us)
                    if i == a.warmup + a.iters - 1:
                        last[name] = out
                    del out
            w2, d2 = self.check(last["separate"], last["fused"])
        except Exception as e:  # noqa: BLE001
            return dict(row, status="error", reason=f"{type(e).__name__}: {e}".replace("\n", " ")[:300])
        med = {name: self.all_reduce(statistics.median(t), self.dist.ReduceOp.MAX) for name, t in times.items()}
        return dict(row, status="ok", reason=None, separate_us=med["separate"], fused_us=med["fused"],
                    speedup=med["separate"] / med["fused"] if med["fused"] > 0 else None,
                    wrong=wrong + w2, max_rel_diff=max(worst, d2), tol=a.tol,
                    per_rank_us={name: statistics.median(t) for name, t in times.items()})

    def machine(self):
        torch = self.torch
        info = {"date": datetime.date.today().isoformat(), "host": platform.node(), "torch": torch.__version__,
                "commgemm": self.commgemm.__version__, "library": str(self.commgemm.library_path())}
        if self.gpu:
            info.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(self.device))
        return info


def main(argv=None):
    args = parse_args(argv)
    runner = Runner(args)
    rows = []
    for backend in args.backend_list:
        rows.extend(runner.run_backend(backend))
    failed = sum(r["status"] == "error" for r in rows) + sum(r.get("wrong") or 0 for r in rows)
    if runner.rank == 0:
        print(f"# mlp_step: {runner.size} ranks, {args.device}, {args.dtype}, tokens {args.tokens}, hidden "
              f"{args.hidden}, ffn {args.ffn}, warmup {args.warmup}, iters {args.iters}, tol {args.tol}")
        print(format_table(rows), flush=True)
        if args.json:
            options = {k: v for k, v in vars(args).items() if k not in ("backend_list", "mode_list")}
            with open(args.json, "w") as f:
                json.dump({"tool": "mlp_step", "nranks": runner.size, "options": options,
                           "machine": runner.machine(), "rows": rows, "complete": True}, f, indent=1)
    runner.barrier()
    runner.dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
