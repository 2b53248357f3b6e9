/* The p2p backend's fused algorithm (CGM_ALGO_FUSED, COMMGEMM_ALGO=fused):
 * commgemm's own Hopper GEMM (device/hopper_gemm.cu) waits for its inputs
 * per tile instead of the GEMM being cut into chunks. docs/PLAN.md "Fused"
 * describes both schedules; the flags and workspace are the split
 * algorithm's (p2p.h), so fused and chunked calls mix freely on one comm.
 *
 * AG+GEMM (rank r): the comm queue signals FREE to every writer, then
 * pushes the own shard, piece by piece, into each peer's GATHER (r+1 first)
 * raising READY(r*S + q) per piece; the compute queue runs ONE kernel over
 * all m rows of GATHER whose producer waits, per tile, for the READY cells
 * of the rows it loads, tiles ordered own shard first, then peers in
 * arrival order (r-1, r-2, ...). The tiles wholly inside the own rows read
 * them from the input (x_own) without waiting; a second queue copies only
 * the own rows of tiles shared with a neighbour's shard into GATHER, then
 * raises the own READY cells.
 *
 * GEMM+RS (rank r): the compute queue computes each peer's rows piece by
 * piece with cuBLASLt into a local partial slot (destination r+1 first),
 * the comm queue pushes each piece into the owner's RECV slot r and raises
 * READY(d*S + q); then ONE kernel computes the own rows and adds, in its
 * epilogue, every peer's partial of the tile after waiting for its READY
 * cell: no reduce pass, and the main loop runs while partials arrive. With
 * COMMGEMM_P2P_FUSED_PUSH=store, each peer's rows are instead one kernel
 * whose epilogue stores into that peer's RECV slot through the peer
 * mapping, its READY cells raised after it (store_to; slower than the
 * copy-engine pushes on most shapes, docs/PERFORMANCE.md 4h). With
 * COMMGEMM_P2P_FUSED_PUSH=single, ONE kernel computes every row, the peers'
 * first into PARTIAL, raising a local done flag per piece that the comm
 * queue waits on before its copy (single_rs; docs/PERFORMANCE.md 4i). */
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p.h"
#include "device/hopper_gemm.h"

/* Pieces per shard when the call leaves splits open. */
#define FUSED_DEFAULT_SPLITS 2

/* Rows per piece (the flag granularity): a multiple of the kernel's row
 * tile, so that an RS tile waits for one piece per peer, and at most
 * `splits` pieces per shard. */
static int64_t piece_rows(int64_t m, int P, int splits) {
    return plan_fused_piece_rows(m, P, splits, CGM_HGEMM_TILE_M);
}

static int effective_splits(const cgm_call *call) {
    int s = call->splits > 0 ? call->splits : FUSED_DEFAULT_SPLITS;
    return s > P2P_MAX_SPLITS ? P2P_MAX_SPLITS : s;
}

/* The kernel arguments both ops share: operands, epilogue, the comm's
 * epoch, abort word, record and timeout. */
static cgm_hgemm_args base_args(const p2p_state *st, const cgm_call *c) {
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = c->in_dtype;
    a.out_dtype = c->out_dtype;
    a.n = c->n;
    a.k = c->k;
    a.w = c->w.data;
    a.ldw = cgm_matrix_ld(&c->w);
    a.y = c->y.data;
    a.ldy = cgm_matrix_ld(&c->y);
    a.bias = c->has_bias ? c->bias.data : NULL;
    a.accumulate = c->accumulate;
    a.flag_epoch_ptr = st->dev ? &st->dev->epoch : NULL;
    a.abort_word = st->dev ? &st->dev->abort : NULL;
    a.notice_word = st->dev ? &st->dev->notice : NULL;
    a.abort_record = st->abort_dev;
    a.wait_timeout_ns = st->timeout_ms * 1000000;
    a.report_rank = st->rank;
    /* One SM stays free: the kernel spins on flags that the signal and
     * wait kernels of the comm queues (here and on the peers) raise; with
     * every SM held by its CTAs they could never run, and both GPUs would
     * spin until the timeout. */
    a.sm_count = st->sm_count > 1 ? st->sm_count - 1 : 1;
    return a;
}

/* What every rank decides alike (the call signature's fields, which the
 * agreement check compares, and the device kind): a call that fails here
 * runs split on every rank. */
static const char *shared_problem(const p2p_state *st, const cgm_call *c) {
    int P = st->nranks;
    if (c->op != CGM_OP_ALL_GATHER_GEMM && c->op != CGM_OP_GEMM_REDUCE_SCATTER)
        return "only all-gather+GEMM and GEMM+reduce-scatter have a fused form";
    if (P < 2) return "one rank has nothing to overlap";
    if (c->layout != CGM_LAYOUT_TN) return "the kernel takes the TN layout only (W as [n, k])";
    if (c->in_dtype != CGM_DTYPE_BF16 && c->in_dtype != CGM_DTYPE_FP16)
        return "the kernel takes bf16 or fp16 inputs only";
    if (c->op == CGM_OP_GEMM_REDUCE_SCATTER && P - 1 > CGM_HGEMM_MAX_ADDENDS)
        return "GEMM+RS adds at most 7 peers' partials in the epilogue (P <= 8)";
    if (c->op == CGM_OP_ALL_GATHER_GEMM && c->k % 8 != 0)
        return "the gathered rows need k a multiple of 8 (16-byte TMA rows)";
    if (c->m == 0) return "no rows";
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = c->in_dtype;
    a.out_dtype = c->out_dtype;
    a.m = a.n = 1;
    a.k = a.ldx = a.ldw = a.ldy = 8;
    a.x = a.w = a.y = (void *)st->ws.local; /* any aligned pointer */
    const char *why = NULL;
    return cgm_hgemm_supported(&a, &why) ? NULL : why;
}

bool p2p_fused_applies(const p2p_state *st, const cgm_call *c,
                       const char **why) {
    const char *no = shared_problem(st, c);
    if (why) *why = no;
    return no == NULL;
}

static const char *local_problem(const p2p_state *st, const cgm_call *c);

bool p2p_fused_tunable(const p2p_state *st, const cgm_call *c) {
    return !shared_problem(st, c) && !local_problem(st, c);
}

