"""commgemm from JAX: the GEMM ops as XLA FFI custom calls.

The library's XLA FFI handlers (cgm_xla_ffi_* in include/commgemm.h) are
registered as custom-call targets for the "cpu" and "CUDA" platforms, so the
ops run inside jit-compiled JAX programs, on XLA's stream on a GPU backend or
synchronously on the host backend (CPU arrays):

    import commgemm, commgemm.jax as cj
    comm = commgemm.Comm.from_env()                  # or Comm.local(...) on CPU
    y = cj.all_gather_matmul(x_shard, w, comm=comm, m=m)     # [m, n_loc]
    y_r = cj.matmul_reduce_scatter(x, w, comm=comm)          # [m_r, n]
    y = cj.column_parallel_linear(x_shard, w, b, comm=comm, m=m)  # differentiable

Each call is collective: every rank of the comm makes the same calls in the
same order (the ops carry has_side_effect, so XLA neither drops nor merges
them; keep independent commgemm calls of one program in a data-dependent
order, as with any collective). One process per rank, each with its own
device; the comm must outlive the compiled programs that use it.
"""

from typing import NamedTuple

import numpy as np

import jax
import jax.numpy as jnp

from . import _lib
from . import fp8 as _fp8
from ._lib import Scaling, shard_rows
from .fp8 import DelayedScaling, Float8BlockScaling, Float8CurrentScaling
from .core import Comm, _fp8_layout

__all__ = ["register", "all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce",
           "bulk_matmul_collective", "column_parallel_linear", "row_parallel_linear", "parallel_mlp", "amax",
           "compute_scale", "cast_to_fp8", "quantize", "dequantize", "Float8CurrentScaling", "Float8BlockScaling",
           "DelayedScaling", "Fp8Meta", "fp8_meta_init"]

_TARGETS = {
    "commgemm_all_gather_gemm": "cgm_xla_ffi_all_gather_gemm",
    "commgemm_gemm_reduce_scatter": "cgm_xla_ffi_gemm_reduce_scatter",
    "commgemm_gemm_all_reduce": "cgm_xla_ffi_gemm_all_reduce",
    "commgemm_bulk_overlap": "cgm_xla_ffi_bulk_overlap",
}
_registered = False


def register():
    """Registers the custom-call targets with XLA (once per process; the ops
    call it). Raises commgemm.CommGemmError when the library cannot be
    loaded or lacks the handlers (built before they existed)."""
    global _registered
    if _registered:
        return
    lib = _lib.lib()
    for target, symbol in _TARGETS.items():
        fn = getattr(lib, symbol, None)
        if fn is None:
            raise _lib.UnavailableError(_lib.Status.UNAVAILABLE,
                                        f"{_lib.library_path()} has no {symbol}: rebuild libcommgemm "
                                        "(the XLA FFI handlers came with the JAX binding)")
        capsule = jax.ffi.pycapsule(fn)
        for platform in ("cpu", "CUDA"):
            jax.ffi.register_ffi_target(target, capsule, platform=platform)
    _registered = True


def _comm_attrs(comm, layout, algo, splits, backend, allow_tf32, partial_dtype=None, gemm_reduction=None):
    if not isinstance(comm, Comm):
        raise TypeError(f"comm: expected a commgemm.Comm, got {type(comm).__name__}")
    attrs = dict(comm=np.uint64(comm.handle.value), layout=np.int32(_lib.parse_layout(layout)),
                 algo=np.int32(_lib.parse_algo(algo)), splits=np.int32(int(splits)),
                 allow_tf32=np.int32(1 if allow_tf32 else 0))
    if backend is not None:
        attrs["backend"] = np.int32(_lib.parse_backend(backend))
    # left out (the comm's) unless given: the handler's default is CGM_OP_OPTIONS_INIT's
    if partial_dtype is not None:
        attrs["partial_dtype"] = np.int32(_lib.parse_partial_dtype(partial_dtype))
    if gemm_reduction is not None:
        attrs["gemm_reduction"] = np.int32(_lib.parse_gemm_reduction(gemm_reduction))
    return attrs


def _fp8_inputs(x_name, x, w_name, w, x_scale, w_scale, layout):
    """The scale operands and the scaling attribute of fp8 x and w (both
    or neither: the library refuses a mixed pair), checked here: the scales
    are given, float32 and shaped as commgemm.fp8.scaling_of says; layout TN."""
    is8 = [_fp8.is_fp8_name(jnp.dtype(a.dtype).name) for a in (x, w)]
    _fp8_layout(_lib.parse_layout(layout), x, w)
    for name, a, sc, fp8 in ((x_name, x, x_scale, is8[0]), (w_name, w, w_scale, is8[1])):
        if fp8 and sc is None:
            raise ValueError(f"{name} is {a.dtype} without {name}_scale: an fp8 operand needs its float32 scales "
                             f"(value = code * scale): pass {name}_scale (commgemm.jax.quantize makes it)")
        if not fp8 and sc is not None:
            raise ValueError(f"{name}_scale given, but {name} is {a.dtype}: scales go with float8 operands only")
    if not any(is8):
        return [], {}
    if not all(is8):
        return [], {}  # the library says what to pass (X and W fp8 alike)
    xs = _fp8.scaling_of(x_name, x_scale.shape, *x.shape, w_like=False)
    ws = _fp8.scaling_of(w_name, w_scale.shape, *w.shape, w_like=True)
    for name, sc in ((x_name, x_scale), (w_name, w_scale)):
        if jnp.dtype(sc.dtype) != jnp.float32:
            raise ValueError(f"{name}_scale is {sc.dtype}: expected float32")
    if (xs == Scaling.TENSOR) != (ws == Scaling.TENSOR):
        raise ValueError(f"{x_name}_scale and {w_name}_scale: one is per tensor, the other per block: expected "
                         "one recipe (both per tensor, or X 1x128 with W 128x128 blocks)")
    return [x_scale, w_scale], {"scaling": np.int32(xs)}


def _out_default(x, out_dtype):
    """The output dtype: out_dtype, else x's, float32 for fp8 inputs."""
    if out_dtype is not None:
        return jnp.dtype(out_dtype)
    return jnp.dtype(jnp.float32) if _fp8.is_fp8_name(jnp.dtype(x.dtype).name) else jnp.dtype(x.dtype)


def _fp8_output(y, y_scale, y_amax, operands, results, attrs):
    """An fp8 output's quantization scale (y_scale: a float or a 1-element
    float32 array; it multiplies on quantize: Y = sat(rne(r * y_scale))) as
    an operand after the X/W scales, and with y_amax=True a float32 [1]
    result receiving max |r| of this rank's Y (commgemm.h "FP8"). Call it
    before the bias and the epilogue add theirs. Returns 1 when it added the
    result, else 0."""
    if not _fp8.is_fp8_name(jnp.dtype(y.dtype).name):
        if y_scale is not None or y_amax:
            raise ValueError(f"y_scale / y_amax given, but the output is {jnp.dtype(y.dtype)}: they go with a "
                             "float8 output only (out_dtype=jnp.float8_e4m3fn or float8_e5m2)")
        return 0
    if y_scale is None:
        raise ValueError(f"the output is {jnp.dtype(y.dtype)} without y_scale: an fp8 output needs its "
                         "quantization scale (Y = sat(rne(r * y_scale))): pass y_scale=1.0 or fp8_max / amax")
    ys = jnp.asarray(y_scale)
    if ys.size != 1 or jnp.dtype(ys.dtype) not in (jnp.float32, jnp.float64, jnp.float16, jnp.bfloat16):
        raise ValueError(f"y_scale has {ys.size} values of {ys.dtype}: expected one float (per-tensor scaling "
                         "of Y)")
    operands.append(ys.astype(jnp.float32).reshape(1))
    attrs["y_scale"] = np.int32(1)
    if not y_amax:
        return 0
    attrs["y_amax"] = np.int32(1)
    results.append(jax.ShapeDtypeStruct((1,), jnp.float32))
    return 1


