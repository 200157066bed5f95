/*
 * test_sharded_sales.c - redis-sharded through the running stack: one goods' stock in segments, each
 * with a lock of its own. 64 threads over the three replicas sell exactly the stock; a count
 * larger than any segment still sells; sold out (409) only at zero; four modes at once on one
 * goods keep the books exact. (Its Idempotency-Key case is in test_idempotency.c, with the
 * others.)
 *
 * Run alone as tests/stack/test_contract.c says: STACK_PROGRAMS=sharded_sales make test-integration.
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Cases: redis-sharded (one block, to be moved as a whole when this file is split)
 * ------------------------------------------------------------------------------------------ */

/* The stack's SHARD_SEGMENTS (the service's default). */
#define SHARD_K 8

/* Each segment's stored fencing token (0 for a segment with no row). Tokens stay across
 * resets (an old holder must stay out), so a case compares them before and after. */
static void segment_fences(long long goods_id, long long *fences)
{
    char err[512];

    for (int k = 0; k < SHARD_K; k++) {
        fences[k] = 0;
        if (sql_run("SELECT fence FROM goods_segments WHERE goods = $1 AND seg = $2", 2, goods_id,
                    k, NULL, &fences[k], err, sizeof(err)) != 0)
            fail_msg("SQL on the stack's database: %s", err);
    }
}

/* How many segments got a new token since `before` (segment_fences): taken by a sale. */
static int segments_taken_since(long long goods_id, const long long *before)
{
    long long now[SHARD_K];
    int n = 0;

    segment_fences(goods_id, now);
    for (int k = 0; k < SHARD_K; k++)
        n += now[k] != before[k];
    return n;
}

/* How many segments of goods_id hold stock now. */
static long long segments_holding(long long goods_id)
{
    char err[512];
    long long n = 0;

    if (sql_run("SELECT count(*) FROM goods_segments WHERE goods = $1 AND stock > 0", 1, goods_id,
                0, NULL, &n, err, sizeof(err)) != 0)
        fail_msg("SQL on the stack's database: %s", err);
    return n;
}

/* The books of a load that sold exactly `stock`: one order per 200, none oversold. In
 * redis-sharded a 200's `remaining` is the total as its own statement saw the other
 * segments, so two sales on two segments may report the same value: unlike
 * expect_exact_sale, the remaining values are not required to be each of 0..stock-1. */
static void expect_exact_sharded_sale(load_plan *p, long long stock)
{
    const load_counts *c = &p->counts;

    expect_only_200_409(p);
    if (c->by_status[200] != stock || c->by_status[409] != p->total - stock)
        fail_msg("%s: 200=%d 409=%d, want exactly %lld and %lld", p->label, c->by_status[200],
                 c->by_status[409], stock, p->total - stock);
    if (count_repeats(p->order_ids, atomic_load(&p->n_ok)) != 0)
        fail_msg("%s: two 200 answers carry the same order_id", p->label);
    expect_stock(p->goods_id, stock, 0, stock, stock, p->label);
}

/* 64 threads through nginx over the 3 replicas sell exactly the stock of one goods, spread
 * over its segments (more than one segment's lock was taken), by every replica. */
