/* Faults on the host backend: ranks that die, never come, skip an op or
 * disagree about it. Every wait is bounded (~2 s here), statuses and
 * messages name the rank, mismatches leave the comm usable, and nothing is
 * left in /dev/shm. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/un.h>
#include <stdbool.h>
#include <unistd.h>

#include <cblas.h>

#include "backend/host/host.h"
#include "core/core.h"
#include "mp_common.h"

enum { TIMEOUT_MS = 2000, SLACK_MS = 2500 };

/* Shapes of one op call; a rank that disagrees changes one field. */
typedef struct call_shape {
    int op; /* 0 ag_gemm, 1 gemm_rs */
    int64_t m, n, k;
    cgm_dtype dtype;
    cgm_layout layout;
} call_shape;

static const call_shape good = {0, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN};

/* Runs one op with `s` (data from fixed seeds); on success checks Y. */
static cgm_status run_op(cgm_comm *comm, int rank, int P, call_shape s) {
    bool nt = s.layout == CGM_LAYOUT_NT, ag = s.op == 0;
    int64_t off = cgm_shard_offset(s.m, rank, P);
    int64_t mr = cgm_shard_rows(s.m, rank, P);
    cgm_matrix x = ag ? mp_logical(s.dtype, nt, mr, s.k, off, 11, 0)
                      : mp_logical(s.dtype, nt, s.m, s.k, 0, 11, 0);
    cgm_matrix w = s.layout == CGM_LAYOUT_TN
                       ? mp_logical(s.dtype, false, s.n, s.k, 0, 12, 0)
                       : mp_logical(s.dtype, false, s.k, s.n, 0, 12, 0);
    cgm_matrix y = test_alloc(s.dtype, ag ? s.m : mr, s.n, 0);
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.layout = s.layout;
    cgm_status st =
        ag ? cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &opt, NULL)
           : cgm_gemm_reduce_scatter(comm, &x, &w, NULL, &y, &opt, NULL);
    if (st == CGM_SUCCESS) {
        /* Every rank holds the same X and W in these ops. */
        cgm_matrix x32 = mp_logical(CGM_DTYPE_FP32, nt, s.m, s.k, 0, 11, 0);
        cgm_matrix w32 = s.layout == CGM_LAYOUT_TN
                             ? mp_logical(CGM_DTYPE_FP32, false, s.n, s.k, 0, 12, 0)
                             : mp_logical(CGM_DTYPE_FP32, false, s.k, s.n, 0, 12, 0);
        double *ref = calloc((size_t)(s.m * s.n), sizeof(double));
        test_ref_gemm(s.layout, &x32, &w32, s.m, s.n, s.k, ref);
        if (!ag)
            for (int64_t i = 0; i < s.m * s.n; i++) ref[i] *= P;
        int64_t wrong = test_compare(&y, ag ? ref : ref + off * s.n, y.rows,
                                     s.n, test_tolerance(s.dtype, s.dtype, s.k * P),
                                     "fault-case op");
        if (wrong) TEST_FAIL("rank %d: %lld wrong elements", rank, (long long)wrong);
        free(ref);
        test_free(&x32);
        test_free(&w32);
    }
    test_free(&x);
    test_free(&w);
    test_free(&y);
    return st;
}

static cgm_comm *fault_comm(int rank, int P, const char *rendezvous,
                            int check_agreement) {
    cgm_config cfg = mp_config(TIMEOUT_MS);
    cfg.check_agreement = check_agreement;
    return test_host_comm(rank, P, rendezvous, &cfg);
}

/* Expects a failure naming `rank_name` within the timeout (+ slack). */
static void expect_failure_naming(cgm_status st, double started,
                                  const char *rank_name, bool timeout_only) {
    double took = mp_now_ms() - started;
    if (st != CGM_ERROR_TIMEOUT &&
        (timeout_only || st != CGM_ERROR_PEER_FAILED))
        TEST_FAIL("expected %s, found %s: %s",
                  timeout_only ? "CGM_ERROR_TIMEOUT"
                               : "CGM_ERROR_PEER_FAILED or CGM_ERROR_TIMEOUT",
                  cgm_status_string(st), cgm_last_error());
    CHECK_CONTAINS(cgm_last_error(), rank_name);
    if (took > TIMEOUT_MS + SLACK_MS)
        TEST_FAIL("the failure took %.0f ms, expected under %d ms", took,
                  TIMEOUT_MS + SLACK_MS);
}

