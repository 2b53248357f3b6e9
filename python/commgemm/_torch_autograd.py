"""The autograd Functions of commgemm.torch: the math of the layers'
forward and backward (the functional ops use them too), each a sequence of
the custom ops of _torch_ops.py. Every Function takes the call's comm id,
backend (or its Route, _torch_collectives.py) and precision (partial_dtype,
gemm_reduction: names, "" for the comm's) as plain arguments and keeps what
its backward needs in ctx."""

import torch

from ._torch_collectives import all_gather_rows
from ._torch_ops import _ops


def _bias_grad(g):
    return g.sum(dim=0, dtype=torch.float32).to(g.dtype)


_SQRT_2_OVER_PI = 0.7978845608028654


def _dgelu(grad, pre):
    """grad * gelu'(pre), gelu's tanh form (the epilogues' DGELU), fp32 math, grad's dtype."""
    t = pre.float()
    inner = _SQRT_2_OVER_PI * (t + 0.044715 * t * t * t)
    th = torch.tanh(inner)
    d = 0.5 * (1 + th) + 0.5 * t * (1 - th * th) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * t * t)
    return (grad.float() * d).to(grad.dtype)


def _column_sp_grads(ctx, grad_y, kept, weight, need_x, need_w):
    """dX_r = reduce_scatter(dY . W) and dW = dY^T . allgather(X) of a column-parallel,
    sequence-parallel layer (kept: the gathered X where ctx.gathered_saved, else X_r).
    With both, the dgrad GEMM runs alone and its reduce-scatter is overlapped with the
    wgrad GEMM (cgm_bulk_overlap); with dX alone, one pipelined GEMM+RS."""
    rt, comm_id = ctx.rt, ctx.comm_id
    dx = dw = None
    if need_w and kept is None:
        raise RuntimeError("commgemm: weight needs a gradient but the gathered input was not saved "
                           "(weight.requires_grad changed after the forward?)")
    partial = gathered = None
    if need_w and not ctx.gathered_saved:  # X_r kept: gather it again
        if need_x and rt.bulk is not None:  # beside the dgrad GEMM dY . W (NN)
            partial, gathered = _ops.bulk_matmul_collective(grad_y, weight, kept, comm_id, "NN", "all_gather",
                                                            ctx.m, rt.bulk, ctx.gemm_reduction)
        else:
            gathered = all_gather_rows(kept, comm_id, ctx.m, rt, "column-parallel backward")
    elif need_w:
        gathered = kept
    if need_w and need_x and rt.bulk is not None:
        if partial is None:
            partial = torch.matmul(grad_y, weight)  # dgrad GEMM [m, k], this rank's contribution
        dw, dx = _ops.bulk_matmul_collective(grad_y, gathered, partial, comm_id, "NT", "reduce_scatter", 0,
                                             rt.bulk, ctx.gemm_reduction)
    else:
        if need_x:
            dx = _ops.matmul_reduce_scatter(grad_y, weight, None, comm_id, "NN", rt.backend, ctx.partial_dtype,
                                            ctx.gemm_reduction)
        if need_w:
            dw = torch.matmul(grad_y.t(), gathered)
    return dx, dw


class _AllGatherMatmul(torch.autograd.Function):
    """Y[m, n_loc] = allgather(X_r) . W^T + b (column-parallel, sequence parallel);
    with gelu, Y = gelu(allgather(X_r) . W^T + b) in the op's GELU_AUX epilogue, which
    also keeps the pre-activation for the backward (rt.epilogue must be True).
    Backward: dX_r = reduce_scatter(dY . W); dW = dY^T . allgather(X); db = sum_rows dY
    (with gelu, dY first becomes dY * gelu'(pre-activation)).
    With dW needed, the dgrad GEMM runs alone and its reduce-scatter is overlapped
    with the wgrad GEMM (cgm_bulk_overlap, TransformerEngine's bulk overlap);
    without, dX is one pipelined GEMM+RS.

    rt (a Route) says what the comm's backends can do. Where AG+GEMM cannot
    hand back the gathered X (cublasmp), the forward keeps X_r and the
    backward gathers it again: beside the dgrad GEMM (one bulk call) where
    the comm has a bulk op, else by torch.distributed; where it has no bulk
    op, dX is a GEMM+RS (NN) and dW a local GEMM."""

    @staticmethod
    def forward(ctx, x_shard, weight, bias, comm_id, m, rt, partial_dtype, gemm_reduction, save_gathered,
                return_gathered, gelu=False):
        from_op = rt.gathered and (save_gathered or return_gathered)
        pre = None
        if gelu:
            y, gathered, pre, _ = _ops.matmul_epilogue("ag", x_shard, weight, bias, None, comm_id, m, "TN",
                                                       rt.backend, "gelu_aux", "", gemm_reduction, from_op)
        else:
            y, gathered = _ops.all_gather_matmul(x_shard, weight, bias, comm_id, m, "TN", rt.backend, from_op,
                                                 gemm_reduction)
        if return_gathered and not from_op:
            gathered = all_gather_rows(x_shard, comm_id, m, rt, "all_gather_matmul(return_gathered=True)")
        ctx.comm_id, ctx.rt, ctx.m = comm_id, rt, m
        ctx.partial_dtype, ctx.gemm_reduction = partial_dtype, gemm_reduction
        ctx.gathered_saved = save_gathered and (from_op or return_gathered)
        keep = (gathered if ctx.gathered_saved else x_shard) if save_gathered else None
        ctx.save_for_backward(keep, weight, pre)
        ctx.mark_non_differentiable(gathered)
        return y, gathered

    @staticmethod
    def backward(ctx, grad_y, _grad_gathered):
        kept, weight, pre = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_y = grad_y.contiguous()
        if pre is not None:
            grad_y = _dgelu(grad_y, pre)
        dx, dw = _column_sp_grads(ctx, grad_y, kept, weight, need_x, need_w)
        db = _bias_grad(grad_y) if need_b else None
        return dx, dw, db, None, None, None, None, None, None, None, None


