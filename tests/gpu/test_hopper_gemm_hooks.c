/* The fused hooks of commgemm's own sm_90a GEMM (src/device/hopper/): the
 * all-gather's row flags (a flag that never comes), x_own, the
 * reduce-scatter's addends (ready, late, never, by TMA), the abort word,
 * the abort record and a peer's notice, and the refusals of bad hook
 * arguments. Every result must equal the exact one rounded once (inputs
 * are multiples of 1/8: test_hopper_gemm.c says why that is exact). */
#include <time.h>

#include <cuda_runtime_api.h>

#include "device/device.h"
#include "device/hopper_gemm.h"
#include "gpu_check.h"
#include "harness.h"
#include "hgemm_values.h"
#include "test_hopper_gemm.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One flag block never reaches the epoch: timeout_out is set and the
 * kernel ends within a bounded time (not one timeout per tile). */
static void case_flags_timeout(const void *p) {
    (void)p;
    require_sm90();
    int64_t m = 4096, n = 4096, k = 256;
    void *dx, *dw, *dy;
    GPU_CHECK(cudaMalloc(&dx, (size_t)(m * k * 2)));
    GPU_CHECK(cudaMalloc(&dw, (size_t)(n * k * 2)));
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n * 2)));
    GPU_CHECK(cudaMemset(dx, 0, (size_t)(m * k * 2)));
    GPU_CHECK(cudaMemset(dw, 0, (size_t)(n * k * 2)));
    int64_t nflags = m / 512;
    unsigned long long hf[8] = {3, 3, 3, 2, 3, 3, 3, 3}; /* block 3 never comes */
    unsigned long long *df = to_device(hf, sizeof hf);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = a.out_dtype = CGM_DTYPE_BF16;
    a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
    a.row_flags = df, a.rows_per_flag = m / nflags, a.flag_epoch = 3;
    a.wait_timeout_ns = 200000000ll, a.timeout_out = dt;
    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
        a.variant = v;
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        double t0 = now_s();
        GPU_CHECK(cgm_hgemm(&a, 0));
        GPU_CHECK(cudaDeviceSynchronize());
        double waited = now_s() - t0;
        int timed_out = 0;
        GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
        printf("flag timeout (%s): timeout_out %d after %.3f s (timeout 0.2 s)\n", variant_name(v), timed_out,
               waited);
        CHECK_INT_EQ(timed_out, 1);
        if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with a 0.2 s flag timeout", waited);
    }
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(df), cudaFree(dt);
}

cgm_hgemm_args args_64(const void *buf) {
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = a.out_dtype = CGM_DTYPE_BF16;
    a.m = 64, a.n = 64, a.k = 64, a.x = buf, a.ldx = 64, a.w = buf, a.ldw = 64;
    a.y = (void *)buf, a.ldy = 64;
    return a;
}

void expect_refused(const cgm_hgemm_args *a, const char *what, const char *reason) {
    const char *why = NULL;
    if (cgm_hgemm_supported(a, &why)) TEST_FAIL("%s: accepted, expected a refusal saying \"%s\"", what, reason);
    if (!why || !strstr(why, reason))
        TEST_FAIL("%s: refused with \"%s\", expected \"%s\"", what, why ? why : "(no reason)", reason);
    CHECK_INT_EQ(cgm_hgemm(a, 0), cudaErrorInvalidValue);
}

/* Runs a GEMM with fused hooks on the default stream: checks that it is
 * supported, waits for it, and returns *timeout_out (1: a flag wait
 * expired). */
