/* The epilogues on the host backend, the reference of the header's
 * "Epilogues": every op (AG+GEMM, GEMM+RS, GEMM+AR, bulk's GEMM) x P in
 * 1, 2, 3, each rank looping over the epilogues (NONE, GELU, GELU_AUX,
 * DGELU, DGELU_BGRAD, and bulk's BGRAD), dtypes (fp32, bf16, fp16, bf16
 * into fp32, fp8 inputs into bf16, fp8 into an fp8 output with amax),
 * layouts, algorithms and odd shapes (uneven shards, m < P), against a
 * reference in double written here (GELU's tanh form and its derivative
 * from their formulas, not the library's code) that every rank recomputes
 * from seeds. Also: ranks that pass different epilogues, or one with aux
 * and one without, get MISMATCH on every rank and the comm stays usable. */
#include <math.h>
#include <stdbool.h>

#include <cblas.h>

#include "core/core.h"
#include "mp_common.h"
#include "test_gelu.h"
#include "test_values.h"

typedef enum e_op { E_AG, E_RS, E_AR, E_BULK, E_COUNT } e_op;
static const char *op_names[E_COUNT] = {"ag_gemm", "gemm_rs", "gemm_ar", "bulk"};

typedef struct epi_case {
    e_op op;
    int nranks;
} epi_case;

/* ---- the reference's GELU, in double: test_gelu.h ---- */

/* ---- inputs: dtype variants ---- */

typedef struct variant {
    cgm_dtype in, out;
} variant;

static const variant variants[] = {
    {CGM_DTYPE_FP32, CGM_DTYPE_FP32}, {CGM_DTYPE_BF16, CGM_DTYPE_BF16},         {CGM_DTYPE_FP16, CGM_DTYPE_FP16},
    {CGM_DTYPE_BF16, CGM_DTYPE_FP32}, {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_BF16}, {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E4M3},
};
#define VARIANTS (int)(sizeof variants / sizeof variants[0])

/* A logical [rows, cols] input whose rows start at global row `row0`,
 * stored transposed where `t`. fp8: codes of magnitude <= 4 from (seed,
 * global row, col) with one tensor scale; else mp_logical's values. */
typedef struct input {
    cgm_matrix m;
    bool t;
    float *scale; /* fp8: its tensor scale (free_input frees it) */
} input;

static input make_input(cgm_dtype dt, bool t, int64_t rows, int64_t cols, int64_t row0, uint64_t seed,
                        int64_t pad) {
    input in = {{0}, t, NULL};
    if (!cgm_dtype_is_fp8(dt)) {
        in.m = mp_logical(dt, t, rows, cols, row0, seed, pad);
        return in;
    }
    in.m = test_alloc(dt, rows, cols, pad);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) ((uint8_t *)in.m.data)[i * in.m.ld + j] = mp_fp8_code(dt, seed, row0 + i, j);
    in.scale = malloc(sizeof *in.scale);
    if (!in.scale) TEST_FAIL("out of memory");
    *in.scale = 0.05f + (float)(seed % 7) / 11.0f; /* not a power of two */
    in.m.scaling = CGM_SCALING_TENSOR;
    in.m.scale = rows * cols > 0 ? in.scale : NULL;
    return in;
}

static void free_input(input *in) {
    test_free(&in->m);
    free(in->scale);
}

/* The value of logical element (i, j). */
static double ival(const input *in, int64_t i, int64_t j) {
    if (cgm_dtype_is_fp8(in->m.dtype))
        return test_fp8_value(((const uint8_t *)in->m.data)[i * in->m.ld + j], in->m.dtype) * *in->scale;
    return in->t ? test_get(&in->m, j, i) : test_get(&in->m, i, j);
}

/* r[i * n + j] += sum over l of X(i, l) W(j, l), mag likewise of the
 * magnitudes (the fp32 sums' error bound). */
static void add_product(const input *x, const input *w, int64_t rows, int64_t n, int64_t k, double *r,
                        double *mag) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t l = 0; l < k; l++) {
                double p = ival(x, i, l) * ival(w, j, l);
                r[i * n + j] += p;
                mag[i * n + j] += fabs(p);
            }
}

static double fp8_half_ulp(double v) { /* e4m3 */
    int e = v == 0 ? -6 : (int)floor(log2(fabs(v)));
    return ldexp(1.0, (e < -6 ? -6 : e) - 4);
}

