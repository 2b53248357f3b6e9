"""commgemm.jax: the XLA FFI custom calls on CPU arrays with host-backend
comms (Comm.local), 1 to 3 ranks with uneven shards, eager and under jax.jit,
and the differentiable layers' gradients against numpy references built from
every rank's inputs. Skipped without jax or without the library.

Where jax sees a GPU, the same cases run again on GPU arrays with p2p comms
over the LOCAL bootstrap (rank r on GPU r % count; ranks may share a GPU,
which checks correctness, not speed: docs/P2P_BACKEND.md); they skip with
the reason elsewhere.

    python3 -m pytest tests/python/test_jax_host.py -q
"""

import multiprocessing
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import traceback
import uuid

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import libcheck  # noqa: E402 - puts this tree's python/ on sys.path
import gelu_ref  # noqa: E402
from libcheck import REPO  # noqa: E402

pytest.importorskip("jax")

import commgemm  # noqa: E402

pytestmark = libcheck.skip_without_library()

RUN_TIMEOUT_S = 180


def _gpu_count():
    """GPUs jax sees, probed in a child (this process must not take a GPU)."""
    if not shutil.which("nvidia-smi"):
        return 0, "no nvidia-smi: no GPU"
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    try:
        out = subprocess.run([sys.executable, "-c", "import jax; print(len(jax.devices('gpu')))"], env=env,
                             capture_output=True, text=True, timeout=120)
        count = int(out.stdout.strip().splitlines()[-1])
        return count, f"jax sees {count} GPUs"
    except Exception as e:  # noqa: BLE001 - any failure means no usable GPU
        return 0, f"jax sees no GPU ({type(e).__name__}: {str(e)[:200]})"


_GPUS = None


def _gpus():
    global _GPUS
    if _GPUS is None:
        _GPUS = _gpu_count()
    return _GPUS


def _worker(fn_name, rank, nranks, rendezvous, args, platform, ngpu, results):
    try:
        config = dict(timeout_ms=30000)
        # jax read JAX_PLATFORMS when this module (so jax) was imported, before
        # this function ran: setting the variable now would not stop it from
        # picking a GPU for the CPU variant; its config can still change until
        # the first array (the GPU variant keeps the CPU too, for its
        # platform-mismatch case)
        import jax
        if platform == "gpu":
            os.environ["CUDA_VISIBLE_DEVICES"] = str(rank % ngpu)
            os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
            jax.config.update("jax_platforms", "cuda,cpu")
            config["backend"] = "p2p"  # on the CUDA device current at creation: the visible one
        else:
            jax.config.update("jax_platforms", "cpu")
        fn = globals()[fn_name]
        with commgemm.Comm.local(rank, nranks, rendezvous, **config) as comm:
            out = fn(comm, *args)
        results.put((rank, "ok", out))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_ranks(fn, nranks, *args, platform="cpu"):
    ngpu = 0
    if platform == "gpu":
        ngpu, why = _gpus()
        if ngpu == 0:
            pytest.skip(f"the GPU variant needs a GPU: {why}")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    rendezvous = f"pyjax-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    procs = [ctx.Process(target=_worker, args=(fn.__name__, r, nranks, rendezvous, args, platform, ngpu, results),
                         daemon=True) for r in range(nranks)]
    for p in procs:
        p.start()
    got, errors = {}, []
    try:
        for _ in range(nranks):
            rank, kind, out = results.get(timeout=RUN_TIMEOUT_S)
            (got.__setitem__(rank, out) if kind == "ok" else errors.append(f"rank {rank}: {out}"))
    except queue.Empty:
        errors.append(f"ranks {sorted(set(range(nranks)) - set(got))} did not finish in {RUN_TIMEOUT_S} s")
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    if errors:
        pytest.fail("\n".join(errors))
    return [got[r] for r in range(nranks)]


def _values(seed, shape):
    """Multiples of 1/8 in [-1/2, 1/2): exact in bf16, small sums exact in fp32."""
    return np.random.default_rng(seed).integers(-4, 4, shape).astype(np.float32) / 8


# --------------------------------------------------------------------------
# Rank bodies (module level: spawned processes look them up by name)
# --------------------------------------------------------------------------


