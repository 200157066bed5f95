/*
 * test_lost_reply.c - every script of the lock with its reply lost in each of the four ways a
 * client meets, against a real redis-server behind a relay that loses them on purpose
 * (tests/support/relay.h):
 *   late     the script ran, its answer comes after the client's command timeout;
 *   swallow  the script ran, no answer ever comes, the connection stays open;
 *   cut      the script ran, then the connection closes without the answer;
 *   unsent   the connection closes before the script reaches Redis: it never ran.
 * For acquire.lua, leave.lua (a waiter that gives up just as a release granted it the lock),
 * release.lua and renew.lua (the watchdog), each case asserts the two things a user sees:
 * the call that lost its reply ends within its bound, and another owner takes the lock
 * within the waiter liveness plus one command timeout of that call's end. A written give-back
 * is not a run one: the cut and unsent cases are those in which a give-back written on the
 * broken connection never reaches Redis.
 *
 * Also: a release message read after the address moved (a failover) grants nothing; a token
 * names one holding (a reentrant take after the counter moved gets a new one); a try that ends
 * with an error leaves the line; a holding leave.lua hands over waits for the replicas too,
 * and presents a token of its own even when the counter moved under it.
 *
 * The server, the fixtures and the tools: tests/lock/lock_support.h. White-box where it says.
 */
#include "tests/lock/lock_support.h"

#include "lock/conn.h"       /* white-box: an address to move */
#include "lock/scripts.h"    /* white-box: the scripts' SHA1s, which the relay matches */
#include "lock/subscriber.h" /* white-box: a subscriber whose master moves */
#include "tests/support/relay.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TIMEOUT_MS 200   /* the faulted client's command timeout */
#define LIVENESS_MS 600  /* its waiter liveness: the first lease of its holdings */
#define WATCHDOG_MS 4000 /* its watchdog lease, once renewed */
#define SLACK_MS 150     /* a loaded machine and the sanitizers */

typedef enum loss { LATE, SWALLOW, CUT, UNSENT } loss;
static const char *const loss_names[] = {"late", "swallow", "cut", "unsent"};

/* A client of the test's Redis through a new relay (*r, to stop after the client), with this
 * command timeout. */
