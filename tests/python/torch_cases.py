"""Checks shared by test_torch.py (GPU, torchrun) and test_torch_host.py (CPU,
host backend + gloo): commgemm.torch's layers and ops against
commgemm.torch_reference (torch.distributed collectives + plain matmuls),
computed in fp32 from the same values."""

import math

import torch
import torch.distributed as dist

from commgemm import shard_offset, shard_rows
from commgemm import torch as cgt
from commgemm import torch_reference as ref

TOL = {torch.float32: 2e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def rand(shape, seed, dtype, device, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return ((torch.rand(shape, generator=g) * 2 - 1) * scale).to(dtype=dtype, device=device)


def assert_close(got, want, dtype, what):
    assert got is not None, f"{what}: no value (gradient missing?)"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    if got.numel() == 0:
        return
    got, want = got.detach().float(), want.detach().float()
    scale = max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item()
    tol = TOL[dtype] * scale
    assert err <= tol, f"{what}: max |got - want| = {err:.3g} > {tol:.3g} ({dtype})"


def full_linear(in_features, out_features, bias, dtype, device, seed):
    """An nn.Linear with the same values on every rank (bias non-zero)."""
    lin = torch.nn.Linear(in_features, out_features, bias=bias, device="cpu")
    with torch.no_grad():
        lin.weight.copy_(rand(lin.weight.shape, seed, torch.float32, "cpu", 1 / math.sqrt(in_features)))
        if bias:
            lin.bias.copy_(rand(lin.bias.shape, seed + 1, torch.float32, "cpu", 0.5))
    return lin.to(device=device, dtype=dtype)


def _ref_params(layer):
    w = layer.weight.detach().float().clone().requires_grad_()
    b = layer.bias.detach().float().clone().requires_grad_() if layer.bias is not None else None
    return w, b


def _added(out, skip_bias_add, bias):
    """The layer's output, with the bias handed back by skip_bias_add added
    (as the caller's fused bias-GELU or bias-dropout-add would)."""
    if not skip_bias_add:
        return out
    y, b = out
    assert (b is None) == (not bias), f"skip_bias_add handed back {b!r} with bias={bias}"
    return y if b is None else y + b


def check_column(comm, group, device, dtype, m, k=24, n=19, bias=True, sequence_parallel=True, backend=None,
                 seed=0, skip_bias_add=False, **precision):
    """ColumnParallelLinear forward and grads (input, weight, bias) vs the
    reference; precision: the layer's partial_dtype and gemm_reduction."""
    P, r = comm.size, comm.rank
    layer = cgt.ColumnParallelLinear.from_linear(full_linear(k, n, bias, dtype, device, seed), comm,
                                                 sequence_parallel=sequence_parallel, backend=backend,
                                                 skip_bias_add=skip_bias_add, **precision)
    w_ref, b_ref = _ref_params(layer)
    X = rand((m, k), seed + 2, dtype, device)
    off, mr = shard_offset(m, r, P), shard_rows(m, r, P)
    x = (X[off:off + mr] if sequence_parallel else X).clone().requires_grad_()
    x_ref = x.detach().float().clone().requires_grad_()
    y = _added(layer(x, m=m), skip_bias_add, bias)
    y_ref = ref.column_parallel_linear(x_ref, w_ref, b_ref, group, m=m, sequence_parallel=sequence_parallel)
    what = f"column P={P} r={r} m={m} {dtype} sp={sequence_parallel} backend={backend} skip={skip_bias_add}"
    assert_close(y, y_ref, dtype, what + " output")
    grad = rand(tuple(y.shape), seed + 10 + r, dtype, device)  # the output's columns are this rank's
    y.backward(grad)
    y_ref.backward(grad.float())
    assert_close(x.grad, x_ref.grad, dtype, what + " input grad")
    assert_close(layer.weight.grad, w_ref.grad, dtype, what + " weight grad")
    if bias:
        assert_close(layer.bias.grad, b_ref.grad, dtype, what + " bias grad")


def check_row(comm, group, device, dtype, m, k=21, n=17, bias=True, sequence_parallel=True, backend=None, seed=0,
              skip_bias_add=False, **precision):
    """RowParallelLinear forward and grads vs the reference. The replicated
    bias's gradient is the full sum on every rank (the reference's per-rank
    part, all-reduced). precision: as check_column's."""
    P, r = comm.size, comm.rank
    layer = cgt.RowParallelLinear.from_linear(full_linear(k, n, bias, dtype, device, seed), comm,
                                              sequence_parallel=sequence_parallel, backend=backend,
                                              skip_bias_add=skip_bias_add, **precision)
    w_ref, b_ref = _ref_params(layer)
    x = rand((m, layer.in_local), seed + 20 + r, dtype, device).requires_grad_()
    x_ref = x.detach().float().clone().requires_grad_()
    y = _added(layer(x), skip_bias_add, bias)
    y_ref = ref.row_parallel_linear(x_ref, w_ref, b_ref, group, sequence_parallel=sequence_parallel)
    what = f"row P={P} r={r} m={m} {dtype} sp={sequence_parallel} backend={backend} skip={skip_bias_add}"
    assert_close(y, y_ref, dtype, what + " output")
    # sequence parallel: this rank's rows' gradient; else the replicated output's (same on every rank)
    grad = rand(tuple(y.shape), seed + 30 + (r if sequence_parallel else 0), dtype, device)
    y.backward(grad)
    y_ref.backward(grad.float())
    assert_close(x.grad, x_ref.grad, dtype, what + " input grad")
    assert_close(layer.weight.grad, w_ref.grad, dtype, what + " weight grad")
    if bias:
        want = b_ref.grad.clone()
        if sequence_parallel:
            dist.all_reduce(want, group=group)
        assert_close(layer.bias.grad, want, dtype, what + " bias grad")


def check_functional(comm, group, device, dtype, m, backend=None, seed=0, partial_dtype=None, gemm_reduction=None):
    """The functional ops without autograd, vs the reference (with the
    precision arguments each takes)."""
    pr = dict(partial_dtype=partial_dtype, gemm_reduction=gemm_reduction)
    P, r = comm.size, comm.rank
    k, n = 13, 7
    off, mr = shard_offset(m, r, P), shard_rows(m, r, P)
    X = rand((m, k), seed, dtype, device)
    w = rand((n, k), seed + 1 + r, dtype, device)
    b = rand((n,), seed + 5 + r, dtype, device)
    with torch.no_grad():
        y, gathered = cgt.all_gather_matmul(X[off:off + mr].contiguous(), w, b, comm=comm, m=m, backend=backend,
                                            return_gathered=True, **pr)
        assert_close(y, X.float() @ w.float().t() + b.float(), dtype, f"all_gather_matmul m={m}")
        assert torch.equal(gathered, X), "all_gather_matmul: gathered input differs"
        xs = rand((m, k), seed + 40 + r, dtype, device)
        bb = rand((n,), seed + 50, dtype, device)  # replicated bias
        partial = (xs.float() @ w.float().t()).contiguous()
        total = ref.all_reduce_(partial, group)
        ys = cgt.matmul_reduce_scatter(xs, w, bb, comm=comm, backend=backend, **pr)
        assert_close(ys, total[off:off + mr] + bb.float(), dtype, f"matmul_reduce_scatter m={m}")
        ya = cgt.matmul_all_reduce(xs, w, bb, comm=comm, backend=backend, **pr)
        assert_close(ya, total + bb.float(), dtype, f"matmul_all_reduce m={m}")
        # bulk: a wgrad-like NT GEMM beside a reduce-scatter
        a = rand((m, 5), seed + 60 + r, dtype, device)
        c, recv = cgt.bulk_matmul_collective(a, xs, partial.to(dtype), comm=comm, layout="NT",
                                             collective="reduce_scatter", backend=backend,
                                             gemm_reduction=gemm_reduction)
        assert_close(c, a.float().t() @ xs.float(), dtype, f"bulk GEMM m={m}")
        assert_close(recv, ref.reduce_scatter_rows_(partial.to(dtype).float(), group), dtype,
                     f"bulk reduce-scatter m={m}")
        _, recv = cgt.bulk_matmul_collective(send=X[off:off + mr].contiguous(), comm=comm, m=m,
                                             collective="all_gather", backend=backend)
        assert torch.equal(recv, X), "bulk all-gather differs"


class TPMLP(torch.nn.Module):
    """column -> GELU -> row, sequence parallel (the example's model)."""

    def __init__(self, hidden, ffn, comm, dtype, device, backend=None, seed=0):
        super().__init__()
        self.fc1 = cgt.ColumnParallelLinear.from_linear(full_linear(hidden, ffn, True, dtype, device, seed), comm,
                                                        backend=backend)
        self.fc2 = cgt.RowParallelLinear.from_linear(full_linear(ffn, hidden, True, dtype, device, seed + 7), comm,
                                                     backend=backend)

    def forward(self, x, m):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x, m=m)))


