/* The nccl backend's bulk overlap: the whole local GEMM on a compute
 * stream beside the whole collective on the comm stream.
 *   AG: even shards (m % P == 0) use ncclAllGather in place; uneven shards
 *       (and m < P) use one group of ncclSend/ncclRecv.
 *   RS: fp32 with even shards uses ncclReduceScatter (sums in fp32);
 *       otherwise every rank ships each owner its rows (one group) and the
 *       owner sums them in fp32 with cgm_dev_reduce, converting once. */
#include <stdlib.h>
#include <string.h>

#include "backend/nccl/nccl_backend.h"

static char *at(const void *base, int64_t elements, size_t element_size) {
    return (char *)base + (size_t)elements * element_size;
}

/* The local GEMM, with the call's epilogue (a bias gradient into slot 0,
 * rounded into bgrad by ncclb_epi_end; none for an empty C). */
static cgm_status bulk_gemm(ncclb_op *op) {
    cgm_lt_gemm_args g = cgm_lt_args_from_call(op->call);
    ncclb_epi_args(op, &g, 0, 0);
    if (ncclb_epi_gemm_grad(op->call)) op->epi_slots = g.m > 0 && g.n > 0;
    if (op->fp8.on) /* fp8 a and b (nccl_fp8.c) */
        return ncclb_fp8_gemm(op, &g, ncclb_fp8_own_scales(op, 0),
                              ncclb_next_compute(op));
    return ncclb_gemm(op, &g, ncclb_next_compute(op));
}

static cgm_status copy_rows(void *dst, int64_t dst_ld, const void *src,
                            int64_t src_ld, int64_t rows, int64_t cols,
                            size_t es, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    if (rows <= 0 || cols <= 0) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemcpy2DAsync(dst, (size_t)dst_ld * es, src,
                                   (size_t)src_ld * es, (size_t)cols * es,
                                   (size_t)rows, cudaMemcpyDeviceToDevice,
                                   stream));
fail:
    return status;
}

static cgm_status bulk_all_gather(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    const int P = st->nranks, r = st->rank;
    const int64_t M = c->coll_m, cols = c->coll_cols;
    const size_t es = cgm_dtype_size(c->coll_dtype);
    const int64_t mr = cgm_shard_rows(M, r, P), off = cgm_shard_offset(M, r, P);
    const bool dense = cgm_matrix_ld(&c->recv) == cols;
    char *R = dense ? (char *)c->recv.data : (char *)st->buf[NCCLB_BUF_GATHER];
    ncclb_xfer *x = NULL;
    /* Own rows in place, then the others around them. */
    CGM_TRY(copy_rows(at(R, off * cols, es), cols, c->send.data,
                      cgm_matrix_ld(&c->send), mr, cols, es, st->comm_stream));
    if (M % P == 0 && M > 0 && cols > 0) {
        CGM_TRY(ncclb_call_enter(st, "bulk: ncclAllGather"));
        CGM_TRY(ncclb_settle(st,
                             ncclAllGather(at(R, off * cols, es), R,
                                           (size_t)(mr * cols) * es, ncclUint8,
                                           st->nccl, st->comm_stream),
                             "bulk: ncclAllGather"));
    } else {
        x = calloc((size_t)P, sizeof *x);
        if (!x) {
            status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "transfer list");
            goto fail;
        }
        CGM_TRY(ncclb_gather_rows(st, at(R, off * cols, es), R, M, cols, es, x,
                                  "bulk: all-gathering uneven shards"));
    }
    ncclb_watch_group(op);
    if (!dense)
        CGM_TRY(copy_rows(c->recv.data, cgm_matrix_ld(&c->recv), R, cols, M, cols,
                          es, st->comm_stream));
fail:
    free(x);
    return status;
}

