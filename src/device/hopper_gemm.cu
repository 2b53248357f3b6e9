/* commgemm's own sm_90a GEMM: Y[m,n] = X[m,k] . W[n,k]^T (+ bias) (+ Y).
 *
 * One CTA of 384 threads per SM (persistent), three warpgroups:
 *   warpgroup 0  producer: one thread waits for a free ring stage, then
 *                issues two TMA loads (X tile 128x64, W tile Nx64) that
 *                complete on the stage's "full" mbarrier;
 *   warpgroups 1, 2  consumers, in one of two variants:
 *     cooperative  (tile 128x256, 4 stages) both consumers share each tile,
 *                each owns 64 rows (128 fp32 accumulators per thread,
 *                wgmma.m64n256k16); both release a stage on its "empty"
 *                mbarrier (count 2); then both run the epilogue, during
 *                which the tensor cores idle (the producer only refills);
 *     ping-pong    (tile 128x128, 6 stages) the consumers take alternate
 *                tiles of the CTA, each computing a whole 128x128 tile
 *                (2 x wgmma.m64n128k16 per k step, 128 accumulators); a
 *                "turn" mbarrier pair hands the main loop from one to the
 *                other, so one consumer's epilogue runs while the other's
 *                main loop keeps the tensor cores busy.
 *   The epilogue stores straight from the registers (bias, accumulate,
 *   bounds checks, conversion); 16-bit outputs of interior tiles are
 *   transposed inside each quad (shuffles) into 16-byte row segments.
 * The producer walks the CTA's tiles (blockIdx.x, += gridDim.x) and k blocks
 * in order; the consumers compute their ring position from the tile's local
 * index, so the ring needs no other handshake. The design, the descriptor
 * derivation and the limits: docs/HOPPER_GEMM.md. */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/flags.cuh"
#include "device/hopper_gemm.h"
#include "plan/plan.h"

namespace {

constexpr int kTileM = CGM_HGEMM_TILE_M;
constexpr int kTileK = CGM_HGEMM_TILE_K; /* 64 x 2 bytes = one 128-byte swizzle row */
constexpr int kThreads = 384;
constexpr int kGroupM = 16; /* rasterization: m tiles per group, see tile_coords */
constexpr int kStageBytesA = kTileM * kTileK * 2; /* 16 KiB */

/* CGM_HGEMM_TRACE (a build flag, off by default; never in a release
 * build): the ping-pong consumers of CTA 0 stamp each tile with clock64()
 * (the SM's cycles): before the turn wait, main loop start, main loop end
 * (all wgmma done), after the addends, after the stores. cgm_hgemm_trace_read
 * returns them (docs/HOPPER_GEMM.md, "Where a ping-pong tile's time goes"). */
#ifdef CGM_HGEMM_TRACE
constexpr int kTraceTiles = 64;
__device__ unsigned long long trace_buf[2][kTraceTiles][6];
#define CGM_TRACE(slot)                                                                          \
    do {                                                                                         \
        if (blockIdx.x == 0 && leader && (i >> 1) < kTraceTiles)                                 \
            trace_buf[consumer][i >> 1][slot] = (unsigned long long)clock64();                   \
    } while (0)
#else
#define CGM_TRACE(slot) \
    do {                \
    } while (0)
#endif

/* Per variant: the tile's n extent, the ring depth, the shared memory. */
template <bool kPP> struct cfg {
    static constexpr int tile_n = kPP ? CGM_HGEMM_TILE_N_PINGPONG : CGM_HGEMM_TILE_N;
    static constexpr int stages = kPP ? 6 : 4;
    static constexpr int bytes_b = tile_n * kTileK * 2; /* 16 or 32 KiB */
    static constexpr int stage_bytes = kStageBytesA + bytes_b;
    /* 1024: the 128B-swizzle pattern repeats every 8 rows x 128 bytes, and
     * TMA and wgmma both assume the pattern starts at a 1024-byte boundary.
     * Barriers: full and empty per stage, two turn barriers, and (kernels
     * with the helper) two ready and two taken barriers of
     * addend_flag_helper; the addend slots' barriers are smem_of's. */
    static constexpr int smem_bytes = 1024 + stages * stage_bytes + (2 * stages + 6) * 8;
    static_assert(smem_bytes <= 227 * 1024, "shared memory per block");
};

/* The addend slots of the ping-pong kernels whose helper loads addends
 * (addend_tma_helper): two of 16 KiB after the ring, each one part of an
 * addend's 128 x 128 tile: 64 rows of a 16-bit addend as two TMA boxes of
 * 64 x 64 (128-byte rows, 128B swizzle), or 32 columns of an fp32 addend
 * as one box of 128 rows x 32; and their barriers (full per consumer and
 * slot, empty per slot) after the other barriers. */
constexpr int kAddendBox = 64 * 64 * 2;          /* 8 KiB */
constexpr int kAddendSlot = 2 * kAddendBox;      /* 16 KiB */
/* After the barriers: the tile queue (two slots of a tile index, their
 * full and empty barriers: 48 bytes, tile_queue), then the producer's map
 * of the m tiles whose row flags it already saw ready (produce): one bit
 * per m tile for the first kReadyTiles. */
constexpr int kReadyTiles = 2048;
constexpr int kQueueBytes = 48;
template <bool kPP, bool kWithHelper> struct smem_of { /* kWithHelper: kSplit || kAddTma */
    static constexpr bool slots = kPP && kWithHelper;
    static constexpr int bytes =
        cfg<kPP>::smem_bytes + (slots ? 2 * kAddendSlot : 0) + 6 * 8 + kQueueBytes + kReadyTiles / 8;
    static_assert(bytes <= 227 * 1024, "shared memory per block");
};

/* The addends' tensor maps (hgemm_params.addend_tma): [addend rows, n],
 * box 64 x 64 (16-bit) or 32 columns x 128 rows (fp32), 128B swizzle, zero
 * fill past the ends. */
struct addend_maps {
    CUtensorMap map[CGM_HGEMM_MAX_ADDENDS];
};

struct hgemm_params {
    int m, n, k;
    int tiles_m, tiles_n, k_blocks;
    int group_m; /* rasterization: m tiles per group (tile_coords) */
    /* The dynamic schedule (cgm_hgemm_args.tile_counter): after its first
     * tile blockIdx.x, a CTA takes gridDim.x + atomicAdd(tile_counter, 1)
     * until that passes the last tile; NULL: tiles blockIdx.x + i *
     * gridDim.x. Not in the helper and stream-K kernels. */
    unsigned int *tile_counter;
    /* tile_coords' divisors in multiply-high form (fastdiv): group_m *
     * tiles_n, group_m, and the last group's m tiles (tiles_m % group_m,
     * or group_m) */
    unsigned int span_mul, gm_mul, last_mul;
    int span_shr, gm_shr, last_shr;
    void *y;
    long long ldy;
    /* The rows with the epilogue (bias, accumulate, addends): m tiles
     * [yown_tile0, yown_tile1), stored at y_own (row-offset so that Y row g
     * is y_own + g * ldy_own); the other tiles store plain partials to y.
     * Without cgm_hgemm_args.y_own: every tile, y_own = y. */
    void *y_own;
    long long ldy_own;
    int yown_tile0, yown_tile1;
    long long addend_row0; /* Y row of the addends' row 0 */
    const void *bias;
    int accumulate;
    int vector_store; /* y and ldy allow 2-element stores */
    int vector16;     /* 16-bit Y, y 16-byte aligned, ldy % 8 == 0: 16-byte stores */
    const unsigned long long *row_flags;
    long long rows_per_flag;
    /* wait_row_flags' divisors, clamped to m, with their multiply-high
     * forms (fastdiv): rows per flag, rows per shard, flags per shard. */
    int flag_rpf, flag_sr, flag_per_shard;
    unsigned int flag_rpf_mul, flag_sr_mul;
    int flag_rpf_shr, flag_sr_shr;
    long long flag_shard_rows, flag_shard_stride;
    unsigned long long flag_epoch;
    const unsigned long long *flag_epoch_ptr;
    long long wait_timeout_ns;
    int *timeout_out;
    const int *m_block_order;
    long long own_row0;        /* x_own's row 0 is X's row own_row0 */
    int own_tile0, own_tile1;  /* m tiles read from x_own: [own_tile0, own_tile1) */
    int naddends;
    int addend_waits; /* some addend_flags[i] is not NULL */
    int addend_tma;   /* the ping-pong helper loads the addends by TMA (addend_maps) */
    int addend_dtype; /* cgm_dtype */
    long long addend_ld;
    const void *addend[CGM_HGEMM_MAX_ADDENDS];
    const unsigned long long *addend_flags[CGM_HGEMM_MAX_ADDENDS];
    unsigned int *abort_word;
    const unsigned int *notice_word;
    cgm_dev_abort_record *abort_record;
    int report_rank, report_chunks_per_shard, report_addend_chunk0;
    int report_addend_peer[CGM_HGEMM_MAX_ADDENDS];
    /* Per-piece completion of the partial rows (cgm_hgemm_args.done_flags). */
    unsigned int *done_count;
    unsigned long long *done_flags;
    long long done_shard_rows, done_rows_per_piece;
    int done_pieces_per_shard;
    /* Stream-K tail (unit_at): the first dp_tiles tiles of the linear order
     * run whole, blockIdx.x + i * gridDim.x; the last sk_tiles (0: none)
     * are cut along k over the grid. sk_cells: one counter per shared tile
     * and consumer warpgroup (sk_fixup); sk_slots: a partial's 64 KiB each. */
    int dp_tiles, sk_tiles;
    int sk_q, sk_r; /* sk_tiles * k_blocks = sk_q * gridDim.x + sk_r (all 32-bit in sched_of) */
    unsigned int *sk_cells;
    float4 *sk_slots;
};

/* Where one tile's epilogue stores, and with what. */
struct tile_out {
    void *y;
    long long ldy;
    const void *bias;
    int accumulate;
};

/* ------------------------------------------------------------- PTX bits */

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
 * instructions (measured neutral to +1 %; docs/HOPPER_GEMM.md, "Waiting on
 * mbarriers"). */
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

/* Shared-memory matrix descriptor of wgmma (PTX ISA, "Matrix Descriptor
 * Format"), for a K-major tile written by TMA with CU_TENSOR_MAP_SWIZZLE_128B:
 * each row of the tile is 64 elements = 128 bytes, rows are contiguous, and
 * within each group of 8 rows (1024 bytes) the 16-byte chunks of row r are
 * XOR-permuted by r % 8. That is exactly wgmma's canonical "128B swizzle,
 * K-major" layout, whose core matrices are 8 rows x 16 bytes:
 *   bits  0-13  start address >> 4 (shared window, 18 bits of address);
 *   bits 16-29  leading-dimension byte offset >> 4: the distance between
 *               core matrices along K. With 128B swizzle and K-major it is
 *               not used (the K extent of one wgmma, 16 elements = 32 bytes,
 *               lies inside one 128-byte swizzle row); set to 1 as is usual;
 *   bits 32-45  stride-dimension byte offset >> 4: from one 8-row group to
 *               the next along M/N = 8 x 128 bytes = 1024 -> 64;
 *   bits 49-51  base offset: 0, every tile starts 1024-byte aligned;
 *   bits 62-63  swizzle mode: 1 = 128B.
 * The k-th 16-wide K step inside the 64-wide tile starts k * 32 bytes
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
__device__ __forceinline__ void fence_accumulators(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* D[64x256] (+)= A[64x16] . B[16x256], A and B from shared memory through
 * descriptors, both K-major (transpose bits 0), scale_d 0 overwrites D. */
#define CGM_WGMMA_M64N256K16(TYPE)                                             \
    asm volatile(                                                              \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                         \
        "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {"        \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "  \
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "  \
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "  \
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "  \
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"  \
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"                                     \
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

template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a,
                                                 uint64_t desc_b, uint32_t scale_d) {
    if (kBf16)
        CGM_WGMMA_M64N256K16("bf16");
    else
        CGM_WGMMA_M64N256K16("f16");
}

/* D[64x128] (+)= A[64x16] . B[16x128]: accumulators d[OFF .. OFF + 63]
 * (the fragment layout of m64nNk16 with N = 128), otherwise as above. */
#define CGM_WGMMA_M64N128K16(TYPE)                                             \
    asm volatile(                                                              \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                          \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"       \
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"  \
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                    \
        : "+f"(d[OFF + 0]), "+f"(d[OFF + 1]), "+f"(d[OFF + 2]), "+f"(d[OFF + 3]), "+f"(d[OFF + 4]), "+f"(d[OFF + 5]), "+f"(d[OFF + 6]), "+f"(d[OFF + 7]),\
          "+f"(d[OFF + 8]), "+f"(d[OFF + 9]), "+f"(d[OFF + 10]), "+f"(d[OFF + 11]), "+f"(d[OFF + 12]), "+f"(d[OFF + 13]), "+f"(d[OFF + 14]), "+f"(d[OFF + 15]),\
          "+f"(d[OFF + 16]), "+f"(d[OFF + 17]), "+f"(d[OFF + 18]), "+f"(d[OFF + 19]), "+f"(d[OFF + 20]), "+f"(d[OFF + 21]), "+f"(d[OFF + 22]), "+f"(d[OFF + 23]),\
          "+f"(d[OFF + 24]), "+f"(d[OFF + 25]), "+f"(d[OFF + 26]), "+f"(d[OFF + 27]), "+f"(d[OFF + 28]), "+f"(d[OFF + 29]), "+f"(d[OFF + 30]), "+f"(d[OFF + 31]),\
          "+f"(d[OFF + 32]), "+f"(d[OFF + 33]), "+f"(d[OFF + 34]), "+f"(d[OFF + 35]), "+f"(d[OFF + 36]), "+f"(d[OFF + 37]), "+f"(d[OFF + 38]), "+f"(d[OFF + 39]),\
          "+f"(d[OFF + 40]), "+f"(d[OFF + 41]), "+f"(d[OFF + 42]), "+f"(d[OFF + 43]), "+f"(d[OFF + 44]), "+f"(d[OFF + 45]), "+f"(d[OFF + 46]), "+f"(d[OFF + 47]),\
          "+f"(d[OFF + 48]), "+f"(d[OFF + 49]), "+f"(d[OFF + 50]), "+f"(d[OFF + 51]), "+f"(d[OFF + 52]), "+f"(d[OFF + 53]), "+f"(d[OFF + 54]), "+f"(d[OFF + 55]),\
          "+f"(d[OFF + 56]), "+f"(d[OFF + 57]), "+f"(d[OFF + 58]), "+f"(d[OFF + 59]), "+f"(d[OFF + 60]), "+f"(d[OFF + 61]), "+f"(d[OFF + 62]), "+f"(d[OFF + 63]) \
        : "l"(desc_a), "l"(desc_b), "r"(scale_d))

template <bool kBf16, int OFF>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[128], uint64_t desc_a,
                                                 uint64_t desc_b, uint32_t scale_d) {
    if (kBf16)
        CGM_WGMMA_M64N128K16("bf16");
    else
        CGM_WGMMA_M64N128K16("f16");
}

using cgm_flags::load_acquire_sys;
__device__ __forceinline__ unsigned long long globaltimer() { return cgm_flags::global_timer_ns(); }

#ifdef CGM_HGEMM_TRACE
/* The trace build's per-CTA stamps (%globaltimer, ns): start (thread 0
 * after the barriers' set-up), and each consumer warpgroup's exit, on every
 * path out of the kernel; and the SM it ran on (cgm_hgemm_trace_ctas). */
constexpr int kTraceCtas = 1024;
__device__ unsigned long long trace_cta[kTraceCtas][4];
struct cta_exit_stamp {
    int slot;
    bool on;
    __device__ ~cta_exit_stamp() {
        if (on && blockIdx.x < kTraceCtas) trace_cta[blockIdx.x][slot] = globaltimer();
    }
};
#endif

/* ------------------------------------------------------------ scheduler */

/* n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by a multiply-high and a shift
 * (as CUTLASS's FastDivmod): with s = ceil(log2 d), mul = ceil(2^(31+s) / d)
 * and n / d = umulhi(n, mul) >> (s - 1); d = 1 has mul = 0 (n / 1 = n).
 * The host computes mul and the shift once per call, so the producer's
 * per-tile flag check has no division (cgm_hgemm_fastdiv_check tests it). */
__host__ __device__ __forceinline__ void fastdiv_init(int d, unsigned int *mul, int *shr) {
    if (d <= 1) {
        *mul = 0, *shr = 0;
        return;
    }
    int s = 0;
    while ((1ll << s) < d) s++;
    *mul = (unsigned int)(((1ull << (31 + s)) + (unsigned long long)d - 1) / (unsigned long long)d);
    *shr = s - 1;
}
__host__ __device__ __forceinline__ int fastdiv(int n, unsigned int mul, int shr) {
#ifdef __CUDA_ARCH__
    return mul ? (int)(__umulhi((unsigned int)n, mul) >> shr) : n;
#else
    return mul ? (int)((unsigned int)(((unsigned long long)(unsigned int)n * mul) >> 32) >> shr) : n;
#endif
}

/* Linear tile index -> (m tile, n tile). Tiles are taken in groups of
 * group_m (kGroupM, or fewer so that groups do not straddle the done
 * flags' shards or pieces) m tiles; inside a group m runs fastest, so the ~#SMs tiles in
 * flight at once share a few W column blocks and kGroupM X row blocks in
 * L2. m_block_order (if any) renames m tiles (e.g. local rows first). */
template <bool kSplit>
__host__ __device__ __forceinline__ void tile_coords(const hgemm_params &p, int t, int *tm, int *tn) {
    /* Divisions by multiply-high (coords_init): the producer computes this
     * before each tile's first TMA load, with the two divisions compiled
     * to MUFU.RCP chains (about 40 instructions per tile) */
    int group_m = kSplit ? p.group_m : kGroupM;
    int group = fastdiv(t, p.span_mul, p.span_shr);
    int first = group * group_m;
    int r = t - first * p.tiles_n;
    bool last = p.tiles_m - first < group_m;
    int size = last ? p.tiles_m - first : group_m;
    int q = last     ? fastdiv(r, p.last_mul, p.last_shr)
            : kSplit ? fastdiv(r, p.gm_mul, p.gm_shr)
                     : (int)((unsigned int)r / (unsigned int)kGroupM);
    *tn = q;
    int lm = first + (r - q * size);
    *tm = p.m_block_order ? p.m_block_order[lm] : lm;
}

/* tile_coords' divisors, once per call on the host (group_m, tiles_m and
 * tiles_n set). */
void coords_init(hgemm_params *p) {
    fastdiv_init(p->group_m * p->tiles_n, &p->span_mul, &p->span_shr);
    fastdiv_init(p->group_m, &p->gm_mul, &p->gm_shr);
    int rest = p->tiles_m % p->group_m;
    fastdiv_init(rest ? rest : p->group_m, &p->last_mul, &p->last_shr);
}

/* The tile queue of the kernels without an addend helper or a stream-K
 * tail: the producer thread publishes each tile of its CTA (the CTA's j-th,
 * j = 0, 1, ...) in slot j & 1 before loading it, and -1 for the two after
 * the last; the consumers of tile j (ping-pong: consumer j & 1;
 * cooperative: both) read it there. full[s]: one arrive, the producer's;
 * empty[s]: one per reading warp, after its lane 0 read the slot and
 * broadcast it (a warp-uniform value: the loops stay on the uniform
 * datapath). Only with the dynamic schedule (tile_counter): with static
 * tiles every role computes its own. */
struct tile_queue {
    uint32_t full, empty, slot; /* shared addresses: 2 barriers, 2 barriers, 2 ints */
};

__device__ __forceinline__ void queue_put(const tile_queue &q, int j, int t) {
    int s = j & 1;
    uint32_t use = (uint32_t)j >> 1;
    mbar_wait(q.empty + 8 * s, (use & 1) ^ 1); /* a fresh barrier passes the first time */
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(q.slot + 4 * s), "r"(t) : "memory");
    mbar_arrive(q.full + 8 * s); /* release: the slot's store is seen by whoever waits */
}

