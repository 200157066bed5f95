/*
 * lock.c - the lock client: options, create/destroy, try_lock, unlock, is_held, ping, stats.
 *
 * This file is the orchestration; each part lives in its own file:
 *   owner.c       who the caller is ("<client id>:<thread number>")
 *   keys.c        the Redis names of a lock (N, N:fence, N:released, N:waiters...)
 *   pool.c/conn.c command connections, with deadlines and lazy reconnect
 *   cluster.c     with a Redis Cluster, which master each command goes to
 *   sentinel.c    with Sentinel, where the master is and when it moved
 *   scripts.c     the Lua scripts, run with EVALSHA
 *   holdings.c    what this process holds (is_held, the watchdog's schedule)
 *   watchdog.c    the renewal thread
 *   subscriber.c  the release-message thread (one pub/sub connection per process)
 *   waiters.c     each lock's queue of waiting threads, and which one a release calls
 *
 * try_lock, step by step:
 *   0. if the wait allows and this process already listens on the lock's release channel
 *      (other threads wait on it), join it now: a release after step 1 then reaches us;
 *   1. run acquire.lua once; acquired, or another owner holds it, or another waiter is
 *      first in line (the answer is how long to wait); the call also put us in the line
 *      (the fair lock, when the wait allows); joined in step 0: go to 4;
 *   2. if the wait allows, join the lock's release channel and wait until subscribed;
 *   3. run acquire.lua again (the lock may have been released before we subscribed);
 *   4. sleep until a release message calls us, or until the holder's TTL runs out (plus
 *      jitter), or until our place in line needs keeping (a third of the liveness), or
 *      until the deadline, whichever is first; a message that grants us the lock ends the
 *      wait (grant_is_taken_as_is says when no round trip is needed); otherwise go to 3,
 *      until acquired or the deadline has passed;
 *   5. leaving without the lock, on every way out, give up the place in line (leave.lua),
 *      or, when leave.lua says we hold the lock (a release granted it since our last try, or
 *      an acquire whose answer was lost made a hold after all), take it with acquire.lua
 *      (settle_failed_try).
 * Steps 0-4 are try_until_deadline (step 4: try_sleep), step 5 try_finish.
 * An acquire whose answer is lost (late, swallowed, cut, never sent) may still have run,
 * leaving a hold nobody knows of: its give-back is written behind it on the same connection,
 * which Redis runs after it if that connection reached Redis; step 5 settles it on another
 * connection while the bound leaves time; and a watchdog holding's first lease (the waiter
 * liveness) bounds what neither reaches (first_lease_ms).
 * The connection is borrowed for each round trip only, never held while sleeping.
 *
 * Time bounds: the deadline is start + wait_ms. A round trip is only begun before the
 * deadline, or as the one last try just after it, and each round trip's socket timeout is
 * cut so that it ends by deadline + one command timeout at the latest.
 */
#include "lock/lock.h"
#include "lock/client.h"
#include "lock/clock.h"
#include "lock/cluster.h"
#include "lock/conn.h"
#include "lock/error.h"
#include "lock/holdings.h"
#include "lock/keys.h"
#include "lock/owner.h"
#include "lock/pool.h"
#include "lock/scripts.h"
#include "lock/sentinel.h"
#include "lock/subscriber.h"
#include "lock/watchdog.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JITTER_MAX_NS (25 * LOCK__NS_PER_MS)

struct lock_client {
    char *host; /* owned copy of opts.redis_host */
    lock_options opts;
    lock__conn_address addr;    /* where Redis is now; a failover moves it */
    bool addr_ready;            /* addr initialised (for destroy) */
    lock__conn_config conn_cfg; /* points at addr; read by every connection */
    lock__sentinels *sentinels; /* NULL without Sentinel */
    lock__sentinel_follower *follower;
    lock__cluster *cluster; /* NULL without Redis Cluster */
    char process_id[LOCK__PROCESS_ID_LEN + 1];
    lock__pool *pool;
    lock__holdings *holdings;
    lock__watchdog *watchdog;
    lock__subscriber *subscriber;
    _Atomic uint64_t timeouts;
};

/* What one run of acquire.lua said. */
typedef struct attempt {
    bool acquired;
    int64_t count;   /* acquired: hold count now */
    int64_t token;   /* acquired: fencing token */
    int64_t ttl_ms;  /* not acquired: the holder's remaining TTL (-1: none) */
    int64_t fence;   /* not acquired: the fencing counter then; a grant with a larger token
                        was made after this call, so it is for the caller's current wait */
    int64_t sent_ns; /* when the command was sent: the lease started no earlier; 0: not sent */
} attempt;

void lock_options_init(lock_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->redis_host = "127.0.0.1";
    opts->redis_port = 6379;
    opts->connect_timeout_ms = 500;
    opts->command_timeout_ms = 500;
    opts->watchdog_lease_ms = 30000;
    opts->max_hold_ms = 60000;
    opts->pool_size = 16;
    opts->sync_timeout_ms = 200;
    opts->fair = true;
    opts->waiter_liveness_ms = 1500;
}

static int check_options(const lock_options *o)
{
    if (o->redis_host == NULL || o->redis_host[0] == '\0')
        return LOCK_ERR_INVALID;
    if (o->redis_port < 1 || o->redis_port > 65535)
        return LOCK_ERR_INVALID;
    if (o->connect_timeout_ms < 1 || o->command_timeout_ms < 1)
        return LOCK_ERR_INVALID;
    /* The watchdog renews every lease/3 ms, which must be at least 1 ms. */
    if (o->watchdog_lease_ms < 3 || o->max_hold_ms < 1)
        return LOCK_ERR_INVALID;
    if (o->pool_size < 1 || o->pool_size > 1024)
        return LOCK_ERR_INVALID;
    if ((o->sentinels == NULL) != (o->master_name == NULL))
        return LOCK_ERR_INVALID;
    if (o->sync_replicas < 0 || o->sync_replicas > 64 || o->sync_timeout_ms < 1)
        return LOCK_ERR_INVALID;
    if (o->waiter_liveness_ms < 30 || o->waiter_liveness_ms > 600000)
        return LOCK_ERR_INVALID;
    /* A cluster's masters fail over by themselves (no Sentinel), and WAIT would need the
     * connection that wrote, which the router does not hand out. */
    if (o->cluster_nodes != NULL && (o->sentinels != NULL || o->sync_replicas > 0))
        return LOCK_ERR_INVALID;
    return LOCK_OK;
}

