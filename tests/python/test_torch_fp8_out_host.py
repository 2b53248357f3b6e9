"""FP8 outputs of commgemm.torch's functional ops on CPU tensors (host
backend): out_dtype torch.float8_e4m3fn / float8_e5m2 with y_scale and
y_amax=True, bit for bit against the numpy ops on the same operands (the
same host path), within one code of sat(rne(r * y_scale)) with r the float64
product of the dequantized operands, the amax max |r|; the fake kernel (opcheck) and
torch.compile(fullgraph=True) on the fp8 output; refusals. And the per-call
work of an fp8 call: the aten ops it runs, counted with a TorchDispatchMode
(outside the custom op) and torch.profiler (inside it), may not grow past
the outputs' allocations; a forward-only layer call under a recipe.

    python3 -m pytest tests/python/test_torch_fp8_out_host.py -q
"""

import collections
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import libcheck  # noqa: E402 - puts this tree's python/ on sys.path
import ranks  # noqa: E402

torch = pytest.importorskip("torch")
try:
    import ml_dtypes  # noqa: F401 - the numpy ops' float8, for the bit-for-bit reference
    HAVE_ML_DTYPES = True
except ImportError:
    HAVE_ML_DTYPES = False

import commgemm  # noqa: E402

pytestmark = libcheck.skip_without_library()

K, N = 160, 140  # a partial 128-block along k; two W row blocks
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


def _q(t, dtype, scaling):
    from commgemm import torch as cgt
    q = cgt.quantize(t, dtype, scaling)
    return q.data, q.scale, cgt.dequantize(q).double()


def _bytes(t):
    return t.view(torch.uint8)


def _np(t):
    """A CPU tensor as the numpy ops take it (ml_dtypes for float8 and bf16)."""
    import ml_dtypes
    if t.dtype in FP8_MAX or t.dtype == torch.bfloat16:
        name = {torch.float8_e4m3fn: "float8_e4m3fn", torch.float8_e5m2: "float8_e5m2"}.get(t.dtype, "bfloat16")
        return t.view(torch.uint8 if t.dtype.itemsize == 1 else torch.int16).numpy().view(getattr(ml_dtypes, name))
    return t.numpy()


def _check_fp8_y(y, amax, want, ref, ys, out_dtype, what):
    """y, amax: the torch op's fp8 Y and amax; want: the numpy op's (y, amax) on the
    same operands (the same host path: bit for bit); ref: the float64 product of the
    dequantized operands: Y within one code of sat(ref * y_scale), the amax max |ref|
    up to fp32 accumulation."""
    import numpy as np
    assert y.dtype == out_dtype and tuple(y.shape) == want[0].shape, f"{what}: {y.dtype} {tuple(y.shape)}"
    assert np.array_equal(_bytes(y).numpy(), want[0].view(np.uint8)), f"{what}: fp8 Y is not the numpy op's"
    target = (ref * float(ys)).clamp(-FP8_MAX[out_dtype], FP8_MAX[out_dtype])
    ulp = 2.0 ** -(3 if out_dtype == torch.float8_e4m3fn else 2)
    err = (y.double() - target).abs()
    assert bool((err <= ulp * target.abs() + 2.0 ** -9).all()), f"{what}: off by more than a code"
    if amax is not None:
        assert amax.dtype == torch.float32 and tuple(amax.shape) == (1,), f"{what}: amax {amax.dtype} {amax.shape}"
        assert np.array_equal(amax.numpy(), want[1]), f"{what}: amax {amax} vs the numpy op's {want[1]}"
        top = float(ref.abs().max()) if ref.numel() else 0.0
        assert abs(float(amax) - top) <= 1e-5 * top, f"{what}: amax {float(amax)} vs max |ref| {top}"


