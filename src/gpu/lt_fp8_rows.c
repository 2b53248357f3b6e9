/* An fp8 call's GEMMs over row ranges (lt_fp8_rows.h): W and X padded
 * where cuBLASLt's FP8 kernels want 16-byte rows and 16-row multiples,
 * the scales rearranged into cuBLASLt's layouts, and the outputs cuBLASLt
 * cannot write (fp8 from a staged result, a bias of another dtype)
 * finished by cgm_dev_fp8_finish. */
#include <string.h>

#include "device/fp8.h"
#include "gpu/lt_fp8_rows.h"
#include "gpu/lt_gemm_fp8.h"

static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

size_t cgm_fp8_round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

cgm_status cgm_fp8_put_slot(float *slot, const float *src, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemsetAsync(slot, 0, 4 * sizeof(float), stream));
    if (src)
        CGM_CUDA_TRY(cudaMemcpyAsync(slot, src, sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream));
fail:
    return status;
}

/* W as the call gives it suits cuBLASLt (16-byte rows, n a multiple of
 * 16), or it is copied with zero padding. */
static bool pad_w(const cgm_call *c) {
    return c->n % 16 || c->k % 16 || cgm_matrix_ld(&c->w) % 16 ||
           !aligned16(c->w.data);
}

static int64_t w_scale_floats(const cgm_call *c, int64_t kb) {
    if (c->scaling != CGM_SCALING_BLOCK_1X128) return 4;
    return cgm_ceil_div(c->n, 128) * round_up(kb, 4);
}

size_t cgm_fp8_call_bytes(const cgm_call *c) {
    if (!c->has_gemm || !cgm_dtype_is_fp8(c->in_dtype)) return 0;
    int64_t kb = cgm_ceil_div(c->k, 128);
    size_t bytes = cgm_fp8_round256((size_t)w_scale_floats(c, kb) * sizeof(float));
    if (pad_w(c))
        bytes += cgm_fp8_round256((size_t)(round_up(c->n, 16) * round_up(c->k, 16)));
    return bytes;
}

void cgm_fp8_call_fill(const cgm_call *c, void *region, cgm_fp8_gemm_fn gemm,
                       void *gemm_ctx, cgm_fp8_call *f) {
    memset(f, 0, sizeof *f);
    f->call = c;
    f->gemm = gemm;
    f->gemm_ctx = gemm_ctx;
    f->scaling = c->scaling == CGM_SCALING_BLOCK_1X128 ? CGM_LT_SCALE_BLOCK
                                                       : CGM_LT_SCALE_TENSOR;
    f->kb = cgm_ceil_div(c->k, 128);
    f->w_scale = region;
    f->region = region;
    if (!pad_w(c)) {
        f->gk = c->k;
        f->gn = c->n;
        f->w = c->w.data;
        f->ldw = cgm_matrix_ld(&c->w);
        return;
    }
    f->gk = round_up(c->k, 16);
    f->gn = round_up(c->n, 16);
    f->w = (char *)region +
           cgm_fp8_round256((size_t)w_scale_floats(c, f->kb) * sizeof(float));
    f->ldw = f->gk;
}

cgm_status cgm_fp8_call_enqueue(const cgm_fp8_call *f, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = f->call;
    float *ws = f->region;
    if (f->scaling == CGM_LT_SCALE_TENSOR) {
        CGM_TRY(cgm_fp8_put_slot(ws, c->w.scale, stream));
    } else if (c->w.scale && c->n > 0 && c->k > 0) {
        CGM_CUDA_TRY(cgm_dev_fp8_w_scales(c->w.scale, cgm_ceil_div(c->n, 128),
                                          f->kb, ws, round_up(f->kb, 4),
                                          stream));
    }
    if (f->w == c->w.data) return CGM_SUCCESS;
    void *wpad = (void *)f->w;
    CGM_CUDA_TRY(cudaMemsetAsync(wpad, 0, (size_t)(f->gn * f->gk), stream));
    if (c->n > 0 && c->k > 0)
        CGM_CUDA_TRY(cudaMemcpy2DAsync(wpad, (size_t)f->gk, c->w.data,
                                       (size_t)cgm_matrix_ld(&c->w),
                                       (size_t)c->k, (size_t)c->n,
                                       cudaMemcpyDeviceToDevice, stream));
fail:
    return status;
}

cgm_status cgm_fp8_call_prepare(const cgm_call *c, void *region,
                                cudaStream_t stream, cgm_fp8_gemm_fn gemm,
                                void *gemm_ctx, cgm_fp8_call *f) {
    cgm_fp8_call_fill(c, region, gemm, gemm_ctx, f);
    return cgm_fp8_call_enqueue(f, stream);
}

