/* bench_env for the host backend: host memory, a LOCAL bootstrap, the
 * monotonic wall clock (host ops complete before they return). A GPU
 * environment slots in here: cudaMalloc'd buffers with host staging, an NCCL
 * comm from a unique id shared through the launcher (a file named after the
 * rendezvous), CUDA events on its own stream. */
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
    host_destroy,
};

bench_env *bench_env_create(cgm_backend backend) {
    switch (backend) {
    case CGM_BACKEND_DEFAULT:
    case CGM_BACKEND_AUTO:
    case CGM_BACKEND_HOST: {
        bench_env *env = calloc(1, sizeof *env);
        if (env) env->ops = &host_env_ops;
        return env;
    }
    default:
        fprintf(stderr, "commgemm-bench: --backend %s: this build of the bench "
                "drives the host backend only (the GPU environment, with device "
                "buffers and CUDA events, is not written yet); use --backend "
                "host or auto\n", cgm_backend_name(backend));
        return NULL;
    }
}
