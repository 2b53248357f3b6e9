"""Comm (the communicator) and the numpy-level ops on the host backend.

The C library does every shape, dtype and agreement check; Python only turns
numpy arrays into cgm_matrix descriptors (ld from the strides), allocates
outputs that were not given, and turns statuses into exceptions.
"""

import ctypes
import dataclasses
import itertools
import threading
from typing import Dict, Optional, Union

from . import _lib
from . import fp8 as _fp8
from ._lib import (Collective, DType, InvalidArgumentError, Layout, Op, Status,
                   check, shard_offset, shard_rows)

__all__ = ["Config", "Comm", "all_gather_gemm", "gemm_reduce_scatter", "gemm_all_reduce",
           "bulk_overlap", "shard_rows", "shard_offset", "numpy_dtype_to_cgm"]


# --------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------

@dataclasses.dataclass
class Config:
    """Comm configuration (cgm_config). None = unset: the environment variable
    (COMMGEMM_BACKEND, COMMGEMM_MAX_M, ...), then the library's default.

    partial_dtype: "fp32" or "output", what GEMM+RS/AR's partial products are
    rounded to before they travel (COMMGEMM_PARTIAL_DTYPE, default "fp32");
    gemm_reduction: "any" or "fp32", how cuBLASLt may add split-k parts
    (COMMGEMM_GEMM_REDUCTION, default "any"). See docs/PYTHON.md, Precision."""
    backend: Union[str, int, None] = None
    #: per-op backend, e.g. {"ag_gemm": "p2p", "gemm_rs": "nccl"}
    op_backend: Optional[Dict[Union[str, int], Union[str, int]]] = None
    max_m: Optional[int] = None
    max_n: Optional[int] = None
    max_k: Optional[int] = None
    timeout_ms: Optional[int] = None
    algo: Union[str, int, None] = None
    splits: Optional[int] = None
    host_threads: Optional[int] = None
    check_agreement: Optional[bool] = None
    partial_dtype: Union[str, int, None] = None
    gemm_reduction: Union[str, int, None] = None

    def to_c(self):
        c = _lib.cgm_config.init()
        if self.backend is not None:
            c.backend = _lib.parse_backend(self.backend)
        for op, backend in (self.op_backend or {}).items():
            c.op_backend[_lib.parse_op(op)] = _lib.parse_backend(backend)
        for name in ("max_m", "max_n", "max_k", "timeout_ms", "splits", "host_threads"):
            value = getattr(self, name)
            if value is not None:
                setattr(c, name, int(value))
        if self.algo is not None:
            c.algo = _lib.parse_algo(self.algo)
        if self.check_agreement is not None:
            c.check_agreement = int(bool(self.check_agreement))
        c.partial_dtype = _lib.parse_partial_dtype(self.partial_dtype)
        c.gemm_reduction = _lib.parse_gemm_reduction(self.gemm_reduction)
        return c

    @classmethod
    def coerce(cls, config=None, **kwargs):
        """A Config from None, a Config, or a dict, updated with kwargs."""
        if config is None:
            config = cls()
        elif isinstance(config, dict):
            config = cls(**config)
        elif not isinstance(config, cls):
            raise TypeError(f"config: expected commgemm.Config, a dict or None, got {type(config).__name__}")
        if kwargs:
            config = dataclasses.replace(config, **kwargs)
        return config


# --------------------------------------------------------------------------
# Comm
# --------------------------------------------------------------------------

# What an op's backend cannot do, which the C library refuses with
# NotSupportedError (commgemm.h has no capability query): Comm.supports tells,
# and commgemm.torch's and commgemm.jax's layers take another way there.
#   "gathered": AG+GEMM hands back the gathered input (x_gathered);
#   "bulk": cgm_bulk_overlap (a GEMM beside an unrelated collective, or either alone).
# What each backend's ops refuse (NotSupportedError), by feature (commgemm.h
# "Epilogues": p2p refuses GEMM+AR's on more than one rank, cublasmp GEMM+RS's and GEMM+AR's).
_BACKEND_LACKS = {
    # cuBLASMp: one matmul, no bulk; epilogues on AG+GEMM only (it applies
    # them before GEMM+RS/AR's reduction), so not "epilogue" (all three ops)
    "cublasmp": frozenset({"gathered", "bulk", "epilogue", "bulk_epilogue"}),
    "p2p": frozenset({"epilogue"}),  # GEMM+AR's on P > 1 is refused (AG+GEMM's, GEMM+RS's run)
    "nccl": frozenset(),
}
# The GPU backends run epilogues through cuBLASLt, whose aux takes a leading dimension that is a
# multiple of 8 elements (Comm.epilogue_fits).
_AUX_LD_MULTIPLE = {"p2p": 8, "nccl": 8}
_GEMM_OPS = (Op.ALL_GATHER_GEMM, Op.GEMM_REDUCE_SCATTER, Op.GEMM_ALL_REDUCE)
_FEATURE_OP = {"gathered": (Op.ALL_GATHER_GEMM,), "bulk": (Op.BULK,), "epilogue": _GEMM_OPS,
               "bulk_epilogue": (Op.BULK,)}

