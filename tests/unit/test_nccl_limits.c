/* The nccl backend's limits (ncclb_check_limits): a call beyond the comm's
 * maxima, and a reduction over more ranks than the reduce kernel sums, are
 * refused before anything is enqueued, with a message naming what to
 * change. Pure checks on a state that has only a config and a rank count,
 * so they run without a GPU or a 65-rank job (built where the CUDA toolkit
 * and NCCL are). */
#include <stdint.h>
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

/* A call and what the limits say of it: CGM_SUCCESS, or a status and a
 * part of its message. */
typedef struct limit_case {
    cgm_call call;
    cgm_status expected;
    const char *says;
} limit_case;

static void expect_all(const fixture *f, const limit_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        CHECK_STATUS(ncclb_check_limits(&f->st, &cases[i].call), cases[i].expected);
        if (cases[i].says) CHECK_CONTAINS(cgm_last_error(), cases[i].says);
    }
}

/* 64 ranks: every op within the maxima passes; each maximum is enforced,
 * naming its variable; a GEMM-only bulk call has nothing to limit. m is
 * enforced for every op and both bulk collectives: the core leaves an m
 * above max_m to this check, after the agreement exchange (validate.c
 * max_m_after_agreement). */
static void test_maxima(const void *p) {
    (void)p;
    fixture f;
    fixture_init(&f, CGM_DEV_MAX_SOURCES);
    cgm_call gemm_only = bulk_call(CGM_COLLECTIVE_ALL_GATHER, 1 << 20, 1 << 20);
    gemm_only.has_collective = false;
    const limit_case cases[] = {
        {gemm_call(CGM_OP_ALL_GATHER_GEMM, 4096, 9999, 1024), CGM_SUCCESS, NULL},
        {gemm_call(CGM_OP_GEMM_REDUCE_SCATTER, 4096, 2048, 9999), CGM_SUCCESS, NULL},
        {gemm_call(CGM_OP_GEMM_ALL_REDUCE, 4096, 2048, 9999), CGM_SUCCESS, NULL},
        {bulk_call(CGM_COLLECTIVE_REDUCE_SCATTER, 4096, 2048), CGM_SUCCESS, NULL},
        {bulk_call(CGM_COLLECTIVE_ALL_GATHER, 4096, 2048), CGM_SUCCESS, NULL},
        {gemm_only, CGM_SUCCESS, NULL},
        {gemm_call(CGM_OP_GEMM_REDUCE_SCATTER, 4097, 2048, 64), CGM_ERROR_INVALID_ARGUMENT,
         "cgm_gemm_reduce_scatter (nccl backend): m = 4097 exceeds COMMGEMM_MAX_M = 4096"},
        {gemm_call(CGM_OP_ALL_GATHER_GEMM, 4097, 64, 64), CGM_ERROR_INVALID_ARGUMENT,
         "cgm_all_gather_gemm (nccl backend): m = 4097 exceeds COMMGEMM_MAX_M = 4096"},
        {gemm_call(CGM_OP_GEMM_ALL_REDUCE, INT32_MAX, 64, 64), CGM_ERROR_INVALID_ARGUMENT,
         "cgm_gemm_all_reduce (nccl backend): m = 2147483647 exceeds COMMGEMM_MAX_M = 4096"},
        {bulk_call(CGM_COLLECTIVE_ALL_GATHER, 4097, 64), CGM_ERROR_INVALID_ARGUMENT,
         "cgm_bulk_overlap (nccl backend): the collective's rows = 4097 exceeds COMMGEMM_MAX_M"},
        {bulk_call(CGM_COLLECTIVE_REDUCE_SCATTER, 4097, 64), CGM_ERROR_INVALID_ARGUMENT,
         "the collective's rows = 4097 exceeds COMMGEMM_MAX_M = 4096"},
        {gemm_call(CGM_OP_ALL_GATHER_GEMM, 64, 64, 1025), CGM_ERROR_INVALID_ARGUMENT,
         "k = 1025 exceeds COMMGEMM_MAX_K = 1024, the largest size its workspaces were made "
         "for; create the comm with a larger COMMGEMM_MAX_K (or config field max_k)"},
        {gemm_call(CGM_OP_GEMM_ALL_REDUCE, 64, 2049, 64), CGM_ERROR_INVALID_ARGUMENT,
         "n = 2049 exceeds COMMGEMM_MAX_N = 2048"},
        {bulk_call(CGM_COLLECTIVE_ALL_GATHER, 64, 2049), CGM_ERROR_INVALID_ARGUMENT,
         "the collective's columns = 2049 exceeds COMMGEMM_MAX_N = 2048"},
    };
    expect_all(&f, cases, sizeof cases / sizeof cases[0]);
}

/* 65 ranks: the reductions (GEMM+RS, GEMM+AR, a bulk reduce-scatter) are
 * refused as not supported, saying how many the kernel sums; AG+GEMM and a
 * bulk all-gather, which sum nothing, still pass. */
static void test_too_many_sources(const void *p) {
    (void)p;
    fixture f;
    fixture_init(&f, CGM_DEV_MAX_SOURCES + 1);
    const limit_case cases[] = {
        {gemm_call(CGM_OP_GEMM_REDUCE_SCATTER, 4096, 2048, 64), CGM_ERROR_NOT_SUPPORTED,
         "cgm_gemm_reduce_scatter (nccl backend): 65 ranks, but its reduction sums at most 64 "
         "sources"},
        {gemm_call(CGM_OP_GEMM_ALL_REDUCE, 4096, 2048, 64), CGM_ERROR_NOT_SUPPORTED,
         "use fewer ranks per tensor-parallel group"},
        {bulk_call(CGM_COLLECTIVE_REDUCE_SCATTER, 4096, 2048), CGM_ERROR_NOT_SUPPORTED,
         "cgm_bulk_overlap (nccl backend): reduce-scatter over 65 ranks"},
        {gemm_call(CGM_OP_ALL_GATHER_GEMM, 4096, 2048, 64), CGM_SUCCESS, NULL},
        {bulk_call(CGM_COLLECTIVE_ALL_GATHER, 4096, 2048), CGM_SUCCESS, NULL},
    };
    expect_all(&f, cases, sizeof cases / sizeof cases[0]);
}

static void register_cases(void) {
    test_add("maxima", test_maxima, NULL);
    test_add("too_many_sources", test_too_many_sources, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
