/*
 * test_sentinel.c - finding the Redis master through real Sentinels, and following a failover
 * (lock/sentinel.c).
 *
 * The program starts, on free loopback ports in temporary directories: a master, a replica of
 * it and three Sentinels (redis-server --sentinel) watching it as "m" with a quorum of 2 and
 * down-after-milliseconds 500, so a failover is quick. Each is stopped by its PID at the end:
 *     build/san/tests/test_sentinel
 *
 * The cases, in order (they share the servers, and the last one moves the master):
 *   parse          REDIS_SENTINELS lists: good ones, and each kind of bad entry refused
 *   discovery      the master found, checked with ROLE; also when the first Sentinel is down
 *   unknown name   a name no Sentinel watches: an error that names it, not an address
 *   not a master   a Sentinel answering with a replica's address (told to watch the replica
 *                  as "r" for this case only): ROLE catches it and discovery refuses it
 *   sync replicas  LOCK_SYNC_REPLICAS=1: held once the replica has it; with the replica
 *                  frozen, released again and refused within the WAIT bound
 *   failover       SENTINEL FAILOVER: the watch hears +switch-master for "m" within the
 *                  bound, discovery now gives the old replica, ROLE says master; a lock
 *                  client on the new master works, and its fencing tokens continue past the
 *                  ones issued before (the counter was replicated: WAIT before the failover)
 *   lost grant     the lesson, forced so that it shows every time: the replica is cut off
 *                  (frozen, its link killed on the master), client A is granted a lock on the
 *                  master, which then dies (SIGKILL) before it could copy it. After the
 *                  failover a second client is granted the same lock on the new master while
 *                  A still believes it holds it: two holders. The second token is larger (the
 *                  counter was lost too and restarts at Redis' clock), so a fence refuses A's
 *                  write; A's release cannot delete B's lock. With LOCK_SYNC_REPLICAS=1 the
 *                  first grant is refused instead, and there is never a second holder.
 *   silent Sentinel the Sentinel the client watches stopped (SIGSTOP), then the master
 *                  killed: the client follows the other two's failover all the same
 */
#include "lock/lock.h"
#include "lock/sentinel.h"
#include "tests/support/redis_server.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <setjmp.h> /* cmocka.h needs these three first */
#include <cmocka.h>

#define SENTINELS 3
#define TIMEOUT_MS 500
#define FAILOVER_WAIT_MS 15000 /* a forced failover takes ~1-2 s; generous for a loaded box */

typedef struct test_state {
    redis_server *master;
    redis_server *replica;
    redis_server *sentinel[SENTINELS];
} test_state;

static test_state g_state;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

/* Runs a command on 127.0.0.1:port; the reply is the caller's (NULL if unreachable). */
static redisReply *command_on(int port, const char *fmt, ...)
{
    struct timeval tv = {1, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    va_list ap;

    if (ctx == NULL || ctx->err != 0)
        goto out;
    redisSetTimeout(ctx, tv);
    va_start(ap, fmt);
    r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
out:
    if (ctx != NULL)
        redisFree(ctx);
    return r;
}

/* Whether INFO replication on port contains text. */
static bool info_has(int port, const char *text)
{
    redisReply *r = command_on(port, "INFO replication");
    bool has = r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, text) != NULL;

    if (r != NULL)
        freeReplyObject(r);
    return has;
}

/* Whether Sentinel port knows a connected replica of master `name`. */
static bool sentinel_sees_replica(int port, const char *name)
{
    redisReply *r = command_on(port, "SENTINEL REPLICAS %s", name);
    bool seen = false;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        const redisReply *fields = r->element[0];

        for (size_t i = 0; i + 1 < fields->elements; i += 2)
            if (strcmp(fields->element[i]->str, "flags") == 0)
                seen = strcmp(fields->element[i + 1]->str, "slave") == 0;
    }
    if (r != NULL)
        freeReplyObject(r);
    return seen;
}

/* Whether Sentinel port names the server on master_port as the master of "m". */
static bool sentinel_names(int port, int master_port)
{
    redisReply *r = command_on(port, "SENTINEL GET-MASTER-ADDR-BY-NAME m");
    bool names = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                 r->element[1]->type == REDIS_REPLY_STRING &&
                 atoi(r->element[1]->str) == master_port;

    if (r != NULL)
        freeReplyObject(r);
    return names;
}

