/*
 * test_faults.c - the X-Fault parser (service/lab/faults.c): what is accepted, what is refused
 * with a reason, and that a refused value sets nothing. The faults themselves act on a real
 * stack (loadtest/ladder, loadtest/chaos).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "service/lab/faults.h"

static void test_each_fault_alone(void **state)
{
    fault_plan p;
    char d[256];

    (void)state;
    assert_int_equal(faults_parse("crash-in-section", &p, d, sizeof(d)), 0);
    assert_true(p.crash_in_section);
    assert_false(p.nested);
    assert_int_equal(faults_parse("nested", &p, d, sizeof(d)), 0);
    assert_true(p.nested);
    assert_false(p.crash_in_section);
    assert_int_equal(faults_parse("pause-in-section=1500", &p, d, sizeof(d)), 0);
    assert_int_equal(p.pause_in_section_ms, 1500);
    assert_int_equal(faults_parse("pause-before-commit=1", &p, d, sizeof(d)), 0);
    assert_int_equal(p.pause_before_commit_ms, 1);
    assert_int_equal(faults_parse("stop-before-commit=60000", &p, d, sizeof(d)), 0);
    assert_int_equal(p.stop_before_commit_ms, 60000);
    assert_int_equal(faults_parse("stop-before-claim=20000", &p, d, sizeof(d)), 0);
    assert_int_equal(p.stop_before_claim_ms, 20000);
    assert_int_equal(p.stop_before_commit_ms, 0);
    assert_int_equal(faults_parse("pause-before-release=250", &p, d, sizeof(d)), 0);
    assert_int_equal(p.pause_before_release_ms, 250);
    assert_int_equal(p.pause_in_section_ms, 0);
}

static void test_a_list_with_spaces(void **state)
{
    fault_plan p;
    char d[256];

    (void)state;
    assert_int_equal(
        faults_parse(" nested ,pause-in-section=200 ,\tpause-before-release=3 ", &p, d, sizeof(d)),
        0);
    assert_true(p.nested);
    assert_int_equal(p.pause_in_section_ms, 200);
    assert_int_equal(p.pause_before_release_ms, 3);
    assert_false(p.crash_in_section);
}

static void expect_refused(const char *value, const char *reason_part)
{
    fault_plan p;
    char d[256] = "";

    assert_int_equal(faults_parse(value, &p, d, sizeof(d)), -1);
    if (strstr(d, reason_part) == NULL)
        fail_msg("'%s': reason '%s' does not say '%s'", value, d, reason_part);
}

static void test_refused_values_say_why(void **state)
{
    (void)state;
    expect_refused("", "empty");
    expect_refused(",", "empty");
    expect_refused("nested,", "empty");
    expect_refused("explode", "unknown fault 'explode'");
    expect_refused("crash", "unknown fault");
    expect_refused("crash-in-section=5", "takes no value");
    expect_refused("pause-in-section", "needs =MS");
    expect_refused("pause-in-section=", "needs =MS");
    expect_refused("pause-in-section=0", "needs =MS");
    expect_refused("pause-in-section=60001", "needs =MS");
    expect_refused("pause-in-section=999999", "needs =MS");
    expect_refused("pause-in-section=-5", "needs =MS");
    expect_refused("pause-in-section=1e3", "needs =MS");
    expect_refused("pause-in-section= 5", "needs =MS");
    expect_refused("nested,nested", "twice");
    expect_refused("pause-before-commit=5,pause-before-commit=6", "twice");
}

/* What POST /api/order takes: pause-between-locks alone, or no fault (a hold only). */
static void test_cart_only(void **state)
{
    fault_plan p;
    char d[256];

    (void)state;
    memset(&p, 0, sizeof(p));
    assert_true(faults_cart_only(&p));
    assert_int_equal(faults_parse("pause-between-locks=300", &p, d, sizeof(d)), 0);
    assert_int_equal(p.pause_between_locks_ms, 300);
    assert_true(faults_cart_only(&p));
    assert_int_equal(faults_parse("pause-between-locks=300,nested", &p, d, sizeof(d)), 0);
    assert_false(faults_cart_only(&p));
    assert_int_equal(faults_parse("pause-in-section=5", &p, d, sizeof(d)), 0);
    assert_false(faults_cart_only(&p));
    assert_int_equal(faults_parse("crash-in-section", &p, d, sizeof(d)), 0);
    assert_false(faults_cart_only(&p));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_fault_alone),
        cmocka_unit_test(test_a_list_with_spaces),
        cmocka_unit_test(test_refused_values_say_why),
        cmocka_unit_test(test_cart_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
