/* One row of the table: buffers for an op and shape, the measurements
 * interleaved round by round (op, GEMM alone, collective alone, op without
 * overlap, and where the environment has cuBLASLt the peer: its collective
 * and a cuBLASLt GEMM in sequence), the check, and the reduction over
 * ranks. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { MEASURE_OP, MEASURE_GEMM, MEASURE_COMM, MEASURE_SEQ, MEASURE_PEER, MEASURE_COUNT };

typedef struct bench_tensor {
    bench_buffer buffer;
    bench_buffer scales; /* fp8: the matrix's scales (matrix.scale) */
    cgm_matrix matrix;
} bench_tensor;

/* Everything one row needs. Shapes below use: P ranks, this rank r,
 * m_r/m_off its rows, n_loc (ag_gemm, bulk) or k_loc (gemm_rs, gemm_ar) its
 * slice of the layer's n or k. */
typedef struct op_setup {
    cgm_op op;
    int64_t m, n, k;
    int64_t m_rows, m_off; /* this rank's shard of m */
    int64_t slice, slice_off; /* n_loc (AG, bulk) or k_loc (RS, AR) */
    cgm_op_options options, seq_options;
    bench_tensor x, w, y, y_seq;
    bench_tensor gemm_a, gemm_c;      /* the GEMM alone */
    bench_tensor coll_send, coll_recv, coll_mid; /* the collective alone */
    bench_tensor bulk_recv, bulk_recv_seq;       /* bulk's own collective */
    /* --epilogue: aux (shaped like y) and bgrad of the op and of its
     * no-overlap run; y's first global row and column */
    bench_tensor aux, aux_seq, bgrad, bgrad_seq;
    int64_t y_row0, y_col0;
    bench_tensor bias; /* --bias: [1, y's columns] of Y's dtype, else empty */
    /* The peer (setup_peer): measured when `peer`; its GEMM's arguments,
     * and what it writes or reads besides gemm_c: GELU_AUX's aux, the bias
     * gradient, fp8 block scales in cuBLASLt's layouts. */
    bool peer;
    bench_lt_gemm peer_gemm;
    bench_tensor peer_aux, peer_bgrad, peer_x_scales, peer_w_scales;
    /* gemm_rs and gemm_ar with an epilogue or a bias (peer_kernel): the
     * GEMM writes the partials' dtype into peer_partial, the collective
     * reduces them into peer_reduced, and the environment's epilogue
     * kernel (peer_epi) writes peer_y (and GELU_AUX's peer_aux). */
    bool peer_kernel;
    bench_tensor peer_partial, peer_reduced, peer_y;
    bench_peer_epilogue_args peer_epi;
} op_setup;

/* ------------------------------------------------------------- buffers */

/* A [rows, cols] matrix in a buffer of room_rows >= rows rows. */
static int tensor_alloc_room(bench_context *ctx, bench_tensor *t, cgm_dtype dtype,
                             int64_t rows, int64_t cols, int64_t room_rows) {
    size_t bytes = (size_t)(room_rows * cols) * cgm_dtype_size(dtype);
    if (ctx->count_only) { /* bench_row_bytes: sizes only */
        *ctx->count_only += bytes;
        return 0;
    }
    if (ctx->env->ops->buffer_alloc(ctx->env, bytes, &t->buffer)) {
        fprintf(stderr, "commgemm-bench: rank %d: cannot allocate %zu bytes for a "
                "[%" PRId64 ", %" PRId64 "] %s matrix\n", ctx->rank, bytes, rows,
                cols, cgm_dtype_name(dtype));
        return -1;
    }
    t->matrix = cgm_matrix_make(t->buffer.data, dtype, rows, cols);
    return 0;
}

static int tensor_alloc(bench_context *ctx, bench_tensor *t, cgm_dtype dtype,
                        int64_t rows, int64_t cols) {
    return tensor_alloc_room(ctx, t, dtype, rows, cols, rows);
}

static void tensor_free(bench_context *ctx, bench_tensor *t) {
    if (t->buffer.data) ctx->env->ops->buffer_free(ctx->env, &t->buffer);
    if (t->scales.data) ctx->env->ops->buffer_free(ctx->env, &t->scales);
}

/* The fp8 form of a generated [rows, cols] block (TN: never transposed):
 * codes and scales (bench_fill_fp8), both uploaded. */
static int tensor_fp8(bench_context *ctx, bench_tensor *t, int tensor, int64_t row0,
                      int64_t rows, int64_t col0, int64_t cols) {
    cgm_scaling scaling = ctx->opt->scaling;
    if (scaling != CGM_SCALING_TENSOR)
        scaling = tensor == BENCH_TENSOR_X ? CGM_SCALING_BLOCK_1X128 : CGM_SCALING_BLOCK_128X128;
    size_t bytes = (size_t)bench_fp8_scale_count(scaling, rows, cols) * sizeof(float);
    if (ctx->count_only) {
        *ctx->count_only += bytes;
        return 0;
    }
    if (ctx->env->ops->buffer_alloc(ctx->env, bytes, &t->scales)) {
        fprintf(stderr, "commgemm-bench: rank %d: cannot allocate %zu bytes of fp8 scales\n", ctx->rank, bytes);
        return -1;
    }
    bench_fill_fp8(t->buffer.host, t->scales.host, ctx->opt->scaling, ctx->opt->seed, tensor, row0, rows, col0,
                   cols);
    t->matrix.scaling = scaling;
    t->matrix.scale = t->scales.data;
    if (ctx->env->ops->upload(ctx->env, &t->scales)) return -1;
    return ctx->env->ops->upload(ctx->env, &t->buffer);
}

