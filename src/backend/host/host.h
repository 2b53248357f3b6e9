/* The host backend: ranks are processes on one machine; peer memory is
 * memfd shared memory mapped into every rank (the fds travel over Unix
 * sockets with SCM_RIGHTS, the twin of CUDA IPC handles); a comm thread
 * runs the plan's queue 0 while compute threads run GEMM chunks through
 * OpenBLAS. See docs/HOST_BACKEND.md. */
#ifndef COMMGEMM_HOST_H
#define COMMGEMM_HOST_H

#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/core.h"
#include "plan/plan.h"

extern const cgm_backend_vtable cgm_host_backend;

#define HOST_MAGIC 0x686f7374636f6d6dull /* "hostcomm" */
#define HOST_PROTOCOL_VERSION 5 /* 5: notices and the ready round */
#define HOST_NOTICE_MAGIC 0x686f73746e6f7465ull /* "hostnote" */
#define HOST_READY_MAGIC 0x686f737472656479ull  /* "hostredy" */
/* Pieces per shard at most; bounds the flag array of the control block. */
#define HOST_MAX_SPLITS 16
/* Flag values are epoch * HOST_EPOCH_STRIDE + occurrence within the op. */
#define HOST_EPOCH_STRIDE 4096u
#define HOST_PLAN_CACHE 8
/* Payload words of one exchange on the agreement channel (the
 * autotuner's exchanges carry up to 31 words). */
#define HOST_XCHG_WORDS 32

/* Peer-visible segments of one rank. */
typedef enum host_segment {
    HOST_SEG_CONTROL = 0,
    HOST_SEG_GATHER = 1,
    HOST_SEG_RECV = 2,
    HOST_SEG_COUNT = 3
} host_segment;

/* Lifecycle of a rank, published in its control block. */
enum { HOST_RANK_LIVE = 0, HOST_RANK_FAILED = 1, HOST_RANK_CLOSED = 2 };

/* Head of each rank's control segment; the flag array follows it.
 * Flags live in the *receiver's* block, indexed by the sender. */
typedef struct host_control {
    uint64_t magic;
    int32_t rank, nranks, pid, chunks;
    _Atomic int32_t state;        /* HOST_RANK_* */
    _Atomic int32_t failed_rank;  /* who this rank blamed, or -1 */
    _Atomic int32_t failed_status;
    int32_t pad_;
    /* Cross-rank agreement: slot (n & 1) holds this rank's exchange number
     * n in `sig_epoch[slot]` (exchanges are numbered on their own, since
     * ops between two exchanges need not synchronize all ranks), the op
     * number it belongs to in `sig_op[slot]`, the call's signature and a
     * payload (word 0: the kind of exchange; the autotuner's words follow).
     * Agreement checks and the autotuner's exchanges share this one
     * channel, so that ranks in different ones fail with MISMATCH instead
     * of waiting for each other. */
    _Atomic uint64_t sig_epoch[2];
    _Atomic uint64_t sig_op[2];
    _Atomic int64_t sig[2][CGM_SIGNATURE_WORDS];
    _Atomic int64_t payload[2][HOST_XCHG_WORDS];
    _Atomic uint64_t flags[]; /* [src rank][PLAN_FLAG_COUNT][chunks] */
} host_control;

typedef struct host_peer {
    void *base[HOST_SEG_COUNT]; /* mappings (this rank's own too) */
    size_t bytes[HOST_SEG_COUNT];
    int fd; /* socket to the peer, -1 for self or when closed */
    pid_t pid;
} host_peer;

/* One cached plan with what the executor derives from it once. */
typedef struct host_plan_entry {
    bool used;
    uint64_t last_use;
    plan_request req;
    plan plan;
    uint32_t *occurrence; /* per step: SIGNAL/WAIT occurrence of its flag */
} host_plan_entry;

typedef struct host_state {
    int rank, nranks;
    int listen_fd;
    int memfd[HOST_SEG_COUNT];
    host_peer *peers;  /* nranks */
    int chunks;        /* flag slots per (src, kind): nranks * splits + 1 */
    int64_t width_max; /* max(max_n, max_k): row width bound of workspaces */
    uint64_t epoch;    /* ops issued on this comm */
    uint64_t xchg;     /* agreement-channel exchanges issued on this comm */
    uint64_t plan_clock;
    host_plan_entry plans[HOST_PLAN_CACHE];
    /* Per-call scratch, grown as needed, kept between calls. */
    float *x32, *w32, *partial;
    size_t x32_bytes, w32_bytes, partial_bytes;
    void *x_packed; /* AG+GEMM with fp8 X: this rank's packed rows (host_fp8.c) */
    size_t x_packed_bytes;
} host_state;

