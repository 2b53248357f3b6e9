/* Machinery shared by the nccl backend's ops: workspaces, limits,
 * cross-rank agreement, fork/join of the internal streams, events, the
 * watch slots and GEMM launches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/nccl/nccl_backend.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

size_t ncclb_buffer_need(const ncclb_state *st, ncclb_buffer which) {
    const cgm_resolved_config *c = &st->comm->config;
    int64_t width = max64(c->max_k, c->max_n);
    switch (which) {
    case NCCLB_BUF_GATHER: return (size_t)c->max_m * (size_t)width * 4;
    case NCCLB_BUF_PARTIAL: return (size_t)c->max_m * (size_t)c->max_n * 4;
    case NCCLB_BUF_RECV:
        return (size_t)(st->nranks - 1) *
               (size_t)cgm_ceil_div(c->max_m, st->nranks) * (size_t)width * 4;
    case NCCLB_BUF_EPI:
        return (size_t)ncclb_epi_max_slots(st) * (size_t)ncclb_epi_stride(st) *
               4;
    default: return 0;
    }
}

cgm_status ncclb_ensure_buffer(ncclb_state *st, ncclb_buffer which,
                               bool capturing) {
    static const char *names[] = {"gather", "partial", "recv",
                                  "bias gradient"};
    cgm_status status = CGM_SUCCESS;
    if (st->buf[which]) return CGM_SUCCESS;
    size_t bytes = ncclb_buffer_need(st, which);
    if (bytes == 0) return CGM_SUCCESS;
    if (capturing)
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "nccl backend: the %s workspace is allocated at the "
                         "first eager call of an op that needs it, found the "
                         "first such call inside CUDA graph capture; make "
                         "one eager call with the same shapes before "
                         "capturing", names[which]);
    CGM_CUDA_TRY(cudaMalloc(&st->buf[which], bytes));
    st->buf_bytes[which] = bytes;
    CGM_INFO(CGM_SUB_NCCL, "nccl backend: %s workspace %zu MiB (from "
             "COMMGEMM_MAX_M/N/K)", names[which], bytes >> 20);
fail:
    return status;
}

static cgm_status limit(const char *fn, const char *what, int64_t value,
                        const char *env, int64_t max) {
    if (value <= max) return CGM_SUCCESS;
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "%s (nccl backend): %s = %lld exceeds %s = %lld, the "
                     "largest size its workspaces were made for; create the "
                     "comm with a larger %s (or config field max_%c)",
                     fn, what, (long long)value, env, (long long)max, env,
                     env[strlen(env) - 1] + 32);
}

/* After the agreement exchange (ncclb_op_begin). The core leaves an m
 * above max_m to this check (validate.c, max_m_after_agreement): every
 * op's m and a bulk call's collective rows are checked here. */
cgm_status ncclb_check_limits(const ncclb_state *st, const cgm_call *c) {
    static const char *fns[] = {"cgm_all_gather_gemm",
                                "cgm_gemm_reduce_scatter",
                                "cgm_gemm_all_reduce", "cgm_bulk_overlap"};
    const cgm_resolved_config *cfg = &st->comm->config;
    const char *fn = fns[c->op];
    cgm_status s;
    if (c->op == CGM_OP_BULK) {
        if (!c->has_collective) return CGM_SUCCESS;
        if ((s = limit(fn, "the collective's rows", c->coll_m,
                       "COMMGEMM_MAX_M", cfg->max_m)))
            return s;
        /* Before its GEMM is enqueued: refused, the call does nothing. */
        if (st->nranks > CGM_DEV_MAX_SOURCES &&
            c->collective == CGM_COLLECTIVE_REDUCE_SCATTER)
            return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                             "%s (nccl backend): reduce-scatter over %d "
                             "ranks, but its reduction sums at most %d "
                             "sources; use fewer ranks", fn, st->nranks,
                             CGM_DEV_MAX_SOURCES);
        return limit(fn, "the collective's columns", c->coll_cols,
                     cfg->max_n >= cfg->max_k ? "COMMGEMM_MAX_N"
                                              : "COMMGEMM_MAX_K",
                     max64(cfg->max_n, cfg->max_k));
    }
    if ((s = limit(fn, "m", c->m, "COMMGEMM_MAX_M", cfg->max_m))) return s;
    if (c->op == CGM_OP_ALL_GATHER_GEMM)
        return limit(fn, "k", c->k, "COMMGEMM_MAX_K", cfg->max_k);
    if (st->nranks > CGM_DEV_MAX_SOURCES)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "%s (nccl backend): %d ranks, but its reduction "
                         "sums at most %d sources; use fewer ranks per "
                         "tensor-parallel group", fn, st->nranks,
                         CGM_DEV_MAX_SOURCES);
    return limit(fn, "n", c->n, "COMMGEMM_MAX_N", cfg->max_n);
}

