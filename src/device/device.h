/* Device kernels of the GPU backends, C entry points (kernels.cu).
 *
 * Cross-rank readiness flags use epochs: each comm keeps a 64-bit epoch in
 * device memory that a tiny kernel bumps at the start of every op, so that
 * replays of a captured graph see fresh epochs. A signal stores the current
 * epoch into the peer's flag (release, system scope); a wait spins until its
 * own flag >= the epoch (acquire), so flags never go back to zero and no
 * reset can race with a peer. Every wait is bounded by %globaltimer: on
 * expiry it records who never came into host-mapped memory and raises the
 * comm's abort word; every later wait, signal and reduce then does nothing
 * (the op's output is garbage, and the host reports the error). A peer
 * whose comm broke raises the notice word (p2p: through the peer mapping)
 * to the same effect, and the first kernel that sees it records it. */
#ifndef COMMGEMM_DEVICE_H
#define COMMGEMM_DEVICE_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Per-comm device state (device memory of this rank; the p2p backend keeps
 * it in its peer-mapped workspace, so that peers can raise `notice`). */
typedef struct cgm_dev_abort_record cgm_dev_abort_record;
typedef struct cgm_dev_state {
    unsigned long long epoch;
    unsigned int abort;  /* 0, or 1 once a wait expired or a notice was taken */
    unsigned int notice; /* 0, or cgm_dev_notice(teller, culprit): written by
                            a peer whose comm broke (through the peer
                            mapping); every later wait, signal and reduce
                            then does nothing, and the first kernel that
                            sees it fills `record` (its flag_kind
                            CGM_DEV_NOTICE_KIND, peer the culprit, chunk the
                            teller) */
    cgm_dev_abort_record *record; /* device pointer of the host-mapped
                                     record, or NULL (notices not recorded) */
    int rank;                     /* this rank, for the record */
    unsigned int notice_out;      /* the value this rank sends (a copy
                                     source, p2p) */
} cgm_dev_state;

/* What an expired wait saw (host-mapped memory, written by the device). */
struct cgm_dev_abort_record {
    volatile int set; /* written last: 1 when the fields below are valid */
    volatile int waiting_rank;
    volatile int peer; /* the rank that never signalled */
    volatile int flag_kind;
    volatile int chunk;
    volatile int pad;
    volatile unsigned long long epoch;
    volatile unsigned long long flag_value; /* what the flag held */
    volatile unsigned long long waited_ns;
};

/* A peer's notice: rank `teller`'s comm broke because rank `culprit`
 * failed (teller == culprit: the teller itself failed mid-op; otherwise
 * the teller's wait for the culprit expired). Never 0; ranks < 65535. */
#define CGM_DEV_NOTICE_KIND 100 /* the record's flag_kind for a notice */
#define CGM_DEV_NOTICE_MAX_RANKS 65535
#define cgm_dev_notice(teller, culprit) \
    (((unsigned int)((teller) + 1) << 16) | (unsigned int)((culprit) + 1))
#define cgm_dev_notice_teller(notice) ((int)((notice) >> 16) - 1)
#define cgm_dev_notice_culprit(notice) ((int)((notice) & 0xffffu) - 1)

/* Bumps state->epoch by one (single thread). */
cudaError_t cgm_dev_epoch_bump(cgm_dev_state *state, cudaStream_t stream);

/* Stores state->epoch into *remote_flag (a peer-mapped flag), after a
 * system-scope fence: everything that happened-before on this stream
 * (copies included) is visible to the peer that sees the flag. Skipped when
 * the comm aborted. */
cudaError_t cgm_dev_signal(const cgm_dev_state *state,
                           unsigned long long *remote_flag,
                           cudaStream_t stream);

/* Spins until *flag >= state->epoch, or timeout_ns passed (then records
 * {rank, peer, flag_kind, chunk} into *record and sets state->abort).
 * Returns at once when the comm aborted. */
cudaError_t cgm_dev_wait(cgm_dev_state *state,
                         const unsigned long long *flag,
                         cgm_dev_abort_record *record, int rank, int peer,
                         int flag_kind, int chunk,
                         unsigned long long timeout_ns, cudaStream_t stream);

/* dst[rows, cols] = (accumulate ? dst : 0) + sum_i src_i (+ bias), summed in
 * fp32 and converted to dst's dtype once. dtypes: 0 fp32, 1 bf16, 2 fp16
 * (cgm_dtype values). Skipped when the comm aborted.
 * epilogue (cgm_epilogue values; 0 none), on that fp32 value t, before the
 * one rounding (aux: rows x cols of dst's dtype, ld aux_ld):
 *   1 GELU: dst = gelu(t); 2 GELU_AUX: also aux = t (rounded);
 *   3 DGELU, 4 DGELU_BGRAD: dst = t * gelu'(aux) (no accumulate, no bias;
 *   DGELU_BGRAD's column sums: cgm_dev_epilogue_colsum). */
