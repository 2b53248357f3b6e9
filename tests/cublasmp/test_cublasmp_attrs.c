/* The cublasmp backend's epilogues, fp8 recipes and algorithms without a
 * GPU: what its check hook accepts and refuses (cmp_check_call), and the
 * cublasMpMatmul descriptor attributes each accepted call sets, as the fake
 * cuBLASMp records them (cmp_descriptor_attrs, cmp_call_attrs,
 * cmp_apply_attrs). Pointers are tokens: nothing here dereferences them. */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "backend/cublasmp/cublasmp.h"
#include "fake_cublasmp.h"
#include "harness.h"

#define TOKEN(n) ((void *)(uintptr_t)(0x1000 * (n)))
#define SET_ATTRIBUTE "cublasMpMatmulDescriptorSetAttribute"

typedef struct fake_lib {
    cmp_api api;
    fake_events_fn events;
    fake_reset_fn reset;
    fake_fail_fn fail;
} fake_lib;

static void lib_open(fake_lib *f) {
    memset(f, 0, sizeof *f);
    CHECK_OK(cmp_lib_load(FAKE_V1000, &f->api));
    CHECK(fake_cmp_bind(f->api.dl, &f->events, &f->reset, &f->fail));
    f->reset();
}

static cgm_matrix matrix(void *data, cgm_dtype dtype, int64_t rows,
                         int64_t cols) {
    cgm_matrix m = cgm_matrix_make(data, dtype, rows, cols);
    return m;
}

/* A validated-looking call: P = 2, 64 x 64 x 64 (local sizes), TN. */
static cgm_call make_call(cgm_op op, cgm_dtype in, cgm_dtype out) {
    cgm_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.layout = CGM_LAYOUT_TN;
    c.algo = CGM_ALGO_AUTO;
    c.has_gemm = true;
    c.m = 64;
    c.n = 64;
    c.k = 64;
    c.in_dtype = in;
    c.w_dtype = in;
    c.out_dtype = out;
    const int64_t y_rows = op == CGM_OP_GEMM_REDUCE_SCATTER ? 32 : 64;
    c.x = matrix(TOKEN(1), in, op == CGM_OP_ALL_GATHER_GEMM ? 32 : 64, 64);
    c.w = matrix(TOKEN(2), in, 64, 64);
    c.y = matrix(TOKEN(3), out, y_rows, 64);
    if (cgm_dtype_is_fp8(in)) {
        c.scaling = CGM_SCALING_TENSOR;
        c.x.scale = TOKEN(11);
        c.x.scaling = CGM_SCALING_TENSOR;
        c.w.scale = TOKEN(12);
        c.w.scaling = CGM_SCALING_TENSOR;
    }
    if (cgm_dtype_is_fp8(out)) {
        c.y.scale = TOKEN(13);
        c.y.scaling = CGM_SCALING_TENSOR;
    }
    return c;
}

static void with_bias(cgm_call *c, cgm_dtype dtype) {
    c->has_bias = true;
    c->bias = matrix(TOKEN(4), dtype, 1, c->y.cols);
}

static void with_epilogue(cgm_call *c, cgm_epilogue e) {
    c->epilogue = e;
    if (e == CGM_EPILOGUE_GELU_AUX || e == CGM_EPILOGUE_DGELU ||
        e == CGM_EPILOGUE_DGELU_BGRAD) {
        c->has_aux = true;
        c->aux = matrix(TOKEN(5), c->out_dtype, c->y.rows, c->y.cols);
        c->aux.ld = 72;
    }
    if (e == CGM_EPILOGUE_DGELU_BGRAD) {
        c->has_bgrad = true;
        c->bgrad = matrix(TOKEN(6), CGM_DTYPE_FP32, 1, c->y.cols);
    }
}

static cmp_problem problem(const cgm_call *c, int algo) {
    cmp_shape s;
    memset(&s, 0, sizeof s);
    s.op = c->op;
    s.layout = c->layout;
    s.nranks = 2;
    s.m = c->m;
    s.n_total = c->op == CGM_OP_ALL_GATHER_GEMM ? 2 * c->n : c->n;
    s.k_total = c->op == CGM_OP_ALL_GATHER_GEMM ? c->k : 2 * c->k;
    s.ldx = s.ldw = s.ldy = 64;
    s.algo_type = algo;
    cmp_problem p;
    CHECK_OK(cmp_map_problem(&s, &p));
    return p;
}

