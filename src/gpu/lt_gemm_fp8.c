/* cuBLASLt FP8 GEMMs: the rules of gpu.h's cgm_lt_gemm_args checked before
 * cuBLASLt sees them, the descriptor attributes, and X's scales of a row
 * chunk.
 *
 * In lt_gemm.c's mapping (row-major TN: Y^T = W . X^T), cuBLASLt's A is W
 * and its B is X, its M is our n and its N our m. So W takes A's scale
 * attributes (CUBLASLT_MATMUL_DESC_A_SCALE_*) and X takes B's. With block
 * scaling cuBLASLt (cuBLAS 12.9+, Hopper) wants:
 *   A (W), BLK128x128_32F: K-major, L4 x ceil(M / 128), the stride between
 *     columns a multiple of 4: w_scale[j * L4 + b] for W rows 128j.. and
 *     k-block b;
 *   B (X), VEC128_32F: N-major, N x L: x_scale[b * m + i] for X row i.
 * (L = ceil(K / 128), L4 = L rounded up to a multiple of 4; M and N
 * multiples of 4; scale pointers 16-byte aligned; D not fp8.) */
#include <string.h>

#include "gpu/lt_gemm_fp8.h"

bool cgm_lt_is_fp8(cgm_dtype dtype) {
    return dtype == CGM_DTYPE_FP8_E4M3 || dtype == CGM_DTYPE_FP8_E5M2;
}

cudaDataType_t cgm_lt_cuda_dtype(cgm_dtype dtype) {
    if (dtype == CGM_DTYPE_FP8_E4M3) return CUDA_R_8F_E4M3;
    if (dtype == CGM_DTYPE_FP8_E5M2) return CUDA_R_8F_E5M2;
    return cgm_cuda_dtype(dtype);
}

cgm_dtype cgm_lt_w_dtype(const cgm_lt_gemm_args *g) {
    return g->w_dtype == CGM_DTYPE_FP32 ? g->in_dtype : g->w_dtype;
}

cgm_dtype cgm_lt_c_dtype(const cgm_lt_gemm_args *g) {
    if (!cgm_lt_is_fp8(g->out_dtype)) return g->out_dtype;
    return g->bias && g->bias_dtype == CGM_DTYPE_FP16 ? CGM_DTYPE_FP16
                                                     : CGM_DTYPE_BF16;
}

cgm_dtype cgm_lt_bias_dtype(const cgm_lt_gemm_args *g) {
    if (!cgm_lt_is_fp8(g->in_dtype)) return g->out_dtype;
    if (g->out_dtype == CGM_DTYPE_FP16) return CGM_DTYPE_FP16;
    if (cgm_lt_is_fp8(g->out_dtype)) return cgm_lt_c_dtype(g);
    return CGM_DTYPE_BF16;
}

static int64_t k_blocks(int64_t k) { return (k + 127) / 128; }

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Inputs other than fp8: every fp8 field zeroed (from_call leaves
 * bias_dtype set: the bias is out_dtype there). */
static cgm_status check_plain(const cgm_lt_gemm_args *g) {
    if (cgm_lt_is_fp8(g->out_dtype))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: an %s output from %s inputs: "
                         "cuBLASLt writes fp8 from fp8 inputs only; ask "
                         "for a bf16, fp16 or fp32 output",
                         cgm_dtype_name(g->out_dtype),
                         cgm_dtype_name(g->in_dtype));
    bool w_other = g->w_dtype != CGM_DTYPE_FP32 && g->w_dtype != g->in_dtype;
    if (w_other || g->scaling != CGM_LT_SCALE_NONE || g->x_scale ||
        g->w_scale || g->x_scale_rows || g->y_scale || g->amax_y ||
        g->fast_accum)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: fp8 settings with %s inputs (w_dtype "
                         "%s, scaling %d, x/w/y scale %s/%s/%s, x_scale_rows "
                         "%lld, amax %s, fast_accum %d): expected them "
                         "zeroed, as for every input but fp8",
                         cgm_dtype_name(g->in_dtype),
                         cgm_dtype_name(g->w_dtype), (int)g->scaling,
                         g->x_scale ? "set" : "NULL",
                         g->w_scale ? "set" : "NULL",
                         g->y_scale ? "set" : "NULL",
                         (long long)g->x_scale_rows,
                         g->amax_y ? "set" : "NULL", (int)g->fast_accum);
    return CGM_SUCCESS;
}

