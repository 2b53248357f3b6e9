/* The epilogue cases of the GPU backends' tests (epi_cases.h): every op
 * (AG+GEMM, GEMM+RS, GEMM+AR, bulk's GEMM) x epilogue x bf16/fp16/fp32 (with
 * and without a bias where the epilogue takes one) x shapes (even shards;
 * m = 37 uneven; m < P) x algorithm (split, ring, no_overlap; or fused,
 * bf16 and fp16: epi_sweep_fused), against a
 * reference in double computed here on the host (GELU's tanh form and its
 * derivative from their formulas). Inputs are multiples of 1/16 with few
 * bits, so the GEMM's fp32 sums are exact and the tolerance covers the
 * activation's fp32 math and the one rounding. test_gpu_nccl_epilogue.c
 * and test_gpu_p2p_epilogue.c run them on their backend's ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "epi_cases.h"
#include "gpu_check.h"
#include "test_gelu.h"

#define GCHECK GPU_CHECK


static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
                 (c + 0x94d049bb133111ebull);
    h ^= h >> 31;
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 29);
}

/* Inputs: multiples of 1/16 in [-1/2, 1/2]; aux (DGELU's pre-activation):
 * multiples of 1/8 in [-3, 3]; bias: multiples of 1/8 in [-1, 1]. */
static double in_val(uint64_t seed, int64_t i, int64_t j) {
    return (double)((int)(mix(seed, (uint64_t)i, (uint64_t)j) % 17) - 8) / 16.0;
}
static double aux_val(uint64_t seed, int64_t i, int64_t j) {
    return (double)((int)(mix(seed, (uint64_t)i, (uint64_t)j) % 49) - 24) / 8.0;
}
static double bias_val(uint64_t seed, int64_t i, int64_t j) { return 2.0 * in_val(seed, i, j); }

/* A device matrix [rows, cols] (ld `ld`) of f(seed, row0 + i, j). */
static cgm_matrix dev_of(cgm_dtype dt, int64_t rows, int64_t cols, int64_t ld, int64_t row0, uint64_t seed,
                         double (*f)(uint64_t, int64_t, int64_t)) {
    cgm_matrix h = cgm_matrix_make(NULL, dt, rows, cols);
    h.data = calloc((size_t)(rows * ld + 1), cgm_dtype_size(dt));
    h.ld = ld;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) cgm_store_float(h.data, dt, i * ld + j, (float)f(seed, row0 + i, j));
    cgm_matrix d = h;
    size_t bytes = (size_t)(rows * ld + 8) * cgm_dtype_size(dt);
    GCHECK(cudaMalloc(&d.data, bytes));
    GCHECK(cudaMemset(d.data, 0xff, bytes));
    if (rows * cols > 0)
        GCHECK(cudaMemcpy(d.data, h.data, (size_t)(rows * ld) * cgm_dtype_size(dt), cudaMemcpyHostToDevice));
    free(h.data);
    return d;
}

static double eps_of(cgm_dtype dt) {
    return dt == CGM_DTYPE_BF16 ? 1.0 / 256 : dt == CGM_DTYPE_FP16 ? 1.0 / 2048 : 1e-6;
}

/* Compares device d ([rows, cols], ld d.ld) with ref; tol per element:
 * rel * |ref| + abs + (scale ? scale[i] : 0). */
