/* The cublasmp backend on GPUs: every op x dtype x layout x shape against a
 * host reference (double, from the same deterministic inputs every rank can
 * regenerate), P = 1 and 2 forked ranks (fork before CUDA; rank 0 writes
 * the ncclUniqueId to /tmp/<rendezvous>.id), the mixed-backend comm, the
 * rejections, AG+GEMM's epilogues, GEMM+RS's and GEMM+AR's fp8 and graph
 * capture. Skips without GPUs or without cuBLASMp (fp8: without Hopper).
 *
 * Every case is bounded on its own (gpu_case.bound_s, and the comm's
 * timeout_ms at half of it bounds the first run of each shape inside the
 * backend), the sweeps are split by op and by even / uneven shapes, and a
 * case prints one SUMMARY line per op, or a FAILURE line naming the call
 * each rank was in when it did not complete. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nccl.h>

#include "cublasmp_gpu.h"

const gpu_case *g_case;
rank_report *g_report;

/* ------------------------------------------------------ environment */

typedef struct probe_result {
    int devices;
    int major, minor; /* the lowest compute capability of the case's GPUs */
    int lib_ok;
    char message[1500];
} probe_result;

/* In a child, so that the parent never initialises CUDA before forking. */
static void skip_unless(const gpu_case *gc) {
    const int nranks = gc->nranks;
    int fds[2];
    if (pipe(fds)) TEST_FAIL("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        probe_result r;
        memset(&r, 0, sizeof r);
        if (cudaGetDeviceCount(&r.devices) != cudaSuccess) r.devices = 0;
        r.major = 99;
        for (int d = 0; d < nranks && d < r.devices; d++) {
            int major = 0, minor = 0;
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
            if (major * 10 + minor < r.major * 10 + r.minor)
                r.major = major, r.minor = minor;
        }
        const cmp_api *api = NULL;
        r.lib_ok = cmp_lib_get(&api) == CGM_SUCCESS;
        snprintf(r.message, sizeof r.message, "%s",
                 r.lib_ok ? "" : cgm_last_error());
        ssize_t w = write(fds[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fds[1]);
    probe_result r;
    memset(&r, 0, sizeof r);
    ssize_t got = read(fds[0], &r, sizeof r);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    if (got != (ssize_t)sizeof r) TEST_FAIL("probe child died");
    /* On the GPU machine a skip would hide a broken install: there,
     * COMMGEMM_TEST_REQUIRE_CUBLASMP=1 turns it into a failure. */
    bool required = getenv("COMMGEMM_TEST_REQUIRE_CUBLASMP") != NULL;
    /* (A machine with fewer GPUs than the case's ranks is not a broken
     * install: that case skips either way.) */
    if (r.devices < nranks) TEST_SKIP("needs %d GPUs, found %d", nranks, r.devices);
    /* (Nor is a GPU other than a Hopper for the fp8 cases, which run on
     * Hopper only, as the GPU backends' fp8 tests do.) */
    if (gc->body == body_fp8 && r.major != 9)
        TEST_SKIP("the fp8 cases run on Hopper GPUs (compute capability 9.x), "
                  "found %d.%d", r.major, r.minor);
    if (!r.lib_ok) {
        if (required) TEST_FAIL("cuBLASMp not loadable: %s", r.message);
        TEST_SKIP("cuBLASMp not loadable: %s", r.message);
    }
}

static int nccl_bootstrap(int rank, int nranks, const char *rendezvous,
                          ncclComm_t *out) {
    char path[256], tmp[300];
    snprintf(path, sizeof path, "/tmp/%s.id", rendezvous);
    ncclUniqueId id;
    if (rank == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof id, 1, f) != 1) return 1;
        fclose(f);
        if (rename(tmp, path)) return 1;
    } else {
        int waited_ms = 0;
        for (;;) {
            FILE *f = fopen(path, "rb");
            if (f) {
                size_t n = fread(&id, sizeof id, 1, f);
                fclose(f);
                if (n == 1) break;
            }
            if ((waited_ms += 10) > 60000) {
                fprintf(stderr, "rank %d: no %s after 60 s\n", rank, path);
                return 1;
            }
            usleep(10000);
        }
    }
    if (cudaSetDevice(rank) != cudaSuccess) return 1;
    ncclResult_t res = ncclCommInitRank(out, nranks, id, rank);
    if (res != ncclSuccess) {
        fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", rank,
                ncclGetErrorString(res));
        return 1;
    }
    return 0;
}

