/* The cublasmp backend: internal header.
 *
 * cuBLASMp (loaded at run time, see cublasmp_api.h) runs each op as one
 * cublasMpMatmul on 1D process grids over the caller's NCCL communicator.
 * Row-major commgemm operands are column-major cuBLASMp operands of the
 * transposed product (Y^T = op(W) . op(X)), so cuBLASMp's (m, n, k) are our
 * (n, m, k), A is W and B is X; cmp_map_problem() spells out every
 * descriptor. Pure pieces (loader, mappings) need no GPU and are unit
 * tested; cublasmp_backend.c holds the CUDA side. */
#ifndef COMMGEMM_CUBLASMP_H
#define COMMGEMM_CUBLASMP_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cublasmp/cublasmp_api.h"
#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CMP_INSTALL_HINT                                                     \
    "pip install " CMP_WHEEL " (it brings nvidia-nccl-cu13 >= "              \
    CMP_NCCL_MIN_TEXT " and nvidia-cublas; no NVSHMEM) or set "              \
    "COMMGEMM_CUBLASMP_LIB=/path/libcublasmp.so.0 of cuBLASMp "              \
    CMP_SUPPORTED_TEXT " (with its NCCL and cuBLAS libraries on "            \
    "LD_LIBRARY_PATH)"
#define CMP_NCCL_HINT                                                        \
    "make a libnccl.so.2 >= " CMP_NCCL_MIN_TEXT " the one the process "      \
    "loads first: pip install 'nvidia-nccl-cu13>=" CMP_NCCL_MIN_TEXT "' "    \
    "into the environment whose NCCL commgemm (and PyTorch) load, or start " \
    "the process with LD_PRELOAD=/path/libnccl.so.2 of such an NCCL "        \
    "(docs/CUBLASMP_BACKEND.md, \"NCCL\")"

/* ------------------------------------------------------------- loader */

/* The process-wide table: the first call loads the library (path from
 * COMMGEMM_CUBLASMP_LIB, else the loader's default search for
 * libcublasmp.so.0, then pip install locations: the first candidate that
 * loads and passes the checks), later calls return the same table or
 * repeat the same error. CGM_ERROR_UNAVAILABLE with the install hint, each
 * path tried and why it was not taken (dlerror's words; "missing symbol
 * cublasMpXxx"; the version found and the versions supported; the NCCL
 * found and the NCCL needed). Thread safe. */
cgm_status cmp_lib_get(const cmp_api **out);

/* One uncached attempt (tests): `path` NULL means the search above minus
 * the environment variable. On success *api owns a dlopen handle that
 * cmp_lib_close releases; on failure *api is closed. */
cgm_status cmp_lib_load(const char *path, cmp_api *api);
void cmp_lib_close(cmp_api *api);

/* "0.10.0" of a cublasMpGetVersion code (both encodings, see
 * cublasmp_api.h); "2.29.2" of an ncclGetVersion code (NCCL >= 2.9 and
 * older). Pure. */
void cmp_version_text(int version, char *buf, size_t len);
void cmp_nccl_version_text(int version, char *buf, size_t len);
/* CGM_SUCCESS for a supported cuBLASMp version; else
 * CGM_ERROR_UNAVAILABLE saying what was found at `where`, what is
 * supported and what to install. Pure. */
cgm_status cmp_check_version(int version, const char *where);
/* CGM_SUCCESS for NCCL >= CMP_NCCL_MIN; else CGM_ERROR_UNAVAILABLE naming
 * the NCCL found (version and file), the one needed and how to get it.
 * `version` is cuBLASMp's (for the message). Pure. */
cgm_status cmp_check_nccl(int nccl_version, const char *nccl_path,
                          int version, const char *where);

/* Where pip puts the library, derived from VIRTUAL_ENV, CONDA_PREFIX,
 * PYTHONPATH, ~/.local and /usr/local/lib/python3*: up to `max` existing
 * files, written into paths[i] (each `len` bytes). Returns the count. */
int cmp_lib_candidates(char (*paths)[512], int max);

/* ----------------------------------------------------------- mappings */

