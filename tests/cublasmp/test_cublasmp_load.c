/* The cublasmp backend without a GPU: the loader's error paths (absent
 * library, library without the API, wrong version), the pip-location
 * search, and the pure mappings from commgemm calls to cuBLASMp problems. */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cublasmp/cublasmp.h"
#include "harness.h"

#define INSTALL_HINT "pip install nvidia-cublasmp-cu13==0.7.0.125"

/* ---------------------------------------------------------------- loader */

static void env_path_missing(const void *p) {
    (void)p;
    /* Parameters are read once per process: set before the first read. */
    setenv("COMMGEMM_CUBLASMP_LIB", "/nonexistent/dir/libcublasmp.so.0", 1);
    const cmp_api *api = (const cmp_api *)1;
    CHECK_STATUS(cmp_lib_get(&api), CGM_ERROR_UNAVAILABLE);
    CHECK(api == NULL);
    const char *msg = cgm_last_error();
    CHECK_CONTAINS(msg, INSTALL_HINT);
    CHECK_CONTAINS(msg, "COMMGEMM_CUBLASMP_LIB");
    CHECK_CONTAINS(msg, "/nonexistent/dir/libcublasmp.so.0");
    CHECK_CONTAINS(msg, "cannot open shared object file"); /* dlerror's */
    /* Later calls give the same verdict without retrying. */
    CHECK_STATUS(cmp_lib_get(&api), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "cannot open shared object file");
}

static void explicit_path_missing(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load("/nonexistent/libcublasmp.so.0", &api),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
    CHECK_CONTAINS(cgm_last_error(), "No such file or directory");
    CHECK(api.dl == NULL);
}

static void search_finds_nothing(const void *p) {
    (void)p;
    /* No pip install anywhere we look (CI): the message lists what the
     * loader tried and says how to install. */
    setenv("VIRTUAL_ENV", "/nonexistent-venv", 1);
    unsetenv("PYTHONPATH");
    cmp_api api;
    cgm_status st = cmp_lib_load(NULL, &api);
    if (st == CGM_SUCCESS) {
        cmp_lib_close(&api);
        TEST_SKIP("a real cuBLASMp is installed here (%s)", "default search");
    }
    CHECK_STATUS(st, CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
    CHECK_CONTAINS(cgm_last_error(), "libcublasmp.so.0");
}

static void missing_symbol(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load(FAKE_NOSYM, &api), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "missing symbol cublasMpCreate");
    CHECK_CONTAINS(cgm_last_error(), FAKE_NOSYM);
    CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
    CHECK(api.dl == NULL);
}

static void wrong_version(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load(FAKE_V060, &api), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "version 0.6.0");
    CHECK_CONTAINS(cgm_last_error(), "expected 0.7.x");
}

static void right_version(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_OK(cmp_lib_load(FAKE_V070, &api));
    CHECK_INT_EQ(api.version, 700);
    CHECK(api.Matmul != NULL && api.GridCreate != NULL);
    /* Optional: no NVSHMEM behind the fake. */
    CHECK(api.nvshmem_malloc == NULL && api.nvshmem_free == NULL);
    cmp_lib_close(&api);
}

/* A pip layout under a virtual environment and under a PYTHONPATH entry. */
static void pip_locations(const void *p) {
    (void)p;
    char root[] = "/tmp/cmp-venv-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char dir[512], lib[600], site[512];
    snprintf(dir, sizeof dir,
             "%s/lib/python3.12/site-packages/nvidia/cublasmp/cu13/lib", root);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK_INT_EQ(system(cmd), 0);
    snprintf(lib, sizeof lib, "%s/libcublasmp.so.0", dir);
    CHECK_INT_EQ(symlink(FAKE_V070, lib), 0);
    setenv("VIRTUAL_ENV", root, 1);
    unsetenv("PYTHONPATH");
    unsetenv("CONDA_PREFIX");
    char paths[8][512];
    int n = cmp_lib_candidates(paths, 8);
    CHECK(n >= 1);
    CHECK_CONTAINS(paths[0], lib);
    cmp_api api;
    cgm_status st = cmp_lib_load(NULL, &api);
    if (st == CGM_SUCCESS && strstr(api.path, root) == NULL) {
        cmp_lib_close(&api);
        TEST_SKIP("a real cuBLASMp on the default search path shadows the "
                  "pip location");
    }
    CHECK_OK(st);
    CHECK_CONTAINS(api.path, root);
    cmp_lib_close(&api);
    /* The same folder given as a PYTHONPATH entry (pip --target). */
    unsetenv("VIRTUAL_ENV");
    snprintf(site, sizeof site, "/nonexistent:%s/lib/python3.12/site-packages",
             root);
    setenv("PYTHONPATH", site, 1);
    n = cmp_lib_candidates(paths, 8);
    CHECK(n >= 1);
    CHECK_CONTAINS(paths[0], lib);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_INT_EQ(system(cmd), 0);
}