def _check_2d(name, a):
    if a.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array, found shape {tuple(a.shape)}; reshape it to [rows, cols]")


def _out_cols(layout, w):
    return w.shape[0] if layout == "TN" else w.shape[1]


def _layout_name(layout):
    return _lib.layout_name(_lib.parse_layout(layout))


def _rows_k(layout, x):
    """(rows, k) of an X-like operand: [rows, k], or [k, rows] for NT."""
    return (x.shape[1], x.shape[0]) if layout == "NT" else (x.shape[0], x.shape[1])


_MARKER = jax.ShapeDtypeStruct((1,), jnp.uint8)


def _call(target, results, operands, attrs, after=None):
    """One custom call: its results (a tuple) and its order marker. XLA orders
    custom calls by their data only, and the ranks' programs may differ in shape
    (uneven shards), so two calls without a data path between them could run in
    different orders on different ranks; the layers pass the marker of the call
    that must come first as `after` (the handlers' attribute ordered: a marker
    operand and result, never read or written)."""
    register()
    attrs = dict(attrs, ordered=np.int32(1))
    marker_in = after if after is not None else jnp.zeros((1,), jnp.uint8)
    out = jax.ffi.ffi_call(target, list(results) + [_MARKER], has_side_effect=True)(*operands, marker_in, **attrs)
    return tuple(out[:-1]), out[-1]


def _with_marker(value, marker, want):
    """An op's return value, with its order marker when the layers asked (_marked=True)."""
    return (value, marker) if want else value


def _epilogue(epilogue, aux, y, bgrad_len, operands, results, attrs):
    """Adds an epilogue (commgemm.h "Epilogues") to a call: its attribute, the aux operand that
    DGELU/DGELU_BGRAD read, and the results it writes (aux for GELU_AUX, shaped like y; then
    bgrad [bgrad_len]). Returns how many results it added."""
    e = _lib.parse_epilogue(epilogue)
    if e == _lib.Epilogue.NONE:
        if aux is not None:
            raise ValueError("aux given without an epilogue that reads it (dgelu, dgelu_bgrad)")
        return 0
    attrs["epilogue"] = np.int32(e)
    if e in (_lib.Epilogue.DGELU, _lib.Epilogue.DGELU_BGRAD):
        if aux is None:
            raise ValueError(f"epilogue {_lib.epilogue_name(e)!r} reads the pre-activation: pass aux=")
        operands.append(aux)
    elif aux is not None:
        raise ValueError(f"aux given with epilogue {_lib.epilogue_name(e)!r}, which does not read it")
    added = 0
    if e == _lib.Epilogue.GELU_AUX:
        results.append(jax.ShapeDtypeStruct(y.shape, y.dtype))
        added += 1
    if e in (_lib.Epilogue.DGELU_BGRAD, _lib.Epilogue.BGRAD):
        results.append(jax.ShapeDtypeStruct((bgrad_len,), y.dtype))
        added += 1
    return added


def all_gather_matmul(x_shard, w, bias=None, *, comm, m=None, layout="TN", algo="auto", splits=0, backend=None,
                      allow_tf32=False, out_dtype=None, return_gathered=False, gemm_reduction=None, x_scale=None,
                      w_scale=None, fp8_fast_accum=False, epilogue=None, aux=None, y_scale=None, y_amax=False,
                      _after=None, _marked=False):
    """AG+GEMM: Y[m, n] = allgather(X) . op(W) (+ bias), cgm_all_gather_gemm.

    x_shard: this rank's rows, [m_r, k] (TN, NN) or [k, m_r] (NT), m_r =
    commgemm.shard_rows(m, rank, P). w: [n, k] (TN) or [k, n]. bias: [n] or
    None. m: total rows; default m_r * P, right only for equal shards: with
    uneven ones the ranks would call with different m, which the call's
    cross-rank agreement check (on by default) refuses; pass m then.
    out_dtype: x's dtype (default) or float32. With return_gathered, also
    the gathered X ([m, k], or [k, m] for NT). gemm_reduction: "any" or
    "fp32" (None: the comm's; every op takes it, docs/PYTHON.md).
    FP8 (layout TN): float8_e4m3fn / float8_e5m2 x_shard and w with x_scale
    and w_scale (float32; () or (1,) per tensor, 2-D per block: commgemm.fp8);
    the output is float32 unless out_dtype says (bf16, fp16, or
    float8_e4m3fn / float8_e5m2 with y_scale, a float or 1-element array
    that multiplies on quantize: Y = sat(rne(r * y_scale)); y_amax=True also
    returns max |r| of this rank's Y, float32 [1], after the gathered X);
    with return_gathered also the gathered scales (P per tensor, rank s's
    at [s]; [m, ceil(k/128)] per block), after the gathered X.
    epilogue: None, "gelu", "gelu_aux", "dgelu" or "dgelu_bgrad" (commgemm.h
    "Epilogues"); aux: the [m, n] pre-activation dgelu/dgelu_bgrad read.
    Returns y, then the gathered X and its scales (return_gathered), then
    y_amax (y_amax=True), then the aux that gelu_aux writes, then dgelu_bgrad's bias gradient [n]; y alone bare.
    Not differentiable: see column_parallel_linear. (_after, _marked: the
    layers' order markers, see _call.)"""
    layout = _layout_name(layout)
    _check_2d("x_shard", x_shard)
    _check_2d("w", w)
    rows, k = _rows_k(layout, x_shard)
    m = _total_rows(comm, rows, m)
    n = _out_cols(layout, w)
    scales, fp8_attrs = _fp8_inputs("x_shard", x_shard, "w", w, x_scale, w_scale, layout)
    results = [jax.ShapeDtypeStruct((m, n), _out_default(x_shard, out_dtype))]
    if return_gathered:
        results.append(jax.ShapeDtypeStruct((k, m) if layout == "NT" else (m, k), x_shard.dtype))
        if scales:
            per_tensor = fp8_attrs["scaling"] == Scaling.TENSOR
            gs = (comm.size,) if per_tensor else _fp8.scale_shape(Scaling.BLOCK_1X128, m, k)
            results.append(jax.ShapeDtypeStruct(gs, jnp.float32))
    operands = [x_shard, w] + scales
    attrs = _comm_attrs(comm, layout, algo, splits, backend, allow_tf32, gemm_reduction=gemm_reduction)
    attrs.update(fp8_attrs, **({"fp8_fast_accum": np.int32(1)} if fp8_fast_accum else {}))
    extra = _fp8_output(results[0], y_scale, y_amax, operands, results, attrs)
    operands += [bias] if bias is not None else []
    extra += _epilogue(epilogue, aux, results[0], n, operands, results, attrs)
    out, marker = _call("commgemm_all_gather_gemm", results, operands, attrs, _after)
    return _with_marker(out if return_gathered or extra else out[0], marker, _marked)


def _total_rows(comm, rows, m, what="all_gather_matmul"):
    P, r = comm.size, comm.rank
    if m is None:
        # A rank cannot tell uneven shards from its own: the ranks' calls then
        # disagree about m, which the C API's agreement check refuses.
        m = rows * P
    elif shard_rows(int(m), r, P) != rows:
        raise ValueError(f"{what}: m = {m} gives rank {r} of {P} a shard of "
                         f"{shard_rows(int(m), r, P)} rows, found {rows}; commgemm.shard_rows(m, rank, P) rows "
                         "per rank")
    return int(m)


