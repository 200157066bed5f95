/*
 * test_cluster.c - the lock on a real Redis Cluster (lock/cluster.c routing the lock's
 * commands by slot).
 *
 * The program starts three redis-servers with cluster-enabled yes on free loopback ports (and
 * free cluster-bus ports, set with cluster-port so that they stay below 32768), joins them with
 * `redis-cli --cluster create ... --cluster-yes` (three masters, no replicas: each serves a
 * third of the 16384 slots), and stops each by its PID at the end:
 *     build/san/tests/test_cluster
 *
 * The cases, in order (they share the cluster; the last ones move slots):
 *   spread        one lock on each master ("lock:goods:{N}", N chosen so): taken, reentrant
 *                 (same token), its keys found on the master of its slot and nowhere else,
 *                 released, taken again with a larger token; a name without a hash tag is
 *                 refused; the ladder's one-key commands (naive.c) reach every master too
 *   exclusion     two clients, four threads each, over the three locks: never two holders of
 *                 one lock at once, and every attempt ends holding it
 *   wake-up       a waiter on a lock served by a master other than the one the subscriber
 *                 listens on (the first seed) is woken by the release, long before the lease
 *                 would end it: a classic PUBLISH reaches every node of a cluster
 *   watchdog      a short watchdog lease renewed on the lock's master while held
 *   moved         the slot of a held lock migrated to another master (keys and all): the next
 *                 commands follow the MOVED, the same holding goes on (same token), the
 *                 release lands on the new master
 *   ask           a slot half-way through a migration, a held lock's keys already moved: the
 *                 holding is read on the importing master after ASKING (the old one answers
 *                 ASK); a new take meets TRYAGAIN (its script names the line of waiters, which
 *                 no node has) and keeps trying until the migration ends, then follows the
 *                 MOVED, waits in line and is called by the holder's release
 *   failover      a fourth server joins as node 1's replica; CLUSTER FAILOVER swaps the roles
 *                 and the client follows the MOVED to its holding; then the new master is
 *                 killed and the client, whose commands fail meanwhile, reads the map again
 *                 and takes the lock on node 1 once the cluster promoted it back; a second
 *                 client, whose subscriber listened on the killed node, moves it to a live
 *                 master and its waiter is still woken by a release
 */
#include "lock/lock.h"
#include "lock/naive.h"
#include "lock/slot.h"
#include "tests/support/ports.h"
#include "tests/support/redis_server.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <setjmp.h> /* cmocka.h needs these three first */
#include <cmocka.h>

#define NODES 3
#define TIMEOUT_MS 500
/* A node's configuration; %d: its cluster bus port. A node is taken for failed after 1 s
 * without an answer, so that a killed master's replica is promoted within a few seconds. */
#define CLUSTER_CONF                                                                               \
    "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 1000\n"             \
    "cluster-port %d\n"

static redis_server *g_node[NODES];
static redis_server *g_replica; /* test_failover's replica of node 1 */
static int g_port[NODES];
static int g_bus[NODES]; /* cluster bus ports */
static char g_id[NODES][64];
static char g_seeds[128];
/* One lock name per master: g_name[i] is served by node i. */
static char g_name[NODES][64];

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

/* Runs a command on node i on a connection of its own; with asking, after ASKING on it. The
 * reply is the caller's (NULL if unreachable). */
