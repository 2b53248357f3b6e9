/* A call that may block for good (a collective whose peer never comes),
 * run on a helper thread and waited for with a deadline; on expiry the
 * call is left to its thread, which releases what it made when it ends. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"

enum { BOUNDED_RUNNING = 0, BOUNDED_DONE = 1, BOUNDED_ABANDONED = 2 };

typedef struct bounded_call {
    void (*run)(void *);
    void (*orphan)(void *);
    void *arg;
    int state; /* atomic: BOUNDED_* */
} bounded_call;

static void *bounded_main(void *p) {
    bounded_call *b = p;
    b->run(b->arg);
    /* Whoever moves the state second owns the block: the waiter when the
     * call ended in time, else this thread, which hands the late result
     * to orphan. */
    if (__atomic_exchange_n(&b->state, BOUNDED_DONE, __ATOMIC_ACQ_REL) ==
        BOUNDED_ABANDONED) {
        if (b->orphan) b->orphan(b->arg);
        free(b);
    }
    return NULL;
}

cgm_status cgm_bounded_run(void (*run)(void *), void (*orphan)(void *),
                           void *arg, int64_t timeout_ms, const char *what) {
    if (!run)
        return cgm_error(CGM_ERROR_INTERNAL, "cgm_bounded_run: NULL run");
    bounded_call *b = calloc(1, sizeof *b);
    if (!b)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "%s: calloc of its helper "
                         "thread's state", what);
    b->run = run;
    b->orphan = orphan;
    b->arg = arg;
    pthread_t thread;
    if (pthread_create(&thread, NULL, bounded_main, b) != 0) {
        free(b);
        return cgm_error(CGM_ERROR_SYSTEM, "%s: could not start its helper "
                         "thread (pthread_create failed); the process may "
                         "be at its thread limit (ulimit -u)", what);
    }
    const int64_t start = cgm_now_ns();
    const int64_t deadline = start + timeout_ms * 1000000;
    while (__atomic_load_n(&b->state, __ATOMIC_ACQUIRE) == BOUNDED_RUNNING) {
        if (cgm_now_ns() > deadline &&
            __atomic_exchange_n(&b->state, BOUNDED_ABANDONED,
                                __ATOMIC_ACQ_REL) == BOUNDED_RUNNING) {
            pthread_detach(thread); /* b and arg are the thread's now */
            return cgm_error(CGM_ERROR_TIMEOUT, "%s did not return within "
                             "%lld ms", what, (long long)timeout_ms);
        }
        usleep(cgm_now_ns() - start < 2000000 ? 20 : 200);
    }
    pthread_join(thread, NULL);
    free(b);
    return CGM_SUCCESS;
}
