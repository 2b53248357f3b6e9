/* Rendezvous of the host backend: a full mesh of Unix seqpacket sockets in
 * the abstract namespace (nothing on disk, gone when the process is), a
 * hello exchange, then every rank's memfd segments passed with SCM_RIGHTS
 * and mapped by every peer. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "backend/host/host.h"

typedef struct host_hello {
    uint64_t magic;
    int32_t version, nranks, rank, pid, chunks, check_agreement;
    int64_t max_m, max_n, max_k;
} host_hello;

typedef struct host_segment_info {
    uint64_t magic;
    int32_t rank, pad_;
    uint64_t bytes[HOST_SEG_COUNT];
} host_segment_info;

static const char *segment_names[HOST_SEG_COUNT] = {"control", "gather",
                                                    "recv"};

static int remaining_ms(int64_t deadline_ns) {
    int64_t left = deadline_ns - cgm_now_ns();
    if (left <= 0) return 0;
    return (int)(left / 1000000 + 1);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static socklen_t socket_address(const char *rendezvous, int rank,
                                struct sockaddr_un *addr) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    /* Abstract namespace: sun_path[0] = 0, the name follows. */
    int len = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1,
                       "commgemm.%s.%d", rendezvous, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

cgm_status host_recv_message(const cgm_comm *comm, int fd, int peer,
                             void *buf, size_t len, int *fds, int nfds,
                             int64_t deadline, const char *what) {
    struct pollfd p = {fd, POLLIN, 0};
    for (;;) {
        int ms = remaining_ms(deadline);
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0)
            return cgm_error(CGM_ERROR_SYSTEM,
                             "poll on the socket to rank %d failed: %s",
                             peer, strerror(errno));
        if (rc == 0)
            return cgm_error(CGM_ERROR_TIMEOUT,
                             "expected %s from rank %d within %lld ms of "
                             "rendezvous '%s', found nothing; rank %d may "
                             "have crashed or be stuck before "
                             "cgm_comm_create",
                             what, peer, (long long)comm->config.timeout_ms,
                             comm->rendezvous, peer);
        break;
    }
    char control[CMSG_SPACE(sizeof(int) * HOST_SEG_COUNT)];
    struct iovec iov = {buf, len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (nfds) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    }
    ssize_t got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    /* Whatever descriptors arrived are this process's now: on any error
     * below they are closed (each pins a peer's segment). */
    struct cmsghdr *c = got > 0 && nfds ? CMSG_FIRSTHDR(&msg) : NULL;
    bool rights = c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
                  c->cmsg_len >= CMSG_LEN(0);
    bool whole = rights && c->cmsg_len == CMSG_LEN(sizeof(int) * (size_t)nfds);
    if (rights && (!whole || (size_t)got != len)) {
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int *arrived = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < n; i++) {
            int one;
            memcpy(&one, arrived + i, sizeof one);
            close(one);
        }
    }
    if (got == 0)
        return cgm_error(CGM_ERROR_PEER_FAILED,
                         "expected %s from rank %d, found the connection "
                         "closed: rank %d exited or failed during "
                         "cgm_comm_create",
                         what, peer, peer);
    if (got < 0)
        return cgm_error(CGM_ERROR_SYSTEM, "receiving %s from rank %d: %s",
                         what, peer, strerror(errno));
    if ((size_t)got != len)
        return cgm_error(CGM_ERROR_MISMATCH,
                         "expected %s of %zu bytes from rank %d, found %zd "
                         "bytes; every rank must run the same commgemm "
                         "version",
                         what, len, peer, got);
    if (nfds) {
        if (!whole)
            return cgm_error(CGM_ERROR_SYSTEM,
                             "expected %d file descriptors with %s from rank "
                             "%d, found none (truncated: %d); check the open "
                             "file limit (ulimit -n)",
                             nfds, what, peer,
                             (msg.msg_flags & MSG_CTRUNC) != 0);
        memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)nfds);
    }
    return CGM_SUCCESS;
}