/* How many other Sentinels watching "m" Sentinel port knows of. */
static size_t sentinel_peers(int port)
{
    redisReply *r = command_on(port, "SENTINEL SENTINELS m");
    size_t n = r != NULL && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;

    if (r != NULL)
        freeReplyObject(r);
    return n;
}

/*
 * Waits (up to SETTLE_WAIT_MS) until the topology is settled around the master on
 * master_port: its replica (on replica_port) in sync and counted online by the master (after
 * a diskless sync, only from the replica's first acknowledgement on: before that WAIT does
 * not count it), and every Sentinel naming that master, seeing the replica, and knowing the
 * two other Sentinels. A Sentinel forgets its peers when it switches masters and finds them
 * again through their hello messages (every 2 s); until then the quorum that declares the
 * master down cannot form, and a master killed at that moment is not failed over.
 *
 * The bound: a Sentinel asks each instance's INFO every 10 s outside a failover. An old master
 * started again is turned into a replica only at the next INFO that finds it, and each
 * Sentinel lists that replica only at its next INFO of the master: two periods, and the sync,
 * before the topology is whole. 15 s was once not enough under ThreadSanitizer on a busy
 * machine; 30 s is three periods. It is a wait for the setup, not a bound the lock promises.
 */
#define SETTLE_WAIT_MS 30000

static bool settled(int master_port, int replica_port)
{
    for (int waited = 0; waited < SETTLE_WAIT_MS; waited += 50) {
        bool ok = info_has(replica_port, "master_link_status:up") &&
                  info_has(master_port, "state=online");

        for (int i = 0; ok && i < SENTINELS; i++) {
            int port = redis_server_port(g_state.sentinel[i]);

            ok = sentinel_names(port, master_port) && sentinel_sees_replica(port, "m") &&
                 sentinel_peers(port) == SENTINELS - 1;
        }
        if (ok)
            return true;
        sleep_ms(50);
    }
    return false;
}

/* The REDIS_SENTINELS list of our Sentinels, optionally after a dead entry. */
static void sentinel_list(char *buf, size_t len, const char *first)
{
    size_t used = (size_t)snprintf(buf, len, "%s", first != NULL ? first : "");

    for (int i = 0; i < SENTINELS; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s127.0.0.1:%d", used > 0 ? "," : "",
                                 redis_server_port(g_state.sentinel[i]));
}

static int group_setup(void **state)
{
    char conf[512];
    int mport, rport;

    (void)state;
    if (redis_server_start(&g_state.master) != 0)
        return -1;
    mport = redis_server_port(g_state.master);
    snprintf(conf, sizeof(conf), "replicaof 127.0.0.1 %d\n", mport);
    if (redis_server_start_conf(&g_state.replica, conf, false) != 0)
        return -1;
    rport = redis_server_port(g_state.replica);
    snprintf(conf, sizeof(conf),
             "sentinel monitor m 127.0.0.1 %d 2\n"
             "sentinel down-after-milliseconds m 500\n"
             "sentinel failover-timeout m 3000\n",
             mport);
    for (int i = 0; i < SENTINELS; i++)
        if (redis_server_start_conf(&g_state.sentinel[i], conf, true) != 0)
            return -1;
    if (settled(mport, rport))
        return 0;
    fprintf(stderr, "test_sentinel: the replica and the Sentinels did not settle in %d s\n",
            SETTLE_WAIT_MS / 1000);
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < SENTINELS; i++)
        redis_server_destroy(g_state.sentinel[i]);
    redis_server_destroy(g_state.replica);
    redis_server_destroy(g_state.master);
    return 0;
}

/* ---- cases ---- */

static void test_parse(void **state)
{
    lock__sentinels s;

    (void)state;
    assert_int_equal(
        lock__sentinels_parse(&s, "127.0.0.1:26379, redis-s2:26380 ,::1:26381", "mymaster", 500),
        LOCK_OK);
    assert_int_equal(s.count, 3);
    assert_string_equal(s.addr[0].host, "127.0.0.1");
    assert_int_equal(s.addr[0].port, 26379);
    assert_string_equal(s.addr[1].host, "redis-s2");
    assert_int_equal(s.addr[1].port, 26380);
    assert_string_equal(s.addr[2].host, "::1"); /* the last colon separates the port */
    assert_string_equal(s.master_name, "mymaster");

    const char *bad[] = {
        "",        "host",  "host:",    ":26379", "h:0",
        "h:65536", "h:12x", "h:1,,h:2", "h:1,",   "a:1,a:2,a:3,a:4,a:5,a:6,a:7,a:8,a:9"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(lock__sentinels_parse(&s, bad[i], "m", 500), LOCK_ERR_INVALID);
        assert_true(lock_last_error()[0] != '\0');
    }
    assert_int_equal(lock__sentinels_parse(&s, "h:1", "", 500), LOCK_ERR_INVALID);
    assert_int_equal(lock__sentinels_parse(&s, "h:1", "m", 0), LOCK_ERR_INVALID);
}

