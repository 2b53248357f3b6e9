/* The fused algorithm's two schedules, AG+GEMM and GEMM+RS, around
 * commgemm's own Hopper GEMM (p2p_fused_ops.h describes them). */
#include <string.h>

#include "backend/p2p/p2p_epilogue.h"
#include "backend/p2p/p2p_fused_ops.h"
#include "backend/p2p/p2p_signal.h"
#include "backend/p2p/p2p_timeline.h"

int64_t p2p_fused_piece_rows(int64_t m, int nranks, int splits) {
    return plan_fused_piece_rows(m, nranks, splits, CGM_HGEMM_TILE_M);
}

cgm_hgemm_args p2p_fused_kernel_args(const p2p_state *st, const cgm_call *c) {
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
    if (cgm_dtype_is_fp8(c->in_dtype)) { /* AG: X's scales become the gathered ones (ag_gemm_kernel) */
        a.w_dtype = c->w_dtype;
        /* fp8_fast_accum 0: each 128-wide k block promoted into fp32 (the
         * block recipe always promotes) */
        a.fp8_promote = c->scaling != CGM_SCALING_TENSOR || !c->fp8_fast_accum;
        if (c->scaling == CGM_SCALING_TENSOR) {
            a.w_scale = c->w.scale;
            a.x_scale = c->x.scale;
        } else { /* X [m, kb] (RS: rs_own_kernel starts it at its rows), W [ceil(n/128), kb] */
            a.w_block_scale = c->w.scale;
            a.x_block_scale = c->x.scale;
            a.w_block_ld = a.x_block_ld = cgm_ceil_div(c->k, 128);
        }
    }
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
    /* The epilogue: AG's output block, RS's own rows after the peers'
     * partials (the partial GEMMs are cuBLASLt's, without it). */
    p2p_epi_fused_kernel(st, c, &a);
    return a;
}

/* ------------------------------------------------------------ tracing */

/* COMMGEMM_TIMELINE for fused calls (eager only): every enqueued action is
 * a pseudo plan step (its label and queue) between two timing events of
 * p2p_timeline.c. st->fused_trace is set for the duration of a traced
 * call (p2p_fused.c). */
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
    return (plan_step){.kind = kind, .peer = peer, .flag = {f, chunk}, .chunk = chunk};
}

static plan_step data_step(plan_step_kind kind, plan_loc src, plan_loc dst,
                           int shard, int chunk, int64_t row0, int64_t rows) {
    return (plan_step){.kind = kind, .peer = -1, .src = src, .dst = dst, .shard = shard,
                       .chunk = chunk, .row0 = row0, .rows = rows};
}

static plan_loc loc(int rank, plan_buffer buf) {
    return (plan_loc){rank, buf, 0};
}

/* ------------------------------------------------------------ flags */

/* A flag kernel into `cell` (peer's `peer`, or this rank's own), traced. */
static cgm_status signal_cell(p2p_state *st, unsigned long long *cell,
                              int peer, plan_flag f, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    int t = trace_open(st, flag_step(PLAN_SIGNAL, peer, f.kind, f.chunk),
                       stream);
    CGM_TRY(p2p_signal(st, cell, stream));
    CGM_TRY(trace_close(st, t, stream));
fail:
    return status;
}

static cgm_status signal_to(p2p_state *st, int peer, plan_flag_kind kind,
                            int chunk, cudaStream_t stream) {
    plan_flag f = {kind, chunk};
    return signal_cell(st, p2p_flag_to(st, peer, f), peer, f, stream);
}

static cgm_status wait_from(p2p_state *st, int peer, plan_flag_kind kind,
                            int chunk, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    plan_flag f = {kind, chunk};
    int t = trace_open(st, flag_step(PLAN_WAIT, peer, kind, chunk), stream);
    CGM_TRY(p2p_wait(st, peer, f, stream));
    CGM_TRY(trace_close(st, t, stream));
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

/* The kernel (a) or a cuBLASLt GEMM (g) on the compute queue, traced as
 * `what`. */
static cgm_status hgemm_traced(p2p_state *st, const cgm_hgemm_args *a,
                               plan_step what) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t gemm = st->queues[1];
    int t = trace_open(st, what, gemm);
    CGM_CUDA_TRY(cgm_hgemm(a, gemm));
    CGM_TRY(trace_close(st, t, gemm));
fail:
    return status;
}

static cgm_status lt_traced(p2p_state *st, const cgm_lt_gemm_args *g,
                            plan_step what) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t gemm = st->queues[1];
    int t = trace_open(st, what, gemm);
    CGM_TRY(cgm_lt_gemm(st->lt, g, st->lt_workspace[1], P2P_LT_WORKSPACE,
                        gemm));
    CGM_TRY(trace_close(st, t, gemm));