_PICKLE_ADVICE = (
    "a commgemm.Comm cannot be pickled (pickle, torch.save, copy to another process): it is a live "
    "communicator joined with the other ranks' processes, which a file or another process cannot restore, "
    "and so is every layer or model holding one. Save the parameters instead: "
    "torch.save(model.state_dict(), path); to restore, build the model on a new Comm and call "
    "model.load_state_dict(torch.load(path)). copy.deepcopy(model) works: the copy shares the Comm.")

_registry_lock = threading.Lock()
_registry = {}  # id -> Comm, for torch custom ops (which take ints, not objects)
_ids = itertools.count(1)


class Comm:
    """A commgemm communicator (cgm_comm *). Create it with one of the
    classmethods; close() (or `with`) destroys it. Creation and close() are
    collective: every rank calls them, in the same order.

        with Comm.local(rank, nranks, "my-job") as comm:   # host backend
            y = commgemm.all_gather_gemm(comm, x_shard, w)
    """

    def __init__(self, handle, keepalive=None):
        """Wraps a cgm_comm * (an int address); use the classmethods instead."""
        self._handle = ctypes.c_void_p(handle)
        self._keepalive = keepalive  # e.g. the torch process group owning the ncclComm_t
        rank, size = ctypes.c_int(), ctypes.c_int()
        lib = _lib.lib()
        try:
            check(lib.cgm_comm_rank(self._handle, ctypes.byref(rank)))
            check(lib.cgm_comm_size(self._handle, ctypes.byref(size)))
        except BaseException:
            lib.cgm_comm_destroy(self._handle)  # not leaked (the handle is not live anyway)
            raise
        self._rank, self._size = rank.value, size.value
        self._op_backends = {}
        try:
            for op in Op:  # resolved at creation and fixed: cached, so the layers read them without a call
                out = ctypes.c_int()
                check(lib.cgm_comm_backend(self._handle, int(op), ctypes.byref(out)))
                self._op_backends[op] = _lib.backend_name(out.value)
        except BaseException:
            lib.cgm_comm_destroy(self._handle)
            raise
        #: the torch.distributed group over the same ranks, if any (set by from_process_group; settable):
        #: commgemm.torch gathers through it where this comm's backends cannot (Comm.supports)
        self.process_group = None
        with _registry_lock:
            self.id = next(_ids)
            _registry[self.id] = self

    # ---- constructors ----

    @classmethod
    def _create(cls, bootstrap, config, keepalive=None):
        conf = Config.coerce(config).to_c()
        handle = ctypes.c_void_p()
        check(_lib.lib().cgm_comm_create(ctypes.byref(bootstrap), ctypes.byref(conf), ctypes.byref(handle)))
        return cls(handle.value, keepalive)

    @classmethod
    def local(cls, rank, nranks, rendezvous, config=None, **config_kwargs):
        """Host-backend comm: `nranks` processes on this machine meeting at the
        name `rendezvous` (letters, digits, '-', '_', '.'; at most 80)."""
        boot = _lib.cgm_bootstrap.init()
        boot.kind = _lib.BootstrapKind.LOCAL
        boot.rank = int(rank)
        boot.nranks = int(nranks)
        if not isinstance(rendezvous, (str, bytes, bytearray)):
            raise TypeError(f"rendezvous: expected a str (letters, digits, '-', '_', '.'), got "
                            f"{type(rendezvous).__name__} {rendezvous!r}")
        name = rendezvous.encode() if isinstance(rendezvous, str) else bytes(rendezvous)
        boot.rendezvous = name
        return cls._create(boot, Config.coerce(config, **config_kwargs), keepalive=name)

    @classmethod
    def from_env(cls, config=None, **config_kwargs):
        """Comm for ranks started by commgemm-run, torchrun or mpirun
        (cgm_bootstrap_from_env)."""
        boot = _lib.cgm_bootstrap.init()
        check(_lib.lib().cgm_bootstrap_from_env(ctypes.byref(boot)))
        # boot.rendezvous points to thread-local library storage: copy it
        # before any other commgemm call can reuse it.
        name = ctypes.string_at(boot.rendezvous) if boot.rendezvous else None
        boot.rendezvous = name
        return cls._create(boot, Config.coerce(config, **config_kwargs), keepalive=name)

    @classmethod
    def from_nccl(cls, nccl_comm, config=None, keepalive=None, **config_kwargs):
        """GPU comm from an ncclComm_t (an int address, e.g. from cupy or
        torch); rank and size are read from it. The ncclComm_t must outlive
        this Comm (pass its owner as `keepalive` to hold a reference)."""
        ptr = int(nccl_comm)
        if not ptr:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       "Comm.from_nccl: nccl_comm is NULL; pass a live ncclComm_t")
        conf = Config.coerce(config, **config_kwargs).to_c()
        handle = ctypes.c_void_p()
        check(_lib.lib().cgm_comm_init_nccl(ctypes.c_void_p(ptr), ctypes.byref(conf), ctypes.byref(handle)))
        return cls(handle.value, keepalive)

    @classmethod
    def from_process_group(cls, group=None, config=None, **config_kwargs):
        """GPU comm from a torch.distributed process group using NCCL (see
        commgemm.torch.comm_from_process_group)."""
        from . import torch as _torch_integration
        return _torch_integration.comm_from_process_group(group, config, **config_kwargs)

    # ---- queries ----

    @property
    def handle(self):
        """The cgm_comm * as a ctypes.c_void_p (raises if closed)."""
        if not self._handle.value:
            raise _lib.InvalidUsageError(Status.INVALID_USAGE, "this Comm was closed; create a new one")
        return self._handle

    @property
    def closed(self):
        return not self._handle.value

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return self._size

    def backend(self, op=Op.ALL_GATHER_GEMM):
        """Name of the backend that runs `op` ("ag_gemm", "gemm_rs", "gemm_ar",
        "bulk" or an Op) on this comm: "host", "p2p", "nccl" or "cublasmp"."""
        out = ctypes.c_int()
        check(_lib.lib().cgm_comm_backend(self.handle, int(_lib.parse_op(op)), ctypes.byref(out)))
        return _lib.backend_name(out.value)

    def supports(self, feature, backend=None):
        """Whether this comm's op runs `feature` with the per-call `backend`
        (None: the op's own): "gathered", AG+GEMM handing back the gathered
        input (not on cublasmp, which keeps it internal); "bulk",
        cgm_bulk_overlap (not on cublasmp); "epilogue", the epilogues of
        AG+GEMM, GEMM+RS and GEMM+AR (all three; the host backend's only
        today: cublasmp has AG+GEMM's alone); "bulk_epilogue", those of cgm_bulk_overlap's GEMM. The library
        refuses the others with NotSupportedError. Pure Python: the backends
        are read at creation."""
        if feature not in _FEATURE_OP:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"Comm.supports: feature {feature!r}: expected one of {sorted(_FEATURE_OP)}")
        return all(feature not in _BACKEND_LACKS.get(self._backend_for(op, backend), ())
                   for op in _FEATURE_OP[feature])

    def epilogue_fits(self, width, backend=None):
        """Whether the epilogues with an aux (GELU_AUX, DGELU, DGELU_BGRAD) run on outputs `width`
        columns wide, aux as dense as the output, with the per-call `backend` (None: the op's own):
        the GPU backends (cuBLASLt) want aux's leading dimension a multiple of 8; the host takes any.
        The layers run their GELU unfused where this is False (torch: for any rank's width, so that
        every rank takes the same way; JAX: for this rank's, so uneven feature splits that straddle a
        multiple of 8 fail with MismatchError). Pure Python."""
        return all(int(width) % _AUX_LD_MULTIPLE.get(self._backend_for(op, backend), 1) == 0 for op in _GEMM_OPS)

    def _backend_for(self, op, backend=None):
        """The name of the backend that runs `op` given a per-call override
        (None, "", a name, a Backend): the override, else the comm's."""
        if backend is None or backend == "":
            return self._op_backends[op]
        if isinstance(backend, str):
            member = _lib.Backend.__members__.get(backend.upper())
            backend = member if member is not None else _lib.parse_backend(backend)
        backend = _lib.Backend(int(backend))
        if backend in (_lib.Backend.DEFAULT, _lib.Backend.AUTO):
            return self._op_backends[op]
        return backend.name.lower()

    def _precision(self):
        partial, reduction = ctypes.c_int(), ctypes.c_int()
        check(_lib.lib().cgm_comm_precision(self.handle, ctypes.byref(partial), ctypes.byref(reduction)))
        return partial.value, reduction.value

    @property
    def partial_dtype(self):
        """The comm's partial dtype ("fp32" or "output"): what GEMM+RS/AR calls
        that do not choose one use (config, else COMMGEMM_PARTIAL_DTYPE, else fp32)."""
        return _lib.partial_dtype_name(self._precision()[0])

    @property
    def gemm_reduction(self):
        """The comm's GEMM reduction ("any" or "fp32"), as partial_dtype."""
        return _lib.gemm_reduction_name(self._precision()[1])

    def async_error(self):
        """None while no asynchronous error occurred, else the CommGemmError
        (cgm_comm_get_async_error; never blocks)."""
        out = ctypes.c_int()
        check(_lib.lib().cgm_comm_get_async_error(self.handle, ctypes.byref(out)))
        if out.value == Status.SUCCESS:
            return None
        return _lib.make_error(out.value, _lib.last_error())

    def shard_rows(self, m, rank=None):
        """Rows of `rank`'s shard (default: this rank) of m rows."""
        return shard_rows(m, self._rank if rank is None else rank, self._size)

    def shard_offset(self, m, rank=None):
        return shard_offset(m, self._rank if rank is None else rank, self._size)

    # ---- lifetime ----

    def close(self):
        """Destroys the comm (collective). Idempotent."""
        if not self._handle.value:
            return
        handle, self._handle = self._handle, ctypes.c_void_p()
        with _registry_lock:
            _registry.pop(self.id, None)
        try:
            check(_lib.lib().cgm_comm_destroy(handle))
        finally:
            # after the destroy: the keepalive may own what the comm uses (e.g. the ncclComm_t)
            self._keepalive = None

    destroy = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else f"rank={self._rank} size={self._size}"
        return f"<commgemm.Comm {state}>"

    # A Comm is one live communicator: copies of a model share it, and it
    # never travels (a file or another process cannot join the ranks).
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        raise _lib.NotPicklableError(Status.INVALID_USAGE, _PICKLE_ADVICE)

    # No __del__: destroying is collective and must not run at a random time
    # in one rank's garbage collector. Close comms explicitly.


