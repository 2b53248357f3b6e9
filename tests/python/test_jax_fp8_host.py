"""FP8 through commgemm.jax's ops on CPU arrays (host backend), eager and
under jax.jit: float8_e4m3fn / float8_e5m2 operands with per-tensor or block
scales as operands of the XLA FFI custom calls, against a float64 reference
from the dequantized operands; fp8 outputs (y_scale, y_amax) against the
numpy ops; AG+GEMM's gathered bytes and scales; the jnp
quantization helpers against commgemm.fp8's; refusals.

    JAX_PLATFORMS=cpu python3 -m pytest tests/python/test_jax_fp8_host.py -q
"""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import libcheck  # noqa: E402 - puts this tree's python/ on sys.path
import ranks  # noqa: E402

pytest.importorskip("jax")
pytest.importorskip("ml_dtypes")

import commgemm  # noqa: E402
from commgemm import fp8  # noqa: E402

pytestmark = libcheck.skip_without_library()

K, N = 200, 130


def _rand(seed, shape):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def _close(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = np.abs(got - want).max() if got.size else 0.0
    assert err <= 1e-5 * max(1.0, np.abs(want).max()), f"{what}: max err {err:.3g}"


def body_ops(comm, m, recipe):
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    jax.config.update("jax_platforms", "cpu")
    P, r = comm.size, comm.rank
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    xsc = fp8.Scaling.TENSOR if recipe == "tensor" else fp8.Scaling.BLOCK_1X128
    wsc = fp8.Scaling.TENSOR if recipe == "tensor" else fp8.Scaling.BLOCK_128X128
    e4, e5 = jnp.float8_e4m3fn, jnp.float8_e5m2
    # every rank's shard quantized by its owner (own scales), W per rank
    X = _rand(1, (m, K)) * np.linspace(0.1, 3, m, dtype=np.float32)[:, None]
    shards = [cj.quantize(jnp.asarray(X[commgemm.shard_offset(m, q, P):][:commgemm.shard_rows(m, q, P)]), e4, xsc)
              for q in range(P)]
    wq, ws = cj.quantize(jnp.asarray(_rand(10 + r, (N, K))), e5, wsc)
    xdeq = np.concatenate([fp8.dequantize(np.asarray(c), np.asarray(s), xsc) for c, s in shards])
    wdeq = fp8.dequantize(np.asarray(wq), np.asarray(ws), wsc)
    bias = jnp.asarray(_rand(3, (N,)))
    checked = 0
    for jit in (False, True):
        wrap = jax.jit if jit else (lambda f: f)
        ag = wrap(lambda x, w, xs, ws_, b: cj.all_gather_matmul(x, w, b, comm=comm, m=m, x_scale=xs, w_scale=ws_,
                                                                return_gathered=True))
        y, g, gs = ag(shards[r][0], wq, shards[r][1], ws, bias)
        assert y.dtype == jnp.float32 and g.dtype == e4
        _close(y, xdeq @ wdeq.T + np.asarray(bias), f"AG {recipe} jit={jit}")
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8),
                                      np.concatenate([np.asarray(c) for c, _ in shards]).view(np.uint8))
        np.testing.assert_array_equal(np.asarray(gs), np.concatenate([np.asarray(s) for _, s in shards]))
        # GEMM+RS and GEMM+AR, bf16 out: each rank's own X [m, K]
        xq = [cj.quantize(jnp.asarray(_rand(20 + q, (m, K))), e4, xsc) for q in range(P)]
        wq_all = [cj.quantize(jnp.asarray(_rand(10 + q, (N, K))), e5, wsc) for q in range(P)]
        total = sum(fp8.dequantize(np.asarray(xq[q][0]), np.asarray(xq[q][1]), xsc)
                    @ fp8.dequantize(np.asarray(wq_all[q][0]), np.asarray(wq_all[q][1]), wsc).T for q in range(P))
        rs = wrap(lambda x, w, xs, ws_: cj.matmul_reduce_scatter(x, w, comm=comm, x_scale=xs, w_scale=ws_))
        _close(rs(xq[r][0], wq_all[r][0], xq[r][1], wq_all[r][1]), total[off:off + mr], f"RS {recipe}")
        ar = wrap(lambda x, w, xs, ws_: cj.matmul_all_reduce(x, w, comm=comm, x_scale=xs, w_scale=ws_,
                                                             out_dtype=jnp.bfloat16))
        y = ar(xq[r][0], wq_all[r][0], xq[r][1], wq_all[r][1])
        assert y.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(y, np.float64), total, rtol=2 ** -7, atol=2 ** -7 * np.abs(total).max())
        bk = wrap(lambda a, b, as_, bs, s: cj.bulk_matmul_collective(a, b, send=s, comm=comm, a_scale=as_,
                                                                     b_scale=bs, collective="reduce_scatter"))
        c, recv = bk(xq[r][0], wq_all[r][0], xq[r][1], wq_all[r][1], jnp.asarray(_rand(30 + r, (m, 4))))
        _close(c, fp8.dequantize(np.asarray(xq[r][0]), np.asarray(xq[r][1]), xsc)
               @ fp8.dequantize(np.asarray(wq_all[r][0]), np.asarray(wq_all[r][1]), wsc).T, "bulk")
        _close(recv, sum(_rand(30 + q, (m, 4)) for q in range(P))[off:off + mr], "bulk recv")
        checked += 4
    return checked


