/*
 * test_idempotency.c - the Idempotency-Key through the running stack: one key sent 20 times
 * at once sells once, in every mode; a stored 409 or 404 is replayed, not redone (the stock
 * is changed behind the service's back, in SQL, to tell them apart); the batch endpoint's
 * keys likewise.
 *
 * Run alone as tests/stack/test_contract.c says: STACK_PROGRAMS=idempotency make
 * test-integration.
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IDEM_THREADS 20

/* ------------------------------------------------------------------------------------------
 * Case: idempotency
 * ------------------------------------------------------------------------------------------ */

typedef struct idem_shot {
    pthread_t thread;
    pthread_barrier_t *barrier;
    const char *base;
    char body[160];
    char key_header[200];
    http_reply reply;
} idem_shot;

static void *idem_thread(void *arg)
{
    idem_shot *s = arg;
    CURL *h = curl_easy_init();

    /* Every thread has its handle before any request leaves: the requests go out together. */
    pthread_barrier_wait(s->barrier);
    http_request rq = {.method = "POST",
                       .base = s->base,
                       .path = "/api/deduct",
                       .body = s->body,
                       .headers = {s->key_header}};
    if (h == NULL) {
        snprintf(s->reply.error, sizeof(s->reply.error), "curl_easy_init failed");
        s->reply.body = strdup("");
        return NULL;
    }
    http_do(h, &rq, &s->reply);
    curl_easy_cleanup(h);
    return NULL;
}

static void idem_shots_release(void *arg)
{
    idem_shot *shots = arg;
    for (int i = 0; i < IDEM_THREADS; i++)
        free(shots[i].reply.body);
    free(shots);
}

/* Sends one deduct with `key` from IDEM_THREADS threads at once, spread over nginx and every
 * replica directly (so that several replicas race for the key), asserts they all answered
 * the same 200 and that one unit was sold; returns the (case-owned) body of the answer. */
static json_t *idem_burst(long long goods_id, const char *mode, const char *key)
{
    pthread_barrier_t barrier;
    idem_shot *shots = calloc(IDEM_THREADS, sizeof(*shots));
    char what[160];
    int started = 0;

    if (shots == NULL)
        fail_msg("out of memory");
    own(shots, idem_shots_release);
    snprintf(what, sizeof(what), "%d concurrent deducts with one key in mode %s", IDEM_THREADS,
             mode);
    pthread_barrier_init(&barrier, NULL, IDEM_THREADS);
    for (int i = 0; i < IDEM_THREADS; i++) {
        shots[i].barrier = &barrier;
        size_t target = (size_t)i % (g_env.n_replicas + 1);
        shots[i].base = target == 0 ? g_env.stock_url : g_env.replicas[target - 1];
        deduct_body(shots[i].body, sizeof(shots[i].body), goods_id, 1, mode);
        snprintf(shots[i].key_header, sizeof(shots[i].key_header), "Idempotency-Key: %s", key);
    }
    for (; started < IDEM_THREADS; started++)
        if (pthread_create(&shots[started].thread, NULL, idem_thread, &shots[started]) != 0)
            abort(); /* the barrier would wait forever for the missing threads */
    for (int i = 0; i < started; i++)
        pthread_join(shots[i].thread, NULL);
    pthread_barrier_destroy(&barrier);

    int n_ok = 0;
    json_t *first = NULL;
    for (int i = 0; i < IDEM_THREADS; i++) {
        const http_reply *r = &shots[i].reply;
        if (r->status == 0)
            fail_msg("%s: request %d got no answer: %s", what, i, r->error);
        json_t *j = expect_deducted(r, goods_id, 1, -1, mode, what);
        n_ok++;
        if (first == NULL)
            first = j;
        else if (!json_equal(first, j))
            fail_msg("%s: two answers differ:\n  %s\n  %s", what, shots[0].reply.body, r->body);
    }
    printf("    %s (spread over nginx and %zu replicas): %d x 200, one body, made by %s\n", what,
           g_env.n_replicas, n_ok, field_str(first, "instance", what));
    stock_view v = stock_get(goods_id);
    if (v.sold != 1 || v.orders != 1 || v.stock != v.initial - 1)
        fail_msg("%s: sold %lld orders %lld stock %lld of %lld: the key sold more than once", what,
                 v.sold, v.orders, v.stock, v.initial);
    return first;
}

