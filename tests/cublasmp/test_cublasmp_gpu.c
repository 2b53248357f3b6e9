/* The cublasmp backend on GPUs: every op x dtype x layout x shape against a
 * host reference (double, from the same deterministic inputs every rank can
 * regenerate), P = 1 and 2 forked ranks (fork before CUDA; rank 0 writes
 * the ncclUniqueId to /tmp/<rendezvous>.id), the mixed-backend comm, the
 * rejections and graph capture. Skips without GPUs or without cuBLASMp. */
#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "backend/cublasmp/cublasmp.h"
#include "harness.h"

typedef struct gpu_case {
    const char *name;
    int nranks;
    int (*body)(int rank, int nranks, cgm_comm *comm, cudaStream_t stream);
    cgm_backend backend;      /* comm default */
    cgm_backend ag_backend;   /* config.op_backend[AG] (DEFAULT: unset) */
} gpu_case;

/* ------------------------------------------------------ environment */

typedef struct probe_result {
    int devices;
    int lib_ok;
    char message[1500];
} probe_result;

/* In a child, so that the parent never initialises CUDA before forking. */
static void skip_unless(int nranks) {
    int fds[2];
    if (pipe(fds)) TEST_FAIL("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        probe_result r;
        memset(&r, 0, sizeof r);
        if (cudaGetDeviceCount(&r.devices) != cudaSuccess) r.devices = 0;
        const cmp_api *api = NULL;
        r.lib_ok = cmp_lib_get(&api) == CGM_SUCCESS;
        snprintf(r.message, sizeof r.message, "%s",
                 r.lib_ok ? "" : cgm_last_error());
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    probe_result r;
    memset(&r, 0, sizeof r);
    ssize_t got = read(fds[0], &r, sizeof r);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    if (got != (ssize_t)sizeof r) TEST_FAIL("probe child died");
    /* On the GPU machine a skip would hide a broken install: there,
     * COMMGEMM_TEST_REQUIRE_CUBLASMP=1 turns it into a failure. */
    bool required = getenv("COMMGEMM_TEST_REQUIRE_CUBLASMP") != NULL;
    if (r.devices < nranks) {
        if (required) TEST_FAIL("needs %d GPUs, found %d", nranks, r.devices);
        TEST_SKIP("needs %d GPUs, found %d", nranks, r.devices);
    }
    if (!r.lib_ok) {
        if (required) TEST_FAIL("cuBLASMp not loadable: %s", r.message);
        TEST_SKIP("cuBLASMp not loadable: %s", r.message);
    }
}

static int nccl_bootstrap(int rank, int nranks, const char *rendezvous,
                          ncclComm_t *out) {
    char path[256], tmp[300];
    snprintf(path, sizeof path, "/tmp/%s.id", rendezvous);
    ncclUniqueId id;
    if (rank == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof id, 1, f) != 1) return 1;
        fclose(f);
        if (rename(tmp, path)) return 1;
    } else {
        int waited_ms = 0;
        for (;;) {
            FILE *f = fopen(path, "rb");
            if (f) {
                size_t n = fread(&id, sizeof id, 1, f);
                fclose(f);
                if (n == 1) break;
            }
            if ((waited_ms += 10) > 60000) {
                fprintf(stderr, "rank %d: no %s after 60 s\n", rank, path);
                return 1;
            }
            usleep(10000);
        }
    }
    if (cudaSetDevice(rank) != cudaSuccess) return 1;
    ncclResult_t res = ncclCommInitRank(out, nranks, id, rank);
    if (res != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", rank,
                ncclGetErrorString(res));
        return 1;
    }
    return 0;
}

