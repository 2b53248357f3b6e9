"""ctypes mirror of include/commgemm.h: structs, enums, functions, errors.

This is the only module that knows the C layout. Everything else in the
package goes through `lib()` (the loaded library, functions typed) and
`check()` (status -> exception).

Struct layouts are those of the x86-64 / aarch64 Linux ABI (LP64): size_t and
pointers are 8 bytes, enums and ints 4, int64_t 8. The sizes are asserted at
import time (see _EXPECTED_SIZES) so that a header change that is not
mirrored here fails loudly instead of corrupting memory; the C library also
rejects a wrong `struct_size` field with CGM_ERROR_INVALID_ARGUMENT.

Where the library comes from (first match wins):
  1. $COMMGEMM_LIB: a path to libcommgemm.so;
  2. the package directory (pip install ./python puts it in commgemm/lib/);
  3. the repository's build trees: <repo>/build/libcommgemm.so, then any
     other <repo>/build*/libcommgemm.so (newest first);
  4. the system loader (libcommgemm.so.0, libcommgemm.so; after cmake --install).
A library of another major.minor than VERSION is passed over (listed in the
error when nothing else is found).
"""

import ctypes
import ctypes.util
import enum
import glob
import os
import threading

# --------------------------------------------------------------------------
# Enums (values as in commgemm.h; never renumbered)
# --------------------------------------------------------------------------


class Status(enum.IntEnum):
    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_USAGE = 2
    NOT_SUPPORTED = 3
    UNAVAILABLE = 4
    OUT_OF_MEMORY = 5
    TIMEOUT = 6
    PEER_FAILED = 7
    MISMATCH = 8
    SYSTEM = 9
    CUDA = 10
    NCCL = 11
    CUBLAS = 12
    INTERNAL = 13


class DType(enum.IntEnum):
    FP32 = 0
    BF16 = 1
    FP16 = 2
    FP8_E4M3 = 3
    FP8_E5M2 = 4


class Scaling(enum.IntEnum):
    """cgm_scaling: how an fp8 matrix's scales map to its elements (commgemm.h "FP8")."""
    NONE = 0
    TENSOR = 1
    BLOCK_1X128 = 2  # X: one scale per row per 128 k
    BLOCK_128X128 = 3  # W: one scale per 128 x 128 block


class Backend(enum.IntEnum):
    DEFAULT = 0
    AUTO = 1
    HOST = 2
    P2P = 3
    NCCL = 4
    CUBLASMP = 5


class Algo(enum.IntEnum):
    AUTO = 0
    SPLIT_PIPELINED = 1
    RING = 2
    BULK = 3
    NO_OVERLAP = 4
    FUSED = 5  # p2p: commgemm's own Hopper kernel (split elsewhere)
    # 6 is retired: never reuse it


class Layout(enum.IntEnum):
    TN = 0
    NN = 1
    NT = 2


class Op(enum.IntEnum):
    ALL_GATHER_GEMM = 0
    GEMM_REDUCE_SCATTER = 1
    GEMM_ALL_REDUCE = 2
    BULK = 3


class PartialDtype(enum.IntEnum):
    """cgm_partial_dtype: what GEMM+RS/AR's partials are rounded to before they travel."""
    DEFAULT = 0  # config: COMMGEMM_PARTIAL_DTYPE, else FP32; per call: the comm's
    FP32 = 1
    OUTPUT = 2


class GemmReduction(enum.IntEnum):
    """cgm_gemm_reduction: how cuBLASLt may add the parts of a split-k dot product."""
    DEFAULT = 0  # config: COMMGEMM_GEMM_REDUCTION, else ANY; per call: the comm's
    ANY = 1
    FP32 = 2


class BootstrapKind(enum.IntEnum):
    LOCAL = 1
    NCCL = 2


class Collective(enum.IntEnum):
    ALL_GATHER = 0
    REDUCE_SCATTER = 1


UNSET = -1  # CGM_UNSET
OP_COUNT = 4  # CGM_OP_COUNT_

# --------------------------------------------------------------------------
# Structs
# --------------------------------------------------------------------------


class cgm_matrix(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),  # cgm_dtype
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("ld", ctypes.c_int64),
        ("scale", ctypes.POINTER(ctypes.c_float)),
        ("scaling", ctypes.c_int),  # cgm_scaling (read for fp8 dtypes only)
    ]


class cgm_bootstrap(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("kind", ctypes.c_int),  # cgm_bootstrap_kind
        ("rank", ctypes.c_int),
        ("nranks", ctypes.c_int),
        ("rendezvous", ctypes.c_char_p),
        ("nccl_comm", ctypes.c_void_p),
    ]

    @classmethod
    def init(cls):
        """CGM_BOOTSTRAP_INIT."""
        return cls(ctypes.sizeof(cls), BootstrapKind.LOCAL, -1, 0, None, None)