def body_fp8_out(comm, m, scaling_name, out_dtype):
    import numpy as np
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    P, r = comm.size, comm.rank
    xs = Scaling.TENSOR if scaling_name == "tensor" else Scaling.BLOCK_1X128
    ws = Scaling.TENSOR if scaling_name == "tensor" else Scaling.BLOCK_128X128
    torch.manual_seed(5)
    X = (torch.rand(m, K) * 2 - 1) * torch.linspace(0.1, 8, m)[:, None]
    W = torch.rand(N, K) * 2 - 1
    b = (torch.rand(N) * 2 - 1).bfloat16()  # an fp8 Y takes a bf16 bias
    shards = [_q(X[comm.shard_offset(m, s):][:comm.shard_rows(m, s)], torch.float8_e4m3fn, xs) for s in range(P)]
    w, sw, wd = _q(W, torch.float8_e4m3fn, ws)
    xr, sxr, _ = shards[r]
    ag_ref = torch.cat([d for _, _, d in shards]) @ wd.t()
    # big enough that some values saturate for e4m3 (|r| * ys up to 1.3 x 448)
    ys = torch.tensor([1.3 * FP8_MAX[torch.float8_e4m3fn] / max(float(ag_ref.abs().max()), 1e-3)])
    np_out = np.dtype(_np(torch.empty(1, dtype=out_dtype)).dtype)

    def numpy_op(fn, x, sx, wq, swq, bias=None, **kw):
        amax = np.zeros(1, np.float32)
        y = fn(comm, _np(x), _np(wq), bias=None if bias is None else _np(bias), x_scale=_np(sx), w_scale=_np(swq),
               out_dtype=np_out, y_scale=float(ys), y_amax=amax, **kw)
        return y, amax

    fp8 = dict(x_scale=sxr, w_scale=sw)
    _, g32, gs32 = cgt.all_gather_matmul(xr, w, comm=comm, m=m, return_gathered=True, **fp8)
    y, g, gs, amax = cgt.all_gather_matmul(xr, w, comm=comm, m=m, return_gathered=True, out_dtype=out_dtype,
                                           y_scale=ys, y_amax=True, **fp8)
    want = numpy_op(commgemm.all_gather_gemm, xr, sxr, w, sw, m=m)
    _check_fp8_y(y, amax, want, ag_ref, ys, out_dtype, f"ag {scaling_name}")
    assert torch.equal(_bytes(g), _bytes(g32)) and torch.equal(gs, gs32)
    y_only = cgt.all_gather_matmul(xr, w, comm=comm, m=m, out_dtype=out_dtype, y_scale=ys, **fp8)
    assert torch.equal(_bytes(y_only), _bytes(y))
    # GEMM+RS and GEMM+AR: each rank's own k columns (e5m2 X), a bf16 bias
    parts = [(_q(X[:, comm.shard_offset(K, s):][:, :comm.shard_rows(K, s)], torch.float8_e5m2, xs),
              _q(W[:, comm.shard_offset(K, s):][:, :comm.shard_rows(K, s)], torch.float8_e4m3fn, ws))
             for s in range(P)]
    total = sum(xq[2] @ wq[2].t() for xq, wq in parts) + b.double()
    (xq, sxq, _), (wq, swq, _) = parts[r]
    fp8 = dict(x_scale=sxq, w_scale=swq)
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    for name, fn, np_fn, ref in (("rs", cgt.matmul_reduce_scatter, commgemm.gemm_reduce_scatter, total[off:off + mr]),
                                 ("ar", cgt.matmul_all_reduce, commgemm.gemm_all_reduce, total)):
        y, amax = fn(xq, wq, b, comm=comm, out_dtype=out_dtype, y_scale=ys, y_amax=True, **fp8)
        _check_fp8_y(y, amax, numpy_op(np_fn, xq, sxq, wq, swq, b), ref, ys, out_dtype, f"{name} {scaling_name}")
        y2 = fn(xq, wq, b, comm=comm, out_dtype=out_dtype, y_scale=ys.reshape(()), **fp8)  # a 0-d y_scale
        assert torch.equal(_bytes(y2), _bytes(y))
    return True


