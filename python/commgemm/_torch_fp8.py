"""FP8 for commgemm.torch: quantization helpers, TransformerEngine-style
recipes, and the autograd Function the parallel layers run when they are
given a recipe (fp8_recipe=). docs/PYTHON.md, "FP8", has the user's view.

commgemm's FP8 GEMMs are layout TN only (X [m, k], W [n, k], both
K-major: what Hopper's FP8 tensor cores read), so every GEMM of a layer's
forward and backward is written as one:

    forward  Y  = X . W^T            TN(X, W)
    dgrad    dX = dY . W             TN(dY, W^T)       W^T: a transposed copy
    wgrad    dW = dY^T . X           TN(dY^T, X^T)     both transposed copies

The transposed ("columnwise") copies are made once per forward or backward:
per-tensor scaling transposes the fp8 codes (the scale is unchanged, the
copy exact); the 128 x 128 blocks of a weight transpose with their scale
grid (exact too); the 1 x 128 blocks of an activation or gradient run
along k, so their transposed copy is quantized again (from the high
precision tensor where this rank has it, else from the gathered fp8
values). Where a transposed copy is made from rows gathered from every
rank (the column layer's X, the sequence-parallel row layer's dY), the
per-tensor scale must be one for all ranks: the recipes take the max of the
ranks' amaxes there, as TransformerEngine reduces amaxes over the
tensor-parallel group.
"""

import ctypes
from typing import List, NamedTuple, Optional

import torch

from . import _lib
from ._lib import DType, Scaling, Status, check
from ._torch_collectives import all_gather_rows
from ._torch_ops import _Launch, _as_matrix, _ops, _ref, _sym_shard_rows
from .core import comm_by_id
from .fp8 import BLOCK, FP8_MAX, DelayedScaling, Float8BlockScaling, Float8CurrentScaling
from .fp8 import scale_shape as fp8_scale_shape
from .fp8 import scaling_of as fp8_scaling_of

__all__ = ["Float8CurrentScaling", "DelayedScaling", "Float8BlockScaling", "Fp8Tensor", "amax", "compute_scale",
           "cast_to_fp8", "quantize", "dequantize", "transpose"]

_CGM = {torch.float8_e4m3fn: DType.FP8_E4M3, torch.float8_e5m2: DType.FP8_E5M2}
_FORMATS = {"e4m3": (torch.float8_e4m3fn, torch.float8_e4m3fn), "hybrid": (torch.float8_e4m3fn, torch.float8_e5m2)}
_ROLES = {"input": 0, "weight": 1, "grad_output": 2}


def _invalid(message):
    return _lib.InvalidArgumentError(Status.INVALID_ARGUMENT, message)


def _fmax(dtype):
    if dtype not in _CGM:
        raise _invalid(f"dtype {dtype}: expected torch.float8_e4m3fn or torch.float8_e5m2")
    return FP8_MAX[str(dtype).replace("torch.", "")]


# --------------------------------------------------------------------------
# Quantization (the semantics of commgemm.h "FP8")
# --------------------------------------------------------------------------


class Fp8Tensor(NamedTuple):
    """An fp8 operand: its codes `data` [rows, cols] (torch.float8_*), its
    fp32 `scale` (value = code * scale: (1,) per tensor, [rows, ceil(cols /
    128)] for BLOCK_1X128, [ceil(rows / 128), ceil(cols / 128)] for
    BLOCK_128X128) and the `scaling` that says which."""
    data: torch.Tensor
    scale: torch.Tensor
    scaling: Scaling


def amax(t):
    """max |t| as a float32 scalar tensor (NaN if t has one; 0 if empty)."""
    if t.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=t.device)
    return t.detach().abs().amax().float()


