/*
 * test_deps_down.c - the stack's dependencies failing under it: Redis down (`redis` mode
 * answers 503 quickly, /readyz says 503, `none` still sells, everything recovers without a
 * restart once Redis is back); PostgreSQL down (every mode, the stock and the reset answer
 * 503 unavailable quickly, /readyz 503, /healthz 200, every mode sells again once it is
 * back); PostgreSQL frozen under load (every answer within its bound, nothing sold without a
 * 200); Redis frozen (503 unavailable within the lock's bounds, a reset that cannot clear the
 * cached stock 503 too, sales again once it thaws).
 * Every 503 of these cases names its dependency in the service's own words and carries none
 * of a library's text (API.md). Each teardown brings its server back even when an assertion
 * failed. Run it after the other programs: a dependency down must not disturb them.
 *
 * Run alone as tests/stack/test_contract.c says: STACK_PROGRAMS=deps_down make
 * test-integration. It stops and starts the stack's own servers with scripts/stack.sh
 * (RUN_DIR and the ports).
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READY_WAIT_S 10.0 /* how long Redis's return may take to show in /readyz */
#define DOWN_ANSWER_S 2.0 /* "quickly": a redis-mode deduct with Redis down answers within */
/* "Quickly" with PostgreSQL down: the service waits at most DB_WAIT_MS (2 s) for a pooled
 * connection, and a refused connect fails at once; this leaves a second for the rest. */
#define PG_DOWN_ANSWER_S 3.0
#define PG_READY_WAIT_S 15.0 /* how long PostgreSQL's return may take to show in /readyz */

/* Words of the libraries' own error texts (libpq's and PostgreSQL's, hiredis' and Redis', the
 * lock module's command names), each once seen in a 503's detail: API.md's detail "speaks of
 * the request, never of a library's internals". */
static const char *const library_words[] = {"Connection refused",
                                            "Is the server running",
                                            "EVALSHA",
                                            "errno",
                                            "SQLSTATE",
                                            "Resource temporarily",
                                            "connection to server",
                                            "server closed",
                                            ".lua",
                                            "127.0.0.1",
                                            "statement timeout",
                                            NULL};

/* Asserts a 503 `error` whose detail names `dependency` (in any case) in the service's own
 * words: none of library_words. */
static void expect_said_503(const http_reply *r, const char *error, const char *dependency,
                            const char *what)
{
    json_t *j = expect_error(r, 503, error, what);
    const char *detail = field_str(j, "detail", what);
    if (strcasestr(detail, dependency) == NULL)
        fail_msg("%s: the detail does not name %s: %s", what, dependency, detail);
    for (size_t i = 0; library_words[i] != NULL; i++)
        if (strstr(detail, library_words[i]) != NULL)
            fail_msg("%s: the detail carries a library's text (\"%s\"): %s", what, library_words[i],
                     detail);
}

/* ------------------------------------------------------------------------------------------
 * Case: Redis down, and back
 * ------------------------------------------------------------------------------------------ */

static bool g_redis_stopped; /* this process stopped Redis and has not restarted it yet */

static int redis_case_teardown(void **state)
{
    if (g_redis_stopped) {
        if (stack_script("redis-start") != 0)
            fprintf(stderr, "scripts/stack.sh redis-start failed: Redis stays down\n");
        g_redis_stopped = false;
    }
    return case_teardown(state);
}

/* Polls /readyz on every replica until all say `status`; returns the seconds it took, or a
 * negative number when limit_s ran out. */
static double wait_ready(long status, double limit_s)
{
    double start = now_s();
    for (;;) {
        size_t ready = 0;
        for (size_t i = 0; i < g_env.n_replicas; i++) {
            http_reply r;
            http_request rq = {
                .method = "GET", .base = g_env.replicas[i], .path = "/readyz", .timeout_ms = 3000};
            if (http_do(g_curl, &rq, &r) == 0 && r.status == status)
                ready++;
            free(r.body);
        }
        if (ready == g_env.n_replicas)
            return now_s() - start;
        if (now_s() - start > limit_s)
            return -1.0;
        usleep(100 * 1000);
    }
}

