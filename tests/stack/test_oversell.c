/*
 * test_oversell.c - each mode under load through the running stack, and what it sells:
 * `redis` through nginx over three replicas (3,000 deductions of 1 from 64 clients against
 * 2,000 units sell exactly 2,000), the batch endpoint likewise, every PostgreSQL rung over
 * three replicas (exactly the stock; pg-optimistic's and pg-serializable's `conflict` and
 * pg-lockrow's `lock_timeout` 503s counted, nothing sold without a 200), a dead holder's lock
 * row wedging pg-lockrow and taken over by pg-lockrow-ttl, the rungs' lock wait bound behind a
 * row lock held elsewhere, `local` on one replica (exact), and `none` and `local` over three
 * replicas: whatever they oversell, the books agree with the answers (sold = the number of
 * 200s).
 *
 * Run alone as tests/stack/test_contract.c says: STACK_PROGRAMS=oversell make
 * test-integration.
 */
#include "tests/stack/stack_support.h"

#include <libpq-fe.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


/* ------------------------------------------------------------------------------------------
 * Cases: load
 * ------------------------------------------------------------------------------------------ */

/* redis through nginx over every replica: exactly the stock is sold, by all replicas. */
static void test_load_redis_three(void **state)
{
    (void)state;
    begin_case("load_redis_three");
    reset_goods(GOODS_LOAD_REDIS, LOAD_STOCK);
    load_plan *p = load_plan_new("redis via nginx", g_env.stock_url, GOODS_LOAD_REDIS, "redis",
                                 LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_STOCK);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (p->counts.per_instance[i] == 0)
            fail_msg("redis via nginx: replica %s sold nothing: nginx did not balance over all",
                     g_env.instances[i]);
}

/* redis-batch through nginx over every replica: each replica's concurrent requests are sold
 * in batches, one transaction each under the redis lock, and exactly the stock is sold, each
 * 200 with its own remaining value, by all replicas. */
static void test_load_redis_batch_three(void **state)
{
    (void)state;
    begin_case("load_redis_batch_three");
    reset_goods(GOODS_LOAD_BATCH, LOAD_STOCK);
    load_plan *p = load_plan_new("redis-batch via nginx", g_env.stock_url, GOODS_LOAD_BATCH,
                                 "redis-batch", LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_STOCK);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (p->counts.per_instance[i] == 0)
            fail_msg("redis-batch via nginx: replica %s sold nothing", g_env.instances[i]);
}

/* The PostgreSQL rungs answer like every mode: 200 with the stock left, 409 with the stock
 * there is (pg-atomic finds it with its conditional UPDATE, which wrote nothing), sold out. */
static void test_pg_rung_outcomes(void **state)
{
    (void)state;
    begin_case("pg_rung_outcomes");
    const char *modes[] = {"pg-for-update", "pg-atomic", "pg-advisory"};
    for (size_t i = 0; i < 3; i++) {
        long long g = GOODS_PG_OUTCOMES + (long long)i;
        char what[96];
        reset_goods(g, 5);
        snprintf(what, sizeof(what), "%s: deduct 2 of 5", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 2, modes[i], NULL), g, 2, 3, modes[i], what);
        snprintf(what, sizeof(what), "%s: deduct 4 of 3", modes[i]);
        json_t *j = expect_error(deduct(g_env.stock_url, g, 4, modes[i], NULL), 409,
                                 "insufficient_stock", what);
        expect_field_int(j, "remaining", 3, what);
        expect_stock(g, 5, 3, 2, 1, what);
        snprintf(what, sizeof(what), "%s: deduct the last 3", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 3, modes[i], NULL), g, 3, 0, modes[i], what);
        expect_stock(g, 5, 0, 5, 2, what);
    }
}

/* A PostgreSQL rung under the load of test_load_redis_three (a third of its size: the
 * exclusion here is PostgreSQL's row lock, not code of this project's), through nginx over
 * every replica, with no Redis lock: the database alone sells exactly the stock. One case
 * per rung, so that one rung's failure does not hide the others' figures. */
