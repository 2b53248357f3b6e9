/* The p2p backend's table: probe, init (the workspace, registered and
 * mapped by every rank), finalize, the autotuner's hooks. An op goes to
 * p2p_run (p2p_run.c); p2p.h lists the files. */
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p_exchange.h"
#include "backend/p2p/p2p_epilogue.h"
#include "backend/p2p/p2p_fp8.h"
#include "backend/p2p/p2p_fused.h"
#include "backend/p2p/p2p_plans.h"
#include "backend/p2p/p2p_run.h"
#include "backend/p2p/p2p_signal.h"
#include "backend/p2p/p2p_timeline.h"
#include "device/hopper_gemm.h"

/* The comm's device: the NCCL communicator's, or for a LOCAL bootstrap
 * the calling thread's current device (as ncclCommInitRank takes it). */
static int comm_device(const cgm_comm *comm) {
    int device = comm->cuda_device;
    if (comm->bootstrap_kind == CGM_BOOTSTRAP_LOCAL && device < 0 &&
        cudaGetDevice(&device) != cudaSuccess) {
        (void)cudaGetLastError();
        device = -1;
    }
    return device;
}

static cgm_status p2p_probe(const cgm_comm *comm) {
    int count = 0;
    cgm_status status = cgm_gpu_probe_common(comm, "p2p", true, &count);
    if (status != CGM_SUCCESS) return status;
    int device = comm_device(comm);
    if (device < 0 || device >= count)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the p2p backend needs the comm's device (the NCCL "
                         "communicator's, or the current one for a LOCAL "
                         "bootstrap), found device %d of %d visible; create "
                         "the comm on a visible device",
                         device, count);
    for (int d = 0; d < count; d++) {
        if (d == device) continue;
        int can = 0;
        if (cudaDeviceCanAccessPeer(&can, device, d) != cudaSuccess) {
            (void)cudaGetLastError();
            can = 0;
        }
        if (!can && comm->nranks > 1)
            CGM_INFO(CGM_SUB_P2P, "device %d has no peer access to device "
                     "%d (init checks the devices the ranks actually use)",
                     device, d);
    }
    return CGM_SUCCESS;
}

static void state_free(p2p_state *st) {
    p2p_timeline_free(st);
    p2p_plan_cache_clear(st);
    p2p_fused_cache_clear(st);
    for (int q = 0; q < P2P_MAX_QUEUES; q++) {
        if (st->queues[q]) cudaStreamDestroy(st->queues[q]);
        if (st->join[q]) cudaEventDestroy(st->join[q]);
        if (st->lt_workspace[q]) cudaFree(st->lt_workspace[q]);
    }
    if (st->fork) cudaEventDestroy(st->fork);
    cgm_lt_destroy(st->lt);
    if (st->partial) cudaFree(st->partial);
    cgm_fp8_workspace_free(&st->fp8_ws);
    cgm_fp8_workspace_free(&st->epi_ws);
    if (st->fp8_ready) cudaEventDestroy(st->fp8_ready);
    if (st->notice_queue) cudaStreamDestroy(st->notice_queue);
    if (st->notice_pinned) cudaFreeHost(st->notice_pinned);
    if (st->xchg_queue) cudaStreamDestroy(st->xchg_queue);
    if (st->xchg_out) cudaFreeHost(st->xchg_out);
    if (st->xchg_in) cudaFreeHost(st->xchg_in);
    if (st->xchg_notice) cudaFreeHost(st->xchg_notice);
    free(st->xchg_got);
    if (st->abort_host) cudaFreeHost(st->abort_host);
    cgm_peer_mem_destroy(&st->ws);
    free(st);
}

/* This rank's device resources: the workspace (not yet mapped by the
 * peers), slots, queues, cuBLASLt, the kernels loaded. Local. */
