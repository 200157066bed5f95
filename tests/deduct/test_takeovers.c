/*
 * test_takeovers.c - a holder stuck or gone while another comes: pg-lockrow excludes, and
 * after the row's lease expires two holders are told apart; the PostgreSQL rungs' lock wait
 * bounded by a transaction that holds the row; redis-batch's leader stuck in PostgreSQL;
 * the fencing counter behind after a failover of Redis.
 *
 * The holders, the scripted guard, the database: tests/deduct/deduct_support.h.
 */
#include "tests/deduct/deduct_support.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "lock/lock.h"
#include "service/sale/batch.h"
#include "service/guards/guards.h"
#include "tests/support/redis_server.h"

/*
 * pg-lockrow excludes: while one holder is inside its section (stopped before its write),
 * a second deduction of the same goods waits its bound and answers 503 lock_timeout, having
 * sold nothing; once the first has committed and left, the lock row is gone and a deduction
 * enters at once.
 */
static void test_pg_lockrow_excludes(void **state)
{
    const mode *m = modes_find("pg-lockrow");
    const int64_t goods = 5101;

    (void)state;
    assert_non_null(m);
    reset_goods(goods, 10);
    holder *a = holder_start(0, 'O', 0, goods, m);
    assert_true(holder_settle(a, STEP_LIMIT_MS)); /* entered: the row is a's */
    assert_true(holder_step(a, STEP_LIMIT_MS));   /* a has read; it stops before writing */

    holder *b = holder_start(1, 'N', 0, goods, m);
    int64_t start = now_ms();
    holder_finish(1); /* b never gets past its guard: it must end by itself */
    int64_t took = now_ms() - start;
    printf("    a second taker while the row is held: %d %s after %lld ms (bound 300 ms)\n",
           b->res.status, deduct_outcome_name(b->res.outcome), (long long)took);
    assert_int_equal(b->res.status, 503);
    assert_string_equal(deduct_outcome_name(b->res.outcome), "lock_timeout");
    assert_true(took >= 290 && took < 3000);
    free(b->res.body);
    b->res.body = NULL;

    holder_finish(0);
    assert_int_equal(a->res.status, 200);
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 9);
    assert_int_equal(r.sold, 1);

    /* released: the next taker enters without waiting */
    holder *c = holder_start(1, 'N', 0, goods, m);
    holder_finish(1);
    assert_int_equal(c->res.status, 200);
    assert_true(c->res.wait_seconds < 0.25);
    r = report_of(goods);
    assert_int_equal(r.stock, 8);
    assert_int_equal(r.sold - (r.initial - r.stock), 0);
    free(a->res.body);
    a->res.body = NULL;
    free(c->res.body);
    c->res.body = NULL;
}

/*
 * pg-lockrow-ttl's flaw, made exact: holder A takes the row (lease 300 ms here) and reads
 * the stock, then is held up past the lease before its write (a pause, a slow statement).
 * Holder B finds the row expired, deletes it, takes the lock, and reads the same stock. Both
 * write the value they computed and both commit: one unit sold twice. Nothing in this rung
 * can notice: no renewal, no check before the commit, no fencing token on the goods row.
 */
static void test_pg_lockrow_ttl_two_holders_after_expiry(void **state)
{
    const mode *m = modes_find("pg-lockrow-ttl");
    const int64_t goods = 5102;

    (void)state;
    assert_non_null(m);
    reset_goods(goods, 10);
    holder *a = holder_start(0, 'O', 0, goods, m);
    assert_true(holder_settle(a, STEP_LIMIT_MS));
    assert_true(holder_step(a, STEP_LIMIT_MS)); /* A read 10 and stops before its write */
    usleep(400 * 1000);                         /* past A's lease of 300 ms */

    holder *b = holder_start(1, 'N', 0, goods, m);
    assert_true(holder_settle(b, STEP_LIMIT_MS)); /* B took the expired row over */
    assert_true(holder_step(b, STEP_LIMIT_MS));   /* B read 10 too */
    assert_true(holder_step(a, STEP_LIMIT_MS));   /* A writes 9 */
    holder_finish(0);                             /* A commits, releases (its row is gone) */
    assert_true(holder_step(b, STEP_LIMIT_MS));   /* B writes 9 */
    holder_finish(1);                             /* B commits */

    assert_int_equal(a->res.status, 200);
    assert_int_equal(b->res.status, 200);
    db_stock_report r = report_of(goods);
    int64_t oversold = r.sold - (r.initial - r.stock);
    printf("    pg-lockrow-ttl, A paused past its lease: both sold, stock %lld, sold %lld, "
           "oversold %lld\n",
           (long long)r.stock, (long long)r.sold, (long long)oversold);
    assert_int_equal(r.stock, 9);
    assert_int_equal(r.sold, 2);
    assert_int_equal(oversold, 1);
    free(a->res.body);
    a->res.body = NULL;
    free(b->res.body);
    b->res.body = NULL;
}

