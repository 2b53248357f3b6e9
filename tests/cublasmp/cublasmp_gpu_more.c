/* test_cublasmp_gpu: the mixed-backend comm, the rejections (what
 * cuBLASMp cannot run, epilogues and fp8 included), and graph capture
 * (eager first, then capture and replay with new inputs). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* body_rejects runs in lock-step. A rank that does not see what the test
 * expects does not exit at once (a CHECK would leave its peer inside the
 * next collective call until the comm's timeout): it records the step as
 * failed. After every step the ranks meet in shared memory (g_report,
 * bounded), and every rank stops at the first step that failed on any
 * rank, before the next collective call; rank 0 prints what each rank
 * saw. */
#define STEP_WAIT_S 40 /* above the comm's timeout_ms (bound_s / 2 = 30 s):
                        * a rank left inside an exchange comes back first */

static bool rank_alive(const rank_report *rr) {
    /* A rank that exited is a zombie until the parent reaps it (every
     * 2 ms), then kill() says ESRCH. */
    return rr->pid <= 0 || kill((pid_t)rr->pid, 0) == 0 || errno != ESRCH;
}

/* Publishes this rank's verdict on step `step` (ok: it saw `expect`) and
 * waits for every rank's. true when every rank saw what was expected.
 * `expect` NULL: the step was a check_call, which printed its own FAILED
 * line and counted its own timeout. */
static bool step_done(int rank, int P, int step, const char *what,
                      const char *expect, bool ok, cgm_status st) {
    if (!ok && expect) {
        printf("FAILED rejects step %d (%s) on rank %d: returned %d (%s), "
               "expected %s; detail: %s\n", step, what, rank, (int)st,
               cgm_status_string(st), expect,
               st == CGM_SUCCESS ? "(none: the call ran)" : cgm_last_error());
        if (st == CGM_ERROR_TIMEOUT && g_report)
            g_report[rank].counts[CALL_TIMEOUT]++; /* the comm is broken */
    }
    if (!g_report) return ok;
    if (step < 1 || step >= GPU_MAX_STEPS)
        TEST_FAIL("body_rejects: step %d out of 1..%d", step, GPU_MAX_STEPS - 1);
    rank_report *me = &g_report[rank];
    me->step_status[step] = (int)st;
    if (!ok)
        snprintf(me->step_detail, sizeof me->step_detail, "%s",
                 !expect ? "the call failed or computed a wrong Y (see its "
                           "FAILED line)"
                 : st == CGM_SUCCESS ? "(the call ran)" : cgm_last_error());
    me->step_ok[step] = ok ? 1 : 2;
    __sync_synchronize();
    me->step = step;
    __sync_synchronize();
    const int64_t start = cgm_now_ns();
    for (;;) {
        int behind = -1;
        for (int r = 0; r < P && behind < 0; r++)
            if (g_report[r].step < step) behind = r;
        if (behind < 0) break;
        const rank_report *rr = &g_report[behind];
        if (rr->finished || !rank_alive(rr)) {
            printf("FAILED rejects step %d (%s): rank %d sees that rank %d "
                   "%s after step %d (see that rank's FAIL line); rank %d "
                   "stops here instead of entering a collective call "
                   "alone\n", step, what, rank, behind,
                   rr->finished ? "returned" : "exited", rr->step, rank);
            return false;
        }
        if ((cgm_now_ns() - start) / 1000000000 > STEP_WAIT_S) {
            /* This step now counts as failed here, so that the late rank
             * stops at it too instead of entering the next call alone. */
            snprintf(me->step_detail, sizeof me->step_detail, "gave up "
                     "waiting %d s for rank %d at this step", STEP_WAIT_S,
                     behind);
            __sync_synchronize();
            me->step_ok[step] = 2;
            __sync_synchronize();
            printf("FAILED rejects step %d (%s): rank %d waited %d s for "
                   "rank %d, whose last finished step is %d (it is likely "
                   "inside a collective call that rank %d did not enter); "
                   "stopping\n", step, what, rank, STEP_WAIT_S, behind,
                   rr->step, rank);
            return false;
        }
        usleep(1000);
    }
    __sync_synchronize();
    int first_bad = -1;
    for (int r = 0; r < P && first_bad < 0; r++)
        if (g_report[r].step_ok[step] != 1) first_bad = r;
    if (first_bad < 0) return true;
    if (rank == 0) {
        for (int r = 0; r < P; r++) {
            const rank_report *rr = &g_report[r];
            cgm_status rs = (cgm_status)rr->step_status[step];
            printf("FAILED rejects step %d (%s): rank %d got %d (%s): %s\n",
                   step, what, r, (int)rs, cgm_status_string(rs),
                   rr->step_ok[step] == 1 ? "as expected"
                                          : (const char *)rr->step_detail);
        }
    } else {
        printf("# rejects rank %d: stopping after step %d (rank %d did not "
               "see what was expected, or gave up waiting: see its lines)\n",
               rank, step, first_bad);
    }
    return false;
}

