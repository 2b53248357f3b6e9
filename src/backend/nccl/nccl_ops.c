/* The nccl backend's pipelined ops: AG+GEMM, GEMM+RS and GEMM+AR.
 * Transfers are grouped ncclSend/ncclRecv on the comm stream; each GEMM
 * chunk runs on a compute stream and waits only for the event recorded
 * after the transfer that brought its rows (AG) or is waited for by the
 * transfer that ships its rows (RS). docs/NCCL_BACKEND.md has the
 * schedules. */
#include <stdlib.h>
#include <string.h>

#include "backend/nccl/nccl_backend.h"

static char *at(const void *base, int64_t elements, size_t element_size) {
    return (char *)base + (size_t)elements * element_size;
}

/* The caller's whole GEMM on one stream (P = 1), with the epilogue (a
 * bias gradient into slot 0; none for an empty Y). */
static cgm_status whole_gemm(ncclb_op *op, cudaStream_t stream) {
    const cgm_call *c = op->call;
    cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
    g.m = c->op == CGM_OP_ALL_GATHER_GEMM ? c->y.rows : c->m;
    ncclb_epi_args(op, &g, 0, 0);
    if (ncclb_epi_gemm_grad(c)) op->epi_slots = g.m > 0 && g.n > 0;
    if (op->fp8.on)
        return ncclb_fp8_gemm(op, &g, ncclb_fp8_own_scales(op, 0), stream);
    return ncclb_gemm(op, &g, stream);
}

/* Copies piece-major gathered rows (G) into the caller's x_gathered. */
static cgm_status copy_gathered(ncclb_op *op, const char *G) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    ncclb_state *st = op->st;
    const size_t es = cgm_dtype_size(c->in_dtype);
    const int64_t k = c->k, ldg = cgm_matrix_ld(&c->x_gathered);
    if (c->m == 0 || k == 0) return CGM_SUCCESS;
    if (c->layout != CGM_LAYOUT_NT) {
        CGM_CUDA_TRY(cudaMemcpy2DAsync(c->x_gathered.data, (size_t)ldg * es, G,
                                       (size_t)k * es, (size_t)k * es,
                                       (size_t)c->m, cudaMemcpyDeviceToDevice,
                                       st->comm_stream));
        return CGM_SUCCESS;
    }
    const int S = ncclb_splits(c, c->m, st->nranks, (size_t)k * es);
    for (int j = 0; j < st->nranks; j++)
        for (int q = 0; q < S; q++) {
            ncclb_piece p = ncclb_piece_of(c->m, st->nranks, j, S, q);
            if (p.rows == 0) continue;
            CGM_CUDA_TRY(cudaMemcpy2DAsync(
                at(c->x_gathered.data, p.row0, es), (size_t)ldg * es,
                at(G, p.row0 * k, es), (size_t)p.rows * es,
                (size_t)p.rows * es, (size_t)k, cudaMemcpyDeviceToDevice,
                st->comm_stream));
        }
fail:
    return status;
}

/* GEMM of gathered rows `p` of shard `shard` (stored piece-major in G) on
 * `stream`. */
static cgm_status gathered_gemm(ncclb_op *op, const char *G, int shard,
                                ncclb_piece p, int slot, cudaStream_t stream) {
    const cgm_call *c = op->call;
    const size_t es = cgm_dtype_size(c->in_dtype);
    cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
    g.m = p.rows;
    ncclb_epi_args(op, &g, p.row0, slot);
    g.x = at(G, p.row0 * c->k, es);
    g.ldx = c->layout == CGM_LAYOUT_NT ? p.rows : c->k;
    g.ldy = cgm_matrix_ld(&c->y);
    g.y = at(c->y.data, p.row0 * g.ldy, cgm_dtype_size(c->out_dtype));
    if (op->fp8.on)
        return ncclb_fp8_gemm(op, &g, ncclb_fp8_gathered_scales(op, shard,
                                                                p.row0),
                              stream);
    return ncclb_gemm(op, &g, stream);
}

