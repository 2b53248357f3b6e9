/* Cross-rank agreement: what every rank must pass identically. */
#include <stdio.h>

#include "core.h"

/* Word 13 is the collective of a bulk call and the partial dtype of
 * GEMM+RS and GEMM+AR (AG+GEMM has neither); words 14 and 15 the bulk
 * collective's shape, or the other ops' W dtype and fp8 recipe (with
 * GEMM+AR's y_amax, which adds an exchange): no word to spare, and the
 * exchanges that carry signatures are sized for 16. */
enum { WORD_EPILOGUE = 7, WORD_COLLECTIVE_OR_PARTIAL = 13, WORD_W_DTYPE = 14, WORD_FP8 = 15 };
/* Word 7 holds the epilogue with the presence of bias, aux and bgrad:
 * epilogue * 8 + bias + 2 aux + 4 bgrad (NONE without bias: 0, as the
 * bias presence word was). */

static const char *field_names[CGM_SIGNATURE_WORDS] = {
    "op", "layout", "input dtype", "output dtype", "m", "k", "n", "epilogue (with bias, aux, bgrad)", "accumulate",
    "algorithm", "splits", "backend", "parts (GEMM/collective)", "collective", "collective rows",
    "collective cols"};

static const char *field_name(int64_t op, int field) {
    if (op == CGM_OP_BULK) return field_names[field];
    if (field == WORD_COLLECTIVE_OR_PARTIAL) return "partial dtype";
    if (field == WORD_W_DTYPE) return "w dtype";
    if (field == WORD_FP8) return "fp8 scaling (and GEMM+AR's y_amax)";
    return field_names[field];
}

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
        s[WORD_EPILOGUE] = (int64_t)c->epilogue * 8 + c->has_bias + 2 * c->has_aux + 4 * c->has_bgrad;
        s[8] = c->accumulate;
        if (c->op == CGM_OP_ALL_GATHER_GEMM) {
            s[5] = c->k; /* n_loc may differ */
        } else {
            s[6] = c->n; /* k_loc may differ */
            s[WORD_COLLECTIVE_OR_PARTIAL] = c->partial_dtype;
        }
        s[WORD_W_DTYPE] = c->w_dtype;
        s[WORD_FP8] = (int64_t)c->scaling * 2 + (c->op == CGM_OP_GEMM_ALL_REDUCE && c->y_amax);
    } else {
        s[12] = c->has_collective ? 2 : 0; /* GEMM-only ranks beside collective ones would hang */
    }
    if (c->has_collective) {
        s[WORD_COLLECTIVE_OR_PARTIAL] = (int64_t)c->collective * 16 + c->coll_dtype;
        s[14] = c->coll_m;
        s[15] = c->coll_cols;
    }
}

static void describe(int64_t op, int field, int64_t v, char *buf, size_t len) {
    if ((field == WORD_COLLECTIVE_OR_PARTIAL || field == WORD_W_DTYPE) && op != CGM_OP_BULK) {
        snprintf(buf, len, "%s", cgm_dtype_name((cgm_dtype)v));
        return;
    }
    if (field == WORD_EPILOGUE && op != CGM_OP_BULK) {
        snprintf(buf, len, "%s%s%s%s", cgm_epilogue_name((cgm_epilogue)(v / 8)), v & 1 ? " with bias" : "",
                 v & 2 ? " with aux" : "", v & 4 ? " with bgrad" : "");
        return;
    }
    if (field == WORD_FP8 && op != CGM_OP_BULK) {
        snprintf(buf, len, "%s%s", cgm_scaling_name((cgm_scaling)(v / 2)), v % 2 ? " with y_amax" : "");
        return;
    }
    switch (field) {
    case 0: snprintf(buf, len, "%s", cgm_op_name((cgm_op)v)); break;
    case 1: snprintf(buf, len, "%s", cgm_layout_name((cgm_layout)v)); break;
    case 2:
    case 3: snprintf(buf, len, "%s", cgm_dtype_name((cgm_dtype)v)); break;
    case 9: snprintf(buf, len, "%s", cgm_algo_name((cgm_algo)v)); break;
    case 11: snprintf(buf, len, "%s", cgm_backend_name((cgm_backend)v)); break;
    case WORD_COLLECTIVE_OR_PARTIAL:
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
            /* op (word 0) is compared first: past it, both ranks make the same op */
            const char *name = field_name(all[0], f);
            describe(all[0], f, all[f], mine, sizeof mine);
            describe(all[0], f, s[f], theirs, sizeof theirs);
            return cgm_error(CGM_ERROR_MISMATCH,
                             "ranks disagree about the %s call: rank %d passed %s = %s but rank 0 passed %s = "
                             "%s; every rank must make the same call with the same %s",
                             cgm_op_name((cgm_op)all[0]), r, name, theirs, name, mine, name);
        }
    }
    return CGM_SUCCESS;
}
