/* The nccl backend: probe, init (split communicator, streams, workspaces),
 * the watchdog, the asynchronous error, finalize and the op entry points.
 * Schedules are in nccl_ops.c and nccl_bulk.c, shared machinery in
 * nccl_exec.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/nccl/nccl_backend.h"

/* Our event and stream queries are "potentially unsafe" calls that a
 * global-mode graph capture (ours or another thread's) forbids, and a
 * forbidden call would invalidate that capture: relax this thread's mode
 * around them (as PyTorch's NCCL watchdog does). */
static enum cudaStreamCaptureMode relax_capture(void) {
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
        (void)cudaGetLastError();
        mode = cudaStreamCaptureModeRelaxed;
    }
    return mode;
}

static void restore_capture(enum cudaStreamCaptureMode mode) {
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ------------------------------------------------------------ errors */

void ncclb_fail_locked(ncclb_state *st, cgm_status status) {
    if (st->async_status == CGM_SUCCESS) {
        st->async_status = status;
        snprintf(st->async_message, sizeof st->async_message, "%s",
                 cgm_last_error());
    }
    if (st->nccl) {
        /* Makes NCCL's kernels return so that the streams drain. */
        (void)ncclCommAbort(st->nccl);
        st->nccl = NULL;
    }
}

static cgm_status nccl_async_status(ncclResult_t r) {
    return r == ncclRemoteError || r == ncclSystemError
               ? CGM_ERROR_PEER_FAILED
               : CGM_ERROR_NCCL;
}

cgm_status ncclb_settle(ncclb_state *st, ncclResult_t issued,
                        const char *what) {
    if (issued == ncclSuccess) return CGM_SUCCESS;
    if (!st->nccl)
        return cgm_error(st->async_status ? st->async_status
                                          : CGM_ERROR_INTERNAL,
                         "%s: the nccl backend's communicator was aborted "
                         "(%s); destroy the comm", what, st->async_message);
    if (issued != ncclInProgress) {
        /* The peers did their part of this call: ours failed, so the
         * comm cannot stay in step with them. */
        cgm_status s = cgm_nccl_fail(issued, what, __FILE__, __LINE__);
        if (nccl_async_status(issued) == CGM_ERROR_PEER_FAILED)
            s = cgm_error(CGM_ERROR_PEER_FAILED,
                          "%s: NCCL reports %s on rank %d (detail: %s); a "
                          "peer died or its network failed; the comm is "
                          "broken: destroy it", what,
                          ncclGetErrorString(issued), st->rank,
                          ncclGetLastError(st->nccl));
        ncclb_fail_locked(st, s);
        return s;
    }
    int64_t deadline = cgm_now_ns() + st->timeout_ms * 1000000;
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t q = ncclCommGetAsyncError(st->nccl, &async);
        if (q != ncclSuccess) async = q;
        if (async == ncclSuccess) return CGM_SUCCESS;
        if (async != ncclInProgress) {
            cgm_status s = cgm_error(
                nccl_async_status(async),
                "%s: expected NCCL to accept the operation, found %s (NCCL's "
                "detail: %s) on rank %d; a peer failed or the communicator "
                "broke; the comm is broken: destroy it (NCCL_DEBUG=WARN says "
                "more)", what, ncclGetErrorString(async),
                ncclGetLastError(st->nccl), st->rank);
            ncclb_fail_locked(st, s);
            return s;
        }
        if (cgm_now_ns() > deadline) {
            cgm_status s = cgm_error(
                CGM_ERROR_TIMEOUT,
                "%s: rank %d waited %lld ms (timeout_ms, COMMGEMM_TIMEOUT_MS) "
                "for NCCL to set up the operation, which needs every peer; a "
                "peer did not take part (NCCL does not say which); expected "
                "every rank to make the same calls in the same order; the "
                "comm is broken: destroy it", what, st->rank,
                (long long)st->timeout_ms);
            ncclb_fail_locked(st, s);
            return s;
        }
        usleep(20);
    }
}

/* ------------------------------------------------------------ watchdog */

