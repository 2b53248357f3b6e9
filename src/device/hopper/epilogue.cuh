/* The Hopper GEMM's epilogue: bias, accumulate (Y +=), conversion to the
 * output dtype and the stores, straight from the consumer's accumulator
 * registers, or in the cooperative kernels (a 16-bit Y without accumulate)
 * through shared memory, then by TMA stores or, where TMA cannot address
 * Y, by each warp's row stores (epilogue_smem). From registers, interior
 * tiles of a 16-bit Y without accumulate are transposed inside each quad
 * of lanes so that a warp stores whole 32-byte sectors; other interior
 * tiles store pairs, edge tiles check bounds. The fused reduce-scatter's
 * addends are added before this (addends.cuh).
 * The kernels whose output type is with_epilogue<T> (config.cuh) run
 * epilogue_act instead: bias, then GELU / GELU_AUX / DGELU / DGELU_BGRAD
 * (commgemm.h "Epilogues") in fp32, one rounding, and DGELU_BGRAD's
 * per-16-row column partials; its interior tiles move Y and aux in
 * 16-byte vectors the same way (fp32: pairs). The transpose also serves
 * the other way: a lane's 16 loaded bytes of aux become its fragment's
 * pairs (its own inverse). */
#ifndef COMMGEMM_HOPPER_EPILOGUE_CUH
#define COMMGEMM_HOPPER_EPILOGUE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <float.h>
#include <stdint.h>

#include "device/epilogue.cuh"
#include "device/hopper/config.cuh"
#include "device/hopper/ptx.cuh"

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
 * group q (and back: the transpose is its own inverse). Two forms:
 *   kButterfly (the cooperative kernels, and epilogue_act's fast path in
 *     both variants): two butterfly stages (lane masks
 *     2, then 1); in stage m, lanes q and q ^ m swap the words whose index
 *     differs from the lane in bit m, so word g of lane q ends as word q of
 *     lane g. Selects on the lane's bits only, constant shuffle masks: no
 *     branches (the rotating form compiled to branches and convergence
 *     barriers around every shuffle in the cooperative epilogue).
 *   otherwise (the plain ping-pong kernels, where the butterfly form
 *     spilled):
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

/* GELU (tanh form) and its derivative in fp32 for the fused epilogue, by
 * the special function unit: with u = sqrt(2/pi) (t + 0.044715 t^3),
 * 0.5 (1 + tanh u) = 1 / (1 + e^-2u), so
 *   gelu(t)  = t / (1 + e^-2u)
 *   gelu'(t) = s + 2 sqrt(2/pi) t (1 + 3 0.044715 t^2) e r^2
 * with e = e^-2|u|, r = 1 / (1 + e), s = r (t >= 0) or e r (t < 0): the
 * same function as cgm_dev_gelu / cgm_dev_dgelu (device/epilogue.cuh),
 * without cancellation (1 - tanh^2 u = 4 e r^2), from ex2.approx and
 * rcp.approx (a few fp32 ulp; 2^x of the scaled argument) instead of
 * tanhf. +-inf and NaN come out as from the tanhf form (the slope's
 * factor t (1 + ..) is clamped to finite values: 0 where e is 0).
 * Products that later sums use are __fmul_rn: the same bits in every path
 * (no contraction). */
constexpr float kGelu2uLog2e = 2.302208198144325f;   /* 2 sqrt(2/pi) / ln 2 */
constexpr float kGelu2uLog2eA = 0.1029432395800235f; /* that * 0.044715 */
constexpr float kDgeluC2 = 1.5957691216057308f;      /* 2 sqrt(2/pi) */
constexpr float kDgeluC2A3 = 0.21406444881780076f;   /* that * 3 * 0.044715 */

__device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float gelu_fast(float t) {
    float z = t * fmaf(kGelu2uLog2eA, t * t, kGelu2uLog2e); /* 2u / ln 2 */
    return t * rcp_approx(1.0f + ex2_approx(-z));
}

