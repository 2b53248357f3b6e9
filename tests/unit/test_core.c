/* Unit tests of the core: names, parsers, shards, dtype conversions,
 * parameters, bootstrap from the environment, errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "harness.h"

/* cgm_check_memory with the driver's answers faked: fake pointers
 * 0x1000 * kind (never read). */
static cgm_memory fake_memory(const void *p, int *device) {
    *device = -1;
    switch ((uintptr_t)p / 0x1000) {
    case 1: *device = 2; return CGM_MEMORY_DEVICE;
    case 2: return CGM_MEMORY_PINNED;
    case 3: return CGM_MEMORY_MANAGED;
    case 4: return CGM_MEMORY_HOST;
    default: return CGM_MEMORY_UNKNOWN;
    }
}

static void test_memory_checks(const void *p) {
    (void)p;
    cgm_memory_set_query(fake_memory);
    cgm_matrix dev = cgm_matrix_make((void *)0x1000, CGM_DTYPE_FP32, 2, 3);
    cgm_matrix pinned = dev, managed = dev, host = dev, unknown = dev, empty = dev;
    pinned.data = (void *)0x2000;
    managed.data = (void *)0x3000;
    host.data = (void *)0x4000;
    unknown.data = (void *)0x5000;
    empty.rows = 0;
    /* host backend: anything but GPU memory */
    CHECK_STATUS(cgm_check_memory("fn", "x", &dev, CGM_BACKEND_HOST, -1), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "fn: x.data = ");
    CHECK_CONTAINS(cgm_last_error(), "is memory of GPU 2, but this call's backend is host, which reads CPU memory");
    CHECK_CONTAINS(cgm_last_error(), "pass host memory");
    const cgm_matrix *fine_on_host[] = {&pinned, &managed, &host, &unknown, &empty, NULL};
    for (int i = 0; i < 6; i++) CHECK_OK(cgm_check_memory("fn", "x", fine_on_host[i], CGM_BACKEND_HOST, 0));
    /* GPU backends: device memory of the comm's GPU, or managed */
    CHECK_OK(cgm_check_memory("fn", "w", &dev, CGM_BACKEND_P2P, 2));
    CHECK_OK(cgm_check_memory("fn", "w", &dev, CGM_BACKEND_NCCL, -1)); /* the comm's GPU not known yet */
    CHECK_STATUS(cgm_check_memory("fn", "w", &dev, CGM_BACKEND_P2P, 0), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "is memory of GPU 2, but this comm's device is GPU 0: pass memory of GPU 0");
    CHECK_STATUS(cgm_check_memory("fn", "y", &pinned, CGM_BACKEND_NCCL, 1), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "y.data = ");
    CHECK_CONTAINS(cgm_last_error(), "is pinned host memory, but this call's backend is nccl, which needs device "
                                     "memory of the comm's GPU");
    CHECK_STATUS(cgm_check_memory("fn", "bias", &host, CGM_BACKEND_CUBLASMP, -1), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "is CPU memory the CUDA driver does not know, but this call's backend is "
                                     "cublasmp, which needs device memory: allocate it with cudaMalloc");
    const cgm_matrix *fine_on_gpu[] = {&managed, &unknown, &empty, NULL};
    for (int i = 0; i < 4; i++) CHECK_OK(cgm_check_memory("fn", "x", fine_on_gpu[i], CGM_BACKEND_P2P, 0));
    /* the driver itself: this process has not loaded it (no GPU code
     * here), or it does not know a stack address */
    cgm_memory_set_query(NULL);
    int device = 7;
    cgm_memory where = cgm_memory_of(&device, &device);
    CHECK(where == CGM_MEMORY_UNKNOWN || where == CGM_MEMORY_HOST);
    CHECK_INT_EQ(device, -1);
}

/* cgm_matrix_overlap against marking every byte, on random small matrices
 * in one buffer (both dtypes' sizes, equal and unequal strides). */
static void test_matrix_overlap(const void *p) {
    (void)p;
    static unsigned char arena[4096];
    unsigned seed = 12345;
    int exact = 0, refused_disjoint = 0;
    for (int it = 0; it < 20000; it++) {
        cgm_matrix m[2];
        for (int q = 0; q < 2; q++) {
            seed = seed * 1103515245u + 12345u;
            cgm_dtype dt = (seed >> 8) % 2 ? CGM_DTYPE_FP32 : CGM_DTYPE_BF16;
            int64_t es = (int64_t)cgm_dtype_size(dt);
            int64_t rows = 1 + (seed >> 12) % 5, cols = 1 + (seed >> 16) % 6;
            int64_t ld = cols + (seed >> 20) % 5;
            if (q == 1 && (seed >> 24) % 2) { /* the other's stride in bytes, where it divides */
                int64_t lb = cgm_matrix_ld(&m[0]) * (int64_t)cgm_dtype_size(m[0].dtype);
                if (lb % es == 0 && lb / es >= cols) ld = lb / es;
            }
            seed = seed * 1103515245u + 12345u;
            int64_t off = (int64_t)((seed >> 8) % 200) * 2; /* even: bf16-aligned */
            m[q] = (cgm_matrix){arena + off, dt, rows, cols, ld, NULL, CGM_SCALING_NONE};
        }
        static unsigned char mark[4096];
        memset(mark, 0, sizeof mark);
        bool truth = false;
        for (int q = 0; q < 2; q++) {
            int64_t es = (int64_t)cgm_dtype_size(m[q].dtype);
            for (int64_t i = 0; i < m[q].rows; i++)
                for (int64_t b = 0; b < m[q].cols * es; b++) {
                    size_t at = (size_t)((unsigned char *)m[q].data - arena + (i * m[q].ld) * es + b);
                    if (q == 0) mark[at] = 1;
                    else if (mark[at]) truth = true;
                }
        }
        bool got = cgm_matrix_overlap(&m[0], &m[1]);
        int64_t sa = m[0].rows > 1 ? m[0].ld * (int64_t)cgm_dtype_size(m[0].dtype) : -1;
        int64_t sb = m[1].rows > 1 ? m[1].ld * (int64_t)cgm_dtype_size(m[1].dtype) : -1;
        bool same_stride = sa < 0 || sb < 0 || sa == sb;
        if (truth) CHECK(got); /* never misses a shared byte */
        if (same_stride) {
            exact++;
            if (got != truth)
                TEST_FAIL("iteration %d: overlap %d, expected %d (equal strides)", it, got, truth);
        } else if (got && !truth) {
            refused_disjoint++;
        }
    }
    CHECK(exact > 2000);
    printf("matrix_overlap: %d equal-stride cases exact, %d disjoint interleavings refused\n", exact,
           refused_disjoint);
}

static void test_version(const void *p) {
    (void)p;
    CHECK_INT_EQ(cgm_version(), COMMGEMM_VERSION);
    CHECK_INT_EQ(COMMGEMM_VERSION, COMMGEMM_VERSION_MAJOR * 10000 + COMMGEMM_VERSION_MINOR * 100 +
                                       COMMGEMM_VERSION_PATCH);
}

