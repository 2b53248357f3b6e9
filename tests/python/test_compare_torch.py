"""CPU tests of bench/compare_torch.py and bench/plot_perf.py: the pure parts
(shape parsing and meaning, round order, statistics, rows, table, JSON), the
per-shape orchestration with a CPU test double in place of the GPUs and
torch.distributed (fake clock, fake CUDA graphs), and plot_perf on synthetic
JSON. The GPU part runs on GPUs only (scripts/gpu-suite.sh compare).

    python3 -m pytest tests/python/test_compare_torch.py -q
"""

import importlib.util
import json
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ct = _load("compare_torch")
pp = _load("plot_perf")


# --------------------------------------------------------------------------
# shapes
# --------------------------------------------------------------------------


def test_parse_shapes():
    assert ct.parse_shapes("16384x2048x8192") == [(16384, 2048, 8192)]
    assert ct.parse_shapes("16kx2kx8k, 8192X4096x4096,") == [(16384, 2048, 8192), (8192, 4096, 4096)]
    assert ct.parse_shapes("1Mx1x1") == [(1024 * 1024, 1, 1)]
    for bad in ("", "16384x2048", "16384x2048x8192x1", "0x1x1", "ax1x1", "-4x1x1", "1.5x1x1"):
        with pytest.raises(ValueError):
            ct.parse_shapes(bad)


def test_default_shapes_are_the_reference_shapes():
    shapes = ct.parse_shapes(ct.DEFAULT_SHAPES)
    # PERFORMANCE.md's --shapes, in its order
    assert shapes == [(16384, 2048, 8192), (8192, 4096, 4096), (16384, 8192, 2048)]
    # the four rows PyTorch's fused ops were quoted on, written (m, k, n): AG (16384, 8192, 2048),
    # (8192, 4096, 4096); RS (16384, 2048, 8192), (8192, 4096, 4096)
    reference = [("ag_gemm", (16384, 8192, 2048)), ("ag_gemm", (8192, 4096, 4096)),
                 ("gemm_rs", (16384, 2048, 8192)), ("gemm_rs", (8192, 4096, 4096))]
    for op, (m, k, n) in reference:
        assert (m, n, k) in shapes
        assert (op, m, n, k) in ct.REFERENCE_TORCH_RATIOS
    assert len(ct.REFERENCE_TORCH_RATIOS) == 4


def test_shape_semantics_match_commgemm_bench():
    # AG+GEMM splits n: X_r [m/P, k], W_r [n/P, k], Y [m, n/P]
    assert ct.local_shapes("ag_gemm", 16384, 2048, 8192, 2) == {"x": (8192, 8192), "w": (1024, 8192),
                                                                 "y": (16384, 1024)}
    # GEMM+RS splits k: X [m, k/P], W [n, k/P], Y_r [m/P, n]
    assert ct.local_shapes("gemm_rs", 16384, 8192, 2048, 2) == {"x": (16384, 1024), "w": (8192, 1024),
                                                                 "y": (8192, 8192)}
    assert ct.local_shapes("gemm_ar", 8192, 4096, 4096, 4) == {"x": (8192, 1024), "w": (4096, 1024),
                                                                "y": (8192, 4096)}
    assert ct.split_dim("ag_gemm") == "n" and ct.split_dim("gemm_rs") == "k" and ct.split_dim("gemm_ar") == "k"


def test_shape_problem():
    assert ct.shape_problem("ag_gemm", 16384, 2048, 8192, 2) is None
    assert "m = 15" in ct.shape_problem("ag_gemm", 15, 2048, 8192, 2)
    assert "n = 7" in ct.shape_problem("ag_gemm", 16, 7, 8, 2)
    assert ct.shape_problem("gemm_rs", 16, 7, 8, 2) is None  # RS splits k, not n
    assert "k = 9" in ct.shape_problem("gemm_rs", 16, 8, 9, 2)
    assert ct.shape_problem("gemm_ar", 9, 9, 9, 3) is None


def test_sweep():
    shapes = ct.sweep_shapes()
    assert 12 <= len(shapes) <= 20
    assert len(set(shapes)) == len(shapes)
    assert min(s[0] for s in shapes) == 1024 and max(s[0] for s in shapes) == 32768
    assert min(min(s[1], s[2]) for s in shapes) == 1024 and max(max(s[1], s[2]) for s in shapes) == 28672
    for s in shapes:
        for op in ct.OPS:
            for p in (2, 4, 8):
                assert ct.shape_problem(op, *s, p) is None


