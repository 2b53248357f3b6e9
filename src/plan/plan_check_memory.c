/* plan_check's data model: every row of every buffer of every rank, what it
 * holds (which global row; input rows, partial sums of which ranks, or AG
 * products; final or not), who wrote it last and, per clock component, the
 * last step that read it since. Reads need a writer that happened-before
 * them; writes need every earlier reader and the earlier writer to have
 * happened-before them. That catches every unordered conflicting pair,
 * whatever order the simulation happens to run the steps in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_check_internal.h"

int64_t check_address(const checker *ck, plan_loc at, int shard, int64_t row) {
    int64_t slot_base =
        plan_buffer_slotted(at.buf) ? (int64_t)at.slot * ck->plans[0].slot_rows
                                    : 0;
    return slot_base + row - plan_buffer_base(ck->req, at.buf, at.rank, shard);
}

static int64_t cell_index(const checker *ck, plan_loc at, int64_t address) {
    return (int64_t)at.rank * ck->cells_per_rank +
           ck->mem_first[at.rank * PLAN_BUF_COUNT + at.buf] + address;
}

int check_memory_init(checker *ck) {
    const plan *p0 = &ck->plans[0];
    int64_t cap_max[PLAN_BUF_COUNT] = {0};
    for (int r = 0; r < ck->P; r++)
        for (int b = 1; b < PLAN_BUF_COUNT; b++) {
            int64_t cap = plan_buffer_capacity(p0, (plan_buffer)b, r);
            if (cap > cap_max[b]) cap_max[b] = cap;
        }
    int64_t per_rank = 0;
    ck->mem_first = calloc((size_t)ck->P * PLAN_BUF_COUNT, sizeof(int64_t));
    if (!ck->mem_first) return check_fail(ck, "plan_check: out of memory");
    for (int b = 1; b < PLAN_BUF_COUNT; b++) {
        for (int r = 0; r < ck->P; r++)
            ck->mem_first[r * PLAN_BUF_COUNT + b] = per_rank;
        per_rank += cap_max[b];
    }
    ck->cells_per_rank = per_rank;
    size_t cells = (size_t)(ck->P * per_rank);
    ck->cells = calloc(cells ? cells : 1, sizeof *ck->cells);
    ck->readers = calloc(cells ? cells * (size_t)ck->C : 1, sizeof(int32_t));
    ck->writes = calloc(cells ? cells : 1, sizeof(int32_t));
    ck->computed = calloc((size_t)ck->P * (size_t)(ck->req->m + 1),
                          sizeof(int32_t));
    if (!ck->cells || !ck->readers || !ck->writes || !ck->computed)
        return check_fail(ck, "plan_check: out of memory for %lld rows",
                          (long long)cells);
    for (size_t i = 0; i < cells; i++) ck->cells[i].writer = -1;
    /* The caller's input is valid from the start, on its own rank only. */
    bool contribution = ck->req->op == PLAN_OP_BULK_RS;
    for (int r = 0; r < ck->P; r++) {
        plan_loc in = {r, PLAN_BUF_INPUT, 0};
        int64_t base = plan_buffer_base(ck->req, PLAN_BUF_INPUT, r, -1);
        int64_t cap = plan_buffer_capacity(p0, PLAN_BUF_INPUT, r);
        for (int64_t a = 0; a < cap; a++) {
            check_cell *c = &ck->cells[cell_index(ck, in, a)];
            c->valid = 1;
            c->kind = contribution ? CELL_SUM : CELL_DATA;
            c->mask = 1ull << r;
            c->global_minus_address = base;
        }
    }
    return 0;
}

static const char *cell_kind_name(int kind) {
    return kind == CELL_DATA      ? "input rows"
           : kind == CELL_SUM     ? "partial sums"
           : kind == CELL_PRODUCT ? "GEMM output rows"
                                  : "nothing";
}

/* The step of clock component `comp` at position `seq`. */
static int step_at(const checker *ck, int comp, int seq) {
    return ck->queue_steps[ck->queue_first[comp] + seq - 1];
}

static void note_peer_access(checker *ck, int g, int owner) {
    int rank;
    const plan_step *s = check_step(ck, g, &rank, NULL);
    int comp = check_component(ck, rank, s->queue);
    int *last = &ck->peer_access[owner * ck->C + comp];
    if (*last < ck->seq[g]) *last = ck->seq[g];
}

static int describe(const checker *ck, int g, char *buf, size_t len) {
    int rank, index;
    check_step(ck, g, &rank, &index);
    return snprintf(buf, len, "rank %d step %d", rank, index);
}

