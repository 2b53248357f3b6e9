/* The nccl backend: probe, init (split communicator, streams, workspaces),
 * finalize and the run entry (every op). Bounded calls and the watchdog are in
 * nccl_watch.c, schedules in nccl_ops.c and nccl_bulk.c, shared machinery
 * in nccl_exec.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/nccl/nccl_backend.h"

/* ------------------------------------------------------------ lifetime */

static cgm_status ncclb_probe(const cgm_comm *comm) {
    return cgm_gpu_probe_common(comm, "nccl", false, NULL);
}

static void state_free(ncclb_state *st, bool drained) {
    if (st->watchdog_running) {
        __atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
        pthread_join(st->watchdog, NULL);
        st->watchdog_running = false;
    }
    ncclb_abort_comm(st);
    st->nccl = NULL;
    if (!drained) {
        /* Device work may still use the memory: leak it, free nothing a
         * kernel might touch. Streams are released when their work ends. */
        CGM_WARN(CGM_SUB_NCCL, "nccl backend: streams did not drain; leaking "
                 "the workspaces");
    } else {
        for (int b = 0; b < NCCLB_BUF_COUNT; b++)
            if (st->buf[b]) cudaFree(st->buf[b]);
        for (int i = 0; i <= NCCLB_COMPUTE_STREAMS; i++)
            if (st->lt_workspace[i]) cudaFree(st->lt_workspace[i]);
        if (st->dev) cudaFree(st->dev);
        cgm_fp8_workspace_free(&st->fp8_ws);
    }
    for (int i = 0; i < st->nevents; i++)
        if (st->events[i]) cudaEventDestroy(st->events[i]);
    free(st->events);
    for (int i = 0; i < NCCLB_WATCH_SLOTS; i++) {
        ncclb_watch *w = &st->watch[i];
        if (w->start) cudaEventDestroy(w->start);
        if (w->done) cudaEventDestroy(w->done);
        for (int s = 0; s < NCCLB_WATCH_STEPS; s++)
            if (w->steps[s]) cudaEventDestroy(w->steps[s]);
    }
    if (st->fork) cudaEventDestroy(st->fork);
    if (st->join_comm) cudaEventDestroy(st->join_comm);
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS; i++) {
        if (st->join_compute[i]) cudaEventDestroy(st->join_compute[i]);
        if (st->compute[i]) cudaStreamDestroy(st->compute[i]);
    }
    if (st->comm_stream) cudaStreamDestroy(st->comm_stream);
    cgm_lt_destroy(st->lt);
    if (st->lock_ready) pthread_mutex_destroy(&st->lock);
    free(st);
}

/* A blocking ncclCommSplit runs on a helper thread so that init stays
 * bounded (cgm_bounded_run): if a peer never splits, init returns
 * CGM_ERROR_TIMEOUT and the split is left to the thread, blocked in NCCL
 * until the caller aborts its own communicator. If the split still
 * succeeds after that (the peer came late), the thread aborts the child
 * communicator nobody will use. */
typedef struct split_job {
    ncclComm_t parent, child;
    ncclConfig_t config;
    int rank, device;
    ncclResult_t result;
} split_job;

static void split_run(void *arg) {
    split_job *j = arg;
    (void)cudaSetDevice(j->device);
    j->result = ncclCommSplit(j->parent, 0, j->rank, &j->child, &j->config);
}

static void split_orphan(void *arg) {
    split_job *j = arg;
    if (j->result == ncclSuccess && j->child) (void)ncclCommAbort(j->child);
    free(j);
}

static cgm_status split_blocking(ncclb_state *st, ncclComm_t parent,
                                 const ncclConfig_t *config) {
    split_job *j = calloc(1, sizeof *j);
    if (!j) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc split job");
    j->parent = parent;
    j->config = *config;
    j->rank = st->rank;
    j->device = st->device;
    cgm_status s = cgm_bounded_run(split_run, split_orphan, j, st->timeout_ms,
                                   "ncclCommSplit");
    if (s == CGM_ERROR_TIMEOUT) /* j is the thread's now */
        return cgm_error(CGM_ERROR_TIMEOUT,
                         "ncclCommSplit of the caller's communicator: "
                         "rank %d waited %lld ms (timeout_ms, "
                         "COMMGEMM_TIMEOUT_MS) for every rank to create "
                         "the nccl backend's communicator; a peer did not "
                         "create its comm; the caller's communicator is "
                         "inside a collective split: abort it",
                         st->rank, (long long)st->timeout_ms);
    if (s != CGM_SUCCESS) {
        free(j);
        return s;
    }
    ncclResult_t r = j->result;
    st->nccl = r == ncclSuccess ? j->child : NULL;
    free(j);
    if (r != ncclSuccess)
        return cgm_nccl_fail(r, "ncclCommSplit of the caller's communicator",
                             __FILE__, __LINE__);
    return CGM_SUCCESS;
}

