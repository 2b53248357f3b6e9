/* What the GEMM pieces of the p2p GEMM+RS cost, apart from commgemm's
 * plan, flags and processes (not a test; scripts/device-suite.sh stage
 * `gemmbeside`). One process drives GPU 0 and GPU 1 (peer access on), each
 * with the per-rank GEMM of a 2-rank GEMM+RS of m x n x (2k): X[m, k] .
 * W[n, k]^T, bf16 in and out, through the library's cuBLASLt path (with
 * its measured algorithm search, as the ops run it). Cases, on both GPUs
 * at once, each round in a rotated order:
 *   whole         one GEMM of all m rows: the bench's `gemm_us`;
 *   pieces        the split GEMM+RS's compute queue without anything
 *                 else: 2S GEMMs of m/(2S) rows, the S peer pieces into a
 *                 partial buffer, then the S own pieces into the output
 *                 with the received partial as cuBLASLt's C (the GEMM form
 *                 of COMMGEMM_RS_OWN);
 *   skeleton      the same GEMMs plus the pushes, ordered by CUDA events
 *                 only: peer piece i's rows are copied (copy engine, one
 *                 stream) into the other GPU's receive buffer after its
 *                 GEMM, and own piece i waits for the other GPU's push i.
 *                 This is the split schedule with ideal waits: no flag
 *                 kernels, no epochs, no second process;
 *   pieces+flood  the pieces while both GPUs copy 1 GiB to each other the
 *                 whole time (the copies' worst interference);
 *   whole+flood   the whole GEMM in the same flood.
 * With the suffix ":ag" the shape is the per-rank GEMM of a 2-rank
 * AG+GEMM (all m rows, this rank's n columns): the pieces are this GPU's
 * own shard's S pieces, then the other shard's S; in skeleton each GPU
 * pushes its shard's X rows piece by piece into the other's X from the
 * start, and a peer piece waits for its push.
 * Both GPUs start behind one event (a memset on GPU 0), so a cross-GPU
 * wait does not see the host's launch skew. Times are the slower GPU's
 * span from that start to its last GEMM (and, in skeleton, its last push),
 * medians over the rounds.
 *   gemmbeside [rounds, default 9] [m x n x k : S [:ag] ...]
 * default shapes: the balanced GEMM+RS rows of docs/PERFORMANCE.md 4k and
 * three AG+GEMM rows. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "gpu_tools.h"

#include "backend/gpu/gpu.h"

#define WS_BYTES (32u << 20) /* P2P_LT_WORKSPACE */
#define FLOOD_BYTES ((size_t)1 << 30)
#define GATE_BYTES ((size_t)256 << 20)
#define MAX_S 8

#define OK(call)                                                                   \
    do {                                                                           \
        cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                   \
            fprintf(stderr, "gemmbeside: %s failed: %s\n", #call,                  \
                    cudaGetErrorString(e_));                                       \
            exit(1);                                                               \
        }                                                                          \
    } while (0)