static int rank_main(int rank, int nranks, const char *rendezvous, void *arg) {
    const gpu_case *gc = arg;
    /* Line-buffered: a rank killed for a hang keeps what it printed. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (g_report) g_report[rank].pid = (int)getpid();
    /* cuBLASMp's own log, one file per case and rank. */
    const char *lib_log = getenv("CUBLASMP_LOG_FILE");
    if (lib_log && *lib_log) {
        char path[600];
        snprintf(path, sizeof path, "%s.%s.rank%d", lib_log, gc->name, rank);
        setenv("CUBLASMP_LOG_FILE", path, 1);
    }
    cmp_test_ag_staging = gc->ag_staging;
    ncclComm_t nccl = NULL;
    if (nccl_bootstrap(rank, nranks, rendezvous, &nccl)) return 1;
    cgm_config config = CGM_CONFIG_INIT;
    config.backend = gc->backend;
    config.op_backend[CGM_OP_ALL_GATHER_GEMM] = gc->ag_backend;
    config.max_m = config.max_n = config.max_k = 1024;
    config.timeout_ms = (int64_t)gc->bound_s * 1000 / 2;
    cgm_comm *comm = NULL;
    cgm_status st = cgm_comm_init_nccl(nccl, &config, &comm);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "rank %d: cgm_comm_init_nccl: %s: %s\n", rank,
                cgm_status_string(st), cgm_last_error());
        return 1;
    }
    cudaStream_t stream = NULL;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    int failures = gc->body(rank, nranks, comm, stream);
    if (g_report) g_report[rank].finished = 1;
    if (g_report && g_report[rank].counts[CALL_TIMEOUT]) {
        /* A cuBLASMp kernel may still spin: tearing down would wait. */
        fflush(stdout);
        fflush(stderr);
        _exit(1);
    }
    st = cgm_comm_destroy(comm);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "rank %d: cgm_comm_destroy: %s\n", rank, cgm_last_error());
        failures++;
    }
    cudaStreamDestroy(stream);
    ncclCommDestroy(nccl);
    if (rank == 0) {
        char path[256];
        snprintf(path, sizeof path, "/tmp/%s.id", rendezvous);
        unlink(path);
    }
    return failures;
}

static const char *phase_name(int phase) {
    return phase == PHASE_CALL ? "inside the cgm_* call (host side)"
           : phase == PHASE_SYNC ? "waiting for the stream (device side)"
                                 : "between calls";
}

