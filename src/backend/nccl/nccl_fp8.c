/* The nccl backend's fp8 calls (docs/NCCL_BACKEND.md, "FP8"): their
 * workspace, the scales prepared at the start of an op, the chunk GEMMs
 * through cgm_fp8_rows_gemm, and the finish of GEMM+RS/AR outputs that
 * cuBLASLt cannot write from summed partials. The ops' schedules stay in
 * nccl_ops.c and nccl_bulk.c. */
#include <string.h>

#include "backend/nccl/nccl_backend.h"
#include "device/fp8.h"

static bool is_fp8(const cgm_call *c) {
    return c->has_gemm && cgm_dtype_is_fp8(c->in_dtype);
}

/* The rows of the largest GEMM chunk an op issues: AG, RS and AR run their
 * fp8 GEMMs per shard or per piece of one (no_overlap too); bulk's GEMM is
 * whole. */
static int64_t max_rows(const ncclb_state *st, const cgm_call *c) {
    if (c->op == CGM_OP_BULK) return c->m;
    return cgm_ceil_div(c->m, st->nranks);
}

/* The workspace's regions for `c`: the call's (W), the X slots, the
 * gathered scales, the scratch of each stream. base NULL: sizes only. */
static size_t layout(const ncclb_state *st, const cgm_call *c, char *base,
                     ncclb_fp8 *f) {
    const bool block = c->scaling == CGM_SCALING_BLOCK_1X128;
    const int64_t kb = cgm_ceil_div(c->k, 128);
    size_t at = cgm_fp8_call_bytes(c);
    f->x_slots = base ? (float *)(base + at) : NULL;
    at += cgm_fp8_round256((size_t)st->nranks * 4 * sizeof(float));
    f->gathered = NULL;
    if (block && c->op == CGM_OP_ALL_GATHER_GEMM) {
        f->gathered = base ? (float *)(base + at) : NULL;
        at += cgm_fp8_round256((size_t)(c->m * kb) * sizeof(float));
    }
    f->scratch_bytes = cgm_fp8_rows_scratch_bytes(c, max_rows(st, c));
    for (int i = 0; i <= NCCLB_COMPUTE_STREAMS; i++) {
        f->scratch[i] = base ? base + at : NULL;
        at += f->scratch_bytes;
    }
    return at;
}

cgm_status ncclb_fp8_ensure(ncclb_state *st, const cgm_call *call,
                            bool capturing) {
    cgm_status status = CGM_SUCCESS;
    ncclb_fp8 f;
    if (!is_fp8(call)) return CGM_SUCCESS;
    /* GEMM+RS sums into the gather buffer's fp32 rows when it finishes. */
    if (call->op == CGM_OP_GEMM_REDUCE_SCATTER && ncclb_fp8_finishes(call))
        CGM_TRY(ncclb_ensure_buffer(st, NCCLB_BUF_GATHER, capturing));
    CGM_TRY(cgm_fp8_workspace_ensure(&st->fp8_ws, layout(st, call, NULL, &f),
                                     capturing, "nccl"));
fail:
    return status;
}

static cgm_status fp8_gemm_cb(void *ctx, const cgm_lt_gemm_args *g,
                              cudaStream_t stream) {
    return ncclb_gemm(ctx, g, stream);
}

/* AG, TENSOR: every rank's scale into its slot (16 bytes per rank). */
static cgm_status gather_slots(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const char *what = "AG+GEMM: ncclAllGather of the fp8 X scales";
    float *slots = op->fp8.x_slots;
    CGM_TRY(ncclb_call_enter(st, what));
    CGM_TRY(ncclb_settle(st,
                         ncclAllGather(slots + 4 * st->rank, slots,
                                       4 * sizeof(float), ncclUint8,
                                       st->nccl, st->comm_stream),
                         what));
    ncclb_watch_group(op);
fail:
    return status;
}

cgm_status ncclb_fp8_begin(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    ncclb_fp8 *f = &op->fp8;
    cudaStream_t cs = st->comm_stream;
    if (!is_fp8(c)) return CGM_SUCCESS;
    layout(st, c, st->fp8_ws.buf, f);
    f->on = true;
    f->block = c->scaling == CGM_SCALING_BLOCK_1X128;
    f->kb = cgm_ceil_div(c->k, 128);
    CGM_TRY(cgm_fp8_call_prepare(c, st->fp8_ws.buf, cs, fp8_gemm_cb, op, &f->f));
    const bool ag = c->op == CGM_OP_ALL_GATHER_GEMM;
    const int own = ag ? st->rank : 0;
    const int64_t mr = ag ? cgm_shard_rows(c->m, st->rank, st->nranks) : c->m;
    if (!f->block) {
        CGM_TRY(cgm_fp8_put_slot(f->x_slots + 4 * own,
                                 mr > 0 && c->k > 0 ? c->x.scale : NULL, cs));
        if (ag && st->nranks > 1) CGM_TRY(gather_slots(op));
    } else if (ag && mr > 0 && c->k > 0) {
        int64_t off = cgm_shard_offset(c->m, st->rank, st->nranks);
        CGM_CUDA_TRY(cudaMemcpyAsync(f->gathered + off * f->kb, c->x.scale,
                                     (size_t)(mr * f->kb) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, cs));
    }
    if (c->y_amax) CGM_CUDA_TRY(cudaMemsetAsync(c->y_amax, 0, sizeof(float), cs));
    cudaEvent_t ready;
    CGM_TRY(ncclb_event(op, &ready));
    CGM_CUDA_TRY(cudaEventRecord(ready, cs));
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS; i++)
        CGM_CUDA_TRY(cudaStreamWaitEvent(st->compute[i], ready, 0));