def test_parse_args():
    a = ct.parse_args([])
    assert a.shape_list == ct.parse_shapes(ct.DEFAULT_SHAPES)
    assert a.op_list == ["ag_gemm", "gemm_rs"] and a.backend_list == ["p2p", "nccl", "cublasmp"]
    assert a.dtype == "bf16" and a.warmup == 5 and a.iters == 20 and not a.graph
    a = ct.parse_args(["--sweep"])
    assert a.shape_list == ct.sweep_shapes()
    a = ct.parse_args(["--sweep", "--shapes", "1024x1024x1024,3072x3072x3072", "--ops", "all", "--backends", "nccl"])
    assert a.shape_list[0] == (1024, 1024, 1024) and a.shape_list[1] == (3072, 3072, 3072)
    assert len(a.shape_list) == len(ct.sweep_shapes()) + 1  # 1024^3 is in the sweep too: once
    assert a.op_list == list(ct.OPS) and a.backend_list == ["nccl"]
    assert ct.parse_args(["--backends", "p2p-fused,p2p"]).backend_list == ["p2p-fused", "p2p"]
    assert ct.parse_args(["--backends", "p2p-fused,p2p-split"]).backend_list == ["p2p-fused", "p2p-split"]
    for bad in (["--ops", "ag"], ["--backends", "host"], ["--backends", "p2p-ring"], ["--backends", "p2p-lead"],
                ["--shapes", "1x2"], ["--iters", "0"], ["--dtype", "fp4"], ["--dtype", "e4m3"]):
        with pytest.raises(SystemExit):
            ct.parse_args(bad)
    opts = ct.options_dict(ct.parse_args(["--graph"]))
    json.dumps(opts)
    assert opts["graph"] and opts["shapes"][0] == "16384x2048x8192" and not opts["align"]
    with pytest.raises(SystemExit):  # --align needs the pad that hides the host's enqueue
        ct.parse_args(["--align"])
    assert ct.options_dict(ct.parse_args(["--align", "--pad-us", "300"]))["align"]


def test_align_meets_before_every_start():
    torch = pytest.importorskip("torch")
    r = make_runner(["-w", "1", "-i", "2", "--pad-us", "300", "--align"], torch)
    r.run_shape("ag_gemm", (64, 32, 16))
    # every timed call (after the probe calls) comes right after barrier, align
    for i, c in enumerate(r.calls):
        if c == "align":
            assert r.calls[i - 1] == "barrier" and r.calls[i + 1] not in ("barrier", "align")
    assert r.calls.count("align") == 6 * (1 + 2)  # 6 working candidates x (warm-up + timed rounds)
    plain = make_runner(["-w", "1", "-i", "2"], torch)
    plain.run_shape("ag_gemm", (64, 32, 16))
    assert "align" not in plain.calls


def test_help_without_gpu(capsys):
    with pytest.raises(SystemExit) as e:
        ct.parse_args(["--help"])
    assert e.value.code == 0
    assert "torchrun" in capsys.readouterr().out


# --------------------------------------------------------------------------
# round order, statistics
# --------------------------------------------------------------------------


def test_round_order_rotates():
    names = ["a", "b", "c", "d"]
    assert ct.round_order(names, 0) == names
    assert ct.round_order(names, 1) == ["b", "c", "d", "a"]
    assert ct.round_order(names, 5) == ["b", "c", "d", "a"]
    assert ct.round_order([], 3) == []
    # over len(names) rounds every candidate takes every position once,
    # and follows every other candidate... at most twice
    positions = {n: set() for n in names}
    for i in range(len(names)):
        order = ct.round_order(names, i)
        assert sorted(order) == sorted(names)
        for pos, n in enumerate(order):
            positions[n].add(pos)
    assert all(p == set(range(len(names))) for p in positions.values())


def test_median_and_slowest():
    assert ct.median([3.0, 1.0, 2.0]) == 2.0
    assert ct.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert ct.median([]) is None
    assert ct.median([float("nan"), 1.0, None]) == 1.0
    assert ct.slowest([10.0, 12.5, None]) == 12.5
    assert ct.slowest([None]) is None


