/*
 * response.c - the JSON bodies of API.md, built with jansson.
 *
 * Each builder makes a jansson object field by field, in the order API.md shows them
 * (jansson keeps insertion order), and dumps it compact. json_object_set_new() takes the
 * value even when it fails, and accepts a NULL value (returning -1), so each builder can
 * chain the calls, OR their results, and check once: nothing leaks on any path.
 *
 * Strings are texts the service chose (error codes, mode names, the instance) or details
 * that may quote what a client sent. jansson refuses a string that is not valid UTF-8;
 * rather than answer 500 for that, json_text() replaces every non-ASCII byte of such
 * a string with '?'.
 */
#include "service/http/response.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A JSON string for s (NULL becomes ""): s itself when it is valid UTF-8, else s with its
 * non-ASCII bytes as '?'. Returns a new reference, or NULL when out of memory. */
static json_t *json_text(const char *s)
{
    json_t *v;
    char *copy;

    if (s == NULL)
        s = "";
    v = json_string(s);
    if (v != NULL)
        return v;
    copy = strdup(s);
    if (copy == NULL)
        return NULL;
    for (char *p = copy; *p != '\0'; p++) {
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    }
    v = json_string(copy);
    free(copy);
    return v;
}

static json_t *json_int(int64_t v)
{
    return json_integer((json_int_t)v);
}

/* Dumps obj compact and drops the reference; NULL when obj is NULL or a step failed. */
static char *finish(json_t *obj, int failed)
{
    char *out = NULL;

    if (obj != NULL && !failed)
        out = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(obj);
    return out;
}

char *response_error(const char *error, const char *detail)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_false());
        failed |= json_object_set_new(o, "error", json_text(error));
        if (detail != NULL)
            failed |= json_object_set_new(o, "detail", json_text(detail));
    }
    return finish(o, failed);
}

char *response_deducted(int64_t goods_id, int64_t count, int64_t remaining, int64_t order_id,
                        const char *mode, const char *instance)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_true());
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        failed |= json_object_set_new(o, "count", json_int(count));
        failed |= json_object_set_new(o, "remaining", json_int(remaining));
        failed |= json_object_set_new(o, "order_id", json_int(order_id));
        failed |= json_object_set_new(o, "mode", json_text(mode));
        failed |= json_object_set_new(o, "instance", json_text(instance));
    }
    return finish(o, failed);
}

char *response_dry_deduct(int64_t goods_id, int64_t count, const char *mode, const char *instance)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_true());
        failed |= json_object_set_new(o, "dry_run", json_true());
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        failed |= json_object_set_new(o, "count", json_int(count));
        failed |= json_object_set_new(o, "mode", json_text(mode));
        failed |= json_object_set_new(o, "instance", json_text(instance));
    }
    return finish(o, failed);
}

char *response_insufficient(int64_t goods_id, int64_t remaining)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_false());
        failed |= json_object_set_new(o, "error", json_string("insufficient_stock"));
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        failed |= json_object_set_new(o, "remaining", json_int(remaining));
    }
    return finish(o, failed);
}

char *response_ordered(int64_t order_id, const int64_t *goods_ids, const int64_t *counts,
                       const int64_t *remaining, size_t n, const char *mode, const char *instance)
{
    json_t *o = json_object(), *items = json_array();
    int failed = o == NULL || items == NULL;

    for (size_t i = 0; !failed && i < n; i++) {
        json_t *item = json_object();
        failed |= item == NULL;
        if (!failed) {
            failed |= json_object_set_new(item, "goods_id", json_int(goods_ids[i]));
            failed |= json_object_set_new(item, "count", json_int(counts[i]));
            failed |= json_object_set_new(item, "remaining", json_int(remaining[i]));
        }
        failed |= json_array_append_new(items, item);
    }
    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_true());
        failed |= json_object_set_new(o, "order_id", json_int(order_id));
        failed |= json_object_set_new(o, "items", items);
        items = NULL; /* taken by o, even on failure */
        failed |= json_object_set_new(o, "mode", json_text(mode));
        failed |= json_object_set_new(o, "instance", json_text(instance));
    }
    json_decref(items);
    return finish(o, failed);
}

