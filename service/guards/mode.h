/*
 * mode.h - what a mode is, as everything that runs one sees it: its row (mode: a name,
 * whether it is meant to be safe across replicas, a one-line summary, its guard and, for the
 * PostgreSQL rungs, its transaction shape), a holding of its guard (guard_hold), the
 * guards' shared environment (guard_env, built by guards_env.c) and the guards' outcomes
 * (GUARD_*). The table of the modes is modes.h's.
 *
 * Every mode runs the same read-check-write (service/sale/sale.h tells its steps, and where
 * the guard is entered, asked and left among them); only the guard around it differs.
 */
#ifndef SERVICE_GUARDS_MODE_H
#define SERVICE_GUARDS_MODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "lock/lock.h"

/* What the guards share: built once at start-up, used by every request thread. */
typedef struct guard_env guard_env;

typedef struct guard_env_options {
    lock_client *lock;      /* the Redis lock client (redis mode); not owned */
    int64_t wait_ms;        /* how long a request may wait for its guard (LOCK_WAIT_MS) */
    int64_t lease_ms;       /* lease passed to lock_try_lock: LOCK_LEASE_WATCHDOG in the service */
    int64_t fixed_lease_ms; /* the lease of the ladder's rungs that have no watchdog
                               (LOCK_FIXED_LEASE_MS); 0: those rungs answer 503 (an
                               invalid lease), as without a lock client */
    db_pool *db;            /* the PostgreSQL pool, for the guards whose lock is a row
                               (pg-lockrow); not owned; NULL: those guards answer
                               GUARD_ERR_UNAVAILABLE */
    int64_t db_wait_ms;     /* bound on waiting for a pooled connection (DB_WAIT_MS) */
    int64_t row_lease_ms;   /* pg-lockrow-ttl: how long a lock row lives (LOCKROW_TTL_MS) */
    const char *redlock_nodes; /* REDLOCK_NODES (valid: the configuration checked it); NULL or
                                  "": no Redlock, and the redlock mode is not served. Its
                                  guard builds and owns the clients (modes/redlock.c) */
    int redlock_timeout_ms;    /* REDLOCK_TIMEOUT_MS; 0: Redlock's default */
    int64_t redlock_lease_ms;  /* REDLOCK_LEASE_MS: redlock's fixed lease; 0: fixed_lease_ms */
    /* The queue-lock modes' guard builds and owns their clients (guards_queue.c), which
     * connect lazily: a replica starts while the service is down, and the mode answers 503
     * until it is back. */
    const char *etcd_endpoint;   /* ETCD_ENDPOINT; NULL or "": no etcd client, and the etcd
                                    mode is not served */
    int64_t etcd_timeout_ms;     /* ETCD_TIMEOUT_MS: bound on each etcd request */
    const char *zookeeper_hosts; /* ZOOKEEPER_HOSTS; NULL or "": no ZooKeeper client, and the
                                    zookeeper mode is not served */
    int zookeeper_timeout_ms;    /* ZOOKEEPER_TIMEOUT_MS: bound on waiting for a session */
    int64_t queue_lease_ms;      /* LOCK_LEASE_MS: etcd's lease TTL and ZooKeeper's session
                                    timeout; 0: the queue lock's default */
} guard_env_options;

/*
 * What a mode may need beyond the build: a backing service that a replica has only when it
 * is configured. A row names what it needs (mode.needs, a set of these bits); the guard
 * environment knows what it has (guard_env_create sets it from its options); a row whose
 * needs are not all had is not served by that replica: /api/modes does not list it and a
 * request for it answers 400 unknown_mode, exactly as if the build did not know it.
 */
enum {
    MODE_NEEDS_REDLOCK = 1u << 0,   /* REDLOCK_NODES */
    MODE_NEEDS_ETCD = 1u << 1,      /* ETCD_ENDPOINT */
    MODE_NEEDS_ZOOKEEPER = 1u << 2, /* ZOOKEEPER_HOSTS */
};

int guard_env_create(const guard_env_options *opts, guard_env **out);

void guard_env_destroy(guard_env *env);

/* Outcomes of entering a guard. */
enum {
    GUARD_OK = 0,
    GUARD_ERR_TIMEOUT = -1,     /* not had within the wait bound: 503 lock_timeout */
    GUARD_ERR_UNAVAILABLE = -2, /* the guard's backing service failed: 503 unavailable */
    GUARD_ERR_LOST = -3,        /* still_held: the holding was lost: 503 lock_lost */
    GUARD_ERR_BUSY = -4,        /* mode_parts.enter only: no connection to the lock service
                                   was free within the wait: 503 unavailable, but a short try
                                   of one part may move on to the next */
};

