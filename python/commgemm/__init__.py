"""commgemm: tensor-parallel communication overlapped with the GEMMs around it.

Python bindings of include/commgemm.h through ctypes (no compiled extension):

- `commgemm.Comm`: the communicator (`Comm.local`, `Comm.from_env`,
  `Comm.from_nccl`, `Comm.from_process_group`).
- numpy ops on the host backend: `all_gather_gemm`, `gemm_reduce_scatter`,
  `gemm_all_reduce`, `bulk_overlap`.
- `commgemm.torch`: CUDA tensor ops registered as torch custom ops and the
  `ColumnParallelLinear` / `RowParallelLinear` layers (imports torch).

The shared library is loaded on first use (see commgemm._lib for where it is
looked for; COMMGEMM_LIB overrides).
"""

from ._lib import (Algo, Backend, Collective, CommGemmError, CublasError, CudaError, DType,  # noqa: F401
                   Epilogue, GemmReduction, InternalError, InvalidArgumentError, InvalidUsageError, Layout,
                   MismatchError,
                   NcclError, NotPicklableError, NotSupportedError, Op, OutOfMemoryError, PartialDtype,
                   PeerFailedError, Status, SystemError_, TimeoutError_, UnavailableError, library_path,
                   shard_offset, shard_rows)
from ._lib import VERSION as _VERSION
from .core import (Comm, Config, all_gather_gemm, bulk_overlap, gemm_all_reduce,  # noqa: F401
                   gemm_reduce_scatter)

__version__ = ".".join(str(v) for v in _VERSION)

__all__ = ["Algo", "Backend", "Collective", "CommGemmError", "CublasError", "CudaError", "DType", "Epilogue",
           "GemmReduction",
           "InternalError", "InvalidArgumentError", "InvalidUsageError", "Layout", "MismatchError", "NcclError",
           "NotPicklableError", "NotSupportedError", "Op", "OutOfMemoryError", "PartialDtype", "PeerFailedError",
           "Status", "SystemError_", "TimeoutError_", "UnavailableError", "library_path", "shard_offset",
           "shard_rows", "Comm", "Config", "all_gather_gemm", "bulk_overlap", "gemm_all_reduce",
           "gemm_reduce_scatter", "library_version", "last_error"]


def library_version():
    """Version of the loaded libcommgemm.so (MAJOR * 10000 + MINOR * 100 + PATCH)."""
    from . import _lib
    return _lib.lib().cgm_version()


def last_error():
    """cgm_last_error() of this thread."""
    from . import _lib
    return _lib.last_error()
