/* fp8 on the host backend, the reference of the header's "FP8": every op
 * (AG+GEMM, GEMM+RS, GEMM+AR, bulk's GEMM) x recipe (tensor, block) x P,
 * each rank looping over e4m3/e5m2 operand pairs, outputs (bf16, fp16,
 * fp32, e4m3 and e5m2 with amax), algorithms and odd shapes (uneven
 * shards, m < P, k not a multiple of 128, several 128-row blocks of W),
 * against a reference in double from the dequantized values that every
 * rank recomputes from seeds (the fp8 codes decoded by the harness's own
 * decoder). Also: ranks disagreeing about the recipe, W's dtype or AR's
 * amax (MISMATCH on every rank), and empty operands. */
#include <math.h>
#include <stdbool.h>

#include <cblas.h>

#include "core/core.h"
#include "mp_common.h"
#include "test_values.h"

typedef enum fp8_op { F_AG, F_RS, F_AR, F_BULK, F_COUNT } fp8_op;
static const char *op_names[F_COUNT] = {"ag_gemm", "gemm_rs", "gemm_ar", "bulk"};

typedef struct fp8_case {
    fp8_op op;
    bool block; /* X BLOCK_1X128 with W BLOCK_128X128; else both TENSOR */
    int nranks;
} fp8_case;

/* ---- generated operands ---- */

/* A scale in [0.3, 2.3), not a power of two (its products with codes round
 * in fp32), from (seed, a, b). */
static float gen_scale(uint64_t seed, int64_t a, int64_t b) {
    uint64_t h = test_mix64(seed * 31 + test_mix64((uint64_t)a * 7919 + (uint64_t)b + 17));
    return 0.3f + (float)(h % 2000) / 1000.0f + (h % 3 == 0 ? 1.0f / 3.0f : 0.0f);
}

/* An fp8 operand [rows, k] (TN: X [m, k], W [n, k]) whose logical rows
 * start at global row `row0`: codes from (seed, global row, col); scales
 * from (seed, ...): TENSOR one (from `tensor_id`: a shard's or a rank's),
 * BLOCK_1X128 per (global row, k block), BLOCK_128X128 per (row block,
 * k block) of this matrix. */
typedef struct operand {
    cgm_matrix m;
    float *scales;
    uint64_t seed;
    int64_t row0;
    int tensor_id;
} operand;

static int64_t kblocks(int64_t k) { return (k + 127) / 128; }

static operand make_operand(cgm_dtype dt, cgm_scaling sc, int64_t rows, int64_t k, int64_t row0, uint64_t seed,
                            int tensor_id, int64_t pad) {
    operand o = {test_alloc(dt, rows, k, pad), NULL, seed, row0, tensor_id};
    int64_t ld = o.m.ld;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < k; j++) ((uint8_t *)o.m.data)[i * ld + j] = mp_fp8_code(dt, seed, row0 + i, j);
    int64_t count = sc == CGM_SCALING_TENSOR ? 1
                    : sc == CGM_SCALING_BLOCK_1X128 ? rows * kblocks(k)
                                                    : kblocks(rows) * kblocks(k);
    o.scales = malloc(sizeof(float) * (size_t)(count + 1));
    if (!o.scales) TEST_FAIL("out of memory");
    for (int64_t t = 0; t < count; t++) {
        if (sc == CGM_SCALING_TENSOR) o.scales[t] = gen_scale(seed, -1, tensor_id);
        else if (sc == CGM_SCALING_BLOCK_1X128) o.scales[t] = gen_scale(seed, row0 + t / kblocks(k), t % kblocks(k));
        else o.scales[t] = gen_scale(seed, t / kblocks(k), 1000 + t % kblocks(k));
    }
    o.m.scaling = sc;
    o.m.scale = rows * k > 0 ? o.scales : NULL;
    return o;
}

static void free_operand(operand *o) {
    test_free(&o->m);
    free(o->scales);
}