/* Replays `key` on goods_id (in `mode`) on nginx and on every replica: each answer must be
 * `status` with the stored body. */
static void expect_replayed(long long goods_id, const char *mode, const char *key, long status,
                            const json_t *stored, const char *what)
{
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char label[256];
        snprintf(label, sizeof(label), "%s, replayed on %s", what, base);
        http_reply *r = deduct(base, goods_id, 1, mode, key);
        json_t *j = expect_json(r, status, label);
        if (!json_equal(stored, j))
            fail_msg("%s: not the stored answer: %s", label, r->body);
    }
}

static long long g_fresh_goods; /* goods the idempotency case created in SQL; 0: none */

/* Removes the goods the idempotency case made behind the service's back (with its orders
 * and records), so that a long-lived stack does not collect them. */
static int idempotency_teardown(void **state)
{
    if (g_fresh_goods != 0) {
        static const char *const cleanup[] = {
            "DELETE FROM idempotency WHERE goods = $1",
            "DELETE FROM orders WHERE goods = $1",
            "DELETE FROM goods_fences WHERE goods = $1", /* a redis sale's high-water mark */
            "DELETE FROM goods WHERE id = $1",
        };
        char err[512];
        for (size_t i = 0; i < sizeof(cleanup) / sizeof(cleanup[0]); i++)
            if (sql_run(cleanup[i], 1, g_fresh_goods, 0, NULL, NULL, err, sizeof(err)) != 0)
                fprintf(stderr, "clean-up of goods %lld: %s\n", g_fresh_goods, err);
        g_fresh_goods = 0;
    }
    return case_teardown(state);
}

static void test_idempotency(void **state)
{
    (void)state;
    begin_case("idempotency");
    const char *modes[] = {"redis", "none", "local"};
    char key[128], other_key[128];

    /* One key, 20 requests at once, in each mode: one sale, one answer; a retry later (on
     * every replica) gets that same answer, with the first replica's instance. */
    for (size_t m = 0; m < 3; m++) {
        long long goods = GOODS_IDEM + (long long)m;
        char what[96];
        reset_goods(goods, 100);
        snprintf(key, sizeof(key), "burst-%s-%s", modes[m], g_env.run_tag);
        json_t *stored = idem_burst(goods, modes[m], key);
        snprintf(what, sizeof(what), "key of the %s burst", modes[m]);
        expect_replayed(goods, modes[m], key, 200, stored, what);
        expect_stock(goods, 100, 99, 1, 1, what);
    }

    /* The same key on other goods is another request: it sells there. */
    snprintf(key, sizeof(key), "burst-redis-%s", g_env.run_tag);
    reset_goods(GOODS_IDEM + 3, 100);
    json_t *j = expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 3, 1, "redis", key),
                                GOODS_IDEM + 3, 1, 99, "redis", "the burst's key on other goods");
    (void)j;
    expect_stock(GOODS_IDEM + 3, 100, 99, 1, 1, "the burst's key on other goods");
    expect_stock(GOODS_IDEM, 100, 99, 1, 1, "the burst's goods, untouched by the other sale");

    /* A stored 200 stays a 200 after the stock ran out. */
    reset_goods(GOODS_IDEM + 4, 1);
    snprintf(key, sizeof(key), "last-unit-%s", g_env.run_tag);
    j = expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 4, 1, "redis", key), GOODS_IDEM + 4, 1,
                        0, "redis", "sell the last unit with a key");
    expect_replayed(GOODS_IDEM + 4, "redis", key, 200, j, "the last unit's key, now sold out");

    /* A 409 is stored: once stock is back, its key still answers the 409 and sells nothing,
     * while a new key sells. Stock is put back behind the service's back, in SQL, because a
     * reset would delete the very records under test. */
    snprintf(other_key, sizeof(other_key), "too-late-%s", g_env.run_tag);
    j = expect_error(deduct(g_env.stock_url, GOODS_IDEM + 4, 1, "redis", other_key), 409,
                     "insufficient_stock", "a new key on sold-out goods");
    sql_exec("UPDATE goods SET stock = $2 WHERE id = $1", GOODS_IDEM + 4, 5);
    expect_replayed(GOODS_IDEM + 4, "redis", other_key, 409, j, "the 409's key, stock back");
    expect_stock(GOODS_IDEM + 4, 1, 5, 1, 1, "after replaying the 409 with stock back");
    snprintf(key, sizeof(key), "restocked-%s", g_env.run_tag);
    expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 4, 1, "redis", key), GOODS_IDEM + 4, 1, 4,
                    "redis", "a new key once stock is back");

    /* A 404 is stored the same way: the goods created afterwards (in SQL: a reset would
     * delete the record) do not change its key's answer. The goods id is this run's own. */
    long long fresh = 5000000000000LL + (long long)getpid() * 100000LL + time(NULL) % 100000;
    snprintf(key, sizeof(key), "unknown-%s", g_env.run_tag);
    j = expect_error(deduct(g_env.stock_url, fresh, 1, "redis", key), 404, "unknown_goods",
                     "a key on unknown goods");
    g_fresh_goods = fresh;
    sql_exec("INSERT INTO goods (id, stock, initial) VALUES ($1, $2, $2)", fresh, 5);
    expect_replayed(fresh, "redis", key, 404, j, "the 404's key, goods created since");
    snprintf(other_key, sizeof(other_key), "created-%s", g_env.run_tag);
    expect_deducted(deduct(g_env.stock_url, fresh, 1, "redis", other_key), fresh, 1, 4, "redis",
                    "a new key on the goods created since");

    /* The longest key (128 characters, every allowed kind) is accepted. */
    reset_goods(GOODS_IDEM + 5, 10);
    char longest[129];
    memset(longest, 'k', 128);
    memcpy(longest, "Az09_.:-", 8);
    longest[128] = '\0';
    j = expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 5, 1, "redis", longest),
                        GOODS_IDEM + 5, 1, 9, "redis", "a 128-character key");
    expect_replayed(GOODS_IDEM + 5, "redis", longest, 200, j, "the 128-character key");
    expect_stock(GOODS_IDEM + 5, 10, 9, 1, 1, "after the 128-character key");
}

