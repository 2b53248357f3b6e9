/* The XLA FFI handlers (cgm_xla_ffi_*) on call frames built here with the
 * layout of XLA's FFI C API, with a one-rank host comm: results, the
 * metadata query, the stages that do nothing, and every refusal with its
 * XLA error code and message (the comm stays usable after each). No JAX
 * needed; tests/python/test_jax_host.py runs them under JAX. */
#include <math.h>
#include <string.h>

#include "bindings/xla_ffi.h"
#include "harness.h"

/* A stand-in for XLA's error_create: keeps the last error. */
static char last_message[2048];
static int last_code, errors_made;
static int error_token;

static xffi_error *fake_error_create(xffi_error_args *a) {
    snprintf(last_message, sizeof last_message, "%s", a->message);
    last_code = a->errc;
    errors_made++;
    return (xffi_error *)&error_token;
}

/* A stand-in for XLA's stream query: on its CPU platform (fake_on_gpu 0)
 * an error, which the handler must read and destroy; on its GPU platform
 * a stream. */
static int streams_asked, fake_on_gpu, stream_errors_made, stream_errors_destroyed;
static int stream_error_token, fake_stream;
static xffi_error *fake_stream_get(xffi_stream_args *a) {
    streams_asked++;
    if (fake_on_gpu) {
        a->stream = &fake_stream;
        return NULL;
    }
    stream_errors_made++;
    return (xffi_error *)&stream_error_token;
}
static void fake_error_get_message(xffi_error_message_args *a) {
    CHECK(a->error == (xffi_error *)&stream_error_token);
    a->message = "XLA FFI GPU context is not available";
}
static void fake_error_destroy(xffi_error_destroy_args *a) {
    CHECK(a->error == (xffi_error *)&stream_error_token);
    stream_errors_destroyed++;
}

typedef struct frame_builder {
    xffi_api api;
    xffi_frame f;
    xffi_buffer in[6], out[4];
    int64_t in_dims[6][2], out_dims[4][2];
    void *in_ptrs[6], *out_ptrs[4];
    int in_types[6], out_types[4];
    xffi_span names[8], *name_ptrs[8];
    int attr_types[8];
    xffi_scalar scalars[8];
    void *attr_ptrs[8];
    uint64_t comm_value;
    int32_t ints[8];
} frame_builder;

static void set_buffer(xffi_buffer *b, int64_t *dims, int dtype, void *data, int64_t rows, int64_t cols) {
    memset(b, 0, sizeof *b);
    b->struct_size = sizeof *b;
    b->dtype = dtype;
    b->data = data;
    dims[0] = rows;
    dims[1] = cols;
    b->rank = cols < 0 ? 1 : 2;
    if (cols < 0) dims[0] = rows;
    b->dims = dims;
}

/* A frame of nin operands and nout results (set with in()/out()), the comm
 * attribute and `nattr` more s32 attributes. */
static void frame_init(frame_builder *fb, int nin, int nout) {
    memset(fb, 0, sizeof *fb);
    fb->api.struct_size = sizeof fb->api;
    fb->api.version.major = 0;
    fb->api.version.minor = 1;
    fb->api.error_create = fake_error_create;
    fb->api.stream_get = fake_stream_get;
    fb->api.error_get_message = fake_error_get_message;
    fb->api.error_destroy = fake_error_destroy;
    xffi_frame *f = &fb->f;
    f->struct_size = sizeof *f;
    f->api = &fb->api;
    f->stage = XFFI_STAGE_EXECUTE;
    f->args.struct_size = f->rets.struct_size = sizeof f->args;
    f->args.size = nin;
    f->rets.size = nout;
    for (int i = 0; i < 6; i++) {
        fb->in_types[i] = XFFI_BUFFER;
        fb->in_ptrs[i] = &fb->in[i];
    }
    for (int i = 0; i < 4; i++) {
        fb->out_types[i] = XFFI_BUFFER;
        fb->out_ptrs[i] = &fb->out[i];
    }
    f->args.types = fb->in_types;
    f->args.items = fb->in_ptrs;
    f->rets.types = fb->out_types;
    f->rets.items = fb->out_ptrs;
    f->attrs.struct_size = sizeof f->attrs;
    f->attrs.types = fb->attr_types;
    f->attrs.names = fb->name_ptrs;
    f->attrs.attrs = fb->attr_ptrs;
}

