/* A stand-in for libnccl.so.2 behind the fake cuBLASMp libraries: only
 * ncclGetVersion, reporting FAKE_NCCL_VERSION (NCCL_VERSION_CODE form:
 * 22902 = 2.29.2). Its own soname, so that it never stands in for the real
 * NCCL a CUDA build of the tests has loaded. */
#ifndef FAKE_NCCL_VERSION
#define FAKE_NCCL_VERSION 22902
#endif

int ncclGetVersion(int *version);
int ncclGetVersion(int *version) {
    *version = FAKE_NCCL_VERSION;
    return 0; /* ncclSuccess */
}