cgm_status host_send_message(int fd, int peer, const void *buf, size_t len,
                             const int *fds, int nfds, const char *what) {
    char control[CMSG_SPACE(sizeof(int) * HOST_SEG_COUNT)];
    struct iovec iov = {(void *)buf, len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (nfds) {
        memset(control, 0, sizeof control);
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t sent;
    do {
        sent = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent == (ssize_t)len) return CGM_SUCCESS;
    if (sent < 0 && (errno == EPIPE || errno == ECONNRESET))
        return cgm_error(CGM_ERROR_PEER_FAILED,
                         "sending %s to rank %d found the connection closed: "
                         "rank %d exited or failed during cgm_comm_create",
                         what, peer, peer);
    if (sent < 0 && errno == ETOOMANYREFS)
        return cgm_error(CGM_ERROR_SYSTEM,
                         "sending %s to rank %d: %s: descriptors in flight "
                         "between this user's processes exceed its open-files "
                         "limit; raise it (ulimit -n)", what, peer,
                         strerror(ETOOMANYREFS));
    return cgm_error(CGM_ERROR_SYSTEM, "sending %s to rank %d: %s", what, peer,
                     sent < 0 ? strerror(errno) : "short write");
}

static host_hello make_hello(const cgm_comm *comm, const host_state *st) {
    host_hello h;
    memset(&h, 0, sizeof h);
    h.magic = HOST_MAGIC;
    h.version = HOST_PROTOCOL_VERSION;
    h.nranks = comm->nranks;
    h.rank = comm->rank;
    h.pid = (int32_t)getpid();
    h.chunks = st->chunks;
    h.check_agreement = comm->config.check_agreement ? 1 : 0;
    h.max_m = comm->config.max_m;
    h.max_n = comm->config.max_n;
    h.max_k = comm->config.max_k;
    return h;
}

/* `expected_rank` < 0: any rank not yet connected and above this one. */
static cgm_status check_hello(const cgm_comm *comm, const host_state *st,
                              const host_hello *h, int expected_rank) {
    const char *rdv = comm->rendezvous;
    if (h->magic != HOST_MAGIC || h->version != HOST_PROTOCOL_VERSION)
        return cgm_error(CGM_ERROR_MISMATCH,
                         "expected a commgemm host hello (protocol %d) at "
                         "rendezvous '%s', found magic %#llx protocol %d; "
                         "another program uses this rendezvous name or ranks "
                         "run different commgemm versions",
                         HOST_PROTOCOL_VERSION, rdv,
                         (unsigned long long)h->magic, h->version);
    if (h->nranks != comm->nranks)
        return cgm_error(CGM_ERROR_MISMATCH,
                         "rank %d joined rendezvous '%s' with nranks=%d, but "
                         "this rank (%d) has nranks=%d; every rank must pass "
                         "the same nranks",
                         h->rank, rdv, h->nranks, comm->rank, comm->nranks);
    bool bad_rank = expected_rank >= 0
                        ? h->rank != expected_rank
                        : (h->rank <= comm->rank || h->rank >= comm->nranks ||
                           st->peers[h->rank].fd >= 0);
    if (bad_rank)
        return cgm_error(CGM_ERROR_MISMATCH,
                         "expected a distinct rank in [0, %d) at rendezvous "
                         "'%s', found rank %d twice or out of place; every "
                         "process must pass its own rank",
                         comm->nranks, rdv, h->rank);
    const char *field = h->max_m != comm->config.max_m   ? "max_m"
                        : h->max_n != comm->config.max_n ? "max_n"
                        : h->max_k != comm->config.max_k ? "max_k"
                        : h->chunks != st->chunks        ? "chunks"
                                                         : NULL;
    if (field)
        return cgm_error(CGM_ERROR_MISMATCH,
                         "ranks disagree about config %s: rank %d has "
                         "max_m=%lld max_n=%lld max_k=%lld, this rank (%d) "
                         "max_m=%lld max_n=%lld max_k=%lld; set the same "
                         "config (or COMMGEMM_MAX_M/N/K) on every rank",
                         field, h->rank, (long long)h->max_m,
                         (long long)h->max_n, (long long)h->max_k, comm->rank,
                         (long long)comm->config.max_m,
                         (long long)comm->config.max_n,
                         (long long)comm->config.max_k);
    if (h->check_agreement != (comm->config.check_agreement ? 1 : 0))
        /* The check is an exchange at every call: ranks that skip it and
         * ranks that wait in it would time out on each other. */
        return cgm_error(CGM_ERROR_MISMATCH,
                         "ranks disagree about config check_agreement: rank "
                         "%d has %d, this rank (%d) has %d; set the same "
                         "config.check_agreement (or COMMGEMM_CHECK_AGREEMENT) "
                         "on every rank",
                         h->rank, h->check_agreement, comm->rank,
                         comm->config.check_agreement ? 1 : 0);
    return CGM_SUCCESS;
}

static cgm_status create_segments(cgm_comm *comm, host_state *st) {
    int64_t w = st->width_max, rows = comm->config.max_m;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t ctrl = sizeof(host_control) +
                  sizeof(uint64_t) * (size_t)comm->nranks * PLAN_FLAG_COUNT *
                      (size_t)st->chunks;
    int64_t gather, recv;
    /* memfd pages are allocated on first touch: the size only reserves
     * address space. RECV has room for two slot sets. */
    if (__builtin_mul_overflow(rows, w, &gather) ||
        __builtin_mul_overflow(gather, (int64_t)4, &gather) ||
        __builtin_mul_overflow(rows + comm->nranks, w, &recv) ||
        __builtin_mul_overflow(recv, (int64_t)8, &recv) ||
        gather > ((int64_t)1 << 44) || recv > ((int64_t)1 << 44))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "expected max_m x max(max_n, max_k) x 4 bytes of "
                         "host workspace below 16 TiB, found max_m=%lld, "
                         "max_n=%lld, max_k=%lld; lower COMMGEMM_MAX_M/N/K "
                         "(config max_m/max_n/max_k)",
                         (long long)comm->config.max_m,
                         (long long)comm->config.max_n,
                         (long long)comm->config.max_k);
    size_t bytes[HOST_SEG_COUNT] = {ctrl, (size_t)gather, (size_t)recv};
    host_peer *self = &st->peers[comm->rank];
    for (int s = 0; s < HOST_SEG_COUNT; s++) {
        size_t b = (bytes[s] + page - 1) / page * page;
        if (b == 0) b = page;
        char name[64];
        snprintf(name, sizeof name, "commgemm-r%d-%s", comm->rank,
                 segment_names[s]);
        st->memfd[s] = memfd_create(name, MFD_CLOEXEC);
        if (st->memfd[s] < 0)
            return cgm_error(CGM_ERROR_SYSTEM,
                             "memfd_create for the %s workspace failed: %s; "
                             "the host backend needs Linux >= 3.17",
                             segment_names[s], strerror(errno));
        if (ftruncate(st->memfd[s], (off_t)b) != 0)
            return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                             "sizing the %s workspace to %zu bytes failed: "
                             "%s; lower COMMGEMM_MAX_M/N/K",
                             segment_names[s], b, strerror(errno));
        void *p = mmap(NULL, b, PROT_READ | PROT_WRITE, MAP_SHARED,
                       st->memfd[s], 0);
        if (p == MAP_FAILED)
            return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                             "mapping the %s workspace (%zu bytes) failed: "
                             "%s; lower COMMGEMM_MAX_M/N/K",
                             segment_names[s], b, strerror(errno));
        self->base[s] = p;
        self->bytes[s] = b;
    }
    host_control *c = self->base[HOST_SEG_CONTROL];
    c->magic = HOST_MAGIC;
    c->rank = comm->rank;
    c->nranks = comm->nranks;
    c->pid = (int32_t)getpid();
    c->chunks = st->chunks;
    atomic_store(&c->failed_rank, -1);
    self->pid = getpid();
    return CGM_SUCCESS;
}

