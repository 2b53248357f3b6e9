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

void (*host_rendezvous_hook)(const cgm_comm *comm, const char *point);

static void reached(const cgm_comm *comm, const char *point) {
    if (host_rendezvous_hook) host_rendezvous_hook(comm, point);
}

static const char *segment_names[HOST_SEG_COUNT] = {"control", "gather",
                                                    "recv"};

static socklen_t socket_address(const char *rendezvous, int rank,
                                struct sockaddr_un *addr) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    /* Abstract namespace: sun_path[0] = 0, the name follows. */
    int len = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1,
                       "commgemm.%s.%d", rendezvous, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
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
     * address space. RECV has room for two slot sets. GATHER has 8 bytes
     * per row beyond 4 per element: AG+GEMM's packed fp8 rows carry their
     * scales (host_fp8_row_bytes <= 4 k + 8). */
    if (__builtin_mul_overflow(rows, w * 4 + 8, &gather) ||
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

/* One attempt to connect to lower rank `peer` and send it this rank's
 * hello: *refused when its listener is not there (yet). */
static cgm_status connect_lower(host_mesh *m, int peer, bool *refused) {
    cgm_comm *comm = m->comm;
    struct sockaddr_un addr;
    socklen_t len = socket_address(comm->rendezvous, peer, &addr);
    *refused = false;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return cgm_error(CGM_ERROR_SYSTEM, "socket(AF_UNIX) failed: %s",
                         strerror(errno));
    if (connect(fd, (struct sockaddr *)&addr, len) == 0) {
        m->st->peers[peer].fd = fd;
        host_hello h = make_hello(comm, m->st);
        return host_mesh_send(m, peer, &h, sizeof h, NULL, 0, "hello");
    }
    int err = errno;
    close(fd);
    *refused = err == ECONNREFUSED || err == ENOENT || err == EAGAIN ||
               err == EINTR;
    if (*refused) return CGM_SUCCESS;
    return cgm_error(CGM_ERROR_SYSTEM,
                     "connecting to rank %d at rendezvous '%s': %s",
                     peer, comm->rendezvous, strerror(err));
}

static cgm_status connect_timeout(host_mesh *m, int peer) {
    cgm_comm *comm = m->comm;
    m->blamed = peer;
    return cgm_error(CGM_ERROR_TIMEOUT,
                     "rank %d did not join rendezvous '%s' within "
                     "%lld ms (this is rank %d of %d); start it, "
                     "check that every rank uses the same rendezvous "
                     "name, or raise COMMGEMM_TIMEOUT_MS",
                     peer, comm->rendezvous,
                     (long long)comm->config.timeout_ms, comm->rank,
                     comm->nranks);
}

/* The timeout of the join, naming the first higher rank missing. */
static cgm_status join_timeout(host_mesh *m, int missing) {
    cgm_comm *comm = m->comm;
    int first = -1;
    for (int r = comm->rank + 1; r < comm->nranks && first < 0; r++)
        if (m->st->peers[r].fd < 0) first = r;
    m->blamed = first;
    char also[160] = "";
    if (m->npending > 0)
        snprintf(also, sizeof also, "; %d connection(s) were open but sent "
                 "no hello (not commgemm ranks, or ranks stuck before it)",
                 m->npending);
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

/* Pending connection i is readable: the rank it is joins (*missing
 * drops), or a connection that closed is dropped, or the error (the
 * connection is told why, e.g. a rank with another nranks). */
static cgm_status take_hello(host_mesh *m, int i, int *missing) {
    cgm_comm *comm = m->comm;
    host_state *st = m->st;
    int fd = m->pending[i];
    host_notice n;
    host_peek e = host_mesh_peek(fd, &n);
    if (e == HOST_PEEK_NOTHING) return CGM_SUCCESS;
    m->pending[i] = m->pending[--m->npending];
    if (e == HOST_PEEK_CLOSED) {
        /* A process that gave up or restarted before its hello. */
        close(fd);
        CGM_INFO(CGM_SUB_HOST, "rendezvous '%s': a connection closed before its hello; "
                 "still waiting for %d rank(s)", comm->rendezvous, *missing);
        return CGM_SUCCESS;
    }
    if (e == HOST_PEEK_NOTICE) {
        close(fd);
        return host_mesh_notice_failure(m, &n);
    }
    host_hello h;
    cgm_status s = host_recv_message(comm, fd, -1, &h, sizeof h, NULL, 0,
                                     m->deadline, "a hello");
    if (s == CGM_SUCCESS) s = check_hello(comm, st, &h, -1);
    if (s != CGM_SUCCESS) {
        if (s == CGM_ERROR_MISMATCH && h.magic == HOST_MAGIC && h.rank >= 0 && h.rank < comm->nranks)
            m->blamed = h.rank;
        host_mesh_tell(m, fd, s);
        close(fd);
        return s;
    }
    st->peers[h.rank].fd = fd;
    st->peers[h.rank].pid = h.pid;
    (*missing)--;
    host_hello mine = make_hello(comm, st);
    return host_mesh_send(m, h.rank, &mine, sizeof mine, NULL, 0, "hello");
}

/* A new connection on the listener joins the pending ones. */
static cgm_status accept_one(host_mesh *m) {
    int fd = accept4(m->st->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
            return CGM_SUCCESS;
        return cgm_error(CGM_ERROR_SYSTEM, "accept() failed: %s",
                         strerror(errno));
    }
    if (m->npending == m->pending_cap) {
        CGM_INFO(CGM_SUB_HOST, "rendezvous '%s': %d connections sent no hello; "
                 "dropping the oldest", m->comm->rendezvous, m->npending);
        close(m->pending[0]);
        memmove(m->pending, m->pending + 1, sizeof(int) * (size_t)(m->npending - 1));
        m->npending--;
    }
    m->pending[m->npending++] = fd;
    return CGM_SUCCESS;
}

/* A lower rank's hello reply, come (host_mesh.take_reply). */
static cgm_status take_reply(host_mesh *m, int r) {
    host_hello h;
    cgm_status s = host_mesh_take(m, r, &h, sizeof h, NULL, 0, "a hello reply");
    if (s == CGM_SUCCESS) s = check_hello(m->comm, m->st, &h, r);
    if (s != CGM_SUCCESS) {
        if (m->blamed < 0) m->blamed = r;
        return s;
    }
    m->st->peers[r].pid = h.pid;
    m->replied[r] = true;
    return CGM_SUCCESS;
}

/* The full mesh: connects to every lower rank, one after the other, and
 * accepts every higher rank, at the same time, so that a rank waiting for
 * one peer still hears from the others (the end of a rank that exited,
 * the notice of one that gave up). The listener closes as soon as every
 * higher rank is in, so that the name is free for the group's next comm
 * (a rank done with this one may already be connecting for the next). */
static cgm_status join(host_mesh *m) {
    cgm_comm *comm = m->comm;
    host_state *st = m->st;
    int next = 0, missing = comm->nranks - 1 - comm->rank, pause_ms = 1;
    int64_t retry_at = 0;
    int *fds = malloc(sizeof(int) * (size_t)(1 + m->pending_cap));
    cgm_status s = fds ? CGM_SUCCESS
                       : cgm_error(CGM_ERROR_OUT_OF_MEMORY, "expected memory for the rendezvous, found none");
    while (s == CGM_SUCCESS && (next < comm->rank || missing > 0)) {
        if (missing == 0 && st->listen_fd >= 0) {
            close(st->listen_fd);
            st->listen_fd = -1;
        }
        if (next < comm->rank && cgm_now_ns() >= retry_at) {
            bool refused = false;
            s = connect_lower(m, next, &refused);
            if (s != CGM_SUCCESS) break;
            if (!refused) {
                next++;
                pause_ms = 1;
                continue;
            }
            retry_at = cgm_now_ns() + (int64_t)pause_ms * 1000000;
            if (pause_ms < 20) pause_ms *= 2;
        }
        int nf = 0, ready = -1;
        if (missing > 0) {
            fds[nf++] = st->listen_fd;
            for (int i = 0; i < m->npending; i++) fds[nf++] = m->pending[i];
        }
        int64_t until = next < comm->rank && retry_at < m->deadline ? retry_at : m->deadline;
        s = host_mesh_wait(m, fds, nf, until, &ready);
        if (s != CGM_SUCCESS) break;
        if (ready < 0) {
            if (cgm_now_ns() < m->deadline) continue;
            s = next < comm->rank ? connect_timeout(m, next) : join_timeout(m, missing);
        } else if (ready == 0) {
            s = accept_one(m);
        } else {
            s = take_hello(m, ready - 1, &missing);
        }
    }
    free(fds);
    if (s != CGM_SUCCESS) return s; /* host_mesh_close tells the backlog and the pending ones */
    if (st->listen_fd >= 0) close(st->listen_fd);
    st->listen_fd = -1;
    /* What is left pending sent no hello and is not a rank of this comm. */
    for (int i = 0; i < m->npending; i++) close(m->pending[i]);
    m->npending = 0;
    return s;
}

/* Receives rank r's segment descriptors and maps them. */
static cgm_status map_peer(host_mesh *m, int r) {
    host_state *st = m->st;
    host_segment_info info;
    int fds[HOST_SEG_COUNT] = {-1, -1, -1};
    cgm_status s = host_mesh_recv(m, r, &info, sizeof info, fds, HOST_SEG_COUNT, "shared-memory handles");
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

static cgm_status exchange_segments(host_mesh *m) {
    cgm_comm *comm = m->comm;
    host_state *st = m->st;
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
        cgm_status s = host_mesh_send(m, r, &mine, sizeof mine, st->memfd, HOST_SEG_COUNT,
                                      "shared-memory handles");
        if (s == CGM_SUCCESS) s = map_peer(m, r);
        if (s != CGM_SUCCESS) return s;
        if (t == 0) reached(comm, "exchanging");
    }
    return CGM_SUCCESS;
}

/* The last round: every rank tells every peer it is done and waits until
 * every peer is. A rank that failed or exited on the way is heard of here
 * by all (its notice, its end), so that no rank's create succeeds beside
 * one that failed. Every note is read before the comm is made: later,
 * anything readable on these sockets is a peer's end (host_sync.c). */
static cgm_status all_ready(host_mesh *m) {
    typedef struct host_ready {
        uint64_t magic; /* HOST_READY_MAGIC */
        int32_t rank, pad_;
    } host_ready;
    cgm_comm *comm = m->comm;
    host_ready mine = {HOST_READY_MAGIC, comm->rank, 0};
    cgm_status s = CGM_SUCCESS;
    for (int r = 0; r < comm->nranks && s == CGM_SUCCESS; r++)
        if (r != comm->rank) s = host_mesh_send(m, r, &mine, sizeof mine, NULL, 0, "a ready note");
    for (int r = 0; r < comm->nranks && s == CGM_SUCCESS; r++) {
        if (r == comm->rank) continue;
        host_ready got;
        s = host_mesh_recv(m, r, &got, sizeof got, NULL, 0, "a ready note");
        if (s == CGM_SUCCESS && (got.magic != HOST_READY_MAGIC || got.rank != r))
            s = cgm_error(CGM_ERROR_MISMATCH,
                          "expected rank %d's ready note at rendezvous '%s', found something else; every rank "
                          "must run the same commgemm version", r, comm->rendezvous);
        /* Done: it may close its end at any time now (its comm made,
         * destroyed), which is no news: no longer watched. */
        m->parked[r] = true;
    }
    return s;
}

cgm_status host_rendezvous(cgm_comm *comm, host_state *st) {
    int64_t deadline = cgm_now_ns() + comm->config.timeout_ms * 1000000;
    cgm_status s = create_segments(comm, st);
    if (s != CGM_SUCCESS || comm->nranks == 1) return s;
    host_mesh m;
    s = host_mesh_open(&m, comm, st, deadline, comm->nranks - 1 - comm->rank + HOST_PENDING_EXTRA);
    if (s != CGM_SUCCESS) return s;
    m.take_reply = take_reply;
    s = listen_socket(comm, st);
    if (s == CGM_SUCCESS) s = join(&m);
    if (s == CGM_SUCCESS) reached(comm, "joined");
    /* The hello replies that did not come during the join. */
    for (int r = 0; r < comm->rank && s == CGM_SUCCESS; r++) {
        if (m.replied[r]) continue;
        s = host_mesh_await(&m, r, "a hello reply");
        if (s == CGM_SUCCESS) s = take_reply(&m, r);
    }
    if (s == CGM_SUCCESS) reached(comm, "hellos");
    if (s == CGM_SUCCESS) s = exchange_segments(&m);
    if (s == CGM_SUCCESS) reached(comm, "exchanged");
    if (s == CGM_SUCCESS) s = all_ready(&m);
    /* A rank that gives up tells its peers why first. */
    host_mesh_close(&m, s);
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
