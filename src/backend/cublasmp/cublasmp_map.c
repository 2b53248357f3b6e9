/* Pure mappings from commgemm calls to cuBLASMp problems (no GPU).
 *
 * Row-major Y[m, n] is column-major Y^T[n, m], so every op is the
 * column-major product D = op(A) . op(B) with A = W, B = X, D = Y^T and
 * cuBLASMp's (m, n, k) = our (n, m, k):
 *   TN: Y = X . W^T    -> A = W as (k x n) op T, B = X as (k x m) op N
 *   NN: Y = X . W      -> A = W as (n x k) op N, B = X as (k x m) op N
 *   NT: Y = X^T . W    -> A = W as (n x k) op N, B = X as (m x k) op T
 * The split dimensions become 1D block distributions with block
 * ceil(size / P), which give rank r exactly cgm_shard_rows(size, r, P):
 *   AG+GEMM: B split along our m (gathered), A and D along our n
 *            (each rank's W shard and Y columns): D on the P x 1 grid.
 *   GEMM+RS: A and B split along k (the reduction), D along our m
 *            (each rank's Y_r rows): D on the 1 x P grid.
 *   GEMM+AR: native (TN, NO_OVERLAP: cuBLASMp's Matmul + AllReduce),
 *            A and B split along k, D = n x (m P) on the 1 x P grid with
 *            block n x m (every rank's whole Y); else gathered: the
 *            GEMM+RS problem into an fp32 buffer, then an NCCL all-gather
 *            of the reduced rows (cuBLASMp's overlapped GEMM+AllReduce
 *            algorithms all use NVLink multicast, which commgemm never
 *            asks for).
 * A matrix split along its rows (column-major) lives on the P x 1 grid,
 * one split along its columns on the 1 x P grid.
 * Only even shards (cmp_check_even): cuBLASMp's documented layout for its
 * tensor-parallel algorithms is global size = block size x P. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "backend/cublasmp/cublasmp.h"

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static cmp_geom geom(int64_t rows, int64_t cols, int64_t mb, int64_t nb,
                     int64_t lld, cmp_grid grid) {
    cmp_geom g;
    g.rows = rows;
    g.cols = cols;
    g.mb = mb;
    g.nb = nb;
    g.lld = max64(1, lld);
    g.grid = grid;
    return g;
}

bool cmp_native_allreduce(cgm_op op, cgm_layout layout, int algo_type) {
    return op == CGM_OP_GEMM_ALL_REDUCE && layout == CGM_LAYOUT_TN &&
           algo_type == CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP;
}

cgm_status cmp_check_even(cgm_op op, int64_t m, int64_t n_total,
                          int64_t k_total, int nranks) {
    const bool ag = op == CGM_OP_ALL_GATHER_GEMM;
    const int64_t P = nranks;
    const char *name = NULL, *what = NULL;
    int64_t total = 0;
    if (P > 1 && m > 0 && m % P) {
        name = "m";
        what = ag ? "the gathered rows of X" : "the rows of Y";
        total = m;
    } else if (P > 1 && ag && n_total > 0 && n_total % P) {
        name = "n";
        what = "the sum of the ranks' n: their W shards must be equal";
        total = n_total;
    } else if (P > 1 && !ag && k_total > 0 && k_total % P) {
        name = "k";
        what = "the sum of the ranks' k: their contraction shards must be "
               "equal";
        total = k_total;
    }
    if (!name) return CGM_SUCCESS;
    return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                     "the cublasmp backend runs %s only with even shards: "
                     "cuBLASMp's %s algorithm takes P equal blocks (global "
                     "size = block size x P), but %s = %lld (%s) is not "
                     "divisible by P = %lld; use even shards (%s divisible by "
                     "P) or the p2p or nccl backend, which take uneven shards",
                     cgm_op_name(op),
                     ag ? "AllGather+Matmul" : "Matmul+ReduceScatter", name,
                     (long long)total, what, (long long)P, name);
}

cgm_status cmp_map_problem(const cmp_shape *s, cmp_problem *p) {
    if (s->op == CGM_OP_BULK)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend has no bulk overlap: cuBLASMp "
                         "runs one distributed matmul, not a GEMM beside an "
                         "unrelated collective; use p2p or nccl for bulk");
    if ((unsigned)s->layout >= CGM_LAYOUT_COUNT_ || s->nranks < 1 ||
        s->m < 1 || s->n_total < 1 || s->k_total < 1)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cublasmp mapping: expected layout TN/NN/NT, P >= 1 "
                         "and m, n, k >= 1, found layout %d, P = %d, m = %lld, "
                         "n = %lld, k = %lld (empty ops are skipped before "
                         "this point: report it as a bug)",
                         (int)s->layout, s->nranks, (long long)s->m,
                         (long long)s->n_total, (long long)s->k_total);
    cgm_status even = cmp_check_even(s->op, s->m, s->n_total, s->k_total,
                                     s->nranks);
    if (even != CGM_SUCCESS) return even;
    const int64_t P = s->nranks, M = s->m, N = s->n_total, K = s->k_total;
    const int64_t bM = cgm_ceil_div(M, P), bN = cgm_ceil_div(N, P),
                  bK = cgm_ceil_div(K, P);
    const bool w_t = s->layout == CGM_LAYOUT_TN; /* W stored [n, k] */
    const bool x_t = s->layout == CGM_LAYOUT_NT; /* X stored [k, m] */
    p->trans_a = w_t ? CMP_CUBLAS_OP_T : CMP_CUBLAS_OP_N;
    p->trans_b = x_t ? CMP_CUBLAS_OP_T : CMP_CUBLAS_OP_N;
    p->m = N;
    p->n = M;
    p->k = K;
    p->gather_rows = false;
    p->native_ar = false;
    switch (s->op) {
    case CGM_OP_ALL_GATHER_GEMM:
        /* A = W split along n; B = X split along m; D split along n. */
        p->a = w_t ? geom(K, N, K, bN, s->ldw, CMP_GRID_ROW)
                   : geom(N, K, bN, K, s->ldw, CMP_GRID_COL);
        p->b = x_t ? geom(M, K, bM, K, s->ldx, CMP_GRID_COL)
                   : geom(K, M, K, bM, s->ldx, CMP_GRID_ROW);
        p->d = geom(N, M, bN, bM, s->ldy, CMP_GRID_COL);
        break;
    case CGM_OP_GEMM_ALL_REDUCE:
        if (cmp_native_allreduce(s->op, s->layout, s->algo_type)) {
            /* TN: A = W (k x n) and B = X (k x m) split along k on P x 1;
             * D = n x (m P) on 1 x P, block n x m: every rank's D is its
             * whole m x n result (the fp32 buffer: cmp_plan_output). */
            p->a = geom(K, N, bK, N, s->ldw, CMP_GRID_COL);
            p->b = geom(K, M, bK, M, s->ldx, CMP_GRID_COL);
            p->d = geom(N, M * P, N, M, s->ldy, CMP_GRID_ROW);
            p->native_ar = true;
            break;
        }
        /* fall through - the gathered form maps as GEMM+RS */
    case CGM_OP_GEMM_REDUCE_SCATTER:
        /* A and B split along k; D split along m (gathered AR: this rank's
         * rows of the fp32 gather buffer; cmp_plan_output sets its lld). */
        p->a = w_t ? geom(K, N, bK, N, s->ldw, CMP_GRID_COL)
                   : geom(N, K, N, bK, s->ldw, CMP_GRID_ROW);
        p->b = x_t ? geom(M, K, bM, bK, s->ldx, CMP_GRID_ROW)
                   : geom(K, M, bK, bM, s->ldx, CMP_GRID_COL);
        p->d = geom(N, M, N, bM, s->ldy, CMP_GRID_ROW);
        p->gather_rows = s->op == CGM_OP_GEMM_ALL_REDUCE;
        break;
    default:
        return cgm_error(CGM_ERROR_INTERNAL, "cublasmp mapping: op %d",
                         (int)s->op);
    }
    return CGM_SUCCESS;
}

