/* GPU tests of the p2p backend's fp8 calls through its chunked algorithms
 * and the fused one (fp8_cases.c has the calls and their reference), and
 * its refusals: algorithm fused with what its kernel does not take (an fp8
 * Y, an epilogue), GEMM+AR's amax. P = the GPU count, or
 * COMMGEMM_TEST_RANKS (more ranks than GPUs share them over a LOCAL
 * bootstrap), and P = 1. */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "fp8_cases.h"
#include "test_gpu_common.h"

static void sweep_fn(gpu_rank *g, void *arg) {
    fp8_rank r = {g->rank, g->nranks, g->comm, g->stream};
    /* GEMM+AR's amax is refused here (fp8_refusals). */
    fp8_sweep(&r, *(const cgm_op *)arg, false);
}

/* The fused cases check that the fused executor ran each call: where
 * p2p_fused_applies says no, a fused call runs split, with the same
 * result. COMMGEMM_TIMELINE, set before the ranks start, makes each eager
 * fused call write <prefix>.<op>.fused.r<rank>.json (p2p_timeline.c). */
static char trace_dir[256];

static void traces_on(void) {
    char prefix[320];
    snprintf(trace_dir, sizeof trace_dir, "/tmp/cgm-fp8-fused-XXXXXX");
    if (!mkdtemp(trace_dir)) TEST_FAIL("mkdtemp(%s): %s", trace_dir, strerror(errno));
    snprintf(prefix, sizeof prefix, "%s/t", trace_dir);
    setenv("COMMGEMM_TIMELINE", prefix, 1); /* read by the forked ranks */
}

static void traces_off(void) {
    char pattern[320];
    glob_t gl;
    snprintf(pattern, sizeof pattern, "%s/*", trace_dir);
    if (glob(pattern, 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc; i++) unlink(gl.gl_pathv[i]);
        globfree(&gl);
    }
    rmdir(trace_dir);
}