static redisReply *node_command(int i, bool asking, const char *fmt, ...)
{
    struct timeval tv = {2, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", g_port[i], tv);
    redisReply *r = NULL;
    va_list ap;

    if (ctx == NULL || ctx->err != 0)
        goto out;
    redisSetTimeout(ctx, tv);
    if (asking) {
        r = redisCommand(ctx, "ASKING");
        if (r == NULL)
            goto out;
        freeReplyObject(r);
    }
    va_start(ap, fmt);
    r = redisvCommand(ctx, fmt, ap);
    va_end(ap);
out:
    if (ctx != NULL)
        redisFree(ctx);
    return r;
}

/* Runs a command on node i and checks that the answer is not an error. */
static void node_ok(int i, const char *fmt, const char *a, const char *b)
{
    redisReply *r = node_command(i, false, fmt, a, b);

    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("node %d: %s: %s", i, fmt, r->str);
    freeReplyObject(r);
}

/* EXISTS key on node i: 1 or 0; -1 when node i redirects (it does not serve the slot). */
static long long exists_on(int i, bool asking, const char *key)
{
    redisReply *r = node_command(i, asking, "EXISTS %s", key);
    long long v;

    assert_non_null(r);
    v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

/* The node serving key's slot now (the one that does not redirect), or -1. */
static int owner_of(const char *key)
{
    for (int i = 0; i < NODES; i++)
        if (exists_on(i, false, key) >= 0)
            return i;
    return -1;
}

/* Whether every node says cluster_state:ok and agrees on who serves slot 0 and 16383. */
static bool cluster_ok(void)
{
    for (int i = 0; i < NODES; i++) {
        redisReply *r = node_command(i, false, "CLUSTER INFO");
        bool ok = r != NULL && r->type == REDIS_REPLY_STRING &&
                  strstr(r->str, "cluster_state:ok") != NULL;

        if (r != NULL)
            freeReplyObject(r);
        if (!ok)
            return false;
    }
    return owner_of("{a}") >= 0 && owner_of("{b}") >= 0;
}

static int group_setup(void **state)
{
    char conf[256], cmd[512];

    (void)state;
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < NODES; i++) {
        /* The bus port is set, not left at port + 10000: that could be above 32767. */
        g_bus[i] = support_free_port();
        snprintf(conf, sizeof(conf), CLUSTER_CONF, g_bus[i]);
        if (redis_server_start_conf(&g_node[i], conf, false) != 0)
            return -1;
        g_port[i] = redis_server_port(g_node[i]);
    }
    snprintf(cmd, sizeof(cmd),
             "timeout 30 redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d 127.0.0.1:%d "
             "--cluster-yes >/dev/null 2>&1",
             g_port[0], g_port[1], g_port[2]);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_cluster: redis-cli --cluster create failed: %s\n", cmd);
        return -1;
    }
    for (int64_t until = now_ms() + 15000; !cluster_ok(); sleep_ms(100))
        if (now_ms() > until) {
            fprintf(stderr, "test_cluster: the cluster did not become ok in 15 s\n");
            return -1;
        }
    for (int i = 0; i < NODES; i++) {
        redisReply *r = node_command(i, false, "CLUSTER MYID");

        if (r == NULL || r->type != REDIS_REPLY_STRING)
            return -1;
        snprintf(g_id[i], sizeof(g_id[i]), "%s", r->str);
        freeReplyObject(r);
    }
    snprintf(g_seeds, sizeof(g_seeds), "127.0.0.1:%d,127.0.0.1:%d", g_port[0], g_port[1]);
    /* One goods lock per master. */
    for (int n = 1, found = 0; found < NODES && n < 1000; n++) {
        char name[64];
        int owner;

        snprintf(name, sizeof(name), "lock:goods:{%d}", n);
        owner = owner_of(name);
        if (owner >= 0 && g_name[owner][0] == '\0') {
            snprintf(g_name[owner], sizeof(g_name[owner]), "%s", name);
            found++;
        }
    }
    for (int i = 0; i < NODES; i++)
        if (g_name[i][0] == '\0')
            return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NODES; i++)
        redis_server_destroy(g_node[i]);
    redis_server_destroy(g_replica);
    return 0;
}

