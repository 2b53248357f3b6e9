/* Correctness of every op on the host backend: one case per op x input
 * dtype x P, each forking P ranks that loop over layouts, algorithms,
 * shapes (m = 1, m < P, uneven m) and options (bias, accumulate, fp32
 * output, x_gathered, ld padding, splits), comparing with a one-process
 * reference of the full problem that every rank recomputes from seeds;
 * and the precision options (accepted, agreed, tuned apart). */
#include <stdbool.h>

#include <cblas.h>

#include "mp_common.h"
#include "tune/tune.h"

typedef enum test_op {
    OP_AG,
    OP_RS,
    OP_AR,
    OP_BULK_AG,
    OP_BULK_RS,
    OP_COUNT
} test_op;

static const char *op_names[OP_COUNT] = {"ag_gemm", "gemm_rs", "gemm_ar",
                                         "bulk_ag", "bulk_rs"};

typedef struct ops_case {
    test_op op;
    cgm_dtype dtype;
    int nranks;
} ops_case;

/* Option sets, cycled for every shape. For bulk ops: 0 both halves,
 * 1 collective only, 2 GEMM only, 3 both with bias and accumulate. */
typedef struct variant {
    bool bias, accumulate, out_fp32, x_gathered;
    int pad, splits;
    /* Empty operands: ranks (bits) whose k (RS, AR; AG: any bit, every
     * rank, as AG's k agrees) or n (AG; RS, AR: any bit, every rank) is 0. */
    unsigned k_zero, n_zero;
} variant;

static const variant variants[] = {
    {false, false, false, false, 0, 0, 0, 0},
    {true, true, false, false, 2, 1, 0, 0},
    {true, false, true, true, 1, 2, 0, 0},
    {false, true, true, false, 0, 3, 0, 0},
};
#define VARIANTS (int)(sizeof variants / sizeof variants[0])

/* Operands with no elements, which the header allows (data NULL where rows
 * x cols is 0): k = 0 gives Y = bias (+ Y with accumulate), n = 0 writes
 * nothing; each run with m = 0 too. */
static const variant empty_variants[] = {
    {true, true, false, false, 0, 0, ~0u, 0},  /* k = 0 everywhere, X and W NULL */
    {false, false, true, true, 0, 2, ~0u, 0},  /* k = 0, fp32 Y, empty x_gathered */
    {true, false, false, false, 2, 0, 1u, 0},  /* k = 0 on rank 0 only, ld > 0 */
    {true, true, false, false, 0, 0, 0, ~0u},  /* n = 0: Y, W and bias NULL */
    {false, false, false, false, 0, 1, 0, 2u}, /* n = 0 on rank 1 only (AG) */
};
#define EMPTY_VARIANTS (int)(sizeof empty_variants / sizeof empty_variants[0])

enum { N_BASE = 5, K_BASE = 7, COLL_COLS = 6 };

static const char *layout_names[] = {"TN", "NN", "NT"};

/* ref[i*n+j] += bias[j] + (accumulate ? y_old(i, j) : 0) for rows of y. */
static void add_epilogue(double *ref, int64_t rows, int64_t n,
                         const cgm_matrix *bias, const double *y_old) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            if (bias) ref[i * n + j] += test_get(bias, 0, j);
            if (y_old) ref[i * n + j] += y_old[i * n + j];
        }
}

static double *snapshot(const cgm_matrix *y) {
    double *s = malloc(sizeof(double) * (size_t)(y->rows * y->cols + 1));
    if (!s) TEST_FAIL("out of memory");
    for (int64_t i = 0; i < y->rows; i++)
        for (int64_t j = 0; j < y->cols; j++)
            s[i * y->cols + j] = test_get(y, i, j);
    return s;
}

static void expect_close(const cgm_matrix *y, const double *ref, int64_t rows,
                         int64_t n, double tol) {
    int64_t wrong = test_compare(y, ref, rows, n, tol, mp_context);
    if (wrong) TEST_FAIL("[%s] %lld elements wrong", mp_context, (long long)wrong);
}

/* W of rank q: [n, k] for TN, [k, n] otherwise. */
static cgm_matrix make_w(cgm_dtype dtype, cgm_layout layout, int64_t n,
                         int64_t k, uint64_t seed, int64_t pad) {
    return layout == CGM_LAYOUT_TN ? mp_logical(dtype, false, n, k, 0, seed, pad)
                                   : mp_logical(dtype, false, k, n, 0, seed, pad);
}

