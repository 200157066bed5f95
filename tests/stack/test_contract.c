/*
 * test_contract.c - the contract of ../shared/API.md through the running stack, endpoint by
 * endpoint: status, Content-Type and body. POST /api/deduct's outcomes (200 with every field,
 * 409, 404 in every mode, 400 naming the field) and where its mode comes from (body, query,
 * the replica's default, unknown); 503 lock_timeout behind a lock held elsewhere, and the
 * retry of its key; GET /api/stock/{id}; POST /api/admin/reset, and without its token;
 * GET /api/modes; /healthz, /readyz and /metrics.
 *
 * Run alone: `STACK_PROGRAMS=contract make test-integration` starts a stack on free ports,
 * runs this program only against it (then the shell checks that follow it), and stops it.
 * Against a stack already up, from the project root, with the variables of
 * tests/stack/stack_support.h set: build/san/tests/stack/test_contract [PATTERN | --list].
 * `make test-integration` runs every program of tests/stack/ against one stack.
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Cases: the contract
 * ------------------------------------------------------------------------------------------ */

/* POST /api/deduct: 200 with every field, 409, 404, 400 with a detail naming the field. */
static void test_deduct_outcomes(void **state)
{
    (void)state;
    begin_case("deduct_outcomes");
    reset_goods(GOODS_DEDUCT, 5);

    json_t *j = expect_deducted(deduct(g_env.stock_url, GOODS_DEDUCT, 2, "redis", NULL),
                                GOODS_DEDUCT, 2, 3, "redis", "deduct 2 of 5");
    long long first_order = field_int(j, "order_id", "deduct 2 of 5");
    expect_stock(GOODS_DEDUCT, 5, 3, 2, 1, "after deducting 2 of 5");

    j = expect_error(deduct(g_env.stock_url, GOODS_DEDUCT, 4, "redis", NULL), 409,
                     "insufficient_stock", "deduct 4 of 3");
    expect_field_int(j, "goods_id", GOODS_DEDUCT, "deduct 4 of 3");
    expect_field_int(j, "remaining", 3, "deduct 4 of 3");
    expect_stock(GOODS_DEDUCT, 5, 3, 2, 1, "after a 409");

    j = expect_deducted(deduct(g_env.stock_url, GOODS_DEDUCT, 3, "redis", NULL), GOODS_DEDUCT, 3, 0,
                        "redis", "deduct the last 3");
    if (field_int(j, "order_id", "deduct the last 3") == first_order)
        fail_msg("two sales got the same order_id %lld", first_order);
    j = expect_error(deduct(g_env.stock_url, GOODS_DEDUCT, 1, "redis", NULL), 409,
                     "insufficient_stock", "deduct 1 of 0");
    expect_field_int(j, "remaining", 0, "deduct 1 of 0");
    expect_stock(GOODS_DEDUCT, 5, 0, 5, 2, "sold out");

    /* Unknown goods, in each mode (each reads the goods its own way), and at the top of the
     * id range. */
    const char *modes[] = {"none", "local", "redis", "pg-for-update", "pg-atomic", "pg-advisory"};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        char what[96];
        snprintf(what, sizeof(what), "deduct unknown goods in mode %s", modes[i]);
        j = expect_error(deduct(g_env.stock_url, GOODS_UNKNOWN, 1, modes[i], NULL), 404,
                         "unknown_goods", what);
        expect_field_int(j, "goods_id", GOODS_UNKNOWN, what);
    }
    j = expect_error(deduct(g_env.stock_url, GOODS_MAX, 1, "redis", NULL), 404, "unknown_goods",
                     "deduct goods 2^63-1");
    expect_field_int(j, "goods_id", GOODS_MAX, "deduct goods 2^63-1");

    /* 400: the detail names what is wrong. */
    reset_goods(GOODS_DEDUCT, 5);
    j = expect_error(deduct(g_env.stock_url, GOODS_DEDUCT, 0, NULL, NULL), 400, "bad_request",
                     "count 0");
    if (strstr(field_str(j, "detail", "count 0"), "count") == NULL)
        fail_msg("count 0: the detail does not name count: %s", field_str(j, "detail", ""));
    j = expect_error(deduct(g_env.stock_url, 0, 1, NULL, NULL), 400, "bad_request", "goods_id 0");
    if (strstr(field_str(j, "detail", "goods_id 0"), "goods_id") == NULL)
        fail_msg("goods_id 0: the detail does not name goods_id: %s", field_str(j, "detail", ""));
    expect_stock(GOODS_DEDUCT, 5, 5, 0, 0, "after two 400s");
}

