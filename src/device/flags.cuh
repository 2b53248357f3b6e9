// Device helpers for the cross-rank flags (device.h): system-scope acquire
// loads and release stores, the global timer, and the abort record an
// expired wait fills. Shared by kernels.cu and hopper_gemm.cu.
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

}  // namespace cgm_flags

#endif
