/* The p2p executor's enqueue order: runs of comm-queue steps for one
 * program kernel each (plan.h, plan_units; docs/P2P_BACKEND.md). */
#include "plan/plan.h"

static bool joins(const plan_step *s, bool copies_join) {
    if (s->queue != 0) return false;
    return s->kind == PLAN_SIGNAL || s->kind == PLAN_WAIT ||
           (copies_join && s->kind == PLAN_COPY);
}

static bool waits_on(const plan_step *s, const plan_unit *run) {
    for (int d = 0; d < s->ndeps; d++)
        for (int j = 0; j < run->nsteps; j++)
            if (s->deps[d] == run->steps[j]) return true;
    return false;
}

static void emit(plan_unit *units, int *n, const plan_unit *u) {
    units[(*n)++] = *u;
}

/* PLAN_RUNS_AT_FIRST_STEP: the run that starts at comm step i takes the
 * later comm steps that can join it (steps of other queues between them are
 * enqueued after it) and is emitted at once. A run takes consecutive steps
 * of the comm queue, so a comm step is taken iff it is at most the last
 * step taken. */
static int units_at_first_step(const plan *p, bool copies_join, int max_run,
                               plan_unit *units) {
    int n = 0, last_taken = -1;
    plan_unit u = {0};
    for (int i = 0; i < p->nsteps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->queue == 0 && i <= last_taken) continue;
        u.nsteps = 0;
        u.steps[u.nsteps++] = i;
        if (max_run > 1 && joins(s, copies_join))
            for (int j = i + 1; j < p->nsteps && u.nsteps < max_run; j++) {
                const plan_step *t = &p->steps[j];
                if (t->queue != 0) continue;
                if (!joins(t, copies_join) || t->ndeps > 0) break;
                u.steps[u.nsteps++] = j;
            }
        if (s->queue == 0) last_taken = u.steps[u.nsteps - 1];
        emit(units, &n, &u);
    }
    return n;
}

int plan_units(const plan *p, bool copies_join, int max_run,
               plan_run_order order, plan_unit *units) {
    int n = 0;
    plan_unit run = {0}, one = {0};
    if (max_run > PLAN_UNIT_MAX) max_run = PLAN_UNIT_MAX;
    if (max_run < 1) max_run = 1;
    if (order == PLAN_RUNS_AT_FIRST_STEP)
        return units_at_first_step(p, copies_join, max_run, units);
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