/* Layout and the dtypes of X, W, Y and the bias. */
static cgm_status check_fp8_types(const cgm_lt_gemm_args *g) {
    cgm_dtype x = g->in_dtype, w = cgm_lt_w_dtype(g), y = g->out_dtype;
    const char *xn = cgm_dtype_name(x), *wn = cgm_dtype_name(w);
    if (g->layout != CGM_LAYOUT_TN)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: fp8 inputs (%s x %s) in layout %s: "
                         "cuBLASLt's FP8 kernels on Hopper take layout TN "
                         "only (X [m, k] and W [n, k], both k-major); "
                         "transpose the operand that is not k-major",
                         xn, wn, cgm_layout_name(g->layout));
    if (!cgm_lt_is_fp8(w))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: W of %s with X of %s: expected W of "
                         "fp8_e4m3 or fp8_e5m2 (w_dtype; 0 means X's)",
                         wn, xn);
    if (x == CGM_DTYPE_FP8_E5M2 && w == CGM_DTYPE_FP8_E5M2)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: fp8_e5m2 x fp8_e5m2: cuBLASLt has no "
                         "FP8 kernel for two e5m2 operands (e4m3 x e4m3, "
                         "e4m3 x e5m2 and e5m2 x e4m3 are); quantize X or "
                         "W to e4m3");
    if (y == CGM_DTYPE_FP8_E5M2 && x != CGM_DTYPE_FP8_E5M2 &&
        w != CGM_DTYPE_FP8_E5M2)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: an fp8_e5m2 output from %s x %s: "
                         "cuBLASLt writes e5m2 only when an input is e5m2; "
                         "ask for fp8_e4m3, bf16, fp16 or fp32", xn, wn);
    if (!cgm_lt_is_fp8(y) && y != CGM_DTYPE_BF16 && y != CGM_DTYPE_FP16 &&
        y != CGM_DTYPE_FP32)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: output dtype %d: expected bf16, fp16, "
                         "fp32, fp8_e4m3 or fp8_e5m2", (int)y);
    if (cgm_lt_is_fp8(y) && (g->accumulate || g->addend))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: an %s output with %s: cuBLASLt adds "
                         "no C to an fp8 output (its C would be bf16 or "
                         "fp16); ask for a bf16, fp16 or fp32 output",
                         cgm_dtype_name(y),
                         g->accumulate ? "accumulate" : "an addend");
    if (g->bias && g->bias_dtype != cgm_lt_bias_dtype(g))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: a bias of %s with fp8 inputs and output "
                         "dtype %s: cuBLASLt takes a %s bias here (bf16 for "
                         "bf16 and fp32 outputs, fp16 for fp16, bf16 or "
                         "fp16 for fp8 outputs); convert the bias",
                         cgm_dtype_name(g->bias_dtype), cgm_dtype_name(y),
                         cgm_dtype_name(cgm_lt_bias_dtype(g)));
    return CGM_SUCCESS;
}

/* Scaling, the output's scale and amax, fast accumulation. */
static cgm_status check_fp8_scales(const cgm_lt_gemm_args *g) {
    bool fp8_out = cgm_lt_is_fp8(g->out_dtype);
    const char *yn = cgm_dtype_name(g->out_dtype);
    if (g->scaling != CGM_LT_SCALE_TENSOR && g->scaling != CGM_LT_SCALE_BLOCK)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: fp8 inputs with scaling %d: expected "
                         "CGM_LT_SCALE_TENSOR (%d) or CGM_LT_SCALE_BLOCK (%d)",
                         (int)g->scaling, (int)CGM_LT_SCALE_TENSOR,
                         (int)CGM_LT_SCALE_BLOCK);
    if ((g->y_scale || g->amax_y) && !fp8_out)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: %s with output dtype %s: cuBLASLt scales "
                         "and takes the amax of fp8 outputs only; leave it "
                         "NULL (compute the amax from Y) or ask for an fp8 "
                         "output", g->y_scale ? "y_scale" : "amax_y", yn);
    if (g->x_scale_rows != 0 && g->x_scale_rows != g->m)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: x_scale_rows %lld with m = %lld: one "
                         "call takes one group of X scales (x_scale_rows 0 "
                         "or m); make one call per group (cgm_lt_fp8_chunk)",
                         (long long)g->x_scale_rows, (long long)g->m);
    const void *ptrs[4] = {g->x_scale, g->w_scale, g->y_scale, g->amax_y};
    static const char *const names[4] = {"x_scale", "w_scale", "y_scale", "amax_y"};
    for (int i = 0; i < 4; i++)
        if (!aligned16(ptrs[i]))
            return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                             "cgm_lt_gemm: %s %% 16 = %u: cuBLASLt takes "
                             "scale and amax pointers 16-byte aligned only; "
                             "put each on its own 16 bytes (per-group "
                             "tensor scales at x_scale + 4 * group)",
                             names[i], (unsigned)((uintptr_t)ptrs[i] & 15u));
    if (g->scaling == CGM_LT_SCALE_TENSOR) return CGM_SUCCESS;
