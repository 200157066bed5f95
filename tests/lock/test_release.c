/*
 * test_release.c - the Redis lock when replies are lost or connections run out, against a
 * real redis-server (DEBUG SLEEP makes a reply come too late): a lost reply on a reentrant
 * take, on a first take, on a release; a release with the pool exhausted (the reserved
 * release connection).
 *
 * The server, the fixtures and the tools: tests/lock/lock_support.h.
 */
#include "tests/lock/lock_support.h"

#include "lock/pool.h" /* white-box: the reserved release connection */

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- lost replies, an exhausted pool, the maximum hold ---- */

/* DEBUG SLEEP on a connection of its own, from a thread: Redis runs nothing else meanwhile,
 * so a command sent now runs after the sleep, and its reply comes too late for a client
 * whose command timeout is shorter. */
typedef struct sleeper {
    int port;
    double seconds;
    pthread_t thread;
} sleeper;

static void *sleeper_main(void *arg)
{
    sleeper *z = arg;
    redisContext *ctx = redisConnect("127.0.0.1", z->port);

    if (ctx != NULL && ctx->err == 0) {
        redisReply *r = redisCommand(ctx, "DEBUG SLEEP %f", z->seconds);
        if (r != NULL)
            freeReplyObject(r);
    }
    if (ctx != NULL)
        redisFree(ctx);
    return NULL;
}

/* Starts a DEBUG SLEEP of `seconds` and returns once Redis is asleep: a PING on a connection
 * of its own gets no answer within 50 ms (however slow the machine is to start the thread). */
static void sleeper_start(sleeper *z, double seconds)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 50 * 1000};
    int64_t until = now_ns() + 2000 * MS;
    bool asleep = false;

    z->port = g_state.port;
    z->seconds = seconds;
    assert_int_equal(pthread_create(&z->thread, NULL, sleeper_main, z), 0);
    while (!asleep && now_ns() < until) {
        redisContext *probe = redisConnectWithTimeout("127.0.0.1", g_state.port, tv);
        redisReply *r = NULL;
        bool connected = probe != NULL && probe->err == 0 && redisSetTimeout(probe, tv) == REDIS_OK;

        if (connected)
            r = redisCommand(probe, "PING");
        asleep = connected && r == NULL; /* connected, and no answer in time */
        if (r != NULL)
            freeReplyObject(r);
        if (probe != NULL)
            redisFree(probe);
        if (!asleep)
            sleep_ms(5);
    }
    assert_true(asleep);
}

static lock_client *client_with_timeout(int command_timeout_ms)
{
    return new_client_with(0, command_timeout_ms);
}

/* The hold count Redis keeps for the only owner of `name` (-1: not held). */
static long long redis_hold_count(const char *name)
{
    redisReply *r = redis_cmd("HVALS %s", name);
    long long n = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1)
        n = atoll(r->element[0]->str);
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

/* A command that gets no answer within the command timeout fails, and its error says so:
 * hiredis alone reports the read's errno ("Resource temporarily unavailable"), which a
 * replica's 503 unavailable would pass on to the client. */
static void test_timeout_said_as_one(void **state)
{
    lock_client *c = client_with_timeout(200);
    sleeper z;
    int rc;

    (void)state;
    assert_int_equal(lock_ping(c), LOCK_OK);
    sleeper_start(&z, 0.5);
    rc = lock_ping(c);
    pthread_join(z.thread, NULL);
    assert_int_equal(rc, LOCK_ERR_REDIS);
    if (strstr(lock_last_error(), "PING: no answer within 200 ms") == NULL)
        fail_msg("the error does not say the timeout: %s", lock_last_error());
    /* And says it as a kind, for a caller that words it itself (service/guards/outage.c). */
    int64_t timeout_ms = 0;
    assert_int_equal(lock_last_met(&timeout_ms), LOCK_MET_NO_ANSWER);
    assert_int_equal(timeout_ms, 200);
    assert_int_equal(lock_ping(c), LOCK_OK);
    assert_int_equal(lock_last_met(&timeout_ms), LOCK_MET_OTHER);
    lock_client_destroy(c);
}

/*
 * A reentrant take whose reply is lost: the script ran after the client's timeout (Redis
 * counted 2 holds while the client counts 1). The client gives back what the take may have
 * added (release.lua sets the count to the client's own), so Redis and the client agree
 * again; the holder's one unlock frees the lock. (Before, Redis kept 2 until that unlock.)
 */
