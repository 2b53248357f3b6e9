/* The Hopper GEMM's host side: argument checks, the per-call parameters
 * (hgemm_params), the TMA tensor maps (cached per host thread), the choice
 * of variant, tail split and kernel, the launch, and the preload of every
 * kernel a comm launches. The C entry points are declared in
 * device/hopper_gemm.h. The 16-bit kernels are instantiated here; the
 * fp8 ones and the split kernels in their own units (launch.cuh). */
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "device/hopper/launch.cuh"
#include "device/hopper/tail_split.h"
#include "device/hopper_gemm.h"
#include "plan/plan.h"

namespace {

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

/* Row-major [rows, k] matrix of dtype (fp8, bf16, fp16 or fp32; row stride
 * ld elements), box of 128 bytes (128 fp8, 64 16-bit or 32 fp32 elements) x
 * box_rows (fp8 as bytes: TMA only moves them),
 * 128B swizzle, zero fill out of bounds (partial tiles in m, n and k): the
 * K-major operands, and the addends. */
bool encode_map(CUtensorMap *map, cgm_dtype dtype, const void *ptr, int64_t rows, int64_t k, int64_t ld,
                int box_rows) {
    encode_tiled_fn enc = encode_tiled();
    if (!enc) return false;
    cuuint64_t size = dtype == CGM_DTYPE_FP32 ? 4 : dtype == CGM_DTYPE_BF16 || dtype == CGM_DTYPE_FP16 ? 2 : 1;
    cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
    cuuint64_t strides[1] = {(cuuint64_t)ld * size};
    cuuint32_t box[2] = {(cuuint32_t)(128 / size), (cuuint32_t)box_rows};
    cuuint32_t element_strides[2] = {1, 1};
    CUtensorMapDataType type = dtype == CGM_DTYPE_FP32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                               : dtype == CGM_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                               : dtype == CGM_DTYPE_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_UINT8;
    CUresult r = enc(map, type, 2, const_cast<void *>(ptr), dims, strides, box, element_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
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
constexpr int kMapCache = 16; /* X, x_own, W, Y and up to 7 addends per call */
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

/* The kernels with the fused epilogue (with_epilogue<T>; never the addend
 * helper's form: maps_for leaves addend_tma off with an epilogue; 16-bit
 * operands only: epilogue_problem refuses fp8 with an epilogue). */
template <int kIn, bool kPP>
cudaError_t launch_out_epi(cgm_dtype out, int dev, const call_maps &m, const hgemm_params &p, int grid,
                           cudaStream_t stream) {
    switch (out) {
    case CGM_DTYPE_BF16: return launch<kIn, with_epilogue<__nv_bfloat16>, kPP, false>(dev, m, p, grid, stream);
    case CGM_DTYPE_FP16: return launch<kIn, with_epilogue<__half>, kPP, false>(dev, m, p, grid, stream);
    default: return launch<kIn, with_epilogue<float>, kPP, false>(dev, m, p, grid, stream);
    }
}

/* The kernel of a call: its operand types (in: kIn, ptx.cuh), its
 * variant, and in ping-pong the addend form (kAddTma) when the helper loads
 * the addends by TMA; with an epilogue, the variant's with_epilogue
 * kernel. */
cudaError_t launch_variant(int in, bool pp, cgm_dtype out, int dev, const call_maps &m, const hgemm_params &p,
                           int grid, cudaStream_t stream) {
    if (in_is_fp8(in) && p.promote) return cgm_hopper::launch_fp8_promoted(in, pp, out, dev, &m, &p, grid, stream);
    if (in_is_fp8(in)) return cgm_hopper::launch_fp8(in, pp, pp && p.addend_tma, out, dev, &m, &p, grid, stream);
    bool bf16 = in == kInBf16;
    if (p.epilogue)
        return pp ? (bf16 ? launch_out_epi<kInBf16, true>(out, dev, m, p, grid, stream)
                          : launch_out_epi<kInF16, true>(out, dev, m, p, grid, stream))
                  : (bf16 ? launch_out_epi<kInBf16, false>(out, dev, m, p, grid, stream)
                          : launch_out_epi<kInF16, false>(out, dev, m, p, grid, stream));
    if (pp && p.addend_tma)
        return bf16 ? launch_out<kInBf16, true, true>(out, dev, m, p, grid, stream)
                    : launch_out<kInF16, true, true>(out, dev, m, p, grid, stream);
    if (pp)
        return bf16 ? launch_out<kInBf16, true, false>(out, dev, m, p, grid, stream)
                    : launch_out<kInF16, true, false>(out, dev, m, p, grid, stream);
    return bf16 ? launch_out<kInBf16, false, false>(out, dev, m, p, grid, stream)
                : launch_out<kInF16, false, false>(out, dev, m, p, grid, stream);
}

/* The variant CGM_HGEMM_AUTO runs on a device with mem_bytes_per_s of
 * memory bandwidth (0: unknown). Ping-pong hides the epilogue behind the
 * other consumer's main loop but loads 4/3 of cooperative's bytes per flop,
 * so the choice depends on the memory:
 *   - below 4 TB/s (H100 SXM: 3.35): cooperative, unless its 128x256 tiles
 *     would fill at most half of 132 SMs, where ping-pong's 128x128 tiles
 *     give twice the CTAs. On the kernel bench's sweep on an H100
 *     (commgemm-kernel-bench plain --sweep, docs/PERFORMANCE.md) ping-pong
 *     ran 0.56 to 0.99 of cooperative's speed wherever cooperative had more
 *     than 66 tiles, small k included, and up to 1.8x it below;
 *   - from 4 TB/s (H200: 4.8): ping-pong when k <= 2048, or when k <= 4096
 *     and (n >= 16384 or (n >= 4096 and (m * n >= 2^25 or m > 4096))),
 *     cooperative otherwise: fitted to the kernel bench on an H200, where
 *     ping-pong ran up to 1.15x cooperative on those shapes. */
bool auto_pingpong(int64_t m, int64_t n, int64_t k, double mem_bytes_per_s) {
    if (mem_bytes_per_s >= 4e12)
        return k <= 2048 ||
               (k <= 4096 && (n >= 16384 || (n >= 4096 && (m * n >= ((int64_t)1 << 25) || m > 4096))));
    const int64_t coop_tiles = ((m + 127) / 128) * ((n + 255) / 256);
    return coop_tiles * 2 <= 132;
}

/* The current device's peak memory bandwidth in bytes/s (two transfers a
 * memory clock), cached per device; 0 without a device. */
double memory_bytes_per_s() {
    static volatile double known[kMaxDevices]; /* 0: not asked yet */
    int dev = 0, khz = 0, bits = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 0.0;
    if (known[dev] > 0.0) return known[dev];
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess)
        return 0.0;
    known[dev] = 2.0 * (double)khz * 1e3 * (double)bits / 8.0;
    return known[dev];
}

/* Whether a call takes the dynamic tile schedule when the caller passes a
 * tile_counter: plain GEMMs only (no row flags, no addends). There it lets
 * the ping-pong kernel's CTAs, which under the static order end at
 * different times, finish together; with the fused all-gather's row flags
 * it measured slower, and the addend forms were not measured with it. */
bool dynamic_pays(const cgm_hgemm_args *a) { return a->tile_counter && !a->row_flags && a->naddends == 0; }

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

/* fp8 X (and then W: fp8_problem); the kernel's operand types (kIn,
 * ptx.cuh); the element multiple that makes 16-byte rows. */
bool fp8_in(const cgm_hgemm_args *a) {
    return a->in_dtype == CGM_DTYPE_FP8_E4M3 || a->in_dtype == CGM_DTYPE_FP8_E5M2;
}
int in_kind(const cgm_hgemm_args *a) {
    if (!fp8_in(a)) return a->in_dtype == CGM_DTYPE_BF16 ? kInBf16 : kInF16;
    bool x5 = a->in_dtype == CGM_DTYPE_FP8_E5M2, w5 = a->w_dtype == CGM_DTYPE_FP8_E5M2;
    return x5 ? (w5 ? kInE5E5 : kInE5E4) : (w5 ? kInE4E5 : kInE4E4);
}
int64_t in_align(const cgm_hgemm_args *a) { return fp8_in(a) ? 16 : 8; }

/* The checks of the fused hooks' arguments (args_problem's second half). */
const char *hooks_problem(const cgm_hgemm_args *a) {
    const int64_t lim = INT32_MAX;
    bool addend_flags = false;
    if (a->naddends < 0 || a->naddends > CGM_HGEMM_MAX_ADDENDS) return "naddends must be 0..CGM_HGEMM_MAX_ADDENDS";
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
    if ((a->row_flags || addend_flags) && (a->rows_per_flag < 1 || (!a->timeout_out && !a->abort_word)))
        return "flags need rows_per_flag >= 1 and timeout_out or abort_word";
    if (a->notice_word && !a->abort_word) return "notice_word needs abort_word";
    if (a->row_flags && a->flag_shard_rows < 0) return "flag_shard_rows must be >= 0";
    if (a->x_own) {
        if ((uintptr_t)a->x_own % 16 || a->ldx_own % in_align(a) || a->ldx_own < a->k)
            return fp8_in(a) ? "TMA needs x_own 16-byte aligned and ldx_own a multiple of 16 (fp8), >= k"
                             : "TMA needs x_own 16-byte aligned and ldx_own a multiple of 8, >= k";
        if (a->own_row0 < 0 || a->own_rows < 0 || a->own_row0 + a->own_rows > a->m)
            return "the own rows must lie in [0, m)";
    }
    return nullptr;
}

/* The checks of the fused epilogue's arguments (cgm_hgemm_args.epilogue). */
const char *epilogue_problem(const cgm_hgemm_args *a) {
    const int e = a->epilogue;
    const bool uses_aux = e == CGM_EPILOGUE_GELU_AUX || e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
    const bool grad = e == CGM_EPILOGUE_DGELU_BGRAD;
    const size_t es = a->out_dtype == CGM_DTYPE_FP32 ? 4 : 2;
    if (e < CGM_EPILOGUE_NONE || e > CGM_EPILOGUE_DGELU_BGRAD)
        return "epilogue must be CGM_EPILOGUE_NONE, GELU, GELU_AUX, DGELU or DGELU_BGRAD (BGRAD is not the "
               "kernel's)";
    if (e != CGM_EPILOGUE_NONE && a->accumulate) return "an epilogue takes no accumulate (Y = epilogue(t))";
    if (uses_aux != (a->aux != nullptr))
        return uses_aux ? "GELU_AUX, DGELU and DGELU_BGRAD need aux" : "aux is only for GELU_AUX, DGELU and DGELU_BGRAD";
    if (uses_aux && (a->aux_ld < a->n || a->aux_ld > INT32_MAX || (uintptr_t)a->aux % es))
        return "aux needs aux_ld >= n, below 2^31, and aux aligned to its dtype";
    if (grad != (a->bgrad != nullptr) || grad != (a->bgrad_ws != nullptr))
        return grad ? "DGELU_BGRAD needs bgrad and bgrad_ws" : "bgrad and bgrad_ws are only for DGELU_BGRAD";
    if (grad && (uintptr_t)a->bgrad_ws % 16) return "bgrad_ws must be 16-byte aligned";
    if (grad && a->bgrad_dtype != CGM_DTYPE_FP32 && a->bgrad_dtype != CGM_DTYPE_BF16 &&
        a->bgrad_dtype != CGM_DTYPE_FP16)
        return "bgrad_dtype must be fp32, bf16 or fp16";
    if (e != CGM_EPILOGUE_NONE && fp8_in(a))
        return "the fused epilogue takes bf16 or fp16 inputs: with fp8 X and W, apply it after the GEMM (or use "
               "cuBLASLt)";
    return nullptr;
}

/* The checks of block scaling's fields (fp8_problem's). */
const char *fp8_block_problem(const cgm_hgemm_args *a) {
    const int64_t kb = (a->k + 127) / 128;
    if (!a->x_block_scale != !a->w_block_scale)
        return "block scaling needs both x_block_scale and w_block_scale (or neither, for per-tensor scales)";
    if (a->x_scale || a->w_scale)
        return "block scaling takes x_block_scale and w_block_scale instead of x_scale and w_scale: pass those NULL";
    if ((uintptr_t)a->x_block_scale % 4 || (uintptr_t)a->w_block_scale % 4)
        return "x_block_scale and w_block_scale must be 4-byte aligned (device fp32)";
    if (a->x_block_ld < kb || a->w_block_ld < kb || a->x_block_ld > INT32_MAX || a->w_block_ld > INT32_MAX)
        return "block scaling needs x_block_ld and w_block_ld >= ceil(k / 128) (one scale per 128 k) and below 2^31";
    return nullptr;
}

/* The checks of the fp8 fields (args_problem's): W's dtype, the scales,
 * 16-byte rows. */
const char *fp8_problem(const cgm_hgemm_args *a) {
    if (!fp8_in(a)) {
        if (a->x_scale || a->w_scale || a->x_block_scale || a->w_block_scale)
            return "x_scale, w_scale and the block scales are for fp8 inputs: pass NULL with bf16 or fp16 X and W";
        if (a->fp8_promote) return "fp8_promote is for fp8 inputs: pass 0 with bf16 or fp16 X and W";
        return nullptr;
    }
    if (a->w_dtype != CGM_DTYPE_FP8_E4M3 && a->w_dtype != CGM_DTYPE_FP8_E5M2)
        return "with fp8 X, w_dtype must be CGM_DTYPE_FP8_E4M3 or CGM_DTYPE_FP8_E5M2";
    if (a->fp8_promote != 0 && a->fp8_promote != 1) return "fp8_promote must be 0 or 1";
    if (a->x_block_scale || a->w_block_scale) {
        const char *why = fp8_block_problem(a);
        if (why) return why;
    } else {
        if (!a->x_scale || !a->w_scale)
            return "fp8 inputs need x_scale and w_scale (device fp32), or x_block_scale and w_block_scale";
        if ((uintptr_t)a->x_scale % 4 || (uintptr_t)a->w_scale % 4)
            return "x_scale and w_scale must be 4-byte aligned";
    }
    if (a->x_scale_shard_rows < 0) return "x_scale_shard_rows must be >= 0 (0: one scale for every row)";
    if (a->k % 16)
        return "fp8 inputs need k a multiple of 16 (16-byte TMA rows; pad X and W with zero columns, or use "
               "cuBLASLt)";
    return nullptr;
}

/* The argument checks, without the device check. */
const char *args_problem(const cgm_hgemm_args *a) {
    const int64_t lim = INT32_MAX;
    if (!a) return "args is NULL";
    if (a->in_dtype != CGM_DTYPE_BF16 && a->in_dtype != CGM_DTYPE_FP16 && !fp8_in(a))
        return "inputs must be bf16 or fp16, or fp8 (e4m3 or e5m2)";
    if (a->out_dtype != CGM_DTYPE_BF16 && a->out_dtype != CGM_DTYPE_FP16 && a->out_dtype != CGM_DTYPE_FP32)
        return "output must be bf16, fp16 or fp32";
    if (a->m < 0 || a->n < 0 || a->k < 1) return "needs m >= 0, n >= 0, k >= 1";
    if (a->m > lim || a->n > lim || a->k > lim || a->ldy > lim) return "m, n, k and ldy must be below 2^31";
    if (a->ldx < a->k || a->ldw < a->k || a->ldy < a->n) return "needs ldx >= k, ldw >= k, ldy >= n";
    if (!a->x || !a->w || (!a->y && a->m > 0 && a->n > 0)) return "x, w and y must not be NULL";
    if ((uintptr_t)a->x % 16 || (uintptr_t)a->w % 16) return "TMA needs x and w 16-byte aligned";
    if (a->ldx % in_align(a) || a->ldw % in_align(a))
        return fp8_in(a) ? "TMA needs row strides that are multiples of 16 bytes: ldx and ldw multiples of 16 (fp8)"
                         : "TMA needs row strides that are multiples of 16 bytes: ldx and ldw multiples of 8";
    if (a->variant < CGM_HGEMM_AUTO || a->variant > CGM_HGEMM_PINGPONG)
        return "variant must be CGM_HGEMM_AUTO, CGM_HGEMM_COOPERATIVE or CGM_HGEMM_PINGPONG";
    if ((uintptr_t)a->tile_counter % 4) return "tile_counter must be 4-byte aligned";
    if ((uintptr_t)a->split_ws % 16) return "split_ws must be 16-byte aligned";
    if (a->tail_split < 0 || a->tail_split > CGM_HGEMM_SPLIT_MAX_PARTS)
        return "tail_split must be 0 (the model's choice), 1 (no split) or 2..CGM_HGEMM_SPLIT_MAX_PARTS parts";
    if (((a->m + kTileM - 1) / kTileM) * ((a->n + CGM_HGEMM_TILE_N_PINGPONG - 1) / CGM_HGEMM_TILE_N_PINGPONG) > lim)
        return "too many output tiles (more than 2^31)";
    const char *why = fp8_problem(a);
    if (!why) why = hooks_problem(a);
    return why ? why : epilogue_problem(a);
}

/* The CTAs a call may use: the SMs, or sm_count when that is fewer. */
int grid_limit(const cgm_hgemm_args *a, int sms) { return a->sm_count > 0 && a->sm_count < sms ? a->sm_count : sms; }

/* The persistent grid of a call: min(SMs or sm_count, tiles or units). */
int grid_for(const cgm_hgemm_args *a, int sms, long long tiles) {
    int grid = grid_limit(a, sms);
    return tiles < grid ? (int)tiles : grid;
}

/* The tail split of a call (tail_split.h) with a workspace of ws_bytes
 * (-1: as much as it wants), on a grid of up to `grid` CTAs: plain GEMMs
 * only (no row flags, no addends, no fused epilogue; the fused hooks keep
 * their schedule), parts of whole stages, units below 2^31. */
tail_split_choice split_for(const cgm_hgemm_args *a, int64_t tiles, int tile_n, int64_t k_blocks, int grid,
                     int64_t ws_bytes) {
    tail_split_choice none = {tiles, 0, 1};
    if (a->row_flags || a->naddends || a->epilogue != CGM_EPILOGUE_NONE) return none;
    const int64_t slot = (int64_t)kTileM * tile_n * (int64_t)sizeof(float);
    int64_t slots = ws_bytes < 0 ? INT64_MAX : ws_bytes < CGM_HGEMM_SPLIT_COUNTER_BYTES
                                                   ? 0
                                                   : (ws_bytes - CGM_HGEMM_SPLIT_COUNTER_BYTES) / slot;
    tail_split_choice c = tail_split_choose(tiles, grid, k_blocks, a->tail_split, slots, kSplitMaxTail);
    return c.whole + c.tail * c.parts > INT32_MAX ? none : c;
}

/* The bytes of split_ws a split uses: the counters and the partials. */
int64_t split_bytes(const tail_split_choice &c, int tile_n) {
    if (c.parts < 2) return 0;
    return CGM_HGEMM_SPLIT_COUNTER_BYTES + c.tail * c.parts * (int64_t)kTileM * tile_n * (int64_t)sizeof(float);
}

/* The split kernels' fields of p (tiles and k_blocks set): the units
 * (scheduler.cuh, unit_of), the workspace's counters and partials. */
void params_split(const cgm_hgemm_args *a, const tail_split_choice &c, hgemm_params *p) {
    units_init(p, c.whole, c.tail, c.parts);
    p->split_counters = static_cast<unsigned int *>(a->split_ws);
    p->split_partials = reinterpret_cast<float *>(static_cast<char *>(a->split_ws) + CGM_HGEMM_SPLIT_COUNTER_BYTES);
}

/* The shape, schedule and output fields of p. */
void params_shape(const cgm_hgemm_args *a, int tile_n, hgemm_params *p) {
    p->m = (int)a->m;
    p->n = (int)a->n;
    p->k = (int)a->k;
    p->tiles_m = (int)((a->m + kTileM - 1) / kTileM);
    p->tiles_n = (int)((a->n + tile_n - 1) / tile_n);
    coords_init(p);
    const int64_t sk = stage_k(in_kind(a));
    p->k_blocks = (int)((a->k + sk - 1) / sk);
    p->tile_counter = dynamic_pays(a) ? a->tile_counter : nullptr;
    /* no split (params_split sets these for the split kernels) */
    units_init(p, (long long)p->tiles_m * p->tiles_n, 0, 1);
    p->split_partials = nullptr;
    p->split_counters = nullptr;
    p->m_block_order = a->m_block_order;
    p->y = a->y;
    p->ldy = a->ldy;
    p->bias = a->bias;
    p->accumulate = a->accumulate != 0;
    size_t out_size = a->out_dtype == CGM_DTYPE_FP32 ? 4 : 2;
    p->vector_store = a->ldy % 2 == 0 && (uintptr_t)a->y % (2 * out_size) == 0;
    p->vector16 = out_size == 2 && a->ldy % 8 == 0 && (uintptr_t)a->y % 16 == 0;
    /* the fused epilogue */
    p->epilogue = a->epilogue;
    p->aux = a->aux;
    p->aux_ld = a->aux_ld;
    p->aux_pairs = a->aux_ld % 2 == 0 && (uintptr_t)a->aux % (2 * out_size) == 0;
    p->bgrad_ws = a->bgrad_ws;
    p->bgrad_stride = (a->n + 3) / 4 * 4;
    /* fp8: the scales (fp8.cuh); x_scale_shard_rows clamped to m: one scale */
    p->x_scale = a->x_scale;
    p->w_scale = a->w_scale;
    int64_t xs = a->x_scale_shard_rows > 0 && a->x_scale_shard_rows < a->m ? a->x_scale_shard_rows : a->m;
    fastdiv_init((int)(xs > 0 ? xs : 1), &p->xs_mul, &p->xs_shr);
    /* promotion, block scaling (fp8.cuh) */
    p->x_bs = a->x_block_scale;
    p->w_bs = a->w_block_scale;
    p->promote = fp8_in(a) && (a->fp8_promote || a->x_block_scale);
    p->x_bs_ld = a->x_block_ld;
    p->w_bs_ld = a->w_block_ld;
    p->w_blocks = (int)((a->n + 127) / 128);
}

/* The fused hooks' fields of p: the row flags (with wait_row_flags'
 * divisors), the addends and their flags, the abort and report fields. */
void params_hooks(const cgm_hgemm_args *a, hgemm_params *p) {
    p->row_flags = a->row_flags;
    p->rows_per_flag = a->rows_per_flag;
    p->flag_shard_rows = a->flag_shard_rows;
    p->flag_shard_stride = a->flag_shard_stride;
    p->flag_rpf = (int)(a->rows_per_flag < 1 ? 1 : a->rows_per_flag < a->m ? a->rows_per_flag : a->m);
    p->flag_sr = (int)(a->flag_shard_rows > 0 && a->flag_shard_rows < a->m ? a->flag_shard_rows : a->m);
    p->flag_per_shard = (p->flag_sr - 1) / p->flag_rpf + 1;
    fastdiv_init(p->flag_rpf, &p->flag_rpf_mul, &p->flag_rpf_shr);
    fastdiv_init(p->flag_sr, &p->flag_sr_mul, &p->flag_sr_shr);
    p->flag_epoch = a->flag_epoch;
    p->flag_epoch_ptr = a->flag_epoch_ptr;
    p->naddends = a->naddends;
    p->addend_waits = 0;
    p->addend_dtype = (int)a->addend_dtype;
    p->addend_ld = a->addend_ld;
    for (int i = 0; i < CGM_HGEMM_MAX_ADDENDS; i++) {
        bool on = i < a->naddends;
        p->addend[i] = on ? a->addend[i] : nullptr;
        p->addend_flags[i] = on ? a->addend_flags[i] : nullptr;
        p->report_addend_peer[i] = a->report_addend_peer[i];
        if (on && a->addend_flags[i]) p->addend_waits = 1;
    }
    p->abort_word = a->abort_word;
    p->notice_word = a->notice_word;
    p->abort_record = a->abort_record;
    p->report_rank = a->report_rank;
    p->report_chunks_per_shard = a->report_chunks_per_shard;
    p->report_addend_chunk0 = a->report_addend_chunk0;
    p->wait_timeout_ns = a->wait_timeout_ns > 0 ? a->wait_timeout_ns : 10000000000ll;
    p->timeout_out = a->timeout_out;
}

/* The tensor maps of a call, and p's fields that depend on them: the own
 * rows' tiles (x_own) and whether the ping-pong helper loads the addends
 * by TMA (16-byte aligned addends, rows a multiple of 16 bytes apart;
 * otherwise the consumers load them). Parts of 64 rows (16-bit) or 32
 * columns (fp32): the map's box (Y's: y_path_for). False when a map of
 * an operand or addend cannot be encoded. */
bool maps_for(const cgm_hgemm_args *a, bool pp, int tile_n, call_maps *m, hgemm_params *p) {
    cgm_dtype wt = fp8_in(a) ? a->w_dtype : a->in_dtype;
    if (!make_map(&m->x, a->in_dtype, a->x, a->m, a->k, a->ldx, kTileM) ||
        !make_map(&m->w, wt, a->w, a->n, a->k, a->ldw, tile_n))
        return false;
    /* The m tiles wholly inside the own rows (the last tile of X counts
     * when the own rows end X: both maps zero-fill past the end). */
    p->own_row0 = a->own_row0;
    p->own_tile0 = p->own_tile1 = 0;
    m->x_own = m->x;
    if (a->x_own && a->own_rows > 0) {
        int64_t t0 = 0, t1 = 0; /* the same tiles p2p_fused.c does not copy */
        plan_fused_inside_tiles(a->m, a->own_row0, a->own_rows, kTileM, &t0, &t1);
        p->own_tile0 = (int)t0;
        p->own_tile1 = (int)t1;
        if (p->own_tile1 > p->own_tile0 &&
            !make_map(&m->x_own, a->in_dtype, a->x_own, a->own_rows, a->k, a->ldx_own, kTileM))
            return false;
    }
    memset(&m->addends, 0, sizeof m->addends);
    memset(&m->y, 0, sizeof m->y);
    size_t addend_size = a->addend_dtype == CGM_DTYPE_FP32 ? 4 : 2;
    const bool promote = fp8_in(a) && (a->fp8_promote || a->x_block_scale); /* no helper form (launch.cuh) */
    p->addend_tma = pp && a->naddends > 0 && a->epilogue == CGM_EPILOGUE_NONE && !promote &&
                    (a->addend_ld * (int64_t)addend_size) % 16 == 0;
    for (int i = 0; p->addend_tma && i < a->naddends; i++)
        if ((uintptr_t)a->addend[i] % 16) p->addend_tma = 0;
    for (int i = 0; p->addend_tma && i < a->naddends; i++)
        if (!make_map(&m->addends.map[i], a->addend_dtype, a->addend[i], a->m, a->n, a->addend_ld,
                      addend_size == 4 ? kTileM : 64))
            return false;
    return true;
}

/* How the kernels store Y: the cooperative ones send a 16-bit Y that the
 * epilogue does not read (no accumulate, no fused epilogue) through shared
 * memory (epilogue_smem): by TMA where TMA can address it (y_tma: 16-byte
 * aligned, rows a multiple of 16 bytes apart, Y's map encoded), else
 * staged (y_staged: each warp stores its rows' segments; Y aligned to its
 * dtype). Otherwise, and for the split kernels' tail tiles
 * (epilogue_coop), Y is stored from registers (epilogue). */
void y_path_for(const cgm_hgemm_args *a, bool pp, call_maps *m, hgemm_params *p) {
    const bool smem = !pp && a->out_dtype != CGM_DTYPE_FP32 && a->epilogue == CGM_EPILOGUE_NONE && !a->accumulate;
    p->y_tma = smem && a->ldy % 8 == 0 && (uintptr_t)a->y % 16 == 0;
    if (p->y_tma && !make_map(&m->y, a->out_dtype, a->y, a->m, a->n, a->ldy, 64)) p->y_tma = 0;
    p->y_staged = smem && !p->y_tma && (uintptr_t)a->y % 2 == 0;
}

/* DGELU_BGRAD's slots: one per 16 rows. */
int64_t bgrad_groups(int64_t m) { return (m + 15) / 16; }

} // namespace

extern "C" int cgm_hgemm_supported(const cgm_hgemm_args *args, const char **reason) {
    const char *why = args_problem(args);
    if (!why && !is_sm90(nullptr, nullptr)) why = "needs an sm_90 (Hopper) device";
    if (!why && !encode_tiled()) why = "the driver has no cuTensorMapEncodeTiled";
    if (reason) *reason = why;
    return why == nullptr;
}

extern "C" int cgm_hgemm_variant_for(const cgm_hgemm_args *a) {
    if (a->variant == CGM_HGEMM_COOPERATIVE || a->variant == CGM_HGEMM_PINGPONG) return a->variant;
    /* The promoting fp8 kernels: the ping-pong variant's 128 x 128 tiles
     * (both consumers on each, kernel.cuh) load 4/3 of cooperative's bytes
     * per flop; on an H100 it ran 0.55 to 1.04 of cooperative's speed
     * wherever cooperative had more than 66 tiles, above 1 only on
     * 8192 x 1280 x 8192 (commgemm-kernel-bench plain --dtype e4m3 --fp8
     * promote|block --sweep). The rule below 4 TB/s, whatever the memory. */
    bool promote = fp8_in(a) && (a->fp8_promote || a->x_block_scale);
    double bw = promote ? 0.0 : memory_bytes_per_s();
    return auto_pingpong(a->m, a->n, a->k, bw) ? CGM_HGEMM_PINGPONG : CGM_HGEMM_COOPERATIVE;
}

extern "C" int cgm_hgemm_auto_variant(int64_t m, int64_t n, int64_t k, double mem_bytes_per_s) {
    return auto_pingpong(m, n, k, mem_bytes_per_s) ? CGM_HGEMM_PINGPONG : CGM_HGEMM_COOPERATIVE;
}

extern "C" cudaError_t cgm_hgemm_preload(void) {
    if (!is_sm90(nullptr, nullptr)) return cudaSuccess;
    cudaError_t e = preload_in<kInBf16>();
    if (e == cudaSuccess) e = preload_in<kInF16>();
    if (e == cudaSuccess) e = cgm_hopper::preload_fp8();
    return e != cudaSuccess ? e : cgm_hopper::preload_fp8_promoted();
}

extern "C" size_t cgm_hgemm_split_ws_bytes(const cgm_hgemm_args *a) {
    int sms = 0;
    if (!a || args_problem(a) || a->m == 0 || a->n == 0 || !is_sm90(nullptr, &sms)) return 0;
    bool pp = cgm_hgemm_variant_for(a) == CGM_HGEMM_PINGPONG;
    int tile_n = pp ? cfg<true>::tile_n : cfg<false>::tile_n;
    int64_t tiles = ((a->m + kTileM - 1) / kTileM) * ((a->n + tile_n - 1) / tile_n);
    int64_t sk = stage_k(in_kind(a)), k_blocks = (a->k + sk - 1) / sk;
    return (size_t)split_bytes(split_for(a, tiles, tile_n, k_blocks, grid_limit(a, sms), -1), tile_n);
}

extern "C" size_t cgm_hgemm_bgrad_ws_bytes(int64_t m, int64_t n) {
    return (size_t)bgrad_groups(m) * (size_t)((n + 3) / 4 * 4) * sizeof(float);
}

/* DGELU_BGRAD's second kernel: bgrad = the slots summed in row order, one
 * rounding (m 0: zeros). */
static cudaError_t bgrad_sum(const cgm_hgemm_args *a, cudaStream_t stream) {
    if (a->epilogue != CGM_EPILOGUE_DGELU_BGRAD || a->n == 0) return cudaSuccess;
    return cgm_dev_sum_slots(a->bgrad_ws, (int)CGM_DTYPE_FP32, (int)bgrad_groups(a->m), (a->n + 3) / 4 * 4, a->n,
                             a->bgrad, (int)a->bgrad_dtype, nullptr, stream);
}

extern "C" cudaError_t cgm_hgemm(const cgm_hgemm_args *a, cudaStream_t stream) {
    if (args_problem(a)) return cudaErrorInvalidValue;
    int sms = 0, dev = 0;
    if (!is_sm90(&dev, &sms)) return cudaErrorNotSupported;
    if (a->m == 0 || a->n == 0) return bgrad_sum(a, stream);
    bool pp = cgm_hgemm_variant_for(a) == CGM_HGEMM_PINGPONG;
    int tile_n = pp ? cfg<true>::tile_n : cfg<false>::tile_n;
    hgemm_params p;
    call_maps maps;
    if (!maps_for(a, pp, tile_n, &maps, &p)) return cudaErrorInvalidValue;
    params_shape(a, tile_n, &p);
    params_hooks(a, &p);
    y_path_for(a, pp, &maps, &p);
    const long long tiles = (long long)p.tiles_m * p.tiles_n;
    if (a->split_ws) {
        tail_split_choice c = split_for(a, tiles, tile_n, p.k_blocks, grid_limit(a, sms), (int64_t)a->split_ws_bytes);
        if (c.parts > 1) {
            params_split(a, c, &p);
            return cgm_hopper::launch_split(in_kind(a), pp, a->out_dtype, dev, &maps, &p, grid_for(a, sms, p.units),
                                            stream);
        }
    }
    cudaError_t e = launch_variant(in_kind(a), pp, a->out_dtype, dev, maps, p, grid_for(a, sms, tiles), stream);
    return e != cudaSuccess ? e : bgrad_sum(a, stream);
}
