/* XLA FFI handlers of the ops, for JAX (python/commgemm/jax.py
 * registers them with jax.ffi.register_ffi_target, on "cpu" and "CUDA").
 *
 * XLA calls a handler with a call frame: the operands and results as
 * buffers (dtype, data, dims), the attributes by name, an execution
 * context (the stream comes from it) and the API's function table. That is
 * XLA's FFI C API, a stable binary interface versioned by struct sizes and
 * an API version (0.x): the structs below are declared here with that
 * layout (xla/ffi/api/c_api.h is its definition), so the library needs no
 * XLA or JAX headers to build, and the handlers are tested in C without
 * JAX (tests/unit/test_xla_ffi.c builds call frames).
 *
 * Operands (row-major, dense): the op's X, W and, when present, a third,
 * the bias [n] or [1, n]. Results: Y and, for AG+GEMM when present, the
 * gathered X. Attributes: comm (u64, the cgm_comm pointer), layout, algo,
 * splits, backend, allow_tf32, partial_dtype, gemm_reduction,
 * fp8_fast_accum (s32 each; optional, defaults as CGM_OP_OPTIONS_INIT);
 * bulk's parts (gemm, bias, collective) at its handler. FP8: attribute
 * scaling (s32, X's cgm_scaling: TENSOR, or BLOCK_1X128 with W's
 * BLOCK_128X128) says that X and W are fp8 (f8e4m3fn, f8e5m2) and that
 * their f32 scales follow W as two more operands (x, w, x_scale, w_scale
 * [, bias]; bulk: a, b, a_scale, b_scale [, bias][, send]); AG+GEMM's
 * gathered X then comes with a third result, its scales. An fp8 Y (bulk:
 * C): attribute y_scale = 1 says that its f32 quantization scale [1] is an
 * operand after X's and W's scales (x, w[, x_scale, w_scale], y_scale[,
 * bias]); y_amax = 1 asks for max |r| as an f32 [1] result after Y's (and
 * the gathered X's; bulk: after C). The stream is XLA's on a GPU
 * backend, NULL on the host backend. Errors come back as XLA errors carrying cgm_last_error(). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "bindings/xla_ffi.h"
#include "core/core.h"

/* ------------------------------------------------------------ helpers */

static xffi_error *fail(const xffi_frame *f, int errc, const char *op, const char *fmt, ...)
    CGM_PRINTF(4, 5);
static xffi_error *fail(const xffi_frame *f, int errc, const char *op, const char *fmt, ...) {
    char msg[1536];
    int n = snprintf(msg, sizeof msg, "commgemm %s (XLA FFI): ", op);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof msg) vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    xffi_error_args a = {sizeof a, NULL, msg, errc};
    return f->api->error_create(&a);
}

static int status_code(cgm_status st) {
    switch (st) {
    case CGM_ERROR_INVALID_ARGUMENT: case CGM_ERROR_MISMATCH: return XFFI_INVALID_ARGUMENT;
    case CGM_ERROR_INVALID_USAGE: return XFFI_FAILED_PRECONDITION;
    case CGM_ERROR_NOT_SUPPORTED: return XFFI_UNIMPLEMENTED;
    case CGM_ERROR_UNAVAILABLE: return XFFI_UNAVAILABLE;
    case CGM_ERROR_TIMEOUT: return XFFI_DEADLINE_EXCEEDED;
    case CGM_ERROR_PEER_FAILED: return XFFI_ABORTED;
    default: return XFFI_INTERNAL;
    }
}

/* A buffer as a dense row-major cgm_matrix: rank 2, or rank 1 as one row
 * (a bias) when `vector_ok`. */
