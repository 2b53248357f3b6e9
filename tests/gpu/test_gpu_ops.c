/* GPU op tests of the p2p backend: every op x dtype x layout x shape
 * (m < P, uneven m), algorithms and split counts rotated, bias and
 * accumulate; a > 1 GiB gathered input; graph capture + replay; the bounded
 * wait (a rank that skips an op is named by the timeout); GEMM+RS and
 * GEMM+AR again with output-dtype partials (options.partial_dtype). References: a
 * plain double-precision GEMM on the GPU; for RS/AR every rank sums all
 * ranks' products, their inputs refilled from the seeds. With
 * COMMGEMM_TEST_RANKS above the GPU count the ranks share GPUs over a
 * LOCAL bootstrap (test_gpu_common.h). */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"
#include "test_gpu_common.h"

typedef struct dtype_case {
    cgm_dtype in, out;
    int tf32;
} dtype_case;

static const dtype_case dtypes[] = {
    {CGM_DTYPE_FP32, CGM_DTYPE_FP32, 0}, {CGM_DTYPE_FP32, CGM_DTYPE_FP32, 1},
    {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 0}, {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 0},
    {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 0}};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

typedef struct shape {
    int64_t m, k, n;
} shape;
/* m < P, uneven shards, odd (8-byte aligned) rows, a few pieces. */
static const shape shapes[] = {{1, 64, 96}, {7, 36, 48}, {1000, 136, 256},
                               {4096, 520, 128}};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const cgm_algo algos[] = {CGM_ALGO_AUTO, CGM_ALGO_SPLIT_PIPELINED,
                                 CGM_ALGO_RING, CGM_ALGO_NO_OVERLAP,
                                 CGM_ALGO_FUSED};
#define NALGOS ((int)(sizeof algos / sizeof algos[0]))

typedef struct op_case {
    cgm_op op;
    int single_rank;     /* 1: a group of one rank */
    int output_partials; /* 1: options.partial_dtype output (RS, AR) */
    /* A setting this case runs under (NULL: none), and its name suffix:
     * COMMGEMM_LT_SEARCH=1 (the heuristic's first cuBLASLt algorithm, no
     * search). */
    const char *env_var, *env_value, *suffix;
} op_case;

/* One GEMM op (AG, RS or AR), checked against the reference. */
typedef struct op_run {
    cgm_op op;
    dtype_case dt;
    cgm_layout layout;
    shape s;
    cgm_algo algo;
    int splits, bias, accumulate, gathered;
    int output_partials; /* the partials were rounded to the output dtype */
    uint64_t seed;
    int index; /* in the case's runs (COMMGEMM_TEST_RUNS selects) */
} op_run;

static void x_shape(cgm_layout layout, int64_t rows, int64_t k, int64_t *r,
                    int64_t *c) {
    *r = layout == CGM_LAYOUT_NT ? k : rows;
    *c = layout == CGM_LAYOUT_NT ? rows : k;
}

/* Fills X (a block of the global X of `m` split rows) for rows
 * [row0, row0 + rows). */
static void fill_x(const cgm_matrix *x, cgm_layout layout, uint64_t seed,
                   int64_t row0, int64_t m, int64_t k, cudaStream_t stream) {
    if (layout == CGM_LAYOUT_NT)
        gpu_fill(x, seed, 0, row0, m, stream);
    else
        gpu_fill(x, seed, row0, 0, k, stream);
}

/* The reference of GEMM+RS/AR: the sum over ranks q of X_q W_q, every
 * rank's inputs refilled here from run_gemm_op's seeds (rank q's k is
 * k + 8 (q % 2)), so that no collective (and no NCCL) is needed. */
static void reduced_ref(const op_run *o, int P, int64_t m, int64_t n,
                        double *ref_dev, cudaStream_t st) {
    for (int q = 0; q < P; q++) {
        int64_t k = o->s.k + 8 * (q % 2), xr, xc;
        x_shape(o->layout, m, k, &xr, &xc);
        cgm_matrix x = gpu_matrix(o->dt.in, xr, xc);
        fill_x(&x, o->layout, o->seed * 100 + (uint64_t)q + 1, 0, m, k, st);
        cgm_matrix w = o->layout == CGM_LAYOUT_TN ? gpu_matrix(o->dt.in, n, k)
                                                  : gpu_matrix(o->dt.in, k, n);
        gpu_fill(&w, o->seed * 100 + 50 + (uint64_t)q, 0, 0, w.cols, st);
        GPU_CHECK(tref_gemm((int)o->layout, (int)o->dt.in, x.data, w.data, m,
                            n, k, ref_dev, q > 0, st));
        GPU_CHECK(cudaStreamSynchronize(st));
        gpu_matrix_free(&x);
        gpu_matrix_free(&w);
    }
}

