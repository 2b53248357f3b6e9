/* The rendezvous's messages and the mesh of sockets they travel on: one
 * message at a time on a SOCK_SEQPACKET socket (descriptors with SCM_RIGHTS),
 * and the waits of cgm_comm_create, which watch every connected peer while
 * they wait for one. A peer whose connection closes exited; a peer that gives
 * up sends a notice first, naming the rank it gave up on, so that its peers
 * name that rank too instead of the one that left last (docs/HOST_BACKEND.md,
 * "When a rank dies in cgm_comm_create"). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/host/host.h"

int host_remaining_ms(int64_t deadline_ns) {
    int64_t left = deadline_ns - cgm_now_ns();
    if (left <= 0) return 0;
    return (int)(left / 1000000 + 1);
}

cgm_status host_recv_message(const cgm_comm *comm, int fd, int peer,
                             void *buf, size_t len, int *fds, int nfds,
                             int64_t deadline, const char *what) {
    struct pollfd p = {fd, POLLIN, 0};
    for (;;) {
        int ms = host_remaining_ms(deadline);
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
    ssize_t got;
    /* A peer that closed with messages of ours unread leaves a reset,
     * reported once, ahead of what it had sent: then read on. */
    int resets = 0;
    do {
        got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    } while (got < 0 && (errno == EINTR || (errno == ECONNRESET && resets++ < 4)));
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
    if (got == 0 || (got < 0 && errno == ECONNRESET))
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

/* ---- the mesh ---- */

cgm_status host_mesh_open(host_mesh *m, cgm_comm *comm, host_state *st,
                          int64_t deadline, int pending_cap) {
    memset(m, 0, sizeof *m);
    m->comm = comm;
    m->st = st;
    m->deadline = deadline;
    m->blamed = -1;
    m->pending_cap = pending_cap;
    size_t P = (size_t)comm->nranks, slots = P + 1 + (size_t)pending_cap;
    m->parked = calloc(P, sizeof *m->parked);
    m->replied = calloc(P, sizeof *m->replied);
    m->pending = malloc(sizeof *m->pending * (size_t)(pending_cap ? pending_cap : 1));
    m->poll = malloc(sizeof *m->poll * slots);
    m->poll_rank = malloc(sizeof *m->poll_rank * slots);
    if (m->parked && m->replied && m->pending && m->poll && m->poll_rank)
        return CGM_SUCCESS;
    host_mesh_close(m, CGM_SUCCESS);
    return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                     "expected memory for the rendezvous of %d ranks, found "
                     "none free", comm->nranks);
}

/* A notice to `fd`, never blocking, keeping cgm_last_error(). */
static void send_notice(const host_mesh *m, int fd, cgm_status status) {
    host_notice n;
    memset(&n, 0, sizeof n);
    n.magic = HOST_NOTICE_MAGIC;
    n.rank = m->comm->rank;
    n.blamed = m->blamed;
    n.status = (int32_t)status;
    snprintf(n.message, sizeof n.message, "%s", cgm_last_error());
    ssize_t sent;
    do {
        sent = send(fd, &n, sizeof n, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
}

void host_mesh_tell(const host_mesh *m, int fd, cgm_status status) {
    send_notice(m, fd, status);
}

/* A rank that gives up with its listener open: connections still in its
 * backlog (a higher rank that has connected but was not taken yet) are
 * taken and told too, and none can come after (shutdown refuses them),
 * so that no peer finds its connection closed without a word. */
static void tell_backlog(host_mesh *m, cgm_status status) {
    int fd = m->st->listen_fd;
    if (fd < 0) return;
    shutdown(fd, SHUT_RDWR);
    for (int i = 0; i < m->comm->nranks + m->pending_cap; i++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 0) <= 0) break;
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        send_notice(m, c, status);
        close(c);
    }
    close(fd);
    m->st->listen_fd = -1;
}