static cgm_status listen_socket(cgm_comm *comm, host_state *st) {
    struct sockaddr_un addr;
    socklen_t len = socket_address(comm->rendezvous, comm->rank, &addr);
    st->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (st->listen_fd < 0)
        return cgm_error(CGM_ERROR_SYSTEM, "socket(AF_UNIX) failed: %s",
                         strerror(errno));
    if (bind(st->listen_fd, (struct sockaddr *)&addr, len) != 0)
        return cgm_error(errno == EADDRINUSE ? CGM_ERROR_MISMATCH
                                             : CGM_ERROR_SYSTEM,
                         "expected to be the only rank %d at rendezvous '%s', "
                         "found the name taken (%s); another process uses "
                         "the same rank and rendezvous: give each group its "
                         "own rendezvous and each process its own rank",
                         comm->rank, comm->rendezvous, strerror(errno));
    if (listen(st->listen_fd, comm->nranks) != 0)
        return cgm_error(CGM_ERROR_SYSTEM, "listen() failed: %s",
                         strerror(errno));
    return CGM_SUCCESS;
}

static cgm_status connect_lower(cgm_comm *comm, host_state *st, int peer,
                                int64_t deadline) {
    struct sockaddr_un addr;
    socklen_t len = socket_address(comm->rendezvous, peer, &addr);
    int pause = 1;
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return cgm_error(CGM_ERROR_SYSTEM, "socket(AF_UNIX) failed: %s",
                             strerror(errno));
        if (connect(fd, (struct sockaddr *)&addr, len) == 0) {
            st->peers[peer].fd = fd;
            host_hello h = make_hello(comm, st);
            return host_send_message(fd, peer, &h, sizeof h, NULL, 0, "hello");
        }
        int err = errno;
        close(fd);
        if (err != ECONNREFUSED && err != ENOENT && err != EAGAIN &&
            err != EINTR)
            return cgm_error(CGM_ERROR_SYSTEM,
                             "connecting to rank %d at rendezvous '%s': %s",
                             peer, comm->rendezvous, strerror(err));
        if (remaining_ms(deadline) == 0)
            return cgm_error(CGM_ERROR_TIMEOUT,
                             "rank %d did not join rendezvous '%s' within "
                             "%lld ms (this is rank %d of %d); start it, "
                             "check that every rank uses the same rendezvous "
                             "name, or raise COMMGEMM_TIMEOUT_MS",
                             peer, comm->rendezvous,
                             (long long)comm->config.timeout_ms, comm->rank,
                             comm->nranks);
        sleep_ms(pause);
        if (pause < 20) pause *= 2;
    }
}

