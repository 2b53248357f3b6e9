/* The layout of XLA's FFI C API (API 0.x; xla/ffi/api/c_api.h defines
 * it), the part that the handlers of xla_ffi.c use, declared here so the
 * library builds without XLA headers. The structs carry their size first;
 * fields are only ever added at the end, so a newer XLA's larger structs
 * start with these. Shared with tests/unit/test_xla_ffi.c, which builds
 * call frames of this layout. */
#ifndef COMMGEMM_XLA_FFI_H
#define COMMGEMM_XLA_FFI_H

#include <stddef.h>
#include <stdint.h>

enum { XFFI_EXT_METADATA = 1 };
enum { XFFI_STAGE_EXECUTE = 3 };
enum { XFFI_ATTR_SCALAR = 3 };
enum { XFFI_BUFFER = 1 };
/* The API version this layout was checked against (jaxlib 0.10.2's header) */
enum { XFFI_API_MAJOR = 0, XFFI_API_MINOR = 3 };
/* XLA_FFI_DataType values used here */
enum { XFFI_S32 = 4, XFFI_S64 = 5, XFFI_U32 = 8, XFFI_U64 = 9, XFFI_F16 = 10, XFFI_F32 = 11,
       XFFI_BF16 = 16, XFFI_PRED = 1, XFFI_F8E5M2 = 19, XFFI_F8E4M3FN = 20 };
/* XLA_FFI_Error_Code values used here */
enum { XFFI_INVALID_ARGUMENT = 3, XFFI_DEADLINE_EXCEEDED = 4, XFFI_FAILED_PRECONDITION = 9,
       XFFI_ABORTED = 10, XFFI_UNIMPLEMENTED = 12, XFFI_INTERNAL = 13, XFFI_UNAVAILABLE = 14 };

typedef struct xffi_ext {
    size_t struct_size;
    int type;
    struct xffi_ext *next;
} xffi_ext;

typedef struct xffi_version {
    size_t struct_size;
    xffi_ext *ext;
    int major, minor;
} xffi_version;

typedef struct xffi_buffer {
    size_t struct_size;
    xffi_ext *ext;
    int dtype;
    void *data;
    int64_t rank;
    int64_t *dims;
} xffi_buffer;

typedef struct xffi_list { /* XLA_FFI_Args and XLA_FFI_Rets */
    size_t struct_size;
    xffi_ext *ext;
    int64_t size;
    int *types;
    void **items;
} xffi_list;

typedef struct xffi_span {
    const char *ptr;
    size_t len;
} xffi_span;

typedef struct xffi_scalar {
    int dtype;
    void *value;
} xffi_scalar;

typedef struct xffi_attrs {
    size_t struct_size;
    xffi_ext *ext;
    int64_t size;
    int *types;
    xffi_span **names;
    void **attrs;
} xffi_attrs;

typedef struct xffi_error xffi_error;

typedef struct xffi_error_args {
    size_t struct_size;
    xffi_ext *ext;
    const char *message;
    int errc;
} xffi_error_args;

typedef struct xffi_error_message_args {
    size_t struct_size;
    xffi_ext *ext;
    xffi_error *error;
    const char *message; /* out */
} xffi_error_message_args;

typedef struct xffi_error_destroy_args {
    size_t struct_size;
    xffi_ext *ext;
    xffi_error *error;
} xffi_error_destroy_args;

typedef struct xffi_stream_args {
    size_t struct_size;
    xffi_ext *ext;
    void *ctx;
    void *stream; /* out */
} xffi_stream_args;

typedef struct xffi_api {
    size_t struct_size;
    xffi_ext *ext;
    xffi_version version;
    const void *internal;
    xffi_error *(*error_create)(xffi_error_args *args);
    void (*error_get_message)(xffi_error_message_args *args);
    void (*error_destroy)(xffi_error_destroy_args *args);
    void *(*handler_register)(void *args);
    xffi_error *(*stream_get)(xffi_stream_args *args);
} xffi_api;

typedef struct xffi_frame {
    size_t struct_size;
    xffi_ext *ext;
    const xffi_api *api;
    void *ctx;
    int stage;
    xffi_list args, rets;
    xffi_attrs attrs;
} xffi_frame;

typedef struct xffi_metadata {
    size_t struct_size;
    xffi_version version;
    uint32_t traits;
} xffi_metadata;

typedef struct xffi_metadata_ext {
    xffi_ext base;
    xffi_metadata *metadata;
} xffi_metadata_ext;

#endif