__device__ __forceinline__ int queue_get(const tile_queue &q, int j) {
    int s = j & 1;
    uint32_t use = (uint32_t)j >> 1;
    mbar_wait(q.full + 8 * s, use & 1);
    int t = 0;
    bool lane0 = threadIdx.x % 32 == 0;
    if (lane0) asm volatile("ld.shared.u32 %0, [%1];" : "=r"(t) : "r"(q.slot + 4 * s) : "memory");
    t = __shfl_sync(0xFFFFFFFFu, t, 0);
    if (lane0) mbar_arrive(q.empty + 8 * s);
    return t;
}

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
 * thread's later TMA loads). With 128-row tiles and short k, that load
 * chain before each tile's first TMA load cost 5.7 % of the kernel. */
__device__ bool wait_row_flags(const hgemm_params &p, int tm, unsigned long long epoch,
                               unsigned long long *seen) {
    /* 32-bit row arithmetic (m < 2^31; rows_per_flag and the shard rows
     * clamped to m, which changes no index). In 64 bits the divisions
     * compiled to calls, five per tile before its first TMA load, which
     * cost the ping-pong kernel 4-6 % with every flag ready (agbench,
     * docs/PERFORMANCE.md 4s). */
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
 * (addend_flag_helper, addend_tma_helper): the flags of addends [a0, a1)
 * of those rows must reach the epoch. Each flag is loaded first; the
 * give-up check and the timer are read only when one is not ready yet. */
template <bool kSplit>
__device__ void wait_addend_rows(const hgemm_params &p, int r0, int rows, unsigned long long epoch, int a0,
                                 int a1) {
    /* 32-bit row arithmetic (m < 2^31): no call to the 64-bit division
     * in the producer warpgroup's few registers */
    int base = kSplit ? (int)p.addend_row0 : 0;
    int r1 = min(r0 + rows, p.m) - 1 - base;
    r0 -= base;
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

/* The fused reduce-scatter wait of the kernels without addend_flag_helper,
 * by one consumer warpgroup before the epilogue of rows [r0, r0 + rows)
 * of Y: its leader waits for every
 * addend's flags of those rows, then the warpgroup meets on named barrier
 * 1 + consumer (barrier 0 is __syncthreads'). */
template <bool kSplit>
__device__ void wait_addend_flags(const hgemm_params &p, long long r0, int rows, int consumer,
                                  unsigned long long epoch) {
    if (threadIdx.x % 128 == 0 && !gave_up(p)) {
        long long base = kSplit ? p.addend_row0 : 0;
        long long r1 = min(r0 + rows, (long long)p.m) - 1 - base;
        r0 -= base;
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
    asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
}

/* ------------------------------------------------------------- epilogue */

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void from_float(float v, float *p) { *p = v; }
__device__ __forceinline__ void from_float(float v, __nv_bfloat16 *p) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void from_float(float v, __half *p) { *p = __float2half_rn(v); }

__device__ __forceinline__ void store_pair(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half *p, float a, float b) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}

/* One row of a thread's fragment pair: columns col, col + 1. */
template <typename OutT>
__device__ __forceinline__ void store_two(const hgemm_params &p, const tile_out &o, int row, int col, float a, float b,
                                          float bias_a, float bias_b) {
    if (row >= p.m || col >= p.n) return;
    OutT *y = static_cast<OutT *>(o.y) + (long long)row * o.ldy + col;
    a += bias_a;
    b += bias_b;
    if (col + 1 < p.n && p.vector_store) {
        if (o.accumulate) {
            a += to_float(y[0]);
            b += to_float(y[1]);
        }
        store_pair(y, a, b);
        return;
    }
    if (o.accumulate) a += to_float(y[0]);
    from_float(a, y);
    if (col + 1 < p.n) {
        if (o.accumulate) b += to_float(y[1]);
        from_float(b, y + 1);
    }
}

__device__ __forceinline__ uint32_t pack_pair(__nv_bfloat16 *, float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t pack_pair(__half *, float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&v);
}
__device__ __forceinline__ uint32_t pack_pair(float *, float, float) { return 0; } /* unused */

__device__ __forceinline__ uint32_t pick4(const uint32_t (&w)[4], int i) {
    return i == 0 ? w[0] : i == 1 ? w[1] : i == 2 ? w[2] : w[3];
}

/* 4x4 transpose inside each quad of lanes (q = lane % 4): on entry w[g] is
 * this lane's column pair q of 8-column group g (g = 0..3, one row); on
 * exit w[i] is column pair i of group q, i.e. the 16 contiguous bytes of
 * group q. Two forms:
 *   kButterfly (the cooperative kernels): two butterfly stages (lane masks
 *     2, then 1); in stage m, lanes q and q ^ m swap the words whose index
 *     differs from the lane in bit m, so word g of lane q ends as word q of
 *     lane g. Selects on the lane's bits only, constant shuffle masks: no
 *     branches. The other form compiled to branches and convergence
 *     barriers around every shuffle, about 1,400 instructions per warp and
 *     tile in the cooperative epilogue, 11 % of the consumers' samples;
 *     this one made the cooperative kernel 2-9 % faster (docs/HOPPER_GEMM.md,
 *     "The cooperative epilogue's instructions").
 *   otherwise (the ping-pong kernels, where the butterfly form spilled and
 *     ran 8-21 % slower): round r, lane q sends its w[(q + r) % 4] and
 *     receives from lane (q - r) % 4 that lane's w[q]. */
template <bool kButterfly>
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int q) {
    if constexpr (kButterfly) {
        bool hi2 = (q & 2) != 0, hi1 = (q & 1) != 0;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, hi2 ? w[j] : w[j + 2], 2);
            w[j] = hi2 ? got : w[j];
            w[j + 2] = hi2 ? w[j + 2] : got;
        }
#pragma unroll
        for (int j = 0; j < 4; j += 2) {
            uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, hi1 ? w[j] : w[j + 1], 1);
            w[j] = hi1 ? got : w[j];
            w[j + 1] = hi1 ? w[j + 1] : got;
        }
    } else {
        uint32_t out[4] = {w[0], w[1], w[2], w[3]};
        int lane = threadIdx.x % 32;
#pragma unroll
        for (int r = 1; r < 4; r++) {
            uint32_t got = __shfl_sync(0xFFFFFFFFu, pick4(w, (q + r) & 3), (lane & ~3) | ((q - r) & 3));
            int at = (q - r) & 3;
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (i == at) out[i] = got;
        }
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = out[i];
    }
}

/* Accumulator fragment of wgmma.m64nNk16 (PTX ISA, "Register Fragments"):
 * thread t of the warpgroup holds, for j = 0..N/8-1, d[4j], d[4j+1] at row
 * 16 (t / 32) + (t % 32) / 4, columns 8j + 2 (t % 4) + {0, 1}, and d[4j+2],
 * d[4j+3] eight rows below. This stores the 64 x 8NJ block of Y at (row0,
 * col0) held in d[OFF .. OFF + 4 NJ - 1]. */
template <typename OutT, int OFF, int NJ, bool kButterfly>
__device__ __forceinline__ void epilogue(const hgemm_params &p, const tile_out &o, float (&d)[128], int row0,
                                         int col0) {
    int t = threadIdx.x % 128;
    int q = t % 4;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    const OutT *bias = static_cast<const OutT *>(o.bias);
    bool interior = row0 + 64 <= p.m && col0 + 8 * NJ <= p.n;
    if (sizeof(OutT) == 2 && interior && p.vector16 && !o.accumulate) {
        /* Interior tile, 16-bit Y, no accumulate: per 4 column groups, the
         * quad transposes its packed pairs so that lane q writes the 16
         * bytes of group q: a warp store covers 8 rows x 64 contiguous
         * bytes (whole 32-byte sectors) instead of 8 rows x 16 bytes. The
         * arithmetic (fp32 d + bias, one rounding) is the pair path's. */
        OutT *y = static_cast<OutT *>(o.y) + (long long)row * o.ldy + col0 + 8 * q;
        OutT *y8 = y + 8 * o.ldy;
#pragma unroll
        for (int jb = 0; jb < NJ / 4; jb++) {
            uint32_t wa[4], wb[4];
#pragma unroll
            for (int g = 0; g < 4; g++) {
                int j = 4 * jb + g;
                float ba = 0.f, bb = 0.f;
                if (bias) {
                    ba = to_float(bias[col0 + 8 * j + 2 * q]);
                    bb = to_float(bias[col0 + 8 * j + 2 * q + 1]);
                }
                float a0 = d[OFF + 4 * j], a1 = d[OFF + 4 * j + 1];
                float b0 = d[OFF + 4 * j + 2], b1 = d[OFF + 4 * j + 3];
                wa[g] = pack_pair((OutT *)nullptr, a0 + ba, a1 + bb);
                wb[g] = pack_pair((OutT *)nullptr, b0 + ba, b1 + bb);
            }
            quad_transpose<kButterfly>(wa, q);
            quad_transpose<kButterfly>(wb, q);
            *reinterpret_cast<uint4 *>(y + 32 * jb) = make_uint4(wa[0], wa[1], wa[2], wa[3]);
            *reinterpret_cast<uint4 *>(y8 + 32 * jb) = make_uint4(wb[0], wb[1], wb[2], wb[3]);
        }
        return;
    }
    if (p.vector_store && interior) {
        /* Interior tile: no bounds checks, pair stores only. */
        OutT *y = static_cast<OutT *>(o.y) + (long long)row * o.ldy + col0 + 2 * q;
        OutT *y8 = y + 8 * o.ldy;
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            float ba = 0.f, bb = 0.f;
            if (bias) {
                ba = to_float(bias[col0 + 8 * j + 2 * q]);
                bb = to_float(bias[col0 + 8 * j + 2 * q + 1]);
            }
            float a0 = d[OFF + 4 * j], a1 = d[OFF + 4 * j + 1];
            float b0 = d[OFF + 4 * j + 2], b1 = d[OFF + 4 * j + 3];
            a0 += ba, a1 += bb, b0 += ba, b1 += bb;
            if (o.accumulate) {
                a0 += to_float(y[8 * j]), a1 += to_float(y[8 * j + 1]);
                b0 += to_float(y8[8 * j]), b1 += to_float(y8[8 * j + 1]);
            }
            store_pair(y + 8 * j, a0, a1);
            store_pair(y8 + 8 * j, b0, b1);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int col = col0 + 8 * j + 2 * q;
        float ba = 0.f, bb = 0.f;
        if (bias) {
            if (col < p.n) ba = to_float(bias[col]);
            if (col + 1 < p.n) bb = to_float(bias[col + 1]);
        }
        store_two<OutT>(p, o, row, col, d[OFF + 4 * j], d[OFF + 4 * j + 1], ba, bb);
        store_two<OutT>(p, o, row + 8, col, d[OFF + 4 * j + 2], d[OFF + 4 * j + 3], ba, bb);
    }
}