/* The timeout of accept_higher, naming the first higher rank missing. */
static cgm_status join_timeout(cgm_comm *comm, host_state *st, int missing,
                               int silent) {
    int first = -1;
    for (int r = comm->rank + 1; r < comm->nranks && first < 0; r++)
        if (st->peers[r].fd < 0) first = r;
    char also[160] = "";
    if (silent > 0)
        snprintf(also, sizeof also, "; %d connection(s) were open but sent "
                 "no hello (not commgemm ranks, or ranks stuck before it)",
                 silent);
    return cgm_error(CGM_ERROR_TIMEOUT,
                     "rank %d did not join rendezvous '%s' within "
                     "%lld ms (%d of ranks %d..%d missing; this is "
                     "rank %d%s); start it, check that every rank uses "
                     "the same rendezvous name, or raise "
                     "COMMGEMM_TIMEOUT_MS",
                     first, comm->rendezvous,
                     (long long)comm->config.timeout_ms, missing,
                     comm->rank + 1, comm->nranks - 1, comm->rank, also);
}

/* Connections accepted whose hello has not come yet: polled beside the
 * listener, so that one that stays silent cannot hold the others up. A
 * rank sends its hello right after connecting; past the ranks still
 * missing and this many more, the oldest silent one is dropped. */
enum { HOST_PENDING_EXTRA = 64 };

/* The hello on accepted connection `fd` (readable): the rank is joined
 * (*missing drops), or a connection that closed is dropped, or the error.
 * Takes `fd`. */
static cgm_status take_hello(cgm_comm *comm, host_state *st, int fd,
                             int64_t deadline, int *missing) {
    host_hello h;
    cgm_status s = host_recv_message(comm, fd, -1, &h, sizeof h, NULL, 0,
                                     deadline, "a hello");
    if (s == CGM_SUCCESS) s = check_hello(comm, st, &h, -1);
    if (s != CGM_SUCCESS) {
        close(fd);
        /* A connection that closed before its hello (a process that gave
         * up or restarted) is dropped. */
        if (s == CGM_ERROR_PEER_FAILED) {
            CGM_INFO(CGM_SUB_HOST, "rendezvous '%s': a connection closed before its hello; "
                     "still waiting for %d rank(s)", comm->rendezvous, *missing);
            return CGM_SUCCESS;
        }
        return s;
    }
    st->peers[h.rank].fd = fd;
    st->peers[h.rank].pid = h.pid;
    (*missing)--;
    host_hello mine = make_hello(comm, st);
    return host_send_message(fd, h.rank, &mine, sizeof mine, NULL, 0, "hello");
}

