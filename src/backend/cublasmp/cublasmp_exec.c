/* The cublasmp backend's op path: descriptor cache, the collective
 * preparation of a new shape, and the cublasMpMatmul call. */
#include <stdlib.h>
#include <string.h>

#include "backend/cublasmp/cublasmp_state.h"

/* What every rank sends when a shape is first seen. */
typedef struct prep_record {
    int64_t signature[CGM_SIGNATURE_WORDS];
    int64_t n_local, k_local;
} prep_record;

/* ... and once its descriptors are built. */
typedef struct ready_record {
    int64_t status; /* cgm_status of this rank's preparation */
    int64_t dev_bytes, stage_bytes;
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

static int64_t effective_ld(const cgm_matrix *m) {
    return m->ld ? m->ld : m->cols;
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
    k.ldx = effective_ld(&c->x);
    k.ldw = effective_ld(&c->w);
    k.ldy = effective_ld(&c->y);
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

static const char *grid_name(cmp_grid g) {
    return g == CMP_GRID_COL ? "Px1" : "1xP";
}

/* Local part of the preparation: descriptors, attributes, buffer sizes. */
static cgm_status build_entry(cmp_state *st, const cgm_call *c, cmp_entry *e,
                              const cmp_shape *shape, int algo) {
    cgm_status status = CGM_SUCCESS;
    const cmp_api *api = st->api;
    const cmp_problem *p = &e->prob;
    char context[160];
    int in_type = 0, out_type = 0;
    CGM_TRY(cmp_map_dtype(c->in_dtype, &in_type));
    CGM_TRY(cmp_map_dtype(c->out_dtype, &out_type));
    CGM_TRY(cmp_map_problem(shape, &e->prob));
    snprintf(context, sizeof context, "%s %s %s->%s m=%lld n=%lld k=%lld P=%d",
             cgm_op_name(c->op), cgm_layout_name(c->layout),
             cgm_dtype_name(c->in_dtype), cgm_dtype_name(c->out_dtype),
             (long long)shape->m, (long long)shape->n_total,
             (long long)shape->k_total, st->nranks);
    const cmp_geom *g[3] = {&p->a, &p->b, &p->d};
    cublasMpMatrixDescriptor_t *out[3] = {&e->a, &e->b, &e->d};
    for (int i = 0; i < 3; i++)
        CMP_TRY(api->MatrixDescriptorCreate(g[i]->rows, g[i]->cols, g[i]->mb,
                                            g[i]->nb, 0, 0, g[i]->lld,
                                            i < 2 ? in_type : out_type,
                                            st->grid[g[i]->grid], out[i]),
                context);
    CMP_TRY(api->MatmulDescriptorCreate(&e->mm, e->key.compute), context);
    int epilogue = (p->allreduce ? CUBLASMP_MATMUL_EPILOGUE_ALLREDUCE : 0) |
                   (c->has_bias ? CUBLASMP_MATMUL_EPILOGUE_BIAS : 0);
    CMP_TRY(api->MatmulDescriptorAttributeSet(
                e->mm, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_TRANSA, &p->trans_a,
                sizeof p->trans_a), context);
    CMP_TRY(api->MatmulDescriptorAttributeSet(
                e->mm, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_TRANSB, &p->trans_b,
                sizeof p->trans_b), context);
    CMP_TRY(api->MatmulDescriptorAttributeSet(
                e->mm, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_ALGO_TYPE, &algo,
                sizeof algo), context);
    CMP_TRY(api->MatmulDescriptorAttributeSet(
                e->mm, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_EPILOGUE, &epilogue,
                sizeof epilogue), context);
    if (c->has_bias) {
        CMP_TRY(api->MatmulDescriptorAttributeSet(
                    e->mm, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_DATA_TYPE,
                    &out_type, sizeof out_type), context);
        CMP_TRY(api->MatmulDescriptorAttributeSet(
                    e->mm, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_POINTER,
                    &c->bias.data, sizeof c->bias.data), context);
    }
    const float alpha = 1.0f, beta = c->accumulate ? 1.0f : 0.0f;
    CMP_TRY(api->Matmul_bufferSize(
                st->handle, e->mm, p->m, p->n, p->k, &alpha, c->w.data, 1, 1,
                e->a, c->x.data, 1, 1, e->b, &beta,
                c->accumulate ? c->y.data : NULL, 1, 1,
                c->accumulate ? e->d : NULL, c->y.data, 1, 1, e->d,
                &e->dev_bytes, &e->host_bytes), context);
    /* cuBLASMp 0.7 overlaps AG+GEMM when B (our X shard) is NVSHMEM memory
     * ("allocate B using nvshmem_malloc"): stage it there. The whole
     * ld x rows region, since the descriptor's lld spans it. */
    if (c->op == CGM_OP_ALL_GATHER_GEMM && st->ws_symmetric &&
        c->x.rows > 0 && c->x.cols > 0)
        e->stage_bytes = (size_t)(c->x.rows * e->key.ldx) *
                         cgm_dtype_size(c->in_dtype);
    if (e->host_bytes) {
        e->host_ws = malloc(e->host_bytes);
        if (!e->host_ws) {
            status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "malloc(%zu) of "
                               "cuBLASMp's host workspace", e->host_bytes);
            goto fail;
        }
    }
    CGM_INFO(CGM_SUB_CUBLASMP, "%s: cuBLASMp m=%lld n=%lld k=%lld op(A)=%s "
             "op(B)=%s A %lldx%lld/%lldx%lld %s B %lldx%lld/%lldx%lld %s D "
             "%lldx%lld/%lldx%lld %s algo=%d epilogue=%d workspace %zu B "
             "device, %zu B host",
             context, (long long)p->m, (long long)p->n, (long long)p->k,
             p->trans_a ? "T" : "N", p->trans_b ? "T" : "N",
             (long long)p->a.rows, (long long)p->a.cols, (long long)p->a.mb,
             (long long)p->a.nb, grid_name(p->a.grid), (long long)p->b.rows,
             (long long)p->b.cols, (long long)p->b.mb, (long long)p->b.nb,
             grid_name(p->b.grid), (long long)p->d.rows, (long long)p->d.cols,
             (long long)p->d.mb, (long long)p->d.nb, grid_name(p->d.grid),
             algo, epilogue, e->dev_bytes, e->host_bytes);
fail:
    return status;
}

/* Collective: every rank grows *buf to the same size, in the same call.
 * The outgrown buffer is kept (a captured graph may still use it) while
 * room lasts. */
static cgm_status grow(cmp_state *st, void **buf, size_t *cur, size_t bytes,
                       const char *what) {
    cgm_status status = CGM_SUCCESS;
    if (bytes <= *cur) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaDeviceSynchronize());
    if (*buf) {
        if (st->nretired < CMP_RETIRED_MAX) st->retired[st->nretired++] = *buf;
        else if (st->ws_symmetric) st->api->nvshmem_free(*buf);
        else cudaFree(*buf);
        *buf = NULL;
        *cur = 0;
    }
    if (st->ws_symmetric) {
        *buf = st->api->nvshmem_malloc(bytes);
        if (!*buf)
            return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                             "nvshmem_malloc(%zu) of the cublasmp backend's "
                             "%s returned NULL: expected room in NVSHMEM's "
                             "symmetric heap; raise NVSHMEM_SYMMETRIC_SIZE or "
                             "use smaller shapes", bytes, what);
    } else {
        CGM_CUDA_TRY(cudaMalloc(buf, bytes));
    }
    *cur = bytes;
    CGM_INFO(CGM_SUB_CUBLASMP, "cublasmp %s: %zu bytes (%s)", what, bytes,
             st->ws_symmetric ? "nvshmem_malloc" : "cudaMalloc: no overlap");
