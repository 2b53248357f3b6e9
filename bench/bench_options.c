/* Command-line options of commgemm-bench: one struct, getopt_long, and a
 * message naming the option, what it expects and what it got. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"

#define ALL_OPS ((1u << CGM_OP_COUNT_) - 1u)

static void usage(FILE *to) {
    fprintf(to,
        "Usage: commgemm-bench [options]\n"
        "Measures commgemm's overlapped ops against the GEMM alone, the\n"
        "collective alone and the two in sequence (nccl-tests style).\n"
        "Launch with commgemm-run -n N (or mpirun/torchrun), or let it start\n"
        "its own ranks with --ranks N (default auto: on the host backend as\n"
        "many as the cores hold, commgemm-run -n auto's rule). GPU backends\n"
        "(p2p, nccl, cublasmp, or auto when a GPU is visible) run one rank per GPU.\n"
        "\n"
        "  --op OPS            ag_gemm, gemm_rs, gemm_ar, bulk, a comma list, or\n"
        "                      all (default all)\n"
        "  -m, -n, -k SIZES    a value or start:end[:factor] (factor default 2);\n"
        "                      the layer's whole problem: ag_gemm splits n over\n"
        "                      ranks, gemm_rs/gemm_ar split k (default 512 each)\n"
        "  --shapes LIST       explicit shapes MxNxK[,MxNxK...] (m, n, k in the\n"
        "                      table's order), instead of the -m/-n/-k sweep\n"
        "  --dtype T           fp32, bf16, fp16 or fp8 (e4m3 X and W with scales,\n"
        "                      bf16 Y; layout TN; the host backend) (default fp32)\n"
        "  --scaling S         with --dtype fp8: tensor (one scale per operand,\n"
        "                      the default) or block (X 1x128, W 128x128 blocks)\n"
        "  --backend B         auto, host, p2p, nccl or cublasmp (default: the\n"
        "                      comm's choice, COMMGEMM_BACKEND or auto)\n"
        "  --algo A            auto, split, ring, no_overlap or fused (p2p) (default auto)\n"
        "  --splits N          split count hint, 0 = auto (default 0)\n"
        "  --layout L          TN, NN or NT (default TN)\n"
        "  --epilogue E        none, gelu, gelu_aux, dgelu, dgelu_bgrad or bgrad\n"
        "                      (bulk only): the ops' fused epilogue, with its aux\n"
        "                      and bgrad; a call a backend refuses (cublasmp;\n"
        "                      some on p2p) skips its row with the reason\n"
        "                      (default none)\n"
        "  --bias              every op adds a bias to its output (before the\n"
        "                      epilogue; not with dgelu, dgelu_bgrad or bgrad)\n"
        "  --partials P        fp32 or output: the partials gemm_rs and gemm_ar\n"
        "                      send (default: the comm's, COMMGEMM_PARTIAL_DTYPE\n"
        "                      or fp32)\n"
        "  -w, --warmup N      untimed rounds first (default 5)\n"
        "  -i, --iters N       timed rounds; medians are reported (default 20)\n"
        "  --check, --no-check verify results (default on)\n"
        "  --graph             GPU: capture each measurement in a CUDA graph after\n"
        "                      the warm-up and time its replays (no launch cost)\n"
        "  --comm-baseline B   what comm_us times: env (default: the environment's\n"
        "                      own collective, NCCL on GPUs) or library (commgemm's\n"
        "                      collective on the chosen backend, no GEMM: e.g. the\n"
        "                      p2p backend's copy-engine pushes alone)\n"
        "  --json FILE         also write the rows as JSON (rank 0)\n"
        "  --seed N            input seed (default 1)\n"
        "  --ranks N|auto      start N ranks of this bench on this machine (auto,\n"
        "                      the default: min(4, cores / threads per rank), at\n"
        "                      least 2, on the host; one per GPU on GPUs)\n"
        "  --timeout-ms MS     comm timeout (default COMMGEMM_TIMEOUT_MS/60000)\n"
        "  --inject-wrong-value  rank 0 corrupts one output value before the check\n"
        "                      (tests that the check counts it and fails the run)\n"
        "  -h, --help          this text\n");
}

static int fail(const char *option, const char *expected, const char *got) {
    fprintf(stderr, "commgemm-bench: %s: expected %s, got '%s'\n", option,
            expected, got);
    fprintf(stderr, "commgemm-bench: see 'commgemm-bench --help'\n");
    return -1;
}

static int parse_i64(const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    if (!text || !*text) return -1;
    long long v = strtoll(text, &end, 10);
    if (*end == 'k' || *end == 'K') v *= 1024, end++;
    else if (*end == 'm' || *end == 'M') v *= 1024 * 1024, end++;
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *option, const char *text, int lo, int hi,
                     int *out) {
    int64_t v;
    char expected[64];
    snprintf(expected, sizeof expected, "an integer from %d to %d", lo, hi);
    if (parse_i64(text, lo, hi, &v)) return fail(option, expected, text);
    *out = (int)v;
    return 0;
}

static int parse_range(const char *option, const char *text, bench_range *r) {
    static const char *expected =
        "a size >= 1 or start:end[:factor] with start <= end and factor >= 2 "
        "(e.g. 1024:16384:2)";
    char buf[128], *parts[3] = {NULL, NULL, NULL};
    int count = 0;
    if (strlen(text) >= sizeof buf) return fail(option, expected, text);
    strcpy(buf, text);
    for (char *p = buf; count < 3; count++) {
        parts[count] = p;
        char *colon = strchr(p, ':');
        if (!colon) { count++; break; }
        *colon = '\0';
        p = colon + 1;
        if (count == 2) return fail(option, expected, text);
    }
    const int64_t max = (int64_t)1 << 40;
    if (parse_i64(parts[0], 1, max, &r->start)) return fail(option, expected, text);
    r->end = r->start;
    r->factor = 2;
    if (count >= 2 && parse_i64(parts[1], r->start, max, &r->end))
        return fail(option, expected, text);
    if (count == 3 && parse_i64(parts[2], 2, 1024, &r->factor))
        return fail(option, expected, text);
    int64_t v = r->start, n = 0;
    while (v <= r->end && n <= BENCH_MAX_SIZES) v *= r->factor, n++;
    if (n > BENCH_MAX_SIZES) {
        fprintf(stderr, "commgemm-bench: %s: '%s' gives more than %d sizes\n",
                option, text, BENCH_MAX_SIZES);
        return -1;
    }
    return 0;
}

int bench_range_values(const bench_range *range, int64_t *values) {
    int count = 0;
    for (int64_t v = range->start; v <= range->end && count < BENCH_MAX_SIZES;
         v *= range->factor) {
        values[count++] = v;
        if (range->factor < 2) break;
    }
    return count;
}

static int parse_shapes(const char *text, bench_options *opt) {
    static const char *expected =
        "MxNxK[,MxNxK...] with sizes >= 1 (e.g. 8192x4096x4096,16384x2048x8192)";
    char buf[2048];
    if (strlen(text) >= sizeof buf) return fail("--shapes", expected, text);
    strcpy(buf, text);
    opt->nshapes = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (opt->nshapes == BENCH_MAX_SHAPES) {
            fprintf(stderr, "commgemm-bench: --shapes: more than %d shapes\n",
                    BENCH_MAX_SHAPES);
            return -1;
        }
        char *dims[3], *p = tok;
        for (int d = 0; d < 3; d++) {
            dims[d] = p;
            char *x = strchr(p, 'x');
            if ((d < 2) != (x != NULL)) return fail("--shapes", expected, text);
            if (x) *x = '\0', p = x + 1;
        }
        for (int d = 0; d < 3; d++)
            if (parse_i64(dims[d], 1, (int64_t)1 << 40, &opt->shapes[opt->nshapes][d]))
                return fail("--shapes", expected, text);
        opt->nshapes++;
    }
    return opt->nshapes ? 0 : fail("--shapes", expected, text);
}

int64_t bench_run_shapes(const bench_options *opt, bench_shape **out) {
    int64_t ms[BENCH_MAX_SIZES], ns[BENCH_MAX_SIZES], ks[BENCH_MAX_SIZES], count = 0;
    int nm = bench_range_values(&opt->m, ms), nn = bench_range_values(&opt->n, ns),
        nk = bench_range_values(&opt->k, ks);
    int64_t total = opt->nshapes ? opt->nshapes : (int64_t)nm * nn * nk;
    bench_shape *shapes = malloc((size_t)total * sizeof *shapes);
    *out = shapes;
    if (!shapes) return -1;
    if (opt->nshapes) {
        for (int i = 0; i < opt->nshapes; i++)
            shapes[count++] = (bench_shape){opt->shapes[i][0], opt->shapes[i][1],
                                            opt->shapes[i][2]};
        return count;
    }
    for (int a = 0; a < nm; a++)
        for (int b = 0; b < nn; b++)
            for (int c = 0; c < nk; c++) shapes[count++] = (bench_shape){ms[a], ns[b], ks[c]};
    return count;
}

void bench_largest_shape(const bench_options *opt, int64_t *m, int64_t *n,
                         int64_t *k) {
    *m = opt->m.end, *n = opt->n.end, *k = opt->k.end;
    if (opt->nshapes == 0) return;
    *m = *n = *k = 1;
    for (int i = 0; i < opt->nshapes; i++) {
        if (opt->shapes[i][0] > *m) *m = opt->shapes[i][0];
        if (opt->shapes[i][1] > *n) *n = opt->shapes[i][1];
        if (opt->shapes[i][2] > *k) *k = opt->shapes[i][2];
    }
}

static int parse_ops(const char *text, unsigned *mask) {
    static const char *expected =
        "ag_gemm, gemm_rs, gemm_ar, bulk, a comma-separated list of them, or all";
    char buf[128];
    if (strlen(text) >= sizeof buf) return fail("--op", expected, text);
    strcpy(buf, text);
    *mask = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (strcasecmp(tok, "all") == 0) { *mask |= ALL_OPS; continue; }
        int found = 0;
        for (int op = 0; op < CGM_OP_COUNT_; op++)
            if (strcasecmp(tok, cgm_op_name((cgm_op)op)) == 0)
                *mask |= 1u << op, found = 1;
        if (!found) return fail("--op", expected, text);
    }
    return *mask ? 0 : fail("--op", expected, text);
}

static int parse_dtype(const char *text, cgm_dtype *out) {
    static const cgm_dtype dtypes[] = {CGM_DTYPE_FP32, CGM_DTYPE_BF16, CGM_DTYPE_FP16, CGM_DTYPE_FP8_E4M3};
    for (size_t i = 0; i < 4; i++)
        if (strcasecmp(text, cgm_dtype_name(dtypes[i])) == 0) {
            *out = dtypes[i];
            return 0;
        }
    if (strcasecmp(text, "fp8") == 0) {
        *out = CGM_DTYPE_FP8_E4M3;
        return 0;
    }
    return fail("--dtype", "fp32, bf16, fp16 or fp8", text);
}

static int parse_scaling(const char *text, cgm_scaling *out) {
    if (strcasecmp(text, "tensor") == 0) *out = CGM_SCALING_TENSOR;
    else if (strcasecmp(text, "block") == 0) *out = CGM_SCALING_BLOCK_1X128;
    else return fail("--scaling", "tensor or block", text);
    return 0;
}

/* --scaling and --layout against --dtype, once every option is read. */
static int check_fp8(bench_options *opt) {
    if (opt->dtype != CGM_DTYPE_FP8_E4M3) {
        if (opt->scaling == CGM_SCALING_NONE) return 0;
        fprintf(stderr, "commgemm-bench: --scaling %s: scales are for --dtype fp8, got --dtype %s; pass "
                "--dtype fp8 or drop --scaling\n", opt->scaling == CGM_SCALING_TENSOR ? "tensor" : "block",
                cgm_dtype_name(opt->dtype));
        return -1;
    }
    if (opt->scaling == CGM_SCALING_NONE) opt->scaling = CGM_SCALING_TENSOR;
    if (opt->layout != CGM_LAYOUT_TN) {
        fprintf(stderr, "commgemm-bench: --layout %s with --dtype fp8: fp8 takes layout TN only (Hopper's FP8 "
                "tensor cores read both operands K-major); drop --layout or pass TN\n",
                cgm_layout_name(opt->layout));
        return -1;
    }
    return 0;
}

