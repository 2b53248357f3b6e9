/* GPU tests of the nccl backend, part 2: graph capture + replay, one comm
 * on two backends, a rank that never comes, limits and agreement, the
 * probe, and the case list (test_gpu_nccl.c has the scaffolding). */
#include <unistd.h>

#include "core/core.h"
#include "gpu_ref.h"
#include "test_gpu_nccl.h"

/* ---- graph capture + replay ---- */

static void graph_fn(nrank *g, const void *arg) {
    (void)arg;
    const int P = g->nranks, r = g->rank;
    const int64_t m = 203, n = 64, k = 96;
    const cgm_dtype dt = CGM_DTYPE_BF16;
    const int64_t mr = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    cgm_matrix hw = nt_host(dt, n, k, 11 + r), hb = nt_host(dt, 1, n, 12);
    cgm_matrix dw = nt_upload(&hw, 0, n, 0, k, 0), db = nt_upload(&hb, 0, 1, 0, n, 0);
    cgm_matrix hx0 = nt_host(dt, m, k, 0);
    cgm_matrix dxs = nt_upload(&hx0, off, mr, 0, k, 0); /* AG shard */
    cgm_matrix dx = nt_upload(&hx0, 0, m, 0, k, 0);     /* RS / AR input */
    cgm_matrix dag = nt_upload(&hx0, 0, m, 0, n, 0), dar = nt_upload(&hx0, 0, m, 0, n, 0);
    cgm_matrix drs = nt_upload(&hx0, 0, mr, 0, n, 0);
    cgm_matrix dsend = nt_upload(&hx0, off, mr, 0, n, 0), drecv = nt_upload(&hx0, 0, m, 0, n, 0);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    /* Eager once (allocates, checks agreement), then capture. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            GCHECK(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeGlobal));
        CHECK_OK(cgm_all_gather_gemm(g->comm, &dxs, &dw, &db, &dag, NULL, &o, g->stream));
        CHECK_OK(cgm_gemm_reduce_scatter(g->comm, &dx, &dw, &db, &drs, &o, g->stream));
        CHECK_OK(cgm_gemm_all_reduce(g->comm, &dx, &dw, NULL, &dar, &o, g->stream));
        CHECK_OK(cgm_bulk_overlap(g->comm, NULL, NULL, NULL, NULL, CGM_COLLECTIVE_ALL_GATHER,
                                  &dsend, &drecv, &o, g->stream));
        if (pass == 0) GCHECK(cudaStreamSynchronize(g->stream));
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GCHECK(cudaStreamEndCapture(g->stream, &graph));
    GCHECK(cudaGraphInstantiate(&exec, graph, 0));
    double *ref = calloc((size_t)(m * n), sizeof *ref), *tmp = calloc((size_t)(m * n), sizeof *tmp);
    for (int iter = 0; iter < 2; iter++) {
        /* New inputs in the same buffers: the replay must see them. */
        uint64_t seed = 1000 + 10 * (uint64_t)iter;
        cgm_matrix hxa = nt_host(dt, m, k, seed), hs = nt_host(dt, m, n, seed + 1);
        int64_t hld = k;
        GCHECK(cudaMemcpy2D(dxs.data, (size_t)k * 2, (char *)hxa.data + off * hld * 2,
                            (size_t)k * 2, (size_t)k * 2, (size_t)mr, cudaMemcpyHostToDevice));
        cgm_matrix hxr = nt_host(dt, m, k, seed + 2 + r);
        GCHECK(cudaMemcpy(dx.data, hxr.data, (size_t)(m * k) * 2, cudaMemcpyHostToDevice));
        if (mr)
            GCHECK(cudaMemcpy(dsend.data, (char *)hs.data + off * n * 2, (size_t)(mr * n) * 2,
                              cudaMemcpyHostToDevice));
        GCHECK(cudaGraphLaunch(exec, g->stream));
        GCHECK(cudaStreamSynchronize(g->stream));
        test_ref_gemm(CGM_LAYOUT_TN, &hxa, &hw, m, n, k, ref);
        for (int64_t i = 0; i < m * n; i++) ref[i] += test_get(&hb, 0, i % n);
        nt_expect(&dag, ref, test_tolerance(dt, dt, k), "graph AG+GEMM");
        memset(ref, 0, sizeof *ref * (size_t)(m * n));
        for (int q = 0; q < P; q++) {
            cgm_matrix hxq = nt_host(dt, m, k, seed + 2 + q), hwq = nt_host(dt, n, k, 11 + q);
            test_ref_gemm(CGM_LAYOUT_TN, &hxq, &hwq, m, n, k, tmp);
            for (int64_t i = 0; i < m * n; i++) ref[i] += tmp[i];
            test_free(&hxq); test_free(&hwq);
        }
        nt_expect(&dar, ref, test_tolerance(dt, dt, k * P), "graph GEMM+AR");
        for (int64_t i = 0; i < m * n; i++) ref[i] += test_get(&hb, 0, i % n);
        nt_expect(&drs, ref + off * n, test_tolerance(dt, dt, k * P), "graph GEMM+RS");
        for (int64_t i = 0; i < m * n; i++) ref[i] = test_get(&hs, i / n, i % n);
        nt_expect(&drecv, ref, 0, "graph bulk all-gather");
        test_free(&hxa); test_free(&hs); test_free(&hxr);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    free(ref); free(tmp);
    cudaFree(dw.data); cudaFree(db.data); cudaFree(dxs.data); cudaFree(dx.data);
    cudaFree(dag.data); cudaFree(dar.data); cudaFree(drs.data); cudaFree(dsend.data);
    cudaFree(drecv.data);
    test_free(&hw); test_free(&hb); test_free(&hx0);
}