/* The room a guard has in a holding for state of its own (guard_hold.state). */
#define GUARD_STATE_BYTES 64

/*
 * One request's holding of its guard. Filled by enter, read by the deduction, emptied by
 * leave. The fields are what every holding has, and what the deduction, the lab and fault
 * injection read or set; what only one guard needs (a stripe, a row's owner, a validity) is
 * in `state`, which only that guard's file reads (service/guards/guards.h: GUARD_STATE).
 */
typedef struct guard_hold {
    bool fenced;              /* a fencing token comes with this holding */
    int64_t fence;            /* the token, when fenced */
    const char *fence_source; /* the counter it comes from ("redis", "etcd", "zookeeper"), when
                                 fenced: tokens are compared only with tokens of the same
                                 source */
    bool waited;              /* the guard has a wait worth measuring (local, redis) */
    double wait_seconds;      /* how long enter took */
    bool handed_off;          /* the lock came from a release to the line (redis) */
    double handoff_seconds;   /* then: the gap since that release (lock_last_handoff_us) */
    char name[64];            /* the lock's name (Redis key, etcd prefix), for the lock guards:
                                 logs and details name it */
    char token[80];           /* the owner token the lock's value carries, for the guards
                                 whose lock has one (owner-get-del, owner-lua, redlock): the
                                 lab shows it; "" otherwise */
    int64_t release_pause_ms; /* fault injection only (pause-before-release): leave sleeps
                                 this long just before the command that deletes the lock
                                 (for owner-get-del: between its GET and its DEL) */
    void (*before_release)(void *arg); /* the lab only (service/lab/lab.h): called where
                                          release_pause_ms sleeps; NULL: nothing */
    void *before_release_arg;
    union {
        max_align_t align;
        unsigned char bytes[GUARD_STATE_BYTES];
    } state; /* the guard's own, opaque here; a holding may be copied (a batch's leader
                copies its own), so it holds no pointer into itself */
} guard_hold;

/*
 * A transaction shape: how a rung reads and writes the stock inside the transaction, when
 * the database itself closes the race (the PostgreSQL rungs). A mode without one runs the
 * guarded shape: a plain read (or, with a fencing token, db_stock_claim) and the write of
 * a value computed in C, which only the guard keeps apart.
 */
/* What a shape's read saw, handed to its write in the same transaction. */
typedef struct tx_seen {
    int64_t stock;   /* the stock read */
    int64_t version; /* the row's version, for the optimistic shape (0 for the others) */
} tx_seen;

typedef struct mode_tx {
    /* Reads the stock into seen->stock inside the open transaction (it may take a lock held
     * until the transaction ends). DB_ERR_INSUFFICIENT (with seen->stock the stock seen)
     * when the shape checks in SQL and found too little; otherwise a DB_* code. */
    int (*read)(db_conn *conn, int64_t goods_id, int64_t count, tx_seen *seen);
    /* Writes the stock after selling `count` of what `seen` holds. DB_ERR_RETRY when the
     * shape found that it lost a race (the optimistic one): nothing was written, and the
     * deduction rolls back and runs the whole transaction again (deduct.h says how often);
     * DB_ERR_SERIALIZATION, PostgreSQL's refusal, is run again the same way. */
    int (*write)(db_conn *conn, int64_t goods_id, int64_t count, const tx_seen *seen);
    /* A cart's check and write of every item at once (pg-atomic: one statement), with
     * db_stock_take_cart's contract; NULL: a cart reads and writes item by item with read
     * and write above, in the cart's lock order. */
    int (*take_cart)(db_conn *conn, const int64_t *goods_ids, const int64_t *counts, size_t n,
                     int64_t *left, size_t *failed);
    /* The isolation the transaction begins with (DB_READ_COMMITTED unless said). Under a
     * stricter one PostgreSQL may refuse any statement or the COMMIT with
     * DB_ERR_SERIALIZATION: the deduction then rolls back and runs the whole transaction
     * again, as after DB_ERR_RETRY. */
    db_isolation isolation;
} mode_tx;

/* Whether, and how, a mode sells a cart (POST /api/order, service/sale/order.h). */
typedef enum mode_cart {
    MODE_CART_NONE = 0,  /* it does not: /api/order answers 400 unknown_mode for it */
    MODE_CART_SORTED,    /* the goods' guards (and rows) taken in ascending goods id order */
    MODE_CART_AS_LISTED, /* taken in the order the cart lists them: two carts in opposite
                            orders can deadlock (the multi-naive rung) */
} mode_cart;

