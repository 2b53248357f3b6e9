/* Cross-rank flags, bounded waits, dead-peer detection and the agreement
 * check of the host backend.
 *
 * A flag is a 64-bit counter in the receiver's control block, one per
 * (sender, kind, chunk). A SIGNAL stores epoch * HOST_EPOCH_STRIDE +
 * occurrence (release, never lowering the value), so a flag is "set for op
 * e" once it holds at least that: flags are never reset, and values of an
 * earlier op can never satisfy a later one. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/host/host.h"

host_control *host_ctrl(const host_state *st, int rank) {
    return st->peers[rank].base[HOST_SEG_CONTROL];
}

static _Atomic uint64_t *flag_ptr(const host_state *st, int owner, int src,
                                  plan_flag_kind kind, int chunk) {
    host_control *c = host_ctrl(st, owner);
    size_t i = ((size_t)src * PLAN_FLAG_COUNT + (size_t)kind) *
                   (size_t)st->chunks +
               (size_t)(chunk + 1);
    return &c->flags[i];
}

void host_flag_signal(host_state *st, int dst, plan_flag_kind kind, int chunk,
                      uint64_t value) {
    _Atomic uint64_t *f = flag_ptr(st, dst, st->rank, kind, chunk);
    uint64_t cur = atomic_load_explicit(f, memory_order_relaxed);
    while (cur < value &&
           !atomic_compare_exchange_weak_explicit(f, &cur, value,
                                                  memory_order_release,
                                                  memory_order_relaxed)) {
    }
}

void host_publish_failure(host_state *st, cgm_status status, int blamed) {
    host_control *c = host_ctrl(st, st->rank);
    if (!c) return;
    int expected = HOST_RANK_LIVE;
    atomic_store(&c->failed_rank, blamed);
    atomic_store(&c->failed_status, (int32_t)status);
    atomic_compare_exchange_strong(&c->state, &expected, HOST_RANK_FAILED);
}

/* CGM_SUCCESS while `peer` looks alive; else PEER_FAILED's message in msg.
 * `check_socket`: also poll the connection (a syscall, so not every spin). */
static cgm_status peer_status(const host_state *st, int peer,
                              bool check_socket, const host_wait *w, char *msg,
                              size_t msg_len) {
    if (peer == st->rank) return CGM_SUCCESS;
    host_control *c = host_ctrl(st, peer);
    int state = atomic_load(&c->state);
    if (state == HOST_RANK_FAILED) {
        int blamed = atomic_load(&c->failed_rank);
        int status = atomic_load(&c->failed_status);
        char why[128];
        if (status == CGM_ERROR_TIMEOUT && blamed >= 0)
            snprintf(why, sizeof why, "it timed out waiting for rank %d",
                     blamed);
        else if (status == CGM_ERROR_PEER_FAILED && blamed >= 0)
            snprintf(why, sizeof why, "it saw rank %d fail", blamed);
        else
            snprintf(why, sizeof why, "its error: %s",
                     cgm_status_string((cgm_status)status));
        snprintf(msg, msg_len,
                 "rank %d gave up (%s) while this rank waited for it to %s "
                 "(op #%llu %s); the comm is broken: destroy it on every rank "
                 "and see rank %d's error",
                 peer, why, w->what, (unsigned long long)w->op_number,
                 w->op_name, peer);
        return CGM_ERROR_PEER_FAILED;
    }
    if (state == HOST_RANK_CLOSED) {
        snprintf(msg, msg_len,
                 "rank %d destroyed its comm while this rank waited for it to "
                 "%s (op #%llu %s); every rank must issue the same ops before "
                 "cgm_comm_destroy",
                 peer, w->what, (unsigned long long)w->op_number, w->op_name);
        return CGM_ERROR_PEER_FAILED;
    }
    if (!check_socket) return CGM_SUCCESS;
    bool dead = false;
    const host_peer *p = &st->peers[peer];
    if (p->fd >= 0) {
        struct pollfd pfd = {p->fd, POLLIN, 0};
        /* No data ever travels after the rendezvous: anything readable is
         * the hang-up of a process that exited. */
        if (poll(&pfd, 1, 0) > 0 && pfd.revents) dead = true;
    }
    if (!dead && p->pid > 0 && kill(p->pid, 0) != 0 && errno == ESRCH)
        dead = true;
    if (!dead) return CGM_SUCCESS;
    snprintf(msg, msg_len,
             "rank %d exited or crashed (its connection closed) while this "
             "rank waited for it to %s (op #%llu %s); the comm is broken: "
             "destroy it",
             peer, w->what, (unsigned long long)w->op_number, w->op_name);
    return CGM_ERROR_PEER_FAILED;
}