__device__ __forceinline__ float dgelu_fast(float t) {
    float t2 = t * t;
    float z = t * fmaf(kGelu2uLog2eA, t2, kGelu2uLog2e);
    float e = ex2_approx(-fabsf(z));
    float r = rcp_approx(1.0f + e);
    float er = __fmul_rn(e, r);
    float s = t >= 0.0f ? r : er;
    float tq = __fmul_rn(t, fmaf(kDgeluC2A3, t2, kDgeluC2));
    tq = fminf(fmaxf(tq, -FLT_MAX), FLT_MAX); /* inf only where e is 0: not inf * 0 */
    return __fadd_rn(s, __fmul_rn(tq, __fmul_rn(er, r)));
}

/* The activation of one row's pair (row r < m, columns col < n and col +
 * 1, which may be n) on its fp32 values t (bias included): GELU_AUX first
 * stores t into aux; GELU and GELU_AUX take gelu(t), DGELU and DGELU_BGRAD
 * t * gelu'(aux). The checked path's; act_forward and act_backward compute
 * the same. */
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
        a = gelu_fast(a);
        b = gelu_fast(b);
        return;
    }
    float2 g;
    if (two && p.aux_pairs) {
        g = pair_of(x);
    } else {
        g.x = to_float(x[0]);
        g.y = two ? to_float(x[1]) : 0.f;
    }
    a = __fmul_rn(a, dgelu_fast(g.x));
    b = __fmul_rn(b, dgelu_fast(g.y));
}

/* DGELU_BGRAD's column sums of one warp's 16 rows over 64 columns (8
 * column groups j): on entry v[2 j + c] is this lane's sum of its two rows
 * (row, row + 8; 0 for a row past m) at column 8 j + 2 q + c; on return
 * v[0], v[1] are the warp's sums of columns 2 lane, 2 lane + 1. A
 * reduce-scatter over the 8 lanes of each q (lane masks 16, 8, 4; each
 * stage keeps the half of the columns named by the lane's bit): 14
 * shuffles instead of 3 per value, and each column's sum is the same tree
 * of additions in every tile, path and variant. */
template <int kMask>
__device__ __forceinline__ void bgrad_stage(float (&v)[16], int lane) {
    constexpr int half = kMask / 2; /* values kept */
    const bool hi = (lane & kMask) != 0;
#pragma unroll
    for (int i = 0; i < half; i++) {
        float got = __shfl_xor_sync(0xFFFFFFFFu, hi ? v[i] : v[i + half], kMask);
        v[i] = __fadd_rn(hi ? v[i + half] : v[i], got);
    }
}
__device__ __forceinline__ void bgrad_reduce8(float (&v)[16], int lane) {
    bgrad_stage<16>(v, lane); /* constant trip counts: v stays in registers */
    bgrad_stage<8>(v, lane);
    bgrad_stage<4>(v, lane);
}

/* One batch of the fast path: 4 column groups (32 columns) of this
 * lane's rows row and row + 8, as va[2 g + c], vb[2 g + c] (column
 * 8 g + 2 q + c). 16-bit types: ptr is the row's column 8 q and the quad
 * transposes (quad_transpose) so that each lane moves the 16 bytes of
 * group q; fp32: ptr is column 2 q, pairs. ld8: 8 rows of the matrix. */
template <typename T> struct batch_raw { /* 16-bit: the lane's 16 bytes per row */
    uint4 a, b;
};
template <> struct batch_raw<float> { /* fp32: the lane's pair per group and row */
    float2 a[4], b[4];
};

template <typename T>
__device__ __forceinline__ batch_raw<T> load_batch(const T *ptr, long long ld8) {
    batch_raw<T> w;
    if constexpr (sizeof(T) == 2) {
        w.a = *reinterpret_cast<const uint4 *>(ptr);
        w.b = *reinterpret_cast<const uint4 *>(ptr + ld8);
    } else {
#pragma unroll
        for (int g = 0; g < 4; g++) {
            w.a[g] = pair_of(ptr + 8 * g);
            w.b[g] = pair_of(ptr + ld8 + 8 * g);
        }
    }
    return w;
}

__device__ __forceinline__ float2 unpack_pair(__nv_bfloat16 *, uint32_t w) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&w));
}
__device__ __forceinline__ float2 unpack_pair(__half *, uint32_t w) {
    return __half22float2(*reinterpret_cast<__half2 *>(&w));
}

