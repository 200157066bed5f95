/*
 * test_modes.c - the strategy table and the guards that need no server (none, local).
 * The redis guard is exercised through the whole stack by tests/stack/, the etcd guard by
 * test_etcd.c (its lock) and the integration run (the mode); here, which replicas offer it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "service/guards/modes.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static guard_env *plain_env(void)
{
    guard_env_options opts = {.lock = NULL, .wait_ms = 100, .lease_ms = LOCK_LEASE_WATCHDOG};
    guard_env *env = NULL;

    assert_int_equal(guard_env_create(&opts, &env), 0);
    return env;
}

/*
 * What `safe` claims, checked against what the guards do: a row is safe only if two replicas
 * can never sell from one read. Two guard environments stand for two replicas; every row
 * whose guard works without a server (none, local, and the rungs that use none's) is entered
 * for one goods by both at once. When both get in, only the row's own transaction (tx: the
 * database closes the race) can keep it safe, so a row without one must say unsafe. `local`
 * is the case in point: it excludes within a replica, not across two.
 */
static void test_safe_means_two_replicas_cannot_both_hold(void **state)
{
    guard_env *a = plain_env(), *b = plain_env();
    size_t n = 0, both_in = 0;
    const mode *all = modes_all(&n);

    (void)state;
    for (size_t i = 0; i < n; i++) {
        guard_hold ha, hb;
        char detail[128] = "";

        if (all[i].enter(a, 7, &ha, detail, sizeof(detail)) != GUARD_OK)
            continue; /* it needs a server: proven against one (tests/stack/test_oversell) */
        int rc = all[i].enter(b, 7, &hb, detail, sizeof(detail));
        if (rc == GUARD_OK) {
            both_in++;
            if (all[i].tx == NULL && all[i].safe)
                fail_msg("mode %s is marked safe, but two replicas hold goods 7 at once and no "
                         "transaction shape closes the race",
                         all[i].name);
            all[i].leave(b, &hb);
        }
        all[i].leave(a, &ha);
    }
    /* none and local at least: a check that entered nothing would prove nothing. */
    assert_true(both_in >= 2);
    assert_false(modes_find("local")->safe);
    guard_env_destroy(b);
    guard_env_destroy(a);
}

/*
 * Every row, on a replica with no server configured (no Redis client, no pool, no etcd or
 * ZooKeeper client): its guard either needs none (enter answers GUARD_OK, still_held
 * GUARD_OK, and leave lets the next one in) or answers GUARD_ERR_UNAVAILABLE with a reason,
 * within the wait bound: a 503, never a crash, a hang or a false GUARD_OK. And each row is
 * found by its own name (no two rows share one).
 */
static void test_every_row_answers_without_its_server(void **state)
{
    guard_env *env = plain_env();
    size_t n = 0;
    const mode *all = modes_all(&n);

    (void)state;
    assert_true(n >= 3);
    for (size_t i = 0; i < n; i++) {
        guard_hold hold;
        char detail[128] = "";
        double start = now_s();

        assert_ptr_equal(modes_find(all[i].name), &all[i]);
        assert_true(strlen(all[i].summary) > 10);
        int rc = all[i].enter(env, 11, &hold, detail, sizeof(detail));
        if (now_s() - start > 1.0)
            fail_msg("mode %s: enter took %.2f s with a 100 ms wait bound", all[i].name,
                     now_s() - start);
        if (rc == GUARD_OK) {
            assert_int_equal(all[i].still_held(env, &hold), GUARD_OK);
            all[i].leave(env, &hold);
            assert_int_equal(all[i].enter(env, 11, &hold, detail, sizeof(detail)), GUARD_OK);
            all[i].leave(env, &hold);
        } else if (rc != GUARD_ERR_UNAVAILABLE || detail[0] == '\0') {
            fail_msg("mode %s without a server: enter answered %d (detail '%s'), want GUARD_OK "
                     "or GUARD_ERR_UNAVAILABLE with a reason",
                     all[i].name, rc, detail);
        }
    }
    guard_env_destroy(env);
}