/* A chunk's scratch: X's scales in cuBLASLt's layout, X padded, the
 * staged fp32 result; each 256-byte aligned. */
typedef struct chunk_scratch {
    float *x_scale;
    char *x;
    float *staged;
    size_t bytes;
} chunk_scratch;

static chunk_scratch scratch_of(const cgm_call *c, int64_t kb, int64_t gk,
                                int64_t gn, int64_t rows, char *base) {
    chunk_scratch s;
    int64_t r4 = round_up(rows, 4);
    size_t xs = c->scaling == CGM_SCALING_BLOCK_1X128
                    ? cgm_fp8_round256((size_t)(kb * r4) * sizeof(float))
                    : 0;
    size_t xp = cgm_fp8_round256((size_t)(r4 * gk));
    size_t st = cgm_fp8_round256((size_t)(r4 * gn) * sizeof(float));
    s.x_scale = (float *)base;
    s.x = base ? base + xs : NULL;
    s.staged = base ? (float *)(base + xs + xp) : NULL;
    s.bytes = xs + xp + st;
    return s;
}

size_t cgm_fp8_rows_scratch_bytes(const cgm_call *c, int64_t max_rows) {
    if (!c->has_gemm || !cgm_dtype_is_fp8(c->in_dtype)) return 0;
    return scratch_of(c, cgm_ceil_div(c->k, 128), round_up(c->k, 16),
                      round_up(c->n, 16), max_rows, NULL).bytes;
}

/* X for cuBLASLt: as given, or its rows copied into the scratch with zero
 * columns up to gk (and zero rows up to h->m). */
static cgm_status place_x(const cgm_fp8_call *f, const cgm_lt_gemm_args *g,
                          const chunk_scratch *s, cudaStream_t stream,
                          cgm_lt_gemm_args *h) {
    cgm_status status = CGM_SUCCESS;
    if (h->m == g->m && f->gk == g->k && g->ldx % 16 == 0 && aligned16(g->x))
        return CGM_SUCCESS;
    h->x = s->x;
    h->ldx = f->gk;
    if (f->dry) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemsetAsync(s->x, 0, (size_t)(h->m * f->gk), stream));
    CGM_CUDA_TRY(cudaMemcpy2DAsync(s->x, (size_t)f->gk, g->x, (size_t)g->ldx,
                                   (size_t)g->k, (size_t)g->m,
                                   cudaMemcpyDeviceToDevice, stream));
fail:
    return status;
}

cgm_status cgm_fp8_rows_gemm(const cgm_fp8_call *f, const cgm_lt_gemm_args *g,
                             const float *x_scales, int64_t x_scales_ld,
                             const float *y_scale,
                             float *amax, void *scratch, size_t scratch_bytes,
                             cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = f->call;
    const bool block = f->scaling == CGM_LT_SCALE_BLOCK;
    const bool fp8_out = cgm_dtype_is_fp8(g->out_dtype);
    if (g->m <= 0 || g->n <= 0) return CGM_SUCCESS;
    chunk_scratch s = scratch_of(c, f->kb, f->gk, f->gn, g->m, scratch);
    if (s.bytes > scratch_bytes)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "fp8 GEMM of %lld rows: its scratch needs %zu bytes, "
                         "the executor gave %zu; please report this bug",
                         (long long)g->m, s.bytes, scratch_bytes);
    cgm_lt_gemm_args h = *g;
    h.scaling = f->scaling;
    h.n = f->gn;
    h.k = f->gk;
    h.w = f->w;
    h.ldw = f->ldw;
    h.w_scale = f->w_scale;
    h.x_scale_rows = 0;
    h.y_scale = NULL;
    h.amax_y = NULL;
    h.fast_accum = !block && c->fp8_fast_accum;
    h.m = block ? round_up(g->m, 4) : g->m;
    cgm_lt_gemm_args plain = *g;
    plain.bias_dtype = g->bias ? g->bias_dtype : CGM_DTYPE_FP32;
    const bool bias_other = g->bias && g->bias_dtype != cgm_lt_bias_dtype(&plain);
    const bool staged = fp8_out || bias_other || h.n != g->n || h.m != g->m ||
                        g->k == 0;
    if (staged) {
        h.out_dtype = CGM_DTYPE_FP32;
        h.y = s.staged;
        h.ldy = h.n;
        h.bias = NULL;
        h.bias_dtype = CGM_DTYPE_FP32;
        h.accumulate = false;
        h.addend = NULL;
    }
    if (g->k == 0) {
        if (!f->dry)
            CGM_CUDA_TRY(cudaMemsetAsync(
                s.staged, 0, (size_t)(g->m * h.n) * sizeof(float), stream));
    } else {
        CGM_TRY(place_x(f, g, &s, stream, &h));
        h.x_scale = block ? s.x_scale : x_scales;
        if (block && !f->dry)
            CGM_CUDA_TRY(cgm_dev_fp8_x_scales(
                x_scales, x_scales_ld > 0 ? x_scales_ld : f->kb, g->m, f->kb,
                s.x_scale, h.m, stream));
        CGM_TRY(f->gemm(f->gemm_ctx, &h, stream));
    }
    if (!staged || f->dry) return CGM_SUCCESS;
    cgm_dev_finish_args a;
    memset(&a, 0, sizeof a);
    a.rows = g->m;
    a.cols = g->n;
    a.src = s.staged;
    a.src_ld = h.n;
    a.dst = g->y;
    a.dst_ld = g->ldy;
    a.dst_dtype = (int)g->out_dtype;
    a.accumulate = g->accumulate;
    a.bias = g->bias;
    a.bias_dtype = (int)g->bias_dtype;
    a.scale = fp8_out ? y_scale : NULL;
    a.amax = fp8_out ? amax : NULL;
    CGM_CUDA_TRY(cgm_dev_fp8_finish(&a, stream));