static void pause_briefly(int64_t waited_ns) {
    if (waited_ns < 200000) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, waited_ns < 5000000 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

/* Waits until *value >= want. `src` is the rank expected to write it. */
static cgm_status wait_value(const cgm_comm *comm, host_state *st,
                             _Atomic uint64_t *value, uint64_t want, int src,
                             const host_wait *w, char *msg, size_t msg_len) {
    for (int i = 0; i < 256; i++)
        if (atomic_load_explicit(value, memory_order_acquire) >= want)
            return CGM_SUCCESS;
    int64_t start = cgm_now_ns(), last_socket_check = start;
    int64_t limit = comm->config.timeout_ms * 1000000;
    for (;;) {
        for (int i = 0; i < 16; i++)
            if (atomic_load_explicit(value, memory_order_acquire) >= want)
                return CGM_SUCCESS;
        int64_t now = cgm_now_ns();
        bool socket_check = now - last_socket_check > 1000000;
        if (socket_check) last_socket_check = now;
        cgm_status s = peer_status(st, src, socket_check, w, msg, msg_len);
        if (s != CGM_SUCCESS) {
            /* The peer may have signalled just before leaving. */
            if (atomic_load_explicit(value, memory_order_acquire) >= want)
                return CGM_SUCCESS;
            return s;
        }
        if (w->abort && atomic_load(w->abort)) {
            snprintf(msg, msg_len, "aborted: another queue failed");
            return CGM_ERROR_INTERNAL;
        }
        if (now - start > limit) {
            snprintf(msg, msg_len,
                     "rank %d did not %s within %lld ms (op #%llu %s); it may "
                     "have crashed, be stuck or be in another call; raise "
                     "COMMGEMM_TIMEOUT_MS if it is only slow",
                     src, w->what, (long long)comm->config.timeout_ms,
                     (unsigned long long)w->op_number, w->op_name);
            return CGM_ERROR_TIMEOUT;
        }
        pause_briefly(now - start);
    }
}

cgm_status host_flag_wait(const cgm_comm *comm, host_state *st, int src,
                          plan_flag_kind kind, int chunk, uint64_t value,
                          const host_wait *w, char *msg, size_t msg_len) {
    return wait_value(comm, st, flag_ptr(st, st->rank, src, kind, chunk),
                      value, src, w, msg, msg_len);
}

/* What the payload's first word says about the exchange, so that ranks in
 * different kinds of exchange fail alike instead of misreading each other. */
enum { HOST_XCHG_CHECK = 0, HOST_XCHG_TUNE = 1, HOST_XCHG_WORDS_ONLY = 2, HOST_XCHG_REJECTED = 3 };

/* One exchange on the agreement channel: publishes `sig` and `words`
 * payload words as this rank's entry for its next exchange number n (slot
 * n & 1; `epoch` is the op it belongs to, for messages), reads every
 * rank's into all_sig / all_payload (rank major). Every exchange waits for
 * every rank, so no rank can be two exchanges ahead: a slot is only
 * rewritten after every rank read it. The slot follows the exchange
 * number, not the op number: ops between two exchanges (a call that skips
 * its check, an op with nothing to move) do not wait for every rank, so a
 * slot chosen by op number could be rewritten while a slower rank still
 * reads it. */
static cgm_status exchange_slot(const cgm_comm *comm, host_state *st,
                                const int64_t sig[CGM_SIGNATURE_WORDS],
                                const int64_t *payload, int words,
                                uint64_t epoch, const char *op_name,
                                int *blamed, int64_t *all_sig,
                                int64_t *all_payload) {
    if (words < 1 || words > HOST_XCHG_WORDS)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "host exchange of %d words, expected 1..%d; please "
                         "report this bug", words, HOST_XCHG_WORDS);
    uint64_t n = ++st->xchg;
    int slot = (int)(n & 1);
    host_control *me = host_ctrl(st, st->rank);
    for (int i = 0; i < CGM_SIGNATURE_WORDS; i++)
        atomic_store_explicit(&me->sig[slot][i], sig[i],
                              memory_order_relaxed);
    for (int i = 0; i < words; i++)
        atomic_store_explicit(&me->payload[slot][i], payload[i],
                              memory_order_relaxed);
    atomic_store_explicit(&me->sig_op[slot], epoch, memory_order_relaxed);
    atomic_store_explicit(&me->sig_epoch[slot], n, memory_order_release);

    char msg[512];
    host_wait w = {"publish its call signature", epoch, op_name, NULL};
    for (int r = 0; r < st->nranks; r++) {
        host_control *c = host_ctrl(st, r);
        cgm_status s = wait_value(comm, st, &c->sig_epoch[slot], n, r, &w,
                                  msg, sizeof msg);
        if (s != CGM_SUCCESS) {
            *blamed = r;
            return cgm_error(s, "%s", msg);
        }
        for (int i = 0; i < CGM_SIGNATURE_WORDS; i++)
            all_sig[(size_t)r * CGM_SIGNATURE_WORDS + (size_t)i] =
                atomic_load_explicit(&c->sig[slot][i], memory_order_relaxed);
        for (int i = 0; i < words; i++)
            all_payload[(size_t)r * (size_t)words + (size_t)i] =
                atomic_load_explicit(&c->payload[slot][i],
                                     memory_order_relaxed);
        uint64_t their_op =
            atomic_load_explicit(&c->sig_op[slot], memory_order_relaxed);
        uint64_t seen =
            atomic_load_explicit(&c->sig_epoch[slot], memory_order_acquire);
        /* The same exchange of every rank belongs to the same op. */
        if (seen != n || their_op != epoch)
            return cgm_error(CGM_ERROR_MISMATCH,
                             "expected rank %d at op #%llu (%s, exchange "
                             "#%llu) like this rank %d, found it at op #%llu "
                             "(exchange #%llu); every rank must issue the "
                             "same sequence of ops",
                             r, (unsigned long long)epoch, op_name,
                             (unsigned long long)n, st->rank,
                             (unsigned long long)their_op,
                             (unsigned long long)seen);
    }
    return CGM_SUCCESS;
}