static void test_redis_down(void **state)
{
    (void)state;
    begin_case("redis_down");
    reset_goods(GOODS_DOWN, 100);
    expect_deducted(deduct(g_env.stock_url, GOODS_DOWN, 1, "redis", NULL), GOODS_DOWN, 1, 99,
                    "redis", "redis-mode deduct before Redis stops");

    g_redis_stopped = true; /* set first: a half-done stop is undone by the teardown too */
    if (stack_script("redis-stop") != 0)
        fail_msg("scripts/stack.sh redis-stop failed");

    /* Every replica, and nginx: 503 unavailable, quickly, and nothing sold. */
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "redis-mode deduct with Redis down, via %s", base);
        http_reply *r = deduct(base, GOODS_DOWN, 1, "redis", NULL);
        printf("    %s: %ld in %.3f s\n", what, r->status, r->seconds);
        expect_said_503(r, "unavailable", "redis", what);
        if (r->seconds >= DOWN_ANSWER_S)
            fail_msg("%s: answered after %.2f s, want under %.1f s", what, r->seconds,
                     DOWN_ANSWER_S);
    }
    expect_stock(GOODS_DOWN, 100, 99, 1, 1, "after the 503s");

    /* Not ready, but alive. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char what[160];
        snprintf(what, sizeof(what), "GET /readyz on %s with Redis down", g_env.replicas[i]);
        expect_json(get(g_env.replicas[i], "/readyz"), 503, what);
        snprintf(what, sizeof(what), "GET /healthz on %s with Redis down", g_env.replicas[i]);
        expect_json(get(g_env.replicas[i], "/healthz"), 200, what);
    }

    /* none needs no Redis: it still sells, directly and through nginx. */
    long long stock = 99, sold = 1;
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "none-mode deduct with Redis down, via %s", base);
        expect_deducted(deduct(base, GOODS_DOWN, 1, "none", NULL), GOODS_DOWN, 1, stock - 1, "none",
                        what);
        stock--;
        sold++;
    }

    if (stack_script("redis-start") != 0)
        fail_msg("scripts/stack.sh redis-start failed");
    g_redis_stopped = false;
    double took = wait_ready(200, READY_WAIT_S);
    printf("    every replica ready again %.2f s after redis-start\n", took);
    if (took < 0)
        fail_msg("the replicas' /readyz did not all return to 200 within %.0f s of redis-start",
                 READY_WAIT_S);

    /* redis mode works again on every replica, without any restart. */
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "redis-mode deduct after Redis is back, via %s", base);
        expect_deducted(deduct(base, GOODS_DOWN, 1, "redis", NULL), GOODS_DOWN, 1, stock - 1,
                        "redis", what);
        stock--;
        sold++;
    }
    expect_stock(GOODS_DOWN, 100, stock, sold, sold, "after Redis came back");
}

/* ------------------------------------------------------------------------------------------
 * Case: PostgreSQL down, and back
 * ------------------------------------------------------------------------------------------ */

static bool g_pg_stopped; /* this process stopped PostgreSQL and has not restarted it yet */

static int pg_case_teardown(void **state)
{
    if (g_pg_stopped) {
        if (stack_script("pg-start") != 0)
            fprintf(stderr, "scripts/stack.sh pg-start failed: PostgreSQL stays down\n");
        g_pg_stopped = false;
    }
    return case_teardown(state);
}

/* Asserts a 503 unavailable whose detail names PostgreSQL in the service's own words. */
static void expect_pg_unavailable(const http_reply *r, const char *what)
{
    expect_said_503(r, "unavailable", "postgresql", what);
}

