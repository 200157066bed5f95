/*
 * cluster.h - routing the lock's commands over a Redis Cluster (hiredis 0.14 has no cluster
 * support, so the client does it itself, in this one file).
 *
 * A cluster splits the keys into 16384 slots (slot.h), each served by one master. The router
 * keeps a map slot -> master, read with CLUSTER SLOTS from any node it knows (the seed list
 * first given, then every master it has seen), and one pool of command connections per
 * master (pool.h). A command or script goes to the master of its first key's slot; every key
 * of a lock carries the lock's hash tag (keys.h), so a script never spans two slots.
 *
 * When the map is wrong (a slot moved, a failover promoted a replica), the node answers with
 * a redirection:
 *   MOVED slot host:port   the slot lives there now: the map is corrected for that slot, the
 *                          whole map read again (at most once per REFRESH_MIN_MS), and the
 *                          command sent there;
 *   ASK slot host:port     the slot is being migrated and this key is already there: the
 *                          command is sent there once, preceded by ASKING; the map stays.
 * At most LOCK__CLUSTER_REDIRECTS_MAX redirections per command, each round trip within the
 * command's own deadline. A connection failure (the master died) also has the map read again,
 * so the next command finds the replica the cluster promoted; the failed command is not
 * retried (its outcome is unknown, as with one Redis: the caller sees LOCK_ERR_REDIS).
 *
 * Pub/sub is not routed: a classic PUBLISH (release.lua's) is forwarded by the cluster bus to
 * every node, so the subscriber listens on one node (a master: the first seed's, or another
 * once that one has left the map, lock__cluster_keep_listener) and hears the releases of locks
 * of every slot.
 *
 * Threads: every function may be called from any thread at once.
 */
#ifndef LOCK_CLUSTER_H
#define LOCK_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>

#include "lock/scripts.h"
#include "lock/sentinel.h"
#include "lock/slot.h"

#define LOCK__CLUSTER_NODES_MAX 64    /* masters (and ASK targets) known at once */
#define LOCK__CLUSTER_REDIRECTS_MAX 5 /* redirections followed for one command */

typedef struct lock__cluster lock__cluster;

/* One line of CLUSTER SLOTS: slots first..last are served by the master at host:port. */
typedef struct lock__slot_range {
    int first, last;
    lock__addr master;
} lock__slot_range;

/*
 * Reads a CLUSTER SLOTS reply into ranges[0 .. *n) (at most max). A master whose host the
 * node left empty ("" or "?": it does not know how it is reached) is taken to be asked_host,
 * the address the question went to. Returns LOCK_OK, or LOCK_ERR_REDIS for a reply of any
 * other shape (an error reply, a slot out of range, first > last, more than max ranges).
 * Pure: no I/O.
 */
int lock__cluster_parse_slots(const redisReply *r, const char *asked_host, lock__slot_range *ranges,
                              int max, int *n);

/*
 * Makes a router from "host:port,host:port,..." (at most LOCK_SENTINEL_MAX seeds), with
 * pool_size connections per master and the given timeouts. It reads the map once from the
 * first seed that answers; if none does, every command tries again (the cluster may start
 * after the client). Returns LOCK_OK and *out; LOCK_ERR_INVALID for a bad list (the thread's
 * last error says why); LOCK_ERR_NOMEM.
 */
int lock__cluster_create(const char *seeds, int pool_size, int connect_timeout_ms,
                         int command_timeout_ms, lock__cluster **out);

/* Closes every connection and frees the router; every connection must have come back. NULL
 * is a no-op. */
void lock__cluster_destroy(lock__cluster *cl);

/* The first seed's address (where the subscriber listens). */
const lock__addr *lock__cluster_first_seed(const lock__cluster *cl);

/*
 * Replaces the map with ranges[0..n) (slots not in any range are served by nobody until the
 * next read), and forgets the masters it does not name, so that masters replaced over time
 * never fill the list. Returns LOCK_OK; LOCK_ERR_INVALID for a range outside the slots (the
 * map is then left as it was); LOCK_ERR_NOMEM when a master could not be added (one map
 * naming more than LOCK__CLUSTER_NODES_MAX, or out of memory: the old map stands, less the
 * masters it had forgotten).
 */
int lock__cluster_apply(lock__cluster *cl, const lock__slot_range *ranges, int n);

/*
 * Takes a MOVED into the map: the slot is served by host:port from now on. Returns LOCK_OK,
 * or LOCK_ERR_NOMEM / LOCK_ERR_INVALID as lock__cluster_apply. An ASK changes nothing
 * (LOCK_OK).
 */
int lock__cluster_redirected(lock__cluster *cl, const lock__redirect *r);

/* Where the map says `slot` is served: LOCK_OK with *out, or LOCK_ERR_REDIS when no master
 * is known for it. No I/O. */
int lock__cluster_master_of(lock__cluster *cl, int slot, lock__addr *out);

/* Reads the map again from the masters known, then the seeds, at most once per
 * REFRESH_MIN_MS unless forced; each node asked is bounded by the timeouts. Returns LOCK_OK
 * when a node answered (or a recent read made this one unneeded), else LOCK_ERR_REDIS.
 * (Commands read it by themselves, within their own deadline, after a MOVED, a connection
 * failure or a CLUSTERDOWN; when that deadline left no time, the next command reads it
 * first.) */
int lock__cluster_refresh(lock__cluster *cl, bool force);

/*
 * Sends argv on the master of argv[1]'s slot (argc 1, a command without a key such as PING:
 * the master of slot 0), following redirections. Waits for a connection until borrow_by and
 * for the answers until hard_by. Returns LOCK_OK and *out, which may be an error reply other
 * than a redirection (the caller decides); or LOCK_ERR_BUSY / LOCK_ERR_REDIS /
 * LOCK_ERR_NOMEM with the thread's last error set.
 */
int lock__cluster_command(lock__cluster *cl, int64_t borrow_by, int64_t hard_by, int argc,
                          const char **argv, redisReply **out);

/*
 * Runs script s on the master of keys[0]'s slot, following redirections, as
 * lock__script_run: LOCK_OK and *out (never an error reply), or LOCK_ERR_REDIS (also for a
 * script error, and LOCK_ERR_INVALID when the keys are in more than one slot: a cluster
 * would refuse them), LOCK_ERR_BUSY, LOCK_ERR_NOMEM. urgent (a release, a renewal): may use
 * the master pool's reserved connection (pool.h). *sent_ns (if not NULL) gets the moment
 * the last attempt was sent.
 */
int lock__cluster_script(lock__cluster *cl, lock__script s, bool urgent, int64_t borrow_by,
                         int64_t hard_by, int nkeys, const char *const *keys, int nargs,
                         const char *const *args, int64_t *sent_ns, redisReply **out);

/*
 * Keeps the address the client's subscriber listens on (lock.h: a classic PUBLISH reaches
 * every node, so one subscription hears every slot's releases) on a master of the map: after
 * each read of the map, if addr is not one of its masters (that node died and the cluster
 * promoted its replica; or it was a replica from the start), addr is moved to a master and
 * moved(arg) called, so the subscriber subscribes again there. Reads the map once now. addr
 * must outlive the router; moved is called from whichever thread read the map. addr NULL
 * stops it (once a read in progress has ended: no call of moved after this returns).
 */
void lock__cluster_keep_listener(lock__cluster *cl, lock__conn_address *addr,
                                 void (*moved)(void *arg), void *arg);

/* Connections in all masters' pools, and borrowed right now (for metrics). */
void lock__cluster_pool_stats(lock__cluster *cl, int *size, int *in_use);

#endif
