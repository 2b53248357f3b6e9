/* The p2p executor's enqueue order (p2p_units): over every schedule of
 * small m, P up to 8, every rank, splits and compute queues, with and
 * without copies in runs, the order keeps every queue's plan order, puts
 * each step after the steps it depends on, forms only valid runs, and
 * never enqueues a WAIT of a compute queue before a comm step that precedes
 * it in plan order (the rule whose breach hung AG+GEMM on the GPUs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p_units.h"
#include "harness.h"

/* 0, or -1 with the first violation in err. pos[i]: the unit of step i. */
static int check_units(const plan *p, const p2p_unit *u, int n, int max_run,
                       bool copies_join, char *err, size_t len) {
    int *pos = malloc((size_t)(p->nsteps ? p->nsteps : 1) * sizeof *pos);
    int rc = -1;
    for (int i = 0; i < p->nsteps; i++) pos[i] = -1;
    for (int k = 0; k < n; k++) {
        if (u[k].nsteps < 1 || u[k].nsteps > max_run) {
            snprintf(err, len, "unit %d has %d steps, expected 1..%d", k, u[k].nsteps, max_run);
            goto out;
        }
        for (int j = 0; j < u[k].nsteps; j++) {
            int i = u[k].steps[j];
            if (i < 0 || i >= p->nsteps || pos[i] >= 0) {
                snprintf(err, len, "step %d enqueued twice or out of range (unit %d)", i, k);
                goto out;
            }
            pos[i] = k;
            const plan_step *s = &p->steps[i];
            if (u[k].nsteps > 1) {
                bool kind_ok = s->kind == PLAN_SIGNAL || s->kind == PLAN_WAIT ||
                               (copies_join && s->kind == PLAN_COPY);
                if (s->queue != 0 || !kind_ok || (j > 0 && s->ndeps > 0) ||
                    (j > 0 && i <= u[k].steps[j - 1])) {
                    snprintf(err, len, "unit %d: step %d (%s, queue %d, %d deps) cannot be its step %d",
                             k, i, plan_step_kind_name(s->kind), s->queue, s->ndeps, j);
                    goto out;
                }
            }
        }
    }
    for (int i = 0; i < p->nsteps; i++) {
        const plan_step *s = &p->steps[i];
        if (pos[i] < 0) {
            snprintf(err, len, "step %d never enqueued", i);
            goto out;
        }
        for (int d = 0; d < s->ndeps; d++)
            if (pos[s->deps[d]] > pos[i] ||
                (pos[s->deps[d]] == pos[i] && s->deps[d] != i)) {
                snprintf(err, len, "step %d (unit %d) before step %d it depends on (unit %d)", i, pos[i],
                         s->deps[d], pos[s->deps[d]]);
                goto out;
            }
        for (int j = 0; j < i; j++) {
            const plan_step *t = &p->steps[j];
            if (t->queue == s->queue && pos[j] > pos[i]) {
                snprintf(err, len, "queue %d: step %d (unit %d) after step %d (unit %d)", s->queue, j, pos[j], i,
                         pos[i]);
                goto out;
            }
            if (s->kind == PLAN_WAIT && s->queue != 0 && t->queue == 0 && pos[j] > pos[i]) {
                snprintf(err, len, "the WAIT of queue %d, step %d (unit %d), is enqueued before comm step %d (unit %d)",
                         s->queue, i, pos[i], j, pos[j]);
                goto out;
            }
        }
    }
    rc = 0;
out:
    free(pos);
    return rc;
}

