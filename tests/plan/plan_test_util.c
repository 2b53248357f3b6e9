#include <stdlib.h>

#include "plan_test_util.h"

void build_all(const plan_request *req, plan_set *set) {
    char err[512];
    CHECK(req->nranks >= 1 && req->nranks <= MAX_TEST_RANKS);
    set->nranks = req->nranks;
    for (int r = 0; r < req->nranks; r++) {
        plan_request one = *req;
        one.rank = r;
        if (plan_build(&one, &set->plans[r], err, sizeof err) != 0)
            TEST_FAIL("plan_build(%s/%s P=%d r=%d m=%lld) failed: %s",
                      plan_op_name(req->op), plan_algo_name(req->algo),
                      req->nranks, r, (long long)req->m, err);
    }
}

void free_all(plan_set *set) {
    for (int r = 0; r < set->nranks; r++) plan_free(&set->plans[r]);
    set->nranks = 0;
}

int check_all(const plan_set *set, char *err, int err_len) {
    return plan_check(set->plans, set->nranks, err, err_len);
}

void require_valid(const plan_set *set, const char *what) {
    char err[1024];
    if (check_all(set, err, sizeof err) == 0) return;
    static char dump[1 << 16];
    for (int r = 0; r < set->nranks && r < 4; r++) {
        plan_format(&set->plans[r], dump, sizeof dump);
        fprintf(stderr, "%s", dump);
    }
    TEST_FAIL("%s: plan_check rejected a built plan: %s", what, err);
}

/* Rebuilds p->steps in `order` (old indices; -1 entries skipped). */
static void reorder(plan *p, const int *order, int n) {
    int *where = malloc(sizeof(int) * (size_t)p->nsteps);
    plan_step *steps = malloc(sizeof(plan_step) * (size_t)(n ? n : 1));
    CHECK(where && steps);
    for (int i = 0; i < p->nsteps; i++) where[i] = -1;
    for (int k = n - 1; k >= 0; k--) where[order[k]] = k;
    for (int k = 0; k < n; k++) {
        plan_step s = p->steps[order[k]];
        int kept = 0;
        for (int d = 0; d < s.ndeps; d++)
            if (where[s.deps[d]] >= 0) s.deps[kept++] = where[s.deps[d]];
        s.ndeps = kept;
        steps[k] = s;
    }
    free(p->steps);
    free(where);
    p->steps = steps;
    p->nsteps = n;
}

void drop_step(plan *p, int index) {
    CHECK(index >= 0 && index < p->nsteps);
    int *order = malloc(sizeof(int) * (size_t)p->nsteps);
    int n = 0;
    for (int i = 0; i < p->nsteps; i++)
        if (i != index) order[n++] = i;
    reorder(p, order, n);
    free(order);
}

void move_step(plan *p, int from, int to) {
    CHECK(from >= 0 && from < p->nsteps && to >= 0 && to < p->nsteps);
    int *order = malloc(sizeof(int) * (size_t)p->nsteps);
    int n = 0;
    for (int i = 0; i < p->nsteps; i++) {
        if (i == from) continue;
        if (i == to && to < from) order[n++] = from;
        order[n++] = i;
        if (i == to && to > from) order[n++] = from;
    }
    reorder(p, order, n);
    free(order);
}

void duplicate_step(plan *p, int index) {
    CHECK(index >= 0 && index < p->nsteps);
    int *order = malloc(sizeof(int) * (size_t)(p->nsteps + 1));
    int n = 0;
    for (int i = 0; i < p->nsteps; i++) {
        order[n++] = i;
        if (i == index) order[n++] = i;
    }
    reorder(p, order, n);
    free(order);
}

int find_step(const plan *p, plan_step_kind kind, int peer, plan_buffer src,
              plan_buffer dst, int nth) {
    for (int i = 0; i < p->nsteps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->kind != kind) continue;
        if (peer >= 0 && s->peer != peer) continue;
        if (src != PLAN_BUF_NONE && s->src.buf != src) continue;
        if (dst != PLAN_BUF_NONE && s->dst.buf != dst) continue;
        if (nth-- == 0) return i;
    }
    return -1;
}