static double eps_of(cgm_dtype dt) {
    return dt == CGM_DTYPE_BF16 ? 1.0 / 256 : dt == CGM_DTYPE_FP16 ? 1.0 / 1024 : 1.2e-7;
}

/* ---- one call ---- */

typedef struct setup {
    int64_t m, n, k;
    cgm_epilogue epi;
    int variant;
    cgm_layout layout;
    cgm_algo algo;
    bool bias, pad, accumulate;
} setup;

/* What an epilogue gives for one element, in double, and its error bound
 * in fp32 (`err`: of r, from the sums). */
typedef struct expected {
    double y, aux, tol_y;
} expected;

static expected expect(const setup *s, double r, double err, double b, double aux) {
    expected e = {0, 0, 0};
    double t = r + b, f32 = 2.4e-7;
    switch (s->epi) {
    case CGM_EPILOGUE_GELU:
    case CGM_EPILOGUE_GELU_AUX:
        e.y = ref_gelu(t);
        e.aux = t;
        /* |gelu'| <= 1.13; fp32's tanh and products: a few ulps of |t| */
        e.tol_y = 1.2 * err + 8 * f32 * (fabs(t) + 1e-3);
        break;
    case CGM_EPILOGUE_DGELU:
    case CGM_EPILOGUE_DGELU_BGRAD:
        e.y = r * ref_dgelu(aux);
        e.tol_y = 1.2 * err + 8 * f32 * fabs(r) * (1 + fabs(aux));
        break;
    default: /* NONE, BGRAD */
        e.y = t;
        e.tol_y = err + f32 * fabs(t);
        break;
    }
    return e;
}

/* Checks element (i, j) of y against `want` with bound `tol` (before the
 * output's rounding); an fp8 y holds sat(rne(want * scale)). */
static int64_t check_elem(const cgm_matrix *y, int64_t i, int64_t j, double want, double tol, float scale,
                          const char *what) {
    double got, w = want;
    if (cgm_dtype_is_fp8(y->dtype)) {
        got = test_fp8_value(((const uint8_t *)y->data)[i * y->ld + j], y->dtype);
        w = fmin(fmax(want * scale, -448), 448);
        tol = fp8_half_ulp(w) * 1.0001 + tol * scale;
    } else {
        got = test_get(y, i, j);
        tol += eps_of(y->dtype) * fabs(want) + (y->dtype == CGM_DTYPE_FP16 ? 1e-7 : 0);
    }
    if (fabs(got - w) <= tol) return 0;
    fprintf(stderr, "[%s] %s(%lld, %lld) = %.9g, expected %.9g (tolerance %.3g)\n", mp_context, what, (long long)i,
            (long long)j, got, w, tol);
    return 1;
}

/* The operands of one rank, the reference over all ranks' parts (r and
 * its magnitudes for every row of Y's [rows, n]), and the outputs. */
typedef struct call_data {
    input x, w;
    cgm_matrix y, bias, aux, bgrad, xg;
    int64_t y_rows, y_row0, n, k, m_total;
    double *r, *mag;
} call_data;

static void free_call(call_data *d) {
    free_input(&d->x);
    free_input(&d->w);
    test_free(&d->y);
    test_free(&d->bias);
    test_free(&d->aux);
    test_free(&d->bgrad);
    test_free(&d->xg);
    free(d->r);
    free(d->mag);
}

/* X and W of rank q, as that rank builds them (AG: X's shard of rows
 * [off, off + rows)). */
static void operands_of(const setup *s, e_op op, int q, int P, uint64_t seed, int64_t pad, input *x, input *w,
                        int64_t *k_out, int64_t *n_out) {
    const variant *v = &variants[s->variant];
    bool ag = op == E_AG, bulk = op == E_BULK, nt = s->layout == CGM_LAYOUT_NT;
    int64_t n = ag ? s->n + q : s->n, k = ag || bulk ? s->k : s->k + 2 * q;
    int64_t rows = ag ? cgm_shard_rows(s->m, q, P) : bulk ? s->m + q : s->m;
    int64_t row0 = ag ? cgm_shard_offset(s->m, q, P) : 0;
    *x = make_input(v->in, nt, rows, k, row0, ag ? seed : seed + 10 + (uint64_t)q, pad);
    *w = make_input(v->in, s->layout != CGM_LAYOUT_TN, n, k, 0, seed + 100 + (uint64_t)q, pad);
    *k_out = k;
    *n_out = n;
}

