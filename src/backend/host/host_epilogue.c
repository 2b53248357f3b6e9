/* The epilogues on the host backend, the reference of the header's
 * "Epilogues": per row of the caller's output, in fp32, before the row's
 * one rounding (host_exec.c's store_row calls host_epilogue_row); the bias
 * gradients once the plan ran (host_epilogue_end): DGELU_BGRAD's column
 * sums in a fixed row order, summed over the ranks for GEMM+RS through
 * the GATHER segments; BGRAD's sums of op(A). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host/host.h"

#define GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_A 0.044715f

/* gelu(t) = 0.5 t (1 + tanh(c (t + a t^3))), the tanh form. */
static float gelu(float t) {
    return 0.5f * t * (1.0f + tanhf(GELU_C * (t + GELU_A * t * t * t)));
}

/* Its derivative: 0.5 (1 + th) + 0.5 t (1 - th^2) c (1 + 3 a t^2), th the
 * tanh above. Where th is +-1 in fp32 the second term is 0 (not 0 * inf
 * for a huge t). */
static float dgelu(float t) {
    float th = tanhf(GELU_C * (t + GELU_A * t * t * t));
    float sech2 = 1.0f - th * th;
    float slope = sech2 == 0.0f ? 0.0f : 0.5f * t * sech2 * GELU_C * (1.0f + 3.0f * GELU_A * t * t);
    return 0.5f * (1.0f + th) + slope;
}

bool host_epilogue_acts(const cgm_call *call) {
    return call->epilogue == CGM_EPILOGUE_GELU || call->epilogue == CGM_EPILOGUE_GELU_AUX ||
           call->epilogue == CGM_EPILOGUE_DGELU || call->epilogue == CGM_EPILOGUE_DGELU_BGRAD;
}

cgm_status host_epilogue_begin(host_epilogue *e, const cgm_call *call, int slots) {
    memset(e, 0, sizeof *e);
    e->call = call;
    e->rows = host_epilogue_acts(call);
    if (call->epilogue != CGM_EPILOGUE_DGELU_BGRAD || call->n == 0) return CGM_SUCCESS;
    e->slots = slots > 0 ? slots : 1;
    e->colsum = calloc((size_t)e->slots * (size_t)call->n, sizeof *e->colsum);
    e->first = malloc((size_t)e->slots * sizeof *e->first);
    if (!e->colsum || !e->first) {
        host_epilogue_free(e);
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for the bias gradient's column sums (%d x %lld floats), found none free; "
                         "use a smaller n", e->slots, (long long)call->n);
    }
    for (int i = 0; i < e->slots; i++) e->first[i] = -1;
    return CGM_SUCCESS;
}

void host_epilogue_free(host_epilogue *e) {
    free(e->colsum);
    free(e->first);
    e->colsum = NULL;
    e->first = NULL;
}

void host_epilogue_row(host_epilogue *e, int slot, int64_t y_row, float *v, int64_t n, const cgm_matrix *bias) {
    const cgm_call *c = e->call;
    if (c->epilogue == CGM_EPILOGUE_GELU || c->epilogue == CGM_EPILOGUE_GELU_AUX) {
        bool keep = c->epilogue == CGM_EPILOGUE_GELU_AUX;
        int64_t base = y_row * cgm_matrix_ld(&c->aux);
        for (int64_t j = 0; j < n; j++) {
            float t = v[j] + (bias ? cgm_load_float(bias->data, bias->dtype, j) : 0.0f);
            if (keep) cgm_store_float(c->aux.data, c->aux.dtype, base + j, t);
            v[j] = gelu(t);
        }
        return;
    }
    /* DGELU, DGELU_BGRAD (no bias: validated) */
    int64_t base = y_row * cgm_matrix_ld(&c->aux);
    for (int64_t j = 0; j < n; j++) v[j] *= dgelu(cgm_load_float(c->aux.data, c->aux.dtype, base + j));
    if (!e->colsum || slot < 0 || slot >= e->slots) return;
    float *sum = e->colsum + (size_t)slot * (size_t)n;
    if (e->first[slot] < 0 || y_row < e->first[slot]) e->first[slot] = y_row;
    for (int64_t j = 0; j < n; j++) sum[j] += v[j];
}

/* The slots' sums in the order of their first rows (the same pieces on
 * every rank, so the same sum), into out[n]. */
