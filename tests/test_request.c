/*
 * test_request.c - request parsing and validation: every rejected shape of API.md, and more.
 *
 * Each malformed body is a test of its own (a row of tests[] with the case as its initial
 * state), so a failure names the shape. Every rejection must come with the exact detail
 * the service answers (or, for the texts jansson writes, the start of it), must be valid
 * UTF-8 (it goes into a JSON answer), and must leave the output zeroed.
 * Leaks are checked by LeakSanitizer when the suite runs from build/san.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/http/request.h"

#define GOODS_RULE "goods_id must be an integer from 1 to 9223372036854775807"
#define COUNT_RULE "count must be an integer from 1 to 10000"
#define STOCK_RULE "stock must be an integer from 0 to 1000000000"

enum body_kind { DEDUCT, RESET, ORDER };

typedef struct body_case {
    enum body_kind kind;
    const char *body;
    size_t len;         /* the exact length: bodies may hold NUL bytes */
    const char *detail; /* the detail expected */
    bool prefix;        /* detail is only the start (jansson's texts follow) */
} body_case;

/* A row of tests[] for one rejected body; sizeof keeps embedded NULs in the length. */
/* clang-format off */
#define BAD(kind, label, body, detail)                                                         \
    {                                                                                          \
        label, test_rejected, NULL, NULL, &(body_case){kind, body, sizeof(body) - 1, detail,    \
                                                       false}                                  \
    }
#define BAD_JSON(kind, label, body, detail_start)                                              \
    {                                                                                          \
        label, test_rejected, NULL, NULL, &(body_case){kind, body, sizeof(body) - 1,          \
                                                       detail_start, true}                     \
    }
/* clang-format on */

static bool all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != 0)
            return false;
    }
    return true;
}

/* The detail must fit in a JSON answer: jansson refuses strings that are not UTF-8. */
static void assert_valid_utf8(const char *text)
{
    json_t *s = json_string(text);
    assert_non_null(s);
    json_decref(s);
}

static void test_rejected(void **state)
{
    const body_case *c = *state;
    char detail[256];
    deduct_request d;
    reset_request r;
    order_request o;
    int rc;

    memset(detail, 'x', sizeof(detail));
    memset(&d, 0x5a, sizeof(d));
    memset(&r, 0x5a, sizeof(r));
    memset(&o, 0x5a, sizeof(o));
    if (c->kind == DEDUCT)
        rc = request_parse_deduct(c->body, c->len, &d, detail, sizeof(detail));
    else if (c->kind == ORDER)
        rc = request_parse_order(c->body, c->len, &o, detail, sizeof(detail));
    else
        rc = request_parse_reset(c->body, c->len, &r, detail, sizeof(detail));
    assert_int_equal(rc, -1);
    if (c->prefix) {
        if (strncmp(detail, c->detail, strlen(c->detail)) != 0)
            fail_msg("detail '%s' does not start with '%s'", detail, c->detail);
    } else {
        assert_string_equal(detail, c->detail);
    }
    assert_valid_utf8(detail);
    if (c->kind == DEDUCT)
        assert_true(all_zero(&d, sizeof(d)));
    else if (c->kind == ORDER)
        assert_true(all_zero(&o, sizeof(o)));
    else
        assert_true(all_zero(&r, sizeof(r)));
}

static int parse_deduct(const char *body, deduct_request *d)
{
    char detail[256] = "";
    int rc = request_parse_deduct(body, strlen(body), d, detail, sizeof(detail));
    if (rc != 0)
        print_message("refused: %s\n", detail);
    return rc;
}

static void test_deduct_minimal(void **state)
{
    deduct_request d;

    (void)state;
    assert_int_equal(parse_deduct("{\"goods_id\": 1, \"count\": 1}", &d), 0);
    assert_int_equal(d.goods_id, 1);
    assert_int_equal(d.count, 1);
    assert_false(d.has_mode);
    assert_string_equal(d.mode, "");
}

static void test_deduct_bounds(void **state)
{
    deduct_request d;

    (void)state;
    assert_int_equal(parse_deduct("{\"goods_id\":9223372036854775807,\"count\":10000}", &d), 0);
    assert_true(d.goods_id == INT64_MAX);
    assert_int_equal(d.count, 10000);
}

static void test_deduct_with_mode_any_order_and_blanks(void **state)
{
    deduct_request d;

    (void)state;
    assert_int_equal(
        parse_deduct(" \r\n\t{ \"mode\" : \"redis\" ,\n \"count\" : 7 , \"goods_id\" : 42 }\n ",
                     &d),
        0);
    assert_int_equal(d.goods_id, 42);
    assert_int_equal(d.count, 7);
    assert_true(d.has_mode);
    assert_string_equal(d.mode, "redis");
}

