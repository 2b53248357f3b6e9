"""Plain collectives for commgemm.torch: all-gather and reduce-scatter of
row shards (the ceil split of cgm_shard_rows) and the all-gather of column
blocks, run by the comm's bulk op (cgm_bulk_overlap without its GEMM) or,
where the comm's backend has none (cublasmp), by torch.distributed on the
comm's process group. And the autograd Functions built on them:
scatter_rows / gather_rows (sequence parallelism's entry and exit) and the
column layer's gather_output. Imported by commgemm.torch."""

from typing import NamedTuple, Optional

import torch
import torch.distributed as dist

from . import _lib
from ._lib import Op, Status, shard_offset, shard_rows
from ._torch_ops import _ops
from .core import comm_by_id


class Route(NamedTuple):
    """How a layer's ops run on its comm and per-call backend, decided once
    (pure Python, so torch.compile traces through it).
    gathered: AG+GEMM can hand back the gathered input (else it is gathered
    separately where the weight gradient needs it); bulk: the backend for
    cgm_bulk_overlap calls ("" for the comm's), None where the comm has no
    bulk op (then torch.distributed on comm.process_group, and the dgrad's
    reduce-scatter is a GEMM+RS); backend: the per-call backend of the
    other ops ("" for the comm's); epilogue: the GEMM ops take epilogues
    (commgemm.h "Epilogues"); bulk_epilogue: the bulk op's GEMM does."""
    gathered: bool
    bulk: Optional[str]
    backend: str
    epilogue: bool = False
    bulk_epilogue: bool = False


def route(comm, backend):
    """The Route of `comm` with the per-call `backend` (a name, "" or None)."""
    backend = backend or ""
    if comm.supports("bulk", backend):
        bulk = backend
    elif comm.supports("bulk"):  # the override lacks bulk, the comm's own bulk backend has it
        bulk = ""
    else:
        bulk = None
    return Route(comm.supports("gathered", backend), bulk, backend, comm.supports("epilogue", backend),
                 bulk is not None and comm.supports("bulk_epilogue", bulk))


def _group(comm, what):
    group = comm.process_group
    if group is None:
        raise _lib.NotSupportedError(
            Status.NOT_SUPPORTED,
            f"{what}: this comm's bulk op runs on {comm._backend_for(Op.BULK)}, which has no all-gather or "
            "reduce-scatter of its own, and the comm has no torch.distributed process group to run it on; "
            "create the comm with Comm.from_process_group(group, ...), set comm.process_group = group (a group "
            "over the same ranks), or give the bulk op a backend that has it (op_backend={'bulk': 'nccl'})")
    return group


