/* The host rendezvous's messages (host_send_message / host_recv_message) on a
 * socket pair: a message of the wrong size or with the wrong number of
 * descriptors is refused with a message saying so, and the descriptors that
 * came with it are closed (each would pin a peer's shared memory); a silent
 * peer is a bounded timeout; a closed one is a peer failure; descriptors
 * in flight beyond the user's open-files limit say to raise it; a notice
 * whose sender closes while it is read is still the notice. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/host/host.h"
#include "harness.h"

/* Descriptors open in this process. */
static int open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) TEST_FAIL("opendir(/proc/self/fd) failed");
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1; /* the directory's own */
}

typedef struct pair {
    int a, b;
    cgm_comm comm; /* only its rendezvous name and timeout are read */
} pair;

static void pair_open(pair *p) {
    int sv[2];
    CHECK_INT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    p->a = sv[0];
    p->b = sv[1];
    memset(&p->comm, 0, sizeof p->comm);
    snprintf(p->comm.rendezvous, sizeof p->comm.rendezvous, "socket-test");
    p->comm.config.timeout_ms = 200;
}

static void pair_close(pair *p) {
    close(p->a);
    close(p->b);
}

/* Sends `len` bytes with `nfds` fresh memfds from a to b (ours closed after:
 * the sent copies are in flight). */
static void send_with_fds(pair *p, size_t len, int nfds) {
    char buf[64] = {0};
    int fds[HOST_SEG_COUNT] = {-1, -1, -1};
    for (int i = 0; i < nfds; i++) {
        fds[i] = memfd_create("socket-test", MFD_CLOEXEC);
        CHECK(fds[i] >= 0);
    }
    CHECK_OK(host_send_message(p->a, 1, buf, len, fds, nfds, "a test message"));
    for (int i = 0; i < nfds; i++) close(fds[i]);
}

static int64_t deadline_in(int64_t ms) { return cgm_now_ns() + ms * 1000000; }

static void test_good(const void *param) {
    (void)param;
    pair p;
    pair_open(&p);
    send_with_fds(&p, 24, HOST_SEG_COUNT);
    char buf[24];
    int fds[HOST_SEG_COUNT] = {-1, -1, -1};
    CHECK_OK(host_recv_message(&p.comm, p.b, 0, buf, sizeof buf, fds, HOST_SEG_COUNT,
                               deadline_in(1000), "a test message"));
    for (int i = 0; i < HOST_SEG_COUNT; i++) {
        CHECK(fds[i] >= 0);
        CHECK_INT_EQ(close(fds[i]), 0);
    }
    pair_close(&p);
}

/* A refused message: sent with `len` bytes and `nfds` descriptors where 24
 * bytes and 3 were expected. */
typedef struct refused {
    size_t len;
    int nfds;
    cgm_status expected;
    const char *says;
} refused;

static const refused wrong_size = {16, HOST_SEG_COUNT, CGM_ERROR_MISMATCH,
                                   "expected shared-memory handles of 24 bytes from rank 2, found 16 "
                                   "bytes; every rank must run the same commgemm version"};
static const refused too_few_fds = {24, HOST_SEG_COUNT - 1, CGM_ERROR_SYSTEM,
                                    "expected 3 file descriptors with shared-memory handles from rank 2"};

static void test_refused(const void *param) {
    const refused *c = param;
    pair p;
    pair_open(&p);
    send_with_fds(&p, c->len, c->nfds);
    int before = open_fds();
    char buf[24];
    int fds[HOST_SEG_COUNT] = {-1, -1, -1};
    CHECK_STATUS(host_recv_message(&p.comm, p.b, 2, buf, sizeof buf, fds, HOST_SEG_COUNT,
                                   deadline_in(1000), "shared-memory handles"),
                 c->expected);
    CHECK_CONTAINS(cgm_last_error(), c->says);
    CHECK_INT_EQ(open_fds(), before); /* the descriptors that came are closed */
    pair_close(&p);
}