static void add_attr(frame_builder *fb, const char *name, int dtype, void *value) {
    int i = (int)fb->f.attrs.size++;
    fb->names[i].ptr = name;
    fb->names[i].len = strlen(name);
    fb->name_ptrs[i] = &fb->names[i];
    fb->attr_types[i] = XFFI_ATTR_SCALAR;
    fb->scalars[i].dtype = dtype;
    fb->scalars[i].value = value;
    fb->attr_ptrs[i] = &fb->scalars[i];
}

static void add_comm(frame_builder *fb, cgm_comm *comm) {
    fb->comm_value = (uint64_t)(uintptr_t)comm;
    add_attr(fb, "comm", XFFI_U64, &fb->comm_value);
}

static void add_int(frame_builder *fb, const char *name, int32_t v) {
    int i = (int)fb->f.attrs.size;
    fb->ints[i] = v;
    add_attr(fb, name, XFFI_S32, &fb->ints[i]);
}

/* Expects the handler to fail with `code` and a message holding `needle`. */
static void expect_error(void *(*h)(void *), frame_builder *fb, int code, const char *needle) {
    int before = errors_made;
    void *e = h(&fb->f);
    if (e != (void *)&error_token) TEST_FAIL("expected an XLA error containing \"%s\", got success", needle);
    CHECK_INT_EQ(errors_made, before + 1);
    CHECK_INT_EQ(last_code, code);
    CHECK_CONTAINS(last_message, needle);
    CHECK_CONTAINS(last_message, "commgemm ");
}

static cgm_comm *one_rank_comm(char *name, size_t len) {
    cgm_bootstrap b = test_local_bootstrap("xla-ffi", name, len);
    cgm_comm *comm = NULL;
    CHECK_OK(cgm_comm_create(&b, NULL, &comm));
    return comm;
}

/* The three ops on one rank, fp32, with and without bias, TN and NN, the
 * gathered X; compared with a host reference. */
static void test_ops(const void *param) {
    (void)param;
    char name[64];
    cgm_comm *comm = one_rank_comm(name, sizeof name);
    enum { M = 5, K = 6, N = 7 };
    float x[M * K], w[N * K], bias[N], y[M * N], xg[M * K];
    for (int i = 0; i < M * K; i++) x[i] = test_value(1, i);
    for (int i = 0; i < N * K; i++) w[i] = test_value(2, i);
    for (int i = 0; i < N; i++) bias[i] = test_value(3, i);
    void *(*handlers[3])(void *) = {cgm_xla_ffi_all_gather_gemm, cgm_xla_ffi_gemm_reduce_scatter,
                                    cgm_xla_ffi_gemm_all_reduce};
    for (int h = 0; h < 3; h++)
        for (int with_bias = 0; with_bias < 2; with_bias++)
            for (int nn = 0; nn < 2; nn++) {
                frame_builder fb;
                bool gathered = h == 0 && with_bias;
                frame_init(&fb, 2 + with_bias, gathered ? 2 : 1);
                set_buffer(&fb.in[0], fb.in_dims[0], XFFI_F32, x, M, K);
                /* NN: W is [k, n]; the same numbers read as [K, N] */
                set_buffer(&fb.in[1], fb.in_dims[1], XFFI_F32, w, nn ? K : N, nn ? N : K);
                set_buffer(&fb.in[2], fb.in_dims[2], XFFI_F32, bias, N, -1);
                memset(y, 0xff, sizeof y);
                memset(xg, 0xff, sizeof xg);
                set_buffer(&fb.out[0], fb.out_dims[0], XFFI_F32, y, M, N);
                set_buffer(&fb.out[1], fb.out_dims[1], XFFI_F32, xg, M, K);
                add_comm(&fb, comm);
                if (nn) add_int(&fb, "layout", CGM_LAYOUT_NN);
                add_int(&fb, "splits", 2);
                /* taken (the host backend sums exact fp32 partials whatever they are) */
                add_int(&fb, "partial_dtype", with_bias ? CGM_PARTIAL_DTYPE_OUTPUT : CGM_PARTIAL_DTYPE_FP32);
                add_int(&fb, "gemm_reduction", nn ? CGM_GEMM_REDUCTION_FP32 : CGM_GEMM_REDUCTION_ANY);
                if (handlers[h](&fb.f) != NULL) TEST_FAIL("handler %d failed: %s", h, last_message);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double ref = with_bias ? bias[j] : 0;
                        for (int l = 0; l < K; l++) ref += (double)x[i * K + l] * (nn ? w[l * N + j] : w[j * K + l]);
                        CHECK_NEAR(y[i * N + j], ref, 1e-5);
                    }
                if (gathered) CHECK(memcmp(xg, x, sizeof x) == 0);
            }
    /* the host backend ran on XLA's CPU platform: the stream query's error
     * said so, and each was destroyed */
    CHECK(streams_asked > 0);
    CHECK_INT_EQ(stream_errors_destroyed, stream_errors_made);
    CHECK_OK(cgm_comm_destroy(comm));
}

