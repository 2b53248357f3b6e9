/*
 * commgemm: tensor-parallel communication overlapped with the GEMMs around it.
 *
 * One C11 header. Every function returns a cgm_status; outputs come last.
 * On failure, cgm_last_error() returns a message (kept per thread) that says
 * what was expected, what was found and what to do.
 *
 * Conventions used throughout
 * ---------------------------
 * - Matrices are row-major (PyTorch convention). A matrix of `rows` x `cols`
 *   has element (i, j) at data[i * ld + j]; ld >= cols.
 * - P ranks form the group; this rank is r. Rows of the output are split over
 *   ranks with the ceil split  m_r = cgm_shard_rows(m, r, P): every shard
 *   holds ceil(m / P) rows except the last non-empty one, which holds the
 *   remainder; shards past the end hold 0 rows. m need not divide by P, m may
 *   be smaller than P (then some shards are empty), P need not be a power of 2.
 * - k is always the contraction dimension, n the output columns. The layout
 *   says how X and W are stored (TransformerEngine's naming):
 *       CGM_LAYOUT_TN: Y[m,n] = X[m,k]   . W[n,k]^T   (fprop of nn.Linear)
 *       CGM_LAYOUT_NN: Y[m,n] = X[m,k]   . W[k,n]     (dgrad)
 *       CGM_LAYOUT_NT: Y[m,n] = X[k,m]^T . W[k,n]     (wgrad)
 *   Whatever the layout, the split dimension of the collective is m (the
 *   output's rows): with NT the shard X_r is stored [k, m_r].
 * - Reductions across ranks accumulate in fp32 whatever the input dtype;
 *   what the partials are rounded to before they travel, and how a GEMM
 *   may split its dot products, are settings ("Precision" below).
 * - Memory: on the `host` backend every pointer is host memory; on the GPU
 *   backends (`p2p`, `nccl`, `cublasmp`) every matrix pointer is device
 *   memory of the comm's device (managed memory is taken by both). Where
 *   the process has loaded the CUDA driver, the ops ask it where each
 *   operand is and refuse one in the wrong place with
 *   CGM_ERROR_INVALID_ARGUMENT before anything runs (GPU memory on the
 *   host backend; pageable or pinned CPU memory, or another GPU's, on a GPU
 *   backend); the check costs a driver query per operand and never loads
 *   or initialises CUDA.
 * - Stream ordering: ops are enqueued on the caller's `stream` (a
 *   cudaStream_t, passed as void* so that this header needs no CUDA header)
 *   and return before the GPU work completes; results are ready when the
 *   stream's work is. A NULL stream means the legacy default stream. On the
 *   `host` backend, `stream` must be NULL and ops complete before returning.
 * - CUDA graphs: every GPU op may be captured into a CUDA graph after one
 *   eager call with the same shapes, dtypes and options (the eager call
 *   allocates and exchanges whatever the op needs; nothing allocates inside
 *   capture).
 * - Thread safety: a comm is used by one thread at a time (like an
 *   ncclComm_t); different comms may be used concurrently from different
 *   threads. An op or cgm_comm_destroy called while another thread's op
 *   runs on the same comm is refused with CGM_ERROR_INVALID_USAGE naming
 *   both calls, and changes nothing (the running op goes on); this costs
 *   one atomic compare-exchange per call. The queries (cgm_comm_rank, ...)
 *   are not checked. cgm_status_string, cgm_last_error, cgm_version, cgm_shard_rows,
 *   cgm_dtype_size and the *_name functions are thread safe.
 * - Collective calls: every op, cgm_comm_create and cgm_comm_destroy are
 *   collective: every rank of the comm must call them, in the same order,
 *   with arguments that agree (same op, m, layout, dtypes, options...).
 *   Ranks that disagree are detected (CGM_ERROR_MISMATCH on every rank,
 *   naming the rank and field) where the backend can check; on the host
 *   backend a rank whose own call is rejected (e.g. a shard of the wrong
 *   size) returns its error and its peers CGM_ERROR_MISMATCH naming it, at
 *   once. Every wait is bounded by the comm's timeout (CGM_ERROR_TIMEOUT
 *   naming the missing rank). On the nccl backend an eager op must start
 *   within the timeout of its call and finish within the timeout of its
 *   start: one queued behind stream work that does not end (a hung graph
 *   replay, a kernel of the caller's) breaks the comm with
 *   CGM_ERROR_TIMEOUT saying it never started; a call that finds its 64
 *   ops in flight unfinished waits for a slot, bounded the same way. A GPU
 *   backend's rank that fails in the middle
 *   of an op (a CUDA or cuBLAS error after its streams forked) marks its
 *   comm broken; on the p2p backend it tells its peers, whose waits give up
 *   at once (CGM_ERROR_PEER_FAILED naming it), and a rank whose wait for a
 *   peer expired tells the others too (CGM_ERROR_TIMEOUT naming the missing
 *   rank and the rank that told); on the other GPU backends the peers'
 *   waits time out naming it. On the GPU backends, a call rejected on some
 *   ranks only (a NULL pointer on one rank, say) after the first call of
 *   its signature leaves the other ranks in the op: treat such an error as
 *   fatal for the comm (destroy it), as the other ranks will time out.
 */
#ifndef COMMGEMM_H
#define COMMGEMM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Version                                                             */
/* ------------------------------------------------------------------ */

#define COMMGEMM_VERSION_MAJOR 0
#define COMMGEMM_VERSION_MINOR 1
#define COMMGEMM_VERSION_PATCH 0
/** MAJOR * 10000 + MINOR * 100 + PATCH. */
#define COMMGEMM_VERSION                                                     \
    (COMMGEMM_VERSION_MAJOR * 10000 + COMMGEMM_VERSION_MINOR * 100 +         \
     COMMGEMM_VERSION_PATCH)

/** The version of the library actually loaded (COMMGEMM_VERSION encoding).
 *  Compare with COMMGEMM_VERSION to detect a header/library mismatch. */
int cgm_version(void);

/* ------------------------------------------------------------------ */
/* Status and errors                                                   */
/* ------------------------------------------------------------------ */