/* Opens g_holder_conn and, in a transaction left open, locks goods' row (an UPDATE), as a
 * holder inside its section would. */
static void hold_goods_row(int64_t goods)
{
    char sql[160];

    g_holder_conn = PQconnectdb(g_conninfo);
    assert_int_equal(PQstatus(g_holder_conn), CONNECTION_OK);
    holder_conn_exec("BEGIN");
    snprintf(sql, sizeof(sql), "UPDATE goods SET updated = now() WHERE id = %lld",
             (long long)goods);
    holder_conn_exec(sql);
}

/*
 * The PostgreSQL rungs wait for their locks inside PostgreSQL, and that wait is bounded like
 * a guard's: with the goods row locked by another transaction (and its advisory lock held),
 * each rung answers 503 lock_timeout after its lock wait bound (here 300 ms), having sold
 * nothing, rather than waiting until statement_timeout and answering "unavailable".
 */
static void test_pg_rungs_lock_wait_is_bounded(void **state)
{
    const char *names[] = {"pg-for-update", "pg-atomic", "pg-advisory", "pg-optimistic",
                           "pg-serializable"};
    const int64_t goods = 5201;
    char sql[160];

    (void)state;
    reset_goods(goods, 10);
    hold_goods_row(goods);
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%lld)", (long long)goods);
    holder_conn_exec(sql);

    g_lock_wait_ms = 300;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const mode *m = modes_find(names[i]);
        assert_non_null(m);
        holder *h = holder_start(0, 'O', 0, goods, m);
        int64_t start = now_ms();
        holder_finish(0);
        int64_t took = now_ms() - start;
        printf("    %s with the row and its advisory lock held elsewhere: %d %s after %lld ms\n",
               names[i], h->res.status, deduct_outcome_name(h->res.outcome), (long long)took);
        if (h->res.status != 503 || h->res.outcome != DEDUCT_LOCK_TIMEOUT)
            fail_msg("%s: answered %d %s (%s), want 503 lock_timeout", names[i], h->res.status,
                     deduct_outcome_name(h->res.outcome), h->res.detail);
        assert_true(took >= 290 && took < 3000);
        free(h->res.body);
        h->res.body = NULL;
    }
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 10);
    assert_int_equal(r.sold, 0);

    holder_conn_exec("ROLLBACK"); /* the locks go: every rung sells again */
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        holder *h = holder_start(0, 'O', 0, goods, modes_find(names[i]));
        holder_finish(0);
        assert_int_equal(h->res.status, 200);
        free(h->res.body);
        h->res.body = NULL;
    }
    assert_int_equal(report_of(goods).stock, 5);
}

/* ---- a fenced holder behind the row of one that lost its lock ------------------------ */

/* A fenced guard (redis' shape: a token, the claim in two round trips when nothing else
 * asks for the statements one by one) whose holding stays good. */
static int fenced_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                        size_t detail_len)
{
    int rc = guard_none_enter(env, goods_id, hold, detail, detail_len);

    hold->fenced = true;
    hold->fence = 1000;
    hold->fence_source = "test";
    return rc;
}

