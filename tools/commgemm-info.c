/* commgemm-info: version, backends compiled in, and whether each can run on
 * this machine. Creates no comm: availability of the GPU backends is judged
 * from what the dynamic loader and the CUDA driver say. */
#include <dlfcn.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "commgemm.h"

#ifndef COMMGEMM_INFO_HAVE_CUDA
#define COMMGEMM_INFO_HAVE_CUDA 0
#endif

typedef struct availability {
    int available;
    char why[160];
} availability;

/* cuInit + cuDeviceGetCount through the driver, so no CUDA header needed. */
static int cuda_device_count(char *why, size_t size) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(why, size, "no CUDA driver (libcuda.so.1 not found)");
        return 0;
    }
    typedef int (*cu_init_fn)(unsigned);
    typedef int (*cu_count_fn)(int *);
    cu_init_fn cu_init;
    cu_count_fn cu_count;
    *(void **)&cu_init = dlsym(lib, "cuInit");
    *(void **)&cu_count = dlsym(lib, "cuDeviceGetCount");
    int count = 0, rc = -1;
    if (cu_init && cu_count && (rc = cu_init(0)) == 0) cu_count(&count);
    if (rc != 0)
        snprintf(why, size, "the CUDA driver failed to initialise (CUresult %d)", rc);
    else if (count == 0)
        snprintf(why, size, "the CUDA driver sees no GPU");
    else
        snprintf(why, size, "%d GPU%s visible", count, count == 1 ? "" : "s");
    dlclose(lib);
    return count;
}

static int can_load(const char *const *names, char *found, size_t size) {
    for (; *names; names++) {
        void *lib = dlopen(*names, RTLD_LAZY | RTLD_LOCAL);
        if (lib) {
            snprintf(found, size, "%s", *names);
            dlclose(lib);
            return 1;
        }
    }
    return 0;
}

static availability probe(cgm_backend backend, int compiled) {
    availability a = {0, ""};
    char gpus[96], lib[64];
    static const char *const nccl[] = {"libnccl.so.2", "libnccl.so", NULL};
    static const char *const cublasmp[] = {"libcublasmp.so.0", "libcublasmp.so", NULL};
    if (!compiled) {
        snprintf(a.why, sizeof a.why, "not compiled in (configure with "
                 "-DCOMMGEMM_CUDA=ON on a machine with CUDA and NCCL)");
        return a;
    }
    if (backend == CGM_BACKEND_HOST) {
        a.available = 1;
        snprintf(a.why, sizeof a.why, "CPU reference (shared memory + OpenBLAS)");
        return a;
    }
    int count = cuda_device_count(gpus, sizeof gpus);
    if (count == 0) {
        snprintf(a.why, sizeof a.why, "%s", gpus);
        return a;
    }
    if (!can_load(nccl, lib, sizeof lib)) {
        snprintf(a.why, sizeof a.why, "%.48s, but NCCL (libnccl.so.2) is not loadable", gpus);
        return a;
    }
    if (backend == CGM_BACKEND_CUBLASMP && !can_load(cublasmp, lib, sizeof lib)) {
        snprintf(a.why, sizeof a.why, "%.48s, but libcublasmp.so.0 is not loadable "
                 "(install cuBLASMp or add it to LD_LIBRARY_PATH)", gpus);
        return a;
    }
    a.available = 1;
    snprintf(a.why, sizeof a.why, "%.48s, %.80s", gpus, lib);
    if (backend == CGM_BACKEND_P2P && count < 2)
        snprintf(a.why + strlen(a.why), sizeof a.why - strlen(a.why),
                 " (p2p needs a GPU per rank in one NVLink domain)");
    return a;
}

int main(int argc, char **argv) {
    static const struct option long_options[] = {
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
        if (c == 'h') {
            printf("Usage: commgemm-info\n"
                   "Prints the commgemm version, the backends compiled in and\n"
                   "whether each can run on this machine.\n");
            return 0;
        }
        fprintf(stderr, "commgemm-info: see 'commgemm-info --help'\n");
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "commgemm-info: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    int v = cgm_version();
    printf("commgemm %d.%d.%d (header %d.%d.%d)%s\n", v / 10000, v / 100 % 100,
           v % 100, COMMGEMM_VERSION_MAJOR, COMMGEMM_VERSION_MINOR,
           COMMGEMM_VERSION_PATCH,
           v == COMMGEMM_VERSION ? "" : "  WARNING: header and library differ");
    printf("dtypes:");
    for (int d = 0; d < CGM_DTYPE_COUNT_; d++) printf(" %s", cgm_dtype_name((cgm_dtype)d));
    printf("\nalgorithms:");
    for (int a = 0; a < CGM_ALGO_COUNT_; a++) printf(" %s", cgm_algo_name((cgm_algo)a));
    printf("\nbackends:\n");
    for (int b = CGM_BACKEND_HOST; b < CGM_BACKEND_COUNT_; b++) {
        int compiled = b == CGM_BACKEND_HOST || COMMGEMM_INFO_HAVE_CUDA;
        availability a = probe((cgm_backend)b, compiled);
        printf("  %-9s %-13s %-13s %s\n", cgm_backend_name((cgm_backend)b),
               compiled ? "compiled in" : "not compiled",
               a.available ? "available" : "unavailable", a.why);
    }
    return 0;
}