static void test_pg_rungs_are_safe_shapes_without_a_guard(void **state)
{
    const char *names[] = {"pg-for-update", "pg-atomic", "pg-advisory", "pg-serializable"};
    size_t n = 0;
    const mode *all = modes_all(&n);

    (void)state;
    assert_true(n >= 6);
    for (size_t i = 0; i < 4; i++) {
        const mode *m = modes_find(names[i]);
        assert_non_null(m);
        assert_true(m->safe);
        assert_non_null(m->tx);
        assert_non_null(m->tx->read);
        assert_non_null(m->tx->write);
        /* only pg-serializable asks for more than READ COMMITTED: PostgreSQL's refusal (40001)
         * is what keeps its plain read-check-write apart */
        assert_int_equal(m->tx->isolation, i == 3 ? DB_SERIALIZABLE : DB_READ_COMMITTED);
        /* no guard: the database closes the race (none's enter, leave and still_held) */
        assert_ptr_equal(m->enter, modes_find("none")->enter);
        assert_ptr_equal(m->leave, modes_find("none")->leave);
        assert_ptr_equal(m->still_held, modes_find("none")->still_held);
    }
    for (size_t i = 0; i < 3; i++)
        assert_null(all[i].tx); /* the guard rungs run the guarded read-check-write */
}

/* pg-optimistic is a safe transaction shape with no guard, like the other PostgreSQL rungs;
 * the lock-row rungs are guards (their lock outlives the transaction) around the plain
 * read-check-write, and unsafe: one wedges, the other lets a second holder in. */
static void test_optimistic_and_lockrow_rows(void **state)
{
    const mode *opt = modes_find("pg-optimistic");
    const mode *row = modes_find("pg-lockrow");
    const mode *ttl = modes_find("pg-lockrow-ttl");
    const mode *none = modes_find("none");

    (void)state;
    assert_non_null(opt);
    assert_true(opt->safe);
    assert_non_null(opt->tx);
    assert_ptr_equal(opt->enter, none->enter);
    assert_ptr_equal(opt->leave, none->leave);
    for (int i = 0; i < 2; i++) {
        const mode *m = i == 0 ? row : ttl;
        assert_non_null(m);
        assert_false(m->safe);
        assert_null(m->tx);
        assert_ptr_not_equal(m->enter, none->enter);
        assert_ptr_not_equal(m->leave, none->leave);
    }
    assert_ptr_not_equal(row->enter, ttl->enter); /* one with an expiry, one without */
    assert_non_null(strstr(ttl->summary, "second holder"));
    assert_non_null(strstr(row->summary, "lock_timeout"));
}

/* The cart modes: the safe ones take their locks in one order (sorted), the deadlock rungs
 * as listed and unsafe; local names its stripes, so that a cart takes a shared one once; a
 * batched or sharded mode takes no carts (their paths sell one goods). */
static void test_cart_rows(void **state)
{
    static const char *const sorted[] = {"none", "local", "redis", "pg-for-update", "pg-atomic"};
    static const char *const as_listed[] = {"multi-naive", "pg-multi-naive"};
    size_t n = 0;
    const mode *all = modes_all(&n);

    (void)state;
    for (size_t i = 0; i < sizeof(sorted) / sizeof(sorted[0]); i++)
        assert_int_equal(modes_find(sorted[i])->cart, MODE_CART_SORTED);
    for (size_t i = 0; i < sizeof(as_listed) / sizeof(as_listed[0]); i++) {
        assert_int_equal(modes_find(as_listed[i])->cart, MODE_CART_AS_LISTED);
        assert_false(modes_find(as_listed[i])->safe);
    }
    assert_non_null(modes_find("local")->lock_of);
    assert_true(modes_find("local")->lock_of(7) == modes_find("local")->lock_of(7 + 256));
    assert_non_null(modes_find("pg-atomic")->tx->take_cart);
    /* multi-naive is the redis mode's lock (its own file, modes/multi_naive.c, takes it with
     * the same lease and fence): a single deduct is redis's. */
    assert_ptr_equal(modes_find("multi-naive")->still_held, modes_find("redis")->still_held);
    assert_ptr_equal(modes_find("multi-naive")->leave, modes_find("redis")->leave);
    for (size_t i = 0; i < n; i++)
        if (all[i].batched || all[i].parts != NULL)
            assert_int_equal(all[i].cart, MODE_CART_NONE);
}