static cgm_status alloc_local(p2p_state *st) {
    cgm_status status = CGM_SUCCESS;
    const cgm_comm *comm = st->comm;
    /* Sizes, from the config's maxima (fp32 elements: the widest dtype). */
    const cgm_resolved_config *c = &comm->config;
    int64_t width = c->max_k > c->max_n ? c->max_k : c->max_n;
    int64_t slot_rows = cgm_ceil_div(c->max_m, st->nranks);
    int partial_slots = 0, recv_slots = 0;
    p2p_slot_needs(st->nranks, c->max_m, &partial_slots, &recv_slots);
    /* AR flags its gather phase with chunk ids P*S + chunk (plan.h). */
    st->flag_chunks = 2 * (size_t)st->nranks * P2P_MAX_SPLITS + 2;
    size_t flag_bytes = (size_t)st->nranks * PLAN_FLAG_COUNT *
                        st->flag_chunks * sizeof(unsigned long long);
    st->gather_offset = (flag_bytes + 255) & ~(size_t)255;
    st->gather_bytes = (size_t)c->max_m * (size_t)width * 4;
    st->recv_offset = st->gather_offset +
                      ((st->gather_bytes + 255) & ~(size_t)255);
    st->recv_bytes = (size_t)recv_slots * (size_t)slot_rows *
                     (size_t)c->max_n * 4;
    st->partial_bytes = (size_t)partial_slots * (size_t)slot_rows *
                        (size_t)c->max_n * 4;
    /* The comm's device state last, where peers can raise its notice. */
    st->state_offset = (st->recv_offset + st->recv_bytes + 255) &
                       ~(size_t)255;
    st->xchg_offset = st->state_offset + 256;
    size_t total = st->xchg_offset + p2p_exchange_bytes(st->nranks);
    CGM_INFO(CGM_SUB_P2P, "p2p workspace: %zu MiB registered (gather %zu, "
             "%d recv slots of %lld x %lld fp32) + %zu MiB local partials, "
             "from max_m=%lld max_n=%lld max_k=%lld",
             total >> 20, st->gather_bytes >> 20, recv_slots,
             (long long)slot_rows, (long long)c->max_n,
             st->partial_bytes >> 20, (long long)c->max_m,
             (long long)c->max_n, (long long)c->max_k);
    CGM_TRY(cgm_peer_mem_alloc(total, &st->ws));
    if (st->partial_bytes)
        CGM_CUDA_TRY(cudaMalloc(&st->partial, st->partial_bytes));
    CGM_CUDA_TRY(cudaHostAlloc((void **)&st->abort_host,
                               sizeof *st->abort_host, cudaHostAllocMapped));
    memset((void *)st->abort_host, 0, sizeof *st->abort_host);
    CGM_CUDA_TRY(cudaHostGetDevicePointer((void **)&st->abort_dev,
                                          st->abort_host, 0));
    /* The workspace is zeroed: epoch 0, no abort, no notice. */
    st->dev = (cgm_dev_state *)((char *)st->ws.local + st->state_offset);
    cgm_dev_state init;
    memset(&init, 0, sizeof init);
    init.record = st->abort_dev;
    init.rank = st->rank;
    CGM_CUDA_TRY(cudaMemcpy(st->dev, &init, sizeof init,
                            cudaMemcpyHostToDevice));
    CGM_CUDA_TRY(cudaHostAlloc((void **)&st->notice_pinned,
                               sizeof *st->notice_pinned, cudaHostAllocDefault));
    CGM_CUDA_TRY(cudaHostAlloc((void **)&st->xchg_out, sizeof *st->xchg_out,
                               cudaHostAllocDefault));
    CGM_CUDA_TRY(cudaHostAlloc((void **)&st->xchg_in,
                               (size_t)st->nranks * sizeof *st->xchg_in,
                               cudaHostAllocDefault));
    CGM_CUDA_TRY(cudaHostAlloc((void **)&st->xchg_notice,
                               sizeof *st->xchg_notice, cudaHostAllocDefault));
    st->xchg_got = calloc((size_t)st->nranks, sizeof *st->xchg_got);
    if (!st->xchg_got)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "p2p backend: %d exchange "
                         "flags", st->nranks);

    int least = 0, greatest = 0;
    CGM_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (int q = 0; q < P2P_MAX_QUEUES; q++) {
        /* The comm queue at the highest priority, the compute queues one
         * below it (still above the default streams): the comm queue's flag
         * kernels are one thread each, and a wait or signal kernel queued
         * at a lower priority than a pending GEMM is dispatched only once
         * every block of that GEMM has been, so a push could wait for a
         * whole GEMM. */
        int below = greatest < least ? greatest + 1 : greatest;
        int prio = q > 0 ? below : greatest;
        CGM_CUDA_TRY(cudaStreamCreateWithPriority(
            &st->queues[q], cudaStreamNonBlocking, prio));
        CGM_CUDA_TRY(cudaEventCreateWithFlags(&st->join[q],
                                              cudaEventDisableTiming));
        if (q > 0)
            CGM_CUDA_TRY(cudaMalloc(&st->lt_workspace[q], P2P_LT_WORKSPACE));
    }
    CGM_CUDA_TRY(cudaEventCreateWithFlags(&st->fork, cudaEventDisableTiming));
    /* The notices go by copy engine, beside whatever the queues hold. */
    CGM_CUDA_TRY(cudaStreamCreateWithPriority(&st->notice_queue,
                                              cudaStreamNonBlocking, greatest));
    CGM_CUDA_TRY(cudaStreamCreateWithPriority(&st->xchg_queue,
                                              cudaStreamNonBlocking, greatest));
    CGM_CUDA_TRY(cudaDeviceGetAttribute(&st->sm_count,
                                        cudaDevAttrMultiProcessorCount,
                                        st->device));
    CGM_TRY(cgm_lt_create(&st->lt));
    /* Every kernel an op launches, loaded now: a lazily loaded wait or
     * signal kernel launched beside a spinning kernel may never load
     * (device.h, cgm_dev_preload). */
    CGM_CUDA_TRY(cgm_dev_preload());
    CGM_CUDA_TRY(cgm_hgemm_preload());
    CGM_CUDA_TRY(cudaDeviceSynchronize());
    if (st->fault.init)
        status = cgm_error(CGM_ERROR_CUDA, "p2p: failure injected on rank %d "
                           "after its device resources were made "
                           "(COMMGEMM_TEST_FAIL, testing only)", st->rank);
