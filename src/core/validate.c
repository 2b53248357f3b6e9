/* Argument validation: every op's operands checked against the layout and
 * the comm before anything is enqueued; messages say expected / found / do. */
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "validate_epilogue.h"
#include "validate_fp8.h"

typedef struct check_ctx {
    const char *fn; /* public function name, for messages */
    /* m is above the comm's max_m and the call's backend refuses that
     * itself, after its agreement exchange (check_max_m): the checks of
     * what follows from m (the other operands' rows, overlaps) are
     * skipped, so that the backend's refusal says m. */
    bool m_left_to_backend;
} check_ctx;

/* What an operand's fp8 scales are: X, W, Y need them where they are fp8,
 * x_gathered's are an optional output, the others (bias, send, recv) are
 * never fp8 (their dtype checks refuse it). */
typedef enum scales { SCALES_NONE, SCALES_REQUIRED, SCALES_OPTIONAL } scales;

/* Checks one descriptor in isolation: pointer, dtype, dims, ld, alignment,
 * an fp8 operand's scaling and scales. */
static cgm_status check_matrix(const check_ctx *c, const char *name, const cgm_matrix *m, scales role) {
    if ((unsigned)m->dtype >= CGM_DTYPE_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s.dtype = %d: expected a cgm_dtype value", c->fn,
                         name, (int)m->dtype);
    if (m->rows < 0 || m->cols < 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s is %lld x %lld: expected non-negative rows and cols",
                         c->fn, name, (long long)m->rows, (long long)m->cols);
    if (m->ld != 0 && m->ld < m->cols)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.ld = %lld is smaller than its cols = %lld: expected ld >= cols (row-major) or 0",
                         c->fn, name, (long long)m->ld, (long long)m->cols);
    /* No call can use more (the config maxima are at most CGM_DIM_MAX),
     * and with these bounds no size computed below wraps. */
    if (m->rows > CGM_DIM_MAX || m->cols > CGM_DIM_MAX)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %lld x %lld: expected rows and cols at most 2^31 - 1", c->fn, name,
                         (long long)m->rows, (long long)m->cols);
    int64_t span = 0;
    if (m->rows > 0 && m->cols > 0 &&
        (__builtin_mul_overflow(m->rows - 1, cgm_matrix_ld(m), &span) ||
         __builtin_add_overflow(span, m->cols, &span) ||
         span > ((int64_t)1 << 60) / (int64_t)cgm_dtype_size(m->dtype)))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s with %lld rows and ld = %lld spans more than 2^60 bytes: expected an ld that "
                         "fits its memory", c->fn, name, (long long)m->rows, (long long)m->ld);
    if (m->scale && !cgm_dtype_is_fp8(m->dtype))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.scale is set but %s.dtype is %s: scales are for fp8 only; pass NULL", c->fn,
                         name, name, cgm_dtype_name(m->dtype));
    cgm_status st;
    if (cgm_dtype_is_fp8(m->dtype) && role != SCALES_NONE &&
        (st = cgm_check_fp8_matrix(c->fn, name, m, role == SCALES_OPTIONAL)))
        return st;
    if (m->rows * m->cols > 0 && !m->data)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL but %s is %lld x %lld; pass its memory",
                         c->fn, name, name, (long long)m->rows, (long long)m->cols);
    size_t size = cgm_dtype_size(m->dtype);
    if (m->data && (uintptr_t)m->data % size != 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.data = %p is not aligned to its element size (%zu bytes for %s); pass an "
                         "aligned pointer", c->fn, name, m->data, size, cgm_dtype_name(m->dtype));
    return CGM_SUCCESS;
}

cgm_status cgm_check_operand(const char *fn, const char *name, const cgm_matrix *m) {
    check_ctx c = {fn, false};
    return check_matrix(&c, name, m, SCALES_NONE);
}

static cgm_status require(const check_ctx *c, const char *name, const cgm_matrix *m, const char *what,
                          scales role) {
    if (!m)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; expected %s", c->fn, name, what);
    return check_matrix(c, name, m, role);
}