static void build(const setup *s, e_op op, int rank, int P, uint64_t seed, call_data *d) {
    const variant *v = &variants[s->variant];
    bool ag = op == E_AG, rs = op == E_RS, bulk = op == E_BULK;
    int64_t pad = s->pad ? 3 : 0;
    memset(d, 0, sizeof *d);
    operands_of(s, op, rank, P, seed, pad, &d->x, &d->w, &d->k, &d->n);
    int64_t m = bulk ? s->m + rank : s->m, n = d->n;
    d->m_total = m;
    d->y_rows = rs ? cgm_shard_rows(m, rank, P) : m;
    d->y_row0 = rs ? cgm_shard_offset(m, rank, P) : 0;
    d->r = calloc((size_t)(m * n + 1), sizeof(double));
    d->mag = calloc((size_t)(m * n + 1), sizeof(double));
    if (!d->r || !d->mag) TEST_FAIL("out of memory");
    if (ag) { /* every shard's rows times this rank's W */
        for (int q = 0; q < P; q++) {
            input xq, wq;
            int64_t kq, nq, oq = cgm_shard_offset(m, q, P);
            operands_of(s, op, q, P, seed, 0, &xq, &wq, &kq, &nq);
            add_product(&xq, &d->w, xq.t ? xq.m.cols : xq.m.rows, n, d->k, d->r + oq * n, d->mag + oq * n);
            free_input(&xq);
            free_input(&wq);
        }
    } else if (bulk) {
        add_product(&d->x, &d->w, m, n, d->k, d->r, d->mag);
    } else { /* every rank's partial product */
        for (int q = 0; q < P; q++) {
            input xq, wq;
            int64_t kq, nq;
            operands_of(s, op, q, P, seed, 0, &xq, &wq, &kq, &nq);
            add_product(&xq, &wq, m, n, kq, d->r, d->mag);
            free_input(&xq);
            free_input(&wq);
        }
    }
    cgm_dtype aux_dt = cgm_dtype_is_fp8(v->out) ? CGM_DTYPE_BF16 : v->out;
    d->y = s->accumulate ? mp_logical(v->out, false, d->y_rows, n, 0, seed + 300, pad)
                         : test_alloc(v->out, d->y_rows, n, pad);
    if (s->bias) d->bias = mp_logical(cgm_dtype_is_fp8(v->in) ? CGM_DTYPE_BF16 : v->out, false, 1, n, 0, seed + 7, 0);
    if (s->epi == CGM_EPILOGUE_GELU_AUX) d->aux = test_alloc(aux_dt, d->y_rows, n, s->pad ? 0 : 2);
    /* DGELU's aux: a logical [m, n] pre-activation in [-2.5, 2.5], this rank's rows */
    if (s->epi == CGM_EPILOGUE_DGELU || s->epi == CGM_EPILOGUE_DGELU_BGRAD) {
        d->aux = test_alloc(aux_dt, d->y_rows, n, s->pad ? 0 : 2);
        for (int64_t i = 0; i < d->y_rows; i++)
            for (int64_t j = 0; j < n; j++)
                cgm_store_float(d->aux.data, aux_dt, i * d->aux.ld + j,
                                2.5f * test_value(seed + 400, (d->y_row0 + i) * n + j));
    }
    if (s->epi == CGM_EPILOGUE_DGELU_BGRAD || s->epi == CGM_EPILOGUE_BGRAD) {
        cgm_dtype bd = seed % 2 ? CGM_DTYPE_FP32 : aux_dt;
        d->bgrad = test_alloc(bd, 1, s->epi == CGM_EPILOGUE_BGRAD ? m : n, 0);
    }
}

static bool takes_aux(cgm_epilogue e) {
    return e == CGM_EPILOGUE_GELU_AUX || e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
}

static bool takes_bgrad(cgm_epilogue e) { return e == CGM_EPILOGUE_DGELU_BGRAD || e == CGM_EPILOGUE_BGRAD; }