/* The value of element (i, j) of an operand, in double from the codes. */
static double value_of(const operand *o, int64_t i, int64_t j) {
    const cgm_matrix *m = &o->m;
    double code = test_fp8_value(((const uint8_t *)m->data)[i * m->ld + j], m->dtype);
    int64_t kb = kblocks(m->cols);
    double s = m->scaling == CGM_SCALING_TENSOR ? o->scales[0]
               : m->scaling == CGM_SCALING_BLOCK_1X128 ? o->scales[i * kb + j / 128]
                                                       : o->scales[(i / 128) * kb + j / 128];
    return code * s;
}

/* ref[i * n + j] += X . W^T over rows [0, rows) of x, and mag += the
 * magnitudes (the error bound of fp32 sums grows with them). */
static void add_product(const operand *x, const operand *w, int64_t rows, int64_t n, int64_t k, double *ref,
                        double *mag) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0, a = 0;
            for (int64_t l = 0; l < k; l++) {
                double t = value_of(x, i, l) * value_of(w, j, l);
                s += t;
                a += fabs(t);
            }
            ref[i * n + j] += s;
            mag[i * n + j] += a;
        }
}

/* ---- outputs ---- */

typedef struct out_variant {
    cgm_dtype dtype;
    cgm_dtype bias; /* COUNT_: no bias */
    double fill;    /* fp8: y.scale puts the largest |r| at fill * the format's max (> 1: saturates) */
} out_variant;

static const out_variant outs[] = {
    {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 0},
    {CGM_DTYPE_FP16, CGM_DTYPE_BF16, 0},
    {CGM_DTYPE_FP32, CGM_DTYPE_FP32, 0},
    {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_BF16, 0.7},
    {CGM_DTYPE_FP8_E5M2, CGM_DTYPE_COUNT_, 3.0},
};
#define OUTS (int)(sizeof outs / sizeof outs[0])

static const cgm_dtype pairs[][2] = {
    {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E4M3},
    {CGM_DTYPE_FP8_E5M2, CGM_DTYPE_FP8_E4M3},
    {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E5M2},
};

static double fp8_max(cgm_dtype dt) { return dt == CGM_DTYPE_FP8_E5M2 ? 57344 : 448; }

/* Half the spacing of fp8 codes at |v| (the subnormals' below the
 * smallest normal). */
static double fp8_half_ulp(double v, cgm_dtype dt) {
    int mb = dt == CGM_DTYPE_FP8_E5M2 ? 2 : 3, emin = dt == CGM_DTYPE_FP8_E5M2 ? -14 : -6;
    int e = v == 0 ? emin : (int)floor(log2(fabs(v)));
    if (e < emin) e = emin;
    return ldexp(1.0, e - mb - 1);
}

/* Checks y (rows x n) against r = ref (+ bias already in): a bf16, fp16,
 * fp32 y holds r rounded once; an fp8 y holds sat(rne(r * scale)). The
 * host's fp32 values and sums err by at most about (k + 2) fp32 epsilons
 * of the sum of magnitudes (`mag`) over the whole contraction `k`. */
static void check_output(const cgm_matrix *y, const double *ref, const double *mag, int64_t rows, int64_t n,
                         int64_t k, double y_scale) {
    int64_t wrong = 0;
    double eps = y->dtype == CGM_DTYPE_BF16 ? 1.0 / 256 : y->dtype == CGM_DTYPE_FP16 ? 1.0 / 1024 : 1e-7;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double r = ref[i * n + j], sum_tol = (double)(k + 2) * 1.2e-7 * mag[i * n + j] + 1e-30, got, want, tol;
            if (cgm_dtype_is_fp8(y->dtype)) {
                got = test_fp8_value(((const uint8_t *)y->data)[i * y->ld + j], y->dtype);
                double max = fp8_max(y->dtype);
                want = fmin(fmax(r * y_scale, -max), max);
                tol = fp8_half_ulp(want, y->dtype) * 1.0001 + sum_tol * y_scale;
            } else {
                got = test_get(y, i, j);
                want = r;
                tol = eps * fabs(r) + sum_tol + (y->dtype == CGM_DTYPE_FP16 ? 1e-7 : 0);
            }
            if (!(fabs(got - want) <= tol)) {
                if (wrong++ < 5)
                    fprintf(stderr, "[%s] (%lld, %lld) = %.9g, expected %.9g (tolerance %.3g)\n", mp_context,
                            (long long)i, (long long)j, got, want, tol);
            }
        }
    if (wrong) TEST_FAIL("[%s] %lld elements of %s wrong", mp_context, (long long)wrong, cgm_dtype_name(y->dtype));
}

