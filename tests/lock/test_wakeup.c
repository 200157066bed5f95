/*
 * test_wakeup.c - waiting for the Redis lock, against a real redis-server:
 *   wait bound          try_lock(200 ms) times out in [200 ms, 200 ms + command timeout]
 *   wake-up             16 threads: release -> next acquisition median under 20 ms
 *   fair order          16 queued waiters and a thread barging in: they still acquire in
 *                       the order they queued (the oldest waiter is woken, keeps its place)
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

/* ---- wait bound ---- */

static void test_wait_bound(void **state)
{
    lock_client *c = g_state.client;
    lock_stats st;
    bg_call b = {.c = c, .name = "t:wait", .wait_ms = 200, .lease_ms = 10000};
    int64_t took;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:wait", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    bg_start(&b);
    bg_join(&b);
    took = b.done_ns - b.started_ns;
    assert_int_equal(b.rc, LOCK_ERR_TIMEOUT);
    assert_true(took >= 200 * MS);
    assert_true(took <= (200 + COMMAND_TIMEOUT_MS) * MS);
    lock_get_stats(c, &st);
    assert_int_equal(st.timeouts, 1);
    /* wait 0 tries once and returns at once. */
    b.wait_ms = 0;
    bg_start(&b);
    bg_join(&b);
    assert_int_equal(b.rc, LOCK_ERR_TIMEOUT);
    assert_true(b.done_ns - b.started_ns <= COMMAND_TIMEOUT_MS * MS);
    assert_int_equal(lock_unlock(c, "t:wait"), LOCK_OK);
    print_message("wait bound: try_lock(200 ms) timed out after %.1f ms\n", (double)took / 1e6);
}

/* ---- wake-up ---- */

#define WAKE_THREADS 16
#define WAKE_ROUNDS 40

typedef struct wake_shared {
    lock_client *c;
    _Atomic int64_t last_release_ns; /* set by the holder just before it unlocks */
    _Atomic int last_holder;
    _Atomic int ngaps;
    int64_t gaps[WAKE_THREADS * WAKE_ROUNDS];
    int64_t cross[WAKE_THREADS * WAKE_ROUNDS]; /* gaps where another thread took over */
    _Atomic int ncross;
    _Atomic int errors;
} wake_shared;

typedef struct wake_worker {
    wake_shared *sh;
    int id;
    pthread_t thread;
} wake_worker;