def _ops_body(comm, m, dtype_name):
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    P, r = comm.size, comm.rank
    dt = jnp.dtype(dtype_name)
    tol = 1e-5 if dtype_name == "float32" else 2e-2
    k, n = 24, 16
    mr, off = commgemm.shard_rows(m, r, P), commgemm.shard_offset(m, r, P)
    X = _values(1, (m, k))
    W = [_values(10 + q, (n, k)) for q in range(P)]
    Xq = [_values(20 + q, (m, k)) for q in range(P)]
    B = _values(3, (n,))
    checked = 0
    for jit in (False, True):
        wrap = jax.jit if jit else (lambda f: f)
        # AG+GEMM, TN, bias, the gathered X
        ag = wrap(lambda x, w, b: cj.all_gather_matmul(x, w, b, comm=comm, m=m, return_gathered=True))
        y, xg = ag(jnp.asarray(X[off:off + mr], dt), jnp.asarray(W[r], dt), jnp.asarray(B, dt))
        np.testing.assert_allclose(np.asarray(y, np.float32), X @ W[r].T + B, atol=tol)
        np.testing.assert_array_equal(np.asarray(xg, np.float32), X)
        # AG+GEMM, NT: X is [k, m_r], W [k, n]; fp32 output
        agt = wrap(lambda x, w: cj.all_gather_matmul(x, w, comm=comm, m=m, layout="NT", out_dtype=jnp.float32))
        y = agt(jnp.asarray(X[off:off + mr].T, dt), jnp.asarray(W[r].T, dt))
        assert y.dtype == jnp.float32 and y.shape == (m, n)
        np.testing.assert_allclose(np.asarray(y), X @ W[r].T, atol=tol)
        # GEMM+RS and GEMM+AR: each rank its own X and W
        full = sum(Xq[q] @ W[q].T for q in range(P))
        rs = wrap(lambda x, w, b: cj.matmul_reduce_scatter(x, w, b, comm=comm, algo="split", splits=2))
        y = rs(jnp.asarray(Xq[r], dt), jnp.asarray(W[r], dt), jnp.asarray(B, dt))
        assert y.shape == (mr, n)
        np.testing.assert_allclose(np.asarray(y, np.float32), (full + B)[off:off + mr], atol=tol * P)
        ar = wrap(lambda x, w: cj.matmul_all_reduce(x, w, comm=comm, layout="NN"))
        y = ar(jnp.asarray(Xq[r], dt), jnp.asarray(W[r].T, dt))
        np.testing.assert_allclose(np.asarray(y, np.float32), full, atol=tol * P)
        checked += 4
    return checked


def _grads_body(comm, m):
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    P, r = comm.size, comm.rank
    k, n = 16, 24
    mr, off = commgemm.shard_rows(m, r, P), commgemm.shard_offset(m, r, P)
    X = _values(1, (m, k))
    W = [_values(10 + q, (n, k)) for q in range(P)]
    B = _values(3, (n,))
    # column: loss = sum over ranks of sum(sin(X W_r^T + B))
    col = jax.jit(jax.grad(lambda x, w, b: jnp.sum(jnp.sin(cj.column_parallel_linear(x, w, b, comm=comm, m=m))),
                           argnums=(0, 1, 2)))
    dx, dw, db = col(jnp.asarray(X[off:off + mr]), jnp.asarray(W[r]), jnp.asarray(B))
    dx_full = sum(np.cos(X @ W[q].T + B) @ W[q] for q in range(P))
    np.testing.assert_allclose(dx, dx_full[off:off + mr], atol=1e-4)
    np.testing.assert_allclose(dw, np.cos(X @ W[r].T + B).T @ X, atol=1e-4)
    np.testing.assert_allclose(db, np.cos(X @ W[r].T + B).sum(0), atol=1e-4)
    # row: x [m, k_loc] per rank; loss = sum over ranks of its rows' sin
    Xq = [_values(20 + q, (m, k)) for q in range(P)]
    full = sum(Xq[q] @ W[q].T for q in range(P)) + B
    row = jax.grad(lambda x, w, b: jnp.sum(jnp.sin(cj.row_parallel_linear(x, w, b, comm=comm))), argnums=(0, 1, 2))
    dx, dw, db = row(jnp.asarray(Xq[r]), jnp.asarray(W[r]), jnp.asarray(B))
    dy = np.cos(full)
    np.testing.assert_allclose(dx, dy @ W[r], atol=1e-4)
    np.testing.assert_allclose(dw, dy.T @ Xq[r], atol=1e-4)
    np.testing.assert_allclose(db, dy.sum(0), atol=1e-4)
    # allow_tf32: the same gradients within TF32's rounding (on a GPU; exact
    # on the CPU), through the ops and the local GEMMs alike
    for sp in (True, False):
        dx, dw, _ = jax.grad(lambda x, w, b: jnp.sum(jnp.sin(cj.row_parallel_linear(
            x, w, b, comm=comm, sequence_parallel=sp, allow_tf32=True))), argnums=(0, 1, 2))(
                jnp.asarray(Xq[r]), jnp.asarray(W[r]), jnp.asarray(B))
        np.testing.assert_allclose(dx, dy @ W[r], atol=5e-2)
        np.testing.assert_allclose(dw, dy.T @ Xq[r], atol=5e-2)
    # leading dims ([rows, 1, k]) are flattened into rows and given back
    y3 = cj.column_parallel_linear(jnp.asarray(X[off:off + mr]).reshape(mr, 1, k), jnp.asarray(W[r]),
                                   jnp.asarray(B), comm=comm, m=m)
    assert y3.shape == (m, 1, n), y3.shape
    np.testing.assert_allclose(np.asarray(y3)[:, 0], X @ W[r].T + B, atol=1e-5)
    # without a bias
    dx2 = jax.grad(lambda x: jnp.sum(cj.column_parallel_linear(x, jnp.asarray(W[r]), comm=comm, m=m)))(
        jnp.asarray(X[off:off + mr]))
    np.testing.assert_allclose(dx2, sum(np.ones((m, n)) @ W[q] for q in range(P))[off:off + mr], atol=1e-4)
    return True


