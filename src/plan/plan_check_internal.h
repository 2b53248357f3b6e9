/* State of plan_check(): shared by plan_check.c (structure, flags, the
 * simulation driver, coverage) and plan_check_memory.c (the data model). */
#ifndef COMMGEMM_PLAN_CHECK_INTERNAL_H
#define COMMGEMM_PLAN_CHECK_INTERNAL_H

#include "plan/plan_internal.h"

/* What a row of a buffer holds. */
enum { CELL_DATA = 1, CELL_SUM = 2, CELL_PRODUCT = 3 };

typedef struct check_cell {
    int64_t global_minus_address; /* which global row is stored here */
    uint64_t mask;  /* SUM: contributing ranks; DATA: the rank it came from */
    int32_t writer; /* global step index of the last writer, -1: initial */
    uint8_t valid, kind, final, pad;
} check_cell;

typedef struct checker {
    const plan *plans;
    const plan_request *req;
    int P, Q, C; /* ranks, queues per rank, clock components (P * Q) */
    int total;   /* steps of all ranks */
    int *first;  /* [P + 1] global index of each rank's step 0 */
    int *clocks; /* [total][C] vector clock of each executed step */
    int *seq;    /* [total] position (1-based) of the step in its queue */
    int *rank_of;   /* [total] */
    int *component; /* [total] clock component of the step's queue */
    bool *done;  /* [total] */
    int *match;  /* [total] WAIT: global index of its SIGNAL */
    int *queue_steps; /* [P * Q][...] global step indices, queue order */
    int *queue_first, *queue_len; /* [P * Q] into queue_steps */
    int *current;     /* [P * Q][C] clock after the queue's last step */
    int *count;       /* [P * Q] steps executed so far */
    int64_t *mem_first; /* [P][PLAN_BUF_COUNT] first cell of each buffer */
    int64_t cells_per_rank;
    check_cell *cells;  /* [P][cells_per_rank] */
    int32_t *readers;   /* [P][cells_per_rank][C]: last read per component */
    int32_t *writes;    /* [P][cells_per_rank]: times written */
    int32_t *computed;  /* [P][m]: GEMM rows computed */
    int *bulk_gemms;    /* [P] */
    int *peer_access;   /* [P][C]: last access by another rank, per comp */
    char *err;
    int err_len;
} checker;

static inline const plan_step *check_step(const checker *ck, int g,
                                          int *rank, int *index) {
    int p = ck->rank_of[g];
    if (rank) *rank = p;
    if (index) *index = g - ck->first[p];
    return &ck->plans[p].steps[g - ck->first[p]];
}

static inline int check_component(const checker *ck, int rank, int queue) {
    return rank * ck->Q + queue;
}

/* Does step g (executed) happen-before a step whose clock is `clock`? */
static inline bool check_before(const checker *ck, int g, const int *clock) {
    return clock[ck->component[g]] >= ck->seq[g];
}

/* "rank R step I (kind on queue Q, rows a+n): " + message. Returns -1. */
int check_fail_step(checker *ck, int g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int check_fail(checker *ck, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Address of `row` in `at` for a step about `shard`. */
int64_t check_address(const checker *ck, plan_loc at, int shard, int64_t row);

/* The memory model: sets up the buffers, then applies one executed step
 * (reads, writes, hazards, peer rules). */
int check_memory_init(checker *ck);
int check_memory_apply(checker *ck, int g);

#endif