@pytest.mark.parametrize("nranks,m", [(1, 3), (2, 7), (3, 5)])
@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_jax_fp8_ops(nranks, m, recipe):
    assert all(c > 0 for c in ranks.run(body_ops, nranks, m, recipe))


def _fp8_out_close(got, want, y_scale, what):
    """An fp8 Y within one code (3 or 2 mantissa bits) of want * y_scale, saturated."""
    got, want = np.asarray(got), np.asarray(want, np.float64)
    fmax = fp8.FP8_MAX[got.dtype.name]
    target = np.clip(want * y_scale, -fmax, fmax)
    ulp = 2.0 ** -(3 if got.dtype.name == "float8_e4m3fn" else 2)
    err = np.abs(got.astype(np.float64) - target)
    assert (err <= ulp * np.abs(target) + 2.0 ** -9).all(), f"{what}: fp8 Y off by more than a code: {err.max()}"


def body_fp8_out(comm, m, recipe, out_name):
    """An fp8 Y (y_scale, y_amax) from the three JAX ops and bulk's C, eager and jitted (y_scale
    a traced array or a float): the bytes and amax of the numpy ops on the same
    operands, and within one code of the float64 reference."""
    import jax
    import jax.numpy as jnp
    import ml_dtypes
    import commgemm.jax as cj
    jax.config.update("jax_platforms", "cpu")
    P, r = comm.size, comm.rank
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    xsc = fp8.Scaling.TENSOR if recipe == "tensor" else fp8.Scaling.BLOCK_1X128
    wsc = fp8.Scaling.TENSOR if recipe == "tensor" else fp8.Scaling.BLOCK_128X128
    odt = getattr(jnp, out_name)
    e4 = jnp.float8_e4m3fn
    xq = [cj.quantize(jnp.asarray(_rand(40 + q, (m, K))), e4, xsc) for q in range(P)]
    wq = [cj.quantize(jnp.asarray(_rand(50 + q, (N, K))), e4, wsc) for q in range(P)]
    npx = [(np.asarray(c), np.asarray(s)) for c, s in xq]
    npw = [(np.asarray(c), np.asarray(s)) for c, s in wq]
    deqx = [fp8.dequantize(c, s, xsc) for c, s in npx]
    deqw = [fp8.dequantize(c, s, wsc) for c, s in npw]
    bias = _rand(9, (N,)).astype(ml_dtypes.bfloat16)
    ag_want = np.concatenate([deqx[q][commgemm.shard_offset(m, q, P):][:commgemm.shard_rows(m, q, P)]
                              for q in range(P)]) @ deqw[r].T
    total = sum(deqx[q] @ deqw[q].T for q in range(P)) + bias.astype(np.float64)
    ys = np.float32(0.7 * fp8.FP8_MAX[out_name] / max(np.abs(total).max(), np.abs(ag_want).max()))
    xs_r, xss_r = xq[r][0][off:off + mr], xq[r][1] if recipe == "tensor" else xq[r][1][off:off + mr]
    checked = 0
    for jit in (False, True):
        wrap = jax.jit if jit else (lambda f: f)
        y_scale = jnp.asarray([ys]) if jit else float(ys)  # traced under jit, a Python float eager
        # AG+GEMM with the gathered X: y, gathered, its scales, then y_amax
        ag = wrap(lambda x, w, xs, ws_, sc: cj.all_gather_matmul(
            x, w, comm=comm, m=m, x_scale=xs, w_scale=ws_, out_dtype=odt, y_scale=sc, y_amax=True,
            return_gathered=True))
        y, g, gs, amax = ag(xs_r, wq[r][0], xss_r, wq[r][1], y_scale)
        assert y.dtype == odt and amax.shape == (1,) and amax.dtype == jnp.float32 and g.dtype == e4
        np_amax = np.zeros(1, np.float32)
        np_y = commgemm.all_gather_gemm(comm, np.asarray(xs_r), npw[r][0], x_scale=np.asarray(xss_r),
                                        w_scale=npw[r][1], m=m, out_dtype=np.dtype(getattr(ml_dtypes, out_name)),
                                        y_scale=ys, y_amax=np_amax)
        np.testing.assert_array_equal(np.asarray(y).view(np.uint8), np_y.view(np.uint8))
        np.testing.assert_array_equal(np.asarray(amax), np_amax)
        _fp8_out_close(y, ag_want, ys, f"AG -> {out_name} jit={jit}")
        np.testing.assert_allclose(float(amax[0]), np.abs(ag_want).max(), rtol=1e-5)
        # GEMM+RS with a bf16 bias (the operand after y_scale), GEMM+AR without y_amax
        rs = wrap(lambda x, w, xs, ws_, sc, b: cj.matmul_reduce_scatter(
            x, w, b, comm=comm, x_scale=xs, w_scale=ws_, out_dtype=odt, y_scale=sc, y_amax=True))
        y, amax = rs(xq[r][0], wq[r][0], xq[r][1], wq[r][1], y_scale, jnp.asarray(bias))
        np_y = commgemm.gemm_reduce_scatter(comm, npx[r][0], npw[r][0], bias=bias, x_scale=npx[r][1],
                                            w_scale=npw[r][1], out_dtype=np.dtype(getattr(ml_dtypes, out_name)),
                                            y_scale=ys, y_amax=np_amax)
        np.testing.assert_array_equal(np.asarray(y).view(np.uint8), np_y.view(np.uint8))
        np.testing.assert_array_equal(np.asarray(amax), np_amax)
        _fp8_out_close(y, total[off:off + mr], ys, f"RS -> {out_name} jit={jit}")
        np.testing.assert_allclose(float(amax[0]), np.abs(total[off:off + mr]).max() if mr else 0, rtol=1e-5)
        ar = wrap(lambda x, w, xs, ws_, sc, b: cj.matmul_all_reduce(
            x, w, b, comm=comm, x_scale=xs, w_scale=ws_, out_dtype=odt, y_scale=sc))
        y = ar(xq[r][0], wq[r][0], xq[r][1], wq[r][1], y_scale, jnp.asarray(bias))
        assert y.dtype == odt
        _fp8_out_close(y, total, ys, f"AR -> {out_name} jit={jit}")
        ar = wrap(lambda x, w, xs, ws_, sc, b: cj.matmul_all_reduce(
            x, w, b, comm=comm, x_scale=xs, w_scale=ws_, out_dtype=odt, y_scale=sc, y_amax=True))
        y2, amax = ar(xq[r][0], wq[r][0], xq[r][1], wq[r][1], y_scale, jnp.asarray(bias))
        np.testing.assert_array_equal(np.asarray(y2).view(np.uint8), np.asarray(y).view(np.uint8))
        np.testing.assert_allclose(float(amax[0]), np.abs(total).max(), rtol=1e-5)
        # bulk: c fp8 with a bf16 bias beside a reduce-scatter, its amax after recv
        bk = wrap(lambda a, b, as_, bs, sc, bb, s: cj.bulk_matmul_collective(
            a, b, bb, send=s, comm=comm, a_scale=as_, b_scale=bs, collective="reduce_scatter", out_dtype=odt,
            y_scale=sc, y_amax=True))
        send = [_rand(60 + q, (m, 3)) for q in range(P)]
        c, recv, amax = bk(xq[r][0], wq[r][0], xq[r][1], wq[r][1], y_scale, jnp.asarray(bias), jnp.asarray(send[r]))
        assert c.dtype == odt and amax.shape == (1,)
        np_c = np.zeros((m, N), getattr(ml_dtypes, out_name))
        commgemm.bulk_overlap(comm, npx[r][0], npw[r][0], np_c, bias=bias, a_scale=npx[r][1], b_scale=npw[r][1],
                              c_scale=ys, c_amax=np_amax)
        np.testing.assert_array_equal(np.asarray(c).view(np.uint8), np_c.view(np.uint8))
        np.testing.assert_array_equal(np.asarray(amax), np_amax)
        local = deqx[r] @ deqw[r].T + bias.astype(np.float64)
        _fp8_out_close(c, local, ys, f"bulk -> {out_name} jit={jit}")
        np.testing.assert_allclose(float(amax[0]), np.abs(local).max(), rtol=1e-5)
        _close(recv, sum(send)[off:off + mr], "bulk recv")
        checked += 5
    return checked


