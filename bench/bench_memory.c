/* The memory check before the first row (bench_check_memory): a shape that
 * cannot fit is refused in a second with what it needs, what there is and
 * what to pass instead, rather than swapping until the out-of-memory killer
 * ends a rank minutes later.
 *
 * Per rank, for the run's largest row:
 *   host environment: the bench's buffers (bench_row_bytes) and the host
 *     backend's memory touched for the row: gathered rows, received and
 *     partial sums in fp32, about 2 x (m + P) x max(n, k) x 4 bytes, plus
 *     fp32 copies of this rank's X and W for bf16/fp16 inputs
 *     (docs/HOST_BACKEND.md);
 *   GPU environment: device memory for the bench's buffers, one GEMM
 *     output of scratch (the cuBLASLt search's) and DEVICE_SCRATCH for
 *     cuBLASLt's workspaces, against cudaMemGetInfo once the comm (and its
 *     workspaces) exist; host memory for the staging copies.
 * Ranks on one machine share its memory, ranks on one device share the
 * device: the sums over each are compared with the least any of them sees
 * available, so every rank reaches the same verdict. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)
/* cuBLASLt's workspaces and other library scratch beside the buffers. */
#define DEVICE_SCRATCH (256.0 * MIB)

enum { X_HOST_NEED, X_HOST_AVAIL, X_DEV_NEED, X_DEV_AVAIL, X_DEVICE, X_HOST_LO,
       X_HOST_HI, X_COUNT };

typedef struct row_need {
    double host, device; /* bytes per rank */
} row_need;

static int64_t larger(int64_t a, int64_t b) { return a > b ? a : b; }

/* "96.0 KiB", "512.0 MiB", "3.25 GiB" */
static const char *size_text(double bytes, char *buf, size_t len) {
    if (bytes < MIB) snprintf(buf, len, "%.1f KiB", bytes / 1024.0);
    else if (bytes < GIB) snprintf(buf, len, "%.1f MiB", bytes / MIB);
    else snprintf(buf, len, "%.2f GiB", bytes / GIB);
    return buf;
}

static row_need need_of(bench_context *ctx, cgm_op op, int64_t m, int64_t n,
                        int64_t k) {
    row_need need = {0, 0};
    double buffers = (double)bench_row_bytes(ctx, op, m, n, k);
    double P = ctx->nranks;
    if (ctx->env->ops->device_memory) {
        double out = (double)m * (double)n * (double)cgm_dtype_size(bench_out_dtype(ctx->opt));
        need.device = buffers + out / P + DEVICE_SCRATCH;
        need.host = buffers; /* staging copies */
        return need;
    }
    double width = (double)larger(n, k);
    need.host = buffers + 2.0 * ((double)m + P) * width * 4.0;
    if (ctx->opt->dtype != CGM_DTYPE_FP32)
        need.host += ((double)m * (double)k + (double)n * (double)k) / P * 4.0;
    return need;
}

/* The run's largest need (host first, then device), and its row. */
static row_need largest_need(bench_context *ctx, cgm_op *op, bench_shape *shape) {
    bench_shape *shapes = NULL;
    int64_t count = bench_run_shapes(ctx->opt, &shapes);
    row_need worst = {0, 0};
    for (int o = 0; o < CGM_OP_COUNT_; o++) {
        if (!(ctx->opt->op_mask & (1u << o))) continue;
        for (int64_t i = 0; i < count; i++) {
            row_need need = need_of(ctx, (cgm_op)o, shapes[i].m, shapes[i].n, shapes[i].k);
            if (need.host + need.device > worst.host + worst.device) {
                worst = need;
                *op = (cgm_op)o;
                *shape = shapes[i];
            }
        }
    }
    free(shapes);
    return worst;
}

/* A number from a "key value" or "key: value kB" line of a file. */
static int read_key(const char *path, const char *key, double *out) {
    FILE *f = fopen(path, "r");
    char line[256];
    size_t len = strlen(key);
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, len) != 0 || (line[len] != ' ' && line[len] != ':'))
            continue;
        char *end = NULL;
        double v = strtod(line + len + 1, &end);
        if (end == line + len + 1) break;
        *out = strstr(end, "kB") ? v * 1024.0 : v;
        found = 1;
    }
    if (f) fclose(f);
    return found ? 0 : -1;
}

