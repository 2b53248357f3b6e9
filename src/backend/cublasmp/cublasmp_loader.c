/* Loads cuBLASMp with dlopen, checks its version and the NCCL it shares
 * with commgemm, and resolves every entry point the backend uses into one
 * table. commgemm is built without cuBLASMp: its absence is a run-time
 * CGM_ERROR_UNAVAILABLE that says how to install it. */
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cublasmp/cublasmp.h"

#define LIB_NAME "libcublasmp.so.0"
#define MAX_CANDIDATES 16

typedef struct symbol {
    const char *name;
    size_t offset; /* of the function pointer in cmp_api */
    bool required;
} symbol;

#define REQUIRED(field) {"cublasMp" #field, offsetof(cmp_api, field), true}
static const symbol symbols[] = {
    REQUIRED(Create),
    REQUIRED(Destroy),
    REQUIRED(SetStream),
    REQUIRED(GridCreate),
    REQUIRED(GridDestroy),
    REQUIRED(Malloc),
    REQUIRED(Free),
    REQUIRED(BufferRegister),
    REQUIRED(BufferDeregister),
    REQUIRED(MatrixDescriptorCreate),
    REQUIRED(MatrixDescriptorDestroy),
    REQUIRED(MatmulDescriptorCreate),
    REQUIRED(MatmulDescriptorDestroy),
    REQUIRED(MatmulDescriptorSetAttribute),
    REQUIRED(Matmul_bufferSize),
    REQUIRED(Matmul),
    {"cublasMpGetStatusString", offsetof(cmp_api, GetStatusString), false},
};
#undef REQUIRED

/* ------------------------------------------------------------- versions */

void cmp_version_text(int version, char *buf, size_t len) {
    snprintf(buf, len, "%d.%d.%d", version / 10000, version % 10000 / 100,
             version % 100);
}

void cmp_nccl_version_text(int version, char *buf, size_t len) {
    if (version >= 10000) /* NCCL >= 2.9: major * 10000 + minor * 100 + patch */
        snprintf(buf, len, "%d.%d.%d", version / 10000, version % 10000 / 100,
                 version % 100);
    else /* older: major * 1000 + minor * 100 + patch */
        snprintf(buf, len, "%d.%d.%d", version / 1000, version % 1000 / 100,
                 version % 100);
}

cgm_status cmp_check_version(int version, const char *where) {
    char found[32];
    cmp_version_text(version, found, sizeof found);
    if (version < CMP_VERSION_MIN)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "cuBLASMp at %s is version %s: the cublasmp backend "
                         "supports cuBLASMp " CMP_SUPPORTED_TEXT " (0.8 "
                         "replaced NVSHMEM with NCCL symmetric memory and "
                         "renamed entry points; 0.7 and older are not "
                         "supported); %s",
                         where, found, CMP_INSTALL_HINT);
    if (version >= CMP_VERSION_END)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "cuBLASMp at %s is version %s, which this commgemm "
                         "does not know: it supports cuBLASMp "
                         CMP_SUPPORTED_TEXT " (written against the 0.10 "
                         "headers); %s",
                         where, found, CMP_INSTALL_HINT);
    return CGM_SUCCESS;
}

cgm_status cmp_check_nccl(int nccl_version, const char *nccl_path,
                          int version, const char *where) {
    if (nccl_version >= CMP_NCCL_MIN) return CGM_SUCCESS;
    char found[32], mine[32];
    cmp_nccl_version_text(nccl_version, found, sizeof found);
    cmp_version_text(version, mine, sizeof mine);
    return cgm_error(CGM_ERROR_UNAVAILABLE,
                     "cuBLASMp %s at %s needs NCCL >= " CMP_NCCL_MIN_TEXT
                     ", but the libnccl.so.2 it shares with commgemm in this "
                     "process (%s) is NCCL %s; %s",
                     mine, where, nccl_path && *nccl_path ? nccl_path : "?",
                     found, CMP_NCCL_HINT);
}

/* The process's libnccl.so.2, if one is loaded: "NCCL 2.28.9 at PATH". */
static void loaded_nccl(char *buf, size_t len) {
    snprintf(buf, len, "no libnccl.so.2 is loaded in this process");
    void *h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return;
    int (*get)(int *) = NULL;
    void *f = dlsym(h, "ncclGetVersion");
    memcpy(&get, &f, sizeof get);
    int v = 0;
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (get && get(&v) == 0 && dladdr(f, &info)) {
        char text[32];
        cmp_nccl_version_text(v, text, sizeof text);
        snprintf(buf, len, "the process's libnccl.so.2 is NCCL %s at %.400s",
                 text, info.dli_fname ? info.dli_fname : "?");
    }
    dlclose(h);
}

/* --------------------------------------------------------------- search */

static void append(char *buf, size_t len, const char *fmt, const char *a,
                   const char *b) {
    size_t used = strlen(buf);
    /* A long list of tried paths is cut, not an error: keep the start. */
    if (used + 1 < len) {
        int n = snprintf(buf + used, len - used, fmt, a, b);
        (void)n;
    }
}