@pytest.mark.parametrize("nranks,m,recipe", [(1, 3, "tensor"), (2, 7, "block"), (3, 5, "tensor")])
@pytest.mark.parametrize("out_name", ["float8_e4m3fn", "float8_e5m2"])
def test_jax_fp8_output(nranks, m, recipe, out_name):
    assert all(c == 10 for c in ranks.run(body_fp8_out, nranks, m, recipe, out_name))


def body_bad_input(comm):
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    jax.config.update("jax_platforms", "cpu")
    x, xs = cj.quantize(jnp.asarray(_rand(1, (4, 8))), jnp.float8_e4m3fn)
    w, ws = cj.quantize(jnp.asarray(_rand(2, (3, 8))), jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match="w is float8_e4m3fn without w_scale"):
        cj.matmul_all_reduce(x, w, comm=comm, x_scale=xs)
    with pytest.raises(commgemm.InvalidArgumentError, match=r"x_scale has shape \(3, 1\): expected"):
        cj.matmul_all_reduce(x, w, comm=comm, x_scale=jnp.ones((3, 1), jnp.float32), w_scale=ws)
    with pytest.raises(ValueError, match="one recipe"):
        cj.matmul_all_reduce(x, w, comm=comm, x_scale=jnp.ones((4, 1), jnp.float32), w_scale=ws)
    with pytest.raises(commgemm.NotSupportedError, match="layout TN only"):
        cj.matmul_all_reduce(x, w.T, comm=comm, x_scale=xs, w_scale=ws, layout="NN")
    with pytest.raises(ValueError, match="x_scale given"):
        cj.matmul_all_reduce(jnp.ones((4, 8)), jnp.ones((3, 8)), comm=comm, x_scale=xs)
    with pytest.raises(ValueError, match="y_scale / y_amax given, but the output is float32"):
        cj.matmul_all_reduce(x, w, comm=comm, x_scale=xs, w_scale=ws, y_scale=1.0)
    with pytest.raises(ValueError, match="y_scale / y_amax given, but the output is bfloat16"):
        cj.all_gather_matmul(x, w, comm=comm, x_scale=xs, w_scale=ws, out_dtype=jnp.bfloat16, y_amax=True)
    with pytest.raises(ValueError, match="without y_scale"):
        cj.matmul_reduce_scatter(x, w, comm=comm, x_scale=xs, w_scale=ws, out_dtype=jnp.float8_e4m3fn)
    with pytest.raises(ValueError, match="y_scale has 2 values"):
        cj.matmul_all_reduce(x, w, comm=comm, x_scale=xs, w_scale=ws, out_dtype=jnp.float8_e4m3fn,
                             y_scale=jnp.ones((2,), jnp.float32))
    with pytest.raises(ValueError, match="y_scale / y_amax given, but the output is float32"):
        cj.bulk_matmul_collective(x, w, comm=comm, a_scale=xs, b_scale=ws, y_amax=True)
    with pytest.raises(ValueError, match="without y_scale"):
        cj.bulk_matmul_collective(x, w, comm=comm, a_scale=xs, b_scale=ws, out_dtype=jnp.float8_e5m2)
    with pytest.raises(ValueError, match="y_scale or y_amax without a GEMM"):
        cj.bulk_matmul_collective(send=jnp.ones((4, 2)), comm=comm, y_scale=1.0)
    y = cj.matmul_all_reduce(x, w, comm=comm, x_scale=xs, w_scale=ws)  # the comm is still usable
    _close(y, comm.size * (np.asarray(x, np.float32) * float(xs[0])) @ (np.asarray(w, np.float32) * float(ws[0])).T,
           "after errors")
    return True


