/* commgemm-bench: nccl-tests style measurement of commgemm's ops.
 *
 * Started by a launcher (commgemm-run, mpirun, torchrun), each process is a
 * rank. Started bare, it re-executes itself as --ranks N ranks (default: on
 * the host environment as many as the cores hold, commgemm-run -n auto's
 * rule; one per visible GPU on the GPU one) through the same launcher
 * engine as commgemm-run. */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "launch.h"

#define HOSTNAME_FLOATS 40
enum { MAP_PID = 0, MAP_DEVICE = 1, MAP_BACKENDS = 2, MAP_HOST = MAP_BACKENDS + CGM_OP_COUNT_,
       MAP_COUNT = MAP_HOST + HOSTNAME_FLOATS };

static int relaunch(char **argv, int nranks) {
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "commgemm-bench: cannot find my own executable to start "
                "%d ranks; run it under commgemm-run -n N instead\n", nranks);
        return LAUNCH_EXIT_SETUP;
    }
    self[len] = '\0';
    char *saved = argv[0];
    argv[0] = self;
    launch_options launch;
    memset(&launch, 0, sizeof launch);
    launch.nranks = nranks;
    launch.grace_s = LAUNCH_DEFAULT_GRACE_S;
    launch.name = "commgemm-bench";
    launch.argv = argv;
    int rc = launch_run(&launch);
    argv[0] = saved;
    return rc;
}

static int64_t larger(int64_t a, int64_t b) { return a > b ? a : b; }

static void make_config(const bench_options *opt, int nranks, cgm_config *config) {
    const cgm_config init = CGM_CONFIG_INIT;
    int64_t m, n, k;
    *config = init;
    config->backend = opt->backend;
    /* cuBLASMp has no bulk overlap; the GEMM alone and the bulk op then run
     * on the nccl backend (works wherever cublasmp does). */
    if (opt->backend == CGM_BACKEND_CUBLASMP)
        config->op_backend[CGM_OP_BULK] = CGM_BACKEND_NCCL;
    /* Workspaces are sized from these: as large as the run, no larger.
     * Collective-only calls use [nranks, 64] rows for the barrier. */
    bench_largest_shape(opt, &m, &n, &k);
    int64_t cols = larger(larger(n, k), BENCH_SYNC_FLOATS);
    config->max_m = larger(m, nranks);
    config->max_n = cols;
    config->max_k = cols;
    if (opt->timeout_ms != CGM_UNSET) config->timeout_ms = opt->timeout_ms;
}

/* "#  rank 0: host h, pid p, backend host" for every rank, built on rank 0
 * from one all-gather of floats (pid, backends, host name bytes). */
static int rank_map(bench_context *ctx, char *out, size_t size) {
    float mine[MAP_COUNT], *all = calloc((size_t)(ctx->nranks * MAP_COUNT), sizeof *all);
    char host[HOSTNAME_FLOATS + 1] = "";
    if (!all) return -1;
    gethostname(host, sizeof host - 1);
    mine[MAP_PID] = (float)getpid();
    mine[MAP_DEVICE] = (float)ctx->env->device;
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        cgm_backend b = CGM_BACKEND_DEFAULT;
        cgm_comm_backend(ctx->comm, (cgm_op)op, &b);
        mine[MAP_BACKENDS + op] = (float)b;
    }
    for (int i = 0; i < HOSTNAME_FLOATS; i++)
        mine[MAP_HOST + i] = (float)(unsigned char)host[i];
    cgm_status st = bench_allgather_floats(ctx, mine, MAP_COUNT, all);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "commgemm-bench: rank %d: exchanging the rank map failed: "
                "%s: %s\n", ctx->rank, cgm_status_string(st), cgm_last_error());
        free(all);
        return -1;
    }
    size_t used = 0;
    out[0] = '\0';
    for (int r = 0; r < ctx->nranks && used + 160 < size; r++) {
        const float *theirs = all + r * MAP_COUNT;
        char name[HOSTNAME_FLOATS + 1];
        for (int i = 0; i < HOSTNAME_FLOATS; i++) name[i] = (char)theirs[MAP_HOST + i];
        name[HOSTNAME_FLOATS] = '\0';
        used += (size_t)snprintf(out + used, size - used, "#  rank %3d: host %s, pid %ld,",
                                 r, name, (long)theirs[MAP_PID]);
        if (theirs[MAP_DEVICE] >= 0)
            used += (size_t)snprintf(out + used, size - used, " device %d,",
                                     (int)theirs[MAP_DEVICE]);
        used += (size_t)snprintf(out + used, size - used, " backend");
        for (int op = 0; op < CGM_OP_COUNT_; op++)
            if (ctx->opt->op_mask & (1u << op))
                used += (size_t)snprintf(out + used, size - used, " %s=%s",
                                         cgm_op_name((cgm_op)op),
                                         cgm_backend_name((cgm_backend)theirs[MAP_BACKENDS + op]));
        used += (size_t)snprintf(out + used, size - used, "\n");
    }
    free(all);
    return 0;
}

static int run_one(bench_context *ctx, bench_row *row, cgm_op op, int64_t m,
                   int64_t n, int64_t k, int *errors) {
    int rc = bench_run_row(ctx, op, m, n, k, row);
    if (ctx->rank == 0) {
        bench_print_row(stdout, row);
        fflush(stdout);
    }
    /* An error may have left the ranks out of step: stop. */
    if (rc != 0) (*errors)++;
    return rc;
}

/* Every row of the run, in order: op, then the --shapes list or the m, n, k
 * sweep. */