/* POST /api/deduct/dry: 404 on a replica without FAULTS=on; on one with it, the body checked
 * as a sale's and a 200 that says dry_run, and nothing sold either way. */
static void test_deduct_dry(void **state)
{
    const char *fault_url = getenv("FAULT_REPLICA_URL");
    stock_view before;
    json_t *j;

    (void)state;
    begin_case("deduct_dry");
    reset_goods(GOODS_DRY, 5);
    before = stock_settled(GOODS_DRY);
    expect_error(deduct_at(g_env.stock_url, "/api/deduct/dry", GOODS_DRY, 1, "redis", NULL), 404,
                 "not_found", "dry run without FAULTS=on");
    if (fault_url == NULL || fault_url[0] == '\0')
        fail_msg("FAULT_REPLICA_URL is not set: the dry run needs a replica with FAULTS=on");
    j = expect_json(deduct_at(fault_url, "/api/deduct/dry", GOODS_DRY, 2, "redis", NULL), 200,
                    "dry run");
    if (!field_bool(j, "ok", "dry run") || !field_bool(j, "dry_run", "dry run"))
        fail_msg("dry run: ok and dry_run should both be true");
    expect_field_int(j, "goods_id", GOODS_DRY, "dry run");
    expect_field_int(j, "count", 2, "dry run");
    expect_field_str(j, "mode", "redis", "dry run");
    expect_error(deduct_at(fault_url, "/api/deduct/dry", GOODS_DRY, 0, NULL, NULL), 400,
                 "bad_request", "dry run, count 0");
    expect_error(deduct_at(fault_url, "/api/deduct/dry", GOODS_DRY, 1, "no-such-mode", NULL), 400,
                 "unknown_mode", "dry run, unknown mode");
    expect_unchanged(GOODS_DRY, &before, "after dry runs");
}

/* The mode: from the body, from the query, the body's winning, the default, and unknown. */
static void test_deduct_modes(void **state)
{
    (void)state;
    begin_case("deduct_modes");
    reset_goods(GOODS_MODES, 100);

    const char *modes[] = {"none", "local", "redis"};
    for (size_t i = 0; i < 3; i++) {
        char path[64], what[96];
        snprintf(what, sizeof(what), "body mode %s", modes[i]);
        expect_deducted(deduct(g_env.stock_url, GOODS_MODES, 1, modes[i], NULL), GOODS_MODES, 1, -1,
                        modes[i], what);
        snprintf(path, sizeof(path), "/api/deduct?mode=%s", modes[i]);
        snprintf(what, sizeof(what), "query mode %s, none in the body", modes[i]);
        expect_deducted(deduct_at(g_env.stock_url, path, GOODS_MODES, 1, NULL, NULL), GOODS_MODES,
                        1, -1, modes[i], what);
    }
    expect_deducted(
        deduct_at(g_env.stock_url, "/api/deduct?mode=none", GOODS_MODES, 1, "redis", NULL),
        GOODS_MODES, 1, -1, "redis", "body redis wins over query none");
    expect_deducted(
        deduct_at(g_env.stock_url, "/api/deduct?mode=redis", GOODS_MODES, 1, "local", NULL),
        GOODS_MODES, 1, -1, "local", "body local wins over query redis");
    long long sold = 8;

    /* Neither: each replica uses its default, the one its /api/modes names. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char what[160];
        snprintf(what, sizeof(what), "GET /api/modes on %s", g_env.replicas[i]);
        json_t *m = expect_json(get(g_env.replicas[i], "/api/modes"), 200, what);
        const char *def = field_str(m, "default", what);
        snprintf(what, sizeof(what), "no mode at all, on %s (default %s)", g_env.replicas[i], def);
        json_t *j = expect_deducted(deduct(g_env.replicas[i], GOODS_MODES, 1, NULL, NULL),
                                    GOODS_MODES, 1, -1, def, what);
        expect_field_str(j, "instance", g_env.instances[i], what);
        sold++;
    }

    /* Unknown modes, in the body and in the query: 400 unknown_mode with a detail. */
    json_t *j = expect_error(deduct(g_env.stock_url, GOODS_MODES, 1, "bogus", NULL), 400,
                             "unknown_mode", "body mode bogus");
    (void)field_str(j, "detail", "body mode bogus");
    j = expect_error(
        deduct_at(g_env.stock_url, "/api/deduct?mode=bogus", GOODS_MODES, 1, NULL, NULL), 400,
        "unknown_mode", "query mode bogus");
    (void)field_str(j, "detail", "query mode bogus");
    expect_stock(GOODS_MODES, 100, 100 - sold, sold, sold, "after the mode checks");
}

