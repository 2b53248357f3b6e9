/* One p2p op (p2p_run.h): validate against the workspace, agree with the
 * peers, choose the chunked or the fused executor, run it. */
#include <string.h>

#include "backend/p2p/p2p_chunked.h"
#include "backend/p2p/p2p_fused.h"
#include "backend/p2p/p2p_plans.h"
#include "backend/p2p/p2p_run.h"
#include "backend/p2p/p2p_signal.h"

static int auto_splits(plan_op op, int64_t m, int nranks) {
    int64_t shard = cgm_ceil_div(m, nranks);
    if (op == PLAN_OP_BULK_AG || op == PLAN_OP_BULK_RS) return 1;
    /* Pieces of >= 2048 rows keep each cuBLASLt chunk efficient; a few
     * pieces per shard let the first GEMM start early and shorten the tail. */
    int64_t s = shard / 2048;
    if (s > 4) s = 4;
    if (s < 1) s = 1;
    return (int)s;
}

/* The schedule `call` runs (also where the fused executor takes it: the
 * request checks the algorithm and gives the limits their m). */
static cgm_status make_request(p2p_state *st, const cgm_call *call,
                               plan_request *req) {
    memset(req, 0, sizeof *req);
    req->nranks = st->nranks;
    req->rank = st->rank;
    req->has_gemm = true;
    req->has_collective = true;
    req->compute_queues = 2;
    switch (call->op) {
    case CGM_OP_ALL_GATHER_GEMM:
        req->op = PLAN_OP_AG_GEMM;
        /* One compute queue, or the tuner's two (call->queues). */
        req->compute_queues = call->queues > 0 ? call->queues : 1;
        break;
    case CGM_OP_GEMM_REDUCE_SCATTER:
        /* One compute queue: each push starts when its GEMM ends (on
         * two, the GPU may run a later GEMM beside or before the one
         * whose push is due). */
        req->op = PLAN_OP_GEMM_RS;
        req->compute_queues = 1;
        break;
    case CGM_OP_GEMM_ALL_REDUCE:
        req->op = PLAN_OP_GEMM_AR;
        req->compute_queues = 1;
        break;
    case CGM_OP_BULK:
        req->op = call->collective == CGM_COLLECTIVE_ALL_GATHER
                      ? PLAN_OP_BULK_AG : PLAN_OP_BULK_RS;
        req->has_gemm = call->has_gemm;
        req->has_collective = call->has_collective;
        break;
    default:
        return cgm_error(CGM_ERROR_INTERNAL, "p2p: op %d", (int)call->op);
    }
    bool bulk = call->op == CGM_OP_BULK;
    req->m = bulk ? (call->has_collective ? call->coll_m : 0) : call->m;
    switch (call->algo) {
    case CGM_ALGO_AUTO:
        req->algo = bulk ? PLAN_ALGO_BULK : PLAN_ALGO_SPLIT;
        break;
    case CGM_ALGO_SPLIT_PIPELINED:
    case CGM_ALGO_FUSED: /* calls p2p_fused_applies() refused */
        req->algo = bulk ? PLAN_ALGO_BULK : PLAN_ALGO_SPLIT;
        break;
    case CGM_ALGO_RING: req->algo = bulk ? PLAN_ALGO_BULK : PLAN_ALGO_RING;
        break;
    case CGM_ALGO_BULK:
        if (!bulk)
            return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                             "p2p: algorithm 'bulk' is for cgm_bulk_overlap, "
                             "found it on %s; use split, ring or no_overlap",
                             cgm_op_name(call->op));
        req->algo = PLAN_ALGO_BULK;
        break;
    case CGM_ALGO_NO_OVERLAP: req->algo = PLAN_ALGO_NO_OVERLAP; break;
    default:
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "p2p: algorithm %d",
                         (int)call->algo);
    }
    int splits = call->splits > 0 ? call->splits
                                  : auto_splits(req->op, req->m, st->nranks);
    req->splits = splits > P2P_MAX_SPLITS ? P2P_MAX_SPLITS : splits;
    /* GEMM+RS split's own pieces add the peer's partial in their GEMM
     * where the plan layer's rule says so and an engine can: cuBLASLt's C
     * takes a partial of the output's dtype, commgemm's kernel one of any
     * partial dtype (TN, 16-bit inputs, sm_90: p2p_fused_tunable). Neither
     * beside an accumulate. This rank's choice alone: the writers' side of
     * the plan is the same either way. */
    /* Not with an epilogue either: the owner's final reduce applies it
     * (p2p_epilogue.c). */
    if (!call->accumulate && call->k > 0 && !cgm_dtype_is_fp8(call->in_dtype) &&
        call->epilogue == CGM_EPILOGUE_NONE && plan_prefers_own_addends(req)) {
        req->own_addends = call->partial_dtype == call->out_dtype ||
                           p2p_fused_tunable(st, call);
    }
    return CGM_SUCCESS;
}