static lock_client *new_client(int64_t watchdog_lease_ms)
{
    lock_options o;
    lock_client *c = NULL;

    lock_options_init(&o);
    o.cluster_nodes = g_seeds;
    o.connect_timeout_ms = TIMEOUT_MS;
    o.command_timeout_ms = TIMEOUT_MS;
    o.pool_size = 8;
    if (watchdog_lease_ms > 0)
        o.watchdog_lease_ms = watchdog_lease_ms;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

/* ---- cases ---- */

static void test_options(void **state)
{
    lock_options o;
    lock_client *c = NULL;

    (void)state;
    lock_options_init(&o);
    o.cluster_nodes = g_seeds;
    o.sync_replicas = 1; /* WAIT is not routed: refused */
    assert_int_equal(lock_client_create(&o, &c), LOCK_ERR_INVALID);
    o.sync_replicas = 0;
    o.sentinels = "127.0.0.1:1";
    o.master_name = "m";
    assert_int_equal(lock_client_create(&o, &c), LOCK_ERR_INVALID);
    o.sentinels = o.master_name = NULL;
    o.cluster_nodes = "127.0.0.1"; /* no port */
    assert_int_equal(lock_client_create(&o, &c), LOCK_ERR_INVALID);
    assert_null(c);
}

static void test_spread(void **state)
{
    lock_client *c = new_client(0);
    int64_t t1, t2, t3;
    char fence[80];
    bool acquired;

    (void)state;
    assert_int_equal(lock_ping(c), LOCK_OK);
    for (int i = 0; i < NODES; i++) {
        const char *name = g_name[i];

        snprintf(fence, sizeof(fence), "%s:fence", name);
        assert_int_equal(lock_try_lock(c, name, 0, 10000, &t1), LOCK_OK);
        assert_int_equal(lock_try_lock(c, name, 0, 10000, &t2), LOCK_OK);
        assert_true(t1 > 0);
        assert_int_equal(t1, t2);
        /* Both keys on the master of the tag's slot; every other node redirects. */
        for (int j = 0; j < NODES; j++) {
            assert_int_equal(exists_on(j, false, name), j == i ? 1 : -1);
            assert_int_equal(exists_on(j, false, fence), j == i ? 1 : -1);
        }
        assert_int_equal(lock_unlock(c, name), LOCK_OK);
        assert_int_equal(exists_on(i, false, name), 1); /* one hold left */
        assert_int_equal(lock_unlock(c, name), LOCK_OK);
        assert_int_equal(exists_on(i, false, name), 0);
        assert_int_equal(lock_unlock(c, name), LOCK_ERR_NOT_HELD);
        assert_int_equal(lock_try_lock(c, name, 0, 10000, &t3), LOCK_OK);
        assert_true(t3 > t1);
        assert_int_equal(lock_unlock(c, name), LOCK_OK);
    }
    /* Without a hash tag the lock and its counter could be in two slots: refused. */
    assert_int_equal(lock_try_lock(c, "lock:goods:1", 0, 10000, &t1), LOCK_ERR_INVALID);
    assert_non_null(strstr(lock_last_error(), "hash tag"));

    /* The ladder's one-key commands are routed the same way. */
    for (int i = 0; i < NODES; i++) {
        char key[80], value[32];
        bool found;

        snprintf(key, sizeof(key), "%s:setnx", g_name[i]);
        assert_int_equal(naive_setnx(c, key, &acquired), LOCK_OK);
        assert_true(acquired);
        assert_int_equal(naive_setnx(c, key, &acquired), LOCK_OK);
        assert_false(acquired);
        assert_int_equal(exists_on(i, false, key), 1);
        assert_int_equal(naive_get(c, key, value, sizeof(value), &found), LOCK_OK);
        assert_true(found);
        assert_string_equal(value, "1");
        assert_int_equal(naive_delete_if_value(c, key, "1", &acquired), LOCK_OK);
        assert_true(acquired); /* deleted */
        assert_int_equal(exists_on(i, false, key), 0);
    }
    lock_client_destroy(c);
}

/* ---- exclusion ---- */

#define THREADS_PER_CLIENT 4
#define ROUNDS 25

static _Atomic int g_inside[NODES];
static _Atomic int g_overlaps, g_acquired, g_failed;

typedef struct worker {
    lock_client *c;
    int seed;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;

    for (int r = 0; r < ROUNDS; r++) {
        int i = (w->seed + r) % NODES;

        if (lock_try_lock(w->c, g_name[i], 10000, 5000, NULL) != LOCK_OK) {
            atomic_fetch_add(&g_failed, 1);
            continue;
        }
        atomic_fetch_add(&g_acquired, 1);
        if (atomic_fetch_add(&g_inside[i], 1) != 0)
            atomic_fetch_add(&g_overlaps, 1);
        sleep_ms(1);
        atomic_fetch_sub(&g_inside[i], 1);
        if (lock_unlock(w->c, g_name[i]) != LOCK_OK)
            atomic_fetch_add(&g_failed, 1);
    }
    return NULL;
}

static void test_exclusion(void **state)
{
    lock_client *a = new_client(0), *b = new_client(0);
    pthread_t t[2 * THREADS_PER_CLIENT];
    worker w[2 * THREADS_PER_CLIENT];
    int64_t token;

    (void)state;
    /* One holder, the other client waits in vain. */
    assert_int_equal(lock_try_lock(a, g_name[2], 0, 10000, &token), LOCK_OK);
    assert_int_equal(lock_try_lock(b, g_name[2], 0, 10000, &token), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_try_lock(b, g_name[2], 200, 10000, &token), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_unlock(a, g_name[2]), LOCK_OK);

    for (int i = 0; i < 2 * THREADS_PER_CLIENT; i++) {
        w[i].c = i % 2 == 0 ? a : b;
        w[i].seed = i;
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 2 * THREADS_PER_CLIENT; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&g_overlaps), 0);
    assert_int_equal(atomic_load(&g_failed), 0);
    assert_int_equal(atomic_load(&g_acquired), 2 * THREADS_PER_CLIENT * ROUNDS);
    lock_client_destroy(a);
    lock_client_destroy(b);
}