static void run_one(cgm_comm *comm, e_op op, int rank, int P, const setup *s, uint64_t seed) {
    const variant *v = &variants[s->variant];
    call_data d;
    build(s, op, rank, P, seed, &d);
    int64_t n = d.n;
    float y_scale = 1, amax = -1;
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.layout = s->layout;
    opt.algo = op == E_BULK ? CGM_ALGO_BULK : s->algo;
    opt.accumulate = s->accumulate;
    opt.epilogue = s->epi;
    opt.aux = takes_aux(s->epi) ? &d.aux : NULL;
    opt.bgrad = takes_bgrad(s->epi) ? &d.bgrad : NULL;
    if (cgm_dtype_is_fp8(v->out)) {
        y_scale = 448 * 0.7f / 2.5f; /* |gelu(t)| and |r gelu'| stay below ~2.5 here; above saturates */
        d.y.scaling = CGM_SCALING_TENSOR;
        d.y.scale = &y_scale;
        opt.y_amax = &amax;
    }
    /* AR with DGELU: every rank passes the same aux, as the header asks
     * for one Y on every rank */
    const cgm_matrix *b = s->bias ? &d.bias : NULL;
    cgm_status st;
    if (op == E_AG) st = cgm_all_gather_gemm(comm, &d.x.m, &d.w.m, b, &d.y, NULL, &opt, NULL);
    else if (op == E_RS) st = cgm_gemm_reduce_scatter(comm, &d.x.m, &d.w.m, b, &d.y, &opt, NULL);
    else if (op == E_AR) st = cgm_gemm_all_reduce(comm, &d.x.m, &d.w.m, b, &d.y, &opt, NULL);
    else
        st = cgm_bulk_overlap(comm, &d.x.m, &d.w.m, b, &d.y, CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &opt, NULL);
    MP_CHECK_OK(st);

    /* Y, aux, amax over this rank's rows; bgrad over all m rows */
    int64_t wrong = 0, m = d.m_total;
    double want_amax = 0, amax_tol = 0;
    /* DGELU_BGRAD: the sum, its terms' errors and magnitudes, per column */
    double *bg = calloc((size_t)n + 1, sizeof(double)), *bg_err = calloc((size_t)n + 1, sizeof(double));
    double *bg_mag = calloc((size_t)n + 1, sizeof(double));
    if (!bg || !bg_err || !bg_mag) TEST_FAIL("out of memory");
    for (int64_t gi = 0; gi < m; gi++)
        for (int64_t j = 0; j < n; j++) {
            bool mine = gi >= d.y_row0 && gi < d.y_row0 + d.y_rows;
            int64_t i = gi - d.y_row0;
            double r = d.r[gi * n + j], err = (double)(d.k * P + 2) * 1.2e-7 * d.mag[gi * n + j];
            double bj = s->bias ? test_get(&d.bias, 0, j) : 0;
            double a = 0;
            if (s->epi == CGM_EPILOGUE_DGELU || s->epi == CGM_EPILOGUE_DGELU_BGRAD) {
                /* the aux value as stored in aux's dtype */
                float av = 2.5f * test_value(seed + 400, gi * n + j);
                a = cgm_dtype_is_fp8(v->out) || v->out == CGM_DTYPE_BF16 ? cgm_bf16_to_float(cgm_float_to_bf16(av))
                    : v->out == CGM_DTYPE_FP16                           ? cgm_fp16_to_float(cgm_float_to_fp16(av))
                                                                         : av;
            }
            expected e = expect(s, r, err, bj, a);
            bg[j] += e.y;
            bg_err[j] += e.tol_y;
            bg_mag[j] += fabs(e.y);
            if (!mine) continue;
            /* accumulate (into an fp32 y): the old values mp_logical wrote */
            double old = s->accumulate ? (double)test_value(seed + 300, i * n + j) : 0;
            wrong += check_elem(&d.y, i, j, e.y + old, e.tol_y, y_scale, "y");
            if (s->epi == CGM_EPILOGUE_GELU_AUX)
                wrong += check_elem(&d.aux, i, j, e.aux, err + 1.2e-7 * fabs(e.aux), 1, "aux");
            want_amax = fmax(want_amax, fabs(e.y));
            amax_tol = fmax(amax_tol, e.tol_y);
        }
    if (wrong) TEST_FAIL("[%s] %lld elements wrong", mp_context, (long long)wrong);
    if (opt.y_amax && !(fabs(amax - want_amax) <= amax_tol + 1e-6 * want_amax))
        TEST_FAIL("[%s] y_amax = %.9g, expected %.9g", mp_context, amax, want_amax);
    if (s->epi == CGM_EPILOGUE_DGELU_BGRAD)
        for (int64_t j = 0; j < n; j++)
            wrong += check_elem(&d.bgrad, 0, j, bg[j], bg_err[j] + (double)(m + 2) * 1.2e-7 * bg_mag[j], 1, "bgrad");
    if (s->epi == CGM_EPILOGUE_BGRAD) /* the sums of op(A) along k */
        for (int64_t i = 0; i < m; i++) {
            double sum = 0, mag = 0;
            for (int64_t l = 0; l < d.k; l++) {
                sum += ival(&d.x, i, l);
                mag += fabs(ival(&d.x, i, l));
            }
            wrong += check_elem(&d.bgrad, 0, i, sum, (double)(d.k + 2) * 1.2e-7 * mag, 1, "bgrad");
        }
    if (wrong) TEST_FAIL("[%s] %lld bias-gradient elements wrong", mp_context, (long long)wrong);
    free(bg);
    free(bg_err);
    free(bg_mag);
    free_call(&d);
}