/* Every attribute the backend sets for `c` (descriptor, then call),
 * through the fake; *n gets how many were recorded. */
static const fake_event *record_attrs(fake_lib *f, const cgm_call *c,
                                      int algo, int *n) {
    int map_algo = 0;
    CHECK_OK(cmp_map_algo(c->algo, NULL, &map_algo));
    if (algo < 0) algo = map_algo;
    const cmp_problem p = problem(c, algo);
    cmp_attrs fixed, per_call;
    cmp_descriptor_attrs(c, &p, algo, &fixed);
    cmp_call_attrs(c, &per_call);
    f->reset();
    cublasMpMatmulDescriptor_t mm = TOKEN(99);
    CHECK_OK(cmp_apply_attrs(&f->api, mm, &fixed, "test"));
    CHECK_OK(cmp_apply_attrs(&f->api, mm, &per_call, "test"));
    const fake_event *ev = NULL;
    *n = f->events(&ev);
    CHECK_INT_EQ(*n, fixed.n + per_call.n);
    for (int i = 0; i < *n; i++) {
        CHECK(!strcmp(ev[i].fn, SET_ATTRIBUTE));
        CHECK(ev[i].ptr == mm);
    }
    return ev;
}

/* The value set for `attr` (-1 when it was not set; twice: a failure). */
static long long attr_value(const fake_event *ev, int n, int attr) {
    long long v = -1;
    int seen = 0;
    for (int i = 0; i < n; i++)
        if (ev[i].attr == attr) {
            v = ev[i].value;
            seen++;
            CHECK_INT_EQ(ev[i].size,
                         attr == CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE_AUX_LD
                                 ? 8
                         : strstr(cmp_attr_name(attr), "POINTER") ? sizeof(void *)
                                                                  : 4);
        }
    if (seen > 1) TEST_FAIL("attribute %s set %d times", cmp_attr_name(attr), seen);
    return v;
}

#define ATTR(x) CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_##x
#define PTR(p) ((long long)(uintptr_t)(p))

