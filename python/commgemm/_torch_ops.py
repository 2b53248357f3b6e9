"""torch custom ops wrapping the C ops (torch.ops.commgemm.*): tensor ->
cgm_matrix descriptors, the current stream, and fake kernels that give the
output shapes so that torch.compile keeps the ops in its graphs. Imported by
commgemm.torch; use the functions there."""

import ctypes
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _lib
from ._lib import DType, Layout, Status, check
from .core import comm_by_id

# --------------------------------------------------------------------------
# Tensor -> cgm_matrix
# --------------------------------------------------------------------------

_TORCH_DTYPES = {torch.float32: DType.FP32, torch.bfloat16: DType.BF16, torch.float16: DType.FP16}


def _as_matrix(name, t, for_output=False):
    if t.dim() == 1:  # a bias row, 1 x n (read as one: no view op per call)
        rows, cols = 1, t.shape[0]
        col_stride = t.stride(0)
    elif t.dim() == 2:
        rows, cols = t.shape
        col_stride = t.stride(1)
    else:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"{name} has shape {tuple(t.shape)}: expected a 2-D tensor")
    dtype = _TORCH_DTYPES.get(t.dtype)
    if dtype is None:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"{name} is {t.dtype}: expected float32, bfloat16 or float16")
    if rows * cols == 0:
        return _lib.matrix(None, dtype, rows, cols, 0), t
    if (cols > 1 and col_stride != 1) or (rows > 1 and t.stride(0) < cols):
        if for_output:
            raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                            f"{name}: outputs must have contiguous rows")
        t = t.contiguous()  # inputs: copy to row-major
    ld = t.stride(0) if rows > 1 else cols
    return _lib.matrix(t.data_ptr(), dtype, rows, cols, ld), t


def _options(layout, backend, dtype, partial_dtype="", gemm_reduction=""):
    """The op options; backend, partial_dtype and gemm_reduction as names, "" for the comm's."""
    o = _lib.cgm_op_options.init()
    o.layout = _lib.parse_layout(layout)
    o.backend = _lib.parse_backend(backend or None)
    o.allow_tf32 = int(dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32)
    o.partial_dtype = _lib.parse_partial_dtype(partial_dtype or None)
    o.gemm_reduction = _lib.parse_gemm_reduction(gemm_reduction or None)
    return o


class _Launch:
    """Device guard + stream for one call: CUDA tensors run on the current
    stream of their device; CPU tensors (host backend comms) take no stream."""

    def __init__(self, ref):
        self.cuda = ref.is_cuda
        self.device = ref.device
        self._guard = torch.cuda.device(ref.device) if self.cuda else None

    def __enter__(self):
        if self._guard is not None:
            self._guard.__enter__()
        return self

    def __exit__(self, *exc):
        if self._guard is not None:
            self._guard.__exit__(*exc)

    @property
    def stream(self):
        if not self.cuda:
            return None
        return ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream or None)


def _ref(m):
    return ctypes.byref(m) if m is not None else None


def _out_cols(layout, w):
    return w.shape[0] if _lib.parse_layout(layout) == Layout.TN else w.shape[1]


def _split_len(layout, x):
    return x.shape[1] if _lib.parse_layout(layout) == Layout.NT else x.shape[0]


def _contraction(layout, x):
    return x.shape[0] if _lib.parse_layout(layout) == Layout.NT else x.shape[1]


def _sym_shard_rows(m, rank, nranks):
    """shard_rows that also works on SymInts (torch.compile dynamic shapes)."""
    chunk = (m + nranks - 1) // nranks
    return torch.sym_max(0, torch.sym_min(chunk, m - rank * chunk))


# --------------------------------------------------------------------------
# Custom ops (opaque to torch.compile; fake kernels give the shapes)
# --------------------------------------------------------------------------


