#!/usr/bin/env bash
# The GPU suite, from the repository root: scripts/gpu-suite.sh [-n] [VAR=value | STAGE]... [ab A B CMD...]
# -n prints the commands instead of running them. VAR=value holds for the stages after it
# (COMMGEMM_TEST_RANKS=4 gpu: 4 ranks sharing the GPUs; COMMGEMM_ALGO=fused gpu). Stages:
#   fetch         (with a network) Debian's OpenBLAS into .carry/root, the cuBLASMp wheel into .whl
#   build         configure (CMAKE_ARGS adds to it) and build for sm_90a into $BUILD (default build-gpu)
#   gpu           ctest -L gpu without the cublasmp tests; nccl-net: the nccl backend's tests over
#                 NCCL's socket transport on loopback; cublasmp: its tests, cuBLASMp from .whl
#   sanitize      compute-sanitizer memcheck and racecheck on SANITIZE_CASES ("binary[:case] ...")
#   torch, jax    tests/python/test_torch.py (torchrun), test_jax_host.py, and their examples
#   bench         commgemm-bench, bf16 AG+GEMM and GEMM+RS on the reference shapes, per BENCH_BACKENDS
#                 (default "p2p nccl"; BENCH_ARGS adds options); then commgemm-copy-bench
#   compare       bench/compare_torch.py (COMPARE_ARGS); kernel-bench: the build's GEMM kernel bench;
#                 pack: every log into $OUT/logs.tar.gz, summary.txt beside it
#   ab A B CMD... the shell command CMD under settings A and B, alternating (A B, B A, ...) for
#                 AB_ROUNDS (default 3) rounds. A setting is a build tree (a folder) or "VAR=value
#                 ..."; $B in CMD is the build tree. Output lines matching AB_SHOW are printed.
# Logs go to $OUT (default /tmp/commgemm-out); each stage prints one summary line, all are
# printed again at the end and kept in $OUT/summary.txt. Exit status 1 when a stage failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# NVLink multicast stays off (NCCL, PyTorch, NVSHMEM): on a shared host it can leave the GPUs unusable.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/commgemm-out} B=$(realpath -m "${BUILD:-build-gpu}") DRY=0 failed=0 settings='' summary=()
export COMMGEMM_LIB=${COMMGEMM_LIB:-$B/libcommgemm.so} PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} # the examples'
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') && [ "$NGPU" -ge 1 ] || NGPU=1
read -ra cfg <<<"-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMMGEMM_CUDA=ON -DCOMMGEMM_WERROR=OFF ${CMAKE_ARGS:-}"
# Without a system OpenBLAS the one fetch unpacked; PyTorch's NCCL where installed (one libnccl for both).
R=$PWD/.carry/root/usr
[ -z "$(ls /usr/lib/x86_64-linux-gnu/{,openblas-pthread/}libopenblas.so 2>/dev/null)" ] && [ -d "$R" ] &&
    cfg+=(-DCOMMGEMM_CBLAS_INCLUDE="$R/include/x86_64-linux-gnu/openblas-pthread"
          -DCOMMGEMM_OPENBLAS_LIB="$R/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so") &&
    export LD_LIBRARY_PATH=$R/lib/x86_64-linux-gnu/openblas-pthread:$R/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nccl=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null) &&
    cfg+=(-DCOMMGEMM_NCCL_INCLUDE="$nccl/include" -DCOMMGEMM_NCCL_LIB="$(ls "$nccl"/lib/libnccl.so* | head -1)") &&
    export LD_LIBRARY_PATH=$nccl/lib:${LD_LIBRARY_PATH:-}