static cgm_status check_shape(const check_ctx *c, const char *name, const cgm_matrix *m, int64_t rows,
                              int64_t cols, const char *why) {
    if (m->rows != rows || m->cols != cols)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s is %lld x %lld, expected %lld x %lld (%s)", c->fn,
                         name, (long long)m->rows, (long long)m->cols, (long long)rows, (long long)cols, why);
    return CGM_SUCCESS;
}

/* Does the backend check m against max_m itself, after its agreement
 * exchange? p2p and nccl exchange a call's signature only on the first
 * call of that signature, so a rank refusing a call here alone would leave
 * its peers waiting in their exchange until the timeout broke their comms
 * (they cannot be told, as the host backend's peers are: vtable
 * `rejected`). They check m right after that exchange (p2p_run.c
 * check_limits; ncclb_check_limits, for every op's m and the bulk
 * collective's rows), before any buffer is touched: an m beyond max_m on
 * one rank alone is another signature than its peers', and every rank
 * gets CGM_ERROR_MISMATCH at once naming it. The host backend (which
 * exchanges on every call) and cublasmp (no limit check of its own) get
 * the refusal here. */
static bool max_m_after_agreement(cgm_backend b) {
    return b == CGM_BACKEND_P2P || b == CGM_BACKEND_NCCL;
}

/* m against the comm's capacity, before the checks that look at the
 * operands' shapes and memory: an m the comm can never run is said as
 * such, not as a consequence of it (a shape or an overlap). On p2p and
 * nccl the backend says it, after its agreement exchange: the call goes
 * on with those checks skipped (c->m_left_to_backend). The backends check
 * their other limits (n, k) themselves. */
static cgm_status check_max_m(check_ctx *c, const cgm_comm *comm, const cgm_call *call, const char *what,
                              int64_t m) {
    c->m_left_to_backend = false;
    if (m <= comm->config.max_m) return CGM_SUCCESS;
    if (max_m_after_agreement(call->backend)) {
        c->m_left_to_backend = true;
        return CGM_SUCCESS;
    }
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "%s: %s = %lld is above the comm's max_m = %lld (workspaces are sized from it): expected "
                     "at most max_m; create the comm with a larger config max_m (or COMMGEMM_MAX_M)", c->fn, what,
                     (long long)m, (long long)comm->config.max_m);
}

static bool is_input_dtype(cgm_dtype d) {
    return d == CGM_DTYPE_FP32 || d == CGM_DTYPE_BF16 || d == CGM_DTYPE_FP16;
}

/* Byte range a matrix touches. */
static void extent(const cgm_matrix *m, uintptr_t *begin, uintptr_t *end) {
    *begin = (uintptr_t)m->data;
    *end = *begin;
    if (m->data && m->rows > 0 && m->cols > 0)
        *end = *begin + (uintptr_t)(((m->rows - 1) * cgm_matrix_ld(m) + m->cols) * (int64_t)cgm_dtype_size(m->dtype));
}

static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    return a / b - (a % b != 0 && a < 0);
}

/* Do two matrices share a byte (core.h)? Their byte ranges first; where those meet
 * and the row strides are equal (e.g. column slices of one buffer, same
 * ld), row i of a and row j of b meet iff -wb < d + (j - i) L < wa, with d
 * the distance of their starts, L the stride and w the row widths in
 * bytes: a t = j - i in [-(rows_a - 1), rows_b - 1] with that. Other
 * strides: the byte ranges decide (may refuse a disjoint interleaving). */
bool cgm_matrix_overlap(const cgm_matrix *a, const cgm_matrix *b) {
    uintptr_t a0, a1, b0, b1;
    extent(a, &a0, &a1);
    extent(b, &b0, &b1);
    if (!(a0 < a1 && b0 < b1 && a0 < b1 && b0 < a1)) return false;
    int64_t ea = (int64_t)cgm_dtype_size(a->dtype), eb = (int64_t)cgm_dtype_size(b->dtype);
    int64_t la = cgm_matrix_ld(a) * ea, lb = cgm_matrix_ld(b) * eb;
    if (a->rows == 1) la = lb;
    if (b->rows == 1) lb = la;
    if (la != lb || la <= 0) return true;
    int64_t d = (int64_t)(b0 - a0), wa = a->cols * ea, wb = b->cols * eb;
    int64_t lo = floor_div(-wb - d, la) + 1, hi = -floor_div(-(wa - d), la) - 1; /* ceil - 1 */
    if (lo < -(a->rows - 1)) lo = -(a->rows - 1);
    if (hi > b->rows - 1) hi = b->rows - 1;
    return lo <= hi;
}

