/* Helpers shared by the plan builders, the checker and the formatter. */
#ifndef COMMGEMM_PLAN_INTERNAL_H
#define COMMGEMM_PLAN_INTERNAL_H

#include <stdarg.h>

#include "plan/plan.h"

/* Pieces of shard `shard`: min(splits, shard rows), so none is empty. */
int plan_piece_count(const plan *p, int shard);
/* Rows of piece `piece` of `shard`: an even split (the first pieces take
 * one more row), unlike the ceil split of shards, which may leave a piece
 * empty. */
void plan_piece_range(const plan *p, int shard, int piece, int64_t *row0,
                      int64_t *rows);

/* Global row stored at address 0 of `buf` on `owner` for a step about
 * `shard` (see the buffer notes in plan.h), and the buffer's capacity in
 * rows. */
int64_t plan_buffer_base(const plan_request *req, plan_buffer buf, int owner,
                         int shard);
int64_t plan_buffer_capacity(const plan *p, plan_buffer buf, int owner);
static inline bool plan_buffer_slotted(plan_buffer buf) {
    return buf == PLAN_BUF_PARTIAL || buf == PLAN_BUF_RECV;
}
/* Buffers peers may access (mapped into every rank). */
static inline bool plan_buffer_peer_visible(plan_buffer buf) {
    return buf == PLAN_BUF_GATHER || buf == PLAN_BUF_RECV;
}

/* snprintf into err, tolerating err == NULL. Returns -1. */
int plan_fail(char *err, int err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
