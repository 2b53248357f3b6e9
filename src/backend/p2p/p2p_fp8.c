/* The p2p backend's fp8 calls through the chunked executor (p2p_fp8.h). */
#include <string.h>

#include "backend/p2p/p2p_fused.h"
#include "backend/p2p/p2p_views.h"
#include "device/fp8.h"

static bool is_fp8(const cgm_call *c) {
    return c->has_gemm && cgm_dtype_is_fp8(c->in_dtype);
}

static int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }

/* An fp8 Y, or a bias cgm_dev_reduce cannot add (another dtype than Y). */
static bool finishes(const cgm_call *c) {
    return is_fp8(c) && (cgm_dtype_is_fp8(c->out_dtype) ||
                         (c->has_bias && c->bias.dtype != c->out_dtype));
}

/* The workspace's regions: the call's (W), X's slot, AG's packed rows,
 * per queue the GEMM scratch and the sums. base NULL: sizes only. */
static size_t layout(const p2p_state *st, const cgm_call *c, char *base,
                     p2p_fp8 *f) {
    const int P = st->nranks;
    f->kb = cgm_ceil_div(c->k, 128);
    f->k16 = round16(c->k);
    f->pw = f->k16 + round16((int64_t)sizeof(float) * (f->block ? f->kb : 1));
    f->seg = cgm_ceil_div(c->m, P);
    if (f->seg < 1) f->seg = 1;
    size_t at = cgm_fp8_call_bytes(c);
    f->x_slot = base ? (float *)(base + at) : NULL;
    at += 256;
    f->packed = NULL;
    if (c->op == CGM_OP_ALL_GATHER_GEMM) {
        f->packed = base ? base + at : NULL;
        at += cgm_fp8_round256((size_t)(cgm_ceil_div(c->m, P) * f->pw));
    }
    f->scratch_bytes = cgm_fp8_rows_scratch_bytes(c, f->seg);
    size_t sums = finishes(c) ? cgm_fp8_round256((size_t)(f->seg * c->n) * sizeof(float)) : 0;
    for (int q = 0; q < P2P_MAX_QUEUES; q++) {
        f->scratch[q] = base ? base + at : NULL;
        at += f->scratch_bytes;
        f->sums[q] = base && sums ? (float *)(base + at) : NULL;
        at += sums;
    }
    return at;
}

static cgm_status gemm_cb(void *ctx, const cgm_lt_gemm_args *g, cudaStream_t stream);

/* The event the compute queues wait on, and the workspace for `need`. */
static cgm_status ensure(p2p_state *st, size_t need, bool capturing) {
    cgm_status status = CGM_SUCCESS;
    if (!st->fp8_ready)
        CGM_CUDA_TRY(cudaEventCreateWithFlags(&st->fp8_ready, cudaEventDisableTiming));
    CGM_TRY(cgm_fp8_workspace_ensure(&st->fp8_ws, need, capturing, "p2p"));
fail:
    return status;
}

cgm_status p2p_fp8_setup(p2p_exec_ctx *x, bool capturing) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    p2p_fp8 *f = &x->fp8;
    memset(f, 0, sizeof *f);
    if (!is_fp8(c)) return CGM_SUCCESS;
    f->block = c->scaling == CGM_SCALING_BLOCK_1X128;
    CGM_TRY(ensure(x->st, layout(x->st, c, NULL, f), capturing));
    layout(x->st, c, x->st->fp8_ws.buf, f);
    cgm_fp8_call_fill(c, x->st->fp8_ws.buf, gemm_cb, x, &f->f);
    f->on = true;
fail:
    return status;
}

/* AG: this rank's rows packed: bytes (zero padded), then their scales. */
static cgm_status pack_own(p2p_exec_ctx *x, cudaStream_t q0) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    const p2p_fp8 *f = &x->fp8;
    const int64_t mr = plan_shard_rows(c->m, x->st->rank, x->st->nranks);
    if (mr == 0) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemsetAsync(f->packed, 0, (size_t)(mr * f->pw), q0));
    if (c->k > 0)
        CGM_CUDA_TRY(cudaMemcpy2DAsync(f->packed, (size_t)f->pw, c->x.data,
                                       (size_t)cgm_matrix_ld(&c->x), (size_t)c->k,
                                       (size_t)mr, cudaMemcpyDeviceToDevice, q0));
    CGM_CUDA_TRY(cgm_dev_fp8_scale_rows(c->k > 0 ? c->x.scale : NULL, f->block ? f->kb : 0,
                                        mr, f->block ? f->kb : 1, f->packed + f->k16, f->pw,
                                        q0));