/* `role`: what out is ("output", or "operand" for an input that may
 * overlap nothing: dgelu's aux). */
static cgm_status check_disjoint(const check_ctx *c, const char *role, const char *out_name, const cgm_matrix *out,
                                 const char *other_name, const cgm_matrix *other) {
    if (!out || !other) return CGM_SUCCESS;
    if (cgm_matrix_overlap(out, other))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s %s overlaps %s in memory: in-place operation is not supported; give "
                         "%s its own buffer", c->fn, role, out_name, other_name, out_name);
    return CGM_SUCCESS;
}

/* The GEMM's dtypes: one of fp32, bf16, fp16 for X and W with Y of theirs
 * or fp32, or the fp8 rules (validate_fp8.c). */
static cgm_status check_dtypes(const check_ctx *c, const cgm_call *call, const char *xn, const cgm_matrix *x,
                               const char *wn, const cgm_matrix *w, const char *yn, const cgm_matrix *y) {
    if (cgm_dtype_is_fp8(x->dtype) || cgm_dtype_is_fp8(w->dtype)) {
        cgm_gemm_operands g = {c->fn, xn, wn, yn, call->layout, x, w, y, call->accumulate};
        return cgm_check_fp8_gemm(&g);
    }
    if (!is_input_dtype(x->dtype) || x->dtype != w->dtype)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %s and %s is %s: expected one input dtype (fp32, bf16 or fp16) for both",
                         c->fn, xn, cgm_dtype_name(x->dtype), wn, cgm_dtype_name(w->dtype));
    if (cgm_dtype_is_fp8(y->dtype))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %s but the inputs are %s: an fp8 output needs fp8 inputs; expected %s to be "
                         "%s or fp32", c->fn, yn, cgm_dtype_name(y->dtype), cgm_dtype_name(x->dtype), yn,
                         cgm_dtype_name(x->dtype));
    if (y->dtype != x->dtype && y->dtype != CGM_DTYPE_FP32)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %s but the inputs are %s: expected the output dtype to be %s or fp32", c->fn,
                         yn, cgm_dtype_name(y->dtype), cgm_dtype_name(x->dtype), cgm_dtype_name(x->dtype));
    return CGM_SUCCESS;
}

/* The GEMM operands of any op: dtypes, the layout's shapes, bias. The
 * split dimension's check is the caller's: x's rows there must be
 * x_split_rows (-1: not checked). Sets k from x. */
static cgm_status check_gemm(const check_ctx *c, const cgm_call *call, const char *xn, const cgm_matrix *x,
                             const char *wn, const cgm_matrix *w, const cgm_matrix *bias, const char *yn,
                             const cgm_matrix *y, int64_t x_split_rows, int64_t n, int64_t *k_out) {
    cgm_status st;
    cgm_layout layout = call->layout;
    if ((st = check_dtypes(c, call, xn, x, wn, w, yn, y))) return st;
    int64_t k = layout == CGM_LAYOUT_NT ? x->rows : x->cols;
    int64_t xs = layout == CGM_LAYOUT_NT ? x->cols : x->rows;
    char why[160];
    if (x_split_rows >= 0 && xs != x_split_rows) {
        snprintf(why, sizeof why, "layout %s stores %s as %s", cgm_layout_name(layout), xn,
                 layout == CGM_LAYOUT_NT ? "[k, rows]" : "[rows, k]");
        return layout == CGM_LAYOUT_NT ? check_shape(c, xn, x, k, x_split_rows, why)
                                       : check_shape(c, xn, x, x_split_rows, k, why);
    }
    snprintf(why, sizeof why, "layout %s with k = %lld from %s and n = %lld from %s", cgm_layout_name(layout),
             (long long)k, xn, (long long)n, yn);
    if (layout == CGM_LAYOUT_TN) st = check_shape(c, wn, w, n, k, why);
    else st = check_shape(c, wn, w, k, n, why);
    if (st != CGM_SUCCESS) return st;
    if (bias) {
        if ((st = check_matrix(c, "bias", bias, SCALES_NONE)) != CGM_SUCCESS) return st;
        if ((st = check_shape(c, "bias", bias, 1, n, "a 1 x n row added to every output row")))
            return st;
        if (cgm_dtype_is_fp8(x->dtype)) {
            if ((st = cgm_check_fp8_bias(c->fn, bias, yn, y))) return st;
        } else if (bias->dtype != y->dtype)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: bias is %s but %s is %s: expected bias in %s's dtype",
                             c->fn, cgm_dtype_name(bias->dtype), yn, cgm_dtype_name(y->dtype), yn);
    }
    *k_out = k;
    return CGM_SUCCESS;
}