def test_candidate_names():
    assert ct.candidate_names("ag_gemm", ["p2p"]) == ["gemm", "comm", "nccl+cublas", "torch_symm_mem",
                                                      "commgemm-p2p"]
    assert ct.TORCH not in ct.candidate_names("gemm_ar", ["p2p", "nccl"])
    assert ct.candidate_kind("gemm") == "baseline" and ct.candidate_kind("commgemm-nccl") == "commgemm"
    assert ct.candidate_kind(ct.TORCH) == "peer" and ct.candidate_kind(ct.SEQ) == "peer"
    # --cgm-gemm: commgemm's own unsplit GEMM, a baseline (never checked, never the ideal)
    assert ct.candidate_names("ag_gemm", ["p2p"], cgm_gemm=True)[:4] == ["gemm", "comm", "nccl+cublas",
                                                                        "gemm-commgemm"]
    assert ct.CGM_GEMM not in ct.candidate_names("ag_gemm", [], cgm_gemm=True)
    assert ct.candidate_kind(ct.CGM_GEMM) == "baseline"
    rows = ct.build_rows("ag_gemm", (64, 64, 64), "eager",
                         {"gemm": {"time_us": 10.0}, "comm": {"time_us": 5.0}, ct.CGM_GEMM: {"time_us": 9.0}})
    assert all(r["ideal_us"] == 10.0 for r in rows)


# --------------------------------------------------------------------------
# rows, table, JSON
# --------------------------------------------------------------------------


def fake_results():
    return {"gemm": {"status": "ok", "time_us": 300.0}, "comm": {"status": "ok", "time_us": 200.0},
            "nccl+cublas": {"status": "ok", "time_us": 500.0, "wrong": 0},
            "torch_symm_mem": {"status": "ok", "time_us": 450.0, "wrong": 0},
            "commgemm-p2p": {"status": "ok", "time_us": 360.0, "wrong": 0, "max_rel_diff": 0.001},
            "commgemm-nccl": {"status": "ok", "time_us": 400.0, "wrong": 3},
            "commgemm-cublasmp": {"status": "skipped", "reason": "backend cublasmp unavailable: no libcublasmp"}}


def test_build_rows():
    names = ct.candidate_names("ag_gemm", ["p2p", "nccl", "cublasmp"])
    rows = ct.build_rows("ag_gemm", (16384, 2048, 8192), "eager", fake_results(), names)
    by = {r["candidate"]: r for r in rows}
    assert [r["candidate"] for r in rows] == names
    for r in rows:
        assert r["ideal_us"] == 300.0 and r["gemm_us"] == 300.0 and r["comm_us"] == 200.0
        assert (r["op"], r["m"], r["n"], r["k"], r["mode"]) == ("ag_gemm", 16384, 2048, 8192, "eager")
    assert by["gemm"]["ratio"] == pytest.approx(1.0)
    assert by["comm"]["ratio"] == pytest.approx(200 / 300)
    assert by["commgemm-p2p"]["ratio"] == pytest.approx(1.2)
    assert by["commgemm-p2p"]["speedup_vs_torch"] == pytest.approx(450 / 360)
    assert by["commgemm-p2p"]["speedup_vs_seq"] == pytest.approx(500 / 360)
    assert by["commgemm-p2p"]["max_rel_diff"] == 0.001  # extra fields are kept
    assert by["torch_symm_mem"]["speedup_vs_torch"] == pytest.approx(1.0)
    assert by["torch_symm_mem"]["reference_ratio"] == 1.27
    assert by["commgemm-p2p"]["tflops"] == pytest.approx(2 * 16384 * 2048 * 8192 / 360e-6 / 1e12)
    sk = by["commgemm-cublasmp"]
    assert sk["status"] == "skipped" and sk["time_us"] is None and sk["ratio"] is None
    assert sk["speedup_vs_torch"] is None and "libcublasmp" in sk["reason"]
    assert by["gemm"]["kind"] == "baseline" and by["commgemm-nccl"]["kind"] == "commgemm"


def test_build_rows_without_baselines():
    res = fake_results()
    del res["comm"]
    rows = ct.build_rows("gemm_rs", (64, 64, 64), "graph", res, ct.candidate_names("gemm_rs", ["p2p"]))
    by = {r["candidate"]: r for r in rows}
    assert by["comm"]["status"] == "skipped" and by["comm"]["reason"] == "not run"
    assert all(r["ideal_us"] is None and r["ratio"] is None for r in rows)
    assert by["commgemm-p2p"]["speedup_vs_torch"] == pytest.approx(450 / 360)


