"""commgemm Python bindings on the CPU host backend (CI).

Ranks are processes started with multiprocessing (spawn), meeting through
Comm.local with a unique rendezvous name. Every op is checked against a numpy
float64 reference on the same (rounded) inputs.

Needs numpy and pytest, and a built libcommgemm.so: $COMMGEMM_LIB, else the
package directory, else <repo>/build*/libcommgemm.so. Builds nothing; skips
(with the reason) when the library cannot be found or loaded.

    python3 -m pytest tests/python/test_host.py -q
"""

import ctypes
import multiprocessing
import os
import pathlib
import queue
import subprocess
import sys
import time
import traceback
import uuid

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import libcheck  # noqa: E402 - puts this tree's python/ on sys.path
import gelu_ref  # noqa: E402
from libcheck import REPO  # noqa: E402

import commgemm  # noqa: E402
from commgemm import _lib  # noqa: E402

pytestmark = libcheck.skip_without_library()

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None

TIMEOUT_MS = 30000  # every wait inside the library
RUN_TIMEOUT_S = 120  # one multi-rank test, all ranks

# --------------------------------------------------------------------------
# Running ranks
# --------------------------------------------------------------------------


def _worker(fn_name, rank, nranks, rendezvous, args, config, results):
    try:
        fn = globals()[fn_name]
        with commgemm.Comm.local(rank, nranks, rendezvous, config=config) as comm:
            assert comm.rank == rank and comm.size == nranks, (comm.rank, comm.size)
            out = fn(comm, *args)
        results.put((rank, "ok", out))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_ranks(fn, nranks, *args, config=None, timeout=RUN_TIMEOUT_S):
    """Runs fn(comm, *args) on nranks spawned processes; fails the test with
    every rank's traceback if any rank fails or does not finish. Returns the
    per-rank return values."""
    if config is None:
        config = commgemm.Config(timeout_ms=TIMEOUT_MS)
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    rendezvous = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    procs = [ctx.Process(target=_worker, args=(fn.__name__, r, nranks, rendezvous, args, config, results),
                         daemon=True) for r in range(nranks)]
    for p in procs:
        p.start()
    got, deadline = {}, time.monotonic() + timeout
    try:
        while len(got) < nranks:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, status, payload = results.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and not [r for r in range(nranks) if r not in got and procs[r].exitcode is None]:
                    break
                continue
            got[rank] = (status, payload)
    finally:
        for p in procs:
            p.join(timeout=5)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    errors = [f"--- rank {r}: {payload}" for r, (status, payload) in sorted(got.items()) if status != "ok"]
    missing = [r for r in range(nranks) if r not in got]
    if missing:
        errors.append(f"--- ranks {missing} did not report within {timeout} s (exit codes "
                      f"{[procs[r].exitcode for r in missing]})")
    if errors:
        pytest.fail(f"{fn.__name__}{args} on {nranks} ranks failed:\n" + "\n".join(errors), pytrace=False)
    return [got[r][1] for r in range(nranks)]


# --------------------------------------------------------------------------
# Data and references
# --------------------------------------------------------------------------

DTYPES = {"fp32": np.float32, "fp16": np.float16}
if BF16 is not None:
    DTYPES["bf16"] = BF16
TOL = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 6e-2}


def rand(seed, shape, dtype):
    return np.random.default_rng(seed).uniform(-1, 1, size=shape).astype(dtype)


def f64(a):
    return np.asarray(a).astype(np.float64)


