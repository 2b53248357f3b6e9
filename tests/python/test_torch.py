"""commgemm.torch on GPUs: every GPU backend, both layers, grads, CUDA graphs,
torch.compile. Run with one process per GPU:

    COMMGEMM_LIB=$PWD/build/libcommgemm.so \
        torchrun --nproc-per-node 2 -m pytest tests/python/test_torch.py -q

(every rank runs the same tests in the same order; a single process without
torchrun runs them on 1 rank). Skipped without torch, CUDA or the library;
a backend this build or machine cannot serve is skipped with the reason.
"""

import datetime
import math
import os
import pathlib
import socket
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
for p in (REPO / "python", pathlib.Path(__file__).resolve().parent):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device (these tests run on the GPU machine)", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

import commgemm  # noqa: E402
from commgemm import _lib  # noqa: E402

try:
    _lib.load()
except commgemm.CommGemmError as e:
    pytest.skip(f"libcommgemm.so not available: {e}", allow_module_level=True)

import torch_cases as tc  # noqa: E402
from commgemm import torch as cgt  # noqa: E402

BACKENDS = ["p2p", "nccl", "cublasmp"]
DTYPES = [torch.bfloat16, torch.float32]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def dist_env():
    """The NCCL process groups: WORLD for the reference collectives, and a
    group of its own for commgemm (so its NCCL work never interleaves with the
    reference's on one communicator)."""
    if "WORLD_SIZE" not in os.environ:  # plain pytest: one rank
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(seconds=300))
    world = dist.group.WORLD
    cg_group = dist.new_group(backend="nccl")
    env = {"device": device, "world": world, "cg_group": cg_group, "comms": {}, "errors": {}}
    yield env
    for comm in env["comms"].values():
        comm.close()
    torch.cuda.synchronize()
    dist.destroy_process_group()


def get_comm(env, backend):
    """The comm whose ops all run on `backend` (cached), or skip with the reason."""
    if backend in env["errors"]:
        pytest.skip(env["errors"][backend])
    if backend not in env["comms"]:
        try:
            comm = commgemm.Comm.from_process_group(env["cg_group"], backend=backend, timeout_ms=120000)
        except (commgemm.UnavailableError, commgemm.NotSupportedError) as e:
            env["errors"][backend] = f"backend {backend} unavailable here: {e}"
            pytest.skip(env["errors"][backend])
        env["comms"][backend] = comm
    comm = env["comms"][backend]
    assert comm.backend("ag_gemm") == backend
    return comm


def dtype_id(d):
    return str(d).replace("torch.", "")