/* The fused reduce-scatter's addends, added into the accumulator
 * fragment (the layout of `epilogue` below) before the epilogue: per
 * addend, interior tiles load 8 (cooperative: 4) column groups x 2 rows
 * of pairs at once instead of one at a time, edge tiles element by
 * element with bounds checks. The sum order per element is fixed (addend
 * 0, 1, ...), so results do not depend on the variant. */
__device__ __forceinline__ float2 pair_of(const float *p) { return *reinterpret_cast<const float2 *>(p); }
__device__ __forceinline__ float2 pair_of(const __nv_bfloat16 *p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}
__device__ __forceinline__ float2 pair_of(const __half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}

template <typename AT, int OFF, int NJ, bool kSplit>
__device__ __forceinline__ void add_addends_as(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    int t = threadIdx.x % 128;
    int q = t % 4;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    bool interior = row0 + 64 <= p.m && col0 + 8 * NJ <= p.n;
#pragma unroll 1
    for (int i = 0; i < p.naddends; i++) {
        const AT *a = static_cast<const AT *>(param_at(p.addend, i)) + (long long)(row - (kSplit ? p.addend_row0 : 0)) * p.addend_ld +
                      col0 + 2 * q;
        const AT *b = a + 8 * p.addend_ld;
        if (interior) {
            /* 16 loads in flight; 8 in the cooperative fragment, whose
             * registers are tighter (no spills either way: -Xptxas -v). */
            constexpr int U = NJ >= 32 ? 4 : 8;
#pragma unroll
            for (int jb = 0; jb < NJ; jb += U) {
                float2 va[U], vb[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    va[u] = pair_of(a + 8 * (jb + u));
                    vb[u] = pair_of(b + 8 * (jb + u));
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    d[OFF + 4 * (jb + u)] += va[u].x;
                    d[OFF + 4 * (jb + u) + 1] += va[u].y;
                    d[OFF + 4 * (jb + u) + 2] += vb[u].x;
                    d[OFF + 4 * (jb + u) + 3] += vb[u].y;
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                int col = col0 + 8 * j + 2 * q;
                if (row < p.m) {
                    if (col < p.n) d[OFF + 4 * j] += to_float(a[8 * j]);
                    if (col + 1 < p.n) d[OFF + 4 * j + 1] += to_float(a[8 * j + 1]);
                }
                if (row + 8 < p.m) {
                    if (col < p.n) d[OFF + 4 * j + 2] += to_float(b[8 * j]);
                    if (col + 1 < p.n) d[OFF + 4 * j + 3] += to_float(b[8 * j + 1]);
                }
            }
        }
    }
}

template <int OFF, int NJ, bool kSplit>
__device__ __forceinline__ void add_addends(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    if (p.addend_dtype == CGM_DTYPE_FP32) add_addends_as<float, OFF, NJ, kSplit>(p, d, row0, col0);
    else if (p.addend_dtype == CGM_DTYPE_BF16) add_addends_as<__nv_bfloat16, OFF, NJ, kSplit>(p, d, row0, col0);
    else add_addends_as<__half, OFF, NJ, kSplit>(p, d, row0, col0);
}

/* A ping-pong consumer's whole 128 x 128 interior tile of each addend: all
 * of its loads are issued before the first is used (64 pairs per thread for
 * 16-bit addends; two batches of 32 for fp32 addends or an fp32 output), so
 * the epilogue waits for one round trip per batch instead of one per 8
 * column groups (add_addends_as with NJ = 16: 2 batches per 64 rows, 4 per
 * tile). The same sums in the same order.
 * Edge tiles take add_addends_as, which checks bounds. */
template <typename AT> struct addend_pair;
template <> struct addend_pair<float> { using type = float2; };
template <> struct addend_pair<__nv_bfloat16> { using type = __nv_bfloat162; };
template <> struct addend_pair<__half> { using type = __half2; };
__device__ __forceinline__ float2 widen(float2 v) { return v; }
__device__ __forceinline__ float2 widen(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ float2 widen(__half2 v) { return __half22float2(v); }

template <typename AT, typename OutT, bool kSplit>
__device__ __forceinline__ void add_addends_tile_as(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    if (row0 + 128 > p.m || col0 + 128 > p.n) {
        add_addends_as<AT, 0, 16, kSplit>(p, d, row0, col0);
        add_addends_as<AT, 64, 16, kSplit>(p, d, row0 + 64, col0);
        return;
    }
    using R = typename addend_pair<AT>::type;
    /* Row sets of the fragment: 0 = row, 1 = row + 8, 2 = row + 64, 3 = row
     * + 72. Two per batch where 64 more registers would spill (fp32 addends
     * or an fp32 output's epilogue, -Xptxas -v). */
    constexpr int kSets = sizeof(AT) == 4 || sizeof(OutT) == 4 ? 2 : 4;
    int t = threadIdx.x % 128;
    long long row = row0 + 16 * (t / 32) + (t % 32) / 4 - (kSplit ? p.addend_row0 : 0);
    int col = col0 + 2 * (t % 4);
#pragma unroll 1
    for (int i = 0; i < p.naddends; i++) {
        const AT *a = static_cast<const AT *>(param_at(p.addend, i)) + row * p.addend_ld + col;
#pragma unroll
        for (int b = 0; b < 4; b += kSets) {
            R v[kSets][16];
#pragma unroll
            for (int s = 0; s < kSets; s++) {
                const AT *r = a + (long long)(8 * ((b + s) & 1) + 64 * ((b + s) >> 1)) * p.addend_ld;
#pragma unroll
                for (int j = 0; j < 16; j++) v[s][j] = *reinterpret_cast<const R *>(r + 8 * j);
            }
#pragma unroll
            for (int s = 0; s < kSets; s++) {
                int off = 64 * ((b + s) >> 1) + 2 * ((b + s) & 1); /* column group j at off + 4j */
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    float2 f = widen(v[s][j]);
                    d[off + 4 * j] += f.x;
                    d[off + 4 * j + 1] += f.y;
                }
            }
        }
    }
}

template <typename OutT, bool kSplit>
__device__ __forceinline__ void add_addends_tile(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    if (p.addend_dtype == CGM_DTYPE_FP32) add_addends_tile_as<float, OutT, kSplit>(p, d, row0, col0);
    else if (p.addend_dtype == CGM_DTYPE_BF16) add_addends_tile_as<__nv_bfloat16, OutT, kSplit>(p, d, row0, col0);
    else add_addends_tile_as<__half, OutT, kSplit>(p, d, row0, col0);
}

/* One addend slot (rows 64 h .. 64 h + 63 of a ping-pong tile, 128
 * columns, 16-bit, as addend_tma_helper's two 128B-swizzled TMA boxes
 * left it) added into d[OFF .. OFF + 63] (OFF = 64 h). ldmatrix.x4 gives
 * each thread exactly its accumulator fragment of four 8 x 8 blocks
 * (PTX ISA, "Matrix fragments for ldmatrix": thread l holds row l / 4,
 * elements 2 (l % 4), +1 of each block): blocks (rows 16w.., columns 8j),
 * (rows 16w + 8.., 8j), (16w.., 8j + 8), (16w + 8.., 8j + 8) of warp w are
 * d[OFF + 4j], +1; d[OFF + 4j + 2], +3; d[OFF + 4j + 4], +5; d[OFF + 4j +
 * 6], +7. Lane l gives the address of row l % 8 of block l / 8; with the
 * swizzle, 16-byte chunk c of row r sits at chunk c ^ (r % 8), so the 8
 * rows of a block hit 8 different chunks: no bank conflicts. */
__device__ __forceinline__ float2 widen_bits(uint32_t v, __nv_bfloat16 *) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&v));
}
__device__ __forceinline__ float2 widen_bits(uint32_t v, __half *) {
    return __half22float2(*reinterpret_cast<__half2 *>(&v));
}

template <typename AT, int OFF>
__device__ __forceinline__ void add_addend_slot(float (&d)[128], uint32_t slot) {
    int l = threadIdx.x % 32, w = (threadIdx.x / 32) % 4;
    int r = 16 * w + 8 * ((l >> 3) & 1) + (l & 7);
    uint32_t row = slot + (uint32_t)r * 128u;
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
        int chunk = (j % 8) + (l >> 4);
        uint32_t addr = row + (uint32_t)(j / 8) * kAddendBox + (uint32_t)((chunk ^ (l & 7)) << 4);
        uint32_t v0, v1, v2, v3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                     : "r"(addr)
                     : "memory");
        float2 f0 = widen_bits(v0, (AT *)nullptr), f1 = widen_bits(v1, (AT *)nullptr);
        float2 f2 = widen_bits(v2, (AT *)nullptr), f3 = widen_bits(v3, (AT *)nullptr);
        d[OFF + 4 * j] += f0.x;
        d[OFF + 4 * j + 1] += f0.y;
        d[OFF + 4 * j + 2] += f1.x;
        d[OFF + 4 * j + 3] += f1.y;
        d[OFF + 4 * j + 4] += f2.x;
        d[OFF + 4 * j + 5] += f2.y;
        d[OFF + 4 * j + 6] += f3.x;
        d[OFF + 4 * j + 7] += f3.y;
    }
}

/* One fp32 slot: columns 32 P .. 32 P + 31 of the tile, all 128 rows, as
 * the helper's TMA box left it (128-byte rows, 128B swizzle: 16-byte chunk
 * c of row r at chunk c ^ (r % 8)), added into column groups j = 4P ..
 * 4P + 3 of both 64-row halves. A thread's pair (row R, columns 8j + 2q,
 * +1) is 8 bytes in chunk 2 (j - 4P) + q / 2; a warp's 32 pairs fill each
 * bank twice, the least two wavefronts for 256 bytes. */
template <int P>
__device__ __forceinline__ void add_addend_part_f32(float (&d)[128], uint32_t slot) {
    int l = threadIdx.x % 32, w = (threadIdx.x / 32) % 4, q = l & 3;
#pragma unroll
    for (int half = 0; half < 2; half++)
#pragma unroll
        for (int e = 0; e < 2; e++) { /* rows R and R + 8 */
            int r = 64 * half + 16 * w + 8 * e + (l >> 2);
            uint32_t row = slot + (uint32_t)r * 128u + (uint32_t)(q & 1) * 8u;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                uint32_t chunk = (uint32_t)((2 * jj + (q >> 1)) ^ (r & 7));
                float x, y;
                asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(x), "=f"(y) : "r"(row + (chunk << 4)) : "memory");
                int at = 64 * half + 4 * (4 * P + jj) + 2 * e;
                d[at] += x;
                d[at + 1] += y;
            }
        }
}

/* A ping-pong consumer's own tile, addends from the slots (filled by
 * addend_tma_helper): per addend its parts (16-bit: 2, the 64-row halves;
 * fp32: 4, the 32-column quarters), part k in slot k % 2 as the slot's use
 * `uses` + k / 2. For each: wait for this consumer's full barrier of the
 * slot (afull: its two barriers, parity of the use), add the part, and
 * give the slot back on its empty barrier (one arrive per warp after a
 * proxy fence of each thread's reads). The sums per element in addend order,
 * as add_addends_tile's. Returns the uses that follow. */
__device__ __forceinline__ void slot_done(uint32_t aempty) {
    /* The reads were generic-proxy loads; the helper's next TMA into the
     * slot writes through the async proxy. Without this fence the arrive
     * may go out while the warp's last loads are still in flight (SASS
     * showed it, once the compiler knew the warp converged and dropped
     * __syncwarp's WARPSYNC), and the next part overwrote the slot under
     * them: wrong sums in addends_tma. */
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(aempty);
}

template <typename AT>
__device__ __forceinline__ uint32_t add_addends_slots(const hgemm_params &p, float (&d)[128], uint32_t slots,
                                                      uint32_t afull, uint32_t aempty, uint32_t uses) {
#pragma unroll 1
    for (int a = 0; a < p.naddends; a++) {
        if constexpr (sizeof(AT) == 4) {
            mbar_wait(afull, uses & 1u);
            add_addend_part_f32<0>(d, slots);
            slot_done(aempty);
            mbar_wait(afull + 8, uses & 1u);
            add_addend_part_f32<1>(d, slots + kAddendSlot);
            slot_done(aempty + 8);
            mbar_wait(afull, (uses + 1) & 1u);
            add_addend_part_f32<2>(d, slots);
            slot_done(aempty);
            mbar_wait(afull + 8, (uses + 1) & 1u);
            add_addend_part_f32<3>(d, slots + kAddendSlot);
            slot_done(aempty + 8);
            uses += 2;
        } else {
            mbar_wait(afull, uses & 1u);
            add_addend_slot<AT, 0>(d, slots);
            slot_done(aempty);
            mbar_wait(afull + 8, uses & 1u);
            add_addend_slot<AT, 64>(d, slots + kAddendSlot);
            slot_done(aempty + 8);
            uses += 1;
        }
    }
    return uses;
}

/* The epilogue's target of m tile tm: the rows with the epilogue, or the
 * plain partial rows (no bias, no accumulate, no addends). */
__device__ __forceinline__ bool epilogue_rows(const hgemm_params &p, int tm) {
    return tm >= p.yown_tile0 && tm < p.yown_tile1;
}
template <bool kSplit>
__device__ __forceinline__ tile_out out_of(const hgemm_params &p, bool own) {
    if (!kSplit) return tile_out{p.y, p.ldy, p.bias, p.accumulate};
    return tile_out{own ? p.y_own : p.y, own ? p.ldy_own : p.ldy, own ? p.bias : nullptr,
                    own ? p.accumulate : 0};
}

/* After one consumer warpgroup stored its part of partial tile tm (rows
 * outside the epilogue rows): the warpgroup meets on named barrier
 * 1 + consumer, then its leader makes the stores visible at GPU scope and
 * counts them toward the tile's piece. The last of the piece's
 * tiles_m x tiles_n x (consumers per tile) counts resets the counter and
 * raises the piece's done flag to the epoch (release), which a wait on
 * another queue of this GPU watches before the copy engine pushes the
 * piece (the fused GEMM+RS, p2p_fused.c). */
template <bool kPP>
__device__ void count_done(const hgemm_params &p, int tm, int consumer, unsigned long long epoch) {
    asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
    if (threadIdx.x % 128 != 0) return;
    long long r0 = (long long)tm * kTileM;
    long long j = r0 / p.done_shard_rows;
    long long q = (r0 - j * p.done_shard_rows) / p.done_rows_per_piece;
    long long shard_end = min((j + 1) * p.done_shard_rows, (long long)p.m);
    long long first = j * p.done_shard_rows + q * p.done_rows_per_piece;
    long long rows = min(first + p.done_rows_per_piece, shard_end) - first;
    unsigned int need = (unsigned int)(((rows + kTileM - 1) / kTileM) * p.tiles_n * (kPP ? 1 : 2));
    long long cell = j * p.done_pieces_per_shard + q;
    __threadfence();
    if (atomicAdd(p.done_count + cell, 1u) == need - 1) {
        atomicExch(p.done_count + cell, 0u);
        __threadfence();
        cgm_flags::store_release_sys(p.done_flags + cell, epoch);
    }
}