static int peer_rules(checker *ck, int g, int rank, plan_loc at,
                      bool writing) {
    if (at.rank == rank) return 0;
    if (!plan_buffer_peer_visible(at.buf))
        return check_fail_step(ck, g,
                               "accesses rank %d's %s, which peers cannot "
                               "see (only gather and recv are peer visible)",
                               at.rank, plan_buffer_name(at.buf));
    const int *clock = ck->clocks + (size_t)g * ck->C;
    if (writing) {
        bool after_owner = false;
        for (int q = 0; q < ck->Q; q++)
            if (clock[check_component(ck, at.rank, q)] > 0) after_owner = true;
        if (!after_owner)
            return check_fail_step(
                ck, g,
                "writes into rank %d's %s before any step of rank %d in this "
                "op has happened-before it (missing WAIT for its FREE)",
                at.rank, plan_buffer_name(at.buf), at.rank);
    }
    note_peer_access(ck, g, at.rank);
    return 0;
}

static int read_row(checker *ck, int g, plan_loc at, int shard, int64_t row,
                    check_cell *out) {
    int rank;
    const plan_step *s = check_step(ck, g, &rank, NULL);
    if (peer_rules(ck, g, rank, at, false)) return -1;
    int64_t address = check_address(ck, at, shard, row);
    int64_t idx = cell_index(ck, at, address);
    check_cell *c = &ck->cells[idx];
    const int *clock = ck->clocks + (size_t)g * ck->C;
    /* A writer that is not ordered before the read is a race whatever it
     * wrote, so it is reported before the content. */
    if (c->writer >= 0 && !check_before(ck, c->writer, clock)) {
        char who[64];
        describe(ck, c->writer, who, sizeof who);
        return check_fail_step(
            ck, g,
            "read-after-write hazard: reads row %lld of rank %d's %s[%d] "
            "written by %s, which has not happened-before it (missing WAIT "
            "or dependency)",
            (long long)row, at.rank, plan_buffer_name(at.buf), at.slot, who);
    }
    if (!c->valid)
        return check_fail_step(ck, g,
                               "reads row %lld of rank %d's %s[%d], which "
                               "holds no data: no write to it happened-before "
                               "this read (missing COPY, WAIT or dependency)",
                               (long long)row, at.rank,
                               plan_buffer_name(at.buf), at.slot);
    if (c->global_minus_address != row - address)
        return check_fail_step(
            ck, g,
            "reads row %lld at address %lld of rank %d's %s[%d], which "
            "holds row %lld (wrong slot or addressing)",
            (long long)row, (long long)address, at.rank,
            plan_buffer_name(at.buf), at.slot,
            (long long)(c->global_minus_address + address));
    int comp = check_component(ck, rank, s->queue);
    int32_t *rd = ck->readers + (size_t)idx * ck->C;
    if (rd[comp] < ck->seq[g]) rd[comp] = ck->seq[g];
    *out = *c;
    return 0;
}

static int write_row(checker *ck, int g, plan_loc at, int shard, int64_t row,
                     const check_cell *value) {
    int rank;
    check_step(ck, g, &rank, NULL);
    if (at.buf == PLAN_BUF_INPUT)
        return check_fail_step(ck, g, "writes the caller's input");
    if (peer_rules(ck, g, rank, at, true)) return -1;
    int64_t address = check_address(ck, at, shard, row);
    int64_t idx = cell_index(ck, at, address);
    check_cell *c = &ck->cells[idx];
    const int *clock = ck->clocks + (size_t)g * ck->C;
    char who[64];
    if (c->writer >= 0 && !check_before(ck, c->writer, clock)) {
        describe(ck, c->writer, who, sizeof who);
        return check_fail_step(
            ck, g,
            "write-after-write hazard: writes row %lld of rank %d's %s[%d], "
            "also written by %s with no ordering between them",
            (long long)row, at.rank, plan_buffer_name(at.buf), at.slot, who);
    }
    int32_t *rd = ck->readers + (size_t)idx * ck->C;
    for (int comp = 0; comp < ck->C; comp++) {
        if (rd[comp] <= clock[comp]) continue;
        describe(ck, step_at(ck, comp, rd[comp]), who, sizeof who);
        return check_fail_step(
            ck, g,
            "write-after-read hazard: overwrites row %lld of rank %d's "
            "%s[%d] while %s may still be reading it (no ordering between "
            "them)",
            (long long)row, at.rank, plan_buffer_name(at.buf), at.slot, who);
    }
    memset(rd, 0, sizeof *rd * (size_t)ck->C);
    *c = *value;
    c->valid = 1;
    c->global_minus_address = row - address;
    c->writer = g;
    ck->writes[idx]++;
    return 0;
}

static int check_destination(checker *ck, int g, const plan_step *s) {
    bool ag = ck->req->op == PLAN_OP_AG_GEMM;
    if (s->final && s->dst.buf != PLAN_BUF_OUTPUT)
        return check_fail_step(ck, g, "a final %s must write output, not %s",
                               plan_step_kind_name(s->kind),
                               plan_buffer_name(s->dst.buf));
    if (!s->final && !plan_buffer_slotted(s->dst.buf))
        return check_fail_step(ck, g,
                               "a non-final %s must write a partial or recv "
                               "slot, not %s",
                               plan_step_kind_name(s->kind),
                               plan_buffer_name(s->dst.buf));
    if (ag && !s->final)
        return check_fail_step(ck, g,
                               "an all-gather GEMM must be final (write "
                               "output)");
    return 0;
}