def _gathered_fallback_body(comm, m, lacks):
    """A backend whose AG+GEMM keeps the gathered input (cublasmp): the
    layers gather it with the bulk op, the same gradients; with no bulk op
    either, they refuse with advice. The host backend plays that backend:
    the ops it 'lacks' raise."""
    import commgemm.jax as cj
    from commgemm import core
    real_ag, real_bulk = cj.all_gather_matmul, cj.bulk_matmul_collective

    def ag(*args, return_gathered=False, **kw):
        if return_gathered:
            raise commgemm.NotSupportedError(commgemm.Status.NOT_SUPPORTED, "this backend keeps the gathered input")
        return real_ag(*args, **kw)

    def bulk(*args, **kw):
        raise commgemm.NotSupportedError(commgemm.Status.NOT_SUPPORTED, "this backend has no bulk op")

    cj.all_gather_matmul = ag
    if "bulk" in lacks:
        cj.bulk_matmul_collective = bulk
    core._BACKEND_LACKS["host"] = frozenset(lacks)
    try:
        if "bulk" not in lacks:
            return _grads_body(comm, m)
        import jax
        import jax.numpy as jnp
        x, w = jnp.ones((commgemm.shard_rows(m, comm.rank, comm.size), 4)), jnp.ones((3, 4))
        with pytest.raises(commgemm.NotSupportedError, match=r"cannot hand back the gathered input .* its bulk op "
                                                             r"\(on host\) cannot gather it either"):
            jax.grad(lambda w: jnp.sum(cj.column_parallel_linear(x, w, comm=comm, m=m)))(w)
        return True
    finally:
        del core._BACKEND_LACKS["host"]
        cj.all_gather_matmul, cj.bulk_matmul_collective = real_ag, real_bulk


