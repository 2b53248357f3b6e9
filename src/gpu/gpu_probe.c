/* What every GPU backend's probe checks first. */
#include "gpu/gpu.h"

cgm_status cgm_gpu_probe_common(const cgm_comm *comm, const char *backend, bool local_ok,
                                int *device_count) {
    bool nccl = comm->bootstrap_kind == CGM_BOOTSTRAP_NCCL && comm->nccl_comm;
    if (!nccl && !(local_ok && comm->bootstrap_kind == CGM_BOOTSTRAP_LOCAL))
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the %s backend needs a comm created from an ncclComm_t (CGM_BOOTSTRAP_NCCL / "
                         "cgm_comm_init_nccl), found a %s bootstrap; create the comm from NCCL or use the "
                         "host backend",
                         backend, comm->bootstrap_kind == CGM_BOOTSTRAP_LOCAL ? "LOCAL" : "non-NCCL");
    int count = 0, driver = 0, runtime = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        (void)cudaDriverGetVersion(&driver); /* 0 when no driver is installed */
        (void)cudaRuntimeGetVersion(&runtime);
        return cgm_gpu_absent_error(backend, (int)err, cudaGetErrorName(err), driver, runtime);
    }
    if (device_count) *device_count = count;
    return CGM_SUCCESS;
}