/* The split ping-pong kernel's addend-flag helper: thread 32 (warp 1 of
 * the producer warpgroup, otherwise idle), when some addend has flags. For
 * each own tile of the CTA, in tile order, it waits for the addend flags of
 * the tile's rows and arrives on ready[c] of the tile's consumer c. The
 * consumer waits on ready[c] (shared memory) instead of polling the flags
 * itself after its main loop, where the chain of loads (give-up check,
 * timer, flag, fence: ~7k cycles) was on the tensor cores' path: an own
 * tile's epilogue outlasted the other consumer's main loop
 * (docs/HOPPER_GEMM.md). The consumer then arrives on taken[c]. Before the
 * next ready[c] the helper waits for that taken[c], so ready[c] never runs
 * two phases ahead of its consumer and both barriers alternate strictly. The
 * addends' ordering for the consumer: the peer's release, the helper's
 * acquire and fence, the mbarrier arrive (release, CTA), the consumer's
 * wait (acquire, CTA). After a wait gave up the helper still arrives
 * (later waits return at once), so nothing hangs. */
template <bool kSplit>
__device__ void addend_flag_helper(const hgemm_params &p, uint32_t ready_bar, uint32_t taken_bar) {
    int tiles = p.tiles_m * p.tiles_n;
    unsigned long long epoch = flag_epoch(p);
    /* Per consumer (bit c): whether ready[c] was given yet, and the parity
     * of taken[c]'s phase to wait for next (bits, not an indexed array:
     * that would live in local memory). */
    uint32_t given = 0, parity = 0;
    for (int i = 0;; i++) {
        long long tl = blockIdx.x + (long long)i * gridDim.x;
        if (tl >= tiles) break;
        int tm, tn;
        tile_coords<kSplit>(p, (int)tl, &tm, &tn);
        if (kSplit && !epilogue_rows(p, tm)) continue;
        int c = i & 1;
        if ((given >> c) & 1) {
            mbar_wait(taken_bar + 8 * c, (parity >> c) & 1);
            parity ^= 1u << c;
        }
        if (!gave_up(p)) {
            wait_addend_rows<kSplit>(p, tm * kTileM, kTileM, epoch, 0, p.naddends);
            __threadfence();
        }
        mbar_arrive(ready_bar + 8 * c);
        given |= 1u << c;
    }
}

/* A tensor map of addend_maps by constant indices (see param_at). */
__device__ __forceinline__ const CUtensorMap *addend_map(const addend_maps &am, int i) {
    switch (i) {
    case 0: return &am.map[0];
    case 1: return &am.map[1];
    case 2: return &am.map[2];
    case 3: return &am.map[3];
    case 4: return &am.map[4];
    case 5: return &am.map[5];
    default: return &am.map[6];
    }
}

/* The addend loader of the ping-pong kernels with a helper
 * (hgemm_params.addend_tma): thread 32, as addend_flag_helper, but it also
 * brings the addends into shared memory, so that an own tile's epilogue
 * reads them from there (add_addends_slots) instead of waiting ~9k cycles
 * for global loads after its main loop. For each own tile of the CTA
 * (split output: the y_own tiles; otherwise every tile) in tile order and
 * each addend a: wait for a's flags of the tile's rows (then a proxy fence:
 * the rows were acquired by the generic proxy, TMA reads through the async
 * one), then for each part k of the addend's tile (16-bit: the two 64-row
 * halves, two 64 x 64 boxes each; fp32: the four 32-column quarters, one
 * 128 x 32 box each) wait for slot k % 2 to be empty and load the part
 * into it, completing on the full barrier of that slot of the tile's
 * consumer c (afull + 16 c + 8 (k % 2)). Use u of a slot (u = 0, 1, ...:
 * the parts in order, two per slot per fp32 addend) waits for the slot's
 * empty barrier's phase u - 1 (a fresh barrier counts as having completed
 * the phase before 0). The full barriers are per consumer so that each
 * counts only its consumer's uses, in that consumer's order: a parity wait
 * is only sound when the barrier is at most one phase behind, and one
 * consumer can reach its epilogue while the other still waits for an
 * earlier use (late flags). The loads run one (own tile, addend) ahead of
 * the epilogue that reads them, during the other consumer's main loop.
 * After a wait gave up the loads still go out (the rows are whatever they
 * hold), so nothing hangs. */
template <bool kSplit>
__device__ void addend_tma_helper(const hgemm_params &p, const addend_maps &am, uint32_t slots, uint32_t afull,
                                  uint32_t aempty) {
    int tiles = p.tiles_m * p.tiles_n;
    unsigned long long epoch = p.addend_waits ? flag_epoch(p) : 0;
    bool f32 = p.addend_dtype == CGM_DTYPE_FP32;
    int parts = f32 ? 4 : 2;
    uint32_t use = 0;
    for (int i = 0;; i++) {
        long long tl = blockIdx.x + (long long)i * gridDim.x;
        if (tl >= tiles) break;
        int tm, tn;
        tile_coords<kSplit>(p, (int)tl, &tm, &tn);
        if (kSplit && !epilogue_rows(p, tm)) continue;
        int row = tm * kTileM - (kSplit ? (int)p.addend_row0 : 0);
        int col = tn * CGM_HGEMM_TILE_N_PINGPONG;
        uint32_t full0 = afull + 16 * (i & 1);
        for (int a = 0; a < p.naddends; a++) {
            if (param_at(p.addend_flags, a)) {
                wait_addend_rows<kSplit>(p, tm * kTileM, kTileM, epoch, a, a + 1);
                asm volatile("fence.proxy.async.global;" ::: "memory");
            }
            const CUtensorMap *map = addend_map(am, a);
            for (int k = 0; k < parts; k++) {
                int h = k & 1;
                uint32_t slot = slots + h * kAddendSlot, full = full0 + 8 * h, u = use + (uint32_t)(k / 2);
                mbar_wait(aempty + 8 * h, (u & 1u) ^ 1u);
                mbar_arrive_expect_tx(full, kAddendSlot);
                if (f32) {
                    tma_load_2d(slot, map, col + 32 * k, row, full);
                } else {
                    tma_load_2d(slot, map, col, row + 64 * h, full);
                    tma_load_2d(slot + kAddendBox, map, col + 64, row + 64 * h, full);
                }
            }
            use += (uint32_t)(parts / 2);
        }
    }
}

/* --------------------------------------------------------------- kernel */

/* Ring position -> (stage, phase). The producer and both consumers count
 * positions the same way: position = (CTA-local tile index) * k_blocks + kb. */
template <int kStages>
__device__ __forceinline__ void ring_at(unsigned long long pos, int *stage, uint32_t *phase) {
    *stage = (int)(pos % kStages);
    *phase = (uint32_t)((pos / kStages) & 1);
}

/* One piece of a CTA's work: k blocks [kb0, kb1) of linear tile t, at ring
 * position pos (its first k block). sk: the shared tile's index among the
 * stream-K tiles, or -1 for a whole tile. */
struct unit {
    int t, kb0, kb1, sk;
    unsigned long long pos;
};

/* This CTA's share of the schedule, which unit_at recomputes for every
 * unit (a few 32-bit integer operations) so that none of it stays live
 * across the producer's loop (its 40 registers). The first dp_tiles tiles of the linear order go whole to CTAs in turn, tile
 * blockIdx.x + u * gridDim.x: ndp of them (dp_tiles is a multiple of the
 * grid when sk_tiles > 0, so every CTA has the same number). The remaining
 * sk_tiles tiles form sk_tiles * k_blocks iterations (tile-major), of
 * which CTA c takes the range [s, e) = [c I / G, (c + 1) I / G): it ends
 * the previous CTA's last tile and starts the next one's first. cgm_hgemm
 * cuts only when a range holds at least k_blocks iterations, so a tile is
 * shared by at most two CTAs. a0: the stream-K tile that holds s. Only
 * the kSK kernels call it. */
struct sched {
    int ndp, s, e, a0; /* cgm_hgemm cuts only when sk_tiles * k_blocks < 2^31 */
};

__host__ __device__ __forceinline__ sched sched_of(const hgemm_params &p, int c, int G) {
    /* 32-bit only (64-bit divisions need more registers than the producer
     * has): c I / G = c q + c r / G with I = q G + r, c r < G^2 < 2^26. */
    int dp = p.dp_tiles;
    sched r;
    r.ndp = dp > c ? (dp - c + G - 1) / G : 0;
    r.s = r.e = r.a0 = 0;
    if (p.sk_tiles > 0) {
        r.s = c * p.sk_q + c * p.sk_r / G;
        r.e = (c + 1) * p.sk_q + (c + 1) * p.sk_r / G;
        r.a0 = r.s / p.k_blocks;
    }
    return r;
}

/* The u-th unit of CTA c of G (false past the last). Ring positions keep
 * counting k blocks, so every role agrees on them. Host and device: the
 * host's cgm_hgemm_sk_schedule_check walks it for every CTA. */
__host__ __device__ __forceinline__ bool unit_at(const hgemm_params &p, int c, int G, int u, unit *w) {
    const sched sc = sched_of(p, c, G); /* a few integer operations per unit: nothing stays live */
    long long K = p.k_blocks;
    if (u < sc.ndp) {
        w->t = (int)((unsigned)c + (unsigned)u * (unsigned)G);
        w->kb0 = 0;
        w->kb1 = (int)K;
        w->sk = -1;
        w->pos = (unsigned long long)(u * K);
        return true;
    }
    if (sc.e == 0) return false;
    int a = sc.a0 + (int)(u - sc.ndp), first = a * p.k_blocks;
    if (first >= sc.e) return false;
    int kb0 = sc.s > first ? sc.s - first : 0, kb1 = sc.e - first < p.k_blocks ? sc.e - first : p.k_blocks;
    w->t = p.dp_tiles + a;
    w->kb0 = kb0;
    w->kb1 = kb1;
    w->sk = kb0 == 0 && kb1 == p.k_blocks ? -1 : a; /* a whole tile has no partner */
    w->pos = (unsigned long long)sc.ndp * (unsigned long long)K + (unsigned long long)(first + kb0 - sc.s);
    return true;
}

/* How many units unit_at gives CTA c of G: its whole tiles, then the
 * stream-K tiles its range [s, e) touches (cgm_hgemm_sk_schedule_check
 * compares it with the walk). The producer loops over this count: looping
 * while unit_at returns true kept the k loop's stage, phase and
 * coordinates in ordinary registers (6 R2UR per k block around the TMA
 * loads), and counting by walking unit_at first delayed every CTA's first
 * load by up to ~13 us (a division-heavy unit_at per unit, one thread). */
__host__ __device__ __forceinline__ int units_of(const hgemm_params &p, int c, int G) {
    const sched sc = sched_of(p, c, G);
    return sc.e > sc.s ? sc.ndp + (sc.e - 1) / p.k_blocks - sc.a0 + 1 : sc.ndp;
}

/* bar.red.or over the 128 threads of named barrier `id`: true on every
 * thread when `v` is true on any. */
__device__ __forceinline__ bool bar_any(int id, bool v) {
    uint32_t out;
    asm volatile("{\n.reg .pred p, q;\n"
                 "setp.ne.u32 p, %1, 0;\n"
                 "bar.red.or.pred q, %2, 128, p;\n"
                 "selp.u32 %0, 1, 0, q;\n}\n"
                 : "=r"(out)
                 : "r"((uint32_t)v), "r"(id)
                 : "memory");
    return out != 0;
}

/* A stream-K partial: k blocks [kb0, kb1) of a shared tile, in this
 * consumer warpgroup's accumulators (its 64 or 128 rows: cell `cell`).
 * Two units share each tile; their leaders take a ticket on the cell
 * (+1). The first stores its fp32 partial in the cell's slot (per
 * thread, 32 float4 in fragment order, so each warp store is 512
 * contiguous bytes), then adds 2 (release); the second waits until the
 * cell reaches 4 (acquire), adds the slot into its accumulators, resets
 * the cell for the next launch and returns true: it runs the epilogue.
 * The second only ever waits for a warpgroup that took its ticket, i.e.
 * one that is running and storing, never for a CTA still to be scheduled;
 * the wait is bounded anyway (wait_timeout_ns: timeout_out). */
__device__ __forceinline__ bool sk_fixup(const hgemm_params &p, float (&d)[128], int cell, int consumer) {
    int t = threadIdx.x % 128;
    bool leader = t == 0;
    unsigned int *ctr = p.sk_cells + cell;
    float4 *slot = p.sk_slots + (size_t)cell * 32 * 128 + t;
    unsigned int old = 1;
    if (leader) old = atomicAdd(ctr, 1u);
    /* bar_any's result is the same in every thread, but the compiler
     * cannot tell: branching on it took the kSK kernels' whole consumer
     * loop, k loop included, off the uniform datapath (104 instead of 69
     * instructions per k block in ping-pong, 32 R2UR). */
    if (__shfl_sync(0xFFFFFFFFu, (int)bar_any(1 + consumer, old == 0), 0)) {
#pragma unroll
        for (int i = 0; i < 32; i++) __stcg(slot + i * 128, make_float4(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]));
        asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
        if (leader) {
            __threadfence();
            atomicAdd(ctr, 2u);
        }
        return false;
    }
    if (leader) {
        unsigned long long start = globaltimer();
        for (;;) {
            unsigned int v;
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
            if (v >= 4) break;
            if ((long long)(globaltimer() - start) > p.wait_timeout_ns) {
                if (p.timeout_out) *(volatile int *)p.timeout_out = 1;
                break;
            }
            __nanosleep(64);
        }
        *(volatile unsigned int *)ctr = 0;
    }
    asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
    /* 8 loads in flight at a time: all 32 at once would need 128 more
     * registers than the consumer has (spills). */
#pragma unroll
    for (int i = 0; i < 32; i++) {
        float4 v = __ldcg(slot + i * 128);
        d[4 * i] += v.x, d[4 * i + 1] += v.y, d[4 * i + 2] += v.z, d[4 * i + 3] += v.w;
        if (i % 8 == 7) asm volatile("" ::: "memory");
    }
    return true;
}

/* The producer's work for one unit: k blocks [kb0, kb1) of linear tile t
 * into the ring (stage, phase: the next position), after the tile's row
 * flags (waiting, epoch, seen: wait_row_flags). kHooks false (the stream-K
 * kernels, which cgm_hgemm runs without row flags and x_own): neither,
 * which leaves the producer's 40 registers enough for the unit walk. */
