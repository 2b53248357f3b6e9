/* commgemm-kernel-bench epilogue: the fused epilogue of commgemm's own GEMM
 * (cgm_hgemm_args.epilogue) against cuBLASLt's same epilogue, bf16 in and
 * out, TN: each plain, with GELU_AUX and a bias (Y and aux written), with
 * DGELU_BGRAD (aux read, the bias gradient: ours its slots and the summing
 * kernel). Ours is checked against cuBLASLt (Y of both epilogues, aux). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hgemm_values.h"
#include "kernel_bench.h"

static const long long epi_shapes[][3] = {{4096, 4096, 4096}, {8192, 3584, 4096}, {8192, 4096, 14336 / 4},
                                          {2048, 14336 / 2, 4096}};

#define EPI_WHO 6 /* cuBLASLt plain, GELU_AUX+bias, DGELU_BGRAD; then ours */
static const int epi_kinds[3] = {CGM_EPILOGUE_NONE, CGM_EPILOGUE_GELU_AUX, CGM_EPILOGUE_DGELU_BGRAD};

/* One shape; returns the number of outputs of ours that differ. */
static size_t epi_shape(const kb_options *o, long long m, long long n, long long k) {
    size_t ny = (size_t)(m * n);
    void *dx = kb_fill_device(CGM_DTYPE_BF16, (size_t)(m * k), 1), *dw = kb_fill_device(CGM_DTYPE_BF16, (size_t)(n * k), 2);
    void *db = kb_fill_device(CGM_DTYPE_BF16, (size_t)n, 3), *dgin = kb_fill_device(CGM_DTYPE_BF16, ny, 4);
    void *dy[EPI_WHO], *daux[2], *dg[2], *ws, *dws;
    size_t ws_bytes;
    cgm_lt *lt = kb_lt(&ws, &ws_bytes);
    for (int i = 0; i < EPI_WHO; i++) KB_CUDA(cudaMalloc(&dy[i], ny * 2));
    for (int i = 0; i < 2; i++) {
        KB_CUDA(cudaMalloc(&daux[i], ny * 2));
        KB_CUDA(cudaMalloc(&dg[i], (size_t)n * 4 + 16));
    }
    KB_CUDA(cudaMalloc(&dws, cgm_hgemm_bgrad_ws_bytes(m, n)));
    cgm_lt_gemm_args g[3];
    cgm_hgemm_args a[3];
    for (int i = 0; i < 3; i++) {
        int e = epi_kinds[i];
        memset(&g[i], 0, sizeof g[i]);
        g[i].layout = CGM_LAYOUT_TN;
        g[i].in_dtype = g[i].out_dtype = CGM_DTYPE_BF16;
        g[i].m = m, g[i].n = n, g[i].k = k, g[i].x = dx, g[i].ldx = k, g[i].w = dw, g[i].ldw = k;
        g[i].y = dy[i], g[i].ldy = n;
        g[i].epilogue = (cgm_epilogue)e;
        memset(&a[i], 0, sizeof a[i]);
        a[i].in_dtype = a[i].out_dtype = CGM_DTYPE_BF16;
        a[i].m = m, a[i].n = n, a[i].k = k, a[i].x = dx, a[i].ldx = k, a[i].w = dw, a[i].ldw = k;
        a[i].y = dy[3 + i], a[i].ldy = n;
        a[i].epilogue = e;
        if (e == CGM_EPILOGUE_GELU_AUX) {
            g[i].bias = a[i].bias = db, g[i].bias_dtype = CGM_DTYPE_BF16;
            g[i].aux = daux[0], a[i].aux = daux[1];
        } else if (e == CGM_EPILOGUE_DGELU_BGRAD) {
            g[i].aux = a[i].aux = dgin;
            g[i].bgrad = dg[0];
            a[i].bgrad = dg[1], a[i].bgrad_dtype = CGM_DTYPE_BF16, a[i].bgrad_ws = dws;
        }
        g[i].ld_aux = a[i].aux_ld = g[i].aux ? n : 0;
        if (cgm_lt_prepare(lt, &g[i], ws_bytes, 0, 60000) != CGM_SUCCESS)
            kb_die("cgm_lt_prepare (%s): %s", cgm_epilogue_name((cgm_epilogue)e), cgm_last_error());
    }
    float t[EPI_WHO];
    kb_contenders who = {a, g, 3, true, o->dynamic};
    kb_time_interleaved(EPI_WHO, &who, t);
    uint16_t *href = malloc(ny * 2), *hy = malloc(ny * 2);
    if (!href || !hy) kb_die("malloc 2 x %zu bytes", ny * 2);
    size_t wrong = 0;
    void *pairs[3][2] = {{dy[1], dy[4]}, {daux[0], daux[1]}, {dy[2], dy[5]}};
    for (int i = 0; i < 3; i++) {
        KB_CUDA(cudaMemcpy(href, pairs[i][0], ny * 2, cudaMemcpyDeviceToHost));
        KB_CUDA(cudaMemcpy(hy, pairs[i][1], ny * 2, cudaMemcpyDeviceToHost));
        wrong += kb_bf16_differ(hy, href, ny, k);
    }
    printf("%6lld %6lld %6lld", m, n, k);
    for (int i = 0; i < EPI_WHO; i++) printf(" %9.1f", t[i]);
    printf("   %6.3f %6.3f  %s\n", t[4] / t[1], t[5] / t[2], wrong ? "WRONG" : "ok");
    if (wrong) printf("#   %zu of %zu outputs of ours differ from cuBLASLt's\n", wrong, 3 * ny);
    for (int i = 0; i < EPI_WHO; i++) cudaFree(dy[i]);
    for (int i = 0; i < 2; i++) cudaFree(daux[i]), cudaFree(dg[i]);
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dgin), cudaFree(dws);
    free(href), free(hy);
    return wrong;
}

int kb_epilogue(const kb_options *o) {
    struct cudaDeviceProp prop;
    if (!kb_device("epilogue", &prop)) return 77;
    static const char *names[EPI_WHO] = {"lt", "lt+gelu", "lt+dgelu", "ours", "ours+gelu", "ours+dgelu"};
    printf("# fused epilogues (gelu: GELU_AUX + bias; dgelu: DGELU_BGRAD), bf16 in and out, TN, %s: us per call, "
           "medians of %d interleaved rounds x %d calls\n",
           prop.name, KB_ROUNDS, KB_CALLS);
    printf("#    m      n      k");
    for (int i = 0; i < EPI_WHO; i++) printf(" %9s", names[i]);
    printf("   gelu/lt dgelu/lt  check\n");
    size_t bad = 0;
    int count = o->nshapes ? o->nshapes : (int)(sizeof epi_shapes / sizeof epi_shapes[0]);
    for (int i = 0; i < count; i++) {
        const long long *s = o->nshapes ? o->shapes[i] : epi_shapes[i];
        if (s[1] % 8) kb_die("epilogue: n must be a multiple of 8 (cuBLASLt's aux), found %lld", s[1]);
        bad += epi_shape(o, s[0], s[1], s[2]);
    }
    printf("# gelu/lt, dgelu/lt: ours with the epilogue against cuBLASLt with it (< 1: ours faster); %s\n",
           bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}