typedef enum cgm_status {
    CGM_SUCCESS = 0,
    /** An argument is wrong (null/misaligned pointer, shapes that disagree,
     *  bad enum value, m above the comm's max_m). The comm stays usable. */
    CGM_ERROR_INVALID_ARGUMENT = 1,
    /** The call is valid C but not in this state: a comm that is not live
     *  (destroyed or never created), a host pointer on a GPU backend... */
    CGM_ERROR_INVALID_USAGE = 2,
    /** Valid request this build/backend does not implement (fp8 on a GPU
     *  backend, a layout a backend lacks, a backend compiled out). The comm
     *  stays usable. */
    CGM_ERROR_NOT_SUPPORTED = 3,
    /** The backend asked for is not available here (no GPU, library absent,
     *  comm created without what it needs). The message says how to get it. */
    CGM_ERROR_UNAVAILABLE = 4,
    CGM_ERROR_OUT_OF_MEMORY = 5,
    /** A bounded wait expired; the message names the rank that never came.
     *  The comm is broken afterwards: destroy it. */
    CGM_ERROR_TIMEOUT = 6,
    /** A peer rank died or reported failure. The comm is broken: destroy it. */
    CGM_ERROR_PEER_FAILED = 7,
    /** Ranks disagree about a collective call (op, shape, dtype, options);
     *  reported on every rank, naming the rank and the field. The comm stays
     *  usable. */
    CGM_ERROR_MISMATCH = 8,
    /** An operating-system call failed (shared memory, sockets, threads). */
    CGM_ERROR_SYSTEM = 9,
    CGM_ERROR_CUDA = 10,
    CGM_ERROR_NCCL = 11,
    CGM_ERROR_CUBLAS = 12,
    /** A bug in commgemm: please report it with cgm_last_error(). */
    CGM_ERROR_INTERNAL = 13
} cgm_status;

/** A short, constant description of a status and what to do about it.
 *  Never NULL; unknown values give "unknown status". Thread safe. */
const char *cgm_status_string(cgm_status status);

/** The detailed message of the last failing commgemm call on this thread
 *  ("" if none failed yet). Valid until the next commgemm call on this
 *  thread. Successful calls do not clear it. Thread safe (per thread). */
const char *cgm_last_error(void);

/* ------------------------------------------------------------------ */
/* Data types and matrices                                             */
/* ------------------------------------------------------------------ */

typedef enum cgm_dtype {
    CGM_DTYPE_FP32 = 0,
    CGM_DTYPE_BF16 = 1,
    CGM_DTYPE_FP16 = 2,
    /** OCP fp8 with 4 exponent bits and 3 mantissa bits ("e4m3fn": no
     *  infinities, NaN = S.1111.111, largest finite 448). X, W and Y of
     *  the GEMM ops, with scales: see "FP8" below. */
    CGM_DTYPE_FP8_E4M3 = 3,
    /** fp8 with 5 exponent bits and 2 mantissa bits (IEEE-like: inf and
     *  NaN, largest finite 57344). As CGM_DTYPE_FP8_E4M3. */
    CGM_DTYPE_FP8_E5M2 = 4,
    CGM_DTYPE_COUNT_ = 5
} cgm_dtype;

/** Bytes per element (0 for an invalid value). Thread safe. */
size_t cgm_dtype_size(cgm_dtype dtype);
/** "fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2" or "invalid". Thread
 *  safe. */
const char *cgm_dtype_name(cgm_dtype dtype);

/** How an fp8 matrix's scales map to its elements (the two Hopper
 *  recipes; "FP8" below has the rules). Read only where the matrix's
 *  dtype is fp8. */
typedef enum cgm_scaling {
    /** No scales: the matrix is not fp8. */
    CGM_SCALING_NONE = 0,
    /** One fp32 scale for the whole matrix (scale[0]). */
    CGM_SCALING_TENSOR = 1,
    /** X only: one fp32 scale per row per 128 consecutive k, scale is
     *  [rows, ceil(k / 128)], row-major and dense. */
    CGM_SCALING_BLOCK_1X128 = 2,
    /** W only: one fp32 scale per 128 x 128 block, scale is
     *  [ceil(n / 128), ceil(k / 128)], row-major and dense. */
    CGM_SCALING_BLOCK_128X128 = 3,
    CGM_SCALING_COUNT_ = 4
} cgm_scaling;

/** "none", "tensor", "block_1x128", "block_128x128" or "invalid". Thread
 *  safe. */
const char *cgm_scaling_name(cgm_scaling scaling);

/** A row-major matrix: element (i, j) is at data + (i * ld + j) * size.
 *  ld = 0 means ld = cols. data may be NULL only when rows * cols == 0.
 *  data must be aligned to the element size.
 *  ABI: `scaling` was added at the end for fp8. The library reads it only
 *  where dtype is fp8, so a program built against an older commgemm.h
 *  (its smaller struct, never fp8) keeps working; positional initializers
 *  ({data, dtype, rows, cols, ld, scale}) keep their meaning. */
typedef struct cgm_matrix {
    void *data;
    cgm_dtype dtype;
    int64_t rows;
    int64_t cols;
    int64_t ld;
    /** fp8 only: the fp32 scales (`scaling` gives their shape) in the
     *  memory the data lives in, aligned to 4 bytes; may be NULL only when
     *  rows * cols == 0. Must be NULL for other dtypes. */
    const float *scale;
    /** fp8 only: how `scale` maps to the elements ("FP8" below); ignored
     *  for other dtypes. */
    cgm_scaling scaling;
} cgm_matrix;

/** A dense matrix descriptor (ld = cols, no scale, CGM_SCALING_NONE). */
static inline cgm_matrix cgm_matrix_make(void *data, cgm_dtype dtype,
                                         int64_t rows, int64_t cols) {
    cgm_matrix m;
    m.data = data;
    m.dtype = dtype;
    m.rows = rows;
    m.cols = cols;
    m.ld = cols;
    m.scale = NULL;
    m.scaling = CGM_SCALING_NONE;
    return m;
}

/** Rows of shard `rank` when `m` rows are split over `nranks` (ceil split),
 *  exact for every m up to INT64_MAX. Returns 0 for out-of-range arguments
 *  (m <= 0, nranks <= 0, rank outside [0, nranks)). Thread safe. */
int64_t cgm_shard_rows(int64_t m, int rank, int nranks);
/** First row of shard `rank` (clamped to m: rank >= nranks gives m),
 *  exact for every m up to INT64_MAX. Thread safe. */
int64_t cgm_shard_offset(int64_t m, int rank, int nranks);

/* ------------------------------------------------------------------ */
/* Backends and algorithms                                             */
/* ------------------------------------------------------------------ */

typedef enum cgm_backend {
    /** In a config: unset (falls back to env, then auto). In an op's
     *  options: use the comm's choice for this op. */
    CGM_BACKEND_DEFAULT = 0,
    /** Choose: p2p inside one NVLink domain, nccl otherwise, host for a comm
     *  created without GPUs. Never cublasmp unless it is asked for. */
    CGM_BACKEND_AUTO = 1,
    CGM_BACKEND_HOST = 2,
    CGM_BACKEND_P2P = 3,
    CGM_BACKEND_NCCL = 4,
    CGM_BACKEND_CUBLASMP = 5,
    CGM_BACKEND_COUNT_ = 6
} cgm_backend;

/** "default", "auto", "host", "p2p", "nccl", "cublasmp" or "invalid". */
const char *cgm_backend_name(cgm_backend backend);
/** Parses a backend name (as above, case-insensitive). */
cgm_status cgm_backend_from_name(const char *name, cgm_backend *out);

