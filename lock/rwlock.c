/*
 * rwlock.c - the read-write lock (see rwlock.h), on the parts of a lock_client.
 *
 * lock_rw_lock, step by step (lock_try_lock's shape, without the grant):
 *   0. if the wait allows and this process already listens on the lock's channel, join it
 *      now, so a release after step 1 reaches us;
 *   1. run rw_read.lua or rw_write.lua once: taken, or {0, ms to wait}; with a wait the call
 *      also kept our place in N:readers or N:writers;
 *   2. not joined yet: join the channel and wait until subscribed (a release between step 1
 *      and now would otherwise go unheard), then try again;
 *   3. sleep until a release calls us by name, or the holder's TTL runs out, or our place
 *      needs keeping (a third of the liveness), or the deadline; try again; until taken or
 *      past the deadline;
 *   4. leaving without the lock: give up the place (rw_leave.lua), best effort.
 * The connection is borrowed for each round trip only, never held while sleeping.
 */
#include "lock/rwlock.h"
#include "lock/client.h"
#include "lock/clock.h"
#include "lock/error.h"
#include "lock/keys.h"
#include "lock/owner.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest name: its longest key, "<name>:write:fence", is still a lock name (keys.h), so
 * the watchdog can derive a side's counter from the side's key. */
#define RW_NAME_MAX (LOCK__NAME_MAX - (sizeof(":write:fence") - 1))

typedef struct rw_keys {
    char write[LOCK__NAME_MAX + 1];
    char write_fence[LOCK__NAME_MAX + 1];
    char read[LOCK__NAME_MAX + 1];
    char read_fence[LOCK__NAME_MAX + 1];
    char writers[LOCK__NAME_MAX + 1];
    char readers[LOCK__NAME_MAX + 1];
    char channel[LOCK__NAME_MAX + 1];
} rw_keys;

/* One call's context: who asks for which side of what. */
typedef struct rw_call {
    lock__client_parts p;
    rw_keys k;
    lock_rw_side side;
    char owner[LOCK__OWNER_MAX];
    char lease[24], count[24], line[24];
} rw_call;

/* What one take script said. */
typedef struct rw_try {
    bool acquired;
    int64_t count;   /* taken: the side's hold count now */
    int64_t token;   /* taken: the token */
    int64_t ttl_ms;  /* not taken: how long the caller may sleep (-1: no bound) */
    int64_t sent_ns; /* when the script was sent; 0: not sent */
} rw_try;

static int rw_keys_init(rw_keys *k, const char *name)
{
    if (name == NULL || name[0] == '\0' || strlen(name) > RW_NAME_MAX)
        return LOCK_ERR_INVALID;
    snprintf(k->write, sizeof(k->write), "%s:write", name);
    snprintf(k->write_fence, sizeof(k->write_fence), "%s:write:fence", name);
    snprintf(k->read, sizeof(k->read), "%s:read", name);
    snprintf(k->read_fence, sizeof(k->read_fence), "%s:read:fence", name);
    snprintf(k->writers, sizeof(k->writers), "%s:writers", name);
    snprintf(k->readers, sizeof(k->readers), "%s:readers", name);
    snprintf(k->channel, sizeof(k->channel), "%s:released", name);
    return LOCK_OK;
}

/* The key a side is recorded under in the holdings (and renewed by, with its ":fence"). */
static const char *side_key(const rw_call *call, lock_rw_side side)
{
    return side == LOCK_RW_WRITE ? call->k.write : call->k.read;
}

static int64_t own_count(const rw_call *call, lock_rw_side side)
{
    return lock__holdings_count(call->p.holdings, side_key(call, side), lock__thread_number(),
                                NULL);
}

static int rw_call_init(rw_call *call, lock_client *c, const char *name, lock_rw_side side)
{
    lock__error_clear();
    if (c == NULL || (side != LOCK_RW_READ && side != LOCK_RW_WRITE))
        return LOCK_ERR_INVALID;
    if (rw_keys_init(&call->k, name) != LOCK_OK)
        return LOCK_ERR_INVALID;
    lock__client_parts_get(c, &call->p);
    call->side = side;
    lock__owner_format(call->p.process_id, call->owner);
    return LOCK_OK;
}

/* Runs script s (a release: urgent, may use the pool's reserved connection) waiting for a
 * connection until borrow_by and for the answer until hard_by; *sent_ns (if not NULL) gets
 * when it went out. On LOCK_OK the caller frees *out. */
static int rw_script(const rw_call *call, lock__script s, bool urgent, int64_t borrow_by,
                     int64_t hard_by, int nkeys, const char *const *keys, int nargs,
                     const char *const *args, int64_t *sent_ns, redisReply **out)
{
    lock__conn *conn = NULL;
    int rc;

    *out = NULL;
    if (call->p.cluster != NULL)
        return lock__cluster_script(call->p.cluster, s, urgent, borrow_by, hard_by, nkeys, keys,
                                    nargs, args, sent_ns, out);
    rc = urgent ? lock__pool_borrow_for_release(call->p.pool, borrow_by, &conn)
                : lock__pool_borrow(call->p.pool, borrow_by, &conn);
    if (rc != LOCK_OK)
        return rc;
    if (sent_ns != NULL)
        *sent_ns = lock__now_ns();
    rc = lock__script_run(conn, s, hard_by, nkeys, keys, nargs, args, out);
    lock__pool_return(call->p.pool, conn);
    return rc;
}