static void run_case(const void *param) {
    const gpu_case *gc = param;
    skip_unless(gc);
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_case = gc;
    size_t bytes = sizeof(rank_report) * GPU_MAX_RANKS;
    g_report = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_report == MAP_FAILED) TEST_FAIL("mmap: %s", strerror(errno));
    memset(g_report, 0, bytes);
    int codes[GPU_MAX_RANKS] = {0};
    int rc = test_run_ranks(gc->nranks, rank_main, (void *)gc, gc->bound_s,
                            codes);
    bool hung = false, timed_out = false;
    for (int r = 0; r < gc->nranks; r++) {
        hung |= codes[r] == -SIGKILL;
        timed_out |= g_report[r].counts[CALL_TIMEOUT] > 0;
    }
    char line[1200];
    int len = snprintf(line, sizeof line, "SUMMARY %s (%s, P=%d):", gc->name,
                       gc->what, gc->nranks);
    for (int r = 0; r < gc->nranks && len < (int)sizeof line; r++) {
        const rank_report *rr = &g_report[r];
        len += snprintf(line + len, sizeof line - (size_t)len,
                        " rank %d: %d ok, %d rejected as expected, %d not "
                        "supported, %d wrong%s%s;", r,
                        rr->counts[CALL_OK], rr->counts[CALL_REJECTED],
                        rr->counts[CALL_NOT_SUPPORTED], rr->counts[CALL_WRONG],
                        rr->counts[CALL_TIMEOUT] ? ", TIMEOUT" : "",
                        codes[r] == -SIGKILL ? ", KILLED" : "");
    }
    printf("%s %s\n", line,
           rc == 0 ? "PASS" : hung ? "HANG" : timed_out ? "TIMEOUT" : "FAIL");
    if (hung || timed_out) {
        printf("FAILURE %s: cuBLASMp %s at P=%d did not complete within %d "
               "s%s\n", gc->name, gc->what, gc->nranks,
               hung ? gc->bound_s : gc->bound_s / 2,
               hung ? " (ranks killed)" : " (the backend's bounded first-run "
                                          "wait returned CGM_ERROR_TIMEOUT)");
        for (int r = 0; r < gc->nranks; r++)
            printf("FAILURE %s: rank %d was %s, last call: %s%s\n", gc->name,
                   r, phase_name(g_report[r].phase),
                   g_report[r].doing[0] ? g_report[r].doing : "(none yet: "
                   "comm creation or an exchange)",
                   g_report[r].finished ? " (its body had returned)" : "");
    }
    /* A case in which a rank neither ran a call nor saw an expected
     * refusal proved nothing (every call refused as NOT_SUPPORTED). */
    int idle_ranks = 0;
    for (int r = 0; r < gc->nranks && rc == 0; r++)
        if (g_report[r].counts[CALL_OK] + g_report[r].counts[CALL_REJECTED] == 0) {
            printf("FAILURE %s: rank %d ran no call (%d refused as not "
                   "supported)\n", gc->name, r,
                   g_report[r].counts[CALL_NOT_SUPPORTED]);
            idle_ranks++;
        }
    fflush(stdout);
    munmap(g_report, bytes);
    g_report = NULL;
    CHECK_INT_EQ(rc, 0);
    CHECK_INT_EQ(idle_ranks, 0);
}

#define CUBLASMP CGM_BACKEND_CUBLASMP
#define UNSET CGM_BACKEND_DEFAULT
#define AG CGM_OP_ALL_GATHER_GEMM
#define RS CGM_OP_GEMM_REDUCE_SCATTER
#define AR CGM_OP_GEMM_ALL_REDUCE
#define AUTO CGM_ALGO_AUTO
#define EVEN 0x29u   /* shapes 0, 3 and 5 (cublasmp_gpu_calls.c) */
#define UNEVEN 0x16u /* shapes 1, 2 and 4: refused at P = 2 */
/* name, P, body, backend, AG backend, op, what, shapes, bound (s),
 * AG staging, algo. The AG cases come first and smallest: p2_ag_first
 * shows whether the simplest AG call completes; the _nostage and
 * _no_overlap variants tell what a hang depends on. The AR _native and
 * _no_overlap cases run cuBLASMp's own GEMM+AllReduce (TN, no_overlap; the
 * other layouts the gathered form). The _uneven cases
 * check that uneven shards are refused on every rank (cuBLASMp's
 * tensor-parallel algorithms take even shards only), nothing hangs, and
 * the comm works on. The _epilogues and _fp8 cases check cuBLASMp's
 * epilogue and fp8 attributes (cublasmp_gpu_epi.c); _rejects also what it
 * cannot run of them. */