static void test_find(void **state)
{
    (void)state;
    assert_non_null(modes_find("redis"));
    assert_string_equal(modes_find("local")->name, "local");
    assert_null(modes_find("REDIS"));
    assert_null(modes_find(""));
    assert_null(modes_find("redis "));
    assert_null(modes_find(NULL));
}

static void test_list_names_every_mode(void **state)
{
    char buf[1024], expected[1024] = "", tiny[8];
    size_t n = 0;
    const mode *all = modes_all(&n);

    (void)state;
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            strcat(expected, ", ");
        strcat(expected, all[i].name);
    }
    assert_string_equal(modes_list(buf, sizeof(buf)), expected);
    assert_true(strncmp(buf, "none, local, redis, ", 20) == 0);
    assert_string_equal(modes_list(tiny, sizeof(tiny)), "none"); /* whole names only */
}

static int env_setup(void **state)
{
    guard_env_options opts = {.lock = NULL, .wait_ms = 100, .lease_ms = LOCK_LEASE_WATCHDOG};
    guard_env *env = NULL;

    if (guard_env_create(&opts, &env) != 0)
        return -1;
    *state = env;
    return 0;
}

static int env_teardown(void **state)
{
    guard_env_destroy(*state);
    return 0;
}

static void test_none_guard_always_enters(void **state)
{
    const mode *none = modes_find("none");
    guard_hold a, b;
    char detail[64];

    assert_int_equal(none->enter(*state, 1, &a, detail, sizeof(detail)), GUARD_OK);
    assert_int_equal(none->enter(*state, 1, &b, detail, sizeof(detail)), GUARD_OK);
    assert_false(a.fenced);
    assert_int_equal(none->still_held(*state, &a), GUARD_OK);
    none->leave(*state, &b);
    none->leave(*state, &a);
}

struct contender {
    guard_env *env;
    int rc;
    double seconds;
};

static void *try_local(void *arg)
{
    struct contender *c = arg;
    const mode *local = modes_find("local");
    guard_hold hold;
    char detail[64];

    c->rc = local->enter(c->env, 7, &hold, detail, sizeof(detail));
    c->seconds = hold.wait_seconds;
    if (c->rc == GUARD_OK)
        local->leave(c->env, &hold);
    return NULL;
}

static void test_local_guard_excludes_and_times_out(void **state)
{
    const mode *local = modes_find("local");
    struct contender other = {.env = *state};
    guard_hold hold;
    pthread_t thread;
    char detail[64];

    assert_int_equal(local->enter(*state, 7, &hold, detail, sizeof(detail)), GUARD_OK);
    pthread_create(&thread, NULL, try_local, &other);
    pthread_join(thread, NULL);
    /* The wait bound is 100 ms: the other thread gave up after it, not before. */
    assert_int_equal(other.rc, GUARD_ERR_TIMEOUT);
    assert_true(other.seconds >= 0.099);
    local->leave(*state, &hold);

    pthread_create(&thread, NULL, try_local, &other);
    pthread_join(thread, NULL);
    assert_int_equal(other.rc, GUARD_OK);
}

static void test_local_guard_lets_other_goods_through(void **state)
{
    const mode *local = modes_find("local");
    guard_hold held, other;
    char detail[64];

    assert_int_equal(local->enter(*state, 7, &held, detail, sizeof(detail)), GUARD_OK);
    /* 8 lands on another stripe than 7, so it does not wait. */
    assert_int_equal(local->enter(*state, 8, &other, detail, sizeof(detail)), GUARD_OK);
    local->leave(*state, &other);
    local->leave(*state, &held);
}

static void test_lockrow_guards_without_a_pool_are_unavailable(void **state)
{
    const char *names[] = {"pg-lockrow", "pg-lockrow-ttl"};

    for (int i = 0; i < 2; i++) {
        guard_hold hold;
        char detail[64] = "";
        assert_int_equal(modes_find(names[i])->enter(*state, 1, &hold, detail, sizeof(detail)),
                         GUARD_ERR_UNAVAILABLE);
        assert_true(strlen(detail) > 0);
    }
}

