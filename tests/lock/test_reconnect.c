/*
 * test_reconnect.c - the Redis lock's connections, against a real redis-server:
 *   subscriber          the pub/sub connection killed: waiters still woken by a release
 *   subscriber idle     one connection kept through quiet times (PING), reused later
 *   Redis down          try_lock errs within the timeout; after a restart all works again
 *
 * The server, the fixtures and the tools: tests/lock/lock_support.h.
 */
#include "tests/lock/lock_support.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/* ---- the subscriber connection ---- */

static void test_subscriber_reconnect(void **state)
{
    lock_client *c = g_state.client;
    bg_call waiter = {
        .c = c, .name = "t:sub", .wait_ms = 5000, .lease_ms = 10000, .unlock_after = true};
    redisReply *r;
    long long subscribers;
    int64_t released;
    int rc;

    (void)state;
    /* A waiter, woken by a release after its subscription was killed and remade. */
    assert_int_equal(lock_try_lock(c, "t:sub", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    bg_start(&waiter);
    assert_true(wait_numsub("t:sub:released", 1, 2000));
    r = redis_cmd("CLIENT KILL TYPE pubsub");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_true(wait_numsub("t:sub:released", 1, 2000));
    released = now_ns();
    assert_int_equal(lock_unlock(c, "t:sub"), LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    /* Woken by the message: far sooner than its 5 s deadline or the 30 s TTL. */
    assert_true(waiter.done_ns - released < 250 * MS);
    print_message("subscriber: resubscribed waiter acquired %.2f ms after the release\n",
                  (double)(waiter.done_ns - released) / 1e6);

    /* A release while the subscriber is disconnected is not heard; when it is back and
     * subscribed again it wakes a waiter to look, instead of leaving it asleep until its
     * deadline. To hold the subscriber off for the release, Redis refuses new connections
     * (maxclients = those open now, minus the subscriber's) until the lock is released. */
    assert_int_equal(lock_try_lock(c, "t:sub", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    waiter.rc = waiter.unlock_rc = -100;
    waiter.wait_ms = 10000;
    bg_start(&waiter);
    assert_true(wait_numsub("t:sub:released", 1, 2000));
    save_maxclients();
    r = redis_cmd("CONFIG SET maxclients %lld", connected_clients() - 1);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redis_cmd("CLIENT KILL TYPE pubsub");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    sleep_ms(100); /* the subscriber tries, and is refused, a few times */
    subscribers = numsub("t:sub:released");
    released = now_ns();
    rc = lock_unlock(c, "t:sub");
    /* Back to the value read before, now (the subscriber must reconnect), and by the
     * teardown should an assertion above have failed. */
    r = redis_cmd("CONFIG SET maxclients %s", g_state.maxclients);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    g_state.maxclients[0] = '\0';
    assert_int_equal(subscribers, 0);
    assert_int_equal(rc, LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    /* Reconnecting pauses at most 1 s between tries; the waiter's deadline is 10 s. */
    assert_true(waiter.done_ns - released < 2000 * MS);
    print_message("subscriber: release while disconnected, waiter acquired after %.1f ms\n",
                  (double)(waiter.done_ns - released) / 1e6);

    /* With no waiter left, the channel is unsubscribed after lingering about a second. */
    assert_true(wait_numsub("t:sub:released", 0, 3000));
}

/*
 * The subscriber keeps one connection through quiet times: the channel is dropped a second
 * after its last waiter left, the idle link is PINGed after 5 s, and a later wait
 * subscribes again on the same connection and is woken by the release.
 */
static void test_subscriber_idle(void **state)
{
    lock_client *c = g_state.client;
    bg_call waiter = {
        .c = c, .name = "t:idle", .wait_ms = 10000, .lease_ms = 10000, .unlock_after = true};
    long long first_id, second_id;
    int64_t released, start;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:idle", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    bg_start(&waiter);
    assert_true(wait_numsub("t:idle:released", 1, 2000));
    first_id = pubsub_client_id();
    assert_int_equal(lock_unlock(c, "t:idle"), LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);

    /* Unsubscribed about 1 s after the waiter left; PINGed 5 s after that. */
    start = now_ns();
    while (!client_list_has("cmd=ping") && now_ns() - start < 8000 * MS)
        sleep_ms(100);
    assert_true(client_list_has("cmd=ping"));
    assert_int_equal(numsub("t:idle:released"), 0);

    assert_int_equal(lock_try_lock(c, "t:idle", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    waiter.rc = waiter.unlock_rc = -100;
    bg_start(&waiter);
    assert_true(wait_numsub("t:idle:released", 1, 2000));
    second_id = pubsub_client_id();
    released = now_ns();
    assert_int_equal(lock_unlock(c, "t:idle"), LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    assert_true(first_id > 0);
    assert_int_equal(second_id, first_id); /* never reconnected */
    assert_true(waiter.done_ns - released < 250 * MS);
}

/* ---- Redis down ---- */

static void test_redis_down(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);
    int64_t start, took, before = 0, after = 0;
    int rc;

    (void)state;
    /* Push the counter ahead a little, as a busy lock would. */
    for (int i = 0; i < 20; i++) {
        assert_int_equal(lock_try_lock(c, "t:down:held", 0, 1000, &before), LOCK_OK);
        assert_int_equal(lock_unlock(c, "t:down:held"), LOCK_OK);
    }
    assert_int_equal(lock_try_lock(c, "t:down:held", 0, LOCK_LEASE_WATCHDOG, &before), LOCK_OK);
    assert_int_equal(redis_server_stop(g_state.srv), 0);

    start = now_ns();
    rc = lock_try_lock(c, "t:down", 1000, LOCK_LEASE_WATCHDOG, NULL);
    took = now_ns() - start;
    assert_int_equal(rc, LOCK_ERR_REDIS);
    assert_true(took <= COMMAND_TIMEOUT_MS * MS);
    assert_true(strlen(lock_last_error()) > 0);
    print_message("redis down: try_lock failed in %.2f ms: %s\n", (double)took / 1e6,
                  lock_last_error());
    assert_int_equal(lock_ping(c), LOCK_ERR_REDIS);
    assert_int_equal(lock_unlock(c, "t:down"), LOCK_ERR_REDIS);
    /* Nothing renews the held lock now: once its lease has passed it counts as lost. */
    sleep_ms(SHORT_LEASE_MS + 50);
    assert_int_equal(lock_is_held(c, "t:down:held"), LOCK_ERR_LOST);

    assert_int_equal(redis_server_restart(g_state.srv), 0);
    /* A restarted Redis is empty (no persistence) and knows no scripts: all works. */
    assert_int_equal(lock_ping(c), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:down", 1000, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:down"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:down"), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:down:held"), LOCK_ERR_LOST);
    assert_int_equal(lock_unlock(c, "t:down:held"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_is_held(c, "t:down:held"), LOCK_ERR_NOT_HELD);
    /* Redis lost the counter with everything else; tokens still grow past the old ones,
     * so a writer fenced with a token from before the restart stays refused. */
    assert_int_equal(lock_try_lock(c, "t:down:held", 0, 1000, &after), LOCK_OK);
    assert_true(after > before);
    assert_int_equal(lock_unlock(c, "t:down:held"), LOCK_OK);
    lock_client_destroy(c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_subscriber_reconnect, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_subscriber_idle, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_redis_down, case_setup, case_teardown),
    };

    return lock_test_main("test_reconnect", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