static void test_deduct_mode_kept_for_the_caller(void **state)
{
    deduct_request d;

    (void)state;
    /* Empty, unknown or odd names are the caller's to refuse (unknown_mode), not ours. */
    assert_int_equal(parse_deduct("{\"goods_id\":1,\"count\":1,\"mode\":\"\"}", &d), 0);
    assert_true(d.has_mode);
    assert_string_equal(d.mode, "");
    assert_int_equal(parse_deduct("{\"goods_id\":1,\"count\":1,\"mode\":\"no such\"}", &d), 0);
    assert_string_equal(d.mode, "no such");
    assert_int_equal(parse_deduct("{\"goods_id\":1,\"count\":1,\"mode\":\"\\u00e9t\\u00e9\"}", &d),
                     0);
    assert_string_equal(d.mode, "\xc3\xa9t\xc3\xa9");
    /* "\u0000" is valid JSON; a mode holding one names no mode, and must not be read as the
     * name before it ("redis"). */
    assert_int_equal(parse_deduct("{\"goods_id\":1,\"count\":1,\"mode\":\"redis\\u0000x\"}", &d),
                     0);
    assert_true(d.has_mode);
    assert_string_equal(d.mode, "");
    /* For the detail of its 400, as received (request_quote). */
    assert_string_equal(d.mode_shown, "\"redis\\u0000x\"");
    assert_int_equal(parse_deduct("{\"goods_id\":1,\"count\":1,\"mode\":\"\\u0000\"}", &d), 0);
    assert_string_equal(d.mode, "");
}

/* A client's text in a detail: quoted, escaped where it would not print, cut with "...". */
static void test_quote(void **state)
{
    char buf[REQUEST_SHOWN_MAX], small[12];

    (void)state;
    assert_string_equal(request_quote(buf, sizeof(buf), "redis", 5), "\"redis\"");
    assert_string_equal(request_quote(buf, sizeof(buf), "redis\0", 6), "\"redis\\u0000\"");
    assert_string_equal(request_quote(buf, sizeof(buf), "a\"b\\c\n", 6), "\"a\\\"b\\\\c\\u000a\"");
    assert_string_equal(request_quote(buf, sizeof(buf), "\xc3\xa9t\xc3\xa9", 5),
                        "\"\xc3\xa9t\xc3\xa9\"");
    assert_string_equal(request_quote(buf, sizeof(buf), "a\xff", 2), "\"a\\xff\"");
    assert_string_equal(request_quote(buf, sizeof(buf), "\xc3", 1), "\"\\xc3\"");
    /* Cut with "..." before the closing quote, never inside an escape or a character. */
    assert_string_equal(request_quote(small, sizeof(small), "abcdefghij", 10), "\"abcdef...\"");
    assert_string_equal(request_quote(small, sizeof(small), "ab\0cdef", 7), "\"ab...\"");
    assert_string_equal(request_quote(small, 7, "abc", 3), "");
}

static void test_deduct_mode_length_limit(void **state)
{
    char body[20000];
    char name[REQUEST_MODE_MAX + 1];
    deduct_request d;

    (void)state;
    /* 31 characters: the longest name that fits, kept. */
    memset(name, 'm', REQUEST_MODE_MAX - 1);
    name[REQUEST_MODE_MAX - 1] = '\0';
    snprintf(body, sizeof(body), "{\"goods_id\":1,\"count\":1,\"mode\":\"%s\"}", name);
    assert_int_equal(parse_deduct(body, &d), 0);
    assert_true(d.has_mode);
    assert_string_equal(d.mode, name);

    /* 32 characters: too long to be any mode's name, kept as an empty name. */
    memset(name, 'm', REQUEST_MODE_MAX);
    name[REQUEST_MODE_MAX] = '\0';
    snprintf(body, sizeof(body), "{\"goods_id\":1,\"count\":1,\"mode\":\"%s\"}", name);
    assert_int_equal(parse_deduct(body, &d), 0);
    assert_true(d.has_mode);
    assert_string_equal(d.mode, "");

    /* 15000 characters: the same. */
    int n = snprintf(body, sizeof(body), "{\"goods_id\":1,\"count\":1,\"mode\":\"");
    memset(body + n, 'm', 15000);
    strcpy(body + n + 15000, "\"}");
    assert_int_equal(parse_deduct(body, &d), 0);
    assert_true(d.has_mode);
    assert_string_equal(d.mode, "");
}