/* AG+GEMM on one rank: the GEMM, and x_gathered a copy of X. */
static cgm_status single_rank_ag(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    const size_t es = cgm_dtype_size(c->in_dtype);
    const bool nt = c->layout == CGM_LAYOUT_NT;
    CGM_TRY(whole_gemm(op, ncclb_next_compute(op)));
    if (c->has_x_gathered && c->m > 0 && c->k > 0) {
        const int64_t rows = nt ? c->k : c->m, cols = nt ? c->m : c->k;
        CGM_CUDA_TRY(cudaMemcpy2DAsync(
            c->x_gathered.data, (size_t)cgm_matrix_ld(&c->x_gathered) * es,
            c->x.data, (size_t)cgm_matrix_ld(&c->x) * es, (size_t)cols * es,
            (size_t)rows, cudaMemcpyDeviceToDevice, op->st->comm_stream));
    }
    if (c->has_x_gathered && op->fp8.on)
        CGM_TRY(ncclb_fp8_copy_gathered_scales(op));
fail:
    return status;
}

/* The GEMM of this rank's rows straight from X on a compute stream: one
 * GEMM, or with a bias gradient one per piece (slots numbered as every
 * rank numbers them: ncclb_epi_slot). */
static cgm_status own_gemm(ncclb_op *op, int S) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    const int P = op->st->nranks, r = op->st->rank;
    const int64_t m = c->m, ldx = cgm_matrix_ld(&c->x);
    const int64_t off = cgm_shard_offset(m, r, P);
    const size_t es = cgm_dtype_size(c->in_dtype);
    const bool per_piece = ncclb_epi_gemm_grad(c);
    for (int q = 0; q < (per_piece ? S : 1); q++) {
        ncclb_piece p = per_piece ? ncclb_piece_of(m, P, r, S, q)
                                  : (ncclb_piece){off, cgm_shard_rows(m, r, P)};
        if (p.rows == 0) continue;
        cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
        g.m = p.rows;
        g.x = c->layout == CGM_LAYOUT_NT ? at(c->x.data, p.row0 - off, es)
                                         : at(c->x.data, (p.row0 - off) * ldx, es);
        g.ldx = ldx;
        g.ldy = cgm_matrix_ld(&c->y);
        g.y = at(c->y.data, p.row0 * g.ldy, cgm_dtype_size(c->out_dtype));
        ncclb_epi_args(op, &g, p.row0,
                       per_piece ? ncclb_epi_slot(m, P, S, r, q, NULL) : 0);
        if (op->fp8.on)
            CGM_TRY(ncclb_fp8_gemm(op, &g, ncclb_fp8_own_scales(op, 0),
                                   ncclb_next_compute(op)));
        else
            CGM_TRY(ncclb_gemm(op, &g, ncclb_next_compute(op)));
    }
fail:
    return status;
}

/* no_overlap: the GEMMs of the gathered rows, on `cs` (fp8: one per shard,
 * a TENSOR scale per shard; NT: per piece). */
static cgm_status gathered_gemm_all(ncclb_op *op, const char *G, int S,
                                    cudaStream_t cs) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    const int P = op->st->nranks;
    const int64_t m = c->m;
    if (!op->fp8.on && c->layout != CGM_LAYOUT_NT) {
        ncclb_piece all = {0, m};
        if (ncclb_epi_gemm_grad(c)) op->epi_slots = m > 0 && c->n > 0;
        return gathered_gemm(op, G, 0, all, 0, cs);
    }
    for (int j = 0; j < P; j++)
        for (int q = 0; q < (op->fp8.on ? 1 : S); q++) {
            ncclb_piece p = ncclb_piece_of(m, P, j, S, q);
            if (op->fp8.on) p = (ncclb_piece){cgm_shard_offset(m, j, P),
                                              cgm_shard_rows(m, j, P)};
            if (p.rows)
                CGM_TRY(gathered_gemm(op, G, j, p,
                                      ncclb_epi_slot(m, P, S, j, q, NULL),
                                      cs));
        }
