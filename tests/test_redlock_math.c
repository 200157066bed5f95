/*
 * test_redlock_math.c - Redlock's arithmetic (lock/redlock.h), no server: the quorum, the
 * drift, the validity, the decision, the retry delay's range, and the REDLOCK_NODES parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "lock/redlock.h"

static void test_quorum_is_a_strict_majority(void **state)
{
    (void)state;
    assert_int_equal(redlock_quorum(1), 1);
    assert_int_equal(redlock_quorum(2), 2); /* 1 of 2 is no majority */
    assert_int_equal(redlock_quorum(3), 2);
    assert_int_equal(redlock_quorum(4), 3);
    assert_int_equal(redlock_quorum(5), 3);
    assert_int_equal(redlock_quorum(7), 4);
    /* Two disjoint sets of grants can never both reach it: 2 * quorum > n, for every n. */
    for (int n = 1; n <= REDLOCK_MAX_NODES; n++)
        assert_true(2 * redlock_quorum(n) > n);
}

static void test_drift_is_one_percent_plus_two_ms(void **state)
{
    (void)state;
    assert_int_equal(redlock_drift_ms(10000), 102);
    assert_int_equal(redlock_drift_ms(1500), 17);
    assert_int_equal(redlock_drift_ms(100), 3);
    assert_int_equal(redlock_drift_ms(10), 2);
}

static void test_validity_subtracts_elapsed_and_drift(void **state)
{
    (void)state;
    assert_int_equal(redlock_validity_ms(10000, 0, 102), 9898);
    assert_int_equal(redlock_validity_ms(10000, 50, 102), 9848);
    assert_int_equal(redlock_validity_ms(1500, 1483, 17), 0);
    assert_int_equal(redlock_validity_ms(1500, 1600, 17), -117);
}

static void test_acquired_needs_quorum_and_time_left(void **state)
{
    (void)state;
    assert_true(redlock_acquired(3, 5, 1));
    assert_true(redlock_acquired(5, 5, 9898));
    assert_false(redlock_acquired(2, 5, 9898)); /* a minority */
    assert_false(redlock_acquired(3, 5, 0));    /* a majority, but too late to trust */
    assert_false(redlock_acquired(5, 5, -1));
    assert_false(redlock_acquired(1, 2, 100));
    assert_true(redlock_acquired(2, 3, 100));
    assert_false(redlock_acquired(0, 0, 100)); /* no nodes, no lock */
}

static void test_retry_delay_stays_in_its_range(void **state)
{
    uint32_t samples[] = {0, 1, 20, 21, 22, 12345, 0x7fffffffu, 0xffffffffu};

    (void)state;
    assert_int_equal(redlock_retry_delay_ms(20, 0), 20);
    assert_int_equal(redlock_retry_delay_ms(20, 20), 40);
    assert_int_equal(redlock_retry_delay_ms(20, 21), 20);
    for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
        int64_t d = redlock_retry_delay_ms(20, samples[i]);
        assert_true(d >= 20 && d <= 40);
    }
}

static void test_parse_nodes(void **state)
{
    redlock_node nodes[REDLOCK_MAX_NODES];
    char err[128];
    int n = -1;

    (void)state;
    assert_int_equal(redlock_parse_nodes("127.0.0.1:16380,127.0.0.1:16381,localhost:7", nodes,
                                         REDLOCK_MAX_NODES, &n, err, sizeof(err)),
                     0);
    assert_int_equal(n, 3);
    assert_string_equal(nodes[0].host, "127.0.0.1");
    assert_int_equal(nodes[0].port, 16380);
    assert_int_equal(nodes[1].port, 16381);
    assert_string_equal(nodes[2].host, "localhost");
    assert_int_equal(nodes[2].port, 7);

    assert_int_equal(redlock_parse_nodes("a:1", nodes, REDLOCK_MAX_NODES, &n, err, sizeof(err)), 0);
    assert_int_equal(n, 1);
}

static void test_parse_nodes_refuses_bad_lists(void **state)
{
    const char *bad[] = {
        "",                       /* no node */
        "host",                   /* no port */
        ":6379",                  /* no host */
        "h:",                     /* empty port */
        "h:0",                    /* out of range */
        "h:65536",                /* out of range */
        "h:99999999999999999999", /* would overflow */
        "h:12x",                  /* not digits */
        "h:+1",                   /* no sign */
        "h:1,",                   /* a trailing comma: an empty node */
        ",h:1",                   /* a leading one */
        "h:1,,g:2",               /* an empty node inside */
        "h:1 ,g:2",               /* a space */
        "h:1,h:1",                /* the same node twice would count one grant as two */
        "a:1,a:2,a:3,a:4,a:5,a:6,a:7,a:8,a:9,a:10", /* more than REDLOCK_MAX_NODES */
    };
    redlock_node nodes[REDLOCK_MAX_NODES];
    char err[128];
    int n;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        n = -1;
        if (redlock_parse_nodes(bad[i], nodes, REDLOCK_MAX_NODES, &n, err, sizeof(err)) != -1)
            fail_msg("accepted '%s'", bad[i]);
        assert_int_equal(n, 0);
        assert_true(strlen(err) > 0);
    }
    /* A caller's array shorter than the list. */
    assert_int_equal(redlock_parse_nodes("a:1,a:2,a:3", nodes, 2, &n, err, sizeof(err)), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quorum_is_a_strict_majority),
        cmocka_unit_test(test_drift_is_one_percent_plus_two_ms),
        cmocka_unit_test(test_validity_subtracts_elapsed_and_drift),
        cmocka_unit_test(test_acquired_needs_quorum_and_time_left),
        cmocka_unit_test(test_retry_delay_stays_in_its_range),
        cmocka_unit_test(test_parse_nodes),
        cmocka_unit_test(test_parse_nodes_refuses_bad_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
