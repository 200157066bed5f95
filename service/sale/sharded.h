/*
 * sharded.h - the redis-sharded mode: a goods' stock split into K segments, each with a
 * row of its own (goods_segments) and a Redis lock of its own ("lock:goods:N:seg:K", the
 * lock of lock/ with its fencing token, stored on the segment's row), so that K sales of
 * one goods can run at once instead of one.
 *
 * A sale, in rounds:
 *   1. an idempotent retry is answered from the store before anything is locked;
 *   2. the hint: the goods row and every segment read in one statement, without a lock. A
 *      total below the count there is a moment the goods was sold out: 409 at once (with
 *      an Idempotency-Key, claimed and stored in a small transaction that reads the hint
 *      again). When the goods row itself holds stock (after a reset, or after another mode
 *      folded the segments back), it is cut into the segments first, a share added to each,
 *      in a transaction of its own under PostgreSQL's locks only (no Redis lock: a sale
 *      holding a segment holds its row, and the cut waits for it);
 *   3. the fast path: the segments whose hint covers the count, starting at a random one
 *      and going round in ascending order (sharded_candidates), each tried with a SHORT
 *      wait for its lock (SHARD_TRY_MS): a busy segment makes the sale move on. Under a
 *      segment's lock, one transaction: claim the key, claim the segment (fenced), and if
 *      it covers the count: write it, record the order, store the answer, still held?,
 *      COMMIT. A short segment (the hint was stale) rolls back and the next is tried;
 *   4. when every candidate was busy, the first of them is waited for, with what is left of
 *      LOCK_WAIT_MS; when every candidate turned out short (other sales emptied them), the
 *      round starts again at 2 with a fresh hint, until LOCK_WAIT_MS has passed (503
 *      lock_timeout);
 *   5. the slow path, only when no single segment's hint covers the count (a count larger
 *      than any segment, or the last units scattered): every segment's lock, in ascending
 *      order (so that two slow sales never wait for each other in a cycle), then one
 *      transaction that gathers the goods row and every segment (db_segments_gather),
 *      sells from the total, and spreads what is left evenly over the K segments again
 *      (sale_split): the multi-segment sale and the rebalancing are one path.
 *
 * A 409 is answered only when the goods' whole stock, every segment and the goods row,
 * is below the count: in one snapshot (2) or under every lock (5); never while the segments
 * together could still cover it.
 *
 * Other modes sell from the goods row only; when one would answer 409 it first folds the
 * segments back into the row (sale_fold, service/sale/sale.h) and tries once more, so that no
 * mode refuses a sale while segments hold the stock, and the next sharded sale cuts the row
 * into segments again. Units move between the two only under PostgreSQL's locks
 * (db.h), so every mode's books stay exact, whichever mix of modes sells a goods.
 *
 * No HTTP here: the answer is a status and a JSON body, as deduct.h's.
 */
#ifndef SERVICE_SHARDED_H
#define SERVICE_SHARDED_H

#include <stdbool.h>
#include <stdint.h>

#include "service/sale/base.h"

#define SHARD_SEGMENTS_DEFAULT 8

/*
 * Runs one deduction of `count` units of `goods_id` in mode m (its name is recorded with
 * each order) over env->shard_segments segments: the contract of deduct_execute
 * (service/sale/deduct.h), without the hook. Returns 0 with *out filled (free out->body), or -1
 * when out of memory.
 */
int sharded_execute(const deduct_env *env, const mode *m, int64_t goods_id, int64_t count,
                    const char *idempotency_key, const char *request_id, deduct_result *out);

/* The pure parts, unit-tested (tests/test_sharded.c). */

/*
 * The fall-over order of a sale of `count` units over k segments whose hinted stocks are
 * hints[0..k-1]: the segments whose hint covers the count, starting at the candidate number
 * draw % (their number) and going round in ascending order of segment. Random draws spread
 * the sales of every replica evenly over the segments with no coordination between them (a
 * per-replica rotation would do as well inside one replica, but three replicas' counters
 * could march in step). Writes the segments into order[] and returns how many (0: no single
 * segment covers the count).
 */
int sharded_candidates(const int64_t *hints, int k, int64_t count, unsigned draw, int *order);

/* The segment count a replica uses: `configured` when it is within 1..DB_SEGMENTS_MAX, else
 * SHARD_SEGMENTS_DEFAULT. */
int sharded_segments(int configured);

#endif
