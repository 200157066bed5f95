/*
 * test_http_edges.c - HTTP at the edges of the contract, through the running stack: body
 * sizes (at the limit, over it, chunked), Content-Types, methods and paths (405 with Allow,
 * 404), the request target taken as sent (%00 is no NUL that cuts "redis%00x" down to a mode
 * or "/api/stock/7%00junk" down to goods 7; the query key "mode" spelled exactly so), the
 * headers of the errors (Allow on a 405, WWW-Authenticate on a 401), keep-alive after an early
 * answer, nginx's own answers (TRACE, HTTP/2.0 request line) in JSON, and over 60 malformed
 * deduct requests that each get their 4xx and change nothing.
 *
 * Run alone as tests/stack/test_contract.c says: STACK_PROGRAMS=http_edges make
 * test-integration.
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BODY_LIMIT 16384 /* API.md: a larger deduct body is a 413 */

/* A deduct body of exactly `len` bytes: the JSON object padded with spaces (owned by the
 * case). */
static char *padded_body(long long goods_id, size_t len)
{
    char *body = own(malloc(len + 1), free);
    if (body == NULL)
        fail_msg("out of memory");
    int n = snprintf(body, len + 1, "{\"goods_id\":%lld,\"count\":1,\"mode\":\"redis\"}", goods_id);
    memset(body + n, ' ', len - (size_t)n);
    body[len] = '\0';
    return body;
}

/* 413 above 16384 bytes, through nginx and directly, with a length and chunked; 16384
 * itself is accepted. */
static void test_body_limits(void **state)
{
    (void)state;
    begin_case("body_limits");
    reset_goods(GOODS_LIMITS, 100);

    const char *bases[2] = {g_env.stock_url, g_env.replicas[0]};
    const char *names[2] = {"nginx", "a replica"};

    char *at_limit = padded_body(GOODS_LIMITS, BODY_LIMIT);
    char *over = padded_body(GOODS_LIMITS, BODY_LIMIT + 1);
    char *far_over = padded_body(GOODS_LIMITS, 4 * BODY_LIMIT);
    long long sold = 0;
    for (int i = 0; i < 2; i++) {
        char what[128];
        http_request rq = {.method = "POST", .base = bases[i], .path = "/api/deduct"};

        snprintf(what, sizeof(what), "%d-byte body via %s", BODY_LIMIT, names[i]);
        rq.body = at_limit;
        expect_deducted(call(&rq), GOODS_LIMITS, 1, -1, "redis", what);
        sold++;

        snprintf(what, sizeof(what), "%d-byte body via %s", BODY_LIMIT + 1, names[i]);
        rq.body = over;
        expect_error(call(&rq), 413, "payload_too_large", what);

        snprintf(what, sizeof(what), "%d-byte body via %s", 4 * BODY_LIMIT, names[i]);
        rq.body = far_over;
        expect_error(call(&rq), 413, "payload_too_large", what);

        snprintf(what, sizeof(what), "%d-byte chunked body (no length) via %s", 4 * BODY_LIMIT,
                 names[i]);
        rq.chunked = true;
        expect_error(call(&rq), 413, "payload_too_large", what);
    }
    expect_stock(GOODS_LIMITS, 100, 100 - sold, sold, sold, "after the size checks");
}

/* 415 for a Content-Type other than JSON; none at all is accepted, so is a charset. */
static void test_content_types(void **state)
{
    (void)state;
    begin_case("content_types");
    reset_goods(GOODS_MEDIA, 100);

    char body[128];
    deduct_body(body, sizeof(body), GOODS_MEDIA, 1, "redis");
    http_request rq = {
        .method = "POST", .base = g_env.stock_url, .path = "/api/deduct", .body = body};

    const char *refused[] = {"text/plain", "application/x-www-form-urlencoded", "application/jsonp",
                             "text/json"};
    for (size_t i = 0; i < 4; i++) {
        char what[96];
        snprintf(what, sizeof(what), "Content-Type %s", refused[i]);
        rq.content_type = refused[i];
        expect_error(call(&rq), 415, "unsupported_media_type", what);
    }
    expect_stock(GOODS_MEDIA, 100, 100, 0, 0, "after the 415s");

    rq.content_type = NO_CONTENT_TYPE;
    expect_deducted(call(&rq), GOODS_MEDIA, 1, 99, "redis", "no Content-Type");
    rq.content_type = "application/json; charset=utf-8";
    expect_deducted(call(&rq), GOODS_MEDIA, 1, 98, "redis", "application/json; charset=utf-8");
    rq.content_type = "Application/JSON";
    expect_deducted(call(&rq), GOODS_MEDIA, 1, 97, "redis", "Application/JSON");
    expect_stock(GOODS_MEDIA, 100, 97, 3, 3, "after the accepted types");
}

