/* Peer copy rates between two processes, one GPU each, as the p2p backend
 * runs them (not a test; scripts/device-suite.sh stage `ipcbench`).
 * copybench measures one process driving both GPUs and finds >= 374 GB/s
 * per direction in every case, while `--comm-baseline library` (the p2p
 * backend's own RS without a GEMM, two processes) moved its 32 MiB pushes
 * at ~300 GB/s (docs/PERFORMANCE.md 4j). The cases here separate what a
 * second process changes:
 *   - the mapping: legacy CUDA IPC (cudaIpcGetMemHandle on a cudaMalloc
 *     buffer, what cgm_peer_mem does) against the driver's virtual memory
 *     management (cuMemCreate, a POSIX file descriptor passed over a unix
 *     socket, cuMemMap, cuMemSetAccess);
 *   - one way against both ways; push (write the peer) against pull (read
 *     it); one copy against cudaMemcpy2DAsync rows of 8 KiB (4096 bf16, an
 *     RS partial's rows) and against 4 back-to-back pieces;
 *   - the stream: the default priority against the greatest (the comm
 *     queue's);
 *   - the landing offset: 256 B into the buffer, not 2 MiB aligned.
 * A second table cuts the transfer in 4 and 8 pieces (8 and 4 MiB at the
 * default size: the pieces of the fused RS) and puts between them what
 * the ops put there, to price each against back-to-back copies:
 *   - after each piece, the signal to the peer: the flag kernel on the copy
 *     stream (cgm_dev_signal), the flag kernel on a second stream that
 *     follows the copy through an event (the fused RS), a stream memory
 *     operation (cuStreamWriteValue64), or an 8-byte copy of the epoch cell
 *     into the peer's flag on the copy stream itself;
 *   - before each piece, what it waits on: a satisfied flag-wait kernel on
 *     the copy stream (cgm_dev_wait), a satisfied cuStreamWaitValue64, or an
 *     event of a one-thread kernel on another stream (a GEMM chunk's event).
 * A third table measures the latency that the first two cannot: a ping-pong
 * of pushes, each signalled to the peer, whose wait kernel releases its push
 * back. The signal is the flag kernel or the 8-byte epoch copy; the pushes
 * are none (the flag alone), 4 MiB (a small AG's shard) or 16 MiB. The
 * signal by copy made the 4 MiB AG pushes ~5 us slower in the ops while it
 * saved time on 16 MiB and more (docs/PERFORMANCE.md 4j).
 * Rank 0 is this process on GPU 0, rank 1 a forked child on GPU 1. Before
 * each case both meet at a socket barrier; each times its own copies with
 * events; rank 1 sends its time to rank 0. Every case runs once per round,
 * the order rotated each round; medians over the rounds, per rank.
 *   ipcbench [MiB per direction, default 32] [rounds, default 21] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "device/device.h"
#include "gpu_tools.h"

#define PAD (4u << 20) /* room for the offset case, past the copy */

static int g_rank;

static void die(const char *what, const char *why) {
    fprintf(stderr, "ipcbench: rank %d: %s failed: %s\n", g_rank, what, why);
    exit(1);
}

#define OK(call)                                                         \
    do {                                                                 \
        cudaError_t e_ = (call);                                         \
        if (e_ != cudaSuccess) die(#call, cudaGetErrorString(e_));       \
    } while (0)

#define DRV(call)                                                        \
    do {                                                                 \
        CUresult r_ = (call);                                            \
        if (r_ != CUDA_SUCCESS) {                                        \
            const char *s_ = "?";                                        \
            cuGetErrorString(r_, &s_);                                   \
            die(#call, s_);                                              \
        }                                                                \
    } while (0)

/* ------------------------------------------------------------ socket */

static int g_sock;

static void send_all(const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(g_sock, c, n);
        if (w <= 0) die("write", "peer gone");
        c += w;
        n -= (size_t)w;
    }
}

static void recv_all(void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = read(g_sock, c, n);
        if (r <= 0) die("read", "peer gone");
        c += r;
        n -= (size_t)r;
    }
}

static void barrier(void) {
    char b = 1;
    send_all(&b, 1);
    recv_all(&b, 1);
}

static void send_fd(int fd) {
    char byte = 0, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    memset(ctl, 0, sizeof ctl);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof ctl;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(g_sock, &msg, 0) != 1) die("sendmsg", "fd not sent");
}