def check_init(comm, device, dtype, k=24, n=19, seed=1234):
    """The layers' own initialization: with every rank seeded alike, each
    rank's weight is its slice of one full nn.Linear-style draw (so shards
    differ across ranks, as in Megatron), not the same shard everywhere."""
    bound = 1 / math.sqrt(k)
    for cls in (cgt.ColumnParallelLinear, cgt.RowParallelLinear):
        torch.manual_seed(seed)
        layer = cls(k, n, comm, dtype=dtype, device=device)
        torch.manual_seed(seed)
        full = torch.empty(n, k, dtype=dtype, device=device).uniform_(-bound, bound)
        want = layer._weight_shard(full)
        assert torch.equal(layer.weight.detach(), want), f"{cls.__name__} rank {comm.rank}: weight is not its " \
            "slice of the full draw"
        assert not torch.any(layer.bias.detach()), f"{cls.__name__}: bias not zero"


def check_autocast(comm, group, device, m, sequence_parallel=True, k=24, n=19, seed=0):
    """Column -> row with fp32 parameters under torch.autocast(bfloat16): outputs in
    bfloat16, fp32 gradients, against fp32 math on the bf16-rounded values."""
    P, r = comm.size, comm.rank
    sp, bf = sequence_parallel, torch.bfloat16
    col = cgt.ColumnParallelLinear.from_linear(full_linear(k, n, True, torch.float32, device, seed), comm,
                                               sequence_parallel=sp)
    row = cgt.RowParallelLinear.from_linear(full_linear(n, k, True, torch.float32, device, seed + 3), comm,
                                            sequence_parallel=sp)
    X = rand((m, k), seed + 2, torch.float32, device)
    off, mr = shard_offset(m, r, P), shard_rows(m, r, P)
    x = (X[off:off + mr] if sp else X).clone().requires_grad_()
    with torch.autocast(torch.device(device).type, dtype=bf):
        h = col(x, m=m)
        y = row(h)
    what = f"autocast P={P} r={r} m={m} sp={sp}"
    assert h.dtype == bf and y.dtype == bf, f"{what}: outputs {h.dtype}, {y.dtype}, expected bfloat16"
    grad = rand(tuple(y.shape), seed + 10 + (r if sp else 0), torch.float32, device)
    (y.float() * grad).sum().backward()

    def rounded(t):
        return t.detach().to(bf).float().requires_grad_()

    x_ref, w1, b1, w2, b2 = (rounded(t) for t in (x, col.weight, col.bias, row.weight, row.bias))
    h_ref = ref.column_parallel_linear(x_ref, w1, b1, group, m=m, sequence_parallel=sp)
    y_ref = ref.row_parallel_linear(h_ref.to(bf).float(), w2, b2, group, sequence_parallel=sp)
    (y_ref * grad).sum().backward()
    assert_close(y, y_ref, bf, what + " output")
    for got, want, name in ((x.grad, x_ref.grad, "input"), (col.weight.grad, w1.grad, "column weight"),
                            (col.bias.grad, b1.grad, "column bias"), (row.weight.grad, w2.grad, "row weight")):
        assert got is not None and got.dtype == torch.float32, f"{what}: {name} grad {got if got is None else got.dtype}"
        assert_close(got, want, bf, f"{what} {name} grad")
    want = b2.grad.clone()
    if sp:
        dist.all_reduce(want, group=group)
    assert_close(row.bias.grad, want, bf, what + " row bias grad")
