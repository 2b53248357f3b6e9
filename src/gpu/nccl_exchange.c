/* The GPU backends' bootstrap: comm queries and bounded host-buffer
 * all-gathers, through NCCL for a comm made from an ncclComm_t and through
 * the host backend's channel for a LOCAL one. They move only handles and
 * small records, at init and at the first call of a shape; the data path
 * of the p2p backend runs no NCCL kernel. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"

cgm_status cgm_nccl_comm_query(void *nccl_comm, int *rank, int *nranks,
                               int *cuda_device) {
    cgm_status status = CGM_SUCCESS;
    if (!nccl_comm)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "expected an ncclComm_t, found NULL; pass the "
                         "communicator from ncclCommInitRank");
    ncclComm_t comm = (ncclComm_t)nccl_comm;
    CGM_NCCL_TRY(ncclCommUserRank(comm, rank));
    CGM_NCCL_TRY(ncclCommCount(comm, nranks));
    CGM_NCCL_TRY(ncclCommCuDevice(comm, cuda_device));
fail:
    return status;
}

/* NCCL's asynchronous error of the communicator `ctx`, as a status. */
static cgm_status nccl_async(void *ctx) {
    cgm_status status = CGM_SUCCESS;
    ncclResult_t async = ncclSuccess;
    CGM_NCCL_TRY(ncclCommGetAsyncError((ncclComm_t)ctx, &async));
    if (async != ncclSuccess && async != ncclInProgress) CGM_NCCL_TRY(async);
fail:
    return status;
}

/* Waits for `stream` with a deadline, watching NCCL's async error. */
static cgm_status wait_stream_bounded(ncclComm_t comm, cudaStream_t stream,
                                      int64_t timeout_ms, const char *what) {
    bool expired = false;
    cgm_status status = cgm_gpu_wait_done(NULL, stream, timeout_ms, nccl_async,
                                          comm, &expired);
    if (expired)
        return cgm_error(CGM_ERROR_TIMEOUT,
                         "%s: expected every rank of the NCCL "
                         "communicator within %lld ms, found at least "
                         "one missing (NCCL does not say which); make "
                         "every rank call the same commgemm functions "
                         "in the same order, or raise COMMGEMM_TIMEOUT_MS",
                         what, (long long)timeout_ms);
    return status;
}

cgm_status cgm_nccl_allgather_host(void *nccl_comm, int nranks,
                                   const void *send, void *recv, size_t bytes,
                                   int64_t timeout_ms) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t stream = NULL;
    char *dev = NULL;
    CGM_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CGM_CUDA_TRY(cudaMalloc((void **)&dev, bytes * (size_t)(nranks + 1)));
    char *dev_send = dev + bytes * (size_t)nranks;
    CGM_CUDA_TRY(cudaMemcpyAsync(dev_send, send, bytes, cudaMemcpyHostToDevice,
                                 stream));
    CGM_NCCL_TRY(ncclAllGather(dev_send, dev, bytes, ncclChar,
                               (ncclComm_t)nccl_comm, stream));
    CGM_TRY(wait_stream_bounded((ncclComm_t)nccl_comm, stream, timeout_ms,
                                "exchanging handles through NCCL"));
    CGM_CUDA_TRY(cudaMemcpy(recv, dev, bytes * (size_t)nranks,
                            cudaMemcpyDeviceToHost));
fail:
    if (status == CGM_ERROR_TIMEOUT) {
        /* The all-gather still runs and may write `dev` later: leak it
         * rather than free memory a kernel still owns. */
        return status;
    }
    if (dev) cudaFree(dev);
    if (stream) cudaStreamDestroy(stream);
    return status;
}

cgm_status cgm_gpu_allgather_host(cgm_comm *comm, const void *send,
                                  void *recv, size_t bytes) {
    if (comm->bootstrap_kind == CGM_BOOTSTRAP_LOCAL)
        return cgm_comm_local_allgather(comm, send, bytes, recv);
    return cgm_nccl_allgather_host(comm->nccl_comm, comm->nranks, send, recv,
                                   bytes, comm->config.timeout_ms);
}

typedef struct node_record {
    char host[64];
    char bus_id[32];
    int ok; /* second round: this rank reaches every peer */
    int64_t pid;
} node_record;

