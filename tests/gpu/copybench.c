/* Peer copy rates between GPU 0 and GPU 1 of one host: what bounds the
 * pushes of the p2p backend (not a test; scripts/device-suite.sh stage
 * `copybench`). The fused AG pushed at ~280 GB/s per direction while both
 * GPUs pushed, against ~390 GB/s one way (docs/PERFORMANCE.md 4c); these
 * cases separate the candidate causes:
 *   - one way against both ways at once;
 *   - cudaMemcpyAsync against cudaMemcpy2DAsync with 16 KiB rows (what the
 *     backend issues: rows of k bf16 elements);
 *   - one stream per direction against 2 or 4 (more copy engines);
 *   - the transfer cut in 2, 4 or 8 pieces with the backend's flag signal
 *     (cgm_dev_signal) after each, on the copy stream itself (the next
 *     piece waits for the signal kernel) or on a second stream that follows
 *     the copies through events (the copies run back to back);
 *   - both ways while each GPU computes (commgemm's kernel, 8192x8192x2048
 *     bf16 back to back on all SMs but one, as the fused algorithm runs it)
 *     or streams HBM (a cudaMemsetAsync of 4 GiB), started before the
 *     copies: the fused GEMM+RS pushed at 250-285 GB/s beside its GEMMs
 *     (docs/PERFORMANCE.md 4h), against ~385 GB/s alone. The GEMM runs on
 *     zero operands and, in the `random` cases, on random ones (more
 *     switching, more power: 4i measured 383 GB/s beside the zero GEMM);
 *   - as in the fused GEMM+RS: the GEMM writing its output into the very
 *     buffer the copies read, or reading its X from the buffer the other
 *     GPU's copies land in (values race; only the rates matter). 4i found
 *     the copies at >= 374 GB/s in every other case, against 230-285 GB/s
 *     in the ops.
 * Every case runs once per round, the order rotated each round; medians of
 * the rounds, per direction, the slower direction reported.
 *   copybench [MiB per direction, default 128] [rounds, default 15] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_tools.h"

#include "device/device.h"
#include "device/hopper_gemm.h"

#define MAX_STREAMS 4
#define MAX_PIECES 8

#define OK(call)                                                                   \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                   \
            fprintf(stderr, "copybench: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

typedef struct side {
    int dev;
    cudaStream_t s[MAX_STREAMS], beside;
    cudaEvent_t start, stop, fork, joined[MAX_STREAMS], piece[MAX_PIECES];
    char *src;                /* on dev */
    char *dst;                /* on the other GPU */
    unsigned long long *flags; /* on the other GPU */
    cgm_dev_state *state;     /* on dev */
    /* The load beside the copies (LOAD_GEMM, LOAD_HBM). */
    cudaStream_t load;
    cgm_hgemm_args gemm; /* .x/.w/.y on dev; .m 0: no sm_90, no GEMM load */
    cgm_hgemm_args gemm_random; /* the same GEMM on random operands */
    /* The random GEMM writing its output into this side's copy source, and
     * reading its X from the buffer the other side's copies land in (set
     * once both sides have buffers: setup_targets). */
    cgm_hgemm_args gemm_writes_src, gemm_reads_dst;
    void *hbm;           /* LOAD_HBM_BYTES on dev */
    int sms;
} side;

typedef enum { PLAIN, ROWS_2D, STREAMS, PIECES_ON_STREAM, PIECES_BESIDE } kind;
typedef enum {
    NO_LOAD,
    LOAD_GEMM,
    LOAD_GEMM_RANDOM,
    LOAD_GEMM_WRITES_SRC,
    LOAD_GEMM_READS_DST,
    LOAD_HBM
} load_kind;

#define LOAD_M 8192
#define LOAD_N 8192
#define LOAD_K 2048
#define LOAD_HBM_BYTES ((size_t)4 << 30)

typedef struct bench_case {
    const char *name;
    int both; /* 1: both directions at once */
    kind how;
    int count; /* streams or pieces */
    load_kind load;
} bench_case;

