/* One checked call of test_cublasmp_gpu (inputs every rank can regenerate,
 * a double reference, the op, the comparison) and the sweeps over
 * op x dtype x layout x shape x bias/accumulate. */
#include <stdlib.h>
#include <string.h>

#include "cublasmp_gpu.h"

static cgm_matrix to_device(const cgm_matrix *h) {
    cgm_matrix d = *h;
    size_t bytes = (size_t)(h->rows * (h->ld ? h->ld : h->cols)) *
                   cgm_dtype_size(h->dtype);
    d.data = NULL;
    if (bytes && cudaMalloc(&d.data, bytes) != cudaSuccess)
        TEST_FAIL("cudaMalloc(%zu)", bytes);
    return d;
}

static void upload(const cgm_matrix *h, cgm_matrix *d) {
    size_t bytes = (size_t)(h->rows * (h->ld ? h->ld : h->cols)) *
                   cgm_dtype_size(h->dtype);
    /* An empty shard still needs its descriptor (0 x n, the right dtype):
     * a zeroed one (0 x 0, fp32) fails validation on that rank alone and
     * leaves the other ranks in the collective call. */
    if (!d->data) *d = to_device(h);
    if (bytes) cudaMemcpy(d->data, h->data, bytes, cudaMemcpyHostToDevice);
}

static void to_host(cgm_matrix *h, const cgm_matrix *d) {
    size_t bytes = (size_t)(h->rows * (h->ld ? h->ld : h->cols)) *
                   cgm_dtype_size(h->dtype);
    if (bytes) cudaMemcpy(h->data, d->data, bytes, cudaMemcpyDeviceToHost);
}

/* X of rank q: [rows, k] (TN, NN) or [k, rows] (NT). W: [n, k] or [k, n]. */
static cgm_matrix make_x(const call_spec *s, int64_t rows, int64_t k, int q) {
    bool nt = s->layout == CGM_LAYOUT_NT;
    cgm_matrix x = test_alloc(s->in, nt ? k : rows, nt ? rows : k, s->pad);
    test_fill(&x, s->seed * 1000 + 11 + 7 * (uint64_t)q);
    return x;
}

static cgm_matrix make_w(const call_spec *s, int64_t n, int64_t k, int q) {
    bool tn = s->layout == CGM_LAYOUT_TN;
    cgm_matrix w = test_alloc(s->in, tn ? n : k, tn ? k : n, s->pad);
    test_fill(&w, s->seed * 1000 + 13 + 7 * (uint64_t)q);
    return w;
}

