/* The p2p backend's epilogues (commgemm.h "Epilogues").
 *
 * AG+GEMM (split, ring, no_overlap), bulk's GEMM, and every op on one
 * rank: the final GEMM steps write Y's rows, so each gets cuBLASLt's
 * epilogue (lt_epilogue.c) with aux at its rows. cuBLASLt writes a GEMM's
 * bias gradient (DGELU_BGRAD's column sums over its rows; bulk's BGRAD),
 * it does not add it: each final GEMM step writes a slot of its own (fp32,
 * or a 16-bit Y's dtype: cgm_lt_bgrad_dtype, one rounding per step),
 * numbered by the step's first row (every rank's plan cuts the m rows into
 * the same pieces, so every rank numbers and sums alike), and after the
 * last step one kernel sums the slots in that order and rounds once into
 * bgrad.
 *
 * GEMM+RS on more than one rank: the activation comes after the
 * reduction: the owner's final reduce steps (own_addends is off for an
 * epilogue call, so every row of Y is written by one) apply GELU,
 * GELU_AUX or DGELU in fp32 before their one rounding, with this rank's
 * aux at the step's rows. DGELU_BGRAD there (its column sums summed over
 * the ranks) and GEMM+AR (whose peers receive rounded Y rows, not fp32
 * ones to apply their own aux to) are refused, pointing at the nccl
 * backend.
 *
 * The fused algorithm (p2p_fused_ops.c) the same way in its own kernel
 * (cgm_hgemm's epilogue): AG+GEMM's one kernel over the gathered rows
 * applies it to the whole output block, DGELU_BGRAD's column sums over all
 * m rows from the kernel's per-16-row slots, summed in row order; GEMM+RS's
 * own kernel applies GELU, GELU_AUX or DGELU after adding the peers'
 * partials (the peers' partial GEMMs have none). A rank whose operands do
 * not suit the kernel runs cuBLASLt's epilogue on its one AG GEMM (one
 * slot) or the epilogue in its RS reduce. */
#include <string.h>

#include "backend/p2p/p2p_epilogue.h"
#include "gpu/lt_epilogue.h"

static bool grad(const cgm_call *c) {
    return c->epilogue == CGM_EPILOGUE_DGELU_BGRAD ||
           c->epilogue == CGM_EPILOGUE_BGRAD;
}

cgm_status p2p_epilogue_check(const cgm_comm *comm, const cgm_call *call) {
    const char *name = cgm_epilogue_name(call->epilogue);
    if (call->epilogue == CGM_EPILOGUE_NONE) return CGM_SUCCESS;
    if (comm->nranks > 1 && (call->op == CGM_OP_GEMM_ALL_REDUCE ||
                             (call->op == CGM_OP_GEMM_REDUCE_SCATTER &&
                              call->epilogue == CGM_EPILOGUE_DGELU_BGRAD)))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the p2p backend: %s with epilogue %s on more than one rank: %s; run "
                         "this call on the nccl backend (options.backend = CGM_BACKEND_NCCL), or "
                         "pass CGM_EPILOGUE_NONE and apply %s after the op",
                         cgm_op_name(call->op), name,
                         call->op == CGM_OP_GEMM_ALL_REDUCE
                             ? "the peers receive Y's rounded rows, not the fp32 sums each "
                               "rank's own aux applies to"
                             : "the column sums would have to be summed over the ranks, "
                               "which the p2p schedules do not do",
                         name);
    return cgm_gpu_epilogue_check("p2p", call, comm->nranks);
}

/* Floats between two slots: the gradient's length rounded up to 4 (every
 * slot 16-byte aligned). */
static int64_t slot_stride(const cgm_call *c) {
    int64_t len = c->epilogue == CGM_EPILOGUE_BGRAD ? c->m : c->n;
    return (len + 3) / 4 * 4;
}

static bool is_bulk(const p2p_exec_ctx *x) {
    return x->p->req.op == PLAN_OP_BULK_AG || x->p->req.op == PLAN_OP_BULK_RS;
}

/* Whether step s is a GEMM that writes Y's rows with the epilogue. */
static bool epi_step(const p2p_exec_ctx *x, const plan_step *s) {
    if (s->kind != PLAN_GEMM) return false;
    if (is_bulk(x)) return x->call->has_gemm;
    /* AG+GEMM's and one rank's GEMMs write Y; GEMM+RS's on P > 1 are
     * partials (own_addends is off with an epilogue) */
    if (x->p->req.op != PLAN_OP_AG_GEMM && x->st->nranks > 1) return false;
    return s->final && s->ref_count == 0 && s->rows > 0;
}

/* The slot of step s: the final GEMM steps before its first row. */
static int slot_of(const p2p_exec_ctx *x, const plan_step *s) {
    int slot = 0;
    if (is_bulk(x)) return 0;
    for (int i = 0; i < x->p->nsteps; i++) {
        const plan_step *t = &x->p->steps[i];
        if (epi_step(x, t) && t->row0 < s->row0) slot++;
    }
    return slot;
}