fail:
    return status;
}

/* no_overlap: everything in one NCCL call. Even shards: ncclAllGather
 * (out of place from `own`, which also fills this rank's slot of G);
 * uneven: one group of sends/receives with every peer. */
static cgm_status gather_all(ncclb_op *op, char *G, const char *own,
                             bool even) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    const int P = st->nranks, r = st->rank;
    const int64_t m = c->m, k = c->k;
    const size_t es = cgm_dtype_size(c->in_dtype);
    const int64_t mr = cgm_shard_rows(m, r, P);
    ncclb_xfer *x = NULL;
    if (even) {
        const char *what = "AG+GEMM: ncclAllGather of X";
        CGM_TRY(ncclb_call_enter(st, what));
        CGM_TRY(ncclb_settle(st,
                             ncclAllGather(own, G, (size_t)(mr * k) * es,
                                           ncclUint8, st->nccl,
                                           st->comm_stream),
                             what));
    } else {
        x = calloc((size_t)P, sizeof *x);
        if (!x) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "transfer list");
        CGM_TRY(ncclb_gather_rows(st, own, G, m, k, es, x,
                                  "AG+GEMM: all-gathering X"));
    }
    ncclb_watch_group(op);
    if (op->fp8.on && op->fp8.block && m > 0 && k > 0) {
        if (!x) x = calloc((size_t)P, sizeof *x);
        if (!x) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "transfer list");
        float *gs = op->fp8.gathered;
        const int64_t kb = op->fp8.kb;
        CGM_TRY(ncclb_gather_rows(st, gs + cgm_shard_offset(m, r, P) * kb, gs,
                                  m, kb, sizeof(float), x,
                                  "AG+GEMM: all-gathering the fp8 X scales"));
        ncclb_watch_group(op);
    }
fail:
    free(x);
    return status;
}