typedef enum cgm_algo {
    /** The backend picks (tuned per op, shape, dtype, P: algorithm, splits
     *  and, for p2p AG+GEMM, one or two compute queues; docs/TUNING.md). */
    CGM_ALGO_AUTO = 0,
    /** Split into per-rank chunks pulled (AG) or pushed (RS) directly between
     *  peers, GEMM chunks pipelined behind the transfers (userbuffers "split").*/
    CGM_ALGO_SPLIT_PIPELINED = 1,
    /** Chunks travel around a ring, one neighbour hop per step. */
    CGM_ALGO_RING = 2,
    /** The whole collective beside the whole GEMM (cgm_bulk_overlap only). */
    CGM_ALGO_BULK = 3,
    /** The collective, then the unsplit GEMM (or the GEMM, then the
     *  collective): the reference and the baseline. */
    CGM_ALGO_NO_OVERLAP = 4,
    /** p2p only: commgemm's own Hopper GEMM waits per tile for the rows it
     *  reads (AG) or adds the peers' partials in its epilogue (RS); no GEMM
     *  chunks (docs/PLAN.md "Fused"). Where it cannot run (another backend,
     *  GEMM+AR, bulk, not sm_90, not TN, not bf16/fp16 in, k or an ld not a
     *  multiple of 8, RS with P > 8) the call runs split (bulk: bulk). */
    CGM_ALGO_FUSED = 5,
    /* 6 is retired: never reuse it. */
    CGM_ALGO_COUNT_ = 6
} cgm_algo;

/** "auto", "split", "ring", "bulk", "no_overlap", "fused" or "invalid". */
const char *cgm_algo_name(cgm_algo algo);
/** Parses an algorithm name (as above; "split_pipelined" too). */
cgm_status cgm_algo_from_name(const char *name, cgm_algo *out);

typedef enum cgm_layout {
    CGM_LAYOUT_TN = 0, /* Y = X[m,k] . W[n,k]^T */
    CGM_LAYOUT_NN = 1, /* Y = X[m,k] . W[k,n]   */
    CGM_LAYOUT_NT = 2, /* Y = X[k,m]^T . W[k,n] */
    CGM_LAYOUT_COUNT_ = 3
} cgm_layout;

/** "TN", "NN", "NT" or "invalid". */
const char *cgm_layout_name(cgm_layout layout);

/** The operations, for per-op backend choice and queries. */
typedef enum cgm_op {
    CGM_OP_ALL_GATHER_GEMM = 0,
    CGM_OP_GEMM_REDUCE_SCATTER = 1,
    CGM_OP_GEMM_ALL_REDUCE = 2,
    CGM_OP_BULK = 3,
    CGM_OP_COUNT_ = 4
} cgm_op;

/** "ag_gemm", "gemm_rs", "gemm_ar", "bulk" or "invalid". */
const char *cgm_op_name(cgm_op op);

/* ------------------------------------------------------------------ */
/* Precision                                                           */
/* ------------------------------------------------------------------ */

/* Two settings change results. Each is a config field (its default: the
 * environment variable, then the library's default) and a per-call option
 * (its default: the comm's value); cgm_comm_precision reports the comm's. */

/** The element type of the partial products that GEMM+RS and GEMM+AR send
 *  between ranks. Each rank multiplies its slice of the contraction; the
 *  owner of each output row adds the P partials of that row in fp32, adds
 *  the bias and rounds once to Y's dtype. What differs is whether the
 *  partials are rounded before they travel:
 *  - FP32: partials travel in fp32; Y is the fp32 sum rounded once, as one
 *    GEMM over the whole k would give (up to the order of fp32 additions).
 *  - OUTPUT: a bf16/fp16 Y gets partials rounded once to its dtype (what
 *    Megatron-LM and PyTorch's fused ops send): half the bytes on the wire,
 *    the sum still in fp32, but each partial carries up to half an output
 *    ulp of itself, so where partials nearly cancel, Y loses accuracy
 *    relative to its own size. With an fp32 Y it is FP32.
 *  Backends: p2p and nccl honour it. The host backend always sums exact
 *  fp32 partials (its GEMMs run in fp32); cublasmp always reduces in fp32
 *  (cuBLASMp sums into an fp32 buffer, rounded once into Y). Every rank
 *  must pass the same value (it changes the bytes on the wire): ranks that
 *  differ get CGM_ERROR_MISMATCH naming "partial dtype", on the backends
 *  that check agreement. AG+GEMM and bulk send no partials and ignore it. */
typedef enum cgm_partial_dtype {
    /** In a config: COMMGEMM_PARTIAL_DTYPE, else FP32. In an op's options:
     *  the comm's value. */
    CGM_PARTIAL_DTYPE_DEFAULT = 0,
    CGM_PARTIAL_DTYPE_FP32 = 1,
    CGM_PARTIAL_DTYPE_OUTPUT = 2,
    CGM_PARTIAL_DTYPE_COUNT_ = 3
} cgm_partial_dtype;

/** "default", "fp32", "output" or "invalid". Thread safe. */
const char *cgm_partial_dtype_name(cgm_partial_dtype partial_dtype);
/** Parses a partial dtype name (as above, case-insensitive). */
cgm_status cgm_partial_dtype_from_name(const char *name,
                                       cgm_partial_dtype *out);

/** How the GEMMs that commgemm runs through cuBLASLt may add the parts of
 *  a dot product that cuBLASLt splits along k (split-k):
 *  - ANY: any scheme cuBLASLt's heuristic picks, including those that round
 *    each part to a bf16/fp16 output type before adding them (cuBLAS and
 *    PyTorch allow it by default: torch.backends.cuda.matmul.
 *    allow_bf16_reduced_precision_reduction); where parts cancel, Y errs by
 *    up to an output ulp of the largest part.
 *  - FP32: parts are added in fp32 (the compute type) or k is not split:
 *    a bf16/fp16 Y is the fp32 dot product rounded once. May be slower on
 *    shapes where split-k would win (small m x n, large k).
 *  No effect on fp32 outputs. Backends: p2p and nccl honour it (their
 *  cuBLASLt GEMMs; commgemm's own Hopper kernel, algo fused and the p2p
 *  GEMM+RS own-rows kernel, never splits k). The host backend's GEMMs are
 *  fp32 and never round parts (always as FP32); cublasmp's GEMMs are
 *  cuBLASMp's, which it does not control. Local: ranks may differ. */
typedef enum cgm_gemm_reduction {
    /** In a config: COMMGEMM_GEMM_REDUCTION, else ANY. In an op's options:
     *  the comm's value. */
    CGM_GEMM_REDUCTION_DEFAULT = 0,
    CGM_GEMM_REDUCTION_ANY = 1,
    CGM_GEMM_REDUCTION_FP32 = 2,
    CGM_GEMM_REDUCTION_COUNT_ = 3
} cgm_gemm_reduction;

/** "default", "any", "fp32" or "invalid". Thread safe. */
const char *cgm_gemm_reduction_name(cgm_gemm_reduction gemm_reduction);
/** Parses a GEMM reduction name (as above, case-insensitive). */
cgm_status cgm_gemm_reduction_from_name(const char *name,
                                        cgm_gemm_reduction *out);