static char g_lock_key[64]; /* a lock this process holds as "another owner"; "" when none */

static int lock_case_teardown(void **state)
{
    if (g_lock_key[0] != '\0') {
        if (redis_cli("DEL", g_lock_key, NULL, NULL) != 0)
            fprintf(stderr, "could not delete %s: delete it by hand\n", g_lock_key);
        g_lock_key[0] = '\0';
    }
    return case_teardown(state);
}

/* 503 lock_timeout: with lock:goods:N held by another owner, a redis-mode deduct waits the
 * bound, gives up and sells nothing; a 5xx is not stored, so its key's retry sells. */
static void test_lock_timeout(void **state)
{
    (void)state;
    begin_case("lock_timeout");
    reset_goods(GOODS_LOCK, 10);

    char ttl[32], key[96];
    snprintf(g_lock_key, sizeof(g_lock_key), "lock:goods:%lld", GOODS_LOCK);
    snprintf(ttl, sizeof(ttl), "%ld", g_env.lock_wait_ms + 10000);
    if (redis_cli("HSET", g_lock_key, "test-stack:another-owner", "1") != 0 ||
        redis_cli("PEXPIRE", g_lock_key, ttl, NULL) != 0)
        fail_msg("redis-cli could not take %s on port %s", g_lock_key, g_env.redis_port);

    snprintf(key, sizeof(key), "lock-timeout-%s", g_env.run_tag);
    http_reply *r = deduct(g_env.stock_url, GOODS_LOCK, 1, "redis", key);
    printf("    redis-mode deduct with the lock held elsewhere: %ld after %.2f s (bound %ld ms)\n",
           r->status, r->seconds, g_env.lock_wait_ms);
    expect_error(r, 503, "lock_timeout", "deduct while another owner holds the lock");
    /* It waited the bound (not less: it did not give up early), and returned within it plus
     * one Redis command timeout and some scheduling slack. */
    if (r->seconds < 0.9 * (double)g_env.lock_wait_ms / 1000.0 ||
        r->seconds > (double)g_env.lock_wait_ms / 1000.0 + 2.0)
        fail_msg("lock_timeout came after %.2f s, want about %ld ms", r->seconds,
                 g_env.lock_wait_ms);
    expect_stock(GOODS_LOCK, 10, 10, 0, 0, "after the lock timeout");

    /* none and local do not take the Redis lock: they are not held up by it. */
    expect_deducted(deduct(g_env.stock_url, GOODS_LOCK, 1, "none", NULL), GOODS_LOCK, 1, 9, "none",
                    "none-mode deduct while the Redis lock is held");

    if (redis_cli("DEL", g_lock_key, NULL, NULL) != 0)
        fail_msg("redis-cli could not delete %s", g_lock_key);
    g_lock_key[0] = '\0';
    expect_deducted(deduct(g_env.stock_url, GOODS_LOCK, 1, "redis", key), GOODS_LOCK, 1, 8, "redis",
                    "the 503's key retried once the lock is free");
    expect_stock(GOODS_LOCK, 10, 8, 2, 2, "after the retry");
}

/* GET /api/stock/{id}: six fields, the oversold arithmetic, the audit, 404, and 400 for bad
 * ids. */
