/* The cublasmp backend's op path: descriptor cache, the collective
 * preparation of a new shape, the cublasMpMatmul call and the pass that
 * finishes Y (fp32 D -> Y, or the bias). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cublasmp/cublasmp_state.h"

/* What every rank sends when a shape is first seen. */
typedef struct prep_record {
    int64_t signature[CGM_SIGNATURE_WORDS];
    int64_t n_local, k_local;
    int64_t stage_bytes; /* AG: this rank's X shard, for the staging copy */
} prep_record;

/* ... and once its descriptors are built. */
typedef struct ready_record {
    int64_t status; /* cgm_status of this rank's preparation */
    int64_t symm;   /* cgm_status of its symmetric allocation (staging) */
    int64_t dev_bytes;
} ready_record;

static void entry_clear(const cmp_api *api, cmp_entry *e) {
    if (e->mm) api->MatmulDescriptorDestroy(e->mm);
    if (e->a) api->MatrixDescriptorDestroy(e->a);
    if (e->b) api->MatrixDescriptorDestroy(e->b);
    if (e->d) api->MatrixDescriptorDestroy(e->d);
    free(e->host_ws);
    memset(e, 0, sizeof *e);
}

void cmp_cache_clear(cmp_state *st) {
    for (int i = 0; i < CMP_CACHE; i++)
        if (st->cache[i].used) entry_clear(st->api, &st->cache[i]);
}

static cmp_key make_key(const cgm_call *c, int compute, int algo) {
    cmp_key k;
    memset(&k, 0, sizeof k);
    k.op = c->op;
    k.layout = c->layout;
    k.in_dtype = c->in_dtype;
    k.out_dtype = c->out_dtype;
    k.has_bias = c->has_bias;
    k.accumulate = c->accumulate;
    k.compute = compute;
    k.algo = algo;
    k.m = c->m;
    k.n = c->n;
    k.k = c->k;
    k.ldx = cgm_matrix_ld(&c->x);
    k.ldw = cgm_matrix_ld(&c->w);
    k.ldy = cgm_matrix_ld(&c->y);
    /* What the descriptor's attributes depend on (cmp_descriptor_attrs);
     * the pointers are set again at every call. */
    k.w_dtype = c->w_dtype;
    k.bias_dtype = c->has_bias ? (int)c->bias.dtype : -1;
    k.epilogue = c->epilogue;
    k.has_aux = c->has_aux;
    k.ld_aux = c->has_aux ? cgm_matrix_ld(&c->aux) : 0;
    k.bgrad_dtype = c->has_bgrad ? (int)c->bgrad.dtype : -1;
    k.has_amax = c->y_amax != NULL;
    return k;
}

static cmp_entry *cache_find(cmp_state *st, const cmp_key *key) {
    for (int i = 0; i < CMP_CACHE; i++)
        if (st->cache[i].used && !memcmp(&st->cache[i].key, key, sizeof *key))
            return &st->cache[i];
    return NULL;
}

/* Every rank evicts the same entry: the cache sees the same calls. */
static cmp_entry *cache_victim(cmp_state *st) {
    cmp_entry *victim = &st->cache[0];
    for (int i = 0; i < CMP_CACHE; i++) {
        if (!st->cache[i].used) return &st->cache[i];
        if (st->cache[i].last_use < victim->last_use) victim = &st->cache[i];
    }
    entry_clear(st->api, victim);
    return victim;
}

/* Local part of the preparation: descriptors, attributes, buffer sizes.
 * `b` and `d` are the pointers cublasMpMatmul will get (the staging buffer,
 * the fp32 D), so that cuBLASMp sizes its workspace for what it will see. */
