/*
 * base.h - what every way of selling shares, below all of them (deduct.h, sale.h, batch.h,
 * sharded.h, order.h): what a sale runs on (deduct_env), what it answers (deduct_result), the
 * named points it passes (deduct_point) and the hook called there (deduct_hook), where a
 * single sale's time goes (deduct_stage), how its answers' bodies are written (sale_bodies,
 * bodies.h), and the record of one sale (sale, its lines and its source), which sale.h runs.
 *
 * Nothing here knows HTTP: a sale's answer is a status and a JSON body that API.md defines,
 * and that body is written by functions the caller hands in (sale_bodies), so that the sale
 * stores the very body it answers with its idempotency key without knowing how it is built.
 */
#ifndef SERVICE_SALE_BASE_H
#define SERVICE_SALE_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "service/guards/mode.h"
#include "service/sale/bodies.h"

/*
 * The longest request id a sale records (the API's X-Request-Id: 1 to 32 of A-Za-z0-9_-).
 */
#define DEDUCT_REQUEST_ID_MAX 32

typedef struct deduct_env {
    db_pool *db;               /* not owned */
    int64_t db_wait_ms;        /* bound on waiting for a pooled connection */
    guard_env *guards;         /* not owned */
    const char *instance;      /* this replica's name, written with each order */
    const sale_bodies *bodies; /* how the answers' bodies are written (not owned) */
    int64_t business_delay_ms; /* sleep between the read and the write (teaching) */
    /* Whether the sales that run a fixed sequence of statements send them in batches
     * (libpq's pipeline mode: db_claim_begin, db_sale_commit) or one per round trip: the
     * same statements and answers, fewer waits while the lock is held. DB_PIPELINE. */
    bool pipeline;
    /* The PostgreSQL rungs (a mode with a transaction shape), and a fenced holder behind the
     * row of one that lost its lock, wait for their locks inside PostgreSQL: each of their
     * transactions bounds those waits by this (SET LOCAL lock_timeout), and a wait that runs
     * out answers 503 lock_timeout, as a guard's does. 0: no bound of ours (PostgreSQL's
     * default; statement_timeout still ends the wait). */
    int64_t lock_wait_ms;
    /* A sale's time against PostgreSQL, every statement of it together (the replay of a key
     * included; the guard's wait not): past it, the sale answers 503 (db_conn_set_deadline).
     * DB_REPLY_TIMEOUT_MS, the bound of one round trip, so that a sale on a PostgreSQL that
     * stopped answering answers within one such bound, whatever its number of statements.
     * 0: each statement its own bound. */
    int64_t db_deadline_ms;
    /* How many times a transaction whose write lost an optimistic race (DB_ERR_RETRY), or
     * that PostgreSQL could not serialize (DB_ERR_SERIALIZATION), is run again, after a short
     * random pause, before the answer is 503 conflict. 0: never. */
    int optimistic_retries;
    struct batch_queue *batch; /* the queues of the batched modes (service/sale/batch.h); NULL:
                                  a batched mode runs the single path below */
    int shard_segments;        /* redis-sharded: segments per goods (SHARD_SEGMENTS; out of
                                  1..DB_SEGMENTS_MAX: SHARD_SEGMENTS_DEFAULT) */
    int64_t shard_try_ms;      /* redis-sharded: the short wait for a segment's lock before the
                                  sale moves on to the next (SHARD_TRY_MS; 0: one try) */
} deduct_env;

/*
 * The named points of a deduction, in the order a sale reaches them. A hook (below) is
 * called at each one, in the request's thread; tests use it to order two deductions
 * exactly, and fault injection to pause or crash at a known place. A point is reached only
 * on the way to a sale: a 404, 409 or 503 stops before the next one.
 */
typedef enum deduct_point {
    DEDUCT_AT_ENTERED,   /* the guard is held; no transaction yet */
    DEDUCT_AT_BEGUN,     /* the transaction is open; the goods row not read yet */
    DEDUCT_AT_READ,      /* the stock was read and is enough; nothing written yet: the race
                            window (BUSINESS_DELAY_MS sleeps here, before the hook) */
    DEDUCT_AT_WRITTEN,   /* stock written and order recorded; not committed yet */
    DEDUCT_AT_CHECKED,   /* the guard said it still holds (tx-inside: it has been left);
                            COMMIT is next: the gap no check before a commit can close */
    DEDUCT_AT_COMMITTED, /* committed; the guard is still held */
} deduct_point;

