/* test_cublasmp_gpu: the mixed-backend comm, the rejections, and graph
 * capture (eager first, then capture and replay with new inputs). */
#include <stdlib.h>

#include "cublasmp_gpu.h"

/* One comm: AG+GEMM on cublasmp (config), GEMM+RS on p2p (the comm's
 * default), then per-call overrides both ways; an uneven shape is refused
 * on cublasmp (every rank) and runs on p2p through a per-call override,
 * and the comm works on after the refusal. */
int body_mixed(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    int wrong = 0;
    cgm_backend b = CGM_BACKEND_DEFAULT;
    CHECK_OK(cgm_comm_backend(comm, CGM_OP_ALL_GATHER_GEMM, &b));
    CHECK_INT_EQ(b, CGM_BACKEND_CUBLASMP);
    CHECK_OK(cgm_comm_backend(comm, CGM_OP_GEMM_REDUCE_SCATTER, &b));
    CHECK_INT_EQ(b, CGM_BACKEND_P2P);
    const struct { cgm_op op; cgm_backend backend; bool uneven; } steps[] = {
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_DEFAULT, false},   /* cublasmp */
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_BACKEND_DEFAULT, false}, /* p2p */
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_DEFAULT, false},
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_BACKEND_CUBLASMP, false},
        {CGM_OP_GEMM_ALL_REDUCE, CGM_BACKEND_CUBLASMP, false},
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_P2P, false},
        {CGM_OP_GEMM_ALL_REDUCE, CGM_BACKEND_DEFAULT, false},   /* p2p */
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_DEFAULT, true},    /* refused */
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_P2P, true},        /* runs */
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_BACKEND_CUBLASMP, true}, /* refused */
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_BACKEND_DEFAULT, true},  /* p2p */
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_DEFAULT, false},   /* cached */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        call_spec s = {steps[i].op, CGM_LAYOUT_TN, CGM_DTYPE_BF16,
                       CGM_DTYPE_BF16, 128, 96, 64, 0, true, i % 2 == 1,
                       steps[i].backend, CGM_ALGO_AUTO, 900 + i, false};
        if (steps[i].uneven) s.m = 131, s.n = 97, s.k = 71;
        s.expect_reject = cublasmp_refuses(&s, P) &&
                          (s.backend == CGM_BACKEND_CUBLASMP ||
                           (s.backend == CGM_BACKEND_DEFAULT &&
                            s.op == CGM_OP_ALL_GATHER_GEMM));
        int r = check_call(rank, P, comm, stream, &s);
        int want = s.expect_reject ? CALL_REJECTED : CALL_OK;
        if (r != want) {
            printf("FAILED mixed step %zu (%s %lldx%lldx%lld on %s): "
                   "expected %s\n", i, cgm_op_name(s.op), (long long)s.m,
                   (long long)s.n, (long long)s.k,
                   cgm_backend_name(s.backend),
                   s.expect_reject ? "the even-shards refusal" : "ok");
            wrong++;
        }
        if (r == CALL_TIMEOUT) break;
    }
    printf("# mixed P=%d rank %d: %d wrong\n", P, rank, wrong);
    return wrong;
}