/** What a GEMM op does to its result before it stores it (cuBLASLt's
 *  epilogues, defined for the distributed ops in "Epilogues" below). Bias
 *  is not an epilogue of its own: a non-NULL bias is added wherever the
 *  epilogue allows one. */
typedef enum cgm_epilogue {
    /** Y = r (+ bias): no epilogue. */
    CGM_EPILOGUE_NONE = 0,
    /** Y = gelu(r + bias). */
    CGM_EPILOGUE_GELU = 1,
    /** Y = gelu(r + bias), and options.aux = r + bias (the pre-activation,
     *  which the backward's DGELU reads). */
    CGM_EPILOGUE_GELU_AUX = 2,
    /** Y = r * gelu'(options.aux): the gradient through a GELU whose
     *  pre-activation GELU_AUX kept. No bias. */
    CGM_EPILOGUE_DGELU = 3,
    /** DGELU, and options.bgrad = the column sums of Y over all m rows of
     *  the layer (the bias gradient of the layer whose GELU this is). */
    CGM_EPILOGUE_DGELU_BGRAD = 4,
    /** Y = r (+ bias), and options.bgrad = the sums of op(A) along the
     *  contraction: the bias gradient when the GEMM is a weight gradient
     *  dW = dY^T . X (layout NT, A = dY). cgm_bulk_overlap's GEMM only. */
    CGM_EPILOGUE_BGRAD = 5,
    CGM_EPILOGUE_COUNT_ = 6
} cgm_epilogue;

/** "none", "gelu", "gelu_aux", "dgelu", "dgelu_bgrad", "bgrad" or
 *  "invalid". Thread safe. */
const char *cgm_epilogue_name(cgm_epilogue epilogue);
/** Parses an epilogue name (as above, case-insensitive). */
cgm_status cgm_epilogue_from_name(const char *name, cgm_epilogue *out);

/* ------------------------------------------------------------------ */
/* Communicators                                                       */
/* ------------------------------------------------------------------ */

typedef struct cgm_comm cgm_comm;

typedef enum cgm_bootstrap_kind {
    /** Ranks are processes on this machine that meet at a rendezvous name
     *  (fields rank, nranks, rendezvous). Gives `host` backend comms (the
     *  default, also under auto), and `p2p` comms when asked for
     *  (config.backend, COMMGEMM_BACKEND=p2p): each rank on the CUDA device
     *  current when it calls cgm_comm_create, handles exchanged through
     *  the host backend's channel, no NCCL needed; one process per rank.
     *  There ranks may share a GPU (NCCL refuses that): the GPU time-slices
     *  between their processes, which is for testing (COMMGEMM_TEST_RANKS),
     *  never for speed. `nccl` and `cublasmp` need an NCCL bootstrap. */
    CGM_BOOTSTRAP_LOCAL = 1,
    /** From an ncclComm_t the caller created (field nccl_comm); rank and size
     *  are read from it. Gives GPU backend comms. */
    CGM_BOOTSTRAP_NCCL = 2
} cgm_bootstrap_kind;

/** How ranks find each other. Fill it with cgm_bootstrap_from_env() (ranks
 *  launched by commgemm-run, mpirun or torchrun), or set the fields. */
typedef struct cgm_bootstrap {
    size_t struct_size; /* sizeof(cgm_bootstrap): set by CGM_BOOTSTRAP_INIT */
    cgm_bootstrap_kind kind;
    int rank;   /* LOCAL: this process's rank, 0 <= rank < nranks */
    int nranks; /* LOCAL: number of ranks */
    /** LOCAL: a name all ranks share and no other group uses at the same time
     *  (at most 80 characters: letters, digits, '-', '_', '.'). */
    const char *rendezvous;
    void *nccl_comm; /* NCCL: the ncclComm_t */
} cgm_bootstrap;

#define CGM_BOOTSTRAP_INIT                                                    \
    { sizeof(cgm_bootstrap), CGM_BOOTSTRAP_LOCAL, -1, 0, NULL, NULL }

/** Fills a LOCAL bootstrap from the launcher's environment:
 *  commgemm-run (COMMGEMM_RANK, COMMGEMM_NRANKS, COMMGEMM_RENDEZVOUS),
 *  torchrun (RANK, WORLD_SIZE, MASTER_ADDR/MASTER_PORT or TORCHELASTIC_RUN_ID)
 *  or Open MPI's mpirun (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE and its
 *  job id). `out->rendezvous` points to storage owned by the library.
 *  Statuses: CGM_SUCCESS; CGM_ERROR_INVALID_ARGUMENT (out NULL, or a
 *  launcher's rank or size variable set to what is not an integer in range
 *  (size 1 to 4096, rank 0 to size - 1): the message names the variable,
 *  its value and what it takes); CGM_ERROR_UNAVAILABLE (no launcher
 *  environment found: the message lists the variables looked for). */
cgm_status cgm_bootstrap_from_env(cgm_bootstrap *out);

/** Sentinel of integer config fields: "not set here, use env or default". */
#define CGM_UNSET (-1)

/** Comm configuration. Start from CGM_CONFIG_INIT: every field is unset and
 *  falls back to its environment variable, then to its default. Each
 *  effective value and where it came from is logged at INFO level.
 *  The struct grows at its end: a program built against an older
 *  commgemm.h passes its smaller struct_size, and the fields it does not
 *  have are unset. */
typedef struct cgm_config {
    size_t struct_size; /* sizeof(cgm_config): set by CGM_CONFIG_INIT */
    /** Backend for every op (default: COMMGEMM_BACKEND's backend item,
     *  else auto). */
    cgm_backend backend;
    /** Per-op override, indexed by cgm_op (default: COMMGEMM_BACKEND's
     *  op:backend item for that op, e.g. "p2p,gemm_rs:nccl", else
     *  `backend`). */
    cgm_backend op_backend[CGM_OP_COUNT_];
    /** Largest m (rows of the full, gathered matrix) any call will use
     *  (COMMGEMM_MAX_M, default 16384). Workspaces are sized from it.
     *  1 to 2^31 - 1, with max_m x max(max_n, max_k) at most 2^46. */
    int64_t max_m;
    /** Largest n and k any call will use (COMMGEMM_MAX_N, COMMGEMM_MAX_K,
     *  default 16384 each; 1 to 2^31 - 1). */
    int64_t max_n;
    int64_t max_k;
    /** Bound of every wait, milliseconds (COMMGEMM_TIMEOUT_MS, default
     *  60000; 1 to 2^31 - 1, about 24.8 days, the largest "no practical
     *  bound"). A rank that does not arrive within it makes the others
     *  return CGM_ERROR_TIMEOUT naming it. On the nccl backend an eager op
     *  must also start (its stream reach it) within it of its call. */
    int64_t timeout_ms;
    /** Default algorithm (COMMGEMM_ALGO, default auto). */
    int algo; /* a cgm_algo, or CGM_UNSET */
    /** Default split count for split/ring algorithms, 0 = auto
     *  (COMMGEMM_SPLITS, default 0). */
    int splits;
    /** Threads the host backend uses for GEMM chunks (COMMGEMM_HOST_THREADS,
     *  default 1; 1 to 16, the most compute queues it runs). */
    int host_threads;
    /** Check on every call that all ranks agree about the call (op, shapes,
     *  dtypes, options); costs one small exchange (COMMGEMM_CHECK_AGREEMENT,
     *  default 1 on host, first call per shape on GPU backends). 1: check,
     *  0: skip; other values are refused. */
    int check_agreement;
    /** Partial dtype of GEMM+RS and GEMM+AR (COMMGEMM_PARTIAL_DTYPE,
     *  default fp32; see cgm_partial_dtype). */
    cgm_partial_dtype partial_dtype;
    /** cuBLASLt's split-k reductions (COMMGEMM_GEMM_REDUCTION, default any;
     *  see cgm_gemm_reduction). */
    cgm_gemm_reduction gemm_reduction;
} cgm_config;