/* Nothing comes: a timeout at the deadline, naming the peer and what. */
static void test_silent(const void *param) {
    (void)param;
    pair p;
    pair_open(&p);
    char buf[24];
    int64_t t0 = cgm_now_ns();
    CHECK_STATUS(host_recv_message(&p.comm, p.b, 3, buf, sizeof buf, NULL, 0, deadline_in(200),
                                   "a hello reply"),
                 CGM_ERROR_TIMEOUT);
    double ms = (double)(cgm_now_ns() - t0) / 1e6;
    CHECK(ms >= 150 && ms < 2000);
    CHECK_CONTAINS(cgm_last_error(), "expected a hello reply from rank 3 within 200 ms of rendezvous 'socket-test'");
    pair_close(&p);
}

/* The peer's end closed: a peer failure, at once. */
static void test_closed(const void *param) {
    (void)param;
    pair p;
    pair_open(&p);
    close(p.a);
    p.a = -1;
    char buf[24];
    CHECK_STATUS(host_recv_message(&p.comm, p.b, 1, buf, sizeof buf, NULL, 0, deadline_in(1000),
                                   "a hello"),
                 CGM_ERROR_PEER_FAILED);
    CHECK_CONTAINS(cgm_last_error(), "found the connection closed: rank 1 exited or failed");
    CHECK_STATUS(host_send_message(p.b, 1, buf, sizeof buf, NULL, 0, "a hello"), CGM_ERROR_PEER_FAILED);
    CHECK_CONTAINS(cgm_last_error(), "sending a hello to rank 1 found the connection closed");
    close(p.b);
}

/* The peer closed with a message of ours unread, after sending its own:
 * the kernel says "connection reset" once, ahead of that message. Its
 * message is still taken, then its end is a peer failure (never
 * CGM_ERROR_SYSTEM "Connection reset by peer"). */
static void test_reset_peer(const void *param) {
    (void)param;
    pair p;
    pair_open(&p);
    char buf[24] = "from b", got[24];
    CHECK_OK(host_send_message(p.b, 0, buf, sizeof buf, NULL, 0, "a hello"));
    snprintf(buf, sizeof buf, "from a");
    CHECK_OK(host_send_message(p.a, 1, buf, sizeof buf, NULL, 0, "a hello reply"));
    close(p.a); /* "from b" unread */
    p.a = -1;
    CHECK_OK(host_recv_message(&p.comm, p.b, 1, got, sizeof got, NULL, 0, deadline_in(1000), "a hello reply"));
    CHECK(strcmp(got, "from a") == 0);
    CHECK_STATUS(host_recv_message(&p.comm, p.b, 1, got, sizeof got, NULL, 0, deadline_in(1000), "a note"),
                 CGM_ERROR_PEER_FAILED);
    CHECK_CONTAINS(cgm_last_error(), "rank 1 exited or failed");
    close(p.b);
}

/* A peer's notice, then its end while this rank reads it: the peer closes
 * with a message of ours unread, which makes the kernel report a reset once,
 * and that report can land between host_mesh_peek's look at the notice and
 * its taking it. The notice must still be what this rank hears (as in
 * cgm_comm_create, where a rank that gave up names the rank it blames),
 * never "closed". A thread closes the peer's end at the moment the reading
 * starts, many times over, to land in that window. */
typedef struct closer {
    atomic_int go; /* 1: close `fd` now; 2: done */
    int fd;
    atomic_bool quit;
} closer;

static void *closer_main(void *arg) {
    closer *c = arg;
    for (;;) {
        int g;
        while ((g = atomic_load(&c->go)) != 1)
            if (g == 0 && atomic_load(&c->quit)) return NULL;
        close(c->fd);
        atomic_store(&c->go, 2);
    }
}

enum { NOTICE_RACE_ROUNDS = 20000 };

