/* bench_env for the GPU backends (p2p, nccl, cublasmp). Rank r uses device
 * (its local rank) % ndev; rank 0 makes an ncclUniqueId and passes it to the
 * others through a file named after the launcher's rendezvous (written to a
 * temporary name, then renamed; the others poll for it with a bounded
 * wait); the commgemm comm is made from the resulting ncclComm_t.
 * Buffers are cudaMalloc'd with a malloc'd host staging copy (pages that are
 * never staged are never touched). Times are CUDA events on the bench's
 * stream. The collectives alone (the comm baseline) and the bench's own
 * barrier/exchange are NCCL calls on that same ncclComm_t: the baseline is
 * NCCL itself, not commgemm's use of it; the peer's GEMM is cuBLASLt called
 * straight (bench_peer_gpu.c). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "bench.h"

#define DEFAULT_ID_WAIT_MS 60000

typedef struct gpu_env {
    int device, rank, nranks;
    ncclComm_t nccl;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    float *sync_send, *sync_recv;          /* device: [64], [nranks * 64] */
    float *sync_host_send, *sync_host_recv; /* pinned twins */
    char id_path[512];                     /* set on rank 0 until removed */
    time_t started;                        /* ids older than this are stale */
    bench_peer_lt *lt;                     /* the peer's cuBLASLt, once used */
} gpu_env;

static int cuda_ok(cudaError_t e, const gpu_env *g, const char *what) {
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "commgemm-bench: rank %d (device %d): %s: %s (%s)\n", g->rank,
            g->device, what, cudaGetErrorName(e), cudaGetErrorString(e));
    return -1;
}

static int nccl_ok(ncclResult_t r, const gpu_env *g, const char *what) {
    if (r == ncclSuccess) return 0;
    fprintf(stderr, "commgemm-bench: rank %d (device %d): %s: %s%s%s\n", g->rank,
            g->device, what, ncclGetErrorString(r), g->nccl ? ": " : "",
            g->nccl ? ncclGetLastError(g->nccl) : "");
    return -1;
}

int bench_gpu_count(char *why, size_t why_size) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(why, why_size, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return 0;
    }
    if (count <= 0) snprintf(why, why_size, "cudaGetDeviceCount found no device");
    return count > 0 ? count : 0;
}

/* The rank under commgemm-run (COMMGEMM_RANK set), which starts every rank
 * on this machine; else the launcher's local rank (torchrun, Open MPI,
 * Slurm), else the global rank. */
static int local_rank(int rank) {
    static const char *names[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                  "SLURM_LOCALID"};
    const char *ours = getenv("COMMGEMM_RANK");
    if (ours && *ours) return rank;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *text = getenv(names[i]);
        char *end = NULL;
        if (!text || !*text) continue;
        long v = strtol(text, &end, 10);
        if (*end == '\0' && v >= 0) return (int)v;
    }
    return rank;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Rank 0 writes the id; the others read it within timeout_ms. The ranks
 * are processes of one machine (the launcher's LOCAL bootstrap), so /tmp
 * is a folder they all see. A file left by an earlier run that died is
 * recognised by its age and not read. */
static int share_id(gpu_env *g, const char *rendezvous, int64_t timeout_ms,
                    ncclUniqueId *id) {
    char path[512], tmp[600];
    if (!rendezvous || !*rendezvous) {
        fprintf(stderr, "commgemm-bench: rank %d: the launcher gave no rendezvous "
                "name to share the NCCL id through; start the ranks with "
                "commgemm-run -n N\n", g->rank);
        return -1;
    }
    snprintf(path, sizeof path, "/tmp/commgemm-bench-%s.ncclid", rendezvous);
    if (g->rank == 0) {
        if (nccl_ok(ncclGetUniqueId(id), g, "ncclGetUniqueId")) return -1;
        snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
        FILE *f = fopen(tmp, "wb");
        int bad = !f || fwrite(id, sizeof *id, 1, f) != 1;
        if (f && fclose(f) != 0) bad = 1;
        if (bad || rename(tmp, path) != 0) {
            fprintf(stderr, "commgemm-bench: rank 0: cannot write the NCCL id to "
                    "%s: %s; the ranks share it through /tmp, which must be "
                    "writable\n", path, strerror(errno));
            unlink(tmp);
            return -1;
        }
        snprintf(g->id_path, sizeof g->id_path, "%s", path);
        return 0;
    }
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        struct stat sb;
        FILE *f = NULL;
        if (stat(path, &sb) == 0 && sb.st_mtime + 5 >= g->started)
            f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (got == 1) return 0;
        }
        if (now_ms() > deadline) {
            fprintf(stderr, "commgemm-bench: rank %d: no NCCL id from rank 0 in %s "
                    "after %" PRId64 " ms; is rank 0 running, on this machine, "
                    "with the same rendezvous?\n", g->rank, path,
                    timeout_ms);
            return -1;
        }
        usleep(10000);
    }
}