void cmp_plan_output(const cmp_shape *s, int rank, int64_t n_local,
                     cgm_dtype out_dtype, bool has_bias, cmp_output *o) {
    memset(o, 0, sizeof *o);
    const bool rs = s->op == CGM_OP_GEMM_REDUCE_SCATTER;
    const bool ar = s->op == CGM_OP_GEMM_ALL_REDUCE;
    const bool native = cmp_native_allreduce(s->op, s->layout, s->algo_type);
    o->y_rows = rs ? cgm_shard_rows(s->m, rank, s->nranks) : s->m;
    o->y_cols = n_local;
    o->gather = ar && !native;
    /* RS with a padded Y (ld > n): cuBLASMp 0.7's Matmul+ReduceScatter
     * returned INTERNAL_ERROR for an fp32 D with lld > n (every bf16->fp32
     * call with pad = 8), so such a Y is written by the fp32 pass from the
     * dense buffer instead. A rank decides for its own Y: D's lld is
     * local. */
    const bool y_padded = s->ldy > max64(1, n_local);
    /* An fp8 Y is written by cuBLASMp (D_SCALE, AMAX_D) from fp32 sums
     * (COMMUNICATION_TYPE: cmp_descriptor_attrs). */
    const bool fp8_y = cgm_dtype_is_fp8(out_dtype);
    o->fp32_d = ar || (rs && !fp8_y &&
                       (out_dtype != CGM_DTYPE_FP32 || y_padded));
    o->bias_pass = has_bias && !o->fp32_d;
    if (o->fp32_d) {
        o->d_rows = native ? s->m : cgm_shard_rows(s->m, rank, s->nranks);
        o->d_offset = o->gather ? cgm_shard_offset(s->m, rank, s->nranks) *
                                      max64(1, o->y_cols)
                                : 0;
        o->d_lld = max64(1, o->y_cols);
        o->d_bytes = (size_t)(o->y_rows * o->y_cols) * sizeof(float);
    }
}

