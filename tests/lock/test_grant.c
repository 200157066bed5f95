/*
 * test_grant.c - the grant: a release hands the lock to the first waiter in line inside
 * release.lua, and the message that names the waiter carries its token, against a real
 * redis-server. What it costs and what it must never do:
 *   - a watchdog holding takes its grant with no round trip: its lease is the rest of its
 *     place in line, which its watchdog then extends to a full lease;
 *   - a fixed-lease holding takes its grant with acquire.lua, which sets its own lease;
 *   - a message about an earlier wait (a token the waiter has already seen) grants nothing;
 *   - a waiter whose wait ends just after a release granted it the lock (the message not
 *     yet heard) takes the lock, by its last try or as it leaves the line, rather than
 *     leave it to lapse;
 *   - the message that names a waiter goes to its own process's channel only; one that
 *     names nobody goes to every process.
 *
 * The server, the fixtures and the tools: tests/lock/lock_support.h.
 */
#include "tests/lock/lock_support.h"
#include "lock/scripts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static lock_client *new_client_liveness(int64_t liveness_ms)
{
    lock_options o;
    lock_client *c = NULL;

    lock_options_init(&o);
    o.redis_port = g_state.port;
    o.waiter_liveness_ms = liveness_ms;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

/* The first member of the line of `lock` (its owner), copied into out; false if empty. */
static bool first_in_line(const char *lock, char *out, size_t size, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * MS;

    for (;;) {
        redisReply *r = redis_cmd("ZRANGE %s:waiters 0 0", lock);
        bool found = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1;

        if (found)
            snprintf(out, size, "%s", r->element[0]->str);
        if (r != NULL)
            freeReplyObject(r);
        if (found)
            return true;
        if (now_ns() >= until)
            return false;
        sleep_ms(2);
    }
}

/*
 * A watchdog waiter is handed the lock: right after its take the lock's TTL is what was left
 * of its place in line (at most the liveness, 1500 ms here), not the 30 s lease that its
 * own acquire.lua would have set: so no acquire ran. Its token is a new, larger one, and its
 * watchdog extends the lease within a third of the liveness.
 */
static void test_grant_taken_without_round_trip(void **state)
{
    lock_client *waiter = new_client_liveness(1500);
    bg_call b = {.c = waiter, .name = "t:grant", .wait_ms = 5000, .lease_ms = LOCK_LEASE_WATCHDOG};
    int64_t token;
    long long ttl, base;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:grant", 0, 10000, &token), LOCK_OK);
    base = evalsha_calls();
    bg_start(&b);
    assert_true(wait_evalsha(base + 2)); /* asleep: its two tries are done */
    assert_int_equal(redis_int("ZCARD t:grant:waiters"), 1);
    assert_int_equal(lock_unlock(g_state.client, "t:grant"), LOCK_OK);
    bg_join(&b);
    assert_int_equal(b.rc, LOCK_OK);
    ttl = redis_int("PTTL t:grant");
    print_message("grant: token +%lld, TTL %lld ms after the take, hand-off %lld us\n",
                  (long long)(b.token - token), ttl, (long long)b.handoff_us);
    assert_true(b.token > token);
    assert_true(ttl > 0 && ttl <= 1500); /* its own acquire.lua would have set 30 s */
    assert_true(b.handoff_us >= 0);
    assert_int_equal(redis_int("EXISTS t:grant:waiters"), 0); /* the grant took its place */
    sleep_ms(900); /* past a third of the liveness: the watchdog's first renewal */
    assert_true(redis_int("PTTL t:grant") > 1500);
    lock_client_destroy(waiter); /* the holding was the waiter thread's: its lease ends it */
}

/* A fixed-lease waiter is granted the lock too, and takes it with acquire.lua: the lease is
 * the one it asked for. */
static void test_grant_fixed_lease_takes_its_lease(void **state)
{
    lock_client *waiter = new_client_liveness(1500);
    bg_call b = {.c = waiter, .name = "t:fixed", .wait_ms = 5000, .lease_ms = 20000};
    int64_t token;
    long long base;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:fixed", 0, 10000, &token), LOCK_OK);
    base = evalsha_calls();
    bg_start(&b);
    assert_true(wait_evalsha(base + 2)); /* asleep: its two tries are done */
    assert_int_equal(lock_unlock(g_state.client, "t:fixed"), LOCK_OK);
    bg_join(&b);
    assert_int_equal(b.rc, LOCK_OK);
    assert_true(b.token > token);
    assert_int_equal(redis_int("INCRBY t:fixed:fence 0"), b.token); /* the grant's token, kept */
    assert_true(redis_int("PTTL t:fixed") > 15000);
    assert_true(b.handoff_us >= 0);
    lock_client_destroy(waiter);
}

/*
 * A grant message whose token the waiter has already seen (one about an earlier wait of the
 * same thread, heard late) is not a grant: the waiter stays in line and, the lock being
 * another's all along, its wait ends without it.
 */
static void test_stale_grant_is_refused(void **state)
{
    lock_client *waiter = new_client_liveness(1500);
    bg_call b = {.c = waiter, .name = "t:stale", .wait_ms = 800, .lease_ms = LOCK_LEASE_WATCHDOG};
    char owner[128], message[256];
    int64_t token;
    long long base;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:stale", 0, 10000, &token), LOCK_OK);
    base = evalsha_calls();
    bg_start(&b);
    assert_true(wait_evalsha(base + 2)); /* asleep, having seen the counter at `token` */
    assert_true(first_in_line("t:stale", owner, sizeof(owner), 3000));
    snprintf(message, sizeof(message), "%s %lld %lld", owner, (long long)token,
             (long long)(time(NULL) * 1000000LL));
    assert_int_equal(
        redis_int("PUBLISH t:stale:released:%s %s", lock_client_process_id(waiter), message), 1);
    bg_join(&b);
    assert_int_equal(b.rc, LOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("HEXISTS t:stale %s", owner), 0);
    assert_int_equal(lock_unlock(g_state.client, "t:stale"), LOCK_OK);
    lock_client_destroy(waiter);
}

/*
 * A release grants the lock to a waiter whose message never reaches it (written here by
 * hand, as release.lua would leave it, with no message): the waiter's last try, as its wait
 * ends, finds the lock its own (acquire.lua's reentrant take) and the wait ends with it,
 * within its time bound, rather than with a lock left to lapse. A long liveness keeps the
 * waiter from calling again before that.
 */
static void test_unheard_grant_taken_by_last_try(void **state)
{
    lock_client *waiter = new_client_liveness(60000);
    bg_call b = {.c = waiter, .name = "t:late", .wait_ms = 1000, .lease_ms = LOCK_LEASE_WATCHDOG};
    char owner[128];
    int64_t token;
    long long base;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:late", 0, 10000, &token), LOCK_OK);
    base = evalsha_calls();
    bg_start(&b);
    assert_true(wait_evalsha(base + 2)); /* asleep until its deadline */
    assert_true(first_in_line("t:late", owner, sizeof(owner), 3000));
    /* release.lua's grant, without its message: the holder's hash replaced by the waiter's */
    assert_int_equal(redis_int("DEL t:late"), 1);
    assert_int_equal(redis_int("ZREM t:late:waiters %s", owner), 1);
    assert_int_equal(redis_int("ZREM t:late:waiters:until %s", owner), 1);
    assert_int_equal(redis_int("INCR t:late:fence"), token + 1);
    assert_int_equal(redis_int("HSET t:late %s 1", owner), 1);
    assert_int_equal(redis_int("PEXPIRE t:late 5000"), 1);
    bg_join(&b);
    print_message("unheard grant: rc %d after %.0f ms\n", b.rc,
                  (double)(b.done_ns - b.started_ns) / 1e6);
    assert_int_equal(b.rc, LOCK_OK);
    /* The waiter did not know the grant's token (it never heard of it): acquire.lua gave
     * its holding a new one, larger still (a token names one holding). */
    assert_true(b.token > token + 1);
    assert_true(b.done_ns - b.started_ns < 1000 * MS + 600 * MS); /* wait + one command timeout */
    assert_true(redis_int("PTTL t:late") > 5000); /* acquire.lua set the waiter's own lease */
    lock_client_destroy(waiter);
}

/*
 * The grant that lands between a waiter's last try and its leaving: leave.lua, run by an
 * owner that a release made the holder, says so (2) and changes nothing, for the owner to
 * take it with acquire.lua (lock.c's settle_failed_try) rather than leave it to lapse; run by
 * an owner in line, it only takes it out.
 */
static void test_leave_takes_a_late_grant(void **state)
{
    const char *leave = lock__script_text(LOCK__SCRIPT_LEAVE);

    (void)state;
    redis_ok("SET t:leave:fence 41");
    /* granted: release.lua left the lock with p:1 (count 1, the rest of its place) */
    assert_int_equal(redis_int("INCR t:leave:fence"), 42);
    assert_int_equal(redis_int("HSET t:leave p:1 1"), 1);
    assert_int_equal(redis_int("PEXPIRE t:leave 900"), 1);
    assert_int_equal(redis_int("EVAL %s 3 t:leave t:leave:waiters t:leave:waiters:until p:1 "
                               "t:leave:released",
                               leave),
                     2);
    assert_true(redis_int("PTTL t:leave") <= 900); /* as it was: acquire.lua sets the lease */
    assert_int_equal(redis_int("HEXISTS t:leave p:1"), 1);
    /* in line, not holding: out of the line, and no lock */
    assert_int_equal(redis_int("ZADD t:leave:waiters 1 p:2"), 1);
    assert_int_equal(redis_int("EVAL %s 3 t:leave t:leave:waiters t:leave:waiters:until p:2 "
                               "t:leave:released",
                               leave),
                     1);
    assert_int_equal(redis_int("EXISTS t:leave:waiters"), 0);
    assert_int_equal(redis_int("HEXISTS t:leave p:2"), 0);
}

/* Reads the next pub/sub message from sub into channel and data; false on an error. */
static bool next_message(redisContext *sub, char *channel, size_t channel_size, char *data,
                         size_t data_size)
{
    redisReply *r = NULL;
    bool ok;

    if (redisGetReply(sub, (void **)&r) != REDIS_OK || r == NULL)
        return false;
    ok = r->type == REDIS_REPLY_ARRAY && r->elements == 4 &&
         r->element[2]->type == REDIS_REPLY_STRING && r->element[3]->type == REDIS_REPLY_STRING;
    if (ok) {
        snprintf(channel, channel_size, "%s", r->element[2]->str);
        snprintf(data, data_size, "%.*s", (int)r->element[3]->len, r->element[3]->str);
    }
    freeReplyObject(r);
    return ok;
}

/*
 * Where the messages go. While a waiter of another process (another client: another process
 * id) waits, its subscriber listens on the lock's channel for all and on its own; the holder's
 * release grants it the lock with a message on its own channel only (so the subscribers of
 * other processes sleep through it); its own release, with nobody in line, says "" on the
 * channel for all. A pattern subscriber of the test sees every message, in order.
 */
static void test_grant_told_to_its_process_only(void **state)
{
    lock_client *waiter = new_client_liveness(1500);
    bg_call b = {
        .c = waiter, .name = "t:own", .wait_ms = 5000, .lease_ms = 20000, .unlock_after = true};
    struct timeval tv = {.tv_sec = 5};
    char ours[128], owner[128], channel[256], data[256];
    redisContext *sub;
    redisReply *r;
    int64_t token;
    long long base;

    (void)state;
    snprintf(ours, sizeof(ours), "t:own:released:%s", lock_client_process_id(waiter));
    sub = redisConnectWithTimeout("127.0.0.1", g_state.port, tv);
    assert_true(sub != NULL && sub->err == 0);
    assert_int_equal(redisSetTimeout(sub, tv), REDIS_OK); /* a missing message fails, not hangs */
    r = redisCommand(sub, "PSUBSCRIBE t:own:released*");
    assert_non_null(r);
    freeReplyObject(r);
    assert_int_equal(lock_try_lock(g_state.client, "t:own", 0, 10000, &token), LOCK_OK);
    base = evalsha_calls();
    bg_start(&b);
    assert_true(wait_evalsha(base + 2)); /* asleep, subscribed */
    assert_true(first_in_line("t:own", owner, sizeof(owner), 3000));
    assert_int_equal(numsub("t:own:released"), 1);
    assert_int_equal(numsub(ours), 1);
    assert_int_equal(lock_unlock(g_state.client, "t:own"), LOCK_OK);
    bg_join(&b);
    assert_int_equal(b.rc, LOCK_OK);
    assert_int_equal(b.unlock_rc, LOCK_OK);

    assert_true(next_message(sub, channel, sizeof(channel), data, sizeof(data)));
    assert_string_equal(channel, ours); /* the grant, to the waiter's process */
    assert_true(strncmp(data, owner, strlen(owner)) == 0 && data[strlen(owner)] == ' ');
    assert_true(next_message(sub, channel, sizeof(channel), data, sizeof(data)));
    assert_string_equal(channel, "t:own:released"); /* nobody in line: to every process */
    assert_string_equal(data, "");
    redisFree(sub);
    lock_client_destroy(waiter);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_grant_taken_without_round_trip, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_grant_fixed_lease_takes_its_lease, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_stale_grant_is_refused, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_unheard_grant_taken_by_last_try, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_leave_takes_a_late_grant, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_grant_told_to_its_process_only, case_setup,
                                        case_teardown),
    };

    return lock_test_main("test_grant", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
