"""commgemm.torch on CPU tensors: host backend comms (Comm.local) + a gloo
process group for the reference collectives. Checks the layers' forward and
backward math (the same checks test_torch.py runs on GPUs). Skipped without
torch or without the library.

    python3 -m pytest tests/python/test_torch_host.py -q
"""

import multiprocessing
import os
import pathlib
import queue
import socket
import sys
import traceback
import uuid

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import libcheck  # noqa: E402 - puts this tree's python/ on sys.path

torch = pytest.importorskip("torch")

import commgemm  # noqa: E402

pytestmark = libcheck.skip_without_library()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(body, rank, nranks, rendezvous, port, args, results):
    try:
        import torch.distributed as dist
        import torch_cases  # noqa: F401 - imported in the child
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nranks)
        try:
            with commgemm.Comm.local(rank, nranks, rendezvous, timeout_ms=30000) as comm:
                globals()[body](comm, dist.group.WORLD, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, None))
    except BaseException as e:  # noqa: BLE001
        results.put((rank, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_ranks(body, nranks, *args, timeout=180):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    rendezvous = f"pytest-torch-{os.getpid()}-{uuid.uuid4().hex[:10]}"
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(body.__name__, r, nranks, rendezvous, port, args, results),
                         daemon=True) for r in range(nranks)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in range(nranks):
            rank, err = results.get(timeout=timeout)
            got[rank] = err
    except queue.Empty:
        pass
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    errors = [f"--- rank {r}: {e}" for r, e in sorted(got.items()) if e]
    if len(got) < nranks:
        errors.append(f"--- ranks {[r for r in range(nranks) if r not in got]} did not finish in {timeout} s")
    if errors:
        pytest.fail(f"{body.__name__}{args} on {nranks} ranks:\n" + "\n".join(errors), pytrace=False)


def body_layers(comm, group, dtype_name):
    import torch_cases as tc
    dtype = getattr(torch, dtype_name)
    for m in (11, 2, 6):  # uneven, m < P (with 3 ranks), even
        for sp in (True, False):
            tc.check_column(comm, group, "cpu", dtype, m, sequence_parallel=sp)
            tc.check_row(comm, group, "cpu", dtype, m, sequence_parallel=sp)
    tc.check_column(comm, group, "cpu", dtype, 9, bias=False)
    tc.check_row(comm, group, "cpu", dtype, 9, bias=False)
    for sp in (True, False):  # the bias handed back, added by the caller: the same output and grads
        tc.check_column(comm, group, "cpu", dtype, 11, sequence_parallel=sp, skip_bias_add=True)
        tc.check_row(comm, group, "cpu", dtype, 11, sequence_parallel=sp, skip_bias_add=True)
    tc.check_row(comm, group, "cpu", dtype, 9, bias=False, skip_bias_add=True)


def body_functional(comm, group, dtype_name):
    import torch_cases as tc
    for m in (7, 2):
        tc.check_functional(comm, group, "cpu", getattr(torch, dtype_name), m)


def body_precision(comm, group):
    """partial_dtype and gemm_reduction: the layers and functional ops take
    them (exact on the host backend, which sums fp32 partials), the layers
    say what they compute, the ranks' partial dtypes must agree, bad names
    are refused when the layer is made."""
    import torch_cases as tc
    from commgemm import torch as cgt
    P, r = comm.size, comm.rank
    for sp in (True, False):
        for pd, gr in (("output", "fp32"), ("fp32", None)):
            tc.check_column(comm, group, "cpu", torch.bfloat16, 11, sequence_parallel=sp, partial_dtype=pd,
                            gemm_reduction=gr)
            tc.check_row(comm, group, "cpu", torch.bfloat16, 11, sequence_parallel=sp, partial_dtype=pd,
                         gemm_reduction=gr)
            tc.check_row(comm, group, "cpu", torch.bfloat16, 11, sequence_parallel=sp, skip_bias_add=True,
                         partial_dtype=pd, gemm_reduction=gr)
    tc.check_functional(comm, group, "cpu", torch.bfloat16, 7, partial_dtype="output", gemm_reduction="fp32")
    row = cgt.RowParallelLinear(6, 5, comm, partial_dtype="output", dtype=torch.bfloat16)
    assert row.partial_dtype == "output" and row.gemm_reduction is None
    text = repr(row)
    assert "partial_dtype=output, gemm_reduction=any (the comm's)" in text, text
    col = cgt.ColumnParallelLinear(6, 4, comm, gemm_reduction=commgemm.GemmReduction.FP32)
    assert "partial_dtype=fp32 (the comm's), gemm_reduction=fp32" in repr(col), repr(col)
    with pytest.raises(commgemm.InvalidArgumentError, match="unknown partial dtype"):
        cgt.RowParallelLinear(6, 5, comm, partial_dtype="bf16")
    if P > 1:
        x = tc.rand((7, 4), 3, torch.bfloat16, "cpu")
        w = tc.rand((5, 4), 4 + r, torch.bfloat16, "cpu")
        with pytest.raises(commgemm.MismatchError, match="partial dtype = bf16"):
            cgt.matmul_reduce_scatter(x, w, comm=comm, partial_dtype="output" if r == 0 else "fp32")
        cgt.matmul_reduce_scatter(x, w, comm=comm)  # still usable


def body_mlp_trains(comm, group):
    """A few SGD steps of column -> GELU -> row match the reference model."""
    import torch_cases as tc
    from commgemm import torch_reference as ref
    P, r = comm.size, comm.rank
    hidden, ffn, m = 8, 20, 13
    model = tc.TPMLP(hidden, ffn, comm, torch.float32, "cpu")
    ref_params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref_params, lr=0.1)
    off, mr = commgemm.shard_offset(m, r, P), commgemm.shard_rows(m, r, P)
    for step in range(3):
        x = tc.rand((m, hidden), 100 + step, torch.float32, "cpu")[off:off + mr]
        target = tc.rand((m, hidden), 200 + step, torch.float32, "cpu")[off:off + mr]
        loss = ((model(x, m) - target) ** 2).sum()
        w1, b1, w2, b2 = ref_params
        h = torch.nn.functional.gelu(ref.column_parallel_linear(x, w1, b1, group, m=m))
        ref_loss = ((ref.row_parallel_linear(h, w2, b2, group) - target) ** 2).sum()
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        ref_loss.backward()
        torch.distributed.all_reduce(b2.grad, group=group)  # commgemm's row bias grad is already the full sum
        opt.step()
        ref_opt.step()
        tc.assert_close(loss, ref_loss, torch.float32, f"loss step {step}")
    for p, q in zip(model.parameters(), ref_params):
        tc.assert_close(p, q, torch.float32, "parameters after training")


