/* How the buffers of a schedule (plan.h: INPUT, OUTPUT, GATHER, PARTIAL,
 * RECV) map to memory for one chunked call (p2p_views.c), and the context
 * the chunked executor (p2p_chunked.c) runs a call in. */
#ifndef COMMGEMM_P2P_VIEWS_H
#define COMMGEMM_P2P_VIEWS_H

#include "backend/p2p/p2p.h"
#include "backend/p2p/p2p_fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One plan buffer on this rank (and, for peer-visible workspace buffers,
 * at the same offset on every rank). */
typedef struct p2p_view {
    bool present;
    char *base;        /* local address */
    bool in_workspace; /* peer visible: base = ws.local + ws_offset */
    size_t ws_offset;
    size_t es;
    cgm_dtype dtype;
    int64_t ld, width;   /* elements; width = extent of the other dim */
    bool split_cols;     /* NT X: the split dimension is the column */
    int64_t row_base;    /* global row of index 0 (not for slots) */
    int64_t capacity;    /* rows (of the split dim) the buffer holds */
    bool slots;          /* PARTIAL / RECV */
    int nslots;
    size_t slot_stride;  /* bytes */
} p2p_view;

/* One chunked call. */
typedef struct p2p_exec_ctx {
    p2p_state *st;
    const cgm_call *call;
    const plan *p;
    bool dry; /* check every step, enqueue nothing */
    bool search; /* dry pass: cgm_lt_prepare the GEMMs (not capturing) */
    bool timeline; /* COMMGEMM_TIMELINE: events around every step */
    /* The bytes of the copy-engine copy last enqueued on the comm queue,
     * when nothing but signals by copy followed it; else 0. A SIGNAL there
     * goes by copy when p2p_signal_copy_after says so. */
    size_t q0_copy_bytes;
    p2p_view views[PLAN_BUF_COUNT];
    p2p_fp8 fp8; /* fp8 calls (p2p_fp8.h) */
    /* Bias-gradient slots (p2p_epilogue.c): how many the GEMM steps write
     * (-1: no bias gradient), and where. */
    int epi_slots;
    float *epi_base;
} p2p_exec_ctx;

/* The views of x->call's `op` on this rank, checked against the
 * workspace: CGM_ERROR_INVALID_ARGUMENT naming the config maximum to raise
 * when the call does not fit. */
cgm_status p2p_views_setup(p2p_exec_ctx *x, plan_op op);
/* The address of global row `row0` of (loc, shard) for `rows` rows, and
 * its view; CGM_ERROR_INTERNAL naming step `step` when the schedule
 * addresses memory the buffer does not have. */
cgm_status p2p_locate(const p2p_exec_ctx *x, const plan_loc *loc, int shard,
                      int64_t row0, int64_t rows, int step, char **out,
                      const p2p_view **v_out);

/* GEMM+AR with accumulate: each rank must add the reduced rows to ITS OWN
 * Y, so the reduced rows travel through GATHER without anybody's Y in
 * them: the owner's final reduce writes sum + bias into GATHER, and every
 * rank (owner included) then adds GATHER rows into OUTPUT. */
bool p2p_ar_accumulate(const p2p_exec_ctx *x);

/* Where a COPY step's rows go: a 2D copy of `height` rows of `width`
 * bytes. skip: nothing to copy (no rows, or AR's reduced rows already in
 * GATHER); add_after: AR with accumulate lands the rows in GATHER and adds
 * them to OUTPUT after the copy. */
typedef struct p2p_copy_geometry {
    char *dst;
    const char *src;
    size_t dst_pitch, src_pitch, width, height;
    bool skip, add_after;
} p2p_copy_geometry;
cgm_status p2p_copy_geometry_of(const p2p_exec_ctx *x, const plan_step *s,
                                int i, p2p_copy_geometry *g);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_VIEWS_H */