static int run_hooked(const cgm_hgemm_args *a) {
    const char *why = NULL;
    if (!cgm_hgemm_supported(a, &why)) TEST_FAIL("cgm_hgemm_supported said no: %s", why);
    GPU_CHECK(cgm_hgemm(a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    int timed_out = -1;
    GPU_CHECK(cudaMemcpy(&timed_out, a->timeout_out, sizeof(int), cudaMemcpyDeviceToHost));
    return timed_out;
}

/* The fused reduce-scatter epilogue: Y = X . W^T + sum of 1 or 3 addends
 * (fp32 or bf16) + bias, with each addend's flags at the epoch read from
 * device memory (flag_epoch_ptr), and the fused all-gather's shard-mapped
 * row flags (a cell that is not a row flag stays 0: reading it times out).
 * Every element must equal the exact result rounded once. */
static void case_addends(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 300, n = 200, k = 136, ldy = 208, ald = 202;
    const int64_t shard = 150, rpf = 128, stride = 5; /* 2 shards, 2 pieces each */
    const cgm_dtype outs[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP32};
    const cgm_dtype adts[] = {CGM_DTYPE_FP32, CGM_DTYPE_BF16};
    int64_t kp = (k + 15) / 16 * 16;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 51), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 52);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    /* Row flags: cells j * stride + q for shard j, piece q; the rest 0. */
    unsigned long long hrow[2 * 5] = {9, 9, 0, 0, 0, 9, 9, 0, 0, 0};
    unsigned long long hadd[3] = {9, 12, 9}; /* the 3 pieces of Y's 300 rows */
    unsigned long long epoch = 9;
    unsigned long long *drow = to_device(hrow, sizeof hrow), *dadd = to_device(hadd, sizeof hadd);
    unsigned long long *depoch = to_device(&epoch, sizeof epoch);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    for (int o = 0; o < 2; o++)
        for (int ad = 0; ad < 2; ad++)
            for (int na = 1; na <= 3; na += 2)
                for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
                    cgm_dtype out = outs[o], adt = adts[ad];
                    uint64_t seed = 60 + (uint64_t)(o * 8 + ad * 4 + na);
                    void *hb = fill(out, (size_t)n, seed), *hadds[3], *dadds[3];
                    for (int i = 0; i < na; i++) {
                        hadds[i] = fill(adt, (size_t)(m * ald), seed + 10 + (uint64_t)i);
                        dadds[i] = to_device(hadds[i], (size_t)(m * ald) * hv_size(adt));
                    }
                    void *db = to_device(hb, (size_t)n * hv_size(out)), *dy;
                    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * ldy) * hv_size(out)));
                    GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * ldy) * hv_size(out)));
                    GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
                    cgm_hgemm_args a;
                    memset(&a, 0, sizeof a);
                    a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = out;
                    a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = ldy;
                    a.bias = db, a.variant = v;
                    a.row_flags = drow, a.rows_per_flag = rpf, a.flag_shard_rows = shard;
                    a.flag_shard_stride = stride, a.flag_epoch_ptr = depoch, a.flag_epoch = 1000;
                    a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
                    a.naddends = na, a.addend_dtype = adt, a.addend_ld = ald;
                    for (int i = 0; i < na; i++) {
                        a.addend[i] = dadds[i];
                        a.addend_flags[i] = i == 1 ? NULL : dadd; /* one without flags */
                    }
                    if (run_hooked(&a))
                        TEST_FAIL("flags at the epoch, but the kernel timed out (%s out %s addends %s x %d): a "
                                  "wrong flag cell was read", variant_name(v), cgm_dtype_name(out),
                                  cgm_dtype_name(adt), na);
                    void *hy = malloc((size_t)(m * ldy) * hv_size(out));
                    GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * ldy) * hv_size(out), cudaMemcpyDeviceToHost));
                    int64_t bad = 0;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            double sum = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0 + hv_get(hb, out, (size_t)j);
                            for (int t = 0; t < na; t++) sum += hv_get(hadds[t], adt, (size_t)(i * ald + j));
                            double want = round_out(sum, out), got = hv_get(hy, out, (size_t)(i * ldy + j));
                            if (got != want && bad++ < 4)
                                fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i, (long long)j,
                                        got, want);
                        }
                    if (bad)
                        TEST_FAIL("%lld of %lld wrong: %s, out %s, %d addend(s) of %s", (long long)bad,
                                  (long long)(m * n), variant_name(v), cgm_dtype_name(out), na,
                                  cgm_dtype_name(adt));
                    for (int i = 0; i < na; i++) cudaFree(dadds[i]), free(hadds[i]);
                    cudaFree(db), cudaFree(dy), free(hb), free(hy);
                }
    /* A piece whose addend flag never comes: bounded, and the abort word
     * and record name the addend's peer and chunk. */
    unsigned int *dabort;
    cgm_dev_abort_record *rec;
    GPU_CHECK(cudaMalloc((void **)&dabort, sizeof *dabort));
    GPU_CHECK(cudaMemset(dabort, 0, sizeof *dabort));
    GPU_CHECK(cudaHostAlloc((void **)&rec, sizeof *rec, cudaHostAllocMapped));
    memset((void *)rec, 0, sizeof *rec);
    cgm_dev_abort_record *rec_dev;
    GPU_CHECK(cudaHostGetDevicePointer((void **)&rec_dev, rec, 0));
    void *dy, *dz;
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 4));
    GPU_CHECK(cudaMalloc(&dz, (size_t)(m * n) * 4));
    GPU_CHECK(cudaMemset(dz, 0, (size_t)(m * n) * 4));
    unsigned long long late[3] = {9, 8, 9}; /* piece 1 never reaches 9 */
    GPU_CHECK(cudaMemcpy(dadd, late, sizeof late, cudaMemcpyHostToDevice));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_FP32;
    a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
    a.rows_per_flag = rpf, a.flag_epoch_ptr = depoch, a.wait_timeout_ns = 200000000ll;
    a.naddends = 1, a.addend_dtype = CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = dz, a.addend_flags[0] = dadd;
    a.abort_word = dabort, a.abort_record = rec_dev, a.report_rank = 1;
    a.report_addend_peer[0] = 0, a.report_addend_chunk0 = 40;
    double t0 = now_s();
    GPU_CHECK(cgm_hgemm(&a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    double waited = now_s() - t0;
    unsigned int aborted = 0;
    GPU_CHECK(cudaMemcpy(&aborted, dabort, sizeof aborted, cudaMemcpyDeviceToHost));
    printf("addend flag timeout: abort %u, record set %d rank %d peer %d chunk %d after %.3f s\n", aborted,
           rec->set, rec->waiting_rank, rec->peer, rec->chunk, waited);
    CHECK_INT_EQ(aborted, 1);
    CHECK_INT_EQ(rec->set, 1);
    CHECK_INT_EQ(rec->waiting_rank, 1);
    CHECK_INT_EQ(rec->peer, 0);
    CHECK_INT_EQ(rec->chunk, 41);
    if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with a 0.2 s flag timeout", waited);
    /* The same wait with a peer's notice raised (rank 3 says rank 5
     * failed) and a 20 s flag timeout: the kernel gives up at once and
     * records the notice, not an expiry. */
    unsigned int *dnotice, notice = cgm_dev_notice(3, 5);
    GPU_CHECK(cudaMalloc((void **)&dnotice, sizeof *dnotice));
    GPU_CHECK(cudaMemcpy(dnotice, &notice, sizeof notice, cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemset(dabort, 0, sizeof *dabort));
    memset((void *)rec, 0, sizeof *rec);
    a.notice_word = dnotice, a.wait_timeout_ns = 20000000000ll;
    t0 = now_s();
    GPU_CHECK(cgm_hgemm(&a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    waited = now_s() - t0;
    GPU_CHECK(cudaMemcpy(&aborted, dabort, sizeof aborted, cudaMemcpyDeviceToHost));
    printf("notice: abort %u, record set %d kind %d rank %d culprit %d teller %d after %.3f s\n", aborted,
           rec->set, rec->flag_kind, rec->waiting_rank, rec->peer, rec->chunk, waited);
    CHECK_INT_EQ(aborted, 1);
    CHECK_INT_EQ(rec->set, 1);
    CHECK_INT_EQ(rec->flag_kind, CGM_DEV_NOTICE_KIND);
    CHECK_INT_EQ(rec->waiting_rank, 1);
    CHECK_INT_EQ(rec->peer, 5);
    CHECK_INT_EQ(rec->chunk, 3);
    if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with the notice raised", waited);
    /* notice_word without abort_word (flags bounded by timeout_out alone):
     * refused. */
    a.abort_word = NULL, a.timeout_out = dt;
    CHECK(cgm_hgemm(&a, 0) == cudaErrorInvalidValue);
    cudaFree(dnotice);
    cudaFree(dy), cudaFree(dz), cudaFree(dabort), cudaFreeHost(rec);
    cudaFree(dx), cudaFree(dw), cudaFree(drow), cudaFree(dadd), cudaFree(depoch), cudaFree(dt);
    free(hx), free(hw), free(xq), free(wq);
}

/* Addends that arrive while the kernel runs: the addend rows of each
 * 128-row piece are copied in (over poison) and then the piece's flag
 * raised, piece by piece in reverse row order, by copies on another stream
 * that start after the kernel has been waiting for 20 ms. Two CTAs, so
 * each consumer meets several tiles in turn; an fp32 and a bf16 addend.
 * In the cooperative kernel each consumer waits for the flags itself; in
 * the ping-pong kernel (rows 16-byte aligned: the helper's form) the
 * helper thread waits and loads the addend into the shared-memory slots by
 * TMA after each flag. An addend read before its flag is poison (3.4e38)
 * and shows; every element must equal the exact result rounded once, and
 * no wait may time out. Last, a flag that never comes in the helper's
 * form: bounded, timeout_out set. */
static void case_addends_late(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 1024, n = 512, k = 64, rpf = 128, pieces = m / rpf;
    int64_t kp = k;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 91), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 92);
    void *ha = fill(CGM_DTYPE_FP32, (size_t)(m * n), 93);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    void *dsrc = to_device(ha, (size_t)(m * n) * 4), *da, *dy;
    /* the same values as bf16 (multiples of 1/8 in [-1, 1]: exact) */
    uint16_t *ha16 = malloc((size_t)(m * n) * 2);
    if (!ha16) TEST_FAIL("malloc %lld", (long long)(m * n) * 2);
    for (int64_t i = 0; i < m * n; i++) ha16[i] = hv_bf16_bits(hv_get(ha, CGM_DTYPE_FP32, (size_t)i));
    void *dsrc16 = to_device(ha16, (size_t)(m * n) * 2);
    unsigned long long epoch = 5, ready[8] = {5, 5, 5, 5, 5, 5, 5, 5}, *dflags, *dready = to_device(ready, sizeof ready);
    int *dt;
    GPU_CHECK(cudaMalloc(&da, (size_t)(m * n) * 4));
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc((void **)&dflags, sizeof ready));
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    cudaStream_t s1, s2;
    GPU_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    GPU_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    uint16_t *hy = malloc((size_t)(m * n) * 2);
    if (!hy) TEST_FAIL("malloc %lld", (long long)(m * n) * 2);
    for (int a16 = 0; a16 < 2; a16++)
        for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
            const char *form = a16 ? "bf16 addend" : "fp32 addend";
            size_t aes = a16 ? 2 : 4;
            const void *src = a16 ? dsrc16 : dsrc;
            GPU_CHECK(cudaMemset(da, 0x7F, (size_t)(m * n) * 4));
            GPU_CHECK(cudaMemset(dflags, 0, sizeof ready));
            GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
            GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * n) * 2));
            GPU_CHECK(cudaDeviceSynchronize());
            cgm_hgemm_args a;
            memset(&a, 0, sizeof a);
            a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_BF16, a.variant = v, a.sm_count = 2;
            a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
            a.rows_per_flag = rpf, a.flag_epoch = epoch, a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
            a.naddends = 1, a.addend_dtype = a16 ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = da;
            a.addend_flags[0] = dflags;
            const char *why = NULL;
            if (!cgm_hgemm_supported(&a, &why)) TEST_FAIL("cgm_hgemm_supported said no: %s", why);
            GPU_CHECK(cgm_hgemm(&a, s1));
            struct timespec nap = {0, 20000000};
            nanosleep(&nap, NULL);
            int running = cudaStreamQuery(s1) == cudaErrorNotReady;
            for (int64_t q = pieces - 1; q >= 0; q--) {
                size_t off = (size_t)(q * rpf * n) * aes;
                GPU_CHECK(cudaMemcpyAsync((char *)da + off, (const char *)src + off, (size_t)(rpf * n) * aes,
                                          cudaMemcpyDeviceToDevice, s2));
                GPU_CHECK(cudaMemcpyAsync(dflags + q, dready + q, sizeof *dflags, cudaMemcpyDeviceToDevice, s2));
            }
            GPU_CHECK(cudaDeviceSynchronize());
            int timed_out = -1;
            GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
            printf("late addends (%s, %s): the kernel %s waiting after 20 ms, timeout_out %d\n", form,
                   variant_name(v), running ? "was" : "was NOT", timed_out);
            if (!running) TEST_FAIL("the kernel ended before any addend flag was raised (%s, %s)", form, variant_name(v));
            CHECK_INT_EQ(timed_out, 0);
            GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * n) * 2, cudaMemcpyDeviceToHost));
            int64_t bad = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double sum = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0;
                    sum += hv_get(ha, CGM_DTYPE_FP32, (size_t)(i * n + j));
                    double want = round_out(sum, CGM_DTYPE_BF16), got = hv_bf16_float(hy[i * n + j]);
                    if (got != want && bad++ < 4)
                        fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i, (long long)j, got, want);
                }
            if (bad)
                TEST_FAIL("%lld of %lld wrong with late addends (%s, %s)", (long long)bad, (long long)(m * n), form,
                          variant_name(v));
        }
    /* A flag that never comes in the ping-pong kernel's helper form: the
     * helper's wait expires, it still loads every tile's addend into the
     * slots, and the kernel ends within a bounded time with timeout_out set
     * (no consumer left waiting). Every piece's flag is raised but piece
     * 2's. */
    for (int a16 = 0; a16 < 2; a16++) {
        unsigned long long some[8] = {5, 5, 0, 5, 5, 5, 5, 5};
        GPU_CHECK(cudaMemcpy(dflags, some, sizeof some, cudaMemcpyHostToDevice));
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_BF16, a.variant = CGM_HGEMM_PINGPONG, a.sm_count = 2;
        a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
        a.rows_per_flag = rpf, a.flag_epoch = epoch, a.wait_timeout_ns = 200000000ll, a.timeout_out = dt;
        a.naddends = 1, a.addend_dtype = a16 ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = da;
        a.addend_flags[0] = dflags;
        double t0 = now_s();
        GPU_CHECK(cgm_hgemm(&a, s1));
        GPU_CHECK(cudaStreamSynchronize(s1));
        double waited = now_s() - t0;
        int timed_out = 0;
        GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
        printf("late addends (pingpong, %s addend): a flag that never comes: timeout_out %d after %.3f s (timeout "
               "0.2 s)\n", a16 ? "bf16" : "fp32", timed_out, waited);
        CHECK_INT_EQ(timed_out, 1);
        if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with a 0.2 s flag timeout", waited);
    }
    free(hy);
    cudaStreamDestroy(s1), cudaStreamDestroy(s2);
    cudaFree(dx), cudaFree(dw), cudaFree(dsrc), cudaFree(dsrc16), cudaFree(da), cudaFree(dy);
    cudaFree(dflags), cudaFree(dready), cudaFree(dt);
    free(hx), free(hw), free(ha), free(ha16), free(xq), free(wq);
}