def body_init(comm, group):
    import torch_cases as tc
    tc.check_init(comm, "cpu", torch.float32)


def body_autocast(comm, group):
    import torch_cases as tc
    for sp in (True, False):
        tc.check_autocast(comm, group, "cpu", 11, sequence_parallel=sp)


def body_leading_dims(comm, group):
    """[s, b, features] inputs: sequence shards that split whole positions work;
    others are refused on every rank alike, before any collective, naming the fix."""
    from commgemm import torch as cgt
    assert comm.size == 2
    row = cgt.RowParallelLinear(6, 5, comm)
    y = row(torch.randn(4, 2, row.in_local))  # 8 rows: 4 per rank, 2 positions of 2
    assert tuple(y.shape) == (2, 2, 5), tuple(y.shape)
    with pytest.raises(commgemm.InvalidArgumentError, match=r"rank 0 of 2 would get 3 rows, not a multiple of 2.*pad"):
        row(torch.randn(3, 2, row.in_local))  # 6 rows: 3 per rank
    col = cgt.ColumnParallelLinear(6, 4, comm)
    with pytest.raises(commgemm.InvalidArgumentError, match="7 rows of 2 per sequence position"):
        col(torch.randn(2, 2, 6), m=7)
    y = col(torch.randn(2, 2, 6))  # m = 8
    assert tuple(y.shape) == (4, 2, col.out_local), tuple(y.shape)


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_init_slices_one_full_draw(nranks):
    run_ranks(body_init, nranks)


@pytest.mark.parametrize("nranks", [1, 2])
def test_autocast_bf16(nranks):
    run_ranks(body_autocast, nranks)


def test_leading_dims():
    run_ranks(body_leading_dims, 2)


def test_bulk_arguments_checked():
    from commgemm import torch as cgt
    with commgemm.Comm.local(0, 1, f"bulk-args-{os.getpid()}") as comm:
        t = torch.ones(4, 4)
        with pytest.raises(commgemm.InvalidArgumentError, match="a is given and b is None: expected both"):
            cgt.bulk_matmul_collective(a=t, comm=comm)
        with pytest.raises(commgemm.InvalidArgumentError, match="no GEMM .* and no collective"):
            cgt.bulk_matmul_collective(comm=comm)


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_layers_fp32(nranks):
    run_ranks(body_layers, nranks, "float32")


def test_layers_bf16():
    run_ranks(body_layers, 2, "bfloat16")


@pytest.mark.parametrize("nranks", [2, 3])
def test_functional(nranks):
    run_ranks(body_functional, nranks, "float32")


@pytest.mark.parametrize("nranks", [1, 2])
def test_precision(nranks):
    run_ranks(body_precision, nranks)


def test_mlp_trains_like_reference():
    run_ranks(body_mlp_trains, 2)


def test_gloo_group_is_rejected_with_advice():
    """from_process_group on a gloo group: the error says how to fix it."""
    import torch.distributed as dist
    port = _free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        with pytest.raises(commgemm.UnavailableError, match="uses gloo.*backend='nccl'"):
            commgemm.Comm.from_process_group()
    finally:
        dist.destroy_process_group()