/* First call of each signature: all ranks exchange and compare it. */
static cgm_status check_agreement(ncclb_state *st, const cgm_call *call,
                                  bool capturing) {
    if (!st->comm->config.check_agreement || st->nranks == 1)
        return CGM_SUCCESS;
    int64_t sig[CGM_SIGNATURE_WORDS];
    cgm_call_signature(call, sig);
    for (int i = 0; i < st->nchecked; i++)
        if (!memcmp(st->checked[i], sig, sizeof sig)) return CGM_SUCCESS;
    if (capturing)
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "%s (nccl backend): the first call of this shape "
                         "and options is inside CUDA graph capture, where "
                         "ranks cannot check that they agree; make one eager "
                         "call with the same arguments first (or set "
                         "COMMGEMM_CHECK_AGREEMENT=0)",
                         cgm_op_name(call->op));
    int64_t *all = malloc(sizeof sig * (size_t)st->nranks);
    if (!all) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "agreement buffer");
    cgm_status s = cgm_nccl_allgather_host(st->comm->nccl_comm, st->nranks,
                                           sig, all, sizeof sig,
                                           st->timeout_ms);
    if (s == CGM_SUCCESS) s = cgm_signature_compare(st->comm, all);
    free(all);
    if (s != CGM_SUCCESS) return s;
    memcpy(st->checked[st->next_checked], sig, sizeof sig);
    st->next_checked = (st->next_checked + 1) % NCCLB_SIGNATURE_CACHE;
    if (st->nchecked < NCCLB_SIGNATURE_CACHE) st->nchecked++;
    return CGM_SUCCESS;
}

static cgm_status needed_buffers(ncclb_state *st, const cgm_call *c,
                                 bool capturing) {
    cgm_status status = CGM_SUCCESS;
    if (ncclb_epi_gemm_grad(c)) {
        int64_t len = c->epilogue == CGM_EPILOGUE_BGRAD ? c->m : c->n;
        if (len > ncclb_epi_stride(st))
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "nccl backend: a bias gradient of %lld values, "
                             "more than the comm's max_m and max_n (%lld); "
                             "create the comm with larger maxima",
                             (long long)len, (long long)ncclb_epi_stride(st));
        CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_EPI, capturing));
    }
    if (st->nranks == 1) return CGM_SUCCESS;
    switch (c->op) {
    case CGM_OP_ALL_GATHER_GEMM:
        CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_GATHER, capturing));
        break;
    case CGM_OP_GEMM_ALL_REDUCE:
        CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_GATHER, capturing));
        /* fall through */
    case CGM_OP_GEMM_REDUCE_SCATTER:
        CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_PARTIAL, capturing));
        CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_RECV, capturing));
        break;
    default:
        if (!c->has_collective) break;
        CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_GATHER, capturing));
        if (c->collective == CGM_COLLECTIVE_REDUCE_SCATTER)
            CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_RECV, capturing));
        break;
    }
fail:
    return status;
}

/* A free watch slot, or -1 (lock held). Finished slots are freed by the
 * watchdog; only when none is free does this query the done events (at
 * most NCCLB_WATCH_SLOTS queries, not on every op). */
static int watch_slot(ncclb_state *st) {
    for (int i = 0; i < NCCLB_WATCH_SLOTS; i++)
        if (!st->watch[i].busy) return i;
    int free_slot = -1;
    for (int i = 0; i < NCCLB_WATCH_SLOTS; i++) {
        ncclb_watch *w = &st->watch[i];
        if (w->busy && cudaEventQuery(w->done) != cudaErrorNotReady) {
            (void)cudaGetLastError();
            w->busy = false;
        }
        if (!w->busy && free_slot < 0) free_slot = i;
    }
    return free_slot;
}

