/* The cublasmp backend without a GPU: the loader (absent library, library
 * without the API, versions too old and unknown, the NCCL behind it, the
 * pip-location search), the symmetric-memory pool against a fake cuBLASMp
 * that records every call, and the pure mappings from commgemm calls to
 * cuBLASMp problems. */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/cublasmp/cublasmp.h"
#include "fake_cublasmp.h"
#include "harness.h"

#define INSTALL_HINT "pip install nvidia-cublasmp-cu13==0.10.0.3695"
#define SUPPORTED "supports cuBLASMp 0.8.x, 0.9.x or 0.10.x"

/* ---------------------------------------------------------------- loader */

static void env_path_missing(const void *p) {
    (void)p;
    /* Parameters are read once per process: set before the first read. */
    setenv("COMMGEMM_CUBLASMP_LIB", "/nonexistent/dir/libcublasmp.so.0", 1);
    const cmp_api *api = (const cmp_api *)1;
    CHECK_STATUS(cmp_lib_get(&api), CGM_ERROR_UNAVAILABLE);
    CHECK(api == NULL);
    const char *msg = cgm_last_error();
    CHECK_CONTAINS(msg, INSTALL_HINT);
    CHECK_CONTAINS(msg, "COMMGEMM_CUBLASMP_LIB");
    CHECK_CONTAINS(msg, "/nonexistent/dir/libcublasmp.so.0");
    CHECK_CONTAINS(msg, "cannot open shared object file"); /* dlerror's */
    /* Later calls give the same verdict without retrying. */
    CHECK_STATUS(cmp_lib_get(&api), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "cannot open shared object file");
}

static void explicit_path_missing(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load("/nonexistent/libcublasmp.so.0", &api),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
    CHECK_CONTAINS(cgm_last_error(), "No such file or directory");
    CHECK(api.dl == NULL);
}

static void search_finds_nothing(const void *p) {
    (void)p;
    /* No pip install anywhere we look (CI): the message lists what the
     * loader tried and says how to install. */
    setenv("VIRTUAL_ENV", "/nonexistent-venv", 1);
    unsetenv("PYTHONPATH");
    cmp_api api;
    cgm_status st = cmp_lib_load(NULL, &api);
    if (st == CGM_SUCCESS) {
        cmp_lib_close(&api);
        TEST_SKIP("a real cuBLASMp is installed here (%s)", "default search");
    }
    CHECK_STATUS(st, CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
    CHECK_CONTAINS(cgm_last_error(), "libcublasmp.so.0");
}

static void missing_symbol(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load(FAKE_NOSYM, &api), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "missing symbol cublasMpCreate");
    CHECK_CONTAINS(cgm_last_error(), "expected the cuBLASMp 0.8+ API");
    CHECK_CONTAINS(cgm_last_error(), FAKE_NOSYM);
    CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
    CHECK(api.dl == NULL);
}

/* 0.7 (the NVSHMEM API, its own entry-point names): refused by its
 * version, not by a renamed symbol, with what to install. */
static void old_version_refused(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load(FAKE_V0700, &api), CGM_ERROR_UNAVAILABLE);
    const char *msg = cgm_last_error();
    CHECK_CONTAINS(msg, "is version 0.7.0");
    CHECK_CONTAINS(msg, SUPPORTED);
    CHECK_CONTAINS(msg, "0.7 and older are not supported");
    CHECK_CONTAINS(msg, INSTALL_HINT);
    CHECK(strstr(msg, "missing symbol") == NULL);
    CHECK(api.dl == NULL);
}

/* A version this commgemm has not seen: refused with what it found and
 * what it supports (0.10's code 1000 is not 1.0.0; 10000 is). */