/* The ping-pong kernel's addends through shared memory: addends whose rows
 * TMA can read (16-byte aligned, rows a multiple of 16 bytes apart) are
 * loaded by the helper thread into two 16 KiB slots, one (tile, addend)
 * ahead of the epilogue. m = 1000 (the last row tile 104 rows: TMA
 * zero-fills past the end), n = 328 (the last column tile 72 wide). 1, 2,
 * 3 and 7 addends (the slots' phases then run on by
 * odd and even steps per tile): with 1, 3 and 7 all but one behind flags,
 * with 2 none (the helper then loads without waiting); 16-bit addends
 * (bf16 and fp16, in halves of 64 rows) and fp32 ones (in quarters of 32
 * columns); bf16 and fp16 outputs; two CTAs (several own tiles per
 * consumer) and the whole grid. Each runs with addend_ld = n (TMA) and
 * n + 2 (the consumers' global loads) and in the cooperative kernel: every
 * element must equal the exact result rounded once, in all of them. */
static void case_addends_tma(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 1000, n = 328, k = 192, ldy = 336;
    const int nas[] = {1, 2, 3, 7};
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 101), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 102);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, k), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, k);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    double *dot = malloc((size_t)(m * n) * sizeof *dot);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) dot[i * n + j] = dot_eighths(xq + i * k, wq + j * k, k) / 64.0;
    unsigned long long ready[8] = {3, 3, 3, 3, 3, 3, 3, 3}, *dready = to_device(ready, sizeof ready);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    void *hy = malloc((size_t)(m * ldy) * 2), *dy;
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * ldy) * 2));
    int runs = 0;
    for (int o = 0; o < 2; o++)
        for (int f32 = 0; f32 < 2; f32++) {
            cgm_dtype out = o ? CGM_DTYPE_FP16 : CGM_DTYPE_BF16;
            cgm_dtype adt = f32 ? CGM_DTYPE_FP32 : o ? CGM_DTYPE_BF16 : CGM_DTYPE_FP16;
            void *hb = fill(out, (size_t)n, 103 + (uint64_t)o), *db = to_device(hb, (size_t)n * 2);
            for (int ni = 0; ni < 4; ni++)
                for (int64_t ald = n; ald <= n + 2; ald += 2) {
                    int na = nas[ni];
                    void *hadds[CGM_HGEMM_MAX_ADDENDS], *dadds[CGM_HGEMM_MAX_ADDENDS];
                    for (int i = 0; i < na; i++) {
                        hadds[i] = fill(adt, (size_t)(m * ald), 110 + (uint64_t)(20 * f32 + 10 * o + i));
                        dadds[i] = to_device(hadds[i], (size_t)(m * ald) * hv_size(adt));
                    }
                    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++)
                        for (int sms = 0; sms <= 2; sms += 2) {
                            GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * ldy) * 2));
                            GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
                            cgm_hgemm_args a;
                            memset(&a, 0, sizeof a);
                            a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = out, a.variant = v, a.sm_count = sms;
                            a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy;
                            a.ldy = ldy, a.bias = db;
                            a.naddends = na, a.addend_dtype = adt, a.addend_ld = ald;
                            for (int i = 0; i < na; i++) {
                                a.addend[i] = dadds[i];
                                a.addend_flags[i] = i == 1 || na == 2 ? NULL : dready;
                            }
                            a.rows_per_flag = 128, a.flag_epoch = 3, a.wait_timeout_ns = 2000000000ll;
                            a.timeout_out = dt;
                            if (run_hooked(&a))
                                TEST_FAIL("%s, %d addends: the flags were at the epoch, yet a wait expired",
                                          variant_name(v), na);
                            GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * ldy) * 2, cudaMemcpyDeviceToHost));
                            int64_t bad = 0;
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t j = 0; j < n; j++) {
                                    double sum = dot[i * n + j] + hv_get(hb, out, (size_t)j);
                                    for (int t = 0; t < na; t++)
                                        sum += hv_get(hadds[t], adt, (size_t)(i * ald + j));
                                    double got = hv_get(hy, out, (size_t)(i * ldy + j));
                                    double want = round_out(sum, out);
                                    if (got != want && bad++ < 4)
                                        fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i,
                                                (long long)j, got, want);
                                }
                            if (bad)
                                TEST_FAIL("%lld of %lld wrong: %s, out %s, %d addend(s) of %s, addend_ld %lld, "
                                          "sm_count %d",
                                          (long long)bad, (long long)(m * n), variant_name(v), cgm_dtype_name(out), na,
                                          cgm_dtype_name(adt), (long long)ald, sms);
                            runs++;
                        }
                    for (int i = 0; i < na; i++) cudaFree(dadds[i]), free(hadds[i]);
                }
            cudaFree(db), free(hb);
        }
    printf("addends by TMA: %d launches exact (2 outputs x 16-bit and fp32 addends x 4 addend counts x 2 addend_ld x "
           "2 variants x 2 grids)\n", runs);
    free(hy), free(dot);
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dready), cudaFree(dt);
    free(hx), free(hw), free(xq), free(wq);
}

