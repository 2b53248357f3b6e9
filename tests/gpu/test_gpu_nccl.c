/* GPU tests of the nccl backend, part 1: rank scaffolding, one op call
 * checked against a host reference in double, the op x dtype x layout x
 * shape sweeps and the algorithms. Part 2 (test_gpu_nccl_cases.c): graph
 * capture, mixed backends, timeout, limits, probe, and the case list.
 * Ranks are forked before any CUDA call; P = the GPU count, and P = 1.
 * Inputs are multiples of 1/8, so fp32 sums are exact and the tolerance is
 * the output rounding (test_tolerance). */
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "core/core.h"
#include "test_gpu_nccl.h"

/* GPU count from a child process: the case's process stays CUDA-free. */
int nt_gpu_count(void) {
    int fds[2];
    if (pipe(fds) != 0) TEST_FAIL("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        char msg[200];
        snprintf(msg, sizeof msg, "%d %s", e == cudaSuccess ? count : 0,
                 cudaGetErrorString(e));
        if (write(fds[1], msg, strlen(msg) + 1) < 0) _exit(2);
        _exit(0);
    }
    close(fds[1]);
    char buf[200] = "";
    if (read(fds[0], buf, sizeof buf - 1) <= 0) TEST_FAIL("probe child");
    close(fds[0]);
    waitpid(pid, NULL, 0);
    int count = atoi(buf);
    if (count <= 0)
        TEST_SKIP("no CUDA device: cudaGetDeviceCount says %s",
                  strchr(buf, ' ') ? strchr(buf, ' ') + 1 : buf);
    return count;
}

cgm_config nt_config(void) {
    cgm_config c = CGM_CONFIG_INIT;
    c.backend = CGM_BACKEND_NCCL;
    c.max_m = 4096;
    c.max_n = 512;
    c.max_k = 512;
    c.timeout_ms = test_scaled_ms(20000);
    c.gemm_reduction = CGM_GEMM_REDUCTION_FP32; /* exact references, as gpu_config */
    return c;
}

typedef struct run_args {
    const cgm_config *config;
    nrank_fn fn;
    const void *arg;
} run_args;

static int rank_main(int rank, int nranks, const char *rendezvous, void *p) {
    run_args *ra = p;
    nrank g = {rank, nranks, NULL, NULL, NULL};
    setenv("NCCL_NVLS_ENABLE", "0", 1); /* never NVLink multicast */
    int ndev = 0;
    GCHECK(cudaGetDeviceCount(&ndev));
    GCHECK(cudaSetDevice(rank % ndev));
    char path[256], tmp[300];
    snprintf(path, sizeof path, "/tmp/%s.id", rendezvous);
    ncclUniqueId id;
    if (rank == 0) {
        NCHECK(ncclGetUniqueId(&id));
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof id, 1, f) != 1) TEST_FAIL("write %s", tmp);
        fclose(f);
        if (rename(tmp, path) != 0) TEST_FAIL("rename %s", path);
    } else {
        int64_t deadline = cgm_now_ns() + 60000000000ll;
        for (;;) {
            FILE *f = fopen(path, "rb");
            size_t got = 0;
            if (f) {
                got = fread(&id, sizeof id, 1, f);
                fclose(f);
            }
            if (got == 1) break;
            if (cgm_now_ns() > deadline) TEST_FAIL("no NCCL id in %s", path);
            usleep(5000);
        }
    }
    NCHECK(ncclCommInitRank(&g.nccl, nranks, id, rank));
    if (rank == 0) unlink(path);
    GCHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
    cgm_status st = cgm_comm_init_nccl(g.nccl, ra->config, &g.comm);
    if (st == CGM_ERROR_UNAVAILABLE && strstr(cgm_last_error(), "p2p"))
        TEST_SKIP("the p2p backend is not available here: %s",
                  cgm_last_error());
    CHECK_OK(st);
    ra->fn(&g, ra->arg);
    GCHECK(cudaStreamSynchronize(g.stream));
    /* Bounded even on a broken comm; its status is the case's business. */
    (void)cgm_comm_destroy(g.comm);
    ncclCommDestroy(g.nccl);
    cudaStreamDestroy(g.stream);
    return 0;
}

