/* commgemm's own sm_90a GEMM (hopper_gemm.cu), C entry points.
 *
 *   Y[m, n] = X[m, k] . W[n, k]^T (+ bias[n]) (+ Y when accumulate)
 *
 * commgemm's TN layout, row-major: X with ldx >= k, W [n, k] with ldw >= k,
 * Y with ldy >= n. X and W bf16 or fp16 (the same), fp32 accumulation, Y and
 * bias bf16, fp16 or fp32. TMA loads into a shared-memory ring, wgmma math,
 * one producer and two consumer warpgroups, a persistent grid; see
 * docs/HOPPER_GEMM.md.
 *
 * Fused all-gather hooks: when row_flags is not NULL, the tile that covers
 * rows [r0, r1) of X waits, before its first load, until every flag of
 * rows r0 .. r1 - 1 is >= the epoch (acquire, system scope), at most
 * wait_timeout_ns (%globaltimer). The flag of row g is
 * row_flags[g / rows_per_flag], or, with flag_shard_rows > 0 (rows come in
 * shards of that many rows, one sender each),
 * row_flags[(g / flag_shard_rows) * flag_shard_stride +
 *           (g % flag_shard_rows) / rows_per_flag].
 * The epoch is *flag_epoch_ptr (device memory, read at launch time: graph
 * replays see the current one) when not NULL, else flag_epoch. On expiry
 * the kernel sets *timeout_out to 1 (and, when given, *abort_word to 1 and
 * fills *abort_record) and computes with whatever the rows hold; later
 * waits of the launch (and of any kernel that watches abort_word) do not
 * wait any more, so the kernel ends in bounded time. m_block_order, when not
 * NULL, is a permutation of the ceil(m / CGM_HGEMM_TILE_M) row tiles: tiles
 * run in that order (e.g. local rows first).
 *
 * Fused reduce-scatter hooks: naddends > 0 adds, in the epilogue, the fp32
 * sum of addend[0..naddends) (each [m, n], row stride addend_ld, dtype
 * addend_dtype) to the accumulator before the bias and the conversion:
 *   Y = X . W^T + sum_i addend_i (+ bias) (+ Y).
 * With addend_flags[i] not NULL, the epilogue of the tile covering rows
 * [r0, r1) of Y first waits (same rules, epoch and timeout) until
 * addend_flags[i][r0 / rows_per_flag .. (r1 - 1) / rows_per_flag] all
 * reached the epoch: the main loop runs before the addends arrive. */
#ifndef COMMGEMM_HOPPER_GEMM_H
#define COMMGEMM_HOPPER_GEMM_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "commgemm.h"
#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows and columns of Y one CTA computes per tile, and the K step. The
 * row tile (and so m_block_order) is the same in both variants. */
#define CGM_HGEMM_TILE_M 128
#define CGM_HGEMM_TILE_N 256          /* cooperative */
#define CGM_HGEMM_TILE_N_PINGPONG 128 /* ping-pong */
#define CGM_HGEMM_TILE_K 64

/* Kernel variants (cgm_hgemm_args.variant); docs/HOPPER_GEMM.md. */
#define CGM_HGEMM_AUTO 0        /* per shape: ping-pong when k <= 2048 or (k <= 4096 and (n >= 16384 or (n >= 4096 and (m n >= 2^25 or m > 4096)))) */
#define CGM_HGEMM_COOPERATIVE 1 /* 128x256 tile shared by both consumer warpgroups */
#define CGM_HGEMM_PINGPONG 2    /* 128x128 tiles, consumers alternate, epilogue hidden */

/* Epilogue addends of the fused reduce-scatter (P - 1 peers at P <= 8). */
#define CGM_HGEMM_MAX_ADDENDS 7