static const mode fenced_mode = {.name = "fenced",
                                 .safe = true,
                                 .summary = "a fixed token, never lost",
                                 .enter = fenced_enter,
                                 .still_held = scripted_still_held,
                                 .leave = guard_none_leave};

/* Asserts a 503 lock_timeout after about the bound (300 ms), and frees the body. */
static void expect_bounded(const char *what, deduct_result *res, int64_t took)
{
    printf("    %s: %d %s after %lld ms\n", what, res->status, deduct_outcome_name(res->outcome),
           (long long)took);
    if (res->status != 503 || res->outcome != DEDUCT_LOCK_TIMEOUT)
        fail_msg("%s: answered %d %s (%s), want 503 lock_timeout", what, res->status,
                 deduct_outcome_name(res->outcome), res->detail);
    assert_true(took >= 290 && took < 3000);
    free(res->body);
    res->body = NULL;
}

/*
 * The goods row held by a holder that lost its lock inside its section (its transaction still
 * open: here, another session's): a fenced holder's claim waits for that row, and the wait is
 * a lock not had, bounded like a guard's: 503 lock_timeout after the lock wait bound (here
 * 300 ms), having sold nothing, on the statement path (redis with a hook, a key, or
 * redis-fence-write) and in two round trips (redis' plain sale); not "unavailable" at
 * statement_timeout (5 s), PostgreSQL's "canceling statement due to statement timeout".
 */
static void test_fenced_sale_behind_a_held_row_is_bounded(void **state)
{
    const int64_t goods = 5202;
    deduct_env env = deduct_test_env();
    deduct_result res = {0};

    (void)state;
    reset_goods(goods, 10);
    hold_goods_row(goods);

    g_lock_wait_ms = 300;
    holder *h = holder_start(0, 'N', 20, goods, &scripted_mode);
    int64_t start = now_ms();
    holder_finish(0);
    expect_bounded("the statement path", &h->res, now_ms() - start);

    env.lock_wait_ms = 300;
    env.pipeline = true;
    start = now_ms();
    assert_int_equal(deduct_execute(&env, &fenced_mode, goods, 1, NULL, NULL, &res), 0);
    expect_bounded("two round trips", &res, now_ms() - start);
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 10);
    assert_int_equal(r.sold, 0);

    holder_conn_exec("ROLLBACK"); /* the row is free: the sale goes through at once */
    assert_int_equal(deduct_execute(&env, &fenced_mode, goods, 1, NULL, NULL, &res), 0);
    assert_int_equal(res.status, 200);
    free(res.body);
    assert_int_equal(report_of(goods).stock, 9);
}

/* ---- redis-batch: a leader stuck in PostgreSQL --------------------------------------- */

/* fenced_enter's guard, taking a while (so that the followers queue behind the leader). */
static int batch_slow_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                            size_t detail_len)
{
    usleep(150 * 1000);
    return fenced_enter(env, goods_id, hold, detail, detail_len);
}

static const mode batch_slow_mode = {.name = "batch-slow",
                                     .safe = true,
                                     .summary = "a slow guard for the batch's bounds",
                                     .enter = batch_slow_enter,
                                     .still_held = scripted_still_held,
                                     .leave = guard_none_leave,
                                     .batched = true};

typedef struct batch_shot {
    pthread_t thread;
    batch_queue *q;
    int64_t goods;
    int64_t started_ms, took_ms; /* took_ms: -1 until answered */
    _Atomic bool answered;
    deduct_result res;
} batch_shot;

static void *batch_shot_run(void *arg)
{
    batch_shot *b = arg;
    deduct_env env = deduct_test_env();

    /* Each request with an Idempotency-Key of its own, freed the moment its answer is back,
     * as a replica frees a request's headers: the batch must have copied it, since a
     * follower that withdraws at its deadline is gone while its leader's claim still runs. */
    char *key = malloc(64);

    assert_non_null(key);
    snprintf(key, 64, "takeover-%lld-%p", (long long)b->goods, (void *)b);
    b->started_ms = now_ms();
    batch_execute(b->q, &env, &batch_slow_mode, b->goods, 1, key, NULL, &b->res);
    free(key);
    b->took_ms = now_ms() - b->started_ms;
    atomic_store(&b->answered, true);
    return NULL;
}

