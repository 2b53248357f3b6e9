"""FP8 through the numpy ops (host backend): float8 (ml_dtypes) X and W with
per-tensor or block scales, bf16/fp32/fp8 outputs with y_scale and y_amax,
AG+GEMM's gathered bytes and scales; every result against a float64
reference computed from the dequantized operands (codes times scales), and
the Python-side refusals (missing scale, wrong scale shape, layout NN).

    python3 -m pytest tests/python/test_fp8_host.py -q
"""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import libcheck  # noqa: E402 - puts this tree's python/ on sys.path
import ranks  # noqa: E402

ml_dtypes = pytest.importorskip("ml_dtypes")

import commgemm  # noqa: E402
from commgemm import fp8  # noqa: E402

pytestmark = libcheck.skip_without_library()

E4M3, E5M2 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
BF16 = np.dtype(ml_dtypes.bfloat16)
K, N = 200, 130  # k: a partial 128-block; n: two 128-row blocks of W


def rand(seed, shape):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(np.float32)


def quant(a, dtype, recipe, w_like):
    if recipe == "tensor":
        return fp8.quantize(a, dtype, fp8.Scaling.TENSOR)
    return fp8.quantize(a, dtype, fp8.Scaling.BLOCK_128X128 if w_like else fp8.Scaling.BLOCK_1X128)


def deq(codes, scale, w_like=False):
    return fp8.dequantize(codes, scale, w_like=w_like)


def check_out(got, want, what, y_scale=None):
    """got (any dtype) against the float64 reference: fp32 to fp32 rounding
    of a k-long sum, bf16 to its 8 bits, fp8 to one code (3 or 2 mantissa
    bits) of want * y_scale, saturated."""
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    if got.dtype in (E4M3, E5M2):
        fmax = fp8.FP8_MAX[got.dtype.name]
        target = np.clip(want * y_scale, -fmax, fmax)
        ulp = 2.0 ** -(3 if got.dtype == E4M3 else 2)
        err = np.abs(got.astype(np.float64) - target)
        bound = ulp * np.abs(target) + 2.0 ** -9
        assert (err <= bound).all(), f"{what}: fp8 Y off by more than a code: {err.max()}"
        return
    tol = 1e-5 if got.dtype == np.float32 else 2.0 ** -7
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= tol * scale, f"{what}: max err {err:.3g} > {tol * scale:.3g}"


def operands(P, m, recipe, xdt, wdt, seed):
    """Every rank's quantized X (AG: one shard each; RS/AR: a full X each)
    and W, so that each rank can build the whole reference."""
    xs = [quant(rand(seed + q, (m, K)), xdt, recipe, False) for q in range(P)]
    ws = [quant(rand(seed + 50 + q, (N, K)), wdt, recipe, True) for q in range(P)]
    return xs, ws


OUTS = (("float32", None), ("bfloat16", None), ("float8_e4m3fn", 8.0), ("float8_e5m2", 1.0))