def test_table():
    names = ct.candidate_names("ag_gemm", ["p2p", "nccl", "cublasmp"])
    res = fake_results()
    res["commgemm-nccl"] = {"status": "error", "reason": "CudaError: bad | thing\nsecond line"}
    text = ct.format_table(ct.build_rows("ag_gemm", (16384, 2048, 8192), "eager", res, names))
    lines = text.split("\n")
    assert len(lines) == 2 + len(names)
    ncols = lines[0].count("|")
    assert all(line.count("|") == ncols for line in lines), text
    assert lines[0].startswith("| op | m | n | k | mode | candidate | time µs | ratio | vs torch |")
    p2p = next(line for line in lines if "commgemm-p2p" in line)
    assert "| 360.0 | 1.20 | 1.25 | 1.39 |" in p2p and p2p.endswith("| 0 |  |")
    assert "skipped: backend cublasmp unavailable" in text
    assert "ERROR: CudaError: bad / thing second line" in text
    assert "reference: 1.27" in next(line for line in lines if "torch_symm_mem" in line)
    gemm = next(line for line in lines if "| gemm |" in line)
    assert "| 300.0 | 1.00 |" in gemm and "| - |" in gemm  # baselines have no #wrong


def test_report_and_json(tmp_path):
    names = ct.candidate_names("ag_gemm", ["p2p", "nccl", "cublasmp"])
    rows = ct.build_rows("ag_gemm", (16384, 2048, 8192), "eager", fake_results(), names)
    machine = {"torch": "2.11.0", "nccl": "2.28.9", "gpu": "NVIDIA H200", "date_utc": "2026-12-01"}
    opts = ct.options_dict(ct.parse_args([]))
    rep = ct.build_report(rows, machine, opts)
    assert rep["wrong"] == 3 and rep["errors"] == 0 and rep["ok"] is False and rep["complete"]
    path = tmp_path / "sub" / "out.json"
    ct.write_json(path, rep)
    back = json.loads(path.read_text())
    assert back["tool"] == "compare_torch" and back["machine"]["gpu"] == "NVIDIA H200"
    assert len(back["rows"]) == len(names) and back["rows"][4]["speedup_vs_torch"] == pytest.approx(1.25)
    assert not list(tmp_path.glob("sub/*.tmp"))
    res = fake_results()
    res["commgemm-nccl"]["wrong"] = 0
    ok = ct.build_report(ct.build_rows("ag_gemm", (16384, 2048, 8192), "eager", res, names), machine, opts)
    assert ok["ok"] is True
    assert ct.build_report([], machine, opts, complete=False)["ok"] is False
    res["commgemm-nccl"] = {"status": "error", "reason": "x"}
    bad = ct.build_report(ct.build_rows("ag_gemm", (16384, 2048, 8192), "eager", res, names), machine, opts)
    assert bad["errors"] == 1 and bad["ok"] is False


# --------------------------------------------------------------------------
# per-shape orchestration on a CPU test double
# --------------------------------------------------------------------------


class Clock:
    now = 0.0  # µs


class FakeEvent:
    def record(self):
        self.t = Clock.now

    def elapsed_time(self, end):
        return (end.t - self.t) / 1000.0  # ms


class FakeGraph:
    def __init__(self, fn, out):
        self.fn, self.out = fn, out

    def replay(self):
        self.out.copy_(self.fn())