static const gpu_case cases[] = {
    {"p1_all_ops", 1, body_all, CUBLASMP, UNSET, AG, "all ops", 0, 120, 1, AUTO},
    {"p1_ag_epilogues", 1, body_epilogues, CUBLASMP, UNSET, AG,
     "ag_gemm epilogues, bf16", 0, 120, 1, AUTO},
    {"p1_ag_epilogues_fp16_fp32", 1, body_epilogues_fp16_fp32, CUBLASMP,
     UNSET, AG, "ag_gemm epilogues, fp16 and fp32", 0, 90, 1, AUTO},
    {"p1_fp8", 1, body_fp8, CUBLASMP, UNSET, RS,
     "fp8 gemm_rs and gemm_ar, per-tensor scales", 0, 120, 1, AUTO},
    {"p1_rejects", 1, body_rejects, CUBLASMP, UNSET, AG, "rejects", 0, 60, 1, AUTO},
    {"p2_ag_first", 2, body_first, CUBLASMP, UNSET, AG, "ag_gemm", 0, 24, 1, AUTO},
    {"p2_ag_first_nostage", 2, body_first, CUBLASMP, UNSET, AG,
     "ag_gemm (X not staged in symmetric memory)", 0, 24, 0, AUTO},
    {"p2_ag_first_no_overlap", 2, body_first, CUBLASMP, UNSET, AG,
     "ag_gemm (algo no_overlap)", 0, 24, 1, CGM_ALGO_NO_OVERLAP},
    {"p2_ag_even", 2, body_sweep, CUBLASMP, UNSET, AG, "ag_gemm", EVEN, 90, 1, AUTO},
    {"p2_ag_uneven", 2, body_sweep, CUBLASMP, UNSET, AG, "ag_gemm, uneven: refused", UNEVEN, 30, 1, AUTO},
    {"p2_rs_first", 2, body_first, CUBLASMP, UNSET, RS, "gemm_rs", 0, 24, 1, AUTO},
    {"p2_rs_even", 2, body_sweep, CUBLASMP, UNSET, RS, "gemm_rs", EVEN, 90, 1, AUTO},
    {"p2_rs_uneven", 2, body_sweep, CUBLASMP, UNSET, RS, "gemm_rs, uneven: refused", UNEVEN, 30, 1, AUTO},
    {"p2_ar_first", 2, body_first, CUBLASMP, UNSET, AR, "gemm_ar (cuBLASMp RS + ncclAllGather)", 0, 24, 1, AUTO},
    {"p2_ar_first_native", 2, body_first, CUBLASMP, UNSET, AR,
     "gemm_ar (cuBLASMp's Matmul + AllReduce: TN, algo no_overlap)", 0, 24, 1,
     CGM_ALGO_NO_OVERLAP},
    {"p2_ar_even", 2, body_sweep, CUBLASMP, UNSET, AR, "gemm_ar", EVEN, 90, 1, AUTO},
    {"p2_ar_even_no_overlap", 2, body_sweep, CUBLASMP, UNSET, AR,
     "gemm_ar no_overlap (TN: cuBLASMp's Matmul + AllReduce)", EVEN, 90, 1,
     CGM_ALGO_NO_OVERLAP},
    {"p2_ar_uneven", 2, body_sweep, CUBLASMP, UNSET, AR, "gemm_ar, uneven: refused", UNEVEN, 30, 1, AUTO},
    {"p2_mixed_with_p2p", 2, body_mixed, CGM_BACKEND_P2P, CUBLASMP, AG, "mixed", 0, 60, 1, AUTO},
    {"p2_rejects", 2, body_rejects, CUBLASMP, UNSET, AG, "rejects", 0, 60, 1, AUTO},
    {"p2_ag_epilogues", 2, body_epilogues, CUBLASMP, UNSET, AG,
     "ag_gemm epilogues, bf16", 0, 150, 1, AUTO},
    {"p2_fp8", 2, body_fp8, CUBLASMP, UNSET, RS,
     "fp8 gemm_rs and gemm_ar, per-tensor scales", 0, 150, 1, AUTO},
    {"p2_capture_ag", 2, body_capture, CUBLASMP, UNSET, AG, "ag_gemm capture", 0, 60, 1, AUTO},
    {"p2_capture_rs", 2, body_capture, CUBLASMP, UNSET, RS, "gemm_rs capture", 0, 60, 1, AUTO},
    {"p2_capture_ar", 2, body_capture, CUBLASMP, UNSET, AR, "gemm_ar capture", 0, 60, 1, AUTO},
};

static void register_cases(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        test_set_timeout(cases[i].bound_s + 30);
        test_add(cases[i].name, run_case, &cases[i]);
    }
}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_cases);
}
