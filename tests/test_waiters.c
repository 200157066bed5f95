/*
 * test_waiters.c - a process's queue of waiters and the release messages that call them
 * (lock/waiters.h): whom a message names, the grant it may carry, and where the grant goes.
 * Pure code: no server, no thread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "lock/clock.h"
#include "lock/waiters.h"

static void parse(const char *text, size_t *name_len, lock__grant *grant)
{
    lock__release_message_parse(text, strlen(text), name_len, grant);
}

/* "", "<owner>" and "<owner> <token> <time>": nobody, a waiter, a waiter and its grant. */
static void test_parse_forms(void **state)
{
    size_t n;
    lock__grant g;

    (void)state;
    parse("", &n, &g);
    assert_int_equal(n, 0);
    assert_int_equal(g.token, 0);
    parse("ab12:7", &n, &g);
    assert_int_equal(n, 6);
    assert_int_equal(g.token, 0);
    parse("ab12:7 1764150000000042 1764150000123456", &n, &g);
    assert_int_equal(n, 6);
    assert_int_equal(g.token, INT64_C(1764150000000042));
    assert_int_equal(g.released_us, INT64_C(1764150000123456));
}

/* A grant part that does not parse names the owner without a grant: the waiter wakes and
 * takes the lock its own way, never on a token read wrong. */
static void test_parse_bad_grant_names_only(void **state)
{
    static const char *const bad[] = {
        "ab12:7 ",
        "ab12:7 12",
        "ab12:7 12 ",
        "ab12:7 1.7e+15 1764150000123456",
        "ab12:7 -3 1764150000123456",
        "ab12:7 0 1764150000123456",
        "ab12:7 12 34 56",
        "ab12:7 99999999999999999999 1",
    };
    size_t n;
    lock__grant g;

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        parse(bad[i], &n, &g);
        assert_int_equal(n, 6);
        assert_int_equal(g.token, 0);
    }
}

/* The grant goes with the call to the named waiter only, and is used up with the call. */
static void test_grant_goes_to_the_named_waiter(void **state)
{
    lock__queue q;
    lock__waiter *a = lock__waiter_new("p:1"), *b = lock__waiter_new("p:2");
    lock__grant grant = {.token = 42, .released_us = 7}, got;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    lock__queue_init(&q);
    lock__queue_join(&q, a);
    lock__queue_join(&q, b);
    lock__queue_call_named(&q, "p:2", 3, &grant);
    assert_false(a->called);
    pthread_mutex_lock(&mu);
    assert_true(lock__waiter_await_call(b, &mu, 0, &got));
    assert_int_equal(got.token, 42);
    assert_int_equal(got.released_us, 7);
    /* a call without a grant after it brings none */
    lock__queue_call_named(&q, "p:2", 3, NULL);
    assert_true(lock__waiter_await_call(b, &mu, 0, &got));
    assert_int_equal(got.token, 0);
    /* nobody named: the oldest is called, with no grant */
    lock__queue_call_named(&q, "", 0, &grant);
    assert_true(lock__waiter_await_call(a, &mu, 0, &got));
    assert_int_equal(got.token, 0);
    assert_false(lock__waiter_await_call(a, &mu, 0, &got)); /* used up */
    pthread_mutex_unlock(&mu);
    lock__queue_leave(&q, a, false, false);
    lock__queue_leave(&q, b, false, false);
    lock__waiter_free(a);
    lock__waiter_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_forms),
        cmocka_unit_test(test_parse_bad_grant_names_only),
        cmocka_unit_test(test_grant_goes_to_the_named_waiter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
