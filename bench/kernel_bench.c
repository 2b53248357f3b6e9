/* commgemm-kernel-bench: commgemm's own Hopper GEMM (src/device/hopper/)
 * on one GPU, bf16 in, TN.
 *
 *   commgemm-kernel-bench [plain|ag|fused|addend|epilogue] [--shapes MxNxK,...]
 *                         [--dynamic] [--only V] [--sweep] [--dtype D]
 *                         [--lt-reduction-fp32] [--split] [--split-parts N]
 *
 *   plain   (default) cooperative, ping-pong and auto against cuBLASLt,
 *           each checked against the exact product on a sample of every
 *           output (kernel_bench_plain.c); --sweep runs its 60 shapes
 *           (odd m and n, n below a tile multiple, small k, skinny m, the
 *           Llama layers split 2, 4 and 8 ways) with a summary per class;
 *           --dtype bf16 (default) or fp16, or e4m3 (X and W e4m3 with
 *           per-tensor scales, Y bf16; cuBLASLt's FP8 matmul with
 *           FAST_ACCUM, as ours accumulates); --lt-reduction-fp32: cuBLASLt
 *           adds split-k parts in fp32 only (CGM_GEMM_REDUCTION_FP32);
 *           --split: our calls get a tail split workspace (split_ws: the
 *           last partial wave's tiles cut along k where the model says it
 *           pays), so that an A/B of the split alternates two processes;
 *           --split-parts N: the same with N parts (tail_split N: 1 none,
 *           2..8), to measure the model's choice against the others;
 *   ag      what the fused all-gather's hooks cost, one at a time
 *           (kernel_bench_fused.c); --only V times contender V alone (for
 *           a profiler);
 *   fused   the fused all-gather's and reduce-scatter's forms, every flag
 *           already at the epoch, and a peer copy beside the kernel;
 *   addend  an epilogue addend, ours against cuBLASLt's C;
 *   epilogue  GELU_AUX with a bias and DGELU_BGRAD, ours against
 *           cuBLASLt's same epilogues (kernel_bench_epi.c);
 *   --dynamic  every cgm_hgemm call gets a tile counter (the dynamic tile
 *           schedule where cgm_hgemm takes it), so that an A/B of the
 *           static and the dynamic schedule alternates two processes.
 * Inputs are multiples of 1/8 (tests/gpu/hgemm_values.h); plain checks
 * every side against the exact product, the others ours against cuBLASLt;
 * each prints OK or FAILED last (exit 1 on FAILED, 77 without an sm_90
 * GPU). */
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

void kb_split_ws(cgm_hgemm_args *a, int count, size_t *want) {
    static void *ws;
    static size_t have;
    size_t most = 0;
    for (int i = 0; i < count; i++) {
        want[i] = cgm_hgemm_split_ws_bytes(&a[i]);
        most = want[i] > most ? want[i] : most;
    }
    if (most > have) {
        KB_CUDA(cudaDeviceSynchronize());
        cudaFree(ws);
        KB_CUDA(cudaMalloc(&ws, most));
        KB_CUDA(cudaMemset(ws, 0, most)); /* the counters zero before the first use */
        have = most;
    }
    for (int i = 0; i < count; i++)
        if (want[i]) a[i].split_ws = ws, a[i].split_ws_bytes = have;
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
    fprintf(to, "usage: commgemm-kernel-bench [plain|ag|fused|addend|epilogue] [--shapes MxNxK,...] [--dynamic] "
                "[--only V]\n"
                "       plain only: [--sweep] [--dtype bf16|fp16|e4m3] [--fp8 fast|promote|block] "
                "[--lt-reduction-fp32] [--split] [--split-parts N]\n");
}

int main(int argc, char **argv) {
    kb_options o;
    memset(&o, 0, sizeof o);
    o.bench = "plain";
    o.only = -1;
    o.dtype = CGM_DTYPE_BF16;
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
        } else if (!strcmp(arg, "--sweep")) {
            o.sweep = true;
        } else if (!strcmp(arg, "--lt-reduction-fp32")) {
            o.lt_reduction_fp32 = true;
        } else if (!strcmp(arg, "--split")) {
            o.split = true;
        } else if (!strcmp(arg, "--split-parts") && i + 1 < argc) {
            const char *v = argv[++i];
            char *end = NULL;
            long parts = strtol(v, &end, 10);
            if (!*v || *end || parts < 1 || parts > CGM_HGEMM_SPLIT_MAX_PARTS) {
                fprintf(stderr, "commgemm-kernel-bench: --split-parts: expected 1..%d, found '%s'\n",
                        CGM_HGEMM_SPLIT_MAX_PARTS, v);
                return 2;
            }
            o.split = true, o.split_parts = (int)parts;
        } else if (!strcmp(arg, "--fp8") && i + 1 < argc) {
            const char *f = argv[++i];
            if (strcmp(f, "fast") && strcmp(f, "promote") && strcmp(f, "block")) {
                fprintf(stderr, "commgemm-kernel-bench: --fp8: expected fast, promote or block, found '%s'\n", f);
                return 2;
            }
            o.fp8_mode = !strcmp(f, "fast") ? KB_FP8_FAST : !strcmp(f, "promote") ? KB_FP8_PROMOTE : KB_FP8_BLOCK;
        } else if (!strcmp(arg, "--dtype") && i + 1 < argc) {
            const char *d = argv[++i];
            if (strcmp(d, "bf16") && strcmp(d, "fp16") && strcmp(d, "e4m3")) {
                fprintf(stderr, "commgemm-kernel-bench: --dtype: expected bf16, fp16 or e4m3, found '%s'\n", d);
                return 2;
            }
            o.dtype = !strcmp(d, "e4m3") ? CGM_DTYPE_FP8_E4M3 : strcmp(d, "bf16") ? CGM_DTYPE_FP16 : CGM_DTYPE_BF16;
        } else if (i == 1 && arg[0] != '-') {
            o.bench = arg;
        } else {
            fprintf(stderr, "commgemm-kernel-bench: unknown argument '%s'\n", arg);
            usage(stderr);
            return 2;
        }
    }
    bool plain = !strcmp(o.bench, "plain");
    if (!plain && (o.sweep || o.lt_reduction_fp32 || o.dtype != CGM_DTYPE_BF16 || o.fp8_mode || o.split)) {
        fprintf(stderr,
                "commgemm-kernel-bench: --sweep, --dtype, --fp8, --lt-reduction-fp32 and --split are plain's only\n");
        return 2;
    }
    if (o.fp8_mode && o.dtype != CGM_DTYPE_FP8_E4M3) {
        fprintf(stderr, "commgemm-kernel-bench: --fp8 promote or block needs --dtype e4m3\n");
        return 2;
    }
    if (o.sweep && o.nshapes) {
        fprintf(stderr, "commgemm-kernel-bench: --sweep or --shapes, not both\n");
        return 2;
    }
    if (plain) return kb_plain(&o);
    if (!strcmp(o.bench, "ag")) return kb_ag(&o);
    if (!strcmp(o.bench, "fused")) return kb_fused(&o);
    if (!strcmp(o.bench, "addend")) return kb_addend(&o);
    if (!strcmp(o.bench, "epilogue")) return kb_epilogue(&o);
    fprintf(stderr, "commgemm-kernel-bench: no bench '%s': expected plain, ag, fused, addend or epilogue\n",
            o.bench);
    return 2;
}