/* The fused all-gather's own rows: tiles wholly inside rows [100, 400)
 * read x_own (X's copy in x there is poisoned) and do not wait (their
 * flags never come); the tile shared with the rows before reads x and
 * waits. Every element must equal the exact result rounded once. */
static void case_x_own(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 600, n = 136, k = 72, own0 = 100, own = 300, ldo = 80;
    int64_t kp = (k + 15) / 16 * 16;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 71), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 72);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *hown = calloc((size_t)(own * ldo), 2), *hpoison = malloc((size_t)(m * k) * 2);
    memcpy(hpoison, hx, (size_t)(m * k) * 2);
    for (int64_t i = 0; i < own; i++) memcpy((char *)hown + i * ldo * 2, (char *)hx + (own0 + i) * k * 2, (size_t)k * 2);
    for (int64_t i = 128; i < 384; i++) /* the two inside tiles: 4.0 everywhere */
        for (int64_t j = 0; j < k; j++) hv_put(hpoison, CGM_DTYPE_BF16, (size_t)(i * k + j), 4.0f);
    void *dx = to_device(hpoison, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    void *down = to_device(hown, (size_t)(own * ldo) * 2), *dy;
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 4));
    unsigned long long hf[5] = {5, 0, 0, 5, 5}; /* 128-row blocks 1 and 2 never come */
    unsigned long long *df = to_device(hf, sizeof hf);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_FP32, a.variant = v;
        a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
        a.x_own = down, a.ldx_own = ldo, a.own_row0 = own0, a.own_rows = own;
        a.row_flags = df, a.rows_per_flag = 128, a.flag_epoch = 5;
        a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
        if (run_hooked(&a)) TEST_FAIL("%s: a tile inside the own rows waited for its flag", variant_name(v));
        float *hy = malloc((size_t)(m * n) * 4);
        GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * n) * 4, cudaMemcpyDeviceToHost));
        int64_t bad = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0;
                if ((double)hy[i * n + j] != want && bad++ < 4)
                    fprintf(stderr, "  %s (%lld, %lld) = %.7g, exact %.7g\n", variant_name(v), (long long)i,
                            (long long)j, hy[i * n + j], want);
            }
        free(hy);
        if (bad) TEST_FAIL("%s: %lld of %lld wrong", variant_name(v), (long long)bad, (long long)(m * n));
    }
    cudaFree(dx), cudaFree(dw), cudaFree(down), cudaFree(dy), cudaFree(df), cudaFree(dt);
    free(hx), free(hw), free(hown), free(hpoison), free(xq), free(wq);
}