static void expect_dev(const cgm_matrix *d, const double *ref, const double *scale, double rel, double abs_tol,
                       const char *what, const epi_case *c) {
    size_t es = cgm_dtype_size(d->dtype);
    int64_t ld = d->ld ? d->ld : d->cols;
    char *h = malloc((size_t)(d->rows * ld + 1) * es);
    if (d->rows * d->cols > 0) GCHECK(cudaMemcpy(h, d->data, (size_t)(d->rows * ld) * es, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < d->rows; i++)
        for (int64_t j = 0; j < d->cols; j++) {
            double got = cgm_load_float(h, d->dtype, i * ld + j), want = ref[i * d->cols + j];
            double tol = rel * fabs(want) + abs_tol + (scale ? scale[i * d->cols + j] : 0);
            if (!(fabs(got - want) <= tol)) {
                free(h);
                TEST_FAIL("%s of %s %s %s bias %d m %lld n %lld k %lld algo %s: (%lld, %lld) = %.8g, expected "
                          "%.8g", what, cgm_op_name(c->op), cgm_epilogue_name(c->epi), cgm_dtype_name(c->dt),
                          c->bias, (long long)c->m, (long long)c->n, (long long)c->k, cgm_algo_name(c->algo),
                          (long long)i, (long long)j, got, want);
            }
        }
    free(h);
}

/* X's (or A's) and W's (B's) seeds: AG: one global X and W; RS/AR: rank
 * q's own X_q, W_q; bulk: this rank's. */
#define SEED_X(q) (10u + (uint64_t)(q))
#define SEED_W(q) (20u + (uint64_t)(q))
#define SEED_AUX 30u
#define SEED_BIAS 40u

/* r(i, j) for output row i (global for AG/AR and RS's reference, local
 * for bulk), in double. */
static double ref_r(const epi_case *c, int P, int rank, int64_t i, int64_t j) {
    double s = 0;
    if (c->op == CGM_OP_ALL_GATHER_GEMM) {
        for (int64_t l = 0; l < c->k; l++) s += in_val(SEED_X(0), i, l) * in_val(SEED_W(0), j, l);
    } else if (c->op == CGM_OP_BULK) {
        for (int64_t l = 0; l < c->k; l++) s += in_val(SEED_X(rank), i, l) * in_val(SEED_W(rank), j, l);
    } else {
        for (int q = 0; q < P; q++)
            for (int64_t l = 0; l < c->k; l++) s += in_val(SEED_X(q), i, l) * in_val(SEED_W(q), j, l);
    }
    return s;
}

/* aux of output row i (global): GEMM+AR's differs per rank (each rank's
 * own aux), the others' is one global matrix. */
static uint64_t aux_seed(const epi_case *c, int rank) {
    return c->op == CGM_OP_GEMM_ALL_REDUCE || c->op == CGM_OP_BULK ? SEED_AUX + (uint64_t)rank : SEED_AUX;
}

static bool is_dgelu(cgm_epilogue e) { return e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD; }

/* The activation's error beyond Y's rounding, relative to |t| (GELU) or
 * |r| (DGELU): cuBLASLt may compute tanh with a fast approximation (about
 * 2^-11 relative), which GELU scales by |t| / 2 and gelu' by up to |t| and
 * the tanh's slope. */
#define ACT_ERR 4e-3

/* The expected Y rows [row0, row0 + rows) (global row numbers), aux
 * (GELU_AUX) and bgrad (DGELU_BGRAD: over all m rows; BGRAD: m sums of
 * op(A)); ys and gs: the activation's error bound of each Y and bgrad
 * value (ACT_ERR). */
static void reference(const epi_case *c, int P, int rank, int64_t row0, int64_t rows, double *y, double *aux,
                      double *bgrad, double *ys, double *gs) {
    const int64_t n = c->n;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double r = ref_r(c, P, rank, row0 + i, j);
            double t = r + (c->bias ? bias_val(SEED_BIAS, 0, j) : 0);
            double v = t;
            if (c->epi == CGM_EPILOGUE_GELU || c->epi == CGM_EPILOGUE_GELU_AUX) v = ref_gelu(t);
            if (is_dgelu(c->epi)) v = r * ref_dgelu(aux_val(aux_seed(c, rank), row0 + i, j));
            y[i * n + j] = v;
            aux[i * n + j] = t;
            ys[i * n + j] = c->epi == CGM_EPILOGUE_NONE || c->epi == CGM_EPILOGUE_BGRAD
                                ? 0
                                : ACT_ERR * fabs(is_dgelu(c->epi) ? r : t);
        }
    if (c->epi == CGM_EPILOGUE_DGELU_BGRAD) {
        /* RS: all m rows, each with its owner's aux (one global matrix) */
        int64_t all = c->op == CGM_OP_GEMM_REDUCE_SCATTER ? c->m : rows;
        int64_t first = c->op == CGM_OP_GEMM_REDUCE_SCATTER ? 0 : row0;
        for (int64_t j = 0; j < n; j++) {
            double s = 0, mag = 0;
            for (int64_t i = first; i < first + all; i++) {
                double r = ref_r(c, P, rank, i, j);
                s += r * ref_dgelu(aux_val(aux_seed(c, rank), i, j));
                mag += fabs(r);
            }
            bgrad[j] = s;
            gs[j] = ACT_ERR * mag;
        }
    }
    if (c->epi == CGM_EPILOGUE_BGRAD)
        for (int64_t i = 0; i < c->m; i++) {
            double s = 0;
            for (int64_t l = 0; l < c->k; l++) s += in_val(SEED_X(rank), i, l);
            bgrad[i] = s;
        }
}