static cgm_config epi_config(void) {
    cgm_config cfg = mp_config(30000);
    cfg.max_m = 64;
    cfg.max_n = 32;
    cfg.max_k = 32;
    return cfg;
}

static int rank_main(int rank, int P, const char *rendezvous, void *arg) {
    const epi_case *c = arg;
    cgm_config cfg = epi_config();
    cfg.host_threads = 1 + rank % 2; /* one and two compute queues */
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    const cgm_algo algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_RING, CGM_ALGO_NO_OVERLAP, CGM_ALGO_AUTO};
    const int64_t ms[] = {1, P - 1, 2 * P + 1, 23};
    int epilogues = c->op == E_BULK ? CGM_EPILOGUE_COUNT_ : CGM_EPILOGUE_BGRAD;
    uint64_t iteration = 0;
    for (int mi = 0; mi < 4; mi++) {
        if (ms[mi] < 1 || (mi == 1 && ms[mi] == 1)) continue;
        for (int e = 0; e < epilogues; e++)
            for (int vi = 0; vi < VARIANTS; vi++) {
                iteration++;
                bool fp8 = cgm_dtype_is_fp8(variants[vi].in);
                bool dgelu = e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
                setup s = {ms[mi], 5 + (int64_t)(iteration % 3), 7 + (int64_t)(iteration % 4), (cgm_epilogue)e, vi,
                           fp8 ? CGM_LAYOUT_TN : (cgm_layout)(iteration % 3), algos[iteration % 4],
                           !dgelu && iteration % 3 != 0, iteration % 2 == 0,
                           /* accumulate where the epilogue allows it, into a non-fp8 y */
                           (e == CGM_EPILOGUE_NONE || e == CGM_EPILOGUE_BGRAD) && !cgm_dtype_is_fp8(variants[vi].out) &&
                               variants[vi].out == CGM_DTYPE_FP32 && iteration % 2 == 1};
                snprintf(mp_context, sizeof mp_context,
                         "rank %d/%d %s %s %s -> %s layout %s algo %s m=%lld n=%lld k=%lld%s%s", rank, P,
                         op_names[c->op], cgm_epilogue_name(s.epi), cgm_dtype_name(variants[vi].in),
                         cgm_dtype_name(variants[vi].out), cgm_layout_name(s.layout), cgm_algo_name(s.algo),
                         (long long)s.m, (long long)s.n, (long long)s.k, s.bias ? " bias" : "",
                         s.accumulate ? " accumulate" : "");
                run_one(comm, c->op, rank, P, &s, 1000 * iteration);
            }
    }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_case(const void *param) {
    const epi_case *c = param;
    CHECK_INT_EQ(test_run_ranks(c->nranks, rank_main, (void *)c, 200, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- agreement ---- */

/* Rank 1's call differs from the others' (`epi` and aux where rank 1
 * passes its own); every rank gets MISMATCH naming the epilogue word,
 * then a correct call works. */
static void expect_mismatch(cgm_comm *comm, int rank, int P, e_op op, cgm_epilogue mine, cgm_epilogue odd,
                            bool odd_bias, const char *message) {
    setup s = {2 * P + 1, 6, 5, rank == 1 ? odd : mine, 1, CGM_LAYOUT_TN, CGM_ALGO_SPLIT_PIPELINED,
               rank == 1 && odd_bias, false, false};
    call_data d;
    build(&s, op, rank, P, 5, &d);
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.epilogue = s.epi;
    opt.aux = d.aux.data ? &d.aux : NULL;
    opt.bgrad = d.bgrad.data ? &d.bgrad : NULL;
    const cgm_matrix *b = s.bias ? &d.bias : NULL;
    cgm_status st = op == E_AG   ? cgm_all_gather_gemm(comm, &d.x.m, &d.w.m, b, &d.y, NULL, &opt, NULL)
                    : op == E_RS ? cgm_gemm_reduce_scatter(comm, &d.x.m, &d.w.m, b, &d.y, &opt, NULL)
                                 : cgm_gemm_all_reduce(comm, &d.x.m, &d.w.m, b, &d.y, &opt, NULL);
    if (st != CGM_ERROR_MISMATCH)
        TEST_FAIL("[%s] returned %s, expected MISMATCH; detail: %s", mp_context, cgm_status_string(st),
                  cgm_last_error());
    CHECK_CONTAINS(cgm_last_error(), message);
    free_call(&d);
    setup ok = {2 * P + 1, 6, 5, CGM_EPILOGUE_DGELU_BGRAD, 1, CGM_LAYOUT_NN, CGM_ALGO_RING, false, false, false};
    run_one(comm, op, rank, P, &ok, 77);
}

static int rank_agreement(int rank, int P, const char *rendezvous, void *arg) {
    (void)arg;
    cgm_config cfg = epi_config();
    cgm_comm *comm = test_host_comm(rank, P, rendezvous, &cfg);
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank 1 passes gelu, the others none (AG)", rank, P);
    expect_mismatch(comm, rank, P, E_AG, CGM_EPILOGUE_NONE, CGM_EPILOGUE_GELU, false,
                    "rank 1 passed epilogue (with bias, aux, bgrad) = gelu but rank 0 passed epilogue (with bias, "
                    "aux, bgrad) = none");
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank 1 passes dgelu, the others dgelu_bgrad (RS)", rank, P);
    expect_mismatch(comm, rank, P, E_RS, CGM_EPILOGUE_DGELU_BGRAD, CGM_EPILOGUE_DGELU, false,
                    "= dgelu with aux but rank 0 passed epilogue (with bias, aux, bgrad) = dgelu_bgrad with aux "
                    "with bgrad");
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank 1 adds a bias to gelu_aux (AR)", rank, P);
    expect_mismatch(comm, rank, P, E_AR, CGM_EPILOGUE_GELU_AUX, CGM_EPILOGUE_GELU_AUX, true,
                    "= gelu_aux with bias with aux but rank 0 passed epilogue (with bias, aux, bgrad) = gelu_aux "
                    "with aux");
    /* A rank whose own call is refused (dgelu without aux): it returns
     * its error, its peers MISMATCH naming it; then a correct call. */
    snprintf(mp_context, sizeof mp_context, "rank %d/%d: rank %d passes dgelu without aux", rank, P, P - 1);
    setup s = {2 * P + 1, 6, 5, CGM_EPILOGUE_DGELU, 0, CGM_LAYOUT_TN, CGM_ALGO_AUTO, false, false, false};
    call_data d;
    build(&s, E_RS, rank, P, 9, &d);
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.epilogue = CGM_EPILOGUE_DGELU;
    opt.aux = rank == P - 1 ? NULL : &d.aux;
    CHECK_STATUS(cgm_gemm_reduce_scatter(comm, &d.x.m, &d.w.m, NULL, &d.y, &opt, NULL),
                 rank == P - 1 ? CGM_ERROR_INVALID_ARGUMENT : CGM_ERROR_MISMATCH);
    CHECK_CONTAINS(cgm_last_error(), "options.aux is NULL but options.epilogue = dgelu needs it");
    free_call(&d);
    run_one(comm, E_RS, rank, P, &s, 9);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_agreement(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(3, rank_agreement, NULL, 100, NULL), 0);
    mp_check_no_shm_leftovers();
}

static epi_case cases[E_COUNT * 3];

static void register_cases(void) {
    int i = 0;
    test_set_timeout(240);
    for (int op = 0; op < E_COUNT; op++)
        for (int p = 1; p <= 3; p++, i++) {
            cases[i] = (epi_case){(e_op)op, p};
            char name[64];
            snprintf(name, sizeof name, "%s.p%d", op_names[op], p);
            test_add(name, run_case, &cases[i]);
        }
    test_add("agreement.p3", run_agreement, NULL);
}

int main(int argc, char **argv) {
    openblas_set_num_threads(1);
    return test_main(argc, argv, register_cases);
}