static void run_gemm_op(gpu_rank *g, const op_run *o) {
    int r = g->rank, P = g->nranks;
    int64_t m = o->s.m, n = o->s.n, k = o->s.k;
    bool ag = o->op == CGM_OP_ALL_GATHER_GEMM;
    if (ag) n += 16 * r; /* AG: each rank its own n */
    else k += 8 * (r % 2); /* RS/AR: each rank its own k slice */
    int64_t m_r = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    int64_t xr, xc;
    cudaStream_t st = g->stream;
    uint64_t xseed = o->seed * 100 + (ag ? 0 : (uint64_t)r + 1);

    x_shape(o->layout, ag ? m_r : m, k, &xr, &xc);
    cgm_matrix x = gpu_matrix(o->dt.in, xr, xc);
    fill_x(&x, o->layout, xseed, ag ? off : 0, m, k, st);
    cgm_matrix w = o->layout == CGM_LAYOUT_TN ? gpu_matrix(o->dt.in, n, k)
                                              : gpu_matrix(o->dt.in, k, n);
    gpu_fill(&w, o->seed * 100 + 50 + (uint64_t)r, 0, 0, w.cols, st);
    bool shard_out = o->op == CGM_OP_GEMM_REDUCE_SCATTER;
    int64_t y_rows = shard_out ? m_r : m, y_row0 = shard_out ? off : 0;
    cgm_matrix y = gpu_matrix(o->dt.out, y_rows, n);
    /* Each rank its own Y: accumulate adds into this rank's Y only. */
    if (o->accumulate) gpu_fill(&y, 77 + (uint64_t)r, y_row0, 0, n, st);
    cgm_matrix bias = gpu_matrix(o->dt.out, 1, n);
    gpu_fill(&bias, 88, 0, 0, n, st);
    cgm_matrix xg = {0};
    if (ag && o->gathered) {
        x_shape(o->layout, m, k, &xr, &xc);
        xg = gpu_matrix(o->dt.in, xr, xc);
    }

    /* Reference: the full X (AG), or every rank's X and W (RS, AR). */
    double *ref_dev = NULL;
    GPU_CHECK(cudaMalloc((void **)&ref_dev,
                         (size_t)(m * n > 0 ? m * n : 1) * sizeof(double)));
    cgm_matrix xfull = x;
    if (ag) {
        x_shape(o->layout, m, k, &xr, &xc);
        xfull = gpu_matrix(o->dt.in, xr, xc);
        fill_x(&xfull, o->layout, xseed, 0, m, k, st);
    }
    if (ag)
        GPU_CHECK(tref_gemm((int)o->layout, (int)o->dt.in, xfull.data, w.data,
                            m, n, k, ref_dev, 0, st));
    else
        reduced_ref(o, P, m, n, ref_dev, st);
    GPU_CHECK(cudaStreamSynchronize(st));

    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.layout = o->layout;
    opt.accumulate = o->accumulate;
    opt.algo = o->algo;
    opt.splits = o->splits;
    opt.allow_tf32 = o->dt.tf32;
    opt.partial_dtype = o->output_partials ? CGM_PARTIAL_DTYPE_OUTPUT : CGM_PARTIAL_DTYPE_DEFAULT;
    const cgm_matrix *b = o->bias ? &bias : NULL;
    if (ag)
        CHECK_OK(cgm_all_gather_gemm(g->comm, &x, &w, b, &y,
                                     xg.data ? &xg : NULL, &opt, st));
    else if (shard_out)
        CHECK_OK(cgm_gemm_reduce_scatter(g->comm, &x, &w, b, &y, &opt, st));
    else
        CHECK_OK(cgm_gemm_all_reduce(g->comm, &x, &w, b, &y, &opt, st));
    GPU_CHECK(cudaStreamSynchronize(st));
    cgm_status async = CGM_SUCCESS;
    CHECK_OK(cgm_comm_get_async_error(g->comm, &async));
    CHECK_INT_EQ(async, CGM_SUCCESS);

    double *ref = gpu_fetch_doubles(ref_dev, (size_t)(m * n), st);
    double *want = ref + y_row0 * n;
    for (int64_t i = 0; i < y_rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = want[i * n + j];
            if (o->bias) v += gpu_value(88, j);
            if (o->accumulate) v += gpu_value(77 + (uint64_t)r, (y_row0 + i) * n + j);
            want[i * n + j] = v;
        }
    char what[256];
    snprintf(what, sizeof what, "run %d: rank %d/%d %s %s->%s%s %s m=%lld n=%lld "
             "k=%lld algo=%s splits=%d bias=%d acc=%d", o->index, r, P,
             cgm_op_name(o->op), cgm_dtype_name(o->dt.in),
             cgm_dtype_name(o->dt.out), o->dt.tf32 ? "(tf32)" : "",
             cgm_layout_name(o->layout), (long long)m, (long long)n,
             (long long)k, cgm_algo_name(o->algo), o->splits, o->bias,
             o->accumulate);
    double tol = test_tolerance(o->dt.in, o->dt.out, k) * 4;
    if (o->output_partials && !ag && o->dt.out != CGM_DTYPE_FP32)
        /* Each of the P partials was rounded once to the output dtype:
         * an error up to u * |partial|, u the unit roundoff (2^-9 bf16,
         * 2^-11 fp16). These inputs (test_values.h) give |partial| of
         * sigma = 0.375 sqrt(k), so under 1.5 sqrt(k) (4 sigma); the bound
         * P * eps_out * sqrt(k) (eps_out = 2^-7 or 2^-10, test_tolerance's)
         * covers P such errors with room, and is still far below the
         * error of a missing or doubled partial (~sigma). Partials that
         * nearly cancel make it large relative to the result, hence an
         * absolute term. */
        tol += P * test_tolerance(o->dt.in, o->dt.out, 0) / 2 * sqrt((double)k);
    gpu_expect(&y, want, y_rows, n, tol, st, what);
    if (xg.data) {
        unsigned long long bad = 0;
        GPU_CHECK(tref_count_mismatch(xg.data, xfull.data,
                                      (size_t)(xg.rows * xg.cols) *
                                          cgm_dtype_size(xg.dtype),
                                      &bad, st));
        if (bad) TEST_FAIL("%s: x_gathered has %llu wrong bytes", what, bad);
    }
    free(ref);
    cudaFree(ref_dev);
    if (ag) gpu_matrix_free(&xfull);
    gpu_matrix_free(&x);
    gpu_matrix_free(&w);
    gpu_matrix_free(&y);
    gpu_matrix_free(&bias);
    gpu_matrix_free(&xg);
}

