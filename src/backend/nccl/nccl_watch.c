/* The nccl backend's bounded NCCL calls and its watchdog: the
 * blocked-call guard, settling non-blocking calls, the sticky asynchronous
 * error, and the thread that expires ops that never complete. */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/nccl/nccl_backend.h"

/* Our event and stream queries are "potentially unsafe" calls that a
 * global-mode graph capture (ours or another thread's) forbids, and a
 * forbidden call would invalidate that capture: relax this thread's mode
 * around them (as PyTorch's NCCL watchdog does). */
enum cudaStreamCaptureMode ncclb_relax_capture(void) {
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
        (void)cudaGetLastError();
        mode = cudaStreamCaptureModeRelaxed;
    }
    return mode;
}

void ncclb_restore_capture(enum cudaStreamCaptureMode mode) {
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess)
        (void)cudaGetLastError();
}

/* ------------------------------------------------------------ errors */

void ncclb_abort_comm(ncclb_state *st) {
    ncclComm_t c = __atomic_exchange_n(&st->abort_handle, (ncclComm_t)NULL,
                                       __ATOMIC_ACQ_REL);
    /* Makes NCCL's kernels return so that the streams drain. */
    if (c) (void)ncclCommAbort(c);
}

void ncclb_break_locked(ncclb_state *st, cgm_status status) {
    if (st->async_status == CGM_SUCCESS) {
        st->async_status = status;
        snprintf(st->async_message, sizeof st->async_message, "%s",
                 cgm_last_error());
    }
}

void ncclb_fail_locked(ncclb_state *st, cgm_status status) {
    ncclb_break_locked(st, status);
    if (st->nccl) {
        ncclb_abort_comm(st);
        st->nccl = NULL;
    }
}

/* The watchdog aborted the comm under a blocked call: make it the sticky
 * error (lock held). */
static void guard_apply_locked(ncclb_state *st) {
    if (!__atomic_load_n(&st->guard_fired, __ATOMIC_ACQUIRE) || !st->nccl)
        return;
    st->nccl = NULL;
    if (st->async_status == CGM_SUCCESS) {
        st->async_status = CGM_ERROR_TIMEOUT;
        snprintf(st->async_message, sizeof st->async_message, "%s",
                 st->guard_message);
    }
}

static cgm_status nccl_async_status(ncclResult_t r) {
    return r == ncclRemoteError || r == ncclSystemError
               ? CGM_ERROR_PEER_FAILED
               : CGM_ERROR_NCCL;
}

cgm_status ncclb_call_enter(ncclb_state *st, const char *what) {
    guard_apply_locked(st);
    if (!st->nccl)
        return cgm_error(st->async_status ? st->async_status
                                          : CGM_ERROR_INTERNAL,
                         "%s: the nccl backend's communicator was aborted "
                         "(%s); destroy the comm", what, st->async_message);
    __atomic_store_n(&st->call_what, what, __ATOMIC_RELAXED);
    __atomic_store_n(&st->call_since_ns, cgm_now_ns(), __ATOMIC_RELEASE);
    return CGM_SUCCESS;
}

