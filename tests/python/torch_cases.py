"""Checks shared by test_torch.py (GPU, torchrun) and test_torch_host.py (CPU,
host backend + gloo): commgemm.torch's layers and ops against
commgemm.torch_reference (torch.distributed collectives + plain matmuls),
computed in fp32 from the same values."""

import math
import types

import pytest
import torch
import torch.distributed as dist

from commgemm import NotSupportedError, shard_offset, shard_rows
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
        if not comm.supports("bulk", backend):  # cublasmp: refused, the comm stays usable
            with pytest.raises(NotSupportedError):
                cgt.bulk_matmul_collective(a, xs, partial.to(dtype), comm=comm, layout="NT",
                                           collective="reduce_scatter", backend=backend)
            return
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
        assert got is not None and got.dtype == torch.float32, \
            f"{what}: {name} grad {got if got is None else got.dtype}"
        assert_close(got, want, bf, f"{what} {name} grad")
    want = b2.grad.clone()
    if sp:
        dist.all_reduce(want, group=group)
    assert_close(row.bias.grad, want, bf, what + " row bias grad")


# --------------------------------------------------------------------------
# Against the unsplit nn.Linear: partitions, fused outputs, gather_output,
# [s, b, h] and [b, s, h] inputs
# --------------------------------------------------------------------------


def seq_shard(t, comm, batch_first=False):
    """This rank's sequence shard of a full tensor, cut by hand: rows of a 2-D
    [m, f]; positions along s of [s, b..., f] (or [b, s, f] with batch_first),
    as many as the ceil split of the flattened s·b rows gives (whole
    positions)."""
    P, r = comm.size, comm.rank
    dim = 1 if batch_first else 0
    inner = t[..., 0].numel() // t.shape[dim]
    m = t.shape[dim] * inner
    return t.narrow(dim, shard_offset(m, r, P) // inner, shard_rows(m, r, P) // inner)


def _reference(linear, x, grad):
    """The unsplit layer in fp32: output, and the grads of sum(output * grad)."""
    lin = torch.nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None, device=x.device)
    with torch.no_grad():
        lin.weight.copy_(linear.weight.float())
        if linear.bias is not None:
            lin.bias.copy_(linear.bias.float())
    x = x.detach().float().clone().requires_grad_()
    y = lin(x)
    y.backward(grad.float())
    return y.detach(), x.grad, lin.weight.grad, (lin.bias.grad if lin.bias is not None else None)


def check_column_vs_linear(comm, layer, linear, X, G, m=None, what=""):
    """A ColumnParallelLinear or FusedColumnParallelLinear built from `linear`
    against it: full input X and output gradient G ([..., features], the same
    on every rank); the layer gets this rank's sequence shard (sequence
    parallel) or X, and the gradient of its outputs' columns (all of them
    with gather_output, each rank computing the same loss)."""
    dtype = layer.weight.dtype
    sp, bf = layer.sequence_parallel, layer.batch_first
    y_ref, dx_ref, dw_ref, db_ref = _reference(linear, X, G)
    x = (seq_shard(X, comm, bf) if sp else X).detach().clone().requires_grad_()
    outs = layer(x, m=m)
    outs = outs if isinstance(outs, tuple) else (outs,)
    sizes = layer.out_features if isinstance(layer.out_features, tuple) else (layer.out_features,)
    wants, grads, base = [], [], 0
    for n, off, local in zip(sizes, layer._offsets, layer._locals):
        cols = slice(base, base + n) if layer.gather_output else slice(base + off, base + off + local)
        wants.append(y_ref[..., cols])
        grads.append(G[..., cols].to(dtype))
        base += n
    what = f"{type(layer).__name__} P={comm.size} r={comm.rank} sp={sp} bf={bf} {dtype} {what}"
    assert len(outs) == len(wants), f"{what}: {len(outs)} outputs, expected {len(wants)}"
    for i, (got, want) in enumerate(zip(outs, wants)):
        assert_close(got, want, dtype, f"{what} output {i}")
    torch.autograd.backward(outs, grads)
    assert_close(x.grad, seq_shard(dx_ref, comm, bf) if sp else dx_ref, dtype, what + " input grad")
    assert_close(layer.weight.grad, layer._weight_shard(dw_ref), dtype, what + " weight grad")
    if db_ref is not None:
        assert_close(layer.bias.grad, layer._bias_shard(db_ref), dtype, what + " bias grad")


