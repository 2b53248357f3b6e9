"""PyTorch integration: CUDA tensor ops and tensor-parallel layers.

- `Comm.from_process_group(group)` / `comm_from_process_group`: a GPU comm
  sharing the ncclComm_t of a torch.distributed NCCL process group.
- Functional ops on CUDA tensors, enqueued on the current stream and
  registered as opaque custom ops (torch.ops.commgemm.*) with fake kernels,
  so torch.compile keeps them in the graph:
  `all_gather_matmul`, `matmul_reduce_scatter`, `matmul_all_reduce`,
  `bulk_matmul_collective`. The first three are differentiable (with fp8
  inputs only through `fp8_recipe=` on high-precision tensors).
- `ColumnParallelLinear`, `FusedColumnParallelLinear`, `RowParallelLinear`:
  Megatron-style layers whose forward and backward run the overlapped ops,
  their features split by head (partition_multiple) or per-rank sizes
  (partition_sizes) where asked; `ColumnParallelLinear(activation="gelu")`
  applies the GELU in the op's epilogue where the backend has epilogues.
- `ParallelMLP`: column -> GELU -> row, its backward's dGELU and bias
  gradients in the overlapped ops' epilogues (docs/EPILOGUES.md).
- `scatter_rows`, `gather_rows`: into and out of the sequence shards.
- FP8: the layers' `fp8_recipe=` (`Float8CurrentScaling`, `DelayedScaling`,
  `Float8BlockScaling`) and the quantization helpers (`quantize`,
  `dequantize`, `transpose`, `amax`, `compute_scale`, `cast_to_fp8`), in
  _torch_fp8.py.

The custom ops themselves (tensor -> cgm_matrix, stream, fake kernels) are
in _torch_ops.py, the autograd Functions of the layers' math in
_torch_autograd.py, the layers in _torch_layers.py, the plain collectives
(and where they run when a backend has none) in _torch_collectives.py. CPU
tensors work too, on a host-backend comm (Comm.local).

Rows are sharded with the ceil split: rank r holds shard_rows(m, r, P) rows
(the last shards may be smaller or empty). Tensors are 2-D [rows, features];
layers accept [..., features] and flatten the leading dimensions into rows
([s, b, h] split along s; [b, s, h] with batch_first=True, split along s).

Everything is CUDA-graph capturable after one eager call with the same shapes
(outputs come from the caching allocator, which draws from the graph's pool
during capture; the C library allocates nothing inside capture).
"""

import torch
import torch.distributed as dist

from . import _lib
from ._lib import Status
from ._torch_autograd import _AllGatherMatmul, _MatmulAllReduce, _MatmulReduceScatter
from ._torch_collectives import GatherRows, ScatterRows, all_gather_rows, route
from ._torch_layers import (ColumnParallelLinear, FusedColumnParallelLinear, ParallelMLP,  # noqa: F401
                            RowParallelLinear, _autocast, _backend_arg, _gemm_reduction_arg, _partial_dtype_arg,
                            check_positions)
from ._torch_fp8 import (DelayedScaling, Float8BlockScaling, Float8CurrentScaling, Fp8Tensor, amax,  # noqa: F401
                         cast_to_fp8, compute_scale, dequantize, quantize, transpose)
from ._torch_fp8 import recipe_call, refuse_fp8_grad
from ._torch_ops import _ops
from .core import Comm, Config

__all__ = ["comm_from_process_group", "all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce",
           "bulk_matmul_collective", "scatter_rows", "gather_rows", "ColumnParallelLinear",
           "FusedColumnParallelLinear", "ParallelMLP", "RowParallelLinear", "shard_rows", "Float8CurrentScaling",
           "DelayedScaling", "Float8BlockScaling", "Fp8Tensor", "amax", "compute_scale", "cast_to_fp8", "quantize",
           "dequantize", "transpose"]

shard_rows = _lib.shard_rows

# --------------------------------------------------------------------------
# Comm from a process group
# --------------------------------------------------------------------------