static void *wake_main(void *arg)
{
    wake_worker *w = arg;
    wake_shared *sh = w->sh;

    for (int i = 0; i < WAKE_ROUNDS; i++) {
        int64_t got, prev;
        int rc = lock_try_lock(sh->c, "t:wake", 10000, LOCK_LEASE_WATCHDOG, NULL);

        if (rc != LOCK_OK) {
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        got = now_ns();
        prev = atomic_load(&sh->last_release_ns);
        if (prev != 0) {
            sh->gaps[atomic_fetch_add(&sh->ngaps, 1)] = got - prev;
            if (atomic_load(&sh->last_holder) != w->id)
                sh->cross[atomic_fetch_add(&sh->ncross, 1)] = got - prev;
        }
        atomic_store(&sh->last_holder, w->id);
        atomic_store(&sh->last_release_ns, now_ns());
        if (lock_unlock(sh->c, "t:wake") != LOCK_OK)
            atomic_fetch_add(&sh->errors, 1);
    }
    return NULL;
}

static void test_wakeup(void **state)
{
    static wake_shared sh;
    wake_worker w[WAKE_THREADS];
    int64_t median, p99, cross_median, start, took;
    int ngaps, ncross;

    (void)state;
    memset(&sh, 0, sizeof(sh));
    sh.c = g_state.client;
    atomic_store(&sh.last_holder, -1);
    start = now_ns();
    for (int i = 0; i < WAKE_THREADS; i++) {
        w[i] = (wake_worker){.sh = &sh, .id = i};
        assert_int_equal(pthread_create(&w[i].thread, NULL, wake_main, &w[i]), 0);
    }
    for (int i = 0; i < WAKE_THREADS; i++)
        pthread_join(w[i].thread, NULL);
    took = now_ns() - start;
    assert_int_equal(atomic_load(&sh.errors), 0);
    ngaps = atomic_load(&sh.ngaps);
    ncross = atomic_load(&sh.ncross);
    assert_int_equal(ngaps, WAKE_THREADS * WAKE_ROUNDS - 1);
    assert_true(ncross >= WAKE_THREADS - 1); /* each thread's first turn was handed over */
    median = percentile(sh.gaps, (size_t)ngaps, 50);
    p99 = percentile(sh.gaps, (size_t)ngaps, 99);
    cross_median = percentile(sh.cross, (size_t)ncross, 50);
    print_message("wake-up: %d acquisitions in %.0f ms; release->acquire median %.2f ms, "
                  "p99 %.2f ms; to another thread (%d): median %.2f ms\n",
                  ngaps + 1, (double)took / 1e6, (double)median / 1e6, (double)p99 / 1e6, ncross,
                  (double)cross_median / 1e6);
    assert_true(median < 20 * MS);
    assert_true(cross_median < 20 * MS);
}

/* ---- fair wake-up order ---- */

/*
 * Within one process, waiters are served in the order they started waiting, even when
 * the one whose turn it is loses a race. The scenario is built so that the order is known
 * without reading any clock:
 *   - the main thread holds the lock; FAIR_WAITERS threads start one after the other, and
 *     each is let in only once the previous one is queued: its tries have run in Redis
 *     (INFO commandstats counts them: two for the first waiter, the first and the one after
 *     it subscribed; one for each later waiter, which joins the queue before its only try
 *     since the channel is subscribed already). So the queue order is the start order.
 *   - a "barger" thread of the same process then tries the lock with wait 0 in a loop,
 *     never queueing (a newcomer's first attempt, over and over), in the moments the lock
 *     is free between a release and the next waiter's take.
 *   - the main thread releases; each waiter, once it has the lock, notes its place, holds
 *     the lock FAIR_HOLD_MS and releases it for good.
 * With the line in Redis, the waiters acquire in exactly their start order and the barger
 * never gets the lock while anyone is in line (before the line, it won about 45 of those
 * races per run; before the oldest-waiter wake-up, a waiter that lost to it went back behind
 * the others and the order came out shuffled). Every lease is fixed and long (no watchdog
 * renewals in the command counts, no TTL fallback during the test).
 */
#define FAIR_WAITERS 16
#define FAIR_ROUNDS 3
#define FAIR_HOLD_MS 2
#define FAIR_LEASE_MS 60000

typedef struct fair_shared {
    lock_client *c;
    int order[FAIR_WAITERS]; /* order[k] = the waiter that acquired k-th */
    _Atomic int acquired;
    _Atomic int errors;
    _Atomic bool stop_barger;
    _Atomic int tries;  /* the barger's tries while waiters were queued */
    _Atomic int steals; /* its acquisitions while waiters were queued */
} fair_shared;

typedef struct fair_waiter {
    fair_shared *sh;
    int id;
    int64_t waited_ns;
    pthread_t thread;
} fair_waiter;

static void *fair_waiter_main(void *arg)
{
    fair_waiter *w = arg;
    fair_shared *sh = w->sh;
    int64_t start = now_ns();

    if (lock_try_lock(sh->c, "t:fair", 20000, FAIR_LEASE_MS, NULL) != LOCK_OK) {
        atomic_fetch_add(&sh->errors, 1);
        return NULL;
    }
    w->waited_ns = now_ns() - start;
    sh->order[atomic_fetch_add(&sh->acquired, 1)] = w->id; /* under the lock */
    sleep_ms(FAIR_HOLD_MS);
    if (lock_unlock(sh->c, "t:fair") != LOCK_OK)
        atomic_fetch_add(&sh->errors, 1);
    return NULL;
}

static void *fair_barger_main(void *arg)
{
    fair_shared *sh = arg;

    while (!atomic_load(&sh->stop_barger)) {
        bool in_line = atomic_load(&sh->acquired) < FAIR_WAITERS;
        int rc = lock_try_lock(sh->c, "t:fair", 0, FAIR_LEASE_MS, NULL);

        if (in_line)
            atomic_fetch_add(&sh->tries, 1);
        if (rc == LOCK_ERR_TIMEOUT)
            continue;
        if (rc != LOCK_OK) {
            atomic_fetch_add(&sh->errors, 1);
            break;
        }
        /* Waiters left after this take (acquired is counted under the lock): a steal. */
        if (atomic_load(&sh->acquired) < FAIR_WAITERS)
            atomic_fetch_add(&sh->steals, 1);
        sleep_ms(FAIR_HOLD_MS);
        if (lock_unlock(sh->c, "t:fair") != LOCK_OK)
            atomic_fetch_add(&sh->errors, 1);
        /* Out of the lock for a moment, as a thread doing other work: a waiter woken by
         * this release gets its chance, and the barger's next try races the next one. */
        sleep_ms(FAIR_HOLD_MS);
    }
    return NULL;
}

/* One round; returns how many waiters acquired out of their queue order. */
static int fair_round(fair_shared *sh, fair_waiter *w, int64_t *max_wait_ns)
{
    pthread_t barger;
    long long base;
    int out_of_order = 0;

    atomic_store(&sh->acquired, 0);
    atomic_store(&sh->stop_barger, false);
    /* The last round's channel lingers for a second after its waiters left: wait until it
     * is gone, so that the first waiter of this round is the one that subscribes. */
    assert_true(wait_numsub("t:fair:released", 0, 5000));
    assert_int_equal(lock_try_lock(sh->c, "t:fair", 0, FAIR_LEASE_MS, NULL), LOCK_OK);
    base = evalsha_calls();
    assert_true(base > 0);
    for (int i = 0; i < FAIR_WAITERS; i++) {
        w[i] = (fair_waiter){.sh = sh, .id = i};
        assert_int_equal(pthread_create(&w[i].thread, NULL, fair_waiter_main, &w[i]), 0);
        /* Queued. The first waiter subscribes: its try before joining and its try after
         * subscribing have both run. Every later one finds the channel subscribed, joins
         * before its only try, and goes to sleep after it (lock.c, step 0). */
        assert_true(wait_evalsha(base + 1 + (i + 1)));
    }
    assert_int_equal(evalsha_calls(), base + 1 + FAIR_WAITERS); /* nobody woke */
    assert_int_equal(pthread_create(&barger, NULL, fair_barger_main, sh), 0);
    assert_int_equal(lock_unlock(sh->c, "t:fair"), LOCK_OK);
    for (int i = 0; i < FAIR_WAITERS; i++)
        pthread_join(w[i].thread, NULL);
    atomic_store(&sh->stop_barger, true);
    pthread_join(barger, NULL);
    assert_int_equal(atomic_load(&sh->errors), 0);
    assert_int_equal(atomic_load(&sh->acquired), FAIR_WAITERS);
    for (int k = 0; k < FAIR_WAITERS; k++) {
        if (sh->order[k] != k)
            out_of_order++;
        if (w[k].waited_ns > *max_wait_ns)
            *max_wait_ns = w[k].waited_ns;
    }
    return out_of_order;
}

/* The fair order's client: its waiters keep their place for a minute, so they refresh it
 * every 20 s and no refresh lands in fair_round's EVALSHA counts, however slowly a busy
 * machine queues the sixteen of them (with the default 1.5 s, one refreshes every 500 ms). */
static lock_client *new_client_patient_line(void)
{
    lock_options o;
    lock_client *c = NULL;

    lock_options_init(&o);
    o.redis_port = g_state.port;
    o.waiter_liveness_ms = 60000;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

static void test_fair_order(void **state)
{
    static fair_shared sh;
    fair_waiter w[FAIR_WAITERS];
    int64_t max_wait = 0;
    int out_of_order = 0;
    char seen[FAIR_ROUNDS][FAIR_WAITERS * 4 + 1];

    (void)state;
    memset(&sh, 0, sizeof(sh));
    sh.c = new_client_patient_line();
    atomic_store(&sh.steals, 0);
    atomic_store(&sh.tries, 0);
    for (int r = 0; r < FAIR_ROUNDS; r++) {
        int n = 0;

        out_of_order += fair_round(&sh, w, &max_wait);
        for (int k = 0; k < FAIR_WAITERS; k++)
            n += snprintf(seen[r] + n, sizeof(seen[r]) - (size_t)n, " %d", sh.order[k]);
        print_message("fair order: round %d acquired in order%s\n", r, seen[r]);
    }
    print_message("fair order: %d waiters x %d rounds, the barger tried %d times while they "
                  "waited and took the lock %d times; %d out of queue order; longest wait "
                  "%.1f ms\n",
                  FAIR_WAITERS, FAIR_ROUNDS, atomic_load(&sh.tries), atomic_load(&sh.steals),
                  out_of_order, (double)max_wait / 1e6);
    /* The races were run, and the line won them all. */
    assert_true(atomic_load(&sh.tries) > 0);
    assert_int_equal(atomic_load(&sh.steals), 0);
    assert_int_equal(out_of_order, 0);
    assert_int_equal(redis_int("EXISTS t:fair"), 0);
    lock_client_destroy(sh.c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_wait_bound, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_wakeup, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fair_order, case_setup, case_teardown),
    };

    return lock_test_main("test_wakeup", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