def test_jax_fp8_bad_input():
    ranks.run(body_bad_input, 2)


def test_jnp_quantization_helpers():
    """jnp's quantize gives numpy's codes and scales (the same rounding and
    saturation), per tensor and per block; cast_to_fp8 saturates."""
    import jax.numpy as jnp
    import commgemm.jax as cj
    a = _rand(5, (130, 300)) * np.linspace(0.01, 100, 300, dtype=np.float32)
    for sc in (fp8.Scaling.TENSOR, fp8.Scaling.BLOCK_1X128, fp8.Scaling.BLOCK_128X128):
        for name in ("float8_e4m3fn", "float8_e5m2"):
            codes, s = cj.quantize(jnp.asarray(a), getattr(jnp, name), sc)
            want_c, want_s = fp8.quantize(a, name, sc)
            np.testing.assert_array_equal(np.asarray(s), want_s)
            np.testing.assert_array_equal(np.asarray(codes).view(np.uint8), want_c.view(np.uint8))
            np.testing.assert_allclose(np.asarray(cj.dequantize(codes, s)), fp8.dequantize(want_c, want_s, sc))
    v = cj.cast_to_fp8(jnp.asarray([1e6, -jnp.inf, jnp.nan]), jnp.float8_e4m3fn).astype(jnp.float32)
    assert float(v[0]) == 448 and float(v[1]) == -448 and np.isnan(float(v[2]))


