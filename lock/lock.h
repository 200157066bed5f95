/*
 * lock.h - a reentrant distributed lock on Redis, in the style of Redisson's RLock.
 *
 * The lock named N lives in Redis as:
 *   N           a hash {owner -> hold count} with a TTL (the lease);
 *   N:fence     a counter that only grows (no TTL): the fencing token source; when it is
 *               missing (first use, Redis lost its data) it starts at Redis' clock in
 *               microseconds, so tokens keep growing across a Redis restart too;
 *   N:released  the pub/sub channel a release is announced on, naming the waiter whose
 *               turn it is;
 *   N:waiters   the waiters' line, shared by every client: a sorted set {owner -> arrival};
 *   N:waiters:until  when each waiter's place lapses unless it calls again (a dead
 *               process's waiters leave the line by themselves).
 * An owner is "<128-bit random process id in hex>:<thread number>", so reentrancy is per
 * thread of a process, as in Redisson's "UUID:threadId". (The id is drawn by
 * lock_client_create(): one per client, which is one per process in practice; a child made
 * by fork() creates its own client and so gets its own id.)
 *
 * Every multi-step change is one Lua script (the .lua files of lock/, embedded by the
 * build), so that the check and the change cannot be separated by another client's command.
 *
 * This module knows Redis (through hiredis) and nothing else: it does not log, it returns
 * negative codes (lock_strerror() names them) and keeps the last Redis error text per
 * thread for the caller to report (lock_last_error()).
 *
 * Threads: one lock_client is shared by all threads of the process. Each call borrows a
 * command connection from a small bounded pool, so no two threads ever use one hiredis
 * context at once. The client runs two threads of its own: the subscriber (release
 * messages) and the watchdog (lease renewal).
 *
 * Signals: hiredis writes with write(2), so a write to a connection Redis has just closed
 * raises SIGPIPE in the calling thread. The process must ignore SIGPIPE (as servers do);
 * the client's own threads block it.
 *
 * lock/README.md explains the design.
 */
#ifndef LOCK_LOCK_H
#define LOCK_LOCK_H

#include "lock/result.h"

#include <stdbool.h>
#include <stdint.h>

/* Pass as lease_ms to let the watchdog renew the lease while the lock is held. */
#define LOCK_LEASE_WATCHDOG (-1)

typedef struct lock_client lock_client;

typedef struct lock_options {
    const char *redis_host;    /* default "127.0.0.1"; copied by lock_client_create() */
    int redis_port;            /* default 6379 */
    int connect_timeout_ms;    /* default 500 */
    int command_timeout_ms;    /* default 500: bounds every round trip */
    int64_t watchdog_lease_ms; /* lease used with LOCK_LEASE_WATCHDOG; default 30000;
                                  the watchdog renews every lease/3 */
    int64_t max_hold_ms;       /* the watchdog renews a holding for this long at most, then
                                  lets its lease run out (> 0); default 60000 */
    int pool_size;             /* command connections; default 16 */
    /* Redis Sentinel (optional): "host:port,host:port,..." and the master's name. When set,
     * the client asks the Sentinels for the master (checked with ROLE), uses redis_host/port
     * only if none answers at start, and follows a failover by itself (lock/sentinel.h).
     * Both are copied; default NULL (one fixed Redis). */
    const char *sentinels;
    const char *master_name;
    /* Replication wait (optional): after each acquisition, WAIT until this many replicas
     * have the lock, at most sync_timeout_ms; when fewer acknowledge, the acquisition is
     * undone (released) and try_lock returns LOCK_ERR_REDIS. Narrows, does not close, the
     * window in which a failover loses a granted lock. Default 0 (no wait), 200 ms. */
    int sync_replicas;
    int sync_timeout_ms;
    /* The fair lock (default true): a caller that waits stands in one line shared by all
     * clients, and a free lock goes to the waiter that has waited longest, whichever process
     * it is in. false: no line; whoever reaches Redis first after a release wins, each
     * process sending its own oldest waiter (every client of one lock should agree: a client
     * without the line also waits behind one that others keep). */
    bool fair;
    /* A waiter's place in line lapses this long after its last call (it calls every third
     * of it while waiting), so the waiters of a process that died leave the line by
     * themselves; until then a free lock waits for them. Default 1500, 30..600000. */
    int64_t waiter_liveness_ms;
    /* Redis Cluster (optional): "host:port,host:port,..." (any nodes of the cluster: the
     * client reads the slot map from them). When set, every command and script goes to the
     * master of its first key's slot (lock/cluster.h), redis_host/port are not used, and every
     * lock name must carry a hash tag ("lock:goods:{42}", lock/keys.h) or try_lock refuses it
     * with LOCK_ERR_INVALID. Not with sentinels nor sync_replicas (LOCK_ERR_INVALID). Copied;
     * default NULL (no cluster). */
    const char *cluster_nodes;
} lock_options;