static void load_pg_three(const char *mode_name, const char *label, long long goods)
{
    reset_goods(goods, LOAD_SMALL_STOCK);
    load_plan *p = load_plan_new(label, g_env.stock_url, goods, mode_name, LOAD_SMALL_REQUESTS,
                                 LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_SMALL_STOCK);
    for (size_t k = 0; k < g_env.n_replicas; k++)
        if (p->counts.per_instance[k] == 0)
            fail_msg("%s: replica %s sold nothing: nginx did not balance over all", label,
                     g_env.instances[k]);
}

static void test_load_pg_for_update_three(void **state)
{
    (void)state;
    begin_case("load_pg_for_update_three");
    load_pg_three("pg-for-update", "pg-for-update via nginx", GOODS_LOAD_PG);
}

static void test_load_pg_atomic_three(void **state)
{
    (void)state;
    begin_case("load_pg_atomic_three");
    load_pg_three("pg-atomic", "pg-atomic via nginx", GOODS_LOAD_PG + 1);
}

static void test_load_pg_advisory_three(void **state)
{
    (void)state;
    begin_case("load_pg_advisory_three");
    load_pg_three("pg-advisory", "pg-advisory via nginx", GOODS_LOAD_PG + 2);
}

/* local on one replica (its mutex is enough there): the same exact figures. */
static void test_load_local_one(void **state)
{
    (void)state;
    begin_case("load_local_one");
    reset_goods(GOODS_LOAD_LOCAL1, LOAD_STOCK);
    load_plan *p = load_plan_new("local on one replica", g_env.replicas[0], GOODS_LOAD_LOCAL1,
                                 "local", LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_STOCK);
    if (p->counts.per_instance[0] != LOAD_STOCK)
        fail_msg("local on one replica: %d sales by %s, want all %d", p->counts.per_instance[0],
                 g_env.instances[0], LOAD_STOCK);
}

/* none and local over three replicas: they may oversell (not asserted: that would be luck),
 * but the books must agree with the answers, and where they oversold, the history must say
 * so too: no order of the sales explains it. */
static void test_load_unsafe_three(void **state)
{
    (void)state;
    begin_case("load_unsafe_three");
    const char *modes[] = {"none", "local"};
    const long long goods[] = {GOODS_LOAD_NONE3, GOODS_LOAD_LOCAL3};

    for (size_t m = 0; m < 2; m++) {
        char label[64];
        snprintf(label, sizeof(label), "%s via nginx", modes[m]);
        reset_goods(goods[m], LOAD_SMALL_STOCK);
        load_plan *p = load_plan_new(m == 0 ? "none via nginx" : "local via nginx", g_env.stock_url,
                                     goods[m], modes[m], LOAD_SMALL_REQUESTS, LOAD_THREADS);
        load_run(p);
        expect_only_200_409(p);
        int n_ok = atomic_load(&p->n_ok);
        if (count_repeats(p->order_ids, n_ok) != 0)
            fail_msg("%s: two 200 answers carry the same order_id", label);
        int lost = count_repeats(p->remaining, n_ok);
        stock_view v = stock_get(goods[m]);
        printf("    %s: OVERSOLD %lld (stock %lld sold %lld orders %lld; %d sales saw a "
               "'remaining' another sale saw too)\n",
               label, v.oversold, v.stock, v.sold, v.orders, lost);
        if (v.sold != p->counts.by_status[200] || v.orders != p->counts.by_status[200])
            fail_msg("%s: sold %lld orders %lld, but %d answers were 200", label, v.sold, v.orders,
                     p->counts.by_status[200]);
        if (v.initial != LOAD_SMALL_STOCK || v.stock < 0 || v.stock > LOAD_SMALL_STOCK ||
            v.oversold < 0)
            fail_msg("%s: initial %lld stock %lld oversold %lld: stock out of bounds or lost",
                     label, v.initial, v.stock, v.oversold);
        if (v.oversold > 0)
            expect_not_linearizable(p);
    }
}

/* The sum of one series over every replica's /metrics. */
static double metric_sum(const char *series)
{
    double sum = 0;
    for (size_t i = 0; i < g_env.n_replicas; i++)
        sum += metric_value(g_env.replicas[i], series);
    return sum;
}

