/* The table (nccl-tests style: '#' header lines, fixed-width rows, a footer
 * with the wrong-value count and OK/FAILED) and the JSON file. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "launch.h"

#define ROW_REST " %7s %7s %7s %8s %8s %10s %10s %8s %10s %10s %10s %6s %10s %6s %10s %7s %7s\n"
#define ROW_FORMAT_S "%9s" ROW_REST
#define HEAD_FORMAT_S "#%8s" ROW_REST

static void print_version(FILE *to, const char *prefix) {
    int v = cgm_version();
    fprintf(to, "%scommgemm %d.%d.%d (header %d.%d.%d)", prefix, v / 10000,
            v / 100 % 100, v % 100, COMMGEMM_VERSION_MAJOR,
            COMMGEMM_VERSION_MINOR, COMMGEMM_VERSION_PATCH);
}

/* The host environment's warning: more busy threads than cores, and what
 * would help here. */
static void print_oversubscribed(FILE *to, const bench_context *ctx) {
    int fit = launch_auto_ranks_rule(ctx->cores, ctx->threads_per_rank);
    fprintf(to, "# WARNING: %d ranks x %d busy threads (a comm thread, compute threads "
            "x %d BLAS thread%s) = %d on %d core%s: the ranks take turns on the cores, "
            "so times and ratios measure that, not the overlap", ctx->nranks,
            ctx->threads_per_rank, ctx->blas_threads, ctx->blas_threads == 1 ? "" : "s",
            ctx->nranks * ctx->threads_per_rank, ctx->cores, ctx->cores == 1 ? "" : "s");
    if (ctx->blas_threads > 1)
        fprintf(to, "; set OPENBLAS_NUM_THREADS=1");
    if (fit < ctx->nranks)
        fprintf(to, "; run %d ranks (commgemm-run -n auto, or --ranks auto)", fit);
    if (ctx->blas_threads == 1 && fit >= ctx->nranks)
        fprintf(to, "; %d ranks need %d cores to overlap", ctx->nranks,
                ctx->nranks * ctx->threads_per_rank);
    fprintf(to, "\n");
}

void bench_print_header(FILE *to, const bench_context *ctx, const char *rank_map) {
    print_version(to, "# commgemm-bench: ");
    fprintf(to, "\n");
    bench_print_options(to, ctx->opt);
    fprintf(to, "# nranks: %d  environment: %s\n", ctx->nranks, ctx->env->ops->name);
    fprintf(to, "%s", rank_map);
    if (ctx->memory_note[0]) fprintf(to, "# memory: %s\n", ctx->memory_note);
    if (bench_oversubscribed(ctx)) print_oversubscribed(to, ctx);
    fprintf(to, "# times: slowest rank's median over iters, microseconds\n"
            "#   time: the op with --algo; gemm: its GEMM alone; comm: its collective alone\n"
            "#   ideal = max(gemm, comm), perfect overlap; ratio = time / ideal (1.0 = perfect)\n"
            "#   seq: the same op with algo no_overlap (collective then GEMM, or GEMM then\n"
            "#   collective); vs_seq %s: time > seq, the overlap lost to the steps in sequence\n"
            "#   peer: the environment's own collective and a cuBLASLt GEMM in sequence, no\n"
            "#   commgemm (GPU only: '-' without cuBLASLt); vs_peer = time / peer (< 1: faster)\n"
            "#   #wrong: output elements outside tolerance, of the op and of no_overlap,\n"
            "#   summed over ranks; 'Out of bounds values' (footer): #wrong of every row,\n"
            "#   OK when 0 and no row failed, else FAILED\n", BENCH_SLOWER_MARK);
    fprintf(to, "#\n");
}

void bench_print_table_head(FILE *to) {
    fprintf(to, HEAD_FORMAT_S, "op", "m", "n", "k", "dtype",
            "backend", "algo", "time_us", "TFLOP/s", "gemm_us", "comm_us",
            "ideal_us", "ratio", "seq_us", "vs_seq", "peer_us", "vs_peer", "#wrong");
}

void bench_print_row(FILE *to, const bench_row *row) {
    char m[24], n[24], k[24], t[6][24], ratio[24], flops[24], wrong[24], peer[24], vs_peer[24];
    snprintf(m, sizeof m, "%" PRId64, row->m);
    snprintf(n, sizeof n, "%" PRId64, row->n);
    snprintf(k, sizeof k, "%" PRId64, row->k);
    if (row->failed || row->skipped) {
        fprintf(to, ROW_FORMAT_S, cgm_op_name(row->op), m, n, k,
                cgm_dtype_name(row->dtype), cgm_backend_name(row->backend),
                cgm_algo_name(row->algo), row->failed ? "error" : "skipped", "-", "-", "-", "-", "-", "-", "-",
                "-", "-", "-");
        return;
    }
    const double values[] = {row->time_us, row->gemm_us, row->comm_us,
                             row->ideal_us, row->seq_us};
    for (int i = 0; i < 5; i++) snprintf(t[i], sizeof t[i], "%.1f", values[i]);
    snprintf(ratio, sizeof ratio, "%.3f", row->ratio);
    snprintf(flops, sizeof flops, "%.3f", row->tflops);
    snprintf(wrong, sizeof wrong, "%" PRId64, row->wrong);
    double vs = bench_row_vs_peer(row);
    snprintf(peer, sizeof peer, "-");
    snprintf(vs_peer, sizeof vs_peer, "-");
    if (isfinite(vs)) {
        snprintf(peer, sizeof peer, "%.1f", row->peer_us);
        snprintf(vs_peer, sizeof vs_peer, "%.3f", vs);
    }
    fprintf(to, ROW_FORMAT_S, cgm_op_name(row->op), m, n, k,
            cgm_dtype_name(row->dtype), cgm_backend_name(row->backend),
            cgm_algo_name(row->algo), t[0], flops, t[1], t[2], t[3], ratio, t[4],
            bench_row_slower(row) ? BENCH_SLOWER_MARK : "-", peer, vs_peer, wrong);
}

