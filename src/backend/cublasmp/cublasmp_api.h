/* The part of NVIDIA cuBLASMp's C API that the cublasmp backend uses,
 * declared here so that commgemm builds without cuBLASMp's headers and
 * loads the library at run time (dlopen).
 *
 * Facts copied from cublasmp.h of cuBLASMp 0.10.0 (wheel
 * nvidia-cublasmp-cu13 0.10.0.3695) and checked against the headers and
 * exported symbols of 0.8.0.2023 and 0.9.1.3056: the entry points, their
 * signatures and the enum values used below are the same in 0.8, 0.9 and
 * 0.10 (0.10 adds CUBLASMP_MATMUL_ALGO_TYPE_FUSED). cuBLASMp 0.7 and older
 * are another API (cublasMpStreamSet, cublasMpMatmulDescriptorAttributeSet,
 * an NVSHMEM workspace): refused at load time.
 *
 * CUDA / cuBLAS / NCCL types appear as their ABI equivalents (opaque
 * pointers, int enums) so that this header and the loader need no CUDA
 * header; cublasmp_backend.c checks the enum values against CUDA's own
 * headers at compile time. */
#ifndef COMMGEMM_CUBLASMP_API_H
#define COMMGEMM_CUBLASMP_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Versions this backend accepts: [CMP_VERSION_MIN, CMP_VERSION_END), as
 * cublasMpGetVersion reports them. Up to 0.9 the code was
 * major * 1000 + minor * 100 + patch (0.9.1 = 901), from 0.10 on it is
 * major * 10000 + minor * 100 + patch (0.10.0 = 1000): for 0.x both read
 * as major = v / 10000, minor = v % 10000 / 100, patch = v % 100
 * (cmp_version_text). */
#define CMP_VERSION_MIN 800  /* 0.8.0: NCCL symmetric memory */
#define CMP_VERSION_END 1100 /* 0.11.0: not seen yet */
#define CMP_SUPPORTED_TEXT "0.8.x, 0.9.x or 0.10.x"
#define CMP_WHEEL "nvidia-cublasmp-cu13==0.10.0.3695" /* the one read */
/* The NCCL cuBLASMp 0.8+ needs (its wheels' Requires-Dist), as
 * ncclGetVersion reports it: major * 10000 + minor * 100 + patch. */
#define CMP_NCCL_MIN 22902
#define CMP_NCCL_MIN_TEXT "2.29.2"

/* cublasMpStatus_t */
typedef enum {
    CUBLASMP_STATUS_SUCCESS = 0,
    CUBLASMP_STATUS_NOT_INITIALIZED = 1,
    CUBLASMP_STATUS_ALLOCATION_FAILED = 2,
    CUBLASMP_STATUS_INVALID_VALUE = 3,
    CUBLASMP_STATUS_ARCHITECTURE_MISMATCH = 4,
    CUBLASMP_STATUS_EXECUTION_FAILED = 5,
    CUBLASMP_STATUS_INTERNAL_ERROR = 6,
    CUBLASMP_STATUS_NOT_SUPPORTED = 7
} cublasMpStatus_t;

/* cublasMpGridLayout_t */
typedef enum {
    CUBLASMP_GRID_LAYOUT_COL_MAJOR = 0,
    CUBLASMP_GRID_LAYOUT_ROW_MAJOR = 1
} cublasMpGridLayout_t;

/* cublasMpMatmulDescriptorAttribute_t (the ones used) */
typedef enum {
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_TRANSA = 0,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_TRANSB = 1,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_COMPUTE_TYPE = 2,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_ALGO_TYPE = 3,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_COMMUNICATION_SM_COUNT = 4,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE = 5,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_POINTER = 6,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_BATCH_STRIDE = 7,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_DATA_TYPE = 8,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE_AUX_POINTER = 9,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE_AUX_LD = 10, /* int64_t */
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE_AUX_DATA_TYPE = 12,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_A_SCALE_POINTER = 16,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_A_SCALE_MODE = 17,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_B_SCALE_POINTER = 18,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_B_SCALE_MODE = 19,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_D_SCALE_POINTER = 22,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_D_SCALE_MODE = 23,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_AMAX_D_POINTER = 24,
    CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_COMMUNICATION_TYPE = 27
} cublasMpMatmulDescriptorAttribute_t;

