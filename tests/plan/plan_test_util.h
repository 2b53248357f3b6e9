/* Helpers of the plan tests: build every rank's plan, and edit plans the
 * way a bug would (drop, move, duplicate steps) keeping deps consistent. */
#ifndef COMMGEMM_PLAN_TEST_UTIL_H
#define COMMGEMM_PLAN_TEST_UTIL_H

#include "harness.h"
#include "plan/plan.h"

#define MAX_TEST_RANKS PLAN_CHECK_MAX_RANKS

typedef struct plan_set {
    int nranks;
    plan plans[MAX_TEST_RANKS];
} plan_set;

static inline plan_request make_request(plan_op op, plan_algo algo, int P,
                                        int64_t m, int splits, int queues) {
    plan_request req;
    memset(&req, 0, sizeof req);
    req.op = op;
    req.algo = algo;
    req.nranks = P;
    req.m = m;
    req.splits = splits;
    req.compute_queues = queues;
    req.has_gemm = true;
    req.has_collective = true;
    return req;
}

/* Builds the plans of all ranks (CHECKs success). */
void build_all(const plan_request *req, plan_set *set);
void free_all(plan_set *set);
/* plan_check of the set; returns its status, message in err. */
int check_all(const plan_set *set, char *err, int err_len);
/* Fails the test with the dump of every plan when plan_check rejects. */
void require_valid(const plan_set *set, const char *what);

/* Edits (indices are step indices of one plan). Deps on a dropped step
 * are dropped; deps on a moved step follow it. */
void drop_step(plan *p, int index);
void move_step(plan *p, int from, int to);
void duplicate_step(plan *p, int index); /* the copy lands at index + 1 */
/* Index of the n-th (0-based) step of `kind` matching the optional
 * filters (-1 / PLAN_BUF_NONE = any), or -1. */
int find_step(const plan *p, plan_step_kind kind, int peer, plan_buffer src,
              plan_buffer dst, int nth);

#endif