double bench_row_vs_peer(const bench_row *row) {
    if (row->failed || row->skipped || !isfinite(row->peer_us) || row->peer_us <= 0) return NAN;
    return row->time_us / row->peer_us;
}

int bench_oversubscribed(const bench_context *ctx) {
    return ctx->cores > 0 && ctx->nranks * ctx->threads_per_rank > ctx->cores;
}

int bench_row_slower(const bench_row *row) {
    return !row->failed && row->seq_us > 0 && row->time_us > row->seq_us;
}

typedef struct bench_totals {
    int64_t wrong;
    double avg_ratio;
    int rated;  /* rows with a ratio */
    int slower; /* rows slower than their no_overlap op */
} bench_totals;

static void totals(const bench_row *rows, int count, bench_totals *t) {
    double sum = 0;
    memset(t, 0, sizeof *t);
    for (int i = 0; i < count; i++) {
        t->wrong += rows[i].wrong;
        t->slower += bench_row_slower(&rows[i]);
        if (!rows[i].failed && rows[i].ratio > 0) sum += rows[i].ratio, t->rated++;
    }
    t->avg_ratio = t->rated ? sum / t->rated : 0;
}

void bench_print_footer(FILE *to, const bench_row *rows, int count, int errors) {
    bench_totals t;
    totals(rows, count, &t);
    fprintf(to, "# Out of bounds values : %" PRId64 " %s\n", t.wrong,
            t.wrong == 0 && errors == 0 ? "OK" : "FAILED");
    if (errors) fprintf(to, "# Errors: %d row%s failed (see stderr)\n", errors,
                        errors == 1 ? "" : "s");
    fprintf(to, "# Avg ratio: %.3f (over %d row%s; 1.0 = perfect overlap)\n",
            t.avg_ratio, t.rated, t.rated == 1 ? "" : "s");
    fprintf(to, "# Slower than no_overlap (%s): %d of %d row%s\n", BENCH_SLOWER_MARK,
            t.slower, t.rated, t.rated == 1 ? "" : "s");
}

static void json_number(FILE *to, const char *name, double v) {
    if (isfinite(v)) fprintf(to, ", \"%s\": %.6g", name, v);
    else fprintf(to, ", \"%s\": null", name);
}

int bench_write_json(const char *path, const bench_context *ctx,
                     const bench_row *rows, int count, int errors) {
    FILE *to = fopen(path, "w");
    if (!to) {
        perror(path);
        return -1;
    }
    bench_totals t;
    totals(rows, count, &t);
    int v = cgm_version();
    fprintf(to, "{\n  \"tool\": \"commgemm-bench\",\n  \"version\": \"%d.%d.%d\",\n",
            v / 10000, v / 100 % 100, v % 100);
    fprintf(to, "  \"nranks\": %d,\n  \"environment\": \"%s\",\n", ctx->nranks,
            ctx->env->ops->name);
    if (ctx->cores > 0)
        fprintf(to, "  \"cores\": %d,\n  \"threads_per_rank\": %d,\n  \"oversubscribed\": %s,\n",
                ctx->cores, ctx->threads_per_rank, bench_oversubscribed(ctx) ? "true" : "false");
    fprintf(to, "  \"options\": ");
    bench_json_options(to, ctx->opt);
    fprintf(to, ",\n  \"rows\": [");
    for (int i = 0; i < count; i++) {
        const bench_row *r = &rows[i];
        fprintf(to, "%s\n    {\"op\": \"%s\", \"m\": %" PRId64 ", \"n\": %" PRId64
                ", \"k\": %" PRId64 ", \"dtype\": \"%s\", \"backend\": \"%s\", "
                "\"algo\": \"%s\", \"failed\": %s, \"skipped\": %s",
                i ? "," : "", cgm_op_name(r->op), r->m, r->n, r->k,
                cgm_dtype_name(r->dtype), cgm_backend_name(r->backend),
                cgm_algo_name(r->algo), r->failed ? "true" : "false", r->skipped ? "true" : "false");
        json_number(to, "time_us", r->time_us);
        json_number(to, "tflops", r->tflops);
        json_number(to, "gemm_us", r->gemm_us);
        json_number(to, "comm_us", r->comm_us);
        json_number(to, "ideal_us", r->ideal_us);
        json_number(to, "ratio", r->ratio);
        json_number(to, "seq_us", r->seq_us);
        fprintf(to, ", \"slower_than_seq\": %s", bench_row_slower(r) ? "true" : "false");
        json_number(to, "peer_us", isfinite(bench_row_vs_peer(r)) ? r->peer_us : NAN);
        json_number(to, "vs_peer", bench_row_vs_peer(r));
        fprintf(to, ", \"graph_mask\": %u, \"wrong\": %" PRId64 "}", r->graph_mask, r->wrong);
    }
    fprintf(to, "\n  ],\n  \"wrong\": %" PRId64 ",\n  \"errors\": %d,\n", t.wrong, errors);
    fprintf(to, "  \"slower_than_seq\": %d,\n", t.slower);
    fprintf(to, "  \"avg_ratio\": %.6g,\n  \"ok\": %s\n}\n", t.avg_ratio,
            t.wrong == 0 && errors == 0 ? "true" : "false");
    if (fclose(to) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}