void call_setup(int rank, int P, const call_spec *s, call_data *cd) {
    const bool ag = s->op == CGM_OP_ALL_GATHER_GEMM;
    const bool rs = s->op == CGM_OP_GEMM_REDUCE_SCATTER;
    const bool nt = s->layout == CGM_LAYOUT_NT;
    memset(cd, 0, sizeof *cd);
    const int64_t n_loc = ag ? cgm_shard_rows(s->n, rank, P) : s->n;
    const int64_t y_rows = rs ? cgm_shard_rows(s->m, rank, P) : s->m;
    const int64_t y_off = rs ? cgm_shard_offset(s->m, rank, P) : 0;
    cd->n_loc = n_loc;
    cd->y_rows = y_rows;
    double *ref = calloc((size_t)(s->m * (n_loc ? n_loc : 1)), sizeof *ref);
    double *part = calloc((size_t)(s->m * (s->n ? s->n : 1)), sizeof *part);
    if (ag) {
        /* Reference from the gathered X (fp32 holds the values exactly). */
        cgm_matrix g = test_alloc(CGM_DTYPE_FP32, nt ? s->k : s->m,
                                  nt ? s->m : s->k, 0);
        for (int q = 0; q < P; q++) {
            int64_t rows = cgm_shard_rows(s->m, q, P);
            int64_t off = cgm_shard_offset(s->m, q, P);
            cgm_matrix xq = make_x(s, rows, s->k, q);
            for (int64_t i = 0; i < xq.rows; i++)
                for (int64_t j = 0; j < xq.cols; j++)
                    cgm_store_float(g.data, CGM_DTYPE_FP32,
                                    nt ? i * s->m + off + j : (off + i) * s->k + j,
                                    (float)test_get(&xq, i, j));
            if (q == rank) cd->x = xq;
            else test_free(&xq);
        }
        cd->w = make_w(s, n_loc, s->k, rank);
        test_ref_gemm(s->layout, &g, &cd->w, s->m, n_loc, s->k, ref);
        test_free(&g);
    } else {
        for (int q = 0; q < P; q++) {
            int64_t kq = cgm_shard_rows(s->k, q, P);
            cgm_matrix xq = make_x(s, s->m, kq, q), wq = make_w(s, s->n, kq, q);
            test_ref_gemm(s->layout, &xq, &wq, s->m, s->n, kq, part);
            for (int64_t i = 0; i < y_rows; i++)
                for (int64_t j = 0; j < s->n; j++)
                    ref[i * s->n + j] += part[(y_off + i) * s->n + j];
            if (q == rank) {
                cd->x = xq;
                cd->w = wq;
            } else {
                test_free(&xq);
                test_free(&wq);
            }
        }
    }
    cd->bias = test_alloc(s->out, 1, n_loc, 0);
    test_fill(&cd->bias, s->seed * 1000 + 17 + (ag ? 7 * (uint64_t)rank : 0));
    cd->y = test_alloc(s->out, y_rows, n_loc, s->pad);
    if (s->accumulate) test_fill(&cd->y, s->seed * 1000 + 19 + 7 * (uint64_t)rank);
    for (int64_t i = 0; i < y_rows; i++)
        for (int64_t j = 0; j < n_loc; j++)
            ref[i * n_loc + j] += (s->bias ? test_get(&cd->bias, 0, j) : 0) +
                                  (s->accumulate ? test_get(&cd->y, i, j) : 0);
    cd->ref = ref;
    free(part);
    snprintf(cd->what, sizeof cd->what, "%s %s %s->%s m=%lld n=%lld k=%lld "
             "pad=%lld bias=%d acc=%d algo=%s (rank %d of %d)",
             cgm_op_name(s->op), cgm_layout_name(s->layout),
             cgm_dtype_name(s->in), cgm_dtype_name(s->out), (long long)s->m,
             (long long)s->n, (long long)s->k, (long long)s->pad, s->bias,
             s->accumulate, cgm_algo_name(s->algo), rank, P);
}

void call_upload(const call_data *cd, call_data *dev) {
    upload(&cd->x, &dev->dx);
    upload(&cd->w, &dev->dw);
    upload(&cd->bias, &dev->db);
    upload(&cd->y, &dev->dy);
}

cgm_status call_issue(cgm_comm *comm, cudaStream_t stream, const call_spec *s,
                      call_data *dev) {
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.layout = s->layout;
    o.accumulate = s->accumulate;
    o.backend = s->backend;
    o.algo = s->algo;
    const cgm_matrix *pb = s->bias ? &dev->db : NULL;
    if (s->op == CGM_OP_ALL_GATHER_GEMM)
        return cgm_all_gather_gemm(comm, &dev->dx, &dev->dw, pb, &dev->dy,
                                   NULL, &o, stream);
    if (s->op == CGM_OP_GEMM_REDUCE_SCATTER)
        return cgm_gemm_reduce_scatter(comm, &dev->dx, &dev->dw, pb, &dev->dy,
                                       &o, stream);
    return cgm_gemm_all_reduce(comm, &dev->dx, &dev->dw, pb, &dev->dy, &o,
                               stream);
}

int call_verify(int rank, cudaStream_t stream, const call_spec *s,
                call_data *cd, const call_data *dev) {
    if (g_report) g_report[rank].phase = PHASE_SYNC;
    cudaError_t e = cudaStreamSynchronize(stream);
    if (g_report) g_report[rank].phase = PHASE_IDLE;
    if (e != cudaSuccess) {
        printf("FAILED %s: stream: %s\n", cd->what, cudaGetErrorString(e));
        return CALL_WRONG;
    }
    to_host(&cd->y, &dev->dy);
    double tol = test_tolerance(s->in, s->out, s->k);
    return test_compare(&cd->y, cd->ref, cd->y_rows, cd->n_loc, tol,
                        cd->what) != 0 ? CALL_WRONG : CALL_OK;
}

