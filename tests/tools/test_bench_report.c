/* commgemm-bench's report without running ranks: the header explains every
 * column and the footer, a row slower than its no_overlap op is marked in
 * the table and the JSON, and the host environment's oversubscription
 * warning appears exactly when ranks x threads exceed the cores. */
#include <math.h>
#include <unistd.h>

#include "bench.h"
#include "harness.h"

static const bench_env_ops host_ops = {"host", NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                       NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

/* What `print` writes, as a string (static storage). */
static const char *capture(void (*print)(FILE *, const void *), const void *arg) {
    static char text[16384];
    FILE *f = tmpfile();
    if (!f) TEST_FAIL("tmpfile failed");
    print(f, arg);
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}


typedef struct fixture {
    bench_options opt;
    bench_env env;
    bench_context ctx;
    bench_row rows[3];
} fixture;

static void make_fixture(fixture *f, int nranks, int cores, int threads) {
    char *argv[] = {"commgemm-bench", NULL};
    memset(f, 0, sizeof *f);
    CHECK_INT_EQ(bench_parse_options(1, argv, &f->opt), 0);
    f->env.ops = &host_ops;
    f->env.device = -1;
    f->ctx.opt = &f->opt;
    f->ctx.env = &f->env;
    f->ctx.nranks = nranks;
    f->ctx.cores = cores;
    f->ctx.threads_per_rank = threads;
    f->ctx.blas_threads = 1;
    const double times[3][2] = {{120.0, 100.0}, {90.0, 100.0}, {0, 0}}; /* time, seq */
    for (int i = 0; i < 3; i++) {
        bench_row *r = &f->rows[i];
        r->op = CGM_OP_GEMM_REDUCE_SCATTER;
        r->m = 512, r->n = 256, r->k = 128;
        r->dtype = CGM_DTYPE_FP32;
        r->backend = CGM_BACKEND_HOST;
        r->time_us = times[i][0], r->seq_us = times[i][1];
        r->gemm_us = r->comm_us = r->ideal_us = 80.0;
        r->ratio = r->time_us / r->ideal_us;
        r->failed = i == 2;
    }
}

static void print_header(FILE *to, const void *arg) {
    const fixture *f = arg;
    bench_print_header(to, &f->ctx, "#  rank   0: host h, pid 1, backend host\n");
    bench_print_table_head(to);
}

static void print_rows(FILE *to, const void *arg) {
    const fixture *f = arg;
    for (int i = 0; i < 3; i++) bench_print_row(to, &f->rows[i]);
    bench_print_footer(to, f->rows, 3, 1);
}

static void run_header(const void *param) {
    (void)param;
    fixture f;
    make_fixture(&f, 2, 8, 2);
    const char *h = capture(print_header, &f);
    CHECK_CONTAINS(h, "ideal = max(gemm, comm)");
    CHECK_CONTAINS(h, "ratio = time / ideal");
    CHECK_CONTAINS(h, "seq: the same op with algo no_overlap");
    CHECK_CONTAINS(h, "vs_seq SLOWER: time > seq");
    CHECK_CONTAINS(h, "#wrong: output elements outside tolerance");
    CHECK_CONTAINS(h, "'Out of bounds values' (footer)");
    CHECK_CONTAINS(h, "peer: the environment's own collective and a cuBLASLt GEMM");
    CHECK_CONTAINS(h, "seq_us vs_seq    peer_us vs_peer  #wrong\n");
    CHECK_NOT_CONTAINS(h, "WARNING"); /* 2 ranks x 2 threads on 8 cores */
}

static void run_oversubscribed(const void *param) {
    (void)param;
    fixture f;
    make_fixture(&f, 4, 2, 2); /* the host bench's old default on a 2-core VM */
    const char *h = capture(print_header, &f);
    CHECK_CONTAINS(h, "# WARNING: 4 ranks x 2 busy threads");
    CHECK_CONTAINS(h, "= 8 on 2 cores");
    CHECK_CONTAINS(h, "run 2 ranks (commgemm-run -n auto, or --ranks auto)");
    CHECK(bench_oversubscribed(&f.ctx));
    f.ctx.cores = 0; /* GPU environment: no CPU accounting */
    CHECK(!bench_oversubscribed(&f.ctx));
}

static void run_slower_rows(const void *param) {
    (void)param;
    fixture f;
    make_fixture(&f, 2, 8, 2);
    CHECK(bench_row_slower(&f.rows[0]));
    CHECK(!bench_row_slower(&f.rows[1]));
    CHECK(!bench_row_slower(&f.rows[2])); /* failed: no times */
    const char *t = capture(print_rows, &f);
    const char *second = strchr(t, '\n');
    CHECK(second != NULL);
    /* Row 0 (120 us vs seq 100 us) is marked, row 1 is not. */
    CHECK(strstr(t, "SLOWER") != NULL && strstr(t, "SLOWER") < second);
    CHECK_NOT_CONTAINS(second, "SLOWER       0");
    CHECK_CONTAINS(t, "# Slower than no_overlap (SLOWER): 1 of 2 rows");
}

/* The peer column: '-' where no peer ran (the host environment: no
 * cuBLASLt), its time and time / peer where one did. */
static void run_peer_column(const void *param) {
    (void)param;
    fixture f;
    make_fixture(&f, 2, 8, 2);
    f.rows[0].peer_us = NAN;
    f.rows[1].peer_us = 60.0; /* time 90 */
    CHECK(isnan(bench_row_vs_peer(&f.rows[0])));
    CHECK(fabs(bench_row_vs_peer(&f.rows[1]) - 1.5) < 1e-12);
    CHECK(isnan(bench_row_vs_peer(&f.rows[2]))); /* failed */
    const char *t = capture(print_rows, &f);
    const char *second = strchr(t, '\n');
    CHECK(second != NULL);
    CHECK_CONTAINS(t, "SLOWER          -       -       0\n");
    CHECK_CONTAINS(second, "-       60.0   1.500       0\n");
}

static void run_json(const void *param) {
    (void)param;
    fixture f;
    char path[] = "/tmp/commgemm-bench-report-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) TEST_FAIL("mkstemp failed");
    close(fd);
    make_fixture(&f, 4, 2, 2);
    CHECK_INT_EQ(bench_write_json(path, &f.ctx, f.rows, 3, 1), 0);
    FILE *in = fopen(path, "r");
    static char json[16384];
    size_t n = in ? fread(json, 1, sizeof json - 1, in) : 0;
    json[n] = '\0';
    if (in) fclose(in);
    unlink(path);
    const char *row1 = strstr(json, "\"m\": 512");
    CHECK(row1 != NULL);
    CHECK_CONTAINS(row1, "\"seq_us\": 100, \"slower_than_seq\": true, \"peer_us\": null, \"vs_peer\": null,");
    CHECK_CONTAINS(strstr(row1 + 1, "\"m\": 512"), "\"slower_than_seq\": false");
    CHECK_CONTAINS(json, "\"slower_than_seq\": 1,");
    f.rows[1].peer_us = 45.0; /* time 90 */
    CHECK_INT_EQ(bench_write_json(path, &f.ctx, f.rows, 3, 1), 0);
    in = fopen(path, "r");
    n = in ? fread(json, 1, sizeof json - 1, in) : 0;
    json[n] = '\0';
    if (in) fclose(in);
    unlink(path);
    CHECK_CONTAINS(json, "\"peer_us\": 45, \"vs_peer\": 2,");
    CHECK_CONTAINS(json, "\"cores\": 2,\n  \"threads_per_rank\": 2,\n  \"oversubscribed\": true");
}

static void register_cases(void) {
    test_add("header_explains_columns", run_header, NULL);
    test_add("oversubscribed_warning", run_oversubscribed, NULL);
    test_add("slower_than_seq_marked", run_slower_rows, NULL);
    test_add("json_slower_than_seq", run_json, NULL);
    test_add("peer_column", run_peer_column, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