cgm_dtype bench_out_dtype(const bench_options *opt) {
    return opt->dtype == CGM_DTYPE_FP8_E4M3 ? CGM_DTYPE_BF16 : opt->dtype;
}

cgm_dtype bench_coll_dtype(const bench_options *opt) { return bench_out_dtype(opt); }

int64_t bench_coll_cols(const bench_options *opt, int64_t k) {
    return opt->dtype == CGM_DTYPE_FP8_E4M3 ? (k + 1) / 2 : k;
}

static int parse_layout(const char *text, cgm_layout *out) {
    for (int l = 0; l < CGM_LAYOUT_COUNT_; l++)
        if (strcasecmp(text, cgm_layout_name((cgm_layout)l)) == 0) {
            *out = (cgm_layout)l;
            return 0;
        }
    return fail("--layout", "TN, NN or NT", text);
}

static int parse_backend(const char *text, cgm_backend *out) {
    if (cgm_backend_from_name(text, out) != CGM_SUCCESS || *out == CGM_BACKEND_DEFAULT)
        return fail("--backend", "auto, host, p2p, nccl or cublasmp", text);
    return 0;
}

static int parse_algo(const char *text, cgm_algo *out) {
    if (cgm_algo_from_name(text, out) != CGM_SUCCESS || *out == CGM_ALGO_BULK)
        return fail("--algo", "auto, split, ring, no_overlap or fused", text);
    return 0;
}