def _reduce_op(target, x, w, bias, comm, layout, algo, splits, backend, allow_tf32, out_dtype, partial_dtype,
               gemm_reduction, scatter, fp8=(None, None, False, None, False), epilogue=None, aux=None, after=None,
               marked=False):
    layout = _layout_name(layout)
    _check_2d("x", x)
    _check_2d("w", w)
    scales, fp8_attrs = _fp8_inputs("x", x, "w", w, fp8[0], fp8[1], layout)
    m = _rows_k(layout, x)[0]
    rows = shard_rows(m, comm.rank, comm.size) if scatter else m
    n = _out_cols(layout, w)
    results = [jax.ShapeDtypeStruct((rows, n), _out_default(x, out_dtype))]
    operands = [x, w] + scales
    attrs = _comm_attrs(comm, layout, algo, splits, backend, allow_tf32, partial_dtype, gemm_reduction)
    attrs.update(fp8_attrs, **({"fp8_fast_accum": np.int32(1)} if fp8[2] else {}))
    extra = _fp8_output(results[0], fp8[3], fp8[4], operands, results, attrs)
    operands += [bias] if bias is not None else []
    extra += _epilogue(epilogue, aux, results[0], n, operands, results, attrs)
    out, marker = _call(target, results, operands, attrs, after)
    return _with_marker(out if extra else out[0], marker, marked)


def matmul_reduce_scatter(x, w, bias=None, *, comm, layout="TN", algo="auto", splits=0, backend=None,
                          allow_tf32=False, out_dtype=None, partial_dtype=None, gemm_reduction=None,
                          x_scale=None, w_scale=None, fp8_fast_accum=False, epilogue=None, aux=None, y_scale=None,
                          y_amax=False, _after=None, _marked=False):
    """GEMM+RS: this rank's rows [m_r, n] of sum_ranks X . op(W) (+ bias, added
    once), cgm_gemm_reduce_scatter. x: [m, k_loc] (TN, NN) or [k_loc, m]; w:
    [n, k_loc] (TN) or [k_loc, n]. partial_dtype: "fp32" or "output", the
    same on every rank; gemm_reduction: "any" or "fp32"; None: the comm's.
    FP8: x_scale, w_scale, fp8_fast_accum, y_scale, y_amax as
    all_gather_matmul's (each rank's x and w with their own scales; y_amax
    of this rank's rows). epilogue, aux: as
    all_gather_matmul's, applied after the reduction (aux shaped like the
    output). Not differentiable: see row_parallel_linear."""
    return _reduce_op("commgemm_gemm_reduce_scatter", x, w, bias, comm, layout, algo, splits, backend, allow_tf32,
                      out_dtype, partial_dtype, gemm_reduction, True,
                      (x_scale, w_scale, fp8_fast_accum, y_scale, y_amax), epilogue, aux, _after, _marked)


def matmul_all_reduce(x, w, bias=None, *, comm, layout="TN", algo="auto", splits=0, backend=None,
                      allow_tf32=False, out_dtype=None, partial_dtype=None, gemm_reduction=None,
                      x_scale=None, w_scale=None, fp8_fast_accum=False, epilogue=None, aux=None, y_scale=None,
                      y_amax=False, _after=None, _marked=False):
    """GEMM+AR: Y[m, n] = sum_ranks X . op(W) (+ bias, added once) on every rank,
    cgm_gemm_all_reduce. Operands and options as matmul_reduce_scatter's (an
    fp8 Y is the same on every rank where the ranks pass the same y_scale;
    y_amax is of all of Y, the same on every rank)."""
    return _reduce_op("commgemm_gemm_all_reduce", x, w, bias, comm, layout, algo, splits, backend, allow_tf32,
                      out_dtype, partial_dtype, gemm_reduction, False,
                      (x_scale, w_scale, fp8_fast_accum, y_scale, y_amax), epilogue, aux, _after, _marked)


def bulk_matmul_collective(a=None, b=None, bias=None, send=None, *, comm, collective="all_gather", m=None,
                           layout="TN", algo="auto", backend=None, allow_tf32=False, out_dtype=None,
                           gemm_reduction=None, a_scale=None, b_scale=None, fp8_fast_accum=False, epilogue=None,
                           aux=None, y_scale=None, y_amax=False, _after=None, _marked=False):
    """Bulk: a local GEMM C = op(a) . op(b) (+ bias) beside an unrelated
    collective on `send`, overlapped (cgm_bulk_overlap; e.g. the wgrad GEMM
    beside the dgrad's reduce-scatter). Either part may be left out (a and b
    None, or send None). collective: "all_gather" (send [m_r, cols] -> recv
    [m, cols]; m as in all_gather_matmul) or "reduce_scatter" (send [m, cols]
    -> this rank's rows [m_r, cols], summed in fp32). FP8: fp8 a and b (TN)
    with a_scale and b_scale, as all_gather_matmul's x_scale and w_scale; c
    float32 unless out_dtype says (bf16, fp16, or float8_e4m3fn / float8_e5m2
    with y_scale; y_amax=True: max |r| of c, float32 [1]), as
    all_gather_matmul's Y. epilogue, aux: the GEMM's, as all_gather_matmul's,
    plus "bgrad" (the sums of op(a) along the contraction, [c rows]: a weight
    gradient's bias gradient). Returns (c, recv), None for a part left out,
    then c's amax (y_amax=True), then what the epilogue wrote."""
    layout = _layout_name(layout)
    gemm = a is not None or b is not None
    if gemm and (a is None or b is None):
        raise ValueError("bulk_matmul_collective: pass both a and b for the GEMM, or neither")
    if bias is not None and not gemm:
        raise ValueError("bulk_matmul_collective: bias without a GEMM (a, b)")
    if not gemm and send is None:
        raise ValueError("bulk_matmul_collective: expected a GEMM (a, b), a collective (send) or both")
    results, operands, coll, fp8_attrs = [], [], -1, {}
    attrs = _comm_attrs(comm, layout, algo, 0, backend, allow_tf32, gemm_reduction=gemm_reduction)
    extra = amax = 0
    if gemm:
        _check_2d("a", a)
        _check_2d("b", b)
        scales, fp8_attrs = _fp8_inputs("a", a, "b", b, a_scale, b_scale, layout)
        c_shape = jax.ShapeDtypeStruct((_rows_k(layout, a)[0], _out_cols(layout, b)), _out_default(a, out_dtype))
        results.append(c_shape)
        operands += [a, b] + scales
        amax = _fp8_output(c_shape, y_scale, y_amax, operands, results, attrs)
        operands += [bias] if bias is not None else []
        bgrad_len = c_shape.shape[0 if _lib.parse_epilogue(epilogue) == _lib.Epilogue.BGRAD else 1]
        extra = _epilogue(epilogue, aux, c_shape, bgrad_len, operands, results, attrs)
    elif epilogue is not None or aux is not None or y_scale is not None or y_amax:
        raise ValueError("bulk_matmul_collective: an epilogue, y_scale or y_amax without a GEMM (a, b)")
    if send is not None:
        _check_2d("send", send)
        coll = int(_lib.parse_collective(collective))
        if coll == int(_lib.Collective.ALL_GATHER):
            rows = _total_rows(comm, send.shape[0], m, "bulk_matmul_collective")
        else:
            rows = shard_rows(send.shape[0], comm.rank, comm.size)
        results.append(jax.ShapeDtypeStruct((rows, send.shape[1]), send.dtype))
        operands.append(send)
    attrs.update(gemm=np.int32(gemm), bias=np.int32(bias is not None), collective=np.int32(coll), **fp8_attrs)
    if fp8_fast_accum:
        attrs["fp8_fast_accum"] = np.int32(1)
    out, marker = _call("commgemm_bulk_overlap", results, operands, attrs, _after)
    out = list(out)
    c = out.pop(0) if gemm else None
    written = [out.pop(0) for _ in range(amax + extra)]
    recv = out.pop(0) if send is not None else None
    return _with_marker((c, recv, *written), marker, _marked)


# --------------------------------------------------------------------------
# Differentiable layers (Megatron's sequence-parallel linear layers)
# --------------------------------------------------------------------------


