/* The p2p executor's enqueue order: runs of comm-queue steps held back in
 * plan order (p2p_units.h; docs/P2P_BACKEND.md, "Comm programs"). */
#include "backend/p2p/p2p_units.h"

static bool joins(const plan_step *s, bool copies_join) {
    if (s->queue != 0) return false;
    return s->kind == PLAN_SIGNAL || s->kind == PLAN_WAIT ||
           (copies_join && s->kind == PLAN_COPY);
}

static bool waits_on(const plan_step *s, const p2p_unit *run) {
    for (int d = 0; d < s->ndeps; d++)
        for (int j = 0; j < run->nsteps; j++)
            if (s->deps[d] == run->steps[j]) return true;
    return false;
}

static void emit(p2p_unit *units, int *n, const p2p_unit *u) {
    units[(*n)++] = *u;
}

int p2p_units(const plan *p, bool copies_join, int max_run,
               p2p_unit *units) {
    int n = 0;
    p2p_unit run = {0}, one = {0};
    if (max_run > P2P_UNIT_MAX) max_run = P2P_UNIT_MAX;
    if (max_run < 1) max_run = 1;
    one.nsteps = 1;
    for (int i = 0; i < p->nsteps; i++) {
        const plan_step *s = &p->steps[i];
        bool j = max_run > 1 && joins(s, copies_join);
        /* Enqueue the held-back run before: a comm step that cannot join
         * it (another kind, a wait for another queue, a full run), a WAIT
         * of another queue (it may spin on what the run sends), a step
         * that waits for one of its steps. */
        if (run.nsteps > 0 &&
            ((s->queue == 0 &&
              (!j || s->ndeps > 0 || run.nsteps == max_run)) ||
             (s->queue != 0 && s->kind == PLAN_WAIT) || waits_on(s, &run))) {
            emit(units, &n, &run);
            run.nsteps = 0;
        }
        if (!j) {
            one.steps[0] = i;
            emit(units, &n, &one);
            continue;
        }
        run.steps[run.nsteps++] = i;
    }
    if (run.nsteps > 0) emit(units, &n, &run);
    return n;
}