/* Through the public API: a host comm asked for cublasmp on one call. */
static void host_comm_refuses(const void *p) {
    (void)p;
    setenv("COMMGEMM_CUBLASMP_LIB", "/nonexistent/libcublasmp.so.0", 1);
    cgm_comm *comm = test_host_comm(0, 1, "cmp-host-refuses", NULL);
    float x[4 * 2], w[3 * 2], y[4 * 3];
    memset(x, 0, sizeof x);
    memset(w, 0, sizeof w);
    cgm_matrix mx = cgm_matrix_make(x, CGM_DTYPE_FP32, 4, 2);
    cgm_matrix mw = cgm_matrix_make(w, CGM_DTYPE_FP32, 3, 2);
    cgm_matrix my = cgm_matrix_make(y, CGM_DTYPE_FP32, 4, 3);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.backend = CGM_BACKEND_CUBLASMP;
    cgm_status st = cgm_all_gather_gemm(comm, &mx, &mw, NULL, &my, NULL, &o, NULL);
    CHECK(st == CGM_ERROR_UNAVAILABLE || st == CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "cublasmp");
    /* The comm still works on its own backend. */
    o.backend = CGM_BACKEND_DEFAULT;
    CHECK_OK(cgm_all_gather_gemm(comm, &mx, &mw, NULL, &my, NULL, &o, NULL));
    CHECK_OK(cgm_comm_destroy(comm));
}

/* -------------------------------------------------------------- mappings */

static int64_t numroc(int64_t n, int64_t nb, int iproc, int nprocs) {
    int64_t nblocks = n / nb, count = nblocks / nprocs * nb;
    int64_t extra = nblocks % nprocs;
    if (iproc < extra) count += nb;
    else if (iproc == extra) count += n % nb;
    return count;
}

/* Local column-major rows x cols that descriptor g gives rank r. */
static void local_dims(const cmp_geom *g, int r, int P, int64_t *rows,
                       int64_t *cols) {
    if (g->grid == CMP_GRID_COL) {
        *rows = numroc(g->rows, g->mb, r, P);
        *cols = numroc(g->cols, g->nb, 0, 1);
    } else {
        *rows = numroc(g->rows, g->mb, 0, 1);
        *cols = numroc(g->cols, g->nb, r, P);
    }
}

/* Column-major dims of a row-major [rows, cols] buffer: (cols x rows). */
static void expect_local(const cmp_geom *g, int r, int P, int64_t rm_rows,
                         int64_t rm_cols, int64_t ld, const char *what) {
    int64_t rows, cols;
    local_dims(g, r, P, &rows, &cols);
    if (rows != rm_cols || cols != rm_rows || g->lld < (rows > 1 ? rows : 1) ||
        g->lld != (ld > 1 ? ld : 1))
        TEST_FAIL("%s on rank %d of %d: descriptor gives %lld x %lld "
                  "(lld %lld), expected the row-major [%lld, %lld] buffer "
                  "(ld %lld) as %lld x %lld",
                  what, r, P, (long long)rows, (long long)cols,
                  (long long)g->lld, (long long)rm_rows, (long long)rm_cols,
                  (long long)ld, (long long)rm_cols, (long long)rm_rows);
}

/* Every rank's descriptors must describe exactly the buffers commgemm's
 * API gives that rank, for every op, layout and even shape; uneven shapes
 * (P > 1) are refused, the same way on every rank. */