def _bias_grad(g):
    return jnp.sum(g, axis=0, dtype=jnp.float32).astype(g.dtype)


def _mm(a, b, allow_tf32):
    """A local matmul in fp32 accumulation at the layer's precision: float32
    operands in full fp32 unless allow_tf32 (XLA's default precision runs
    them in TF32 on GPUs), as the layer's commgemm ops do."""
    exact = a.dtype == jnp.float32 and not allow_tf32
    return jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST if exact else None,
                      preferred_element_type=jnp.float32)


# `precision` below: (partial_dtype, gemm_reduction) of the layer's commgemm
# ops, each None for the comm's; a static (hashable) argument like backend.


def _route(comm, backend, what):
    """(gathered, bulk) for a layer's ops on `comm` with the per-call
    `backend`: whether AG+GEMM hands back the gathered input, and the
    backend for the bulk op (the override where it has one, else None: the
    comm's). Where AG+GEMM keeps it (cublasmp) the layers gather it with the
    bulk op, so a comm with neither is refused here, on every rank alike."""
    gathered = comm.supports("gathered", backend)
    bulk = backend if comm.supports("bulk", backend) else None
    if not gathered and not comm.supports("bulk", bulk):
        raise _lib.NotSupportedError(
            _lib.Status.NOT_SUPPORTED,
            f"{what}: this comm's AG+GEMM (on {comm._backend_for(_lib.Op.ALL_GATHER_GEMM, backend)}) cannot hand "
            f"back the gathered input that the weight gradient needs, and its bulk op (on "
            f"{comm._backend_for(_lib.Op.BULK)}) cannot gather it either: give the comm a bulk backend that can "
            "(op_backend={'bulk': 'nccl'}) or run AG+GEMM on p2p or nccl")
    return gathered, bulk


def _tie(x, marker):
    """x, computed only once the call that returned `marker` ran: a layer's backward
    ties its output gradient to its forward's last call (the gradient need not
    depend on the forward's values, e.g. of a linear loss), so that what it
    computes and what the layers before it compute come after that call."""
    return jax.lax.optimization_barrier((x, marker))[0]


def _column_fwd(x_shard, w, bias, comm, m, backend, allow_tf32, precision):
    gathered_by_op, _ = _route(comm, backend, "column_parallel_linear")
    if gathered_by_op:
        (y, gathered), mk = all_gather_matmul(x_shard, w, bias, comm=comm, m=m, backend=backend,
                                              allow_tf32=allow_tf32, return_gathered=True,
                                              gemm_reduction=precision[1], _marked=True)
        return y, (gathered, None, w, bias is not None, mk)
    # AG+GEMM keeps it (cublasmp): X_r is kept and gathered again in the backward
    y, mk = all_gather_matmul(x_shard, w, bias, comm=comm, m=m, backend=backend, allow_tf32=allow_tf32,
                              gemm_reduction=precision[1], _marked=True)
    return y, (None, x_shard, w, bias is not None, mk)


def _column_bwd(comm, m, backend, allow_tf32, precision, res, grad_y):
    gathered, x_shard, w, has_bias, mk = res  # mk: the forward's (or the caller's) last call
    grad_y = _tie(grad_y, mk)
    _, bulk = _route(comm, backend, "column_parallel_linear")
    gr = precision[1]
    # As TransformerEngine's bulk overlap (and commgemm.torch): the dgrad
    # GEMM dY . W alone (beside the all-gather of X where the forward could
    # not keep it), then its reduce-scatter (dX_r) beside the wgrad GEMM
    # dW = dY^T . allgather(X) (NT: a = dY as [k = m, n_loc], b = X as [m, k]).
    if gathered is None:
        (partial, gathered), mk = bulk_matmul_collective(grad_y, w, send=x_shard, comm=comm,
                                                         collective="all_gather", m=m, layout="NN", backend=bulk,
                                                         allow_tf32=allow_tf32, gemm_reduction=gr, _after=mk,
                                                         _marked=True)
    else:
        partial = _mm(grad_y, w, allow_tf32).astype(grad_y.dtype)
    if comm.supports("bulk", bulk):
        dw, dx = bulk_matmul_collective(grad_y, gathered, send=partial, comm=comm, collective="reduce_scatter",
                                        layout="NT", backend=bulk, allow_tf32=allow_tf32, gemm_reduction=gr,
                                        _after=mk)
    else:  # no bulk op (cublasmp): dX by one GEMM+RS (NN), dW a local GEMM
        dx = matmul_reduce_scatter(grad_y, w, comm=comm, layout="NN", backend=backend, allow_tf32=allow_tf32,
                                   partial_dtype=precision[0], gemm_reduction=gr, _after=mk)
        dw = _mm(grad_y.T, gathered, allow_tf32)
    db = _bias_grad(grad_y) if has_bias else None
    return dx, dw.astype(w.dtype), db


def _column_impl(x_shard, w, bias, comm, m, backend, allow_tf32, precision):
    return all_gather_matmul(x_shard, w, bias, comm=comm, m=m, backend=backend, allow_tf32=allow_tf32,
                             gemm_reduction=precision[1])


_column = jax.custom_vjp(_column_impl, nondiff_argnums=(3, 4, 5, 6, 7))
_column.defvjp(_column_fwd, _column_bwd)


# The GELU in AG+GEMM's epilogue (commgemm.h "Epilogues"): the forward's GELU_AUX keeps the
# pre-activation; the backward multiplies dY by gelu'(pre-activation), then runs the column
# layer's backward.

_SQRT_2_OVER_PI = 0.7978845608028654


def _gelu(t):
    return jax.nn.gelu(t, approximate=True)


def _dgelu(grad, pre):
    """grad * gelu'(pre), gelu's tanh form (the epilogues' DGELU), fp32 math, grad's dtype."""
    t = pre.astype(jnp.float32)
    th = jnp.tanh(_SQRT_2_OVER_PI * (t + 0.044715 * t * t * t))
    d = 0.5 * (1 + th) + 0.5 * t * (1 - th * th) * _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * t * t)
    return (grad.astype(jnp.float32) * d).astype(grad.dtype)


def _fused_epilogues(comm, backend, width):
    """Whether the GELU layers can run their epilogues: the GEMM ops take them on `width` output
    columns, AG+GEMM hands back the gathered input, and the bulk op's GEMM takes them too (the
    MLP's BGRAD)."""
    bulk = backend if comm.supports("bulk", backend) else None
    return (comm.supports("epilogue", backend) and comm.epilogue_fits(width, backend)
            and comm.supports("gathered", backend)
            and comm.supports("bulk", bulk) and comm.supports("bulk_epilogue", bulk))


def _column_gelu_impl(x_shard, w, bias, comm, m, backend, allow_tf32, precision):
    return all_gather_matmul(x_shard, w, bias, comm=comm, m=m, backend=backend, allow_tf32=allow_tf32,
                             gemm_reduction=precision[1], epilogue="gelu")


def _column_gelu_fwd(x_shard, w, bias, comm, m, backend, allow_tf32, precision):
    (y, gathered, pre), mk = all_gather_matmul(x_shard, w, bias, comm=comm, m=m, backend=backend,
                                               allow_tf32=allow_tf32, return_gathered=True,
                                               gemm_reduction=precision[1], epilogue="gelu_aux", _marked=True)
    return y, (gathered, None, w, bias is not None, pre, mk)


def _column_gelu_bwd(comm, m, backend, allow_tf32, precision, res, grad_y):
    gathered, x_shard, w, has_bias, pre, mk = res
    return _column_bwd(comm, m, backend, allow_tf32, precision, (gathered, x_shard, w, has_bias, mk),
                       _dgelu(grad_y, pre))


_column_gelu = jax.custom_vjp(_column_gelu_impl, nondiff_argnums=(3, 4, 5, 6, 7))
_column_gelu.defvjp(_column_gelu_fwd, _column_gelu_bwd)