static void ops_body(gpu_rank *g, void *arg) {
    const op_case *c = arg;
    int it = 0;
    for (int d = 0; d < NDTYPES; d++)
        for (int l = 0; l < CGM_LAYOUT_COUNT_; l++)
            for (int s = 0; s < NSHAPES; s++, it++) {
                /* COMMGEMM_TEST_RUNS: a subset of the 60 runs, e.g. the
                 * 16-bit TN ones (the fused algorithm's), 24-27,36-39,48-51,
                 * under compute-sanitizer */
                if (!test_selected("COMMGEMM_TEST_RUNS", it)) continue;
                op_run o;
                memset(&o, 0, sizeof o);
                o.index = it;
                o.op = c->op;
                o.dt = dtypes[d];
                o.layout = (cgm_layout)l;
                o.s = shapes[s];
                /* Not it % 5: the shape index is it % 4. */
                o.algo = algos[(s + d + l) % NALGOS];
                o.splits = (int[]){0, 2, 3, 1}[(it / 4) % 4];
                o.bias = it % 2;
                o.accumulate = (it % 3) == 0;
                o.gathered = (it % 2) == 0;
                o.seed = (uint64_t)it + 1;
                o.output_partials = c->output_partials;
                run_gemm_op(g, &o);
            }
}

static int ranks_of(int single) {
    int ranks = gpu_ranks_or_skip();
    return single ? 1 : ranks;
}

/* Runs body on the case's ranks under its setting: set in this process
 * before the ranks are forked, unset after. */