/* What cuBLASMp cannot do is refused on every rank, and the comm works on. */
int body_rejects(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    const int64_t M = 8, K = 16;
    cgm_dtype dt = CGM_DTYPE_BF16;
    int64_t n = rank == 0 ? 8 : 24; /* not the ceil split of 32 for P = 2 */
    void *bx, *bw, *by, *bg;
    cudaMalloc(&bx, 4096);
    cudaMalloc(&bw, 4096);
    cudaMalloc(&by, 4096);
    cudaMalloc(&bg, 4096);
    cgm_matrix x = cgm_matrix_make(bx, dt, cgm_shard_rows(M, rank, P), K);
    cgm_matrix w = cgm_matrix_make(bw, dt, n, K);
    cgm_matrix y = cgm_matrix_make(by, dt, M, n);
    cgm_matrix g = cgm_matrix_make(bg, dt, M, K);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    int refused = 0;
    if (P == 2) {
        CHECK_STATUS(cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &o, stream),
                     CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "ceil split");
        refused++;
        /* Uneven m (7 rows over 2 ranks): refused before any exchange. */
        const int64_t M7 = 7;
        cgm_matrix x7 = cgm_matrix_make(bx, dt, cgm_shard_rows(M7, rank, P), K);
        cgm_matrix w7 = cgm_matrix_make(bw, dt, 16, K);
        cgm_matrix y7 = cgm_matrix_make(by, dt, M7, 16);
        CHECK_STATUS(cgm_all_gather_gemm(comm, &x7, &w7, NULL, &y7, NULL, &o, stream),
                     CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "only with even shards");
        CHECK_CONTAINS(cgm_last_error(), "m = 7");
        refused++;
        /* Uneven n (9 + 8 rows of W, the ceil split of 17): refused after
         * the first-call exchange, on both ranks. */
        cgm_matrix w9 = cgm_matrix_make(bw, dt, cgm_shard_rows(17, rank, P), K);
        cgm_matrix y9 = cgm_matrix_make(by, dt, M, w9.rows);
        CHECK_STATUS(cgm_all_gather_gemm(comm, &x, &w9, NULL, &y9, NULL, &o, stream),
                     CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "n = 17");
        refused++;
        /* GEMM+AR with uneven m. */
        cgm_matrix xa7 = cgm_matrix_make(bx, dt, M7, K / P);
        cgm_matrix wa7 = cgm_matrix_make(bw, dt, 16, K / P);
        CHECK_STATUS(cgm_gemm_all_reduce(comm, &xa7, &wa7, NULL, &y7, &o, stream),
                     CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "only with even shards");
        refused++;
    }
    w.rows = y.cols = 16;
    CHECK_STATUS(cgm_all_gather_gemm(comm, &x, &w, NULL, &y, &g, &o, stream),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "x_gathered");
    o.algo = CGM_ALGO_RING;
    CHECK_STATUS(cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &o, stream),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "ring");
    o.algo = CGM_ALGO_AUTO;
    cgm_matrix xa = cgm_matrix_make(bx, dt, M, K / P);
    cgm_matrix ya = cgm_matrix_make(by, dt, M, 16);
    cgm_matrix wb = cgm_matrix_make(bw, dt, 16, K / P); /* TN: [n, k] */
    CHECK_STATUS(cgm_bulk_overlap(comm, &xa, &wb, NULL, &ya,
                                  CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o, stream),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "bulk");
    refused += 3;
    cudaFree(bx);
    cudaFree(bw);
    cudaFree(by);
    cudaFree(bg);
    if (g_report) g_report[rank].counts[CALL_REJECTED] += refused;
    printf("# rejects P=%d rank %d: %d refused as expected\n", P, rank, refused);
    /* Still usable: AG+GEMM, and GEMM+AR in NN (RS + all-gather: every
     * layout). */
    call_spec s = {CGM_OP_ALL_GATHER_GEMM, CGM_LAYOUT_TN, dt, dt, 64, 64, 64,
                   0, false, false, CGM_BACKEND_DEFAULT, CGM_ALGO_AUTO, 77,
                   false};
    int bad = check_call(rank, P, comm, stream, &s) != CALL_OK;
    call_spec s2 = {CGM_OP_GEMM_ALL_REDUCE, CGM_LAYOUT_NN, dt, dt, 64, 64, 64,
                    0, true, true, CGM_BACKEND_DEFAULT, CGM_ALGO_AUTO, 78,
                    false};
    bad += check_call(rank, P, comm, stream, &s2) != CALL_OK;
    return bad;
}

/* Eager first, then capture and replay twice with new inputs (bias, and
 * for RS/AR accumulate: the fp32 pass runs inside the graph); a new shape
 * inside capture is refused with the eager-first advice. */
int body_capture(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    const cgm_op op = g_case->op;
    const bool ag = op == CGM_OP_ALL_GATHER_GEMM;
    call_spec s = {op, CGM_LAYOUT_TN, CGM_DTYPE_BF16, CGM_DTYPE_BF16, 128, 96,
                   64, 0, true, !ag, CGM_BACKEND_DEFAULT, CGM_ALGO_AUTO, 41,
                   false};
    int wrong = 0;
    call_data cd;
    call_setup(rank, P, &s, &cd);
    call_upload(&cd, &cd);
    if (g_report) snprintf(g_report[rank].doing, sizeof g_report[rank].doing,
                           "eager %s", cd.what);
    cgm_status st = call_issue(comm, stream, &s, &cd);
    if (st == CGM_ERROR_TIMEOUT) {
        printf("FAILURE %s: %s\n", cd.what, cgm_last_error());
        if (g_report) g_report[rank].counts[CALL_TIMEOUT]++;
        return 1;
    }
    CHECK_OK(st);
    wrong += call_verify(rank, stream, &s, &cd, &cd) != CALL_OK;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    st = call_issue(comm, stream, &s, &cd);
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    CHECK_OK(st);
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int rep = 0; rep < 2; rep++) {
        call_spec s2 = s;
        s2.seed = 50 + (uint64_t)rep;
        call_data cd2;
        call_setup(rank, P, &s2, &cd2);
        call_upload(&cd2, &cd); /* into the captured buffers */
        if (g_report) snprintf(g_report[rank].doing, sizeof g_report[rank].doing,
                               "replay %d of %s", rep + 1, cd2.what);
        CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess);
        wrong += call_verify(rank, stream, &s2, &cd2, &cd) != CALL_OK;
        call_free_host(&cd2);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    /* A shape never run eagerly: refused inside capture. */
    call_data other = cd;
    const int64_t m2 = s.m / 2; /* even: the refusal is the capture rule */
    if (ag) {
        other.dx.rows = cgm_shard_rows(m2, rank, P);
        other.dy.rows = m2;
    } else {
        other.dx.rows = m2;
        other.dy.rows = op == CGM_OP_GEMM_REDUCE_SCATTER
                            ? cgm_shard_rows(m2, rank, P) : m2;
    }
    call_spec s3 = s;
    s3.m = m2;
    graph = NULL;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    st = call_issue(comm, stream, &s3, &other);
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    if (graph) cudaGraphDestroy(graph);
    CHECK_STATUS(st, CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "call once eagerly before capture");
    call_free_device(&cd);
    call_free_host(&cd);
    printf("# capture %s P=%d rank %d: %d wrong\n", cgm_op_name(op), P, rank,
           wrong);
    if (g_report) g_report[rank].counts[wrong ? CALL_WRONG : CALL_OK]++;
    return wrong;
}