static cgm_status split_comm(ncclb_state *st, ncclComm_t parent) {
    cgm_status status = CGM_SUCCESS;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = st->blocking ? 1 : 0;
    if (st->max_ctas > 0) {
        config.minCTAs = 1;
        config.maxCTAs = st->max_ctas;
    } /* else NCCL's defaults, as on the caller's communicator */
    config.splitShare = 0; /* aborting ours must not touch the caller's */
    config.commName = "commgemm-nccl";
    if (st->blocking) {
        CGM_TRY(split_blocking(st, parent, &config));
    } else {
        ncclResult_t r = ncclCommSplit(parent, 0, st->rank, &st->nccl,
                                       &config);
        if (r != ncclSuccess && r != ncclInProgress) {
            st->nccl = NULL;
            CGM_NCCL_TRY(r);
        }
        if (!st->nccl)
            return cgm_error(CGM_ERROR_INTERNAL, "ncclCommSplit returned no "
                             "communicator for rank %d", st->rank);
        __atomic_store_n(&st->abort_handle, st->nccl, __ATOMIC_RELEASE);
        status = ncclb_settle(st, ncclInProgress, "ncclCommSplit of the "
                              "caller's communicator");
    }
    if (status == CGM_SUCCESS && !st->nccl)
        return cgm_error(CGM_ERROR_INTERNAL, "ncclCommSplit returned no "
                         "communicator for rank %d", st->rank);
    if (status == CGM_SUCCESS)
        __atomic_store_n(&st->abort_handle, st->nccl, __ATOMIC_RELEASE);
fail:
    return status;
}