def _linear(x, w, bias, allow_tf32):
    y = _mm(x, w.T, allow_tf32)
    if bias is not None:
        y = y + bias.astype(jnp.float32)
    return y.astype(x.dtype)


def _column_ar_fwd(x, w, bias, comm, backend, allow_tf32, precision):
    return _linear(x, w, bias, allow_tf32), (x, w, bias is not None)


def _column_ar_bwd(comm, backend, allow_tf32, precision, res, grad_y):
    x, w, has_bias = res
    # dX = allreduce(dY . W): GEMM+AR, NN
    dx = matmul_all_reduce(grad_y, w, comm=comm, layout="NN", backend=backend, allow_tf32=allow_tf32,
                           partial_dtype=precision[0], gemm_reduction=precision[1])
    dw = _mm(grad_y.T, x, allow_tf32).astype(w.dtype)
    return dx, dw, (_bias_grad(grad_y) if has_bias else None)


_column_ar = jax.custom_vjp(lambda x, w, b, comm, backend, allow_tf32, precision: _linear(x, w, b, allow_tf32),
                            nondiff_argnums=(3, 4, 5, 6))
_column_ar.defvjp(_column_ar_fwd, _column_ar_bwd)


def _rows_2d(x):
    """[..., features] as [rows, features], and how to give the leading dims back."""
    if x.ndim == 2:
        return x, lambda y: y
    if x.ndim < 2:
        raise ValueError(f"expected [rows, features] or [..., features], found shape {tuple(x.shape)}")
    lead = x.shape[:-1]
    return x.reshape(-1, x.shape[-1]), (lambda y: y.reshape(-1, *lead[1:], y.shape[-1]))


def _precision(partial_dtype, gemm_reduction):
    """The layers' static precision argument, checked now (names, or None for the comm's)."""
    pd, gr = _lib.parse_partial_dtype(partial_dtype), _lib.parse_gemm_reduction(gemm_reduction)
    return (None if pd == _lib.PartialDtype.DEFAULT else _lib.partial_dtype_name(pd),
            None if gr == _lib.GemmReduction.DEFAULT else _lib.gemm_reduction_name(gr))


def column_parallel_linear(x, w, bias=None, *, comm, m=None, sequence_parallel=True, backend=None,
                           allow_tf32=False, partial_dtype=None, gemm_reduction=None, activation=None,
                           fp8_recipe=None, fp8_meta=None):
    """Column-parallel linear: w's rows (the output features) split over the
    ranks; w: [n_loc, k] (this rank's nn.Linear weight shard), bias: [n_loc]
    or None. Differentiable (jax.grad, jax.vjp); x may have leading dims
    ([..., k], flattened into rows).

    sequence_parallel (default): x is this rank's rows [m_r, k] and the
    forward is AG+GEMM, Y[m, n_loc] = allgather(x) . w^T + bias; m is the
    total rows (default m_r * P; pass it for uneven shards). Backward: dX_r =
    reduce_scatter(dY . W) (the dgrad GEMM, then its reduce-scatter beside
    the wgrad GEMM), dW = dY^T . allgather(X), db = sum_rows dY.
    Without: x is the whole [m, k] on every rank, the forward is local and
    the backward's dX = allreduce(dY . W) (GEMM+AR, NN).

    allow_tf32: float32 GEMMs, the commgemm ops' and the layer's local ones
    alike, may run in TF32 on GPUs (default: full fp32, as the ops; XLA's
    default precision would take TF32 for the local ones).
    partial_dtype ("fp32", "output"): the backward's GEMM+AR partials
    (without sequence parallelism), the same on every rank; gemm_reduction
    ("any", "fp32"): the commgemm GEMMs'; None: the comm's (docs/PYTHON.md).
    activation="gelu": gelu(X . W^T + b), the tanh form (jax.nn.gelu(approximate=True)); with
    sequence parallelism on a backend with epilogues, in AG+GEMM's GELU_AUX epilogue (the
    backward multiplies dY by gelu'(pre-activation) before the dgrad); elsewhere after the op.
    fp8_recipe: Float8CurrentScaling(), Float8BlockScaling() or DelayedScaling(): the forward,
    dgrad and wgrad GEMMs in fp8 (docs/PYTHON.md "FP8"); no activation.
    DelayedScaling takes its state as fp8_meta (fp8_meta_init(recipe) to start) and the layer
    returns (Y, the state after the forward); differentiated, fp8_meta's cotangent is the
    state after the backward too: the next step's fp8_meta."""
    if fp8_recipe is not None:
        _check_fp8_layer(fp8_recipe, fp8_meta, "column_parallel_linear", activation)
        x2, back = _rows_2d(x)
        m = _total_rows(comm, x2.shape[0], m) if sequence_parallel else 0
        y, meta = _col8(x2, w, bias, fp8_meta, comm, int(m), backend, fp8_recipe)
        return (back(y), meta) if meta is not None else back(y)
    if activation not in (None, "gelu"):
        raise ValueError(f"column_parallel_linear: activation={activation!r}: expected None or 'gelu'")
    x2, back = _rows_2d(x)
    allow_tf32 = bool(allow_tf32)
    precision = _precision(partial_dtype, gemm_reduction)
    if not sequence_parallel:
        y = _column_ar(x2, w, bias, comm, backend, allow_tf32, precision)
        return back(_gelu(y) if activation else y)
    if m is None:
        m = _total_rows(comm, x2.shape[0], None)
    if activation and _fused_epilogues(comm, backend, w.shape[0]):
        return back(_column_gelu(x2, w, bias, comm, int(m), backend, allow_tf32, precision))
    y = _column(x2, w, bias, comm, int(m), backend, allow_tf32, precision)
    return back(_gelu(y) if activation else y)


def _row_fwd(x, w, bias, comm, backend, allow_tf32, precision):
    y, mk = matmul_reduce_scatter(x, w, bias, comm=comm, backend=backend, allow_tf32=allow_tf32,
                                  partial_dtype=precision[0], gemm_reduction=precision[1], _marked=True)
    return y, (x, w, bias is not None, mk)


def _row_bwd(comm, backend, allow_tf32, precision, res, grad_y):
    x, w, has_bias, mk = res
    grad_y = _tie(grad_y, mk)
    gathered_by_op, bulk = _route(comm, backend, "row_parallel_linear")
    if gathered_by_op:
        # dX = allgather(dY_r) . W (AG+GEMM, NN), which also gives the gathered dY
        dx, gathered = all_gather_matmul(grad_y, w, comm=comm, m=x.shape[0], layout="NN", backend=backend,
                                         allow_tf32=allow_tf32, return_gathered=True, gemm_reduction=precision[1],
                                         _after=mk)
    else:  # AG+GEMM keeps it (cublasmp): dY gathered alone, dX a local GEMM
        _, gathered = bulk_matmul_collective(send=grad_y, comm=comm, collective="all_gather", m=x.shape[0],
                                             backend=bulk, _after=mk)
        dx = _mm(gathered, w, allow_tf32).astype(x.dtype)
    dw = _mm(gathered.T, x, allow_tf32).astype(w.dtype)
    db = _bias_grad(gathered) if has_bias else None
    return dx, dw, db


def _row_impl(x, w, bias, comm, backend, allow_tf32, precision):
    return matmul_reduce_scatter(x, w, bias, comm=comm, backend=backend, allow_tf32=allow_tf32,
                                 partial_dtype=precision[0], gemm_reduction=precision[1])


_row = jax.custom_vjp(_row_impl, nondiff_argnums=(3, 4, 5, 6))
_row.defvjp(_row_fwd, _row_bwd)


def _row_ar_impl(x, w, bias, comm, backend, allow_tf32, precision):
    return matmul_all_reduce(x, w, bias, comm=comm, backend=backend, allow_tf32=allow_tf32,
                             partial_dtype=precision[0], gemm_reduction=precision[1])