fail:
    return status;
}

/* Block-scaled fp8 GEMMs on cuBLASLt (AG+GEMM without the kernel, GEMM+RS's
 * partials) as split runs them (lt_fp8_rows.h), in the p2p fp8 workspace:
 * the call's region (W's scales in cuBLASLt's layout, W padded where
 * needed), then the scratch of one GEMM of up to ceil(m / P) rows (a
 * shard at most), used in turn on the GEMM queue. */
typedef struct block_lt {
    cgm_fp8_call f;
    void *scratch;
    size_t scratch_bytes;
} block_lt;

static bool is_block(const cgm_call *c) {
    return cgm_dtype_is_fp8(c->in_dtype) && c->scaling != CGM_SCALING_TENSOR;
}

static cgm_status block_gemm_cb(void *ctx, const cgm_lt_gemm_args *g,
                                cudaStream_t stream) {
    p2p_state *st = ctx;
    return cgm_lt_gemm(st->lt, g, st->lt_workspace[1], P2P_LT_WORKSPACE,
                       stream);
}

/* The dry pass: the workspace grown for `c` (eager calls only). */
static cgm_status block_lt_ensure(p2p_state *st, const cgm_call *c) {
    size_t need = cgm_fp8_call_bytes(c) +
                  cgm_fp8_rows_scratch_bytes(c, cgm_ceil_div(c->m, st->nranks));
    return cgm_fp8_workspace_ensure(&st->fp8_ws, need,
                                    cgm_stream_capturing((cudaStream_t)c->stream),
                                    "p2p");
}

static block_lt block_lt_of(p2p_state *st, const cgm_call *c) {
    block_lt b;
    size_t at = cgm_fp8_call_bytes(c);
    cgm_fp8_call_fill(c, st->fp8_ws.buf, block_gemm_cb, st, &b.f);
    b.scratch = (char *)st->fp8_ws.buf + at;
    b.scratch_bytes = st->fp8_ws.bytes - at;
    return b;
}

/* One GEMM of `g` (the call's, with its rows' m, x, y), X's scales of its
 * rows at x_scales ([rows, kb]), traced as `what`. */
static cgm_status block_gemm(p2p_state *st, const block_lt *b,
                             const cgm_lt_gemm_args *g, const float *x_scales,
                             plan_step what) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t gemm = st->queues[1];
    int t = trace_open(st, what, gemm);
    CGM_TRY(cgm_fp8_rows_gemm(&b->f, g, x_scales, b->f.kb, NULL, NULL,
                              b->scratch, b->scratch_bytes, gemm));
    CGM_TRY(trace_close(st, t, gemm));
fail:
    return status;
}

/* READY(chunk) to `peer` once the copy just enqueued on the comm queue
 * (`copied` bytes) is done: an 8-byte copy of the epoch right behind it on
 * the comm queue when p2p_signal_copy_after says so; else a signal kernel
 * on the local queue behind `ev`, recorded on the comm queue, so that the
 * copies run back to back. */
static cgm_status ready_after_copy(p2p_state *st, int peer, int chunk,
                                   size_t copied, cudaEvent_t ev) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t comm = st->queues[0], local = st->queues[2];
    if (p2p_signal_copy_after(copied)) { /* the copy engine, right behind */
        plan_flag f = {PLAN_FLAG_READY, chunk};
        int t = trace_open(st, flag_step(PLAN_SIGNAL, peer, f.kind, f.chunk),
                           comm);
        CGM_TRY(p2p_signal_by_copy(st, p2p_flag_to(st, peer, f), comm));
        return trace_close(st, t, comm);
    }
    CGM_CUDA_TRY(cudaEventRecord(ev, comm));
    CGM_CUDA_TRY(cudaStreamWaitEvent(local, ev, 0));
    CGM_TRY(signal_to(st, peer, PLAN_FLAG_READY, chunk, local));
fail:
    return status;
}

/* Pushes `rows` partial rows of shard d (global rows from grow0) from
 * `src` into `dst` (d's RECV slot of this rank), rows of `prow` bytes, on
 * the comm queue, then raises READY(chunk) to d (ready_after_copy). */
static cgm_status push_partial(p2p_state *st, int d, int chunk, int64_t grow0,
                               int64_t rows, char *dst, const char *src,
                               size_t prow, cudaEvent_t ev) {
    cgm_status status = CGM_SUCCESS;
    plan_step what = data_step(PLAN_COPY, loc(st->rank, PLAN_BUF_PARTIAL),
                               loc(d, PLAN_BUF_RECV), d, chunk, grow0, rows);
    CGM_TRY(copy_rows(st, what, dst, prow, src, prow, prow, rows,
                      st->queues[0]));
    CGM_TRY(ready_after_copy(st, d, chunk, (size_t)rows * prow, ev));
fail:
    return status;
}


