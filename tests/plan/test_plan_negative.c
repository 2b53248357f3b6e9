/* The checker can fail: take a valid plan set, break it the way a bug
 * would, and require plan_check to name the violation. */
#include "plan_test_util.h"

void register_negative_cases(void);

static void build(plan_set *set, plan_op op, plan_algo algo, int P, int64_t m,
                  int splits, int queues) {
    plan_request req = make_request(op, algo, P, m, splits, queues);
    build_all(&req, set);
    require_valid(set, "the plan before corruption");
}

/* plan_check must fail and its message contain every needle given. */
static void expect_violation(plan_set *set, const char *needle,
                             const char *needle2) {
    char err[1024] = "";
    if (check_all(set, err, sizeof err) == 0)
        TEST_FAIL("plan_check accepted a corrupted plan (wanted \"%s\")",
                  needle);
    printf("detected: %s\n", err);
    CHECK_CONTAINS(err, needle);
    if (needle2) CHECK_CONTAINS(err, needle2);
    free_all(set);
}

static void test_drop_wait(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 4, 100, 2, 2);
    plan *p = &set.plans[1];
    drop_step(p, find_step(p, PLAN_WAIT, 2, PLAN_BUF_NONE, PLAN_BUF_NONE, 0));
    expect_violation(&set, "rank 2 step", "never waits for it");
}

/* Dropping both halves of the handshake leaves a data race. */
static void test_drop_wait_and_signal(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_NO_OVERLAP, 4, 100, 2, 2);
    plan *p = &set.plans[1], *q = &set.plans[2];
    drop_step(p, find_step(p, PLAN_WAIT, 2, PLAN_BUF_NONE, PLAN_BUF_NONE, 0));
    drop_step(q, find_step(q, PLAN_SIGNAL, 1, PLAN_BUF_NONE, PLAN_BUF_NONE, 0));
    expect_violation(&set, "rank 1 step", "hazard");
}

static void test_drop_copy(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_NO_OVERLAP, 3, 9, 1, 1);
    plan *p = &set.plans[0];
    drop_step(p, find_step(p, PLAN_COPY, 1, PLAN_BUF_GATHER, PLAN_BUF_GATHER,
                           0));
    expect_violation(&set, "rank 0 step", "holds no data");
}

static void test_duplicate_gemm(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_RING, 4, 17, 2, 1);
    plan *p = &set.plans[2];
    duplicate_step(p, find_step(p, PLAN_GEMM, -1, PLAN_BUF_GATHER,
                                PLAN_BUF_NONE, 1));
    expect_violation(&set, "rank 2 computes row", "2 times");
}

static void test_duplicate_rs_gemm(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 3, 12, 2, 2);
    plan *p = &set.plans[0];
    duplicate_step(p, find_step(p, PLAN_GEMM, -1, PLAN_BUF_INPUT,
                                PLAN_BUF_PARTIAL, 0));
    expect_violation(&set, "rank 0", NULL);
}

static void test_signal_before_copy(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_NO_OVERLAP, 3, 30, 1, 1);
    plan *p = &set.plans[0];
    int copy = find_step(p, PLAN_COPY, 0, PLAN_BUF_INPUT, PLAN_BUF_GATHER, 0);
    int sig = find_step(p, PLAN_SIGNAL, 2, PLAN_BUF_NONE, PLAN_BUF_NONE, 0);
    CHECK(copy >= 0 && sig > copy);
    move_step(p, sig, copy);
    expect_violation(&set, "rank 2 step", "rank 0's gather");
}

/* A ring push before the receiver's FREE: the receiver may still be using
 * its GATHER for the previous op. */
static void test_write_before_free(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_RING, 3, 9, 1, 1);
    plan *p = &set.plans[0];
    int wait = find_step(p, PLAN_WAIT, 1, PLAN_BUF_NONE, PLAN_BUF_NONE, 0);
    int push = find_step(p, PLAN_COPY, 1, PLAN_BUF_INPUT, PLAN_BUF_GATHER, 0);
    CHECK(p->steps[wait].flag.kind == PLAN_FLAG_FREE && push > wait);
    move_step(p, wait, push);
    expect_violation(&set, "writes into rank 1's gather before any step of "
                           "rank 1",
                     "FREE");
}

static void test_rs_write_before_free(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 4, 40, 1, 1);
    plan *p = &set.plans[1];
    int wait = find_step(p, PLAN_WAIT, 2, PLAN_BUF_NONE, PLAN_BUF_NONE, 0);
    int push = find_step(p, PLAN_COPY, 2, PLAN_BUF_PARTIAL, PLAN_BUF_RECV, 0);
    move_step(p, wait, push);
    expect_violation(&set, "rank 1 step", "before any step of rank 2");
}

