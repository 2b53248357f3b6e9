/* GPU cases beyond the op matrix: a > 1 GiB gathered input, CUDA graph
 * capture + replay, the bounded wait (timeout naming the rank that never
 * came) and the workspace limits. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/p2p/p2p.h" /* P2P_FUSED_CACHE */
#include "core/core.h"
#include "test_gpu_common.h"

/* ------------------------------------------------- > 1 GiB gathered input */

static void large_body(gpu_rank *g, void *arg) {
    (void)arg;
    int r = g->rank, P = g->nranks;
    const int64_t m = 65536, k = 8192, n = 128; /* X: 1 GiB of bf16 */
    cudaStream_t st = g->stream;
    int64_t m_r = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    cgm_matrix x = gpu_matrix(CGM_DTYPE_BF16, m_r, k);
    cgm_matrix w = gpu_matrix(CGM_DTYPE_BF16, n, k);
    cgm_matrix y = gpu_matrix(CGM_DTYPE_BF16, m, n);
    cgm_matrix xg = gpu_matrix(CGM_DTYPE_BF16, m, k);
    cgm_matrix xfull = gpu_matrix(CGM_DTYPE_BF16, m, k);
    gpu_fill(&x, 5, off, 0, k, st);
    gpu_fill(&xfull, 5, 0, 0, k, st);
    gpu_fill(&w, 6 + (uint64_t)r, 0, 0, k, st);
    double *ref_dev = NULL;
    GPU_CHECK(cudaMalloc((void **)&ref_dev, (size_t)(m * n) * sizeof(double)));
    GPU_CHECK(tref_gemm(CGM_LAYOUT_TN, CGM_DTYPE_BF16, xfull.data, w.data, m,
                        n, k, ref_dev, 0, st));
    CHECK_OK(cgm_all_gather_gemm(g->comm, &x, &w, NULL, &y, &xg, NULL, st));
    GPU_CHECK(cudaStreamSynchronize(st));
    double *ref = gpu_fetch_doubles(ref_dev, (size_t)(m * n), st);
    gpu_expect(&y, ref, m, n, 4 * test_tolerance(CGM_DTYPE_BF16,
                                                  CGM_DTYPE_BF16, k),
               st, "AG+GEMM bf16 m=65536 k=8192 (1 GiB gathered)");
    unsigned long long bad = 0;
    GPU_CHECK(tref_count_mismatch(xg.data, xfull.data,
                                  (size_t)(m * k) * 2, &bad, st));
    CHECK_INT_EQ(bad, 0);
    free(ref);
    cudaFree(ref_dev);
    gpu_matrix_free(&x);
    gpu_matrix_free(&w);
    gpu_matrix_free(&y);
    gpu_matrix_free(&xg);
    gpu_matrix_free(&xfull);
}

static void test_large(const void *param) {
    (void)param;
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    cfg.max_m = 65536;
    cfg.max_k = 8192;
    cfg.max_n = 256;
    gpu_run(P, &cfg, large_body, NULL, 240);
}

/* ------------------------------------------------------ graph capture */

