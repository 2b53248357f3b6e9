"""The Python examples as a user runs them: they import the commgemm that is
installed (or on PYTHONPATH), not the repository's python/ behind the
user's back; torch_tp_mlp.py runs under commgemm-run as under torchrun; both
examples take the same flag spellings.

    PYTHONPATH=python COMMGEMM_LIB=build/libcommgemm.so python3 -m pytest -q tests/install/test_examples.py
"""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
LAUNCH_VARS = ("COMMGEMM_RANK", "COMMGEMM_NRANKS", "COMMGEMM_RENDEZVOUS", "RANK", "WORLD_SIZE", "LOCAL_RANK",
               "MASTER_ADDR", "MASTER_PORT")


def _env():
    """This environment with the repository's python/ on PYTHONPATH (as the
    README's commands set it) and no launcher variables."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "python"), env.get("PYTHONPATH")) if p)
    return env


def _load(name):
    sys.path.insert(0, str(REPO / "python"))
    try:
        spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(REPO / "python"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_imports_the_installed_package(path):
    assert "sys.path" not in path.read_text(), (
        f"{path.name} changes sys.path: it would import the repository's python/ instead of the installed "
        "commgemm; the commands that run it set PYTHONPATH where they need to")


@pytest.mark.parametrize("name", ["jax_tp_mlp", "torch_tp_mlp"])
def test_flag_spellings(name):
    if name == "torch_tp_mlp":
        pytest.importorskip("torch")
    mod = _load(name)
    documented = mod.parse_args(["--device", "gpu", "--dtype", "bf16"])
    assert (documented.device, documented.dtype) == ("gpu", "bf16")
    for device, dtype, want in (("cuda", "bfloat16", ("gpu", "bf16")), ("cpu", "float32", ("cpu", "fp32")),
                                ("CPU", "FP16", ("cpu", "fp16")), ("gpu", "float16", ("gpu", "fp16"))):
        args = mod.parse_args(["--device", device, "--dtype", dtype])
        assert (args.device, args.dtype) == want, (device, dtype, args)
    with pytest.raises(SystemExit):
        mod.parse_args(["--dtype", "int8"])


def test_torch_example_under_commgemm_run(tmp_path):
    pytest.importorskip("torch")
    cmd = [sys.executable, "-m", "commgemm.run", "-n", "2", "--timeout", "240", sys.executable,
           REPO / "examples" / "torch_tp_mlp.py", "--device", "cpu", "--dtype", "fp32", "--compare",
           "--tokens", "37", "--hidden", "32", "--ffn", "64", "--steps", "2"]
    proc = subprocess.run([str(c) for c in cmd], env=_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and "largest relative loss difference" in proc.stdout and ": OK" in proc.stdout, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")


def test_torch_example_without_launcher(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "torch_tp_mlp.py"), "--device", "cpu"],
                          env=_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "no launcher found" in proc.stderr and "commgemm-run -n N" in proc.stderr, (
        f"exit {proc.returncode}\nstderr:\n{proc.stderr[-3000:]}")
    assert "Traceback" not in proc.stderr, proc.stderr