/* Every watch slot stayed busy for timeout_ms (lock held): names the
 * oldest op in flight and breaks the comm (this call is not enqueued, so
 * this rank is one op behind its peers). The NCCL communicator is not
 * aborted here: ncclCommAbort waits for the work queued on the stream
 * before the ops (measured: as long as the kernel that held it), which
 * would block this call; destroy aborts it after its bounded drain. */
static cgm_status in_flight_expired(ncclb_state *st, const cgm_call *call,
                                    int64_t waiting_since) {
    const ncclb_watch *oldest = &st->watch[0];
    for (int i = 1; i < NCCLB_WATCH_SLOTS; i++)
        if (st->watch[i].issued_ns < oldest->issued_ns) oldest = &st->watch[i];
    const int64_t now = cgm_now_ns();
    char state[160];
    if (oldest->started)
        snprintf(state, sizeof state, "started %lld ms ago",
                 (long long)((now - oldest->started_ns) / 1000000));
    else
        snprintf(state, sizeof state, "issued %lld ms ago and never "
                 "started: the stream's work before it (a captured graph's "
                 "replay, or the caller's own kernels) has not finished",
                 (long long)((now - oldest->issued_ns) / 1000000));
    cgm_status s = cgm_error(
        CGM_ERROR_TIMEOUT,
        "nccl backend: %s on rank %d waited %lld ms (timeout_ms, "
        "COMMGEMM_TIMEOUT_MS) for one of its %d ops in flight to finish and "
        "none did: expected the oldest, %s, to finish within the timeout, "
        "found it %s; this call was not enqueued, so this rank is out of "
        "step with its peers: the comm is broken: destroy it (which aborts "
        "its NCCL communicator)",
        cgm_op_name(call->op), st->rank,
        (long long)((now - waiting_since) / 1000000), NCCLB_WATCH_SLOTS,
        oldest->what, state);
    ncclb_break_locked(st, s);
    return s;
}

cgm_status ncclb_op_begin(ncclb_state *st, const cgm_call *call,
                          ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    memset(op, 0, sizeof *op);
    op->st = st;
    op->call = call;
    op->caller = (cudaStream_t)call->stream;
    op->watch = -1;
    op->epi_slots = -1;
    op->capturing = cgm_stream_capturing(op->caller);
    /* Agreement first: a rank whose call is beyond its limits while its
     * peers' are not (another shape) makes every rank fail the exchange
     * with CGM_ERROR_MISMATCH, instead of leaving the peers in it. */
    CGM_TRY(check_agreement(st, call, op->capturing));
    CGM_TRY(ncclb_check_limits(st, call));
    CGM_TRY(needed_buffers(st, call, op->capturing));
    CGM_TRY(ncclb_fp8_ensure(st, call, op->capturing));
    pthread_mutex_lock(&st->lock);
    if (st->async_status != CGM_SUCCESS || !st->nccl) {
        status = cgm_error(st->async_status ? st->async_status
                                            : CGM_ERROR_INTERNAL,
                           "%s", st->async_message);
        pthread_mutex_unlock(&st->lock);
        return status;
    }
    if (!op->capturing) {
        /* Back-pressure: at most NCCLB_WATCH_SLOTS ops in flight, so that
         * every op is watched. The watchdog expires started ops that never
         * finish; ops that never start (queued behind work that never
         * ends: a captured graph's replay, which is not watched, or the
         * caller's own kernels) are bounded here. */
        int slot;
        const int64_t waiting_since = cgm_now_ns();
        while ((slot = watch_slot(st)) < 0 && st->async_status == CGM_SUCCESS) {
            if (cgm_now_ns() - waiting_since > st->timeout_ms * 1000000) {
                status = in_flight_expired(st, call, waiting_since);
                pthread_mutex_unlock(&st->lock);
                return status;
            }
            pthread_mutex_unlock(&st->lock);
            usleep(50);
            pthread_mutex_lock(&st->lock);
        }
        if (st->async_status != CGM_SUCCESS) {
            status = cgm_error(st->async_status, "%s", st->async_message);
            pthread_mutex_unlock(&st->lock);
            return status;
        }
        ncclb_watch *w = &st->watch[slot];
        w->started = false;
        w->nsteps = 0;
        w->issued_ns = cgm_now_ns();
        snprintf(w->what, sizeof w->what, "%s #%llu (m=%lld)",
                 cgm_op_name(call->op),
                 (unsigned long long)st->comm->calls,
                 (long long)(call->op == CGM_OP_BULK ? call->coll_m : call->m));
        CGM_CUDA_TRY(cudaEventRecord(w->start, op->caller));
        op->watch = slot;
    }
    /* Fork the internal streams from the caller's. Outside capture they
     * also wait for the previous op's internal work, so that workspaces are
     * never reused early even when the caller switches streams. */
    CGM_CUDA_TRY(cudaEventRecord(st->fork, op->caller));
    cudaStream_t streams[1 + NCCLB_COMPUTE_STREAMS];
    cudaEvent_t joins[1 + NCCLB_COMPUTE_STREAMS];
    streams[0] = st->comm_stream;
    joins[0] = st->join_comm;
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS; i++) {
        streams[1 + i] = st->compute[i];
        joins[1 + i] = st->join_compute[i];
    }
    for (int i = 0; i <= NCCLB_COMPUTE_STREAMS; i++) {
        CGM_CUDA_TRY(cudaStreamWaitEvent(streams[i], st->fork, 0));
        if (op->capturing || !st->joins_eager) continue;
        for (int j = 0; j <= NCCLB_COMPUTE_STREAMS; j++)
            if (j != i) CGM_CUDA_TRY(cudaStreamWaitEvent(streams[i], joins[j], 0));
    }
    return CGM_SUCCESS;