/* Double-buffered partials: without the dep on the push that reads a slot,
 * the GEMM two destinations later overwrites it while it is read. */
static void test_war_hazard(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 4, 8, 1, 1);
    plan *p = &set.plans[1];
    int g = find_step(p, PLAN_GEMM, -1, PLAN_BUF_INPUT, PLAN_BUF_PARTIAL, 2);
    CHECK(g >= 0);
    CHECK_INT_EQ(p->steps[g].ndeps, 1);
    p->steps[g].ndeps = 0;
    expect_violation(&set, "rank 1 step", "hazard");
}

static void test_ring_war_hazard(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_RING, 5, 10, 1, 2);
    plan *p = &set.plans[0];
    int g = -1;
    for (int i = 0; i < p->nsteps && g < 0; i++)
        if (p->steps[i].kind == PLAN_GEMM && p->steps[i].ndeps == 1 &&
            p->steps[p->steps[i].deps[0]].kind == PLAN_COPY)
            g = i;
    CHECK(g >= 0);
    p->steps[g].ndeps = 0;
    expect_violation(&set, "write-after-read hazard", "partial");
}

static void test_deadlock(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 2, 8, 1, 1);
    for (int r = 0; r < 2; r++) { /* READY only after waiting for READY */
        plan *p = &set.plans[r];
        int sig = find_step(p, PLAN_SIGNAL, 1 - r, PLAN_BUF_NONE,
                            PLAN_BUF_NONE, 0);
        int wait = find_step(p, PLAN_WAIT, 1 - r, PLAN_BUF_NONE,
                             PLAN_BUF_NONE, 0);
        move_step(p, sig, wait);
    }
    expect_violation(&set, "deadlock", "never runs");
}

/* Pushing AG: a push before the receiver's FREE may overwrite a GATHER the
 * receiver's previous op still reads. */
static void test_push_before_free(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 3, 9, 1, 1);
    plan *p = &set.plans[0];
    int wait = find_step(p, PLAN_WAIT, 1, PLAN_BUF_NONE, PLAN_BUF_NONE, 0);
    int push = find_step(p, PLAN_COPY, 1, PLAN_BUF_INPUT, PLAN_BUF_GATHER, 0);
    CHECK(wait >= 0 && p->steps[wait].flag.kind == PLAN_FLAG_FREE);
    CHECK(push > wait);
    move_step(p, wait, push);
    expect_violation(&set, "writes into rank 1's gather before any step of "
                           "rank 1",
                     NULL);
}

/* Pushing AG: a GEMM of pushed rows without the READY wait on its compute
 * queue reads rows that may not have landed. */
static void test_gemm_before_ready(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 2, 8, 2, 2);
    plan *p = &set.plans[1];
    int wait = -1;
    for (int i = 0; i < p->nsteps && wait < 0; i++)
        if (p->steps[i].kind == PLAN_WAIT && p->steps[i].queue > 0 &&
            p->steps[i].flag.kind == PLAN_FLAG_READY)
            wait = i;
    CHECK(wait >= 0);
    int chunk = p->steps[wait].flag.chunk;
    drop_step(p, wait);
    expect_violation(&set, "to rank 1, which never waits for it", NULL);

    /* Both halves dropped: the GEMM races the push. */
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 2, 8, 2, 2);
    p = &set.plans[1];
    plan *q = &set.plans[0];
    drop_step(p, wait);
    int sig = -1;
    for (int i = 0; i < q->nsteps && sig < 0; i++)
        if (q->steps[i].kind == PLAN_SIGNAL && q->steps[i].flag.chunk == chunk &&
            q->steps[i].flag.kind == PLAN_FLAG_READY)
            sig = i;
    CHECK(sig >= 0);
    drop_step(q, sig);
    expect_violation(&set, "rank 1 step", "rank 1's gather");
}

/* Without DONE, a peer may still be pulling from my GATHER when my next op
 * rewrites it. */