def check_row_vs_linear(comm, layer, linear, H, G, what=""):
    """A RowParallelLinear built from `linear` against it: full input H and
    output gradient G; the layer gets this rank's input features of H and
    the gradient of its output (this rank's sequence shard, sequence
    parallel; else all of it, every rank computing the same loss)."""
    dtype = layer.weight.dtype
    sp, bf = layer.sequence_parallel, layer.batch_first
    y_ref, dx_ref, dw_ref, db_ref = _reference(linear, H, G)
    cols = slice(layer.in_offset, layer.in_offset + layer.in_local)
    x = H[..., cols].detach().clone().requires_grad_()
    y = layer(x)
    what = f"RowParallelLinear P={comm.size} r={comm.rank} sp={sp} bf={bf} {dtype} {what}"
    assert_close(y, seq_shard(y_ref, comm, bf) if sp else y_ref, dtype, what + " output")
    y.backward((seq_shard(G, comm, bf) if sp else G).to(dtype))
    assert_close(x.grad, dx_ref[..., cols], dtype, what + " input grad")
    assert_close(layer.weight.grad, dw_ref[:, cols], dtype, what + " weight grad")
    if db_ref is not None:
        assert_close(layer.bias.grad, db_ref, dtype, what + " bias grad")


def check_partitions(comm, device, dtype, sequence_parallel=True, seed=0):
    """Heads kept whole (partition_multiple), explicit per-rank sizes
    (partition_sizes), and fused gate+up and q/k/v outputs of one
    all-gather, each with its own split: against the unsplit nn.Linear,
    forward and backward, uneven everywhere."""
    P, sp = comm.size, sequence_parallel
    head_dim, heads, hidden, m = 4, 8, 12, 11
    n = head_dim * heads
    X = rand((m, hidden), seed, dtype, device)
    G = rand((m, 3 * n), seed + 1, torch.float32, device)
    # column: whole heads on each rank
    lin = full_linear(hidden, n, True, dtype, device, seed + 2)
    col = cgt.ColumnParallelLinear.from_linear(lin, comm, partition_multiple=head_dim, sequence_parallel=sp)
    want = [shard_rows(heads, q, P) * head_dim for q in range(P)]
    assert list(col.partition) == want, f"partition {col.partition}, expected {want}"
    check_column_vs_linear(comm, col, lin, X, G[:, :n], m=m, what="heads")
    # row: the same heads in, explicit sizes also
    row_lin = full_linear(n, hidden, True, dtype, device, seed + 3)
    row = cgt.RowParallelLinear.from_linear(row_lin, comm, partition_multiple=head_dim, sequence_parallel=sp)
    assert row.partition == col.partition, f"row partition {row.partition} != column's {col.partition}"
    H = rand((m, n), seed + 4, dtype, device)
    check_row_vs_linear(comm, row, row_lin, H, G[:, :hidden], what="heads")
    sizes = [n - 5 * (P - 1)] + [5] * (P - 1)  # the first rank the most, not the ceil split
    row = cgt.RowParallelLinear.from_linear(row_lin, comm, partition_sizes=sizes, sequence_parallel=sp)
    check_row_vs_linear(comm, row, row_lin, H, G[:, :hidden], what=f"sizes {sizes}")
    col = cgt.ColumnParallelLinear.from_linear(lin, comm, partition_sizes=sizes, sequence_parallel=sp)
    assert col.out_local == sizes[comm.rank]
    check_column_vs_linear(comm, col, lin, X, G[:, :n], m=m, what=f"sizes {sizes}")
    # fused gate + up (ceil split each) and q/k/v with fewer k/v heads (whole heads each)
    gate, up = (full_linear(hidden, 2 * hidden - 1, True, dtype, device, seed + s) for s in (5, 6))
    fused = cgt.FusedColumnParallelLinear.from_linears([gate, up], comm, sequence_parallel=sp)
    gate_up = types.SimpleNamespace(in_features=hidden, out_features=2 * (2 * hidden - 1),
                                    weight=torch.cat([gate.weight, up.weight]), bias=torch.cat([gate.bias, up.bias]))
    check_column_vs_linear(comm, fused, gate_up, X, G[:, :2 * (2 * hidden - 1)], m=m, what="gate+up")
    kv = 3 * head_dim
    qkv = full_linear(hidden, n + 2 * kv, False, dtype, device, seed + 7)
    fused = cgt.FusedColumnParallelLinear.from_linear(qkv, comm, out_features=[n, kv, kv],
                                                      partition_multiple=head_dim, sequence_parallel=sp)
    want = [[shard_rows(h, q, P) * head_dim for q in range(P)] for h in (heads, 3, 3)]
    assert [list(p) for p in fused.partitions] == want, f"q/k/v partitions {fused.partitions}, expected {want}"
    check_column_vs_linear(comm, fused, qkv, X, G[:, :n + 2 * kv], m=m, what="q/k/v")