static void watch_expired(ncclb_state *st, ncclb_watch *w, int64_t waited) {
    int step = -1;
    for (int i = 0; i < w->nsteps && step < 0; i++)
        if (cudaEventQuery(w->steps[i]) == cudaErrorNotReady) step = i;
    (void)cudaGetLastError();
    char who[200];
    if (step >= 0 && w->step_from[step] >= 0 &&
        w->step_from[step] == w->step_to[step])
        snprintf(who, sizeof who, "exchange step %d with rank %d never "
                 "finished: rank %d did not take part", step + 1,
                 w->step_from[step], w->step_from[step]);
    else if (step >= 0 && w->step_from[step] >= 0)
        snprintf(who, sizeof who, "exchange step %d (receiving from rank %d, "
                 "sending to rank %d) never finished: rank %d or rank %d did "
                 "not take part", step + 1, w->step_from[step],
                 w->step_to[step], w->step_from[step], w->step_to[step]);
    else if (step >= 0)
        snprintf(who, sizeof who, "its exchange step %d never finished: a "
                 "peer did not take part (NCCL does not say which)", step + 1);
    else
        snprintf(who, sizeof who, "a peer did not take part (NCCL does not "
                 "say which), or device work before it never finished");
    cgm_status s = cgm_error(
        CGM_ERROR_TIMEOUT,
        "nccl backend: %s on rank %d did not complete within %lld ms of "
        "starting (timeout_ms, COMMGEMM_TIMEOUT_MS; waited %lld ms): %s; "
        "expected every rank to make the same calls in the same order; the "
        "NCCL communicator was aborted and the comm is broken: destroy it",
        w->what, st->rank, (long long)st->timeout_ms,
        (long long)(waited / 1000000), who);
    ncclb_fail_locked(st, s);
}

/* One round of checks (lock held): NCCL's async error and every watched
 * op's deadline. */
static void watch_poll_locked(ncclb_state *st) {
    if (!st->nccl || st->async_status != CGM_SUCCESS) return;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(st->nccl, &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress) {
        cgm_status s = cgm_error(
            nccl_async_status(async),
            "nccl backend: NCCL reports an asynchronous error on rank %d: %s "
            "(detail: %s); a peer died or the network failed; the comm is "
            "broken: destroy it", st->rank, ncclGetErrorString(async),
            ncclGetLastError(st->nccl));
        ncclb_fail_locked(st, s);
        return;
    }
    int64_t now = cgm_now_ns();
    for (int i = 0; i < NCCLB_WATCH_SLOTS; i++) {
        ncclb_watch *w = &st->watch[i];
        if (!w->busy) continue;
        if (!w->started) {
            cudaError_t q = cudaEventQuery(w->start);
            if (q == cudaErrorNotReady) continue;
            (void)cudaGetLastError();
            w->started = true;
            w->started_ns = now;
        }
        cudaError_t q = cudaEventQuery(w->done);
        if (q != cudaErrorNotReady) {
            (void)cudaGetLastError();
            w->busy = false;
            continue;
        }
        if (now - w->started_ns > st->timeout_ms * 1000000) {
            watch_expired(st, w, now - w->started_ns);
            return;
        }
    }
}

static void *watchdog_main(void *arg) {
    ncclb_state *st = arg;
    (void)cudaSetDevice(st->device);
    (void)relax_capture(); /* for the thread's lifetime */
    int64_t interval_us = st->timeout_ms * 1000 / 20;
    if (interval_us > 50000) interval_us = 50000;
    if (interval_us < 1000) interval_us = 1000;
    while (!__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
        if (pthread_mutex_trylock(&st->lock) == 0) {
            watch_poll_locked(st);
            pthread_mutex_unlock(&st->lock);
        }
        usleep((useconds_t)interval_us);
    }
    return NULL;
}

static cgm_status ncclb_async_error(cgm_comm *comm, void *state) {
    ncclb_state *st = state;
    (void)comm;
    if (!st) return CGM_SUCCESS;
    cgm_status s = CGM_SUCCESS;
    enum cudaStreamCaptureMode mode = relax_capture();
    pthread_mutex_lock(&st->lock);
    watch_poll_locked(st);
    if (st->async_status != CGM_SUCCESS)
        s = cgm_error(st->async_status, "%s", st->async_message);
    pthread_mutex_unlock(&st->lock);
    restore_capture(mode);
    return s;
}

/* ------------------------------------------------------------ lifetime */

static cgm_status ncclb_probe(const cgm_comm *comm) {
    if (comm->bootstrap_kind != CGM_BOOTSTRAP_NCCL || !comm->nccl_comm)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the nccl backend needs a comm created from an "
                         "ncclComm_t (cgm_comm_init_nccl); this comm was "
                         "created with a %s bootstrap — use the host backend "
                         "or create the comm from an NCCL communicator",
                         comm->bootstrap_kind == CGM_BOOTSTRAP_LOCAL
                             ? "LOCAL" : "non-NCCL");
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the nccl backend needs a CUDA device, found none "
                         "(cudaGetDeviceCount: %s); run on a GPU machine or "
                         "use the host backend", cudaGetErrorString(err));
    }
    return CGM_SUCCESS;
}