static void test_discovery(void **state)
{
    char list[256];
    lock__sentinels s;
    lock__addr master;

    (void)state;
    sentinel_list(list, sizeof(list), NULL);
    assert_int_equal(lock__sentinels_parse(&s, list, "m", TIMEOUT_MS), LOCK_OK);
    assert_int_equal(lock__sentinel_master(&s, &master), LOCK_OK);
    assert_string_equal(master.host, "127.0.0.1");
    assert_int_equal(master.port, redis_server_port(g_state.master));

    /* The first Sentinel down (nothing listens on port 1): the next one answers. */
    sentinel_list(list, sizeof(list), "127.0.0.1:1");
    assert_int_equal(lock__sentinels_parse(&s, list, "m", TIMEOUT_MS), LOCK_OK);
    assert_int_equal(lock__sentinel_master(&s, &master), LOCK_OK);
    assert_int_equal(master.port, redis_server_port(g_state.master));
}

static void test_unknown_name(void **state)
{
    char list[256];
    lock__sentinels s;
    lock__addr master;

    (void)state;
    sentinel_list(list, sizeof(list), NULL);
    assert_int_equal(lock__sentinels_parse(&s, list, "nobody", TIMEOUT_MS), LOCK_OK);
    assert_int_equal(lock__sentinel_master(&s, &master), LOCK_ERR_REDIS);
    assert_non_null(strstr(lock_last_error(), "nobody"));
}

static void test_not_a_master(void **state)
{
    char list[256];
    lock__sentinels s;
    lock__addr master;

    redisReply *r;
    int rc;

    (void)state;
    /* Each Sentinel watches the replica as a master named "r", for this case only: a
     * Sentinel answers is-master-down-by-addr about the first master it watches at an
     * address, so once the replica is promoted, "r" (never down) would outvote "m" and no
     * quorum would ever declare m's master down. */
    for (int i = 0; i < SENTINELS; i++) {
        r = command_on(redis_server_port(g_state.sentinel[i]), "SENTINEL MONITOR r 127.0.0.1 %d 2",
                       redis_server_port(g_state.replica));
        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STATUS);
        freeReplyObject(r);
    }
    sentinel_list(list, sizeof(list), NULL);
    assert_int_equal(lock__sentinels_parse(&s, list, "r", TIMEOUT_MS), LOCK_OK);
    rc = lock__sentinel_master(&s, &master);
    for (int i = 0; i < SENTINELS; i++) {
        r = command_on(redis_server_port(g_state.sentinel[i]), "SENTINEL REMOVE r");
        assert_non_null(r);
        freeReplyObject(r);
    }
    assert_int_equal(rc, LOCK_ERR_REDIS);
    assert_non_null(strstr(lock_last_error(), "is not a master"));
}

/* LOCK_SYNC_REPLICAS: with the replica answering, an acquisition waits for it and holds;
 * with the replica frozen (SIGSTOP), the WAIT gets no acknowledgement, the lock is released
 * again and try_lock fails within the bound. */