static void test_stock_endpoint(void **state)
{
    (void)state;
    begin_case("stock_endpoint");
    reset_goods(GOODS_STOCK, 7);
    expect_stock(GOODS_STOCK, 7, 7, 0, 0, "fresh goods");
    expect_deducted(deduct(g_env.stock_url, GOODS_STOCK, 2, "redis", NULL), GOODS_STOCK, 2, 5,
                    "redis", "deduct 2");
    expect_deducted(deduct(g_env.stock_url, GOODS_STOCK, 1, "local", NULL), GOODS_STOCK, 1, 4,
                    "local", "deduct 1");
    stock_view v = stock_get(GOODS_STOCK);
    if (v.initial != 7 || v.stock != 4 || v.sold != 3 || v.orders != 2 || v.oversold != 0)
        fail_msg("stock after 2+1 of 7: initial %lld stock %lld sold %lld orders %lld oversold "
                 "%lld, want 7 4 3 2 0",
                 v.initial, v.stock, v.sold, v.orders, v.oversold);

    /* Every replica reads the same row. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char path[64], what[160];
        snprintf(path, sizeof(path), "/api/stock/%lld", GOODS_STOCK);
        snprintf(what, sizeof(what), "GET %s on %s", path, g_env.replicas[i]);
        json_t *j = expect_json(get(g_env.replicas[i], path), 200, what);
        expect_field_int(j, "stock", 4, what);
        expect_field_int(j, "sold", 3, what);
    }

    /* ?audit=1: the same figures and the ledger's sums beside them; 0 is the plain report;
     * anything else is refused rather than read as "no audit". */
    char apath[96];
    snprintf(apath, sizeof(apath), "/api/stock/%lld?audit=1", GOODS_STOCK);
    json_t *aj = expect_json(get(g_env.stock_url, apath), 200, apath);
    expect_field_int(aj, "sold", 3, apath);
    expect_field_int(aj, "orders", 2, apath);
    json_t *audit = json_object_get(aj, "audit");
    if (!json_is_object(audit))
        fail_msg("%s: no \"audit\" object", apath);
    expect_field_int(audit, "ledger_sold", 3, apath);
    expect_field_int(audit, "ledger_orders", 2, apath);
    if (!field_bool(audit, "agrees", apath))
        fail_msg("%s: the counters and the ledger disagree", apath);
    snprintf(apath, sizeof(apath), "/api/stock/%lld?audit=0", GOODS_STOCK);
    aj = expect_json(get(g_env.stock_url, apath), 200, apath);
    if (json_object_get(aj, "audit") != NULL)
        fail_msg("%s: an audit it did not ask for", apath);
    snprintf(apath, sizeof(apath), "/api/stock/%lld?audit=yes", GOODS_STOCK);
    expect_error(get(g_env.stock_url, apath), 400, "bad_request", apath);

    char path[64];
    snprintf(path, sizeof(path), "/api/stock/%lld", GOODS_UNKNOWN);
    json_t *j = expect_error(get(g_env.stock_url, path), 404, "unknown_goods", path);
    expect_field_int(j, "goods_id", GOODS_UNKNOWN, path);

    const char *bad[] = {
        "/api/stock/abc", "/api/stock/0",   "/api/stock/-1",   "/api/stock/1.0",
        "/api/stock/+1",  "/api/stock/1e3", "/api/stock/0x10", "/api/stock/9223372036854775808",
        "/api/stock/%201"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char what[96];
        snprintf(what, sizeof(what), "GET %s", bad[i]);
        expect_error(get(g_env.stock_url, bad[i]), 400, "bad_request", what);
    }
}

/* POST /api/admin/reset: the answer, what it resets, and 400 for bad bodies. */
static void test_admin_reset(void **state)
{
    (void)state;
    begin_case("admin_reset");
    reset_goods(GOODS_RESET, 10);
    expect_deducted(deduct(g_env.stock_url, GOODS_RESET, 3, "redis", NULL), GOODS_RESET, 3, 7,
                    "redis", "deduct before a reset");
    reset_goods(GOODS_RESET, 20); /* deletes the orders: sold and orders start again */
    expect_stock(GOODS_RESET, 20, 20, 0, 0, "after a reset of goods with orders");
    reset_goods(GOODS_RESET, 0);
    expect_stock(GOODS_RESET, 0, 0, 0, 0, "reset to 0");
    reset_goods(GOODS_RESET, 1000000000);
    expect_stock(GOODS_RESET, 1000000000, 1000000000, 0, 0, "reset to the maximum");
    reset_goods(GOODS_RESET, 50);

    const char *bad[] = {
        "{\"goods_id\":3501,\"stock\":-1}",
        "{\"goods_id\":3501,\"stock\":1000000001}",
        "{\"goods_id\":3501,\"stock\":\"5\"}",
        "{\"goods_id\":3501,\"stock\":5.0}",
        "{\"goods_id\":3501,\"stock\":null}",
        "{\"goods_id\":3501}",
        "{\"stock\":5}",
        "{\"goods_id\":0,\"stock\":5}",
        "{\"goods_id\":-3501,\"stock\":5}",
        "{\"goods_id\":\"3501\",\"stock\":5}",
        "{\"goods_id\":3501,\"stock\":5,\"extra\":1}",
        "{\"goods_id\":3501,\"stock\":5,\"stock\":6}",
        "[3501,5]",
        "not json",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char what[128];
        snprintf(what, sizeof(what), "reset with body '%s'", bad[i]);
        http_request rq = {.method = "POST",
                           .base = g_env.stock_url,
                           .path = "/api/admin/reset",
                           .body = bad[i],
                           .headers = {g_env.auth_header}};
        expect_error(call(&rq), 400, "bad_request", what);
        expect_stock(GOODS_RESET, 50, 50, 0, 0, what);
    }
}