static void mapping_matches_api(const void *p) {
    (void)p;
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    int checked = 0, refused = 0;
    for (int P = 1; P <= 5; P++)
        for (int oi = 0; oi < 3; oi++)
            for (int L = 0; L < CGM_LAYOUT_COUNT_; L++)
                for (int64_t M = 1; M <= 12; M++)
                    for (int64_t N = 1; N <= 12; N += 3)
                        for (int64_t K = 1; K <= 12; K += 3) {
            cgm_op op = ops[oi];
            const bool ag = op == CGM_OP_ALL_GATHER_GEMM;
            const bool ar = op == CGM_OP_GEMM_ALL_REDUCE;
            const bool even = M % P == 0 && (ag ? N % P == 0 : K % P == 0);
            cmp_shape s = {op, (cgm_layout)L, P, M, N, K, 0, 0, 0};
            bool tn = L == CGM_LAYOUT_TN, nt = L == CGM_LAYOUT_NT;
            for (int r = 0; r < P; r++) {
                int64_t m_r = cgm_shard_rows(M, r, P);
                /* AG: local n; RS/AR: local k. */
                int64_t n_r = ag ? cgm_shard_rows(N, r, P) : N;
                int64_t k_r = ag ? K : cgm_shard_rows(K, r, P);
                int64_t xm = ag ? m_r : M;
                int64_t x_rows = nt ? k_r : xm, x_cols = nt ? xm : k_r;
                int64_t w_rows = tn ? n_r : k_r, w_cols = tn ? k_r : n_r;
                int64_t y_rows = op == CGM_OP_GEMM_REDUCE_SCATTER ? m_r : M;
                s.ldx = x_cols + 3;
                s.ldw = w_cols + 1;
                s.ldy = n_r + 2;
                cmp_problem pr;
                cgm_status st = cmp_map_problem(&s, &pr);
                if (!even) {
                    CHECK_STATUS(st, CGM_ERROR_NOT_SUPPORTED);
                    CHECK_CONTAINS(cgm_last_error(), "only with even shards");
                    CHECK_CONTAINS(cgm_last_error(), "p2p or nccl");
                    refused++;
                    continue;
                }
                CHECK_OK(st);
                CHECK_INT_EQ(pr.m, N);
                CHECK_INT_EQ(pr.n, M);
                CHECK_INT_EQ(pr.k, K);
                CHECK_INT_EQ(pr.trans_a, tn ? CMP_CUBLAS_OP_T : CMP_CUBLAS_OP_N);
                CHECK_INT_EQ(pr.trans_b, nt ? CMP_CUBLAS_OP_T : CMP_CUBLAS_OP_N);
                CHECK(pr.gather_rows == ar);
                expect_local(&pr.b, r, P, x_rows, x_cols, s.ldx, "X (B)");
                expect_local(&pr.a, r, P, w_rows, w_cols, s.ldw, "W (A)");
                if (!ar) expect_local(&pr.d, r, P, y_rows, n_r, s.ldy, "Y (D)");
                /* The fp32 D (RS with a 16-bit Y: this rank's rows; AR: its
                 * rows of the m x n gather buffer, at their offset). */
                cmp_output o;
                cmp_plan_output(&s, r, n_r, CGM_DTYPE_BF16, false, &o);
                CHECK_INT_EQ(o.y_rows, y_rows);
                CHECK_INT_EQ(o.y_cols, n_r);
                CHECK(o.gather == ar);
                CHECK(o.fp32_d == !ag);
                if (o.fp32_d) {
                    cmp_geom dg = pr.d;
                    dg.lld = o.d_lld;
                    expect_local(&dg, r, P, m_r, n_r, n_r, "fp32 D");
                    CHECK_INT_EQ(o.d_rows, m_r);
                    CHECK_INT_EQ(o.d_offset,
                                 ar ? cgm_shard_offset(M, r, P) * n_r : 0);
                    CHECK_INT_EQ((int64_t)o.d_bytes, y_rows * n_r * 4);
                }
                /* op(A) is m x k and op(B) is k x n in cuBLASMp's terms. */
                CHECK_INT_EQ(pr.trans_a ? pr.a.cols : pr.a.rows, pr.m);
                CHECK_INT_EQ(pr.trans_b ? pr.b.rows : pr.b.cols, pr.n);
                checked++;
            }
        }
    CHECK(checked > 1000);
    CHECK(refused > 1000);
}