static xffi_error *matrix_of(const xffi_frame *f, const char *op, const char *what, const xffi_buffer *b,
                             bool vector_ok, cgm_matrix *out) {
    cgm_dtype dt;
    switch (b->dtype) {
    case XFFI_F32: dt = CGM_DTYPE_FP32; break;
    case XFFI_BF16: dt = CGM_DTYPE_BF16; break;
    case XFFI_F16: dt = CGM_DTYPE_FP16; break;
    case XFFI_F8E4M3FN: dt = CGM_DTYPE_FP8_E4M3; break;
    case XFFI_F8E5M2: dt = CGM_DTYPE_FP8_E5M2; break;
    default:
        return fail(f, XFFI_INVALID_ARGUMENT, op, "%s: expected float32, bfloat16, float16 or (x and w, with their "
                    "scales) float8_e4m3fn / float8_e5m2, found XLA dtype %d; cast it first", what, b->dtype);
    }
    if (b->rank == 2) {
        *out = cgm_matrix_make(b->data, dt, b->dims[0], b->dims[1]);
    } else if (b->rank == 1 && vector_ok) {
        *out = cgm_matrix_make(b->data, dt, 1, b->dims[0]);
    } else {
        return fail(f, XFFI_INVALID_ARGUMENT, op, "%s: expected a %smatrix (2 dims), found %" PRId64 " dims; reshape "
                    "it to [rows, cols]", what, vector_ok ? "vector or " : "", b->rank);
    }
    /* cgm_matrix_make leaves ld 0: dense */
    return NULL;
}

typedef struct xffi_call {
    cgm_comm *comm;
    cgm_op_options opt;
    void *stream;
    /* bulk only: whether the GEMM and its bias are present, the collective
     * (-1: none) */
    int gemm, bias, collective;
    /* attribute ordered = 1: the last operand and the last result are order
     * markers, never read or written: a call that takes the marker another
     * call returned runs after it (XLA orders calls by their data only) */
    int ordered;
    /* X's cgm_scaling where X and W are fp8 (their scales are operands), else
     * CGM_SCALING_NONE */
    int scaling;
    /* an fp8 Y's y_scale operand and y_amax result are present (attributes
     * y_scale, y_amax) */
    int y_scale, y_amax;
} xffi_call;

static bool name_is(const xffi_span *s, const char *name) {
    size_t n = strlen(name);
    return s->len == n && memcmp(s->ptr, name, n) == 0;
}

static xffi_error *int_attr(const xffi_frame *f, const char *op, const xffi_span *name, const xffi_scalar *s,
                            int64_t *out) {
    switch (s->dtype) {
    case XFFI_S32: *out = *(const int32_t *)s->value; return NULL;
    case XFFI_S64: *out = *(const int64_t *)s->value; return NULL;
    case XFFI_U32: *out = *(const uint32_t *)s->value; return NULL;
    case XFFI_U64: *out = (int64_t)*(const uint64_t *)s->value; return NULL;
    case XFFI_PRED: *out = *(const uint8_t *)s->value != 0; return NULL;
    default:
        return fail(f, XFFI_INVALID_ARGUMENT, op, "attribute %.*s: expected an integer scalar, found XLA dtype %d",
                    (int)name->len, name->ptr, s->dtype);
    }
}