/* One op checked against the reference; `precision` (NULL: the defaults)
 * gives the options' partial_dtype and gemm_reduction. A call expected to
 * fail (`expected`, its message containing `message`) is only checked for
 * that. */
static void run_gemm_op(cgm_comm *comm, const ops_case *c, int rank, int P,
                        cgm_layout layout, cgm_algo algo, int64_t m,
                        const variant *v, uint64_t seed,
                        const cgm_op_options *precision, cgm_status expected,
                        const char *message) {
    cgm_dtype in = c->dtype;
    cgm_dtype out = v->out_fp32 ? CGM_DTYPE_FP32 : in;
    bool nt = layout == CGM_LAYOUT_NT, ag = c->op == OP_AG;
    int64_t off = cgm_shard_offset(m, rank, P), mr = cgm_shard_rows(m, rank, P);
    /* AG: n differs per rank; RS/AR: k differs per rank. */
    int64_t n = ag ? N_BASE + rank % 3 : N_BASE;
    int64_t k = ag ? K_BASE : K_BASE + rank % 3;
    if (ag ? v->k_zero != 0 : (v->k_zero >> rank & 1) != 0) k = 0;
    if (ag ? (v->n_zero >> rank & 1) != 0 : v->n_zero != 0) n = 0;
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    if (precision) {
        opt.partial_dtype = precision->partial_dtype;
        opt.gemm_reduction = precision->gemm_reduction;
    }
    opt.layout = layout;
    opt.accumulate = v->accumulate;
    opt.algo = algo;
    opt.splits = v->splits;

    cgm_matrix x = ag ? mp_logical(in, nt, mr, k, off, seed + 1, v->pad)
                      : mp_logical(in, nt, m, k, 0, seed + 1 + (uint64_t)rank,
                                   v->pad);
    cgm_matrix w = make_w(in, layout, n, k, seed + 100 + (uint64_t)rank, v->pad);
    int64_t y_rows = c->op == OP_RS ? mr : m;
    cgm_matrix y = test_alloc(out, y_rows, n, v->pad);
    cgm_matrix bias = mp_logical(out, false, 1, n, 0, seed + 200, 0);
    double *y_old = NULL;
    if (v->accumulate) {
        mp_fill_logical(&y, false, y_rows, n, 0, seed + 300 + (uint64_t)rank);
        y_old = snapshot(&y);
    }
    cgm_matrix xg = {0};
    bool want_xg = ag && v->x_gathered;
    if (want_xg)
        xg = nt ? test_alloc(in, k, m, v->pad) : test_alloc(in, m, k, v->pad);

    cgm_status st;
    const cgm_matrix *b = v->bias ? &bias : NULL;
    if (ag)
        st = cgm_all_gather_gemm(comm, &x, &w, b, &y, want_xg ? &xg : NULL,
                                 &opt, NULL);
    else if (c->op == OP_RS)
        st = cgm_gemm_reduce_scatter(comm, &x, &w, b, &y, &opt, NULL);
    else
        st = cgm_gemm_all_reduce(comm, &x, &w, b, &y, &opt, NULL);
    double *ref = NULL, *part = NULL;
    if (expected != CGM_SUCCESS) {
        if (st != expected)
            TEST_FAIL("[%s] returned %s, expected %s; detail: %s", mp_context, cgm_status_string(st),
                      cgm_status_string(expected), cgm_last_error());
        CHECK_CONTAINS(cgm_last_error(), message);
        goto done;
    }
    MP_CHECK_OK(st);

    ref = calloc((size_t)(m * n + 1), sizeof(double));
    part = calloc((size_t)(m * n + 1), sizeof(double));
    if (!ref || !part) TEST_FAIL("out of memory");
    int64_t k_total = 0;
    for (int q = 0; q < (ag ? 1 : P); q++) {
        int64_t kq = ag ? k : (v->k_zero >> q & 1) ? 0 : K_BASE + q % 3;
        cgm_matrix xq = ag ? mp_logical(CGM_DTYPE_FP32, nt, m, k, 0, seed + 1, 0)
                           : mp_logical(CGM_DTYPE_FP32, nt, m, kq, 0,
                                        seed + 1 + (uint64_t)q, 0);
        cgm_matrix wq = make_w(CGM_DTYPE_FP32, layout, n, kq,
                               seed + 100 + (uint64_t)(ag ? rank : q), 0);
        test_ref_gemm(layout, &xq, &wq, m, n, kq, part);
        for (int64_t i = 0; i < m * n; i++) ref[i] += part[i];
        k_total += kq;
        test_free(&xq);
        test_free(&wq);
    }
    double *mine = c->op == OP_RS ? ref + off * n : ref;
    add_epilogue(mine, y_rows, n, b, y_old);
    expect_close(&y, mine, y_rows, n, test_tolerance(in, out, k_total));
    if (want_xg)
        for (int64_t i = 0; i < m; i++)
            for (int64_t l = 0; l < k; l++) {
                double got = nt ? test_get(&xg, l, i) : test_get(&xg, i, l);
                double want = test_value(seed + 1, i * k + l);
                if (got != want)
                    TEST_FAIL("[%s] x_gathered(%lld, %lld) = %g, expected %g",
                              mp_context, (long long)i, (long long)l, got, want);
            }
done:
    free(ref);
    free(part);
    free(y_old);
    test_free(&x);
    test_free(&w);
    test_free(&y);
    test_free(&bias);
    test_free(&xg);
}

