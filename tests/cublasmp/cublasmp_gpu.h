/* Shared pieces of test_cublasmp_gpu (the cublasmp backend on GPUs):
 * the case table entry, the per-call helpers and the report that forked
 * ranks write into shared memory, so that a case killed for a hang still
 * says which call each rank was in. */
#ifndef COMMGEMM_TEST_CUBLASMP_GPU_H
#define COMMGEMM_TEST_CUBLASMP_GPU_H

#include <cuda_runtime_api.h>

#include "backend/cublasmp/cublasmp.h"
#include "harness.h"

#define GPU_MAX_RANKS 8
#define GPU_MAX_STEPS 32

typedef struct gpu_case {
    const char *name;
    int nranks;
    int (*body)(int rank, int nranks, cgm_comm *comm, cudaStream_t stream);
    cgm_backend backend;    /* comm default */
    cgm_backend ag_backend; /* config.op_backend[AG] (DEFAULT: unset) */
    cgm_op op;              /* sweeps and first calls */
    const char *what;       /* for the summary: "ag_gemm", "mixed", ... */
    unsigned shapes;        /* sweeps: bit i = shapes[i] (0: all) */
    int bound_s;            /* ranks still running after this are killed */
    int ag_staging;         /* cmp_test_ag_staging for the ranks */
    cgm_algo algo;          /* per call, sweeps and first calls */
} gpu_case;

/* The case being run (set before the ranks are forked). */
extern const gpu_case *g_case;

/* CALL_REJECTED: refused as the test expected (uneven shards), on every
 * rank, with the backend's advice. */
enum { CALL_OK = 0, CALL_WRONG = 1, CALL_NOT_SUPPORTED = 2, CALL_TIMEOUT = 3,
       CALL_REJECTED = 4, CALL_KINDS = 5 };

enum { PHASE_IDLE = 0, PHASE_CALL = 1, PHASE_SYNC = 2 };

typedef struct rank_report {
    char doing[320]; /* the call in flight */
    int phase;       /* PHASE_* */
    int counts[CALL_KINDS]; /* by CALL_* */
    int finished;    /* the body returned */
    int pid;         /* the rank's process (set first in rank_main) */
    /* Lock-step bodies (body_rejects): the last step this rank finished;
     * per step, whether it saw what the test expected (1) or not (2) and
     * the status it got; the detail of the step it failed. */
    volatile int step;
    volatile unsigned char step_ok[GPU_MAX_STEPS];
    int step_status[GPU_MAX_STEPS];
    char step_detail[400];
} rank_report;

/* MAP_SHARED memory, one entry per rank (NULL outside a case). */
extern rank_report *g_report;

typedef struct call_spec {
    cgm_op op;
    cgm_layout layout;
    cgm_dtype in, out;
    int64_t m, n, k; /* global: AG splits n and m, RS/AR split k */
    int64_t pad;     /* ld = cols + pad */
    bool bias, accumulate;
    cgm_backend backend; /* per call */
    cgm_algo algo;
    uint64_t seed;
    bool expect_reject; /* uneven shards on cublasmp at P > 1: NOT_SUPPORTED */
} call_spec;

/* Whether the cublasmp backend refuses s at P ranks (its even-shards
 * rule: m, and AG's n or RS/AR's k, divisible by P). */
bool cublasmp_refuses(const call_spec *s, int P);

/* Host inputs, the double reference and the device copies of one call. */
typedef struct call_data {
    cgm_matrix x, w, bias, y; /* host (y: initial Y, then the result) */
    cgm_matrix dx, dw, db, dy;
    double *ref;
    int64_t y_rows, n_loc;
    char what[220];
} call_data;

/* Builds this rank's inputs and reference for s (host only). */
void call_setup(int rank, int P, const call_spec *s, call_data *cd);
/* Copies cd's host inputs (and initial Y) into dev's device buffers,
 * allocating them when dev->dx.data etc. are NULL (dev may be cd). */
void call_upload(const call_data *cd, call_data *dev);
/* Issues the op with dev's device buffers. */
cgm_status call_issue(cgm_comm *comm, cudaStream_t stream, const call_spec *s,
                      call_data *dev);
/* Waits for the stream, reads dev's Y and compares with cd's reference:
 * CALL_OK or CALL_WRONG. */
int call_verify(int rank, cudaStream_t stream, const call_spec *s,
                call_data *cd, const call_data *dev);
void call_free_host(call_data *cd);
void call_free_device(call_data *cd);

/* Runs one call on every rank and checks this rank's output (CALL_*); with
 * s->expect_reject, checks the refusal instead (CALL_REJECTED). */
int check_call(int rank, int P, cgm_comm *comm, cudaStream_t stream,
               const call_spec *s);

/* Bodies (cublasmp_gpu_calls.c, cublasmp_gpu_more.c; body_rejects also
 * refuses epilogues and fp8 that cuBLASMp cannot run). */
int body_sweep(int rank, int P, cgm_comm *comm, cudaStream_t stream);
int body_all(int rank, int P, cgm_comm *comm, cudaStream_t stream);
int body_first(int rank, int P, cgm_comm *comm, cudaStream_t stream);
int body_mixed(int rank, int P, cgm_comm *comm, cudaStream_t stream);
int body_rejects(int rank, int P, cgm_comm *comm, cudaStream_t stream);
int body_capture(int rank, int P, cgm_comm *comm, cudaStream_t stream);
/* cublasmp_gpu_epi.c: AG+GEMM's epilogues (bf16 on every shape; fp16 and
 * fp32 on one), GEMM+RS's and GEMM+AR's fp8. */
int body_epilogues(int rank, int P, cgm_comm *comm, cudaStream_t stream);
int body_epilogues_fp16_fp32(int rank, int P, cgm_comm *comm,
                             cudaStream_t stream);
int body_fp8(int rank, int P, cgm_comm *comm, cudaStream_t stream);

#endif