def _errors_body(comm, platform, rendezvous):
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    P = comm.size
    x = jnp.ones((4, 8), jnp.float32)
    w = jnp.ones((6, 8), jnp.float32)
    out = {}
    if platform == "cpu":
        # a GPU backend asked for on CPU arrays: refused by the handler (XLA
        # gives it no GPU stream), before the library
        try:
            np.asarray(cj.matmul_all_reduce(x, w, comm=comm, backend="p2p"))
        except Exception as e:  # noqa: BLE001
            out["cpu_arrays"] = str(e)
    if platform == "gpu":
        # arrays on the CPU for this p2p comm, and GPU arrays for a host comm
        # (one rank each): refused with what to do, not read from the wrong
        # memory
        cpu = jax.devices("cpu")[0]
        try:
            # np.asarray: a GPU call's error comes with its result (async)
            np.asarray(cj.matmul_all_reduce(jax.device_put(x, cpu), jax.device_put(w, cpu), comm=comm))
        except Exception as e:  # noqa: BLE001
            out["cpu_arrays"] = str(e)
        with commgemm.Comm.local(0, 1, f"{rendezvous}-{comm.rank}", backend="host") as host:
            try:
                np.asarray(cj.matmul_all_reduce(x, w, comm=host))
            except Exception as e:  # noqa: BLE001
                out["gpu_arrays"] = str(e)
    try:  # an integer operand: the handler's own check, as an XLA error
        np.asarray(cj.matmul_all_reduce(x.astype(jnp.int32), w, comm=comm))
    except Exception as e:  # noqa: BLE001 - jax's runtime error type varies
        out["dtype"] = str(e)
    try:  # shards that do not make m
        cj.all_gather_matmul(x, w, comm=comm, m=4 * P + 3)
    except ValueError as e:
        out["m"] = str(e)
    try:
        cj.matmul_all_reduce(x[0], w, comm=comm)
    except ValueError as e:
        out["rank"] = str(e)
    try:  # uneven shards (3 and 2 rows) without m: each rank's default m differs, the agreement check refuses
        np.asarray(cj.all_gather_matmul(x[:3] if comm.rank == 0 else x[:2], w, comm=comm))
    except Exception as e:  # noqa: BLE001
        out["uneven"] = str(e)
    try:  # inner dimensions that disagree: the library's check
        np.asarray(cj.matmul_all_reduce(x, jnp.ones((6, 7), jnp.float32), comm=comm))
    except Exception as e:  # noqa: BLE001
        out["shape"] = str(e)
    try:
        cj.matmul_all_reduce(x, w, comm="not a comm")
    except TypeError as e:
        out["comm"] = str(e)
    # the comm still works
    y = cj.matmul_all_reduce(x, w, comm=comm)
    out["after"] = float(np.asarray(y)[0, 0])
    return out


def _bulk_body(comm, m):
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    P, r = comm.size, comm.rank
    mr, off = commgemm.shard_rows(m, r, P), commgemm.shard_offset(m, r, P)
    A, Bm, bias = _values(40 + r, (9, 12)), _values(50 + r, (12, 5)), _values(60, (5,))
    S = _values(70, (m, 6))  # the all-gather's rows
    Sq = [_values(80 + q, (m, 6)) for q in range(P)]  # each rank's reduce-scatter input
    done = 0
    for jit in (False, True):
        wrap = jax.jit if jit else (lambda f: f)
        # GEMM (NN, bias) beside a reduce-scatter
        c, recv = wrap(lambda a, b, bi, s: cj.bulk_matmul_collective(a, b, bi, s, comm=comm, layout="NN",
                                                                     collective="reduce_scatter"))(
            jnp.asarray(A), jnp.asarray(Bm), jnp.asarray(bias), jnp.asarray(Sq[r]))
        np.testing.assert_allclose(c, A @ Bm + bias, atol=1e-5)
        np.testing.assert_allclose(recv, sum(Sq)[off:off + mr], atol=1e-5)
        # GEMM only; all-gather only (m given)
        c, none = cj.bulk_matmul_collective(jnp.asarray(A), jnp.asarray(Bm.T), comm=comm)
        assert none is None
        np.testing.assert_allclose(c, A @ Bm, atol=1e-5)
        none, recv = wrap(lambda s: cj.bulk_matmul_collective(send=s, comm=comm, m=m))(jnp.asarray(S[off:off + mr]))
        assert none is None
        np.testing.assert_array_equal(recv, S)
        done += 3
    try:
        cj.bulk_matmul_collective(jnp.asarray(A), comm=comm)
    except ValueError as e:
        assert "pass both a and b" in str(e)
        done += 1
    return done