/* The attributes, the comm, and the stream (XLA's on a GPU backend). */
static xffi_error *call_of(const xffi_frame *f, const char *op, cgm_op cop, xffi_call *c) {
    memset(c, 0, sizeof *c);
    c->opt = (cgm_op_options)CGM_OP_OPTIONS_INIT;
    c->collective = -1;
    bool have_comm = false;
    for (int64_t i = 0; i < f->attrs.size; i++) {
        const xffi_span *name = f->attrs.names[i];
        if (f->attrs.types[i] != XFFI_ATTR_SCALAR)
            return fail(f, XFFI_INVALID_ARGUMENT, op, "attribute %.*s: expected a scalar, found attribute type %d",
                        (int)name->len, name->ptr, f->attrs.types[i]);
        int64_t v = 0;
        xffi_error *e = int_attr(f, op, name, f->attrs.attrs[i], &v);
        if (e) return e;
        if (name_is(name, "comm")) {
            c->comm = (cgm_comm *)(uintptr_t)v;
            have_comm = true;
        } else if (name_is(name, "layout")) {
            c->opt.layout = (cgm_layout)v;
        } else if (name_is(name, "algo")) {
            c->opt.algo = (cgm_algo)v;
        } else if (name_is(name, "splits")) {
            c->opt.splits = (int)v;
        } else if (name_is(name, "backend")) {
            c->opt.backend = (cgm_backend)v;
        } else if (name_is(name, "allow_tf32")) {
            c->opt.allow_tf32 = (int)v;
        } else if (name_is(name, "partial_dtype")) {
            c->opt.partial_dtype = (cgm_partial_dtype)v; /* the op refuses a bad value */
        } else if (name_is(name, "gemm_reduction")) {
            c->opt.gemm_reduction = (cgm_gemm_reduction)v;
        } else if (name_is(name, "epilogue")) {
            c->opt.epilogue = (cgm_epilogue)v; /* the op refuses a bad value */
        } else if (name_is(name, "ordered")) {
            c->ordered = v != 0;
        } else if (name_is(name, "fp8_fast_accum")) {
            c->opt.fp8_fast_accum = (int)v; /* the op refuses a bad value */
        } else if (name_is(name, "scaling")) {
            if (v != CGM_SCALING_NONE && v != CGM_SCALING_TENSOR && v != CGM_SCALING_BLOCK_1X128)
                return fail(f, XFFI_INVALID_ARGUMENT, op, "attribute scaling: expected %d (none), %d (per tensor) or "
                            "%d (X 1x128 blocks, W 128x128), found %" PRId64, CGM_SCALING_NONE, CGM_SCALING_TENSOR,
                            CGM_SCALING_BLOCK_1X128, v);
            c->scaling = (int)v;
        } else if (name_is(name, "y_scale")) {
            c->y_scale = v != 0;
        } else if (name_is(name, "y_amax")) {
            c->y_amax = v != 0;
        } else if (cop == CGM_OP_BULK && name_is(name, "gemm")) {
            c->gemm = v != 0;
        } else if (cop == CGM_OP_BULK && name_is(name, "bias")) {
            c->bias = v != 0;
        } else if (cop == CGM_OP_BULK && name_is(name, "collective")) {
            if (v < -1 || v >= CGM_COLLECTIVE_COUNT_)
                return fail(f, XFFI_INVALID_ARGUMENT, op, "attribute collective: expected -1 (none), %d (all-gather) "
                            "or %d (reduce-scatter), found %" PRId64, CGM_COLLECTIVE_ALL_GATHER,
                            CGM_COLLECTIVE_REDUCE_SCATTER, v);
            c->collective = (int)v;
        } else {
            return fail(f, XFFI_INVALID_ARGUMENT, op, "unknown attribute %.*s: expected comm, layout, algo, splits, "
                        "backend, allow_tf32, partial_dtype, gemm_reduction, fp8_fast_accum, scaling, epilogue, "
                        "ordered, y_scale, y_amax%s", (int)name->len, name->ptr,
                        cop == CGM_OP_BULK ? ", gemm, bias or collective" : "");
        }
    }
    if (!have_comm || !c->comm)
        return fail(f, XFFI_INVALID_ARGUMENT, op, "attribute comm: expected the cgm_comm pointer (commgemm.Comm."
                    "handle as a u64), found %s", have_comm ? "0" : "none");
    if (!cgm_comm_is_live(c->comm)) {
        cgm_status st = cgm_comm_check_usable(c->comm, op);
        return fail(f, status_code(st), op, "%s", cgm_last_error());
    }
    /* an out-of-range backend is the op's own refusal */
    if ((unsigned)c->opt.backend >= CGM_BACKEND_COUNT_) return NULL;
    cgm_backend backend = cgm_comm_call_backend(c->comm, cop, c->opt.backend);
    bool host = backend == CGM_BACKEND_HOST;
    if (!f->api->stream_get) {
        if (host) return NULL; /* no GPU context to ask about: XLA's CPU */
        return fail(f, XFFI_INTERNAL, op, "the XLA FFI API has no stream query (API %d.%d)", f->api->version.major,
                    f->api->version.minor);
    }
    /* XLA gives a stream on its GPU platform and an error on its CPU one:
     * that says where the operands live, which must be where the comm's
     * backend works (host: CPU memory; the others: GPU memory). */
    xffi_stream_args sa = {sizeof sa, NULL, f->ctx, NULL};
    xffi_error *e = f->api->stream_get(&sa);
    if (host && !e && sa.stream)
        return fail(f, XFFI_FAILED_PRECONDITION, op, "the comm's backend for this op is host, which works on CPU "
                    "memory, but XLA runs this call on a GPU (its operands are in GPU memory): create the Comm "
                    "with a GPU backend (backend=\"p2p\" or \"nccl\") for GPU arrays, or put the arrays on the "
                    "CPU (JAX_PLATFORMS=cpu)");
    if (e) {
        char why[256] = "";
        if (f->api->error_get_message) {
            xffi_error_message_args ma = {sizeof ma, NULL, e, NULL};
            f->api->error_get_message(&ma);
            if (ma.message) snprintf(why, sizeof why, "%s", ma.message);
        }
        if (f->api->error_destroy) {
            xffi_error_destroy_args da = {sizeof da, NULL, e};
            f->api->error_destroy(&da);
        }
        if (host) return NULL; /* XLA's CPU: no stream, as the host backend wants */
        return fail(f, XFFI_FAILED_PRECONDITION, op, "the comm's backend for this op is %s, which works on GPU "
                    "memory, but XLA gives this call no GPU stream (\"%s\"): it runs on the CPU. Put the arrays on "
                    "a GPU (jax.device_put, or leave JAX_PLATFORMS unset), or use a host-backend Comm for CPU arrays",
                    cgm_backend_name(backend), why);
    }
    c->stream = host ? NULL : sa.stream;
    return NULL;
}