/* ------------------------------------------------------------ AG+GEMM */

/* Where this rank's rows are (the same for every helper below). */
typedef struct ag_rows {
    int64_t own, off, rpf; /* my shard's rows, its first row, rows per piece */
    int npieces;           /* of my shard */
    size_t row_bytes, in_pitch;
    char *gather;   /* my GATHER */
    const char *in; /* my shard in INPUT */
    /* fp8: in my GATHER after the rows, the gathered scales; NULL
     * otherwise. TENSOR: shard j's x scale at scales[j] (P floats), then
     * 16-byte slots for cuBLASLt (ag_gemm_lt); BLOCK: row g's kb scales at
     * scales[g * kb] ([m, kb], the gathered numbering). Every rank puts its
     * scales into each peer's before its rows, so they are there before
     * the rows' READY, and into its own before the GEMM. */
    float *scales;
    size_t scales_at;       /* the offset of scales in GATHER */
    const float *own_scale; /* fp8: my shard's (device) */
    bool block;             /* fp8 block scaling */
    int64_t kb;             /* ceil(k / 128) */
} ag_rows;

/* GATHER's bytes for the rows and, with fp8, the scales. */
static size_t ag_gather_need(const cgm_call *c, int P, size_t row_bytes) {
    size_t rows = (size_t)c->m * row_bytes;
    if (!cgm_dtype_is_fp8(c->in_dtype)) return rows;
    size_t scales = is_block(c) ? (size_t)c->m * (size_t)cgm_ceil_div(c->k, 128)
                                : (size_t)(5 * P + 8);
    return ((rows + 255) & ~(size_t)255) + scales * sizeof(float);
}

static ag_rows ag_rows_of(const p2p_state *st, const cgm_call *c, int S) {
    ag_rows a;
    int r = st->rank, P = st->nranks;
    size_t es = cgm_dtype_size(c->in_dtype);
    a.own = plan_shard_rows(c->m, r, P);
    a.off = plan_shard_offset(c->m, r, P);
    a.rpf = p2p_fused_piece_rows(c->m, P, S);
    a.npieces = (int)cgm_ceil_div(a.own, a.rpf);
    a.row_bytes = (size_t)c->k * es;
    a.in_pitch = (size_t)cgm_matrix_ld(&c->x) * es;
    a.gather = (char *)st->ws.local + st->gather_offset;
    a.in = c->x.data;
    a.scales_at = ((size_t)c->m * a.row_bytes + 255) & ~(size_t)255;
    a.scales = cgm_dtype_is_fp8(c->in_dtype) ? (float *)(a.gather + a.scales_at) : NULL;
    a.own_scale = a.scales ? c->x.scale : NULL;
    a.block = is_block(c);
    a.kb = cgm_ceil_div(c->k, 128);
    return a;
}

/* fp8: my shard's scales into the gathered scales of `gather` (my GATHER or
 * a peer's) on `q`: TENSOR its one float at [r], BLOCK its rows' at row
 * off. */
static cgm_status ag_put_scales(const p2p_state *st, const ag_rows *a,
                                char *gather, cudaStream_t q) {
    cgm_status status = CGM_SUCCESS;
    size_t at = a->block ? (size_t)(a->off * a->kb) : (size_t)st->rank;
    size_t n = a->block ? (size_t)(a->own * a->kb) : 1;
    if (!a->scales || !a->own_scale || a->own == 0 || n == 0) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemcpyAsync(gather + a->scales_at + at * sizeof(float),
                                 a->own_scale, n * sizeof(float),
                                 cudaMemcpyDefault, q));
fail:
    return status;
}

/* My own rows into my GATHER, then my own READY cells, on the local queue.
 * With the kernel only the own rows of a tile shared with a neighbour's
 * shard (at most 127 at each end): it reads the others from INPUT, and a
 * copy within one GPU runs on SMs, of which the kernel leaves one. Without
 * the kernel every own row. */