/* ---- wake-up through pub/sub on another node ---- */

typedef struct waiter_arg {
    lock_client *c;
    const char *name;
    int rc;
    int64_t acquired_ms;
} waiter_arg;

static void *waiter_main(void *arg)
{
    waiter_arg *w = arg;

    w->rc = lock_try_lock(w->c, w->name, 8000, 10000, NULL);
    w->acquired_ms = now_ms();
    if (w->rc == LOCK_OK)
        lock_unlock(w->c, w->name);
    return NULL;
}

static void test_wake_up(void **state)
{
    lock_client *a = new_client(0), *b = new_client(0);
    /* The subscriber listens on the first seed, node 0: the lock of node 2 is elsewhere. */
    waiter_arg w = {.c = b, .name = g_name[2]};
    pthread_t t;
    int64_t released;

    (void)state;
    assert_int_equal(lock_try_lock(a, g_name[2], 0, 20000, NULL), LOCK_OK);
    assert_int_equal(pthread_create(&t, NULL, waiter_main, &w), 0);
    sleep_ms(500); /* the waiter is subscribed and asleep: the lease has 19 s left */
    released = now_ms();
    assert_int_equal(lock_unlock(a, g_name[2]), LOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, LOCK_OK);
    /* Woken by the message: well within a second, not after the 20 s lease. */
    assert_true(w.acquired_ms - released < 1500);
    lock_client_destroy(a);
    lock_client_destroy(b);
}

