/* The Hopper GEMM's PTX wrappers: shared-memory addresses, mbarriers, TMA
 * loads, the wgmma matrix descriptor and instructions, and the fences that
 * keep the compiler from moving accumulator accesses across the
 * asynchronous wgmma. Nothing here knows about tiles or the schedule. */
#ifndef COMMGEMM_HOPPER_PTX_CUH
#define COMMGEMM_HOPPER_PTX_CUH

#include <cuda.h>
#include <stdint.h>

#include "device/flags.cuh"

namespace {

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* Waits until the phase of parity `parity` of the barrier has completed.
 * The suspend-time hint (10 ms, as CUTLASS's ClusterBarrier) lets the
 * hardware park the waiting warp until the phase completes instead of
 * returning after its own short limit, so waiting warps issue few
 * instructions. */
constexpr uint32_t kSuspendHintNs = 0x989680;
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity), "n"(kSuspendHintNs)
                     : "memory");
    } while (!done);
}

/* The producer's arrival: one arrive plus the bytes the TMA loads will
 * deliver (complete_tx counts whole boxes, zero-filled parts included). */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* TMA: box of the tensor map at (c0 = column/k, c1 = row) into dst, bytes
 * accounted on bar. Without clusters the CTA's own shared::cta address is a
 * valid shared::cluster address. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                            uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

/* TMA store: the box of the tensor map at (c0 = column, c1 = row) from src
 * (elements past the map's extent are not written), in the thread's
 * current bulk group. */
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *map, uint32_t src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                     (uint64_t)map),
                 "r"(c0), "r"(c1), "r"(src)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
/* Until at most N of the thread's bulk groups still read shared memory. */
template <int N> __device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
/* Until all of the thread's bulk groups have completed (writes visible). */
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
/* Orders this thread's generic-proxy shared-memory writes before later
 * async-proxy (TMA) accesses. */
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* Named barrier `id` over one warpgroup (128 threads). */
__device__ __forceinline__ void warpgroup_sync(int id) {
    asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}
/* Named barrier 3 over both consumer warpgroups (256 threads): the one
 * that goes first arrives (`first`), the other waits for it. */
__device__ __forceinline__ void offset_consumers(bool first) {
    if (first)
        asm volatile("bar.arrive 3, 256;" ::: "memory");
    else
        asm volatile("bar.sync 3, 256;" ::: "memory");
}
/* stmatrix .x4: four 8 x 8 16-bit matrices; lane i gives the address of
 * row i % 8 of matrix i / 8 and holds in r[j] its fragment of matrix j
 * (row lane / 4, columns 2 (lane % 4), + 1: the mma accumulator's). */
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
}

/* threadIdx.x, read where this is called (volatile: never hoisted out of
 * a loop). */
__device__ __forceinline__ int thread_index() {
    int t;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
    return t;
}
/* 32- and 16-bit loads from shared memory (a shared::cta address). */
__device__ __forceinline__ uint32_t ld_shared_u32(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ uint32_t ld_shared_u16(uint32_t addr) {
    uint16_t v;
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(v) : "r"(addr) : "memory");
    return v;
}

/* Shared-memory matrix descriptor of wgmma (PTX ISA, "Matrix Descriptor
 * Format"), for a K-major tile written by TMA with CU_TENSOR_MAP_SWIZZLE_128B:
 * each row of the tile is 64 elements = 128 bytes, rows are contiguous, and
 * within each group of 8 rows (1024 bytes) the 16-byte chunks of row r are
 * XOR-permuted by r % 8. That is exactly wgmma's canonical "128B swizzle,
 * K-major" layout, whose core matrices are 8 rows x 16 bytes:
 *   bits  0-13  start address >> 4 (shared window, 18 bits of address);
 *   bits 16-29  leading-dimension byte offset >> 4: the distance between
 *               core matrices along K. With 128B swizzle and K-major it is
 *               not used (the K extent of one wgmma, 16 16-bit or 32 fp8 elements = 32 bytes,
 *               lies inside one 128-byte swizzle row); set to 1 as is usual;
 *   bits 32-45  stride-dimension byte offset >> 4: from one 8-row group to
 *               the next along M/N = 8 x 128 bytes = 1024 -> 64;
 *   bits 49-51  base offset: 0, every tile starts 1024-byte aligned;
 *   bits 62-63  swizzle mode: 1 = 128B.
 * The k-th 16-wide K step inside the 64-wide tile (fp8: the k-th 32-wide
 * step inside 128, the same 32 bytes) starts k * 32 bytes
 * further: the start address field grows by 2 * k (the hardware applies
 * the XOR on the final address bits, so this matches what TMA wrote, as long
 * as the tile base is 1024-aligned). Consumer warpgroup c reads A rows
 * 64c..64c+63: +64 x 128 = 8192 bytes, still 1024-aligned. */
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t addr) {
    uint64_t desc = 0;
    desc |= (uint64_t)((addr & 0x3FFFF) >> 4);
    desc |= (uint64_t)1 << 16;
    desc |= (uint64_t)(1024 >> 4) << 32;
    desc |= (uint64_t)1 << 62;
    return desc;
}

