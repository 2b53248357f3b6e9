# Sourced by the device scripts (repo root as the working directory): NVLink
# multicast off, the CMake arguments in `args`, and LD_LIBRARY_PATH for the
# device image, which has no OpenBLAS (the unpacked Debian copy in
# .carry/root, made by scripts/device-carry.sh) and whose NCCL is PyTorch's
# wheel (so torch and commgemm share one libnccl).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
args=(-DCOMMGEMM_CUDA=ON -DCOMMGEMM_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)
if ! ls /usr/lib/x86_64-linux-gnu/libopenblas.so /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so >/dev/null 2>&1; then
    R=$PWD/.carry/root
    args+=(-DCOMMGEMM_CBLAS_INCLUDE=$R/usr/include/x86_64-linux-gnu/openblas-pthread
           -DCOMMGEMM_OPENBLAS_LIB=$R/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so)
    export LD_LIBRARY_PATH=$R/usr/lib/x86_64-linux-gnu/openblas-pthread:$R/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
fi
NCCL_DIR=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
if [ -n "$NCCL_DIR" ]; then
    args+=(-DCOMMGEMM_NCCL_INCLUDE=$NCCL_DIR/include -DCOMMGEMM_NCCL_LIB=$(ls $NCCL_DIR/lib/libnccl.so* | head -1))
    export LD_LIBRARY_PATH=$NCCL_DIR/lib:${LD_LIBRARY_PATH:-}
fi
# cuBLASMp from the carried wheel (.whl, scripts/device-carry.sh): installs
# it into /tmp/site and exports what the cublasmp backend needs.
cublasmp_env() {
    timeout 60 python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
        .whl/nvidia_cublasmp_cu13-0.7.0.125-*.whl >/dev/null 2>&1 || return 1
    local sp
    sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    export COMMGEMM_CUBLASMP_LIB=/tmp/site/nvidia/cublasmp/cu13/lib/libcublasmp.so.0 \
        LD_LIBRARY_PATH=$sp/nvidia/nvshmem/lib:$sp/nvidia/cu13/lib:$sp/nvidia/cublas/lib:${LD_LIBRARY_PATH:-} \
        NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo
}
