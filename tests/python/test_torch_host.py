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


def body_partitions(comm, group):
    import torch_cases as tc
    for sp in (True, False):
        tc.check_partitions(comm, "cpu", torch.float32, sequence_parallel=sp)
    tc.check_partitions(comm, "cpu", torch.bfloat16)


def body_layouts(comm, group):
    """[s, b, h] and [b, s, h] inputs, gather_output, scatter_rows and
    gather_rows: against the unsplit nn.Linear and hand-cut shards."""
    import torch_cases as tc
    from commgemm import torch as cgt
    P, r = comm.size, comm.rank
    s, b, h, n = 2 * P, 2, 6, 10
    f32 = torch.float32
    lin = tc.full_linear(h, n, True, f32, "cpu", 1)
    row_lin = tc.full_linear(n, h, True, f32, "cpu", 2)
    for bf in (False, True):
        X = tc.rand((b, s, h) if bf else (s, b, h), 3, f32, "cpu")
        H = tc.rand((b, s, n) if bf else (s, b, n), 4, f32, "cpu")
        G = tc.rand(tuple(X.shape[:2]) + (n,), 5, f32, "cpu")
        for sp in (True, False):
            for gather in (False, True):
                col = cgt.ColumnParallelLinear.from_linear(lin, comm, batch_first=bf, sequence_parallel=sp,
                                                           gather_output=gather)
                tc.check_column_vs_linear(comm, col, lin, X, G, m=s * b, what=f"gather={gather}")
            row = cgt.RowParallelLinear.from_linear(row_lin, comm, batch_first=bf, sequence_parallel=sp)
            tc.check_row_vs_linear(comm, row, row_lin, H, G[..., :h])
        # scatter_rows: the hand-cut shard; its backward gathers every rank's gradient
        full = X.clone().requires_grad_()
        mine = cgt.scatter_rows(full, comm, batch_first=bf)
        assert torch.equal(mine, tc.seq_shard(X, comm, bf)), f"scatter_rows bf={bf}: not the hand-cut shard"
        mine.backward(tc.seq_shard(G[..., :h], comm, bf))
        assert torch.equal(full.grad, G[..., :h]), f"scatter_rows bf={bf}: gradient not gathered"
        # gather_rows: the inverse; its backward takes this rank's rows, or sums the ranks' first
        for reduce_grad in (False, True):
            shard = tc.seq_shard(X, comm, bf).clone().requires_grad_()
            whole = cgt.gather_rows(shard, comm, batch_first=bf, reduce_grad=reduce_grad)
            assert torch.equal(whole, X), f"gather_rows bf={bf}: not the full tensor"
            grad = G[..., :h] * (r + 1 if reduce_grad else 1)
            whole.backward(grad)
            want = tc.seq_shard(G[..., :h] * (sum(range(1, P + 1)) if reduce_grad else 1), comm, bf)
            tc.assert_close(shard.grad, want, f32, f"gather_rows bf={bf} reduce_grad={reduce_grad} gradient")
    # 2-D rows, uneven: the ceil split
    X = tc.rand((11, h), 6, f32, "cpu")
    mine = cgt.scatter_rows(X, comm)
    assert torch.equal(mine, X[commgemm.shard_offset(11, r, P):][:commgemm.shard_rows(11, r, P)])
    assert torch.equal(cgt.gather_rows(mine, comm, m=11), X)
    col = cgt.ColumnParallelLinear.from_linear(lin, comm, gather_output=True,
                                               partition_sizes=[n - P + 1] + [1] * (P - 1))
    tc.check_column_vs_linear(comm, col, lin, X, tc.rand((11, n), 7, f32, "cpu"), m=11, what="uneven gather")