/* `c` on this rank, checked against the reference, run by the fused executor. */
static void run_fused(const fp8_rank *g, const fp8_case *c) {
    char pattern[320];
    glob_t gl;
    fp8_run_case(g, c, false);
    snprintf(pattern, sizeof pattern, "%s/t.*.fused.r%d.json", trace_dir, g->rank);
    int found = glob(pattern, 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;
    if (found != 1)
        TEST_FAIL("P=%d %s %s %s x %s -> %s m=%lld n=%lld k=%lld fast_accum=%d: %d traces %s, expected the "
                  "fused call's one (none: the call ran split, p2p_fused_applies said no; COMMGEMM_DEBUG=INFO "
                  "says why)", g->nranks, cgm_op_name(c->op), c->block ? "block" : "tensor",
                  cgm_dtype_name(c->xd), cgm_dtype_name(c->wd), cgm_dtype_name(c->yd), (long long)c->m,
                  (long long)c->n, (long long)c->k, c->fast_accum, found, pattern);
    unlink(gl.gl_pathv[0]);
    globfree(&gl);
}

/* A fused sweep: the op, the recipe, options.fp8_fast_accum. */
typedef struct fused_mode {
    cgm_op op;
    bool block, fast_accum;
} fused_mode;

/* (X, W, Y, bias): bf16 Y with a bf16 bias, fp32 Y without (the fused
 * kernel's bias has Y's dtype). */
static const struct {
    cgm_dtype xd, wd, yd;
    bool bias;
} fused_types[] = {
    {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_BF16, true},
    {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E5M2, CGM_DTYPE_FP32, false},
    {CGM_DTYPE_FP8_E5M2, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_BF16, false},
};

/* Shards that split the kernel's 128-row tiles (300 rows; 301 also uneven,
 * with n and k not multiples of 128: W's last 128-row block and every
 * row's last k block partial), k not a multiple of 128, m < 128, m < P. */
static const int64_t fused_shapes[][3] = {
    {300, 256, 512}, {301, 176, 336}, {64, 64, 256}, {37, 48, 208}, {1, 16, 128}};

static fp8_case fused_case(const fused_mode *md, size_t t, size_t s) {
    fp8_case c = {md->op, fused_types[t].xd, fused_types[t].wd, fused_types[t].yd, md->block,
                  fused_types[t].bias, fused_shapes[s][0], fused_shapes[s][1], fused_shapes[s][2],
                  CGM_ALGO_FUSED, md->fast_accum};
    return c;
}

/* AG+GEMM or GEMM+RS on algorithm fused, every dtype triple x shape, each
 * shard (AG) and each rank's partial (RS) with its own scales. */
static void fused_fn(gpu_rank *g, void *arg) {
    const fused_mode *md = arg;
    fp8_rank r = {g->rank, g->nranks, g->comm, g->stream};
    fp8_need_hopper();
    for (size_t t = 0; t < sizeof fused_types / sizeof fused_types[0]; t++)
        for (size_t s = 0; s < sizeof fused_shapes / sizeof fused_shapes[0]; s++) {
            fp8_case c = fused_case(md, t, s);
            run_fused(&r, &c);
        }
}

/* The fused algorithm needs 2 ranks or more (one has nothing to overlap). */
static void run_fused_ranks(gpu_case_fn fn, void *arg) {
    int P = gpu_ranks_or_skip();
    if (P < 2)
        TEST_SKIP("1 rank: set COMMGEMM_TEST_RANKS=2 (or more) to run the fused fp8 cases on one GPU");
    cgm_config cfg = gpu_config();
    cfg.splits = 2;
    traces_on();
    gpu_run(P > 8 ? 8 : P, &cfg, fn, arg, 280);
    traces_off();
}

static void case_fused(const void *p) {
    run_fused_ranks(fused_fn, (void *)p);
}

static void run_sweep(const void *p, int P) {
    cgm_config cfg = gpu_config();
    cfg.splits = 2;
    setenv("COMMGEMM_LT_SEARCH", "1", 1); /* read by the forked ranks */
    gpu_run(P, &cfg, sweep_fn, (void *)p, 280);
}

static void case_multi(const void *p) {
    int P = gpu_ranks_or_skip();
    if (P < 2)
        TEST_SKIP("1 rank: set COMMGEMM_TEST_RANKS=2 (or more) to run the multi-rank fp8 cases on "
                  "one GPU (P = 1 runs in fp8_*_p1)");
    run_sweep(p, P > 8 ? 8 : P);
}

static void case_single(const void *p) {
    gpu_count_or_skip();
    run_sweep(p, 1);
}

/* `op` (AG+GEMM or GEMM+RS) with e4m3 operands (per-tensor scales), a
 * bf16 Y, epilogue GELU and algorithm fused: what p2p_fused_fp8_problem
 * refuses. Returns the call's status. */
static cgm_status gelu_call(gpu_rank *g, cgm_op op) {
    const int64_t m = 8, n = 16, k = 32;
    const int64_t mr = cgm_shard_rows(m, g->rank, g->nranks);
    const bool ag = op == CGM_OP_ALL_GATHER_GEMM;
    void *xd = NULL, *wd = NULL, *yd = NULL;
    float *sc = NULL;
    GPU_CHECK(cudaMalloc(&xd, (size_t)(m * k)));
    GPU_CHECK(cudaMalloc(&wd, (size_t)(n * k)));
    GPU_CHECK(cudaMalloc(&yd, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc((void **)&sc, sizeof(float)));
    cgm_matrix x = cgm_matrix_make(xd, CGM_DTYPE_FP8_E4M3, ag ? mr : m, k);
    cgm_matrix w = cgm_matrix_make(wd, CGM_DTYPE_FP8_E4M3, n, k);
    cgm_matrix y = cgm_matrix_make(yd, CGM_DTYPE_BF16, ag ? m : mr, n);
    x.scale = w.scale = sc;
    x.scaling = w.scaling = CGM_SCALING_TENSOR;
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.algo = CGM_ALGO_FUSED;
    o.epilogue = CGM_EPILOGUE_GELU;
    cgm_status st = ag ? cgm_all_gather_gemm(g->comm, &x, &w, NULL, &y, NULL, &o, g->stream)
                       : cgm_gemm_reduce_scatter(g->comm, &x, &w, NULL, &y, &o, g->stream);
    cudaFree(xd), cudaFree(wd), cudaFree(yd), cudaFree(sc);
    return st;
}

#define GELU_REFUSED "the fused kernel's GELU and bias-gradient epilogues take bf16 or fp16 inputs, not fp8"

/* A valid fp8 AG+GEMM, GEMM+RS or GEMM+AR that the backend refuses. */
static void refusals_fn(gpu_rank *g, void *arg) {
    (void)arg;
    fp8_need_hopper();
    const int64_t m = 8, n = 16, k = 32;
    const int64_t mr = cgm_shard_rows(m, g->rank, g->nranks);
    void *xd = NULL, *wd = NULL, *yd = NULL, *yfd = NULL;
    float *sc = NULL;
    GPU_CHECK(cudaMalloc(&xd, (size_t)(m * k)));
    GPU_CHECK(cudaMalloc(&wd, (size_t)(n * k)));
    GPU_CHECK(cudaMalloc(&yd, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc(&yfd, (size_t)(m * n)));
    GPU_CHECK(cudaMalloc((void **)&sc, 4 * sizeof(float)));
    GPU_CHECK(cudaMemset(xd, 0, (size_t)(m * k)));
    GPU_CHECK(cudaMemset(wd, 0, (size_t)(n * k)));
    GPU_CHECK(cudaMemset(sc, 0, 4 * sizeof(float)));
    cgm_matrix xs = cgm_matrix_make(xd, CGM_DTYPE_FP8_E4M3, mr, k);
    cgm_matrix x = cgm_matrix_make(xd, CGM_DTYPE_FP8_E4M3, m, k);
    cgm_matrix w = cgm_matrix_make(wd, CGM_DTYPE_FP8_E4M3, n, k);
    cgm_matrix y = cgm_matrix_make(yd, CGM_DTYPE_BF16, m, n);
    cgm_matrix yf = cgm_matrix_make(yfd, CGM_DTYPE_FP8_E4M3, m, n);
    cgm_matrix yfs = cgm_matrix_make(yfd, CGM_DTYPE_FP8_E4M3, mr, n); /* GEMM+RS's shard */
    xs.scale = x.scale = w.scale = yf.scale = yfs.scale = sc;
    xs.scaling = x.scaling = w.scaling = yf.scaling = yfs.scaling = CGM_SCALING_TENSOR;
    CHECK_STATUS(gelu_call(g, CGM_OP_ALL_GATHER_GEMM), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), GELU_REFUSED);
    CHECK_CONTAINS(cgm_last_error(), "runs on split, ring and no_overlap");
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.algo = CGM_ALGO_FUSED; /* fp8_fast_accum 0 and block scaling run fused (fp8_*_fused_*) */
    CHECK_STATUS(cgm_gemm_reduce_scatter(g->comm, &x, &w, NULL, &yfs, &o, g->stream), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "not an fp8 Y");
    o.algo = CGM_ALGO_SPLIT_PIPELINED;
    o.y_amax = sc + 1;
    CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &yf, &o, g->stream), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "run this call on the nccl backend");
    /* The comm stays usable: the same calls without what was refused. */
    o.y_amax = NULL;
    CHECK_OK(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &yf, &o, g->stream));
    CHECK_OK(cgm_all_gather_gemm(g->comm, &xs, &w, NULL, &y, NULL, &o, g->stream));
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    cudaFree(xd), cudaFree(wd), cudaFree(yd), cudaFree(yfd), cudaFree(sc);
}

