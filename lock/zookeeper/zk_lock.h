/*
 * zk_lock.h - a reentrant distributed lock on ZooKeeper, with the ZooKeeper C client
 * (libzookeeper_mt): the InterProcessMutex recipe of Apache Curator, done by hand.
 *
 * The recipe:
 *   - the client keeps one ZooKeeper session. The session timeout is the lease: the server
 *     deletes the session's ephemeral nodes when it has heard nothing from the client for
 *     that long. The client library's own heartbeats (it pings every third of the timeout
 *     when idle) are the watchdog, and a thread of this client confirms the session every
 *     third of the timeout so that "held" can be judged without a round trip (is_held).
 *   - a waiter for lock N creates an ephemeral sequential node /locks/N/lock-<seq>. The
 *     server's sequence number is its place in the queue.
 *   - it holds the lock when no node under /locks/N has a smaller sequence; otherwise it
 *     watches only its predecessor (the node with the greatest smaller sequence) for
 *     deletion: a release wakes one waiter, never the herd.
 *   - release deletes the node; a crashed holder's node goes with its session.
 *   - the fencing token is the node's czxid: the zxid of the transaction that created it.
 *     Every write to the ensemble takes the next zxid, so a later holder of any lock always
 *     has a greater token. (The sequence number grows only within one parent, and starts
 *     again at 0 if the parent is deleted and created again: a weaker token.)
 *
 * A session that expires (the server dropped it: a process paused or cut off past the
 * timeout) is the lock lost: every holding taken under it is reported lost, and the next
 * acquire opens a new session. A node whose fate this client cannot know (a create or a
 * delete whose answer was lost) would block the lock for as long as the session lives, so
 * the client then ends its session, which takes every node of it away.
 *
 * Reentrancy is per thread of the process, as with the Redis lock: a thread that holds N
 * takes it again without a round trip and gets the same token.
 *
 * The module knows ZooKeeper and nothing else: it does not log (it silences the client
 * library's log); it returns ZK_LOCK_* codes and keeps the last error text per thread.
 */
#ifndef LOCK_ZOOKEEPER_ZK_LOCK_H
#define LOCK_ZOOKEEPER_ZK_LOCK_H

#include <stdint.h>

enum {
    ZK_LOCK_OK = 0,
    ZK_LOCK_ERR_TIMEOUT = -1,  /* held by another for the whole wait */
    ZK_LOCK_ERR_SERVER = -2,   /* ZooKeeper unreachable, timed out or answered an error */
    ZK_LOCK_ERR_NOT_HELD = -3, /* the calling thread does not hold this lock */
    ZK_LOCK_ERR_INVALID = -4,
    ZK_LOCK_ERR_NOMEM = -5,
    ZK_LOCK_ERR_LOST = -6, /* the session this holding was taken under is gone */
};

typedef struct zk_lock_client zk_lock_client;

typedef struct zk_lock_options {
    const char *hosts;      /* "127.0.0.1:2181[,host:port...]"; copied */
    int session_ms;         /* the session timeout asked for (the server may clamp it to its
                               min/maxSessionTimeout); default 10000 */
    int request_timeout_ms; /* bound on waiting for a session to connect, and on each
                               request's answer; default 1000 */
} zk_lock_options;

void zk_lock_options_init(zk_lock_options *opts);

/* Creates the client and starts its confirming thread. Connects lazily: succeeds while
 * ZooKeeper is down. Free with zk_lock_client_destroy(). */
int zk_lock_client_create(const zk_lock_options *opts, zk_lock_client **out);

/* Stops the thread, closes the session (the server deletes its nodes at once) and frees the
 * client. NULL is a no-op. */
void zk_lock_client_destroy(zk_lock_client *c);

/*
 * Takes lock `name` (1 to 200 bytes, no '/') for the calling thread, waiting at most
 * wait_ms (0: try once) for the holders before it. A request is made only on a connected
 * session (after at most one request timeout spent waiting for one to connect), and each
 * answer is awaited at most one request timeout: the steps are the session, the create, a
 * listing of the queue per wake-up (the last one after wait_ms) and, on giving up, the
 * delete, so a call returns within wait_ms + 5 request timeouts even when the server hangs.
 * Returns ZK_LOCK_OK with *token set to
 * the holding's fencing token (the node's czxid); ZK_LOCK_ERR_TIMEOUT (the node is deleted
 * again); ZK_LOCK_ERR_SERVER (also when the session expired during the wait);
 * ZK_LOCK_ERR_LOST (the thread holds `name` under a lost session: release it first);
 * ZK_LOCK_ERR_INVALID; ZK_LOCK_ERR_NOMEM.
 */
int zk_lock_acquire(zk_lock_client *c, const char *name, int64_t wait_ms, int64_t *token);

/* Releases one hold; at zero the node is deleted. ZK_LOCK_ERR_NOT_HELD when the thread does
 * not hold it; ZK_LOCK_ERR_SERVER when the delete failed (the holding is forgotten all the
 * same, and the session is ended so that the node goes with it). */
int zk_lock_release(zk_lock_client *c, const char *name);

/* ZK_LOCK_OK while the calling thread holds `name` under a live session (as far as this
 * client knows: connected, and the server heard from it less than a session timeout ago);
 * ZK_LOCK_ERR_LOST when the session expired, was ended or went unconfirmed too long;
 * ZK_LOCK_ERR_NOT_HELD. No round trip. */
int zk_lock_is_held(zk_lock_client *c, const char *name);

/* The current session's id and password (for tests that expire it from another handle).
 * ZK_LOCK_ERR_NOT_HELD when there is no connected session. */
int zk_lock_session(zk_lock_client *c, int64_t *id, char passwd[16]);

const char *zk_lock_strerror(int code);
const char *zk_lock_last_error(void);

#endif
