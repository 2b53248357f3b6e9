/* The Hopper GEMM's fixed choices: tile shapes, the ring depth of each
 * variant, the shared-memory layout (ring, addend slots, barriers, tile
 * queue, the producer's ready map) and the kernel parameters the host
 * fills once per call (hgemm_params). */
#ifndef COMMGEMM_HOPPER_CONFIG_CUH
#define COMMGEMM_HOPPER_CONFIG_CUH

#include <cuda.h>
#include <stdint.h>

#include "device/hopper_gemm.h"

namespace {

constexpr int kTileM = CGM_HGEMM_TILE_M;
constexpr int kTileK = CGM_HGEMM_TILE_K; /* 64 x 2 bytes = one 128-byte swizzle row */
constexpr int kThreads = 384;
constexpr int kGroupM = 16; /* rasterization: m tiles per group, see tile_coords */
constexpr int kStageBytesA = kTileM * kTileK * 2; /* 16 KiB */
/* The TMA box of a 16-bit Y or addend: 64 rows x 64 columns (128-byte rows,
 * 128B swizzle). */
constexpr int kBox16 = 64 * 64 * 2; /* 8 KiB */

/* Per variant: the tile's n extent, the ring depth, the shared memory. */
template <bool kPP> struct cfg {
    static constexpr int tile_n = kPP ? CGM_HGEMM_TILE_N_PINGPONG : CGM_HGEMM_TILE_N;
    static constexpr int stages = kPP ? 6 : 4;
    static constexpr int bytes_b = tile_n * kTileK * 2; /* 16 or 32 KiB */
    static constexpr int stage_bytes = kStageBytesA + bytes_b;
    /* cooperative: the epilogue's staging of Y (epilogue_smem), two boxes
     * per consumer after the ring */
    static constexpr int y_stage_bytes = kPP ? 0 : 2 * 2 * kBox16;
    /* 1024: the 128B-swizzle pattern repeats every 8 rows x 128 bytes, and
     * TMA and wgmma both assume the pattern starts at a 1024-byte boundary.
     * Barriers: full and empty per stage and two turn barriers; the addend
     * slots' barriers are smem_of's. */
    static constexpr int smem_bytes = 1024 + stages * stage_bytes + y_stage_bytes + (2 * stages + 2) * 8;
    static_assert(smem_bytes <= 227 * 1024, "shared memory per block");
};

/* The addend slots of the ping-pong kernel whose helper thread loads the
 * addends (addend_tma_helper): two of 16 KiB after the ring, each one part
 * of an addend's 128 x 128 tile: 64 rows of a 16-bit addend as two TMA
 * boxes of 64 x 64 (128-byte rows, 128B swizzle), or 32 columns of an fp32
 * addend as one box of 128 rows x 32; and their barriers (full per
 * consumer and slot, empty per slot) after the other barriers. */
constexpr int kAddendSlot = 2 * kBox16; /* 16 KiB */
/* After the barriers: the tile queue (two slots of a tile index, their
 * full and empty barriers: 48 bytes, tile_queue), then the producer's map
 * of the m tiles whose row flags it already saw ready (produce): one bit
 * per m tile for the first kReadyTiles. */
constexpr int kReadyTiles = 2048;
constexpr int kQueueBytes = 48;
/* The split kernels' ping-pong ring handoff: two words after the queue's
 * slots, inside kQueueBytes (the queue uses 40; kernel.cuh). */
constexpr int kHandoffOffset = 40;

/* The tail split's workspace (cgm_hgemm_args.split_ws): first the arrival
 * counters, kSplitCounters per tail tile (the cooperative tile's eight
 * consumer warps; ping-pong uses four), for at most kSplitMaxTail tail
 * tiles; then the partials. The counters stay where they are whatever the
 * shape, so that counters a launch left zero are zero for the next one. */
constexpr int kSplitCounters = 8;
constexpr int kSplitMaxTail = CGM_HGEMM_SPLIT_COUNTER_BYTES / (4 * kSplitCounters);
template <bool kPP, bool kWithHelper> struct smem_of { /* kWithHelper: the kAddTma kernel */
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

/* One call's parameters, filled by the host (launch.cu) from
 * cgm_hgemm_args; the kernel's divisions use the multiply-high forms the
 * host precomputed (fastdiv). */
struct hgemm_params {
    int m, n, k;
    int tiles_m, tiles_n, k_blocks;
    /* The dynamic schedule (cgm_hgemm_args.tile_counter): after its first
     * tile blockIdx.x, a CTA takes gridDim.x + atomicAdd(tile_counter, 1)
     * until that passes the last tile; NULL: tiles blockIdx.x + i *
     * gridDim.x. Not in the helper kernel. */
    unsigned int *tile_counter;
    /* tile_coords' divisors in multiply-high form (fastdiv): kGroupM *
     * tiles_n and the last group's m tiles (tiles_m % kGroupM, or kGroupM) */
    unsigned int span_mul, last_mul;
    int span_shr, last_shr;
    void *y;
    long long ldy;
    const void *bias;
    int accumulate;
    int vector_store; /* y and ldy allow 2-element stores */
    int vector16;     /* 16-bit Y, y 16-byte aligned, ldy % 8 == 0: 16-byte stores */
    int y_tma;        /* the cooperative kernels store Y by TMA (epilogue_smem; not a split tail tile) */
    int y_staged;     /* ... and where TMA cannot address Y, staged (epilogue_smem) */
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
    /* ---- The fused epilogue (cgm_hgemm_args.epilogue; epilogue.cuh's
     * epilogue_act), read by the kernels with_epilogue<OutT> only. ---- */
    int epilogue;    /* CGM_DEV_EPI_* (device/epilogue.cuh) */
    int aux_pairs;   /* aux_ld even and aux 2-element aligned: pair access */
    void *aux;       /* [m, n] of OutT, row stride aux_ld */
    long long aux_ld;
    float *bgrad_ws; /* DGELU_BGRAD: slot g (rows 16 g ..) at g * bgrad_stride */
    long long bgrad_stride;
    /* ---- FP8 inputs (fp8 kernels only; fp8.cuh): per-tensor scales, the
     * fp32 product of a row multiplied by x_scale[row / x_scale_shard_rows]
     * (x_scale_shard_rows clamped to m: one scale) and *w_scale before the
     * addends and the bias. The division is multiply-high (fastdiv). */
    const float *x_scale;
    const float *w_scale;
    unsigned int xs_mul;
    int xs_shr;
    /* ---- The promoting fp8 kernels (promoted<T>; fp8.cuh): each k block
     * of 128 accumulates in the tensor cores, then is added into the fp32
     * accumulators times its scale: with block scaling (x_bs not NULL)
     * x_bs[row * x_bs_ld + kb] * w_bs[(col / 128) * w_bs_ld + kb] (0 past
     * the last row or the w_blocks blocks of n), otherwise 1 (the
     * per-tensor scales then apply after the main loop, as above). */
    int promote;
    const float *x_bs;
    const float *w_bs;
    long long x_bs_ld, w_bs_ld;
    int w_blocks;
    /* ---- The tail split (cgm_hgemm_args.split_ws; read by the split
     * kernels only, kSplit: kernel.cuh, split.cuh; the choice:
     * tail_split.h). Work unit u < split_unit0 is tile u, whole; unit
     * split_unit0 + j * split_tiles + r (r < split_tiles, j < split_parts)
     * is part j of tail tile r (tile split_unit0 + r): k blocks
     * [j k_blocks / split_parts, (j + 1) k_blocks / split_parts). The
     * divisions are multiply-high (fastdiv). ---- */
    int units;
    int split_unit0, split_tiles, split_parts;
    unsigned int split_tiles_mul, split_parts_mul;
    int split_tiles_shr, split_parts_shr;
    /* part j of tail tile r: slot r * split_parts + j of 128 x tile_n
     * floats (split_store: each thread's accumulators, 16 bytes per lane
     * side by side); kSplitCounters arrival counters per tail tile, one
     * per consumer warp */
    float *split_partials;
    unsigned int *split_counters;
};

/* The output type of a kernel with the fused epilogue: with_epilogue<T>
 * stores T like T does, and selects epilogue_act (epilogue.cuh) instead of
 * the plain epilogue at the same call sites, so the plain kernels keep
 * their code. out_type<O>::type is the stored type either way. */
template <typename T> struct with_epilogue {
    T value;
};
template <typename O> struct out_type {
    using type = O;
    static constexpr bool act = false;
    static constexpr bool promote = false;
};
template <typename T> struct out_type<with_epilogue<T>> {
    using type = T;
    static constexpr bool act = true;
    static constexpr bool promote = false;
};

/* The output type of an fp8 kernel that promotes each k block (hgemm_params
 * .promote): promoted<T> stores T like T does and selects the promoting
 * main loop (kernel.cuh), so the other kernels keep their code. */
template <typename T> struct promoted {
    T value;
};
template <typename T> struct out_type<promoted<T>> {
    using type = T;
    static constexpr bool act = false;
    static constexpr bool promote = true;
};
/* The type the epilogue is instantiated with: promoted<T>'s is T's. */
template <typename O> struct epilogue_type {
    using type = O;
};
template <typename T> struct epilogue_type<promoted<T>> {
    using type = T;
};

} // namespace

#endif