static cgm_status build_entry(cmp_state *st, const cgm_call *c, cmp_entry *e,
                              const cmp_shape *shape, int algo, const void *b,
                              void *d) {
    cgm_status status = CGM_SUCCESS;
    const cmp_api *api = st->api;
    const cmp_problem *p = &e->prob;
    char context[160];
    int a_type = 0, b_type = 0, out_type = 0;
    CGM_TRY(cmp_map_dtype(c->w_dtype, &a_type));
    CGM_TRY(cmp_map_dtype(c->in_dtype, &b_type));
    CGM_TRY(cmp_map_dtype(c->out_dtype, &out_type));
    snprintf(context, sizeof context, "%s %s %s->%s m=%lld n=%lld k=%lld P=%d",
             cgm_op_name(c->op), cgm_layout_name(c->layout),
             cgm_dtype_name(c->in_dtype), cgm_dtype_name(c->out_dtype),
             (long long)shape->m, (long long)shape->n_total,
             (long long)shape->k_total, st->nranks);
    e->dgeom = p->d;
    e->a_type = a_type;
    e->b_type = b_type;
    e->d_type = out_type;
    if (e->out.fp32_d) {
        e->dgeom.lld = e->out.d_lld;
        e->d_type = CMP_CUDA_R_32F;
    }
    const cmp_geom *g[3] = {&p->a, &p->b, &e->dgeom};
    const int types[3] = {a_type, b_type, e->d_type};
    const char *names[3] = {"A (W)", "B (X)", e->out.fp32_d ? "D (fp32 buffer)"
                                                             : "D (Y)"};
    cublasMpMatrixDescriptor_t *out[3] = {&e->a, &e->b, &e->d};
    for (int i = 0; i < 3; i++) {
        cmp_trace_descriptor(st, names[i], g[i], types[i]);
        CMP_TRY(api->MatrixDescriptorCreate(g[i]->rows, g[i]->cols, g[i]->mb,
                                            g[i]->nb, 0, 0, g[i]->lld,
                                            types[i], st->grid[g[i]->grid],
                                            out[i]),
                context);
    }
    CMP_TRY(api->MatmulDescriptorCreate(&e->mm, e->key.compute), context);
    /* TRANSA/B, the algorithm, the epilogue (ALLREDUCE for the native
     * GEMM+AR; the GELU family on AG+GEMM), fp8 scale modes; then this
     * call's pointers (scales, amax, aux, bias / bgrad), set again at every
     * call (cmp_execute). The bias goes to cuBLASMp only inside GELU_BIAS /
     * GELU_AUX_BIAS; otherwise commgemm adds it (cmp_plan_output). */
    cmp_attrs fixed, per_call;
    cmp_descriptor_attrs(c, p, algo, &fixed);
    cmp_call_attrs(c, &per_call);
    const int epilogue = (int)fixed.a[3].value; /* EPILOGUE */
    CGM_TRACE(CGM_SUB_CUBLASMP, "cublasMpMatmulDescriptorCreate(compute=%d) "
              "-> %p; TRANSA=%d TRANSB=%d ALGO_TYPE=%d (%s) EPILOGUE=%d (%s), "
              "%d more attributes, %d pointers per call", e->key.compute,
              (void *)e->mm, p->trans_a, p->trans_b, algo,
              cmp_algo_type_name(algo), epilogue,
              cmp_bias_in_epilogue(c) ? "bias in cuBLASMp's epilogue"
                                      : "commgemm adds any bias",
              fixed.n - 4, per_call.n);
    CGM_TRY(cmp_apply_attrs(api, e->mm, &fixed, context));
    CGM_TRY(cmp_apply_attrs(api, e->mm, &per_call, context));
    const float alpha = 1.0f;
    const float beta = c->accumulate && !e->out.fp32_d ? 1.0f : 0.0f;
    const void *cptr = beta != 0.0f ? d : NULL;
    cmp_trace_matmul(st, "cublasMpMatmul_bufferSize", e, &alpha, c->w.data, b,
                     &beta, cptr, d, NULL, 0, NULL, 0, NULL);
    CMP_TRY(api->Matmul_bufferSize(
                st->handle, e->mm, p->m, p->n, p->k, &alpha, c->w.data, 1, 1,
                e->a, b, 1, 1, e->b, &beta, cptr, 1, 1, cptr ? e->d : NULL, d,
                1, 1, e->d, &e->dev_bytes, &e->host_bytes), context);
    CGM_TRACE(CGM_SUB_CUBLASMP, "cublasMpMatmul_bufferSize -> %zu B device, "
              "%zu B host", e->dev_bytes, e->host_bytes);
    if (e->host_bytes) {
        e->host_ws = malloc(e->host_bytes);
        if (!e->host_ws) {
            status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "malloc(%zu) of "
                               "cuBLASMp's host workspace", e->host_bytes);
            goto fail;
        }
    }
    CGM_INFO(CGM_SUB_CUBLASMP, "%s: cuBLASMp m=%lld n=%lld k=%lld op(A)=%s "
             "op(B)=%s algo=%d epilogue=%d B %s, D %s, bias %s; workspace %zu "
             "B device, %zu B host",
             context, (long long)p->m, (long long)p->n, (long long)p->k,
             p->trans_a ? "T" : "N", p->trans_b ? "T" : "N", algo, epilogue,
             e->staged ? "staged in symmetric memory" : "the caller's",
             p->native_ar ? "fp32 buffer (cuBLASMp's Matmul + AllReduce) + "
                            "fp32 pass into Y"
             : e->out.gather ? "fp32 buffer + ncclAllGather + fp32 pass into Y"
             : e->out.fp32_d ? "fp32 buffer + fp32 pass into Y" : "Y",
             !c->has_bias ? "none" : e->out.fp32_d ? "in the fp32 pass"
                                                   : "in-place pass",
             e->dev_bytes, e->host_bytes);