def _precision_body(comm, m):
    """partial_dtype and gemm_reduction reach the ops as XLA attributes (and
    through the layers): accepted, exact on the host backend; the ranks'
    partial dtypes are checked for agreement; a bad name is refused before
    XLA sees it."""
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    P, r = comm.size, comm.rank
    k, n = 16, 8
    mr, off = commgemm.shard_rows(m, r, P), commgemm.shard_offset(m, r, P)
    W = [_values(10 + q, (n, k)) for q in range(P)]
    Xq = [_values(20 + q, (m, k)) for q in range(P)]
    full = sum(Xq[q] @ W[q].T for q in range(P))
    bf = jnp.bfloat16
    x, w = jnp.asarray(Xq[r], bf), jnp.asarray(W[r], bf)
    done = 0
    for pd, gr in ((None, None), ("fp32", "any"), ("output", "fp32")):
        rs = jax.jit(lambda x, w: cj.matmul_reduce_scatter(x, w, comm=comm, partial_dtype=pd, gemm_reduction=gr))
        np.testing.assert_allclose(np.asarray(rs(x, w), np.float32), full[off:off + mr], atol=2e-2 * P)
        y = cj.matmul_all_reduce(x, w, comm=comm, partial_dtype=pd, gemm_reduction=gr)
        np.testing.assert_allclose(np.asarray(y, np.float32), full, atol=2e-2 * P)
        y = cj.all_gather_matmul(jnp.asarray(Xq[0][off:off + mr]), jnp.asarray(W[r]), comm=comm, m=m,
                                 gemm_reduction=gr)
        np.testing.assert_allclose(np.asarray(y), Xq[0] @ W[r].T, atol=1e-5)
        dx = jax.grad(lambda x: jnp.sum(cj.row_parallel_linear(x, jnp.asarray(W[r]), comm=comm,
                                                               partial_dtype=pd, gemm_reduction=gr)))(
            jnp.asarray(Xq[r]))
        # every rank's loss sums its rows of Y: dX = allgather(ones) . W
        np.testing.assert_allclose(dx, np.ones((m, n)) @ W[r], atol=1e-4)
        done += 1
    try:  # rank 0 sends bf16 partials, the others fp32
        np.asarray(cj.matmul_reduce_scatter(x, w, comm=comm, partial_dtype="output" if r == 0 else "fp32"))
    except Exception as e:  # noqa: BLE001 - jax's runtime error type varies
        assert "partial dtype" in str(e), str(e)
        done += 1
    try:
        cj.matmul_all_reduce(x, w, comm=comm, partial_dtype="bf16")
    except commgemm.InvalidArgumentError as e:
        assert "unknown partial dtype" in str(e), str(e)
        done += 1
    y = cj.matmul_all_reduce(x, w, comm=comm)  # the comm still works
    np.testing.assert_allclose(np.asarray(y, np.float32), full, atol=2e-2 * P)
    return done