/* Fills *opts with the defaults above. */
void lock_options_init(lock_options *opts);

/*
 * Creates the client and starts its subscriber and watchdog threads. Connections to Redis
 * are made lazily, so this succeeds even while Redis is down. On success *out owns the
 * client; free it with lock_client_destroy(). Returns LOCK_OK, LOCK_ERR_INVALID or
 * LOCK_ERR_NOMEM.
 */
int lock_client_create(const lock_options *opts, lock_client **out);

/*
 * Stops the watchdog (it renews nothing more) and the subscriber, closes every connection
 * and frees the client. Locks still held are not released: their leases run out. Call it
 * once, after every other call on the client has returned. NULL is a no-op.
 */
void lock_client_destroy(lock_client *c);

/*
 * Takes the lock `name` (1 to 512 bytes) for the calling thread.
 *   wait_ms  >= 0: how long to wait in all, round trips included; 0 tries once. The call
 *            returns no later than wait_ms plus one command timeout (with sync_replicas > 0,
 *            plus sync_timeout_ms and two command timeouts more: the WAIT, then the undo).
 *   lease_ms > 0: the lock expires after lease_ms unless released;
 *            LOCK_LEASE_WATCHDOG: default lease, renewed by the watchdog while held.
 * Reentrant: a thread that holds the lock takes it again (the hold count grows; the TTL is
 * reset to this call's lease, the first lease for LOCK_LEASE_WATCHDOG) and gets the same
 * fencing token, unless the counter moved under its holding (then a new, larger one). Once any hold
 * of a holding was taken with LOCK_LEASE_WATCHDOG, the watchdog renews it until its last release,
 * or until it has been held for max_hold_ms. Waiting does not poll: the waiter sleeps until a
 * release calls it, or the holder's remaining TTL (or the wait) runs out, plus a little jitter.
 * With opts.fair it stands in line: it wakes every third of the liveness to keep its place, and the
 * lock is its own only when every waiter that came before it has had the lock or left the line; a
 * try with wait_ms 0 takes a free lock only when nobody is in line. A release hands the lock to the
 * first in line itself (the grant, lock/README.md): a LOCK_LEASE_WATCHDOG waiter then returns
 * without a round trip of its own. Returns LOCK_OK and sets *fence_token (if not NULL) to the token
 * of this holding; LOCK_ERR_TIMEOUT; LOCK_ERR_REDIS (never "acquired" on a lost connection; with
 * sync_replicas, also a grant that too few replicas acknowledged, released again); LOCK_ERR_BUSY;
 * LOCK_ERR_INVALID.
 * An acquire whose answer is lost (late, swallowed, cut, or never sent) is settled within
 * the same bound: leave.lua finds a hold the acquire made, which acquire.lua then takes for
 * the caller (LOCK_OK), or takes it out of the line, and a release whose answer is read gives
 * back what is left; whatever the bound leaves no time for ends with the first lease of a
 * LOCK_LEASE_WATCHDOG holding (the waiter liveness, extended to the watchdog lease at the
 * first renewal) or with lease_ms.
 * A LOCK_LEASE_WATCHDOG holding's token is larger than every token before it (a token names
 * one holding; lock/README.md, "Fencing tokens").
 */
int lock_try_lock(lock_client *c, const char *name, int64_t wait_ms, int64_t lease_ms,
                  int64_t *fence_token);

/*
 * Releases one hold of `name` by the calling thread. At hold count zero the key is deleted,
 * a release message is published and the watchdog stops renewing it.
 * Returns LOCK_OK; LOCK_ERR_NOT_HELD when the caller is not an owner (another owner's lock
 * is never touched); LOCK_ERR_REDIS, or LOCK_ERR_BUSY (no connection free within one
 * command timeout: a release takes the pool's reserved connection when the others are
 * out, so only another release can keep it waiting). A release whose answer is lost is sent
 * once more on another connection while the bound leaves time (release.lua sets counts, so
 * twice is safe; a second answer that finds nothing held means the first ran: LOCK_OK).
 * After an error the hold is dropped locally all the same, so the watchdog does not keep a
 * lock alive that its owner meant to release: the lease frees it. Takes at most two command
 * timeouts.
 */