#if CUBLAS_VERSION < 120900
    return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                     "cgm_lt_gemm: fp8 block scaling needs cuBLAS 12.9 or "
                     "newer (built with %d); use tensor scaling or rebuild "
                     "with CUDA 12.9+", (int)CUBLAS_VERSION);
#else
    if (fp8_out || g->fast_accum)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: block scaling with %s: cuBLASLt's "
                         "block-scaled FP8 kernels write bf16, fp16 or fp32 "
                         "and have no fast accumulation; use tensor scaling "
                         "for that", fp8_out ? "an fp8 output" : "fast_accum");
    if (!g->x_scale || !g->w_scale)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: block scaling without %s: expected "
                         "device pointers to X's [ceil(k/128)][m] and W's "
                         "[ceil(n/128)][L4] fp32 scales (gpu.h)",
                         !g->x_scale ? "x_scale" : "w_scale");
    if (!aligned16(g->x_scale) || !aligned16(g->w_scale) || g->m % 4 ||
        g->n % 4)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: block scaling with m = %lld, n = %lld, "
                         "x_scale %% 16 = %u, w_scale %% 16 = %u: cuBLASLt "
                         "wants m and n multiples of 4 and 16-byte aligned "
                         "scales; chunk at multiples of 4 rows, pad n",
                         (long long)g->m, (long long)g->n,
                         (unsigned)((uintptr_t)g->x_scale & 15u),
                         (unsigned)((uintptr_t)g->w_scale & 15u));
    return CGM_SUCCESS;
#endif
}

cgm_status cgm_lt_check(const cgm_lt_gemm_args *g) {
    if (!cgm_lt_is_fp8(g->in_dtype)) return check_plain(g);
    cgm_status status = check_fp8_types(g);
    if (status == CGM_SUCCESS) status = check_fp8_scales(g);
    if (status != CGM_SUCCESS || g->m == 0 || g->n == 0 || g->k == 0)
        return status;
    if (g->n % 16)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: fp8 with n = %lld: cuBLASLt's FP8 "
                         "kernels want n (W's rows) a multiple of 16; pad W "
                         "with zero rows", (long long)g->n);
    if (g->k % 16 || g->ldx % 16 || g->ldw % 16 || !aligned16(g->x) ||
        !aligned16(g->w))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: fp8 with k = %lld, ldx = %lld, ldw = "
                         "%lld, X %% 16 = %u, W %% 16 = %u: cuBLASLt's FP8 "
                         "kernels want 16-byte rows: k, ldx and ldw multiples "
                         "of 16 and X, W 16-byte aligned; pad k with zeros",
                         (long long)g->k, (long long)g->ldx,
                         (long long)g->ldw, (unsigned)((uintptr_t)g->x & 15u),
                         (unsigned)((uintptr_t)g->w & 15u));
    return CGM_SUCCESS;
}

cgm_status cgm_lt_fp8_desc(cublasLtMatmulDesc_t desc, cgm_lt_scaling scaling,
                           bool fast_accum) {
    cgm_status status = CGM_SUCCESS;
    int8_t fast = fast_accum ? 1 : 0;
    CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
#if CUBLAS_VERSION >= 120900
    if (scaling == CGM_LT_SCALE_BLOCK) {
        int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F; /* W */
        int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;     /* X */
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode));
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode));
    }
#else
    (void)scaling;
#endif
fail:
    return status;
}

cgm_status cgm_lt_fp8_placeholders(cublasLtMatmulDesc_t desc, bool x_scale,
                                   bool w_scale, bool y_scale, bool amax) {
    /* Block scaling's heuristic wants the scale pointers set: these stand
     * in until each call sets its own (cgm_lt_fp8_pointers); nothing reads
     * them. */
    static _Alignas(16) float placeholder[4];
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.x_scale = x_scale ? placeholder : NULL;
    g.w_scale = w_scale ? placeholder : NULL;
    g.y_scale = y_scale ? placeholder : NULL;
    return cgm_lt_fp8_pointers(desc, &g, amax ? placeholder : NULL);
}

cgm_status cgm_lt_fp8_pointers(cublasLtMatmulDesc_t desc,
                               const cgm_lt_gemm_args *g, float *amax) {
    cgm_status status = CGM_SUCCESS;
    if (g->w_scale)
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->w_scale,
            sizeof g->w_scale));
    if (g->x_scale)
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->x_scale,
            sizeof g->x_scale));
    if (g->y_scale)
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &g->y_scale,
            sizeof g->y_scale));
    if (amax)
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &amax, sizeof amax));
fail:
    return status;
}

/* ---------------------------------------------------------- row chunks */