static void test_sharded_load_three(void **state)
{
    (void)state;
    begin_case("sharded_load_three");
    long long before[SHARD_K];
    reset_goods(GOODS_SHARD_LOAD, LOAD_STOCK);
    segment_fences(GOODS_SHARD_LOAD, before);
    load_plan *p = load_plan_new("redis-sharded via nginx", g_env.stock_url, GOODS_SHARD_LOAD,
                                 "redis-sharded", LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sharded_sale(p, LOAD_STOCK);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (p->counts.per_instance[i] == 0)
            fail_msg("redis-sharded via nginx: replica %s sold nothing", g_env.instances[i]);
    int used = segments_taken_since(GOODS_SHARD_LOAD, before);
    printf("    redis-sharded via nginx: %d of %d segments taken by a fenced sale\n", used,
           SHARD_K);
    if (used < 2)
        fail_msg("redis-sharded via nginx: only %d segment(s) locked: no spread", used);
}

/* A count larger than any one segment sells when the segments together have it (the slow
 * path takes every segment's lock and gathers them), and a 409 says the whole stock. 80
 * units: the first sale cuts them 10 a segment and sells 1 from one. */
static void test_sharded_large_count(void **state)
{
    (void)state;
    begin_case("sharded_large_count");
    const long long g = GOODS_SHARD_LARGE;
    long long before[SHARD_K];
    reset_goods(g, 80);
    segment_fences(g, before);
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), g, 1, 79, "redis-sharded",
                    "redis-sharded: the first sale cuts the stock");
    if (segments_holding(g) != SHARD_K || segments_taken_since(g, before) != 1)
        fail_msg("redis-sharded: after the first sale %lld segments hold stock and %d got a new "
                 "token, want %d and 1 (the cut, then one segment's sale)",
                 segments_holding(g), segments_taken_since(g, before), SHARD_K);
    segment_fences(g, before);
    expect_deducted(deduct(g_env.stock_url, g, 50, "redis-sharded", NULL), g, 50, 29,
                    "redis-sharded", "redis-sharded: 50 units, more than any segment holds");
    if (segments_taken_since(g, before) != SHARD_K) /* it held every segment's lock */
        fail_msg("redis-sharded: the 50-unit sale gave %d segments a new token, want %d",
                 segments_taken_since(g, before), SHARD_K);
    json_t *j = expect_error(deduct(g_env.stock_url, g, 30, "redis-sharded", NULL), 409,
                             "insufficient_stock", "redis-sharded: 30 units of 29");
    expect_field_int(j, "remaining", 29, "redis-sharded: 30 units of 29");
    expect_deducted(deduct(g_env.stock_url, g, 29, "redis-sharded", NULL), g, 29, 0,
                    "redis-sharded", "redis-sharded: the last 29 units at once");
    j = expect_error(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), 409,
                     "insufficient_stock", "redis-sharded: sold out");
    expect_field_int(j, "remaining", 0, "redis-sharded: sold out");
    expect_stock(g, 80, 0, 80, 3, "redis-sharded: a count larger than a segment");
}

/* Sold out only at zero: 64 threads at once (each twice, over nginx and each replica) ask
 * for 1 unit of 20 spread over 8 segments: exactly 20 sell, and every 409 says 0 left:
 * stock only falls, so a 409 that saw any unit left would be one refused while a segment
 * still held stock. */
#define SHARD_SHOTS 64
typedef struct shard_shot {
    pthread_barrier_t *barrier;
    const char *base;
    char body[160];
    long status[2];
    long long remaining[2];
    char note[256];
} shard_shot;

static void *shard_shot_thread(void *arg)
{
    shard_shot *s = arg;
    CURL *h = curl_easy_init();

    pthread_barrier_wait(s->barrier);
    for (int i = 0; i < 2; i++) {
        http_request rq = {
            .method = "POST", .base = s->base, .path = "/api/deduct", .body = s->body};
        http_reply r;
        json_t *j = NULL;
        memset(&r, 0, sizeof(r));
        if (h == NULL) {
            snprintf(s->note, sizeof(s->note), "curl_easy_init failed");
            break;
        }
        http_do(h, &rq, &r);
        s->status[i] = r.status;
        if (r.body != NULL)
            j = json_loadb(r.body, r.len, 0, NULL);
        const json_t *rest = json_object_get(j, "remaining");
        s->remaining[i] = json_is_integer(rest) ? (long long)json_integer_value(rest) : -1;
        if (r.status != 200 && r.status != 409 && s->note[0] == '\0')
            snprintf(s->note, sizeof(s->note), "status %ld: %.200s", r.status,
                     r.body != NULL ? r.body : r.error);
        json_decref(j);
        free(r.body);
    }
    curl_easy_cleanup(h);
    return NULL;
}

static void test_sharded_sold_out_only_at_zero(void **state)
{
    (void)state;
    begin_case("sharded_sold_out_only_at_zero");
    const long long g = GOODS_SHARD_SOLD_OUT;
    shard_shot *shots = calloc(SHARD_SHOTS, sizeof(*shots));
    pthread_barrier_t barrier;
    if (shots == NULL)
        fail_msg("out of memory");
    own(shots, free);

    reset_goods(g, 21);
    /* One sale first, so that the 20 left are spread over the segments: 3 or 2 each. */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), g, 1, 20, "redis-sharded",
                    "redis-sharded: the sale that spreads 20 units");
    pthread_barrier_init(&barrier, NULL, SHARD_SHOTS);
    for (int i = 0; i < SHARD_SHOTS; i++) {
        size_t target = (size_t)i % (g_env.n_replicas + 1);
        shots[i].barrier = &barrier;
        shots[i].base = target == 0 ? g_env.stock_url : g_env.replicas[target - 1];
        deduct_body(shots[i].body, sizeof(shots[i].body), g, 1, "redis-sharded");
    }
    pthread_t tid[SHARD_SHOTS];
    for (int i = 0; i < SHARD_SHOTS; i++)
        if (pthread_create(&tid[i], NULL, shard_shot_thread, &shots[i]) != 0)
            abort(); /* the barrier would wait forever for the missing threads */
    for (int i = 0; i < SHARD_SHOTS; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);

    int sold = 0, refused = 0;
    for (int i = 0; i < SHARD_SHOTS; i++)
        for (int k = 0; k < 2; k++) {
            if (shots[i].status[k] == 200) {
                sold++;
            } else if (shots[i].status[k] == 409) {
                refused++;
                if (shots[i].remaining[k] != 0)
                    fail_msg("redis-sharded: a 409 with %lld units left: refused while a segment "
                             "held stock",
                             shots[i].remaining[k]);
            } else {
                fail_msg("redis-sharded: neither 200 nor 409: %s", shots[i].note);
            }
        }
    printf("    redis-sharded, %d requests of 1 on 20 units over %d segments: %d sold, %d "
           "refused\n",
           2 * SHARD_SHOTS, SHARD_K, sold, refused);
    if (sold != 20 || refused != 2 * SHARD_SHOTS - 20)
        fail_msg("redis-sharded: %d sold and %d refused, want 20 and %d", sold, refused,
                 2 * SHARD_SHOTS - 20);
    expect_stock(g, 21, 0, 21, 21, "redis-sharded: sold out only at zero");
}