/* One number in a file ("max" or absent: -1). */
static double read_number(const char *path) {
    FILE *f = fopen(path, "r");
    char text[64] = "";
    int got = f ? fscanf(f, "%63s", text) : 0;
    if (f) fclose(f);
    char *end = NULL;
    double v = got == 1 ? strtod(text, &end) : -1;
    return got == 1 && end != text && *end == '\0' ? v : -1;
}

/* Memory this machine can give the ranks: MemAvailable, lowered to what
 * the cgroup's limit leaves (limit - usage + its reclaimable file pages). */
static double host_available(void) {
    double avail = -1, inactive = 0;
    if (read_key("/proc/meminfo", "MemAvailable", &avail) != 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        avail = pages > 0 && size > 0 ? (double)pages * (double)size : INFINITY;
    }
    double limit = read_number("/sys/fs/cgroup/memory.max");
    double used = read_number("/sys/fs/cgroup/memory.current");
    read_key("/sys/fs/cgroup/memory.stat", "inactive_file", &inactive);
    if (limit < 0) { /* cgroup v1 */
        limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
        inactive = 0;
        read_key("/sys/fs/cgroup/memory/memory.stat", "total_inactive_file", &inactive);
    }
    if (limit > 0 && limit < 1e18 && used >= 0) {
        double left = limit - used + inactive;
        if (left < avail) avail = left > 0 ? left : 0;
    }
    return avail;
}

static uint32_t host_hash(void) {
    char host[256] = "";
    uint32_t h = 2166136261u;
    gethostname(host, sizeof host - 1);
    for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return h;
}

/* Shared by ranks on one machine (device < 0) or one device. */
typedef struct shortage {
    int rank;           /* one rank of the group that does not fit, -1: none */
    int ranks;          /* ranks in it */
    double need, avail; /* sum of needs, least available */
    int device;         /* -1: host memory */
} shortage;

static shortage find_shortage(const float *all, int nranks, int need_word, int avail_word,
                              int by_device) {
    shortage s = {-1, 0, 0, 0, -1};
    for (int r = 0; r < nranks && s.rank < 0; r++) {
        const float *me = all + r * X_COUNT;
        if (by_device && me[X_DEVICE] < 0) continue;
        double need = 0, avail = INFINITY;
        int ranks = 0;
        for (int q = 0; q < nranks; q++) {
            const float *them = all + q * X_COUNT;
            if (them[X_HOST_LO] != me[X_HOST_LO] || them[X_HOST_HI] != me[X_HOST_HI] ||
                (by_device && them[X_DEVICE] != me[X_DEVICE]))
                continue;
            need += them[need_word] * MIB;
            avail = fmin(avail, them[avail_word] * MIB);
            ranks++;
        }
        if (need > avail)
            s = (shortage){r, ranks, need, avail, by_device ? (int)me[X_DEVICE] : -1};
    }
    return s;
}

/* The largest m (halving from the row's) whose need fits the shortage's
 * memory with as many ranks; 0 when not even m = 1 does. */
static int64_t fitting_m(bench_context *ctx, cgm_op op, bench_shape shape,
                         const shortage *s) {
    for (int64_t m = shape.m / 2; m >= 1; m /= 2) {
        row_need need = need_of(ctx, op, m, shape.n, shape.k);
        double mine = s->device >= 0 ? need.device : need.host;
        if (mine * s->ranks <= s->avail) return m;
        if (m == 1) break;
    }
    return 0;
}