/* arg: NULL (m = 777), or the int64_t m to use. */
static void graph_body(gpu_rank *g, void *arg) {
    int r = g->rank, P = g->nranks;
    const int64_t m = arg ? *(const int64_t *)arg : 777, k = 264, n = 192;
    cudaStream_t st = g->stream;
    int64_t m_r = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    cgm_dtype dt = CGM_DTYPE_BF16;
    cgm_matrix xs = gpu_matrix(dt, m_r, k), xfull = gpu_matrix(dt, m, k);
    cgm_matrix w = gpu_matrix(dt, n, k), bias = gpu_matrix(dt, 1, n);
    cgm_matrix y_ag = gpu_matrix(dt, m, n), y_rs = gpu_matrix(dt, m_r, n);
    cgm_matrix y_ar = gpu_matrix(dt, m, n);
    gpu_fill(&w, 31 + (uint64_t)r, 0, 0, k, st);
    gpu_fill(&bias, 88, 0, 0, n, st);
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    /* The eager calls create plans, events and cuBLASLt descriptors. */
    gpu_fill(&xs, 1, off, 0, k, st);
    gpu_fill(&xfull, 1000 + (uint64_t)r, 0, 0, k, st);
    CHECK_OK(cgm_all_gather_gemm(g->comm, &xs, &w, &bias, &y_ag, NULL, &opt,
                                 st));
    CHECK_OK(cgm_gemm_reduce_scatter(g->comm, &xfull, &w, &bias, &y_rs, &opt,
                                     st));
    CHECK_OK(cgm_gemm_all_reduce(g->comm, &xfull, &w, NULL, &y_ar, &opt, st));
    GPU_CHECK(cudaStreamSynchronize(st));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GPU_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(cgm_all_gather_gemm(g->comm, &xs, &w, &bias, &y_ag, NULL, &opt,
                                 st));
    CHECK_OK(cgm_gemm_reduce_scatter(g->comm, &xfull, &w, &bias, &y_rs, &opt,
                                     st));
    CHECK_OK(cgm_gemm_all_reduce(g->comm, &xfull, &w, NULL, &y_ar, &opt, st));
    GPU_CHECK(cudaStreamEndCapture(st, &graph));
    GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));

    double tol = 4 * test_tolerance(dt, dt, k), tol_reduced = tol;
    cgm_partial_dtype pd = CGM_PARTIAL_DTYPE_DEFAULT;
    CHECK_OK(cgm_comm_precision(g->comm, &pd, NULL));
    if (pd == CGM_PARTIAL_DTYPE_OUTPUT)
        /* P partials rounded once each to bf16, as in test_gpu_ops. */
        tol_reduced += P * test_tolerance(dt, dt, 0) / 2 * sqrt((double)k);
    double *ref_dev = NULL;
    GPU_CHECK(cudaMalloc((void **)&ref_dev, (size_t)(m * n) * sizeof(double)));
    cgm_matrix xq = gpu_matrix(dt, m, k), wq = gpu_matrix(dt, n, k);
    for (int rep = 0; rep < 3; rep++) {
        /* Fresh inputs each replay: the graph must read them anew. */
        uint64_t seed = 10 + (uint64_t)rep;
        cgm_matrix xg_ag = gpu_matrix(dt, m, k);
        gpu_fill(&xs, seed, off, 0, k, st);
        gpu_fill(&xg_ag, seed, 0, 0, k, st);
        gpu_fill(&xfull, seed * 100 + (uint64_t)r, 0, 0, k, st);
        GPU_CHECK(cudaMemsetAsync(y_ag.data, 0xff, (size_t)(m * n) * 2, st));
        GPU_CHECK(cudaMemsetAsync(y_ar.data, 0xff, (size_t)(m * n) * 2, st));
        GPU_CHECK(cudaGraphLaunch(exec, st));
        GPU_CHECK(cudaStreamSynchronize(st));
        cgm_status async = CGM_SUCCESS;
        CHECK_OK(cgm_comm_get_async_error(g->comm, &async));
        CHECK_INT_EQ(async, CGM_SUCCESS);
        /* AG */
        GPU_CHECK(tref_gemm(CGM_LAYOUT_TN, dt, xg_ag.data, w.data, m, n, k,
                            ref_dev, 0, st));
        double *ref = gpu_fetch_doubles(ref_dev, (size_t)(m * n), st);
        for (int64_t i = 0; i < m * n; i++) ref[i] += gpu_value(88, i % n);
        gpu_expect(&y_ag, ref, m, n, tol, st, "graph replay AG+GEMM");
        free(ref);
        /* RS and AR share the reduced reference: every rank q's X and W
         * refilled from their seeds (no collective, no NCCL). */
        for (int q = 0; q < P; q++) {
            gpu_fill(&xq, seed * 100 + (uint64_t)q, 0, 0, k, st);
            gpu_fill(&wq, 31 + (uint64_t)q, 0, 0, k, st);
            GPU_CHECK(tref_gemm(CGM_LAYOUT_TN, dt, xq.data, wq.data, m, n, k,
                                ref_dev, q > 0, st));
        }
        ref = gpu_fetch_doubles(ref_dev, (size_t)(m * n), st);
        gpu_expect(&y_ar, ref, m, n, tol_reduced, st, "graph replay GEMM+AR");
        for (int64_t i = 0; i < m * n; i++) ref[i] += gpu_value(88, i % n);
        gpu_expect(&y_rs, ref + off * n, m_r, n, tol_reduced, st,
                   "graph replay GEMM+RS");
        free(ref);
        gpu_matrix_free(&xg_ag);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(ref_dev);
    gpu_matrix_free(&xq);
    gpu_matrix_free(&wq);
    gpu_matrix_free(&xs);
    gpu_matrix_free(&xfull);
    gpu_matrix_free(&w);
    gpu_matrix_free(&bias);
    gpu_matrix_free(&y_ag);
    gpu_matrix_free(&y_rs);
    gpu_matrix_free(&y_ar);
}

/* param: NULL, or the cgm_algo every call of the comm uses (fused). */
static void test_graph(const void *param) {
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    if (param) cfg.algo = *(const cgm_algo *)param;
    gpu_run(P, &cfg, graph_body, NULL, 120);
}

/* More captured fused shapes than the fused cache holds (P2P_FUSED_CACHE):
 * capturing shape i+64 evicts the entry of shape i, whose tile order the
 * graph of shape i still reads. Every graph, replayed afterwards with fresh
 * inputs, must give its own shape's product (compute-sanitizer's memcheck
 * catches a read of a freed order where the plain run may not). */
enum { EVICT_SHAPES = P2P_FUSED_CACHE + 4 };

static void graph_evicted_body(gpu_rank *g, void *arg) {
    (void)arg;
    int r = g->rank, P = g->nranks;
    const int64_t k = 264, n = 192, m_max = 128 + 7 * (EVICT_SHAPES - 1);
    cudaStream_t st = g->stream;
    cgm_dtype dt = CGM_DTYPE_BF16;
    cgm_matrix xs = gpu_matrix(dt, cgm_shard_rows(m_max, 0, P), k);
    cgm_matrix xfull = gpu_matrix(dt, m_max, k), w = gpu_matrix(dt, n, k);
    cgm_matrix y = gpu_matrix(dt, m_max, n);
    gpu_fill(&w, 77 + (uint64_t)r, 0, 0, k, st);
    static cudaGraphExec_t exec[EVICT_SHAPES];
    for (int i = 0; i < EVICT_SHAPES; i++) {
        int64_t m = 128 + 7 * i;
        cgm_matrix xs_i = xs, y_i = y;
        xs_i.rows = cgm_shard_rows(m, r, P);
        y_i.rows = m;
        gpu_fill(&xs_i, 1, cgm_shard_offset(m, r, P), 0, k, st);
        /* the eager call makes the shape's entry, the capture reuses it */
        CHECK_OK(cgm_all_gather_gemm(g->comm, &xs_i, &w, NULL, &y_i, NULL, NULL, st));
        GPU_CHECK(cudaStreamSynchronize(st));
        cudaGraph_t graph;
        GPU_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        CHECK_OK(cgm_all_gather_gemm(g->comm, &xs_i, &w, NULL, &y_i, NULL, NULL, st));
        GPU_CHECK(cudaStreamEndCapture(st, &graph));
        GPU_CHECK(cudaGraphInstantiate(&exec[i], graph, 0));
        cudaGraphDestroy(graph);
    }
    double *ref_dev = NULL;
    GPU_CHECK(cudaMalloc((void **)&ref_dev, (size_t)(m_max * n) * sizeof(double)));
    double tol = 4 * test_tolerance(dt, dt, k);
    for (int i = 0; i < EVICT_SHAPES; i++) {
        int64_t m = 128 + 7 * i;
        uint64_t seed = 500 + (uint64_t)i;
        cgm_matrix xs_i = xs, xfull_i = xfull, y_i = y;
        xs_i.rows = cgm_shard_rows(m, r, P);
        xfull_i.rows = y_i.rows = m;
        gpu_fill(&xs_i, seed, cgm_shard_offset(m, r, P), 0, k, st);
        gpu_fill(&xfull_i, seed, 0, 0, k, st);
        GPU_CHECK(cudaMemsetAsync(y.data, 0xff, (size_t)(m_max * n) * 2, st));
        GPU_CHECK(cudaGraphLaunch(exec[i], st));
        GPU_CHECK(cudaStreamSynchronize(st));
        cgm_status async = CGM_SUCCESS;
        CHECK_OK(cgm_comm_get_async_error(g->comm, &async));
        CHECK_INT_EQ(async, CGM_SUCCESS);
        GPU_CHECK(tref_gemm(CGM_LAYOUT_TN, dt, xfull_i.data, w.data, m, n, k, ref_dev, 0, st));
        double *ref = gpu_fetch_doubles(ref_dev, (size_t)(m * n), st);
        char what[96];
        snprintf(what, sizeof what, "replay of the graph of fused AG+GEMM m=%lld (shape %d of %d)",
                 (long long)m, i + 1, EVICT_SHAPES);
        gpu_expect(&y_i, ref, m, n, tol, st, what);
        free(ref);
        cudaGraphExecDestroy(exec[i]);
    }
    cudaFree(ref_dev);
    gpu_matrix_free(&xs);
    gpu_matrix_free(&xfull);
    gpu_matrix_free(&w);
    gpu_matrix_free(&y);
}