cgm_status ncclb_settle(ncclb_state *st, ncclResult_t issued,
                        const char *what) {
    __atomic_store_n(&st->call_since_ns, 0, __ATOMIC_RELEASE);
    guard_apply_locked(st);
    if (!st->nccl)
        return cgm_error(st->async_status ? st->async_status
                                          : CGM_ERROR_INTERNAL,
                         "%s: the nccl backend's communicator was aborted "
                         "(%s); destroy the comm", what, st->async_message);
    if (issued == ncclSuccess) return CGM_SUCCESS;
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
    /* Non-blocking comm: NCCL finishes the launch on a thread of its own.
     * Spin (yielding) for the first 2 ms, which covers a normal launch
     * without the ~60 us granularity of a sleep, then back off. */
    const int64_t start = cgm_now_ns();
    const int64_t deadline = start + st->timeout_ms * 1000000;
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
        int64_t now = cgm_now_ns();
        if (now > deadline) {
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
        if (now - start < 2000000)
            sched_yield();
        else
            usleep(50);
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

/* The oldest watched op never started within timeout_ms of its call, and
 * no watched op is running: the stream's work before it (a captured
 * graph's replay, which is not watched, or the caller's own kernels) has
 * not finished. Breaks the comm without aborting the NCCL communicator:
 * ncclCommAbort waits for the work queued before the ops, which may never
 * end (a kernel of the caller's), and this thread holds the lock; destroy
 * aborts it after its bounded drain (the replay's NCCL kernels then
 * return). */
static void watch_never_started(ncclb_state *st, const ncclb_watch *w,
                                int64_t waited) {
    cgm_status s = cgm_error(
        CGM_ERROR_TIMEOUT,
        "nccl backend: %s on rank %d was issued %lld ms ago and never "
        "started: expected the stream's work before it to finish within "
        "%lld ms (timeout_ms, COMMGEMM_TIMEOUT_MS), found it still running "
        "(a captured graph's replay whose peer never came, or a kernel of "
        "the caller's that does not end); the comm is broken: destroy it "
        "(which aborts its NCCL communicator)",
        w->what, st->rank, (long long)(waited / 1000000),
        (long long)st->timeout_ms);
    ncclb_break_locked(st, s);
}

/* One round of checks (lock held): NCCL's async error and every watched
 * op's deadline. */
static void watch_poll_locked(ncclb_state *st) {
    guard_apply_locked(st);
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
    const ncclb_watch *oldest_waiting = NULL; /* issued, not started */
    bool running = false;
    for (int i = 0; i < NCCLB_WATCH_SLOTS; i++) {
        ncclb_watch *w = &st->watch[i];
        if (!w->busy) continue;
        if (!w->started) {
            cudaError_t q = cudaEventQuery(w->start);
            if (q == cudaErrorNotReady) {
                if (!oldest_waiting || w->issued_ns < oldest_waiting->issued_ns)
                    oldest_waiting = w;
                continue;
            }
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
        running = true;
        if (now - w->started_ns > st->timeout_ms * 1000000) {
            watch_expired(st, w, now - w->started_ns);
            return;
        }
    }
    /* An op waiting behind a running one of ours is that one's to expire;
     * with none running, what holds the oldest is not watched. */
    if (!running && oldest_waiting &&
        now - oldest_waiting->issued_ns > st->timeout_ms * 1000000)
        watch_never_started(st, oldest_waiting, now - oldest_waiting->issued_ns);
}

/* Lock-free: an NCCL call of the op thread (which holds the lock) that
 * has blocked the host longer than the timeout (a blocking comm waiting
 * for a peer that never comes, e.g. at a first connection) is aborted from
 * here; ncclCommAbort makes the blocked call return with an error. */
static void guard_check(ncclb_state *st) {
    int64_t since = __atomic_load_n(&st->call_since_ns, __ATOMIC_ACQUIRE);
    if (since == 0 || cgm_now_ns() - since <= st->timeout_ms * 1000000)
        return;
    ncclComm_t c = __atomic_exchange_n(&st->abort_handle, (ncclComm_t)NULL,
                                       __ATOMIC_ACQ_REL);
    if (!c) return;
    const char *what = __atomic_load_n(&st->call_what, __ATOMIC_RELAXED);
    snprintf(st->guard_message, sizeof st->guard_message,
             "nccl backend: %s on rank %d blocked the host for more than "
             "%lld ms (timeout_ms, COMMGEMM_TIMEOUT_MS) waiting for its "
             "peers: a peer did not take part (NCCL does not say which); "
             "expected every rank to make the same calls in the same "
             "order; the NCCL communicator was aborted and the comm is "
             "broken: destroy it", what ? what : "an NCCL call", st->rank,
             (long long)st->timeout_ms);
    __atomic_store_n(&st->guard_fired, 1, __ATOMIC_RELEASE);
    (void)ncclCommAbort(c);
}

void *ncclb_watchdog_main(void *arg) {
    ncclb_state *st = arg;
    (void)cudaSetDevice(st->device);
    (void)ncclb_relax_capture(); /* for the thread's lifetime */
    int64_t interval_us = st->timeout_ms * 1000 / 20;
    if (interval_us > 50000) interval_us = 50000;
    if (interval_us < 1000) interval_us = 1000;
    while (!__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
        if (st->blocking) guard_check(st);
        if (!__atomic_load_n(&st->finalizing, __ATOMIC_ACQUIRE) &&
            pthread_mutex_trylock(&st->lock) == 0) {
            watch_poll_locked(st);
            pthread_mutex_unlock(&st->lock);
        }
        usleep((useconds_t)interval_us);
    }
    return NULL;
}

cgm_status ncclb_async_error(cgm_comm *comm, void *state) {
    ncclb_state *st = state;
    (void)comm;
    if (!st) return CGM_SUCCESS;
    cgm_status s = CGM_SUCCESS;
    enum cudaStreamCaptureMode mode = ncclb_relax_capture();
    pthread_mutex_lock(&st->lock);
    watch_poll_locked(st);
    if (st->async_status != CGM_SUCCESS)
        s = cgm_error(st->async_status, "%s", st->async_message);
    pthread_mutex_unlock(&st->lock);
    ncclb_restore_capture(mode);
    return s;
}