static void run_bulk(cgm_comm *comm, const ops_case *c, int rank, int P,
                     cgm_layout layout, cgm_algo algo, int64_t m, int vi,
                     uint64_t seed) {
    const variant *v = &variants[vi];
    cgm_dtype in = c->dtype;
    bool ag = c->op == OP_BULK_AG, nt = layout == CGM_LAYOUT_NT;
    bool coll = vi != 2, gemm = vi != 1;
    int64_t off = cgm_shard_offset(m, rank, P), mr = cgm_shard_rows(m, rank, P);
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.layout = layout;
    opt.accumulate = vi == 3;
    opt.algo = algo;
    cgm_collective kind = ag ? CGM_COLLECTIVE_ALL_GATHER
                             : CGM_COLLECTIVE_REDUCE_SCATTER;
    /* The GEMM is local: its shape differs per rank. */
    int64_t mg = 3 + rank + m % 5, n = N_BASE, k = K_BASE;
    cgm_dtype out = vi == 2 ? CGM_DTYPE_FP32 : in;
    cgm_matrix a = {0}, b = {0}, cm = {0}, bias = {0}, send = {0}, recv = {0};
    double *c_old = NULL;
    if (gemm) {
        a = mp_logical(in, nt, mg, k, 0, seed + 1 + (uint64_t)rank, v->pad);
        b = make_w(in, layout, n, k, seed + 100 + (uint64_t)rank, v->pad);
        cm = test_alloc(out, mg, n, v->pad);
        bias = mp_logical(out, false, 1, n, 0, seed + 200, 0);
        if (opt.accumulate) {
            mp_fill_logical(&cm, false, mg, n, 0, seed + 300 + (uint64_t)rank);
            c_old = snapshot(&cm);
        }
    }
    if (coll) {
        send = ag ? mp_logical(in, false, mr, COLL_COLS, off, seed + 400, v->pad)
                  : mp_logical(in, false, m, COLL_COLS, 0,
                               seed + 400 + (uint64_t)rank, v->pad);
        recv = test_alloc(in, ag ? m : mr, COLL_COLS, v->pad);
    }
    bool with_bias = gemm && vi == 3;
    MP_CHECK_OK(cgm_bulk_overlap(comm, gemm ? &a : NULL, gemm ? &b : NULL,
                                 with_bias ? &bias : NULL, gemm ? &cm : NULL,
                                 kind, coll ? &send : NULL,
                                 coll ? &recv : NULL, &opt, NULL));
    if (gemm) {
        double *ref = calloc((size_t)(mg * n), sizeof(double));
        cgm_matrix a32 = mp_logical(CGM_DTYPE_FP32, nt, mg, k, 0,
                                    seed + 1 + (uint64_t)rank, 0);
        cgm_matrix b32 = make_w(CGM_DTYPE_FP32, layout, n, k,
                                seed + 100 + (uint64_t)rank, 0);
        test_ref_gemm(layout, &a32, &b32, mg, n, k, ref);
        add_epilogue(ref, mg, n, with_bias ? &bias : NULL, c_old);
        expect_close(&cm, ref, mg, n, test_tolerance(in, out, k));
        free(ref);
        test_free(&a32);
        test_free(&b32);
    }
    if (coll) {
        int64_t rows = ag ? m : mr;
        double *ref = calloc((size_t)(rows * COLL_COLS + 1), sizeof(double));
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < COLL_COLS; j++) {
                if (ag) {
                    ref[i * COLL_COLS + j] =
                        test_value(seed + 400, i * COLL_COLS + j);
                    continue;
                }
                for (int q = 0; q < P; q++)
                    ref[i * COLL_COLS + j] += test_value(
                        seed + 400 + (uint64_t)q, (off + i) * COLL_COLS + j);
            }
        expect_close(&recv, ref, rows, COLL_COLS,
                     ag ? 0.0 : test_tolerance(in, in, P));
        free(ref);
    }
    free(c_old);
    test_free(&a);
    test_free(&b);
    test_free(&cm);
    test_free(&bias);
    test_free(&send);
    test_free(&recv);
}