static void unknown_version_refused(const void *p) {
    (void)p;
    const struct {
        const char *path, *found;
    } libs[] = {{FAKE_V1100, "is version 0.11.0, which this commgemm does "
                             "not know"},
                {FAKE_V10000, "is version 1.0.0, which this commgemm does "
                              "not know"}};
    for (int i = 0; i < 2; i++) {
        cmp_api api;
        CHECK_STATUS(cmp_lib_load(libs[i].path, &api), CGM_ERROR_UNAVAILABLE);
        CHECK_CONTAINS(cgm_last_error(), libs[i].found);
        CHECK_CONTAINS(cgm_last_error(), SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
        CHECK(api.dl == NULL);
    }
}

static void version_codes(const void *p) {
    (void)p;
    const struct {
        int code;
        const char *text;
    } mp[] = {{700, "0.7.0"}, {801, "0.8.1"}, {901, "0.9.1"},
              {1000, "0.10.0"}, {1003, "0.10.3"}, {1100, "0.11.0"},
              {10000, "1.0.0"}, {10203, "1.2.3"}},
      nccl[] = {{22902, "2.29.2"}, {22809, "2.28.9"}, {23007, "2.30.7"},
                {2804, "2.8.4"}};
    char buf[32];
    for (size_t i = 0; i < sizeof mp / sizeof mp[0]; i++) {
        cmp_version_text(mp[i].code, buf, sizeof buf);
        CHECK_CONTAINS(buf, mp[i].text);
        CHECK_INT_EQ((long long)strlen(buf), (long long)strlen(mp[i].text));
    }
    for (size_t i = 0; i < sizeof nccl / sizeof nccl[0]; i++) {
        cmp_nccl_version_text(nccl[i].code, buf, sizeof buf);
        CHECK_CONTAINS(buf, nccl[i].text);
        CHECK_INT_EQ((long long)strlen(buf), (long long)strlen(nccl[i].text));
    }
    /* The accepted range, at its edges. */
    CHECK_STATUS(cmp_check_version(799, "x"), CGM_ERROR_UNAVAILABLE);
    CHECK_OK(cmp_check_version(800, "x"));
    CHECK_OK(cmp_check_version(1099, "x"));
    CHECK_STATUS(cmp_check_version(1100, "x"), CGM_ERROR_UNAVAILABLE);
    CHECK_STATUS(cmp_check_nccl(22901, "/x/libnccl.so.2", 1000, "y"),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "is NCCL 2.29.1");
    CHECK_OK(cmp_check_nccl(22902, "/x/libnccl.so.2", 1000, "y"));
    CHECK_OK(cmp_check_nccl(23007, "/x/libnccl.so.2", 1000, "y"));
}

/* 0.8 (old version code), 0.9 and 0.10 (new code) load: the whole table
 * is resolved, the NCCL behind each is found through its dependencies. */
static void supported_versions_load(const void *p) {
    (void)p;
    const struct {
        const char *path;
        int version;
    } libs[] = {{FAKE_V0801, 801}, {FAKE_V0901, 901}, {FAKE_V1000, 1000}};
    for (int i = 0; i < 3; i++) {
        cmp_api api;
        CHECK_OK(cmp_lib_load(libs[i].path, &api));
        CHECK_INT_EQ(api.version, libs[i].version);
        CHECK_CONTAINS(api.path, libs[i].path);
        CHECK(api.GetVersion && api.Create && api.Destroy && api.SetStream);
        CHECK(api.GridCreate && api.GridDestroy);
        CHECK(api.Malloc && api.Free && api.BufferRegister &&
              api.BufferDeregister);
        CHECK(api.MatrixDescriptorCreate && api.MatrixDescriptorDestroy);
        CHECK(api.MatmulDescriptorCreate && api.MatmulDescriptorDestroy &&
              api.MatmulDescriptorSetAttribute);
        CHECK(api.Matmul_bufferSize && api.Matmul && api.GetStatusString);
        /* The entries are the library's own. */
        void *f = NULL;
        memcpy(&f, &api.Malloc, sizeof f);
        CHECK(f == dlsym(api.dl, "cublasMpMalloc"));
        memcpy(&f, &api.SetStream, sizeof f);
        CHECK(f == dlsym(api.dl, "cublasMpSetStream"));
        /* The fake NCCL it is linked against, not any other. */
        CHECK_INT_EQ(api.nccl_version, 22902);
        CHECK(api.NcclGetVersion != NULL);
        CHECK_CONTAINS(api.nccl_path, "cublasmp_fake_nccl_22902");
        cmp_lib_close(&api);
        CHECK(api.dl == NULL && api.Matmul == NULL);
    }
}

static void nccl_too_old(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load(FAKE_OLDNCCL, &api), CGM_ERROR_UNAVAILABLE);
    const char *msg = cgm_last_error();
    CHECK_CONTAINS(msg, "cuBLASMp 0.10.0 at");
    CHECK_CONTAINS(msg, "needs NCCL >= 2.29.2");
    CHECK_CONTAINS(msg, "is NCCL 2.28.9");
    CHECK_CONTAINS(msg, "cublasmp_fake_nccl_22809"); /* which file */
    CHECK_CONTAINS(msg, "pip install 'nvidia-nccl-cu13>=2.29.2'");
    CHECK_CONTAINS(msg, "LD_PRELOAD=/path/libnccl.so.2");
    CHECK(api.dl == NULL);
}

static void nccl_absent(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load(FAKE_NONCCL, &api), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "reaches no ncclGetVersion");
    CHECK_CONTAINS(cgm_last_error(), "NCCL >= 2.29.2");
    CHECK(api.dl == NULL);
}

/* cuBLASMp 0.8+ on an NCCL without the symbols it needs does not even
 * load: the dlopen error says which symbol and what NCCL to install. */
static void nccl_symbols_unresolved(const void *p) {
    (void)p;
    cmp_api api;
    CHECK_STATUS(cmp_lib_load(FAKE_UNDEF, &api), CGM_ERROR_UNAVAILABLE);
    const char *msg = cgm_last_error();
    CHECK_CONTAINS(msg, "undefined symbol: ncclFakeSymmetricMemoryCall");
    CHECK_CONTAINS(msg, "cuBLASMp 0.8+ needs NCCL >= 2.29.2");
    CHECK_CONTAINS(msg, "libnccl.so.2"); /* the process's, or none loaded */
    CHECK(api.dl == NULL);
}

/* Puts `lib` at site/nvidia/cublasmp/cu13/lib/libcublasmp.so.0 under
 * root/<sub>/lib/python3.12/site-packages; returns the site folder. */
static void pip_install_fake(const char *root, const char *sub,
                             const char *lib, char *site, size_t len,
                             char *installed, size_t ilen) {
    char dir[700], cmd[800];
    snprintf(site, len, "%s/%s/lib/python3.12/site-packages", root, sub);
    snprintf(dir, sizeof dir, "%s/nvidia/cublasmp/cu13/lib", site);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK_INT_EQ(system(cmd), 0);
    snprintf(installed, ilen, "%s/libcublasmp.so.0", dir);
    CHECK_INT_EQ(symlink(lib, installed), 0);
}

/* A pip layout under a virtual environment and under a PYTHONPATH entry;
 * a refused copy found first (an old 0.7) does not hide a good one. */