cgm_status cmp_map_dtype(cgm_dtype dtype, int *cuda_type) {
    switch (dtype) {
    case CGM_DTYPE_FP32: *cuda_type = CMP_CUDA_R_32F; return CGM_SUCCESS;
    case CGM_DTYPE_BF16: *cuda_type = CMP_CUDA_R_16BF; return CGM_SUCCESS;
    case CGM_DTYPE_FP16: *cuda_type = CMP_CUDA_R_16F; return CGM_SUCCESS;
    case CGM_DTYPE_FP8_E4M3: *cuda_type = CMP_CUDA_R_8F_E4M3; return CGM_SUCCESS;
    case CGM_DTYPE_FP8_E5M2: *cuda_type = CMP_CUDA_R_8F_E5M2; return CGM_SUCCESS;
    default:
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cublasmp mapping: expected fp32, bf16, fp16 or fp8, "
                         "found dtype %d (validated calls have no other: "
                         "report it as a bug)", (int)dtype);
    }
}

int cmp_map_compute(cgm_dtype in_dtype, bool allow_tf32) {
    return in_dtype == CGM_DTYPE_FP32 && allow_tf32
               ? CMP_CUBLAS_COMPUTE_32F_FAST_TF32
               : CMP_CUBLAS_COMPUTE_32F;
}

static const struct {
    const char *name;
    int value;
} algo_names[] = {
    /* Never the multicast algorithms (SPLIT_MULTICAST, ATOMIC_MULTICAST,
     * 0.10's FUSED GEMM+AllReduce on NVSwitch multimem) nor cuBLASMp's
     * DEFAULT, which may pick one: NVLink multicast objects can take shared
     * GPUs out of service, so commgemm never asks for them. */
    {"split_p2p", CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P},
    {"atomic_p2p", CUBLASMP_MATMUL_ALGO_TYPE_ATOMIC_P2P},
    {"no_overlap", CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP},
};

