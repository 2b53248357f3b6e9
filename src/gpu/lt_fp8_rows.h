/* An fp8 call's GEMMs over row ranges, for the GPU backends' executors
 * (lt_fp8_rows.c): what the header's "FP8" allows made into what
 * cuBLASLt's FP8 kernels take.
 *
 * Per call (cgm_fp8_call_prepare, on one stream before any chunk): W's
 * scales into cuBLASLt's layout (TENSOR: its scale on 16 bytes of its own;
 * BLOCK: [ceil(n/128)][L4]), and W copied with zero rows/columns up to
 * multiples of 16 where n, k, ldw or W's address do not suit cuBLASLt.
 * The fp8 output's amax is NOT zeroed here: the executor zeroes it once
 * (cudaMemsetAsync) before the chunks that raise it.
 *
 * Per chunk (cgm_fp8_rows_gemm, on the chunk's stream): X's scales for its
 * rows (TENSOR: a pointer to one float on 16 bytes of its own; BLOCK: the
 * header's [rows][ceil(k/128)], rearranged into the chunk's scratch), X
 * padded in the scratch where needed (k, ldx or its address; BLOCK also
 * rows to a multiple of 4), and the result either written by cuBLASLt
 * (bf16/fp16/fp32 Y, a bias cuBLASLt takes, nothing padded) or staged in
 * fp32 and finished by cgm_dev_fp8_finish (an fp8 Y with its scale,
 * saturation and amax; a bias of another dtype; padded shapes; k = 0). */
#ifndef COMMGEMM_LT_FP8_ROWS_H
#define COMMGEMM_LT_FP8_ROWS_H

#include "gpu/gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The executor's GEMM (its workspace per stream, cgm_lt_prepare). */
typedef cgm_status (*cgm_fp8_gemm_fn)(void *ctx, const cgm_lt_gemm_args *g,
                                      cudaStream_t stream);

typedef struct cgm_fp8_call {
    const cgm_call *call;
    cgm_lt_scaling scaling;
    int64_t kb;       /* ceil(k / 128) */
    int64_t gk, gn;   /* k and n as the GEMM sees them (maybe padded) */
    const void *w;    /* W as the GEMM sees it, ldw */
    int64_t ldw;
    const float *w_scale; /* cuBLASLt's layout, 16-byte aligned */
    cgm_fp8_gemm_fn gemm;
    void *gemm_ctx;
    bool dry; /* cgm_fp8_rows_gemm enqueues nothing (see there) */
    void *region; /* the call's region (cgm_fp8_call_bytes) */
} cgm_fp8_call;

/* Bytes of the per-call region cgm_fp8_call_prepare fills (0 for a call
 * that is not fp8). */
size_t cgm_fp8_call_bytes(const cgm_call *c);
/* Fills `f` for the GEMMs of `c` and enqueues the W side on `stream`
 * into `region` (cgm_fp8_call_bytes, 256-byte aligned). The chunks' streams
 * must wait for `stream` after this. */
cgm_status cgm_fp8_call_prepare(const cgm_call *c, void *region,
                                cudaStream_t stream, cgm_fp8_gemm_fn gemm,
                                void *gemm_ctx, cgm_fp8_call *f);
/* cgm_fp8_call_prepare in two halves: filling `f` (nothing enqueued; an
 * executor's dry pass may use it), then the W side on `stream`. */
void cgm_fp8_call_fill(const cgm_call *c, void *region, cgm_fp8_gemm_fn gemm,
                       void *gemm_ctx, cgm_fp8_call *f);
cgm_status cgm_fp8_call_enqueue(const cgm_fp8_call *f, cudaStream_t stream);
/* Scratch bytes one stream needs for chunks of up to max_rows rows. */
size_t cgm_fp8_rows_scratch_bytes(const cgm_call *c, int64_t max_rows);
/* The GEMM of one chunk: `g` is cgm_lt_args_from_call(c) with the chunk's
 * m, x, ldx, y, ldy, out_dtype, bias (and its dtype), accumulate set by
 * the executor; x_scales as above (read only when the chunk has rows and
 * k > 0), BLOCK: row i's at x_scales + i * x_scales_ld (0: ceil(k/128)).
 * f->dry: nothing is enqueued, the GEMM callback still sees the chunk's
 * cuBLASLt arguments (an executor's dry pass). y_scale/amax: for an fp8 out_dtype, the call's y.scale and
 * y_amax (amax NULL: none). scratch: this stream's, 256-byte aligned, of
 * cgm_fp8_rows_scratch_bytes(c, >= g->m). */
cgm_status cgm_fp8_rows_gemm(const cgm_fp8_call *f, const cgm_lt_gemm_args *g,
                             const float *x_scales, int64_t x_scales_ld,
                             const float *y_scale,
                             float *amax, void *scratch, size_t scratch_bytes,
                             cudaStream_t stream);

/* A GPU backend's check of an fp8 call (its check hook, before any
 * exchange): CGM_SUCCESS for other calls; CGM_ERROR_NOT_SUPPORTED naming
 * `backend` where this build or GPU cannot run it: FP8 tensor cores need
 * compute capability 8.9 or newer; block scaling (cuBLASLt's VEC128 /
 * BLK128x128) needs cuBLAS 12.9+ and a Hopper GPU (9.x). device: the
 * comm's CUDA device (-1: the current one). */
cgm_status cgm_gpu_fp8_check(const char *backend, int device,
                             const cgm_call *call);

/* An executor's fp8 workspace: grown (at least doubling) at eager calls
 * only; the buffers it outgrew stay allocated until
 * cgm_fp8_workspace_free (a graph captured earlier may still use them;
 * beyond CGM_FP8_RETIRED of them the oldest is freed, after the device is
 * idle). */
#define CGM_FP8_RETIRED 16
typedef struct cgm_fp8_workspace {
    void *buf;
    size_t bytes;
    void *retired[CGM_FP8_RETIRED];
    int nretired;
} cgm_fp8_workspace;
/* `need` bytes at w->buf: CGM_SUCCESS; inside capture when it would have
 * to grow, CGM_ERROR_INVALID_USAGE naming `backend` (one eager call with
 * the same shapes first). */
cgm_status cgm_fp8_workspace_ensure(cgm_fp8_workspace *w, size_t need,
                                    bool capturing, const char *backend);
void cgm_fp8_workspace_free(cgm_fp8_workspace *w);

/* Helpers of the executors: bytes rounded up to 256; a 4-float slot
 * (16 bytes) holding *src (0 when src is NULL), enqueued on `stream`. */
size_t cgm_fp8_round256(size_t bytes);
cgm_status cgm_fp8_put_slot(float *slot, const float *src,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_LT_FP8_ROWS_H */