static void test_watchdog(void **state)
{
    lock_client *c = new_client(600); /* renewed every 200 ms */
    lock_stats st;
    redisReply *r;
    int owner = 1;

    (void)state;
    assert_int_equal(lock_try_lock(c, g_name[owner], 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleep_ms(1500); /* 2.5 leases */
    assert_int_equal(lock_is_held(c, g_name[owner]), LOCK_OK);
    r = node_command(owner, false, "PTTL %s", g_name[owner]);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_true(r->integer > 0);
    freeReplyObject(r);
    lock_get_stats(c, &st);
    assert_true(st.renewals >= 3);
    assert_int_equal(st.lost, 0);
    assert_int_equal(lock_unlock(c, g_name[owner]), LOCK_OK);
    assert_int_equal(exists_on(owner, false, g_name[owner]), 0);
    lock_client_destroy(c);
}

/* ---- slot migrations ---- */

static void setslot_everywhere(int slot, int to)
{
    char s[8];

    snprintf(s, sizeof(s), "%d", slot);
    /* The new owner first, then the old one, then the rest (Redis' documented order). */
    for (int k = 0; k < NODES; k++) {
        int i = (to + k) % NODES;

        node_ok(i, "CLUSTER SETSLOT %s NODE %s", s, g_id[to]);
    }
}

/* Starts moving `slot` from node `from` to node `to`. */
static void start_migration(int slot, int from, int to)
{
    char s[8];

    snprintf(s, sizeof(s), "%d", slot);
    node_ok(to, "CLUSTER SETSLOT %s IMPORTING %s", s, g_id[from]);
    node_ok(from, "CLUSTER SETSLOT %s MIGRATING %s", s, g_id[to]);
}

static void test_moved(void **state)
{
    lock_client *c = new_client(0);
    const char *name = g_name[0];
    int slot = lock__key_slot(name, strlen(name));
    char fence[80];
    int64_t t1, t2, t3;
    redisReply *r;

    (void)state;
    snprintf(fence, sizeof(fence), "%s:fence", name);
    assert_int_equal(lock_try_lock(c, name, 0, 20000, &t1), LOCK_OK);
    /* Move the slot, keys and all, from node 0 to node 1. */
    start_migration(slot, 0, 1);
    r = node_command(0, false, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s %s", g_port[1], "", name,
                     fence);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("MIGRATE: %s", r->str);
    freeReplyObject(r);
    setslot_everywhere(slot, 1);
    assert_int_equal(owner_of(name), 1);

    /* The client still maps the slot to node 0: node 0 answers MOVED, the client follows. */
    assert_int_equal(lock_try_lock(c, name, 0, 20000, &t2), LOCK_OK);
    assert_int_equal(t2, t1); /* the same holding, on its new master */
    assert_int_equal(lock_unlock(c, name), LOCK_OK);
    assert_int_equal(exists_on(1, false, name), 1);
    assert_int_equal(lock_unlock(c, name), LOCK_OK);
    assert_int_equal(exists_on(1, false, name), 0);
    assert_int_equal(exists_on(1, false, fence), 1); /* the counter moved with it */
    assert_int_equal(lock_try_lock(c, name, 0, 20000, &t3), LOCK_OK);
    assert_true(t3 > t1);
    assert_int_equal(lock_unlock(c, name), LOCK_OK);
    lock_client_destroy(c);
}

/* Tries to take a lock within wait_ms, in a thread of its own. */
typedef struct taker {
    lock_client *c;
    const char *name;
    int64_t wait_ms;
    int rc;
    int64_t token;
    int owner;     /* the node that served the lock's key while it was held */
    int unlock_rc; /* a lock is its thread's: the taker gives it back itself */
} taker;

static void *taker_main(void *arg)
{
    taker *t = arg;

    t->rc = lock_try_lock(t->c, t->name, t->wait_ms, 20000, &t->token);
    if (t->rc == LOCK_OK) {
        t->owner = owner_of(t->name); /* no cmocka assertion fails in it: a key exists */
        t->unlock_rc = lock_unlock(t->c, t->name);
    }
    return NULL;
}

static void test_ask(void **state)
{
    lock_client *c = new_client(0);
    char name[64], fence[80];
    int slot = -1;
    int64_t t1;
    lock_holder h;
    redisReply *r;
    taker tk = {.c = c, .name = name, .wait_ms = 3000};
    pthread_t th;

    (void)state;
    /* A lock served by node 2, held. */
    for (int n = 5000; n < 6000 && slot < 0; n++) {
        snprintf(name, sizeof(name), "lock:goods:{%d}", n);
        if (owner_of(name) == 2)
            slot = lock__key_slot(name, strlen(name));
    }
    assert_true(slot >= 0);
    snprintf(fence, sizeof(fence), "%s:fence", name);
    assert_int_equal(lock_try_lock(c, name, 0, 20000, &t1), LOCK_OK);

    /* Half-way through moving the slot to node 0: both keys already there. Node 2 still
     * serves the slot but no longer has them, so it answers ASK. */
    start_migration(slot, 2, 0);
    r = node_command(2, false, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %s %s", g_port[0], "", name,
                     fence);
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("MIGRATE: %s", r->str);
    freeReplyObject(r);
    assert_int_equal(exists_on(2, false, name), -1); /* node 2 no longer has it: ASK */
    assert_int_equal(exists_on(0, false, name), -1); /* node 0 does not serve the slot yet */
    assert_int_equal(exists_on(0, true, name), 1);   /* but has the key, for an ASKING client */

    /* inspect.lua names the lock and its counter, both on node 0 now: node 2 answers ASK, and
     * the client asks node 0 (after ASKING) and reads our holding there. */
    memset(&h, 0, sizeof(h));
    if (lock_inspect(c, name, &h) != LOCK_OK)
        fail_msg("inspect via ASK: %s", lock_last_error());
    assert_true(h.held);
    assert_int_equal(h.fence, t1);

    /* acquire.lua and release.lua also name the lock's line of waiters, which exists on no
     * node (nobody waits): a node importing the slot answers a script with keys it lacks
     * TRYAGAIN until the migration ends. A taker waiting 3 s keeps trying; the slot is handed
     * to node 0 meanwhile, the taker follows the MOVED, finds the lock held and waits in line;
     * our release (routed to node 0 by the new map) calls it. */
    assert_int_equal(pthread_create(&th, NULL, taker_main, &tk), 0);
    sleep_ms(300);
    setslot_everywhere(slot, 0);
    sleep_ms(300);
    assert_int_equal(lock_unlock(c, name), LOCK_OK);
    pthread_join(th, NULL);
    if (tk.rc != LOCK_OK)
        fail_msg("try_lock across the end of a migration: %s", lock_strerror(tk.rc));
    assert_true(tk.token > t1);
    assert_int_equal(tk.owner, 0);
    assert_int_equal(tk.unlock_rc, LOCK_OK);
    assert_int_equal(exists_on(0, false, name), 0);
    assert_int_equal(exists_on(0, false, fence), 1); /* the counter moved with the slot */
    lock_client_destroy(c);
}

/* ---- failover ---- */

/* Runs a command on 127.0.0.1:port and says whether its text answer contains `text`. */
static bool answer_has(int port, const char *cmd, const char *text)
{
    struct timeval tv = {1, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    bool has = false;

    if (ctx != NULL && ctx->err == 0) {
        redisSetTimeout(ctx, tv);
        r = redisCommand(ctx, cmd);
    }
    has = r != NULL && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) &&
          strstr(r->str, text) != NULL;
    if (r != NULL)
        freeReplyObject(r);
    if (ctx != NULL)
        redisFree(ctx);
    return has;
}

static bool wait_for(int port, const char *cmd, const char *text, int ms)
{
    for (int64_t until = now_ms() + ms; now_ms() < until; sleep_ms(50))
        if (answer_has(port, cmd, text))
            return true;
    return false;
}

/*
 * A replica for node 1 joins; a lock of node 1 is taken, the replica has it; CLUSTER FAILOVER
 * on the replica swaps the roles (no write lost): the client, whose map still names node 1,
 * is sent on by a MOVED and finds its holding (same token). Then the new master is killed
 * (SIGKILL): node 1 is promoted back after the node timeout, and the client, whose commands
 * fail meanwhile (refused, CLUSTERDOWN), reads the map again and takes the lock on node 1.
 */
static void test_failover(void **state)
{
    lock_client *c = new_client(0), *w = NULL;
    const char *name = g_name[1];
    char conf[256], cmd[160], seeds[64];
    lock_options o;
    int64_t t1, t2, t3 = 0, started;
    int rport, rc = LOCK_ERR_REDIS, failures = 0;
    redisReply *r;

    (void)state;
    snprintf(conf, sizeof(conf), CLUSTER_CONF, support_free_port());
    assert_int_equal(redis_server_start_conf(&g_replica, conf, false), 0);
    rport = redis_server_port(g_replica);
    snprintf(cmd, sizeof(cmd), "CLUSTER MEET 127.0.0.1 %d %d", g_port[1], g_bus[1]);
    assert_true(answer_has(rport, cmd, "OK"));
    assert_true(wait_for(rport, "CLUSTER NODES", g_id[1], 5000));
    snprintf(cmd, sizeof(cmd), "CLUSTER REPLICATE %s", g_id[1]);
    assert_true(wait_for(rport, cmd, "OK", 5000));
    assert_true(wait_for(rport, "INFO replication", "master_link_status:up", 10000));
    /* The master must know it as its replica (gossip) before it agrees to a manual failover. */
    snprintf(cmd, sizeof(cmd), "slave %s", g_id[1]);
    assert_true(wait_for(g_port[1], "CLUSTER NODES", cmd, 10000));

    assert_int_equal(lock_try_lock(c, name, 0, 20000, &t1), LOCK_OK);
    /* On the replica too before the roles change (a replica answers reads after READONLY). */
    for (int64_t until = now_ms() + 5000;; sleep_ms(20)) {
        struct timeval tv = {1, 0};
        redisContext *ctx = redisConnectWithTimeout("127.0.0.1", rport, tv);
        bool there = false;

        assert_non_null(ctx);
        r = redisCommand(ctx, "READONLY");
        if (r != NULL)
            freeReplyObject(r);
        r = redisCommand(ctx, "EXISTS %s", name);
        there = r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
        if (r != NULL)
            freeReplyObject(r);
        redisFree(ctx);
        if (there)
            break;
        assert_true(now_ms() < until);
    }
    /* A manual failover that the master did not take up in time is abandoned (5 s): ask
     * again, three times at most. */
    for (int tries = 0;; tries++) {
        assert_true(tries < 3);
        assert_true(answer_has(rport, "CLUSTER FAILOVER", "OK"));
        if (wait_for(rport, "INFO replication", "role:master", 6000))
            break;
    }
    assert_true(wait_for(g_port[1], "INFO replication", "role:slave", 10000));

    assert_int_equal(lock_try_lock(c, name, 0, 20000, &t2), LOCK_OK); /* via MOVED */
    assert_int_equal(t2, t1);
    assert_int_equal(lock_unlock(c, name), LOCK_OK);
    assert_int_equal(lock_unlock(c, name), LOCK_OK);

    /* A second client whose first seed, where its subscriber listens, is the new master. */
    snprintf(seeds, sizeof(seeds), "127.0.0.1:%d,127.0.0.1:%d", rport, g_port[0]);
    lock_options_init(&o);
    o.cluster_nodes = seeds;
    o.connect_timeout_ms = o.command_timeout_ms = TIMEOUT_MS;
    assert_int_equal(lock_client_create(&o, &w), LOCK_OK);
    assert_int_equal(lock_try_lock(w, name, 0, 20000, NULL), LOCK_OK);
    assert_int_equal(lock_unlock(w, name), LOCK_OK);

    /* A crash: the master of the slot dies; its replica (node 1) takes over by itself. */
    assert_int_equal(redis_server_kill(g_replica), 0);
    started = now_ms();
    while (now_ms() - started < 20000) {
        rc = lock_try_lock(c, name, 0, 20000, &t3);
        if (rc == LOCK_OK)
            break;
        assert_int_equal(rc, LOCK_ERR_REDIS); /* never a wrong answer meanwhile */
        failures++;
        sleep_ms(100);
    }
    if (rc != LOCK_OK)
        fail_msg("no lock within 20 s of the master's death: %s", lock_last_error());
    print_message("    failover: lock had again %lld ms after the kill, %d failed tries\n",
                  (long long)(now_ms() - started), failures);
    assert_true(failures > 0); /* the dead master was noticed, not skipped by chance */
    assert_true(t3 > t1);
    assert_int_equal(owner_of(name), 1);
    assert_int_equal(lock_unlock(c, name), LOCK_OK);

    /* Every node has heard of the promotion (until then a node may still answer CLUSTERDOWN
     * for every slot). */
    for (int64_t until = now_ms() + 10000; !cluster_ok(); sleep_ms(50))
        assert_true(now_ms() < until);

    /* The second client meets the dead master too, reads the map, and its subscriber leaves
     * the dead node for a master of the map: a release still wakes its waiter at once. */
    for (int64_t until = now_ms() + 5000;; sleep_ms(50)) {
        if (lock_try_lock(w, name, 0, 20000, NULL) == LOCK_OK)
            break;
        assert_true(now_ms() < until);
    }
    assert_int_equal(lock_unlock(w, name), LOCK_OK);
    {
        waiter_arg wa = {.c = w, .name = g_name[2]};
        pthread_t t;
        int64_t released;

        if (lock_try_lock(c, g_name[2], 0, 20000, NULL) != LOCK_OK)
            fail_msg("take %s: %s", g_name[2], lock_last_error());
        assert_int_equal(pthread_create(&t, NULL, waiter_main, &wa), 0);
        sleep_ms(500);
        released = now_ms();
        assert_int_equal(lock_unlock(c, g_name[2]), LOCK_OK);
        pthread_join(t, NULL);
        assert_int_equal(wa.rc, LOCK_OK);
        assert_true(wa.acquired_ms - released < 1500); /* the message, not the 20 s lease */
    }
    lock_client_destroy(w);
    lock_client_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options),   cmocka_unit_test(test_spread),
        cmocka_unit_test(test_exclusion), cmocka_unit_test(test_wake_up),
        cmocka_unit_test(test_watchdog),  cmocka_unit_test(test_moved),
        cmocka_unit_test(test_ask),       cmocka_unit_test(test_failover),
    };

    return cmocka_run_group_tests_name("cluster", tests, group_setup, group_teardown);
}
