/* Multi-rank GPU test scaffolding (see test_gpu_common.h). */
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "test_gpu_common.h"

int gpu_count_or_skip(void) {
    int fds[2];
    if (pipe(fds) != 0) TEST_FAIL("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* The probe child: CUDA is initialised here only. */
        char msg[256];
        int count = 0;
        cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess || count == 0)
            snprintf(msg, sizeof msg, "0 no CUDA device: cudaGetDeviceCount "
                     "returned %d (%s)", (int)err, cudaGetErrorString(err));
        else
            snprintf(msg, sizeof msg, "%d", count);
        if (write(fds[1], msg, strlen(msg) + 1) < 0) _exit(2);
        _exit(0);
    }
    close(fds[1]);
    char buf[256] = "";
    ssize_t got = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    if (got <= 0) TEST_FAIL("GPU probe child said nothing");
    int count = atoi(buf);
    if (count <= 0) TEST_SKIP("%s", strchr(buf, ' ') ? strchr(buf, ' ') + 1 : buf);
    return count;
}

static int ndev_probed;

int gpu_ranks_or_skip(void) {
    ndev_probed = gpu_count_or_skip();
    const char *v = getenv("COMMGEMM_TEST_RANKS");
    if (!v || !*v) return ndev_probed;
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 64)
        TEST_FAIL("COMMGEMM_TEST_RANKS=%s: expected a rank count 1..64", v);
    return (int)n;
}

bool gpu_local_bootstrap(int nranks) {
    if (!ndev_probed) ndev_probed = gpu_count_or_skip();
    const char *b = getenv("COMMGEMM_TEST_BOOTSTRAP");
    return nranks > ndev_probed || (b && !strcmp(b, "local"));
}

cgm_config gpu_config(void) {
    cgm_config c = CGM_CONFIG_INIT;
    c.backend = CGM_BACKEND_P2P;
    c.max_m = 8192;
    c.max_n = 1024;
    c.max_k = 1024;
    c.timeout_ms = test_scaled_ms(20000);
    /* Exact references: cuBLASLt may not round split-k parts to a
     * bf16/fp16 output before their sum. */
    c.gemm_reduction = CGM_GEMM_REDUCTION_FP32;
    return c;
}

typedef struct run_arg {
    const cgm_config *config;
    gpu_case_fn fn;
    void *arg;
} run_arg;

static void id_path(char *buf, size_t len, const char *rendezvous) {
    snprintf(buf, len, "/tmp/cgm-gpu-%s.ncclid", rendezvous);
}

/* Checks the comm's backend, runs the case, tears down. */
static int run_case(gpu_rank *g, run_arg *ra) {
    cgm_backend b;
    CHECK_OK(cgm_comm_backend(g->comm, CGM_OP_ALL_GATHER_GEMM, &b));
    /* The suites run p2p; a case may ask for another backend. */
    CHECK_INT_EQ(b, ra->config->backend > CGM_BACKEND_AUTO ? ra->config->backend
                                                            : CGM_BACKEND_P2P);
    ra->fn(g, ra->arg);
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    CHECK_OK(cgm_comm_destroy(g->comm));
    if (g->nccl) NCCL_CHECK(ncclCommDestroy(g->nccl));
    cudaStreamDestroy(g->stream);
    return 0;
}

/* A forked rank's start: its device (rank % GPUs) and stream. */
static void rank_begin(gpu_rank *g, int rank, int nranks) {
    memset(g, 0, sizeof *g);
    g->rank = rank;
    g->nranks = nranks;
    GPU_CHECK(cudaGetDeviceCount(&g->ndev));
    GPU_CHECK(cudaSetDevice(rank % g->ndev));
    GPU_CHECK(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
}

static int rank_main(int rank, int nranks, const char *rendezvous, void *p) {
    run_arg *ra = p;
    gpu_rank g;
    setenv("NCCL_NVLS_ENABLE", "0", 1); /* never NVLink multicast */
    rank_begin(&g, rank, nranks);
    ncclUniqueId id;
    char path[256], tmp[300];
    id_path(path, sizeof path, rendezvous);
    if (rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof id, 1, f) != 1) TEST_FAIL("write %s", tmp);
        fclose(f);
        if (rename(tmp, path) != 0) TEST_FAIL("rename %s", path);
    } else {
        int64_t deadline = cgm_now_ns() + 60ll * 1000000000ll;
        for (;;) {
            FILE *f = fopen(path, "rb");
            if (f) {
                size_t n = fread(&id, sizeof id, 1, f);
                fclose(f);
                if (n == 1) break;
            }
            if (cgm_now_ns() > deadline) TEST_FAIL("no NCCL id in %s", path);
            usleep(10000);
        }
    }
    NCCL_CHECK(ncclCommInitRank(&g.nccl, nranks, id, rank));
    CHECK_OK(cgm_comm_init_nccl(g.nccl, ra->config, &g.comm));
    if (rank == 0) unlink(path);
    return run_case(&g, ra);
}