int bench_parse_options(int argc, char **argv, bench_options *opt) {
    enum {
        OPT_OP = 256, OPT_DTYPE, OPT_BACKEND, OPT_ALGO, OPT_SPLITS, OPT_LAYOUT,
        OPT_CHECK, OPT_NO_CHECK, OPT_JSON, OPT_SEED, OPT_RANKS, OPT_TIMEOUT,
        OPT_SHAPES, OPT_GRAPH, OPT_COMM_BASELINE, OPT_INJECT_WRONG_VALUE, OPT_PARTIALS,
        OPT_SCALING, OPT_EPILOGUE, OPT_BIAS
    };
    static const struct option long_options[] = {
        {"op", required_argument, NULL, OPT_OP},
        {"shapes", required_argument, NULL, OPT_SHAPES},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"scaling", required_argument, NULL, OPT_SCALING},
        {"epilogue", required_argument, NULL, OPT_EPILOGUE},
        {"bias", no_argument, NULL, OPT_BIAS},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"algo", required_argument, NULL, OPT_ALGO},
        {"splits", required_argument, NULL, OPT_SPLITS},
        {"layout", required_argument, NULL, OPT_LAYOUT},
        {"partials", required_argument, NULL, OPT_PARTIALS},
        {"warmup", required_argument, NULL, 'w'},
        {"iters", required_argument, NULL, 'i'},
        {"check", no_argument, NULL, OPT_CHECK},
        {"no-check", no_argument, NULL, OPT_NO_CHECK},
        {"graph", no_argument, NULL, OPT_GRAPH},
        {"comm-baseline", required_argument, NULL, OPT_COMM_BASELINE},
        {"json", required_argument, NULL, OPT_JSON},
        {"seed", required_argument, NULL, OPT_SEED},
        {"ranks", required_argument, NULL, OPT_RANKS},
        {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
        {"inject-wrong-value", no_argument, NULL, OPT_INJECT_WRONG_VALUE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    static const bench_range default_size = {512, 512, 2};
    memset(opt, 0, sizeof *opt);
    opt->op_mask = ALL_OPS;
    opt->m = opt->n = opt->k = default_size;
    opt->dtype = CGM_DTYPE_FP32;
    opt->backend = CGM_BACKEND_DEFAULT;
    opt->algo = CGM_ALGO_AUTO;
    opt->layout = CGM_LAYOUT_TN;
    opt->warmup = 5;
    opt->iters = 20;
    opt->check = 1;
    opt->seed = 1;
    opt->timeout_ms = CGM_UNSET;
    optind = 1;
    opterr = 0;
    int c, rc = 0;
    int64_t v;
    while (rc == 0 && (c = getopt_long(argc, argv, ":m:n:k:w:i:h", long_options, NULL)) != -1) {
        switch (c) {
        case 'm': rc = parse_range("-m", optarg, &opt->m); break;
        case 'n': rc = parse_range("-n", optarg, &opt->n); break;
        case 'k': rc = parse_range("-k", optarg, &opt->k); break;
        case 'w': rc = parse_int("--warmup", optarg, 0, 100000, &opt->warmup); break;
        case 'i': rc = parse_int("--iters", optarg, 1, 100000, &opt->iters); break;
        case OPT_OP: rc = parse_ops(optarg, &opt->op_mask); break;
        case OPT_SHAPES: rc = parse_shapes(optarg, opt); break;
        case OPT_DTYPE: rc = parse_dtype(optarg, &opt->dtype); break;
        case OPT_SCALING: rc = parse_scaling(optarg, &opt->scaling); break;
        case OPT_BACKEND: rc = parse_backend(optarg, &opt->backend); break;
        case OPT_ALGO: rc = parse_algo(optarg, &opt->algo); break;
        case OPT_SPLITS: rc = parse_int("--splits", optarg, 0, 4096, &opt->splits); break;
        case OPT_LAYOUT: rc = parse_layout(optarg, &opt->layout); break;
        case OPT_EPILOGUE:
            if (cgm_epilogue_from_name(optarg, &opt->epilogue) != CGM_SUCCESS)
                rc = fail("--epilogue", "none, gelu, gelu_aux, dgelu, dgelu_bgrad or bgrad", optarg);
            break;
        case OPT_PARTIALS:
            if (cgm_partial_dtype_from_name(optarg, &opt->partials) != CGM_SUCCESS ||
                opt->partials == CGM_PARTIAL_DTYPE_DEFAULT)
                rc = fail("--partials", "fp32 or output", optarg);
            break;
        case OPT_CHECK: opt->check = 1; break;
        case OPT_NO_CHECK: opt->check = 0; break;
        case OPT_GRAPH: opt->graph = 1; break;
        case OPT_COMM_BASELINE:
            if (!strcmp(optarg, "env")) opt->comm_library = 0;
            else if (!strcmp(optarg, "library")) opt->comm_library = 1;
            else rc = fail("--comm-baseline", "env or library", optarg);
            break;
        case OPT_JSON: opt->json_path = optarg; break;
        case OPT_SEED:
            if (parse_i64(optarg, 0, INT64_MAX, &v))
                rc = fail("--seed", "an integer >= 0", optarg);
            opt->seed = (uint64_t)v;
            break;
        case OPT_RANKS:
            if (strcmp(optarg, "auto") == 0) opt->ranks = BENCH_RANKS_AUTO;
            else if (parse_i64(optarg, 1, 1024, &v) == 0) opt->ranks = (int)v;
            else rc = fail("--ranks", "an integer from 1 to 1024 or auto", optarg);
            break;
        case OPT_TIMEOUT:
            if (parse_i64(optarg, 1, INT64_MAX, &opt->timeout_ms))
                rc = fail("--timeout-ms", "a number of milliseconds >= 1", optarg);
            break;
        case OPT_INJECT_WRONG_VALUE: opt->inject_wrong_value = 1; break;
        case OPT_BIAS: opt->bias = 1; break;
        case 'h': usage(stdout); return 1;
        case ':':
            fprintf(stderr, "commgemm-bench: option '%s' needs a value\n",
                    argv[optind - 1]);
            rc = -1;
            break;
        default:
            fprintf(stderr, "commgemm-bench: unknown option '%s'; see "
                    "'commgemm-bench --help'\n", argv[optind - 1]);
            rc = -1;
            break;
        }
    }
    if (rc == 0 && optind < argc) {
        fprintf(stderr, "commgemm-bench: unexpected argument '%s'; see "
                "'commgemm-bench --help'\n", argv[optind]);
        rc = -1;
    }
    if (rc == 0) rc = check_fp8(opt);
    if (rc == 0 && opt->epilogue == CGM_EPILOGUE_BGRAD && opt->op_mask != 1u << CGM_OP_BULK) {
        fprintf(stderr, "commgemm-bench: --epilogue bgrad: it is bulk's GEMM's only (it sums an input of a local "
                "GEMM); pass --op bulk, or another epilogue\n");
        rc = -1;
    }
    if (rc == 0 && opt->bias &&
        (opt->epilogue == CGM_EPILOGUE_DGELU || opt->epilogue == CGM_EPILOGUE_DGELU_BGRAD ||
         opt->epilogue == CGM_EPILOGUE_BGRAD)) {
        fprintf(stderr, "commgemm-bench: --bias with --epilogue %s: that epilogue takes no bias (commgemm.h "
                "\"Epilogues\"); pass --bias with none, gelu or gelu_aux, or leave it out\n",
                cgm_epilogue_name(opt->epilogue));
        rc = -1;
    }
    return rc;
}

static void print_range(FILE *to, const bench_range *r) {
    if (r->start == r->end)
        fprintf(to, "%" PRId64, r->start);
    else
        fprintf(to, "%" PRId64 ":%" PRId64 ":%" PRId64, r->start, r->end, r->factor);
}

void bench_print_options(FILE *to, const bench_options *opt) {
    fprintf(to, "# ops:");
    for (int op = 0; op < CGM_OP_COUNT_; op++)
        if (opt->op_mask & (1u << op)) fprintf(to, " %s", cgm_op_name((cgm_op)op));
    if (opt->nshapes) {
        fprintf(to, "  shapes (m x n x k):");
        for (int i = 0; i < opt->nshapes; i++)
            fprintf(to, "%s%" PRId64 "x%" PRId64 "x%" PRId64, i ? "," : " ",
                    opt->shapes[i][0], opt->shapes[i][1], opt->shapes[i][2]);
    } else {
        fprintf(to, "  m: ");
        print_range(to, &opt->m);
        fprintf(to, "  n: ");
        print_range(to, &opt->n);
        fprintf(to, "  k: ");
        print_range(to, &opt->k);
    }
    fprintf(to, "  dtype: %s  layout: %s  partials: %s", cgm_dtype_name(opt->dtype),
            cgm_layout_name(opt->layout), cgm_partial_dtype_name(opt->partials));
    if (opt->scaling != CGM_SCALING_NONE)
        fprintf(to, "  scaling: %s  output: %s", opt->scaling == CGM_SCALING_TENSOR ? "tensor" : "block",
                cgm_dtype_name(bench_out_dtype(opt)));
    fprintf(to, "  epilogue: %s%s\n", cgm_epilogue_name(opt->epilogue), opt->bias ? "  bias: on" : "");
    fprintf(to, "# backend: %s  algo: %s  splits: %d  warmup: %d  iters: %d  "
            "check: %s  graph: %s  seed: %" PRIu64 "  timeout_ms: ",
            opt->backend == CGM_BACKEND_DEFAULT ? "default" : cgm_backend_name(opt->backend),
            cgm_algo_name(opt->algo), opt->splits, opt->warmup, opt->iters,
            opt->check ? "on" : "off", opt->graph ? "on" : "off", opt->seed);
    if (opt->timeout_ms == CGM_UNSET) fprintf(to, "default");
    else fprintf(to, "%" PRId64, opt->timeout_ms);
    fprintf(to, "  comm baseline: %s%s\n", opt->comm_library ? "library" : "env",
            opt->inject_wrong_value ? "  inject wrong value: on" : "");
}

void bench_json_options(FILE *to, const bench_options *opt) {
    fprintf(to, "{\"ops\": [");
    const char *sep = "";
    for (int op = 0; op < CGM_OP_COUNT_; op++)
        if (opt->op_mask & (1u << op)) {
            fprintf(to, "%s\"%s\"", sep, cgm_op_name((cgm_op)op));
            sep = ", ";
        }
    fprintf(to, "], \"m\": [%" PRId64 ", %" PRId64 ", %" PRId64 "]", opt->m.start,
            opt->m.end, opt->m.factor);
    fprintf(to, ", \"n\": [%" PRId64 ", %" PRId64 ", %" PRId64 "]", opt->n.start,
            opt->n.end, opt->n.factor);
    fprintf(to, ", \"k\": [%" PRId64 ", %" PRId64 ", %" PRId64 "]", opt->k.start,
            opt->k.end, opt->k.factor);
    fprintf(to, ", \"shapes\": [");
    for (int i = 0; i < opt->nshapes; i++)
        fprintf(to, "%s[%" PRId64 ", %" PRId64 ", %" PRId64 "]", i ? ", " : "",
                opt->shapes[i][0], opt->shapes[i][1], opt->shapes[i][2]);
    fprintf(to, "]");
    fprintf(to, ", \"partials\": \"%s\", \"epilogue\": \"%s\", \"bias\": %s",
            cgm_partial_dtype_name(opt->partials), cgm_epilogue_name(opt->epilogue), opt->bias ? "true" : "false");
    if (opt->scaling != CGM_SCALING_NONE)
        fprintf(to, ", \"scaling\": \"%s\", \"output_dtype\": \"%s\"",
                opt->scaling == CGM_SCALING_TENSOR ? "tensor" : "block", cgm_dtype_name(bench_out_dtype(opt)));
    fprintf(to, ", \"dtype\": \"%s\", \"layout\": \"%s\", \"backend\": \"%s\", "
            "\"algo\": \"%s\", \"splits\": %d, \"warmup\": %d, \"iters\": %d, "
            "\"check\": %s, \"graph\": %s, \"seed\": %" PRIu64 ", \"timeout_ms\": ",
            cgm_dtype_name(opt->dtype), cgm_layout_name(opt->layout),
            cgm_backend_name(opt->backend), cgm_algo_name(opt->algo), opt->splits,
            opt->warmup, opt->iters, opt->check ? "true" : "false",
            opt->graph ? "true" : "false", opt->seed);
    if (opt->timeout_ms == CGM_UNSET) fprintf(to, "null");
    else fprintf(to, "%" PRId64, opt->timeout_ms);
    fprintf(to, ", \"comm_baseline\": \"%s\"}", opt->comm_library ? "library" : "env");
}
