/* Where the time of a p2p op goes (COMMGEMM_TIMELINE, p2p_timeline.c): a
 * timing event before and after every step, a Chrome trace per op. */
#ifndef COMMGEMM_P2P_TIMELINE_H
#define COMMGEMM_P2P_TIMELINE_H

#include "backend/p2p/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* on() reads the variable once; begin() records the op start on the
 * caller's stream, step() an event before/after step i on its queue, end()
 * synchronizes the caller's stream and writes the trace (algo: the file
 * name's, NULL: the plan's). free() with the comm. Fused calls trace pseudo
 * steps (p2p_fused_ops.c). */
bool p2p_timeline_on(p2p_state *st);
cgm_status p2p_timeline_begin(p2p_state *st, int nsteps, cudaStream_t caller);
cgm_status p2p_timeline_step(p2p_state *st, int step, bool after,
                             cudaStream_t stream);
cgm_status p2p_timeline_end(p2p_state *st, const plan *p, const char *algo,
                            cudaStream_t caller);
void p2p_timeline_free(p2p_state *st);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_TIMELINE_H */