static cgm_status accept_higher(cgm_comm *comm, host_state *st,
                                int64_t deadline) {
    int missing = comm->nranks - 1 - comm->rank;
    int cap = missing + HOST_PENDING_EXTRA, npending = 0;
    int *pending = malloc(sizeof(int) * (size_t)cap);
    struct pollfd *p = malloc(sizeof *p * (size_t)(1 + cap));
    cgm_status s = pending && p ? CGM_SUCCESS
                                : cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                                            "expected memory for %d "
                                            "connections, found none free",
                                            cap);
    while (missing > 0 && s == CGM_SUCCESS) {
        p[0] = (struct pollfd){st->listen_fd, POLLIN, 0};
        for (int i = 0; i < npending; i++)
            p[1 + i] = (struct pollfd){pending[i], POLLIN, 0};
        int rc = poll(p, (nfds_t)(1 + npending), remaining_ms(deadline));
        if (rc < 0 && errno == EINTR) continue;
        if (rc == 0) {
            s = join_timeout(comm, st, missing, npending);
            break;
        }
        if (rc < 0) {
            s = cgm_error(CGM_ERROR_SYSTEM, "poll(listen) failed: %s",
                          strerror(errno));
            break;
        }
        /* From the last: the one moved into a taken place was seen. */
        for (int i = npending - 1; i >= 0 && s == CGM_SUCCESS; i--) {
            if (!p[1 + i].revents) continue;
            int fd = pending[i];
            pending[i] = pending[--npending];
            s = take_hello(comm, st, fd, deadline, &missing);
        }
        if (s != CGM_SUCCESS || !p[0].revents) continue;
        int fd = accept4(st->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
                continue;
            s = cgm_error(CGM_ERROR_SYSTEM, "accept() failed: %s",
                          strerror(errno));
            break;
        }
        if (npending == cap) {
            CGM_INFO(CGM_SUB_HOST, "rendezvous '%s': %d connections sent no hello; "
                     "dropping the oldest", comm->rendezvous, npending);
            close(pending[0]);
            memmove(pending, pending + 1, sizeof(int) * (size_t)(npending - 1));
            npending--;
        }
        pending[npending++] = fd;
    }
    for (int i = 0; i < npending; i++) close(pending[i]);
    free(pending);
    free(p);
    return s;
}

/* Receives rank r's segment descriptors and maps them. */
static cgm_status map_peer(cgm_comm *comm, host_state *st, int r,
                           int64_t deadline) {
    host_segment_info info;
    int fds[HOST_SEG_COUNT] = {-1, -1, -1};
    cgm_status s = host_recv_message(comm, st->peers[r].fd, r, &info,
                                     sizeof info, fds, HOST_SEG_COUNT,
                                     deadline, "shared-memory handles");
    if (s != CGM_SUCCESS) return s;
    for (int g = 0; g < HOST_SEG_COUNT && s == CGM_SUCCESS; g++) {
        void *p = mmap(NULL, info.bytes[g], PROT_READ | PROT_WRITE, MAP_SHARED,
                       fds[g], 0);
        if (p == MAP_FAILED)
            s = cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                          "mapping rank %d's %s workspace (%llu bytes) "
                          "failed: %s; lower COMMGEMM_MAX_M/N/K",
                          r, segment_names[g],
                          (unsigned long long)info.bytes[g], strerror(errno));
        else {
            st->peers[r].base[g] = p;
            st->peers[r].bytes[g] = info.bytes[g];
        }
    }
    for (int g = 0; g < HOST_SEG_COUNT; g++)
        if (fds[g] >= 0) close(fds[g]);
    if (s != CGM_SUCCESS) return s;
    host_control *c = st->peers[r].base[HOST_SEG_CONTROL];
    if (c->magic != HOST_MAGIC || c->rank != r || c->chunks != st->chunks)
        return cgm_error(CGM_ERROR_MISMATCH,
                         "rank %d's control block is not what this rank "
                         "expects (rank %d, chunks %d vs %d); every rank "
                         "must run the same commgemm version",
                         r, c->rank, c->chunks, st->chunks);
    st->peers[r].pid = c->pid;
    return CGM_SUCCESS;
}

/* Rank `rank`'s partner in round t of a round robin over n players (n
 * even; the circle method: player n - 1 stays, the others turn): every
 * pair meets in exactly one of the n - 1 rounds. */
static int round_partner(int rank, int t, int n) {
    if (rank == n - 1) return t;
    if (rank == t) return n - 1;
    return ((2 * t - rank) % (n - 1) + (n - 1)) % (n - 1);
}