/* Runs fn on P ranks; a rank that skips makes the case skip. */
void nt_run(int P, const cgm_config *config, nrank_fn fn, const void *arg,
                int timeout_s) {
    run_args ra = {config, fn, arg};
    int codes[64] = {0};
    if (test_run_ranks(P, rank_main, &ra, timeout_s, codes) != 0) {
        for (int r = 0; r < P; r++)
            if (codes[r] == TEST_SKIP_CODE)
                TEST_SKIP("rank %d skipped (reason above)", r);
        TEST_FAIL("a rank failed (see above)");
    }
}

/* ---- data: host matrices uploaded block-wise ---- */

/* Device copy of rows [r0, r0+rows) x cols [c0, c0+cols) of host h, ld
 * cols + pad. */
cgm_matrix nt_upload(const cgm_matrix *h, int64_t r0, int64_t rows,
                         int64_t c0, int64_t cols, int64_t pad) {
    size_t es = cgm_dtype_size(h->dtype);
    cgm_matrix d = cgm_matrix_make(NULL, h->dtype, rows, cols);
    d.ld = cols + pad;
    size_t bytes = (size_t)(rows * d.ld) * es;
    GCHECK(cudaMalloc(&d.data, bytes ? bytes : 16));
    GCHECK(cudaMemset(d.data, 0xff, bytes ? bytes : 16));
    int64_t hld = h->ld ? h->ld : h->cols;
    if (rows > 0 && cols > 0)
        GCHECK(cudaMemcpy2D(d.data, (size_t)d.ld * es,
                            (char *)h->data + (size_t)(r0 * hld + c0) * es,
                            (size_t)hld * es, (size_t)cols * es, (size_t)rows,
                            cudaMemcpyHostToDevice));
    return d;
}

cgm_matrix nt_fetch(const cgm_matrix *d) {
    cgm_matrix h = test_alloc(d->dtype, d->rows, d->cols, 0);
    size_t es = cgm_dtype_size(d->dtype);
    if (d->rows && d->cols)
        GCHECK(cudaMemcpy2D(h.data, (size_t)d->cols * es, d->data,
                            (size_t)d->ld * es, (size_t)d->cols * es,
                            (size_t)d->rows, cudaMemcpyDeviceToHost));
    return h;
}

cgm_matrix nt_host(cgm_dtype dt, int64_t rows, int64_t cols, uint64_t seed) {
    cgm_matrix h = test_alloc(dt, rows, cols, 0);
    test_fill(&h, seed);
    return h;
}

void nt_expect(const cgm_matrix *d, const double *ref, double tol,
                   const char *what) {
    cgm_matrix h = nt_fetch(d);
    int64_t wrong = test_compare(&h, ref, d->rows, d->cols, tol, what);
    test_free(&h);
    if (wrong) TEST_FAIL("%s: %lld elements outside tolerance %g", what,
                         (long long)wrong, tol);
}

/* ---- one op call checked against the reference ---- */

static void describe(const op_case *c, char *buf, size_t len) {
    snprintf(buf, len, "%s%s %s->%s %s m=%lld n=%lld k=%lld bias=%d acc=%d "
             "pad=%lld algo=%s splits=%d", cgm_op_name(c->op),
             c->op == CGM_OP_BULK ? (c->coll ? "(rs)" : "(ag)") : "",
             cgm_dtype_name(c->in), cgm_dtype_name(c->out),
             cgm_layout_name(c->layout), (long long)c->m, (long long)c->n,
             (long long)c->k, c->bias, c->accumulate, (long long)c->pad,
             cgm_algo_name(c->algo), c->splits);
}

/* X [m,k] (TN, NN) or [k,m] (NT): rows/cols of the split dimension. */
static void x_dims(cgm_layout l, int64_t m, int64_t k, int64_t *r, int64_t *c) {
    *r = l == CGM_LAYOUT_NT ? k : m;
    *c = l == CGM_LAYOUT_NT ? m : k;
}