static void pip_locations(const void *p) {
    (void)p;
    char root[] = "/tmp/cmp-venv-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    char venv_site[600], good_site[600], old_lib[800], good_lib[800];
    pip_install_fake(root, "venv", FAKE_V0700, venv_site, sizeof venv_site,
                     old_lib, sizeof old_lib);
    pip_install_fake(root, "target", FAKE_V1000, good_site, sizeof good_site,
                     good_lib, sizeof good_lib);
    char venv[700], pythonpath[800];
    snprintf(venv, sizeof venv, "%s/venv", root);
    snprintf(pythonpath, sizeof pythonpath, "/nonexistent:%s", good_site);
    setenv("VIRTUAL_ENV", venv, 1);
    setenv("PYTHONPATH", pythonpath, 1);
    unsetenv("CONDA_PREFIX");
    char paths[8][512];
    int n = cmp_lib_candidates(paths, 8);
    CHECK(n >= 2);
    CHECK_CONTAINS(paths[0], old_lib);
    CHECK_CONTAINS(paths[1], good_lib);
    cmp_api api;
    cgm_status st = cmp_lib_load(NULL, &api);
    if (st == CGM_SUCCESS && strstr(api.path, root) == NULL) {
        cmp_lib_close(&api);
        TEST_SKIP("a real cuBLASMp on the default search path shadows the "
                  "pip locations");
    }
    CHECK_OK(st);
    CHECK_CONTAINS(api.path, good_lib);
    CHECK_INT_EQ(api.version, 1000);
    cmp_lib_close(&api);
    /* Only the old one: refused, and the message says why and what to do. */
    unsetenv("PYTHONPATH");
    CHECK_STATUS(cmp_lib_load(NULL, &api), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), old_lib);
    CHECK_CONTAINS(cgm_last_error(), "is version 0.7.0");
    CHECK_CONTAINS(cgm_last_error(), INSTALL_HINT);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_INT_EQ(system(cmd), 0);
}

/* Through the public API: a host comm asked for cublasmp on one call. */
static void host_comm_refuses(const void *p) {
    (void)p;
    setenv("COMMGEMM_CUBLASMP_LIB", "/nonexistent/libcublasmp.so.0", 1);
    cgm_comm *comm = test_host_comm(0, 1, "cmp-host-refuses", NULL);
    float x[4 * 2], w[3 * 2], y[4 * 3];
    memset(x, 0, sizeof x);
    memset(w, 0, sizeof w);
    cgm_matrix mx = cgm_matrix_make(x, CGM_DTYPE_FP32, 4, 2);
    cgm_matrix mw = cgm_matrix_make(w, CGM_DTYPE_FP32, 3, 2);
    cgm_matrix my = cgm_matrix_make(y, CGM_DTYPE_FP32, 4, 3);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.backend = CGM_BACKEND_CUBLASMP;
    cgm_status st = cgm_all_gather_gemm(comm, &mx, &mw, NULL, &my, NULL, &o, NULL);
    CHECK(st == CGM_ERROR_UNAVAILABLE || st == CGM_ERROR_INVALID_USAGE);
    CHECK_CONTAINS(cgm_last_error(), "cublasmp");
    /* The comm still works on its own backend. */
    o.backend = CGM_BACKEND_DEFAULT;
    CHECK_OK(cgm_all_gather_gemm(comm, &mx, &mw, NULL, &my, NULL, &o, NULL));
    CHECK_OK(cgm_comm_destroy(comm));
}

/* ------------------------------------------------------ symmetric memory */

/* The fake cuBLASMp 0.10, its recorder and two grids made through it. */
typedef struct fake_env {
    cmp_api api;
    cmp_symm symm;
    fake_events_fn events;
    fake_reset_fn reset;
    fake_fail_fn fail;
} fake_env;

static void fake_open(fake_env *f) {
    memset(f, 0, sizeof *f);
    CHECK_OK(cmp_lib_load(FAKE_V1000, &f->api));
    CHECK(fake_cmp_bind(f->api.dl, &f->events, &f->reset, &f->fail));
    f->symm.api = &f->api;
    CHECK_INT_EQ(f->api.GridCreate(4, 1, CUBLASMP_GRID_LAYOUT_COL_MAJOR, NULL,
                                   &f->symm.grid[CMP_GRID_COL]), 0);
    CHECK_INT_EQ(f->api.GridCreate(1, 4, CUBLASMP_GRID_LAYOUT_ROW_MAJOR, NULL,
                                   &f->symm.grid[CMP_GRID_ROW]), 0);
    f->reset();
}

static void fake_close(fake_env *f) {
    f->api.GridDestroy(f->symm.grid[CMP_GRID_COL]);
    f->api.GridDestroy(f->symm.grid[CMP_GRID_ROW]);
    cmp_lib_close(&f->api);
}

/* The recorded calls, checked against the symmetric-memory contract:
 * each buffer cublasMpMalloc'ed on the P x 1 grid is registered on the
 * 1 x P grid (same buffer, same size) in the next call; a registered
 * buffer is deregistered there before it is freed on the P x 1 grid; each
 * is freed once. Returns how many buffers are live (allocated and not
 * freed); `live` gets them (at most 32) and every one is registered. */
static int check_contract(const fake_env *f, void **live, size_t *live_bytes) {
    const fake_event *ev = NULL;
    int n = f->events(&ev), nlive = 0;
    bool registered[32] = {false};
    CHECK(n < FAKE_MAX_EVENTS);
    for (int i = 0; i < n; i++) {
        const fake_event *e = &ev[i];
        if (e->status != 0) continue;
        int j = 0;
        while (j < nlive && live[j] != e->ptr) j++;
        if (!strcmp(e->fn, "cublasMpMalloc")) {
            CHECK_INT_EQ(e->layout, CUBLASMP_GRID_LAYOUT_COL_MAJOR);
            CHECK(i + 1 < n);
            const fake_event *r = &ev[i + 1];
            if (strcmp(r->fn, "cublasMpBufferRegister") || r->ptr != e->ptr ||
                r->size != e->size || r->layout != CUBLASMP_GRID_LAYOUT_ROW_MAJOR)
                TEST_FAIL("call %d: cublasMpMalloc(%p, %zu) on P x 1 is not "
                          "followed by cublasMpBufferRegister of the same "
                          "buffer on 1 x P (found %s of %p, %zu, layout %d)",
                          i, e->ptr, e->size, r->fn, r->ptr, r->size,
                          r->layout);
            CHECK(j == nlive && nlive < 32);
            live[nlive] = e->ptr;
            registered[nlive] = false;
            live_bytes[nlive++] = e->size;
        } else if (!strcmp(e->fn, "cublasMpBufferRegister") ||
                   !strcmp(e->fn, "cublasMpBufferDeregister")) {
            CHECK_INT_EQ(e->layout, CUBLASMP_GRID_LAYOUT_ROW_MAJOR);
            if (j == nlive) TEST_FAIL("call %d: %s of %p, which is not a live "
                                      "buffer", i, e->fn, e->ptr);
            registered[j] = !strcmp(e->fn, "cublasMpBufferRegister");
        } else if (!strcmp(e->fn, "cublasMpFree")) {
            CHECK_INT_EQ(e->layout, CUBLASMP_GRID_LAYOUT_COL_MAJOR);
            if (j == nlive) TEST_FAIL("call %d: %p freed twice or never "
                                      "allocated", i, e->ptr);
            if (registered[j])
                TEST_FAIL("call %d: cublasMpFree(%p) while it is still "
                          "registered on the 1 x P grid", i, e->ptr);
            live[j] = live[nlive - 1];
            registered[j] = registered[nlive - 1];
            live_bytes[j] = live_bytes[--nlive];
        }
    }
    for (int j = 0; j < nlive; j++)
        if (!registered[j])
            TEST_FAIL("live buffer %p (%zu bytes) is not registered on the "
                      "1 x P grid", live[j], live_bytes[j]);
    return nlive;
}