fail:
    op->watch = -1;
    pthread_mutex_unlock(&st->lock);
    return status;
}

cgm_status ncclb_op_end(ncclb_op *op, cgm_status status) {
    ncclb_state *st = op->st;
    /* Join even after a failure: a capture must not end unjoined. */
    cudaError_t e = cudaEventRecord(st->join_comm, st->comm_stream);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(op->caller, st->join_comm, 0);
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS && e == cudaSuccess; i++) {
        e = cudaEventRecord(st->join_compute[i], st->compute[i]);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(op->caller, st->join_compute[i], 0);
    }
    /* Joins recorded inside a capture are graph nodes, not events the
     * next eager op may wait for. */
    st->joins_eager = !op->capturing && e == cudaSuccess;
    if (e == cudaSuccess && op->watch >= 0) {
        ncclb_watch *w = &st->watch[op->watch];
        e = cudaEventRecord(w->done, op->caller);
        if (e == cudaSuccess) w->busy = true;
    }
    if (e != cudaSuccess && status == CGM_SUCCESS)
        status = cgm_cuda_fail(e, "joining the nccl backend's streams",
                               __FILE__, __LINE__);
    pthread_mutex_unlock(&st->lock);
    return status;
}

cgm_status ncclb_event(ncclb_op *op, cudaEvent_t *out) {
    if (op->next_event >= op->st->nevents)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "nccl backend: needs more than %d events for one "
                         "op (splits %d, %d ranks)", op->st->nevents,
                         op->call->splits, op->st->nranks);
    *out = op->st->events[op->next_event++];
    return CGM_SUCCESS;
}

cudaStream_t ncclb_next_compute(ncclb_op *op) {
    cudaStream_t s = op->st->compute[op->next_compute];
    op->next_compute = (op->next_compute + 1) % NCCLB_COMPUTE_STREAMS;
    return s;
}

void ncclb_watch_group(ncclb_op *op) {
    const int P = op->st->nranks;
    int peer = P == 2 ? 1 - op->st->rank : -1;
    ncclb_watch_step(op, peer, peer);
}