def _pg_backend_name(group):
    try:
        return str(dist.get_backend(group))
    except Exception as e:  # noqa: BLE001 - reported below
        return f"unknown ({e})"


def nccl_comm_ptr(group=None):
    """The ncclComm_t (int) of `group` for the current CUDA device, created
    now if the process group has not made it yet (NCCL communicators are
    created lazily, on the first collective, unless init_process_group got a
    device_id)."""
    if not dist.is_available() or not dist.is_initialized():
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            "torch.distributed is not initialized; call torch.distributed.init_process_group(backend='nccl', "
            "device_id=torch.device('cuda', local_rank)) first")
    if group is None:
        group = dist.group.WORLD
    name = _pg_backend_name(group)
    if "nccl" not in name.lower():
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"commgemm's GPU backends need an NCCL communicator, but the process group uses {name}; create it "
            "with torch.distributed.init_process_group(backend='nccl') or new_group(backend='nccl'), or use "
            "commgemm.Comm.local() for the CPU host backend")
    bound = getattr(group, "bound_device_id", None)
    device = bound if bound is not None else torch.device("cuda", torch.cuda.current_device())
    if bound is not None and bound.index != torch.cuda.current_device():
        raise _lib.InvalidUsageError(
            Status.INVALID_USAGE,
            f"the process group is bound to {bound} but the current CUDA device is cuda:"
            f"{torch.cuda.current_device()}; call torch.cuda.set_device({bound.index}) first")
    try:
        backend = group._get_backend(device)
    except Exception as e:  # noqa: BLE001
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"the process group ({name}) has no backend for {device}: {e}; create it with backend='nccl'") from e
    if not hasattr(backend, "_comm_ptr"):
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"{type(backend).__name__} (torch {torch.__version__}) does not expose _comm_ptr(); commgemm needs "
            "torch >= 2.8 to share a process group's ncclComm_t, or create the ncclComm_t yourself and use "
            "commgemm.Comm.from_nccl(ptr)")

    def get_ptr():
        value = backend._comm_ptr  # a method; a property on some builds
        return int(value() if callable(value) else value)

    ptr = get_ptr()
    if ptr == 0:
        # Lazily created communicator: one tiny collective on this device makes it.
        t = torch.zeros(1, device=device)
        dist.all_reduce(t, group=group)
        torch.cuda.synchronize(device)
        ptr = get_ptr()
    if ptr == 0:
        raise _lib.UnavailableError(
            Status.UNAVAILABLE,
            f"the process group's NCCL communicator for {device} does not exist even after a collective; is "
            f"the current device (cuda:{torch.cuda.current_device()}) the one this rank uses?")
    return ptr


def comm_from_process_group(group=None, config=None, **config_kwargs):
    """A GPU commgemm.Comm on the ncclComm_t of `group` (default: the world
    group), which must use NCCL. Collective over the group's ranks. The group
    must outlive the Comm (the Comm holds a reference; close the Comm before
    torch.distributed.destroy_process_group). Tip: give commgemm a group of its
    own (new_group(backend='nccl')) so its NCCL work never interleaves with
    other collectives on the same communicator."""
    ptr = nccl_comm_ptr(group)
    group = group if group is not None else dist.group.WORLD
    comm = Comm.from_nccl(ptr, config=Config.coerce(config, **config_kwargs), keepalive=group)
    comm.process_group = group  # where the comm's backends have no all-gather of their own (cublasmp)
    return comm


# --------------------------------------------------------------------------
# Functional API
# --------------------------------------------------------------------------


def _comm_arg(comm):
    if not isinstance(comm, Comm):
        raise TypeError(f"comm: expected a commgemm.Comm, got {type(comm).__name__}")
    return comm.id


def _check_2d(name, t):
    if t.dim() != 2:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"{name} has shape {tuple(t.shape)}: expected 2-D [rows, features]")


_FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def _fp8_call_wanted(x, weight, x_scale, w_scale, out_dtype, y_scale=None, y_amax=False):
    """Whether a functional call is an fp8 one (an fp8 operand); refuses
    scales, an out_dtype or y_scale / y_amax given with no fp8 operand."""
    if x.dtype in _FP8_DTYPES or weight.dtype in _FP8_DTYPES:
        return True
    given = [n for n, v in (("x_scale", x_scale), ("w_scale", w_scale), ("out_dtype", out_dtype),
                            ("y_scale", y_scale), ("y_amax", y_amax or None)) if v is not None]
    if given:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"{', '.join(given)} given, but x is {x.dtype} and weight {weight.dtype}: "
                                        "they go with float8 operands only (the output is x's dtype otherwise); "
                                        "drop them or pass float8 x and weight")
    return False


def _fp8_call(op, x, weight, bias, x_scale, w_scale, comm, m, backend, out_dtype, return_gathered, partial_dtype,
              gemm_reduction, y_scale=None, y_amax=False):
    """torch.ops.commgemm.fp8_matmul, which checks its operands itself (once
    per call); here only what autograd and the schema need. Returns the op's
    list: [y, (gathered X, its scales,) (amax)]."""
    refuse_fp8_grad(op, (x, weight, bias, x_scale, w_scale, y_scale))
    for name, t in (("x_scale", x_scale), ("w_scale", w_scale), ("y_scale", y_scale)):
        if t is not None and not isinstance(t, torch.Tensor):  # the op's schema takes tensors: say which
            raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                            f"{name} is a {type(t).__name__}: expected a float32 tensor on "
                                            f"{x.device} (made once and reused: a tensor made per call costs a copy)")
    if bias is not None:
        _check_bias(bias, weight.shape[0])
    if out_dtype is None:
        out_dtype = torch.float32
    elif not isinstance(out_dtype, torch.dtype):
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"out_dtype {out_dtype!r}: expected a torch.dtype (torch.float32, bfloat16, "
                                        "float16, float8_e4m3fn or float8_e5m2)")
    return _ops.fp8_matmul(op, x, weight, x_scale, w_scale, bias, comm.id, int(m), "TN", _backend_arg(backend),
                           out_dtype, bool(return_gathered), _partial_dtype_arg(partial_dtype),
                           _gemm_reduction_arg(gemm_reduction), y_scale, bool(y_amax))


def _recipe_call(op, x, weight, bias, comm, m, backend, partial_dtype, gemm_reduction, fp8_recipe, **fp8_args):
    """A functional op with fp8_recipe= (high-precision operands, differentiable)."""
    given = [name for name, v in fp8_args.items() if v is not None and v is not False]  # tensors: no ==
    x, weight, bias = _autocast(x, weight, bias)
    if bias is not None:
        _check_bias(bias, weight.shape[0])
    precision = (_partial_dtype_arg(partial_dtype), _gemm_reduction_arg(gemm_reduction))
    return recipe_call(op, x, weight, bias, comm, m, fp8_recipe, route(comm, _backend_arg(backend)), precision,
                       given)


def _check_bias(bias, n):
    if bias.dim() != 1 or bias.shape[0] != n:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"bias has shape {tuple(bias.shape)}: expected ({n},), one per output column")


