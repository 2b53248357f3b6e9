/* The cublasmp backend: each op is one cublasMpMatmul on the caller's
 * stream, over 1D grids built once per comm from its NCCL communicator.
 * Descriptors (matrix + matmul) are built at the first call of a shape and
 * kept in a small LRU cache; that first call is collective (one bounded
 * exchange of every rank's local sizes, then one of workspace needs), so it
 * must be eager: inside graph capture a missing entry is an error. */
#include <stdlib.h>
#include <string.h>

#include "backend/cublasmp/cublasmp_state.h"

/* The enum values declared in cublasmp_api.h are CUDA's. */
#define SAME(ours, cuda) ((int)(ours) == (int)(cuda))
_Static_assert(SAME(CMP_CUDA_R_32F, CUDA_R_32F), "CUDA_R_32F");
_Static_assert(SAME(CMP_CUDA_R_16F, CUDA_R_16F), "CUDA_R_16F");
_Static_assert(SAME(CMP_CUDA_R_16BF, CUDA_R_16BF), "CUDA_R_16BF");
_Static_assert(SAME(CMP_CUDA_R_8F_E4M3, CUDA_R_8F_E4M3), "CUDA_R_8F_E4M3");
_Static_assert(SAME(CMP_CUDA_R_8F_E5M2, CUDA_R_8F_E5M2), "CUDA_R_8F_E5M2");
_Static_assert(SAME(CMP_CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F), "32F");
_Static_assert(SAME(CMP_CUBLAS_COMPUTE_32F_FAST_TF32,
                    CUBLAS_COMPUTE_32F_FAST_TF32), "32F_FAST_TF32");
_Static_assert(SAME(CMP_CUBLAS_OP_N, CUBLAS_OP_N), "CUBLAS_OP_N");
_Static_assert(SAME(CMP_CUBLAS_OP_T, CUBLAS_OP_T), "CUBLAS_OP_T");
#undef SAME
_Static_assert(sizeof(cudaDataType_t) == sizeof(int), "cudaDataType_t size");

static cgm_status cmp_probe(const cgm_comm *comm) {
    cgm_status status = cgm_gpu_probe_common(comm, "cublasmp", false, NULL);
    if (status != CGM_SUCCESS) return status;
    const cmp_api *api = NULL;
    return cmp_lib_get(&api);
}

static cgm_status enter_device(int device, int *previous) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cudaGetDevice(previous));
    if (*previous != device) CGM_CUDA_TRY(cudaSetDevice(device));
fail:
    return status;
}

static void leave_device(int device, int previous) {
    if (previous >= 0 && previous != device) cudaSetDevice(previous);
}

int cmp_test_ag_staging = 1;

/* Frees everything; `collective`: the peers are alive and run the same
 * finalize (symmetric-memory frees and grid teardown are collective), and
 * nothing is stuck on the device. Otherwise nothing that waits for the
 * device or the peers runs, and device memory is leaked. */
static void state_free(cmp_state *st, bool collective) {
    const cmp_api *api = st->api;
    if (collective) {
        if (st->stream) (void)cudaStreamSynchronize(st->stream);
        (void)cudaDeviceSynchronize();
    }
    cmp_cache_clear(st);
    if (collective) {
        /* Same order on every rank: retired, workspace, staging buffer. */
        cmp_symm_free_retired(&st->symm);
        cmp_symm_free(&st->symm, st->ws);
        cmp_symm_free(&st->symm, st->stage);
        for (int i = 0; i < st->ndretired; i++) cudaFree(st->dretired[i]);
        if (st->dbuf) cudaFree(st->dbuf);
        if (st->dev) cudaFree(st->dev);
        /* Grid destruction tears down NCCL communicators: collective too. */
        for (int g = 0; g < 2; g++)
            if (st->grid[g]) api->GridDestroy(st->grid[g]);
        if (st->handle) api->Destroy(st->handle);
    }
    if (st->stream) cudaStreamDestroy(st->stream);
    free(st);
}

/* Every rank's cuBLASMp and NCCL versions, and commgemm's own NCCL against
 * cuBLASMp's: one libnccl.so.2 must serve both (the communicator commgemm
 * made is used by cuBLASMp). Bounded (cuBLASMp's grid creation waits
 * without bound for every rank). */
typedef struct version_record {
    int cublasmp, nccl;
} version_record;

static cgm_status check_versions(cmp_state *st) {
    cgm_status status = CGM_SUCCESS;
    const cmp_api *api = st->api;
    int own = 0;
    CGM_NCCL_TRY(ncclGetVersion(&own));
    if (own != api->nccl_version) {
        char a[32], b[32];
        cmp_nccl_version_text(own, a, sizeof a);
        cmp_nccl_version_text(api->nccl_version, b, sizeof b);
        return cgm_error(CGM_ERROR_MISMATCH,
                         "the cublasmp backend: commgemm's communicator is "
                         "NCCL %s but cuBLASMp resolves NCCL %s (%s): they "
                         "must share one libnccl.so.2; %s",
                         a, b, api->nccl_path, CMP_NCCL_HINT);
    }
    version_record mine = {api->version, api->nccl_version};
    version_record *all = calloc((size_t)st->nranks, sizeof *all);
    if (!all) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc versions");
    status = cgm_nccl_allgather_host(st->comm->nccl_comm, st->nranks, &mine,
                                     all, sizeof mine, st->timeout_ms);
    for (int r = 0; r < st->nranks && status == CGM_SUCCESS; r++)
        if (all[r].cublasmp != mine.cublasmp || all[r].nccl != mine.nccl)
            status = cgm_error(CGM_ERROR_MISMATCH,
                               "the cublasmp backend: rank %d loaded cuBLASMp "
                               "%d with NCCL %d but rank %d loaded cuBLASMp %d "
                               "with NCCL %d; install one version of each for "
                               "every rank",
                               r, all[r].cublasmp, all[r].nccl, st->rank,
                               mine.cublasmp, mine.nccl);
    free(all);
fail:
    return status;
}