/* A loaded batch (load_batch) as the lane's fragment values. */
template <typename T>
__device__ __forceinline__ void batch_values(const batch_raw<T> &w, int q, float (&va)[8], float (&vb)[8]) {
    if constexpr (sizeof(T) == 2) {
        uint32_t xa[4] = {w.a.x, w.a.y, w.a.z, w.a.w}, xb[4] = {w.b.x, w.b.y, w.b.z, w.b.w};
        quad_transpose<true>(xa, q);
        quad_transpose<true>(xb, q);
#pragma unroll
        for (int g = 0; g < 4; g++) {
            float2 fa = unpack_pair((T *)nullptr, xa[g]), fb = unpack_pair((T *)nullptr, xb[g]);
            va[2 * g] = fa.x, va[2 * g + 1] = fa.y, vb[2 * g] = fb.x, vb[2 * g + 1] = fb.y;
        }
    } else {
#pragma unroll
        for (int g = 0; g < 4; g++) {
            va[2 * g] = w.a[g].x, va[2 * g + 1] = w.a[g].y, vb[2 * g] = w.b[g].x, vb[2 * g + 1] = w.b[g].y;
        }
    }
}

template <typename T>
__device__ __forceinline__ void store_batch(T *ptr, long long ld8, int q, const float (&va)[8], const float (&vb)[8]) {
    if constexpr (sizeof(T) == 2) {
        uint32_t wa[4], wb[4];
#pragma unroll
        for (int g = 0; g < 4; g++) {
            wa[g] = pack_pair((T *)nullptr, va[2 * g], va[2 * g + 1]);
            wb[g] = pack_pair((T *)nullptr, vb[2 * g], vb[2 * g + 1]);
        }
        quad_transpose<true>(wa, q);
        quad_transpose<true>(wb, q);
        *reinterpret_cast<uint4 *>(ptr) = make_uint4(wa[0], wa[1], wa[2], wa[3]);
        *reinterpret_cast<uint4 *>(ptr + ld8) = make_uint4(wb[0], wb[1], wb[2], wb[3]);
    } else {
#pragma unroll
        for (int g = 0; g < 4; g++) {
            store_pair(ptr + 8 * g, va[2 * g], va[2 * g + 1]);
            store_pair(ptr + ld8 + 8 * g, vb[2 * g], vb[2 * g + 1]);
        }
    }
}

/* The bias of a batch: ba[2 g + c] of column 8 g + 2 q + c past col
 * (0 without a bias). */
template <typename OutT>
__device__ __forceinline__ void bias_batch(const OutT *bias, int col, float (&ba)[8]) {
#pragma unroll
    for (int i = 0; i < 8; i++) ba[i] = bias ? to_float(bias[col + 8 * (i / 2) + i % 2]) : 0.f;
}

/* The fast path's addresses: this lane's row and row + 8 of a matrix
 * (ld elements per row) at the tile's column col0 and the lane's offset
 * in a batch (8 q for 16-bit types, 2 q for fp32). */
template <typename T>
__device__ __forceinline__ T *lane_at(void *base, long long ld, int row, int col0, int q) {
    return static_cast<T *>(base) + (long long)row * ld + col0 + (sizeof(T) == 2 ? 8 * q : 2 * q);
}

/* The fast path of GELU and GELU_AUX (epilogue_act): per batch of 4
 * column groups, t = d + bias, GELU_AUX's aux = t, Y = gelu(t), each
 * stored by store_batch; the next batch's bias is loaded before this
 * batch's stores. */
template <typename OutT, int OFF, int NJ>
__device__ __forceinline__ void act_forward(const hgemm_params &p, float (&d)[128], int row, int col0, int q) {
    const OutT *bias = static_cast<const OutT *>(p.bias);
    const bool aux_out = p.epilogue == CGM_DEV_EPI_GELU_AUX;
    OutT *y = lane_at<OutT>(p.y, p.ldy, row, col0, q);
    OutT *x = aux_out ? lane_at<OutT>(p.aux, p.aux_ld, row, col0, q) : nullptr;
    float ba[8];
    bias_batch(bias, col0 + 2 * q, ba);
#pragma unroll
    for (int jb = 0; jb < NJ / 4; jb++) {
        float ta[8], tb[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            ta[i] = d[OFF + 16 * jb + 4 * (i / 2) + i % 2] + ba[i];
            tb[i] = d[OFF + 16 * jb + 4 * (i / 2) + 2 + i % 2] + ba[i];
        }
        if (jb + 1 < NJ / 4) bias_batch(bias, col0 + 32 * (jb + 1) + 2 * q, ba);
        if (aux_out) store_batch<OutT>(x + 32 * jb, 8 * p.aux_ld, q, ta, tb);
#pragma unroll
        for (int i = 0; i < 8; i++) ta[i] = gelu_fast(ta[i]), tb[i] = gelu_fast(tb[i]);
        store_batch<OutT>(y + 32 * jb, 8 * p.ldy, q, ta, tb);
    }
}