static void test_missing_done(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_NO_OVERLAP, 3, 9, 1, 1);
    plan *p = &set.plans[1], *q = &set.plans[2];
    int done = -1;
    for (int i = 0; i < p->nsteps; i++)
        if (p->steps[i].kind == PLAN_SIGNAL && p->steps[i].peer == 2 &&
            p->steps[i].flag.kind == PLAN_FLAG_DONE)
            done = i;
    drop_step(p, done);
    int wait = -1;
    for (int i = 0; i < q->nsteps; i++)
        if (q->steps[i].kind == PLAN_WAIT && q->steps[i].peer == 1 &&
            q->steps[i].flag.kind == PLAN_FLAG_DONE)
            wait = i;
    drop_step(q, wait);
    expect_violation(&set, "does not happen-before rank 2's last step",
                     "rank 1 step");
}

static void test_double_contribution(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 3, 9, 1, 1);
    plan *p = &set.plans[2];
    const plan_step *red = &p->steps[find_step(p, PLAN_REDUCE, -1,
                                               PLAN_BUF_NONE, PLAN_BUF_NONE,
                                               0)];
    p->refs[red->ref_first + 1] = p->refs[red->ref_first];
    expect_violation(&set, "adds the contribution of rank 0", "twice");
}

static void test_missing_contribution(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_BULK_RS, PLAN_ALGO_BULK, 3, 9, 1, 1);
    plan *p = &set.plans[0];
    p->steps[find_step(p, PLAN_REDUCE, -1, PLAN_BUF_NONE, PLAN_BUF_NONE, 0)]
        .ref_count--;
    expect_violation(&set, "lacks the contribution of rank 2", NULL);
}

/* own_addends: an own GEMM that adds a peer's slot must wait for
 * that peer's READY; one that adds its own partial twice or misses a
 * peer's is caught like a REDUCE. */
static void build_own_addends(plan_set *set) {
    plan_request req = make_request(PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 3, 9, 1,
                                    1);
    req.own_addends = true;
    build_all(&req, set);
    require_valid(set, "the plan before corruption");
}

static int own_gemm(const plan *p, int r) {
    for (int i = 0; i < p->nsteps; i++)
        if (p->steps[i].kind == PLAN_GEMM && p->steps[i].shard == r)
            return i;
    return -1;
}

static void test_own_addend_unwaited(const void *param) {
    (void)param;
    plan_set set;
    build_own_addends(&set);
    plan *p = &set.plans[1];
    int g = own_gemm(p, 1);
    move_step(p, g, g - 2); /* before its READY waits on its queue */
    expect_violation(&set, "reads row 3 of rank 1's recv[0]", "no write to it");
}

static void test_own_addend_missing(const void *param) {
    (void)param;
    plan_set set;
    build_own_addends(&set);
    plan *p = &set.plans[0];
    p->steps[own_gemm(p, 0)].ref_count--;
    expect_violation(&set, "final gemm of row", "lacks the contribution");
}

static void test_own_addend_twice(const void *param) {
    (void)param;
    plan_set set;
    build_own_addends(&set);
    plan *p = &set.plans[2];
    const plan_step *g = &p->steps[own_gemm(p, 2)];
    p->refs[g->ref_first + 1] = p->refs[g->ref_first];
    expect_violation(&set, "gemm adds the contribution of rank", "twice");
}

static void test_wrong_slot(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 4, 16, 1, 1);
    plan *p = &set.plans[0];
    int push = find_step(p, PLAN_COPY, 1, PLAN_BUF_PARTIAL, PLAN_BUF_RECV, 0);
    p->steps[push].dst.slot = 2; /* rank 2's slot on rank 1 */
    expect_violation(&set, "rank", NULL);
}

static void test_invisible_buffer(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_NO_OVERLAP, 2, 4, 1, 1);
    plan *p = &set.plans[0];
    int pull = find_step(p, PLAN_COPY, 1, PLAN_BUF_GATHER, PLAN_BUF_GATHER, 0);
    p->steps[pull].src.buf = PLAN_BUF_OUTPUT;
    expect_violation(&set, "peers cannot see", NULL);
}

static void test_write_input(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_AR, PLAN_ALGO_RING, 3, 9, 1, 1);
    plan *p = &set.plans[0];
    int pull = find_step(p, PLAN_COPY, 1, PLAN_BUF_GATHER, PLAN_BUF_OUTPUT, 0);
    p->steps[pull].dst.buf = PLAN_BUF_INPUT;
    expect_violation(&set, "writes the caller's input", NULL);
}

static void test_ar_missing_publish(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_AR, PLAN_ALGO_NO_OVERLAP, 3, 9, 1, 1);
    plan *p = &set.plans[1];
    drop_step(p, find_step(p, PLAN_COPY, 1, PLAN_BUF_OUTPUT, PLAN_BUF_GATHER,
                           0));
    expect_violation(&set, "rank 1's gather", "holds no data");
}