/* The four rungs answer like every mode: 200 with the stock left, 409 with the stock there
 * is, sold out, and 404 for unknown goods. */
static void test_pg_rungs_more_outcomes(void **state)
{
    (void)state;
    begin_case("pg_rungs_more_outcomes");
    const char *modes[] = {"pg-optimistic", "pg-lockrow", "pg-lockrow-ttl", "pg-serializable"};
    const long long goods[] = {GOODS_PG2_OUTCOMES, GOODS_PG2_OUTCOMES + 1, GOODS_PG2_OUTCOMES + 2,
                               GOODS_SERIALIZABLE};
    for (size_t i = 0; i < 4; i++) {
        long long g = goods[i];
        char what[96];
        reset_goods(g, 5);
        snprintf(what, sizeof(what), "%s: deduct 2 of 5", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 2, modes[i], NULL), g, 2, 3, modes[i], what);
        snprintf(what, sizeof(what), "%s: deduct 4 of 3", modes[i]);
        json_t *j = expect_error(deduct(g_env.stock_url, g, 4, modes[i], NULL), 409,
                                 "insufficient_stock", what);
        expect_field_int(j, "remaining", 3, what);
        snprintf(what, sizeof(what), "%s: deduct the last 3", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 3, modes[i], NULL), g, 3, 0, modes[i], what);
        expect_stock(g, 5, 0, 5, 2, what);
        snprintf(what, sizeof(what), "%s: unknown goods", modes[i]);
        expect_error(deduct(g_env.stock_url, GOODS_UNKNOWN, 1, modes[i], NULL), 404,
                     "unknown_goods", what);
    }
    /* The lock rows are gone once their requests are done (the 404 ones too). */
    if (sql_value("SELECT count(*) FROM goods_locks WHERE goods = $1", 1, GOODS_UNKNOWN) != 0 ||
        sql_value("SELECT count(*) FROM goods_locks WHERE goods = $1", 1, GOODS_PG2_OUTCOMES + 1) !=
            0)
        fail_msg("a lock row outlived its request");
}

/* The books of a load whose plan allows its mode's 503 (allowed_503): exactly `stock` sales,
 * each once, and every other answer a 409 or that 503, which sold nothing. */
static void expect_exact_sale_allowing_503(load_plan *p, long long stock)
{
    const load_counts *c = &p->counts;
    int n_ok = atomic_load(&p->n_ok);

    expect_only_200_409(p);
    if (c->by_status[200] != stock)
        fail_msg("%s: 200=%d, want exactly %lld (409=%d, 503 %s=%d)", p->label, c->by_status[200],
                 stock, c->by_status[409], p->allowed_503, c->allowed_503);
    if (count_repeats(p->order_ids, n_ok) != 0)
        fail_msg("%s: two 200 answers carry the same order_id", p->label);
    qsort(p->remaining, (size_t)n_ok, sizeof(long long), cmp_ll);
    for (int i = 0; i < n_ok; i++)
        if (p->remaining[i] != i)
            fail_msg("%s: the 200s' remaining values are not each of 0..%lld once (sorted, "
                     "position %d holds %lld)",
                     p->label, stock - 1, i, p->remaining[i]);
    stock_view v = stock_get(p->goods_id);
    printf("    %s: stock %lld sold %lld orders %lld oversold %lld; 503 %s: %d\n", p->label,
           v.stock, v.sold, v.orders, v.oversold, p->allowed_503, c->allowed_503);
    if (v.initial != stock || v.stock != 0 || v.sold != stock || v.orders != stock ||
        v.oversold != 0)
        fail_msg("%s: initial %lld stock %lld sold %lld orders %lld oversold %lld, want %lld 0 "
                 "%lld %lld 0",
                 p->label, v.initial, v.stock, v.sold, v.orders, v.oversold, stock, stock, stock);
    expect_linearizable(p); /* a 503 that sold nothing constrains nothing */
}

/*
 * pg-optimistic and pg-serializable under the load of test_load_redis_three: each sells
 * exactly the stock, never a unit twice. A request that loses its race (a moved version, or
 * PostgreSQL's 40001) OPTIMISTIC_RETRIES + 1 times answers 503 conflict and sells nothing
 * (that is their contract under contention, so it is allowed, and counted); the retries per
 * sale, from the replicas' stock_optimistic_retries_total, show what the contention cost.
 */