/* 405 for a wrong method on a known path, 404 for an unknown path: JSON, through nginx and
 * directly. */
static void test_methods_and_paths(void **state)
{
    (void)state;
    begin_case("methods_and_paths");
    static const struct {
        const char *method, *path;
    } wrong[] = {
        {"GET", "/api/deduct"},      {"PUT", "/api/deduct"},      {"DELETE", "/api/deduct"},
        {"DELETE", "/api/stock/1"},  {"POST", "/api/stock/1"},    {"PUT", "/api/stock/1"},
        {"GET", "/api/admin/reset"}, {"PUT", "/api/admin/reset"}, {"POST", "/api/modes"},
        {"POST", "/healthz"},        {"POST", "/readyz"},         {"POST", "/metrics"},
        {"DELETE", "/healthz"},
    };
    static const struct {
        const char *method, *path;
    } unknown[] = {
        {"GET", "/"},          {"GET", "/nope"},         {"GET", "/api"},
        {"GET", "/api/stock"}, {"POST", "/api/nothing"}, {"GET", "/api/deduct/1"},
        {"GET", "/healthz/x"}, {"POST", "/api/admin"},   {"GET", "/API/MODES"},
    };

    for (size_t b = 0; b < 2; b++) {
        const char *base = b == 0 ? g_env.stock_url : g_env.replicas[0];
        for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
            char what[160];
            snprintf(what, sizeof(what), "%s %s on %s", wrong[i].method, wrong[i].path, base);
            /* POSTs and PUTs carry an (empty) body with a length: nginx refuses a POST that
             * has neither a length nor chunks with 411, which is not what is tested here. */
            bool with_body =
                strcmp(wrong[i].method, "POST") == 0 || strcmp(wrong[i].method, "PUT") == 0;
            http_request rq = {.method = wrong[i].method,
                               .base = base,
                               .path = wrong[i].path,
                               .body = with_body ? "" : NULL};
            expect_error(call(&rq), 405, "method_not_allowed", what);
        }
        for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
            char what[160];
            snprintf(what, sizeof(what), "%s %s on %s", unknown[i].method, unknown[i].path, base);
            bool with_body = strcmp(unknown[i].method, "POST") == 0;
            http_request rq = {.method = unknown[i].method,
                               .base = base,
                               .path = unknown[i].path,
                               .body = with_body ? "{}" : NULL};
            expect_error(call(&rq), 404, "not_found", what);
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Cases: the request target as sent, the headers of the errors, keep-alive, nginx's own
 * ------------------------------------------------------------------------------------------ */

/* %00 stays what it was sent as: "redis%00x" is no mode and "4201%00" no goods id. Decoded
 * to a NUL, a C string would cut them down to "redis" and goods 4201, and sell or answer. */
static void test_encoded_nul(void **state)
{
    (void)state;
    begin_case("encoded_nul");
    reset_goods(GOODS_ENCODED, 10);

    const char *bases[2] = {g_env.stock_url, g_env.replicas[0]};
    const char *names[2] = {"nginx", "a replica"};
    const char *queries[] = {"/api/deduct?mode=redis%00x", "/api/deduct?mode=redis%00"};
    for (size_t b = 0; b < 2; b++) {
        for (size_t q = 0; q < sizeof(queries) / sizeof(queries[0]); q++) {
            char what[160];
            snprintf(what, sizeof(what), "POST %s (no mode in the body) via %s", queries[q],
                     names[b]);
            json_t *j = expect_error(deduct_at(bases[b], queries[q], GOODS_ENCODED, 1, NULL, NULL),
                                     400, "unknown_mode", what);
            (void)field_str(j, "detail", what);
            expect_stock(GOODS_ENCODED, 10, 10, 0, 0, what);
        }
        /* A body's "\u0000" is a NUL in the mode: the detail shows the mode as it was
         * received, escaped, not as a C string cuts it (''). */
        char body[96], what[160];
        snprintf(body, sizeof(body), "{\"goods_id\":%lld,\"count\":1,\"mode\":\"redis\\u0000\"}",
                 GOODS_ENCODED);
        snprintf(what, sizeof(what), "mode \"redis\\u0000\" in the body via %s", names[b]);
        http_request rq = {.method = "POST", .base = bases[b], .path = "/api/deduct", .body = body};
        json_t *j = expect_error(call(&rq), 400, "unknown_mode", what);
        const char *detail = field_str(j, "detail", what);
        if (strncmp(detail, "unknown mode \"redis\\u0000\";", 25) != 0)
            fail_msg("%s: the detail does not show the mode as received: %s", what, detail);
        expect_stock(GOODS_ENCODED, 10, 10, 0, 0, what);
    }
    /* The other escapes are still decoded: re%64is is redis. */
    expect_deducted(
        deduct_at(g_env.replicas[0], "/api/deduct?mode=re%64is", GOODS_ENCODED, 1, NULL, NULL),
        GOODS_ENCODED, 1, 9, "redis", "POST /api/deduct?mode=re%64is on a replica");

    const char *suffixes[] = {"%00", "%00junk"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        char path[64], what[160];
        snprintf(path, sizeof(path), "/api/stock/%lld%s", GOODS_ENCODED, suffixes[i]);
        snprintf(what, sizeof(what), "GET %s on a replica", path);
        expect_error(get(g_env.replicas[0], path), 400, "bad_request", what);

        /* nginx refuses a NUL in a path itself, before any replica: its own JSON 4xx. */
        snprintf(what, sizeof(what), "GET %s via nginx", path);
        http_reply *r = get(g_env.stock_url, path);
        if (r->status < 400 || r->status > 499)
            fail_msg("%s: status %ld, want a 4xx; body: %.300s", what, r->status, r->body);
        json_t *j = expect_json(r, r->status, what);
        if (field_bool(j, "ok", what))
            fail_msg("%s: ok is true in an error answer: %.300s", what, r->body);
        if (field_str(j, "error", what)[0] == '\0')
            fail_msg("%s: empty error: %.300s", what, r->body);
    }
    expect_stock(GOODS_ENCODED, 10, 9, 1, 1, "after the %00 requests");
}

/* The query key is "mode", spelled so: MODE and Mode are other keys, ignored as any other
 * unknown key is (the replica's default mode applies); "?mode" alone names an empty mode,
 * which no mode is. */
static void test_query_key(void **state)
{
    (void)state;
    begin_case("query_key");
    reset_goods(GOODS_QUERY_KEY, 20);

    const char *defaults[MAX_REPLICAS];
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char what[160];
        snprintf(what, sizeof(what), "GET /api/modes on %s", g_env.replicas[i]);
        defaults[i] = field_str(expect_json(get(g_env.replicas[i], "/api/modes"), 200, what),
                                "default", what);
    }

    const char *other_keys[] = {"/api/deduct?MODE=bogus", "/api/deduct?Mode=bogus"};
    long long sold = 0;
    for (size_t k = 0; k < sizeof(other_keys) / sizeof(other_keys[0]); k++) {
        for (size_t i = 0; i < g_env.n_replicas; i++) {
            char what[200];
            snprintf(what, sizeof(what), "POST %s on %s (default %s)", other_keys[k],
                     g_env.replicas[i], defaults[i]);
            json_t *j = expect_deducted(
                deduct_at(g_env.replicas[i], other_keys[k], GOODS_QUERY_KEY, 1, NULL, NULL),
                GOODS_QUERY_KEY, 1, -1, defaults[i], what);
            expect_field_str(j, "instance", g_env.instances[i], what);
            sold++;
        }
        /* Through nginx: the default of whichever replica answered. */
        char what[160];
        snprintf(what, sizeof(what), "POST %s via nginx", other_keys[k]);
        http_reply *r = deduct_at(g_env.stock_url, other_keys[k], GOODS_QUERY_KEY, 1, NULL, NULL);
        int who = instance_index(field_str(expect_json(r, 200, what), "instance", what));
        if (who < 0)
            fail_msg("%s: the instance is none of the replicas': %.300s", what, r->body);
        expect_deducted(r, GOODS_QUERY_KEY, 1, -1, defaults[who], what);
        sold++;
    }
    expect_stock(GOODS_QUERY_KEY, 20, 20 - sold, sold, sold, "after MODE and Mode");

    const char *empty[] = {"/api/deduct?mode", "/api/deduct?mode="};
    for (size_t k = 0; k < sizeof(empty) / sizeof(empty[0]); k++) {
        for (size_t b = 0; b < 2; b++) {
            const char *base = b == 0 ? g_env.replicas[0] : g_env.stock_url;
            char what[160];
            snprintf(what, sizeof(what), "POST %s on %s", empty[k], base);
            expect_error(deduct_at(base, empty[k], GOODS_QUERY_KEY, 1, NULL, NULL), 400,
                         "unknown_mode", what);
            expect_stock(GOODS_QUERY_KEY, 20, 20 - sold, sold, sold, what);
        }
    }
}