static int recv_fd(void) {
    char byte, ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    struct msghdr msg;
    int fd = -1;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof ctl;
    if (recvmsg(g_sock, &msg, 0) != 1) die("recvmsg", "no fd");
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (!cm || cm->cmsg_type != SCM_RIGHTS) die("recvmsg", "no SCM_RIGHTS");
    memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
}

/* ------------------------------------------------------------ buffers */

typedef struct buffers {
    char *src;        /* cudaMalloc, local */
    char *ipc_local;  /* cudaMalloc, exported through cudaIpcGetMemHandle */
    char *ipc_peer;   /* the peer's ipc_local, opened here */
    char *vmm_local;  /* cuMemCreate + cuMemMap, exported as a POSIX fd */
    char *vmm_peer;   /* the peer's vmm_local, imported and mapped here */
    size_t vmm_size;
    unsigned long long *flags;      /* local flag cells, exported with ipc_local */
    unsigned long long *peer_flags; /* the peer's */
    cgm_dev_state *state;           /* epoch 0: every wait is satisfied */
    cgm_dev_state *pp_state;        /* the ping-pong's: bumped each run */
    cgm_dev_abort_record *record;   /* host-mapped */
} buffers;

static void map_vmm(CUmemGenericAllocationHandle h, size_t size, int dev,
                    char **out) {
    CUdeviceptr va = 0;
    CUmemAccessDesc acc;
    DRV(cuMemAddressReserve(&va, size, 0, 0, 0));
    DRV(cuMemMap(va, size, 0, h, 0));
    memset(&acc, 0, sizeof acc);
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(cuMemSetAccess(va, size, &acc, 1));
    *out = (char *)(uintptr_t)va;
}