def comm_by_id(comm_id):
    """The live Comm registered under `comm_id` (for the torch custom ops).
    No lock: one dict read is atomic (the lock orders the writes), and
    torch.compile traces through this where a lock would break its graph."""
    comm = _registry.get(int(comm_id))
    if comm is None:
        raise _lib.InvalidUsageError(Status.INVALID_USAGE,
                                     f"commgemm comm id {comm_id} is not a live Comm (closed?)")
    return comm


# --------------------------------------------------------------------------
# numpy operands
# --------------------------------------------------------------------------

def _np():
    import numpy
    return numpy


def _bf16_dtype():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return _np().dtype(ml_dtypes.bfloat16)


def numpy_dtype_to_cgm(dtype):
    np = _np()
    dtype = np.dtype(dtype)
    if dtype == np.float32:
        return DType.FP32
    if dtype == np.float16:
        return DType.FP16
    bf16 = _bf16_dtype()
    if bf16 is not None and dtype == bf16:
        return DType.BF16
    if _fp8.is_fp8_name(dtype.name):
        return _fp8.cgm_dtype(dtype.name)
    raise InvalidArgumentError(
        Status.INVALID_ARGUMENT,
        f"dtype {dtype}: expected float32, float16, bfloat16 or (X and W, with their scales) float8_e4m3fn / "
        "float8_e5m2 (bfloat16 and float8 need the ml_dtypes package)")