static void test_deduct_parses_exactly_len_bytes(void **state)
{
    /* The buffer holds more than the body; only len bytes are the body (as from the HTTP
     * layer, which does not NUL-terminate). */
    static const char buf[] = "{\"goods_id\":3,\"count\":2}garbage";
    char detail[128];
    deduct_request d;

    (void)state;
    assert_int_equal(request_parse_deduct(buf, 24, &d, detail, sizeof(detail)), 0);
    assert_int_equal(d.goods_id, 3);
    assert_int_equal(d.count, 2);
    /* One byte short: the object is not closed. */
    assert_int_equal(request_parse_deduct(buf, 23, &d, detail, sizeof(detail)), -1);
    assert_true(strncmp(detail, "invalid JSON: ", 14) == 0);
}

static int parse_order(const char *body, order_request *o)
{
    char detail[256] = "";
    int rc = request_parse_order(body, strlen(body), o, detail, sizeof(detail));
    if (rc != 0)
        print_message("refused: %s\n", detail);
    return rc;
}

static void test_order_items_kept_in_request_order(void **state)
{
    order_request o;

    (void)state;
    assert_int_equal(parse_order("{\"items\":[{\"goods_id\":7,\"count\":1},"
                                 "{\"count\":2,\"goods_id\":1}],\"mode\":\"redis\"}",
                                 &o),
                     0);
    assert_int_equal(o.n_items, 2);
    assert_int_equal(o.items[0].goods_id, 7);
    assert_int_equal(o.items[0].count, 1);
    assert_int_equal(o.items[1].goods_id, 1);
    assert_int_equal(o.items[1].count, 2);
    assert_true(o.has_mode);
    assert_string_equal(o.mode, "redis");
}

/* 16 items, each at its bounds, and no mode: the replica's default. */
static void test_order_sixteen_items(void **state)
{
    char body[2048] = "{\"items\":[";
    order_request o;

    (void)state;
    for (int i = 0; i < 16; i++) {
        char item[96];
        snprintf(item, sizeof(item), "%s{\"goods_id\":%lld,\"count\":%d}", i > 0 ? "," : "",
                 i == 15 ? 9223372036854775807LL : (long long)i + 1, i % 2 ? 10000 : 1);
        strcat(body, item);
    }
    strcat(body, "]}");
    assert_int_equal(parse_order(body, &o), 0);
    assert_int_equal(o.n_items, 16);
    assert_true(o.items[15].goods_id == INT64_MAX);
    assert_int_equal(o.items[1].count, 10000);
    assert_false(o.has_mode);
}

static void test_order_seventeen_items_refused(void **state)
{
    char body[2048] = "{\"items\":[", detail[256];
    order_request o;

    (void)state;
    for (int i = 0; i < 17; i++) {
        char item[64];
        snprintf(item, sizeof(item), "%s{\"goods_id\":%d,\"count\":1}", i > 0 ? "," : "", i + 1);
        strcat(body, item);
    }
    strcat(body, "]}");
    assert_int_equal(request_parse_order(body, strlen(body), &o, detail, sizeof(detail)), -1);
    assert_string_equal(detail, "items must be an array of 1 to 16 items");
    assert_true(all_zero(&o, sizeof(o)));
}

static void test_reset_accepts_bounds(void **state)
{
    char detail[128];
    reset_request r;
    static const char zero[] = "{\"goods_id\":1,\"stock\":0}";
    static const char max[] = "{\"stock\":1000000000,\"goods_id\":9223372036854775807}";

    (void)state;
    assert_int_equal(request_parse_reset(zero, strlen(zero), &r, detail, sizeof(detail)), 0);
    assert_int_equal(r.goods_id, 1);
    assert_int_equal(r.stock, 0);
    assert_int_equal(request_parse_reset(max, strlen(max), &r, detail, sizeof(detail)), 0);
    assert_true(r.goods_id == INT64_MAX);
    assert_int_equal(r.stock, 1000000000);
}

static void test_deep_nesting_refused(void **state)
{
    /* jansson stops at its depth limit (2048) instead of overflowing the stack. */
    size_t depth = 5000, len = 2 * depth;
    char *body = malloc(len);
    char detail[256];
    deduct_request d;

    (void)state;
    assert_non_null(body);
    memset(body, '[', depth);
    memset(body + depth, ']', depth);
    assert_int_equal(request_parse_deduct(body, len, &d, detail, sizeof(detail)), -1);
    assert_true(strncmp(detail, "invalid JSON: ", 14) == 0);
    free(body);
}