def body_ops(comm, m, recipe):
    P, r = comm.size, comm.rank
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    checked = 0
    for xdt, wdt in ((E4M3, E4M3), (E5M2, E4M3), (E4M3, E5M2)):
        # AG+GEMM: rank q's shard is rows [off_q, off_q + m_q) of X, quantized by rank q alone
        full = rand(7, (m, K))
        shards = [quant(full[commgemm.shard_offset(m, q, P):][:commgemm.shard_rows(m, q, P)], xdt, recipe, False)
                  for q in range(P)]
        xq, xs = shards[r]
        (wq, ws), = [quant(rand(60 + r, (N, K)), wdt, recipe, True)]
        xdeq = np.concatenate([deq(c, s) for c, s in shards])
        want = xdeq @ deq(wq, ws, True).T
        for out_name, ys in OUTS:
            amax = np.zeros(1, np.float32) if ys is not None else None
            y, g, gs = commgemm.all_gather_gemm(comm, xq, wq, x_scale=xs, w_scale=ws, m=m, gathered=True,
                                                out_dtype=np.dtype(getattr(ml_dtypes, out_name, None) or out_name),
                                                y_scale=ys, y_amax=amax)
            check_out(y, want, f"AG {recipe} {xdt}x{wdt} -> {out_name}", ys)
            if amax is not None:
                np.testing.assert_allclose(amax[0], np.abs(want).max(), rtol=1e-5)
            # the gathered bytes and, per tensor, every rank's scale at [q]; per block, each row's
            np.testing.assert_array_equal(g.view(np.uint8), np.concatenate([c for c, _ in shards]).view(np.uint8))
            if recipe == "tensor":
                np.testing.assert_array_equal(gs, np.concatenate([s for _, s in shards]))
            else:
                np.testing.assert_array_equal(gs, np.concatenate([s for _, s in shards]))
            checked += 1
        # GEMM+RS and GEMM+AR: each rank its own X [m, K] and W with their own scales; bias bf16
        xs_all, ws_all = operands(P, m, recipe, xdt, wdt, 100)
        bias = rand(9, (N,)).astype(BF16)
        total = sum(deq(*xs_all[q]) @ deq(*ws_all[q], True).T for q in range(P)) + bias.astype(np.float64)
        for out_name, ys in OUTS:
            odt = np.dtype(getattr(ml_dtypes, out_name, None) or out_name)
            b = bias if odt.name in ("bfloat16",) or odt in (E4M3, E5M2) else bias.astype(np.float32)
            amax = np.zeros(1, np.float32) if ys is not None else None
            y = commgemm.gemm_reduce_scatter(comm, xs_all[r][0], ws_all[r][0], bias=b, x_scale=xs_all[r][1],
                                             w_scale=ws_all[r][1], out_dtype=odt, y_scale=ys, y_amax=amax)
            check_out(y, total[off:off + mr], f"RS {recipe} -> {out_name}", ys)
            if amax is not None:
                np.testing.assert_allclose(amax[0], np.abs(total[off:off + mr]).max() if mr else 0, rtol=1e-5)
            y = commgemm.gemm_all_reduce(comm, xs_all[r][0], ws_all[r][0], bias=b, x_scale=xs_all[r][1],
                                         w_scale=ws_all[r][1], out_dtype=odt, y_scale=ys, y_amax=amax)
            check_out(y, total, f"AR {recipe} -> {out_name}", ys)
            checked += 2
        # bulk: the GEMM half on fp8 a and b beside a reduce-scatter of fp32 rows
        (aq, as_), (bq, bs) = xs_all[r], ws_all[r]
        send = rand(11 + r, (m, 4))
        c, recv = commgemm.bulk_overlap(comm, aq, bq, send=send, collective="reduce_scatter", a_scale=as_,
                                        b_scale=bs)
        check_out(c, deq(aq, as_) @ deq(bq, bs, True).T, f"bulk {recipe}")
        np.testing.assert_allclose(recv, sum(rand(11 + q, (m, 4)) for q in range(P))[off:off + mr], rtol=1e-5,
                                   atol=1e-6)
        checked += 1
    return checked


@pytest.mark.parametrize("nranks,m", [(1, 5), (2, 7), (3, 130)])
@pytest.mark.parametrize("recipe", ["tensor", "block"])
def test_fp8_ops(nranks, m, recipe):
    assert all(c > 0 for c in ranks.run(body_ops, nranks, m, recipe))


def body_saturation(comm):
    """An fp8 Y whose scaled values pass the largest finite value saturates
    (never NaN or inf), amax is the value before scaling."""
    xq, xs = fp8.quantize(np.full((4, 8), 1.0, np.float32), E4M3)
    wq, ws = fp8.quantize(np.full((3, 8), 1.0, np.float32), E4M3)
    amax = np.zeros(1, np.float32)
    y = commgemm.gemm_all_reduce(comm, xq, wq, x_scale=xs, w_scale=ws, out_dtype=E4M3, y_scale=100.0, y_amax=amax)
    assert (y.astype(np.float32) == 448).all(), y
    assert amax[0] == 8.0 * comm.size
    return True


def test_fp8_output_saturates():
    ranks.run(body_saturation, 2)


