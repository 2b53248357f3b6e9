/* Plan layer: every (op, algorithm) over P, m, splits and compute queues
 * must pass plan_check; plan_build rejects bad requests; the schedules have
 * the shape the backends rely on. Negative cases (the checker catches
 * broken plans) are in test_plan_negative.c. */
#include "plan_test_util.h"

void register_negative_cases(void);

typedef struct combo {
    plan_op op;
    plan_algo algo;
} combo;

static const combo combos[] = {
    {PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT},  {PLAN_OP_AG_GEMM, PLAN_ALGO_RING},
    {PLAN_OP_AG_GEMM, PLAN_ALGO_NO_OVERLAP},
    {PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT},  {PLAN_OP_GEMM_RS, PLAN_ALGO_RING},
    {PLAN_OP_GEMM_RS, PLAN_ALGO_NO_OVERLAP},
    {PLAN_OP_GEMM_AR, PLAN_ALGO_SPLIT},  {PLAN_OP_GEMM_AR, PLAN_ALGO_RING},
    {PLAN_OP_GEMM_AR, PLAN_ALGO_NO_OVERLAP},
    {PLAN_OP_BULK_AG, PLAN_ALGO_BULK},   {PLAN_OP_BULK_AG, PLAN_ALGO_NO_OVERLAP},
    {PLAN_OP_BULK_RS, PLAN_ALGO_BULK},   {PLAN_OP_BULK_RS, PLAN_ALGO_NO_OVERLAP},
};
#define NCOMBOS ((int)(sizeof combos / sizeof combos[0]))

static bool is_bulk(plan_op op) {
    return op == PLAN_OP_BULK_AG || op == PLAN_OP_BULK_RS;
}

/* Structural promises beyond plan_check: no empty steps, splits clamped,
 * every step's chunk consistent with its rows. */
static void check_shape(const plan_set *set, const plan_request *req) {
    for (int r = 0; r < set->nranks; r++) {
        const plan *p = &set->plans[r];
        CHECK(p->splits >= 1 && p->splits <= req->splits);
        if (req->m > 0 && !is_bulk(req->op) &&
            req->algo != PLAN_ALGO_NO_OVERLAP) {
            int64_t block = (req->m + req->nranks - 1) / req->nranks;
            int64_t want = req->splits < block ? req->splits : block;
            CHECK_INT_EQ(p->splits, want);
        }
        CHECK_INT_EQ(p->slot_rows,
                     req->m ? (req->m + req->nranks - 1) / req->nranks : 0);
        for (int i = 0; i < p->nsteps; i++) {
            const plan_step *s = &p->steps[i];
            if (s->kind == PLAN_GEMM && s->src.buf == PLAN_BUF_NONE) {
                CHECK(is_bulk(req->op));
                CHECK_INT_EQ(s->rows, 0);
                CHECK_INT_EQ(s->chunk, -1);
                continue;
            }
            if (s->kind == PLAN_SIGNAL || s->kind == PLAN_WAIT) continue;
            CHECK(s->rows > 0);
            if (s->chunk >= 0) {
                int shard = s->chunk / p->splits;
                CHECK_INT_EQ(shard, s->shard);
            }
            if (s->kind == PLAN_GEMM || s->kind == PLAN_REDUCE)
                CHECK(s->queue >= 1 && s->queue <= req->compute_queues);
            else
                CHECK_INT_EQ(s->queue, 0);
        }
    }
}

static void sweep_one(const plan_request *req) {
    plan_set set;
    build_all(req, &set);
    char what[160];
    snprintf(what, sizeof what, "%s/%s P=%d m=%lld splits=%d queues=%d%s%s",
             plan_op_name(req->op), plan_algo_name(req->algo), req->nranks,
             (long long)req->m, req->splits, req->compute_queues,
             req->has_gemm ? "" : " no-gemm",
             req->has_collective ? "" : " no-collective");
    require_valid(&set, what);
    check_shape(&set, req);
    free_all(&set);
}

/* own_addends: the sweep with the flag set (GEMM+RS split only reads it;
 * the other ops and algorithms must ignore it). */
static bool sweep_own_addends;

