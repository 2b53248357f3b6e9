/* The p2p backend's host exchanges during ops (the agreement check on the
 * first call of a signature, the autotuner's), through its own peer-mapped
 * workspace: no op issues a collective on the caller's NCCL communicator,
 * and an exchange that a peer never joins leaves nothing queued anywhere.
 *
 * Each rank owns two banks of nranks records in its workspace (bank =
 * exchange number % 2). An exchange pushes this rank's record, by copy
 * engine, into slot [bank][rank] of every peer, then reads its own bank
 * back until every peer's record of this exchange number is there and
 * whole (its checksum matches: a read may see a push half written). Two
 * banks suffice: a rank starts exchange s + 2 only after every peer's
 * record of s + 1, which each peer pushes only after it read all of s. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/p2p/p2p_exchange.h"
#include "backend/p2p/p2p_signal.h"

static uint64_t record_sum(uint64_t seq, const unsigned char *payload,
                           size_t bytes) {
    uint64_t h = 1469598103934665603ull ^ seq;
    for (size_t i = 0; i < bytes; i++) {
        h ^= payload[i];
        h *= 1099511628211ull;
    }
    return h;
}

size_t p2p_exchange_bytes(int nranks) {
    return 2 * (size_t)nranks * sizeof(p2p_xchg_record);
}

static p2p_xchg_record *bank(void *ws_base, const p2p_state *st, int b) {
    return (p2p_xchg_record *)((char *)ws_base + st->xchg_offset) +
           (size_t)b * (size_t)st->nranks;
}

/* Waits for the exchange queue, at most until `deadline`: CGM_SUCCESS,
 * CGM_ERROR_TIMEOUT with *expired set, or the queue's CUDA error. */
static cgm_status drain(p2p_state *st, int64_t deadline, bool *expired) {
    int64_t left_ms = (deadline - cgm_now_ns()) / 1000000;
    return cgm_gpu_wait_done(NULL, st->xchg_queue, left_ms > 0 ? left_ms : 0,
                             NULL, NULL, expired);
}

cgm_status p2p_exchange_host(p2p_state *st, const void *send, void *recv,
                             size_t bytes, const char *what) {
    const int P = st->nranks, me = st->rank;
    if (bytes > P2P_XCHG_PAYLOAD)
        return cgm_error(CGM_ERROR_INTERNAL, "p2p backend: %s exchanges "
                         "%zu bytes per rank, more than its workspace "
                         "slot's %d", what, bytes, P2P_XCHG_PAYLOAD);
    memcpy((char *)recv + (size_t)me * bytes, send, bytes);
    if (P == 1) return CGM_SUCCESS;
    const int64_t start = cgm_now_ns();
    const int64_t deadline = start + st->timeout_ms * 1000000;
    /* The pinned record is free once the previous exchange's pushes are
     * done: it drained them unless it ended early on an error. */
    bool expired = false;
    cgm_status s = drain(st, deadline, &expired);
    if (expired)
        return cgm_error(CGM_ERROR_TIMEOUT, "p2p backend: %s: rank %d's "
                         "previous exchange's pushes did not complete within "
                         "timeout_ms = %lld; the comm is broken: destroy it",
                         what, me, (long long)st->timeout_ms);
    if (s != CGM_SUCCESS) return s;
    const uint64_t seq = ++st->xchg_seq;
    const int b = (int)(seq & 1);
    p2p_xchg_record *out = st->xchg_out;
    memset(out, 0, sizeof *out);
    out->seq = seq;
    memcpy(out->payload, send, bytes);
    out->sum = record_sum(seq, out->payload, bytes);
    const size_t push = offsetof(p2p_xchg_record, payload) + bytes;
    for (int d = 0; d < P; d++) {
        if (d == me) continue;
        cudaError_t e = cudaMemcpyAsync(bank(st->ws.peer[d], st, b) + me, out,
                                        push, cudaMemcpyHostToDevice,
                                        st->xchg_queue);
        if (e != cudaSuccess)
            return cgm_error(CGM_ERROR_CUDA, "p2p backend: %s: pushing rank "
                             "%d's record to rank %d failed: %s", what, me, d,
                             cudaGetErrorString(e));
    }
    bool *got = st->xchg_got;
    for (int r = 0; r < P; r++) got[r] = r == me;
    int missing = P - 1;
    for (int round = 0;; round++) {
        cudaError_t e = cudaMemcpyAsync(st->xchg_in, bank(st->ws.local, st, b),
                                        (size_t)P * sizeof *st->xchg_in,
                                        cudaMemcpyDeviceToHost, st->xchg_queue);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(st->xchg_notice, &st->dev->notice,
                                sizeof *st->xchg_notice,
                                cudaMemcpyDeviceToHost, st->xchg_queue);
        if (e != cudaSuccess)
            return cgm_error(CGM_ERROR_CUDA, "p2p backend: %s: reading the "
                             "peers' records failed on rank %d: %s", what, me,
                             cudaGetErrorString(e));
        s = drain(st, deadline, &expired);
        if (s != CGM_SUCCESS && !expired)
            return cgm_error_context(s, "p2p backend: %s: reading the peers' "
                                     "records on rank %d", what, me);
        if (s == CGM_SUCCESS) {
            for (int r = 0; r < P; r++) {
                const p2p_xchg_record *in = &st->xchg_in[r];
                if (got[r] || in->seq != seq ||
                    in->sum != record_sum(seq, in->payload, bytes))
                    continue;
                memcpy((char *)recv + (size_t)r * bytes, in->payload, bytes);
                got[r] = true;
                missing--;
            }
            if (missing == 0) break;
            if (*st->xchg_notice)
                return p2p_notice_error(st, *st->xchg_notice);
        }
        if (cgm_now_ns() > deadline) {
            char who[160] = "";
            size_t n = 0;
            int first = -1;
            for (int r = 0; r < P && n + 16 < sizeof who; r++) {
                if (got[r]) continue;
                if (first < 0) first = r;
                n += (size_t)snprintf(who + n, sizeof who - n, "%s%d",
                                      n ? ", " : "", r);
            }
            const long long waited_ms = (cgm_now_ns() - start) / 1000000;
            (void)drain(st, cgm_now_ns() + 2000000000ll, &expired); /* the pushes */
            p2p_tell_peers(st, first);
            return cgm_error(
                CGM_ERROR_TIMEOUT,
                "p2p backend: rank %d waited %lld ms (timeout_ms, "
                "COMMGEMM_TIMEOUT_MS) in the exchange of %s for rank(s) %s: "
                "expected every rank to make the same calls in the same "
                "order, found rank %d never came (it made another call, or "
                "none, or its call was refused there); the comm is broken: "
                "destroy it (and check rank %d)", me, waited_ms, what, who,
                first, first);
        }
        usleep(round < 100 ? 20 : 200);
    }
    /* The pinned record is reused by the next exchange: the pushes must be
     * done (they are copies, not waits: bounded all the same). */
    s = drain(st, deadline + 2000000000ll, &expired);
    if (expired)
        return cgm_error(CGM_ERROR_TIMEOUT, "p2p backend: %s: rank %d's "
                         "pushes of its record did not complete within "
                         "timeout_ms = %lld + 2 s; the comm is broken: "
                         "destroy it", what, me, (long long)st->timeout_ms);
    return s;
}