class cgm_config(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_int),  # cgm_backend
        ("op_backend", ctypes.c_int * OP_COUNT),
        ("max_m", ctypes.c_int64),
        ("max_n", ctypes.c_int64),
        ("max_k", ctypes.c_int64),
        ("timeout_ms", ctypes.c_int64),
        ("algo", ctypes.c_int),
        ("splits", ctypes.c_int),
        ("host_threads", ctypes.c_int),
        ("check_agreement", ctypes.c_int),
        ("partial_dtype", ctypes.c_int),  # cgm_partial_dtype
        ("gemm_reduction", ctypes.c_int),  # cgm_gemm_reduction
    ]

    @classmethod
    def init(cls):
        """CGM_CONFIG_INIT: every field unset."""
        c = cls()
        c.struct_size = ctypes.sizeof(cls)
        c.backend = Backend.DEFAULT
        for i in range(OP_COUNT):
            c.op_backend[i] = Backend.DEFAULT
        for name in ("max_m", "max_n", "max_k", "timeout_ms", "algo", "splits",
                     "host_threads", "check_agreement"):
            setattr(c, name, UNSET)
        c.partial_dtype = PartialDtype.DEFAULT
        c.gemm_reduction = GemmReduction.DEFAULT
        return c


class cgm_op_options(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("layout", ctypes.c_int),
        ("accumulate", ctypes.c_int),
        ("algo", ctypes.c_int),
        ("splits", ctypes.c_int),
        ("backend", ctypes.c_int),
        ("allow_tf32", ctypes.c_int),
        ("partial_dtype", ctypes.c_int),  # cgm_partial_dtype
        ("gemm_reduction", ctypes.c_int),  # cgm_gemm_reduction
        ("fp8_fast_accum", ctypes.c_int),
        ("y_amax", ctypes.POINTER(ctypes.c_float)),
        ("epilogue", ctypes.c_int),  # cgm_epilogue
        ("aux", ctypes.POINTER(cgm_matrix)),
        ("bgrad", ctypes.POINTER(cgm_matrix)),
    ]

    @classmethod
    def init(cls):
        """CGM_OP_OPTIONS_INIT."""
        return cls(ctypes.sizeof(cls), Layout.TN, 0, Algo.AUTO, 0, Backend.DEFAULT, 0, PartialDtype.DEFAULT,
                   GemmReduction.DEFAULT, 0, None, 0, None, None)


# sizeof() of each struct on LP64 Linux, worked out from commgemm.h by hand
# (offsets in the comments). If one fails, commgemm.h changed: mirror it.
_EXPECTED_SIZES = {
    # data 0, dtype 8 (+4 pad), rows 16, cols 24, ld 32, scale 40, scaling 48 (+4 pad)
    cgm_matrix: 56,
    # struct_size 0, kind 8, rank 12, nranks 16 (+4 pad), rendezvous 24, nccl_comm 32
    cgm_bootstrap: 40,
    # struct_size 0, backend 8, op_backend 12..28 (+4 pad), max_m 32, max_n 40,
    # max_k 48, timeout_ms 56, algo 64, splits 68, host_threads 72, check_agreement 76,
    # partial_dtype 80, gemm_reduction 84
    cgm_config: 88,
    # struct_size 0, layout 8, accumulate 12, algo 16, splits 20, backend 24, allow_tf32 28,
    # partial_dtype 32, gemm_reduction 36, fp8_fast_accum 40 (+4 pad), y_amax 48, epilogue 56 (+4 pad),
    # aux 64, bgrad 72
    cgm_op_options: 80,
}
if ctypes.sizeof(ctypes.c_void_p) == 8 and ctypes.sizeof(ctypes.c_size_t) == 8:
    for _cls, _size in _EXPECTED_SIZES.items():
        assert ctypes.sizeof(_cls) == _size, (
            f"commgemm: ctypes.sizeof({_cls.__name__}) = {ctypes.sizeof(_cls)}, expected {_size}; "
            "python/commgemm/_lib.py no longer mirrors include/commgemm.h")

# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class CommGemmError(Exception):
    """A commgemm call failed. `status` is the cgm_status (a Status), `message`
    the detail from cgm_last_error() (what was expected, what was found, what
    to do). Subclasses per status; some also derive from the matching builtin
    (InvalidArgumentError is a ValueError, TimeoutError_ a TimeoutError...)."""

    status = None  # set on subclasses

    def __init__(self, status, message=""):
        status = Status(status) if int(status) in Status._value2member_map_ else status
        self.status = status
        self.message = message
        Exception.__init__(self, status, message)

    def __str__(self):
        name = self.status.name if isinstance(self.status, Status) else str(self.status)
        return f"[CGM_ERROR_{name}] {self.message}" if self.message else f"CGM_ERROR_{name}"

    def __reduce__(self):  # picklable across processes, despite the builtin bases
        return (type(self), (int(self.status), self.message))


class InvalidArgumentError(CommGemmError, ValueError):
    pass


class InvalidUsageError(CommGemmError, RuntimeError):
    pass


class NotSupportedError(CommGemmError, NotImplementedError):
    pass


class NotPicklableError(InvalidUsageError, TypeError):
    """A live Comm (and so a layer or model holding one) was pickled
    (pickle, torch.save, multiprocessing): save the state_dict() instead."""


class UnavailableError(CommGemmError, RuntimeError):
    pass


class OutOfMemoryError(CommGemmError, MemoryError):
    pass


class TimeoutError_(CommGemmError, TimeoutError):
    """A bounded wait expired (the message names the missing rank). The comm
    is broken: close it."""


class PeerFailedError(CommGemmError, RuntimeError):
    pass


class MismatchError(CommGemmError, RuntimeError):
    """Ranks disagree about a collective call; raised on every rank."""


class SystemError_(CommGemmError, OSError):
    pass


class CudaError(CommGemmError, RuntimeError):
    pass


class NcclError(CommGemmError, RuntimeError):
    pass


class CublasError(CommGemmError, RuntimeError):
    pass


class InternalError(CommGemmError, RuntimeError):
    pass


_ERROR_CLASSES = {
    Status.INVALID_ARGUMENT: InvalidArgumentError,
    Status.INVALID_USAGE: InvalidUsageError,
    Status.NOT_SUPPORTED: NotSupportedError,
    Status.UNAVAILABLE: UnavailableError,
    Status.OUT_OF_MEMORY: OutOfMemoryError,
    Status.TIMEOUT: TimeoutError_,
    Status.PEER_FAILED: PeerFailedError,
    Status.MISMATCH: MismatchError,
    Status.SYSTEM: SystemError_,
    Status.CUDA: CudaError,
    Status.NCCL: NcclError,
    Status.CUBLAS: CublasError,
    Status.INTERNAL: InternalError,
}
for _status, _cls in _ERROR_CLASSES.items():
    _cls.status = _status


def error_class(status):
    """The CommGemmError subclass for a status (CommGemmError if unknown)."""
    try:
        return _ERROR_CLASSES[Status(status)]
    except ValueError:
        return CommGemmError


def make_error(status, message):
    return error_class(status)(status, message)


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_REPO_DIR = os.path.dirname(os.path.dirname(_PACKAGE_DIR))  # python/commgemm -> repo


def candidate_paths():
    """Where load() looks, in order (paths that exist; the system loader last)."""
    found = []
    env = os.environ.get("COMMGEMM_LIB")
    if env:
        return [env]  # explicit: no fallback that would hide a typo
    for pattern in ("libcommgemm.so", "lib/libcommgemm.so", "lib64/libcommgemm.so",
                    "libcommgemm.so.*", "lib/libcommgemm.so.*", "lib64/libcommgemm.so.*"):
        found += sorted(glob.glob(os.path.join(_PACKAGE_DIR, pattern)))
    primary = os.path.join(_REPO_DIR, "build", "libcommgemm.so")
    if os.path.exists(primary):
        found.append(primary)
    others = [p for p in glob.glob(os.path.join(_REPO_DIR, "build*", "libcommgemm.so")) if p != primary]
    found += sorted(others, key=os.path.getmtime, reverse=True)
    return found


_lock = threading.Lock()
# The library version this package mirrors (include/commgemm.h's
# COMMGEMM_VERSION_*; CMakeLists.txt and pyproject.toml say the same). A
# library of another major.minor is passed over when loading: its structs or
# functions may differ from this mirror.
VERSION = (0, 1, 0)

_lib = None
_lib_path = None


