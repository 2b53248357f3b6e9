/* The Hopper GEMM's epilogue: bias, accumulate (Y +=), conversion to the
 * output dtype and the stores, straight from the consumer's accumulator
 * registers. Interior tiles of a 16-bit Y without accumulate are
 * transposed inside each quad of lanes so that a warp stores whole 32-byte
 * sectors; other interior tiles store pairs, edge tiles check bounds. The
 * fused reduce-scatter's addends are added before this (addends.cuh).
 * The kernels whose output type is with_epilogue<T> (config.cuh) run
 * epilogue_act instead: bias, then GELU / GELU_AUX / DGELU / DGELU_BGRAD
 * (commgemm.h "Epilogues") in fp32, one rounding, and DGELU_BGRAD's
 * per-16-row column partials. */
#ifndef COMMGEMM_HOPPER_EPILOGUE_CUH
#define COMMGEMM_HOPPER_EPILOGUE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "device/epilogue.cuh"
#include "device/hopper/config.cuh"

namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ void from_float(float v, float *p) { *p = v; }
__device__ __forceinline__ void from_float(float v, __nv_bfloat16 *p) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void from_float(float v, __half *p) { *p = __float2half_rn(v); }

__device__ __forceinline__ float2 pair_of(const float *p) { return *reinterpret_cast<const float2 *>(p); }
__device__ __forceinline__ float2 pair_of(const __nv_bfloat16 *p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}
__device__ __forceinline__ float2 pair_of(const __half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}

__device__ __forceinline__ void store_pair(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
}
__device__ __forceinline__ void store_pair(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_pair(__half *p, float a, float b) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
}

/* The bias of columns col, col + 1 (0 past n or without a bias). */
template <typename OutT>
__device__ __forceinline__ void bias_pair(const hgemm_params &p, const OutT *bias, int col, float &ba, float &bb) {
    ba = bb = 0.f;
    if (bias) {
        if (col < p.n) ba = to_float(bias[col]);
        if (col + 1 < p.n) bb = to_float(bias[col + 1]);
    }
}

