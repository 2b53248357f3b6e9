/* The fused algorithm's two schedules (p2p_fused_ops.c). The kernel,
 * commgemm's own Hopper GEMM, waits for its inputs per tile instead of the
 * GEMM being cut into chunks; the flags and workspace are the chunked
 * schedules' (p2p_signal.h), so fused and chunked calls mix freely on one
 * comm. docs/PLAN.md "Fused" describes both.
 *
 * AG+GEMM (rank r): the comm queue signals FREE to every writer, then
 * pushes the own shard, piece by piece, into each peer's GATHER (r+1 first)
 * raising READY(r*S + q) per piece; the compute queue runs ONE kernel over
 * all m rows of GATHER whose producer waits, per tile, for the READY cells
 * of the rows it loads, tiles ordered own shard first, then peers in
 * arrival order (r-1, r-2, ...). The tiles wholly inside the own rows read
 * them from the input (x_own) without waiting; a second queue copies only
 * the own rows of tiles shared with a neighbour's shard into GATHER, then
 * raises the own READY cells.
 *
 * GEMM+RS (rank r): the compute queue computes each peer's rows piece by
 * piece with cuBLASLt into a local partial slot (destination r+1 first),
 * the comm queue pushes each piece into the owner's RECV slot r and raises
 * READY(d*S + q); then ONE kernel computes the own rows and adds, in its
 * epilogue, every peer's partial of the tile after waiting for its READY
 * cell: no reduce pass, and the main loop runs while partials arrive.
 *
 * Both push piece by piece, the copies back to back on the comm queue; each
 * piece's READY follows its copy: by copy engine right behind it for large
 * pieces (p2p_signal_copy_after), else a flag kernel on a second queue that
 * follows the copy through an event, so that no kernel sits between two
 * copies.
 *
 * A rank whose own operands do not suit the kernel (the others' do) keeps
 * the protocol around cuBLASLt: AG waits for every piece and runs one GEMM;
 * RS reduces its own rows per piece. */
#ifndef COMMGEMM_P2P_FUSED_OPS_H
#define COMMGEMM_P2P_FUSED_OPS_H

#include "backend/p2p/p2p.h"
#include "device/hopper_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The trace of a fused call under COMMGEMM_TIMELINE (eager only): every
 * enqueued action is a pseudo plan step; p2p_timeline_end reads req.op,
 * req.m and the steps. st->fused_trace points at it during the call. */
struct p2p_fused_trace {
    plan plan;
    int cap; /* room in plan.steps */
};

/* Rows per piece (the flag granularity): a multiple of the kernel's row
 * tile, so that an RS tile waits for one piece per peer, and at most
 * `splits` pieces per shard. */
int64_t p2p_fused_piece_rows(int64_t m, int nranks, int splits);
/* The kernel arguments both schedules share: operands, epilogue, the
 * comm's epoch, abort and notice words, record and timeout, one SM left
 * free. */
cgm_hgemm_args p2p_fused_kernel_args(const p2p_state *st, const cgm_call *c);

/* The schedules of `c` with S pieces per shard and the entry's events (and
 * AG's tile order); kernel false: this rank's operands do not suit the
 * kernel. dry: only the checks, before anything is enqueued (an error
 * after the fork would leave this rank's epoch behind its peers'). */
cgm_status p2p_fused_ag(p2p_state *st, const cgm_call *c,
                        const p2p_fused_entry *e, int S, bool kernel,
                        bool dry);
cgm_status p2p_fused_rs(p2p_state *st, const cgm_call *c,
                        const p2p_fused_entry *e, int S, bool kernel,
                        bool dry);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_FUSED_OPS_H */