static void symm_alloc_registers_both_grids(const void *p) {
    (void)p;
    fake_env f;
    fake_open(&f);
    void *buf = NULL;
    CHECK_OK(cmp_symm_alloc(&f.symm, 4096, "workspace", &buf));
    CHECK(buf != NULL);
    const fake_event *ev = NULL;
    CHECK_INT_EQ(f.events(&ev), 2);
    CHECK_CONTAINS(ev[0].fn, "cublasMpMalloc");
    CHECK(ev[0].grid == (void *)f.symm.grid[CMP_GRID_COL]);
    CHECK_INT_EQ((long long)ev[0].size, 4096);
    CHECK_CONTAINS(ev[1].fn, "cublasMpBufferRegister");
    CHECK(ev[1].grid == (void *)f.symm.grid[CMP_GRID_ROW]);
    CHECK(ev[1].ptr == buf);
    cmp_symm_free(&f.symm, buf);
    CHECK_INT_EQ(f.events(&ev), 4);
    CHECK_CONTAINS(ev[2].fn, "cublasMpBufferDeregister");
    CHECK(ev[2].grid == (void *)f.symm.grid[CMP_GRID_ROW] && ev[2].ptr == buf);
    CHECK_CONTAINS(ev[3].fn, "cublasMpFree");
    CHECK(ev[3].grid == (void *)f.symm.grid[CMP_GRID_COL] && ev[3].ptr == buf);
    void *live[32];
    size_t bytes[32];
    CHECK_INT_EQ(check_contract(&f, live, bytes), 0);
    cmp_symm_free(&f.symm, NULL); /* nothing */
    CHECK_INT_EQ(f.events(&ev), 4);
    fake_close(&f);
}

/* What a comm does over its life: the buffers of every op's first calls
 * (cmp_plan_symmetric from the exchanged sizes), grown as shapes get
 * larger, outgrown ones retired for captured graphs (freed beyond
 * CMP_RETIRED_MAX), everything released at the end. Every buffer cuBLASMp
 * gets in an overlapped call (the workspace of every op, AG's staged B)
 * is symmetric memory registered on both grids, and nothing leaks. */
static void symm_every_buffer(const void *p) {
    (void)p;
    fake_env f;
    fake_open(&f);
    void *ws = NULL, *stage = NULL;
    size_t ws_bytes = 0, stage_bytes = 0;
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    int grown = 0;
    for (int round = 0; round < 6; round++)
        for (int oi = 0; oi < 3; oi++) {
            const size_t need = (size_t)(1 + round) << 12,
                         xbytes = (size_t)(3 + round) << 10;
            cmp_symm_plan plan;
            cmp_plan_symmetric(ops[oi], true, xbytes, 0, &plan);
            CHECK_INT_EQ((long long)plan.stage_bytes,
                         ops[oi] == CGM_OP_ALL_GATHER_GEMM ? (long long)xbytes : 0);
            if (plan.stage_bytes) {
                CHECK_OK(cmp_symm_grow(&f.symm, &stage, &stage_bytes,
                                       plan.stage_bytes, "AG staging"));
                CHECK(stage != NULL && stage_bytes >= xbytes);
            }
            cmp_plan_symmetric(ops[oi], true, xbytes, need, &plan);
            CHECK_INT_EQ((long long)plan.ws_bytes, (long long)need);
            size_t before = ws_bytes;
            CHECK_OK(cmp_symm_grow(&f.symm, &ws, &ws_bytes, plan.ws_bytes,
                                   "workspace"));
            grown += ws_bytes != before;
            CHECK(ws != NULL && ws_bytes >= need);
            /* The buffers this op's cublasMpMatmul would get are live,
             * registered buffers of at least the size it asked for. */
            void *live[32];
            size_t bytes[32];
            int nlive = check_contract(&f, live, bytes);
            bool ws_live = false, stage_live = !plan.stage_bytes;
            for (int i = 0; i < nlive; i++) {
                ws_live |= live[i] == ws && bytes[i] >= need;
                stage_live |= live[i] == stage && bytes[i] >= xbytes;
            }
            CHECK(ws_live && stage_live);
        }
    CHECK_INT_EQ(grown, 6);
    /* Six workspaces and six staging buffers: 10 outgrown, 8 kept. */
    CHECK_INT_EQ(f.symm.nretired, CMP_RETIRED_MAX);
    /* Teardown, in the backend's order. */
    cmp_symm_free_retired(&f.symm);
    cmp_symm_free(&f.symm, ws);
    cmp_symm_free(&f.symm, stage);
    CHECK_INT_EQ(f.symm.nretired, 0);
    void *live[32];
    size_t bytes[32];
    CHECK_INT_EQ(check_contract(&f, live, bytes), 0);
    /* Without staging (the test hook), AG's B is the caller's X. */
    cmp_symm_plan plan;
    cmp_plan_symmetric(CGM_OP_ALL_GATHER_GEMM, false, 4096, 8192, &plan);
    CHECK_INT_EQ((long long)plan.stage_bytes, 0);
    CHECK_INT_EQ((long long)plan.ws_bytes, 8192);
    fake_close(&f);
}