@torch.library.custom_op("commgemm::all_gather_matmul", mutates_args=())
def _all_gather_matmul_op(x_shard: Tensor, weight: Tensor, bias: Optional[Tensor], comm_id: int, m: int,
                          layout: str, backend: str, return_gathered: bool,
                          gemm_reduction: str) -> Tuple[Tensor, Tensor]:
    comm = comm_by_id(comm_id)
    with _Launch(x_shard) as launch:
        y = torch.empty((m, _out_cols(layout, weight)), dtype=x_shard.dtype, device=x_shard.device)
        k = _contraction(layout, x_shard)
        if return_gathered:
            shape = (k, m) if _lib.parse_layout(layout) == Layout.NT else (m, k)
            gathered = torch.empty(shape, dtype=x_shard.dtype, device=x_shard.device)
        else:
            gathered = torch.empty((0,), dtype=x_shard.dtype, device=x_shard.device)
        mx, x_keep = _as_matrix("x_shard", x_shard)
        mw, w_keep = _as_matrix("weight", weight)
        mb, b_keep = _as_matrix("bias", bias) if bias is not None else (None, None)
        my, _ = _as_matrix("y", y, True)
        mg = _as_matrix("gathered", gathered, True)[0] if return_gathered else None
        opts = _options(layout, backend, x_shard.dtype, gemm_reduction=gemm_reduction)
        check(_lib.lib().cgm_all_gather_gemm(comm.handle, _ref(mx), _ref(mw), _ref(mb), _ref(my), _ref(mg),
                                             ctypes.byref(opts), launch.stream))
        del x_keep, w_keep, b_keep  # the op is enqueued; the caching allocator is stream-ordered
    return y, gathered


@_all_gather_matmul_op.register_fake
def _(x_shard, weight, bias, comm_id, m, layout, backend, return_gathered, gemm_reduction):
    y = x_shard.new_empty((m, _out_cols(layout, weight)))
    if return_gathered:
        k = _contraction(layout, x_shard)
        gathered = x_shard.new_empty((k, m) if _lib.parse_layout(layout) == Layout.NT else (m, k))
    else:
        gathered = x_shard.new_empty((0,))
    return y, gathered


def _gemm_then_reduce(c_function, comm, x, weight, bias, rows, layout, backend, partial_dtype, gemm_reduction):
    """GEMM+RS and GEMM+AR: one call of `c_function` into a new [rows, n] output."""
    with _Launch(x) as launch:
        y = torch.empty((rows, _out_cols(layout, weight)), dtype=x.dtype, device=x.device)
        mx, x_keep = _as_matrix("x", x)
        mw, w_keep = _as_matrix("weight", weight)
        mb, b_keep = _as_matrix("bias", bias) if bias is not None else (None, None)
        my, _ = _as_matrix("y", y, True)
        opts = _options(layout, backend, x.dtype, partial_dtype, gemm_reduction)
        check(c_function(comm.handle, _ref(mx), _ref(mw), _ref(mb), _ref(my), ctypes.byref(opts),
                         launch.stream))
        del x_keep, w_keep, b_keep
    return y


@torch.library.custom_op("commgemm::matmul_reduce_scatter", mutates_args=())
def _matmul_reduce_scatter_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], comm_id: int, layout: str,
                              backend: str, partial_dtype: str, gemm_reduction: str) -> Tensor:
    comm = comm_by_id(comm_id)
    rows = comm.shard_rows(_split_len(layout, x))
    return _gemm_then_reduce(_lib.lib().cgm_gemm_reduce_scatter, comm, x, weight, bias, rows, layout, backend,
                             partial_dtype, gemm_reduction)


@_matmul_reduce_scatter_op.register_fake
def _(x, weight, bias, comm_id, layout, backend, partial_dtype, gemm_reduction):
    comm = comm_by_id(comm_id)
    rows = _sym_shard_rows(_split_len(layout, x), comm.rank, comm.size)
    return x.new_empty((rows, _out_cols(layout, weight)))


@torch.library.custom_op("commgemm::matmul_all_reduce", mutates_args=())
def _matmul_all_reduce_op(x: Tensor, weight: Tensor, bias: Optional[Tensor], comm_id: int, layout: str,
                          backend: str, partial_dtype: str, gemm_reduction: str) -> Tensor:
    comm = comm_by_id(comm_id)
    return _gemm_then_reduce(_lib.lib().cgm_gemm_all_reduce, comm, x, weight, bias, _split_len(layout, x),
                             layout, backend, partial_dtype, gemm_reduction)


@_matmul_all_reduce_op.register_fake
def _(x, weight, bias, comm_id, layout, backend, partial_dtype, gemm_reduction):
    return x.new_empty((_split_len(layout, x), _out_cols(layout, weight)))


