/* The p2p backend's bottom layer: flags, epochs, signals, waits, notices
 * and what a failure during an op does (p2p_signal.h). */
#include <unistd.h>

#include "backend/p2p/p2p_signal.h"

/* ---------------------------------------------------- signals and waits */

cgm_status p2p_signal(const p2p_state *st, unsigned long long *cell,
                      cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_dev_signal(st->dev, cell, stream));
fail:
    return status;
}

cgm_status p2p_signal_by_copy(const p2p_state *st, unsigned long long *cell,
                              cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemcpyAsync(cell, &st->dev->epoch, sizeof *cell,
                                 cudaMemcpyDeviceToDevice, stream));
fail:
    return status;
}

bool p2p_signal_copy_after(size_t copied_bytes) {
    return copied_bytes > 0 && copied_bytes >= P2P_SIGNAL_COPY_MIN_BYTES;
}

cgm_status p2p_wait(const p2p_state *st, int sender, plan_flag flag,
                    cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_dev_wait(st->dev, p2p_flag_from(st, sender, flag),
                              st->abort_dev, st->rank, sender,
                              (int)flag.kind, flag.chunk, p2p_timeout_ns(st),
                              stream));
fail:
    return status;
}

/* ------------------------------------------------------------ the op */

cgm_status p2p_fork(p2p_state *st, cudaStream_t caller, int nqueues) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_dev_epoch_bump(st->dev, caller));
    CGM_CUDA_TRY(cudaEventRecord(st->fork, caller));
    for (int q = 0; q < nqueues; q++)
        CGM_CUDA_TRY(cudaStreamWaitEvent(st->queues[q], st->fork, 0));
fail:
    return status;
}

cgm_status p2p_join(p2p_state *st, cudaStream_t caller, int nqueues) {
    cgm_status status = CGM_SUCCESS;
    for (int q = 0; q < nqueues; q++) {
        CGM_CUDA_TRY(cudaEventRecord(st->join[q], st->queues[q]));
        CGM_CUDA_TRY(cudaStreamWaitEvent(caller, st->join[q], 0));
    }
fail:
    return status;
}

cgm_status p2p_abandon_op(p2p_state *st, cudaStream_t caller, int nqueues,
                          cgm_status status) {
    for (int q = 0; q < nqueues; q++)
        if (cudaEventRecord(st->join[q], st->queues[q]) == cudaSuccess)
            (void)cudaStreamWaitEvent(caller, st->join[q], 0);
    cgm_error_context(status, "p2p: rank %d failed after enqueueing part "
                      "of the op, so the ranks are out of step and the comm "
                      "is broken (destroy it and create a new one)", st->rank);
    cgm_comm_mark_broken(st->comm, status);
    /* A capture ran nothing on the peers: there is nothing to tell. */
    if (!cgm_stream_capturing(caller)) p2p_tell_peers(st, st->rank);
    return status;
}

/* ---------------------------------------------------- notices, errors */

static const char *flag_kind_name(int kind) {
    switch (kind) {
    case PLAN_FLAG_READY: return "READY";
    case PLAN_FLAG_DONE: return "DONE";
    case PLAN_FLAG_FREE: return "FREE";
    default: return "?";
    }
}

void p2p_tell_of_own_expiry(p2p_state *st) {
    const cgm_dev_abort_record *r = st->abort_host;
    if (r && __atomic_load_n(&r->set, __ATOMIC_ACQUIRE) &&
        r->flag_kind != CGM_DEV_NOTICE_KIND)
        p2p_tell_peers(st, r->peer);
}

cgm_status p2p_notice_error(const p2p_state *st, unsigned int notice) {
    const int me = st->rank, teller = cgm_dev_notice_teller(notice),
              culprit = cgm_dev_notice_culprit(notice);
    if (teller == culprit)
        return cgm_error(CGM_ERROR_PEER_FAILED,
                         "p2p backend: rank %d stopped waiting for its "
                         "op at once: rank %d failed during an op (a "
                         "failure after its streams forked, or its own "
                         "work not done within its timeout) and told its "
                         "peers, so the ranks are out of step; the comm "
                         "is broken: "
                         "destroy it; rank %d's own error says what "
                         "failed",
                         me, culprit, culprit);
    if (culprit == me)
        return cgm_error(CGM_ERROR_TIMEOUT,
                         "p2p backend: rank %d stopped waiting for its "
                         "op at once: rank %d told it that its wait for "
                         "this rank expired (expected this rank's op to "
                         "signal within rank %d's timeout_ms, found it "
                         "did not: it was waiting for another rank, or "
                         "its GPU was busy); the comm is broken: destroy "
                         "it, and look for the rank the others name",
                         me, teller, teller);
    return cgm_error(CGM_ERROR_TIMEOUT,
                     "p2p backend: rank %d stopped waiting for its op "
                     "at once: rank %d told it that its own wait for "
                     "rank %d expired (expected every rank to run the "
                     "same ops in the same order within its timeout_ms, "
                     "found rank %d never came); the comm is broken: "
                     "destroy it (and check rank %d)",
                     me, teller, culprit, culprit, culprit);
}