char *response_sold_out(int64_t goods_id, int64_t remaining)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_false());
        failed |= json_object_set_new(o, "error", json_string("sold_out"));
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        failed |= json_object_set_new(o, "remaining", json_int(remaining));
    }
    return finish(o, failed);
}

char *response_unknown_goods(int64_t goods_id)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_false());
        failed |= json_object_set_new(o, "error", json_string("unknown_goods"));
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
    }
    return finish(o, failed);
}

int64_t response_oversold(int64_t initial, int64_t stock, int64_t sold)
{
    int64_t given_up, oversold;

    /* The figures come from the database and are small in practice; saturate rather than
     * overflow (undefined behaviour) if a broken row ever holds extreme values. */
    if (__builtin_sub_overflow(initial, stock, &given_up))
        given_up = initial < stock ? INT64_MIN : INT64_MAX;
    if (__builtin_sub_overflow(sold, given_up, &oversold))
        oversold = sold < given_up ? INT64_MIN : INT64_MAX;
    return oversold;
}

/* The six fields of a stock report; *failed set on an allocation failure. */
static json_t *stock_object(int64_t goods_id, int64_t initial, int64_t stock, int64_t sold,
                            int64_t orders, int *failed)
{
    json_t *o = json_object();

    *failed = o == NULL;
    if (!*failed) {
        *failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        *failed |= json_object_set_new(o, "initial", json_int(initial));
        *failed |= json_object_set_new(o, "stock", json_int(stock));
        *failed |= json_object_set_new(o, "sold", json_int(sold));
        *failed |= json_object_set_new(o, "orders", json_int(orders));
        *failed |=
            json_object_set_new(o, "oversold", json_int(response_oversold(initial, stock, sold)));
    }
    return o;
}

char *response_cache_peek(int64_t goods_id, const char *key, bool cached, int64_t stock)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        failed |= json_object_set_new(o, "key", json_text(key));
        failed |= json_object_set_new(o, "cached", json_boolean(cached));
        failed |= json_object_set_new(o, "stock", cached ? json_int(stock) : json_null());
    }
    return finish(o, failed);
}

char *response_cached_stock(int64_t goods_id, int64_t stock, bool from_cache)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        failed |= json_object_set_new(o, "stock", json_int(stock));
        failed |= json_object_set_new(o, "source", json_text(from_cache ? "cache" : "db"));
    }
    return finish(o, failed);
}

char *response_stock(int64_t goods_id, int64_t initial, int64_t stock, int64_t sold, int64_t orders)
{
    int failed;
    json_t *o = stock_object(goods_id, initial, stock, sold, orders, &failed);

    return finish(o, failed);
}

char *response_stock_audit(int64_t goods_id, int64_t initial, int64_t stock, int64_t sold,
                           int64_t orders, int64_t ledger_sold, int64_t ledger_orders)
{
    int failed;
    json_t *o = stock_object(goods_id, initial, stock, sold, orders, &failed);
    json_t *a = json_object();

    failed |= a == NULL;
    if (!failed) {
        failed |= json_object_set_new(a, "ledger_sold", json_int(ledger_sold));
        failed |= json_object_set_new(a, "ledger_orders", json_int(ledger_orders));
        failed |= json_object_set_new(a, "agrees",
                                      json_boolean(ledger_sold == sold && ledger_orders == orders));
        failed |= json_object_set(o, "audit", a);
    }
    json_decref(a);
    return finish(o, failed);
}

char *response_reset(int64_t goods_id, int64_t stock)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_true());
        failed |= json_object_set_new(o, "goods_id", json_int(goods_id));
        failed |= json_object_set_new(o, "initial", json_int(stock));
        failed |= json_object_set_new(o, "stock", json_int(stock));
    }
    return finish(o, failed);
}

