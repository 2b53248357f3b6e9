/* Per-rank traces of every argument the cublasmp backend passes to
 * cuBLASMp (COMMGEMM_DEBUG=TRACE COMMGEMM_DEBUG_SUBSYS=CUBLASMP; lines are
 * prefixed host:pid:rank and flushed, so they survive a killed rank). Put
 * side by side, two ranks' traces show any argument that differs where
 * cuBLASMp needs it equal. */
#include <stdio.h>

#include "backend/cublasmp/cublasmp_state.h"

static const char *grid_name(cmp_grid g) {
    return g == CMP_GRID_COL ? "Px1 (COL_MAJOR)" : "1xP (ROW_MAJOR)";
}

static const char *type_name(int type) {
    switch (type) {
    case CMP_CUDA_R_32F: return "CUDA_R_32F";
    case CMP_CUDA_R_16F: return "CUDA_R_16F";
    case CMP_CUDA_R_16BF: return "CUDA_R_16BF";
    default: return "?";
    }
}

void cmp_trace_descriptor(const cmp_state *st, const char *which,
                          const cmp_geom *g, int type) {
    if (!cgm_log_enabled(CGM_LOG_TRACE, CGM_SUB_CUBLASMP)) return;
    CGM_TRACE(CGM_SUB_CUBLASMP, "cublasMpMatrixDescriptorCreate %s: m=%lld "
              "n=%lld mb=%lld nb=%lld rsrc=0 csrc=0 lld=%lld type=%d (%s) "
              "grid=%s %p (rank %d of %d)",
              which, (long long)g->rows, (long long)g->cols, (long long)g->mb,
              (long long)g->nb, (long long)g->lld, type, type_name(type),
              grid_name(g->grid), (void *)st->grid[g->grid], st->rank,
              st->nranks);
}

/* "A 71x97 mb=36 nb=97 lld=79 1xP CUDA_R_16BF" */
static void geom_text(char *buf, size_t len, const char *name,
                      const cmp_geom *g, int type) {
    snprintf(buf, len, "%s %lldx%lld mb=%lld nb=%lld lld=%lld %s %s", name,
             (long long)g->rows, (long long)g->cols, (long long)g->mb,
             (long long)g->nb, (long long)g->lld,
             g->grid == CMP_GRID_COL ? "Px1" : "1xP", type_name(type));
}

void cmp_trace_matmul(const cmp_state *st, const char *fn,
                      const cmp_entry *e, const void *alpha, const void *a,
                      const void *b, const void *beta, const void *c,
                      const void *d, void *ws, size_t ws_bytes,
                      void *host_ws, size_t host_bytes, const void *stream) {
    if (!cgm_log_enabled(CGM_LOG_TRACE, CGM_SUB_CUBLASMP)) return;
    const cmp_problem *p = &e->prob;
    char ga[160], gb[160], gd[160];
    geom_text(ga, sizeof ga, "A(W)", &p->a, e->a_type);
    geom_text(gb, sizeof gb, "B(X)", &p->b, e->b_type);
    geom_text(gd, sizeof gd, e->out.fp32_d ? "D(fp32 buffer)" : "D(Y)",
              &e->dgeom, e->d_type);
    /* One line with everything a stall needs compared across ranks: the
     * problem, every descriptor's geometry, the algorithm (each call, not
     * only the first of a shape). */
    CGM_TRACE(CGM_SUB_CUBLASMP, "%s: m=%lld n=%lld k=%lld op(A)=%s op(B)=%s "
              "algo=%d (%s) epilogue=%s compute=%d P=%d (%s) | %s | %s | %s%s",
              fn, (long long)p->m, (long long)p->n, (long long)p->k,
              p->trans_a ? "T" : "N", p->trans_b ? "T" : "N", e->key.algo,
              cmp_algo_type_name(e->key.algo),
              p->native_ar ? "ALLREDUCE" : "DEFAULT", e->key.compute,
              st->nranks,
              p->gather_rows ? "GEMM+RS, then ncclAllGather"
              : p->native_ar ? "cuBLASMp's Matmul + AllReduce" : "",
              ga, gb, gd, e->staged ? " | B staged in symmetric memory" : "");
    CGM_TRACE(CGM_SUB_CUBLASMP, "%s(handle=%p, desc=%p, m=%lld, n=%lld, "
              "k=%lld, alpha=%g, A=%p ia=1 ja=1 descA=%p, B=%p%s ib=1 jb=1 "
              "descB=%p, beta=%g, C=%p ic=1 jc=1 descC=%p, D=%p%s id=1 jd=1 "
              "descD=%p, d_work=%p (%zu B%s), h_work=%p (%zu B)) stream=%p "
              "rank %d of %d",
              fn, (void *)st->handle, (void *)e->mm, (long long)p->m,
              (long long)p->n, (long long)p->k, (double)*(const float *)alpha,
              a, (void *)e->a, b, e->staged ? " (symmetric staging)" : "",
              (void *)e->b, (double)*(const float *)beta, c,
              c ? (void *)e->d : NULL, d, e->out.fp32_d ? " (fp32 buffer)" : "",
              (void *)e->d, ws, ws_bytes, ws ? ", symmetric" : "",
              host_ws, host_bytes, stream, st->rank, st->nranks);
}