static int run_sweep(bench_context *ctx, bench_row *rows, int capacity, int *count,
                     int *errors) {
    const bench_options *opt = ctx->opt;
    bench_shape *shapes = NULL;
    int64_t nshapes = bench_run_shapes(opt, &shapes);
    int rc = nshapes < 0 ? -1 : 0;
    for (int op = 0; op < CGM_OP_COUNT_ && rc == 0; op++) {
        if (!(opt->op_mask & (1u << op))) continue;
        for (int64_t i = 0; i < nshapes && *count < capacity && rc == 0; i++)
            rc = run_one(ctx, &rows[(*count)++], (cgm_op)op, shapes[i].m, shapes[i].n,
                         shapes[i].k, errors);
    }
    free(shapes);
    return rc;
}

static int run_rank(const bench_options *given, const cgm_bootstrap *bootstrap,
                    bench_env *env) {
    int exit_code = 1, count = 0, errors = 0;
    bench_options resolved = *given, *opt = &resolved;
    bench_context ctx;
    cgm_config config;
    char *map = NULL;
    int capacity = 4 * BENCH_MAX_SIZES * BENCH_MAX_SIZES;
    bench_row *rows = calloc((size_t)capacity, sizeof *rows);
    memset(&ctx, 0, sizeof ctx);
    ctx.opt = opt;
    ctx.env = env;
    if (!rows) goto done;
    make_config(opt, bootstrap->nranks, &config);
    cgm_status st = ctx.env->ops->comm_create(ctx.env, bootstrap, &config, &ctx.comm);
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "commgemm-bench: rank %d: creating the comm failed: %s: %s\n",
                bootstrap->rank, cgm_status_string(st), cgm_last_error());
        goto done;
    }
    /* No --partials: the comm's, so that the header, the calls and the
     * check all say what ran. */
    if (cgm_comm_rank(ctx.comm, &ctx.rank) != CGM_SUCCESS ||
        cgm_comm_size(ctx.comm, &ctx.nranks) != CGM_SUCCESS ||
        (opt->partials == CGM_PARTIAL_DTYPE_DEFAULT &&
         cgm_comm_precision(ctx.comm, &opt->partials, NULL) != CGM_SUCCESS)) {
        fprintf(stderr, "commgemm-bench: querying the comm failed: %s\n", cgm_last_error());
        goto done;
    }
    size_t map_size = (size_t)ctx.nranks * 256 + 1;
    if (bench_context_init(&ctx) || !(map = malloc(map_size)) ||
        rank_map(&ctx, map, map_size))
        goto done;
    if (!env->ops->device_memory) { /* host: the ranks share this machine's cores */
        launch_cpu_budget cpu;
        launch_cpu_budget_read(&cpu);
        ctx.cores = cpu.cores;
        ctx.threads_per_rank = cpu.threads_per_rank;
        ctx.blas_threads = cpu.blas_threads;
    }
    int memory = bench_check_memory(&ctx);
    if (memory != 0) {
        exit_code = memory > 0 ? 2 : 1;
        goto done;
    }
    if (ctx.rank == 0) {
        bench_print_header(stdout, &ctx, map);
        bench_print_table_head(stdout);
        fflush(stdout);
    }
    run_sweep(&ctx, rows, capacity, &count, &errors);
    int64_t wrong = 0;
    for (int i = 0; i < count; i++) wrong += rows[i].wrong;
    if (ctx.rank == 0) {
        bench_print_footer(stdout, rows, count, errors);
        fflush(stdout);
        if (opt->json_path && bench_write_json(opt->json_path, &ctx, rows, count, errors))
            errors++;
    }
    exit_code = wrong == 0 && errors == 0 ? 0 : 1;
done:
    if (ctx.comm) {
        bench_context_fini(&ctx);
        st = cgm_comm_destroy(ctx.comm);
        if (st != CGM_SUCCESS) {
            fprintf(stderr, "commgemm-bench: rank %d: destroying the comm failed: %s: %s\n",
                    ctx.rank, cgm_status_string(st), cgm_last_error());
            exit_code = 1;
        }
    }
    free(map);
    free(rows);
    return exit_code;
}

int main(int argc, char **argv) {
    bench_options opt;
    int rc = bench_parse_options(argc, argv, &opt);
    if (rc != 0) return rc > 0 ? 0 : 2;
    /* Before any rank starts: a backend this bench cannot drive is a usage
     * error, reported once. */
    bench_env *env = bench_env_create(opt.backend);
    if (!env) return 2;
    cgm_bootstrap bootstrap = CGM_BOOTSTRAP_INIT;
    cgm_status st = cgm_bootstrap_from_env(&bootstrap);
    if (st == CGM_ERROR_UNAVAILABLE) { /* no launcher: be our own */
        int nranks = opt.ranks > 0 ? opt.ranks : env->default_ranks;
        if (nranks <= 0) { /* host: commgemm-run -n auto's rule */
            char note[256];
            nranks = launch_auto_ranks(note, sizeof note);
            fprintf(stderr, "commgemm-bench: %s\n", note);
        }
        env->ops->destroy(env);
        return relaunch(argv, nranks);
    }
    if (st != CGM_SUCCESS) {
        fprintf(stderr, "commgemm-bench: reading the launcher's environment failed: "
                "%s: %s\n", cgm_status_string(st), cgm_last_error());
        rc = 1;
    } else if (opt.ranks > 0 && opt.ranks != bootstrap.nranks) {
        fprintf(stderr, "commgemm-bench: --ranks %d, but the launcher started %d "
                "ranks; drop --ranks when running under a launcher\n", opt.ranks,
                bootstrap.nranks);
        rc = 2;
    } else {
        rc = run_rank(&opt, &bootstrap, env);
    }
    env->ops->destroy(env);
    return rc;
}