static void epilogues_all_gather(const void *param) {
    (void)param;
    fake_lib f;
    lib_open(&f);
    const struct {
        cgm_epilogue e;
        bool bias;
        int expect; /* cublasMpMatmulEpilogue_t */
    } cases[] = {
        {CGM_EPILOGUE_NONE, true, CUBLASMP_MATMUL_EPILOGUE_DEFAULT},
        {CGM_EPILOGUE_GELU, false, CUBLASMP_MATMUL_EPILOGUE_GELU},
        {CGM_EPILOGUE_GELU, true, CUBLASMP_MATMUL_EPILOGUE_GELU_BIAS},
        {CGM_EPILOGUE_GELU_AUX, false, CUBLASMP_MATMUL_EPILOGUE_GELU_AUX},
        {CGM_EPILOGUE_GELU_AUX, true, CUBLASMP_MATMUL_EPILOGUE_GELU_AUX_BIAS},
        {CGM_EPILOGUE_DGELU, false, CUBLASMP_MATMUL_EPILOGUE_DGELU},
        {CGM_EPILOGUE_DGELU_BGRAD, false, CUBLASMP_MATMUL_EPILOGUE_DGELU_BGRAD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cgm_call c = make_call(CGM_OP_ALL_GATHER_GEMM, CGM_DTYPE_BF16,
                               CGM_DTYPE_BF16);
        if (cases[i].bias) with_bias(&c, CGM_DTYPE_BF16);
        with_epilogue(&c, cases[i].e);
        CHECK_OK(cmp_check_call(&c));
        CHECK_INT_EQ(cmp_map_epilogue(&c), cases[i].expect);
        int n = 0;
        const fake_event *ev = record_attrs(&f, &c, -1, &n);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(EPILOGUE)), cases[i].expect);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(TRANSA)), CMP_CUBLAS_OP_T);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(TRANSB)), CMP_CUBLAS_OP_N);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(ALGO_TYPE)),
                     CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
        /* aux: its pointer, its own ld (elements) and Y's type. */
        CHECK_INT_EQ(attr_value(ev, n, ATTR(EPILOGUE_AUX_POINTER)),
                     c.has_aux ? PTR(c.aux.data) : -1);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(EPILOGUE_AUX_LD)), c.has_aux ? 72 : -1);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(EPILOGUE_AUX_DATA_TYPE)),
                     c.has_aux ? CMP_CUDA_R_16BF : -1);
        /* The bias goes to cuBLASMp only before the GELU; DGELU_BGRAD's
         * bias pointer is bgrad (an output, here fp32). */
        const bool in_epilogue = cases[i].bias && cases[i].e != CGM_EPILOGUE_NONE;
        CHECK_INT_EQ(cmp_bias_in_epilogue(&c), in_epilogue);
        const long long bias_ptr = in_epilogue ? PTR(c.bias.data)
                                 : c.has_bgrad ? PTR(c.bgrad.data) : -1;
        CHECK_INT_EQ(attr_value(ev, n, ATTR(BIAS_POINTER)), bias_ptr);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(BIAS_DATA_TYPE)),
                     in_epilogue ? CMP_CUDA_R_16BF
                     : c.has_bgrad ? CMP_CUDA_R_32F : -1);
        /* No scales without fp8. */
        CHECK_INT_EQ(attr_value(ev, n, ATTR(A_SCALE_POINTER)), -1);
        CHECK_INT_EQ(attr_value(ev, n, ATTR(COMMUNICATION_TYPE)), -1);
        /* commgemm's own bias pass only where cuBLASMp does not add it. */
        cmp_shape s;
        memset(&s, 0, sizeof s);
        s.op = c.op;
        s.layout = c.layout;
        s.nranks = 2;
        s.m = 64;
        s.n_total = 128;
        s.k_total = 64;
        s.ldx = s.ldw = s.ldy = 64;
        s.algo_type = CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P;
        cmp_output o;
        cmp_plan_output(&s, 0, 64, c.out_dtype, c.has_bias && !in_epilogue, &o);
        CHECK_INT_EQ(o.bias_pass, cases[i].bias && !in_epilogue);
    }
    /* cuBLASMp's EPILOGUE_AUX_LD must be a multiple of 8. */
    cgm_call c = make_call(CGM_OP_ALL_GATHER_GEMM, CGM_DTYPE_FP16, CGM_DTYPE_FP16);
    with_epilogue(&c, CGM_EPILOGUE_GELU_AUX);
    c.aux.ld = 68;
    CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "multiple of 8");
    CHECK_CONTAINS(cgm_last_error(), "ld = 68");
    cmp_lib_close(&f.api);
}

static void epilogues_reduce_refused(const void *param) {
    (void)param;
    const cgm_op ops[] = {CGM_OP_GEMM_REDUCE_SCATTER, CGM_OP_GEMM_ALL_REDUCE};
    const cgm_epilogue eps[] = {CGM_EPILOGUE_GELU, CGM_EPILOGUE_GELU_AUX,
                                CGM_EPILOGUE_DGELU, CGM_EPILOGUE_DGELU_BGRAD};
    for (int o = 0; o < 2; o++)
        for (int e = 0; e < 4; e++) {
            cgm_call c = make_call(ops[o], CGM_DTYPE_BF16, CGM_DTYPE_BF16);
            with_epilogue(&c, eps[e]);
            CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
            CHECK_CONTAINS(cgm_last_error(), cgm_epilogue_name(eps[e]));
            CHECK_CONTAINS(cgm_last_error(), cgm_op_name(ops[o]));
            CHECK_CONTAINS(cgm_last_error(), "after the reduction");
            CHECK_CONTAINS(cgm_last_error(), "partial product");
            CHECK_CONTAINS(cgm_last_error(), "the nccl and host backends do");
            CHECK_CONTAINS(cgm_last_error(), "CGM_EPILOGUE_NONE");
        }
    /* Without an epilogue they run. */
    cgm_call c = make_call(CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_BF16, CGM_DTYPE_BF16);
    with_bias(&c, CGM_DTYPE_BF16);
    CHECK_OK(cmp_check_call(&c));
}