static void test_sweep(const void *param) {
    const combo *c = param;
    for (int P = 1; P <= 16; P++) {
        int64_t ms[] = {0, 1, P - 1, P, P + 1, 2 * P - 1, 7, 100, 997};
        for (int mi = 0; mi < (int)(sizeof ms / sizeof ms[0]); mi++)
            for (int splits = 1; splits <= 4; splits++)
                for (int queues = 1; queues <= 2; queues++)
                    for (int parts = 0; parts < (is_bulk(c->op) ? 3 : 1);
                         parts++) {
                        plan_request req = make_request(
                            c->op, c->algo, P, ms[mi], splits, queues);
                        req.has_gemm = parts != 1;
                        req.has_collective = parts != 2;
                        req.own_addends = sweep_own_addends;
                        sweep_one(&req);
                    }
    }
}

/* Many ranks, many splits, three compute queues. */
static void test_large(const void *param) {
    const combo *c = param;
    int Ps[] = {17, 31, 32, 64};
    int64_t ms[] = {5, 63, 64, 1000};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            plan_request req = make_request(c->op, c->algo, Ps[i], ms[j], 7, 3);
            sweep_one(&req);
        }
    plan_request req = make_request(c->op, c->algo, 5, 4099, 64, 4);
    sweep_one(&req);
}

/* ------------------------------------------------------- build rejects */

static void expect_reject(plan_request req, const char *needle) {
    plan p;
    char err[512] = "";
    CHECK_INT_EQ(plan_build(&req, &p, err, sizeof err), -1);
    CHECK_CONTAINS(err, needle);
    CHECK(p.steps == NULL && p.nsteps == 0);
}

static void test_build_rejects(const void *param) {
    (void)param;
    plan_request ok = make_request(PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 4, 10, 2, 1);
    plan_request r = ok;
    r.algo = PLAN_ALGO_BULK;
    expect_reject(r, "does not apply to ag_gemm");
    r = ok;
    r.op = PLAN_OP_BULK_AG;
    expect_reject(r, "split does not apply to bulk_ag");
    r.op = PLAN_OP_BULK_RS;
    r.algo = PLAN_ALGO_RING;
    expect_reject(r, "ring does not apply to bulk_rs");
    r = ok;
    r.nranks = 0;
    expect_reject(r, "nranks must be >= 1, got 0");
    r = ok;
    r.rank = 4;
    expect_reject(r, "rank 4 is outside 0..3");
    r.rank = -1;
    expect_reject(r, "rank -1 is outside");
    r = ok;
    r.m = -5;
    expect_reject(r, "m must be >= 0, got -5");
    r = ok;
    r.splits = 0;
    expect_reject(r, "splits must be >= 1");
    r = ok;
    r.compute_queues = 0;
    expect_reject(r, "compute_queues must be >= 1");
    r = ok;
    r.op = (plan_op)9;
    expect_reject(r, "op 9 is not a plan_op");
    r = ok;
    r.algo = (plan_algo)-2;
    expect_reject(r, "is not a plan_algo");
    r = make_request(PLAN_OP_BULK_RS, PLAN_ALGO_BULK, 2, 10, 1, 1);
    r.has_gemm = r.has_collective = false;
    expect_reject(r, "needs a GEMM, a collective or both");
    char err[64];
    CHECK_INT_EQ(plan_build(NULL, NULL, err, sizeof err), -1);
    plan p;
    CHECK_INT_EQ(plan_build(NULL, &p, err, sizeof err), -1);
    CHECK_CONTAINS(err, "request is NULL");
    CHECK_INT_EQ(plan_build(&r, &p, NULL, 0), -1); /* err may be NULL */
    /* Non-bulk ops ignore has_gemm / has_collective. */
    r = ok;
    r.has_gemm = r.has_collective = false;
    CHECK_INT_EQ(plan_build(&r, &p, err, sizeof err), 0);
    plan_free(&p);
    plan_free(&p); /* twice is harmless */
    plan_free(NULL);
}

/* ------------------------------------------------------- arithmetic */