static void test_redis_guard_without_client_is_unavailable(void **state)
{
    const mode *redis = modes_find("redis");
    guard_hold hold;
    char detail[64] = "";

    assert_int_equal(redis->enter(*state, 1, &hold, detail, sizeof(detail)), GUARD_ERR_UNAVAILABLE);
    assert_true(strlen(detail) > 0);
}

/* A row that needs a backing service (mode.needs) is served only where the guard
 * environment has it: without REDLOCK_NODES, redlock is neither found nor listed. */
static void test_needs_filter_the_served_rows(void **state)
{
    guard_env_options opts = {.wait_ms = 100, .lease_ms = LOCK_LEASE_WATCHDOG};
    guard_env *without = NULL, *with = NULL;
    char list[1024];
    size_t n = 0;
    const mode *all = modes_all(&n);

    (void)state;
    assert_non_null(modes_find("redlock"));
    assert_int_equal(modes_find("redlock")->needs, MODE_NEEDS_REDLOCK);
    assert_false(modes_find("redlock")->safe);

    assert_int_equal(guard_env_create(&opts, &without), 0);
    assert_int_equal(guard_env_has(without), 0);
    assert_null(modes_find_served(without, "redlock"));
    assert_non_null(modes_find_served(without, "redis"));
    assert_null(strstr(modes_list_served(without, list, sizeof(list)), "redlock"));
    assert_true(strncmp(list, "none, local, redis, ", 20) == 0);
    assert_string_equal(modes_missing(modes_find("redlock"), without, list, sizeof(list)),
                        "REDLOCK_NODES");
    assert_string_equal(modes_missing(modes_find("redis"), without, list, sizeof(list)), "");

    opts.redlock_nodes = "127.0.0.1:1"; /* never contacted: clients connect lazily */
    assert_int_equal(guard_env_create(&opts, &with), 0);
    assert_int_equal(guard_env_has(with), MODE_NEEDS_REDLOCK);
    assert_ptr_equal(modes_find_served(with, "redlock"), modes_find("redlock"));
    assert_non_null(strstr(modes_list_served(with, list, sizeof(list)), "redlock"));
    assert_string_equal(modes_missing(modes_find("redlock"), with, list, sizeof(list)), "");

    /* Every row without needs is served by both. */
    for (size_t i = 0; i < n; i++) {
        if (all[i].needs == 0) {
            assert_true(modes_served(&all[i], without));
            assert_true(modes_served(&all[i], with));
        }
    }
    guard_env_destroy(with);
    guard_env_destroy(without);
}

/* Guards with an etcd client: a replica told ETCD_ENDPOINT. The client connects lazily, so
 * no etcd is needed at this address (port 9, where nothing listens on loopback). */
static guard_env *env_with_etcd(void)
{
    guard_env_options opts = {.lock = NULL, .wait_ms = 100, .lease_ms = LOCK_LEASE_WATCHDOG};
    guard_env *env = NULL;

    opts.etcd_endpoint = "http://127.0.0.1:9";
    assert_int_equal(guard_env_create(&opts, &env), 0);
    return env;
}

/* etcd is served only by a replica with an etcd client (ETCD_ENDPOINT), like redlock. */
static void test_etcd_is_served_only_with_an_etcd_client(void **state)
{
    guard_env *with = NULL, *without = NULL;
    guard_env_options plain = {.lock = NULL, .wait_ms = 100, .lease_ms = LOCK_LEASE_WATCHDOG};
    const mode *etcd = modes_find("etcd");
    char buf[1024];

    (void)state;
    assert_non_null(etcd); /* the build knows it */
    assert_true(etcd->safe);
    assert_int_equal(etcd->needs, MODE_NEEDS_ETCD);
    assert_null(etcd->tx);

    assert_int_equal(guard_env_create(&plain, &without), 0);
    with = env_with_etcd();

    assert_null(modes_find_served(without, "etcd"));
    assert_false(modes_served(etcd, without));
    assert_null(strstr(modes_list_served(without, buf, sizeof(buf)), "etcd"));
    assert_string_equal(modes_missing(etcd, without, buf, sizeof(buf)), "ETCD_ENDPOINT");
    assert_ptr_equal(modes_find_served(without, "redis"), modes_find("redis"));

    assert_int_equal(guard_env_has(with), MODE_NEEDS_ETCD);
    assert_ptr_equal(modes_find_served(with, "etcd"), etcd);
    assert_non_null(strstr(modes_list_served(with, buf, sizeof(buf)), "etcd"));
    assert_null(modes_find_served(with, "redlock")); /* each need is its own */

    guard_env_destroy(with);
    guard_env_destroy(without);
}