cgm_status ncclb_all_gather_gemm(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    const int P = st->nranks, r = st->rank;
    const int64_t m = c->m, k = c->k;
    const size_t es = cgm_dtype_size(c->in_dtype);
    const bool nt = c->layout == CGM_LAYOUT_NT;
    const bool overlap = c->algo != CGM_ALGO_NO_OVERLAP;
    /* fused (the p2p kernel's) runs split. */
    const bool ring = c->algo != CGM_ALGO_SPLIT_PIPELINED &&
                      c->algo != CGM_ALGO_FUSED;
    const int64_t ldx = cgm_matrix_ld(&c->x);
    const int64_t mr = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    const int S = ncclb_splits(c, m, P, (size_t)k * es);

    if (P == 1) return single_rank_ag(op);
    if (ncclb_epi_gemm_grad(c))
        (void)ncclb_epi_slot(m, P, S, 0, 0, &op->epi_slots);
    /* Gathered rows live piece-major in G: piece (j, q) is a dense block
     * of rows x k (TN, NN) or k x rows (NT) at element row0 * k. For TN/NN
     * that is the row-major [m, k] matrix, so a dense x_gathered is G.
     * Shard j is the contiguous range [off_j * k, (off_j + m_j) * k). */
    const bool direct = c->has_x_gathered && !nt &&
                        cgm_matrix_ld(&c->x_gathered) == k;
    char *G = direct ? (char *)c->x_gathered.data : (char *)st->buf[NCCLB_BUF_GATHER];
    const bool even = m % P == 0 && m > 0 && k > 0;

    /* This rank's rows: GEMM straight from the caller's X (compute). They
     * are sent straight from X when X is dense (TN/NN, ld == k): no copy
     * on the transfers' path. Otherwise they are packed into G first (comm
     * stream). A dense X is still copied into G when G is read as a whole
     * (x_gathered, the no_overlap GEMM), on a compute stream, unless the
     * no_overlap ncclAllGather writes that slot itself. */
    const bool x_dense = !nt && ldx == k;
    const char *own = x_dense ? (const char *)c->x.data : at(G, off * k, es);
    const bool fills_own = !overlap && even;
    const bool pack_aside = x_dense && !fills_own &&
                            (c->has_x_gathered || !overlap);
    cudaEvent_t packed = NULL;
    /* Own rows' GEMM: issued right after the first transfer, so that
     * NCCL's kernel is on the GPU before the GEMM fills every SM. */
    bool own_pending = overlap && mr > 0;
    if (mr > 0 && k > 0 && !x_dense) {
        if (!nt) {
            CGM_CUDA_TRY(cudaMemcpy2DAsync(
                at(G, off * k, es), (size_t)k * es, c->x.data,
                (size_t)ldx * es, (size_t)k * es, (size_t)mr,
                cudaMemcpyDeviceToDevice, st->comm_stream));
        } else {
            for (int q = 0; q < S; q++) {
                ncclb_piece p = ncclb_piece_of(m, P, r, S, q);
                if (p.rows == 0) continue;
                CGM_CUDA_TRY(cudaMemcpy2DAsync(
                    at(G, p.row0 * k, es), (size_t)p.rows * es,
                    at(c->x.data, p.row0 - off, es), (size_t)ldx * es,
                    (size_t)p.rows * es, (size_t)k, cudaMemcpyDeviceToDevice,
                    st->comm_stream));
            }
        }
    } else if (mr > 0 && k > 0 && pack_aside) {
        cudaStream_t cs = ncclb_next_compute(op);
        CGM_CUDA_TRY(cudaMemcpyAsync(at(G, off * k, es), c->x.data,
                                     (size_t)(mr * k) * es,
                                     cudaMemcpyDeviceToDevice, cs));
        CGM_TRY(ncclb_event(op, &packed));
        CGM_CUDA_TRY(cudaEventRecord(packed, cs));
    }
    if (!overlap) {
        CGM_TRY(gather_all(op, G, own, even));
    } else {
        /* Ring: step s forwards to the right neighbour the shard received
         * at step s - 1. Split: step s sends this rank's shard to r + s.
         * Each piece is one grouped send/receive; its GEMM waits only for
         * the event recorded after it. */
        for (int s = 1; s < P; s++) {
            int to = ring ? (r + 1) % P : (r + s) % P;
            int from = ring ? (r - 1 + P) % P : (r - s + P) % P;
            int send_shard = ring ? (r - s + 1 + P) % P : r;
            int recv_shard = ring ? (r - s + P) % P : from;
            for (int q = 0; q < S; q++) {
                ncclb_piece sp = ncclb_piece_of(m, P, send_shard, S, q);
                ncclb_piece rp = ncclb_piece_of(m, P, recv_shard, S, q);
                const char *src = send_shard == r
                                      ? own + (size_t)((sp.row0 - off) * k) * es
                                      : at(G, sp.row0 * k, es);
                ncclb_xfer x[2] = {{src, (size_t)(sp.rows * k) * es, to,
                                    at(G, rp.row0 * k, es),
                                    (size_t)(rp.rows * k) * es, from}};
                int nx = 1;
                if (op->fp8.on && op->fp8.block)
                    x[nx++] = ncclb_fp8_scale_xfer(op, send_shard, sp, to,
                                                   rp, from);
                CGM_TRY(ncclb_exchange(st, x, nx,
                                       "AG+GEMM: exchanging X rows"));
                if (own_pending) {
                    own_pending = false;
                    CGM_TRY(own_gemm(op, S));
                }
                if (rp.rows == 0) continue;
                cudaEvent_t arrived;
                CGM_TRY(ncclb_event(op, &arrived));
                CGM_CUDA_TRY(cudaEventRecord(arrived, st->comm_stream));
                cudaStream_t cs = ncclb_next_compute(op);
                CGM_CUDA_TRY(cudaStreamWaitEvent(cs, arrived, 0));
                CGM_TRY(gathered_gemm(op, G, recv_shard, rp,
                                      ncclb_epi_slot(m, P, S, recv_shard, q,
                                                     NULL),
                                      cs));
            }
            ncclb_watch_step(op, from, to);
        }
    }
    if (packed) CGM_CUDA_TRY(cudaStreamWaitEvent(st->comm_stream, packed, 0));
    if (!overlap) {
        cudaEvent_t gathered;
        CGM_TRY(ncclb_event(op, &gathered));
        CGM_CUDA_TRY(cudaEventRecord(gathered, st->comm_stream));
        cudaStream_t cs = ncclb_next_compute(op);
        CGM_CUDA_TRY(cudaStreamWaitEvent(cs, gathered, 0));
        CGM_TRY(gathered_gemm_all(op, G, S, cs));
    }
    if (c->has_x_gathered && !direct) CGM_TRY(copy_gathered(op, G));
    if (c->has_x_gathered && op->fp8.on) CGM_TRY(ncclb_fp8_copy_gathered_scales(op));
fail:
    return status;
}