fail:
    return status;
}

/* Collective: every rank grows *buf (symmetric memory) to the same size,
 * in the same call. The device is idle first: an outgrown buffer beyond
 * the retired ones is freed. */
static cgm_status grow(cmp_state *st, void **buf, size_t *cur, size_t bytes,
                       const char *what) {
    cgm_status status = CGM_SUCCESS;
    if (bytes <= *cur) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaDeviceSynchronize());
    status = cmp_symm_grow(&st->symm, buf, cur, bytes, what);
fail:
    return status;
}

/* After a collective symmetric allocation, every rank's outcome (all[r]):
 * all succeeded: CGM_SUCCESS; all failed: the local error, and the comm
 * stays consistent (no rank holds the new buffer); some failed: the ranks
 * now hold different buffers, and the next collective allocation or free
 * would pair wrongly, so the comm is broken. */
static cgm_status symm_agree(cmp_state *st, cgm_status local,
                             const int64_t *all, size_t stride,
                             const char *what) {
    int failed = -1, ok = 0;
    for (int r = 0; r < st->nranks; r++) {
        const int64_t v = *(const int64_t *)((const char *)all + r * stride);
        if (v == CGM_SUCCESS) ok++;
        else if (failed < 0) failed = r;
    }
    if (failed < 0) return CGM_SUCCESS;
    if (ok == 0) return local != CGM_SUCCESS ? local
                 : cgm_error(CGM_ERROR_INTERNAL, "symm_agree: no failure");
    cgm_status status = local != CGM_SUCCESS ? local : CGM_ERROR_UNAVAILABLE;
    cgm_error(status, "the cublasmp backend's %s: rank %d could not allocate "
              "its NCCL symmetric memory while %d rank(s) did, so the ranks "
              "no longer hold the same symmetric buffers; the comm is broken "
              "(destroy it); that rank's cgm_last_error() says why",
              what, failed, ok);
    cgm_comm_mark_broken(st->comm, status);
    return status;
}

/* Local: the fp32 D buffer (cudaMalloc, this rank's size). */
static cgm_status grow_dbuf(cmp_state *st, size_t bytes) {
    cgm_status status = CGM_SUCCESS;
    if (bytes <= st->dbuf_bytes) return CGM_SUCCESS;
    if (st->dbuf) {
        CGM_CUDA_TRY(cudaDeviceSynchronize());
        if (st->ndretired < CMP_RETIRED_MAX)
            st->dretired[st->ndretired++] = st->dbuf;
        else
            cudaFree(st->dbuf);
        st->dbuf = NULL;
        st->dbuf_bytes = 0;
    }
    CGM_CUDA_TRY(cudaMalloc(&st->dbuf, bytes));
    st->dbuf_bytes = bytes;
    CGM_INFO(CGM_SUB_CUBLASMP, "cublasmp fp32 D buffer: %zu bytes at %p",
             bytes, st->dbuf);
fail:
    return status;
}