static int rank_main(int rank, int nranks, const char *rendezvous, void *arg) {
    const gpu_case *gc = arg;
    ncclComm_t nccl = NULL;
    if (nccl_bootstrap(rank, nranks, rendezvous, &nccl)) return 1;
    cgm_config config = CGM_CONFIG_INIT;
    config.backend = gc->backend;
    config.op_backend[CGM_OP_ALL_GATHER_GEMM] = gc->ag_backend;
    config.max_m = config.max_n = config.max_k = 1024;
    cgm_comm *comm = NULL;
    cgm_status st = cgm_comm_init_nccl(nccl, &config, &comm);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "rank %d: cgm_comm_init_nccl: %s: %s\n", rank,
                cgm_status_string(st), cgm_last_error());
        return 1;
    }
    cudaStream_t stream = NULL;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    int failures = gc->body(rank, nranks, comm, stream);
    st = cgm_comm_destroy(comm);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "rank %d: cgm_comm_destroy: %s\n", rank, cgm_last_error());
        failures++;
    }
    cudaStreamDestroy(stream);
    ncclCommDestroy(nccl);
    if (rank == 0) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/%s.id", rendezvous);
        unlink(path);
    }
    return failures;
}

static void run_case(const void *param) {
    const gpu_case *gc = param;
    skip_unless(gc->nranks);
    CHECK_INT_EQ(test_run_ranks(gc->nranks, rank_main, (void *)gc, 280, NULL), 0);
}

/* ------------------------------------------------------------ one call */

typedef struct call_spec {
    cgm_op op;
    cgm_layout layout;
    cgm_dtype in, out;
    int64_t m, n, k; /* global: AG splits n and m, RS/AR split k */
    int64_t pad;     /* ld = cols + pad */
    bool bias, accumulate;
    cgm_backend backend; /* per call */
    cgm_algo algo;
    uint64_t seed;
} call_spec;

enum { CALL_OK = 0, CALL_WRONG = 1, CALL_NOT_SUPPORTED = 2 };

static cgm_matrix to_device(const cgm_matrix *h) {
    cgm_matrix d = *h;
    size_t bytes = (size_t)(h->rows * (h->ld ? h->ld : h->cols)) *
                   cgm_dtype_size(h->dtype);
    d.data = NULL;
    if (bytes) {
        if (cudaMalloc(&d.data, bytes) != cudaSuccess)
            TEST_FAIL("cudaMalloc(%zu)", bytes);
        cudaMemcpy(d.data, h->data, bytes, cudaMemcpyHostToDevice);
    }
    return d;
}

static void to_host(cgm_matrix *h, const cgm_matrix *d) {
    size_t bytes = (size_t)(h->rows * (h->ld ? h->ld : h->cols)) *
                   cgm_dtype_size(h->dtype);
    if (bytes) cudaMemcpy(h->data, d->data, bytes, cudaMemcpyDeviceToHost);
}

/* X of rank q: [rows, k] (TN, NN) or [k, rows] (NT). W: [n, k] or [k, n]. */
static cgm_matrix make_x(const call_spec *s, int64_t rows, int64_t k, int q) {
    bool nt = s->layout == CGM_LAYOUT_NT;
    cgm_matrix x = test_alloc(s->in, nt ? k : rows, nt ? rows : k, s->pad);
    test_fill(&x, s->seed * 1000 + 11 + 7 * (uint64_t)q);
    return x;
}

static cgm_matrix make_w(const call_spec *s, int64_t n, int64_t k, int q) {
    bool tn = s->layout == CGM_LAYOUT_TN;
    cgm_matrix w = test_alloc(s->in, tn ? n : k, tn ? k : n, s->pad);
    test_fill(&w, s->seed * 1000 + 13 + 7 * (uint64_t)q);
    return w;
}