static double gelu_ref(double t) {
    return 0.5 * t * (1 + tanh(0.7978845608028654 * (t + 0.044715 * t * t * t)));
}

static double dgelu_ref(double t) {
    double c = 0.7978845608028654, th = tanh(c * (t + 0.044715 * t * t * t));
    return 0.5 * (1 + th) + 0.5 * t * (1 - th * th) * c * (1 + 3 * 0.044715 * t * t);
}

/* The epilogue's operands and results (aux after the bias, aux and bgrad
 * after the op's results) and the order markers of attribute ordered (the
 * last operand and result, never touched): AG+GEMM with GELU_AUX, GEMM+AR
 * with DGELU_BGRAD, against a double reference; the counts an epilogue
 * needs are said when they are wrong. */
static void test_epilogue_and_markers(const void *param) {
    (void)param;
    char name[64];
    cgm_comm *comm = one_rank_comm(name, sizeof name);
    enum { M = 4, K = 5, N = 3 };
    float x[M * K], w[N * K], bias[N], y[M * N], aux[M * N], bgrad[N];
    unsigned char marker_in[4], marker_out[4];
    for (int i = 0; i < M * K; i++) x[i] = test_value(1, i);
    for (int i = 0; i < N * K; i++) w[i] = test_value(2, i);
    for (int i = 0; i < N; i++) bias[i] = test_value(3, i);
    double pre[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            pre[i * N + j] = bias[j];
            for (int l = 0; l < K; l++) pre[i * N + j] += (double)x[i * K + l] * w[j * K + l];
        }
    memset(marker_in, 0xab, sizeof marker_in);
    memset(marker_out, 0xcd, sizeof marker_out);
    frame_builder fb;
    frame_init(&fb, 4, 3); /* x, w, bias, marker -> y, aux, marker */
    set_buffer(&fb.in[0], fb.in_dims[0], XFFI_F32, x, M, K);
    set_buffer(&fb.in[1], fb.in_dims[1], XFFI_F32, w, N, K);
    set_buffer(&fb.in[2], fb.in_dims[2], XFFI_F32, bias, N, -1);
    set_buffer(&fb.in[3], fb.in_dims[3], XFFI_PRED, marker_in, 1, -1);
    set_buffer(&fb.out[0], fb.out_dims[0], XFFI_F32, y, M, N);
    set_buffer(&fb.out[1], fb.out_dims[1], XFFI_F32, aux, M, N);
    set_buffer(&fb.out[2], fb.out_dims[2], XFFI_PRED, marker_out, 1, -1);
    add_comm(&fb, comm);
    add_int(&fb, "epilogue", CGM_EPILOGUE_GELU_AUX);
    add_int(&fb, "ordered", 1);
    if (cgm_xla_ffi_all_gather_gemm(&fb.f) != NULL) TEST_FAIL("AG+GEMM with GELU_AUX failed: %s", last_message);
    for (int i = 0; i < M * N; i++) {
        CHECK_NEAR(y[i], gelu_ref(pre[i]), 1e-5);
        CHECK_NEAR(aux[i], pre[i], 1e-5);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_INT_EQ(marker_in[i], 0xab);
        CHECK_INT_EQ(marker_out[i], 0xcd);
    }
    /* GEMM+AR with DGELU_BGRAD reading that aux: x, w, aux -> y, bgrad */
    frame_init(&fb, 3, 2);
    set_buffer(&fb.in[0], fb.in_dims[0], XFFI_F32, x, M, K);
    set_buffer(&fb.in[1], fb.in_dims[1], XFFI_F32, w, N, K);
    set_buffer(&fb.in[2], fb.in_dims[2], XFFI_F32, aux, M, N);
    set_buffer(&fb.out[0], fb.out_dims[0], XFFI_F32, y, M, N);
    set_buffer(&fb.out[1], fb.out_dims[1], XFFI_F32, bgrad, N, -1);
    add_comm(&fb, comm);
    add_int(&fb, "epilogue", CGM_EPILOGUE_DGELU_BGRAD);
    if (cgm_xla_ffi_gemm_all_reduce(&fb.f) != NULL) TEST_FAIL("GEMM+AR with DGELU_BGRAD failed: %s", last_message);
    for (int j = 0; j < N; j++) {
        double sum = 0;
        for (int i = 0; i < M; i++) {
            double r = pre[i * N + j] - bias[j], want = r * dgelu_ref(aux[i * N + j]);
            CHECK_NEAR(y[i * N + j], want, 1e-5);
            sum += want;
        }
        CHECK_NEAR(bgrad[j], sum, 1e-4);
    }
    /* what a wrong count says: DGELU without its aux; GELU_AUX without the
     * aux result; ordered without room for the markers */
    frame_init(&fb, 2, 1);
    set_buffer(&fb.in[0], fb.in_dims[0], XFFI_F32, x, M, K);
    set_buffer(&fb.in[1], fb.in_dims[1], XFFI_F32, w, N, K);
    set_buffer(&fb.out[0], fb.out_dims[0], XFFI_F32, y, M, N);
    add_comm(&fb, comm);
    add_int(&fb, "epilogue", CGM_EPILOGUE_DGELU);
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "expected 3 or 4 operands (x, w[, bias], aux)");
    fb.ints[1] = CGM_EPILOGUE_GELU_AUX;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "expected 2 results (y, aux), found 1");
    fb.ints[1] = CGM_EPILOGUE_NONE;
    add_int(&fb, "ordered", 1);
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "expected 2 or 3 operands (x, w[, bias])");
    fb.f.args.size = 0;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT,
                 "attribute ordered = 1: expected an order marker as the last operand and as the last result");
    CHECK_OK(cgm_comm_destroy(comm));
}