def _matrix(name, a, allow_none=False, scale=None, w_like=False):
    """cgm_matrix of a 2-D numpy array whose rows are contiguous (any row
    stride >= cols: ld comes from strides[0]). The caller keeps `a` alive
    for the duration of the call. fp8 arrays take their scales (`scale`,
    a float32 array whose shape gives the recipe: commgemm.fp8.scaling_of;
    w_like: the W operand's block recipe), which the caller keeps alive too."""
    m = _plain_matrix(name, a, allow_none)
    if m is not None:
        _set_scale(name, m, a, scale, w_like)
    return m


def _set_scale(name, m, a, scale, w_like):
    """The scale and scaling of an fp8 matrix; refuses a missing scale, a
    scale on a non-fp8 matrix, a scale of the wrong shape or dtype."""
    np = _np()
    fp8 = m.dtype in (DType.FP8_E4M3, DType.FP8_E5M2)
    if not fp8:
        if scale is not None:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"{name}_scale given, but {name} is {a.dtype}: scales go with float8 "
                                       f"operands only; pass {name}_scale=None or a float8 {name}")
        return
    if scale is None:
        block = _fp8.Scaling.BLOCK_128X128 if w_like else _fp8.Scaling.BLOCK_1X128
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{name} is {a.dtype} without {name}_scale: an fp8 operand needs its fp32 scales "
                                   f"(value = code * scale): pass {name}_scale=, shape () or (1,) for one scale, "
                                   f"{_fp8.scale_shape(block, m.rows, m.cols)}"
                                   " for block scaling (commgemm.fp8.quantize makes both)")
    if not isinstance(scale, np.ndarray) or scale.dtype != np.float32 or not scale.flags.c_contiguous:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{name}_scale: expected a C-contiguous float32 numpy array, got "
                                   f"{type(scale).__name__} {getattr(scale, 'dtype', '')} (numpy.ascontiguousarray("
                                   f"s, dtype=numpy.float32))")
    m.scaling = int(_fp8.scaling_of(name, scale.shape, m.rows, m.cols, w_like))
    if scale.size:
        m.scale = scale.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def _plain_matrix(name, a, allow_none=False):
    np = _np()
    if a is None:
        if allow_none:
            return None
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} is None")
    if not isinstance(a, np.ndarray):
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{name}: expected a numpy.ndarray, got {type(a).__name__}")
    if a.ndim == 1:
        a = a.reshape(1, -1)  # a bias row
    if a.ndim != 2:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{name} has shape {a.shape}: expected a 2-D matrix")
    dtype = numpy_dtype_to_cgm(a.dtype)
    rows, cols = a.shape
    item = a.itemsize
    if rows * cols == 0:
        return _lib.matrix(a.ctypes.data if a.size else None, dtype, rows, cols, 0)
    if cols > 1 and a.strides[1] != item:
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT,
            f"{name} (shape {a.shape}, strides {a.strides}) does not have contiguous rows: its inner "
            f"stride is {a.strides[1]} bytes, expected {item} (the element size); commgemm takes "
            f"row-major matrices with a row stride (ld); pass numpy.ascontiguousarray({name}) "
            f"(a transposed view is not row-major: choose the layout instead)")
    if rows > 1 and (a.strides[0] <= 0 or a.strides[0] % item):
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT,
            f"{name} (shape {a.shape}, strides {a.strides}) has a row stride of {a.strides[0]} bytes: "
            f"expected a positive multiple of the element size {item}; pass numpy.ascontiguousarray({name})")
    ld = a.strides[0] // item if rows > 1 else cols
    return _lib.matrix(a.ctypes.data, dtype, rows, cols, ld)


