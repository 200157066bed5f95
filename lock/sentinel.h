/*
 * sentinel.h - finding the Redis master through Redis Sentinel, and hearing when it changes.
 *
 * With replication and Sentinel, "where is Redis" has no fixed answer: the master is whichever
 * server the Sentinels last promoted. hiredis knows nothing of this, so this file does the
 * three things a client must do itself:
 *
 *   1. ask: SENTINEL get-master-addr-by-name <name>, to each Sentinel in turn until one
 *      answers (one Sentinel down must not make the master unknown);
 *   2. check: ROLE on the address it got must say "master". A Sentinel can be behind (it has
 *      not yet seen a failover that the others made), and a lock granted by a replica, or by
 *      an old master about to be turned into one, is no lock at all;
 *   3. follow: a subscription to +switch-master on one Sentinel tells the client, within a
 *      round trip of the promotion, that the master moved, so it can drop its connections
 *      to the old one instead of waiting for them to time out.
 *
 * None of this makes a lock safe across a failover: a lock granted by the old master and not
 * yet copied to the replica is simply absent on the new master, and a second holder can
 * take it. The fence (the token checked at the read, db_stock_claim) is what keeps the books
 * right then; LOCK_SYNC_REPLICAS (WAIT) narrows the window. docs/course/18-sentinel-failover.md.
 *
 * Every call is bounded by a timeout. The follower (below) keeps one thread of its own per
 * lock client; the rest runs in the caller's thread. The watch is used by one thread at a
 * time.
 */
#ifndef LOCK_SENTINEL_H
#define LOCK_SENTINEL_H

#include <stddef.h>

#define LOCK_SENTINEL_MAX 8 /* Sentinels in one list */
#define LOCK_SENTINEL_HOST_MAX 256

typedef struct lock__addr {
    char host[LOCK_SENTINEL_HOST_MAX];
    int port;
} lock__addr;

typedef struct lock__sentinels {
    lock__addr addr[LOCK_SENTINEL_MAX];
    int count;
    char master_name[128];
    int timeout_ms; /* bounds each connect and each round trip to one server */
} lock__sentinels;

/*
 * Fills *out from a list "host:port,host:port,..." (REDIS_SENTINELS), the master's name
 * (REDIS_MASTER_NAME) and a per-round-trip timeout. Spaces around entries are ignored.
 * Returns LOCK_OK, or LOCK_ERR_INVALID (and the thread's last error says which entry) for
 * an empty list, more than LOCK_SENTINEL_MAX entries, an entry without a port, a port outside
 * 1..65535, an empty or too long name, a timeout < 1.
 */
int lock__sentinels_parse(lock__sentinels *out, const char *list, const char *master_name,
                          int timeout_ms);

/*
 * Asks the Sentinels, in list order, for the current master and checks it with ROLE.
 * Returns LOCK_OK with *master set; LOCK_ERR_REDIS when no Sentinel answered with an address
 * whose server says it is a master (the last error says what the last attempt saw);
 * LOCK_ERR_NOMEM. Takes at most (count * 2) round trips, each bounded by timeout_ms.
 */
int lock__sentinel_master(const lock__sentinels *s, lock__addr *master);

/*
 * A subscription to +switch-master on one of the Sentinels. It connects lazily, to the
 * next Sentinel of the list after a failure, so one Sentinel going down costs one timeout.
 */
typedef struct lock__sentinel_watch lock__sentinel_watch;

/* Makes a watch over s (borrowed: must outlive the watch). NULL when out of memory. */
lock__sentinel_watch *lock__sentinel_watch_create(const lock__sentinels *s);

/* Closes its connection and frees it. NULL is a no-op. */
void lock__sentinel_watch_destroy(lock__sentinel_watch *w);

/*
 * Waits at most wait_ms for a +switch-master about our master name. Returns LOCK_OK with
 * *master set to the new master's address (as the Sentinel announced it: check with
 * lock__sentinel_master() before trusting it); LOCK_ERR_TIMEOUT when none came; LOCK_ERR_REDIS
 * when the Sentinel could not be reached or the connection broke (the next call tries the
 * next Sentinel; a switch announced meanwhile is missed, so a caller re-asks
 * lock__sentinel_master() after an error). Messages about other names are skipped.
 */
int lock__sentinel_watch_wait(lock__sentinel_watch *w, int wait_ms, lock__addr *master);

/*
 * The follower: a thread that keeps a lock client's address on the current master. It waits
 * on a watch; on +switch-master, or when the watch breaks (a switch may have been missed),
 * it asks the Sentinels again (lock__sentinel_master) and, when the checked master is not
 * where the address points, moves the address (conn.h) and calls moved(arg), so the
 * connections and the subscriber reconnect to the new master before their next command.
 * While an ask finds no checked master, it asks again after every wait (200 ms).
 * A watched Sentinel that merely stops talking (SIGSTOP, a partition) breaks nothing that
 * the watch could see, and would hide a failover the others made: so the follower also asks
 * every LOCK_SENTINEL_RECHECK_MS whatever the watch says, and at its next wait when the
 * lock's own connections report an error (lock__sentinel_follower_nudge). A failover is
 * followed within down-after-milliseconds + the promotion + LOCK_SENTINEL_RECHECK_MS + one
 * ask (a stopped Sentinel ahead in the list costs its timeout_ms twice at most).
 */
#define LOCK_SENTINEL_RECHECK_MS 1000
struct lock__conn_address;
typedef struct lock__sentinel_follower lock__sentinel_follower;

/* Starts the follower. s and addr are borrowed and must outlive it. Returns LOCK_OK and
 * *out, or LOCK_ERR_NOMEM. */
int lock__sentinel_follower_start(const lock__sentinels *s, struct lock__conn_address *addr,
                                  void (*moved)(void *arg), void *arg,
                                  lock__sentinel_follower **out);

/* Asks for an ask at the follower's next wait (200 ms at most): the lock's connections met
 * an error (READONLY from a demoted master, a refused connection, a timeout), which is how a
 * failover looks from there. Cheap and thread-safe; NULL is a no-op. */
void lock__sentinel_follower_nudge(lock__sentinel_follower *f);

/* Stops the thread and frees it: within one wait (200 ms) plus one round of asking at most
 * (lock__sentinel_master's bound: count * 2 round trips of timeout_ms each, when every
 * Sentinel is unreachable). NULL is a no-op. */
void lock__sentinel_follower_stop(lock__sentinel_follower *f);

#endif
