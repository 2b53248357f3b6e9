/* Where an operand's memory is, as the CUDA driver tells, so that an op
 * handed memory its backend cannot read fails with a message instead of
 * crashing: a host op reading GPU memory faults on the CPU, a GPU op
 * reading CPU memory (or another GPU's) hits an illegal address that ends
 * the process's CUDA context.
 *
 * The driver is looked up among the libraries the process has already
 * loaded (dl_iterate_phdr), never loaded here: a process that has not
 * loaded libcuda (or not called cuInit) has no GPU memory to mistake, and
 * a host-only program never starts CUDA because of this check. Needs no
 * CUDA header: the one driver function and its constants are declared
 * here (cuda.h's values, stable since CUDA 4). */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <stdatomic.h>

#include "core.h"

enum {
    CU_SUCCESS = 0,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_UNIFIED = 4,
};

typedef int (*pointer_attributes_fn)(unsigned int count, int *attributes, void **data, unsigned long long ptr);

static _Atomic(pointer_attributes_fn) driver_query;
static _Atomic(cgm_memory_query_fn) test_query;

/* Finds a loaded libcuda.so* among the process's objects (no file system
 * search: dlopen of a bare name with RTLD_NOLOAD still searches the library
 * path when the library is not loaded, about 30 us a call). */
static int find_cuda(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    const char *name = info->dlpi_name, *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "libcuda.so", 10) != 0) return 0;
    *(const char **)data = name;
    return 1;
}

/* The driver's cuPointerGetAttributes, once the process has loaded libcuda
 * (looked for again on every call until then, about 0.1-2 us: a host comm
 * may run before the program starts CUDA). */
static pointer_attributes_fn driver(void) {
    pointer_attributes_fn fn = atomic_load_explicit(&driver_query, memory_order_acquire);
    if (fn) return fn;
    const char *path = NULL;
    dl_iterate_phdr(find_cuda, &path);
    if (!path) return NULL;
    void *lib = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) return NULL;
    fn = (pointer_attributes_fn)dlsym(lib, "cuPointerGetAttributes");
    /* the handle stays open: the process had it loaded already, and the
     * function pointer is kept */
    if (fn) atomic_store_explicit(&driver_query, fn, memory_order_release);
    else dlclose(lib);
    return fn;
}

static cgm_memory query_driver(const void *p, int *device) {
    *device = -1;
    pointer_attributes_fn fn = driver();
    if (!fn) return CGM_MEMORY_UNKNOWN;
    unsigned int type = 0, managed = 0;
    int ordinal = -1;
    int attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *data[3] = {&type, &managed, &ordinal};
    /* Not initialised (no cuInit yet): no GPU memory exists in the process.
     * A pointer the driver does not know comes back as type 0. */
    if (fn(3, attrs, data, (unsigned long long)(uintptr_t)p) != CU_SUCCESS) return CGM_MEMORY_UNKNOWN;
    if (managed || type == CU_MEMORYTYPE_UNIFIED) return CGM_MEMORY_MANAGED;
    if (type == CU_MEMORYTYPE_DEVICE) {
        *device = ordinal;
        return CGM_MEMORY_DEVICE;
    }
    if (type == CU_MEMORYTYPE_HOST) return CGM_MEMORY_PINNED;
    return CGM_MEMORY_HOST;
}

cgm_memory cgm_memory_of(const void *p, int *device) {
    cgm_memory_query_fn t = atomic_load_explicit(&test_query, memory_order_acquire);
    if (t) return t(p, device);
    return query_driver(p, device);
}

void cgm_memory_set_query(cgm_memory_query_fn fn) { atomic_store_explicit(&test_query, fn, memory_order_release); }

/* One pointer (`what`: "x.data", "w.scale"): a host backend reads CPU
 * memory (pageable, pinned or managed), a GPU backend device memory of the
 * comm's GPU (or managed). */
cgm_status cgm_check_pointer(const char *fn, const char *what, const void *p, cgm_backend backend,
                             int comm_device) {
    if (!p) return CGM_SUCCESS;
    int device = -1;
    cgm_memory where = cgm_memory_of(p, &device);
    if (where == CGM_MEMORY_UNKNOWN || where == CGM_MEMORY_MANAGED) return CGM_SUCCESS;
    if (backend == CGM_BACKEND_HOST) {
        if (where != CGM_MEMORY_DEVICE) return CGM_SUCCESS;
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s = %p is memory of GPU %d, but this call's backend is host, which reads "
                         "CPU memory: pass host memory (e.g. a CPU tensor or numpy array), or run the op on a GPU "
                         "backend (p2p, nccl) for GPU buffers", fn, what, p, device);
    }
    if (where == CGM_MEMORY_DEVICE) {
        if (comm_device < 0 || device == comm_device) return CGM_SUCCESS;
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s = %p is memory of GPU %d, but this comm's device is GPU %d: pass memory of "
                         "GPU %d (a comm works on the device it was created on)", fn, what, p, device,
                         comm_device, comm_device);
    }
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "%s: %s = %p is %s, but this call's backend is %s, which needs device memory%s: "
                     "allocate it with cudaMalloc (e.g. a CUDA tensor), or use the host backend for CPU buffers",
                     fn, what, p,
                     where == CGM_MEMORY_PINNED ? "pinned host memory" : "CPU memory the CUDA driver does not know",
                     cgm_backend_name(backend), comm_device >= 0 ? " of the comm's GPU" : "");
}

cgm_status cgm_check_memory(const char *fn, const char *name, const cgm_matrix *m, cgm_backend backend,
                            int comm_device) {
    if (!m || !m->data || m->rows <= 0 || m->cols <= 0) return CGM_SUCCESS;
    char what[64];
    snprintf(what, sizeof what, "%s.data", name);
    return cgm_check_pointer(fn, what, m->data, backend, comm_device);
}