static void test_sync_replicas(void **state)
{
    int mport = redis_server_port(g_state.master);
    lock_options opts;
    lock_client *c;
    redisReply *r;
    int64_t token, started, took;
    int rc;

    (void)state;
    lock_options_init(&opts);
    opts.redis_port = mport;
    opts.pool_size = 2;
    opts.sync_replicas = 1;
    opts.sync_timeout_ms = 200;
    assert_int_equal(lock_client_create(&opts, &c), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:sync", 0, 5000, &token), LOCK_OK);
    r = command_on(redis_server_port(g_state.replica), "EXISTS t:sync");
    assert_non_null(r);
    assert_int_equal(r->integer, 1); /* WAIT returned: the replica has it */
    freeReplyObject(r);
    assert_int_equal(lock_unlock(c, "t:sync"), LOCK_OK);

    assert_int_equal(kill(redis_server_pid(g_state.replica), SIGSTOP), 0);
    started = now_ms();
    rc = lock_try_lock(c, "t:sync", 0, 5000, &token);
    took = now_ms() - started;
    assert_int_equal(kill(redis_server_pid(g_state.replica), SIGCONT), 0);
    assert_int_equal(rc, LOCK_ERR_REDIS);
    assert_non_null(strstr(lock_last_error(), "replicas acknowledged"));
    assert_true(took >= 200 && took < 200 + 500 + 500);
    r = command_on(mport, "EXISTS t:sync");
    assert_non_null(r);
    assert_int_equal(r->integer, 0); /* undone on the master */
    freeReplyObject(r);
    lock_client_destroy(c);
}

/* Takes and releases "t:fence" on port, returning the token. */
static int64_t token_on(int port)
{
    lock_options opts;
    lock_client *c;
    int64_t token = -1;

    lock_options_init(&opts);
    opts.redis_port = port;
    opts.pool_size = 2;
    assert_int_equal(lock_client_create(&opts, &c), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:fence", 1000, 1000, &token), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:fence"), LOCK_OK);
    lock_client_destroy(c);
    return token;
}

static void test_failover(void **state)
{
    char list[256];
    lock__sentinels s;
    lock__sentinel_watch *w;
    lock__addr heard, master;
    int old_port = redis_server_port(g_state.master);
    int new_port = redis_server_port(g_state.replica);
    int64_t before = 0, after, started;
    redisReply *r;
    int rc;

    (void)state;
    lock_options opts;
    lock_client *c;

    /* A client that knows only the Sentinels, made before the failover and kept after. */
    sentinel_list(list, sizeof(list), NULL);
    lock_options_init(&opts);
    opts.redis_port = 1; /* nothing there: only the Sentinels can say where the master is */
    opts.sentinels = list;
    opts.master_name = "m";
    opts.pool_size = 2;
    assert_int_equal(lock_client_create(&opts, &c), LOCK_OK);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(lock_try_lock(c, "t:fence", 1000, 1000, &before), LOCK_OK);
        assert_int_equal(lock_unlock(c, "t:fence"), LOCK_OK);
    }
    assert_true(before >= 5);
    assert_true(token_on(old_port) > before); /* it was the old master that counted */
    before = token_on(old_port);
    /* The tokens' counter reaches the replica before the failover. */
    r = command_on(old_port, "WAIT 1 2000");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);

    assert_int_equal(lock__sentinels_parse(&s, list, "m", TIMEOUT_MS), LOCK_OK);
    w = lock__sentinel_watch_create(&s);
    assert_non_null(w);
    /* Nothing happens: the wait ends on time, and the subscription stays usable. */
    started = (int64_t)time(NULL);
    assert_int_equal(lock__sentinel_watch_wait(w, 100, &heard), LOCK_ERR_TIMEOUT);

    r = command_on(redis_server_port(g_state.sentinel[0]), "SENTINEL FAILOVER m");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);

    /* +switch-master for "m" (the watch skips others) within the bound. */
    do {
        rc = lock__sentinel_watch_wait(w, 500, &heard);
    } while (rc != LOCK_OK && (int64_t)time(NULL) - started < FAILOVER_WAIT_MS / 1000);
    assert_int_equal(rc, LOCK_OK);
    assert_int_equal(heard.port, new_port);
    lock__sentinel_watch_destroy(w);

    /* The promoted replica may take a moment to report ROLE master after the switch. */
    for (int waited = 0; waited < 5000; waited += 50) {
        rc = lock__sentinel_master(&s, &master);
        if (rc == LOCK_OK && master.port == new_port)
            break;
        sleep_ms(50);
    }
    assert_int_equal(rc, LOCK_OK);
    assert_int_equal(master.port, new_port);

    /* The lock works on the new master, and its tokens go on from the old master's. */
    after = token_on(new_port);
    assert_true(after > before);

    /* The demoted master becomes a replica of the new one. The Sentinels do this themselves,
     * but only once it has reported itself a master for 8 s (4 of their publish periods);
     * the test does not wait for that. Until then it still takes writes: a client whose
     * Sentinel has not yet heard of the switch locks there (two masters, for a moment: the
     * fence is what keeps the books then). */
    r = command_on(old_port, "REPLICAOF 127.0.0.1 %d", new_port);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    assert_true(settled(new_port, old_port));

    /* The client made before the failover followed it without being restarted: its
     * lock is taken on the new master, with a token past every earlier one. (Every
     * Sentinel knows the new master now; the one the client listens to announced it.) */
    before = after;
    rc = LOCK_ERR_REDIS;
    for (int waited = 0; rc != LOCK_OK && waited < 5000; waited += 50) {
        rc = lock_try_lock(c, "t:follow", 0, 5000, &after);
        if (rc != LOCK_OK)
            sleep_ms(50);
    }
    assert_int_equal(rc, LOCK_OK);
    assert_true(after > before);
    r = command_on(new_port, "EXISTS t:follow");
    assert_non_null(r);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_int_equal(lock_unlock(c, "t:follow"), LOCK_OK);
    lock_client_destroy(c);
}

