/* The fused executor (p2p_fused.h): when the fused algorithm applies, its
 * per-shape cache (events, AG's tile order) and a call. The schedules are
 * p2p_fused_ops.c's. */
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p_epilogue.h"
#include "backend/p2p/p2p_fused.h"
#include "backend/p2p/p2p_fused_ops.h"
#include "backend/p2p/p2p_signal.h"
#include "backend/p2p/p2p_timeline.h"

/* Pieces per shard when the call leaves splits open. */
#define FUSED_DEFAULT_SPLITS 2

static int effective_splits(const cgm_call *call) {
    int s = call->splits > 0 ? call->splits : FUSED_DEFAULT_SPLITS;
    return s > P2P_MAX_SPLITS ? P2P_MAX_SPLITS : s;
}

/* ------------------------------------------------------ when it applies */

const char *p2p_fused_fp8_problem(const cgm_call *c) {
    if (!c->has_gemm || !cgm_dtype_is_fp8(c->in_dtype)) return NULL;
    if (cgm_dtype_is_fp8(c->out_dtype))
        return "the fused kernel writes a bf16, fp16 or fp32 Y, not an fp8 Y with its scale and amax";
    if (c->has_bias && c->bias.dtype != c->out_dtype)
        return "the fused kernel takes a bias of Y's dtype only";
    if (c->epilogue != CGM_EPILOGUE_NONE)
        return "the fused kernel's GELU and bias-gradient epilogues take bf16 or fp16 inputs, not fp8, "
               "and no p2p algorithm runs an epilogue with fp8 inputs: pass epilogue none and apply it "
               "after the op";
    if (c->k % 16 || c->n % 16) return "the fused kernel with fp8 needs n and k multiples of 16 (16-byte rows)";
    return NULL;
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
    if (c->in_dtype != CGM_DTYPE_BF16 && c->in_dtype != CGM_DTYPE_FP16 && !cgm_dtype_is_fp8(c->in_dtype))
        return "the kernel takes bf16, fp16 or fp8 inputs only";
    const char *fp8 = p2p_fused_fp8_problem(c);
    if (fp8) return fp8;
    if (c->op == CGM_OP_GEMM_REDUCE_SCATTER && P - 1 > CGM_HGEMM_MAX_ADDENDS)
        return "GEMM+RS adds at most 7 peers' partials in the epilogue (P <= 8)";
    if (c->op == CGM_OP_ALL_GATHER_GEMM && c->k % 8 != 0)
        return "the gathered rows need k a multiple of 8 (16-byte TMA rows)";
    if (c->m == 0) return "no rows";
    if (c->epilogue == CGM_EPILOGUE_BGRAD) return "BGRAD is bulk's epilogue";
    if (c->op == CGM_OP_GEMM_REDUCE_SCATTER && c->epilogue == CGM_EPILOGUE_DGELU_BGRAD)
        return "GEMM+RS's DGELU_BGRAD sums columns over the ranks, which the fused schedule does not";
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = c->in_dtype;
    a.out_dtype = c->out_dtype;
    a.m = a.n = 1;
    a.k = a.ldx = a.ldw = a.ldy = 16;
    a.x = a.w = a.y = (void *)st->ws.local; /* any aligned pointer */
    if (cgm_dtype_is_fp8(c->in_dtype)) { /* any aligned pointer for the scales */
        a.w_dtype = c->w_dtype;
        /* fp8_fast_accum is local (local_problem): the recipe's promotion */
        a.fp8_promote = c->scaling != CGM_SCALING_TENSOR;
        if (c->scaling == CGM_SCALING_TENSOR) {
            a.x_scale = a.w_scale = (const float *)st->ws.local;
        } else {
            a.x_block_scale = a.w_block_scale = (const float *)st->ws.local;
            a.x_block_ld = a.w_block_ld = 1; /* k = 16: one k block */
        }
    }
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
 * here keeps the protocol around cuBLASLt (p2p_fused_ops.h, !kernel). */
static const char *local_problem(const p2p_state *st, const cgm_call *c) {
    int P = st->nranks;
    cgm_hgemm_args a = p2p_fused_kernel_args(st, c);
    if (a.bgrad && !a.bgrad_ws) /* before p2p_epi_fused_setup: any aligned pointer */
        a.bgrad_ws = (float *)st->ws.local;
    if (c->op == CGM_OP_ALL_GATHER_GEMM) {
        a.m = c->m;
        a.x = (const char *)st->ws.local + st->gather_offset;
        a.ldx = c->k;
        a.x_own = c->x.data; /* the own rows are read where they are */
        if (cgm_dtype_is_fp8(c->in_dtype)) { /* the gathered scales */
            if (c->scaling == CGM_SCALING_TENSOR) a.x_scale = (const float *)st->ws.local;
            else a.x_block_scale = (const float *)st->ws.local;
        }
        a.ldx_own = cgm_matrix_ld(&c->x);
        a.own_row0 = plan_shard_offset(c->m, st->rank, P);
        a.own_rows = plan_shard_rows(c->m, st->rank, P);
    } else {
        a.m = plan_shard_rows(c->m, st->rank, P);
        a.x = c->x.data;
        a.ldx = cgm_matrix_ld(&c->x);
        a.naddends = P - 1;
        a.addend_dtype = c->partial_dtype;
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

/* AG's tile order: own shard first, then peers in the order their pushes
 * reach me (r-1 pushes to me first, then r-2, ...); a tile spanning two
 * shards goes with the later one. */
static cgm_status make_order(p2p_state *st, int64_t m, int **out) {
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
    int64_t n = plan_fused_tile_order(m, P, r, CGM_HGEMM_TILE_M, order);
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
     * both: a piece's copy done (P*S, ready_after_copy). */
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
    if (c->op == CGM_OP_ALL_GATHER_GEMM)
        CGM_TRY(make_order(st, c->m, &e->order));
    e->used = true;
    e->op = (int)c->op;
    e->m = c->m;
    e->splits = splits;
    e->last_use = ++st->use_clock;
    *out = e;
    CGM_INFO(CGM_SUB_P2P, "p2p: fused %s m=%lld n=%lld k=%lld: %d piece(s) "
             "of %lld rows per shard, kernel %s", cgm_op_name(c->op),
             (long long)c->m, (long long)c->n, (long long)c->k, splits,
             (long long)p2p_fused_piece_rows(c->m, P, splits),
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
    CGM_TRY(p2p_epi_fused_setup(st, call, capturing));
    bool ag = call->op == CGM_OP_ALL_GATHER_GEMM;
    bool kernel = local == NULL;
    CGM_TRY(ag ? p2p_fused_ag(st, call, e, S, kernel, true)
               : p2p_fused_rs(st, call, e, S, kernel, true));
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
    /* The comm queue, the GEMM's, and a local one (own rows, READY kernels
     * beside the pushes). */
    const int nqueues = 3;
    forked = nqueues;
    CGM_TRY(p2p_fork(st, caller, nqueues));
    CGM_TRY(cgm_test_fault_after_fork(&st->fault, st->rank, "p2p"));
    CGM_TRY(ag ? p2p_fused_ag(st, call, e, S, kernel, false)
               : p2p_fused_rs(st, call, e, S, kernel, false));
    CGM_TRY(p2p_join(st, caller, nqueues));
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