# --------------------------------------------------------------------------
# The layers with fp8_recipe (sequence-parallel column and row layers)
# --------------------------------------------------------------------------

U8 = {"e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}


def _fp8_bound_check(got, ref, a, b, ua, ub, what):
    """|got - ref| <= (ua + ub + ua ub) (|a| @ |b|) + 1e-4 max(|a| @ |b|)
    elementwise: a dot product of operands each within a relative error u
    of its value (round to nearest: u = 2^-4 for e4m3, 2^-3 for e5m2; 2u + u^2
    for an operand quantized twice) differs from the exact one by at most
    that, plus an absolute term for the formats' subnormal range; and got
    is not ref (it went through fp8). test_torch_fp8_host.py's bound."""
    assert np.shape(got) == np.shape(ref), f"{what}: shape {np.shape(got)} vs {np.shape(ref)}"
    if np.size(got) == 0:  # a rank with no rows (m < P)
        return
    mag = np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64))
    bound = (ua + ub + ua * ub) * mag + 1e-4 * mag.max() + 1e-6
    err = np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))
    worst = float((err / bound).max())
    assert worst <= 1.0, f"{what}: error {err.max():.3g} is {worst:.2f} x the fp8 bound"
    assert err.max() > 0, f"{what}: identical to fp32: not computed in fp8?"