fail:
    return status;
}

static cgm_status p2p_init(cgm_comm *comm, void **state) {
    cgm_status status = CGM_SUCCESS;
    int previous = -1;
    p2p_state *st = calloc(1, sizeof *st);
    if (!st) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc p2p_state");
    st->comm = comm;
    st->rank = comm->rank;
    st->nranks = comm->nranks;
    st->device = comm->cuda_device = comm_device(comm);
    st->timeout_ms = comm->config.timeout_ms;
    /* Every step that can fail on one rank alone ends in an exchange of
     * verdicts, so that a failure on any rank fails the create on every
     * rank at once, naming it, instead of leaving the peers to wait out
     * the timeout (or, past the last exchange, to make a comm whose first
     * op waits for a rank that has none). */
    status = cgm_test_fault_read(st->rank, &st->fault);
    if (status == CGM_SUCCESS) status = p2p_enter_device(st, &previous);
    CGM_TRY(cgm_gpu_agree(comm, status, "starting the p2p backend"));
    CGM_TRY(cgm_check_node_peers(comm, st->device));
    CGM_TRY(cgm_gpu_agree(comm, alloc_local(st),
                          "making the p2p backend's device resources"));
    CGM_TRY(cgm_peer_mem_open(comm, &st->ws));
    p2p_leave_device(st, previous);
    *state = st;
    return CGM_SUCCESS;
fail:
    state_free(st);
    if (previous >= 0 && previous != comm->cuda_device) cudaSetDevice(previous);
    *state = NULL;
    return status;
}

static cgm_status p2p_finalize(cgm_comm *comm, void *state) {
    p2p_state *st = state;
    cgm_status status = CGM_SUCCESS;
    int previous = -1;
    if (!st) return CGM_SUCCESS;
    if (p2p_enter_device(st, &previous) == CGM_SUCCESS) {
        /* Waits are bounded, so this is too. */
        for (int q = 0; q < P2P_MAX_QUEUES; q++)
            if (st->queues[q]) (void)cudaStreamSynchronize(st->queues[q]);
        /* No peer may still read or write our workspace when it is freed:
         * meet once more, unless the comm is broken (peers may be gone). */
        bool broken = comm->broken != CGM_SUCCESS ||
                      (st->abort_host && st->abort_host->set);
        p2p_tell_of_own_expiry(st); /* one nobody asked about yet */
        if (!broken && st->nranks > 1) {
            int one = 1, *all = calloc((size_t)st->nranks, sizeof(int));
            if (all) {
                status = cgm_gpu_allgather_host(comm, &one, all,
                                                sizeof one);
                free(all);
            }
        }
    }
    int device = st->device;
    state_free(st);
    if (previous >= 0 && previous != device) cudaSetDevice(previous);
    return status;
}

/* ---- autotuner candidates (the other hooks are gpu_tune.c's) ---- */

/* Smaller cuBLASLt chunks lose more than the earlier start wins. */
#define P2P_TUNE_MIN_PIECE_ROWS 128