static void mapping_rejects(const void *p) {
    (void)p;
    cmp_problem pr;
    cmp_shape s = {CGM_OP_BULK, CGM_LAYOUT_TN, 2, 4, 4, 4, 4, 4, 4};
    CHECK_STATUS(cmp_map_problem(&s, &pr), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "use p2p or nccl for bulk");
    /* GEMM+AR runs in every layout (as GEMM+RS + an all-gather). */
    s.op = CGM_OP_GEMM_ALL_REDUCE;
    s.layout = CGM_LAYOUT_NT;
    CHECK_OK(cmp_map_problem(&s, &pr));
    s.layout = CGM_LAYOUT_TN;
    s.k_total = 0;
    CHECK_STATUS(cmp_map_problem(&s, &pr), CGM_ERROR_INVALID_ARGUMENT);
}

/* Uneven shards: refused with what to do, for every op, on m before the
 * exchange (n / k unknown: 0) and on n / k after it. */
static void even_shards(const void *p) {
    (void)p;
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(cmp_check_even(ops[i], 131, 97, 71, 1)); /* P = 1: any */
        CHECK_OK(cmp_check_even(ops[i], 128, 0, 0, 2));
        CHECK_OK(cmp_check_even(ops[i], 132, 96, 72, 4));
        CHECK_STATUS(cmp_check_even(ops[i], 131, 0, 0, 2),
                     CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "m = 131");
        CHECK_CONTAINS(cgm_last_error(), "not divisible by P = 2");
        CHECK_CONTAINS(cgm_last_error(), "use even shards (m divisible by P)");
        CHECK_CONTAINS(cgm_last_error(), "p2p or nccl backend");
        CHECK_STATUS(cmp_check_even(ops[i], 1, 0, 0, 2), CGM_ERROR_NOT_SUPPORTED);
    }
    CHECK_STATUS(cmp_check_even(CGM_OP_ALL_GATHER_GEMM, 128, 97, 71, 2),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "n = 97");
    CHECK_CONTAINS(cgm_last_error(), "AllGather+Matmul");
    CHECK_OK(cmp_check_even(CGM_OP_ALL_GATHER_GEMM, 128, 96, 71, 2));
    CHECK_STATUS(cmp_check_even(CGM_OP_GEMM_REDUCE_SCATTER, 128, 97, 71, 2),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "k = 71");
    CHECK_STATUS(cmp_check_even(CGM_OP_GEMM_ALL_REDUCE, 128, 97, 71, 2),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "gemm_ar");
    CHECK_OK(cmp_check_even(CGM_OP_GEMM_ALL_REDUCE, 128, 97, 72, 2));
}

static void dtype_compute_algo(const void *p) {
    (void)p;
    int t = -1;
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_FP32, &t));
    CHECK_INT_EQ(t, 0);  /* CUDA_R_32F */
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_FP16, &t));
    CHECK_INT_EQ(t, 2);  /* CUDA_R_16F */
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_BF16, &t));
    CHECK_INT_EQ(t, 14); /* CUDA_R_16BF */
    CHECK_STATUS(cmp_map_dtype(CGM_DTYPE_FP8_E4M3, &t), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "fp8_e4m3");
    CHECK_INT_EQ(cmp_map_compute(CGM_DTYPE_FP32, false), 68);
    CHECK_INT_EQ(cmp_map_compute(CGM_DTYPE_FP32, true), 77);
    CHECK_INT_EQ(cmp_map_compute(CGM_DTYPE_BF16, true), 68);
    int a = -1;
    CHECK_OK(cmp_map_algo(CGM_ALGO_AUTO, NULL, &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
    /* Multicast algorithms and cuBLASMp's DEFAULT (which may pick one) are
     * never selectable. */
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "split_multicast", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "never uses cuBLASMp's multicast");
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "atomic_multicast", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "default", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_OK(cmp_map_algo(CGM_ALGO_AUTO, "Split_P2P", &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
    CHECK_OK(cmp_map_algo(CGM_ALGO_SPLIT_PIPELINED, "no_overlap", &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
    CHECK_OK(cmp_map_algo(CGM_ALGO_NO_OVERLAP, NULL, &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP);
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "fastest", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_CUBLASMP_ALGO=\"fastest\"");
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_RING, NULL, &a), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "ring");
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_BULK, NULL, &a), CGM_ERROR_NOT_SUPPORTED);
}