/* Runs rw_read.lua or rw_write.lua once. */
static int try_once(const rw_call *call, int64_t borrow_by, int64_t hard_by, rw_try *t)
{
    const rw_keys *k = &call->k;
    const char *read_keys[5] = {k->write, k->read, k->read_fence, k->writers, k->readers};
    const char *write_keys[4] = {k->write, k->write_fence, k->read, k->writers};
    const char *args[4] = {call->owner, call->lease, call->count, call->line};
    bool read = call->side == LOCK_RW_READ;
    redisReply *r = NULL;
    int rc;

    rc = rw_script(call, read ? LOCK__SCRIPT_RW_READ : LOCK__SCRIPT_RW_WRITE, false, borrow_by,
                   hard_by, read ? 5 : 4, read ? read_keys : write_keys, 4, args, &t->sent_ns, &r);
    if (rc != LOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_INTEGER) {
        lock__error_set("%s: unexpected reply", read ? "rw_read.lua" : "rw_write.lua");
        rc = LOCK_ERR_REDIS;
    } else {
        t->acquired = r->element[0]->integer >= 1;
        t->count = r->element[0]->integer;
        t->token = t->acquired ? r->element[1]->integer : 0;
        t->ttl_ms = t->acquired ? 0 : r->element[1]->integer;
    }
    freeReplyObject(r);
    return rc;
}

/* Runs rw_release.lua for `side`, leaving the owner `keep` holds of it. LOCK_OK with
 * *remaining, LOCK_ERR_NOT_HELD, or an error (*remaining -1). */
static int release_once(const rw_call *call, lock_rw_side side, int64_t keep, int64_t *remaining)
{
    int64_t cmd_ns = lock__ms_to_ns(call->p.opts->command_timeout_ms);
    int64_t borrow_by = lock__now_ns() + cmd_ns;
    const rw_keys *k = &call->k;
    const char *keys[4] = {side_key(call, side), side == LOCK_RW_WRITE ? k->read : k->write,
                           k->writers, k->readers};
    char keep_text[24];
    const char *args[3] = {call->owner, k->channel, keep_text};
    redisReply *r = NULL;
    int rc;

    *remaining = -1;
    snprintf(keep_text, sizeof(keep_text), "%" PRId64, keep < 0 ? 0 : keep);
    rc = rw_script(call, LOCK__SCRIPT_RW_RELEASE, true, borrow_by, borrow_by + cmd_ns, 4, keys, 3,
                   args, NULL, &r);
    if (rc != LOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_INTEGER) {
        lock__error_set("rw_release.lua: unexpected reply type %d", r->type);
        rc = LOCK_ERR_REDIS;
    } else if (r->integer < 0) {
        rc = LOCK_ERR_NOT_HELD;
    } else {
        *remaining = r->integer;
    }
    freeReplyObject(r);
    return rc;
}

/* Gives up the caller's place in line by hard_by, best effort: a place not given up lapses
 * within the liveness (rw_leave.lua). */
static void leave_line(const rw_call *call, int64_t hard_by)
{
    const rw_keys *k = &call->k;
    const char *keys[3] = {call->side == LOCK_RW_WRITE ? k->writers : k->readers, k->readers,
                           k->write};
    const char *args[2] = {call->owner, k->channel};
    redisReply *r = NULL;

    if (rw_script(call, LOCK__SCRIPT_RW_LEAVE, false, hard_by, hard_by, 3, keys, 2, args, NULL,
                  &r) == LOCK_OK)
        freeReplyObject(r);
}

/* When a waiter that is not called tries again: the holder's TTL ended, its place needs
 * keeping (a third of the liveness), or the deadline, whichever is first. */
static int64_t wake_time(const rw_call *call, int64_t now, int64_t ttl_ms, int64_t deadline)
{
    int64_t at = lock__add_ns(now, lock__ms_to_ns(call->p.opts->waiter_liveness_ms) / 3);

    if (ttl_ms >= 0 && lock__add_ns(now, lock__ms_to_ns(ttl_ms) + LOCK__NS_PER_MS) < at)
        at = lock__add_ns(now, lock__ms_to_ns(ttl_ms) + LOCK__NS_PER_MS);
    return at < deadline ? at : deadline;
}

/* Steps 0 to 3 of the file's comment: tries until taken, an error or the deadline.
 * *w is the caller's waiter (NULL: not joined); *woken whether its last sleep was called. */