#define CGM_CONFIG_INIT                                                       \
    { sizeof(cgm_config), CGM_BACKEND_DEFAULT,                                \
      { CGM_BACKEND_DEFAULT, CGM_BACKEND_DEFAULT, CGM_BACKEND_DEFAULT,        \
        CGM_BACKEND_DEFAULT },                                                \
      CGM_UNSET, CGM_UNSET, CGM_UNSET, CGM_UNSET, CGM_UNSET, CGM_UNSET,        \
      CGM_UNSET, CGM_UNSET, CGM_PARTIAL_DTYPE_DEFAULT,                         \
      CGM_GEMM_REDUCTION_DEFAULT }

/** Creates a communicator. Collective over the ranks of `bootstrap`.
 *  `config` may be NULL (all defaults). The comm keeps no pointer to
 *  `bootstrap` or `config`.
 *  Statuses: CGM_SUCCESS; CGM_ERROR_INVALID_ARGUMENT (NULL pointers, bad
 *  struct_size, rank out of range, config values or environment variables
 *  out of their documented range or words, COMMGEMM_DEBUG and
 *  COMMGEMM_DEBUG_SUBSYS included: docs/env.md); CGM_ERROR_UNAVAILABLE
 *  (a backend asked for cannot serve this bootstrap); CGM_ERROR_TIMEOUT (a
 *  rank did not join within the timeout: named); CGM_ERROR_MISMATCH (ranks
 *  disagree about the group size or config); CGM_ERROR_SYSTEM;
 *  CGM_ERROR_OUT_OF_MEMORY; CGM_ERROR_CUDA / _NCCL; CGM_ERROR_PEER_FAILED
 *  (the p2p backend's init failed on another rank, named with its error:
 *  that rank returns its own status, every other rank this one, at once;
 *  on a LOCAL bootstrap, a rank exited or gave up during the create: named,
 *  at once, on every rank it had been in touch with, and on the others
 *  through them; one it never reached is a CGM_ERROR_TIMEOUT naming it).
 *  On failure *comm is set to NULL and nothing is leaked. */
cgm_status cgm_comm_create(const cgm_bootstrap *bootstrap,
                           const cgm_config *config, cgm_comm **comm);

/** Shorthand for a CGM_BOOTSTRAP_NCCL bootstrap of `nccl_comm` (an
 *  ncclComm_t). Same statuses as cgm_comm_create. */
cgm_status cgm_comm_init_nccl(void *nccl_comm, const cgm_config *config,
                              cgm_comm **comm);

/** Destroys a comm and frees everything it holds. Collective where the
 *  backend needs it (bounded by the timeout). Accepts a broken comm.
 *  NULL is a no-op returning CGM_SUCCESS. Using `comm` afterwards returns
 *  CGM_ERROR_INVALID_USAGE. Statuses: CGM_SUCCESS; CGM_ERROR_INVALID_USAGE
 *  (not a live comm, or another thread's op runs on it: the comm is kept,
 *  destroy it once that op returned); CGM_ERROR_TIMEOUT (peers did not
 *  finish; resources are freed anyway). */
cgm_status cgm_comm_destroy(cgm_comm *comm);

/** This rank, the group size, and the backend that runs `op` on this comm
 *  (never DEFAULT/AUTO: the resolved one). Statuses: CGM_SUCCESS;
 *  CGM_ERROR_INVALID_ARGUMENT (NULL out, bad op); CGM_ERROR_INVALID_USAGE
 *  (not a live comm). */
cgm_status cgm_comm_rank(const cgm_comm *comm, int *rank);
cgm_status cgm_comm_size(const cgm_comm *comm, int *nranks);
cgm_status cgm_comm_backend(const cgm_comm *comm, cgm_op op,
                            cgm_backend *backend);

/** The comm's asynchronous error state, like ncclCommGetAsyncError: GPU
 *  work enqueued by an earlier op may fail after the op returned (a bounded
 *  wait on the device expired because a peer never came). *async_error is
 *  CGM_SUCCESS while none occurred, else the status (CGM_ERROR_TIMEOUT,
 *  CGM_ERROR_PEER_FAILED, ...) with the detail in cgm_last_error() naming
 *  the rank; the comm is then broken and every later op returns it.
 *  Never blocks. Statuses: CGM_SUCCESS (the query worked);
 *  CGM_ERROR_INVALID_ARGUMENT (async_error NULL); CGM_ERROR_INVALID_USAGE
 *  (not a live comm). */
cgm_status cgm_comm_get_async_error(cgm_comm *comm, cgm_status *async_error);

/** The comm's partial dtype and GEMM reduction, as resolved at creation
 *  (config field, else environment variable, else default: never
 *  DEFAULT); what calls that leave the options at DEFAULT use. Either
 *  output may be NULL. Statuses: CGM_SUCCESS; CGM_ERROR_INVALID_ARGUMENT
 *  (both NULL); CGM_ERROR_INVALID_USAGE (not a live comm). */
cgm_status cgm_comm_precision(const cgm_comm *comm,
                              cgm_partial_dtype *partial_dtype,
                              cgm_gemm_reduction *gemm_reduction);

/* ------------------------------------------------------------------ */
/* Operations                                                          */
/* ------------------------------------------------------------------ */

/** Per-call options. Start from CGM_OP_OPTIONS_INIT. Passing NULL for the
 *  options means all defaults. Grows at its end like cgm_config: an older
 *  program's smaller struct_size leaves the newer fields at their
 *  defaults. */