def _block_amax(t, rb):
    """max |t| per rb x 128 block (rows padded), [ceil(r/rb), ceil(c/128)]."""
    r, c = t.shape
    R, C = -(-r // rb), -(-c // BLOCK)
    pad = t.new_zeros((R * rb, C * BLOCK), dtype=torch.float32)
    pad[:r, :c] = t.detach().abs()
    return pad.view(R, rb, C, BLOCK).amax(dim=(1, 3))


def compute_scale(amax_, dtype, margin=0):
    """The dequantize scale for an amax: amax / fp8_max * 2^margin (so the
    amax maps to the largest finite value), 1 where amax is 0 or not
    finite. TransformerEngine's scale_inv; commgemm's scale fields."""
    amax_ = torch.as_tensor(amax_, dtype=torch.float32)
    s = amax_ * torch.tensor(2.0 ** margin / _fmax(dtype), dtype=torch.float32)  # as commgemm.fp8's
    return torch.where(torch.isfinite(amax_) & (amax_ > 0), s, torch.ones_like(s))


def cast_to_fp8(t, dtype, multiplier=1.0):
    """sat(rne(t * multiplier)) in fp8 `dtype`: round to nearest even, magnitudes
    beyond the largest finite value (infinities too) saturate with their sign,
    NaN stays NaN; how commgemm writes an fp8 Y with y.scale = multiplier."""
    fmax = _fmax(dtype)
    return (t.float() * multiplier).clamp(-fmax, fmax).to(dtype)


def _expand(scale, scaling, shape):
    rows, cols = shape
    if scaling == Scaling.TENSOR:
        return scale.reshape(1, 1)
    rb = 1 if scaling == Scaling.BLOCK_1X128 else BLOCK
    return scale.repeat_interleave(rb, 0)[:rows].repeat_interleave(BLOCK, 1)[:, :cols]


def quantize(t, dtype, scaling=Scaling.TENSOR, scale=None, margin=0):
    """t [rows, cols] as an Fp8Tensor: codes = sat(rne(t / s)) with s the
    dequantize scale per tensor or per block, from t's amax (current
    scaling) unless `scale` (per tensor: a (1,) or scalar tensor) is given
    (delayed scaling)."""
    scaling = Scaling(scaling)
    if t.dim() != 2:
        raise _invalid(f"quantize: t has shape {tuple(t.shape)}: expected 2-D [rows, cols]")
    if scale is None:
        if scaling == Scaling.TENSOR:
            a = amax(t).reshape(1)
        else:
            a = _block_amax(t, 1 if scaling == Scaling.BLOCK_1X128 else BLOCK)
        scale = compute_scale(a, dtype, margin)
    scale = torch.as_tensor(scale, dtype=torch.float32, device=t.device)
    if scaling == Scaling.TENSOR:
        scale = scale.reshape(1)
    data = cast_to_fp8(t.float() / _expand(scale, scaling, t.shape), dtype)
    return Fp8Tensor(data.contiguous(), scale.contiguous(), scaling)


def dequantize(q, dtype=torch.float32):
    """An Fp8Tensor's values, code * scale per element."""
    return (q.data.float() * _expand(q.scale, q.scaling, q.data.shape)).to(dtype)


def transpose(q):
    """The transposed ("columnwise") copy of an Fp8Tensor, exact: per tensor
    the codes transposed, 128 x 128 blocks with their scale grid. 1 x 128
    blocks run along the rows' k and do not transpose: quantize the
    transposed high-precision tensor instead."""
    if q.scaling == Scaling.BLOCK_1X128:
        raise _invalid("transpose: 1 x 128 blocks do not transpose (their blocks run along k); quantize t.t() "
                       "instead")
    scale = q.scale if q.scaling == Scaling.TENSOR else q.scale.t().contiguous()
    return Fp8Tensor(q.data.t().contiguous(), scale, q.scaling)


# --------------------------------------------------------------------------
# Recipes (commgemm.fp8's classes)
# --------------------------------------------------------------------------

_RECIPES = (Float8CurrentScaling, DelayedScaling, Float8BlockScaling)


def check_recipe(recipe, what):
    """None or one of the recipes (raised when the layer is made)."""
    if recipe is not None and not isinstance(recipe, _RECIPES):
        raise _invalid(f"{what}: fp8_recipe = {recipe!r}: expected None, commgemm.torch.Float8CurrentScaling(), "
                       "DelayedScaling() or Float8BlockScaling()")
    return recipe


class Fp8Meta:
    """A layer's delayed-scaling state: amax_history [len, 3] (columns:
    input, weight, grad_output; row 0 the latest), on the layer's device."""

    def __init__(self, recipe, device):
        self.recipe = recipe
        self.amax_history = torch.zeros((recipe.amax_history_len, 3), dtype=torch.float32, device=device)

    def scale(self, role, dtype):
        h = self.amax_history[:, _ROLES[role]]
        a = h.amax() if self.recipe.amax_compute_algo == "max" else h[0]
        return compute_scale(a, dtype, self.recipe.margin)

    def record(self, role, amax_):
        """Rolls the role's history by one and writes amax_ as its latest."""
        col = self.amax_history[:, _ROLES[role]]
        col.copy_(torch.roll(col, 1))
        col[0] = amax_.reshape(()).to(col.device)


class _Caster:
    """How one layer call casts its tensors under a recipe: formats, scaling
    kinds, amax reduction over the ranks where asked, delayed scaling's
    state."""

    def __init__(self, recipe, meta, comm_id, rt):
        self.recipe, self.meta, self.comm_id, self.rt = recipe, meta, comm_id, rt
        self.fwd, self.bwd = _FORMATS[recipe.fp8_format]
        self.block = isinstance(recipe, Float8BlockScaling)

    def _reduced(self, a):
        """max over the ranks of a (1,) amax."""
        comm = comm_by_id(self.comm_id)
        if comm.size == 1:
            return a
        return all_gather_rows(a.reshape(1, 1), self.comm_id, comm.size, self.rt, "fp8 amax").amax().reshape(1)

    def cast(self, t, role, w_like, reduce=False):
        """t quantized for `role` ("input", "weight", "grad_output") as an
        X-like (1 x 128 blocks) or W-like (128 x 128) operand; reduce: the
        per-tensor scale is the same on every rank (amax max over ranks)."""
        dtype = self.bwd if role == "grad_output" else self.fwd
        if self.block:
            return quantize(t, dtype, Scaling.BLOCK_128X128 if w_like else Scaling.BLOCK_1X128)
        a = amax(t).reshape(1)
        if reduce:
            a = self._reduced(a)
        if self.meta is None:
            return quantize(t, dtype, Scaling.TENSOR, compute_scale(a, dtype, self.recipe.margin))
        q = quantize(t, dtype, Scaling.TENSOR, self.meta.scale(role, dtype))
        self.meta.record(role, a)
        return q

    def columnwise(self, q, hp_t, w_like):
        """The transposed copy of q, for use as a W-like (w_like) or X-like
        operand: per tensor, and 128 x 128 blocks kept as W-like, the exact
        transpose of the codes (and of the scale grid); otherwise quantized
        again in the blocks wanted, from hp_t (the transposed high-precision
        tensor) or, where this rank lacks it, from the transposed dequantized q."""
        if q.scaling == Scaling.TENSOR or (q.scaling == Scaling.BLOCK_128X128 and w_like):
            return transpose(q)
        src = hp_t if hp_t is not None else dequantize(q).t()
        return quantize(src, q.data.dtype, Scaling.BLOCK_128X128 if w_like else Scaling.BLOCK_1X128)


# --------------------------------------------------------------------------
# The ops on fp8 operands (layout TN; the backends that run them: docs/FP8.md)
# --------------------------------------------------------------------------


def fp8_matrix(name, q):
    """The cgm_matrix of an Fp8Tensor (dense codes; the caller keeps q alive)."""
    rows, cols = q.data.shape
    if not q.data.is_contiguous() or not q.scale.is_contiguous() or q.scale.dtype != torch.float32:
        raise _invalid(f"{name}: expected contiguous fp8 codes and float32 scales (Fp8Tensor from quantize)")
    m = _lib.matrix(q.data.data_ptr() if q.data.numel() else None, _CGM[q.data.dtype], rows, cols, cols)
    m.scaling = int(q.scaling)
    if q.scale.numel():
        m.scale = ctypes.cast(q.scale.data_ptr(), ctypes.POINTER(ctypes.c_float))
    return m


def fp8_gemm(kind, comm_id, qx, qw, bias, out_dtype, backend="", m=0, gathered=False, partial_dtype="",
             gemm_reduction="", y_scale=None, y_amax=False):
    """One commgemm op on fp8 operands: kind "ag" (AG+GEMM, m rows in all;
    gathered: also the gathered X as an Fp8Tensor with its scales), "rs",
    "ar", or "local" (the bulk op's GEMM alone). out_dtype float8_*: Y =
    sat(rne(r * y_scale)) (y_scale: a one-element float32 tensor), and with
    y_amax its max |r| as a float32 (1,) tensor. Returns the list [Y,
    (gathered Fp8Tensor,) (amax,)]: the gathered X for "ag" with gathered,
    the amax with y_amax."""
    comm = comm_by_id(comm_id)
    rows = {"ag": m, "rs": comm.shard_rows(qx.data.shape[0]), "ar": qx.data.shape[0],
            "local": qx.data.shape[0]}[kind]
    dev = qx.data.device
    with _Launch(qx.data) as launch:
        y = torch.empty((rows, qw.data.shape[0]), dtype=out_dtype, device=dev)
        mx, mw = fp8_matrix("x", qx), fp8_matrix("w", qw)
        mb, b_keep = _as_matrix("bias", bias) if bias is not None else (None, None)
        if y_scale is not None:
            my = fp8_matrix("y", Fp8Tensor(y, y_scale, Scaling.TENSOR))
        else:
            my = _as_matrix("y", y, True)[0]
        opts = _lib.cgm_op_options.init()
        opts.backend = _lib.parse_backend(backend or None)
        opts.partial_dtype = _lib.parse_partial_dtype(partial_dtype or None)
        opts.gemm_reduction = _lib.parse_gemm_reduction(gemm_reduction or None)
        out = [y]
        if y_amax:
            amax_ = torch.empty((1,), dtype=torch.float32, device=dev)
            opts.y_amax = ctypes.cast(amax_.data_ptr(), ctypes.POINTER(ctypes.c_float))
        lib, h = _lib.lib(), comm.handle
        if kind == "ag":
            mg = None
            if gathered:
                k = qx.data.shape[1]
                gs = (comm.size,) if qx.scaling == Scaling.TENSOR else (m, -(-k // BLOCK))
                g = Fp8Tensor(torch.empty((m, k), dtype=qx.data.dtype, device=dev),
                              torch.zeros(gs, dtype=torch.float32, device=dev), qx.scaling)
                mg = fp8_matrix("x_gathered", g)
                out.append(g)
            st = lib.cgm_all_gather_gemm(h, _ref(mx), _ref(mw), _ref(mb), _ref(my), _ref(mg), ctypes.byref(opts),
                                         launch.stream)
        elif kind == "local":
            st = lib.cgm_bulk_overlap(h, _ref(mx), _ref(mw), _ref(mb), _ref(my), 0, None, None, ctypes.byref(opts),
                                      launch.stream)
        else:
            fn = lib.cgm_gemm_reduce_scatter if kind == "rs" else lib.cgm_gemm_all_reduce
            st = fn(h, _ref(mx), _ref(mw), _ref(mb), _ref(my), ctypes.byref(opts), launch.stream)
        check(st)
        del b_keep
    if y_amax:
        out.append(amax_)
    return out


# --------------------------------------------------------------------------
# The functional ops on fp8 tensors (commgemm.torch.all_gather_matmul, ...
# with x_scale / w_scale): one custom op, torch.ops.commgemm.fp8_matmul
# --------------------------------------------------------------------------

_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_FP8_OPS = {"ag": "ag", "rs": "rs", "ar": "ar", "gemm": "local"}


def _operand(name, t, scale, w_like):
    """t and its scale as an Fp8Tensor; refuses a non-fp8 t, a missing scale,
    a scale that is not float32 or of a shape that fits no scaling. A per-tensor
    scale stays as given (() or (1,): the library reads its one float)."""
    if t.dtype not in _CGM:
        raise _invalid(f"{name} is {t.dtype} with fp8 operands: expected torch.float8_e4m3fn or torch.float8_e5m2 "
                       f"(quantize it: commgemm.torch.quantize)")
    if t.dim() != 2:
        raise _invalid(f"{name} has shape {tuple(t.shape)}: expected 2-D")
    rows, cols = t.shape
    if scale is None:
        want = fp8_scale_shape(Scaling.BLOCK_128X128 if w_like else Scaling.BLOCK_1X128, rows, cols)
        raise _invalid(f"{name} is {t.dtype} without {name}_scale: an fp8 operand needs its float32 scales (value = "
                       f"code * scale): pass {name}_scale=, shape () or (1,) for one scale, {want} per block")
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32 or scale.device != t.device:
        raise _invalid(f"{name}_scale: expected a float32 tensor on {t.device}, got {type(scale).__name__} "
                       f"{getattr(scale, 'dtype', '')} {getattr(scale, 'device', '')}")
    scaling = fp8_scaling_of(name, scale.shape, rows, cols, w_like)
    return Fp8Tensor(t.contiguous(), scale.contiguous(), scaling)


def _check_y(what, out_dtype, y_scale, y_amax, device, fp8_out):
    """The output dtype (float32 for None), and y_scale / y_amax checked
    against it: an fp8 output needs y_scale, one float32 on the operands'
    device; other outputs take neither. fp8_out: whether the op has an fp8
    output at all."""
    out_dtype = torch.float32 if out_dtype is None else out_dtype
    if out_dtype in _CGM and fp8_out:
        if not isinstance(y_scale, torch.Tensor) or y_scale.dtype != torch.float32 or y_scale.numel() != 1 \
                or y_scale.device != device:
            found = "none" if y_scale is None else (f"{type(y_scale).__name__} {getattr(y_scale, 'dtype', '')} "
                                                    f"{tuple(getattr(y_scale, 'shape', ()))} "
                                                    f"{getattr(y_scale, 'device', '')}")
            raise _invalid(f"{what}: out_dtype {out_dtype} needs y_scale, its quantization scale (Y = sat(rne(r * "
                           f"y_scale))): expected a float32 tensor of one element on {device}, found {found}; "
                           "e.g. torch.tensor([fp8_max / amax], device=...), made once and reused")
        return out_dtype
    if out_dtype not in _OUT_DTYPES:
        fp8s = ", torch.float8_e4m3fn or torch.float8_e5m2 (with y_scale)" if fp8_out else ""
        raise _invalid(f"{what}: out_dtype {out_dtype}: expected torch.float32, torch.bfloat16 or torch.float16"
                       + (fp8s or " (no fp8 output here: use the other ops, commgemm.jax or the numpy ops)"))
    if y_scale is not None or y_amax:
        given = ", ".join(n for n, v in (("y_scale", y_scale is not None), ("y_amax", y_amax)) if v)
        raise _invalid(f"{what}: {given} given, but the output is {out_dtype}: they go with a float8 output only "
                       "(out_dtype=torch.float8_e4m3fn or torch.float8_e5m2)")
    return out_dtype


def check_fp8_call(op, x, weight, x_scale, w_scale, out_dtype, layout="TN", names=("x", "w"), y_scale=None,
                   y_amax=False, fp8_out=True):
    """The checks of an fp8 call, before the library sees it: layout TN,
    both operands fp8 with their scales, the same kind of scaling (per
    tensor or per block) for both, an output dtype the ops write (fp8 with
    its y_scale where fp8_out). Returns (X, W) as Fp8Tensors and the output
    dtype. names: the operands' names in messages (their scales are name +
    "_scale"). Metadata only: runs on fake tensors too."""
    what = f"commgemm fp8 {op}"
    if _lib.parse_layout(layout) != _lib.Layout.TN:
        raise _lib.NotSupportedError(Status.NOT_SUPPORTED,
                                     f"{what}: fp8 operands with layout {layout}: fp8 takes layout TN only (Hopper's "
                                     "FP8 tensor cores read both operands K-major); pass x as [m, k] and weight as "
                                     "[n, k] (transposed copies) with layout 'TN'")
    qx, qw = _operand(names[0], x, x_scale, False), _operand(names[1], weight, w_scale, True)
    if (qx.scaling == Scaling.TENSOR) != (qw.scaling == Scaling.TENSOR):
        raise _invalid(f"{what}: {names[0]}_scale is {qx.scaling.name} and {names[1]}_scale {qw.scaling.name}: "
                       "expected both per tensor (shape () or (1,)) or both per block (2-D)")
    return qx, qw, _check_y(what, out_dtype, y_scale, y_amax, x.device, fp8_out)


def _fp8_op_check(op, x, weight, x_scale, w_scale, out_dtype, layout, y_scale, y_amax):
    if op not in _FP8_OPS:
        raise _invalid(f"fp8_matmul: op {op!r}: expected one of {tuple(_FP8_OPS)}")
    return check_fp8_call(op, x, weight, x_scale, w_scale, out_dtype, layout, y_scale=y_scale, y_amax=y_amax)


@torch.library.custom_op("commgemm::fp8_matmul", mutates_args=())
def _fp8_matmul_op(op: str, x: torch.Tensor, weight: torch.Tensor, x_scale: Optional[torch.Tensor],
                   w_scale: Optional[torch.Tensor], bias: Optional[torch.Tensor], comm_id: int, m: int, layout: str,
                   backend: str, out_dtype: torch.dtype, return_gathered: bool, partial_dtype: str,
                   gemm_reduction: str, y_scale: Optional[torch.Tensor] = None,
                   y_amax: bool = False) -> List[torch.Tensor]:
    """One op on fp8 operands: op "ag" (AG+GEMM, m rows), "rs" (GEMM+RS), "ar"
    (GEMM+AR) or "gemm" (the bulk op's GEMM alone). out_dtype float8_* with
    y_scale (a one-element float32 tensor): an fp8 Y. Returns [y], then the
    gathered X and its scales (op "ag" with return_gathered), then Y's amax,
    float32 (1,) (y_amax). Checked here, once per call (the functional ops
    check nothing more), and by the fake kernel under torch.compile."""
    qx, qw, out_dtype = _fp8_op_check(op, x, weight, x_scale, w_scale, out_dtype, layout, y_scale, y_amax)
    gathered = op == "ag" and return_gathered
    r = fp8_gemm(_FP8_OPS[op], comm_id, qx, qw, bias, out_dtype, backend, m, gathered, partial_dtype,
                 gemm_reduction, y_scale, y_amax)
    if gathered:
        r[1:2] = [r[1].data, r[1].scale]
    return r


@_fp8_matmul_op.register_fake
def _(op, x, weight, x_scale, w_scale, bias, comm_id, m, layout, backend, out_dtype, return_gathered,
      partial_dtype, gemm_reduction, y_scale=None, y_amax=False):
    _, _, out_dtype = _fp8_op_check(op, x, weight, x_scale, w_scale, out_dtype, layout, y_scale, y_amax)
    comm = comm_by_id(comm_id)
    split, k, n = x.shape[0], x.shape[1], weight.shape[0]
    rows = {"ag": m, "rs": _sym_shard_rows(split, comm.rank, comm.size), "ar": split, "gemm": split}[op]
    out = [x.new_empty((rows, n), dtype=out_dtype)]
    if op == "ag" and return_gathered:
        gs = (comm.size,) if x_scale.dim() < 2 else (m, -(-k // BLOCK))
        out += [x.new_empty((m, k)), x.new_empty(gs, dtype=torch.float32)]
    if y_amax:
        out.append(x.new_empty((1,), dtype=torch.float32))
    return out


# --------------------------------------------------------------------------
# The layers' math in fp8
# --------------------------------------------------------------------------

# mode: "ag" column sequence-parallel (AG+GEMM), "local_ar" column without
# (local GEMM forward, GEMM+AR dgrad), "rs" row sequence-parallel (GEMM+RS),
# "ar" row without (GEMM+AR forward, local backward)


class _Fp8Linear(torch.autograd.Function):
    """Y = X . W^T + b through the fp8 ops of `mode`, the backward in fp8 too
    (dgrad TN(dY, W^T), wgrad TN(dY^T, X^T)); db in high precision."""

    @staticmethod
    def forward(ctx, x, weight, bias, comm_id, m, mode, rt, caster, precision, need_bwd):
        pd, gr = precision
        comm_backend = rt.backend
        qx = caster.cast(x, "input", False, reduce=mode == "ag")
        qw = caster.cast(weight, "weight", True)
        xt = None
        if mode == "ag":
            y, *xg = fp8_gemm("ag", comm_id, qx, qw, bias, x.dtype, comm_backend, m, gathered=need_bwd,
                              gemm_reduction=gr)
            if need_bwd:  # one scale for every shard (reduced amax): X^T from the gathered codes
                xg = xg[0]
                xg = Fp8Tensor(xg.data, xg.scale[:1].clone(), xg.scaling) if xg.scaling == Scaling.TENSOR else xg
                xt = caster.columnwise(xg, None, True)
        else:
            kind = {"local_ar": "local", "rs": "rs", "ar": "ar"}[mode]
            backend = rt.bulk if kind == "local" else comm_backend
            y = fp8_gemm(kind, comm_id, qx, qw, bias, x.dtype, backend, partial_dtype=pd, gemm_reduction=gr)[0]
            if need_bwd:
                xt = caster.columnwise(qx, x.t(), True)
        if need_bwd:
            ctx.caster, ctx.comm_id, ctx.mode, ctx.rt, ctx.precision = caster, comm_id, mode, rt, precision
            ctx.m, ctx.x_dtype, ctx.w_dtype = (m if mode == "ag" else x.shape[0]), x.dtype, weight.dtype
            ctx.wt = caster.columnwise(qw, None, True)  # W^T [k, n]: the W operand of the dgrad GEMM
            ctx.xt = xt
        return y

    @staticmethod
    def backward(ctx, grad_y):
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        caster, comm_id, mode, rt = ctx.caster, ctx.comm_id, ctx.mode, ctx.rt
        pd, gr = ctx.precision
        dy = grad_y.contiguous()
        qdy = caster.cast(dy, "grad_output", False, reduce=mode == "rs")
        dx = dw = db = None
        gathered = None
        if mode == "rs":  # dX = allgather(dY_r) . W, the gathered dY for dW
            dx, *gathered = fp8_gemm("ag", comm_id, qdy, ctx.wt, None, ctx.x_dtype, rt.backend, ctx.m,
                                     gathered=need_w, gemm_reduction=gr)
            gathered = gathered[0] if gathered else None
        elif need_x:
            kind = {"ag": "rs", "local_ar": "ar", "ar": "local"}[mode]
            dx = fp8_gemm(kind, comm_id, qdy, ctx.wt, None, ctx.x_dtype, rt.bulk if kind == "local" else rt.backend,
                          partial_dtype=pd, gemm_reduction=gr)[0]
        if need_w:
            if gathered is not None:
                if gathered.scaling == Scaling.TENSOR:
                    gathered = Fp8Tensor(gathered.data, gathered.scale[:1].clone(), gathered.scaling)
                dyt = caster.columnwise(gathered, None, False)
            else:
                dyt = caster.columnwise(qdy, dy.t(), False)
            dw = fp8_gemm("local", comm_id, dyt, ctx.xt, None, torch.float32, rt.bulk,
                          gemm_reduction=gr)[0].to(ctx.w_dtype)
        if need_b:
            db = dy.sum(dim=0, dtype=torch.float32)
            if mode == "rs":  # every rank's rows: the sum over the ranks (GEMM+AR of P ones by db)
                P = comm_by_id(comm_id).size
                ones = torch.ones((P, 1), dtype=torch.float32, device=dy.device)
                db = _ops.matmul_all_reduce(ones, db.reshape(-1, 1), None, comm_id, "TN", rt.backend, "", "")[0]
            db = db.to(grad_y.dtype)
        return dx, dw, db, None, None, None, None, None, None, None


def _fp8_run(what, recipe, meta, comm, rt, precision, x2, weight, bias, m, mode):
    """The _Fp8Linear call of a layer or a functional op under `recipe`, as a
    closure (the layers order it after their other calls)."""
    if rt.bulk is None:
        raise _lib.NotSupportedError(Status.NOT_SUPPORTED,
                                     f"{what} with fp8_recipe: its local fp8 GEMMs run on the comm's bulk op, which "
                                     "this comm lacks: give it one (op_backend={'bulk': 'host'})")
    caster = _Caster(recipe, meta, comm.id, rt)
    need_bwd = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x2, weight, bias))

    def run():
        return _Fp8Linear.apply(x2, weight, bias, comm.id, m if m is not None else 0, mode, rt, caster, precision,
                                need_bwd)
    return run


def layer_run(layer, x2, weight, bias, m, mode):
    """The run() of a layer's forward under its fp8_recipe: the fp8
    Function with the layer's comm, route, precision and state."""
    recipe = layer.fp8_recipe
    meta = None
    if isinstance(recipe, DelayedScaling):
        meta = getattr(layer, "fp8_meta", None)
        if meta is None or meta.recipe != recipe or meta.amax_history.device != x2.device:
            meta = layer.fp8_meta = Fp8Meta(recipe, x2.device)
    return _fp8_run(type(layer).__name__, recipe, meta, layer.comm, layer._rt, layer._precision_args(), x2, weight,
                    bias, m, mode)


# --------------------------------------------------------------------------
# The functional ops with fp8_recipe= (high-precision x and weight, quantized
# in the call; differentiable) and the refusal of gradients for fp8 tensors
# --------------------------------------------------------------------------

_NO_FP8_GRAD = ("torch rounds a gradient to its tensor's dtype, so a float8 tensor would get its gradient as float8 "
                "(e4m3 saturates at 448): pass the high-precision x and weight with fp8_recipe="
                "commgemm.torch.Float8CurrentScaling() or Float8BlockScaling() instead (the gradients are then "
                "those of the values, in x's and weight's dtypes), or detach the fp8 operands")


def refuse_fp8_grad(op, tensors):
    """Refuses fp8-operand calls where autograd would need a gradient."""
    if torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors):
        raise _invalid(f"commgemm fp8 {op}: an input requires grad, but the fp8-operand ops are not differentiable: "
                       + _NO_FP8_GRAD)


def _fp8_matmul_backward(ctx, *grads):
    raise _invalid("torch.ops.commgemm.fp8_matmul: no gradient for fp8 operands: " + _NO_FP8_GRAD)


torch.library.register_autograd("commgemm::fp8_matmul", _fp8_matmul_backward)


def recipe_call(op, x, weight, bias, comm, m, recipe, rt, precision, given):
    """all_gather_matmul ("ag"), matmul_reduce_scatter ("rs") or
    matmul_all_reduce ("ar") with fp8_recipe: x and weight in high precision,
    quantized here as the layers quantize them (per-tensor scales from
    current amaxes, reduced over the ranks where "ag" gathers X; or blocks),
    every GEMM of the forward and backward in fp8 (_Fp8Linear). Y, dX, dW and
    db in x's, weight's and bias's dtypes. given: the names of arguments that
    do not go with fp8_recipe, passed anyway."""
    what = f"commgemm.torch fp8_recipe {op}"
    if isinstance(recipe, DelayedScaling) or not isinstance(recipe, _RECIPES):
        raise _invalid(f"{what}: fp8_recipe = {recipe!r}: expected Float8CurrentScaling() or Float8BlockScaling() "
                       "(delayed scaling keeps an amax history, state that a function call has nowhere to keep: "
                       "use the layers, ColumnParallelLinear / RowParallelLinear(fp8_recipe=DelayedScaling()))")
    if given:
        raise _invalid(f"{what}: {', '.join(given)} given with fp8_recipe: fp8_recipe quantizes x and weight itself "
                       "and returns x's dtype; drop them (or pass quantized operands with x_scale= and w_scale= and "
                       "no fp8_recipe)")
    for name, t in (("x", x), ("weight", weight)):
        if t.dtype not in _OUT_DTYPES:
            raise _invalid(f"{what}: {name} is {t.dtype}: expected float32, bfloat16 or float16 (fp8_recipe takes "
                           "the high-precision values and quantizes them)")
    mode = {"ag": "ag", "rs": "rs", "ar": "ar"}[op]
    return _fp8_run(what, recipe, None, comm, rt, precision, x, weight, bias, m, mode)()
