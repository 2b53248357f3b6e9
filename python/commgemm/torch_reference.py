"""Reference tensor-parallel linears from torch.distributed collectives and
plain matmuls: what commgemm.torch's layers must match (tests, the example's
--reference mode). Not fast: every reduction is an fp32 all-reduce.

Rows are sharded with the ceil split (shard_rows), like commgemm.
"""

import torch
import torch.distributed as dist

from ._lib import shard_offset, shard_rows


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def gather_rows_(x_shard, m, group=None):
    """allgather of ceil-split row shards: [m_r, c] -> [m, c] (no autograd)."""
    P, r = _world(group)
    chunk = -(-m // P) if m else 0
    padded = x_shard.new_zeros((chunk, x_shard.shape[1]))
    padded[:x_shard.shape[0]] = x_shard
    out = x_shard.new_empty((P * chunk, x_shard.shape[1]))
    dist.all_gather_into_tensor(out, padded.contiguous(), group=group)
    # ceil split: every shard before the last non-empty one is full, so the
    # valid rows are exactly the first m of the padded buffer
    return out[:m].contiguous()


def reduce_scatter_rows_(x, group=None):
    """sum over ranks of [m, c], this rank's rows [m_r, c] (fp32 sums; no autograd)."""
    P, r = _world(group)
    m = x.shape[0]
    total = x.float().contiguous()
    dist.all_reduce(total, group=group)
    off, rows = shard_offset(m, r, P), shard_rows(m, r, P)
    return total[off:off + rows].to(x.dtype).contiguous()


def all_reduce_(x, group=None):
    total = x.float().contiguous().clone()
    dist.all_reduce(total, group=group)
    return total.to(x.dtype)


class _GatherRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_shard, m, group):
        ctx.group = group
        return gather_rows_(x_shard, m, group)

    @staticmethod
    def backward(ctx, g):
        return reduce_scatter_rows_(g, ctx.group), None, None


class _ReduceScatterRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group, ctx.m = group, x.shape[0]
        return reduce_scatter_rows_(x, group)

    @staticmethod
    def backward(ctx, g):
        return gather_rows_(g.contiguous(), ctx.m, ctx.group), None


class _AllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return all_reduce_(x, group)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _CopyToParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return all_reduce_(g, ctx.group), None


def gather_rows(x_shard, m, group=None):
    return _GatherRows.apply(x_shard, m, group)


def reduce_scatter_rows(x, group=None):
    return _ReduceScatterRows.apply(x, group)


def column_parallel_linear(x, weight, bias, group=None, m=None, sequence_parallel=True):
    """ColumnParallelLinear's math: x this rank's rows ([m_r, k], sequence
    parallel) or all rows; weight [n_loc, k]; bias [n_loc] or None."""
    if sequence_parallel:
        if m is None:
            m = x.shape[0] * dist.get_world_size(group)
        x = gather_rows(x, m, group)
    else:
        x = _CopyToParallel.apply(x, group)
    return torch.nn.functional.linear(x, weight, bias)


def row_parallel_linear(x, weight, bias, group=None, sequence_parallel=True):
    """RowParallelLinear's math: x [m, k_loc]; weight [n, k_loc]; bias [n]
    added once after the reduction. The bias gradient this gives is this
    rank's rows' part (sequence parallel): all-reduce it to get commgemm's
    (which is the full sum on every rank)."""
    partial = torch.nn.functional.linear(x, weight)
    y = reduce_scatter_rows(partial, group) if sequence_parallel else _AllReduce.apply(partial, group)
    return y + bias if bias is not None else y