/* GEMM of global rows `p` of X into partial rows (dtype `pd`) of F, on
 * `stream`. */
static cgm_status partial_gemm(ncclb_op *op, ncclb_piece p, char *F,
                               cgm_dtype pd, cudaStream_t stream) {
    const cgm_call *c = op->call;
    const size_t es = cgm_dtype_size(c->in_dtype);
    const int64_t ldx = cgm_matrix_ld(&c->x);
    cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
    g.out_dtype = pd;
    g.bias = NULL;
    g.accumulate = false;
    g.m = p.rows;
    g.x = c->layout == CGM_LAYOUT_NT ? at(c->x.data, p.row0, es)
                                     : at(c->x.data, p.row0 * ldx, es);
    g.ldx = ldx;
    g.y = at(F, p.row0 * c->n, cgm_dtype_size(pd));
    g.ldy = c->n;
    if (op->fp8.on)
        return ncclb_fp8_gemm(op, &g, ncclb_fp8_own_scales(op, p.row0),
                              stream);
    return ncclb_gemm(op, &g, stream);
}

/* The no_overlap GEMM of every row (fp8: one per shard, the chunk size
 * its scratch is made for). */
static cgm_status partial_gemm_all(ncclb_op *op, char *F, cgm_dtype pd,
                                   cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const int64_t m = op->call->m;
    const int P = op->st->nranks;
    if (!op->fp8.on) {
        ncclb_piece all = {0, m};
        return partial_gemm(op, all, F, pd, stream);
    }
    for (int j = 0; j < P; j++) {
        ncclb_piece p = {cgm_shard_offset(m, j, P), cgm_shard_rows(m, j, P)};
        if (p.rows) CGM_TRY(partial_gemm(op, p, F, pd, stream));
    }
fail:
    return status;
}

/* fp8 outputs cuBLASLt cannot give from partials (ncclb_fp8_finishes):
 * the owner's fp32 sums R (rows of the gather buffer) finished into Y;
 * GEMM+AR gathers every owner's fp32 sums first. */
static cgm_status finish_fp8(ncclb_op *op, float *R, ncclb_xfer *xs,
                             bool all_reduce) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    const int64_t m = c->m, n = c->n;
    const int P = st->nranks, r = st->rank;
    const int64_t off = cgm_shard_offset(m, r, P);
    if (!all_reduce)
        return ncclb_fp8_finish(op, R + off * n, 0, cgm_shard_rows(m, r, P),
                                st->comm_stream);
    CGM_TRY(ncclb_gather_rows(st, R + off * n, R, m, n, sizeof(float), xs,
                              "GEMM+AR: all-gathering the reduced fp32 rows"));
    ncclb_watch_group(op);
    CGM_TRY(ncclb_fp8_finish(op, R, 0, m, st->comm_stream));