/* The metadata query, and stages other than execute: nothing done. */
static void test_metadata(const void *param) {
    (void)param;
    frame_builder fb;
    frame_init(&fb, 0, 0); /* no operands: a real call would be refused */
    xffi_metadata md;
    memset(&md, 0, sizeof md);
    md.struct_size = sizeof md;
    md.traits = 77;
    xffi_metadata_ext ext;
    memset(&ext, 0, sizeof ext);
    ext.base.struct_size = sizeof ext;
    ext.base.type = XFFI_EXT_METADATA;
    ext.metadata = &md;
    fb.f.ext = &ext.base;
    int before = errors_made;
    CHECK(cgm_xla_ffi_gemm_all_reduce(&fb.f) == NULL);
    CHECK_INT_EQ(md.version.major, 0);
    CHECK_INT_EQ(md.version.minor, 1); /* the framework's (the fake API's 0.1), older than the layout's */
    fb.api.version.minor = 9;
    CHECK(cgm_xla_ffi_gemm_all_reduce(&fb.f) == NULL);
    CHECK_INT_EQ(md.version.minor, XFFI_API_MINOR); /* a newer framework: the layout's version */
    CHECK_INT_EQ(md.traits, 0);
    fb.f.ext = NULL;
    for (int stage = 0; stage < 3; stage++) {
        fb.f.stage = stage;
        CHECK(cgm_xla_ffi_all_gather_gemm(&fb.f) == NULL);
    }
    CHECK_INT_EQ(errors_made, before);
}