def body_fp8_layers(comm, recipe_name, m):
    import jax
    from commgemm import jax as cj
    recipe = cj.Float8BlockScaling() if recipe_name == "block" else cj.Float8CurrentScaling()
    uf = U8["e4m3"]
    ug = U8["e4m3"] if recipe_name == "block" else U8["e5m2"]
    twice = lambda u: 2 * u + u * u  # noqa: E731 - an operand quantized again from fp8 values
    kx, hid, n = 160, 260, 140
    rng = np.random.default_rng(0)
    grow = np.linspace(0.1, 4, m)[:, None]  # the ranks' shards have amaxes far apart
    X = (rng.uniform(-1, 1, (m, kx)) * grow).astype(np.float32)
    W1, b1 = _rand(1, (hid, kx)), _rand(2, (hid,))
    W2, b2 = _rand(3, (n, hid)), _rand(4, (n,))
    G1, H = _rand(5, (m, hid)), _rand(6, (m, hid))
    G2 = (_rand(7, (m, n)) * grow).astype(np.float32)
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    c0, cn = comm.shard_offset(hid), comm.shard_rows(hid)

    def run(layer, args, g, rec):
        y, vjp = jax.vjp(lambda *a: layer(*a, comm=comm, fp8_recipe=rec), *args)
        return (y, *vjp(g))

    for sp in (True, False):
        rows = slice(off, off + mr) if sp else slice(0, m)  # the layers' x (column) and y (row) rows here
        col = lambda x, w, b, **kw: cj.column_parallel_linear(x, w, b, m=m, sequence_parallel=sp, **kw)  # noqa
        args = (X[rows], W1[c0:c0 + cn], b1[c0:c0 + cn])
        g1 = G1[:, c0:c0 + cn]
        ref, got = run(col, args, g1, None), run(col, args, g1, recipe)
        what = f"column sp={sp}"
        _fp8_bound_check(got[0], ref[0], X, W1[c0:c0 + cn].T, uf, uf, what + " y")
        _fp8_bound_check(got[1], ref[1], G1[rows], W1, ug, uf, what + " dx")
        # X^T: from the gathered fp8 rows, quantized again (sp), or from X
        _fp8_bound_check(got[2], ref[2], g1.T, X, ug, twice(uf) if sp else uf, what + " dw")
        np.testing.assert_allclose(got[3], ref[3], rtol=1e-5, atol=1e-5)
        row = lambda x, w, b, **kw: cj.row_parallel_linear(x, w, b, sequence_parallel=sp, **kw)  # noqa: E731
        args = (H[:, c0:c0 + cn], W2[:, c0:c0 + cn], b2)
        g2 = G2[rows]
        ref, got = run(row, args, g2, None), run(row, args, g2, recipe)
        what = f"row sp={sp}"
        _fp8_bound_check(got[0], ref[0], H[rows], W2.T, uf, uf, what + " y")
        _fp8_bound_check(got[1], ref[1], G2, W2[:, c0:c0 + cn], ug, uf, what + " dx")
        # dY^T: from the gathered fp8 rows, quantized again (sp), or from dY
        _fp8_bound_check(got[2], ref[2], G2.T, H[:, c0:c0 + cn], twice(ug) if sp else ug, uf, what + " dw")
        np.testing.assert_allclose(got[3], ref[3], rtol=1e-5, atol=1e-5)
    # under jax.jit: the same values
    yj = jax.jit(lambda x, w, b: row(x, w, b, comm=comm, fp8_recipe=recipe))(*args)  # the last: sp=False
    np.testing.assert_array_equal(np.asarray(yj), np.asarray(got[0]))
    return True


