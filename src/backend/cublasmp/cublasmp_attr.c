/* What the cublasmp backend runs of commgemm's epilogues, fp8 recipes and
 * algorithms, and the cublasMpMatmul descriptor attributes that express
 * them (pure: no GPU; tested against the fake library, which records each
 * attribute set).
 *
 * Epilogues. cuBLASMp's matmul descriptor takes cuBLASLt's GELU family
 * (EPILOGUE, BIAS_POINTER / BIAS_DATA_TYPE, EPILOGUE_AUX_POINTER / _LD /
 * _DATA_TYPE). On AG+GEMM its output is a local GEMM's (each rank's n_loc
 * columns of all m rows), so commgemm's GELU, GELU_AUX, DGELU and
 * DGELU_BGRAD map one to one (bgrad: the sums over D's columns, i.e. over
 * all m rows). On GEMM+RS and GEMM+AR cuBLASMp applies the epilogue in the
 * GEMM, on each rank's partial product, where commgemm's epilogues act on
 * the reduced rows: refused.
 *
 * FP8. TN only (cuBLASMp's rule and commgemm's), per-tensor scales
 * (A_SCALE / B_SCALE, mode SCALAR_FP32: the scale multiplies, as in
 * commgemm). GEMM+RS and GEMM+AR: each rank's X and W scales are its own,
 * as cuBLASMp's per-rank scale pointers are. AG+GEMM is refused: cuBLASMp
 * applies the one B scale this rank passes to every gathered row, while
 * commgemm keeps each shard's own scale. Block scaling is refused: cuBLASMp
 * 0.6+ has VEC128_FP32 and BLK128x128_FP32, but it documents neither the
 * layout of the scale arrays (cuBLASLt's differ from commgemm's row-major
 * [rows, ceil(k / 128)]) nor how they are distributed with the operands.
 * An fp8 Y (D_SCALE, AMAX_D) on GEMM+RS, with the partials sent in fp32
 * (COMMUNICATION_TYPE = CUDA_R_32F). */
#include <stdio.h>
#include <string.h>

#include "backend/cublasmp/cublasmp.h"

#define CMP_RUN_ELSEWHERE                                                   \
    "run this op on a backend that has it (the nccl and host backends do; "\
    "docs/EPILOGUES.md and docs/FP8.md list each backend's)"

cgm_status cmp_fail(const cmp_api *api, cublasMpStatus_t s, const char *what,
                    const char *context) {
    cgm_status status = CGM_ERROR_CUBLAS;
    const char *advice = "run with CUBLASMP_LOG_LEVEL=5 for cuBLASMp's reason";
    if (s == CUBLASMP_STATUS_NOT_SUPPORTED || s == CUBLASMP_STATUS_INVALID_VALUE) {
        status = CGM_ERROR_NOT_SUPPORTED;
        advice = "cuBLASMp does not take this combination; use the p2p or "
                 "nccl backend for it (CUBLASMP_LOG_LEVEL=5 shows cuBLASMp's "
                 "reason)";
    } else if (s == CUBLASMP_STATUS_ALLOCATION_FAILED) {
        status = CGM_ERROR_OUT_OF_MEMORY;
        advice = "free device memory or use smaller shapes";
    }
    const char *text = api && api->GetStatusString ? api->GetStatusString(s)
                                                   : NULL;
    return cgm_error(status, "%s failed for %s: expected "
                     "CUBLASMP_STATUS_SUCCESS, found %d (%s%s%s); %s",
                     what, context, (int)s, cmp_status_name(s),
                     text && *text ? ": " : "", text && *text ? text : "",
                     advice);
}

bool cmp_bias_in_epilogue(const cgm_call *c) {
    return c->op == CGM_OP_ALL_GATHER_GEMM && c->has_bias &&
           (c->epilogue == CGM_EPILOGUE_GELU ||
            c->epilogue == CGM_EPILOGUE_GELU_AUX);
}

int cmp_map_epilogue(const cgm_call *c) {
    const bool bias = cmp_bias_in_epilogue(c);
    switch (c->epilogue) {
    case CGM_EPILOGUE_GELU:
        return bias ? CUBLASMP_MATMUL_EPILOGUE_GELU_BIAS
                    : CUBLASMP_MATMUL_EPILOGUE_GELU;
    case CGM_EPILOGUE_GELU_AUX:
        return bias ? CUBLASMP_MATMUL_EPILOGUE_GELU_AUX_BIAS
                    : CUBLASMP_MATMUL_EPILOGUE_GELU_AUX;
    case CGM_EPILOGUE_DGELU: return CUBLASMP_MATMUL_EPILOGUE_DGELU;
    case CGM_EPILOGUE_DGELU_BGRAD: return CUBLASMP_MATMUL_EPILOGUE_DGELU_BGRAD;
    default: return CUBLASMP_MATMUL_EPILOGUE_DEFAULT;
    }
}