/* The call against the workspace's maxima (after the agreement check: a
 * rank whose call is beyond them while its peers' are not, another shape,
 * makes every rank fail the exchange with CGM_ERROR_MISMATCH instead of
 * leaving the peers in it). The core leaves an m above max_m to this
 * check (validate.c, max_m_after_agreement): req->m is every op's m and a
 * bulk call's collective rows. */
static cgm_status check_limits(const p2p_state *st, const cgm_call *call,
                               const plan_request *req) {
    const cgm_resolved_config *cfg = &st->comm->config;
    if (call->has_gemm && (call->k > cfg->max_k || call->n > cfg->max_n))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: %s with n=%lld, k=%lld, expected n <= "
                         "max_n=%lld and k <= max_k=%lld (the workspace is "
                         "sized from them); raise cgm_config.max_n/max_k "
                         "(COMMGEMM_MAX_N/COMMGEMM_MAX_K)",
                         cgm_op_name(call->op), (long long)call->n,
                         (long long)call->k, (long long)cfg->max_n,
                         (long long)cfg->max_k);
    if (req->m > cfg->max_m)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: %s with m=%lld, expected m <= max_m=%lld (the "
                         "workspace is sized from it); raise cgm_config.max_m "
                         "(COMMGEMM_MAX_M)", cgm_op_name(call->op),
                         (long long)req->m, (long long)cfg->max_m);
    return CGM_SUCCESS;
}

static cgm_status execute(p2p_state *st, const cgm_call *call) {
    cgm_status status = CGM_SUCCESS;
    bool capturing = cgm_stream_capturing((cudaStream_t)call->stream);
    plan_request req;
    CGM_TRY(p2p_check_agreement(st, call, capturing));
    CGM_TRY(make_request(st, call, &req));
    CGM_TRY(check_limits(st, call, &req));
    if (call->algo == CGM_ALGO_FUSED) {
        const char *why = NULL;
        if (p2p_fused_applies(st, call, &why))
            return p2p_fused_execute(st, call);
        if (st->fused_fallback_notes < 8) {
            st->fused_fallback_notes++;
            CGM_INFO(CGM_SUB_P2P, "p2p: fused %s m=%lld n=%lld k=%lld runs "
                     "split: %s", cgm_op_name(call->op), (long long)call->m,
                     (long long)call->n, (long long)call->k, why);
        }
    }
    return p2p_chunked_execute(st, call, &req);
fail:
    return status;
}

cgm_status p2p_run(cgm_comm *comm, void *state, const cgm_call *call) {
    p2p_state *st = state;
    int previous = -1;
    cgm_status status = cgm_p2p_async_error(comm, st);
    if (status != CGM_SUCCESS) return status;
    CGM_TRY(p2p_enter_device(st, &previous));
    status = execute(st, call);
fail:
    p2p_leave_device(st, previous);
    return status;
}