fail:
    return status;
}

/* First call of a shape (collective, eager): agree, build, size. */
static cgm_status prepare(cmp_state *st, const cgm_call *c,
                          const cmp_key *key, int algo, cmp_entry **out) {
    cgm_status status = CGM_SUCCESS, local = CGM_SUCCESS;
    const int P = st->nranks;
    prep_record mine, *all = calloc((size_t)P, sizeof *all);
    ready_record ready, *readies = calloc((size_t)P, sizeof *readies);
    int64_t *sigs = calloc((size_t)P * CGM_SIGNATURE_WORDS, sizeof *sigs);
    int64_t *sizes = calloc((size_t)P, sizeof *sizes);
    cmp_entry *e = NULL;
    if (!all || !readies || !sigs || !sizes) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of %d records", P);
        goto fail;
    }
    memset(&mine, 0, sizeof mine);
    cgm_call_signature(c, mine.signature);
    mine.n_local = c->n;
    mine.k_local = c->k;
    CGM_TRY(cgm_nccl_allgather_host(st->comm->nccl_comm, P, &mine, all,
                                    sizeof mine, st->timeout_ms));
    for (int r = 0; r < P; r++) {
        memcpy(sigs + (size_t)r * CGM_SIGNATURE_WORDS, all[r].signature,
               sizeof all[r].signature);
        sizes[r] = c->op == CGM_OP_ALL_GATHER_GEMM ? all[r].n_local
                                                   : all[r].k_local;
    }
    if (st->comm->config.check_agreement)
        CGM_TRY(cgm_signature_compare(st->comm, sigs));
    int64_t total = 0;
    bool ag = c->op == CGM_OP_ALL_GATHER_GEMM;
    CGM_TRY(cmp_check_split(sizes, P, ag ? "n (rows of W, columns of Y)"
                                         : "k (the contraction)", &total));
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
    local = build_entry(st, c, e, &shape, algo);
    memset(&ready, 0, sizeof ready);
    ready.status = local;
    ready.dev_bytes = local == CGM_SUCCESS ? (int64_t)e->dev_bytes : 0;
    ready.stage_bytes = local == CGM_SUCCESS ? (int64_t)e->stage_bytes : 0;
    CGM_TRY(cgm_nccl_allgather_host(st->comm->nccl_comm, P, &ready, readies,
                                    sizeof ready, st->timeout_ms));
    size_t need = 0, stage = 0;
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
        if ((size_t)readies[r].dev_bytes > need)
            need = (size_t)readies[r].dev_bytes;
        if ((size_t)readies[r].stage_bytes > stage)
            stage = (size_t)readies[r].stage_bytes;
    }
    if (local != CGM_SUCCESS) {
        status = local; /* the detail is this rank's own */
        goto fail;
    }
    CGM_TRY(grow(st, &st->ws, &st->ws_bytes, need, "workspace"));
    CGM_TRY(grow(st, &st->stage, &st->stage_bytes, stage,
                 "AG operand staging buffer"));
    *out = e;