@torch.library.custom_op("commgemm::bulk_matmul_collective", mutates_args=())
def _bulk_op(a: Optional[Tensor], b: Optional[Tensor], send: Optional[Tensor], comm_id: int, layout: str,
             collective: str, m: int, backend: str, gemm_reduction: str, a_scale: Optional[Tensor] = None,
             b_scale: Optional[Tensor] = None, out_dtype: Optional[torch.dtype] = None) -> Tuple[Tensor, Tensor]:
    """The bulk op; fp8 a and b (layout TN) with a_scale and b_scale (as
    fp8_matmul's x_scale and w_scale), c of out_dtype (float32 by default)."""
    comm = comm_by_id(comm_id)
    ref = a if a is not None else send
    with _Launch(ref) as launch:
        fp8 = _bulk_fp8(a, b, a_scale, b_scale, out_dtype, layout)
        c, recv = _bulk_outputs(a, b, send, comm, layout, collective, m, torch.empty, out_dtype=fp8[2] if fp8 else None)
        if fp8:
            from ._torch_fp8 import fp8_matrix
            (ma, mb), a_keep, b_keep = (fp8_matrix("a", fp8[0]), fp8_matrix("b", fp8[1])), fp8[0], fp8[1]
        else:
            ma, a_keep = _as_matrix("a", a) if a is not None else (None, None)
            mb, b_keep = _as_matrix("b", b) if b is not None else (None, None)
        mc = _as_matrix("c", c, True)[0] if a is not None else None
        ms, s_keep = _as_matrix("send", send) if send is not None else (None, None)
        mr = _as_matrix("recv", recv, True)[0] if send is not None else None
        opts = _options(layout, backend, ref.dtype, gemm_reduction=gemm_reduction)
        check(_lib.lib().cgm_bulk_overlap(comm.handle, _ref(ma), _ref(mb), None, _ref(mc),
                                          int(_lib.parse_collective(collective)), _ref(ms), _ref(mr),
                                          ctypes.byref(opts), launch.stream))
        del a_keep, b_keep, s_keep
    return c, recv


def _bulk_fp8(a, b, a_scale, b_scale, out_dtype, layout):
    """None for a GEMM on fp32/bf16/fp16 a and b (or no GEMM), refusing scales
    or an out_dtype given with them; else fp8 a and b checked as the fp8
    functional ops check theirs: (a, b as Fp8Tensors, the output dtype)."""
    fp8 = a is not None and (a.dtype in _FP8 or b.dtype in _FP8)
    if not fp8:
        given = [n for n, v in (("a_scale", a_scale), ("b_scale", b_scale), ("out_dtype", out_dtype)) if v is not None]
        if given:
            raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                            f"bulk_matmul_collective: {', '.join(given)} given, but a is "
                                            f"{getattr(a, 'dtype', None)} and b {getattr(b, 'dtype', None)}: they go "
                                            "with float8 a and b only (c is a's dtype otherwise); drop them or pass "
                                            "float8 a and b")
        return None
    from ._torch_fp8 import check_fp8_call
    return check_fp8_call("bulk_matmul_collective", a, b, a_scale, b_scale, out_dtype, layout, names=("a", "b"),
                          fp8_out=False)


_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _bulk_outputs(a, b, send, comm, layout, collective, m, empty, fake=False, out_dtype=None):
    ref = a if a is not None else send
    if a is not None:
        c = empty((_split_len(layout, a), _out_cols(layout, b)), dtype=out_dtype or a.dtype, device=a.device)
    else:
        c = empty((0,), dtype=ref.dtype, device=ref.device)
    if send is not None:
        if _lib.parse_collective(collective) == _lib.Collective.ALL_GATHER:
            rows = m
        elif fake:
            rows = _sym_shard_rows(send.shape[0], comm.rank, comm.size)
        else:
            rows = comm.shard_rows(send.shape[0])
        recv = empty((rows, send.shape[1]), dtype=send.dtype, device=send.device)
    else:
        recv = empty((0,), dtype=ref.dtype, device=ref.device)
    return c, recv


@_bulk_op.register_fake
def _(a, b, send, comm_id, layout, collective, m, backend, gemm_reduction, a_scale=None, b_scale=None,
      out_dtype=None):
    fp8 = _bulk_fp8(a, b, a_scale, b_scale, out_dtype, layout)  # the checks at trace time too
    c_dtype = fp8[2] if fp8 else None
    return _bulk_outputs(a, b, send, comm_by_id(comm_id), layout, collective, m, torch.empty, fake=True,
                         out_dtype=c_dtype)


# --------------------------------------------------------------------------
# Epilogues (commgemm.h "Epilogues")
# --------------------------------------------------------------------------

_EPILOGUE_OPS = ("ag", "rs", "ar", "gemm")