/* The follower (or, with a cluster, the router) moved the address: the subscriber must
 * resubscribe on the new master (the pooled connections notice the new epoch by themselves
 * before their next command). */
static void client_moved(void *arg)
{
    lock_client *c = arg;

    lock__subscriber_moved(c->subscriber);
}

/* Where the client's connections go first: the address of opts, moved to the master a
 * Sentinel names (when opts->sentinels; the follower keeps asking otherwise), or to a
 * cluster's first seed (when opts->cluster_nodes: a classic PUBLISH reaches every node of a
 * cluster, cluster.h, so the subscriber listens there). LOCK_OK or a LOCK_ERR_* code. */
static int find_address(lock_client *c, const lock_options *opts)
{
    int rc = lock__conn_address_init(&c->addr, c->host, opts->redis_port);

    if (rc != LOCK_OK)
        return rc;
    c->addr_ready = true;
    if (opts->sentinels != NULL) {
        lock__addr master;

        c->sentinels = malloc(sizeof(*c->sentinels));
        if (c->sentinels == NULL)
            return LOCK_ERR_NOMEM;
        rc = lock__sentinels_parse(c->sentinels, opts->sentinels, opts->master_name,
                                   opts->connect_timeout_ms);
        if (rc != LOCK_OK)
            return rc;
        if (lock__sentinel_master(c->sentinels, &master) == LOCK_OK)
            lock__conn_address_move(&c->addr, master.host, master.port);
    }
    if (opts->cluster_nodes != NULL) {
        rc = lock__cluster_create(opts->cluster_nodes, opts->pool_size, opts->connect_timeout_ms,
                                  opts->command_timeout_ms, &c->cluster);
        if (rc != LOCK_OK)
            return rc;
        lock__conn_address_move(&c->addr, lock__cluster_first_seed(c->cluster)->host,
                                lock__cluster_first_seed(c->cluster)->port);
    }
    return LOCK_OK;
}

/* The client's threads and pool, once its address is known: the command pool, the
 * holdings and their watchdog, the subscriber, and the listeners of a cluster's or a
 * Sentinel's moves. LOCK_OK or a LOCK_ERR_* code. */
static int start_parts(lock_client *c, const lock_options *opts)
{
    int rc;

    c->conn_cfg.addr = &c->addr;
    c->conn_cfg.connect_timeout_ms = opts->connect_timeout_ms;
    c->conn_cfg.command_timeout_ms = opts->command_timeout_ms;
    atomic_init(&c->timeouts, 0);
    if (lock__process_id_new(c->process_id) != 0)
        return LOCK_ERR_INVALID; /* no kernel randomness: nothing the caller can fix here */
    rc = lock__pool_create(&c->conn_cfg, opts->pool_size, &c->pool);
    if (rc != LOCK_OK)
        return rc;
    rc = lock__holdings_create(opts->watchdog_lease_ms, opts->max_hold_ms, &c->holdings);
    if (rc != LOCK_OK)
        return rc;
    rc = lock__watchdog_start(c->holdings, &c->conn_cfg, c->cluster, &c->watchdog);
    if (rc != LOCK_OK)
        return rc;
    rc = lock__subscriber_create(&c->conn_cfg, c->process_id, &c->subscriber);
    if (rc != LOCK_OK)
        return rc;
    if (c->cluster != NULL)
        lock__cluster_keep_listener(c->cluster, &c->addr, client_moved, c);
    if (c->sentinels != NULL)
        return lock__sentinel_follower_start(c->sentinels, &c->addr, client_moved, c, &c->follower);
    return LOCK_OK;
}

int lock_client_create(const lock_options *opts, lock_client **out)
{
    lock_client *c;
    int rc;

    if (out == NULL)
        return LOCK_ERR_INVALID;
    *out = NULL;
    if (opts == NULL || check_options(opts) != LOCK_OK)
        return LOCK_ERR_INVALID;
    lock__scripts_init();

    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return LOCK_ERR_NOMEM;
    rc = LOCK_ERR_NOMEM;
    c->opts = *opts;
    c->host = strdup(opts->redis_host);
    if (c->host == NULL)
        goto fail;
    c->opts.redis_host = c->host;
    c->opts.sentinels = c->opts.master_name = NULL; /* not kept: parsed by find_address */
    c->opts.cluster_nodes = NULL;
    rc = find_address(c, opts);
    if (rc != LOCK_OK)
        goto fail;
    rc = start_parts(c, opts);
    if (rc != LOCK_OK)
        goto fail;
    *out = c;
    return LOCK_OK;

fail:
    lock_client_destroy(c);
    return rc;
}

void lock_client_destroy(lock_client *c)
{
    if (c == NULL)
        return;
    /* Threads first (they use the rest), then what they used; the follower first of all
     * (it calls into the subscriber), and likewise the cluster router's listener keeping (a
     * renewal that reads the map may move the subscriber). */
    if (c->cluster != NULL)
        lock__cluster_keep_listener(c->cluster, NULL, NULL, NULL);
    lock__sentinel_follower_stop(c->follower);
    lock__subscriber_destroy(c->subscriber);
    lock__watchdog_stop(c->watchdog);
    lock__holdings_destroy(c->holdings);
    lock__pool_destroy(c->pool);
    lock__cluster_destroy(c->cluster);
    free(c->sentinels);
    if (c->addr_ready)
        lock__conn_address_destroy(&c->addr);
    free(c->host);
    free(c);
}

/* ---- try_lock ---- */

/* A small per-thread generator for jitter: it needs to differ between threads and
 * processes, not to be unpredictable. */