#define LT(call)                                                                   \
    do {                                                                           \
        cgm_status s_ = (call);                                                    \
        if (s_ != CGM_SUCCESS) {                                                   \
            fprintf(stderr, "gemmbeside: %s failed: %s\n", #call,                  \
                    cgm_last_error());                                     \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

typedef struct shape {
    int64_t m, n, k;
    int S;
    int ag; /* 1: the per-rank GEMM of a 2-rank AG+GEMM (suffix ":ag") */
} shape;

typedef struct side {
    int dev;
    cgm_lt *lt;
    void *ws;
    cudaStream_t compute, comm, flood;
    cudaEvent_t start, gemm_end, comm_end;
    cudaEvent_t piece[MAX_S], pushed[MAX_S];
    uint16_t *x, *w, *y, *part; /* y: m x n; part: the peer half */
    uint16_t *recv;             /* on this GPU: where the other pushes */
    char *flood_src, *flood_dst; /* flood_dst on the other GPU */
    char *gate;                  /* GPU 0 only */
} side;

enum { WHOLE, PIECES, SKELETON, PIECES_FLOOD, WHOLE_FLOOD, NCASES };

static void fill_random(uint16_t *dev_ptr, size_t count, uint32_t seed) {
    uint16_t *h = malloc(count * sizeof *h);
    if (!h) {
        fprintf(stderr, "gemmbeside: out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < count; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = (float)(seed >> 8) / 8388608.0f - 1.0f; /* [-1, 1) */
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        h[i] = (uint16_t)(bits >> 16);
    }
    OK(cudaMemcpy(dev_ptr, h, count * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
}

static cgm_lt_gemm_args gemm_rows(const side *d, const shape *sh, int64_t row0,
                                  int64_t rows, uint16_t *y, const uint16_t *addend) {
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = g.out_dtype = CGM_DTYPE_BF16;
    g.m = rows, g.n = sh->n, g.k = sh->k;
    g.x = d->x + row0 * sh->k, g.ldx = sh->k;
    g.w = d->w, g.ldw = sh->k;
    g.y = y, g.ldy = sh->n;
    g.addend = addend, g.ld_addend = sh->n;
    return g;
}

/* GEMM+RS, piece i of 2S: 0..S-1 are the peer's rows (into part), S..2S-1
 * mine (into y, plus the received rows of the same piece). AG+GEMM: 0..S-1
 * my own shard's rows, S..2S-1 the other GPU's shard, which it pushes into
 * my X (no addends). GPU d->dev owns rows [dev m/2, (dev + 1) m/2). */
static cgm_lt_gemm_args piece_args(const side *d, const shape *sh, int i) {
    int64_t rows = sh->m / (2 * sh->S), half = sh->m / 2;
    if (sh->ag) {
        int shard = i < sh->S ? d->dev : 1 - d->dev;
        int64_t row0 = shard * half + (i % sh->S) * rows;
        return gemm_rows(d, sh, row0, rows, d->y + row0 * sh->n, NULL);
    }
    if (i < sh->S)
        return gemm_rows(d, sh, (int64_t)i * rows, rows, d->part + i * rows * sh->n, NULL);
    int j = i - sh->S;
    return gemm_rows(d, sh, half + j * rows, rows, d->y + (half + j * rows) * sh->n,
                     d->recv + j * rows * sh->n);
}

static void setup_shape(side *d, const shape *sh) {
    OK(cudaSetDevice(d->dev));
    size_t xm = (size_t)(sh->m * sh->k), wn = (size_t)(sh->n * sh->k);
    size_t ymn = (size_t)(sh->m * sh->n);
    OK(cudaMalloc((void **)&d->x, xm * 2));
    OK(cudaMalloc((void **)&d->w, wn * 2));
    OK(cudaMalloc((void **)&d->y, ymn * 2));
    OK(cudaMalloc((void **)&d->part, ymn)); /* half the rows, 2 bytes each */
    OK(cudaMalloc((void **)&d->recv, ymn));
    OK(cudaMemset(d->recv, 0, ymn));
    fill_random(d->x, xm, 1000u + (uint32_t)d->dev);
    fill_random(d->w, wn, 2000u + (uint32_t)d->dev);
    /* cuBLASLt's entries and their measured algorithms, off the clock. */
    cgm_lt_gemm_args whole = gemm_rows(d, sh, 0, sh->m, d->y, NULL);
    LT(cgm_lt_prepare(d->lt, &whole, WS_BYTES, d->compute, 60000));
    for (int i = 0; i < 2 * sh->S; i++) {
        cgm_lt_gemm_args g = piece_args(d, sh, i);
        LT(cgm_lt_prepare(d->lt, &g, WS_BYTES, d->compute, 60000));
    }
    OK(cudaDeviceSynchronize());
}

static void free_shape(side *d) {
    OK(cudaSetDevice(d->dev));
    OK(cudaFree(d->x));
    OK(cudaFree(d->w));
    OK(cudaFree(d->y));
    OK(cudaFree(d->part));
    OK(cudaFree(d->recv));
}

/* Both GPUs' streams wait for `gate` (recorded on GPU 0 after a memset of
 * GATE_BYTES, ~80 us: the host enqueues both GPUs' work meanwhile). */
static void enqueue_case(side d[2], const shape *sh, int c, cudaEvent_t gate) {
    int64_t rows = sh->m / (2 * sh->S);
    size_t piece_bytes = (size_t)(rows * sh->n) * 2;
    OK(cudaSetDevice(0));
    OK(cudaMemsetAsync(d[0].gate, 0, GATE_BYTES, d[0].flood));
    OK(cudaEventRecord(gate, d[0].flood));
    for (int s = 0; s < 2; s++) {
        side *me = &d[s];
        OK(cudaSetDevice(me->dev));
        OK(cudaStreamWaitEvent(me->compute, gate, 0));
        OK(cudaStreamWaitEvent(me->comm, gate, 0));
        if (s == 1) OK(cudaStreamWaitEvent(me->flood, gate, 0));
        OK(cudaEventRecord(me->start, me->compute));
        if (c == PIECES_FLOOD || c == WHOLE_FLOOD) {
            OK(cudaMemcpyAsync(me->flood_dst, me->flood_src, FLOOD_BYTES,
                               cudaMemcpyDefault, me->flood));
        }
    }
    /* The GEMMs; in SKELETON the pushes and the cross-GPU waits. */
    if (c == WHOLE || c == WHOLE_FLOOD) {
        for (int s = 0; s < 2; s++) {
            OK(cudaSetDevice(d[s].dev));
            cgm_lt_gemm_args g = gemm_rows(&d[s], sh, 0, sh->m, d[s].y, NULL);
            LT(cgm_lt_gemm(d[s].lt, &g, d[s].ws, WS_BYTES, d[s].compute));
        }
    } else {
        if (c == SKELETON && sh->ag) { /* my shard's X rows, piece by piece */
            size_t x_piece = (size_t)(rows * sh->k) * 2;
            for (int s = 0; s < 2; s++) {
                side *me = &d[s], *other = &d[1 - s];
                OK(cudaSetDevice(me->dev));
                for (int i = 0; i < sh->S; i++) {
                    int64_t row0 = me->dev * (sh->m / 2) + i * rows;
                    OK(cudaMemcpyAsync(other->x + row0 * sh->k, me->x + row0 * sh->k, x_piece,
                                       cudaMemcpyDefault, me->comm));
                    OK(cudaEventRecord(me->pushed[i], me->comm));
                }
            }
        }
        for (int i = 0; i < 2 * sh->S; i++) {
            for (int s = 0; s < 2; s++) {
                side *me = &d[s], *other = &d[1 - s];
                OK(cudaSetDevice(me->dev));
                if (c == SKELETON && i >= sh->S)
                    OK(cudaStreamWaitEvent(me->compute, other->pushed[i - sh->S], 0));
                cgm_lt_gemm_args g = piece_args(me, sh, i);
                LT(cgm_lt_gemm(me->lt, &g, me->ws, WS_BYTES, me->compute));
                if (c == SKELETON && !sh->ag && i < sh->S) {
                    OK(cudaEventRecord(me->piece[i], me->compute));
                    OK(cudaStreamWaitEvent(me->comm, me->piece[i], 0));
                    OK(cudaMemcpyAsync(other->recv + i * rows * sh->n,
                                       me->part + i * rows * sh->n, piece_bytes,
                                       cudaMemcpyDefault, me->comm));
                    OK(cudaEventRecord(me->pushed[i], me->comm));
                }
            }
        }
    }
    for (int s = 0; s < 2; s++) {
        OK(cudaSetDevice(d[s].dev));
        OK(cudaEventRecord(d[s].comm_end, d[s].comm));
        OK(cudaStreamWaitEvent(d[s].compute, d[s].comm_end, 0));
        OK(cudaEventRecord(d[s].gemm_end, d[s].compute));
    }
}

static int parse_shape(const char *s, shape *sh) {
    long long m, n, k;
    int S = 0, used = 0;
    if (sscanf(s, "%lldx%lldx%lld:%d%n", &m, &n, &k, &S, &used) != 4) return -1;
    sh->m = m, sh->n = n, sh->k = k, sh->S = S, sh->ag = 0;
    if (strcmp(s + used, ":ag") == 0) sh->ag = 1;
    else if (s[used] != '\0') return -1;
    if (m < 1 || n < 1 || k < 1 || S < 1 || S > MAX_S || m % (2 * S)) return -1;
    return 0;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 9;
    shape shapes[16];
    int nshapes = 0;
    static const char *defaults[] = {"16384x4096x2048:4",    "32768x4096x2048:4",
                                     "4096x4096x2048:2",     "8192x14336x2048:2",
                                     "16384x4096x2048:2",    "16384x2048x4096:4:ag",
                                     "32768x2048x4096:4:ag", "4096x2048x4096:1:ag"};
    int ndef = (int)(sizeof defaults / sizeof defaults[0]);
    for (int i = 2; i < argc || (argc <= 2 && i - 2 < ndef); i++) {
        const char *a = argc > 2 ? argv[i] : defaults[i - 2];
        if (nshapes == 16 || parse_shape(a, &shapes[nshapes]) != 0) {
            fprintf(stderr,
                    "usage: gemmbeside [rounds >= 1] [MxNxK:S[:ag] ...] (the per-rank "
                    "GEMM, S pieces per shard, 1 <= S <= %d, m a multiple of 2S, :ag for "
                    "AG+GEMM's; at most 16); got '%s'\n",
                    MAX_S, a);
            return 2;
        }
        nshapes++;
    }
    if (rounds < 1) {
        fprintf(stderr, "usage: gemmbeside [rounds >= 1] [MxNxK:S[:ag] ...]\n");
        return 2;
    }
    int skip = two_peer_gpus_or_skip("gemmbeside");
    if (skip) return skip;
    side d[2];
    memset(d, 0, sizeof d);
    cudaEvent_t gate;
    for (int s = 0; s < 2; s++) {
        side *me = &d[s];
        me->dev = s;
        OK(cudaSetDevice(s));
        cudaError_t pe = cudaDeviceEnablePeerAccess(1 - s, 0);
        if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) OK(pe);
        (void)cudaGetLastError();
        LT(cgm_lt_create(&me->lt));
        OK(cudaMalloc(&me->ws, WS_BYTES));
        OK(cudaStreamCreateWithFlags(&me->compute, cudaStreamNonBlocking));
        OK(cudaStreamCreateWithFlags(&me->comm, cudaStreamNonBlocking));
        OK(cudaStreamCreateWithFlags(&me->flood, cudaStreamNonBlocking));
        OK(cudaEventCreate(&me->start));
        OK(cudaEventCreate(&me->gemm_end));
        OK(cudaEventCreateWithFlags(&me->comm_end, cudaEventDisableTiming));
        for (int i = 0; i < MAX_S; i++) {
            OK(cudaEventCreateWithFlags(&me->piece[i], cudaEventDisableTiming));
            OK(cudaEventCreateWithFlags(&me->pushed[i], cudaEventDisableTiming));
        }
        OK(cudaMalloc((void **)&me->flood_src, FLOOD_BYTES));
        OK(cudaMemset(me->flood_src, s + 1, FLOOD_BYTES));
        if (s == 0) {
            OK(cudaMalloc((void **)&me->gate, GATE_BYTES));
            OK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
        }
    }
    for (int s = 0; s < 2; s++) { /* the flood lands on the other GPU */
        OK(cudaSetDevice(1 - s));
        OK(cudaMalloc((void **)&d[s].flood_dst, FLOOD_BYTES));
    }
    printf("# gemmbeside: per-rank GEMM of a 2-rank GEMM+RS, bf16, GPU0 and GPU1 at once;\n"
           "# us, the slower GPU's median of %d rounds (the cases alternate each round)\n",
           rounds);
    printf("# %-22s %10s %10s %10s %13s %12s %9s %9s %9s\n", "m x n x k : S", "whole",
           "pieces", "skeleton", "pieces+flood", "whole+flood", "pieces/w", "skel/w",
           "flood/p");
    float *t = malloc(sizeof(float) * NCASES * (size_t)rounds);
    if (!t) return 1;
    for (int si = 0; si < nshapes; si++) {
        const shape *sh = &shapes[si];
        for (int s = 0; s < 2; s++) setup_shape(&d[s], sh);
        for (int r = -2; r < rounds; r++) { /* two rounds of warm-up */
            for (int j = 0; j < NCASES; j++) {
                int c = (j + (r < 0 ? 0 : r)) % NCASES;
                enqueue_case(d, sh, c, gate);
                float worst = 0;
                for (int s = 0; s < 2; s++) {
                    float ms = 0;
                    OK(cudaSetDevice(s));
                    OK(cudaDeviceSynchronize());
                    OK(cudaEventElapsedTime(&ms, d[s].start, d[s].gemm_end));
                    if (ms > worst) worst = ms;
                }
                if (r >= 0) t[c * rounds + r] = worst * 1000;
            }
        }
        float med[NCASES];
        for (int c = 0; c < NCASES; c++) med[c] = tool_median(t + c * rounds, rounds);
        char name[64];
        snprintf(name, sizeof name, "%lldx%lldx%lld:%d%s", (long long)sh->m, (long long)sh->n,
                 (long long)sh->k, sh->S, sh->ag ? ":ag" : "");
        printf("  %-22s %10.1f %10.1f %10.1f %13.1f %12.1f %9.3f %9.3f %9.3f\n", name,
               med[WHOLE], med[PIECES], med[SKELETON], med[PIECES_FLOOD], med[WHOLE_FLOOD],
               med[PIECES] / med[WHOLE], med[SKELETON] / med[WHOLE],
               med[PIECES_FLOOD] / med[PIECES]);
        fflush(stdout);
        for (int s = 0; s < 2; s++) free_shape(&d[s]);
    }
    free(t);
    return 0;
}