static void test_graph_fused_evicted(const void *param) {
    (void)param;
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    cfg.algo = CGM_ALGO_FUSED;
    gpu_run(P, &cfg, graph_evicted_body, NULL, 240);
}

/* Pushes of 8 MiB or more, whose signals go by copy (p2p_signal_copy_after:
 * one piece per shard of 65536 rows, up to 4 ranks; more ranks push less
 * and signal by kernel): the 8-byte copy reads the epoch when it runs, so
 * each replay must signal its own. param: NULL, or the cgm_algo (fused). */
static void test_graph_signal_copy(const void *param) {
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    cfg.max_m = 65536;
    cfg.max_n = cfg.max_k = 512;
    cfg.splits = 1;
    if (param) cfg.algo = *(const cgm_algo *)param;
    static int64_t m = 65536;
    gpu_run(P, &cfg, graph_body, &m, 240);
}

/* GEMM+RS split with 2 pieces per shard (and AG, AR alike), captured and
 * replayed: with 2 ranks the own pieces' GEMMs add the peer's partial (the
 * bias in the same epilogue). param NULL: bf16 partials
 * (config partial_dtype output), which cuBLASLt's C adds; non-NULL: fp32
 * partials, which commgemm's kernel adds in its epilogue before the
 * conversion to the 16-bit output. Other rank counts reduce. */
static void test_graph_rs_own(const void *param) {
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    cfg.splits = 2;
    if (!param) cfg.partial_dtype = CGM_PARTIAL_DTYPE_OUTPUT;
    gpu_run(P, &cfg, graph_body, NULL, 120);
}

/* ------------------------------------------------------------- timeout */

/* The ranks of a case that needs two (COMMGEMM_TEST_RANKS=2 shares one
 * GPU); skips, saying so, with fewer. `which`: "the timeout case"... */
static void need_two_ranks(const char *which) {
    int P = gpu_ranks_or_skip();
    if (P < 2)
        TEST_SKIP("%s needs 2 ranks, found %d GPU (or set "
                  "COMMGEMM_TEST_RANKS=2 to share it)", which, P);
}

/* The op of the timeout and failure cases: a bf16 AG+GEMM of 512 rows
 * (k = n = 128), this rank's operands filled. */
typedef struct small_ag {
    cgm_matrix x, w, y;
} small_ag;

static small_ag small_ag_rows(gpu_rank *g, int64_t m) {
    const int64_t k = 128, n = 128;
    int r = g->rank, P = g->nranks;
    small_ag a;
    a.x = gpu_matrix(CGM_DTYPE_BF16, cgm_shard_rows(m, r, P), k);
    a.w = gpu_matrix(CGM_DTYPE_BF16, n, k);
    a.y = gpu_matrix(CGM_DTYPE_BF16, m, n);
    gpu_fill(&a.x, 3, cgm_shard_offset(m, r, P), 0, k, g->stream);
    gpu_fill(&a.w, 4, 0, 0, k, g->stream);
    return a;
}

static small_ag small_ag_make(gpu_rank *g) { return small_ag_rows(g, 512); }

static void small_ag_free(small_ag *a) {
    gpu_matrix_free(&a->x);
    gpu_matrix_free(&a->w);
    gpu_matrix_free(&a->y);
}

static cgm_status small_ag_call(gpu_rank *g, small_ag *a) {
    return cgm_all_gather_gemm(g->comm, &a->x, &a->w, NULL, &a->y, NULL, NULL,
                               g->stream);
}

/* After an op enqueued at t0 whose peer `who` ("rank 1") never did its
 * part, or failed in it: the stream drains within bound_ms (bounded), the
 * comm reports `expected` naming `who`, and so does the next op. Returns
 * the seconds waited. */
static double expect_peer_gave_up(gpu_rank *g, small_ag *a, int64_t t0,
                                  cgm_status expected, const char *who,
                                  int64_t bound_ms) {
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    double waited_s = (double)(cgm_now_ns() - t0) / 1e9;
    if (waited_s > (double)bound_ms / 1e3)
        TEST_FAIL("rank %d waited %.2f s, expected at most %.1f s", g->rank,
                  waited_s, (double)bound_ms / 1e3);
    cgm_status async = CGM_SUCCESS;
    CHECK_OK(cgm_comm_get_async_error(g->comm, &async));
    CHECK_INT_EQ(async, expected);
    CHECK_CONTAINS(cgm_last_error(), who);
    CHECK_STATUS(small_ag_call(g, a), expected);
    CHECK_CONTAINS(cgm_last_error(), who);
    printf("rank %d after %.2f s: %s\n", g->rank, waited_s, cgm_last_error());
    return waited_s;
}