/* Every rank must be in the same kind of exchange (payload word 0). */
static cgm_status check_kinds(const host_state *st, const int64_t *all_payload,
                              int words, const char *op_name) {
    static const char *doing[] = {"runs the op as the caller asked",
                                  "tunes it (COMMGEMM_TUNE=1)",
                                  "is inside the autotuner's search"};
    int64_t mine = all_payload[(size_t)st->rank * (size_t)words];
    for (int r = 0; r < st->nranks; r++) {
        int64_t theirs = all_payload[(size_t)r * (size_t)words];
        if (theirs == mine) continue;
        return cgm_error(CGM_ERROR_MISMATCH,
                         "ranks disagree about the %s call: rank %d %s, rank "
                         "%d %s; set COMMGEMM_TUNE, COMMGEMM_ALGO and "
                         "COMMGEMM_SPLITS alike on every rank",
                         op_name, r,
                         theirs >= 0 && theirs <= 2 ? doing[theirs] : "?",
                         st->rank, mine >= 0 && mine <= 2 ? doing[mine] : "?");
    }
    return CGM_SUCCESS;
}

/* A rank that rejected its own arguments (host_announce_rejection) in
 * this exchange: CGM_ERROR_MISMATCH naming it and quoting its message,
 * read from its slot (not rewritten before this rank's next exchange). */
