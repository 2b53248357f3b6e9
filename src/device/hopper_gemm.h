/* commgemm's own sm_90a GEMM (src/device/hopper/), C entry points.
 *
 *   Y[m, n] = X[m, k] . W[n, k]^T (+ bias[n]) (+ Y when accumulate)
 *   Y[m, n] = act(X . W^T (+ addends) (+ bias))  with an epilogue (below)
 *
 * commgemm's TN layout, row-major: X with ldx >= k, W [n, k] with ldw >= k,
 * Y with ldy >= n. X and W bf16 or fp16 (the same), or each fp8 (e4m3 or
 * e5m2, any pair: in_dtype is X's, w_dtype W's), fp32 accumulation, Y and
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
 * reached the epoch: the main loop runs before the addends arrive.
 *
 * Fused epilogue (epilogue, aux, bgrad; commgemm.h "Epilogues"): GELU,
 * GELU_AUX, DGELU, DGELU_BGRAD on the fp32 sum above (after the addends
 * and the bias), one rounding; DGELU_BGRAD's bias gradient deterministic
 * (per-16-row slots, then one summing kernel). See the fields' comment;
 * 16-bit inputs only.
 *
 * FP8 inputs (per-tensor scaling): the scales multiply (docs/FP8.md), and
 * the scaled product is formed in fp32 before the addends, the bias and
 * the one rounding:
 *   Y = sx(g) * sw * (X . W^T) + sum_i addend_i (+ bias) (+ Y)
 * with sw = *w_scale and sx(g) = x_scale[g / x_scale_shard_rows] for row g
 * (x_scale_shard_rows 0: x_scale[0]): the fused all-gather's shards keep
 * their own scales. fp8 rows are 16-byte TMA rows: k, ldx, ldw (and
 * ldx_own) multiples of 16. By default the product accumulates in the
 * tensor cores' accumulator over the whole k, as cuBLASLt's FAST_ACCUM
 * does; fp8_promote = 1 accumulates each 128-wide k block in the tensor
 * cores and adds it into fp32 registers (promotion: Hopper's fp8 tensor
 * cores keep fewer accumulator bits than fp32 over a long k).
 *
 * FP8 block scaling (x_block_scale and w_block_scale, both or neither;
 * then x_scale and w_scale are NULL): X's rows carry one scale per 128 k
 * (1x128), W one per 128 x 128 block, and each k block's product is
 * promoted with its two scales (promotion is implied):
 *   Y[g, j] = sum_b sx[g, b] * sw[j / 128, b] * (X . W^T over k block b)
 *             + sum_i addend_i (+ bias) (+ Y)
 * sx[g, b] = x_block_scale[g * x_block_ld + b] for every row g of Y (the
 * fused all-gather's gathered numbering, the rows read from x_own
 * included), sw[r, b] = w_block_scale[r * w_block_ld + b]. */
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

/* The tail split (cgm_hgemm_args.split_ws): at most this many k parts per
 * tile, and the bytes at the start of split_ws that hold its counters. */
#define CGM_HGEMM_SPLIT_MAX_PARTS 8
#define CGM_HGEMM_SPLIT_COUNTER_BYTES 16384