static void test_long_unknown_key_is_cut_in_detail(void **state)
{
    char body[2000], detail[256], expected[128];
    deduct_request d;
    int n;

    (void)state;
    n = snprintf(body, sizeof(body), "{\"goods_id\":1,\"count\":1,\"");
    memset(body + n, 'k', 1000);
    strcpy(body + n + 1000, "\":1}");
    assert_int_equal(request_parse_deduct(body, strlen(body), &d, detail, sizeof(detail)), -1);
    strcpy(expected, "unknown field '");
    memset(expected + 15, 'k', 48);
    strcpy(expected + 15 + 48, "...'");
    assert_string_equal(detail, expected);
}

static void test_detail_cut_on_a_character_boundary(void **state)
{
    /* A key of 2-byte characters and a detail buffer too small for it: the cut must not
     * leave half a character behind. */
    static const char body[] = "{\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\":1}";
    char detail[20];
    deduct_request d;

    (void)state;
    for (size_t len = 1; len <= sizeof(detail); len++) {
        assert_int_equal(request_parse_deduct(body, sizeof(body) - 1, &d, detail, len), -1);
        assert_true(strlen(detail) < len);
        assert_valid_utf8(detail);
    }
    assert_int_equal(request_parse_deduct(body, sizeof(body) - 1, &d, detail, sizeof(detail)), -1);
    assert_true(strncmp(detail, "unknown field '\xc3\xa9", 17) == 0);
}

static void test_control_characters_in_key_are_masked(void **state)
{
    static const char body[] = "{\"a\\nb\\u0007\":1}";
    char detail[128];
    deduct_request d;

    (void)state;
    assert_int_equal(request_parse_deduct(body, sizeof(body) - 1, &d, detail, sizeof(detail)), -1);
    assert_string_equal(detail, "unknown field 'a?b?'");
}

static void test_goods_id_path_segment(void **state)
{
    static const struct {
        const char *text;
        int rc;
        int64_t value;
    } cases[] = {
        {"1", 0, 1},
        {"42", 0, 42},
        {"9223372036854775807", 0, INT64_MAX},
        {"9223372036854775808", -1, 0},
        {"18446744073709551617", -1, 0},
        {"99999999999999999999999999", -1, 0},
        {"0", -1, 0},
        {"01", -1, 0}, /* no leading zeros: one spelling per goods */
        {"007", -1, 0},
        {"", -1, 0},
        {"-1", -1, 0},
        {"+1", -1, 0},
        {" 1", -1, 0},
        {"1 ", -1, 0},
        {"1a", -1, 0},
        {"0x10", -1, 0},
        {"1.0", -1, 0},
        {"1e3", -1, 0},
        {"\xef\xbc\x91", -1, 0}, /* fullwidth digit one */
        {"%31", -1, 0},          /* percent-encoded: decoding is not ours */
    };
    int64_t v;

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        v = -7;
        int rc = request_parse_goods_id(cases[i].text, &v);
        if (rc != cases[i].rc)
            fail_msg("goods id '%s': got %d, want %d", cases[i].text, rc, cases[i].rc);
        if (rc == 0 && v != cases[i].value)
            fail_msg("goods id '%s': got %lld", cases[i].text, (long long)v);
        if (rc != 0 && v != -7)
            fail_msg("goods id '%s': *out written on failure", cases[i].text);
    }
    assert_int_equal(request_parse_goods_id(NULL, &v), -1);
}

static void test_idempotency_key_shape(void **state)
{
    char key[200];

    (void)state;
    assert_false(request_idempotency_key_valid(NULL));
    assert_false(request_idempotency_key_valid(""));
    assert_true(request_idempotency_key_valid("a"));
    assert_true(request_idempotency_key_valid("AZaz09_.:-"));
    assert_true(request_idempotency_key_valid("order:2026-11-21.0001"));

    memset(key, 'k', sizeof(key));
    key[128] = '\0';
    assert_true(request_idempotency_key_valid(key));
    key[128] = 'k';
    key[129] = '\0';
    assert_false(request_idempotency_key_valid(key));
    key[199] = '\0';
    assert_false(request_idempotency_key_valid(key));

    static const char *const bad[] = {
        "a b", "a/b", "a+b",      "a=b",  "a\"b",  "a'b", "a\tb", "a\nb",
        "a,b", "a;b", "\xc3\xa9", "key!", "{key}", "a*",  "a~b",  "%20",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (request_idempotency_key_valid(bad[i]))
            fail_msg("key '%s' accepted", bad[i]);
    }
}