typedef struct cgm_op_options {
    size_t struct_size; /* sizeof(cgm_op_options): set by the INIT macro */
    cgm_layout layout;  /* default CGM_LAYOUT_TN */
    /** 0: Y = result (+ bias). 1: Y = Y + result (+ bias) (beta = 1). */
    int accumulate;
    cgm_algo algo; /* CGM_ALGO_AUTO: the comm's default */
    /** Split count hint for split/ring algorithms; 0 = auto. Values above
     *  what the shape allows are clamped. */
    int splits;
    /** CGM_BACKEND_DEFAULT: the comm's backend for this op. */
    cgm_backend backend;
    /** fp32 inputs: 0 = exact fp32 math; 1 = allow TF32 tensor cores. */
    int allow_tf32;
    /** GEMM+RS, GEMM+AR: see cgm_partial_dtype. DEFAULT: the comm's. */
    cgm_partial_dtype partial_dtype;
    /** See cgm_gemm_reduction. DEFAULT: the comm's. */
    cgm_gemm_reduction gemm_reduction;
    /** fp8 inputs: 0 (default) = the tensor cores' partial sums are
     *  promoted to fp32 as cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0
     *  does; 1 = allow cuBLASLt's fast accumulation (faster, fewer
     *  accumulator bits; what TransformerEngine uses for fprop). Other
     *  values are refused; no effect on other inputs. The host backend
     *  ignores it (its fp32 GEMM is exact to fp32). Local: ranks may
     *  differ. */
    int fp8_fast_accum;
    /** fp8 Y only (NULL otherwise): where the op writes the amax of this
     *  rank's result, max |r(i, j)| before y.scale and rounding ("FP8"
     *  below), for delayed scaling. One float, in the memory the data
     *  lives in, aligned to 4 bytes. NULL: not computed. */
    float *y_amax;
    /** What the op does to its result before storing it ("Epilogues"
     *  below). Default CGM_EPILOGUE_NONE. */
    cgm_epilogue epilogue;
    /** GELU_AUX: where the pre-activation is written (an output);
     *  DGELU, DGELU_BGRAD: the pre-activation read (an input). Shaped like
     *  this rank's Y; NULL for other epilogues. */
    cgm_matrix *aux;
    /** DGELU_BGRAD, BGRAD: where the bias gradient is written, a 1 x n
     *  matrix (BGRAD: 1 x C's rows); NULL for other epilogues. */
    cgm_matrix *bgrad;
} cgm_op_options;

#define CGM_OP_OPTIONS_INIT                                                   \
    { sizeof(cgm_op_options), CGM_LAYOUT_TN, 0, CGM_ALGO_AUTO, 0,             \
      CGM_BACKEND_DEFAULT, 0, CGM_PARTIAL_DTYPE_DEFAULT,                      \
      CGM_GEMM_REDUCTION_DEFAULT, 0, NULL, CGM_EPILOGUE_NONE, NULL, NULL }

/*
 * Operand rules common to the GEMM ops:
 * - X and W share one input dtype (fp32, bf16 or fp16). Y may have the input
 *   dtype or fp32 ("output dtype"). bias, if given, is a 1 x n matrix of Y's
 *   dtype (added to every row, once: on the owner of each row). X and W may
 *   instead be fp8, with their own rules ("FP8" below).
 * - No output may overlap an input or another output (no in-place).
 * - Empty operands are valid (data may then be NULL) and the call stays
 *   collective: with m = 0 or n = 0, Y has no elements to write (AG+GEMM's
 *   x_gathered is still filled); k = 0 (for GEMM+RS/AR, a rank's
 *   k_loc = 0: it adds nothing to the sum) is an empty contraction,
 *   X . op(W) = 0, so Y = bias (or 0), plus the old Y with accumulate, and
 *   AG+GEMM's x_gathered has no elements. The cublasmp backend refuses
 *   k = 0 on every rank (CGM_ERROR_NOT_SUPPORTED).
 * - Statuses of every op: CGM_SUCCESS; CGM_ERROR_INVALID_ARGUMENT (NULL or
 *   misaligned pointers, shapes that disagree, bad enum values, m above
 *   max_m); CGM_ERROR_INVALID_USAGE (comm not live, in use by another
 *   thread's call, non-NULL stream on host);
 *   CGM_ERROR_NOT_SUPPORTED (fp8 where "FP8" says, fp8 with layout NN or
 *   NT, an epilogue on a GPU backend, an option the backend lacks);
 *   CGM_ERROR_UNAVAILABLE (backend not available on this comm);
 *   CGM_ERROR_MISMATCH (ranks disagree: on every rank); CGM_ERROR_TIMEOUT /
 *   CGM_ERROR_PEER_FAILED (comm broken afterwards); CGM_ERROR_CUDA / _NCCL /
 *   _CUBLAS; CGM_ERROR_INTERNAL. After an argument error nothing was
 *   enqueued and the comm stays usable.
 */

