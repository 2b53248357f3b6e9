/* The nccl backend's epilogues (commgemm.h "Epilogues").
 *
 * AG+GEMM, bulk's GEMM and every op on one rank: cuBLASLt's epilogue on
 * each GEMM (lt_epilogue.c), aux at the GEMM's rows. A bias gradient
 * (DGELU_BGRAD, bulk's BGRAD) comes from cuBLASLt per GEMM, written not
 * added, so each GEMM writes a slot of NCCLB_BUF_EPI of its own (fp32, or
 * a 16-bit Y's dtype: cgm_lt_bgrad_dtype),
 * numbered by its rows' place in the output (the same on every rank), and
 * ncclb_epi_end sums the slots in that order after the last GEMM and
 * rounds once into bgrad.
 *
 * GEMM+RS and GEMM+AR: the reduce that sums the partials applies the
 * epilogue in fp32 before its one rounding (cgm_dev_reduce); DGELU_BGRAD's
 * column sums come from cgm_dev_epilogue_colsum over the same rows, summed
 * over the ranks (RS: each rank has its shard) with one fp32
 * ncclAllReduce. */
#include <string.h>

#include "backend/nccl/nccl_backend.h"
#include "gpu/lt_epilogue.h"

int64_t ncclb_epi_stride(const ncclb_state *st) {
    const cgm_resolved_config *c = &st->comm->config;
    int64_t w = c->max_n > c->max_m ? c->max_n : c->max_m;
    return (w + 3) / 4 * 4;
}

int ncclb_epi_max_slots(const ncclb_state *st) {
    return st->nranks * NCCLB_MAX_SPLITS;
}

bool ncclb_epi_gemm_grad(const cgm_call *c) {
    return c->epilogue == CGM_EPILOGUE_BGRAD ||
           c->epilogue == CGM_EPILOGUE_DGELU_BGRAD;
}

int ncclb_epi_slot(int64_t m, int P, int S, int j, int q, int *total) {
    int slot = -1, n = 0;
    for (int a = 0; a < P; a++)
        for (int b = 0; b < S; b++) {
            if (a == j && b == q) slot = n;
            if (ncclb_piece_of(m, P, a, S, b).rows > 0) n++;
        }
    if (total) *total = n;
    return slot;
}

void ncclb_epi_args(ncclb_op *op, cgm_lt_gemm_args *g, int64_t row0,
                    int slot) {
    const cgm_call *c = op->call;
    g->epilogue = c->epilogue;
    if (c->has_aux) {
        g->ld_aux = cgm_matrix_ld(&c->aux);
        g->aux = (char *)c->aux.data +
                 (size_t)(row0 * g->ld_aux) * cgm_dtype_size(c->aux.dtype);
    }
    if (ncclb_epi_gemm_grad(c))
        g->bgrad = (float *)op->st->buf[NCCLB_BUF_EPI] +
                   (size_t)slot * (size_t)ncclb_epi_stride(op->st);
}

/* Rounds slots [0, nslots) of NCCLB_BUF_EPI (of slot_dtype), summed in
 * fp32, into bgrad. */
static cgm_status round_slots(ncclb_op *op, cgm_dtype slot_dtype, int nslots,
                              int64_t len) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = op->call;
    ncclb_state *st = op->st;
    CGM_CUDA_TRY(cgm_dev_sum_slots(st->buf[NCCLB_BUF_EPI], (int)slot_dtype, nslots,
                                   ncclb_epi_stride(st), len, c->bgrad.data,
                                   (int)c->bgrad.dtype, st->dev,
                                   st->comm_stream));
fail:
    return status;
}

cgm_status ncclb_epi_end(ncclb_op *op) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    if (op->epi_slots < 0) return CGM_SUCCESS;
    for (int i = 0; i < NCCLB_COMPUTE_STREAMS; i++) {
        cudaEvent_t done;
        CGM_TRY(ncclb_event(op, &done));
        CGM_CUDA_TRY(cudaEventRecord(done, st->compute[i]));
        CGM_CUDA_TRY(cudaStreamWaitEvent(st->comm_stream, done, 0));
    }
    /* BGRAD: one value per row of C (bulk's GEMM m); DGELU_BGRAD: per
     * column of Y. */
    CGM_TRY(round_slots(op, cgm_lt_bgrad_dtype(c->out_dtype), op->epi_slots,
                        c->epilogue == CGM_EPILOGUE_BGRAD ? c->m : c->n));
fail:
    return status;
}

cgm_status ncclb_epi_reduce_grad(ncclb_op *op, const cgm_dev_reduce_args *ra,
                                 bool over_ranks) {
    cgm_status status = CGM_SUCCESS;
    ncclb_state *st = op->st;
    const cgm_call *c = op->call;
    float *sums = st->buf[NCCLB_BUF_EPI];
    if (c->epilogue != CGM_EPILOGUE_DGELU_BGRAD || c->n == 0)
        return CGM_SUCCESS;
    if (ra->rows > 0) {
        CGM_CUDA_TRY(cgm_dev_epilogue_colsum(ra, sums, st->dev,
                                             st->comm_stream));
    } else {
        CGM_CUDA_TRY(cudaMemsetAsync(sums, 0, (size_t)c->n * sizeof(float),
                                     st->comm_stream));
    }
    if (over_ranks) {
        const char *what = "GEMM+RS: ncclAllReduce of the bias gradient";
        CGM_TRY(ncclb_call_enter(st, what));
        CGM_TRY(ncclb_settle(st,
                             ncclAllReduce(sums, sums, (size_t)c->n,
                                           ncclFloat32, ncclSum, st->nccl,
                                           st->comm_stream),
                             what));
        ncclb_watch_group(op);
    }
    CGM_TRY(round_slots(op, CGM_DTYPE_FP32, 1, c->n));
fail:
    return status;
}
