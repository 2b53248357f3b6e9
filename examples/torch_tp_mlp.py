"""A tensor-parallel MLP (column-parallel -> GELU -> row-parallel, sequence
parallel) trained for a few steps with commgemm's overlapped layers.

    torchrun --nproc-per-node 2 examples/torch_tp_mlp.py              # commgemm on GPUs
    torchrun --nproc-per-node 2 examples/torch_tp_mlp.py --reference  # torch.distributed + matmuls
    torchrun --nproc-per-node 2 examples/torch_tp_mlp.py --compare    # both; exit 1 if losses differ
    torchrun --nproc-per-node 2 examples/torch_tp_mlp.py --device cpu # host backend, CPU tensors
    commgemm-run -n 2 python3 examples/torch_tp_mlp.py --device cpu --compare   # the same under commgemm-run

Ranks come from torchrun (RANK, WORLD_SIZE, MASTER_ADDR/PORT, LOCAL_RANK) or
commgemm-run (COMMGEMM_RANK, COMMGEMM_NRANKS; torch.distributed then meets in
a file store named after COMMGEMM_RENDEZVOUS, and rank r takes GPU r). Every
rank builds the same full weights from the seed and keeps its shard; the
tokens (rows) are split over the ranks with the ceil split, so any --tokens
works (uneven shards included). The loss printed is the global mean squared
error, identical on every rank. Flags are spelled as jax_tp_mlp.py's:
--device gpu|cpu, --dtype fp32|bf16|fp16 (cuda, float32, bfloat16, float16
are accepted too).
"""

import argparse
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import commgemm
from commgemm import torch as cgt
from commgemm import torch_reference as ref

# --device gpu|cpu and --dtype fp32|bf16|fp16 (as the other example's); these names are accepted too
ALIASES = {"cuda": "gpu", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=4099, help="rows of the activations (any count)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--dtype", type=str.lower, choices=["fp32", "bf16", "fp16", "float32", "bfloat16", "float16"],
                   default="bf16")
    p.add_argument("--backend", default=None, help="commgemm backend: p2p, nccl, cublasmp (default: auto)")
    p.add_argument("--device", type=str.lower, choices=["gpu", "cpu", "cuda"], default="gpu",
                   help="gpu, or cpu: the host backend on CPU tensors (gloo for the reference collectives)")
    p.add_argument("--seed", type=int, default=1234)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--reference", action="store_true", help="torch.distributed collectives + plain matmuls")
    mode.add_argument("--compare", action="store_true", help="run both; exit 1 if the losses differ")
    args = p.parse_args(argv)
    args.device, args.dtype = ALIASES.get(args.device, args.device), ALIASES.get(args.dtype, args.dtype)
    return args


def init_distributed(backend, gpu):
    """torch.distributed's default group, from torchrun's or commgemm-run's
    variables; on GPUs also the device. Returns the device and the file
    store's path (None under torchrun)."""
    launched_by_commgemm_run = "COMMGEMM_RANK" in os.environ and "COMMGEMM_NRANKS" in os.environ
    if not launched_by_commgemm_run and "RANK" not in os.environ:
        sys.exit("torch_tp_mlp.py: no launcher found (neither COMMGEMM_RANK nor RANK is set); start it with "
                 "torchrun --nproc-per-node N examples/torch_tp_mlp.py ... or "
                 "commgemm-run -n N python3 examples/torch_tp_mlp.py ...")
    local_rank = int(os.environ["COMMGEMM_RANK"] if launched_by_commgemm_run else os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    kwargs = {"device_id": device} if gpu else {}
    store = None
    if launched_by_commgemm_run:
        # commgemm-run starts every rank on this machine: a file store its ranks share
        store = os.path.join(tempfile.gettempdir(), f"torch_tp_mlp-{os.environ.get('COMMGEMM_RENDEZVOUS', 'run')}")
        dist.init_process_group(backend, init_method=f"file://{store}", rank=int(os.environ["COMMGEMM_RANK"]),
                                world_size=int(os.environ["COMMGEMM_NRANKS"]), **kwargs)
    else:
        dist.init_process_group(backend, **kwargs)
    return device, store


def finish_distributed(store):
    """Leaves torch.distributed; rank 0 then removes the file store, which
    no rank uses after the barrier."""
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    if store and rank == 0:
        try:
            os.remove(store)
        except FileNotFoundError:
            pass


def full_weights(args, dtype, device):
    """The full (unsharded) parameters, the same on every rank."""
    g = torch.Generator().manual_seed(args.seed)

    def uniform(shape, bound):
        return ((torch.rand(shape, generator=g) * 2 - 1) * bound).to(dtype=dtype, device=device)

    h, f = args.hidden, args.ffn
    return {"w1": uniform((f, h), 1 / math.sqrt(h)), "b1": uniform((f,), 1 / math.sqrt(h)),
            "w2": uniform((h, f), 1 / math.sqrt(f)), "b2": uniform((h,), 1 / math.sqrt(f))}


def batch(args, dtype, device, rank, nranks):
    """This rank's rows of the (fixed) training inputs and targets."""
    g = torch.Generator().manual_seed(args.seed + 1000)
    x = torch.randn((args.tokens, args.hidden), generator=g)
    target = torch.sin(x @ torch.randn((args.hidden, args.hidden), generator=g) / math.sqrt(args.hidden))
    off = commgemm.shard_offset(args.tokens, rank, nranks)
    rows = commgemm.shard_rows(args.tokens, rank, nranks)
    return (x[off:off + rows].to(dtype=dtype, device=device),
            target[off:off + rows].to(dtype=dtype, device=device))


class CommgemmMLP(torch.nn.Module):
    def __init__(self, full, comm, args):
        super().__init__()
        h, f = args.hidden, args.ffn
        self.fc1 = cgt.ColumnParallelLinear(h, f, comm, dtype=full["w1"].dtype, device=full["w1"].device,
                                            backend=args.backend)
        self.fc2 = cgt.RowParallelLinear(f, h, comm, dtype=full["w2"].dtype, device=full["w2"].device,
                                         backend=args.backend)
        with torch.no_grad():
            o, n = self.fc1.out_offset, self.fc1.out_local
            self.fc1.weight.copy_(full["w1"][o:o + n])
            self.fc1.bias.copy_(full["b1"][o:o + n])
            o, n = self.fc2.in_offset, self.fc2.in_local
            self.fc2.weight.copy_(full["w2"][:, o:o + n])
            self.fc2.bias.copy_(full["b2"])

    def forward(self, x, m):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x, m=m)))