/* This rank's operands, checked by the kernel (alignment, row strides, the
 * local k of RS). The other ranks decided to run fused: a rank that fails
 * here keeps the protocol around cuBLASLt (fused_ag / fused_rs, !kernel). */
static const char *local_problem(const p2p_state *st, const cgm_call *c) {
    int P = st->nranks;
    cgm_hgemm_args a = base_args(st, c);
    if (c->op == CGM_OP_ALL_GATHER_GEMM) {
        a.m = c->m;
        a.x = (const char *)st->ws.local + st->gather_offset;
        a.ldx = c->k;
        a.x_own = c->x.data; /* the own rows are read where they are */
        a.ldx_own = cgm_matrix_ld(&c->x);
        a.own_row0 = plan_shard_offset(c->m, st->rank, P);
        a.own_rows = plan_shard_rows(c->m, st->rank, P);
    } else {
        a.m = plan_shard_rows(c->m, st->rank, P);
        a.x = c->x.data;
        a.ldx = cgm_matrix_ld(&c->x);
        a.naddends = P - 1;
        cgm_dtype pd = c->out_dtype;
        if (cgm_partial_dtype(c->out_dtype, &pd) != CGM_SUCCESS)
            return "COMMGEMM_PARTIAL_DTYPE is not valid";
        a.addend_dtype = pd;
        a.addend_ld = c->n;
        for (int i = 0; i < P - 1; i++)
            a.addend[i] = (const char *)st->ws.local + st->recv_offset;
    }
    const char *why = NULL;
    return cgm_hgemm_supported(&a, &why) ? NULL : why;
}


/* ------------------------------------------------------------ the cache */

static void entry_clear(p2p_fused_entry *e) {
    if (e->events) {
        for (int i = 0; i < e->nevents; i++)
            if (e->events[i]) cudaEventDestroy(e->events[i]);
        free(e->events);
    }
    if (e->order) cudaFree(e->order);
    memset(e, 0, sizeof *e);
}

void p2p_fused_cache_clear(p2p_state *st) {
    for (int i = 0; i < P2P_FUSED_CACHE; i++) entry_clear(&st->fused[i]);
    for (int i = 0; i < st->nretired_orders; i++) cudaFree(st->retired_orders[i]);
    free(st->retired_orders);
    st->retired_orders = NULL;
    st->nretired_orders = 0;
}

/* Evicts e. Its events can go (a captured graph holds its dependencies,
 * not the events), but not a tile order that a captured graph's kernel
 * reads: that is kept until the comm is destroyed. */
static cgm_status evict(p2p_state *st, p2p_fused_entry *e) {
    if (e->used && e->captured && e->order) {
        int **grown = realloc(st->retired_orders,
                              (size_t)(st->nretired_orders + 1) * sizeof *grown);
        if (!grown)
            return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                             "p2p fused: the list of %d tile orders kept for "
                             "captured graphs", st->nretired_orders + 1);
        st->retired_orders = grown;
        st->retired_orders[st->nretired_orders++] = e->order;
        e->order = NULL;
    }
    entry_clear(e);
    return CGM_SUCCESS;
}

/* AG: own shard first, then peers in the order their pushes reach me
 * (r-1 pushes to me first, then r-2, ...); a tile spanning two shards goes
 * with the later one. RS (the one-kernel form): shard r+1 first, then
 * r+2, ..., my own last. */
static cgm_status make_order(p2p_state *st, int64_t m, bool ag, int **out) {
    cgm_status status = CGM_SUCCESS;
    int P = st->nranks, r = st->rank;
    int64_t tiles = cgm_ceil_div(m, CGM_HGEMM_TILE_M);
    int *order = malloc((size_t)tiles * sizeof *order);
    *out = NULL;
    if (!order) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                           "p2p fused: a tile order of %lld tiles",
                           (long long)tiles);
        goto fail;
    }
    int64_t n = ag ? plan_fused_tile_order(m, P, r, CGM_HGEMM_TILE_M, order)
                   : plan_fused_rs_tile_order(m, P, r, CGM_HGEMM_TILE_M, order);
    if (n != tiles) {
        status = cgm_error(CGM_ERROR_INTERNAL, "p2p fused: the tile order of "
                           "m=%lld is not a permutation; please report this",
                           (long long)m);
        goto fail;
    }
    CGM_CUDA_TRY(cudaMalloc((void **)out, (size_t)tiles * sizeof *order));
    CGM_CUDA_TRY(cudaMemcpy(*out, order, (size_t)tiles * sizeof *order,
                            cudaMemcpyHostToDevice));
fail:
    if (status != CGM_SUCCESS && *out) {
        cudaFree(*out);
        *out = NULL;
    }
    free(order);
    return status;
}

static cgm_status lookup(p2p_state *st, const cgm_call *c, int splits,
                         bool capturing, p2p_fused_entry **out) {
    cgm_status status = CGM_SUCCESS;
    p2p_fused_entry *victim = &st->fused[0];
    for (int i = 0; i < P2P_FUSED_CACHE; i++) {
        p2p_fused_entry *e = &st->fused[i];
        if (e->used && e->op == (int)c->op && e->m == c->m &&
            e->splits == splits) {
            e->last_use = ++st->use_clock;
            e->captured |= capturing;
            *out = e;
            return CGM_SUCCESS;
        }
        /* The victim: a free entry, else the least recently used one,
         * an entry no graph captured before one that a graph did. */
        if (!e->used ||
            (victim->used && (e->captured < victim->captured ||
                              (e->captured == victim->captured &&
                               e->last_use < victim->last_use))))
            victim = e;
    }
    if (capturing)
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "p2p: the fused %s with m=%lld and %d pieces per "
                         "shard is captured before it ran eagerly; expected "
                         "one eager call of each shape before capture (it "
                         "creates the events and the tile order)",
                         cgm_op_name(c->op), (long long)c->m, splits);
    if ((status = evict(st, victim)) != CGM_SUCCESS) return status;
    p2p_fused_entry *e = victim;
    int P = st->nranks;
    /* RS: a piece's GEMM done (P*S), a destination's pushes done (P);
     * both: a push's copy done (P*S, COMMGEMM_P2P_FUSED_PUSH). */
    e->nevents = 2 * P * splits + P;
    e->events = calloc((size_t)e->nevents, sizeof *e->events);
    if (!e->events) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "p2p fused: %d events",
                           e->nevents);
        goto fail;
    }
    for (int i = 0; i < e->nevents; i++)
        CGM_CUDA_TRY(cudaEventCreateWithFlags(&e->events[i],
                                              cudaEventDisableTiming));
    if (c->op == CGM_OP_ALL_GATHER_GEMM || st->fused_push == P2P_PUSH_SINGLE)
        CGM_TRY(make_order(st, c->m, c->op == CGM_OP_ALL_GATHER_GEMM, &e->order));
    e->used = true;
    e->op = (int)c->op;
    e->m = c->m;
    e->splits = splits;
    e->last_use = ++st->use_clock;
    *out = e;
    CGM_INFO(CGM_SUB_P2P, "p2p: fused %s m=%lld n=%lld k=%lld: %d piece(s) "
             "of %lld rows per shard, kernel %s", cgm_op_name(c->op),
             (long long)c->m, (long long)c->n, (long long)c->k, splits,
             (long long)piece_rows(c->m, P, splits),
             cgm_hgemm_variant_for(&(cgm_hgemm_args){
                 .m = c->op == CGM_OP_ALL_GATHER_GEMM
                          ? c->m : plan_shard_rows(c->m, st->rank, P),
                 .n = c->n, .k = c->k}) == CGM_HGEMM_PINGPONG
                 ? "ping-pong 128x128" : "cooperative 128x256");
    return CGM_SUCCESS;
