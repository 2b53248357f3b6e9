/* The fused epilogue of commgemm's own sm_90a GEMM (cgm_hgemm_args.epilogue):
 * GELU, GELU_AUX, DGELU and DGELU_BGRAD on t = X . W^T (+ addends) (+ bias),
 * both variants, bf16 / fp16 / fp32 Y, odd m and n, aux with an odd ld and
 * misaligned (element access), an even ld (pairs) or vectors (the fast
 * path of interior tiles next to edge tiles), against a double
 * reference: t is exact (inputs are multiples of 1/8: test_hopper_gemm.c),
 * the activation's fp32 math and the one rounding are within the tolerance,
 * GELU_AUX's aux must equal t rounded once, and nothing outside [m, n] of
 * Y or aux is written. The bias gradient: within its tolerance, the same
 * bits in two runs and in both variants (whose accumulators agree here: the
 * GEMM is exact). Then m = 0 (zeros) and the
 * refusals of bad epilogue arguments. */
#include <math.h>

#include <cuda_runtime_api.h>

#include "device/hopper_gemm.h"
#include "gpu_check.h"
#include "harness.h"
#include "hgemm_values.h"
#include "test_gelu.h"
#include "test_hopper_gemm.h"

/* The spacing of dtype t's values relative to their size (one ulp). */
static double rel_ulp(cgm_dtype t) {
    return t == CGM_DTYPE_BF16 ? 1.0 / 128 : t == CGM_DTYPE_FP16 ? 1.0 / 1024 : 1.0 / (1 << 22);
}

typedef struct epi_shape {
    int64_t m, n, k, ldy, aux_ld, aux_off, addend_ld; /* aux_off: elements after a 16-byte boundary */
    cgm_dtype addend_dtype;
} epi_shape;

/* aux's values for DGELU: multiples of 1/8 in [-3, 3]. */
static float aux_value(int64_t i, int64_t j) { return (float)((int)((i * 7 + j * 13) % 49) - 24) / 8.0f; }

/* One (shape, dtypes, epilogue, bias, addend) on both variants. */
typedef struct epi_run {
    const epi_shape *s;
    cgm_dtype in, out, gdt;
    int epi, bias, addend;
} epi_run;