static double zero_val(uint64_t seed, int64_t i, int64_t j) { (void)seed, (void)i, (void)j; return 0; }

void epi_run_case(const epi_rank *g, const epi_case *c) {
    const int P = g->nranks, r = g->rank;
    const int64_t m = c->m, n = c->n, k = c->k;
    const int64_t mr = cgm_shard_rows(m, r, P), off = cgm_shard_offset(m, r, P);
    const bool rs = c->op == CGM_OP_GEMM_REDUCE_SCATTER, ag = c->op == CGM_OP_ALL_GATHER_GEMM;
    const bool nt = c->epi == CGM_EPILOGUE_BGRAD; /* bulk's wgrad layout */
    const int64_t yrows = rs ? mr : m, yrow0 = rs ? off : 0;
    cgm_matrix x, w;
    const int q = c->op == CGM_OP_ALL_GATHER_GEMM ? 0 : r;
    if (ag) {
        x = dev_of(c->dt, mr, k, k, off, SEED_X(0), in_val);
    } else if (nt) { /* A stored [k, m]: A(l, i) = op(A)(i, l) */
        x = cgm_matrix_make(NULL, c->dt, k, m);
        char *hx = calloc((size_t)(k * m + 1), cgm_dtype_size(c->dt));
        for (int64_t l = 0; l < k; l++)
            for (int64_t i = 0; i < m; i++) cgm_store_float(hx, c->dt, l * m + i, (float)in_val(SEED_X(q), i, l));
        GCHECK(cudaMalloc(&x.data, (size_t)(k * m + 8) * cgm_dtype_size(c->dt)));
        GCHECK(cudaMemcpy(x.data, hx, (size_t)(k * m) * cgm_dtype_size(c->dt), cudaMemcpyHostToDevice));
        free(hx);
    } else {
        x = dev_of(c->dt, m, k, k, 0, SEED_X(q), in_val);
    }
    if (nt) { /* B stored [k, n] */
        w = cgm_matrix_make(NULL, c->dt, k, n);
        char *hw = calloc((size_t)(k * n + 1), cgm_dtype_size(c->dt));
        for (int64_t l = 0; l < k; l++)
            for (int64_t j = 0; j < n; j++) cgm_store_float(hw, c->dt, l * n + j, (float)in_val(SEED_W(q), j, l));
        GCHECK(cudaMalloc(&w.data, (size_t)(k * n + 8) * cgm_dtype_size(c->dt)));
        GCHECK(cudaMemcpy(w.data, hw, (size_t)(k * n) * cgm_dtype_size(c->dt), cudaMemcpyHostToDevice));
        free(hw);
    } else {
        w = dev_of(c->dt, n, k, k, 0, SEED_W(q), in_val);
    }
    cgm_matrix y = dev_of(c->dt, yrows, n, n, 0, 0, zero_val);
    cgm_matrix bias = dev_of(c->dt, 1, n, n, 0, SEED_BIAS, bias_val);
    const bool has_aux = c->epi == CGM_EPILOGUE_GELU_AUX || is_dgelu(c->epi);
    cgm_matrix aux = c->epi == CGM_EPILOGUE_GELU_AUX ? dev_of(c->dt, yrows, n, n, 0, 0, zero_val)
                                                     : dev_of(c->dt, yrows, n, n, yrow0, aux_seed(c, r), aux_val);
    const int64_t glen = c->epi == CGM_EPILOGUE_BGRAD ? m : n;
    cgm_matrix bgrad = dev_of(c->dt, 1, glen, glen, 0, 0, zero_val);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.algo = c->algo;
    o.layout = nt ? CGM_LAYOUT_NT : CGM_LAYOUT_TN;
    o.epilogue = c->epi;
    o.aux = has_aux ? &aux : NULL;
    o.bgrad = c->epi == CGM_EPILOGUE_DGELU_BGRAD || c->epi == CGM_EPILOGUE_BGRAD ? &bgrad : NULL;
    const cgm_matrix *b = c->bias ? &bias : NULL;
    cgm_status s;
    if (ag) s = cgm_all_gather_gemm(g->comm, &x, &w, b, &y, NULL, &o, g->stream);
    else if (rs) s = cgm_gemm_reduce_scatter(g->comm, &x, &w, b, &y, &o, g->stream);
    else if (c->op == CGM_OP_GEMM_ALL_REDUCE) s = cgm_gemm_all_reduce(g->comm, &x, &w, b, &y, &o, g->stream);
    else s = cgm_bulk_overlap(g->comm, &x, &w, b, &y, CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o, g->stream);
    if (s != CGM_SUCCESS)
        TEST_FAIL("%s %s %s m %lld: %s", cgm_op_name(c->op), cgm_epilogue_name(c->epi), cgm_dtype_name(c->dt),
                  (long long)m, cgm_last_error());
    GCHECK(cudaStreamSynchronize(g->stream));
    double *ry = calloc((size_t)(yrows * n + 1), sizeof(double));
    double *raux = calloc((size_t)(yrows * n + 1), sizeof(double));
    double *ys = calloc((size_t)(yrows * n + 1), sizeof(double));
    double *rg = calloc((size_t)(glen + 1), sizeof(double));
    double *gs = calloc((size_t)(glen + 1), sizeof(double));
    reference(c, P, r, yrow0, yrows, ry, raux, rg, ys, gs);
    /* Y: its rounding, and the activation's fp32 error (ys) */
    const double e = eps_of(c->dt);
    const double rel = e > 1e-4 ? 2 * e : 1e-4, abs_tol = e > 1e-4 ? 2e-3 : 2e-4;
    expect_dev(&y, ry, ys, rel, abs_tol, "Y", c);
    if (c->epi == CGM_EPILOGUE_GELU_AUX) expect_dev(&aux, raux, NULL, e, 1e-6, "aux", c);
    if (o.bgrad) /* also fp32 sums over up to m terms of |t| <= k/4 each */
        expect_dev(&bgrad, rg, gs, rel, 1e-4 * (double)(m + 1) * (double)k / 4.0 + abs_tol, "bgrad", c);
    free(ry), free(raux), free(ys), free(rg), free(gs);
    cudaFree(x.data), cudaFree(w.data), cudaFree(y.data), cudaFree(bias.data), cudaFree(aux.data);
    cudaFree(bgrad.data);
}