/* GET /api/modes: the default and at least none/local/redis and the PostgreSQL rungs, with their
 * safe flags. */
static void test_modes_endpoint(void **state)
{
    (void)state;
    begin_case("modes_endpoint");
    const char *want[] = {"none",      "local",       "redis",          "pg-for-update",
                          "pg-atomic", "pg-advisory", "pg-serializable"};
    const bool want_safe[] = {false, false, true, true, true, true, true};
    enum { N_WANT = sizeof(want) / sizeof(want[0]) };

    json_t *j = expect_json(get(g_env.stock_url, "/api/modes"), 200, "GET /api/modes");
    const char *def = field_str(j, "default", "GET /api/modes");
    const json_t *modes = json_object_get(j, "modes");
    if (!json_is_array(modes) || json_array_size(modes) < N_WANT)
        fail_msg("GET /api/modes: 'modes' is not an array of at least %d", (int)N_WANT);
    bool found[N_WANT] = {false}, default_listed = false;
    for (size_t i = 0; i < json_array_size(modes); i++) {
        const json_t *m = json_array_get(modes, i);
        char what[64];
        snprintf(what, sizeof(what), "GET /api/modes, modes[%zu]", i);
        if (!json_is_object(m))
            fail_msg("%s is not an object", what);
        const char *name = field_str(m, "name", what);
        bool safe = field_bool(m, "safe", what);
        if (field_str(m, "summary", what)[0] == '\0')
            fail_msg("%s (%s): empty summary", what, name);
        for (size_t k = 0; k < i; k++)
            if (strcmp(json_string_value(json_object_get(json_array_get(modes, k), "name")),
                       name) == 0)
                fail_msg("GET /api/modes: mode %s listed twice", name);
        if (strcmp(name, def) == 0)
            default_listed = true;
        for (size_t k = 0; k < N_WANT; k++) {
            if (strcmp(name, want[k]) != 0)
                continue;
            found[k] = true;
            if (safe != want_safe[k])
                fail_msg("GET /api/modes: %s has safe=%s, want %s", name, safe ? "true" : "false",
                         want_safe[k] ? "true" : "false");
        }
    }
    for (size_t k = 0; k < N_WANT; k++)
        if (!found[k])
            fail_msg("GET /api/modes: mode %s is not listed", want[k]);
    if (!default_listed)
        fail_msg("GET /api/modes: the default '%s' is not a listed mode", def);
    printf("    /api/modes: default %s, %zu modes\n", def, json_array_size(modes));
}