static cgm_status bulk_reduce_scatter(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    const int P = st->nranks, r = st->rank;
    const int64_t M = c->coll_m, cols = c->coll_cols;
    const size_t es = cgm_dtype_size(c->coll_dtype);
    const int64_t mr = cgm_shard_rows(M, r, P), off = cgm_shard_offset(M, r, P);
    const bool send_dense = cgm_matrix_ld(&c->send) == cols;
    const bool recv_dense = cgm_matrix_ld(&c->recv) == cols;
    ncclb_xfer *x = NULL;
    if (c->coll_dtype == CGM_DTYPE_FP32 && M % P == 0 && send_dense &&
        recv_dense && M > 0 && cols > 0) {
        CGM_TRY(ncclb_call_enter(st, "bulk: ncclReduceScatter"));
        CGM_TRY(ncclb_settle(st,
                             ncclReduceScatter(c->send.data, c->recv.data,
                                               (size_t)(mr * cols), ncclFloat32,
                                               ncclSum, st->nccl,
                                               st->comm_stream),
                             "bulk: ncclReduceScatter"));
        ncclb_watch_group(op);
        return CGM_SUCCESS;
    }
    /* Rows ship from a dense copy of send when send is strided. */
    const char *S = c->send.data;
    if (!send_dense) {
        CGM_TRY(copy_rows(st->buf[NCCLB_BUF_GATHER], cols, c->send.data,
                          cgm_matrix_ld(&c->send), M, cols, es, st->comm_stream));
        S = st->buf[NCCLB_BUF_GATHER];
    }
    const int64_t lds = send_dense ? cgm_matrix_ld(&c->send) : cols;
    char *slots = st->buf[NCCLB_BUF_RECV];
    const size_t slot_bytes = (size_t)(cgm_ceil_div(M, P) * cols) * es;
    x = calloc((size_t)P, sizeof *x);
    if (!x) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "transfer list");
        goto fail;
    }
    int count = 0;
    for (int p = 0; p < P; p++) {
        if (p == r) continue;
        int slot = (p - r - 1 + P) % P;
        ncclb_xfer t = {at(S, cgm_shard_offset(M, p, P) * lds, es),
                        (size_t)(cgm_shard_rows(M, p, P) * cols) * es, p,
                        slots + (size_t)slot * slot_bytes,
                        (size_t)(mr * cols) * es, p};
        x[count++] = t;
    }
    CGM_TRY(ncclb_exchange(st, x, count, "bulk: reduce-scatter exchange"));
    ncclb_watch_group(op);
    cgm_dev_reduce_args ra;
    memset(&ra, 0, sizeof ra);
    ra.nsources = P;
    ra.src_dtype = c->coll_dtype;
    ra.dst_dtype = c->coll_dtype;
    ra.rows = mr;
    ra.cols = cols;
    ra.src[0] = at(S, off * lds, es);
    ra.src_ld[0] = lds;
    for (int i = 1; i < P; i++) {
        ra.src[i] = slots + (size_t)(i - 1) * slot_bytes;
        ra.src_ld[i] = cols;
    }
    ra.dst = c->recv.data;
    ra.dst_ld = cgm_matrix_ld(&c->recv);
    CGM_CUDA_TRY(cgm_dev_reduce(&ra, st->dev, st->comm_stream));
fail:
    free(x);
    return status;
}

cgm_status ncclb_bulk(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    ncclb_state *st = op->st;
    if (c->has_gemm) CGM_TRY(bulk_gemm(op));
    if (!c->has_collective) return CGM_SUCCESS;
    if (st->nranks == 1) {
        /* Both collectives are a copy on one rank. */
        return copy_rows(c->recv.data, cgm_matrix_ld(&c->recv), c->send.data,
                         cgm_matrix_ld(&c->send), c->coll_m, c->coll_cols,
                         cgm_dtype_size(c->coll_dtype), st->comm_stream);
    }
    if (c->collective == CGM_COLLECTIVE_ALL_GATHER)
        CGM_TRY(bulk_all_gather(op));
    else
        CGM_TRY(bulk_reduce_scatter(op));
fail:
    return status;
}