@pytest.mark.parametrize("recipe_name", ["current", "block"])
@pytest.mark.parametrize("nranks,m", [(2, 9), (3, 2)])
def test_jax_fp8_layers_vs_fp32(recipe_name, nranks, m):
    assert all(ranks.run(body_fp8_layers, nranks, recipe_name, m))


class _HistoryModel:
    """numpy's model of DelayedScaling's state: each cast rolls its column of
    the history down one row, writes its amax at row 0 and sets its next
    scale from the window (max, or the latest): amax / fp8_max (commgemm.fp8's
    compute_scale); columns input, weight, grad_output."""

    def __init__(self, length, algo):
        self.hist = np.zeros((length, 3), np.float32)
        self.scale = np.ones(3, np.float32)
        self.algo = algo

    def record(self, role, a):
        self.hist[:, role] = np.roll(self.hist[:, role], 1)
        self.hist[0, role] = np.float32(a)
        win = self.hist[:, role].max() if self.algo == "max" else self.hist[0, role]
        self.scale[role] = fp8.compute_scale(win, "float8_e5m2" if role == 2 else "float8_e4m3fn")

    def assert_is(self, meta, what):
        np.testing.assert_array_equal(np.asarray(meta.amax_history), self.hist, err_msg=what + " amax_history")
        np.testing.assert_array_equal(np.asarray(meta.scale), self.scale, err_msg=what + " scale")


def body_fp8_delayed(comm, m, algo):
    """DelayedScaling in the column and row layers, with and without sequence
    parallelism, over 4 steps of jax.jit(value_and_grad): the state the
    forward returns (input and weight recorded) and fp8_meta's cotangent
    (grad_output too) against the numpy model; y, dX, dW within the fp8
    bound where the delayed scales cover the step's amaxes (steps 1 and 3:
    the magnitudes shrink), db in high precision."""
    import jax
    import jax.numpy as jnp
    from commgemm import jax as cj
    recipe = cj.DelayedScaling(amax_history_len=3, amax_compute_algo=algo)
    uf, ug = U8["e4m3"], U8["e5m2"]
    twice = lambda u: 2 * u + u * u  # noqa: E731
    kx, hid, n = 160, 260, 140
    rng = np.random.default_rng(1)
    X, H = rng.uniform(-1, 1, (m, kx)).astype(np.float32) * 4, _rand(6, (m, hid))
    W1, b1, W2, b2 = _rand(1, (hid, kx)), _rand(2, (hid,)), _rand(3, (n, hid)), _rand(4, (n,))
    G1, G2 = _rand(5, (m, hid)), _rand(7, (m, n))
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    c0, cn = comm.shard_offset(hid), comm.shard_rows(hid)
    checked = 0
    for sp in (True, False):
        rows = slice(off, off + mr) if sp else slice(0, m)
        layers = (
            ("column", lambda x, w, b, **kw: cj.column_parallel_linear(x, w, b, m=m, sequence_parallel=sp, **kw),
             (X[rows], W1[c0:c0 + cn], b1[c0:c0 + cn]), G1[:, c0:c0 + cn],
             (X, W1[c0:c0 + cn].T), (G1[rows], W1), (G1[:, c0:c0 + cn].T, X), twice(uf) if sp else uf, uf),
            ("row", lambda x, w, b, **kw: cj.row_parallel_linear(x, w, b, sequence_parallel=sp, **kw),
             (H[:, c0:c0 + cn], W2[:, c0:c0 + cn], b2), G2[rows],
             (H[rows], W2.T), (G2, W2[:, c0:c0 + cn]), (G2.T, H[:, c0:c0 + cn]), uf, twice(ug) if sp else ug),
        )
        for name, layer, args, g, y_ops, dx_ops, dw_ops, u_xt, u_gt in layers:
            model = _HistoryModel(recipe.amax_history_len, algo)
            meta = cj.fp8_meta_init(recipe)
            ref_fn = jax.vjp(lambda *a: layer(*a, comm=comm), *args)
            ref = (ref_fn[0], *ref_fn[1](g))

            def loss(x, w, b, meta, g):
                y, meta_f = layer(x, w, b, comm=comm, fp8_recipe=recipe, fp8_meta=meta)
                return jnp.sum(y * g), (y, meta_f)

            step_fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))
            for step, f in enumerate((1.0, 0.5, 2.0, 0.25)):
                x = args[0] * np.float32(f)
                (_, (y, meta_f)), (dx, dw, db, meta_b) = step_fn(x, args[1], args[2], meta, g * np.float32(f))
                what = f"{name} sp={sp} step {step}"
                model.record(0, np.abs(x).max())
                model.record(1, np.abs(args[1]).max())
                model.assert_is(meta_f, what + " forward")  # grad_output's column as it was
                model.record(2, np.abs(g * np.float32(f)).max())
                model.assert_is(meta_b, what + " backward")
                meta = meta_b
                if step in (1, 3):
                    fy = np.float32(f)
                    _fp8_bound_check(y, ref[0] * fy + (1 - fy) * _bias_rows(args[2], y.shape), y_ops[0] * fy,
                                     y_ops[1], uf, uf, what + " y")
                    _fp8_bound_check(dx, ref[1] * fy, dx_ops[0] * fy, dx_ops[1], ug, uf, what + " dx")
                    _fp8_bound_check(dw, ref[2] * fy * fy, dw_ops[0] * fy, dw_ops[1] * fy, u_gt, u_xt,
                                     what + " dw")
                    np.testing.assert_allclose(db, ref[3] * fy, rtol=1e-5, atol=1e-5)
                    checked += 1
    return checked