static void test_load_pg_retrying_three(void **state)
{
    static const char *const modes[] = {"pg-optimistic", "pg-serializable"};
    static const char *const labels[] = {"pg-optimistic via nginx", "pg-serializable via nginx"};
    static const long long goods[] = {GOODS_LOAD_OPTIMISTIC, GOODS_LOAD_SERIALIZABLE};

    (void)state;
    begin_case("load_pg_retrying_three");
    for (size_t i = 0; i < 2; i++) {
        const char *label = labels[i];
        reset_goods(goods[i], LOAD_SMALL_STOCK);
        double retries = metric_sum("stock_optimistic_retries_total");
        load_plan *p = load_plan_new(label, g_env.stock_url, goods[i], modes[i],
                                     LOAD_SMALL_REQUESTS, LOAD_THREADS);
        p->allowed_503 = "conflict";
        load_run(p);
        expect_exact_sale_allowing_503(p, LOAD_SMALL_STOCK);
        retries = metric_sum("stock_optimistic_retries_total") - retries;
        printf("    %s: %.0f transactions run again, %.2f per sale\n", label, retries,
               retries / LOAD_SMALL_STOCK);
        for (size_t k = 0; k < g_env.n_replicas; k++)
            if (p->counts.per_instance[k] == 0)
                fail_msg("%s: replica %s sold nothing", modes[i], g_env.instances[k]);
    }
}

/*
 * pg-lockrow under the same load: the lock row excludes across replicas, so exactly the
 * stock is sold. Its waiters poll, and polling is not fair: on a loaded machine one may miss
 * the row's release until its wait bound runs out, and answer 503 lock_timeout, selling
 * nothing; allowed, and counted.
 */
static void test_load_pg_lockrow_three(void **state)
{
    (void)state;
    begin_case("load_pg_lockrow_three");
    reset_goods(GOODS_LOAD_LOCKROW, LOAD_SMALL_STOCK);
    load_plan *p = load_plan_new("pg-lockrow via nginx", g_env.stock_url, GOODS_LOAD_LOCKROW,
                                 "pg-lockrow", LOAD_SMALL_REQUESTS, LOAD_THREADS);
    p->allowed_503 = "lock_timeout";
    load_run(p);
    expect_exact_sale_allowing_503(p, LOAD_SMALL_STOCK);
    for (size_t k = 0; k < g_env.n_replicas; k++)
        if (p->counts.per_instance[k] == 0)
            fail_msg("pg-lockrow: replica %s sold nothing", g_env.instances[k]);
    if (sql_value("SELECT count(*) FROM goods_locks WHERE goods = $1", 1, GOODS_LOAD_LOCKROW) != 0)
        fail_msg("pg-lockrow: a lock row is left after the load");
}

static void lockrow_rows_teardown_delete(long long goods)
{
    char err[256];
    if (sql_run("DELETE FROM goods_locks WHERE goods = $1", 1, goods, 0, NULL, NULL, err,
                sizeof(err)) != 0)
        fprintf(stderr, "could not delete the lock row of goods %lld: %s\n", goods, err);
}

static int lockrow_case_teardown(void **state)
{
    lockrow_rows_teardown_delete(GOODS_LOCKROW_WEDGE);
    lockrow_rows_teardown_delete(GOODS_LOCKROW_TTL);
    return case_teardown(state);
}

/* A deduct that must answer 503 lock_timeout after about the lock wait bound. */
static void expect_lock_timeout_after_bound(const char *mode, long long goods, const char *what)
{
    http_reply *r = deduct(g_env.stock_url, goods, 1, mode, NULL);
    printf("    %s: %ld after %.2f s (bound %ld ms)\n", what, r->status, r->seconds,
           g_env.lock_wait_ms);
    expect_error(r, 503, "lock_timeout", what);
    if (r->seconds < 0.9 * (double)g_env.lock_wait_ms / 1000.0 ||
        r->seconds > (double)g_env.lock_wait_ms / 1000.0 + 2.0)
        fail_msg("%s: lock_timeout came after %.2f s, want about %ld ms", what, r->seconds,
                 g_env.lock_wait_ms);
}

