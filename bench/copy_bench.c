/* commgemm-copy-bench: peer copy rates between two GPUs of one host, the
 * transfers that the p2p backend's pushes are made of (copy engine,
 * peer-mapped memory, no SMs). One process drives both GPUs. The cases:
 *   - one way against both ways at once (what an all-gather or a
 *     reduce-scatter between two ranks does);
 *   - one cudaMemcpyAsync against cudaMemcpy2DAsync rows of 16 KiB (the
 *     backend copies a shard as rows: 8192 bf16 elements per row here);
 *   - one stream per direction against 2 or 4 (more copy engines at work).
 * Every case runs once per round, in an order rotated each round so that no
 * case always follows the same one; two untimed rounds first. Reported: the
 * median over the rounds of each direction's time (CUDA events) and the
 * slower direction's rate. The bytes that landed are checked at the end;
 * wrong bytes fail the run.
 * Exit status: 0 ok, 1 a CUDA error or wrong bytes, 2 bad usage, 77 skipped
 * (fewer than two GPUs, or the two cannot map each other's memory). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#define MAX_STREAMS 4
#define ROW_BYTES ((size_t)16384)
#define WARMUP_ROUNDS 2

#define CUDA_OK(call)                                                          \
    do {                                                                       \
        cudaError_t e_ = (call);                                               \
        if (e_ != cudaSuccess) {                                               \
            fprintf(stderr, "commgemm-copy-bench: %s failed: %s\n", #call,    \
                    cudaGetErrorString(e_));                                   \
            return -1;                                                         \
        }                                                                      \
    } while (0)

/* One GPU and the copies it issues into its peer's memory. */
typedef struct side {
    int dev, peer;
    cudaStream_t stream[MAX_STREAMS];
    cudaEvent_t start, stop, fork, joined[MAX_STREAMS];
    char *src; /* on dev, every byte `fill` */
    char *dst; /* on peer */
    unsigned char fill;
} side;

typedef enum { PLAIN, ROWS_2D, STREAMS } copy_kind;

typedef struct copy_case {
    const char *name;
    int both; /* 1: both directions at once */
    copy_kind how;
    int streams;
} copy_case;

static const copy_case cases[] = {
    {"one way, cudaMemcpyAsync", 0, PLAIN, 1},
    {"one way, 2D rows of 16 KiB", 0, ROWS_2D, 1},
    {"both ways, cudaMemcpyAsync", 1, PLAIN, 1},
    {"both ways, 2D rows of 16 KiB", 1, ROWS_2D, 1},
    {"both ways, 2 streams per direction", 1, STREAMS, 2},
    {"both ways, 4 streams per direction", 1, STREAMS, 4},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static void usage(FILE *to) {
    fprintf(to,
        "Usage: commgemm-copy-bench [--mib N] [--rounds N] [--gpus A,B]\n"
        "Peer copy rates between two GPUs of this host (one way, both ways,\n"
        "2D rows, several streams), medians over interleaved rounds.\n"
        "  --mib N      MiB per direction (default 128)\n"
        "  --rounds N   timed rounds (default 15)\n"
        "  --gpus A,B   the two GPUs (default 0,1)\n");
}

static int parse_int(const char *option, const char *text, long lo, long hi, int *out) {
    char *end = NULL;
    long v = text ? strtol(text, &end, 10) : 0;
    if (!text || !*text || *end || v < lo || v > hi) {
        fprintf(stderr, "commgemm-copy-bench: %s: expected an integer from %ld to %ld, got '%s'\n",
                option, lo, hi, text ? text : "(nothing)");
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, int *mib, int *rounds, int gpus[2]) {
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(argv[i], "--mib")) {
            if (parse_int("--mib", value, 1, 1 << 16, mib)) return -1;
            i++;
        } else if (!strcmp(argv[i], "--rounds")) {
            if (parse_int("--rounds", value, 1, 100000, rounds)) return -1;
            i++;
        } else if (!strcmp(argv[i], "--gpus")) {
            if (!value || sscanf(value, "%d,%d", &gpus[0], &gpus[1]) != 2 || gpus[0] < 0 ||
                gpus[1] < 0 || gpus[0] == gpus[1]) {
                fprintf(stderr, "commgemm-copy-bench: --gpus: expected two different device "
                        "numbers A,B (e.g. 0,1), got '%s'\n", value ? value : "(nothing)");
                return -1;
            }
            i++;
        } else {
            fprintf(stderr, "commgemm-copy-bench: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return -1;
        }
    }
    return 0;
}

/* 0 when both GPUs exist and can map each other's memory, else 77 after
 * saying why. */
static int peers_or_skip(const int gpus[2]) {
    int count = 0, ab = 0, ba = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    if (gpus[0] >= count || gpus[1] >= count) {
        printf("skip: commgemm-copy-bench needs GPUs %d and %d, found %d GPU(s)\n", gpus[0],
               gpus[1], count);
        return 77;
    }
    if (cudaDeviceCanAccessPeer(&ab, gpus[0], gpus[1]) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&ba, gpus[1], gpus[0]) != cudaSuccess || !ab || !ba) {
        printf("skip: GPUs %d and %d cannot access each other's memory\n", gpus[0], gpus[1]);
        return 77;
    }
    return 0;
}