/* The operand types of a kernel (its kIn template parameter): X and W both
 * fp16 or both bf16, or each fp8 e4m3 or e5m2 (X's type first). A stage
 * row is 128 bytes either way: 64 16-bit or 128 fp8 k elements, and one
 * wgmma k step reads 32 bytes of each row (k16 or k32), so the
 * descriptors, the swizzle and the ring are the same for all. */
enum : int { kInF16 = 0, kInBf16 = 1, kInE4E4 = 2, kInE4E5 = 3, kInE5E4 = 4, kInE5E5 = 5 };
__host__ __device__ constexpr bool in_is_fp8(int in) { return in >= kInE4E4; }
/* k elements per stage (one 128-byte swizzle row per operand row). */
__host__ __device__ constexpr int stage_k(int in) { return in_is_fp8(in) ? 128 : 64; }

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving accumulator reads/writes across the
 * asynchronous wgmma (the registers are in flight until wait_group). */
template <int N> __device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* D[64x256] (+)= A[64xK] . B[Kx256], A and B from shared memory through
 * descriptors, both K-major, scale_d 0 overwrites D. SHAPE_TYPES: the
 * shape and types after "wgmma.mma_async.sync.aligned.", IMM the
 * immediates after the predicate: 16-bit inputs (k16) take imm-scale-a,
 * imm-scale-b, imm-trans-a, imm-trans-b (1, 1, 0, 0: K-major); fp8 inputs
 * (k32) take only the two scales (PTX ISA, wgmma.mma_async: fp8 operands
 * in shared memory are K-major, without transpose immediates). */
#define CGM_WGMMA_M64N256(SHAPE_TYPES, IMM)                                    \
    asm volatile(                                                              \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                         \
        "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {"                       \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "  \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"  \
        "}, %128, %129, p, " IMM ";\n}\n"                                       \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),\
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),\
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),\
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),\
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),\
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),\
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),\
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),\
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),\
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),\
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),\
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),\
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),\
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),\
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),\
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

/* One k step of 32 bytes of each operand row: k16 of bf16/fp16, k32 of
 * fp8 (kIn: the operand types, config.cuh). */
template <int kIn>
__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], uint64_t desc_a,
                                              uint64_t desc_b, uint32_t scale_d) {
    if constexpr (kIn == kInBf16)
        CGM_WGMMA_M64N256("m64n256k16.f32.bf16.bf16", "1, 1, 0, 0");
    else if constexpr (kIn == kInF16)
        CGM_WGMMA_M64N256("m64n256k16.f32.f16.f16", "1, 1, 0, 0");
    else if constexpr (kIn == kInE4E4)
        CGM_WGMMA_M64N256("m64n256k32.f32.e4m3.e4m3", "1, 1");
    else if constexpr (kIn == kInE4E5)
        CGM_WGMMA_M64N256("m64n256k32.f32.e4m3.e5m2", "1, 1");
    else if constexpr (kIn == kInE5E4)
        CGM_WGMMA_M64N256("m64n256k32.f32.e5m2.e4m3", "1, 1");
    else
        CGM_WGMMA_M64N256("m64n256k32.f32.e5m2.e5m2", "1, 1");
}

/* D[64x128] (+)= A[64xK] . B[Kx128]: accumulators d[OFF .. OFF + 63]
 * (the fragment layout of m64nNk16 and m64nNk32 with N = 128: the
 * accumulator layout depends on M and N only), otherwise as above. d is
 * the consumer's 128 accumulators, or (N = 64) the promoting kernels'
 * separate sum of one k block (fp8.cuh). */