/* The fast path of DGELU and DGELU_BGRAD: per batch, Y = t * gelu'(aux)
 * with aux loaded a batch ahead (load_batch), and every two batches the
 * warp's column sums (bgrad_reduce8) stored as the lanes' pairs of the
 * group's slot: 64 columns, 256 contiguous bytes. */
template <typename OutT, int OFF, int NJ>
__device__ __forceinline__ void act_backward(const hgemm_params &p, float (&d)[128], int row, int col0, int q,
                                             float *slot) {
    const OutT *bias = static_cast<const OutT *>(p.bias);
    const int lane = threadIdx.x % 32;
    OutT *y = lane_at<OutT>(p.y, p.ldy, row, col0, q);
    const OutT *x = lane_at<OutT>(p.aux, p.aux_ld, row, col0, q);
    const long long aux8 = 8 * p.aux_ld;
    batch_raw<OutT> next = load_batch(x, aux8);
    float ba[8], v[16];
    bias_batch(bias, col0 + 2 * q, ba);
#pragma unroll
    for (int jb = 0; jb < NJ / 4; jb++) {
        float ga[8], gb[8];
        batch_values<OutT>(next, q, ga, gb);
        if (jb + 1 < NJ / 4) next = load_batch(x + 32 * (jb + 1), aux8);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            ga[i] = __fmul_rn(d[OFF + 16 * jb + 4 * (i / 2) + i % 2] + ba[i], dgelu_fast(ga[i]));
            gb[i] = __fmul_rn(d[OFF + 16 * jb + 4 * (i / 2) + 2 + i % 2] + ba[i], dgelu_fast(gb[i]));
        }
        if (jb + 1 < NJ / 4) bias_batch(bias, col0 + 32 * (jb + 1) + 2 * q, ba);
        store_batch<OutT>(y + 32 * jb, 8 * p.ldy, q, ga, gb);
        if (slot) { /* warp-uniform */
#pragma unroll
            for (int i = 0; i < 8; i++) v[8 * (jb % 2) + i] = __fadd_rn(ga[i], gb[i]);
            if (jb % 2 == 1) {
                bgrad_reduce8(v, lane);
                *reinterpret_cast<float2 *>(slot + col0 + 64 * (jb / 2) + 2 * lane) = make_float2(v[0], v[1]);
            }
        }
    }
}

/* The checked path of epilogue_act (edge tiles, or stores and aux loads
 * that cannot be vectors): per column pair the activation (act_pair) and
 * the stores with bounds checks; DGELU_BGRAD's sums of the pairs of 8
 * column groups go through bgrad_reduce8 as in act_backward (a row or
 * column past the end counts 0), the lanes storing the columns below n. */