static void test_shards(const void *param) {
    (void)param;
    for (int P = 1; P <= 70; P++)
        for (int64_t m = 0; m <= 300; m++) {
            int64_t sum = 0, block = (m + P - 1) / P;
            for (int r = 0; r < P; r++) {
                int64_t rows = plan_shard_rows(m, r, P);
                CHECK(rows >= 0 && rows <= block);
                CHECK_INT_EQ(plan_shard_offset(m, r, P), rows ? sum : m);
                if (r > 0 && rows > 0)
                    CHECK(plan_shard_rows(m, r - 1, P) == block);
                sum += rows;
            }
            CHECK_INT_EQ(sum, m);
        }
    CHECK_INT_EQ(plan_shard_rows(10, 4, 4), 0);
    CHECK_INT_EQ(plan_shard_rows(10, -1, 4), 0);
    CHECK_INT_EQ(plan_shard_rows(10, 0, 0), 0);
    CHECK_INT_EQ(plan_shard_rows(10, 3, 4), 1); /* 3,3,3,1 */
    CHECK_INT_EQ(plan_shard_rows(5, 3, 4), 0);  /* 2,2,1,0 */
    CHECK_INT_EQ(plan_shard_offset(5, 3, 4), 5);
    CHECK_INT_EQ(plan_shard_rows(INT64_C(1) << 40, 1, 3),
                 (INT64_C(1) << 40) / 3 + 1);
}

static void test_names(const void *param) {
    (void)param;
    CHECK(!strcmp(plan_op_name(PLAN_OP_GEMM_AR), "gemm_ar"));
    CHECK(!strcmp(plan_op_name(PLAN_OP_COUNT), "invalid"));
    CHECK(!strcmp(plan_algo_name(PLAN_ALGO_NO_OVERLAP), "no_overlap"));
    CHECK(!strcmp(plan_algo_name((plan_algo)-1), "invalid"));
    CHECK(!strcmp(plan_step_kind_name(PLAN_REDUCE), "reduce"));
    CHECK(!strcmp(plan_step_kind_name((plan_step_kind)7), "invalid"));
    CHECK(!strcmp(plan_buffer_name(PLAN_BUF_RECV), "recv"));
    CHECK(!strcmp(plan_buffer_name(PLAN_BUF_COUNT), "invalid"));
}

static void test_format(const void *param) {
    (void)param;
    plan_request req = make_request(PLAN_OP_GEMM_AR, PLAN_ALGO_SPLIT, 3, 7, 2, 2);
    plan_set set;
    build_all(&req, &set);
    static char buf[1 << 16];
    int n = plan_format(&set.plans[1], buf, sizeof buf);
    CHECK_INT_EQ(n, (int)strlen(buf));
    int lines = 0;
    for (int i = 0; i < n; i++) lines += buf[i] == '\n';
    CHECK_INT_EQ(lines, set.plans[1].nsteps + 1);
    CHECK_CONTAINS(buf, "plan gemm_ar/split rank 1 of 3");
    CHECK_CONTAINS(buf, "r1.recv[0] + r1.recv[1] + r1.recv[2] -> r1.output");
    CHECK_CONTAINS(buf, "wait   from r0 free/-1");
    char small[16];
    n = plan_format(&set.plans[1], small, sizeof small);
    CHECK_INT_EQ(n, 15);
    CHECK_INT_EQ((int)strlen(small), 15);
    CHECK_INT_EQ(plan_format(&set.plans[1], small, 0), 0);
    free_all(&set);
}

/* ------------------------------------------------------- schedule shape */

static int first_of(const plan *p, plan_step_kind kind) {
    return find_step(p, kind, -1, PLAN_BUF_NONE, PLAN_BUF_NONE, 0);
}

