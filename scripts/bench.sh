#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, prints what the
# machine has (commgemm-info), and runs commgemm-bench with the best backend
# available: on a GPU machine one rank per visible GPU, backend auto (p2p
# inside one NVLink domain), bf16 m=8192 n=4096 k=4096, every op; else the
# host backend with as many ranks as the cores hold (commgemm-run -n auto)
# on the bench's default shape, built CPU-only in build-cpu/. Extra arguments go to commgemm-bench and win over these
# defaults (e.g. -m 16384, --backend nccl, --json out.json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
commgemm_install_deps
jobs=$(nproc 2>/dev/null || echo 2)
read -r tree cuda_arg <<<"$(commgemm_bench_tree)"
[ "$tree" = build ] || echo "commgemm: no GPU visible (nvidia-smi lists none): CPU-only build in $tree/" >&2
log=$tree-configure.log
# shellcheck disable=SC2086 # cuda_arg: one argument or none
cmake -S . -B "$tree" -DCMAKE_BUILD_TYPE=RelWithDebInfo $cuda_arg >"$log" 2>&1 || { cat "$log"; exit 1; }
cmake --build "$tree" -j"$jobs" --target commgemm-bench commgemm-run commgemm-info
"$tree"/tools/commgemm-info
if [ "$tree" = build ] && grep -q "GPU backends ON" "$log"; then
    n=$(commgemm_gpu_count)
    exec build/tools/commgemm-run -n "$n" build/bench/commgemm-bench --backend auto \
        --dtype bf16 -m 8192 -n 4096 -k 4096 --op all "$@"
else
    exec "$tree"/tools/commgemm-run -n auto "$tree"/bench/commgemm-bench --backend host "$@"
fi