static void test_missing_final_reduce(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_RING, 4, 8, 1, 1);
    plan *p = &set.plans[3];
    int last = -1;
    for (int i = 0; i < p->nsteps; i++)
        if (p->steps[i].kind == PLAN_REDUCE && p->steps[i].final) last = i;
    drop_step(p, last);
    expect_violation(&set, "rank 3's output row 6 is written 0 times", NULL);
}

static void test_bulk_gemm_twice(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_BULK_AG, PLAN_ALGO_BULK, 2, 5, 1, 2);
    duplicate_step(&set.plans[1], 0);
    expect_violation(&set, "rank 1 runs the bulk op's GEMM 2 times", NULL);
}

static void test_bad_structure(const void *param) {
    (void)param;
    plan_set set;
    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 3, 9, 1, 2);
    plan *p = &set.plans[1];
    int red = find_step(p, PLAN_REDUCE, -1, PLAN_BUF_NONE, PLAN_BUF_NONE, 0);
    p->steps[red].deps[0] = red;
    expect_violation(&set, "does not point to an earlier step", NULL);

    build(&set, PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 3, 9, 1, 2);
    set.plans[2].steps[0].queue = 3;
    expect_violation(&set, "is on queue 3", NULL);

    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_NO_OVERLAP, 3, 9, 1, 1);
    set.plans[0].steps[0].rows = 100;
    expect_violation(&set, "rows are not within", NULL);

    build(&set, PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 3, 9, 1, 1);
    plan tmp = set.plans[0];
    set.plans[0] = set.plans[1];
    set.plans[1] = tmp;
    expect_violation(&set, "plans[0] was built for rank 1", NULL);

    plan_request a = make_request(PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 2, 9, 1, 1);
    plan_request b = a;
    b.m = 10;
    char err[256];
    a.rank = 0;
    b.rank = 1;
    CHECK_INT_EQ(plan_build(&a, &set.plans[0], err, sizeof err), 0);
    CHECK_INT_EQ(plan_build(&b, &set.plans[1], err, sizeof err), 0);
    set.nranks = 2;
    expect_violation(&set, "plans[1] differs from plans[0] in m", NULL);

    CHECK_INT_EQ(plan_check(NULL, 2, err, sizeof err), -1);
    CHECK_CONTAINS(err, "plans is NULL");
    CHECK_INT_EQ(plan_check(set.plans, 0, err, sizeof err), -1);
    CHECK_INT_EQ(plan_check(set.plans, 65, NULL, 0), -1);
}

void register_negative_cases(void) {
    test_add("negative.drop_wait", test_drop_wait, NULL);
    test_add("negative.drop_wait_and_signal", test_drop_wait_and_signal, NULL);
    test_add("negative.drop_copy", test_drop_copy, NULL);
    test_add("negative.duplicate_gemm", test_duplicate_gemm, NULL);
    test_add("negative.duplicate_rs_gemm", test_duplicate_rs_gemm, NULL);
    test_add("negative.signal_before_copy", test_signal_before_copy, NULL);
    test_add("negative.write_before_free", test_write_before_free, NULL);
    test_add("negative.rs_write_before_free", test_rs_write_before_free, NULL);
    test_add("negative.war_hazard", test_war_hazard, NULL);
    test_add("negative.ring_war_hazard", test_ring_war_hazard, NULL);
    test_add("negative.deadlock", test_deadlock, NULL);
    test_add("negative.missing_done", test_missing_done, NULL);
    test_add("negative.push_before_free", test_push_before_free, NULL);
    test_add("negative.gemm_before_ready", test_gemm_before_ready, NULL);
    test_add("negative.double_contribution", test_double_contribution, NULL);
    test_add("negative.missing_contribution", test_missing_contribution, NULL);
    test_add("negative.wrong_slot", test_wrong_slot, NULL);
    test_add("negative.invisible_buffer", test_invisible_buffer, NULL);
    test_add("negative.write_input", test_write_input, NULL);
    test_add("negative.ar_missing_publish", test_ar_missing_publish, NULL);
    test_add("negative.missing_final_reduce", test_missing_final_reduce, NULL);
    test_add("negative.bulk_gemm_twice", test_bulk_gemm_twice, NULL);
    test_add("negative.bad_structure", test_bad_structure, NULL);
    test_add("negative.own_addend_unwaited", test_own_addend_unwaited, NULL);
    test_add("negative.own_addend_missing", test_own_addend_missing, NULL);
    test_add("negative.own_addend_twice", test_own_addend_twice, NULL);
}