class _MatmulReduceScatter(torch.autograd.Function):
    """Y_r[m_r, n] = rows of sum_ranks X . W^T (+ b once) (row-parallel, sequence parallel).
    Backward: dX = allgather(dY_r) . W (pipelined AG+GEMM, NN), which also returns
    the gathered dY for dW = dY^T . X and db = sum_rows dY (every rank gets the full sums).
    Where AG+GEMM cannot hand back the gathered dY (rt.gathered False), dY is
    all-gathered alone and dX is a local GEMM: the same time as the AG+GEMM
    plus a second all-gather where the GEMM is the longer, less where not."""

    @staticmethod
    def forward(ctx, x, weight, bias, comm_id, rt, partial_dtype, gemm_reduction):
        y = _ops.matmul_reduce_scatter(x, weight, bias, comm_id, "TN", rt.backend, partial_dtype, gemm_reduction)
        ctx.comm_id, ctx.rt, ctx.m = comm_id, rt, x.shape[0]
        ctx.gemm_reduction = gemm_reduction
        ctx.save_for_backward(x, weight)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_y = grad_y.contiguous()
        need_gathered = need_w or need_b
        dx = dw = db = gathered = None
        if need_x and (ctx.rt.gathered or not need_gathered):
            dx, gathered = _ops.all_gather_matmul(grad_y, weight, None, ctx.comm_id, ctx.m, "NN", ctx.rt.backend,
                                                  need_gathered, ctx.gemm_reduction)
        elif need_gathered or need_x:
            gathered = all_gather_rows(grad_y, ctx.comm_id, ctx.m, ctx.rt, "row-parallel backward")
            if need_x:
                dx = torch.matmul(gathered, weight)
        if need_w:
            dw = torch.matmul(gathered.t(), x)
        if need_b:
            db = _bias_grad(gathered)
        return dx, dw, db, None, None, None, None


class _MatmulAllReduce(torch.autograd.Function):
    """Y[m, n] = sum_ranks X . W^T (+ b once) (row-parallel, no sequence parallelism).
    Backward: dY is the same on every rank: dX = dY . W, dW = dY^T . X, db = sum_rows dY."""

    @staticmethod
    def forward(ctx, x, weight, bias, comm_id, backend, partial_dtype, gemm_reduction):
        y = _ops.matmul_all_reduce(x, weight, bias, comm_id, "TN", backend, partial_dtype, gemm_reduction)
        ctx.save_for_backward(x, weight)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_y = grad_y.contiguous()
        dx = torch.matmul(grad_y, weight) if need_x else None
        dw = torch.matmul(grad_y.t(), x) if need_w else None
        db = _bias_grad(grad_y) if need_b else None
        return dx, dw, db, None, None, None, None


class _LinearAllReduceGrad(torch.autograd.Function):
    """Y = X . W^T + b with X replicated (column-parallel, no sequence parallelism).
    Backward: dX = allreduce(dY . W) (pipelined GEMM+AR, NN); dW, db local."""

    @staticmethod
    def forward(ctx, x, weight, bias, comm_id, backend, partial_dtype, gemm_reduction):
        ctx.comm_id, ctx.backend = comm_id, backend
        ctx.partial_dtype, ctx.gemm_reduction = partial_dtype, gemm_reduction
        ctx.save_for_backward(x, weight)
        return torch.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_y = grad_y.contiguous()
        dx = None
        if need_x:
            dx = _ops.matmul_all_reduce(grad_y, weight, None, ctx.comm_id, "NN", ctx.backend, ctx.partial_dtype,
                                        ctx.gemm_reduction)
        dw = torch.matmul(grad_y.t(), x) if need_w else None
        db = _bias_grad(grad_y) if need_b else None
        return dx, dw, db, None, None, None, None