static const bench_case cases[] = {
    {"one way, cudaMemcpyAsync", 0, PLAIN, 1, NO_LOAD},
    {"one way, 2D rows of 16 KiB", 0, ROWS_2D, 1, NO_LOAD},
    {"both ways, cudaMemcpyAsync", 1, PLAIN, 1, NO_LOAD},
    {"both ways, 2D rows of 16 KiB", 1, ROWS_2D, 1, NO_LOAD},
    {"both ways, 2 streams per direction", 1, STREAMS, 2, NO_LOAD},
    {"both ways, 4 streams per direction", 1, STREAMS, 4, NO_LOAD},
    {"both ways, 2 pieces, signal on the copy stream", 1, PIECES_ON_STREAM, 2, NO_LOAD},
    {"both ways, 2 pieces, signal beside", 1, PIECES_BESIDE, 2, NO_LOAD},
    {"both ways, 4 pieces, signal on the copy stream", 1, PIECES_ON_STREAM, 4, NO_LOAD},
    {"both ways, 4 pieces, signal beside", 1, PIECES_BESIDE, 4, NO_LOAD},
    {"both ways, 8 pieces, signal on the copy stream", 1, PIECES_ON_STREAM, 8, NO_LOAD},
    {"both ways, 8 pieces, signal beside", 1, PIECES_BESIDE, 8, NO_LOAD},
    {"both ways, beside a GEMM on each GPU", 1, PLAIN, 1, LOAD_GEMM},
    {"both ways, 4 pieces, signal beside, beside a GEMM", 1, PIECES_BESIDE, 4, LOAD_GEMM},
    {"one way, beside a GEMM on each GPU", 0, PLAIN, 1, LOAD_GEMM},
    {"both ways, beside a GEMM of random operands", 1, PLAIN, 1, LOAD_GEMM_RANDOM},
    {"both ways, 4 pieces, signal beside, random GEMM", 1, PIECES_BESIDE, 4, LOAD_GEMM_RANDOM},
    {"both ways, the GEMM writing the copies' source", 1, PLAIN, 1, LOAD_GEMM_WRITES_SRC},
    {"both ways, the GEMM reading where copies land", 1, PLAIN, 1, LOAD_GEMM_READS_DST},
    {"both ways, beside a 4 GiB memset on each GPU", 1, PLAIN, 1, LOAD_HBM},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static void setup(side *d, int dev, size_t bytes) {
    d->dev = dev;
    OK(cudaSetDevice(dev));
    cudaError_t pe = cudaDeviceEnablePeerAccess(1 - dev, 0);
    if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) OK(pe);
    (void)cudaGetLastError();
    for (int i = 0; i < MAX_STREAMS; i++) {
        OK(cudaStreamCreateWithFlags(&d->s[i], cudaStreamNonBlocking));
        OK(cudaEventCreateWithFlags(&d->joined[i], cudaEventDisableTiming));
    }
    OK(cudaStreamCreateWithFlags(&d->beside, cudaStreamNonBlocking));
    OK(cudaEventCreate(&d->start));
    OK(cudaEventCreate(&d->stop));
    OK(cudaEventCreateWithFlags(&d->fork, cudaEventDisableTiming));
    for (int i = 0; i < MAX_PIECES; i++)
        OK(cudaEventCreateWithFlags(&d->piece[i], cudaEventDisableTiming));
    OK(cudaMalloc((void **)&d->src, bytes));
    OK(cudaMemset(d->src, dev + 1, bytes));
    OK(cudaMalloc((void **)&d->state, sizeof *d->state));
    OK(cudaMemset(d->state, 0, sizeof *d->state));
    OK(cgm_dev_preload());
    OK(cgm_hgemm_preload());
    OK(cudaStreamCreateWithFlags(&d->load, cudaStreamNonBlocking));
    OK(cudaMalloc(&d->hbm, LOAD_HBM_BYTES));
    OK(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, dev));
    cgm_hgemm_args *g = &d->gemm;
    memset(g, 0, sizeof *g);
    g->in_dtype = g->out_dtype = CGM_DTYPE_BF16;
    g->m = LOAD_M, g->n = LOAD_N, g->k = LOAD_K, g->ldx = g->ldw = LOAD_K, g->ldy = LOAD_N;
    OK(cudaMalloc((void **)&g->x, (size_t)LOAD_M * LOAD_K * 2));
    OK(cudaMalloc((void **)&g->w, (size_t)LOAD_N * LOAD_K * 2));
    OK(cudaMalloc(&g->y, (size_t)LOAD_M * LOAD_N * 2));
    OK(cudaMemset((void *)g->x, 0, (size_t)LOAD_M * LOAD_K * 2));
    OK(cudaMemset((void *)g->w, 0, (size_t)LOAD_N * LOAD_K * 2));
    g->sm_count = d->sms > 1 ? d->sms - 1 : 1; /* as the fused algorithm */
    const char *why = NULL;
    if (!cgm_hgemm_supported(g, &why)) {
        printf("# GPU %d: no GEMM load (%s); those cases copy without it\n", dev, why);
        g->m = 0;
    }
    /* Zero operands keep the tensor cores' switching (and the board's
     * power) low; a GEMM of real data may lower the clocks the copies see. */
    d->gemm_random = *g;
    size_t nx = (size_t)LOAD_M * LOAD_K, nw = (size_t)LOAD_N * LOAD_K;
    uint16_t *h = malloc((nx > nw ? nx : nw) * sizeof *h);
    if (!h) {
        fprintf(stderr, "copybench: out of host memory\n");
        exit(1);
    }
    uint32_t seed = 12345u + (uint32_t)dev;
    for (int which = 0; which < 2; which++) {
        size_t count = which ? nw : nx;
        for (size_t i = 0; i < count; i++) {
            seed = seed * 1664525u + 1013904223u;
            float v = (float)(seed >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
            uint32_t bits;
            memcpy(&bits, &v, sizeof bits);
            h[i] = (uint16_t)(bits >> 16); /* bf16: the float's high half */
        }
        void **dst = which ? (void **)&d->gemm_random.w : (void **)&d->gemm_random.x;
        OK(cudaMalloc(dst, count * 2));
        OK(cudaMemcpy(*dst, h, count * 2, cudaMemcpyHostToDevice));
    }
    free(h);
}

