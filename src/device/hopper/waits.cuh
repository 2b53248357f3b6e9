/* The Hopper GEMM's bounded waits on cross-GPU flags, for the fused hooks:
 * the all-gather's row flags (the producer waits before a tile's first
 * load) and the reduce-scatter's addend flags (before the epilogue adds
 * the peers' partials). Every wait ends: at the epoch, at wait_timeout_ns
 * (%globaltimer; then timeout_out, abort_word and the abort record are
 * set), or at once once the launch or the comm gave up (gave_up). */
#ifndef COMMGEMM_HOPPER_WAITS_CUH
#define COMMGEMM_HOPPER_WAITS_CUH

#include <limits.h>
#include <stdint.h>

#include "device/flags.cuh"
#include "device/hopper/config.cuh"
#include "device/hopper/ptx.cuh"
#include "device/hopper/scheduler.cuh"

namespace {

/* The epoch the flags must reach: read from device memory when given, so
 * that a graph replay sees the epoch its own bump kernel wrote. */
__device__ __forceinline__ unsigned long long flag_epoch(const hgemm_params &p) {
    return p.flag_epoch_ptr ? *(volatile const unsigned long long *)p.flag_epoch_ptr : p.flag_epoch;
}

/* True once this launch gave up waiting (a wait of any CTA expired), the
 * comm aborted, or a peer's notice came (taken here: flags.cuh): later
 * waits return at once. */
__device__ __forceinline__ bool gave_up(const hgemm_params &p) {
    if (p.timeout_out && *(volatile int *)p.timeout_out) return true;
    if (p.abort_word && *(volatile unsigned int *)p.abort_word) return true;
    return cgm_flags::notice_raised(p.notice_word, p.abort_word, p.abort_record, p.report_rank);
}

/* Spins until *flag >= epoch; false when it gave up (see gave_up) or the
 * wait, started at `start`, passed wait_timeout_ns: then it marks the launch
 * (timeout_out, abort_word) and the first expiry of the comm fills the
 * abort record naming `peer` and `chunk`. */
__device__ bool wait_flag(const hgemm_params &p, const unsigned long long *flag,
                          unsigned long long epoch, unsigned long long start, int peer,
                          int chunk) {
    for (;;) {
        unsigned long long v = load_acquire_sys(flag);
        if (v >= epoch) return true;
        if (gave_up(p)) return false;
        unsigned long long now = globaltimer();
        if ((long long)(now - start) > p.wait_timeout_ns) {
            if (p.timeout_out) *(volatile int *)p.timeout_out = 1;
            cgm_flags::record_expiry(p.abort_word, p.abort_record,
                                     {p.report_rank, peer, 0 /* READY */, chunk, epoch, v, now - start});
            __threadfence_system();
            return false;
        }
        __nanosleep(256);
    }
}

/* The fused all-gather wait: every flag of rows [r0, r0 + 128) of X must
 * reach the epoch (the flag layout: hopper_gemm.h). Returns false once the
 * launch gave up: later tiles then do not wait. `seen` holds the flags
 * this producer thread already saw ready (bit j * flags-per-shard + q, the
 * first 64): epochs only grow, so they stay ready for the launch, and a
 * later tile of the same rows costs no load, timer read or fence (the
 * fence after the first sight already ordered those rows for this
 * thread's later TMA loads). Row arithmetic is 32-bit (m < 2^31;
 * rows_per_flag and the shard rows clamped to m, which changes no index)
 * and its divisions multiply-high: this runs before the tile's first TMA
 * load, on the producer's path. */
__device__ bool wait_row_flags(const hgemm_params &p, int tm, unsigned long long epoch,
                               unsigned long long *seen) {
    int r0 = tm * kTileM;
    int r1 = min(r0 + kTileM, p.m) - 1;
    int sr = p.flag_sr;
    unsigned long long start = 0;
    bool loaded = false;
    for (int j = fastdiv(r0, p.flag_sr_mul, p.flag_sr_shr), j1 = fastdiv(r1, p.flag_sr_mul, p.flag_sr_shr); j <= j1;
         j++) {
        int j0 = j * sr; /* <= r1 */
        int first = max(r0 - j0, 0), last = min(r1 - j0, sr - 1);
        int q1 = fastdiv(last, p.flag_rpf_mul, p.flag_rpf_shr);
        for (int q = fastdiv(first, p.flag_rpf_mul, p.flag_rpf_shr); q <= q1; q++) {
            long long bit = (long long)j * p.flag_per_shard + q;
            if (bit < 64 && ((*seen >> bit) & 1ull)) continue;
            if (!loaded) {
                if (gave_up(p)) return false;
                start = globaltimer();
                loaded = true;
            }
            const unsigned long long *f = p.flag_shard_rows > 0
                                              ? p.row_flags + (long long)j * p.flag_shard_stride + q
                                              : p.row_flags + q;
            if (!wait_flag(p, f, epoch, start, j, (int)(j * p.report_chunks_per_shard + q)))
                return false;
            if (bit < 64) *seen |= 1ull << bit;
        }
    }
    /* The rows were acquired by the generic proxy; TMA reads through the
     * async proxy. */
    if (loaded) asm volatile("fence.proxy.async.global;" ::: "memory");
    return true;
}

/* Element i of a kernel-parameter array by constant indices only: a
 * dynamic index makes the compiler copy the whole parameter struct to the
 * stack (360 bytes per thread, and spills). */
template <typename T>
__device__ __forceinline__ T param_at(const T (&arr)[CGM_HGEMM_MAX_ADDENDS], int i) {
    static_assert(CGM_HGEMM_MAX_ADDENDS == 7, "param_at lists 7 cases");
    switch (i) {
    case 0: return arr[0];
    case 1: return arr[1];
    case 2: return arr[2];
    case 3: return arr[3];
    case 4: return arr[4];
    case 5: return arr[5];
    default: return arr[6];
    }
}

/* The addend flags of Y rows [r0, r0 + rows), by the helper thread
 * (addend_tma_helper): the flags of addends [a0, a1) of those rows must
 * reach the epoch. Each flag is loaded first; the give-up check and the
 * timer are read only when one is not ready yet. 32-bit row arithmetic
 * (m < 2^31): no call to the 64-bit division in the producer warpgroup's
 * few registers. */
__device__ void wait_addend_rows(const hgemm_params &p, int r0, int rows, unsigned long long epoch, int a0,
                                 int a1) {
    int r1 = min(r0 + rows, p.m) - 1;
    int rpf = (int)min(p.rows_per_flag, (long long)INT_MAX);
    unsigned long long start = 0;
    bool ok = true;
    for (int i = a0; ok && i < a1; i++) {
        const unsigned long long *flags = param_at(p.addend_flags, i);
        if (!flags) continue;
        for (int q = r0 / rpf; ok && q <= r1 / rpf; q++) {
            if (load_acquire_sys(flags + q) >= epoch) continue;
            if (!start) {
                if (gave_up(p)) return;
                start = globaltimer();
            }
            ok = wait_flag(p, flags + q, epoch, start, param_at(p.report_addend_peer, i),
                           p.report_addend_chunk0 + q);
        }
    }
}

/* The fused reduce-scatter wait of the kernels without the addend helper,
 * by one consumer warpgroup before the epilogue of rows [r0, r0 + rows)
 * of Y: its leader waits for every addend's flags of those rows, then the
 * warpgroup meets on named barrier 1 + consumer (barrier 0 is
 * __syncthreads'). */
__device__ void wait_addend_flags(const hgemm_params &p, long long r0, int rows, int consumer,
                                  unsigned long long epoch) {
    if (threadIdx.x % 128 == 0 && !gave_up(p)) {
        long long r1 = min(r0 + rows, (long long)p.m) - 1;
        unsigned long long start = globaltimer();
        bool ok = true;
        for (int i = 0; ok && i < p.naddends; i++) {
            const unsigned long long *flags = param_at(p.addend_flags, i);
            if (!flags) continue;
            for (long long q = r0 / p.rows_per_flag; ok && q <= r1 / p.rows_per_flag; q++)
                ok = wait_flag(p, flags + q, epoch, start, param_at(p.report_addend_peer, i),
                               (int)(p.report_addend_chunk0 + q));
        }
        __threadfence();
    }
    warpgroup_sync(1 + consumer);
}

} // namespace

#endif