/* Idempotency as in the single path: 20 requests at once with one key, over nginx and every
 * replica, sell once and all get the one answer, which every replica replays; a stored 409
 * replays after stock is back. */

/* Mixing modes on one goods stays exact: redis-sharded, redis, redis-batch and pg-atomic at
 * once, 16 threads each through nginx, on a stock that runs out: units move between the
 * goods row and the segments as each mode needs them, and the books still say exactly the
 * stock was sold, once per order. The three lock modes may answer 503 lock_timeout: 48 of
 * the 64 requests wait in one line, and on a busy 2-core machine the last of them can reach
 * the lock wait's bound; such an answer sells nothing (the books below count every unit), so
 * it is counted, not failed. What must hold is the books: every 200 one unit sold, every 409
 * a refusal at zero, nothing sold twice. */
static void *mixed_run(void *arg)
{
    load_run(arg);
    return NULL;
}

static void test_sharded_mixed_modes(void **state)
{
    (void)state;
    begin_case("sharded_mixed_modes");
    const char *modes[] = {"redis-sharded", "redis", "redis-batch", "pg-atomic"};
    const long long g = GOODS_SHARD_MIXED, stock = 600;
    load_plan *plans[4];
    pthread_t tid[4];
    int sold = 0, refused = 0, timed_out = 0;

    reset_goods(g, stock);
    for (int i = 0; i < 4; i++) {
        plans[i] = load_plan_new(modes[i], g_env.stock_url, g, modes[i], 200, 16);
        if (i < 3)
            plans[i]->allowed_503 = "lock_timeout";
    }
    for (int i = 0; i < 4; i++)
        if (pthread_create(&tid[i], NULL, mixed_run, plans[i]) != 0)
            abort();
    for (int i = 0; i < 4; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < 4; i++) {
        expect_only_200_409(plans[i]);
        sold += plans[i]->counts.by_status[200];
        refused += plans[i]->counts.by_status[409];
        timed_out += plans[i]->counts.allowed_503;
    }
    printf("    4 modes at once on %lld units: %d sold, %d refused, %d lock_timeout\n", stock,
           sold, refused, timed_out);
    /* A 409 is a refusal at zero: once one came, the whole stock was sold. */
    if ((refused > 0 && sold != stock) || sold > stock || sold + refused + timed_out != 800)
        fail_msg("4 modes at once on %lld units: %d sold, %d refused, %d lock_timeout: want the "
                 "stock sold once a request was refused, and 800 answers",
                 stock, sold, refused, timed_out);
    expect_stock(g, stock, stock - sold, sold, sold, "4 modes at once on one goods");

    /* After the mix, each mode still sells what another left behind. */
    reset_goods(g, 10);
    expect_deducted(deduct(g_env.stock_url, g, 4, "redis-sharded", NULL), g, 4, 6, "redis-sharded",
                    "the mix: redis-sharded cuts 10 units");
    expect_deducted(deduct(g_env.stock_url, g, 6, "redis", NULL), g, 6, 0, "redis",
                    "the mix: redis sells the 6 left in the segments");
    expect_error(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), 409, "insufficient_stock",
                 "the mix: sold out");
    expect_stock(g, 10, 0, 10, 2, "the mix, in turn");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sharded_load_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_large_count, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_sold_out_only_at_zero, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_mixed_modes, case_setup, case_teardown),
    };
    return stack_main("sharded_sales", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
