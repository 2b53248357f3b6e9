/* Built only without CUDA/NCCL: NCCL bootstraps cannot be served. */
#include "core.h"

cgm_status cgm_nccl_comm_query(void *nccl_comm, int *rank, int *nranks, int *cuda_device) {
    (void)nccl_comm;
    *rank = *nranks = *cuda_device = -1;
    return cgm_error(CGM_ERROR_UNAVAILABLE,
                     "this build of commgemm has no GPU support, so a comm cannot be created from an "
                     "ncclComm_t; rebuild with the CUDA toolkit (nvcc) and NCCL installed "
                     "(cmake -DCOMMGEMM_CUDA=ON), or use a LOCAL bootstrap with the host backend");
}
