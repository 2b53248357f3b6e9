"""FP8 for the Python ops: formats, scale shapes and numpy quantization.

commgemm.h ("FP8") fixes the semantics; this module mirrors them:

- an fp8 operand (X or W of a GEMM op) is its codes plus fp32 scales, and
  its value is code * scale (the scale multiplies on dequantize: cuBLASLt's
  A_SCALE / B_SCALE, TransformerEngine's scale_inv);
- the scales' shape says the recipe: a single value (shape () or (1,)) is
  per-tensor scaling (CGM_SCALING_TENSOR); a 2-D array is block scaling,
  [rows, ceil(k / 128)] for X-like operands (CGM_SCALING_BLOCK_1X128) and
  [ceil(rows / 128), ceil(k / 128)] for W-like ones (BLOCK_128X128);
- an fp8 output Y is written sat(rne(r * y_scale)): y_scale multiplies on
  quantize (cuBLASLt's D_SCALE), so Y dequantizes with 1 / y_scale;
- layout TN only (X [m, k], W [n, k], both K-major: Hopper's FP8 tensor
  cores read nothing else); pass transposed copies for the other products.

numpy arrays of fp8 are ml_dtypes.float8_e4m3fn / float8_e5m2 (what
jax.numpy's float8 types are). torch and jax.numpy versions of the helpers
are in commgemm.torch (quantize, dequantize, ...) and commgemm.jax.
"""

import dataclasses

from ._lib import DType, InvalidArgumentError, Scaling, Status

__all__ = ["DelayedScaling", "Float8CurrentScaling", "Float8BlockScaling", "FP8_MAX", "BLOCK", "is_fp8_name", "scale_shape", "scaling_of", "compute_scale",
           "quantize", "dequantize", "cast_to_fp8"]

#: the largest finite value of each fp8 format (e4m3fn: no infinities)
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
#: the block edge of the block recipes
BLOCK = 128

_CGM = {"float8_e4m3fn": DType.FP8_E4M3, "float8_e5m2": DType.FP8_E5M2}


def is_fp8_name(name):
    return str(name) in _CGM


def cgm_dtype(name):
    """The cgm_dtype of an fp8 dtype name ("float8_e4m3fn", "float8_e5m2")."""
    return _CGM[str(name)]


def _invalid(message):
    return InvalidArgumentError(Status.INVALID_ARGUMENT, message)