/*
 * A batch whose leader is stuck in PostgreSQL (the goods row locked by another session, so
 * its fenced read waits): every follower it took answers within its own deadline
 * (BATCH_WAIT_MS, 400 ms here), 503 lock_timeout, and that 503 sold nothing: once the row is
 * free the leader finds them gone and rolls the batch back. Before, the followers waited
 * untimed for the leader, and were sold once the row lock went.
 */
static void test_batch_leader_stuck_in_postgresql(void **state)
{
    enum { FOLLOWERS = 5 };
    const int64_t goods = 5301, wait_ms = 400;
    batch_shot leader = {0}, followers[FOLLOWERS];
    batch_queue *q = NULL;
    int64_t until;
    bool all;

    (void)state;
    reset_goods(goods, 10);
    assert_int_equal(batch_queue_create(&(batch_options){64, 1024, wait_ms}, &q), 0);
    hold_goods_row(goods);

    leader = (batch_shot){.q = q, .goods = goods, .took_ms = -1};
    assert_int_equal(pthread_create(&leader.thread, NULL, batch_shot_run, &leader), 0);
    usleep(30 * 1000); /* the leader is in its (slow) guard: the others queue behind it */
    for (int i = 0; i < FOLLOWERS; i++) {
        followers[i] = (batch_shot){.q = q, .goods = goods, .took_ms = -1};
        assert_int_equal(pthread_create(&followers[i].thread, NULL, batch_shot_run, &followers[i]),
                         0);
    }
    /* Every follower should answer by its deadline; give them 3 s before the row is freed
     * (on a follower that waits for its leader, that is when it would answer). */
    until = now_ms() + 3000;
    do {
        usleep(10 * 1000);
        all = true;
        for (int i = 0; i < FOLLOWERS; i++)
            all = all && atomic_load(&followers[i].answered);
    } while (!all && now_ms() < until);
    holder_conn_exec("ROLLBACK"); /* the row is free: the leader goes on */
    pthread_join(leader.thread, NULL);
    for (int i = 0; i < FOLLOWERS; i++)
        pthread_join(followers[i].thread, NULL);

    for (int i = 0; i < FOLLOWERS; i++) {
        batch_shot *f = &followers[i];
        printf("    follower %d: %d %s after %lld ms\n", i, f->res.status,
               deduct_outcome_name(f->res.outcome), (long long)f->took_ms);
        assert_int_equal(f->res.status, 503);
        assert_string_equal(deduct_outcome_name(f->res.outcome), "lock_timeout");
        assert_true(f->took_ms >= wait_ms - 10 && f->took_ms < wait_ms + 300);
        free(f->res.body);
    }
    printf("    leader: %d %s after %lld ms\n", leader.res.status,
           deduct_outcome_name(leader.res.outcome), (long long)leader.took_ms);
    assert_int_equal(leader.res.status, 503);
    free(leader.res.body);
    /* No 503 sold anything: the batch was rolled back. */
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 10);
    assert_int_equal(r.sold, 0);

    /* The queue is whole again: the next request leads a batch of its own and sells. */
    leader = (batch_shot){.q = q, .goods = goods, .took_ms = -1};
    batch_shot_run(&leader);
    assert_int_equal(leader.res.status, 200);
    free(leader.res.body);
    assert_int_equal(report_of(goods).stock, 9);
    batch_queue_destroy(q);
}

/* ---- the fencing counter after a failover --------------------------------------------- */

/* Eight sales of one unit under `redis`; counts the 200s and the lock_lost refusals. */
static void eight_sales(deduct_env *env, const mode *m, int64_t goods, int *sold, int *refused)
{
    deduct_result res;

    *sold = *refused = 0;
    for (int i = 0; i < 8; i++) {
        assert_int_equal(deduct_execute(env, m, goods, 1, NULL, NULL, &res), 0);
        if (res.status == 200)
            (*sold)++;
        else if (res.status == 503 && res.outcome == DEDUCT_LOCK_LOST)
            (*refused)++;
        free(res.body);
    }
}

