/* Bad input: every case feeds one wrong argument and checks the status and
 * the message, then proves the comm still works with a correct call. */
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"
#include "harness.h"

enum { M = 8, K = 4, N = 6 };

typedef struct args {
    cgm_op op;
    cgm_matrix x, w, bias, y, xg, send, recv;
    bool has_x, has_w, has_bias, has_y, has_xg, has_send, has_recv;
    cgm_collective coll;
    cgm_op_options opt;
    void *stream;
} args;

typedef struct bad_case {
    const char *name;
    void (*mutate)(args *a);
    cgm_status expected;
    const char *message; /* substring of cgm_last_error() */
} bad_case;

static float xbuf[M * K + 8], wbuf[N * K + 8], ybuf[M * N + 8], bbuf[N + 8], gbuf[M * K + 8];

static void valid_args(args *a, cgm_op op) {
    memset(a, 0, sizeof *a);
    a->op = op;
    a->x = cgm_matrix_make(xbuf, CGM_DTYPE_FP32, M, K);
    a->w = cgm_matrix_make(wbuf, CGM_DTYPE_FP32, N, K);
    a->y = cgm_matrix_make(ybuf, CGM_DTYPE_FP32, M, N);
    a->bias = cgm_matrix_make(bbuf, CGM_DTYPE_FP32, 1, N);
    a->xg = cgm_matrix_make(gbuf, CGM_DTYPE_FP32, M, K);
    a->has_x = a->has_w = a->has_y = true;
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    a->opt = o;
    test_fill(&a->x, 1);
    test_fill(&a->w, 2);
    test_fill(&a->bias, 3);
}

static cgm_status call(cgm_comm *comm, args *a) {
#define OPT(f) (a->has_##f ? &a->f : NULL)
    switch (a->op) {
    case CGM_OP_ALL_GATHER_GEMM:
        return cgm_all_gather_gemm(comm, OPT(x), OPT(w), OPT(bias), OPT(y), OPT(xg), &a->opt, a->stream);
    case CGM_OP_GEMM_REDUCE_SCATTER:
        return cgm_gemm_reduce_scatter(comm, OPT(x), OPT(w), OPT(bias), OPT(y), &a->opt, a->stream);
    case CGM_OP_GEMM_ALL_REDUCE:
        return cgm_gemm_all_reduce(comm, OPT(x), OPT(w), OPT(bias), OPT(y), &a->opt, a->stream);
    default:
        return cgm_bulk_overlap(comm, OPT(x), OPT(w), OPT(bias), OPT(y), a->coll, OPT(send), OPT(recv), &a->opt,
                                a->stream);
    }
#undef OPT
}

static cgm_comm *single_rank_comm(const cgm_config *config) {
    char name[64];
    snprintf(name, sizeof name, "api-%d", (int)getpid());
    return test_host_comm(0, 1, name, config);
}

/* A correct AG+GEMM on the comm, checked against the reference. */
static void check_comm_still_works(cgm_comm *comm) {
    args a;
    valid_args(&a, CGM_OP_ALL_GATHER_GEMM);
    a.has_bias = true;
    test_poison(&a.y);
    CHECK_OK(call(comm, &a));
    double ref[M * N];
    test_ref_gemm(CGM_LAYOUT_TN, &a.x, &a.w, M, N, K, ref);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) ref[i * N + j] += test_get(&a.bias, 0, j);
    CHECK_INT_EQ(test_compare(&a.y, ref, M, N, 1e-5, "y after a bad call"), 0);
}

#define MUT(fn, body) \
    static void fn(args *a) { body; }
MUT(null_x, a->has_x = false)
MUT(null_w, a->has_w = false)
MUT(null_y, a->has_y = false)
MUT(null_data, a->x.data = NULL)
MUT(misaligned, a->x.data = (char *)xbuf + 2)
MUT(y_rows, a->y.rows = M + 1)
MUT(k_mismatch, a->w.cols = K + 1; a->w.ld = 0)
MUT(n_mismatch, a->w.rows = N - 1)
MUT(mixed_dtype, a->w.dtype = CGM_DTYPE_BF16)
MUT(bad_dtype, a->x.dtype = (cgm_dtype)42)
MUT(bad_out_dtype, a->y.dtype = CGM_DTYPE_FP16)
MUT(bad_layout, a->opt.layout = (cgm_layout)7)
MUT(bad_algo, a->opt.algo = (cgm_algo)99)
MUT(bad_backend_enum, a->opt.backend = (cgm_backend)42)
MUT(negative_splits, a->opt.splits = -2)
MUT(bad_partial_dtype, a->opt.partial_dtype = (cgm_partial_dtype)5)
MUT(bad_gemm_reduction, a->opt.gemm_reduction = (cgm_gemm_reduction)-1)
MUT(rs_bad_partial_dtype, a->op = CGM_OP_GEMM_REDUCE_SCATTER; a->opt.partial_dtype = CGM_PARTIAL_DTYPE_COUNT_)
MUT(options_size, a->opt.struct_size = 3)
MUT(options_newer_header, a->opt.struct_size = sizeof(cgm_op_options) + 8)
MUT(small_ld, a->x.ld = 2)
MUT(negative_rows, a->y.rows = -1)
MUT(huge_rows, a->x.rows = (int64_t)1 << 62; a->x.cols = (int64_t)1 << 40; a->x.ld = 0)
MUT(huge_ld, a->x.ld = (int64_t)1 << 61)
MUT(scale_set, static const float s = 1; a->x.scale = &s)
MUT(bias_shape, a->has_bias = true; a->bias.cols = N - 1)
MUT(bias_dtype, a->has_bias = true; a->bias.dtype = CGM_DTYPE_BF16)
MUT(overlap, a->y.data = xbuf)
MUT(xg_shape, a->has_xg = true; a->xg.rows = M - 1)
MUT(xg_dtype, a->has_xg = true; a->xg.dtype = CGM_DTYPE_BF16)
MUT(xg_overlap, a->has_xg = true; a->xg.data = ybuf)
MUT(stream_on_host, a->stream = (void *)0x10)
MUT(backend_nccl, a->opt.backend = CGM_BACKEND_NCCL)
MUT(backend_cublasmp, a->opt.backend = CGM_BACKEND_CUBLASMP)
MUT(nt_shape, a->opt.layout = CGM_LAYOUT_NT)
MUT(nn_shape, a->opt.layout = CGM_LAYOUT_NN)
MUT(rs_rows, a->op = CGM_OP_GEMM_REDUCE_SCATTER; a->y.rows = M - 1)
MUT(ar_rows, a->op = CGM_OP_GEMM_ALL_REDUCE; a->y.rows = M + 2)
MUT(bulk_nothing, a->op = CGM_OP_BULK; a->has_x = a->has_w = a->has_y = false)
MUT(bulk_partial_gemm, a->op = CGM_OP_BULK; a->has_w = false)
MUT(bulk_bad_collective, a->op = CGM_OP_BULK; a->has_send = a->has_recv = true;
    a->send = cgm_matrix_make(gbuf, CGM_DTYPE_FP32, M, K); a->recv = a->send; a->recv.data = ybuf;
    a->coll = (cgm_collective)9)
MUT(bulk_dtypes, a->op = CGM_OP_BULK; a->has_send = a->has_recv = true;
    a->send = cgm_matrix_make(gbuf, CGM_DTYPE_FP32, M, K); a->recv = a->send; a->recv.data = ybuf;
    a->recv.dtype = CGM_DTYPE_BF16)
MUT(bulk_only_send, a->op = CGM_OP_BULK; a->has_send = true; a->send = cgm_matrix_make(gbuf, CGM_DTYPE_FP32, M, K))
MUT(bulk_bias_without_gemm, a->op = CGM_OP_BULK; a->has_x = a->has_w = a->has_y = false; a->has_bias = true;
    a->has_send = a->has_recv = true; a->send = cgm_matrix_make(gbuf, CGM_DTYPE_FP32, M, K);
    a->recv = a->send; a->recv.data = ybuf)

/* fp8: X and W e4m3 with one tensor scale each, Y fp32 (a valid call,
 * which each case below breaks one way). The buffers' bytes are never
 * read: every case fails in validation. */