/* The two grids of the 1D layouts: P x 1 (column-major: a matrix split by
 * rows) and 1 x P (row-major: split by columns). */
typedef enum cmp_grid { CMP_GRID_COL = 0, CMP_GRID_ROW = 1 } cmp_grid;

/* One cuBLASMp matrix descriptor: global column-major rows x cols, block
 * sizes mb x nb, the local leading dimension and the grid. */
typedef struct cmp_geom {
    int64_t rows, cols, mb, nb, lld;
    cmp_grid grid;
} cmp_geom;

/* What the mapping needs: the op, the layout, P, global sizes and the
 * cuBLASMp algorithm (it decides GEMM+AR's form: cmp_native_allreduce). */
typedef struct cmp_shape {
    cgm_op op;
    cgm_layout layout;
    int nranks;
    int64_t m;       /* global rows of the split dimension (our m) */
    int64_t n_total; /* AG: sum of the ranks' n; RS/AR: n */
    int64_t k_total; /* AG: k; RS/AR: sum of the ranks' k */
    int64_t ldx, ldw, ldy; /* effective (ld = 0 resolved to cols) */
    int algo_type;   /* cublasMpMatmulAlgoType_t (cmp_map_algo) */
} cmp_shape;

/* GEMM+AR, two forms:
 * - native: cuBLASMp's own Matmul + AllReduce (EPILOGUE_ALLREDUCE), for
 *   the TN layout (the one cuBLASMp documents it for) when the algorithm
 *   is NO_OVERLAP: every overlapped GEMM+AllReduce cuBLASMp has uses NVLink
 *   multicast (SPLIT_MULTICAST; 0.10's FUSED: NVSwitch multimem), which
 *   commgemm never asks for. A and B split along k on the P x 1 grid, D
 *   the n x (m P) matrix of the 1 x P grid whose block n x m is every
 *   rank's whole Y (here: the backend's fp32 m x n buffer).
 * - gathered (every other AR): cuBLASMp's overlapped GEMM+RS into this
 *   rank's rows of the fp32 m x n buffer, then an ncclAllGather of the
 *   reduced rows gives every rank all of Y. Pure. */
bool cmp_native_allreduce(cgm_op op, cgm_layout layout, int algo_type);

typedef struct cmp_problem {
    int trans_a, trans_b; /* CMP_CUBLAS_OP_N / _T */
    int64_t m, n, k;      /* cuBLASMp's: our (n_total, m, k_total) */
    cmp_geom a, b, d;     /* A = W, B = X, D (and C) = Y */
    bool gather_rows;     /* AR, gathered form (cmp_native_allreduce) */
    bool native_ar;       /* AR, native form: EPILOGUE_ALLREDUCE */
} cmp_problem;

/* Fills *p, or CGM_ERROR_NOT_SUPPORTED for what cuBLASMp cannot do (bulk,
 * uneven shards: cmp_check_even) with a message that says what to use
 * instead; CGM_ERROR_INVALID_ARGUMENT for sizes < 1. Pure. */
cgm_status cmp_map_problem(const cmp_shape *s, cmp_problem *p);

/* cuBLASMp's tensor-parallel algorithms take only its documented layout:
 * a 1D distribution whose global size is block size x P, i.e. even shards.
 * Other shapes are not its AG+GEMM / GEMM+RS algorithms at all: cuBLASMp
 * routes them to its generic matmul (no overlap), and on 0.7 one of them
 * (an NT AG+GEMM with 131 rows over 2 ranks) left a rank inside the call.
 * So the backend refuses them: m must be divisible by P (every op), and so
 * must AG's n_total and RS/AR's k_total. A total <= 0 is not checked (not
 * known yet: m alone is checked before the first-call exchange). Every
 * rank reaches the same verdict (global sizes). NOT_SUPPORTED with the
 * advice to use even shards or the p2p / nccl backend. Pure. */
cgm_status cmp_check_even(cgm_op op, int64_t m, int64_t n_total,
                          int64_t k_total, int nranks);