static cgm_status ag_own_rows(p2p_state *st, const cgm_call *c, int S,
                              const ag_rows *a, bool kernel) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank;
    cudaStream_t local = st->queues[2];
    int64_t end = a->off + a->own, head_end = end, tail_start = end;
    if (kernel)
        plan_fused_own_copies(c->m, a->off, a->own, CGM_HGEMM_TILE_M,
                              &head_end, &tail_start);
    plan_step own_copy = data_step(PLAN_COPY, loc(r, PLAN_BUF_INPUT),
                                   loc(r, PLAN_BUF_GATHER), r, -1, a->off,
                                   head_end - a->off);
    CGM_TRY(copy_rows(st, own_copy, a->gather + (size_t)a->off * a->row_bytes,
                      a->row_bytes, a->in, a->in_pitch, a->row_bytes,
                      head_end - a->off, local));
    own_copy.row0 = tail_start;
    own_copy.rows = end - tail_start;
    CGM_TRY(copy_rows(st, own_copy,
                      a->gather + (size_t)tail_start * a->row_bytes,
                      a->row_bytes,
                      a->in + (size_t)(tail_start - a->off) * a->in_pitch,
                      a->in_pitch, a->row_bytes, end - tail_start, local));
    for (int q = 0; q < a->npieces; q++) {
        plan_flag f = {PLAN_FLAG_READY, r * S + q};
        CGM_TRY(signal_cell(st, p2p_flag_from(st, r, f), r, f, local));
    }
fail:
    return status;
}

/* One kernel over the gathered rows, each tile waiting for the READY cells
 * of the rows it loads (row_flags), own tiles first (e->order). */
static cgm_status ag_gemm_kernel(p2p_state *st, const cgm_call *c,
                                 const p2p_fused_entry *e, int S,
                                 const ag_rows *rows) {
    int r = st->rank;
    cgm_hgemm_args a = p2p_fused_kernel_args(st, c);
    a.m = c->m;
    a.x = rows->gather;
    a.ldx = c->k;
    if (rows->scales && rows->block) { /* row g's at scales[g * kb] */
        a.x_block_scale = rows->scales;
        a.x_block_ld = rows->kb;
    } else if (rows->scales) { /* row g's scale is its shard's */
        a.x_scale = rows->scales;
        a.x_scale_shard_rows = cgm_ceil_div(c->m, st->nranks);
    }
    a.row_flags = ready_cells(st, 0, 0);
    a.rows_per_flag = rows->rpf;
    a.flag_shard_rows = cgm_ceil_div(c->m, st->nranks);
    /* From (j, READY, j*S + q) to (j + 1, READY, (j + 1)*S + q). */
    a.flag_shard_stride =
        (int64_t)PLAN_FLAG_COUNT * (int64_t)st->flag_chunks + S;
    a.report_chunks_per_shard = S;
    a.m_block_order = e->order;
    a.x_own = rows->in;
    a.ldx_own = cgm_matrix_ld(&c->x);
    a.own_row0 = rows->off;
    a.own_rows = rows->own;
    return hgemm_traced(st, &a, data_step(PLAN_GEMM, loc(r, PLAN_BUF_GATHER),
                                          loc(r, PLAN_BUF_OUTPUT), -1, -1, 0,
                                          c->m));
}

/* cuBLASLt takes fp8 scale pointers 16-byte aligned, the API 4-byte
 * aligned ones: src copied into the 16-byte slot dst on the GEMM queue,
 * before the GEMMs that read it. */
static cgm_status scale_slot(p2p_state *st, float *dst, const float *src) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemcpyAsync(dst, src, sizeof(float), cudaMemcpyDeviceToDevice, st->queues[1]));
fail:
    return status;
}

/* ag_gemm_lt with fp8 (after every shard's rows and scales arrived): one
 * cuBLASLt GEMM per shard with rows. TENSOR: with the shard's scale and
 * W's in 16-byte slots (scale_slot); BLOCK: with the shard's rows' scales
 * (block_gemm). */
static cgm_status ag_gemm_lt_fp8(p2p_state *st, const cgm_call *c, const ag_rows *rows,
                                 const cgm_lt_gemm_args *whole) {
    cgm_status status = CGM_SUCCESS;
    int P = st->nranks;
    float *slots = rows->scales + ((P + 3) / 4) * 4; /* TENSOR: P x slots, then W's */
    size_t ldy = (size_t)cgm_matrix_ld(&c->y) * cgm_dtype_size(c->out_dtype);
    block_lt b;
    memset(&b, 0, sizeof b);
    if (rows->block) {
        b = block_lt_of(st, c);
        CGM_TRY(cgm_fp8_call_enqueue(&b.f, st->queues[1]));
    } else {
        CGM_TRY(scale_slot(st, slots + 4 * P, c->w.scale));
    }
    for (int j = 0; j < P; j++) {
        int64_t off = plan_shard_offset(c->m, j, P), m_j = plan_shard_rows(c->m, j, P);
        if (m_j == 0) continue;
        cgm_lt_gemm_args g = *whole;
        g.m = m_j;
        g.x = rows->gather + (size_t)off * rows->row_bytes;
        g.y = (char *)c->y.data + (size_t)off * ldy;
        plan_step what = data_step(PLAN_GEMM, loc(st->rank, PLAN_BUF_GATHER),
                                   loc(st->rank, PLAN_BUF_OUTPUT), j, -1, off, m_j);
        if (rows->block) {
            CGM_TRY(block_gemm(st, &b, &g, rows->scales + off * rows->kb, what));
            continue;
        }
        CGM_TRY(scale_slot(st, slots + 4 * j, rows->scales + j));
        g.w_scale = slots + 4 * P;
        g.x_scale = slots + 4 * j;
        CGM_TRY(lt_traced(st, &g, what));
    }
fail:
    return status;
}