typedef struct cgm_hgemm_args {
    cgm_dtype in_dtype;  /* X (and W unless fp8): BF16, FP16, FP8_E4M3 or FP8_E5M2 */
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
     * bytes apart are loaded by TMA ahead of the epilogue (faster); others
     * by the epilogue. */
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
    /* Optional dynamic tile schedule: 4 bytes of device memory, 4-byte
     * aligned, zero before its first use (the kernel leaves it zero). After
     * its first tile a CTA takes the next one from this counter instead of
     * every grid-th tile, so CTAs that run faster (under the static order
     * some CTAs' tiles take longer) take more tiles and the launch ends
     * when the average CTA would. One launch at a time per counter (stream
     * order), as with cuBLASLt's workspace. NULL: the static schedule.
     * cgm_hgemm takes the counter for plain GEMMs only (no row flags, no
     * addends), where it measured faster or the same; other calls keep the
     * static schedule and leave the counter alone. */
    unsigned int *tile_counter;
    /* ---- Fused epilogue (commgemm.h "Epilogues"; 0/NULL: none). ----
     * epilogue: CGM_EPILOGUE_NONE, _GELU, _GELU_AUX, _DGELU or
     * _DGELU_BGRAD (not BGRAD), without accumulate. On t = X . W^T + the
     * addends + bias (fp32; the fused reduce-scatter's activation applies
     * after its sum), before the one rounding to out_dtype:
     *   GELU: Y = gelu(t); GELU_AUX: also aux = t (rounded once);
     *   DGELU: Y = t * gelu'(aux); DGELU_BGRAD: the same, and
     *   bgrad[j] = sum over the m rows of t * gelu'(aux) (fp32, rounded
     *   once to bgrad_dtype).
     * aux: [m, n] of out_dtype, row stride aux_ld >= n, element aligned
     * (pairs where aux_ld is even and aux 2-element aligned; 16-byte
     * vectors on interior tiles where aux is 16-byte aligned and aux_ld a
     * multiple of 8, or for fp32 pairs: faster). The bias
     * gradient: the kernel writes fp32 column partials of each 16-row group
     * into bgrad_ws (cgm_hgemm_bgrad_ws_bytes(m, n), 16-byte aligned; one
     * slot per group, each written by one warp in a fixed order), then
     * cgm_hgemm enqueues one small kernel that sums the slots in row order:
     * the same bits every run (both variants cut the same groups). bgrad:
     * n values of bgrad_dtype (FP32, BF16 or FP16). */
    int epilogue;
    void *aux;
    int64_t aux_ld;
    void *bgrad;
    cgm_dtype bgrad_dtype;
    float *bgrad_ws;
    /* ---- FP8 inputs (in_dtype CGM_DTYPE_FP8_*; all 0/NULL otherwise):
     * W's dtype (FP8_E4M3 or FP8_E5M2) and the per-tensor scales, device
     * fp32, 4-byte aligned: w_scale one float, x_scale one per shard of
     * x_scale_shard_rows rows (0: one float for every row; see above). */
    cgm_dtype w_dtype;
    const float *x_scale;
    const float *w_scale;
    int64_t x_scale_shard_rows;
    /* 1: promote each 128-wide k block into fp32 registers (see above);
     * 0: accumulate over the whole k in the tensor cores. fp8 only. */
    int fp8_promote;
    /* Block scaling (see above), device fp32, 4-byte aligned: x_block_scale
     * [m, ceil(k / 128)] with row stride x_block_ld >= ceil(k / 128),
     * w_block_scale [ceil(n / 128), ceil(k / 128)] with row stride
     * w_block_ld >= ceil(k / 128). */
    const float *x_block_scale;
    int64_t x_block_ld;
    const float *w_block_scale;
    int64_t w_block_ld;
    /* ---- Tail split (split_ws NULL: none; docs/HOPPER_GEMM.md "Tail
     * split"). Where the output tiles do not fill whole waves of the
     * persistent grid, the tiles of the last partial wave are each cut
     * into k ranges (parts) that run on different CTAs; each part stores
     * its fp32 accumulators in split_ws, and the last part of a tile to
     * finish adds the tile's parts in k order (fixed, so the same bits
     * every run) and runs the epilogue. Plain GEMMs only (no row flags, no
     * addends, no fused epilogue): other calls leave split_ws alone.
     * split_ws: device memory, 16-byte aligned, split_ws_bytes long, its
     * first CGM_HGEMM_SPLIT_COUNTER_BYTES zero before its first use (the
     * kernel leaves them zero); one launch at a time per workspace (stream
     * order), as with cuBLASLt's workspace. cgm_hgemm_split_ws_bytes says
     * how much a call uses; with less, a call takes fewer parts (or none).
     * Results may differ from the unsplit kernel's in the last bits (the
     * fp32 sum is grouped by parts), and are the same every run for one
     * call, device and workspace size. tail_split: 0 the model's choice
     * (tail_split.h: parts where they save time); 1 no split; 2 ..
     * CGM_HGEMM_SPLIT_MAX_PARTS that many parts (at most one per k block:
     * 64 k, fp8 128). */
    void *split_ws;
    size_t split_ws_bytes;
    int tail_split;
} cgm_hgemm_args;