note() { summary+=("$1"); echo "== $1"; [ $DRY = 1 ] || echo "$1" >>"$OUT/summary.txt"; }
x() { # SECONDS CMD...: CMD, bounded, its output appended to the stage's log $L
    [ $DRY = 1 ] && { echo "+ ${*:2} >>$L"; return 0; }
    echo "+ ${*:2}" >>"$L" && timeout -k 10 "$@" >>"$L" 2>&1
}
last() { tac "$L" 2>/dev/null | grep -m1 -oE "^\+ |$1" | grep -v '^+ '; } # in the last command's output
ctests() { # SECONDS [VAR=value...] -- ctest arguments
    local secs=$1 env=(); shift
    while [ "$1" != -- ]; do env+=("$1"); shift; done; shift
    x "$secs" env "${env[@]}" ctest --test-dir "$B" --no-tests=error --timeout 300 --output-on-failure "$@"
    note "$stage${env[*]:+ (${env[*]})}$settings: rc=$?, $(grep -hE 'tests passed|No tests were found' "$L" \
        2>/dev/null | tail -1), $(grep -c '(Skipped)' "$L" 2>/dev/null) skipped ($L)"
}
assignment() { # VAR=value, and none that turns multicast on
    case ${1%%=*} in NCCL_NVLS_ENABLE | TORCH_SYMM_MEM_DISABLE_MULTICAST | NVSHMEM_DISABLE_NVLS)
        echo "$1: NVLink multicast stays off"; return 2 ;; esac
    [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "'$1' is neither a stage nor VAR=value (see the head of $0)"; return 2; }
}
cublasmp_env() { # cuBLASMp from the wheel in .whl, installed into /tmp/site. It needs NCCL >= 2.29.2, one
    # libnccl.so.2 for it and commgemm: NCCL_HOME=<a built NCCL> puts $NCCL_HOME/lib first (docs/CUBLASMP_BACKEND.md)
    if [ -z "${COMMGEMM_CUBLASMP_LIB:-}" ]; then
        local sp whl && whl=$(ls .whl/nvidia_cublasmp_cu13-*.whl 2>/dev/null | head -1)
        [ -n "$whl" ] && x 120 python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$whl" || return 1
        sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia
        export COMMGEMM_CUBLASMP_LIB=/tmp/site/nvidia/cublasmp/cu13/lib/libcublasmp.so.0 \
            LD_LIBRARY_PATH=$sp/cu13/lib:$sp/cublas/lib:${LD_LIBRARY_PATH:-}
    fi
    [ -z "${NCCL_HOME:-}" ] || export LD_LIBRARY_PATH=$NCCL_HOME/lib:$LD_LIBRARY_PATH
}
sanitize() { # racecheck checks the library's kernels, not the tests' reference GEMMs (theirs, cuBLAS's nvjet)
    local c t bin run race res=''
    for c in ${SANITIZE_CASES:-test_gpu_ops:graph_capture_replay}; do
        bin=$(ls "$B"/tests/*/"${c%%:*}" 2>/dev/null | head -1); run=("${bin:-${c%%:*}}")
        [[ $c == *:* ]] && run+=("${c#*:}")
        for t in memcheck racecheck; do
            race=() && [ $t = racecheck ] && race=(--kernel-name-exclude kns=tref_reference_gemm --kernel-name-exclude kns=nvjet)
            x 900 env TEST_TIMEOUT_SCALE="${SANITIZE_TIME_SCALE:-10}" compute-sanitizer --tool $t --target-processes all \
                --report-api-errors no --error-exitcode 99 "${race[@]}" "${run[@]}"
            res+=" $c $t rc=$?;"
        done
    done
    note "sanitize$settings:$res $(grep -hE '(ERROR|RACECHECK) SUMMARY' "$L" 2>/dev/null | sort -u | tr '\n' ' ')($L)"
}
bench() {
    local b r res=''
    for b in ${BENCH_BACKENDS:-p2p nccl}; do
        x 600 "$B/tools/commgemm-run" -n "$NGPU" "$B/bench/commgemm-bench" --backend "$b" --dtype bf16 --op ag_gemm,gemm_rs \
            --shapes 16384x2048x8192,8192x4096x4096,16384x8192x2048 ${BENCH_ARGS:-}
        res+=" $b rc=$? ($(last 'Avg ratio: [0-9.]+'));"
    done
    x 300 "$B/bench/commgemm-copy-bench"
    r=$? && [ $r = 77 ] && r="0 (skipped: fewer than two GPUs)"
    note "bench$settings:$res commgemm-copy-bench rc=$r ($L)"
}
ab() {
    local a=$1 b=$2 r s set res='' kv; shift 2
    for ((r = 1; r <= ${AB_ROUNDS:-3}; r++)); do
        for s in $( ((r % 2)) && echo A B || echo B A); do
            set=$a && [ $s = B ] && set=$b; [ $DRY = 1 ] || echo "== round $r, $s: $set" >>"$L"
            if [ -d "$set" ]; then kv=(B="$(realpath "$set")" COMMGEMM_LIB="$(realpath "$set")/libcommgemm.so")
            else read -ra kv <<<"$set" && kv+=(B="$B"); fi
            x 900 env "${kv[@]}" bash -c "$*"
            res+=" $s$r rc=$?"
        done
    done
    [ -n "${AB_SHOW:-}" ] && grep -E "^== round|$AB_SHOW" "$L" 2>/dev/null
    note "ab: A = $a, B = $b:$res ($L)"
}
run_stage() {
    case $1 in
    fetch) x 600 bash -c 'mkdir -p .carry/debs .whl && cd .carry/debs &&
        apt-get download libopenblas{0-pthread,-pthread-dev,-dev} && for f in *.deb; do dpkg -x "$f" ../root || exit; done &&
        cd ../.. && rm -rf .carry/debs && find .carry/root \( -name "*.a" -o -name "liblapack*" \) -delete && python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 -d .whl nvidia-cublasmp-cu13==0.10.0.3695'
        note "fetch: rc=$? ($L)" ;;
    build) x 300 cmake -S . -B "$B" -DCOMMGEMM_CUDA_ARCHITECTURES=90a "${cfg[@]}" && x 1800 cmake --build "$B" -j"$(nproc)"
        note "build: rc=$?, $(grep -c 'warning:' "$L" 2>/dev/null) compiler warnings ($L)" ;;
    gpu) ctests 3600 -- -L gpu -E cublasmp ;;
    nccl-net) ctests 1200 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo -- -R test_gpu_nccl ;;
    cublasmp) cublasmp_env || { note "cublasmp: rc=1, no cuBLASMp (fetch puts its wheel in .whl)"; return; }
        ctests 1200 COMMGEMM_TEST_REQUIRE_CUBLASMP=1 -- -R cublasmp ;;
    torch) x 300 torchrun --standalone --nproc-per-node "$NGPU" examples/torch_tp_mlp.py --compare; local e=$?
        x 600 torchrun --standalone --nproc-per-node "$NGPU" -m pytest -q -x tests/python/test_torch.py
        note "torch: test_torch.py rc=$? ($(last '[0-9]+ (passed|failed).*')), torch_tp_mlp.py --compare rc=$e ($L)" ;;
    jax) x 300 env -u JAX_PLATFORMS "$B/tools/commgemm-run" -n "$NGPU" python3 examples/jax_tp_mlp.py --device gpu --compare
        local e=$?; x 600 env -u JAX_PLATFORMS python3 -m pytest -q -rs tests/python/test_jax_host.py
        note "jax: test_jax_host.py rc=$? ($(last '[0-9]+ (passed|failed).*')), jax_tp_mlp.py --compare rc=$e ($L)" ;;
    compare) cublasmp_env || echo "compare: no cuBLASMp wheel in .whl (its rows say so)"
        x 600 torchrun --standalone --nproc-per-node "$NGPU" bench/compare_torch.py ${COMPARE_ARGS:-}
        note "compare$settings: rc=$? $(last '^# wrong.*') ($L)" ;;
    kernel-bench) local k=$B/bench/commgemm-kernel-bench && { [ -x "$k" ] || k=$B/bench/kernel_bench; } && x 600 "$k"
        note "kernel-bench$settings: rc=$? ($L)" ;;
    pack) [ $DRY = 1 ] && return 0; tar -C "$OUT" --exclude=./summary.txt -czf /tmp/commgemm-logs.$$.tgz . &&
            find "$OUT" -mindepth 1 ! -path "$OUT/summary.txt" -delete && mv /tmp/commgemm-logs.$$.tgz "$OUT/logs.tar.gz"
        note "pack: rc=$? ($OUT/logs.tar.gz)" ;;
    sanitize | bench) "$1" ;;
    esac
}

if [ "${1:-}" = -n ]; then DRY=1 && shift; else mkdir -p "$OUT"; fi
for ((i = 1; i <= $#; i++)); do case ${!i} in # every word is checked before anything runs
    fetch | build | gpu | nccl-net | cublasmp | sanitize | torch | jax | bench | compare | kernel-bench | pack) ;;
    ab) [ $((i + 3)) -le $# ] || { echo "ab needs A, B and a command"; exit 2; }
        for s in "${@:i+1:2}"; do [ -d "$s" ] || for kv in $s; do assignment "$kv" || exit 2; done; done; break ;;
    *=*) assignment "${!i}" || exit 2 ;; *) echo "unknown stage '${!i}' (see the head of $0)"; exit 2 ;;
esac; done
while [ $# -gt 0 ]; do
    stage=$1 && shift
    [[ $stage == *=* ]] && { export "${stage?}"; settings+=" $stage"; continue; }
    L=$OUT/$stage.log i=2 && while [ -e "$L" ]; do L=$OUT/$stage-$((i++)).log; done
    if [ "$stage" = ab ]; then ab "$@"; else run_stage "$stage"; fi
    [[ ${summary[-1]:-} != *rc=[1-9]* ]] || failed=1 # a stage failed when its summary line has a non-zero rc
    [ "$stage" = ab ] && break
done
printf '%s\n' "${summary[@]}"
exit $failed