void host_mesh_close(host_mesh *m, cgm_status status) {
    if (status != CGM_SUCCESS && m->st) {
        tell_backlog(m, status);
        for (int r = 0; r < m->comm->nranks; r++)
            if (r != m->comm->rank && m->st->peers[r].fd >= 0)
                send_notice(m, m->st->peers[r].fd, status);
        for (int i = 0; i < m->npending; i++) send_notice(m, m->pending[i], status);
    }
    for (int i = 0; m->pending && i < m->npending; i++) close(m->pending[i]);
    m->npending = 0;
    free(m->parked);
    free(m->replied);
    free(m->pending);
    free(m->poll);
    free(m->poll_rank);
    m->parked = m->replied = NULL;
    m->pending = m->poll_rank = NULL;
    m->poll = NULL;
}

host_peek host_mesh_peek(int fd, host_notice *notice) {
    for (int tries = 0; tries < 8; tries++) {
        /* MSG_TRUNC: the length of the whole next message. */
        ssize_t n = recv(fd, notice, sizeof *notice, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == ECONNRESET)) continue; /* the reset is said once */
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return HOST_PEEK_NOTHING;
        if (n <= 0) return HOST_PEEK_CLOSED;
        if ((size_t)n != sizeof *notice || notice->magic != HOST_NOTICE_MAGIC)
            return HOST_PEEK_MESSAGE;
        /* The peer may close between the look and the taking: its reset
         * comes first then, and the notice is still there to look at. */
        ssize_t got = recv(fd, notice, sizeof *notice, MSG_DONTWAIT);
        if (got < 0 && (errno == EINTR || errno == ECONNRESET)) continue;
        if (got != (ssize_t)sizeof *notice) return HOST_PEEK_CLOSED;
        notice->message[sizeof notice->message - 1] = '\0';
        return HOST_PEEK_NOTICE;
    }
    return HOST_PEEK_CLOSED;
}

static cgm_status closed_failure(host_mesh *m, int r) {
    m->blamed = r;
    return cgm_error(CGM_ERROR_PEER_FAILED,
                     "rank %d exited or failed during cgm_comm_create at "
                     "rendezvous '%s' (its connection to this rank, %d, "
                     "closed); its own output says why",
                     r, m->comm->rendezvous, m->comm->rank);
}

cgm_status host_mesh_notice_failure(host_mesh *m, const host_notice *n) {
    int from = n->rank, b = n->blamed, P = m->comm->nranks;
    const char *rdv = m->comm->rendezvous;
    bool mismatch = n->status == CGM_ERROR_MISMATCH;
    if (b >= 0 && b < P && b != from && b != m->comm->rank) {
        /* It gave up on rank b: so does this rank, in the same terms. */
        cgm_status status = mismatch ? CGM_ERROR_MISMATCH
                            : n->status == CGM_ERROR_TIMEOUT ? CGM_ERROR_TIMEOUT
                                                             : CGM_ERROR_PEER_FAILED;
        m->blamed = b;
        return cgm_error(status,
                         "rank %d %s at rendezvous '%s', as rank %d found: %s",
                         b, mismatch ? "disagrees about the comm"
                            : status == CGM_ERROR_TIMEOUT ? "did not join in time"
                                                          : "exited or failed during cgm_comm_create",
                         rdv, from, n->message);
    }
    m->blamed = from;
    return cgm_error(mismatch ? CGM_ERROR_MISMATCH : CGM_ERROR_PEER_FAILED,
                     "rank %d gave up on cgm_comm_create at rendezvous '%s': %s",
                     from, rdv, n->message);
}

/* Why rank r's connection is gone: its notice if it sent one (what came
 * before it is dropped: this rank gives up too), else its end. */
static cgm_status gone(host_mesh *m, int r) {
    int fd = m->st->peers[r].fd;
    for (int i = 0; i < 2 * HOST_SEG_COUNT + 4; i++) {
        host_notice n;
        host_peek e = host_mesh_peek(fd, &n);
        if (e == HOST_PEEK_NOTICE) return host_mesh_notice_failure(m, &n);
        if (e != HOST_PEEK_MESSAGE) break;
        char drop;
        ssize_t d;
        do d = recv(fd, &drop, 1, MSG_DONTWAIT); /* the whole message goes */
        while (d < 0 && (errno == EINTR || errno == ECONNRESET));
        if (d < 0) break;
    }
    return closed_failure(m, r);
}