/* The call's precision from the options (DEFAULT: the comm's). Bad enum
 * values are refused for every op, also those that do not use them. */
static cgm_status check_precision(const check_ctx *c, const cgm_comm *comm, const cgm_op_options *o,
                                  cgm_partial_dtype *partial, cgm_gemm_reduction *reduction) {
    if ((unsigned)o->partial_dtype >= CGM_PARTIAL_DTYPE_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.partial_dtype = %d: expected CGM_PARTIAL_DTYPE_DEFAULT (the comm's), _FP32 "
                         "or _OUTPUT; set one of them", c->fn, (int)o->partial_dtype);
    if ((unsigned)o->gemm_reduction >= CGM_GEMM_REDUCTION_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.gemm_reduction = %d: expected CGM_GEMM_REDUCTION_DEFAULT (the comm's), _ANY "
                         "or _FP32; set one of them", c->fn, (int)o->gemm_reduction);
    *partial = o->partial_dtype ? o->partial_dtype : comm->config.partial_dtype;
    *reduction = o->gemm_reduction ? o->gemm_reduction : comm->config.gemm_reduction;
    return CGM_SUCCESS;
}

static cgm_status check_options(const check_ctx *c, cgm_comm *comm, cgm_op op, const cgm_op_options *options,
                                void *stream, cgm_call *call, cgm_partial_dtype *partial) {
    static const size_t sizes[] = {CGM_SIZE_BEFORE(cgm_op_options, partial_dtype),
                                   CGM_SIZE_BEFORE(cgm_op_options, fp8_fast_accum),
                                   CGM_SIZE_BEFORE(cgm_op_options, epilogue), sizeof(cgm_op_options)};
    cgm_op_options opts = CGM_OP_OPTIONS_INIT, *o = &opts;
    if (options) {
        cgm_status st = cgm_check_struct_size(c->fn, "options", options->struct_size, sizes, 4,
                                              "CGM_OP_OPTIONS_INIT");
        if (st != CGM_SUCCESS) return st;
        /* A program built against an older header: the fields it lacks keep their defaults. */
        memcpy(&opts, options, options->struct_size);
    }
    if ((unsigned)o->layout >= CGM_LAYOUT_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: options.layout = %d: expected CGM_LAYOUT_TN, NN or NT",
                         c->fn, (int)o->layout);
    if ((unsigned)o->algo >= CGM_ALGO_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: options.algo = %d: expected a cgm_algo value", c->fn,
                         (int)o->algo);
    if (o->splits < 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: options.splits = %d: expected 0 (auto) or more", c->fn,
                         o->splits);
    if ((unsigned)o->backend >= CGM_BACKEND_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: options.backend = %d: expected a cgm_backend value",
                         c->fn, (int)o->backend);
    if (o->fp8_fast_accum != 0 && o->fp8_fast_accum != 1)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.fp8_fast_accum = %d: expected 0 (promote partial sums to fp32) or 1 (allow "
                         "fast accumulation)", c->fn, o->fp8_fast_accum);
    call->fp8_fast_accum = o->fp8_fast_accum == 1;
    call->y_amax = o->y_amax; /* checked against the output once it is known */
    call->epilogue = o->epilogue; /* so are the epilogue and its operands */
    call->has_aux = o->aux != NULL;
    call->has_bgrad = o->bgrad != NULL;
    if (o->aux) call->aux = cgm_matrix_take(o->aux);
    if (o->bgrad) call->bgrad = cgm_matrix_take(o->bgrad);
    cgm_gemm_reduction reduction = CGM_GEMM_REDUCTION_DEFAULT;
    cgm_status st = check_precision(c, comm, o, partial, &reduction);
    if (st != CGM_SUCCESS) return st;
    call->gemm_reduction_fp32 = reduction == CGM_GEMM_REDUCTION_FP32;
    call->partial_dtype = CGM_DTYPE_FP32; /* RS and AR: set from the output dtype */
    call->op = op;
    call->layout = o->layout;
    call->accumulate = o->accumulate != 0;
    call->allow_tf32 = o->allow_tf32 != 0;
    call->algo = o->algo == CGM_ALGO_AUTO ? comm->config.algo : o->algo;
    call->splits = o->splits ? o->splits : comm->config.splits;
    call->backend = cgm_comm_call_backend(comm, op, o->backend);
    call->stream = stream;
    if (call->backend == CGM_BACKEND_HOST && stream)
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "%s: stream = %p on the host backend: host ops run on the calling thread on CPU "
                         "memory and take no stream; pass NULL (with CPU buffers), or run GPU buffers on a GPU "
                         "backend (p2p, nccl)", c->fn, stream);
    return CGM_SUCCESS;
}

/* The call's GEMM operands, validated. */
static void fill_gemm(cgm_call *call, const cgm_matrix *x, const cgm_matrix *w, const cgm_matrix *bias,
                      const cgm_matrix *y) {
    call->has_gemm = true;
    call->in_dtype = x->dtype;
    call->w_dtype = w->dtype;
    call->out_dtype = y->dtype;
    call->scaling = cgm_dtype_is_fp8(x->dtype) ? x->scaling : CGM_SCALING_NONE;
    call->x = *x;
    call->w = *w;
    call->y = *y;
    if (bias) call->bias = *bias;
    call->has_bias = bias != NULL;
}

static cgm_status check_bulk(check_ctx *c, const cgm_comm *comm, const cgm_matrix *a, const cgm_matrix *b,
                             const cgm_matrix *bias, cgm_matrix *cm, cgm_collective coll, const cgm_matrix *send,
                             cgm_matrix *recv, cgm_call *call) {
    cgm_status st;
    call->has_gemm = a || b || cm;
    call->has_collective = send || recv;
    if (!call->has_gemm && !call->has_collective)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: a, b, c, send and recv are all NULL: expected a GEMM (a, b, c), a collective "
                         "(send, recv) or both", c->fn);
    if (call->has_gemm) {
        if ((st = require(c, "a", a, "the GEMM's first operand (or a, b, c all NULL)", SCALES_REQUIRED)))
            return st;
        if ((st = require(c, "b", b, "the GEMM's second operand (or a, b, c all NULL)", SCALES_REQUIRED)))
            return st;
        if ((st = require(c, "c", cm, "the GEMM's output (or a, b, c all NULL)", SCALES_REQUIRED))) return st;
        if ((st = check_gemm(c, call, "a", a, "b", b, bias, "c", cm, cm->rows, cm->cols, &call->k))) return st;
        call->m = cm->rows;
        call->n = cm->cols;
        fill_gemm(call, a, b, bias, cm);
    } else if (bias) {
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: bias is set but there is no GEMM (a, b, c are NULL)",
                         c->fn);
    }
    if (call->has_collective) {
        if ((unsigned)coll >= CGM_COLLECTIVE_COUNT_)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "%s: collective = %d: expected CGM_COLLECTIVE_ALL_GATHER or _REDUCE_SCATTER", c->fn,
                             (int)coll);
        if ((st = require(c, "send", send, "the collective's input (or send and recv both NULL)", SCALES_NONE)))
            return st;
        if ((st = require(c, "recv", recv, "the collective's output (or send and recv both NULL)", SCALES_NONE)))
            return st;
        if (!is_input_dtype(send->dtype) || send->dtype != recv->dtype)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "%s: send is %s and recv is %s: expected one dtype (fp32, bf16 or fp16) for both",
                             c->fn, cgm_dtype_name(send->dtype), cgm_dtype_name(recv->dtype));
        bool ag = coll == CGM_COLLECTIVE_ALL_GATHER;
        const cgm_matrix *full = ag ? recv : send, *part = ag ? send : recv;
        int64_t m = full->rows, cols = full->cols;
        if ((st = check_max_m(c, comm, call, ag ? "m (recv's rows)" : "m (send's rows)", m))) return st;
        int64_t mr = cgm_shard_rows(m, comm->rank, comm->nranks);
        char why[160];
        snprintf(why, sizeof why, "rank %d of %d owns %lld of the %lld rows of %s", comm->rank, comm->nranks,
                 (long long)mr, (long long)m, ag ? "recv" : "send");
        if (!c->m_left_to_backend && (st = check_shape(c, ag ? "send" : "recv", part, mr, cols, why))) return st;
        call->collective = coll;
        call->coll_m = m;
        call->coll_cols = cols;
        call->coll_dtype = send->dtype;
        call->send = *send;
        call->recv = *recv;
    }
    return CGM_SUCCESS;
}