static void remove_id(gpu_env *g) {
    if (g->id_path[0]) unlink(g->id_path);
    g->id_path[0] = '\0';
}

static cgm_status gpu_comm_create(bench_env *env, const cgm_bootstrap *bootstrap,
                                  const cgm_config *config, cgm_comm **comm) {
    gpu_env *g = env->impl;
    int ndev = 0;
    size_t sync_bytes = BENCH_SYNC_FLOATS * sizeof(float);
    ncclUniqueId id;
    *comm = NULL;
    g->rank = bootstrap->rank;
    g->nranks = bootstrap->nranks;
    g->device = -1;
    if (cuda_ok(cudaGetDeviceCount(&ndev), g, "cudaGetDeviceCount")) return CGM_ERROR_CUDA;
    if (ndev <= 0) {
        fprintf(stderr, "commgemm-bench: rank %d: no CUDA device is visible\n", g->rank);
        return CGM_ERROR_UNAVAILABLE;
    }
    g->device = local_rank(g->rank) % ndev;
    env->device = g->device;
    if (cuda_ok(cudaSetDevice(g->device), g, "cudaSetDevice") ||
        cuda_ok(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), g,
                "cudaStreamCreate") ||
        cuda_ok(cudaEventCreate(&g->start), g, "cudaEventCreate") ||
        cuda_ok(cudaEventCreate(&g->stop), g, "cudaEventCreate") ||
        cuda_ok(cudaMalloc((void **)&g->sync_send, sync_bytes), g, "cudaMalloc") ||
        cuda_ok(cudaMalloc((void **)&g->sync_recv, sync_bytes * (size_t)g->nranks), g,
                "cudaMalloc") ||
        cuda_ok(cudaMallocHost((void **)&g->sync_host_send, sync_bytes), g,
                "cudaMallocHost") ||
        cuda_ok(cudaMallocHost((void **)&g->sync_host_recv,
                               sync_bytes * (size_t)g->nranks), g, "cudaMallocHost"))
        return CGM_ERROR_CUDA;
    env->stream = g->stream;
    int64_t wait_ms = config->timeout_ms > 0 ? config->timeout_ms : DEFAULT_ID_WAIT_MS;
    if (share_id(g, bootstrap->rendezvous, wait_ms, &id)) return CGM_ERROR_SYSTEM;
    ncclResult_t r = ncclCommInitRank(&g->nccl, g->nranks, id, g->rank);
    /* Every rank has read the id once the init returns. */
    remove_id(g);
    if (nccl_ok(r, g, "ncclCommInitRank")) {
        g->nccl = NULL;
        return CGM_ERROR_NCCL;
    }
    return cgm_comm_init_nccl(g->nccl, config, comm);
}

static int gpu_buffer_alloc(bench_env *env, size_t bytes, bench_buffer *out) {
    gpu_env *g = env->impl;
    memset(out, 0, sizeof *out);
    /* Never NULL, even for 0 bytes (rows * cols == 0 matrices). */
    if (cuda_ok(cudaMalloc(&out->data, bytes ? bytes : 256), g, "cudaMalloc")) {
        out->data = NULL;
        return -1;
    }
    out->host = malloc(bytes ? bytes : 1);
    if (!out->host) {
        cudaFree(out->data);
        out->data = NULL;
        return -1;
    }
    out->bytes = bytes;
    return 0;
}

static void gpu_buffer_free(bench_env *env, bench_buffer *buffer) {
    (void)env;
    cudaFree(buffer->data);
    free(buffer->host);
    memset(buffer, 0, sizeof *buffer);
}

static int gpu_copy(bench_env *env, bench_buffer *buffer, int up) {
    gpu_env *g = env->impl;
    if (buffer->bytes == 0) return 0;
    cudaError_t e = up ? cudaMemcpyAsync(buffer->data, buffer->host, buffer->bytes,
                                         cudaMemcpyHostToDevice, g->stream)
                       : cudaMemcpyAsync(buffer->host, buffer->data, buffer->bytes,
                                         cudaMemcpyDeviceToHost, g->stream);
    if (cuda_ok(e, g, up ? "upload (cudaMemcpyAsync)" : "download (cudaMemcpyAsync)"))
        return -1;
    return cuda_ok(cudaStreamSynchronize(g->stream), g, "cudaStreamSynchronize");
}