static void run_with_settings(const op_case *c, const cgm_config *cfg,
                              gpu_case_fn body, int timeout_s) {
    if (c->env_var) setenv(c->env_var, c->env_value, 1);
    gpu_run(ranks_of(c->single_rank), cfg, body, (void *)c, timeout_s);
    if (c->env_var) unsetenv(c->env_var);
}

static void test_ops(const void *param) {
    cgm_config cfg = gpu_config();
    run_with_settings(param, &cfg, ops_body, 240);
}

/* ------------------------------------------------------------------ bulk */

static void bulk_body(gpu_rank *g, void *arg) {
    (void)arg;
    int r = g->rank, P = g->nranks;
    cudaStream_t st = g->stream;
    static const int64_t coll_ms[] = {1, 7, 1000, 3000};
    int it = 0;
    for (int d = 0; d < NDTYPES; d++)
        for (int cm = 0; cm < 4; cm++)
            for (int coll = 0; coll < 2; coll++, it++) {
                dtype_case dt = dtypes[d];
                int64_t m = coll_ms[cm], cols = 200 + 8 * cm;
                int64_t m_r = cgm_shard_rows(m, r, P);
                int64_t off = cgm_shard_offset(m, r, P);
                bool with_gemm = it % 5 != 4;
                bool with_coll = !with_gemm || it % 7 != 6;
                /* The GEMM: local, its own m (differs per rank). */
                int64_t gm = 100 + 7 * r, gn = 64, gk = 72;
                cgm_matrix a = gpu_matrix(dt.in, gm, gk);
                cgm_matrix b = gpu_matrix(dt.in, gn, gk);
                cgm_matrix c = gpu_matrix(dt.out, gm, gn);
                gpu_fill(&a, 11 + it, 0, 0, gk, st);
                gpu_fill(&b, 12 + it, 0, 0, gk, st);
                bool ag = coll == 0;
                cgm_matrix send = gpu_matrix(dt.in, ag ? m_r : m, cols);
                cgm_matrix recv = gpu_matrix(dt.in, ag ? m : m_r, cols);
                gpu_fill(&send, ag ? 500 : 600 + (uint64_t)r, ag ? off : 0, 0,
                         cols, st);
                double *ref_dev = NULL;
                GPU_CHECK(cudaMalloc((void **)&ref_dev,
                                     (size_t)(gm * gn) * sizeof(double)));
                GPU_CHECK(tref_gemm(CGM_LAYOUT_TN, (int)dt.in, a.data, b.data,
                                    gm, gn, gk, ref_dev, 0, st));
                cgm_op_options opt = CGM_OP_OPTIONS_INIT;
                opt.allow_tf32 = dt.tf32;
                opt.algo = it % 3 == 2 ? CGM_ALGO_NO_OVERLAP : CGM_ALGO_AUTO;
                CHECK_OK(cgm_bulk_overlap(
                    g->comm, with_gemm ? &a : NULL, with_gemm ? &b : NULL,
                    NULL, with_gemm ? &c : NULL,
                    ag ? CGM_COLLECTIVE_ALL_GATHER
                       : CGM_COLLECTIVE_REDUCE_SCATTER,
                    with_coll ? &send : NULL, with_coll ? &recv : NULL, &opt,
                    st));
                GPU_CHECK(cudaStreamSynchronize(st));
                char what[160];
                snprintf(what, sizeof what, "rank %d/%d bulk %s %s m=%lld "
                         "gemm=%d coll=%d", r, P, ag ? "AG" : "RS",
                         cgm_dtype_name(dt.in), (long long)m, with_gemm,
                         with_coll);
                if (with_gemm) {
                    double *ref = gpu_fetch_doubles(ref_dev,
                                                    (size_t)(gm * gn), st);
                    gpu_expect(&c, ref, gm, gn,
                               4 * test_tolerance(dt.in, dt.out, gk), st,
                               what);
                    free(ref);
                }
                if (with_coll) {
                    int64_t rows = recv.rows;
                    double *want = malloc((size_t)(rows * cols + 1) *
                                          sizeof *want);
                    for (int64_t i = 0; i < rows; i++)
                        for (int64_t j = 0; j < cols; j++) {
                            double v = 0;
                            if (ag)
                                v = gpu_value(500, i * cols + j);
                            else
                                for (int q = 0; q < P; q++)
                                    v += gpu_value(600 + (uint64_t)q,
                                                   (off + i) * cols + j);
                            want[i * cols + j] = v;
                        }
                    gpu_expect(&recv, want, rows, cols,
                               test_tolerance(dt.in, dt.in, P), st, what);
                    free(want);
                }
                cudaFree(ref_dev);
                gpu_matrix_free(&a);
                gpu_matrix_free(&b);
                gpu_matrix_free(&c);
                gpu_matrix_free(&send);
                gpu_matrix_free(&recv);
            }
}