static void fp8_tensor_scaling(const void *param) {
    (void)param;
    fake_lib f;
    lib_open(&f);
    const cgm_op ops[] = {CGM_OP_GEMM_REDUCE_SCATTER, CGM_OP_GEMM_ALL_REDUCE};
    const cgm_dtype outs[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP16, CGM_DTYPE_FP32};
    for (int o = 0; o < 2; o++)
        for (int y = 0; y < 3; y++) {
            cgm_call c = make_call(ops[o], CGM_DTYPE_FP8_E4M3, outs[y]);
            c.w_dtype = CGM_DTYPE_FP8_E5M2;
            c.w.dtype = CGM_DTYPE_FP8_E5M2;
            with_bias(&c, outs[y]);
            CHECK_OK(cmp_check_call(&c));
            int n = 0;
            const fake_event *ev = record_attrs(&f, &c, -1, &n);
            /* A is W, B is X: each rank's own scales, per tensor. */
            CHECK_INT_EQ(attr_value(ev, n, ATTR(A_SCALE_MODE)),
                         CUBLASMP_MATMUL_MATRIX_SCALE_SCALAR_FP32);
            CHECK_INT_EQ(attr_value(ev, n, ATTR(B_SCALE_MODE)),
                         CUBLASMP_MATMUL_MATRIX_SCALE_SCALAR_FP32);
            CHECK_INT_EQ(attr_value(ev, n, ATTR(A_SCALE_POINTER)), PTR(c.w.scale));
            CHECK_INT_EQ(attr_value(ev, n, ATTR(B_SCALE_POINTER)), PTR(c.x.scale));
            CHECK_INT_EQ(attr_value(ev, n, ATTR(D_SCALE_POINTER)), -1);
            CHECK_INT_EQ(attr_value(ev, n, ATTR(AMAX_D_POINTER)), -1);
            CHECK_INT_EQ(attr_value(ev, n, ATTR(EPILOGUE)),
                         CUBLASMP_MATMUL_EPILOGUE_DEFAULT);
            CHECK_INT_EQ(attr_value(ev, n, ATTR(BIAS_POINTER)), -1);
        }
    int t = 0;
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_FP8_E5M2, &t));
    CHECK_INT_EQ(t, CMP_CUDA_R_8F_E5M2);
    /* fp8 Y on GEMM+RS: D's scale and amax, partials sent in fp32, and
     * cuBLASMp writes Y itself (no fp32 buffer, no pass). */
    cgm_call c = make_call(CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_FP8_E4M3,
                           CGM_DTYPE_FP8_E4M3);
    float amax;
    c.y_amax = &amax;
    CHECK_OK(cmp_check_call(&c));
    int n = 0;
    const fake_event *ev = record_attrs(&f, &c, -1, &n);
    CHECK_INT_EQ(attr_value(ev, n, ATTR(D_SCALE_MODE)),
                 CUBLASMP_MATMUL_MATRIX_SCALE_SCALAR_FP32);
    CHECK_INT_EQ(attr_value(ev, n, ATTR(D_SCALE_POINTER)), PTR(c.y.scale));
    CHECK_INT_EQ(attr_value(ev, n, ATTR(AMAX_D_POINTER)), PTR(&amax));
    CHECK_INT_EQ(attr_value(ev, n, ATTR(COMMUNICATION_TYPE)), CMP_CUDA_R_32F);
    c.y_amax = NULL;
    ev = record_attrs(&f, &c, -1, &n);
    CHECK_INT_EQ(attr_value(ev, n, ATTR(AMAX_D_POINTER)), -1);
    cmp_shape s;
    memset(&s, 0, sizeof s);
    s.op = CGM_OP_GEMM_REDUCE_SCATTER;
    s.layout = CGM_LAYOUT_TN;
    s.nranks = 2;
    s.m = s.n_total = 64;
    s.k_total = 128;
    s.ldx = s.ldw = 64;
    s.ldy = 80; /* padded: still direct */
    cmp_output o;
    cmp_plan_output(&s, 1, 64, CGM_DTYPE_FP8_E4M3, false, &o);
    CHECK(!o.fp32_d);
    CHECK(!o.bias_pass);
    cmp_lib_close(&f.api);
}