static void split_check(const void *p) {
    (void)p;
    int64_t total = 0;
    const int64_t good[] = {3, 3, 2};
    CHECK_OK(cmp_check_split(good, 3, "n", &total));
    CHECK_INT_EQ(total, 8);
    const int64_t tail_empty[] = {2, 2, 0}; /* m < P: last shard empty */
    CHECK_OK(cmp_check_split(tail_empty, 3, "n", &total));
    CHECK_INT_EQ(total, 4);
    const int64_t one[] = {5};
    CHECK_OK(cmp_check_split(one, 1, "k", &total));
    const int64_t bad[] = {2, 3, 3};
    CHECK_STATUS(cmp_check_split(bad, 3, "k (the contraction)", &total),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "expected rank 0 to have 3, found 2");
    CHECK_CONTAINS(cgm_last_error(), "k (the contraction)");
    const int64_t zeros[] = {0, 0};
    CHECK_OK(cmp_check_split(zeros, 2, "n", &total));
    CHECK_INT_EQ(total, 0);
}

/* Who finishes Y: cuBLASMp directly (a dense fp32 Y of RS, every AG), or
 * an fp32 D and commgemm's fp32 pass (RS with a 16-bit Y or a padded fp32
 * Y; every AR, after the all-gather); the bias always by commgemm. */
static void output_plan(const void *p) {
    (void)p;
    cmp_shape s = {CGM_OP_GEMM_REDUCE_SCATTER, CGM_LAYOUT_TN, 2, 130, 97, 72,
                   72, 72, 97};
    cmp_output o;
    const cgm_dtype outs[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP16, CGM_DTYPE_FP32};
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    /* ldy 97: dense; 105: padded (cuBLASMp 0.7's RS returns INTERNAL_ERROR
     * for an fp32 D with lld > n). */
    const int64_t ldys[] = {97, 105};
    for (int li = 0; li < 2; li++)
        for (int oi = 0; oi < 3; oi++)
            for (int di = 0; di < 3; di++)
                for (int bias = 0; bias < 2; bias++) {
                    s.op = ops[oi];
                    s.ldy = ldys[li];
                    cmp_plan_output(&s, 1, 97, outs[di], bias, &o);
                    bool ar = ops[oi] == CGM_OP_GEMM_ALL_REDUCE;
                    bool rs = ops[oi] == CGM_OP_GEMM_REDUCE_SCATTER;
                    bool want_fp32 = ar || (rs && (outs[di] != CGM_DTYPE_FP32 ||
                                                   ldys[li] > 97));
                    CHECK(o.fp32_d == want_fp32);
                    CHECK(o.gather == ar);
                    CHECK(o.bias_pass == (bias && !want_fp32));
                    CHECK_INT_EQ(o.y_rows, rs ? 65 : 130);
                    CHECK_INT_EQ(o.y_cols, 97);
                    CHECK_INT_EQ((int64_t)o.d_bytes, want_fp32 ? o.y_rows * 97 * 4 : 0);
                    CHECK_INT_EQ(o.d_rows, want_fp32 ? 65 : 0);
                    CHECK_INT_EQ(o.d_offset, ar ? 65 * 97 : 0);
                    if (want_fp32) CHECK_INT_EQ(o.d_lld, 97); /* dense */
                }
}

static void register_cases(void) {
    test_add("env_path_missing", env_path_missing, NULL);
    test_add("explicit_path_missing", explicit_path_missing, NULL);
    test_add("search_finds_nothing", search_finds_nothing, NULL);
    test_add("missing_symbol", missing_symbol, NULL);
    test_add("wrong_version", wrong_version, NULL);
    test_add("right_version", right_version, NULL);
    test_add("pip_locations", pip_locations, NULL);
    test_add("host_comm_refuses", host_comm_refuses, NULL);
    test_add("mapping_matches_api", mapping_matches_api, NULL);
    test_add("mapping_rejects", mapping_rejects, NULL);
    test_add("even_shards", even_shards, NULL);
    test_add("dtype_compute_algo", dtype_compute_algo, NULL);
    test_add("split_check", split_check, NULL);
    test_add("output_plan", output_plan, NULL);
}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_cases);
}