/* Without the kernel: after my own rows (e->events[0]) and every peer's
 * pieces, one cuBLASLt GEMM over GATHER (fp8: one per shard). */
static cgm_status ag_gemm_lt(p2p_state *st, const cgm_call *c,
                             const p2p_fused_entry *e, int S,
                             const ag_rows *rows) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    cudaStream_t gemm = st->queues[1];
    CGM_CUDA_TRY(cudaEventRecord(e->events[0], st->queues[2]));
    CGM_CUDA_TRY(cudaStreamWaitEvent(gemm, e->events[0], 0));
    for (int j = 0; j < P; j++) {
        int pieces = (int)cgm_ceil_div(plan_shard_rows(c->m, j, P), rows->rpf);
        for (int q = 0; j != r && q < pieces; q++)
            CGM_TRY(wait_from(st, j, PLAN_FLAG_READY, j * S + q, gemm));
    }
    cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
    g.x = rows->gather;
    g.ldx = c->k;
    if (rows->scales) return ag_gemm_lt_fp8(st, c, rows, &g); /* no epilogue with fp8 on fused */
    p2p_epi_fused_lt(st, c, &g);
    CGM_TRY(lt_traced(st, &g, data_step(PLAN_GEMM, loc(r, PLAN_BUF_GATHER),
                                        loc(r, PLAN_BUF_OUTPUT), -1, -1, 0,
                                        c->m)));
    CGM_TRY(p2p_epi_fused_lt_finish(st, c, gemm));
fail:
    return status;
}

/* My shard into every peer's GATHER, r+1 first, piece by piece, each after
 * that peer's FREE. */
static cgm_status ag_push(p2p_state *st, const p2p_fused_entry *e, int S,
                          const ag_rows *a) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    cudaStream_t comm = st->queues[0];
    cudaEvent_t *copied = e->events + P * S + P;
    for (int t = 1; t < P && a->own > 0; t++) {
        int d = (r + t) % P;
        CGM_TRY(wait_from(st, d, PLAN_FLAG_FREE, -1, comm));
        char *peer_gather = (char *)st->ws.peer[d] + st->gather_offset +
                            (size_t)a->off * a->row_bytes;
        /* my scales before my rows: ordered before their READY */
        CGM_TRY(ag_put_scales(st, a, (char *)st->ws.peer[d] + st->gather_offset, comm));
        for (int q = 0; q < a->npieces; q++) {
            int64_t row0 = q * a->rpf;
            int64_t rows = a->own - row0 < a->rpf ? a->own - row0 : a->rpf;
            plan_step what = data_step(PLAN_COPY, loc(r, PLAN_BUF_INPUT),
                                       loc(d, PLAN_BUF_GATHER), r, r * S + q,
                                       a->off + row0, rows);
            CGM_TRY(copy_rows(st, what,
                              peer_gather + (size_t)row0 * a->row_bytes,
                              a->row_bytes, a->in + (size_t)row0 * a->in_pitch,
                              a->in_pitch, a->row_bytes, rows, comm));
            CGM_TRY(ready_after_copy(st, d, r * S + q,
                                     (size_t)rows * a->row_bytes,
                                     copied[(t - 1) * a->npieces + q]));
        }
    }
fail:
    return status;
}

/* The gathered input the call asked for, after the GEMM on its queue: the
 * peers' rows from GATHER, mine from INPUT. */