def even(comm, backend, *sizes):
    """The sizes, each rounded up to a multiple of P on cublasmp, which takes
    even shards only (docs/CUBLASMP_BACKEND.md); as given elsewhere."""
    P = comm.size
    if backend != "cublasmp" or P == 1:
        return sizes if len(sizes) > 1 else sizes[0]
    out = tuple(-(-v // P) * P for v in sizes)
    return out if len(out) > 1 else out[0]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("backend", BACKENDS)
def test_functional_ops(dist_env, backend, dtype):
    comm = get_comm(dist_env, backend)
    for m in (37, 1, 256):
        tc.check_functional(comm, dist_env["world"], dist_env["device"], dtype, even(comm, backend, m))
    torch.cuda.synchronize()


@pytest.mark.parametrize("sequence_parallel", [True, False], ids=["sp", "nosp"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("backend", BACKENDS)
def test_layers_match_reference(dist_env, backend, dtype, sequence_parallel):
    comm = get_comm(dist_env, backend)
    dev, world = dist_env["device"], dist_env["world"]
    for m, k, n in ((37, 24, 19), (1, 24, 19), (261, 128, 96)):  # uneven, m < P, larger aligned
        m, k, n = even(comm, backend, m, k, n)
        tc.check_column(comm, world, dev, dtype, m, k=k, n=n, sequence_parallel=sequence_parallel)
        tc.check_row(comm, world, dev, dtype, m, k=k, n=n, sequence_parallel=sequence_parallel)
    m, k, n = even(comm, backend, 37, 24, 20)
    tc.check_column(comm, world, dev, dtype, m, k=k, n=n, bias=False, sequence_parallel=sequence_parallel)
    tc.check_row(comm, world, dev, dtype, m, k=k, n=n, bias=False, sequence_parallel=sequence_parallel)
    # the bias handed back (skip_bias_add), added by the caller: the same output and grads
    tc.check_column(comm, world, dev, dtype, m, k=k, n=n, sequence_parallel=sequence_parallel, skip_bias_add=True)
    tc.check_row(comm, world, dev, dtype, m, k=k, n=n, sequence_parallel=sequence_parallel, skip_bias_add=True)
    # the GELU layers: fused where the backend takes epilogues, torch's GELU after the op elsewhere
    epilogues = comm.supports("epilogue") and comm.supports("bulk_epilogue")
    for ffn in (n, 16 * comm.size):  # a local width cuBLASLt's aux cannot take (20 on 1 rank), one it can
        fits = all(comm.epilogue_fits(comm.shard_rows(ffn, q)) for q in range(comm.size))
        tc.check_mlp(comm, dev, dtype, m, hidden=k, ffn=ffn, sequence_parallel=sequence_parallel,
                     fused=epilogues and fits)
        tc.check_column_gelu(comm, dev, dtype, m, k=k, n=ffn, sequence_parallel=sequence_parallel)
    torch.cuda.synchronize()


@pytest.mark.parametrize("backend", BACKENDS)
def test_partitions_fused_and_layouts(dist_env, backend):
    """Heads kept whole, per-rank sizes, fused gate+up and q/k/v, gather_output,
    [s, b, h] and [b, s, h] inputs: against the unsplit nn.Linear."""
    comm = get_comm(dist_env, backend)
    dev, P = dist_env["device"], comm.size
    if backend == "cublasmp" and P > 1:
        pytest.skip("cublasmp takes even shards only; these partitions are uneven")
    for dtype in DTYPES:
        for sp in (True, False):
            tc.check_partitions(comm, dev, dtype, sequence_parallel=sp)
    s, b, h, n = 4 * P, 2, 64, 96
    lin = tc.full_linear(h, n, True, torch.bfloat16, dev, 1)
    row_lin = tc.full_linear(n, h, True, torch.bfloat16, dev, 2)
    for bf in (False, True):
        X = tc.rand((b, s, h) if bf else (s, b, h), 3, torch.bfloat16, dev)
        H = tc.rand((b, s, n) if bf else (s, b, n), 4, torch.bfloat16, dev)
        G = tc.rand(tuple(X.shape[:2]) + (n,), 5, torch.float32, dev)
        for gather in (False, True):
            col = cgt.ColumnParallelLinear.from_linear(lin, comm, batch_first=bf, gather_output=gather)
            tc.check_column_vs_linear(comm, col, lin, X, G, m=s * b, what=f"gather={gather}")
        row = cgt.RowParallelLinear.from_linear(row_lin, comm, batch_first=bf)
        tc.check_row_vs_linear(comm, row, row_lin, H, G[..., :h])
    torch.cuda.synchronize()


def test_per_op_backends(dist_env):
    """AG+GEMM on p2p, GEMM+RS on nccl in one comm (per-op backend choice)."""
    try:
        comm = commgemm.Comm.from_process_group(dist_env["cg_group"],
                                                op_backend={"ag_gemm": "p2p", "gemm_rs": "nccl"})
    except (commgemm.UnavailableError, commgemm.NotSupportedError) as e:
        pytest.skip(f"p2p + nccl unavailable: {e}")
    try:
        assert comm.backend("ag_gemm") == "p2p" and comm.backend("gemm_rs") == "nccl"
        tc.check_column(comm, dist_env["world"], dist_env["device"], torch.bfloat16, 37)
        tc.check_row(comm, dist_env["world"], dist_env["device"], torch.bfloat16, 37)
        torch.cuda.synchronize()
    finally:
        comm.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ops_run_on_current_stream(dist_env, backend):
    """Ops enqueue on the caller's current stream (here a side stream)."""
    comm = get_comm(dist_env, backend)
    dev, P, r = dist_env["device"], comm.size, comm.rank
    m, k, n = 300, 64, 48
    X = tc.rand((m, k), 1, torch.bfloat16, dev)
    w = tc.rand((n, k), 2 + r, torch.bfloat16, dev)
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000)  # keep the side stream busy: a wrong stream would race ahead
        x_shard = X[off:off + mr].contiguous()
        y = cgt.all_gather_matmul(x_shard, w, comm=comm, m=m)
    torch.cuda.current_stream(dev).wait_stream(side)
    tc.assert_close(y, X.float() @ w.float().t(), torch.bfloat16, "side stream all_gather_matmul")


@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_graph_capture_and_replay(dist_env, backend):
    """Forward + backward of column -> GELU -> row captured in a CUDA graph after
    warm-up; replays on new data match eager."""
    comm = get_comm(dist_env, backend)
    dev, P, r = dist_env["device"], comm.size, comm.rank
    hidden, ffn, m = 64, even(comm, backend, 160), even(comm, backend, 77)
    mr = commgemm.shard_rows(m, r, P)
    model = tc.TPMLP(hidden, ffn, comm, torch.bfloat16, dev)
    static_x = torch.zeros((mr, hidden), dtype=torch.bfloat16, device=dev)

    def step():
        return model(static_x, m).float().square().sum()

    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # warm-up: the eager calls that set up every op's resources
        for i in range(3):
            static_x.copy_(tc.rand((mr, hidden), 100 + i, torch.bfloat16, dev))
            model.zero_grad(set_to_none=True)
            step().backward()
    torch.cuda.current_stream(dev).wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    model.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = step()
        static_loss.backward()

    for trial in range(2):
        static_x.copy_(tc.rand((mr, hidden), 200 + trial, torch.bfloat16, dev))
        graph.replay()
        torch.cuda.synchronize()
        got_loss = static_loss.clone()
        got_grads = [p.grad.clone() for p in model.parameters()]
        params_grads = [p.grad for p in model.parameters()]
        for p in model.parameters():
            p.grad = None
        eager_loss = step()
        eager_loss.backward()
        torch.cuda.synchronize()
        tc.assert_close(got_loss, eager_loss, torch.bfloat16, f"graph replay {trial} loss")
        for i, (g, p) in enumerate(zip(got_grads, model.parameters())):
            tc.assert_close(g, p.grad, torch.bfloat16, f"graph replay {trial} grad {i}")
        for p, g in zip(model.parameters(), params_grads):  # give the graph its gradient buffers back
            p.grad = g


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile(dist_env, backend):
    """torch.compile(fullgraph=True) keeps the custom ops in the graph: a function
    calling the functional op, and the layers' forward + backward."""
    comm = get_comm(dist_env, backend)
    dev, P, r = dist_env["device"], comm.size, comm.rank
    m, k, n = 96, 64, 32
    mr = commgemm.shard_rows(m, r, P)
    x = tc.rand((mr, k), 3 + r, torch.bfloat16, dev)
    w = tc.rand((n, k), 4 + r, torch.bfloat16, dev)

    def f(x, w):
        return torch.relu(cgt.all_gather_matmul(x, w, comm=comm, m=m)) * 2

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    tc.assert_close(compiled(x, w), f(x, w), torch.bfloat16, "compiled all_gather_matmul")

    model = tc.TPMLP(k, even(comm, backend, 80), comm, torch.bfloat16, dev)

    def loss_fn(x):
        return model(x, m).float().square().sum()

    xg = x.clone().requires_grad_()
    eager = loss_fn(xg)
    eager.backward()
    want = [p.grad.clone() for p in model.parameters()] + [xg.grad.clone()]
    model.zero_grad(set_to_none=True)
    xg.grad = None
    got = torch.compile(loss_fn, fullgraph=True)(xg)
    got.backward()
    tc.assert_close(got, eager, torch.bfloat16, "compiled layers loss")
    for i, (g, wnt) in enumerate(zip([p.grad for p in model.parameters()] + [xg.grad], want)):
        tc.assert_close(g, wnt, torch.bfloat16, f"compiled layers grad {i}")


def test_opcheck(dist_env):
    """torch.library.opcheck: schemas and fake kernels agree with the real ops."""
    comm = get_comm(dist_env, "nccl")
    dev, P, r = dist_env["device"], comm.size, comm.rank
    m, k, n = 40, 16, 8
    mr = commgemm.shard_rows(m, r, P)
    x = tc.rand((mr, k), 1, torch.bfloat16, dev)
    xf = tc.rand((m, k), 2, torch.bfloat16, dev)
    w = tc.rand((n, k), 3, torch.bfloat16, dev)
    b = tc.rand((n,), 4, torch.bfloat16, dev)
    utils = ("test_schema", "test_faketensor")
    ops = torch.ops.commgemm
    torch.library.opcheck(ops.all_gather_matmul, (x, w, b, comm.id, m, "TN", "", True, "fp32"), test_utils=utils)
    torch.library.opcheck(ops.matmul_reduce_scatter, (xf, w, b, comm.id, "TN", "", "output", "fp32"),
                          test_utils=utils)
    torch.library.opcheck(ops.matmul_all_reduce, (xf, w, None, comm.id, "TN", "", "", ""), test_utils=utils)
    torch.library.opcheck(ops.bulk_matmul_collective, (xf, xf, xf, comm.id, "NT", "reduce_scatter", 0, "", ""),
                          test_utils=utils)


def test_mlp_training_matches_reference(dist_env):
    """The example's model: a few SGD steps give the reference's losses."""
    from commgemm import torch_reference as ref
    comm = get_comm(dist_env, "nccl") if "nccl" not in dist_env["errors"] else get_comm(dist_env, "p2p")
    dev, world, P, r = dist_env["device"], dist_env["world"], comm.size, comm.rank
    hidden, ffn, m = 64, 256, 101
    model = tc.TPMLP(hidden, ffn, comm, torch.float32, dev)
    ref_params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref_params, lr=0.05)
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    for step in range(4):
        x = tc.rand((m, hidden), 10 + step, torch.float32, dev)[off:off + mr]
        target = tc.rand((m, hidden), 20 + step, torch.float32, dev)[off:off + mr]
        # Mean, not sum: a summed loss over m x hidden at this lr diverges to
        # inf in the reference too, and inf vs inf proves nothing.
        loss = ((model(x, m) - target) ** 2).mean()
        w1, b1, w2, b2 = ref_params
        h = torch.nn.functional.gelu(ref.column_parallel_linear(x, w1, b1, world, m=m))
        ref_loss = ((ref.row_parallel_linear(h, w2, b2, world) - target) ** 2).mean()
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        ref_loss.backward()
        dist.all_reduce(b2.grad, group=world)
        opt.step()
        ref_opt.step()
        assert math.isfinite(ref_loss.item()), f"reference loss at step {step}: {ref_loss.item()}"
        tc.assert_close(loss, ref_loss, torch.float32, f"loss step {step}")


def test_gloo_group_is_rejected_with_advice(dist_env):
    gloo = dist.new_group(backend="gloo")
    with pytest.raises(commgemm.UnavailableError, match="uses gloo.*backend='nccl'"):
        commgemm.Comm.from_process_group(gloo)