static void state_free(ncclb_state *st, bool drained) {
    if (st->watchdog_running) {
        __atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
        pthread_join(st->watchdog, NULL);
        st->watchdog_running = false;
    }
    if (st->nccl) {
        (void)ncclCommAbort(st->nccl);
        st->nccl = NULL;
    }
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

static cgm_status split_comm(ncclb_state *st, ncclComm_t parent) {
    cgm_status status = CGM_SUCCESS;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; /* every call returns; we bound the waits */
    config.minCTAs = 1;
    config.maxCTAs = st->max_ctas;
    config.splitShare = 0; /* aborting ours must not touch the caller's */
    config.commName = "commgemm-nccl";
    ncclResult_t r = ncclCommSplit(parent, 0, st->rank, &st->nccl, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        st->nccl = NULL;
        CGM_NCCL_TRY(r);
    }
    if (!st->nccl)
        return cgm_error(CGM_ERROR_INTERNAL, "ncclCommSplit returned no "
                         "communicator for rank %d", st->rank);
    status = ncclb_settle(st, ncclInProgress, "ncclCommSplit of the caller's "
                          "communicator");
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
    int64_t ctas = 8;
    bool from_env = false;
    CGM_TRY(cgm_param_int("COMMGEMM_NCCL_MAX_CTAS", &ctas, &from_env));
    if (ctas < 1 || ctas > 64) {
        status = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                           "COMMGEMM_NCCL_MAX_CTAS=%lld: expected 1..64; set "
                           "it in range or unset it (default 8)",
                           (long long)ctas);
        goto fail;
    }
    st->max_ctas = (int)ctas;
    CGM_INFO(CGM_SUB_NCCL, "COMMGEMM_NCCL_MAX_CTAS=%d from %s", st->max_ctas,
             from_env ? "environment" : "default");
    CGM_CUDA_TRY(cudaGetDevice(&previous));
    CGM_CUDA_TRY(cudaSetDevice(st->device));
    CGM_TRY(split_comm(st, (ncclComm_t)comm->nccl_comm));

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
    if (pthread_create(&st->watchdog, NULL, watchdog_main, st) != 0) {
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
    CGM_INFO(CGM_SUB_NCCL, "nccl backend ready: rank %d of %d on device %d, "
             "split comm with at most %d CTAs", st->rank, st->nranks,
             st->device, st->max_ctas);
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
    if (st->watchdog_running) {
        __atomic_store_n(&st->stop, 1, __ATOMIC_RELEASE);
        pthread_join(st->watchdog, NULL);
        st->watchdog_running = false;
    }
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
        (void)ncclCommAbort(st->nccl);
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
        cgm_status s = ncclb_settle(st, ncclCommFinalize(st->nccl),
                                    "ncclCommFinalize");
        if (s == CGM_SUCCESS && st->nccl) {
            (void)ncclCommDestroy(st->nccl);
            st->nccl = NULL;
        } else if (status == CGM_SUCCESS) {
            status = s;
        }
        pthread_mutex_unlock(&st->lock);
    }
    state_free(st, drained); /* aborts what is left */
    if (previous >= 0) (void)cudaSetDevice(previous);
    return status;
}

/* The entry points share one path: the call carries the op. */
static cgm_status ncclb_run(cgm_comm *comm, void *state, const cgm_call *call) {
    ncclb_state *st = state;
    int previous = -1;
    cgm_status status = CGM_SUCCESS;
    (void)comm;
    enum cudaStreamCaptureMode mode = relax_capture();
    CGM_CUDA_TRY(cudaGetDevice(&previous));
    if (previous != st->device) CGM_CUDA_TRY(cudaSetDevice(st->device));
    ncclb_op op;
    CGM_TRY(ncclb_op_begin(st, call, &op));
    switch (call->op) {
    case CGM_OP_ALL_GATHER_GEMM: status = ncclb_all_gather_gemm(&op); break;
    case CGM_OP_GEMM_REDUCE_SCATTER:
        status = ncclb_gemm_reduce_scatter(&op, false);
        break;
    case CGM_OP_GEMM_ALL_REDUCE:
        status = ncclb_gemm_reduce_scatter(&op, true);
        break;
    default: status = ncclb_bulk(&op); break;
    }
    status = ncclb_op_end(&op, status);
fail:
    if (previous >= 0 && previous != st->device) cudaSetDevice(previous);
    restore_capture(mode);
    return status;
}

const cgm_backend_vtable cgm_nccl_backend = {
    .id = CGM_BACKEND_NCCL,
    .name = "nccl",
    .probe = ncclb_probe,
    .init = ncclb_init,
    .all_gather_gemm = ncclb_run,
    .gemm_reduce_scatter = ncclb_run,
    .gemm_all_reduce = ncclb_run,
    .bulk = ncclb_run,
    .async_error = ncclb_async_error,
    .finalize = ncclb_finalize,
};
