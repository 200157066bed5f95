/*
 * test_lease.c - the Redis lock's lease, against a real redis-server:
 *   lease expiry        a child takes a 300 ms lease and dies: free after it, not before
 *   watchdog            3 x the lease held while others fail; after unlock, nothing renewed
 *   lost lock           the key deleted and retaken behind the holder: is_held says lost
 *   max hold            renewed up to max_hold_ms only; then lost, and another owner takes it
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

/* ---- lease expiry ---- */

typedef struct child_report {
    int rc;
    int64_t before_ns; /* just before the child's try_lock */
    int64_t after_ns;
    int64_t token;
} child_report;

/* Role "lease": takes "t:lease" with a 300 ms lease, reports on fd, and dies without
 * releasing it (nor destroying the client: as a crash would). */
static int role_lease(int port, int fd)
{
    child_report rep = {0};
    lock_client *cc = child_client(port);

    if (cc == NULL)
        return 2;
    rep.before_ns = now_ns();
    rep.rc = lock_try_lock(cc, "t:lease", 0, 300, &rep.token);
    rep.after_ns = now_ns();
    if (write(fd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
        return 3;
    _exit(0);
}

static void test_lease_expiry(void **state)
{
    child_report rep = {0};
    int fds[2];
    int status = 0;
    int64_t token = 0;
    bg_call waiter;
    pid_t child;

    (void)state;
    assert_int_equal(pipe(fds), 0);
    child = spawn_role("lease", fds[1]);
    assert_true(child >= 0);
    close(fds[1]);
    assert_int_equal(read(fds[0], &rep, sizeof(rep)), (ssize_t)sizeof(rep));
    close(fds[0]);
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(rep.rc, LOCK_OK);

    /* Waiting from now on (well within the lease), it gets the lock, not before 300 ms. */
    waiter = (bg_call){.c = g_state.client,
                       .name = "t:lease",
                       .wait_ms = 3000,
                       .lease_ms = 10000,
                       .unlock_after = true};
    bg_start(&waiter);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    assert_true(waiter.done_ns - rep.before_ns >= 300 * MS);
    assert_true(waiter.token > rep.token);
    print_message("lease expiry: acquired %.1f ms after the child's try_lock began\n",
                  (double)(waiter.done_ns - rep.before_ns) / 1e6);

    /* And a try made while the lease still runs fails. */
    assert_int_equal(lock_try_lock(g_state.client, "t:lease2", 0, 300, NULL), LOCK_OK);
    assert_int_equal(other_try_lock(g_state.client, "t:lease2", 0, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_try_lock(g_state.client, "t:lease2", 0, 300, &token), LOCK_OK);
    assert_int_equal(lock_unlock(g_state.client, "t:lease2"), LOCK_OK);
    assert_int_equal(lock_unlock(g_state.client, "t:lease2"), LOCK_OK);
}

/* ---- watchdog ---- */

static void test_watchdog(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);
    lock_stats st;
    uint64_t renewals;
    int64_t start;
    int tries = 0;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:wd", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_true(redis_int("PTTL t:wd") <= SHORT_LEASE_MS);
    start = now_ns();
    while (now_ns() - start < 3 * SHORT_LEASE_MS * MS) {
        assert_int_equal(other_try_lock(c, "t:wd", 0, true), LOCK_ERR_TIMEOUT);
        tries++;
        sleep_ms(30);
    }
    /* Still there, still ours, after three leases. */
    assert_true(redis_int("PTTL t:wd") > 0);
    assert_int_equal(lock_is_held(c, "t:wd"), LOCK_OK);
    lock_get_stats(c, &st);
    /* Alive at 3 leases means at least 3 renewals (each adds at most one lease). */
    assert_true(st.renewals >= 3);
    assert_int_equal(st.lost, 0);

    assert_int_equal(lock_unlock(c, "t:wd"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:wd"), 0);
    /* A renewal the watchdog sent just before the release may still be on its way back, and
     * Redis ran it while the key was ours: it counts when the watchdog's thread reads the
     * answer, which a loaded machine may delay. Give it a lease to come, then count: from
     * there on, nothing may renew. */
    sleep_ms(SHORT_LEASE_MS);
    lock_get_stats(c, &st);
    renewals = st.renewals;
    sleep_ms(SHORT_LEASE_MS); /* three renewal periods */
    lock_get_stats(c, &st);
    assert_int_equal(st.renewals, renewals);
    assert_int_equal(redis_int("EXISTS t:wd"), 0);
    print_message("watchdog: %d tries by another owner failed over %d ms, %llu renewals\n", tries,
                  3 * SHORT_LEASE_MS, (unsigned long long)renewals);
    lock_client_destroy(c);
}

/*
 * A watchdog holding taken again with a short fixed lease: the take resets the TTL to that
 * lease, and the watchdog (renewing the holding until its last release) must come within a
 * third of it, not at its regular period. The client's period (a third of 1200 ms) is longer
 * than the fixed lease (300 ms), so a renewal on the regular schedule would come after the
 * key expired; the one due at a third of the lease has 200 ms to spare, which a loaded
 * machine needs.
 */
#define REENTRY_WATCHDOG_LEASE_MS 1200
#define REENTRY_FIXED_LEASE_MS 300

static void test_watchdog_after_shorter_reentry(void **state)
{
    lock_client *c = new_client(REENTRY_WATCHDOG_LEASE_MS);

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:wd2", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:wd2", 0, REENTRY_FIXED_LEASE_MS, NULL), LOCK_OK);
    assert_true(redis_int("PTTL t:wd2") <= REENTRY_FIXED_LEASE_MS);
    sleep_ms(REENTRY_FIXED_LEASE_MS + 100); /* past the fixed lease */
    assert_int_equal(other_try_lock(c, "t:wd2", 0, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_is_held(c, "t:wd2"), LOCK_OK);
    assert_true(redis_int("PTTL t:wd2") > REENTRY_FIXED_LEASE_MS); /* renewed to the watchdog's */
    assert_int_equal(lock_unlock(c, "t:wd2"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:wd2"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:wd2"), 0);
    lock_client_destroy(c);
}

static void test_lost_lock(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);
    lock_stats st;
    int64_t start, seen = -1;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:lost", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:lost"), LOCK_OK);

    /* Behind the holder's back: the key goes, and another owner takes the lock. */
    start = now_ns();
    assert_int_equal(redis_int("DEL t:lost"), 1);
    assert_int_equal(lock_try_lock(g_state.client, "t:lost", 0, 10000, NULL), LOCK_OK);

    /* The next renewal (every 100 ms) finds it gone. */
    while (now_ns() - start < 1000 * MS) {
        if (lock_is_held(c, "t:lost") == LOCK_ERR_LOST) {
            seen = now_ns() - start;
            break;
        }
        sleep_ms(5);
    }
    assert_true(seen >= 0);
    lock_get_stats(c, &st);
    assert_int_equal(st.lost, 1); /* found by the watchdog, not by the lease running out */

    /* Clearing the record never touches the new owner's lock. */
    assert_int_equal(lock_unlock(c, "t:lost"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_is_held(c, "t:lost"), LOCK_ERR_NOT_HELD);
    assert_int_equal(redis_int("EXISTS t:lost"), 1);
    assert_int_equal(lock_unlock(g_state.client, "t:lost"), LOCK_OK);
    print_message("lost lock: is_held said lost %.1f ms after the DEL\n", (double)seen / 1e6);
    lock_client_destroy(c);
}

/* The watchdog renews a holding for max_hold_ms at most; then its lease runs out, the holder
 * is told it lost the lock, and another owner takes it. */
static void test_max_hold(void **state)
{
    lock_options o;
    lock_client *c = NULL;
    int64_t t0;

    (void)state;
    lock_options_init(&o);
    o.redis_port = g_state.port;
    o.watchdog_lease_ms = SHORT_LEASE_MS;
    o.max_hold_ms = 700;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    o.max_hold_ms = 0;
    lock_client *bad = NULL;
    assert_int_equal(lock_client_create(&o, &bad), LOCK_ERR_INVALID);

    t0 = now_ns();
    assert_int_equal(lock_try_lock(c, "t:maxhold", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    /* Renewed past its first lease (300 ms) ... */
    sleep_ms(500);
    assert_int_equal(lock_is_held(c, "t:maxhold"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:maxhold"), 1);
    /* ... but not past max_hold + one lease. */
    while (redis_int("EXISTS t:maxhold") == 1 && now_ns() - t0 < 3000 * MS)
        sleep_ms(20);
    int64_t gone_ms = (now_ns() - t0) / MS;
    print_message("max hold: a 700 ms max hold with a 300 ms lease expired after %lld ms\n",
                  (long long)gone_ms);
    assert_true(gone_ms >= 700);
    assert_true(gone_ms < 700 + SHORT_LEASE_MS + 400);
    assert_int_equal(lock_is_held(c, "t:maxhold"), LOCK_ERR_LOST);
    assert_int_equal(other_try_lock(g_state.client, "t:maxhold", 0, true), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:maxhold"), LOCK_ERR_NOT_HELD);
    lock_client_destroy(c);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "lease") == 0)
        return role_lease(atoi(argv[2]), atoi(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lease_expiry, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_watchdog, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_watchdog_after_shorter_reentry, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_lock, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_max_hold, case_setup, case_teardown),
    };

    return lock_test_main("test_lease", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