static void symm_failures(const void *p) {
    (void)p;
    fake_env f;
    fake_open(&f);
    void *buf = (void *)1;
    /* No memory: OUT_OF_MEMORY, nothing held. */
    f.fail("cublasMpMalloc", CUBLASMP_STATUS_ALLOCATION_FAILED);
    CHECK_STATUS(cmp_symm_alloc(&f.symm, 1 << 20, "workspace", &buf),
                 CGM_ERROR_OUT_OF_MEMORY);
    CHECK(buf == NULL);
    CHECK_CONTAINS(cgm_last_error(), "cublasMpMalloc(1048576 bytes)");
    CHECK_CONTAINS(cgm_last_error(), "workspace");
    CHECK_CONTAINS(cgm_last_error(), "fake: the failure a test asked for");
    CHECK_CONTAINS(cgm_last_error(), "free device memory");
    /* No symmetric memory on this system. */
    f.fail("cublasMpMalloc", CUBLASMP_STATUS_NOT_SUPPORTED);
    CHECK_STATUS(cmp_symm_alloc(&f.symm, 4096, "workspace", &buf),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "CUDA VMM");
    CHECK_CONTAINS(cgm_last_error(), "p2p or nccl backend");
    /* Allocated, not registered: freed again, nothing leaks. */
    f.fail("cublasMpBufferRegister", CUBLASMP_STATUS_INTERNAL_ERROR);
    CHECK_STATUS(cmp_symm_alloc(&f.symm, 4096, "AG staging", &buf),
                 CGM_ERROR_UNAVAILABLE);
    CHECK(buf == NULL);
    CHECK_CONTAINS(cgm_last_error(), "cublasMpBufferRegister");
    CHECK_CONTAINS(cgm_last_error(), "AG staging");
    CHECK_CONTAINS(cgm_last_error(), "the buffer was freed");
    void *live[32];
    size_t bytes[32];
    CHECK_INT_EQ(check_contract(&f, live, bytes), 0);
    const fake_event *ev = NULL;
    int n = f.events(&ev);
    CHECK(n >= 2);
    CHECK_CONTAINS(ev[n - 1].fn, "cublasMpFree");
    /* A failed growth leaves nothing behind (the old buffer retired). */
    void *ws = NULL;
    size_t ws_bytes = 0;
    CHECK_OK(cmp_symm_grow(&f.symm, &ws, &ws_bytes, 4096, "workspace"));
    f.fail("cublasMpMalloc", CUBLASMP_STATUS_ALLOCATION_FAILED);
    CHECK_STATUS(cmp_symm_grow(&f.symm, &ws, &ws_bytes, 8192, "workspace"),
                 CGM_ERROR_OUT_OF_MEMORY);
    CHECK(ws == NULL);
    CHECK_INT_EQ((long long)ws_bytes, 0);
    CHECK_INT_EQ(f.symm.nretired, 1);
    cmp_symm_free_retired(&f.symm);
    CHECK_INT_EQ(check_contract(&f, live, bytes), 0);
    /* Release failures are reported, not fatal. */
    CHECK_OK(cmp_symm_alloc(&f.symm, 4096, "workspace", &buf));
    f.fail("cublasMpBufferDeregister", CUBLASMP_STATUS_INTERNAL_ERROR);
    cmp_symm_free(&f.symm, buf);
    n = f.events(&ev);
    CHECK_CONTAINS(ev[n - 1].fn, "cublasMpFree");
    CHECK_INT_EQ(ev[n - 1].status, 0);
    fake_close(&f);
}

/* -------------------------------------------------------------- mappings */

static int64_t numroc(int64_t n, int64_t nb, int iproc, int nprocs) {
    int64_t nblocks = n / nb, count = nblocks / nprocs * nb;
    int64_t extra = nblocks % nprocs;
    if (iproc < extra) count += nb;
    else if (iproc == extra) count += n % nb;
    return count;
}

/* Local column-major rows x cols that descriptor g gives rank r. */
static void local_dims(const cmp_geom *g, int r, int P, int64_t *rows,
                       int64_t *cols) {
    if (g->grid == CMP_GRID_COL) {
        *rows = numroc(g->rows, g->mb, r, P);
        *cols = numroc(g->cols, g->nb, 0, 1);
    } else {
        *rows = numroc(g->rows, g->mb, 0, 1);
        *cols = numroc(g->cols, g->nb, r, P);
    }
}

/* Column-major dims of a row-major [rows, cols] buffer: (cols x rows). */
static void expect_local(const cmp_geom *g, int r, int P, int64_t rm_rows,
                         int64_t rm_cols, int64_t ld, const char *what) {
    int64_t rows, cols;
    local_dims(g, r, P, &rows, &cols);
    if (rows != rm_cols || cols != rm_rows || g->lld < (rows > 1 ? rows : 1) ||
        g->lld != (ld > 1 ? ld : 1))
        TEST_FAIL("%s on rank %d of %d: descriptor gives %lld x %lld "
                  "(lld %lld), expected the row-major [%lld, %lld] buffer "
                  "(ld %lld) as %lld x %lld",
                  what, r, P, (long long)rows, (long long)cols,
                  (long long)g->lld, (long long)rm_rows, (long long)rm_cols,
                  (long long)ld, (long long)rm_cols, (long long)rm_rows);
}

