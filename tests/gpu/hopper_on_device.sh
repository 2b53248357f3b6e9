#!/usr/bin/env bash
# cgm_hgemm on the H200 machine, from the repo root with $OUT set (carry
# .carry when the image has no OpenBLAS, as for scripts/device-suite.sh):
#   bash tests/gpu/hopper_on_device.sh
# Builds only test_hopper_gemm, checks the SASS (HGMMA, UTMALDG), runs the
# cases one by one (every case runs both kernel variants; a hang costs one
# timeout, then the rest is skipped), compute-sanitizer memcheck on the
# small subset, and the bench (cooperative, ping-pong and auto vs cuBLASLt,
# interleaved, one pass over the 8 shapes). Everything concise in
# $OUT/hopper.txt, with the seconds each part took; full logs next to it.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/hopper-out}
mkdir -p "$OUT"
L=$OUT/hopper.txt
: >"$L"
B=${HOPPER_BUILD:-$PWD/build-hopper} # an existing configured build is reused as is
BIN=$B/tests/gpu/test_hopper_gemm
OBJ=$B/src/device/CMakeFiles/commgemm_hopper.dir/hopper_gemm.cu.o
source scripts/device-env.sh
log() { echo "$*" | tee -a "$L"; }

log "== $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | head -1), $(nvcc --version | grep -o 'release [0-9.]*')"
[ -f "$B/CMakeCache.txt" ] ||
cmake -S . -B "$B" -G Ninja "${args[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    >"$OUT/hopper-configure.log" 2>&1 || { log "configure FAILED"; tail -20 "$OUT/hopper-configure.log" | tee -a "$L"; exit 1; }
cmake --build "$B" --target test_hopper_gemm -j16 >"$OUT/hopper-build.log" 2>&1
rc=$?
log "== build rc=$rc, $(grep -c 'warning' "$OUT/hopper-build.log") warning lines"
[ $rc -eq 0 ] || { grep -E 'error|warning' "$OUT/hopper-build.log" | head -30 | tee -a "$L"; exit 1; }

if [ -f "$OBJ" ]; then
    cuobjdump --dump-sass "$OBJ" >"$OUT/hopper.sass" 2>&1
    log "== SASS ($OBJ): HGMMA $(grep -c HGMMA "$OUT/hopper.sass") (64x256: $(grep -c 'HGMMA.64x256' "$OUT/hopper.sass"), 64x128: $(grep -c 'HGMMA.64x128' "$OUT/hopper.sass")), STG.E.128 $(grep -c 'STG.E.128' "$OUT/hopper.sass"), UTMALDG $(grep -c UTMALDG "$OUT/hopper.sass"), USETMAXREG $(grep -c USETMAXREG "$OUT/hopper.sass"), local ld/st (spills) $(grep -cE 'STL|LDL' "$OUT/hopper.sass")"
    grep -m2 HGMMA "$OUT/hopper.sass" | tee -a "$L"
else
    log "== SASS: object $OBJ not found"
fi

# Cases, one process each (the harness forks per case anyway).
run_case() { # name timeout
    local t0=$SECONDS
    timeout "$2" "$BIN" "$1" >"$OUT/hopper-case-$1.log" 2>&1
    local r=$?
    local what="ok ($((SECONDS - t0)) s)"
    [ $r -eq 0 ] || what="FAILED rc=$r"
    [ $r -eq 77 ] && what=skipped
    [ $r -eq 124 ] && what="TIMEOUT after $2 s (hang?)"
    log "case $1: $what"
    [ $r -eq 0 ] || head -12 "$OUT/hopper-case-$1.log" | sed 's/^/    /' | tee -a "$L"
    grep -h "flag timeout" "$OUT/hopper-case-$1.log" | sed 's/^/    /' | tee -a "$L"
    # disagreements with cuBLASLt and who matched the exact result
    local nd; nd=$(grep -c "differ from cuBLASLt" "$OUT/hopper-case-$1.log")
    [ "$nd" -gt 0 ] && { log "    $nd GEMMs differ from cuBLASLt beyond the tolerance; the first:"
        grep -m6 "differ from cuBLASLt" "$OUT/hopper-case-$1.log" | cut -c1-260 | sed 's/^/    /' | tee -a "$L"; }
    return $r
}
log "== test_hopper_gemm (cases vs cuBLASLt)"
run_case refusals 30
if run_case sanitize_subset 60; [ $? -ne 124 ]; then
    for c in epilogue_and_ld many_tiles shapes_bf16 shapes_fp16 shapes_bf16_fp32 shapes_fp16_fp32 flags_ready flags_timeout addends_and_shard_flags x_own split_output hook_arguments auto_variant; do
        run_case $c 150
        [ $? -eq 124 ] && { log "stopping the cases after a timeout"; break; }
    done
else
    log "the first GEMM case hung: skipping the other cases and the sanitizer"
fi

if ! grep -q "TIMEOUT" "$L"; then
    t0=$SECONDS
    timeout 120 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 99 \
        "$BIN" sanitize_subset >"$OUT/hopper-memcheck.log" 2>&1
    log "== compute-sanitizer memcheck (sanitize_subset): rc=$? ($((SECONDS - t0)) s) $(grep -E 'ERROR SUMMARY' "$OUT/hopper-memcheck.log" | sort | uniq -c | tr '\n' ' ')"
    grep -m8 -E '^========= (Invalid|Out of|Program hit|  at|Address)' "$OUT/hopper-memcheck.log" | tee -a "$L"
fi

[ "${HOPPER_BENCH:-1}" = 0 ] && { log "== bench skipped (HOPPER_BENCH=0); total $SECONDS s"; exit 0; }
log "== bench (bf16, TN): cooperative, ping-pong and auto vs cuBLASLt"
t0=$SECONDS
timeout 150 "$BIN" bench 16384x2048x8192,8192x4096x4096,16384x8192x2048,4096x4096x4096,8192x8192x8192,2048x8192x8192,8192x2048x4096,4096x16384x4096 \
    >"$OUT/hopper-bench.log" 2>&1
log "bench rc=$? ($((SECONDS - t0)) s)"
cat "$OUT/hopper-bench.log" | head -40 >>"$L"
tail -12 "$OUT/hopper-bench.log"
log "== total $SECONDS s"