static void setup_buffers(buffers *b, int dev, size_t bytes) {
    size_t room = bytes + PAD;
    cudaIpcMemHandle_t mine, theirs;
    OK(cudaMalloc((void **)&b->src, room));
    OK(cudaMemset(b->src, 1, room));
    OK(cudaMalloc((void **)&b->ipc_local, room));
    OK(cudaMemset(b->ipc_local, 0, room));
    OK(cudaIpcGetMemHandle(&mine, b->ipc_local));
    send_all(&mine, sizeof mine);
    recv_all(&theirs, sizeof theirs);
    OK(cudaIpcOpenMemHandle((void **)&b->ipc_peer, theirs,
                            cudaIpcMemLazyEnablePeerAccess));

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t gran = 0;
    DRV(cuMemGetAllocationGranularity(&gran, &prop,
                                      CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    b->vmm_size = (room + gran - 1) / gran * gran;
    CUmemGenericAllocationHandle h, ph;
    DRV(cuMemCreate(&h, b->vmm_size, &prop, 0));
    map_vmm(h, b->vmm_size, dev, &b->vmm_local);
    OK(cudaMemset(b->vmm_local, 0, b->vmm_size));
    int fd = -1;
    DRV(cuMemExportToShareableHandle(&fd, h,
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    /* Rank 0 sends first, so the two sends never both block. */
    int pfd;
    if (g_rank == 0) {
        send_fd(fd);
        pfd = recv_fd();
    } else {
        pfd = recv_fd();
        send_fd(fd);
    }
    DRV(cuMemImportFromShareableHandle(&ph, (void *)(uintptr_t)pfd,
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    map_vmm(ph, b->vmm_size, dev, &b->vmm_peer);
    close(fd);
    close(pfd);
    /* Flag cells: the last 4 KiB of the PAD, past every copy's bytes. */
    b->flags = (unsigned long long *)(b->ipc_local + room - 4096);
    b->peer_flags = (unsigned long long *)(b->ipc_peer + room - 4096);
    OK(cudaMalloc((void **)&b->state, sizeof *b->state));
    OK(cudaMemset(b->state, 0, sizeof *b->state));
    OK(cudaMalloc((void **)&b->pp_state, sizeof *b->pp_state));
    OK(cudaMemset(b->pp_state, 0, sizeof *b->pp_state));
    OK(cudaHostAlloc((void **)&b->record, sizeof *b->record, cudaHostAllocMapped));
    memset((void *)b->record, 0, sizeof *b->record);
    OK(cgm_dev_preload());
    OK(cudaDeviceSynchronize());
}

/* ------------------------------------------------------------ cases */

typedef enum { LEGACY, VMM } mapping;

typedef struct bench_case {
    const char *name;
    mapping map;
    int both;      /* both ranks copy; else rank 0 only */
    int pull;      /* read the peer into src; else write src into the peer */
    int rows_2d;   /* cudaMemcpy2DAsync with 8 KiB rows */
    int pieces;    /* back-to-back copies, 1 = one */
    int high_prio; /* on the greatest-priority stream */
    size_t offset; /* bytes into the peer buffer */
} bench_case;

static const bench_case cases[] = {
    {"legacy IPC, one way", LEGACY, 0, 0, 0, 1, 0, 0},
    {"legacy IPC, both ways", LEGACY, 1, 0, 0, 1, 0, 0},
    {"legacy IPC, both ways, 2D rows of 8 KiB", LEGACY, 1, 0, 1, 1, 0, 0},
    {"legacy IPC, both ways, 4 pieces", LEGACY, 1, 0, 0, 4, 0, 0},
    {"legacy IPC, both ways, high-priority stream", LEGACY, 1, 0, 0, 1, 1, 0},
    {"legacy IPC, both ways, 256 B into the buffer", LEGACY, 1, 0, 0, 1, 0, 256},
    {"legacy IPC, both ways, pull", LEGACY, 1, 1, 0, 1, 0, 0},
    {"VMM fd, one way", VMM, 0, 0, 0, 1, 0, 0},
    {"VMM fd, both ways", VMM, 1, 0, 0, 1, 0, 0},
    {"VMM fd, both ways, 2D rows of 8 KiB", VMM, 1, 0, 1, 1, 0, 0},
    {"VMM fd, both ways, pull", VMM, 1, 1, 0, 1, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct timing {
    cudaStream_t plain, prio, beside;
    cudaEvent_t start, stop, piece[8], joined;
} timing;

static float run_case(const bench_case *c, const buffers *b, timing *t,
                      size_t bytes) {
    cudaStream_t s = c->high_prio ? t->prio : t->plain;
    char *peer = (c->map == LEGACY ? b->ipc_peer : b->vmm_peer) + c->offset;
    int active = c->both || g_rank == 0;
    float ms = 0.0f;
    barrier();
    OK(cudaEventRecord(t->start, s));
    if (active) {
        size_t piece = bytes / (size_t)c->pieces;
        for (int p = 0; p < c->pieces; p++) {
            char *mine = b->src + (size_t)p * piece;
            char *theirs = peer + (size_t)p * piece;
            char *dst = c->pull ? mine : theirs;
            const char *from = c->pull ? theirs : mine;
            if (c->rows_2d) {
                size_t row = 8192;
                OK(cudaMemcpy2DAsync(dst, row, from, row, row, piece / row,
                                     cudaMemcpyDefault, s));
            } else {
                OK(cudaMemcpyAsync(dst, from, piece, cudaMemcpyDefault, s));
            }
        }
    }
    OK(cudaEventRecord(t->stop, s));
    OK(cudaEventSynchronize(t->stop));
    OK(cudaEventElapsedTime(&ms, t->start, t->stop));
    return active ? ms * 1000.0f : 0.0f;
}

typedef enum { SIG_NONE, SIG_KERNEL, SIG_KERNEL_BESIDE, SIG_WRITE_VALUE, SIG_CE_COPY } signal_kind;
typedef enum { WAIT_NONE, WAIT_KERNEL, WAIT_VALUE, WAIT_EVENT } wait_kind;

typedef struct piece_case {
    const char *name;
    signal_kind sig;
    wait_kind wait;
} piece_case;

static const piece_case piece_cases[] = {
    {"copies back to back", SIG_NONE, WAIT_NONE},
    {"signal: flag kernel on the copy stream", SIG_KERNEL, WAIT_NONE},
    {"signal: flag kernel beside (event)", SIG_KERNEL_BESIDE, WAIT_NONE},
    {"signal: cuStreamWriteValue64", SIG_WRITE_VALUE, WAIT_NONE},
    {"signal: 8-byte copy of the epoch", SIG_CE_COPY, WAIT_NONE},
    {"wait: flag kernel on the copy stream", SIG_NONE, WAIT_KERNEL},
    {"wait: cuStreamWaitValue64", SIG_NONE, WAIT_VALUE},
    {"wait: event of a kernel on another stream", SIG_NONE, WAIT_EVENT},
    {"wait kernel + signal kernel beside (the ops)", SIG_KERNEL_BESIDE, WAIT_KERNEL},
    {"wait value + write value", SIG_WRITE_VALUE, WAIT_VALUE},
    {"event wait + 8-byte epoch copy", SIG_CE_COPY, WAIT_EVENT},
};
#define NPIECE_CASES ((int)(sizeof piece_cases / sizeof piece_cases[0]))

/* Both ranks push `bytes` in `pieces` copies with c's wait before and
 * signal after each; the time from before the first wait to after the
 * last signal. */
static float run_pieces(const piece_case *c, int pieces, const buffers *b,
                        timing *t, size_t bytes) {
    cudaStream_t s = t->plain;
    size_t piece = bytes / (size_t)pieces;
    float ms = 0.0f;
    barrier();
    OK(cudaEventRecord(t->start, s));
    for (int p = 0; p < pieces; p++) {
        unsigned long long *mine = b->flags + p, *theirs = b->peer_flags + p;
        switch (c->wait) {
        case WAIT_NONE: break;
        case WAIT_KERNEL:
            OK(cgm_dev_wait(b->state, mine, b->record, g_rank, 1 - g_rank, 0, p,
                            10000000000ull, s));
            break;
        case WAIT_VALUE:
            DRV(cuStreamWaitValue64((CUstream)s, (CUdeviceptr)(uintptr_t)mine, 0,
                                    CU_STREAM_WAIT_VALUE_GEQ));
            break;
        case WAIT_EVENT:
            /* a one-thread kernel: a signal into a spare local cell */
            OK(cgm_dev_signal(b->state, b->flags + 16 + p, t->beside));
            OK(cudaEventRecord(t->piece[p], t->beside));
            OK(cudaStreamWaitEvent(s, t->piece[p], 0));
            break;
        }
        OK(cudaMemcpyAsync(b->ipc_peer + (size_t)p * piece, b->src + (size_t)p * piece,
                           piece, cudaMemcpyDefault, s));
        switch (c->sig) {
        case SIG_NONE: break;
        case SIG_KERNEL: OK(cgm_dev_signal(b->state, theirs, s)); break;
        case SIG_KERNEL_BESIDE:
            OK(cudaEventRecord(t->piece[p], s));
            OK(cudaStreamWaitEvent(t->beside, t->piece[p], 0));
            OK(cgm_dev_signal(b->state, theirs, t->beside));
            break;
        case SIG_WRITE_VALUE:
            DRV(cuStreamWriteValue64((CUstream)s, (CUdeviceptr)(uintptr_t)theirs,
                                     (cuuint64_t)p + 1, CU_STREAM_WRITE_VALUE_DEFAULT));
            break;
        case SIG_CE_COPY:
            OK(cudaMemcpyAsync(theirs, &b->state->epoch, sizeof *theirs,
                               cudaMemcpyDefault, s));
            break;
        }
    }
    if (c->sig == SIG_KERNEL_BESIDE || c->wait == WAIT_EVENT) {
        OK(cudaEventRecord(t->joined, t->beside));
        OK(cudaStreamWaitEvent(s, t->joined, 0));
    }
    OK(cudaEventRecord(t->stop, s));
    OK(cudaEventSynchronize(t->stop));
    OK(cudaEventElapsedTime(&ms, t->start, t->stop));
    return ms * 1000.0f;
}

static void median_pair(float *v, int rounds, float out[2]) {
    for (int k = 0; k < 2; k++) out[k] = tool_median(v + (size_t)k * (size_t)rounds, rounds);
}

/* Rank 1 sends its time of case i in round r to rank 0, which keeps both
 * in us[(i * 2 + rank) * rounds + r]. */
static void keep_time(float *us, int i, int r, int rounds, float mine) {
    float theirs = 0.0f;
    if (g_rank == 1) {
        send_all(&mine, sizeof mine);
        return;
    }
    recv_all(&theirs, sizeof theirs);
    us[((size_t)i * 2 + 0) * (size_t)rounds + (size_t)r] = mine;
    us[((size_t)i * 2 + 1) * (size_t)rounds + (size_t)r] = theirs;
}

/* The pieces table: every case at 4 and 8 pieces, interleaved as above. */
static int run_piece_table(const buffers *b, timing *t, size_t bytes, int rounds) {
    static const int counts[2] = {4, 8};
    int n = NPIECE_CASES * 2;
    for (int i = 0; i < n; i++)
        (void)run_pieces(&piece_cases[i / 2], counts[i % 2], b, t, bytes);
    float *us = calloc((size_t)n * (size_t)rounds * 2, sizeof(float));
    if (!us) die("calloc", "out of memory");
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < n; j++) {
            int i = (j + r) % n;
            keep_time(us, i, r, rounds,
                      run_pieces(&piece_cases[i / 2], counts[i % 2], b, t, bytes));
        }
    if (g_rank == 0) {
        printf("# pieces, both ways: us (slower rank) and GB/s per direction; "
               "+us per piece against copies back to back\n");
        printf("# %-48s %9s %7s %7s %9s %7s %7s\n", "case", "4 pc us", "GB/s", "+us/pc",
               "8 pc us", "GB/s", "+us/pc");
        float base[2] = {0.0f, 0.0f};
        for (int c = 0; c < NPIECE_CASES; c++) {
            printf("  %-48s", piece_cases[c].name);
            for (int k = 0; k < 2; k++) {
                float med[2];
                median_pair(us + (size_t)(c * 2 + k) * 2 * (size_t)rounds, rounds, med);
                float slow = med[0] > med[1] ? med[0] : med[1];
                if (c == 0) base[k] = slow;
                printf(" %9.1f %7.1f %7.1f", slow, (double)bytes / (slow * 1e3),
                       (slow - base[k]) / (float)counts[k]);
            }
            printf("\n");
        }
    }
    free(us);
    return 0;
}

#define PP_HOPS 8
#define PP_CELL0 64 /* the ping-pong's flag cells: PP_CELL0 + hop */

/* PP_HOPS round trips of `bytes` (0: the flag alone) from rank 0 to rank 1
 * and back, each push followed by its signal (by copy or by the flag
 * kernel) and released by the peer's wait kernel. Both ranks bump their
 * ping-pong epoch first, so every run waits for fresh values. Returns rank
 * 0's time per one-way hop. */
static float run_pingpong(int by_copy, size_t bytes, const buffers *b,
                          timing *t) {
    cudaStream_t s = t->plain;
    float ms = 0.0f;
    barrier();
    OK(cgm_dev_epoch_bump(b->pp_state, s));
    OK(cudaEventRecord(t->start, s));
    for (int h = 0; h < PP_HOPS; h++) {
        unsigned long long *mine = b->flags + PP_CELL0 + h;
        unsigned long long *theirs = b->peer_flags + PP_CELL0 + h;
        for (int turn = 0; turn < 2; turn++) {
            if (turn == g_rank) { /* push, then signal */
                if (bytes)
                    OK(cudaMemcpyAsync(b->ipc_peer, b->src, bytes,
                                       cudaMemcpyDefault, s));
                if (by_copy)
                    OK(cudaMemcpyAsync(theirs, &b->pp_state->epoch, sizeof *theirs,
                                       cudaMemcpyDeviceToDevice, s));
                else
                    OK(cgm_dev_signal(b->pp_state, theirs, s));
            } else {
                OK(cgm_dev_wait(b->pp_state, mine, b->record, g_rank, 1 - g_rank,
                                0, PP_CELL0 + h, 10000000000ull, s));
            }
        }
    }
    OK(cudaEventRecord(t->stop, s));
    OK(cudaEventSynchronize(t->stop));
    OK(cudaEventElapsedTime(&ms, t->start, t->stop));
    if (b->record->set) die("ping-pong", "a wait expired");
    return ms * 1000.0f / (2.0f * PP_HOPS);
}

static int run_pingpong_table(const buffers *b, timing *t, int rounds) {
    static const size_t sizes[3] = {0, (size_t)4 << 20, (size_t)16 << 20};
    enum { N = 6 }; /* (signal kind, size) */
    for (int i = 0; i < N; i++) (void)run_pingpong(i % 2, sizes[i / 2], b, t);
    float *us = calloc((size_t)N * (size_t)rounds * 2, sizeof(float));
    if (!us) die("calloc", "out of memory");
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < N; j++) {
            int i = (j + r) % N;
            keep_time(us, i, r, rounds, run_pingpong(i % 2, sizes[i / 2], b, t));
        }
    if (g_rank == 0) {
        printf("# ping-pong, %d round trips: us per one-way hop (push + signal + the "
               "peer's wait), rank 0's median\n", PP_HOPS);
        printf("# %-20s %14s %14s %14s\n", "signal", "flag alone", "4 MiB push",
               "16 MiB push");
        for (int k = 0; k < 2; k++) {
            printf("  %-20s", k ? "8-byte epoch copy" : "flag kernel");
            for (int z = 0; z < 3; z++) {
                float med[2];
                median_pair(us + (size_t)(z * 2 + k) * 2 * (size_t)rounds, rounds, med);
                printf(" %14.1f", med[0]);
            }
            printf("\n");
        }
    }
    free(us);
    return 0;
}

static int rank_main(int rank, size_t bytes, int rounds) {
    buffers b;
    timing t;
    int least = 0, greatest = 0;
    g_rank = rank;
    if (cudaGetDeviceCount(&least) != cudaSuccess || least < 2) {
        if (rank == 0) printf("ipcbench: skipped: needs 2 GPUs\n");
        return 0;
    }
    OK(cudaSetDevice(rank));
    OK(cudaFree(NULL));
    DRV(cuInit(0));
    memset(&b, 0, sizeof b);
    setup_buffers(&b, rank, bytes);
    OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    OK(cudaStreamCreateWithFlags(&t.plain, cudaStreamNonBlocking));
    OK(cudaStreamCreateWithPriority(&t.prio, cudaStreamNonBlocking, greatest));
    OK(cudaStreamCreateWithFlags(&t.beside, cudaStreamNonBlocking));
    OK(cudaEventCreate(&t.start));
    OK(cudaEventCreate(&t.stop));
    OK(cudaEventCreateWithFlags(&t.joined, cudaEventDisableTiming));
    for (int p = 0; p < 8; p++)
        OK(cudaEventCreateWithFlags(&t.piece[p], cudaEventDisableTiming));
    for (int i = 0; i < NCASES; i++) /* warm-up: every case once */
        (void)run_case(&cases[i], &b, &t, bytes);

    float *us = calloc((size_t)NCASES * (size_t)rounds * 2, sizeof(float));
    if (!us) die("calloc", "out of memory");
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < NCASES; j++) {
            int i = (j + r) % NCASES;
            keep_time(us, i, r, rounds, run_case(&cases[i], &b, &t, bytes));
        }
    if (rank == 0) {
        printf("# ipcbench: %zu MiB per direction, rank 0 on GPU 0, rank 1 "
               "(a second process) on GPU 1, medians of %d interleaved "
               "rounds\n",
               bytes >> 20, rounds);
        printf("# %-48s %10s %10s %14s\n", "case", "r0 us", "r1 us",
               "GB/s per dir");
        for (int i = 0; i < NCASES; i++) {
            float med[2];
            median_pair(us + (size_t)i * 2 * (size_t)rounds, rounds, med);
            float slow = med[0] > med[1] ? med[0] : med[1];
            printf("  %-48s %10.1f %10.1f %14.1f\n", cases[i].name, med[0],
                   med[1], slow > 0 ? (double)bytes / (slow * 1e3) : 0.0);
        }
    }
    free(us);
    if (run_piece_table(&b, &t, bytes, rounds)) return 1;
    return run_pingpong_table(&b, &t, rounds);
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 32;
    int rounds = argc > 2 ? atoi(argv[2]) : 21;
    int sv[2];
    if (mib < 1 || mib > 4096 || rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: ipcbench [MiB 1..4096] [rounds 1..1000]\n");
        return 2;
    }
    /* Fork before any CUDA call: a child cannot use its parent's CUDA. */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) die("socketpair", "failed");
    pid_t child = fork();
    if (child < 0) die("fork", "failed");
    if (child == 0) {
        close(sv[0]);
        g_sock = sv[1];
        return rank_main(1, mib << 20, rounds);
    }
    close(sv[1]);
    g_sock = sv[0];
    int rc = rank_main(0, mib << 20, rounds), status = 0;
    waitpid(child, &status, 0);
    return rc || !WIFEXITED(status) || WEXITSTATUS(status);
}