/* cublasMpMatmulAlgoType_t. A hint: "If not supported, cuBLASMp falls back
 * to the default algorithm" (0.10's header). */
typedef enum {
    CUBLASMP_MATMUL_ALGO_TYPE_DEFAULT = 0,
    CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P = 1,
    CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_MULTICAST = 2,
    CUBLASMP_MATMUL_ALGO_TYPE_ATOMIC_P2P = 3,
    CUBLASMP_MATMUL_ALGO_TYPE_ATOMIC_MULTICAST = 4,
    CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP = 5,
    CUBLASMP_MATMUL_ALGO_TYPE_FUSED = 6 /* 0.10+: GEMM+AR, NVSwitch multimem */
} cublasMpMatmulAlgoType_t;

/* cublasMpMatmulEpilogue_t (the ones used; cuBLASLt's GELU family, with
 * cuBLASLt's meaning: GELU is the tanh form, AUX the pre-activation, BGRAD
 * the sums over D's columns into the bias pointer) */
typedef enum {
    CUBLASMP_MATMUL_EPILOGUE_DEFAULT = 0,
    CUBLASMP_MATMUL_EPILOGUE_ALLREDUCE = 1,
    CUBLASMP_MATMUL_EPILOGUE_BIAS = 4,
    CUBLASMP_MATMUL_EPILOGUE_GELU = 32,
    CUBLASMP_MATMUL_EPILOGUE_GELU_AUX = 32 | 128,
    CUBLASMP_MATMUL_EPILOGUE_GELU_BIAS = 32 | 4,
    CUBLASMP_MATMUL_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
    CUBLASMP_MATMUL_EPILOGUE_DGELU = 64 | 128,
    CUBLASMP_MATMUL_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16
} cublasMpMatmulEpilogue_t;

/* cublasMpMatmulMatrixScale_t (0.6+; the ones named) */
typedef enum {
    CUBLASMP_MATMUL_MATRIX_SCALE_SCALAR_FP32 = 0,
    CUBLASMP_MATMUL_MATRIX_SCALE_VEC128_FP32 = 4,
    CUBLASMP_MATMUL_MATRIX_SCALE_BLK128x128_FP32 = 5
} cublasMpMatmulMatrixScale_t;

/* Values of CUDA / cuBLAS enums that cross the API (cudaDataType_t,
 * cublasComputeType_t, cublasOperation_t), from library_types.h and
 * cublas_api.h of CUDA 13. */
enum {
    CMP_CUDA_R_32F = 0,
    CMP_CUDA_R_16F = 2,
    CMP_CUDA_R_16BF = 14,
    CMP_CUDA_R_8F_E4M3 = 28,
    CMP_CUDA_R_8F_E5M2 = 29,
    CMP_CUBLAS_COMPUTE_32F = 68,
    CMP_CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CMP_CUBLAS_OP_N = 0,
    CMP_CUBLAS_OP_T = 1
};

typedef struct cublasMpHandle *cublasMpHandle_t;
typedef struct cublasMpGrid *cublasMpGrid_t;
typedef struct cublasMpMatrixDescriptor *cublasMpMatrixDescriptor_t;
typedef struct cublasMpMatmulDescriptor *cublasMpMatmulDescriptor_t;

/* cudaStream_t and ncclComm_t are pointers; cudaDataType_t and
 * cublasComputeType_t are int-sized enums. */
typedef void *cmp_stream_t;
typedef void *cmp_nccl_comm_t;

/* Every entry point the backend calls, resolved once per process into one
 * table. `required` symbols must all be there; GetStatusString is
 * optional (messages fall back to the status name). NcclGetVersion is
 * NCCL's ncclGetVersion as cuBLASMp resolves it: the libnccl.so.2 that
 * cuBLASMp and commgemm share in the process. */
