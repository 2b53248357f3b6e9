#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, and runs
# commgemm-bench with the best backend available: on a GPU machine one rank
# per visible GPU, backend auto (p2p inside one NVLink domain), bf16
# m=8192 n=4096 k=4096, every op; else the host backend with 4 ranks on the
# bench's default shape. Extra arguments go to commgemm-bench and win over
# these defaults (e.g. -m 16384, --backend nccl, --json out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
commgemm_install_deps
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build-configure.log 2>&1 || { cat build-configure.log; exit 1; }
cmake --build build -j"$jobs" --target commgemm-bench commgemm-run
if commgemm_have_gpu && grep -q "GPU backends ON" build-configure.log; then
    n=$(commgemm_gpu_count)
    exec build/tools/commgemm-run -n "$n" build/bench/commgemm-bench --backend auto \
        --dtype bf16 -m 8192 -n 4096 -k 4096 --op all "$@"
else
    exec build/tools/commgemm-run -n 4 build/bench/commgemm-bench --backend host "$@"
fi