static lock_client *client_through_timeout(relay **r, int timeout_ms)
{
    lock_options o;
    lock_client *c = NULL;

    assert_int_equal(relay_start(0, g_state.port, r), 0);
    lock_options_init(&o);
    o.redis_port = relay_port(*r);
    o.command_timeout_ms = timeout_ms;
    o.waiter_liveness_ms = LIVENESS_MS;
    o.watchdog_lease_ms = WATCHDOG_MS;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

/* The same with the faulted client's command timeout (TIMEOUT_MS). */
static lock_client *client_through(relay **r)
{
    return client_through_timeout(r, TIMEOUT_MS);
}

/* The relay's fault for each way of losing a reply. */
static const relay_fault loss_faults[] = {RELAY_DELAY, RELAY_SWALLOW, RELAY_CUT_REPLY,
                                          RELAY_CUT_REQUEST};

/* Has the relay lose the reply of the next request that runs script s, the way `how`. */
static void lose_next(relay *r, lock__script s, loss how)
{
    relay_set(r, loss_faults[how], 3 * TIMEOUT_MS, lock__script_sha(s), 1);
}

/* Every script loaded, so that the first EVALSHA of each runs (no NOSCRIPT to lose). */
static void load_scripts(void)
{
    for (int s = 0; s < LOCK__SCRIPT_COUNT; s++) {
        redisReply *r = redis_cmd("SCRIPT LOAD %s", lock__script_text((lock__script)s));

        assert_non_null(r);
        freeReplyObject(r);
    }
}

static int64_t ms_since(int64_t t0)
{
    return (now_ns() - t0) / MS;
}

/* Another owner (a client straight to Redis) takes the lock within the liveness plus one
 * command timeout from `from_ns`; returns how long after from_ns it had it. */
static int64_t other_takes_it(const char *name, int64_t from_ns)
{
    int64_t waited;

    assert_int_equal(
        other_try_lock(g_state.client, name, LIVENESS_MS + TIMEOUT_MS + SLACK_MS, true), LOCK_OK);
    waited = ms_since(from_ns);
    assert_true(waited <= LIVENESS_MS + TIMEOUT_MS + SLACK_MS);
    return waited;
}

/*
 * A first take (wait 0) whose answer is lost. acquire: acquire.lua's answer is lost the way
 * `how`; a cut leaves time to settle, and leave.lua finds the hold the acquire made: the call
 * ends with the lock. leave: acquire.lua's answer is cut (it ran), and the answer of the
 * leave.lua that settles it (which hands the hold over with the first lease, as it hands over
 * a grant that a release made while a waiter gave up: test_grant) is lost the way `how`.
 * Whatever became of them, the hold must not keep the others out longer than the liveness:
 * leave.lua gives the first lease, not the full one, and a give-back follows if there is time.
 */
static void take_lost(const char *what, bool leave, loss how)
{
    relay *r = NULL;
    lock_client *c = client_through(&r);
    char name[32];
    int64_t t0, took, waited;
    int rc;

    snprintf(name, sizeof(name), "t:lost:%s:%s", what, loss_names[how]);
    load_scripts();
    if (leave) {
        relay_set(r, RELAY_CUT_REPLY, 0, lock__script_sha(LOCK__SCRIPT_ACQUIRE), 1);
        relay_then(r, loss_faults[how], 3 * TIMEOUT_MS, lock__script_sha(LOCK__SCRIPT_LEAVE), 1);
    } else {
        lose_next(r, LOCK__SCRIPT_ACQUIRE, how);
    }
    t0 = now_ns();
    rc = lock_try_lock(c, name, 0, LOCK_LEASE_WATCHDOG, NULL);
    took = ms_since(t0);
    assert_true(took <= TIMEOUT_MS + SLACK_MS); /* wait 0 + one command timeout */
    assert_int_equal(relay_triggered(r), leave ? 2 : 1);
    if (rc == LOCK_OK && !leave) {
        assert_int_equal(lock_is_held(c, name), LOCK_OK); /* the hold it made is its own */
        assert_int_equal(lock_unlock(c, name), LOCK_OK);
    } else {
        assert_int_equal(rc, LOCK_ERR_REDIS);
        assert_int_equal(lock_is_held(c, name), LOCK_ERR_NOT_HELD);
    }
    waited = other_takes_it(name, t0 + took * MS);
    print_message("%s, %s: rc %d after %lld ms; another owner had it %lld ms later\n", what,
                  loss_names[how], rc, (long long)took, (long long)waited);
    lock_client_destroy(c);
    relay_stop(r);
}

static void acquire_lost(loss how)
{
    take_lost("acquire", false, how);
}

static void leave_lost(loss how)
{
    take_lost("leave", true, how);
}

/* release.lua's reply lost on the last release of a holding the watchdog has renewed to its
 * full lease (so that a release that never ran would keep it for WATCHDOG_MS). */
static void release_lost(loss how)
{
    relay *r = NULL;
    lock_client *c = client_through(&r);
    char name[32];
    int64_t t0, took, waited;
    int rc;

    snprintf(name, sizeof(name), "t:lost:rel:%s", loss_names[how]);
    load_scripts();
    assert_int_equal(lock_try_lock(c, name, 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleep_ms(LIVENESS_MS / 3 + 150); /* past the first renewal */
    assert_true(redis_int("PTTL %s", name) > LIVENESS_MS);
    lose_next(r, LOCK__SCRIPT_RELEASE, how);
    t0 = now_ns();
    rc = lock_unlock(c, name);
    took = ms_since(t0);
    assert_true(took <= 2 * TIMEOUT_MS + SLACK_MS); /* a connection, and the answer */
    assert_int_equal(relay_triggered(r), 1);
    assert_int_equal(rc, LOCK_OK); /* sent again and answered */
    assert_int_equal(lock_is_held(c, name), LOCK_ERR_NOT_HELD);
    waited = other_takes_it(name, t0 + took * MS);
    print_message("release, %s: after %lld ms; another owner had it %lld ms later\n",
                  loss_names[how], (long long)took, (long long)waited);
    lock_client_destroy(c);
    relay_stop(r);
}

/* renew.lua's reply lost on the first renewal, due a third of the first lease after the take:
 * retried on that lease's schedule, not the full lease's, the holding is kept. */
static void renew_lost(loss how)
{
    relay *r = NULL;
    lock_client *c = client_through(&r);
    char name[32];
    int64_t waited, t0;

    snprintf(name, sizeof(name), "t:lost:renew:%s", loss_names[how]);
    load_scripts();
    lose_next(r, LOCK__SCRIPT_RENEW, how);
    assert_int_equal(lock_try_lock(c, name, 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleep_ms(LIVENESS_MS + 200); /* past the first lease */
    assert_int_equal(relay_triggered(r), 1);
    assert_int_equal(lock_is_held(c, name), LOCK_OK);
    assert_true(redis_int("PTTL %s", name) > LIVENESS_MS);
    t0 = now_ns();
    assert_int_equal(lock_unlock(c, name), LOCK_OK);
    waited = other_takes_it(name, t0);
    print_message("renew, %s: held through it; another owner had it %lld ms after the release\n",
                  loss_names[how], (long long)waited);
    lock_client_destroy(c);
    relay_stop(r);
}

#define FOUR_WAYS(script)                                                                          \
    static void test_##script##_late(void **state)                                                 \
    {                                                                                              \
        (void)state;                                                                               \
        script##_lost(LATE);                                                                       \
    }                                                                                              \
    static void test_##script##_swallowed(void **state)                                            \
    {                                                                                              \
        (void)state;                                                                               \
        script##_lost(SWALLOW);                                                                    \
    }                                                                                              \
    static void test_##script##_cut(void **state)                                                  \
    {                                                                                              \
        (void)state;                                                                               \
        script##_lost(CUT);                                                                        \
    }                                                                                              \
    static void test_##script##_unsent(void **state)                                               \
    {                                                                                              \
        (void)state;                                                                               \
        script##_lost(UNSENT);                                                                     \
    }

FOUR_WAYS(acquire)
FOUR_WAYS(leave)
FOUR_WAYS(release)
FOUR_WAYS(renew)

/*
 * A grant read after the master moved (Sentinel's failover, as the follower reports it) comes
 * from the deposed master, which may grant what the new one gives someone else: the
 * subscriber drops it. The move is made without waking the subscriber (as a follower that
 * has not told it yet), so the message is the first thing it reads after the move.
 */
static void test_grant_after_the_master_moved(void **state)
{
    lock__conn_address addr;
    lock__conn_config cfg = {&addr, 500, 500};
    lock__subscriber *s = NULL;
    lock__waiter *w = NULL;
    lock__grant grant = {0};
    const char *pid = "00112233445566778899aabbccddeeff";
    char owner[80], message[160];
    bool woken;

    (void)state;
    snprintf(owner, sizeof(owner), "%s:7", pid);
    assert_int_equal(lock__conn_address_init(&addr, "127.0.0.1", g_state.port), LOCK_OK);
    assert_int_equal(lock__subscriber_create(&cfg, pid, &s), LOCK_OK);
    assert_int_equal(lock__subscriber_join(s, "t:moved:released", owner, &w), LOCK_OK);
    assert_true(lock__subscriber_wait_ready(s, w, now_ns() + 2000 * MS));
    assert_true(lock__conn_address_move(&addr, "127.0.0.1", g_state.port + 1));
    snprintf(message, sizeof(message), "%s 42 %lld", owner, (long long)time(NULL) * 1000000LL);
    assert_int_equal(redis_int("PUBLISH t:moved:released:%s %s", pid, message), 1);
    woken = lock__subscriber_wait_release(s, w, now_ns() + 300 * MS, &grant);
    assert_int_equal(grant.token, 0); /* the old master's grant is not taken */
    (void)woken;
    lock__subscriber_leave(s, w, false, false);
    lock__subscriber_destroy(s);
    lock__conn_address_destroy(&addr);
}

/* A reentrant take keeps its holding's token only while the counter still says it: moved
 * (fence_raise.lua after a failover raised it past a token the storage saw, which may be
 * another holding's), the holding gets a new token, larger than the counter. */
static void test_token_names_one_holding(void **state)
{
    lock_client *c = g_state.client;
    int64_t first, again, raised;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:one", 0, 5000, &first), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:one", 0, 5000, &again), LOCK_OK);
    assert_int_equal(again, first); /* the same holding: the same token */
    raised = first + 10;
    assert_int_equal(lock_fence_raise(c, "t:one", raised), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:one", 0, 5000, &again), LOCK_OK);
    assert_true(again > raised); /* not `raised`, which another holding may have */
    assert_int_equal(lock_unlock(c, "t:one"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:one"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:one"), LOCK_OK);
    /* A counter that went back (a failover to a replica that had not seen the last INCRs):
     * the next holding's token is still past every earlier one. */
    assert_int_equal(redis_int("DECRBY t:one:fence 5000"), again - 5000);
    sleep_ms(2); /* tokens are never ahead of the clock by more than a few us */
    assert_int_equal(lock_try_lock(c, "t:one", 0, 5000, &raised), LOCK_OK);
    assert_true(raised > again);
    assert_int_equal(lock_unlock(c, "t:one"), LOCK_OK);
}

/*
 * A waiter whose try ends with an error while it stands in line (its retry's connection cut
 * before the script reached Redis) leaves the line on its way out. Otherwise its place would
 * outlive it, and the holder's release would grant the lock to a thread that no longer waits:
 * the next owner would wait for the grant's lease.
 */
static void test_error_leaves_the_line(void **state)
{
    relay *r = NULL;
    lock_client *c = client_through(&r);
    bg_call b = {.c = c, .name = "t:deadplace", .wait_ms = 2000, .lease_ms = LOCK_LEASE_WATCHDOG};

    (void)state;
    load_scripts();
    assert_int_equal(lock_try_lock(g_state.client, "t:deadplace", 0, 10000, NULL), LOCK_OK);
    /* The waiter's first try passes (it joins the line); its second is cut unsent. */
    relay_set(r, RELAY_DELAY, 1, lock__script_sha(LOCK__SCRIPT_ACQUIRE), 1);
    relay_then(r, RELAY_CUT_REQUEST, 0, lock__script_sha(LOCK__SCRIPT_ACQUIRE), 1);
    bg_start(&b);
    bg_join(&b);
    assert_int_equal(relay_triggered(r), 2);
    assert_int_equal(b.rc, LOCK_ERR_REDIS);
    assert_int_equal(redis_int("ZCARD t:deadplace:waiters"), 0); /* it left the line */
    assert_int_equal(lock_unlock(g_state.client, "t:deadplace"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:deadplace"), 0); /* granted to nobody */
    assert_int_equal(other_try_lock(g_state.client, "t:deadplace", 0, true), LOCK_OK);
    lock_client_destroy(c);
    relay_stop(r);
}

/*
 * With sync_replicas, a holding that leave.lua hands over (here: the hold of an acquire whose
 * answer was cut) is kept only once enough replicas have it, as any acquisition. This Redis
 * has no replica: WAIT says 0, the holding is given back, and the call fails.
 */
static void test_sync_on_the_leave_path(void **state)
{
    relay *r = NULL;
    lock_options o;
    lock_client *c = NULL;
    int64_t t0;

    (void)state;
    load_scripts();
    assert_int_equal(relay_start(0, g_state.port, &r), 0);
    lock_options_init(&o);
    o.redis_port = relay_port(r);
    o.command_timeout_ms = TIMEOUT_MS;
    o.waiter_liveness_ms = LIVENESS_MS;
    o.sync_replicas = 1;
    o.sync_timeout_ms = 50;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    relay_set(r, RELAY_CUT_REPLY, 0, lock__script_sha(LOCK__SCRIPT_ACQUIRE), 1);
    t0 = now_ns();
    assert_int_equal(lock_try_lock(c, "t:syncleave", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_ERR_REDIS);
    assert_true(ms_since(t0) <= 3 * TIMEOUT_MS + 50 + SLACK_MS);
    assert_int_equal(relay_triggered(r), 1);
    assert_int_equal(redis_int("EXISTS t:syncleave"), 0); /* taken by leave.lua, given back */
    assert_int_equal(lock_is_held(c, "t:syncleave"), LOCK_ERR_NOT_HELD);
    lock_client_destroy(c);
    relay_stop(r);
}

/* What the thread that raises the counter under a holding saw and did. */
typedef struct raise_under {
    const char *name;
    long long counter; /* the counter it found once the holding existed (0: none in time) */
    int64_t raised;    /* the value it raised it to */
    int rc;            /* lock_fence_raise's */
} raise_under;

/* Waits (1 s at most) for the lock to be held, then raises its counter past what it is, as
 * the service does with a token the storage saw after a failover: the token of another
 * holding. Its own connection: the test's is the main thread's. */
static void *raise_once_held(void *p)
{
    raise_under *u = p;
    redisContext *rc = redisConnect("127.0.0.1", g_state.port);
    int64_t until = now_ns() + 1000 * MS;
    redisReply *r;

    u->rc = LOCK_ERR_REDIS;
    while (rc != NULL && rc->err == 0 && now_ns() < until) {
        r = redisCommand(rc, "EXISTS %s", u->name);
        bool held = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;

        if (r != NULL)
            freeReplyObject(r);
        if (held) {
            r = redisCommand(rc, "GET %s:fence", u->name);
            if (r != NULL && r->type == REDIS_REPLY_STRING)
                u->counter = strtoll(r->str, NULL, 10);
            if (r != NULL)
                freeReplyObject(r);
            u->raised = u->counter + 10;
            u->rc = lock_fence_raise(g_state.client, u->name, u->raised);
            break;
        }
        sleep_ms(1);
    }
    if (rc != NULL)
        redisFree(rc);
    return NULL;
}

/*
 * leave.lua finds a holding nobody knows the token of (the acquire that made it ran, its
 * answer came too late), and the counter was moved under it meanwhile (fence_raise.lua, to a
 * token the storage accepted: another holding's). The holding handed over must present a
 * token of its own, past the raised counter, never the counter itself, which the row would
 * take as the other holding's equal.
 */
static void test_leave_hands_over_its_own_token(void **state)
{
    relay *r = NULL;
    /* A command timeout of 1 s: the raise must fall between the acquire and the leave, which
     * are that far apart, on a loaded machine too. */
    lock_client *c = client_through_timeout(&r, 1000);
    raise_under u = {.name = "t:leaveraise"};
    pthread_t raiser;
    int64_t token = 0;
    int rc;

    (void)state;
    load_scripts();
    /* The acquire runs; its answer comes after the client's timeout; the give-back written
     * behind it on its connection is cut before it reaches Redis (it is release.lua's text:
     * an EVAL); and the client settles its try with leave.lua (a wait of 1 s leaves it the
     * time). The counter is raised between the acquire and the leave. */
    relay_set(r, RELAY_DELAY, 3000, lock__script_sha(LOCK__SCRIPT_ACQUIRE), 1);
    relay_then(r, RELAY_CUT_REQUEST, 0, "release.lua:", 1);
    assert_int_equal(pthread_create(&raiser, NULL, raise_once_held, &u), 0);
    rc = lock_try_lock(c, u.name, 1000, 5000, &token); /* a lease past the wait */
    pthread_join(raiser, NULL);
    assert_int_equal(u.rc, LOCK_OK);
    assert_true(u.counter > 0);
    print_message("leave.lua handed over a holding: rc %d, token %lld; the counter was %lld, "
                  "raised to %lld under it\n",
                  rc, (long long)token, u.counter, (long long)u.raised);
    assert_int_equal(rc, LOCK_OK);
    assert_true(token > u.raised);
    assert_int_equal(lock_is_held(c, u.name), LOCK_OK);
    assert_int_equal(lock_unlock(c, u.name), LOCK_OK);
    lock_client_destroy(c);
    relay_stop(r);
}

#define CASE(t) cmocka_unit_test_setup_teardown(t, case_setup, case_teardown)

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        CASE(test_acquire_late),
        CASE(test_acquire_swallowed),
        CASE(test_acquire_cut),
        CASE(test_acquire_unsent),
        CASE(test_leave_late),
        CASE(test_leave_swallowed),
        CASE(test_leave_cut),
        CASE(test_leave_unsent),
        CASE(test_release_late),
        CASE(test_release_swallowed),
        CASE(test_release_cut),
        CASE(test_release_unsent),
        CASE(test_renew_late),
        CASE(test_renew_swallowed),
        CASE(test_renew_cut),
        CASE(test_renew_unsent),
        CASE(test_grant_after_the_master_moved),
        CASE(test_token_names_one_holding),
        CASE(test_error_leaves_the_line),
        CASE(test_sync_on_the_leave_path),
        CASE(test_leave_hands_over_its_own_token),
    };

    return lock_test_main("test_lost_reply", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