static void check_run(const epi_run *c, const void *hx, const void *hw) {
    const epi_shape *s = c->s;
    const int64_t m = s->m, n = s->n, k = s->k, kp = (k + 15) / 16 * 16;
    const cgm_dtype out = c->out;
    const size_t os = hv_size(out);
    const bool uses_aux = c->epi != CGM_EPILOGUE_GELU, grad = c->epi == CGM_EPILOGUE_DGELU_BGRAD;
    const bool dgelu = c->epi == CGM_EPILOGUE_DGELU || grad;
    int16_t *xq = to_eighths(hx, c->in, m, k, k, kp), *wq = to_eighths(hw, c->in, n, k, k, kp);
    void *hb = fill(out, (size_t)n, 81), *hadd = fill(s->addend_dtype, (size_t)(m * s->addend_ld), 82);
    size_t aux_count = (size_t)(m * s->aux_ld + s->aux_off);
    void *haux = malloc(aux_count * os + 1);
    for (size_t e = 0; e < aux_count; e++) hv_put(haux, out, e, 768.0f); /* poison (exact in every dtype) */
    for (int64_t i = 0; i < m && dgelu; i++)
        for (int64_t j = 0; j < n; j++) hv_put(haux, out, (size_t)(s->aux_off + i * s->aux_ld + j), aux_value(i, j));
    void *dx = to_device(hx, (size_t)(m * k) * hv_size(c->in)), *dw = to_device(hw, (size_t)(n * k) * hv_size(c->in));
    void *db = to_device(hb, (size_t)n * os), *dadd = to_device(hadd, (size_t)(m * s->addend_ld) * hv_size(s->addend_dtype));
    void *daux = to_device(haux, aux_count * os), *dy, *dg, *dws;
    size_t ybytes = (size_t)(m * s->ldy) * os, gbytes = (size_t)n * hv_size(c->gdt);
    GPU_CHECK(cudaMalloc(&dy, ybytes));
    GPU_CHECK(cudaMalloc(&dg, gbytes + 16));
    GPU_CHECK(cudaMalloc(&dws, cgm_hgemm_bgrad_ws_bytes(m, n)));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = c->in, a.out_dtype = out;
    a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = s->ldy;
    a.bias = c->bias ? db : NULL;
    if (c->addend) a.naddends = 1, a.addend[0] = dadd, a.addend_dtype = s->addend_dtype, a.addend_ld = s->addend_ld;
    a.epilogue = c->epi;
    if (uses_aux) a.aux = (char *)daux + (size_t)s->aux_off * os, a.aux_ld = s->aux_ld;
    if (grad) a.bgrad = dg, a.bgrad_dtype = c->gdt, a.bgrad_ws = dws;
    /* the reference: t exact; Y, aux, bgrad in double */
    double *t = malloc((size_t)(m * n) * sizeof *t), *g = calloc((size_t)n, sizeof *g), *ga = calloc((size_t)n, sizeof *ga);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double v = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0;
            if (c->bias) v += hv_get(hb, out, (size_t)j);
            if (c->addend) v += hv_get(hadd, s->addend_dtype, (size_t)(i * s->addend_ld + j));
            t[i * n + j] = v;
            if (grad) {
                double prod = v * ref_dgelu(aux_value(i, j));
                g[j] += prod, ga[j] += fabs(prod);
            }
        }
    void *hy = malloc(ybytes), *hax = malloc(aux_count * os), *hg = malloc(gbytes), *hg0 = malloc(gbytes);
    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++)
        for (int rep = 0; rep < 2; rep++) {
            a.variant = v;
            GPU_CHECK(cudaMemset(dy, 0xFF, ybytes));
            GPU_CHECK(cudaMemset(dg, 0xFF, gbytes));
            GPU_CHECK(cudaMemcpy(daux, haux, aux_count * os, cudaMemcpyHostToDevice));
            const char *why = NULL;
            if (!cgm_hgemm_supported(&a, &why)) TEST_FAIL("cgm_hgemm_supported said no: %s", why);
            GPU_CHECK(cgm_hgemm(&a, 0));
            GPU_CHECK(cudaDeviceSynchronize());
            GPU_CHECK(cudaMemcpy(hy, dy, ybytes, cudaMemcpyDeviceToHost));
            GPU_CHECK(cudaMemcpy(hax, daux, aux_count * os, cudaMemcpyDeviceToHost));
            GPU_CHECK(cudaMemcpy(hg, dg, gbytes, cudaMemcpyDeviceToHost));
            int64_t bad = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < s->ldy; j++) {
                    double got = hv_get(hy, out, (size_t)(i * s->ldy + j));
                    if (j >= n) { /* past n: untouched (all ones: NaN) */
                        if (!isnan(got) && bad++ < 4) fprintf(stderr, "  Y(%lld, %lld) written\n", (long long)i, (long long)j);
                        continue;
                    }
                    double tv = t[i * n + j];
                    double want = dgelu ? tv * ref_dgelu(aux_value(i, j)) : ref_gelu(tv);
                    double tol = fabs(want) * rel_ulp(out) + 1e-5 * (1.0 + fabs(tv));
                    if (!(fabs(got - want) <= tol) && bad++ < 4)
                        fprintf(stderr, "  Y(%lld, %lld) = %.8g, expected %.8g (t %.8g)\n", (long long)i, (long long)j,
                                got, want, tv);
                }
            for (size_t e = 0; e < aux_count; e++) {
                int64_t i = ((int64_t)e - s->aux_off) / s->aux_ld, j = ((int64_t)e - s->aux_off) % s->aux_ld;
                bool inside = (int64_t)e >= s->aux_off && j < n;
                double want = !inside ? 768.0 : c->epi == CGM_EPILOGUE_GELU_AUX ? round_out(t[i * n + j], out)
                                               : hv_get(haux, out, e);
                if (hv_get(hax, out, e) != want && bad++ < 4)
                    fprintf(stderr, "  aux element %zu = %.8g, expected %.8g\n", e, hv_get(hax, out, e), want);
            }
            for (int64_t j = 0; grad && j < n; j++) {
                double got = hv_get(hg, c->gdt, (size_t)j);
                double tol = fabs(g[j]) * rel_ulp(c->gdt) + 3e-5 * ga[j] + 1e-5;
                if (!(fabs(got - g[j]) <= tol) && bad++ < 4)
                    fprintf(stderr, "  bgrad[%lld] = %.8g, expected %.8g\n", (long long)j, got, g[j]);
            }
            if (bad)
                TEST_FAIL("%lld wrong: %s, %s, in %s out %s bgrad %s, bias %d addend %d, m %lld n %lld aux_ld %lld",
                          (long long)bad, variant_name(v), cgm_epilogue_name((cgm_epilogue)c->epi),
                          cgm_dtype_name(c->in), cgm_dtype_name(out), cgm_dtype_name(c->gdt), c->bias, c->addend,
                          (long long)m, (long long)n, (long long)s->aux_ld);
            /* deterministic: the bias gradient's bits of the first run, in
             * both runs of both variants */
            if (grad && v == CGM_HGEMM_COOPERATIVE && rep == 0) memcpy(hg0, hg, gbytes);
            if (grad && memcmp(hg0, hg, gbytes) != 0)
                TEST_FAIL("the bias gradient's bits differ from the cooperative kernel's first run (%s, run %d, "
                          "%s out %s)", variant_name(v), rep + 1, cgm_dtype_name(c->gdt), cgm_dtype_name(out));
        }
    free(t), free(g), free(ga), free(hy), free(hax), free(hg), free(hg0), free(xq), free(wq);
    free(hb), free(hadd), free(haux);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dadd), cudaFree(daux), cudaFree(dy), cudaFree(dg);
    cudaFree(dws);
}