def _bias_rows(b, shape):
    return np.broadcast_to(b, shape)


@pytest.mark.parametrize("nranks,m,algo", [(2, 9, "max"), (3, 7, "most_recent")])
def test_jax_fp8_delayed_scaling(nranks, m, algo):
    assert all(c == 8 for c in ranks.run(body_fp8_delayed, nranks, m, algo))


def test_jax_fp8_layer_refusals():
    from commgemm import jax as cj
    with pytest.raises(ValueError, match="fp8_format"):
        cj.Float8CurrentScaling(fp8_format="e5m2")
    x, w = np.ones((4, 8), np.float32), np.ones((8, 8), np.float32)
    with commgemm.Comm.local(0, 1, f"jax-fp8-refuse-{id(x)}", timeout_ms=30000) as comm:
        with pytest.raises(ValueError, match="fp8_recipe"):
            cj.column_parallel_linear(x, w, comm=comm, fp8_recipe="fp8")
        with pytest.raises(commgemm.NotSupportedError, match="activation='gelu'"):
            cj.column_parallel_linear(x, w, comm=comm, activation="gelu", fp8_recipe=cj.Float8BlockScaling())
        rec = cj.DelayedScaling(amax_history_len=4)
        with pytest.raises(ValueError, match=r"expected its state.*fp8_meta_init"):
            cj.column_parallel_linear(x, w, comm=comm, fp8_recipe=rec)
        with pytest.raises(ValueError, match=r"amax_history \(4, 3\)"):
            cj.row_parallel_linear(x, w, comm=comm, fp8_recipe=rec,
                                   fp8_meta=cj.fp8_meta_init(cj.DelayedScaling(amax_history_len=2)))
        with pytest.raises(ValueError, match="only DelayedScaling keeps state"):
            cj.row_parallel_linear(x, w, comm=comm, fp8_recipe=cj.Float8CurrentScaling(),
                                   fp8_meta=cj.fp8_meta_init(rec))
        with pytest.raises(ValueError, match="amax_compute_algo"):
            cj.DelayedScaling(amax_compute_algo="mean")