class _BiasSummedOverRanks(torch.autograd.Function):
    """The row-parallel, sequence-parallel layer's bias handed back unadded
    (skip_bias_add): the caller adds it to this rank's rows only, so its
    gradient is summed over the ranks here (GEMM+AR of a P x 1 ones matrix by
    the gradient: P equal rows, as cublasmp, which takes even shards only,
    needs), the full sum on every rank as when the layer adds it."""

    @staticmethod
    def forward(ctx, bias, comm_id, backend, partial_dtype, nranks):
        ctx.comm_id, ctx.backend, ctx.partial_dtype, ctx.nranks = comm_id, backend, partial_dtype, nranks
        return bias.clone()

    @staticmethod
    def backward(ctx, grad):
        g = grad.contiguous().reshape(-1, 1)
        ones = torch.ones((ctx.nranks, 1), dtype=g.dtype, device=g.device)
        total = _ops.matmul_all_reduce(ones, g, None, ctx.comm_id, "TN", ctx.backend, ctx.partial_dtype, "")
        return total[0].reshape(grad.shape), None, None, None, None


class _ParallelMLP(torch.autograd.Function):
    """Y_r = rows of gelu(allgather(X_r) . W1^T + b1) . W2^T (+ b2) (sequence parallel): fc1's AG+GEMM
    applies the GELU in its GELU_AUX epilogue and keeps the pre-activation; fc2 is a GEMM+RS.
    Backward: fc2's dgrad is one AG+GEMM (NN) of dY_r whose DGELU_BGRAD epilogue multiplies
    by gelu'(pre-activation) and writes fc1's bias gradient, and which hands back the gathered
    dY; fc2's weight gradient is one GEMM with a BGRAD epilogue (dW2 = dY^T . H, db2 = sum_rows dY);
    fc1's dX and dW as the column-parallel layer's (_column_sp_grads). rt must have epilogue
    and gathered True and a bulk op whose backend takes epilogues (ParallelMLP checks)."""

    @staticmethod
    def forward(ctx, x_shard, w1, b1, w2, b2, comm_id, m, rt, partial_dtype, gemm_reduction):
        save_gathered = w1.requires_grad
        h, gathered, pre, _ = _ops.matmul_epilogue("ag", x_shard, w1, b1, None, comm_id, m, "TN", rt.backend,
                                                   "gelu_aux", "", gemm_reduction, save_gathered)
        y = _ops.matmul_reduce_scatter(h, w2, b2, comm_id, "TN", rt.backend, partial_dtype, gemm_reduction)
        ctx.comm_id, ctx.rt, ctx.m = comm_id, rt, m
        ctx.partial_dtype, ctx.gemm_reduction = partial_dtype, gemm_reduction
        ctx.gathered_saved = save_gathered
        ctx.has_b1 = b1 is not None
        ctx.save_for_backward(gathered if save_gathered else None, w1, pre, h, w2)
        return y

    @staticmethod
    def backward(ctx, grad_y):
        gathered_x, w1, pre, h, w2 = ctx.saved_tensors
        need_x, need_w1, need_b1, need_w2, need_b2 = ctx.needs_input_grad[:5]
        rt, gr = ctx.rt, ctx.gemm_reduction
        grad_y = grad_y.contiguous()
        # fc2's dgrad through the GELU: dPre = (allgather(dY) . W2) * gelu'(pre), db1 = sum_rows dPre
        epilogue = "dgelu_bgrad" if ctx.has_b1 else "dgelu"
        dpre, dy_all, _, db1 = _ops.matmul_epilogue("ag", grad_y, w2, None, pre, ctx.comm_id, ctx.m, "NN",
                                                    rt.backend, epilogue, "", gr, need_w2 or need_b2)
        dw2 = db2 = None
        if need_w2 or need_b2:  # dW2 = dY^T . H (NT), db2 = sum_rows dY in its BGRAD epilogue
            dw2, _, _, db2 = _ops.matmul_epilogue("gemm", dy_all, h, None, None, ctx.comm_id, 0, "NT", rt.bulk,
                                                  "bgrad", "", gr, False)
        dx, dw1 = _column_sp_grads(ctx, dpre, gathered_x, w1, need_x, need_w1)
        return (dx, dw1, db1 if need_b1 else None, dw2 if need_w2 else None, db2 if need_b2 else None,
                None, None, None, None, None)