/* The same for a peer that never came: CGM_ERROR_TIMEOUT after about the
 * 1 s timeout. */
static double expect_peer_timeout(gpu_rank *g, small_ag *a, int64_t t0,
                                  const char *who) {
    return expect_peer_gave_up(g, a, t0, CGM_ERROR_TIMEOUT, who,
                               test_scaled_ms(2500));
}

/* Ends a rank of a broken pair without the teardown, after staying alive
 * (its mapped memory valid) while the peer waits out its timeout. */
static void linger_and_exit(bool linger) {
    if (linger) sleep((unsigned)((test_scaled_ms(4000) + 999) / 1000));
    fflush(stdout);
    _exit(0);
}

static void timeout_body(gpu_rank *g, void *arg) {
    (void)arg;
    small_ag a = small_ag_make(g);
    /* Both ranks once (agreement and plan made), then rank 1 skips. */
    CHECK_OK(small_ag_call(g, &a));
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    if (g->rank != 0) linger_and_exit(g->rank == 1);
    int64_t t0 = cgm_now_ns();
    CHECK_OK(small_ag_call(g, &a));
    expect_peer_timeout(g, &a, t0, "rank 1");
    cgm_comm_destroy(g->comm);
    linger_and_exit(false);
}

static void test_timeout(const void *param) {
    need_two_ranks("the timeout case");
    cgm_config cfg = gpu_config();
    if (param) cfg.algo = *(const cgm_algo *)param;
    cfg.timeout_ms = test_scaled_ms(1000); /* also bounds comm creation */
    gpu_run(2, &cfg, timeout_body, NULL, 60);
}

/* ------------------------------------------------- failure after fork */

/* COMMGEMM_TEST_FAIL=0:2: rank 0's second op fails on purpose right
 * after its fork, before it enqueues a step. Rank 0 gets the failure at
 * once, its stream joined back (a sync returns) and its comm broken, and
 * it tells rank 1 (the notice word, device.h): rank 1's op, waiting for
 * rank 0's signals, gives up at once with CGM_ERROR_PEER_FAILED naming
 * rank 0, well within its 20 s timeout (before the notice it waited out
 * the timeout). */
static void fail_after_fork_body(gpu_rank *g, void *arg) {
    (void)arg;
    small_ag a = small_ag_make(g);
    CHECK_OK(small_ag_call(g, &a));
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    int64_t t0 = cgm_now_ns();
    if (g->rank == 0) {
        CHECK_STATUS(small_ag_call(g, &a), CGM_ERROR_CUDA);
        CHECK_CONTAINS(cgm_last_error(), "failure injected on rank 0");
        CHECK_CONTAINS(cgm_last_error(), "out of step");
        CHECK_CONTAINS(cgm_last_error(), "destroy it");
        GPU_CHECK(cudaStreamSynchronize(g->stream));
        double took_s = (double)(cgm_now_ns() - t0) / 1e9;
        if (took_s > (double)test_scaled_ms(2500) / 1e3)
            TEST_FAIL("the failed op and its sync took %.2f s, expected at "
                      "once", took_s);
        /* Broken: the next op is refused at once, saying why. */
        CHECK_STATUS(small_ag_call(g, &a), CGM_ERROR_CUDA);
        CHECK_CONTAINS(cgm_last_error(), "broken by an earlier failure");
        printf("rank 0: %s\n", cgm_last_error());
        CHECK_OK(cgm_comm_destroy(g->comm));
        linger_and_exit(true);
    }
    if (g->rank != 1) linger_and_exit(false);
    CHECK_OK(small_ag_call(g, &a));
    expect_peer_gave_up(g, &a, t0, CGM_ERROR_PEER_FAILED, "rank 0",
                        test_scaled_ms(3000));
    CHECK_CONTAINS(cgm_last_error(), "rank 0 failed during an op");
    cgm_comm_destroy(g->comm);
    linger_and_exit(false);
}

static void test_fail_after_fork(const void *param) {
    need_two_ranks("the failure case");
    /* Read once per process: set before the ranks start. */
    setenv("COMMGEMM_TEST_FAIL", "0:2", 1);
    cgm_config cfg = gpu_config();
    /* An algorithm and split count given: no tuner runs among the ops. */
    cfg.algo = param ? *(const cgm_algo *)param : CGM_ALGO_SPLIT_PIPELINED;
    cfg.splits = 2;
    cfg.timeout_ms = test_scaled_ms(20000);
    gpu_run(2, &cfg, fail_after_fork_body, NULL, 90);
}

/* A rank of test_run_ranks on a LOCAL bootstrap: its device set (rank r
 * on GPU r % count, so ranks may share one), its bootstrap returned. */
static cgm_bootstrap local_rank_bootstrap(int rank, int P, const char *rdv,
                                          int *ndev) {
    GPU_CHECK(cudaGetDeviceCount(ndev));
    GPU_CHECK(cudaSetDevice(rank % *ndev));
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = CGM_BOOTSTRAP_LOCAL;
    b.rank = rank;
    b.nranks = P;
    b.rendezvous = rdv;
    return b;
}

/* Three ranks on a LOCAL bootstrap (they may share a GPU), each with its
 * own timeout: rank 0 1 s, ranks 1 and 2 20 s. After one op together,
 * rank 2 skips the next. Rank 0's wait expires after 1 s, naming rank 2,
 * or rank 1 when rank 1's push to rank 0 was queued behind its push to
 * rank 2 (which waits for rank 2); rank 0 tells every rank as soon as it
 * learns of it, and rank 1 gives up at once with CGM_ERROR_TIMEOUT saying
 * rank 0 told it, instead of waiting its own 20 s. */