static uint64_t jitter_random(void)
{
    static _Thread_local uint64_t x;

    if (x == 0)
        x = (uint64_t)lock__now_ns() ^ (lock__thread_number() * 0x9e3779b97f4a7c15u) ^ 1;
    x ^= x << 13; /* xorshift64 */
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

/*
 * When a waiter that heard no release should try again: when the holder's TTL runs out,
 * plus a random 0..min(TTL/4, 25 ms) so that the waiters of an expired lock do not all
 * arrive at once, and never after the deadline. (A waiter in line passes an earlier
 * deadline: the moment its place needs keeping.)
 */
static int64_t wake_time(int64_t now, int64_t ttl_ms, int64_t deadline)
{
    int64_t ttl_ns, spread, at;

    if (ttl_ms == -1)
        return deadline; /* no TTL: only a release (or the deadline) ends the wait */
    ttl_ns = lock__ms_to_ns(ttl_ms < 0 ? 0 : ttl_ms);
    spread = ttl_ns / 4 < JITTER_MAX_NS ? ttl_ns / 4 : JITTER_MAX_NS;
    if (spread < LOCK__NS_PER_MS)
        spread = LOCK__NS_PER_MS;
    at = lock__add_ns(now, ttl_ns + (int64_t)(jitter_random() % (uint64_t)spread));
    return at < deadline ? at : deadline;
}

/* The hand-off gap of this thread's last take (lock_last_handoff_us). */
static _Thread_local int64_t last_handoff_us = -1;

int64_t lock_last_handoff_us(void)
{
    return last_handoff_us;
}

/* Whether a reply of acquire.lua is an array of n integers. */
static bool integers(const redisReply *r, size_t n)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (r->element[i]->type != REDIS_REPLY_INTEGER)
            return false;
    return true;
}

/* Whether acquire.lua's reply says the lock was taken: {count >= 1, token}. */
static bool reply_acquired(const redisReply *r)
{
    return integers(r, 2) && r->element[0]->integer >= 1;
}

/* Reads acquire.lua's answer: {count, token}, or {0, fencing counter, ms to wait}. */
static int attempt_parse(const redisReply *r, attempt *a)
{
    if (reply_acquired(r)) {
        a->acquired = true;
        a->count = r->element[0]->integer;
        a->token = r->element[1]->integer;
        return LOCK_OK;
    }
    if (integers(r, 3) && r->element[0]->integer == 0) {
        a->acquired = false;
        a->fence = r->element[1]->integer;
        a->ttl_ms = r->element[2]->integer;
        return LOCK_OK;
    }
    lock__error_set("acquire.lua: unexpected reply type %d", r->type);
    return LOCK_ERR_REDIS;
}

/*
 * The replication wait (sync_replicas > 0), on the connection that just acquired: WAIT makes
 * Redis answer once that many replicas have every write this connection made, the lock
 * included, or when the timeout ends. Fewer acknowledgements: the lock exists on too few
 * servers to survive a failover, so it is released again on the same connection and the
 * acquisition reported as failed (*reply freed and NULL). The approach Redisson takes.
 */
static int sync_or_undo(lock_client *c, lock__conn *conn, const lock__keys *k, const char *owner,
                        const char *count, redisReply **reply)
{
    char want[16], wait_ms[16];
    const char *argv[3] = {"WAIT", want, wait_ms};
    const char *keys[4] = {k->name, k->fence, k->waiters, k->waiters_until};
    char keep[24];
    const char *args[3] = {owner, k->channel, keep};
    int64_t by = lock__now_ns() + lock__ms_to_ns(c->opts.sync_timeout_ms) +
                 lock__ms_to_ns(c->opts.command_timeout_ms);
    redisReply *w = NULL, *undo = NULL;
    long long acks = -1;
    int rc;

    snprintf(want, sizeof(want), "%d", c->opts.sync_replicas);
    snprintf(wait_ms, sizeof(wait_ms), "%d", c->opts.sync_timeout_ms);
    rc = lock__conn_command(conn, by, 3, argv, NULL, &w);
    if (rc == LOCK_OK && w->type == REDIS_REPLY_INTEGER)
        acks = w->integer;
    if (w != NULL)
        freeReplyObject(w);
    if (acks >= c->opts.sync_replicas)
        return LOCK_OK;
    /* Undo: back to the count the owner had before this take (count is that count plus one;
     * 0 gives the lock back and wakes a waiter). If this fails too, the lease ends it, or the
     * owner's next release sets the count right (the scripts set counts). */
    snprintf(keep, sizeof(keep), "%lld", strtoll(count, NULL, 10) - 1);
    by = lock__now_ns() + lock__ms_to_ns(c->opts.command_timeout_ms);
    if (lock__script_run(conn, LOCK__SCRIPT_RELEASE, by, 4, keys, 3, args, &undo) == LOCK_OK)
        freeReplyObject(undo);
    freeReplyObject(*reply);
    *reply = NULL;
    lock__error_set("lock taken but only %lld of %d replicas acknowledged it in %d ms: released",
                    acks < 0 ? 0 : acks, c->opts.sync_replicas, c->opts.sync_timeout_ms);
    return LOCK_ERR_REDIS;
}

/*
 * Runs acquire.lua (6 arguments) or release.lua (3) on a pooled connection, with the lock's
 * four keys: waits for the connection until borrow_by, and for the answer until hard_by.
 * *sent_ns (if not NULL) gets the moment the command went out (0: it never did). On LOCK_OK
 * the caller owns *reply (freeReplyObject).
 */
