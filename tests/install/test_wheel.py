"""The Python package as a user installs it: pip builds the wheel (CPU-only
where no GPU is visible, as `pip install ./python` builds it there), the
wheel goes into a fresh virtual environment, and its console script
commgemm-run starts examples/hello.py on 2 ranks of the host backend, which
must load the environment's own library (no PYTHONPATH, no COMMGEMM_LIB).
About a minute: most of it the wheel's CMake build.

    python3 -m pytest -q tests/install/test_wheel.py   # needs scikit-build-core (pip install scikit-build-core)
"""

import os
import pathlib
import shutil
import site as sitemod
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _gpu_visible():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return any(line.startswith("GPU ") for line in out.splitlines())


def _run(cmd, env, cwd, timeout):
    proc = subprocess.run([str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"{' '.join(map(str, cmd))} exited with {proc.returncode}\n"
                                  f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc.stdout


def test_wheel_in_fresh_venv(tmp_path):
    pytest.importorskip("scikit_build_core", reason="pip install scikit-build-core to build the wheel offline")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COMMGEMM_LIB", "COMMGEMM_CUDA")}
    if _gpu_visible():
        env["COMMGEMM_CUDA"] = "OFF"  # here the default would build the GPU backends (minutes of nvcc)
    dist = tmp_path / "dist"
    # No build isolation: the build backend and cmake come from this Python, no network needed. A
    # default build that compiled the GPU backends where no GPU is visible would take ~10 minutes.
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", dist,
          REPO / "python"], env, tmp_path, timeout=400)
    wheels = list(dist.glob("commgemm-*.whl"))
    assert len(wheels) == 1, f"expected one commgemm wheel in {dist}, found {os.listdir(dist)}"
    names = zipfile.ZipFile(wheels[0]).namelist()
    for name in ("commgemm/lib/libcommgemm.so.0", "commgemm/bin/commgemm-run", "commgemm/run.py"):
        assert name in names, f"{name} missing from {wheels[0].name}: {names}"

    # numpy (and anything else) from this Python's site-packages, which a .pth file puts after the
    # venv's own (where this Python is itself a venv, --system-site-packages reaches only its base);
    # commgemm only from the wheel, installed by this Python's pip.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], env, tmp_path, 120)
    python = venv / "bin" / "python"
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "outer_site.pth").write_text("\n".join(sitemod.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index", "--no-deps", wheels[0]],
         env, tmp_path, 120)
    for script in ("commgemm-run", "commgemm-info"):
        assert (venv / "bin" / script).exists(), f"the wheel installed no console script {script}"
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    info = _run(["commgemm-info"], env, tmp_path, 60)
    assert "host      compiled in   available" in info, info
    assert "p2p       not compiled" in info, f"expected a CPU-only library:\n{info}"

    hello = REPO / "examples" / "hello.py"
    for launcher in (["commgemm-run"], ["python", "-m", "commgemm.run"]):
        out = _run(launcher + ["-n", "2", "python", hello], env, tmp_path, 120)
        assert f"from {site / 'commgemm' / 'lib'}" in out, f"not the environment's library:\n{out}"
        for r in range(2):
            assert f"rank {r}/2: ag_gemm" in out and out.count(": OK") == 2, out