def all_gather_matmul(x_shard, weight, bias=None, *, comm, m=None, backend=None, return_gathered=False,
                      partial_dtype=None, gemm_reduction=None, x_scale=None, w_scale=None, out_dtype=None,
                      y_scale=None, y_amax=False, fp8_recipe=None):
    """Y[m, n_loc] = allgather(x_shard) . weight^T (+ bias), on the current CUDA stream.

    x_shard: [m_r, k], this rank's rows (m_r = shard_rows(m, rank, P)). weight: [n_loc, k] (this
    rank's nn.Linear weight shard). bias: [n_loc] or None. m: total rows (default m_r * P, right
    only when the shards are equal: pass m when they are uneven). Returns Y, or (Y, gathered X
    [m, k]) with return_gathered (the gathered X is not differentiable; gathered alone where
    the backend keeps it, cublasmp: docs/PYTHON.md). Differentiable in
    x_shard, weight and bias. partial_dtype ("fp32", "output") is the backward's (its dX is a
    GEMM+RS); gemm_reduction ("any", "fp32") every commgemm GEMM's; None: the comm's
    (docs/PYTHON.md, Precision).

    FP8 (docs/PYTHON.md, "FP8"): x_shard and weight torch.float8_e4m3fn / float8_e5m2 with
    x_scale and w_scale (float32; () or (1,) per tensor, [m_r, ceil(k/128)] and
    [ceil(n_loc/128), ceil(k/128)] per block); Y is out_dtype (float32 by default, bfloat16,
    float16, or float8_e4m3fn / float8_e5m2 with y_scale: a float32 tensor of one element on
    x's device that multiplies on quantize, Y = sat(rne(r * y_scale)); y_amax=True also returns
    max |r| over this rank's Y, float32 (1,), last); return_gathered gives (Y, gathered X codes
    [m, k], gathered scales: [P], rank s's at [s], per tensor; [m, ceil(k/128)] per block)
    (then the amax with y_amax). Not differentiable: fp8 operands that require grad are
    refused. fp8_recipe (Float8CurrentScaling() or Float8BlockScaling()) with
    high-precision x_shard and weight: quantized in the call (one per-tensor scale for X over
    the ranks), every GEMM of the forward and backward in fp8 as the layers'; differentiable,
    Y and the gradients in the inputs' dtypes; no return_gathered, scales, out_dtype or y_*."""
    _check_2d("x_shard", x_shard)
    comm_id = _comm_arg(comm)
    if m is None:
        m = x_shard.shape[0] * comm.size
    if fp8_recipe is not None:
        return _recipe_call("ag", x_shard, weight, bias, comm, int(m), backend, partial_dtype, gemm_reduction,
                            fp8_recipe, return_gathered=return_gathered, x_scale=x_scale, w_scale=w_scale,
                            out_dtype=out_dtype, y_scale=y_scale, y_amax=y_amax)
    if _fp8_call_wanted(x_shard, weight, x_scale, w_scale, out_dtype, y_scale, y_amax):
        r = _fp8_call("ag", x_shard, weight, bias, x_scale, w_scale, comm, m, backend, out_dtype, return_gathered,
                      partial_dtype, gemm_reduction, y_scale, y_amax)
        return tuple(r) if len(r) > 1 else r[0]
    x_shard, weight, bias = _autocast(x_shard, weight, bias)
    pd, gr = _partial_dtype_arg(partial_dtype), _gemm_reduction_arg(gemm_reduction)
    rt = route(comm, _backend_arg(backend))
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x_shard, weight, bias)):
        y, gathered = _AllGatherMatmul.apply(x_shard, weight, bias, comm_id, m, rt, pd, gr, weight.requires_grad,
                                             return_gathered, False)
    else:
        from_op = return_gathered and rt.gathered
        y, gathered = _ops.all_gather_matmul(x_shard, weight, bias, comm_id, m, "TN", rt.backend, from_op, gr)
        if return_gathered and not from_op:  # a backend that keeps it (cublasmp): gathered alone
            gathered = all_gather_rows(x_shard, comm_id, m, rt, "all_gather_matmul(return_gathered=True)")
    return (y, gathered) if return_gathered else y