static int rank_main(int rank, int P, const char *rendezvous, void *arg) {
    const ops_case *c = arg;
    cgm_config cfg = mp_config(30000);
    cfg.host_threads = 1 + rank % 2; /* one and two compute queues */
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    bool bulk = c->op == OP_BULK_AG || c->op == OP_BULK_RS;
    const cgm_algo gemm_algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_RING,
                                   CGM_ALGO_NO_OVERLAP};
    const cgm_algo bulk_algos[] = {CGM_ALGO_BULK, CGM_ALGO_NO_OVERLAP,
                                   CGM_ALGO_AUTO};
    int64_t shapes[] = {1, P - 1, 2 * P + 1, 37, P <= 4 ? 200 : 96};
    uint64_t iteration = 0;
    for (int li = 0; li < 3; li++)
        for (int ai = 0; ai < 3; ai++)
            for (int si = 0; si < 5; si++) {
                int64_t m = shapes[si];
                if (m < 1 || (si == 1 && m == 1)) continue;
                for (int vi = 0; vi < VARIANTS; vi++) {
                    cgm_algo algo = bulk ? bulk_algos[ai] : gemm_algos[ai];
                    /* fused (the p2p kernel's) runs split, or bulk, here:
                     * every other variant of split and auto asks for it. */
                    if (vi % 2 && ((!bulk && ai == 0) || (bulk && ai == 2)))
                        algo = CGM_ALGO_FUSED;
                    uint64_t seed = 1000 * ++iteration;
                    snprintf(mp_context, sizeof mp_context,
                             "rank %d/%d %s %s %s algo %s m=%lld variant %d",
                             rank, P, op_names[c->op],
                             cgm_dtype_name(c->dtype), layout_names[li],
                             cgm_algo_name(algo), (long long)m, vi);
                    if (bulk)
                        run_bulk(comm, c, rank, P, (cgm_layout)li, algo, m, vi,
                                 seed);
                    else
                        run_gemm_op(comm, c, rank, P, (cgm_layout)li, algo, m,
                                    &variants[vi], seed, NULL, CGM_SUCCESS, NULL);
                }
            }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

/* Bulk with empty operands: a GEMM with k = 0 (A and B NULL) writes bias
 * (+ C with accumulate); a collective with no columns (send and recv NULL)
 * or no rows moves nothing. */
static void run_bulk_empty(cgm_comm *comm, int rank, int P, cgm_collective kind, int64_t m, uint64_t seed) {
    const int64_t mg = 4, n = N_BASE;
    bool ag = kind == CGM_COLLECTIVE_ALL_GATHER;
    cgm_matrix a = test_alloc(CGM_DTYPE_FP32, mg, 0, 0), b = test_alloc(CGM_DTYPE_FP32, n, 0, 0);
    cgm_matrix cm = mp_logical(CGM_DTYPE_FP32, false, mg, n, 0, seed, 0);
    cgm_matrix bias = mp_logical(CGM_DTYPE_FP32, false, 1, n, 0, seed + 1, 0);
    int64_t mr = cgm_shard_rows(m, rank, P);
    cgm_matrix send = test_alloc(CGM_DTYPE_FP32, ag ? mr : m, 0, 0);
    cgm_matrix recv = test_alloc(CGM_DTYPE_FP32, ag ? m : mr, 0, 0);
    CHECK(a.data == NULL && b.data == NULL && send.data == NULL && recv.data == NULL);
    double *old = snapshot(&cm);
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.accumulate = 1;
    MP_CHECK_OK(cgm_bulk_overlap(comm, &a, &b, &bias, &cm, kind, &send, &recv, &opt, NULL));
    add_epilogue(old, mg, n, &bias, NULL); /* old = C + bias */
    expect_close(&cm, old, mg, n, 0.0);
    free(old);
    test_free(&cm);
    test_free(&bias);
}

/* Empty operands on every op, layout and algorithm: the defined result on
 * every rank, and the comm stays usable (an ordinary call follows each). */