/* Asserts that r carries the header `name` with the value `want` (compared exactly). */
static void expect_header(const http_reply *r, const char *name, const char *want, const char *what)
{
    char got[256];

    if (!reply_header(r, name, got, sizeof(got)))
        fail_msg("%s: no %s header; headers:\n%s", what, name, r->headers);
    if (strcmp(got, want) != 0)
        fail_msg("%s: %s is '%s', want '%s'", what, name, got, want);
}

/* A 405 says which methods the path takes (Allow), a 401 which scheme it wants
 * (WWW-Authenticate: Bearer): directly and through nginx, which passes them on; with and
 * without a body (the replica answers those two at different moments). */
static void test_error_headers(void **state)
{
    (void)state;
    begin_case("error_headers");
    static const struct {
        const char *method, *path, *body, *allow;
    } wrong[] = {
        {"POST", "/api/modes", "", "GET, HEAD"},
        {"POST", "/metrics", "{}", "GET, HEAD"},
        {"DELETE", "/api/stock/1", NULL, "GET, HEAD"},
        {"PUT", "/healthz", "", "GET, HEAD"},
        {"GET", "/api/deduct", NULL, "POST"},
        {"PUT", "/api/deduct", "{\"goods_id\":1,\"count\":1}", "POST"},
        {"DELETE", "/api/admin/reset", NULL, "POST"},
    };
    const char *bases[2] = {g_env.replicas[0], g_env.stock_url};

    for (size_t b = 0; b < 2; b++) {
        for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
            char what[160];
            snprintf(what, sizeof(what), "%s %s%s on %s", wrong[i].method, wrong[i].path,
                     wrong[i].body != NULL && wrong[i].body[0] ? " with a body" : "", bases[b]);
            http_request rq = {.method = wrong[i].method,
                               .base = bases[b],
                               .path = wrong[i].path,
                               .body = wrong[i].body};
            http_reply *r = call(&rq);
            expect_error(r, 405, "method_not_allowed", what);
            expect_header(r, "Allow", wrong[i].allow, what);
        }
        /* No token, with a body that would reset nothing that exists, and with none. */
        const char *bodies[2] = {"{\"goods_id\":987654321,\"stock\":1}", ""};
        for (size_t k = 0; k < 2; k++) {
            char what[160];
            snprintf(what, sizeof(what), "reset without a token%s on %s",
                     bodies[k][0] ? "" : ", empty body", bases[b]);
            http_request rq = {
                .method = "POST", .base = bases[b], .path = "/api/admin/reset", .body = bodies[k]};
            http_reply *r = call(&rq);
            expect_error(r, 401, "unauthorized", what);
            expect_header(r, "WWW-Authenticate", "Bearer", what);
        }
    }
}

