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
    "pip install " CMP_TESTED_WHEEL " (into the environment whose "          \
    "site-packages also hold nvidia-nccl-cu13, nvidia-nvshmem-cu13 and "     \
    "nvidia-cublas) or set COMMGEMM_CUBLASMP_LIB=/path/libcublasmp.so.0 "    \
    "(with its NCCL, NVSHMEM and cuBLAS libraries on LD_LIBRARY_PATH)"

/* ------------------------------------------------------------- loader */

/* The process-wide table: the first call loads the library (path from
 * COMMGEMM_CUBLASMP_LIB, else the loader's default search for
 * libcublasmp.so.0, else pip install locations), later calls return the
 * same table or repeat the same error. CGM_ERROR_UNAVAILABLE with the
 * install hint, each path tried and dlerror's words when it cannot load;
 * with "missing symbol cublasMpXxx" when the library lacks an entry point;
 * with the version found when it is not 0.7.x. Thread safe. */
cgm_status cmp_lib_get(const cmp_api **out);

/* One uncached attempt (tests): `path` NULL means the search above minus
 * the environment variable. On success *api owns a dlopen handle that
 * cmp_lib_close releases. */
cgm_status cmp_lib_load(const char *path, cmp_api *api);
void cmp_lib_close(cmp_api *api);

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

/* What the mapping needs: the op, the layout, P, and global sizes. */
typedef struct cmp_shape {
    cgm_op op;
    cgm_layout layout;
    int nranks;
    int64_t m;       /* global rows of the split dimension (our m) */
    int64_t n_total; /* AG: sum of the ranks' n; RS/AR: n */
    int64_t k_total; /* AG: k; RS/AR: sum of the ranks' k */
    int64_t ldx, ldw, ldy; /* effective (ld = 0 resolved to cols) */
} cmp_shape;

typedef struct cmp_problem {
    int trans_a, trans_b; /* CMP_CUBLAS_OP_N / _T */
    int64_t m, n, k;      /* cuBLASMp's: our (n_total, m, k_total) */
    cmp_geom a, b, d;     /* A = W, B = X, D (and C) = Y */
    /* GEMM+AR: cuBLASMp runs the GEMM+RS problem (overlapped), then an
     * ncclAllGather of the reduced fp32 rows gives every rank all of Y.
     * cuBLASMp 0.7's own GEMM+AllReduce has only NO_OVERLAP and
     * SPLIT_MULTICAST algorithms (no P2P one), and commgemm never uses
     * multicast. */
    bool gather_rows;
} cmp_problem;

/* Fills *p, or CGM_ERROR_NOT_SUPPORTED for what cuBLASMp cannot do (bulk,
 * uneven shards: cmp_check_even) with a message that says what to use
 * instead; CGM_ERROR_INVALID_ARGUMENT for sizes < 1. Pure. */
cgm_status cmp_map_problem(const cmp_shape *s, cmp_problem *p);

/* cuBLASMp's tensor-parallel algorithms take only its documented layout:
 * a 1D distribution whose global size is block size x P, i.e. even shards.
 * Other shapes are not its AG+GEMM / GEMM+RS algorithms at all: cuBLASMp
 * 0.7 routes them to its generic matmul (no overlap), and one of them (an
 * NT AG+GEMM with 131 rows over 2 ranks) left a rank inside the call. So
 * the backend refuses them: m must be divisible by P (every op), and so
 * must AG's n_total and RS/AR's k_total. A total <= 0 is not checked (not
 * known yet: m alone is checked before the first-call exchange). Every
 * rank reaches the same verdict (global sizes). NOT_SUPPORTED with the
 * advice to use even shards or the p2p / nccl backend. Pure. */
cgm_status cmp_check_even(cgm_op op, int64_t m, int64_t n_total,
                          int64_t k_total, int nranks);