cgm_status cgm_p2p_async_error(cgm_comm *comm, void *state) {
    p2p_state *st = state;
    if (!st || !st->abort_host) return CGM_SUCCESS;
    if (__atomic_load_n(&st->abort_host->set, __ATOMIC_ACQUIRE) == 0)
        return CGM_SUCCESS;
    const cgm_dev_abort_record *r = st->abort_host;
    /* A notice: the record holds the teller as its chunk, the culprit as
     * its peer. */
    if (r->flag_kind == CGM_DEV_NOTICE_KIND)
        return p2p_notice_error(st, cgm_dev_notice(r->chunk, r->peer));
    p2p_tell_of_own_expiry(st);
    if (r->peer == r->waiting_rank)
        /* A flag this rank raises itself (the fused AG's own READY
         * cells): its own work did not finish. */
        return cgm_error(CGM_ERROR_TIMEOUT,
                         "p2p backend: rank %d waited %.1f ms for its own %s "
                         "flag of chunk %d (op epoch %llu, flag held %llu) "
                         "and gave up: expected this rank's GEMM or copy "
                         "before it to finish within timeout_ms = %lld "
                         "(COMMGEMM_TIMEOUT_MS); found it still running (a "
                         "GPU shared with other work, or a timeout too short "
                         "for the shape); the comm is broken: destroy it, "
                         "and raise COMMGEMM_TIMEOUT_MS if the GPU is busy",
                         r->waiting_rank, (double)r->waited_ns / 1e6,
                         flag_kind_name(r->flag_kind), r->chunk,
                         (unsigned long long)r->epoch,
                         (unsigned long long)r->flag_value,
                         (long long)(comm ? comm->config.timeout_ms : 0));
    return cgm_error(CGM_ERROR_TIMEOUT,
                     "p2p backend: rank %d waited %.1f ms for rank %d's %s "
                     "flag of chunk %d (op epoch %llu, flag held %llu) and "
                     "gave up: expected every rank to run the same ops in "
                     "the same order within timeout_ms = %lld "
                     "(COMMGEMM_TIMEOUT_MS), found rank %d never came; the "
                     "comm is broken: destroy it (and check rank %d)",
                     r->waiting_rank, (double)r->waited_ns / 1e6, r->peer,
                     flag_kind_name(r->flag_kind), r->chunk,
                     (unsigned long long)r->epoch,
                     (unsigned long long)r->flag_value,
                     (long long)(comm ? comm->config.timeout_ms : 0),
                     r->peer, r->peer);
}

void p2p_tell_peers(p2p_state *st, int culprit) {
    if (st->told || st->nranks < 2 || !st->notice_queue ||
        st->nranks > CGM_DEV_NOTICE_MAX_RANKS)
        return;
    st->told = true;
    int previous = -1;
    bool moved = cudaGetDevice(&previous) == cudaSuccess &&
                 previous != st->device &&
                 cudaSetDevice(st->device) == cudaSuccess;
    *st->notice_pinned = cgm_dev_notice(st->rank, culprit);
    cudaError_t e = cudaMemcpyAsync(&st->dev->notice_out, st->notice_pinned,
                                    sizeof *st->notice_pinned,
                                    cudaMemcpyHostToDevice, st->notice_queue);
    int told = 0;
    for (int d = 0; d < st->nranks && e == cudaSuccess; d++) {
        if (d == st->rank) continue;
        cgm_dev_state *peer =
            (cgm_dev_state *)((char *)st->ws.peer[d] + st->state_offset);
        e = cudaMemcpyAsync(&peer->notice, &st->dev->notice_out,
                            sizeof peer->notice, cudaMemcpyDeviceToDevice,
                            st->notice_queue);
        told += e == cudaSuccess;
    }
    /* Bounded: copy engines do not wait for the queues' kernels. */
    int64_t deadline = cgm_now_ns() + 2000000000ll;
    cudaError_t q = cudaErrorNotReady;
    while (e == cudaSuccess && (q = cudaStreamQuery(st->notice_queue)) ==
                                   cudaErrorNotReady &&
           cgm_now_ns() < deadline)
        usleep(50);
    if (e != cudaSuccess || q != cudaSuccess) {
        (void)cudaGetLastError();
        CGM_WARN(CGM_SUB_P2P, "p2p: rank %d could not tell its peers that "
                 "its comm broke (%s); they find out by their timeout",
                 st->rank, cudaGetErrorString(e != cudaSuccess ? e : q));
    } else {
        CGM_INFO(CGM_SUB_P2P, "p2p: rank %d told %d peer(s) that its comm "
                 "broke (culprit rank %d)", st->rank, told, culprit);
    }
    if (moved) cudaSetDevice(previous);
}