static void fp8_refused(const void *param) {
    (void)param;
    cgm_call c = make_call(CGM_OP_ALL_GATHER_GEMM, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_BF16);
    CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "each shard's own scale");
    CHECK_CONTAINS(cgm_last_error(), "the nccl and host backends do");

    c = make_call(CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_BF16);
    c.scaling = CGM_SCALING_BLOCK_1X128;
    c.x.scaling = CGM_SCALING_BLOCK_1X128;
    c.w.scaling = CGM_SCALING_BLOCK_128X128;
    CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "VEC128_FP32");
    CHECK_CONTAINS(cgm_last_error(), "per-tensor scales");

    c = make_call(CGM_OP_GEMM_ALL_REDUCE, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E4M3);
    CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "GEMM+RS only");

    c = make_call(CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E5M2);
    with_bias(&c, CGM_DTYPE_BF16);
    CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "bias = NULL");

    c = make_call(CGM_OP_GEMM_ALL_REDUCE, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP16);
    with_bias(&c, CGM_DTYPE_BF16);
    CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "bias in Y's dtype");

    c = make_call(CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_BF16, CGM_DTYPE_FP8_E4M3);
    CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "need fp8 inputs");
}

static void algorithms(const void *param) {
    (void)param;
    fake_lib f;
    lib_open(&f);
    const struct {
        cgm_algo algo;
        int expect; /* cublasMpMatmulAlgoType_t, -1: refused */
    } cases[] = {
        {CGM_ALGO_AUTO, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P},
        {CGM_ALGO_SPLIT_PIPELINED, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P},
        {CGM_ALGO_FUSED, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P},
        {CGM_ALGO_NO_OVERLAP, CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP},
        {CGM_ALGO_RING, -1},
        {CGM_ALGO_BULK, -1},
    };
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    for (int o = 0; o < 3; o++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            cgm_call c = make_call(ops[o], CGM_DTYPE_BF16, CGM_DTYPE_BF16);
            c.algo = cases[i].algo;
            if (cases[i].expect < 0) {
                /* Refused by the check hook, before any exchange, naming
                 * the valid ones. */
                CHECK_STATUS(cmp_check_call(&c), CGM_ERROR_NOT_SUPPORTED);
                CHECK_CONTAINS(cgm_last_error(), cgm_algo_name(cases[i].algo));
                CHECK_CONTAINS(cgm_last_error(), "auto, split");
                CHECK_CONTAINS(cgm_last_error(), "no_overlap");
                continue;
            }
            CHECK_OK(cmp_check_call(&c));
            int n = 0;
            const fake_event *ev = record_attrs(&f, &c, -1, &n);
            CHECK_INT_EQ(attr_value(ev, n, ATTR(ALGO_TYPE)), cases[i].expect);
            /* GEMM+AR TN with no_overlap is cuBLASMp's Matmul+AllReduce. */
            const bool native = ops[o] == CGM_OP_GEMM_ALL_REDUCE &&
                                cases[i].algo == CGM_ALGO_NO_OVERLAP;
            CHECK_INT_EQ(attr_value(ev, n, ATTR(EPILOGUE)),
                         native ? CUBLASMP_MATMUL_EPILOGUE_ALLREDUCE
                                : CUBLASMP_MATMUL_EPILOGUE_DEFAULT);
        }
    cmp_lib_close(&f.api);
}

static void attribute_failure(const void *param) {
    (void)param;
    fake_lib f;
    lib_open(&f);
    cgm_call c = make_call(CGM_OP_ALL_GATHER_GEMM, CGM_DTYPE_BF16, CGM_DTYPE_BF16);
    with_epilogue(&c, CGM_EPILOGUE_DGELU);
    cmp_attrs l;
    cmp_call_attrs(&c, &l);
    CHECK_INT_EQ(l.n, 1);
    f.fail(SET_ATTRIBUTE, CUBLASMP_STATUS_NOT_SUPPORTED);
    CHECK_STATUS(cmp_apply_attrs(&f.api, TOKEN(99), &l, "AG+GEMM test"),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "EPILOGUE_AUX_POINTER");
    CHECK_CONTAINS(cgm_last_error(), "AG+GEMM test");
    CHECK_CONTAINS(cgm_last_error(), "fake: the failure a test asked for");
    cmp_lib_close(&f.api);
}

static void register_cases(void) {
    test_add("epilogues_all_gather", epilogues_all_gather, NULL);
    test_add("epilogues_reduce_refused", epilogues_reduce_refused, NULL);
    test_add("fp8_tensor_scaling", fp8_tensor_scaling, NULL);
    test_add("fp8_refused", fp8_refused, NULL);
    test_add("algorithms", algorithms, NULL);
    test_add("attribute_failure", attribute_failure, NULL);
}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_cases);
}
