/*
 * test_response.c - the JSON bodies: each is parsed back with jansson and checked field by
 * field (names, types, values, nothing more), and the shapes API.md prints are compared
 * byte for byte. Leaks are checked by LeakSanitizer when the suite runs from build/san.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "service/http/response.h"

/* Parses body (and frees it): it must be one JSON object with exactly n_fields keys. The
 * caller decrefs the result. */
static json_t *parse(char *body, size_t n_fields)
{
    json_error_t error;
    json_t *o;

    assert_non_null(body);
    o = json_loads(body, JSON_REJECT_DUPLICATES, &error);
    if (o == NULL)
        fail_msg("not JSON: %s (%s)", body, error.text);
    free(body);
    assert_true(json_is_object(o));
    assert_int_equal(json_object_size(o), n_fields);
    return o;
}

static void assert_int_field(json_t *o, const char *key, int64_t want)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("field '%s' is not an integer", key);
    if (json_integer_value(v) != want)
        fail_msg("field '%s' is %lld, want %lld", key, (long long)json_integer_value(v),
                 (long long)want);
}

static void assert_str_field(json_t *o, const char *key, const char *want)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v))
        fail_msg("field '%s' is not a string", key);
    assert_string_equal(json_string_value(v), want);
}

static void assert_bool_field(json_t *o, const char *key, bool want)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_boolean(v))
        fail_msg("field '%s' is not a boolean", key);
    assert_int_equal(json_is_true(v), want);
}

/* body must be exactly want (and is freed). */
static void assert_body(char *body, const char *want)
{
    assert_non_null(body);
    assert_string_equal(body, want);
    free(body);
}

static void test_error_without_detail(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_error("payload_too_large", NULL),
                "{\"ok\":false,\"error\":\"payload_too_large\"}");
    o = parse(response_error("lock_timeout", NULL), 2);
    assert_bool_field(o, "ok", false);
    assert_str_field(o, "error", "lock_timeout");
    json_decref(o);
}

static void test_error_with_detail(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_error("bad_request", "count must be an integer from 1 to 10000"),
                "{\"ok\":false,\"error\":\"bad_request\","
                "\"detail\":\"count must be an integer from 1 to 10000\"}");
    /* Quotes, backslashes, newlines and non-ASCII survive the round trip. */
    o = parse(response_error("bad_request", "duplicate key 'a\"b\\c'\n\xc3\xa9"), 3);
    assert_bool_field(o, "ok", false);
    assert_str_field(o, "error", "bad_request");
    assert_str_field(o, "detail", "duplicate key 'a\"b\\c'\n\xc3\xa9");
    json_decref(o);
}

/* A deduction's 503: the detail is shown only where API.md gives one. */
static void test_deduct_503_details(void **state)
{
    (void)state;
    assert_body(response_deduct_503("lock_timeout", "lock:goods:1 not had within 2000 ms"),
                "{\"ok\":false,\"error\":\"lock_timeout\"}");
    assert_body(response_deduct_503("lock_lost", "fencing token 3 is older"),
                "{\"ok\":false,\"error\":\"lock_lost\"}");
    assert_body(response_deduct_503("unavailable", "redis: down"),
                "{\"ok\":false,\"error\":\"unavailable\",\"detail\":\"redis: down\"}");
    assert_body(response_deduct_503("conflict", "gave up after 17 attempts"),
                "{\"ok\":false,\"error\":\"conflict\",\"detail\":\"gave up after 17 attempts\"}");
    assert_body(response_deduct_503("commit_unknown", "postgresql: commit: no answer"),
                "{\"ok\":false,\"error\":\"commit_unknown\","
                "\"detail\":\"retry with the same Idempotency-Key\"}");
}

static void test_error_with_invalid_utf8_detail(void **state)
{
    json_t *o;

    (void)state;
    /* Not valid UTF-8: still an answer, with the odd bytes as '?'. */
    o = parse(response_error("unavailable", "redis said \xff\xfe ok \xc3\xa9"), 3);
    assert_str_field(o, "detail", "redis said ?? ok ??");
    json_decref(o);
}

static void test_error_null_code(void **state)
{
    json_t *o;

    (void)state;
    o = parse(response_error(NULL, NULL), 2);
    assert_str_field(o, "error", "");
    json_decref(o);
}

static void test_deducted(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_deducted(1, 1, 4999, 17, "redis", "svc-1"),
                "{\"ok\":true,\"goods_id\":1,\"count\":1,\"remaining\":4999,\"order_id\":17,"
                "\"mode\":\"redis\",\"instance\":\"svc-1\"}");
    o = parse(response_deducted(INT64_MAX, 10000, 0, INT64_MAX - 1, "local", "svc-3"), 7);
    assert_bool_field(o, "ok", true);
    assert_int_field(o, "goods_id", INT64_MAX);
    assert_int_field(o, "count", 10000);
    assert_int_field(o, "remaining", 0);
    assert_int_field(o, "order_id", INT64_MAX - 1);
    assert_str_field(o, "mode", "local");
    assert_str_field(o, "instance", "svc-3");
    json_decref(o);
}

static void test_insufficient(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_insufficient(1, 0),
                "{\"ok\":false,\"error\":\"insufficient_stock\",\"goods_id\":1,\"remaining\":0}");
    o = parse(response_insufficient(5, 3), 4);
    assert_bool_field(o, "ok", false);
    assert_str_field(o, "error", "insufficient_stock");
    assert_int_field(o, "goods_id", 5);
    assert_int_field(o, "remaining", 3);
    json_decref(o);
}