static cgm_status check_epilogue(const cgm_call *c) {
    const char *name = cgm_epilogue_name(c->epilogue);
    if (c->epilogue == CGM_EPILOGUE_NONE) return CGM_SUCCESS;
    if (c->op != CGM_OP_ALL_GATHER_GEMM)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend does not run %s on %s: "
                         "commgemm applies it after the reduction, to the "
                         "reduced rows (a partial sum has no GELU), but "
                         "cuBLASMp applies its epilogue in the GEMM, to each "
                         "rank's partial product (its BIAS_RESULT_SCHEME "
                         "leaves a Matmul+ReduceScatter's bias gradient as "
                         "per-rank partial sums, and NVIDIA's "
                         "TransformerEngine test of its Matmul+AllReduce "
                         "expects the bias once per rank); %s, or pass "
                         "CGM_EPILOGUE_NONE and apply %s after the op",
                         name, cgm_op_name(c->op), CMP_RUN_ELSEWHERE, name);
    if (c->has_aux && cgm_matrix_ld(&c->aux) % 8)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend runs %s through cuBLASMp's "
                         "EPILOGUE_AUX_LD, which must be a multiple of 8 "
                         "elements, found options.aux->ld = %lld; pad aux's "
                         "rows to a multiple of 8 or %s",
                         name, (long long)cgm_matrix_ld(&c->aux),
                         CMP_RUN_ELSEWHERE);
    return CGM_SUCCESS;
}

static cgm_status fp8_refused(const cgm_call *c, const char *why) {
    return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                     "the cublasmp backend does not run this fp8 %s (%s x %s "
                     "with %s scaling, %s output): %s; %s",
                     cgm_op_name(c->op), cgm_dtype_name(c->in_dtype),
                     cgm_dtype_name(c->w_dtype), cgm_scaling_name(c->scaling),
                     cgm_dtype_name(c->out_dtype), why, CMP_RUN_ELSEWHERE);
}

static cgm_status check_fp8(const cgm_call *c) {
    const bool fp8_in = cgm_dtype_is_fp8(c->in_dtype);
    const bool fp8_out = cgm_dtype_is_fp8(c->out_dtype);
    if (!fp8_in && !fp8_out) return CGM_SUCCESS;
    if (!fp8_in)
        return fp8_refused(c, "cuBLASMp's fp8 outputs need fp8 inputs");
    if (c->op == CGM_OP_ALL_GATHER_GEMM)
        return fp8_refused(c, "cuBLASMp applies the one B scale this rank "
                              "passes to every gathered row of X, while "
                              "commgemm's AG+GEMM keeps each shard's own "
                              "scale");
    if (c->scaling != CGM_SCALING_TENSOR)
        return fp8_refused(c, "cuBLASMp 0.6+ has block scale modes "
                              "(VEC128_FP32, BLK128x128_FP32), but documents "
                              "neither their scale arrays' layout (cuBLASLt's "
                              "differs from commgemm's row-major "
                              "[rows, ceil(k / 128)]) nor how they are "
                              "distributed; pass per-tensor scales");
    if (fp8_out && c->op != CGM_OP_GEMM_REDUCE_SCATTER)
        return fp8_refused(c, "an fp8 Y runs here on GEMM+RS only (GEMM+AR's "
                              "fp32 buffer and all-gather carry no fp8); pass "
                              "a bf16, fp16 or fp32 Y");
    if (fp8_out && c->has_bias)
        return fp8_refused(c, "commgemm adds the bias after cuBLASMp, which "
                              "an fp8 Y (already scaled and rounded) no "
                              "longer allows; pass bias = NULL and add it "
                              "before quantizing");
    if (c->has_bias && c->bias.dtype != c->out_dtype)
        return fp8_refused(c, "commgemm's fp32 pass adds a bias of Y's dtype; "
                              "pass the bias in Y's dtype");
    return CGM_SUCCESS;
}

cgm_status cmp_check_call(const cgm_call *c) {
    if (c->op == CGM_OP_BULK || !c->has_gemm)
        return CGM_SUCCESS; /* run refuses bulk, saying what to use */
    int algo = 0;
    cgm_status s = cmp_map_algo(c->algo, NULL, &algo);
    if (s == CGM_SUCCESS) s = check_epilogue(c);
    if (s == CGM_SUCCESS) s = check_fp8(c);
    return s;
}

static void add_i32(cmp_attrs *l, int attr, int value) {
    if (l->n >= CMP_MAX_ATTRS) return; /* sized for the most a call sets */
    cmp_attr *a = &l->a[l->n++];
    memset(a, 0, sizeof *a);
    a->attr = attr;
    a->kind = CMP_ATTR_I32;
    a->value = value;
}

static void add_i64(cmp_attrs *l, int attr, int64_t value) {
    add_i32(l, attr, 0);
    l->a[l->n - 1].kind = CMP_ATTR_I64;
    l->a[l->n - 1].value = value;
}

static void add_ptr(cmp_attrs *l, int attr, const void *ptr) {
    add_i32(l, attr, 0);
    l->a[l->n - 1].kind = CMP_ATTR_PTR;
    l->a[l->n - 1].ptr = ptr;
}