static void test_bulk(const void *param) {
    const op_case *c = param;
    cgm_config cfg = gpu_config();
    gpu_run(ranks_of(c->single_rank), &cfg, bulk_body, NULL, 240);
}

/* The fused algorithm at sizes like the bench's: bf16 TN (what the kernel
 * takes), many tiles per CTA of its persistent grid, pushes of tens of
 * MiB (whose READY signals go by copy); one shape with n off the
 * 128-column tile. GEMM+AR has no fused form: its case runs split at these
 * sizes. */
static const shape large_shapes[] = {{8192, 4096, 4096}, {12288, 2048, 2600}};

static void large_body(gpu_rank *g, void *arg) {
    const op_case *c = arg;
    for (int s = 0; s < (int)(sizeof large_shapes / sizeof large_shapes[0]);
         s++) {
        if (!test_selected("COMMGEMM_TEST_RUNS", s)) continue;
        op_run o;
        memset(&o, 0, sizeof o);
        o.index = s;
        o.op = c->op;
        o.dt = dtypes[2]; /* bf16 -> bf16 */
        o.layout = CGM_LAYOUT_TN;
        o.s = large_shapes[s];
        o.algo = CGM_ALGO_FUSED;
        o.bias = s == 0;
        o.seed = 900 + (uint64_t)s;
        o.output_partials = c->output_partials;
        run_gemm_op(g, &o);
    }
}

static void test_fused_large(const void *param) {
    cgm_config cfg = gpu_config();
    cfg.max_m = 12288;
    cfg.max_n = 4096 + 16 * 64; /* AG: rank r's n is n + 16 r, r < 64 */
    cfg.max_k = 4096 + 8;       /* RS/AR: odd ranks' k is k + 8 */
    run_with_settings(param, &cfg, large_body, 300);
}

#define LT_FIRST "COMMGEMM_LT_SEARCH", "1", "_lt_heuristic"
static const op_case cases[] = {
    {CGM_OP_ALL_GATHER_GEMM, 0, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_REDUCE_SCATTER, 0, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_ALL_REDUCE, 0, 0, NULL, NULL, ""},
    {CGM_OP_BULK, 0, 0, NULL, NULL, ""},
    {CGM_OP_ALL_GATHER_GEMM, 1, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_REDUCE_SCATTER, 1, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_ALL_REDUCE, 1, 0, NULL, NULL, ""},
    {CGM_OP_BULK, 1, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_REDUCE_SCATTER, 0, 1, NULL, NULL, ""},
    {CGM_OP_GEMM_ALL_REDUCE, 0, 1, NULL, NULL, ""},
    {CGM_OP_ALL_GATHER_GEMM, 0, 0, LT_FIRST},
    {CGM_OP_GEMM_REDUCE_SCATTER, 0, 0, LT_FIRST}};

static const op_case large_cases[] = {
    {CGM_OP_ALL_GATHER_GEMM, 0, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_REDUCE_SCATTER, 0, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_ALL_REDUCE, 0, 0, NULL, NULL, ""},
    {CGM_OP_GEMM_REDUCE_SCATTER, 0, 1, NULL, NULL, ""}};

static void register_cases(void) {
    char name[128];
    test_set_timeout(300);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(name, sizeof name, "%s_%s%s%s", cgm_op_name(cases[i].op),
                 cases[i].single_rank ? "one_rank" : "all_gpus",
                 cases[i].output_partials ? "_output_partials" : "",
                 cases[i].suffix);
        test_add(name, cases[i].op == CGM_OP_BULK ? test_bulk : test_ops,
                 &cases[i]);
    }
    for (size_t i = 0; i < sizeof large_cases / sizeof large_cases[0]; i++) {
        snprintf(name, sizeof name, "%s_fused_large%s%s",
                 cgm_op_name(large_cases[i].op),
                 large_cases[i].output_partials ? "_output_partials" : "",
                 large_cases[i].suffix);
        test_add(name, test_fused_large, &large_cases[i]);
    }
    register_more_cases();
}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_cases);
}