/* ---- one comm, two backends ---- */

static void mixed_fn(nrank *g, const void *arg) {
    (void)arg;
    cgm_backend b;
    CHECK_OK(cgm_comm_backend(g->comm, CGM_OP_ALL_GATHER_GEMM, &b));
    CHECK_INT_EQ(b, CGM_BACKEND_NCCL);
    CHECK_OK(cgm_comm_backend(g->comm, CGM_OP_GEMM_REDUCE_SCATTER, &b));
    CHECK_INT_EQ(b, CGM_BACKEND_P2P);
    op_case c;
    memset(&c, 0, sizeof c);
    c.in = c.out = CGM_DTYPE_BF16;
    c.m = 203;
    c.n = 64;
    c.k = 48;
    c.bias = true;
    for (int round = 0; round < 2; round++) {
        c.op = CGM_OP_ALL_GATHER_GEMM; /* config: nccl; then per call: p2p */
        c.backend = round ? CGM_BACKEND_P2P : CGM_BACKEND_DEFAULT;
        nt_run_case(g, &c);
        c.op = CGM_OP_GEMM_REDUCE_SCATTER; /* config: p2p; then per call: nccl */
        c.backend = round ? CGM_BACKEND_NCCL : CGM_BACKEND_DEFAULT;
        nt_run_case(g, &c);
    }
}

/* ---- a rank that never comes, a rank that fails mid-op ---- */

/* The op of these cases: a bf16 AG+GEMM of 64 rows (n = k = 64), this
 * rank's operands uploaded. */
typedef struct small_ag {
    cgm_matrix hx, hw, dx, dw, dy;
} small_ag;

static small_ag small_ag_make(nrank *g) {
    const int P = g->nranks, r = g->rank;
    const int64_t m = 64, n = 64, k = 64;
    small_ag a;
    a.hx = nt_host(CGM_DTYPE_BF16, m, k, 1);
    a.hw = nt_host(CGM_DTYPE_BF16, n, k, 2);
    a.dx = nt_upload(&a.hx, cgm_shard_offset(m, r, P), cgm_shard_rows(m, r, P), 0, k, 0);
    a.dw = nt_upload(&a.hw, 0, n, 0, k, 0);
    a.dy = nt_upload(&a.hx, 0, m, 0, n, 0);
    return a;
}

static cgm_status small_ag_call(nrank *g, small_ag *a) {
    return cgm_all_gather_gemm(g->comm, &a->dx, &a->dw, NULL, &a->dy, NULL, NULL, g->stream);
}

static void small_ag_free(small_ag *a) {
    cudaFree(a->dx.data); cudaFree(a->dw.data); cudaFree(a->dy.data);
    test_free(&a->hx); test_free(&a->hw);
}

/* Waits until the rank's stream is idle, failing the case after bound_ms
 * ("stream still busy N s after <after>"). Returns the seconds waited. */
static double wait_drained(nrank *g, int64_t bound_ms, const char *after) {
    int64_t t1 = cgm_now_ns();
    while (cudaStreamQuery(g->stream) == cudaErrorNotReady) {
        if (cgm_now_ns() - t1 > bound_ms * 1000000)
            TEST_FAIL("rank %d: stream still busy %.0f s after %s", g->rank,
                      (double)bound_ms / 1e3, after);
        usleep(1000);
    }
    (void)cudaGetLastError();
    return (double)(cgm_now_ns() - t1) / 1e9;
}