def _declare(lib):
    """argtypes/restype of every function of commgemm.h."""
    P = ctypes.POINTER
    c_status = ctypes.c_int
    mat = P(cgm_matrix)
    sigs = {
        "cgm_version": (ctypes.c_int, []),
        "cgm_status_string": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_last_error": (ctypes.c_char_p, []),
        "cgm_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
        "cgm_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_shard_rows": (ctypes.c_int64, [ctypes.c_int64, ctypes.c_int, ctypes.c_int]),
        "cgm_shard_offset": (ctypes.c_int64, [ctypes.c_int64, ctypes.c_int, ctypes.c_int]),
        "cgm_backend_name": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_backend_from_name": (c_status, [ctypes.c_char_p, P(ctypes.c_int)]),
        "cgm_algo_name": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_algo_from_name": (c_status, [ctypes.c_char_p, P(ctypes.c_int)]),
        "cgm_layout_name": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_op_name": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_partial_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_partial_dtype_from_name": (c_status, [ctypes.c_char_p, P(ctypes.c_int)]),
        "cgm_gemm_reduction_name": (ctypes.c_char_p, [ctypes.c_int]),
        "cgm_gemm_reduction_from_name": (c_status, [ctypes.c_char_p, P(ctypes.c_int)]),
        "cgm_bootstrap_from_env": (c_status, [P(cgm_bootstrap)]),
        "cgm_comm_create": (c_status, [P(cgm_bootstrap), P(cgm_config), P(ctypes.c_void_p)]),
        "cgm_comm_init_nccl": (c_status, [ctypes.c_void_p, P(cgm_config), P(ctypes.c_void_p)]),
        "cgm_comm_destroy": (c_status, [ctypes.c_void_p]),
        "cgm_comm_rank": (c_status, [ctypes.c_void_p, P(ctypes.c_int)]),
        "cgm_comm_size": (c_status, [ctypes.c_void_p, P(ctypes.c_int)]),
        "cgm_comm_backend": (c_status, [ctypes.c_void_p, ctypes.c_int, P(ctypes.c_int)]),
        "cgm_comm_get_async_error": (c_status, [ctypes.c_void_p, P(ctypes.c_int)]),
        "cgm_comm_precision": (c_status, [ctypes.c_void_p, P(ctypes.c_int), P(ctypes.c_int)]),
        "cgm_all_gather_gemm": (c_status, [ctypes.c_void_p, mat, mat, mat, mat, mat,
                                           P(cgm_op_options), ctypes.c_void_p]),
        "cgm_gemm_reduce_scatter": (c_status, [ctypes.c_void_p, mat, mat, mat, mat,
                                               P(cgm_op_options), ctypes.c_void_p]),
        "cgm_gemm_all_reduce": (c_status, [ctypes.c_void_p, mat, mat, mat, mat,
                                           P(cgm_op_options), ctypes.c_void_p]),
        "cgm_bulk_overlap": (c_status, [ctypes.c_void_p, mat, mat, mat, mat, ctypes.c_int,
                                        mat, mat, P(cgm_op_options), ctypes.c_void_p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def load(path=None):
    """Loads libcommgemm.so (once; later calls return the same library).
    Raises UnavailableError saying where it looked when it is not found."""
    global _lib, _lib_path
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        paths = [path] if path else candidate_paths()
        if not path and not os.environ.get("COMMGEMM_LIB"):
            for name in ("libcommgemm.so.0", "libcommgemm.so", ctypes.util.find_library("commgemm")):
                if name and name not in paths:
                    paths.append(name)
        for p in paths:
            try:
                lib = ctypes.CDLL(p)
            except OSError as e:
                tried.append(f"{p}: {e}")
                continue
            lib = _declare(lib)
            v = lib.cgm_version()
            if (v // 10000, v // 100 % 100) != VERSION[:2]:
                tried.append(f"{p}: commgemm {v // 10000}.{v // 100 % 100}.{v % 100}, expected "
                             f"{VERSION[0]}.{VERSION[1]}.x for this Python package (a stale build?)")
                continue
            _lib = lib
            _lib_path = getattr(lib, "_name", p)
            return _lib
        raise UnavailableError(
            Status.UNAVAILABLE,
            "libcommgemm.so was not found or could not be loaded; tried:\n  " + "\n  ".join(tried or ["(nothing)"])
            + "\nbuild it (cmake -S . -B build && cmake --build build) or pip install ./python, "
            "or set COMMGEMM_LIB=/path/to/libcommgemm.so")


def lib():
    """The loaded library (loads it on first use)."""
    return _lib if _lib is not None else load()


def library_path():
    """Path of the loaded library (loads it on first use)."""
    lib()
    return _lib_path


def last_error():
    msg = lib().cgm_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def status_string(status):
    s = lib().cgm_status_string(int(status))
    return s.decode() if s else ""


def check(status):
    """Raises the CommGemmError subclass for a failing status, with the detail
    of cgm_last_error() (read on this thread, right after the call)."""
    if status != Status.SUCCESS:
        detail = last_error()
        if not detail:
            detail = status_string(status)
        raise make_error(status, detail)
    return status


def _name(fn, value):
    s = fn(int(value))
    return s.decode() if s else "invalid"


def backend_name(backend):
    return _name(lib().cgm_backend_name, backend)


def algo_name(algo):
    return _name(lib().cgm_algo_name, algo)


def dtype_name(dtype):
    return _name(lib().cgm_dtype_name, dtype)


def layout_name(layout):
    return _name(lib().cgm_layout_name, layout)


def op_name(op):
    return _name(lib().cgm_op_name, op)


def partial_dtype_name(value):
    return _name(lib().cgm_partial_dtype_name, value)


def gemm_reduction_name(value):
    return _name(lib().cgm_gemm_reduction_name, value)


def _parse(value, cls, from_name, default):
    """A `cls` member from a member, an int or a name (the C parser's, case
    insensitive; a bad one raises InvalidArgumentError with its message);
    None -> default."""
    if value is None:
        return default
    if isinstance(value, str):
        out = ctypes.c_int()
        check(from_name(value.encode(), ctypes.byref(out)))
        return cls(out.value)
    return cls(int(value))


def parse_backend(value):
    """A Backend from an enum, int or name ("p2p", "NCCL", ...); None -> DEFAULT."""
    return _parse(value, Backend, lib().cgm_backend_from_name, Backend.DEFAULT)


def parse_algo(value):
    return _parse(value, Algo, lib().cgm_algo_from_name, Algo.AUTO)


def parse_partial_dtype(value):
    """A PartialDtype from an enum, int or name ("fp32", "output"); None -> DEFAULT."""
    return _parse(value, PartialDtype, lib().cgm_partial_dtype_from_name, PartialDtype.DEFAULT)


def parse_gemm_reduction(value):
    """A GemmReduction from an enum, int or name ("any", "fp32"); None -> DEFAULT."""
    return _parse(value, GemmReduction, lib().cgm_gemm_reduction_from_name, GemmReduction.DEFAULT)


def parse_layout(value):
    if isinstance(value, str):
        try:
            return Layout[value.upper()]
        except KeyError:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"layout {value!r}: expected 'TN', 'NN' or 'NT'") from None
    return Layout(int(value))


def parse_collective(value):
    if isinstance(value, str):
        key = value.lower().replace("-", "_")
        names = {"all_gather": Collective.ALL_GATHER, "ag": Collective.ALL_GATHER, "allgather": Collective.ALL_GATHER,
                 "reduce_scatter": Collective.REDUCE_SCATTER, "rs": Collective.REDUCE_SCATTER,
                 "reducescatter": Collective.REDUCE_SCATTER}
        if key not in names:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"collective {value!r}: expected 'all_gather' or 'reduce_scatter'")
        return names[key]
    return Collective(int(value))


def parse_op(value):
    if isinstance(value, str):
        key = value.lower()
        names = {"ag_gemm": Op.ALL_GATHER_GEMM, "all_gather_gemm": Op.ALL_GATHER_GEMM,
                 "gemm_rs": Op.GEMM_REDUCE_SCATTER, "gemm_reduce_scatter": Op.GEMM_REDUCE_SCATTER,
                 "gemm_ar": Op.GEMM_ALL_REDUCE, "gemm_all_reduce": Op.GEMM_ALL_REDUCE,
                 "bulk": Op.BULK, "bulk_overlap": Op.BULK}
        if key not in names:
            raise InvalidArgumentError(Status.INVALID_ARGUMENT,
                                       f"op {value!r}: expected one of {sorted(names)}")
        return names[key]
    return Op(int(value))


def shard_rows(m, rank, nranks):
    """Rows of shard `rank` of `m` rows split over `nranks` (ceil split).
    Pure Python (same rule as cgm_shard_rows), usable without the library."""
    m, rank, nranks = int(m), int(rank), int(nranks)
    if m < 0 or nranks <= 0 or rank < 0 or rank >= nranks:
        return 0
    chunk = -(-m // nranks)
    return max(0, min(chunk, m - rank * chunk))


def shard_offset(m, rank, nranks):
    """First row of shard `rank` (clamped to m)."""
    m, rank, nranks = int(m), int(rank), int(nranks)
    if m < 0 or nranks <= 0 or rank < 0:
        return 0
    chunk = -(-m // nranks)
    return min(m, min(rank, nranks) * chunk)


def matrix(data, dtype, rows, cols, ld=0):
    """A cgm_matrix (data: an int address or None)."""
    return cgm_matrix(data or None, int(dtype), int(rows), int(cols), int(ld), None)