/* An early answer (known from the headers alone) to a request without a body leaves the
 * connection open: the next request on the handle reuses it, as nginx's keepalive pool
 * does. A POST with a body answered early may be closed (its body is never read). */
static void test_keep_alive(void **state)
{
    (void)state;
    begin_case("keep_alive");
    const char *base = g_env.replicas[0];
    static const struct {
        const char *method, *path, *body;
        long status;
        const char *error;
    } early[] = {
        {"GET", "/nope", NULL, 404, "not_found"},
        {"GET", "/api/deduct", NULL, 405, "method_not_allowed"},
        {"DELETE", "/api/stock/1", NULL, 405, "method_not_allowed"},
        {"POST", "/api/modes", "", 405, "method_not_allowed"},
        {"POST", "/api/admin/reset", "", 401, "unauthorized"},
    };

    expect_json(get(base, "/healthz"), 200, "GET /healthz, to open the connection");
    for (size_t i = 0; i < sizeof(early) / sizeof(early[0]); i++) {
        char what[160], next[200];
        snprintf(what, sizeof(what), "%s %s%s on %s", early[i].method, early[i].path,
                 early[i].body != NULL ? " (Content-Length: 0)" : "", base);
        http_request rq = {
            .method = early[i].method, .base = base, .path = early[i].path, .body = early[i].body};
        http_reply *r = call(&rq);
        expect_error(r, early[i].status, early[i].error, what);

        snprintf(next, sizeof(next), "GET /healthz after %s", what);
        http_reply *after = get(base, "/healthz");
        expect_json(after, 200, next);
        if (after->connects != 0 || after->local_port != r->local_port)
            fail_msg("%s: a new connection was opened (%ld opened; local port %ld, then %ld): "
                     "the replica closed the connection after its %ld",
                     next, after->connects, r->local_port, after->local_port, early[i].status);
    }

    /* A body refused unread: whatever becomes of the connection, the next call is answered
     * and nothing was sold. */
    reset_goods(GOODS_KEEPALIVE, 5);
    char body[128];
    deduct_body(body, sizeof(body), GOODS_KEEPALIVE, 1, "redis");
    http_request rq = {.method = "POST",
                       .base = base,
                       .path = "/api/deduct",
                       .body = body,
                       .content_type = "text/plain"};
    expect_error(call(&rq), 415, "unsupported_media_type", "a 415 to a POST with a body");
    http_reply *after = get(base, "/healthz");
    expect_json(after, 200, "GET /healthz after a 415 to a POST with a body");
    printf("    after a 415 to a POST with a body the connection was %s\n",
           after->connects == 0 ? "kept" : "closed (allowed)");
    expect_stock(GOODS_KEEPALIVE, 5, 5, 0, 0, "after the 415");
}