static void w_dims(cgm_layout l, int64_t n, int64_t k, int64_t *r, int64_t *c) {
    *r = l == CGM_LAYOUT_TN ? n : k;
    *c = l == CGM_LAYOUT_TN ? k : n;
}

/* Adds bias and the accumulated Y0 rows [r0, r0 + rows) to ref. */
static void ref_epilogue(const op_case *c, double *ref, int64_t rows,
                         int64_t r0, const cgm_matrix *bias,
                         const cgm_matrix *y0) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < c->n; j++) {
            if (c->bias) ref[i * c->n + j] += test_get(bias, 0, j);
            if (c->accumulate) ref[i * c->n + j] += test_get(y0, r0 + i, j);
        }
}

void nt_run_case(nrank *g, const op_case *c) {
    const int P = g->nranks, r = g->rank;
    char what[256];
    describe(c, what, sizeof what);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.layout = c->layout;
    o.accumulate = c->accumulate;
    o.algo = c->algo;
    o.splits = c->splits;
    o.backend = c->backend;
    const int64_t m = c->m, n = c->n, k = c->k;
    const int64_t mr = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    cgm_matrix hb = nt_host(c->out, 1, n, 7), hy0 = nt_host(c->out, m, n, 9);
    cgm_matrix db = nt_upload(&hb, 0, 1, 0, n, 0);
    double *ref = calloc((size_t)(m * n + 1), sizeof *ref);
    double *tmp = calloc((size_t)(m * n + 1), sizeof *tmp);
    int64_t xr, xc, wr, wc;
    w_dims(c->layout, n, k, &wr, &wc);
    if (c->op == CGM_OP_ALL_GATHER_GEMM) {
        x_dims(c->layout, m, k, &xr, &xc);
        cgm_matrix hx = nt_host(c->in, xr, xc, 1), hw = nt_host(c->in, wr, wc, 100 + r);
        cgm_matrix dx = c->layout == CGM_LAYOUT_NT ? nt_upload(&hx, 0, k, off, mr, 0)
                                                   : nt_upload(&hx, off, mr, 0, k, 0);
        cgm_matrix dw = nt_upload(&hw, 0, wr, 0, wc, 0);
        cgm_matrix dy = nt_upload(&hy0, 0, m, 0, n, c->pad);
        cgm_matrix dg = nt_upload(&hx, 0, 0, 0, 0, 0);
        if (c->gathered) {
            cudaFree(dg.data);
            dg = nt_upload(&hx, 0, xr, 0, xc, c->pad);
            GCHECK(cudaMemset(dg.data, 0xff, (size_t)(xr * dg.ld) * cgm_dtype_size(c->in)));
            /* Legacy stream: done before the op's (non-blocking) stream writes. */
            GCHECK(cudaStreamSynchronize(cudaStreamLegacy));
        }
        CHECK_OK(cgm_all_gather_gemm(g->comm, &dx, &dw, c->bias ? &db : NULL, &dy,
                                     c->gathered ? &dg : NULL, &o, g->stream));
        GCHECK(cudaStreamSynchronize(g->stream));
        test_ref_gemm(c->layout, &hx, &hw, m, n, k, ref);
        ref_epilogue(c, ref, m, 0, &hb, &hy0);
        nt_expect(&dy, ref, test_tolerance(c->in, c->out, k), what);
        if (c->gathered) {
            double *gx = calloc((size_t)(xr * xc + 1), sizeof *gx);
            for (int64_t i = 0; i < xr; i++)
                for (int64_t j = 0; j < xc; j++) gx[i * xc + j] = test_get(&hx, i, j);
            nt_expect(&dg, gx, 0, "x_gathered");
            free(gx);
        }
        cudaFree(dx.data); cudaFree(dw.data); cudaFree(dy.data); cudaFree(dg.data);
        test_free(&hx); test_free(&hw);
    } else if (c->op != CGM_OP_BULK) {
        /* Every rank's X and W, the sum computed on the host. */
        bool rs = c->op == CGM_OP_GEMM_REDUCE_SCATTER;
        cgm_matrix dx = {0}, dw = {0};
        for (int q = 0; q < P; q++) {
            x_dims(c->layout, m, k, &xr, &xc);
            cgm_matrix hx = nt_host(c->in, xr, xc, 200 + q), hw = nt_host(c->in, wr, wc, 300 + q);
            test_ref_gemm(c->layout, &hx, &hw, m, n, k, tmp);
            for (int64_t i = 0; i < m * n; i++) ref[i] += tmp[i];
            if (q == r) {
                dx = nt_upload(&hx, 0, xr, 0, xc, 0);
                dw = nt_upload(&hw, 0, wr, 0, wc, 0);
            }
            test_free(&hx); test_free(&hw);
        }
        int64_t rows = rs ? mr : m, r0 = rs ? off : 0;
        cgm_matrix dy = nt_upload(&hy0, r0, rows, 0, n, c->pad);
        ref_epilogue(c, ref + r0 * n, rows, r0, &hb, &hy0);
        if (rs)
            CHECK_OK(cgm_gemm_reduce_scatter(g->comm, &dx, &dw, c->bias ? &db : NULL,
                                             &dy, &o, g->stream));
        else
            CHECK_OK(cgm_gemm_all_reduce(g->comm, &dx, &dw, c->bias ? &db : NULL, &dy,
                                         &o, g->stream));
        GCHECK(cudaStreamSynchronize(g->stream));
        nt_expect(&dy, ref + r0 * n, test_tolerance(c->in, c->out, k * P), what);
        cudaFree(dx.data); cudaFree(dw.data); cudaFree(dy.data);
    } else {
        /* Bulk: a local GEMM (A as X, B as W) beside the collective on an
         * [m, n] buffer of the input dtype. */
        x_dims(c->layout, m, k, &xr, &xc);
        cgm_matrix ha = nt_host(c->in, xr, xc, 40 + r), hbm = nt_host(c->in, wr, wc, 50 + r);
        cgm_matrix da = nt_upload(&ha, 0, xr, 0, xc, 0), dbm = nt_upload(&hbm, 0, wr, 0, wc, 0);
        cgm_matrix dc = nt_upload(&hy0, 0, m, 0, n, c->pad);
        bool ag = c->coll == CGM_COLLECTIVE_ALL_GATHER;
        cgm_matrix hs = nt_host(c->in, m, n, ag ? 60 : 70 + r);
        cgm_matrix ds = ag ? nt_upload(&hs, off, mr, 0, n, c->pad) : nt_upload(&hs, 0, m, 0, n, c->pad);
        cgm_matrix hr0 = nt_host(c->in, m, n, 1);
        cgm_matrix dr = ag ? nt_upload(&hr0, 0, m, 0, n, c->pad) : nt_upload(&hr0, 0, mr, 0, n, c->pad);
        CHECK_OK(cgm_bulk_overlap(g->comm, &da, &dbm, c->bias ? &db : NULL, &dc, c->coll,
                                  &ds, &dr, &o, g->stream));
        GCHECK(cudaStreamSynchronize(g->stream));
        test_ref_gemm(c->layout, &ha, &hbm, m, n, k, ref);
        ref_epilogue(c, ref, m, 0, &hb, &hy0);
        nt_expect(&dc, ref, test_tolerance(c->in, c->out, k), what);
        memset(ref, 0, sizeof *ref * (size_t)(m * n));
        for (int q = 0; q < (ag ? 1 : P); q++) {
            cgm_matrix hq = nt_host(c->in, m, n, ag ? 60 : 70 + q);
            for (int64_t i = 0; i < m * n; i++) ref[i] += test_get(&hq, i / n, i % n);
            test_free(&hq);
        }
        nt_expect(&dr, ag ? ref : ref + off * n, test_tolerance(c->in, c->in, P), "bulk recv");
        cudaFree(da.data); cudaFree(dbm.data); cudaFree(dc.data); cudaFree(ds.data);
        cudaFree(dr.data);
        test_free(&ha); test_free(&hbm); test_free(&hs); test_free(&hr0);
    }
    cudaFree(db.data);
    test_free(&hb); test_free(&hy0);
    free(ref); free(tmp);
}