fail:
    entry_clear(e);
    return status;
}

/* ------------------------------------------------------------ tracing */

/* COMMGEMM_TIMELINE for fused calls (eager only): every enqueued action is
 * a pseudo plan step (its label and queue) between two timing events of
 * p2p_timeline.c, which writes <prefix>.<op>.fused.r<rank>.json after the
 * call. st->fused_trace is set for the duration of a traced call. */
struct p2p_fused_trace {
    plan plan; /* req.op, req.m and the steps: what p2p_timeline_end reads */
    int cap;
};

static int queue_of(const p2p_state *st, cudaStream_t stream) {
    for (int q = 0; q < P2P_MAX_QUEUES; q++)
        if (st->queues[q] == stream) return q;
    return 0;
}

/* Step index for trace_close, or -1 when not tracing (or full). */
static int trace_open(p2p_state *st, plan_step s, cudaStream_t stream) {
    struct p2p_fused_trace *t = st->fused_trace;
    if (!t || t->plan.nsteps >= t->cap) return -1;
    int i = t->plan.nsteps;
    s.queue = queue_of(st, stream);
    t->plan.steps[i] = s;
    if (p2p_timeline_step(st, i, false, stream) != CGM_SUCCESS) return -1;
    t->plan.nsteps++;
    return i;
}

static cgm_status trace_close(p2p_state *st, int i, cudaStream_t stream) {
    return i < 0 ? CGM_SUCCESS : p2p_timeline_step(st, i, true, stream);
}

static plan_step flag_step(plan_step_kind kind, int peer, plan_flag_kind f,
                           int chunk) {
    plan_step s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.peer = peer;
    s.flag = (plan_flag){f, chunk};
    s.chunk = chunk;
    return s;
}

static plan_step data_step(plan_step_kind kind, plan_loc src, plan_loc dst,
                           int shard, int chunk, int64_t row0, int64_t rows) {
    plan_step s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.peer = -1;
    s.src = src;
    s.dst = dst;
    s.shard = shard;
    s.chunk = chunk;
    s.row0 = row0;
    s.rows = rows;
    return s;
}

static plan_loc loc(int rank, plan_buffer buf) { return (plan_loc){rank, buf, 0}; }

/* ------------------------------------------------------------ flags */

static cgm_status signal_to(p2p_state *st, int peer, plan_flag_kind kind,
                            int chunk, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    plan_flag f = {kind, chunk};
    int t = trace_open(st, flag_step(PLAN_SIGNAL, peer, kind, chunk), stream);
    CGM_CUDA_TRY(cgm_dev_signal(st->dev, p2p_flag_to(st, peer, f), stream));
    CGM_TRY(trace_close(st, t, stream));
fail:
    return status;
}

static cgm_status wait_from(p2p_state *st, int peer, plan_flag_kind kind,
                            int chunk, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    plan_flag f = {kind, chunk};
    int t = trace_open(st, flag_step(PLAN_WAIT, peer, kind, chunk), stream);
    CGM_CUDA_TRY(cgm_dev_wait(st->dev, p2p_flag_from(st, peer, f),
                              st->abort_dev, st->rank, peer, (int)kind, chunk,
                              p2p_timeout_ns(st), stream));
    CGM_TRY(trace_close(st, t, stream));
fail:
    return status;
}

/* A wait that the next copy on the comm queue follows: on the flag queue
 * beside it unless COMMGEMM_P2P_PRE_COPY_FLAGS=inline (p2p.h). */
static cgm_status wait_before_copy(p2p_state *st, int peer,
                                   plan_flag_kind kind, int chunk) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t q = st->queues[0];
    if (st->pre_copy_beside) CGM_TRY(p2p_flags_beside_begin(st, &q));
    CGM_TRY(wait_from(st, peer, kind, chunk, q));
    if (st->pre_copy_beside) CGM_TRY(p2p_flags_beside_end(st));
fail:
    return status;
}

/* The READY cells of sender j for chunks j2 * S + q, q = 0.., as an array
 * (the layout of p2p_flag_offset: consecutive chunks are consecutive). */
static const unsigned long long *ready_cells(const p2p_state *st, int sender,
                                             int first_chunk) {
    plan_flag f = {PLAN_FLAG_READY, first_chunk};
    return p2p_flag_from(st, sender, f);
}

/* `what` describes the copy for the trace (rows, buffers, ranks). */
static cgm_status copy_rows(p2p_state *st, plan_step what, void *dst,
                            size_t dst_pitch, const void *src,
                            size_t src_pitch, size_t row_bytes, int64_t rows,
                            cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    if (rows <= 0) return CGM_SUCCESS;
    int t = trace_open(st, what, stream);
    CGM_CUDA_TRY(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes,
                                   (size_t)rows, cudaMemcpyDefault, stream));
    CGM_TRY(trace_close(st, t, stream));
fail:
    return status;
}