/* AG+GEMM's x_gathered: the gathered input's shape and dtype; for fp8,
 * x_shard's scaling, and optional scales (P floats for TENSOR). */
static cgm_status check_x_gathered(const check_ctx *c, const cgm_matrix *x,
                                   const cgm_matrix *xg, cgm_call *call) {
    cgm_status st;
    char why[160];
    if ((st = check_matrix(c, "x_gathered", xg, SCALES_OPTIONAL))) return st;
    snprintf(why, sizeof why, "the gathered input of layout %s", cgm_layout_name(call->layout));
    if (c->m_left_to_backend) st = CGM_SUCCESS; /* its m rows: the backend refuses m */
    else if (call->layout == CGM_LAYOUT_NT) st = check_shape(c, "x_gathered", xg, call->k, call->m, why);
    else st = check_shape(c, "x_gathered", xg, call->m, call->k, why);
    if (st) return st;
    if (xg->dtype != x->dtype)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: x_gathered is %s but x_shard is %s: expected the input dtype",
                         c->fn, cgm_dtype_name(xg->dtype), cgm_dtype_name(x->dtype));
    if (cgm_dtype_is_fp8(xg->dtype) && xg->scaling != x->scaling)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: x_gathered.scaling = %s but x_shard.scaling = %s: expected x_shard's (its scale, if "
                         "not NULL, receives the gathered scales: %s)", c->fn, cgm_scaling_name(xg->scaling),
                         cgm_scaling_name(x->scaling),
                         x->scaling == CGM_SCALING_TENSOR ? "one float per rank" : "[m, ceil(k / 128)] floats");
    call->has_x_gathered = true;
    call->x_gathered = *xg;
    return CGM_SUCCESS;
}