@pytest.mark.parametrize("nranks,m,scaling_name", [(1, 5, "tensor"), (2, 9, "block"), (3, 2, "tensor")])
@pytest.mark.parametrize("out_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.skipif(not HAVE_ML_DTYPES, reason="the numpy ops' reference needs ml_dtypes")
def test_functional_fp8_output(nranks, m, scaling_name, out_dtype):
    assert all(ranks.run(body_fp8_out, nranks, m, scaling_name, out_dtype))


def body_fp8_out_compile(comm):
    """opcheck's test_faketensor on fp8_matmul with an fp8 Y and its amax (every
    op kind, both scalings), inputs untouched; torch.compile(fullgraph=True)
    keeps the op, its fp8 Y and amax as eager's."""
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    m = 7
    torch.manual_seed(6)
    ys = torch.tensor([50.0])
    for xs, ws in ((Scaling.TENSOR, Scaling.TENSOR), (Scaling.BLOCK_1X128, Scaling.BLOCK_128X128)):
        x, sx, _ = _q(torch.rand(comm.shard_rows(m), K), torch.float8_e4m3fn, xs)
        xf, sxf, _ = _q(torch.rand(m, K), torch.float8_e4m3fn, xs)
        w, sw, _ = _q(torch.rand(N, K), torch.float8_e5m2, ws)
        bias = torch.rand(N).bfloat16()
        for op, xx, s in (("ag", x, sx), ("rs", xf, sxf), ("ar", xf, sxf), ("gemm", xf, sxf)):
            for amax in (False, True):
                args = (op, xx, w, s, sw, bias, comm.id, m, "TN", "", torch.float8_e4m3fn, op == "ag", "", "", ys,
                        amax)
                before = [_bytes(a).clone() if a.dtype.itemsize == 1 else a.clone() for a in (xx, w, s, sw, ys)]
                torch.library.opcheck(torch.ops.commgemm.fp8_matmul, args, test_utils=("test_faketensor",))
                after = [_bytes(a) if a.dtype.itemsize == 1 else a for a in (xx, w, s, sw, ys)]
                assert all(torch.equal(p, q) for p, q in zip(before, after)), f"{op}: an input was mutated"
    kw = dict(comm=comm, x_scale=sxf, w_scale=sw, out_dtype=torch.float8_e5m2, y_amax=True)
    y_eager, amax_eager = cgt.matmul_all_reduce(xf, w, bias, y_scale=ys, **kw)

    def f(a, scale):
        y, amax = cgt.matmul_all_reduce(a, w, bias, y_scale=scale, **kw)
        return y.float() * 2, amax

    y, amax = torch.compile(f, fullgraph=True, backend="aot_eager")(xf, ys)
    torch.testing.assert_close(y, y_eager.float() * 2, rtol=0, atol=0)
    torch.testing.assert_close(amax, amax_eager, rtol=0, atol=0)
    return True


def test_functional_fp8_output_opcheck_compile():
    ranks.run(body_fp8_out_compile, 2)


def body_fp8_out_refusals(comm):
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    x, sx, _ = _q(torch.rand(4, K), torch.float8_e4m3fn, Scaling.TENSOR)
    w, sw, _ = _q(torch.rand(N, K), torch.float8_e4m3fn, Scaling.TENSOR)
    e4 = torch.float8_e4m3fn
    kw = dict(comm=comm, x_scale=sx, w_scale=sw)
    bad = (
        ("out_dtype torch.float8_e4m3fn needs y_scale.*found none",
         lambda: cgt.matmul_all_reduce(x, w, out_dtype=e4, **kw)),
        (r"needs y_scale.*found Tensor torch.float32 \(2,\)",
         lambda: cgt.matmul_reduce_scatter(x, w, out_dtype=e4, y_scale=torch.ones(2), **kw)),
        ("needs y_scale.*found Tensor torch.float64",
         lambda: cgt.all_gather_matmul(x, w, out_dtype=e4, y_scale=torch.ones(1, dtype=torch.float64), **kw)),
        ("y_scale is a float: expected a float32 tensor",
         lambda: cgt.matmul_all_reduce(x, w, out_dtype=e4, y_scale=2.0, **kw)),
        ("y_scale given, but the output is torch.bfloat16",
         lambda: cgt.matmul_all_reduce(x, w, out_dtype=torch.bfloat16, y_scale=torch.ones(1), **kw)),
        ("y_amax given, but the output is torch.float32", lambda: cgt.matmul_all_reduce(x, w, y_amax=True, **kw)),
        ("y_scale, y_amax given, but x is torch.float32",
         lambda: cgt.matmul_all_reduce(x.float(), w.float(), comm=comm, y_scale=torch.ones(1), y_amax=True)),
        ("y_scale given with fp8_recipe",
         lambda: cgt.matmul_all_reduce(x.float(), w.float(), comm=comm, y_scale=torch.ones(1),
                                       fp8_recipe=cgt.Float8CurrentScaling())),
        ("x_scale given with fp8_recipe",  # a 2-D (block) scale is named too
         lambda: cgt.matmul_all_reduce(x.float(), w.float(), comm=comm, x_scale=torch.ones(4, 2),
                                       fp8_recipe=cgt.Float8CurrentScaling())),
        ("out_dtype 'bf16': expected a torch.dtype", lambda: cgt.matmul_all_reduce(x, w, out_dtype="bf16", **kw)),
        ("not differentiable", lambda: cgt.matmul_all_reduce(x, w, out_dtype=e4, y_scale=torch.ones(
            1, requires_grad=True), **kw)),
    )
    for match, call in bad:
        with pytest.raises(commgemm.InvalidArgumentError, match=match):
            call()
            pytest.fail(f"refusal ({match}): no error")
    # refused at trace time under torch.compile too, with the same message
    with pytest.raises(Exception, match="needs y_scale"):
        torch.compile(lambda a: cgt.matmul_all_reduce(a, w, out_dtype=e4, **kw), fullgraph=True,
                      backend="aot_eager")(x)
    # the library's own refusal (an fp8 Y takes a bf16 bias) leaves the comm usable
    with pytest.raises(commgemm.InvalidArgumentError, match="bias"):
        cgt.matmul_all_reduce(x, w, torch.ones(N), out_dtype=e4, y_scale=torch.ones(1), **kw)
    y, amax = cgt.matmul_all_reduce(x, w, out_dtype=e4, y_scale=torch.ones(1), y_amax=True, **kw)
    assert y.dtype == e4 and amax.shape == (1,)
    return True


def test_functional_fp8_output_refusals():
    ranks.run(body_fp8_out_refusals, 2)


# --------------------------------------------------------------------------
# Per-call work: the aten ops an fp8 call runs
# --------------------------------------------------------------------------


def _ops_of(call):
    """(ops dispatched outside the custom ops, every aten op run inside and out)
    of one call: a TorchDispatchMode sees the former (a custom op is one op to
    it), torch.profiler on CPU the latter."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen() as seen:
        call()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        call()
    def aten(e):
        return e is not None and e.name.startswith("aten::")
    # the aten ops the call itself runs (an op's own inner ops, e.g. zeros' fill, are its business)
    inner = collections.Counter(e.name for e in prof.events() if aten(e) and not aten(e.cpu_parent))
    return collections.Counter(seen.ops), inner


def body_fp8_call_ops(comm):
    """Each fp8 functional call runs the commgemm op and, inside it, only the
    allocations of its outputs: Y (torch.empty), the amax where asked, the
    gathered X (empty) and its scales (zeros: a shard with no rows leaves its
    entry 0) where asked. No scale reshaping, casts, copies, reductions or
    host syncs: a per-call op more fails here."""
    from commgemm import torch as cgt
    from commgemm.fp8 import Scaling
    m = 6
    x, sx, _ = _q(torch.rand(comm.shard_rows(m), K), torch.float8_e4m3fn, Scaling.TENSOR)
    xf, sxf, _ = _q(torch.rand(m, K), torch.float8_e4m3fn, Scaling.TENSOR)
    w, sw, _ = _q(torch.rand(N, K), torch.float8_e4m3fn, Scaling.TENSOR)
    sx0, sw0, ys = sx.reshape(()), sw.reshape(()), torch.tensor([8.0])  # 0-d scales as torch._scaled_mm takes
    bias = torch.rand(N).bfloat16()
    e4, bf = torch.float8_e4m3fn, torch.bfloat16
    cases = (
        ("ag bf16", lambda: cgt.all_gather_matmul(x, w, comm=comm, m=m, x_scale=sx0, w_scale=sw0, out_dtype=bf),
         {"aten::empty": 1}),
        ("ag fp8 y, amax", lambda: cgt.all_gather_matmul(x, w, comm=comm, m=m, x_scale=sx0, w_scale=sw0, out_dtype=e4,
                                                         y_scale=ys, y_amax=True), {"aten::empty": 2}),
        ("ag gathered", lambda: cgt.all_gather_matmul(x, w, comm=comm, m=m, x_scale=sx, w_scale=sw,
                                                      return_gathered=True),
         {"aten::empty": 2, "aten::zeros": 1}),
        ("rs bf16 bias", lambda: cgt.matmul_reduce_scatter(xf, w, bias, comm=comm, x_scale=sxf, w_scale=sw,
                                                           out_dtype=bf), {"aten::empty": 1}),
        ("rs fp8 y", lambda: cgt.matmul_reduce_scatter(xf, w, comm=comm, x_scale=sx0, w_scale=sw0, out_dtype=e4,
                                                       y_scale=ys), {"aten::empty": 1}),
        ("ar fp8 y, amax", lambda: cgt.matmul_all_reduce(xf, w, bias, comm=comm, x_scale=sxf, w_scale=sw,
                                                         out_dtype=e4, y_scale=ys, y_amax=True), {"aten::empty": 2}),
    )
    for what, call, want in cases:
        call()  # warm
        outer, inner = _ops_of(call)
        assert outer == collections.Counter({"commgemm.fp8_matmul.default": 1}), f"{what}: outside the op: {outer}"
        assert inner == collections.Counter(want), f"{what}: aten ops {dict(inner)}, expected {dict(want)}"
    return True


def test_fp8_call_ops():
    ranks.run(body_fp8_call_ops, 2)


def body_recipe_forward_only(comm):
    """A layer under an fp8 recipe called without autograd (torch.no_grad):
    the sequence-parallel column layer's AG+GEMM asks for no gathered X then;
    its output is the grad-enabled call's, and the row layer's too."""
    from commgemm import torch as cgt
    m = 9
    torch.manual_seed(7)
    col = cgt.ColumnParallelLinear.from_linear(torch.nn.Linear(K, N), comm, sequence_parallel=True,
                                               fp8_recipe=cgt.Float8CurrentScaling())
    row = cgt.RowParallelLinear.from_linear(torch.nn.Linear(N, K), comm, sequence_parallel=True,
                                            fp8_recipe=cgt.Float8CurrentScaling())
    x = torch.rand(comm.shard_rows(m), K)
    h = torch.rand(m, row.in_local)
    with_grad = col(x, m=m).detach(), row(h).detach()
    with torch.no_grad():
        no_grad = col(x, m=m), row(h)
    for a, b in zip(with_grad, no_grad):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    return True


def test_recipe_forward_only():
    ranks.run(body_recipe_forward_only, 2)