static cgm_status exchange_segments(cgm_comm *comm, host_state *st,
                                    int64_t deadline) {
    host_segment_info mine;
    memset(&mine, 0, sizeof mine);
    mine.magic = HOST_MAGIC;
    mine.rank = comm->rank;
    for (int s = 0; s < HOST_SEG_COUNT; s++)
        mine.bytes[s] = st->peers[comm->rank].bytes[s];
    /* Pairwise, in rounds: each rank sends its descriptors to one partner,
     * then takes the partner's, before the next round. Descriptors in
     * flight count against the sending user's open-files limit, summed
     * over all of the user's processes: sending to every peer first put
     * 3 P (P - 1) in flight at once, past a limit of 1024 from P = 19 on;
     * now each rank has at most two rounds' (6) out. */
    int P = comm->nranks, n = P + P % 2; /* odd P: a bye each round */
    for (int t = 0; t < n - 1; t++) {
        int r = round_partner(comm->rank, t, n);
        if (r >= P) continue;
        cgm_status s = host_send_message(st->peers[r].fd, r, &mine,
                                         sizeof mine, st->memfd,
                                         HOST_SEG_COUNT,
                                         "shared-memory handles");
        if (s == CGM_SUCCESS) s = map_peer(comm, st, r, deadline);
        if (s != CGM_SUCCESS) return s;
    }
    return CGM_SUCCESS;
}

cgm_status host_rendezvous(cgm_comm *comm, host_state *st) {
    int64_t deadline = cgm_now_ns() + comm->config.timeout_ms * 1000000;
    cgm_status s = create_segments(comm, st);
    if (s != CGM_SUCCESS || comm->nranks == 1) return s;
    s = listen_socket(comm, st);
    for (int r = 0; r < comm->rank && s == CGM_SUCCESS; r++)
        s = connect_lower(comm, st, r, deadline);
    if (s == CGM_SUCCESS) s = accept_higher(comm, st, deadline);
    /* Every higher rank is connected: nobody else may connect, and the
     * name is free at once for this group's next comm (a rank that is
     * done with this one may already be connecting to it; with the
     * listener open until the segments were exchanged, it could reach
     * this one's and lose its hello). */
    if (st->listen_fd >= 0) close(st->listen_fd);
    st->listen_fd = -1;
    for (int r = 0; r < comm->rank && s == CGM_SUCCESS; r++) {
        host_hello h;
        s = host_recv_message(comm, st->peers[r].fd, r, &h, sizeof h, NULL,
                              0, deadline, "a hello reply");
        if (s == CGM_SUCCESS) s = check_hello(comm, st, &h, r);
        if (s == CGM_SUCCESS) st->peers[r].pid = h.pid;
    }
    if (s == CGM_SUCCESS) s = exchange_segments(comm, st, deadline);
    if (s == CGM_SUCCESS)
        CGM_INFO(CGM_SUB_HOST,
                 "host rendezvous '%s' done: %d ranks, workspaces control "
                 "%zu, gather %zu, recv %zu bytes (virtual)",
                 comm->rendezvous, comm->nranks,
                 st->peers[comm->rank].bytes[HOST_SEG_CONTROL],
                 st->peers[comm->rank].bytes[HOST_SEG_GATHER],
                 st->peers[comm->rank].bytes[HOST_SEG_RECV]);
    return s;
}

void host_rendezvous_close(host_state *st) {
    if (!st->peers) return;
    for (int r = 0; r < st->nranks; r++) {
        host_peer *p = &st->peers[r];
        if (r == st->rank && p->base[HOST_SEG_CONTROL]) {
            host_control *c = p->base[HOST_SEG_CONTROL];
            int expected = HOST_RANK_LIVE;
            atomic_compare_exchange_strong(&c->state, &expected,
                                           HOST_RANK_CLOSED);
        }
        for (int s = 0; s < HOST_SEG_COUNT; s++)
            if (p->base[s]) munmap(p->base[s], p->bytes[s]);
        if (p->fd >= 0) close(p->fd);
        memset(p, 0, sizeof *p);
        p->fd = -1;
    }
    for (int s = 0; s < HOST_SEG_COUNT; s++) {
        if (st->memfd[s] >= 0) close(st->memfd[s]);
        st->memfd[s] = -1;
    }
    if (st->listen_fd >= 0) close(st->listen_fd);
    st->listen_fd = -1;
}
