/* The one list of backends this build contains. */
#include "core.h"

extern const cgm_backend_vtable cgm_host_backend;
#ifdef COMMGEMM_HAVE_CUDA
extern const cgm_backend_vtable cgm_p2p_backend;
#endif
#ifdef COMMGEMM_HAVE_NCCL_BACKEND
extern const cgm_backend_vtable cgm_nccl_backend;
#endif
#ifdef COMMGEMM_HAVE_CUBLASMP_BACKEND
extern const cgm_backend_vtable cgm_cublasmp_backend;
#endif

static const cgm_backend_vtable *const backends[] = {
    &cgm_host_backend,
#ifdef COMMGEMM_HAVE_CUDA
    &cgm_p2p_backend,
#endif
#ifdef COMMGEMM_HAVE_NCCL_BACKEND
    &cgm_nccl_backend,
#endif
#ifdef COMMGEMM_HAVE_CUBLASMP_BACKEND
    &cgm_cublasmp_backend,
#endif
};

const cgm_backend_vtable *cgm_backend_lookup(cgm_backend id) {
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (backends[i]->id == id) return backends[i];
    return NULL;
}
