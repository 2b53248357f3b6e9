/* What a chunked call needs before it runs (p2p_plans.c): the workspace's
 * slot sizing, the plan cache (schedules and their events, made at a
 * shape's first eager call) and the cross-rank agreement check. */
#ifndef COMMGEMM_P2P_PLANS_H
#define COMMGEMM_P2P_PLANS_H

#include "backend/p2p/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest partial / recv slot counts any schedule of `nranks` may need. */
void p2p_slot_needs(int nranks, int64_t max_m, int *partial_slots,
                    int *recv_slots);
/* The schedule for `req`, built (with its events) on a cache miss; a miss
 * while capturing is CGM_ERROR_INVALID_USAGE. */
cgm_status p2p_plan_lookup(p2p_state *st, const plan_request *req,
                           bool capturing, p2p_plan_entry **out);
/* Frees the plan cache's plans and events. */
void p2p_plan_cache_clear(p2p_state *st);
/* Checks once per call signature that all ranks agree (when
 * config.check_agreement), through one exchange in the workspace. */
cgm_status p2p_check_agreement(p2p_state *st, const cgm_call *call,
                               bool capturing);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_PLANS_H */