/* Runs one call on every rank and checks this rank's output. */
static int check_call(int rank, int P, cgm_comm *comm, cudaStream_t stream,
                      const call_spec *s) {
    const bool ag = s->op == CGM_OP_ALL_GATHER_GEMM;
    const bool rs = s->op == CGM_OP_GEMM_REDUCE_SCATTER;
    const bool nt = s->layout == CGM_LAYOUT_NT;
    const int64_t m_r = cgm_shard_rows(s->m, rank, P);
    const int64_t n_loc = ag ? cgm_shard_rows(s->n, rank, P) : s->n;
    const int64_t y_rows = rs ? m_r : s->m;
    const int64_t y_off = rs ? cgm_shard_offset(s->m, rank, P) : 0;
    double *ref = calloc((size_t)(s->m * (n_loc ? n_loc : 1)), sizeof *ref);
    double *part = calloc((size_t)(s->m * (s->n ? s->n : 1)), sizeof *part);
    cgm_matrix x = {0}, w = {0};
    if (ag) {
        /* Reference from the gathered X (fp32 holds the values exactly). */
        cgm_matrix g = test_alloc(CGM_DTYPE_FP32, nt ? s->k : s->m,
                                  nt ? s->m : s->k, 0);
        for (int q = 0; q < P; q++) {
            int64_t rows = cgm_shard_rows(s->m, q, P);
            int64_t off = cgm_shard_offset(s->m, q, P);
            cgm_matrix xq = make_x(s, rows, s->k, q);
            for (int64_t i = 0; i < xq.rows; i++)
                for (int64_t j = 0; j < xq.cols; j++)
                    cgm_store_float(g.data, CGM_DTYPE_FP32,
                                    nt ? i * s->m + off + j : (off + i) * s->k + j,
                                    (float)test_get(&xq, i, j));
            if (q == rank) x = xq;
            else test_free(&xq);
        }
        w = make_w(s, n_loc, s->k, rank);
        test_ref_gemm(s->layout, &g, &w, s->m, n_loc, s->k, ref);
        test_free(&g);
    } else {
        for (int q = 0; q < P; q++) {
            int64_t kq = cgm_shard_rows(s->k, q, P);
            cgm_matrix xq = make_x(s, s->m, kq, q), wq = make_w(s, s->n, kq, q);
            test_ref_gemm(s->layout, &xq, &wq, s->m, s->n, kq, part);
            for (int64_t i = 0; i < y_rows; i++)
                for (int64_t j = 0; j < s->n; j++)
                    ref[i * s->n + j] += part[(y_off + i) * s->n + j];
            if (q == rank) {
                x = xq;
                w = wq;
            } else {
                test_free(&xq);
                test_free(&wq);
            }
        }
    }
    cgm_matrix bias = test_alloc(s->out, 1, n_loc, 0);
    test_fill(&bias, s->seed * 1000 + 17 + (ag ? 7 * (uint64_t)rank : 0));
    cgm_matrix y = test_alloc(s->out, y_rows, n_loc, s->pad);
    if (s->accumulate) test_fill(&y, s->seed * 1000 + 19 + 7 * (uint64_t)rank);
    for (int64_t i = 0; i < y_rows; i++)
        for (int64_t j = 0; j < n_loc; j++)
            ref[i * n_loc + j] += (s->bias ? test_get(&bias, 0, j) : 0) +
                                  (s->accumulate ? test_get(&y, i, j) : 0);
    cgm_matrix dx = to_device(&x), dw = to_device(&w), db = to_device(&bias),
               dy = to_device(&y);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.layout = s->layout;
    o.accumulate = s->accumulate;
    o.backend = s->backend;
    o.algo = s->algo;
    cgm_status st;
    const cgm_matrix *pb = s->bias ? &db : NULL;
    if (ag) st = cgm_all_gather_gemm(comm, &dx, &dw, pb, &dy, NULL, &o, stream);
    else if (rs) st = cgm_gemm_reduce_scatter(comm, &dx, &dw, pb, &dy, &o, stream);
    else st = cgm_gemm_all_reduce(comm, &dx, &dw, pb, &dy, &o, stream);
    char what[200];
    snprintf(what, sizeof what, "%s %s %s->%s m=%lld n=%lld k=%lld pad=%lld "
             "bias=%d acc=%d (rank %d of %d)", cgm_op_name(s->op),
             cgm_layout_name(s->layout), cgm_dtype_name(s->in),
             cgm_dtype_name(s->out), (long long)s->m, (long long)s->n,
             (long long)s->k, (long long)s->pad, s->bias, s->accumulate, rank, P);
    int result = CALL_OK;
    if (st == CGM_ERROR_NOT_SUPPORTED) {
        if (rank == 0) printf("NOT_SUPPORTED %s: %s\n", what, cgm_last_error());
        result = CALL_NOT_SUPPORTED;
    } else if (st != CGM_SUCCESS) {
        printf("FAILED %s: %s: %s\n", what, cgm_status_string(st), cgm_last_error());
        result = CALL_WRONG;
    } else {
        cudaError_t e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
            printf("FAILED %s: stream: %s\n", what, cudaGetErrorString(e));
            result = CALL_WRONG;
        } else {
            to_host(&y, &dy);
            double tol = test_tolerance(s->in, s->out, s->k);
            if (test_compare(&y, ref, y_rows, n_loc, tol, what) != 0)
                result = CALL_WRONG;
        }
    }
    cudaFree(dx.data);
    cudaFree(dw.data);
    cudaFree(db.data);
    cudaFree(dy.data);
    test_free(&x);
    test_free(&w);
    test_free(&bias);
    test_free(&y);
    free(ref);
    free(part);
    return result;
}