static int rank_told_of_expiry(int rank, int P, const char *rdv, void *arg) {
    int ndev = 0;
    cgm_bootstrap b = local_rank_bootstrap(rank, P, rdv, &ndev);
    cgm_config cfg = gpu_config();
    cfg.algo = arg ? *(const cgm_algo *)arg : CGM_ALGO_SPLIT_PIPELINED;
    cfg.splits = 2;
    cfg.timeout_ms = test_scaled_ms(rank == 0 ? 1000 : 20000);
    gpu_rank g = {rank, P, ndev, NULL, NULL, NULL};
    CHECK_OK(cgm_comm_create(&b, &cfg, &g.comm));
    GPU_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    small_ag a = small_ag_make(&g);
    CHECK_OK(small_ag_call(&g, &a));
    GPU_CHECK(cudaStreamSynchronize(g.stream));
    if (rank == 2) linger_and_exit(true);
    int64_t t0 = cgm_now_ns();
    CHECK_OK(small_ag_call(&g, &a));
    if (rank == 0) {
        expect_peer_timeout(&g, &a, t0, "never came");
        CHECK(strstr(cgm_last_error(), "found rank 2 never came") ||
              strstr(cgm_last_error(), "found rank 1 never came"));
    } else {
        expect_peer_gave_up(&g, &a, t0, CGM_ERROR_TIMEOUT, "rank 0 told it",
                            test_scaled_ms(4000));
    }
    cgm_comm_destroy(g.comm);
    linger_and_exit(rank == 0);
    return 0;
}

static void test_told_of_expiry(const void *param) {
    (void)gpu_ranks_or_skip();
    if (test_run_ranks(3, rank_told_of_expiry, (void *)param, 120, NULL) != 0)
        TEST_FAIL("a rank failed (see above)");
}

/* What the notices (p2p_tell_peers) rely on: a copy-engine store into a
 * peer's workspace stays safe when that peer freed it or exited, because
 * the driver keeps an imported allocation until its importer closes it.
 * Two forked processes (on one GPU, or GPUs 0 and 1): the exporter
 * allocates and exports 1 MiB; the importer opens it; then the exporter
 * (mode 0) stays, (1) exits without freeing, (2) frees it and stays, or
 * (3) frees it and exits. The importer then stores 4 bytes into it with
 * the copy engine (as a notice is sent), reads them back, and checks that
 * its context still works. */
static void read_all(int fd, void *buf, size_t n) {
    if (read(fd, buf, n) != (ssize_t)n) TEST_FAIL("pipe read: %s", strerror(errno));
}
static void write_all(int fd, const void *buf, size_t n) {
    if (write(fd, buf, n) != (ssize_t)n) TEST_FAIL("pipe write: %s", strerror(errno));
}

static void exporter(int mode, int to_imp, int from_imp) {
    void *p = NULL;
    cudaIpcMemHandle_t h;
    GPU_CHECK(cudaMalloc(&p, 1 << 20));
    GPU_CHECK(cudaMemset(p, 0, 1 << 20));
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaIpcGetMemHandle(&h, p));
    write_all(to_imp, &h, sizeof h);
    char c;
    read_all(from_imp, &c, 1); /* the importer opened it */
    if (mode >= 2) {
        GPU_CHECK(cudaFree(p));
        GPU_CHECK(cudaDeviceSynchronize());
    }
    write_all(to_imp, &c, 1);
    if (mode == 0 || mode == 2) read_all(from_imp, &c, 1); /* stay */
    fflush(stdout);
    _exit(0);
}

/* The importer: forks the exporter before its own first CUDA call, so
 * that it can wait for the exporter's exit. Exits 0 when all held. */
static void importer(int mode, int ndev) {
    int to_imp[2], from_imp[2];
    if (pipe(to_imp) || pipe(from_imp)) TEST_FAIL("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t ex = fork();
    if (ex < 0) TEST_FAIL("fork: %s", strerror(errno));
    if (ex == 0) {
        GPU_CHECK(cudaSetDevice(0));
        exporter(mode, to_imp[1], from_imp[0]);
    }
    GPU_CHECK(cudaSetDevice(1 % ndev));
    cudaIpcMemHandle_t h;
    read_all(to_imp[0], &h, sizeof h);
    void *q = NULL, *src = NULL, *z = NULL;
    unsigned int v = 0x600dc0deu, back = 0;
    GPU_CHECK(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess));
    GPU_CHECK(cudaMalloc(&src, sizeof v));
    GPU_CHECK(cudaMemcpy(src, &v, sizeof v, cudaMemcpyHostToDevice));
    char c = 1;
    write_all(from_imp[1], &c, 1);
    read_all(to_imp[0], &c, 1); /* the exporter freed it, or not */
    int st_ex = 0;
    if (mode == 1 || mode == 3) waitpid(ex, &st_ex, 0);
    cudaStream_t s;
    GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    GPU_CHECK(cudaMemcpyAsync(q, src, sizeof v, cudaMemcpyDeviceToDevice, s));
    GPU_CHECK(cudaStreamSynchronize(s));
    GPU_CHECK(cudaMemcpy(&back, q, sizeof back, cudaMemcpyDeviceToHost));
    CHECK_INT_EQ(back, v);
    GPU_CHECK(cudaMalloc(&z, 1 << 20));
    GPU_CHECK(cudaMemset(z, 1, 1 << 20));
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaIpcCloseMemHandle(q));
    printf("mode %d: the store landed and the importer's context works\n", mode);
    write_all(from_imp[1], &c, 1); /* let a staying exporter go */
    if (mode == 0 || mode == 2) waitpid(ex, &st_ex, 0);
    if (!WIFEXITED(st_ex) || WEXITSTATUS(st_ex) != 0)
        TEST_FAIL("mode %d: the exporter failed (status %d)", mode, st_ex);
    fflush(stdout);
    _exit(0);
}

static void store_after_exporter(int mode, int ndev) {
    fflush(stdout);
    pid_t im = fork();
    if (im < 0) TEST_FAIL("fork: %s", strerror(errno));
    if (im == 0) importer(mode, ndev);
    int st_im = 0;
    if (waitpid(im, &st_im, 0) < 0 || !WIFEXITED(st_im) ||
        WEXITSTATUS(st_im) != 0)
        TEST_FAIL("mode %d: the importer failed (status %d)", mode, st_im);
}