/* READY(chunk0 .. chunk0 + count - 1) to `peer` once the copy just
 * enqueued on the comm queue (`copied` bytes) is done: 8-byte copies of
 * the epoch right behind it on the comm queue when p2p_signal_copy_after
 * says so (COMMGEMM_P2P_SIGNAL);
 * else signal kernels on the comm queue itself (the next copy then waits
 * for them), or, unless COMMGEMM_P2P_FUSED_PUSH=pieces, on the local queue
 * behind `ev`, recorded on the comm queue, so that the copies run back to
 * back. */
static cgm_status ready_after_copy(p2p_state *st, int peer, int chunk0,
                                   int count, size_t copied, cudaEvent_t ev) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t q = st->queues[0];
    if (p2p_signal_copy_after(st, copied)) { /* the copy engine, right behind */
        for (int i = 0; i < count; i++) {
            plan_flag f = {PLAN_FLAG_READY, chunk0 + i};
            int t = trace_open(st, flag_step(PLAN_SIGNAL, peer, f.kind, f.chunk), q);
            CGM_TRY(p2p_signal_by_copy(st, p2p_flag_to(st, peer, f), q));
            CGM_TRY(trace_close(st, t, q));
        }
        return CGM_SUCCESS;
    }
    if (st->fused_push != P2P_PUSH_PIECES) {
        q = st->queues[2];
        CGM_CUDA_TRY(cudaEventRecord(ev, st->queues[0]));
        CGM_CUDA_TRY(cudaStreamWaitEvent(q, ev, 0));
    }
    for (int i = 0; i < count; i++)
        CGM_TRY(signal_to(st, peer, PLAN_FLAG_READY, chunk0 + i, q));
fail:
    return status;
}

/* Pushes `rows` partial rows of shard d (global rows from grow0) from
 * `src` into `dst` (d's RECV slot of this rank), rows of `prow` bytes, on
 * the comm queue, then raises READY of chunks chunk0 .. chunk0 + count - 1
 * to d (ready_after_copy). */
static cgm_status push_partial(p2p_state *st, int d, int chunk0, int count,
                               int64_t grow0, int64_t rows, char *dst,
                               const char *src, size_t prow, cudaEvent_t ev) {
    cgm_status status = CGM_SUCCESS;
    CGM_TRY(copy_rows(st, data_step(PLAN_COPY, loc(st->rank, PLAN_BUF_PARTIAL),
                                    loc(d, PLAN_BUF_RECV), d, chunk0, grow0, rows),
                      dst, prow, src, prow, prow, rows, st->queues[0]));
    CGM_TRY(ready_after_copy(st, d, chunk0, count, (size_t)rows * prow, ev));
fail:
    return status;
}

/* The segments a shard's `npieces` pieces are pushed in (the first piece
 * of each into first[]; returns their count): one per piece, or with
 * COMMGEMM_P2P_FUSED_PUSH=taper, plan_fused_taper's, `growing` for RS. */
static int push_segments(const p2p_state *st, int npieces, bool growing,
                         int *first) {
    if (st->fused_push == P2P_PUSH_TAPER)
        return plan_fused_taper(npieces, growing, first);
    for (int q = 0; q < npieces; q++) first[q] = q;
    return npieces;
}

/* ------------------------------------------------------------ AG+GEMM */

/* dry: only the checks, before anything is enqueued (an error after the
 * epoch bump would leave this rank's epoch behind its peers'). */