static void test_notice_then_reset(const void *param) {
    (void)param;
    closer c = {0};
    pthread_t t;
    CHECK_INT_EQ(pthread_create(&t, NULL, closer_main, &c), 0);
    int wrong = 0, first_wrong = -1;
    for (int i = 0; i < NOTICE_RACE_ROUNDS; i++) {
        pair p;
        pair_open(&p);
        host_notice n;
        memset(&n, 0, sizeof n);
        n.magic = HOST_NOTICE_MAGIC;
        n.rank = 4;
        n.blamed = 3;
        snprintf(n.message, sizeof n.message, "rank 3 exited");
        CHECK_INT_EQ(send(p.a, &n, sizeof n, MSG_NOSIGNAL), (ssize_t)sizeof n);
        char ours[24] = "unread";
        CHECK_INT_EQ(send(p.b, ours, sizeof ours, MSG_NOSIGNAL), (ssize_t)sizeof ours);
        c.fd = p.a;
        atomic_store(&c.go, 1);
        host_notice got;
        host_peek e;
        do e = host_mesh_peek(p.b, &got);
        while (e == HOST_PEEK_NOTHING);
        while (atomic_load(&c.go) != 2) {
        }
        atomic_store(&c.go, 0);
        if (e != HOST_PEEK_NOTICE || got.blamed != 3) {
            if (first_wrong < 0) first_wrong = (int)e;
            wrong++;
        }
        close(p.b);
    }
    atomic_store(&c.quit, true);
    CHECK_INT_EQ(pthread_join(t, NULL), 0);
    if (wrong)
        TEST_FAIL("%d of %d reads of a notice whose sender closed meanwhile did not return it (first: peek "
                  "result %d, expected %d)", wrong, NOTICE_RACE_ROUNDS, first_wrong, (int)HOST_PEEK_NOTICE);
}

/* Descriptors in flight beyond the open-files limit: the kernel counts
 * the descriptors a user has sent and not yet received against its
 * RLIMIT_NOFILE (for a user without CAP_SYS_RESOURCE), and refuses more
 * with ETOOMANYREFS. A child (as nobody when run as root, to drop the
 * capability) lowers its limit to 16 and sends 3 descriptors at a time that
 * nobody receives: a send within the first 10 must fail with
 * CGM_ERROR_SYSTEM saying to raise ulimit -n. */
enum { INFLIGHT_LIMIT = 16, INFLIGHT_SENDS = 10 };

static void inflight_child(void) {
    test_drop_root();
    struct rlimit lim = {INFLIGHT_LIMIT, INFLIGHT_LIMIT};
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0)
        TEST_FAIL("setrlimit(RLIMIT_NOFILE, %d): %s", INFLIGHT_LIMIT, strerror(errno));
    pair p;
    pair_open(&p);
    char buf[24] = {0};
    for (int i = 0; i < INFLIGHT_SENDS; i++) {
        int fds[HOST_SEG_COUNT];
        for (int j = 0; j < HOST_SEG_COUNT; j++) {
            fds[j] = memfd_create("socket-test", MFD_CLOEXEC);
            CHECK(fds[j] >= 0);
        }
        cgm_status st = host_send_message(p.a, 4, buf, sizeof buf, fds, HOST_SEG_COUNT,
                                          "shared-memory handles");
        for (int j = 0; j < HOST_SEG_COUNT; j++) close(fds[j]);
        if (st == CGM_SUCCESS) continue;
        CHECK_INT_EQ(st, CGM_ERROR_SYSTEM);
        CHECK_CONTAINS(cgm_last_error(), "sending shared-memory handles to rank 4");
        CHECK_CONTAINS(cgm_last_error(), "exceed its open-files limit; raise it (ulimit -n)");
        printf("send %d of 3 descriptors refused: %s\n", i + 1, cgm_last_error());
        fflush(stdout);
        _exit(0);
    }
    TEST_FAIL("%d sends of %d descriptors each, none received, all passed with an "
              "open-files limit of %d", INFLIGHT_SENDS, HOST_SEG_COUNT, INFLIGHT_LIMIT);
}

static void test_inflight_limit(const void *param) {
    (void)param;
    test_skip_unless_root_can_drop();
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) inflight_child();
    int status = 0;
    CHECK_INT_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void register_cases(void) {
    test_add("good_message", test_good, NULL);
    test_add("wrong_size_closes_its_fds", test_refused, &wrong_size);
    test_add("too_few_fds_closes_them", test_refused, &too_few_fds);
    test_add("silent_peer_times_out", test_silent, NULL);
    test_add("closed_peer_fails", test_closed, NULL);
    test_add("reset_peer_fails", test_reset_peer, NULL);
    test_add("notice_then_reset", test_notice_then_reset, NULL);
    test_add("descriptors_in_flight_over_the_limit", test_inflight_limit, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