/* --------------------------------------------------------------- bodies */

static const struct { cgm_dtype in, out; } dtypes[] = {
    {CGM_DTYPE_BF16, CGM_DTYPE_BF16}, {CGM_DTYPE_FP16, CGM_DTYPE_FP16},
    {CGM_DTYPE_BF16, CGM_DTYPE_FP32}, {CGM_DTYPE_FP32, CGM_DTYPE_FP32}};
static const int64_t shapes[][4] = { /* m, n, k, pad */
    {64, 64, 64, 0}, {131, 97, 71, 8}, {1, 16, 16, 0}, {256, 200, 136, 0}};

static int sweep(int rank, int P, cgm_comm *comm, cudaStream_t stream,
                 cgm_op op) {
    int counts[3] = {0, 0, 0};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++)
            for (int L = 0; L < CGM_LAYOUT_COUNT_; L++)
                for (int v = 0; v < 4; v++) {
                    if (si != 1 && (v == 1 || v == 2)) continue;
                    call_spec s = {op, (cgm_layout)L, dtypes[di].in,
                                   dtypes[di].out, shapes[si][0], shapes[si][1],
                                   shapes[si][2], shapes[si][3], v & 1, v >> 1,
                                   CGM_BACKEND_DEFAULT, CGM_ALGO_AUTO,
                                   si * 100 + di * 10 + (uint64_t)L};
                    int r = check_call(rank, P, comm, stream, &s);
                    counts[r]++;
                    if (op == CGM_OP_GEMM_ALL_REDUCE && L != CGM_LAYOUT_TN &&
                        r != CALL_NOT_SUPPORTED) {
                        printf("FAILED gemm_ar %s: expected NOT_SUPPORTED\n",
                               cgm_layout_name((cgm_layout)L));
                        counts[CALL_WRONG]++;
                    }
                }
    printf("# %s P=%d rank %d: %d ok, %d not supported, %d wrong\n",
           cgm_op_name(op), P, rank, counts[0], counts[2], counts[1]);
    return counts[CALL_WRONG];
}

static int body_ag(int r, int P, cgm_comm *c, cudaStream_t s) {
    return sweep(r, P, c, s, CGM_OP_ALL_GATHER_GEMM);
}
static int body_rs(int r, int P, cgm_comm *c, cudaStream_t s) {
    return sweep(r, P, c, s, CGM_OP_GEMM_REDUCE_SCATTER);
}
static int body_ar(int r, int P, cgm_comm *c, cudaStream_t s) {
    return sweep(r, P, c, s, CGM_OP_GEMM_ALL_REDUCE);
}
static int body_all(int r, int P, cgm_comm *c, cudaStream_t s) {
    return body_ag(r, P, c, s) + body_rs(r, P, c, s) + body_ar(r, P, c, s);
}