static cgm_status ncclb_init(cgm_comm *comm, void **state) {
    cgm_status status = CGM_SUCCESS;
    int previous = -1;
    *state = NULL;
    ncclb_state *st = calloc(1, sizeof *st);
    if (!st) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc ncclb_state");
    st->comm = comm;
    st->rank = comm->rank;
    st->nranks = comm->nranks;
    st->device = comm->cuda_device;
    st->timeout_ms = comm->config.timeout_ms;
    st->watch_current = -1;
    if (pthread_mutex_init(&st->lock, NULL) != 0) {
        free(st);
        return cgm_error(CGM_ERROR_SYSTEM, "pthread_mutex_init failed");
    }
    st->lock_ready = true;
    int64_t ctas = 0, blocking = 1;
    bool from_env = false, blocking_from_env = false;
    CGM_TRY(cgm_param_int("COMMGEMM_NCCL_MAX_CTAS", &ctas, &from_env));
    if (ctas < 0 || ctas > 64) {
        status = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                           "COMMGEMM_NCCL_MAX_CTAS=%lld: expected 0 (NCCL's "
                           "choice) or 1..64; set it in range or unset it "
                           "(default 0)", (long long)ctas);
        goto fail;
    }
    st->max_ctas = (int)ctas;
    CGM_INFO(CGM_SUB_NCCL, "COMMGEMM_NCCL_MAX_CTAS=%d (%s) from %s",
             st->max_ctas, st->max_ctas ? "at most that many" : "NCCL's choice",
             from_env ? "environment" : "default");
    CGM_TRY(cgm_param_int("COMMGEMM_NCCL_BLOCKING", &blocking, &blocking_from_env));
    if (blocking != 0 && blocking != 1) {
        status = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                           "COMMGEMM_NCCL_BLOCKING=%lld: expected 1 "
                           "(blocking split comm, the default) or 0 "
                           "(non-blocking); set it to 0 or 1 or unset it",
                           (long long)blocking);
        goto fail;
    }
    st->blocking = blocking == 1;
    CGM_TRY(cgm_test_fault_read(st->rank, &st->fault));
    CGM_CUDA_TRY(cudaGetDevice(&previous));
    CGM_CUDA_TRY(cudaSetDevice(st->device));
    CGM_TRY(split_comm(st, (ncclComm_t)comm->nccl_comm));
    CGM_INFO(CGM_SUB_NCCL, "nccl backend: %s split comm (COMMGEMM_NCCL_"
             "BLOCKING=%d)", st->blocking ? "blocking" : "non-blocking",
             st->blocking ? 1 : 0);

    int least = 0, greatest = 0;
    CGM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    /* NCCL's few CTAs must get onto the SMs while GEMM chunks fill them:
     * the comm stream gets the highest priority. */
    CGM_CUDA_TRY(cudaStreamCreateWithPriority(&st->comm_stream,
                                              cudaStreamNonBlocking, greatest));
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS; i++) {
        CGM_CUDA_TRY(cudaStreamCreateWithPriority(
            &st->compute[i], cudaStreamNonBlocking, least));
        CGM_CUDA_TRY(cudaEventCreateWithFlags(&st->join_compute[i],
                                              cudaEventDisableTiming));
    }
    for (int i = 0; i <= NCCLB_COMPUTE_STREAMS; i++)
        CGM_CUDA_TRY(cudaMalloc(&st->lt_workspace[i], NCCLB_LT_WORKSPACE));
    CGM_CUDA_TRY(cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming));
    CGM_CUDA_TRY(cudaEventCreateWithFlags(&st->join_comm,
                                          cudaEventDisableTiming));
    st->nevents = 2 * st->nranks * NCCLB_MAX_SPLITS + 16;
    st->events = calloc((size_t)st->nevents, sizeof *st->events);
    if (!st->events) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of %d events",
                           st->nevents);
        goto fail;
    }
    for (int i = 0; i < st->nevents; i++)
        CGM_CUDA_TRY(cudaEventCreateWithFlags(&st->events[i],
                                              cudaEventDisableTiming));
    for (int i = 0; i < NCCLB_WATCH_SLOTS; i++) {
        ncclb_watch *w = &st->watch[i];
        CGM_CUDA_TRY(cudaEventCreateWithFlags(&w->start, cudaEventDisableTiming));
        CGM_CUDA_TRY(cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming));
        for (int s = 0; s < NCCLB_WATCH_STEPS; s++)
            CGM_CUDA_TRY(cudaEventCreateWithFlags(&w->steps[s],
                                                  cudaEventDisableTiming));
    }
    CGM_CUDA_TRY(cudaMalloc((void **)&st->dev, sizeof *st->dev));
    CGM_CUDA_TRY(cudaMemset(st->dev, 0, sizeof *st->dev));
    CGM_TRY(cgm_lt_create(&st->lt));
    /* This backend's own kernels, loaded before any runs beside NCCL's
     * (device.h, cgm_dev_preload). */
    CGM_CUDA_TRY(cgm_dev_preload());
    /* Workspaces of the ops configured to run here; others at first use. */
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        if (comm->config.op_backend[op] != CGM_BACKEND_NCCL) continue;
        if (op == CGM_OP_ALL_GATHER_GEMM || op == CGM_OP_GEMM_ALL_REDUCE ||
            op == CGM_OP_BULK)
            CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_GATHER, false));
        if (op == CGM_OP_GEMM_REDUCE_SCATTER || op == CGM_OP_GEMM_ALL_REDUCE)
            CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_PARTIAL, false));
        if (op != CGM_OP_ALL_GATHER_GEMM)
            CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_RECV, false));
    }
    CGM_CUDA_TRY(cudaDeviceSynchronize());
    if (pthread_create(&st->watchdog, NULL, ncclb_watchdog_main, st) != 0) {
        status = cgm_error(CGM_ERROR_SYSTEM, "nccl backend: could not start "
                           "its watchdog thread (pthread_create failed)");
        goto fail;
    }
    st->watchdog_running = true;
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    if (!nvls || strcmp(nvls, "0") != 0)
        CGM_INFO(CGM_SUB_NCCL, "NCCL_NVLS_ENABLE is %s: the bulk collectives "
                 "may use NVLink multicast; set NCCL_NVLS_ENABLE=0 to keep "
                 "them off it", nvls ? nvls : "unset");
    if (st->max_ctas)
        CGM_INFO(CGM_SUB_NCCL, "nccl backend ready: rank %d of %d on device "
                 "%d, split comm with at most %d CTAs", st->rank, st->nranks,
                 st->device, st->max_ctas);
    else
        CGM_INFO(CGM_SUB_NCCL, "nccl backend ready: rank %d of %d on device "
                 "%d, split comm with NCCL's default CTAs", st->rank,
                 st->nranks, st->device);
    if (previous >= 0 && previous != st->device) cudaSetDevice(previous);
    *state = st;
    return CGM_SUCCESS;