def make_runner(argv, torch, uncapturable=()):
    class FakeRunner(ct.Runner):
        """One rank, no GPU, no torch.distributed: the collective helpers are
        identities, events read a fake clock that each candidate advances."""

        def __init__(self, args):
            self.torch, self.args = torch, args
            self.rank, self.size = 0, 1
            self.torch_reason = None
            self.pad_cycles = 0
            self.calls = []

        def barrier(self):
            self.calls.append("barrier")

        def align(self):
            self.calls.append("align")

        def agree(self, ok):
            return ok

        def gather_floats(self, values):
            return [list(values)]

        def sum_int(self, value):
            return int(value)

        def sync(self):
            pass

        def event(self):
            return FakeEvent()

        def release(self):
            pass

        def graph_capture(self, fn):
            name = fn.__name__
            if name in uncapturable:
                raise RuntimeError(f"operation not permitted when stream is capturing ({name})")
            out = fn()
            return FakeGraph(fn, out), out

        def candidates(self, op, shape):
            m, n, k = shape
            g = torch.Generator().manual_seed(0)
            x = torch.randint(-8, 9, (m, k), generator=g).float() / 8
            w = torch.randint(-8, 9, (n, k), generator=g).float() / 8

            def timed(name, us, wrong=False, fail=False):
                def fn():
                    self.calls.append(name)
                    if fail:
                        raise RuntimeError("cuBLAS error: not initialized")
                    Clock.now += us
                    y = x @ w.t()
                    if wrong:
                        y = y.clone()
                        y[0, :2] += 1000.0
                    return y
                fn.__name__ = name
                return fn

            fns = {"gemm": timed("gemm", 100.0), "comm": timed("comm", 80.0), "nccl+cublas": timed("seq", 180.0),
                   "torch_symm_mem": timed("torch", 150.0), "commgemm-p2p": timed("p2p", 110.0),
                   "commgemm-nccl": timed("nccl", 120.0, wrong=True),
                   "commgemm-cublasmp": timed("cublasmp", 1.0, fail=True)}
            return fns, {}

    return FakeRunner(ct.parse_args(argv))


def test_run_shape_orchestration():
    torch = pytest.importorskip("torch")
    r = make_runner(["-w", "2", "-i", "5", "--graph"], torch, uncapturable=("torch",))
    rows = r.run_shape("ag_gemm", (64, 32, 16))
    eager = {x["candidate"]: x for x in rows if x["mode"] == "eager"}
    graph = {x["candidate"]: x for x in rows if x["mode"] == "graph"}
    assert list(eager) == ct.candidate_names("ag_gemm", ["p2p", "nccl", "cublasmp"]) == list(graph)
    assert eager["gemm"]["time_us"] == pytest.approx(100.0) and eager["comm"]["time_us"] == pytest.approx(80.0)
    assert eager["commgemm-p2p"]["ratio"] == pytest.approx(1.1)
    assert eager["commgemm-p2p"]["speedup_vs_torch"] == pytest.approx(150 / 110)
    assert eager["commgemm-p2p"]["speedup_vs_seq"] == pytest.approx(180 / 110)
    assert eager["commgemm-p2p"]["wrong"] == 0 and eager["nccl+cublas"]["wrong"] == 0
    assert eager["commgemm-nccl"]["wrong"] == 4  # 2 elements, checked at the first and the last call
    assert eager["commgemm-nccl"]["max_rel_diff"] > 1
    assert eager["commgemm-cublasmp"]["status"] == "error"
    assert "cuBLAS error" in eager["commgemm-cublasmp"]["reason"]
    assert eager["gemm"]["wrong"] is None and eager["gemm"]["per_rank_median_us"] == [pytest.approx(100.0)]
    # graph mode: torch could not be captured; the others replayed
    assert graph["torch_symm_mem"]["status"] == "skipped" and "not capturable" in graph["torch_symm_mem"]["reason"]
    assert graph["commgemm-p2p"]["time_us"] == pytest.approx(110.0) and graph["commgemm-p2p"]["ratio"] == \
        pytest.approx(1.1)
    assert graph["commgemm-p2p"]["speedup_vs_torch"] is None
    assert graph["commgemm-nccl"]["wrong"] == 2 and graph["commgemm-p2p"]["wrong"] == 0
    assert graph["commgemm-cublasmp"]["status"] == "error"
    # interleaving: one barrier before every measurement; each round runs every candidate once
    n_ok = 6
    measured = [c for c in r.calls if c != "barrier"]
    assert measured.count("p2p") == 1 + 2 + 5 + 1 + 2 + 5  # probe, eager rounds, capture, graph rounds
    assert measured.count("cublasmp") == 1  # probed once, then dropped
    first_round = measured[7:7 + n_ok]
    second_round = measured[7 + n_ok:7 + 2 * n_ok]
    assert sorted(first_round) == sorted(second_round) and first_round[1:] + first_round[:1] == second_round
    rep = ct.build_report(rows, {}, {})
    assert rep["wrong"] == 6 and rep["errors"] == 2 and not rep["ok"]


def test_run_shape_rejects_uneven_shapes():
    torch = pytest.importorskip("torch")
    r = make_runner([], torch)
    r.size = 2
    rows = r.run_shape("gemm_rs", (64, 32, 15))
    assert all(x["status"] == "skipped" and "k = 15" in x["reason"] for x in rows)
    assert r.calls == []


