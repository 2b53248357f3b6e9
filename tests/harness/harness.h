/* Test harness: each case runs in its own child process with a timeout;
 * `BIN --list` prints the case names, `BIN NAME...` runs those, `BIN` runs all.
 * A case fails by exiting non-zero (the CHECK macros print both operands),
 * skips with TEST_SKIP(reason) (exit code 77, ctest's SKIP_RETURN_CODE). */
#ifndef COMMGEMM_TEST_HARNESS_H
#define COMMGEMM_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgemm.h"

#define TEST_SKIP_CODE 77

typedef void (*test_fn)(const void *param);

/* Registers a case (name is copied; param must outlive the run). */
void test_add(const char *name, test_fn fn, const void *param);
/* Per-case timeout in seconds for cases registered after this call
 * (default 60; env TEST_TIMEOUT_SCALE multiplies it, e.g. under ASan). */
void test_set_timeout(int seconds);
/* TEST_TIMEOUT_SCALE (default 1; e.g. 4 under ASan, 10 under
 * compute-sanitizer): the factor of the case timeouts, of test_run_ranks'
 * bound, and of the comm timeouts the tests set (test_scaled_ms). */
double test_time_scale(void);
/* ms times test_time_scale(), for a comm's timeout_ms or a bound. */
int64_t test_scaled_ms(int64_t ms);
int test_main(int argc, char **argv, void (*register_cases)(void));
/* Whether `index` is in a selection: a comma-separated list of indices
 * and inclusive ranges, e.g. "24-27,36"; NULL or empty selects every
 * index. Returns 1 (selected), 0 (not) or -1 (malformed: why[len] says
 * what was expected and what was found). */
int test_parse_selection(const char *value, int index, char *why, size_t len);
/* test_parse_selection of the environment variable `var` (unset: every
 * index); a malformed value fails the case, naming the variable. For
 * running a subset of a case's runs, e.g. under compute-sanitizer. */
bool test_selected(const char *var, int index);

void test_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
void test_skip(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

#define TEST_FAIL(...) test_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define TEST_SKIP(...) test_skip(__VA_ARGS__)

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) TEST_FAIL("CHECK(%s) failed", #cond);                   \
    } while (0)