static int gpu_upload(bench_env *env, bench_buffer *buffer) { return gpu_copy(env, buffer, 1); }

static int gpu_download(bench_env *env, bench_buffer *buffer) { return gpu_copy(env, buffer, 0); }

static void gpu_timer_start(bench_env *env) {
    gpu_env *g = env->impl;
    cuda_ok(cudaEventRecord(g->start, g->stream), g, "cudaEventRecord");
}

static double gpu_timer_stop_us(bench_env *env) {
    gpu_env *g = env->impl;
    float ms = 0;
    if (cuda_ok(cudaEventRecord(g->stop, g->stream), g, "cudaEventRecord") ||
        cuda_ok(cudaEventSynchronize(g->stop), g, "cudaEventSynchronize") ||
        cuda_ok(cudaEventElapsedTime(&ms, g->start, g->stop), g, "cudaEventElapsedTime"))
        return NAN;
    return (double)ms * 1e3;
}

static ncclDataType_t nccl_type(cgm_dtype dtype) {
    switch (dtype) {
    case CGM_DTYPE_BF16: return ncclBfloat16;
    case CGM_DTYPE_FP16: return ncclFloat16;
    default: return ncclFloat32;
    }
}

/* Even shards: one NCCL collective. Uneven all-gather: a broadcast per
 * owner, grouped. Uneven reduce-scatter: ncclReduceScatter over rows padded
 * to P * ceil(m / P) (bench_ops allocates that much), as frameworks do. */
static int gpu_collective(bench_env *env, bench_collective which,
                          const cgm_matrix *send, cgm_matrix *recv) {
    gpu_env *g = env->impl;
    const int P = g->nranks;
    const ncclDataType_t type = nccl_type(send->dtype);
    const size_t es = cgm_dtype_size(send->dtype);
    switch (which) {
    case BENCH_COLLECTIVE_ALL_GATHER: {
        const int64_t m = recv->rows, cols = recv->cols, shard = cgm_shard_rows(m, 0, P);
        if (shard * P == m)
            return nccl_ok(ncclAllGather(send->data, recv->data, (size_t)(shard * cols),
                                         type, g->nccl, g->stream), g, "ncclAllGather");
        if (nccl_ok(ncclGroupStart(), g, "ncclGroupStart")) return -1;
        for (int p = 0; p < P; p++) {
            int64_t rows = cgm_shard_rows(m, p, P);
            if (rows == 0) continue;
            char *dst = (char *)recv->data + (size_t)(cgm_shard_offset(m, p, P) * cols) * es;
            if (nccl_ok(ncclBroadcast(p == g->rank ? send->data : dst, dst,
                                      (size_t)(rows * cols), type, p, g->nccl,
                                      g->stream), g, "ncclBroadcast")) {
                ncclGroupEnd();
                return -1;
            }
        }
        return nccl_ok(ncclGroupEnd(), g, "ncclGroupEnd");
    }
    case BENCH_COLLECTIVE_REDUCE_SCATTER: {
        const int64_t shard = cgm_shard_rows(send->rows, 0, P);
        return nccl_ok(ncclReduceScatter(send->data, recv->data, (size_t)(shard * send->cols),
                                         type, ncclSum, g->nccl, g->stream),
                       g, "ncclReduceScatter");
    }
    default:
        return nccl_ok(ncclAllReduce(send->data, recv->data,
                                     (size_t)(send->rows * send->cols), type, ncclSum,
                                     g->nccl, g->stream), g, "ncclAllReduce");
    }
}

static int gpu_allgather_floats(bench_env *env, const float *mine, int count, float *out) {
    gpu_env *g = env->impl;
    size_t bytes = (size_t)count * sizeof(float);
    memcpy(g->sync_host_send, mine, bytes);
    if (cuda_ok(cudaMemcpyAsync(g->sync_send, g->sync_host_send, bytes,
                                cudaMemcpyHostToDevice, g->stream), g, "cudaMemcpyAsync") ||
        nccl_ok(ncclAllGather(g->sync_send, g->sync_recv, (size_t)count, ncclFloat32,
                              g->nccl, g->stream), g, "ncclAllGather (bench exchange)") ||
        cuda_ok(cudaMemcpyAsync(g->sync_host_recv, g->sync_recv, bytes * (size_t)g->nranks,
                                cudaMemcpyDeviceToHost, g->stream), g, "cudaMemcpyAsync") ||
        cuda_ok(cudaStreamSynchronize(g->stream), g, "cudaStreamSynchronize"))
        return -1;
    if (out) memcpy(out, g->sync_host_recv, bytes * (size_t)g->nranks);
    return 0;
}