def _row_ar_fwd(x, w, bias, comm, backend, allow_tf32, precision):
    y, mk = matmul_all_reduce(x, w, bias, comm=comm, backend=backend, allow_tf32=allow_tf32,
                              partial_dtype=precision[0], gemm_reduction=precision[1], _marked=True)
    return y, (x, w, bias is not None, mk)


def _row_ar_bwd(comm, backend, allow_tf32, precision, res, grad_y):
    x, w, has_bias, mk = res
    grad_y = _tie(grad_y, mk)  # what the layers before compute from dX comes after the forward's GEMM+AR
    # dY is the same on every rank (the output is replicated): all local
    dx = _mm(grad_y, w, allow_tf32).astype(x.dtype)
    dw = _mm(grad_y.T, x, allow_tf32).astype(w.dtype)
    return dx, dw, (_bias_grad(grad_y) if has_bias else None)


_row_ar = jax.custom_vjp(_row_ar_impl, nondiff_argnums=(3, 4, 5, 6))
_row_ar.defvjp(_row_ar_fwd, _row_ar_bwd)


def row_parallel_linear(x, w, bias=None, *, comm, sequence_parallel=True, backend=None, allow_tf32=False,
                        partial_dtype=None, gemm_reduction=None, fp8_recipe=None, fp8_meta=None):
    """Row-parallel linear: w's columns (the input features) split over the
    ranks; x: [m, k_loc] (e.g. a column-parallel layer's output; leading
    dims allowed), w: [n, k_loc], bias: [n] or None, the same on every rank
    and added once. Differentiable.

    sequence_parallel (default): GEMM+RS, the output is this rank's rows
    [m_r, n]. Backward: dX = allgather(dY_r) . W (AG+GEMM, NN), dW =
    allgather(dY)^T . X, db = the sum of every rank's rows of dY.
    Without: GEMM+AR, the output is all rows on every rank (compute the same
    loss on every rank); the backward is local.

    allow_tf32: as column_parallel_linear's. partial_dtype ("fp32",
    "output"): the forward's GEMM+RS/AR partials, the same on every rank;
    gemm_reduction ("any", "fp32"): the commgemm GEMMs'; None: the comm's.
    fp8_recipe, fp8_meta: as column_parallel_linear's."""
    x2, back = _rows_2d(x)
    if fp8_recipe is not None:
        _check_fp8_layer(fp8_recipe, fp8_meta, "row_parallel_linear")
        y, meta = _row8(x2, w, bias, fp8_meta, comm, backend, fp8_recipe, bool(sequence_parallel))
        return (back(y), meta) if meta is not None else back(y)
    allow_tf32 = bool(allow_tf32)
    precision = _precision(partial_dtype, gemm_reduction)
    if not sequence_parallel:
        return back(_row_ar(x2, w, bias, comm, backend, allow_tf32, precision))
    return back(_row(x2, w, bias, comm, backend, allow_tf32, precision))


# --------------------------------------------------------------------------
# The layers in fp8 (fp8_recipe=): every GEMM of the forward
# and the backward in fp8, layout TN, as commgemm.torch's layers:
#   forward Y = X . W^T: TN(X, W); dgrad dX = dY . W: TN(dY, W^T); wgrad
#   dW = dY^T . X: TN(dY^T, X^T), with transposed copies made once per step.
# --------------------------------------------------------------------------

_FORMATS = {"e4m3": (jnp.float8_e4m3fn, jnp.float8_e4m3fn), "hybrid": (jnp.float8_e4m3fn, jnp.float8_e5m2)}


class Fp8Meta(NamedTuple):
    """A layer's delayed-scaling state (a pytree): amax_history [len, 3]
    float32 (columns: input, weight, grad_output; row 0 the latest) and
    scale [3] float32, the dequantize scales the next casts use."""
    amax_history: jax.Array
    scale: jax.Array


def fp8_meta_init(recipe):
    """The first Fp8Meta of a layer under a DelayedScaling recipe: a history
    of zeros and scales of 1."""
    if not isinstance(recipe, DelayedScaling):
        raise ValueError(f"fp8_meta_init: recipe = {recipe!r}: expected commgemm.jax.DelayedScaling()")
    return Fp8Meta(jnp.zeros((recipe.amax_history_len, 3), jnp.float32), jnp.ones((3,), jnp.float32))


_INPUT, _WEIGHT, _GRAD = 0, 1, 2


def _meta_record(recipe, meta, role, amax_):
    """meta with amax_ recorded as the role's latest and its next scale."""
    col = jnp.roll(meta.amax_history[:, role], 1).at[0].set(amax_)
    a = jnp.max(col) if recipe.amax_compute_algo == "max" else col[0]
    dtype = _FORMATS[recipe.fp8_format][1 if role == _GRAD else 0]
    return Fp8Meta(meta.amax_history.at[:, role].set(col),
                   meta.scale.at[role].set(compute_scale(a, dtype, recipe.margin)))


def _cast8(t, recipe, meta, role, w_like):
    """t cast for `role` (_INPUT, _WEIGHT, _GRAD) under the recipe: (codes,
    scale, meta after the cast); delayed scaling casts with meta's scale."""
    if isinstance(recipe, DelayedScaling):
        c, s = _fq(t, recipe, role == _GRAD, w_like, meta.scale[role])
        return c, s, _meta_record(recipe, meta, role, amax(t))
    return (*_fq(t, recipe, role == _GRAD, w_like), meta)


def _fq(t, recipe, grad, w_like, scale=None):
    """t quantized under the recipe: (codes, scale); grad: a gradient (the
    second format); w_like: 128 x 128 blocks (block scaling); scale: the
    per-tensor scale to use (delayed scaling), else from t's amax."""
    dtype = _FORMATS[recipe.fp8_format][1 if grad else 0]
    if scale is not None:
        scale = jnp.asarray(scale, jnp.float32).reshape(1)
        return cast_to_fp8(t.astype(jnp.float32) / scale, dtype), scale
    if isinstance(recipe, Float8BlockScaling):
        return quantize(t, dtype, Scaling.BLOCK_128X128 if w_like else Scaling.BLOCK_1X128)
    return quantize(t, dtype, Scaling.TENSOR, recipe.margin)


def _ft(codes, scale):
    """The exact transposed copy of a per-tensor or 128 x 128 operand."""
    return codes.T, (scale if scale.ndim < 2 else scale.T)


def _gathered_values(codes, scale, comm):
    """The values of AG+GEMM's gathered fp8 rows: per tensor, rank s's rows
    times its scale (scale[s]); per block, codes times their 1 x 128 scales."""
    if scale.ndim == 2:
        return dequantize(codes, scale)
    m = codes.shape[0]
    rows = [shard_rows(m, s, comm.size) for s in range(comm.size)]
    per_row = jnp.repeat(scale, np.array(rows), total_repeat_length=m)
    return codes.astype(jnp.float32) * per_row[:, None]


def _fp8_wgrad(comm, backend, g_t, x_t_values, recipe, w_dtype, after, scales=(None, None)):
    """dW = TN(dY^T, X^T): dY^T quantized X-like (as a gradient), X^T W-like,
    with `scales` (delayed scaling: dY's and X's, the max of the ranks' for
    rows gathered from every rank) or their current ones; the bulk op's
    local GEMM. Returns dW and the call's marker."""
    _, bulk = _route(comm, backend, "fp8 wgrad")
    gc, gs = _fq(g_t, recipe, True, False, scales[0])
    xc, xs = _fq(x_t_values, recipe, False, True, scales[1])
    (dw, _), mk = bulk_matmul_collective(gc, xc, comm=comm, backend=bulk, a_scale=gs, b_scale=xs,
                                         out_dtype=jnp.float32, _after=after, _marked=True)
    return dw.astype(w_dtype), mk