def test_baseline_failure_keeps_rows():
    torch = pytest.importorskip("torch")
    r = make_runner(["-w", "0", "-i", "2", "--graph"], torch, uncapturable=("comm",))
    rows = r.run_shape("gemm_rs", (16, 8, 8))
    graph = {x["candidate"]: x for x in rows if x["mode"] == "graph"}
    # the comm baseline was not capturable: its eager time gives the ideal
    assert graph["comm"]["time_us"] == pytest.approx(80.0) and "eager time" in graph["comm"]["reason"]
    assert graph["commgemm-p2p"]["ratio"] == pytest.approx(1.1)


# --------------------------------------------------------------------------
# --dtype fp8
# --------------------------------------------------------------------------


def test_fp8_args_and_options():
    a = ct.parse_args(["--dtype", "fp8", "--shapes", "4096x4096x4096", "--ops", "ag_gemm,gemm_rs"])
    assert a.dtype == "fp8" and a.tol is None and a.shape_list == [(4096, 4096, 4096)]
    opts = ct.options_dict(a)
    json.dumps(opts)
    assert opts["dtype"] == "fp8" and opts["fp8"]["x_scale"] == ct.FP8_X_SCALE
    assert opts["fp8"]["w_scale"] == ct.FP8_W_SCALE and opts["fp8"]["output"] == "bf16"
    assert opts["fp8"]["scales"] == "the same on every rank" and opts["fp8"]["fast_accum"] is False
    assert "fp8" not in ct.options_dict(ct.parse_args([]))
    assert "X 0.5 W 0.25" in ct.dtype_line(a) and "dequantized" in ct.dtype_line(a)
    assert "nccl+cublas" in ct.dtype_line(ct.parse_args([]))
    # the fused ops asked of torch follow the dtype
    assert ct.FUSED_OPS[True] == ("fused_all_gather_scaled_matmul", "fused_scaled_matmul_reduce_scatter")
    assert ct.FUSED_OPS[False] == ("fused_all_gather_matmul", "fused_matmul_reduce_scatter")


def test_fp8_tolerance():
    u = 2.0 ** -8
    assert ct.fp8_tolerance("ag_gemm", 8) == 2 * u
    assert ct.fp8_tolerance("gemm_rs", 1) == 3 * u and ct.fp8_tolerance("gemm_rs", 8) == 17 * u
    assert ct.fp8_tolerance("gemm_ar", 2) == 5 * u
    assert ct.tolerance(None, "fp8", "gemm_rs", 4) == 9 * u
    assert ct.tolerance(None, "bf16", "gemm_rs", 4) == ct.DEFAULT_TOL == 2e-2
    assert ct.tolerance(1e-3, "fp8", "ag_gemm", 4) == 1e-3  # --tol wins
    # a bf16 rounding of a value <= max|ref| is within the AG bound, two roundings are not always
    assert u / 2 <= ct.fp8_tolerance("ag_gemm", 1) < 4 * u
    assert "dequantized" in ct.reference_name("fp8") and ct.reference_name("bf16") == ct.SEQ


def test_failure_status():
    assert ct.failure_status(ct.TORCH, 1) == "skipped"
    assert ct.failure_status(ct.TORCH, 2) == "error"
    assert ct.failure_status("commgemm-p2p", 1) == "error" and ct.failure_status(ct.SEQ, 1) == "error"


RS_NEW = ("symm_mem::fused_scaled_matmul_reduce_scatter(Tensor A, Tensor B, Tensor A_scale, Tensor B_scale, "
          "str reduce_op, int orig_scatter_dim, int scatter_dim_after_maybe_reshape, str group_name, "
          "SymInt[]? output_shape, Tensor? bias=None, Tensor? result_scale=None, ScalarType? out_dtype=None, "
          "bool use_fast_accum=False) -> Tensor")
RS_OLD = ("symm_mem::fused_scaled_matmul_reduce_scatter(Tensor A, Tensor B, Tensor A_scale, Tensor B_scale, "
          "str reduce_op, int scatter_dim, str group_name, Tensor? bias=None, Tensor? result_scale=None, "
          "ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor")