static cgm_status ag_gathered(p2p_state *st, const cgm_call *c,
                              const ag_rows *a) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank;
    cudaStream_t gemm = st->queues[1];
    size_t pitch = (size_t)cgm_matrix_ld(&c->x_gathered) *
                   cgm_dtype_size(c->in_dtype);
    size_t rb = a->row_bytes;
    int64_t end = a->off + a->own;
    char *xg = c->x_gathered.data;
    plan_step what = data_step(PLAN_COPY, loc(r, PLAN_BUF_GATHER),
                               loc(r, PLAN_BUF_NONE), -1, -1, 0, a->off);
    CGM_TRY(copy_rows(st, what, xg, pitch, a->gather, rb, rb, a->off, gemm));
    what.src.buf = PLAN_BUF_INPUT, what.row0 = a->off, what.rows = a->own;
    CGM_TRY(copy_rows(st, what, xg + (size_t)a->off * pitch, pitch, a->in,
                      a->in_pitch, rb, a->own, gemm));
    what.src.buf = PLAN_BUF_GATHER, what.row0 = end, what.rows = c->m - end;
    CGM_TRY(copy_rows(st, what, xg + (size_t)end * pitch, pitch,
                      a->gather + (size_t)end * rb, rb, rb, c->m - end, gemm));
    /* fp8: the gathered scales, TENSOR P floats (shards without rows leave
     * theirs), BLOCK [m, kb] (mine put there before the GEMM) */
    float *xgs = (float *)c->x_gathered.scale;
    if (a->scales && xgs && a->block && c->m * a->kb > 0)
        CGM_CUDA_TRY(cudaMemcpyAsync(xgs, a->scales, (size_t)(c->m * a->kb) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, gemm));
    for (int j = 0; a->scales && xgs && !a->block && j < st->nranks; j++)
        if (plan_shard_rows(c->m, j, st->nranks) > 0)
            CGM_CUDA_TRY(cudaMemcpyAsync(xgs + j, a->scales + j, sizeof(float), cudaMemcpyDeviceToDevice, gemm));
fail:
    return status;
}

cgm_status p2p_fused_ag(p2p_state *st, const cgm_call *c,
                        const p2p_fused_entry *e, int S, bool kernel,
                        bool dry) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    ag_rows a = ag_rows_of(st, c, S);
    if (ag_gather_need(c, P, a.row_bytes) > st->gather_bytes)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: the fused all-gather+GEMM needs %zu bytes of "
                         "gather workspace (%lld x %lld %s), found %zu (sized "
                         "from max_m/max_k); raise cgm_config.max_m/max_k",
                         ag_gather_need(c, P, a.row_bytes), (long long)c->m,
                         (long long)c->k, cgm_dtype_name(c->in_dtype),
                         st->gather_bytes);
    if (dry) return a.block && !kernel ? block_lt_ensure(st, c) : CGM_SUCCESS;
    /* Every peer with rows pushes them into my GATHER: let it. */
    for (int j = 0; j < P; j++)
        if (j != r && plan_shard_rows(c->m, j, P) > 0)
            CGM_TRY(signal_to(st, j, PLAN_FLAG_FREE, -1, st->queues[0]));
    CGM_TRY(ag_own_rows(st, c, S, &a, kernel));
    /* fp8: my scales into the gathered ones before the GEMM (its own
     * tiles do not wait for flags, and read them there) */
    CGM_TRY(ag_put_scales(st, &a, a.gather, st->queues[1]));
    CGM_TRY(kernel ? ag_gemm_kernel(st, c, e, S, &a)
                   : ag_gemm_lt(st, c, e, S, &a));
    /* Enqueued after the GEMM: the kernel runs the own rows first and waits
     * on flags, not on this queue, so an eager call starts computing at
     * once instead of after the host has enqueued every push. */
    CGM_TRY(ag_push(st, e, S, &a));
    if (c->has_x_gathered) CGM_TRY(ag_gathered(st, c, &a));
fail:
    return status;
}

/* ------------------------------------------------------------ GEMM+RS */

/* Where the partials are (the same for every helper below). */
typedef struct rs_slots {
    cgm_dtype pd;     /* the partial dtype */
    size_t prow;      /* bytes of a partial row */
    size_t stride;    /* bytes of a slot: ceil(m / P) rows */
    int64_t own, off, rpf; /* my shard's rows, its first row, rows per piece */
    int nslots;       /* local partial slots in turn, 1 or 2 */
} rs_slots;

/* fp8 GEMM+RS, for cuBLASLt's partials, on the GEMM queue: TENSOR this
 * rank's x and w scales in two 16-byte slots at the start of GATHER
 * (which GEMM+RS does not use; scale_slot); BLOCK W's side (block_lt). */
static cgm_status rs_scales(p2p_state *st, const cgm_call *c) {
    cgm_status status = CGM_SUCCESS;
    if (!cgm_dtype_is_fp8(c->in_dtype)) return CGM_SUCCESS;
    if (is_block(c)) {
        block_lt b = block_lt_of(st, c);
        return cgm_fp8_call_enqueue(&b.f, st->queues[1]);
    }
    float *slots = (float *)((char *)st->ws.local + st->gather_offset);
    CGM_TRY(scale_slot(st, slots, c->x.scale));
    CGM_TRY(scale_slot(st, slots + 4, c->w.scale));
fail:
    return status;
}

/* Rows [row0, row0 + rows) of the call's X times W into `y` (dense, n
 * wide, the partial dtype pd), no epilogue: a partial, with cuBLASLt on
 * the compute queue; fp8: scales from rs_scales (BLOCK: X's rows' own,
 * block_gemm). */
