// Device helpers for the cross-rank flags (device.h): system-scope acquire
// loads and release stores, the global timer, and the abort record an
// expired wait fills. Shared by kernels.cu and the Hopper GEMM (hopper/).
#ifndef COMMGEMM_DEVICE_FLAGS_CUH
#define COMMGEMM_DEVICE_FLAGS_CUH

#include "device/device.h"

namespace cgm_flags {

__device__ __forceinline__ unsigned long long load_acquire_sys(const unsigned long long *p) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release_sys(unsigned long long *p, unsigned long long v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* What an expired wait saw. The first expiry of the comm (the one that
 * turns *abort_word from 0 to 1) fills `record` (host-mapped), its `set`
 * field last; later expiries leave it. */
struct expiry {
    int waiting_rank, peer, flag_kind, chunk;
    unsigned long long epoch, flag_value, waited_ns;
};

__device__ __forceinline__ void record_expiry(unsigned int *abort_word, cgm_dev_abort_record *record,
                                              const expiry &e) {
    if (!abort_word || atomicCAS(abort_word, 0u, 1u) != 0u || !record) return;
    record->waiting_rank = e.waiting_rank;
    record->peer = e.peer;
    record->flag_kind = e.flag_kind;
    record->chunk = e.chunk;
    record->epoch = e.epoch;
    record->flag_value = e.flag_value;
    record->waited_ns = e.waited_ns;
    __threadfence_system();
    record->set = 1;
    __threadfence_system();
}

/* A peer's notice (cgm_dev_state.notice) seen by a kernel of this rank:
 * the first kernel to take it (turning *abort_word from 0 to 1) fills
 * `record` with {rank, the culprit, CGM_DEV_NOTICE_KIND, the teller}.
 * Inlined: out of line, the call made four of the fused GEMM kernels
 * spill 8 bytes (ptxas --resource-usage); inlined, their registers and
 * spills are what they were without it. */
static __device__ __forceinline__ void take_notice(unsigned int *abort_word, cgm_dev_abort_record *record,
                                                   int rank, unsigned int notice) {
    if (!abort_word || atomicCAS(abort_word, 0u, 1u) != 0u || !record) return;
    record->waiting_rank = rank;
    record->peer = cgm_dev_notice_culprit(notice);
    record->flag_kind = CGM_DEV_NOTICE_KIND;
    record->chunk = cgm_dev_notice_teller(notice);
    record->epoch = 0;
    record->flag_value = notice;
    record->waited_ns = 0;
    __threadfence_system();
    record->set = 1;
    __threadfence_system();
}

/* True when a peer raised *notice_word (taken, see take_notice). */
__device__ __forceinline__ bool notice_raised(const unsigned int *notice_word, unsigned int *abort_word,
                                              cgm_dev_abort_record *record, int rank) {
    unsigned int n = notice_word ? *(volatile const unsigned int *)notice_word : 0u;
    if (n == 0u) return false;
    take_notice(abort_word, record, rank, n);
    return true;
}

}  // namespace cgm_flags

#endif