/*
 * pg-lockrow's flaw: a holder that dies between its insert and its delete leaves the row,
 * and nothing ever removes it. The row is written here by hand, as the dead holder left it;
 * every request for the goods then waits its bound and answers 503 lock_timeout, selling
 * nothing, however many come, until someone deletes the row; then the goods sells again.
 */
static void test_lockrow_dead_holder_wedges(void **state)
{
    (void)state;
    begin_case("lockrow_dead_holder_wedges");
    reset_goods(GOODS_LOCKROW_WEDGE, 10);
    sql_exec("INSERT INTO goods_locks (goods, owner) VALUES ($1, 'a holder that died, pid ' ||"
             " $2::text)",
             GOODS_LOCKROW_WEDGE, 4242);
    for (int i = 0; i < 2; i++)
        expect_lock_timeout_after_bound("pg-lockrow", GOODS_LOCKROW_WEDGE,
                                        "pg-lockrow deduct behind a dead holder's row");
    expect_stock(GOODS_LOCKROW_WEDGE, 10, 10, 0, 0, "while the dead holder's row stays");
    sql_exec("DELETE FROM goods_locks WHERE goods = $1 AND owner = 'a holder that died, pid ' ||"
             " $2::text",
             GOODS_LOCKROW_WEDGE, 4242);
    expect_deducted(deduct(g_env.stock_url, GOODS_LOCKROW_WEDGE, 1, "pg-lockrow", NULL),
                    GOODS_LOCKROW_WEDGE, 1, 9, "pg-lockrow", "once the row is deleted by hand");
}

/*
 * pg-lockrow-ttl fixes the wedge: the same dead holder's row, with an expiry that has passed,
 * is taken over by the next request, which sells at once. A row whose expiry is still ahead
 * holds the goods until then: a request waits for the expiry (well inside its bound) and
 * sells.
 */
static void test_lockrow_ttl_takes_over_an_expired_row(void **state)
{
    (void)state;
    begin_case("lockrow_ttl_takes_over_an_expired_row");
    reset_goods(GOODS_LOCKROW_TTL, 10);
    sql_exec("INSERT INTO goods_locks (goods, owner, locked_until) VALUES ($1, 'a holder that "
             "died', now() - $2::bigint * interval '1 millisecond')",
             GOODS_LOCKROW_TTL, 1000);
    http_reply *r = deduct(g_env.stock_url, GOODS_LOCKROW_TTL, 1, "pg-lockrow-ttl", NULL);
    printf("    pg-lockrow-ttl behind an expired row: %ld after %.2f s\n", r->status, r->seconds);
    expect_deducted(r, GOODS_LOCKROW_TTL, 1, 9, "pg-lockrow-ttl", "behind an expired row");
    if (r->seconds > 1.0)
        fail_msg("pg-lockrow-ttl behind an expired row: took %.2f s, want at once", r->seconds);

    long long ahead_ms = g_env.lock_wait_ms / 2;
    sql_exec("INSERT INTO goods_locks (goods, owner, locked_until) VALUES ($1, 'a holder that "
             "died', now() + $2::bigint * interval '1 millisecond')",
             GOODS_LOCKROW_TTL, ahead_ms);
    r = deduct(g_env.stock_url, GOODS_LOCKROW_TTL, 1, "pg-lockrow-ttl", NULL);
    printf("    pg-lockrow-ttl behind a row expiring in %lld ms: %ld after %.2f s\n", ahead_ms,
           r->status, r->seconds);
    expect_deducted(r, GOODS_LOCKROW_TTL, 1, 8, "pg-lockrow-ttl", "behind a row that expires");
    if (r->seconds < 0.8 * (double)ahead_ms / 1000.0)
        fail_msg("pg-lockrow-ttl: sold after %.2f s, before the row expired (%lld ms)", r->seconds,
                 ahead_ms);
    expect_stock(GOODS_LOCKROW_TTL, 10, 8, 2, 2, "after the two takeovers");
}