static void test_store_after_exporter(const void *param) {
    (void)param;
    int ndev = gpu_count_or_skip();
    for (int mode = 0; mode < 4; mode++) store_after_exporter(mode, ndev);
}

/* COMMGEMM_TEST_FAIL=1:init: rank 1's p2p init fails after making its
 * device resources, past the last exchange it used to have. Every rank's
 * create fails at once (not after the 20 s timeout): rank 1 with its own
 * error, the others naming rank 1 and quoting it. LOCAL bootstrap, so the
 * ranks may share a GPU. */
static int rank_init_fails(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    int ndev = 0;
    cgm_bootstrap b = local_rank_bootstrap(rank, P, rdv, &ndev);
    cgm_config cfg = gpu_config();
    cgm_comm *c = NULL;
    int64_t t0 = cgm_now_ns();
    cgm_status st = cgm_comm_create(&b, &cfg, &c);
    double took_s = (double)(cgm_now_ns() - t0) / 1e9;
    printf("rank %d after %.2f s: %s: %s\n", rank, took_s,
           cgm_status_string(st), cgm_last_error());
    CHECK(c == NULL);
    if (rank == 1) {
        CHECK_INT_EQ(st, CGM_ERROR_CUDA);
    } else {
        CHECK_INT_EQ(st, CGM_ERROR_PEER_FAILED);
        CHECK_CONTAINS(cgm_last_error(), "failed on rank 1");
        CHECK_CONTAINS(cgm_last_error(), cgm_status_string(CGM_ERROR_CUDA));
    }
    CHECK_CONTAINS(cgm_last_error(), "failure injected on rank 1");
    if (took_s > (double)cfg.timeout_ms / 2e3)
        TEST_FAIL("the create took %.2f s, expected well under the %.0f s "
                  "timeout", took_s, (double)cfg.timeout_ms / 1e3);
    return 0;
}

static void test_init_fails(const void *param) {
    (void)param;
    int P = gpu_ranks_or_skip();
    if (P < 2) P = 2; /* LOCAL: the ranks may share the GPU */
    setenv("COMMGEMM_TEST_FAIL", "1:init", 1);
    if (test_run_ranks(P, rank_init_fails, NULL, 120, NULL) != 0)
        TEST_FAIL("a rank failed (see above)");
}

/* -------------------------------------------------------------- limits */

static void limits_body(gpu_rank *g, void *arg) {
    (void)arg;
    int P = g->nranks, r = g->rank;
    const int64_t m = 65, k = 64, n = 64; /* max_m is 64 */
    cgm_matrix x = gpu_matrix(CGM_DTYPE_FP32, cgm_shard_rows(m, r, P), k);
    cgm_matrix w = gpu_matrix(CGM_DTYPE_FP32, n, k);
    cgm_matrix y = gpu_matrix(CGM_DTYPE_FP32, m, n);
    CHECK_STATUS(cgm_all_gather_gemm(g->comm, &x, &w, NULL, &y, NULL, NULL,
                                     g->stream),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "max_m");
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_MAX_M");
    gpu_matrix_free(&x);
    gpu_matrix_free(&w);
    gpu_matrix_free(&y);
}

/* The first call of a new shape exchanges the call's signature through
 * the ranks' workspaces. Rank 1 skips it (arg NULL) or has it refused by
 * validation (a NULL shard): rank 0's exchange gives up after its 1 s
 * timeout naming rank 1, and its comm is broken. */
static void exchange_missing_body(gpu_rank *g, void *arg) {
    small_ag a = small_ag_make(g), b = small_ag_rows(g, 256);
    CHECK_OK(small_ag_call(g, &a));
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    if (g->rank != 0) {
        if (g->rank == 1 && arg) {
            void *keep = b.x.data;
            b.x.data = NULL;
            CHECK_STATUS(small_ag_call(g, &b), CGM_ERROR_INVALID_ARGUMENT);
            b.x.data = keep;
        }
        linger_and_exit(g->rank == 1);
    }
    int64_t t0 = cgm_now_ns();
    CHECK_STATUS(small_ag_call(g, &b), CGM_ERROR_TIMEOUT);
    double took_s = (double)(cgm_now_ns() - t0) / 1e9;
    printf("rank 0 after %.2f s: %s\n", took_s, cgm_last_error());
    /* After a refusal rank 0's call is the first of its key that the tuner
     * times, unless COMMGEMM_ALGO fixes the algorithm (no tuning). */
    const char *algo = getenv("COMMGEMM_ALGO");
    bool tuned = arg && (!algo || !*algo || !strcmp(algo, "auto"));
    CHECK_CONTAINS(cgm_last_error(), tuned ? "in the exchange of the autotuner's decision for rank(s) 1"
                                           : "in the exchange of the agreement check for rank(s) 1");
    CHECK_CONTAINS(cgm_last_error(), "found rank 1 never came");
    if (took_s < (double)test_scaled_ms(1000) / 1e3 || took_s > (double)test_scaled_ms(2500) / 1e3)
        TEST_FAIL("the exchange gave up after %.2f s, expected about the 1 s timeout", took_s);
    CHECK_STATUS(small_ag_call(g, &a), CGM_ERROR_TIMEOUT); /* broken */
    CHECK_CONTAINS(cgm_last_error(), "rank(s) 1");
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    small_ag_free(&a);
    small_ag_free(&b);
    cgm_comm_destroy(g->comm);
    linger_and_exit(false);
}

static void test_exchange_missing(const void *param) {
    need_two_ranks("the case");
    cgm_config cfg = gpu_config();
    cfg.timeout_ms = test_scaled_ms(1000);
    cfg.check_agreement = 1;
    /* Skipped: the agreement check's exchange (the algorithm forced, so
     * no tuner runs). Refused: the tuner's, which comes first. */
    if (!param) {
        cfg.algo = CGM_ALGO_SPLIT_PIPELINED;
        cfg.splits = 2;
    }
    gpu_run(2, &cfg, exchange_missing_body, (void *)param, 60);
}