def body_shape_checks(comm, group):
    """The layers' messages say what to pass, on every rank alike where the
    mistake is every rank's, and the comm stays usable."""
    from commgemm import torch as cgt
    P, r = comm.size, comm.rank
    assert P == 3
    col = cgt.ColumnParallelLinear(6, 8, comm)
    x = torch.randn(commgemm.shard_rows(11, r, P), 6)  # 4, 4, 3 rows
    with pytest.raises(commgemm.MismatchError, match=r"m was not passed.*rank \d: \d x 3.*pass m = the total rows"):
        col(x)
    assert col(x, m=11).shape == (11, col.out_local)
    # m = 12 fits ranks 0 and 1 only: rank 2 says what is wrong, its peers learn it from the op at once
    if r == 2:
        with pytest.raises(commgemm.InvalidArgumentError,
                           match=r"m = 12 gives rank 2 of 3 shard_rows\(m, rank, P\) = 4 rows, but its input has 3"):
            col(x, m=12)
    else:
        with pytest.raises(commgemm.MismatchError, match="rank 2 rejected"):
            col(x, m=12)
    with pytest.raises(commgemm.InvalidArgumentError, match=r"last dimension is 5, expected in_features = 6"):
        col(torch.randn(x.shape[0], 5), m=11)
    nosp = cgt.ColumnParallelLinear(6, 8, comm, sequence_parallel=False)
    with pytest.raises(commgemm.InvalidArgumentError, match=r"last dimension is 7, expected in_features = 6"):
        nosp(torch.randn(11, 7))
    row = cgt.RowParallelLinear(10, 6, comm, partition_multiple=2)  # 5 units of 2: 4, 4, 2
    with pytest.raises(commgemm.InvalidArgumentError,
                       match=rf"last dimension is 3, expected in_local = {[4, 4, 2][r]}, rank {r}'s shard of "
                             r"in_features = 10 \(partition \[4, 4, 2\]\); feed it .* same partition"):
        row(torch.randn(11, 3))
    with pytest.raises(commgemm.InvalidArgumentError, match=r"batch_first=True\): input has shape \(11, 6\): expected "
                                                            r"\[batch, sequence, features\]"):
        cgt.ColumnParallelLinear(6, 8, comm, batch_first=True)(torch.randn(11, 6))
    with pytest.raises(commgemm.InvalidArgumentError, match="partition_multiple = 3 does not divide out_features = 8"):
        cgt.ColumnParallelLinear(6, 8, comm, partition_multiple=3)
    with pytest.raises(commgemm.InvalidArgumentError, match=r"partition_sizes = \[4, 4\] \(sum 8\): expected 3 sizes"):
        cgt.ColumnParallelLinear(6, 8, comm, partition_sizes=[4, 4])
    with pytest.raises(commgemm.InvalidArgumentError, match="gather_output=True with skip_bias_add=True"):
        cgt.ColumnParallelLinear(6, 8, comm, gather_output=True, skip_bias_add=True)
    assert col(x, m=11).shape == (11, col.out_local)  # still usable


def body_copy_and_save(comm, group):
    """copy.deepcopy shares the comm and copies the parameters; pickling a
    layer or the comm says to save the state_dict, which saves and loads."""
    import copy
    import io
    import pickle
    import torch_cases as tc
    from commgemm import torch as cgt
    m = 7
    x = tc.rand((commgemm.shard_rows(m, comm.rank, comm.size), 6), 1, torch.float32, "cpu")
    layers = [cgt.ColumnParallelLinear(6, 10, comm),
              cgt.FusedColumnParallelLinear(6, [4, 6], comm), cgt.RowParallelLinear(6, 5, comm)]
    for layer in layers:
        model = torch.nn.Sequential(layer)
        twin = copy.deepcopy(model)
        assert twin[0].comm is comm and twin[0] is not layer
        assert twin[0].weight.data_ptr() != layer.weight.data_ptr() and torch.equal(twin[0].weight, layer.weight)
        if isinstance(layer, cgt.RowParallelLinear):
            inp, kw = tc.rand((m, layer.in_local), 2, torch.float32, "cpu"), {}
        else:
            inp, kw = x, {"m": m}
        out, twin_out = ((t if isinstance(t, tuple) else (t,)) for t in (layer(inp, **kw), twin[0](inp, **kw)))
        for a, b in zip(out, twin_out):
            assert torch.equal(a, b), f"{type(layer).__name__}: the copy computes otherwise"
        sum(t.sum() for t in twin_out).backward()
        assert twin[0].weight.grad is not None and layer.weight.grad is None, "gradients reached the original"
        for obj in (model, layer, comm):
            with pytest.raises(commgemm.NotPicklableError,
                               match=r"Save the parameters instead: torch.save\(model.state_dict\(\)"):
                torch.save(obj, io.BytesIO())
            with pytest.raises(TypeError, match="cannot be pickled"):
                pickle.dumps(obj)
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1)
        buf.seek(0)
        model.load_state_dict(torch.load(buf))
        assert torch.equal(model[0].weight, twin[0].weight), "state_dict did not round-trip"
    assert copy.copy(comm) is comm and copy.deepcopy(comm) is comm