AG = ("symm_mem::fused_all_gather_scaled_matmul(Tensor A, Tensor[] Bs, Tensor A_scale, Tensor[] B_scales, "
      "int gather_dim, str group_name, Tensor?[] biases, Tensor?[] result_scales, ScalarType?[] out_dtypes, "
      "bool[] use_fast_accum) -> (Tensor, Tensor[])")


def test_schema_kwargs():
    assert ct.schema_arg_names(AG) == ["A", "Bs", "A_scale", "B_scales", "gather_dim", "group_name", "biases",
                                       "result_scales", "out_dtypes", "use_fast_accum"]
    assert ct.schema_arg_names("f(Tensor A, *, bool return_A=True) -> (Tensor?, Tensor[])") == ["A", "return_A"]
    values = {"A": "a", "B": "b", "A_scale": "sa", "B_scale": "sb", "reduce_op": "sum", "scatter_dim": 0,
              "orig_scatter_dim": 0, "scatter_dim_after_maybe_reshape": 0, "group_name": "0",
              "output_shape": [64, 32], "out_dtype": "bf16", "use_fast_accum": False}
    new = ct.schema_kwargs(RS_NEW, values)
    assert list(new) == ["A", "B", "A_scale", "B_scale", "reduce_op", "orig_scatter_dim",
                         "scatter_dim_after_maybe_reshape", "group_name", "output_shape", "out_dtype",
                         "use_fast_accum"]  # bias and result_scale: left to their defaults
    old = ct.schema_kwargs(RS_OLD, values)
    assert "scatter_dim" in old and "output_shape" not in old and old["group_name"] == "0"
    del values["output_shape"]
    with pytest.raises(ValueError, match="output_shape"):  # no default: it must be filled
        ct.schema_kwargs(RS_NEW, values)
    with pytest.raises(ValueError):
        ct.schema_arg_names("no schema here")


def test_fp8_rows_and_report():
    names = ct.candidate_names("gemm_rs", ["p2p", "nccl"])
    extra = {"dtype": "fp8", "tol": ct.fp8_tolerance("gemm_rs", 2)}
    rows = ct.build_rows("gemm_rs", (4096, 4096, 4096), "eager", fake_results(), names, extra)
    assert all(r["dtype"] == "fp8" and r["tol"] == 5 * 2.0 ** -8 for r in rows)
    assert [r["candidate"] for r in rows] == names and ct.TORCH in names
    rep = ct.build_report(rows, {}, ct.options_dict(ct.parse_args(["--dtype", "fp8"])))
    assert "dequantized" in rep["columns"]["wrong"]
    assert "nccl+cublas" in ct.build_report(rows, {}, ct.options_dict(ct.parse_args([])))["columns"]["wrong"]


def test_run_shape_fp8_checks_every_candidate_against_the_exact_product():
    torch = pytest.importorskip("torch")
    r = make_runner(["--dtype", "fp8", "-w", "1", "-i", "2"], torch)
    plain = r.candidates

    def candidates(op, shape):
        fns, skipped = plain(op, shape)
        inner_seq, inner_torch = fns["nccl+cublas"], fns["torch_symm_mem"]

        def seq():  # off by 1.5 bounds in one element: the peer is checked too
            y = inner_seq().clone()
            y[1, 1] += 1.5 * ct.fp8_tolerance(op, 1) * y.abs().max()
            return y

        def rounded():  # bf16 rounding of the exact result: within the bound
            return inner_seq().to(torch.bfloat16)

        def torch_fails():
            raise RuntimeError("symmetric memory: group of 1")
        fns["nccl+cublas"], fns["commgemm-p2p"], fns["torch_symm_mem"] = seq, rounded, torch_fails
        del inner_torch
        return fns, skipped

    r.candidates = candidates
    r.fp8_reference = lambda op, shape: fp8_exact(torch, shape)
    rows = {x["candidate"]: x for x in r.run_shape("gemm_rs", (64, 32, 16))}
    assert rows["nccl+cublas"]["wrong"] == 2  # first call and last timed call
    assert rows["commgemm-p2p"]["wrong"] == 0 and rows["commgemm-p2p"]["status"] == "ok"
    assert rows["commgemm-nccl"]["wrong"] == 4
    assert rows["torch_symm_mem"]["status"] == "skipped" and "group of 1" in rows["torch_symm_mem"]["reason"]
    assert all(x["tol"] == 3 * 2.0 ** -8 and x["dtype"] == "fp8" for x in rows.values())