/* After an op (its call returned `st`) enqueued at t0 whose peer never did
 * its part: the watchdog expires it within the 1 s timeout (bounded), the
 * comm reports a timeout or peer failure naming `who` (NULL: not checked),
 * and the aborted comm lets the stream drain, bounded. Returns the status. */
static cgm_status expect_expired(nrank *g, cgm_status st, int64_t t0, const char *who) {
    cgm_status async = st;
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", cgm_last_error());
    while (async == CGM_SUCCESS && cgm_now_ns() - t0 < test_scaled_ms(6000) * 1000000) {
        CHECK_OK(cgm_comm_get_async_error(g->comm, &async));
        snprintf(detail, sizeof detail, "%s", cgm_last_error());
        usleep(10000);
    }
    double waited = (double)(cgm_now_ns() - t0) / 1e9;
    fprintf(stderr, "rank %d after %.2f s: status %s: %s\n", g->rank, waited,
            cgm_status_string(async), detail);
    CHECK(async == CGM_ERROR_TIMEOUT || async == CGM_ERROR_PEER_FAILED);
    CHECK(waited < (double)test_scaled_ms(3000) / 1e3);
    if (who) CHECK_CONTAINS(detail, who);
    wait_drained(g, test_scaled_ms(5000), "the abort");
    return async;
}

/* Stays alive while the peers wait out their timeout. */
static void linger(void) {
    sleep((unsigned)((test_scaled_ms(4000) + 999) / 1000));
}

static void timeout_fn(nrank *g, const void *arg) {
    (void)arg;
    small_ag a = small_ag_make(g);
    CHECK_OK(small_ag_call(g, &a));
    GCHECK(cudaStreamSynchronize(g->stream));
    if (g->rank != 0) {
        linger(); /* skips the second op; rank 0 must not wait for it */
    } else {
        int64_t t0 = cgm_now_ns();
        cgm_status async = expect_expired(g, small_ag_call(g, &a), t0, "rank 1");
        /* The comm is broken: later ops say so. */
        CHECK_STATUS(small_ag_call(g, &a), async);
    }
    small_ag_free(&a);
}

/* COMMGEMM_TEST_FAIL=0:2: rank 0's second op fails on purpose right after
 * its fork. Rank 0 gets the failure at once, its streams joined, its comm
 * broken; the peers' op waits for rank 0's part until their watchdog
 * expires it. */
static void fail_fn(nrank *g, const void *arg) {
    (void)arg;
    small_ag a = small_ag_make(g);
    CHECK_OK(small_ag_call(g, &a));
    GCHECK(cudaStreamSynchronize(g->stream));
    int64_t t0 = cgm_now_ns();
    cgm_status st = small_ag_call(g, &a);
    if (g->rank == 0) {
        CHECK_INT_EQ(st, CGM_ERROR_CUDA);
        CHECK_CONTAINS(cgm_last_error(), "nccl backend: rank 0 failed in the middle of the op");
        CHECK_CONTAINS(cgm_last_error(), "failure injected on rank 0 at its op 2");
        GCHECK(cudaStreamSynchronize(g->stream));
        double took = (double)(cgm_now_ns() - t0) / 1e9;
        if (took > (double)test_scaled_ms(500) / 1e3)
            TEST_FAIL("the failed op and its sync took %.2f s, expected at once", took);
        CHECK_STATUS(small_ag_call(g, &a), CGM_ERROR_CUDA);
        CHECK_CONTAINS(cgm_last_error(), "broken by an earlier failure");
        fprintf(stderr, "rank 0: %s\n", cgm_last_error());
        if (g->nranks > 1) linger();
    } else {
        expect_expired(g, st, t0, g->nranks == 2 ? "rank 0" : NULL);
    }
    small_ag_free(&a);
}

/* The caller's stream held (a kernel spinning on a host word, as a hung
 * graph replay or a never-ending kernel would): the ops after it queue
 * and never start. `burst` NULL: two ops, then nothing; the watchdog must
 * report the oldest as never started within timeout_ms of its call (it
 * times running ops from their start, so before it did not report them at
 * all). `burst` set: calls until one fails; once every watch slot is
 * taken a call waits for a free one, and it must give up within the
 * timeout (the watchdog's report or its own wait, whichever comes first),
 * without waiting for the held kernel (an ncclCommAbort there would).
 * Either way the comm is broken, and the stream drains once released. */