static void test_ag_split_shape(const void *param) {
    (void)param;
    plan_request req = make_request(PLAN_OP_AG_GEMM, PLAN_ALGO_SPLIT, 4, 40, 2, 2);
    plan_set set;
    build_all(&req, &set);
    const plan *p = &set.plans[2];
    /* Writers let in first: FREE to r-1 (whose first destination is r). */
    CHECK_INT_EQ(p->steps[0].kind, PLAN_SIGNAL);
    CHECK_INT_EQ(p->steps[0].flag.kind, PLAN_FLAG_FREE);
    CHECK_INT_EQ(p->steps[0].peer, 1);
    /* Own rows first, from INPUT, alternating compute queues. */
    const plan_step *g0 = &p->steps[first_of(p, PLAN_GEMM)];
    CHECK_INT_EQ(g0->shard, 2);
    CHECK_INT_EQ(g0->src.buf, PLAN_BUF_INPUT);
    CHECK_INT_EQ(g0->queue, 1);
    CHECK_INT_EQ(p->steps[find_step(p, PLAN_GEMM, -1, PLAN_BUF_NONE,
                                    PLAN_BUF_NONE, 1)].queue, 2);
    /* Pushes in rotated order: r+1 first, straight from INPUT (no staging
     * copy into the own GATHER), after its FREE. */
    int w = first_of(p, PLAN_WAIT);
    CHECK_INT_EQ(p->steps[w].peer, 3);
    CHECK_INT_EQ(p->steps[w].flag.kind, PLAN_FLAG_FREE);
    int push = find_step(p, PLAN_COPY, 3, PLAN_BUF_INPUT, PLAN_BUF_GATHER, 0);
    CHECK(push > w);
    CHECK_INT_EQ(find_step(p, PLAN_COPY, 2, PLAN_BUF_INPUT, PLAN_BUF_GATHER, 0), -1);
    /* A pushed piece's GEMM waits for its READY on its own compute queue. */
    int g = -1;
    for (int i = 0; i < p->nsteps && g < 0; i++)
        if (p->steps[i].kind == PLAN_GEMM && p->steps[i].shard == 1) g = i;
    CHECK(g > 0);
    CHECK_INT_EQ(p->steps[g].src.buf, PLAN_BUF_GATHER);
    CHECK_INT_EQ(p->steps[g - 1].kind, PLAN_WAIT);
    CHECK_INT_EQ(p->steps[g - 1].flag.kind, PLAN_FLAG_READY);
    CHECK_INT_EQ(p->steps[g - 1].peer, 1);
    CHECK_INT_EQ(p->steps[g - 1].queue, p->steps[g].queue);
    /* No staging, so no pullers: the op ends with a GEMM, not a DONE wait. */
    CHECK_INT_EQ(p->steps[p->nsteps - 1].kind, PLAN_GEMM);
    free_all(&set);
}

static void test_rs_split_shape(const void *param) {
    (void)param;
    plan_request req = make_request(PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 4, 40, 1, 1);
    plan_set set;
    build_all(&req, &set);
    const plan *p = &set.plans[1];
    CHECK_INT_EQ(p->recv_slots, 4);
    CHECK_INT_EQ(p->partial_slots, 2);
    int push = find_step(p, PLAN_COPY, -1, PLAN_BUF_PARTIAL, PLAN_BUF_RECV, 0);
    CHECK_INT_EQ(p->steps[push].dst.rank, 2); /* r+1 first */
    CHECK_INT_EQ(p->steps[push].dst.slot, 1); /* slot = my rank */
    CHECK_INT_EQ(p->steps[push - 1].kind, PLAN_GEMM);
    /* The first step waiting for that destination's FREE precedes it. */
    int w = find_step(p, PLAN_WAIT, 2, PLAN_BUF_NONE, PLAN_BUF_NONE, 0);
    CHECK(w >= 0 && w < push && p->steps[w].flag.kind == PLAN_FLAG_FREE);
    /* Own shard last, reduced once from all P slots in rank order. */
    int red = first_of(p, PLAN_REDUCE);
    CHECK_INT_EQ(p->steps[red].ref_count, 4);
    for (int q = 0; q < 4; q++)
        CHECK_INT_EQ(p->refs[p->steps[red].ref_first + q].slot, q);
    CHECK(p->steps[red].final);
    free_all(&set);
}

/* own_addends: my own pieces are final GEMMs that add the P-1
 * peers' RECV slots after waiting for all of them; no REDUCE, no GEMM into
 * RECV[me]; the peers' side (pushes, READY) is unchanged. */