/* What cuBLASMp gets as D: Y, or this rank's rows of the fp32 buffer. */
static void *d_pointer(const cmp_state *st, const cgm_call *c,
                       const cmp_entry *e) {
    if (!e->out.fp32_d) return c->y.data;
    if (!e->out.d_bytes || !e->out.d_rows) return NULL;
    return (float *)st->dbuf + e->out.d_offset;
}

/* The second exchange of a first call: every rank's preparation status,
 * its staging allocation and its workspace need (*need: the maximum). */
static cgm_status agree_ready(cmp_state *st, const cgm_call *c,
                              cgm_status local, cgm_status symm,
                              const cmp_entry *e, size_t *need) {
    cgm_status status = CGM_SUCCESS;
    const int P = st->nranks;
    ready_record ready, *readies = calloc((size_t)P, sizeof *readies);
    if (!readies)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of %d records", P);
    memset(&ready, 0, sizeof ready);
    ready.status = local;
    ready.symm = symm;
    ready.dev_bytes = local == CGM_SUCCESS ? (int64_t)e->dev_bytes : 0;
    CGM_TRY(cgm_nccl_allgather_host(st->comm->nccl_comm, P, &ready, readies,
                                    sizeof ready, st->timeout_ms));
    CGM_TRY(symm_agree(st, symm, &readies[0].symm, sizeof *readies,
                       "AG operand staging buffer"));
    *need = 0;
    for (int r = 0; r < P; r++) {
        if (readies[r].status != CGM_SUCCESS && local == CGM_SUCCESS) {
            status = cgm_error((cgm_status)readies[r].status,
                               "the cublasmp backend: rank %d could not "
                               "prepare this %s call (%s); its "
                               "cgm_last_error() says why",
                               r, cgm_op_name(c->op),
                               cgm_status_string((cgm_status)readies[r].status));
            goto fail;
        }
        if ((size_t)readies[r].dev_bytes > *need)
            *need = (size_t)readies[r].dev_bytes;
    }
    status = local; /* on failure, the detail is this rank's own */
fail:
    free(readies);
    return status;
}

/* The workspace, grown on every rank to the largest need, then every
 * rank's outcome compared (symm_agree). */
static cgm_status grow_workspace(cmp_state *st, size_t need) {
    cgm_status status = CGM_SUCCESS;
    if (need <= st->ws_bytes) return CGM_SUCCESS;
    const int P = st->nranks;
    int64_t mine = grow(st, &st->ws, &st->ws_bytes, need, "workspace");
    const cgm_status local = (cgm_status)mine;
    int64_t *all = calloc((size_t)P, sizeof *all);
    if (!all)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of %d records", P);
    CGM_TRY(cgm_nccl_allgather_host(st->comm->nccl_comm, P, &mine, all,
                                    sizeof mine, st->timeout_ms));
    status = symm_agree(st, local, all, sizeof *all, "workspace");
fail:
    free(all);
    return status;
}