template <typename OutT, int OFF, int NJ>
__device__ __forceinline__ void act_checked(const hgemm_params &p, float (&d)[128], int row, int col0, int q,
                                            float *slot) {
    const OutT *bias = static_cast<const OutT *>(p.bias);
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int b = 0; b < NJ / 8; b++) {
        float v[16];
#pragma unroll
        for (int jj = 0; jj < 8; jj++) {
            const int j = 8 * b + jj, col = col0 + 8 * j + 2 * q;
            float ba, bb, s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
            bias_pair(p, bias, col, ba, bb);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int r = row + 8 * h;
                float a = d[OFF + 4 * j + 2 * h] + ba, c = d[OFF + 4 * j + 2 * h + 1] + bb;
                if (r < p.m && col < p.n) {
                    act_pair<OutT>(p, r, col, a, c);
                    store_two<OutT>(p, r, col, a, c, 0.f, 0.f);
                    s[h][0] = a;
                    s[h][1] = col + 1 < p.n ? c : 0.f;
                }
            }
            v[2 * jj] = __fadd_rn(s[0][0], s[1][0]);
            v[2 * jj + 1] = __fadd_rn(s[0][1], s[1][1]);
        }
        if (p.epilogue == CGM_DEV_EPI_DGELU_BGRAD) { /* warp-uniform */
            bgrad_reduce8(v, lane);
            const int col = col0 + 64 * b + 2 * lane;
            if (slot && col < p.n) {
                slot[col] = v[0];
                if (col + 1 < p.n) slot[col + 1] = v[1];
            }
        }
    }
}

/* epilogue's form in the kernels with_epilogue<OutT> (p.epilogue not 0,
 * no accumulate): the 64 x 8NJ block of Y at (row0, col0) in d[OFF ..],
 * per element t = d + bias, the activation, one rounding. Interior tiles
 * whose Y (and aux) allow vectors (16-bit: vector16 and aux 16-byte
 * aligned with aux_ld % 8 == 0; fp32: pairs) take the fast path
 * (act_forward, act_backward: no bounds checks, whole 32-byte sectors),
 * others act_checked; both compute the same values. DGELU_BGRAD: warp w's
 * rows row0 + 16 w .. + 15 are one group (row0 is a multiple of 64);
 * bgrad_reduce8 sums each column of the group by one fixed tree and the
 * warp's lanes store the sums into the group's slot of bgrad_ws: each slot
 * is written by one warp, always in the same order. */
template <typename OutT, int OFF, int NJ>
__device__ __forceinline__ void epilogue_act(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    static_assert(NJ % 8 == 0, "bgrad_reduce8 takes 8 column groups");
    const int t = threadIdx.x % 128, q = t % 4;
    const int group0 = row0 + 16 * (t / 32), row = group0 + (t % 32) / 4;
    const bool forward = p.epilogue == CGM_DEV_EPI_GELU || p.epilogue == CGM_DEV_EPI_GELU_AUX;
    float *slot = p.epilogue == CGM_DEV_EPI_DGELU_BGRAD && group0 < p.m
                      ? p.bgrad_ws + (long long)(group0 / 16) * p.bgrad_stride
                      : nullptr;
    bool fast = row0 + 64 <= p.m && col0 + 8 * NJ <= p.n && (sizeof(OutT) == 2 ? p.vector16 : p.vector_store);
    if (p.epilogue != CGM_DEV_EPI_GELU)
        fast = fast && (sizeof(OutT) == 2 ? p.aux_ld % 8 == 0 && (uintptr_t)p.aux % 16 == 0 : p.aux_pairs);
    if (fast && forward)
        act_forward<OutT, OFF, NJ>(p, d, row, col0, q);
    else if (fast)
        act_backward<OutT, OFF, NJ>(p, d, row, col0, q, slot);
    else
        act_checked<OutT, OFF, NJ>(p, d, row, col0, q, slot);
}

/* The staging of a 16-bit Y in the cooperative plain kernels (epilogue_smem):
 * box b of a consumer's 64 x 256 block (columns col0 + 64 b ..) into the
 * staging buffer buf (8 KiB, 1024-byte aligned) in TMA's 128B-swizzled
 * layout, element (r, c) at byte r * 128 + ((c / 8) ^ (r % 8)) * 16 +
 * (c % 8) * 2. Each warp writes its own 16 rows (16 w ..) by stmatrix,
 * per instruction the 8 x 8 matrices of two column groups, rows and rows
 * + 8 (the swizzle makes the eight rows' addresses hit distinct banks).
 * The values are epilogue_plain's: fp32 d + bias, one rounding. */