/* The point's name ("entered", "begun", "read", "written", "checked", "committed"). */
const char *deduct_point_name(deduct_point point);

/*
 * A hook is called at each point with the request's holding of its guard (it may set the
 * holding's fault fields). It returns GUARD_OK to go on, or GUARD_ERR_TIMEOUT /
 * GUARD_ERR_UNAVAILABLE with a reason in `why` to stop the deduction there as if its guard had
 * failed: the transaction, if open, rolls back and the answer is 503 lock_timeout / unavailable.
 * (Fault injection's nested step stops a deduction this way; tests' hooks only go on.)
 */
typedef struct deduct_hook {
    int (*at)(void *arg, deduct_point point, guard_hold *hold, char *why, size_t why_len);
    void *arg;
    int64_t *seen_stock; /* NULL, or set before the call at "read" to the stock read and
                            before the call at "written" to the stock written (the lab's
                            trace) */
} deduct_hook;

/*
 * Where a single sale's time went (deduct_result.stage_ns), in the order a sale spends it,
 * measured by the replica's monotonic clock at the stages' boundaries. The stages do not
 * overlap, so they add up to the deduction's whole time: a guard given back while COMMIT
 * travels (sale.c, leave_once_sent) counts as RELEASE, and the commit's wait around it as
 * COMMIT only once.
 */
typedef enum deduct_stage {
    DEDUCT_STAGE_ACQUIRE, /* the guard's enter: the lock taken, its wait included */
    DEDUCT_STAGE_CLAIM,   /* BEGIN, the keys' claims, the stock read (a fenced claim), the
                             check in C */
    DEDUCT_STAGE_COMMIT,  /* the write, the orders, the stored answers, the last look at the
                             guard, COMMIT and its flush */
    DEDUCT_STAGE_RELEASE, /* the guard's leave (tx-inside's, made before COMMIT on purpose,
                             is counted in COMMIT) */
    DEDUCT_STAGE_REST,    /* the rest: the stored-answer lookup, a pooled connection, the
                             answer built, a retry's pause */
    DEDUCT_STAGES_
} deduct_stage;

/* The stage's name: "acquire", "claim", "commit", "release", "rest". */
const char *deduct_stage_name(deduct_stage stage);

/*
 * How a deduction ended, as the metrics count it and a 503's body names it (API.md): one
 * value per answer, whatever way of selling gave it.
 */
typedef enum deduct_outcome {
    DEDUCT_NO_OUTCOME,         /* not answered yet */
    DEDUCT_DEDUCTED,           /* 200: sold */
    DEDUCT_INSUFFICIENT_STOCK, /* 409 */
    DEDUCT_UNKNOWN_GOODS,      /* 404 */
    DEDUCT_LOCK_TIMEOUT,       /* 503: the guard, or a lock inside PostgreSQL, not had in time */
    DEDUCT_LOCK_LOST,          /* 503: the guard's lease or fence was lost before the commit */
    DEDUCT_UNAVAILABLE,        /* 503: a dependency failed */
    DEDUCT_REPLAYED,           /* the answer stored with the Idempotency-Key, given again */
    DEDUCT_COMMIT_UNKNOWN,     /* 503: COMMIT was sent and its answer lost */
    DEDUCT_CONFLICT,           /* 503: an optimistic race lost too often, or a deadlock's victim */
    DEDUCT_OUTCOMES_
} deduct_outcome;

/* The outcome's name, as API.md and the metrics write it ("deducted", "insufficient_stock",
 * "unknown_goods", "lock_timeout", "lock_lost", "unavailable", "replayed", "commit_unknown",
 * "conflict"); "" for DEDUCT_NO_OUTCOME. */
const char *deduct_outcome_name(deduct_outcome outcome);

/* The outcome of a guard that could not be entered (rc, a GUARD_ERR_* code of mode.h):
 * DEDUCT_LOCK_TIMEOUT when the wait ran out, DEDUCT_UNAVAILABLE otherwise. */
deduct_outcome guard_outcome(int rc);