/* First call of a shape (collective, eager): agree, stage, build, size. */
static cgm_status prepare(cmp_state *st, const cgm_call *c,
                          const cmp_key *key, int algo, cmp_entry **out) {
    cgm_status status = CGM_SUCCESS, local = CGM_SUCCESS;
    const int P = st->nranks;
    const bool ag = c->op == CGM_OP_ALL_GATHER_GEMM;
    prep_record mine, *all = calloc((size_t)P, sizeof *all);
    int64_t *sigs = calloc((size_t)P * CGM_SIGNATURE_WORDS, sizeof *sigs);
    int64_t *sizes = calloc((size_t)P, sizeof *sizes);
    cmp_entry *e = NULL;
    if (!all || !sigs || !sizes) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of %d records", P);
        goto fail;
    }
    memset(&mine, 0, sizeof mine);
    cgm_call_signature(c, mine.signature);
    mine.n_local = c->n;
    mine.k_local = c->k;
    /* The whole ld x rows region, since the descriptor's lld spans it. */
    if (ag && c->x.rows > 0 && c->x.cols > 0)
        mine.stage_bytes = (int64_t)((size_t)(c->x.rows * key->ldx) *
                                     cgm_dtype_size(c->in_dtype));
    CGM_TRY(cgm_nccl_allgather_host(st->comm->nccl_comm, P, &mine, all,
                                    sizeof mine, st->timeout_ms));
    size_t stage = 0;
    for (int r = 0; r < P; r++) {
        memcpy(sigs + (size_t)r * CGM_SIGNATURE_WORDS, all[r].signature,
               sizeof all[r].signature);
        sizes[r] = ag ? all[r].n_local : all[r].k_local;
        if ((size_t)all[r].stage_bytes > stage)
            stage = (size_t)all[r].stage_bytes;
    }
    if (st->comm->config.check_agreement)
        CGM_TRY(cgm_signature_compare(st->comm, sigs));
    int64_t total = 0;
    CGM_TRY(cmp_check_split(sizes, P, ag ? "n (rows of W, columns of Y)"
                                         : "k (the contraction)", &total));
    /* Uneven n / k: refused from the exchanged sizes, so on every rank,
     * before anything collective is allocated. */
    CGM_TRY(cmp_check_even(c->op, c->m, ag ? total : 0, ag ? 0 : total, P));
    cmp_shape shape;
    shape.op = c->op;
    shape.layout = c->layout;
    shape.nranks = P;
    shape.m = c->m;
    shape.n_total = ag ? total : c->n;
    shape.k_total = ag ? c->k : total;
    shape.ldx = key->ldx;
    shape.ldw = key->ldw;
    shape.ldy = key->ldy;
    shape.algo_type = algo;
    if (shape.k_total == 0) {
        status = cgm_error(CGM_ERROR_NOT_SUPPORTED,
                           "the cublasmp backend needs k >= 1 (cuBLASMp "
                           "rejects empty contractions), found k = 0 on every "
                           "rank; skip the call or use p2p or nccl");
        goto fail;
    }
    e = cache_victim(st);
    e->used = true;
    e->key = *key;
    if (shape.n_total == 0) {
        e->empty = true; /* every rank's Y has no columns */
        *out = e;
        goto done;
    }
    /* Same inputs on every rank, so the same decision on every rank:
     * cuBLASMp must see B in symmetric memory everywhere or nowhere. */
    cmp_symm_plan plan;
    cmp_plan_symmetric(c->op, st->ag_stage, stage, 0, &plan);
    e->staged = plan.stage_bytes > 0;
    local = cmp_map_problem(&shape, &e->prob);
    if (local == CGM_SUCCESS)
        cmp_plan_output(&shape, st->rank, c->n, c->out_dtype,
                        c->has_bias && !cmp_bias_in_epilogue(c), &e->out);
    cgm_status symm = CGM_SUCCESS;
    if (e->staged)
        symm = grow(st, &st->stage, &st->stage_bytes, plan.stage_bytes,
                    "AG operand staging buffer");
    if (local == CGM_SUCCESS) local = symm;
    if (local == CGM_SUCCESS && e->out.d_bytes)
        local = grow_dbuf(st, e->out.d_bytes);
    if (local == CGM_SUCCESS)
        local = build_entry(st, c, e, &shape, algo,
                            e->staged ? st->stage : c->x.data,
                            d_pointer(st, c, e));
    size_t need = 0;
    CGM_TRY(agree_ready(st, c, local, symm, e, &need));
    cmp_plan_symmetric(c->op, st->ag_stage, stage, need, &plan);
    CGM_TRY(grow_workspace(st, plan.ws_bytes));
    *out = e;
done:
    free(all);
    free(sigs);
    free(sizes);
    return CGM_SUCCESS;
fail:
    if (e) entry_clear(st->api, e);
    free(all);
    free(sigs);
    free(sizes);
    return status;
}

/* The first run of a shape is waited for, bounded: a cuBLASMp or NCCL
 * kernel that waits for a peer forever becomes CGM_ERROR_TIMEOUT (the comm
 * is then broken) instead of a hang at the caller's next synchronisation. */
