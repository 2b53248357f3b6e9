#!/bin/bash
# Builds commgemm with CUDA on the device machine and runs the nccl
# backend's GPU tests twice: NCCL's defaults, then the network transport on
# loopback (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo,
# about two nodes). Usage (repo root):
#   bash tests/gpu/run_nccl_on_device.sh [BUILD_DIR] [case...]
set -o pipefail
B=${1:-/tmp/bn}; shift || true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args=(-DCOMMGEMM_CUDA=ON "-DCMAKE_C_FLAGS=-Wno-error=format-truncation")
if ! ls /usr/lib/x86_64-linux-gnu/libopenblas.so /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so >/dev/null 2>&1 &&
   [ -d .carry/root ]; then
  R=$PWD/.carry/root
  echo "# OpenBLAS: using the carried one in $R"
  args+=(-DCOMMGEMM_CBLAS_INCLUDE=$R/usr/include/x86_64-linux-gnu/openblas-pthread
         -DCOMMGEMM_OPENBLAS_LIB=$R/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so)
  export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu/openblas-pthread:$R/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
fi
if ! ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h >/dev/null 2>&1; then
  D=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
  echo "# NCCL: using $D"
  args+=(-DCOMMGEMM_NCCL_INCLUDE=$D/include -DCOMMGEMM_NCCL_LIB=$(ls $D/lib/libnccl.so* | head -1))
  export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH
fi
# Build from a copy holding only the folders these tests need, so that a
# teammate's half-written folder cannot break the configure step.
S=/tmp/commgemm-nccl-src; rm -rf $S; mkdir -p $S
tar --exclude='./build*' --exclude=./.git --exclude=./.carry -cf - . | tar -C $S -xf -
for d in $S/tests/*/; do case $(basename $d) in harness|gpu) ;; *) rm -rf $d;; esac; done
for d in $S/src/backend/*/; do case $(basename $d) in host|gpu|p2p|nccl) ;; *) rm -rf $d;; esac; done
cmake -S $S -B $B -G Ninja "${args[@]}" >$B.cmake.log 2>&1 || { tail -30 $B.cmake.log; exit 1; }
grep "commgemm:" $B.cmake.log
cmake --build $B --target test_gpu_nccl 2>&1 | grep -E "error|FAILED" | grep -v "error.c" | head -30
T=$B/tests/gpu/test_gpu_nccl
[ -x $T ] || { echo "build failed"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader | head -4
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=($($T --list | awk '{print $1}'))
total_fail=0
for envname in default net_loopback; do
  if [ $envname = net_loopback ]; then
    export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo
  fi
  echo "## NCCL environment: $envname"
  pass=0; fail=0; skip=0
  for c in "${cases[@]}"; do
    t0=$(date +%s.%N)
    timeout ${CASE_TIMEOUT:-120} $T $c > $B.$envname.$c.log 2>&1; rc=$?
    t1=$(date +%s.%N)
    case $rc in 0) pass=$((pass+1)); s=PASS;; 77) skip=$((skip+1)); s=SKIP;; *) fail=$((fail+1)); s="FAIL($rc)";; esac
    printf "%-30s %-8s %6.1f s\n" $c $s $(awk "BEGIN{print $t1-$t0}")
    [ $rc -ne 0 ] && tail -12 $B.$envname.$c.log
    [ $rc -eq 77 ] && grep -m1 SKIP $B.$envname.$c.log
    grep -h "timeout after" $B.$envname.$c.log
  done
  echo "nccl gpu tests ($envname): $pass passed, $fail failed, $skip skipped"
  total_fail=$((total_fail+fail))
done
exit $total_fail