/* How cuBLASMp's D reaches Y, and who adds the bias.
 *
 * Reductions accumulate in fp32 whatever the dtypes (DESIGN.md), but
 * cuBLASMp 0.7 sums GEMM+RS / GEMM+AR partials in D's type: with a bf16 or
 * fp16 Y it would round every partial. So for RS and AR with a 16-bit Y,
 * cuBLASMp writes an fp32 D (a supported type combination: 16-bit A/B,
 * fp32 C/D, compute 32F) into the backend's buffer, with beta = 0, and one
 * cgm_dev_reduce pass converts it into Y (accumulate and bias there, fp32,
 * one rounding). A dense fp32 Y (and every AG+GEMM, which sums nothing
 * across ranks) is written by cuBLASMp directly. An fp32 RS Y with a padded
 * ld (ld > n) also goes through the dense fp32 buffer and the pass (which
 * writes Y with its ld): cuBLASMp 0.7's Matmul+ReduceScatter returns
 * CUBLASMP_STATUS_INTERNAL_ERROR for an fp32 D with lld > n.
 *
 * The bias never goes to cuBLASMp's BIAS epilogue: 0.7 refuses it
 * (NOT_SUPPORTED) for uneven and empty shards. It is added
 * in the fp32 pass, or by an in-place pass over Y (Y += bias) after a
 * direct cuBLASMp call. */
typedef struct cmp_output {
    bool fp32_d;          /* D is the backend's fp32 buffer */
    bool bias_pass;       /* an in-place bias pass follows a direct call */
    bool gather;          /* AR: ncclAllGather of the fp32 rows, in place */
    int64_t y_rows;       /* this rank's rows of Y (row-major) */
    int64_t y_cols;       /* columns of Y (our n: n_local for AG) */
    int64_t d_rows;       /* fp32 D: rows cuBLASMp writes (RS/AR: m_r) */
    int64_t d_offset;     /* fp32 D: where they start (elements; AR: the
                           * rank's slice of the m x n gather buffer) */
    int64_t d_lld;        /* fp32 D: local leading dimension (= y_cols) */
    size_t d_bytes;       /* fp32 D: bytes this rank needs (0: none) */
} cmp_output;

/* Fills *o for rank `rank` of s->nranks; `n_local` is this rank's n (AG)
 * or n (RS/AR). GEMM+AR always uses the fp32 buffer (m x n: cuBLASMp's
 * RS writes this rank's rows at d_offset, the all-gather fills the rest,
 * one fp32 pass writes Y with accumulate and bias). GEMM+RS uses it for a
 * 16-bit Y and for an fp32 Y whose s->ldy exceeds n_local. Pure. */
void cmp_plan_output(const cmp_shape *s, int rank, int64_t n_local,
                     cgm_dtype out_dtype, bool has_bias, cmp_output *o);

/* cudaDataType_t of fp32 / bf16 / fp16; NOT_SUPPORTED otherwise. Pure. */
cgm_status cmp_map_dtype(cgm_dtype dtype, int *cuda_type);
/* cublasComputeType_t: 32F, or 32F_FAST_TF32 for fp32 inputs with
 * allow_tf32. Pure. */
int cmp_map_compute(cgm_dtype in_dtype, bool allow_tf32);
/* cublasMpMatmulAlgoType_t of an algo hint. `override` is
 * COMMGEMM_CUBLASMP_ALGO (may be NULL): used when algo is AUTO. Ring and
 * bulk have no cuBLASMp counterpart: NOT_SUPPORTED. Pure. */
cgm_status cmp_map_algo(cgm_algo algo, const char *override, int *algo_type);
/* Checks that sizes[r] are the ceil split of their sum (what a cuBLASMp
 * block distribution with block ceil(total / P) gives each rank); sets
 * *total. NOT_SUPPORTED naming the first rank that differs. Pure. */
cgm_status cmp_check_split(const int64_t *sizes, int nranks, const char *what,
                           int64_t *total);
/* Tests only: 0 makes AG+GEMM pass the caller's X shard to cuBLASMp
 * instead of the NVSHMEM staging copy. Read when a comm is created (set it
 * before; every rank the same). Default 1. For diagnosing AG at P > 1. */
extern int cmp_test_ag_staging;

/* "CUBLASMP_STATUS_..." */
const char *cmp_status_name(int status);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_CUBLASMP_H */