def assert_close(got, want, tol, what):
    got, want = f64(got), f64(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if got.size == 0:
        return
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= tol * scale, f"{what}: max |got - want| = {err:.3g} > {tol * scale:.3g}\ngot\n{got}\nwant\n{want}"


def stored_w(wl, layout):
    """W as the layout stores it, from the logical nn.Linear weight wl [n, k]."""
    return np.ascontiguousarray(wl if layout == "TN" else wl.T)


def stored_x(xl, layout):
    """X as the layout stores it, from the logical xl [m, k]: NT stores [k, m]."""
    return np.ascontiguousarray(xl.T if layout == "NT" else xl)


def with_ld(a, extra=3):
    """The same values in a wider buffer (row stride = cols + extra): exercises ld."""
    big = np.zeros((a.shape[0], a.shape[1] + extra), dtype=a.dtype)
    big[:, :a.shape[1]] = a
    return big[:, :a.shape[1]]


# --------------------------------------------------------------------------
# Rank bodies (module level: spawned processes import them by name)
# --------------------------------------------------------------------------


def body_all_gather_gemm(comm, m, dtype_name, layouts):
    P, r = comm.size, comm.rank
    dtype, tol = DTYPES[dtype_name], TOL[dtype_name]
    k = 5
    xl = rand(1, (m, k), dtype)
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    assert mr == comm.shard_rows(m)
    n = 3 + r  # n may differ between ranks
    wl = rand(100 + r, (n, k), dtype)
    bias = rand(200 + r, (n,), dtype)
    want = f64(xl) @ f64(wl).T
    for layout in layouts:
        x_shard = stored_x(xl[off:off + mr], layout)
        w = stored_w(wl, layout)
        case = f"AG+GEMM P={P} r={r} m={m} {dtype_name} {layout}"
        y = commgemm.all_gather_gemm(comm, x_shard, w, m=m, layout=layout)
        assert y.dtype == dtype and y.shape == (m, n), (case, y.dtype, y.shape)
        assert_close(y, want, tol, case)
        # bias, gathered input, accumulate into a given output
        y0 = rand(300 + r, (m, n), dtype)
        out = y0.copy()
        out2, gathered = commgemm.all_gather_gemm(comm, x_shard, w, bias=bias, out=out, gathered=True,
                                                  layout=layout, accumulate=True)
        assert out2 is out
        assert_close(out, f64(y0) + want + f64(bias), tol, case + " bias accumulate")
        np.testing.assert_array_equal(gathered, stored_x(xl, layout), err_msg=case + " gathered")
    # a row stride wider than the row (ld from the strides), fp32 output from low-precision inputs
    y = commgemm.all_gather_gemm(comm, with_ld(xl[off:off + mr]), with_ld(wl), m=m,
                                 out_dtype=np.float32)
    assert y.dtype == np.float32
    assert_close(y, want, tol, f"AG+GEMM P={P} m={m} {dtype_name} ld>cols fp32 out")
    return y.shape


def body_gemm_reduce_scatter(comm, m, dtype_name, layouts):
    P, r = comm.size, comm.rank
    dtype, tol = DTYPES[dtype_name], TOL[dtype_name]
    n = 4
    ks = [2 + q for q in range(P)]  # k_loc may differ between ranks
    xls = [rand(10 + q, (m, ks[q]), dtype) for q in range(P)]
    wls = [rand(20 + q, (n, ks[q]), dtype) for q in range(P)]
    bias = rand(30, (n,), dtype)  # the same on every rank, added once
    total = sum(f64(xls[q]) @ f64(wls[q]).T for q in range(P))
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    for layout in layouts:
        x, w = stored_x(xls[r], layout), stored_w(wls[r], layout)
        case = f"GEMM+RS P={P} r={r} m={m} {dtype_name} {layout}"
        y = commgemm.gemm_reduce_scatter(comm, x, w, layout=layout)
        assert y.shape == (mr, n), (case, y.shape)
        assert_close(y, total[off:off + mr], tol, case)
        y0 = rand(40 + r, (mr, n), dtype)
        out = y0.copy()
        commgemm.gemm_reduce_scatter(comm, x, w, bias=bias, out=out, layout=layout, accumulate=True)
        assert_close(out, f64(y0) + total[off:off + mr] + f64(bias), tol, case + " bias accumulate")
    y = commgemm.gemm_reduce_scatter(comm, with_ld(xls[r]), with_ld(wls[r]), out_dtype=np.float32)
    assert_close(y, total[off:off + mr], tol, f"GEMM+RS P={P} m={m} ld>cols fp32 out")
    return y.shape


def body_gemm_all_reduce(comm, m, dtype_name, layouts):
    P, r = comm.size, comm.rank
    dtype, tol = DTYPES[dtype_name], TOL[dtype_name]
    n = 3
    ks = [3 + (q % 2) for q in range(P)]
    xls = [rand(50 + q, (m, ks[q]), dtype) for q in range(P)]
    wls = [rand(60 + q, (n, ks[q]), dtype) for q in range(P)]
    bias = rand(70, (n,), dtype)
    total = sum(f64(xls[q]) @ f64(wls[q]).T for q in range(P))
    for layout in layouts:
        x, w = stored_x(xls[r], layout), stored_w(wls[r], layout)
        case = f"GEMM+AR P={P} r={r} m={m} {dtype_name} {layout}"
        y = commgemm.gemm_all_reduce(comm, x, w, bias=bias, layout=layout)
        assert y.shape == (m, n), (case, y.shape)
        assert_close(y, total + f64(bias), tol, case + " bias")
        y0 = rand(80 + r, (m, n), dtype)
        out = y0.copy()
        commgemm.gemm_all_reduce(comm, x, w, out=out, layout=layout, accumulate=True)
        assert_close(out, f64(y0) + total, tol, case + " accumulate")
    return y.shape


def body_bulk_overlap(comm, m, dtype_name):
    P, r = comm.size, comm.rank
    dtype, tol = DTYPES[dtype_name], TOL[dtype_name]
    cols = 3
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    # the GEMM (local; wgrad-like NT: c[n, k] = a[m, n]^T . b[m, k])
    a = rand(90 + r, (m, 4), dtype)
    b = rand(91 + r, (m, 2), dtype)
    want_c = f64(a).T @ f64(b)
    # all-gather beside it
    full = rand(92, (m, cols), dtype)
    c, recv = commgemm.bulk_overlap(comm, a, b, send=np.ascontiguousarray(full[off:off + mr]),
                                    collective="all_gather", layout="NT", m=m)
    assert_close(c, want_c, tol, f"bulk GEMM (AG) P={P} r={r} m={m}")
    np.testing.assert_array_equal(recv, full, err_msg=f"bulk all-gather P={P} r={r} m={m}")
    # reduce-scatter beside it, bias and accumulate on the GEMM
    sends = [rand(93 + q, (m, cols), dtype) for q in range(P)]
    total = sum(f64(s) for s in sends)
    c0 = rand(94 + r, want_c.shape, dtype)
    c = c0.copy()
    bias = rand(95, (want_c.shape[1],), dtype)
    c2, recv = commgemm.bulk_overlap(comm, a, b, c=c, bias=bias, send=sends[r], collective="reduce_scatter",
                                     layout="NT", accumulate=True)
    assert c2 is c
    assert_close(c, f64(c0) + want_c + f64(bias), tol, f"bulk GEMM (RS) P={P} r={r} m={m}")
    assert_close(recv, total[off:off + mr], tol, f"bulk reduce-scatter P={P} r={r} m={m}")
    # either half alone
    _, recv = commgemm.bulk_overlap(comm, send=np.ascontiguousarray(full[off:off + mr]), m=m)
    np.testing.assert_array_equal(recv, full)
    c, recv = commgemm.bulk_overlap(comm, a=np.ascontiguousarray(a.T), b=np.ascontiguousarray(b.T),
                                    layout="TN")
    assert recv is None
    assert_close(c, f64(a).T @ f64(b), tol, f"bulk GEMM only P={P}")
    return True



def body_epilogues(comm, m, dtype_name):
    """Every op's epilogues on numpy arrays (commgemm.h "Epilogues"): what each returns and
    writes into given arrays, against float64, and what a missing aux says."""
    P, r = comm.size, comm.rank
    dtype, tol = DTYPES[dtype_name], TOL[dtype_name]
    k, n = 6, 5
    xl = rand(1, (m, k), dtype)
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    wl = rand(2 + r, (n, k), dtype)
    bias = rand(3 + r, (n,), dtype)
    t = f64(xl) @ f64(wl).T + f64(bias)
    y, aux = commgemm.all_gather_gemm(comm, xl[off:off + mr], wl, bias=bias, m=m, epilogue="gelu_aux")
    assert_close(y, gelu_ref.gelu(t), tol, "AG+GEMM gelu_aux y")
    assert_close(aux, t, tol, "AG+GEMM gelu_aux aux")
    y, gathered = commgemm.all_gather_gemm(comm, xl[off:off + mr], wl, bias=bias, m=m, epilogue="gelu",
                                           gathered=True)
    assert_close(y, gelu_ref.gelu(t), tol, "AG+GEMM gelu y")
    g = rand(4, (m, k), dtype)
    bgrad = np.zeros((n,), dtype)  # given: written in place
    d, bg = commgemm.all_gather_gemm(comm, g[off:off + mr], wl.T.copy(), layout="NN", m=m, epilogue="dgelu_bgrad",
                                     aux=aux, bgrad=bgrad)
    want = (f64(g) @ f64(wl).T) * gelu_ref.dgelu(f64(aux))
    assert bg is bgrad
    assert_close(d, want, tol, "AG+GEMM dgelu_bgrad y")
    assert_close(bgrad, want.sum(0), tol * max(1, m), "AG+GEMM dgelu_bgrad bgrad")
    # GEMM+RS / GEMM+AR: after the reduction (each rank its own X, W; the bias once)
    xs = [rand(10 + q, (m, 3), dtype) for q in range(P)]
    ws = [rand(20 + q, (n, 3), dtype) for q in range(P)]
    b0 = rand(3, (n,), dtype)
    total = sum(f64(xs[q]) @ f64(ws[q]).T for q in range(P)) + f64(b0)
    y = commgemm.gemm_reduce_scatter(comm, xs[r], ws[r], bias=b0, epilogue="gelu")
    assert_close(y, gelu_ref.gelu(total)[off:off + mr], tol * P, "GEMM+RS gelu")
    pre = rand(30, (m, n), dtype)  # the same aux on every rank: every rank's Y the same
    y, bg = commgemm.gemm_all_reduce(comm, xs[r], ws[r], epilogue="dgelu_bgrad", aux=pre)
    want = (total - f64(b0)) * gelu_ref.dgelu(f64(pre))
    assert_close(y, want, tol * P, "GEMM+AR dgelu_bgrad y")
    assert_close(bg, want.sum(0), tol * P * max(1, m), "GEMM+AR dgelu_bgrad bgrad")
    y, bg = commgemm.gemm_reduce_scatter(comm, xs[r], ws[r], epilogue="dgelu_bgrad", aux=pre[off:off + mr])
    assert_close(y, want[off:off + mr], tol * P, "GEMM+RS dgelu_bgrad y")
    assert_close(bg, want.sum(0), tol * P * max(1, m), "GEMM+RS dgelu_bgrad bgrad (all m rows)")
    # bulk's GEMM: BGRAD of a weight gradient dW = dY^T . X (NT): bgrad = sum_rows dY
    dy = rand(40, (m, n), dtype)
    c, recv, bg = commgemm.bulk_overlap(comm, dy, xl, layout="NT", epilogue="bgrad")
    assert recv is None
    assert_close(c, f64(dy).T @ f64(xl), tol * max(1, m), "bulk NT bgrad c")
    assert_close(bg, f64(dy).sum(0), tol * max(1, m), "bulk NT bgrad bgrad")
    with pytest.raises(commgemm.InvalidArgumentError, match="aux"):
        commgemm.gemm_all_reduce(comm, xs[r], ws[r], epilogue="dgelu")
    with pytest.raises(commgemm.InvalidArgumentError, match="epilogue"):
        commgemm.gemm_all_reduce(comm, xs[r], ws[r], epilogue="relu")
    return True


def body_comm_info(comm):
    assert comm.backend("ag_gemm") == "host"
    for op in ("gemm_rs", "gemm_ar", "bulk", commgemm.Op.ALL_GATHER_GEMM):
        assert comm.backend(op) == "host"
    assert comm.async_error() is None
    assert "rank=" in repr(comm)
    return comm.rank, comm.size


def body_bad_input(comm):
    P = comm.size
    m, k, n = 6, 4, 3
    mr = comm.shard_rows(m)
    x = rand(1, (mr, k), np.float32)
    w = rand(2, (n, k), np.float32)
    # shapes that disagree (W has the wrong k), on every rank: an argument error, nothing enqueued
    with pytest.raises(commgemm.InvalidArgumentError) as info:
        commgemm.all_gather_gemm(comm, x, rand(3, (n, k + 1), np.float32), m=m)
    assert info.value.status == commgemm.Status.INVALID_ARGUMENT
    assert "w" in info.value.message and "expected" in info.value.message, info.value.message
    assert isinstance(info.value, ValueError)
    # output of the wrong shape
    with pytest.raises(commgemm.InvalidArgumentError, match="expected"):
        commgemm.gemm_reduce_scatter(comm, rand(4, (m, k), np.float32), w, out=np.empty((mr + 1, n), np.float32))
    # mixed dtypes
    with pytest.raises(commgemm.InvalidArgumentError, match="dtype"):
        commgemm.gemm_all_reduce(comm, rand(5, (m, k), np.float32), w.astype(np.float16))
    # bias of the wrong length
    with pytest.raises(commgemm.InvalidArgumentError, match="bias"):
        commgemm.gemm_all_reduce(comm, rand(5, (m, k), np.float32), w, bias=np.zeros(n + 1, np.float32))
    # in-place (output overlapping an input)
    buf = rand(6, (m, n), np.float32)
    with pytest.raises(commgemm.InvalidArgumentError, match="overlap"):
        commgemm.gemm_all_reduce(comm, buf[:, :1].copy(), rand(7, (n, 1), np.float32), out=buf[:, :n],
                                 bias=buf[0])
    # Python-side checks: non-contiguous inner dimension, bad dtype, bad layout name
    with pytest.raises(commgemm.InvalidArgumentError, match="contiguous"):
        commgemm.gemm_all_reduce(comm, np.asfortranarray(rand(8, (m, k), np.float32)), w)
    with pytest.raises(commgemm.InvalidArgumentError, match="contiguous rows"):
        commgemm.all_gather_gemm(comm, x, np.ascontiguousarray(w.T).T, m=m)
    with pytest.raises(commgemm.InvalidArgumentError, match="float32"):
        commgemm.gemm_all_reduce(comm, rand(8, (m, k), np.float64), w)
    with pytest.raises(commgemm.InvalidArgumentError, match="layout"):
        commgemm.gemm_all_reduce(comm, rand(8, (m, k), np.float32), w, layout="TT")
    with pytest.raises(commgemm.InvalidArgumentError):
        commgemm.gemm_all_reduce(comm, rand(8, (m, k), np.float32), w, backend="no-such-backend")
    with pytest.raises(commgemm.InvalidArgumentError, match="accumulate"):
        commgemm.gemm_all_reduce(comm, rand(8, (m, k), np.float32), w, accumulate=True)
    # the comm is still usable after argument errors
    y = commgemm.all_gather_gemm(comm, x, w, m=m)
    xl = rand(1, (m, k), np.float32)  # every rank's x came from seed 1 rows [0, mr): rebuild the gathered X
    full = np.concatenate([xl[:commgemm.shard_rows(m, q, P)] for q in range(P)])
    assert_close(y, f64(full) @ f64(w).T, 1e-4, "after errors")
    return True


def body_mismatch(comm):
    """Ranks disagree about m (each rank's own operands are consistent):
    every rank gets CGM_ERROR_MISMATCH, and the comm stays usable."""
    P, r = comm.size, comm.rank
    m = 8 + r  # disagree
    k, n = 3, 2
    x = rand(1, (commgemm.shard_rows(m, r, P), k), np.float32)
    w = rand(2, (n, k), np.float32)
    with pytest.raises(commgemm.MismatchError) as info:
        commgemm.all_gather_gemm(comm, x, w, m=m)
    assert info.value.status == commgemm.Status.MISMATCH
    assert "rank" in info.value.message, info.value.message
    # agree again: works
    m = 8
    x = rand(1, (commgemm.shard_rows(m, r, P), k), np.float32)
    y = commgemm.all_gather_gemm(comm, x, w, m=m)
    assert y.shape == (m, n)
    return True


def body_precision(comm, want_partial, want_reduction):
    """The comm's precision, as configured (or from the environment); every
    per-call value accepted, exact on the host backend (it sums exact fp32
    partials); ranks that send different partial dtypes get MISMATCH naming
    the field, and the comm stays usable."""
    P, r = comm.size, comm.rank
    assert (comm.partial_dtype, comm.gemm_reduction) == (want_partial, want_reduction)
    m, n, k = 7, 4, 3
    xl, wl = rand(10 + r, (m, k), np.float16), rand(20 + r, (n, k), np.float16)
    total = sum(f64(rand(10 + q, (m, k), np.float16)) @ f64(rand(20 + q, (n, k), np.float16)).T for q in range(P))
    off, mr = comm.shard_offset(m), comm.shard_rows(m)
    for partial in (None, "fp32", "output", commgemm.PartialDtype.OUTPUT):
        for reduction in (None, "any", "fp32"):
            case = f"P={P} r={r} partial_dtype={partial} gemm_reduction={reduction}"
            y = commgemm.gemm_reduce_scatter(comm, xl, wl, partial_dtype=partial, gemm_reduction=reduction)
            assert_close(y, total[off:off + mr], TOL["fp16"], "GEMM+RS " + case)
            y = commgemm.gemm_all_reduce(comm, xl, wl, partial_dtype=partial, gemm_reduction=reduction)
            assert_close(y, total, TOL["fp16"], "GEMM+AR " + case)
        y = commgemm.all_gather_gemm(comm, xl[off:off + mr], wl, m=m, gemm_reduction="fp32")
    if P > 1:
        # rank 0 sends other partials than the comm's, which the others send: refused on every rank
        other = "fp32" if want_partial == "output" else "output"
        sent = {"fp32": "fp32", "output": "fp16"}
        with pytest.raises(commgemm.MismatchError, match=f"rank 1 passed partial dtype = {sent[want_partial]} but "
                                                         f"rank 0 passed partial dtype = {sent[other]}"):
            commgemm.gemm_reduce_scatter(comm, xl, wl, partial_dtype=other if r == 0 else None)
        # the GEMM reduction is local: ranks may differ
        commgemm.gemm_reduce_scatter(comm, xl, wl, gemm_reduction="fp32" if r == 0 else "any")
    with pytest.raises(commgemm.InvalidArgumentError, match="unknown partial dtype \"bf16\""):
        commgemm.gemm_all_reduce(comm, xl, wl, partial_dtype="bf16")
    with pytest.raises(commgemm.InvalidArgumentError, match="unknown GEMM reduction"):
        commgemm.gemm_all_reduce(comm, xl, wl, gemm_reduction="tf32")
    y = commgemm.gemm_all_reduce(comm, xl, wl)
    assert_close(y, total, TOL["fp16"], "GEMM+AR after the refusals")
    return True


def body_shape_only(comm, m):
    """m < P and m = 0 edge cases: empty shards on some ranks."""
    P, r = comm.size, comm.rank
    k, n = 3, 2
    xl = rand(1, (m, k), np.float32)
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    w = rand(2, (n, k), np.float32)
    y = commgemm.all_gather_gemm(comm, np.ascontiguousarray(xl[off:off + mr]), w, m=m)
    assert_close(y, f64(xl) @ f64(w).T, 1e-4, f"AG m={m} P={P}")
    ys = commgemm.gemm_reduce_scatter(comm, xl, w)
    assert_close(ys, P * (f64(xl) @ f64(w).T)[off:off + mr], 1e-4, f"RS m={m} P={P}")
    return mr


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------

ALL_LAYOUTS = ("TN", "NN", "NT")
PS = (1, 2, 3)


@pytest.mark.parametrize("nranks", PS)
@pytest.mark.parametrize("dtype_name", ["fp32", "fp16"])
def test_all_gather_gemm(nranks, dtype_name):
    for m in (7, 2, 12):
        run_ranks(body_all_gather_gemm, nranks, m, dtype_name, ALL_LAYOUTS if m == 7 else ("TN",))


@pytest.mark.parametrize("nranks", PS)
@pytest.mark.parametrize("dtype_name", ["fp32", "fp16"])
def test_gemm_reduce_scatter(nranks, dtype_name):
    for m in (7, 2):
        run_ranks(body_gemm_reduce_scatter, nranks, m, dtype_name, ALL_LAYOUTS if m == 7 else ("TN",))


@pytest.mark.parametrize("nranks", PS)
@pytest.mark.parametrize("dtype_name", ["fp32", "fp16"])
def test_gemm_all_reduce(nranks, dtype_name):
    run_ranks(body_gemm_all_reduce, nranks, 5, dtype_name, ALL_LAYOUTS)


@pytest.mark.parametrize("nranks", PS)
def test_bulk_overlap(nranks):
    for m in (5, 2):
        run_ranks(body_bulk_overlap, nranks, m, "fp32")


@pytest.mark.skipif(BF16 is None, reason="bf16 numpy arrays need the ml_dtypes package")
def test_bf16():
    run_ranks(body_all_gather_gemm, 2, 5, "bf16", ("TN",))
    run_ranks(body_gemm_reduce_scatter, 2, 5, "bf16", ("TN",))


@pytest.mark.parametrize("nranks,m", [(3, 2), (3, 1), (2, 0), (1, 0)])
def test_m_smaller_than_ranks(nranks, m):
    rows = run_ranks(body_shape_only, nranks, m)
    assert rows == [commgemm.shard_rows(m, r, nranks) for r in range(nranks)]


@pytest.mark.parametrize("nranks,m", [(1, 4), (2, 7), (3, 2)])
@pytest.mark.parametrize("dtype_name", ["fp32", "fp16"])
def test_epilogues(nranks, m, dtype_name):
    assert run_ranks(body_epilogues, nranks, m, dtype_name) == [True] * nranks


def test_comm_info():
    assert run_ranks(body_comm_info, 3) == [(0, 3), (1, 3), (2, 3)]


def test_bad_input_raises_invalid_argument():
    run_ranks(body_bad_input, 2)


def test_mismatch_raises_on_every_rank():
    run_ranks(body_mismatch, 2)


@pytest.mark.parametrize("nranks", [1, 3])
def test_precision_from_config(nranks):
    config = commgemm.Config(timeout_ms=TIMEOUT_MS, partial_dtype="output", gemm_reduction="fp32")
    run_ranks(body_precision, nranks, "output", "fp32", config=config)


def test_precision_defaults_and_environment(monkeypatch):
    run_ranks(body_precision, 2, "fp32", "any")
    # spawned ranks read the environment afresh; the config's DEFAULT takes it
    monkeypatch.setenv("COMMGEMM_PARTIAL_DTYPE", "output")
    monkeypatch.setenv("COMMGEMM_GEMM_REDUCTION", "fp32")
    run_ranks(body_precision, 2, "output", "fp32")
    config = commgemm.Config(timeout_ms=TIMEOUT_MS, partial_dtype="fp32", gemm_reduction=commgemm.GemmReduction.ANY)
    run_ranks(body_precision, 2, "fp32", "any", config=config)  # the config wins over the environment


def test_precision_config_refused():
    with pytest.raises(commgemm.InvalidArgumentError, match="unknown partial dtype"):
        commgemm.Config(partial_dtype="fp16").to_c()
    with pytest.raises(ValueError, match="7"):
        commgemm.Comm.local(0, 1, f"pytest-cfg-{uuid.uuid4().hex[:8]}", gemm_reduction=7)


def body_one_rank_rejected(comm):
    """Rank 1 passes a shard of the wrong size (the library's validation
    rejects it before any exchange); the other ranks' calls fail at once with
    MISMATCH naming rank 1 and quoting its error, not after timeout_ms; every
    comm stays usable. Then again with the tuner's exchange first (algo left
    to the tuner on a new key)."""
    import time
    P, r = comm.size, comm.rank
    k, n = 3, 2
    w = rand(2, (n, k), np.float32)
    for m, algo in ((10, "split"), (12, None)):
        rows = commgemm.shard_rows(m, r, P) + (2 if r == 1 else 0)
        x = rand(1, (rows, k), np.float32)
        t0 = time.monotonic()
        kw = {"algo": algo} if algo else {}
        if r == 1:  # its own error, as validation said it
            with pytest.raises(commgemm.InvalidArgumentError, match="x_shard"):
                commgemm.all_gather_gemm(comm, x, w, m=m, **kw)
        else:
            with pytest.raises(commgemm.MismatchError, match="rank 1 rejected its arguments .*x_shard"):
                commgemm.all_gather_gemm(comm, x, w, m=m, **kw)
        took = time.monotonic() - t0
        assert took < TIMEOUT_MS / 1000 / 2, f"rank {r} took {took:.1f} s (timeout_ms {TIMEOUT_MS})"
    m = 8
    x = rand(1, (commgemm.shard_rows(m, r, P), k), np.float32)
    y = commgemm.all_gather_gemm(comm, x, w, m=m)
    assert y.shape == (m, n)


@pytest.mark.parametrize("nranks", [2, 3])
def test_one_rank_rejected_fails_every_rank_at_once(nranks):
    run_ranks(body_one_rank_rejected, nranks)


def test_versions_agree():
    """The package, its pyproject, CMake's project and the loaded library say one version."""
    import re
    want = ".".join(str(v) for v in _lib.VERSION)
    assert commgemm.__version__ == want
    cmake = (libcheck.REPO / "CMakeLists.txt").read_text()
    assert re.search(r"project\(commgemm VERSION (\S+)", cmake).group(1) == want
    pyproject = (libcheck.REPO / "python" / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1) == want
    v = commgemm.library_version()
    assert (v // 10000, v // 100 % 100, v % 100) == _lib.VERSION


def test_library_of_another_version_passed_over(monkeypatch):
    """A library whose major.minor differs from the package's is not used, and the
    error says what was found where."""
    path = _lib.library_path()
    monkeypatch.setattr(_lib, "VERSION", (9, 9, 0))
    monkeypatch.setattr(_lib, "_lib", None)
    monkeypatch.setattr(_lib, "_lib_path", None)
    with pytest.raises(commgemm.UnavailableError, match=r"expected 9\.9\.x for this Python package"):
        _lib.load(path)


def test_shard_rows_matches_library():
    lib = _lib.lib()
    for nranks in range(1, 6):
        for m in range(0, 13):
            for r in range(-1, nranks + 1):
                assert commgemm.shard_rows(m, r, nranks) == lib.cgm_shard_rows(m, r, nranks), (m, r, nranks)
                if r >= 0:
                    assert commgemm.shard_offset(m, r, nranks) == lib.cgm_shard_offset(m, r, nranks), (m, r, nranks)


def test_struct_sizes_and_names():
    assert ctypes.sizeof(_lib.cgm_matrix) == 56
    assert ctypes.sizeof(_lib.cgm_bootstrap) == 40
    assert ctypes.sizeof(_lib.cgm_config) == 88
    assert ctypes.sizeof(_lib.cgm_op_options) == 80  # with the epilogue fields (what the library takes)
    for p in commgemm.PartialDtype:
        assert _lib.parse_partial_dtype(_lib.partial_dtype_name(p)) == p
    for g in commgemm.GemmReduction:
        assert _lib.parse_gemm_reduction(_lib.gemm_reduction_name(g)) == g
    assert _lib.partial_dtype_name(len(commgemm.PartialDtype)) == "invalid"  # the C enum has no more
    assert _lib.gemm_reduction_name(len(commgemm.GemmReduction)) == "invalid"
    assert commgemm.library_version() == 100  # 0.1.0
    assert _lib.backend_name(commgemm.Backend.P2P) == "p2p"
    assert _lib.parse_backend("NCCL") == commgemm.Backend.NCCL
    assert _lib.parse_algo("split") == commgemm.Algo.SPLIT_PIPELINED
    # every C algorithm has its Python member, under the C name
    for a in commgemm.Algo:
        assert _lib.parse_algo(_lib.algo_name(a)) == a
    assert _lib.parse_algo("fused") == commgemm.Algo.FUSED
    with pytest.raises(commgemm.InvalidArgumentError):
        _lib.parse_algo("lead")  # retired; its number is never reused
    assert _lib.algo_name(len(commgemm.Algo)) == "invalid"  # the C enum has no more
    assert _lib.layout_name(commgemm.Layout.NT) == "NT"
    assert _lib.op_name(commgemm.Op.GEMM_REDUCE_SCATTER) == "gemm_rs"
    assert _lib.dtype_name(commgemm.DType.BF16) == "bf16"
    with pytest.raises(commgemm.InvalidArgumentError):
        _lib.parse_backend("gloo")


def test_config_validation():
    # a bad config value is rejected by cgm_comm_create (single rank: no peer to wait for)
    with pytest.raises(commgemm.InvalidArgumentError):
        commgemm.Comm.local(0, 1, f"pytest-cfg-{uuid.uuid4().hex[:8]}", max_m=-5)
    with pytest.raises(commgemm.InvalidArgumentError):
        commgemm.Comm.local(2, 2, f"pytest-cfg-{uuid.uuid4().hex[:8]}")  # rank out of range
    with pytest.raises(TypeError, match="rendezvous: expected a str"):
        commgemm.Comm.local(0, 1, 5)  # bytes(5) would be five NUL bytes


def test_closed_comm_raises():
    comm = commgemm.Comm.local(0, 1, f"pytest-closed-{uuid.uuid4().hex[:8]}")
    x = rand(1, (2, 2), np.float32)
    commgemm.gemm_all_reduce(comm, x, x)
    comm.close()
    comm.close()  # idempotent
    assert comm.closed
    with pytest.raises(commgemm.InvalidUsageError, match="closed"):
        commgemm.gemm_all_reduce(comm, x, x)


def test_timeout_names_missing_rank():
    """Rank 1 never joins: rank 0's cgm_comm_create returns CGM_ERROR_TIMEOUT."""
    code = (
        "import sys, commgemm\n"
        "try:\n"
        f"    commgemm.Comm.local(0, 2, 'pytest-timeout-{uuid.uuid4().hex[:8]}', timeout_ms=1500)\n"
        "except commgemm.TimeoutError_ as e:\n"
        "    assert isinstance(e, TimeoutError) and e.status == commgemm.Status.TIMEOUT\n"
        "    print('TIMEOUT', e.message)\n"
        "    sys.exit(0)\n"
        "sys.exit(3)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO / "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("COMMGEMM_LIB", _lib.library_path())
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TIMEOUT" in proc.stdout and "1" in proc.stdout, proc.stdout


def _from_env_body(rank, rendezvous, results):
    os.environ.update(COMMGEMM_RANK=str(rank), COMMGEMM_NRANKS="2", COMMGEMM_RENDEZVOUS=rendezvous)
    try:
        with commgemm.Comm.from_env(timeout_ms=TIMEOUT_MS) as comm:
            results.put((comm.rank, comm.size))
    except BaseException as e:  # noqa: BLE001
        results.put(repr(e))


def test_from_env():
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    rendezvous = f"pytest-env-{uuid.uuid4().hex[:8]}"
    procs = [ctx.Process(target=_from_env_body, args=(r, rendezvous, results), daemon=True) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=10)
    assert got == [(0, 2), (1, 2)], got


def body_empty_weight_shard(comm):
    """A rank whose weight shard is empty: AG+GEMM with n_r = 0 (its output
    [m, 0]) and GEMM+RS with k_r = 0 (its x [m, 0]; its partial is zero).
    The header lets n and k_loc differ per rank; a feature partition may
    give a rank none."""
    P, r = comm.size, comm.rank
    m, k = 7, 4
    X = rand(1, (m, k), np.float32)
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    n_r = 0 if r == P - 1 else 3
    w = rand(2 + r, (n_r, k), np.float32)
    y = commgemm.all_gather_gemm(comm, X[off:off + mr], w, m=m)
    assert_close(y, f64(X) @ f64(w).T, 1e-5, f"AG+GEMM, n_r = {n_r}")
    ks = [0 if q == P - 1 else 2 for q in range(P)]
    xs = [rand(10 + q, (m, ks[q]), np.float32) for q in range(P)]
    ws = [rand(20 + q, (5, ks[q]), np.float32) for q in range(P)]
    y = commgemm.gemm_reduce_scatter(comm, xs[r], ws[r])
    full = sum(f64(xs[q]) @ f64(ws[q]).T for q in range(P))
    assert_close(y, full[off:off + mr], 1e-5, f"GEMM+RS, k_r = {ks[r]}")


def test_empty_weight_shard_on_one_rank():
    run_ranks(body_empty_weight_shard, 3)
