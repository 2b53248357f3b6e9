/* commgemm-kernel-bench: commgemm's own Hopper GEMM (src/device/hopper/)
 * on one GPU, bf16 in, TN.
 *
 *   commgemm-kernel-bench [plain|ag|fused|addend] [--shapes MxNxK,...]
 *                         [--dynamic] [--only V]
 *
 *   plain   (default) cooperative, ping-pong and auto against cuBLASLt;
 *   ag      what the fused all-gather's hooks cost, one at a time
 *           (kernel_bench_fused.c); --only V times contender V alone (for
 *           a profiler);
 *   fused   the fused all-gather's and reduce-scatter's forms, every flag
 *           already at the epoch, and a peer copy beside the kernel;
 *   addend  an epilogue addend, ours against cuBLASLt's C;
 *   --dynamic  every cgm_hgemm call gets a tile counter (the dynamic tile
 *           schedule where cgm_hgemm takes it), so that an A/B of the
 *           static and the dynamic schedule alternates two processes.
 * Inputs are multiples of 1/8 (tests/gpu/hgemm_values.h); each bench checks
 * ours against cuBLASLt and prints OK or FAILED last (exit 1 on FAILED,
 * 77 without an sm_90 GPU). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hgemm_values.h"
#include "kernel_bench.h"

void kb_cuda(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "commgemm-kernel-bench: %s:%d: %s: %s (%s)\n", file, line, call, cudaGetErrorName(e),
            cudaGetErrorString(e));
    exit(1);
}

void kb_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "commgemm-kernel-bench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void *kb_to_device(const void *host, size_t bytes) {
    void *d = NULL;
    KB_CUDA(cudaMalloc(&d, bytes + 64));
    KB_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

void *kb_fill_device(cgm_dtype t, size_t count, unsigned long long seed) {
    void *h = hv_fill(t, count, seed);
    if (!h) kb_die("malloc %zu bytes", count * hv_size(t));
    void *d = kb_to_device(h, count * hv_size(t));
    free(h);
    return d;
}

cgm_lt *kb_lt(void **ws, size_t *ws_bytes) {
    static cgm_lt *lt;
    static void *workspace;
    if (!lt) {
        if (cgm_lt_create(&lt) != CGM_SUCCESS) kb_die("cgm_lt_create: %s", cgm_last_error());
        KB_CUDA(cudaMalloc(&workspace, 32u << 20));
    }
    *ws = workspace;
    *ws_bytes = 32u << 20;
    return lt;
}

bool kb_device(const char *bench, struct cudaDeviceProp *prop) {
    int count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && cudaGetDeviceProperties(prop, 0) == cudaSuccess &&
        prop->major == 9 && prop->minor == 0)
        return true;
    printf("# skip: %s needs an sm_90 GPU\n", bench);
    return false;
}

size_t kb_bf16_differ(const void *a, const void *b, size_t count, long long k) {
    size_t differ = 0;
    for (size_t i = 0; i < count; i++) {
        float x = hv_bf16_float(((const uint16_t *)a)[i]), y = hv_bf16_float(((const uint16_t *)b)[i]);
        if (!(fabsf(x - y) <= fabsf(y) / 128 + 1e-6f * (float)k)) differ++;
    }
    return differ;
}

/* The tile counter of --dynamic: one for the process (every call runs on
 * stream 0, one at a time), zero before its first use. */
static unsigned int *dynamic_counter(void) {
    static unsigned int *d;
    if (!d) {
        KB_CUDA(cudaMalloc((void **)&d, sizeof *d));
        KB_CUDA(cudaMemset(d, 0, sizeof *d));
    }
    return d;
}

