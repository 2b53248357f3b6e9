"""A tensor-parallel MLP in JAX (column-parallel -> GELU -> row-parallel,
sequence parallel) trained for a few SGD steps with commgemm's layers.

    commgemm-run -n 2 python3 examples/jax_tp_mlp.py --device cpu    # host backend, CPU arrays
    commgemm-run -n 2 python3 examples/jax_tp_mlp.py                 # p2p backend, a GPU per rank
    ... --compare   # also train the whole MLP in plain jnp on every rank: exit 1 if they differ
    ... --no-sequence-parallel   # replicated activations: a local GEMM, then GEMM+AR
    ... --dtype bf16             # fp32 (default), bf16 or fp16

Ranks come from the launcher (commgemm-run, torchrun or mpirun:
commgemm.Comm.from_env). On GPUs rank r takes GPU r % count (set before jax
starts), which must be its only visible one. Every rank builds the same
full weights from the seed and keeps its shard; the tokens (rows) are split
with the ceil split, so any --tokens works. The loss printed is the global
mean squared error: each rank's own rows' term, and with --compare the
plain-jnp one, which every rank can compute alone. Flags are spelled as
torch_tp_mlp.py's: --device gpu|cpu, --dtype fp32|bf16|fp16 (cuda, float32,
bfloat16, float16 are accepted too).
"""

import argparse
import os
import sys

# --device gpu|cpu and --dtype fp32|bf16|fp16 (as the other example's); these names are accepted too
ALIASES = {"cuda": "gpu", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
JNP_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=1027, help="rows of the activations (any count)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--dtype", type=str.lower, choices=["fp32", "bf16", "fp16", "float32", "bfloat16", "float16"],
                   default="fp32")
    p.add_argument("--device", type=str.lower, choices=["gpu", "cpu", "cuda"], default="gpu",
                   help="gpu (the p2p backend, a GPU per rank), or cpu: the host backend on CPU arrays")
    p.add_argument("--compare", action="store_true")
    p.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_false",
                   help="every rank holds all rows (column: local GEMM, dX by GEMM+AR; row: GEMM+AR)")
    args = p.parse_args(argv)
    args.device, args.dtype = ALIASES.get(args.device, args.device), ALIASES.get(args.dtype, args.dtype)
    return args


def train(comm, args):
    """Trains on `comm`; returns (this rank's loss terms per step: its own
    rows' with sequence parallelism, else the whole loss; the plain-jnp
    global losses or None; the largest weight difference or None)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import commgemm
    import commgemm.jax as cj

    P, r = comm.size, comm.rank
    m, h, f = args.tokens, args.hidden, args.ffn
    dt = jnp.dtype(JNP_DTYPES[args.dtype])
    rng = np.random.default_rng(1234)
    full = {
        "w1": rng.standard_normal((f, h), np.float32) / np.sqrt(h),
        "b1": rng.standard_normal((f,), np.float32) * 0.1,
        "w2": rng.standard_normal((h, f), np.float32) / np.sqrt(f),
        "b2": rng.standard_normal((h,), np.float32) * 0.1,
    }
    x_full = rng.standard_normal((m, h), np.float32)
    t_full = rng.standard_normal((m, h), np.float32)
    rows = slice(commgemm.shard_offset(m, r, P), commgemm.shard_offset(m, r, P) + commgemm.shard_rows(m, r, P))
    cols = slice(commgemm.shard_offset(f, r, P), commgemm.shard_offset(f, r, P) + commgemm.shard_rows(f, r, P))
    params = {"w1": full["w1"][cols], "b1": full["b1"][cols], "w2": full["w2"][:, cols], "b2": full["b2"]}
    params = {k: jnp.asarray(v, dt) for k, v in params.items()}
    sp = args.sequence_parallel
    if not sp:
        rows = slice(0, m)  # every rank all rows; the loss is then the same on every rank
    x, t = jnp.asarray(x_full[rows], dt), jnp.asarray(t_full[rows], dt)

    def loss_tp(p, x, t):
        hid = jax.nn.gelu(cj.column_parallel_linear(x, p["w1"], p["b1"], comm=comm, m=m, sequence_parallel=sp))
        y = cj.row_parallel_linear(hid, p["w2"], p["b2"], comm=comm, sequence_parallel=sp)
        return jnp.sum(jnp.square(y.astype(jnp.float32) - t.astype(jnp.float32))) / (m * h)

    def loss_ref(p, x, t):
        y = jax.nn.gelu(x @ p["w1"].T + p["b1"]) @ p["w2"].T + p["b2"]
        return jnp.sum(jnp.square(y.astype(jnp.float32) - t.astype(jnp.float32))) / (m * h)

    def sgd(p, g):
        return {k: (p[k].astype(jnp.float32) - args.lr * g[k].astype(jnp.float32)).astype(dt) for k in p}

    step_tp = jax.jit(lambda p, x, t: (loss_tp(p, x, t), sgd(p, jax.grad(loss_tp)(p, x, t))))
    losses, ref_losses, diff = [], None, None
    ref_params = {k: jnp.asarray(v, dt) for k, v in full.items()} if args.compare else None
    if args.compare:
        ref_losses = []
        step_ref = jax.jit(lambda p, x, t: (loss_ref(p, x, t), sgd(p, jax.grad(loss_ref)(p, x, t))))
        xr, tr = jnp.asarray(x_full, dt), jnp.asarray(t_full, dt)
    for _ in range(args.steps):
        loss, params = step_tp(params, x, t)
        losses.append(float(loss))
        if args.compare:
            loss, ref_params = step_ref(ref_params, xr, tr)
            ref_losses.append(float(loss))
    if args.compare:
        mine = {"w1": params["w1"], "b1": params["b1"], "w2": params["w2"], "b2": params["b2"]}
        theirs = {"w1": ref_params["w1"][cols], "b1": ref_params["b1"][cols], "w2": ref_params["w2"][:, cols],
                  "b2": ref_params["b2"]}
        diff = max(float(np.max(np.abs(np.asarray(mine[k], np.float32) - np.asarray(theirs[k], np.float32))))
                   for k in mine)
    return losses, ref_losses, diff


def main():
    args = parse_args()
    if args.device == "gpu":
        rank = None
        for var in ("COMMGEMM_RANK", "RANK", "OMPI_COMM_WORLD_RANK"):
            if var in os.environ:
                rank = int(os.environ[var])
                break
        count = int(os.environ.get("JAX_TP_MLP_GPUS", "0")) or _gpu_count()
        if rank is not None and count:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(rank % count)
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        os.environ.setdefault("JAX_PLATFORMS", "cuda")
    else:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import commgemm

    with commgemm.Comm.from_env(backend="p2p" if args.device == "gpu" else "host") as comm:
        losses, ref_losses, diff = train(comm, args)
        for i, loss in enumerate(losses):
            what = "own rows' loss term" if args.sequence_parallel else "loss"
            line = f"rank {comm.rank}/{comm.size} step {i}: {what} {loss:.6f}"
            if ref_losses is not None:
                line += f", plain-jnp global loss {ref_losses[i]:.6f}"
            print(line, flush=True)
        if diff is not None:
            tol = 2e-3 if args.dtype == "fp32" else 5e-2
            print(f"rank {comm.rank}: largest weight difference against plain jnp after {args.steps} steps: "
                  f"{diff:.3g} (tolerance {tol})", flush=True)
            if not diff <= tol:
                sys.exit(1)


def _gpu_count():
    import subprocess
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
        return sum(1 for line in out.splitlines() if line.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        return 0


if __name__ == "__main__":
    main()