cgm_status cgm_check_node_peers(cgm_comm *comm, int cuda_device) {
    cgm_status status = CGM_SUCCESS;
    int rank = comm->rank, nranks = comm->nranks;
    node_record mine, *all = calloc((size_t)nranks, sizeof *all);
    if (!all)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of %d records",
                         nranks);
    memset(&mine, 0, sizeof mine);
    gethostname(mine.host, sizeof mine.host - 1);
    mine.pid = (int64_t)getpid();
    CGM_CUDA_TRY(cudaDeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id,
                                       cuda_device));
    CGM_TRY(cgm_gpu_allgather_host(comm, &mine, all, sizeof mine));
    /* Local verdict, then agree on it so that every rank returns alike. */
    mine.ok = 1;
    char why[256] = "";
    int shared = 0; /* peers on this rank's GPU */
    for (int r = 0; r < nranks && mine.ok; r++) {
        if (r == rank) continue;
        if (strcmp(all[r].host, mine.host) != 0) {
            mine.ok = 0;
            snprintf(why, sizeof why, "rank %d runs on host '%s', rank %d on "
                     "'%s'", r, all[r].host, rank, mine.host);
            break;
        }
        if (all[r].pid == mine.pid) {
            mine.ok = 0;
            snprintf(why, sizeof why, "ranks %d and %d are threads of one "
                     "process (pid %lld), and CUDA IPC cannot map a "
                     "process's own memory: run one process per rank",
                     r, rank, (long long)mine.pid);
            break;
        }
        int peer_dev = -1;
        if (cudaDeviceGetByPCIBusId(&peer_dev, all[r].bus_id) != cudaSuccess) {
            (void)cudaGetLastError();
            mine.ok = 0;
            snprintf(why, sizeof why, "rank %d's GPU %s is not visible to "
                     "rank %d (CUDA_VISIBLE_DEVICES?)", r, all[r].bus_id,
                     rank);
            break;
        }
        /* Ranks may share a GPU (LOCAL bootstraps: NCCL refuses that); the
         * GPU then time-slices between their processes. */
        if (peer_dev == cuda_device) {
            if (!shared++)
                CGM_WARN(CGM_SUB_P2P, "rank %d shares GPU %d (%s) with rank "
                         "%d: the GPU time-slices between their processes, "
                         "right but slow; give each rank its own device "
                         "(cudaSetDevice before cgm_comm_create) for speed",
                         rank, cuda_device, mine.bus_id, r);
            continue;
        }
        int can = 0;
        CGM_CUDA_TRY(cudaDeviceCanAccessPeer(&can, cuda_device, peer_dev));
        if (!can) {
            mine.ok = 0;
            snprintf(why, sizeof why, "rank %d's GPU %d cannot access rank "
                     "%d's GPU %d (cudaDeviceCanAccessPeer = 0)", rank,
                     cuda_device, r, peer_dev);
        }
    }
    CGM_TRY(cgm_gpu_allgather_host(comm, &mine, all, sizeof mine));
    /* Blame the first rank that failed, or this one with its reason. */
    int bad = -1;
    for (int r = 0; r < nranks; r++)
        if (!all[r].ok && (bad < 0 || r == rank)) bad = r;
    if (bad >= 0)
        status = cgm_error(CGM_ERROR_UNAVAILABLE,
                           "the p2p backend needs every rank on one host, in "
                           "a process of its own, with CUDA peer access "
                           "between all GPUs, but rank %d reports "
                           "otherwise%s%s; use the nccl backend "
                           "(COMMGEMM_BACKEND=nccl) across hosts or without "
                           "peer access",
                           bad, bad == rank ? ": " : "",
                           bad == rank ? why : "");
fail:
    free(all);
    return status;
}

typedef struct verdict_record {
    int32_t status, pad_;
    char message[248];
} verdict_record;

