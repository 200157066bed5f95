/*
 * test_segments.c - redis-sharded's segments in PostgreSQL: spread, claim and write; gather
 * the rest with its tokens; fold and reset; a gather that waits for a sale in flight.
 *
 * The environment and the fixtures: tests/db/db_support.h.
 */
#include "tests/db/db_support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- redis-sharded's segments --------------------------------------------------------- */

static int64_t segment_fence_of(fixture *f, int64_t goods, int seg)
{
    char g[32], k[32];
    const char *p[2] = {g, k};

    snprintf(g, sizeof(g), "%lld", (long long)goods);
    snprintf(k, sizeof(k), "%d", seg);
    return raw_int(f->admin, "SELECT fence FROM goods_segments WHERE goods = $1 AND seg = $2", 2,
                   p);
}

/* Cuts goods 1's stock into k segments with gather + spread, in one transaction. */
static void spread_ok(db_conn *c, int k, const int64_t *shares, const int64_t *tokens)
{
    int64_t goods_stock = -1, stocks[DB_SEGMENTS_MAX], fences[DB_SEGMENTS_MAX], rest = -1;

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_gather(c, 1, k, &goods_stock, stocks, fences, &rest), DB_OK);
    assert_int_equal(db_segments_spread(c, 1, 0, k, shares, tokens), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
}

/* The hint, the spread, a segment's fenced claim and its write, the report's total. */
static void test_segments_spread_claim_write(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t shares[4] = {25, 25, 25, 25}, tokens[4] = {11, 12, 13, 14};
    int64_t goods_stock = -1, stocks[4], total = -1, s = -1, left = -1, id = 0;
    db_stock_report r;

    reset_ok(c, 1, 100);
    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 100);
    assert_int_equal(total, 100);
    for (int i = 0; i < 4; i++)
        assert_int_equal(stocks[i], 0); /* no rows yet */
    assert_int_equal(db_segments_read(c, 999, 4, &goods_stock, stocks, &total), DB_ERR_NOT_FOUND);

    spread_ok(c, 4, shares, tokens);
    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 0);
    assert_int_equal(total, 100);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(stocks[i], 25);
        assert_int_equal(segment_fence_of(f, 1, i), tokens[i]);
    }
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.stock, 100); /* the goods row's 0 plus the segments' 100 */

    /* A sale from segment 2 under its token: claim, write, order, commit. */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segment_claim(c, 1, 2, 13, &s), DB_OK);
    assert_int_equal(s, 25);
    assert_int_equal(db_segment_write(c, 1, 2, 20, &left), DB_OK);
    assert_int_equal(left, 95); /* this segment's 20, the others' 75 */
    assert_int_equal(db_order_insert(c, 1, 5, "redis-sharded", "svc-1", &tokens[2], "redis", NULL, &id),
                     DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.stock, 95);
    assert_int_equal(r.sold, 5);
    assert_int_equal(r.sold - (r.initial - r.stock), 0);

    /* An older token is refused and changes nothing; a newer one takes the segment. */
    assert_int_equal(db_segment_claim(c, 1, 2, 12, &s), DB_ERR_FENCED);
    assert_non_null(strstr(db_conn_error(c), "newer"));
    assert_int_equal(segment_fence_of(f, 1, 2), 13);
    assert_int_equal(db_segment_claim(c, 1, 2, 20, &s), DB_OK);
    assert_int_equal(s, 20);
    assert_int_equal(segment_fence_of(f, 1, 2), 20);
    /* A segment with no row holds nothing: not found, not fenced. */
    assert_int_equal(db_segment_claim(c, 1, 7, 1, &s), DB_ERR_NOT_FOUND);
    assert_int_equal(db_segment_write(c, 1, 7, 1, &left), DB_ERR_NOT_FOUND);
    /* Bad arguments and the row's check: nothing written. */
    assert_int_equal(db_segment_claim(c, 1, DB_SEGMENTS_MAX, 1, &s), DB_ERR_INVALID);
    assert_int_equal(db_segment_write(c, 1, 2, -1, &left), DB_ERR_INVALID);
    assert_int_equal(db_segments_read(c, 1, 0, &goods_stock, stocks, &total), DB_ERR_INVALID);
    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(stocks[2], 20);
    db_pool_release(f->pool, c);
}

/* A gather over fewer segments than there are rows counts the others as `rest`, and the
 * spread empties them; a spread never lowers a stored token. */