static float scales[64] = {1, 1, 1, 1, 1, 1, 1, 1};
static float amax_out[2];
static void fp8_args(args *a) {
    a->x.dtype = a->w.dtype = CGM_DTYPE_FP8_E4M3;
    a->x.scaling = a->w.scaling = CGM_SCALING_TENSOR;
    a->x.scale = scales;
    a->w.scale = scales + 1;
}
static void fp8_out(args *a) {
    fp8_args(a);
    a->y.dtype = CGM_DTYPE_FP8_E5M2;
    a->y.scaling = CGM_SCALING_TENSOR;
    a->y.scale = scales + 2;
}
static void fp8_bulk_collective(args *a) {
    a->op = CGM_OP_BULK;
    a->has_x = a->has_w = a->has_y = false;
    a->has_send = a->has_recv = true;
    a->send = cgm_matrix_make(gbuf, CGM_DTYPE_FP32, M, K);
    a->recv = a->send;
    a->recv.data = ybuf;
}
MUT(fp8_no_scale, fp8_args(a); a->x.scale = NULL)
MUT(fp8_scaling_none, fp8_args(a); a->w.scaling = CGM_SCALING_NONE)
MUT(fp8_bad_scaling, fp8_args(a); a->x.scaling = (cgm_scaling)9)
MUT(fp8_scale_misaligned, fp8_args(a); a->w.scale = (const float *)((const char *)scales + 2))
MUT(fp8_with_fp32, fp8_args(a); a->w.dtype = CGM_DTYPE_FP32; a->w.scale = NULL)
MUT(fp8_both_e5m2, fp8_args(a); a->x.dtype = a->w.dtype = CGM_DTYPE_FP8_E5M2)
MUT(fp8_layout_nn, fp8_args(a); a->opt.layout = CGM_LAYOUT_NN)
MUT(fp8_layout_nt, fp8_args(a); a->opt.layout = CGM_LAYOUT_NT)
MUT(fp8_x_block_128x128, fp8_args(a); a->x.scaling = a->w.scaling = CGM_SCALING_BLOCK_128X128)
MUT(fp8_w_block_1x128, fp8_args(a); a->x.scaling = a->w.scaling = CGM_SCALING_BLOCK_1X128)
MUT(fp8_mixed_recipes, fp8_args(a); a->x.scaling = CGM_SCALING_BLOCK_1X128)
MUT(fp8_mixed_recipes_w, fp8_args(a); a->w.scaling = CGM_SCALING_BLOCK_128X128)
MUT(fp8_out_no_scale, fp8_out(a); a->y.scale = NULL)
MUT(fp8_out_block, fp8_out(a); a->y.scaling = CGM_SCALING_BLOCK_1X128)
MUT(fp8_out_accumulate, fp8_out(a); a->opt.accumulate = 1)
MUT(fp8_out_from_bf16, a->y.dtype = CGM_DTYPE_FP8_E4M3; a->y.scaling = CGM_SCALING_TENSOR; a->y.scale = scales)
MUT(scale_on_fp32_y, a->y.scale = scales)
MUT(amax_fp32_out, fp8_args(a); a->opt.y_amax = amax_out)
MUT(amax_no_fp8, a->opt.y_amax = amax_out)
MUT(amax_misaligned, fp8_out(a); a->opt.y_amax = (float *)((char *)amax_out + 1))
MUT(amax_overlaps_y, fp8_out(a); a->opt.y_amax = ybuf)
MUT(amax_bulk_no_gemm, fp8_bulk_collective(a); a->opt.y_amax = amax_out)
MUT(fp8_y_scale_in_y, fp8_out(a); a->y.scale = ybuf + 1)
MUT(fp8_bias_fp16, fp8_args(a); a->has_bias = true; a->bias.dtype = CGM_DTYPE_FP16)
MUT(fp8_bias_fp8, fp8_args(a); a->has_bias = true; a->bias.dtype = CGM_DTYPE_FP8_E4M3)
MUT(fp8_out_bias_fp32, fp8_out(a); a->has_bias = true)
MUT(fp8_xg_dtype, fp8_args(a); a->has_xg = true)
MUT(fp8_xg_scaling, fp8_args(a); a->has_xg = true; a->xg.dtype = CGM_DTYPE_FP8_E4M3;
    a->xg.scaling = CGM_SCALING_BLOCK_1X128)
MUT(fp8_xg_scale_overlaps_x, fp8_args(a); a->has_xg = true; a->xg.dtype = CGM_DTYPE_FP8_E4M3;
    a->xg.scaling = CGM_SCALING_TENSOR; a->xg.scale = xbuf)
MUT(fp8_xg_scale_overlaps_w_scale, fp8_args(a); a->has_xg = true; a->xg.dtype = CGM_DTYPE_FP8_E4M3;
    a->xg.scaling = CGM_SCALING_TENSOR; a->xg.scale = scales + 1)
MUT(fast_accum_value, a->opt.fp8_fast_accum = 2)
MUT(fp8_collective, fp8_bulk_collective(a); a->send.dtype = a->recv.dtype = CGM_DTYPE_FP8_E4M3;
    a->send.scaling = a->recv.scaling = CGM_SCALING_TENSOR; a->send.scale = scales)
MUT(fp8_bulk_layout, a->op = CGM_OP_BULK; a->y.rows = M; fp8_args(a); a->opt.layout = CGM_LAYOUT_NT)

/* Epilogues: aux shaped like y, bgrad 1 x n (bulk's BGRAD: 1 x c's rows). */
static float abuf[M * N + 8], bgbuf[M + 8];
static void epi(args *a, cgm_epilogue e, bool aux, bool bgrad) {
    static cgm_matrix aux_m, bgrad_m;
    a->opt.epilogue = e;
    aux_m = cgm_matrix_make(abuf, a->y.dtype, a->y.rows, a->y.cols);
    if (cgm_dtype_is_fp8(a->y.dtype)) aux_m.dtype = CGM_DTYPE_BF16;
    bgrad_m = cgm_matrix_make(bgbuf, CGM_DTYPE_FP32, 1, e == CGM_EPILOGUE_BGRAD ? a->y.rows : a->y.cols);
    a->opt.aux = aux ? &aux_m : NULL;
    a->opt.bgrad = bgrad ? &bgrad_m : NULL;
}
MUT(epi_bad_value, a->opt.epilogue = (cgm_epilogue)9)
MUT(epi_negative_value, a->opt.epilogue = (cgm_epilogue)-1)
MUT(epi_aux_missing, epi(a, CGM_EPILOGUE_GELU_AUX, false, false))
MUT(epi_dgelu_aux_missing, a->op = CGM_OP_GEMM_REDUCE_SCATTER; epi(a, CGM_EPILOGUE_DGELU, false, false))
MUT(epi_aux_unneeded, epi(a, CGM_EPILOGUE_GELU, true, false))
MUT(epi_aux_with_none, epi(a, CGM_EPILOGUE_NONE, true, false))
MUT(epi_bgrad_with_none, epi(a, CGM_EPILOGUE_NONE, false, true))
MUT(epi_bgrad_missing, epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, false))
MUT(epi_bgrad_unneeded, a->op = CGM_OP_GEMM_ALL_REDUCE; epi(a, CGM_EPILOGUE_DGELU, true, true))
MUT(epi_bulk_bgrad_missing, a->op = CGM_OP_BULK; epi(a, CGM_EPILOGUE_BGRAD, false, false))
MUT(epi_bias_dgelu, a->has_bias = true; epi(a, CGM_EPILOGUE_DGELU, true, false))
MUT(epi_bias_dgelu_bgrad, a->op = CGM_OP_BULK; a->has_bias = true; epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true))
MUT(epi_accumulate_gelu, a->opt.accumulate = 1; epi(a, CGM_EPILOGUE_GELU, false, false))
MUT(epi_accumulate_gelu_aux, a->opt.accumulate = 1; epi(a, CGM_EPILOGUE_GELU_AUX, true, false))
MUT(epi_accumulate_dgelu, a->op = CGM_OP_GEMM_ALL_REDUCE; a->opt.accumulate = 1;
    epi(a, CGM_EPILOGUE_DGELU, true, false))
MUT(epi_accumulate_dgelu_bgrad, a->op = CGM_OP_BULK; a->opt.accumulate = 1;
    epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true))
MUT(epi_bgrad_on_ag, epi(a, CGM_EPILOGUE_BGRAD, false, true))
MUT(epi_bgrad_on_rs, a->op = CGM_OP_GEMM_REDUCE_SCATTER; epi(a, CGM_EPILOGUE_BGRAD, false, true))
MUT(epi_bgrad_on_ar, a->op = CGM_OP_GEMM_ALL_REDUCE; epi(a, CGM_EPILOGUE_BGRAD, false, true))
MUT(epi_bulk_no_gemm, fp8_bulk_collective(a); epi(a, CGM_EPILOGUE_GELU, false, false))
MUT(epi_aux_shape, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->rows = M - 1)
MUT(epi_aux_cols, epi(a, CGM_EPILOGUE_DGELU, true, false); a->opt.aux->cols = N + 1; a->opt.aux->ld = 0)
MUT(epi_aux_dtype, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->dtype = CGM_DTYPE_BF16)
MUT(epi_aux_fp8_out, fp8_out(a); epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->dtype = CGM_DTYPE_FP32)
MUT(epi_aux_bad_dtype, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->dtype = (cgm_dtype)17)
MUT(epi_aux_misaligned, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->data = (char *)abuf + 2)
MUT(epi_aux_null_data, epi(a, CGM_EPILOGUE_DGELU, true, false); a->opt.aux->data = NULL)
MUT(epi_aux_small_ld, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->ld = 3)
MUT(epi_aux_scale, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->scale = scales)
MUT(epi_bgrad_shape, epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true); a->opt.bgrad->cols = N - 1)
MUT(epi_bgrad_rows, a->op = CGM_OP_BULK; epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true); a->opt.bgrad->rows = 2)
MUT(epi_bulk_bgrad_shape, a->op = CGM_OP_BULK; epi(a, CGM_EPILOGUE_BGRAD, false, true); a->opt.bgrad->cols = N)
MUT(epi_bgrad_dtype, epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true); a->opt.bgrad->dtype = CGM_DTYPE_FP16)
MUT(epi_bgrad_fp8_out, fp8_out(a); epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true);
    a->opt.bgrad->dtype = CGM_DTYPE_FP8_E5M2)
