#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs
# commgemm-bench on its default shape with the best backend available: the
# GPU backends over every visible GPU when there are GPUs, else the host
# backend with 4 ranks. Extra arguments go to commgemm-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
commgemm_install_deps
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
cmake --build build -j"$jobs" --target commgemm-bench commgemm-run
if commgemm_have_gpu && grep -q "GPU backends ON" build-configure.log; then
    n=$(commgemm_gpu_count)
    exec build/tools/commgemm-run -n "$n" build/bench/commgemm-bench --backend auto "$@"
else
    exec build/tools/commgemm-run -n 4 build/bench/commgemm-bench --backend host "$@"
fi