static void test_postgres_down(void **state)
{
    const char *modes[] = {"none", "local", "redis"};
    const long long g = GOODS_PG_DOWN;
    char what[200], path[64], key[64];

    (void)state;
    begin_case("postgres_down");
    reset_goods(g, 100);
    /* A sale on every replica first, so each pool holds sessions the stop will cut. */
    long long stock = 100, sold = 0;
    for (size_t i = 0; i < g_env.n_replicas; i++, stock--, sold++) {
        snprintf(what, sizeof(what), "deduct before PostgreSQL stops, via %s", g_env.replicas[i]);
        expect_deducted(deduct(g_env.replicas[i], g, 1, "redis", NULL), g, 1, stock - 1, "redis",
                        what);
    }

    g_pg_stopped = true; /* set first: a half-done stop is undone by the teardown too */
    if (stack_script("pg-stop") != 0)
        fail_msg("scripts/stack.sh pg-stop failed");

    /* Every mode, on every replica and through nginx: 503 unavailable naming PostgreSQL,
     * quickly. */
    double slowest = 0;
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        for (size_t m = 0; m < 3; m++) {
            snprintf(what, sizeof(what), "%s-mode deduct with PostgreSQL down, via %s", modes[m],
                     base);
            http_reply *r = deduct(base, g, 1, modes[m], NULL);
            printf("    %s: %ld in %.3f s\n", what, r->status, r->seconds);
            expect_pg_unavailable(r, what);
            if (r->seconds >= PG_DOWN_ANSWER_S)
                fail_msg("%s: answered after %.2f s, want under %.1f s", what, r->seconds,
                         PG_DOWN_ANSWER_S);
            if (r->seconds > slowest)
                slowest = r->seconds;
        }
    }
    printf("    slowest 503 with PostgreSQL down: %.3f s\n", slowest);
    /* The redis-mode requests took the lock and gave it back, though their sale failed. */
    snprintf(key, sizeof(key), "lock:goods:%lld", g);
    char reply[16];
    if (redis_cli_out(reply, sizeof(reply), "EXISTS", key, NULL, NULL) != 0 ||
        strcmp(reply, "0") != 0)
        fail_msg("%s is still held after the failed redis-mode deducts (EXISTS says '%s')", key,
                 reply);

    /* The other endpoints that need the database: 503 as well. */
    snprintf(path, sizeof(path), "/api/stock/%lld", g);
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        snprintf(what, sizeof(what), "GET %s with PostgreSQL down, via %s", path, base);
        expect_pg_unavailable(get(base, path), what);
    }
    expect_pg_unavailable(reset_call(g, 5), "admin reset with PostgreSQL down");

    /* Not ready, but alive. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        snprintf(what, sizeof(what), "GET /readyz on %s with PostgreSQL down", g_env.replicas[i]);
        expect_pg_unavailable(get(g_env.replicas[i], "/readyz"), what);
        snprintf(what, sizeof(what), "GET /healthz on %s with PostgreSQL down", g_env.replicas[i]);
        expect_json(get(g_env.replicas[i], "/healthz"), 200, what);
    }

    if (stack_script("pg-start") != 0)
        fail_msg("scripts/stack.sh pg-start failed");
    g_pg_stopped = false;
    double took = wait_ready(200, PG_READY_WAIT_S);
    printf("    every replica ready again %.2f s after pg-start\n", took);
    if (took < 0)
        fail_msg("the replicas' /readyz did not all return to 200 within %.0f s of pg-start",
                 PG_READY_WAIT_S);

    /* Every mode sells again, on every replica, with no restart; the outage sold nothing and
     * the reset refused during it changed nothing. */
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        for (size_t m = 0; m < 3; m++, stock--, sold++) {
            snprintf(what, sizeof(what), "%s-mode deduct after PostgreSQL is back, via %s",
                     modes[m], base);
            expect_deducted(deduct(base, g, 1, modes[m], NULL), g, 1, stock - 1, modes[m], what);
        }
    }
    expect_stock(g, 100, stock, sold, sold, "after PostgreSQL came back");
}

/* ------------------------------------------------------------------------------------------
 * Case: PostgreSQL frozen under load, and thawed
 *
 * A database host that stops answering (a partition, a frozen VM: here SIGSTOP of the
 * postmaster and every backend) refuses nothing: without a client-side bound a request would
 * wait for TCP to give up, minutes later, holding its Redis lock (renewed by the watchdog)
 * all the while. The replicas bound every round trip by DB_REPLY_TIMEOUT_MS (the default,
 * 6000), so every request answers within LOCK_WAIT_MS + DB_WAIT_MS + the connect bound +
 * DB_REPLY_TIMEOUT_MS, the lock is given back, and nothing is sold without a 200, but for a
 * commit whose answer was lost, which says so (commit_unknown).
 * ------------------------------------------------------------------------------------------ */

/* Frozen for longer than a request's database bound (DB_REPLY_TIMEOUT_MS, 6 s); an answer
 * comes within 2 s lock wait + 2 s pool wait + 2 s connect + 6 s reply, plus a margin. */