template <bool kSplit, int kStages, typename C, bool kHooks = true>
__device__ __forceinline__ void produce(const hgemm_params &p, const CUtensorMap *map_x,
                                        const CUtensorMap *map_x_own, const CUtensorMap *map_w, uint32_t smem_a,
                                        uint32_t smem_b, uint32_t full_bar, uint32_t empty_bar, int t, int kb0,
                                        int kb1, int &stage, uint32_t &phase, bool &waiting,
                                        unsigned long long epoch, unsigned long long &seen, unsigned int *ready) {
    int tm, tn;
    tile_coords<kSplit>(p, t, &tm, &tn);
    /* Tiles inside the own rows read them from x_own, unflagged. */
    bool own = kHooks && tm >= p.own_tile0 && tm < p.own_tile1;
    const CUtensorMap *mx = own ? map_x_own : map_x;
    int xrow = own ? tm * kTileM - (int)p.own_row0 : tm * kTileM;
    if (kHooks && waiting && !own) {
        /* An m tile whose flags this thread already saw ready costs one
         * shared-memory load: the check itself is about 60 instructions
         * before the tile's first TMA load, and each flagged tile's check
         * cost the ping-pong kernel 0.4-0.8 us at k = 4096 (agbench,
         * docs/PERFORMANCE.md 4t). Only this thread reads and writes the
         * map. */
        bool mapped = tm < kReadyTiles;
        unsigned int bit = 1u << (tm & 31), word = mapped ? ready[tm >> 5] : 0u;
        if (!(word & bit)) {
            waiting = wait_row_flags(p, tm, epoch, &seen);
            if (waiting && mapped) ready[tm >> 5] = word | bit;
        }
    }
    for (int kb = kb0; kb < kb1; kb++) {
        /* A fresh barrier counts as having completed the phase before
         * phase 0, so the first pass does not wait. */
        mbar_wait(empty_bar + 8 * stage, phase ^ 1);
        mbar_arrive_expect_tx(full_bar + 8 * stage, C::stage_bytes);
        tma_load_2d(smem_a + stage * kStageBytesA, mx, kb * kTileK, xrow, full_bar + 8 * stage);
        tma_load_2d(smem_b + stage * C::bytes_b, map_w, kb * kTileK, tn * C::tile_n, full_bar + 8 * stage);
        if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
        }
    }
}

/* kSplit: the split output of cgm_hgemm_args.y_own (epilogue rows, plain
 * partial rows, done flags); without it the epilogue is the plain GEMM's,
 * whose code is kept apart (the selection cost the cooperative kernel
 * 1-3 % on the bench, docs/PERFORMANCE.md 4i). kAddTma: the plain
 * ping-pong kernel's form for addends that TMA can load (the helper and
 * its slots; cgm_hgemm picks it per call). */
template <bool kBf16, typename OutT, bool kPP, bool kSplit, bool kAddTma, bool kSK>
__global__ void __launch_bounds__(kThreads, 1)
    hgemm_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_x_own,
                 const __grid_constant__ CUtensorMap map_w, const __grid_constant__ addend_maps amaps,
                 const hgemm_params p) {
    using C = cfg<kPP>;
    constexpr int kStages = C::stages;
    /* The split ping-pong kernel (the one-kernel GEMM+RS's) takes its
     * addend flags from a helper thread (addend_flag_helper), which with
     * addend_tma also loads the addends (addend_tma_helper), with 56
     * registers for the producer warpgroup and 224 for the consumers; so
     * does the plain ping-pong kernel's kAddTma instantiation, which
     * cgm_hgemm runs for addends that TMA can load. The other kernels keep
     * 40 / 232 (the plain ping-pong kernel measured 1-2 % slower at 224)
     * and wait in the consumer. */
    static_assert(!kAddTma || (kPP && !kSplit), "kAddTma: the plain ping-pong kernel's addend form");
    constexpr bool kHelper = kPP && (kSplit || kAddTma);
    /* kSK: the plain kernels' form that cuts its last wave (the stream-K
     * tail: unit_at, produce, sk_fixup), a separate instantiation that
     * cgm_hgemm runs only when it cuts, so that every other kernel's code
     * stays as it was (one that walked units with nothing to cut ran
     * ping-pong 7-23 % slower, 2026-12-01). */
    static_assert(!kSK || (!kSplit && !kAddTma), "kSK: the plain kernels only");
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    uint32_t smem_a = base;                                 /* kStages x 16 KiB */
    uint32_t smem_b = base + kStages * kStageBytesA;        /* kStages x C::bytes_b */
    uint32_t slots = base + kStages * C::stage_bytes;       /* kHelper: 2 x kAddendSlot */
    uint32_t full_bar = slots + (kHelper ? 2 * kAddendSlot : 0); /* kStages x 8 bytes */
    uint32_t empty_bar = full_bar + kStages * 8;            /* kStages x 8 bytes */
    uint32_t turn_bar = empty_bar + kStages * 8;            /* 2 x 8 bytes (ping-pong) */
    uint32_t ready_bar = turn_bar + 16;                     /* 2 x 8 bytes (addend_flag_helper) */
    uint32_t taken_bar = ready_bar + 16;                    /* 2 x 8 bytes (addend_flag_helper) */
    uint32_t afull_bar = taken_bar + 16;                    /* 2 x 2 x 8 bytes (addend_tma_helper) */
    uint32_t aempty_bar = afull_bar + 32;                   /* 2 x 8 bytes (addend_tma_helper) */
    /* then the tile queue (kQueueBytes) and the producer's map of ready m
     * tiles (kReadyTiles / 8 bytes, produce) */
    const tile_queue queue = {aempty_bar + 16, aempty_bar + 32, aempty_bar + 48};
    constexpr bool kQueue = !kHelper && !kSK;
    /* With the static schedule every role computes its tiles itself: going
     * through the queue made the fused AG's form (row flags, tile order,
     * x_own) 2-3 % slower with static tiles (docs/PERFORMANCE.md 4t). */
    const bool dynamic = kQueue && p.tile_counter != nullptr;
    /* The warpgroup is broadcast from lane 0: the compiler then knows it
     * (and the consumer index, its ring position, the wgmma descriptors)
     * is warp-uniform and keeps the main loop in uniform registers, with
     * no R2UR per wgmma (ping-pong 103 -> 75 instructions per k block,
     * 85 -> 65 M per 16384x4096x2048 call; docs/HOPPER_GEMM.md, "Uniform
     * registers"). The helper kernels also need the count of flag handoffs
     * broadcast (below). */
    int warpgroup = __shfl_sync(0xFFFFFFFFu, (int)(threadIdx.x / 128), 0);
    int tiles = p.tiles_m * p.tiles_n;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full_bar + 8 * s, 1); /* the producer's arrive.expect_tx */
            /* one arrive per consumer warpgroup that reads the stage */
            mbar_init(empty_bar + 8 * s, kPP ? 1 : 2);
        }
        mbar_init(turn_bar, 1);
        mbar_init(turn_bar + 8, 1);
        if (kHelper)
            for (int c = 0; c < 2; c++) {
                mbar_init(ready_bar + 8 * c, 1);
                mbar_init(taken_bar + 8 * c, 1);
                mbar_init(afull_bar + 16 * c, 1); /* the helper's arrive.expect_tx */
                mbar_init(afull_bar + 16 * c + 8, 1);
                mbar_init(aempty_bar + 8 * c, 4); /* one arrive per warp of the reading consumer */
            }
        if (dynamic)
            for (int s = 0; s < 2; s++) {
                mbar_init(queue.full + 8 * s, 1);
                mbar_init(queue.empty + 8 * s, kPP ? 4 : 8); /* one arrive per reading warp */
            }
        /* Make the initialised barriers visible to the async proxy (TMA). */
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
#ifdef CGM_HGEMM_TRACE
    if (threadIdx.x == 0 && blockIdx.x < kTraceCtas) {
        unsigned int smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        trace_cta[blockIdx.x][0] = globaltimer();
        trace_cta[blockIdx.x][3] = smid;
    }
#endif

    if (warpgroup == 0) {
        if (kHelper) /* room for the addend-flag helper (no spills, -Xptxas -v) */
            asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        else
            asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        /* The helper's warp leaves on a branch the compiler knows to be
         * warp-uniform (the warp index broadcast): branching on
         * threadIdx.x == 32 here kept the producer's k loop below in
         * ordinary registers (10 R2UR per k block). */
        if (kHelper && __shfl_sync(0xFFFFFFFFu, (int)(threadIdx.x / 32), 0) == 1) {
            if (threadIdx.x == 32) {
                if (p.addend_tma)
                    addend_tma_helper<kSplit>(p, amaps, slots, afull_bar, aempty_bar);
                else if (p.addend_waits)
                    addend_flag_helper<kSplit>(p, ready_bar, taken_bar);
            }
            return;
        }
        if (threadIdx.x != 0) return;
        asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&map_x) : "memory");
        if (p.own_tile1 > p.own_tile0)
            asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&map_x_own) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&map_w) : "memory");
        int stage = 0;
        uint32_t phase = 0;
        bool waiting = p.row_flags != nullptr;
        unsigned long long epoch = waiting ? flag_epoch(p) : 0, seen = 0;
        /* the map of ready m tiles (produce), after the barriers */
        unsigned int *ready = (unsigned int *)(smem_raw + (aempty_bar + 16 + kQueueBytes - smem_addr(smem_raw)));
        if (!kSK && waiting)
#pragma unroll 1
            for (int i = 0; i < kReadyTiles / 32 && i * 32 < p.tiles_m; i++) ready[i] = 0;
        if constexpr (kSK) {
            /* One loop over the units, each recomputed from its index (the
             * schedule is not kept live: with it, with a second loop for
             * the stream-K units, or with the row-flag logic, the producer's
             * 40 registers spilled up to 120 bytes, and the cut ping-pong
             * kernel ran 9-39 % slower; docs/PERFORMANCE.md 4p). */
            unit w;
            const int units = units_of(p, blockIdx.x, gridDim.x);
            for (int u = 0; u < units; u++) {
                unit_at(p, blockIdx.x, gridDim.x, u, &w);
                produce<kSplit, kStages, C, false>(p, &map_x, &map_x_own, &map_w, smem_a, smem_b, full_bar, empty_bar,
                                                   w.t, w.kb0, w.kb1, stage, phase, waiting, epoch, seen, ready);
            }
        } else if (dynamic) {
            /* The next tile is claimed before this one's loads and read
             * after them: the atomic's round trip stays off the path to
             * the tile's first TMA load. The claim of value tiles - 1 is
             * the launch's last (each CTA's claims end with one past the
             * tiles: tiles claims in all), so its CTA resets the counter. */
            unsigned int *counter = p.tile_counter;
            int j = 0;
            for (int t = blockIdx.x; t < tiles; j++) {
                unsigned int v = atomicAdd(counter, 1u);
                queue_put(queue, j, t);
                produce<kSplit, kStages, C>(p, &map_x, &map_x_own, &map_w, smem_a, smem_b, full_bar, empty_bar, t,
                                            0, p.k_blocks, stage, phase, waiting, epoch, seen, ready);
                if (v == (unsigned int)tiles - 1u) *(volatile unsigned int *)counter = 0u;
                long long next = (long long)gridDim.x + v;
                /* the producer thread is the warp's only one left; the
                 * shuffle tells the compiler the tile (an atomic's result)
                 * is warp-uniform, which keeps the k loop's TMA coordinates
                 * in uniform registers (10 R2UR per k block without) */
                t = __shfl_sync(1u, next < tiles ? (int)next : tiles, 0);
            }
            queue_put(queue, j, -1);
            queue_put(queue, j + 1, -1);
        } else {
            for (int t = blockIdx.x; t < tiles; t += gridDim.x)
                produce<kSplit, kStages, C>(p, &map_x, &map_x_own, &map_w, smem_a, smem_b, full_bar, empty_bar, t,
                                            0, p.k_blocks, stage, phase, waiting, epoch, seen, ready);
        }
        return;
    }

    /* 128 x 56 + 256 x 224 = 128 x 40 + 256 x 232 = 64512 of the SM's 65536 */
    if (kHelper)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    else
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    int consumer = warpgroup - 1;
    bool leader = threadIdx.x % 128 == 0;
#ifdef CGM_HGEMM_TRACE
    cta_exit_stamp exit_stamp{1 + consumer, leader};
#endif
    unsigned long long epoch = p.addend_waits || (kSplit && p.done_flags) ? flag_epoch(p) : 0;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.f;

    if (!kPP) {
        /* Cooperative: both consumers walk every tile of the CTA. */
        int stage = 0;
        uint32_t phase = 0;
        for (int u = 0;; u++) {
            unit w;
            if constexpr (kSK) {
                if (!unit_at(p, blockIdx.x, gridDim.x, u, &w)) break;
            } else if (dynamic) {
                w.t = queue_get(queue, u);
                if (w.t < 0) break;
            } else {
                w.t = blockIdx.x + u * gridDim.x;
                if (w.t >= tiles) break;
            }
            int tm, tn;
            tile_coords<kSplit>(p, w.t, &tm, &tn);
            int prev = 0;
            int nk = kSK ? w.kb1 - w.kb0 : p.k_blocks;
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(full_bar + 8 * stage, phase);
                uint64_t desc_a = smem_desc_sw128(smem_a + stage * kStageBytesA + consumer * 64 * 128);
                uint64_t desc_b = smem_desc_sw128(smem_b + stage * C::bytes_b);
                fence_accumulators(d);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < kTileK / 16; kk++)
                    wgmma_m64n256k16<kBf16>(d, desc_a + 2 * kk, desc_b + 2 * kk,
                                            (kb > 0 || kk > 0) ? 1u : 0u);
                wgmma_commit();
                fence_accumulators(d);
                /* At most this stage's group in flight: the previous
                 * stage's reads are done, hand it back to the producer. */
                wgmma_wait<1>();
                fence_accumulators(d);
                if (kb > 0 && leader) mbar_arrive(empty_bar + 8 * prev);
                prev = stage;
                if (++stage == kStages) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
            fence_accumulators(d);
            if (leader) mbar_arrive(empty_bar + 8 * prev);
            /* A shared stream-K tile: the second of its two units stores it. */
            if constexpr (kSK)
                if (w.sk >= 0 && !sk_fixup(p, d, 2 * w.sk + consumer, consumer)) continue;
            bool own = !kSplit || epilogue_rows(p, tm);
            if (p.addend_waits && own)
                wait_addend_flags<kSplit>(p, (long long)tm * kTileM + consumer * 64, 64, consumer, epoch);
            if (p.naddends && own) add_addends<0, 32, kSplit>(p, d, tm * kTileM + consumer * 64, tn * C::tile_n);
            epilogue<OutT, 0, 32, true>(p, out_of<kSplit>(p, own), d, tm * kTileM + consumer * 64, tn * C::tile_n);
            if (kSplit && p.done_flags && !own) count_done<kPP>(p, tm, consumer, epoch);
        }
        return;
    }

    /* Ping-pong: consumer c computes the CTA-local tiles i = c, c + 2, ...
     * (global tile blockIdx.x + i * gridDim.x), all 128 rows of each, and
     * skips the other's ring positions. Before the main loop of tile i > 0
     * it waits on turn[c], which the other consumer arrives on once it has
     * waited on every "full" barrier of tile i - 1 (and issued its math).
     * That keeps the two main loops from interleaving (the tensor cores
     * serve one at a time; the other runs its epilogue) and guarantees the
     * mbarrier parity waits are never more than one phase ahead: when tile
     * i starts, every ring position before i * k_blocks has completed, so
     * the position this consumer waits for is the stage's next phase. The
     * turn barriers alternate strictly (c signals tile i - 1 done only
     * after its own turn for i - 1 came), so their parity is unambiguous. */
    uint32_t turn_phase = 0;
    int taken = 0; /* own tiles whose flags this consumer took from the helper */
    uint32_t auses = 0; /* addend_tma: this consumer's uses of its full barriers */
    for (long long i = consumer;; i += 2) {
        unit w;
        if constexpr (kSK) {
            if (!unit_at(p, blockIdx.x, gridDim.x, (int)i, &w)) break;
        } else {
            if (dynamic) {
                w.t = queue_get(queue, (int)i);
                if (w.t < 0) break;
            } else {
                long long tl = blockIdx.x + i * gridDim.x;
                if (tl >= tiles) break;
                w.t = (int)tl;
            }
            w.pos = (unsigned long long)i * (unsigned long long)p.k_blocks;
        }
        int tm, tn;
        tile_coords<kSplit>(p, w.t, &tm, &tn);
        CGM_TRACE(0);
        if (i > 0) {
            mbar_wait(turn_bar + 8 * consumer, turn_phase);
            turn_phase ^= 1;
        }
        CGM_TRACE(1);
        int stage;
        uint32_t phase;
        ring_at<kStages>(w.pos, &stage, &phase);
        int prev = 0;
        int nk = kSK ? w.kb1 - w.kb0 : p.k_blocks;
        for (int kb = 0; kb < nk; kb++) {
            mbar_wait(full_bar + 8 * stage, phase);
            uint32_t a0 = smem_a + stage * kStageBytesA;
            uint64_t desc_a0 = smem_desc_sw128(a0);        /* rows 0-63 */
            uint64_t desc_a1 = smem_desc_sw128(a0 + 64 * 128); /* rows 64-127 */
            uint64_t desc_b = smem_desc_sw128(smem_b + stage * C::bytes_b);
            fence_accumulators(d);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kTileK / 16; kk++) {
                uint32_t scale = (kb > 0 || kk > 0) ? 1u : 0u;
                wgmma_m64n128k16<kBf16, 0>(d, desc_a0 + 2 * kk, desc_b + 2 * kk, scale);
                wgmma_m64n128k16<kBf16, 64>(d, desc_a1 + 2 * kk, desc_b + 2 * kk, scale);
            }
            wgmma_commit();
            fence_accumulators(d);
            wgmma_wait<1>();
            fence_accumulators(d);
            if (kb > 0 && leader) mbar_arrive(empty_bar + 8 * prev);
            prev = stage;
            if (++stage == kStages) {
                stage = 0;
                phase ^= 1;
            }
        }
        /* Every full barrier of this tile has been waited on: the other
         * consumer may start its main loop. */
        if (leader) mbar_arrive(turn_bar + 8 * (consumer ^ 1));
        wgmma_wait<0>();
        fence_accumulators(d);
        CGM_TRACE(2);
        if (leader) mbar_arrive(empty_bar + 8 * prev);
        /* A shared stream-K tile: the second of its two units stores it. */
        if constexpr (kSK)
            if (w.sk >= 0 && !sk_fixup(p, d, w.sk, consumer)) continue;
        bool own = !kSplit || epilogue_rows(p, tm);
        if (kHelper && p.addend_tma && own) {
            uint32_t afull = afull_bar + 16 * consumer;
            if (p.addend_dtype == CGM_DTYPE_BF16)
                auses = add_addends_slots<__nv_bfloat16>(p, d, slots, afull, aempty_bar, auses);
            else if (p.addend_dtype == CGM_DTYPE_FP16)
                auses = add_addends_slots<__half>(p, d, slots, afull, aempty_bar, auses);
            else
                auses = add_addends_slots<float>(p, d, slots, afull, aempty_bar, auses);
        } else {
            if (kHelper && p.addend_waits && own) {
                /* taken is the same in every lane, but the compiler cannot
                 * tell (it is counted under a branch); without the
                 * broadcast the whole consumer loop, k loop included, left
                 * the uniform datapath (97 instead of 65 instructions per
                 * k block, 32 R2UR). */
                mbar_wait(ready_bar + 8 * consumer, (uint32_t)(__shfl_sync(0xFFFFFFFFu, taken++, 0) & 1));
                if (leader) mbar_arrive(taken_bar + 8 * consumer);
            } else if (p.addend_waits && own) {
                wait_addend_flags<kSplit>(p, (long long)tm * kTileM, kTileM, consumer, epoch);
            }
            if (p.naddends && own) add_addends_tile<OutT, kSplit>(p, d, tm * kTileM, tn * C::tile_n);
        }