/* Every refusal: the XLA error code and the message; the comm still works. */
static void test_refusals(const void *param) {
    (void)param;
    char name[64];
    cgm_comm *comm = one_rank_comm(name, sizeof name);
    float x[12], w[12], y[16];
    for (int i = 0; i < 12; i++) x[i] = w[i] = test_value(4, i);
    frame_builder fb;
#define GOOD()                                                                    \
    do {                                                                          \
        frame_init(&fb, 2, 1);                                                    \
        set_buffer(&fb.in[0], fb.in_dims[0], XFFI_F32, x, 4, 3);                  \
        set_buffer(&fb.in[1], fb.in_dims[1], XFFI_F32, w, 4, 3);                  \
        set_buffer(&fb.out[0], fb.out_dims[0], XFFI_F32, y, 4, 4);                \
        add_comm(&fb, comm);                                                      \
    } while (0)
    GOOD();
    CHECK(cgm_xla_ffi_gemm_all_reduce(&fb.f) == NULL);

    GOOD();
    fb.in[0].dtype = XFFI_S32;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "x: expected float32, bfloat16, float16 or (x and w, with their scales) float8_e4m3fn");
    GOOD();
    fb.in[1].rank = 3;
    expect_error(cgm_xla_ffi_gemm_reduce_scatter, &fb, XFFI_INVALID_ARGUMENT, "w: expected a matrix (2 dims), found 3");
    GOOD();
    fb.in_types[1] = 7;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "operand 1 is not a buffer");
    GOOD();
    fb.out_types[0] = 7;
    expect_error(cgm_xla_ffi_all_gather_gemm, &fb, XFFI_INVALID_ARGUMENT, "result 0 is not a buffer");
    GOOD();
    fb.f.args.size = 1;
    expect_error(cgm_xla_ffi_all_gather_gemm, &fb, XFFI_INVALID_ARGUMENT, "expected 2 or 3 operands");
    GOOD();
    fb.f.rets.size = 2;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "expected 1 result (y), found 2");
    GOOD();
    fb.f.attrs.size = 0;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "attribute comm: expected the cgm_comm");
    GOOD();
    add_int(&fb, "layuot", 0);
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "unknown attribute layuot");
    GOOD();
    fb.scalars[0].dtype = XFFI_F32;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "attribute comm: expected an integer scalar");
    GOOD();
    fb.f.struct_size = 16;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INTERNAL, "call frame of 16 bytes");
    /* The library's own checks come back with the status: y of the wrong
     * shape, and a layout out of range. */
    GOOD();
    fb.out_dims[0][0] = 3;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "y is 3 x 4, expected 4 x 4");
    GOOD();
    add_int(&fb, "layout", 9);
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "layout");
    GOOD();
    add_int(&fb, "partial_dtype", 5);
    expect_error(cgm_xla_ffi_gemm_reduce_scatter, &fb, XFFI_INVALID_ARGUMENT, "options.partial_dtype = 5");
    GOOD();
    add_int(&fb, "gemm_reduction", 3);
    expect_error(cgm_xla_ffi_all_gather_gemm, &fb, XFFI_INVALID_ARGUMENT, "options.gemm_reduction = 3");
    /* backend host asked for by name, and auto (the comm's: host): fine on
     * XLA's CPU platform */
    GOOD();
    add_int(&fb, "backend", CGM_BACKEND_HOST);
    CHECK(cgm_xla_ffi_gemm_all_reduce(&fb.f) == NULL);
    GOOD();
    add_int(&fb, "backend", CGM_BACKEND_AUTO);
    CHECK(cgm_xla_ffi_gemm_all_reduce(&fb.f) == NULL);
    /* an XLA without the stream query: the host backend needs none */
    GOOD();
    fb.api.stream_get = NULL;
    CHECK(cgm_xla_ffi_gemm_all_reduce(&fb.f) == NULL);
    /* an out-of-range backend: the library's refusal, no stream asked */
    GOOD();
    add_int(&fb, "backend", 99);
    int asked = streams_asked;
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "options.backend = 99");
    CHECK_INT_EQ(streams_asked, asked);
    /* a host comm on XLA's GPU platform (GPU arrays): refused, whichever
     * op, before it reaches the library */
    fake_on_gpu = 1;
    GOOD();
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_FAILED_PRECONDITION, "XLA runs this call on a GPU");
    GOOD();
    add_int(&fb, "backend", CGM_BACKEND_AUTO);
    expect_error(cgm_xla_ffi_all_gather_gemm, &fb, XFFI_FAILED_PRECONDITION, "backend=\"p2p\" or \"nccl\"");
    fake_on_gpu = 0;
    /* a GPU backend asked for on XLA's CPU platform: refused with XLA's
     * reason, its error destroyed */
    GOOD();
    add_int(&fb, "backend", CGM_BACKEND_P2P);
    int destroyed = stream_errors_destroyed;
    expect_error(cgm_xla_ffi_gemm_reduce_scatter, &fb, XFFI_FAILED_PRECONDITION,
                 "backend for this op is p2p, which works on GPU memory");
    CHECK_CONTAINS(last_message, "GPU context is not available");
    CHECK_INT_EQ(stream_errors_destroyed, destroyed + 1);
    CHECK_INT_EQ(stream_errors_destroyed, stream_errors_made);
    GOOD();
    fb.api.stream_get = NULL;
    add_int(&fb, "backend", CGM_BACKEND_NCCL);
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INTERNAL, "has no stream query");
    /* still usable */
    GOOD();
    CHECK(cgm_xla_ffi_gemm_all_reduce(&fb.f) == NULL);