/* The metadata query (API version, traits) and stages other than execute
 * return true: nothing to do. */
static bool not_execute(xffi_frame *f) {
    for (xffi_ext *e = f->ext; e; e = e->next) {
        if (e->type != XFFI_EXT_METADATA) continue;
        xffi_metadata *m = ((xffi_metadata_ext *)e)->metadata;
        /* the version of this layout, or the framework's if older (what
         * the handler was built against, as XLA's own headers report it) */
        m->version.major = XFFI_API_MAJOR;
        m->version.minor = XFFI_API_MINOR;
        if (f->api && f->api->version.major == XFFI_API_MAJOR && f->api->version.minor < XFFI_API_MINOR)
            m->version.minor = f->api->version.minor;
        m->traits = 0; /* not command-buffer safe: the first call per shape exchanges and tunes */
        return true;
    }
    return f->stage != XFFI_STAGE_EXECUTE;
}

/* A frame as large as the layout read here (up to its attributes). */
static xffi_error *frame_size(const xffi_frame *f, const char *op) {
    size_t need = offsetof(xffi_frame, attrs) + sizeof f->attrs;
    if (f->struct_size >= need) return NULL;
    return fail(f, XFFI_INTERNAL, op, "call frame of %zu bytes, expected at least %zu (an older XLA FFI API?)",
                f->struct_size, need);
}

/* Every operand and result is a buffer (the only kinds XLA passes today). */
static xffi_error *all_buffers(const xffi_frame *f, const char *op) {
    for (int64_t i = 0; i < f->args.size; i++)
        if (f->args.types[i] != XFFI_BUFFER)
            return fail(f, XFFI_INVALID_ARGUMENT, op, "operand %" PRId64 " is not a buffer", i);
    for (int64_t i = 0; i < f->rets.size; i++)
        if (f->rets.types[i] != XFFI_BUFFER)
            return fail(f, XFFI_INVALID_ARGUMENT, op, "result %" PRId64 " is not a buffer", i);
    return NULL;
}

/* An f32 buffer of scales (any rank: its elements are read as the
 * operand's scaling says) given to matrix m with that scaling. */
static xffi_error *scale_of(const xffi_frame *f, const char *op, const char *what, const xffi_buffer *b,
                            int scaling, cgm_matrix *m) {
    if (b->dtype != XFFI_F32)
        return fail(f, XFFI_INVALID_ARGUMENT, op, "%s: expected float32 scales, found XLA dtype %d", what, b->dtype);
    m->scale = b->data;
    m->scaling = (cgm_scaling)scaling;
    return NULL;
}

/* The scales of X-like x and W-like w, operands i and i + 1, under X's
 * scaling (W's is TENSOR or BLOCK_128X128 alike). */
static xffi_error *scales_of(const xffi_frame *f, const char *op, int64_t i, int scaling, cgm_matrix *x,
                             cgm_matrix *w) {
    xffi_error *e = scale_of(f, op, "x_scale", f->args.items[i], scaling, x);
    if (e) return e;
    return scale_of(f, op, "w_scale", f->args.items[i + 1],
                    scaling == CGM_SCALING_TENSOR ? CGM_SCALING_TENSOR : CGM_SCALING_BLOCK_128X128, w);
}

/* A float32 buffer of one element (an fp8 Y's y_scale or y_amax), in *p. */
static xffi_error *one_float(const xffi_frame *f, const char *op, const char *what, const xffi_buffer *b,
                             float **p) {
    int64_t n = 1;
    for (int64_t d = 0; d < b->rank; d++) n *= b->dims[d];
    if (b->dtype != XFFI_F32 || n != 1)
        return fail(f, XFFI_INVALID_ARGUMENT, op, "%s: expected one float32 (shape (1,)), found XLA dtype %d with "
                    "%" PRId64 " elements", what, b->dtype, n);
    *p = b->data;
    return NULL;
}