/* A client that knows only the Sentinels (nothing listens on redis_port 1). */
static lock_client *sentinel_client(const char *list, int sync_replicas)
{
    lock_options opts;
    lock_client *c = NULL;

    lock_options_init(&opts);
    opts.redis_port = 1;
    opts.sentinels = list;
    opts.master_name = "m";
    opts.pool_size = 2;
    opts.sync_replicas = sync_replicas;
    opts.sync_timeout_ms = 100;
    assert_int_equal(lock_client_create(&opts, &c), LOCK_OK);
    return c;
}

/* Waits (up to bound_ms) until the Sentinels name the server on port as the master and its
 * ROLE agrees. */
static bool sentinels_name_master(const char *list, int port, int bound_ms)
{
    lock__sentinels s;
    lock__addr master;

    assert_int_equal(lock__sentinels_parse(&s, list, "m", TIMEOUT_MS), LOCK_OK);
    for (int waited = 0; waited < bound_ms; waited += 50) {
        if (lock__sentinel_master(&s, &master) == LOCK_OK && master.port == port)
            return true;
        sleep_ms(50);
    }
    return false;
}

/*
 * The failover loses a granted lock (README, "When things fail"), forced: runs after
 * test_failover, so g_state.replica is the master now and g_state.master its replica.
 *
 * The replica is frozen (SIGSTOP) and the master drops its link (CLIENT KILL TYPE replica):
 * from then on the master's writes go nowhere, and the replica cannot reconnect and fetch
 * them while it is frozen. Then the grants, then SIGKILL of the master, then SIGCONT. The
 * freeze lasts a few hundred ms, under down-after-milliseconds (500), so the Sentinels never
 * take the replica for down and it is the one they promote.
 */
static void test_lost_grant(void **state)
{
    redis_server *master = g_state.replica, *replica = g_state.master;
    int mport = redis_server_port(master), rport = redis_server_port(replica);
    char list[256];
    lock_client *a, *sync, *b;
    int64_t token_a = 0, token_b = 0, token_sync = 0;
    redisReply *r;
    int rc, rc_sync;

    (void)state;
    sentinel_list(list, sizeof(list), NULL);
    assert_true(settled(mport, rport));
    assert_true(sentinels_name_master(list, mport, 5000));
    a = sentinel_client(list, 0);
    sync = sentinel_client(list, 1);

    /* Cut the replica off. */
    assert_int_equal(kill(redis_server_pid(replica), SIGSTOP), 0);
    r = command_on(mport, "CLIENT KILL TYPE replica");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);

    /* A is granted the lock by the master alone. With the replication wait the grant is
     * refused (no replica acknowledged it) and undone. */
    rc = lock_try_lock(a, "t:lost", 0, 30000, &token_a);
    rc_sync = lock_try_lock(sync, "t:lost-sync", 0, 30000, &token_sync);

    /* The master dies with both writes unreplicated; the replica comes back. */
    assert_int_equal(redis_server_kill(master), 0);
    assert_int_equal(kill(redis_server_pid(replica), SIGCONT), 0);
    assert_int_equal(rc, LOCK_OK);
    assert_int_equal(rc_sync, LOCK_ERR_REDIS);
    assert_non_null(strstr(lock_last_error(), "replicas acknowledged"));
    assert_int_equal(lock_is_held(sync, "t:lost-sync"), LOCK_ERR_NOT_HELD);

    /* The Sentinels promote the replica, which never saw A's lock. */
    assert_true(sentinels_name_master(list, rport, FAILOVER_WAIT_MS));
    r = command_on(rport, "EXISTS t:lost");
    assert_non_null(r);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);

    /* A second client is granted the same lock while A still believes it holds it. */
    b = sentinel_client(list, 0);
    rc = LOCK_ERR_REDIS;
    for (int waited = 0; rc != LOCK_OK && waited < 5000; waited += 50) {
        rc = lock_try_lock(b, "t:lost", 0, 30000, &token_b);
        if (rc != LOCK_OK)
            sleep_ms(50);
    }
    assert_int_equal(rc, LOCK_OK);
    assert_int_equal(lock_is_held(a, "t:lost"), LOCK_OK);
    assert_int_equal(lock_is_held(b, "t:lost"), LOCK_OK);
    fprintf(stderr, "    two holders of t:lost: A (token %lld, old master), B (token %lld, new)\n",
            (long long)token_a, (long long)token_b);
    /* The fence counter was lost with the lock, and restarted at the new master's clock: B's
     * token is the larger, so storage that keeps the highest token it has seen (the goods row,
     * db_stock_claim) refuses A once B has written. */
    assert_true(token_b > token_a);
    /* A's release cannot delete B's lock: the owner check. */
    /* A's client follows the failover by itself; the Sentinel its watch listens to may hear
     * of the switch up to a publish period (2 s) after the one that made it. */
    rc = LOCK_ERR_REDIS;
    for (int waited = 0; rc != LOCK_OK && waited < 5000; waited += 50) {
        rc = lock_ping(a);
        if (rc != LOCK_OK)
            sleep_ms(50);
    }
    assert_int_equal(rc, LOCK_OK);
    assert_int_equal(lock_unlock(a, "t:lost"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_is_held(b, "t:lost"), LOCK_OK);
    assert_int_equal(lock_unlock(b, "t:lost"), LOCK_OK);

    /* With the replication wait nobody held t:lost-sync: B's grant is the only one. */
    assert_int_equal(lock_try_lock(b, "t:lost-sync", 0, 30000, &token_b), LOCK_OK);
    assert_int_equal(lock_unlock(b, "t:lost-sync"), LOCK_OK);

    lock_client_destroy(b);
    lock_client_destroy(sync);
    lock_client_destroy(a);
}

