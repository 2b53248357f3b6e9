"""The start the Python tests share: this repository's python/ first on
sys.path (so they test this tree's commgemm), and a pytest mark that skips a
module when libcommgemm.so cannot be loaded, saying why."""

import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

# torch first, where it is installed: libcommgemm.so loads the system's
# libnccl.so.2, and a torch imported after it binds to that one, which can be
# older than the NCCL torch was built with (torch 2.15: "undefined symbol:
# ncclCommResume"); imported first, torch's NCCL serves both (docs/PYTHON.md).
try:
    import torch  # noqa: F401
except ImportError:
    pass

import commgemm  # noqa: E402
from commgemm import _lib  # noqa: E402


def skip_without_library():
    """pytestmark for a module that needs the library."""
    try:
        _lib.load()
    except commgemm.CommGemmError as e:  # pragma: no cover - depends on the build
        return pytest.mark.skipif(True, reason=f"libcommgemm.so not available: {e}")
    return pytest.mark.skipif(False, reason="libcommgemm.so loaded")