/* The operands and results an epilogue adds (commgemm.h "Epilogues"):
 * aux read (DGELU, DGELU_BGRAD) after the bias; aux written (GELU_AUX), then
 * bgrad (DGELU_BGRAD, BGRAD), after the op's own results. */
typedef struct epilogue_io {
    int aux_in, aux_out, bgrad;
    cgm_matrix aux, bgrad_m;
} epilogue_io;

static void epilogue_counts(cgm_epilogue e, epilogue_io *io) {
    memset(io, 0, sizeof *io);
    io->aux_in = e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
    io->aux_out = e == CGM_EPILOGUE_GELU_AUX;
    io->bgrad = e == CGM_EPILOGUE_DGELU_BGRAD || e == CGM_EPILOGUE_BGRAD;
}

/* Reads the epilogue's aux operand at args[in] (advancing it) and its
 * results at rets[out] (advancing it) and points c's options at them. */
static xffi_error *epilogue_buffers(const xffi_frame *f, const char *op, xffi_call *c, epilogue_io *io, int *in,
                                    int *out) {
    xffi_error *e;
    if (io->aux_in && (e = matrix_of(f, op, "aux (operand)", f->args.items[(*in)++], false, &io->aux))) return e;
    if (io->aux_out && (e = matrix_of(f, op, "aux (result)", f->rets.items[(*out)++], false, &io->aux))) return e;
    if (io->bgrad && (e = matrix_of(f, op, "bgrad (result)", f->rets.items[(*out)++], true, &io->bgrad_m)))
        return e;
    c->opt.aux = io->aux_in || io->aux_out ? &io->aux : NULL;
    c->opt.bgrad = io->bgrad ? &io->bgrad_m : NULL;
    return NULL;
}

/* Checks the frame and the operand and result counts (x, w[, x_scale,
 * w_scale][, y_scale][, bias][, aux]; y[, x_gathered[, x_gathered_scale]][,
 * y_amax][, aux][, bgrad]); fills x, w (with their scales where c's scaling
 * is set), bias (NULL when absent), y (with its scale), the gathered X (and
 * its scales) when asked for, y_amax and the epilogue's buffers. */
static xffi_error *operands(const xffi_frame *f, const char *op, xffi_call *c, bool ag, cgm_matrix *x,
                            cgm_matrix *w, cgm_matrix *bias, const cgm_matrix **bias_p, cgm_matrix *y,
                            cgm_matrix *extra, bool *has_extra, epilogue_io *io) {
    xffi_error *e;
    epilogue_counts(c->opt.epilogue, io);
    int64_t ns = (c->scaling ? 2 : 0) + c->y_scale, eps = c->y_amax + io->aux_out + io->bgrad;
    int64_t gathered = ag ? 1 + (c->scaling != 0) : 0;
    if (f->args.size < 2 + ns + io->aux_in || f->args.size > 3 + ns + io->aux_in)
        return fail(f, XFFI_INVALID_ARGUMENT, op, "expected %d or %d operands (x, w%s%s[, bias]%s), found %" PRId64,
                    (int)(2 + ns + io->aux_in), (int)(3 + ns + io->aux_in), c->scaling ? ", x_scale, w_scale" : "",
                    c->y_scale ? ", y_scale" : "", io->aux_in ? ", aux" : "", f->args.size);
    if (f->rets.size != 1 + eps && f->rets.size != 1 + gathered + eps) {
        char count[32];
        if (ag)
            snprintf(count, sizeof count, "%d or %d results", (int)(1 + eps), (int)(1 + gathered + eps));
        else
            snprintf(count, sizeof count, "%d result%s", (int)(1 + eps), eps ? "s" : "");
        return fail(f, XFFI_INVALID_ARGUMENT, op, "expected %s (y%s%s%s%s), found %" PRId64 " results", count,
                    !ag ? "" : c->scaling ? "[, x_gathered, x_gathered_scale]" : "[, x_gathered]",
                    c->y_amax ? ", y_amax" : "", io->aux_out ? ", aux" : "", io->bgrad ? ", bgrad" : "",
                    f->rets.size);
    }
    if ((e = all_buffers(f, op))) return e;
    if ((e = matrix_of(f, op, "x", f->args.items[0], false, x))) return e;
    if ((e = matrix_of(f, op, "w", f->args.items[1], false, w))) return e;
    if (c->scaling && (e = scales_of(f, op, 2, c->scaling, x, w))) return e;
    int in = 2 + (int)ns, out = 1;
    *bias_p = NULL;
    if (f->args.size == 3 + ns + io->aux_in) {
        if ((e = matrix_of(f, op, "bias", f->args.items[in++], true, bias))) return e;
        *bias_p = bias;
    }
    if ((e = matrix_of(f, op, "y (result 0)", f->rets.items[0], false, y))) return e;
    if (c->y_scale) {
        float *ys = NULL;
        if ((e = one_float(f, op, "y_scale", f->args.items[c->scaling ? 4 : 2], &ys))) return e;
        y->scale = ys;
        y->scaling = CGM_SCALING_TENSOR;
    }
    *has_extra = ag && f->rets.size == 1 + gathered + eps;
    if (*has_extra) {
        if ((e = matrix_of(f, op, "x_gathered (result 1)", f->rets.items[out++], false, extra))) return e;
        if (c->scaling &&
            (e = scale_of(f, op, "x_gathered_scale (result 2)", f->rets.items[out++], c->scaling, extra)))
            return e;
    }
    if (c->y_amax && (e = one_float(f, op, "y_amax", f->rets.items[out++], &c->opt.y_amax))) return e;
    return epilogue_buffers(f, op, c, io, &in, &out);
}