static cgm_status fused_ag(p2p_state *st, const cgm_call *c,
                           const p2p_fused_entry *e, int S, bool kernel,
                           bool dry) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    int64_t m = c->m, k = c->k;
    size_t es = cgm_dtype_size(c->in_dtype), row_bytes = (size_t)k * es;
    int64_t own = plan_shard_rows(m, r, P), off = plan_shard_offset(m, r, P);
    int64_t rpf = piece_rows(m, P, S);
    int npieces = (int)cgm_ceil_div(own, rpf);
    char *gather = (char *)st->ws.local + st->gather_offset;
    const char *in = c->x.data;
    size_t in_pitch = (size_t)cgm_matrix_ld(&c->x) * es;
    cudaStream_t comm = st->queues[0], gemm = st->queues[1],
                 local = st->queues[2];
    cudaEvent_t *copied = e->events + st->nranks * S + st->nranks;

    if ((size_t)m * row_bytes > st->gather_bytes)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: the fused all-gather+GEMM needs %zu bytes of "
                         "gather workspace (%lld x %lld %s), found %zu (sized "
                         "from max_m/max_k); raise cgm_config.max_m/max_k",
                         (size_t)m * row_bytes, (long long)m, (long long)k,
                         cgm_dtype_name(c->in_dtype), st->gather_bytes);
    if (dry) return CGM_SUCCESS;
    /* Every peer with rows pushes them into my GATHER: let it. */
    for (int j = 0; j < P; j++)
        if (j != r && plan_shard_rows(m, j, P) > 0)
            CGM_TRY(signal_to(st, j, PLAN_FLAG_FREE, -1, comm));
    /* My own GATHER: the kernel reads the own rows from INPUT in the tiles
     * that hold nothing else; only the own rows of a tile shared with a
     * neighbour's shard (at most 127 at each end) are copied (a copy
     * within one GPU runs on SMs, of which the kernel leaves one). Without
     * the kernel, every own row. Then my own READY cells. */
    int64_t end = off + own, head_end = end, tail_start = end;
    if (kernel)
        plan_fused_own_copies(m, off, own, CGM_HGEMM_TILE_M, &head_end,
                              &tail_start);
    plan_step own_copy = data_step(PLAN_COPY, loc(r, PLAN_BUF_INPUT),
                                   loc(r, PLAN_BUF_GATHER), r, -1, off,
                                   head_end - off);
    CGM_TRY(copy_rows(st, own_copy, gather + (size_t)off * row_bytes,
                      row_bytes, in, in_pitch, row_bytes, head_end - off,
                      local));
    own_copy.row0 = tail_start;
    own_copy.rows = end - tail_start;
    CGM_TRY(copy_rows(st, own_copy, gather + (size_t)tail_start * row_bytes,
                      row_bytes, in + (size_t)(tail_start - off) * in_pitch,
                      in_pitch, row_bytes, end - tail_start, local));
    for (int q = 0; q < npieces; q++) {
        plan_flag f = {PLAN_FLAG_READY, r * S + q};
        int t = trace_open(st, flag_step(PLAN_SIGNAL, r, f.kind, f.chunk), local);
        CGM_CUDA_TRY(cgm_dev_signal(st->dev, p2p_flag_from(st, r, f), local));
        CGM_TRY(trace_close(st, t, local));
    }
    if (!kernel) {
        /* This rank's operands do not suit the kernel (the others' do):
         * keep the protocol, wait for every piece, one cuBLASLt GEMM. */
        CGM_CUDA_TRY(cudaEventRecord(e->events[0], local));
        CGM_CUDA_TRY(cudaStreamWaitEvent(gemm, e->events[0], 0));
        for (int j = 0; j < P; j++) {
            int64_t rows_j = plan_shard_rows(m, j, P);
            for (int q = 0; j != r && q < (int)cgm_ceil_div(rows_j, rpf); q++)
                CGM_TRY(wait_from(st, j, PLAN_FLAG_READY, j * S + q, gemm));
        }
        cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
        g.x = gather;
        g.ldx = k;
        int t = trace_open(st, data_step(PLAN_GEMM, loc(r, PLAN_BUF_GATHER),
                                         loc(r, PLAN_BUF_OUTPUT), -1, -1, 0, m),
                           gemm);
        CGM_TRY(cgm_lt_gemm(st->lt, &g, st->lt_workspace[1], P2P_LT_WORKSPACE,
                            gemm));
        CGM_TRY(trace_close(st, t, gemm));
    } else {
    /* One GEMM over the gathered rows, waiting per tile. */
    cgm_hgemm_args a = base_args(st, c);
    a.m = m;
    a.x = gather;
    a.ldx = k;
    a.row_flags = ready_cells(st, 0, 0);
    a.rows_per_flag = rpf;
    a.flag_shard_rows = cgm_ceil_div(m, P);
    /* From (j, READY, j*S + q) to (j + 1, READY, (j + 1)*S + q). */
    a.flag_shard_stride = (int64_t)PLAN_FLAG_COUNT * (int64_t)st->flag_chunks + S;
    a.report_chunks_per_shard = S;
    a.m_block_order = e->order;
    a.x_own = in;
    a.ldx_own = cgm_matrix_ld(&c->x);
    a.own_row0 = off;
    a.own_rows = own;
    int t = trace_open(st, data_step(PLAN_GEMM, loc(r, PLAN_BUF_GATHER),
                                     loc(r, PLAN_BUF_OUTPUT), -1, -1, 0, m),
                       gemm);
    CGM_CUDA_TRY(cgm_hgemm(&a, gemm));
    CGM_TRY(trace_close(st, t, gemm));
    }
    /* The own shard into every peer's GATHER, r+1 first. Enqueued after
     * the kernel: it runs the own rows first and waits on flags, not on
     * this queue, so an eager call starts computing at once instead of
     * after the host has enqueued every push. */
    /* Copies of whole pieces, fewer toward the end when tapered. */
    int first[P2P_MAX_SPLITS], nseg = push_segments(st, npieces, false, first);
    for (int t = 1; t < P && own > 0; t++) {
        int d = (r + t) % P;
        CGM_TRY(wait_before_copy(st, d, PLAN_FLAG_FREE, -1));
        char *peer_gather = (char *)st->ws.peer[d] + st->gather_offset;
        for (int g = 0; g < nseg; g++) {
            int q0 = first[g], q1 = g + 1 < nseg ? first[g + 1] : npieces;
            int64_t row0 = q0 * rpf, end_row = q1 * rpf < own ? q1 * rpf : own;
            CGM_TRY(copy_rows(st, data_step(PLAN_COPY, loc(r, PLAN_BUF_INPUT),
                                            loc(d, PLAN_BUF_GATHER), r, r * S + q0,
                                            off + row0, end_row - row0),
                              peer_gather + (size_t)(off + row0) * row_bytes,
                              row_bytes, in + (size_t)row0 * in_pitch,
                              in_pitch, row_bytes, end_row - row0, comm));
            CGM_TRY(ready_after_copy(st, d, r * S + q0, q1 - q0,
                                     (size_t)(end_row - row0) * row_bytes,
                                     copied[(t - 1) * npieces + g]));
        }
    }
    if (c->has_x_gathered) { /* the peers' rows from GATHER, mine from INPUT */
        size_t pitch = (size_t)cgm_matrix_ld(&c->x_gathered) * es;
        char *xg = c->x_gathered.data;
        plan_step what = data_step(PLAN_COPY, loc(r, PLAN_BUF_GATHER),
                                   loc(r, PLAN_BUF_NONE), -1, -1, 0, off);
        CGM_TRY(copy_rows(st, what, xg, pitch, gather, row_bytes, row_bytes,
                          off, gemm));
        what.src.buf = PLAN_BUF_INPUT, what.row0 = off, what.rows = own;
        CGM_TRY(copy_rows(st, what, xg + (size_t)off * pitch, pitch, in,
                          in_pitch, row_bytes, own, gemm));
        what.src.buf = PLAN_BUF_GATHER, what.row0 = end, what.rows = m - end;
        CGM_TRY(copy_rows(st, what, xg + (size_t)end * pitch, pitch,
                          gather + (size_t)end * row_bytes, row_bytes,
                          row_bytes, m - end, gemm));
    }
fail:
    return status;
}

/* ------------------------------------------------------------ GEMM+RS */

/* Rows [row0, row0 + rows) of the call's X times W into `y` (dense, n
 * wide, the partial dtype pd), no epilogue: a partial, with cuBLASLt on
 * the compute queue. */
static cgm_status partial_gemm(p2p_state *st, const cgm_call *c, int64_t row0,
                               int64_t rows, void *y, cgm_dtype pd,
                               plan_step what) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t gemm = st->queues[1];
    cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
    g.m = rows;
    g.x = (const char *)c->x.data + (size_t)row0 * (size_t)g.ldx *
                                        cgm_dtype_size(c->in_dtype);
    g.y = y;
    g.ldy = c->n;
    g.out_dtype = pd;
    g.bias = NULL;
    g.accumulate = false;
    int t = trace_open(st, what, gemm);
    CGM_TRY(cgm_lt_gemm(st->lt, &g, st->lt_workspace[1], P2P_LT_WORKSPACE,
                        gemm));
    CGM_TRY(trace_close(st, t, gemm));
fail:
    return status;
}