void call_free_host(call_data *cd) {
    test_free(&cd->x);
    test_free(&cd->w);
    test_free(&cd->bias);
    test_free(&cd->y);
    free(cd->ref);
    cd->ref = NULL;
}

void call_free_device(call_data *cd) {
    cudaFree(cd->dx.data);
    cudaFree(cd->dw.data);
    cudaFree(cd->db.data);
    cudaFree(cd->dy.data);
}

int check_call(int rank, int P, cgm_comm *comm, cudaStream_t stream,
               const call_spec *s) {
    call_data cd;
    call_setup(rank, P, s, &cd);
    call_upload(&cd, &cd);
    if (g_report) {
        snprintf(g_report[rank].doing, sizeof g_report[rank].doing, "%s",
                 cd.what);
        g_report[rank].phase = PHASE_CALL;
    }
    cgm_status st = call_issue(comm, stream, s, &cd);
    if (g_report) g_report[rank].phase = PHASE_IDLE;
    int result;
    if (st == CGM_ERROR_TIMEOUT) {
        /* The comm is broken and a kernel may still spin: no cleanup. */
        printf("FAILURE %s: %s\n", cd.what, cgm_last_error());
        if (g_report) g_report[rank].counts[CALL_TIMEOUT]++;
        return CALL_TIMEOUT;
    } else if (s->expect_reject) {
        const char *msg = cgm_last_error();
        if (st == CGM_ERROR_NOT_SUPPORTED &&
            strstr(msg, "only with even shards") && strstr(msg, "p2p or nccl")) {
            result = CALL_REJECTED;
        } else {
            printf("FAILED %s: expected NOT_SUPPORTED (the even-shards rule), "
                   "found %s: %s\n", cd.what, cgm_status_string(st),
                   st == CGM_SUCCESS ? "it ran" : msg);
            if (st == CGM_SUCCESS) (void)cudaStreamSynchronize(stream);
            result = CALL_WRONG;
        }
        if (rank == 0 && result == CALL_REJECTED && s->seed % 100 == 0)
            printf("REJECTED as expected %s: %s\n", cd.what, msg);
    } else if (st == CGM_ERROR_NOT_SUPPORTED) {
        if (rank == 0) printf("NOT_SUPPORTED %s: %s\n", cd.what, cgm_last_error());
        result = CALL_NOT_SUPPORTED;
    } else if (st != CGM_SUCCESS) {
        printf("FAILED %s: %s: %s\n", cd.what, cgm_status_string(st),
               cgm_last_error());
        result = CALL_WRONG;
    } else {
        result = call_verify(rank, stream, s, &cd, &cd);
    }
    if (g_report) g_report[rank].counts[result]++;
    call_free_device(&cd);
    call_free_host(&cd);
    return result;
}

/* ----------------------------------------------------------- sweeps */

static const struct { cgm_dtype in, out; } dtypes[] = {
    {CGM_DTYPE_BF16, CGM_DTYPE_BF16}, {CGM_DTYPE_FP16, CGM_DTYPE_FP16},
    {CGM_DTYPE_BF16, CGM_DTYPE_FP32}, {CGM_DTYPE_FP32, CGM_DTYPE_FP32}};
/* m, n, k, pad, every bias/accumulate variant (else none and both).
 * Over 2 ranks 0, 3 and 5 split evenly; 1, 2 and 4 do not (2 has m < P:
 * rank 1 would hold no rows; 4 has an even m but uneven n and k, refused
 * after the first-call exchange instead of before it). */
static const struct { int64_t m, n, k, pad; bool variants; } shapes[] = {
    {64, 64, 64, 0, false},  {131, 97, 71, 8, true}, {1, 16, 16, 0, false},
    {256, 200, 136, 0, false}, {64, 97, 71, 0, false}, {128, 96, 64, 8, true}};