#define PG_FROZEN_FOR_S 7.0
#define PG_FROZEN_ANSWER_S 15.0
/* A keyed sale (the replay of its key, then the sale: two borrows, several statements) is
 * bounded as a whole by one DB_REPLY_TIMEOUT_MS (6 s; its goods' lock is free), plus a second
 * of margin: well inside nginx's 14 s. One bound per statement made it 12 s (or 8 s, the
 * second borrow opening a session), and one statement more a 504. */
#define PG_FROZEN_KEYED_S 7.0

static bool g_pg_frozen; /* this process froze PostgreSQL and has not thawed it yet */

static int pg_frozen_teardown(void **state)
{
    if (g_pg_frozen) {
        if (stack_script("pg-thaw") != 0)
            fprintf(stderr, "scripts/stack.sh pg-thaw failed: PostgreSQL stays frozen\n");
        g_pg_frozen = false;
    }
    return case_teardown(state);
}

static void *load_run_thread(void *arg)
{
    load_run(arg);
    return NULL;
}

static void test_postgres_frozen(void **state)
{
    const long long g = GOODS_PG_FROZEN;
    pthread_t runner;

    (void)state;
    begin_case("postgres_frozen");
    reset_goods(g, 5000);
    reset_goods(GOODS_PG_FROZEN_PROBE, 10);
    load_plan *p = load_plan_new("frozen", g_env.stock_url, g, "redis", 100000, 16);
    /* The load runs until 1.5 s after the thaw, however long freezing takes on a busy
     * machine; this bound is a backstop. */
    atomic_store(&p->until, now_s() + 120);
    p->timeout_ms = (long)(1000 * (PG_FROZEN_ANSWER_S + 10));
    if (pthread_create(&runner, NULL, load_run_thread, p) != 0)
        fail_msg("pthread_create failed");
    usleep(500 * 1000);
    g_pg_frozen = true; /* set first: a half-done freeze is undone by the teardown too */
    int rc = stack_script("pg-freeze");
    http_reply *probe = NULL;
    if (rc == 0) {
        /* One keyed sale of a goods of its own (its lock free), answered while frozen: its
         * detail and time are checked once the load is joined. */
        char key[64];
        snprintf(key, sizeof(key), "frozen-probe-%d-%.0f", (int)getpid(), now_s() * 1000);
        double frozen_at = now_s();
        probe = deduct(g_env.replicas[0], GOODS_PG_FROZEN_PROBE, 1, "redis", key);
        double left = PG_FROZEN_FOR_S - (now_s() - frozen_at);
        if (left > 0)
            usleep((useconds_t)(left * 1e6));
    }
    if (stack_script("pg-thaw") == 0)
        g_pg_frozen = false;
    atomic_store(&p->until, now_s() + 1.5);
    pthread_join(runner, NULL);
    if (rc != 0)
        fail_msg("scripts/stack.sh pg-freeze failed");
    printf("    a keyed sale alone while frozen: %ld in %.3f s: %s\n", probe->status,
           probe->seconds, probe->body != NULL ? probe->body : "");
    expect_said_503(probe, "unavailable", "postgresql", "a keyed sale while PostgreSQL is frozen");
    if (probe->seconds > PG_FROZEN_KEYED_S)
        fail_msg("a keyed sale while PostgreSQL is frozen answered after %.2f s, past %.0f s",
                 probe->seconds, PG_FROZEN_KEYED_S);

    const load_counts *c = &p->counts;
    int n = atomic_load(&p->n_timed);
    double longest = n > 0 ? p->latency[n - 1] : 0; /* load_run sorted them */
    printf("    frozen: %d answers, %d commit_unknown, the longest %.2f s\n", n, c->commit_unknown,
           longest);
    if (c->by_status[0] != 0)
        fail_msg("%d requests got no answer at all: %s", c->by_status[0], c->note);
    if (c->by_status[200] + c->by_status[409] + c->by_status[503] != n)
        fail_msg("answers other than 200, 409 and 503: %s", c->note);
    if (c->by_status[503] == 0)
        fail_msg("no request answered 503 while PostgreSQL was frozen for %.0f s", PG_FROZEN_FOR_S);
    if (longest > PG_FROZEN_ANSWER_S)
        fail_msg("an answer took %.2f s, past the bound of %.0f s", longest, PG_FROZEN_ANSWER_S);

    /* The books settle; every unit sold had a 200, or a commit_unknown that said it might. */
    stock_view r = stock_settled(g);
    printf("    frozen: stock %lld, sold %lld in %lld orders, oversold %lld; 200s %d\n", r.stock,
           r.sold, r.orders, r.oversold, c->by_status[200]);
    if (r.oversold != 0)
        fail_msg("oversold %lld after the freeze", r.oversold);
    if (r.orders < c->by_status[200] || r.orders > c->by_status[200] + c->commit_unknown)
        fail_msg("%lld orders for %d answers 200 and %d commit_unknown: a sale without a 200",
                 r.orders, c->by_status[200], c->commit_unknown);

    /* Recovered, and the lock was given back or expired: a sale goes through. */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, -1, "redis",
                    "a deduct after the thaw");
}
/* ------------------------------------------------------------------------------------------
 * Case: Redis frozen, and thawed
 *
 * A Redis that takes connections and answers nothing (SIGSTOP): every command fails at the
 * lock's command timeout, and the sale answers 503 unavailable saying so in the service's
 * words, within the lock's wait bound and one command timeout.
 * ------------------------------------------------------------------------------------------ */