def _writable(name, a):
    if a is not None and not a.flags.writeable:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} is read-only: outputs must be writable")


def _fp8_output(name, my, out, y_scale, y_amax, opts):
    """An fp8 output's quantization scale (y_scale: a float or a 1-element
    float32 array; it multiplies on quantize) and amax (y_amax: None or a
    writable 1-element float32 array that receives max |r|). Returns what
    the call must keep alive."""
    np = _np()
    fp8 = my is not None and my.dtype in (DType.FP8_E4M3, DType.FP8_E5M2)
    if not fp8:
        if y_scale is not None or y_amax is not None:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"y_scale / y_amax given, but {name} is {getattr(out, 'dtype', None)}: they go "
                                       "with a float8 output only (out_dtype=ml_dtypes.float8_e4m3fn or float8_e5m2)")
        return None
    if y_scale is None:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{name} is {out.dtype} without y_scale: an fp8 output needs its quantization "
                                   "scale (Y = sat(rne(r * y_scale))): pass y_scale=1.0 or fp8_max / amax")
    ys = np.ascontiguousarray(np.asarray(y_scale, dtype=np.float32).reshape(-1))
    if ys.size != 1:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"y_scale has {ys.size} values: expected one (per-tensor scaling of Y)")
    my.scale = ys.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    my.scaling = int(_fp8.Scaling.TENSOR)
    if y_amax is not None:
        if not (isinstance(y_amax, np.ndarray) and y_amax.dtype == np.float32 and y_amax.size == 1
                and y_amax.flags.writeable):
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       "y_amax: expected a writable 1-element float32 numpy array (it receives "
                                       "max |r| of this rank's Y), e.g. numpy.zeros(1, numpy.float32)")
        opts.y_amax = y_amax.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    return ys


def _options(layout="TN", accumulate=False, algo="auto", splits=0, backend=None, allow_tf32=False,
             partial_dtype=None, gemm_reduction=None, fp8_fast_accum=False):
    o = _lib.cgm_op_options.init()
    o.layout = _lib.parse_layout(layout)
    o.accumulate = int(bool(accumulate))
    o.algo = _lib.parse_algo(algo)
    o.splits = int(splits or 0)
    o.backend = _lib.parse_backend(backend)
    o.allow_tf32 = int(bool(allow_tf32))
    o.partial_dtype = _lib.parse_partial_dtype(partial_dtype)
    o.gemm_reduction = _lib.parse_gemm_reduction(gemm_reduction)
    o.fp8_fast_accum = int(bool(fp8_fast_accum))
    return o


def _ref(m):
    return ctypes.byref(m) if m is not None else None


class _Epilogue:
    """An op's epilogue (commgemm.h "Epilogues") on numpy arrays: sets the
    options' fields, allocates the aux and bgrad outputs the caller did not
    pass, and keeps their descriptors alive for the call. extras: the
    outputs the op hands back after out (and gathered): aux for GELU_AUX,
    then bgrad for DGELU_BGRAD and BGRAD."""

    def __init__(self, opts, epilogue, aux, bgrad, out, bgrad_len):
        e = _lib.parse_epilogue(epilogue)
        opts.epilogue = int(e)
        self.extras = []
        self._keep = []
        writes_aux = e == _lib.Epilogue.GELU_AUX
        fp8_out = out is not None and _fp8.is_fp8_name(_np().dtype(out.dtype).name)
        if writes_aux and aux is None and out is not None:  # Y's dtype; bf16 beside an fp8 Y
            aux = _np().empty(out.shape, dtype=_bf16_dtype() if fp8_out else out.dtype)
        if e in (_lib.Epilogue.DGELU_BGRAD, _lib.Epilogue.BGRAD) and bgrad is None and out is not None:
            bgrad = _np().empty((bgrad_len,), dtype=_np().float32 if fp8_out else out.dtype)
        if writes_aux:
            _writable("aux", aux)
            self.extras.append(aux)
        if bgrad is not None:
            _writable("bgrad", bgrad)
            if e in (_lib.Epilogue.DGELU_BGRAD, _lib.Epilogue.BGRAD):
                self.extras.append(bgrad)
        # Whatever was passed goes to the library, which refuses what the
        # epilogue does not take (an aux with GELU, a missing one with DGELU).
        for field, name, a in (("aux", "aux", aux), ("bgrad", "bgrad", bgrad)):
            if a is None:
                continue
            mat = _plain_matrix(name, a)
            self._keep.append(mat)
            setattr(opts, field, ctypes.pointer(mat))

    def result(self, *outs):
        """The op's return value: its outputs, then the extras; one alone bare."""
        got = [o for o in outs if o is not None] + self.extras
        return got[0] if len(got) == 1 else tuple(got)