static int side_init(side *d, int dev, int peer, unsigned char fill, size_t bytes) {
    memset(d, 0, sizeof *d);
    d->dev = dev, d->peer = peer, d->fill = fill;
    CUDA_OK(cudaSetDevice(dev));
    cudaError_t pe = cudaDeviceEnablePeerAccess(peer, 0);
    if (pe == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
    else CUDA_OK(pe);
    for (int i = 0; i < MAX_STREAMS; i++) {
        CUDA_OK(cudaStreamCreateWithFlags(&d->stream[i], cudaStreamNonBlocking));
        CUDA_OK(cudaEventCreateWithFlags(&d->joined[i], cudaEventDisableTiming));
    }
    CUDA_OK(cudaEventCreate(&d->start));
    CUDA_OK(cudaEventCreate(&d->stop));
    CUDA_OK(cudaEventCreateWithFlags(&d->fork, cudaEventDisableTiming));
    CUDA_OK(cudaMalloc((void **)&d->src, bytes));
    CUDA_OK(cudaMemset(d->src, fill, bytes));
    CUDA_OK(cudaSetDevice(peer));
    CUDA_OK(cudaMalloc((void **)&d->dst, bytes));
    CUDA_OK(cudaMemset(d->dst, 0, bytes));
    return 0;
}

static void side_free(side *d) {
    if (cudaSetDevice(d->dev) != cudaSuccess) return;
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (d->stream[i]) cudaStreamDestroy(d->stream[i]);
        if (d->joined[i]) cudaEventDestroy(d->joined[i]);
    }
    if (d->start) cudaEventDestroy(d->start);
    if (d->stop) cudaEventDestroy(d->stop);
    if (d->fork) cudaEventDestroy(d->fork);
    cudaFree(d->src);
    cudaFree(d->dst);
}

/* Enqueues one case's copies from d, between its start and stop events. */
static int enqueue(side *d, const copy_case *c, size_t bytes) {
    CUDA_OK(cudaSetDevice(d->dev));
    cudaStream_t s0 = d->stream[0];
    CUDA_OK(cudaEventRecord(d->start, s0));
    if (c->how == PLAIN) {
        CUDA_OK(cudaMemcpyAsync(d->dst, d->src, bytes, cudaMemcpyDefault, s0));
    } else if (c->how == ROWS_2D) {
        CUDA_OK(cudaMemcpy2DAsync(d->dst, ROW_BYTES, d->src, ROW_BYTES, ROW_BYTES,
                                  bytes / ROW_BYTES, cudaMemcpyDefault, s0));
    } else {
        size_t part = bytes / (size_t)c->streams;
        CUDA_OK(cudaEventRecord(d->fork, s0));
        for (int i = 0; i < c->streams; i++) {
            if (i) CUDA_OK(cudaStreamWaitEvent(d->stream[i], d->fork, 0));
            CUDA_OK(cudaMemcpyAsync(d->dst + i * part, d->src + i * part, part,
                                    cudaMemcpyDefault, d->stream[i]));
        }
        for (int i = 1; i < c->streams; i++) {
            CUDA_OK(cudaEventRecord(d->joined[i], d->stream[i]));
            CUDA_OK(cudaStreamWaitEvent(s0, d->joined[i], 0));
        }
    }
    CUDA_OK(cudaEventRecord(d->stop, s0));
    return 0;
}