static void held_fn(nrank *g, const void *burst) {
    small_ag a = small_ag_make(g);
    CHECK_OK(small_ag_call(g, &a));
    GCHECK(cudaStreamSynchronize(g->stream));
    volatile int *release = NULL, *release_dev = NULL;
    GCHECK(cudaHostAlloc((void **)&release, sizeof *release, cudaHostAllocMapped));
    *release = 0;
    GCHECK(cudaHostGetDevicePointer((void **)&release_dev, (void *)release, 0));
    const unsigned long long hold_ns = (unsigned long long)test_scaled_ms(20000) * 1000000ull;
    GCHECK(tref_hold(release_dev, hold_ns, g->stream));
    const int64_t timeout_ns = test_scaled_ms(1000) * 1000000;
    cgm_status st = CGM_SUCCESS;
    int calls = 0;
    int64_t t0 = cgm_now_ns(), took = 0;
    while (st == CGM_SUCCESS && calls < (burst ? 1000 : 2)) {
        int64_t c0 = cgm_now_ns();
        st = small_ag_call(g, &a);
        took = cgm_now_ns() - c0;
        calls++;
        if (st == CGM_SUCCESS && took > timeout_ns / 2)
            TEST_FAIL("rank %d: call %d with the stream held succeeded after %.2f s: "
                      "expected calls to return at once until the watch slots are full",
                      g->rank, calls, (double)took / 1e9);
    }
    if (!burst) {
        CHECK_OK(st);
        while (st == CGM_SUCCESS && cgm_now_ns() - t0 < timeout_ns + test_scaled_ms(3000) * 1000000) {
            CHECK_OK(cgm_comm_get_async_error(g->comm, &st));
            usleep(10000);
        }
        took = cgm_now_ns() - t0; /* from the first held call */
    }
    char detail[1024];
    snprintf(detail, sizeof detail, "%s", cgm_last_error());
    fprintf(stderr, "rank %d: %s %d: %s after %.2f s: %s\n", g->rank,
            burst ? "call" : "async error after call", calls, cgm_status_string(st),
            (double)took / 1e9, detail);
    *release = 1; /* before any check can fail: the stream must not stay held */
    CHECK_STATUS(st, CGM_ERROR_TIMEOUT);
    if (burst) CHECK(calls > 2);
    CHECK(took >= timeout_ns);
    CHECK(took < timeout_ns + test_scaled_ms(2000) * 1000000);
    CHECK_CONTAINS(detail, "ag_gemm #");
    CHECK_CONTAINS(detail, "never started");
    CHECK_CONTAINS(detail, "the comm is broken");
    double drained_s = wait_drained(g, test_scaled_ms(10000), "its release");
    fprintf(stderr, "rank %d: stream drained %.2f s after its release\n", g->rank, drained_s);
    CHECK_STATUS(small_ag_call(g, &a), CGM_ERROR_TIMEOUT);
    CHECK_CONTAINS(cgm_last_error(), "never started");
    GCHECK(cudaFreeHost((void *)release));
    small_ag_free(&a);
}

/* ---- limits, agreement ---- */

static void limits_fn(nrank *g, const void *arg) {
    (void)arg;
    const int P = g->nranks, r = g->rank;
    const int64_t big = 4097, n = 8, k = 8; /* max_m is 4096 */
    cgm_matrix hx = nt_host(CGM_DTYPE_FP32, big, k, 1), hw = nt_host(CGM_DTYPE_FP32, n, k, 2);
    cgm_matrix dx = nt_upload(&hx, 0, cgm_shard_rows(big, r, P), 0, k, 0);
    cgm_matrix dw = nt_upload(&hw, 0, n, 0, k, 0), dy = nt_upload(&hx, 0, big, 0, n, 0);
    CHECK_STATUS(cgm_all_gather_gemm(g->comm, &dx, &dw, NULL, &dy, NULL, NULL, g->stream),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_MAX_M");
    /* Ranks disagree about m: every rank is told, and the comm lives on. */
    cgm_matrix dxr = nt_upload(&hx, 0, 64 + r, 0, k, 0), dyr = nt_upload(&hx, 0, 64 + r, 0, n, 0);
    if (P > 1) {
        CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &dxr, &dw, NULL, &dyr, NULL, g->stream),
                     CGM_ERROR_MISMATCH);
        CHECK_CONTAINS(cgm_last_error(), "rank 1");
    }
    op_case c;
    memset(&c, 0, sizeof c);
    c.op = CGM_OP_GEMM_ALL_REDUCE;
    c.in = c.out = CGM_DTYPE_FP32;
    c.m = 64;
    c.n = 8;
    c.k = 8;
    nt_run_case(g, &c);
    cudaFree(dx.data); cudaFree(dw.data); cudaFree(dy.data); cudaFree(dxr.data);
    cudaFree(dyr.data);
    test_free(&hx); test_free(&hw);
}

/* ---- cases ---- */