static void test_content_type(void **state)
{
    static const char *const good[] = {
        "application/json",
        "APPLICATION/JSON",
        "Application/Json",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "application/json ; charset=utf-8",
        "application/json ",
        " application/json",
        "application/json;",
    };
    static const char *const bad[] = {
        "",
        "application/jsonx",
        "application/json-seq",
        "application/json-patch+json",
        "application/problem+json",
        "application/",
        "application",
        "application/json x",
        "application/json,text/plain",
        "text/json",
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "json",
        "*/*",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        if (!request_content_type_is_json(good[i]))
            fail_msg("content type '%s' refused", good[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (request_content_type_is_json(bad[i]))
            fail_msg("content type '%s' accepted", bad[i]);
    }
    assert_false(request_content_type_is_json(NULL));
}

static void test_bearer_token(void **state)
{
    static const struct {
        const char *header;
        bool ok;
    } cases[] = {
        {"Bearer s3cret", true},
        {"bearer s3cret", true}, /* the scheme is case-insensitive (RFC 7235) */
        {"BEARER s3cret", true},
        {"Bearer   s3cret", true},
        {"Bearer s3cret  ", true},
        {"Bearer S3CRET", false}, /* the token is not */
        {"Bearer s3cre", false},
        {"Bearer s3cretx", false},
        {"Bearer xs3cret", false},
        {"Bearer s3cret x", false},
        {"Bearer ", false},
        {"Bearer", false},
        {"Bearers3cret", false},
        {"Basic s3cret", false},
        {"s3cret", false},
        {"", false},
    };

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (request_bearer_matches(cases[i].header, "s3cret") != cases[i].ok)
            fail_msg("'%s': want %s", cases[i].header, cases[i].ok ? "match" : "no match");
    }
    assert_false(request_bearer_matches(NULL, "s3cret"));
    assert_false(request_bearer_matches("Bearer x", NULL));
    /* An empty expected token must never match, not even "Bearer ". */
    assert_false(request_bearer_matches("Bearer ", ""));
    assert_false(request_bearer_matches("Bearer", ""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* accepted */
        cmocka_unit_test(test_deduct_minimal),
        cmocka_unit_test(test_deduct_bounds),
        cmocka_unit_test(test_deduct_with_mode_any_order_and_blanks),
        cmocka_unit_test(test_deduct_mode_kept_for_the_caller),
        cmocka_unit_test(test_quote),
        cmocka_unit_test(test_deduct_mode_length_limit),
        cmocka_unit_test(test_deduct_parses_exactly_len_bytes),
        cmocka_unit_test(test_reset_accepts_bounds),
        cmocka_unit_test(test_order_items_kept_in_request_order),
        cmocka_unit_test(test_order_sixteen_items),
        cmocka_unit_test(test_order_seventeen_items_refused),

    /* an order's cart */
#define ITEMS_RULE "items must be an array of 1 to 16 items"
        BAD(ORDER, "order: no items field", "{\"mode\":\"redis\"}", "missing field 'items'"),
        BAD(ORDER, "order: empty items", "{\"items\":[]}", ITEMS_RULE),
        BAD(ORDER, "order: items an object", "{\"items\":{\"goods_id\":1,\"count\":1}}",
            ITEMS_RULE),
        BAD(ORDER, "order: items null", "{\"items\":null}", ITEMS_RULE),
        BAD(ORDER, "order: an item a number", "{\"items\":[1]}",
            "items[0] must be an object {\"goods_id\":..,\"count\":..}"),
        BAD(ORDER, "order: a goods twice",
            "{\"items\":[{\"goods_id\":1,\"count\":1},{\"goods_id\":2,\"count\":1},"
            "{\"goods_id\":1,\"count\":3}]}",
            "items[2]: goods_id 1 is already items[0]"),
        BAD(ORDER, "order: a zero count",
            "{\"items\":[{\"goods_id\":1,\"count\":1},{\"goods_id\":2,\"count\":0}]}",
            "items[1]: " COUNT_RULE),
        BAD(ORDER, "order: count 10001", "{\"items\":[{\"goods_id\":1,\"count\":10001}]}",
            "items[0]: " COUNT_RULE),
        BAD(ORDER, "order: count 1.0", "{\"items\":[{\"goods_id\":1,\"count\":1.0}]}",
            "items[0]: " COUNT_RULE),
        BAD(ORDER, "order: goods_id 0", "{\"items\":[{\"goods_id\":0,\"count\":1}]}",
            "items[0]: " GOODS_RULE),
        BAD(ORDER, "order: an item without count", "{\"items\":[{\"goods_id\":1}]}",
            "items[0]: missing field 'count'"),
        BAD(ORDER, "order: an unknown field in an item",
            "{\"items\":[{\"goods_id\":1,\"count\":1,\"price\":5}]}",
            "items[0]: unknown field 'price'"),
        BAD(ORDER, "order: an unknown field", "{\"items\":[{\"goods_id\":1,\"count\":1}],\"x\":1}",
            "unknown field 'x'"),
        BAD(ORDER, "order: goods_id and count at the top", "{\"goods_id\":1,\"count\":1}",
            "unknown field 'goods_id'"),
        BAD(ORDER, "order: a duplicate key in an item",
            "{\"items\":[{\"goods_id\":1,\"count\":1,\"count\":2}]}", "duplicate key 'count'"),
        BAD(ORDER, "order: a duplicate items key",
            "{\"items\":[{\"goods_id\":1,\"count\":1}],\"items\":[]}", "duplicate key 'items'"),
        BAD(ORDER, "order: mode a number", "{\"items\":[{\"goods_id\":1,\"count\":1}],\"mode\":1}",
            "mode must be a string"),
        BAD(ORDER, "order: a goods_id beyond int64",
            "{\"items\":[{\"goods_id\":9223372036854775808,\"count\":1}]}", GOODS_RULE),

        /* not an object */
        BAD(DEDUCT, "empty body", "", "body is empty: expected a JSON object"),
        BAD(DEDUCT, "blank body", " \r\n\t ", "body is empty: expected a JSON object"),
        BAD(DEDUCT, "an empty array", "[]", "body must be a JSON object"),
        BAD(DEDUCT, "an array of the object", "[{\"goods_id\":1,\"count\":1}]",
            "body must be a JSON object"),
        BAD(DEDUCT, "a top-level number", "5", "body must be a JSON object"),
        BAD(DEDUCT, "a top-level string", "\"goods\"", "body must be a JSON object"),
        BAD(DEDUCT, "a top-level null", "null", "body must be a JSON object"),
        BAD(DEDUCT, "a top-level true", "true", "body must be a JSON object"),

        /* count */
        BAD(DEDUCT, "count as a string", "{\"goods_id\":1,\"count\":\"1\"}", COUNT_RULE),
        BAD(DEDUCT, "count 1.0", "{\"goods_id\":1,\"count\":1.0}", COUNT_RULE),
        BAD(DEDUCT, "count 1e0", "{\"goods_id\":1,\"count\":1e0}", COUNT_RULE),
        BAD(DEDUCT, "count 1E2", "{\"goods_id\":1,\"count\":1E2}", COUNT_RULE),
        BAD(DEDUCT, "count 1.5", "{\"goods_id\":1,\"count\":1.5}", COUNT_RULE),
        BAD(DEDUCT, "count 0", "{\"goods_id\":1,\"count\":0}", COUNT_RULE),
        BAD(DEDUCT, "count -0", "{\"goods_id\":1,\"count\":-0}", COUNT_RULE),
        BAD(DEDUCT, "count -1", "{\"goods_id\":1,\"count\":-1}", COUNT_RULE),
        BAD(DEDUCT, "count 10001", "{\"goods_id\":1,\"count\":10001}", COUNT_RULE),
        BAD(DEDUCT, "count beyond int64", "{\"goods_id\":1,\"count\":99999999999999999999}",
            COUNT_RULE),
        BAD(DEDUCT, "count true", "{\"goods_id\":1,\"count\":true}", COUNT_RULE),
        BAD(DEDUCT, "count false", "{\"goods_id\":1,\"count\":false}", COUNT_RULE),
        BAD(DEDUCT, "count null", "{\"goods_id\":1,\"count\":null}", COUNT_RULE),
        BAD(DEDUCT, "count in an array", "{\"goods_id\":1,\"count\":[1]}", COUNT_RULE),
        BAD(DEDUCT, "count as an object", "{\"goods_id\":1,\"count\":{\"n\":1}}", COUNT_RULE),

        /* goods_id */
        BAD(DEDUCT, "goods_id as a string", "{\"goods_id\":\"1\",\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id 1.0", "{\"goods_id\":1.0,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id 1e0", "{\"goods_id\":1e0,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id 0", "{\"goods_id\":0,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id -1", "{\"goods_id\":-1,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id INT64_MIN", "{\"goods_id\":-9223372036854775808,\"count\":1}",
            GOODS_RULE),
        BAD(DEDUCT, "goods_id 2^63", "{\"goods_id\":9223372036854775808,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id 2^63 with blanks", "{\"goods_id\" :\n 9223372036854775808 }",
            GOODS_RULE),
        BAD(DEDUCT, "goods_id below INT64_MIN", "{\"goods_id\":-9223372036854775809,\"count\":1}",
            GOODS_RULE),
        BAD(DEDUCT, "goods_id 1e999", "{\"goods_id\":1e999,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id true", "{\"goods_id\":true,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id null", "{\"goods_id\":null,\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id in an array", "{\"goods_id\":[1],\"count\":1}", GOODS_RULE),
        BAD(DEDUCT, "goods_id as an object", "{\"goods_id\":{\"id\":1},\"count\":1}", GOODS_RULE),

        /* fields */
        BAD(DEDUCT, "an empty object", "{}", "missing field 'goods_id'"),
        BAD(DEDUCT, "no count", "{\"goods_id\":1}", "missing field 'count'"),
        BAD(DEDUCT, "no goods_id", "{\"count\":1}", "missing field 'goods_id'"),
        BAD(DEDUCT, "an unknown field", "{\"goods_id\":1,\"count\":1,\"foo\":1}",
            "unknown field 'foo'"),
        BAD(DEDUCT, "an unknown field first", "{\"foo\":1}", "unknown field 'foo'"),
        BAD(DEDUCT, "a field in another case", "{\"goods_id\":1,\"Count\":1}",
            "unknown field 'Count'"),
        BAD(DEDUCT, "extra nesting", "{\"goods_id\":1,\"count\":1,\"extra\":{\"count\":1}}",
            "unknown field 'extra'"),
        BAD(DEDUCT, "the body wrapped", "{\"deduct\":{\"goods_id\":1,\"count\":1}}",
            "unknown field 'deduct'"),
        BAD(DEDUCT, "an empty key", "{\"goods_id\":1,\"count\":1,\"\":1}", "unknown field ''"),
        BAD(DEDUCT, "a duplicate count", "{\"goods_id\":1,\"count\":1,\"count\":2}",
            "duplicate key 'count'"),
        BAD(DEDUCT, "a duplicate goods_id", "{\"goods_id\":1,\"count\":1,\"goods_id\":2}",
            "duplicate key 'goods_id'"),
        BAD(DEDUCT, "a duplicate spelled with an escape",
            "{\"goods_id\":1,\"count\":1,\"\\u0063ount\":2}", "duplicate key 'count'"),
        BAD(DEDUCT, "a duplicate key with a quote in it",
            "{\"goods_id\":1,\"count\":1,\"a\\\"b\":1,\"a\\\"b\":2}", "duplicate key 'a\"b'"),
        BAD(DEDUCT, "a duplicate in a nested object",
            "{\"goods_id\":1,\"count\":1,\"x\":{\"a\":1,\"a\":1}}", "duplicate key 'a'"),

        /* mode */
        BAD(DEDUCT, "mode as a number", "{\"goods_id\":1,\"count\":1,\"mode\":1}",
            "mode must be a string"),
        BAD(DEDUCT, "mode null", "{\"goods_id\":1,\"count\":1,\"mode\":null}",
            "mode must be a string"),
        BAD(DEDUCT, "mode true", "{\"goods_id\":1,\"count\":1,\"mode\":true}",
            "mode must be a string"),
        BAD(DEDUCT, "mode in an array", "{\"goods_id\":1,\"count\":1,\"mode\":[\"redis\"]}",
            "mode must be a string"),
        BAD(DEDUCT, "mode as an object", "{\"goods_id\":1,\"count\":1,\"mode\":{}}",
            "mode must be a string"),

        /* not JSON, or JSON we refuse */
        BAD_JSON(DEDUCT, "invalid UTF-8 in a value",
                 "{\"goods_id\":1,\"count\":1,\"mode\":\"\xff\"}",
                 "invalid JSON: unable to decode byte 0xff"),
        BAD_JSON(DEDUCT, "invalid UTF-8 in a key", "{\"goods_id\":1,\"count\":1,\"\xc3\":1}",
                 "invalid JSON: unable to decode byte 0xc3"),
        BAD_JSON(DEDUCT, "overlong UTF-8", "{\"goods_id\":1,\"count\":1,\"mode\":\"\xc0\xaf\"}",
                 "invalid JSON: unable to decode byte 0xc0"),
        BAD_JSON(DEDUCT, "a lone surrogate", "{\"goods_id\":1,\"count\":1,\"mode\":\"\\ud800\"}",
                 "invalid JSON: invalid Unicode"),
        BAD(DEDUCT, "an escaped NUL in a key", "{\"goods_id\":1,\"count\":1,\"mo\\u0000de\":1}",
            "a key contains \\u0000: no field is named so"),
        BAD(DEDUCT, "a NUL byte inside", "{\"goods_id\":1,\0\"count\":1}",
            "invalid JSON: the body contains a NUL byte"),
        BAD(DEDUCT, "a NUL byte after the object", "{\"goods_id\":1,\"count\":1}\0",
            "invalid JSON: the body contains a NUL byte"),
        BAD_JSON(DEDUCT, "trailing garbage", "{\"goods_id\":1,\"count\":1} x",
                 "invalid JSON: end of file expected near 'x' at line 1 column"),
        BAD_JSON(DEDUCT, "two objects", "{\"goods_id\":1,\"count\":1}{}",
                 "invalid JSON: end of file expected"),
        BAD_JSON(DEDUCT, "a trailing comma", "{\"goods_id\":1,\"count\":1,}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "not closed", "{\"goods_id\":1,\"count\":1", "invalid JSON: "),
        BAD_JSON(DEDUCT, "single quotes", "{'goods_id':1,'count':1}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "bare keys", "{goods_id:1,count:1}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "a leading zero", "{\"goods_id\":1,\"count\":01}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "a plus sign", "{\"goods_id\":1,\"count\":+1}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "a hex number", "{\"goods_id\":1,\"count\":0x1}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "NaN", "{\"goods_id\":1,\"count\":NaN}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "Infinity", "{\"goods_id\":1,\"count\":Infinity}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "a comment", "{\"goods_id\":1,/* x */\"count\":1}", "invalid JSON: "),
        BAD_JSON(DEDUCT, "a byte order mark", "\xef\xbb\xbf{\"goods_id\":1,\"count\":1}",
                 "invalid JSON: invalid token near '\\xef\\xbb\\xbf'"),
        BAD_JSON(DEDUCT, "form encoding", "goods_id=1&count=1", "invalid JSON: "),
        cmocka_unit_test(test_deep_nesting_refused),
        cmocka_unit_test(test_long_unknown_key_is_cut_in_detail),
        cmocka_unit_test(test_detail_cut_on_a_character_boundary),
        cmocka_unit_test(test_control_characters_in_key_are_masked),

        /* reset */
        BAD(RESET, "reset: stock -1", "{\"goods_id\":1,\"stock\":-1}", STOCK_RULE),
        BAD(RESET, "reset: stock 1000000001", "{\"goods_id\":1,\"stock\":1000000001}", STOCK_RULE),
        BAD(RESET, "reset: stock 5.0", "{\"goods_id\":1,\"stock\":5.0}", STOCK_RULE),
        BAD(RESET, "reset: stock 1e30", "{\"goods_id\":1,\"stock\":1e30}", STOCK_RULE),
        BAD(RESET, "reset: stock beyond int64", "{\"goods_id\":1,\"stock\":99999999999999999999}",
            STOCK_RULE),
        BAD(RESET, "reset: stock as a string", "{\"goods_id\":1,\"stock\":\"5\"}", STOCK_RULE),
        BAD(RESET, "reset: stock null", "{\"goods_id\":1,\"stock\":null}", STOCK_RULE),
        BAD(RESET, "reset: goods_id 0", "{\"goods_id\":0,\"stock\":5}", GOODS_RULE),
        BAD(RESET, "reset: goods_id 2^63", "{\"goods_id\":9223372036854775808,\"stock\":5}",
            GOODS_RULE),
        BAD(RESET, "reset: no stock", "{\"goods_id\":1}", "missing field 'stock'"),
        BAD(RESET, "reset: no goods_id", "{\"stock\":5}", "missing field 'goods_id'"),
        BAD(RESET, "reset: count is not a reset field", "{\"goods_id\":1,\"stock\":5,\"count\":1}",
            "unknown field 'count'"),
        BAD(RESET, "reset: mode is not a reset field",
            "{\"goods_id\":1,\"stock\":5,\"mode\":\"redis\"}", "unknown field 'mode'"),
        BAD(RESET, "reset: a duplicate stock", "{\"goods_id\":1,\"stock\":5,\"stock\":6}",
            "duplicate key 'stock'"),
        BAD(RESET, "reset: an array", "[1,5]", "body must be a JSON object"),
        BAD(RESET, "reset: empty body", "", "body is empty: expected a JSON object"),

        /* headers and path */
        cmocka_unit_test(test_goods_id_path_segment),
        cmocka_unit_test(test_idempotency_key_shape),
        cmocka_unit_test(test_content_type),
        cmocka_unit_test(test_bearer_token),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