/* AG+GEMM, GEMM+RS, GEMM+AR: the operands against m, the ceil split and
 * the layout (the rows that follow from m not, where the backend refuses
 * m: check_max_m). */
static cgm_status check_split_gemm(check_ctx *c, cgm_comm *comm, cgm_op op, const cgm_matrix *x,
                                   const cgm_matrix *w, const cgm_matrix *bias, const cgm_matrix *y,
                                   const cgm_matrix *xg, cgm_partial_dtype partial, cgm_call *call) {
    const int P = comm->nranks, r = comm->rank;
    bool ag = op == CGM_OP_ALL_GATHER_GEMM;
    const char *xn = ag ? "x_shard" : "x", *yn = op == CGM_OP_GEMM_REDUCE_SCATTER ? "y_shard" : "y";
    cgm_status st;
    if ((st = require(c, xn, x, ag ? "this rank's rows of X" : "this rank's X", SCALES_REQUIRED))) return st;
    if ((st = require(c, "w", w, "this rank's weight shard", SCALES_REQUIRED))) return st;
    if ((st = require(c, yn, y, "the output", SCALES_REQUIRED))) return st;
    int64_t m;
    if (ag) m = y->rows;
    else m = call->layout == CGM_LAYOUT_NT ? x->cols : x->rows;
    if ((st = check_max_m(c, comm, call,
                          ag ? "m (y's rows)" : call->layout == CGM_LAYOUT_NT ? "m (x's cols)" : "m (x's rows)", m)))
        return st;
    bool rows_of_m = !c->m_left_to_backend;
    int64_t mr = cgm_shard_rows(m, r, P);
    char why[200];
    if (op == CGM_OP_GEMM_REDUCE_SCATTER) {
        snprintf(why, sizeof why, "rank %d of %d owns %lld of the m = %lld rows", r, P, (long long)mr,
                 (long long)m);
        if (rows_of_m && y->rows != mr) return check_shape(c, yn, y, mr, y->cols, why);
    } else if (op == CGM_OP_GEMM_ALL_REDUCE && rows_of_m && y->rows != m) {
        return check_shape(c, yn, y, m, y->cols, "every rank gets all m rows of the sum");
    }
    int64_t x_rows = !ag ? m : rows_of_m ? mr : -1;
    if ((st = check_gemm(c, call, xn, x, "w", w, bias, yn, y, x_rows, y->cols, &call->k))) return st;
    call->m = m;
    call->n = y->cols;
    fill_gemm(call, x, w, bias, y);
    if (!ag && partial == CGM_PARTIAL_DTYPE_OUTPUT && (y->dtype == CGM_DTYPE_BF16 || y->dtype == CGM_DTYPE_FP16))
        call->partial_dtype = y->dtype;
    if (xg && !ag) return cgm_error(CGM_ERROR_INTERNAL, "%s: x_gathered given to a non-AG op", c->fn);
    return xg ? check_x_gathered(c, x, xg, call) : CGM_SUCCESS;
}