cgm_status cmp_map_algo(cgm_algo algo, const char *override, int *algo_type) {
    switch (algo) {
    case CGM_ALGO_AUTO:
        *algo_type = CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P;
        if (!override || !*override) return CGM_SUCCESS;
        for (size_t i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++)
            if (!strcasecmp(override, algo_names[i].name)) {
                *algo_type = algo_names[i].value;
                return CGM_SUCCESS;
            }
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "environment variable COMMGEMM_CUBLASMP_ALGO=\"%s\": "
                         "expected split_p2p, atomic_p2p or no_overlap "
                         "(commgemm never uses cuBLASMp's multicast "
                         "algorithms, its fused NVSwitch GEMM+AllReduce or "
                         "its default, which may pick one)",
                         override);
    case CGM_ALGO_SPLIT_PIPELINED:
    case CGM_ALGO_FUSED: /* the p2p kernel's; cuBLASMp's split here */
        *algo_type = CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P;
        return CGM_SUCCESS;
    case CGM_ALGO_NO_OVERLAP:
        *algo_type = CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP;
        return CGM_SUCCESS;
    default:
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend runs algorithms auto, split "
                         "or fused (cuBLASMp's SPLIT_P2P) and no_overlap "
                         "(NO_OVERLAP), found %s, which cuBLASMp has no "
                         "counterpart of; choose one of those or use p2p or "
                         "nccl for %s",
                         cgm_algo_name(algo), cgm_algo_name(algo));
    }
}

cgm_status cmp_check_split(const int64_t *sizes, int nranks, const char *what,
                           int64_t *total) {
    int64_t sum = 0;
    for (int r = 0; r < nranks; r++) sum += sizes[r];
    *total = sum;
    for (int r = 0; r < nranks; r++) {
        int64_t want = cgm_shard_rows(sum, r, nranks);
        if (sizes[r] == want) continue;
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend needs the ranks' %s to be the "
                         "ceil split of their sum (cuBLASMp's block "
                         "distribution with block ceil(%lld / %d) = %lld): "
                         "expected rank %d to have %lld, found %lld; give "
                         "every rank cgm_shard_rows(total, rank, P) or use "
                         "p2p or nccl",
                         what, (long long)sum, nranks,
                         (long long)cgm_ceil_div(sum > 0 ? sum : 1, nranks),
                         r, (long long)want, (long long)sizes[r]);
    }
    return CGM_SUCCESS;
}

const char *cmp_algo_type_name(int algo_type) {
    switch (algo_type) {
    case CUBLASMP_MATMUL_ALGO_TYPE_DEFAULT: return "DEFAULT";
    case CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P: return "SPLIT_P2P";
    case CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_MULTICAST: return "SPLIT_MULTICAST";
    case CUBLASMP_MATMUL_ALGO_TYPE_ATOMIC_P2P: return "ATOMIC_P2P";
    case CUBLASMP_MATMUL_ALGO_TYPE_ATOMIC_MULTICAST: return "ATOMIC_MULTICAST";
    case CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP: return "NO_OVERLAP";
    case CUBLASMP_MATMUL_ALGO_TYPE_FUSED: return "FUSED";
    default: return "unknown algorithm";
    }
}

const char *cmp_status_name(int status) {
    switch (status) {
    case CUBLASMP_STATUS_SUCCESS: return "CUBLASMP_STATUS_SUCCESS";
    case CUBLASMP_STATUS_NOT_INITIALIZED: return "CUBLASMP_STATUS_NOT_INITIALIZED";
    case CUBLASMP_STATUS_ALLOCATION_FAILED: return "CUBLASMP_STATUS_ALLOCATION_FAILED";
    case CUBLASMP_STATUS_INVALID_VALUE: return "CUBLASMP_STATUS_INVALID_VALUE";
    case CUBLASMP_STATUS_ARCHITECTURE_MISMATCH: return "CUBLASMP_STATUS_ARCHITECTURE_MISMATCH";
    case CUBLASMP_STATUS_EXECUTION_FAILED: return "CUBLASMP_STATUS_EXECUTION_FAILED";
    case CUBLASMP_STATUS_INTERNAL_ERROR: return "CUBLASMP_STATUS_INTERNAL_ERROR";
    case CUBLASMP_STATUS_NOT_SUPPORTED: return "CUBLASMP_STATUS_NOT_SUPPORTED";
    default: return "unknown cuBLASMp status";
    }
}