fail:
    return status;
}

cgm_status ncclb_fp8_gemm(ncclb_op *op, const cgm_lt_gemm_args *g,
                          const float *x_scales, cudaStream_t stream) {
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    char *scratch = op->fp8.scratch[NCCLB_COMPUTE_STREAMS];
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS; i++)
        if (stream == st->compute[i]) scratch = op->fp8.scratch[i];
    return cgm_fp8_rows_gemm(&op->fp8.f, g, x_scales, 0, c->y.scale, c->y_amax,
                             scratch, op->fp8.scratch_bytes, stream);
}

const float *ncclb_fp8_own_scales(const ncclb_op *op, int64_t row0) {
    const ncclb_fp8 *f = &op->fp8;
    if (!f->block) {
        int own = op->call->op == CGM_OP_ALL_GATHER_GEMM ? op->st->rank : 0;
        return f->x_slots + 4 * own;
    }
    return op->call->x.scale ? op->call->x.scale + row0 * f->kb : NULL;
}

bool ncclb_fp8_finishes(const cgm_call *c) {
    if (!is_fp8(c)) return false;
    return cgm_dtype_is_fp8(c->out_dtype) ||
           (c->has_bias && c->bias.dtype != c->out_dtype);
}

cgm_status ncclb_fp8_finish(ncclb_op *op, const float *src, int64_t y_row0,
                            int64_t rows, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    const int64_t ldy = cgm_matrix_ld(&c->y);
    cgm_dev_finish_args a;
    memset(&a, 0, sizeof a);
    a.rows = rows;
    a.cols = c->n;
    a.src = src;
    a.src_ld = c->n;
    a.dst = (char *)c->y.data + (size_t)(y_row0 * ldy) * cgm_dtype_size(c->out_dtype);
    a.dst_ld = ldy;
    a.dst_dtype = (int)c->out_dtype;
    a.accumulate = c->accumulate;
    a.bias = c->has_bias ? c->bias.data : NULL;
    a.bias_dtype = c->has_bias ? (int)c->bias.dtype : 0;
    if (cgm_dtype_is_fp8(c->out_dtype)) {
        a.scale = c->y.scale;
        a.amax = c->y_amax;
    }
    CGM_CUDA_TRY(cgm_dev_fp8_finish(&a, stream));
fail:
    return status;
}

const float *ncclb_fp8_gathered_scales(const ncclb_op *op, int shard,
                                       int64_t row0) {
    const ncclb_fp8 *f = &op->fp8;
    return f->block ? f->gathered + row0 * f->kb : f->x_slots + 4 * shard;
}

ncclb_xfer ncclb_fp8_scale_xfer(const ncclb_op *op, int send_shard,
                                ncclb_piece sp, int to, ncclb_piece rp,
                                int from) {
    /* Own rows too come from `gathered` (ncclb_fp8_begin put them there
     * on the comm stream, before every exchange). */
    const ncclb_fp8 *f = &op->fp8;
    const size_t row = (size_t)f->kb * sizeof(float);
    (void)send_shard;
    ncclb_xfer x = {f->gathered + sp.row0 * f->kb, (size_t)sp.rows * row, to,
                    f->gathered + rp.row0 * f->kb, (size_t)rp.rows * row,
                    from};
    return x;
}

cgm_status ncclb_fp8_copy_gathered_scales(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    ncclb_state *st = op->st;
    const ncclb_fp8 *f = &op->fp8;
    float *dst = (float *)c->x_gathered.scale;
    if (!dst || c->m == 0 || c->k == 0) return CGM_SUCCESS;
    if (f->block) {
        CGM_CUDA_TRY(cudaMemcpyAsync(dst, f->gathered,
                                     (size_t)(c->m * f->kb) * sizeof(float),
                                     cudaMemcpyDeviceToDevice, st->comm_stream));
        return CGM_SUCCESS;
    }
    for (int s = 0; s < st->nranks; s++)
        if (cgm_shard_rows(c->m, s, st->nranks) > 0)
            CGM_CUDA_TRY(cudaMemcpyAsync(dst + s, f->x_slots + 4 * s,
                                         sizeof(float),
                                         cudaMemcpyDeviceToDevice,
                                         st->comm_stream));
fail:
    return status;
}