/* A logical [rows, cols] block of a generated tensor in `dtype`, stored
 * per layout. */
static int tensor_generated(bench_context *ctx, bench_tensor *t, cgm_dtype dtype,
                            int tensor, int64_t row0, int64_t rows, int64_t col0,
                            int64_t cols, int transposed) {
    if (tensor_alloc(ctx, t, dtype, transposed ? cols : rows, transposed ? rows : cols))
        return -1;
    if (dtype == CGM_DTYPE_FP8_E4M3) return tensor_fp8(ctx, t, tensor, row0, rows, col0, cols);
    if (ctx->count_only) return 0;
    bench_fill(t->buffer.host, dtype, ctx->opt->seed, tensor, row0, rows, col0,
               cols, transposed);
    return ctx->env->ops->upload(ctx->env, &t->buffer);
}

static int tensor_poisoned(bench_context *ctx, bench_tensor *t, cgm_dtype dtype,
                           int64_t rows, int64_t cols) {
    if (tensor_alloc(ctx, t, dtype, rows, cols)) return -1;
    if (ctx->count_only) return 0;
    bench_poison(t->buffer.host, dtype, rows * cols);
    return ctx->env->ops->upload(ctx->env, &t->buffer);
}

/* --epilogue: aux and bgrad for the op and its no-overlap run (aux of
 * DGELU holds bench_aux_value's pre-activation), set in both options. */
static int setup_epilogue(bench_context *ctx, op_setup *s, int64_t y_rows, int64_t y_cols) {
    cgm_epilogue e = ctx->opt->epilogue;
    cgm_dtype aux_dt = bench_out_dtype(ctx->opt);
    bool aux = e == CGM_EPILOGUE_GELU_AUX || e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
    bool bgrad = e == CGM_EPILOGUE_DGELU_BGRAD || e == CGM_EPILOGUE_BGRAD;
    s->options.epilogue = s->seq_options.epilogue = e;
    bench_tensor *auxes[] = {&s->aux, &s->aux_seq}, *bgrads[] = {&s->bgrad, &s->bgrad_seq};
    cgm_op_options *opts[] = {&s->options, &s->seq_options};
    for (int i = 0; i < 2; i++) {
        if (aux) {
            if (tensor_poisoned(ctx, auxes[i], aux_dt, y_rows, y_cols)) return -1;
            opts[i]->aux = &auxes[i]->matrix;
            if (e != CGM_EPILOGUE_GELU_AUX && !ctx->count_only) {
                for (int64_t r = 0; r < y_rows; r++)
                    for (int64_t c = 0; c < y_cols; c++)
                        bench_store(auxes[i]->buffer.host, aux_dt, r * y_cols + c,
                                    bench_aux_value(ctx->opt->seed, aux_dt, s->y_row0 + r, s->y_col0 + c));
                if (ctx->env->ops->upload(ctx->env, &auxes[i]->buffer)) return -1;
            }
        }
        if (bgrad) {
            if (tensor_poisoned(ctx, bgrads[i], CGM_DTYPE_FP32, 1, e == CGM_EPILOGUE_BGRAD ? y_rows : y_cols))
                return -1;
            opts[i]->bgrad = &bgrads[i]->matrix;
        }
    }
    return 0;
}