def body_bad_input(comm):
    m = 4
    x, w = rand(1, (m, 8)), rand(2, (3, 8))
    xq, xs = fp8.quantize(x, E4M3)
    wq, ws = fp8.quantize(w, E4M3)
    with pytest.raises(commgemm.InvalidArgumentError, match="w is float8_e4m3fn without w_scale"):
        commgemm.gemm_all_reduce(comm, xq, wq, x_scale=xs)
    with pytest.raises(commgemm.InvalidArgumentError, match=r"x_scale has shape \(3, 1\): expected .* \(4, 1\)"):
        commgemm.gemm_all_reduce(comm, xq, wq, x_scale=np.ones((3, 1), np.float32), w_scale=ws)
    with pytest.raises(commgemm.InvalidArgumentError, match=r"w_scale has shape \(3, 1\): expected .* \(1, 1\)"):
        commgemm.gemm_all_reduce(comm, xq, wq, x_scale=np.ones((4, 1), np.float32),
                                 w_scale=np.ones((3, 1), np.float32))
    with pytest.raises(commgemm.InvalidArgumentError, match="float32 numpy array"):
        commgemm.gemm_all_reduce(comm, xq, wq, x_scale=np.ones(1, np.float64), w_scale=ws)
    with pytest.raises(commgemm.InvalidArgumentError, match="x_scale given, but x is float32"):
        commgemm.gemm_all_reduce(comm, x, w, x_scale=xs)
    with pytest.raises(commgemm.NotSupportedError, match="layout TN only.*transposed copies"):
        commgemm.gemm_all_reduce(comm, xq, np.ascontiguousarray(wq.T), x_scale=xs, w_scale=ws, layout="NN")
    with pytest.raises(commgemm.NotSupportedError, match="layout TN only"):
        commgemm.all_gather_gemm(comm, np.ascontiguousarray(xq.T), wq, x_scale=xs, w_scale=ws, layout="NT")
    with pytest.raises(commgemm.InvalidArgumentError, match="without y_scale"):
        commgemm.gemm_all_reduce(comm, xq, wq, x_scale=xs, w_scale=ws, out_dtype=E4M3)
    with pytest.raises(commgemm.InvalidArgumentError, match="float8 output only"):
        commgemm.gemm_all_reduce(comm, xq, wq, x_scale=xs, w_scale=ws, y_scale=1.0)
    # mixed recipes: the library's refusal (X per tensor, W per block)
    with pytest.raises(commgemm.InvalidArgumentError):
        commgemm.gemm_all_reduce(comm, xq, wq, x_scale=xs, w_scale=np.ones((1, 1), np.float32))
    # the comm is still usable
    y = commgemm.gemm_all_reduce(comm, xq, wq, x_scale=xs, w_scale=ws)
    check_out(y, comm.size * (deq(xq, xs) @ deq(wq, ws).T), "after errors")
    return True


def test_fp8_bad_input():
    ranks.run(body_bad_input, 2)


def test_quantization_helpers():
    """cast_to_fp8 rounds to nearest even and saturates (infinities too),
    keeps NaN; quantize's codes times its scales give back the input to the
    format's precision, per tensor and per block."""
    v = np.array([1000.0, -1e9, np.inf, -np.inf, np.nan, 0.0, 1.0625, 1.1875], np.float32)
    got = fp8.cast_to_fp8(v, E4M3).astype(np.float32)
    np.testing.assert_array_equal(got[:4], [448, -448, 448, -448])
    assert np.isnan(got[4]) and got[5] == 0
    np.testing.assert_array_equal(got[6:], [1.0, 1.25])  # ties to even: 1.0625 -> 1.0, 1.1875 -> 1.25
    assert fp8.cast_to_fp8(np.array([np.inf], np.float32), E5M2).astype(np.float32)[0] == 57344
    a = rand(3, (130, 260)) * np.linspace(0.01, 100, 260, dtype=np.float32)
    for sc, w_like in ((fp8.Scaling.TENSOR, False), (fp8.Scaling.BLOCK_1X128, False),
                       (fp8.Scaling.BLOCK_128X128, True)):
        codes, s = fp8.quantize(a, E4M3, sc)
        assert s.shape == fp8.scale_shape(sc, 130, 260)
        assert np.abs(codes.astype(np.float32)).max() == 448  # the amax maps to the largest value
        back = fp8.dequantize(codes, s, sc)
        err = np.abs(back - a) / np.maximum(fp8.expand_scale(s, sc, a.shape) * 2.0 ** -6, np.abs(a))
        assert err.max() <= 2.0 ** -4 + 1e-6, (sc, err.max())
    assert fp8.compute_scale(0.0, E4M3) == 1.0 and fp8.compute_scale(np.nan, E4M3) == 1.0
    assert fp8.compute_scale(896.0, E4M3, margin=1) == pytest.approx(4.0, rel=1e-6)