/* A rank of a LOCAL bootstrap: no NCCL, ranks may share a GPU. */
static int rank_main_local(int rank, int nranks, const char *rendezvous,
                           void *p) {
    run_arg *ra = p;
    gpu_rank g;
    rank_begin(&g, rank, nranks);
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = CGM_BOOTSTRAP_LOCAL;
    b.rank = rank;
    b.nranks = nranks;
    b.rendezvous = rendezvous;
    CHECK_OK(cgm_comm_create(&b, ra->config, &g.comm));
    return run_case(&g, ra);
}

void gpu_run(int nranks, const cgm_config *config, gpu_case_fn fn, void *arg,
             int timeout_s) {
    run_arg ra = {config, fn, arg};
    int codes[64];
    bool local = gpu_local_bootstrap(nranks);
    if (local && config->backend != CGM_BACKEND_P2P)
        TEST_SKIP("%d ranks on a LOCAL bootstrap (%d GPUs%s) run the p2p "
                  "backend only, the case asks for %s: NCCL needs its own "
                  "GPU per rank", nranks, ndev_probed,
                  nranks > ndev_probed ? ", shared" : "",
                  cgm_backend_name(config->backend));
    if (test_run_ranks(nranks, local ? rank_main_local : rank_main, &ra,
                       timeout_s, codes) != 0)
        TEST_FAIL("a rank failed (see above)");
}

cgm_matrix gpu_matrix(cgm_dtype dtype, int64_t rows, int64_t cols) {
    cgm_matrix m = cgm_matrix_make(NULL, dtype, rows, cols);
    size_t bytes = (size_t)(rows * cols) * cgm_dtype_size(dtype);
    if (bytes) {
        GPU_CHECK(cudaMalloc(&m.data, bytes));
        GPU_CHECK(cudaMemset(m.data, 0xff, bytes));
        /* cudaMemset runs on the legacy stream, which the cases' streams
         * (non-blocking) do not wait for: finish it before they write. */
        GPU_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
    }
    return m;
}

void gpu_matrix_free(cgm_matrix *m) {
    if (m->data) cudaFree(m->data);
    m->data = NULL;
}

void gpu_fill(const cgm_matrix *m, uint64_t seed, int64_t row0, int64_t col0,
              int64_t global_cols, cudaStream_t stream) {
    GPU_CHECK(tref_fill(m->data, (int)m->dtype, m->rows, m->cols,
                        m->ld ? m->ld : m->cols, seed, row0, col0, global_cols,
                        stream));
}

cgm_matrix gpu_fetch(const cgm_matrix *m, cudaStream_t stream) {
    cgm_matrix h = test_alloc(m->dtype, m->rows, m->cols, 0);
    size_t es = cgm_dtype_size(m->dtype);
    if (m->rows && m->cols)
        GPU_CHECK(cudaMemcpy2DAsync(h.data, (size_t)m->cols * es, m->data,
                                    (size_t)(m->ld ? m->ld : m->cols) * es,
                                    (size_t)m->cols * es, (size_t)m->rows,
                                    cudaMemcpyDeviceToHost, stream));
    GPU_CHECK(cudaStreamSynchronize(stream));
    return h;
}

double *gpu_fetch_doubles(const double *dev, size_t count,
                          cudaStream_t stream) {
    double *h = malloc((count ? count : 1) * sizeof *h);
    if (!h) TEST_FAIL("malloc %zu doubles", count);
    if (count)
        GPU_CHECK(cudaMemcpyAsync(h, dev, count * sizeof *h,
                                  cudaMemcpyDeviceToHost, stream));
    GPU_CHECK(cudaStreamSynchronize(stream));
    return h;
}

double gpu_value(uint64_t seed, int64_t index) {
    return test_value(seed, index);
}

void gpu_expect(const cgm_matrix *y, const double *ref, int64_t rows,
                int64_t n, double tol, cudaStream_t stream, const char *what) {
    cgm_matrix h = gpu_fetch(y, stream);
    int64_t wrong = test_compare(&h, ref, rows, n, tol, what);
    test_free(&h);
    if (wrong) TEST_FAIL("%s: %lld of %lld values wrong", what,
                         (long long)wrong, (long long)(rows * n));
}