fail:
    return status;
}

cgm_status p2p_fp8_begin(p2p_exec_ctx *x, int nqueues) {
    cgm_status status = CGM_SUCCESS;
    p2p_state *st = x->st;
    const cgm_call *c = x->call;
    p2p_fp8 *f = &x->fp8;
    cudaStream_t q0 = st->queues[0];
    if (!f->on) return CGM_SUCCESS;
    CGM_TRY(cgm_fp8_call_enqueue(&f->f, q0));
    if (c->op == CGM_OP_ALL_GATHER_GEMM)
        CGM_TRY(pack_own(x, q0));
    else if (!f->block)
        CGM_TRY(cgm_fp8_put_slot(f->x_slot, c->m > 0 && c->k > 0 ? c->x.scale : NULL, q0));
    if (c->y_amax) CGM_CUDA_TRY(cudaMemsetAsync(c->y_amax, 0, sizeof(float), q0));
    CGM_CUDA_TRY(cudaEventRecord(st->fp8_ready, q0));
    for (int q = 1; q < nqueues; q++)
        CGM_CUDA_TRY(cudaStreamWaitEvent(st->queues[q], st->fp8_ready, 0));
fail:
    return status;
}

static cgm_status gemm_cb(void *ctx, const cgm_lt_gemm_args *g, cudaStream_t stream) {
    p2p_exec_ctx *x = ctx;
    p2p_state *st = x->st;
    if (x->dry) /* before the fork: the first sight of a shape may time it */
        return x->search ? cgm_lt_prepare(st->lt, g, P2P_LT_WORKSPACE,
                                          (cudaStream_t)x->call->stream, st->timeout_ms)
                         : CGM_SUCCESS;
    return cgm_lt_gemm(st->lt, g, st->lt_workspace[x->fp8.queue], P2P_LT_WORKSPACE, stream);
}

/* Rows from global row `row` to the end of its shard. */
static int64_t to_shard_end(const p2p_state *st, int64_t m, int64_t row) {
    for (int j = 0; j < st->nranks; j++) {
        int64_t off = plan_shard_offset(m, j, st->nranks), rows = plan_shard_rows(m, j, st->nranks);
        if (row >= off && row < off + rows) return off + rows - row;
    }
    return 0;
}

cgm_status p2p_fp8_gemm(p2p_exec_ctx *x, const cgm_lt_gemm_args *g,
                        int64_t x_row0, int queue, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    p2p_fp8 *f = &x->fp8;
    const bool ag = c->op == CGM_OP_ALL_GATHER_GEMM;
    const size_t ey = cgm_dtype_size(g->out_dtype);
    f->queue = queue;
    f->f.dry = x->dry;
    for (int64_t d = 0, len = 0; d < g->m; d += len) {
        len = g->m - d < f->seg ? g->m - d : f->seg;
        if (ag) { /* a TENSOR scale per shard: no GEMM spans two */
            int64_t end = to_shard_end(x->st, c->m, x_row0 + d);
            if (end < 1)
                return cgm_error(CGM_ERROR_INTERNAL,
                                 "p2p: fp8 GEMM of row %lld, outside m = %lld; please "
                                 "report this bug", (long long)(x_row0 + d), (long long)c->m);
            if (end < len) len = end;
        }
        cgm_lt_gemm_args h = *g;
        h.m = len;
        h.x = (const char *)g->x + (size_t)(d * g->ldx); /* fp8: 1 byte */
        h.y = (char *)g->y + (size_t)(d * g->ldy) * ey;
        const float *xs = f->x_slot;
        int64_t ld = 0;
        if (ag) {
            xs = (const float *)((const char *)h.x + f->k16);
            ld = f->pw / (int64_t)sizeof(float);
        } else if (f->block) {
            xs = c->x.scale ? c->x.scale + (x_row0 + d) * f->kb : NULL;
        }
        CGM_TRY(cgm_fp8_rows_gemm(&f->f, &h, xs, ld, c->y.scale, c->y_amax,
                                  f->scratch[queue], f->scratch_bytes, stream));
    }
fail:
    return status;
}

bool p2p_fp8_reduce_finishes(const p2p_exec_ctx *x, const cgm_dev_reduce_args *a) {
    const cgm_call *c = x->call;
    if (!x->fp8.on) return false;
    return cgm_dtype_is_fp8((cgm_dtype)a->dst_dtype) ||
           (a->bias && (int)c->bias.dtype != a->dst_dtype);
}