static cgm_status first_run_wait(cmp_state *st, const cgm_call *c,
                                 cudaStream_t stream) {
    const int64_t start = cgm_now_ns();
    for (;;) {
        cudaError_t err = cudaStreamQuery(stream);
        if (err == cudaSuccess) return CGM_SUCCESS;
        if (err != cudaErrorNotReady)
            return cgm_error(CGM_ERROR_CUDA, "the cublasmp backend's first "
                             "%s call of this shape failed on the device: %s",
                             cgm_op_name(c->op), cudaGetErrorString(err));
        int64_t waited_ms = (cgm_now_ns() - start) / 1000000;
        if (waited_ms > st->timeout_ms)
            return cgm_error(CGM_ERROR_TIMEOUT,
                             "the cublasmp backend: the first %s call of this "
                             "shape (%s m=%lld n=%lld k=%lld) did not "
                             "complete within %lld ms on rank %d of %d: "
                             "cuBLASMp's kernels wait for a peer that never "
                             "came; the comm is broken (destroy it). "
                             "COMMGEMM_DEBUG=TRACE COMMGEMM_DEBUG_SUBSYS="
                             "CUBLASMP logs every argument each rank passed",
                             cgm_op_name(c->op), cgm_layout_name(c->layout),
                             (long long)c->m, (long long)c->n,
                             (long long)c->k, (long long)st->timeout_ms,
                             st->rank, st->nranks);
        usleep(100);
    }
}

/* Y from the fp32 D (fp32 sum already done by cuBLASMp): accumulate, bias
 * and the one rounding to Y's dtype. Or, after a direct call, Y += bias in
 * place. */
static cgm_status finish_output(cmp_state *st, const cgm_call *c,
                                const cmp_entry *e, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cmp_output *o = &e->out;
    if (!o->fp32_d && !o->bias_pass) return CGM_SUCCESS;
    cgm_dev_reduce_args a;
    memset(&a, 0, sizeof a);
    a.nsources = 1;
    a.rows = o->y_rows;
    a.cols = o->y_cols;
    a.dst = c->y.data;
    a.dst_ld = e->key.ldy;
    a.dst_dtype = (int)c->out_dtype;
    a.bias = c->has_bias ? c->bias.data : NULL;
    if (o->gather) {
        /* Every rank's reduced fp32 rows into every rank's buffer, in
         * place (this rank's slice is already at its offset). */
        size_t count = (size_t)(o->d_rows * o->d_lld);
        CGM_TRACE(CGM_SUB_CUBLASMP, "ncclAllGather(send=%p, recv=%p, "
                  "count=%zu, ncclFloat, comm=%p, stream=%p) (GEMM+AR: the "
                  "reduced rows)", (void *)((float *)st->dbuf + o->d_offset),
                  st->dbuf, count, st->comm->nccl_comm, (void *)stream);
        CGM_NCCL_TRY(ncclAllGather((float *)st->dbuf + o->d_offset, st->dbuf,
                                   count, ncclFloat,
                                   (ncclComm_t)st->comm->nccl_comm, stream));
    }
    if (o->fp32_d) {
        a.src[0] = st->dbuf;
        a.src_ld[0] = o->d_lld;
        a.src_dtype = (int)CGM_DTYPE_FP32;
        a.accumulate = c->accumulate;
    } else {
        a.src[0] = c->y.data; /* in place: each element read, then written */
        a.src_ld[0] = e->key.ldy;
        a.src_dtype = (int)c->out_dtype;
        a.accumulate = 0;
    }
    CGM_TRACE(CGM_SUB_CUBLASMP, "cgm_dev_reduce(%s): rows=%lld cols=%lld "
              "src=%p ld=%lld dtype=%d -> dst=%p ld=%lld dtype=%d "
              "accumulate=%d bias=%p stream=%p",
              o->fp32_d ? "fp32 D -> Y" : "Y += bias", (long long)a.rows,
              (long long)a.cols, a.src[0], (long long)a.src_ld[0], a.src_dtype,
              a.dst, (long long)a.dst_ld, a.dst_dtype, a.accumulate, a.bias,
              (void *)stream);
    CGM_CUDA_TRY(cgm_dev_reduce(&a, st->dev, stream));
fail:
    return status;
}