static int pooled_script(lock_client *c, lock__script script, const lock__keys *k,
                         const char *const *args, int64_t borrow_by, int64_t hard_by,
                         int64_t *sent_ns, redisReply **reply)
{
    const char *keys[4] = {k->name, k->fence, k->waiters, k->waiters_until};
    int nargs = script == LOCK__SCRIPT_ACQUIRE ? 6 : 3;
    lock__conn *conn = NULL;
    char keep[24], numkeys[] = "4";
    const char *undo[10] = {"EVAL",
                            lock__script_text(LOCK__SCRIPT_RELEASE),
                            numkeys,
                            k->name,
                            k->fence,
                            k->waiters,
                            k->waiters_until,
                            args[0],
                            NULL,
                            keep};
    int rc;

    *reply = NULL;
    if (sent_ns != NULL)
        *sent_ns = 0;
    if (c->cluster != NULL)
        return lock__cluster_script(c->cluster, script, script == LOCK__SCRIPT_RELEASE, borrow_by,
                                    hard_by, 4, keys, nargs, args, sent_ns, reply);
    /* A release must not wait behind the acquirers for a connection: a release that gave up
     * would leave the lock to its lease (30 s with the watchdog). It gets the pool's
     * reserved connection when every other one is out. */
    if (script == LOCK__SCRIPT_RELEASE)
        rc = lock__pool_borrow_for_release(c->pool, borrow_by, &conn);
    else
        rc = lock__pool_borrow(c->pool, borrow_by, &conn);
    if (rc != LOCK_OK)
        return rc;
    if (sent_ns != NULL)
        *sent_ns = lock__now_ns();
    if (script == LOCK__SCRIPT_ACQUIRE) {
        /* Should the acquire's answer be lost, the give-back of what it may have taken
         * follows it on the same connection, where Redis runs it after the acquire if it
         * runs it at all (settle_failed_try says what else is done). EVAL rather than
         * EVALSHA: it cannot meet a NOSCRIPT that nobody would read. */
        undo[8] = k->channel;
        snprintf(keep, sizeof(keep), "%lld", strtoll(args[2], NULL, 10) - 1);
        lock__conn_set_follow_up(conn, 10, undo);
    }
    rc = lock__script_run(conn, script, hard_by, 4, keys, nargs, args, reply);
    if (rc == LOCK_OK && script == LOCK__SCRIPT_ACQUIRE && c->opts.sync_replicas > 0 &&
        reply_acquired(*reply))
        rc = sync_or_undo(c, conn, k, args[0], args[2], reply);
    lock__pool_return(c->pool, conn);
    return rc;
}

/* Runs acquire.lua once, for an owner that will hold `count` (its own count plus one) once
 * it succeeds, knows the token `known` of its holding ("0": none), and keeps a place in
 * line for `line` ms ("0": no place): waits for a connection until borrow_by, ends by
 * hard_by. */
