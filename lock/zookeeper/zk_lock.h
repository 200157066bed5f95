/*
 * zk_lock.h - the queue lock (lock/queue/queue_lock.h) on ZooKeeper, with the ZooKeeper C
 * client (libzookeeper_mt): the InterProcessMutex recipe of Apache Curator, done by hand.
 *
 * ZooKeeper's side of the recipe:
 *   - the lease is the client's one ZooKeeper session: the server deletes the session's
 *     ephemeral nodes when it has heard nothing from the client for the session timeout.
 *     The client library's own heartbeats keep it alive; the queue lock's keeper thread
 *     confirms it every third of the timeout, so that "held" can be judged without a round
 *     trip. A session that expires (a process paused or cut off past the timeout) is the
 *     lock lost, and the next acquire opens a new session.
 *   - a waiter for lock N creates an ephemeral sequential node /locks/N/lock-<seq>; the
 *     server's sequence number is its place in the line. /locks/N is a container node,
 *     which the server deletes once it is empty.
 *   - the fencing token is the node's czxid: the zxid of the transaction that created it.
 *     Every write to the ensemble takes the next zxid, so a later holder of any lock always
 *     has a greater token. (The sequence number grows only within one parent, and starts
 *     again at 0 if the parent is deleted and created again: a weaker token.)
 *   - an unclear create or delete ends the session, which takes every node of it away.
 *   - a connection attempt the server accepts and leaves unanswered for a request timeout
 *     (ZooKeeper does so with a connection made as it starts) gives the session up (its
 *     holdings lost, its nodes gone when the server expires it), and a new one is opened:
 *     the library alone would wait two thirds of the session timeout on the attempt. An
 *     attempt refused (a server down) does not: the library tries again on its own, and the
 *     session, which may outlive the server's restart, is kept.
 *
 * A request is made only on a connected session (after at most one request timeout spent
 * waiting for one to connect), and each answer is awaited at most one request timeout: the
 * steps are the session, the create, a listing of the line per wake-up (the last one after
 * wait_ms) and, on giving up, the delete, so an acquire returns within wait_ms + 5 request
 * timeouts even when the server hangs.
 */
#ifndef LOCK_ZOOKEEPER_ZK_LOCK_H
#define LOCK_ZOOKEEPER_ZK_LOCK_H

#include "lock/queue/queue_lock.h"

#include <stdint.h>

/* A queue lock whose backend is ZooKeeper: use it with queue_lock_acquire() and the rest. */
typedef queue_lock zk_lock_client;

/* Creates the client (opts->servers: the ensemble, "host:port[,host:port...]"; a lease_ms
 * above INT32_MAX is cut to it) and starts its keeper thread. Connects lazily: succeeds
 * while ZooKeeper is down. QUEUE_LOCK_OK, QUEUE_LOCK_ERR_INVALID or QUEUE_LOCK_ERR_NOMEM. Free
 * with queue_lock_destroy(), which closes the session (the server deletes its nodes at
 * once). */
int zk_lock_client_create(const queue_lock_options *opts, zk_lock_client **out);

/* The current session's id and password (for tests that expire it from another handle).
 * QUEUE_LOCK_ERR_NOT_HELD when there is no connected session. */
int zk_lock_session(zk_lock_client *c, int64_t *id, char passwd[16]);

#endif
