"""bench/timeline_summary.py on synthetic COMMGEMM_TIMELINE traces: a split
schedule (GEMM chunks on queue 1, copies on queue 0) and a fused one (one
kernel on queue 1, pushes on queue 0, the own-row copy on queue 2)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import timeline_summary as ts  # noqa: E402


def write(tmp_path, name, events):
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": [
        {"name": n, "cat": cat, "ph": "X", "ts": t, "dur": d, "pid": 0, "tid": q, "args": {"step": i}}
        for i, (n, cat, t, d, q) in enumerate(events)]}))
    return str(p)


def test_split_trace(tmp_path):
    path = write(tmp_path, "t.ag_gemm.split.r0.json", [
        ("copy", "copy", 0, 40, 0),
        ("signal", "signal", 40, 2, 0),
        ("gemm a", "gemm", 5, 50, 1),
        ("wait", "wait", 55, 10, 1),   # the compute queue waits: idle
        ("gemm b", "gemm", 65, 50, 1),
    ])
    r = ts.summarize(path)
    assert r["span_us"] == 115
    assert r["gemm_us"] == 100 and r["gemm_steps"] == 2
    assert r["compute_idle_us"] == 15  # 0-5 before the first GEMM, 55-65 waiting
    assert r["comm_busy_us"] == 42
    assert r["head_us"] == 5
    assert r["tail_after_last_copy_us"] == 75


def test_fused_trace(tmp_path):
    # The local queue's copy (tid 2) is neither compute nor comm queue time.
    path = write(tmp_path, "t.ag_gemm.fused.r1.json", [
        ("signal FREE", "signal", 0, 2, 0),
        ("wait FREE", "wait", 2, 3, 0),
        ("copy push", "copy", 5, 80, 0),
        ("copy own", "copy", 0, 4, 2),
        ("kernel", "gemm", 3, 200, 1),
    ])
    r = ts.summarize(path)
    assert r["span_us"] == 203
    assert r["gemm_steps"] == 1 and r["gemm_us"] == 200
    assert r["compute_idle_us"] == 3
    assert r["comm_busy_us"] == 85
    assert r["tail_after_last_copy_us"] == 203 - 85


def test_table(tmp_path, capsys):
    path = write(tmp_path, "x.json", [("kernel", "gemm", 0, 10, 1), ("copy", "copy", 0, 5, 0)])
    assert ts.main(["timeline_summary.py", path]) == 0
    out = capsys.readouterr().out
    assert "| x.json | 10.0 | 10.0 (1) | 100% |" in out
    assert ts.main(["timeline_summary.py"]) == 2
