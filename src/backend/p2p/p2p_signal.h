/* The p2p backend's bottom layer (p2p_signal.c): flags and epochs, signals
 * and bounded waits, the notices that end the peers' waits, and what a
 * failure during an op does. docs/P2P_BACKEND.md, "Flags and epochs" and
 * "Failures".
 *
 * Flags: one 8-byte cell per (sender, kind, chunk + 1) in the receiver's
 * flag area (the first bytes of its workspace). A signal stores the op's
 * epoch into the cell; a wait spins until the cell reaches it. Each op
 * starts with a fresh epoch (p2p_fork), so cells are never reset. */
#ifndef COMMGEMM_P2P_SIGNAL_H
#define COMMGEMM_P2P_SIGNAL_H

#include "backend/p2p/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The byte offset of sender src_rank's cell of `flag` in a flag area;
 * flag.chunk + 1 < st->flag_chunks. */
static inline size_t p2p_flag_offset(const p2p_state *st, int src_rank,
                                     plan_flag flag) {
    size_t chunk = (size_t)(flag.chunk + 1);
    return (((size_t)src_rank * PLAN_FLAG_COUNT + (size_t)flag.kind) *
                st->flag_chunks + chunk) * sizeof(unsigned long long);
}

/* The cell a signal of mine to `peer` stores into (peer-mapped), and the
 * cell where I wait for `sender`'s (local). */
static inline unsigned long long *p2p_flag_to(const p2p_state *st, int peer,
                                              plan_flag flag) {
    return (unsigned long long *)((char *)st->ws.peer[peer] +
                                  p2p_flag_offset(st, st->rank, flag));
}
static inline unsigned long long *p2p_flag_from(const p2p_state *st,
                                                int sender, plan_flag flag) {
    return (unsigned long long *)((char *)st->ws.local +
                                  p2p_flag_offset(st, sender, flag));
}

/* The bound of every device wait, in nanoseconds. */
static inline unsigned long long p2p_timeout_ns(const p2p_state *st) {
    return (unsigned long long)st->timeout_ms * 1000000ull;
}

/* A flag kernel on `stream`: stores the current epoch into `cell` (a
 * peer's, or this rank's own) once the stream's earlier work is done.
 * Skipped once the comm aborted. */
cgm_status p2p_signal(const p2p_state *st, unsigned long long *cell,
                      cudaStream_t stream);
/* Stores the comm's current epoch into *cell with the copy engine: an
 * 8-byte copy from the device epoch cell, read when the copy runs (so graph
 * replays signal their own epoch). On `stream` right after a copy it starts
 * once that copy is complete, as the flag kernel would, without a switch
 * from the copy engine to the SMs and back. Unlike the kernel it is not
 * skipped once the comm aborted. */
cgm_status p2p_signal_by_copy(const p2p_state *st, unsigned long long *cell,
                              cudaStream_t stream);
/* A signal right behind a copy-engine copy goes by copy after copies of at
 * least this many bytes, else by a flag kernel: the switch from the copy
 * engine to the SMs and back costs more than the 8-byte copy behind large
 * pushes, less behind small ones. */
#define P2P_SIGNAL_COPY_MIN_BYTES ((size_t)8 << 20)
bool p2p_signal_copy_after(size_t copied_bytes);
/* A wait kernel on `stream` until `sender` has signalled `flag` to this
 * rank in this op, bounded by the comm's timeout; an expiry names the
 * sender, the flag kind and the chunk in the abort record
 * (cgm_p2p_async_error reports it). */
cgm_status p2p_wait(const p2p_state *st, int sender, plan_flag flag,
                    cudaStream_t stream);

/* The start of an op: a fresh epoch on the caller's stream, then queues
 * 0 .. nqueues - 1 start after the caller's work. From here until
 * p2p_join returns, a failure leaves part of the op enqueued: it must end
 * in p2p_abandon_op. */
cgm_status p2p_fork(p2p_state *st, cudaStream_t caller, int nqueues);
/* The end of an op: the caller's stream continues after every queue. */
cgm_status p2p_join(p2p_state *st, cudaStream_t caller, int nqueues);
/* A failure after p2p_fork: this rank enqueued part of the op (the epoch
 * is bumped, signals may be out), so it and its peers are out of step.
 * Joins the `nqueues` queues back into the caller's stream as far as CUDA
 * still allows (a capture must not be left forked), says so in front of
 * the detail, marks the comm broken, tells the peers (p2p_tell_peers;
 * not while capturing, when nothing ran) and returns `status`. */
cgm_status p2p_abandon_op(p2p_state *st, cudaStream_t caller, int nqueues,
                          cgm_status status);

/* This rank's comm broke because rank `culprit` failed (this rank itself,
 * or a peer its wait expired on): raises the notice word of every other
 * rank, the culprit too (it may be alive and waiting in turn), through the
 * peer mapping, by the copy engine, so that their waits give up at once
 * and report it (device.h). A culprit whose process freed its workspace or
 * exited still holds it mapped for us (the driver keeps an imported
 * allocation until its importers close it: test_gpu_ops
 * ipc_store_after_exporter_gone). Once per comm; best effort, bounded (a
 * copy that does not finish within 2 s is left); keeps the thread's error
 * detail. */
void p2p_tell_peers(p2p_state *st, int culprit);
/* An expiry of one of this rank's own waits that nobody reported yet
 * (not a peer's notice): tells the peers, which may wait for this rank in
 * turn. */
void p2p_tell_of_own_expiry(p2p_state *st);
/* The error for a notice `notice` (cgm_dev_notice(teller, culprit)) seen
 * by this rank: CGM_ERROR_PEER_FAILED when the teller failed itself, else
 * CGM_ERROR_TIMEOUT naming the rank the teller's wait expired on. */
cgm_status p2p_notice_error(const p2p_state *st, unsigned int notice);
/* The asynchronous error of a p2p comm: CGM_SUCCESS, or the status of a
 * wait that expired on the device (CGM_ERROR_TIMEOUT naming the rank that
 * never came, the flag and the chunk) or of a peer's notice, with the
 * detail set. Never blocks. The core's backend hook `async_error`. */
cgm_status cgm_p2p_async_error(cgm_comm *comm, void *state);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_SIGNAL_H */