/* One comm: AG+GEMM on cublasmp (config), GEMM+RS on p2p (the comm's
 * default), then per-call overrides both ways. */
static int body_mixed(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    int wrong = 0;
    cgm_backend b = CGM_BACKEND_DEFAULT;
    CHECK_OK(cgm_comm_backend(comm, CGM_OP_ALL_GATHER_GEMM, &b));
    CHECK_INT_EQ(b, CGM_BACKEND_CUBLASMP);
    CHECK_OK(cgm_comm_backend(comm, CGM_OP_GEMM_REDUCE_SCATTER, &b));
    CHECK_INT_EQ(b, CGM_BACKEND_P2P);
    const struct { cgm_op op; cgm_backend backend; } steps[] = {
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_DEFAULT},   /* cublasmp */
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_BACKEND_DEFAULT}, /* p2p */
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_DEFAULT},
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_BACKEND_CUBLASMP},
        {CGM_OP_GEMM_ALL_REDUCE, CGM_BACKEND_CUBLASMP},
        {CGM_OP_ALL_GATHER_GEMM, CGM_BACKEND_P2P},
        {CGM_OP_GEMM_ALL_REDUCE, CGM_BACKEND_DEFAULT},   /* p2p */
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        call_spec s = {steps[i].op, CGM_LAYOUT_TN, CGM_DTYPE_BF16,
                       CGM_DTYPE_BF16, 131, 97, 71, 0, true, i % 2 == 1,
                       steps[i].backend, CGM_ALGO_AUTO, 900 + i};
        if (check_call(rank, P, comm, stream, &s) != CALL_OK) {
            printf("FAILED mixed step %zu (%s on %s)\n", i,
                   cgm_op_name(s.op), cgm_backend_name(s.backend));
            wrong++;
        }
    }
    printf("# mixed P=%d rank %d: %d wrong\n", P, rank, wrong);
    return wrong;
}

/* What cuBLASMp cannot do is refused on every rank, and the comm works on. */
static int body_rejects(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
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
    if (P == 2) {
        CHECK_STATUS(cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &o, stream),
                     CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "ceil split");
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
    cgm_matrix wa = cgm_matrix_make(bw, dt, K / P, 16); /* NN: [k, n] */
    cgm_matrix ya = cgm_matrix_make(by, dt, M, 16);
    o.layout = CGM_LAYOUT_NN;
    CHECK_STATUS(cgm_gemm_all_reduce(comm, &xa, &wa, NULL, &ya, &o, stream),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "TN only");
    o.layout = CGM_LAYOUT_TN;
    cgm_matrix wb = cgm_matrix_make(bw, dt, 16, K / P); /* TN: [n, k] */
    CHECK_STATUS(cgm_bulk_overlap(comm, &xa, &wb, NULL, &ya,
                                  CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o, stream),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "bulk");
    cudaFree(bx);
    cudaFree(bw);
    cudaFree(by);
    cudaFree(bg);
    /* Still usable. */
    call_spec s = {CGM_OP_ALL_GATHER_GEMM, CGM_LAYOUT_TN, dt, dt, 64, 64, 64,
                   0, false, false, CGM_BACKEND_DEFAULT, CGM_ALGO_AUTO, 77};
    return check_call(rank, P, comm, stream, &s) == CALL_OK ? 0 : 1;
}

/* Eager first, then capture and replay with new inputs; a new shape inside
 * capture is refused with the eager-first advice. */