template <typename OutT>
__device__ __forceinline__ void stage_box(const hgemm_params &p, const OutT *bias, const float (&d)[128],
                                          uint32_t buf, int b, int col0) {
    const int t = threadIdx.x % 128, lane = t % 32, q = t % 4;
    /* this lane's stmatrix row address: row lane % 8 (+ 8) of its warp's
     * 16, column group lane / 16 of each pair */
    const int srow = 16 * (t / 32) + (lane % 8) + 8 * ((lane / 8) & 1);
    const uint32_t row_addr = buf + (uint32_t)srow * 128;
    const int sgroup = lane / 16, sx = lane % 8;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        uint32_t r[4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int j = 8 * b + 2 * i + h;
            float ba, bb;
            bias_pair<OutT>(p, bias, col0 + 8 * j + 2 * q, ba, bb);
            r[2 * h] = pack_pair((OutT *)nullptr, d[4 * j] + ba, d[4 * j + 1] + bb);
            r[2 * h + 1] = pack_pair((OutT *)nullptr, d[4 * j + 2] + ba, d[4 * j + 3] + bb);
        }
        stmatrix_x4(row_addr + (uint32_t)(((2 * i + sgroup) ^ sx) << 4), r[0], r[1], r[2], r[3]);
    }
}

/* A staged box (stage_box) from shared memory to Y where TMA cannot address
 * Y (y_staged): each warp its own 16 rows (the ones it staged, so a warp
 * barrier orders its writes and these reads), rows below m, columns c0 ..
 * below n (at most 64; c0 < n), each row one contiguous segment per store
 * instruction:
 *   4-byte pairs (lane l columns 2l, 2l + 1) where the row's address is
 *     4-byte aligned and the column count even; the words are read eight
 *     rows ahead of their stores (128 bytes per load instruction);
 *   else 2-byte elements (lane l columns l and l + 32), read at the row.
 * Rows 2k and 2k + 1 differ in alignment exactly when ldy is odd: then
 * they alternate. Both forms read shared memory without bank conflicts
 * and write the same 32-byte sectors. The thread index is read here
 * (thread_index): what derives from it is not hoisted out of the tile
 * loop, where it would hold registers through the main loop (the
 * promoting kernels have none to spare). */
template <typename OutT>
__device__ __forceinline__ void store_staged_box(const hgemm_params &p, uint32_t buf, int row0, int c0) {
    static_assert(sizeof(OutT) == 2, "16-bit Y");
    const int t = thread_index() % 128, warp = t / 32, lane = t % 32;
    const int r0 = row0 + 16 * warp, nv = p.n - c0 < 64 ? p.n - c0 : 64;
    const int rows = p.m - r0 < 16 ? p.m - r0 : 16;
    const uint32_t srow = buf + (uint32_t)(16 * warp) * 128; /* the warp's row 0 */
    char *y0 = static_cast<char *>(p.y) + 2 * ((long long)r0 * p.ldy + c0);
    char *ye = y0 + 2 * lane; /* the lane's element of row 0 */
    const long long ld = 2 * p.ldy;
    const bool aligned0 = ((uintptr_t)y0 & 2) == 0, even = nv % 2 == 0;
    const bool pairs_even = even && aligned0, pairs_odd = even && aligned0 == (p.ldy % 2 == 0);
    const bool pair_in = 2 * lane < nv, lo_in = lane < nv, hi_in = lane + 32 < nv;
#pragma unroll
    for (int i0 = 0; i0 < 16; i0 += 8) {
        uint32_t w[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int i = i0 + k;
            w[k] = ld_shared_u32(srow + (uint32_t)(128 * i + (((lane / 4) ^ (i % 8)) << 4) + 4 * (lane % 4)));
        }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int i = i0 + k;
            if (i >= rows) return; /* warp-uniform, as every branch here */
            char *yr = ye + i * ld;
            if (i % 2 ? pairs_odd : pairs_even) {
                if (pair_in) *reinterpret_cast<uint32_t *>(yr + 2 * lane) = w[k];
            } else {
                const uint32_t at = srow + (uint32_t)(128 * i + 2 * (lane % 8));
                const uint32_t lo = ld_shared_u16(at + (uint32_t)(((lane / 8) ^ (i % 8)) << 4));
                const uint32_t hi = ld_shared_u16(at + (uint32_t)(((lane / 8 + 4) ^ (i % 8)) << 4));
                if (lo_in) *reinterpret_cast<uint16_t *>(yr) = (uint16_t)lo;
                if (hi_in) *reinterpret_cast<uint16_t *>(yr + 64) = (uint16_t)hi;
            }
        }
    }
}