bool cublasmp_refuses(const call_spec *s, int P) {
    if (s->backend != CGM_BACKEND_DEFAULT && s->backend != CGM_BACKEND_CUBLASMP)
        return false;
    return s->m % P != 0 ||
           (s->op == CGM_OP_ALL_GATHER_GEMM ? s->n : s->k) % P != 0;
}

/* Returns the number of wrong calls; stops at a timeout (broken comm).
 * Shapes the backend refuses (uneven at P > 1) must be refused. */
static int sweep(int rank, int P, cgm_comm *comm, cudaStream_t stream,
                 cgm_op op, unsigned shape_mask, cgm_algo algo) {
    int counts[CALL_KINDS] = {0};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        if (shape_mask && !(shape_mask & (1u << si))) continue;
        for (size_t di = 0; di < sizeof dtypes / sizeof dtypes[0]; di++)
            for (int L = 0; L < CGM_LAYOUT_COUNT_; L++)
                for (int v = 0; v < 4; v++) {
                    if (!shapes[si].variants && (v == 1 || v == 2)) continue;
                    call_spec s = {op, (cgm_layout)L, dtypes[di].in,
                                   dtypes[di].out, shapes[si].m, shapes[si].n,
                                   shapes[si].k, shapes[si].pad, v & 1, v >> 1,
                                   CGM_BACKEND_DEFAULT, algo,
                                   si * 100 + di * 10 + (uint64_t)L * 4 + (uint64_t)v,
                                   false};
                    s.expect_reject = cublasmp_refuses(&s, P);
                    int r = check_call(rank, P, comm, stream, &s);
                    counts[r]++;
                    if (r == CALL_TIMEOUT) goto done;
                }
    }
done:
    printf("# %s P=%d rank %d: %d ok, %d rejected as expected (uneven), "
           "%d not supported, %d wrong%s\n",
           cgm_op_name(op), P, rank, counts[CALL_OK], counts[CALL_REJECTED],
           counts[CALL_NOT_SUPPORTED], counts[CALL_WRONG],
           counts[CALL_TIMEOUT] ? ", stopped at a timeout" : "");
    return counts[CALL_WRONG] + counts[CALL_TIMEOUT];
}

int body_sweep(int r, int P, cgm_comm *c, cudaStream_t s) {
    return sweep(r, P, c, s, g_case->op, g_case->shapes, g_case->algo);
}

int body_all(int r, int P, cgm_comm *c, cudaStream_t s) {
    int wrong = 0;
    const cgm_op ops[] = {CGM_OP_ALL_GATHER_GEMM, CGM_OP_GEMM_REDUCE_SCATTER,
                          CGM_OP_GEMM_ALL_REDUCE};
    for (int i = 0; i < 3; i++) {
        wrong += sweep(r, P, c, s, ops[i], 0, CGM_ALGO_AUTO);
        if (g_report && g_report[r].counts[CALL_TIMEOUT]) break;
    }
    return wrong;
}

/* The simplest call of the op (even split, TN, bf16, no options), twice:
 * the first run of a shape is bounded by the backend (timeout_ms), the
 * second (cached descriptors) only by the case. */
int body_first(int r, int P, cgm_comm *c, cudaStream_t s) {
    int wrong = 0;
    for (int rep = 0; rep < 2; rep++) {
        call_spec sp = {g_case->op, CGM_LAYOUT_TN, CGM_DTYPE_BF16,
                        CGM_DTYPE_BF16, 64, 64, 64, 0, false, false,
                        CGM_BACKEND_DEFAULT, g_case->algo, 5 + (uint64_t)rep,
                        false};
        int res = check_call(r, P, c, s, &sp);
        printf("# first %s call %d (%s) P=%d rank %d: %s\n",
               cgm_op_name(sp.op), rep + 1, cgm_algo_name(sp.algo), P, r,
               res == CALL_OK ? "ok" : res == CALL_NOT_SUPPORTED
                   ? "not supported" : res == CALL_TIMEOUT ? "TIMEOUT"
                                                          : "wrong");
        if (res == CALL_TIMEOUT) return wrong + 1;
        wrong += res != CALL_OK;
    }
    return wrong;
}