cgm_status cgm_gpu_agree(cgm_comm *comm, cgm_status mine, const char *what) {
    int rank = comm->rank, nranks = comm->nranks;
    if (nranks == 1) return mine;
    verdict_record me;
    memset(&me, 0, sizeof me);
    me.status = (int32_t)mine;
    if (mine != CGM_SUCCESS)
        snprintf(me.message, sizeof me.message, "%s", cgm_last_error());
    verdict_record *all = calloc((size_t)nranks, sizeof *all);
    cgm_status st = all ? cgm_gpu_allgather_host(comm, &me, all, sizeof me)
                        : cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of %d "
                                    "verdicts", nranks);
    if (mine != CGM_SUCCESS) {
        free(all);
        /* Its own failure, said again in case the exchange replaced it. */
        return st == CGM_SUCCESS ? mine : cgm_error(mine, "%s", me.message);
    }
    if (st != CGM_SUCCESS) {
        free(all);
        return st;
    }
    for (int r = 0; r < nranks; r++) {
        if (all[r].status == CGM_SUCCESS) continue;
        all[r].message[sizeof all[r].message - 1] = '\0';
        st = cgm_error(CGM_ERROR_PEER_FAILED,
                       "%s failed on rank %d (%s: %s), so it fails on every "
                       "rank (this is rank %d); fix rank %d and create the "
                       "comm again",
                       what, r, cgm_status_string((cgm_status)all[r].status),
                       all[r].message, rank, r);
        break;
    }
    free(all);
    return st;
}

typedef struct ipc_record {
    cudaIpcMemHandle_t handle;
    uint64_t bytes;
} ipc_record;

cgm_status cgm_peer_mem_alloc(size_t bytes, cgm_peer_mem *out) {
    cgm_status status = CGM_SUCCESS;
    memset(out, 0, sizeof *out);
    out->bytes = bytes;
    CGM_CUDA_TRY(cudaMalloc(&out->local, bytes));
    CGM_CUDA_TRY(cudaMemset(out->local, 0, bytes));
    CGM_CUDA_TRY(cudaDeviceSynchronize());
    CGM_CUDA_TRY(cudaIpcGetMemHandle(&out->handle, out->local));
fail:
    return status;
}

cgm_status cgm_peer_mem_open(cgm_comm *comm, cgm_peer_mem *pm) {
    cgm_status status = CGM_SUCCESS;
    int rank = comm->rank, nranks = comm->nranks;
    ipc_record mine, *all = NULL;
    memset(&mine, 0, sizeof mine);
    mine.handle = pm->handle;
    mine.bytes = pm->bytes;
    pm->rank = rank;
    pm->nranks = nranks;
    pm->peer = calloc((size_t)nranks, sizeof(void *));
    all = calloc((size_t)nranks, sizeof *all);
    if (!pm->peer || !all) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc for %d peers",
                           nranks);
        goto fail;
    }
    CGM_TRY(cgm_gpu_allgather_host(comm, &mine, all, sizeof mine));
    /* The same records on every rank: the same verdict. */
    for (int r = 0; r < nranks; r++) {
        if (all[r].bytes != pm->bytes) {
            status = cgm_error(CGM_ERROR_MISMATCH,
                               "expected every rank to register a %llu-byte "
                               "workspace, found %llu bytes on rank %d; give "
                               "every rank the same COMMGEMM_MAX_M/N/K",
                               (unsigned long long)pm->bytes,
                               (unsigned long long)all[r].bytes, r);
            goto fail;
        }
    }
    pm->peer[rank] = pm->local;
    for (int r = 0; r < nranks && status == CGM_SUCCESS; r++) {
        if (r == rank) continue;
        cudaError_t e = cudaIpcOpenMemHandle(&pm->peer[r], all[r].handle,
                                             cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            pm->peer[r] = NULL;
            status = cgm_error_context(
                cgm_cuda_fail(e, "cudaIpcOpenMemHandle", __FILE__, __LINE__),
                "mapping rank %d's workspace", r);
        }
    }
    status = cgm_gpu_agree(comm, status, "mapping the peers' workspaces");
fail:
    free(all);
    return status;
}

void cgm_peer_mem_destroy(cgm_peer_mem *pm) {
    if (pm->peer) {
        for (int r = 0; r < pm->nranks; r++)
            if (r != pm->rank && pm->peer[r]) cudaIpcCloseMemHandle(pm->peer[r]);
        free(pm->peer);
    }
    if (pm->local) cudaFree(pm->local);
    memset(pm, 0, sizeof *pm);
}
