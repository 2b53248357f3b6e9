/* commgemm-kernel-bench's benches of the fused hooks (kernel_bench.c has
 * the options and the timing): what the fused all-gather's hooks cost one
 * at a time (ag), the all-gather's and reduce-scatter's forms and a peer
 * copy beside the kernel (fused), and an epilogue addend against
 * cuBLASLt's C (addend). No communication: every flag is already at the
 * epoch. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hgemm_values.h"
#include "kernel_bench.h"

/* The fused AG's setting (no communication): X, W and Y of m x n x k
 * (bf16), every flag already at the epoch (16 cells: shards of m/2 rows,
 * flag_shard_stride 7, 2 flags per shard), the abort word, and the m-tile
 * order of rank 1 of 2 (its own second half first). hooks_args fills a
 * plain call on sm_count SMs; hooks_order, hooks_own and hooks_flags add
 * one hook each, as the AG form uses them. */
typedef struct hooks_fixture {
    long long m, n, k;
    int64_t half, rpf, stride;
    void *dx, *dw, *dy;
    unsigned long long *df, *depoch;
    unsigned int *dabort;
    int *dorder;
} hooks_fixture;

static void hooks_fixture_make(hooks_fixture *f, long long m, long long n, long long k) {
    f->m = m, f->n = n, f->k = k;
    f->dx = kb_fill_device(CGM_DTYPE_BF16, (size_t)(m * k), 1);
    f->dw = kb_fill_device(CGM_DTYPE_BF16, (size_t)(n * k), 2);
    KB_CUDA(cudaMalloc(&f->dy, (size_t)(m * n) * 2));
    f->half = m / 2, f->rpf = (f->half / 2 + 127) / 128 * 128, f->stride = 7;
    unsigned long long hf[16];
    for (int i = 0; i < 16; i++) hf[i] = 1;
    f->df = kb_to_device(hf, sizeof hf), f->depoch = kb_to_device(hf, 8);
    KB_CUDA(cudaMalloc((void **)&f->dabort, 4));
    KB_CUDA(cudaMemset(f->dabort, 0, 4));
    int tiles = (int)((m + 127) / 128), nt = 0;
    int *ho = malloc((size_t)tiles * sizeof(int));
    if (!ho) kb_die("malloc %d tiles", tiles);
    for (int t = (int)(f->half / 128); t < tiles; t++) ho[nt++] = t; /* own (second half) first */
    for (int t = 0; t < (int)(f->half / 128); t++) ho[nt++] = t;
    f->dorder = kb_to_device(ho, (size_t)tiles * sizeof(int));
    free(ho);
}

static void hooks_fixture_free(hooks_fixture *f) {
    cudaFree(f->dx), cudaFree(f->dw), cudaFree(f->dy), cudaFree(f->df), cudaFree(f->depoch);
    cudaFree(f->dabort), cudaFree(f->dorder);
}

static void hooks_args(const hooks_fixture *f, cgm_hgemm_args *a, int sm_count) {
    memset(a, 0, sizeof *a);
    a->in_dtype = a->out_dtype = CGM_DTYPE_BF16;
    a->m = f->m, a->n = f->n, a->k = f->k, a->x = f->dx, a->ldx = f->k, a->w = f->dw, a->ldw = f->k;
    a->y = f->dy, a->ldy = f->n, a->sm_count = sm_count;
}

static void hooks_order(const hooks_fixture *f, cgm_hgemm_args *a) { a->m_block_order = f->dorder; }

static void hooks_own(const hooks_fixture *f, cgm_hgemm_args *a) {
    a->x_own = (char *)f->dx + (size_t)f->half * (size_t)f->k * 2, a->ldx_own = f->k, a->own_row0 = f->half;
    a->own_rows = f->m - f->half;
}

static void hooks_flags(const hooks_fixture *f, cgm_hgemm_args *a) {
    a->row_flags = f->df, a->rows_per_flag = f->rpf, a->flag_shard_rows = f->half;
    a->flag_shard_stride = f->stride, a->flag_epoch_ptr = f->depoch, a->abort_word = f->dabort;
}