static int add_glob(const char *pattern, char (*paths)[512], int count,
                    int max) {
    glob_t g;
    memset(&g, 0, sizeof g);
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && count < max; i++) {
            bool seen = false;
            for (int j = 0; j < count; j++)
                if (!strcmp(paths[j], g.gl_pathv[i])) seen = true;
            if (seen || strlen(g.gl_pathv[i]) >= 512) continue;
            snprintf(paths[count++], 512, "%s", g.gl_pathv[i]);
        }
    }
    globfree(&g);
    return count;
}

/* `site` is a site-packages folder (or a pattern of them). */
static int add_site(const char *site, char (*paths)[512], int count,
                    int max) {
    char pattern[600];
    if (!site || !*site || strlen(site) > 400) return count;
    snprintf(pattern, sizeof pattern, "%s/nvidia/cublasmp/cu*/lib/" LIB_NAME,
             site);
    return add_glob(pattern, paths, count, max);
}

static int add_prefix(const char *prefix, char (*paths)[512], int count,
                      int max) {
    char site[500];
    if (!prefix || !*prefix || strlen(prefix) > 400) return count;
    snprintf(site, sizeof site, "%s/lib/python3*/site-packages", prefix);
    return add_site(site, paths, count, max);
}

int cmp_lib_candidates(char (*paths)[512], int max) {
    int count = 0;
    count = add_prefix(getenv("VIRTUAL_ENV"), paths, count, max);
    count = add_prefix(getenv("CONDA_PREFIX"), paths, count, max);
    const char *pp = getenv("PYTHONPATH");
    if (pp) {
        char *copy = strdup(pp), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t;
             t = strtok_r(NULL, ":", &save))
            count = add_site(t, paths, count, max);
        free(copy);
    }
    const char *home = getenv("HOME");
    if (home && strlen(home) < 300) {
        char site[400];
        snprintf(site, sizeof site, "%s/.local/lib/python3*/site-packages",
                 home);
        count = add_site(site, paths, count, max);
    }
    count = add_site("/usr/local/lib/python3*/dist-packages", paths, count,
                     max);
    count = add_site("/usr/local/lib/python3*/site-packages", paths, count,
                     max);
    count = add_site("/usr/lib/python3/dist-packages", paths, count, max);
    return count;
}

/* ------------------------------------------------------------- resolve */

static void *lookup(void *dl, const char *name) {
    dlerror();
    return dlsym(dl, name);
}

/* The NCCL cuBLASMp resolves: dlsym through the library's own dependency
 * tree, i.e. the libnccl.so.2 it binds to (the one already loaded in the
 * process, which commgemm uses too: one soname, one copy). */
static cgm_status resolve_nccl(cmp_api *api, const char *where) {
    void *f = lookup(api->dl, "ncclGetVersion");
    if (!f) {
        char version[32];
        cmp_version_text(api->version, version, sizeof version);
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "cuBLASMp %s at %s reaches no ncclGetVersion: "
                         "expected libnccl.so.2 (NCCL >= " CMP_NCCL_MIN_TEXT
                         ") among its dependencies; %s",
                         version, where, CMP_NCCL_HINT);
    }
    memcpy(&api->NcclGetVersion, &f, sizeof f);
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (dladdr(f, &info) && info.dli_fname)
        snprintf(api->nccl_path, sizeof api->nccl_path, "%.*s",
                 (int)sizeof api->nccl_path - 1, info.dli_fname);
    int v = 0;
    int res = api->NcclGetVersion(&v);
    if (res != 0)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "ncclGetVersion of %s (cuBLASMp's NCCL) returned %d: "
                         "expected ncclSuccess; %s",
                         api->nccl_path, res, CMP_NCCL_HINT);
    api->nccl_version = v;
    return cmp_check_nccl(v, api->nccl_path, api->version, where);
}

/* Checks the version first (every cuBLASMp has cublasMpGetVersion: an old
 * one is refused by its version, not by a renamed symbol), then resolves
 * the table and the NCCL behind it. */
static cgm_status resolve(cmp_api *api, const char *where) {
    void *f = lookup(api->dl, "cublasMpGetVersion");
    if (!f) {
        const char *why = dlerror();
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "%s: missing symbol cublasMpGetVersion (dlsym: %s): "
                         "expected a cuBLASMp library; %s",
                         where, why ? why : "not found", CMP_INSTALL_HINT);
    }
    memcpy(&api->GetVersion, &f, sizeof f);
    int version = 0;
    cublasMpStatus_t s = api->GetVersion(&version);
    if (s != CUBLASMP_STATUS_SUCCESS)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "cuBLASMp at %s: cublasMpGetVersion returned %d "
                         "(%s); reinstall it: %s",
                         where, (int)s, cmp_status_name(s), CMP_INSTALL_HINT);
    api->version = version;
    cgm_status status = cmp_check_version(version, where);
    if (status != CGM_SUCCESS) return status;
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        f = lookup(api->dl, symbols[i].name);
        if (!f && symbols[i].required) {
            const char *why = dlerror();
            char text[32];
            cmp_version_text(version, text, sizeof text);
            return cgm_error(CGM_ERROR_UNAVAILABLE,
                             "cuBLASMp %s at %s: missing symbol %s (dlsym: "
                             "%s): expected the cuBLASMp 0.8+ API; %s",
                             text, where, symbols[i].name,
                             why ? why : "not found", CMP_INSTALL_HINT);
        }
        memcpy((char *)api + symbols[i].offset, &f, sizeof f);
    }
    return resolve_nccl(api, where);
}

