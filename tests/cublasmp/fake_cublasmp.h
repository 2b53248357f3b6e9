/* What the fake cuBLASMp (fake_cublasmp.c) records of the calls it gets,
 * read by test_cublasmp_load through dlsym on the loaded fake. */
#ifndef COMMGEMM_TEST_FAKE_CUBLASMP_H
#define COMMGEMM_TEST_FAKE_CUBLASMP_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define FAKE_MAX_EVENTS 256

typedef struct fake_event {
    char fn[40];  /* "cublasMpMalloc", ... */
    void *grid;   /* the grid argument (NULL: none) */
    int layout;   /* that grid's layout (0 COL_MAJOR, 1 ROW_MAJOR; -1 none) */
    void *ptr;    /* the buffer argument or result */
    size_t size;  /* its size (0: none) */
    int status;   /* what the fake returned */
    /* cublasMpMatmulDescriptorSetAttribute: ptr is the descriptor, size
     * the bytes passed, attr the attribute and value those bytes (up to
     * 8: an enum, an int64_t or a pointer's bits). */
    int attr;
    long long value;
} fake_event;

/* fake_cmp_events(&events): how many calls were recorded (at most
 * FAKE_MAX_EVENTS), oldest first. */
typedef int (*fake_events_fn)(const fake_event **events);
/* Forgets the recorded calls and any pending failure. */
typedef void (*fake_reset_fn)(void);
/* The next call of `fn` returns `status` (and does nothing). */
typedef void (*fake_fail_fn)(const char *fn, int status);

/* The three functions above, looked up in a loaded fake (dlopen handle
 * `dl`); false when one is missing. Needs <dlfcn.h> and <string.h>. */
static inline bool fake_cmp_bind(void *dl, fake_events_fn *events,
                                 fake_reset_fn *reset, fake_fail_fn *fail) {
    void *e = dlsym(dl, "fake_cmp_events");
    void *r = dlsym(dl, "fake_cmp_reset");
    void *x = dlsym(dl, "fake_cmp_fail");
    if (!e || !r || !x) return false;
    memcpy(events, &e, sizeof e);
    memcpy(reset, &r, sizeof r);
    memcpy(fail, &x, sizeof x);
    return true;
}

#endif