/* ---- a rank dies (exits or is killed) before an op ---- */

static int rank_dies(int rank, int P, const char *rdv, void *arg) {
    bool kill_it = arg != NULL;
    cgm_comm *comm = fault_comm(rank, P, rdv, 1);
    MP_CHECK_OK(run_op(comm, rank, P, good));
    if (rank == 2) {
        if (kill_it) raise(SIGKILL);
        _exit(0); /* no destroy: the process simply ends */
    }
    double t0 = mp_now_ms();
    cgm_status st = run_op(comm, rank, P, good);
    expect_failure_naming(st, t0, "rank 2", false);
    /* The comm is broken: later ops fail at once, destroy still works. */
    t0 = mp_now_ms();
    CHECK(run_op(comm, rank, P, good) != CGM_SUCCESS);
    CHECK(mp_now_ms() - t0 < 1000);
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_dies(const void *param) {
    int codes[3];
    test_run_ranks(3, rank_dies, (void *)param, 30, codes);
    CHECK_INT_EQ(codes[0], 0);
    CHECK_INT_EQ(codes[1], 0);
    CHECK_INT_EQ(codes[2], param ? -SIGKILL : 0);
    mp_check_no_shm_leftovers();
}

/* cgm_comm_create of this rank with the faults' config, expected to fail:
 * its status; *comm must come back NULL; *t0 when it started. */
static cgm_status create_failing(int rank, int P, const char *rdv, double *t0) {
    cgm_config cfg = mp_config(TIMEOUT_MS);
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.rank = rank;
    b.nranks = P;
    b.rendezvous = rdv;
    cgm_comm *comm = (cgm_comm *)&b; /* must be reset to NULL */
    *t0 = mp_now_ms();
    cgm_status st = cgm_comm_create(&b, &cfg, &comm);
    if (st != CGM_SUCCESS) CHECK(comm == NULL);
    return st;
}

/* ---- a rank dies inside cgm_comm_create ---- */

typedef struct create_death {
    const char *point; /* host_rendezvous_hook's */
    int rank, nranks;
} create_death;

static const create_death *dying; /* this process's case */

static void exit_at_point(const cgm_comm *comm, const char *point) {
    if (comm->rank == dying->rank && strcmp(point, dying->point) == 0) _exit(0);
}

/* Once the dying rank has been in touch with every peer (from "joined" on),
 * every peer returns CGM_ERROR_PEER_FAILED naming it, at once (never
 * SYSTEM, MISMATCH or a timeout, nor the name of a peer that gave up
 * because of it), and nothing is left behind. */
static int rank_dies_in_create(int rank, int P, const char *rdv, void *arg) {
    dying = arg;
    host_rendezvous_hook = exit_at_point;
    double t0;
    cgm_status st = create_failing(rank, P, rdv, &t0);
    double took = mp_now_ms() - t0;
    if (rank == dying->rank)
        TEST_FAIL("rank %d returned %s from cgm_comm_create instead of exiting at '%s'", rank,
                  cgm_status_string(st), dying->point);
    if (st != CGM_ERROR_PEER_FAILED)
        TEST_FAIL("rank %d: expected CGM_ERROR_PEER_FAILED naming rank %d (exited at '%s'), found %s: %s", rank,
                  dying->rank, dying->point, cgm_status_string(st), cgm_last_error());
    char name[16];
    snprintf(name, sizeof name, "rank %d ", dying->rank);
    CHECK_CONTAINS(cgm_last_error(), name);
    CHECK_CONTAINS(cgm_last_error(), "exited or failed");
    /* At once: before any wait could have expired. */
    if (took >= TIMEOUT_MS)
        TEST_FAIL("rank %d: the failure took %.0f ms, expected it at once (under the %d ms timeout)", rank, took,
                  TIMEOUT_MS);
    return 0;
}

static void run_dies_in_create(const void *param) {
    const create_death *d = param;
    int codes[8];
    test_run_ranks(d->nranks, rank_dies_in_create, (void *)d, 30, codes);
    for (int r = 0; r < d->nranks; r++)
        if (codes[r] != 0) TEST_FAIL("rank %d exited with %d", r, codes[r]);
    mp_check_no_shm_leftovers();
}

/* ---- a rank never calls cgm_comm_create ---- */

static int rank_never_arrives(int rank, int P, const char *rdv, void *arg) {
    int absent = *(const int *)arg;
    if (rank == absent) return 0;
    double t0;
    cgm_status st = create_failing(rank, P, rdv, &t0);
    char name[16];
    snprintf(name, sizeof name, "rank %d", absent);
    expect_failure_naming(st, t0, name, true);
    return 0;
}

static void run_never_arrives(const void *param) {
    CHECK_INT_EQ(test_run_ranks(4, rank_never_arrives, (void *)param, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- a rank skips an op (sleeps past the timeout, then calls it) ---- */

static int rank_sleeps(int rank, int P, const char *rdv, void *arg) {
    int agreement = arg ? 1 : 0;
    cgm_comm *comm = fault_comm(rank, P, rdv, agreement);
    MP_CHECK_OK(run_op(comm, rank, P, good));
    double t0 = mp_now_ms();
    if (rank == 2) {
        usleep((TIMEOUT_MS + 1000) * 1000);
        t0 = mp_now_ms();
        cgm_status st = run_op(comm, rank, P, good);
        /* Its peers gave up on it: it learns so at once. */
        CHECK(st == CGM_ERROR_PEER_FAILED || st == CGM_ERROR_TIMEOUT);
        CHECK(mp_now_ms() - t0 < 1000);
    } else {
        cgm_status st = run_op(comm, rank, P, good);
        /* With the agreement check every rank waits for rank 2 itself;
         * without it a rank may first hear that a peer gave up on rank 2. */
        expect_failure_naming(st, t0, "rank 2", agreement != 0);
        if (st == CGM_ERROR_TIMEOUT) CHECK_CONTAINS(cgm_last_error(), "within");
    }
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_sleeps(const void *param) {
    CHECK_INT_EQ(test_run_ranks(3, rank_sleeps, (void *)param, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- ranks disagree about the call: MISMATCH everywhere, comm usable ---- */

typedef struct mismatch_case {
    const char *field; /* expected in the message */
    call_shape odd;    /* what rank 2 passes */
    call_shape even;   /* what the others pass */
} mismatch_case;

static int rank_mismatch(int rank, int P, const char *rdv, void *arg) {
    const mismatch_case *mc = arg;
    cgm_comm *comm = fault_comm(rank, P, rdv, 1);
    for (int round = 0; round < 2; round++) {
        cgm_status st = run_op(comm, rank, P, rank == 2 ? mc->odd : mc->even);
        if (st != CGM_ERROR_MISMATCH)
            TEST_FAIL("rank %d: expected CGM_ERROR_MISMATCH about %s, found "
                      "%s: %s",
                      rank, mc->field, cgm_status_string(st), cgm_last_error());
        CHECK_CONTAINS(cgm_last_error(), "rank 2");
        CHECK_CONTAINS(cgm_last_error(), mc->field);
        /* The comm stays usable: the next, agreeing op works. */
        MP_CHECK_OK(run_op(comm, rank, P, mc->even));
    }
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_mismatch(const void *param) {
    CHECK_INT_EQ(test_run_ranks(3, rank_mismatch, (void *)param, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- ranks disagree about the group size at the rendezvous ---- */

/* cgm_comm_create with this rank's nranks and config is refused within the
 * timeout (+ slack); on rank 0 with `expected` and a message holding
 * `says`. */
static void create_refused(int rank, int nranks, const char *rdv, const cgm_config *cfg,
                           cgm_status expected, const char *says) {
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.rank = rank;
    b.nranks = nranks;
    b.rendezvous = rdv;
    cgm_comm *comm = NULL;
    double t0 = mp_now_ms();
    cgm_status st = cgm_comm_create(&b, cfg, &comm);
    CHECK(st != CGM_SUCCESS && comm == NULL);
    CHECK(mp_now_ms() - t0 < TIMEOUT_MS + SLACK_MS);
    if (rank == 0) {
        CHECK_INT_EQ(st, expected);
        CHECK_CONTAINS(cgm_last_error(), says);
    }
}

static int rank_bad_nranks(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_config cfg = mp_config(TIMEOUT_MS);
    create_refused(rank, rank == 1 ? 3 : P, rdv, &cfg, CGM_ERROR_MISMATCH, "rank 1 joined rendezvous");
    if (rank == 0) CHECK_CONTAINS(cgm_last_error(), "nranks=3");
    return 0;
}

static void run_bad_nranks(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(2, rank_bad_nranks, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- connections that send no hello ---- */

/* A connection to rank 0's listener at rendezvous `rdv`, made as the
 * library's (retried while rank 0 is not listening yet). */
static int connect_rank0(const char *rdv) {
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    int len = snprintf(addr.sun_path + 1, sizeof addr.sun_path - 1, "commgemm.%s.0", rdv);
    socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
    for (int tries = 0; tries < 1000; tries++) {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        CHECK(fd >= 0);
        if (connect(fd, (struct sockaddr *)&addr, alen) == 0) return fd;
        close(fd);
        usleep(10000);
    }
    TEST_FAIL("could not connect to rank 0 at rendezvous '%s'", rdv);
    return -1;
}

/* Rank 1 first connects to rank 0's listener without a hello, then joins
 * for real: with `arg` NULL the first connection is closed first (a
 * process that gave up, or an earlier run's), else it stays open and
 * silent through the create. Either way rank 0 takes the real rank's hello
 * and the comm is made. */
static int rank_stray_connection(int rank, int P, const char *rdv, void *arg) {
    int stray = rank == 1 ? connect_rank0(rdv) : -1;
    if (stray >= 0 && !arg) close(stray);
    cgm_comm *comm = fault_comm(rank, P, rdv, 1);
    MP_CHECK_OK(run_op(comm, rank, P, good));
    CHECK_OK(cgm_comm_destroy(comm));
    if (stray >= 0 && arg) close(stray);
    return 0;
}

static void run_stray_connection(const void *param) {
    CHECK_INT_EQ(test_run_ranks(2, rank_stray_connection, (void *)param, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* Rank 1 only holds a silent connection past the timeout: rank 0's create
 * times out naming rank 1 and the silent connection. */
static int rank_only_silent(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    if (rank == 1) {
        int fd = connect_rank0(rdv);
        usleep((TIMEOUT_MS + 1000) * 1000);
        close(fd);
        return 0;
    }
    cgm_config cfg = mp_config(TIMEOUT_MS);
    create_refused(rank, P, rdv, &cfg, CGM_ERROR_TIMEOUT, "rank 1 did not join");
    CHECK_CONTAINS(cgm_last_error(), "1 connection(s) were open but sent no hello");
    return 0;
}

static void run_only_silent(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(2, rank_only_silent, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- many ranks, a small open-files limit ---- */

/* Descriptors in flight over Unix sockets count against the sending user's
 * open-files limit (unless the process has CAP_SYS_RESOURCE), summed over
 * all of that user's processes. 16 ranks of an unprivileged user, each
 * with a limit of 128 open files: the create and an op must work (each
 * rank passes 3 segment descriptors to each of 15 peers: 720 in all, so
 * they must not all be in flight at once). As root the ranks become
 * nobody first, to drop the privilege. */
enum { FEW_FDS_RANKS = 16, FEW_FDS_LIMIT = 128 };

static int rank_few_fds(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    test_drop_root();
    struct rlimit lim = {FEW_FDS_LIMIT, FEW_FDS_LIMIT};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
        TEST_FAIL("rank %d: setrlimit(RLIMIT_NOFILE, %d): %s", rank, FEW_FDS_LIMIT,
                  strerror(errno));
    cgm_comm *comm = fault_comm(rank, P, rdv, 1);
    MP_CHECK_OK(run_op(comm, rank, P, good));
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_few_fds(const void *param) {
    (void)param;
    test_skip_unless_root_can_drop();
    CHECK_INT_EQ(test_run_ranks(FEW_FDS_RANKS, rank_few_fds, NULL, 60, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- one name, comm after comm ---- */

/* Every rank creates, uses and destroys a comm under one name, again and
 * again, without waiting for the others in between: a rank done with one
 * comm connects for the next while its peers may still be finishing the
 * last (the name must be free by then, not held by a listener). */
static int rank_same_name_again(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    for (int i = 0; i < 40; i++) {
        cgm_comm *comm = fault_comm(rank, P, rdv, 1);
        if (i % 2) MP_CHECK_OK(run_op(comm, rank, P, good)); /* and some with no op between */
        CHECK_OK(cgm_comm_destroy(comm));
    }
    return 0;
}

static void run_same_name_again(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(3, rank_same_name_again, NULL, 60, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- ranks disagree about check_agreement (an exchange at every call) ---- */

static int rank_bad_agreement(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_config cfg = mp_config(TIMEOUT_MS);
    cfg.check_agreement = rank == 1 ? 0 : 1;
    create_refused(rank, P, rdv, &cfg, CGM_ERROR_MISMATCH,
                   "check_agreement: rank 1 has 0, this rank (0) has 1");
    return 0;
}

static void run_bad_agreement(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(2, rank_bad_agreement, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- argument errors the backend catches leave the comm usable ---- */

static int rank_bad_arguments(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_comm *comm = fault_comm(rank, P, rdv, 1);
    /* m above the workspace capacity (config max_m = 512). */
    call_shape big = good;
    big.m = 600;
    CHECK_STATUS(run_op(comm, rank, P, big), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "max_m");
    cgm_matrix x = mp_logical(CGM_DTYPE_FP32, false, 4, 6, 0, 1, 0);
    cgm_matrix w = mp_logical(CGM_DTYPE_FP32, false, 4, 6, 0, 2, 0);
    cgm_matrix y = test_alloc(CGM_DTYPE_FP32, 4 * P, 4, 0);
    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
    opt.algo = CGM_ALGO_BULK; /* only for cgm_bulk_overlap */
    CHECK_STATUS(cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &opt, NULL),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "bulk");
    cgm_matrix send = mp_logical(CGM_DTYPE_FP32, false, 4, 3, 0, 3, 0);
    cgm_matrix recv = test_alloc(CGM_DTYPE_FP32, 4 * P, 3, 0);
    opt.algo = CGM_ALGO_RING; /* not for bulk */
    CHECK_STATUS(cgm_bulk_overlap(comm, NULL, NULL, NULL, NULL,
                                  CGM_COLLECTIVE_ALL_GATHER, &send, &recv, &opt,
                                  NULL),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "ring");
    opt.algo = CGM_ALGO_AUTO;
    /* a collective wider than the workspace (max(max_n, max_k) = 64) */
    cgm_matrix wide = mp_logical(CGM_DTYPE_FP32, false, 4, 65, 0, 3, 0);
    cgm_matrix wide_recv = test_alloc(CGM_DTYPE_FP32, 4 * P, 65, 0);
    CHECK_STATUS(cgm_bulk_overlap(comm, NULL, NULL, NULL, NULL, CGM_COLLECTIVE_ALL_GATHER, &wide,
                                  &wide_recv, &opt, NULL),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "expected the collective's columns <= 64 (the comm's max(max_n, max_k)), "
                                     "found the collective's columns = 65");
    test_free(&wide);
    test_free(&wide_recv);
    int fake_stream;
    cgm_status st = cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &opt,
                                        &fake_stream);
    CHECK(st == CGM_ERROR_INVALID_USAGE || st == CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "stream");
    MP_CHECK_OK(run_op(comm, rank, P, good));
    test_free(&x);
    test_free(&w);
    test_free(&y);
    test_free(&send);
    test_free(&recv);
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_bad_arguments(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(2, rank_bad_arguments, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- the host channel's all-gather of bytes (cgm_comm_local_allgather,
 * how the GPU backends exchange handles on a LOCAL comm) ---- */

static unsigned char byte_of(int rank, size_t i) {
    return (unsigned char)((size_t)rank * 131 + i * 7 + 1);
}

static int rank_local_allgather(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_comm *comm = fault_comm(rank, P, rdv, 1);
    /* Under, at and over one exchange's 31 words, and several pieces. */
    static const size_t sizes[] = {1, 7, 8, 248, 249, 1000};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        size_t n = sizes[c];
        unsigned char *mine = malloc(n), *all = malloc(n * (size_t)P);
        for (size_t i = 0; i < n; i++) mine[i] = byte_of(rank, i);
        memset(all, 0xee, n * (size_t)P);
        MP_CHECK_OK(cgm_comm_local_allgather(comm, mine, n, all));
        for (int r = 0; r < P; r++)
            for (size_t i = 0; i < n; i++)
                if (all[(size_t)r * n + i] != byte_of(r, i))
                    TEST_FAIL("rank %d, %zu bytes: byte %zu of rank %d is %d, "
                              "expected %d", rank, n, i, r,
                              all[(size_t)r * n + i], byte_of(r, i));
        free(mine);
        free(all);
    }
    /* The comm still runs ops after its exchanges. */
    MP_CHECK_OK(run_op(comm, rank, P, good));
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_local_allgather(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(3, rank_local_allgather, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* Rank 2 never makes the exchange: the others time out naming it. */
static int rank_local_allgather_absent(int rank, int P, const char *rdv,
                                       void *arg) {
    (void)arg;
    cgm_comm *comm = fault_comm(rank, P, rdv, 1);
    if (rank == 2) {
        usleep((TIMEOUT_MS + SLACK_MS) * 1000);
    } else {
        int64_t mine[40] = {rank}, all[120];
        double t0 = mp_now_ms();
        cgm_status st =
            cgm_comm_local_allgather(comm, mine, sizeof mine, all);
        expect_failure_naming(st, t0, "rank 2", true);
    }
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_local_allgather_absent(const void *param) {
    (void)param;
    CHECK_INT_EQ(
        test_run_ranks(3, rank_local_allgather_absent, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- one comm, two threads at once (the header forbids it) ---- */

typedef struct two_threads {
    int pipe_fd[2]; /* rank 0 tells rank 1 when to come */
} two_threads;

typedef struct thread_call {
    cgm_comm *comm;
    int rank, P;
    int go_fd; /* rank 0's write end */
    cgm_status st;
} thread_call;

/* Both threads of rank 0 call the same op on one comm. The one that takes
 * the comm first waits in it for rank 1, which comes only when rank 0
 * tells it to: after the other thread was refused, and refused again for
 * cgm_comm_destroy while the op still runs. So the refusal is certain, not
 * a matter of timing. */
static void *racing_thread(void *arg) {
    thread_call *t = arg;
    t->st = run_op(t->comm, t->rank, t->P, good); /* checks Y when it succeeds */
    if (t->st != CGM_ERROR_INVALID_USAGE) return NULL;
    CHECK_CONTAINS(cgm_last_error(), "cgm_all_gather_gemm: comm");
    CHECK_CONTAINS(cgm_last_error(), "is in use by another thread, in cgm_all_gather_gemm: a comm serves one "
                                     "thread at a time");
    CHECK_STATUS(cgm_comm_destroy(t->comm), CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "cgm_comm_destroy: comm");
    CHECK_CONTAINS(cgm_last_error(), "in use by another thread, in cgm_all_gather_gemm");
    CHECK(write(t->go_fd, "g", 1) == 1);
    return NULL;
}

static int rank_two_threads(int rank, int P, const char *rdv, void *arg) {
    two_threads *tt = arg;
    /* The op that holds the comm waits for rank 1 through the exchanges
     * above: far longer than they take. */
    cgm_config cfg = mp_config(test_scaled_ms(20000));
    cgm_comm *comm = test_host_comm(rank, P, rdv, &cfg);
    if (rank == 1) {
        close(tt->pipe_fd[1]);
        struct pollfd pfd = {tt->pipe_fd[0], POLLIN, 0};
        char byte;
        if (poll(&pfd, 1, (int)test_scaled_ms(15000)) != 1 || read(tt->pipe_fd[0], &byte, 1) != 1)
            TEST_FAIL("rank 1: rank 0 never said that its second thread was refused");
        MP_CHECK_OK(run_op(comm, rank, P, good));
    } else {
        close(tt->pipe_fd[0]);
        thread_call calls[2];
        pthread_t threads[2];
        for (int i = 0; i < 2; i++) {
            calls[i] = (thread_call){comm, rank, P, tt->pipe_fd[1], CGM_ERROR_INTERNAL};
            CHECK_INT_EQ(pthread_create(&threads[i], NULL, racing_thread, &calls[i]), 0);
        }
        for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
        /* One ran the op (rank 1 came), the other was refused. */
        CHECK((calls[0].st == CGM_SUCCESS && calls[1].st == CGM_ERROR_INVALID_USAGE) ||
              (calls[1].st == CGM_SUCCESS && calls[0].st == CGM_ERROR_INVALID_USAGE));
    }
    /* The comm is free again and works; its refusals broke nothing. */
    MP_CHECK_OK(run_op(comm, rank, P, good));
    CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_two_threads(const void *param) {
    (void)param;
    two_threads tt;
    CHECK(pipe(tt.pipe_fd) == 0);
    CHECK_INT_EQ(test_run_ranks(2, rank_two_threads, &tt, 60, NULL), 0);
    close(tt.pipe_fd[0]);
    close(tt.pipe_fd[1]);
    mp_check_no_shm_leftovers();
}

/* Two threads hammer a one-rank comm: every call either runs, with the
 * right result, or is refused with INVALID_USAGE; nothing crashes. They go
 * on until each made 100 calls and some call was refused (their calls
 * overlap sooner or later; bounded by 20 s). */
typedef struct hammer {
    cgm_comm *comm;
    pthread_barrier_t start;
    atomic_int refused, done;
    double deadline;
} hammer;

static void *hammer_thread(void *arg) {
    hammer *h = arg;
    pthread_barrier_wait(&h->start);
    for (int i = 0; i < 100 || (atomic_load(&h->refused) == 0 && mp_now_ms() < h->deadline); i++) {
        cgm_status st = run_op(h->comm, 0, 1, good);
        if (st == CGM_ERROR_INVALID_USAGE) {
            CHECK_CONTAINS(cgm_last_error(), "a comm serves one thread at a time");
            atomic_fetch_add(&h->refused, 1);
        } else if (st != CGM_SUCCESS) {
            TEST_FAIL("call %d: %s: %s", i, cgm_status_string(st), cgm_last_error());
        } else {
            atomic_fetch_add(&h->done, 1);
        }
    }
    return NULL;
}

static void run_hammer(const void *param) {
    (void)param;
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("hammer", name, sizeof name);
    cgm_config cfg = mp_config(TIMEOUT_MS);
    hammer h = {.deadline = mp_now_ms() + (double)test_scaled_ms(20000)};
    CHECK_OK(cgm_comm_create(&b, &cfg, &h.comm));
    /* The first call is tuned (measured): out of the way first. */
    MP_CHECK_OK(run_op(h.comm, 0, 1, good));
    pthread_barrier_init(&h.start, NULL, 2);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) CHECK_INT_EQ(pthread_create(&threads[i], NULL, hammer_thread, &h), 0);
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&h.start);
    printf("# %d calls ran, %d refused as concurrent\n", atomic_load(&h.done), atomic_load(&h.refused));
    CHECK(atomic_load(&h.refused) > 0);
    MP_CHECK_OK(run_op(h.comm, 0, 1, good));
    CHECK_OK(cgm_comm_destroy(h.comm));
}

static const create_death create_deaths[] = {
    {"joined", 0, 4},     {"joined", 2, 4},    {"joined", 3, 4},     {"hellos", 0, 4},
    {"hellos", 2, 4},     {"exchanging", 1, 4}, {"exchanging", 3, 5}, {"exchanged", 0, 4},
    {"exchanged", 2, 5},  {"joined", 1, 2},    {"exchanged", 1, 2},
};

static const int absent_rank[] = {2, 3};
static int kill_marker;
static int keep_open; /* silent_connection_at_rendezvous */
static const mismatch_case mismatches[] = {
    {" m = ", {0, 13, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}, {0, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}},
    {" k = ", {0, 12, 4, 5, CGM_DTYPE_FP32, CGM_LAYOUT_TN}, {0, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}},
    {" n = ", {1, 12, 5, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}, {1, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}},
    {"input dtype", {0, 12, 4, 6, CGM_DTYPE_BF16, CGM_LAYOUT_TN}, {0, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}},
    {"layout", {0, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_NN}, {0, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}},
    {"op = gemm_rs", {1, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}, {0, 12, 4, 6, CGM_DTYPE_FP32, CGM_LAYOUT_TN}},
};

static void register_cases(void) {
    test_set_timeout(60);
    test_add("rank_exits_before_op", run_dies, NULL);
    test_add("rank_killed_before_op", run_dies, &kill_marker);
    for (size_t i = 0; i < sizeof create_deaths / sizeof create_deaths[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "rank_exits_in_create.%s.rank%d_of_%d", create_deaths[i].point,
                 create_deaths[i].rank, create_deaths[i].nranks);
        test_add(name, run_dies_in_create, &create_deaths[i]);
    }
    test_add("rank_never_arrives", run_never_arrives, &absent_rank[0]);
    test_add("last_rank_never_arrives", run_never_arrives, &absent_rank[1]);
    test_add("rank_sleeps_through_op", run_sleeps, &kill_marker);
    test_add("rank_sleeps_through_op_no_agreement", run_sleeps, NULL);
    test_add("mismatch_m", run_mismatch, &mismatches[0]);
    test_add("mismatch_k", run_mismatch, &mismatches[1]);
    test_add("mismatch_n", run_mismatch, &mismatches[2]);
    test_add("mismatch_dtype", run_mismatch, &mismatches[3]);
    test_add("mismatch_layout", run_mismatch, &mismatches[4]);
    test_add("mismatch_op", run_mismatch, &mismatches[5]);
    test_add("mismatch_nranks_at_rendezvous", run_bad_nranks, NULL);
    test_add("mismatch_check_agreement_at_rendezvous", run_bad_agreement, NULL);
    test_add("stray_connection_at_rendezvous", run_stray_connection, NULL);
    test_add("silent_connection_at_rendezvous", run_stray_connection, &keep_open);
    test_add("only_a_silent_connection_at_rendezvous", run_only_silent, NULL);
    test_add("same_name_comm_after_comm", run_same_name_again, NULL);
    test_add("many_ranks_few_open_files", run_few_fds, NULL);
    test_add("bad_arguments_keep_comm_usable", run_bad_arguments, NULL);
    test_add("local_allgather", run_local_allgather, NULL);
    test_add("local_allgather_rank_absent", run_local_allgather_absent, NULL);
    test_add("two_threads_one_comm", run_two_threads, NULL);
    test_add("two_threads_hammer_one_comm", run_hammer, NULL);
}

int main(int argc, char **argv) {
    /* Up to 8 ranks share 2 cores: BLAS threads would only oversubscribe. */
    openblas_set_num_threads(1);
    return test_main(argc, argv, register_cases);
}
