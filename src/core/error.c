/* Statuses and the per-thread error detail. */
#include <stdio.h>
#include <string.h>

#include "core.h"

static _Thread_local char last_error[2048];

const char *cgm_status_string(cgm_status status) {
    switch (status) {
    case CGM_SUCCESS: return "success";
    case CGM_ERROR_INVALID_ARGUMENT:
        return "invalid argument: fix the call (cgm_last_error() says which argument and why)";
    case CGM_ERROR_INVALID_USAGE:
        return "invalid usage: the comm or pointer is not usable in this state (see cgm_last_error())";
    case CGM_ERROR_NOT_SUPPORTED:
        return "not supported by this backend or build: choose another option or backend";
    case CGM_ERROR_UNAVAILABLE:
        return "backend unavailable here: cgm_last_error() says how to make it available";
    case CGM_ERROR_OUT_OF_MEMORY:
        return "out of memory: lower max_m/max_n/max_k or free memory";
    case CGM_ERROR_TIMEOUT:
        return "timed out waiting for a peer rank (named in cgm_last_error()): the comm is broken, destroy it";
    case CGM_ERROR_PEER_FAILED:
        return "a peer rank failed (named in cgm_last_error()): the comm is broken, destroy it";
    case CGM_ERROR_MISMATCH:
        return "ranks disagree about the call (rank and field in cgm_last_error()): make every rank pass the same arguments";
    case CGM_ERROR_SYSTEM:
        return "an operating-system call failed (see cgm_last_error())";
    case CGM_ERROR_CUDA: return "a CUDA call failed (see cgm_last_error())";
    case CGM_ERROR_NCCL: return "an NCCL call failed (see cgm_last_error())";
    case CGM_ERROR_CUBLAS: return "a cuBLAS call failed (see cgm_last_error())";
    case CGM_ERROR_INTERNAL:
        return "internal error in commgemm: please report it with cgm_last_error()";
    }
    return "unknown status";
}

const char *cgm_last_error(void) { return last_error; }

cgm_status cgm_error(cgm_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    CGM_WARN(CGM_SUB_ALL, "%s: %s", cgm_status_string(status), last_error);
    return status;
}

cgm_status cgm_error_context(cgm_status status, const char *fmt, ...) {
    char context[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    if (n < 0) return status;
    size_t add = strlen(context) + 2, have = strlen(last_error);
    if (add >= sizeof last_error) return status;
    if (have + add >= sizeof last_error) have = sizeof last_error - add - 1;
    /* Shift the detail right and put "context: " in front of it. */
    memmove(last_error + add, last_error, have);
    last_error[add + have] = '\0';
    memcpy(last_error, context, add - 2);
    memcpy(last_error + add - 2, ": ", 2);
    return status;
}

cgm_status cgm_check_struct_size(const char *function, const char *what, size_t found, const size_t *sizes,
                                 int count, const char *init_macro) {
    size_t current = sizes[count - 1];
    for (int i = 0; i < count; i++)
        if (found == sizes[i]) return CGM_SUCCESS;
    if (found > current)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s->struct_size = %zu, expected %zu: the program was compiled against a "
                         "newer commgemm.h than this library (%d.%d.%d); run it with the library it was built for",
                         function, what, found, current, COMMGEMM_VERSION_MAJOR, COMMGEMM_VERSION_MINOR,
                         COMMGEMM_VERSION_PATCH);
    char known[128] = "";
    size_t used = 0;
    for (int i = 0; i < count && used < sizeof known; i++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%zu", i == 0 ? "" : i + 1 == count ? " or " : ", ",
                                 sizes[i]);
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "%s: %s->struct_size = %zu, expected %s (the sizes this struct has had); initialise it with %s "
                     "before setting fields", function, what, found, known, init_macro);
}