/* Work on `d->load` (the current device is d's) that outlasts a copy of
 * `bytes` (at >= 100 GB/s): GEMMs
 * of about 2 * m * n * k / 700 TFLOP/s each, or one memset; enqueued before
 * the copy so that it is running when the copy starts. */
static void enqueue_load(side *d, load_kind load, size_t bytes) {
    double copy_us = (double)bytes / 100e3;
    if (load != NO_LOAD && load != LOAD_HBM && d->gemm.m > 0) {
        double gemm_us = 2.0 * LOAD_M * LOAD_N * LOAD_K / 700e6;
        int launches = (int)(copy_us / gemm_us) + 1;
        const cgm_hgemm_args *g = load == LOAD_GEMM              ? &d->gemm
                                  : load == LOAD_GEMM_WRITES_SRC ? &d->gemm_writes_src
                                  : load == LOAD_GEMM_READS_DST  ? &d->gemm_reads_dst
                                                                 : &d->gemm_random;
        for (int i = 0; i < launches; i++) OK(cgm_hgemm(g, d->load));
    } else if (load == LOAD_HBM) {
        OK(cudaMemsetAsync(d->hbm, 0, LOAD_HBM_BYTES, d->load));
    }
}

/* The other GPU's buffers that `d` writes. */
static void setup_targets(side *d, size_t bytes) {
    OK(cudaSetDevice(1 - d->dev));
    OK(cudaMalloc((void **)&d->dst, bytes));
    OK(cudaMalloc((void **)&d->flags, MAX_PIECES * sizeof *d->flags));
    OK(cudaMemset(d->flags, 0, MAX_PIECES * sizeof *d->flags));
}

static void enqueue(side *d, const bench_case *c, size_t bytes) {
    OK(cudaSetDevice(d->dev));
    cudaStream_t s0 = d->s[0];
    OK(cudaEventRecord(d->start, s0));
    switch (c->how) {
    case PLAIN:
        OK(cudaMemcpyAsync(d->dst, d->src, bytes, cudaMemcpyDefault, s0));
        break;
    case ROWS_2D: {
        size_t row = 16384;
        OK(cudaMemcpy2DAsync(d->dst, row, d->src, row, row, bytes / row, cudaMemcpyDefault, s0));
        break;
    }
    case STREAMS: {
        size_t part = bytes / (size_t)c->count;
        OK(cudaEventRecord(d->fork, s0));
        for (int i = 0; i < c->count; i++) {
            if (i) OK(cudaStreamWaitEvent(d->s[i], d->fork, 0));
            OK(cudaMemcpyAsync(d->dst + i * part, d->src + i * part, part, cudaMemcpyDefault,
                               d->s[i]));
        }
        for (int i = 1; i < c->count; i++) {
            OK(cudaEventRecord(d->joined[i], d->s[i]));
            OK(cudaStreamWaitEvent(s0, d->joined[i], 0));
        }
        break;
    }
    case PIECES_ON_STREAM:
    case PIECES_BESIDE: {
        size_t part = bytes / (size_t)c->count;
        for (int q = 0; q < c->count; q++) {
            OK(cudaMemcpyAsync(d->dst + q * part, d->src + q * part, part, cudaMemcpyDefault, s0));
            if (c->how == PIECES_ON_STREAM) {
                OK(cgm_dev_signal(d->state, d->flags + q, s0));
            } else {
                OK(cudaEventRecord(d->piece[q], s0));
                OK(cudaStreamWaitEvent(d->beside, d->piece[q], 0));
                OK(cgm_dev_signal(d->state, d->flags + q, d->beside));
            }
        }
        if (c->how == PIECES_BESIDE) { /* the span includes the last signal */
            OK(cudaEventRecord(d->joined[0], d->beside));
            OK(cudaStreamWaitEvent(s0, d->joined[0], 0));
        }
        break;
    }
    }
    OK(cudaEventRecord(d->stop, s0));
}

