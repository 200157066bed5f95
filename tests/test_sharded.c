/*
 * test_sharded.c - the redis-sharded mode's pure parts, without servers: the split of a
 * stock into K segments, the choice of a sale's segments and their fall-over order, and the
 * bound on the segment count.
 *
 * The mode itself, against real Redis, PostgreSQL and nginx, is tested by
 * tests/stack/test_sharded_sales.c; its statements by tests/db/test_segments.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "service/sale/sale.h"
#include "service/sale/stock.h"
#include "service/sale/sharded.h"

/* ---- sale_split ------------------------------------------------------------------- */

static void test_split_even_and_uneven(void **state)
{
    int64_t shares[8];

    (void)state;
    sale_split(80, 8, shares);
    for (int i = 0; i < 8; i++)
        assert_int_equal(shares[i], 10);

    /* 83 over 8: the first 3 get 11, the other 5 get 10. */
    sale_split(83, 8, shares);
    for (int i = 0; i < 8; i++)
        assert_int_equal(shares[i], i < 3 ? 11 : 10);
}

static void test_split_keeps_every_unit(void **state)
{
    const int64_t totals[] = {0, 1, 7, 8, 9, 5000, 1000000007LL};
    int64_t shares[DB_SEGMENTS_MAX];

    (void)state;
    for (size_t t = 0; t < sizeof(totals) / sizeof(totals[0]); t++)
        for (int k = 1; k <= DB_SEGMENTS_MAX; k++) {
            int64_t sum = 0, lo = INT64_MAX, hi = 0;
            sale_split(totals[t], k, shares);
            for (int i = 0; i < k; i++) {
                assert_true(shares[i] >= 0);
                sum += shares[i];
                lo = shares[i] < lo ? shares[i] : lo;
                hi = shares[i] > hi ? shares[i] : hi;
            }
            assert_int_equal(sum, totals[t]); /* no unit made or lost */
            assert_true(hi - lo <= 1);        /* as even as can be */
        }
}

static void test_split_fewer_units_than_segments(void **state)
{
    int64_t shares[8];

    (void)state;
    /* The last units: 3 over 8 leaves 5 segments empty, and only those 3 can sell. */
    sale_split(3, 8, shares);
    for (int i = 0; i < 8; i++)
        assert_int_equal(shares[i], i < 3 ? 1 : 0);
}

/* ---- sharded_candidates -------------------------------------------------------------- */

static void test_candidates_start_at_the_draw_and_go_round(void **state)
{
    const int64_t hints[4] = {5, 5, 5, 5};
    int order[4];

    (void)state;
    assert_int_equal(sharded_candidates(hints, 4, 1, 0, order), 4);
    assert_int_equal(order[0], 0);
    assert_int_equal(order[3], 3);

    /* Draw 2: segments 2, 3, then round to 0, 1. */
    assert_int_equal(sharded_candidates(hints, 4, 1, 2, order), 4);
    assert_int_equal(order[0], 2);
    assert_int_equal(order[1], 3);
    assert_int_equal(order[2], 0);
    assert_int_equal(order[3], 1);

    /* A draw past the number of candidates wraps: 6 % 4 = 2. */
    assert_int_equal(sharded_candidates(hints, 4, 1, 6, order), 4);
    assert_int_equal(order[0], 2);
}

static void test_candidates_skip_short_segments(void **state)
{
    const int64_t hints[6] = {0, 3, 1, 4, 2, 9};
    int order[6];

    (void)state;
    /* Only segments covering 3: 1, 3, 5. Draw 1 starts at the second of them (3). */
    assert_int_equal(sharded_candidates(hints, 6, 3, 1, order), 3);
    assert_int_equal(order[0], 3);
    assert_int_equal(order[1], 5);
    assert_int_equal(order[2], 1);

    /* A count no single segment covers: no candidate (the slow path's work). */
    assert_int_equal(sharded_candidates(hints, 6, 10, 0, order), 0);
}

static void test_candidates_spread_evenly(void **state)
{
    const int64_t hints[8] = {9, 9, 9, 9, 9, 9, 9, 9};
    int order[8], first[8] = {0};

    (void)state;
    /* Every draw of a uniform source picks each segment first equally often. */
    for (unsigned d = 0; d < 8000; d++) {
        assert_int_equal(sharded_candidates(hints, 8, 1, d, order), 8);
        first[order[0]]++;
        /* Every segment exactly once in the order. */
        int seen[8] = {0};
        for (int i = 0; i < 8; i++)
            seen[order[i]]++;
        for (int i = 0; i < 8; i++)
            assert_int_equal(seen[i], 1);
    }
    for (int i = 0; i < 8; i++)
        assert_int_equal(first[i], 1000);
}

static void test_segments_bounded(void **state)
{
    (void)state;
    assert_int_equal(sharded_segments(8), 8);
    assert_int_equal(sharded_segments(1), 1);
    assert_int_equal(sharded_segments(DB_SEGMENTS_MAX), DB_SEGMENTS_MAX);
    assert_int_equal(sharded_segments(0), SHARD_SEGMENTS_DEFAULT);
    assert_int_equal(sharded_segments(-3), SHARD_SEGMENTS_DEFAULT);
    assert_int_equal(sharded_segments(DB_SEGMENTS_MAX + 1), SHARD_SEGMENTS_DEFAULT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_even_and_uneven),
        cmocka_unit_test(test_split_keeps_every_unit),
        cmocka_unit_test(test_split_fewer_units_than_segments),
        cmocka_unit_test(test_candidates_start_at_the_draw_and_go_round),
        cmocka_unit_test(test_candidates_skip_short_segments),
        cmocka_unit_test(test_candidates_spread_evenly),
        cmocka_unit_test(test_segments_bounded),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