/* Checks one rank's descriptors of shape s (even or refused). */
static void check_rank_mapping(const cmp_shape *shape, int r, int *checked,
                               int *refused) {
    cmp_shape s = *shape;
    const int P = s.nranks;
    const int64_t M = s.m, N = s.n_total, K = s.k_total;
    const cgm_op op = s.op;
    const bool ag = op == CGM_OP_ALL_GATHER_GEMM;
    const bool ar = op == CGM_OP_GEMM_ALL_REDUCE;
    const bool native = ar && s.layout == CGM_LAYOUT_TN &&
                        s.algo_type == CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP;
    const bool even = M % P == 0 && (ag ? N % P == 0 : K % P == 0);
    const bool tn = s.layout == CGM_LAYOUT_TN, nt = s.layout == CGM_LAYOUT_NT;
    int64_t m_r = cgm_shard_rows(M, r, P);
    /* AG: local n; RS/AR: local k. */
    int64_t n_r = ag ? cgm_shard_rows(N, r, P) : N;
    int64_t k_r = ag ? K : cgm_shard_rows(K, r, P);
    int64_t xm = ag ? m_r : M;
    int64_t x_rows = nt ? k_r : xm, x_cols = nt ? xm : k_r;
    int64_t w_rows = tn ? n_r : k_r, w_cols = tn ? k_r : n_r;
    int64_t y_rows = op == CGM_OP_GEMM_REDUCE_SCATTER ? m_r : M;
    s.ldx = x_cols + 3;
    s.ldw = w_cols + 1;
    s.ldy = n_r + 2;
    cmp_problem pr;
    cgm_status st = cmp_map_problem(&s, &pr);
    if (!even) {
        CHECK_STATUS(st, CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "only with even shards");
        CHECK_CONTAINS(cgm_last_error(), "p2p or nccl");
        (*refused)++;
        return;
    }
    CHECK_OK(st);
    CHECK_INT_EQ(pr.m, N);
    CHECK_INT_EQ(pr.n, M);
    CHECK_INT_EQ(pr.k, K);
    CHECK_INT_EQ(pr.trans_a, tn ? CMP_CUBLAS_OP_T : CMP_CUBLAS_OP_N);
    CHECK_INT_EQ(pr.trans_b, nt ? CMP_CUBLAS_OP_T : CMP_CUBLAS_OP_N);
    CHECK(pr.native_ar == native);
    CHECK(pr.gather_rows == (ar && !native));
    expect_local(&pr.b, r, P, x_rows, x_cols, s.ldx, "X (B)");
    expect_local(&pr.a, r, P, w_rows, w_cols, s.ldw, "W (A)");
    if (!ar) expect_local(&pr.d, r, P, y_rows, n_r, s.ldy, "Y (D)");
    /* The fp32 D (RS with a 16-bit Y: this rank's rows; gathered AR: its
     * rows of the m x n buffer, at their offset; native AR: all of it). */
    cmp_output o;
    cmp_plan_output(&s, r, n_r, CGM_DTYPE_BF16, false, &o);
    CHECK_INT_EQ(o.y_rows, y_rows);
    CHECK_INT_EQ(o.y_cols, n_r);
    CHECK(o.gather == (ar && !native));
    CHECK(o.fp32_d == !ag);
    if (o.fp32_d) {
        cmp_geom dg = pr.d;
        dg.lld = o.d_lld;
        int64_t d_rows = native ? M : m_r;
        expect_local(&dg, r, P, d_rows, n_r, n_r, "fp32 D");
        CHECK_INT_EQ(o.d_rows, d_rows);
        CHECK_INT_EQ(o.d_offset, o.gather ? cgm_shard_offset(M, r, P) * n_r : 0);
        CHECK_INT_EQ((int64_t)o.d_bytes, y_rows * n_r * 4);
    }
    /* op(A) is m x k and op(B) is k x n in cuBLASMp's terms; the blocks
     * meet cublasMpMatmul's compatibility rules. */
    CHECK_INT_EQ(pr.trans_a ? pr.a.cols : pr.a.rows, pr.m);
    CHECK_INT_EQ(pr.trans_b ? pr.b.rows : pr.b.cols, pr.n);
    const int64_t a_kb = pr.trans_a ? pr.a.mb : pr.a.nb;
    const int64_t a_mb = pr.trans_a ? pr.a.nb : pr.a.mb;
    const int64_t b_kb = pr.trans_b ? pr.b.nb : pr.b.mb;
    const int64_t b_nb = pr.trans_b ? pr.b.mb : pr.b.nb;
    CHECK_INT_EQ(a_kb, b_kb);
    CHECK_INT_EQ(a_mb, pr.d.mb);
    CHECK_INT_EQ(b_nb, pr.d.nb);
    (*checked)++;
}

/* Every rank's descriptors must describe exactly the buffers commgemm's
 * API gives that rank, for every op, layout, algorithm (GEMM+AR's native
 * and gathered forms) and even shape; uneven shapes (P > 1) are refused,
 * the same way on every rank. */
static void mapping_matches_api(const void *p) {
    (void)p;
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    const int algos[] = {CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P,
                         CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP};
    int checked = 0, refused = 0, native = 0;
    for (int P = 1; P <= 5; P++)
        for (int oi = 0; oi < 3; oi++)
            for (int ai = 0; ai < 2; ai++)
                for (int L = 0; L < CGM_LAYOUT_COUNT_; L++)
                    for (int64_t M = 1; M <= 12; M++)
                        for (int64_t N = 1; N <= 12; N += 3)
                            for (int64_t K = 1; K <= 12; K += 3) {
            cmp_shape s = {ops[oi], (cgm_layout)L, P, M, N, K, 0, 0, 0,
                           algos[ai]};
            native += cmp_native_allreduce(s.op, s.layout, s.algo_type);
            for (int r = 0; r < P; r++)
                check_rank_mapping(&s, r, &checked, &refused);
        }
    CHECK(checked > 2000);
    CHECK(refused > 2000);
    CHECK(native > 100);
}