fail:
    state_free(st, true);
    if (previous >= 0 && previous != comm->cuda_device) cudaSetDevice(previous);
    return status;
}

/* Waits for a stream, bounded; false when it did not drain in time. */
static bool drain(cudaStream_t stream, int64_t deadline) {
    for (;;) {
        cudaError_t q = cudaStreamQuery(stream);
        if (q != cudaErrorNotReady) {
            (void)cudaGetLastError();
            return true;
        }
        if (cgm_now_ns() > deadline) return false;
        usleep(100);
    }
}

static cgm_status ncclb_finalize(cgm_comm *comm, void *state) {
    ncclb_state *st = state;
    cgm_status status = CGM_SUCCESS;
    if (!st) return CGM_SUCCESS;
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    (void)cudaSetDevice(st->device);
    /* From here the watchdog watches no op, only the blocked-call guard
     * (around ncclCommFinalize on a blocking comm); stopped at the end. */
    __atomic_store_n(&st->finalizing, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&st->lock); /* waits out a poll in progress */
    pthread_mutex_unlock(&st->lock);
    int64_t deadline = cgm_now_ns() + st->timeout_ms * 1000000;
    bool drained = drain(st->comm_stream, deadline);
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS && drained; i++)
        drained = drain(st->compute[i], deadline);
    if (!drained && st->nccl) {
        /* A peer never came: abort so NCCL's kernels return, then retry. */
        status = cgm_error(CGM_ERROR_TIMEOUT,
                           "cgm_comm_destroy (nccl backend): rank %d's "
                           "transfers did not finish within %lld ms; a peer "
                           "did not take part in an earlier op; the NCCL "
                           "communicator was aborted", st->rank,
                           (long long)st->timeout_ms);
        ncclb_abort_comm(st);
        st->nccl = NULL;
        deadline = cgm_now_ns() + st->timeout_ms * 1000000;
        drained = drain(st->comm_stream, deadline);
        for (int i = 0; i < NCCLB_COMPUTE_STREAMS && drained; i++)
            drained = drain(st->compute[i], deadline);
    }
    if (st->nccl && comm->broken == CGM_SUCCESS &&
        st->async_status == CGM_SUCCESS) {
        /* Clean shutdown: finalize (bounded), then destroy. */
        pthread_mutex_lock(&st->lock);
        cgm_status s = ncclb_call_enter(st, "ncclCommFinalize");
        if (s == CGM_SUCCESS)
            s = ncclb_settle(st, ncclCommFinalize(st->nccl),
                             "ncclCommFinalize");
        ncclComm_t c = NULL;
        if (s == CGM_SUCCESS && st->nccl)
            c = __atomic_exchange_n(&st->abort_handle, (ncclComm_t)NULL,
                                    __ATOMIC_ACQ_REL);
        if (c) {
            (void)ncclCommDestroy(c);
            st->nccl = NULL;
        } else if (s == CGM_SUCCESS) {
            st->nccl = NULL; /* the watchdog aborted it */
        } else if (status == CGM_SUCCESS) {
            status = s;
        }
        pthread_mutex_unlock(&st->lock);
    }
    state_free(st, drained); /* aborts what is left */
    if (previous >= 0) (void)cudaSetDevice(previous);
    return status;
}

/* The table's run entry: one path for every op, the op's own part chosen
 * by call->op between the shared begin and end. */