static int sync_both(const side d[2]) {
    for (int i = 0; i < 2; i++) {
        CUDA_OK(cudaSetDevice(d[i].dev));
        CUDA_OK(cudaDeviceSynchronize());
    }
    return 0;
}

static int elapsed_us(const side *d, float *us) {
    float ms = 0;
    CUDA_OK(cudaSetDevice(d->dev));
    CUDA_OK(cudaEventElapsedTime(&ms, d->start, d->stop));
    *us = ms * 1000.0f;
    return 0;
}

/* t[(case * 2 + direction) * rounds + round]; 0 for a direction a case
 * leaves idle. */
static int run_rounds(side d[2], size_t bytes, int rounds, float *t) {
    for (int r = -WARMUP_ROUNDS; r < rounds; r++)
        for (int j = 0; j < NCASES; j++) {
            int ci = (j + (r < 0 ? 0 : r)) % NCASES;
            const copy_case *c = &cases[ci];
            if (sync_both(d) || enqueue(&d[0], c, bytes) ||
                (c->both && enqueue(&d[1], c, bytes)) || sync_both(d))
                return -1;
            if (r < 0) continue;
            float *row = t + (size_t)ci * 2 * (size_t)rounds;
            if (elapsed_us(&d[0], &row[r])) return -1;
            row[rounds + r] = 0;
            if (c->both && elapsed_us(&d[1], &row[rounds + r])) return -1;
        }
    return 0;
}

/* Bytes of d's destination that differ from its source's fill (every case
 * writes the whole destination). */
static int64_t wrong_bytes(const side *d, size_t bytes, unsigned char *host) {
    if (cudaSetDevice(d->peer) != cudaSuccess ||
        cudaMemcpy(host, d->dst, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "commgemm-copy-bench: reading back GPU %d's copy failed: %s\n", d->peer,
                cudaGetErrorString(cudaGetLastError()));
        return (int64_t)bytes;
    }
    int64_t wrong = 0;
    for (size_t i = 0; i < bytes; i++) wrong += host[i] != d->fill;
    return wrong;
}

static int compare_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_float);
    return v[n / 2];
}

static void print_table(const int gpus[2], int mib, int rounds, size_t bytes, float *t) {
    printf("# commgemm-copy-bench: %d MiB per direction, GPU %d <-> GPU %d, medians of %d "
           "interleaved rounds\n", mib, gpus[0], gpus[1], rounds);
    printf("# %-40s %12s %12s %14s\n", "case", "A->B us", "B->A us", "GB/s per dir");
    for (int ci = 0; ci < NCASES; ci++) {
        float *row = t + (size_t)ci * 2 * (size_t)rounds;
        float ab = median(row, rounds), ba = median(row + rounds, rounds);
        float slower = ab > ba ? ab : ba;
        printf("  %-40s %12.1f %12.1f %14.1f\n", cases[ci].name, ab, ba,
               slower > 0 ? (double)bytes / (slower * 1e3) : 0.0);
    }
}

int main(int argc, char **argv) {
    int mib = 128, rounds = 15, gpus[2] = {0, 1};
    int rc = parse_args(argc, argv, &mib, &rounds, gpus);
    if (rc) return rc > 0 ? 0 : 2;
    if ((rc = peers_or_skip(gpus))) return rc;
    size_t bytes = (size_t)mib << 20;
    side d[2];
    memset(d, 0, sizeof d);
    float *t = calloc((size_t)NCASES * 2 * (size_t)rounds, sizeof *t);
    unsigned char *host = malloc(bytes);
    rc = 1;
    if (!t || !host) {
        fprintf(stderr, "commgemm-copy-bench: out of host memory for %d MiB\n", mib);
        goto done;
    }
    if (side_init(&d[0], gpus[0], gpus[1], 0xa5, bytes) ||
        side_init(&d[1], gpus[1], gpus[0], 0x5a, bytes) || run_rounds(d, bytes, rounds, t))
        goto done;
    print_table(gpus, mib, rounds, bytes, t);
    int64_t wrong = wrong_bytes(&d[0], bytes, host) + wrong_bytes(&d[1], bytes, host);
    printf("# wrong bytes: %lld %s\n", (long long)wrong, wrong ? "FAILED" : "OK");
    rc = wrong ? 1 : 0;
done:
    for (int i = 0; i < 2; i++) side_free(&d[i]);
    free(host);
    free(t);
    return rc;
}