/*
 * A failover to a replica whose fencing counter is behind the database (it had not received
 * the last increments), made by setting the counter back by 5 after a sale: the next token is
 * past Redis' clock as well as the counter (lock/acquire.lua's next_token), so no sale is
 * refused. Then a row that has seen a token beyond the counter and the clock (a minute ahead:
 * a master whose clock is behind, or stepped back): the first sale is refused (lock_lost),
 * and the refusal moves the counter past the stored token (fence_raise.lua), so it costs one
 * refused sale, not one per token the counter was behind.
 */
static void test_fence_counter_behind_after_failover(void **state)
{
    const int64_t goods = 5401;
    redis_server *srv = NULL;
    lock_options lo;
    lock_client *lock = NULL;
    guard_env *guards = NULL;
    const mode *m = modes_find("redis");
    deduct_result res;
    redisContext *raw;
    redisReply *r;
    char sql[256];
    int refused, sold;

    (void)state;
    assert_non_null(m);
    assert_int_equal(redis_server_start(&srv), 0);
    lock_options_init(&lo);
    lo.redis_port = redis_server_port(srv);
    assert_int_equal(lock_client_create(&lo, &lock), LOCK_OK);
    guard_env_options gopts = {.lock = lock,
                               .wait_ms = 1000,
                               .lease_ms = LOCK_LEASE_WATCHDOG,
                               .db = g_pool,
                               .db_wait_ms = 2000};
    assert_int_equal(guard_env_create(&gopts, &guards), 0);
    deduct_env env = deduct_test_env();
    env.guards = guards;
    env.pipeline = true;
    reset_goods(goods, 100);

    assert_int_equal(deduct_execute(&env, m, goods, 1, NULL, NULL, &res), 0);
    assert_int_equal(res.status, 200);
    free(res.body);
    raw = redisConnect("127.0.0.1", redis_server_port(srv));
    assert_non_null(raw);
    r = redisCommand(raw, "DECRBY lock:goods:%lld:fence 5", (long long)goods);
    assert_non_null(r);
    freeReplyObject(r);
    eight_sales(&env, m, goods, &sold, &refused);
    printf("    counter 5 behind the stored fence: %d of 8 sales refused, %d sold\n", refused,
           sold);
    assert_int_equal(refused, 0);
    assert_int_equal(sold, 8);

    r = redisCommand(raw, "GET lock:goods:%lld:fence", (long long)goods);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(sql, sizeof(sql),
             "UPDATE goods_fences SET fence = %lld WHERE goods = %lld AND source = 'redis'",
             strtoll(r->str, NULL, 10) + 60LL * 1000 * 1000, (long long)goods);
    freeReplyObject(r);
    g_holder_conn = PQconnectdb(g_conninfo);
    holder_conn_exec(sql);
    eight_sales(&env, m, goods, &sold, &refused);
    printf("    the row a minute of tokens ahead: %d of 8 sales refused, %d sold\n", refused, sold);
    assert_int_equal(refused, 1);
    assert_int_equal(sold, 7);
    assert_int_equal(report_of(goods).stock, 100 - 1 - 8 - 7);

    redisFree(raw);
    guard_env_destroy(guards);
    lock_client_destroy(lock);
    redis_server_destroy(srv);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pg_lockrow_excludes, holders_finish),
        cmocka_unit_test_teardown(test_pg_lockrow_ttl_two_holders_after_expiry, holders_finish),
        cmocka_unit_test_teardown(test_pg_rungs_lock_wait_is_bounded, holder_conn_teardown),
        cmocka_unit_test_teardown(test_fenced_sale_behind_a_held_row_is_bounded,
                                  holder_conn_teardown),
        cmocka_unit_test_teardown(test_batch_leader_stuck_in_postgresql, holder_conn_teardown),
        cmocka_unit_test_teardown(test_fence_counter_behind_after_failover, holder_conn_teardown),
    };

    return deduct_test_main("test_takeovers", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