/* A status for check_call's CALL_* (for the step table only). */
static cgm_status call_status(int result) {
    return result == CALL_OK ? CGM_SUCCESS
           : result == CALL_TIMEOUT ? CGM_ERROR_TIMEOUT
           : result == CALL_NOT_SUPPORTED ? CGM_ERROR_NOT_SUPPORTED
                                          : CGM_ERROR_INTERNAL;
}

/* The call returned NOT_SUPPORTED with both words (n2 may be NULL) in its
 * detail. */
static bool refused_with(cgm_status st, const char *n1, const char *n2) {
    const char *msg = cgm_last_error();
    return st == CGM_ERROR_NOT_SUPPORTED && msg && strstr(msg, n1) &&
           (!n2 || strstr(msg, n2));
}

/* One step of body_rejects: a refusal with words n1 (and n2) in the
 * detail, on every rank; stops the body (every rank) when any rank saw
 * something else. */
#define REFUSAL_STEP(what, call, n1, n2)                                     \
    do {                                                                     \
        cgm_status st_ = (call);                                             \
        bool ok_ = refused_with(st_, (n1), (n2));                            \
        if (!step_done(rank, P, ++step, (what), "NOT_SUPPORTED mentioning \"" \
                       n1 "\"", ok_, st_))                                   \
            goto out;                                                        \
        refused++;                                                           \
    } while (0)

/* What the cublasmp backend does not run of commgemm's epilogues and fp8
 * (cublasmp_attr.c), on arguments commgemm itself takes: an epilogue on
 * GEMM+RS and GEMM+AR, GELU_AUX with aux's ld not a multiple of 8, fp8
 * AG+GEMM, block scaling, an fp8 Y on GEMM+AR. Each is refused on every
 * rank before any exchange, with its reason and where it runs. Continues
 * body_rejects' steps (*step) and adds to *refused; false: a step failed
 * on some rank (every rank stops). */