void ncclb_watch_step(ncclb_op *op, int from, int to) {
    if (op->watch < 0) return;
    ncclb_watch *w = &op->st->watch[op->watch];
    if (w->nsteps >= NCCLB_WATCH_STEPS) return;
    if (cudaEventRecord(w->steps[w->nsteps], op->st->comm_stream) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    w->step_from[w->nsteps] = from;
    w->step_to[w->nsteps] = to;
    w->nsteps++;
}

cgm_status ncclb_gemm(ncclb_op *op, const cgm_lt_gemm_args *args,
                      cudaStream_t stream) {
    ncclb_state *st = op->st;
    void *ws = st->lt_workspace[NCCLB_COMPUTE_STREAMS];
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS; i++)
        if (stream == st->compute[i]) ws = st->lt_workspace[i];
    /* The first sight of a shape may time its algorithms (COMMGEMM_LT_SEARCH)
     * on a private stream after this stream's earlier steps (this op's
     * collectives before the GEMM are already enqueued on every rank that
     * got this far, so they complete). */
    if (!op->capturing) {
        cgm_status status = cgm_lt_prepare(st->lt, args, NCCLB_LT_WORKSPACE,
                                           stream, st->timeout_ms);
        if (status != CGM_SUCCESS) return status;
    }
    return cgm_lt_gemm(st->lt, args, ws, NCCLB_LT_WORKSPACE, stream);
}

int ncclb_pieces(int64_t shard_rows, int splits) {
    if (shard_rows <= 0) return 0;
    return shard_rows < splits ? (int)shard_rows : splits;
}

/* Pieces per shard: the hint, else enough for ~8 pipeline stages overall
 * with pieces of at least 256 rows and NCCLB_MIN_PIECE_BYTES on the wire
 * (each piece is one NCCL call: smaller ones cost more in launch and
 * per-call setup than they gain in overlap). */
int ncclb_splits(const cgm_call *call, int64_t m, int nranks,
                 size_t row_bytes) {
    int s = call->splits;
    if (s <= 0) {
        int64_t shard = cgm_ceil_div(m, nranks);
        int64_t want = cgm_ceil_div(8, nranks);
        int64_t by_rows = shard / 256;
        int64_t by_bytes =
            (int64_t)(((size_t)shard * row_bytes) / NCCLB_MIN_PIECE_BYTES);
        s = (int)(want < by_rows ? want : by_rows);
        if (by_bytes < s) s = (int)by_bytes;
    }
    if (s < 1) s = 1;
    if (s > NCCLB_MAX_SPLITS) s = NCCLB_MAX_SPLITS;
    return s;
}

ncclb_piece ncclb_piece_of(int64_t m, int nranks, int shard, int splits,
                           int q) {
    int64_t rows = cgm_shard_rows(m, shard, nranks);
    int n = ncclb_pieces(rows, splits);
    ncclb_piece p = {cgm_shard_offset(m, shard, nranks), 0};
    if (q < n) {
        p.row0 += cgm_shard_offset(rows, q, n);
        p.rows = cgm_shard_rows(rows, q, n);
    }
    return p;
}

cgm_status ncclb_exchange(ncclb_state *st, const ncclb_xfer *x, int count,
                          const char *what) {
    bool any = false;
    for (int i = 0; i < count; i++)
        any |= x[i].send_bytes > 0 || x[i].recv_bytes > 0;
    if (!any) return CGM_SUCCESS;
    cgm_status status = ncclb_call_enter(st, what);
    if (status != CGM_SUCCESS) return status;
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < count && r == ncclSuccess; i++) {
        if (x[i].send_bytes)
            r = ncclSend(x[i].send, x[i].send_bytes, ncclUint8, x[i].to,
                         st->nccl, st->comm_stream);
        if (r == ncclSuccess && x[i].recv_bytes)
            r = ncclRecv(x[i].recv, x[i].recv_bytes, ncclUint8, x[i].from,
                         st->nccl, st->comm_stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return ncclb_settle(st, r != ncclSuccess ? r : end, what);
}

cgm_status ncclb_gather_rows(ncclb_state *st, const void *mine, void *rows,
                             int64_t m, int64_t cols, size_t es,
                             ncclb_xfer *x, const char *what) {
    const int P = st->nranks, r = st->rank;
    const size_t row_bytes = (size_t)cols * es;
    int count = 0;
    for (int p = 0; p < P; p++) {
        if (p == r) continue;
        ncclb_xfer t = {mine, (size_t)cgm_shard_rows(m, r, P) * row_bytes, p,
                        (char *)rows + (size_t)cgm_shard_offset(m, p, P) * row_bytes,
                        (size_t)cgm_shard_rows(m, p, P) * row_bytes, p};
        x[count++] = t;
    }
    return ncclb_exchange(st, x, count, what);
}