/* A watched peer's socket is readable. */
static cgm_status watched(host_mesh *m, int r) {
    host_notice n;
    switch (host_mesh_peek(m->st->peers[r].fd, &n)) {
    case HOST_PEEK_CLOSED: return closed_failure(m, r);
    case HOST_PEEK_NOTICE: return host_mesh_notice_failure(m, &n);
    case HOST_PEEK_MESSAGE:
        /* (take_reply reads it: it never waits, which would reuse m->poll) */
        if (r < m->comm->rank && !m->replied[r] && m->take_reply) return m->take_reply(m, r);
        m->parked[r] = true; /* read in its turn */
        return CGM_SUCCESS;
    default: return CGM_SUCCESS;
    }
}

cgm_status host_mesh_wait(host_mesh *m, const int *fds, int nfds, int64_t until, int *ready) {
    int me = m->comm->rank, P = m->comm->nranks;
    for (;;) {
        int n = 0;
        for (int i = 0; i < nfds; i++) m->poll[n++] = (struct pollfd){fds[i], POLLIN, 0};
        for (int r = 0; r < P; r++) {
            int fd = m->st->peers[r].fd;
            bool theirs = false;
            for (int i = 0; i < nfds; i++) theirs |= fds[i] == fd;
            if (r == me || fd < 0 || m->parked[r] || theirs) continue;
            m->poll_rank[n] = r;
            m->poll[n++] = (struct pollfd){fd, POLLIN, 0};
        }
        int rc = poll(m->poll, (nfds_t)n, host_remaining_ms(until));
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0)
            return cgm_error(CGM_ERROR_SYSTEM, "poll on the rendezvous sockets failed: %s", strerror(errno));
        *ready = -1;
        if (rc == 0) return CGM_SUCCESS;
        for (int i = nfds; i < n; i++) {
            if (!m->poll[i].revents) continue;
            cgm_status s = watched(m, m->poll_rank[i]);
            if (s != CGM_SUCCESS) return s;
        }
        for (int i = 0; i < nfds; i++)
            if (m->poll[i].revents) {
                *ready = i;
                return CGM_SUCCESS;
            }
    }
}

cgm_status host_mesh_await(host_mesh *m, int r, const char *what) {
    int fd = m->st->peers[r].fd, ready;
    for (;;) {
        cgm_status s = host_mesh_wait(m, &fd, 1, m->deadline, &ready);
        if (s != CGM_SUCCESS) return s;
        if (ready < 0) {
            m->blamed = r;
            return cgm_error(CGM_ERROR_TIMEOUT,
                             "expected %s from rank %d within %lld ms of "
                             "rendezvous '%s', found nothing; rank %d may "
                             "be stuck, or in another call",
                             what, r, (long long)m->comm->config.timeout_ms,
                             m->comm->rendezvous, r);
        }
        host_notice n;
        host_peek e = host_mesh_peek(fd, &n);
        if (e == HOST_PEEK_CLOSED) return closed_failure(m, r);
        if (e == HOST_PEEK_NOTICE) return host_mesh_notice_failure(m, &n);
        if (e == HOST_PEEK_MESSAGE) break;
    }
    m->parked[r] = false;
    return CGM_SUCCESS;
}

cgm_status host_mesh_take(host_mesh *m, int r, void *buf, size_t len, int *fds, int nfds, const char *what) {
    m->parked[r] = false;
    cgm_status s = host_recv_message(m->comm, m->st->peers[r].fd, r, buf, len, fds, nfds, m->deadline, what);
    if (s == CGM_ERROR_PEER_FAILED) return gone(m, r);
    if (s == CGM_ERROR_TIMEOUT) m->blamed = r;
    return s;
}

cgm_status host_mesh_recv(host_mesh *m, int r, void *buf, size_t len, int *fds, int nfds,
                          const char *what) {
    cgm_status s = host_mesh_await(m, r, what);
    return s == CGM_SUCCESS ? host_mesh_take(m, r, buf, len, fds, nfds, what) : s;
}

cgm_status host_mesh_send(host_mesh *m, int r, const void *buf, size_t len, const int *fds, int nfds,
                          const char *what) {
    cgm_status s = host_send_message(m->st->peers[r].fd, r, buf, len, fds, nfds, what);
    return s == CGM_ERROR_PEER_FAILED ? gone(m, r) : s;
}
