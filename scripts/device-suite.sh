#!/usr/bin/env bash
# The GPU suite on the device machine (nvidia-h200-x2), from the repo root:
#   bash scripts/device-suite.sh STAGE...   (carry .carry and .whl)
# Stages: build, gpu (p2p + nccl + mixed GPU tests, NCCL defaults),
# nccl-net (nccl tests over NCCL's socket transport on loopback: two-node
# stand-in), cublasmp (with the carried wheel), sanitize (compute-sanitizer
# memcheck + racecheck), torch (torchrun pytest + the TP MLP example).
# Logs go to $OUT; a summary line per stage is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/commgemm-out}
mkdir -p "$OUT"
B=$PWD/build-device
source scripts/device-env.sh
summary=()
note() { summary+=("$1"); echo "== $1"; echo "$1" >>"$OUT/summary.txt"; } # appended at once: a cut-off run keeps what it measured

stage_build() {
    cmake -S . -B "$B" -G Ninja "${args[@]}" >"$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; note "build: configure FAILED"; return 1; }
    cmake --build "$B" -j16 >"$OUT/build.log" 2>&1
    local rc=$? warnings
    warnings=$(grep -c "warning:" "$OUT/build.log")
    [ $rc -eq 0 ] || tail -30 "$OUT/build.log"
    note "build: rc=$rc, $warnings compiler warnings (gcc $(gcc -dumpversion), nvcc $(nvcc --version | grep -o 'release [0-9.]*'))"
}
stage_gpu() {
    (cd "$B" && ctest -L gpu -E cublasmp --timeout 300 --output-on-failure) >"$OUT/gpu.log" 2>&1
    note "gpu (p2p, nccl, mixed; NCCL defaults): $(grep -E 'tests passed' "$OUT/gpu.log")"
    grep -E "Failed|\(Skipped\)" "$OUT/gpu.log" | head -20
}
stage_nccl_net() {
    (cd "$B" && NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
        ctest -R test_gpu_nccl --timeout 300 --output-on-failure) >"$OUT/nccl-net.log" 2>&1
    note "nccl over the socket transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): $(grep -E 'tests passed' "$OUT/nccl-net.log")"
    grep -E "Failed|\(Skipped\)" "$OUT/nccl-net.log" | head -20
}
stage_cublasmp() {
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/nvidia_cublasmp_cu13-0.7.0.125-*.whl >"$OUT/cublasmp-install.log" 2>&1
    local sp
    sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    (export COMMGEMM_CUBLASMP_LIB=/tmp/site/nvidia/cublasmp/cu13/lib/libcublasmp.so.0 \
        LD_LIBRARY_PATH=$sp/nvidia/nvshmem/lib:$sp/nvidia/cu13/lib:$sp/nvidia/cublas/lib:$LD_LIBRARY_PATH \
        NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo COMMGEMM_TEST_REQUIRE_CUBLASMP=1 \
        CUBLASMP_LOG_LEVEL=2 CUBLASMP_LOG_FILE=$OUT/cublasmp-lib.log
     cd "$B" && ctest -R cublasmp --timeout 300 --output-on-failure) >"$OUT/cublasmp.log" 2>&1
    note "cublasmp 0.7.0.125: $(grep -E 'tests passed' "$OUT/cublasmp.log")"
    grep -E "Failed|# .*(ok|wrong)" "$OUT/cublasmp.log" | head -20
}
stage_sanitize() {
    local t
    for t in memcheck racecheck; do
        compute-sanitizer --tool $t --target-processes all --report-api-errors no --error-exitcode 99 \
            "$B/tests/gpu/test_gpu_ops" graph_capture_replay >"$OUT/sanitize-$t.log" 2>&1
        note "compute-sanitizer $t (test_gpu_ops graph_capture_replay): rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sanitize-$t.log" | sort | uniq -c | tr '\n' ' ')"
    done
}
stage_torch() {
    (COMMGEMM_LIB=$B/libcommgemm.so timeout 400 torchrun --nproc-per-node 2 -m pytest -q -x tests/python/test_torch.py) >"$OUT/torch.log" 2>&1
    note "torch tests (torchrun x2): $(grep -E 'passed|failed|error' "$OUT/torch.log" | tail -1)"
    (COMMGEMM_LIB=$B/libcommgemm.so timeout 200 torchrun --nproc-per-node 2 examples/torch_tp_mlp.py --compare) >"$OUT/torch-mlp.log" 2>&1
    note "examples/torch_tp_mlp.py --compare: rc=$? $(tail -1 "$OUT/torch-mlp.log")"
}

for s in "$@"; do
    case $s in
    build) stage_build ;; gpu) stage_gpu ;; nccl-net) stage_nccl_net ;; cublasmp) stage_cublasmp ;;
    sanitize) stage_sanitize ;; torch) stage_torch ;;
    *) echo "unknown stage $s"; exit 2 ;;
    esac
done
printf '%s\n' "${summary[@]}"