fail:
    return status;
}

/* GEMM+AR with accumulate: Y += the gathered sums F (partial dtype) +
 * bias, on the comm stream. */
static cgm_status add_reduced(ncclb_op *op, const char *F) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    cgm_dev_reduce_args fa;
    memset(&fa, 0, sizeof fa);
    fa.nsources = 1;
    fa.src_dtype = (int)c->partial_dtype;
    fa.src[0] = F;
    fa.src_ld[0] = c->n;
    fa.rows = c->m;
    fa.cols = c->n;
    fa.dst = c->y.data;
    fa.dst_ld = cgm_matrix_ld(&c->y);
    fa.dst_dtype = c->out_dtype;
    fa.accumulate = 1;
    fa.bias = c->has_bias ? c->bias.data : NULL;
    CGM_CUDA_TRY(cgm_dev_reduce(&fa, op->st->dev, op->st->comm_stream));
fail:
    return status;
}

/* The owner's reduce with the epilogue (no accumulate, no fp8: checked).
 * RS: the sum (+ bias) of its rows, the epilogue with this rank's aux,
 * into Y; DGELU_BGRAD's shard sums then summed over the ranks.
 * AR: the sums r + bias of its rows in fp32 into R (the gather buffer),
 * gathered, then every rank applies the epilogue to all m rows with its
 * own aux; DGELU_BGRAD's sums over all rows locally. On the comm stream. */
static cgm_status reduce_epilogue(ncclb_op *op, cgm_dev_reduce_args *ra,
                                  float *R, ncclb_xfer *xs, bool all_reduce) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    const int64_t m = c->m, n = c->n;
    const int64_t off = cgm_shard_offset(m, st->rank, st->nranks);
    ra->bias = c->has_bias ? c->bias.data : NULL;
    ra->accumulate = 0;
    if (!all_reduce) {
        ra->dst = c->y.data;
        ra->dst_ld = cgm_matrix_ld(&c->y);
        ra->dst_dtype = (int)c->out_dtype;
        ra->epilogue = (int)c->epilogue;
        ra->aux = c->has_aux ? c->aux.data : NULL;
        ra->aux_ld = c->has_aux ? cgm_matrix_ld(&c->aux) : 0;
        CGM_CUDA_TRY(cgm_dev_reduce(ra, st->dev, st->comm_stream));
        return ncclb_epi_reduce_grad(op, ra, true);
    }
    ra->dst = R + off * n;
    ra->dst_ld = n;
    ra->dst_dtype = (int)CGM_DTYPE_FP32;
    CGM_CUDA_TRY(cgm_dev_reduce(ra, st->dev, st->comm_stream));
    CGM_TRY(ncclb_gather_rows(st, R + off * n, R, m, n, sizeof(float), xs,
                              "GEMM+AR: all-gathering the reduced fp32 rows"));
    ncclb_watch_group(op);
    cgm_dev_reduce_args ea;
    memset(&ea, 0, sizeof ea);
    ea.nsources = 1;
    ea.src_dtype = (int)CGM_DTYPE_FP32;
    ea.src[0] = R;
    ea.src_ld[0] = n;
    ea.rows = m;
    ea.cols = n;
    ea.dst = c->y.data;
    ea.dst_ld = cgm_matrix_ld(&c->y);
    ea.dst_dtype = (int)c->out_dtype;
    ea.epilogue = (int)c->epilogue;
    ea.aux = c->has_aux ? c->aux.data : NULL;
    ea.aux_ld = c->has_aux ? cgm_matrix_ld(&c->aux) : 0;
    CGM_CUDA_TRY(cgm_dev_reduce(&ea, st->dev, st->comm_stream));
    CGM_TRY(ncclb_epi_reduce_grad(op, &ea, false));
fail:
    return status;
}