def _local8(xc, xs, wc, ws, bias, comm, backend, out_dtype, after):
    """A local fp8 GEMM TN(X, W) (+ bias): the bulk op's GEMM alone. Returns Y and its marker."""
    _, bulk = _route(comm, backend, "fp8 local GEMM")
    (y, _), mk = bulk_matmul_collective(xc, wc, bias, comm=comm, backend=bulk, a_scale=xs, b_scale=ws,
                                        out_dtype=out_dtype, _after=after, _marked=True)
    return y, mk


def _delayed_max(recipe, scales):
    """Delayed scaling's one scale for rows gathered from every rank (the
    largest of theirs: no code saturates); None (current scales) otherwise."""
    return jnp.max(scales) if isinstance(recipe, DelayedScaling) else None


def _own(recipe, scale):
    return scale if isinstance(recipe, DelayedScaling) else None


def _col8_fwd(x, w, bias, meta, comm, m, backend, recipe):
    """m > 0: sequence-parallel (AG+GEMM; the backward's dX by GEMM+RS); m = 0:
    x whole on every rank (a local GEMM; dX by GEMM+AR)."""
    xc, xs, meta = _cast8(x, recipe, meta, _INPUT, False)
    wc, ws, meta = _cast8(w, recipe, meta, _WEIGHT, True)
    if m:
        (y, xg, xgs), mk = all_gather_matmul(xc, wc, bias, comm=comm, m=m, backend=backend, out_dtype=x.dtype,
                                             return_gathered=True, x_scale=xs, w_scale=ws, _marked=True)
        xt = _gathered_values(xg, xgs, comm).T  # quantized again for dW (each rank's rows had their own scale)
        xts = _delayed_max(recipe, xgs)
    else:
        y, mk = _local8(xc, xs, wc, ws, bias, comm, backend, x.dtype, None)
        xt, xts = x.T, _own(recipe, xs)
    return (y, meta), (xt, xts, wc, ws, bias is not None, mk, meta, jnp.zeros((0,), x.dtype),
                       jnp.zeros((0,), w.dtype))


def _col8_bwd(comm, m, backend, recipe, res, cotangents):
    xt, xts, wc, ws, has_bias, mk, meta, x0, w0 = res
    grad_y = _tie(cotangents[0], mk)
    gc, gs, meta = _cast8(grad_y, recipe, meta, _GRAD, False)
    wtc, wts = _ft(wc, ws)  # W^T [k, n_loc]
    reduce = matmul_reduce_scatter if m else matmul_all_reduce
    dx, mk = reduce(gc, wtc, comm=comm, backend=backend, x_scale=gs, w_scale=wts, out_dtype=x0.dtype, _after=mk,
                    _marked=True)
    dw, _ = _fp8_wgrad(comm, backend, grad_y.T, xt, recipe, w0.dtype, mk, (_own(recipe, gs), xts))
    return dx, dw, (_bias_grad(grad_y) if has_bias else None), meta


_col8 = jax.custom_vjp(lambda x, w, b, meta, comm, m, backend, recipe:
                       _col8_fwd(x, w, b, meta, comm, m, backend, recipe)[0], nondiff_argnums=(4, 5, 6, 7))
_col8.defvjp(_col8_fwd, _col8_bwd)


def _row8_fwd(x, w, bias, meta, comm, backend, recipe, sp):
    """sp: GEMM+RS (the backward's dX by AG+GEMM); else GEMM+AR (a local backward)."""
    xc, xs, meta = _cast8(x, recipe, meta, _INPUT, False)
    wc, ws, meta = _cast8(w, recipe, meta, _WEIGHT, True)
    reduce = matmul_reduce_scatter if sp else matmul_all_reduce
    y, mk = reduce(xc, wc, bias, comm=comm, backend=backend, out_dtype=x.dtype, x_scale=xs, w_scale=ws,
                   _marked=True)
    return (y, meta), (x, xs, wc, ws, bias is not None, mk, meta, jnp.zeros((0,), w.dtype))


def _row8_bwd(comm, backend, recipe, sp, res, cotangents):
    x, xs, wc, ws, has_bias, mk, meta, w0 = res
    grad_y = _tie(cotangents[0], mk)
    gc, gs, meta = _cast8(grad_y, recipe, meta, _GRAD, False)
    wtc, wts = _ft(wc, ws)  # W^T [k_loc, n]
    if not sp:  # dY the same on every rank: local GEMMs
        dx, mk = _local8(gc, gs, wtc, wts, None, comm, backend, x.dtype, mk)
        dw, _ = _fp8_wgrad(comm, backend, grad_y.T, x.T, recipe, w0.dtype, mk, (_own(recipe, gs), _own(recipe, xs)))
        return dx, dw, (_bias_grad(grad_y) if has_bias else None), meta
    (dx, gg, ggs), mk = all_gather_matmul(gc, wtc, comm=comm, m=x.shape[0], backend=backend, out_dtype=x.dtype,
                                          return_gathered=True, x_scale=gs, w_scale=wts, _after=mk, _marked=True)
    # dY^T from the gathered fp8 rows (quantized again), X^T from this rank's X
    dw, mk = _fp8_wgrad(comm, backend, _gathered_values(gg, ggs, comm).T, x.T, recipe, w0.dtype, mk,
                        (_delayed_max(recipe, ggs), _own(recipe, xs)))
    db = None
    if has_bias:  # every rank's rows of dY summed, in high precision: GEMM+AR of [1, 1] ones by db_r [n, 1]
        db_r = jnp.sum(grad_y, axis=0, dtype=jnp.float32).reshape(-1, 1)
        db = matmul_all_reduce(jnp.ones((1, 1), jnp.float32), db_r, comm=comm, backend=backend, _after=mk)
        db = db.reshape(-1).astype(grad_y.dtype)
    return dx, dw, db, meta


_row8 = jax.custom_vjp(lambda x, w, b, meta, comm, backend, recipe, sp:
                       _row8_fwd(x, w, b, meta, comm, backend, recipe, sp)[0], nondiff_argnums=(4, 5, 6, 7))
_row8.defvjp(_row8_fwd, _row8_bwd)


def _check_fp8_layer(recipe, meta, what, activation=None):
    if not isinstance(recipe, (Float8CurrentScaling, Float8BlockScaling, DelayedScaling)):
        raise ValueError(f"{what}: fp8_recipe={recipe!r}: expected None, commgemm.jax.Float8CurrentScaling(), "
                         "Float8BlockScaling() or DelayedScaling()")
    if isinstance(recipe, DelayedScaling):
        want = (recipe.amax_history_len, 3)
        if (not isinstance(meta, Fp8Meta) or tuple(meta.amax_history.shape) != want
                or tuple(meta.scale.shape) != (3,)):
            raise ValueError(f"{what}: fp8_recipe=DelayedScaling(...) with fp8_meta={type(meta).__name__}: expected "
                             f"its state, a commgemm.jax.Fp8Meta with amax_history {want} and scale (3,) (start "
                             "with fp8_meta_init(recipe); pass back what the layer or its gradient returned)")
    elif meta is not None:
        raise ValueError(f"{what}: fp8_meta given with fp8_recipe={recipe!r}: only DelayedScaling keeps state; "
                         "drop fp8_meta")
    if activation is not None:
        raise _lib.NotSupportedError(_lib.Status.NOT_SUPPORTED,
                                     f"{what}: fp8_recipe with activation={activation!r}: the fp8 layers have no "
                                     "fused activation: apply it after the layer")


# The MLP block with its GELU and bias gradients in the ops' epilogues (sequence parallel).


def _mlp_impl(x, w1, b1, w2, b2, comm, m, backend, allow_tf32, precision):
    h = _column_gelu_impl(x, w1, b1, comm, m, backend, allow_tf32, precision)
    return _row_impl(h, w2, b2, comm, backend, allow_tf32, precision)