static bool hooks_aborted(const hooks_fixture *f) {
    unsigned int aborted = 0;
    KB_CUDA(cudaMemcpy(&aborted, f->dabort, 4, cudaMemcpyDeviceToHost));
    return aborted != 0;
}

static const long long fused_shapes[][3] = {{16384, 2048, 8192}, {8192, 4096, 4096}, {16384, 8192, 2048}};

/* The shapes of a hooks bench: --shapes (m >= 256, the two halves) or the
 * defaults. */
static int hooks_shapes(const kb_options *o, const long long (**shapes)[3]) {
    *shapes = o->nshapes ? (const long long(*)[3])o->shapes : fused_shapes;
    return o->nshapes ? o->nshapes : (int)(sizeof fused_shapes / sizeof fused_shapes[0]);
}

/* ag: on all SMs but one (as the p2p backend launches it): the plain
 * kernel; + m_block_order (own tiles first); + x_own (the own half from
 * the caller's input, no order); + row flags on every tile (all ready, no
 * x_own); + order and x_own; the whole AG form (order, x_own, flags on the
 * peer half), as fused's AG_form. --only V: contender V alone. */
#define AG_WHO 6
int kb_ag(const kb_options *o) {
    struct cudaDeviceProp prop;
    if (!kb_device("ag", &prop)) return 77;
    if (o->only >= AG_WHO) kb_die("--only %d: expected 0..%d", o->only, AG_WHO - 1);
    int sms = prop.multiProcessorCount;
    printf("# fused AG hooks one by one, bf16, %s, %d CTAs: us per call, medians of %d interleaved rounds x %d calls\n",
           prop.name, sms - 1, KB_ROUNDS, KB_CALLS);
    printf("#    m      n      k    plain   +order   +x_own   +flags  +ord+own  AG_form   (ratios to plain)\n");
    const long long(*shapes)[3];
    int count = hooks_shapes(o, &shapes), bad = 0;
    for (int s = 0; s < count; s++) {
        long long m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        if (m < 256) kb_die("ag: m must be >= 256 (two halves of whole tiles), found %lld", m);
        hooks_fixture f;
        hooks_fixture_make(&f, m, n, k);
        cgm_hgemm_args a[AG_WHO];
        for (int v = 0; v < AG_WHO; v++) {
            hooks_args(&f, &a[v], sms - 1);
            if (v == 1 || v == 4 || v == 5) hooks_order(&f, &a[v]);
            if (v == 2 || v == 4 || v == 5) hooks_own(&f, &a[v]);
            if (v == 3 || v == 5) hooks_flags(&f, &a[v]);
        }
        float t[AG_WHO];
        if (o->only >= 0) a[0] = a[o->only];
        kb_contenders who = {a, NULL, o->only >= 0 ? 1 : AG_WHO, false, o->dynamic};
        kb_time_interleaved(o->only >= 0 ? 1 : AG_WHO, &who, t);
        if (o->only >= 0)
            for (int v = 1; v < AG_WHO; v++) t[v] = t[0];
        bool aborted = hooks_aborted(&f);
        bad += aborted;
        printf("%6lld %6lld %6lld  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f   (%5.3f %5.3f %5.3f %5.3f %5.3f)%s\n", m,
               n, k, t[0], t[1], t[2], t[3], t[4], t[5], t[1] / t[0], t[2] / t[0], t[3] / t[0], t[4] / t[0],
               t[5] / t[0], aborted ? "  ABORTED (a flag wait expired)" : "");
        hooks_fixture_free(&f);
    }
    printf("# %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}

/* A 64 MiB copy to the peer GPU (what the fused algorithms' comm queue
 * does) and within the GPU, alone and beside the kernel (8192x4096x4096 on
 * all SMs but one), both started in either order; needs two GPUs with
 * peer access (else nothing). */
static void copy_beside(int sms) {
    int ndev = 0, can = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2 || cudaDeviceCanAccessPeer(&can, 0, 1) != cudaSuccess ||
        !can)
        return;
    size_t bytes = 64u << 20;
    void *src, *dst, *dst2;
    KB_CUDA(cudaMalloc(&src, bytes));
    KB_CUDA(cudaMalloc(&dst2, bytes));
    KB_CUDA(cudaSetDevice(1));
    KB_CUDA(cudaMalloc(&dst, bytes));
    KB_CUDA(cudaSetDevice(0));
    cudaError_t pe = cudaDeviceEnablePeerAccess(1, 0);
    if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) KB_CUDA(pe);
    (void)cudaGetLastError();
    hooks_fixture f;
    hooks_fixture_make(&f, 8192, 4096, 4096);
    cgm_hgemm_args a;
    hooks_args(&f, &a, sms - 1);
    cudaStream_t sk, sc;
    KB_CUDA(cudaStreamCreateWithFlags(&sk, cudaStreamNonBlocking));
    KB_CUDA(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
    cudaEvent_t e[8];
    for (int i = 0; i < 8; i++) KB_CUDA(cudaEventCreate(&e[i]));
    const char *what[2] = {"peer copy 64 MiB (cudaMemcpy2DAsync, GPU0 -> GPU1)", "local copy 64 MiB (GPU0)"};
    for (int w = 0; w < 2; w++) {
        void *to = w ? dst2 : dst;
        float ms[4] = {0, 0, 0, 0}; /* copy alone, kernel alone, kernel beside, copy beside */
        for (int r = 0; r < 6; r++) {
            KB_CUDA(cudaEventRecord(e[0], sc));
            KB_CUDA(cudaMemcpy2DAsync(to, 8192, src, 8192, 8192, bytes / 8192, cudaMemcpyDefault, sc));
            KB_CUDA(cudaEventRecord(e[1], sc));
            KB_CUDA(cudaEventRecord(e[2], sk));
            KB_CUDA(cgm_hgemm(&a, sk));
            KB_CUDA(cudaEventRecord(e[3], sk));
            KB_CUDA(cudaDeviceSynchronize());
            KB_CUDA(cudaEventRecord(e[4], sk)); /* both at once: kernel first, then the copy */
            KB_CUDA(cgm_hgemm(&a, sk));
            KB_CUDA(cudaEventRecord(e[5], sk));
            usleep(20);
            KB_CUDA(cudaEventRecord(e[6], sc));
            KB_CUDA(cudaMemcpy2DAsync(to, 8192, src, 8192, 8192, bytes / 8192, cudaMemcpyDefault, sc));
            KB_CUDA(cudaEventRecord(e[7], sc));
            KB_CUDA(cudaDeviceSynchronize());
            for (int i = 0; r > 0 && i < 4; i++) {
                float x;
                KB_CUDA(cudaEventElapsedTime(&x, e[2 * i], e[2 * i + 1]));
                ms[i] += x / 5;
            }
        }
        printf("# %s: alone %.1f us; kernel 8192x4096x4096 on SMs-1 alone %.1f us; together: kernel %.1f us, copy "
               "%.1f us\n", what[w], ms[0] * 1000, ms[1] * 1000, ms[2] * 1000, ms[3] * 1000);
    }
    for (int i = 0; i < 8; i++) cudaEventDestroy(e[i]);
    cudaStreamDestroy(sk), cudaStreamDestroy(sc);
    hooks_fixture_free(&f);
    cudaFree(src), cudaFree(dst2);
    KB_CUDA(cudaSetDevice(1));
    cudaFree(dst);
    KB_CUDA(cudaSetDevice(0));
}

/* fused: auto on every SM; auto on all SMs but one (as p2p's fused
 * algorithms run); the AG form of rank 1 of 2 (X's second half from x_own,
 * tiles in its order, the first half waiting on shard-mapped flags, 2
 * pieces per shard); the RS form (m/2 rows plus one fp32 addend with
 * flags) against the same rows without it. Then copy_beside. */
int kb_fused(const kb_options *o) {
    struct cudaDeviceProp prop;
    if (!kb_device("fused", &prop)) return 77;
    int sms = prop.multiProcessorCount;
    printf("# fused hooks, bf16, %s: us per call, medians of %d interleaved rounds x %d calls\n", prop.name,
           KB_ROUNDS, KB_CALLS);
    printf("#    m      n      k   all_SMs  SMs-1  AG_form  (vs SMs-1)  RS_half  RS_form  (vs RS_half)\n");
    const long long(*shapes)[3];
    int count = hooks_shapes(o, &shapes), bad = 0;
    for (int s = 0; s < count; s++) {
        long long m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
        if (m < 256) kb_die("fused: m must be >= 256 (two halves of whole tiles), found %lld", m);
        hooks_fixture f;
        hooks_fixture_make(&f, m, n, k);
        void *dadd;
        KB_CUDA(cudaMalloc(&dadd, (size_t)(m * n) * 2)); /* m/2 x n fp32 */
        KB_CUDA(cudaMemset(dadd, 0, (size_t)(m * n) * 2));
        cgm_hgemm_args a[5];
        for (int v = 0; v < 5; v++) hooks_args(&f, &a[v], v == 0 ? 0 : sms - 1);
        cgm_hgemm_args *ag = &a[2], *rs = &a[4];
        hooks_flags(&f, ag), hooks_order(&f, ag), hooks_own(&f, ag);
        a[3].m = rs->m = f.half;
        rs->naddends = 1, rs->addend[0] = dadd, rs->addend_flags[0] = f.df, rs->addend_dtype = CGM_DTYPE_FP32;
        rs->addend_ld = n, rs->rows_per_flag = f.rpf, rs->flag_epoch_ptr = f.depoch, rs->abort_word = f.dabort;
        float t[5];
        kb_contenders who = {a, NULL, 5, false, o->dynamic};
        kb_time_interleaved(5, &who, t);
        bool aborted = hooks_aborted(&f);
        bad += aborted;
        printf("%6lld %6lld %6lld  %8.1f %6.1f %8.1f  (%5.3f)  %8.1f %8.1f  (%5.3f)%s\n", m, n, k, t[0], t[1], t[2],
               t[2] / t[1], t[3], t[4], t[4] / t[3], aborted ? "  ABORTED (a flag wait expired)" : "");
        cudaFree(dadd);
        hooks_fixture_free(&f);
    }
    copy_beside(sms);
    printf("# %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}

static const long long addend_shapes[][3] = {{2048, 4096, 2048},  {4096, 4096, 2048},  {1024, 4096, 2048},
                                             {1024, 14336, 2048}, {2048, 14336, 2048}, {4096, 4096, 4096}};

/* One shape of addend: cuBLASLt plain, with a bf16 C (beta 1), with fp32 C
 * and D; ours (auto) plain, with one bf16 addend, with one fp32 addend
 * and a bf16 output. cuBLASLt's algorithms are searched first
 * (cgm_lt_prepare), as the ops do. Ours with an addend is checked against
 * cuBLASLt with C. Returns 0 when they match. */
#define ADD_WHO 6
static int addend_shape(const kb_options *o, long long m, long long n, long long k) {
    size_t ny = (size_t)(m * n);
    void *dx = kb_fill_device(CGM_DTYPE_BF16, (size_t)(m * k), 1), *dw = kb_fill_device(CGM_DTYPE_BF16, (size_t)(n * k), 2);
    void *da16 = kb_fill_device(CGM_DTYPE_BF16, ny, 3), *da32 = kb_fill_device(CGM_DTYPE_FP32, ny, 3);
    void *dy[ADD_WHO], *ws;
    size_t ws_bytes;
    cgm_lt *lt = kb_lt(&ws, &ws_bytes);
    for (int i = 0; i < ADD_WHO; i++) KB_CUDA(cudaMalloc(&dy[i], ny * 4));
    cgm_lt_gemm_args g[3];
    for (int i = 0; i < 3; i++) {
        memset(&g[i], 0, sizeof g[i]);
        g[i].layout = CGM_LAYOUT_TN;
        g[i].in_dtype = CGM_DTYPE_BF16;
        g[i].out_dtype = i == 2 ? CGM_DTYPE_FP32 : CGM_DTYPE_BF16;
        g[i].m = m, g[i].n = n, g[i].k = k, g[i].x = dx, g[i].ldx = k, g[i].w = dw, g[i].ldw = k;
        g[i].y = dy[i], g[i].ldy = n;
        if (i) g[i].addend = i == 2 ? da32 : da16, g[i].ld_addend = n;
        if (cgm_lt_prepare(lt, &g[i], ws_bytes, 0, 60000) != CGM_SUCCESS)
            kb_die("cgm_lt_prepare: %s", cgm_last_error());
    }
    cgm_hgemm_args a[3];
    for (int i = 0; i < 3; i++) {
        memset(&a[i], 0, sizeof a[i]);
        a[i].in_dtype = a[i].out_dtype = CGM_DTYPE_BF16;
        a[i].m = m, a[i].n = n, a[i].k = k, a[i].x = dx, a[i].ldx = k, a[i].w = dw, a[i].ldw = k;
        a[i].y = dy[3 + i], a[i].ldy = n;
        if (i) {
            a[i].naddends = 1, a[i].addend[0] = i == 2 ? da32 : da16, a[i].addend_ld = n;
            a[i].addend_dtype = i == 2 ? CGM_DTYPE_FP32 : CGM_DTYPE_BF16;
        }
    }
    float t[ADD_WHO]; /* cuBLASLt g[0..2], then ours a[0..2] */
    kb_contenders who = {a, g, 3, true, o->dynamic};
    kb_time_interleaved(ADD_WHO, &who, t);
    uint16_t *href = malloc(ny * 2), *hy = malloc(ny * 2);
    if (!href || !hy) kb_die("malloc 2 x %zu bytes", ny * 2);
    KB_CUDA(cudaMemcpy(href, dy[1], ny * 2, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (int v = 4; v < 6; v++) {
        KB_CUDA(cudaMemcpy(hy, dy[v], ny * 2, cudaMemcpyDeviceToHost));
        wrong += kb_bf16_differ(hy, href, ny, k);
    }
    printf("%6lld %6lld %6lld", m, n, k);
    for (int i = 0; i < ADD_WHO; i++) printf(" %9.1f", t[i]);
    printf("   %6.3f %9.3f %6.3f  %s\n", t[1] / t[0], t[4] / t[3], t[4] / t[1], wrong ? "WRONG" : "ok");
    if (wrong) printf("#   %zu of %zu elements of ours with an addend differ from cuBLASLt with C\n", wrong, 2 * ny);
    for (int i = 0; i < ADD_WHO; i++) cudaFree(dy[i]);
    cudaFree(dx), cudaFree(dw), cudaFree(da16), cudaFree(da32);
    free(href), free(hy);
    return wrong != 0;
}

int kb_addend(const kb_options *o) {
    struct cudaDeviceProp prop;
    if (!kb_device("addend", &prop)) return 77;
    static const char *names[ADD_WHO] = {"lt", "lt+C16", "lt32+C32", "ours", "ours+a16", "ours+a32"};
    printf("# epilogue addends, bf16 in, TN, %s: us per call, medians of %d interleaved rounds x %d calls\n",
           prop.name, KB_ROUNDS, KB_CALLS);
    printf("#    m      n      k");
    for (int i = 0; i < ADD_WHO; i++) printf(" %9s", names[i]);
    printf("   C16/lt a16/ours a16/lt  check\n");
    int bad = 0, count = o->nshapes ? o->nshapes : (int)(sizeof addend_shapes / sizeof addend_shapes[0]);
    for (int i = 0; i < count; i++) {
        const long long *s = o->nshapes ? o->shapes[i] : addend_shapes[i];
        if (s[1] % 8) kb_die("addend: n must be a multiple of 8 (cuBLASLt's C), found %lld", s[1]);
        bad += addend_shape(o, s[0], s[1], s[2]);
    }
    printf("# C16/lt: cuBLASLt with a bf16 C against without; a16/ours: ours with a bf16 addend against without;"
           " a16/lt: ours with the addend against cuBLASLt with C (< 1: ours faster); %s\n",
           bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}