def body_gathered_fallback(comm, group, lacks):
    """A backend whose AG+GEMM keeps the gathered input (cublasmp), and one
    with no bulk op either: the layers and ops gather it separately (the
    bulk all-gather, or torch.distributed on comm.process_group). The host
    backend plays that backend: its entry points refuse what it 'lacks'."""
    import torch_cases as tc
    from commgemm import _lib, core
    lib = _lib.lib()
    real_ag, real_bulk = lib.cgm_all_gather_gemm, lib.cgm_bulk_overlap

    def ag_without_gathered(*args):
        if args[5] is not None:
            raise commgemm.NotSupportedError(commgemm.Status.NOT_SUPPORTED, "this backend keeps the gathered input")
        return real_ag(*args)

    def no_bulk(*args):
        raise commgemm.NotSupportedError(commgemm.Status.NOT_SUPPORTED, "this backend has no bulk overlap")

    lib.cgm_all_gather_gemm = ag_without_gathered
    if "bulk" in lacks:
        lib.cgm_bulk_overlap = no_bulk
        comm.process_group = group
    core._BACKEND_LACKS["host"] = frozenset(lacks)
    assert not comm.supports("gathered") and comm.supports("bulk") == ("bulk" not in lacks)
    try:
        for m in (11, 2):
            for sp in (True, False):
                tc.check_column(comm, group, "cpu", torch.float32, m, sequence_parallel=sp)
                tc.check_row(comm, group, "cpu", torch.float32, m, sequence_parallel=sp)
            tc.check_functional(comm, group, "cpu", torch.float32, m)
        tc.check_column(comm, group, "cpu", torch.bfloat16, 11)
        tc.check_row(comm, group, "cpu", torch.bfloat16, 11)
        body_mlp_trains(comm, group)
        if "bulk" in lacks:  # gather_output, scatter_rows, gather_rows on torch.distributed
            body_layouts(comm, group)
    finally:
        del core._BACKEND_LACKS["host"]
        lib.cgm_all_gather_gemm, lib.cgm_bulk_overlap = real_ag, real_bulk


@pytest.mark.parametrize("nranks", [2, 3])
def test_partitions_and_fused_outputs(nranks):
    run_ranks(body_partitions, nranks)


@pytest.mark.parametrize("nranks", [1, 3])
def test_layouts_gather_output_and_sequence_helpers(nranks):
    run_ranks(body_layouts, nranks)


def test_shape_checks_say_what_to_pass():
    run_ranks(body_shape_checks, 3)


def test_deepcopy_shares_comm_and_pickling_says_save_state_dict():
    run_ranks(body_copy_and_save, 2)


@pytest.mark.parametrize("lacks", [("gathered",), ("gathered", "bulk")], ids=["no-gathered", "no-gathered-no-bulk"])
def test_backend_without_gathered_input(lacks):
    run_ranks(body_gathered_fallback, 3, lacks)


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


@pytest.mark.parametrize("lacks", [(), ("gathered",)], ids=["host", "no-gathered"])
def test_compile_fullgraph(lacks):
    """torch.compile(fullgraph=True) traces the layers' Python (checks,
    routes, the Functions' look-ups) without a graph break, on 1 rank
    (aot_eager: no C++ compiler needed)."""
    import torch_cases as tc
    from commgemm import core
    from commgemm import torch as cgt
    core._BACKEND_LACKS["host"] = frozenset(lacks)
    try:
        with commgemm.Comm.local(0, 1, f"compile-{os.getpid()}-{uuid.uuid4().hex[:8]}") as comm:
            model = tc.TPMLP(8, 12, comm, torch.float32, "cpu")
            fused = cgt.FusedColumnParallelLinear(8, [4, 6], comm, batch_first=True, gather_output=True)
            x = tc.rand((5, 8), 1, torch.float32, "cpu").requires_grad_()

            def loss_fn(x):
                a, b = fused(x.view(1, 5, 8), m=5)
                return model(x, 5).square().sum() + a.sum() + b.square().sum()

            want = loss_fn(x)
            want.backward()
            want_grads = [t.grad.clone() for t in [x] + list(model.parameters()) + list(fused.parameters())]
            for t in [x] + list(model.parameters()) + list(fused.parameters()):
                t.grad = None
            torch._dynamo.reset()
            got = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")(x)
            got.backward()
            tc.assert_close(got, want, torch.float32, "compiled loss")
            for i, (t, g) in enumerate(zip([x] + list(model.parameters()) + list(fused.parameters()), want_grads)):
                tc.assert_close(t.grad, g, torch.float32, f"compiled grad {i}")
    finally:
        core._BACKEND_LACKS.pop("host", None)


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