MUT(epi_bgrad_misaligned, a->op = CGM_OP_BULK; epi(a, CGM_EPILOGUE_BGRAD, false, true);
    a->opt.bgrad->data = (char *)bgbuf + 1)
MUT(epi_aux_overlaps_y, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->opt.aux->data = ybuf + 3)
MUT(epi_aux_overlaps_x, epi(a, CGM_EPILOGUE_DGELU, true, false); a->opt.aux->data = xbuf)
MUT(epi_aux_overlaps_bias, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->has_bias = true; a->bias.data = abuf)
MUT(epi_aux_overlaps_x_gathered, epi(a, CGM_EPILOGUE_GELU_AUX, true, false); a->has_xg = true; a->xg.data = abuf)
MUT(epi_bgrad_overlaps_aux, epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true); a->opt.bgrad->data = abuf + 1)
MUT(epi_bgrad_overlaps_w, a->op = CGM_OP_BULK; epi(a, CGM_EPILOGUE_BGRAD, false, true); a->opt.bgrad->data = wbuf)
MUT(epi_bgrad_overlaps_amax, fp8_out(a); a->opt.y_amax = amax_out; epi(a, CGM_EPILOGUE_DGELU_BGRAD, true, true);
    a->opt.bgrad->data = amax_out)

static const bad_case bad_cases[] = {
    {"epilogue.bad_value", epi_bad_value, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_all_gather_gemm: options.epilogue = 9: expected a cgm_epilogue value (CGM_EPILOGUE_NONE, _GELU, "
     "_GELU_AUX, _DGELU, _DGELU_BGRAD or _BGRAD)"},
    {"epilogue.negative_value", epi_negative_value, CGM_ERROR_INVALID_ARGUMENT, "options.epilogue = -1: expected"},
    {"epilogue.aux_missing", epi_aux_missing, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux is NULL but options.epilogue = gelu_aux needs it: pass a 8 x 6 matrix, shaped like y (it "
     "receives the pre-activation r + bias)"},
    {"epilogue.dgelu_aux_missing", epi_dgelu_aux_missing, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_gemm_reduce_scatter: options.aux is NULL but options.epilogue = dgelu needs it: pass a 8 x 6 matrix, "
     "shaped like y_shard (it holds the pre-activation the forward's gelu_aux wrote)"},
    {"epilogue.aux_unneeded", epi_aux_unneeded, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux is set but options.epilogue = gelu takes none (it is for gelu_aux, dgelu and dgelu_bgrad): pass "
     "NULL"},
    {"epilogue.aux_with_none", epi_aux_with_none, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux is set but options.epilogue = none takes none"},
    {"epilogue.bgrad_with_none", epi_bgrad_with_none, CGM_ERROR_INVALID_ARGUMENT,
     "options.bgrad is set but options.epilogue = none takes none (it is for dgelu_bgrad and bgrad)"},
    {"epilogue.bgrad_missing", epi_bgrad_missing, CGM_ERROR_INVALID_ARGUMENT,
     "options.bgrad is NULL but options.epilogue = dgelu_bgrad needs it: pass a 1 x 6 matrix (one sum per column "
     "of the output)"},
    {"epilogue.bgrad_unneeded", epi_bgrad_unneeded, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_gemm_all_reduce: options.bgrad is set but options.epilogue = dgelu takes none"},
    {"epilogue.bulk_bgrad_missing", epi_bulk_bgrad_missing, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_bulk_overlap: options.bgrad is NULL but options.epilogue = bgrad needs it: pass a 1 x 8 matrix (one sum "
     "per row of c)"},
    {"epilogue.bias_with_dgelu", epi_bias_dgelu, CGM_ERROR_INVALID_ARGUMENT,
     "bias is set with options.epilogue = dgelu, which takes none (cuBLASLt has no bias there): pass NULL, and add "
     "the bias in the forward's gelu_aux instead"},
    {"epilogue.bias_with_dgelu_bgrad", epi_bias_dgelu_bgrad, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_bulk_overlap: bias is set with options.epilogue = dgelu_bgrad"},
    {"epilogue.accumulate_gelu", epi_accumulate_gelu, CGM_ERROR_INVALID_ARGUMENT,
     "options.accumulate = 1 with options.epilogue = gelu: the epilogue of Y + r is not what a layer needs; "
     "expected accumulate = 0 (add the old Y outside the op)"},
    {"epilogue.accumulate_gelu_aux", epi_accumulate_gelu_aux, CGM_ERROR_INVALID_ARGUMENT,
     "options.accumulate = 1 with options.epilogue = gelu_aux"},
    {"epilogue.accumulate_dgelu", epi_accumulate_dgelu, CGM_ERROR_INVALID_ARGUMENT,
     "options.accumulate = 1 with options.epilogue = dgelu"},
    {"epilogue.accumulate_dgelu_bgrad", epi_accumulate_dgelu_bgrad, CGM_ERROR_INVALID_ARGUMENT,
     "options.accumulate = 1 with options.epilogue = dgelu_bgrad"},
    {"epilogue.bgrad_on_ag", epi_bgrad_on_ag, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_all_gather_gemm: options.epilogue = bgrad: it sums an input of a local GEMM (a weight gradient's dY), "
     "found on a distributed op; run the weight-gradient GEMM through cgm_bulk_overlap"},
    {"epilogue.bgrad_on_rs", epi_bgrad_on_rs, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_gemm_reduce_scatter: options.epilogue = bgrad: it sums an input of a local GEMM"},
    {"epilogue.bgrad_on_ar", epi_bgrad_on_ar, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_gemm_all_reduce: options.epilogue = bgrad: it sums an input of a local GEMM"},
    {"epilogue.bulk_without_gemm", epi_bulk_no_gemm, CGM_ERROR_INVALID_ARGUMENT,
     "options.epilogue = gelu but the call has no GEMM (a, b and c are NULL): an epilogue acts on a GEMM's "
     "result; pass CGM_EPILOGUE_NONE"},
    {"epilogue.aux_shape", epi_aux_shape, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux is 7 x 6, expected 8 x 6 (shaped like the output); pass one of that shape"},
    {"epilogue.aux_cols", epi_aux_cols, CGM_ERROR_INVALID_ARGUMENT, "options.aux is 8 x 7, expected 8 x 6"},
    {"epilogue.aux_dtype", epi_aux_dtype, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux is bf16, expected fp32 (the output's dtype; it receives the pre-activation r + bias)"},
    {"epilogue.aux_fp8_output", epi_aux_fp8_out, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux is fp32, expected bf16 (bf16 where the output is fp8"},
    {"epilogue.aux_bad_dtype", epi_aux_bad_dtype, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux.dtype = 17: expected a cgm_dtype value"},
    {"epilogue.aux_misaligned", epi_aux_misaligned, CGM_ERROR_INVALID_ARGUMENT,
     "is not aligned to its element size (4 bytes for fp32)"},
    {"epilogue.aux_null_data", epi_aux_null_data, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux.data is NULL but options.aux is 8 x 6; pass its memory"},
    {"epilogue.aux_small_ld", epi_aux_small_ld, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux.ld = 3 is smaller than its cols = 6"},
    {"epilogue.aux_scale", epi_aux_scale, CGM_ERROR_INVALID_ARGUMENT,
     "options.aux.scale is set but options.aux.dtype is fp32: scales are for fp8 only"},
    {"epilogue.bgrad_shape", epi_bgrad_shape, CGM_ERROR_INVALID_ARGUMENT,
     "options.bgrad is 1 x 5, expected 1 x 6 (1 x n: the column sums of the output)"},
    {"epilogue.bgrad_rows", epi_bgrad_rows, CGM_ERROR_INVALID_ARGUMENT, "options.bgrad is 2 x 6, expected 1 x 6"},
    {"epilogue.bulk_bgrad_shape", epi_bulk_bgrad_shape, CGM_ERROR_INVALID_ARGUMENT,
     "options.bgrad is 1 x 6, expected 1 x 8 (1 x c's rows: the sums of op(a) along k)"},
    {"epilogue.bgrad_dtype", epi_bgrad_dtype, CGM_ERROR_INVALID_ARGUMENT,
     "options.bgrad is fp16, expected fp32 (the output's dtype or fp32)"},
    {"epilogue.bgrad_fp8_output", epi_bgrad_fp8_out, CGM_ERROR_INVALID_ARGUMENT,
     "options.bgrad is fp8_e5m2, expected bf16 or fp32 (bf16 or fp32 where the output is fp8)"},
    {"epilogue.bgrad_misaligned", epi_bgrad_misaligned, CGM_ERROR_INVALID_ARGUMENT, "options.bgrad.data = "},
    {"epilogue.aux_overlaps_y", epi_aux_overlaps_y, CGM_ERROR_INVALID_ARGUMENT,
     "output y overlaps options.aux in memory: in-place operation is not supported; give y its own buffer"},
    {"epilogue.aux_overlaps_x", epi_aux_overlaps_x, CGM_ERROR_INVALID_ARGUMENT,
     "operand options.aux overlaps x_shard in memory"},
    {"epilogue.aux_overlaps_bias", epi_aux_overlaps_bias, CGM_ERROR_INVALID_ARGUMENT,
     "output options.aux overlaps bias"},
    {"epilogue.aux_overlaps_x_gathered", epi_aux_overlaps_x_gathered, CGM_ERROR_INVALID_ARGUMENT,
     "output x_gathered overlaps options.aux"},
    {"epilogue.bgrad_overlaps_aux", epi_bgrad_overlaps_aux, CGM_ERROR_INVALID_ARGUMENT,
     "operand options.aux overlaps options.bgrad"},
    {"epilogue.bgrad_overlaps_w", epi_bgrad_overlaps_w, CGM_ERROR_INVALID_ARGUMENT,
     "output options.bgrad overlaps b in memory"},
    {"epilogue.bgrad_overlaps_amax", epi_bgrad_overlaps_amax, CGM_ERROR_INVALID_ARGUMENT,
     "output options.y_amax overlaps options.bgrad"},
    {"null_x", null_x, CGM_ERROR_INVALID_ARGUMENT, "x_shard is NULL"},
    {"null_w", null_w, CGM_ERROR_INVALID_ARGUMENT, "w is NULL"},
    {"null_y", null_y, CGM_ERROR_INVALID_ARGUMENT, "y is NULL"},
    {"null_data", null_data, CGM_ERROR_INVALID_ARGUMENT, "x_shard.data is NULL"},
    {"misaligned", misaligned, CGM_ERROR_INVALID_ARGUMENT, "not aligned"},
    {"shard_rows", y_rows, CGM_ERROR_INVALID_ARGUMENT, "x_shard is 8 x 4, expected 9 x 4"},
    {"k_mismatch", k_mismatch, CGM_ERROR_INVALID_ARGUMENT, "w is 6 x 5, expected 6 x 4"},
    {"n_mismatch", n_mismatch, CGM_ERROR_INVALID_ARGUMENT, "w is 5 x 4, expected 6 x 4"},
    {"mixed_dtype", mixed_dtype, CGM_ERROR_INVALID_ARGUMENT, "expected one input dtype"},
    {"bad_dtype", bad_dtype, CGM_ERROR_INVALID_ARGUMENT, "expected a cgm_dtype"},
    {"bad_out_dtype", bad_out_dtype, CGM_ERROR_INVALID_ARGUMENT, "expected the output dtype to be fp32"},
    {"bad_layout", bad_layout, CGM_ERROR_INVALID_ARGUMENT, "options.layout = 7"},
    {"bad_algo", bad_algo, CGM_ERROR_INVALID_ARGUMENT, "options.algo = 99"},
    {"bad_backend_enum", bad_backend_enum, CGM_ERROR_INVALID_ARGUMENT, "options.backend = 42"},
    {"negative_splits", negative_splits, CGM_ERROR_INVALID_ARGUMENT, "options.splits = -2"},
    {"bad_partial_dtype", bad_partial_dtype, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_all_gather_gemm: options.partial_dtype = 5: expected CGM_PARTIAL_DTYPE_DEFAULT (the comm's), _FP32 or "
     "_OUTPUT"},
    {"bad_gemm_reduction", bad_gemm_reduction, CGM_ERROR_INVALID_ARGUMENT,
     "options.gemm_reduction = -1: expected CGM_GEMM_REDUCTION_DEFAULT (the comm's), _ANY or _FP32"},
    {"rs_bad_partial_dtype", rs_bad_partial_dtype, CGM_ERROR_INVALID_ARGUMENT,
     "cgm_gemm_reduce_scatter: options.partial_dtype = 3"},
    {"options_size", options_size, CGM_ERROR_INVALID_ARGUMENT, "CGM_OP_OPTIONS_INIT"},
    {"options_newer_header", options_newer_header, CGM_ERROR_INVALID_ARGUMENT, "compiled against a newer commgemm.h"},
    {"small_ld", small_ld, CGM_ERROR_INVALID_ARGUMENT, "x_shard.ld = 2"},
    {"negative_rows", negative_rows, CGM_ERROR_INVALID_ARGUMENT, "non-negative"},
    {"huge_rows", huge_rows, CGM_ERROR_INVALID_ARGUMENT, "expected rows and cols at most 2^31 - 1"},
    {"huge_ld", huge_ld, CGM_ERROR_INVALID_ARGUMENT, "spans more than 2^60 bytes"},
    {"scale_set", scale_set, CGM_ERROR_INVALID_ARGUMENT, "scales are for fp8 only"},
    {"fp8.no_scale", fp8_no_scale, CGM_ERROR_INVALID_ARGUMENT,
     "x_shard.scale is NULL but x_shard is a 8 x 4 fp8_e4m3 matrix: pass its fp32 scales (one float"},
    {"fp8.scaling_none", fp8_scaling_none, CGM_ERROR_INVALID_ARGUMENT,
     "w is fp8_e4m3 but w.scaling is none: expected CGM_SCALING_TENSOR or a block recipe"},
    {"fp8.bad_scaling", fp8_bad_scaling, CGM_ERROR_INVALID_ARGUMENT, "x_shard.scaling = 9: expected a cgm_scaling"},
    {"fp8.scale_misaligned", fp8_scale_misaligned, CGM_ERROR_INVALID_ARGUMENT, "w.scale = "},
    {"fp8.with_fp32", fp8_with_fp32, CGM_ERROR_INVALID_ARGUMENT,
     "x_shard is fp8_e4m3 and w is fp32: expected both fp8 (fp8_e4m3 or fp8_e5m2, each its own)"},
    {"fp8.both_e5m2", fp8_both_e5m2, CGM_ERROR_INVALID_ARGUMENT, "x_shard and w are both fp8_e5m2"},
    {"fp8.layout_nn", fp8_layout_nn, CGM_ERROR_NOT_SUPPORTED,
     "fp8 operands with layout NN: fp8 takes layout TN only (Hopper's FP8 tensor cores read both operands "
     "K-major); pass x_shard as [m, k] and w as [n, k] (transposed copies) with CGM_LAYOUT_TN"},
    {"fp8.layout_nt", fp8_layout_nt, CGM_ERROR_NOT_SUPPORTED, "fp8 operands with layout NT"},
    {"fp8.x_block_128x128", fp8_x_block_128x128, CGM_ERROR_INVALID_ARGUMENT,
     "x_shard.scaling = block_128x128: 128 x 128 blocks are W's recipe"},
    {"fp8.w_block_1x128", fp8_w_block_1x128, CGM_ERROR_INVALID_ARGUMENT,
     "w.scaling = block_1x128: 1 x 128 blocks are X's recipe"},
    {"fp8.mixed_recipes", fp8_mixed_recipes, CGM_ERROR_INVALID_ARGUMENT,
     "x_shard.scaling = block_1x128 but w.scaling = tensor: expected one recipe per call"},
    {"fp8.mixed_recipes_w", fp8_mixed_recipes_w, CGM_ERROR_INVALID_ARGUMENT,
     "x_shard.scaling = tensor but w.scaling = block_128x128: expected one recipe per call"},
    {"fp8.out_no_scale", fp8_out_no_scale, CGM_ERROR_INVALID_ARGUMENT, "y.scale is NULL but y is a 8 x 6 fp8_e5m2"},
    {"fp8.out_block", fp8_out_block, CGM_ERROR_INVALID_ARGUMENT,
     "y is fp8_e5m2 with y.scaling = block_1x128: an fp8 output takes CGM_SCALING_TENSOR"},
    {"fp8.out_accumulate", fp8_out_accumulate, CGM_ERROR_INVALID_ARGUMENT,
     "options.accumulate = 1 with an fp8_e5m2 y: accumulating would read the old output back in fp8"},
    {"fp8.out_from_fp32", fp8_out_from_bf16, CGM_ERROR_INVALID_ARGUMENT,
     "y is fp8_e4m3 but the inputs are fp32: an fp8 output needs fp8 inputs"},
    {"fp8.scale_on_fp32_y", scale_on_fp32_y, CGM_ERROR_INVALID_ARGUMENT, "y.scale is set but y.dtype is fp32"},
    {"fp8.amax_fp32_out", amax_fp32_out, CGM_ERROR_INVALID_ARGUMENT,
     "options.y_amax is set but y is fp32: the amax is computed for an fp8 output only"},
    {"fp8.amax_without_fp8", amax_no_fp8, CGM_ERROR_INVALID_ARGUMENT, "options.y_amax is set but y is fp32"},
    {"fp8.amax_misaligned", amax_misaligned, CGM_ERROR_INVALID_ARGUMENT, "options.y_amax = "},
    {"fp8.amax_overlaps_y", amax_overlaps_y, CGM_ERROR_INVALID_ARGUMENT, "output y overlaps options.y_amax"},
    {"fp8.amax_bulk_without_gemm", amax_bulk_no_gemm, CGM_ERROR_INVALID_ARGUMENT,
     "options.y_amax is set but the call has no GEMM"},
    {"fp8.y_scale_in_y", fp8_y_scale_in_y, CGM_ERROR_INVALID_ARGUMENT, "output y overlaps y.scale"},
    {"fp8.bias_fp16", fp8_bias_fp16, CGM_ERROR_INVALID_ARGUMENT,
     "bias is fp16 but y is fp32: with fp8 inputs, expected a bf16 bias or one of y's dtype (fp32)"},
    {"fp8.bias_fp8", fp8_bias_fp8, CGM_ERROR_INVALID_ARGUMENT, "bias is fp8_e4m3 but y is fp32"},
    {"fp8.out_bias_fp32", fp8_out_bias_fp32, CGM_ERROR_INVALID_ARGUMENT,
     "bias is fp32 but y is fp8_e5m2: with an fp8 output, expected a bf16 bias"},
    {"fp8.x_gathered_dtype", fp8_xg_dtype, CGM_ERROR_INVALID_ARGUMENT, "x_gathered is fp32 but x_shard is fp8_e4m3"},
    {"fp8.x_gathered_scaling", fp8_xg_scaling, CGM_ERROR_INVALID_ARGUMENT,
     "x_gathered.scaling = block_1x128 but x_shard.scaling = tensor: expected x_shard's"},
    {"fp8.x_gathered_scale_overlaps_x", fp8_xg_scale_overlaps_x, CGM_ERROR_INVALID_ARGUMENT,
     "output x_gathered.scale overlaps x_shard"},
    {"fp8.x_gathered_scale_overlaps_w_scale", fp8_xg_scale_overlaps_w_scale, CGM_ERROR_INVALID_ARGUMENT,
     "output x_gathered.scale overlaps w.scale"},
    {"fp8.fast_accum_value", fast_accum_value, CGM_ERROR_INVALID_ARGUMENT,
     "options.fp8_fast_accum = 2: expected 0 (promote partial sums to fp32) or 1"},
    {"fp8.collective", fp8_collective, CGM_ERROR_INVALID_ARGUMENT,
     "send is fp8_e4m3 and recv is fp8_e4m3: expected one dtype (fp32, bf16 or fp16)"},
    {"fp8.bulk_layout", fp8_bulk_layout, CGM_ERROR_NOT_SUPPORTED, "fp8 operands with layout NT"},
    {"bias_shape", bias_shape, CGM_ERROR_INVALID_ARGUMENT, "bias is 1 x 5, expected 1 x 6"},
    {"bias_dtype", bias_dtype, CGM_ERROR_INVALID_ARGUMENT, "bias is bf16 but y is fp32"},
    {"overlap", overlap, CGM_ERROR_INVALID_ARGUMENT, "in-place"},
    {"x_gathered_shape", xg_shape, CGM_ERROR_INVALID_ARGUMENT, "x_gathered is 7 x 4, expected 8 x 4"},
    {"x_gathered_dtype", xg_dtype, CGM_ERROR_INVALID_ARGUMENT, "x_gathered is bf16"},
    {"x_gathered_overlap", xg_overlap, CGM_ERROR_INVALID_ARGUMENT, "overlaps"},
    {"stream_on_host", stream_on_host, CGM_ERROR_INVALID_USAGE, "pass NULL"},
    {"backend_nccl_unavailable", backend_nccl, CGM_ERROR_UNAVAILABLE, "nccl"},
    {"backend_cublasmp_unavailable", backend_cublasmp, CGM_ERROR_UNAVAILABLE, "cublasmp"},
    {"layout_nt_shapes", nt_shape, CGM_ERROR_INVALID_ARGUMENT, "layout NT"},
    {"layout_nn_shapes", nn_shape, CGM_ERROR_INVALID_ARGUMENT, "layout NN"},
    {"rs_shard_rows", rs_rows, CGM_ERROR_INVALID_ARGUMENT, "y_shard is 7 x 6, expected 8 x 6"},
    {"ar_rows", ar_rows, CGM_ERROR_INVALID_ARGUMENT, "y is 10 x 6, expected 8 x 6"},
    {"bulk_nothing", bulk_nothing, CGM_ERROR_INVALID_ARGUMENT, "all NULL"},
    {"bulk_partial_gemm", bulk_partial_gemm, CGM_ERROR_INVALID_ARGUMENT, "b is NULL"},
    {"bulk_bad_collective", bulk_bad_collective, CGM_ERROR_INVALID_ARGUMENT, "collective = 9"},
    {"bulk_dtypes", bulk_dtypes, CGM_ERROR_INVALID_ARGUMENT, "send is fp32 and recv is bf16"},
    {"bulk_only_send", bulk_only_send, CGM_ERROR_INVALID_ARGUMENT, "recv is NULL"},
    {"bulk_bias_without_gemm", bulk_bias_without_gemm, CGM_ERROR_INVALID_ARGUMENT, "no GEMM"},
};

static void run_bad_case(const void *param) {
    const bad_case *bc = param;
    cgm_comm *comm = single_rank_comm(NULL);
    args a;
    valid_args(&a, CGM_OP_ALL_GATHER_GEMM);
    bc->mutate(&a);
    CHECK_STATUS(call(comm, &a), bc->expected);
    CHECK_CONTAINS(cgm_last_error(), bc->message);
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));
}

/* X and Y as column slices of one buffer (same ld): disjoint, so allowed;
 * Y starting one column into X's: refused as in-place. */
static void test_column_slices(const void *p) {
    (void)p;
    enum { m = 5, k = 3, n = 4 };
    float buf[m * (k + n)], wbuf[n * k];
    for (int i = 0; i < m * (k + n); i++) buf[i] = (float)(i % 7) - 3;
    for (int i = 0; i < n * k; i++) wbuf[i] = (float)(i % 5) - 2;
    cgm_matrix x = {buf, CGM_DTYPE_FP32, m, k, k + n, NULL, CGM_SCALING_NONE};
    cgm_matrix y = {buf + k, CGM_DTYPE_FP32, m, n, k + n, NULL, CGM_SCALING_NONE};
    cgm_matrix w = {wbuf, CGM_DTYPE_FP32, n, k, k, NULL, CGM_SCALING_NONE};
    double want[m * n];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double acc = 0;
            for (int l = 0; l < k; l++) acc += (double)buf[i * (k + n) + l] * wbuf[j * k + l];
            want[i * n + j] = acc;
        }
    cgm_comm *comm = single_rank_comm(NULL);
    CHECK_OK(cgm_gemm_all_reduce(comm, &x, &w, NULL, &y, NULL, NULL));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) CHECK(buf[i * (k + n) + k + j] == (float)want[i * n + j]);
    y.data = buf + k - 1; /* its first column is X's last */
    CHECK_STATUS(cgm_gemm_all_reduce(comm, &x, &w, NULL, &y, NULL, NULL), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "in-place");
    CHECK_OK(cgm_comm_destroy(comm));
}

static void test_null_comm(const void *p) {
    (void)p;
    args a;
    valid_args(&a, CGM_OP_ALL_GATHER_GEMM);
    CHECK_STATUS(call(NULL, &a), CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "comm is NULL");
    CHECK_OK(cgm_comm_destroy(NULL));
}

static void test_destroyed_comm(const void *p) {
    (void)p;
    cgm_comm *comm = single_rank_comm(NULL);
    CHECK_OK(cgm_comm_destroy(comm));
    args a;
    valid_args(&a, CGM_OP_ALL_GATHER_GEMM);
    CHECK_STATUS(call(comm, &a), CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "not a live communicator");
    int rank;
    CHECK_STATUS(cgm_comm_rank(comm, &rank), CGM_ERROR_INVALID_USAGE);
    cgm_partial_dtype partial;
    CHECK_STATUS(cgm_comm_precision(comm, &partial, NULL), CGM_ERROR_INVALID_USAGE);
    CHECK_STATUS(cgm_comm_destroy(comm), CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "already destroyed");
    /* A new comm works after all that. */
    comm = single_rank_comm(NULL);
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));
}

/* GPU memory given to a host op (the driver's answer faked: no GPU here):
 * refused before anything runs, naming the operand; the comm still works. */
static cgm_memory x_on_gpu(const void *p, int *device) {
    *device = p == (const void *)xbuf ? 1 : -1;
    return p == (const void *)xbuf ? CGM_MEMORY_DEVICE : CGM_MEMORY_UNKNOWN;
}

static void test_gpu_memory_on_host(const void *p) {
    (void)p;
    cgm_comm *comm = single_rank_comm(NULL);
    for (int op = 0; op < CGM_OP_BULK; op++) {
        args a;
        valid_args(&a, (cgm_op)op);
        cgm_memory_set_query(x_on_gpu);
        CHECK_STATUS(call(comm, &a), CGM_ERROR_INVALID_ARGUMENT);
        cgm_memory_set_query(NULL);
        CHECK_CONTAINS(cgm_last_error(), op == CGM_OP_ALL_GATHER_GEMM ? "x_shard.data" : "x.data");
        CHECK_CONTAINS(cgm_last_error(), "is memory of GPU 1, but this call's backend is host");
    }
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));
}

/* aux and bgrad are checked where they live like every operand. */
static cgm_memory epilogue_on_gpu(const void *p, int *device) {
    bool gpu = p == (const void *)abuf || p == (const void *)bgbuf;
    *device = gpu ? 0 : -1;
    return gpu ? CGM_MEMORY_DEVICE : CGM_MEMORY_UNKNOWN;
}

static void test_epilogue_gpu_memory_on_host(const void *p) {
    (void)p;
    cgm_comm *comm = single_rank_comm(NULL);
    for (int e = CGM_EPILOGUE_GELU_AUX; e < CGM_EPILOGUE_COUNT_; e++) {
        args a;
        valid_args(&a, e == CGM_EPILOGUE_BGRAD ? CGM_OP_BULK : CGM_OP_GEMM_REDUCE_SCATTER);
        epi(&a, (cgm_epilogue)e, e != CGM_EPILOGUE_BGRAD, e >= CGM_EPILOGUE_DGELU_BGRAD);
        cgm_memory_set_query(epilogue_on_gpu);
        CHECK_STATUS(call(comm, &a), CGM_ERROR_INVALID_ARGUMENT);
        cgm_memory_set_query(NULL);
        CHECK_CONTAINS(cgm_last_error(), e == CGM_EPILOGUE_BGRAD ? "options.bgrad.data" : "options.aux.data");
        CHECK_CONTAINS(cgm_last_error(), "is memory of GPU 0, but this call's backend is host");
    }
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));
}

static void test_queries(const void *p) {
    (void)p;
    cgm_comm *comm = single_rank_comm(NULL);
    int rank = -1, size = -1;
    cgm_backend b;
    CHECK_OK(cgm_comm_rank(comm, &rank));
    CHECK_OK(cgm_comm_size(comm, &size));
    CHECK_INT_EQ(rank, 0);
    CHECK_INT_EQ(size, 1);
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        CHECK_OK(cgm_comm_backend(comm, (cgm_op)op, &b));
        CHECK_INT_EQ(b, CGM_BACKEND_HOST);
    }
    CHECK_STATUS(cgm_comm_rank(comm, NULL), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cgm_comm_size(comm, NULL), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cgm_comm_backend(comm, (cgm_op)9, &b), CGM_ERROR_INVALID_ARGUMENT);
    cgm_status async;
    CHECK_OK(cgm_comm_get_async_error(comm, &async));
    CHECK_INT_EQ(async, CGM_SUCCESS);
    CHECK_STATUS(cgm_comm_get_async_error(comm, NULL), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_OK(cgm_comm_destroy(comm));
}

static void test_max_m(const void *p) {
    (void)p;
    cgm_config config = CGM_CONFIG_INIT;
    config.max_m = M / 2;
    cgm_comm *comm = single_rank_comm(&config);
    args a;
    valid_args(&a, CGM_OP_ALL_GATHER_GEMM);
    CHECK_STATUS(call(comm, &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "max_m");
    CHECK_OK(cgm_comm_destroy(comm));
}

/* m = 2^31 - 1 (the largest rows a matrix may have) on a comm with the
 * default max_m: every op says m is above max_m, before the checks that
 * would otherwise speak first (the descriptors, of small buffers, overlap
 * once that tall; the bulk collective's shard shape). */
static void test_max_m_checked_first(const void *p) {
    (void)p;
    cgm_comm *comm = single_rank_comm(NULL);
    const int64_t tall = INT32_MAX;
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        args a;
        valid_args(&a, (cgm_op)op);
        const char *what = op == CGM_OP_ALL_GATHER_GEMM ? "m (y's rows)" : "m (x's rows)";
        if (op == CGM_OP_BULK) {
            a.has_x = a.has_w = a.has_y = false;
            a.has_send = a.has_recv = true;
            a.coll = CGM_COLLECTIVE_ALL_GATHER;
            a.send = cgm_matrix_make(xbuf, CGM_DTYPE_FP32, 1, K); /* not the shard of `tall` rows */
            a.recv = cgm_matrix_make(ybuf, CGM_DTYPE_FP32, tall, K);
            what = "m (recv's rows)";
        } else {
            a.x.rows = tall;
            a.y.rows = tall;
        }
        char want[192];
        snprintf(want, sizeof want, "%s = 2147483647 is above the comm's max_m = 16384", what);
        CHECK_STATUS(call(comm, &a), CGM_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(cgm_last_error(), want);
        CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_MAX_M");
    }
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));
}

/* ---- comm creation ---- */

typedef struct create_case {
    const char *name;
    int kind, rank, nranks;
    const char *rendezvous;
    int bad_struct, null_bootstrap;
    int64_t max_m;
    int backend;
    const char *env_name, *env_value;
    cgm_status expected;
    const char *message;
} create_case;

static const create_case create_cases[] = {
    {"null_bootstrap", 1, 0, 1, "x", 0, 1, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "bootstrap is NULL"},
    {"bootstrap_size", 1, 0, 1, "x", 1, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "CGM_BOOTSTRAP_INIT"},
    {"bootstrap_newer_header", 1, 0, 1, "x", 2, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT,
     "compiled against a newer commgemm.h"},
    {"rank_range", 1, 3, 2, "x", 0, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "bootstrap.rank = 3"},
    {"nranks_zero", 1, 0, 0, "x", 0, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "nranks = 0"},
    {"rendezvous_chars", 1, 0, 1, "a b/c", 0, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "rendezvous"},
    {"rendezvous_null", 1, 0, 1, NULL, 0, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "(null)"},
    {"bad_kind", 7, 0, 1, "x", 0, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "bootstrap.kind = 7"},
    {"nccl_null", 2, 0, 1, "x", 0, 0, CGM_UNSET, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "nccl_comm is NULL"},
    {"max_m_zero", 1, 0, 1, "x", 0, 0, 0, 0, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "config.max_m = 0"},
    {"config_backend", 1, 0, 1, "x", 0, 0, CGM_UNSET, 42, NULL, NULL, CGM_ERROR_INVALID_ARGUMENT, "config.backend = 42"},
    {"env_timeout", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_TIMEOUT_MS", "soon", CGM_ERROR_INVALID_ARGUMENT,
     "COMMGEMM_TIMEOUT_MS=\"soon\""},
    /* Bounds that keep deadlines (ms x 10^6) and workspace sizes inside int64_t: 2^44 ms wrapped
     * to a 0.45 ms bound once multiplied, 2^31 x 2^31 fp32 elements to a workspace of 0 bytes. */
    {"env_timeout_huge", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_TIMEOUT_MS", "18446744073710",
     CGM_ERROR_INVALID_ARGUMENT, "config.timeout_ms = 18446744073710 (from environment COMMGEMM_TIMEOUT_MS): "
     "expected 1 to 2147483647"},
    {"env_max_k_huge", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_MAX_K", "2147483648", CGM_ERROR_INVALID_ARGUMENT,
     "config.max_k = 2147483648 (from environment COMMGEMM_MAX_K): expected 1 to 2147483647"},
    {"workspace_huge", 1, 0, 1, "x", 0, 0, 2147483647, 0, "COMMGEMM_MAX_N", "2147483647", CGM_ERROR_INVALID_ARGUMENT,
     "max_m = 2147483647 with max(max_n, max_k) = 2147483647: workspaces of max_m x max(max_n, max_k) elements, "
     "expected at most 2^46"},
    {"env_splits_huge", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_SPLITS", "4294967298", CGM_ERROR_INVALID_ARGUMENT,
     "config.splits = 4294967298"},
    {"env_backend", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_BACKEND", "gloo", CGM_ERROR_INVALID_ARGUMENT,
     "COMMGEMM_BACKEND=\"gloo\""},
    /* Not p2p: it takes LOCAL comms where a GPU is present. */
    {"env_op_backend_gpu_on_host", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_BACKEND", "host,gemm_rs:nccl",
     CGM_ERROR_UNAVAILABLE, "nccl"},
    {"env_backend_unknown_op", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_BACKEND", "host,gemm_xx:host",
     CGM_ERROR_INVALID_ARGUMENT, "COMMGEMM_BACKEND=\"host,gemm_xx:host\": unknown op \"gemm_xx\"; expected ag_gemm"},
    {"env_backend_op_bad_backend", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_BACKEND", "bulk:gloo",
     CGM_ERROR_INVALID_ARGUMENT, "\"gloo\" is not a backend; expected auto, host, p2p, nccl or cublasmp"},
    {"env_backend_twice", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_BACKEND", "ag_gemm:host,ag_gemm:p2p",
     CGM_ERROR_INVALID_ARGUMENT, "ag_gemm's backend given twice"},
    {"env_backend_empty_item", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_BACKEND", "host,,bulk:host",
     CGM_ERROR_INVALID_ARGUMENT, "\"\" is not a backend"},
    {"env_partial_dtype", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_PARTIAL_DTYPE", "bf16",
     CGM_ERROR_INVALID_ARGUMENT, "COMMGEMM_PARTIAL_DTYPE=\"bf16\": expected fp32 or output; set one of them or unset "
     "it (default fp32)"},
    {"env_gemm_reduction", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_GEMM_REDUCTION", "fp16",
     CGM_ERROR_INVALID_ARGUMENT, "COMMGEMM_GEMM_REDUCTION=\"fp16\": expected any or fp32"},
    /* Logging settings: a word the logger does not know is refused, not
     * taken for another level or left out of the subsystems. */
    {"env_debug", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_DEBUG", "BOGUS", CGM_ERROR_INVALID_ARGUMENT,
     "COMMGEMM_DEBUG=\"BOGUS\": expected NONE, WARN, INFO or TRACE (any case); set one of them or unset it "
     "(default NONE)"},
    {"env_debug_subsys", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_DEBUG_SUBSYS", "INIT,Bogus,HOST",
     CGM_ERROR_INVALID_ARGUMENT, "COMMGEMM_DEBUG_SUBSYS=\"INIT,Bogus,HOST\": unknown subsystem \"Bogus\"; "
     "expected comma-separated names among INIT, PLAN, HOST"},
    /* Bounded integer settings. */
    {"env_host_threads_huge", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_HOST_THREADS", "100000",
     CGM_ERROR_INVALID_ARGUMENT, "config.host_threads = 100000 (from environment COMMGEMM_HOST_THREADS): expected "
     "1 to 16"},
    {"env_check_agreement_7", 1, 0, 1, "x", 0, 0, CGM_UNSET, 0, "COMMGEMM_CHECK_AGREEMENT", "7",
     CGM_ERROR_INVALID_ARGUMENT, "config.check_agreement = 7 (from environment COMMGEMM_CHECK_AGREEMENT): "
     "expected 0 to 1"},
};

static void run_create_case(const void *param) {
    const create_case *cc = param;
    if (cc->env_name) setenv(cc->env_name, cc->env_value, 1);
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = (cgm_bootstrap_kind)cc->kind;
    b.rank = cc->rank;
    b.nranks = cc->nranks;
    char name[64];
    snprintf(name, sizeof name, "create-%d", (int)getpid());
    b.rendezvous = cc->rendezvous && strcmp(cc->rendezvous, "x") == 0 ? name : cc->rendezvous;
    if (cc->bad_struct == 1) b.struct_size = 8;
    if (cc->bad_struct == 2) b.struct_size = sizeof b + 16; /* a later header's struct */
    cgm_config config = CGM_CONFIG_INIT;
    config.max_m = cc->max_m;
    config.backend = (cgm_backend)cc->backend;
    cgm_comm *comm = (cgm_comm *)0x1;
    CHECK_STATUS(cgm_comm_create(cc->null_bootstrap ? NULL : &b, &config, &comm), cc->expected);
    CHECK(comm == NULL);
    CHECK_CONTAINS(cgm_last_error(), cc->message);
    /* Nothing broke: a valid comm can be created afterwards. */
    if (cc->env_name) unsetenv(cc->env_name);
}

/* COMMGEMM_BACKEND's op:backend items pick each op's backend; the config's
 * per-op field still wins over them. */
static void test_env_backend_per_op(const void *p) {
    (void)p;
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("api-backend-env", name, sizeof name);
    setenv("COMMGEMM_BACKEND", "host,gemm_rs:host,bulk:auto", 1);
    cgm_config config = CGM_CONFIG_INIT;
    config.op_backend[CGM_OP_BULK] = CGM_BACKEND_HOST;
    cgm_comm *comm = NULL;
    CHECK_OK(cgm_comm_create(&b, &config, &comm));
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        cgm_backend got = CGM_BACKEND_DEFAULT;
        CHECK_OK(cgm_comm_backend(comm, (cgm_op)op, &got));
        CHECK_INT_EQ(got, CGM_BACKEND_HOST);
    }
    CHECK_OK(cgm_comm_destroy(comm));
    unsetenv("COMMGEMM_BACKEND");
}

/* host_threads and check_agreement in the config: in range they are taken,
 * out of range refused naming the field and the range (they were taken
 * whatever their size). Lower-case log words are the same words. */
static void test_config_int_bounds(const void *p) {
    (void)p;
    setenv("COMMGEMM_DEBUG", "warn", 1);
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("api-bounds", name, sizeof name);
    static const struct {
        int host_threads, check_agreement;
        const char *message; /* NULL: created */
    } cases[] = {
        {100000, CGM_UNSET, "config.host_threads = 100000 (from config field): expected 1 to 16"},
        {0, CGM_UNSET, "config.host_threads = 0 (from config field): expected 1 to 16"},
        {17, CGM_UNSET, "expected 1 to 16"},
        {CGM_UNSET, 7, "config.check_agreement = 7 (from config field): expected 0 to 1"},
        {CGM_UNSET, -2, "config.check_agreement = -2"},
        {16, 0, NULL},
        {1, 1, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cgm_config config = CGM_CONFIG_INIT;
        config.host_threads = cases[i].host_threads;
        config.check_agreement = cases[i].check_agreement;
        cgm_comm *comm = (cgm_comm *)0x1;
        if (cases[i].message) {
            CHECK_STATUS(cgm_comm_create(&b, &config, &comm), CGM_ERROR_INVALID_ARGUMENT);
            CHECK(comm == NULL);
            CHECK_CONTAINS(cgm_last_error(), cases[i].message);
            continue;
        }
        CHECK_OK(cgm_comm_create(&b, &config, &comm));
        check_comm_still_works(comm);
        CHECK_OK(cgm_comm_destroy(comm));
    }
}

/* Bad precision values in the config: refused at create, naming the field,
 * the values it takes and the variable that DEFAULT reads. */
static void test_config_precision_bad(const void *p) {
    (void)p;
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("api-precision", name, sizeof name);
    cgm_config config = CGM_CONFIG_INIT;
    config.partial_dtype = (cgm_partial_dtype)7;
    cgm_comm *comm = (cgm_comm *)0x1;
    CHECK_STATUS(cgm_comm_create(&b, &config, &comm), CGM_ERROR_INVALID_ARGUMENT);
    CHECK(comm == NULL);
    CHECK_CONTAINS(cgm_last_error(), "config.partial_dtype = 7: expected 0 (default), 1 (fp32) or 2 (output); "
                                     "set one of them, or 0 to take COMMGEMM_PARTIAL_DTYPE or its default");
    config = (cgm_config)CGM_CONFIG_INIT;
    config.gemm_reduction = (cgm_gemm_reduction)-3;
    CHECK_STATUS(cgm_comm_create(&b, &config, &comm), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "config.gemm_reduction = -3: expected 0 (default), 1 (any) or 2 (fp32)");
}

/* ---- structs of a program built against an older commgemm.h ----
 * cgm_config and cgm_op_options as they were before partial_dtype and
 * gemm_reduction, each followed in memory by bytes that would be refused
 * as those fields: the library must read only struct_size bytes, and
 * treat what it did not get as unset. */
typedef struct config_before_precision {
    size_t struct_size;
    cgm_backend backend;
    cgm_backend op_backend[CGM_OP_COUNT_];
    int64_t max_m, max_n, max_k, timeout_ms;
    int algo, splits, host_threads, check_agreement;
} config_before_precision;

typedef struct options_before_precision {
    size_t struct_size;
    cgm_layout layout;
    int accumulate;
    cgm_algo algo;
    int splits;
    cgm_backend backend;
    int allow_tf32;
} options_before_precision;

/* cgm_op_options before fp8_fast_accum and y_amax: the fields above, then
 * partial_dtype and gemm_reduction. */
typedef struct options_before_fp8 {
    options_before_precision first;
    cgm_partial_dtype partial_dtype;
    cgm_gemm_reduction gemm_reduction;
} options_before_fp8;

/* cgm_matrix before `scaling`: what a program built then passes. */
typedef struct matrix_before_fp8 {
    void *data;
    cgm_dtype dtype;
    int64_t rows, cols, ld;
    const float *scale;
} matrix_before_fp8;

/* The options and matrices of a program built before fp8, each followed
 * by bytes that would be refused as the new fields (fp8_fast_accum 0x7f7f7f7f,
 * a scaling that is no cgm_scaling): ordinary calls work, as the library
 * reads neither. */
static void test_older_fp8_structs(const void *p) {
    (void)p;
    cgm_comm *comm = single_rank_comm(NULL);
    union {
        options_before_fp8 old;
        unsigned char bytes[sizeof(cgm_op_options) + 16];
    } options;
    memset(options.bytes, 0x7f, sizeof options.bytes);
    options.old = (options_before_fp8){{sizeof(options_before_fp8), CGM_LAYOUT_TN, 0, CGM_ALGO_AUTO, 0,
                                        CGM_BACKEND_DEFAULT, 0},
                                       CGM_PARTIAL_DTYPE_DEFAULT, CGM_GEMM_REDUCTION_DEFAULT};
    CHECK_INT_EQ(sizeof(options_before_fp8), CGM_SIZE_BEFORE(cgm_op_options, fp8_fast_accum));
    CHECK_INT_EQ(sizeof(matrix_before_fp8), offsetof(cgm_matrix, scaling));
    union old_matrix {
        matrix_before_fp8 old;
        unsigned char bytes[sizeof(cgm_matrix) + 16];
    } x, w, y;
    for (int op = 0; op < CGM_OP_BULK; op++) {
        args a;
        valid_args(&a, (cgm_op)op);
        memcpy(&a.opt, options.bytes, sizeof a.opt);
        union old_matrix *olds[] = {&x, &w, &y};
        const cgm_matrix *news[] = {&a.x, &a.w, &a.y};
        for (int i = 0; i < 3; i++) {
            memset(olds[i]->bytes, 0x7f, sizeof olds[i]->bytes);
            olds[i]->old = (matrix_before_fp8){news[i]->data, news[i]->dtype, news[i]->rows, news[i]->cols,
                                               news[i]->ld, NULL};
        }
        const cgm_matrix *xo = (const cgm_matrix *)x.bytes, *wo = (const cgm_matrix *)w.bytes;
        cgm_matrix *yo = (cgm_matrix *)y.bytes;
        const cgm_op_options *o = (const cgm_op_options *)options.bytes;
        if (op == CGM_OP_ALL_GATHER_GEMM) CHECK_OK(cgm_all_gather_gemm(comm, xo, wo, NULL, yo, NULL, o, NULL));
        else if (op == CGM_OP_GEMM_REDUCE_SCATTER) CHECK_OK(cgm_gemm_reduce_scatter(comm, xo, wo, NULL, yo, o, NULL));
        else CHECK_OK(cgm_gemm_all_reduce(comm, xo, wo, NULL, yo, o, NULL));
        double ref[M * N];
        test_ref_gemm(CGM_LAYOUT_TN, &a.x, &a.w, M, N, K, ref);
        CHECK_INT_EQ(test_compare(&a.y, ref, M, N, 1e-5, "y of an older program's call"), 0);
    }
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));
}

/* cgm_op_options before the epilogue fields: the fields up to y_amax. */
typedef struct options_before_epilogue {
    options_before_fp8 first;
    int fp8_fast_accum;
    float *y_amax;
} options_before_epilogue;

/* A program built before the epilogues passes the smaller options,
 * followed by bytes that would be refused as the new fields (an epilogue
 * 0x7f7f7f7f, wild aux and bgrad pointers): its calls run without an
 * epilogue. */
static void test_older_epilogue_structs(const void *p) {
    (void)p;
    cgm_comm *comm = single_rank_comm(NULL);
    union {
        options_before_epilogue old;
        unsigned char bytes[sizeof(cgm_op_options) + 16];
    } options;
    memset(options.bytes, 0x7f, sizeof options.bytes);
    options.old = (options_before_epilogue){{{sizeof(options_before_epilogue), CGM_LAYOUT_TN, 0, CGM_ALGO_AUTO, 0,
                                              CGM_BACKEND_DEFAULT, 0},
                                             CGM_PARTIAL_DTYPE_DEFAULT, CGM_GEMM_REDUCTION_DEFAULT},
                                            0, NULL};
    CHECK_INT_EQ(sizeof(options_before_epilogue), CGM_SIZE_BEFORE(cgm_op_options, epilogue));
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        args a;
        valid_args(&a, (cgm_op)op);
        a.has_bias = true;
        memcpy(&a.opt, options.bytes, sizeof a.opt);
        test_poison(&a.y);
        CHECK_OK(call(comm, &a));
        double ref[M * N];
        test_ref_gemm(CGM_LAYOUT_TN, &a.x, &a.w, M, N, K, ref);
        for (int i = 0; i < M * N; i++) ref[i] += test_get(&a.bias, 0, i % N);
        CHECK_INT_EQ(test_compare(&a.y, ref, M, N, 1e-5, "y of a call from before the epilogues"), 0);
    }
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));
}

static void test_older_structs(const void *p) {
    (void)p;
    /* The fields the old config lacks fall back to the environment. */
    setenv("COMMGEMM_PARTIAL_DTYPE", "output", 1);
    union {
        config_before_precision old;
        unsigned char bytes[sizeof(cgm_config) + 16];
    } config;
    memset(config.bytes, 0x7f, sizeof config.bytes);
    config.old = (config_before_precision){sizeof(config_before_precision), CGM_BACKEND_HOST,
                                           {CGM_BACKEND_DEFAULT, CGM_BACKEND_DEFAULT, CGM_BACKEND_DEFAULT,
                                            CGM_BACKEND_DEFAULT},
                                           CGM_UNSET, CGM_UNSET, CGM_UNSET, CGM_UNSET,
                                           CGM_UNSET, CGM_UNSET, CGM_UNSET, CGM_UNSET};
    CHECK(sizeof(config_before_precision) < sizeof(cgm_config));
    cgm_comm *comm = single_rank_comm((const cgm_config *)&config);
    cgm_partial_dtype partial;
    cgm_gemm_reduction reduction;
    CHECK_OK(cgm_comm_precision(comm, &partial, &reduction));
    CHECK_INT_EQ(partial, CGM_PARTIAL_DTYPE_OUTPUT);
    CHECK_INT_EQ(reduction, CGM_GEMM_REDUCTION_ANY);

    union {
        options_before_precision old;
        unsigned char bytes[sizeof(cgm_op_options) + 16];
    } options;
    memset(options.bytes, 0x7f, sizeof options.bytes);
    options.old = (options_before_precision){sizeof(options_before_precision), CGM_LAYOUT_TN, 0, CGM_ALGO_AUTO, 0,
                                             CGM_BACKEND_DEFAULT, 0};
    CHECK(sizeof(options_before_precision) < sizeof(cgm_op_options));
    for (int op = 0; op < CGM_OP_BULK; op++) {
        args a;
        valid_args(&a, (cgm_op)op);
        memcpy(&a.opt, options.bytes, sizeof a.opt);
        CHECK_OK(call(comm, &a));
    }
    /* A size that no version of the struct had is refused, naming the ones
     * it had. */
    args a;
    valid_args(&a, CGM_OP_ALL_GATHER_GEMM);
    a.opt.struct_size = sizeof(options_before_precision) + 4;
    char want[96];
    snprintf(want, sizeof want, "expected %zu, %zu, %zu or %zu (the sizes this struct has had)",
             sizeof(options_before_precision), CGM_SIZE_BEFORE(cgm_op_options, fp8_fast_accum),
             CGM_SIZE_BEFORE(cgm_op_options, epilogue), sizeof(cgm_op_options));
    CHECK_STATUS(call(comm, &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), want);
    check_comm_still_works(comm);
    CHECK_OK(cgm_comm_destroy(comm));

    config.old.struct_size = sizeof(config_before_precision) + 4;
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("api-old", name, sizeof name);
    CHECK_STATUS(cgm_comm_create(&b, (const cgm_config *)&config, &comm), CGM_ERROR_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "config->struct_size = %zu, expected %zu or %zu", sizeof(config_before_precision) + 4,
             sizeof(config_before_precision), sizeof(cgm_config));
    CHECK_CONTAINS(cgm_last_error(), want);
}

static void register_cases(void) {
    test_set_timeout(30);
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "bad_input.%s", bad_cases[i].name);
        test_add(name, run_bad_case, &bad_cases[i]);
    }
    for (size_t i = 0; i < sizeof create_cases / sizeof create_cases[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "bad_create.%s", create_cases[i].name);
        test_add(name, run_create_case, &create_cases[i]);
    }
    test_add("null_comm", test_null_comm, NULL);
    test_add("column_slices_of_one_buffer", test_column_slices, NULL);
    test_add("destroyed_comm", test_destroyed_comm, NULL);
    test_add("queries", test_queries, NULL);
    test_add("gpu_memory_on_host_refused", test_gpu_memory_on_host, NULL);
    test_add("max_m_exceeded", test_max_m, NULL);
    test_add("max_m_checked_first", test_max_m_checked_first, NULL);
    test_add("bad_create.config_precision", test_config_precision_bad, NULL);
    test_add("bad_create.config_int_bounds", test_config_int_bounds, NULL);
    test_add("env_backend_per_op", test_env_backend_per_op, NULL);
    test_add("older_header_structs", test_older_structs, NULL);
    test_add("older_header_structs_before_fp8", test_older_fp8_structs, NULL);
    test_add("older_header_structs_before_epilogue", test_older_epilogue_structs, NULL);
    test_add("epilogue_gpu_memory_on_host_refused", test_epilogue_gpu_memory_on_host, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