/* ---- one call ---- */

typedef struct shape {
    int64_t m, n, k;
    cgm_algo algo;
    int pair, out;
    bool x_gathered, xg_scales, pad;
} shape;

/* The bias (1 x n of `dt`), values from seed, read back into ref. */
static cgm_matrix make_bias(cgm_dtype dt, int64_t n, uint64_t seed) {
    return mp_logical(dt, false, 1, n, 0, seed, 0);
}

/* AG+GEMM, GEMM+RS, GEMM+AR (bulk: run_bulk). */
static void run_call(cgm_comm *comm, const fp8_case *c, int rank, int P, const shape *sh, uint64_t seed) {
    const out_variant *ov = &outs[sh->out];
    cgm_dtype xd = pairs[sh->pair][0], wd = pairs[sh->pair][1];
    cgm_scaling xs = c->block ? CGM_SCALING_BLOCK_1X128 : CGM_SCALING_TENSOR;
    cgm_scaling ws = c->block ? CGM_SCALING_BLOCK_128X128 : CGM_SCALING_TENSOR;
    bool ag = c->op == F_AG, rs = c->op == F_RS;
    int64_t m = sh->m, off = cgm_shard_offset(m, rank, P), mr = cgm_shard_rows(m, rank, P);
    int64_t pad = sh->pad ? 3 : 0;
    /* AG: n per rank, one k; RS/AR: k per rank, one n. */
    int64_t n = ag ? sh->n + rank : sh->n, k_of[8] = {0};
    for (int q = 0; q < P; q++) k_of[q] = ag ? sh->k : sh->k + 3 * q;
    int64_t k = k_of[rank];
    /* AG: X's shard s has rows [off_s, ...) of one logical X (seed), its
     * tensor scale the shard's; RS/AR: rank q's X its own (seed + q). */
    operand x = ag ? make_operand(xd, xs, mr, k, off, seed, rank, pad)
                   : make_operand(xd, xs, m, k, 0, seed + (uint64_t)rank, rank, pad);
    operand w = make_operand(wd, ws, n, k, 0, seed + 100 + (uint64_t)rank, rank, pad);
    int64_t y_rows = rs ? mr : m;
    cgm_matrix y = test_alloc(ov->dtype, y_rows, n, pad);
    bool has_bias = ov->bias != CGM_DTYPE_COUNT_;
    cgm_matrix bias = has_bias ? make_bias(ov->bias, n, seed + 200) : cgm_matrix_make(NULL, CGM_DTYPE_BF16, 0, 0);

    /* the reference over every rank's part, in double */
    double *ref = calloc((size_t)(m * n + 1), sizeof(double)), *mag = calloc((size_t)(m * n + 1), sizeof(double));
    if (!ref || !mag) TEST_FAIL("out of memory");
    int64_t k_total = 0;
    for (int q = 0; q < P; q++) {
        int64_t kq = k_of[q];
        k_total = ag ? k : k_total + kq;
        if (ag) { /* shard q's rows with rank q's scale, times this rank's W */
            int64_t oq = cgm_shard_offset(m, q, P), rq = cgm_shard_rows(m, q, P);
            operand xq = make_operand(xd, xs, rq, k, oq, seed, q, 0);
            add_product(&xq, &w, rq, n, k, ref + oq * n, mag + oq * n);
            free_operand(&xq);
            continue;
        }
        operand xq = make_operand(xd, xs, m, kq, 0, seed + (uint64_t)q, q, 0);
        operand wq = make_operand(wd, ws, n, kq, 0, seed + 100 + (uint64_t)q, q, 0);
        add_product(&xq, &wq, m, n, kq, ref, mag);
        free_operand(&xq);
        free_operand(&wq);
    }
    double *mine = rs ? ref + off * n : ref, *mine_mag = rs ? mag + off * n : mag, amax = 0, all_amax = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            if (has_bias) ref[i * n + j] += test_get(&bias, 0, j);
            all_amax = fmax(all_amax, fabs(ref[i * n + j]));
        }
    for (int64_t i = 0; i < y_rows * n; i++) amax = fmax(amax, fabs(mine[i]));

    float y_scale = 1, got_amax = -1;
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.algo = sh->algo;
    opt.fp8_fast_accum = (int)(seed % 2); /* no effect on the host */
    if (cgm_dtype_is_fp8(ov->dtype)) {
        /* one scale on every rank (AR's Y is the same everywhere) */
        y_scale = all_amax > 0 ? (float)(ov->fill * fp8_max(ov->dtype) / all_amax) : 1.0f;
        y.scaling = CGM_SCALING_TENSOR;
        y.scale = &y_scale;
        opt.y_amax = &got_amax;
    }
    cgm_matrix xg = {0};
    float *xg_scales = NULL;
    if (ag && sh->x_gathered) {
        xg = test_alloc(xd, m, k, pad);
        xg.scaling = xs;
        int64_t count = xs == CGM_SCALING_TENSOR ? P : m * kblocks(k);
        xg_scales = malloc(sizeof(float) * (size_t)(count + 1));
        for (int64_t t = 0; t < count; t++) xg_scales[t] = -1;
        if (sh->xg_scales) xg.scale = xg_scales;
    }
    cgm_status st;
    const cgm_matrix *b = has_bias ? &bias : NULL;
    if (ag) st = cgm_all_gather_gemm(comm, &x.m, &w.m, b, &y, sh->x_gathered ? &xg : NULL, &opt, NULL);
    else if (rs) st = cgm_gemm_reduce_scatter(comm, &x.m, &w.m, b, &y, &opt, NULL);
    else st = cgm_gemm_all_reduce(comm, &x.m, &w.m, b, &y, &opt, NULL);
    MP_CHECK_OK(st);
    check_output(&y, mine, mine_mag, y_rows, n, k_total, y_scale);
    if (opt.y_amax) {
        double want = c->op == F_AR ? all_amax : amax;
        if (!(fabs(got_amax - want) <= 1e-6 * want + 1e-30))
            TEST_FAIL("[%s] y_amax = %.9g, expected %.9g", mp_context, got_amax, want);
    }
    if (ag && sh->x_gathered) /* the bytes, and the scales where asked for */
        for (int q = 0; q < P; q++) {
            int64_t oq = cgm_shard_offset(m, q, P), rq = cgm_shard_rows(m, q, P);
            operand xq = make_operand(xd, xs, rq, k, oq, seed, q, 0);
            for (int64_t i = 0; i < rq; i++) {
                if (memcmp((uint8_t *)xg.data + (oq + i) * xg.ld, (uint8_t *)xq.m.data + i * k, (size_t)k))
                    TEST_FAIL("[%s] x_gathered row %lld differs from rank %d's", mp_context, (long long)(oq + i), q);
                for (int64_t b2 = 0; sh->xg_scales && xs == CGM_SCALING_BLOCK_1X128 && b2 < kblocks(k); b2++)
                    if (xg_scales[(oq + i) * kblocks(k) + b2] != xq.scales[i * kblocks(k) + b2])
                        TEST_FAIL("[%s] x_gathered scale (%lld, %lld) wrong", mp_context, (long long)(oq + i),
                                  (long long)b2);
            }
            float want = rq > 0 && k > 0 && sh->xg_scales ? xq.scales[0] : -1;
            if (xs == CGM_SCALING_TENSOR && xg_scales[q] != want)
                TEST_FAIL("[%s] x_gathered.scale[%d] = %g, expected %g", mp_context, q, xg_scales[q], want);
            free_operand(&xq);
        }
    free(ref);
    free(mag);
    free(xg_scales);
    free_operand(&x);
    free_operand(&w);
    test_free(&y);
    test_free(&bias);
    test_free(&xg);
}

