"""FP8 in commgemm.torch's layers on CPU tensors (host backend): each
recipe (current, delayed, block scaling), column and row layers, with and
without sequence parallelism, forward and backward against the same layer
in fp32, within a bound derived from fp8 precision; delayed scaling's amax
history across steps; the quantization helpers; refusals.

The bound: a dot product of operands each within a relative error u of its
value (round to nearest: u = 2^-4 for e4m3, 2^-3 for e5m2; twice that for
an operand quantized twice, as block scaling's transposed copies of
gathered data are) differs from the exact one by at most
(uA + uB + uA uB) * sum |a| |b|, elementwise: err <= rel * (|A| @ |B|),
plus a small absolute term for values in the formats' subnormal range.

    python3 -m pytest tests/python/test_torch_fp8_host.py -q
"""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import libcheck  # noqa: E402 - puts this tree's python/ on sys.path
import ranks  # noqa: E402

torch = pytest.importorskip("torch")

import commgemm  # noqa: E402

pytestmark = libcheck.skip_without_library()

U = {"e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}
M, K, HIDDEN, N = 9, 160, 260, 140  # uneven rows on 2 ranks; partial 128-blocks; 2 W row blocks


def _rel(ua, ub):
    return ua + ub + ua * ub


def check(got, ref, a, b, ua, ub, what, atol_frac=1e-4):
    """|got - ref| <= rel(ua, ub) * (|a| @ |b|) + atol elementwise; and got is
    not ref (it went through fp8)."""
    mag = a.double().abs() @ b.double().abs()
    bound = _rel(ua, ub) * mag + atol_frac * float(mag.max()) + 1e-6
    err = (got.double() - ref.double()).abs()
    worst = float((err / bound).max())
    assert worst <= 1.0, f"{what}: error {float(err.max()):.3g} is {worst:.2f} x the fp8 bound"
    assert float(err.max()) > 0, f"{what}: identical to fp32: not computed in fp8?"


def _recipe(name):
    from commgemm import torch as cgt
    return {"current": cgt.Float8CurrentScaling(), "delayed": cgt.DelayedScaling(amax_history_len=4),
            "block": cgt.Float8BlockScaling()}[name]


def _units(name):
    """(u of forward operands, u of gradients, factor for requantized copies)."""
    if name == "block":
        return U["e4m3"], U["e4m3"], 2
    return U["e4m3"], U["e5m2"], 1


def _run_layer(layer, x, g, m, kw):
    for p in layer.parameters():
        p.grad = None
    xi = x.clone().requires_grad_()
    y = layer(xi, **kw)
    (y * g).sum().backward()
    return y.detach(), xi.grad, layer.weight.grad, layer.bias.grad


def body_layers(comm, recipe_name, steps):
    from commgemm import torch as cgt
    P, r = comm.size, comm.rank
    uf, ug, twice = _units(recipe_name)
    uq = uf * twice + (uf * uf if twice == 2 else 0)  # an operand quantized twice
    ugq = ug * twice + (ug * ug if twice == 2 else 0)
    checked = 0
    for sp in (True, False):
        torch.manual_seed(0)
        lin1, lin2 = torch.nn.Linear(K, HIDDEN), torch.nn.Linear(HIDDEN, N)
        with torch.no_grad():
            lin1.bias.uniform_(-1, 1)
            lin2.bias.uniform_(-1, 1)
        col = cgt.ColumnParallelLinear.from_linear(lin1, comm, sequence_parallel=sp)
        row = cgt.RowParallelLinear.from_linear(lin2, comm, sequence_parallel=sp)
        # rows of growing magnitude: the ranks' shards have amaxes far apart (a scale taken from the
        # wrong shard shows)
        grow = torch.linspace(0.1, 4, M)[:, None]
        X = (torch.rand(M, K) * 2 - 1) * grow
        G1 = torch.rand(M, HIDDEN) * 2 - 1  # dY of the column layer (full features)
        H = torch.rand(M, HIDDEN) * 2 - 1  # the row layer's input (full features)
        G2 = (torch.rand(M, N) * 2 - 1) * grow
        off, mr = comm.shard_offset(M), comm.shard_rows(M)
        c0, cn = col.out_offset, col.out_local
        r0, rn = row.in_offset, row.in_local
        x_in = X[off:off + mr] if sp else X
        g1 = G1[:, c0:c0 + cn]
        h_in = H[:, r0:r0 + rn]
        g2 = G2[off:off + mr] if sp else G2
        kw = {"m": M} if sp else {}
        col.fp8_recipe = row.fp8_recipe = None
        ref_c = _run_layer(col, x_in, g1, M, kw)
        ref_r = _run_layer(row, h_in, g2, M, {})
        col.fp8_recipe = row.fp8_recipe = _recipe(recipe_name)
        W1, W2r = lin1.weight.detach(), lin2.weight.detach()[:, r0:r0 + rn]
        for step in range(steps):
            atol = 2e-2 if recipe_name == "delayed" and step == 0 else 1e-4  # scale 1 before any history
            y, dx, dw, db = _run_layer(col, x_in, g1, M, kw)
            what = f"column sp={sp} step {step}"
            check(y, ref_c[0], X, W1[c0:c0 + cn].t(), uf, uf, what + " y", atol)
            dx_full = G1 @ W1  # sum over ranks of dY_q . W_q
            check(dx, ref_c[1], G1 if not sp else G1[off:off + mr], W1, ug, uf, what + " dx", atol)
            assert torch.allclose(ref_c[1], dx_full[off:off + mr] if sp else dx_full, atol=1e-4)
            check(dw, ref_c[2], g1.t(), X, ug, uq, what + " dw", atol)
            torch.testing.assert_close(db, ref_c[3], rtol=1e-5, atol=1e-5)  # db: high precision
            y, dx, dw, db = _run_layer(row, h_in, g2, M, {})
            what = f"row sp={sp} step {step}"
            full_y = H @ lin2.weight.detach().t()
            check(y, ref_r[0], H[off:off + mr] if sp else H, lin2.weight.detach().t(), uf, uf, what + " y", atol)
            check(dx, ref_r[1], G2, W2r, ug, uf, what + " dx", atol)
            check(dw, ref_r[2], G2.t(), h_in, ugq if sp else ug, uq if recipe_name == "block" else uf,
                  what + " dw", atol)
            torch.testing.assert_close(db, ref_r[3], rtol=1e-5, atol=1e-5)
            assert full_y.shape[1] == N
            checked += 8
    return checked


@pytest.mark.parametrize("recipe_name", ["current", "delayed", "block"])
def test_layers_fp8_vs_fp32(recipe_name):
    steps = 3 if recipe_name == "delayed" else 1
    assert all(c > 0 for c in ranks.run(body_layers, 2, recipe_name, steps))


def body_delayed_history(comm):
    """The amax history: row 0 is the latest of each tensor (input: the max
    over the ranks, since the sequence-parallel column layer's gathered X
    shares one scale; weight: this rank's shard; grad_output: this rank's
    dY), older rows roll down, the window keeps amax_history_len steps, and
    each step's scale comes from the window before it."""
    from commgemm import torch as cgt
    P, r = comm.size, comm.rank
    torch.manual_seed(0)
    col = cgt.ColumnParallelLinear(K, HIDDEN, comm, fp8_recipe=cgt.DelayedScaling(amax_history_len=3))
    off, mr = comm.shard_offset(M), comm.shard_rows(M)
    X = torch.rand(M, K) * 2 - 1
    G = torch.rand(M, col.out_local) * 2 - 1
    want = []
    for step, f in enumerate((1.0, 4.0, 0.5, 2.0)):
        x = (X[off:off + mr] * f).requires_grad_()
        y = col(x, m=M)
        (y * G * f).sum().backward()
        want.insert(0, [float((X * f).abs().max()), float(col.weight.detach().abs().max()),
                        float((G * f).abs().max())])
        h = col.fp8_meta.amax_history
        assert h.shape == (3, 3)
        rows = want[:3] + [[0.0] * 3] * (3 - len(want[:3]))
        torch.testing.assert_close(h, torch.tensor(rows), rtol=0, atol=0, msg=f"step {step}")
    # the next scale: the window's max over fp8_max (e4m3 input, e5m2 gradients)
    s = col.fp8_meta.scale("input", torch.float8_e4m3fn)
    assert float(s) == pytest.approx(max(w[0] for w in want[:3]) / 448, rel=1e-6)
    s = col.fp8_meta.scale("grad_output", torch.float8_e5m2)
    assert float(s) == pytest.approx(max(w[2] for w in want[:3]) / 57344, rel=1e-6)
    return True


def test_delayed_scaling_history():
    ranks.run(body_delayed_history, 2)


def body_bad_input(comm):
    from commgemm import torch as cgt
    with pytest.raises(commgemm.InvalidArgumentError, match="fp8_recipe"):
        cgt.ColumnParallelLinear(8, 8, comm, fp8_recipe="fp8")
    with pytest.raises(commgemm.InvalidArgumentError, match="fp8_format"):
        cgt.DelayedScaling(fp8_format="e5m2")
    layer = cgt.RowParallelLinear(8, 8, comm, fp8_recipe=cgt.Float8CurrentScaling())
    assert "fp8_recipe=Float8CurrentScaling" in repr(layer)
    with pytest.raises(commgemm.InvalidArgumentError, match="1 x 128 blocks do not transpose"):
        cgt.transpose(cgt.quantize(torch.ones(2, 3), torch.float8_e4m3fn, commgemm.fp8.Scaling.BLOCK_1X128))
    with pytest.raises(commgemm.InvalidArgumentError, match="expected torch.float8"):
        cgt.quantize(torch.ones(2, 3), torch.bfloat16)
    return True


def test_fp8_bad_input():
    ranks.run(body_bad_input, 2)


def test_torch_quantization_helpers():
    """torch's helpers round and saturate as commgemm.h (and as the numpy
    ones): the same codes for the same values."""
    import numpy as np
    from commgemm import fp8
    from commgemm import torch as cgt
    a = (torch.rand(130, 300) * 2 - 1) * torch.linspace(0.01, 100, 300)
    a[0, 0] = float("inf")
    a[1, 1] = float("-inf")
    for sc in (fp8.Scaling.TENSOR, fp8.Scaling.BLOCK_1X128, fp8.Scaling.BLOCK_128X128):
        for dt, npdt in ((torch.float8_e4m3fn, "float8_e4m3fn"), (torch.float8_e5m2, "float8_e5m2")):
            finite = a.clone()
            finite[0, 0] = finite[1, 1] = 1.0
            q = cgt.quantize(finite, dt, sc)
            codes, s = fp8.quantize(finite.numpy(), npdt, sc)
            np.testing.assert_array_equal(q.scale.numpy(), s)
            np.testing.assert_array_equal(q.data.float().numpy(), codes.astype(np.float32))
            if sc == fp8.Scaling.BLOCK_128X128:
                t = cgt.transpose(q)
                torch.testing.assert_close(cgt.dequantize(t), cgt.dequantize(q).t(), rtol=0, atol=0)
    sat = cgt.cast_to_fp8(a[:2, :2], torch.float8_e4m3fn, 1.0).float()
    assert sat[0, 0] == 448 and sat[1, 1] == -448
    assert float(cgt.cast_to_fp8(torch.tensor([float("nan")]), torch.float8_e5m2).float()[0]) != 0


# --------------------------------------------------------------------------
# The functional ops on fp8 tensors (all_gather_matmul, matmul_reduce_scatter,
# matmul_all_reduce with x_scale / w_scale; torch.ops.commgemm.fp8_matmul)
# --------------------------------------------------------------------------

FN_K, FN_N = 160, 140  # a partial 128-block along k; two W row blocks


def _q(t, dtype, scaling, scalar=False):
    from commgemm import torch as cgt
    q = cgt.quantize(t, dtype, scaling)
    return q.data, (q.scale.reshape(()) if scalar else q.scale), cgt.dequantize(q).double()


def _fn_check(got, ref, mag, what, out_dtype=torch.float32):
    """got vs the float64 product of the dequantized operands: the same values
    as the library's operands, so only fp32 accumulation (k * 2^-24 of
    |A| @ |B|) and the output's rounding (2^-8 of |ref| for bf16) separate them."""
    assert got.dtype == out_dtype, f"{what}: {got.dtype}"
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    out_u = {torch.float32: 0.0, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}[out_dtype]
    bound = 1e-5 * mag + out_u * ref.abs() + 1e-6
    err = (got.double() - ref).abs()
    assert bool((err <= bound).all()), f"{what}: error {float(err.max()):.3g} beyond the bound"


def body_fn_ops(comm, m, scaling_name, dtypes):
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    P, r = comm.size, comm.rank
    xdt, wdt = dtypes
    xs = Scaling.TENSOR if scaling_name == "tensor" else Scaling.BLOCK_1X128
    ws = Scaling.TENSOR if scaling_name == "tensor" else Scaling.BLOCK_128X128
    torch.manual_seed(1)
    # rows of growing magnitude: every rank's shard has its own amax, hence its own scale
    X = (torch.rand(m, FN_K) * 2 - 1) * torch.linspace(0.1, 8, m)[:, None]
    W = torch.rand(FN_N, FN_K) * 2 - 1
    b = torch.rand(FN_N) * 2 - 1
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    # AG+GEMM: each rank quantizes its rows with its own scales
    shards = [_q(X[comm.shard_offset(m, s):][:comm.shard_rows(m, s)], xdt, xs,
                 scalar=s % 2 == 1 and xs == Scaling.TENSOR) for s in range(P)]  # () and (1,) scales
    w, ws_, wd = _q(W, wdt, ws)
    xr, xsr, _ = shards[r]
    xd = torch.cat([d for _, _, d in shards])
    ref = xd @ wd.t() + b.double()
    mag = xd.abs() @ wd.abs().t()
    y, g, gs = cgt.all_gather_matmul(xr, w, b, comm=comm, m=m, x_scale=xsr, w_scale=ws_, return_gathered=True)
    _fn_check(y, ref, mag, f"ag {scaling_name}")
    assert g.dtype == xdt and torch.equal(g.view(torch.uint8), torch.cat([c for c, _, _ in shards]).view(torch.uint8))
    # per tensor: rank s's scale at [s], 0 for a shard with no rows (m < P)
    want_gs = (torch.stack([s.reshape(()) * (c.shape[0] > 0) for c, s, _ in shards]) if xs == Scaling.TENSOR
               else torch.cat([s for _, s, _ in shards]))
    torch.testing.assert_close(gs, want_gs, rtol=0, atol=0)
    y16 = cgt.all_gather_matmul(xr, w, None, comm=comm, m=m, x_scale=xsr, w_scale=ws_, out_dtype=torch.bfloat16)
    _fn_check(y16, xd @ wd.t(), mag, f"ag {scaling_name} bf16", torch.bfloat16)
    # GEMM+RS / GEMM+AR: k split unevenly over the ranks, each rank's X and W columns with their own scales
    k0, kr = comm.shard_offset(FN_K), comm.shard_rows(FN_K)
    parts = []
    for s in range(P):
        c0, cn = comm.shard_offset(FN_K, s), comm.shard_rows(FN_K, s)
        parts.append((_q(X[:, c0:c0 + cn], xdt, xs), _q(W[:, c0:c0 + cn], wdt, ws)))
    ref = sum(xq[2] @ wq[2].t() for xq, wq in parts) + b.double()
    mag = sum(xq[2].abs() @ wq[2].abs().t() for xq, wq in parts)
    (xr, xsr, _), (wr, wsr, _) = parts[r]
    assert xr.shape[1] == kr and k0 >= 0
    y = cgt.matmul_all_reduce(xr, wr, b, comm=comm, x_scale=xsr, w_scale=wsr)
    _fn_check(y, ref, mag, f"ar {scaling_name}")
    # a bias of the output's dtype (the library takes bf16 or Y's dtype with fp8 inputs)
    y = cgt.matmul_reduce_scatter(xr, wr, b.half(), comm=comm, x_scale=xsr, w_scale=wsr, out_dtype=torch.float16)
    ref = ref - b.double() + b.half().double()
    _fn_check(y, ref[off:off + mr], mag[off:off + mr], f"rs {scaling_name}", torch.float16)
    return True


@pytest.mark.parametrize("nranks,m", [(1, 5), (2, 9), (3, 2)])
@pytest.mark.parametrize("scaling_name", ["tensor", "block"])
def test_functional_fp8_ops(nranks, m, scaling_name):
    dtypes = ((torch.float8_e4m3fn, torch.float8_e4m3fn) if scaling_name == "block"
              else (torch.float8_e5m2, torch.float8_e4m3fn))
    assert all(ranks.run(body_fn_ops, nranks, m, scaling_name, dtypes))


def body_fn_bulk(comm, m, scaling_name):
    """bulk_matmul_collective on fp8 a and b with a_scale / b_scale beside a
    reduce-scatter (and alone): c against the float64 product of the dequantized
    operands in float32 and bf16; opcheck's test_faketensor on the custom op (and
    the inputs' bytes unchanged); torch.compile (fullgraph) keeps it; refusals:
    an fp8 input that requires grad, scales or out_dtype with fp32 a and b, a
    missing b_scale, an fp8 out_dtype."""
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    P, r = comm.size, comm.rank
    xs = Scaling.TENSOR if scaling_name == "tensor" else Scaling.BLOCK_1X128
    ws = Scaling.TENSOR if scaling_name == "tensor" else Scaling.BLOCK_128X128
    torch.manual_seed(3 + r)
    a, sa, ad = _q((torch.rand(m, FN_K) * 2 - 1) * 3, torch.float8_e4m3fn, xs)
    b, sb, bd = _q(torch.rand(FN_N, FN_K) * 2 - 1, torch.float8_e5m2, ws)
    ref, mag = ad @ bd.t(), ad.abs() @ bd.abs().t()
    sends = [torch.rand(m, 4, generator=torch.Generator().manual_seed(40 + q)) for q in range(P)]
    c, recv = cgt.bulk_matmul_collective(a, b, sends[r], comm=comm, collective="reduce_scatter", a_scale=sa,
                                         b_scale=sb)
    _fn_check(c, ref, mag, f"bulk {scaling_name}")
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    torch.testing.assert_close(recv, sum(sends)[off:off + mr], rtol=1e-6, atol=1e-6)
    c16, empty = cgt.bulk_matmul_collective(a, b, comm=comm, a_scale=sa, b_scale=sb, out_dtype=torch.bfloat16)
    _fn_check(c16, ref, mag, f"bulk {scaling_name} bf16", torch.bfloat16)
    assert empty.numel() == 0
    # the custom op: fake kernel's shapes and dtypes, inputs untouched
    for out_dtype in (None, torch.bfloat16):
        args = (a, b, sends[r], comm.id, "TN", "reduce_scatter", 0, "", "", sa, sb, out_dtype)
        before = [t.view(torch.uint8).clone() if t.dtype.itemsize == 1 else t.clone() for t in (a, b, sa, sb)]
        torch.library.opcheck(torch.ops.commgemm.bulk_matmul_collective, args, test_utils=("test_faketensor",))
        after = [t.view(torch.uint8) if t.dtype.itemsize == 1 else t for t in (a, b, sa, sb)]
        assert all(torch.equal(p, q) for p, q in zip(before, after)), "bulk: an input was mutated"

    def f(x, s):
        return cgt.bulk_matmul_collective(x, b, comm=comm, a_scale=s, b_scale=sb)[0] * 2

    y = torch.compile(f, fullgraph=True, backend="aot_eager")(a, sa)
    torch.testing.assert_close(y, c * 2, rtol=0, atol=0)
    with pytest.raises(commgemm.InvalidArgumentError, match="not differentiable.*fp8_recipe="):
        cgt.bulk_matmul_collective(a, b, comm=comm, a_scale=sa.clone().requires_grad_(), b_scale=sb)
    with pytest.raises(commgemm.InvalidArgumentError, match="a_scale, out_dtype given, but a is torch.float32"):
        cgt.bulk_matmul_collective(ad.float(), bd.float(), comm=comm, a_scale=sa, out_dtype=torch.float32)
    with pytest.raises(commgemm.InvalidArgumentError, match="b is torch.float8_e5m2 without b_scale"):
        cgt.bulk_matmul_collective(a, b, comm=comm, a_scale=sa)
    with pytest.raises(commgemm.InvalidArgumentError, match="out_dtype torch.float8_e4m3fn"):
        cgt.bulk_matmul_collective(a, b, comm=comm, a_scale=sa, b_scale=sb, out_dtype=torch.float8_e4m3fn)
    c2, _ = cgt.bulk_matmul_collective(a, b, comm=comm, a_scale=sa, b_scale=sb)  # the comm is still usable
    torch.testing.assert_close(c2, c, rtol=0, atol=0)
    return True


@pytest.mark.parametrize("nranks,m,scaling_name", [(1, 5, "tensor"), (2, 9, "block"), (3, 2, "tensor")])
def test_functional_fp8_bulk(nranks, m, scaling_name):
    assert all(ranks.run(body_fn_bulk, nranks, m, scaling_name))


def body_fn_opcheck(comm):
    """opcheck's test_faketensor (the fake kernel's shapes and dtypes are the real
    op's) on every op kind and both scalings; test_schema where it can run: its
    SchemaCheckMode compares each input before and after with torch.allclose,
    which torch has no float8 kernel for, so the fp8 inputs' bytes are compared
    here instead (the schema says nothing is mutated); and torch.compile
    (fullgraph) keeps the op in its graph."""
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    m = 7
    torch.manual_seed(2)
    for xs, ws in ((Scaling.TENSOR, Scaling.TENSOR), (Scaling.BLOCK_1X128, Scaling.BLOCK_128X128)):
        x, sx, _ = _q(torch.rand(comm.shard_rows(m), FN_K), torch.float8_e4m3fn, xs)
        xf, sxf, _ = _q(torch.rand(m, FN_K), torch.float8_e4m3fn, xs)
        w, sw, _ = _q(torch.rand(FN_N, FN_K), torch.float8_e5m2, ws)
        b = torch.rand(FN_N).bfloat16()
        for op, xx, s in (("ag", x, sx), ("rs", xf, sxf), ("ar", xf, sxf), ("gemm", xf, sxf)):
            args = (op, xx, w, s, sw, b, comm.id, m, "TN", "", torch.bfloat16, op == "ag", "", "")
            before = [a.view(torch.uint8).clone() if a.dtype.itemsize == 1 else a.clone() for a in (xx, w, s, sw, b)]
            torch.library.opcheck(torch.ops.commgemm.fp8_matmul, args, test_utils=("test_faketensor",))
            after = [a.view(torch.uint8) if a.dtype.itemsize == 1 else a for a in (xx, w, s, sw, b)]
            assert all(torch.equal(p, q) for p, q in zip(before, after)), f"{op}: an input was mutated"
    y_eager = cgt.matmul_all_reduce(xf, w, b, comm=comm, x_scale=sxf, w_scale=sw, out_dtype=torch.bfloat16)

    def f(a, sa):
        return cgt.matmul_all_reduce(a, w, b, comm=comm, x_scale=sa, w_scale=sw, out_dtype=torch.bfloat16) * 2

    y = torch.compile(f, fullgraph=True, backend="aot_eager")(xf, sxf)
    torch.testing.assert_close(y, y_eager * 2, rtol=0, atol=0)
    return True


def test_functional_fp8_opcheck():
    ranks.run(body_fn_opcheck, 2)


def body_fn_refusals(comm):
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    x, sx, _ = _q(torch.rand(4, FN_K), torch.float8_e4m3fn, Scaling.TENSOR)
    w, sw, _ = _q(torch.rand(FN_N, FN_K), torch.float8_e4m3fn, Scaling.TENSOR)
    xb, sxb, _ = _q(torch.rand(4, FN_K), torch.float8_e4m3fn, Scaling.BLOCK_1X128)
    wb, swb, _ = _q(torch.rand(FN_N, FN_K), torch.float8_e4m3fn, Scaling.BLOCK_128X128)
    bad = (
        (commgemm.InvalidArgumentError, "without w_scale", lambda: cgt.matmul_all_reduce(x, w, comm=comm, x_scale=sx)),
        (commgemm.InvalidArgumentError, "without x_scale", lambda: cgt.all_gather_matmul(x, w, comm=comm, w_scale=sw)),
        (commgemm.InvalidArgumentError, r"x_scale has shape \(4, 1\)",
         lambda: cgt.matmul_all_reduce(xb, wb, comm=comm, x_scale=sxb[:, :1], w_scale=swb)),
        (commgemm.InvalidArgumentError, r"w_scale has shape \(1, 2\)",
         lambda: cgt.matmul_reduce_scatter(xb, wb, comm=comm, x_scale=sxb, w_scale=swb[:1])),
        (commgemm.InvalidArgumentError, "expected both per tensor",
         lambda: cgt.matmul_all_reduce(x, wb, comm=comm, x_scale=sx, w_scale=swb)),
        (commgemm.InvalidArgumentError, "float32 tensor",
         lambda: cgt.matmul_all_reduce(x, w, comm=comm, x_scale=sx.double(), w_scale=sw)),
        (commgemm.InvalidArgumentError, "w is torch.float32 with fp8 operands",
         lambda: cgt.matmul_all_reduce(x, w.float(), comm=comm, x_scale=sx, w_scale=sw)),
        (commgemm.InvalidArgumentError, "go with float8 operands only",
         lambda: cgt.matmul_all_reduce(x.float(), w.float(), comm=comm, x_scale=sx)),
        (commgemm.InvalidArgumentError, "out_dtype",
         lambda: cgt.matmul_all_reduce(x, w, comm=comm, x_scale=sx, w_scale=sw, out_dtype=torch.float8_e4m3fn)),
        (commgemm.NotSupportedError, "layout TN only",
         lambda: torch.ops.commgemm.fp8_matmul("ar", x, w, sx, sw, None, comm.id, 0, "NT", "", torch.float32,
                                               False, "", "")),
        (commgemm.NotSupportedError, "layout TN only",
         lambda: torch.ops.commgemm.fp8_matmul("gemm", x, w, sx, sw, None, comm.id, 0, "NN", "", torch.float32,
                                               False, "", "")),
    )
    for i, (exc, match, call) in enumerate(bad):
        with pytest.raises(exc, match=match):
            call()
            pytest.fail(f"refusal {i} ({match}): no error")
    # the comm stays usable after every refusal
    y = cgt.matmul_all_reduce(x, w, comm=comm, x_scale=sx, w_scale=sw)
    assert y.dtype == torch.float32 and y.shape == (4, FN_N)
    return True


def test_functional_fp8_refusals():
    ranks.run(body_fn_refusals, 2)


# --------------------------------------------------------------------------
# Gradients: the functional ops with fp8_recipe= (high-precision x and weight,
# quantized in the call); fp8 operands that require grad are refused
# --------------------------------------------------------------------------


def _grads(fn, x, w, b, g):
    xi, wi, bi = (t.clone().requires_grad_() for t in (x, w, b))
    y = fn(xi, wi, bi)
    (y * g).sum().backward()
    return y.detach(), xi.grad, wi.grad, bi.grad


def body_fn_recipe_grads(comm, m, recipe_name):
    """Y, dX, dW, db of each op under fp8_recipe against the float64 product
    of the high-precision values (y: X . W^T; dX: dY . W summed over the
    ranks that hold parts; dW: dY^T . X) within the fp8 bound of the
    operands' formats; db exact in high precision. Rows of growing
    magnitude: the ranks' shards have amaxes far apart (per-tensor X or dY
    scales not reduced over the ranks where rows are gathered would show)."""
    from commgemm import torch as cgt
    P, r = comm.size, comm.rank
    recipe = _recipe(recipe_name)
    uf, ug, twice = _units(recipe_name)
    uq = uf * twice + (uf * uf if twice == 2 else 0)
    ugq = ug * twice + (ug * ug if twice == 2 else 0)
    torch.manual_seed(3)
    grow = torch.linspace(0.1, 6, m)[:, None]
    X = ((torch.rand(m, FN_K) * 2 - 1) * grow).double()
    Ws = (torch.rand(P, FN_N, FN_K) * 2 - 1).double()  # rank s's weight (AG+GEMM: its columns of Y)
    Bs = (torch.rand(P, FN_N) * 2 - 1).double()
    Gs = ((torch.rand(P, m, FN_N) * 2 - 1) * grow).double()  # AG+GEMM: rank s's dY
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    f32 = [t.float() for t in (X[off:off + mr], Ws[r], Bs[r], Gs[r])]
    # AG+GEMM: y_r = X . W_r^T + b_r; dX_r = rows of sum_s dY_s . W_s; dW_r = dY_r^T . X
    y, dx, dw, db = _grads(lambda x, w, b: cgt.all_gather_matmul(x, w, b, comm=comm, m=m, fp8_recipe=recipe), *f32)
    assert y.dtype == dx.dtype == dw.dtype == db.dtype == torch.float32
    check(y, X @ Ws[r].t() + Bs[r], X, Ws[r].t(), uf, uf, "ag y")
    G_all, W_all = torch.cat(list(Gs), 1), torch.cat(list(Ws), 0)
    check(dx, (G_all @ W_all)[off:off + mr], G_all[off:off + mr], W_all, ug, uf, "ag dx")
    check(dw, Gs[r].t() @ X, Gs[r].t(), X, ug, uq, "ag dw")
    torch.testing.assert_close(db.double(), Gs[r].sum(0), rtol=1e-5, atol=1e-5)
    # GEMM+RS and GEMM+AR: k split over the ranks, bias the same on every rank
    k0, kr = comm.shard_offset(FN_K), comm.shard_rows(FN_K)
    W, G = Ws[0], Gs[0]
    xr, wr = X[:, k0:k0 + kr], W[:, k0:k0 + kr]
    for op in ("rs", "ar"):
        fn = cgt.matmul_reduce_scatter if op == "rs" else cgt.matmul_all_reduce
        g = G[off:off + mr] if op == "rs" else G
        y, dx, dw, db = _grads(lambda x, w, b: fn(x, w, b, comm=comm, fp8_recipe=recipe), xr.float(), wr.float(),
                               Bs[0].float(), g.float())
        ref = X @ W.t() + Bs[0]
        check(y, ref[off:off + mr] if op == "rs" else ref, X[off:off + mr] if op == "rs" else X, W.t(), uf, uf,
              f"{op} y")
        check(dx, G @ wr, G, wr, ug, uf, f"{op} dx")  # dY gathered from every rank (rs) or whole (ar)
        check(dw, G.t() @ xr, G.t(), xr, ugq if op == "rs" else ug, uq if recipe_name == "block" else uf,
              f"{op} dw")
        torch.testing.assert_close(db.double(), G.sum(0), rtol=1e-5, atol=1e-5)  # every rank: all rows' sum
    # bfloat16 in, bfloat16 out and gradients (the dtypes nn.Linear users get)
    y, dx, dw, db = _grads(lambda x, w, b: cgt.matmul_all_reduce(x, w, b, comm=comm, fp8_recipe=recipe),
                           xr.bfloat16(), wr.bfloat16(), Bs[0].bfloat16(), G.bfloat16())
    assert y.dtype == dx.dtype == dw.dtype == db.dtype == torch.bfloat16
    torch.testing.assert_close(dx.double(), G @ wr, rtol=0.3, atol=0.3 * float((G.abs() @ wr.abs()).max()))
    return True


@pytest.mark.parametrize("nranks,m", [(1, 5), (2, 9), (3, 7)])
@pytest.mark.parametrize("recipe_name", ["current", "block"])
def test_functional_fp8_recipe_grads(nranks, m, recipe_name):
    assert all(ranks.run(body_fn_recipe_grads, nranks, m, recipe_name))


def body_fn_grad_refusals(comm):
    """fp8 operands that require grad: refused before the call (the
    functional ops) or at backward (the custom op itself), saying to pass the
    high-precision tensors with fp8_recipe; fp8_recipe's own refusals."""
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    x, sx, _ = _q(torch.rand(4, FN_K), torch.float8_e4m3fn, Scaling.TENSOR)
    w, sw, _ = _q(torch.rand(FN_N, FN_K), torch.float8_e4m3fn, Scaling.TENSOR)
    xg = x.clone().requires_grad_()
    for call in (lambda: cgt.matmul_all_reduce(xg, w, comm=comm, x_scale=sx, w_scale=sw),
                 lambda: cgt.all_gather_matmul(x, w, torch.zeros(FN_N, requires_grad=True), comm=comm, m=4 * comm.size,
                                               x_scale=sx, w_scale=sw)):
        with pytest.raises(commgemm.InvalidArgumentError, match="not differentiable.*fp8_recipe="):
            call()
    y = torch.ops.commgemm.fp8_matmul("ar", xg, w, sx, sw, None, comm.id, 0, "TN", "", torch.float32, False, "",
                                      "")[0]
    with pytest.raises(commgemm.InvalidArgumentError, match="no gradient for fp8 operands.*fp8_recipe="):
        y.sum().backward()
    with torch.no_grad():  # no gradient wanted: runs
        assert cgt.matmul_all_reduce(xg, w, comm=comm, x_scale=sx, w_scale=sw).shape == (4, FN_N)
    h, hw = torch.rand(4, FN_K), torch.rand(FN_N, FN_K)
    bad = (
        ("delayed scaling keeps an amax history",
         lambda: cgt.matmul_all_reduce(h, hw, comm=comm, fp8_recipe=cgt.DelayedScaling())),
        ("expected Float8CurrentScaling", lambda: cgt.matmul_all_reduce(h, hw, comm=comm, fp8_recipe="fp8")),
        ("x_scale, out_dtype given with fp8_recipe",
         lambda: cgt.matmul_reduce_scatter(h, hw, comm=comm, fp8_recipe=cgt.Float8CurrentScaling(), x_scale=sx,
                                           out_dtype=torch.float32)),
        ("return_gathered given with fp8_recipe",
         lambda: cgt.all_gather_matmul(h, hw, comm=comm, fp8_recipe=cgt.Float8BlockScaling(), return_gathered=True)),
        ("x is torch.float8_e4m3fn: expected float32",
         lambda: cgt.matmul_all_reduce(x, w, comm=comm, fp8_recipe=cgt.Float8CurrentScaling())),
    )
    for match, call in bad:
        with pytest.raises(commgemm.InvalidArgumentError, match=match):
            call()
    # the comm stays usable
    y = cgt.matmul_all_reduce(h, hw, comm=comm, fp8_recipe=cgt.Float8CurrentScaling())
    assert y.dtype == torch.float32 and y.shape == (4, FN_N)
    return True


def test_functional_fp8_grad_refusals():
    ranks.run(body_fn_grad_refusals, 2)