#ifdef CGM_HGEMM_TRACE
        fence_accumulators(d); /* the addends are in before the stamp */
        CGM_TRACE(3);
        if (blockIdx.x == 0 && leader && (i >> 1) < kTraceTiles) trace_buf[consumer][i >> 1][5] = own;
#endif
        tile_out o = out_of<kSplit>(p, own);
        epilogue<OutT, 0, 16, false>(p, o, d, tm * kTileM, tn * C::tile_n);
        epilogue<OutT, 64, 16, false>(p, o, d, tm * kTileM + 64, tn * C::tile_n);
        if (kSplit && p.done_flags && !own) count_done<kPP>(p, tm, consumer, epoch);
        CGM_TRACE(4);
    }
}

/* ----------------------------------------------------------------- host */

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled through the runtime's driver entry point, so that
 * nothing links libcuda directly. */
encode_tiled_fn encode_tiled() {
    static encode_tiled_fn fn = []() -> encode_tiled_fn {
        void *ptr = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault,
                                             &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            return nullptr;
        return reinterpret_cast<encode_tiled_fn>(ptr);
    }();
    return fn;
}

/* Row-major [rows, k] matrix of dtype (bf16, fp16 or fp32; row stride ld
 * elements), box of 128 bytes (64 16-bit or 32 fp32 elements) x box_rows,
 * 128B swizzle, zero fill out of bounds (partial tiles in m, n and k): the
 * K-major operands, and the addends. */
bool encode_map(CUtensorMap *map, cgm_dtype dtype, const void *ptr, int64_t rows, int64_t k, int64_t ld,
                int box_rows) {
    encode_tiled_fn enc = encode_tiled();
    if (!enc) return false;
    cuuint64_t size = dtype == CGM_DTYPE_FP32 ? 4 : 2;
    cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * size};
    cuuint32_t box[2] = {(cuuint32_t)(128 / size), (cuuint32_t)box_rows};
    cuuint32_t element_strides[2] = {1, 1};
    CUtensorMapDataType type = dtype == CGM_DTYPE_FP32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                               : dtype == CGM_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    CUresult r = enc(map, type, 2,
                     const_cast<void *>(ptr), dims, strides, box, element_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS;
}

/* A few recently encoded maps per host thread (no lock): the fused
 * algorithms call the GEMM again and again on the same buffers. A map only
 * holds the address, the shape, the strides and the box, so a hit is valid
 * whatever happened to the memory in between. */
struct map_key {
    const void *ptr;
    int64_t rows, k, ld;
    int box_rows;
    cgm_dtype dtype;
};
struct map_entry {
    map_key key;
    bool used;
    CUtensorMap map;
};
constexpr int kMapCache = 16; /* X, x_own, W and up to 7 addends per call */
thread_local map_entry map_cache[kMapCache];
thread_local int map_victim;

bool make_map(CUtensorMap *map, cgm_dtype dtype, const void *ptr, int64_t rows, int64_t k, int64_t ld,
              int box_rows) {
    map_key key = {ptr, rows, k, ld, box_rows, dtype};
    for (int i = 0; i < kMapCache; i++) {
        const map_entry &e = map_cache[i];
        if (e.used && e.key.ptr == ptr && e.key.rows == rows && e.key.k == k && e.key.ld == ld &&
            e.key.box_rows == box_rows && e.key.dtype == dtype) {
            *map = e.map;
            return true;
        }
    }
    if (!encode_map(map, dtype, ptr, rows, k, ld, box_rows)) return false;
    map_entry &e = map_cache[map_victim];
    map_victim = (map_victim + 1) % kMapCache;
    e.key = key;
    e.map = *map;
    e.used = true;
    return true;
}

/* cudaFuncSetAttribute once per device and instantiation (it is per
 * function and device; setting it again is harmless, so a race between
 * host threads costs nothing but a redundant call). */
constexpr int kMaxDevices = 64;

template <bool kBf16, typename OutT, bool kPP, bool kSplit, bool kAddTma, bool kSK>
cudaError_t launch(int dev, const CUtensorMap &mx, const CUtensorMap &mx_own, const CUtensorMap &mw,
                   const addend_maps &am, const hgemm_params &p, int grid, cudaStream_t stream) {
    static volatile bool attribute_set[kMaxDevices];
    auto kernel = hgemm_kernel<kBf16, OutT, kPP, kSplit, kAddTma, kSK>;
    constexpr int smem = smem_of<kPP, kSplit || kAddTma>::bytes;
    if (dev < 0 || dev >= kMaxDevices || !attribute_set[dev]) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        if (dev >= 0 && dev < kMaxDevices) attribute_set[dev] = true;
    }
    kernel<<<grid, kThreads, smem, stream>>>(mx, mx_own, mw, am, p);
    return cudaGetLastError();
}

template <bool kBf16, bool kPP, bool kSplit, bool kAddTma, bool kSK = false>
cudaError_t launch_out(cgm_dtype out, int dev, const CUtensorMap &mx, const CUtensorMap &mx_own,
                       const CUtensorMap &mw, const addend_maps &am, const hgemm_params &p, int grid,
                       cudaStream_t stream) {
    switch (out) {
    case CGM_DTYPE_BF16: return launch<kBf16, __nv_bfloat16, kPP, kSplit, kAddTma, kSK>(dev, mx, mx_own, mw, am, p, grid, stream);
    case CGM_DTYPE_FP16: return launch<kBf16, __half, kPP, kSplit, kAddTma, kSK>(dev, mx, mx_own, mw, am, p, grid, stream);
    default: return launch<kBf16, float, kPP, kSplit, kAddTma, kSK>(dev, mx, mx_own, mw, am, p, grid, stream);
    }
}

template <bool kSplit>
cudaError_t launch_variant(bool bf16, bool pp, cgm_dtype out, int dev, const CUtensorMap &mx,
                           const CUtensorMap &mx_own, const CUtensorMap &mw, const addend_maps &am,
                           const hgemm_params &p, int grid, cudaStream_t stream) {
    /* The plain ping-pong kernel's addend form (kAddTma) when the helper
     * loads the addends; the split kernel always has the helper. */
    if (pp && !kSplit && p.addend_tma)
        return bf16 ? launch_out<true, true, false, true>(out, dev, mx, mx_own, mw, am, p, grid, stream)
                    : launch_out<false, true, false, true>(out, dev, mx, mx_own, mw, am, p, grid, stream);
    /* The stream-K form when the call cuts its last wave (never with
     * addends or split output: sk_tiles_for). */
    if (!kSplit && p.sk_tiles > 0) {
        if (pp)
            return bf16 ? launch_out<true, true, false, false, true>(out, dev, mx, mx_own, mw, am, p, grid, stream)
                        : launch_out<false, true, false, false, true>(out, dev, mx, mx_own, mw, am, p, grid, stream);
        return bf16 ? launch_out<true, false, false, false, true>(out, dev, mx, mx_own, mw, am, p, grid, stream)
                    : launch_out<false, false, false, false, true>(out, dev, mx, mx_own, mw, am, p, grid, stream);
    }
    if (pp)
        return bf16 ? launch_out<true, true, kSplit, false>(out, dev, mx, mx_own, mw, am, p, grid, stream)
                    : launch_out<false, true, kSplit, false>(out, dev, mx, mx_own, mw, am, p, grid, stream);
    return bf16 ? launch_out<true, false, kSplit, false>(out, dev, mx, mx_own, mw, am, p, grid, stream)
                : launch_out<false, false, kSplit, false>(out, dev, mx, mx_own, mw, am, p, grid, stream);
}

/* The variant CGM_HGEMM_AUTO runs: ping-pong when k <= 2048, or when
 * k <= 4096 and (n >= 16384 or (n >= 4096 and (m * n >= 2^25 or m > 4096)));
 * cooperative otherwise.
 * Ping-pong hides the
 * epilogue behind the other consumer's main loop, which matters most when
 * the main loop per tile is short (small k); the cooperative 128x256 tile
 * loads 3/4 of ping-pong's bytes per flop, which wins once the main loop
 * dominates. Fitted to the second H200 bench (2026-11-30, bf16, r =
 * cuBLASLt time / ours, the faster marked *; docs/HOPPER_GEMM.md):
 *
 *       m      n     k   coop     pp
 *   16384   2048  8192  0.975* 0.865
 *    8192   4096  4096  0.958* 0.949
 *   16384   8192  2048  0.926  1.084*
 *    4096   4096  4096  0.960* 0.866
 *    8192   8192  8192  1.003* 0.954
 *    2048   8192  8192  0.981* 0.938
 *    8192   2048  4096  0.963* 0.868
 *    4096  16384  4096  0.983  1.038*
 *
 * The first rule (without the m * n branch) picked the faster variant on
 * all eight rows. In four later runs (11:13 and 19:12 UTC, twice each
 * with and without an unrelated change) ping-pong was the faster on
 * 8192x4096x4096 every time (0.971-0.983 against 0.944-0.954), and
 * cooperative stayed the steadier on 4096x4096x4096 (ping-pong 0.88 or
 * 0.96 from one run to the next) and the faster on 8192x2048x4096: hence
 * ping-pong for k <= 4096 once the output holds 2^25 elements (about 16
 * waves of 128x128 tiles on 132 SMs) and n >= 4096: with n = 2048
 * cooperative won every run (8192x2048x4096), and the fused AG of
 * 32768x4096x4096 (its kernel 32768x2048x4096) ran 821 us in the 19:26
 * sweep, after this branch had switched it to ping-pong, against 704 us
 * in the sweeps before. */
/* Checked again after the cooperative epilogue's branch-free transpose
 * (eighteenth session, docs/PERFORMANCE.md 4q): ping-pong still the faster
 * or as fast on its three bench rows (8192x4096x4096 within 1 % either way,
 * 16384x8192x2048 by 9 %, 4096x16384x4096 by 3 %), cooperative the faster
 * on the other five. */
/* The m > 4096 branch came in the twentieth session, with every k loop in
 * uniform registers (docs/PERFORMANCE.md 4s, two skbench and two bench
 * runs, us): with k = 4096 and n = 4096 ping-pong was as fast or faster
 * from m = 4352 up (4608: 198 against cooperative 216-226, whose last wave
 * is 36 % full; 4352: 195 against 207-223, or 191-200 with the cut
 * cooperative kernel; 5120 and 7168 by 2-3 %; 6144 within 2 %), and with
 * k = 3072 too (6144x4096x3072 by 4 %). Below it cooperative stays:
 * 3072x4096x4096 by 8 %, 4096x4096x4096 a tie (cooperative the steadier in
 * earlier runs). With n >= 8192 under 2^25 (2560x8192x4096,
 * 3072x8192x4096, 2048x12288x4096) the variants tied or cooperative won
 * (2560x8192: 206-227 against ping-pong 223-230), so there it stays too. */
bool auto_pingpong(int64_t m, int64_t n, int64_t k) {
    return k <= 2048 ||
           (k <= 4096 && (n >= 16384 || (n >= 4096 && (m * n >= ((int64_t)1 << 25) || m > 4096))));
}

