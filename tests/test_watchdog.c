/*
 * test_watchdog.c - the watchdog's schedule (lock/lease.h): when a lease is renewed,
 * retried and no longer renewed. Pure functions of times and leases: no server, no clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "lock/clock.h"
#include "lock/lease.h"

#define MS LOCK__NS_PER_MS

/* A lease is renewed every third of itself (the Redis lock's 30 s lease: every 10 s). */
static void test_period_is_a_third_of_the_lease(void **state)
{
    (void)state;
    assert_int_equal(lock__lease_period_ns(30000), 10000 * MS);
    assert_int_equal(lock__lease_period_ns(3000), 1000 * MS);
    assert_int_equal(lock__lease_period_ns(10), 10 * MS / 3);
}

/* A lease too short to divide still waits a millisecond between renewals: never a spin. */
static void test_period_floor(void **state)
{
    (void)state;
    assert_int_equal(lock__lease_period_ns(2), MS);
    assert_int_equal(lock__lease_period_ns(1), MS);
    assert_int_equal(lock__lease_period_ns(0), MS);
    assert_int_equal(lock__lease_period_ns(-5), MS);
}

/* The next renewal is counted from when the (re)starting command was sent; two renewals
 * can fail and a third still comes before the lease runs out. */
static void test_renewal_due(void **state)
{
    int64_t sent = 5000 * MS, lease_ms = 9000;
    int64_t due = lock__lease_renewal_due(sent, lease_ms);

    (void)state;
    assert_int_equal(due, sent + 3000 * MS);
    assert_true(due + 2 * lock__lease_period_ns(lease_ms) <= sent + lease_ms * MS);
    /* A lease so long that its end does not fit in an int64_t saturates, not wraps. */
    assert_true(lock__lease_renewal_due(INT64_MAX - MS, INT64_MAX / MS) > 0);
}

/* After a renewal that got no answer, the next try comes after a third of the period. */
static void test_retry_due(void **state)
{
    (void)state;
    assert_int_equal(lock__lease_retry_due(100 * MS, 9000), 100 * MS + 1000 * MS);
    assert_true(lock__lease_retry_due(0, 30000) < lock__lease_renewal_due(0, 30000));
}

/* The maximum hold time: renewed up to it, no longer from it on. */
static void test_capped_at_max_hold(void **state)
{
    int64_t since = 1000 * MS;

    (void)state;
    assert_false(lock__lease_capped(since, since, 60000));
    assert_false(lock__lease_capped(since, since + 60000 * MS - 1, 60000));
    assert_true(lock__lease_capped(since, since + 60000 * MS, 60000));
    assert_true(lock__lease_capped(since, since + 90000 * MS, 60000));
    /* A maximum too large for nanoseconds saturates (lock__ms_to_ns: decades), not wraps
     * to a negative that would cap every holding at once. */
    assert_false(lock__lease_capped(0, INT64_C(10) * 365 * 24 * 3600 * 1000 * MS,
                                       INT64_MAX / MS));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_period_is_a_third_of_the_lease),
        cmocka_unit_test(test_period_floor),
        cmocka_unit_test(test_renewal_due),
        cmocka_unit_test(test_retry_due),
        cmocka_unit_test(test_capped_at_max_hold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