cgm_status cmp_execute(cmp_state *st, const cgm_call *c) {
    cgm_status status = CGM_SUCCESS;
    const cmp_api *api = st->api;
    if (c->has_x_gathered)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend cannot return the gathered "
                         "input (cuBLASMp keeps it internal): pass "
                         "x_gathered = NULL, or use p2p or nccl for AG+GEMM "
                         "with x_gathered");
    int algo = 0, type = 0;
    CGM_TRY(cmp_map_algo(c->algo, st->algo_override, &algo));
    CGM_TRY(cmp_map_dtype(c->in_dtype, &type));
    CGM_TRY(cmp_map_dtype(c->out_dtype, &type));
    /* Empty outputs (agreed by every rank): nothing to enqueue. */
    if (c->m == 0 || (c->op != CGM_OP_ALL_GATHER_GEMM && c->n == 0))
        return CGM_SUCCESS;
    cudaStream_t stream = (cudaStream_t)c->stream;
    cmp_key key = make_key(c, cmp_map_compute(c->in_dtype, c->allow_tf32), algo);
    cmp_entry *e = cache_find(st, &key);
    bool first = false;
    if (!e) {
        /* Uneven m is refused before any exchange (m is global: every rank
         * refuses); uneven n / k after it, in prepare(). */
        CGM_TRY(cmp_check_even(c->op, c->m, 0, 0, st->nranks));
        if (cgm_stream_capturing(stream))
            return cgm_error(CGM_ERROR_INVALID_USAGE,
                             "the cublasmp backend met a new %s shape (m=%lld "
                             "n=%lld k=%lld %s) inside CUDA graph capture: "
                             "its first call builds descriptors and "
                             "workspaces collectively; call once eagerly "
                             "before capture with the same shapes and options",
                             cgm_op_name(c->op), (long long)c->m,
                             (long long)c->n, (long long)c->k,
                             cgm_layout_name(c->layout));
        CGM_TRY(prepare(st, c, &key, algo, &e));
        first = true;
    }
    e->last_use = ++st->clock;
    if (e->empty) return CGM_SUCCESS;
    const cmp_problem *p = &e->prob;
    const void *b = c->x.data;
    if (e->staged) {
        /* Only the bytes the matrix covers: the last row's padding may lie
         * past the caller's allocation. A rank with no rows copies nothing
         * but still passes the staging buffer. */
        if (c->x.rows > 0 && c->x.cols > 0) {
            size_t es = cgm_dtype_size(c->in_dtype);
            size_t used = (size_t)((c->x.rows - 1) * e->key.ldx + c->x.cols) * es;
            CGM_TRACE(CGM_SUB_CUBLASMP, "stage X: cudaMemcpyAsync(%p <- %p, "
                      "%zu B, stream %p)", st->stage, c->x.data, used,
                      (void *)stream);
            CGM_CUDA_TRY(cudaMemcpyAsync(st->stage, c->x.data, used,
                                         cudaMemcpyDeviceToDevice, stream));
        }
        b = st->stage;
    }
    void *d = d_pointer(st, c, e);
    const float alpha = 1.0f;
    const float beta = c->accumulate && !e->out.fp32_d ? 1.0f : 0.0f;
    const void *cptr = beta != 0.0f ? d : NULL;
    CMP_TRY(api->SetStream(st->handle, stream), "the caller's stream");
    if (!first) {
        /* This call's scale, amax, aux and bias pointers (prepare() set
         * the first call's). */
        cmp_attrs per_call;
        cmp_call_attrs(c, &per_call);
        CGM_TRY(cmp_apply_attrs(api, e->mm, &per_call, cgm_op_name(c->op)));
    }
    cmp_trace_matmul(st, "cublasMpMatmul", e, &alpha, c->w.data, b, &beta,
                     cptr, d, st->ws, st->ws_bytes, e->host_ws, e->host_bytes,
                     stream);
    CMP_TRY(api->Matmul(st->handle, e->mm, p->m, p->n, p->k, &alpha,
                        c->w.data, 1, 1, e->a, b, 1, 1, e->b, &beta, cptr, 1,
                        1, cptr ? e->d : NULL, d, 1, 1, e->d, st->ws,
                        st->ws_bytes, e->host_ws, e->host_bytes),
            cgm_op_name(c->op));
    CGM_TRACE(CGM_SUB_CUBLASMP, "cublasMpMatmul returned SUCCESS");
    CGM_TRY(finish_output(st, c, e, stream));
    if (first) {
        CGM_TRY(first_run_wait(st, c, stream));
        CGM_TRACE(CGM_SUB_CUBLASMP, "first run of this shape completed");
    }
fail:
    return status;
}