static void test_rs_own_addends_shape(const void *param) {
    (void)param;
    for (int P = 2; P <= 5; P++) {
        plan_request req = make_request(PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, P,
                                        40 * P, 2, 1);
        plan_set plain, add;
        build_all(&req, &plain);
        req.own_addends = true;
        build_all(&req, &add);
        require_valid(&add, "gemm_rs split own_addends");
        for (int r = 0; r < P; r++) {
            const plan *p = &add.plans[r];
            int own = 0, copies = 0, plain_copies = 0;
            CHECK_INT_EQ(first_of(p, PLAN_REDUCE), -1);
            for (int i = 0; i < p->nsteps; i++) {
                const plan_step *s = &p->steps[i];
                copies += s->kind == PLAN_COPY;
                if (s->kind != PLAN_GEMM || s->shard != r) continue;
                own++;
                CHECK(s->final);
                CHECK_INT_EQ(s->dst.buf, PLAN_BUF_OUTPUT);
                CHECK_INT_EQ(s->ref_count, P - 1);
                for (int j = 0; j < s->ref_count; j++) {
                    plan_loc a = p->refs[s->ref_first + j];
                    CHECK_INT_EQ(a.buf, PLAN_BUF_RECV);
                    CHECK(a.slot != r);
                }
                /* Right after the READY waits of its chunk from every
                 * writer, on its own compute queue (not behind the comm
                 * queue's pushes). */
                for (int k = 1; k < P; k++) {
                    const plan_step *w = &p->steps[i - k];
                    CHECK_INT_EQ(w->kind, PLAN_WAIT);
                    CHECK_INT_EQ(w->queue, s->queue);
                    CHECK_INT_EQ(w->flag.kind, PLAN_FLAG_READY);
                    CHECK_INT_EQ(w->flag.chunk, s->chunk);
                }
            }
            CHECK_INT_EQ(own, p->splits);
            for (int i = 0; i < plain.plans[r].nsteps; i++)
                plain_copies += plain.plans[r].steps[i].kind == PLAN_COPY;
            CHECK_INT_EQ(copies, plain_copies);
        }
        free_all(&plain);
        free_all(&add);
    }
}

/* The executors' rule for own_addends: GEMM+RS split, 2 ranks, 2 or more
 * pieces per shard (splits clamped to the shard's rows). */
static void test_prefers_own_addends(const void *param) {
    (void)param;
    plan_request req = make_request(PLAN_OP_GEMM_RS, PLAN_ALGO_SPLIT, 2, 100, 2, 1);
    CHECK(plan_prefers_own_addends(&req));
    req.splits = 1;
    CHECK(!plan_prefers_own_addends(&req));
    req.splits = 4;
    req.m = 3; /* shards of 2 and 1 rows: 2 pieces in the larger */
    CHECK(plan_prefers_own_addends(&req));
    req.m = 2; /* shards of one row: one piece */
    CHECK(!plan_prefers_own_addends(&req));
    req.m = 0;
    CHECK(!plan_prefers_own_addends(&req));
    req.m = 100;
    for (int P = 1; P <= 8; P++) {
        req.nranks = P;
        CHECK_INT_EQ(plan_prefers_own_addends(&req), P == 2);
    }
    req.nranks = 2;
    req.algo = PLAN_ALGO_RING;
    CHECK(!plan_prefers_own_addends(&req));
    req.algo = PLAN_ALGO_NO_OVERLAP;
    CHECK(!plan_prefers_own_addends(&req));
    req.algo = PLAN_ALGO_SPLIT;
    req.op = PLAN_OP_GEMM_AR;
    CHECK(!plan_prefers_own_addends(&req));
    req.op = PLAN_OP_AG_GEMM;
    CHECK(!plan_prefers_own_addends(&req));
}

static void test_sweep_own_addends(const void *param) {
    sweep_own_addends = true;
    test_sweep(param);
    sweep_own_addends = false;
}