/* The scales of an fp8 operand as a matrix (none otherwise); x_gathered's
 * TENSOR scales are one per rank. */
static cgm_matrix scales_of(const cgm_matrix *m, bool gathered, int nranks) {
    if (!m) return cgm_matrix_make(NULL, CGM_DTYPE_FP32, 0, 0);
    cgm_matrix s = cgm_scale_matrix(m);
    if (gathered && m->scaling == CGM_SCALING_TENSOR && s.rows > 0) s.cols = s.ld = nranks;
    return s;
}

/* No output (data, x_gathered's scales, y_amax, the epilogue's aux and
 * bgrad) overlaps an input (data or scales) or another output, nor does
 * an aux that the epilogue reads; then, as it asks the CUDA driver, every
 * pointer is memory the call's backend can read. */
static cgm_status check_memory(const check_ctx *c, const cgm_comm *comm, const cgm_call *call,
                               const cgm_matrix *in[4], const char *in_names[4], cgm_matrix *outs[3],
                               const char *out_names[3]) {
    enum { NIN = 7, NOUT = 7 };
    cgm_matrix scales[NIN + NOUT];
    const cgm_matrix *ins[NIN], *os[NOUT];
    char names[NIN + NOUT][48];
    const char *inn[NIN], *outn[NOUT];
    for (int i = 0; i < 4; i++) ins[i] = in[i], inn[i] = in_names[i];
    for (int o = 0; o < 3; o++) os[o] = outs[o], outn[o] = out_names[o];
    /* the scales of X, W (inputs), Y (an input too: Y's quantization scale) */
    const cgm_matrix *scaled[] = {in[0], in[1], outs[0], outs[1]};
    const char *scaled_names[] = {in_names[0], in_names[1], out_names[0], out_names[1]};
    for (int i = 0; i < 4; i++) {
        scales[i] = scales_of(scaled[i], i == 3, comm->nranks);
        snprintf(names[i], sizeof names[i], "%s.scale", scaled_names[i]);
        if (i < 3) ins[4 + i] = scaled[i] ? &scales[i] : NULL, inn[4 + i] = names[i];
        else os[3] = scaled[i] ? &scales[i] : NULL, outn[3] = names[i];
    }
    scales[4] = cgm_matrix_make(call->y_amax, CGM_DTYPE_FP32, 1, 1);
    os[4] = call->y_amax ? &scales[4] : NULL;
    outn[4] = "options.y_amax";
    os[5] = call->has_aux ? &call->aux : NULL, outn[5] = "options.aux";
    os[6] = call->has_bgrad ? &call->bgrad : NULL, outn[6] = "options.bgrad";
    bool aux_read = call->epilogue != CGM_EPILOGUE_GELU_AUX;
    cgm_status st;
    /* Not where the backend refuses m (check_max_m): descriptors of an m
     * beyond max_m (2^31 - 1 rows of small buffers, say) overlap because m
     * is that large, and the backend refuses the call before it touches
     * any of them. */
    for (int o = 0; o < NOUT && !c->m_left_to_backend; o++) {
        const char *role = o == 5 && aux_read ? "operand" : "output";
        for (int i = 0; i < NIN; i++)
            if ((st = check_disjoint(c, role, outn[o], os[o], inn[i], ins[i]))) return st;
        for (int p = o + 1; p < NOUT; p++)
            if ((st = check_disjoint(c, role, outn[o], os[o], outn[p], os[p]))) return st;
    }
    for (int i = 0; i < 4; i++)
        if ((st = cgm_check_memory(c->fn, in_names[i], in[i], call->backend, comm->cuda_device))) return st;
    for (int o = 0; o < 3; o++)
        if ((st = cgm_check_memory(c->fn, out_names[o], outs[o], call->backend, comm->cuda_device))) return st;
    for (int o = 5; o < NOUT; o++)
        if (os[o] && (st = cgm_check_memory(c->fn, outn[o], os[o], call->backend, comm->cuda_device))) return st;
    for (int i = 0; i < 4; i++)
        if (scales[i].data &&
            (st = cgm_check_pointer(c->fn, names[i], scales[i].data, call->backend, comm->cuda_device)))
            return st;
    if (call->y_amax &&
        (st = cgm_check_pointer(c->fn, "options.y_amax", call->y_amax, call->backend, comm->cuda_device)))
        return st;
    return CGM_SUCCESS;
}