/* COMMGEMM_P2P_FUSED_PUSH=store: the kernel computes shard d's rows of X
 * straight into d's RECV slot r through the peer mapping (the partial
 * dtype, no bias, no accumulate): the stores cross NVLink while the kernel
 * runs, and no partial slot, copy or copy engine is used. */
static cgm_hgemm_args store_args(const p2p_state *st, const cgm_call *c,
                                 int d, cgm_dtype pd, size_t stride) {
    cgm_hgemm_args a = base_args(st, c);
    int P = st->nranks;
    int64_t ldx = cgm_matrix_ld(&c->x);
    a.m = plan_shard_rows(c->m, d, P);
    a.x = (const char *)c->x.data + (size_t)plan_shard_offset(c->m, d, P) *
                                        (size_t)ldx * cgm_dtype_size(c->in_dtype);
    a.ldx = ldx;
    a.out_dtype = pd;
    a.y = (char *)st->ws.peer[d] + st->recv_offset + (size_t)st->rank * stride;
    a.ldy = c->n;
    a.bias = NULL;
    a.accumulate = 0;
    return a;
}

/* The store form of one destination d on the compute queue: wait until d
 * freed its slot (FREE/-1 from d), the kernel, then READY(d*S + q) to d
 * for each of its npieces pieces (the kernel's end orders its stores
 * before the signal's system-scope release). */
static cgm_status store_to(p2p_state *st, const cgm_call *c, int d, int S,
                           int npieces, const cgm_hgemm_args *a) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t gemm = st->queues[1];
    int r = st->rank;
    CGM_TRY(wait_from(st, d, PLAN_FLAG_FREE, -1, gemm));
    int t = trace_open(st, data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                     loc(d, PLAN_BUF_RECV), d, d * S,
                                     plan_shard_offset(c->m, d, st->nranks),
                                     a->m),
                       gemm);
    CGM_CUDA_TRY(cgm_hgemm(a, gemm));
    CGM_TRY(trace_close(st, t, gemm));
    for (int q = 0; q < npieces; q++)
        CGM_TRY(signal_to(st, d, PLAN_FLAG_READY, d * S + q, gemm));
fail:
    return status;
}

/* The epilogue addends of my rows: every peer j's partial in my RECV slot
 * j (`stride` bytes apart, n wide, dtype pd), each waited for per piece of
 * rpf rows on its READY(r*S + q) cells. */
static void peer_addends(const p2p_state *st, cgm_hgemm_args *a, int S,
                         cgm_dtype pd, int64_t n, int64_t rpf, size_t stride) {
    int r = st->rank;
    a->naddends = 0;
    a->addend_dtype = pd;
    a->addend_ld = n;
    a->rows_per_flag = rpf;
    a->report_addend_chunk0 = r * S;
    for (int j = 0; j < st->nranks; j++) {
        if (j == r) continue;
        int i = a->naddends++;
        a->addend[i] = (const char *)st->ws.local + st->recv_offset +
                       (size_t)j * stride;
        a->addend_flags[i] = ready_cells(st, j, r * S);
        a->report_addend_peer[i] = j;
    }
}

/* COMMGEMM_P2P_FUSED_PUSH=single: ONE kernel over all m rows of X, tiles
 * of shard r+1 first, then r+2, ..., my own last. A peer's rows are stored
 * as plain partials into PARTIAL (global rows, the partial dtype); each
 * piece's last tile raises my local DONE(d*S + q) cell (done_count /
 * done_flags of cgm_hgemm_args). The comm queue waits for that cell, pushes
 * the piece into d's RECV slot r with the copy engine and raises READY.
 * My own rows get the epilogue (bias, accumulate, the peers' partials as
 * they arrive) and go straight to the output. No cuBLASLt pieces, no gap
 * between GEMMs: the copy engine starts on a piece as soon as its tiles
 * are stored. Needs the partial dtype equal to the output dtype (one
 * kernel, one store type) and m a multiple of 128 * P (equal shards of
 * whole tiles: the kernel's tile groups then never mix my rows, which wait
 * for the peers, with rows the peers wait for); NULL when it applies, else
 * why not. */
static const char *single_problem(const p2p_state *st, const cgm_call *c,
                                  cgm_dtype pd, const cgm_hgemm_args *a) {
    int P = st->nranks;
    if (pd != c->out_dtype)
        return "the partial dtype differs from the output dtype "
               "(COMMGEMM_PARTIAL_DTYPE=output makes them one)";
    if (c->m % P || (c->m / P) % CGM_HGEMM_TILE_M)
        return "the shards are not equal runs of whole 128-row tiles (m is not a "
               "multiple of 128 * nranks)";
    if ((size_t)c->m * (size_t)c->n * cgm_dtype_size(pd) > st->partial_bytes)
        return "the partial workspace holds fewer than m rows";
    const char *why = NULL;
    if (!cgm_hgemm_supported(a, &why)) return why;
    return "the kernel has no split output";
}

static cgm_hgemm_args single_args(const p2p_state *st, const cgm_call *c,
                                  const p2p_fused_entry *e, int S,
                                  cgm_dtype pd) {
    int P = st->nranks;
    int64_t block = cgm_ceil_div(c->m, P);
    size_t stride = (size_t)block * (size_t)c->n * cgm_dtype_size(pd);
    cgm_hgemm_args a = base_args(st, c);
    a.m = c->m;
    a.x = c->x.data;
    a.ldx = cgm_matrix_ld(&c->x);
    a.out_dtype = pd;
    a.y = st->partial;
    a.ldy = c->n;
    a.m_block_order = e->order;
    peer_addends(st, &a, S, pd, c->n, piece_rows(c->m, P, S), stride);
    return a;
}

