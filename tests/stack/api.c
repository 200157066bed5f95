/*
 * api.c - the service's answers checked against ../shared/API.md (status, Content-Type, the
 * JSON body), and the calls every case makes: stock, admin reset, deduct, /metrics.
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * JSON checks
 * ------------------------------------------------------------------------------------------ */

bool content_type_is(const char *value, const char *type)
{
    size_t n = strlen(type);
    return strncasecmp(value, type, n) == 0 &&
           (value[n] == '\0' || value[n] == ';' || value[n] == ' ');
}

json_t *expect_json(const http_reply *r, long status, const char *what)
{
    json_error_t jerr;
    json_t *j;

    if (r->status != status)
        fail_msg("%s: status %ld, want %ld; body: %.400s", what, r->status, status, r->body);
    if (!content_type_is(r->content_type, "application/json"))
        fail_msg("%s: Content-Type '%s', want application/json; body: %.200s", what,
                 r->content_type, r->body);
    j = own(json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr), json_release);
    if (j == NULL)
        fail_msg("%s: the body is not JSON (%s): %.400s", what, jerr.text, r->body);
    if (!json_is_object(j))
        fail_msg("%s: the body is not a JSON object: %.400s", what, r->body);
    return j;
}

long long field_int(const json_t *obj, const char *key, const char *what)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        fail_msg("%s: field '%s' missing or not an integer", what, key);
    return (long long)json_integer_value(v);
}

const char *field_str(const json_t *obj, const char *key, const char *what)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        fail_msg("%s: field '%s' missing or not a string", what, key);
    return json_string_value(v);
}

bool field_bool(const json_t *obj, const char *key, const char *what)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_boolean(v))
        fail_msg("%s: field '%s' missing or not a boolean", what, key);
    return json_is_true(v);
}

void expect_field_int(const json_t *obj, const char *key, long long want, const char *what)
{
    long long got = field_int(obj, key, what);
    if (got != want)
        fail_msg("%s: %s is %lld, want %lld", what, key, got, want);
}

void expect_field_str(const json_t *obj, const char *key, const char *want, const char *what)
{
    const char *got = field_str(obj, key, what);
    if (strcmp(got, want) != 0)
        fail_msg("%s: %s is '%s', want '%s'", what, key, got, want);
}

json_t *expect_error(const http_reply *r, long status, const char *error, const char *what)
{
    json_t *j = expect_json(r, status, what);
    if (field_bool(j, "ok", what))
        fail_msg("%s: ok is true in an error answer: %.300s", what, r->body);
    const char *got = field_str(j, "error", what);
    if (strcmp(got, error) != 0)
        fail_msg("%s: error '%s', want '%s'; body: %.400s", what, got, error, r->body);
    return j;
}

int instance_index(const char *name)
{
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (strcmp(g_env.instances[i], name) == 0)
            return (int)i;
    return -1;
}

stock_view stock_get(long long goods_id)
{
    char path[64], what[96];
    stock_view v;

    snprintf(path, sizeof(path), "/api/stock/%lld", goods_id);
    snprintf(what, sizeof(what), "GET %s", path);
    json_t *j = expect_json(get(g_env.stock_url, path), 200, what);
    expect_field_int(j, "goods_id", goods_id, what);
    v.initial = field_int(j, "initial", what);
    v.stock = field_int(j, "stock", what);
    v.sold = field_int(j, "sold", what);
    v.orders = field_int(j, "orders", what);
    v.oversold = field_int(j, "oversold", what);
    if (v.oversold != v.sold - (v.initial - v.stock))
        fail_msg("%s: oversold %lld is not sold - (initial - stock) = %lld - (%lld - %lld)", what,
                 v.oversold, v.sold, v.initial, v.stock);
    return v;
}

stock_view stock_settled(long long goods_id)
{
    stock_view a = stock_get(goods_id), b;
    double start = now_s();

    for (;;) {
        usleep(1000 * 1000);
        b = stock_get(goods_id);
        if (b.stock == a.stock && b.orders == a.orders && b.sold == a.sold)
            return b;
        if (now_s() - start > 15)
            fail_msg("goods %lld: the books still change after 15 s", goods_id);
        a = b;
    }
}

