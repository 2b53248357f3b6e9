/* The fused executor (p2p_fused.c): CGM_ALGO_FUSED, where commgemm's own
 * Hopper GEMM waits for its inputs per tile (p2p_fused_ops.h). */
#ifndef COMMGEMM_P2P_FUSED_H
#define COMMGEMM_P2P_FUSED_H

#include "backend/p2p/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the fused algorithm can run `call`, from what every rank decides
 * alike (else *why, a static string, says why; `why` may be NULL; the call
 * then runs chunked on every rank). */
bool p2p_fused_applies(const p2p_state *st, const cgm_call *call,
                       const char **why);
/* applies() holds and this rank's operands suit the kernel too: the
 * tuner's test (ranks whose lists differ fall back to the default), and
 * whether commgemm's kernel can add a GEMM+RS own piece's partials. */
bool p2p_fused_tunable(const p2p_state *st, const cgm_call *call);
/* Why the fused algorithm cannot take this fp8 call (NULL: it can, or the
 * call is not fp8): an fp8 Y, a bias of another dtype than Y, an epilogue,
 * n or k not a multiple of 16. Both recipes and either fp8_fast_accum run.
 * p2p_fp8_check refuses algorithm fused with it; the autotuner does not
 * offer fused then. */
const char *p2p_fused_fp8_problem(const cgm_call *call);
/* Runs a call it applies to, validated and agreed by p2p_run, with
 * call->splits pieces per shard (0: the default). */
cgm_status p2p_fused_execute(p2p_state *st, const cgm_call *call);
/* Frees the cache, and the tile orders kept for captured graphs. */
void p2p_fused_cache_clear(p2p_state *st);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_FUSED_H */