/* The single form's schedule (FREE already signalled to every writer). */
static cgm_status single_rs(p2p_state *st, const cgm_call *c,
                            const p2p_fused_entry *e, int S,
                            const cgm_hgemm_args *a) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    int64_t m = c->m, block = cgm_ceil_div(m, P), rpf = a->rows_per_flag;
    size_t prow = (size_t)c->n * cgm_dtype_size(a->out_dtype);
    size_t stride = (size_t)block * prow;
    cudaStream_t gemm = st->queues[1];
    cudaEvent_t *copied = e->events + P * S + P;
    int tk = trace_open(st, data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                      loc(r, PLAN_BUF_OUTPUT), -1, -1, 0, m),
                        gemm);
    CGM_CUDA_TRY(cgm_hgemm(a, gemm));
    CGM_TRY(trace_close(st, tk, gemm));
    for (int t = 1; t < P; t++) {
        int d = (r + t) % P;
        int64_t rows_d = plan_shard_rows(m, d, P);
        int64_t off_d = plan_shard_offset(m, d, P);
        if (rows_d == 0) continue;
        CGM_TRY(wait_before_copy(st, d, PLAN_FLAG_FREE, -1));
        char *dst = (char *)st->ws.peer[d] + st->recv_offset + (size_t)r * stride;
        const char *src = (const char *)st->partial + (size_t)off_d * prow;
        int npieces = (int)cgm_ceil_div(rows_d, rpf);
        for (int q = 0; q < npieces; q++) {
            int64_t row0 = q * rpf, rows = rows_d - row0 < rpf ? rows_d - row0 : rpf;
            /* My kernel stored every tile of the piece. */
            CGM_TRY(wait_before_copy(st, r, PLAN_FLAG_DONE, d * S + q));
            CGM_TRY(push_partial(st, d, d * S + q, 1, off_d + row0, rows,
                                 dst + (size_t)row0 * prow,
                                 src + (size_t)row0 * prow, prow,
                                 copied[(t - 1) * S + q]));
        }
    }
fail:
    return status;
}

static cgm_status fused_rs(p2p_state *st, const cgm_call *c,
                           const p2p_fused_entry *e, int S, bool kernel,
                           bool dry) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    int64_t m = c->m, n = c->n;
    cgm_dtype pd = c->out_dtype;
    CGM_TRY(cgm_partial_dtype(c->out_dtype, &pd));
    size_t pes = cgm_dtype_size(pd), prow = (size_t)n * pes;
    size_t xes = cgm_dtype_size(c->in_dtype);
    int64_t slot_rows = cgm_ceil_div(m, P);
    size_t stride = (size_t)slot_rows * prow;
    int64_t own = plan_shard_rows(m, r, P), off = plan_shard_offset(m, r, P);
    int64_t rpf = piece_rows(m, P, S);
    int nslots = (int)(stride ? st->partial_bytes / stride : 0);
    if (nslots > 2) nslots = 2;
    if ((size_t)P * stride > st->recv_bytes || nslots < 1)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: the fused GEMM+reduce-scatter with m=%lld, "
                         "n=%lld needs %d recv slots and a partial slot of "
                         "%zu bytes, the workspace holds %zu and %zu bytes "
                         "(sized from max_m/max_n); raise cgm_config.max_m/"
                         "max_n", (long long)m, (long long)n, P, stride,
                         st->recv_bytes, st->partial_bytes);
    cgm_hgemm_args single;
    bool one_kernel = false;
    if (kernel && st->fused_push == P2P_PUSH_SINGLE && e->order) {
        single = single_args(st, c, e, S, pd);
        const char *why = single_problem(st, c, pd, &single);
        one_kernel = why == NULL;
        if (why && dry && st->fused_fallback_notes < 8) {
            st->fused_fallback_notes++;
            CGM_INFO(CGM_SUB_P2P, "p2p: fused GEMM+RS m=%lld n=%lld on rank %d "
                     "not in one kernel (COMMGEMM_P2P_FUSED_PUSH=single): %s; "
                     "pushing as beside", (long long)m, (long long)n, r, why);
        }
    }
    if (dry) return CGM_SUCCESS;
    cudaStream_t comm = st->queues[0], gemm = st->queues[1];
    cudaEvent_t *piece_done = e->events, *pushed = e->events + P * S,
                *copied = e->events + P * S + P;
    const char *x = c->x.data;
    int64_t ldx = cgm_matrix_ld(&c->x);

    /* Every peer writes its partial of my rows into my RECV: let it. */
    if (own > 0)
        for (int j = 0; j < P; j++)
            if (j != r) CGM_TRY(signal_to(st, j, PLAN_FLAG_FREE, -1, comm));
    if (one_kernel) return single_rs(st, c, e, S, &single);
    for (int t = 1; t < P; t++) {
        int d = (r + t) % P;
        int64_t rows_d = plan_shard_rows(m, d, P);
        int64_t off_d = plan_shard_offset(m, d, P);
        if (rows_d == 0) continue;
        if (kernel && st->fused_push == P2P_PUSH_STORE) {
            cgm_hgemm_args sa = store_args(st, c, d, pd, stride);
            if (cgm_hgemm_supported(&sa, NULL)) {
                CGM_TRY(store_to(st, c, d, S, (int)cgm_ceil_div(rows_d, rpf), &sa));
                continue;
            }
        }
        int slot = (t - 1) % nslots;
        char *partial = (char *)st->partial + (size_t)slot * stride;
        char *dst = (char *)st->ws.peer[d] + st->recv_offset +
                    (size_t)r * stride;
        /* The slot's previous pushes are done before it is overwritten. */
        if (t - 1 >= nslots)
            CGM_CUDA_TRY(cudaStreamWaitEvent(gemm, pushed[t - 1 - nslots], 0));
        CGM_TRY(wait_before_copy(st, d, PLAN_FLAG_FREE, -1));
        /* GEMM and push whole pieces; tapered, the first push waits for
         * one piece's GEMM. */
        int npieces = (int)cgm_ceil_div(rows_d, rpf), first[P2P_MAX_SPLITS];
        int nseg = push_segments(st, npieces, true, first);
        for (int g = 0; g < nseg; g++) {
            int q0 = first[g], q1 = g + 1 < nseg ? first[g + 1] : npieces;
            int64_t row0 = q0 * rpf;
            int64_t rows = (q1 * rpf < rows_d ? q1 * rpf : rows_d) - row0;
            CGM_TRY(partial_gemm(st, c, off_d + row0, rows,
                                 partial + (size_t)row0 * prow, pd,
                                 data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                           loc(r, PLAN_BUF_PARTIAL), d,
                                           d * S + q0, off_d + row0, rows)));
            cudaEvent_t ev = piece_done[(t - 1) * S + g];
            CGM_CUDA_TRY(cudaEventRecord(ev, gemm));
            CGM_CUDA_TRY(cudaStreamWaitEvent(comm, ev, 0));
            CGM_TRY(push_partial(st, d, d * S + q0, q1 - q0, off_d + row0, rows,
                                 dst + (size_t)row0 * prow,
                                 partial + (size_t)row0 * prow, prow,
                                 copied[(t - 1) * S + g]));
        }
        CGM_CUDA_TRY(cudaEventRecord(pushed[t - 1], comm));
    }
    if (own == 0) return CGM_SUCCESS;
    if (!kernel) {
        /* This rank's operands do not suit the kernel (the others' do):
         * keep the protocol; my rows into my own RECV slot with cuBLASLt,
         * then per piece, once every peer's partial is in, one reduce. */
        char *mine = (char *)st->ws.local + st->recv_offset + (size_t)r * stride;
        CGM_TRY(partial_gemm(st, c, off, own, mine, pd,
                             data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                       loc(r, PLAN_BUF_RECV), r, -1, off, own)));
        for (int q = 0; q < (int)cgm_ceil_div(own, rpf); q++) {
            int64_t row0 = q * rpf, rows = own - row0 < rpf ? own - row0 : rpf;
            cgm_dev_reduce_args ra;
            memset(&ra, 0, sizeof ra);
            for (int j = 0; j < P; j++) {
                if (j != r) CGM_TRY(wait_from(st, j, PLAN_FLAG_READY, r * S + q, gemm));
                ra.src[j] = (const char *)st->ws.local + st->recv_offset +
                            (size_t)j * stride + (size_t)row0 * prow;
                ra.src_ld[j] = n;
            }
            ra.nsources = P;
            ra.src_dtype = (int)pd;
            ra.dst = (char *)c->y.data + (size_t)row0 *
                     (size_t)cgm_matrix_ld(&c->y) * cgm_dtype_size(c->out_dtype);
            ra.dst_ld = cgm_matrix_ld(&c->y);
            ra.dst_dtype = (int)c->out_dtype;
            ra.accumulate = c->accumulate;
            ra.bias = c->has_bias ? c->bias.data : NULL;
            ra.rows = rows;
            ra.cols = n;
            int tr = trace_open(st, data_step(PLAN_REDUCE, loc(r, PLAN_BUF_RECV),
                                              loc(r, PLAN_BUF_OUTPUT), r,
                                              r * S + q, off + row0, rows),
                                gemm);
            CGM_CUDA_TRY(cgm_dev_reduce(&ra, st->dev, gemm));
            CGM_TRY(trace_close(st, tr, gemm));
        }
        return CGM_SUCCESS;
    }
    /* My rows, plus every peer's partial of them as it arrives. */
    cgm_hgemm_args a = base_args(st, c);
    a.m = own;
    a.x = x + (size_t)off * (size_t)ldx * xes;
    a.ldx = ldx;
    peer_addends(st, &a, S, pd, n, rpf, stride);
    int tk = trace_open(st, data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                      loc(r, PLAN_BUF_OUTPUT), r, -1, off, own),
                        gemm);
    CGM_CUDA_TRY(cgm_hgemm(&a, gemm));
    CGM_TRY(trace_close(st, tk, gemm));