/* What nginx refuses before any replica sees it is JSON too: TRACE (405) and a request line
 * in HTTP/2.0 over plain TCP (505). */
static void test_nginx_own_errors(void **state)
{
    (void)state;
    begin_case("nginx_own_errors");

    http_request trace = {.method = "TRACE", .base = g_env.stock_url, .path = "/api/modes"};
    http_reply *r = call(&trace);
    json_t *j = expect_error(r, 405, "method_not_allowed", "TRACE /api/modes via nginx");
    if (json_object_size(j) != 2)
        fail_msg("TRACE /api/modes via nginx: want exactly {\"ok\":false,\"error\":"
                 "\"method_not_allowed\"}, got %.300s",
                 r->body);

    const char *what = "GET /api/modes HTTP/2.0 via nginx";
    r = raw_call(g_env.stock_url, "GET /api/modes HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n");
    j = expect_json(r, 505, what);
    if (field_bool(j, "ok", what))
        fail_msg("%s: ok is true in an error answer: %.300s", what, r->body);
    if (field_str(j, "error", what)[0] == '\0')
        fail_msg("%s: empty error: %.300s", what, r->body);
    printf("    HTTP/2.0 request line: %ld %s\n", r->status, r->body);
}

/* ------------------------------------------------------------------------------------------
 * Case: malformed deduct requests
 * ------------------------------------------------------------------------------------------ */

#define BODY_N(literal) literal, sizeof(literal) - 1 /* a body that may hold a NUL */
#define KEY_129                                                                                    \
    "Idempotency-Key: "                                                                            \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"   \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define VALID_BODY "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\"}"

typedef struct bad_request_case {
    const char *label;
    const char *body;
    size_t body_len;          /* 0: strlen(body) */
    const char *query;        /* appended to /api/deduct; NULL: none */
    const char *content_type; /* NULL: application/json */
    const char *header;       /* one more header line; NULL: none */
    long status;
    const char *error;
} bad_request_case;