/* A cart's answer: its items in the order given, each with what its goods keeps. */
static void test_ordered(void **state)
{
    const int64_t goods[] = {7, 1}, counts[] = {1, 2}, left[] = {9, 98};

    (void)state;
    assert_body(response_ordered(40, goods, counts, left, 2, "redis", "svc-2"),
                "{\"ok\":true,\"order_id\":40,\"items\":[{\"goods_id\":7,\"count\":1,"
                "\"remaining\":9},{\"goods_id\":1,\"count\":2,\"remaining\":98}],"
                "\"mode\":\"redis\",\"instance\":\"svc-2\"}");
}

static void test_sold_out(void **state)
{
    (void)state;
    assert_body(response_sold_out(7, 0),
                "{\"ok\":false,\"error\":\"sold_out\",\"goods_id\":7,\"remaining\":0}");
}

static void test_unknown_goods(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_unknown_goods(9),
                "{\"ok\":false,\"error\":\"unknown_goods\",\"goods_id\":9}");
    o = parse(response_unknown_goods(INT64_MAX), 3);
    assert_int_field(o, "goods_id", INT64_MAX);
    json_decref(o);
}

static void test_stock(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_stock(1, 5000, 0, 5000, 5000),
                "{\"goods_id\":1,\"initial\":5000,\"stock\":0,\"sold\":5000,\"orders\":5000,"
                "\"oversold\":0}");
    /* 2000 units, 2300 sold, the stock says 0: 300 sold that the stock never gave up. */
    o = parse(response_stock(1, 2000, 0, 2300, 2290), 6);
    assert_int_field(o, "goods_id", 1);
    assert_int_field(o, "initial", 2000);
    assert_int_field(o, "stock", 0);
    assert_int_field(o, "sold", 2300);
    assert_int_field(o, "orders", 2290);
    assert_int_field(o, "oversold", 300);
    json_decref(o);
    /* Lost updates that cost stock without a sale show as negative. */
    o = parse(response_stock(2, 100, 10, 80, 80), 6);
    assert_int_field(o, "oversold", -10);
    json_decref(o);
}

static void test_oversold_formula(void **state)
{
    (void)state;
    assert_int_equal(response_oversold(5000, 5000, 0), 0);
    assert_int_equal(response_oversold(5000, 4000, 1000), 0);
    assert_int_equal(response_oversold(5000, 4990, 1000), 990);
    assert_int_equal(response_oversold(5000, 4000, 900), -100);
    /* Extreme values saturate instead of overflowing (UBSan would catch that). */
    assert_true(response_oversold(INT64_MIN, INT64_MAX, INT64_MAX) == INT64_MAX);
    assert_true(response_oversold(INT64_MAX, INT64_MIN, INT64_MIN) == INT64_MIN);
    assert_true(response_oversold(0, 0, INT64_MAX) == INT64_MAX);
}

static void test_reset(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_reset(1, 5000),
                "{\"ok\":true,\"goods_id\":1,\"initial\":5000,\"stock\":5000}");
    o = parse(response_reset(7, 0), 4);
    assert_bool_field(o, "ok", true);
    assert_int_field(o, "goods_id", 7);
    assert_int_field(o, "initial", 0);
    assert_int_field(o, "stock", 0);
    json_decref(o);
}

static void test_modes(void **state)
{
    static const response_mode modes[] = {
        {"none", false, "no lock: read, check, write"},
        {"local", false, "a process-local mutex"},
        {"redis", true, "the Redis reentrant lock"},
    };
    json_t *o, *list, *m;

    (void)state;
    o = parse(response_modes("redis", "cache-rwlock", modes, 3), 3);
    assert_str_field(o, "default", "redis");
    assert_str_field(o, "cache_default", "cache-rwlock");
    list = json_object_get(o, "modes");
    assert_true(json_is_array(list));
    assert_int_equal(json_array_size(list), 3);
    for (size_t i = 0; i < 3; i++) {
        m = json_array_get(list, i);
        assert_true(json_is_object(m));
        assert_int_equal(json_object_size(m), 3);
        assert_str_field(m, "name", modes[i].name);
        assert_bool_field(m, "safe", modes[i].safe);
        assert_str_field(m, "summary", modes[i].summary);
    }
    json_decref(o);

    assert_body(response_modes("none", "cache-rwlock", NULL, 0),
                "{\"default\":\"none\",\"cache_default\":\"cache-rwlock\",\"modes\":[]}");
}

static void test_health(void **state)
{
    json_t *o;

    (void)state;
    assert_body(response_health(true, "ready", "svc-1", NULL),
                "{\"ok\":true,\"status\":\"ready\",\"instance\":\"svc-1\"}");
    o = parse(response_health(false, "not_ready", "svc-2", "redis: connection refused"), 4);
    assert_bool_field(o, "ok", false);
    assert_str_field(o, "status", "not_ready");
    assert_str_field(o, "instance", "svc-2");
    assert_str_field(o, "detail", "redis: connection refused");
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_without_detail),
        cmocka_unit_test(test_error_with_detail),
        cmocka_unit_test(test_error_with_invalid_utf8_detail),
        cmocka_unit_test(test_error_null_code),
        cmocka_unit_test(test_deducted),
        cmocka_unit_test(test_insufficient),
        cmocka_unit_test(test_unknown_goods),
        cmocka_unit_test(test_ordered),
        cmocka_unit_test(test_sold_out),
        cmocka_unit_test(test_stock),
        cmocka_unit_test(test_oversold_formula),
        cmocka_unit_test(test_deduct_503_details),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_modes),
        cmocka_unit_test(test_health),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