void cmp_descriptor_attrs(const cgm_call *c, const cmp_problem *p, int algo,
                          cmp_attrs *l) {
    memset(l, 0, sizeof *l);
    const int epilogue = p->native_ar ? CUBLASMP_MATMUL_EPILOGUE_ALLREDUCE
                                      : cmp_map_epilogue(c);
    add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_TRANSA, p->trans_a);
    add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_TRANSB, p->trans_b);
    add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_ALGO_TYPE, algo);
    add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE, epilogue);
    int type = 0;
    if (cgm_dtype_is_fp8(c->in_dtype)) {
        add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_A_SCALE_MODE,
                CUBLASMP_MATMUL_MATRIX_SCALE_SCALAR_FP32);
        add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_B_SCALE_MODE,
                CUBLASMP_MATMUL_MATRIX_SCALE_SCALAR_FP32);
    }
    if (cgm_dtype_is_fp8(c->out_dtype)) {
        add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_D_SCALE_MODE,
                CUBLASMP_MATMUL_MATRIX_SCALE_SCALAR_FP32);
        /* Sums in fp32, not in the fp8 D (the default is the scale type,
         * but commgemm's fp32 rule does not rest on a default). */
        add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_COMMUNICATION_TYPE,
                CMP_CUDA_R_32F);
    }
    if (c->has_aux && cmp_map_dtype(c->aux.dtype, &type) == CGM_SUCCESS) {
        add_i64(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE_AUX_LD,
                cgm_matrix_ld(&c->aux));
        add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE_AUX_DATA_TYPE,
                type);
    }
    const cgm_matrix *bias = cmp_bias_in_epilogue(c) ? &c->bias
                           : c->epilogue == CGM_EPILOGUE_DGELU_BGRAD &&
                                     c->has_bgrad ? &c->bgrad : NULL;
    if (bias && cmp_map_dtype(bias->dtype, &type) == CGM_SUCCESS)
        add_i32(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_DATA_TYPE, type);
}

void cmp_call_attrs(const cgm_call *c, cmp_attrs *l) {
    memset(l, 0, sizeof *l);
    if (cgm_dtype_is_fp8(c->in_dtype)) {
        add_ptr(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_A_SCALE_POINTER,
                c->w.scale);
        add_ptr(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_B_SCALE_POINTER,
                c->x.scale);
    }
    if (cgm_dtype_is_fp8(c->out_dtype)) {
        add_ptr(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_D_SCALE_POINTER,
                c->y.scale);
        if (c->y_amax)
            add_ptr(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_AMAX_D_POINTER,
                    c->y_amax);
    }
    if (c->has_aux)
        add_ptr(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE_AUX_POINTER,
                c->aux.data);
    if (cmp_bias_in_epilogue(c))
        add_ptr(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_POINTER,
                c->bias.data);
    else if (c->epilogue == CGM_EPILOGUE_DGELU_BGRAD && c->has_bgrad)
        add_ptr(l, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_POINTER,
                c->bgrad.data);
}

cgm_status cmp_apply_attrs(const cmp_api *api, cublasMpMatmulDescriptor_t mm,
                           const cmp_attrs *l, const char *context) {
    for (int i = 0; i < l->n; i++) {
        const cmp_attr *a = &l->a[i];
        const int32_t v32 = (int32_t)a->value;
        const void *buf = a->kind == CMP_ATTR_PTR ? (const void *)&a->ptr
                        : a->kind == CMP_ATTR_I64 ? (const void *)&a->value
                                                  : (const void *)&v32;
        const size_t size = a->kind == CMP_ATTR_PTR ? sizeof a->ptr
                          : a->kind == CMP_ATTR_I64 ? sizeof a->value
                                                    : sizeof v32;
        cublasMpStatus_t s = api->MatmulDescriptorSetAttribute(
            mm, (cublasMpMatmulDescriptorAttribute_t)a->attr, buf, size);
        if (s != CUBLASMP_STATUS_SUCCESS) {
            char what[96];
            snprintf(what, sizeof what, "cublasMpMatmulDescriptorSetAttribute"
                     "(%s)", cmp_attr_name(a->attr));
            return cmp_fail(api, s, what, context);
        }
    }
    return CGM_SUCCESS;
}

const char *cmp_attr_name(int attr) {
    switch (attr) {
#define NAME(x) case CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_##x: return #x
    NAME(TRANSA); NAME(TRANSB); NAME(COMPUTE_TYPE); NAME(ALGO_TYPE);
    NAME(COMMUNICATION_SM_COUNT); NAME(EPILOGUE); NAME(BIAS_POINTER);
    NAME(BIAS_BATCH_STRIDE); NAME(BIAS_DATA_TYPE); NAME(EPILOGUE_AUX_POINTER);
    NAME(EPILOGUE_AUX_LD); NAME(EPILOGUE_AUX_DATA_TYPE); NAME(A_SCALE_POINTER);
    NAME(A_SCALE_MODE); NAME(B_SCALE_POINTER); NAME(B_SCALE_MODE);
    NAME(D_SCALE_POINTER); NAME(D_SCALE_MODE); NAME(AMAX_D_POINTER);
    NAME(COMMUNICATION_TYPE);
#undef NAME
    default: return "unknown attribute";
    }
}