static int take_until(rw_call *call, int64_t wait_ms, int64_t deadline, int64_t hard_deadline,
                      lock__waiter **w, bool *woken, rw_try *t)
{
    lock__subscriber *sub = call->p.subscriber;
    int64_t cmd_ns = lock__ms_to_ns(call->p.opts->command_timeout_ms);
    lock__grant grant;
    int rc;

    if (wait_ms > 0) {
        rc = lock__subscriber_join_if_listening(sub, call->k.channel, call->owner, w);
        if (rc != LOCK_OK)
            return rc;
    }
    rc = try_once(call, deadline, hard_deadline, t);
    while (rc == LOCK_OK && !t->acquired) {
        int64_t now = lock__now_ns();

        t->sent_ns = 0;
        if (now >= deadline)
            return LOCK_ERR_TIMEOUT;
        if (*w == NULL) {
            rc = lock__subscriber_join(sub, call->k.channel, call->owner, w);
            if (rc != LOCK_OK)
                return rc;
            lock__subscriber_wait_ready(sub, *w, now + cmd_ns < deadline ? now + cmd_ns : deadline);
        } else {
            *woken = lock__subscriber_wait_release(
                sub, *w, wake_time(call, now, t->ttl_ms, deadline), &grant);
        }
        rc = try_once(call, deadline, hard_deadline, t);
    }
    return rc;
}

int lock_rw_lock(lock_client *c, const char *name, lock_rw_side side, int64_t wait_ms,
                 int64_t lease_ms, int64_t *token)
{
    rw_call call;
    rw_try t = {0};
    lock__waiter *w = NULL;
    bool woken = false, watchdog = lease_ms == LOCK_LEASE_WATCHDOG;
    int64_t deadline, hard_deadline, count;
    int rc = rw_call_init(&call, c, name, side);

    if (rc != LOCK_OK || wait_ms < 0 || (lease_ms <= 0 && !watchdog))
        return LOCK_ERR_INVALID;
    if (side == LOCK_RW_WRITE && own_count(&call, LOCK_RW_READ) > 0 &&
        own_count(&call, LOCK_RW_WRITE) == 0) {
        lock__error_set("the write side asked while holding the read side: it would wait for "
                        "itself; give the read side back first");
        return LOCK_ERR_INVALID;
    }
    if (watchdog)
        lease_ms = call.p.opts->watchdog_lease_ms;
    count = own_count(&call, side) + 1;
    snprintf(call.lease, sizeof(call.lease), "%" PRId64, lease_ms);
    snprintf(call.count, sizeof(call.count), "%" PRId64, count);
    snprintf(call.line, sizeof(call.line), "%" PRId64,
             wait_ms > 0 ? call.p.opts->waiter_liveness_ms : (int64_t)0);
    deadline = lock__add_ns(lock__now_ns(), lock__ms_to_ns(wait_ms));
    hard_deadline = lock__add_ns(deadline, lock__ms_to_ns(call.p.opts->command_timeout_ms));

    rc = take_until(&call, wait_ms, deadline, hard_deadline, &w, &woken, &t);
    if (rc == LOCK_ERR_TIMEOUT)
        leave_line(&call, hard_deadline);
    if (rc == LOCK_OK) {
        lock__script renew = LOCK__SCRIPT_RW_RENEW;

        rc = lock__holdings_acquired_as(call.p.holdings, renew, side_key(&call, side),
                                        lock__thread_number(), call.owner, t.count, t.token,
                                        lease_ms, watchdog, t.sent_ns);
        if (rc == LOCK_OK && token != NULL)
            *token = t.token;
    }
    if ((rc == LOCK_ERR_REDIS && t.sent_ns != 0) || rc == LOCK_ERR_NOMEM) {
        /* The take may have run with its answer lost (or there is no memory to record it):
         * give back what it may have added, so that no hold nobody knows of keeps the other
         * side out for a lease. The script sets the count to this thread's own. */
        int64_t ignored;

        release_once(&call, side, count - 1, &ignored);
    }
    if (w != NULL)
        lock__subscriber_leave(call.p.subscriber, w, rc == LOCK_OK,
                               woken && rc != LOCK_OK && rc != LOCK_ERR_TIMEOUT);
    return rc;
}

int lock_rw_unlock(lock_client *c, const char *name, lock_rw_side side)
{
    rw_call call;
    int64_t remaining;
    int rc = rw_call_init(&call, c, name, side);

    if (rc != LOCK_OK)
        return rc;
    rc = release_once(&call, side, own_count(&call, side) - 1, &remaining);
    if (rc == LOCK_ERR_NOT_HELD)
        lock__holdings_forget(call.p.holdings, side_key(&call, side), lock__thread_number());
    else
        lock__holdings_released(call.p.holdings, side_key(&call, side), lock__thread_number(),
                                remaining);
    return rc;
}

int lock_rw_is_held(lock_client *c, const char *name, lock_rw_side side)
{
    rw_call call;
    int rc = rw_call_init(&call, c, name, side);

    if (rc != LOCK_OK)
        return rc;
    return lock__holdings_state(call.p.holdings, side_key(&call, side), lock__thread_number(),
                                lock__now_ns());
}