/* Bulk: the local GEMM with fp8 a and b (and amax of an fp8 c), beside an
 * fp32 all-gather when `collective`. */
static void run_bulk(cgm_comm *comm, const fp8_case *c, int rank, int P, const shape *sh, uint64_t seed) {
    const out_variant *ov = &outs[sh->out];
    cgm_dtype ad = pairs[sh->pair][0], bd = pairs[sh->pair][1];
    int64_t mg = sh->m + rank, n = sh->n, k = sh->k;
    operand a = make_operand(ad, c->block ? CGM_SCALING_BLOCK_1X128 : CGM_SCALING_TENSOR, mg, k, 0,
                             seed + (uint64_t)rank, rank, 1);
    operand b = make_operand(bd, c->block ? CGM_SCALING_BLOCK_128X128 : CGM_SCALING_TENSOR, n, k, 0,
                             seed + 50 + (uint64_t)rank, rank, 0);
    cgm_matrix cm = test_alloc(ov->dtype, mg, n, 0);
    bool has_bias = ov->bias != CGM_DTYPE_COUNT_;
    cgm_matrix bias = has_bias ? make_bias(ov->bias, n, seed + 7) : cgm_matrix_make(NULL, CGM_DTYPE_BF16, 0, 0);
    double *ref = calloc((size_t)(mg * n + 1), sizeof(double)), *mag = calloc((size_t)(mg * n + 1), sizeof(double));
    add_product(&a, &b, mg, n, k, ref, mag);
    double amax = 0;
    for (int64_t i = 0; i < mg * n; i++) {
        if (has_bias) ref[i] += test_get(&bias, 0, i % n);
        amax = fmax(amax, fabs(ref[i]));
    }
    float c_scale = 1, got_amax = -1;
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.algo = sh->algo == CGM_ALGO_NO_OVERLAP ? CGM_ALGO_NO_OVERLAP : CGM_ALGO_BULK;
    if (cgm_dtype_is_fp8(ov->dtype)) {
        c_scale = amax > 0 ? (float)(ov->fill * fp8_max(ov->dtype) / amax) : 1.0f;
        cm.scaling = CGM_SCALING_TENSOR;
        cm.scale = &c_scale;
        opt.y_amax = &got_amax;
    }
    bool coll = sh->x_gathered;
    int64_t cm_rows = sh->m, mr = cgm_shard_rows(cm_rows, rank, P);
    cgm_matrix send = coll ? mp_logical(CGM_DTYPE_FP32, false, mr, 5, cgm_shard_offset(cm_rows, rank, P), seed, 0)
                           : cgm_matrix_make(NULL, CGM_DTYPE_FP32, 0, 0);
    cgm_matrix recv = coll ? test_alloc(CGM_DTYPE_FP32, cm_rows, 5, 0) : cgm_matrix_make(NULL, CGM_DTYPE_FP32, 0, 0);
    MP_CHECK_OK(cgm_bulk_overlap(comm, &a.m, &b.m, has_bias ? &bias : NULL, &cm, CGM_COLLECTIVE_ALL_GATHER,
                                 coll ? &send : NULL, coll ? &recv : NULL, &opt, NULL));
    check_output(&cm, ref, mag, mg, n, k, c_scale);
    if (opt.y_amax && !(fabs(got_amax - amax) <= 1e-6 * amax + 1e-30))
        TEST_FAIL("[%s] bulk y_amax = %.9g, expected %.9g", mp_context, got_amax, amax);
    for (int64_t i = 0; coll && i < cm_rows * 5; i++)
        if (test_get(&recv, i / 5, i % 5) != test_value(seed, i))
            TEST_FAIL("[%s] recv element %lld wrong", mp_context, (long long)i);
    free(ref);
    free(mag);
    free_operand(&a);
    free_operand(&b);
    test_free(&cm);
    test_free(&bias);
    test_free(&send);
    test_free(&recv);
}