static void case_epilogues(const void *p) {
    (void)p;
    require_sm90();
    /* m, n, k, ldy, aux_ld, aux_off, addend_ld, addend dtype: an odd aux_ld
     * one element past 16 bytes (element access), an even one (pairs) with
     * an odd n and ldy, and one where Y and aux take 16-byte vectors
     * (fp32: pairs): the kernel's fast path on interior tiles, its checked
     * path on the last rows (m 200) and columns (n 392: columns 256-383
     * are interior in ping-pong, edge in the cooperative kernel, so both
     * paths' bias gradients must agree to the bit) */
    static const epi_shape shapes[] = {{300, 200, 136, 208, 203, 1, 202, CGM_DTYPE_FP32},
                                       {37, 27, 72, 27, 32, 0, 28, CGM_DTYPE_BF16},
                                       {200, 392, 72, 400, 400, 0, 392, CGM_DTYPE_FP16}};
    const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    static const cgm_dtype outs[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP16, CGM_DTYPE_FP32};
    int runs = 0;
    for (int sh = 0; sh < nshapes; sh++)
        for (int o = 0; o < 3; o++) {
            cgm_dtype in = outs[o] == CGM_DTYPE_FP16 ? CGM_DTYPE_FP16 : CGM_DTYPE_BF16;
            const epi_shape *s = &shapes[sh];
            void *hx = fill(in, (size_t)(s->m * s->k), 71 + (uint64_t)sh), *hw = fill(in, (size_t)(s->n * s->k), 73);
            for (int e = CGM_EPILOGUE_GELU; e <= CGM_EPILOGUE_DGELU_BGRAD; e++)
                for (int extra = 0; extra < 3; extra++) { /* none; bias; an addend (+ bias for GELU, GELU_AUX) */
                    bool dgelu = e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
                    epi_run c = {s, in, outs[o], (o + extra) % 2 ? CGM_DTYPE_FP32 : outs[o], e,
                                 extra == 1 || (extra == 2 && !dgelu), extra == 2};
                    check_run(&c, hx, hw);
                    runs++;
                }
            free(hx), free(hw);
        }
    printf("%d epilogue runs x 2 variants x 2: Y, aux and bias gradients as the reference\n", runs);
}