#define CGM_DEV_MAX_SOURCES 64
typedef struct cgm_dev_reduce_args {
    int nsources;
    int src_dtype;
    int dst_dtype;
    int accumulate;
    int64_t rows, cols;
    const void *src[CGM_DEV_MAX_SOURCES];
    int64_t src_ld[CGM_DEV_MAX_SOURCES];
    void *dst;
    int64_t dst_ld;
    const void *bias; /* cols values of dst_dtype, or NULL */
    int epilogue;
    void *aux;
    int64_t aux_ld;
} cgm_dev_reduce_args;

cudaError_t cgm_dev_reduce(const cgm_dev_reduce_args *args,
                           const cgm_dev_state *state, cudaStream_t stream);

/* DGELU_BGRAD's column sums of what cgm_dev_reduce(args) stores before
 * rounding: out[j] = sum over rows i, in row order, of
 * (sum_s src_s(i, j)) * gelu'(aux(i, j)), in fp32 (one thread per column:
 * the same sums on every rank and every run). args: epilogue 4, no
 * accumulate, no bias. rows 0: out is zeroed. */
cudaError_t cgm_dev_epilogue_colsum(const cgm_dev_reduce_args *args,
                                    float *out, const cgm_dev_state *state,
                                    cudaStream_t stream);

/* dst[j] = the fp32 sum over s = 0 .. nslots - 1, in that order, of
 * element j of slot s, rounded once to dst_dtype (0 fp32, 1 bf16, 2 fp16);
 * slot s starts s * stride floats into slots and holds slot_dtype values
 * (same codes); nslots 0 writes zeros. For bias gradients made in parts.
 * state may be NULL (no abort check: cgm_hgemm's DGELU_BGRAD). */
cudaError_t cgm_dev_sum_slots(const float *slots, int slot_dtype, int nslots, int64_t stride,
                              int64_t n, void *dst, int dst_dtype,
                              const cgm_dev_state *state,
                              cudaStream_t stream);

/* A short program of flag waits and flag signals that one kernel runs in
 * order: what a queue of separate wait and signal kernels would do, in one
 * launch (each launch in a graph or a stream costs a few microseconds of
 * dependency latency; small ops are made of them). A WAIT spins until
 * *flag >= the epoch (bounded as cgm_dev_wait, which it names in the abort
 * record); a SIGNAL stores the epoch into the peer's flag after a
 * system-scope fence. */
#define CGM_DEV_PROGRAM_MAX 16
enum { CGM_DEV_OP_SIGNAL = 0, CGM_DEV_OP_WAIT = 1 };
typedef struct cgm_dev_program_op {
    int kind;
    int peer, flag_kind, chunk;   /* WAIT: for the abort record */
    unsigned long long *flag;     /* SIGNAL: the peer's (peer-mapped);
                                     WAIT: this rank's */
} cgm_dev_program_op;
typedef struct cgm_dev_program {
    int nops;
    int rank; /* this rank, for the abort record */
    unsigned long long timeout_ns;
    cgm_dev_abort_record *record;
    cgm_dev_program_op ops[CGM_DEV_PROGRAM_MAX];
} cgm_dev_program;

/* Runs `prog` on `stream` (one thread). Skipped when the comm aborted.
 * cudaErrorInvalidValue for an empty or too long program, an unknown op or
 * a null flag. */
cudaError_t cgm_dev_program_run(const cgm_dev_program *prog,
                                cgm_dev_state *state, cudaStream_t stream);

/* Holds `stream` for `ns` nanoseconds of device time (one thread, sleeping
 * between reads of the global timer). The autotuner enqueues it before its
 * timed runs so that the host enqueues them all while the device waits:
 * the events then time the device, not the host's enqueue rate. */
cudaError_t cgm_dev_hold(unsigned long long ns, cudaStream_t stream);

/* Loads every kernel above on the current device now. CUDA loads kernels
 * lazily by default (CUDA_MODULE_LOADING=LAZY), at their first launch, and
 * loading may wait for the device to go idle: a first wait or signal
 * launched while a kernel spins on a flag (the fused GEMM, another wait)
 * would then never load, and both ranks would spin until the timeout.
 * Backends call this at comm creation, before any op. */
cudaError_t cgm_dev_preload(void);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_DEVICE_H */