static void refuse(bench_context *ctx, cgm_op op, bench_shape shape, row_need need,
                   const shortage *s) {
    char where[64];
    if (s->device >= 0) snprintf(where, sizeof where, "device memory of GPU %d", s->device);
    else snprintf(where, sizeof where, "host memory");
    double mine = s->device >= 0 ? need.device : need.host;
    fprintf(stderr, "commgemm-bench: not enough memory for this run: its largest row "
            "(%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " %s) needs about %.2f GiB of "
            "%s per rank, %.2f GiB for the %d rank%s sharing it (rank %d's), but %.2f GiB "
            "is available there%s; started anyway it would swap or be killed by the "
            "out-of-memory killer. ", cgm_op_name(op), shape.m, shape.n, shape.k,
            cgm_dtype_name(ctx->opt->dtype), mine / GIB, where, s->need / GIB, s->ranks,
            s->ranks == 1 ? "" : "s", s->rank, s->avail / GIB,
            s->device >= 0 ? " (cudaMemGetInfo, after the comm's workspaces)"
                           : " (MemAvailable, or the cgroup's limit if lower)");
    int64_t m = fitting_m(ctx, op, shape, s);
    if (m > 0)
        fprintf(stderr, "Pass smaller sizes: m up to about %" PRId64 " fits with n=%" PRId64
                " k=%" PRId64 " (or smaller -n/-k, or fewer ranks on one %s).\n", m,
                shape.n, shape.k, s->device >= 0 ? "GPU" : "machine");
    else
        fprintf(stderr, "Even m=1 does not fit with n=%" PRId64 " k=%" PRId64 ": pass "
                "smaller -n/-k (or --shapes), or fewer ranks on one %s.\n", shape.n,
                shape.k, s->device >= 0 ? "GPU" : "machine");
}

int bench_check_memory(bench_context *ctx) {
    cgm_op op = CGM_OP_ALL_GATHER_GEMM;
    bench_shape shape = {0, 0, 0};
    row_need need = largest_need(ctx, &op, &shape);
    size_t dev_free = 0, dev_total = 0;
    float mine[X_COUNT];
    float *all = calloc((size_t)(ctx->nranks * X_COUNT), sizeof *all);
    if (!all || shape.m == 0) {
        fprintf(stderr, "commgemm-bench: rank %d: out of memory\n", ctx->rank);
        free(all);
        return -1;
    }
    int device = -1;
    if (ctx->env->ops->device_memory) {
        if (ctx->env->ops->device_memory(ctx->env, &dev_free, &dev_total)) {
            free(all);
            return -1;
        }
        device = ctx->env->device;
    }
    uint32_t hash = host_hash();
    mine[X_HOST_NEED] = (float)(need.host / MIB);
    mine[X_HOST_AVAIL] = (float)fmin(host_available() / MIB, 1e30);
    mine[X_DEV_NEED] = (float)(need.device / MIB);
    mine[X_DEV_AVAIL] = (float)((double)dev_free / MIB);
    mine[X_DEVICE] = (float)device;
    mine[X_HOST_LO] = (float)(hash & 0xffff);
    mine[X_HOST_HI] = (float)(hash >> 16);
    cgm_status st = bench_allgather_floats(ctx, mine, X_COUNT, all);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "commgemm-bench: rank %d: exchanging memory needs failed: %s: %s\n",
                ctx->rank, cgm_status_string(st), cgm_last_error());
        free(all);
        return -1;
    }
    shortage s = find_shortage(all, ctx->nranks, X_HOST_NEED, X_HOST_AVAIL, 0);
    if (s.rank < 0) s = find_shortage(all, ctx->nranks, X_DEV_NEED, X_DEV_AVAIL, 1);
    char a[32], b[32];
    snprintf(ctx->memory_note, sizeof ctx->memory_note,
             "about %s of host memory per rank (largest row: %s m=%" PRId64
             " n=%" PRId64 " k=%" PRId64 "), %s available", size_text(need.host, a, sizeof a),
             cgm_op_name(op), shape.m, shape.n, shape.k,
             size_text(all[X_HOST_AVAIL] * MIB, b, sizeof b));
    if (device >= 0) {
        size_t used = strlen(ctx->memory_note);
        snprintf(ctx->memory_note + used, sizeof ctx->memory_note - used,
                 "; about %s of device memory per rank, %s free on GPU %d",
                 size_text(need.device, a, sizeof a), size_text((double)dev_free, b, sizeof b),
                 device);
    }
    if (s.rank >= 0 && ctx->rank == 0) refuse(ctx, op, shape, need, &s);
    free(all);
    return s.rank >= 0 ? 1 : 0;
}