/* The stream-K tail's plan for a call (cgm_hgemm_args.stream_k): how many
 * of the last tiles to cut along k over the grid, 0 for none. Only when
 * the tiles fill at least one wave and leave the last one partial: then
 * the last partial wave plus one full wave (sk = tiles % grid + grid
 * tiles) are cut, so that each CTA's range holds between k_blocks and
 * 2 k_blocks iterations and no tile is shared by more than two CTAs. The
 * whole-tile schedule lasts ceil(tiles / grid) tiles; the cut one
 * tiles / grid plus the fix-ups (one 64 KiB partial stored and read per
 * shared tile and consumer). CGM_HGEMM_SK_AUTO cuts only in the
 * cooperative kernel, when its last wave is at most kSkAutoFill percent
 * full and k has at least kSkAutoKBlocks k blocks: in the 2026-12-01 runs
 * (docs/PERFORMANCE.md 4p) the cut ping-pong kernel was 2-18 % slower on
 * every shape, and the cut cooperative one faster only with a last wave
 * up to about half full (4352x4096x4096, 12 % full: 10 % faster), slower
 * above (up to 42 % on 2048x8192x8192, where the CTAs' different k
 * offsets spread the loads over all of X and W). */
constexpr int kSkAutoFill = 40;
constexpr int kSkAutoKBlocks = 8;
constexpr size_t kSkSlotBytes = 128 * 128 * 4; /* one warpgroup's 128 fp32 per thread */

long long sk_tiles_for(const cgm_hgemm_args *a, bool pp, long long tiles, int grid, int k_blocks) {
    if (a->stream_k == CGM_HGEMM_SK_OFF || a->naddends > 0 || a->y_own || a->row_flags || a->x_own || k_blocks < 2)
        return 0;
    long long full = tiles / grid, rest = tiles % grid;
    if (full < 1 || rest == 0 || (rest + grid) * (long long)k_blocks >= INT32_MAX) return 0;
    if (a->stream_k == CGM_HGEMM_SK_AUTO &&
        (pp || rest * 100 > (long long)grid * kSkAutoFill || k_blocks < kSkAutoKBlocks))
        return 0;
    return rest + grid;
}

/* p's stream-K fields: sk_tiles (0: none) of `tiles` cut over `grid`
 * CTAs, with the workspace's counters and slots. */
void sk_setup(hgemm_params *p, long long sk_tiles, long long tiles, int grid, void *workspace) {
    p->sk_tiles = (int)sk_tiles;
    p->dp_tiles = (int)(tiles - sk_tiles);
    p->sk_q = (int)(sk_tiles * p->k_blocks / grid);
    p->sk_r = (int)(sk_tiles * p->k_blocks % grid);
    p->sk_cells = sk_tiles ? static_cast<unsigned int *>(workspace) : nullptr;
    p->sk_slots = sk_tiles ? reinterpret_cast<float4 *>(static_cast<char *>(workspace) + CGM_HGEMM_WORKSPACE_COUNTERS)
                           : nullptr;
}

size_t sk_bytes(long long sk_tiles, bool pp) {
    long long cells = sk_tiles * (pp ? 1 : 2);
    if (cells * 4 > CGM_HGEMM_WORKSPACE_COUNTERS) return 0; /* a grid of 4096 CTAs or more: no cut (sched_of's c r < 2^26 too) */
    return sk_tiles ? CGM_HGEMM_WORKSPACE_COUNTERS + (size_t)cells * kSkSlotBytes : 0;
}

/* Whether the current device is sm_90, its id and SM count; cached per
 * device (attribute queries are cheap, but this runs on every call). */
bool is_sm90(int *dev_out, int *sm_count) {
    static volatile int known[kMaxDevices]; /* 0 unknown, 1 sm_90, 2 other */
    static volatile int sms_of[kMaxDevices];
    int dev = 0, major = 0, minor = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (dev_out) *dev_out = dev;
    if (dev >= 0 && dev < kMaxDevices && known[dev]) {
        if (sm_count) *sm_count = sms_of[dev];
        return known[dev] == 1;
    }
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return false;
    if (sm_count) *sm_count = sms;
    bool yes = major == 9 && minor == 0;
    if (dev >= 0 && dev < kMaxDevices) {
        sms_of[dev] = sms;
        known[dev] = yes ? 1 : 2;
    }
    return yes;
}

/* The argument checks, without the device check. */
const char *args_problem(const cgm_hgemm_args *a) {
    const int64_t lim = INT32_MAX;
    if (!a) return "args is NULL";
    if (a->in_dtype != CGM_DTYPE_BF16 && a->in_dtype != CGM_DTYPE_FP16)
        return "inputs must be bf16 or fp16";
    if (a->out_dtype != CGM_DTYPE_BF16 && a->out_dtype != CGM_DTYPE_FP16 &&
        a->out_dtype != CGM_DTYPE_FP32)
        return "output must be bf16, fp16 or fp32";
    if (a->m < 0 || a->n < 0 || a->k < 1) return "needs m >= 0, n >= 0, k >= 1";
    if (a->m > lim || a->n > lim || a->k > lim || a->ldy > lim)
        return "m, n, k and ldy must be below 2^31";
    if (a->ldx < a->k || a->ldw < a->k || a->ldy < a->n) return "needs ldx >= k, ldw >= k, ldy >= n";
    if (!a->x || !a->w || (!a->y && a->m > 0 && a->n > 0)) return "x, w and y must not be NULL";
    if ((uintptr_t)a->x % 16 || (uintptr_t)a->w % 16)
        return "TMA needs x and w 16-byte aligned";
    if (a->ldx % 8 || a->ldw % 8)
        return "TMA needs row strides that are multiples of 16 bytes: ldx and ldw multiples of 8";
    if (a->variant < CGM_HGEMM_AUTO || a->variant > CGM_HGEMM_PINGPONG)
        return "variant must be CGM_HGEMM_AUTO, CGM_HGEMM_COOPERATIVE or CGM_HGEMM_PINGPONG";
    if (a->stream_k < CGM_HGEMM_SK_AUTO || a->stream_k > CGM_HGEMM_SK_ON)
        return "stream_k must be CGM_HGEMM_SK_AUTO, CGM_HGEMM_SK_OFF or CGM_HGEMM_SK_ON";
    if ((uintptr_t)a->workspace % 16) return "the workspace must be 16-byte aligned";
    if ((uintptr_t)a->tile_counter % 4) return "tile_counter must be 4-byte aligned";
    if (((a->m + kTileM - 1) / kTileM) * ((a->n + CGM_HGEMM_TILE_N_PINGPONG - 1) / CGM_HGEMM_TILE_N_PINGPONG) > lim)
        return "too many output tiles (more than 2^31)";
    bool addend_flags = false;
    if (a->naddends < 0 || a->naddends > CGM_HGEMM_MAX_ADDENDS)
        return "naddends must be 0..CGM_HGEMM_MAX_ADDENDS";
    for (int i = 0; i < a->naddends; i++) {
        if (!a->addend[i]) return "addend[i] must not be NULL for i < naddends";
        size_t es = a->addend_dtype == CGM_DTYPE_FP32 ? 4 : 2;
        if ((uintptr_t)a->addend[i] % (2 * es)) return "addends must be aligned to two elements";
        if (a->addend_flags[i]) addend_flags = true;
    }
    if (a->naddends > 0) {
        if (a->addend_dtype != CGM_DTYPE_FP32 && a->addend_dtype != CGM_DTYPE_BF16 &&
            a->addend_dtype != CGM_DTYPE_FP16)
            return "addend_dtype must be fp32, bf16 or fp16";
        if (a->addend_ld < a->n || a->addend_ld % 2 || a->addend_ld > lim)
            return "addend_ld must be even, >= n and below 2^31";
    }
    if ((a->row_flags || addend_flags) &&
        (a->rows_per_flag < 1 || (!a->timeout_out && !a->abort_word)))
        return "flags need rows_per_flag >= 1 and timeout_out or abort_word";
    if (a->notice_word && !a->abort_word) return "notice_word needs abort_word";
    if (a->row_flags && a->flag_shard_rows < 0) return "flag_shard_rows must be >= 0";
    if (a->y_own) {
        if (a->ldy_own < a->n || a->ldy_own > lim) return "needs n <= ldy_own < 2^31";
        if (a->y_own_row0 < 0 || a->y_own_rows < 1 || a->y_own_row0 + a->y_own_rows > a->m)
            return "the y_own rows must be a non-empty range of [0, m)";
        if (a->y_own_row0 % kTileM || ((a->y_own_row0 + a->y_own_rows) % kTileM && a->y_own_row0 + a->y_own_rows != a->m))
            return "the y_own rows must be whole 128-row tiles (start and end multiples of 128, or the end m)";
    }
    if (a->done_flags) {
        if (!a->done_count) return "done_flags need done_count";
        if (a->done_shard_rows < kTileM || a->done_shard_rows % kTileM || a->done_rows_per_piece < kTileM ||
            a->done_rows_per_piece % kTileM || a->done_pieces_per_shard < 1 ||
            (a->done_shard_rows + a->done_rows_per_piece - 1) / a->done_rows_per_piece > a->done_pieces_per_shard)
            return "done_shard_rows and done_rows_per_piece must be multiples of 128, with at most "
                   "done_pieces_per_shard pieces per shard";
        if (!a->flag_epoch_ptr && a->flag_epoch == 0) return "done_flags need an epoch (flag_epoch or flag_epoch_ptr)";
    }
    if (a->x_own) {
        if ((uintptr_t)a->x_own % 16 || a->ldx_own % 8 || a->ldx_own < a->k)
            return "TMA needs x_own 16-byte aligned and ldx_own a multiple of 8, >= k";
        if (a->own_row0 < 0 || a->own_rows < 0 || a->own_row0 + a->own_rows > a->m)
            return "the own rows must lie in [0, m)";
    }
    return nullptr;
}

} // namespace

extern "C" int cgm_hgemm_supported(const cgm_hgemm_args *args, const char **reason) {
    const char *why = args_problem(args);
    if (!why && !is_sm90(nullptr, nullptr)) why = "needs an sm_90 (Hopper) device";
    if (!why && !encode_tiled()) why = "the driver has no cuTensorMapEncodeTiled";
    if (reason) *reason = why;
    return why == nullptr;
}

/* The persistent grid of a call: min(SMs or sm_count, tiles). */
static int grid_for(const cgm_hgemm_args *a, int sms, long long tiles) {
    int grid = a->sm_count > 0 && a->sm_count < sms ? a->sm_count : sms;
    return tiles < grid ? (int)tiles : grid;
}

static long long tiles_of(const cgm_hgemm_args *a, bool pp) {
    int tile_n = pp ? cfg<true>::tile_n : cfg<false>::tile_n;
    return ((a->m + kTileM - 1) / kTileM) * ((a->n + tile_n - 1) / tile_n);
}

extern "C" size_t cgm_hgemm_workspace_bytes(const cgm_hgemm_args *a) {
    int sms = 0;
    if (args_problem(a) || !is_sm90(nullptr, &sms) || a->m == 0 || a->n == 0) return 0;
    bool pp = cgm_hgemm_variant_for(a) == CGM_HGEMM_PINGPONG;
    long long tiles = tiles_of(a, pp);
    int k_blocks = (int)((a->k + kTileK - 1) / kTileK);
    return sk_bytes(sk_tiles_for(a, pp, tiles, grid_for(a, sms, tiles), k_blocks), pp);
}

extern "C" size_t cgm_hgemm_workspace_max(int sm_count) {
    return sm_count > 0 ? sk_bytes(2ll * sm_count - 1, false) : 0;
}

/* Walks unit_at for every CTA of the cut schedule (CGM_HGEMM_SK_ON) and
 * checks what the kernel relies on; see hopper_gemm.h. */
extern "C" long long cgm_hgemm_sk_schedule_check(int64_t m, int64_t n, int64_t k, int variant, int grid, char *why,
                                                 size_t len) {
    auto fail = [&](const char *what, long long x, long long y) {
        if (why && len) snprintf(why, len, "%lldx%lldx%lld %s grid %d: %s (%lld, %lld)", (long long)m, (long long)n,
                                 (long long)k, variant == CGM_HGEMM_PINGPONG ? "ping-pong" : "cooperative", grid,
                                 what, x, y);
        return -1ll;
    };
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.m = m, a.n = n, a.k = k, a.variant = variant, a.stream_k = CGM_HGEMM_SK_ON;
    bool pp = variant == CGM_HGEMM_PINGPONG;
    long long tiles = tiles_of(&a, pp);
    if (grid < 1 || tiles < 1 || tiles > INT32_MAX) return fail("needs grid >= 1 and 1 .. 2^31 tiles", grid, tiles);
    grid = tiles < grid ? (int)tiles : grid;
    hgemm_params p;
    memset(&p, 0, sizeof p);
    p.tiles_m = (int)((m + kTileM - 1) / kTileM);
    p.tiles_n = (int)(tiles / p.tiles_m);
    p.k_blocks = (int)((k + kTileK - 1) / kTileK);
    long long skt = sk_tiles_for(&a, pp, tiles, grid, p.k_blocks);
    if (skt > 0 && !sk_bytes(skt, pp)) skt = 0; /* cgm_hgemm would not cut */
    static char dummy[16];
    sk_setup(&p, skt, tiles, grid, dummy);
    const int K = p.k_blocks;
    /* per tile: units seen, k blocks covered, whether one starts at 0 and one ends at K */
    int *count = (int *)calloc((size_t)tiles, sizeof(int));
    long long *covered = (long long *)calloc((size_t)tiles, sizeof(long long));
    unsigned char *ends = (unsigned char *)calloc((size_t)tiles, 1);
    if (!count || !covered || !ends) {
        free(count), free(covered), free(ends);
        return fail("out of host memory", tiles, 0);
    }
    long long result = skt, least = -1, most = -1;
    for (int c = 0; c < grid && result >= 0; c++) {
        unit w;
        unsigned long long pos = 0;
        long long work = 0;
        int u = 0;
        for (; unit_at(p, c, grid, u, &w); u++) {
            if (w.t < 0 || w.t >= tiles || w.kb0 < 0 || w.kb1 > K || w.kb0 >= w.kb1) {
                result = fail("a unit outside the tiles or with an empty k range", w.t, w.kb0);
                break;
            }
            if (w.pos != pos) { /* ring positions: the prefix sum of the CTA's k blocks */
                result = fail("a unit's ring position is not the sum of the units before it", (long long)w.pos,
                              (long long)pos);
                break;
            }
            bool whole = w.kb0 == 0 && w.kb1 == K;
            if (whole != (w.sk < 0) || (w.sk >= 0 && (w.t != p.dp_tiles + w.sk || w.sk >= skt))) {
                result = fail("a unit's shared-tile index does not match its k range", w.t, w.sk);
                break;
            }
            if (w.t < p.dp_tiles && w.t != c + u * grid) {
                result = fail("a whole tile before the cut region is not the whole-tile loop's", w.t, u);
                break;
            }
            count[w.t]++;
            covered[w.t] += w.kb1 - w.kb0;
            ends[w.t] |= (w.kb0 == 0 ? 1 : 0) | (w.kb1 == K ? 2 : 0);
            pos += (unsigned long long)(w.kb1 - w.kb0);
            work += w.kb1 - w.kb0;
        }
        const int counted = units_of(p, c, grid);
        if (result >= 0 && counted != u)
            result = fail("units_of (the producer's loop count) differs from the units unit_at gives", counted, u);
        least = least < 0 || work < least ? work : least;
        most = work > most ? work : most;
    }
    for (long long t = 0; t < tiles && result >= 0; t++) {
        bool cut_tile = t >= p.dp_tiles;
        if (covered[t] != K || ends[t] != 3)
            result = fail("a tile's units do not cover its k blocks exactly once", t, covered[t]);
        else if (count[t] > (cut_tile ? 2 : 1))
            result = fail("a tile is shared by more units than the fix-up pairs", t, count[t]);
    }
    /* cut: every CTA does the same work to within one k block */
    if (result >= 0 && skt > 0 && most - least > 1) result = fail("the CTAs' work differs by more than a k block", least, most);
    free(count), free(covered), free(ends);
    return result;
}