/* The fused kernel with 2, 4 and 8 pieces per shard where it can run the
 * call (as many as fit: 1 piece is never best, and the comm-bound GEMM+RS
 * shapes want 4 or 8). */
static int add_fused_candidates(const p2p_state *st, const cgm_comm *comm,
                                const cgm_call *call, cgm_tune_candidate *out,
                                int n) {
    if (!p2p_fused_tunable(st, call)) return n;
    int64_t shard = cgm_ceil_div(call->m, comm->nranks);
    static const int pieces[] = {2, 4, 8};
    for (int i = 0; i < 3 && n < CGM_TUNE_MAX_CANDIDATES; i++)
        if (i == 0 || shard >= (int64_t)pieces[i] * CGM_HGEMM_TILE_M)
            out[n++] = (cgm_tune_candidate){CGM_ALGO_FUSED, pieces[i], 0};
    return n;
}

/* AG+GEMM's split candidates once more with their chunk GEMMs on two
 * compute queues in turn (after the others, as many as fit): no push
 * waits on an AG GEMM, so a GEMM whose rows have arrived may start on the
 * SMs that the previous one's last wave leaves idle; either order wins on
 * some shapes. */
static int add_order_twins(const cgm_call *call, cgm_tune_candidate *out,
                           int n) {
    if (call->op != CGM_OP_ALL_GATHER_GEMM) return n;
    int base = n;
    for (int i = 0; i < base && n < CGM_TUNE_MAX_CANDIDATES; i++)
        if (out[i].algo == CGM_ALGO_SPLIT_PIPELINED)
            out[n++] = (cgm_tune_candidate){out[i].algo, out[i].splits, 2};
    return n;
}

/* The plan schedules' candidates, then fused, then the AG order twins. */
static int p2p_tune_candidates(const cgm_comm *comm, const cgm_call *call,
                               cgm_tune_candidate *out) {
    int n = cgm_tune_plan_candidates(call->m, comm->nranks,
                                     P2P_TUNE_MIN_PIECE_ROWS, out);
    const p2p_state *st = comm->backend_state[CGM_BACKEND_P2P];
    if (!st) return n;
    n = add_fused_candidates(st, comm, call, out, n);
    return add_order_twins(call, out, n);
}

/* The tuner's exchanges go through the workspace, like the agreement
 * check's (p2p_exchange.c), not through the bootstrap's communicator. */
static cgm_status p2p_tune_exchange(cgm_comm *comm, void *state,
                                    const void *send, void *recv,
                                    size_t bytes) {
    (void)comm;
    return p2p_exchange_host(state, send, recv, bytes,
                             "the autotuner's decision");
}

static cgm_status p2p_tune_agree(cgm_comm *comm, void *state,
                                 const cgm_call *call, const int64_t *mine,
                                 int words, int64_t *all) {
    return cgm_gpu_tune_agree_via(p2p_tune_exchange, comm, state, call, mine,
                                  words, all);
}

static cgm_status p2p_tune_allgather(cgm_comm *comm, void *state,
                                     const int64_t *mine, int words,
                                     int64_t *all) {
    return p2p_tune_exchange(comm, state, mine, all,
                             sizeof(int64_t) * (size_t)words);
}

static const cgm_tune_hooks p2p_tune_hooks = {
    .candidates = p2p_tune_candidates,
    .capturing = cgm_gpu_tune_capturing,
    .measure = cgm_gpu_tune_measure,
    .agree = p2p_tune_agree,
    .allgather = p2p_tune_allgather,
    .agree_every_call = false,
    .device_name = cgm_gpu_tune_device_name,
};

/* fp8 where the chunked algorithms and this GPU can run it
 * (p2p_fp8_check); epilogues where they can (p2p_epilogue_check): refused
 * before the tuner and any exchange. */
static cgm_status p2p_check(const cgm_comm *comm, const cgm_call *call) {
    cgm_status s = p2p_fp8_check(comm, call);
    return s != CGM_SUCCESS ? s : p2p_epilogue_check(comm, call);
}

const cgm_backend_vtable cgm_p2p_backend = {
    .id = CGM_BACKEND_P2P,
    .name = "p2p",
    .probe = p2p_probe,
    .init = p2p_init,
    .check = p2p_check,
    .run = p2p_run,
    .async_error = cgm_p2p_async_error,
    .finalize = p2p_finalize,
    .tune = &p2p_tune_hooks,
};