static cgm_status ordered_colsum(const host_epilogue *e, int64_t n, float *out) {
    int *order = malloc((size_t)e->slots * sizeof *order);
    if (!order)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "expected memory to order %d column sums, found none free",
                         e->slots);
    int used = 0;
    for (int i = 0; i < e->slots; i++) {
        if (e->first[i] < 0) continue;
        int at = used++;
        while (at > 0 && e->first[order[at - 1]] > e->first[i]) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = i;
    }
    memset(out, 0, (size_t)n * sizeof *out);
    for (int u = 0; u < used; u++) {
        const float *sum = e->colsum + (size_t)order[u] * (size_t)n;
        for (int64_t j = 0; j < n; j++) out[j] += sum[j];
    }
    free(order);
    return CGM_SUCCESS;
}

/* v[n] = the sum over the ranks (in rank order, so the same on every rank)
 * of every rank's v, through the ranks' GATHER segments. Three barriers:
 * every rank's plan is done (no peer reads a GATHER any more), every
 * rank's sums are in place, every rank has read them (so a later op may
 * rewrite GATHER). Bounded by the comm's timeout. */
static cgm_status sum_over_ranks(const cgm_comm *comm, host_state *st, float *v, int64_t n, const char *op_name) {
    size_t bytes = (size_t)n * sizeof *v;
    for (int r = 0; r < st->nranks; r++)
        if (st->peers[r].bytes[HOST_SEG_GATHER] < bytes)
            return cgm_error(CGM_ERROR_INTERNAL,
                             "expected rank %d's GATHER workspace (%zu bytes) to hold the %zu bytes of the bias "
                             "gradient; please report this bug", r, st->peers[r].bytes[HOST_SEG_GATHER], bytes);
    char what[96];
    snprintf(what, sizeof what, "%s's bias gradient", op_name);
    cgm_status s = host_barrier(comm, st, what);
    if (s != CGM_SUCCESS) return s;
    memcpy(st->peers[st->rank].base[HOST_SEG_GATHER], v, bytes);
    if ((s = host_barrier(comm, st, what))) return s;
    memset(v, 0, bytes);
    for (int r = 0; r < st->nranks; r++) {
        const float *theirs = st->peers[r].base[HOST_SEG_GATHER];
        for (int64_t j = 0; j < n; j++) v[j] += theirs[j];
    }
    return host_barrier(comm, st, what);
}

/* BGRAD: out[i] = sum over l of op(A)(i, l), A the fp32 values `a` as
 * stored ([m, k], or [k, m] with layout NT), each sum in l order. */
static void row_sums(const cgm_call *c, const cgm_matrix *a, float *out) {
    int64_t ld = cgm_matrix_ld(a);
    const float *data = a->data;
    memset(out, 0, (size_t)c->m * sizeof *out);
    if (c->layout == CGM_LAYOUT_NT) {
        for (int64_t l = 0; l < c->k; l++)
            for (int64_t i = 0; i < c->m; i++) out[i] += data[l * ld + i];
        return;
    }
    for (int64_t i = 0; i < c->m; i++)
        for (int64_t l = 0; l < c->k; l++) out[i] += data[i * ld + l];
}

cgm_status host_epilogue_end(const cgm_comm *comm, host_state *st, const host_epilogue *e, const host_run *run,
                             const cgm_matrix *a32) {
    const cgm_call *c = e->call;
    if (!c->has_bgrad) return CGM_SUCCESS;
    int64_t n = c->bgrad.cols;
    if (n == 0) return CGM_SUCCESS; /* the same on every rank: RS's n agrees */
    float *sums = malloc((size_t)n * sizeof *sums);
    if (!sums)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "expected memory for %lld bias-gradient sums, found none free",
                         (long long)n);
    cgm_status s = CGM_SUCCESS;
    if (c->epilogue == CGM_EPILOGUE_BGRAD) {
        row_sums(c, a32, sums);
    } else {
        s = ordered_colsum(e, n, sums);
        /* RS: each rank summed its shard; the layer's m rows are every rank's */
        if (s == CGM_SUCCESS && run->op == PLAN_OP_GEMM_RS && st->nranks > 1)
            s = sum_over_ranks(comm, st, sums, n, run->op_name);
    }
    for (int64_t j = 0; s == CGM_SUCCESS && j < n; j++) cgm_store_float(c->bgrad.data, c->bgrad.dtype, j, sums[j]);
    free(sums);
    return s;
}
