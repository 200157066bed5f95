/*
 * test_local.c - the local guard's line (service/guards/modes/local.c): turns in arrival order, no
 * barging past the line, a waiter that gives up in the middle of it, and hand-offs racing
 * time-outs without the stripe ever being lost. Threads of one process, no server; run
 * under ThreadSanitizer too (tests/tsan.sh).
 *
 * White-box: it includes service/guards/guards.h for guard_local_waiting (to know a thread has
 * joined the line before the next one starts, rather than sleeping and hoping) and for the
 * layout of guard_env, to give one thread a shorter wait bound than the others on the same
 * stripes (a copy of the environment that shares its stripes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "service/guards/guards.h"
#include "service/guards/modes.h"

#define GOODS 7
#define LINE 8

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int env_setup(void **state)
{
    /* A long bound: in the order tests nobody may give up unless the test says so. */
    guard_env_options opts = {.lock = NULL, .wait_ms = 10000, .lease_ms = LOCK_LEASE_WATCHDOG};
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

/* Who got the stripe, in the order they got it. */
struct turns {
    pthread_mutex_t mu;
    int order[LINE + 2];
    int n;
};

static void turns_record(struct turns *t, int id)
{
    pthread_mutex_lock(&t->mu);
    if (t->n < (int)(sizeof(t->order) / sizeof(t->order[0])))
        t->order[t->n] = id;
    t->n++;
    pthread_mutex_unlock(&t->mu);
}

struct waiter {
    guard_env *env;
    struct turns *turns;
    int id;
    pthread_mutex_t *gate; /* NULL, or held by the test for as long as it must keep the stripe */
    int rc;
    double seconds;
};

/* Enters GOODS's stripe, records its turn, leaves. */
static void *take_turn(void *arg)
{
    struct waiter *w = arg;
    guard_hold hold;
    char detail[64];

    w->rc = guard_local_enter(w->env, GOODS, &hold, detail, sizeof(detail));
    w->seconds = hold.wait_seconds;
    if (w->rc == GUARD_OK) {
        turns_record(w->turns, w->id);
        if (w->gate != NULL) {
            pthread_mutex_lock(w->gate);
            pthread_mutex_unlock(w->gate);
        }
        guard_local_leave(w->env, &hold);
    }
    return NULL;
}

/* Waits (bounded) until n requests stand in GOODS's line. */
static void await_line(guard_env *env, int64_t n)
{
    double give_up = now_s() + 10.0;

    while (guard_local_waiting(env, GOODS) != n) {
        if (now_s() > give_up)
            fail_msg("the line stayed at %lld waiters, want %lld",
                     (long long)guard_local_waiting(env, GOODS), (long long)n);
        sched_yield();
    }
}

/*
 * LINE threads join the line one after another, each once the one before is in it; then the
 * holder leaves and at once asks again. The threads are served in the order they came, and
 * the holder, though it asked with the stripe just freed and nobody yet running, after all
 * of them: leave handed the stripe to the head of the line, it did not set it free for
 * whoever is quickest.
 */
static void test_serves_the_line_in_arrival_order(void **state)
{
    guard_env *env = *state;
    struct turns turns = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct waiter w[LINE];
    pthread_t thread[LINE];
    guard_hold hold;
    char detail[64];

    assert_int_equal(guard_local_enter(env, GOODS, &hold, detail, sizeof(detail)), GUARD_OK);
    for (int i = 0; i < LINE; i++) {
        w[i] = (struct waiter){.env = env, .turns = &turns, .id = i};
        pthread_create(&thread[i], NULL, take_turn, &w[i]);
        await_line(env, i + 1);
    }
    guard_local_leave(env, &hold);
    assert_int_equal(guard_local_enter(env, GOODS, &hold, detail, sizeof(detail)), GUARD_OK);
    turns_record(&turns, LINE); /* the holder that came back */
    guard_local_leave(env, &hold);
    for (int i = 0; i < LINE; i++) {
        pthread_join(thread[i], NULL);
        assert_int_equal(w[i].rc, GUARD_OK);
    }
    assert_int_equal(turns.n, LINE + 1);
    for (int i = 0; i <= LINE; i++)
        if (turns.order[i] != i)
            fail_msg("turn %d went to %d, want %d (%s)", i, turns.order[i], i,
                     turns.order[0] == LINE ? "the holder barged past the line"
                                            : "the line was not served in arrival order");
}

/*
 * A try-once (a wait bound of 0) just after a leave, with someone in line: busy, though the
 * waiter may not have run yet. The stripe is the waiter's already (it keeps it until the
 * try is over, so that a try after its turn cannot pass for one before it).
 */
static void test_try_once_does_not_barge_past_the_line(void **state)
{
    guard_env *env = *state;
    guard_env at_once = *env; /* the same stripes, no wait */
    struct turns turns = {.mu = PTHREAD_MUTEX_INITIALIZER};
    pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
    struct waiter w = {.env = env, .turns = &turns, .id = 0, .gate = &gate};
    guard_hold hold, barger;
    pthread_t thread;
    char detail[64];

    at_once.wait_ms = 0;
    pthread_mutex_lock(&gate);
    assert_int_equal(guard_local_enter(env, GOODS, &hold, detail, sizeof(detail)), GUARD_OK);
    pthread_create(&thread, NULL, take_turn, &w);
    await_line(env, 1);
    guard_local_leave(env, &hold);
    int rc = guard_local_enter(&at_once, GOODS, &barger, detail, sizeof(detail));
    if (rc == GUARD_OK)
        guard_local_leave(&at_once, &barger);
    pthread_mutex_unlock(&gate);
    pthread_join(thread, NULL);
    assert_int_equal(rc, GUARD_ERR_TIMEOUT);
    assert_int_equal(w.rc, GUARD_OK);
    assert_int_equal(turns.n, 1);
}

