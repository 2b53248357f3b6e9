/* One p2p op (p2p_run.c): the backend table's run entry, for every op. */
#ifndef COMMGEMM_P2P_RUN_H
#define COMMGEMM_P2P_RUN_H

#include "backend/p2p/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs one validated call on the comm's device: first the comm's
 * asynchronous error (a broken comm runs nothing), then the agreement check
 * (once per call signature), the workspace limits, the schedule request
 * (algorithm, splits, compute queues, own_addends) and the executor:
 * fused where the call asks for it and it applies, else chunked. */
cgm_status p2p_run(cgm_comm *comm, void *state, const cgm_call *call);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_RUN_H */