static cgm_status check_rejected(const host_state *st, const int64_t *all_payload, int words,
                                 const char *op_name) {
    int slot = (int)(st->xchg & 1);
    for (int r = 0; r < st->nranks; r++) {
        if (all_payload[(size_t)r * (size_t)words] != HOST_XCHG_REJECTED) continue;
        host_control *c = host_ctrl(st, r);
        int64_t status = atomic_load_explicit(&c->payload[slot][1], memory_order_relaxed);
        char text[(HOST_XCHG_WORDS - 2) * 8 + 1];
        for (int i = 0; i < HOST_XCHG_WORDS - 2; i++) {
            int64_t v = atomic_load_explicit(&c->payload[slot][i + 2], memory_order_relaxed);
            memcpy(text + 8 * i, &v, 8);
        }
        text[sizeof text - 1] = '\0';
        return cgm_error(CGM_ERROR_MISMATCH,
                         "ranks disagree about the %s call: rank %d rejected its arguments (%s: %s); "
                         "fix that rank's call (this comm stays usable)",
                         op_name, r, cgm_status_string((cgm_status)status), text);
    }
    return CGM_SUCCESS;
}

void host_announce_rejection(const cgm_comm *comm, host_state *st, const char *op_name,
                             cgm_status status) {
    int64_t sig[CGM_SIGNATURE_WORDS], payload[HOST_XCHG_WORDS];
    for (int i = 0; i < CGM_SIGNATURE_WORDS; i++) sig[i] = -3;
    memset(payload, 0, sizeof payload);
    payload[0] = HOST_XCHG_REJECTED;
    payload[1] = status;
    char saved[512] = {0}; /* the exchange may overwrite the detail */
    snprintf(saved, sizeof saved, "%s", cgm_last_error());
    memcpy(payload + 2, saved, (HOST_XCHG_WORDS - 2) * 8 - 1); /* its start; the last byte stays 0 */
    int64_t *all_sig = malloc((size_t)st->nranks * CGM_SIGNATURE_WORDS * sizeof *all_sig);
    int64_t *all_payload = malloc((size_t)st->nranks * HOST_XCHG_WORDS * sizeof *all_payload);
    uint64_t epoch = ++st->epoch;
    int blamed = -1;
    /* A whole exchange, waiting for every rank like the peers' own: a slot
     * is rewritten two exchanges later, only once every rank read it. */
    cgm_status s = all_sig && all_payload
                       ? exchange_slot(comm, st, sig, payload, HOST_XCHG_WORDS, epoch, op_name,
                                       &blamed, all_sig, all_payload)
                       : CGM_ERROR_OUT_OF_MEMORY;
    free(all_sig);
    free(all_payload);
    if (s != CGM_SUCCESS) {
        CGM_WARN(CGM_SUB_HOST, "rank %d could not tell its peers that it rejected its %s call: %s",
                 st->rank, op_name, cgm_last_error());
        cgm_error(status, "%s", saved); /* the caller's detail, as it was */
    }
}

static cgm_status signed_exchange(const cgm_comm *comm, host_state *st,
                                  const int64_t sig[CGM_SIGNATURE_WORDS],
                                  const int64_t *payload, int words,
                                  uint64_t epoch, const char *op_name,
                                  bool compare, int *blamed,
                                  int64_t *all_payload) {
    int64_t *all_sig = malloc((size_t)st->nranks * CGM_SIGNATURE_WORDS *
                              sizeof *all_sig);
    if (!all_sig)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for the agreement check of %d "
                         "ranks, found none free", st->nranks);
    cgm_status s = exchange_slot(comm, st, sig, payload, words, epoch,
                                 op_name, blamed, all_sig, all_payload);
    if (s == CGM_SUCCESS) s = check_rejected(st, all_payload, words, op_name);
    if (s == CGM_SUCCESS && compare) s = cgm_signature_compare(comm, all_sig);
    if (s == CGM_SUCCESS) s = check_kinds(st, all_payload, words, op_name);
    free(all_sig);
    return s;
}

cgm_status host_check_agreement(const cgm_comm *comm, host_state *st,
                                const cgm_call *call, uint64_t epoch,
                                const char *op_name, int *blamed) {
    int64_t sig[CGM_SIGNATURE_WORDS], kind = HOST_XCHG_CHECK;
    int64_t *kinds = malloc((size_t)st->nranks * sizeof *kinds);
    if (!kinds)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for the agreement check of %d "
                         "ranks, found none free", st->nranks);
    cgm_call_signature(call, sig);
    cgm_status s = signed_exchange(comm, st, sig, &kind, 1, epoch, op_name,
                                   true, blamed, kinds);
    free(kinds);
    return s;
}