typedef struct cmp_api {
    /* required */
    cublasMpStatus_t (*GetVersion)(int *version);
    cublasMpStatus_t (*Create)(cublasMpHandle_t *handle, cmp_stream_t stream);
    cublasMpStatus_t (*Destroy)(cublasMpHandle_t handle);
    cublasMpStatus_t (*SetStream)(cublasMpHandle_t handle, cmp_stream_t stream);
    cublasMpStatus_t (*GridCreate)(int64_t nprow, int64_t npcol,
                                   cublasMpGridLayout_t layout,
                                   cmp_nccl_comm_t comm, cublasMpGrid_t *grid);
    cublasMpStatus_t (*GridDestroy)(cublasMpGrid_t grid);
    /* NCCL symmetric memory (ncclMemAlloc + window registration on the
     * grid's communicator), collective over the grid. */
    cublasMpStatus_t (*Malloc)(cublasMpGrid_t grid, void **ptr, size_t size);
    cublasMpStatus_t (*Free)(cublasMpGrid_t grid, void *ptr);
    cublasMpStatus_t (*BufferRegister)(cublasMpGrid_t grid, void *ptr,
                                       size_t size);
    cublasMpStatus_t (*BufferDeregister)(cublasMpGrid_t grid, void *ptr);
    cublasMpStatus_t (*MatrixDescriptorCreate)(
        int64_t m, int64_t n, int64_t mb, int64_t nb, int64_t rsrc,
        int64_t csrc, int64_t lld, int type, cublasMpGrid_t grid,
        cublasMpMatrixDescriptor_t *desc);
    cublasMpStatus_t (*MatrixDescriptorDestroy)(cublasMpMatrixDescriptor_t d);
    cublasMpStatus_t (*MatmulDescriptorCreate)(cublasMpMatmulDescriptor_t *d,
                                               int compute_type);
    cublasMpStatus_t (*MatmulDescriptorDestroy)(cublasMpMatmulDescriptor_t d);
    cublasMpStatus_t (*MatmulDescriptorSetAttribute)(
        cublasMpMatmulDescriptor_t d, cublasMpMatmulDescriptorAttribute_t attr,
        const void *buf, size_t size);
    cublasMpStatus_t (*Matmul_bufferSize)(
        cublasMpHandle_t handle, cublasMpMatmulDescriptor_t desc, int64_t m,
        int64_t n, int64_t k, const void *alpha, const void *a, int64_t ia,
        int64_t ja, cublasMpMatrixDescriptor_t desc_a, const void *b,
        int64_t ib, int64_t jb, cublasMpMatrixDescriptor_t desc_b,
        const void *beta, const void *c, int64_t ic, int64_t jc,
        cublasMpMatrixDescriptor_t desc_c, void *d, int64_t id, int64_t jd,
        cublasMpMatrixDescriptor_t desc_d, size_t *device_bytes,
        size_t *host_bytes);
    cublasMpStatus_t (*Matmul)(
        cublasMpHandle_t handle, cublasMpMatmulDescriptor_t desc, int64_t m,
        int64_t n, int64_t k, const void *alpha, const void *a, int64_t ia,
        int64_t ja, cublasMpMatrixDescriptor_t desc_a, const void *b,
        int64_t ib, int64_t jb, cublasMpMatrixDescriptor_t desc_b,
        const void *beta, const void *c, int64_t ic, int64_t jc,
        cublasMpMatrixDescriptor_t desc_c, void *d, int64_t id, int64_t jd,
        cublasMpMatrixDescriptor_t desc_d, void *d_work, size_t device_bytes,
        void *h_work, size_t host_bytes);
    /* optional */
    const char *(*GetStatusString)(cublasMpStatus_t status);
    /* NCCL's, reached through cuBLASMp's dependencies */
    int (*NcclGetVersion)(int *version);

    void *dl;             /* dlopen handle */
    char path[512];       /* what was loaded ("" = default search) */
    int version;          /* cublasMpGetVersion */
    int nccl_version;     /* ncclGetVersion of the shared libnccl.so.2 */
    char nccl_path[512];  /* the file that holds it (dladdr) */
} cmp_api;

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_CUBLASMP_API_H */
