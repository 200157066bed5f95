/*
 * redlock.h - the Redlock algorithm: one lock over N independent Redis servers, had when a
 * majority of them granted it in time.
 *
 * Each node is a plain Redis with no replication between them. The lock on a node is the
 * string "SET name value NX PX lease", where value is 128 random bits drawn for this one
 * acquisition; the release is lock/delete_if_value.lua on every node (it deletes the key
 * only while it still holds our value). To acquire:
 *   1. note the time; try every node once, each bounded by the node timeout (short beside
 *      the lease, so a dead node costs little);
 *   2. elapsed = now - start; validity = lease - elapsed - drift (redlock_validity_ms);
 *   3. acquired when successes >= N/2 + 1 (redlock_quorum) and validity > 0; the holder may
 *      trust the lock for `validity` ms from the start, no longer;
 *   4. otherwise release on every node (a node may have set the key and lost its reply),
 *      sleep a random delay (so competing clients fall out of step) and go back to 1, until
 *      the wait bound. Several clients that ask at once can each win fewer than a majority
 *      (a split vote: nobody holds); the random delay is what makes the next round differ.
 *
 * What it is not (docs/course/13-redlock.md says why):
 *   - no fencing token: there is no single counter that every grant goes through, so nothing
 *     here can be compared by the database to refuse a late writer;
 *   - not reentrant: a second take by the same thread waits for itself (the value is per
 *     acquisition, and a per-thread count would have to agree across N nodes);
 *   - no watchdog: the lease is fixed; the holder must finish within the validity.
 *
 * This module knows Redis and nothing else. It uses one lock_client per node (lock/lock.h:
 * its connection pool and timeouts) and the single-command helpers of lock/naive.h. Every
 * function returns the LOCK_* codes of lock.h; lock_last_error() holds the last node's error
 * text for the calling thread.
 *
 * Threads: one redlock is shared by all threads of the process; a redlock_holding belongs
 * to the thread that filled it.
 */
#ifndef LOCK_REDLOCK_H
#define LOCK_REDLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock/lock.h"

/* At most this many nodes (Redlock is run with 3, 5 or 7). */
#define REDLOCK_MAX_NODES 9

/* A node's address, as parsed from "host:port". */
typedef struct redlock_node {
    char host[256];
    int port;
} redlock_node;

/*
 * Parses "host:port,host:port,..." (no spaces; 1 to REDLOCK_MAX_NODES nodes; host 1 to 255
 * visible characters without ',' or ':'; port 1..65535, digits only; no node twice) into
 * out[0..*n). Returns 0, or -1 with one line in err saying what is wrong.
 */
int redlock_parse_nodes(const char *spec, redlock_node *out, int max, int *n, char *err,
                        size_t errlen);

/* ---- the arithmetic (pure functions; tests/test_redlock_math.c) ---- */

/* Grants needed out of n nodes: a strict majority, n/2 + 1. Two clients can never both
 * have a majority of the same n nodes at once. */
int redlock_quorum(int n);

/* The clock drift allowed for a lease: 1% of it (clocks of the nodes and of this process
 * may run at slightly different rates over the lease) plus 2 ms (Redis expires keys with
 * millisecond granularity, and the client's own clock reading is as coarse). */
int64_t redlock_drift_ms(int64_t lease_ms);

/* How long the holder may trust the lock, counted from the start of the attempt:
 * lease - elapsed - drift (may be <= 0: then the lock is not had). */
int64_t redlock_validity_ms(int64_t lease_ms, int64_t elapsed_ms, int64_t drift_ms);

/* Whether an attempt that had `successes` grants out of n nodes, with `validity_ms` left,
 * holds the lock. */
bool redlock_acquired(int successes, int n, int64_t validity_ms);

/* The delay before the next attempt: uniform in [base_ms, 2 * base_ms], from `random`
 * (any 32 random bits). */
int64_t redlock_retry_delay_ms(int64_t base_ms, uint32_t random);

/* ---- the lock ---- */

typedef struct redlock redlock;

typedef struct redlock_options {
    const redlock_node *nodes; /* the nodes, copied by redlock_create */
    int n_nodes;               /* 1 to REDLOCK_MAX_NODES */
    int node_timeout_ms;       /* connect and command timeout per node (> 0); default 100 */
    int pool_size;             /* command connections per node (> 0); default 8 */
    int64_t retry_base_ms;     /* retry after base..2*base ms (> 0); default 20 */
    bool retry_fixed;          /* retry after exactly retry_base_ms, no random part: clients
                                  that failed together come back together (only to show why
                                  the random part is there: bench/split_vote.c); default
                                  false */
    /* Called just before the SET of each node of each attempt (attempt from 1, node the index
     * in `nodes`), on the thread that locks; NULL (the default): nothing. A tool holds its
     * clients there to make them ask at the same moment (bench/split_vote.c). */
    void (*before_set)(void *arg, int attempt, int node);
    void *before_set_arg;
} redlock_options;

/* Fills *opts with the defaults above and no nodes. */
void redlock_options_init(redlock_options *opts);

/* Creates a lock_client per node (they connect lazily: this succeeds with every node
 * down). LOCK_OK and *out (free it with redlock_destroy), LOCK_ERR_INVALID or
 * LOCK_ERR_NOMEM. */
int redlock_create(const redlock_options *opts, redlock **out);

/* Closes every node's client. Keys still held are not released: their leases run out. NULL
 * is a no-op. */
void redlock_destroy(redlock *r);

/* The number of nodes. */
int redlock_nodes(const redlock *r);

/* One acquisition. */
typedef struct redlock_holding {
    char name[128];         /* the key */
    char value[40];         /* the random value written on each node (32 hex digits) */
    int granted;            /* nodes that granted it */
    int64_t validity_ms;    /* validity at the moment it was had */
    int64_t valid_until_ns; /* CLOCK_MONOTONIC: the lock is trusted until then */
    int attempts;           /* attempts made by the call that filled it (1: the first one
                               had it), also when it failed */
} redlock_holding;

/*
 * Takes `name` (1 to 127 bytes) with a fixed lease (lease_ms > 2 * drift, in practice >=
 * 10 ms), trying for wait_ms at most (0: one attempt). Returns no later than wait_ms plus one
 * attempt (N nodes x 2 node timeouts).
 * LOCK_OK with *out filled; LOCK_ERR_TIMEOUT when a majority of nodes answered but the lock was
 * held elsewhere (or the attempts were too slow to leave any validity) for the whole wait;
 * LOCK_ERR_REDIS when, on the last attempt, fewer than a quorum of nodes answered at all
 * (lock_last_error() says how many and why); LOCK_ERR_INVALID.
 */
int redlock_lock(redlock *r, const char *name, int64_t wait_ms, int64_t lease_ms,
                 redlock_holding *out);

/*
 * Releases the holding on every node (delete_if_value.lua: only where the key still holds
 * our value, so another's lock is never touched), node failures included: a node that does
 * not answer lets the lease run out. Returns how many nodes deleted a key of ours
 * (>= 0). Takes at most N x 2 node timeouts.
 */
int redlock_unlock(redlock *r, const redlock_holding *h);

/* LOCK_OK while the holding is within its validity (monotonic clock, no round trip);
 * LOCK_ERR_LOST after. A check, not a guarantee: the validity can end right after it. */
int redlock_is_held(const redlock_holding *h);

#endif