/* zookeeper likewise, with a ZooKeeper client (ZOOKEEPER_HOSTS): it connects lazily, so no
 * server is needed at this address either. */
static void test_zookeeper_is_served_only_with_a_zookeeper_client(void **state)
{
    guard_env *with = NULL, *without = NULL;
    guard_env_options plain = {.lock = NULL, .wait_ms = 100, .lease_ms = LOCK_LEASE_WATCHDOG};
    guard_env_options opts = plain;
    const mode *zk = modes_find("zookeeper");
    char buf[1024];

    (void)state;
    assert_non_null(zk);
    assert_true(zk->safe);
    assert_int_equal(zk->needs, MODE_NEEDS_ZOOKEEPER);
    assert_null(zk->tx);

    opts.zookeeper_hosts = "127.0.0.1:9";
    assert_int_equal(guard_env_create(&plain, &without), 0);
    assert_int_equal(guard_env_create(&opts, &with), 0);

    assert_null(modes_find_served(without, "zookeeper"));
    assert_null(strstr(modes_list_served(without, buf, sizeof(buf)), "zookeeper"));
    assert_string_equal(modes_missing(zk, without, buf, sizeof(buf)), "ZOOKEEPER_HOSTS");
    assert_int_equal(guard_env_has(with), MODE_NEEDS_ZOOKEEPER);
    assert_ptr_equal(modes_find_served(with, "zookeeper"), zk);
    assert_non_null(strstr(modes_list_served(with, buf, sizeof(buf)), "zookeeper"));
    assert_null(modes_find_served(with, "etcd")); /* each need is its own */

    guard_env_destroy(with);
    guard_env_destroy(without);
}

static void test_zookeeper_guard_without_client_is_unavailable(void **state)
{
    const mode *zk = modes_find("zookeeper");
    guard_hold hold;
    char detail[64] = "";

    assert_int_equal(zk->enter(*state, 1, &hold, detail, sizeof(detail)), GUARD_ERR_UNAVAILABLE);
    assert_true(strlen(detail) > 0);
}

static void test_etcd_guard_without_client_is_unavailable(void **state)
{
    const mode *etcd = modes_find("etcd");
    guard_hold hold;
    char detail[64] = "";

    /* Reached only if a caller skipped modes_find_served: a 503, not a crash. */
    assert_int_equal(etcd->enter(*state, 1, &hold, detail, sizeof(detail)), GUARD_ERR_UNAVAILABLE);
    assert_true(strlen(detail) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safe_means_two_replicas_cannot_both_hold),
        cmocka_unit_test(test_every_row_answers_without_its_server),
        cmocka_unit_test(test_pg_rungs_are_safe_shapes_without_a_guard),
        cmocka_unit_test(test_optimistic_and_lockrow_rows),
        cmocka_unit_test(test_cart_rows),
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_list_names_every_mode),
        cmocka_unit_test(test_needs_filter_the_served_rows),
        cmocka_unit_test_setup_teardown(test_none_guard_always_enters, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(test_local_guard_excludes_and_times_out, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_local_guard_lets_other_goods_through, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_redis_guard_without_client_is_unavailable, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_lockrow_guards_without_a_pool_are_unavailable,
                                        env_setup, env_teardown),
        cmocka_unit_test(test_etcd_is_served_only_with_an_etcd_client),
        cmocka_unit_test_setup_teardown(test_etcd_guard_without_client_is_unavailable, env_setup,
                                        env_teardown),
        cmocka_unit_test(test_zookeeper_is_served_only_with_a_zookeeper_client),
        cmocka_unit_test_setup_teardown(test_zookeeper_guard_without_client_is_unavailable,
                                        env_setup, env_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