/* ---- host_mesh.c ---- */
/* What a rank that gives up on cgm_comm_create sends every peer it is
 * connected to before it closes: its status, the rank it gave up on
 * (-1: none) and its message. Its size is no other message's. */
typedef struct host_notice {
    uint64_t magic; /* HOST_NOTICE_MAGIC */
    int32_t rank, blamed, status, pad_;
    char message[240];
} host_notice;

/* The rendezvous of one rank in progress: its sockets (st->peers[r].fd,
 * and connections accepted whose hello has not come), and what its waits
 * know about them. */
typedef struct host_mesh {
    cgm_comm *comm;
    host_state *st;
    int64_t deadline;
    int blamed;    /* the rank the failure is about, -1: none */
    bool *parked;  /* [nranks]: the next message is an ordinary one, read in its turn: not watched */
    bool *replied; /* [nranks]: a lower rank's hello reply was taken */
    /* Takes a lower rank's hello reply when it comes during another wait
     * (host_mesh_take: it must not wait). */
    cgm_status (*take_reply)(struct host_mesh *m, int r);
    int *pending; /* accepted connections without a hello yet */
    int npending, pending_cap;
    struct pollfd *poll;
    int *poll_rank;
} host_mesh;

typedef enum host_peek {
    HOST_PEEK_NOTHING,
    HOST_PEEK_MESSAGE, /* an ordinary message, left in place */
    HOST_PEEK_NOTICE,  /* a notice, taken */
    HOST_PEEK_CLOSED   /* the peer's end */
} host_peek;

cgm_status host_mesh_open(host_mesh *m, cgm_comm *comm, host_state *st, int64_t deadline, int pending_cap);
/* On failure (`status`), first tells every peer and pending connection
 * (a notice); closes the pending connections, frees the rest. */
void host_mesh_close(host_mesh *m, cgm_status status);
/* A notice of `status` (with m->blamed and cgm_last_error()) to one
 * connection; never blocks. */
void host_mesh_tell(const host_mesh *m, int fd, cgm_status status);
host_peek host_mesh_peek(int fd, host_notice *notice);
/* The failure a notice tells, as this rank's: CGM_ERROR_PEER_FAILED (or
 * TIMEOUT, MISMATCH as it says) naming the rank it gave up on, else the
 * rank that sent it. */
cgm_status host_mesh_notice_failure(host_mesh *m, const host_notice *n);
/* Waits until one of `fds` is readable (*ready its index) or `until`
 * (cgm_now_ns) passes (*ready = -1), watching beside them every connected
 * peer that is not parked: its end or its notice is returned as the
 * failure (CGM_ERROR_PEER_FAILED naming the rank that exited). */
cgm_status host_mesh_wait(host_mesh *m, const int *fds, int nfds, int64_t until, int *ready);
/* Waits (to the deadline, watching) until rank r's next message is an
 * ordinary one. */
cgm_status host_mesh_await(host_mesh *m, int r, const char *what);
/* host_recv_message / host_send_message of rank r, as the mesh sees them:
 * a closed connection is the notice that came before it, or the peer's
 * end. */
cgm_status host_mesh_recv(host_mesh *m, int r, void *buf, size_t len, int *fds, int nfds, const char *what);
/* host_mesh_recv of a message host_mesh_peek saw come: never waits. */
cgm_status host_mesh_take(host_mesh *m, int r, void *buf, size_t len, int *fds, int nfds, const char *what);
cgm_status host_mesh_send(host_mesh *m, int r, const void *buf, size_t len, const int *fds, int nfds,
                          const char *what);
int host_remaining_ms(int64_t deadline_ns);

/* ---- host_rendezvous.c ---- */
cgm_status host_rendezvous(cgm_comm *comm, host_state *st);
/* Tests: when set, called as this rank reaches each point of its
 * rendezvous ("joined": every lower rank connected and every higher one
 * accepted; "hellos": every hello reply taken; "exchanging": the first
 * round of the segment exchange done; "exchanged": every round done,
 * before the ready round), to make it exit there. */
extern void (*host_rendezvous_hook)(const cgm_comm *comm, const char *point);
void host_rendezvous_close(host_state *st);
/* One message of the rendezvous on socket `fd` (SOCK_SEQPACKET), to or
 * from rank `peer` (-1: not known yet), `what` naming it in errors. Sends
 * `len` bytes and `nfds` descriptors (at most HOST_SEG_COUNT). */
cgm_status host_send_message(int fd, int peer, const void *buf, size_t len,
                             const int *fds, int nfds, const char *what);
/* Waits until `deadline` (cgm_now_ns) for one message of exactly `len`
 * bytes with exactly `nfds` descriptors (stored in fds); the comm gives the
 * messages its rendezvous and timeout. Whatever descriptors came with a
 * message it refuses are closed. */