#define CGM_WGMMA_M64N128(SHAPE_TYPES, IMM)                                    \
    asm volatile(                                                              \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                          \
        "wgmma.mma_async.sync.aligned." SHAPE_TYPES " {"                       \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"  \
        "}, %64, %65, p, " IMM ";\n}\n"                                       \
        : "+f"(d[OFF + 0]), "+f"(d[OFF + 1]), "+f"(d[OFF + 2]), "+f"(d[OFF + 3]), "+f"(d[OFF + 4]), "+f"(d[OFF + 5]), "+f"(d[OFF + 6]), "+f"(d[OFF + 7]),\
          "+f"(d[OFF + 8]), "+f"(d[OFF + 9]), "+f"(d[OFF + 10]), "+f"(d[OFF + 11]), "+f"(d[OFF + 12]), "+f"(d[OFF + 13]), "+f"(d[OFF + 14]), "+f"(d[OFF + 15]),\
          "+f"(d[OFF + 16]), "+f"(d[OFF + 17]), "+f"(d[OFF + 18]), "+f"(d[OFF + 19]), "+f"(d[OFF + 20]), "+f"(d[OFF + 21]), "+f"(d[OFF + 22]), "+f"(d[OFF + 23]),\
          "+f"(d[OFF + 24]), "+f"(d[OFF + 25]), "+f"(d[OFF + 26]), "+f"(d[OFF + 27]), "+f"(d[OFF + 28]), "+f"(d[OFF + 29]), "+f"(d[OFF + 30]), "+f"(d[OFF + 31]),\
          "+f"(d[OFF + 32]), "+f"(d[OFF + 33]), "+f"(d[OFF + 34]), "+f"(d[OFF + 35]), "+f"(d[OFF + 36]), "+f"(d[OFF + 37]), "+f"(d[OFF + 38]), "+f"(d[OFF + 39]),\
          "+f"(d[OFF + 40]), "+f"(d[OFF + 41]), "+f"(d[OFF + 42]), "+f"(d[OFF + 43]), "+f"(d[OFF + 44]), "+f"(d[OFF + 45]), "+f"(d[OFF + 46]), "+f"(d[OFF + 47]),\
          "+f"(d[OFF + 48]), "+f"(d[OFF + 49]), "+f"(d[OFF + 50]), "+f"(d[OFF + 51]), "+f"(d[OFF + 52]), "+f"(d[OFF + 53]), "+f"(d[OFF + 54]), "+f"(d[OFF + 55]),\
          "+f"(d[OFF + 56]), "+f"(d[OFF + 57]), "+f"(d[OFF + 58]), "+f"(d[OFF + 59]), "+f"(d[OFF + 60]), "+f"(d[OFF + 61]), "+f"(d[OFF + 62]), "+f"(d[OFF + 63]) \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

template <int kIn, int OFF, int N>
__device__ __forceinline__ void wgmma_m64n128(float (&d)[N], uint64_t desc_a,
                                              uint64_t desc_b, uint32_t scale_d) {
    static_assert(OFF + 64 <= N, "the accumulators in d");
    if constexpr (kIn == kInBf16)
        CGM_WGMMA_M64N128("m64n128k16.f32.bf16.bf16", "1, 1, 0, 0");
    else if constexpr (kIn == kInF16)
        CGM_WGMMA_M64N128("m64n128k16.f32.f16.f16", "1, 1, 0, 0");
    else if constexpr (kIn == kInE4E4)
        CGM_WGMMA_M64N128("m64n128k32.f32.e4m3.e4m3", "1, 1");
    else if constexpr (kIn == kInE4E5)
        CGM_WGMMA_M64N128("m64n128k32.f32.e4m3.e5m2", "1, 1");
    else if constexpr (kIn == kInE5E4)
        CGM_WGMMA_M64N128("m64n128k32.f32.e5m2.e4m3", "1, 1");
    else
        CGM_WGMMA_M64N128("m64n128k32.f32.e5m2.e5m2", "1, 1");
}

using cgm_flags::load_acquire_sys;
__device__ __forceinline__ unsigned long long globaltimer() { return cgm_flags::global_timer_ns(); }

} // namespace

#endif