/*
 * FP8 (the GEMM ops and bulk's GEMM; docs/FP8.md has the why of each rule)
 * - Inputs: X and W each CGM_DTYPE_FP8_E4M3 or _E5M2, not both e5m2 (no
 *   FP8 tensor core multiplies e5m2 by e5m2). Layout TN only: Hopper's
 *   FP8 tensor cores read both operands K-major, so NN and NT are
 *   CGM_ERROR_NOT_SUPPORTED on every backend: pass X as [m, k] and W as
 *   [n, k] (transposed copies) with CGM_LAYOUT_TN.
 * - Scales (cuBLASLt's A_SCALE/B_SCALE convention: the scale multiplies):
 *   the value of element (i, j) of an fp8 X or W is  fp8(i, j) * s(i, j):
 *     CGM_SCALING_TENSOR:        s(i, j) = scale[0]
 *     CGM_SCALING_BLOCK_1X128:   s(i, j) = scale[i * kb + j / 128]        (X)
 *     CGM_SCALING_BLOCK_128X128: s(i, j) = scale[(i / 128) * kb + j / 128] (W)
 *   with kb = ceil(k / 128) and (i, j) the element of X [m, k] or W [n, k]
 *   as stored (k counts this rank's columns: k_loc for GEMM+RS/AR). One
 *   recipe per call: X and W both TENSOR, or X BLOCK_1X128 with W
 *   BLOCK_128X128. Scales are used as given (never checked: a NaN or 0
 *   scale gives what it gives).
 * - The result: r(i, j) = sum over l of X(i, l) * W(j, l) with the values
 *   above, accumulated in fp32 (up to the order of additions; see
 *   options.fp8_fast_accum), plus bias[j]; GEMM+RS/AR sum the ranks'
 *   partial products in fp32 first (partials travel in fp32, or rounded to
 *   a bf16/fp16 Y with CGM_PARTIAL_DTYPE_OUTPUT; never in fp8).
 * - Y: bf16, fp16 or fp32 holds r rounded once to nearest even. Or Y is
 *   fp8 (e4m3 or e5m2) with y.scaling = CGM_SCALING_TENSOR and y.scale its
 *   quantization scale (cuBLASLt's D_SCALE: it multiplies):
 *       Y(i, j) = sat(rne(r(i, j) * y.scale[0]))
 *   rne: round to nearest even; sat: magnitudes above the largest finite
 *   value (448 e4m3, 57344 e5m2) and infinities give that value with
 *   their sign; NaN stays NaN. So Y dequantizes as Y * (1 / y.scale[0]):
 *   pass 1 / y.scale[0] as the scale of a later op that reads Y (as
 *   TransformerEngine passes scale for outputs, scale_inv for inputs).
 *   An fp8 Y refuses accumulate (its old values would be read back in
 *   fp8); GEMM+AR's fp8 Y is the same on every rank only if every rank
 *   passes the same y.scale value.
 * - amax (options.y_amax, fp8 Y only): max |r(i, j)| over the elements of
 *   this rank's Y, before y.scale and rounding (NaN if any r is NaN; 0 for
 *   an empty Y): AG+GEMM: its [m, n_loc]; GEMM+RS: its shard; GEMM+AR: all
 *   of Y (the same value on every rank; every rank passes y_amax or none);
 *   bulk: its c.
 *   The amax of a column-parallel (AG+GEMM) or row-sharded (RS) output is
 *   the max over ranks: all-reduce it if the scaling recipe needs it.
 * - bias: bf16, or Y's dtype where Y is bf16, fp16 or fp32.
 * - AG+GEMM: each rank passes its own shard's scales; the gathered rows
 *   keep them (TENSOR: rows of shard s use rank s's scale, so the ranks
 *   need no common scale and no amax all-reduce; BLOCK_1X128: each row's
 *   scales travel with it). x_gathered (optional) is fp8 of x_shard's
 *   dtype and scaling: it receives the fp8 bytes and, where
 *   x_gathered.scale is not NULL, the scales: TENSOR: P floats, rank s's
 *   scale at [s] (a shard with no rows leaves its entry as it was);
 *   BLOCK_1X128: [m, ceil(k / 128)]. The library writes through that
 *   pointer (an output, though the field is const).
 * - GEMM+RS/AR: each rank's X and W have their own scales.
 * - Bulk: the GEMM takes fp8 a (as X) and b (as W) alike; the collective
 *   moves fp32, bf16 or fp16 only.
 * - Memory: scale and y_amax pointers live where the backend's data
 *   lives (host memory on host; device memory of the comm's GPU on GPU
 *   backends), checked like the data pointers; no output (Y, x_gathered
 *   and its scales, y_amax) may overlap an input (data or scales).
 * - Backends: the host backend runs every rule above (the reference).
 *   nccl runs them too, every op and algorithm; p2p on its chunked
 *   algorithms (split, ring, no_overlap, bulk) and on algo = fused for
 *   AG+GEMM and GEMM+RS to a bf16, fp16 or fp32 Y without an epilogue,
 *   refusing GEMM+AR's y_amax (use nccl for it). Both need a GPU with FP8 tensor
 *   cores (compute capability 8.9+; block scaling: Hopper, 9.x, and
 *   cuBLAS 12.9+), else CGM_ERROR_NOT_SUPPORTED. cublasmp runs TENSOR
 *   scaling on GEMM+RS and GEMM+AR (an fp8 Y on GEMM+RS only, without
 *   bias) and returns CGM_ERROR_NOT_SUPPORTED for the rest (docs/FP8.md).
 * - Agreement: X's dtype and scaling, W's dtype and the output dtype are
 *   in the call's signature (ranks that differ: CGM_ERROR_MISMATCH); for
 *   GEMM+AR the presence of y_amax too.
 */

/*
 * Epilogues (options.epilogue; docs/EPILOGUES.md has the why of each rule)
 * - The values: r(i, j) is the op's result before anything is added: the
 *   fp32 GEMM result (AG+GEMM, bulk's GEMM) or the fp32 sum over ranks
 *   (GEMM+RS, GEMM+AR), as in "FP8" for fp8 inputs. b[j] is bias[j] (0
 *   without a bias). All math is fp32; each output is rounded once to its
 *   dtype (an fp8 Y as in "FP8": scaled, saturated).
 *     gelu(t)  = 0.5 t (1 + tanh(c (t + 0.044715 t^3))), c = sqrt(2 / pi)
 *                (the tanh form of PyTorch's gelu(approximate="tanh"),
 *                which cuBLASLt's GELU epilogues compute)
 *     gelu'(t) = its derivative
 *   NONE:        Y = r + b
 *   GELU:        Y = gelu(r + b)
 *   GELU_AUX:    Y = gelu(r + b);  aux = r + b
 *   DGELU:       Y = r * gelu'(aux)
 *   DGELU_BGRAD: Y = r * gelu'(aux); bgrad[j] = sum over the layer's m rows
 *                of r(i, j) * gelu'(aux(i, j)) (before Y's rounding)
 *   BGRAD:       Y = r + b; bgrad[i] = sum over l of op(A)(i, l)
 *   With an fp8 Y, options.y_amax is the amax of Y's value before
 *   y.scale (gelu(r + b), r * gelu'(aux)).
 * - Where it applies in a distributed op: AG+GEMM: to its [m, n] output as
 *   to a local GEMM's (aux is [m, n]; bgrad sums all m rows). GEMM+RS and
 *   GEMM+AR: after the reduction, to the reduced rows (a partial sum has no
 *   GELU): aux is shaped like this rank's Y (RS: [m_r, n], AR: [m, n]);
 *   DGELU_BGRAD's bgrad is the sum over all m rows on every rank (RS: the
 *   shards' column sums summed over the ranks). Bulk's GEMM: to C, as a
 *   local GEMM (aux shaped like C); BGRAD is bulk's only (it sums an input,
 *   not the reduced output, and the distributed ops' weight gradients are
 *   not theirs): on AG+GEMM, GEMM+RS and GEMM+AR it is refused.
 * - aux: Y's dtype (bf16 where Y is fp8), its own ld (>= n), no overlap
 *   with any other operand; GELU_AUX writes it, DGELU and DGELU_BGRAD read
 *   it. bgrad: 1 x n (BGRAD: 1 x C.rows), Y's dtype or fp32 (bf16 or fp32
 *   where Y is fp8). GEMM+AR's DGELU gives every rank the same Y only where
 *   every rank passes the same aux.
 * - Refused (CGM_ERROR_INVALID_ARGUMENT, saying what to pass): aux or
 *   bgrad missing where the epilogue needs it, given where it does not, of
 *   the wrong shape or dtype, misaligned, in the wrong memory or
 *   overlapping another operand; a bias with DGELU or DGELU_BGRAD
 *   (cuBLASLt has none there: add it to the forward's GELU_AUX instead);
 *   accumulate with GELU, GELU_AUX, DGELU or DGELU_BGRAD (the activation
 *   of Y + r is not what a layer needs; accumulate outside); BGRAD on
 *   AG+GEMM, GEMM+RS or GEMM+AR; an unknown value.
 * - Backends: the host backend runs every rule above (the reference); the
 *   nccl backend runs them for bf16/fp16/fp32 inputs; the p2p backend on
 *   AG+GEMM (split, ring, no_overlap, fused), GEMM+RS (but DGELU_BGRAD), bulk's
 *   GEMM and one rank; cublasmp on AG+GEMM (GELU, GELU_AUX, DGELU,
 *   DGELU_BGRAD). They return CGM_ERROR_NOT_SUPPORTED, saying what to do,
 *   for fp8 inputs with an epilogue, a bias with BGRAD, an aux whose ld is
 *   not a multiple of 8 or that is not 16-byte aligned (cuBLASLt's and
 *   cuBLASMp's rule), (p2p, fused included) GEMM+AR and GEMM+RS's
 *   DGELU_BGRAD on P > 1, and (cublasmp) any epilogue on GEMM+RS and
 *   GEMM+AR, which cuBLASMp applies before the reduction
 *   (docs/EPILOGUES.md).
 * - Agreement: the epilogue and whether bias, aux and bgrad are given are
 *   in the call's signature (ranks that differ: CGM_ERROR_MISMATCH); bulk's
 *   GEMM is local, its epilogue may differ per rank like its other options.
 */