static void test_lost_reply_on_acquire(void **state)
{
    lock_client *c = client_with_timeout(200);
    sleeper z;
    int rc;

    (void)state;
    /* The scripts loaded into Redis first (by another client, on another lock): the first
     * take below is then one round trip within its 200 ms, not NOSCRIPT, SCRIPT LOAD and a
     * second EVALSHA, which a loaded machine can stretch past the timeout. */
    assert_int_equal(other_try_lock(g_state.client, "t:warm", 0, true), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:lostacq", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleeper_start(&z, 0.6);
    rc = lock_try_lock(c, "t:lostacq", 0, LOCK_LEASE_WATCHDOG, NULL);
    pthread_join(z.thread, NULL);
    assert_int_equal(rc, LOCK_ERR_REDIS);
    /* The take ran after the sleep, and the give-back after it. */
    sleep_ms(50);
    assert_int_equal(redis_hold_count("t:lostacq"), 1);
    assert_int_equal(lock_is_held(c, "t:lostacq"), LOCK_OK);
    /* The holder gives back the one hold it knows of: the lock is free. */
    assert_int_equal(lock_unlock(c, "t:lostacq"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:lostacq"), 0);
    assert_int_equal(lock_is_held(c, "t:lostacq"), LOCK_ERR_NOT_HELD);
    assert_int_equal(other_try_lock(g_state.client, "t:lostacq", 0, true), LOCK_OK);
    lock_client_destroy(c);
}

/*
 * A first take whose reply is lost, once with an answer to the give-back (the sleep ends
 * before the release's own timeout) and once without: the script ran after the client's
 * timeout, so Redis held a lock that nobody owns. Before, it stayed for a whole lease (30 s
 * with the watchdog) and every other owner timed out; now the release that follows the
 * error frees it as soon as Redis runs it, and another owner takes it at once.
 */
static void test_lost_reply_on_first_acquire(void **state)
{
    static const double sleeps[] = {0.3, 0.6}; /* the release answered; lost as well */
    char name[32];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(sleeps) / sizeof(sleeps[0]); i++) {
        lock_client *c = client_with_timeout(200);
        int64_t t0;
        sleeper z;
        int rc;

        snprintf(name, sizeof(name), "t:lostfirst%zu", i);
        sleeper_start(&z, sleeps[i]);
        t0 = now_ns();
        rc = lock_try_lock(c, name, 0, LOCK_LEASE_WATCHDOG, NULL);
        /* The call's bound: wait 0 plus one command timeout; the give-back that follows the
         * acquire on its connection runs after it (the sleep holds both). */
        assert_true(now_ns() - t0 < 200 * MS + 100 * MS);
        pthread_join(z.thread, NULL);
        assert_int_equal(rc, LOCK_ERR_REDIS);
        sleep_ms(50);
        assert_int_equal(redis_int("EXISTS %s", name), 0);
        assert_int_equal(lock_is_held(c, name), LOCK_ERR_NOT_HELD);
        assert_int_equal(other_try_lock(g_state.client, name, 0, true), LOCK_OK);
        lock_client_destroy(c);
    }
}

/* A release whose reply is lost: the client drops the hold all the same, Redis applied it
 * after the sleep, and the two agree; the last release frees the lock. */
static void test_lost_reply_on_release(void **state)
{
    lock_client *c = client_with_timeout(200);
    sleeper z;
    int rc;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:lostrel", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:lostrel", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleeper_start(&z, 0.6);
    rc = lock_unlock(c, "t:lostrel");
    pthread_join(z.thread, NULL);
    assert_int_equal(rc, LOCK_ERR_REDIS);
    sleep_ms(50);
    assert_int_equal(redis_hold_count("t:lostrel"), 1);
    assert_int_equal(lock_is_held(c, "t:lostrel"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:lostrel"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:lostrel"), 0);
    assert_int_equal(other_try_lock(g_state.client, "t:lostrel", 0, true), LOCK_OK);
    lock_client_destroy(c);
}

/* The pool with every connection out: an acquirer gets LOCK_ERR_BUSY at its deadline, a
 * release gets the reserved connection at once, and a second release waits for it. */
static void test_release_with_the_pool_exhausted(void **state)
{
    lock__conn_address addr;
    lock__conn_config cfg = {&addr, 500, 500};
    lock__pool *p = NULL;
    lock__conn *a = NULL, *b = NULL, *r1 = NULL, *r2 = NULL, *x = NULL;
    int64_t t0;

    (void)state;
    assert_int_equal(lock__conn_address_init(&addr, "127.0.0.1", g_state.port), LOCK_OK);
    assert_int_equal(lock__pool_create(&cfg, 2, &p), LOCK_OK);
    assert_int_equal(lock__pool_borrow(p, now_ns(), &a), LOCK_OK);
    assert_int_equal(lock__pool_borrow(p, now_ns(), &b), LOCK_OK);
    assert_int_equal(lock__pool_in_use(p), 2);
    t0 = now_ns();
    assert_int_equal(lock__pool_borrow(p, t0 + 100 * MS, &x), LOCK_ERR_BUSY);
    assert_true(now_ns() - t0 >= 90 * MS);
    /* The release does not wait. */
    t0 = now_ns();
    assert_int_equal(lock__pool_borrow_for_release(p, t0, &r1), LOCK_OK);
    assert_true(now_ns() - t0 < 50 * MS);
    assert_true(r1 != a && r1 != b);
    /* A second release at once waits for the reserved one, up to its deadline. */
    assert_int_equal(lock__pool_borrow_for_release(p, now_ns() + 50 * MS, &r2), LOCK_ERR_BUSY);
    lock__pool_return(p, r1);
    assert_int_equal(lock__pool_borrow_for_release(p, now_ns(), &r2), LOCK_OK);
    assert_ptr_equal(r2, r1);
    lock__pool_return(p, r2);
    /* With a pooled connection free, a release takes that one. */
    lock__pool_return(p, a);
    assert_int_equal(lock__pool_borrow_for_release(p, now_ns(), &r1), LOCK_OK);
    assert_ptr_equal(r1, a);
    lock__pool_return(p, r1);
    lock__pool_return(p, b);
    assert_int_equal(lock__pool_in_use(p), 0);
    lock__pool_destroy(p);
    lock__conn_address_destroy(&addr);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_timeout_said_as_one, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_reply_on_acquire, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_reply_on_first_acquire, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_reply_on_release, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_release_with_the_pool_exhausted, case_setup,
                                        case_teardown),
    };

    return lock_test_main("test_release", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