cgm_status cgm_validate_op(cgm_comm *comm, cgm_op op, const cgm_matrix *x_in, const cgm_matrix *w_in,
                           const cgm_matrix *bias_in, cgm_matrix *y_in, cgm_matrix *xg_in, cgm_collective coll,
                           const cgm_matrix *send_in, cgm_matrix *recv_in, const cgm_op_options *options,
                           void *stream, cgm_call *call) {
    static const char *fns[] = {"cgm_all_gather_gemm", "cgm_gemm_reduce_scatter", "cgm_gemm_all_reduce",
                                "cgm_bulk_overlap"};
    check_ctx c = {fns[op], false};
    cgm_status st;
    cgm_partial_dtype partial = CGM_PARTIAL_DTYPE_DEFAULT;
    memset(call, 0, sizeof *call);
    /* The library's copies (cgm_matrix_take: `scaling` only for fp8). */
    const cgm_matrix *callers[] = {x_in, w_in, bias_in, y_in, xg_in, send_in, recv_in};
    cgm_matrix copies[7], *mats[7];
    for (int i = 0; i < 7; i++) {
        mats[i] = callers[i] ? &copies[i] : NULL;
        if (callers[i]) copies[i] = cgm_matrix_take(callers[i]);
    }
    const cgm_matrix *x = mats[0], *w = mats[1], *bias = mats[2], *send = mats[5];
    cgm_matrix *y = mats[3], *xg = mats[4], *recv = mats[6];
    if ((st = check_options(&c, comm, op, options, stream, call, &partial))) return st;
    bool ag = op == CGM_OP_ALL_GATHER_GEMM, bulk = op == CGM_OP_BULK;
    /* the operands' names in messages, as the public functions name them */
    const char *xn = bulk ? "a" : ag ? "x_shard" : "x", *wn = bulk ? "b" : "w";
    const char *yn = bulk ? "c" : op == CGM_OP_GEMM_REDUCE_SCATTER ? "y_shard" : "y";
    if (bulk) st = check_bulk(&c, comm, x, w, bias, y, coll, send, recv, call);
    else st = check_split_gemm(&c, comm, op, x, w, bias, y, xg, partial, call);
    if (st) return st;
    if ((st = cgm_check_fp8_amax(c.fn, call->y_amax, yn, call->has_gemm ? y : NULL))) return st;
    if ((st = cgm_check_epilogue(c.fn, yn, call))) return st;
    const cgm_matrix *in[] = {x, w, bias, bulk ? send : NULL};
    const char *in_names[] = {xn, wn, "bias", "send"};
    cgm_matrix *outs[] = {y, xg, bulk ? recv : NULL};
    const char *out_names[] = {yn, "x_gathered", "recv"};
    return check_memory(&c, comm, call, in, in_names, outs, out_names);
}
