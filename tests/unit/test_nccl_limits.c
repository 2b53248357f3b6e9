/* The nccl backend's limits (ncclb_check_limits): a call beyond the comm's
 * maxima, and a reduction over more ranks than the reduce kernel sums, are
 * refused before anything is enqueued, with a message naming what to
 * change. Pure checks on a state that has only a config and a rank count,
 * so they run without a GPU or a 65-rank job (built where the CUDA toolkit
 * and NCCL are). */
#include <string.h>

#include "harness.h"

#include "backend/nccl/nccl_backend.h"

typedef struct fixture {
    cgm_comm comm;
    ncclb_state st;
} fixture;

static void fixture_init(fixture *f, int nranks) {
    memset(f, 0, sizeof *f);
    f->comm.config.max_m = 4096;
    f->comm.config.max_n = 2048;
    f->comm.config.max_k = 1024;
    f->st.comm = &f->comm;
    f->st.nranks = nranks;
}

static cgm_call gemm_call(cgm_op op, int64_t m, int64_t n, int64_t k) {
    cgm_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.has_gemm = true;
    c.m = m, c.n = n, c.k = k;
    return c;
}

static cgm_call bulk_call(cgm_collective coll, int64_t rows, int64_t cols) {
    cgm_call c;
    memset(&c, 0, sizeof c);
    c.op = CGM_OP_BULK;
    c.has_collective = true;
    c.collective = coll;
    c.coll_m = rows;
    c.coll_cols = cols;
    return c;
}

/* 64 ranks: every op within the maxima passes; each maximum is enforced,
 * naming its variable. */
static void test_maxima(const void *p) {
    (void)p;
    fixture f;
    fixture_init(&f, CGM_DEV_MAX_SOURCES);
    cgm_call ok[] = {gemm_call(CGM_OP_ALL_GATHER_GEMM, 4096, 9999, 1024),
                     gemm_call(CGM_OP_GEMM_REDUCE_SCATTER, 4096, 2048, 9999),
                     gemm_call(CGM_OP_GEMM_ALL_REDUCE, 4096, 2048, 9999),
                     bulk_call(CGM_COLLECTIVE_REDUCE_SCATTER, 4096, 2048),
                     bulk_call(CGM_COLLECTIVE_ALL_GATHER, 4096, 2048)};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) CHECK_OK(ncclb_check_limits(&f.st, &ok[i]));
    cgm_call m_big = gemm_call(CGM_OP_GEMM_REDUCE_SCATTER, 4097, 2048, 64);
    CHECK_STATUS(ncclb_check_limits(&f.st, &m_big), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "cgm_gemm_reduce_scatter (nccl backend): m = 4097 exceeds COMMGEMM_MAX_M = 4096");
    CHECK_CONTAINS(cgm_last_error(), "(or config field max_m)");
    cgm_call k_big = gemm_call(CGM_OP_ALL_GATHER_GEMM, 64, 64, 1025);
    CHECK_STATUS(ncclb_check_limits(&f.st, &k_big), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "k = 1025 exceeds COMMGEMM_MAX_K = 1024");
    cgm_call n_big = gemm_call(CGM_OP_GEMM_ALL_REDUCE, 64, 2049, 64);
    CHECK_STATUS(ncclb_check_limits(&f.st, &n_big), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "n = 2049 exceeds COMMGEMM_MAX_N = 2048");
    cgm_call cols_big = bulk_call(CGM_COLLECTIVE_ALL_GATHER, 64, 2049);
    CHECK_STATUS(ncclb_check_limits(&f.st, &cols_big), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "the collective's columns = 2049 exceeds COMMGEMM_MAX_N = 2048");
    cgm_call gemm_only = bulk_call(CGM_COLLECTIVE_ALL_GATHER, 1 << 20, 1 << 20);
    gemm_only.has_collective = false; /* a GEMM-only bulk call: nothing to limit */
    CHECK_OK(ncclb_check_limits(&f.st, &gemm_only));
}

/* 65 ranks: the reductions (GEMM+RS, GEMM+AR, a bulk reduce-scatter) are
 * refused as not supported, saying how many the kernel sums; AG+GEMM and a
 * bulk all-gather, which sum nothing, still pass. */
static void test_too_many_sources(const void *p) {
    (void)p;
    fixture f;
    fixture_init(&f, CGM_DEV_MAX_SOURCES + 1);
    cgm_call rs = gemm_call(CGM_OP_GEMM_REDUCE_SCATTER, 4096, 2048, 64);
    CHECK_STATUS(ncclb_check_limits(&f.st, &rs), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "cgm_gemm_reduce_scatter (nccl backend): 65 ranks, but its reduction sums at most 64 sources");
    cgm_call ar = gemm_call(CGM_OP_GEMM_ALL_REDUCE, 4096, 2048, 64);
    CHECK_STATUS(ncclb_check_limits(&f.st, &ar), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "use fewer ranks per tensor-parallel group");
    cgm_call brs = bulk_call(CGM_COLLECTIVE_REDUCE_SCATTER, 4096, 2048);
    CHECK_STATUS(ncclb_check_limits(&f.st, &brs), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "cgm_bulk_overlap (nccl backend): reduce-scatter over 65 ranks");
    cgm_call ag = gemm_call(CGM_OP_ALL_GATHER_GEMM, 4096, 2048, 64);
    CHECK_OK(ncclb_check_limits(&f.st, &ag));
    cgm_call bag = bulk_call(CGM_COLLECTIVE_ALL_GATHER, 4096, 2048);
    CHECK_OK(ncclb_check_limits(&f.st, &bag));
}

static void register_cases(void) {
    test_add("maxima", test_maxima, NULL);
    test_add("too_many_sources", test_too_many_sources, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