static float elapsed_us(side *d) {
    float ms = 0;
    OK(cudaSetDevice(d->dev));
    OK(cudaEventElapsedTime(&ms, d->start, d->stop));
    return ms * 1000;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 128;
    int rounds = argc > 2 ? atoi(argv[2]) : 15;
    if (mib < 1 || rounds < 1) {
        fprintf(stderr, "usage: copybench [MiB per direction >= 1] [rounds >= 1]\n");
        return 2;
    }
    size_t bytes = mib << 20;
    int skip = two_peer_gpus_or_skip("copybench");
    if (skip) return skip;
    side d[2];
    memset(d, 0, sizeof d);
    for (int i = 0; i < 2; i++) setup(&d[i], i, bytes);
    for (int i = 0; i < 2; i++) setup_targets(&d[i], bytes);
    for (int i = 0; i < 2; i++) { /* the op-like loads (the bytes bound their rows) */
        cgm_hgemm_args *w = &d[i].gemm_writes_src, *r = &d[i].gemm_reads_dst;
        *w = *r = d[i].gemm_random;
        w->y = d[i].src;
        if ((size_t)w->m * LOAD_N * 2 > bytes) w->m = (int64_t)(bytes / (LOAD_N * 2));
        r->x = d[1 - i].dst; /* on GPU i: where GPU 1 - i's copies land */
        if ((size_t)r->m * LOAD_K * 2 > bytes) r->m = (int64_t)(bytes / (LOAD_K * 2));
    }
    float *t = calloc((size_t)NCASES * 2 * (size_t)rounds, sizeof *t);
    if (!t) return 1;
    for (int r = -2; r < rounds; r++) { /* two rounds of warm-up */
        for (int j = 0; j < NCASES; j++) {
            const bench_case *c = &cases[(j + (r < 0 ? 0 : r)) % NCASES];
            int ci = (int)(c - cases);
            for (int i = 0; i < 2; i++) {
                OK(cudaSetDevice(i));
                OK(cudaDeviceSynchronize());
            }
            for (int i = 0; i < 2 && c->load != NO_LOAD; i++) { /* on both GPUs, first */
                OK(cudaSetDevice(i));
                enqueue_load(&d[i], c->load, bytes);
            }
            enqueue(&d[0], c, bytes);
            if (c->both) enqueue(&d[1], c, bytes);
            for (int i = 0; i < 2; i++) {
                OK(cudaSetDevice(i));
                OK(cudaDeviceSynchronize());
            }
            if (r < 0) continue;
            t[(ci * 2 + 0) * rounds + r] = elapsed_us(&d[0]);
            t[(ci * 2 + 1) * rounds + r] = c->both ? elapsed_us(&d[1]) : 0;
        }
    }
    printf("# copybench: %zu MiB per direction, GPU0 <-> GPU1, medians of %d interleaved rounds\n",
           mib, rounds);
    printf("# %-50s %12s %12s %14s\n", "case", "0->1 us", "1->0 us", "GB/s per dir");
    for (int ci = 0; ci < NCASES; ci++) {
        float med[2];
        for (int i = 0; i < 2; i++) {
            med[i] = tool_median(t + (ci * 2 + i) * rounds, rounds);
        }
        float worst = med[0] > med[1] ? med[0] : med[1];
        printf("  %-50s %12.1f %12.1f %14.1f\n", cases[ci].name, med[0], med[1],
               worst > 0 ? (double)bytes / (worst * 1e3) : 0.0);
    }
    free(t);
    return 0;
}