cgm_status p2p_epi_setup(p2p_exec_ctx *x, bool capturing) {
    const cgm_call *c = x->call;
    x->epi_slots = -1;
    x->epi_base = NULL;
    if (!grad(c)) return CGM_SUCCESS;
    int n = 0;
    for (int i = 0; i < x->p->nsteps; i++)
        if (epi_step(x, &x->p->steps[i])) n++;
    /* cuBLASLt writes no slot for an empty Y (m or n 0): zeros then. */
    if (c->m == 0 || c->n == 0) n = 0;
    size_t need = (size_t)(n > 0 ? n : 1) * (size_t)slot_stride(c) * sizeof(float);
    cgm_status status = cgm_fp8_workspace_ensure(&x->st->epi_ws, need, capturing,
                                                 "p2p (bias gradients)");
    if (status != CGM_SUCCESS) return status;
    x->epi_slots = n;
    x->epi_base = x->st->epi_ws.buf;
    return CGM_SUCCESS;
}

void p2p_epi_args(const p2p_exec_ctx *x, const plan_step *s, bool bulk,
                  cgm_lt_gemm_args *g) {
    const cgm_call *c = x->call;
    if (c->epilogue == CGM_EPILOGUE_NONE || !epi_step(x, s)) return;
    const int64_t row0 = bulk ? 0 : s->row0;
    g->epilogue = c->epilogue;
    if (c->has_aux) {
        g->ld_aux = cgm_matrix_ld(&c->aux);
        g->aux = (char *)c->aux.data +
                 (size_t)(row0 * g->ld_aux) * cgm_dtype_size(c->aux.dtype);
    }
    if (grad(c))
        g->bgrad = x->epi_base + (size_t)slot_of(x, s) * (size_t)slot_stride(c);
}

cgm_status p2p_epi_finish(const p2p_exec_ctx *x, cudaStream_t caller) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    if (x->epi_slots < 0) return CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_dev_sum_slots(x->epi_base, (int)cgm_lt_bgrad_dtype(c->out_dtype),
                                   x->epi_slots, slot_stride(c),
                                   c->epilogue == CGM_EPILOGUE_BGRAD ? c->m : c->n,
                                   c->bgrad.data, (int)c->bgrad.dtype, x->st->dev,
                                   caller));
fail:
    return status;
}

void p2p_epi_reduce(const p2p_exec_ctx *x, const plan_step *s,
                    cgm_dev_reduce_args *a) {
    const cgm_call *c = x->call;
    if (c->epilogue == CGM_EPILOGUE_NONE || !s->final ||
        x->p->req.op != PLAN_OP_GEMM_RS || x->st->nranks == 1)
        return;
    a->epilogue = (int)c->epilogue;
    if (c->has_aux) {
        const int64_t off = cgm_shard_offset(c->m, x->st->rank, x->st->nranks);
        a->aux_ld = cgm_matrix_ld(&c->aux);
        a->aux = (char *)c->aux.data +
                 (size_t)((s->row0 - off) * a->aux_ld) * cgm_dtype_size(c->aux.dtype);
    }
}

/* ------------------------------------------------------ the fused algorithm */

static bool fused_grad(const cgm_call *c) {
    return c->epilogue == CGM_EPILOGUE_DGELU_BGRAD;
}

cgm_status p2p_epi_fused_setup(p2p_state *st, const cgm_call *c,
                               bool capturing) {
    if (!fused_grad(c)) return CGM_SUCCESS;
    /* the kernel's slots; cuBLASLt's one slot (n values) fits in them */
    size_t need = cgm_hgemm_bgrad_ws_bytes(c->m > 0 ? c->m : 1, c->n);
    return cgm_fp8_workspace_ensure(&st->epi_ws, need < 16 ? 16 : need,
                                    capturing, "p2p (bias gradients)");
}

void p2p_epi_fused_kernel(const p2p_state *st, const cgm_call *c,
                          cgm_hgemm_args *a) {
    if (c->epilogue == CGM_EPILOGUE_NONE) return;
    a->epilogue = (int)c->epilogue;
    if (c->has_aux) { /* row 0 of aux is row 0 of the kernel's Y */
        a->aux = c->aux.data;
        a->aux_ld = cgm_matrix_ld(&c->aux);
    }
    if (fused_grad(c)) {
        a->bgrad = c->bgrad.data;
        a->bgrad_dtype = c->bgrad.dtype;
        a->bgrad_ws = st->epi_ws.buf;
    }
}

void p2p_epi_fused_lt(const p2p_state *st, const cgm_call *c,
                      cgm_lt_gemm_args *g) {
    if (c->epilogue == CGM_EPILOGUE_NONE) return;
    g->epilogue = c->epilogue;
    if (c->has_aux) {
        g->aux = c->aux.data;
        g->ld_aux = cgm_matrix_ld(&c->aux);
    }
    if (fused_grad(c)) g->bgrad = st->epi_ws.buf;
}

cgm_status p2p_epi_fused_lt_finish(const p2p_state *st, const cgm_call *c,
                                   cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    if (!fused_grad(c)) return CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_dev_sum_slots(st->epi_ws.buf,
                                   (int)cgm_lt_bgrad_dtype(c->out_dtype), 1,
                                   (c->n + 3) / 4 * 4, c->n, c->bgrad.data,
                                   (int)c->bgrad.dtype, st->dev, stream));
fail:
    return status;
}

void p2p_epi_fused_reduce(const cgm_call *c, int64_t row0,
                          cgm_dev_reduce_args *a) {
    if (c->epilogue == CGM_EPILOGUE_NONE) return;
    a->epilogue = (int)c->epilogue;
    if (c->has_aux) {
        a->aux_ld = cgm_matrix_ld(&c->aux);
        a->aux = (char *)c->aux.data +
                 (size_t)(row0 * a->aux_ld) * cgm_dtype_size(c->aux.dtype);
    }
}
