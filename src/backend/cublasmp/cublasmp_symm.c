/* NCCL symmetric memory for cuBLASMp (no CUDA here: every call goes
 * through the loaded table, so the fake library of the tests can record
 * them). See cublasmp.h, "symmetric memory". */
#include <string.h>

#include "backend/cublasmp/cublasmp.h"

void cmp_plan_symmetric(cgm_op op, bool ag_stage, size_t stage_bytes,
                        size_t ws_bytes, cmp_symm_plan *plan) {
    memset(plan, 0, sizeof *plan);
    plan->ws_bytes = ws_bytes;
    if (op == CGM_OP_ALL_GATHER_GEMM && ag_stage) plan->stage_bytes = stage_bytes;
}

static const char *status_text(const cmp_api *api, cublasMpStatus_t s) {
    const char *text = api->GetStatusString ? api->GetStatusString(s) : NULL;
    return text && *text ? text : cmp_status_name(s);
}

cgm_status cmp_symm_alloc(const cmp_symm *s, size_t bytes, const char *what,
                          void **out) {
    const cmp_api *api = s->api;
    void *p = NULL;
    *out = NULL;
    cublasMpStatus_t st = api->Malloc(s->grid[CMP_GRID_COL], &p, bytes);
    if (st != CUBLASMP_STATUS_SUCCESS || !p)
        return cgm_error(st == CUBLASMP_STATUS_ALLOCATION_FAILED
                             ? CGM_ERROR_OUT_OF_MEMORY
                             : CGM_ERROR_UNAVAILABLE,
                         "cublasMpMalloc(%zu bytes) of the cublasmp backend's "
                         "%s on the P x 1 grid: expected NCCL symmetric "
                         "memory, found %d (%s)%s; %s",
                         bytes, what, (int)st, status_text(api, st),
                         p ? "" : ", no pointer",
                         st == CUBLASMP_STATUS_ALLOCATION_FAILED
                             ? "free device memory or use smaller shapes"
                             : "NCCL symmetric memory needs CUDA VMM "
                               "(NCCL_CUMEM_ENABLE not 0) and NCCL >= "
                               CMP_NCCL_MIN_TEXT "; without it use the p2p "
                               "or nccl backend (CUBLASMP_LOG_LEVEL=5 and "
                               "NCCL_DEBUG=INFO tell why)");
    st = api->BufferRegister(s->grid[CMP_GRID_ROW], p, bytes);
    if (st != CUBLASMP_STATUS_SUCCESS) {
        cublasMpStatus_t f = api->Free(s->grid[CMP_GRID_COL], p);
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "cublasMpBufferRegister(%p, %zu bytes) of the "
                         "cublasmp backend's %s on the 1 x P grid: expected "
                         "CUBLASMP_STATUS_SUCCESS, found %d (%s); the buffer "
                         "was freed (cublasMpFree: %s); use the p2p or nccl "
                         "backend (CUBLASMP_LOG_LEVEL=5 tells cuBLASMp's "
                         "reason)",
                         p, bytes, what, (int)st, status_text(api, st),
                         cmp_status_name(f));
    }
    *out = p;
    CGM_INFO(CGM_SUB_CUBLASMP, "cublasmp %s: %zu bytes of NCCL symmetric "
             "memory at %p (cublasMpMalloc on P x 1, cublasMpBufferRegister "
             "on 1 x P)", what, bytes, p);
    return CGM_SUCCESS;
}

void cmp_symm_free(const cmp_symm *s, void *p) {
    if (!p) return;
    const cmp_api *api = s->api;
    cublasMpStatus_t d = api->BufferDeregister(s->grid[CMP_GRID_ROW], p);
    cublasMpStatus_t f = api->Free(s->grid[CMP_GRID_COL], p);
    if (d != CUBLASMP_STATUS_SUCCESS || f != CUBLASMP_STATUS_SUCCESS)
        CGM_WARN(CGM_SUB_CUBLASMP, "releasing the symmetric buffer %p: "
                 "cublasMpBufferDeregister %s, cublasMpFree %s (expected "
                 "CUBLASMP_STATUS_SUCCESS for both)",
                 p, cmp_status_name(d), cmp_status_name(f));
}

cgm_status cmp_symm_grow(cmp_symm *s, void **buf, size_t *cur, size_t bytes,
                         const char *what) {
    if (bytes <= *cur) return CGM_SUCCESS;
    if (*buf) {
        if (s->nretired < CMP_RETIRED_MAX) s->retired[s->nretired++] = *buf;
        else cmp_symm_free(s, *buf);
    }
    *buf = NULL;
    *cur = 0;
    cgm_status status = cmp_symm_alloc(s, bytes, what, buf);
    if (status == CGM_SUCCESS) *cur = bytes;
    return status;
}

void cmp_symm_free_retired(cmp_symm *s) {
    for (int i = 0; i < s->nretired; i++) cmp_symm_free(s, s->retired[i]);
    s->nretired = 0;
}