/** AG+GEMM: Y[m, n] = allgather(X) . op(W) (+ bias).
 *  Rank r gives its shard X_r: [m_r, k] (TN, NN) or [k, m_r] (NT), with
 *  m_r = cgm_shard_rows(m, r, P) and m = y->rows. W: [n, k] (TN) or [k, n]
 *  (NN, NT) — this rank's weight shard, so n may differ between ranks.
 *  y: [m, n], the full output on every rank.
 *  x_gathered (may be NULL): receives the gathered input, [m, k] (TN, NN) or
 *  [k, m] (NT), e.g. to keep for the wgrad GEMM. */
cgm_status cgm_all_gather_gemm(cgm_comm *comm, const cgm_matrix *x_shard,
                               const cgm_matrix *w, const cgm_matrix *bias,
                               cgm_matrix *y, cgm_matrix *x_gathered,
                               const cgm_op_options *options, void *stream);

/** GEMM+RS: Y_r[m_r, n] = rows [off_r, off_r + m_r) of sum over ranks of
 *  X . op(W) (+ bias).
 *  X: [m, k_loc] (TN, NN) or [k_loc, m] (NT), this rank's slice of the
 *  contraction (k_loc may differ between ranks). W: [n, k_loc] (TN) or
 *  [k_loc, n] (NN, NT). y_shard: [m_r, n] with m_r = cgm_shard_rows(m, r, P)
 *  (may be 0 rows). */
cgm_status cgm_gemm_reduce_scatter(cgm_comm *comm, const cgm_matrix *x,
                                   const cgm_matrix *w, const cgm_matrix *bias,
                                   cgm_matrix *y_shard,
                                   const cgm_op_options *options,
                                   void *stream);

/** GEMM+AR: Y[m, n] = sum over ranks of X . op(W) (+ bias), on every rank.
 *  Operands as in cgm_gemm_reduce_scatter, but y is the full [m, n]. */
cgm_status cgm_gemm_all_reduce(cgm_comm *comm, const cgm_matrix *x,
                               const cgm_matrix *w, const cgm_matrix *bias,
                               cgm_matrix *y, const cgm_op_options *options,
                               void *stream);

typedef enum cgm_collective {
    CGM_COLLECTIVE_ALL_GATHER = 0,
    CGM_COLLECTIVE_REDUCE_SCATTER = 1,
    CGM_COLLECTIVE_COUNT_ = 2
} cgm_collective;

/** Bulk: a local GEMM and an unrelated collective, overlapped (the wgrad
 *  GEMM beside the dgrad's collective).
 *  GEMM (local, not collective): C = op(A) . op(B) (+ bias) with the
 *  options' layout and accumulate; A plays X's role and B plays W's.
 *  Collective on rows split with cgm_shard_rows:
 *    CGM_COLLECTIVE_ALL_GATHER:     send [m_r, c] -> recv [m, c]
 *    CGM_COLLECTIVE_REDUCE_SCATTER: send [m, c]   -> recv [m_r, c] (fp32 sum)
 *  send and recv share a dtype (fp32, bf16, fp16); m and c agree across
 *  ranks. Either half may be skipped: a, b and c all NULL (collective only)
 *  or send and recv both NULL (GEMM only). */
cgm_status cgm_bulk_overlap(cgm_comm *comm, const cgm_matrix *a,
                            const cgm_matrix *b, const cgm_matrix *bias,
                            cgm_matrix *c, cgm_collective collective,
                            const cgm_matrix *send, cgm_matrix *recv,
                            const cgm_op_options *options, void *stream);

/* ------------------------------------------------------------------ */
/* Framework hooks                                                     */
/* ------------------------------------------------------------------ */

/** XLA FFI handlers (XLA's FFI C API 0.x) of the ops, for JAX:
 *  python/commgemm/jax.py registers them with jax.ffi.register_ffi_target
 *  (platforms "cpu" and "CUDA"); other programs need not call them.
 *  `call_frame` is an XLA_FFI_CallFrame*; the return value an
 *  XLA_FFI_Error* (NULL on success) made by XLA's own error_create.
 *  Operands: x, w[, bias][, aux] (2-D row-major arrays; bias 1-D [n] or
 *  [1, n]; aux, the pre-activation that DGELU and DGELU_BGRAD read);
 *  results: y[, x_gathered (AG+GEMM only)][, aux (GELU_AUX)][, bgrad
 *  (DGELU_BGRAD, BGRAD; 1-D or [1, n])], shaped as the op's. Attributes
 *  (integer scalars): comm (the cgm_comm pointer, required), layout, algo,
 *  splits, backend, allow_tf32, partial_dtype, gemm_reduction, epilogue
 *  (optional, CGM_OP_OPTIONS_INIT's defaults); ordered (0/1): the last
 *  operand and the last result are order markers, buffers of any type the
 *  handler never reads or writes, so that a call given the marker of
 *  another runs after it (XLA orders custom calls by their data only).
 *  The op runs on XLA's stream (GPU backends) or, on the host backend,
 *  synchronously with a NULL stream. The call's backend must match XLA's
 *  platform (which XLA's stream query tells: a stream on its GPU, an
 *  error on its CPU): host for CPU arrays, a GPU backend for GPU arrays;
 *  otherwise FAILED_PRECONDITION, before the op (a rank that refuses
 *  alone leaves its peers to time out). Errors: an XLA error whose message is
 *  cgm_last_error() with the status (INVALID_ARGUMENT for argument and
 *  agreement errors, DEADLINE_EXCEEDED for timeouts, ABORTED for a failed
 *  peer, ...). Thread safety: as the op's (one thread per comm). */
void *cgm_xla_ffi_all_gather_gemm(void *call_frame);
void *cgm_xla_ffi_gemm_reduce_scatter(void *call_frame);
void *cgm_xla_ffi_gemm_all_reduce(void *call_frame);
/** The same for cgm_bulk_overlap. Attributes gemm (0/1), bias (0/1) and
 *  collective (-1: none, else a cgm_collective) say which parts are
 *  present; operands a, b[, bias][, aux] (with the GEMM), then send (with
 *  the collective); results c[, aux][, bgrad] (with the GEMM), then recv. */
void *cgm_xla_ffi_bulk_overlap(void *call_frame);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_H */