static cgm_status tune_exchange(const cgm_comm *comm, host_state *st,
                                const int64_t sig[CGM_SIGNATURE_WORDS],
                                int64_t kind, const int64_t *mine, int words,
                                int64_t *all, const char *what) {
    if (words < 0 || words + 1 > HOST_XCHG_WORDS)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "host exchange of %d words, expected at most %d; "
                         "please report this bug", words, HOST_XCHG_WORDS - 1);
    int64_t payload[HOST_XCHG_WORDS];
    int64_t *all_payload =
        malloc((size_t)st->nranks * (size_t)(words + 1) * sizeof *all_payload);
    if (!all_payload)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for an exchange of %d ranks, found "
                         "none free", st->nranks);
    payload[0] = kind;
    memcpy(payload + 1, mine, (size_t)words * sizeof *mine);
    int blamed = -1;
    uint64_t epoch = ++st->epoch; /* the exchange takes an op number */
    cgm_status s = signed_exchange(comm, st, sig, payload, words + 1, epoch,
                                   what, kind == HOST_XCHG_TUNE, &blamed,
                                   all_payload);
    if (s != CGM_SUCCESS && s != CGM_ERROR_MISMATCH)
        host_publish_failure(st, s, blamed);
    for (int r = 0; s == CGM_SUCCESS && r < st->nranks; r++)
        memcpy(all + (size_t)r * (size_t)words,
               all_payload + (size_t)r * (size_t)(words + 1) + 1,
               (size_t)words * sizeof *all);
    free(all_payload);
    return s;
}

cgm_status host_tune_agree_words(const cgm_comm *comm, host_state *st,
                           const cgm_call *call, const int64_t *mine,
                           int words, int64_t *all) {
    int64_t sig[CGM_SIGNATURE_WORDS];
    cgm_call_signature(call, sig);
    return tune_exchange(comm, st, sig, HOST_XCHG_TUNE, mine, words, all,
                         "tuning");
}

cgm_status host_allgather_words(const cgm_comm *comm, host_state *st,
                                const int64_t *mine, int words, int64_t *all) {
    int64_t sig[CGM_SIGNATURE_WORDS];
    for (int i = 0; i < CGM_SIGNATURE_WORDS; i++) sig[i] = -2;
    return tune_exchange(comm, st, sig, HOST_XCHG_WORDS_ONLY, mine, words, all,
                         "tuning");
}

/* One word of every rank into *all (nranks words, malloc'd: free it; NULL
 * on failure) on the agreement channel; `what` names it in errors. */
static cgm_status exchange_word(const cgm_comm *comm, host_state *st, int64_t mine, const char *what,
                                int64_t **all) {
    int64_t sig[CGM_SIGNATURE_WORDS];
    for (int i = 0; i < CGM_SIGNATURE_WORDS; i++) sig[i] = -2;
    *all = malloc((size_t)st->nranks * sizeof **all);
    if (!*all)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for an exchange of %d ranks, found "
                         "none free", st->nranks);
    cgm_status s = tune_exchange(comm, st, sig, HOST_XCHG_WORDS_ONLY, &mine, 1, *all, what);
    if (s != CGM_SUCCESS) {
        free(*all);
        *all = NULL;
    }
    return s;
}

cgm_status host_barrier(const cgm_comm *comm, host_state *st, const char *what) {
    int64_t *all = NULL;
    cgm_status s = exchange_word(comm, st, 0, what, &all);
    free(all);
    return s;
}

cgm_status host_max_bits(const cgm_comm *comm, host_state *st, uint32_t *bits,
                         const char *op_name) {
    char what[64];
    snprintf(what, sizeof what, "%s's amax", op_name);
    int64_t *all = NULL;
    cgm_status s = exchange_word(comm, st, *bits, what, &all);
    for (int r = 0; s == CGM_SUCCESS && r < st->nranks; r++)
        if ((uint32_t)all[r] > *bits) *bits = (uint32_t)all[r];
    free(all);
    return s;
}