/* redis-batch: a request whose key another request of the same batch carries, or a request
 * committed earlier, gets the one stored answer. Twenty requests at once with one key sell
 * once; then twenty at once over five keys (four requests each) on 3 units: three keys sell,
 * two are refused, every request of a key gets its key's one answer, and each key replays it
 * later on every replica. */
static void test_batch_idempotency(void **state)
{
    (void)state;
    begin_case("batch_idempotency");
    char key[128], keys[5][128], what[200];

    reset_goods(GOODS_BATCH_IDEM, 100);
    snprintf(key, sizeof(key), "batch-burst-%s", g_env.run_tag);
    json_t *stored = idem_burst(GOODS_BATCH_IDEM, "redis-batch", key);
    expect_replayed(GOODS_BATCH_IDEM, "redis-batch", key, 200, stored, "the redis-batch burst");
    expect_stock(GOODS_BATCH_IDEM, 100, 99, 1, 1, "the redis-batch burst");

    long long goods = GOODS_BATCH_IDEM + 1;
    reset_goods(goods, 3);
    idem_shot *shots = calloc(IDEM_THREADS, sizeof(*shots));
    pthread_barrier_t barrier;
    if (shots == NULL)
        fail_msg("out of memory");
    own(shots, idem_shots_release);
    for (int k = 0; k < 5; k++)
        snprintf(keys[k], sizeof(keys[k]), "batch-mix-%d-%s", k, g_env.run_tag);
    pthread_barrier_init(&barrier, NULL, IDEM_THREADS);
    for (int i = 0; i < IDEM_THREADS; i++) {
        size_t target = (size_t)i % (g_env.n_replicas + 1);
        shots[i].barrier = &barrier;
        shots[i].base = target == 0 ? g_env.stock_url : g_env.replicas[target - 1];
        deduct_body(shots[i].body, sizeof(shots[i].body), goods, 1, "redis-batch");
        snprintf(shots[i].key_header, sizeof(shots[i].key_header), "Idempotency-Key: %s",
                 keys[i % 5]);
    }
    for (int i = 0; i < IDEM_THREADS; i++)
        if (pthread_create(&shots[i].thread, NULL, idem_thread, &shots[i]) != 0)
            abort(); /* the barrier would wait forever for the missing threads */
    for (int i = 0; i < IDEM_THREADS; i++)
        pthread_join(shots[i].thread, NULL);
    pthread_barrier_destroy(&barrier);

    json_t *answer[5] = {NULL};
    long status[5] = {0};
    int sold = 0, refused = 0;
    for (int i = 0; i < IDEM_THREADS; i++) {
        const http_reply *r = &shots[i].reply;
        int k = i % 5;
        snprintf(what, sizeof(what), "redis-batch, 5 keys at once on 3 units, key %d", k);
        if (r->status != 200 && r->status != 409)
            fail_msg("%s: status %ld, want 200 or 409: %.300s", what, r->status, r->body);
        json_t *j = expect_json(r, r->status, what);
        if (answer[k] == NULL) {
            answer[k] = j;
            status[k] = r->status;
        } else if (r->status != status[k] || !json_equal(answer[k], j)) {
            fail_msg("%s: two answers for one key differ: %ld vs %ld: %.300s", what, status[k],
                     r->status, r->body);
        }
    }
    for (int k = 0; k < 5; k++) {
        snprintf(what, sizeof(what), "redis-batch, 5 keys at once on 3 units, key %d", k);
        if (status[k] == 200) {
            sold++;
            expect_field_str(answer[k], "mode", "redis-batch", what);
            if (field_int(answer[k], "order_id", what) <= 0)
                fail_msg("%s: a 200 without an order", what);
        } else {
            refused++;
        }
        expect_replayed(goods, "redis-batch", keys[k], status[k], answer[k], what);
    }
    printf("    redis-batch, %d requests over 5 keys on 3 units: %d keys sold, %d refused\n",
           IDEM_THREADS, sold, refused);
    if (sold != 3 || refused != 2)
        fail_msg("redis-batch, 5 keys on 3 units: %d keys sold and %d refused, want 3 and 2", sold,
                 refused);
    expect_stock(goods, 3, 0, 3, 3, "redis-batch, 5 keys at once on 3 units");
}
/* Usage: test_idempotency [PATTERN | --list] (stack_main in tests/stack/env.c). */
/* redis-sharded: a burst with one key sells once and replays; a stored 409 replays. */
static void test_sharded_idempotency(void **state)
{
    (void)state;
    begin_case("sharded_idempotency");
    char key[128];

    reset_goods(GOODS_SHARD_IDEM, 100);
    snprintf(key, sizeof(key), "sharded-burst-%s", g_env.run_tag);
    json_t *stored = idem_burst(GOODS_SHARD_IDEM, "redis-sharded", key);
    expect_replayed(GOODS_SHARD_IDEM, "redis-sharded", key, 200, stored, "the redis-sharded burst");
    expect_stock(GOODS_SHARD_IDEM, 100, 99, 1, 1, "the redis-sharded burst");

    const long long g = GOODS_SHARD_IDEM + 1;
    reset_goods(g, 1);
    snprintf(key, sizeof(key), "sharded-last-%s", g_env.run_tag);
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis-sharded", key), g, 1, 0, "redis-sharded",
                    "redis-sharded: the last unit with a key");
    snprintf(key, sizeof(key), "sharded-late-%s", g_env.run_tag);
    json_t *j = expect_error(deduct(g_env.stock_url, g, 1, "redis-sharded", key), 409,
                             "insufficient_stock", "redis-sharded: a new key on sold-out goods");
    /* Stock back behind the service's back (a reset would delete the record under test). */
    sql_exec("UPDATE goods SET stock = $2 WHERE id = $1", g, 5);
    expect_replayed(g, "redis-sharded", key, 409, j, "redis-sharded: the 409's key, stock back");
    expect_stock(g, 1, 5, 1, 1, "redis-sharded: after replaying the 409");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_idempotency, case_setup, idempotency_teardown),
        cmocka_unit_test_setup_teardown(test_batch_idempotency, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_idempotency, case_setup, case_teardown),
    };
    return stack_main("idempotency", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