/* Whether, and how, a mode keeps the product page's cached stock (service/guards/cache.h). */
typedef enum mode_cache {
    MODE_CACHE_NONE = 0, /* its sales leave the cache alone */
    MODE_CACHE_ASIDE,    /* a sale deletes the entry after its commit; a miss fills it freely */
    MODE_CACHE_RWLOCK,   /* the same, the sale under the write side of a read-write lock and a
                            miss under its read side */
} mode_cache;

/*
 * A mode whose goods' stock is split in parts, each with a lock of its own (redis-sharded:
 * service/sale/sharded.c sells over them). A part's holding is checked with the mode's
 * still_held and given back with its leave, as a whole goods' is.
 */
typedef struct mode_parts {
    /* GUARD_OK when a part's lock can be asked for at all (the guard's client is
     * configured); else GUARD_ERR_UNAVAILABLE with detail filled. */
    int (*ready)(guard_env *env, char *detail, size_t detail_len);
    /* Takes the lock of part `part` of goods_id's stock, waiting at most wait_ms (0: one
     * try), fenced. GUARD_OK; GUARD_ERR_TIMEOUT, GUARD_ERR_BUSY or GUARD_ERR_UNAVAILABLE with
     * detail filled (a timeout's detail names the full wait bound, LOCK_WAIT_MS). */
    int (*enter)(guard_env *env, int64_t goods_id, int part, int64_t wait_ms, guard_hold *hold,
                 char *detail, size_t detail_len);
} mode_parts;

typedef struct mode {
    const char *name;
    bool safe;           /* meant to be correct with any number of replicas */
    const char *summary; /* one line, served by GET /api/modes */
    /* Takes the guard for goods_id. On failure fills detail (for the 503's "detail"). */
    int (*enter)(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                 size_t detail_len);
    /* GUARD_OK while the holding is still good; GUARD_ERR_LOST otherwise. */
    int (*still_held)(guard_env *env, const guard_hold *hold);
    /* Releases the holding. Called once for every successful enter. */
    void (*leave)(guard_env *env, guard_hold *hold);
    /* The transaction's shape; NULL for the guarded read-check-write. */
    const mode_tx *tx;
    /* The tx-inside pitfall: the guard is left inside the transaction, just before COMMIT,
     * instead of after it. false for every other mode. */
    bool leaves_inside_tx;
    /* The redis-fence-write pitfall: the token is checked only at the write
     * (db_stock_write_fenced), after a plain read, instead of claimed at the read. false for
     * every other mode. */
    bool fence_at_write;
    /* MODE_NEEDS_* bits: served only by a replica that has all of them; 0 for most. */
    unsigned needs;
    /* The replica's concurrent requests for one goods are coalesced, one transaction under
     * one holding of the guard per batch (service/sale/batch.h); false for every other mode. */
    bool batched;
    /* The goods' stock is split into segments, each with a lock of its own, and a sale takes
     * one (service/sale/sharded.h); NULL for every other mode. */
    const mode_parts *parts;
    /* How the mode sells a cart; MODE_CART_NONE for the modes that do not. */
    mode_cart cart;
    /* Which lock of its guard a goods takes, when goods share locks (local's stripes), so that
     * a cart takes a shared one once; NULL: one lock per goods. */
    int64_t (*lock_of)(int64_t goods_id);
    /*
     * A fenced claim of `hold` was refused against `stored`, the largest token of its source
     * the database has accepted (db_fence_of). A counter behind the database (a failover to a
     * replica that had not received the last increments) would refuse every sale until it
     * caught up: the modes on the Redis lock raise its counter past `stored`
     * (lock_fence_raise), so a failover costs one refused sale per replica. NULL: nothing to
     * do. Best effort, one round trip.
     */
    void (*fence_refused)(guard_env *env, const guard_hold *hold, int64_t stored);
    /* How its sales keep the cache, and how GET /api/stock/{id}?cached=1&mode=it fills it. */
    mode_cache cache;
} mode;

/* The MODE_NEEDS_* bits the environment has. */
unsigned guard_env_has(const guard_env *env);

/* How long a request may wait for its guard (guard_env_options.wait_ms): the bound a mode
 * that takes several locks (mode_parts) spends its waits from. */
int64_t guard_env_wait_ms(const guard_env *env);

#endif