/* Opens `path` and verifies it. A failure leaves api closed and its reason
 * in errors (and in cgm_last_error()). */
static cgm_status open_one(const char *path, cmp_api *api, char *errors,
                           size_t errors_len) {
    memset(api, 0, sizeof *api);
    dlerror();
    api->dl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!api->dl) {
        const char *why = dlerror();
        char detail[900];
        snprintf(detail, sizeof detail, "%.500s", why ? why : "?");
        /* cuBLASMp 0.8+ on an older NCCL: its NCCL symbols do not resolve. */
        if (strstr(detail, "undefined symbol: nccl")) {
            char nccl[600];
            loaded_nccl(nccl, sizeof nccl);
            size_t used = strlen(detail);
            snprintf(detail + used, sizeof detail - used,
                     " (cuBLASMp 0.8+ needs NCCL >= " CMP_NCCL_MIN_TEXT
                     "; %.300s)", nccl);
        }
        append(errors, errors_len, " [%.400s: %s]", path, detail);
        return CGM_ERROR_UNAVAILABLE;
    }
    snprintf(api->path, sizeof api->path, "%.*s", (int)sizeof api->path - 1,
             path);
    cgm_status status = resolve(api, path);
    if (status != CGM_SUCCESS) {
        append(errors, errors_len, " [%s%s]", cgm_last_error(), "");
        cmp_lib_close(api);
    }
    return status;
}

cgm_status cmp_lib_load(const char *path, cmp_api *api) {
    char errors[3072] = "";
    memset(api, 0, sizeof *api);
    if (path && *path) {
        if (open_one(path, api, errors, sizeof errors) == CGM_SUCCESS)
            return CGM_SUCCESS;
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the cublasmp backend could not use cuBLASMp from "
                         "COMMGEMM_CUBLASMP_LIB:%s; expected the path of a "
                         "cuBLASMp " CMP_SUPPORTED_TEXT " libcublasmp.so.0 "
                         "whose dependencies (libnccl.so.2 >= "
                         CMP_NCCL_MIN_TEXT ", libcublas.so.13) resolve; %s",
                         errors, CMP_INSTALL_HINT);
    }
    /* The loader's search, then pip locations: the first that loads and
     * passes the checks (a stale old copy does not hide a newer one). */
    if (open_one(LIB_NAME, api, errors, sizeof errors) == CGM_SUCCESS)
        return CGM_SUCCESS;
    char paths[MAX_CANDIDATES][512];
    int n = cmp_lib_candidates(paths, MAX_CANDIDATES);
    for (int i = 0; i < n; i++)
        if (open_one(paths[i], api, errors, sizeof errors) == CGM_SUCCESS)
            return CGM_SUCCESS;
    /* The advice first: a long list of candidates is cut at its end. */
    return cgm_error(CGM_ERROR_UNAVAILABLE,
                     "the cublasmp backend needs NVIDIA cuBLASMp "
                     CMP_SUPPORTED_TEXT ": %s; found none that loads and "
                     "passes its checks (tried the loader's search and pip "
                     "locations):%s",
                     CMP_INSTALL_HINT, errors);
}

void cmp_lib_close(cmp_api *api) {
    if (api->dl) dlclose(api->dl);
    memset(api, 0, sizeof *api);
}

/* ---- the process-wide table ---- */

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static cmp_api lib;
static cgm_status lib_status;
static char lib_message[4096];

static void lib_load_once(void) {
    bool from_env = false;
    const char *path = cgm_param_string("COMMGEMM_CUBLASMP_LIB", &from_env);
    lib_status = cmp_lib_load(from_env ? path : NULL, &lib);
    if (lib_status != CGM_SUCCESS) {
        snprintf(lib_message, sizeof lib_message, "%s", cgm_last_error());
        return;
    }
    /* Never unloaded: NCCL symmetric-memory state inside it lives as long
     * as the process. */
    char version[32], nccl[32];
    cmp_version_text(lib.version, version, sizeof version);
    cmp_nccl_version_text(lib.nccl_version, nccl, sizeof nccl);
    CGM_INFO(CGM_SUB_CUBLASMP, "loaded cuBLASMp %s from %s%s; NCCL %s "
             "(%s), shared with commgemm",
             version, lib.path, from_env ? " (COMMGEMM_CUBLASMP_LIB)" : "",
             nccl, lib.nccl_path);
}

cgm_status cmp_lib_get(const cmp_api **out) {
    pthread_once(&lib_once, lib_load_once);
    if (lib_status != CGM_SUCCESS) {
        *out = NULL;
        return cgm_error(lib_status, "%s", lib_message);
    }
    *out = &lib;
    return CGM_SUCCESS;
}