def _mlp_fwd(x, w1, b1, w2, b2, comm, m, backend, allow_tf32, precision):
    h, (gathered, _, _, has_b1, pre, mk) = _column_gelu_fwd(x, w1, b1, comm, m, backend, allow_tf32, precision)
    y, mk = matmul_reduce_scatter(h, w2, b2, comm=comm, backend=backend, allow_tf32=allow_tf32,
                                  partial_dtype=precision[0], gemm_reduction=precision[1], _after=mk, _marked=True)
    return y, (gathered, w1, pre, h, w2, has_b1, b2 is not None, mk)


def _mlp_bwd(comm, m, backend, allow_tf32, precision, res, grad_y):
    gathered, w1, pre, h, w2, has_b1, has_b2, mk = res
    grad_y = _tie(grad_y, mk)
    gr = precision[1]
    # fc2's dgrad through the GELU: dPre = (allgather(dY) . W2) * gelu'(pre) (AG+GEMM, NN) with
    # fc1's bias gradient in the same epilogue; it hands back the gathered dY for fc2's wgrad
    out, mk = all_gather_matmul(grad_y, w2, comm=comm, m=m, layout="NN", backend=backend, allow_tf32=allow_tf32,
                                return_gathered=True, gemm_reduction=gr,
                                epilogue="dgelu_bgrad" if has_b1 else "dgelu", aux=pre, _after=mk, _marked=True)
    dpre, dy_all, db1 = out if has_b1 else (*out, None)
    # fc2's wgrad dW2 = dY^T . H (NT) with its bias gradient sum_rows dY in the BGRAD epilogue
    bulk = backend if comm.supports("bulk", backend) else None
    (dw2, _, db2), mk = bulk_matmul_collective(dy_all, h, comm=comm, layout="NT", backend=bulk,
                                               allow_tf32=allow_tf32, gemm_reduction=gr, epilogue="bgrad", _after=mk,
                                               _marked=True)
    dx, dw1, _ = _column_bwd(comm, m, backend, allow_tf32, precision, (gathered, None, w1, False, mk), dpre)
    return dx, dw1, db1, dw2.astype(w2.dtype), (db2 if has_b2 else None)


_mlp = jax.custom_vjp(_mlp_impl, nondiff_argnums=(5, 6, 7, 8, 9))
_mlp.defvjp(_mlp_fwd, _mlp_bwd)


def parallel_mlp(x, w1, b1, w2, b2, *, comm, m=None, sequence_parallel=True, backend=None, allow_tf32=False,
                 partial_dtype=None, gemm_reduction=None):
    """Megatron's MLP block, row_parallel_linear(gelu(column_parallel_linear(x, w1, b1)), w2, b2):
    w1 [ffn_loc, hidden] and b1 [ffn_loc] this rank's column shard, w2 [hidden, ffn_loc] its row
    shard, b2 [hidden] (replicated) or None; differentiable. With sequence parallelism on a
    backend with epilogues (Comm.supports("epilogue"), "bulk_epilogue" and "gathered"), fc1's
    AG+GEMM applies the GELU (GELU_AUX), the backward's fc2 dgrad is one AG+GEMM whose
    DGELU_BGRAD epilogue multiplies by gelu' and writes fc1's bias gradient, and fc2's wgrad one
    GEMM whose BGRAD epilogue writes fc2's (docs/EPILOGUES.md); elsewhere the two layers run as
    column_parallel_linear(activation="gelu") and row_parallel_linear. m, options: the layers'."""
    if not sequence_parallel or not _fused_epilogues(comm, backend, w1.shape[0]):
        h = column_parallel_linear(x, w1, b1, comm=comm, m=m, sequence_parallel=sequence_parallel, backend=backend,
                                   allow_tf32=allow_tf32, partial_dtype=partial_dtype, gemm_reduction=gemm_reduction,
                                   activation="gelu")
        return row_parallel_linear(h, w2, b2, comm=comm, sequence_parallel=sequence_parallel, backend=backend,
                                   allow_tf32=allow_tf32, partial_dtype=partial_dtype, gemm_reduction=gemm_reduction)
    x2, back = _rows_2d(x)
    if m is None:
        m = _total_rows(comm, x2.shape[0], None, "parallel_mlp")
    precision = _precision(partial_dtype, gemm_reduction)
    return back(_mlp(x2, w1, b1, w2, b2, comm, int(m), backend, bool(allow_tf32), precision))


# --------------------------------------------------------------------------
# FP8 quantization in jax.numpy (commgemm.h "FP8"; commgemm.fp8 for numpy)
# --------------------------------------------------------------------------


def amax(x):
    """max |x| as a float32 scalar (NaN propagates; 0 for an empty array)."""
    return jnp.max(jnp.abs(x.astype(jnp.float32)), initial=0.0)


def compute_scale(amax_, dtype, margin=0):
    """The dequantize scale for an amax: amax / fp8_max * 2^margin; 1 where
    amax is 0 or not finite."""
    fmax = _fp8.FP8_MAX[jnp.dtype(dtype).name]
    amax_ = jnp.asarray(amax_, jnp.float32)
    s = amax_ * np.float32(2.0 ** margin / fmax)  # one fp32 product, as commgemm.fp8's
    return jnp.where(jnp.isfinite(amax_) & (amax_ > 0), s, 1.0).astype(jnp.float32)


def cast_to_fp8(x, dtype, multiplier=1.0):
    """sat(rne(x * multiplier)) in fp8 `dtype` (saturating, NaN kept)."""
    fmax = _fp8.FP8_MAX[jnp.dtype(dtype).name]
    return jnp.clip(x.astype(jnp.float32) * multiplier, -fmax, fmax).astype(dtype)


def _expand(scale, scaling, shape):
    rows, cols = shape
    if scaling == Scaling.TENSOR:
        return scale.reshape(1, 1)
    rb = 1 if scaling == Scaling.BLOCK_1X128 else _fp8.BLOCK
    return jnp.repeat(jnp.repeat(scale, rb, axis=0)[:rows], _fp8.BLOCK, axis=1)[:, :cols]


def quantize(x, dtype, scaling=Scaling.TENSOR, margin=0):
    """(codes, scale) of a 2-D x in fp8 `dtype`: per tensor (scale (1,)) or
    per 1x128 / 128x128 block (commgemm.fp8.scale_shape), from the amaxes;
    codes * scale ~ x."""
    scaling = Scaling(scaling)
    x = x.astype(jnp.float32)
    if scaling == Scaling.TENSOR:
        a = amax(x).reshape(1)
    else:
        rows, cols = x.shape
        rb = 1 if scaling == Scaling.BLOCK_1X128 else _fp8.BLOCK
        R, C = -(-rows // rb), -(-cols // _fp8.BLOCK)
        pad = jnp.zeros((R * rb, C * _fp8.BLOCK), jnp.float32).at[:rows, :cols].set(jnp.abs(x))
        a = pad.reshape(R, rb, C, _fp8.BLOCK).max(axis=(1, 3))
    s = compute_scale(a, dtype, margin)
    return cast_to_fp8(x / _expand(s, scaling, x.shape), dtype), s


def dequantize(codes, scale, dtype=jnp.float32):
    """codes * scale per element (the recipe read from the scale's shape,
    X-like for 2-D scales of one per row; W-like otherwise)."""
    rows, cols = codes.shape
    if scale.size == 1 and scale.ndim <= 1:
        scaling = Scaling.TENSOR
    elif scale.shape == _fp8.scale_shape(Scaling.BLOCK_1X128, rows, cols):
        scaling = Scaling.BLOCK_1X128
    else:
        scaling = Scaling.BLOCK_128X128
    return (codes.astype(jnp.float32) * _expand(scale, scaling, codes.shape)).astype(dtype)
