/* What a GPU backend says when it finds no usable GPU. Without any NVIDIA
 * driver the CUDA runtime reports cudaErrorInsufficientDriver, whose own
 * words ("CUDA driver version is insufficient for CUDA runtime version")
 * point at a driver upgrade; this tells the cases apart. */
#include <stdio.h>

#include "core.h"

/* cudaError_t values (CUDA's driver_types.h; the driver API's CUresult
 * has the same numbers for these). */
enum {
    CUDA_SUCCESS_CODE = 0,
    CUDA_STUB_LIBRARY = 34,        /* cudaErrorStubLibrary: the toolkit's stub libcuda.so */
    CUDA_INSUFFICIENT_DRIVER = 35, /* cudaErrorInsufficientDriver: no driver, or an older one */
    CUDA_NO_DEVICE = 100           /* cudaErrorNoDevice, CUDA_ERROR_NO_DEVICE */
};

/* "12.8" from CUDA's 12080. */
static void cuda_version(char *out, size_t size, int version) {
    snprintf(out, size, "%d.%d", version / 1000, version % 1000 / 10);
}

cgm_status cgm_gpu_absent_error(const char *backend, int cuda_error, const char *cuda_error_name,
                                int driver_version, int runtime_version) {
    char driver[16], runtime[16];
    cuda_version(driver, sizeof driver, driver_version);
    cuda_version(runtime, sizeof runtime, runtime_version);
    if (!cuda_error_name) cuda_error_name = "unnamed CUDA error";
    if (cuda_error == CUDA_STUB_LIBRARY)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the %s backend needs an NVIDIA GPU, found no NVIDIA driver: the libcuda.so loaded "
                         "is the CUDA toolkit's stub (%s); take the toolkit's stubs folder off "
                         "LD_LIBRARY_PATH, run on a machine with an NVIDIA GPU and its driver, or use the "
                         "host backend",
                         backend, cuda_error_name);
    if (cuda_error == CUDA_INSUFFICIENT_DRIVER && driver_version <= 0)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the %s backend needs an NVIDIA GPU, found no NVIDIA driver (libcuda.so.1 is not "
                         "installed or not loadable; %s); run on a machine with an NVIDIA GPU and its "
                         "driver, or use the host backend",
                         backend, cuda_error_name);
    if (cuda_error == CUDA_INSUFFICIENT_DRIVER)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the %s backend needs an NVIDIA driver for CUDA %s or newer (the runtime commgemm "
                         "was built with), found one for CUDA %s (%s); update the NVIDIA driver, rebuild "
                         "commgemm with an older CUDA toolkit, or use the host backend",
                         backend, runtime, driver, cuda_error_name);
    if (cuda_error == CUDA_SUCCESS_CODE || cuda_error == CUDA_NO_DEVICE)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the %s backend needs an NVIDIA GPU, found an NVIDIA driver (CUDA %s) that sees "
                         "none (%s); check nvidia-smi and CUDA_VISIBLE_DEVICES, or use the host backend",
                         backend, driver, cuda_error == CUDA_NO_DEVICE ? cuda_error_name : "0 devices");
    return cgm_error(CGM_ERROR_UNAVAILABLE,
                     "the %s backend needs a CUDA device, found none (cudaGetDeviceCount returned %d: %s); "
                     "run on a GPU machine or use the host backend",
                     backend, cuda_error, cuda_error_name);
}