static cgm_status partial_gemm(p2p_state *st, const cgm_call *c, int64_t row0,
                               int64_t rows, void *y, cgm_dtype pd,
                               plan_step what) {
    cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
    if (cgm_dtype_is_fp8(c->in_dtype) && !is_block(c)) {
        const float *slots = (const float *)((const char *)st->ws.local + st->gather_offset);
        g.x_scale = slots, g.w_scale = slots + 4;
    }
    g.m = rows;
    g.x = (const char *)c->x.data + (size_t)row0 * (size_t)g.ldx *
                                        cgm_dtype_size(c->in_dtype);
    g.y = y;
    g.ldy = c->n;
    g.out_dtype = pd;
    g.bias = NULL;
    g.accumulate = false;
    if (is_block(c)) {
        block_lt b = block_lt_of(st, c);
        return block_gemm(st, &b, &g, c->x.scale ? c->x.scale + row0 * b.f.kb : NULL, what);
    }
    return lt_traced(st, &g, what);
}

/* Each peer's rows, destination r+1 first: per piece a GEMM into a local
 * partial slot (two in turn), then its push into the owner's RECV slot r
 * with its READY. */
static cgm_status rs_push_peers(p2p_state *st, const cgm_call *c,
                                const p2p_fused_entry *e, int S,
                                const rs_slots *sl) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    cudaStream_t comm = st->queues[0], gemm = st->queues[1];
    cudaEvent_t *piece_done = e->events, *pushed = e->events + P * S,
                *copied = e->events + P * S + P;
    for (int t = 1; t < P; t++) {
        int d = (r + t) % P;
        int64_t rows_d = plan_shard_rows(c->m, d, P);
        int64_t off_d = plan_shard_offset(c->m, d, P);
        if (rows_d == 0) continue;
        char *partial = (char *)st->partial +
                        (size_t)((t - 1) % sl->nslots) * sl->stride;
        char *dst = (char *)st->ws.peer[d] + st->recv_offset +
                    (size_t)r * sl->stride;
        /* The slot's previous pushes are done before it is overwritten. */
        if (t - 1 >= sl->nslots)
            CGM_CUDA_TRY(cudaStreamWaitEvent(gemm,
                                             pushed[t - 1 - sl->nslots], 0));
        CGM_TRY(wait_from(st, d, PLAN_FLAG_FREE, -1, comm));
        int npieces = (int)cgm_ceil_div(rows_d, sl->rpf);
        for (int q = 0; q < npieces; q++) {
            int64_t row0 = q * sl->rpf;
            int64_t rows = rows_d - row0 < sl->rpf ? rows_d - row0 : sl->rpf;
            size_t at = (size_t)row0 * sl->prow;
            CGM_TRY(partial_gemm(st, c, off_d + row0, rows, partial + at,
                                 sl->pd,
                                 data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                           loc(r, PLAN_BUF_PARTIAL), d,
                                           d * S + q, off_d + row0, rows)));
            cudaEvent_t ev = piece_done[(t - 1) * S + q];
            CGM_CUDA_TRY(cudaEventRecord(ev, gemm));
            CGM_CUDA_TRY(cudaStreamWaitEvent(comm, ev, 0));
            CGM_TRY(push_partial(st, d, d * S + q, off_d + row0, rows,
                                 dst + at, partial + at, sl->prow,
                                 copied[(t - 1) * S + q]));
        }
        CGM_CUDA_TRY(cudaEventRecord(pushed[t - 1], comm));
    }
fail:
    return status;
}

/* My rows in one kernel, which adds every peer's partial (my RECV slot j)
 * in its epilogue, each waited for per piece on its READY(r*S + q) cells:
 * the main loop runs while the partials arrive. */
static cgm_status rs_own_kernel(p2p_state *st, const cgm_call *c, int S,
                                const rs_slots *sl) {
    int r = st->rank;
    int64_t ldx = cgm_matrix_ld(&c->x);
    cgm_hgemm_args a = p2p_fused_kernel_args(st, c);
    a.m = sl->own;
    a.x = (const char *)c->x.data +
          (size_t)sl->off * (size_t)ldx * cgm_dtype_size(c->in_dtype);
    a.ldx = ldx;
    if (a.x_block_scale) a.x_block_scale += sl->off * a.x_block_ld; /* my rows' */
    a.addend_dtype = sl->pd;
    a.addend_ld = c->n;
    a.rows_per_flag = sl->rpf;
    a.report_addend_chunk0 = r * S;
    for (int j = 0; j < st->nranks; j++) {
        if (j == r) continue;
        int i = a.naddends++;
        a.addend[i] = (const char *)st->ws.local + st->recv_offset +
                      (size_t)j * sl->stride;
        a.addend_flags[i] = ready_cells(st, j, r * S);
        a.report_addend_peer[i] = j;
    }
    return hgemm_traced(st, &a, data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                          loc(r, PLAN_BUF_OUTPUT), r, -1,
                                          sl->off, sl->own));
}