/*
 * A silent Sentinel must not hide a failover: runs last, after test_lost_grant (g_state.master
 * is the master; g_state.replica, killed there, comes back as its replica). The Sentinel the
 * client's follower watches (the first of its list) is stopped (SIGSTOP: its connections stay
 * open and say nothing), then the master is killed. The two others promote the replica; the
 * client must follow within the bound of sentinel.h: down-after (500 ms) + the promotion +
 * LOCK_SENTINEL_RECHECK_MS + one ask. Before, the follower waited on the silent watch and
 * every try_lock failed on the dead master until the Sentinel resumed.
 */
static void test_silent_sentinel(void **state)
{
    redis_server *master = g_state.master, *replica = g_state.replica;
    redis_server *watched = g_state.sentinel[0];
    char list[256];
    lock_client *c;
    int64_t killed, took = -1;
    int rc;

    (void)state;
    assert_int_equal(redis_server_restart(replica), 0);
    assert_true(settled(redis_server_port(master), redis_server_port(replica)));
    sentinel_list(list, sizeof(list), NULL);
    c = sentinel_client(list, 0);
    assert_int_equal(lock_try_lock(c, "t:silent", 0, 30000, NULL), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:silent"), LOCK_OK);
    sleep_ms(300); /* the follower's watch is subscribed on the first Sentinel by now */

    assert_int_equal(kill(redis_server_pid(watched), SIGSTOP), 0);
    assert_int_equal(redis_server_kill(master), 0);
    killed = now_ms();
    for (rc = LOCK_ERR_REDIS; now_ms() - killed < 12000; sleep_ms(50)) {
        rc = lock_try_lock(c, "t:silent", 0, 30000, NULL);
        if (rc == LOCK_OK) {
            took = now_ms() - killed;
            break;
        }
    }
    assert_int_equal(kill(redis_server_pid(watched), SIGCONT), 0);
    fprintf(stderr,
            "    watched Sentinel stopped, master killed: the client took a lock on the "
            "new master %lld ms later\n",
            (long long)took);
    assert_int_equal(rc, LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:silent"), LOCK_OK);
    lock_client_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),         cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_unknown_name),  cmocka_unit_test(test_not_a_master),
        cmocka_unit_test(test_sync_replicas), cmocka_unit_test(test_failover),
        cmocka_unit_test(test_lost_grant),    cmocka_unit_test(test_silent_sentinel),
    };

    return cmocka_run_group_tests_name("sentinel", tests, group_setup, group_teardown);
}
