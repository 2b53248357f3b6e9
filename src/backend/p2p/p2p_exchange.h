/* Host exchanges during ops (p2p_exchange.c): the agreement check's and the
 * autotuner's, through the ranks' workspaces by copy engine, never through
 * the caller's NCCL communicator. */
#ifndef COMMGEMM_P2P_EXCHANGE_H
#define COMMGEMM_P2P_EXCHANGE_H

#include "backend/p2p/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Workspace bytes of the exchange banks for `nranks`. */
size_t p2p_exchange_bytes(int nranks);
/* All-gather of `bytes` (at most P2P_XCHG_PAYLOAD) per rank into recv
 * (rank major), through the ranks' workspaces by copy engine: collective
 * among the comm's ranks, in the same order on each; eager, never inside
 * capture. Bounded by the comm's timeout: CGM_ERROR_TIMEOUT naming the
 * ranks whose records never came (and the peers are told); a notice from a
 * peer ends it at once with that peer's error (p2p_notice_error). `what`
 * names the exchange in messages. */
cgm_status p2p_exchange_host(p2p_state *st, const void *send, void *recv,
                             size_t bytes, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_EXCHANGE_H */