static int multi(void) {
    int n = nt_gpu_count();
    if (n < 2) TEST_SKIP("only %d GPU: the multi-rank cases need 2 (P = 1 runs in *_single)", n);
    return n > 8 ? 8 : n;
}

static const sweep sweep_ag = {CGM_OP_ALL_GATHER_GEMM, 0}, sweep_rs = {CGM_OP_GEMM_REDUCE_SCATTER, 0},
                   sweep_ar = {CGM_OP_GEMM_ALL_REDUCE, 0}, sweep_bulk = {CGM_OP_BULK, 0},
                   sweep_all_small = {CGM_OP_COUNT_, 1};

static void case_sweep(const void *p) {
    cgm_config c = nt_config();
    nt_run(multi(), &c, nt_sweep_fn, p, 280);
}
static void case_single(const void *p) {
    (void)p;
    nt_gpu_count();
    cgm_config c = nt_config();
    nt_run(1, &c, nt_sweep_fn, &sweep_all_small, 280);
}
static void case_algos(const void *p) {
    cgm_config c = nt_config();
    nt_run(multi(), &c, nt_algos_fn, p, 280);
}
static void case_graph(const void *p) {
    int P = p ? 1 : multi();
    if (p) nt_gpu_count();
    cgm_config c = nt_config();
    nt_run(P, &c, graph_fn, NULL, 200);
}
static void case_mixed(const void *p) {
    cgm_config c = nt_config();
    c.op_backend[CGM_OP_GEMM_REDUCE_SCATTER] = CGM_BACKEND_P2P;
    nt_run(multi(), &c, mixed_fn, p, 200);
}
static void case_timeout(const void *p) {
    cgm_config c = nt_config();
    c.timeout_ms = test_scaled_ms(1000);
    c.check_agreement = 0; /* the watchdog, not the agreement exchange */
    nt_run(multi(), &c, timeout_fn, p, 100);
}
/* Every GPU, or one: rank 0's own path needs no peer. */
static void case_fail(const void *p) {
    int n = nt_gpu_count();
    setenv("COMMGEMM_TEST_FAIL", "0:2", 1); /* read once, by the forked ranks */
    cgm_config c = nt_config();
    c.timeout_ms = test_scaled_ms(1000);
    c.algo = CGM_ALGO_SPLIT_PIPELINED; /* no tuner runs among the ops */
    c.splits = 2;
    nt_run(n > 8 ? 8 : n, &c, fail_fn, p, 100);
}
/* Every GPU, or one: each rank holds its own stream. */
static void case_held(const void *p) {
    int n = nt_gpu_count();
    cgm_config c = nt_config();
    c.timeout_ms = test_scaled_ms(1000);
    c.algo = CGM_ALGO_SPLIT_PIPELINED; /* no tuner runs among the ops */
    c.splits = 2;
    nt_run(n > 8 ? 8 : n, &c, held_fn, p, 100);
}
static void case_limits(const void *p) {
    cgm_config c = nt_config();
    nt_run(multi(), &c, limits_fn, p, 100);
}
/* No GPU needed: a LOCAL comm cannot run the nccl backend. */
static void case_probe(const void *p) {
    (void)p;
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("nccl-probe", name, sizeof name);
    cgm_config c = CGM_CONFIG_INIT;
    c.backend = CGM_BACKEND_NCCL;
    cgm_comm *comm = NULL;
    CHECK_STATUS(cgm_comm_create(&b, &c, &comm), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "cgm_comm_init_nccl");
    CHECK(comm == NULL);
}

static void register_cases(void) {
    test_set_timeout(300);
    test_add("ag_gemm_multi", case_sweep, &sweep_ag);
    test_add("gemm_rs_multi", case_sweep, &sweep_rs);
    test_add("gemm_ar_multi", case_sweep, &sweep_ar);
    test_add("bulk_multi", case_sweep, &sweep_bulk);
    test_add("all_ops_single", case_single, NULL);
    test_add("algos_multi", case_algos, NULL);
    test_set_timeout(200);
    test_add("graph_multi", case_graph, NULL);
    test_add("graph_single", case_graph, "single");
    test_add("mixed_nccl_p2p", case_mixed, NULL);
    test_set_timeout(100);
    test_add("timeout_names_missing_rank", case_timeout, NULL);
    test_add("limits_and_agreement", case_limits, NULL);
    test_add("failure_after_fork_breaks_comm", case_fail, NULL);
    test_add("ops_behind_a_held_stream_expire", case_held, NULL);
    test_add("ops_behind_a_held_stream_bounded", case_held, "burst");
    test_add("probe_needs_nccl_bootstrap", case_probe, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