static int attempt_once(lock_client *c, const lock__keys *k, const char *owner, const char *lease,
                        const char *count, const char *line, const char *known, int64_t borrow_by,
                        int64_t hard_by, attempt *a)
{
    const char *args[6] = {owner, lease, count, line, k->channel, known};
    redisReply *r = NULL;
    int rc = pooled_script(c, LOCK__SCRIPT_ACQUIRE, k, args, borrow_by, hard_by, &a->sent_ns, &r);

    if (rc == LOCK_OK)
        rc = attempt_parse(r, a);
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

/*
 * Runs release.lua once, leaving the owner `keep` holds (its own count minus one; 0 gives
 * the lock back), waiting until borrow_by at most for a connection and until hard_by for the
 * answer. Returns LOCK_OK with *remaining the hold count left (0: released),
 * LOCK_ERR_NOT_HELD, or an error (*remaining is then -1: unknown; *sent whether the command
 * went out, so that it may have run).
 */
static int release_once(lock_client *c, const lock__keys *k, const char *owner, int64_t keep,
                        int64_t borrow_by, int64_t hard_by, int64_t *remaining, bool *sent)
{
    char keep_text[24];
    const char *args[3] = {owner, k->channel, keep_text};
    redisReply *r = NULL;
    int64_t sent_ns = 0;
    int rc;

    *remaining = -1;
    snprintf(keep_text, sizeof(keep_text), "%" PRId64, keep < 0 ? 0 : keep);
    rc = pooled_script(c, LOCK__SCRIPT_RELEASE, k, args, borrow_by, hard_by, &sent_ns, &r);
    *sent = sent_ns != 0;
    if (rc != LOCK_OK)
        goto out;
    if (r->type != REDIS_REPLY_INTEGER) {
        lock__error_set("release.lua: unexpected reply type %d", r->type);
        rc = LOCK_ERR_REDIS;
    } else if (r->integer < 0) {
        rc = LOCK_ERR_NOT_HELD;
    } else {
        *remaining = r->integer;
    }
out:
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

/*
 * A give-back that counts only once its answer is read: release.lua, and if its answer is
 * lost after it went out (it may or may not have run), once more on another connection
 * while hard_by leaves time. Sending it twice is safe: release.lua checks the owner and sets
 * the count the owner keeps, it does not subtract. A second try that finds the owner holding
 * nothing means the first ran: the hold is given back (LOCK_OK, *remaining 0).
 * Returns as release_once.
 */
static int release_settled(lock_client *c, const lock__keys *k, const char *owner, int64_t keep,
                           int64_t borrow_by, int64_t hard_by, int64_t *remaining)
{
    bool sent = false;
    int rc = release_once(c, k, owner, keep, borrow_by, hard_by, remaining, &sent);

    if (rc != LOCK_ERR_REDIS || !sent || lock__now_ns() >= hard_by)
        return rc;
    rc = release_once(c, k, owner, keep, hard_by, hard_by, remaining, &sent);
    if (rc == LOCK_ERR_NOT_HELD) {
        *remaining = 0;
        rc = LOCK_OK;
    }
    return rc;
}

/* What leave.lua's one run came to. */
typedef enum leave_outcome {
    LEAVE_OUT,   /* answered: the owner is out of the line and holds nothing */
    LEAVE_HELD,  /* answered: the owner holds the lock (a grant, or a lost acquire that ran);
                    leave.lua changed nothing, and acquire.lua takes it (take_held) */
    LEAVE_UNSURE /* no answer (or none could be sent) */
} leave_outcome;

/* Runs leave.lua once, by hard_by at the latest, on the pool's reserved connection if every
 * other one is out (a waiter that gives up must not wait behind the acquirers). */
static leave_outcome leave_line(lock_client *c, const lock__keys *k, const char *owner,
                                int64_t hard_by)
{
    const char *keys[3] = {k->name, k->waiters, k->waiters_until};
    const char *args[2] = {owner, k->channel};
    lock__conn *conn = NULL;
    redisReply *r = NULL;
    leave_outcome out;
    int rc;

    if (c->cluster != NULL) {
        rc = lock__cluster_script(c->cluster, LOCK__SCRIPT_LEAVE, true, hard_by, hard_by, 3, keys,
                                  2, args, NULL, &r);
    } else {
        if (lock__pool_borrow_for_release(c->pool, hard_by, &conn) != LOCK_OK)
            return LEAVE_UNSURE;
        rc = lock__script_run(conn, LOCK__SCRIPT_LEAVE, hard_by, 3, keys, 2, args, &r);
        lock__pool_return(c->pool, conn);
    }
    if (rc != LOCK_OK)
        return LEAVE_UNSURE;
    out = r->type == REDIS_REPLY_INTEGER && r->integer == 2 ? LEAVE_HELD : LEAVE_OUT;
    freeReplyObject(r);
    return out;
}

/*
 * The owner holds the lock after all (LEAVE_HELD): taken with acquire.lua as a holding the
 * owner has, with `count` holds, `lease` ms, and the token `known` only if the counter still
 * says it (else a new one: the counter may have been moved under the holding), with no place
 * in line; with sync_replicas, kept only once enough replicas have it (pooled_script). By
 * hard_by. LEAVE_OUT when acquire.lua says the lock is not the owner's any more (its grant
 * lapsed meanwhile); LEAVE_UNSURE when its answer was lost, or it could not be sent.
 */
static leave_outcome take_held(lock_client *c, const lock__keys *k, const char *owner,
                               const char *count, const char *lease, const char *known,
                               int64_t hard_by, attempt *a)
{
    attempt took = {0};
    int rc = attempt_once(c, k, owner, lease, count, "0", known, hard_by, hard_by, &took);

    if (rc != LOCK_OK)
        return LEAVE_UNSURE;
    if (!took.acquired)
        return LEAVE_OUT;
    *a = took;
    return LEAVE_HELD;
}

/*
 * A try that ends without the lock (rc) may leave two things behind in Redis: its place in
 * line (in_line), and, when the answer to its last acquire.lua was lost after it went out
 * (LOCK_ERR_REDIS with a.sent_ns set), a hold that the script may have made with nobody
 * knowing. A written command is not a run one: the give-back that followed the acquire on its
 * connection (pooled_script) runs only if that connection reached Redis, which a connection
 * cut after the acquire went through does not. So one leave.lua settles both: out of the
 * line, or, if the caller holds the lock after all (a release granted it since its last try,
 * or the lost acquire ran), the holding is the caller's (LOCK_OK), taken with acquire.lua
 * (take_held: its token is checked as any reentrant take's). If an answer is lost on the
 * way, a release gives back whatever either may have added (release_settled). Everything
 * ends by hard_by: a round trip that timed out at the bound leaves none, and then the first
 * lease bounds what is left (first_lease_ms). Returns the call's result.
 */
static int settle_failed_try(lock_client *c, const lock__keys *k, const char *owner,
                             const char *count, const char *lease, const char *known, bool in_line,
                             int64_t hard_by, int rc, attempt *a)
{
    bool unsure = rc == LOCK_ERR_REDIS && a->sent_ns != 0;
    leave_outcome left;
    int64_t ignored;
    char why[256];

    if (!in_line && !unsure)
        return rc;
    if (lock__now_ns() >= hard_by)
        return rc; /* no time left: the follow-up and the first lease */
    snprintf(why, sizeof(why), "%s", lock__error_text()); /* the try's own error */
    left = leave_line(c, k, owner, hard_by);
    if (left == LEAVE_HELD)
        left = lock__now_ns() < hard_by ? take_held(c, k, owner, count, lease, known, hard_by, a)
                                        : LEAVE_OUT; /* no time: its lease ends it */
    if (left == LEAVE_HELD)
        return LOCK_OK;
    if (left == LEAVE_UNSURE && lock__now_ns() < hard_by)
        release_settled(c, k, owner, strtoll(count, NULL, 10) - 1, hard_by, hard_by, &ignored);
    lock__error_set("%s", why); /* the try's own error is the one to report */
    return rc;
}

/*
 * Whether a call that brought `grant` hands the waiter the lock without a round trip: the
 * grant is for this wait (its token is past the counter the waiter's last try saw: a message
 * left over from an earlier call of the same thread has a smaller one), the holding is one
 * the watchdog renews (the grant's lease is only the rest of the waiter's place in line,
 * which the watchdog then extends), it is the thread's first hold (Redis counts 1), and no
 * replica must acknowledge it first (sync_replicas: the waiter's own acquire.lua and WAIT
 * do that). Otherwise the waiter takes its granted lock with acquire.lua, as a reentrant
 * take that sets its own count and lease.
 */
static bool grant_is_taken_as_is(const lock_client *c, const lock__grant *grant,
                                 const attempt *last_try, bool watchdog, const char *count)
{
    return grant->token > last_try->fence && watchdog && strcmp(count, "1") == 0 &&
           c->opts.sync_replicas == 0;
}

/*
 * The lease a watchdog holding starts with: the waiter liveness (or the watchdog lease, if
 * shorter), not the watchdog lease. The watchdog extends it to the full lease within a third
 * of it, so a holder that lives sees no difference; but a holding whose taker never heard
 * the answer (a reply cut after acquire.lua ran), and that nothing could give back, keeps
 * the others out for no longer than a waiter's place in line would (a grant from release.lua
 * starts the same way). A section shorter than a third of it is never renewed.
 */
static int64_t first_lease_ms(const lock_client *c)
{
    return c->opts.waiter_liveness_ms < c->opts.watchdog_lease_ms ? c->opts.waiter_liveness_ms
                                                                  : c->opts.watchdog_lease_ms;
}

/* The hand-off's gap, from a grant's release (Redis' clock) to now (this host's clock). */
static int64_t handoff_gap_us(const lock__grant *grant)
{
    int64_t gap = lock__wall_us() - grant->released_us;

    return gap > 0 ? gap : 0;
}

/* One lock_try_lock call: what it sends to Redis, its time bounds, and what it has learnt. */
typedef struct try_call {
    lock_client *c;
    lock__keys k;
    char owner[LOCK__OWNER_MAX];
    /* acquire.lua's arguments: the lease, the count to set, the place in line, and the token
     * of the holding the thread knows of */
    char lease[24], count[24], line[24], known[24];
    int64_t lease_ms;
    bool watchdog;
    bool waits;   /* wait_ms > 0 */
    bool queue;   /* a caller that waits stands in the line; a single try does not (it would
                     only block the others until its place lapsed) */
    bool in_line; /* it has stood in the line: leave it on the way out */
    bool woken;   /* its last sleep ended with a call (a release named it) */
    int64_t deadline, hard_deadline;
    int64_t place_sent_ns;    /* when the last try that kept its place in line was sent */
    int64_t granted_lease_ms; /* a grant taken as is: its lease; 0: lease_ms */
    lock__waiter *w;          /* joined to the lock's release channel; NULL: not */
    attempt a;
    lock__grant grant;
} try_call;

/* Checks the arguments and fills *t: the strings acquire.lua is given, and the deadlines. */
static int try_prepare(try_call *t, lock_client *c, const char *name, int64_t wait_ms,
                       int64_t lease_ms)
{
    int64_t known_token = 0, start;
    int rc;

    memset(t, 0, sizeof(*t));
    t->c = c;
    t->watchdog = lease_ms == LOCK_LEASE_WATCHDOG;
    if (c == NULL || wait_ms < 0 || (lease_ms <= 0 && !t->watchdog))
        return LOCK_ERR_INVALID;
    t->waits = wait_ms > 0;
    t->queue = c->opts.fair && t->waits;
    rc = lock__keys_init(&t->k, name);
    if (rc != LOCK_OK)
        return rc;
    t->lease_ms = t->watchdog ? first_lease_ms(c) : lease_ms;
    lock__owner_format(c->process_id, t->owner);
    snprintf(t->lease, sizeof(t->lease), "%" PRId64, t->lease_ms);
    snprintf(t->line, sizeof(t->line), "%" PRId64,
             t->queue ? c->opts.waiter_liveness_ms : (int64_t)0);
    /* The count Redis is told to set: what this thread holds, as it knows, plus this hold;
     * and the token of the holding it knows of (acquire.lua: a reentrant take keeps it only
     * if the counter still says it). */
    snprintf(t->count, sizeof(t->count), "%" PRId64,
             lock__holdings_count(c->holdings, t->k.name, lock__thread_number(), &known_token) + 1);
    snprintf(t->known, sizeof(t->known), "%" PRId64, known_token);
    start = lock__now_ns();
    t->deadline = lock__add_ns(start, lock__ms_to_ns(wait_ms));
    t->hard_deadline = lock__add_ns(t->deadline, lock__ms_to_ns(c->opts.command_timeout_ms));
    return LOCK_OK;
}

/* Step 4: sleeps until a release calls the waiter, the holder's TTL runs out, its place in
 * line needs keeping, or the deadline. Returns true when a release's grant ended the wait
 * (t->a then says acquired); otherwise the caller tries again. */
static bool try_sleep(try_call *t, int64_t now)
{
    lock_client *c = t->c;
    /* In line, come back before the place lapses: a third of the liveness leaves two more
     * chances if a call is late. */
    int64_t keep_place_by =
        t->queue ? lock__add_ns(now, lock__ms_to_ns(c->opts.waiter_liveness_ms) / 3) : t->deadline;

    t->woken = lock__subscriber_wait_release(
        c->subscriber, t->w,
        wake_time(now, t->a.ttl_ms, keep_place_by < t->deadline ? keep_place_by : t->deadline),
        &t->grant);
    if (!t->woken || t->grant.token <= t->a.fence) {
        t->grant.token = 0;
        return false;
    }
    /* A release gave us the lock (release.lua). */
    if (grant_is_taken_as_is(c, &t->grant, &t->a, t->watchdog, t->count)) {
        /* Its lease ends where our place in line would have, which our last try set:
         * counted from that try's sending, the local end is no later than Redis'
         * (holdings.h). The watchdog extends it within a third. */
        t->a = (attempt){
            .acquired = true, .count = 1, .token = t->grant.token, .sent_ns = t->place_sent_ns};
        t->granted_lease_ms = c->opts.waiter_liveness_ms;
        last_handoff_us = handoff_gap_us(&t->grant);
        return true;
    }
    /* Taken with acquire.lua, which keeps the grant's token when told it. */
    snprintf(t->known, sizeof(t->known), "%" PRId64, t->grant.token);
    return false;
}

/* Steps 0 to 4 (the file's header): tries, joins the release channel, sleeps and tries
 * again, until acquired (LOCK_OK, t->a.acquired), the deadline (LOCK_ERR_TIMEOUT) or an
 * error. */
static int try_until_deadline(try_call *t)
{
    lock_client *c = t->c;
    int64_t now, ready_by;
    int rc;

    /* Under contention the channel is subscribed already: joining before the first try,
     * rather than after it failed, spares the second try (steps 2 and 3), one acquire.lua
     * per wait instead of two. Uncontended, nothing listens and nothing is joined. */
    if (t->waits) {
        rc = lock__subscriber_join_if_listening(c->subscriber, t->k.channel, t->owner, &t->w);
        if (rc != LOCK_OK)
            return rc;
    }
    rc = attempt_once(c, &t->k, t->owner, t->lease, t->count, t->line, t->known, t->deadline,
                      t->hard_deadline, &t->a);
    t->place_sent_ns = t->a.sent_ns;
    while (rc == LOCK_OK && !t->a.acquired) {
        t->a.sent_ns = 0;
        t->in_line = t->queue;
        now = lock__now_ns();
        if (now >= t->deadline)
            return LOCK_ERR_TIMEOUT;
        if (t->w == NULL) {
            /* Subscribe before trying again: a release after this point wakes us. Joining
             * once per call, not per retry, keeps our place in the process's queue. */
            rc = lock__subscriber_join(c->subscriber, t->k.channel, t->owner, &t->w);
            if (rc != LOCK_OK)
                return rc;
            ready_by = lock__add_ns(now, lock__ms_to_ns(c->opts.command_timeout_ms));
            lock__subscriber_wait_ready(c->subscriber, t->w,
                                        ready_by < t->deadline ? ready_by : t->deadline);
        } else if (try_sleep(t, now)) {
            return LOCK_OK;
        }
        rc = attempt_once(c, &t->k, t->owner, t->lease, t->count, t->line, t->known, t->deadline,
                          t->hard_deadline, &t->a);
        if (rc == LOCK_OK && !t->a.acquired)
            t->place_sent_ns = t->a.sent_ns;
        else if (rc == LOCK_OK && t->grant.token > 0)
            last_handoff_us = handoff_gap_us(&t->grant); /* the granted lock, by acquire.lua */
    }
    return rc;
}

/* Step 5 and the record: settles a try that failed (settle_failed_try), records a holding,
 * counts, and leaves the release channel. Returns the call's result. */
static int try_finish(try_call *t, int rc, int64_t *fence_token)
{
    lock_client *c = t->c;

    if (rc != LOCK_OK)
        rc = settle_failed_try(c, &t->k, t->owner, t->count, t->lease, t->known, t->in_line,
                               t->hard_deadline, rc, &t->a);
    if (rc == LOCK_OK) {
        rc = lock__holdings_acquired(
            c->holdings, t->k.name, lock__thread_number(), t->owner, t->a.count, t->a.token,
            t->granted_lease_ms > 0 ? t->granted_lease_ms : t->lease_ms, t->watchdog, t->a.sent_ns);
        if (rc != LOCK_OK) {
            /* Out of memory for the record: give the hold back (best effort) rather than
             * keep a lock that nobody would renew or know to release. */
            int64_t ignored;

            release_settled(c, &t->k, t->owner, t->a.count - 1, t->hard_deadline, t->hard_deadline,
                            &ignored);
        } else if (fence_token != NULL)
            *fence_token = t->a.token;
    }
    if (rc == LOCK_ERR_TIMEOUT)
        atomic_fetch_add(&c->timeouts, 1);
    if (rc == LOCK_ERR_REDIS)
        lock__sentinel_follower_nudge(c->follower); /* a failover looks like this from here */
    if (t->w != NULL) {
        /* A wake-up used for a try that failed on an error (not on another holder) is
         * passed to another waiter: the lock may well be free. */
        lock__subscriber_leave(c->subscriber, t->w, rc == LOCK_OK,
                               t->woken && rc != LOCK_OK && rc != LOCK_ERR_TIMEOUT);
    }
    return rc;
}

int lock_try_lock(lock_client *c, const char *name, int64_t wait_ms, int64_t lease_ms,
                  int64_t *fence_token)
{
    try_call t;
    int rc;

    lock__error_clear();
    last_handoff_us = -1;
    rc = try_prepare(&t, c, name, wait_ms, lease_ms);
    if (rc != LOCK_OK)
        return rc;
    rc = try_until_deadline(&t);
    return try_finish(&t, rc, fence_token);
}

/* ---- unlock, is_held, inspect, ping, stats ---- */

int lock_inspect(lock_client *c, const char *name, lock_holder *out)
{
    const char *keys[2];
    lock__keys k;
    redisReply *r = NULL;
    int rc;

    lock__error_clear();
    if (c == NULL || out == NULL)
        return LOCK_ERR_INVALID;
    memset(out, 0, sizeof(*out));
    rc = lock__keys_init(&k, name);
    if (rc != LOCK_OK)
        return rc;
    keys[0] = k.name;
    keys[1] = k.fence;
    rc = lock__client_script(c, LOCK__SCRIPT_INSPECT, 2, keys, 0, NULL, &r);
    if (rc != LOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 4 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_INTEGER ||
        r->element[2]->type != REDIS_REPLY_INTEGER || r->element[3]->type != REDIS_REPLY_INTEGER) {
        lock__error_set("inspect.lua: unexpected reply");
        rc = LOCK_ERR_REDIS;
    } else {
        snprintf(out->owner, sizeof(out->owner), "%s", r->element[0]->str);
        out->held = out->owner[0] != '\0';
        out->count = r->element[1]->integer;
        out->ttl_ms = out->held ? r->element[2]->integer : -1;
        out->fence = r->element[3]->integer;
    }
    freeReplyObject(r);
    return rc;
}

int lock_fence_raise(lock_client *c, const char *name, int64_t at_least)
{
    const char *keys[1];
    char value[24];
    const char *args[1] = {value};
    lock__keys k;
    redisReply *r = NULL;
    int rc;

    lock__error_clear();
    if (c == NULL || at_least < 0)
        return LOCK_ERR_INVALID;
    rc = lock__keys_init(&k, name);
    if (rc != LOCK_OK)
        return rc;
    keys[0] = k.fence;
    snprintf(value, sizeof(value), "%" PRId64, at_least);
    rc = lock__client_script(c, LOCK__SCRIPT_FENCE_RAISE, 1, keys, 1, args, &r);
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

bool lock_client_is_cluster(const lock_client *c)
{
    return c != NULL && c->cluster != NULL;
}

const char *lock_client_process_id(const lock_client *c)
{
    return c->process_id;
}

void lock__client_parts_get(lock_client *c, lock__client_parts *out)
{
    *out = (lock__client_parts){&c->opts,    c->process_id, c->pool,
                                c->holdings, c->subscriber, c->cluster};
}

int lock_unlock(lock_client *c, const char *name)
{
    lock__keys k;
    char owner[LOCK__OWNER_MAX];
    int64_t remaining, start;
    int rc;

    lock__error_clear();
    if (c == NULL)
        return LOCK_ERR_INVALID;
    rc = lock__keys_init(&k, name);
    if (rc != LOCK_OK)
        return rc;
    lock__owner_format(c->process_id, owner);
    /* Redis is told the count to keep: this thread's own count minus the hold given back.
     * (No record at all: 0, give back whatever this owner may hold.) A release whose answer
     * is lost is sent once more on another connection (release_settled): a release cut
     * before it reached Redis would otherwise leave the lock to its lease. */
    start = lock__now_ns();
    rc = release_settled(
        c, &k, owner, lock__holdings_count(c->holdings, k.name, lock__thread_number(), NULL) - 1,
        lock__add_ns(start, lock__ms_to_ns(c->opts.command_timeout_ms)),
        lock__add_ns(start, 2 * lock__ms_to_ns(c->opts.command_timeout_ms)), &remaining);
    /* The local record follows Redis' answer. Without an answer one hold is dropped
     * locally anyway (remaining -1), so the watchdog stops renewing a lock whose release
     * failed: the lease then frees it. */
    if (rc == LOCK_ERR_REDIS)
        lock__sentinel_follower_nudge(c->follower);
    if (rc == LOCK_ERR_NOT_HELD)
        lock__holdings_forget(c->holdings, k.name, lock__thread_number());
    else
        lock__holdings_released(c->holdings, k.name, lock__thread_number(), remaining);
    return rc;
}

int lock_is_held(lock_client *c, const char *name)
{
    lock__keys k;

    lock__error_clear();
    if (c == NULL || lock__keys_init(&k, name) != LOCK_OK)
        return LOCK_ERR_INVALID;
    return lock__holdings_state(c->holdings, name, lock__thread_number(), lock__now_ns());
}

/* Borrows a pooled connection within one command timeout; *hard_by gets the moment by which
 * the round trip made on it must end (one more command timeout). */
static int borrow_for_one_command(lock_client *c, lock__conn **conn, int64_t *hard_by)
{
    int64_t borrow_by = lock__now_ns() + lock__ms_to_ns(c->opts.command_timeout_ms);

    *hard_by = borrow_by + lock__ms_to_ns(c->opts.command_timeout_ms);
    return lock__pool_borrow(c->pool, borrow_by, conn);
}

int lock__client_command(lock_client *c, int argc, const char **argv, redisReply **out)
{
    lock__conn *conn = NULL;
    int64_t hard_by;
    int rc;

    *out = NULL;
    if (argc < 1)
        return LOCK_ERR_INVALID;
    if (c->cluster != NULL) {
        int64_t borrow_by = lock__now_ns() + lock__ms_to_ns(c->opts.command_timeout_ms);

        return lock__cluster_command(c->cluster, borrow_by,
                                     borrow_by + lock__ms_to_ns(c->opts.command_timeout_ms), argc,
                                     argv, out);
    }
    rc = borrow_for_one_command(c, &conn, &hard_by);
    if (rc != LOCK_OK)
        return rc;
    /* NULL lengths: hiredis takes strlen of each argument, which are C strings here. */
    rc = lock__conn_command(conn, hard_by, argc, argv, NULL, out);
    lock__pool_return(c->pool, conn);
    return rc;
}

int lock__client_key_command(lock_client *c, int argc, const char **argv, redisReply **out)
{
    int rc;

    lock__error_clear();
    *out = NULL;
    if (c == NULL || argc < 2 || argv[1] == NULL || argv[1][0] == '\0')
        return LOCK_ERR_INVALID;
    rc = lock__client_command(c, argc, argv, out);
    if (rc == LOCK_OK && (*out)->type == REDIS_REPLY_ERROR) {
        lock__error_set("%s: %s", argv[0], (*out)->str);
        freeReplyObject(*out);
        *out = NULL;
        rc = LOCK_ERR_REDIS;
    }
    return rc;
}

int lock__client_script(lock_client *c, lock__script s, int nkeys, const char *const *keys,
                        int nargs, const char *const *args, redisReply **out)
{
    lock__conn *conn = NULL;
    int64_t hard_by;
    int rc;

    *out = NULL;
    if (c->cluster != NULL) {
        int64_t borrow_by = lock__now_ns() + lock__ms_to_ns(c->opts.command_timeout_ms);

        return lock__cluster_script(c->cluster, s, false, borrow_by,
                                    borrow_by + lock__ms_to_ns(c->opts.command_timeout_ms), nkeys,
                                    keys, nargs, args, NULL, out);
    }
    rc = borrow_for_one_command(c, &conn, &hard_by);
    if (rc != LOCK_OK)
        return rc;
    rc = lock__script_run(conn, s, hard_by, nkeys, keys, nargs, args, out);
    lock__pool_return(c->pool, conn);
    return rc;
}

int lock_ping(lock_client *c)
{
    const char *argv[1] = {"PING"};
    redisReply *r = NULL;
    int rc;

    lock__error_clear();
    if (c == NULL)
        return LOCK_ERR_INVALID;
    rc = lock__client_command(c, 1, argv, &r);
    if (rc != LOCK_OK)
        goto out;
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0) {
        lock__error_set("PING: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        rc = LOCK_ERR_REDIS;
    }
out:
    if (r != NULL)
        freeReplyObject(r);
    if (rc != LOCK_OK)
        lock__sentinel_follower_nudge(c->follower);
    /* Readiness wants yes or no: anything but a PONG (a busy pool included) is a no. */
    return rc == LOCK_OK ? LOCK_OK : LOCK_ERR_REDIS;
}

void lock_get_stats(lock_client *c, lock_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (c == NULL)
        return;
    out->renewals = lock__watchdog_renewals(c->watchdog);
    out->lost = lock__watchdog_lost(c->watchdog);
    out->timeouts = atomic_load(&c->timeouts);
    if (c->cluster != NULL) {
        lock__cluster_pool_stats(c->cluster, &out->pool_size, &out->pool_in_use);
        return;
    }
    out->pool_size = lock__pool_size(c->pool);
    out->pool_in_use = lock__pool_in_use(c->pool);
}
