/* The autotuner's hooks shared by the GPU backends: capture check, timing
 * with CUDA events on the call's stream, the exchange through NCCL and the
 * device name. The candidates are each backend's own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "gpu/gpu.h"

bool cgm_gpu_tune_capturing(const cgm_call *call) {
    return cgm_stream_capturing((cudaStream_t)call->stream);
}

/* The backend's asynchronous error (a device wait that expired ends its
 * kernels), for cgm_gpu_wait_done. */
struct async_ctx {
    cgm_comm *comm;
    const cgm_backend_vtable *vt;
    void *state;
};

static cgm_status backend_async(void *p) {
    const struct async_ctx *a = p;
    return a->vt->async_error ? a->vt->async_error(a->comm, a->state)
                              : CGM_SUCCESS;
}

/* Waits for `event`, bounded by the comm's timeout, watching the backend's
 * asynchronous error. */
static cgm_status wait_event(cgm_comm *comm, const cgm_backend_vtable *vt,
                             void *state, cudaEvent_t event) {
    struct async_ctx a = {comm, vt, state};
    bool expired = false;
    cgm_status status = cgm_gpu_wait_done(event, NULL, comm->config.timeout_ms,
                                          backend_async, &a, &expired);
    if (expired)
        return cgm_error(CGM_ERROR_TIMEOUT,
                         "autotuner (%s backend): rank %d waited %lld ms "
                         "(COMMGEMM_TIMEOUT_MS) for its measured runs to "
                         "finish; a peer did not run them; every rank must "
                         "make the same calls with the same COMMGEMM_TUNE",
                         vt->name, comm->rank,
                         (long long)comm->config.timeout_ms);
    return status;
}

cgm_status cgm_gpu_tune_measure(cgm_comm *comm, void *state,
                                const cgm_call *call, int warmup, int reps,
                                int64_t *ns) {
    cgm_status status = CGM_SUCCESS;
    const cgm_backend_vtable *vt = cgm_backend_lookup(call->backend);
    cudaStream_t stream = (cudaStream_t)call->stream;
    cudaEvent_t *events = calloc((size_t)reps + 1, sizeof *events);
    int previous = -1, created = 0;
    if (!events)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "autotuner: %d events",
                         reps + 1);
    CGM_CUDA_TRY(cudaGetDevice(&previous));
    if (comm->cuda_device >= 0 && previous != comm->cuda_device)
        CGM_CUDA_TRY(cudaSetDevice(comm->cuda_device));
    for (; created <= reps; created++)
        CGM_CUDA_TRY(cudaEventCreate(&events[created]));
    /* Device time, not the host's: a small op's runs enqueued back to back
     * would be timed at the host's enqueue rate (launches, copies, events:
     * 10-50 us per step), which a CUDA graph, or a host running ahead of
     * the device, does not pay. So the stream is held long enough for the
     * host to enqueue every timed run first (cgm_tune_hold_ns). */
    int64_t t0 = cgm_now_ns();
    for (int i = 0; i < warmup; i++)
        CGM_TRY(vt->run(comm, state, call));
    int64_t hold = cgm_tune_hold_ns(cgm_now_ns() - t0, warmup, reps);
    CGM_CUDA_TRY(cgm_dev_hold((unsigned long long)hold, stream));
    CGM_CUDA_TRY(cudaEventRecord(events[0], stream));
    for (int i = 0; i < reps; i++) {
        CGM_TRY(vt->run(comm, state, call));
        CGM_CUDA_TRY(cudaEventRecord(events[i + 1], stream));
    }
    CGM_TRY(wait_event(comm, vt, state, events[reps]));
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        CGM_CUDA_TRY(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
        ns[i] = (int64_t)((double)ms * 1e6);
    }
fail:
    /* After a timeout the events may still be pending: destroying them is
     * allowed (resources are released when the work completes). */
    for (int i = 0; i < created; i++) cudaEventDestroy(events[i]);
    free(events);
    if (previous >= 0 && previous != comm->cuda_device) cudaSetDevice(previous);
    return status;
}

cgm_status cgm_gpu_tune_allgather(cgm_comm *comm, void *state,
                                  const int64_t *mine, int words,
                                  int64_t *all) {
    (void)state;
    return cgm_gpu_allgather_host(comm, mine, all,
                                  sizeof(int64_t) * (size_t)words);
}

static cgm_status bootstrap_exchange(cgm_comm *comm, void *state,
                                     const void *send, void *recv,
                                     size_t bytes) {
    (void)state;
    return cgm_gpu_allgather_host(comm, send, recv, bytes);
}

cgm_status cgm_gpu_tune_agree(cgm_comm *comm, void *state,
                              const cgm_call *call, const int64_t *mine,
                              int words, int64_t *all) {
    return cgm_gpu_tune_agree_via(bootstrap_exchange, comm, state, call, mine,
                                  words, all);
}

cgm_status cgm_gpu_tune_agree_via(cgm_gpu_exchange_fn exchange,
                                  cgm_comm *comm, void *state,
                                  const cgm_call *call, const int64_t *mine,
                                  int words, int64_t *all) {
    enum { SIG = CGM_SIGNATURE_WORDS };
    const size_t row = (size_t)(SIG + words);
    int64_t *send = malloc(row * sizeof *send);
    int64_t *recv = malloc(row * (size_t)comm->nranks * sizeof *recv);
    int64_t *sigs = malloc((size_t)SIG * (size_t)comm->nranks * sizeof *sigs);
    cgm_status status = CGM_SUCCESS;
    if (!send || !recv || !sigs) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "autotuner: exchange "
                           "buffers for %d ranks", comm->nranks);
        goto fail;
    }
    cgm_call_signature(call, send);
    memcpy(send + SIG, mine, (size_t)words * sizeof *mine);
    CGM_TRY(exchange(comm, state, send, recv, row * sizeof *send));
    for (int r = 0; r < comm->nranks; r++) {
        memcpy(sigs + (size_t)r * SIG, recv + (size_t)r * row,
               SIG * sizeof *sigs);
        memcpy(all + (size_t)r * (size_t)words, recv + (size_t)r * row + SIG,
               (size_t)words * sizeof *all);
    }
    status = cgm_signature_compare(comm, sigs);
fail:
    free(send);
    free(recv);
    free(sigs);
    return status;
}

void cgm_gpu_tune_device_name(const cgm_comm *comm, void *state, char *buf,
                              size_t len) {
    struct cudaDeviceProp prop;
    (void)state;
    if (cudaGetDeviceProperties(&prop, comm->cuda_device) == cudaSuccess) {
        snprintf(buf, len, "%s", prop.name);
    } else {
        (void)cudaGetLastError();
        snprintf(buf, len, "cuda-device");
    }
}