def fp8_exact(torch, shape):
    m, n, k = shape
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-8, 9, (m, k), generator=g).double() / 8
    w = torch.randint(-8, 9, (n, k), generator=g).double() / 8
    return (x @ w.t()).float()


# --------------------------------------------------------------------------
# plot_perf
# --------------------------------------------------------------------------


def synthetic_compare(path, shapes, graph=False):
    rows = []
    for i, shape in enumerate(shapes):
        for op in ("ag_gemm", "gemm_rs"):
            for mode in ("eager", "graph") if graph else ("eager",):
                res = fake_results()
                res["commgemm-p2p"]["time_us"] = 300.0 + 10 * i
                rows += ct.build_rows(op, shape, mode, res, ct.candidate_names(op, ["p2p", "nccl", "cublasmp"]))
    ct.write_json(path, ct.build_report(rows, {"gpu": "fake"}, {}))


def synthetic_bench(path):
    doc = {"tool": "commgemm-bench", "version": "0.1.0", "nranks": 2, "environment": "gpu", "options": {},
           "rows": [{"op": "ag_gemm", "m": 16384, "n": 2048, "k": 8192, "dtype": "bf16", "backend": "p2p",
                     "algo": "auto", "failed": False, "time_us": 847.1, "tflops": 649, "gemm_us": 333.0,
                     "comm_us": 551.4, "ideal_us": 551.4, "ratio": 1.54, "seq_us": 935.6, "wrong": 0},
                    {"op": "gemm_rs", "m": 16384, "n": 2048, "k": 8192, "dtype": "bf16", "backend": "p2p",
                     "algo": "auto", "failed": True, "time_us": None, "tflops": None, "gemm_us": None,
                     "comm_us": None, "ideal_us": None, "ratio": None, "seq_us": None, "wrong": 0}],
           "wrong": 0, "errors": 1, "avg_ratio": 1.54, "ok": False}
    path.write_text(json.dumps(doc))


def test_plot_load_rows(tmp_path):
    synthetic_compare(tmp_path / "c.json", [(16384, 2048, 8192)])
    synthetic_bench(tmp_path / "p2p.json")
    rows = pp.load_rows(tmp_path / "c.json")
    assert {r["candidate"] for r in rows} == {"nccl+cublas", "torch_symm_mem", "commgemm-p2p", "commgemm-nccl"}
    b = pp.load_rows(tmp_path / "p2p.json")
    assert [(r["candidate"], r["op"]) for r in b] == [("bench-p2p", "ag_gemm"), ("bench-p2p-seq", "ag_gemm")]
    assert b[1]["ratio"] == pytest.approx(935.6 / 551.4)
    (tmp_path / "x.json").write_text(json.dumps({"tool": "other"}))
    with pytest.raises(ValueError):
        pp.load_rows(tmp_path / "x.json")
    # the same candidate in two files: labelled by file
    synthetic_compare(tmp_path / "d.json", [(16384, 2048, 8192)])
    merged = pp.merge([tmp_path / "c.json", tmp_path / "d.json"])
    assert "commgemm-p2p [c]" in {r["candidate"] for r in merged}


def test_plot_perf_writes_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    sweep = ct.sweep_shapes()[:6]
    synthetic_compare(tmp_path / "sweep.json", sweep, graph=True)
    synthetic_bench(tmp_path / "p2p.json")
    out = tmp_path / "perf"
    assert pp.main([str(tmp_path / "sweep.json"), str(tmp_path / "p2p.json"), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted(["sweep_ratio_ag_gemm.png", "sweep_speedup_ag_gemm.png", "sweep_ratio_gemm_rs.png",
                            "sweep_speedup_gemm_rs.png", "sweep_ratio_ag_gemm_graph.png",
                            "sweep_speedup_ag_gemm_graph.png", "sweep_ratio_gemm_rs_graph.png",
                            "sweep_speedup_gemm_rs_graph.png"])
    for p in out.glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000
    # a commgemm-bench file alone: ratio plots, no speed-up plot
    out2 = tmp_path / "perf2"
    assert pp.main([str(tmp_path / "p2p.json"), "--out", str(out2), "--prefix", "b_"]) == 0
    assert sorted(p.name for p in out2.glob("*.png")) == ["b_ratio_ag_gemm.png"]
    assert pp.main([str(tmp_path / "missing.json"), "--out", str(out2)]) == 2