static int body_capture(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    const int64_t M = 131, N = 96, K = 64;
    cgm_dtype dt = CGM_DTYPE_BF16;
    const int64_t m_r = cgm_shard_rows(M, rank, P), n_r = cgm_shard_rows(N, rank, P);
    cgm_matrix hx = test_alloc(dt, m_r, K, 0), hw = test_alloc(dt, n_r, K, 0);
    cgm_matrix hy = test_alloc(dt, M, n_r, 0);
    test_fill(&hw, 5 + (uint64_t)rank);
    cgm_matrix dx = to_device(&hx), dw = to_device(&hw), dy = to_device(&hy);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    test_fill(&hx, 1 + (uint64_t)rank);
    cudaMemcpy(dx.data, hx.data, (size_t)(m_r * K) * 2, cudaMemcpyHostToDevice);
    CHECK_OK(cgm_all_gather_gemm(comm, &dx, &dw, NULL, &dy, NULL, &o, stream));
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    cgm_status st = cgm_all_gather_gemm(comm, &dx, &dw, NULL, &dy, NULL, &o, stream);
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    CHECK_OK(st);
    CHECK(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    /* New inputs, replayed twice. */
    int wrong = 0;
    for (int rep = 0; rep < 2; rep++) {
        uint64_t seed = 100 + (uint64_t)rep * 10;
        test_fill(&hx, seed + (uint64_t)rank);
        cudaMemcpy(dx.data, hx.data, (size_t)(m_r * K) * 2, cudaMemcpyHostToDevice);
        CHECK(cudaGraphLaunch(exec, stream) == cudaSuccess);
        CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
        to_host(&hy, &dy);
        cgm_matrix g = test_alloc(CGM_DTYPE_FP32, M, K, 0);
        for (int q = 0; q < P; q++) {
            cgm_matrix xq = test_alloc(dt, cgm_shard_rows(M, q, P), K, 0);
            test_fill(&xq, seed + (uint64_t)q);
            for (int64_t i = 0; i < xq.rows; i++)
                for (int64_t j = 0; j < K; j++)
                    cgm_store_float(g.data, CGM_DTYPE_FP32,
                                    (cgm_shard_offset(M, q, P) + i) * K + j,
                                    (float)test_get(&xq, i, j));
            test_free(&xq);
        }
        double *ref = calloc((size_t)(M * n_r), sizeof *ref);
        test_ref_gemm(CGM_LAYOUT_TN, &g, &hw, M, n_r, K, ref);
        wrong += test_compare(&hy, ref, M, n_r, test_tolerance(dt, dt, K),
                              "captured ag_gemm") != 0;
        free(ref);
        test_free(&g);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    /* A shape never run eagerly: refused inside capture. */
    cgm_matrix y2 = dy;
    y2.rows = M - 1;
    cgm_matrix x2 = dx;
    x2.rows = cgm_shard_rows(M - 1, rank, P);
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    st = cgm_all_gather_gemm(comm, &x2, &dw, NULL, &y2, NULL, &o, stream);
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    if (graph) cudaGraphDestroy(graph);
    CHECK_STATUS(st, CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "call once eagerly before capture");
    cudaFree(dx.data);
    cudaFree(dw.data);
    cudaFree(dy.data);
    test_free(&hx);
    test_free(&hw);
    test_free(&hy);
    printf("# capture P=%d rank %d: %d wrong\n", P, rank, wrong);
    return wrong;
}

#define CUBLASMP CGM_BACKEND_CUBLASMP
#define UNSET CGM_BACKEND_DEFAULT
static const gpu_case cases[] = {
    {"p1_all_ops", 1, body_all, CUBLASMP, UNSET},
    {"p2_ag_gemm", 2, body_ag, CUBLASMP, UNSET},
    {"p2_gemm_rs", 2, body_rs, CUBLASMP, UNSET},
    {"p2_gemm_ar", 2, body_ar, CUBLASMP, UNSET},
    {"p2_mixed_with_p2p", 2, body_mixed, CGM_BACKEND_P2P, CUBLASMP},
    {"p2_rejects", 2, body_rejects, CUBLASMP, UNSET},
    {"p2_capture", 2, body_capture, CUBLASMP, UNSET},
};

static void register_cases(void) {
    test_set_timeout(300);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        test_add(cases[i].name, run_case, &cases[i]);
}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_cases);
}