/* m = 0 with DGELU_BGRAD: the bias gradient is zeros (no rows), no GEMM. */
static void case_epilogue_empty(const void *p) {
    (void)p;
    require_sm90();
    const int64_t n = 40;
    void *buf, *dg, *dws;
    GPU_CHECK(cudaMalloc(&buf, 4096));
    GPU_CHECK(cudaMalloc(&dg, (size_t)n * 4));
    GPU_CHECK(cudaMemset(dg, 0xFF, (size_t)n * 4));
    GPU_CHECK(cudaMalloc(&dws, 256));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = a.out_dtype = CGM_DTYPE_BF16;
    a.m = 0, a.n = n, a.k = 64, a.x = buf, a.ldx = 64, a.w = buf, a.ldw = 64, a.y = buf, a.ldy = n;
    a.epilogue = CGM_EPILOGUE_DGELU_BGRAD, a.aux = buf, a.aux_ld = n;
    a.bgrad = dg, a.bgrad_dtype = CGM_DTYPE_FP32, a.bgrad_ws = dws;
    GPU_CHECK(cgm_hgemm(&a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    float hg[40];
    GPU_CHECK(cudaMemcpy(hg, dg, sizeof hg, cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; j++)
        if (hg[j] != 0.0f) TEST_FAIL("m = 0: bgrad[%d] = %g, expected 0", j, hg[j]);
    cudaFree(buf), cudaFree(dg), cudaFree(dws);
}

/* Bad epilogue arguments: refused with a reason that names them, before
 * any device call (host pointers, never read). */
static void case_epilogue_arguments(const void *p) {
    (void)p;
    static _Alignas(256) unsigned char buf[4096];
    cgm_hgemm_args good = args_64(buf);
    good.epilogue = CGM_EPILOGUE_DGELU_BGRAD, good.aux = buf, good.aux_ld = 64;
    good.bgrad = buf, good.bgrad_dtype = CGM_DTYPE_FP32, good.bgrad_ws = (float *)buf;
    const char *why = NULL;
    if (!cgm_hgemm_supported(&good, &why) && why && strstr(why, "epilogue"))
        TEST_FAIL("good DGELU_BGRAD arguments refused: %s", why);
    struct {
        const char *what, *reason;
        cgm_hgemm_args a;
    } bad[9];
    int n = 0;
    for (int i = 0; i < 9; i++) bad[i].a = good;
    bad[n].what = "epilogue BGRAD", bad[n].reason = "BGRAD is not the kernel's", bad[n++].a.epilogue = CGM_EPILOGUE_BGRAD;
    bad[n].what = "accumulate", bad[n].reason = "an epilogue takes no accumulate", bad[n++].a.accumulate = 1;
    bad[n].what = "no aux", bad[n].reason = "need aux", bad[n++].a.aux = NULL;
    bad[n].a.epilogue = CGM_EPILOGUE_GELU, bad[n].a.bgrad = NULL, bad[n].a.bgrad_ws = NULL;
    bad[n].what = "aux with GELU", bad[n++].reason = "aux is only for";
    bad[n].what = "aux_ld 63 < n", bad[n].reason = "aux_ld >= n", bad[n++].a.aux_ld = 63;
    bad[n].what = "aux misaligned", bad[n].reason = "aux aligned to its dtype", bad[n++].a.aux = buf + 1;
    bad[n].what = "no bgrad_ws", bad[n].reason = "DGELU_BGRAD needs bgrad and bgrad_ws", bad[n++].a.bgrad_ws = NULL;
    bad[n].what = "bgrad_ws 8-byte aligned", bad[n].reason = "bgrad_ws must be 16-byte aligned";
    bad[n++].a.bgrad_ws = (float *)(buf + 8);
    bad[n].what = "bgrad dtype 7", bad[n].reason = "bgrad_dtype must be", bad[n++].a.bgrad_dtype = (cgm_dtype)7;
    for (int i = 0; i < n; i++) expect_refused(&bad[i].a, bad[i].what, bad[i].reason);
}

void hgemm_register_epilogue_cases(void) {
    test_set_timeout(300);
    test_add("epilogues", case_epilogues, NULL);
    test_set_timeout(60);
    test_add("epilogue_empty", case_epilogue_empty, NULL);
    test_add("epilogue_arguments", case_epilogue_arguments, NULL);
}
