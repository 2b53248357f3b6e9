/* Cross-rank agreement: what every rank must pass identically. */
#include <stdio.h>

#include "core.h"

static const char *field_names[CGM_SIGNATURE_WORDS] = {
    "op", "layout", "input dtype", "output dtype", "m", "k", "n", "bias presence", "accumulate",
    "algorithm", "splits", "backend", "parts (GEMM/collective)", "collective", "collective rows",
    "collective cols"};

void cgm_call_signature(const cgm_call *c, int64_t s[CGM_SIGNATURE_WORDS]) {
    bool bulk = c->op == CGM_OP_BULK;
    for (int i = 0; i < CGM_SIGNATURE_WORDS; i++) s[i] = -1;
    s[0] = c->op;
    s[9] = c->algo;
    s[10] = c->splits;
    s[11] = c->backend;
    s[12] = (c->has_gemm ? 1 : 0) | (c->has_collective ? 2 : 0);
    if (!bulk) {
        /* The bulk GEMM is local: its shape and options may differ per rank. */
        s[1] = c->layout;
        s[2] = c->in_dtype;
        s[3] = c->out_dtype;
        s[4] = c->m;
        s[7] = c->has_bias;
        s[8] = c->accumulate;
        if (c->op == CGM_OP_ALL_GATHER_GEMM) s[5] = c->k; /* n_loc may differ */
        else s[6] = c->n;                                  /* k_loc may differ */
    } else {
        s[12] = c->has_collective ? 2 : 0; /* GEMM-only ranks beside collective ones would hang */
    }
    if (c->has_collective) {
        s[13] = (int64_t)c->collective * 16 + c->coll_dtype;
        s[14] = c->coll_m;
        s[15] = c->coll_cols;
    }
}

static void describe(int field, int64_t v, char *buf, size_t len) {
    switch (field) {
    case 0: snprintf(buf, len, "%s", cgm_op_name((cgm_op)v)); break;
    case 1: snprintf(buf, len, "%s", cgm_layout_name((cgm_layout)v)); break;
    case 2:
    case 3: snprintf(buf, len, "%s", cgm_dtype_name((cgm_dtype)v)); break;
    case 9: snprintf(buf, len, "%s", cgm_algo_name((cgm_algo)v)); break;
    case 11: snprintf(buf, len, "%s", cgm_backend_name((cgm_backend)v)); break;
    case 13:
        snprintf(buf, len, "%s of %s", v / 16 == CGM_COLLECTIVE_ALL_GATHER ? "all-gather" : "reduce-scatter",
                 cgm_dtype_name((cgm_dtype)(v % 16)));
        break;
    default: snprintf(buf, len, "%lld", (long long)v); break;
    }
}

cgm_status cgm_signature_compare(const cgm_comm *comm, const int64_t *all) {
    for (int r = 1; r < comm->nranks; r++) {
        const int64_t *s = all + (size_t)r * CGM_SIGNATURE_WORDS;
        for (int f = 0; f < CGM_SIGNATURE_WORDS; f++) {
            if (s[f] == all[f]) continue;
            char mine[64], theirs[64];
            describe(f, all[f], mine, sizeof mine);
            describe(f, s[f], theirs, sizeof theirs);
            return cgm_error(CGM_ERROR_MISMATCH,
                             "ranks disagree about the %s call: rank %d passed %s = %s but rank 0 passed %s = "
                             "%s; every rank must make the same call with the same %s",
                             cgm_op_name((cgm_op)all[0]), r, field_names[f], theirs, field_names[f], mine,
                             field_names[f]);
        }
    }
    return CGM_SUCCESS;
}
