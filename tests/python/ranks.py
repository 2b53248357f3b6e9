"""Runs a test body on several ranks: one spawned process per rank, each
with a host-backend Comm.local at a unique rendezvous, the body found in the
child by its module and name (so any test module's module-level functions
can be bodies). Fails the test with every rank's traceback.

    results = ranks.run(body, nranks, *args)   # body(comm, *args) on each rank
"""

import importlib
import multiprocessing
import os
import queue
import sys
import traceback
import uuid

import pytest

TIMEOUT_S = 240  # one multi-rank test, all ranks (the machine's cores are shared)


def _worker(module, name, path, rank, nranks, rendezvous, args, results):
    try:
        sys.path.insert(0, path)
        import libcheck  # noqa: F401 - this tree's python/ first on sys.path
        if os.environ.get("JAX_PLATFORMS") == "cpu" and "jax" in sys.modules:
            sys.modules["jax"].config.update("jax_platforms", "cpu")
        import commgemm
        fn = getattr(importlib.import_module(module), name)
        with commgemm.Comm.local(rank, nranks, rendezvous, timeout_ms=30000) as comm:
            out = fn(comm, *args)
        results.put((rank, "ok", out))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run(fn, nranks, *args, timeout=TIMEOUT_S):
    """fn(comm, *args) on `nranks` processes; their return values, by rank."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    rendezvous = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    here = os.path.dirname(os.path.abspath(__file__))
    procs = [ctx.Process(target=_worker, args=(fn.__module__, fn.__name__, here, r, nranks, rendezvous, args,
                                               results), daemon=True) for r in range(nranks)]
    for p in procs:
        p.start()
    got, errors = {}, []
    try:
        for _ in range(nranks):
            rank, status, payload = results.get(timeout=timeout)
            if status == "ok":
                got[rank] = payload
            else:
                errors.append(f"--- rank {rank}: {payload}")
    except queue.Empty:
        errors.append(f"--- ranks {sorted(set(range(nranks)) - set(got))} did not report within {timeout} s")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if errors:
        pytest.fail(f"{fn.__name__}{args} on {nranks} ranks:\n" + "\n".join(errors), pytrace=False)
    return [got[r] for r in range(nranks)]