void expect_stock(long long goods_id, long long initial, long long stock, long long sold,
                  long long orders, const char *what)
{
    stock_view v = stock_get(goods_id);
    if (v.initial != initial || v.stock != stock || v.sold != sold || v.orders != orders)
        fail_msg("%s: goods %lld has initial %lld stock %lld sold %lld orders %lld, want "
                 "%lld %lld %lld %lld",
                 what, goods_id, v.initial, v.stock, v.sold, v.orders, initial, stock, sold,
                 orders);
}

void expect_unchanged(long long goods_id, const stock_view *before, const char *what)
{
    expect_stock(goods_id, before->initial, before->stock, before->sold, before->orders, what);
}

http_reply *reset_call(long long goods_id, long long stock)
{
    char body[128];

    snprintf(body, sizeof(body), "{\"goods_id\":%lld,\"stock\":%lld}", goods_id, stock);
    http_request rq = {.method = "POST",
                       .base = g_env.stock_url,
                       .path = "/api/admin/reset",
                       .body = body,
                       .headers = {g_env.auth_header}};
    return call(&rq);
}

void reset_goods(long long goods_id, long long stock)
{
    char what[96];

    snprintf(what, sizeof(what), "reset goods %lld to %lld", goods_id, stock);
    json_t *j = expect_json(reset_call(goods_id, stock), 200, what);
    if (!field_bool(j, "ok", what))
        fail_msg("%s: ok is false", what);
    expect_field_int(j, "goods_id", goods_id, what);
    expect_field_int(j, "initial", stock, what);
    expect_field_int(j, "stock", stock, what);
}

void deduct_body(char *buf, size_t len, long long goods_id, long long count, const char *mode)
{
    if (mode != NULL)
        snprintf(buf, len, "{\"goods_id\":%lld,\"count\":%lld,\"mode\":\"%s\"}", goods_id, count,
                 mode);
    else
        snprintf(buf, len, "{\"goods_id\":%lld,\"count\":%lld}", goods_id, count);
}

http_reply *deduct_at(const char *base, const char *path, long long goods_id, long long count,
                      const char *mode, const char *key)
{
    char body[160], key_header[256];

    deduct_body(body, sizeof(body), goods_id, count, mode);
    if (key != NULL)
        snprintf(key_header, sizeof(key_header), "Idempotency-Key: %s", key);
    http_request rq = {.method = "POST",
                       .base = base,
                       .path = path,
                       .body = body,
                       .headers = {key != NULL ? key_header : NULL}};
    return call(&rq);
}

http_reply *deduct(const char *base, long long goods_id, long long count, const char *mode,
                   const char *key)
{
    return deduct_at(base, "/api/deduct", goods_id, count, mode, key);
}

json_t *expect_deducted(const http_reply *r, long long goods_id, long long count,
                        long long remaining, const char *mode, const char *what)
{
    json_t *j = expect_json(r, 200, what);
    if (!field_bool(j, "ok", what))
        fail_msg("%s: ok is false in a 200 answer", what);
    expect_field_int(j, "goods_id", goods_id, what);
    expect_field_int(j, "count", count, what);
    if (remaining >= 0)
        expect_field_int(j, "remaining", remaining, what);
    else
        (void)field_int(j, "remaining", what);
    if (field_int(j, "order_id", what) <= 0)
        fail_msg("%s: order_id is not positive: %.300s", what, r->body);
    expect_field_str(j, "mode", mode, what);
    const char *instance = field_str(j, "instance", what);
    if (instance_index(instance) < 0)
        fail_msg("%s: instance '%s' is none of the replicas'", what, instance);
    return j;
}

double metric_value(const char *base, const char *series)
{
    char what[160];
    size_t n = strlen(series);

    snprintf(what, sizeof(what), "GET %s/metrics", base);
    http_reply *r = get(base, "/metrics");
    if (r->status != 200)
        fail_msg("%s: status %ld", what, r->status);
    for (const char *line = r->body; line != NULL && *line != '\0';) {
        if (strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    fail_msg("%s: no series %s", what, series);
    return 0; /* not reached */
}