static const bad_request_case bad_requests[] = {
    /* types and ranges */
    {"goods_id a string", "{\"goods_id\":\"" GM "\",\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count a string", "{\"goods_id\":" GM ",\"count\":\"1\"}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1.5", "{\"goods_id\":" GM ",\"count\":1.5}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1.0", "{\"goods_id\":" GM ",\"count\":1.0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1e0", "{\"goods_id\":" GM ",\"count\":1e0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1E0", "{\"goods_id\":" GM ",\"count\":1E0}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id " GM ".0", "{\"goods_id\":" GM ".0,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count -1", "{\"goods_id\":" GM ",\"count\":-1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 0", "{\"goods_id\":" GM ",\"count\":0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count -0", "{\"goods_id\":" GM ",\"count\":-0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 10001", "{\"goods_id\":" GM ",\"count\":10001}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 2^63", "{\"goods_id\":" GM ",\"count\":9223372036854775808}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"count 1e400", "{\"goods_id\":" GM ",\"count\":1e400}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id 0", "{\"goods_id\":0,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id negative", "{\"goods_id\":-" GM ",\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id 2^63", "{\"goods_id\":9223372036854775808,\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"goods_id 2^64+" GM, "{\"goods_id\":18446744073709555217,\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"goods_id 1e30", "{\"goods_id\":1e30,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 01", "{\"goods_id\":" GM ",\"count\":01}", 0, 0, 0, 0, 400, "bad_request"},
    {"count +1", "{\"goods_id\":" GM ",\"count\":+1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count null", "{\"goods_id\":" GM ",\"count\":null}", 0, 0, 0, 0, 400, "bad_request"},
    {"count true", "{\"goods_id\":" GM ",\"count\":true}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id false", "{\"goods_id\":false,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count an array", "{\"goods_id\":" GM ",\"count\":[1]}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id an object", "{\"goods_id\":{\"id\":" GM "},\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    /* fields */
    {"goods_id missing", "{\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count missing", "{\"goods_id\":" GM "}", 0, 0, 0, 0, 400, "bad_request"},
    {"empty object", "{}", 0, 0, 0, 0, 400, "bad_request"},
    {"unknown field", "{\"goods_id\":" GM ",\"count\":1,\"price\":5}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"field name in another case", "{\"goods_id\":" GM ",\"Count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"duplicate count", "{\"goods_id\":" GM ",\"count\":1,\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"duplicate goods_id", "{\"goods_id\":" GM ",\"goods_id\":" GM ",\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"duplicate mode", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\",\"mode\":\"redis\"}", 0,
     0, 0, 0, 400, "bad_request"},
    {"nested request", "{\"order\":{\"goods_id\":" GM ",\"count\":1}}", 0, 0, 0, 0, 400,
     "bad_request"},
    /* not one JSON object */
    {"an array", "[{\"goods_id\":" GM ",\"count\":1}]", 0, 0, 0, 0, 400, "bad_request"},
    {"null", "null", 0, 0, 0, 0, 400, "bad_request"},
    {"a number", "1", 0, 0, 0, 0, 400, "bad_request"},
    {"a string", "\"goods_id\"", 0, 0, 0, 0, 400, "bad_request"},
    {"empty body", "", 0, 0, 0, 0, 400, "bad_request"},
    {"whitespace only", " \n\t ", 0, 0, 0, 0, 400, "bad_request"},
    {"a form", "goods_id=" GM "&count=1", 0, 0, 0, 0, 400, "bad_request"},
    {"single quotes", "{'goods_id':" GM ",'count':1}", 0, 0, 0, 0, 400, "bad_request"},
    {"a comment", "{\"goods_id\":" GM ",/* one */\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"trailing garbage", VALID_BODY " x", 0, 0, 0, 0, 400, "bad_request"},
    {"two objects", VALID_BODY VALID_BODY, 0, 0, 0, 0, 400, "bad_request"},
    {"truncated", "{\"goods_id\":" GM ",\"count\":", 0, 0, 0, 0, 400, "bad_request"},
    {"trailing comma", "{\"goods_id\":" GM ",\"count\":1,}", 0, 0, 0, 0, 400, "bad_request"},
    {"a NUL byte after the object", BODY_N(VALID_BODY "\0"), 0, 0, 0, 400, "bad_request"},
    {"a NUL byte inside", BODY_N("{\"goods_id\":" GM ",\0\"count\":1}"), 0, 0, 0, 400,
     "bad_request"},
    /* "\u0000" is valid JSON: as a mode it names no mode; in a key it names no field */
    {"\\u0000 in the mode", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"re\\u0000dis\"}", 0, 0, 0,
     0, 400, "unknown_mode"},
    {"\\u0000 after a mode's name", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\\u0000\"}",
     0, 0, 0, 0, 400, "unknown_mode"},
    {"\\u0000 in a key", "{\"goods_id\":" GM ",\"count\":1,\"mo\\u0000de\":\"redis\"}", 0, 0, 0, 0,
     400, "bad_request"},
    {"invalid UTF-8 in a string", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\xC0\"}", 0, 0,
     0, 0, 400, "bad_request"},
    {"invalid UTF-8 in a key", "{\"goods_id\":" GM ",\"count\":1,\"\xFF\xFE\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    /* the mode */
    {"unknown mode in the body", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"fast\"}", 0, 0, 0, 0,
     400, "unknown_mode"},
    {"overlong mode name",
     "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redisredisredisredisredisredisredisredisredis"
     "redisredisredisredisredisredis\"}",
     0, 0, 0, 0, 400, "unknown_mode"},
    {"unknown mode in the query", "{\"goods_id\":" GM ",\"count\":1}", 0, "?mode=fast", 0, 0, 400,
     "unknown_mode"},
    /* the Idempotency-Key */
    {"empty Idempotency-Key", VALID_BODY, 0, 0, 0, "Idempotency-Key;", 400, "bad_request"},
    {"129-character Idempotency-Key", VALID_BODY, 0, 0, 0, KEY_129, 400, "bad_request"},
    {"Idempotency-Key with a space", VALID_BODY, 0, 0, 0, "Idempotency-Key: a b", 400,
     "bad_request"},
    {"Idempotency-Key with a slash", VALID_BODY, 0, 0, 0, "Idempotency-Key: a/b", 400,
     "bad_request"},
    {"Idempotency-Key with a star", VALID_BODY, 0, 0, 0, "Idempotency-Key: key*1", 400,
     "bad_request"},
    {"Idempotency-Key not ASCII", VALID_BODY, 0, 0, 0, "Idempotency-Key: cl\xC3\xA9", 400,
     "bad_request"},
    /* fault injection: this stack's replicas run without it (FAULTS=off, the default), so
     * any X-Fault is refused, a known fault as much as an unknown one */
    {"X-Fault on a replica without fault injection", VALID_BODY, 0, 0, 0,
     "X-Fault: crash-in-section", 400, "bad_request"},
    {"X-Fault pause on a replica without fault injection", VALID_BODY, 0, 0, 0,
     "X-Fault: pause-in-section=10", 400, "bad_request"},
    {"unknown X-Fault", VALID_BODY, 0, 0, 0, "X-Fault: explode", 400, "bad_request"},
    /* the media type */
    {"Content-Type text/plain", VALID_BODY, 0, 0, "text/plain", 0, 415, "unsupported_media_type"},
    {"Content-Type form", VALID_BODY, 0, 0, "application/x-www-form-urlencoded", 0, 415,
     "unsupported_media_type"},
};

/* Each malformed request gets its 4xx with the right error, as JSON, and sells nothing. */
static void test_malformed_requests(void **state)
{
    (void)state;
    begin_case("malformed_requests");
    reset_goods(GOODS_MALFORMED, 100);
    stock_view before = stock_get(GOODS_MALFORMED);
    size_t n = sizeof(bad_requests) / sizeof(bad_requests[0]);

    for (size_t i = 0; i < n; i++) {
        const bad_request_case *c = &bad_requests[i];
        char path[64], what[160];
        snprintf(path, sizeof(path), "/api/deduct%s", c->query ? c->query : "");
        snprintf(what, sizeof(what), "malformed #%zu (%s)", i + 1, c->label);
        http_request rq = {.method = "POST",
                           .base = g_env.stock_url,
                           .path = path,
                           .body = c->body,
                           .body_len = c->body_len,
                           .content_type = c->content_type,
                           .headers = {c->header}};
        expect_error(call(&rq), c->status, c->error, what);
        expect_unchanged(GOODS_MALFORMED, &before, what);
    }

    /* The same valid body does sell, so the rejections above were about what was wrong. */
    http_request ok = {.method = "POST",
                       .base = g_env.stock_url,
                       .path = "/api/deduct",
                       .body = VALID_BODY,
                       .headers = {"Idempotency-Key: Az09_.:-"}};
    expect_deducted(call(&ok), GOODS_MALFORMED, 1, 99, "redis", "the valid body, for contrast");
    printf("    %zu malformed requests refused, none sold\n", n);
}
/* Usage: test_http_edges [PATTERN | --list] (stack_main in tests/stack/env.c). */
int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_body_limits, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_content_types, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_methods_and_paths, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_encoded_nul, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_query_key, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_error_headers, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_keep_alive, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_nginx_own_errors, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_malformed_requests, case_setup, case_teardown),
    };
    return stack_main("http-edges", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