static bool g_redis_frozen; /* this process froze Redis and has not thawed it yet */

static int redis_frozen_teardown(void **state)
{
    if (g_redis_frozen) {
        if (stack_script("redis-thaw") != 0)
            fprintf(stderr, "scripts/stack.sh redis-thaw failed: Redis stays frozen\n");
        g_redis_frozen = false;
    }
    return case_teardown(state);
}

static void test_redis_frozen(void **state)
{
    const long long g = GOODS_REDIS_FROZEN;
    char what[160];

    (void)state;
    begin_case("redis_frozen");
    reset_goods(g, 100);
    g_redis_frozen = true; /* set first: a half-done freeze is undone by the teardown too */
    if (stack_script("redis-freeze") != 0)
        fail_msg("scripts/stack.sh redis-freeze failed");
    /* Through nginx and on one replica: each answer waits out the lock's wait bound. */
    for (size_t i = 0; i <= 1; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[0];
        snprintf(what, sizeof(what), "redis-mode deduct with Redis frozen, via %s", base);
        http_reply *r = deduct(base, g, 1, "redis", NULL);
        printf("    %s: %ld in %.3f s: %s\n", what, r->status, r->seconds, r->body);
        expect_said_503(r, "unavailable", "redis", what);
    }
    expect_stock(g, 100, 100, 0, 0, "after the 503s with Redis frozen");

    /* A reset that cannot clear the goods' cached stock is not done: a cached read would go
     * on answering the stock before it. 503 unavailable, saying so; its database part is
     * done, and a retry sets the same values again. */
    http_reply *r = reset_call(g, 50);
    printf("    admin reset with Redis frozen: %ld in %.3f s: %s\n", r->status, r->seconds,
           r->body);
    expect_said_503(r, "unavailable", "redis", "admin reset with Redis frozen");
    if (strstr(r->body, "retry the reset") == NULL)
        fail_msg("the reset's 503 does not say to retry it: %s", r->body);
    expect_stock(g, 50, 50, 0, 0, "after the reset's 503: its database part done");

    if (stack_script("redis-thaw") != 0)
        fail_msg("scripts/stack.sh redis-thaw failed");
    g_redis_frozen = false;
    expect_json(reset_call(g, 50), 200, "the reset retried after Redis thawed");
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, 49, "redis",
                    "a deduct after Redis thawed");
}

/* Usage: test_deps_down [PATTERN | --list] (stack_main in tests/stack/env.c). */
int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_redis_down, case_setup, redis_case_teardown),
        cmocka_unit_test_setup_teardown(test_postgres_down, case_setup, pg_case_teardown),
        cmocka_unit_test_setup_teardown(test_postgres_frozen, case_setup, pg_frozen_teardown),
        cmocka_unit_test_setup_teardown(test_redis_frozen, case_setup, redis_frozen_teardown),
    };
    return stack_main("deps-down", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
