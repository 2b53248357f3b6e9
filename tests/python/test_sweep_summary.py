"""bench/sweep_summary.py on synthetic compare_torch.py JSON: speed-ups,
counts, geometric means per op, the rows two sweeps disagree on, and rows
without both timings left out."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import sweep_summary as ss  # noqa: E402


def row(op, shape, candidate, us, mode="graph", status="ok"):
    m, n, k = shape
    return {"op": op, "m": m, "n": n, "k": k, "mode": mode, "candidate": candidate,
            "status": status, "time_us": us}


def write(tmp_path, name, rows):
    p = tmp_path / name
    p.write_text(json.dumps({"tool": "compare_torch", "rows": rows}))
    return str(p)


def sweep(tmp_path, name, ag_us, rs_us):
    return write(tmp_path, name, [
        row("ag_gemm", (64, 32, 16), "torch_symm_mem", 100.0),
        row("ag_gemm", (64, 32, 16), "commgemm-p2p", ag_us),
        row("gemm_rs", (64, 32, 16), "torch_symm_mem", 90.0),
        row("gemm_rs", (64, 32, 16), "commgemm-p2p", rs_us),
        row("ag_gemm", (128, 32, 16), "torch_symm_mem", 200.0),
        row("ag_gemm", (128, 32, 16), "commgemm-p2p", 100.0),
        # eager rows, a failed candidate and a shape without torch: left out
        row("ag_gemm", (64, 32, 16), "commgemm-p2p", 1.0, mode="eager"),
        row("gemm_rs", (128, 32, 16), "torch_symm_mem", 50.0),
        row("gemm_rs", (128, 32, 16), "commgemm-p2p", 10.0, status="error"),
        row("gemm_rs", (256, 32, 16), "commgemm-p2p", 10.0),
    ])


def test_load_and_summarize(tmp_path):
    t = ss.load(sweep(tmp_path, "a.json", 80.0, 100.0), "graph", "commgemm-p2p")
    assert set(t) == {("ag_gemm", 64, 32, 16), ("gemm_rs", 64, 32, 16), ("ag_gemm", 128, 32, 16)}
    assert t[("ag_gemm", 64, 32, 16)] == (1.25, 80.0)
    assert math.isclose(t[("gemm_rs", 64, 32, 16)][0], 0.9)
    faster, total, means = ss.summarize(t)
    assert (faster, total) == (2, 3)
    assert math.isclose(means["ag_gemm"], math.sqrt(1.25 * 2.0))
    assert math.isclose(means["gemm_rs"], 0.9)


def test_two_sweeps_marks_disagreement(tmp_path, capsys):
    a = sweep(tmp_path, "a.json", 80.0, 100.0)   # RS slower than torch
    b = sweep(tmp_path, "b.json", 80.0, 60.0)    # RS faster
    assert ss.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "| gemm_rs | 64x32x16 (differs) | 0.900× (100.0 us) | 1.500× (60.0 us) |" in out
    assert "| ag_gemm | 64x32x16 | 1.250× (80.0 us) | 1.250× (80.0 us) |" in out
    assert f"{a}: 2 of 3 faster than torch" in out
    assert f"{b}: 3 of 3 faster than torch" in out


def test_no_rows_is_an_error(tmp_path, capsys):
    p = write(tmp_path, "empty.json", [row("ag_gemm", (64, 32, 16), "gemm", 5.0)])
    assert ss.main([p]) == 1
    assert "no graph rows" in capsys.readouterr().err