#undef GOOD
    CHECK_OK(cgm_comm_destroy(comm));
}

/* Bulk: GEMM only, collective only, both; and its refusals. */
static void test_bulk(const void *param) {
    (void)param;
    char name[64];
    cgm_comm *comm = one_rank_comm(name, sizeof name);
    enum { M = 4, K = 3, N = 5, R = 6, C = 7 };
    float a[M * K], b[N * K], bias[N], c[M * N], send[R * C], recv[R * C];
    for (int i = 0; i < M * K; i++) a[i] = test_value(5, i);
    for (int i = 0; i < N * K; i++) b[i] = test_value(6, i);
    for (int i = 0; i < N; i++) bias[i] = test_value(7, i);
    for (int i = 0; i < R * C; i++) send[i] = test_value(8, i);
    for (int parts = 1; parts <= 3; parts++)
        for (int coll = 0; coll < 2; coll++) {
            bool gemm = parts & 1, with_coll = parts & 2;
            if (!with_coll && coll) continue;
            frame_builder fb;
            frame_init(&fb, (gemm ? 3 : 0) + with_coll, gemm + with_coll);
            int in = 0, out = 0;
            if (gemm) {
                set_buffer(&fb.in[in], fb.in_dims[in], XFFI_F32, a, M, K), in++;
                set_buffer(&fb.in[in], fb.in_dims[in], XFFI_F32, b, N, K), in++;
                set_buffer(&fb.in[in], fb.in_dims[in], XFFI_F32, bias, N, -1), in++;
                set_buffer(&fb.out[out], fb.out_dims[out], XFFI_F32, c, M, N), out++;
            }
            if (with_coll) {
                set_buffer(&fb.in[in], fb.in_dims[in], XFFI_F32, send, R, C);
                set_buffer(&fb.out[out], fb.out_dims[out], XFFI_F32, recv, R, C);
            }
            add_comm(&fb, comm);
            add_int(&fb, "gemm", gemm);
            add_int(&fb, "bias", gemm);
            add_int(&fb, "collective", with_coll ? coll : -1);
            memset(c, 0xff, sizeof c);
            memset(recv, 0xff, sizeof recv);
            if (cgm_xla_ffi_bulk_overlap(&fb.f) != NULL) TEST_FAIL("bulk parts %d: %s", parts, last_message);
            if (gemm)
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double ref = bias[j];
                        for (int l = 0; l < K; l++) ref += (double)a[i * K + l] * b[j * K + l];
                        CHECK_NEAR(c[i * N + j], ref, 1e-5);
                    }
            if (with_coll) CHECK(memcmp(recv, send, sizeof send) == 0); /* one rank: the collective copies */
        }
    frame_builder fb;
    frame_init(&fb, 0, 0);
    add_comm(&fb, comm);
    expect_error(cgm_xla_ffi_bulk_overlap, &fb, XFFI_INVALID_ARGUMENT, "neither a GEMM");
    frame_init(&fb, 1, 1);
    add_comm(&fb, comm);
    add_int(&fb, "gemm", 1);
    expect_error(cgm_xla_ffi_bulk_overlap, &fb, XFFI_INVALID_ARGUMENT, "expected 2 operands (a, b) and 1 results (c)");
    frame_init(&fb, 1, 1);
    add_comm(&fb, comm);
    add_int(&fb, "collective", 2);
    expect_error(cgm_xla_ffi_bulk_overlap, &fb, XFFI_INVALID_ARGUMENT, "attribute collective: expected -1");
    /* a frame smaller than the layout: refused before its attributes are read */
    frame_init(&fb, 0, 1);
    add_comm(&fb, comm);
    add_int(&fb, "collective", 0);
    fb.f.struct_size = 16;
    expect_error(cgm_xla_ffi_bulk_overlap, &fb, XFFI_INTERNAL, "call frame of 16 bytes");
    /* the GEMM ops take no bulk attribute */
    frame_init(&fb, 2, 1);
    set_buffer(&fb.in[0], fb.in_dims[0], XFFI_F32, a, M, K);
    set_buffer(&fb.in[1], fb.in_dims[1], XFFI_F32, b, N, K);
    set_buffer(&fb.out[0], fb.out_dims[0], XFFI_F32, c, M, N);
    add_comm(&fb, comm);
    add_int(&fb, "gemm", 1);
    expect_error(cgm_xla_ffi_gemm_all_reduce, &fb, XFFI_INVALID_ARGUMENT, "unknown attribute gemm");
    CHECK_OK(cgm_comm_destroy(comm));
}