/* How cuBLASMp's D reaches Y, and who adds the bias.
 *
 * Reductions accumulate in fp32 whatever the dtypes (DESIGN.md). cuBLASMp
 * 0.7 summed GEMM+RS partials in D's type (a bf16 Y rounded every
 * partial); 0.8+ has a COMMUNICATION_TYPE attribute whose default is the
 * scale type, but commgemm does not rest its rule on a default. So for RS
 * and AR with a 16-bit Y, cuBLASMp writes an fp32 D (16-bit A/B, fp32
 * C/D, compute 32F) into the backend's buffer, with beta = 0, and one
 * cgm_dev_reduce pass converts it into Y (accumulate and bias there,
 * fp32, one rounding). A dense fp32 Y (and every AG+GEMM, which sums
 * nothing across ranks) is written by cuBLASMp directly. An fp32 RS Y
 * with a padded ld (ld > n) also goes through the dense fp32 buffer and
 * the pass (which writes Y with its ld): cuBLASMp 0.7's
 * Matmul+ReduceScatter returned CUBLASMP_STATUS_INTERNAL_ERROR for an fp32
 * D with lld > n.
 *
 * The bias never goes to cuBLASMp's BIAS epilogue (0.7 refused it on some
 * shapes; for a distributed D its per-rank meaning is not documented). It
 * is added in the fp32 pass, or by an in-place pass over Y (Y += bias)
 * after a direct cuBLASMp call. */
typedef struct cmp_output {
    bool fp32_d;          /* D is the backend's fp32 buffer */
    bool bias_pass;       /* an in-place bias pass follows a direct call */
    bool gather;          /* AR gathered: ncclAllGather of the fp32 rows */
    int64_t y_rows;       /* this rank's rows of Y (row-major) */
    int64_t y_cols;       /* columns of Y (our n: n_local for AG) */
    int64_t d_rows;       /* fp32 D: rows cuBLASMp writes (RS and gathered
                           * AR: m_r; native AR: m) */
    int64_t d_offset;     /* fp32 D: where they start (elements; gathered
                           * AR: the rank's slice of the m x n buffer) */
    int64_t d_lld;        /* fp32 D: local leading dimension (= y_cols) */
    size_t d_bytes;       /* fp32 D: bytes this rank needs (0: none) */
} cmp_output;

/* Fills *o for rank `rank` of s->nranks; `n_local` is this rank's n (AG)
 * or n (RS/AR). GEMM+AR always uses the fp32 m x n buffer (native: cuBLASMp
 * writes all of it; gathered: cuBLASMp's RS writes this rank's rows at
 * d_offset and the all-gather fills the rest), then one fp32 pass writes Y
 * with accumulate and bias. GEMM+RS uses it for a 16-bit Y and for an fp32
 * Y whose s->ldy exceeds n_local. Pure. */
void cmp_plan_output(const cmp_shape *s, int rank, int64_t n_local,
                     cgm_dtype out_dtype, bool has_bias, cmp_output *o);

/* cudaDataType_t of fp32 / bf16 / fp16 / fp8 e4m3 / fp8 e5m2;
 * INVALID_ARGUMENT otherwise. Pure. */
cgm_status cmp_map_dtype(cgm_dtype dtype, int *cuda_type);
/* cublasComputeType_t: 32F, or 32F_FAST_TF32 for fp32 inputs with
 * allow_tf32. Pure. */
int cmp_map_compute(cgm_dtype in_dtype, bool allow_tf32);
/* cublasMpMatmulAlgoType_t of the per-call algorithm (options.algo, as
 * for every backend): auto -> SPLIT_P2P, or COMMGEMM_CUBLASMP_ALGO
 * (`override`, may be NULL: split_p2p, atomic_p2p or no_overlap); split
 * and fused -> SPLIT_P2P; no_overlap -> NO_OVERLAP. Ring and bulk have no
 * cuBLASMp counterpart: NOT_SUPPORTED. cuBLASMp's multicast algorithms,
 * FUSED and DEFAULT (which may pick one) are never chosen. Pure. */