/* Bytes of bgrad_ws that DGELU_BGRAD needs for an m x n GEMM: one fp32 slot
 * of n (rounded up to 4) per 16 rows. Host only. */
size_t cgm_hgemm_bgrad_ws_bytes(int64_t m, int64_t n);

/* Bytes of split_ws that cgm_hgemm(args) uses on the current device (its
 * SM count, args->sm_count, the variant, the shape and tail_split decide;
 * args->split_ws and split_ws_bytes are not read): the counters and one
 * fp32 tile per part of each tail tile; 0 when the call would not split
 * (not a plain GEMM, whole waves, a split that does not pay, no sm_90
 * device). Host only, no GPU work. */
size_t cgm_hgemm_split_ws_bytes(const cgm_hgemm_args *args);

/* 1 when cgm_hgemm can run `args` on the current device; 0 otherwise, with
 * *reason (static string, may be NULL) saying why, e.g. "TMA needs the rows
 * of X 16-byte aligned: ldx * 2 bytes is not a multiple of 16". Needs an
 * sm_90 device; x and w 16-byte aligned; ldx, ldw multiples of 8 elements
 * (fp8: k, ldx, ldw multiples of 16, the scales given); dtypes as above;
 * k >= 1 and m, n, k, ld* below 2^31. */
int cgm_hgemm_supported(const cgm_hgemm_args *args, const char **reason);

/* The variant cgm_hgemm runs for `args`: args->variant when it is
 * CGM_HGEMM_COOPERATIVE or CGM_HGEMM_PINGPONG, the per-shape choice of
 * CGM_HGEMM_AUTO otherwise (cgm_hgemm_auto_variant with the current device's
 * memory bandwidth, asked once per device; no GPU work; args not NULL). */
int cgm_hgemm_variant_for(const cgm_hgemm_args *args);

/* CGM_HGEMM_AUTO's choice for an m x n x k GEMM on a device with
 * mem_bytes_per_s of peak memory bandwidth (0: unknown), host only:
 * CGM_HGEMM_COOPERATIVE or CGM_HGEMM_PINGPONG (docs/HOPPER_GEMM.md). */
int cgm_hgemm_auto_variant(int64_t m, int64_t n, int64_t k, double mem_bytes_per_s);

/* For tests, host only: the multiply-high division that the row-flag check
 * and the tile scheduler use (fastdiv, hopper/scheduler.cuh) against '/', over
 * divisors 1 .. 2^31 - 1 and dividends 0 .. 2^31 - 1 at their edges, and
 * the scheduler's tile coordinates against their division form. Returns
 * the number of checks, or -1 with the first wrong one in why. */
long long cgm_hgemm_fastdiv_check(char *why, size_t len);

/* For tests, host only: the split kernels' work units (unit_of,
 * hopper/scheduler.cuh) over many tile counts, grids, k blocks and part
 * counts: every k block of every tile in exactly one unit, the tail's
 * parts in k order. Returns the number of units checked, or -1 with the
 * first wrong one in why. */
long long cgm_hgemm_split_check(char *why, size_t len);

/* Enqueues the GEMM on `stream` (no allocation, graph capturable).
 * cudaErrorInvalidValue when cgm_hgemm_supported says no (the caller falls
 * back to cuBLASLt); cudaErrorNotSupported on a device that is not sm_90;
 * otherwise the launch's error. A flag wait that expired is reported through
 * *timeout_out, not through the return value (the launch is asynchronous). */
cudaError_t cgm_hgemm(const cgm_hgemm_args *args, cudaStream_t stream);

/* Loads every kernel of cgm_hgemm on the current device now (nothing on a
 * device that is not sm_90): see cgm_dev_preload (device.h) for why. */
cudaError_t cgm_hgemm_preload(void);

#ifdef __cplusplus
}
#endif

#endif