/* ---- sweeps ---- */

static void sweep_op(nrank *g, cgm_op op, cgm_collective coll, int small) {
    const int64_t shapes[][4] = {/* m, n, k, splits */
                                 {1, 32, 48, 0},
                                 {37, 64, 40, 0},
                                 {203, 72, 136, 3},
                                 {(int64_t)g->nranks * 3 + 1, 16, 8, 2}};
    const cgm_dtype dts[] = {CGM_DTYPE_FP32, CGM_DTYPE_BF16, CGM_DTYPE_FP16};
    int nshapes = small ? 2 : 4;
    for (int d = 0; d < 3; d++)
        for (int l = 0; l < CGM_LAYOUT_COUNT_; l++)
            for (int s = 0; s < nshapes; s++)
                for (int v = 0; v < 2; v++) {
                    op_case c;
                    memset(&c, 0, sizeof c);
                    c.op = op;
                    c.coll = coll;
                    c.in = dts[d];
                    c.out = v && dts[d] == CGM_DTYPE_BF16 ? CGM_DTYPE_FP32 : dts[d];
                    c.layout = (cgm_layout)l;
                    c.m = shapes[s][0];
                    c.n = shapes[s][1];
                    c.k = shapes[s][2];
                    c.splits = (int)shapes[s][3];
                    c.bias = c.accumulate = c.gathered = v;
                    c.pad = v || s == 1 ? 8 : 0; /* AR: staged rows */
                    nt_run_case(g, &c);
                }
}

