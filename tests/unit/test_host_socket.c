/* The host rendezvous's messages (host_send_message / host_recv_message) on a
 * socket pair: a message of the wrong size or with the wrong number of
 * descriptors is refused with a message saying so, and the descriptors that
 * came with it are closed (each would pin a peer's shared memory); a silent
 * peer is a bounded timeout; a closed one is a peer failure. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
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

static void register_cases(void) {
    test_add("good_message", test_good, NULL);
    test_add("wrong_size_closes_its_fds", test_refused, &wrong_size);
    test_add("too_few_fds_closes_them", test_refused, &too_few_fds);
    test_add("silent_peer_times_out", test_silent, NULL);
    test_add("closed_peer_fails", test_closed, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