def _check_comm(comm):
    if not isinstance(comm, Comm):
        raise TypeError(f"comm: expected a commgemm.Comm, got {type(comm).__name__}")
    return comm.handle


def _out_cols(layout, w):
    # n: rows of W for TN ([n, k]), cols for NN/NT ([k, n]); W must be 2-D here
    return w.shape[0] if layout == Layout.TN else w.shape[1]


def _split_len(layout, x):
    # the split (m) dimension of X: rows for TN/NN ([m, k]), cols for NT ([k, m])
    return x.shape[1] if layout == Layout.NT else x.shape[0]


def _alloc(shape, dtype, accumulate, name):
    if accumulate:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"accumulate=True needs the {name} array to accumulate into (pass {name}=...)")
    return _np().empty(shape, dtype=dtype)


def _check_2d(name, a):
    if getattr(a, "ndim", None) != 2:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                   f"{name}: expected a 2-D numpy array, got {getattr(a, 'shape', type(a))}")


def all_gather_gemm(comm, x_shard, w, bias=None, out=None, gathered=None, layout="TN", accumulate=False,
                    algo="auto", splits=0, backend=None, m=None, out_dtype=None, allow_tf32=False,
                    gemm_reduction=None, x_scale=None, w_scale=None, y_scale=None, y_amax=None,
                    gathered_scale=None, fp8_fast_accum=False, epilogue=None, aux=None, bgrad=None):
    """AG+GEMM on numpy arrays (host backend): out[m, n] = allgather(x_shard) . op(w) (+ bias).

    x_shard: this rank's rows, [m_r, k] (TN, NN) or [k, m_r] (NT), m_r = shard_rows(m, rank, P).
    w: [n, k] (TN) or [k, n] (NN, NT). m: total rows; default out.shape[0], else m_r * P (equal
    shards: pass m when the shards are uneven). gathered: None, True (allocate) or an array that
    receives the gathered input. gemm_reduction: "any" or "fp32" (None: the comm's; every op
    takes it, see Config). epilogue: None, "gelu", "gelu_aux", "dgelu" or "dgelu_bgrad"
    (commgemm.h "Epilogues"); aux: the pre-activation [m, n] that gelu_aux writes (allocated
    when None) and dgelu/dgelu_bgrad read; bgrad: the [n] bias gradient of dgelu_bgrad
    (allocated when None). Returns out, then gathered (when not None), then the aux that
    gelu_aux wrote, then the bgrad; a single array alone.

    FP8 (layout TN; docs/FP8.md): x_shard and w float8 (ml_dtypes) with x_scale and w_scale
    (commgemm.fp8: () / (1,) per tensor, 2-D per block); the output defaults to float32, or is
    float8 with y_scale (and y_amax, a 1-element float32 array receiving max |r|). With
    gathered, also its scales (gathered_scale: P floats per tensor, rank s's at [s], or
    [m, ceil(k/128)]), returned after gathered.
    """
    handle = _check_comm(comm)
    lay = _lib.parse_layout(layout)
    _check_2d("x_shard", x_shard)
    _check_2d("w", w)
    _fp8_layout(lay, x_shard, w)
    if m is None:
        m = out.shape[0] if out is not None else _split_len(lay, x_shard) * comm.size
    if out is None:
        out = _alloc((m, _out_cols(lay, w)), out_dtype or _default_out(x_shard), accumulate, "out")
    want_gathered = gathered is not None and gathered is not False
    if gathered is True:
        k = x_shard.shape[0] if lay == Layout.NT else x_shard.shape[1]
        gathered = _np().empty((k, m) if lay == Layout.NT else (m, k), dtype=x_shard.dtype)
    _writable("out", out)
    _writable("gathered", gathered if want_gathered else None)
    mx = _matrix("x_shard", x_shard, scale=x_scale)
    mw = _matrix("w", w, scale=w_scale, w_like=True)
    mb = _matrix("bias", bias, allow_none=True)
    my = _plain_matrix("out", out)
    mg = _plain_matrix("gathered", gathered) if want_gathered else None
    fp8_gathered = want_gathered and mx.dtype in (DType.FP8_E4M3, DType.FP8_E5M2)
    if fp8_gathered:
        if gathered_scale is None:
            P = comm.size
            shape = (P,) if mx.scaling == _fp8.Scaling.TENSOR else _fp8.scale_shape(mx.scaling, m, mx.cols)
            gathered_scale = _np().zeros(shape, _np().float32)
        _writable("gathered_scale", gathered_scale)
        if gathered_scale.size:
            mg.scale = gathered_scale.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        mg.scaling = mx.scaling
    opts = _options(lay, accumulate, algo, splits, backend, allow_tf32, gemm_reduction=gemm_reduction,
                    fp8_fast_accum=fp8_fast_accum)
    ys = _fp8_output("out", my, out, y_scale, y_amax, opts)  # noqa: F841 - kept alive for the call
    ep = _Epilogue(opts, epilogue, aux, bgrad, out, out.shape[1])
    check(_lib.lib().cgm_all_gather_gemm(handle, _ref(mx), _ref(mw), _ref(mb), _ref(my),
                                         _ref(mg), ctypes.byref(opts), None))
    return ep.result(out, gathered if want_gathered else None, gathered_scale if fp8_gathered else None)