static cgm_config fp8_config(void) {
    cgm_config cfg = mp_config(30000);
    cfg.max_m = 64;
    cfg.max_n = 160;
    cfg.max_k = 320;
    return cfg;
}

static int rank_main(int rank, int P, const char *rendezvous, void *arg) {
    const fp8_case *c = arg;
    cgm_config cfg = fp8_config();
    cfg.host_threads = 1 + rank % 2; /* one and two compute queues */
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    const cgm_algo algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_RING, CGM_ALGO_NO_OVERLAP, CGM_ALGO_AUTO};
    /* k: not a multiple of 128, and across blocks; n: one 128-row block of
     * W, or several (block recipe) */
    const int64_t ks[2] = {c->block ? 130 : 5, c->block ? 300 : 131};
    const int64_t ns[2] = {7, c->block ? 131 : 9};
    const int64_t ms[] = {1, P - 1, 2 * P + 1, 37};
    uint64_t iteration = 0;
    for (int mi = 0; mi < 4; mi++) {
        if (ms[mi] < 1 || (mi == 1 && ms[mi] == 1)) continue;
        for (int ai = 0; ai < 4; ai++)
            for (int ki = 0; ki < 2; ki++)
                for (int out = 0; out < OUTS; out++) {
                    iteration++;
                    shape sh = {ms[mi], ns[(ki + out) % 2], ks[ki], algos[ai], (int)(iteration % 3), out,
                                iteration % 2 == 0, iteration % 4 != 0, iteration % 5 == 0};
                    uint64_t seed = 1000 * iteration;
                    snprintf(mp_context, sizeof mp_context,
                             "rank %d/%d %s %s %s x %s -> %s algo %s m=%lld n=%lld k=%lld%s", rank, P,
                             op_names[c->op], c->block ? "block" : "tensor", cgm_dtype_name(pairs[sh.pair][0]),
                             cgm_dtype_name(pairs[sh.pair][1]), cgm_dtype_name(outs[out].dtype),
                             cgm_algo_name(sh.algo), (long long)sh.m, (long long)sh.n, (long long)sh.k,
                             sh.x_gathered ? " x_gathered" : "");
                    if (c->op == F_BULK) run_bulk(comm, c, rank, P, &sh, seed);
                    else run_call(comm, c, rank, P, &sh, seed);
                }
    }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_case(const void *param) {
    const fp8_case *c = param;
    CHECK_INT_EQ(test_run_ranks(c->nranks, rank_main, (void *)c, 200, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- agreement and empty operands ---- */

/* One rank's call differs (`field` names it in the message every rank
 * gets); the comm stays usable (a correct call follows). */
static void expect_mismatch(cgm_comm *comm, int rank, int P, int what, const char *field) {
    fp8_case c = {what == 2 ? F_AR : F_AG, false, P};
    shape sh = {2 * P + 1, 7, 5, CGM_ALGO_SPLIT_PIPELINED, 0, what == 2 ? 3 : 0, false, false, false};
    int64_t m = sh.m, mr = cgm_shard_rows(m, rank, P), off = cgm_shard_offset(m, rank, P);
    bool odd = rank == 1;
    cgm_scaling xs = what == 0 && odd ? CGM_SCALING_BLOCK_1X128 : CGM_SCALING_TENSOR;
    cgm_scaling ws = what == 0 && odd ? CGM_SCALING_BLOCK_128X128 : CGM_SCALING_TENSOR;
    cgm_dtype wd = what == 1 && odd ? CGM_DTYPE_FP8_E5M2 : CGM_DTYPE_FP8_E4M3;
    bool ar = c.op == F_AR;
    operand x = make_operand(CGM_DTYPE_FP8_E4M3, xs, ar ? m : mr, sh.k, ar ? 0 : off, 5, rank, 0);
    operand w = make_operand(wd, ws, sh.n, sh.k, 0, 6, rank, 0);
    cgm_matrix y = test_alloc(ar ? CGM_DTYPE_FP8_E4M3 : CGM_DTYPE_BF16, m, sh.n, 0);
    float y_scale = 1, amax = 0;
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    if (ar) {
        y.scaling = CGM_SCALING_TENSOR;
        y.scale = &y_scale;
        if (!odd) opt.y_amax = &amax;
    }
    cgm_status st = ar ? cgm_gemm_all_reduce(comm, &x.m, &w.m, NULL, &y, &opt, NULL)
                       : cgm_all_gather_gemm(comm, &x.m, &w.m, NULL, &y, NULL, &opt, NULL);
    if (st != CGM_ERROR_MISMATCH)
        TEST_FAIL("[%s] returned %s, expected MISMATCH; detail: %s", mp_context, cgm_status_string(st),
                  cgm_last_error());
    CHECK_CONTAINS(cgm_last_error(), field);
    free_operand(&x);
    free_operand(&w);
    test_free(&y);
    run_call(comm, &c, rank, P, &sh, 77);
}

static int rank_agreement(int rank, int P, const char *rendezvous, void *arg) {
    (void)arg;
    cgm_config cfg = fp8_config();
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank 1's recipe differs", rank, P);
    expect_mismatch(comm, rank, P, 0,
                    "rank 1 passed fp8 scaling (and GEMM+AR's y_amax) = block_1x128 but rank 0 passed fp8 "
                    "scaling (and GEMM+AR's y_amax) = tensor");
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank 1's W dtype differs", rank, P);
    expect_mismatch(comm, rank, P, 1, "rank 1 passed w dtype = fp8_e5m2 but rank 0 passed w dtype = fp8_e4m3");
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank 1 passes no y_amax to GEMM+AR", rank, P);
    expect_mismatch(comm, rank, P, 2, "= tensor but rank 0 passed fp8 scaling (and GEMM+AR's y_amax) = tensor "
                                      "with y_amax");
    /* A rank whose own call is refused (its x has no scales): it returns
     * its error, its peers MISMATCH naming it; then a correct call. */
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank %d passes no scale", rank, P, P - 1);
    int64_t m = 2 * P + 1, mr = cgm_shard_rows(m, rank, P), off = cgm_shard_offset(m, rank, P);
    operand x = make_operand(CGM_DTYPE_FP8_E4M3, CGM_SCALING_TENSOR, mr, 5, off, 5, rank, 0);
    operand w = make_operand(CGM_DTYPE_FP8_E4M3, CGM_SCALING_TENSOR, 7, 5, 0, 6, rank, 0);
    cgm_matrix y = test_alloc(CGM_DTYPE_BF16, m, 7, 0);
    if (rank == P - 1) x.m.scale = NULL;
    cgm_status st = cgm_all_gather_gemm(comm, &x.m, &w.m, NULL, &y, NULL, NULL, NULL);
    CHECK_STATUS(st, rank == P - 1 ? CGM_ERROR_INVALID_ARGUMENT : CGM_ERROR_MISMATCH);
    CHECK_CONTAINS(cgm_last_error(), "x_shard.scale is NULL");
    free_operand(&x);
    free_operand(&w);
    test_free(&y);
    fp8_case c = {F_RS, true, P};
    shape sh = {2 * P + 1, 7, 130, CGM_ALGO_RING, 1, 4, false, false, false};
    run_call(comm, &c, rank, P, &sh, 99);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_agreement(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(3, rank_agreement, NULL, 100, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* Empty fp8 operands: m = 0, k = 0 (X and W NULL, no scales: Y = bias),
 * n = 0, on every op; the fp8 Y's amax is 0 for an empty product. */
static int rank_empty(int rank, int P, const char *rendezvous, void *arg) {
    (void)arg;
    cgm_config cfg = fp8_config();
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    for (int op = F_AG; op <= F_AR; op++)
        for (int e = 0; e < 3; e++) {
            int64_t m = e == 0 ? 0 : 2 * P + 1, n = e == 2 ? 0 : 6, k = e == 1 ? 0 : 5;
            int64_t mr = cgm_shard_rows(m, rank, P), off = cgm_shard_offset(m, rank, P);
            snprintf(mp_context, sizeof mp_context, "rank %d/%d %s empty m=%lld n=%lld k=%lld", rank, P,
                     op_names[op], (long long)m, (long long)n, (long long)k);
            bool ag = op == F_AG, rs = op == F_RS;
            operand x = make_operand(CGM_DTYPE_FP8_E4M3, CGM_SCALING_BLOCK_1X128, ag ? mr : m, k, ag ? off : 0, 3,
                                     rank, 0);
            operand w = make_operand(CGM_DTYPE_FP8_E5M2, CGM_SCALING_BLOCK_128X128, n, k, 0, 4, rank, 0);
            cgm_matrix y = test_alloc(CGM_DTYPE_FP8_E4M3, rs ? mr : m, n, 0);
            cgm_matrix bias = make_bias(CGM_DTYPE_BF16, n, 8);
            float y_scale = 2, amax = -1;
            y.scaling = CGM_SCALING_TENSOR;
            y.scale = y.data ? &y_scale : NULL;
            cgm_op_options opt = CGM_OP_OPTIONS_INIT;
            opt.y_amax = &amax;
            cgm_status st = ag ? cgm_all_gather_gemm(comm, &x.m, &w.m, &bias, &y, NULL, &opt, NULL)
                            : rs ? cgm_gemm_reduce_scatter(comm, &x.m, &w.m, &bias, &y, &opt, NULL)
                                 : cgm_gemm_all_reduce(comm, &x.m, &w.m, &bias, &y, &opt, NULL);
            MP_CHECK_OK(st);
            double want_amax = 0;
            for (int64_t i = 0; i < y.rows; i++)
                for (int64_t j = 0; j < n; j++) {
                    double b = test_get(&bias, 0, j), got = test_fp8_value(((uint8_t *)y.data)[i * y.ld + j],
                                                                           CGM_DTYPE_FP8_E4M3);
                    want_amax = fmax(want_amax, fabs(b));
                    if (!(fabs(got - 2 * b) <= fp8_half_ulp(2 * b, CGM_DTYPE_FP8_E4M3)))
                        TEST_FAIL("[%s] y(%lld, %lld) = %g, expected %g", mp_context, (long long)i, (long long)j, got,
                                  2 * b);
                }
            /* k = 0: r = bias; m = 0 or n = 0: no elements, 0 */
            if (amax != (float)want_amax)
                TEST_FAIL("[%s] y_amax = %g, expected %g", mp_context, amax, want_amax);
            free_operand(&x);
            free_operand(&w);
            test_free(&y);
            test_free(&bias);
        }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_empty(const void *param) {
    const fp8_case *c = param;
    CHECK_INT_EQ(test_run_ranks(c->nranks, rank_empty, NULL, 100, NULL), 0);
    mp_check_no_shm_leftovers();
}

static fp8_case cases[F_COUNT * 2 * 3 + 2];

static void register_cases(void) {
    const int sizes[] = {1, 2, 3};
    int i = 0;
    test_set_timeout(240);
    for (int op = 0; op < F_COUNT; op++)
        for (int b = 0; b < 2; b++)
            for (int s = 0; s < 3; s++, i++) {
                cases[i] = (fp8_case){(fp8_op)op, b == 1, sizes[s]};
                char name[64];
                snprintf(name, sizeof name, "%s.%s.p%d", op_names[op], b ? "block" : "tensor", sizes[s]);
                test_add(name, run_case, &cases[i]);
            }
    test_add("agreement.p3", run_agreement, NULL);
    for (int p = 1; p <= 3; p += 2, i++) {
        cases[i] = (fp8_case){F_AG, false, p};
        char name[64];
        snprintf(name, sizeof name, "empty_operands.p%d", p);
        test_add(name, run_empty, &cases[i]);
    }
}

int main(int argc, char **argv) {
    openblas_set_num_threads(1);
    return test_main(argc, argv, register_cases);
}
