/* The p2p executor's enqueue order of a schedule (p2p_units.c): pure C, no
 * CUDA (it includes only the plan layer), so that test_p2p_units checks it
 * on every build.
 *
 * Every step of p once, in units. A unit of one step is enqueued alone; a
 * unit of 2..max_run steps is a run of consecutive comm-queue (queue 0)
 * SIGNAL, WAIT and (copies_join) COPY steps, of which only the first may
 * have deps; the chunked executor enqueues each stretch of flag steps of a
 * run as one program kernel. A run is held back while plan order goes on
 * and emitted before the first of: a comm step that cannot join it, a WAIT
 * of another queue, a step that depends on one of its steps, the end.
 * Hence (test_p2p_units): every queue keeps plan order; a step comes after
 * the steps it depends on; no WAIT of another queue comes before a comm
 * step that precedes it in plan order (streams may share a hardware queue,
 * so a comm step enqueued behind a spinning wait that needs it would never
 * run). units needs room for p->nsteps; max_run is clamped to
 * 1..P2P_UNIT_MAX (1: every step alone). Returns the unit count. */
#ifndef COMMGEMM_P2P_UNITS_H
#define COMMGEMM_P2P_UNITS_H

#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define P2P_UNIT_MAX 16
typedef struct p2p_unit {
    int nsteps;
    int steps[P2P_UNIT_MAX];
} p2p_unit;

int p2p_units(const plan *p, bool copies_join, int max_run, p2p_unit *units);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_UNITS_H */