void nt_sweep_fn(nrank *g, const void *arg) {
    const sweep *s = arg;
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        if (s->op != CGM_OP_COUNT_ && s->op != (cgm_op)op) continue;
        if (op == CGM_OP_BULK) {
            sweep_op(g, CGM_OP_BULK, CGM_COLLECTIVE_ALL_GATHER, s->small);
            sweep_op(g, CGM_OP_BULK, CGM_COLLECTIVE_REDUCE_SCATTER, s->small);
        } else {
            sweep_op(g, (cgm_op)op, CGM_COLLECTIVE_ALL_GATHER, s->small);
        }
    }
    /* Bulk halves alone: GEMM only, collective only. */
    if (s->op == CGM_OP_BULK || s->op == CGM_OP_COUNT_) {
        cgm_matrix hs = nt_host(CGM_DTYPE_BF16, 9, 24, 3);
        int64_t mr = cgm_shard_rows(9, g->rank, g->nranks);
        cgm_matrix ds = nt_upload(&hs, cgm_shard_offset(9, g->rank, g->nranks), mr, 0, 24, 0);
        cgm_matrix dr = nt_upload(&hs, 0, 9, 0, 24, 0);
        GCHECK(cudaMemset(dr.data, 0, 9 * 24 * 2));
        GCHECK(cudaStreamSynchronize(cudaStreamLegacy));
        CHECK_OK(cgm_bulk_overlap(g->comm, NULL, NULL, NULL, NULL, CGM_COLLECTIVE_ALL_GATHER,
                                  &ds, &dr, NULL, g->stream));
        GCHECK(cudaStreamSynchronize(g->stream));
        double ref[9 * 24];
        for (int i = 0; i < 9 * 24; i++) ref[i] = test_get(&hs, i / 24, i % 24);
        nt_expect(&dr, ref, 0, "bulk all-gather only");
        cudaFree(ds.data); cudaFree(dr.data);
        test_free(&hs);
    }
}

void nt_algos_fn(nrank *g, const void *arg) {
    (void)arg;
    const cgm_algo algos[] = {CGM_ALGO_RING, CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_NO_OVERLAP};
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    for (int a = 0; a < 3; a++)
        for (int o = 0; o < 3; o++)
            for (int l = 0; l < CGM_LAYOUT_COUNT_; l++)
                for (int sp = 1; sp <= 5; sp += 4) {
                    op_case c;
                    memset(&c, 0, sizeof c);
                    c.op = ops[o];
                    c.in = c.out = CGM_DTYPE_BF16;
                    c.layout = (cgm_layout)l;
                    c.m = 203;
                    c.n = 48;
                    c.k = 72;
                    c.algo = algos[a];
                    c.splits = sp;
                    c.bias = c.gathered = sp > 1;
                    nt_run_case(g, &c);
                }
}