static void test_limits(const void *param) {
    (void)param;
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    cfg.max_m = 64;
    gpu_run(P, &cfg, limits_body, NULL, 60);
}

/* Only rank 1's call is beyond max_m (65 rows against rank 0's 64): the
 * agreement exchange comes before the limits, so both ranks get
 * CGM_ERROR_MISMATCH at once (before, rank 1 refused the call alone and
 * rank 0 waited in the exchange until its timeout broke the comm), and
 * both comms stay usable. */
static void limits_one_rank_body(gpu_rank *g, void *arg) {
    (void)arg;
    int P = g->nranks, r = g->rank;
    const int64_t k = 64, n = 64;
    for (int round = 0; round < 2; round++) {
        int64_t m = round == 0 && r == 1 ? 65 : 64; /* max_m is 64 */
        cgm_matrix x = gpu_matrix(CGM_DTYPE_FP32, cgm_shard_rows(m, r, P), k);
        cgm_matrix w = gpu_matrix(CGM_DTYPE_FP32, n, k);
        cgm_matrix y = gpu_matrix(CGM_DTYPE_FP32, m, n);
        int64_t t0 = cgm_now_ns();
        cgm_status st = cgm_all_gather_gemm(g->comm, &x, &w, NULL, &y, NULL,
                                            NULL, g->stream);
        double took_s = (double)(cgm_now_ns() - t0) / 1e9;
        if (round == 0) {
            printf("rank %d after %.2f s: %s\n", r, took_s, cgm_last_error());
            CHECK_INT_EQ(st, CGM_ERROR_MISMATCH);
            CHECK_CONTAINS(cgm_last_error(), "rank 1");
            if (took_s > (double)test_scaled_ms(5000) / 1e3)
                TEST_FAIL("the refusal took %.2f s, expected at once", took_s);
        } else {
            CHECK_OK(st);
        }
        GPU_CHECK(cudaStreamSynchronize(g->stream));
        gpu_matrix_free(&x);
        gpu_matrix_free(&w);
        gpu_matrix_free(&y);
    }
}

static void test_limits_one_rank(const void *param) {
    need_two_ranks("the case");
    cgm_config cfg = gpu_config();
    if (param) cfg.algo = *(const cgm_algo *)param;
    cfg.max_m = 64;
    gpu_run(2, &cfg, limits_one_rank_body, NULL, 60);
}

/* --------------------------------------------- memory a backend cannot read */

/* An operand in memory the call's backend cannot read is refused before
 * anything runs, naming it, where it is and what to pass (validation asks
 * the CUDA driver): CPU memory, pageable or pinned, on the p2p comm; on a
 * one-rank host comm, GPU memory; with two GPUs in the process, memory of
 * the other one on the p2p comm. Each comm then still runs a correct call. */
static void memory_body(gpu_rank *g, void *arg) {
    (void)arg;
    const int64_t m = 64, k = 32, n = 16;
    cgm_matrix x = gpu_matrix(CGM_DTYPE_FP32, m, k);
    cgm_matrix w = gpu_matrix(CGM_DTYPE_FP32, n, k);
    cgm_matrix y = gpu_matrix(CGM_DTYPE_FP32, m, n);
    gpu_fill(&x, 1, 0, 0, k, g->stream);
    gpu_fill(&w, 2, 0, 0, k, g->stream);
    size_t xbytes = (size_t)(m * k) * sizeof(float);
    cgm_matrix hx = x, px = x;
    hx.data = calloc(1, xbytes);
    GPU_CHECK(cudaMallocHost(&px.data, xbytes));
    CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &hx, &w, NULL, &y, NULL, g->stream), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "x.data");
    CHECK_CONTAINS(cgm_last_error(), "CPU memory the CUDA driver does not know");
    CHECK_CONTAINS(cgm_last_error(), "backend is p2p, which needs device memory");
    CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &y, NULL, g->stream), CGM_SUCCESS);
    cgm_matrix hy = y;
    hy.data = px.data; /* m x n fits in the pinned m x k */
    CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &hy, NULL, g->stream), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "y.data");
    CHECK_CONTAINS(cgm_last_error(), "pinned host memory");
    int dev = -1, ndev = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    GPU_CHECK(cudaGetDeviceCount(&ndev));
    if (ndev > 1) {
        int other = (dev + 1) % ndev;
        cgm_matrix ow = w;
        GPU_CHECK(cudaSetDevice(other));
        GPU_CHECK(cudaMalloc(&ow.data, (size_t)(n * k) * sizeof(float)));
        GPU_CHECK(cudaSetDevice(dev));
        CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &x, &ow, NULL, &y, NULL, g->stream), CGM_ERROR_INVALID_ARGUMENT);
        char want[96];
        snprintf(want, sizeof want, "w.data = %p is memory of GPU %d, but this comm's device is GPU %d", ow.data,
                 other, dev);
        CHECK_CONTAINS(cgm_last_error(), want);
        cudaFree(ow.data);
    }
    /* what validation's question costs per operand (printed, not held) */
    int64_t t0 = cgm_now_ns();
    int dummy = 0;
    for (int i = 0; i < 10000; i++) CHECK(cgm_memory_of(x.data, &dummy) == CGM_MEMORY_DEVICE);
    if (g->rank == 0)
        printf("cgm_memory_of: %.0f ns per device pointer\n", (double)(cgm_now_ns() - t0) / 10000);
    /* the p2p comm still works: the sum of every rank's x . w^T */
    CHECK_OK(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &y, NULL, g->stream));
    GPU_CHECK(cudaStreamSynchronize(g->stream));

    char name[64];
    cgm_bootstrap b = test_local_bootstrap("gpu-mem", name, sizeof name);
    cgm_config hc = CGM_CONFIG_INIT;
    hc.backend = CGM_BACKEND_HOST;
    cgm_comm *host = NULL;
    CHECK_OK(cgm_comm_create(&b, &hc, &host));
    float *hw = calloc((size_t)(n * k), sizeof(float)), *hyv = calloc((size_t)(m * n), sizeof(float));
    cgm_matrix hw_m = cgm_matrix_make(hw, CGM_DTYPE_FP32, n, k), hy_m = cgm_matrix_make(hyv, CGM_DTYPE_FP32, m, n);
    CHECK_STATUS(cgm_gemm_all_reduce(host, &x, &hw_m, NULL, &hy_m, NULL, NULL), CGM_ERROR_INVALID_ARGUMENT);
    char want[128];
    snprintf(want, sizeof want, "x.data = %p is memory of GPU %d, but this call's backend is host", x.data, dev);
    CHECK_CONTAINS(cgm_last_error(), want);
    CHECK_OK(cgm_gemm_all_reduce(host, &hx, &hw_m, NULL, &hy_m, NULL, NULL));
    CHECK_OK(cgm_comm_destroy(host));
    free(hw);
    free(hyv);
    free(hx.data);
    cudaFreeHost(px.data);
    gpu_matrix_free(&x);
    gpu_matrix_free(&w);
    gpu_matrix_free(&y);
}

