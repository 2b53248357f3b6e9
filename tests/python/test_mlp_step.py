"""CPU smoke tests of bench/mlp_step.py: its pure parts, and whole runs on the host
backend (CPU tensors, gloo) with one rank and with two (uneven rows), checking that the
fused ParallelMLP step and the step with separate bias/GELU kernels agree, and that a
disagreement fails the run.

    COMMGEMM_LIB=$PWD/build-cpu/libcommgemm.so python3 -m pytest tests/python/test_mlp_step.py -q
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "mlp_step.py"
SMALL = ["--device", "cpu", "--tokens", "37", "--hidden", "16", "--ffn", "24", "-w", "1", "-i", "2"]


def _load():
    spec = importlib.util.spec_from_file_location("mlp_step", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ms = _load()


def test_compare_counts_disagreements():
    ref = torch.linspace(-1, 1, 64).reshape(8, 8)
    assert ms.compare(ref, ref.clone(), 1e-3) == (0, 0.0)
    got = ref.clone()
    got[3, 4] += 0.5
    got[0, 0] = float("nan")
    wrong, worst = ms.compare(ref, got, 1e-3)
    assert wrong == 2 and worst == pytest.approx(0.5)  # the largest finite difference
    assert ms.compare(ref, ref[:4], 1e-3)[0] > 0  # a shape that differs is wrong
    assert ms.compare_results([ref, ref], [ref, got], 1e-3)[0] == 2


def test_round_order_alternates():
    assert ms.round_order(0) == ("separate", "fused")
    assert ms.round_order(1) == ("fused", "separate")


def test_parse_args():
    a = ms.parse_args(["--device", "cpu"])
    assert a.backend_list == ["host"] and a.mode_list == ["fwd", "fwd+bwd"] and a.tol == 2e-2
    assert (a.tokens, a.hidden, a.ffn, a.dtype) == (8192, 4096, 14336, "bf16")
    assert ms.parse_args([]).backend_list == ["p2p", "nccl"]
    for bad in (["--modes", "bwd"], ["--tokens", "0"], ["--warmup", "-1"]):
        with pytest.raises(SystemExit):
            ms.parse_args(bad)


def _run(tmp_path, extra, nranks=1):
    out = tmp_path / "rows.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(SCRIPT)] + SMALL + ["--json", str(out)] + extra
    if nranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nranks}"] + cmd[1:]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc, report


@pytest.mark.parametrize("nranks", [1, 2])
def test_fused_and_separate_agree_on_host(tmp_path, nranks):
    proc, report = _run(tmp_path, [], nranks)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert report["nranks"] == nranks
    rows = report["rows"]
    assert [(r["backend"], r["mode"]) for r in rows] == [("host", "fwd"), ("host", "fwd+bwd")]
    for r in rows:
        assert r["status"] == "ok" and r["wrong"] == 0, r
        assert r["separate_us"] > 0 and r["fused_us"] > 0 and r["max_rel_diff"] <= r["tol"]


def test_disagreement_fails_the_run(tmp_path):
    proc, report = _run(tmp_path, ["--modes", "fwd", "--inject-wrong-value"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert report["rows"][0]["wrong"] > 0