static cgm_status cmp_init(cgm_comm *comm, void **state) {
    cgm_status status = CGM_SUCCESS;
    int previous = -1;
    bool collective = false;
    cmp_state *st = calloc(1, sizeof *st);
    if (!st) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc cmp_state");
    CGM_TRY(cmp_lib_get(&st->api));
    const cmp_api *api = st->api;
    st->comm = comm;
    st->rank = comm->rank;
    st->nranks = comm->nranks;
    st->device = comm->cuda_device;
    st->timeout_ms = comm->config.timeout_ms;
    bool from_env = false;
    st->algo_override = cgm_param_string("COMMGEMM_CUBLASMP_ALGO", &from_env);
    int algo_check = 0;
    CGM_TRY(cmp_map_algo(CGM_ALGO_AUTO, st->algo_override, &algo_check));
    CGM_TRY(enter_device(st->device, &previous));
    CGM_TRY(check_versions(st));
    collective = true;
    st->ag_stage = cmp_test_ag_staging != 0;
    CGM_CUDA_TRY(cudaMalloc((void **)&st->dev, sizeof *st->dev));
    CGM_CUDA_TRY(cudaMemset(st->dev, 0, sizeof *st->dev));
    CGM_CUDA_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    CMP_TRY(api->Create(&st->handle, st->stream), "the comm's handle");
    CMP_TRY(api->GridCreate(st->nranks, 1, CUBLASMP_GRID_LAYOUT_COL_MAJOR,
                            comm->nccl_comm, &st->grid[CMP_GRID_COL]),
            "the P x 1 grid");
    CMP_TRY(api->GridCreate(1, st->nranks, CUBLASMP_GRID_LAYOUT_ROW_MAJOR,
                            comm->nccl_comm, &st->grid[CMP_GRID_ROW]),
            "the 1 x P grid");
    st->symm.api = api;
    st->symm.grid[CMP_GRID_COL] = st->grid[CMP_GRID_COL];
    st->symm.grid[CMP_GRID_ROW] = st->grid[CMP_GRID_ROW];
    CGM_CUDA_TRY(cudaStreamSynchronize(st->stream));
    char version[32], nccl[32];
    cmp_version_text(api->version, version, sizeof version);
    cmp_nccl_version_text(api->nccl_version, nccl, sizeof nccl);
    CGM_INFO(CGM_SUB_CUBLASMP, "cublasmp backend ready: rank %d of %d on "
             "device %d, cuBLASMp %s, NCCL %s, algo %s, workspace in NCCL "
             "symmetric memory, AG operand %s",
             st->rank, st->nranks, st->device, version, nccl,
             st->algo_override ? st->algo_override : "default",
             st->ag_stage ? "staged in symmetric memory" : "passed as given");
    leave_device(st->device, previous);
    *state = st;
    return CGM_SUCCESS;
fail:
    if (st->api) state_free(st, collective);
    else free(st);
    leave_device(comm->cuda_device, previous);
    *state = NULL;
    return status;
}

static cgm_status cmp_finalize(cgm_comm *comm, void *state) {
    cmp_state *st = state;
    int previous = -1;
    if (!st) return CGM_SUCCESS;
    int device = st->device;
    bool collective = comm->broken == CGM_SUCCESS;
    if (enter_device(device, &previous) != CGM_SUCCESS) collective = false;
    state_free(st, collective);
    leave_device(device, previous);
    return CGM_SUCCESS;
}

/* The table's run entry: AG+GEMM, GEMM+RS and GEMM+AR are one distributed
 * matmul each (cmp_execute maps the op); bulk has none. */
static cgm_status cmp_run(cgm_comm *comm, void *state, const cgm_call *call) {
    if (call->op == CGM_OP_BULK)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend has no bulk overlap (cuBLASMp runs "
                         "one distributed matmul, not a GEMM beside an unrelated "
                         "collective); use p2p or nccl for bulk "
                         "(options.backend, or COMMGEMM_BACKEND=bulk:p2p)");
    cmp_state *st = state;
    int previous = -1;
    cgm_status status = enter_device(st->device, &previous);
    if (status == CGM_SUCCESS) status = cmp_execute(st, call);
    leave_device(st->device, previous);
    return status;
}

/* What cuBLASMp cannot run as commgemm defines it (an epilogue on
 * GEMM+RS/AR, fp8 AG+GEMM, block scaling, an algorithm without a
 * counterpart, ...) is refused before the tuner and any exchange
 * (cmp_check_call). */
static cgm_status cmp_check(const cgm_comm *comm, const cgm_call *call) {
    (void)comm;
    return cmp_check_call(call);
}

const cgm_backend_vtable cgm_cublasmp_backend = {
    .id = CGM_BACKEND_CUBLASMP,
    .name = "cublasmp",
    .probe = cmp_probe,
    .init = cmp_init,
    .check = cmp_check,
    .run = cmp_run,
    .finalize = cmp_finalize,
};