/* An fp8 Y from the three ops and bulk's C (attributes y_scale and y_amax):
 * e4m3 X and W with per-tensor scales, Y = sat(rne(r * y_scale)) in e4m3 and
 * y_amax = max |r|; AG+GEMM with its gathered X and scales before y_amax,
 * GEMM+RS, GEMM+AR and bulk with a bf16 bias after y_scale. */
static void test_fp8_output(const void *param) {
    (void)param;
    char name[64];
    cgm_comm *comm = one_rank_comm(name, sizeof name);
    enum { M = 4, K = 6, N = 5 };
    uint8_t x[M * K], w[N * K], y[M * N], xg[M * K];
    float xs = 0.5f, ws = 2.0f, ys = 0, amax, xgs;
    double r[M * N], rmax = 0;
    uint16_t bias[N]; /* bf16: the top half of small integers' fp32 bits */
    for (int j = 0; j < N; j++) {
        float v = (float)(j - 2);
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        bias[j] = (uint16_t)(bits >> 16);
    }
    for (int i = 0; i < M * K; i++) x[i] = (uint8_t)(((i * 37 + 11) % 0x60) | (i % 3 == 0 ? 0x80 : 0));
    for (int i = 0; i < N * K; i++) w[i] = (uint8_t)(((i * 23 + 5) % 0x60) | (i % 4 == 1 ? 0x80 : 0));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int l = 0; l < K; l++)
                acc += test_fp8_value(x[i * K + l], CGM_DTYPE_FP8_E4M3) * xs *
                       test_fp8_value(w[j * K + l], CGM_DTYPE_FP8_E4M3) * ws;
            r[i * N + j] = acc;
            rmax = fmax(rmax, fabs(acc));
        }
    CHECK(rmax > 0);
    ys = (float)(300.0 / (rmax + N)); /* |r + bias| * ys < 448: no saturation */
    void *(*handlers[4])(void *) = {cgm_xla_ffi_all_gather_gemm, cgm_xla_ffi_gemm_reduce_scatter,
                                    cgm_xla_ffi_gemm_all_reduce, cgm_xla_ffi_bulk_overlap};
    for (int h = 0; h < 4; h++) {
        frame_builder fb;
        bool gathered = h == 0;
        frame_init(&fb, gathered ? 5 : 6, gathered ? 4 : 2);
        set_buffer(&fb.in[0], fb.in_dims[0], XFFI_F8E4M3FN, x, M, K);
        set_buffer(&fb.in[1], fb.in_dims[1], XFFI_F8E4M3FN, w, N, K);
        set_buffer(&fb.in[2], fb.in_dims[2], XFFI_F32, &xs, 1, -1);
        set_buffer(&fb.in[3], fb.in_dims[3], XFFI_F32, &ws, 1, -1);
        set_buffer(&fb.in[4], fb.in_dims[4], XFFI_F32, &ys, 1, -1);
        set_buffer(&fb.in[5], fb.in_dims[5], XFFI_BF16, bias, N, -1);
        memset(y, 0xff, sizeof y);
        amax = -1;
        set_buffer(&fb.out[0], fb.out_dims[0], XFFI_F8E4M3FN, y, M, N);
        int a = 1;
        if (gathered) {
            set_buffer(&fb.out[1], fb.out_dims[1], XFFI_F8E4M3FN, xg, M, K);
            set_buffer(&fb.out[2], fb.out_dims[2], XFFI_F32, &xgs, 1, -1);
            a = 3;
        }
        set_buffer(&fb.out[a], fb.out_dims[a], XFFI_F32, &amax, 1, -1);
        add_comm(&fb, comm);
        add_int(&fb, "scaling", CGM_SCALING_TENSOR);
        add_int(&fb, "y_scale", 1);
        add_int(&fb, "y_amax", 1);
        if (h == 3) {
            add_int(&fb, "gemm", 1);
            add_int(&fb, "bias", 1);
        }
        if (handlers[h](&fb.f) != NULL) TEST_FAIL("handler %d failed: %s", h, last_message);
        double amax_want = 0;
        for (int i = 0; i < M * N; i++) amax_want = fmax(amax_want, fabs(r[i] + (gathered ? 0 : i % N - 2)));
        CHECK_NEAR(amax, amax_want, 1e-6 * amax_want);
        for (int i = 0; i < M * N; i++) {
            double want = (r[i] + (gathered ? 0 : i % N - 2)) * ys, got = test_fp8_value(y[i], CGM_DTYPE_FP8_E4M3);
            /* half an e4m3 ulp: 2^-4 relative, 2^-10 absolute below the normals */
            if (fabs(got - want) > fabs(want) / 16 + 1.0 / 1024)
                TEST_FAIL("handler %d: y[%d] = %g, expected %g (r %g * y_scale %g)", h, i, got, want, r[i], ys);
        }
        if (gathered) CHECK(memcmp(xg, x, sizeof x) == 0 && xgs == xs);

        /* y_amax of two elements; y_scale without its operand */
        fb.out_dims[a][0] = 2;
        expect_error(handlers[h], &fb, XFFI_INVALID_ARGUMENT, "y_amax: expected one float32 (shape (1,))");
        fb.out_dims[a][0] = 1;
        fb.f.args.size = 4;
        expect_error(handlers[h], &fb, XFFI_INVALID_ARGUMENT,
                     h == 3 ? "a_scale, b_scale, y_scale, bias" : "x_scale, w_scale, y_scale[, bias]");
    }
    /* bulk: y_scale without its GEMM */
    frame_builder fb;
    frame_init(&fb, 1, 1);
    add_comm(&fb, comm);
    add_int(&fb, "collective", 0);
    add_int(&fb, "y_scale", 1);
    expect_error(cgm_xla_ffi_bulk_overlap, &fb, XFFI_INVALID_ARGUMENT, "y_scale or y_amax without a GEMM");
    CHECK_OK(cgm_comm_destroy(comm));
}

static void register_cases(void) {
    test_add("bulk", test_bulk, NULL);
    test_add("ops", test_ops, NULL);
    test_add("fp8_output", test_fp8_output, NULL);
    test_add("metadata", test_metadata, NULL);
    test_add("refusals", test_refusals, NULL);
    test_add("epilogue_and_markers", test_epilogue_and_markers, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