def body_epilogues(comm, group, dtype_name):
    """ParallelMLP and ColumnParallelLinear(activation="gelu") on the host backend, whose ops
    take the epilogues (GELU_AUX forward, DGELU_BGRAD and BGRAD backward), against the unsplit
    modules; and the same with the epilogues refused (as cublasmp's GEMM+RS and GEMM+AR do):
    torch's GELU."""
    import torch_cases as tc
    from commgemm import core
    dtype = getattr(torch, dtype_name)
    P = comm.size
    for fused in (True, False):
        if not fused:
            core._BACKEND_LACKS["host"] = frozenset({"epilogue", "bulk_epilogue"})
        try:
            for m in (11, 2, 6):  # uneven, m < P (with 3 ranks), even
                for sp in (True, False):
                    tc.check_mlp(comm, "cpu", dtype, m, sequence_parallel=sp, fused=fused)
                    tc.check_column_gelu(comm, "cpu", dtype, m, sequence_parallel=sp)
            tc.check_mlp(comm, "cpu", dtype, 9, bias=False, fused=fused)
            tc.check_mlp(comm, "cpu", dtype, 2 * P, batch=3, fused=fused)
            tc.check_mlp(comm, "cpu", dtype, 2 * P, batch=3, batch_first=True, fused=fused)
        finally:
            core._BACKEND_LACKS.pop("host", None)
    # a backend whose aux wants a leading dimension of 8s (the GPU backends): every rank fuses
    # only where every rank's width is one (37 features: none; 13 over 3 ranks: 5, 4, 4; 16 * P: all)
    core._AUX_LD_MULTIPLE["host"] = 8
    try:
        for ffn in (37, 13, 16 * P):
            fits = all(comm.shard_rows(ffn, q) % 8 == 0 for q in range(P))
            assert comm.epilogue_fits(ffn) == (ffn % 8 == 0)
            tc.check_mlp(comm, "cpu", dtype, 11, ffn=ffn, fused=fits)
            tc.check_column_gelu(comm, "cpu", dtype, 11, n=ffn)
    finally:
        core._AUX_LD_MULTIPLE.pop("host", None)


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_epilogues_fp32(nranks):
    run_ranks(body_epilogues, nranks, "float32")


def test_epilogues_bf16():
    run_ranks(body_epilogues, 2, "bfloat16")


def test_parallel_mlp_compiles_and_opchecks():
    """ParallelMLP's fused path (the host backend takes epilogues) under torch.compile(fullgraph=True)
    gives eager's loss and gradients, and torch.library.opcheck finds the epilogue op's schema and
    fake kernel in agreement with it, for every output it can make (1 rank)."""
    import torch_cases as tc
    from commgemm import torch as cgt
    with commgemm.Comm.local(0, 1, f"compile-mlp-{os.getpid()}-{uuid.uuid4().hex[:8]}") as comm:
        mlp = cgt.ParallelMLP(8, 12, comm)
        with torch.no_grad():
            for p in mlp.parameters():
                p.copy_(tc.rand(tuple(p.shape), p.numel(), torch.float32, "cpu"))
        x = tc.rand((5, 8), 1, torch.float32, "cpu").requires_grad_()
        assert mlp._fused()

        def loss_fn(x):
            return mlp(x, 5).square().sum()

        want = loss_fn(x)
        want.backward()
        params = [x] + list(mlp.parameters())
        want_grads = [t.grad.clone() for t in params]
        for t in params:
            t.grad = None
        torch._dynamo.reset()
        got = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")(x)
        got.backward()
        tc.assert_close(got, want, torch.float32, "compiled loss")
        for i, (t, g) in enumerate(zip(params, want_grads)):
            tc.assert_close(t.grad, g, torch.float32, f"compiled grad {i}")
        ops, utils = torch.ops.commgemm, ("test_schema", "test_faketensor")
        w, b, g = mlp.fc1.weight.detach(), mlp.fc1.bias.detach(), tc.rand((5, 12), 7, torch.float32, "cpu")
        xd = x.detach()
        _, _, pre, _ = ops.matmul_epilogue("ag", xd, w, b, None, comm.id, 5, "TN", "", "gelu_aux", "", "", True)
        for args in (("ag", xd, w, b, None, comm.id, 5, "TN", "", "gelu_aux", "", "", True),
                     ("rs", xd, w, b, None, comm.id, 0, "TN", "", "gelu", "", "", False),
                     ("ar", xd, w, None, pre, comm.id, 0, "TN", "", "dgelu_bgrad", "", "", False),
                     ("gemm", g, xd, None, None, comm.id, 0, "NT", "", "bgrad", "", "", False)):
            torch.library.opcheck(ops.matmul_epilogue, args, test_utils=utils)