static bool precision_refusals(int rank, int P, cgm_comm *comm,
                               cudaStream_t stream, int *step_io,
                               int *refused_io) {
    const int64_t M = 16, N = 16, K = 128; /* K: RS/AR's per rank, AG's */
    const cgm_dtype bf = CGM_DTYPE_BF16, e4 = CGM_DTYPE_FP8_E4M3;
    int step = *step_io, refused = 0;
    bool done = false;
    void *b[5] = {NULL, NULL, NULL, NULL, NULL}; /* x, w, y, aux, scales */
    for (int i = 0; i < 5; i++) CHECK(cudaMalloc(&b[i], 65536) == cudaSuccess);
    const float *sc = b[4];
    const int64_t ms = cgm_shard_rows(M, rank, P);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    cgm_matrix x = cgm_matrix_make(b[0], bf, M, K), w = cgm_matrix_make(b[1], bf, N, K);
    cgm_matrix xs = cgm_matrix_make(b[0], bf, ms, K);
    cgm_matrix y = cgm_matrix_make(b[2], bf, M, N), ys = cgm_matrix_make(b[2], bf, ms, N);
    o.epilogue = CGM_EPILOGUE_GELU;
    REFUSAL_STEP("GEMM+RS with gelu",
                 cgm_gemm_reduce_scatter(comm, &x, &w, NULL, &ys, &o, stream),
                 "applies its epilogue in the GEMM", "nccl and host backends");
    REFUSAL_STEP("GEMM+AR with gelu",
                 cgm_gemm_all_reduce(comm, &x, &w, NULL, &y, &o, stream),
                 "applies its epilogue in the GEMM", "nccl and host backends");
    cgm_matrix aux = cgm_matrix_make(b[3], bf, M, N);
    aux.ld = N + 1;
    o.epilogue = CGM_EPILOGUE_GELU_AUX;
    o.aux = &aux;
    REFUSAL_STEP("AG+GEMM gelu_aux, aux's ld 17",
                 cgm_all_gather_gemm(comm, &xs, &w, NULL, &y, NULL, &o, stream),
                 "EPILOGUE_AUX_LD", "ld = 17");
    o.epilogue = CGM_EPILOGUE_NONE;
    o.aux = NULL;
    /* fp8 operands: per-tensor scales at sc, sc + 64; blocks' at 128, 192
     * (X 1x128: [rows, 1]; W 128x128: [1, 1]); Y's at 256. */
    cgm_matrix x8 = cgm_matrix_make(b[0], e4, M, K), w8 = cgm_matrix_make(b[1], e4, N, K);
    x8.scale = sc, x8.scaling = CGM_SCALING_TENSOR;
    w8.scale = sc + 64, w8.scaling = CGM_SCALING_TENSOR;
    cgm_matrix xs8 = x8;
    xs8.rows = ms;
    REFUSAL_STEP("fp8 AG+GEMM",
                 cgm_all_gather_gemm(comm, &xs8, &w8, NULL, &y, NULL, &o, stream),
                 "does not run this fp8", "every gathered row");
    cgm_matrix xb = x8, wb = w8;
    xb.scale = sc + 128, xb.scaling = CGM_SCALING_BLOCK_1X128;
    wb.scale = sc + 192, wb.scaling = CGM_SCALING_BLOCK_128X128;
    REFUSAL_STEP("fp8 GEMM+RS, block scaling",
                 cgm_gemm_reduce_scatter(comm, &xb, &wb, NULL, &ys, &o, stream),
                 "does not run this fp8", "pass per-tensor scales");
    cgm_matrix y8 = cgm_matrix_make(b[3], e4, M, N);
    y8.scale = sc + 256, y8.scaling = CGM_SCALING_TENSOR;
    REFUSAL_STEP("fp8 GEMM+AR, fp8 Y",
                 cgm_gemm_all_reduce(comm, &x8, &w8, NULL, &y8, &o, stream),
                 "does not run this fp8", "GEMM+RS only");
    done = true;
out:
    for (int i = 0; i < 5; i++) cudaFree(b[i]);
    *step_io = step;
    *refused_io += refused;
    return done;
}

/* What cuBLASMp cannot do is refused on every rank, and the comm works on.
 * Every rank passes arguments that are valid for commgemm (each rank's
 * validation is local: an argument invalid on one rank only would refuse
 * there and leave the other rank in the first-call exchange). */
