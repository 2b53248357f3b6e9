#!/usr/bin/env bash
# bench/compare_torch.py on the device machine (nvidia-h200-x2), from the repo root:
#   OUT=/some/dir bash bench/compare_on_device.sh
# Assumes the library is built at build-device/libcommgemm.so (scripts/device-suite.sh build).
# Writes to $OUT: compare.txt (the table), compare.json, compare.err (stderr, progress),
# machine.txt; with COMPARE_SWEEP=1 also compare_sweep.{txt,json,err}; PNGs in $OUT/perf when
# matplotlib is there. Extra compare_torch.py options: COMPARE_ARGS (e.g. "--graph").
# cuBLASMp rows: set COMMGEMM_CUBLASMP_LIB, or carry .whl/nvidia_cublasmp_cu13-*.whl (installed
# here as scripts/device-suite.sh does); otherwise they are skipped rows saying why.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/commgemm-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# shellcheck source=scripts/device-env.sh
source scripts/device-env.sh
export COMMGEMM_LIB=${COMMGEMM_LIB:-$PWD/build-device/libcommgemm.so}
# One rank per visible GPU (NGPU overrides): 2 on nvidia-h200-x2, 4 or 8 on the larger kinds.
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
[ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
if [ ! -f "$COMMGEMM_LIB" ]; then
    echo "compare_on_device.sh: $COMMGEMM_LIB not found; build first (bash scripts/device-suite.sh build)" | tee "$OUT/compare.txt"
    exit 2
fi
if [ -z "${COMMGEMM_CUBLASMP_LIB:-}" ] && ls .whl/nvidia_cublasmp_cu13-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/nvidia_cublasmp_cu13-*.whl \
        >"$OUT/cublasmp-install.log" 2>&1
    sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    lib=$(ls /tmp/site/nvidia/cublasmp/cu13/lib/libcublasmp.so* 2>/dev/null | head -1)
    if [ -n "$lib" ]; then
        export COMMGEMM_CUBLASMP_LIB=$lib NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
        export LD_LIBRARY_PATH=$sp/nvidia/nvshmem/lib:$sp/nvidia/cu13/lib:$sp/nvidia/cublas/lib:${LD_LIBRARY_PATH:-}
    fi
fi
{
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    nvidia-smi -L
    echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    echo "COMMGEMM_LIB=$COMMGEMM_LIB COMMGEMM_CUBLASMP_LIB=${COMMGEMM_CUBLASMP_LIB:-}"
    echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
} >"$OUT/machine.txt" 2>&1

run() { # name seconds options...
    local name=$1 secs=$2; shift 2
    # shellcheck disable=SC2086
    timeout "$secs" torchrun --standalone --nproc-per-node "$NGPU" bench/compare_torch.py "$@" ${COMPARE_ARGS:-} \
        --json "$OUT/$name.json" >"$OUT/$name.txt" 2>"$OUT/$name.err"
    local rc=$?
    echo "# exit code $rc" >>"$OUT/$name.txt"
    echo "== $name: exit code $rc"
    [ $rc -eq 0 ] || grep -vE '^#|^\|' "$OUT/$name.err" | tail -15
    return $rc
}

rc=0
# COMPARE_SWEEP=1: also the sweep; COMPARE_SWEEP=only: the sweep alone.
# COMPARE_SWEEP_ARGS: extra options of the sweep run only (e.g. "--backends p2p").
if [ "${COMPARE_SWEEP:-0}" != only ]; then
    run compare 300 || rc=1
fi
if [ "${COMPARE_SWEEP:-0}" != 0 ]; then
    # shellcheck disable=SC2086
    run compare_sweep "${COMPARE_SWEEP_TIMEOUT:-500}" --sweep ${COMPARE_SWEEP_ARGS:-} || rc=1
fi
if python3 -c 'import matplotlib' 2>/dev/null; then
    for f in "$OUT"/compare.json "$OUT"/compare_sweep.json; do
        [ -s "$f" ] && python3 bench/plot_perf.py "$f" --out "$OUT/perf" >>"$OUT/plots.txt" 2>&1
    done
fi
cat "$OUT/machine.txt"; echo
[ -f "$OUT/compare.txt" ] && cat "$OUT/compare.txt"
[ -f "$OUT/compare_sweep.txt" ] && { echo; cat "$OUT/compare_sweep.txt"; }
exit $rc