/* fastdiv against the division, host only; see hopper_gemm.h. */
extern "C" long long cgm_hgemm_fastdiv_check(char *why, size_t len) {
    long long checked = 0;
    auto one = [&](int d, int n) {
        unsigned int mul;
        int shr;
        fastdiv_init(d, &mul, &shr);
        checked++;
        if (fastdiv(n, mul, shr) == n / d) return true;
        if (why && len) snprintf(why, len, "fastdiv(%d, %d) = %d, expected %d", n, d, fastdiv(n, mul, shr), n / d);
        return false;
    };
    const int big = 0x7fffffff;
    for (long long d = 1; d <= big; d = d < 4200 ? d + 1 : d * 3 / 2 + 7) {
        const long long ns[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 127 * d + 5, big / 2, big - 1, big,
                                (big / d) * d, (big / d) * d - 1, (big / d - 1) * d};
        for (long long n : ns)
            if (n >= 0 && n <= big && !one((int)d, (int)n)) return -1;
        for (long long n = 0; n < 300000; n += 997)
            if (!one((int)d, (int)n)) return -1;
    }
    for (int d : {big, big - 1, 1 << 30, (1 << 30) + 1, 3, 7, 128, 2048, 6144})
        for (long long n = big; n > big - 5000; n--)
            if (!one(d, (int)n)) return -1;
    /* tile_coords (with coords_init's divisors) against its division form,
     * the split kernels' group_m and the others' kGroupM, every tile of
     * small grids and the first and last tiles of large ones */
    auto coords = [&](int tiles_m, int tiles_n, int group_m, long long t) {
        hgemm_params p;
        memset(&p, 0, sizeof p);
        p.tiles_m = tiles_m, p.tiles_n = tiles_n, p.group_m = group_m;
        coords_init(&p);
        int tm, tn;
        if (group_m == kGroupM) tile_coords<false>(p, (int)t, &tm, &tn);
        else tile_coords<true>(p, (int)t, &tm, &tn);
        long long span = (long long)group_m * tiles_n, group = t / span, first = group * group_m;
        long long size = tiles_m - first < group_m ? tiles_m - first : group_m, r = t - group * span;
        checked++;
        if (tm == first + r % size && tn == r / size) return true;
        if (why && len)
            snprintf(why, len, "tile_coords(%lld) of %d x %d tiles, group_m %d = (%d, %d), expected (%lld, %lld)", t,
                     tiles_m, tiles_n, group_m, tm, tn, first + r % size, r / size);
        return false;
    };
    for (int g : {1, 2, 3, 5, 8, kGroupM})
        for (int tm_ = 1; tm_ <= 70; tm_ += tm_ < 20 ? 1 : 7)
            for (int tn_ : {1, 2, 3, 7, 32, 33})
                for (long long t = 0; t < (long long)tm_ * tn_; t++)
                    if (!coords(tm_, tn_, g, t)) return -1;
    for (int g : {3, kGroupM})
        for (long long tm_ : {16777215ll, 65537ll, 131ll})
            for (long long tn_ : {127ll, 1ll, 16383ll}) {
                long long tiles = tm_ * tn_;
                if (tiles > big) continue;
                for (long long t : {0ll, 1ll, tiles / 2, tiles - tn_ * g - 1, tiles - 2, tiles - 1})
                    if (t >= 0 && t < tiles && !coords((int)tm_, (int)tn_, g, t)) return -1;
            }
    return checked;
}

extern "C" int cgm_hgemm_variant_for(const cgm_hgemm_args *a) {
    if (a->variant == CGM_HGEMM_COOPERATIVE || a->variant == CGM_HGEMM_PINGPONG) return a->variant;
    return auto_pingpong(a->m, a->n, a->k) ? CGM_HGEMM_PINGPONG : CGM_HGEMM_COOPERATIVE;
}

/* The kernels the comms launch (beside spinning flag kernels, hence the
 * preload). Not the stream-K ones: they need a workspace, which no comm
 * passes, and load at their first standalone launch. */
template <bool kBf16, typename OutT> cudaError_t preload_out() {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, hgemm_kernel<kBf16, OutT, true, false, false, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kBf16, OutT, false, false, false, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kBf16, OutT, true, true, false, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kBf16, OutT, true, false, true, false>);
    return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, hgemm_kernel<kBf16, OutT, false, true, false, false>);
}

template <bool kBf16> cudaError_t preload_in() {
    cudaError_t e = preload_out<kBf16, float>();
    if (e == cudaSuccess) e = preload_out<kBf16, __nv_bfloat16>();
    return e != cudaSuccess ? e : preload_out<kBf16, __half>();
}

extern "C" int cgm_hgemm_trace_read(unsigned long long *out, int max_tiles) {
#ifdef CGM_HGEMM_TRACE
    int n = max_tiles < kTraceTiles ? max_tiles : kTraceTiles;
    static unsigned long long host[2][kTraceTiles][6];
    if (cudaMemcpyFromSymbol(host, trace_buf, sizeof host) != cudaSuccess) return -1;
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < n; t++)
            for (int f = 0; f < 6; f++) out[((size_t)c * n + t) * 6 + f] = host[c][t][f];
    static unsigned long long zero[2][kTraceTiles][6];
    if (cudaMemcpyToSymbol(trace_buf, zero, sizeof zero) != cudaSuccess) return -1;
    return n;
#else
    (void)out, (void)max_tiles;
    return 0;
#endif
}

extern "C" int cgm_hgemm_trace_ctas(unsigned long long *out, int max_ctas) {
#ifdef CGM_HGEMM_TRACE
    int n = max_ctas < kTraceCtas ? max_ctas : kTraceCtas;
    static unsigned long long host[kTraceCtas][4];
    if (cudaMemcpyFromSymbol(host, trace_cta, sizeof host) != cudaSuccess) return -1;
    memcpy(out, host, (size_t)n * sizeof host[0]);
    static unsigned long long zero[kTraceCtas][4];
    if (cudaMemcpyToSymbol(trace_cta, zero, sizeof zero) != cudaSuccess) return -1;
    return n;
#else
    (void)out, (void)max_ctas;
    return 0;
#endif
}

/* cudaFuncGetAttributes needs the loaded function, so it loads it. */
extern "C" cudaError_t cgm_hgemm_preload(void) {
    if (!is_sm90(nullptr, nullptr)) return cudaSuccess;
    cudaError_t e = preload_in<true>();
    return e != cudaSuccess ? e : preload_in<false>();
}

extern "C" cudaError_t cgm_hgemm(const cgm_hgemm_args *a, cudaStream_t stream) {
    if (args_problem(a)) return cudaErrorInvalidValue;
    int sms = 0, dev = 0;
    if (!is_sm90(&dev, &sms)) return cudaErrorNotSupported;
    if (a->m == 0 || a->n == 0) return cudaSuccess;
    bool bf16 = a->in_dtype == CGM_DTYPE_BF16;
    bool pp = cgm_hgemm_variant_for(a) == CGM_HGEMM_PINGPONG;
    int tile_n = pp ? cfg<true>::tile_n : cfg<false>::tile_n;
    CUtensorMap mx, mw, mx_own;
    if (!make_map(&mx, a->in_dtype, a->x, a->m, a->k, a->ldx, kTileM) ||
        !make_map(&mw, a->in_dtype, a->w, a->n, a->k, a->ldw, tile_n))
        return cudaErrorInvalidValue;
    hgemm_params p;
    /* The m tiles wholly inside the own rows (the last tile of X counts
     * when the own rows end X: both maps zero-fill past the end). */
    p.own_row0 = a->own_row0;
    p.own_tile0 = p.own_tile1 = 0;
    mx_own = mx;
    if (a->x_own && a->own_rows > 0) {
        int64_t t0 = 0, t1 = 0; /* the same tiles p2p_fused.c does not copy */
        plan_fused_inside_tiles(a->m, a->own_row0, a->own_rows, kTileM, &t0, &t1);
        p.own_tile0 = (int)t0;
        p.own_tile1 = (int)t1;
        if (p.own_tile1 > p.own_tile0 &&
            !make_map(&mx_own, a->in_dtype, a->x_own, a->own_rows, a->k, a->ldx_own, kTileM))
            return cudaErrorInvalidValue;
    }
    p.m = (int)a->m;
    p.n = (int)a->n;
    p.k = (int)a->k;
    p.tiles_m = (int)((a->m + kTileM - 1) / kTileM);
    /* With done flags, a group never mixes two shards: in the fused
     * GEMM+RS the epilogue rows (last in m_block_order) wait for data that
     * the other shards' tiles produce, so every CTA must reach all of
     * those tiles before any epilogue-row tile. Nor two pieces, so that a
     * piece's tiles all run before the next piece's and its done flag
     * rises as early as it can (a group of 16 m tiles over two pieces
     * finished both at its end; docs/PERFORMANCE.md 4i). */
    p.group_m = kGroupM;
    if (a->done_flags && a->y_own) /* only the split kernels (kSplit) count done pieces */
        p.group_m = plan_fused_group_m(a->done_shard_rows / kTileM, a->done_rows_per_piece / kTileM, kGroupM);
    p.tiles_n = (int)((a->n + tile_n - 1) / tile_n);
    coords_init(&p);
    p.k_blocks = (int)((a->k + kTileK - 1) / kTileK);
    p.y = a->y;
    p.ldy = a->ldy;
    p.bias = a->bias;
    p.accumulate = a->accumulate != 0;
    size_t out_size = a->out_dtype == CGM_DTYPE_FP32 ? 4 : 2;
    p.vector_store = a->ldy % 2 == 0 && (uintptr_t)a->y % (2 * out_size) == 0;
    p.vector16 = out_size == 2 && a->ldy % 8 == 0 && (uintptr_t)a->y % 16 == 0;
    p.y_own = a->y;
    p.ldy_own = a->ldy;
    p.yown_tile0 = 0;
    p.yown_tile1 = p.tiles_m;
    p.addend_row0 = 0;
    if (a->y_own) {
        /* Row g of Y at y_own + (g - y_own_row0) * ldy_own: the base moved
         * back by y_own_row0 rows (address arithmetic only). */
        p.y_own = (void *)((uintptr_t)a->y_own - (uintptr_t)(a->y_own_row0 * a->ldy_own * (int64_t)out_size));
        p.ldy_own = a->ldy_own;
        p.yown_tile0 = (int)(a->y_own_row0 / kTileM);
        p.yown_tile1 = (int)((a->y_own_row0 + a->y_own_rows + kTileM - 1) / kTileM);
        p.addend_row0 = a->y_own_row0;
        p.vector_store = p.vector_store && a->ldy_own % 2 == 0 && (uintptr_t)a->y_own % (2 * out_size) == 0;
        p.vector16 = p.vector16 && a->ldy_own % 8 == 0 && (uintptr_t)a->y_own % 16 == 0;
    }
    p.done_count = a->done_count;
    p.done_flags = a->done_flags;
    p.done_shard_rows = a->done_shard_rows;
    p.done_rows_per_piece = a->done_rows_per_piece;
    p.done_pieces_per_shard = a->done_pieces_per_shard;
    p.row_flags = a->row_flags;
    p.rows_per_flag = a->rows_per_flag;
    p.flag_shard_rows = a->flag_shard_rows;
    p.flag_shard_stride = a->flag_shard_stride;
    p.flag_rpf = (int)(a->rows_per_flag < 1 ? 1 : a->rows_per_flag < a->m ? a->rows_per_flag : a->m);
    p.flag_sr = (int)(a->flag_shard_rows > 0 && a->flag_shard_rows < a->m ? a->flag_shard_rows : a->m);
    p.flag_per_shard = (p.flag_sr - 1) / p.flag_rpf + 1;
    fastdiv_init(p.flag_rpf, &p.flag_rpf_mul, &p.flag_rpf_shr);
    fastdiv_init(p.flag_sr, &p.flag_sr_mul, &p.flag_sr_shr);
    p.flag_epoch = a->flag_epoch;
    p.flag_epoch_ptr = a->flag_epoch_ptr;
    p.naddends = a->naddends;
    p.addend_waits = 0;
    p.addend_dtype = (int)a->addend_dtype;
    p.addend_ld = a->addend_ld;
    for (int i = 0; i < CGM_HGEMM_MAX_ADDENDS; i++) {
        bool on = i < a->naddends;
        p.addend[i] = on ? a->addend[i] : nullptr;
        p.addend_flags[i] = on ? a->addend_flags[i] : nullptr;
        p.report_addend_peer[i] = a->report_addend_peer[i];
        if (on && a->addend_flags[i]) p.addend_waits = 1;
    }
    /* The ping-pong kernels' helper loads the addends by TMA when TMA can
     * read them: 16-byte aligned, rows a multiple of 16 bytes apart;
     * otherwise the consumers load them (add_addends_tile). Parts of 64
     * rows (16-bit) or 32 columns (fp32): the map's box. */
    addend_maps am;
    memset(&am, 0, sizeof am);
    size_t addend_size = a->addend_dtype == CGM_DTYPE_FP32 ? 4 : 2;
    p.addend_tma = pp && a->naddends > 0 && (a->addend_ld * (int64_t)addend_size) % 16 == 0;
    for (int i = 0; p.addend_tma && i < a->naddends; i++)
        if ((uintptr_t)a->addend[i] % 16) p.addend_tma = 0;
    for (int i = 0; p.addend_tma && i < a->naddends; i++)
        if (!make_map(&am.map[i], a->addend_dtype, a->addend[i], a->y_own ? a->y_own_rows : a->m, a->n,
                      a->addend_ld, addend_size == 4 ? kTileM : 64))
            return cudaErrorInvalidValue;
    p.abort_word = a->abort_word;
    p.notice_word = a->notice_word;
    p.abort_record = a->abort_record;
    p.report_rank = a->report_rank;
    p.report_chunks_per_shard = a->report_chunks_per_shard;
    p.report_addend_chunk0 = a->report_addend_chunk0;
    p.wait_timeout_ns = a->wait_timeout_ns > 0 ? a->wait_timeout_ns : 10000000000ll;
    p.timeout_out = a->timeout_out;
    p.m_block_order = a->m_block_order;
    p.tile_counter = a->tile_counter; /* the helper and stream-K kernels ignore it */
    long long tiles = (long long)p.tiles_m * p.tiles_n;
    int grid = grid_for(a, sms, tiles);
    /* The stream-K tail, when the call allows it and the workspace holds
     * it (a smaller workspace: the whole-tile schedule, as cuBLASLt picks
     * an algorithm that fits its workspace). */
    long long skt = sk_tiles_for(a, pp, tiles, grid, p.k_blocks);
    size_t need = sk_bytes(skt, pp);
    bool cut = skt > 0 && need > 0 && a->workspace && a->workspace_bytes >= need;
    sk_setup(&p, cut ? skt : 0, tiles, grid, a->workspace);
    if (a->y_own) return launch_variant<true>(bf16, pp, a->out_dtype, dev, mx, mx_own, mw, am, p, grid, stream);
    return launch_variant<false>(bf16, pp, a->out_dtype, dev, mx, mx_own, mw, am, p, grid, stream);
}