/* The frame without its order markers (attribute ordered), in *view. */
static xffi_error *without_markers(const xffi_frame *f, const char *op, const xffi_call *c, xffi_frame *view) {
    *view = *f;
    if (!c->ordered) return NULL;
    if (f->args.size < 1 || f->rets.size < 1)
        return fail(f, XFFI_INVALID_ARGUMENT, op, "attribute ordered = 1: expected an order marker as the last "
                    "operand and as the last result, found %" PRId64 " operands and %" PRId64 " results",
                    f->args.size, f->rets.size);
    view->args.size--;
    view->rets.size--;
    return NULL;
}

static xffi_error *result(const xffi_frame *f, const char *op, cgm_status st) {
    if (st == CGM_SUCCESS) return NULL;
    return fail(f, status_code(st), op, "%s (%s)", cgm_last_error(), cgm_status_string(st));
}

/* ------------------------------------------------------------ handlers */

static void *handle(void *frame, cgm_op cop, const char *op) {
    xffi_frame *f = frame;
    if (not_execute(f)) return NULL;
    bool ag = cop == CGM_OP_ALL_GATHER_GEMM;
    cgm_matrix x, w, bias, y, xg;
    const cgm_matrix *b = NULL;
    bool has_xg = false;
    xffi_call c;
    epilogue_io io;
    xffi_frame view;
    xffi_error *e = frame_size(f, op);
    if (e || (e = call_of(f, op, cop, &c)) || (e = without_markers(f, op, &c, &view))) return e;
    if ((e = operands(&view, op, &c, ag, &x, &w, &bias, &b, &y, &xg, &has_xg, &io))) return e;
    cgm_status st;
    if (ag)
        st = cgm_all_gather_gemm(c.comm, &x, &w, b, &y, has_xg ? &xg : NULL, &c.opt, c.stream);
    else if (cop == CGM_OP_GEMM_REDUCE_SCATTER)
        st = cgm_gemm_reduce_scatter(c.comm, &x, &w, b, &y, &c.opt, c.stream);
    else
        st = cgm_gemm_all_reduce(c.comm, &x, &w, b, &y, &c.opt, c.stream);
    return result(f, op, st);
}

void *cgm_xla_ffi_all_gather_gemm(void *frame) {
    return handle(frame, CGM_OP_ALL_GATHER_GEMM, "all_gather_gemm");
}

void *cgm_xla_ffi_gemm_reduce_scatter(void *frame) {
    return handle(frame, CGM_OP_GEMM_REDUCE_SCATTER, "gemm_reduce_scatter");
}

void *cgm_xla_ffi_gemm_all_reduce(void *frame) {
    return handle(frame, CGM_OP_GEMM_ALL_REDUCE, "gemm_all_reduce");
}

/* Bulk: operands a, b[, a_scale, b_scale][, y_scale][, bias][, aux] (when
 * gemm) then send (when a collective); results c[, y_amax][, aux][, bgrad]
 * (when gemm) then recv (when a collective). */
