/* commgemm-bench internals: options, the bench_env interface (where buffers
 * live and how time is measured), data generation and checking, per-op
 * measurement and reporting. Uses only the public commgemm API. */
#ifndef COMMGEMM_BENCH_H
#define COMMGEMM_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "commgemm.h"

#ifdef __cplusplus
extern "C" { /* bench_peer_epilogue.cu defines bench_peer_epilogue */
#endif

#define BENCH_MAX_SIZES 64
/* Shapes one --shapes list may name. */
#define BENCH_MAX_SHAPES 64

/* ------------------------------------------------------------- options */

/* start, start * factor, ... up to end (a single value: start == end). */
typedef struct bench_range {
    int64_t start, end, factor;
} bench_range;

typedef struct bench_options {
    unsigned op_mask;   /* bit per cgm_op */
    bench_range m, n, k;
    /* --shapes: explicit (m, n, k) triples, run instead of the m x n x k
     * sweep when nshapes > 0. */
    int nshapes;
    int64_t shapes[BENCH_MAX_SHAPES][3];
    /* The inputs' dtype; --dtype fp8 is CGM_DTYPE_FP8_E4M3 (bench_out_dtype
     * and bench_coll_dtype say what the outputs and collectives are). */
    cgm_dtype dtype;
    /* --dtype fp8: CGM_SCALING_TENSOR, or CGM_SCALING_BLOCK_1X128 (X with
     * W in 128 x 128 blocks); CGM_SCALING_NONE otherwise. */
    cgm_scaling scaling;
    cgm_backend backend; /* CGM_BACKEND_DEFAULT: not given (env, then auto) */
    cgm_algo algo;
    int splits;
    cgm_layout layout;
    /* --partials: gemm_rs/gemm_ar's options.partial_dtype; DEFAULT until
     * run_rank resolves it to the comm's. */
    cgm_partial_dtype partials;
    /* --epilogue: every op's options.epilogue (BGRAD: --op bulk only). */
    cgm_epilogue epilogue;
    /* --bias: every op gets a bias (bench_bias_value; not with DGELU,
     * DGELU_BGRAD or BGRAD, which take none). */
    int bias;
    int warmup, iters;
    int check;
    int graph; /* --graph: time CUDA-graph replays where the env can */
    /* --comm-baseline library: comm_us through commgemm's collective on the
     * chosen backend instead of the environment's own (NCCL on GPUs). */
    int comm_library;
    const char *json_path; /* NULL: no JSON */
    uint64_t seed;
    int ranks;          /* 0: not given; BENCH_RANKS_AUTO: --ranks auto */
    int64_t timeout_ms; /* CGM_UNSET: the library's default */
    /* --inject-wrong-value: rank 0 corrupts one output value before the
     * check, so that a test can see a wrong value counted and failing. */
    int inject_wrong_value;
} bench_options;

#define BENCH_RANKS_AUTO (-1)

/* --dtype fp8: e4m3 X and W (with their scales), bf16 Y; the collectives
 * it is compared with move bf16 rows of the same bytes (half the columns:
 * bench_coll_cols). Otherwise all three are --dtype. */
cgm_dtype bench_out_dtype(const bench_options *opt);
cgm_dtype bench_coll_dtype(const bench_options *opt);
int64_t bench_coll_cols(const bench_options *opt, int64_t k);

/* Parses argv into *opt. Returns 0 to run, 1 when --help was printed, -1
 * after printing what is wrong to stderr. */
int bench_parse_options(int argc, char **argv, bench_options *opt);
/* The values of a range (at most BENCH_MAX_SIZES); returns the count. */
int bench_range_values(const bench_range *range, int64_t *values);
void bench_print_options(FILE *to, const bench_options *opt);
void bench_json_options(FILE *to, const bench_options *opt);
/* The shapes of the run, in order: the --shapes list, or the m x n x k
 * sweep (m outermost). *out is malloc'd (free it); returns the count, or -1
 * when out of memory. Every op of --op runs every shape. */
typedef struct bench_shape {
    int64_t m, n, k;
} bench_shape;
int64_t bench_run_shapes(const bench_options *opt, bench_shape **out);
/* The largest m, n and k any row of the run uses. */
void bench_largest_shape(const bench_options *opt, int64_t *m, int64_t *n,
                         int64_t *k);

/* ------------------------------------------------------------ bench_env */

struct bench_lt_gemm;
struct bench_peer_epilogue_args;

/* Where buffers live and how time is measured. Two environments fill this
 * table: host (host memory, a LOCAL bootstrap, the wall clock; bench_env.c)
 * and gpu (cudaMalloc'd buffers with host staging, an NCCL comm from a
 * unique id shared through a file named after the launcher's rendezvous,
 * CUDA events on the bench's stream; bench_env_gpu.c, CUDA builds only). */
typedef struct bench_buffer {
    void *data;   /* what the ops get (device memory on a GPU env) */
    void *host;   /* host view: == data on the host env, a staging copy else */
    size_t bytes;
} bench_buffer;

/* The collective an op hides, run alone (rows split with cgm_shard_rows):
 *   ALL_GATHER:     send [m_r, c] -> recv [m, c]
 *   REDUCE_SCATTER: send [m, c]   -> recv [m_r, c] (sum)
 *   ALL_REDUCE:     send [m, c]   -> recv [m, c]   (sum)
 * For REDUCE_SCATTER the buffers have room for P * ceil(m / P) and
 * ceil(m / P) rows, so that an environment may pad to equal shards. */
typedef enum bench_collective {
    BENCH_COLLECTIVE_ALL_GATHER = 0,
    BENCH_COLLECTIVE_REDUCE_SCATTER = 1,
    BENCH_COLLECTIVE_ALL_REDUCE = 2
} bench_collective;

typedef struct bench_env bench_env;
typedef struct bench_env_ops {
    const char *name;
    /* Creates the comm for this rank from the launcher's bootstrap. */
    cgm_status (*comm_create)(bench_env *env, const cgm_bootstrap *bootstrap,
                              const cgm_config *config, cgm_comm **comm);
    int (*buffer_alloc)(bench_env *env, size_t bytes, bench_buffer *out);
    void (*buffer_free)(bench_env *env, bench_buffer *buffer);
    /* host -> data and data -> host (no-ops when they are the same). */
    int (*upload)(bench_env *env, bench_buffer *buffer);
    int (*download)(bench_env *env, bench_buffer *buffer);
    /* Timing of work enqueued on env->stream: start, then stop returns the
     * elapsed microseconds once the work is complete. */
    void (*timer_start)(bench_env *env);
    double (*timer_stop_us)(bench_env *env);
    /* Optional (NULL: the library's collective-only cgm_bulk_overlap, with
     * ALL_REDUCE as a reduce-scatter then an all-gather): the collective
     * alone, straight on the environment's own communicator (NCCL on GPU),
     * enqueued on env->stream. Returns 0, or -1 after printing why. */
    int (*collective)(bench_env *env, bench_collective which,
                      const cgm_matrix *send, cgm_matrix *recv);
    /* Optional (NULL: through the library): all-gathers `count` floats
     * (<= BENCH_SYNC_FLOATS) from every rank into out (nranks * count, rank
     * major; out may be NULL); returns once every rank has contributed, so
     * it is also a barrier. Returns 0, or -1 after printing why. */
    int (*allgather_floats)(bench_env *env, const float *mine, int count,
                            float *out);
    void (*destroy)(bench_env *env);
    /* Optional (NULL: the environment cannot capture, --graph times eager
     * calls): capture of work enqueued on env->stream into an executable
     * graph (begin, then end returns it), its replay on env->stream, its
     * destruction. begin/end/launch return 0, or -1 after printing why. */
    int (*capture_begin)(bench_env *env);
    int (*capture_end)(bench_env *env, void **graph);
    int (*graph_launch)(bench_env *env, void *graph);
    void (*graph_destroy)(bench_env *env, void *graph);
    /* Optional (NULL: no device memory): free and total bytes of this
     * rank's device (cudaMemGetInfo), once the comm exists. Returns 0, or
     * -1 after printing why. */
    int (*device_memory)(bench_env *env, size_t *free_bytes, size_t *total_bytes);
    /* Optional (NULL: no peer_us column): one GEMM straight through
     * cuBLASLt on env->stream (bench_peer_gpu.c), the peer's GEMM. Returns
     * 0, or -1 after printing why. */
    int (*lt_gemm)(bench_env *env, const struct bench_lt_gemm *g);
    /* Optional (NULL: no peer for gemm_rs and gemm_ar with an epilogue or
     * a bias): the peer's elementwise pass after the collective
     * (bench_peer_epilogue) on env->stream. Returns 0, or -1 after
     * printing why. */
    int (*peer_epilogue)(bench_env *env, const struct bench_peer_epilogue_args *a);
} bench_env_ops;

/* The peer's GEMM, row-major Y[m, n] = op(X) op(W)^T in commgemm.h's
 * layouts (x, w stored as the layout says; y [m, n]). fp8 (in e4m3, out
 * bf16, TN): x_scale and w_scale in cuBLASLt's layouts: one float each for
 * TENSOR; BLOCK (X 1x128, W 128x128, L = ceil(k / 128), L4 = L rounded up
 * to 4): x_scale [L][m], w_scale [ceil(n / 128)][L4]. The epilogue as the
 * op's options take it; aux [m, n] of out; bgrad of bench_lt_bgrad_dtype
 * (n values; BGRAD: m). */
typedef struct bench_lt_gemm {
    cgm_layout layout;
    cgm_dtype in, out;
    int64_t m, n, k;
    const void *x, *w;
    void *y;
    cgm_scaling scaling;
    const float *x_scale, *w_scale;
    cgm_epilogue epilogue;
    void *aux, *bgrad;
    /* NULL, or [n] of out: cuBLASLt's BIAS, GELU_BIAS or GELU_AUX_BIAS */
    const void *bias;
} bench_lt_gemm;

/* The peer's epilogue of gemm_rs and gemm_ar: one elementwise pass over
 * the reduced rows after the collective, fp32 math, each output rounded
 * once (commgemm.h "Epilogues", the tanh GELU of src/device/epilogue.cuh):
 *   t = r[i, j] + bias[j] (0 without a bias)
 *   NONE: y = t;  GELU: y = gelu(t);  GELU_AUX: y = gelu(t), aux = t;
 *   DGELU: y = r * gelu'(aux) (no bias)
 * r [rows, cols] (fp32, bf16 or fp16: the partials' dtype), y, aux
 * [rows, cols] and bias [cols] of y_dtype (bf16, fp16 or fp32). */
typedef struct bench_peer_epilogue_args {
    cgm_epilogue epilogue;
    int64_t rows, cols;
    const void *r;
    cgm_dtype r_dtype;
    const void *bias;
    void *aux;
    void *y;
    cgm_dtype y_dtype;
} bench_peer_epilogue_args;

/* cuBLASLt's bias-gradient dtype for an output of `out`: out where it is
 * bf16 or fp16 (no fp32 bias gradient with a 16-bit D), else fp32. */
cgm_dtype bench_lt_bgrad_dtype(cgm_dtype out);

struct bench_env {
    const bench_env_ops *ops;
    void *stream; /* what ops get as their stream: NULL on host */
    double t0;    /* host timer */
    void *impl;   /* GPU env state */
    int default_ranks; /* ranks started without a launcher (0: -n auto's rule) */
    int device;        /* this rank's CUDA device once the comm exists, else -1 */
};

/* The environment for a backend choice (CGM_BACKEND_DEFAULT: the
 * COMMGEMM_BACKEND variable, else auto): host for host, gpu for p2p, nccl
 * and cublasmp, and for auto gpu when a CUDA device is visible, else host.
 * Returns NULL with a message on stderr for a backend this build or this
 * machine cannot drive (no CUDA in the build, no visible GPU). */
bench_env *bench_env_create(cgm_backend backend);

#ifdef COMMGEMM_BENCH_HAVE_CUDA
/* bench_env_gpu.c: CUDA devices visible to this process (0 when none, with
 * the reason in why), and the GPU environment. */
int bench_gpu_count(char *why, size_t why_size);
bench_env *bench_env_gpu_create(void);
/* bench_peer_gpu.c: the lt_gemm of the GPU environment; *lt is made on the
 * first call (a cuBLASLt handle, a workspace, the plans of each argument
 * set) and freed with bench_peer_lt_destroy. */
typedef struct bench_peer_lt bench_peer_lt;
int bench_peer_lt_gemm(bench_peer_lt **lt, const bench_lt_gemm *g, void *stream);
void bench_peer_lt_destroy(bench_peer_lt *lt);
/* bench_peer_epilogue.cu: the peer's epilogue kernel, enqueued on
 * `stream`. Returns 0, or -1 after printing why (a dtype it has no kernel
 * for, a launch error). */
int bench_peer_epilogue(const bench_peer_epilogue_args *a, void *stream);
#endif

/* ---------------------------------------------------------------- data */

/* Logical tensors whose elements are generated from (seed, tensor, row,
 * column): every rank can produce any element of any rank's shard. */
enum { BENCH_TENSOR_X = 1, BENCH_TENSOR_W = 2, BENCH_TENSOR_MISC = 3, BENCH_TENSOR_BIAS = 4 };

/* A multiple of 1/8 in [-1, 1]: exact in bf16 and fp16, so that fp32 sums
 * of products are exact for any k that matters. */
double bench_value(uint64_t seed, int tensor, int64_t row, int64_t col);
/* Element i of a buffer of dtype (fp32/bf16/fp16) as double, and back. */
double bench_load(const void *data, cgm_dtype dtype, int64_t i);
void bench_store(void *data, cgm_dtype dtype, int64_t i, double v);
/* Fills host storage of a logical [rows, cols] block starting at (row0,
 * col0) of `tensor`; stored transposed ([cols, rows]) when `transposed`. */
void bench_fill(void *host, cgm_dtype dtype, uint64_t seed, int tensor,
                int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                int transposed);
/* The fp8 (e4m3) form of such a block for the recipe `scaling` of X
 * (tensor == BENCH_TENSOR_X: TENSOR or BLOCK_1X128) or W (TENSOR or
 * BLOCK_128X128), row-major [rows, cols] (TN): scales (powers of two, so
 * every code is exact and dequantizes to the generated value) into
 * `scales`, whose count bench_fp8_scale_count gives. */
int64_t bench_fp8_scale_count(cgm_scaling scaling, int64_t rows, int64_t cols);
void bench_fill_fp8(void *host, float *scales, cgm_scaling scaling, uint64_t seed,
                    int tensor, int64_t row0, int64_t rows, int64_t col0,
                    int64_t cols);
/* NaN everywhere, so that elements an op never wrote count as wrong. */
void bench_poison(void *host, cgm_dtype dtype, int64_t count);

/* The reference for Y[i, j] = sum_l X(i, l) W(j, l) over the full k, with X
 * and W the logical generated tensors. Checks `y` (host, rows [0, rows) of
 * ld n_cols holding global rows row0.. and global columns col0..) on a
 * sample of rows and columns bounded by a work budget. Returns the number
 * of elements outside tolerance (printing the first few). */
/* The epilogue of the checked output: NONE (or BGRAD: Y = r), GELU,
 * GELU_AUX (`aux`, host, [rows, n_cols]: what the op wrote, checked
 * against r), DGELU, DGELU_BGRAD (aux from bench_aux_value): Y = gelu(r)
 * or r * gelu'(aux), in double (the bench's own formulas). */
typedef struct bench_epilogue_check {
    cgm_epilogue epilogue;
    const void *aux;
    cgm_dtype aux_dtype;
    int bias; /* --bias: r + bench_bias_value(column) before the epilogue */
} bench_epilogue_check;
int64_t bench_check_gemm(const void *y, cgm_dtype dtype, uint64_t seed,
                         int64_t row0, int64_t rows, int64_t col0,
                         int64_t n_cols, int64_t k, int rounded_partials,
                         const bench_epilogue_check *epi, const char *what);
/* --bias: the bias of the layer's output column `col` (a generated value,
 * exact in every dtype the bench uses). */
double bench_bias_value(uint64_t seed, int64_t col);
/* DGELU's pre-activation at global (row, col): in [-2.5, 2.5], as stored
 * in `dtype`. */
double bench_aux_value(uint64_t seed, cgm_dtype dtype, int64_t row, int64_t col);
/* The bias gradient of an op with DGELU_BGRAD (`bgrad`, fp32, host: the
 * column sums over all m rows of r * gelu'(aux), columns col0..) or of
 * bulk's BGRAD (rows = m sums of X's rows over k), on sampled entries. */
int64_t bench_check_bgrad(const float *bgrad, cgm_epilogue epilogue, uint64_t seed, cgm_dtype aux_dtype,
                          int64_t m, int64_t col0, int64_t n_cols, int64_t k, const char *what);
/* Checks a gathered copy of a generated tensor (exact). */
int64_t bench_check_copy(const void *y, cgm_dtype dtype, uint64_t seed,
                         int tensor, int64_t rows, int64_t cols,
                         const char *what);

/* ------------------------------------------------------------ measuring */

typedef struct bench_row {
    cgm_op op;
    int64_t m, n, k;
    cgm_dtype dtype;
    cgm_backend backend;
    cgm_algo algo;
    /* Over ranks: the slowest rank's median. */
    double time_us, gemm_us, comm_us, seq_us;
    /* The peer: the environment's own collective and a cuBLASLt GEMM in
     * sequence (bench_ops.c says which); NAN where not measured (no
     * cuBLASLt; gemm_rs and gemm_ar with DGELU_BGRAD). */
    double peer_us;
    double ideal_us, ratio, tflops;
    int64_t wrong;
    int failed; /* an op returned an error on some rank */
    /* The backend refused the call (CGM_ERROR_NOT_SUPPORTED, e.g. an
     * epilogue on a GPU backend): reported as skipped, not as an error. */
    int skipped;
    /* --graph: bit per measurement (op, gemm, comm, seq) timed as a graph
     * replay on every rank; the others were timed eagerly. */
    unsigned graph_mask;
} bench_row;

/* Floats one rank contributes to bench_allgather_floats at most. */
#define BENCH_SYNC_FLOATS 64

typedef struct bench_context {
    const bench_options *opt;
    bench_env *env;
    cgm_comm *comm;
    int rank, nranks;
    bench_buffer sync_send, sync_recv; /* [1, 64] and [nranks, 64] fp32 */
    /* Host environment: this machine's cores and a rank's busy threads
     * (tools/launch.h, launch_cpu_budget); 0 on the GPU environment. */
    int cores, threads_per_rank, blas_threads;
    /* Set while bench_row_bytes sizes a row: buffers are counted here, not
     * allocated. */
    size_t *count_only;
    char memory_note[320]; /* bench_check_memory's estimate, for the header */
} bench_context;

/* Allocates the context's small buffers (after comm, env, rank, nranks). */
int bench_context_init(bench_context *ctx);
void bench_context_fini(bench_context *ctx);

/* Bytes of the buffers this rank allocates for one row (as bench_run_row
 * does, without allocating them). */
size_t bench_row_bytes(bench_context *ctx, cgm_op op, int64_t m, int64_t n,
                       int64_t k);
/* Before the first row: estimates the memory the run needs per rank (its
 * largest row's buffers, the library's workspaces touched for it; device
 * memory on GPUs) against what each machine and device has, agreed by
 * every rank. Returns 0 when it fits; 1 when it does not (rank 0 printed
 * what it needs, what is available and what to pass instead); -1 when the
 * exchange failed (printed). Fills ctx->memory_note for the header. */
int bench_check_memory(bench_context *ctx);

/* Runs one row (collective: every rank calls it with the same arguments).
 * Returns 0, or -1 when this rank hit an error (printed) that leaves the
 * comm unusable. */
int bench_run_row(bench_context *ctx, cgm_op op, int64_t m, int64_t n,
                  int64_t k, bench_row *row);
/* All-gathers `count` floats from every rank (collective-only bulk call):
 * out receives nranks * count values, rank major. Also a barrier. */
cgm_status bench_allgather_floats(bench_context *ctx, const float *mine,
                                  int count, float *out);
cgm_status bench_barrier(bench_context *ctx);

/* ------------------------------------------------------------ reporting */

/* The vs_seq column's mark (and JSON "slower_than_seq": true) of a row whose
 * op took longer than the same op with no_overlap: time_us > seq_us. */
#define BENCH_SLOWER_MARK "SLOWER"
int bench_row_slower(const bench_row *row);
/* The vs_peer column: time_us / peer_us (< 1: commgemm beats the
 * sequence); NAN without a peer. */
double bench_row_vs_peer(const bench_row *row);
/* Host environment: more busy threads (ranks x threads per rank) than
 * cores; the header then warns and the JSON says "oversubscribed". */
int bench_oversubscribed(const bench_context *ctx);

void bench_print_header(FILE *to, const bench_context *ctx, const char *rank_map);
void bench_print_table_head(FILE *to);
void bench_print_row(FILE *to, const bench_row *row);
void bench_print_footer(FILE *to, const bench_row *rows, int count, int errors);
int bench_write_json(const char *path, const bench_context *ctx,
                     const bench_row *rows, int count, int errors);

#ifdef __cplusplus
}
#endif

#endif