cgm_status cmp_map_algo(cgm_algo algo, const char *override, int *algo_type);
/* "SPLIT_P2P", ... of a cublasMpMatmulAlgoType_t. Pure. */
const char *cmp_algo_type_name(int algo_type);
/* Checks that sizes[r] are the ceil split of their sum (what a cuBLASMp
 * block distribution with block ceil(total / P) gives each rank); sets
 * *total. NOT_SUPPORTED naming the first rank that differs. Pure. */
cgm_status cmp_check_split(const int64_t *sizes, int nranks, const char *what,
                           int64_t *total);
/* Tests only: 0 makes AG+GEMM pass the caller's X shard to cuBLASMp
 * instead of the staging copy in symmetric memory. Read when a comm is
 * created (set it before; every rank the same). Default 1. */
extern int cmp_test_ag_staging;

/* "CUBLASMP_STATUS_..." */
const char *cmp_status_name(int status);

/* ------------------------------------ epilogues, fp8, attributes */

/* The check hook (pure): CGM_SUCCESS for what the backend runs, else
 * CGM_ERROR_NOT_SUPPORTED saying why and what to do, before any exchange:
 * - options.algo without a cuBLASMp counterpart (cmp_map_algo);
 * - an epilogue on GEMM+RS or GEMM+AR (cuBLASMp applies it to each rank's
 *   partial product; commgemm's act on the reduced rows); an aux whose ld
 *   is not a multiple of 8 (cuBLASMp's EPILOGUE_AUX_LD);
 * - fp8 on AG+GEMM (one B scale for every gathered row), block scaling,
 *   fp8 inputs with a bias not of Y's dtype, an fp8 Y but on GEMM+RS, an
 *   fp8 Y with a bias or with 16-bit / fp32 inputs.
 * Bulk is left to the run entry (which refuses it). */
cgm_status cmp_check_call(const cgm_call *c);
/* AG+GEMM's GELU and GELU_AUX with a bias: cuBLASMp adds it before the
 * activation (GELU_BIAS, GELU_AUX_BIAS); otherwise commgemm adds the bias
 * itself (cmp_plan_output). Pure. */
bool cmp_bias_in_epilogue(const cgm_call *c);
/* cublasMpMatmulEpilogue_t of a checked call's epilogue (DEFAULT for
 * NONE). Pure. */
int cmp_map_epilogue(const cgm_call *c);

/* Matmul descriptor attributes, in the order they are set. */
#define CMP_MAX_ATTRS 16
typedef enum { CMP_ATTR_I32, CMP_ATTR_I64, CMP_ATTR_PTR } cmp_attr_kind;
typedef struct cmp_attr {
    int attr;           /* cublasMpMatmulDescriptorAttribute_t */
    cmp_attr_kind kind; /* 4-byte enum / int64_t / pointer */
    int64_t value;
    const void *ptr;
} cmp_attr;
typedef struct cmp_attrs {
    int n;
    cmp_attr a[CMP_MAX_ATTRS];
} cmp_attrs;

/* What the cached descriptor keeps: TRANSA, TRANSB, ALGO_TYPE, EPILOGUE
 * (ALLREDUCE for the native GEMM+AR), fp8 scale modes (SCALAR_FP32),
 * COMMUNICATION_TYPE (fp32) for an fp8 D, EPILOGUE_AUX_LD and
 * _DATA_TYPE, BIAS_DATA_TYPE (the bias in GELU_BIAS / GELU_AUX_BIAS, or
 * DGELU_BGRAD's bgrad). Pure. */
void cmp_descriptor_attrs(const cgm_call *c, const cmp_problem *p, int algo,
                          cmp_attrs *l);
/* What each call sets again before cublasMpMatmul (pointers that may
 * change between calls of one shape): A_SCALE_POINTER (W's scale),
 * B_SCALE_POINTER (X's), D_SCALE_POINTER (Y's), AMAX_D_POINTER
 * (options.y_amax), EPILOGUE_AUX_POINTER, BIAS_POINTER (bias, or
 * DGELU_BGRAD's bgrad). Pure. */
