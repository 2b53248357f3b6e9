#!/bin/bash
# Builds commgemm-bench with CUDA on a GPU machine and measures the tables of
# docs/PERFORMANCE.md: bf16 AG+GEMM and GEMM+RS on every visible GPU, on the
# p2p backend, the nccl backend, and the nccl backend with NCCL restricted
# to its network transport over loopback (the comm baseline then runs under
# the same NCCL settings, since it is NCCL on the same communicator).
# Usage (repo root): bash bench/perf_on_device.sh [OUT_DIR] [BUILD_DIR]
# OUT_DIR receives tables.txt (what is printed last), machine.txt, stderr.txt
# and one JSON per table (PERF_TABLES, default "p2p p2p_graph nccl nccl_net";
# also nccl_graph, cublasmp); the logs stay in /tmp. PERF_REUSE_BUILD=1 with
# BUILD_DIR = an existing CUDA build skips the build.
# Finds OpenBLAS and NCCL where the image has them; falls back to the
# unpacked Debian OpenBLAS in .carry/root and PyTorch's NCCL wheel.
set -o pipefail
R_OUT=${1:-/tmp/commgemm-perf}; B=${2:-/tmp/commgemm-perf-build}
O=/tmp/commgemm-perf-work
rm -rf $O; mkdir -p "$O" "$R_OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args=(-G Ninja -DCOMMGEMM_CUDA=ON -DCOMMGEMM_WERROR=OFF -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF)
any() { for f in "$@"; do [ -e "$f" ] && return 0; done; return 1; }
if ! any /usr/lib/x86_64-linux-gnu/libopenblas.so /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so &&
   [ -d .carry/root ]; then
  R=$PWD/.carry/root
  args+=(-DCOMMGEMM_CBLAS_INCLUDE=$R/usr/include/x86_64-linux-gnu/openblas-pthread
         -DCOMMGEMM_OPENBLAS_LIB=$R/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so)
  export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu/openblas-pthread:$R/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
fi
if ! any /usr/local/cuda/include/nccl.h /usr/include/nccl.h; then
  D=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
  args+=(-DCOMMGEMM_NCCL_INCLUDE=$D/include -DCOMMGEMM_NCCL_LIB=$(ls $D/lib/libnccl.so* | head -1))
  export LD_LIBRARY_PATH=$D/lib:$LD_LIBRARY_PATH
fi
# A copy without -Werror: the device's compiler may warn where ours does not.
S=/tmp/commgemm-perf-src; rm -rf $S; mkdir -p $S
tar --exclude='./build*' --exclude=./.git --exclude=./.carry -cf - . | tar -C $S -xf -
sed -i 's/;-Werror;/;/' $S/CMakeLists.txt
t0=$(date +%s)
if [ "${PERF_REUSE_BUILD:-0}" = 1 ] && [ -x $B/bench/commgemm-bench ]; then
  echo "# build: reusing $B (PERF_REUSE_BUILD=1)"
else
  cmake -S $S -B $B "${args[@]}" >$O/cmake.log 2>&1 || { tail -30 $O/cmake.log; exit 1; }
  cmake --build $B -j16 --target commgemm-bench commgemm-run >$O/build.log 2>&1 ||
    { grep -E "error|FAILED" $O/build.log | head -30; exit 1; }
  echo "# build: $(( $(date +%s) - t0 )) s; $(grep 'commgemm:' $O/cmake.log)"
fi

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  nvidia-smi -L
  echo "driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  nvidia-smi topo -m 2>/dev/null | head -4
} | tee $O/machine.txt

N=$(nvidia-smi -L | grep -c '^GPU ')
RUN=$B/tools/commgemm-run; BENCH=$B/bench/commgemm-bench
# (m, n, k): (m, k, n) = (16384, 8192, 2048), (8192, 4096, 4096), (16384, 2048, 8192)
SHAPES=16384x2048x8192,8192x4096x4096,16384x8192x2048
COMMON=(--dtype bf16 --op ag_gemm,gemm_rs --shapes $SHAPES -w 5 -i 20)
table() { # name seconds [VAR=value...] -- bench options
  local name=$1 secs=$2; shift 2
  local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  echo "## $name: ${envs[*]} commgemm-run -n $N commgemm-bench $* ${COMMON[*]}" >$O/$name.txt
  env "${envs[@]}" timeout $secs $RUN -n $N $BENCH "$@" "${COMMON[@]}" --json $O/$name.json \
    >>$O/$name.txt 2>$O/$name.err
  echo "# exit code $?" >>$O/$name.txt
}
case " ${PERF_TABLES:-} " in *" cublasmp "*)
  source scripts/device-env.sh >/dev/null 2>&1; cublasmp_env || echo "# cublasmp: wheel install failed" ;;
esac
# PERF_TABLES: which tables, default all but cublasmp (needs COMMGEMM_CUBLASMP_LIB).
TABLES=${PERF_TABLES:-p2p p2p_graph nccl nccl_net}
for t in $TABLES; do
  case $t in
  p2p) table p2p 120 -- --backend p2p ;;
  p2p_graph) table p2p_graph 120 -- --backend p2p --graph ;;
  nccl) table nccl 120 -- --backend nccl ;;
  p2p_outpartial) table p2p_outpartial 120 COMMGEMM_PARTIAL_DTYPE=output -- --backend p2p --graph ;;
  nccl_outpartial) table nccl_outpartial 120 COMMGEMM_PARTIAL_DTYPE=output -- --backend nccl --graph ;;
  nccl_graph) table nccl_graph 120 -- --backend nccl --graph ;;
  cublasmp) table cublasmp 150 -- --backend cublasmp ;;
  nccl_net) table nccl_net 150 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET -- --backend nccl
    grep -ohE "Using network [A-Za-z]+|via NET/[A-Za-z]+" $O/nccl_net.err | sort | uniq -c >$O/nccl_net_transport.txt ;;
  esac
done
{
  cat $O/machine.txt
  for t in $TABLES; do echo; grep -vE '^#  rank' $O/$t.txt; done
  [ -f $O/nccl_net_transport.txt ] && { echo; echo "# nccl_net: NCCL's transport lines (NCCL_DEBUG=INFO):"; cat $O/nccl_net_transport.txt; }
} >$R_OUT/tables.txt
for t in $TABLES; do
  echo "== $t"; grep -v NCCL $O/$t.err | head -20
  [ -f $O/$t.json ] && cp $O/$t.json $R_OUT/
done >$R_OUT/stderr.txt
cp $O/machine.txt $R_OUT/
cat $R_OUT/stderr.txt; echo; cat $R_OUT/tables.txt
