/* Loads cuBLASMp with dlopen and resolves every entry point the backend
 * uses into one table. commgemm is built without cuBLASMp: its absence is
 * a run-time CGM_ERROR_UNAVAILABLE that says how to install it. */
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
    REQUIRED(GetVersion),
    REQUIRED(Create),
    REQUIRED(Destroy),
    REQUIRED(StreamSet),
    REQUIRED(GridCreate),
    REQUIRED(GridDestroy),
    REQUIRED(MatrixDescriptorCreate),
    REQUIRED(MatrixDescriptorDestroy),
    REQUIRED(MatmulDescriptorCreate),
    REQUIRED(MatmulDescriptorDestroy),
    REQUIRED(MatmulDescriptorAttributeSet),
    REQUIRED(Matmul_bufferSize),
    REQUIRED(Matmul),
    /* NVSHMEM's symmetric allocator, found through cuBLASMp's dependencies
     * (libnvshmem_host.so.3): without it the workspace is plain device
     * memory and cuBLASMp 0.7 runs its no-overlap algorithm. */
    {"nvshmem_malloc", offsetof(cmp_api, nvshmem_malloc), false},
    {"nvshmem_free", offsetof(cmp_api, nvshmem_free), false},
};
#undef REQUIRED

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

/* Resolves the table from an opened library and checks its version. */
static cgm_status resolve(cmp_api *api, const char *where) {
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        dlerror();
        void *f = dlsym(api->dl, symbols[i].name);
        if (!f && symbols[i].required) {
            const char *why = dlerror();
            return cgm_error(CGM_ERROR_UNAVAILABLE,
                             "cuBLASMp at %s: missing symbol %s (dlsym: %s): "
                             "expected the cuBLASMp 0.7 API, found a library "
                             "without it; %s",
                             where, symbols[i].name, why ? why : "not found",
                             CMP_INSTALL_HINT);
        }
        memcpy((char *)api + symbols[i].offset, &f, sizeof f);
    }
    int version = 0;
    cublasMpStatus_t s = api->GetVersion(&version);
    if (s != CUBLASMP_STATUS_SUCCESS)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "cuBLASMp at %s: cublasMpGetVersion returned %d "
                         "(%s); reinstall it: %s",
                         where, (int)s, cmp_status_name(s), CMP_INSTALL_HINT);
    api->version = version;
    if (version < CMP_VERSION_MIN || version >= CMP_VERSION_END)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "cuBLASMp at %s is version %d.%d.%d: expected 0.7.x "
                         "(the API and memory model this backend is written "
                         "for; 0.8+ also needs NCCL >= 2.29); %s",
                         where, version / 1000, version % 1000 / 100,
                         version % 100, CMP_INSTALL_HINT);
    return CGM_SUCCESS;
}

static cgm_status open_one(const char *path, cmp_api *api, char *errors,
                           size_t errors_len) {
    dlerror();
    api->dl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!api->dl) {
        const char *why = dlerror();
        append(errors, errors_len, " [%.400s: %.400s]", path, why ? why : "?");
        return CGM_ERROR_UNAVAILABLE;
    }
    snprintf(api->path, sizeof api->path, "%.*s", (int)sizeof api->path - 1, path);
    return CGM_SUCCESS;
}

cgm_status cmp_lib_load(const char *path, cmp_api *api) {
    char errors[2048] = "";
    memset(api, 0, sizeof *api);
    cgm_status status = CGM_ERROR_UNAVAILABLE;
    if (path && *path) {
        status = open_one(path, api, errors, sizeof errors);
        if (status != CGM_SUCCESS)
            return cgm_error(CGM_ERROR_UNAVAILABLE,
                             "the cublasmp backend could not load cuBLASMp "
                             "from COMMGEMM_CUBLASMP_LIB:%s; expected the "
                             "path of libcublasmp.so.0 whose dependencies "
                             "(libnccl.so.2, libnvshmem_host.so.3, "
                             "libcublas.so.13) resolve; %s",
                             errors, CMP_INSTALL_HINT);
    } else {
        status = open_one(LIB_NAME, api, errors, sizeof errors);
        if (status != CGM_SUCCESS) {
            char paths[MAX_CANDIDATES][512];
            int n = cmp_lib_candidates(paths, MAX_CANDIDATES);
            for (int i = 0; i < n && status != CGM_SUCCESS; i++)
                status = open_one(paths[i], api, errors, sizeof errors);
        }
        if (status != CGM_SUCCESS)
            return cgm_error(CGM_ERROR_UNAVAILABLE,
                             "the cublasmp backend needs NVIDIA cuBLASMp "
                             "0.7, found none that loads (tried the "
                             "loader's search and pip locations):%s; %s",
                             errors, CMP_INSTALL_HINT);
    }
    status = resolve(api, api->path);
    if (status != CGM_SUCCESS) cmp_lib_close(api);
    return status;
}

void cmp_lib_close(cmp_api *api) {
    if (api->dl) dlclose(api->dl);
    memset(api, 0, sizeof *api);
}

/* ---- the process-wide table ---- */

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static cmp_api lib;
static cgm_status lib_status;
static char lib_message[2560];

static void lib_load_once(void) {
    bool from_env = false;
    const char *path = cgm_param_string("COMMGEMM_CUBLASMP_LIB", &from_env);
    lib_status = cmp_lib_load(from_env ? path : NULL, &lib);
    if (lib_status != CGM_SUCCESS) {
        snprintf(lib_message, sizeof lib_message, "%s", cgm_last_error());
        return;
    }
    /* Never unloaded: NVSHMEM and NCCL state inside it live as long as the
     * process. */
    CGM_INFO(CGM_SUB_CUBLASMP, "loaded cuBLASMp %d.%d.%d from %s%s; "
             "symmetric workspace (nvshmem_malloc): %s",
             lib.version / 1000, lib.version % 1000 / 100, lib.version % 100,
             lib.path, from_env ? " (COMMGEMM_CUBLASMP_LIB)" : "",
             lib.nvshmem_malloc && lib.nvshmem_free ? "yes" : "no");
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