def matmul_reduce_scatter(x, weight, bias=None, *, comm, backend=None, partial_dtype=None, gemm_reduction=None,
                          x_scale=None, w_scale=None, out_dtype=None, y_scale=None, y_amax=False, fp8_recipe=None):
    """Y_r[m_r, n] = this rank's rows of sum_ranks x . weight^T (+ bias, added once), on the current
    CUDA stream. x: [m, k_loc]; weight: [n, k_loc]; bias: [n] or None. Differentiable.
    partial_dtype: "fp32" or "output" (the same on every rank), gemm_reduction: "any" or "fp32";
    None: the comm's. FP8: as all_gather_matmul's (x_scale [m, ceil(k_loc/128)] per block);
    every rank's operands have their own scales; an fp8 Y with y_scale, (Y, amax of this
    rank's rows) with y_amax. fp8_recipe: as all_gather_matmul's (the
    backward's gathered dY shares one per-tensor scale over the ranks)."""
    _check_2d("x", x)
    comm_id = _comm_arg(comm)
    if fp8_recipe is not None:
        return _recipe_call("rs", x, weight, bias, comm, 0, backend, partial_dtype, gemm_reduction, fp8_recipe,
                            x_scale=x_scale, w_scale=w_scale, out_dtype=out_dtype, y_scale=y_scale, y_amax=y_amax)
    if _fp8_call_wanted(x, weight, x_scale, w_scale, out_dtype, y_scale, y_amax):
        r = _fp8_call("rs", x, weight, bias, x_scale, w_scale, comm, 0, backend, out_dtype, False, partial_dtype,
                      gemm_reduction, y_scale, y_amax)
        return tuple(r) if y_amax else r[0]
    x, weight, bias = _autocast(x, weight, bias)
    pd, gr = _partial_dtype_arg(partial_dtype), _gemm_reduction_arg(gemm_reduction)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _MatmulReduceScatter.apply(x, weight, bias, comm_id, route(comm, _backend_arg(backend)), pd, gr)
    return _ops.matmul_reduce_scatter(x, weight, bias, comm_id, "TN", _backend_arg(backend), pd, gr)


def matmul_all_reduce(x, weight, bias=None, *, comm, backend=None, partial_dtype=None, gemm_reduction=None,
                      x_scale=None, w_scale=None, out_dtype=None, y_scale=None, y_amax=False, fp8_recipe=None):
    """Y[m, n] = sum_ranks x . weight^T (+ bias, added once), on every rank. Differentiable.
    partial_dtype, gemm_reduction, FP8, fp8_recipe: as matmul_reduce_scatter's (an fp8 Y is the
    same on every rank where every rank passes the same y_scale value; y_amax is of all of Y,
    and every rank passes y_amax or none)."""
    _check_2d("x", x)
    comm_id = _comm_arg(comm)
    if fp8_recipe is not None:
        return _recipe_call("ar", x, weight, bias, comm, 0, backend, partial_dtype, gemm_reduction, fp8_recipe,
                            x_scale=x_scale, w_scale=w_scale, out_dtype=out_dtype, y_scale=y_scale, y_amax=y_amax)
    if _fp8_call_wanted(x, weight, x_scale, w_scale, out_dtype, y_scale, y_amax):
        r = _fp8_call("ar", x, weight, bias, x_scale, w_scale, comm, 0, backend, out_dtype, False, partial_dtype,
                      gemm_reduction, y_scale, y_amax)
        return tuple(r) if y_amax else r[0]
    x, weight, bias = _autocast(x, weight, bias)
    pd, gr = _partial_dtype_arg(partial_dtype), _gemm_reduction_arg(gemm_reduction)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _MatmulAllReduce.apply(x, weight, bias, comm_id, _backend_arg(backend), pd, gr)
    return _ops.matmul_all_reduce(x, weight, bias, comm_id, "TN", _backend_arg(backend), pd, gr)


def bulk_matmul_collective(a=None, b=None, send=None, *, comm, layout="TN", collective="all_gather", m=None,
                           backend=None, gemm_reduction=None, a_scale=None, b_scale=None, out_dtype=None):
    """c = op(a) . op(b) (local GEMM, layout as in commgemm.h) overlapped with an unrelated
    collective on `send` (all_gather: [m_r, cols] -> [m, cols]; reduce_scatter: [m, cols] ->
    [m_r, cols], fp32 sums). Returns (c, recv); a half left out gives an empty tensor.
    gemm_reduction: the GEMM's ("any", "fp32"; None: the comm's). FP8 (layout TN): float8
    a [rows, k] and b [n, k] with a_scale and b_scale (as all_gather_matmul's x_scale and
    w_scale: () or (1,) per tensor, 2-D per block); c is out_dtype (torch.float32 by default,
    bfloat16 or float16). Not differentiable (fp8 inputs that require grad are refused)."""
    comm_id = _comm_arg(comm)
    if a is not None and b is not None and (a.dtype in _FP8_DTYPES or b.dtype in _FP8_DTYPES):
        refuse_fp8_grad("bulk_matmul_collective", (a, b, a_scale, b_scale))  # the op checks the rest
    if (a is None) != (b is None):
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"bulk_matmul_collective: a is {'None' if a is None else 'given'} and b is "
                                        f"{'None' if b is None else 'given'}: expected both (the GEMM) or neither")
    if a is None and send is None:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        "bulk_matmul_collective: no GEMM (a, b) and no collective (send): expected "
                                        "at least one of them")
    if send is not None and m is None:
        m = send.shape[0] * comm.size if _lib.parse_collective(collective) == _lib.Collective.ALL_GATHER else 0
    return _ops.bulk_matmul_collective(a, b, send, comm_id, layout, collective, int(m or 0),
                                       _backend_arg(backend), _gemm_reduction_arg(gemm_reduction), a_scale, b_scale,
                                       out_dtype)