/* The argument checks of the fused hooks: each bad field is refused with a
 * reason that names it, by cgm_hgemm_supported and by cgm_hgemm
 * (cudaErrorInvalidValue), before any device call, so this case runs
 * without a GPU too (the pointers are host memory and never read). */
static void case_hook_arguments(const void *p) {
    (void)p;
    static _Alignas(256) unsigned char buf[4096];
    cgm_hgemm_args good = args_64(buf);
    struct {
        const char *what, *reason;
        cgm_hgemm_args a;
    } bad[10];
    int n = 0;
    for (int i = 0; i < 10; i++) bad[i].a = good;
    bad[n].what = "naddends 8", bad[n].reason = "naddends must be 0..", bad[n++].a.naddends = 8;
    bad[n].what = "a NULL addend", bad[n].reason = "addend[i] must not be NULL", bad[n++].a.naddends = 1;
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf + 4, bad[n].a.addend_dtype = CGM_DTYPE_FP32, bad[n].a.addend_ld = 64;
    bad[n].what = "an fp32 addend 4-byte aligned", bad[n++].reason = "aligned to two elements";
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf, bad[n].a.addend_dtype = (cgm_dtype)7, bad[n].a.addend_ld = 64;
    bad[n].what = "addend dtype 7", bad[n++].reason = "addend_dtype must be fp32, bf16 or fp16";
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf, bad[n].a.addend_dtype = CGM_DTYPE_BF16, bad[n].a.addend_ld = 63;
    bad[n].what = "addend_ld 63 < n", bad[n++].reason = "addend_ld must be even, >= n";
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf, bad[n].a.addend_dtype = CGM_DTYPE_BF16, bad[n].a.addend_ld = 64;
    bad[n].a.addend_flags[0] = (const unsigned long long *)buf;
    bad[n].what = "addend flags without rows_per_flag", bad[n++].reason = "flags need rows_per_flag >= 1";
    bad[n].a.row_flags = (const unsigned long long *)buf, bad[n].a.rows_per_flag = 64, bad[n].a.timeout_out = (int *)buf;
    bad[n].a.flag_shard_rows = -1;
    bad[n].what = "flag_shard_rows -1", bad[n++].reason = "flag_shard_rows must be >= 0";
    bad[n].a.x_own = buf + 8, bad[n].a.ldx_own = 64, bad[n].a.own_rows = 10;
    bad[n].what = "x_own 8-byte aligned", bad[n++].reason = "x_own 16-byte aligned";
    bad[n].a.x_own = buf, bad[n].a.ldx_own = 64, bad[n].a.own_row0 = 60, bad[n].a.own_rows = 10;
    bad[n].what = "own rows past m", bad[n++].reason = "the own rows must lie in [0, m)";
    bad[n].a.notice_word = (const unsigned int *)buf, bad[n].a.timeout_out = (int *)buf;
    bad[n].what = "notice_word without abort_word", bad[n++].reason = "notice_word needs abort_word";
    for (int i = 0; i < n; i++) expect_refused(&bad[i].a, bad[i].what, bad[i].reason);
}

void hgemm_register_hook_cases(void) {
    test_add("flags_timeout", case_flags_timeout, NULL);
    test_add("addends_and_shard_flags", case_addends, NULL);
    test_add("addends_late", case_addends_late, NULL);
    test_add("addends_tma", case_addends_tma, NULL);
    test_add("x_own", case_x_own, NULL);
    test_add("hook_arguments", case_hook_arguments, NULL);
}