/* The sweep over the first ndts of bf16, fp16, fp32 and the given
 * algorithms (bulk: auto). */
static void sweep(const epi_rank *g, cgm_op op, bool skip_bgrad, int ndts, const cgm_algo *algos, int nalgos) {
    const int P = g->nranks;
    static const cgm_dtype dts[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP16, CGM_DTYPE_FP32};
    /* n multiples of 8 (aux's ld, cuBLASLt's rule); m = 37: uneven
     * shards; m = P - 1: m < P (ranks with no rows) */
    const int64_t shapes[][3] = {{16 * (int64_t)P, 48, 40}, {37, 24, 24}, {P > 1 ? P - 1 : 1, 16, 8}};
    if (op == CGM_OP_BULK) nalgos = 1;
    for (int e = 0; e < CGM_EPILOGUE_COUNT_; e++) {
        cgm_epilogue epi = (cgm_epilogue)e;
        if (epi == CGM_EPILOGUE_BGRAD && op != CGM_OP_BULK) continue;
        if (epi == CGM_EPILOGUE_DGELU_BGRAD && skip_bgrad) continue;
        for (int d = 0; d < ndts; d++)
            for (int b = 0; b < 2; b++) {
                if (b && (is_dgelu(epi) || epi == CGM_EPILOGUE_BGRAD)) continue;
                for (int sh = 0; sh < 3; sh++)
                    for (int a = 0; a < nalgos; a++) {
                        epi_case c = {op, epi, dts[d], b == 1, shapes[sh][0], shapes[sh][1], shapes[sh][2],
                                   op == CGM_OP_BULK ? CGM_ALGO_AUTO : algos[a]};
                        epi_run_case(g, &c);
                    }
            }
    }
}

void epi_sweep(const epi_rank *g, cgm_op op, bool skip_bgrad) {
    static const cgm_algo algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_RING, CGM_ALGO_NO_OVERLAP};
    sweep(g, op, skip_bgrad, 3, algos, 3);
}

void epi_sweep_fused(const epi_rank *g, cgm_op op, bool skip_bgrad) {
    static const cgm_algo fused[] = {CGM_ALGO_FUSED};
    sweep(g, op, skip_bgrad, 2, fused, 1);
}


cgm_matrix epi_input(cgm_dtype dt, int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
    return dev_of(dt, rows, cols, ld, 0, seed, in_val);
}