fail:
    return status;
}

/* ------------------------------------------------------------ the call */

cgm_status p2p_fused_execute(p2p_state *st, const cgm_call *call) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t caller = (cudaStream_t)call->stream;
    bool capturing = cgm_stream_capturing(caller);
    p2p_fused_entry *e = NULL;
    int S = effective_splits(call);
    struct p2p_fused_trace trace; /* COMMGEMM_TIMELINE only */
    memset(&trace, 0, sizeof trace);
    int forked = 0; /* queues forked off the caller's stream, not yet joined */
    /* This rank's operands: the kernel, or the same protocol around
     * cuBLASLt (the other ranks run fused and wait for this one). */
    const char *local = local_problem(st, call);
    if (local && st->fused_fallback_notes < 8) {
        st->fused_fallback_notes++;
        CGM_INFO(CGM_SUB_P2P, "p2p: fused %s on rank %d with cuBLASLt: %s",
                 cgm_op_name(call->op), st->rank, local);
    }
    CGM_TRY(lookup(st, call, S, capturing, &e));
    bool ag = call->op == CGM_OP_ALL_GATHER_GEMM;
    bool kernel = local == NULL;
    CGM_TRY(ag ? fused_ag(st, call, e, S, kernel, true)
               : fused_rs(st, call, e, S, kernel, true));
    /* COMMGEMM_TIMELINE: room for every step either schedule enqueues. */
    if (!capturing && p2p_timeline_on(st)) {
        int P = st->nranks;
        trace.cap = 16 + 4 * P * (S + 2);
        trace.plan.steps = calloc((size_t)trace.cap, sizeof *trace.plan.steps);
        if (!trace.plan.steps)
            return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "p2p: a fused trace of "
                             "%d steps", trace.cap);
        trace.plan.req.op = ag ? PLAN_OP_AG_GEMM : PLAN_OP_GEMM_RS;
        trace.plan.req.m = call->m;
        trace.plan.req.nranks = P;
        trace.plan.req.rank = st->rank;
        trace.plan.req.splits = S;
        CGM_TRY(p2p_timeline_begin(st, trace.cap, caller));
        st->fused_trace = &trace;
    }
    /* Fork: a fresh epoch, then every queue starts after the caller's work. */
    const int nqueues = 3;
    forked = nqueues;
    CGM_CUDA_TRY(cgm_dev_epoch_bump(st->dev, caller));
    CGM_CUDA_TRY(cudaEventRecord(st->fork, caller));
    for (int q = 0; q < nqueues; q++)
        CGM_CUDA_TRY(cudaStreamWaitEvent(st->queues[q], st->fork, 0));
    CGM_TRY(cgm_test_fault_after_fork(&st->fault, st->rank, "p2p"));
    CGM_TRY(ag ? fused_ag(st, call, e, S, kernel, false)
               : fused_rs(st, call, e, S, kernel, false));
    for (int q = 0; q < nqueues; q++) {
        CGM_CUDA_TRY(cudaEventRecord(st->join[q], st->queues[q]));
        CGM_CUDA_TRY(cudaStreamWaitEvent(caller, st->join[q], 0));
    }
    forked = 0;
    if (st->fused_trace) {
        st->fused_trace = NULL;
        CGM_TRY(p2p_timeline_end(st, &trace.plan, "fused", caller));
    }
fail:
    st->fused_trace = NULL;
    free(trace.plan.steps);
    return forked ? p2p_abandon_op(st, caller, forked, status) : status;
}