typedef struct cgm_hgemm_args {
    cgm_dtype in_dtype;  /* X and W: CGM_DTYPE_BF16 or CGM_DTYPE_FP16 */
    cgm_dtype out_dtype; /* Y and bias: BF16, FP16 or FP32 */
    int64_t m, n, k;     /* m or n 0: nothing to do; k >= 1 */
    const void *x;       /* [m, k], row stride ldx elements */
    int64_t ldx;
    const void *w; /* [n, k], row stride ldw elements */
    int64_t ldw;
    void *y; /* [m, n], row stride ldy elements */
    int64_t ldy;
    const void *bias; /* n elements of out_dtype, or NULL */
    int accumulate;   /* 1: Y += ..., 0: Y = ... */
    int sm_count;     /* CTAs of the persistent grid; 0: every SM */
    /* Fused all-gather hooks (all 0/NULL: plain GEMM). */
    const unsigned long long *row_flags; /* see above */
    int64_t rows_per_flag;
    int64_t flag_shard_rows;   /* 0: row_flags[g / rows_per_flag] */
    int64_t flag_shard_stride; /* flags between two shards' first flags */
    unsigned long long flag_epoch;
    const unsigned long long *flag_epoch_ptr; /* device; overrides flag_epoch */
    int64_t wait_timeout_ns; /* <= 0: 10 s */
    int *timeout_out;        /* device or host-mapped; required with flags */
    const int *m_block_order; /* device memory, or NULL: natural order */
    /* Optional second source of X rows (the fused all-gather's own shard,
     * read where it is instead of copied): the m tiles that lie wholly in
     * rows [own_row0, own_row0 + own_rows) load them from x_own (row
     * own_row0 of X = row 0 of x_own, row stride ldx_own) and do not wait
     * for flags; other tiles read x. NULL: every tile reads x. */
    const void *x_own;
    int64_t ldx_own, own_row0, own_rows;
    int variant;              /* CGM_HGEMM_AUTO (0), _COOPERATIVE or _PINGPONG */
    /* Fused reduce-scatter hooks (naddends 0: none). Addends 8-byte aligned
     * (fp32) or 4-byte aligned (16-bit), addend_ld even. In the ping-pong
     * variant, addends that are 16-byte aligned with rows a multiple of 16
     * bytes apart are loaded by TMA ahead of the epilogue (faster;
     * docs/HOPPER_GEMM.md, "Addends by TMA"); others by the epilogue. */
    int naddends;
    const void *addend[CGM_HGEMM_MAX_ADDENDS];
    int64_t addend_ld;
    cgm_dtype addend_dtype; /* FP32, BF16 or FP16 */
    const unsigned long long *addend_flags[CGM_HGEMM_MAX_ADDENDS];
    /* Optional: the comm's abort word (waits return at once once it is
     * set; an expiry sets it) and the record an expiry fills with
     * {report_rank, the sender, READY, chunk}: for a row flag of shard j,
     * piece q: peer j, chunk j * report_chunks_per_shard + q; for addend i,
     * piece q: peer report_addend_peer[i], chunk report_addend_chunk0 + q. */
    unsigned int *abort_word;
    /* Optional: a peer's notice (cgm_dev_state.notice): once it is not 0
     * the waits return at once too, and the first to see it fills
     * abort_record as a notice (device.h; needs abort_word). */
    const unsigned int *notice_word;
    cgm_dev_abort_record *abort_record;
    int report_rank;
    int report_chunks_per_shard;
    int report_addend_peer[CGM_HGEMM_MAX_ADDENDS];
    int report_addend_chunk0;
    /* Optional split output (the fused GEMM+RS in one kernel): when y_own
     * is not NULL, only rows [y_own_row0, y_own_row0 + y_own_rows) of Y
     * (whole 128-row tiles) get the epilogue (bias, accumulate, addends)
     * and are stored at y_own (row stride ldy_own, its row 0 = Y row
     * y_own_row0); the addends' row 0 (and their flags' rows) is then Y row
     * y_own_row0. Every other row is stored to y as a plain partial
     * (X . W^T only, out_dtype). */
    void *y_own;
    int64_t ldy_own, y_own_row0, y_own_rows;
    /* Optional per-piece completion of those partial rows: rows come in
     * shards of done_shard_rows (a multiple of 128) cut into pieces of
     * done_rows_per_piece (a multiple of 128), at most
     * done_pieces_per_shard per shard. When every tile of piece q of shard
     * j is stored, the kernel sets done_flags[j * done_pieces_per_shard +
     * q] to the epoch (release, after a GPU-scope fence) and resets
     * done_count of that cell (device memory, zero before the first
     * launch; the kernel leaves it zero). Cells of the y_own shard are not
     * touched. When the y_own rows wait (addend_flags) for data that other
     * shards' done flags lead to, m_block_order must put the y_own tiles
     * last: the tile groups then never mix them with other shards' tiles
     * (cgm_hgemm sizes its tile groups to divide done_shard_rows / 128 and
     * done_rows_per_piece / 128: pieces also finish one after the other), so every
     * CTA reaches all of its other-shard tiles before it waits. */
    unsigned int *done_count;
    unsigned long long *done_flags;
    int64_t done_shard_rows, done_rows_per_piece;
    int done_pieces_per_shard;
    /* Optional stream-K tail (docs/HOPPER_GEMM.md, "Stream-K tail"). When
     * the tiles do not fill the last wave of the persistent grid, the
     * kernel can cut the last wave plus one full wave along k, so that
     * every CTA does the same number of k blocks; two CTAs then share a
     * tile, and the one that finishes second adds the other's fp32 partial
     * and stores the tile (the sum of two partials does not depend on who
     * comes second: results are deterministic, launch to launch). It needs
     * `workspace`: device memory, 16-byte aligned, at least
     * cgm_hgemm_workspace_bytes(args) bytes, whose first
     * CGM_HGEMM_WORKSPACE_COUNTERS bytes are zero before its first use (the
     * kernel leaves them zero). One launch at a time per workspace, as with
     * cuBLASLt's: concurrent launches on other streams need their own.
     * Applies to plain GEMMs (no addends, y_own, row_flags or x_own);
     * ignored otherwise. stream_k: CGM_HGEMM_SK_AUTO (0) cuts where it was
     * measured to pay: the cooperative variant, its last wave at most 40 %
     * full, k >= 512 (docs/HOPPER_GEMM.md); CGM_HGEMM_SK_OFF never,
     * CGM_HGEMM_SK_ON whenever the last wave is not full and k has two k
     * blocks or more (tests, benches). */
    void *workspace;
    size_t workspace_bytes;
    int stream_k;
    /* Optional dynamic tile schedule: 4 bytes of device memory, 4-byte
     * aligned, zero before its first use (the kernel leaves it zero). After
     * its first tile a CTA takes the next one from this counter instead of
     * every grid-th tile, so CTAs that run faster (under the static order
     * some CTAs' tiles take longer) take more tiles and the launch ends
     * when the average CTA would. One launch at a time per counter (stream
     * order), as with `workspace`. NULL: the static schedule. The kernels
     * with an addend helper (ping-pong with TMA-loadable addends or y_own)
     * and the stream-K tail keep the static one (docs/HOPPER_GEMM.md,
     * "Dynamic tile schedule"). */
    unsigned int *tile_counter;
} cgm_hgemm_args;