static void mapping_rejects(const void *p) {
    (void)p;
    cmp_problem pr;
    cmp_shape s = {CGM_OP_BULK, CGM_LAYOUT_TN, 2, 4, 4, 4, 4, 4, 4,
                   CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P};
    CHECK_STATUS(cmp_map_problem(&s, &pr), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "use p2p or nccl for bulk");
    /* GEMM+AR runs in every layout: cuBLASMp's own Matmul + AllReduce only
     * for TN with NO_OVERLAP, else GEMM+RS + an all-gather. */
    s.op = CGM_OP_GEMM_ALL_REDUCE;
    for (int L = 0; L < CGM_LAYOUT_COUNT_; L++) {
        s.layout = (cgm_layout)L;
        s.algo_type = CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP;
        CHECK_OK(cmp_map_problem(&s, &pr));
        CHECK(pr.native_ar == (L == CGM_LAYOUT_TN));
        CHECK(pr.gather_rows == (L != CGM_LAYOUT_TN));
        s.algo_type = CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P;
        CHECK_OK(cmp_map_problem(&s, &pr));
        CHECK(!pr.native_ar && pr.gather_rows);
    }
    CHECK(!cmp_native_allreduce(CGM_OP_GEMM_REDUCE_SCATTER, CGM_LAYOUT_TN,
                                CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP));
    CHECK(!cmp_native_allreduce(CGM_OP_GEMM_ALL_REDUCE, CGM_LAYOUT_TN,
                                CUBLASMP_MATMUL_ALGO_TYPE_ATOMIC_P2P));
    s.layout = CGM_LAYOUT_NT;
    s.layout = CGM_LAYOUT_TN;
    s.k_total = 0;
    CHECK_STATUS(cmp_map_problem(&s, &pr), CGM_ERROR_INVALID_ARGUMENT);
}

/* Uneven shards: refused with what to do, for every op, on m before the
 * exchange (n / k unknown: 0) and on n / k after it. */
static void even_shards(const void *p) {
    (void)p;
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(cmp_check_even(ops[i], 131, 97, 71, 1)); /* P = 1: any */
        CHECK_OK(cmp_check_even(ops[i], 128, 0, 0, 2));
        CHECK_OK(cmp_check_even(ops[i], 132, 96, 72, 4));
        CHECK_STATUS(cmp_check_even(ops[i], 131, 0, 0, 2),
                     CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "m = 131");
        CHECK_CONTAINS(cgm_last_error(), "not divisible by P = 2");
        CHECK_CONTAINS(cgm_last_error(), "use even shards (m divisible by P)");
        CHECK_CONTAINS(cgm_last_error(), "p2p or nccl backend");
        CHECK_STATUS(cmp_check_even(ops[i], 1, 0, 0, 2), CGM_ERROR_NOT_SUPPORTED);
    }
    CHECK_STATUS(cmp_check_even(CGM_OP_ALL_GATHER_GEMM, 128, 97, 71, 2),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "n = 97");
    CHECK_CONTAINS(cgm_last_error(), "AllGather+Matmul");
    CHECK_OK(cmp_check_even(CGM_OP_ALL_GATHER_GEMM, 128, 96, 71, 2));
    CHECK_STATUS(cmp_check_even(CGM_OP_GEMM_REDUCE_SCATTER, 128, 97, 71, 2),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "k = 71");
    CHECK_STATUS(cmp_check_even(CGM_OP_GEMM_ALL_REDUCE, 128, 97, 71, 2),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "gemm_ar");
    CHECK_OK(cmp_check_even(CGM_OP_GEMM_ALL_REDUCE, 128, 97, 72, 2));
}