class ReferenceMLP(torch.nn.Module):
    """The same shards, with torch.distributed collectives and plain matmuls."""

    def __init__(self, full, group, rank, nranks, args):
        super().__init__()
        f = args.ffn
        o, n = commgemm.shard_offset(f, rank, nranks), commgemm.shard_rows(f, rank, nranks)
        self.group = group
        self.w1 = torch.nn.Parameter(full["w1"][o:o + n].clone())
        self.b1 = torch.nn.Parameter(full["b1"][o:o + n].clone())
        self.w2 = torch.nn.Parameter(full["w2"][:, o:o + n].clone())
        self.b2 = torch.nn.Parameter(full["b2"].clone())

    def forward(self, x, m):
        h = torch.nn.functional.gelu(ref.column_parallel_linear(x, self.w1, self.b1, self.group, m=m))
        return ref.row_parallel_linear(h, self.w2, self.b2, self.group)

    def finish_grads(self):
        # the replicated bias sees only this rank's rows: sum the ranks' parts
        # (commgemm's RowParallelLinear gives the full sum already)
        dist.all_reduce(self.b2.grad, group=self.group)


def train(model, args, dtype, device, rank, nranks, label):
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses = []
    x, target = batch(args, dtype, device, rank, nranks)
    for step in range(args.steps):
        start = time.perf_counter()
        out = model(x, args.tokens)
        # this rank's part of the global mean squared error; the parts sum to it
        local = (out.float() - target.float()).square().sum() / (args.tokens * args.hidden)
        opt.zero_grad(set_to_none=True)
        local.backward()
        if hasattr(model, "finish_grads"):
            model.finish_grads()
        opt.step()
        total = local.detach().clone()
        dist.all_reduce(total)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3
        losses.append(total.item())
        if rank == 0:
            print(f"[{label}] step {step} loss {losses[-1]:.6f} ({ms:.1f} ms)", flush=True)
    return losses


def main():
    args = parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    gpu = args.device == "gpu"
    device, store = init_distributed("nccl" if gpu else "gloo", gpu)
    rank, nranks = dist.get_rank(), dist.get_world_size()
    full = full_weights(args, dtype, device)
    results = {}
    comm = None
    if not args.reference:
        if gpu:
            # a group of its own: commgemm's NCCL work never interleaves with the loss all-reduce
            comm = commgemm.Comm.from_process_group(dist.new_group(backend="nccl"))
        else:
            comm = commgemm.Comm.from_env()  # host backend, ranks from the launcher's environment
        if rank == 0:
            print(f"# commgemm {commgemm.__version__} ({commgemm.library_path()}), {nranks} ranks, "
                  f"ag_gemm on {comm.backend('ag_gemm')}, gemm_rs on {comm.backend('gemm_rs')}, "
                  f"tokens {args.tokens}, hidden {args.hidden}, ffn {args.ffn}, {args.dtype}", flush=True)
        results["commgemm"] = train(CommgemmMLP(full, comm, args), args, dtype, device, rank, nranks, "commgemm")
    if args.reference or args.compare:
        model = ReferenceMLP(full, dist.group.WORLD, rank, nranks, args)
        results["reference"] = train(model, args, dtype, device, rank, nranks, "reference")
    status = 0
    if args.compare:
        tol = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}[dtype]
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(results["commgemm"], results["reference"]))
        ok = worst <= tol
        if rank == 0:
            print(f"# largest relative loss difference {worst:.3g} (tolerance {tol}): {'OK' if ok else 'FAILED'}",
                  flush=True)
        status = 0 if ok else 1
    if comm is not None:
        comm.close()
    finish_distributed(store)
    return status


if __name__ == "__main__":
    sys.exit(main())