done:
    free(all);
    free(readies);
    free(sigs);
    free(sizes);
    return CGM_SUCCESS;
fail:
    if (e) entry_clear(st->api, e);
    free(all);
    free(readies);
    free(sigs);
    free(sizes);
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
    if (c->op == CGM_OP_GEMM_ALL_REDUCE && c->layout != CGM_LAYOUT_TN)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "the cublasmp backend runs GEMM+AR in layout TN only "
                         "(cuBLASMp 0.7's GEMM+AllReduce supports TN), found "
                         "%s; use p2p or nccl for GEMM+AR in %s",
                         cgm_layout_name(c->layout), cgm_layout_name(c->layout));
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
    if (!e) {
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
    }
    e->last_use = ++st->clock;
    if (e->empty) return CGM_SUCCESS;
    const cmp_problem *p = &e->prob;
    if (c->has_bias)
        CMP_TRY(api->MatmulDescriptorAttributeSet(
                    e->mm, CUBLASMP_MATMUL_DESCRIPTOR_ATTRIBUTE_BIAS_POINTER,
                    &c->bias.data, sizeof c->bias.data), "the bias pointer");
    const void *b = c->x.data;
    if (e->stage_bytes) {
        /* Only the bytes the matrix covers: the last row's padding may lie
         * past the caller's allocation. */
        size_t es = cgm_dtype_size(c->in_dtype);
        size_t used = (size_t)((c->x.rows - 1) * e->key.ldx + c->x.cols) * es;
        CGM_CUDA_TRY(cudaMemcpyAsync(st->stage, c->x.data, used,
                                     cudaMemcpyDeviceToDevice, stream));
        b = st->stage;
    }
    const float alpha = 1.0f, beta = c->accumulate ? 1.0f : 0.0f;
    CMP_TRY(api->StreamSet(st->handle, stream), "the caller's stream");
    CMP_TRY(api->Matmul(st->handle, e->mm, p->m, p->n, p->k, &alpha,
                        c->w.data, 1, 1, e->a, b, 1, 1, e->b, &beta,
                        c->accumulate ? c->y.data : NULL, 1, 1,
                        c->accumulate ? e->d : NULL, c->y.data, 1, 1, e->d,
                        st->ws, st->ws_bytes, e->host_ws, e->host_bytes),
            cgm_op_name(c->op));
fail:
    return status;
}