def _epilogue_body(comm, m):
    """The ops' epilogues under jax.jit (GELU, GELU_AUX, DGELU_BGRAD, BGRAD), and parallel_mlp
    and column_parallel_linear(activation="gelu") gradients against float64 numpy, fused (the
    host backend takes epilogues) and not (the comm made to lack them, as cublasmp's GEMM+RS and GEMM+AR do)."""
    import jax
    import jax.numpy as jnp
    import commgemm.jax as cj
    from commgemm import core
    P, r = comm.size, comm.rank
    hid, ffn = 8, 13
    mr, off = commgemm.shard_rows(m, r, P), commgemm.shard_offset(m, r, P)
    X = _values(1, (m, hid)).astype(np.float64) * 4
    parts = [commgemm.shard_rows(ffn, q, P) for q in range(P)]
    fo = sum(parts[:r])
    W1, B1 = _values(2, (ffn, hid)) * 2, _values(3, (ffn,))
    W2, B2 = _values(4, (hid, ffn)) * 2, _values(5, (hid,))
    G = _values(6, (m, hid))
    w1, b1 = jnp.asarray(W1[fo:fo + parts[r]]), jnp.asarray(B1[fo:fo + parts[r]])
    w2, b2 = jnp.asarray(W2[:, fo:fo + parts[r]]), jnp.asarray(B2)
    x = jnp.asarray(X[off:off + mr], jnp.float32)
    pre = X @ W1.T + B1
    # the ops: AG+GEMM with GELU_AUX, then its backward's DGELU_BGRAD and a BGRAD GEMM
    y, xg, aux = jax.jit(lambda x, w, b: cj.all_gather_matmul(x, w, b, comm=comm, m=m, return_gathered=True,
                                                              epilogue="gelu_aux"))(x, w1, b1)
    cols = slice(fo, fo + parts[r])
    np.testing.assert_allclose(np.asarray(y), gelu_ref.gelu(pre)[:, cols], atol=1e-4)
    np.testing.assert_allclose(np.asarray(aux), pre[:, cols], atol=1e-4)
    g = jnp.asarray(G[off:off + mr], jnp.float32)
    d, dg, db = jax.jit(lambda g, w, a: cj.all_gather_matmul(g, w, comm=comm, m=m, layout="NN", return_gathered=True,
                                                            epilogue="dgelu_bgrad", aux=a))(g, w2, aux)
    want = (G @ W2[:, cols]) * gelu_ref.dgelu(pre[:, cols])
    np.testing.assert_allclose(np.asarray(d), want, atol=1e-4)
    np.testing.assert_allclose(np.asarray(db), want.sum(0), atol=1e-3)
    dw, _, bg = cj.bulk_matmul_collective(dg, jnp.asarray(gelu_ref.gelu(pre)[:, cols], jnp.float32), comm=comm,
                                          layout="NT", epilogue="bgrad")
    np.testing.assert_allclose(np.asarray(bg), G.sum(0), atol=1e-4)
    np.testing.assert_allclose(np.asarray(dw), G.T @ gelu_ref.gelu(pre)[:, cols], atol=1e-3)
    # GEMM+RS with GELU after the reduction
    h = jnp.asarray(gelu_ref.gelu(pre)[:, cols], jnp.float32)
    yr = cj.matmul_reduce_scatter(h, w2, b2, comm=comm, epilogue="gelu")
    full = gelu_ref.gelu(pre) @ W2.T + B2
    np.testing.assert_allclose(np.asarray(yr), gelu_ref.gelu(full)[off:off + mr], atol=1e-4)
    # the MLP and the GELU column layer, differentiable, fused and not
    out = gelu_ref.gelu(pre) @ W2.T + B2
    dh = (G @ W2) * gelu_ref.dgelu(pre)
    for fused in (False, True):
        if not fused:
            core._BACKEND_LACKS["host"] = frozenset({"epilogue", "bulk_epilogue"})
        try:
            assert cj._fused_epilogues(comm, None, w1.shape[0]) == fused
            f = jax.jit(jax.value_and_grad(
                lambda x, w1, b1, w2, b2: jnp.sum(cj.parallel_mlp(x, w1, b1, w2, b2, comm=comm, m=m) * g),
                argnums=(0, 1, 2, 3, 4)))
            loss, (dx, dw1, db1, dw2, db2) = f(x, w1, b1, w2, b2)
            np.testing.assert_allclose(np.asarray(dx), (dh @ W1)[off:off + mr], atol=1e-3)
            np.testing.assert_allclose(np.asarray(dw1), dh[:, cols].T @ X, atol=1e-3)
            np.testing.assert_allclose(np.asarray(db1), dh[:, cols].sum(0), atol=1e-3)
            np.testing.assert_allclose(np.asarray(dw2), G.T @ gelu_ref.gelu(pre)[:, cols], atol=1e-3)
            np.testing.assert_allclose(np.asarray(db2), G.sum(0), atol=1e-4)
            yl = cj.parallel_mlp(x, w1, b1, w2, b2, comm=comm, m=m)
            np.testing.assert_allclose(np.asarray(yl), out[off:off + mr], atol=1e-4)
            gc = jnp.asarray(G[:, :parts[r]] if parts[r] <= hid else np.ones((m, parts[r])), jnp.float32)
            dxc = jax.grad(lambda x: jnp.sum(cj.column_parallel_linear(x, w1, b1, comm=comm, m=m,
                                                                       activation="gelu") * gc))(x)
            dpre = np.asarray(gc, np.float64) * gelu_ref.dgelu(pre[:, cols])
            want_dx = dpre @ W1[cols]
            # every rank's column block contributes to dX: sum them with a GEMM+AR of the [m, hid] parts
            total = cj.matmul_all_reduce(jnp.eye(m, dtype=jnp.float32), jnp.asarray(want_dx, jnp.float32).T,
                                         comm=comm)
            np.testing.assert_allclose(np.asarray(dxc), np.asarray(total)[off:off + mr], atol=1e-3)
        finally:
            core._BACKEND_LACKS.pop("host", None)
    return True