/* Fused with fp8 and an epilogue is refused on every rank, before any
 * exchange; the next fused call runs (block scaling, uneven shards that
 * split a tile) and is right. */
static void epilogue_refused_fn(gpu_rank *g, void *arg) {
    (void)arg;
    fp8_need_hopper();
    fp8_rank r = {g->rank, g->nranks, g->comm, g->stream};
    static const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER};
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(gelu_call(g, ops[i]), CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), GELU_REFUSED);
        const fused_mode md = {ops[i], true, false};
        fp8_case c = fused_case(&md, 0, 1);
        run_fused(&r, &c);
    }
}

static void case_epilogue_refused(const void *p) {
    (void)p;
    run_fused_ranks(epilogue_refused_fn, NULL);
}

static void case_refusals(const void *p) {
    (void)p;
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    gpu_run(P > 8 ? 8 : P, &cfg, refusals_fn, NULL, 120);
}

static const cgm_op op_ag = CGM_OP_ALL_GATHER_GEMM, op_rs = CGM_OP_GEMM_REDUCE_SCATTER,
                    op_ar = CGM_OP_GEMM_ALL_REDUCE, op_bulk = CGM_OP_BULK;

static void register_cases(void) {
    test_set_timeout(300);
    test_add("fp8_ag_gemm_p1", case_single, &op_ag);
    test_add("fp8_gemm_rs_p1", case_single, &op_rs);
    test_add("fp8_gemm_ar_p1", case_single, &op_ar);
    test_add("fp8_bulk_p1", case_single, &op_bulk);
    test_add("fp8_ag_gemm_multi", case_multi, &op_ag);
    test_add("fp8_gemm_rs_multi", case_multi, &op_rs);
    test_add("fp8_gemm_ar_multi", case_multi, &op_ar);
    test_add("fp8_bulk_multi", case_multi, &op_bulk);
    /* fused, 2 ranks or more: per-tensor scales with fp8_fast_accum,
     * without it (each 128-wide k block promoted), block scaling */
    static const fused_mode fused[] = {
        {CGM_OP_ALL_GATHER_GEMM, false, true}, {CGM_OP_GEMM_REDUCE_SCATTER, false, true},
        {CGM_OP_ALL_GATHER_GEMM, false, false}, {CGM_OP_GEMM_REDUCE_SCATTER, false, false},
        {CGM_OP_ALL_GATHER_GEMM, true, false}, {CGM_OP_GEMM_REDUCE_SCATTER, true, false}};
    static const char *const fused_names[] = {"fp8_ag_gemm_fused", "fp8_gemm_rs_fused",
                                              "fp8_ag_gemm_fused_promote", "fp8_gemm_rs_fused_promote",
                                              "fp8_ag_gemm_fused_block", "fp8_gemm_rs_fused_block"};
    for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++) test_add(fused_names[i], case_fused, &fused[i]);
    test_set_timeout(120);
    test_add("fp8_refusals", case_refusals, NULL);
    test_add("fp8_fused_epilogue_refused", case_epilogue_refused, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
