/* The chunked executor (p2p_chunked.c): a plan_build() schedule on the
 * comm and compute queues, with comm programs for the flag steps between
 * copy-engine copies (p2p_units). */
#ifndef COMMGEMM_P2P_CHUNKED_H
#define COMMGEMM_P2P_CHUNKED_H

#include "backend/p2p/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs `call`, validated and agreed by p2p_run, with the schedule of `req`
 * (built and cached at its first eager call). */
cgm_status p2p_chunked_execute(p2p_state *st, const cgm_call *call,
                               const plan_request *req);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_CHUNKED_H */