/* Graph capture on the bench's stream. Thread-local mode: the library may
 * call CUDA APIs that are illegal in global capture mode on other threads
 * (none here), and a failed capture is ended and discarded. */
static int gpu_capture_begin(bench_env *env) {
    gpu_env *g = env->impl;
    return cuda_ok(cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal), g,
                   "cudaStreamBeginCapture");
}

static int gpu_capture_end(bench_env *env, void **graph) {
    gpu_env *g = env->impl;
    cudaGraph_t captured = NULL;
    cudaGraphExec_t exec = NULL;
    *graph = NULL;
    if (cuda_ok(cudaStreamEndCapture(g->stream, &captured), g, "cudaStreamEndCapture"))
        return -1;
    int rc = cuda_ok(cudaGraphInstantiate(&exec, captured, 0), g, "cudaGraphInstantiate");
    cudaGraphDestroy(captured);
    if (rc == 0) *graph = exec;
    return rc;
}

static int gpu_graph_launch(bench_env *env, void *graph) {
    gpu_env *g = env->impl;
    return cuda_ok(cudaGraphLaunch((cudaGraphExec_t)graph, g->stream), g, "cudaGraphLaunch");
}

static void gpu_graph_destroy(bench_env *env, void *graph) {
    (void)env;
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static int gpu_device_memory(bench_env *env, size_t *free_bytes, size_t *total_bytes) {
    gpu_env *g = env->impl;
    return cuda_ok(cudaMemGetInfo(free_bytes, total_bytes), g, "cudaMemGetInfo");
}

static int gpu_lt_gemm(bench_env *env, const bench_lt_gemm *args) {
    gpu_env *g = env->impl;
    return bench_peer_lt_gemm(&g->lt, args, g->stream);
}

static int gpu_peer_epilogue(bench_env *env, const bench_peer_epilogue_args *args) {
    gpu_env *g = env->impl;
    return bench_peer_epilogue(args, g->stream);
}

static void gpu_destroy(bench_env *env) {
    gpu_env *g = env->impl;
    if (g) {
        remove_id(g);
        if (g->stream) cudaStreamSynchronize(g->stream);
        bench_peer_lt_destroy(g->lt);
        /* After cgm_comm_destroy (run_rank), which still uses the ncclComm_t. */
        if (g->nccl) ncclCommDestroy(g->nccl);
        if (g->sync_send) cudaFree(g->sync_send);
        if (g->sync_recv) cudaFree(g->sync_recv);
        if (g->sync_host_send) cudaFreeHost(g->sync_host_send);
        if (g->sync_host_recv) cudaFreeHost(g->sync_host_recv);
        if (g->start) cudaEventDestroy(g->start);
        if (g->stop) cudaEventDestroy(g->stop);
        if (g->stream) cudaStreamDestroy(g->stream);
        free(g);
    }
    free(env);
}

static const bench_env_ops gpu_env_ops = {
    "gpu",
    gpu_comm_create,
    gpu_buffer_alloc,
    gpu_buffer_free,
    gpu_upload,
    gpu_download,
    gpu_timer_start,
    gpu_timer_stop_us,
    gpu_collective,
    gpu_allgather_floats,
    gpu_destroy,
    gpu_capture_begin,
    gpu_capture_end,
    gpu_graph_launch,
    gpu_graph_destroy,
    gpu_device_memory,
    gpu_lt_gemm,
    gpu_peer_epilogue,
};

bench_env *bench_env_gpu_create(void) {
    char why[256];
    bench_env *env = calloc(1, sizeof *env);
    gpu_env *g = calloc(1, sizeof *g);
    if (!env || !g) {
        fprintf(stderr, "commgemm-bench: out of memory\n");
        free(env);
        free(g);
        return NULL;
    }
    g->rank = g->device = -1;
    g->started = time(NULL);
    env->ops = &gpu_env_ops;
    env->impl = g;
    env->device = -1;
    /* Without a launcher: one rank per visible GPU. No CUDA context is made
     * here: this process may only re-execute itself as the ranks. */
    env->default_ranks = bench_gpu_count(why, sizeof why);
    return env;
}