static void test_all_schedules(const void *param) {
    (void)param;
    static const int sizes[] = {1, 2, 3, 4, 8}, run_limits[] = {1, 2, P2P_UNIT_MAX};
    static const int64_t ms[] = {1, 7, 64, 1000};
    int checked = 0, runs = 0;
    char err[512];
    for (int op = 0; op < PLAN_OP_COUNT; op++)
        for (int algo = 0; algo < PLAN_ALGO_COUNT; algo++)
            for (size_t pi = 0; pi < sizeof sizes / sizeof sizes[0]; pi++)
                for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                    for (int S = 1; S <= 4; S++)
                        for (int cq = 1; cq <= 3; cq++)
                            for (int r = 0; r < sizes[pi]; r++) {
                                plan_request req;
                                memset(&req, 0, sizeof req);
                                req.op = (plan_op)op;
                                req.algo = (plan_algo)algo;
                                req.nranks = sizes[pi];
                                req.rank = r;
                                req.m = ms[mi];
                                req.splits = S;
                                req.compute_queues = cq;
                                req.has_gemm = req.has_collective = true;
                                plan p;
                                memset(&p, 0, sizeof p);
                                if (plan_build(&req, &p, err, (int)sizeof err) != 0) continue;
                                p2p_unit *u = calloc((size_t)(p.nsteps ? p.nsteps : 1), sizeof *u);
                                for (int cj = 0; cj < 2; cj++)
                                    for (size_t li = 0; li < 3; li++) {
                                        int n = p2p_units(&p, cj, run_limits[li], u);
                                        if (check_units(&p, u, n, run_limits[li], cj, err, sizeof err) != 0)
                                            TEST_FAIL("%s %s P=%d r=%d m=%lld S=%d cq=%d copies=%d max=%d: %s",
                                                      plan_op_name(req.op), plan_algo_name(req.algo), req.nranks,
                                                      r, (long long)req.m, S, cq, cj, run_limits[li], err);
                                        for (int k = 0; k < n; k++) runs += u[k].nsteps > 1;
                                        if (run_limits[li] == 1) CHECK_INT_EQ(n, p.nsteps);
                                        checked++;
                                    }
                                free(u);
                                plan_free(&p);
                            }
    printf("%d orders of schedules checked, %d runs formed\n", checked, runs);
    CHECK(checked > 1000);
    CHECK(runs > 100);
}

/* The kind of step j of unit u. */
static plan_step_kind kind_of(const plan *p, const p2p_unit *u, int j) {
    return p->steps[u->steps[j]].kind;
}

/* The plan of AG split, P = 2, rank 0, m = 2048, one piece, one compute
 * queue. */
static void ag_split_p2_plan(plan *p) {
    plan_request req;
    char err[512];
    memset(&req, 0, sizeof req);
    req.op = PLAN_OP_AG_GEMM;
    req.algo = PLAN_ALGO_SPLIT;
    req.nranks = 2;
    req.m = 2048;
    req.splits = 1;
    req.compute_queues = 1;
    req.has_gemm = req.has_collective = true;
    if (plan_build(&req, p, err, (int)sizeof err) != 0) TEST_FAIL("plan_build: %s", err);
}

/* AG split, P = 2, rank 0, one piece: the comm steps "signal free, wait
 * free, push, signal ready" form one run, enqueued after the own GEMM (it
 * does not wait on them) and before the compute queue's wait for the
 * peer's rows. Enqueued after that wait instead, the run is what the GPUs
 * hung on; the checker says so. */
static void test_ag_split_order(const void *param) {
    (void)param;
    plan p;
    char err[512];
    ag_split_p2_plan(&p);
    p2p_unit u[16];
    CHECK(p.nsteps <= 16);
    int n = p2p_units(&p, true, P2P_UNIT_MAX, u);
    CHECK_INT_EQ(n, 4);
    CHECK_INT_EQ(kind_of(&p, &u[0], 0), PLAN_GEMM);
    CHECK_INT_EQ(u[1].nsteps, 4);
    CHECK_INT_EQ(kind_of(&p, &u[1], 0), PLAN_SIGNAL);
    CHECK_INT_EQ(kind_of(&p, &u[1], 1), PLAN_WAIT);
    CHECK_INT_EQ(kind_of(&p, &u[1], 2), PLAN_COPY);
    CHECK_INT_EQ(kind_of(&p, &u[1], 3), PLAN_SIGNAL);
    CHECK_INT_EQ(kind_of(&p, &u[2], 0), PLAN_WAIT);
    CHECK_INT_EQ(p.steps[u[2].steps[0]].queue, 1);
    CHECK_INT_EQ(check_units(&p, u, n, P2P_UNIT_MAX, true, err, sizeof err), 0);
    p2p_unit swapped = u[1];
    u[1] = u[2];
    u[2] = swapped;
    CHECK_INT_EQ(check_units(&p, u, n, P2P_UNIT_MAX, true, err, sizeof err), -1);
    CHECK_CONTAINS(err, "is enqueued before comm step");
    plan_free(&p);
}

static void register_cases(void) {
    test_add("all_schedules", test_all_schedules, NULL);
    test_add("ag_split_order", test_ag_split_order, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
