/* Stand-ins for libcublasmp.so.0 in the loader's and the symmetric-memory
 * tests. Built several ways (tests/cublasmp/CMakeLists.txt):
 *   (nothing defined)  only cublasMpGetVersion: a library that lacks the
 *                      API ("missing symbol cublasMpCreate");
 *   FAKE_FULL          every entry point of the cuBLASMp 0.8+ API the
 *                      backend uses, cublasMpGetVersion = FAKE_VERSION;
 *   FAKE_OLD_API       the 0.7 names instead (cublasMpStreamSet,
 *                      cublasMpMatmulDescriptorAttributeSet), no
 *                      symmetric-memory calls;
 *   FAKE_NEEDS_NCCL_SYMBOL  also calls an NCCL function no NCCL has, as
 *                      cuBLASMp 0.8+ does with NCCL < 2.29.2: dlopen fails
 *                      with "undefined symbol: nccl...".
 * ncclGetVersion comes from the fake NCCL each is linked against
 * (FAKE_LINKS_NCCL; or from none). Grids, buffers, registrations and
 * matmul descriptor attributes are recorded (fake_cublasmp.h); the other
 * matmul entry points answer NOT_SUPPORTED (never called by the tests). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_cublasmp.h"

#ifndef FAKE_VERSION
#define FAKE_VERSION 1000
#endif

enum { OK = 0, ALLOCATION_FAILED = 2, NOT_SUPPORTED = 7 };

int cublasMpGetVersion(int *version);
int cublasMpGetVersion(int *version) {
    *version = FAKE_VERSION;
    return OK;
}

#if defined(FAKE_FULL) || defined(FAKE_OLD_API)
#define STUB(name)                                                           \
    int name(void);                                                          \
    int name(void) { return NOT_SUPPORTED; }
STUB(cublasMpCreate)
STUB(cublasMpDestroy)
STUB(cublasMpMatrixDescriptorCreate)
STUB(cublasMpMatrixDescriptorDestroy)
STUB(cublasMpMatmulDescriptorCreate)
STUB(cublasMpMatmulDescriptorDestroy)
STUB(cublasMpMatmul_bufferSize)
STUB(cublasMpMatmul)
#endif

#ifdef FAKE_OLD_API
STUB(cublasMpStreamSet)
STUB(cublasMpMatmulDescriptorAttributeSet)
STUB(cublasMpGridCreate)
STUB(cublasMpGridDestroy)
#endif

#ifdef FAKE_FULL
STUB(cublasMpSetStream)

typedef struct fake_grid {
    int64_t nprow, npcol;
    int layout;
} fake_grid;

static fake_event events[FAKE_MAX_EVENTS];
static int nevents;
static char fail_fn[40];
static int fail_status;

int fake_cmp_events(const fake_event **out);
int fake_cmp_events(const fake_event **out) {
    *out = events;
    return nevents;
}

void fake_cmp_reset(void);
void fake_cmp_reset(void) {
    memset(events, 0, sizeof events);
    nevents = 0;
    fail_fn[0] = 0;
}

void fake_cmp_fail(const char *fn, int status);
void fake_cmp_fail(const char *fn, int status) {
    strncpy(fail_fn, fn, sizeof fail_fn - 1);
    fail_fn[sizeof fail_fn - 1] = 0;
    fail_status = status;
}

/* The status this call returns: a pending failure of `fn`, else OK. */
static int take(const char *fn) {
    if (!fail_fn[0] || strcmp(fail_fn, fn)) return OK;
    fail_fn[0] = 0;
    return fail_status;
}

static int record(const char *fn, void *grid, void *ptr, size_t size,
                  int status) {
    if (nevents < FAKE_MAX_EVENTS) {
        fake_event *e = &events[nevents++];
        strncpy(e->fn, fn, sizeof e->fn - 1);
        e->grid = grid;
        e->layout = grid ? ((fake_grid *)grid)->layout : -1;
        e->ptr = ptr;
        e->size = size;
        e->status = status;
    }
    return status;
}

int cublasMpGridCreate(int64_t nprow, int64_t npcol, int layout, void *comm,
                       void **grid);
int cublasMpGridCreate(int64_t nprow, int64_t npcol, int layout, void *comm,
                       void **grid) {
    (void)comm;
    fake_grid *g = calloc(1, sizeof *g);
    if (!g) return ALLOCATION_FAILED;
    g->nprow = nprow;
    g->npcol = npcol;
    g->layout = layout;
    *grid = g;
    return record("cublasMpGridCreate", g, NULL, 0, OK);
}

int cublasMpGridDestroy(void *grid);
int cublasMpGridDestroy(void *grid) {
    record("cublasMpGridDestroy", grid, NULL, 0, OK);
    free(grid);
    return OK;
}

int cublasMpMalloc(void *grid, void **ptr, size_t size);
int cublasMpMalloc(void *grid, void **ptr, size_t size) {
    int status = take("cublasMpMalloc");
    *ptr = status == OK ? malloc(size) : NULL;
    if (status == OK && !*ptr) status = ALLOCATION_FAILED;
    return record("cublasMpMalloc", grid, *ptr, size, status);
}

int cublasMpFree(void *grid, void *ptr);
int cublasMpFree(void *grid, void *ptr) {
    int status = take("cublasMpFree");
    if (status == OK) free(ptr);
    return record("cublasMpFree", grid, ptr, 0, status);
}

int cublasMpBufferRegister(void *grid, void *ptr, size_t size);
int cublasMpBufferRegister(void *grid, void *ptr, size_t size) {
    return record("cublasMpBufferRegister", grid, ptr, size,
                  take("cublasMpBufferRegister"));
}

int cublasMpBufferDeregister(void *grid, void *ptr);
int cublasMpBufferDeregister(void *grid, void *ptr) {
    return record("cublasMpBufferDeregister", grid, ptr, 0,
                  take("cublasMpBufferDeregister"));
}

int cublasMpMatmulDescriptorSetAttribute(void *desc, int attr,
                                         const void *buf, size_t size);
int cublasMpMatmulDescriptorSetAttribute(void *desc, int attr,
                                         const void *buf, size_t size) {
    long long value = 0;
    memcpy(&value, buf, size < sizeof value ? size : sizeof value);
    const int before = nevents;
    int status = record("cublasMpMatmulDescriptorSetAttribute", NULL, desc,
                        size, take("cublasMpMatmulDescriptorSetAttribute"));
    if (nevents > before) {
        events[nevents - 1].attr = attr;
        events[nevents - 1].value = value;
    }
    return status;
}

const char *cublasMpGetStatusString(int status);
const char *cublasMpGetStatusString(int status) {
    return status == OK ? "fake: success" : "fake: the failure a test asked for";
}
#endif

#ifdef FAKE_LINKS_NCCL
/* A use of the NCCL it is linked against, as cuBLASMp has. */
int ncclGetVersion(int *version);
int fake_cmp_nccl_version(void);
int fake_cmp_nccl_version(void) {
    int v = 0;
    return ncclGetVersion(&v) == 0 ? v : -1;
}
#endif

#ifdef FAKE_NEEDS_NCCL_SYMBOL
/* Defined by no NCCL: the library cannot load, as cuBLASMp 0.8+ cannot on
 * an NCCL without the symmetric-memory API. */
int ncclFakeSymmetricMemoryCall(void);
int fake_cmp_uses_nccl(void);
int fake_cmp_uses_nccl(void) { return ncclFakeSymmetricMemoryCall(); }
#endif