/* /healthz, /readyz (JSON, 200) and /metrics (text, the six families), on every replica. */
static void test_health_and_metrics(void **state)
{
    (void)state;
    begin_case("health_and_metrics");
    const char *families[] = {
        "stock_http_requests_total{",
        "stock_deductions_total{",
        "# TYPE stock_lock_wait_seconds histogram",
        "stock_lock_wait_seconds_bucket{",
        "stock_lock_wait_seconds_sum",
        "stock_lock_wait_seconds_count",
        "stock_lock_timeouts_total",
        "stock_lock_renewals_total",
        "stock_lock_lost_total",
    };
    /* Some traffic first, so the labelled families have series. */
    reset_goods(GOODS_METRICS, 7);
    expect_deducted(deduct(g_env.stock_url, GOODS_METRICS, 1, "redis", NULL), GOODS_METRICS, 1, 6,
                    "redis", "deduct before /metrics");

    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "GET /healthz on %s", base);
        expect_json(get(base, "/healthz"), 200, what);
        snprintf(what, sizeof(what), "GET /readyz on %s", base);
        expect_json(get(base, "/readyz"), 200, what);
        if (i == 0)
            continue; /* metrics are per replica: nginx would show a random one */

        snprintf(what, sizeof(what), "GET /metrics on %s", base);
        http_reply *r = get(base, "/metrics");
        if (r->status != 200)
            fail_msg("%s: status %ld", what, r->status);
        if (!content_type_is(r->content_type, "text/plain"))
            fail_msg("%s: Content-Type '%s', want text/plain", what, r->content_type);
        for (size_t k = 0; k < sizeof(families) / sizeof(families[0]); k++)
            if (strstr(r->body, families[k]) == NULL)
                fail_msg("%s: no '%s' in the exposition", what, families[k]);
        const char *line = strstr(r->body, "\nstock_http_requests_total{");
        if (line == NULL || strstr(line, "route=\"") == NULL || strstr(line, "status=\"") == NULL)
            fail_msg("%s: stock_http_requests_total lacks its route/status labels", what);
        line = strstr(r->body, "\nstock_deductions_total{");
        if (line == NULL || strstr(line, "mode=\"") == NULL || strstr(line, "outcome=\"") == NULL)
            fail_msg("%s: stock_deductions_total lacks its mode/outcome labels", what);
        if (strstr(r->body, "stock_lock_wait_seconds_bucket{le=\"+Inf\"}") == NULL)
            fail_msg("%s: the lock wait histogram has no +Inf bucket", what);
    }
}

/* ------------------------------------------------------------------------------------------
 * Case: admin without its token
 * ------------------------------------------------------------------------------------------ */

static void test_admin_unauthorized(void **state)
{
    (void)state;
    begin_case("admin_unauthorized");
    reset_goods(GOODS_AUTH, 5);
    expect_deducted(deduct(g_env.stock_url, GOODS_AUTH, 1, "redis", NULL), GOODS_AUTH, 1, 4,
                    "redis", "deduct before the refused resets");

    char wrong[340], longer[340], basic[340], bare[340];
    snprintf(wrong, sizeof(wrong), "Authorization: Bearer not-%s", g_env.admin_token);
    snprintf(longer, sizeof(longer), "%sx", g_env.auth_header);
    snprintf(basic, sizeof(basic), "Authorization: Basic %s", g_env.admin_token);
    snprintf(bare, sizeof(bare), "Authorization: %s", g_env.admin_token);
    const char *headers[] = {
        NULL, wrong, longer, basic, bare, "Authorization: Bearer", "Authorization: Bearer "};
    const char *labels[] = {
        "no Authorization",         "a wrong token", "the token plus one character",
        "Basic instead of Bearer",  "no scheme",     "Bearer and no token",
        "Bearer and an empty token"};
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        char what[96];
        snprintf(what, sizeof(what), "reset with %s", labels[i]);
        http_request rq = {.method = "POST",
                           .base = g_env.stock_url,
                           .path = "/api/admin/reset",
                           .body = "{\"goods_id\":3901,\"stock\":77}",
                           .headers = {headers[i]}};
        expect_error(call(&rq), 401, "unauthorized", what);
        expect_stock(GOODS_AUTH, 5, 4, 1, 1, what); /* nothing reset, the order kept */
    }
    /* Directly to a replica too: the token is the replica's check, not nginx's. */
    http_request rq = {.method = "POST",
                       .base = g_env.replicas[0],
                       .path = "/api/admin/reset",
                       .body = "{\"goods_id\":3901,\"stock\":77}"};
    expect_error(call(&rq), 401, "unauthorized", "reset without a token, on a replica");
    expect_stock(GOODS_AUTH, 5, 4, 1, 1, "after the refused resets");
}
/* Usage: test_contract [PATTERN | --list] (stack_main in tests/stack/env.c). */
int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_deduct_outcomes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_deduct_modes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_deduct_dry, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lock_timeout, case_setup, lock_case_teardown),
        cmocka_unit_test_setup_teardown(test_stock_endpoint, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_admin_reset, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_modes_endpoint, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_health_and_metrics, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_admin_unauthorized, case_setup, case_teardown),
    };
    return stack_main("contract", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
