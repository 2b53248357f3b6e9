/* bench_env for the host backend: host memory, a LOCAL bootstrap, the
 * monotonic wall clock (host ops complete before they return). And the
 * choice between it and the GPU environment (bench_env_gpu.c). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static double wall_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static cgm_status host_comm_create(bench_env *env, const cgm_bootstrap *bootstrap,
                                   const cgm_config *config, cgm_comm **comm) {
    (void)env;
    return cgm_comm_create(bootstrap, config, comm);
}

static int host_buffer_alloc(bench_env *env, size_t bytes, bench_buffer *out) {
    (void)env;
    /* 64-byte aligned, never NULL (even for 0 bytes), like a device buffer. */
    size_t rounded = (bytes + 63) / 64 * 64;
    out->data = aligned_alloc(64, rounded ? rounded : 64);
    out->host = out->data;
    out->bytes = bytes;
    return out->data ? 0 : -1;
}

static void host_buffer_free(bench_env *env, bench_buffer *buffer) {
    (void)env;
    free(buffer->data);
    memset(buffer, 0, sizeof *buffer);
}

static int host_copy_noop(bench_env *env, bench_buffer *buffer) {
    (void)env;
    (void)buffer;
    return 0;
}

static void host_timer_start(bench_env *env) { env->t0 = wall_us(); }

static double host_timer_stop_us(bench_env *env) { return wall_us() - env->t0; }

static void host_destroy(bench_env *env) { free(env); }

static const bench_env_ops host_env_ops = {
    "host",
    host_comm_create,
    host_buffer_alloc,
    host_buffer_free,
    host_copy_noop,
    host_copy_noop,
    host_timer_start,
    host_timer_stop_us,
    NULL, /* collectives through the library */
    NULL,
    host_destroy,
    NULL, /* no graphs: --graph times the calls themselves */
    NULL,
    NULL,
    NULL,
    NULL, /* no device memory */
    NULL, /* no cuBLASLt: no peer (peer_us "-") */
    NULL, /* nor its epilogue kernel */
};

static bench_env *host_env_create(void) {
    bench_env *env = calloc(1, sizeof *env);
    if (env) env->ops = &host_env_ops, env->device = -1;
    else fprintf(stderr, "commgemm-bench: out of memory\n");
    return env;
}

/* --backend not given: what the comm will choose (COMMGEMM_BACKEND, then
 * auto); a bad value is left for the comm to report. */
static cgm_backend effective_backend(cgm_backend backend) {
    if (backend != CGM_BACKEND_DEFAULT) return backend;
    const char *text = getenv("COMMGEMM_BACKEND");
    cgm_backend b;
    if (text && *text && cgm_backend_from_name(text, &b) == CGM_SUCCESS &&
        b != CGM_BACKEND_DEFAULT)
        return b;
    return CGM_BACKEND_AUTO;
}

bench_env *bench_env_create(cgm_backend backend) {
    cgm_backend b = effective_backend(backend);
    if (b == CGM_BACKEND_HOST) return host_env_create();
#ifdef COMMGEMM_BENCH_HAVE_CUDA
    char why[256] = "";
    int gpus = bench_gpu_count(why, sizeof why);
    if (gpus > 0) return bench_env_gpu_create();
    if (b == CGM_BACKEND_AUTO) return host_env_create();
    fprintf(stderr, "commgemm-bench: --backend %s: no CUDA device is visible "
            "(%s); run on a GPU machine, or use --backend host or auto\n",
            cgm_backend_name(b), why);
    return NULL;
#else
    if (b == CGM_BACKEND_AUTO) return host_env_create();
    fprintf(stderr, "commgemm-bench: --backend %s: this build of the bench has "
            "no GPU environment (commgemm was built without CUDA); rebuild with "
            "-DCOMMGEMM_CUDA=ON where nvcc and NCCL are installed, or use "
            "--backend host or auto\n", cgm_backend_name(b));
    return NULL;
#endif
}