int body_rejects(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    const int64_t M = 8, K = 16;
    cgm_dtype dt = CGM_DTYPE_BF16;
    void *bx = NULL, *bw = NULL, *by = NULL, *bg = NULL;
    CHECK(cudaMalloc(&bx, 4096) == cudaSuccess);
    CHECK(cudaMalloc(&bw, 4096) == cudaSuccess);
    CHECK(cudaMalloc(&by, 4096) == cudaSuccess);
    CHECK(cudaMalloc(&bg, 4096) == cudaSuccess);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    int refused = 0, step = 0, bad = 1;
    /* Every rank is here (alive, buffers allocated) before the first
     * collective call. */
    if (!step_done(rank, P, ++step, "setup", "nothing", true, CGM_SUCCESS))
        goto out;
    cgm_matrix x = cgm_matrix_make(bx, dt, cgm_shard_rows(M, rank, P), K);
    if (P == 2) {
        /* n = 8 and 24 (sum 32, not its ceil split 16 + 16): refused after
         * the first-call exchange, on both ranks. */
        const int64_t n = rank == 0 ? 8 : 24;
        cgm_matrix w = cgm_matrix_make(bw, dt, n, K);
        cgm_matrix y = cgm_matrix_make(by, dt, M, n);
        REFUSAL_STEP("AG+GEMM, n = 8 + 24",
                     cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &o, stream),
                     "ceil split", NULL);
        /* Uneven m (7 rows over 2 ranks): refused before any exchange. */
        const int64_t M7 = 7;
        cgm_matrix x7 = cgm_matrix_make(bx, dt, cgm_shard_rows(M7, rank, P), K);
        cgm_matrix w7 = cgm_matrix_make(bw, dt, 16, K);
        cgm_matrix y7 = cgm_matrix_make(by, dt, M7, 16);
        REFUSAL_STEP("AG+GEMM, m = 7",
                     cgm_all_gather_gemm(comm, &x7, &w7, NULL, &y7, NULL, &o, stream),
                     "only with even shards", "m = 7");
        /* Uneven n (9 + 8 rows of W, the ceil split of 17): refused after
         * the first-call exchange, on both ranks. */
        cgm_matrix w9 = cgm_matrix_make(bw, dt, cgm_shard_rows(17, rank, P), K);
        cgm_matrix y9 = cgm_matrix_make(by, dt, M, w9.rows);
        REFUSAL_STEP("AG+GEMM, n = 9 + 8",
                     cgm_all_gather_gemm(comm, &x, &w9, NULL, &y9, NULL, &o, stream),
                     "n = 17", NULL);
        /* GEMM+AR with uneven m. */
        cgm_matrix xa7 = cgm_matrix_make(bx, dt, M7, K / P);
        cgm_matrix wa7 = cgm_matrix_make(bw, dt, 16, K / P);
        REFUSAL_STEP("GEMM+AR, m = 7",
                     cgm_gemm_all_reduce(comm, &xa7, &wa7, NULL, &y7, &o, stream),
                     "only with even shards", NULL);
    }
    /* Even shapes from here on: W [16, K] and Y [M, 16] (ld 16) on every
     * rank. */
    cgm_matrix w = cgm_matrix_make(bw, dt, 16, K);
    cgm_matrix y = cgm_matrix_make(by, dt, M, 16);
    cgm_matrix g = cgm_matrix_make(bg, dt, M, K);
    REFUSAL_STEP("AG+GEMM with x_gathered",
                 cgm_all_gather_gemm(comm, &x, &w, NULL, &y, &g, &o, stream),
                 "x_gathered", NULL);
    o.algo = CGM_ALGO_RING;
    REFUSAL_STEP("AG+GEMM, algo ring",
                 cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &o, stream),
                 "ring", NULL);
    o.algo = CGM_ALGO_AUTO;
    cgm_matrix xa = cgm_matrix_make(bx, dt, M, K / P);
    cgm_matrix ya = cgm_matrix_make(by, dt, M, 16);
    cgm_matrix wb = cgm_matrix_make(bw, dt, 16, K / P); /* TN: [n, k] */
    REFUSAL_STEP("bulk overlap",
                 cgm_bulk_overlap(comm, &xa, &wb, NULL, &ya,
                                  CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o,
                                  stream),
                 "bulk", NULL);
    if (!precision_refusals(rank, P, comm, stream, &step, &refused)) goto out;
    printf("# rejects P=%d rank %d: %d refused as expected\n", P, rank, refused);
    /* Still usable: AG+GEMM, and GEMM+AR in NN (RS + all-gather: every
     * layout). */
    call_spec s = {CGM_OP_ALL_GATHER_GEMM, CGM_LAYOUT_TN, dt, dt, 64, 64, 64,
                   0, false, false, CGM_BACKEND_DEFAULT, CGM_ALGO_AUTO, 77,
                   false};
    int r1 = check_call(rank, P, comm, stream, &s);
    if (!step_done(rank, P, ++step, "AG+GEMM after the refusals", NULL,
                   r1 == CALL_OK, call_status(r1)))
        goto out;
    call_spec s2 = {CGM_OP_GEMM_ALL_REDUCE, CGM_LAYOUT_NN, dt, dt, 64, 64, 64,
                    0, true, true, CGM_BACKEND_DEFAULT, CGM_ALGO_AUTO, 78,
                    false};
    int r2 = check_call(rank, P, comm, stream, &s2);
    if (!step_done(rank, P, ++step, "GEMM+AR NN after the refusals", NULL,
                   r2 == CALL_OK, call_status(r2)))
        goto out;
    bad = 0;
out:
    if (g_report) g_report[rank].counts[CALL_REJECTED] += refused;
    cudaFree(bx);
    cudaFree(bw);
    cudaFree(by);
    cudaFree(bg);
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