def scale_shape(scaling, rows, cols):
    """The shape of the scales of a [rows, cols] operand (cols = k) under a
    Scaling: (1,) for TENSOR, [rows, ceil(cols/128)] for BLOCK_1X128,
    [ceil(rows/128), ceil(cols/128)] for BLOCK_128X128."""
    kb = -(-int(cols) // BLOCK)
    if scaling == Scaling.TENSOR:
        return (1,)
    if scaling == Scaling.BLOCK_1X128:
        return (int(rows), kb)
    if scaling == Scaling.BLOCK_128X128:
        return (-(-int(rows) // BLOCK), kb)
    raise _invalid(f"scaling {scaling!r}: expected TENSOR, BLOCK_1X128 or BLOCK_128X128")


def scaling_of(name, scale_shape_, rows, cols, w_like):
    """The Scaling that an operand's scale array of shape `scale_shape_`
    means, checked against the operand's [rows, cols]: () or (1,) is
    TENSOR; 2-D is BLOCK_1X128 (X-like) or BLOCK_128X128 (W-like, w_like).
    Raises InvalidArgumentError naming what was expected."""
    shape = tuple(int(d) for d in scale_shape_)
    if shape in ((), (1,)):
        return Scaling.TENSOR
    block = Scaling.BLOCK_128X128 if w_like else Scaling.BLOCK_1X128
    want = scale_shape(block, rows, cols)
    if shape != want:
        raise _invalid(
            f"{name}_scale has shape {shape}: expected () or (1,) (one scale for the whole tensor) or {want} "
            f"({'one per 128 x 128 block' if w_like else 'one per row per 128 columns'} of the {rows} x {cols} "
            f"{'W-like operand, BLOCK_128X128' if w_like else 'X-like operand, BLOCK_1X128'}; commgemm.h 'FP8')")
    return block


def _np():
    import numpy
    return numpy


def _fp8_np_dtype(dtype):
    import ml_dtypes
    np = _np()
    dt = np.dtype(getattr(ml_dtypes, dtype) if isinstance(dtype, str) else dtype)
    if dt.name not in FP8_MAX:
        raise _invalid(f"dtype {dt}: expected float8_e4m3fn or float8_e5m2")
    return dt


def _blocks(a, rb, cb):
    """a [r, c] padded with zeros to whole rb x cb blocks, as [R, rb, C, cb]."""
    np = _np()
    r, c = a.shape
    R, C = -(-r // rb), -(-c // cb)
    pad = np.zeros((R * rb, C * cb), dtype=a.dtype)
    pad[:r, :c] = a
    return pad.reshape(R, rb, C, cb)


def block_amax(a, scaling):
    """max |a| per scale of `scaling` (TENSOR: shape (1,); block recipes:
    the scale_shape); NaN propagates."""
    np = _np()
    a = np.abs(np.asarray(a, dtype=np.float32))
    if scaling == Scaling.TENSOR:
        return np.array([a.max() if a.size else 0.0], dtype=np.float32)
    rb = 1 if scaling == Scaling.BLOCK_1X128 else BLOCK
    if a.size == 0:
        return np.zeros(scale_shape(scaling, *a.shape), np.float32)
    return _blocks(a, rb, BLOCK).max(axis=(1, 3))


def compute_scale(amax, dtype, margin=0):
    """The dequantize scale (what commgemm's scale fields hold) for an amax:
    amax * fp32(2^margin / FP8_MAX), so the largest magnitude maps to the format's
    largest finite value; 1 where amax is 0 or not finite (nothing to
    scale). Works on numpy arrays and Python floats."""
    np = _np()
    fmax = FP8_MAX[_fp8_np_dtype(dtype).name]
    amax = np.asarray(amax, dtype=np.float32)
    s = amax * np.float32(2.0 ** margin / fmax)  # one fp32 product: the torch and jnp helpers' too
    return np.where(np.isfinite(amax) & (amax > 0), s, np.float32(1)).astype(np.float32)


def cast_to_fp8(a, dtype, multiplier=1.0):
    """sat(rne(a * multiplier)) as an ml_dtypes fp8 array: the rounding of
    commgemm.h (nearest even; magnitudes beyond the largest finite value,
    infinities included, saturate with their sign; NaN stays NaN). This is
    how the library writes an fp8 Y with y.scale = multiplier."""
    np = _np()
    dt = _fp8_np_dtype(dtype)
    v = np.asarray(a, dtype=np.float32) * np.float32(multiplier)
    fmax = np.float32(FP8_MAX[dt.name])
    return np.clip(v, -fmax, fmax).astype(dt)  # clip keeps NaN; ml_dtypes rounds to nearest even


def quantize(a, dtype, scaling=Scaling.TENSOR, margin=0):
    """(codes, scale) of a float array `a` [rows, cols] in fp8 `dtype` with
    the scales of `scaling` from its amax (per tensor or per block): codes =
    sat(rne(a / s)), so a ~ codes * s (commgemm's scale)."""
    np = _np()
    a = np.asarray(a, dtype=np.float32)
    scaling = Scaling(scaling)
    s = compute_scale(block_amax(a, scaling), dtype, margin)
    return cast_to_fp8(a / expand_scale(s, scaling, a.shape), dtype), s


def expand_scale(scale, scaling, shape):
    """The per-element scale of a [rows, cols] operand from its scales."""
    np = _np()
    scale = np.asarray(scale, dtype=np.float32)
    rows, cols = shape
    if Scaling(scaling) == Scaling.TENSOR:
        return np.full(shape, scale.reshape(-1)[0] if scale.size else 1.0, np.float32)
    rb = 1 if Scaling(scaling) == Scaling.BLOCK_1X128 else BLOCK
    return np.repeat(np.repeat(scale, rb, axis=0)[:rows], BLOCK, axis=1)[:, :cols]


def dequantize(codes, scale, scaling=None, w_like=False):
    """The values of an fp8 operand as float64: codes * scale per element
    (scaling: None to infer it from the scale's shape, as the ops do)."""
    np = _np()
    codes = np.asarray(codes)
    if scaling is None:
        scaling = scaling_of("x", np.shape(scale), codes.shape[0], codes.shape[1], w_like)
    return codes.astype(np.float64) * expand_scale(scale, scaling, codes.shape).astype(np.float64)


def check_format(fmt):
    """A recipe's fp8_format: "hybrid" (e4m3 forward, e5m2 gradients) or "e4m3"."""
    if fmt not in ("hybrid", "e4m3"):
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"fp8_format {fmt!r}: expected 'hybrid' (e4m3 forward, e5m2 gradients) or 'e4m3'")


@dataclasses.dataclass(frozen=True)
class Float8CurrentScaling:
    """Per-tensor scaling from each tensor's own amax, taken as it is cast
    (TransformerEngine's Float8CurrentScaling), a recipe of commgemm.torch's
    and commgemm.jax's layers (both export it). fp8_format: "hybrid" (e4m3
    forward, e5m2 gradients; default) or "e4m3"; margin: scale = amax /
    fp8_max * 2^margin."""
    fp8_format: str = "hybrid"
    margin: int = 0

    def __post_init__(self):
        check_format(self.fp8_format)


@dataclasses.dataclass(frozen=True)
class Float8BlockScaling:
    """Block scaling (DeepSeek-V3's, TransformerEngine's Float8BlockScaling):
    activations and gradients one scale per 1 x 128 along k, weights one per
    128 x 128 block, each from its block's amax; a recipe of commgemm.torch's
    and commgemm.jax's layers. fp8_format: "e4m3" (default) or "hybrid"."""
    fp8_format: str = "e4m3"

    def __post_init__(self):
        check_format(self.fp8_format)


@dataclasses.dataclass(frozen=True)
class DelayedScaling:
    """Per-tensor scaling from an amax history (TransformerEngine's
    DelayedScaling), the recipe of commgemm.torch's and commgemm.jax's
    layers (both export it): each cast uses the scale from the last
    amax_history_len amaxes of that tensor (amax_compute_algo "max" over
    the window or "most_recent"), then records its own amax; a history of
    zeros (the first step) gives scale 1. The history lives in the torch
    layer (layer.fp8_meta) or in the JAX layers' explicit state
    (commgemm.jax.Fp8Meta). fp8_format: "hybrid" (e4m3 forward, e5m2
    gradients) or "e4m3"; margin: scale = amax / fp8_max * 2^margin."""
    fp8_format: str = "hybrid"
    margin: int = 0
    amax_history_len: int = 16
    amax_compute_algo: str = "max"

    def __post_init__(self):
        check_format(self.fp8_format)
        if self.amax_history_len < 1 or self.amax_compute_algo not in ("max", "most_recent"):
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"DelayedScaling: amax_history_len = {self.amax_history_len}, "
                                       f"amax_compute_algo = {self.amax_compute_algo!r}: expected >= 1 and 'max' "
                                       "or 'most_recent'")