def _example_body(comm, dtype, sp=True):
    """examples/jax_tp_mlp.py's training, three steps, against plain jnp."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("jax_tp_mlp", REPO / "examples" / "jax_tp_mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = mod.parse_args(["--tokens", "203", "--hidden", "64", "--ffn", "130", "--steps", "3", "--dtype", dtype,
                           "--compare"] + ([] if sp else ["--no-sequence-parallel"]))
    losses, ref_losses, diff = mod.train(comm, args)
    return losses, ref_losses, diff


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


PLATFORMS = pytest.mark.parametrize("platform", ["cpu", "gpu"])


@PLATFORMS
@pytest.mark.parametrize("nranks,m", [(1, 5), (2, 9), (3, 7)])
def test_ops_float32(platform, nranks, m):
    assert run_ranks(_ops_body, nranks, m, "float32", platform=platform) == [8] * nranks


@PLATFORMS
def test_ops_bfloat16(platform):
    assert run_ranks(_ops_body, 2, 11, "bfloat16", platform=platform) == [8, 8]


@PLATFORMS
@pytest.mark.parametrize("nranks,m", [(1, 6), (2, 7), (3, 10)])
def test_layer_gradients(platform, nranks, m):
    assert run_ranks(_grads_body, nranks, m, platform=platform) == [True] * nranks


@pytest.mark.parametrize("lacks", [("gathered",), ("gathered", "bulk")], ids=["no-gathered", "no-gathered-no-bulk"])
def test_layers_on_a_backend_without_gathered_input(lacks):
    assert run_ranks(_gathered_fallback_body, 3, 10, lacks) == [True] * 3


@PLATFORMS
@pytest.mark.parametrize("nranks,m", [(1, 4), (3, 8)])
def test_bulk(platform, nranks, m):
    assert run_ranks(_bulk_body, nranks, m, platform=platform) == [7] * nranks


@pytest.mark.parametrize("nranks,m", [(1, 5), (2, 9)])
def test_precision(nranks, m):
    assert run_ranks(_precision_body, nranks, m) == [3 + (nranks > 1) + 1] * nranks


@PLATFORMS
def test_errors(platform):
    rendezvous = f"pyjax-err-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    for out in run_ranks(_errors_body, 2, platform, rendezvous, platform=platform):
        assert "backend for this op is p2p, which works on GPU memory" in out["cpu_arrays"], out["cpu_arrays"]
        assert "FAILED_PRECONDITION" in out["cpu_arrays"], out["cpu_arrays"]
        if platform == "gpu":
            assert "XLA runs this call on a GPU" in out["gpu_arrays"], out["gpu_arrays"]
        assert "x: expected float32, bfloat16, float16 or (x and w, with their scales) float8" in out["dtype"], \
            out["dtype"]
        assert "pass m" in out["m"] or "rows per rank" in out["m"], out["m"]
        assert "expected a 2-D array" in out["rank"], out["rank"]
        assert "ranks disagree about the" in out.get("uneven", ""), out.get("uneven")
        assert "cgm_gemm_all_reduce" in out["shape"], out["shape"]
        assert "expected a commgemm.Comm" in out["comm"], out["comm"]
        assert out["after"] == 2 * 8.0


@PLATFORMS
@pytest.mark.parametrize("sp", [True, False], ids=["sequence_parallel", "replicated"])
@pytest.mark.parametrize("dtype,tol", [("float32", 1e-5), ("bfloat16", 5e-2)])
def test_example_mlp(platform, dtype, tol, sp):
    out = run_ranks(_example_body, 3, dtype, sp, platform=platform)
    ref = out[0][1]
    for losses, ref_losses, diff in out:
        # every rank computes the same plain-jnp run (on GPUs each process's
        # XLA picks its own GEMM kernels: the same to a few ulps)
        np.testing.assert_allclose(ref_losses, ref, rtol=1e-6 if platform == "gpu" else 0)
        assert diff <= tol, diff
    # the ranks' own rows' terms (sequence parallel) add up to the global
    # loss at every step; replicated, every rank has the whole loss
    slack = 2e-2 if dtype == "bfloat16" else 0
    for step in range(3):
        if sp:
            total = sum(o[0][step] for o in out)
            assert abs(total - ref[step]) <= 1e-4 * max(1.0, abs(ref[step])) + slack
        else:
            for o in out:
                assert abs(o[0][step] - ref[step]) <= 1e-4 * max(1.0, abs(ref[step])) + slack
    assert ref[-1] < ref[0]  # it trains


@pytest.mark.parametrize("nranks,m", [(1, 5), (2, 9), (3, 7), (3, 2)])
def test_epilogues(nranks, m):
    assert run_ranks(_epilogue_body, nranks, m) == [True] * nranks