def check_mlp(comm, device, dtype, m, hidden=16, ffn=37, bias=True, sequence_parallel=True, batch=None,
              batch_first=False, seed=0, fused=None):
    """ParallelMLP against the unsplit nn.Sequential(Linear, GELU(approximate="tanh"), Linear)
    in fp32, forward and every gradient: the same full X and output gradient on every rank,
    this rank's sequence shard of each (sequence parallel) or all of them. X is [m, hidden],
    or with a batch [m, batch, hidden] ([batch, m, hidden] batch_first). fused: whether the
    comm's backend must have run it through the epilogues (None: either)."""
    fc1 = full_linear(hidden, ffn, bias, dtype, device, seed)
    fc2 = full_linear(ffn, hidden, bias, dtype, device, seed + 5)
    mlp = cgt.ParallelMLP.from_linears(fc1, fc2, comm, sequence_parallel=sequence_parallel, batch_first=batch_first)
    if fused is not None:
        with torch.enable_grad():
            assert mlp._fused() == (fused and sequence_parallel), f"ParallelMLP._fused() = {mlp._fused()}"
    seq = torch.nn.Sequential(torch.nn.Linear(hidden, ffn, bias=bias), torch.nn.GELU(approximate="tanh"),
                              torch.nn.Linear(ffn, hidden, bias=bias)).to(device)
    with torch.no_grad():
        for mine, full in ((seq[0], fc1), (seq[2], fc2)):
            mine.weight.copy_(full.weight.float())
            if bias:
                mine.bias.copy_(full.bias.float())
    shape = (m, hidden) if batch is None else (batch, m, hidden) if batch_first else (m, batch, hidden)
    X = rand(shape, seed + 2, dtype, device)
    G = rand(shape, seed + 3, dtype, device)
    x_ref = X.float().clone().requires_grad_()
    y_ref = seq(x_ref)
    y_ref.backward(G.float())
    sp = sequence_parallel
    x = (seq_shard(X, comm, batch_first) if sp else X).clone().requires_grad_()
    y = mlp(x, m * (batch or 1)) if sp else mlp(x)
    what = f"ParallelMLP P={comm.size} r={comm.rank} m={m} {dtype} sp={sp} bias={bias} bf={batch_first}"
    assert_close(y, seq_shard(y_ref, comm, batch_first) if sp else y_ref, dtype, what + " output")
    y.backward(seq_shard(G, comm, batch_first) if sp else G)
    assert_close(x.grad, seq_shard(x_ref.grad, comm, batch_first) if sp else x_ref.grad, dtype, what + " input grad")
    for name, layer, full in (("fc1", mlp.fc1, seq[0]), ("fc2", mlp.fc2, seq[2])):
        assert_close(layer.weight.grad, layer._weight_shard(full.weight.grad), dtype, f"{what} {name} weight grad")
        if bias:
            assert_close(layer.bias.grad, layer._bias_shard(full.bias.grad), dtype, f"{what} {name} bias grad")


def check_column_gelu(comm, device, dtype, m, k=24, n=19, sequence_parallel=True, seed=0):
    """ColumnParallelLinear(activation="gelu") against Linear then F.gelu(approximate="tanh"),
    forward and grads, with and without autograd."""
    linear = full_linear(k, n, True, dtype, device, seed)
    layer = cgt.ColumnParallelLinear.from_linear(linear, comm, sequence_parallel=sequence_parallel,
                                                 activation="gelu")
    X = rand((m, k), seed + 2, dtype, device)
    G = rand((m, n), seed + 3, dtype, device)
    lin = torch.nn.Linear(k, n, device=device)
    with torch.no_grad():
        lin.weight.copy_(linear.weight.float())
        lin.bias.copy_(linear.bias.float())
    x_ref = X.float().clone().requires_grad_()
    y_ref = torch.nn.functional.gelu(lin(x_ref), approximate="tanh")
    y_ref.backward(G.float())
    x = (seq_shard(X, comm) if sequence_parallel else X).clone().requires_grad_()
    cols = slice(layer.out_offset, layer.out_offset + layer.out_local)
    what = f"ColumnParallelLinear(gelu) P={comm.size} r={comm.rank} m={m} {dtype} sp={sequence_parallel}"
    with torch.no_grad():
        assert_close(layer(x.detach(), m=m), y_ref[:, cols], dtype, what + " output without grad")
    y = layer(x, m=m)
    assert_close(y, y_ref[:, cols], dtype, what + " output")
    y.backward(G[:, cols])
    assert_close(x.grad, seq_shard(x_ref.grad, comm) if sequence_parallel else x_ref.grad, dtype,
                 what + " input grad")
    assert_close(layer.weight.grad, layer._weight_shard(lin.weight.grad), dtype, what + " weight grad")
    assert_close(layer.bias.grad, layer._bias_shard(lin.bias.grad), dtype, what + " bias grad")