#define CHECK_INT_EQ(a, b)                                                   \
    do {                                                                     \
        long long a_ = (long long)(a), b_ = (long long)(b);                  \
        if (a_ != b_)                                                        \
            TEST_FAIL("%s == %s failed: %lld != %lld", #a, #b, a_, b_);      \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                \
    do {                                                                     \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);       \
        if (!(a_ - b_ <= t_ && b_ - a_ <= t_))                               \
            TEST_FAIL("|%s - %s| <= %g failed: %.9g vs %.9g", #a, #b, t_,    \
                      a_, b_);                                               \
    } while (0)
/* Checks a commgemm call's status; prints both statuses and the detail. */
#define CHECK_STATUS(expr, expected)                                         \
    do {                                                                     \
        cgm_status got_ = (expr), want_ = (expected);                        \
        if (got_ != want_)                                                   \
            TEST_FAIL("%s returned %d (%s), expected %d (%s); detail: %s",   \
                      #expr, (int)got_, cgm_status_string(got_),             \
                      (int)want_, cgm_status_string(want_),                  \
                      cgm_last_error());                                     \
    } while (0)
#define CHECK_OK(expr) CHECK_STATUS(expr, CGM_SUCCESS)
#define CHECK_CONTAINS(haystack, needle)                                     \
    do {                                                                     \
        const char *h_ = (haystack), *n_ = (needle);                         \
        if (!h_ || !strstr(h_, n_))                                          \
            TEST_FAIL("\"%s\" does not contain \"%s\"", h_ ? h_ : "(null)",  \
                      n_);                                                   \
    } while (0)
#define CHECK_NOT_CONTAINS(haystack, needle)                                 \
    do {                                                                     \
        const char *h_ = (haystack), *n_ = (needle);                         \
        if (h_ && strstr(h_, n_))                                            \
            TEST_FAIL("\"%s\" contains \"%s\"", h_, n_);                   \
    } while (0)

/* ---- multi-rank: fork nranks processes on this machine ---- */

/* Runs fn(rank, nranks, rendezvous, arg) in nranks forked processes that
 * share a fresh rendezvous name. A rank fails by returning non-zero or
 * exiting non-zero. Ranks still running after timeout_s are killed.
 * Returns 0 when every rank succeeded; codes[r] (if not NULL) receives each
 * rank's exit code (-signal if killed). */
typedef int (*test_rank_fn)(int rank, int nranks, const char *rendezvous,
                            void *arg);
int test_run_ranks(int nranks, test_rank_fn fn, void *arg, int timeout_s,
                   int *codes);
/* Creates a host comm for a rank inside test_run_ranks (CHECKs success). */
cgm_comm *test_host_comm(int rank, int nranks, const char *rendezvous,
                         const cgm_config *config);
/* A LOCAL bootstrap of rank 0 of 1 whose rendezvous, "<prefix>-<pid>", is
 * written into name[len] (kept by the caller): for a comm the test creates
 * itself, e.g. to see it refused. */
cgm_bootstrap test_local_bootstrap(const char *prefix, char *name, size_t len);
/* Run as root: skips the case unless a child can become nobody (uid and
 * gid 65534; a user namespace may not map it), for cases that must run
 * without root's privileges (e.g. the one that lifts the open-files limit
 * on descriptors in flight). Does nothing for another user. */
void test_skip_unless_root_can_drop(void);
/* Becomes nobody when run as root (after test_skip_unless_root_can_drop);
 * fails the case if it cannot. Does nothing for another user. */
void test_drop_root(void);

/* ---- data and reference ---- */

/* Deterministic value for (seed, index): a multiple of 1/8 in [-1, 1],
 * exact in bf16/fp16, so that small products and sums are exact in fp32. */
float test_value(uint64_t seed, int64_t index);
/* Fills a matrix (any supported dtype, honours ld) from (seed, its own
 * element index row * cols + col). */
void test_fill(const cgm_matrix *m, uint64_t seed);
/* Element (i, j) of a matrix as double. */
double test_get(const cgm_matrix *m, int64_t i, int64_t j);
/* Allocates a host matrix (ld = cols + pad) of the dtype, filled with NaN
 * patterns (poison) so unwritten elements show. Free with test_free. */
cgm_matrix test_alloc(cgm_dtype dtype, int64_t rows, int64_t cols,
                      int64_t pad);
void test_poison(const cgm_matrix *m);
void test_free(cgm_matrix *m);
/* out[i*n + j] (double, m x n) = sum_l op(X)[i,l] * op(W)[l,j] for the
 * layout; x is [m,k] (TN, NN) or [k,m] (NT); w is [n,k] (TN) or [k,n]. */
void test_ref_gemm(cgm_layout layout, const cgm_matrix *x, const cgm_matrix *w,
                   int64_t m, int64_t n, int64_t k, double *out);
/* The value of an fp8 code (dtype e4m3 or e5m2) from the formats'
 * definition, in double (the library's decoder is not used): e4m3 has no
 * infinity and one NaN per sign (S.1111.111), e5m2 is IEEE-like. */
double test_fp8_value(int code, cgm_dtype dtype);
/* Tolerance for comparing an output of `out` dtype computed from `in`
 * inputs over a contraction of length k, relative to max(1, |ref|). */
double test_tolerance(cgm_dtype in, cgm_dtype out, int64_t k);
/* Compares y (rows x n) with ref (double rows x n, row stride n). Returns
 * the number of elements outside tolerance and prints the first few. */
int64_t test_compare(const cgm_matrix *y, const double *ref, int64_t rows,
                     int64_t n, double tol, const char *what);

#endif