/* Adds the REDUCE sources (or a GEMM's addends) of row `row` into *out:
 * partial sums only, no rank's contribution twice. */
static int add_refs(checker *ck, int g, int rank, const plan_step *s,
                    int64_t row, check_cell *out) {
    const plan *p = &ck->plans[rank];
    const char *what = plan_step_kind_name(s->kind);
    for (int j = 0; j < s->ref_count; j++) {
        check_cell in = {0}; /* read_row fills it; -O3 cannot tell */
        if (read_row(ck, g, p->refs[s->ref_first + j], s->shard, row, &in))
            return -1;
        if (in.kind != CELL_SUM || in.final)
            return check_fail_step(ck, g,
                                   "%s source %d holds %s%s at row %lld, not "
                                   "partial sums",
                                   what, j, in.final ? "final " : "",
                                   cell_kind_name(in.kind), (long long)row);
        if (in.mask & out->mask)
            return check_fail_step(ck, g,
                                   "%s adds the contribution of rank %d to "
                                   "row %lld twice",
                                   what, __builtin_ctzll(in.mask & out->mask),
                                   (long long)row);
        out->mask |= in.mask;
    }
    return 0;
}

/* A final sum must hold exactly one contribution of every rank. */
static int check_complete(checker *ck, int g, const plan_step *s, int64_t row,
                          uint64_t mask) {
    uint64_t all = ck->P == 64 ? ~0ull : (1ull << ck->P) - 1;
    if (!s->final || mask == all) return 0;
    return check_fail_step(ck, g,
                           "final %s of row %lld lacks the contribution of "
                           "rank %d (each owner must sum exactly one from "
                           "every rank)",
                           plan_step_kind_name(s->kind), (long long)row,
                           __builtin_ctzll(~mask & all));
}

static int apply_gemm(checker *ck, int g, int rank, const plan_step *s) {
    if (s->src.buf == PLAN_BUF_NONE) {
        ck->bulk_gemms[rank]++;
        return 0;
    }
    if (check_destination(ck, g, s)) return -1;
    bool ag = ck->req->op == PLAN_OP_AG_GEMM;
    for (int64_t row = s->row0; row < s->row0 + s->rows; row++) {
        check_cell in, out;
        if (read_row(ck, g, s->src, s->shard, row, &in)) return -1;
        if (in.kind != CELL_DATA)
            return check_fail_step(ck, g,
                                   "GEMM reads row %lld, which holds %s, not "
                                   "input rows",
                                   (long long)row, cell_kind_name(in.kind));
        if (!ag && in.mask != 1ull << rank)
            return check_fail_step(ck, g,
                                   "GEMM reads row %lld of another rank's "
                                   "input, not its own",
                                   (long long)row);
        memset(&out, 0, sizeof out);
        out.kind = ag ? CELL_PRODUCT : CELL_SUM;
        out.mask = 1ull << rank;
        out.final = s->final;
        if (s->ref_count > 0 && (add_refs(ck, g, rank, s, row, &out) ||
                                 check_complete(ck, g, s, row, out.mask)))
            return -1;
        ck->computed[(size_t)rank * (size_t)(ck->req->m + 1) + row]++;
        if (write_row(ck, g, s->dst, s->shard, row, &out)) return -1;
    }
    return 0;
}

static int apply_reduce(checker *ck, int g, int rank, const plan_step *s) {
    if (check_destination(ck, g, s)) return -1;
    for (int64_t row = s->row0; row < s->row0 + s->rows; row++) {
        check_cell out;
        memset(&out, 0, sizeof out);
        out.kind = CELL_SUM;
        out.final = s->final;
        if (add_refs(ck, g, rank, s, row, &out) ||
            check_complete(ck, g, s, row, out.mask))
            return -1;
        if (write_row(ck, g, s->dst, s->shard, row, &out)) return -1;
    }
    return 0;
}

int check_memory_apply(checker *ck, int g) {
    int rank;
    const plan_step *s = check_step(ck, g, &rank, NULL);
    switch (s->kind) {
    case PLAN_COPY:
        for (int64_t row = s->row0; row < s->row0 + s->rows; row++) {
            check_cell v;
            if (read_row(ck, g, s->src, s->shard, row, &v)) return -1;
            if (write_row(ck, g, s->dst, s->shard, row, &v)) return -1;
        }
        return 0;
    case PLAN_GEMM:
        return apply_gemm(ck, g, rank, s);
    case PLAN_REDUCE:
        return apply_reduce(ck, g, rank, s);
    default:
        return 0;
    }
}