fail:
    return status;
}

cgm_status cgm_gpu_fp8_check(const char *backend, int device,
                             const cgm_call *call) {
    cgm_status status = CGM_SUCCESS;
    int major = 0, minor = 0;
    if (!call->has_gemm || !cgm_dtype_is_fp8(call->in_dtype)) return CGM_SUCCESS;
    const bool block = call->scaling == CGM_SCALING_BLOCK_1X128;
#if CUBLAS_VERSION < 120900
    if (block)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the %s backend: fp8 with block scaling (block_1x128 "
                         "X, block_128x128 W) needs cuBLAS 12.9 or newer, this "
                         "build has %d; use CGM_SCALING_TENSOR, or rebuild "
                         "with CUDA 12.9+", backend, (int)CUBLAS_VERSION);
#endif
    if (device < 0) CGM_CUDA_TRY(cudaGetDevice(&device));
    CGM_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CGM_CUDA_TRY(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    if (major * 10 + minor < 89)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the %s backend: fp8 GEMMs need FP8 tensor cores "
                         "(compute capability 8.9 or newer), GPU %d has %d.%d; "
                         "run fp8 calls on the host backend or pass bf16 "
                         "operands", backend, device, major, minor);
    if (block && major != 9)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the %s backend: fp8 block scaling runs on Hopper "
                         "(compute capability 9.x; cuBLASLt's block-scaled FP8 "
                         "kernels), GPU %d has %d.%d; use CGM_SCALING_TENSOR",
                         backend, device, major, minor);
fail:
    return status;
}

cgm_status cgm_fp8_workspace_ensure(cgm_fp8_workspace *w, size_t need,
                                    bool capturing, const char *backend) {
    cgm_status status = CGM_SUCCESS;
    void *fresh = NULL;
    if (need <= w->bytes) return CGM_SUCCESS;
    if (capturing)
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "the %s backend: this fp8 call needs %zu bytes of fp8 "
                         "workspace, %zu are allocated, and it grows only at "
                         "eager calls; make one eager call with the same "
                         "shapes before capturing", backend, need, w->bytes);
    size_t bytes = need > 2 * w->bytes ? need : 2 * w->bytes;
    CGM_CUDA_TRY(cudaMalloc(&fresh, bytes));
    if (w->buf) {
        if (w->nretired == CGM_FP8_RETIRED) {
            /* cudaFree waits for the device: no op still uses it. */
            CGM_CUDA_TRY(cudaFree(w->retired[0]));
            memmove(w->retired, w->retired + 1,
                    (CGM_FP8_RETIRED - 1) * sizeof w->retired[0]);
            w->nretired--;
        }
        w->retired[w->nretired++] = w->buf;
    }
    w->buf = fresh;
    w->bytes = bytes;
    fresh = NULL;
    CGM_INFO(CGM_SUB_INIT, "%s backend: fp8 workspace %zu KiB", backend,
             bytes >> 10);
fail:
    if (fresh) cudaFree(fresh);
    return status;
}

void cgm_fp8_workspace_free(cgm_fp8_workspace *w) {
    if (w->buf) cudaFree(w->buf);
    for (int i = 0; i < w->nretired; i++) cudaFree(w->retired[i]);
    memset(w, 0, sizeof *w);
}