/* A connection of this test that holds a lock, as a stuck transaction of another client
 * would; the teardown closes it, which releases whatever it held. */
static PGconn *g_pg_holder;

static void pg_holder_exec(const char *sql, long long a)
{
    char text[24];
    const char *const values[1] = {text};

    snprintf(text, sizeof(text), "%lld", a);
    PGresult *res = PQexecParams(g_pg_holder, sql, a != 0 ? 1 : 0, NULL, values, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", PQresultErrorMessage(res));
        PQclear(res);
        fail_msg("%s: %s", sql, msg);
    }
    PQclear(res);
}

static int pg_holder_teardown(void **state)
{
    if (g_pg_holder != NULL) {
        PQfinish(g_pg_holder);
        g_pg_holder = NULL;
    }
    return case_teardown(state);
}

/*
 * The PostgreSQL rungs' own lock is bounded like a guard's: with the goods row locked by
 * another transaction (a stuck client's SELECT ... FOR UPDATE), pg-for-update waits
 * LOCK_WAIT_MS and answers 503 lock_timeout; with the goods' advisory lock held, so does
 * pg-advisory. Before, they waited until statement_timeout and answered "unavailable".
 * Nothing is sold meanwhile, and both sell once the other transaction ends.
 */
static void test_pg_rungs_lock_wait_bound(void **state)
{
    (void)state;
    begin_case("pg_rungs_lock_wait_bound");
    reset_goods(GOODS_PG_LOCK_WAIT, 10);
    char conninfo[256];
    snprintf(conninfo, sizeof(conninfo),
             "host=127.0.0.1 port=%s dbname=stock user=stock connect_timeout=5", g_env.pg_port);
    g_pg_holder = PQconnectdb(conninfo);
    if (PQstatus(g_pg_holder) != CONNECTION_OK)
        fail_msg("cannot connect with '%s': %s", conninfo, PQerrorMessage(g_pg_holder));
    pg_holder_exec("BEGIN", 0);
    pg_holder_exec("SELECT stock FROM goods WHERE id = $1 FOR UPDATE", GOODS_PG_LOCK_WAIT);
    pg_holder_exec("SELECT pg_advisory_xact_lock($1::bigint)", GOODS_PG_LOCK_WAIT);

    expect_lock_timeout_after_bound("pg-for-update", GOODS_PG_LOCK_WAIT,
                                    "pg-for-update with the row locked elsewhere");
    expect_lock_timeout_after_bound("pg-advisory", GOODS_PG_LOCK_WAIT,
                                    "pg-advisory with the advisory lock held elsewhere");
    expect_stock(GOODS_PG_LOCK_WAIT, 10, 10, 0, 0, "while the locks are held elsewhere");

    pg_holder_exec("ROLLBACK", 0);
    expect_deducted(deduct(g_env.stock_url, GOODS_PG_LOCK_WAIT, 1, "pg-for-update", NULL),
                    GOODS_PG_LOCK_WAIT, 1, 9, "pg-for-update", "once the row is free");
    expect_deducted(deduct(g_env.stock_url, GOODS_PG_LOCK_WAIT, 1, "pg-advisory", NULL),
                    GOODS_PG_LOCK_WAIT, 1, 8, "pg-advisory", "once the advisory lock is free");
}
/* Usage: test_oversell [PATTERN | --list] (stack_main in tests/stack/env.c). */
int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_redis_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_redis_batch_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_pg_rung_outcomes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_for_update_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_atomic_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_advisory_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_pg_rungs_more_outcomes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_retrying_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_lockrow_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lockrow_dead_holder_wedges, case_setup,
                                        lockrow_case_teardown),
        cmocka_unit_test_setup_teardown(test_lockrow_ttl_takes_over_an_expired_row, case_setup,
                                        lockrow_case_teardown),
        cmocka_unit_test_setup_teardown(test_pg_rungs_lock_wait_bound, case_setup,
                                        pg_holder_teardown),
        cmocka_unit_test_setup_teardown(test_load_local_one, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_unsafe_three, case_setup, case_teardown),
    };
    return stack_main("oversell", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