/* The cooperative plain kernels' epilogue of a 16-bit Y without accumulate
 * through shared memory: the consumer's 64 x 256 block in four boxes of 64
 * columns, through its two staging buffers (stage: 2 x kBox16, 1024-byte
 * aligned) in turn, each box written by stage_box. Then
 *   kTma (y_tma: Y 16-byte aligned, ldy % 8 == 0): per box the warpgroup
 *     first waits until the buffer's previous TMA store has read it (the
 *     leader's bulk_wait_read, then named barrier bar); after stage_box a
 *     fence for the async proxy, the barrier, and the leader's TMA store,
 *     which clips rows past m and columns past n, so edge tiles take this
 *     path too (a box wholly past them is not stored); the leader waits
 *     for its stores at the kernel's end (bulk_wait_all);
 *   otherwise (y_staged: TMA cannot address Y): each warp stores the rows
 *     it staged itself (store_staged_box) after a warp barrier (__syncwarp)
 *     between its stmatrix writes and its reads; no warpgroup barrier.
 *     With one more warp barrier before the first box, every buffer is
 *     rewritten only after a barrier that follows the warp's reads of its
 *     last contents (box b - 2's reads before box b - 1's barrier, the
 *     previous tile's before this tile's first). Boxes wholly past n are
 *     neither staged nor stored; rows past m are staged, not stored. */
template <typename OutT, bool kTma>
__device__ __forceinline__ void epilogue_smem(const hgemm_params &p, const CUtensorMap *map_y, uint32_t stage,
                                              int bar, float (&d)[128], int row0, int col0) {
    const bool leader = threadIdx.x % 128 == 0;
    const OutT *bias = static_cast<const OutT *>(p.bias);
    if constexpr (!kTma) __syncwarp(); /* the previous tile's reads before this tile's writes */
#pragma unroll
    for (int b = 0; b < 4; b++) {
        const uint32_t buf = stage + (uint32_t)(b & 1) * kBox16;
        if constexpr (kTma) {
            if (leader) bulk_wait_read<1>();
            warpgroup_sync(bar);
        } else if (col0 + 64 * b >= p.n) {
            return;
        }
        stage_box<OutT>(p, bias, d, buf, b, col0);
        if constexpr (kTma) {
            fence_proxy_async_smem();
            warpgroup_sync(bar);
            if (leader) {
                if (row0 < p.m && col0 + 64 * b < p.n) tma_store_2d(map_y, buf, col0 + 64 * b, row0);
                bulk_commit(); /* a group either way: bulk_wait_read<1> counts boxes */
            }
        } else {
            __syncwarp();
            store_staged_box<OutT>(p, buf, row0, col0 + 64 * b);
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

/* The cooperative kernels' epilogue of a consumer's 64 x 256 block: with a
 * 16-bit Y and no fused epilogue epilogue_smem (by TMA with y_tma, else
 * staged with y_staged), else epilogue. whole: the block is a whole tile's,
 * run by all four warps of the consumer together. In the split kernels
 * (kSplit) the parts of a tail tile end in split_finish, after which the
 * warp that arrived last runs the tile's epilogue alone while the other
 * warps of its warpgroup go on to their next unit: the TMA way's warpgroup
 * barriers would pair warps of different tiles, and the staged way would
 * write buffers the leader's TMA stores of an earlier whole tile may still
 * read, so such a block (whole false) is stored from registers. */
template <typename OutT, bool kSplit>
__device__ __forceinline__ void epilogue_coop(const hgemm_params &p, const CUtensorMap *map_y, uint32_t stage, int bar,
                                              float (&d)[128], int row0, int col0, bool whole) {
    if constexpr (!out_type<OutT>::act && sizeof(OutT) == 2) {
        if (!kSplit || whole) {
            if (p.y_tma) {
                epilogue_smem<OutT, true>(p, map_y, stage, bar, d, row0, col0);
                return;
            }
            if (p.y_staged) {
                epilogue_smem<OutT, false>(p, map_y, stage, bar, d, row0, col0);
                return;
            }
        }
    }
    epilogue<OutT, 0, 32, true>(p, d, row0, col0);
}

} // namespace

#endif