/* One {"name":..,"safe":..,"summary":..} element. */
static json_t *mode_object(const response_mode *m)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "name", json_text(m->name));
        failed |= json_object_set_new(o, "safe", json_boolean(m->safe));
        failed |= json_object_set_new(o, "summary", json_text(m->summary));
    }
    if (failed) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *response_modes(const char *default_mode, const char *cache_default,
                     const response_mode *modes, size_t n)
{
    json_t *o = json_object(), *list = json_array();
    int failed = o == NULL || list == NULL;

    for (size_t i = 0; i < n && !failed; i++)
        failed |= json_array_append_new(list, mode_object(&modes[i]));
    if (!failed) {
        failed |= json_object_set_new(o, "default", json_text(default_mode));
        failed |= json_object_set_new(o, "cache_default", json_text(cache_default));
        failed |= json_object_set_new(o, "modes", list);
        list = NULL; /* taken by o, even when that failed */
    }
    json_decref(list);
    return finish(o, failed);
}

char *response_health(bool ok, const char *status, const char *instance, const char *detail)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "ok", json_boolean(ok));
        failed |= json_object_set_new(o, "status", json_text(status));
        failed |= json_object_set_new(o, "instance", json_text(instance));
        if (detail != NULL)
            failed |= json_object_set_new(o, "detail", json_text(detail));
    }
    return finish(o, failed);
}

char *response_replica(const char *instance, const char *process_id, const char *default_mode,
                       const char *pg_replication, json_t *metrics_json)
{
    json_t *o = metrics_json != NULL ? json_object() : NULL;
    int failed = o == NULL;

    if (!failed) {
        failed |= json_object_set_new(o, "instance", json_text(instance));
        failed |= json_object_set_new(o, "process_id", json_text(process_id));
        failed |= json_object_set_new(o, "default_mode", json_text(default_mode));
        failed |= json_object_set_new(o, "pg_replication", json_text(pg_replication));
        failed |= json_object_set_new(o, "metrics", metrics_json);
        metrics_json = NULL;
    }
    json_decref(metrics_json);
    return finish(o, failed);
}

char *response_lock(int64_t goods_id, const char *lock_name, bool held, const char *owner,
                    int64_t count, int64_t ttl_ms, int64_t fence)
{
    json_t *o = json_object();
    int failed = o == NULL;

    if (!failed) {
        const char *colon = held ? strrchr(owner, ':') : NULL;
        failed |= json_object_set_new(o, "goods_id", json_integer((json_int_t)goods_id));
        failed |= json_object_set_new(o, "lock", json_text(lock_name));
        failed |= json_object_set_new(o, "held", json_boolean(held));
        failed |= json_object_set_new(o, "owner", held ? json_text(owner) : json_null());
        failed |= json_object_set_new(o, "process_id",
                                      colon != NULL ? json_stringn(owner, (size_t)(colon - owner))
                                                    : json_null());
        failed |= json_object_set_new(o, "count", json_integer((json_int_t)count));
        failed |= json_object_set_new(o, "ttl_ms", json_integer((json_int_t)ttl_ms));
        failed |= json_object_set_new(o, "fence", json_integer((json_int_t)fence));
    }
    return finish(o, failed);
}

char *response_deduct_503(const char *error, const char *detail)
{
    if (strcmp(error, "commit_unknown") == 0)
        return response_error(error, "retry with the same Idempotency-Key");
    if (strcmp(error, "unavailable") == 0 || strcmp(error, "conflict") == 0)
        return response_error(error, detail);
    return response_error(error, NULL);
}

const sale_bodies response_sale_bodies = {
    .deducted = response_deducted,
    .insufficient = response_insufficient,
    .unknown_goods = response_unknown_goods,
    .refused = response_deduct_503,
    .ordered = response_ordered,
    .sold_out = response_sold_out,
};