cgm_status host_recv_message(const cgm_comm *comm, int fd, int peer,
                             void *buf, size_t len, int *fds, int nfds,
                             int64_t deadline, const char *what);

/* ---- host_sync.c ---- */
host_control *host_ctrl(const host_state *st, int rank);
/* Stores `value` into flag (src = this rank) of rank `dst`, never lowering
 * it. */
void host_flag_signal(host_state *st, int dst, plan_flag_kind kind, int chunk,
                      uint64_t value);
/* Why a wait ended early or a peer is gone: CGM_SUCCESS while `peer` is
 * alive and has not failed; else PEER_FAILED with `what` in the message. */
typedef struct host_wait {
    const char *what;   /* "signal READY for chunk 5" */
    uint64_t op_number; /* epoch */
    const char *op_name;
    atomic_int *abort;  /* optional: set when a sibling thread failed */
} host_wait;
/* Waits until flag (src = `src`, this rank's block) >= value, bounded by
 * the comm timeout. Writes the failure message into msg. */
cgm_status host_flag_wait(const cgm_comm *comm, host_state *st, int src,
                          plan_flag_kind kind, int chunk, uint64_t value,
                          const host_wait *w, char *msg, size_t msg_len);
/* Publishes this rank's signature for op `epoch`, reads every peer's and
 * compares them (cgm_signature_compare). *blamed: the rank a timeout or
 * peer failure is about. */
cgm_status host_check_agreement(const cgm_comm *comm, host_state *st,
                                const cgm_call *call, uint64_t epoch,
                                const char *op_name, int *blamed);
/* The autotuner's exchanges (cgm_tune_hooks.agree / .allgather) on the
 * agreement channel, each taking an op number: `words` (< HOST_XCHG_WORDS)
 * int64 of every rank into all (rank major). host_tune_agree_words also checks
 * the call's signature like host_check_agreement (CGM_ERROR_MISMATCH on
 * every rank, comm usable). */
cgm_status host_tune_agree_words(const cgm_comm *comm, host_state *st,
                           const cgm_call *call, const int64_t *mine,
                           int words, int64_t *all);
cgm_status host_allgather_words(const cgm_comm *comm, host_state *st,
                                const int64_t *mine, int words, int64_t *all);
/* The max over ranks of `*bits` (an amax as float bits, host_fp8.c), in
 * one exchange on the agreement channel, bounded by the timeout; `op_name`
 * names the op in errors. */
cgm_status host_max_bits(const cgm_comm *comm, host_state *st, uint32_t *bits,
                         const char *op_name);
/* This rank rejected its own call (bad arguments) where its peers run the
 * op's exchange: takes part in that exchange with the rejection (status,
 * and the start of cgm_last_error()) as its entry, so that the peers return CGM_ERROR_MISMATCH at
 * once naming this rank instead of waiting out timeout_ms; every rank's
 * comm stays usable. Waits (bounded) for every rank to arrive; keeps
 * cgm_last_error(). */
void host_announce_rejection(const cgm_comm *comm, host_state *st, const char *op_name,
                             cgm_status status);
/* Waits (bounded by the timeout) until every rank reached the same
 * barrier, one exchange on the agreement channel; `what` names it in
 * errors. A timeout or peer failure is published as this rank's. */
cgm_status host_barrier(const cgm_comm *comm, host_state *st, const char *what);
/* Tells peers this rank failed (after a timeout or peer failure). */
void host_publish_failure(host_state *st, cgm_status status, int blamed);

/* ---- host_epilogue.c ---- */
/* A call's epilogue while its plan runs (the header's "Epilogues"). */
typedef struct host_epilogue {
    const cgm_call *call;
    bool rows;       /* GELU, GELU_AUX, DGELU, DGELU_BGRAD: host_epilogue_row
                        applies to every row of the caller's output */
    float *colsum;   /* DGELU_BGRAD: [slots][n], the column sums of the rows
                        written under each slot (a plan step) */
    int64_t *first;  /* [slots]: the first output row of each slot, -1: none */
    int slots;
} host_epilogue;
/* Does the call's epilogue change the output rows (GELU, GELU_AUX, DGELU,
 * DGELU_BGRAD)? */
bool host_epilogue_acts(const cgm_call *call);
/* Sets e up for `call` with `slots` slots of column sums (DGELU_BGRAD). */
cgm_status host_epilogue_begin(host_epilogue *e, const cgm_call *call, int slots);
void host_epilogue_free(host_epilogue *e);
/* Row y_row of the caller's output (aux is shaped like it): v[n] holds r
 * and becomes what the row stores before its rounding (r + bias added here
 * where `bias` is not NULL); GELU_AUX writes aux's row, DGELU_BGRAD adds
 * the row to slot `slot`'s sums. Only for e->rows; any thread, one slot
 * per thread. */