/* The group of X scales holding rows [row0, row0 + rows) of `whole`:
 * its index, first row and rows. Refuses a range outside whole's m or
 * across groups. */
static cgm_status chunk_group(const cgm_lt_gemm_args *whole, int64_t row0,
                              int64_t rows, int64_t *group, int64_t *first,
                              int64_t *group_rows) {
    int64_t per = whole->x_scale_rows > 0 ? whole->x_scale_rows : whole->m;
    if (row0 < 0 || rows < 1 || row0 > whole->m - rows)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_fp8_chunk: rows [%lld, %lld) of an X of m = "
                         "%lld rows: expected a non-empty range inside it",
                         (long long)row0, (long long)(row0 + rows),
                         (long long)whole->m);
    *group = row0 / per;
    *first = *group * per;
    *group_rows = whole->m - *first < per ? whole->m - *first : per;
    if ((row0 + rows - 1) / per != *group)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_fp8_chunk: rows [%lld, %lld) span the X "
                         "scale groups %lld..%lld of %lld rows: a chunk "
                         "takes the scales of one group; split it at "
                         "multiples of %lld rows",
                         (long long)row0, (long long)(row0 + rows),
                         (long long)*group, (long long)((row0 + rows - 1) / per),
                         (long long)per, (long long)per);
    return CGM_SUCCESS;
}

cgm_status cgm_lt_fp8_chunk(const cgm_lt_gemm_args *whole, int64_t row0,
                            int64_t rows, cgm_lt_gemm_args *chunk) {
    int64_t group = 0, first = 0, group_rows = 0;
    const float *scale = whole->x_scale;
    if (!cgm_lt_is_fp8(whole->in_dtype)) return CGM_SUCCESS;
    if (rows != 0 || row0 < 0 || row0 > whole->m) {
        cgm_status status = chunk_group(whole, row0, rows, &group, &first,
                                        &group_rows);
        if (status != CGM_SUCCESS) return status;
        int64_t blocks = k_blocks(whole->k);
        if (whole->scaling != CGM_LT_SCALE_BLOCK)
            scale = whole->x_scale ? whole->x_scale + CGM_LT_TENSOR_SCALE_STRIDE * group : NULL;
        else if (row0 == first && rows == group_rows)
            scale = whole->x_scale + blocks * first;
        else if (blocks <= 1)
            scale = whole->x_scale + row0;
        else
            return cgm_error(
                CGM_ERROR_NOT_SUPPORTED,
                "cgm_lt_fp8_chunk: rows [%lld, %lld) are part of the X scale "
                "group [%lld, %lld): with block scaling a group's scales are "
                "[ceil(k/128)][rows] (row-contiguous per k-block, as "
                "cuBLASLt's VEC128_32F takes them), so part of one is no "
                "pointer offset; copy it with cgm_lt_fp8_pack_x_scales or "
                "chunk at group bounds",
                (long long)row0, (long long)(row0 + rows), (long long)first,
                (long long)(first + group_rows));
    }
    chunk->x_scale = scale; /* chunk may be whole: written last */
    chunk->x_scale_rows = 0;
    return CGM_SUCCESS;
}

cgm_status cgm_lt_fp8_pack_x_scales(const cgm_lt_gemm_args *whole,
                                    int64_t row0, int64_t rows, float *dst,
                                    cudaStream_t stream,
                                    cgm_lt_gemm_args *chunk) {
    cgm_status status = CGM_SUCCESS;
    int64_t group = 0, first = 0, group_rows = 0;
    if (whole->scaling != CGM_LT_SCALE_BLOCK || !whole->x_scale)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_fp8_pack_x_scales: scaling %d%s: expected "
                         "block scaling (CGM_LT_SCALE_BLOCK) with x_scale set",
                         (int)whole->scaling,
                         whole->x_scale ? "" : " and no x_scale");
    if (!dst || !aligned16(dst))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_fp8_pack_x_scales: dst %p: expected 16-byte "
                         "aligned device memory of ceil(k/128) * rows floats",
                         (void *)dst);
    CGM_TRY(chunk_group(whole, row0, rows, &group, &first, &group_rows));
    int64_t blocks = k_blocks(whole->k);
    const float *src = whole->x_scale + blocks * first + (row0 - first);
    if (blocks > 0)
        CGM_CUDA_TRY(cudaMemcpy2DAsync(
            dst, (size_t)rows * sizeof(float), src,
            (size_t)group_rows * sizeof(float), (size_t)rows * sizeof(float),
            (size_t)blocks, cudaMemcpyDeviceToDevice, stream));
    chunk->x_scale = dst;
    chunk->x_scale_rows = 0;
fail:
    return status;
}