def _fp8_layout(lay, *arrays):
    """fp8 operands take layout TN only: refused here, before their scales'
    shapes (which assume TN) are read, as the library refuses it."""
    if lay != Layout.TN and any(a is not None and _fp8.is_fp8_name(getattr(a, "dtype", "")) for a in arrays):
        raise _lib.NotSupportedError(
            Status.NOT_SUPPORTED,
            f"fp8 operands with layout {lay.name}: fp8 takes layout TN only (Hopper's FP8 tensor cores read both "
            "operands K-major); pass x as [m, k] and w as [n, k] (transposed copies) with layout='TN'")


def _default_out(x):
    """The output dtype when none is given: x's, float32 for fp8 inputs."""
    np = _np()
    return np.float32 if _fp8.is_fp8_name(np.dtype(x.dtype).name) else x.dtype


def _gemm_then_reduce(c_function, comm, x, w, bias, out, layout, accumulate, algo, splits, backend, out_dtype,
                      allow_tf32, partial_dtype, gemm_reduction, shard_rows, fp8, epilogue, aux, bgrad):
    """GEMM+RS (shard_rows: out holds this rank's rows) and GEMM+AR (all rows)."""
    handle = _check_comm(comm)
    lay = _lib.parse_layout(layout)
    _check_2d("x", x)
    _check_2d("w", w)
    _fp8_layout(lay, x, w)
    if out is None:
        m = _split_len(lay, x)
        rows = comm.shard_rows(m) if shard_rows else m
        out = _alloc((rows, _out_cols(lay, w)), out_dtype or _default_out(x), accumulate, "out")
    _writable("out", out)
    x_scale, w_scale, y_scale, y_amax, fast = fp8
    mx = _matrix("x", x, scale=x_scale)
    mw = _matrix("w", w, scale=w_scale, w_like=True)
    mb = _matrix("bias", bias, allow_none=True)
    my = _plain_matrix("out", out)
    opts = _options(lay, accumulate, algo, splits, backend, allow_tf32, partial_dtype, gemm_reduction, fast)
    ys = _fp8_output("out", my, out, y_scale, y_amax, opts)  # noqa: F841 - kept alive for the call
    ep = _Epilogue(opts, epilogue, aux, bgrad, out, out.shape[1])
    check(c_function(handle, _ref(mx), _ref(mw), _ref(mb), _ref(my), ctypes.byref(opts), None))
    return ep.result(out)


def gemm_reduce_scatter(comm, x, w, bias=None, out=None, layout="TN", accumulate=False, algo="auto", splits=0,
                        backend=None, out_dtype=None, allow_tf32=False, partial_dtype=None, gemm_reduction=None,
                        x_scale=None, w_scale=None, y_scale=None, y_amax=None, fp8_fast_accum=False,
                        epilogue=None, aux=None, bgrad=None):
    """GEMM+RS on numpy arrays: out[m_r, n] = this rank's rows of sum_ranks x . op(w) (+ bias, once).

    x: [m, k_loc] (TN, NN) or [k_loc, m] (NT); w: [n, k_loc] (TN) or [k_loc, n] (NN, NT).
    partial_dtype: "fp32" or "output", the same on every rank (None: the comm's); the host
    backend always sums exact fp32 partials. epilogue, aux, bgrad: as all_gather_gemm's, applied
    after the reduction (aux shaped like out; dgelu_bgrad's bgrad sums all m rows, on every rank).
    FP8 (x_scale, w_scale, y_scale, y_amax, fp8_fast_accum): as all_gather_gemm's; each rank's x
    and w have their own scales.
    """
    return _gemm_then_reduce(_lib.lib().cgm_gemm_reduce_scatter, comm, x, w, bias, out, layout, accumulate, algo,
                             splits, backend, out_dtype, allow_tf32, partial_dtype, gemm_reduction, True,
                             (x_scale, w_scale, y_scale, y_amax, fp8_fast_accum), epilogue, aux, bgrad)