typedef struct deduct_result {
    int retries;            /* transactions run again after a lost optimistic race or a 40001 */
    int status;             /* HTTP status: 200, 404, 409 or 503 */
    char *body;             /* JSON body, malloc'd: the caller frees it */
    deduct_outcome outcome; /* how it ended (deduct_outcome_name: the metrics' label) */
    bool waited;            /* the guard measured a wait */
    double wait_seconds;    /* how long the guard took to enter */
    bool handed_off;        /* the lock came from a release to the line (redis) */
    double handoff_seconds; /* then: the gap since that release, the serial order's idle time */
    int batch_size;         /* redis-batch, on its leader's result only: the requests of the
                               batch it ran under its holding of the lock (0 otherwise) */
    char detail[256];       /* why, for a 503 ("" otherwise): logged by the caller */
    /* The single path without a hook (one request, one transaction of its own): timed, and
     * where its time went, stage by stage (deduct_stage). A batch's and the segments' sales
     * are not timed. */
    bool timed;
    int64_t stage_ns[DEDUCT_STAGES_];
} deduct_result;

/* ---- a sale: one transaction of one or more lines (sale.h runs it) ---- */

/* One request of a sale: what it asks for, and where its answer goes. */
typedef struct sale_line {
    int64_t count;
    const char *key;        /* Idempotency-Key or NULL */
    const char *request_id; /* the client's X-Request-Id, written with its order, or NULL */
    deduct_result *out;     /* its answer: status, body (malloc'd), outcome, detail */
    /* the sale's own, while it runs */
    bool answered;                /* the answer is final already (replayed from the store) */
    const struct sale_line *twin; /* NULL, or an earlier line of the sale with the same key,
                                     whose answer this one gets, as a replay would give it
                                     after the commit */
} sale_line;

/* Where a sale reads its stock from and writes it to. */
typedef enum sale_source {
    SALE_FROM_GOODS,    /* the goods row: every mode but redis-sharded's own sales. A line
                           it refuses while segments hold stock makes the sale fold them back
                           into the row (sale_fold) and run once more */
    SALE_FROM_SEGMENT,  /* one segment's row (redis-sharded's fast path), fenced with the
                           segment's token; a segment that does not cover is SALE_SHORT */
    SALE_FROM_SEGMENTS, /* the goods row and every segment, gathered, sold from in total and
                           spread evenly again (redis-sharded's slow path), under every
                           segment's lock */
    SALE_FROM_HINT,     /* the goods row and every segment read without a lock: only ever a
                           refusal (404, 409) stored with the key; stock that covers the line
                           is SALE_SHORT (go to the segments) */
} sale_source;

typedef struct sale {
    const deduct_env *env;
    const mode *mode; /* its still_held asks the holdings; its name goes with each order */
    int64_t goods_id;
    sale_line *lines; /* in arrival order: the first to come is the first served */
    size_t n;         /* 1..DB_ORDERS_MAX; more than one with SALE_FROM_GOODS only */
    sale_source source;
    int segment; /* SALE_FROM_SEGMENT: which; SEGMENTS and HINT: how many (1..DB_SEGMENTS_MAX) */
    guard_hold *holds; /* what the sale runs under, each asked still_held before COMMIT: one;
                          SALE_FROM_SEGMENTS: segment i's in holds[i]; HINT: none */
    size_t n_holds;
    db_conn *conn;           /* borrowed by the caller, after the guard */
    const deduct_hook *hook; /* or NULL; called with holds[0] at each deduct_point (one line) */
    /* Asked after the last look at the guards, just before COMMIT (the batch seals its
     * followers there); false: the sale rolls back and every line answers 503 lock_timeout
     * with commit_refused as the detail. NULL: always true. */
    bool (*may_commit)(void *arg);
    void *may_commit_arg;
    const char *commit_refused;
    /* The caller's choice: a sale in two round trips keeps the guard until COMMIT's answer
     * instead of giving it back once COMMIT is sent (sale.c, leave_once_sent). */
    bool leave_after_commit;
    /* set by the sale */
    int64_t stage_ns[DEDUCT_STAGES_]; /* where its time went: CLAIM, COMMIT, and RELEASE
                                         when it left the guard as COMMIT was sent (deduct.h) */
    int64_t lap_ns;                   /* the clock at the last stage boundary */
    bool left; /* the guard of holds[0] was left before the transaction ended: inside it
                  (tx-inside), or once its COMMIT was sent (a sale in two round trips); the
                  caller must not leave it again */
} sale;

#endif