def _epilogue_shapes(op, x, weight, m, layout, epilogue, return_gathered, shard_rows_of):
    """Shapes of matmul_epilogue's outputs: y, gathered ((0,) unless asked), aux ((0,) unless
    GELU_AUX writes it), bgrad ((0,) unless DGELU_BGRAD ([n]) or BGRAD ([y rows]))."""
    if op not in _EPILOGUE_OPS:
        raise _lib.InvalidArgumentError(Status.INVALID_ARGUMENT,
                                        f"matmul_epilogue: op {op!r}: expected one of {_EPILOGUE_OPS}")
    split, n = _split_len(layout, x), _out_cols(layout, weight)
    rows = {"ag": m, "rs": shard_rows_of(split), "ar": split, "gemm": split}[op]
    gathered = (0,)
    if op == "ag" and return_gathered:
        k = _contraction(layout, x)
        gathered = (k, m) if _lib.parse_layout(layout) == Layout.NT else (m, k)
    e = _lib.parse_epilogue(epilogue)
    aux = (rows, n) if e == _lib.Epilogue.GELU_AUX else (0,)
    bgrad = (n,) if e == _lib.Epilogue.DGELU_BGRAD else (rows,) if e == _lib.Epilogue.BGRAD else (0,)
    return (rows, n), gathered, aux, bgrad


@torch.library.custom_op("commgemm::matmul_epilogue", mutates_args=())
def _matmul_epilogue_op(op: str, x: Tensor, weight: Tensor, bias: Optional[Tensor], aux: Optional[Tensor],
                        comm_id: int, m: int, layout: str, backend: str, epilogue: str, partial_dtype: str,
                        gemm_reduction: str, return_gathered: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """One op with an epilogue: op "ag" (AG+GEMM, m rows), "rs" (GEMM+RS), "ar" (GEMM+AR) or
    "gemm" (cgm_bulk_overlap's GEMM alone, x and weight as its a and b). aux: the
    pre-activation DGELU/DGELU_BGRAD read. Returns (y, gathered, aux written by GELU_AUX, bgrad),
    each (0,)-shaped where the call makes none."""
    comm = comm_by_id(comm_id)
    shapes = _epilogue_shapes(op, x, weight, m, layout, epilogue, return_gathered, comm.shard_rows)
    with _Launch(x) as launch:
        y, gathered, aux_out, bgrad = (torch.empty(s, dtype=x.dtype, device=x.device) for s in shapes)
        mx, x_keep = _as_matrix("x", x)
        mw, w_keep = _as_matrix("weight", weight)
        mb, b_keep = _as_matrix("bias", bias) if bias is not None else (None, None)
        my, _ = _as_matrix("y", y, True)
        opts = _options(layout, backend, x.dtype, partial_dtype, gemm_reduction)
        e = _lib.parse_epilogue(epilogue)
        opts.epilogue = int(e)
        a_keep = None
        if e == _lib.Epilogue.GELU_AUX:
            ma = _as_matrix("aux", aux_out, True)[0]
        elif aux is not None:
            ma, a_keep = _as_matrix("aux", aux)
        else:
            ma = None
        mg = _as_matrix("bgrad", bgrad, True)[0] if e in (_lib.Epilogue.DGELU_BGRAD, _lib.Epilogue.BGRAD) else None
        gathered_m = _as_matrix("gathered", gathered, True)[0] if op == "ag" and return_gathered else None
        if ma is not None:
            opts.aux = ctypes.pointer(ma)
        if mg is not None:
            opts.bgrad = ctypes.pointer(mg)
        lib, h, s = _lib.lib(), comm.handle, launch.stream
        if op == "ag":
            st = lib.cgm_all_gather_gemm(h, _ref(mx), _ref(mw), _ref(mb), _ref(my), _ref(gathered_m),
                                         ctypes.byref(opts), s)
        elif op == "gemm":
            st = lib.cgm_bulk_overlap(h, _ref(mx), _ref(mw), _ref(mb), _ref(my), 0, None, None,
                                      ctypes.byref(opts), s)
        else:
            fn = lib.cgm_gemm_reduce_scatter if op == "rs" else lib.cgm_gemm_all_reduce
            st = fn(h, _ref(mx), _ref(mw), _ref(mb), _ref(my), ctypes.byref(opts), s)
        check(st)
        del x_keep, w_keep, b_keep, a_keep
    return y, gathered, aux_out, bgrad


@_matmul_epilogue_op.register_fake
def _(op, x, weight, bias, aux, comm_id, m, layout, backend, epilogue, partial_dtype, gemm_reduction,
      return_gathered):
    comm = comm_by_id(comm_id)
    shapes = _epilogue_shapes(op, x, weight, m, layout, epilogue, return_gathered,
                              lambda rows: _sym_shard_rows(rows, comm.rank, comm.size))
    return tuple(x.new_empty(s) for s in shapes)


_ops = torch.ops.commgemm
