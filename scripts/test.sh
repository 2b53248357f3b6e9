#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, runs every
# test (CPU tests here; GPU tests run when a GPU is present and skip with a
# reason otherwise), then the CPU tests again under ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
commgemm_install_deps
jobs=$(nproc 2>/dev/null || echo 2)

echo "== build (RelWithDebInfo, -Wall -Wextra -Werror) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
grep -E "commgemm: GPU" build-configure.log || true
cmake --build build -j"$jobs"
echo "== tests =="
(cd build && ctest -j"$jobs" --output-on-failure --timeout 300)

echo "== Python binding on the host backend =="
# python3, or a venv in build/ where python3 cannot install (a user without root, PEP 668)
py=$(commgemm_python build/python-venv)
# jax for commgemm.jax's tests (the CPU wheels where no jax is installed; an installed one is kept);
# scikit-build-core for tests/install/test_wheel.py (pip's build of the package, in a fresh venv)
"$py" -m pip install -q --disable-pip-version-check numpy pytest jax scikit-build-core 2>&1 | grep -v "Running pip as the 'root'" || true
# torch for commgemm.torch's tests (PyPI's wheel runs on the CPU; with its CUDA
# libraries it takes ~4.2 GiB), when the disk has room and COMMGEMM_SKIP_TORCH
# is not 1; without it tests/python/test_torch_host.py skips and says why.
if [ "${COMMGEMM_SKIP_TORCH:-0}" != 1 ] && ! "$py" -c 'import torch' 2>/dev/null; then
    site=$("$py" -c 'import site; print(site.getsitepackages()[0])')
    free_gib=$(df -Pk "$site" | awk 'NR == 2 {print int($4 / 1048576)}')
    if [ "${free_gib:-0}" -ge 12 ]; then
        "$py" -m pip install -q --disable-pip-version-check torch 2>&1 | grep -v "Running pip as the 'root'" ||
            true
    else
        echo "commgemm: ${free_gib:-?} GiB free under $site, torch needs ~5: not installed;" \
            "tests/python/test_torch_host.py skips (python3 -m pip install torch to run it)"
    fi
fi
COMMGEMM_LIB="$PWD/build/libcommgemm.so" JAX_PLATFORMS=cpu "$py" -m pytest -q tests/python/test_host.py tests/python/test_torch_host.py tests/python/test_compare_torch.py tests/python/test_timeline_summary.py tests/python/test_sweep_summary.py tests/python/test_jax_host.py \
    tests/python/test_fp8_host.py tests/python/test_torch_fp8_host.py tests/python/test_jax_fp8_host.py \
    tests/install/test_examples.py tests/install/test_wheel.py

if [ "${COMMGEMM_SKIP_SANITIZE:-0}" != 1 ]; then
    echo "== ASan + UBSan build of the CPU tests =="
    cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCOMMGEMM_SANITIZE=ON -DCOMMGEMM_CUDA=OFF \
        >build-asan-configure.log 2>&1 || { cat build-asan-configure.log; exit 1; }
    cmake --build build-asan -j"$jobs"
    (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
        TEST_TIMEOUT_SCALE=4 ctest -j"$jobs" --output-on-failure --timeout 600 -LE gpu)
fi