static void test_segments_gather_rest_and_tokens(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t four[4] = {10, 10, 10, 10}, tokens4[4] = {5, 5, 5, 5};
    const int64_t two[2] = {21, 19}, tokens2[2] = {3, 9};
    int64_t goods_stock = -1, stocks[4], fences[4], rest = -1, total = -1;

    reset_ok(c, 1, 40);
    spread_ok(c, 4, four, tokens4);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_gather(c, 1, 2, &goods_stock, stocks, fences, &rest), DB_OK);
    assert_int_equal(goods_stock, 0);
    assert_int_equal(stocks[0] + stocks[1], 20);
    assert_int_equal(fences[1], 5);
    assert_int_equal(rest, 20); /* segments 2 and 3 */
    assert_int_equal(db_segments_spread(c, 1, 0, 2, two, tokens2), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    assert_int_equal(db_segments_read(c, 1, 4, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(total, 40);
    assert_int_equal(stocks[0], 21);
    assert_int_equal(stocks[1], 19);
    assert_int_equal(stocks[2], 0);
    assert_int_equal(stocks[3], 0);
    assert_int_equal(segment_fence_of(f, 1, 0), 5); /* 3 < 5: kept */
    assert_int_equal(segment_fence_of(f, 1, 1), 9);

    /* unknown goods */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_gather(c, 999, 2, &goods_stock, stocks, fences, &rest),
                     DB_ERR_NOT_FOUND);
    assert_int_equal(db_rollback(c), DB_OK);
    db_pool_release(f->pool, c);
}

/* The fold moves every segment's stock back to the goods row, inside the caller's
 * transaction; a reset empties the segments and keeps their tokens. The total never
 * changes. */
static void test_segments_fold_and_reset(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t shares[3] = {4, 3, 3}, tokens[3] = {7, 8, 9};
    int64_t moved = -1, goods_stock = -1, stocks[3], total = -1;
    db_stock_report r;

    reset_ok(c, 1, 10);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_fold(c, 1, &moved), DB_OK); /* nothing to fold */
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(moved, 0);
    spread_ok(c, 3, shares, tokens);
    assert_int_equal(db_stock_write(c, 1, 2), DB_OK); /* and 2 units in the row (by hand) */

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_fold(c, 1, &moved), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    assert_int_equal(moved, 10);
    assert_int_equal(db_segments_read(c, 1, 3, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 12);
    assert_int_equal(total, 12);
    for (int i = 0; i < 3; i++)
        assert_int_equal(stocks[i], 0);
    assert_int_equal(segment_fence_of(f, 1, 2), 9);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_fold(c, 999, &moved), DB_ERR_NOT_FOUND); /* unknown goods */
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(moved, 0);

    /* the fold runs inside the caller's transaction: refused outside one */
    assert_int_equal(db_segments_fold(c, 1, &moved), DB_ERR_INVALID);

    spread_ok(c, 3, shares, tokens);
    reset_ok(c, 1, 50);
    assert_int_equal(db_segments_read(c, 1, 3, &goods_stock, stocks, &total), DB_OK);
    assert_int_equal(goods_stock, 50);
    assert_int_equal(total, 50);
    assert_int_equal(db_stock_report_read(c, 1, &r), DB_OK);
    assert_int_equal(r.stock, 50);
    assert_int_equal(segment_fence_of(f, 1, 0), 7); /* an old holder stays out */
    db_pool_release(f->pool, c);
}

typedef struct gatherer {
    db_pool *pool;
    atomic_int done;
    int rc;
    int64_t seg1; /* segment 1's stock as the gather read it */
} gatherer;

static void *gather_run(void *arg)
{
    gatherer *w = arg;
    int64_t goods_stock, stocks[2], fences[2], rest;
    db_conn *c = NULL;

    w->rc = db_pool_acquire(w->pool, 2000, &c);
    if (w->rc == DB_OK)
        w->rc = db_begin(c);
    if (w->rc == DB_OK)
        w->rc = db_segments_gather(c, 1, 2, &goods_stock, stocks, fences, &rest);
    if (w->rc == DB_OK)
        w->seg1 = stocks[1];
    atomic_store(&w->done, 1);
    if (c)
        db_pool_release(w->pool, c); /* rolls back */
    return NULL;
}

/* A gather waits for a sale holding a segment it needs, then reads what that sale
 * committed: a move of units never works from a stale segment. While it holds its locks,
 * the advisory lock of the goods is taken (pg-advisory's writers wait for it). */
static void test_segments_gather_waits_for_a_sale(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t shares[2] = {5, 5}, tokens[2] = {1, 1};
    gatherer w = {f->pool, 0, -100, -1};
    int64_t s = 0, left = 0;
    pthread_t th;

    reset_ok(c, 1, 10);
    spread_ok(c, 2, shares, tokens);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segment_claim(c, 1, 1, 2, &s), DB_OK);
    assert_int_equal(db_segment_write(c, 1, 1, 2, &left), DB_OK);

    assert_int_equal(pthread_create(&th, NULL, gather_run, &w), 0);
    /* Until a session of this database waits for a lock (the gather, for segment 1's row),
     * for 5 s at most: a fixed pause was too short on a loaded machine, where opening the
     * gather's connection alone can take longer. */
    for (int i = 0; i < 500 && raw_int(f->admin,
                                       "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                       "current_database() AND wait_event_type = 'Lock'",
                                       0, NULL) == 0;
         i++)
        sleep_ms(10);
    assert_int_equal(atomic_load(&w.done), 0); /* waiting for segment 1's row */
    assert_int_equal(raw_int(f->admin, "SELECT pg_try_advisory_xact_lock(1)::int", 0, NULL), 0);
    assert_int_equal(db_commit(c), DB_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.rc, DB_OK);
    assert_int_equal(w.seg1, 2);
    db_pool_release(f->pool, c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_segments_spread_claim_write, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_segments_gather_rest_and_tokens,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_segments_fold_and_reset, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_segments_gather_waits_for_a_sale,
                                        setup_migrated, teardown),
    };

    return db_test_main("test_segments", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