#define CGM_HGEMM_SK_AUTO 0
#define CGM_HGEMM_SK_OFF 1
#define CGM_HGEMM_SK_ON 2
/* The counters at the start of the workspace (one per shared tile and
 * consumer warpgroup): zero before the workspace's first use. */
#define CGM_HGEMM_WORKSPACE_COUNTERS (64 * 1024)

/* 1 when cgm_hgemm can run `args` on the current device; 0 otherwise, with
 * *reason (static string, may be NULL) saying why, e.g. "TMA needs the rows
 * of X 16-byte aligned: ldx * 2 bytes is not a multiple of 16". Needs an
 * sm_90 device; x and w 16-byte aligned; ldx, ldw multiples of 8 elements;
 * dtypes as above; k >= 1 and m, n, k, ld* below 2^31. */
int cgm_hgemm_supported(const cgm_hgemm_args *args, const char **reason);

/* The variant cgm_hgemm runs for `args`: args->variant when it is
 * CGM_HGEMM_COOPERATIVE or CGM_HGEMM_PINGPONG, the per-shape choice of
 * CGM_HGEMM_AUTO otherwise (host only, no device call; args not NULL). */
int cgm_hgemm_variant_for(const cgm_hgemm_args *args);

/* The workspace bytes the stream-K tail of `args` needs on the current
 * device (grid, variant and stream_k as cgm_hgemm would take them): 0 when
 * this call would not cut its last wave (every tile fits the last wave,
 * k below two k blocks, addends or y_own, CGM_HGEMM_SK_OFF, or, with
 * CGM_HGEMM_SK_AUTO, a last wave fuller than the rule allows), else
 * CGM_HGEMM_WORKSPACE_COUNTERS + 64 KiB per shared tile and consumer that
 * shares it. cgm_hgemm_workspace_max gives a bound over every call on a
 * device with `sm_count` SMs (about 33 MiB for 132). Host only, cached
 * device attributes; 0 when args is NULL or not valid. */