cgm_status p2p_fp8_reduce(p2p_exec_ctx *x, const cgm_dev_reduce_args *a, int queue,
                          cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    const p2p_fp8 *f = &x->fp8;
    if (a->rows > f->seg || a->cols != c->n || !f->sums[queue])
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: an fp8 reduce of %lld x %lld, its fp32 sums hold %lld x %lld; "
                         "please report this bug", (long long)a->rows, (long long)a->cols,
                         (long long)f->seg, (long long)c->n);
    if (x->dry) return CGM_SUCCESS;
    cgm_dev_reduce_args r = *a;
    r.dst = f->sums[queue];
    r.dst_ld = a->cols;
    r.dst_dtype = (int)CGM_DTYPE_FP32;
    r.accumulate = 0;
    r.bias = NULL;
    CGM_CUDA_TRY(cgm_dev_reduce(&r, x->st->dev, stream));
    cgm_dev_finish_args fa;
    memset(&fa, 0, sizeof fa);
    fa.rows = a->rows;
    fa.cols = a->cols;
    fa.src = f->sums[queue];
    fa.src_ld = a->cols;
    fa.dst = a->dst;
    fa.dst_ld = a->dst_ld;
    fa.dst_dtype = a->dst_dtype;
    fa.accumulate = a->accumulate;
    fa.bias = a->bias;
    fa.bias_dtype = a->bias ? (int)c->bias.dtype : 0;
    if (cgm_dtype_is_fp8((cgm_dtype)a->dst_dtype)) {
        fa.scale = c->y.scale;
        fa.amax = c->y_amax;
    }
    CGM_CUDA_TRY(cgm_dev_fp8_finish(&fa, stream));
fail:
    return status;
}

cgm_status p2p_fp8_copy_gathered(p2p_exec_ctx *x, int shard, const char *src,
                                 int64_t off, int64_t rows, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    const p2p_fp8 *f = &x->fp8;
    const cgm_matrix *xg = &c->x_gathered;
    const size_t ldg = (size_t)cgm_matrix_ld(xg);
    float *scale = (float *)xg->scale;
    if (rows <= 0 || c->k <= 0) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemcpy2DAsync((char *)xg->data + (size_t)off * ldg, ldg, src, (size_t)f->pw,
                                   (size_t)c->k, (size_t)rows, cudaMemcpyDefault, stream));
    if (!scale) return CGM_SUCCESS;
    if (!f->block)
        CGM_CUDA_TRY(cudaMemcpyAsync(scale + shard, src + f->k16, sizeof(float),
                                     cudaMemcpyDefault, stream));
    else
        CGM_CUDA_TRY(cudaMemcpy2DAsync(scale + off * f->kb, (size_t)f->kb * sizeof(float),
                                       src + f->k16, (size_t)f->pw,
                                       (size_t)f->kb * sizeof(float), (size_t)rows,
                                       cudaMemcpyDefault, stream));
fail:
    return status;
}

cgm_status p2p_fp8_check(const cgm_comm *comm, const cgm_call *call) {
    if (!is_fp8(call)) return CGM_SUCCESS;
    cgm_status s = cgm_gpu_fp8_check("p2p", comm->cuda_device, call);
    if (s != CGM_SUCCESS) return s;
    const char *fused = call->algo == CGM_ALGO_FUSED ? p2p_fused_fp8_problem(call) : NULL;
    if (fused)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the p2p backend: algorithm fused with fp8 inputs (%s x %s, %s Y): %s; "
                         "every fp8 call runs on split, ring and no_overlap (bulk for "
                         "cgm_bulk_overlap), or pass CGM_ALGO_AUTO",
                         cgm_dtype_name(call->in_dtype), cgm_dtype_name(call->w_dtype),
                         cgm_dtype_name(call->out_dtype), fused);
    if (call->op == CGM_OP_GEMM_ALL_REDUCE && call->y_amax)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the p2p backend: GEMM+AR with an %s output and options.y_amax: each "
                         "rank reduces only its own rows, so no rank sees the amax of all of Y; "
                         "run this call on the nccl backend (options.backend = "
                         "CGM_BACKEND_NCCL), or pass y_amax = NULL",
                         cgm_dtype_name(call->out_dtype));
    return CGM_SUCCESS;
}