void host_epilogue_row(host_epilogue *e, int slot, int64_t y_row, float *v, int64_t n, const cgm_matrix *bias);
/* After the plan ran: writes options.bgrad. DGELU_BGRAD: the slots' sums
 * (GEMM+RS: summed over the ranks, collective, bounded); BGRAD: the sums
 * of op(A) along k from `a32`, the fp32 values of A as stored. */
struct host_run;
cgm_status host_epilogue_end(const cgm_comm *comm, host_state *st, const host_epilogue *e,
                             const struct host_run *run, const cgm_matrix *a32);

/* ---- host_exec.c ---- */
typedef struct host_run {
    const cgm_call *call;
    plan_op op;
    const host_plan_entry *entry;
    uint64_t epoch;
    const char *op_name;
    /* Out: the amax of the fp8 output rows this rank wrote (calls with
     * y_amax), as the bits of a non-negative float (host_fp8.c). */
    uint32_t amax_bits;
    /* The call's epilogue (host_epilogue_begin before host_execute). */
    host_epilogue epi;
} host_run;
cgm_status host_execute(cgm_comm *comm, host_state *st, host_run *run);

/* ---- host_gemm.c ---- */
/* A view of rows of one buffer: element (i, j) of the view (row i of the
 * range, column j < cols) is at data[(i * ld + j) * size], or at
 * data[(j * ld + i) * size] when transposed. */
typedef struct host_view {
    char *data;
    cgm_dtype dtype;
    int64_t rows, cols, ld;
    bool transposed;
} host_view;
float host_view_get(const host_view *v, int64_t i, int64_t j);
void host_view_set(const host_view *v, int64_t i, int64_t j, float value);
/* Converts a matrix (any layout as stored) to dense fp32 in *buf (grown as
 * needed): out[i * cols + j] = m(i, j); fp8: the value, code times scale. */
cgm_status host_to_fp32(const cgm_matrix *m, float **buf, size_t *bytes);
/* out (rows x n, fp32, ld_out) = A (rows x k view, fp32 data) . op(W) where
 * W is fp32 with ld_w, w_trans when W is stored [n, k]. */
void host_sgemm(const host_view *a, const float *w, int64_t ld_w, bool w_trans,
                int64_t n, int64_t k, float *out, int64_t ld_out, float beta);
/* Writes one output row: y = (accumulate ? y : 0) + v (+ bias). */
void host_store_row(void *y_row, cgm_dtype dtype, const float *v, int64_t n,
                    const cgm_matrix *bias, bool accumulate);

/* ---- host_fp8.c ---- */
/* Bytes of one packed row of AG+GEMM's fp8 X: its k fp8 bytes, padding to
 * 4 bytes, then its scales (TENSOR: the shard's one; BLOCK_1X128:
 * ceil(k / 128)); 0 for k = 0. What GATHER holds for such a call. */
int64_t host_fp8_row_bytes(int64_t k, cgm_scaling scaling);
/* out (dense fp32, rows x cols) = the values of an fp8 matrix (stored
 * [rows, k], TN), each code times its scale. */
void host_fp8_dequantize(const cgm_matrix *m, float *out);
/* This rank's fp8 shard x as packed rows in *buf (grown as needed):
 * *packed is a byte matrix (dtype CGM_DTYPE_FP8_E4M3 standing for bytes)
 * of x->rows rows of host_fp8_row_bytes. */
cgm_status host_fp8_pack(const cgm_matrix *x, void **buf, size_t *bytes, cgm_matrix *packed);
/* out (rows x k fp32) = the values of packed rows (view v) of `dtype`. */
void host_fp8_unpack(const host_view *v, cgm_dtype dtype, cgm_scaling scaling, int64_t k, float *out);
/* x_gathered's rows [row0, row0 + v->rows) from packed rows: the bytes,
 * and where xg->scale is set, the scales (TENSOR: the one of the shard of
 * each row, at its rank's index; m rows over nranks). */
void host_fp8_to_gathered(const host_view *v, int64_t row0, const cgm_matrix *xg, int64_t m, int nranks,
                          int64_t k);
/* Writes one fp8 output row: sat(rne((v + bias) * scale)); returns the
 * row's amax as the bits of |v + bias| (NaN above everything). */
uint32_t host_fp8_store_row(uint8_t *y_row, cgm_dtype dtype, const float *v, int64_t n, const cgm_matrix *bias,
                            float scale);
/* *amax_bits = max(*amax_bits, row_amax), from any thread. */
void host_fp8_amax_merge(_Atomic uint32_t *amax_bits, uint32_t row_amax);

#endif /* COMMGEMM_HOST_H */