void cmp_call_attrs(const cgm_call *c, cmp_attrs *l);
/* Sets each attribute of `l` on `mm`, in order; cmp_fail's status and
 * message (naming the attribute and `context`) on the first failure. */
cgm_status cmp_apply_attrs(const cmp_api *api, cublasMpMatmulDescriptor_t mm,
                           const cmp_attrs *l, const char *context);
/* "EPILOGUE", "A_SCALE_POINTER", ... Pure. */
const char *cmp_attr_name(int attr);
/* Records a cuBLASMp failure: NOT_SUPPORTED and INVALID_VALUE on validated
 * operands mean cuBLASMp does not take this combination
 * (CGM_ERROR_NOT_SUPPORTED); ALLOCATION_FAILED is OUT_OF_MEMORY; anything
 * else CGM_ERROR_CUBLAS. The message names `what`, `context`, the status
 * and cublasMpGetStatusString's words. */
cgm_status cmp_fail(const cmp_api *api, cublasMpStatus_t s, const char *what,
                    const char *context);

/* ---------------------------------------------------- symmetric memory */

/* cuBLASMp 0.8+ overlaps only when what it reads and writes through its
 * peers lives in NCCL symmetric memory registered with the grids of the
 * call: its device workspace (required: without it cuBLASMp runs
 * NO_OVERLAP for DEFAULT and refuses explicit overlapped algorithms) and,
 * for AG+GEMM, B ("may only improve performance"; commgemm stages X
 * there). Input and output matrices need no registration.
 *
 * A symmetric buffer here is cublasMpMalloc on the P x 1 grid (ncclMemAlloc
 * + registration there) plus cublasMpBufferRegister on the 1 x P grid (every
 * op's descriptors use both grids), released by cublasMpBufferDeregister
 * on the 1 x P grid and cublasMpFree on the P x 1 grid. All of it is
 * collective over the comm: every rank, the same sizes, the same order. */
#define CMP_RETIRED_MAX 8 /* outgrown buffers kept for captured graphs */

typedef struct cmp_symm {
    const cmp_api *api;
    cublasMpGrid_t grid[2]; /* indexed by cmp_grid */
    void *retired[CMP_RETIRED_MAX];
    int nretired;
} cmp_symm;

/* The symmetric buffers a prepared call needs, from the sizes every rank
 * exchanged (the maxima over the ranks). */
typedef struct cmp_symm_plan {
    size_t ws_bytes;    /* cuBLASMp's device workspace (every op) */
    size_t stage_bytes; /* AG's B, staged (0: B is the caller's X) */
} cmp_symm_plan;

/* Workspace: always symmetric when cuBLASMp asks for one; AG's B: staged
 * when `ag_stage` and some rank has rows (stage_bytes > 0). Pure. */
void cmp_plan_symmetric(cgm_op op, bool ag_stage, size_t stage_bytes,
                        size_t ws_bytes, cmp_symm_plan *plan);

/* One symmetric buffer of `bytes` (> 0) into *out. CGM_ERROR_OUT_OF_MEMORY
 * (ALLOCATION_FAILED) or CGM_ERROR_UNAVAILABLE (anything else: no VMM /
 * symmetric memory on this system) naming `what`, the call and what to
 * do; a buffer allocated but not registered is freed. */
cgm_status cmp_symm_alloc(const cmp_symm *s, size_t bytes, const char *what,
                          void **out);
/* Deregisters and frees p (NULL: nothing). Failures are logged (WARN). */
void cmp_symm_free(const cmp_symm *s, void *p);
/* Grows *buf to `bytes` if smaller: the outgrown buffer is kept among the
 * retired ones (a captured graph may still use it) while room lasts, else
 * freed; then a new one is allocated. The caller makes sure the device no
 * longer uses an outgrown buffer that is freed (synchronize first). On
 * failure *buf is NULL and *cur 0. */
cgm_status cmp_symm_grow(cmp_symm *s, void **buf, size_t *cur, size_t bytes,
                         const char *what);
/* Frees every retired buffer. */
void cmp_symm_free_retired(cmp_symm *s);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_CUBLASMP_H */