static void dtype_compute_algo(const void *p) {
    (void)p;
    int t = -1;
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_FP32, &t));
    CHECK_INT_EQ(t, 0);  /* CUDA_R_32F */
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_FP16, &t));
    CHECK_INT_EQ(t, 2);  /* CUDA_R_16F */
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_BF16, &t));
    CHECK_INT_EQ(t, 14); /* CUDA_R_16BF */
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_FP8_E4M3, &t));
    CHECK_INT_EQ(t, 28); /* CUDA_R_8F_E4M3 */
    CHECK_OK(cmp_map_dtype(CGM_DTYPE_FP8_E5M2, &t));
    CHECK_INT_EQ(t, 29); /* CUDA_R_8F_E5M2 */
    CHECK_STATUS(cmp_map_dtype(CGM_DTYPE_COUNT_, &t), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_INT_EQ(cmp_map_compute(CGM_DTYPE_FP32, false), 68);
    CHECK_INT_EQ(cmp_map_compute(CGM_DTYPE_FP32, true), 77);
    CHECK_INT_EQ(cmp_map_compute(CGM_DTYPE_BF16, true), 68);
    int a = -1;
    CHECK_OK(cmp_map_algo(CGM_ALGO_AUTO, NULL, &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
    /* Multicast algorithms and cuBLASMp's DEFAULT (which may pick one) are
     * never selectable. */
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "split_multicast", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "never uses cuBLASMp's multicast");
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "atomic_multicast", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "default", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "fused", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "fused NVSwitch GEMM+AllReduce");
    /* The per-call option: fused (the p2p kernel's) is cuBLASMp's split. */
    CHECK_OK(cmp_map_algo(CGM_ALGO_FUSED, NULL, &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
    CHECK_OK(cmp_map_algo(CGM_ALGO_AUTO, "atomic_p2p", &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_ATOMIC_P2P);
    CHECK_CONTAINS(cmp_algo_type_name(CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP), "NO_OVERLAP");
    CHECK_CONTAINS(cmp_algo_type_name(CUBLASMP_MATMUL_ALGO_TYPE_FUSED), "FUSED");
    CHECK_CONTAINS(cmp_algo_type_name(42), "unknown");
    CHECK_OK(cmp_map_algo(CGM_ALGO_AUTO, "Split_P2P", &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
    CHECK_OK(cmp_map_algo(CGM_ALGO_SPLIT_PIPELINED, "no_overlap", &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P);
    CHECK_OK(cmp_map_algo(CGM_ALGO_NO_OVERLAP, NULL, &a));
    CHECK_INT_EQ(a, CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP);
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_AUTO, "fastest", &a), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_CUBLASMP_ALGO=\"fastest\"");
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_RING, NULL, &a), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "ring");
    CHECK_STATUS(cmp_map_algo(CGM_ALGO_BULK, NULL, &a), CGM_ERROR_NOT_SUPPORTED);
}

static void split_check(const void *p) {
    (void)p;
    int64_t total = 0;
    const int64_t good[] = {3, 3, 2};
    CHECK_OK(cmp_check_split(good, 3, "n", &total));
    CHECK_INT_EQ(total, 8);
    const int64_t tail_empty[] = {2, 2, 0}; /* m < P: last shard empty */
    CHECK_OK(cmp_check_split(tail_empty, 3, "n", &total));
    CHECK_INT_EQ(total, 4);
    const int64_t one[] = {5};
    CHECK_OK(cmp_check_split(one, 1, "k", &total));
    const int64_t bad[] = {2, 3, 3};
    CHECK_STATUS(cmp_check_split(bad, 3, "k (the contraction)", &total),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "expected rank 0 to have 3, found 2");
    CHECK_CONTAINS(cgm_last_error(), "k (the contraction)");
    const int64_t zeros[] = {0, 0};
    CHECK_OK(cmp_check_split(zeros, 2, "n", &total));
    CHECK_INT_EQ(total, 0);
}

/* Who finishes Y: cuBLASMp directly (a dense fp32 Y of RS, every AG), or
 * an fp32 D and commgemm's fp32 pass (RS with a 16-bit Y or a padded fp32
 * Y; every AR, after the all-gather); the bias always by commgemm. */
static void output_plan(const void *p) {
    (void)p;
    cmp_shape s = {CGM_OP_GEMM_REDUCE_SCATTER, CGM_LAYOUT_TN, 2, 130, 97, 72,
                   72, 72, 97, CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P};
    cmp_output o;
    const cgm_dtype outs[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP16, CGM_DTYPE_FP32};
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    const int algos[] = {CUBLASMP_MATMUL_ALGO_TYPE_SPLIT_P2P,
                         CUBLASMP_MATMUL_ALGO_TYPE_NO_OVERLAP};
    /* ldy 97: dense; 105: padded (cuBLASMp 0.7's RS returned INTERNAL_ERROR
     * for an fp32 D with lld > n). */
    const int64_t ldys[] = {97, 105};
    for (int li = 0; li < 2; li++)
        for (int oi = 0; oi < 3; oi++)
            for (int ai = 0; ai < 2; ai++)
                for (int di = 0; di < 3; di++)
                    for (int bias = 0; bias < 2; bias++) {
                    s.op = ops[oi];
                    s.ldy = ldys[li];
                    s.algo_type = algos[ai];
                    cmp_plan_output(&s, 1, 97, outs[di], bias, &o);
                    bool ar = ops[oi] == CGM_OP_GEMM_ALL_REDUCE;
                    bool rs = ops[oi] == CGM_OP_GEMM_REDUCE_SCATTER;
                    bool native = ar && ai == 1; /* TN + NO_OVERLAP */
                    bool want_fp32 = ar || (rs && (outs[di] != CGM_DTYPE_FP32 ||
                                                   ldys[li] > 97));
                    CHECK(o.fp32_d == want_fp32);
                    CHECK(o.gather == (ar && !native));
                    CHECK(o.bias_pass == (bias && !want_fp32));
                    CHECK_INT_EQ(o.y_rows, rs ? 65 : 130);
                    CHECK_INT_EQ(o.y_cols, 97);
                    CHECK_INT_EQ((int64_t)o.d_bytes, want_fp32 ? o.y_rows * 97 * 4 : 0);
                    CHECK_INT_EQ(o.d_rows, !want_fp32 ? 0 : native ? 130 : 65);
                    CHECK_INT_EQ(o.d_offset, ar && !native ? 65 * 97 : 0);
                    if (want_fp32) CHECK_INT_EQ(o.d_lld, 97); /* dense */
                }
}

static void register_cases(void) {
    test_add("env_path_missing", env_path_missing, NULL);
    test_add("explicit_path_missing", explicit_path_missing, NULL);
    test_add("search_finds_nothing", search_finds_nothing, NULL);
    test_add("missing_symbol", missing_symbol, NULL);
    test_add("old_version_refused", old_version_refused, NULL);
    test_add("unknown_version_refused", unknown_version_refused, NULL);
    test_add("version_codes", version_codes, NULL);
    test_add("supported_versions_load", supported_versions_load, NULL);
    test_add("nccl_too_old", nccl_too_old, NULL);
    test_add("nccl_absent", nccl_absent, NULL);
    test_add("nccl_symbols_unresolved", nccl_symbols_unresolved, NULL);
    test_add("pip_locations", pip_locations, NULL);
    test_add("host_comm_refuses", host_comm_refuses, NULL);
    test_add("symm_alloc_registers_both_grids",
             symm_alloc_registers_both_grids, NULL);
    test_add("symm_every_buffer", symm_every_buffer, NULL);
    test_add("symm_failures", symm_failures, NULL);
    test_add("mapping_matches_api", mapping_matches_api, NULL);
    test_add("mapping_rejects", mapping_rejects, NULL);
    test_add("even_shards", even_shards, NULL);
    test_add("dtype_compute_algo", dtype_compute_algo, NULL);
    test_add("split_check", split_check, NULL);
    test_add("output_plan", output_plan, NULL);
}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_cases);
}