/*
 * Three in line, the middle one with a 500 ms bound: it gives up after its bound (not before),
 * leaves the line without holding up the others, and the first and the last are then served
 * in their order. The stripe is free at the end. The bound must outlast the set-up: the third
 * joins only after the middle one is in line, and with 50 ms a clean-clone run of the whole
 * suite once saw the middle one give up before the third came (the line never held three).
 */
static void test_a_waiter_timing_out_mid_line_leaves_it(void **state)
{
    guard_env *env = *state;
    guard_env shorter = *env; /* the same stripes, a short bound */
    struct turns turns = {.mu = PTHREAD_MUTEX_INITIALIZER};
    struct waiter w[3];
    pthread_t thread[3];
    guard_hold hold;
    char detail[64];

    shorter.wait_ms = 500;
    assert_int_equal(guard_local_enter(env, GOODS, &hold, detail, sizeof(detail)), GUARD_OK);
    for (int i = 0; i < 3; i++) {
        w[i] = (struct waiter){.env = i == 1 ? &shorter : env, .turns = &turns, .id = i};
        pthread_create(&thread[i], NULL, take_turn, &w[i]);
        await_line(env, i + 1);
    }
    pthread_join(thread[1], NULL);
    assert_int_equal(w[1].rc, GUARD_ERR_TIMEOUT);
    assert_true(w[1].seconds >= 0.499);
    assert_int_equal(guard_local_waiting(env, GOODS), 2);
    guard_local_leave(env, &hold);
    pthread_join(thread[0], NULL);
    pthread_join(thread[2], NULL);
    assert_int_equal(w[0].rc, GUARD_OK);
    assert_int_equal(w[2].rc, GUARD_OK);
    assert_int_equal(turns.n, 2);
    assert_int_equal(turns.order[0], 0);
    assert_int_equal(turns.order[1], 2);
    assert_int_equal(guard_local_waiting(env, GOODS), 0);
    assert_int_equal(guard_local_enter(env, GOODS, &hold, detail, sizeof(detail)), GUARD_OK);
    guard_local_leave(env, &hold);
}

#define RACERS 6
#define ROUNDS 2000

struct racer {
    guard_env *env;
    int64_t *inside; /* touched only under the stripe: a race here is a hole in exclusion */
    int64_t entered;
    int64_t timed_out;
};

/* (cmocka's asserts belong to the main thread: the racers count, the test asserts.) */

static void *race(void *arg)
{
    struct racer *r = arg;

    for (int i = 0; i < ROUNDS; i++) {
        guard_hold hold;
        char detail[64];
        int rc = guard_local_enter(r->env, GOODS, &hold, detail, sizeof(detail));

        if (rc == GUARD_OK) {
            (*r->inside)++;
            r->entered++;
            if (i % 8 == 0) /* now and then, hold long enough for the line's bounds to pass */
                nanosleep(&(struct timespec){.tv_nsec = 200 * 1000}, NULL);
            else if (i % 2 == 0)
                sched_yield(); /* or across a reschedule */
            guard_local_leave(r->env, &hold);
        } else if (rc == GUARD_ERR_TIMEOUT) {
            r->timed_out++;
        } /* else: counted by neither, which the sum below finds */
    }
    return NULL;
}

/*
 * Hand-offs racing time-outs: RACERS threads take one stripe ROUNDS times each with a 1 ms
 * bound, so that waiters give up in every position of the line, some just as the stripe is
 * handed to them. Every entry is exclusive (the counter, unguarded but for the stripe, adds
 * up; ThreadSanitizer watches it), and at the end nobody is in line and the stripe is free:
 * no hand-off went to a waiter that had left, none was dropped.
 */
static void test_hand_offs_racing_timeouts_lose_no_stripe(void **state)
{
    guard_env *env = *state;
    guard_env brief = *env;
    struct racer r[RACERS];
    pthread_t thread[RACERS];
    int64_t inside = 0, entered = 0, timed_out = 0;
    guard_hold hold;
    char detail[64];

    brief.wait_ms = 1;
    for (int i = 0; i < RACERS; i++) {
        r[i] = (struct racer){.env = &brief, .inside = &inside};
        pthread_create(&thread[i], NULL, race, &r[i]);
    }
    for (int i = 0; i < RACERS; i++) {
        pthread_join(thread[i], NULL);
        entered += r[i].entered;
        timed_out += r[i].timed_out;
    }
    assert_int_equal(entered + timed_out, RACERS * ROUNDS);
    assert_int_equal(inside, entered);
    assert_int_equal(guard_local_waiting(env, GOODS), 0);
    brief.wait_ms = 0;
    assert_int_equal(guard_local_enter(&brief, GOODS, &hold, detail, sizeof(detail)), GUARD_OK);
    guard_local_leave(&brief, &hold);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_serves_the_line_in_arrival_order, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_try_once_does_not_barge_past_the_line, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_a_waiter_timing_out_mid_line_leaves_it, env_setup,
                                        env_teardown),
        cmocka_unit_test_setup_teardown(test_hand_offs_racing_timeouts_lose_no_stripe, env_setup,
                                        env_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