cgm_status ncclb_gemm_reduce_scatter(ncclb_op *op, bool all_reduce) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    const int P = st->nranks, r = st->rank;
    const int64_t m = c->m, n = c->n;
    const size_t eo = cgm_dtype_size(c->out_dtype);
    const int64_t ldy = cgm_matrix_ld(&c->y);
    const int64_t mr = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    const bool overlap = c->algo != CGM_ALGO_NO_OVERLAP;
    /* Partials travel in the call's partial dtype (fp32, or a bf16/fp16
     * output's dtype); the owner sums them in fp32. */
    const cgm_dtype pd = c->partial_dtype;
    const size_t ep = cgm_dtype_size(pd);
    const int S = ncclb_splits(c, m, P, (size_t)n * ep);
    /* P <= CGM_DEV_MAX_SOURCES here (check_limits). */
    cudaEvent_t produced[CGM_DEV_MAX_SOURCES * NCCLB_MAX_SPLITS];
    ncclb_xfer xs[CGM_DEV_MAX_SOURCES];

    if (P == 1) return whole_gemm(op, ncclb_next_compute(op));
    memset(produced, 0, sizeof produced);
    char *F = st->buf[NCCLB_BUF_PARTIAL];
    char *slots = st->buf[NCCLB_BUF_RECV];
    const size_t slot_bytes = (size_t)(cgm_ceil_div(m, P) * n) * ep;

    /* Partials in the order they ship: rank r + 1's rows first, own last. */
    cudaEvent_t own_done;
    CGM_TRY(ncclb_event(op, &own_done));
    if (overlap) {
        for (int s = 1; s < P; s++)
            for (int q = 0; q < S; q++) {
                ncclb_piece p = ncclb_piece_of(m, P, (r + s) % P, S, q);
                if (p.rows == 0) continue;
                cudaStream_t cs = ncclb_next_compute(op);
                CGM_TRY(partial_gemm(op, p, F, pd, cs));
                CGM_TRY(ncclb_event(op, &produced[s * S + q]));
                CGM_CUDA_TRY(cudaEventRecord(produced[s * S + q], cs));
            }
        ncclb_piece own = {off, mr};
        cudaStream_t cs = ncclb_next_compute(op);
        CGM_TRY(partial_gemm(op, own, F, pd, cs));
        CGM_CUDA_TRY(cudaEventRecord(own_done, cs));
    } else {
        cudaStream_t cs = ncclb_next_compute(op);
        CGM_TRY(partial_gemm_all(op, F, pd, cs));
        CGM_CUDA_TRY(cudaEventRecord(own_done, cs));
    }
    /* no_overlap: one group ships every owner its rows (all steps at
     * once, one NCCL call). */
    if (!overlap) {
        CGM_CUDA_TRY(cudaStreamWaitEvent(st->comm_stream, own_done, 0));
        for (int s = 1; s < P; s++) {
            int to = (r + s) % P, from = (r - s + P) % P;
            ncclb_xfer t = {at(F, cgm_shard_offset(m, to, P) * n, ep),
                            (size_t)(cgm_shard_rows(m, to, P) * n) * ep, to,
                            slots + (size_t)(s - 1) * slot_bytes,
                            (size_t)(mr * n) * ep, from};
            xs[s - 1] = t;
        }
        CGM_TRY(ncclb_exchange(st, xs, P - 1, "GEMM+RS: exchanging partials"));
        ncclb_watch_group(op);
    }
    /* Pairwise exchange in ring order: step s ships rank r + s's rows and
     * receives rank r - s's contribution to ours into slot s - 1. */
    for (int s = 1; s < P && overlap; s++) {
        int to = (r + s) % P, from = (r - s + P) % P;
        for (int q = 0; q < S; q++) {
            ncclb_piece sp = ncclb_piece_of(m, P, to, S, q);
            ncclb_piece rp = ncclb_piece_of(m, P, r, S, q);
            cudaEvent_t ready = produced[s * S + q];
            if (sp.rows > 0 && ready)
                CGM_CUDA_TRY(cudaStreamWaitEvent(st->comm_stream, ready, 0));
            ncclb_xfer x = {at(F, sp.row0 * n, ep),
                            (size_t)(sp.rows * n) * ep, to,
                            slots + (size_t)(s - 1) * slot_bytes +
                                (size_t)((rp.row0 - off) * n) * ep,
                            (size_t)(rp.rows * n) * ep, from};
            CGM_TRY(ncclb_exchange(st, &x, 1, "GEMM+RS: exchanging partials"));
        }
        ncclb_watch_step(op, from, to);
    }
    CGM_CUDA_TRY(cudaStreamWaitEvent(st->comm_stream, own_done, 0));

    /* The owner sums its rows in fp32, bias once, one conversion. */
    const bool staged = all_reduce && !c->accumulate && ldy != n;
    cgm_dev_reduce_args ra;
    memset(&ra, 0, sizeof ra);
    ra.nsources = P;
    ra.src_dtype = (int)pd;
    ra.rows = mr;
    ra.cols = n;
    ra.src[0] = at(F, off * n, ep);
    ra.src_ld[0] = n;
    for (int i = 1; i < P; i++) {
        ra.src[i] = slots + (size_t)(i - 1) * slot_bytes;
        ra.src_ld[i] = n;
    }
    if (c->epilogue != CGM_EPILOGUE_NONE)
        return reduce_epilogue(op, &ra, st->buf[NCCLB_BUF_GATHER], xs,
                               all_reduce);
    char *reduced = NULL; /* AR: where the reduced rows are gathered */
    size_t re = eo;
    const bool finish = ncclb_fp8_finishes(c);
    float *R = st->buf[NCCLB_BUF_GATHER]; /* finish: fp32 sums [m, n] */
    if (finish) {
        ra.dst = R + off * n;
        ra.dst_ld = n;
        ra.dst_dtype = (int)CGM_DTYPE_FP32;
    } else if (!all_reduce) {
        ra.dst = c->y.data;
        ra.dst_ld = ldy;
        ra.dst_dtype = c->out_dtype;
        ra.accumulate = c->accumulate;
        ra.bias = c->has_bias ? c->bias.data : NULL;
    } else if (!c->accumulate) {
        reduced = staged ? (char *)st->buf[NCCLB_BUF_GATHER] : (char *)c->y.data;
        ra.dst = at(reduced, off * n, eo);
        ra.dst_ld = n;
        ra.dst_dtype = c->out_dtype;
        ra.bias = c->has_bias ? c->bias.data : NULL;
    } else {
        /* Y += sum on every rank: gather the sums (in the partial dtype),
         * add them locally (bias then, once per element). The sum
         * overwrites src[0] in place, element by element. */
        reduced = F;
        re = ep;
        ra.dst = at(F, off * n, ep);
        ra.dst_ld = n;
        ra.dst_dtype = (int)pd;
    }
    CGM_CUDA_TRY(cgm_dev_reduce(&ra, st->dev, st->comm_stream));
    if (finish) return finish_fp8(op, R, xs, all_reduce);
    if (all_reduce) {
        CGM_TRY(ncclb_gather_rows(st, at(reduced, off * n, re), reduced, m, n,
                                  re, xs, "GEMM+AR: all-gathering the "
                                  "reduced rows"));
        ncclb_watch_group(op);
        if (staged && m > 0 && n > 0)
            CGM_CUDA_TRY(cudaMemcpy2DAsync(
                c->y.data, (size_t)ldy * eo, reduced, (size_t)n * eo,
                (size_t)n * eo, (size_t)m, cudaMemcpyDeviceToDevice,
                st->comm_stream));
        if (c->accumulate) CGM_TRY(add_reduced(op, F));
    }
fail:
    return status;
}
