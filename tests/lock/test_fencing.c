/*
 * test_fencing.c - the Redis lock's tokens and scripts, against a real redis-server:
 *   fencing             1,000 acquisitions by 8 threads: tokens strictly increase, also
 *                       across a lease that expired in the middle
 *   NOSCRIPT            SCRIPT FLUSH between every step, the watchdog included
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

/* ---- fencing ---- */

#define FENCE_THREADS 8
#define FENCE_PER_THREAD 125 /* 1,000 acquisitions */
#define FENCE_EXPIRING_AT 60 /* thread 0's 60th acquisition has a 100 ms lease, not released */

typedef struct fence_shared {
    lock_client *c;
    int64_t tokens[FENCE_THREADS * FENCE_PER_THREAD];
    _Atomic int n;
    _Atomic int errors;
    int expired_is_held; /* is_held after the lease ran out (expect LOCK_ERR_LOST) */
    int expired_unlock;  /* unlock after the lease ran out (expect LOCK_ERR_NOT_HELD) */
} fence_shared;

typedef struct fence_worker {
    fence_shared *sh;
    int id;
    pthread_t thread;
} fence_worker;

static void *fence_main(void *arg)
{
    fence_worker *w = arg;
    fence_shared *sh = w->sh;

    for (int i = 0; i < FENCE_PER_THREAD; i++) {
        bool expiring = w->id == 0 && i == FENCE_EXPIRING_AT;
        int64_t token = 0;
        int rc =
            lock_try_lock(sh->c, "t:fence", 20000, expiring ? 100 : LOCK_LEASE_WATCHDOG, &token);

        if (rc != LOCK_OK) {
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        /* Under the lock: the order of this array is the order of the holdings. */
        sh->tokens[atomic_fetch_add(&sh->n, 1)] = token;
        if (expiring) {
            /* A holder paused past its lease: the lock frees itself and others go on. */
            sleep_ms(250);
            sh->expired_is_held = lock_is_held(sh->c, "t:fence");
            sh->expired_unlock = lock_unlock(sh->c, "t:fence");
            continue;
        }
        if (lock_unlock(sh->c, "t:fence") != LOCK_OK)
            atomic_fetch_add(&sh->errors, 1);
    }
    return NULL;
}

static void test_fencing(void **state)
{
    static fence_shared sh;
    fence_worker w[FENCE_THREADS];
    int n;

    (void)state;
    memset(&sh, 0, sizeof(sh));
    sh.c = g_state.client;
    for (int i = 0; i < FENCE_THREADS; i++) {
        w[i] = (fence_worker){.sh = &sh, .id = i};
        assert_int_equal(pthread_create(&w[i].thread, NULL, fence_main, &w[i]), 0);
    }
    for (int i = 0; i < FENCE_THREADS; i++)
        pthread_join(w[i].thread, NULL);
    n = atomic_load(&sh.n);
    assert_int_equal(atomic_load(&sh.errors), 0);
    assert_int_equal(n, FENCE_THREADS * FENCE_PER_THREAD);
    assert_int_equal(sh.expired_is_held, LOCK_ERR_LOST);
    assert_int_equal(sh.expired_unlock, LOCK_ERR_NOT_HELD);
    for (int i = 1; i < n; i++)
        assert_true(sh.tokens[i] > sh.tokens[i - 1]);
    assert_int_equal(redis_int("EXISTS t:fence"), 0);
}

/* ---- NOSCRIPT ---- */

/* The watchdog lease of this case: each renewal after a flush costs three round trips
 * (NOSCRIPT, SCRIPT LOAD, EVALSHA) and must land within the lease; 900 ms leaves a renewal
 * due every 300 ms 600 ms to spare on a loaded machine (with 300 ms, one came late once). */
#define NOSCRIPT_LEASE_MS 900

static void test_noscript(void **state)
{
    lock_client *c = new_client(NOSCRIPT_LEASE_MS);
    int64_t t1 = 0, t2 = 0;

    (void)state;
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_try_lock(c, "t:ns", 0, LOCK_LEASE_WATCHDOG, &t1), LOCK_OK);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_try_lock(c, "t:ns", 0, LOCK_LEASE_WATCHDOG, &t2), LOCK_OK);
    assert_int_equal(t1, t2);
    /* The watchdog renews through flushes too: held across two leases. */
    for (int i = 0; i < 6; i++) {
        redis_ok("SCRIPT FLUSH");
        sleep_ms(NOSCRIPT_LEASE_MS / 3);
    }
    assert_int_equal(lock_is_held(c, "t:ns"), LOCK_OK);
    assert_true(redis_int("PTTL t:ns") > 0);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_unlock(c, "t:ns"), LOCK_OK);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_unlock(c, "t:ns"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:ns"), 0);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_unlock(c, "t:ns"), LOCK_ERR_NOT_HELD);
    lock_client_destroy(c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fencing, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_noscript, case_setup, case_teardown),
    };

    return lock_test_main("test_fencing", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