int lock_unlock(lock_client *c, const char *name);

/*
 * Whether the calling thread still holds `name`, as far as this process knows: LOCK_OK
 * while held; LOCK_ERR_LOST when the watchdog found the lock gone or another's, or when its
 * lease has run out with no renewal (counted from before the acquiring command was sent,
 * so never later than Redis' own expiry) (call lock_unlock() anyway to clear the local
 * record); LOCK_ERR_NOT_HELD when this thread never took it. Makes no round trip.
 */
int lock_is_held(lock_client *c, const char *name);

/* Counters for metrics, read without blocking. */
typedef struct lock_stats {
    uint64_t renewals; /* successful watchdog renewals */
    uint64_t lost;     /* holdings the watchdog found lost */
    uint64_t timeouts; /* try_lock calls that returned LOCK_ERR_TIMEOUT */
    int pool_size;     /* command connections in the pool */
    int pool_in_use;   /* borrowed right now */
} lock_stats;

void lock_get_stats(lock_client *c, lock_stats *out);

/* A static English name for a LOCK_* code. */
const char *lock_strerror(int code);

/* The last Redis error text seen by the calling thread ("" if none); valid until its next
 * call on any lock_client. It is Redis' or hiredis' own text: for a log, not for a client. */
const char *lock_last_error(void);

/* What the calling thread's last call met (LOCK_MET_OTHER when it did not fail); for
 * LOCK_MET_NO_ANSWER, *timeout_ms (may be NULL) is set to the command timeout that ran out.
 * Valid until the thread's next call on any lock_client. */
lock_met lock_last_met(int64_t *timeout_ms);

/*
 * Raises the fencing counter of lock `name` to at least `at_least`, the largest token of this
 * counter that the storage has accepted (it refused a token at or below it): after a failover
 * to a replica whose counter was behind, the next holding's token is then past it, and the
 * failover costs one refused sale per client rather than one per missing increment. Never
 * lowers the counter; a counter that does not exist is left alone (acquire.lua starts it at
 * Redis' clock). One round trip. LOCK_OK, LOCK_ERR_INVALID, LOCK_ERR_REDIS or LOCK_ERR_BUSY.
 */
int lock_fence_raise(lock_client *c, const char *name, int64_t at_least);

/* The hand-off gap of the calling thread's last lock_try_lock, in microseconds: from the
 * release that granted this caller the lock as the head of the line (release.lua, by Redis'
 * clock) to the moment the call returned it (by this host's wall clock; on another host
 * the figure includes the clocks' offset), which is the moment before its first statement
 * as holder. -1 when that call did not take the lock from a release to the line (a free
 * lock, a reentrant take, a failure). Time between two sections in which the lock served
 * nobody: what the holders' serial order loses per hand-off. */
int64_t lock_last_handoff_us(void);

/* Who holds a lock, as Redis says now (lock_inspect). */
typedef struct lock_holder {
    bool held;
    char owner[80]; /* "<process id>:<thread number>", "" when free */
    int64_t count;  /* hold count */
    int64_t ttl_ms; /* remaining lease; -1: none */
    int64_t fence;  /* the lock's fencing counter: the holder's token while held */
} lock_holder;

/* Reads who holds `name` in one atomic step (inspect.lua), changing nothing, within one
 * command timeout. For the live page. LOCK_OK, LOCK_ERR_INVALID, LOCK_ERR_REDIS or
 * LOCK_ERR_BUSY. */
int lock_inspect(lock_client *c, const char *name, lock_holder *out);

/* This client's process id: the part of every owner it writes before the ':' (32 hex
 * digits, NUL-terminated, valid as long as the client). Tells a replica's own holdings
 * apart from others' in lock_inspect's answer. */
const char *lock_client_process_id(const lock_client *c);

/* Whether the client routes over a Redis Cluster (cluster_nodes was set): its lock names must
 * then carry a hash tag. false for NULL. */
bool lock_client_is_cluster(const lock_client *c);

/* Sends PING on a pooled connection: LOCK_OK or LOCK_ERR_REDIS. For readiness checks. */
int lock_ping(lock_client *c);

#endif
