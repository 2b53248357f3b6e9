/* Stand-ins for libcublasmp.so.0 in the loader's tests. Built three ways:
 *   (nothing defined)      only cublasMpGetVersion: a library that lacks
 *                          the API ("missing symbol cublasMpCreate");
 *   FAKE_FULL + FAKE_VERSION=600  every required symbol, wrong version;
 *   FAKE_FULL + FAKE_VERSION=700  every required symbol, the right one.
 * No function does anything: the tests never call past the version. */
#include <stdint.h>

#ifndef FAKE_VERSION
#define FAKE_VERSION 700
#endif

int cublasMpGetVersion(int *version) {
    *version = FAKE_VERSION;
    return 0;
}

#ifdef FAKE_FULL
#define STUB(name)                                                           \
    int name(void);                                                          \
    int name(void) { return 7; /* CUBLASMP_STATUS_NOT_SUPPORTED */ }
STUB(cublasMpCreate)
STUB(cublasMpDestroy)
STUB(cublasMpStreamSet)
STUB(cublasMpGridCreate)
STUB(cublasMpGridDestroy)
STUB(cublasMpMatrixDescriptorCreate)
STUB(cublasMpMatrixDescriptorDestroy)
STUB(cublasMpMatmulDescriptorCreate)
STUB(cublasMpMatmulDescriptorDestroy)
STUB(cublasMpMatmulDescriptorAttributeSet)
STUB(cublasMpMatmul_bufferSize)
STUB(cublasMpMatmul)
#endif