def all_gather_rows(x, comm_id, m, rt, what="all-gather"):
    """[m_r, c] row shards (m_r = shard_rows(m, rank, P)) -> [m, c] on every rank. No autograd."""
    x = x.contiguous()
    if rt.bulk is not None:
        return _ops.bulk_matmul_collective(None, None, x, comm_id, "TN", "all_gather", m, rt.bulk, "")[1]
    comm = comm_by_id(comm_id)
    group, P = _group(comm, what), comm.size
    chunk = -(-m // P) if m else 0
    if x.shape[0] != shard_rows(m, comm.rank, P):
        raise _lib.InvalidArgumentError(
            Status.INVALID_ARGUMENT,
            f"{what}: rank {comm.rank} of {P} holds {x.shape[0]} rows, expected shard_rows({m}, {comm.rank}, "
            f"{P}) = {shard_rows(m, comm.rank, P)} (the ceil split of m = {m} rows)")
    padded = x if x.shape[0] == chunk else torch.cat([x, x.new_zeros((chunk - x.shape[0], x.shape[1]))])
    out = x.new_empty((P * chunk, x.shape[1]))
    dist.all_gather_into_tensor(out, padded, group=group)
    return out[:m]  # ceil split: the shards before the last non-empty one are full


def reduce_scatter_rows(x, comm_id, rt, what="reduce-scatter"):
    """Sum over ranks of [m, c], this rank's rows [m_r, c] (fp32 sums). No autograd."""
    x = x.contiguous()
    if rt.bulk is not None:
        return _ops.bulk_matmul_collective(None, None, x, comm_id, "TN", "reduce_scatter", 0, rt.bulk, "")[1]
    comm = comm_by_id(comm_id)
    group, P, r, m = _group(comm, what), comm.size, comm.rank, x.shape[0]
    chunk = -(-m // P) if m else 0
    full = x.float()
    if P * chunk != m:
        full = torch.cat([full, full.new_zeros((P * chunk - m, x.shape[1]))])
    out = full.new_empty((chunk, x.shape[1]))
    dist.reduce_scatter_tensor(out, full, group=group)
    return out[:shard_rows(m, r, P)].to(x.dtype)


def all_gather_columns(y, comm_id, sizes, rt, what="gather_output"):
    """[m, sizes[rank]] column blocks -> [m, sum(sizes)], the ranks' blocks side
    by side. Each block travels transposed and padded to the widest, [c, m]:
    the all-gather of P even row shards (its rows c·P stay near the layer's
    n, its columns are m). No autograd."""
    P, m = len(sizes), y.shape[0]
    c = max(sizes)
    send = y.t()
    if y.shape[1] < c:
        send = torch.cat([send, send.new_zeros((c - y.shape[1], m))])
    blocks = all_gather_rows(send, comm_id, c * P, rt, what).view(P, c, m)
    return torch.cat([blocks[q, :sizes[q]] for q in range(P)]).t()


# --------------------------------------------------------------------------
# Autograd
# --------------------------------------------------------------------------


class ScatterRows(torch.autograd.Function):
    """This rank's rows [off, off + m_r) of a 2-D [m, c] tensor that every
    rank holds alike; the backward all-gathers the shards' gradients, so
    the full tensor's gradient is whole on every rank."""

    @staticmethod
    def forward(ctx, x, comm_id, rt):
        comm = comm_by_id(comm_id)
        m = x.shape[0]
        ctx.comm_id, ctx.rt, ctx.m = comm_id, rt, m
        off = shard_offset(m, comm.rank, comm.size)
        return x[off:off + shard_rows(m, comm.rank, comm.size)].clone()

    @staticmethod
    def backward(ctx, grad):
        return all_gather_rows(grad, ctx.comm_id, ctx.m, ctx.rt, "scatter_rows backward"), None, None


class GatherRows(torch.autograd.Function):
    """[m_r, c] row shards -> [m, c] on every rank. Backward: reduce_grad
    False takes this rank's rows of the gradient (a consumer that computes
    the same on every rank); True sums the ranks' gradients and takes this
    rank's rows (a tensor-parallel consumer, whose gradient on each rank is
    a part of the whole: Megatron's tensor_parallel_output_grad)."""

    @staticmethod
    def forward(ctx, x_shard, comm_id, m, rt, reduce_grad):
        comm = comm_by_id(comm_id)
        ctx.comm_id, ctx.rt, ctx.reduce_grad = comm_id, rt, reduce_grad
        ctx.off, ctx.rows = shard_offset(m, comm.rank, comm.size), x_shard.shape[0]
        return all_gather_rows(x_shard, comm_id, m, rt, "gather_rows")

    @staticmethod
    def backward(ctx, grad):
        if ctx.reduce_grad:
            dx = reduce_scatter_rows(grad, ctx.comm_id, ctx.rt, "gather_rows backward")
        else:
            dx = grad[ctx.off:ctx.off + ctx.rows]
        return dx, None, None, None, None


class GatherColumns(torch.autograd.Function):
    """The column layer's gather_output: [m, n_r] -> [m, n] (every rank's
    features); the output is the same on every rank, so the backward takes
    this rank's columns of the gradient (Megatron's gather_from_tensor_model_
    parallel_region)."""

    @staticmethod
    def forward(ctx, y, comm_id, sizes, rt):
        comm = comm_by_id(comm_id)
        ctx.off = sum(sizes[:comm.rank])
        ctx.cols = sizes[comm.rank]
        return all_gather_columns(y, comm_id, sizes, rt)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, ctx.off:ctx.off + ctx.cols], None, None, None