def gemm_all_reduce(comm, x, w, bias=None, out=None, layout="TN", accumulate=False, algo="auto", splits=0,
                    backend=None, out_dtype=None, allow_tf32=False, partial_dtype=None, gemm_reduction=None,
                    x_scale=None, w_scale=None, y_scale=None, y_amax=None, fp8_fast_accum=False,
                    epilogue=None, aux=None, bgrad=None):
    """GEMM+AR on numpy arrays: out[m, n] = sum_ranks x . op(w) (+ bias, once), on every rank.
    partial_dtype, gemm_reduction, epilogue, aux, bgrad, FP8: as gemm_reduce_scatter's (an fp8
    out is the same on every rank where every rank passes the same y_scale)."""
    return _gemm_then_reduce(_lib.lib().cgm_gemm_all_reduce, comm, x, w, bias, out, layout, accumulate, algo,
                             splits, backend, out_dtype, allow_tf32, partial_dtype, gemm_reduction, False,
                             (x_scale, w_scale, y_scale, y_amax, fp8_fast_accum), epilogue, aux, bgrad)


def bulk_overlap(comm, a=None, b=None, c=None, bias=None, send=None, recv=None, collective="all_gather",
                 layout="TN", accumulate=False, algo="auto", splits=0, backend=None, m=None, out_dtype=None,
                 allow_tf32=False, gemm_reduction=None, a_scale=None, b_scale=None, c_scale=None, c_amax=None,
                 fp8_fast_accum=False, epilogue=None, aux=None, bgrad=None):
    """A local GEMM c = op(a) . op(b) (+ bias) overlapped with an unrelated collective
    (all_gather: send [m_r, cols] -> recv [m, cols]; reduce_scatter: send [m, cols] -> recv
    [m_r, cols], fp32 sums). Either half may be left out (a, b, c None, or send, recv None).
    m (all_gather only): total rows, default recv.shape[0], else m_r * P. epilogue, aux,
    bgrad: the GEMM's, as all_gather_gemm's, plus "bgrad" (bgrad [c rows] = sums of op(a)
    along the contraction: the bias gradient of a weight-gradient GEMM).
    FP8: a and b float8 (layout TN) with a_scale and b_scale (as all_gather_gemm's x_scale and
    w_scale), c float32 by default or float8 with c_scale (and c_amax).
    Returns (c, recv) (None for a half left out), then the aux and bgrad the epilogue wrote."""
    handle = _check_comm(comm)
    lay = _lib.parse_layout(layout)
    coll = _lib.parse_collective(collective)
    np = _np()
    _fp8_layout(lay, a, b)
    has_gemm = a is not None or b is not None or c is not None
    if has_gemm and a is not None and b is not None and c is None:
        _check_2d("a", a)
        _check_2d("b", b)
        c = _alloc((_split_len(lay, a), _out_cols(lay, b)), out_dtype or _default_out(a), accumulate, "c")
    if send is not None and recv is None:
        _check_2d("send", send)
        if coll == Collective.ALL_GATHER:
            rows = m if m is not None else send.shape[0] * comm.size
        else:
            rows = comm.shard_rows(send.shape[0])
        recv = np.empty((rows, send.shape[1]), dtype=send.dtype)
    _writable("c", c)
    _writable("recv", recv)
    ma = _matrix("a", a, allow_none=True, scale=a_scale)
    mb_ = _matrix("b", b, allow_none=True, scale=b_scale, w_like=True)
    mbias = _matrix("bias", bias, allow_none=True)
    mc = _plain_matrix("c", c, allow_none=True)
    ms = _matrix("send", send, allow_none=True)
    mr = _matrix("recv", recv, allow_none=True)
    opts = _options(lay, accumulate, algo, splits, backend, allow_tf32, gemm_reduction=gemm_reduction,
                    fp8_fast_accum=fp8_fast_accum)
    cs = _fp8_output("c", mc, c, c_scale, c_amax, opts)  # noqa: F841 - kept alive for the call
    bgrad_len = 0 if c is None else c.shape[0 if _lib.parse_epilogue(epilogue) == _lib.Epilogue.BGRAD else 1]
    ep = _Epilogue(opts, epilogue, aux, bgrad, c, bgrad_len)
    check(_lib.lib().cgm_bulk_overlap(handle, _ref(ma), _ref(mb_), _ref(mbias), _ref(mc), int(coll),
                                      _ref(ms), _ref(mr), ctypes.byref(opts), None))
    return (c, recv, *ep.extras)