static int rank_empty(int rank, int P, const char *rendezvous, void *arg) {
    const ops_case *c = arg;
    cgm_config cfg = mp_config(30000);
    cfg.host_threads = 1 + rank % 2;
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    const cgm_algo algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_RING, CGM_ALGO_NO_OVERLAP, CGM_ALGO_AUTO};
    const int64_t shapes[] = {0, 2 * P + 1};
    uint64_t seed = 0;
    for (int li = 0; li < 3; li++)
        for (int ai = 0; ai < 4; ai++)
            for (int si = 0; si < 2; si++)
                for (int vi = -1; vi < EMPTY_VARIANTS; vi++) {
                    /* vi = -1: the ordinary variant, with m = 0 */
                    if (vi < 0 && shapes[si] != 0) continue;
                    const variant *v = vi < 0 ? &variants[0] : &empty_variants[vi];
                    snprintf(mp_context, sizeof mp_context, "rank %d/%d %s %s %s algo %s m=%lld empty variant %d",
                             rank, P, op_names[c->op], cgm_dtype_name(c->dtype), layout_names[li],
                             cgm_algo_name(algos[ai]), (long long)shapes[si], vi);
                    run_gemm_op(comm, c, rank, P, (cgm_layout)li, algos[ai], shapes[si], v, 1000 * ++seed, NULL,
                                CGM_SUCCESS, NULL);
                    snprintf(mp_context, sizeof mp_context, "rank %d/%d %s after empty variant %d", rank, P,
                             op_names[c->op], vi);
                    run_gemm_op(comm, c, rank, P, (cgm_layout)li, algos[ai], 37, &variants[1], 1000 * ++seed,
                                NULL, CGM_SUCCESS, NULL);
                }
    for (int kind = 0; kind < CGM_COLLECTIVE_COUNT_; kind++)
        for (int64_t m = 0; m <= P + 1; m += P + 1) {
            snprintf(mp_context, sizeof mp_context, "rank %d/%d bulk %s m=%lld, empty", rank, P,
                     kind ? "rs" : "ag", (long long)m);
            run_bulk_empty(comm, rank, P, (cgm_collective)kind, m, 1000 * ++seed);
        }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_empty(const void *param) {
    const ops_case *c = param;
    CHECK_INT_EQ(test_run_ranks(c->nranks, rank_empty, (void *)c, 100, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* Precision on the host backend, which always sums exact fp32 partials
 * with fp32 GEMMs: every partial dtype and GEMM reduction is accepted and
 * gives the exact result; the partial dtype is checked for agreement (on
 * the GPU backends it changes the bytes on the wire), as the dtype sent,
 * the GEMM reduction is not (local); the tuner keeps one decision per
 * partial dtype. Rank 0's comm defaults to output-dtype partials. */
static int rank_precision(int rank, int P, const char *rendezvous, void *arg) {
    const ops_case *c = arg;
    cgm_config cfg = mp_config(30000);
    cfg.partial_dtype = rank == 0 ? CGM_PARTIAL_DTYPE_OUTPUT : CGM_PARTIAL_DTYPE_DEFAULT;
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    const int64_t m = 37;
    const variant plain = variants[0], fp32_out = variants[2];
    uint64_t seed = 1;
    for (int op = OP_RS; op <= OP_AR; op++) {
        ops_case oc = *c;
        oc.op = (test_op)op;
        for (int pd = CGM_PARTIAL_DTYPE_FP32; pd <= CGM_PARTIAL_DTYPE_OUTPUT; pd++) {
            cgm_op_options o = CGM_OP_OPTIONS_INIT;
            o.partial_dtype = (cgm_partial_dtype)pd;
            o.gemm_reduction = rank % 2 ? CGM_GEMM_REDUCTION_ANY : CGM_GEMM_REDUCTION_FP32;
            snprintf(mp_context, sizeof mp_context, "rank %d/%d %s %s partial_dtype %s, gemm_reduction %s", rank,
                     P, op_names[op], cgm_dtype_name(c->dtype), cgm_partial_dtype_name(o.partial_dtype),
                     cgm_gemm_reduction_name(o.gemm_reduction));
            run_gemm_op(comm, &oc, rank, P, CGM_LAYOUT_TN, CGM_ALGO_SPLIT_PIPELINED, m, &plain, seed++, &o,
                        CGM_SUCCESS, NULL);
        }
        /* The comms' defaults differ: bf16/fp16 partials on rank 0, fp32
         * on the others; every rank is told, and the comm stays usable. */
        snprintf(mp_context, sizeof mp_context, "rank %d/%d %s %s, the comms' partial dtypes", rank, P,
                 op_names[op], cgm_dtype_name(c->dtype));
        char want[160];
        snprintf(want, sizeof want, "rank 1 passed partial dtype = fp32 but rank 0 passed partial dtype = %s",
                 cgm_dtype_name(c->dtype)); /* the first rank that differs, on every rank */
        run_gemm_op(comm, &oc, rank, P, CGM_LAYOUT_TN, CGM_ALGO_SPLIT_PIPELINED, m, &plain, seed++, NULL,
                    CGM_ERROR_MISMATCH, want);
        /* With fp32 outputs both send fp32: the same call. */
        run_gemm_op(comm, &oc, rank, P, CGM_LAYOUT_TN, CGM_ALGO_SPLIT_PIPELINED, m, &fp32_out, seed++, NULL,
                    CGM_SUCCESS, NULL);
    }
    /* Tuned calls (algo and splits left open): a decision per partial dtype. */
    ops_case rs = *c;
    rs.op = OP_RS;
    const cgm_partial_dtype order[] = {CGM_PARTIAL_DTYPE_FP32, CGM_PARTIAL_DTYPE_OUTPUT, CGM_PARTIAL_DTYPE_FP32};
    const uint64_t measured_after[] = {1, 2, 2};
    for (int i = 0; i < 3; i++) {
        cgm_op_options o = CGM_OP_OPTIONS_INIT;
        o.partial_dtype = order[i];
        snprintf(mp_context, sizeof mp_context, "rank %d/%d tuned gemm_rs %s partial_dtype %s", rank, P,
                 cgm_dtype_name(c->dtype), cgm_partial_dtype_name(order[i]));
        run_gemm_op(comm, &rs, rank, P, CGM_LAYOUT_TN, CGM_ALGO_AUTO, m, &plain, seed++, &o, CGM_SUCCESS, NULL);
        cgm_tune_stats st;
        cgm_tune_get_stats(comm, &st);
        CHECK_INT_EQ(st.measured, measured_after[i]);
    }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_precision(const void *param) {
    const ops_case *c = param;
    CHECK_INT_EQ(test_run_ranks(c->nranks, rank_precision, (void *)c, 100, NULL), 0);
    mp_check_no_shm_leftovers();
}

static void run_case(const void *param) {
    const ops_case *c = param;
    int codes[8];
    int rc = test_run_ranks(c->nranks, rank_main, (void *)c, 100, codes);
    CHECK_INT_EQ(rc, 0);
    mp_check_no_shm_leftovers();
}

static ops_case cases[OP_COUNT * 3 * 5 + 2 + 3 * 2];

static void register_cases(void) {
    const cgm_dtype dtypes[] = {CGM_DTYPE_FP32, CGM_DTYPE_BF16, CGM_DTYPE_FP16};
    const int sizes[] = {1, 2, 3, 4, 8};
    int i = 0;
    test_set_timeout(120);
    for (int op = 0; op < OP_COUNT; op++)
        for (int d = 0; d < 3; d++)
            for (int s = 0; s < 5; s++, i++) {
                cases[i] = (ops_case){(test_op)op, dtypes[d], sizes[s]};
                char name[64];
                snprintf(name, sizeof name, "%s.%s.p%d", op_names[op],
                         cgm_dtype_name(dtypes[d]), sizes[s]);
                test_add(name, run_case, &cases[i]);
            }
    for (int d = 1; d < 3; d++, i++) {
        cases[i] = (ops_case){OP_RS, dtypes[d], d + 1};
        char name[64];
        snprintf(name, sizeof name, "precision.%s.p%d", cgm_dtype_name(dtypes[d]), d + 1);
        test_add(name, run_precision, &cases[i]);
    }
    for (int op = OP_AG; op <= OP_AR; op++)
        for (int p = 1; p <= 3; p += 2, i++) {
            cases[i] = (ops_case){(test_op)op, op == OP_RS ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32, p};
            char name[64];
            snprintf(name, sizeof name, "empty_operands.%s.%s.p%d", op_names[op], cgm_dtype_name(cases[i].dtype), p);
            test_add(name, run_empty, &cases[i]);
        }
}

int main(int argc, char **argv) {
    /* Up to 8 ranks share 2 cores: BLAS threads would only oversubscribe. */
    openblas_set_num_threads(1);
    return test_main(argc, argv, register_cases);
}