# --------------------------------------------------------------------------
# Sequence parallelism: into and out of row shards
# --------------------------------------------------------------------------


def _sequence_rows(x, batch_first, what):
    """x as 2-D rows in sequence-major order and its sequence-first leading shape."""
    if x.dim() < 2:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"{what}: input has shape {tuple(x.shape)}: expected [rows, features] or "
                                        "[sequence, batch..., features] ([batch, sequence, features] with "
                                        "batch_first=True)")
    if batch_first:
        if x.dim() != 3:
            raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                            f"{what}(batch_first=True): input has shape {tuple(x.shape)}: "
                                            "expected [batch, sequence, features]")
        x = x.transpose(0, 1)
    return x.reshape(-1, x.shape[-1]), x.shape[:-1]


def _sequence_back(y, lead, batch_first):
    y = y.reshape(-1, *lead[1:], y.shape[-1])
    return y.transpose(0, 1) if batch_first else y


def scatter_rows(x, comm, *, batch_first=False, backend=None):
    """This rank's shard of a tensor that every rank holds alike, as the
    sequence-parallel layers split rows: the ceil split of the rows
    (cgm_shard_rows: rank r holds shard_rows(m, r, P) rows from
    shard_offset(m, r, P)). x: [m, features]; [s, b..., features] (split along
    s; the flattened s·b rows are split, which must give every rank whole
    positions: P dividing s does); batch_first=True: [b, s, features], split
    along s. Differentiable: the backward all-gathers the shards' gradients,
    so x's gradient is whole on every rank. No communication forward."""
    comm_id = _comm_arg(comm)
    x2, lead = _sequence_rows(x, batch_first, "scatter_rows")
    check_positions("scatter_rows", lead, x2.shape[0], comm)
    out = ScatterRows.apply(x2, comm_id, route(comm, _backend_arg(backend)))
    return _sequence_back(out, lead, batch_first)


def gather_rows(x_shard, comm, *, m=None, batch_first=False, reduce_grad=False, backend=None):
    """The inverse of scatter_rows: every rank's row shard gathered, [m,
    features] (or [s, b..., features], [b, s, features] with batch_first) on
    every rank. m: the total rows over all ranks (s·b for 3-D inputs; default
    rows × P, right only for equal shards). Differentiable: the backward takes
    this rank's rows of the gradient (reduce_grad=False: whatever follows
    computes the same on every rank), or sums the ranks' gradients first
    (reduce_grad=True: a tensor-parallel consumer, e.g. a column-parallel
    head, whose gradient on each rank is a part). Runs on the comm's bulk
    all-gather, or torch.distributed on comm.process_group where the comm has
    none (cublasmp)."""
    comm_id = _comm_arg(comm)
    x2, lead = _sequence_rows(x_shard, batch_first, "gather_rows")
    if m is None:
        m = x2.shape[0] * comm.size
    check_positions("gather_rows", lead, int(m), comm)
    out = GatherRows.apply(x2, comm_id, int(m), route(comm, _backend_arg(backend)), bool(reduce_grad))
    return _sequence_back(out, lead, batch_first)