static cgm_status ncclb_run(cgm_comm *comm, void *state, const cgm_call *call) {
    ncclb_state *st = state;
    int previous = -1;
    cgm_status status = CGM_SUCCESS;
    enum cudaStreamCaptureMode mode = ncclb_relax_capture();
    CGM_CUDA_TRY(cudaGetDevice(&previous));
    if (previous != st->device) CGM_CUDA_TRY(cudaSetDevice(st->device));
    ncclb_op op;
    CGM_TRY(ncclb_op_begin(st, call, &op));
    status = cgm_test_fault_after_fork(&st->fault, st->rank, "nccl backend");
    if (status == CGM_SUCCESS) status = ncclb_fp8_begin(&op);
    if (status == CGM_SUCCESS) switch (call->op) {
    case CGM_OP_ALL_GATHER_GEMM: status = ncclb_all_gather_gemm(&op); break;
    case CGM_OP_GEMM_REDUCE_SCATTER:
        status = ncclb_gemm_reduce_scatter(&op, false);
        break;
    case CGM_OP_GEMM_ALL_REDUCE:
        status = ncclb_gemm_reduce_scatter(&op, true);
        break;
    default: status = ncclb_bulk(&op); break;
    }
    if (status == CGM_SUCCESS) status = ncclb_epi_end(&op);
    status = ncclb_op_end(&op, status);
    if (status != CGM_SUCCESS && status != CGM_ERROR_TIMEOUT &&
        status != CGM_ERROR_PEER_FAILED) {
        /* Past the agreement and the fork the peers are in this op too: a
         * failure of this rank here (some of its NCCL calls may be out)
         * leaves the ranks out of step. The peers' waits expire naming this
         * rank (their watchdogs); this comm refuses further ops. (A timeout
         * or a peer's failure: the core marks the comm broken.) */
        cgm_error_context(status, "nccl backend: rank %d failed in the middle "
                          "of the op, so the ranks are out of step and the "
                          "comm is broken (destroy it and create a new one)",
                          st->rank);
        cgm_comm_mark_broken(comm, status);
    }
fail:
    if (previous >= 0 && previous != st->device) cudaSetDevice(previous);
    ncclb_restore_capture(mode);
    return status;
}

/* ---- autotuner candidates (the other hooks are gpu_tune.c's) ---- */

#define NCCLB_TUNE_MIN_PIECE_ROWS 128

/* AG: ring (the default) and direct pulls at 1, 2, 4 pieces per shard, and
 * no_overlap; RS/AR use only "overlap or not", at 1, 2, 4, 8 pieces. */
static int ncclb_tune_candidates(const cgm_comm *comm, const cgm_call *call,
                                 cgm_tune_candidate *out) {
    static const int ag_counts[] = {1, 2, 4}, rs_counts[] = {1, 2, 4, 8};
    int n = 0;
    int64_t shard = cgm_ceil_div(call->m > 0 ? call->m : 1, comm->nranks);
    if (call->op == CGM_OP_ALL_GATHER_GEMM) {
        const cgm_algo algos[] = {CGM_ALGO_RING, CGM_ALGO_SPLIT_PIPELINED};
        for (int a = 0; a < 2; a++)
            for (int i = 0; i < 3; i++)
                if (i == 0 || shard >= ag_counts[i] * NCCLB_TUNE_MIN_PIECE_ROWS)
                    out[n++] = (cgm_tune_candidate){algos[a], ag_counts[i], 0};
    } else {
        for (int i = 0; i < 4 && rs_counts[i] <= NCCLB_MAX_SPLITS; i++)
            if (i == 0 || shard >= rs_counts[i] * NCCLB_TUNE_MIN_PIECE_ROWS)
                out[n++] = (cgm_tune_candidate){CGM_ALGO_SPLIT_PIPELINED,
                                                rs_counts[i], 0};
    }
    out[n++] = (cgm_tune_candidate){CGM_ALGO_NO_OVERLAP, 1, 0};
    return n;
}

static const cgm_tune_hooks ncclb_tune_hooks =
    CGM_GPU_TUNE_HOOKS(ncclb_tune_candidates);

/* fp8 runs where this build and GPU can (cgm_gpu_fp8_check); epilogues
 * where cuBLASLt and the reduce kernels can (cgm_gpu_epilogue_check):
 * refused before the tuner and any exchange. */
static cgm_status ncclb_check(const cgm_comm *comm, const cgm_call *call) {
    cgm_status s = cgm_gpu_fp8_check("nccl", comm->cuda_device, call);
    return s != CGM_SUCCESS ? s
                            : cgm_gpu_epilogue_check("nccl", call,
                                                     comm->nranks);
}

const cgm_backend_vtable cgm_nccl_backend = {
    .id = CGM_BACKEND_NCCL,
    .name = "nccl",
    .probe = ncclb_probe,
    .init = ncclb_init,
    .check = ncclb_check,
    .run = ncclb_run,
    .async_error = ncclb_async_error,
    .finalize = ncclb_finalize,
    .tune = &ncclb_tune_hooks,
};