static void test_status_strings(const void *p) {
    (void)p;
    for (int s = 0; s <= CGM_ERROR_INTERNAL; s++) {
        const char *str = cgm_status_string((cgm_status)s);
        CHECK(str && *str);
        CHECK(strcmp(str, "unknown status") != 0);
    }
    CHECK_CONTAINS(cgm_status_string((cgm_status)999), "unknown");
    CHECK_CONTAINS(cgm_status_string(CGM_ERROR_TIMEOUT), "destroy");
}

static void test_last_error_per_thread(const void *p) {
    (void)p;
    CHECK(strcmp(cgm_last_error(), "") == 0);
    CHECK_STATUS(cgm_error(CGM_ERROR_INVALID_ARGUMENT, "expected %d, found %d", 1, 2), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "expected 1, found 2");
    cgm_error_context(CGM_ERROR_INVALID_ARGUMENT, "while doing %s", "x");
    CHECK_CONTAINS(cgm_last_error(), "while doing x: expected 1");
}

static void test_names_roundtrip(const void *p) {
    (void)p;
    for (int b = 0; b < CGM_BACKEND_COUNT_; b++) {
        cgm_backend out;
        CHECK_OK(cgm_backend_from_name(cgm_backend_name((cgm_backend)b), &out));
        CHECK_INT_EQ(out, b);
    }
    for (int a = 0; a < CGM_ALGO_COUNT_; a++) {
        cgm_algo out;
        CHECK_OK(cgm_algo_from_name(cgm_algo_name((cgm_algo)a), &out));
        CHECK_INT_EQ(out, a);
    }
    cgm_algo algo;
    CHECK_OK(cgm_algo_from_name("split_pipelined", &algo));
    CHECK_INT_EQ(algo, CGM_ALGO_SPLIT_PIPELINED);
    cgm_backend b;
    CHECK_STATUS(cgm_backend_from_name("gloo", &b), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "gloo");
    CHECK_STATUS(cgm_algo_from_name(NULL, &algo), CGM_ERROR_INVALID_ARGUMENT);
    CHECK(strcmp(cgm_dtype_name((cgm_dtype)77), "invalid") == 0);
    CHECK(strcmp(cgm_layout_name(CGM_LAYOUT_NT), "NT") == 0);
    CHECK(strcmp(cgm_op_name(CGM_OP_GEMM_REDUCE_SCATTER), "gemm_rs") == 0);
    CHECK_INT_EQ(cgm_dtype_size(CGM_DTYPE_BF16), 2);
    CHECK_INT_EQ(cgm_dtype_size((cgm_dtype)-1), 0);
}

static void test_shards(const void *p) {
    (void)p;
    for (int P = 1; P <= 17; P++)
        for (int64_t m = 0; m <= 70; m++) {
            int64_t sum = 0, block = m ? (m + P - 1) / P : 0;
            for (int r = 0; r < P; r++) {
                int64_t rows = cgm_shard_rows(m, r, P);
                CHECK(rows >= 0 && rows <= block);
                CHECK_INT_EQ(cgm_shard_offset(m, r, P), sum < m ? sum : m);
                /* ceil split: full shards first, then at most one partial one */
                if (r > 0 && rows > 0) CHECK_INT_EQ(cgm_shard_rows(m, r - 1, P), block);
                sum += rows;
            }
            CHECK_INT_EQ(sum, m);
        }
    CHECK_INT_EQ(cgm_shard_rows(5, 0, 4), 2);
    CHECK_INT_EQ(cgm_shard_rows(5, 2, 4), 1);
    CHECK_INT_EQ(cgm_shard_rows(5, 3, 4), 0);
    CHECK_INT_EQ(cgm_shard_rows(1, 0, 8), 1);
    CHECK_INT_EQ(cgm_shard_rows(10, 8, 8), 0); /* out of range */
    CHECK_INT_EQ(cgm_shard_rows(10, -1, 8), 0);
}

/* The ceil split for m near INT64_MAX, against 128-bit arithmetic: no
 * shard wraps negative, the shards tile [0, m). */
static void check_shard_wide(int64_t m, int r, int P) {
    __int128 block = ((__int128)m + P - 1) / P, begin = block * r, end = begin + block;
    if (begin > m) begin = m;
    if (end > m) end = m;
    if (cgm_shard_offset(m, r, P) != (int64_t)begin || cgm_shard_rows(m, r, P) != (int64_t)(end - begin))
        TEST_FAIL("m = %lld, rank %d of %d: offset %lld rows %lld, expected offset %lld rows %lld", (long long)m, r,
                  P, (long long)cgm_shard_offset(m, r, P), (long long)cgm_shard_rows(m, r, P), (long long)begin,
                  (long long)(end - begin));
}

static void test_shards_near_int64_max(const void *p) {
    (void)p;
    const int64_t ms[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX - 1023, ((int64_t)1 << 62) + 3, (int64_t)1 << 62};
    const int Ps[] = {1, 2, 3, 7, 1024, INT32_MAX};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        for (size_t j = 0; j < sizeof Ps / sizeof Ps[0]; j++) {
            int P = Ps[j];
            int64_t sum = 0;
            if (P <= 1024) {
                for (int r = 0; r < P; r++) {
                    check_shard_wide(ms[i], r, P);
                    CHECK(cgm_shard_rows(ms[i], r, P) >= 0);
                    sum += cgm_shard_rows(ms[i], r, P);
                }
                CHECK_INT_EQ(sum, ms[i]);
            } else {
                const int ranks[] = {0, 1, P / 2, P - 2, P - 1};
                for (size_t q = 0; q < sizeof ranks / sizeof ranks[0]; q++) check_shard_wide(ms[i], ranks[q], P);
            }
            CHECK_INT_EQ(cgm_shard_offset(ms[i], P, P), ms[i]);
        }
    /* INT64_MAX = 3 x 7 x 7 x 73 x 127 x 337 x 92737 x 649657: P = 7 divides it. */
    CHECK_INT_EQ(cgm_shard_rows(INT64_MAX, 6, 7), INT64_MAX / 7);
    CHECK_INT_EQ(cgm_shard_rows(INT64_MAX, 0, 1), INT64_MAX);
    CHECK_INT_EQ(cgm_shard_rows(INT64_MAX, 1023, 1024), INT64_MAX - 1023 * (INT64_MAX / 1024 + 1));
}