static void test_memory(const void *param) {
    (void)param;
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    gpu_run(P, &cfg, memory_body, NULL, 120);
}

/* ------------------------------------- two ranks in one process: refused */

/* Threads of one process as two ranks of a LOCAL p2p comm: CUDA IPC cannot
 * map a process's own memory, so init refuses it on both ranks with a
 * message that says so, before any workspace is made, and nothing is left
 * (a host comm of the same threads still works). */
typedef struct thread_rank {
    int rank;
    const char *rendezvous;
    cgm_status status;
    char message[1024];
} thread_rank;

static void *thread_rank_main(void *p) {
    thread_rank *t = p;
    if (cudaSetDevice(0) != cudaSuccess) {
        t->status = CGM_ERROR_CUDA;
        return NULL;
    }
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = CGM_BOOTSTRAP_LOCAL;
    b.rank = t->rank;
    b.nranks = 2;
    b.rendezvous = t->rendezvous;
    cgm_config cfg = gpu_config();
    cfg.timeout_ms = test_scaled_ms(10000);
    cgm_comm *c = (cgm_comm *)&b; /* must come back NULL */
    t->status = cgm_comm_create(&b, &cfg, &c);
    snprintf(t->message, sizeof t->message, "%s", cgm_last_error());
    if (c) t->status = CGM_ERROR_INTERNAL; /* a failure leaves no comm */
    cfg.backend = CGM_BACKEND_HOST;
    cgm_comm *host = NULL;
    if (cgm_comm_create(&b, &cfg, &host) != CGM_SUCCESS ||
        cgm_comm_destroy(host) != CGM_SUCCESS)
        t->status = CGM_ERROR_INTERNAL;
    return NULL;
}

static void test_one_process_refused(const void *param) {
    (void)param;
    gpu_count_or_skip();
    char rendezvous[64];
    snprintf(rendezvous, sizeof rendezvous, "threads-%d", (int)getpid());
    thread_rank t[2] = {{0, rendezvous, CGM_SUCCESS, ""},
                        {1, rendezvous, CGM_SUCCESS, ""}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CHECK_INT_EQ(pthread_create(&th[i], NULL, thread_rank_main, &t[i]), 0);
    for (int i = 0; i < 2; i++) CHECK_INT_EQ(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < 2; i++) {
        printf("rank %d: %s: %s\n", i, cgm_status_string(t[i].status),
               t[i].message);
        CHECK_INT_EQ(t[i].status, CGM_ERROR_UNAVAILABLE);
        CHECK_CONTAINS(t[i].message, "threads of one process");
        CHECK_CONTAINS(t[i].message, "one process per rank");
    }
}

void register_more_cases(void) {
    test_add("ag_gemm_1gib_gathered", test_large, NULL);
    static const cgm_algo fused = CGM_ALGO_FUSED;
    test_add("graph_capture_replay", test_graph, NULL);
    test_add("graph_capture_replay_fused", test_graph, &fused);
    test_add("graph_capture_replay_fused_evicted", test_graph_fused_evicted, NULL);
    test_add("graph_capture_replay_signal_copy", test_graph_signal_copy, NULL);
    static const int fp32_partials = 1;
    test_add("graph_capture_replay_rs_own_gemm", test_graph_rs_own, NULL);
    test_add("graph_capture_replay_rs_own_kernel", test_graph_rs_own, &fp32_partials);
    test_add("graph_capture_replay_fused_signal_copy", test_graph_signal_copy, &fused);
    test_add("timeout_names_missing_rank", test_timeout, NULL);
    test_add("timeout_names_missing_rank_fused", test_timeout, &fused);
    test_add("p2p_failure_after_fork_breaks_comm", test_fail_after_fork, NULL);
    test_add("p2p_failure_after_fork_breaks_comm_fused", test_fail_after_fork,
             &fused);
    test_add("p2p_expired_wait_tells_peers", test_told_of_expiry, NULL);
    test_add("p2p_expired_wait_tells_peers_fused", test_told_of_expiry,
             &fused);
    test_add("ipc_store_after_exporter_gone", test_store_after_exporter,
             NULL);
    test_add("p2p_init_failure_fails_every_rank", test_init_fails, NULL);
    test_add("workspace_limits", test_limits, NULL);
    test_add("agreement_exchange_names_missing_rank", test_exchange_missing, NULL);
    test_add("agreement_exchange_names_refusing_rank", test_exchange_missing, "refused");
    test_add("limits_on_one_rank_mismatch", test_limits_one_rank, NULL);
    test_add("limits_on_one_rank_mismatch_fused", test_limits_one_rank, &fused);
    test_add("memory_its_backend_cannot_read_refused", test_memory, NULL);
    test_add("one_process_two_ranks_refused", test_one_process_refused, NULL);
}