/* One row of a thread's fragment pair: columns col, col + 1. */
template <typename OutT>
__device__ __forceinline__ void store_two(const hgemm_params &p, int row, int col, float a, float b, float bias_a,
                                          float bias_b) {
    if (row >= p.m || col >= p.n) return;
    OutT *y = static_cast<OutT *>(p.y) + (long long)row * p.ldy + col;
    a += bias_a;
    b += bias_b;
    if (col + 1 < p.n && p.vector_store) {
        if (p.accumulate) {
            a += to_float(y[0]);
            b += to_float(y[1]);
        }
        store_pair(y, a, b);
        return;
    }
    if (p.accumulate) a += to_float(y[0]);
    from_float(a, y);
    if (col + 1 < p.n) {
        if (p.accumulate) b += to_float(y[1]);
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
 *     branches (the rotating form compiled to branches and convergence
 *     barriers around every shuffle in the cooperative epilogue).
 *   otherwise (the ping-pong kernels, where the butterfly form spilled):
 *     round r, lane q sends its w[(q + r) % 4] and receives from lane
 *     (q - r) % 4 that lane's w[q]. */
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
__device__ __forceinline__ void epilogue_plain(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    int t = threadIdx.x % 128;
    int q = t % 4;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    const OutT *bias = static_cast<const OutT *>(p.bias);
    bool interior = row0 + 64 <= p.m && col0 + 8 * NJ <= p.n;
    if (sizeof(OutT) == 2 && interior && p.vector16 && !p.accumulate) {
        /* Interior tile, 16-bit Y, no accumulate: per 4 column groups, the
         * quad transposes its packed pairs so that lane q writes the 16
         * bytes of group q: a warp store covers 8 rows x 64 contiguous
         * bytes (whole 32-byte sectors) instead of 8 rows x 16 bytes. The
         * arithmetic (fp32 d + bias, one rounding) is the pair path's. */
        OutT *y = static_cast<OutT *>(p.y) + (long long)row * p.ldy + col0 + 8 * q;
        OutT *y8 = y + 8 * p.ldy;
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
        OutT *y = static_cast<OutT *>(p.y) + (long long)row * p.ldy + col0 + 2 * q;
        OutT *y8 = y + 8 * p.ldy;
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
            if (p.accumulate) {
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
        store_two<OutT>(p, row, col, d[OFF + 4 * j], d[OFF + 4 * j + 1], ba, bb);
        store_two<OutT>(p, row + 8, col, d[OFF + 4 * j + 2], d[OFF + 4 * j + 3], ba, bb);
    }
}

/* The activation of one row's pair (row r < m, columns col < n and col +
 * 1, which may be n) on its fp32 values t (bias included): GELU_AUX first
 * stores t into aux; GELU and GELU_AUX take gelu(t), DGELU and DGELU_BGRAD
 * t * gelu'(aux). */
template <typename OutT>
__device__ __forceinline__ void act_pair(const hgemm_params &p, int r, int col, float &a, float &b) {
    bool two = col + 1 < p.n;
    OutT *x = static_cast<OutT *>(p.aux) + (long long)r * p.aux_ld + col;
    if (p.epilogue == CGM_DEV_EPI_GELU_AUX) {
        if (two && p.aux_pairs) {
            store_pair(x, a, b);
        } else {
            from_float(a, x);
            if (two) from_float(b, x + 1);
        }
    }
    if (p.epilogue == CGM_DEV_EPI_GELU || p.epilogue == CGM_DEV_EPI_GELU_AUX) {
        a = cgm_dev_gelu(a);
        b = cgm_dev_gelu(b);
        return;
    }
    float2 g;
    if (two && p.aux_pairs) {
        g = pair_of(x);
    } else {
        g.x = to_float(x[0]);
        g.y = two ? to_float(x[1]) : 0.f;
    }
    a *= cgm_dev_dgelu(g.x);
    b *= cgm_dev_dgelu(g.y);
}

/* epilogue's form in the kernels with_epilogue<OutT> (p.epilogue not 0,
 * no accumulate): the 64 x 8NJ block of Y at (row0, col0) in d[OFF ..],
 * per element t = d + bias, the activation (act_pair), one rounding, with
 * bounds checks. DGELU_BGRAD: warp w's rows row0 + 16 w .. + 15 are one
 * group (row0 is a multiple of 64); per column pair the thread sums its two
 * rows' products (rows past m count 0), the 8 lanes of a column (lanes q,
 * q + 4, .., q + 28) add theirs by a fixed butterfly (xor 4, 8, 16), and
 * lanes 0-3 store the group's column sums into its slot of bgrad_ws: each
 * slot is written by one warp, always in the same order. */
template <typename OutT, int OFF, int NJ>
__device__ __forceinline__ void epilogue_act(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    int t = threadIdx.x % 128;
    int q = t % 4;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    const OutT *bias = static_cast<const OutT *>(p.bias);
    const bool grad = p.epilogue == CGM_DEV_EPI_DGELU_BGRAD;
    const int group0 = row0 + 16 * (t / 32);
    float *slot = grad && group0 < p.m && t % 32 < 4 ? p.bgrad_ws + (long long)(group0 / 16) * p.bgrad_stride
                                                      : nullptr;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        int col = col0 + 8 * j + 2 * q;
        float ba, bb;
        bias_pair(p, bias, col, ba, bb);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int r = row + 8 * h;
            float a = d[OFF + 4 * j + 2 * h] + ba, b = d[OFF + 4 * j + 2 * h + 1] + bb;
            if (r < p.m && col < p.n) {
                act_pair<OutT>(p, r, col, a, b);
                store_two<OutT>(p, r, col, a, b, 0.f, 0.f);
                s0 += a;
                s1 += col + 1 < p.n ? b : 0.f;
            }
        }
        if (grad) { /* warp-uniform */
#pragma unroll
            for (int lanes = 4; lanes < 32; lanes *= 2) {
                s0 += __shfl_xor_sync(0xFFFFFFFFu, s0, lanes);
                s1 += __shfl_xor_sync(0xFFFFFFFFu, s1, lanes);
            }
            if (slot && col < p.n) {
                slot[col] = s0;
                if (col + 1 < p.n) slot[col + 1] = s1;
            }
        }
    }
}

/* The epilogue of a 64 x 8NJ block: epilogue_plain, or epilogue_act in the
 * kernels with_epilogue<T> (out_type, config.cuh). */
template <typename OutT, int OFF, int NJ, bool kButterfly>
__device__ __forceinline__ void epilogue(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    if constexpr (out_type<OutT>::act)
        epilogue_act<typename out_type<OutT>::type, OFF, NJ>(p, d, row0, col0);
    else
        epilogue_plain<OutT, OFF, NJ, kButterfly>(p, d, row0, col0);
}

} // namespace

#endif