static void test_bulk_shape(const void *param) {
    (void)param;
    for (int op = PLAN_OP_BULK_AG; op <= PLAN_OP_BULK_RS; op++) {
        plan_request req = make_request((plan_op)op, PLAN_ALGO_BULK, 4, 9, 3, 2);
        plan_set set;
        build_all(&req, &set);
        const plan *p = &set.plans[0];
        int g = first_of(p, PLAN_GEMM);
        CHECK_INT_EQ(g, 0); /* the GEMM never waits for the collective */
        CHECK_INT_EQ(p->steps[g].ndeps, 0);
        CHECK_INT_EQ(p->steps[g].queue, 1);
        CHECK_INT_EQ(p->splits, 1);
        int red = first_of(p, PLAN_REDUCE);
        if (op == PLAN_OP_BULK_RS) CHECK_INT_EQ(p->steps[red].queue, 2);
        free_all(&set);
        req.algo = PLAN_ALGO_NO_OVERLAP;
        build_all(&req, &set);
        p = &set.plans[0];
        g = first_of(p, PLAN_GEMM);
        CHECK_INT_EQ(g, p->nsteps - 1); /* after the whole collective */
        CHECK(p->steps[g].ndeps >= 1);
        free_all(&set);
        req.algo = PLAN_ALGO_BULK;
        req.has_collective = false;
        build_all(&req, &set);
        CHECK_INT_EQ(set.plans[0].nsteps, 1);
        require_valid(&set, "gemm-only bulk");
        free_all(&set);
        req.has_collective = true;
        req.has_gemm = false;
        build_all(&req, &set);
        CHECK_INT_EQ(first_of(&set.plans[0], PLAN_GEMM), -1);
        free_all(&set);
    }
}

static void test_splits_clamped(const void *param) {
    (void)param;
    /* m = 5 over 4 ranks: shards 2,2,1,0; 4 splits become 2, shard 2 has
     * one piece and shard 3 none. */
    plan_request req = make_request(PLAN_OP_AG_GEMM, PLAN_ALGO_RING, 4, 5, 4, 1);
    plan_set set;
    build_all(&req, &set);
    CHECK_INT_EQ(set.plans[0].splits, 2);
    CHECK_INT_EQ(set.plans[0].flag_chunks, 8);
    int gemms = 0;
    for (int i = 0; i < set.plans[0].nsteps; i++)
        gemms += set.plans[0].steps[i].kind == PLAN_GEMM;
    CHECK_INT_EQ(gemms, 5); /* 2 + 2 + 1 + 0 pieces */
    free_all(&set);
    req = make_request(PLAN_OP_GEMM_AR, PLAN_ALGO_SPLIT, 3, 30, 1000000, 1);
    build_all(&req, &set);
    CHECK_INT_EQ(set.plans[0].splits, 10);
    CHECK_INT_EQ(set.plans[0].flag_chunks, 60); /* AR: two phases */
    free_all(&set);
}

static void register_cases(void) {
    static char names[NCOMBOS][2][64];
    for (int i = 0; i < NCOMBOS; i++) {
        snprintf(names[i][0], sizeof names[i][0], "sweep.%s.%s",
                 plan_op_name(combos[i].op), plan_algo_name(combos[i].algo));
        test_add(names[i][0], test_sweep, &combos[i]);
        snprintf(names[i][1], sizeof names[i][1], "large.%s.%s",
                 plan_op_name(combos[i].op), plan_algo_name(combos[i].algo));
        test_add(names[i][1], test_large, &combos[i]);
    }
    test_add("build.rejects", test_build_rejects, NULL);
    test_add("shards.sum_to_m", test_shards, NULL);
    test_add("names", test_names, NULL);
    test_add("format", test_format, NULL);
    test_add("shape.ag_split", test_ag_split_shape, NULL);
    test_add("shape.rs_split", test_rs_split_shape, NULL);
    test_add("shape.rs_own_addends", test_rs_own_addends_shape, NULL);
    test_add("rule.own_addends", test_prefers_own_addends, NULL);
    /* The flag on every combination: GEMM+RS split uses it, the rest
     * ignore it; all must pass plan_check. */
    static char add_names[NCOMBOS][64];
    for (int i = 0; i < NCOMBOS; i++) {
        snprintf(add_names[i], sizeof add_names[i], "sweep.%s.%s.own_addends",
                 plan_op_name(combos[i].op), plan_algo_name(combos[i].algo));
        test_add(add_names[i], test_sweep_own_addends, &combos[i]);
    }
    test_add("shape.bulk", test_bulk_shape, NULL);
    test_add("shape.splits_clamped", test_splits_clamped, NULL);
    register_negative_cases();
}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_cases);
}