static void setup_free(bench_context *ctx, op_setup *s) {
    bench_tensor *all[] = {&s->x, &s->w, &s->y, &s->y_seq, &s->gemm_a,
                           &s->gemm_c, &s->coll_send, &s->coll_recv,
                           &s->coll_mid, &s->bulk_recv, &s->bulk_recv_seq,
                           &s->aux, &s->aux_seq, &s->bgrad, &s->bgrad_seq,
                           &s->peer_aux, &s->peer_bgrad, &s->peer_x_scales, &s->peer_w_scales,
                           &s->bias, &s->peer_partial, &s->peer_reduced, &s->peer_y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tensor_free(ctx, all[i]);
}

cgm_dtype bench_lt_bgrad_dtype(cgm_dtype out) {
    return out == CGM_DTYPE_BF16 || out == CGM_DTYPE_FP16 ? out : CGM_DTYPE_FP32;
}

/* fp8 block scales of `src` (bench_fill_fp8's layouts: X [rows][L], W
 * [ceil(rows / 128)][L]) in cuBLASLt's (bench_lt_gemm) into dst. */
static int peer_block_scales(bench_context *ctx, const bench_tensor *src, int is_x, bench_tensor *dst) {
    int64_t rows = src->matrix.rows, L = (src->matrix.cols + 127) / 128;
    int64_t groups = is_x ? rows : (rows + 127) / 128, L4 = (L + 3) / 4 * 4;
    if (tensor_alloc(ctx, dst, CGM_DTYPE_FP32, 1, is_x ? L * rows : groups * L4)) return -1;
    if (ctx->count_only) return 0;
    const float *from = src->scales.host;
    float *to = dst->buffer.host;
    memset(to, 0, dst->buffer.bytes);
    for (int64_t g = 0; g < groups; g++)
        for (int64_t b = 0; b < L; b++) to[is_x ? b * rows + g : g * L4 + b] = from[g * L + b];
    return ctx->env->ops->upload(ctx->env, &dst->buffer);
}

/* gemm_rs and gemm_ar's peer with an epilogue or a bias: the GEMM's
 * partials in the op's partial dtype (fp32, or Y's for --partials output)
 * with room for NCCL's equal shards, their reduction, and the epilogue
 * kernel's arguments (GELU_AUX writes peer_aux; DGELU reads the op's aux). */
static int setup_peer_kernel(bench_context *ctx, op_setup *s, bench_lt_gemm *g) {
    cgm_epilogue e = ctx->opt->epilogue;
    cgm_dtype out = bench_out_dtype(ctx->opt);
    cgm_dtype pd = ctx->opt->partials == CGM_PARTIAL_DTYPE_OUTPUT ? out : CGM_DTYPE_FP32;
    int rs = s->op == CGM_OP_GEMM_REDUCE_SCATTER;
    int64_t shard = cgm_shard_rows(s->m, 0, ctx->nranks), y_rows = rs ? s->m_rows : s->m;
    s->peer_kernel = true;
    g->out = pd, g->epilogue = CGM_EPILOGUE_NONE;
    if (tensor_alloc_room(ctx, &s->peer_partial, pd, s->m, s->n, shard * ctx->nranks) ||
        tensor_alloc_room(ctx, &s->peer_reduced, pd, y_rows, s->n, rs ? shard : s->m) ||
        tensor_poisoned(ctx, &s->peer_y, out, y_rows, s->n))
        return -1;
    if (e == CGM_EPILOGUE_GELU_AUX && tensor_poisoned(ctx, &s->peer_aux, out, y_rows, s->n)) return -1;
    g->y = s->peer_partial.buffer.data;
    bench_peer_epilogue_args *a = &s->peer_epi;
    a->epilogue = e, a->rows = y_rows, a->cols = s->n;
    a->r = s->peer_reduced.buffer.data, a->r_dtype = pd;
    a->bias = s->bias.buffer.data;
    a->aux = e == CGM_EPILOGUE_GELU_AUX ? s->peer_aux.buffer.data : e == CGM_EPILOGUE_DGELU ? s->aux.buffer.data : NULL;
    a->y = s->peer_y.buffer.data, a->y_dtype = out;
    return 0;
}

/* The peer: what a user writes without commgemm, on the environment's own
 * communicator and cuBLASLt. ag_gemm and bulk: the all-gather of X, then
 * the GEMM of the whole X (the one gemm_us multiplies: the gather's bytes
 * land in the comm baseline's buffer) with the op's epilogue and bias.
 * gemm_rs and gemm_ar: the GEMM into the [m, n] partial, then the
 * reduce-scatter or all-reduce; with an epilogue or a bias, which apply to
 * the reduced rows, the GEMM has none and the environment's epilogue
 * kernel follows the collective (setup_peer_kernel; DGELU_BGRAD, whose
 * bias gradient sums all ranks' rows, has no peer there). */
static int setup_peer(bench_context *ctx, op_setup *s, int gathers) {
    cgm_epilogue e = ctx->opt->epilogue;
    const bench_tensor *x = gathers ? &s->gemm_a : &s->x;
    cgm_dtype out = bench_out_dtype(ctx->opt);
    bench_lt_gemm *g = &s->peer_gemm;
    bool kernel = !gathers && (e != CGM_EPILOGUE_NONE || ctx->opt->bias);
    s->peer = ctx->env->ops->lt_gemm && ctx->opt->comm_library == 0 &&
              (gathers || (kernel ? ctx->env->ops->peer_epilogue && e != CGM_EPILOGUE_DGELU_BGRAD : true));
    /* cuBLASLt's aux takes a leading dimension of a multiple of 8: the peer
     * is left out where some rank's would not be (alike on every rank). */
    bool aux = e == CGM_EPILOGUE_GELU_AUX || e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
    for (int p = 0; gathers && aux && p < ctx->nranks; p++)
        if (cgm_shard_rows(s->n, p, ctx->nranks) % 8) s->peer = false;
    if (!s->peer) return 0;
    g->layout = ctx->opt->layout;
    g->in = ctx->opt->dtype, g->out = out;
    g->m = s->m, g->n = gathers ? s->slice : s->n, g->k = gathers ? s->k : s->slice;
    g->x = x->matrix.data, g->w = s->w.matrix.data, g->y = s->gemm_c.matrix.data;
    g->epilogue = e;
    g->bias = gathers ? s->bias.buffer.data : NULL;
    if (ctx->opt->dtype == CGM_DTYPE_FP8_E4M3) {
        g->scaling = ctx->opt->scaling;
        g->x_scale = x->scales.data, g->w_scale = s->w.scales.data;
        if (g->scaling != CGM_SCALING_TENSOR) {
            if (peer_block_scales(ctx, x, 1, &s->peer_x_scales) ||
                peer_block_scales(ctx, &s->w, 0, &s->peer_w_scales))
                return -1;
            g->x_scale = s->peer_x_scales.buffer.data, g->w_scale = s->peer_w_scales.buffer.data;
        }
    }
    if (kernel) return setup_peer_kernel(ctx, s, g);
    if (e == CGM_EPILOGUE_GELU_AUX) {
        if (tensor_alloc(ctx, &s->peer_aux, out, g->m, g->n)) return -1;
        g->aux = s->peer_aux.buffer.data;
    } else if (e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD) {
        g->aux = s->aux.buffer.data; /* read only: the op's pre-activation */
    }
    if (e == CGM_EPILOGUE_DGELU_BGRAD || e == CGM_EPILOGUE_BGRAD) {
        if (tensor_alloc(ctx, &s->peer_bgrad, bench_lt_bgrad_dtype(out), 1, e == CGM_EPILOGUE_BGRAD ? g->m : g->n))
            return -1;
        g->bgrad = s->peer_bgrad.buffer.data;
    }
    return 0;
}

/* --bias: y's columns of the layer's bias (bench_bias_value), Y's dtype. */
static int setup_bias(bench_context *ctx, op_setup *s, int64_t cols) {
    cgm_dtype out = bench_out_dtype(ctx->opt);
    if (!ctx->opt->bias) return 0;
    if (tensor_alloc(ctx, &s->bias, out, 1, cols)) return -1;
    if (ctx->count_only) return 0;
    for (int64_t j = 0; j < cols; j++)
        bench_store(s->bias.buffer.host, out, j, bench_bias_value(ctx->opt->seed, s->y_col0 + j));
    return ctx->env->ops->upload(ctx->env, &s->bias.buffer);
}

static int setup_create(bench_context *ctx, cgm_op op, int64_t m, int64_t n,
                        int64_t k, op_setup *s) {
    const bench_options *opt = ctx->opt;
    int P = ctx->nranks, r = ctx->rank;
    int x_t = opt->layout == CGM_LAYOUT_NT; /* X stored [k, m] */
    int w_t = opt->layout != CGM_LAYOUT_TN; /* W stored [k, n] */
    int gathers = op == CGM_OP_ALL_GATHER_GEMM || op == CGM_OP_BULK;
    const cgm_op_options init = CGM_OP_OPTIONS_INIT;
    memset(s, 0, sizeof *s);
    s->op = op;
    s->m = m, s->n = n, s->k = k;
    s->m_rows = cgm_shard_rows(m, r, P);
    s->m_off = cgm_shard_offset(m, r, P);
    s->slice = cgm_shard_rows(gathers ? n : k, r, P);
    s->slice_off = cgm_shard_offset(gathers ? n : k, r, P);
    s->options = init;
    s->options.layout = opt->layout;
    s->options.algo = opt->algo;
    s->options.splits = opt->splits;
    s->options.partial_dtype = opt->partials;
    /* The bulk op has no split or ring variant: the whole collective beside
     * the whole GEMM is what it measures. */
    if (op == CGM_OP_BULK && opt->algo != CGM_ALGO_NO_OVERLAP) s->options.algo = CGM_ALGO_AUTO;
    s->seq_options = s->options;
    s->seq_options.algo = CGM_ALGO_NO_OVERLAP;
    int64_t n_loc = s->slice, k_loc = s->slice;
    /* inputs, outputs, and what the collectives move: all --dtype, but for
     * fp8 (bf16 Y, and bf16 rows of the fp8 rows' bytes) */
    cgm_dtype in = opt->dtype, out = bench_out_dtype(opt), coll = bench_coll_dtype(opt);
    int64_t kc = bench_coll_cols(opt, k);
    int rc = 0;
    if (gathers) {
        /* X_r: rows [m_off, m_off + m_r) of X[m, k]; W: rows of W[n, k]. */
        rc |= tensor_generated(ctx, &s->x, in, BENCH_TENSOR_X, s->m_off, s->m_rows, 0, k, x_t);
        rc |= tensor_generated(ctx, &s->w, in, BENCH_TENSOR_W, s->slice_off, n_loc, 0, k, w_t);
        rc |= tensor_poisoned(ctx, &s->y, out, m, n_loc);
        rc |= tensor_poisoned(ctx, &s->y_seq, out, m, n_loc);
        rc |= tensor_generated(ctx, &s->gemm_a, in, BENCH_TENSOR_X, 0, m, 0, k, x_t);
        rc |= tensor_alloc(ctx, &s->gemm_c, out, m, n_loc);
        rc |= tensor_generated(ctx, &s->coll_send, coll, BENCH_TENSOR_X, s->m_off, s->m_rows, 0, kc, 0);
        rc |= tensor_alloc(ctx, &s->coll_recv, coll, m, kc);
        if (op == CGM_OP_BULK) {
            rc |= tensor_poisoned(ctx, &s->bulk_recv, coll, m, kc);
            rc |= tensor_poisoned(ctx, &s->bulk_recv_seq, coll, m, kc);
        }
        s->y_col0 = s->slice_off;
        rc |= setup_epilogue(ctx, s, m, n_loc);
        rc |= setup_bias(ctx, s, n_loc);
    } else {
        /* X: columns [k_off, k_off + k_loc) of X[m, k]; W likewise. */
        int64_t y_rows = op == CGM_OP_GEMM_REDUCE_SCATTER ? s->m_rows : m;
        rc |= tensor_generated(ctx, &s->x, in, BENCH_TENSOR_X, 0, m, s->slice_off, k_loc, x_t);
        rc |= tensor_generated(ctx, &s->w, in, BENCH_TENSOR_W, 0, n, s->slice_off, k_loc, w_t);
        rc |= tensor_poisoned(ctx, &s->y, out, y_rows, n);
        rc |= tensor_poisoned(ctx, &s->y_seq, out, y_rows, n);
        /* Room for NCCL's equal shards when m % P != 0 (bench_env.collective
         * pads the reduce-scatter to P * ceil(m / P) rows). */
        int64_t shard = cgm_shard_rows(m, 0, P);
        rc |= tensor_alloc_room(ctx, &s->gemm_c, out, m, n, shard * P);
        rc |= tensor_alloc_room(ctx, &s->coll_recv, out, s->m_rows, n, shard);
        if (op == CGM_OP_GEMM_ALL_REDUCE) rc |= tensor_alloc(ctx, &s->coll_mid, out, m, n);
        s->y_row0 = op == CGM_OP_GEMM_REDUCE_SCATTER ? s->m_off : 0;
        rc |= setup_epilogue(ctx, s, y_rows, n);
        rc |= setup_bias(ctx, s, n);
    }
    if (!rc) rc = setup_peer(ctx, s, gathers);
    return rc ? -1 : 0;
}

size_t bench_row_bytes(bench_context *ctx, cgm_op op, int64_t m, int64_t n,
                       int64_t k) {
    size_t bytes = 0;
    op_setup s;
    ctx->count_only = &bytes;
    setup_create(ctx, op, m, n, k, &s);
    ctx->count_only = NULL;
    return bytes;
}

/* ------------------------------------------------------------- calls */

static cgm_status run_op(bench_context *ctx, op_setup *s, int seq) {
    const cgm_op_options *o = seq ? &s->seq_options : &s->options;
    cgm_matrix *y = seq ? &s->y_seq.matrix : &s->y.matrix;
    const cgm_matrix *bias = s->bias.buffer.data ? &s->bias.matrix : NULL;
    void *stream = ctx->env->stream;
    switch (s->op) {
    case CGM_OP_ALL_GATHER_GEMM:
        return cgm_all_gather_gemm(ctx->comm, &s->x.matrix, &s->w.matrix, bias, y,
                                   NULL, o, stream);
    case CGM_OP_GEMM_REDUCE_SCATTER:
        return cgm_gemm_reduce_scatter(ctx->comm, &s->x.matrix, &s->w.matrix,
                                       bias, y, o, stream);
    case CGM_OP_GEMM_ALL_REDUCE:
        return cgm_gemm_all_reduce(ctx->comm, &s->x.matrix, &s->w.matrix, bias, y,
                                   o, stream);
    default:
        return cgm_bulk_overlap(ctx->comm, &s->gemm_a.matrix, &s->w.matrix, bias,
                                y, CGM_COLLECTIVE_ALL_GATHER, &s->coll_send.matrix,
                                seq ? &s->bulk_recv_seq.matrix : &s->bulk_recv.matrix,
                                o, stream);
    }
}

static cgm_status run_gemm_alone(bench_context *ctx, op_setup *s) {
    int gathers = s->op == CGM_OP_ALL_GATHER_GEMM || s->op == CGM_OP_BULK;
    const cgm_matrix *a = gathers ? &s->gemm_a.matrix : &s->x.matrix;
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.layout = s->options.layout;
    return cgm_bulk_overlap(ctx->comm, a, &s->w.matrix, NULL, &s->gemm_c.matrix,
                            CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o,
                            ctx->env->stream);
}

static cgm_status collective(bench_context *ctx, cgm_collective which,
                             const cgm_matrix *send, cgm_matrix *recv) {
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    return cgm_bulk_overlap(ctx->comm, NULL, NULL, NULL, NULL, which, send, recv,
                            &o, ctx->env->stream);
}

/* The collective the op hides: AG of X; RS of the [m, n] product; AR of
 * it. Straight on the environment's communicator when it has one (NCCL on
 * GPU: the baseline is NCCL itself, not commgemm's use of it) unless
 * --comm-baseline library, else through the library (host, or that option:
 * AR as an RS then an AG of the reduced rows). */
static cgm_status run_comm_alone(bench_context *ctx, op_setup *s) {
    bench_env *env = ctx->env;
    int gathers = s->op == CGM_OP_ALL_GATHER_GEMM || s->op == CGM_OP_BULK;
    if (env->ops->collective && !ctx->opt->comm_library) {
        int rc;
        if (gathers)
            rc = env->ops->collective(env, BENCH_COLLECTIVE_ALL_GATHER,
                                      &s->coll_send.matrix, &s->coll_recv.matrix);
        else if (s->op == CGM_OP_GEMM_REDUCE_SCATTER)
            rc = env->ops->collective(env, BENCH_COLLECTIVE_REDUCE_SCATTER,
                                      &s->gemm_c.matrix, &s->coll_recv.matrix);
        else
            rc = env->ops->collective(env, BENCH_COLLECTIVE_ALL_REDUCE,
                                      &s->gemm_c.matrix, &s->coll_mid.matrix);
        return rc ? CGM_ERROR_NCCL : CGM_SUCCESS;
    }
    switch (s->op) {
    case CGM_OP_ALL_GATHER_GEMM:
    case CGM_OP_BULK:
        return collective(ctx, CGM_COLLECTIVE_ALL_GATHER, &s->coll_send.matrix,
                          &s->coll_recv.matrix);
    case CGM_OP_GEMM_REDUCE_SCATTER:
        return collective(ctx, CGM_COLLECTIVE_REDUCE_SCATTER, &s->gemm_c.matrix,
                          &s->coll_recv.matrix);
    default: {
        cgm_status st = collective(ctx, CGM_COLLECTIVE_REDUCE_SCATTER,
                                   &s->gemm_c.matrix, &s->coll_recv.matrix);
        if (st != CGM_SUCCESS) return st;
        return collective(ctx, CGM_COLLECTIVE_ALL_GATHER, &s->coll_recv.matrix,
                          &s->coll_mid.matrix);
    }
    }
}

/* setup_peer's sequence: the collective alone (setup_peer requires the
 * environment's own), and the cuBLASLt GEMM before or after it; or the
 * GEMM, the collective of its partials and the epilogue kernel. */
static cgm_status run_peer(bench_context *ctx, op_setup *s) {
    bench_env *env = ctx->env;
    int gathers = s->op == CGM_OP_ALL_GATHER_GEMM || s->op == CGM_OP_BULK;
    if (s->peer_kernel) {
        bench_collective which = s->op == CGM_OP_GEMM_REDUCE_SCATTER ? BENCH_COLLECTIVE_REDUCE_SCATTER
                                                                     : BENCH_COLLECTIVE_ALL_REDUCE;
        if (env->ops->lt_gemm(env, &s->peer_gemm)) return CGM_ERROR_CUBLAS;
        if (env->ops->collective(env, which, &s->peer_partial.matrix, &s->peer_reduced.matrix)) return CGM_ERROR_NCCL;
        return env->ops->peer_epilogue(env, &s->peer_epi) ? CGM_ERROR_CUDA : CGM_SUCCESS;
    }
    if (!gathers && env->ops->lt_gemm(env, &s->peer_gemm)) return CGM_ERROR_CUBLAS;
    cgm_status st = run_comm_alone(ctx, s);
    if (st != CGM_SUCCESS || !gathers) return st;
    return env->ops->lt_gemm(env, &s->peer_gemm) ? CGM_ERROR_CUBLAS : CGM_SUCCESS;
}

static cgm_status run_measure(bench_context *ctx, op_setup *s, int which) {
    switch (which) {
    case MEASURE_OP: return run_op(ctx, s, 0);
    case MEASURE_GEMM: return run_gemm_alone(ctx, s);
    case MEASURE_COMM: return run_comm_alone(ctx, s);
    case MEASURE_PEER: return run_peer(ctx, s);
    default: return run_op(ctx, s, 1);
    }
}

/* ------------------------------------------------------------- sync */

int bench_context_init(bench_context *ctx) {
    const bench_env_ops *e = ctx->env->ops;
    size_t row = BENCH_SYNC_FLOATS * sizeof(float);
    if (e->buffer_alloc(ctx->env, row, &ctx->sync_send) ||
        e->buffer_alloc(ctx->env, row * (size_t)ctx->nranks, &ctx->sync_recv)) {
        fprintf(stderr, "commgemm-bench: rank %d: out of memory\n", ctx->rank);
        return -1;
    }
    return 0;
}

void bench_context_fini(bench_context *ctx) {
    if (ctx->sync_send.data) ctx->env->ops->buffer_free(ctx->env, &ctx->sync_send);
    if (ctx->sync_recv.data) ctx->env->ops->buffer_free(ctx->env, &ctx->sync_recv);
}

cgm_status bench_allgather_floats(bench_context *ctx, const float *mine,
                                  int count, float *out) {
    bench_env *env = ctx->env;
    if (count < 1 || count > BENCH_SYNC_FLOATS) return CGM_ERROR_INVALID_ARGUMENT;
    if (env->ops->allgather_floats)
        return env->ops->allgather_floats(env, mine, count, out) ? CGM_ERROR_NCCL
                                                                 : CGM_SUCCESS;
    memcpy(ctx->sync_send.host, mine, (size_t)count * sizeof(float));
    if (env->ops->upload(env, &ctx->sync_send)) return CGM_ERROR_SYSTEM;
    /* m = nranks rows: each rank owns exactly one. */
    cgm_matrix send = cgm_matrix_make(ctx->sync_send.data, CGM_DTYPE_FP32, 1, count);
    cgm_matrix recv = cgm_matrix_make(ctx->sync_recv.data, CGM_DTYPE_FP32,
                                      ctx->nranks, count);
    cgm_status st = collective(ctx, CGM_COLLECTIVE_ALL_GATHER, &send, &recv);
    if (st != CGM_SUCCESS) return st;
    if (env->ops->download(env, &ctx->sync_recv)) return CGM_ERROR_SYSTEM;
    if (out) memcpy(out, ctx->sync_recv.host, (size_t)(ctx->nranks * count) * sizeof(float));
    return CGM_SUCCESS;
}

cgm_status bench_barrier(bench_context *ctx) {
    float one = 1.0f;
    return bench_allgather_floats(ctx, &one, 1, NULL);
}

/* ------------------------------------------------------------- the row */

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int count) {
    qsort(values, (size_t)count, sizeof *values, compare_double);
    return count % 2 ? values[count / 2]
                     : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

/* The output of gemm_rs's and gemm_ar's peer with its epilogue kernel
 * (and GELU_AUX's aux), checked as the op's: the partials it reduced were
 * rounded to Y's dtype with --partials output (NCCL sums them in it). */
static int64_t check_peer(bench_context *ctx, op_setup *s) {
    bench_env *env = ctx->env;
    cgm_dtype dt = bench_out_dtype(ctx->opt);
    if (!s->peer || !s->peer_kernel) return 0;
    if (env->ops->download(env, &s->peer_y.buffer) ||
        (s->peer_aux.buffer.data && env->ops->download(env, &s->peer_aux.buffer)))
        return 1;
    if (ctx->rank == 0 && s->peer_y.matrix.rows * s->peer_y.matrix.cols > 0 && ctx->opt->inject_wrong_value)
        bench_store(s->peer_y.buffer.host, dt, 0, 1e6);
    const bench_tensor *aux = ctx->opt->epilogue == CGM_EPILOGUE_GELU_AUX ? &s->peer_aux : &s->aux;
    bench_epilogue_check epi = {ctx->opt->epilogue, aux->buffer.host, dt, ctx->opt->bias};
    int rounded = s->peer_epi.r_dtype == dt && (dt == CGM_DTYPE_BF16 || dt == CGM_DTYPE_FP16) ? ctx->nranks : 0;
    char what[96];
    snprintf(what, sizeof what, "rank %d %s peer output", ctx->rank, cgm_op_name(s->op));
    return bench_check_gemm(s->peer_y.buffer.host, dt, ctx->opt->seed, s->y_row0, s->peer_y.matrix.rows, 0, s->n,
                            s->k, rounded, &epi, what);
}

static int64_t check_outputs(bench_context *ctx, op_setup *s) {
    bench_env *env = ctx->env;
    cgm_dtype dt = bench_out_dtype(ctx->opt);
    uint64_t seed = ctx->opt->seed;
    int64_t wrong = 0;
    char what[96];
    for (int seq = 0; seq < 2; seq++) {
        bench_tensor *y = seq ? &s->y_seq : &s->y;
        const char *name = seq ? "no_overlap" : cgm_algo_name(s->options.algo);
        if (env->ops->download(env, &y->buffer)) return 1;
        if (!seq && ctx->rank == 0 && y->matrix.rows * y->matrix.cols > 0 &&
            ctx->opt->inject_wrong_value)
            bench_store(y->buffer.host, dt, 0, 1e6);
        snprintf(what, sizeof what, "rank %d %s %s output", ctx->rank,
                 cgm_op_name(s->op), name);
        /* GPU backends ship RS/AR partials in the output dtype when asked
         * (the host backend keeps fp32; allowing for it there too only
         * widens its tolerance). */
        int rounded = ctx->opt->partials == CGM_PARTIAL_DTYPE_OUTPUT &&
                              (dt == CGM_DTYPE_BF16 || dt == CGM_DTYPE_FP16)
                          ? ctx->nranks
                          : 0;
        /* ag_gemm, bulk: all m rows, this rank's columns; gemm_rs: this
         * rank's rows; gemm_ar: all of them */
        bool gathers = s->op == CGM_OP_ALL_GATHER_GEMM || s->op == CGM_OP_BULK;
        int64_t rows = s->op == CGM_OP_GEMM_REDUCE_SCATTER ? s->m_rows : s->m;
        int64_t cols = gathers ? s->slice : s->n;
        bench_tensor *aux = seq ? &s->aux_seq : &s->aux, *bgrad = seq ? &s->bgrad_seq : &s->bgrad;
        bench_epilogue_check epi = {ctx->opt->epilogue, aux->buffer.host, dt, ctx->opt->bias};
        if (aux->buffer.data && env->ops->download(env, &aux->buffer)) return 1;
        wrong += bench_check_gemm(y->buffer.host, dt, seed, s->y_row0, rows, s->y_col0, cols, s->k,
                                  gathers ? 0 : rounded, &epi, what);
        if (bgrad->buffer.data) {
            if (env->ops->download(env, &bgrad->buffer)) return 1;
            snprintf(what, sizeof what, "rank %d %s %s bgrad", ctx->rank, cgm_op_name(s->op), name);
            wrong += bench_check_bgrad(bgrad->buffer.host, ctx->opt->epilogue, seed, dt, s->m, s->y_col0, cols,
                                       s->k, what);
        }
        if (s->op == CGM_OP_BULK) {
            bench_tensor *recv = seq ? &s->bulk_recv_seq : &s->bulk_recv;
            if (env->ops->download(env, &recv->buffer)) return 1;
            snprintf(what, sizeof what, "rank %d bulk %s all-gather", ctx->rank, name);
            wrong += bench_check_copy(recv->buffer.host, bench_coll_dtype(ctx->opt), seed,
                                      BENCH_TENSOR_X, s->m, bench_coll_cols(ctx->opt, s->k), what);
        }
    }
    return wrong + check_peer(ctx, s);
}

/* Captures each measurement into graphs[which]. A measurement that fails
 * to capture on any rank is timed eagerly on every rank (a note on
 * stderr), so that all ranks replay the same set; *mask gets the replayed
 * ones. Returns 0, or -1 when the exchange itself failed. */
static int capture_measurements(bench_context *ctx, op_setup *s, void **graphs,
                                unsigned *mask) {
    bench_env *env = ctx->env;
    float ok[MEASURE_COUNT];
    float *all = calloc((size_t)(ctx->nranks * MEASURE_COUNT), sizeof *all);
    if (!all) return -1;
    for (int which = 0; which < MEASURE_COUNT; which++) {
        ok[which] = 0;
        if ((which == MEASURE_PEER && !s->peer) || env->ops->capture_begin(env)) continue;
        cgm_status st = run_measure(ctx, s, which);
        if (st != CGM_SUCCESS)
            fprintf(stderr, "commgemm-bench: rank %d: %s: capturing measurement %d "
                    "failed (%s: %s); timing it eagerly\n", ctx->rank,
                    cgm_op_name(s->op), which, cgm_status_string(st), cgm_last_error());
        void *g = NULL;
        if (env->ops->capture_end(env, &g) == 0 && st == CGM_SUCCESS) {
            graphs[which] = g;
            ok[which] = 1;
        } else if (g) {
            env->ops->graph_destroy(env, g);
        }
    }
    if (bench_allgather_floats(ctx, ok, MEASURE_COUNT, all) != CGM_SUCCESS) {
        free(all);
        return -1;
    }
    *mask = 0;
    for (int which = 0; which < MEASURE_COUNT; which++) {
        int everywhere = 1;
        for (int p = 0; p < ctx->nranks; p++)
            everywhere &= all[p * MEASURE_COUNT + which] != 0;
        if (everywhere) {
            *mask |= 1u << which;
        } else if (graphs[which]) {
            env->ops->graph_destroy(env, graphs[which]);
            graphs[which] = NULL;
        }
    }
    free(all);
    return 0;
}

/* Per-rank results, exchanged as floats: times (max over ranks) and the
 * wrong count in two 16-bit digits (summed exactly in fp32). */
enum { STAT_TIME = 0, STAT_WRONG_LO = MEASURE_COUNT, STAT_WRONG_HI, STAT_COUNT };

int bench_run_row(bench_context *ctx, cgm_op op, int64_t m, int64_t n,
                  int64_t k, bench_row *row) {
    const bench_options *opt = ctx->opt;
    bench_env *env = ctx->env;
    op_setup s;
    void *graphs[MEASURE_COUNT] = {NULL};
    int rc = -1, rounds = opt->warmup + opt->iters;
    double *times = calloc((size_t)(MEASURE_COUNT * opt->iters), sizeof *times);
    float *all = calloc((size_t)(ctx->nranks * STAT_COUNT), sizeof *all);
    memset(row, 0, sizeof *row);
    row->peer_us = NAN;
    row->op = op, row->m = m, row->n = n, row->k = k;
    row->dtype = opt->dtype;
    if (setup_create(ctx, op, m, n, k, &s) || !times || !all) goto done;
    row->algo = s.options.algo;
    if (cgm_comm_backend(ctx->comm, op, &row->backend) != CGM_SUCCESS)
        row->backend = CGM_BACKEND_DEFAULT;
    for (int round = 0; round < rounds; round++) {
        /* --graph: after the warm-up (the eager calls that make plans and
         * workspaces), capture each measurement once; its replays are
         * timed from then on. */
        if (round == opt->warmup && opt->graph && env->ops->capture_begin &&
            capture_measurements(ctx, &s, graphs, &row->graph_mask))
            goto done;
        for (int which = 0; which < MEASURE_COUNT; which++) {
            if (which == MEASURE_PEER && !s.peer) continue; /* alike on every rank */
            cgm_status st = bench_barrier(ctx);
            if (st == CGM_SUCCESS) {
                env->ops->timer_start(env);
                if (graphs[which])
                    st = env->ops->graph_launch(env, graphs[which]) ? CGM_ERROR_CUDA
                                                                    : CGM_SUCCESS;
                else
                    st = run_measure(ctx, &s, which);
            }
            double us = env->ops->timer_stop_us(env);
            if (st == CGM_ERROR_NOT_SUPPORTED && which == MEASURE_OP && ctx->opt->epilogue) {
                /* every rank's backend refuses alike (its check is local) */
                if (ctx->rank == 0)
                    fprintf(stderr, "commgemm-bench: %s m=%" PRId64 " n=%" PRId64 " k=%" PRId64
                            ": skipped on the %s backend: %s\n", cgm_op_name(op), m, n, k,
                            cgm_backend_name(row->backend), cgm_last_error());
                row->skipped = 1;
                rc = 0;
                goto done;
            }
            if (st != CGM_SUCCESS) {
                static const char *names[] = {"the op", "the GEMM alone", "the collective alone",
                                              "the op without overlap", "the peer (collective and cuBLASLt)"};
                fprintf(stderr, "commgemm-bench: rank %d: %s m=%" PRId64 " n=%" PRId64
                        " k=%" PRId64 ": %s failed: %s: %s\n", ctx->rank,
                        cgm_op_name(op), m, n, k, names[which],
                        cgm_status_string(st), cgm_last_error());
                row->failed = 1;
                goto done;
            }
            if (round >= opt->warmup) times[which * opt->iters + round - opt->warmup] = us;
        }
    }
    int64_t wrong = opt->check ? check_outputs(ctx, &s) : 0;
    float mine[STAT_COUNT];
    for (int which = 0; which < MEASURE_COUNT; which++)
        mine[STAT_TIME + which] = (float)median(times + which * opt->iters, opt->iters);
    mine[STAT_WRONG_LO] = (float)(wrong & 0xffff);
    mine[STAT_WRONG_HI] = (float)((wrong >> 16) & 0xffff);
    cgm_status st = bench_allgather_floats(ctx, mine, STAT_COUNT, all);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "commgemm-bench: rank %d: exchanging results failed: %s: %s\n",
                ctx->rank, cgm_status_string(st), cgm_last_error());
        row->failed = 1;
        goto done;
    }
    double worst[MEASURE_COUNT] = {0};
    for (int p = 0; p < ctx->nranks; p++) {
        const float *theirs = all + p * STAT_COUNT;
        for (int which = 0; which < MEASURE_COUNT; which++)
            worst[which] = fmax(worst[which], theirs[STAT_TIME + which]);
        row->wrong += (int64_t)theirs[STAT_WRONG_LO] + ((int64_t)theirs[STAT_WRONG_HI] << 16);
    }
    row->time_us = worst[MEASURE_OP];
    row->gemm_us = worst[MEASURE_GEMM];
    row->comm_us = worst[MEASURE_COMM];
    row->seq_us = worst[MEASURE_SEQ];
    row->peer_us = s.peer ? worst[MEASURE_PEER] : NAN;
    row->ideal_us = fmax(row->gemm_us, row->comm_us);
    row->ratio = row->ideal_us > 0 ? row->time_us / row->ideal_us : 0;
    row->tflops = row->time_us > 0 ? 2.0 * (double)m * (double)n * (double)k /
                                         row->time_us * 1e-6
                                   : 0;
    rc = 0;
done:
    for (int which = 0; which < MEASURE_COUNT; which++)
        if (graphs[which]) env->ops->graph_destroy(env, graphs[which]);
    setup_free(ctx, &s);
    free(times);
    free(all);
    return rc;
}
