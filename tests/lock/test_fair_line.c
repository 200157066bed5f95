/*
 * test_fair_line.c - the line of waiters shared by all clients (the fair lock across
 * processes), against a real redis-server: arrival order whatever the client, a dead
 * waiter skipped, a waiter that leaves, the gap of a hand-off.
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

/* ---- the line shared by all clients (the fair lock across processes) ---- */

static lock_client *new_client_fair(bool fair, int64_t liveness_ms)
{
    lock_options o;
    lock_client *c = NULL;

    lock_options_init(&o);
    o.redis_port = g_state.port;
    o.fair = fair;
    if (liveness_ms > 0)
        o.waiter_liveness_ms = liveness_ms;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

/* Waits until the line of `lock` holds `want` waiters (ZCARD of "<lock>:waiters"). */
static bool wait_line(const char *lock, long long want, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * MS;

    while (redis_int("ZCARD %s:waiters", lock) != want) {
        if (now_ns() >= until)
            return false;
        sleep_ms(2);
    }
    return true;
}

/* Redis' clock in ms, as the scripts read it. */
static long long redis_now_ms(void)
{
    redisReply *r = redis_cmd("TIME");
    long long ms = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    if (r != NULL)
        freeReplyObject(r);
    return ms;
}

#define LINE_WAITERS 6

/*
 * Three clients stand for three processes (each has its own process id, subscriber and
 * pool). Six waiters queue in a known order, three from one client first: the order that
 * wins without the line is one waiter per client per release, whoever's script reaches
 * Redis first (the first client's second waiter would then come after the others' first).
 * With the line, the lock goes in arrival order whatever the client, which the tokens show:
 * each waiter takes and gives back the lock at once, so tokens grow in the order served.
 */
static void test_fair_across_clients(void **state)
{
    static const int client_of[LINE_WAITERS] = {0, 0, 0, 1, 2, 0};
    lock_client *c[3];
    bg_call b[LINE_WAITERS];

    (void)state;
    for (int i = 0; i < 3; i++)
        c[i] = new_client_fair(true, 0);
    assert_int_equal(lock_try_lock(g_state.client, "t:line", 0, 10000, NULL), LOCK_OK);
    for (int i = 0; i < LINE_WAITERS; i++) {
        b[i] = (bg_call){.c = c[client_of[i]],
                         .name = "t:line",
                         .wait_ms = 10000,
                         .lease_ms = 10000,
                         .unlock_after = true};
        bg_start(&b[i]);
        assert_true(wait_line("t:line", i + 1, 3000)); /* in line before the next comes */
    }
    assert_int_equal(lock_unlock(g_state.client, "t:line"), LOCK_OK);
    for (int i = 0; i < LINE_WAITERS; i++) {
        bg_join(&b[i]);
        assert_int_equal(b[i].rc, LOCK_OK);
        assert_int_equal(b[i].unlock_rc, LOCK_OK);
    }
    for (int i = 1; i < LINE_WAITERS; i++) {
        print_message("line: waiter %d (client %d) token +%lld\n", i, client_of[i],
                      (long long)(b[i].token - b[0].token));
        assert_true(b[i].token > b[i - 1].token); /* served in arrival order */
    }
    assert_int_equal(redis_int("EXISTS t:line:waiters"), 0); /* an empty line is no key */
    for (int i = 0; i < 3; i++)
        lock_client_destroy(c[i]);
}

/*
 * A waiter whose process died (here: an entry written by hand, as its last call would have
 * left it) keeps its place only until its liveness lapses: a free lock waits for it that
 * long, no longer. A single try (wait 0) does not overtake it.
 */
static void test_fair_dead_waiter(void **state)
{
    lock_client *c = new_client_fair(true, 300);
    long long now_ms = redis_now_ms();
    int64_t start, waited_ms;

    (void)state;
    assert_true(now_ms > 0);
    assert_int_equal(redis_int("ZADD t:ghost:waiters 1 ghost:1"), 1);
    assert_int_equal(redis_int("ZADD t:ghost:waiters:until %lld ghost:1", now_ms + 400), 1);
    assert_int_equal(lock_try_lock(c, "t:ghost", 0, 10000, NULL), LOCK_ERR_TIMEOUT);
    start = now_ns();
    assert_int_equal(lock_try_lock(c, "t:ghost", 3000, 10000, NULL), LOCK_OK);
    waited_ms = (now_ns() - start) / MS;
    print_message("line: a dead waiter held a free lock up for %lld ms\n", (long long)waited_ms);
    /* It did wait for the ghost's place to lapse: by Redis' clock, which is the one the line
     * is judged by (on a busy machine the calls above may use up part of the 400 ms, so the
     * wait measured here can be shorter). */
    assert_true(redis_now_ms() >= now_ms + 400);
    assert_true(waited_ms < 1500); /* and no longer than the lapse plus a keep-place period */
    assert_int_equal(redis_int("EXISTS t:ghost:waiters"), 0);
    assert_int_equal(lock_unlock(c, "t:ghost"), LOCK_OK);

    /* A place with no liveness at all (its end lost, or written by something else) counts as
     * lapsed: the next take drops it and goes on, with no error and no wait. */
    assert_int_equal(redis_int("ZADD t:ghost:waiters 1 orphan:1"), 1);
    start = now_ns();
    assert_int_equal(lock_try_lock(c, "t:ghost", 3000, 10000, NULL), LOCK_OK);
    assert_true(now_ns() - start < 200 * MS);
    assert_int_equal(redis_int("EXISTS t:ghost:waiters"), 0);
    assert_int_equal(lock_unlock(c, "t:ghost"), LOCK_OK);
    lock_client_destroy(c);
}

/*
 * A waiter that gives up leaves the line at once (leave.lua): the next waiter gets the lock
 * as soon as it is released, not a liveness later. A single try never joins the line, and a
 * client with fair = false does not either.
 */
static void test_fair_leave(void **state)
{
    lock_client *other = new_client_fair(true, 1500);
    lock_client *unfair = new_client_fair(false, 0);
    bg_call next = {
        .c = other, .name = "t:leave", .wait_ms = 5000, .lease_ms = 10000, .unlock_after = true};
    bg_call plain = {.c = unfair, .name = "t:leave", .wait_ms = 150, .lease_ms = 10000};
    int64_t released;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:leave", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(other_try_lock(other, "t:leave", 0, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("EXISTS t:leave:waiters"), 0);
    bg_start(&plain);
    bg_join(&plain);
    assert_int_equal(plain.rc, LOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("EXISTS t:leave:waiters"), 0);

    /* In line, then out of it when its 200 ms run out. */
    assert_int_equal(other_try_lock(other, "t:leave", 200, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("EXISTS t:leave:waiters"), 0);

    bg_start(&next);
    assert_true(wait_line("t:leave", 1, 3000));
    released = now_ns();
    assert_int_equal(lock_unlock(g_state.client, "t:leave"), LOCK_OK);
    bg_join(&next);
    assert_int_equal(next.rc, LOCK_OK);
    print_message("line: taken %.1f ms after the release\n",
                  (double)(next.done_ns - released) / 1e6);
    assert_true(next.done_ns - released < 400 * MS); /* a lapse would take 1000+ ms */
    lock_client_destroy(other);
    lock_client_destroy(unfair);
}

/*
 * The hand-off's gap (lock_last_handoff_us): a take from a release to the head of the line
 * says how long the lock served nobody, from the release (Redis' clock) to the take (this
 * host's), and that fits inside the time the test saw from the release's start to the
 * take's end; any other take says -1.
 */
static void test_handoff_gap(void **state)
{
    lock_client *other = new_client_fair(true, 1500);
    bg_call next = {
        .c = other, .name = "t:gap", .wait_ms = 5000, .lease_ms = 10000, .unlock_after = true};
    int64_t released;
    long long base;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:gap", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(lock_last_handoff_us(), -1); /* free, nobody in line */
    assert_int_equal(lock_try_lock(g_state.client, "t:gap", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(lock_last_handoff_us(), -1); /* reentrant */
    assert_int_equal(lock_unlock(g_state.client, "t:gap"), LOCK_OK);
    base = evalsha_calls();
    bg_start(&next);
    assert_true(wait_evalsha(base + 2)); /* asleep: a release now grants it the lock */
    released = now_ns();
    assert_int_equal(lock_unlock(g_state.client, "t:gap"), LOCK_OK);
    bg_join(&next);
    assert_int_equal(next.rc, LOCK_OK);
    print_message("hand-off: %lld us from the release, %.0f us seen from here\n",
                  (long long)next.handoff_us, (double)(next.done_ns - released) / 1e3);
    assert_true(next.handoff_us >= 0);
    assert_true(next.handoff_us * 1000 <= next.done_ns - released + 2 * MS);
    /* a take after it, with nobody in line, measures nothing */
    assert_int_equal(lock_try_lock(g_state.client, "t:gap", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(lock_last_handoff_us(), -1);
    assert_int_equal(lock_unlock(g_state.client, "t:gap"), LOCK_OK);
    lock_client_destroy(other);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fair_across_clients, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fair_dead_waiter, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fair_leave, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_handoff_gap, case_setup, case_teardown),
    };

    return lock_test_main("test_fair_line", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