size_t cgm_hgemm_workspace_bytes(const cgm_hgemm_args *args);
size_t cgm_hgemm_workspace_max(int sm_count);

/* For tests, host only (no device): the stream-K schedule of an m x n x k
 * GEMM of `variant` (CGM_HGEMM_COOPERATIVE or _PINGPONG) on `grid` CTAs
 * with the cut forced on, walked unit by unit for every CTA with the
 * kernel's own unit_at. Checks that every tile's k blocks are covered
 * exactly once, a cut tile by exactly the two units the fix-up pairs (one
 * from k block 0, one to the last), whole tiles before the cut region as
 * the whole-tile loop runs them, each CTA's ring positions the running sum
 * of its units' k blocks, the CTAs' work equal to within one k block,
 * and each CTA's unit count (units_of, the producer's loop bound) equal to
 * the walk's.
 * Returns the number of cut tiles (0: this call would not cut), or -1 with
 * the first violation in why (len bytes). */
long long cgm_hgemm_sk_schedule_check(int64_t m, int64_t n, int64_t k, int variant, int grid, char *why,
                                      size_t len);

/* For tests, host only: the multiply-high division that the row-flag check
 * and the tile scheduler use (fastdiv in the .cu) against '/', over
 * divisors 1 .. 2^31 - 1 and dividends 0 .. 2^31 - 1 at their edges, and
 * the scheduler's tile coordinates against their division form. Returns
 * the number of checks, or -1 with the first wrong one in why. */
long long cgm_hgemm_fastdiv_check(char *why, size_t len);

/* Enqueues the GEMM on `stream` (no allocation, graph capturable).
 * cudaErrorInvalidValue when cgm_hgemm_supported says no (the caller falls
 * back to cuBLASLt); cudaErrorNotSupported on a device that is not sm_90;
 * otherwise the launch's error. A flag wait that expired is reported through
 * *timeout_out, not through the return value (the launch is asynchronous). */
cudaError_t cgm_hgemm(const cgm_hgemm_args *args, cudaStream_t stream);

/* Loads every kernel a comm launches on the current device now (nothing on
 * a device that is not sm_90; not the stream-K kernels, which need a
 * workspace that no comm passes): see cgm_dev_preload (device.h) for why. */
cudaError_t cgm_hgemm_preload(void);

/* Built with -DCGM_HGEMM_TRACE only (a diagnostic build, not a release
 * one): the clock64() stamps of CTA 0's ping-pong tiles since the last read,
 * out[(consumer * max_tiles + i) * 6 + f] for the consumer's i-th tile,
 * f = 0 before the turn wait, 1 main loop start, 2 main loop end, 3 after
 * the addends, 4 after the stores, 5 whether the tile had the epilogue rows
 * (1) or stored a plain partial (0); zeroes the stamps. Returns the tiles
 * per consumer written (min(max_tiles, 64)), 0 in a normal build, -1 on a
 * CUDA error. */
int cgm_hgemm_trace_read(unsigned long long *out, int max_tiles);

/* The trace build's per-CTA stamps of the last launches (%globaltimer, ns):
 * out[4 c] = CTA c's start, out[4 c + 1] and out[4 c + 2] its consumer
 * warpgroups' exits (0 where none ran), out[4 c + 3] the SM it ran on
 * (%smid), for the first max_ctas CTAs (at most 1024); clears them.
 * Returns the number of CTAs copied, 0 when not a trace build, -1 on a
 * CUDA error. */
int cgm_hgemm_trace_ctas(unsigned long long *out, int max_ctas);

#ifdef __cplusplus
}
#endif

#endif