static void run_contender(const kb_contenders *c, int who) {
    bool first = who < c->nfirst;
    int i = first ? who : who - c->nfirst;
    if (first != c->lt_first) {
        cgm_hgemm_args a = c->hg[i];
        if (c->dynamic && !a.tile_counter) a.tile_counter = dynamic_counter();
        KB_CUDA(cgm_hgemm(&a, 0));
        return;
    }
    void *ws;
    size_t ws_bytes;
    cgm_lt *lt = kb_lt(&ws, &ws_bytes);
    if (cgm_lt_gemm(lt, &c->lt_args[i], ws, ws_bytes, 0) != CGM_SUCCESS)
        kb_die("cgm_lt_gemm: %s", cgm_last_error());
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void kb_time_interleaved(int who_count, const kb_contenders *c, float *t) {
    cudaEvent_t ev[2 * KB_MAX_WHO];
    float times[KB_MAX_WHO][KB_ROUNDS];
    if (who_count > KB_MAX_WHO) kb_die("%d contenders, at most %d", who_count, KB_MAX_WHO);
    for (int i = 0; i < 2 * who_count; i++) KB_CUDA(cudaEventCreate(&ev[i]));
    for (int r = -5; r < KB_ROUNDS; r++) {
        for (int turn = 0; turn < who_count; turn++) {
            int who = (turn + r + 5) % who_count;
            KB_CUDA(cudaEventRecord(ev[2 * who], 0));
            for (int call = 0; call < KB_CALLS; call++) run_contender(c, who);
            KB_CUDA(cudaEventRecord(ev[2 * who + 1], 0));
        }
        KB_CUDA(cudaStreamSynchronize(0));
        if (r < 0) continue;
        for (int who = 0; who < who_count; who++)
            KB_CUDA(cudaEventElapsedTime(&times[who][r], ev[2 * who], ev[2 * who + 1]));
    }
    for (int who = 0; who < who_count; who++) {
        qsort(times[who], KB_ROUNDS, sizeof times[who][0], cmp_float);
        float med = KB_ROUNDS % 2 ? times[who][KB_ROUNDS / 2]
                                  : 0.5f * (times[who][KB_ROUNDS / 2 - 1] + times[who][KB_ROUNDS / 2]);
        t[who] = med * 1000 / KB_CALLS;
    }
    for (int i = 0; i < 2 * who_count; i++) cudaEventDestroy(ev[i]);
}

/* One shape of the plain bench: cooperative, ping-pong, auto and
 * cuBLASLt. Checks cooperative and ping-pong against cuBLASLt on the whole
 * output, and auto bit for bit against the variant it chose. Returns 0
 * when all match. */
#define PLAIN_WHO 4
static int plain_shape(const kb_options *o, long long m, long long n, long long k) {
    size_t ny = (size_t)(m * n);
    void *dx = kb_fill_device(CGM_DTYPE_BF16, (size_t)(m * k), 1);
    void *dw = kb_fill_device(CGM_DTYPE_BF16, (size_t)(n * k), 2), *dy[3], *dref;
    for (int v = 0; v < 3; v++) KB_CUDA(cudaMalloc(&dy[v], ny * 2));
    KB_CUDA(cudaMalloc(&dref, ny * 2));
    cgm_hgemm_args a[3];
    const int variants[3] = {CGM_HGEMM_COOPERATIVE, CGM_HGEMM_PINGPONG, CGM_HGEMM_AUTO};
    for (int v = 0; v < 3; v++) {
        memset(&a[v], 0, sizeof a[v]);
        a[v].in_dtype = a[v].out_dtype = CGM_DTYPE_BF16;
        a[v].m = m, a[v].n = n, a[v].k = k, a[v].x = dx, a[v].ldx = k, a[v].w = dw, a[v].ldw = k;
        a[v].y = dy[v], a[v].ldy = n;
        a[v].variant = variants[v];
    }
    int chosen = cgm_hgemm_variant_for(&a[2]);
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = g.out_dtype = CGM_DTYPE_BF16;
    g.m = m, g.n = n, g.k = k, g.x = dx, g.ldx = k, g.w = dw, g.ldw = k, g.y = dref, g.ldy = n;
    float t[PLAIN_WHO];
    kb_contenders who = {a, &g, 3, false, o->dynamic};
    kb_time_interleaved(PLAIN_WHO, &who, t);
    double flop = 2.0 * (double)m * (double)n * (double)k;
    uint16_t *hy = malloc(ny * 2), *href = malloc(ny * 2), *hauto = malloc(ny * 2);
    if (!hy || !href || !hauto) kb_die("malloc 3 x %zu bytes", ny * 2);
    KB_CUDA(cudaMemcpy(href, dref, ny * 2, cudaMemcpyDeviceToHost));
    KB_CUDA(cudaMemcpy(hauto, dy[2], ny * 2, cudaMemcpyDeviceToHost));
    size_t wrong[2] = {0, 0};
    int auto_differs = 0;
    for (int v = 0; v < 2; v++) {
        KB_CUDA(cudaMemcpy(hy, dy[v], ny * 2, cudaMemcpyDeviceToHost));
        wrong[v] = kb_bf16_differ(hy, href, ny, k);
        if (variants[v] == chosen) auto_differs = memcmp(hy, hauto, ny * 2) != 0;
    }
    int bad = wrong[0] || wrong[1] || auto_differs;
    printf("%6lld %6lld %6lld  %8.1f %8.1f %8.1f %8.1f  %6.1f %6.1f %6.1f %6.1f  %6.3f %6.3f %6.3f  %-4s  %s\n", m, n,
           k, t[0], t[1], t[2], t[3], flop / t[0] * 1e-6, flop / t[1] * 1e-6, flop / t[2] * 1e-6, flop / t[3] * 1e-6,
           t[3] / t[0], t[3] / t[1], t[3] / t[2], chosen == CGM_HGEMM_PINGPONG ? "pp" : "coop", bad ? "WRONG" : "ok");
    for (int v = 0; v < 2; v++)
        if (wrong[v])
            printf("#   %s: %zu of %zu elements differ from cuBLASLt\n",
                   variants[v] == CGM_HGEMM_PINGPONG ? "ping-pong" : "cooperative", wrong[v], ny);
    if (auto_differs) printf("#   auto: not bit for bit the output of the variant it chose\n");
    for (int v = 0; v < 3; v++) cudaFree(dy[v]);
    cudaFree(dx), cudaFree(dw), cudaFree(dref);
    free(hy), free(href), free(hauto);
    return bad;
}

static const long long plain_shapes[][3] = {{16384, 2048, 8192}, {8192, 4096, 4096},  {16384, 8192, 2048},
                                            {4096, 4096, 4096},  {8192, 8192, 8192},  {2048, 8192, 8192},
                                            {8192, 2048, 4096},  {4096, 16384, 4096}};

int kb_plain(const kb_options *o) {
    struct cudaDeviceProp prop;
    if (!kb_device("plain", &prop)) return 77;
    printf("# cgm_hgemm (cooperative, ping-pong, auto) vs cuBLASLt, bf16 in/out, TN, %s (sm_%d%d, %d SMs)%s; "
           "medians of %d interleaved rounds x %d calls\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, o->dynamic ? ", --dynamic" : "", KB_ROUNDS,
           KB_CALLS);
    printf("#    m      n      k   coop_us    pp_us  auto_us  cuLt_us  coopTF   ppTF autoTF cuLtTF  r_coop   r_pp "
           "r_auto  auto  check\n");
    int bad = 0, count = o->nshapes ? o->nshapes : (int)(sizeof plain_shapes / sizeof plain_shapes[0]);
    for (int i = 0; i < count; i++) {
        const long long *s = o->nshapes ? o->shapes[i] : plain_shapes[i];
        bad += plain_shape(o, s[0], s[1], s[2]);
    }
    printf("# r_* = cuBLASLt time / ours; coop = cooperative 128x256, pp = ping-pong 128x128, auto = "
           "CGM_HGEMM_AUTO (column auto: the variant it ran); %s\n",
           bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}

/* --shapes MxNxK,...: k rounded up to a multiple of 8 (TMA's row
 * strides). */
static int parse_shapes(const char *list, kb_options *o) {
    char *copy = strdup(list), *save = NULL;
    if (!copy) return -1;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        long long m, n, k;
        if (o->nshapes == KB_MAX_SHAPES || sscanf(tok, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n < 1 ||
            k < 8) {
            fprintf(stderr, "commgemm-kernel-bench: --shapes: expected at most %d of MxNxK (k >= 8), found '%s'\n",
                    KB_MAX_SHAPES, tok);
            rc = -1;
            break;
        }
        o->shapes[o->nshapes][0] = m, o->shapes[o->nshapes][1] = n, o->shapes[o->nshapes][2] = (k + 7) / 8 * 8;
        o->nshapes++;
    }
    free(copy);
    return rc;
}

static void usage(FILE *to) {
    fprintf(to, "usage: commgemm-kernel-bench [plain|ag|fused|addend] [--shapes MxNxK,...] [--dynamic] "
                "[--only V]\n");
}

int main(int argc, char **argv) {
    kb_options o;
    memset(&o, 0, sizeof o);
    o.bench = "plain";
    o.only = -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(arg, "--shapes") && i + 1 < argc) {
            if (parse_shapes(argv[++i], &o)) return 2;
        } else if (!strcmp(arg, "--dynamic")) {
            o.dynamic = true;
        } else if (!strcmp(arg, "--only") && i + 1 < argc) {
            o.only = atoi(argv[++i]);
        } else if (i == 1 && arg[0] != '-') {
            o.bench = arg;
        } else {
            fprintf(stderr, "commgemm-kernel-bench: unknown argument '%s'\n", arg);
            usage(stderr);
            return 2;
        }
    }
    if (!strcmp(o.bench, "plain")) return kb_plain(&o);
    if (!strcmp(o.bench, "ag")) return kb_ag(&o);
    if (!strcmp(o.bench, "fused")) return kb_fused(&o);
    if (!strcmp(o.bench, "addend")) return kb_addend(&o);
    fprintf(stderr, "commgemm-kernel-bench: no bench '%s': expected plain, ag, fused or addend\n", o.bench);
    return 2;
}