/* Without the kernel: my rows into my own RECV slot with cuBLASLt, then per
 * piece, once every peer's partial is in, one reduce into the output. */
static cgm_status rs_own_reduce(p2p_state *st, const cgm_call *c, int S,
                                const rs_slots *sl) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    cudaStream_t gemm = st->queues[1];
    const char *recv = (const char *)st->ws.local + st->recv_offset;
    size_t out_row =
        (size_t)cgm_matrix_ld(&c->y) * cgm_dtype_size(c->out_dtype);
    CGM_TRY(partial_gemm(st, c, sl->off, sl->own,
                         (char *)recv + (size_t)r * sl->stride, sl->pd,
                         data_step(PLAN_GEMM, loc(r, PLAN_BUF_INPUT),
                                   loc(r, PLAN_BUF_RECV), r, -1, sl->off,
                                   sl->own)));
    for (int q = 0; q < (int)cgm_ceil_div(sl->own, sl->rpf); q++) {
        int64_t row0 = q * sl->rpf;
        int64_t rows = sl->own - row0 < sl->rpf ? sl->own - row0 : sl->rpf;
        cgm_dev_reduce_args ra;
        memset(&ra, 0, sizeof ra);
        for (int j = 0; j < P; j++) {
            if (j != r)
                CGM_TRY(wait_from(st, j, PLAN_FLAG_READY, r * S + q, gemm));
            ra.src[j] = recv + (size_t)j * sl->stride +
                        (size_t)row0 * sl->prow;
            ra.src_ld[j] = c->n;
        }
        ra.nsources = P;
        ra.src_dtype = (int)sl->pd;
        ra.dst = (char *)c->y.data + (size_t)row0 * out_row;
        ra.dst_ld = cgm_matrix_ld(&c->y);
        ra.dst_dtype = (int)c->out_dtype;
        ra.accumulate = c->accumulate;
        ra.bias = c->has_bias ? c->bias.data : NULL;
        ra.rows = rows;
        ra.cols = c->n;
        p2p_epi_fused_reduce(c, row0, &ra);
        int t = trace_open(st, data_step(PLAN_REDUCE, loc(r, PLAN_BUF_RECV),
                                         loc(r, PLAN_BUF_OUTPUT), r,
                                         r * S + q, sl->off + row0, rows),
                           gemm);
        CGM_CUDA_TRY(cgm_dev_reduce(&ra, st->dev, gemm));
        CGM_TRY(trace_close(st, t, gemm));
    }
fail:
    return status;
}

cgm_status p2p_fused_rs(p2p_state *st, const cgm_call *c,
                        const p2p_fused_entry *e, int S, bool kernel,
                        bool dry) {
    cgm_status status = CGM_SUCCESS;
    int r = st->rank, P = st->nranks;
    rs_slots sl;
    sl.pd = c->partial_dtype;
    sl.prow = (size_t)c->n * cgm_dtype_size(sl.pd);
    sl.stride = (size_t)cgm_ceil_div(c->m, P) * sl.prow;
    sl.own = plan_shard_rows(c->m, r, P);
    sl.off = plan_shard_offset(c->m, r, P);
    sl.rpf = p2p_fused_piece_rows(c->m, P, S);
    sl.nslots = (int)(sl.stride ? st->partial_bytes / sl.stride : 0);
    if (sl.nslots > 2) sl.nslots = 2;
    if ((size_t)P * sl.stride > st->recv_bytes || sl.nslots < 1)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: the fused GEMM+reduce-scatter with m=%lld, "
                         "n=%lld needs %d recv slots and a partial slot of "
                         "%zu bytes, the workspace holds %zu and %zu bytes "
                         "(sized from max_m/max_n); raise cgm_config.max_m/"
                         "max_n", (long long)c->m, (long long)c->n, P,
                         sl.stride, st->recv_bytes, st->partial_bytes);
    if (dry) return is_block(c) ? block_lt_ensure(st, c) : CGM_SUCCESS;
    CGM_TRY(rs_scales(st, c));
    /* Every peer writes its partial of my rows into my RECV: let it. */
    if (sl.own > 0)
        for (int j = 0; j < P; j++)
            if (j != r)
                CGM_TRY(signal_to(st, j, PLAN_FLAG_FREE, -1, st->queues[0]));
    CGM_TRY(rs_push_peers(st, c, e, S, &sl));
    if (sl.own == 0) return CGM_SUCCESS;
    CGM_TRY(kernel ? rs_own_kernel(st, c, S, &sl)
                   : rs_own_reduce(st, c, S, &sl));
fail:
    return status;
}