static void test_bf16_exhaustive(const void *p) {
    (void)p;
    for (uint32_t v = 0; v < 65536; v++) {
        float f = cgm_bf16_to_float((uint16_t)v);
        if (isnan(f)) {
            CHECK(isnan(cgm_bf16_to_float(cgm_float_to_bf16(f))));
            continue;
        }
        CHECK_INT_EQ(cgm_float_to_bf16(f), v);
    }
    /* round to nearest even */
    CHECK_INT_EQ(cgm_float_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* tie -> even */
    CHECK_INT_EQ(cgm_float_to_bf16(1.0f + 3.0f / 256), 0x3f82); /* tie -> even (up) */
    CHECK_NEAR(cgm_bf16_to_float(cgm_float_to_bf16(3.14159f)), 3.140625, 0);
}

static void test_fp16_exhaustive(const void *p) {
    (void)p;
    for (uint32_t v = 0; v < 65536; v++) {
        float f = cgm_fp16_to_float((uint16_t)v);
        if (isnan(f)) {
            CHECK(isnan(cgm_fp16_to_float(cgm_float_to_fp16(f))));
            continue;
        }
        CHECK_INT_EQ(cgm_float_to_fp16(f), v);
    }
    CHECK_NEAR(cgm_fp16_to_float(cgm_float_to_fp16(65504.0f)), 65504.0, 0);
    CHECK(isinf(cgm_fp16_to_float(cgm_float_to_fp16(70000.0f))));
    CHECK_INT_EQ(cgm_float_to_fp16(1.0f + 1.0f / 2048), 0x3c00); /* tie -> even */
    CHECK_INT_EQ(cgm_float_to_fp16(5.9604645e-08f), 0x0001);     /* smallest subnormal */
    CHECK_NEAR(cgm_fp16_to_float(0x0001), 5.9604645e-08, 1e-15);
}

/* The code a float rounds to, by search: the nearest finite code's value,
 * ties to the code with an even mantissa, saturating beyond the largest
 * finite value; NaN to 0x7f with the sign. */
static int fp8_nearest(float x, cgm_dtype dtype) {
    double max = dtype == CGM_DTYPE_FP8_E5M2 ? 57344 : 448;
    int sign = signbit(x) ? 0x80 : 0;
    if (isnan(x)) return sign | 0x7f;
    double a = fabs((double)x);
    if (a > max) a = max;
    int best = -1;
    double best_d = INFINITY;
    for (int c = 0; c < 0x80; c++) {
        double v = test_fp8_value(c, dtype);
        if (!isfinite(v)) continue;
        double d = fabs(v - a);
        if (d < best_d || (d == best_d && (c & 1) == 0)) best = c, best_d = d;
    }
    return sign | best;
}

static void test_fp8_codes(const void *p) {
    (void)p;
    const cgm_dtype dtypes[] = {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E5M2};
    for (int d = 0; d < 2; d++) {
        cgm_dtype dt = dtypes[d];
        for (int c = 0; c < 256; c++) {
            double want = test_fp8_value(c, dt);
            float got = cgm_fp8_to_float((uint8_t)c, dt);
            if (isnan(want)) {
                CHECK(isnan(got));
                CHECK_INT_EQ(cgm_float_to_fp8(got, dt) & 0x7f, 0x7f);
                continue;
            }
            if (!(got == want)) TEST_FAIL("%s code 0x%02x decodes as %.9g, expected %.9g", cgm_dtype_name(dt), c, got, want);
            CHECK_INT_EQ(signbit(got) != 0, (c & 0x80) != 0); /* -0 too */
            uint8_t back = cgm_float_to_fp8(got, dt);
            /* every finite code round-trips; an infinity saturates */
            if (isinf(want)) CHECK_INT_EQ(back, (c & 0x80) | 0x7b);
            else CHECK_INT_EQ(back, c);
            float load = cgm_load_float(&back, dt, 0);
            uint8_t stored = 0;
            cgm_store_float(&stored, dt, 0, got);
            CHECK(isinf(want) ? stored == back : load == got && stored == c);
        }
        /* Between consecutive codes: the midpoints (ties to even) and
         * either side of them, and the values beyond the largest. */
        for (int c = 0; c < 0x7f; c++) {
            double lo = test_fp8_value(c, dt), hi = test_fp8_value(c + 1, dt);
            if (!isfinite(lo) || !isfinite(hi)) continue;
            float probes[] = {(float)((lo + hi) / 2), nextafterf((float)((lo + hi) / 2), 0.0f),
                              nextafterf((float)((lo + hi) / 2), INFINITY), (float)(lo + (hi - lo) / 4)};
            for (int i = 0; i < 4; i++)
                for (int sgn = 0; sgn < 2; sgn++) {
                    float x = sgn ? -probes[i] : probes[i];
                    if (cgm_float_to_fp8(x, dt) != fp8_nearest(x, dt))
                        TEST_FAIL("%s: %.9g encodes as 0x%02x, expected 0x%02x", cgm_dtype_name(dt), x,
                                  cgm_float_to_fp8(x, dt), fp8_nearest(x, dt));
                }
        }
        float max = dt == CGM_DTYPE_FP8_E5M2 ? 57344.0f : 448.0f;
        uint8_t max_code = dt == CGM_DTYPE_FP8_E5M2 ? 0x7b : 0x7e;
        const float beyond[] = {max * 1.03f, max * 1.2f, 1e30f, INFINITY};
        for (int i = 0; i < 4; i++) {
            CHECK_INT_EQ(cgm_float_to_fp8(beyond[i], dt), max_code);
            CHECK_INT_EQ(cgm_float_to_fp8(-beyond[i], dt), 0x80 | max_code);
        }
        CHECK_INT_EQ(cgm_float_to_fp8(NAN, dt) & 0x7f, 0x7f);
        CHECK_INT_EQ(cgm_float_to_fp8(1e-30f, dt), 0x00);
        CHECK_INT_EQ(cgm_float_to_fp8(-1e-30f, dt), 0x80);
        CHECK_INT_EQ(cgm_dtype_size(dt), 1);
    }
    /* a few by hand: e4m3 1.0 = 0x38, 448 = 0x7e, smallest subnormal
     * 2^-9 = 0x01; 1 + 1/16 ties to 1.0 (even), 1 + 3/16 to 1.25 */
    CHECK_INT_EQ(cgm_float_to_fp8(1.0f, CGM_DTYPE_FP8_E4M3), 0x38);
    CHECK_INT_EQ(cgm_float_to_fp8(1.0625f, CGM_DTYPE_FP8_E4M3), 0x38);
    CHECK_INT_EQ(cgm_float_to_fp8(1.1875f, CGM_DTYPE_FP8_E4M3), 0x3a);
    CHECK_INT_EQ(cgm_float_to_fp8(ldexpf(1, -9), CGM_DTYPE_FP8_E4M3), 0x01);
    CHECK_INT_EQ(cgm_float_to_fp8(ldexpf(1, -10), CGM_DTYPE_FP8_E4M3), 0x00); /* tie -> 0 */
    CHECK_INT_EQ(cgm_float_to_fp8(464.0f, CGM_DTYPE_FP8_E4M3), 0x7e);
    CHECK_INT_EQ(cgm_float_to_fp8(1.0f, CGM_DTYPE_FP8_E5M2), 0x3c);
    CHECK(cgm_fp8_to_float(0x7c, CGM_DTYPE_FP8_E5M2) == INFINITY);
    CHECK(cgm_fp8_to_float(0x7e, CGM_DTYPE_FP8_E4M3) == 448.0f);
}

/* The fp8 helpers of the validation: the scales' shape per recipe, the
 * copy that reads `scaling` only for fp8, a GPU backend's refusal. */
static void test_fp8_helpers(const void *p) {
    (void)p;
    static const float sc[4] = {1, 2, 3, 4};
    cgm_matrix x = cgm_matrix_make((void *)0x100, CGM_DTYPE_FP8_E4M3, 300, 257);
    x.scale = sc;
    const struct { cgm_scaling s; int64_t rows, cols; } shapes[] = {
        {CGM_SCALING_TENSOR, 1, 1}, {CGM_SCALING_BLOCK_1X128, 300, 3}, {CGM_SCALING_BLOCK_128X128, 3, 3}};
    for (int i = 0; i < 3; i++) {
        x.scaling = shapes[i].s;
        cgm_matrix m = cgm_scale_matrix(&x);
        CHECK(m.data == (void *)sc && m.dtype == CGM_DTYPE_FP32);
        CHECK_INT_EQ(m.rows, shapes[i].rows);
        CHECK_INT_EQ(m.cols, shapes[i].cols);
        CHECK_INT_EQ(cgm_matrix_take(&x).scaling, shapes[i].s);
    }
    cgm_matrix bf = cgm_matrix_make((void *)0x100, CGM_DTYPE_BF16, 4, 4);
    bf.scaling = (cgm_scaling)0x7f7f7f7f; /* what an older program's padding may hold */
    CHECK_INT_EQ(cgm_matrix_take(&bf).scaling, CGM_SCALING_NONE);
    CHECK_INT_EQ(cgm_scale_matrix(&bf).rows, 0);
    CHECK(strcmp(cgm_scaling_name(CGM_SCALING_BLOCK_128X128), "block_128x128") == 0);
    CHECK(strcmp(cgm_scaling_name((cgm_scaling)9), "invalid") == 0);
    /* scale pointers are checked like data pointers */
    cgm_memory_set_query(fake_memory);
    CHECK_STATUS(cgm_check_pointer("fn", "w.scale", (void *)0x1000, CGM_BACKEND_HOST, -1),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "fn: w.scale = ");
    CHECK_CONTAINS(cgm_last_error(), "is memory of GPU 2, but this call's backend is host");
    CHECK_STATUS(cgm_check_pointer("fn", "options.y_amax", (void *)0x4000, CGM_BACKEND_P2P, 0),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "fn: options.y_amax = ");
    CHECK_OK(cgm_check_pointer("fn", "x.scale", (void *)0x1000, CGM_BACKEND_P2P, 2));
    cgm_memory_set_query(NULL);
}

static void test_param_defaults_and_env(const void *p) {
    (void)p;
    setenv("COMMGEMM_MAX_M", "4096", 1);
    setenv("COMMGEMM_SPLITS", "banana", 1);
    int64_t v;
    bool from_env;
    CHECK_OK(cgm_param_int("COMMGEMM_MAX_M", &v, &from_env));
    CHECK_INT_EQ(v, 4096);
    CHECK(from_env);
    CHECK_OK(cgm_param_int("COMMGEMM_MAX_N", &v, &from_env));
    CHECK_INT_EQ(v, 16384);
    CHECK(!from_env);
    CHECK_STATUS(cgm_param_int("COMMGEMM_SPLITS", &v, &from_env), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_SPLITS=\"banana\"");
    CHECK_STATUS(cgm_param_int("COMMGEMM_NO_SUCH", &v, &from_env), CGM_ERROR_INTERNAL);
    int count = 0;
    const cgm_param *t = cgm_param_table(&count);
    CHECK(count > 10);
    /* Few, real knobs, each said in at most two lines of docs/env.md. */
    int settings = 0;
    for (int i = 0; i < count; i++) {
        CHECK(strncmp(t[i].name, "COMMGEMM_", 9) == 0);
        CHECK(t[i].help && strlen(t[i].help) > 10);
        if (strlen(t[i].help) > CGM_PARAM_HELP_MAX)
            TEST_FAIL("%s: help of %zu characters, at most %d", t[i].name, strlen(t[i].help), CGM_PARAM_HELP_MAX);
        settings += t[i].section == CGM_PARAM_SETTING;
    }
    CHECK(settings <= 25);
}

/* Precision: the config field, else the environment variable, else the
 * default (fp32 partials, any reduction) resolved once per comm; each
 * call's option, else the comm's, resolved into the normalized call (the
 * partial dtype as the dtype sent: a bf16/fp16 output's for OUTPUT, fp32
 * otherwise and for AG+GEMM). Each case runs in its own process, so the
 * variables are read fresh. */
typedef struct precision_case {
    const char *env_partial, *env_reduction;
    cgm_partial_dtype config_partial;
    cgm_gemm_reduction config_reduction;
    cgm_partial_dtype comm_partial;      /* expected */
    cgm_gemm_reduction comm_reduction;   /* expected */
} precision_case;

static const precision_case precision_default = {NULL, NULL, CGM_PARTIAL_DTYPE_DEFAULT, CGM_GEMM_REDUCTION_DEFAULT,
                                                 CGM_PARTIAL_DTYPE_FP32, CGM_GEMM_REDUCTION_ANY};
static const precision_case precision_env = {"output", "fp32", CGM_PARTIAL_DTYPE_DEFAULT, CGM_GEMM_REDUCTION_DEFAULT,
                                             CGM_PARTIAL_DTYPE_OUTPUT, CGM_GEMM_REDUCTION_FP32};
static const precision_case precision_config = {"output", "fp32", CGM_PARTIAL_DTYPE_FP32, CGM_GEMM_REDUCTION_ANY,
                                                CGM_PARTIAL_DTYPE_FP32, CGM_GEMM_REDUCTION_ANY};
static const precision_case precision_config_only = {NULL, NULL, CGM_PARTIAL_DTYPE_OUTPUT, CGM_GEMM_REDUCTION_FP32,
                                                     CGM_PARTIAL_DTYPE_OUTPUT, CGM_GEMM_REDUCTION_FP32};

static void test_precision(const void *p) {
    const precision_case *pc = p;
    if (pc->env_partial) setenv("COMMGEMM_PARTIAL_DTYPE", pc->env_partial, 1);
    else unsetenv("COMMGEMM_PARTIAL_DTYPE");
    if (pc->env_reduction) setenv("COMMGEMM_GEMM_REDUCTION", pc->env_reduction, 1);
    else unsetenv("COMMGEMM_GEMM_REDUCTION");
    cgm_config cfg = CGM_CONFIG_INIT;
    cfg.partial_dtype = pc->config_partial;
    cfg.gemm_reduction = pc->config_reduction;
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("precision", name, sizeof name);
    cgm_comm *comm = NULL;
    CHECK_OK(cgm_comm_create(&b, &cfg, &comm));
    cgm_partial_dtype partial = CGM_PARTIAL_DTYPE_DEFAULT;
    cgm_gemm_reduction reduction = CGM_GEMM_REDUCTION_DEFAULT;
    CHECK_OK(cgm_comm_precision(comm, &partial, &reduction));
    CHECK_INT_EQ(partial, pc->comm_partial);
    CHECK_INT_EQ(reduction, pc->comm_reduction);
    CHECK_OK(cgm_comm_precision(comm, NULL, &reduction));
    CHECK_STATUS(cgm_comm_precision(comm, NULL, NULL), CGM_ERROR_INVALID_ARGUMENT);

    enum { M = 4, K = 3, N = 2 };
    static uint16_t x16[M * K], w16[N * K], y16[M * N];
    static float y32[M * N];
    cgm_matrix x = cgm_matrix_make(x16, CGM_DTYPE_BF16, M, K), w = cgm_matrix_make(w16, CGM_DTYPE_BF16, N, K);
    const cgm_op ops[] = {CGM_OP_GEMM_REDUCE_SCATTER, CGM_OP_GEMM_ALL_REDUCE, CGM_OP_ALL_GATHER_GEMM};
    for (int o = 0; o < 3; o++)
        for (int out = 0; out < 2; out++)
            for (int op_partial = 0; op_partial < CGM_PARTIAL_DTYPE_COUNT_; op_partial++)
                for (int op_reduction = 0; op_reduction < CGM_GEMM_REDUCTION_COUNT_; op_reduction++) {
                    cgm_matrix y = out ? cgm_matrix_make(y32, CGM_DTYPE_FP32, M, N)
                                       : cgm_matrix_make(y16, CGM_DTYPE_BF16, M, N);
                    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
                    opt.partial_dtype = (cgm_partial_dtype)op_partial;
                    opt.gemm_reduction = (cgm_gemm_reduction)op_reduction;
                    cgm_call call;
                    CHECK_OK(cgm_validate_op(comm, ops[o], &x, &w, NULL, &y, NULL, CGM_COLLECTIVE_ALL_GATHER, NULL,
                                             NULL, &opt, NULL, &call));
                    cgm_partial_dtype want_partial = op_partial ? (cgm_partial_dtype)op_partial : pc->comm_partial;
                    cgm_gemm_reduction want_reduction =
                        op_reduction ? (cgm_gemm_reduction)op_reduction : pc->comm_reduction;
                    bool sent_in_output = want_partial == CGM_PARTIAL_DTYPE_OUTPUT && !out &&
                                          ops[o] != CGM_OP_ALL_GATHER_GEMM;
                    CHECK_INT_EQ(call.partial_dtype, sent_in_output ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32);
                    CHECK_INT_EQ(call.gemm_reduction_fp32, want_reduction == CGM_GEMM_REDUCTION_FP32);
                }
    CHECK_OK(cgm_comm_destroy(comm));
}

/* m above the comm's max_m (8). The host backend's call is refused here,
 * saying m, before the shape and overlap checks. A p2p or nccl call is
 * left to the backend, which refuses it after its agreement exchange, so
 * that one rank's call beyond max_m is a mismatch every rank reports at
 * once: validation passes it with its m, skipping what follows from m
 * (the other operand's rows, overlaps), and checks those at m <= max_m. */
static cgm_memory memory_unknown(const void *p, int *device) {
    (void)p;
    *device = -1;
    return CGM_MEMORY_UNKNOWN; /* CPU buffers on a GPU backend: not refused */
}

static void test_max_m_left_to_backend(const void *p) {
    (void)p;
    cgm_memory_set_query(memory_unknown);
    cgm_config cfg = CGM_CONFIG_INIT;
    cfg.max_m = 8;
    char name[64];
    cgm_bootstrap b = test_local_bootstrap("max_m_left", name, sizeof name);
    cgm_comm *comm = NULL;
    CHECK_OK(cgm_comm_create(&b, &cfg, &comm));
    enum { K = 3, N = 2, TALL = 9 };
    static float buf[TALL * K], wbuf[N * K];
    const cgm_backend backends[] = {CGM_BACKEND_HOST, CGM_BACKEND_P2P, CGM_BACKEND_NCCL};
    for (int bi = 0; bi < 3; bi++)
        for (int op = 0; op < CGM_OP_COUNT_; op++)
            for (int rows_right = 0; rows_right < 2; rows_right++)
                for (int64_t m = 8; m <= TALL; m++) {
                    /* One buffer for the operand that sets m and the one
                     * whose rows follow from it: they overlap; those rows
                     * are m (right, P = 1) or 1. */
                    int64_t rows = rows_right ? m : 1;
                    cgm_matrix full = cgm_matrix_make(buf, CGM_DTYPE_FP32, m, K);
                    cgm_matrix part = cgm_matrix_make(buf, CGM_DTYPE_FP32, rows, /* x_shard, send: [rows, k] */
                                                       op == CGM_OP_BULK || op == CGM_OP_ALL_GATHER_GEMM ? K : N);
                    cgm_matrix w = cgm_matrix_make(wbuf, CGM_DTYPE_FP32, N, K);
                    cgm_matrix y = cgm_matrix_make(buf, CGM_DTYPE_FP32, m, N);
                    cgm_op_options opt = CGM_OP_OPTIONS_INIT;
                    opt.backend = backends[bi];
                    cgm_call call;
                    cgm_status st;
                    if (op == CGM_OP_BULK)
                        st = cgm_validate_op(comm, CGM_OP_BULK, NULL, NULL, NULL, NULL, NULL,
                                             CGM_COLLECTIVE_ALL_GATHER, &part, &full, &opt, NULL, &call);
                    else if (op == CGM_OP_ALL_GATHER_GEMM)
                        st = cgm_validate_op(comm, CGM_OP_ALL_GATHER_GEMM, &part, &w, NULL, &y, NULL,
                                             CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &opt, NULL, &call);
                    else
                        st = cgm_validate_op(comm, (cgm_op)op, &full, &w, NULL, &part, NULL,
                                             CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &opt, NULL, &call);
                    if (m <= cfg.max_m) {
                        CHECK_STATUS(st, CGM_ERROR_INVALID_ARGUMENT);
                        CHECK_CONTAINS(cgm_last_error(), rows_right ? "overlaps" : "is 1 x ");
                    } else if (backends[bi] == CGM_BACKEND_HOST) {
                        CHECK_STATUS(st, CGM_ERROR_INVALID_ARGUMENT);
                        CHECK_CONTAINS(cgm_last_error(), "= 9 is above the comm's max_m = 8");
                    } else {
                        CHECK_OK(st);
                        CHECK_INT_EQ(call.backend, backends[bi]);
                        CHECK_INT_EQ(op == CGM_OP_BULK ? call.coll_m : call.m, TALL);
                    }
                }
    cgm_memory_set_query(NULL);
    CHECK_OK(cgm_comm_destroy(comm));
}

/* Names and parsers of the two enums, both ways. */
static void test_precision_names(const void *p) {
    (void)p;
    for (int i = 0; i < CGM_PARTIAL_DTYPE_COUNT_; i++) {
        cgm_partial_dtype v = CGM_PARTIAL_DTYPE_COUNT_;
        CHECK_OK(cgm_partial_dtype_from_name(cgm_partial_dtype_name((cgm_partial_dtype)i), &v));
        CHECK_INT_EQ(v, i);
    }
    for (int i = 0; i < CGM_GEMM_REDUCTION_COUNT_; i++) {
        cgm_gemm_reduction v = CGM_GEMM_REDUCTION_COUNT_;
        CHECK_OK(cgm_gemm_reduction_from_name(cgm_gemm_reduction_name((cgm_gemm_reduction)i), &v));
        CHECK_INT_EQ(v, i);
    }
    cgm_partial_dtype pd;
    CHECK_OK(cgm_partial_dtype_from_name("OUTPUT", &pd));
    CHECK_INT_EQ(pd, CGM_PARTIAL_DTYPE_OUTPUT);
    CHECK(strcmp(cgm_partial_dtype_name((cgm_partial_dtype)9), "invalid") == 0);
    CHECK(strcmp(cgm_gemm_reduction_name((cgm_gemm_reduction)-1), "invalid") == 0);
    CHECK_STATUS(cgm_partial_dtype_from_name("bf16", &pd), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "unknown partial dtype \"bf16\": expected one of default, fp32, output");
    cgm_gemm_reduction gr;
    CHECK_STATUS(cgm_gemm_reduction_from_name("fp16", &gr), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "unknown GEMM reduction \"fp16\": expected one of default, any, fp32");
    CHECK_STATUS(cgm_gemm_reduction_from_name(NULL, &gr), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cgm_gemm_reduction_from_name("any", NULL), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cgm_partial_dtype_from_name("fp32", NULL), CGM_ERROR_INVALID_ARGUMENT);
}

/* The epilogues' names and parser, both ways. */
static void test_epilogue_names(const void *p) {
    (void)p;
    static const char *want[] = {"none", "gelu", "gelu_aux", "dgelu", "dgelu_bgrad", "bgrad"};
    for (int i = 0; i < CGM_EPILOGUE_COUNT_; i++) {
        cgm_epilogue v = CGM_EPILOGUE_COUNT_;
        CHECK(strcmp(cgm_epilogue_name((cgm_epilogue)i), want[i]) == 0);
        CHECK_OK(cgm_epilogue_from_name(want[i], &v));
        CHECK_INT_EQ(v, i);
    }
    cgm_epilogue e = CGM_EPILOGUE_NONE;
    CHECK_OK(cgm_epilogue_from_name("DGELU_BGRAD", &e));
    CHECK_INT_EQ(e, CGM_EPILOGUE_DGELU_BGRAD);
    CHECK(strcmp(cgm_epilogue_name(CGM_EPILOGUE_COUNT_), "invalid") == 0);
    CHECK(strcmp(cgm_epilogue_name((cgm_epilogue)-1), "invalid") == 0);
    CHECK_STATUS(cgm_epilogue_from_name("relu", &e), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(),
                   "unknown epilogue \"relu\": expected one of none, gelu, gelu_aux, dgelu, dgelu_bgrad, bgrad");
    CHECK_INT_EQ(e, CGM_EPILOGUE_DGELU_BGRAD);
    CHECK_STATUS(cgm_epilogue_from_name(NULL, &e), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_STATUS(cgm_epilogue_from_name("gelu", NULL), CGM_ERROR_INVALID_ARGUMENT);
}

/* A word parameter (cgm_param_choice), with the words of
 * COMMGEMM_CUBLASMP_ALGO: unset is the default, the first word. */
static const char *const algo_words[] = {"split_p2p", "atomic_p2p", "no_overlap"};

static void test_param_choice(const void *p) {
    const char *value = p;
    if (value) setenv("COMMGEMM_CUBLASMP_ALGO", value, 1);
    else unsetenv("COMMGEMM_CUBLASMP_ALGO");
    int which = -1;
    CHECK_OK(cgm_param_choice("COMMGEMM_CUBLASMP_ALGO", algo_words, 3, &which));
    CHECK_INT_EQ(which, value ? 2 : 0);
}

static void test_param_choice_bad(const void *p) {
    (void)p;
    setenv("COMMGEMM_CUBLASMP_ALGO", "fast", 1);
    int which = 7;
    CHECK_STATUS(cgm_param_choice("COMMGEMM_CUBLASMP_ALGO", algo_words, 3, &which),
                 CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_CUBLASMP_ALGO=\"fast\"");
    CHECK_CONTAINS(cgm_last_error(), "expected split_p2p, atomic_p2p or no_overlap");
    CHECK_CONTAINS(cgm_last_error(), "(default split_p2p)");
    CHECK_INT_EQ(which, 7); /* untouched */
}

/* Word parameters as the GPU backends read them (parameters are read once
 * per process: one value per case). value NULL: unset, the first word;
 * index -1: a word that is refused with the variable, the value, the
 * choices and the default. */
typedef struct choice_case {
    const char *name; /* the test case */
    const char *var;
    const char *choices[3];
    int count;
    const char *value;
    int index;
    const char *expected; /* the message's list of choices */
} choice_case;

#define REDUCTION "COMMGEMM_GEMM_REDUCTION", {"any", "fp32"}, 2
static const choice_case choice_cases[] = {
    {"param_choice_lt_reduction_default", REDUCTION, NULL, 0, NULL},
    {"param_choice_lt_reduction_fp32", REDUCTION, "fp32", 1, NULL},
    {"param_choice_lt_reduction_bad", REDUCTION, "fp16", -1, "expected any or fp32"},
};
#undef REDUCTION

static void test_param_choice_case(const void *p) {
    const choice_case *c = p;
    if (c->value) setenv(c->var, c->value, 1);
    else unsetenv(c->var);
    int which = 5;
    cgm_status st = cgm_param_choice(c->var, c->choices, c->count, &which);
    if (c->index >= 0) {
        CHECK_OK(st);
        CHECK_INT_EQ(which, c->index);
        return;
    }
    char want[96];
    CHECK_INT_EQ(st, CGM_ERROR_INVALID_ARGUMENT);
    snprintf(want, sizeof want, "%s=\"%s\"", c->var, c->value);
    CHECK_CONTAINS(cgm_last_error(), want);
    CHECK_CONTAINS(cgm_last_error(), c->expected);
    snprintf(want, sizeof want, "(default %s)", c->choices[0]);
    CHECK_CONTAINS(cgm_last_error(), want);
    CHECK_INT_EQ(which, 5); /* untouched */
}

/* An integer parameter with a range (cgm_param_int_range), as the GPU
 * backends read COMMGEMM_LT_SEARCH: unset is the default; in range is
 * taken; out of range or not a number is refused naming the variable, the
 * value, the range and the default. */
static void test_param_int_range(const void *p) {
    const char *value = p;
    if (value) setenv("COMMGEMM_LT_SEARCH", value, 1);
    else unsetenv("COMMGEMM_LT_SEARCH");
    int64_t v = -5;
    cgm_status st = cgm_param_int_range("COMMGEMM_LT_SEARCH", 1, 16,
                                        "algorithms", &v);
    if (!value || strcmp(value, "7") == 0) {
        CHECK_OK(st);
        CHECK_INT_EQ(v, value ? 7 : 8);
        return;
    }
    CHECK_INT_EQ(st, CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_LT_SEARCH");
    CHECK_CONTAINS(cgm_last_error(), value);
    if (strcmp(value, "0") == 0) {
        CHECK_CONTAINS(cgm_last_error(), "expected 1..16 (algorithms)");
        CHECK_CONTAINS(cgm_last_error(), "(default 8)");
    } else {
        CHECK_CONTAINS(cgm_last_error(), "expected an integer");
    }
    CHECK_INT_EQ(v, -5); /* untouched */
}

static void clear_launcher_env(void) {
    const char *vars[] = {"COMMGEMM_RANK", "COMMGEMM_NRANKS", "COMMGEMM_RENDEZVOUS", "RANK", "WORLD_SIZE",
                          "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE",
                          "OMPI_MCA_orte_hnp_uri"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static void test_bootstrap_env_none(const void *p) {
    (void)p;
    clear_launcher_env();
    cgm_bootstrap b;
    CHECK_STATUS(cgm_bootstrap_from_env(&b), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "commgemm-run");
    CHECK_CONTAINS(cgm_last_error(), "torchrun");
    CHECK_STATUS(cgm_bootstrap_from_env(NULL), CGM_ERROR_INVALID_ARGUMENT);
}

static void test_bootstrap_env_launchers(const void *p) {
    (void)p;
    cgm_bootstrap b;
    clear_launcher_env();
    setenv("COMMGEMM_RANK", "2", 1);
    setenv("COMMGEMM_NRANKS", "4", 1);
    setenv("COMMGEMM_RENDEZVOUS", "run-1/2", 1);
    CHECK_OK(cgm_bootstrap_from_env(&b));
    CHECK_INT_EQ(b.rank, 2);
    CHECK_INT_EQ(b.nranks, 4);
    CHECK_INT_EQ(b.kind, CGM_BOOTSTRAP_LOCAL);
    CHECK(strcmp(b.rendezvous, "run-1_2") == 0);
    clear_launcher_env();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    CHECK_OK(cgm_bootstrap_from_env(&b));
    CHECK_INT_EQ(b.rank, 1);
    CHECK_INT_EQ(b.nranks, 2);
    CHECK(strcmp(b.rendezvous, "torch-127.0.0.1-29500") == 0);
    unsetenv("MASTER_ADDR");
    CHECK_STATUS(cgm_bootstrap_from_env(&b), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "MASTER_ADDR");
    clear_launcher_env();
    setenv("OMPI_COMM_WORLD_RANK", "3", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
    setenv("OMPI_MCA_ess_base_jobid", "12345", 1);
    CHECK_OK(cgm_bootstrap_from_env(&b));
    CHECK_INT_EQ(b.rank, 3);
    CHECK_INT_EQ(b.nranks, 8);
    CHECK(strcmp(b.rendezvous, "mpi-12345") == 0);
}

/* A launcher variable set to something that is not a rank or a size is
 * named with its value and what it takes, not passed over for "no
 * launcher environment found". RANK alone (without WORLD_SIZE) may be
 * another program's: it is not torchrun's then. */
static void test_bootstrap_env_invalid(const void *p) {
    (void)p;
    static const struct {
        const char *vars[3][2];
        const char *message; /* NULL: UNAVAILABLE, no launcher */
    } cases[] = {
        {{{"COMMGEMM_NRANKS", "abc"}, {"COMMGEMM_RANK", "0"}, {"COMMGEMM_RENDEZVOUS", "x"}},
         "environment variable COMMGEMM_NRANKS=\"abc\": expected the number of ranks, an integer from 1 to 4096"},
        {{{"COMMGEMM_NRANKS", "abc"}, {NULL, NULL}, {NULL, NULL}}, "COMMGEMM_NRANKS=\"abc\""},
        {{{"COMMGEMM_NRANKS", "0"}, {"COMMGEMM_RANK", "0"}, {NULL, NULL}}, "COMMGEMM_NRANKS=\"0\""},
        {{{"COMMGEMM_NRANKS", "4"}, {"COMMGEMM_RANK", "4"}, {"COMMGEMM_RENDEZVOUS", "x"}},
         "COMMGEMM_RANK=\"4\": expected this process's rank, an integer from 0 to COMMGEMM_NRANKS - 1"},
        {{{"COMMGEMM_RANK", "-1"}, {NULL, NULL}, {NULL, NULL}}, "COMMGEMM_RANK=\"-1\""},
        {{{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}, "RANK=\"one\""},
        {{{"RANK", "0"}, {"WORLD_SIZE", "2x"}, {NULL, NULL}}, "WORLD_SIZE=\"2x\""},
        {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "99999999999"}, {NULL, NULL}},
         "OMPI_COMM_WORLD_SIZE=\"99999999999\""},
        {{{"RANK", "worker-a"}, {NULL, NULL}, {NULL, NULL}}, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear_launcher_env();
        for (int v = 0; v < 3; v++)
            if (cases[i].vars[v][0]) setenv(cases[i].vars[v][0], cases[i].vars[v][1], 1);
        cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
        if (!cases[i].message) {
            CHECK_STATUS(cgm_bootstrap_from_env(&b), CGM_ERROR_UNAVAILABLE);
            CHECK_CONTAINS(cgm_last_error(), "no launcher environment found");
            continue;
        }
        CHECK_STATUS(cgm_bootstrap_from_env(&b), CGM_ERROR_INVALID_ARGUMENT);
        CHECK_CONTAINS(cgm_last_error(), cases[i].message);
    }
}

/* The test harness's run selection (COMMGEMM_TEST_RUNS in the GPU op
 * tests) and time scale (TEST_TIMEOUT_SCALE). */
static void test_harness_selection(const void *param) {
    (void)param;
    char why[512];
    for (int i = 0; i < 50; i++) {
        CHECK_INT_EQ(test_parse_selection(NULL, i, why, sizeof why), 1);
        CHECK_INT_EQ(test_parse_selection("", i, why, sizeof why), 1);
        CHECK_INT_EQ(test_parse_selection("24-27,36", i, why, sizeof why),
                     (i >= 24 && i <= 27) || i == 36);
        CHECK_INT_EQ(test_parse_selection("3", i, why, sizeof why), i == 3);
        CHECK_INT_EQ(test_parse_selection("0-0,5-5,7-9", i, why, sizeof why),
                     i == 0 || i == 5 || (i >= 7 && i <= 9));
    }
    static const char *bad[] = {"a", "3,", ",3", "3-", "5-2", "-1", "3;4",
                                "1 ,2", "99999999999", "2-x"};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        why[0] = 0;
        CHECK_INT_EQ(test_parse_selection(bad[b], 3, why, sizeof why), -1);
        CHECK_CONTAINS(why, "expected indices and ranges");
        CHECK_CONTAINS(why, bad[b]);
    }
    setenv("CGM_TEST_SEL", "1-2", 1);
    CHECK(test_selected("CGM_TEST_SEL", 2));
    CHECK(!test_selected("CGM_TEST_SEL", 3));
    unsetenv("CGM_TEST_SEL");
    CHECK(test_selected("CGM_TEST_SEL", 3));
    setenv("TEST_TIMEOUT_SCALE", "10", 1);
    CHECK_INT_EQ(test_scaled_ms(1000), 10000);
    setenv("TEST_TIMEOUT_SCALE", "0.5", 1);
    CHECK_INT_EQ(test_scaled_ms(1000), 500);
    unsetenv("TEST_TIMEOUT_SCALE");
    CHECK_INT_EQ(test_scaled_ms(20000), 20000);
}

/* ---- cgm_bounded_run: a call on a helper thread, waited for with a
 * deadline; a late call's result goes to orphan, exactly once. */

typedef struct bounded_job {
    int64_t sleep_us;
    int ran;
} bounded_job;

static int orphans; /* atomic: orphan calls so far */

static void bounded_sleep(void *arg) {
    bounded_job *j = arg;
    usleep((useconds_t)j->sleep_us);
    j->ran = 1;
}

static void bounded_orphan(void *arg) {
    bounded_job *j = arg;
    if (!j->ran) abort(); /* orphan only after run returned */
    free(j);
    __atomic_add_fetch(&orphans, 1, __ATOMIC_ACQ_REL);
}

/* Waits, bounded, until `want` orphans have run. */
static void wait_orphans(int want) {
    const int64_t t0 = cgm_now_ns();
    while (__atomic_load_n(&orphans, __ATOMIC_ACQUIRE) < want) {
        if (cgm_now_ns() - t0 > test_scaled_ms(10000) * 1000000)
            TEST_FAIL("%d of %d orphaned calls released after %.0f s", orphans, want,
                      (double)test_scaled_ms(10000) / 1e3);
        usleep(1000);
    }
    CHECK_INT_EQ(__atomic_load_n(&orphans, __ATOMIC_ACQUIRE), want);
}

static void test_bounded_run(const void *p) {
    (void)p;
    __atomic_store_n(&orphans, 0, __ATOMIC_RELEASE);
    /* In time: the result is the caller's, no orphan. */
    bounded_job *j = calloc(1, sizeof *j);
    j->sleep_us = 1000;
    CHECK_OK(cgm_bounded_run(bounded_sleep, bounded_orphan, j, test_scaled_ms(5000), "quick call"));
    CHECK_INT_EQ(j->ran, 1);
    free(j);
    /* Late: a timeout naming the call, near the deadline; the orphan later. */
    j = calloc(1, sizeof *j);
    j->sleep_us = test_scaled_ms(500) * 1000;
    const int64_t t0 = cgm_now_ns();
    CHECK_STATUS(cgm_bounded_run(bounded_sleep, bounded_orphan, j, 50, "slow call"),
                 CGM_ERROR_TIMEOUT);
    const double took_ms = (double)(cgm_now_ns() - t0) / 1e6;
    CHECK_CONTAINS(cgm_last_error(), "slow call did not return within 50 ms");
    if (took_ms < 50 || took_ms > (double)test_scaled_ms(400))
        TEST_FAIL("the 50 ms wait took %.1f ms", took_ms);
    CHECK_INT_EQ(__atomic_load_n(&orphans, __ATOMIC_ACQUIRE), 0);
    wait_orphans(1); /* j freed there */
    CHECK_STATUS(cgm_bounded_run(NULL, NULL, NULL, 10, "nothing"), CGM_ERROR_INTERNAL);
}

/* Calls that end right at their 1 ms deadline: each is either the
 * caller's (CGM_SUCCESS, freed here) or an orphan's (freed there), never
 * both or neither; ASan's leak and use-after-free checks hold the rest. */
static void test_bounded_run_races(const void *p) {
    (void)p;
    __atomic_store_n(&orphans, 0, __ATOMIC_RELEASE);
    int late = 0, in_time = 0;
    for (int i = 0; i < 300; i++) {
        bounded_job *j = calloc(1, sizeof *j);
        j->sleep_us = 600 + (i % 7) * 150; /* 0.6 to 1.5 ms around the 1 ms deadline */
        cgm_status s = cgm_bounded_run(bounded_sleep, bounded_orphan, j, 1, "racing call");
        if (s == CGM_SUCCESS) {
            CHECK_INT_EQ(j->ran, 1);
            free(j);
            in_time++;
        } else {
            CHECK_STATUS(s, CGM_ERROR_TIMEOUT);
            late++;
        }
    }
    fprintf(stderr, "%d calls in time, %d late\n", in_time, late);
    wait_orphans(late);
}

static void register_cases(void) {
    test_add("version", test_version, NULL);
    test_add("matrix_overlap", test_matrix_overlap, NULL);
    test_add("memory_checks", test_memory_checks, NULL);
    test_add("harness_selection", test_harness_selection, NULL);
    test_add("status_strings", test_status_strings, NULL);
    test_add("last_error", test_last_error_per_thread, NULL);
    test_add("names", test_names_roundtrip, NULL);
    test_add("shards", test_shards, NULL);
    test_add("shards_near_int64_max", test_shards_near_int64_max, NULL);
    test_add("bf16_exhaustive", test_bf16_exhaustive, NULL);
    test_add("fp16_exhaustive", test_fp16_exhaustive, NULL);
    test_add("fp8_codes", test_fp8_codes, NULL);
    test_add("fp8_helpers", test_fp8_helpers, NULL);
    test_add("params", test_param_defaults_and_env, NULL);
    test_add("precision_default", test_precision, &precision_default);
    test_add("precision_env", test_precision, &precision_env);
    test_add("precision_config_over_env", test_precision, &precision_config);
    test_add("precision_config", test_precision, &precision_config_only);
    test_add("precision_names", test_precision_names, NULL);
    test_add("max_m_left_to_backend", test_max_m_left_to_backend, NULL);
    test_add("epilogue_names", test_epilogue_names, NULL);
    test_add("param_choice_default", test_param_choice, NULL);
    test_add("param_choice_no_overlap", test_param_choice, "no_overlap");
    test_add("param_choice_bad", test_param_choice_bad, NULL);
    for (size_t i = 0; i < sizeof choice_cases / sizeof choice_cases[0]; i++)
        test_add(choice_cases[i].name, test_param_choice_case, &choice_cases[i]);
    test_add("param_int_range_default", test_param_int_range, NULL);
    test_add("param_int_range_in", test_param_int_range, "7");
    test_add("param_int_range_low", test_param_int_range, "0");
    test_add("param_int_range_word", test_param_int_range, "many");
    test_add("bootstrap_env_none", test_bootstrap_env_none, NULL);
    test_add("bootstrap_env_launchers", test_bootstrap_env_launchers, NULL);
    test_add("bootstrap_env_invalid", test_bootstrap_env_invalid, NULL);
    test_add("bounded_run", test_bounded_run, NULL);
    test_add("bounded_run_races", test_bounded_run_races, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