void *cgm_xla_ffi_bulk_overlap(void *frame) {
    xffi_frame *f = frame;
    const char *op = "bulk_overlap";
    if (not_execute(f)) return NULL;
    xffi_error *e = frame_size(f, op);
    if (e) return e;
    xffi_call c;
    xffi_frame view;
    if ((e = call_of(f, op, CGM_OP_BULK, &c)) || (e = without_markers(f, op, &c, &view))) return e;
    f = &view;
    bool coll = c.collective >= 0;
    epilogue_io io;
    epilogue_counts(c.gemm ? c.opt.epilogue : CGM_EPILOGUE_NONE, &io);
    int64_t ns = c.gemm && c.scaling ? 2 : 0, ys = c.gemm && c.y_scale, ya = c.gemm && c.y_amax;
    int64_t nin = (c.gemm ? 2 + ns + ys + c.bias + io.aux_in : 0) + coll;
    int64_t nout = (c.gemm ? 1 + ya + io.aux_out + io.bgrad : 0) + coll;
    if (!c.gemm && !coll)
        return fail(f, XFFI_INVALID_ARGUMENT, op, "neither a GEMM (attribute gemm = 1) nor a collective "
                    "(attribute collective = 0 or 1): expected at least one");
    if (!c.gemm && (c.y_scale || c.y_amax))
        return fail(f, XFFI_INVALID_ARGUMENT, op, "attribute y_scale or y_amax without a GEMM (attribute gemm = 1): "
                    "they are C's; drop them or add the GEMM");
    if (f->args.size != nin || f->rets.size != nout)
        return fail(f, XFFI_INVALID_ARGUMENT, op, "expected %" PRId64 " operands (%s%s%s%s%s%s) and %" PRId64
                    " results (%s%s%s%s%s), found %" PRId64 " and %" PRId64, nin, c.gemm ? "a, b" : "",
                    ns ? ", a_scale, b_scale" : "", ys ? ", y_scale" : "", c.gemm && c.bias ? ", bias" : "",
                    io.aux_in ? ", aux" : "", coll ? (c.gemm ? ", send" : "send") : "", nout, c.gemm ? "c" : "",
                    ya ? ", y_amax" : "", io.aux_out ? ", aux" : "", io.bgrad ? ", bgrad" : "",
                    coll ? (c.gemm ? ", recv" : "recv") : "", f->args.size, f->rets.size);
    if ((e = all_buffers(f, op))) return e;
    cgm_matrix a, b, bias, cm, send, recv;
    int in = 0, out = 0;
    if (c.gemm) {
        if ((e = matrix_of(f, op, "a", f->args.items[in++], false, &a))) return e;
        if ((e = matrix_of(f, op, "b", f->args.items[in++], false, &b))) return e;
        if (ns && (e = scales_of(f, op, in, c.scaling, &a, &b))) return e;
        in += ns;
        float *y_scale = NULL;
        if (ys && (e = one_float(f, op, "y_scale", f->args.items[in++], &y_scale))) return e;
        if (c.bias && (e = matrix_of(f, op, "bias", f->args.items[in++], true, &bias))) return e;
        if ((e = matrix_of(f, op, "c (result 0)", f->rets.items[out++], false, &cm))) return e;
        if (ys) {
            cm.scale = y_scale;
            cm.scaling = CGM_SCALING_TENSOR;
        }
        if (ya && (e = one_float(f, op, "y_amax", f->rets.items[out++], &c.opt.y_amax))) return e;
        if ((e = epilogue_buffers(f, op, &c, &io, &in, &out))) return e;
    }
    if (coll) {
        if ((e = matrix_of(f, op, "send", f->args.items[in], false, &send))) return e;
        if ((e = matrix_of(f, op, "recv (the last result)", f->rets.items[out], false, &recv))) return e;
    }
    cgm_status st = cgm_bulk_overlap(c.comm, c.gemm ? &a : NULL, c.gemm ? &b : NULL, c.gemm && c.bias ? &bias : NULL,
                                     c.gemm ? &cm : NULL,
                                     coll ? (cgm_collective)c.collective : CGM_COLLECTIVE_ALL_GATHER,
                                     coll ? &send : NULL, coll ? &recv : NULL, &c.opt, c.stream);
    return result(f, op, st);
}
