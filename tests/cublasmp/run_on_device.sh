#!/usr/bin/env bash
# test_cublasmp_gpu on the device machine (2 GPUs), from the repo root:
#   bash tests/cublasmp/run_on_device.sh     (carry .whl, and .carry if used)
# Builds only the test's target in build-device (configured by
# `bash scripts/device-suite.sh build`; configured here the same way when
# missing), installs the cuBLASMp 0.7.0.125 wheel into /tmp/site, and runs
# the cases one by one, each bounded by the test itself. The AG cases run
# first: when the simplest AG call (p2_ag_first) does not complete, the
# cases that need AG are skipped (saving their bound) and its _nostage and
# _no_overlap variants say what the hang depends on. Each case's output,
# its per-rank commgemm trace (COMMGEMM_DEBUG=TRACE, CUBLASMP: every
# cublasMpMatmul's problem and descriptor geometry, before the call) and
# cuBLASMp's own log (CUBLASMP_LOG_LEVEL=5 for the first-call cases, 4 --
# its "Using <algo> ..." choice -- for the others) go to $OUT; a summary is
# printed last and written to $OUT/cublasmp-summary.txt. Every step is
# time-limited (configure/build 300 s, install 60 s, each case 150 s; the
# cases bound themselves well below that).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/commgemm-out}
mkdir -p "$OUT"
B=$PWD/build-device
T=$B/tests/cublasmp/test_cublasmp_gpu
start=$(date +%s)
source scripts/device-env.sh
if [ ! -f "$B/CMakeCache.txt" ]; then
    timeout 300 cmake -S . -B "$B" -G Ninja "${args[@]}" >"$OUT/cmp-configure.log" 2>&1 ||
        { tail -20 "$OUT/cmp-configure.log"; echo "configure FAILED"; exit 1; }
fi
if ! timeout 300 cmake --build "$B" --target test_cublasmp_gpu -j16 >"$OUT/cmp-build.log" 2>&1; then
    grep -E "error" "$OUT/cmp-build.log" | head -20
    echo "build of test_cublasmp_gpu FAILED (log: cmp-build.log)"
    exit 1
fi
echo "== built test_cublasmp_gpu in $(($(date +%s) - start)) s"

timeout 60 python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .whl/nvidia_cublasmp_cu13-0.7.0.125-*.whl >"$OUT/cublasmp-install.log" 2>&1
sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
export COMMGEMM_CUBLASMP_LIB=/tmp/site/nvidia/cublasmp/cu13/lib/libcublasmp.so.0 \
    LD_LIBRARY_PATH=$sp/nvidia/nvshmem/lib:$sp/nvidia/cu13/lib:$sp/nvidia/cublas/lib:${LD_LIBRARY_PATH:-} \
    NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo \
    COMMGEMM_TEST_REQUIRE_CUBLASMP=1
{
    echo "cuBLASMp lib: $COMMGEMM_CUBLASMP_LIB ($(ls -l "$COMMGEMM_CUBLASMP_LIB" 2>&1 | awk '{print $5}') bytes)"
    echo "NCCL: ${NCCL_DIR:-system}; NVSHMEM: $(ls $sp/nvidia/nvshmem/lib 2>/dev/null | head -3 | tr '\n' ' ')"
    nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1
} >"$OUT/cmp-env.txt"

summary=()
# run CASE [diag]: P = 2 cases write per-rank traces (one file per rank);
# diag raises cuBLASMp's log from 4 (its algorithm choice) to 5 (API trace).
run() {
    local c=$1 diag=${2:-} rc t0=$(date +%s)
    local envs=(CUBLASMP_LOG_LEVEL=4 "CUBLASMP_LOG_FILE=$OUT/cublasmp-lib.log")
    case $c in p2_*) envs+=(COMMGEMM_DEBUG=TRACE COMMGEMM_DEBUG_SUBSYS=CUBLASMP
                            "COMMGEMM_DEBUG_FILE=$OUT/trace-$c-%p.log") ;; esac
    [ -n "$diag" ] && envs+=(CUBLASMP_LOG_LEVEL=5)
    env "${envs[@]}" timeout -s KILL 150 "$T" "$c" >"$OUT/cmp-$c.log" 2>&1
    rc=$?
    local line
    line=$(grep -E "^SUMMARY" "$OUT/cmp-$c.log" | tail -1)
    summary+=("$c: rc=$rc $(($(date +%s) - t0)) s | ${line:-no summary (see cmp-$c.log)}")
    grep -E "^FAILURE" "$OUT/cmp-$c.log" | head -6 | sed 's/^/    /'
    echo "== $c: rc=$rc"
    return $rc
}

run p1_all_ops
ag_ok=1
run p2_ag_first diag || ag_ok=0
run p2_ag_first_nostage diag
run p2_ag_first_no_overlap diag
run p2_rs_first diag
run p2_ar_first diag
for c in p2_rs_even p2_rs_uneven p2_ar_even p2_ar_uneven p2_capture_rs p2_capture_ar; do run $c; done
if [ $ag_ok = 1 ]; then
    for c in p2_ag_even p2_ag_uneven p2_mixed_with_p2p p2_rejects p2_capture_ag; do run $c; done
else
    summary+=("p2_ag_even p2_ag_uneven p2_mixed_with_p2p p2_rejects p2_capture_ag: NOT RUN (p2_ag_first did not pass)")
fi
{
    echo "cublasmp GPU cases ($(($(date +%s) - start)) s in all):"
    printf '  %s\n' "${summary[@]}"
    grep -hE "^# " "$OUT"/cmp-*.log | sort | uniq | sed 's/^/  /'
    echo "cuBLASMp's algorithm choices (CUBLASMP_LOG_LEVEL >= 4):"
    cat "$OUT"/cublasmp-lib.log.* 2>/dev/null | grep -ohE "Using [A-Za-z_0-9 +]+" | sort | uniq -c | sed 's/^/  /'
} | tee "$OUT/cublasmp-summary.txt"
