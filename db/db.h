/*
 * db.h - the stock service's PostgreSQL layer: a bounded connection pool, the statements
 * of the read-check-write, the idempotency records, and transaction helpers.
 *
 * This module knows libpq and nothing of Redis or HTTP. It does not log: every call
 * returns 0 or a negative DB_ERR_* code, and the connection keeps the text of its last
 * error (db_conn_error()) for the caller to report.
 *
 * Every statement is prepared once per connection and run with parameters; no SQL is ever
 * built from values. The SQL text of each statement is written once, in db/statements.c.
 */
#ifndef DB_DB_H
#define DB_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    DB_OK = 0,
    DB_ERR_UNAVAILABLE = -1, /* cannot connect, or the connection broke: try again later */
    DB_ERR_BUSY = -2,        /* no pooled connection free within the bound */
    DB_ERR_NOT_FOUND = -3,   /* no such goods / no such record */
    DB_ERR_QUERY = -4,       /* PostgreSQL refused a statement (see db_conn_error) */
    DB_ERR_CONFLICT = -5,    /* idempotency key already recorded by a committed request */
    DB_ERR_FENCED = -6,      /* the claim was refused: the row carries a newer fencing token */
    DB_ERR_SCHEMA = -7,      /* migrations pending, or the migrations directory is unreadable */
    DB_ERR_NOMEM = -8,
    DB_ERR_INVALID = -9,
    DB_ERR_COMMIT_UNKNOWN = -10, /* COMMIT was sent and its answer lost: it may have committed */
    DB_ERR_INSUFFICIENT = -11,   /* db_stock_take: less stock than asked; nothing written */
    DB_ERR_LOCK_TIMEOUT = -12,   /* a lock wait ran out (lock_timeout, SQLSTATE 55P03): the
                                    session is fine, the transaction must be rolled back */
    DB_ERR_RETRY = -13,          /* db_stock_write_versioned: the row's version moved on since
                                    the read; nothing written: run the transaction again */
    DB_ERR_HELD = -14,           /* db_lockrow_take: another owner holds the goods' lock row */
    DB_ERR_DEADLOCK = -15,       /* PostgreSQL found a cycle of lock waits and chose this
                                    transaction as its victim (SQLSTATE 40P01): the session is
                                    fine, the transaction must be rolled back */
    DB_ERR_SERIALIZATION = -16,  /* a REPEATABLE READ or SERIALIZABLE transaction could not be
                                    serialized beside a concurrent one (SQLSTATE 40001): the
                                    session is fine, the transaction must be rolled back and
                                    may be run again from its start */
};

typedef struct db_pool db_pool;
typedef struct db_conn db_conn;

typedef struct db_pool_options {
    const char *conninfo;     /* libpq "key=value ..." string or postgresql:// URI; required;
                                 copied by db_pool_create */
    int size;                 /* connections at most; default 8 */
    int connect_timeout_ms;   /* bound on opening a session, handshake included; default 2000 */
    int statement_timeout_ms; /* server-side statement_timeout for every session; default 5000;
                                 0: none */
    int reply_timeout_ms;     /* client-side bound on every round trip after connecting: a
                                 server that stops answering (a partition, a frozen host) fails
                                 the statement with DB_ERR_UNAVAILABLE after this long, and the
                                 connection is closed; default 6000. Above statement_timeout_ms,
                                 so that a slow statement gets the server's own error first */
    int idle_in_tx_ms;        /* the database's lease on a transaction: the server ends a
                                 session left idle inside a transaction this long
                                 (idle_in_transaction_session_timeout), and with it every row
                                 lock the transaction held, as when its process dies; the
                                 session's TCP keepalives end one whose host vanished. Default
                                 30000; 0: no bound (a frozen holder keeps its rows locked) */
} db_pool_options;

void db_pool_options_init(db_pool_options *opts);

/* Creates an empty pool (connections are opened lazily, so this works while PostgreSQL is
 * down). *out owns it; free with db_pool_destroy(). DB_ERR_INVALID for a conninfo libpq
 * cannot parse, a size outside 1..1000 or a timeout out of range. */
int db_pool_create(const db_pool_options *opts, db_pool **out);

/* Closes every connection. All connections must have been released. NULL is a no-op. */
void db_pool_destroy(db_pool *pool);

/*
 * Borrows a connection, waiting at most timeout_ms (>= 0; 0 does not wait) for one to be
 * free. A connection that is not open (first use, broken last time, or closed by the
 * server while it sat in the pool) is opened now, within connect_timeout_ms: the call
 * returns within timeout_ms + connect_timeout_ms. Returns DB_OK and sets *out, which the
 * calling thread alone uses until db_pool_release(); DB_ERR_BUSY when none was free in
 * time; DB_ERR_UNAVAILABLE when PostgreSQL cannot be reached. On failure *out is NULL and
 * db_last_connect_error() says why.
 */
int db_pool_acquire(db_pool *pool, int timeout_ms, db_conn **out);

/* Returns a borrowed connection. A connection left inside a transaction is rolled back
 * (one round trip: better to end transactions before); a broken one is closed, to be
 * reopened on next use. NULL conn is a no-op. */
void db_pool_release(db_pool *pool, db_conn *conn);

/* The text of the last failure of db_pool_acquire in this thread (unreachable or busy).
 * Valid until the thread's next db_pool_acquire. */
const char *db_last_connect_error(void);

typedef struct db_pool_stats {
    int size;   /* connections at most */
    int open;   /* connections open now */
    int in_use; /* borrowed now */
} db_pool_stats;

void db_pool_get_stats(db_pool *pool, db_pool_stats *out);

/* The last error on this connection since it was borrowed ("" if none): PostgreSQL's
 * message with its SQLSTATE, or libpq's. Valid until the next call on the connection. */
const char *db_conn_error(const db_conn *conn);
const char *db_strerror(int code);

/* When conn's last error (a DB_ERR_UNAVAILABLE) was PostgreSQL not answering within the
 * reply bound: that bound in ms; 0 for any other error, none, or a NULL conn. For a caller
 * that says what happened in its own words (db_conn_error() is libpq's or PostgreSQL's). */
int db_conn_no_answer_ms(const db_conn *conn);

/*
 * A budget for the time conn waits for PostgreSQL's answers until its release, all its
 * exchanges together (the time between them, the caller's, is not counted): each exchange
 * waits at most what is left (at least 1 ms), besides its own reply bound
 * (reply_timeout_ms), so that a caller's statements are bounded as a whole rather than one
 * by one. A wait the budget cuts fails as one the reply bound cuts (DB_ERR_UNAVAILABLE, the
 * connection broken, db_conn_no_answer_ms the pool's reply bound). db_conn_budget_left: what
 * is left (<= 0 once spent; 0 without a budget), to hand to the caller's next borrow.
 * Released, the connection forgets its budget.
 */
void db_conn_set_budget(db_conn *conn, int64_t ms);
int64_t db_conn_budget_left(const db_conn *conn);

/* When conn's last error (a DB_ERR_QUERY) was PostgreSQL cancelling the statement at the
 * pool's statement_timeout (SQLSTATE 57014): that bound in ms; 0 otherwise. */
int db_conn_cancelled_ms(const db_conn *conn);

/*
 * Writes one line explaining a failure into buf: db_strerror(code), then, when there is
 * one, PostgreSQL's text: conn's last error, or (conn NULL, after a failed
 * db_pool_acquire) this thread's last connect error. Returns buf.
 */
const char *db_describe_error(int code, const db_conn *conn, char *buf, size_t len);

/* SELECT 1: DB_OK or DB_ERR_UNAVAILABLE (any failure). For readiness checks. */
int db_ping(db_conn *conn);

/*
 * How the server conn is on replicates commits now: *out is set to "sync" (a commit waits
 * for a standby), "async" (standbys stream, nobody waits) or "single" (no standby), static
 * strings. One round trip. DB_OK, or the statement's error (*out untouched).
 */
int db_replication_mode(db_conn *conn, const char **out);

/*
 * Transactions (READ COMMITTED, PostgreSQL's default), one round trip each.
 * db_commit returns DB_ERR_QUERY when the transaction had already failed (PostgreSQL then
 * rolls it back); DB_ERR_SERIALIZATION when a SERIALIZABLE transaction is refused at its
 * COMMIT (rolled back); DB_ERR_UNAVAILABLE when the connection was unusable before COMMIT could be
 * sent (nothing committed); DB_ERR_COMMIT_UNKNOWN when COMMIT was sent and its answer did not
 * come (the connection broke, or reply_timeout_ms ran out): the server may have committed.
 * Errors (for every statement below): DB_ERR_QUERY when PostgreSQL refused the statement
 * (a constraint, statement_timeout): the session is fine, the transaction must be rolled
 * back (a deadlock and a serialization failure have codes of their own, DB_ERR_DEADLOCK and
 * DB_ERR_SERIALIZATION, with the same contract); DB_ERR_UNAVAILABLE when the session itself
 * failed: it is marked broken and replaced on its next borrowing.
 */
int db_begin(db_conn *conn);
int db_commit(db_conn *conn);
int db_rollback(db_conn *conn);

/*
 * The isolation a transaction begins with. Under the two stricter levels PostgreSQL refuses,
 * rather than waits out, what it cannot fit into one order: an UPDATE of a row that a
 * transaction committed after this one's snapshot fails with DB_ERR_SERIALIZATION (40001)
 * at both; SERIALIZABLE also fails a transaction whose reads and writes form a cycle with
 * concurrent ones (SSI), at any statement or at COMMIT.
 */
typedef enum db_isolation {
    DB_READ_COMMITTED = 0, /* PostgreSQL's default: what db_begin opens */
    DB_REPEATABLE_READ,
    DB_SERIALIZABLE,
} db_isolation;

/* BEGIN ISOLATION LEVEL `isolation`: one round trip, as db_begin (DB_READ_COMMITTED is
 * db_begin). DB_ERR_INVALID for a value outside the enum (nothing sent). */
int db_begin_isolated(db_conn *conn, db_isolation isolation);

/*
 * The read-check-write, one statement each.
 *
 * db_stock_read: the unfenced read, a plain SELECT of the stock (deliberately no FOR
 *   UPDATE: the guard is the lesson). DB_ERR_NOT_FOUND for unknown goods.
 * db_stock_claim: the fenced read, for a holder of a lock whose token is `token` from the
 *   counter named `source` ("redis", ...). It must be the transaction's first statement on
 *   the goods row. It stores the token on the row, takes the row's lock until the
 *   transaction ends, and reads the stock as the last committed writer left it. The
 *   invariant it gives, for any two holders of tokens from one source, whatever the
 *   interleaving: the later claim reads what the earlier holder committed, or it finds a
 *   newer token and the holder sells nothing. DB_ERR_FENCED when the row carries a newer
 *   token of the same source (the caller's lock was superseded: answer lock_lost and roll
 *   back); DB_ERR_NOT_FOUND for unknown goods. A token of another source is not compared
 *   (numbers of two counters say nothing about each other); each source keeps its own
 *   largest token (goods_fences), whatever claims of other sources came in between.
 * db_stock_write: sets the stock to new_stock. After a claim the row is the caller's until
 *   its transaction ends, so no token is needed. DB_ERR_NOT_FOUND for unknown goods.
 * db_stock_write_fenced: the same, for a holder of token (of source) that did not claim the
 *   row: written only while no newer token of source was written or claimed (raising the
 *   source's mark, as db_stock_claim does); else nothing changes and DB_ERR_FENCED.
 *   DB_ERR_NOT_FOUND for unknown goods. The redis-fence-write rung's write: the token
 *   checked only here, after a plain read (see DB__STOCK_WRITE_FENCED).
 * db_order_insert: records the order; fence (the holder's token) may be NULL, else
 *   fence_source names its counter ("redis", "etcd", ...) and is recorded with it.
 *   request_id, the client's id of the request (NULL: none), is recorded with it, in the
 *   same statement: what settles a recorded request whose answer was lost. Sets *order_id.
 * db_orders_insert_many: records n orders of goods_id (counts[i] units each, 1 <= n <=
 *   DB_ORDERS_MAX) in one statement, one round trip: the batched sale's orders, the one of
 *   counts[i] with request_ids[i] (request_ids NULL, or an element NULL: none). Sets
 *   order_ids[i] to the id of a row of its own whose count is counts[i]. DB_ERR_INVALID for
 *   n out of range or a count < 1.
 */
int db_stock_read(db_conn *conn, int64_t goods_id, int64_t *stock);
int db_stock_claim(db_conn *conn, int64_t goods_id, const char *source, int64_t token,
                   int64_t *stock);
/* The largest token of `source` a claim of goods_id has carried (what a refused claim was
 * refused against). DB_ERR_NOT_FOUND when the source never claimed it. */
int db_fence_of(db_conn *conn, int64_t goods_id, const char *source, int64_t *fence);
int db_stock_write(db_conn *conn, int64_t goods_id, int64_t new_stock);
int db_stock_write_fenced(db_conn *conn, int64_t goods_id, int64_t new_stock, const char *source,
                          int64_t token);
int db_order_insert(db_conn *conn, int64_t goods_id, int64_t count, const char *mode,
                    const char *instance, const int64_t *fence, const char *fence_source,
                    const char *request_id, int64_t *order_id);
#define DB_ORDERS_MAX 4096
int db_orders_insert_many(db_conn *conn, int64_t goods_id, const int64_t *counts, size_t n,
                          const char *mode, const char *instance, const int64_t *fence,
                          const char *fence_source, const char *const *request_ids,
                          int64_t *order_ids);

/*
 * The fenced read-check-write in two round trips instead of five (libpq's pipeline mode):
 * the same statements as BEGIN, db_stock_claim, db_stock_write, db_order_insert and
 * db_commit, sent in two batches, with the check left to the caller in between. Each batch
 * is one round trip, bounded by reply_timeout_ms as any other.
 *
 * db_claim_begin: BEGIN and the claim (db_stock_claim: same arguments, same answers); with
 *   lock_timeout_ms > 0, db_set_lock_timeout(lock_timeout_ms) between them, in the same round
 *   trip (0: no bound but statement_timeout), so that a claim that waits longer for the row
 *   fails with DB_ERR_LOCK_TIMEOUT. On DB_OK the transaction is open with the row claimed. On any
 * error the transaction may be open (BEGIN may have gone through): the caller rolls back, as after
 * db_stock_claim; DB_ERR_FENCED and DB_ERR_NOT_FOUND take one more round trip, to say which.
 * db_sale_commit: the write (new_stock), the order (count, mode, instance, the holder's
 *   fence and fence_source, request_id as db_order_insert's; sets *order_id) and COMMIT. Call it
 * only after db_claim_begin (or db_stock_claim) succeeded in this transaction: the row is then the
 * caller's, so the write cannot miss it. When it returns, the transaction is over: DB_OK,
 * committed; a statement refused (DB_ERR_QUERY, DB_ERR_LOCK_TIMEOUT, ...): the rest of the batch
 * was skipped and the transaction rolled back, nothing of it remains (c's error names the step);
 * DB_ERR_UNAVAILABLE: the connection was unusable before anything was sent, nothing committed;
 * DB_ERR_COMMIT_UNKNOWN: the batch was sent and an answer was lost (the connection broke, or the
 * bound ran out) before any refusal: COMMIT may have run; and also when COMMIT ran but its
 * batch's answer cannot be read (the write found no row, an order id that does not parse, a
 * batch's ids that do not match its counts): a sale happened that cannot be told as one.
 * on_sent (NULL: none): called once, on
 * this thread, when the whole batch, COMMIT included, has been handed to the socket and before any
 * answer is read; not called when sending failed (DB_ERR_UNAVAILABLE before that point). The wait
 * for the answers is bounded from its return.
 */
/* Work to do while a batch is on its way to the server (db_sale_commit, db_batch_commit). */
typedef struct db_on_sent {
    void (*fn)(void *arg);
    void *arg;
} db_on_sent;

int db_claim_begin(db_conn *conn, int64_t goods_id, const char *source, int64_t token,
                   int64_t lock_timeout_ms, int64_t *stock);
int db_sale_commit(db_conn *conn, int64_t goods_id, int64_t new_stock, int64_t count,
                   const char *mode, const char *instance, int64_t fence, const char *fence_source,
                   const char *request_id, const db_on_sent *on_sent, int64_t *order_id);
/* db_batch_commit: db_sale_commit for a batch of n sales (the batched mode): the write, the
 *   n orders in one statement (as db_orders_insert_many: counts[i] units each, with
 *   request_ids[i] (request_ids NULL, or an element NULL: none), order_ids[i] set) and COMMIT,
 *   one round trip, with db_sale_commit's answers. DB_ERR_INVALID for n out of
 *   1..DB_ORDERS_MAX or a count < 1 (nothing sent). */
int db_batch_commit(db_conn *conn, int64_t goods_id, int64_t new_stock, const int64_t *counts,
                    size_t n, const char *mode, const char *instance, int64_t fence,
                    const char *fence_source, const char *const *request_ids,
                    const db_on_sent *on_sent, int64_t *order_ids);

/*
 * The PostgreSQL rungs of the ladder: the database itself closes the race, with no guard.
 *
 * db_stock_read_for_update: SELECT ... FOR UPDATE: reads the stock and takes the row's lock
 *   until the transaction ends; a concurrent caller waits, then reads the committed stock.
 *   DB_ERR_NOT_FOUND for unknown goods.
 * db_goods_lock: pg_advisory_xact_lock(goods_id): waits for, then holds until the
 *   transaction ends, a lock on the goods' number (no row is touched; it holds for ids
 *   with no row too). Must be called inside a transaction (outside one the lock would be
 *   released at once).
 * db_stock_take: the check and the write in one statement, "stock = stock - count WHERE
 *   stock >= count": sets *stock to the stock left. DB_ERR_INSUFFICIENT when the stock is
 *   short (*stock is then the stock seen, nothing written); DB_ERR_NOT_FOUND for unknown
 *   goods; DB_ERR_INVALID for count < 1.
 */
int db_stock_read_for_update(db_conn *conn, int64_t goods_id, int64_t *stock);
int db_goods_lock(db_conn *conn, int64_t goods_id);
int db_stock_take(db_conn *conn, int64_t goods_id, int64_t count, int64_t *stock);

/*
 * Bounding the waits for locks inside PostgreSQL (the rungs whose lock is the database's).
 *
 * db_set_lock_timeout: SET LOCAL lock_timeout for the rest of the open transaction: a
 *   statement that waits longer than ms (> 0) for a row lock, an advisory lock or another
 *   transaction's insert of the same key fails with DB_ERR_LOCK_TIMEOUT (SQLSTATE 55P03),
 *   and the transaction must be rolled back. Ends with the transaction (a pooled session
 *   keeps no trace of it). Must be called inside a transaction; DB_ERR_INVALID for ms < 1.
 */
int db_set_lock_timeout(db_conn *conn, int64_t ms);
/* db_begin_isolated(isolation) and db_set_lock_timeout(ms) in one round trip (libpq's
 * pipeline mode): the PostgreSQL rungs' first two statements. DB_OK: the transaction is open
 * with the bound set. On any error the transaction may be open (BEGIN may have gone
 * through): the caller rolls back. DB_ERR_INVALID for ms < 1 or an isolation outside the enum
 * (nothing sent). */
int db_begin_lock_timeout(db_conn *conn, db_isolation isolation, int64_t ms);

/*
 * The pg-optimistic rung: no lock is taken at the read; the write succeeds only if the row
 * is still at the version that was read. Every UPDATE that sets goods.stock or
 * goods.initial, whichever statement runs it (the other rungs' writes, the reset, SQL typed
 * by hand), moves the version on: a trigger does it (migrations/003_goods_version.sql), so
 * no writer can slip a change past a versioned read.
 *
 * db_stock_read_versioned: a plain SELECT of the stock and the row's version.
 *   DB_ERR_NOT_FOUND for unknown goods.
 * db_stock_write_versioned: UPDATE ... SET stock = new_stock WHERE id = $1 AND version =
 *   `version`. DB_OK when it wrote; DB_ERR_RETRY when no row is at that version any more
 *   (another writer committed in between: the caller lost the race, nothing was written,
 *   and it must roll back and read again). Goods rows are never deleted, so after a
 *   successful versioned read "no row" can only mean "another version". Under READ
 *   COMMITTED the UPDATE waits for a concurrent writer's uncommitted change of the row, then
 *   checks the version against what that writer committed (or rolled back): a lock wait,
 *   which db_set_lock_timeout bounds.
 */
int db_stock_read_versioned(db_conn *conn, int64_t goods_id, int64_t *stock, int64_t *version);
int db_stock_write_versioned(db_conn *conn, int64_t goods_id, int64_t new_stock, int64_t version);

/*
 * The pg-lockrow rungs: a table with the goods id as its unique key is the lock
 * (migrations/004_goods_locks.sql). Each call is one statement in its own transaction (call
 * it outside one), so a taken lock is visible to every replica at once and outlives the
 * caller's own transaction, as a lock service's lock would.
 *
 * db_lockrow_take: inserts the row (goods_id, owner); ttl_ms > 0 gives it an expiry of
 *   now + ttl_ms on PostgreSQL's clock, 0 none. DB_OK when the row is now the caller's;
 *   DB_ERR_HELD when another owner's row is there. With ttl_ms > 0 a row whose expiry has
 *   passed is deleted first and the insert tried again (*took_over, when not NULL, says
 *   so): an expired lock is free. A row without expiry is never taken over: if its owner
 *   died, it stays until someone deletes it. DB_ERR_INVALID for ttl_ms < 0.
 * db_lockrow_release: deletes the row if it is still `owner`'s. DB_OK when it was;
 *   DB_ERR_NOT_FOUND when there was none of the owner's (it expired and was taken over, or
 *   was deleted by hand): nothing else is deleted.
 */
int db_lockrow_take(db_conn *conn, int64_t goods_id, const char *owner, int64_t ttl_ms,
                    bool *took_over);
int db_lockrow_release(db_conn *conn, int64_t goods_id, const char *owner);

/*
 * The segments of a goods' stock (redis-sharded, migrations/005_goods_segments.sql). The
 * goods' stock is goods.stock plus the stock of its segments; units move between the two
 * only under pg_advisory_xact_lock(goods) (the pg-advisory rung's lock, so that its blind
 * write cannot lose a move) and the rows' locks, the goods row first, then the segments in
 * ascending order (every caller here keeps that order, so none waits for another in a
 * cycle). Segments are numbered 0 .. DB_SEGMENTS_MAX-1.
 *
 * db_segments_read: the hint, without a lock, in one snapshot: *goods_stock, and stocks[i]
 *   for segments 0..k-1 (0 for a segment with no row); *total gets goods.stock plus every
 *   segment, whatever its number. DB_ERR_NOT_FOUND for unknown goods.
 * db_segment_claim: a segment's fenced read, as db_stock_claim is the goods': stores `token`
 *   on the row, takes its lock until the transaction ends, reads its stock. DB_ERR_FENCED
 *   when the row carries a newer token; DB_ERR_NOT_FOUND when the segment has no row (it
 *   holds nothing).
 * db_segment_write: sets a claimed segment's stock; *total_left gets the goods' total as the
 *   statement sees it (this segment's new stock, the others' and the goods row's as last
 *   committed): the "remaining" of a sale.
 * db_segments_gather: inside a transaction, before anything else of the goods: takes the
 *   advisory lock, the goods row's lock (*goods_stock, DB_ERR_NOT_FOUND for unknown goods)
 *   and every segment's lock, in that order; stocks[i] and fences[i] for segments 0..k-1
 *   (0 and 0 for a segment with no row), *rest the stock of segments k and above.
 * db_segments_spread: after db_segments_gather in the same transaction: sets goods.stock to
 *   goods_stock, segments 0..k-1 to stocks[i] (rows created as needed; the stored token
 *   becomes the larger of it and fences[i]), and empties the segments from k up.
 * db_segments_fold: inside the caller's transaction (it begins none: the service owns
 *   transaction boundaries), before anything else of the goods: moves every segment's stock
 *   back to the goods row, under the same locks as db_segments_gather. *moved gets the units
 *   moved (0: nothing to move); DB_ERR_NOT_FOUND for an unknown goods.
 */
#define DB_SEGMENTS_MAX 64
int db_segments_read(db_conn *conn, int64_t goods_id, int k, int64_t *goods_stock, int64_t *stocks,
                     int64_t *total);
int db_segment_claim(db_conn *conn, int64_t goods_id, int seg, int64_t token, int64_t *stock);
int db_segment_write(db_conn *conn, int64_t goods_id, int seg, int64_t new_stock,
                     int64_t *total_left);
int db_segments_gather(db_conn *conn, int64_t goods_id, int k, int64_t *goods_stock,
                       int64_t *stocks, int64_t *fences, int64_t *rest);
int db_segments_spread(db_conn *conn, int64_t goods_id, int64_t goods_stock, int k,
                       const int64_t *stocks, const int64_t *fences);
int db_segments_fold(db_conn *conn, int64_t goods_id, int64_t *moved);

/*
 * Idempotency records, unique per (goods, key).
 * db_idempotency_claim: inside a transaction, inserts an empty record for the key. If
 *   another transaction is claiming the same key, this waits for it to end. Returns DB_OK
 *   when the key is now ours, DB_ERR_CONFLICT when a committed request already holds it.
 *   The caller must end the transaction after storing (commit) or roll it back: an
 *   unfinished claim makes every other claimer of the key wait.
 * db_idempotency_store: fills the claimed record with the outcome (HTTP status 100..599
 *   and body), in the claiming transaction. DB_ERR_NOT_FOUND when there is no claim.
 * db_idempotency_fetch: the stored outcome; *body is malloc'd, the caller frees it (NULL
 *   on failure). DB_ERR_NOT_FOUND when there is none (or only an unfinished claim).
 */
int db_idempotency_claim(db_conn *conn, int64_t goods_id, const char *key);
int db_idempotency_store(db_conn *conn, int64_t goods_id, const char *key, int status,
                         const char *body);
int db_idempotency_fetch(db_conn *conn, int64_t goods_id, const char *key, int *status,
                         char **body);

/*
 * Orders of several goods (a cart, POST /api/order; migrations/007_order_carts.sql). The
 * arrays hold the cart's items in the request's order, n of them (1 <= n <= DB_CART_MAX).
 *
 * db_stock_take_cart: pg-atomic's cart, one statement: takes the rows' locks in ascending id
 *   order and sells counts[i] of goods_ids[i] from each, when every goods exists and has
 *   enough; else it writes nothing. DB_OK when every item was sold, left[i] the stock each
 *   keeps. DB_ERR_NOT_FOUND when a goods does not exist, *failed its
 *   index (the first such); else DB_ERR_INSUFFICIENT, *failed the index of the first item
 *   short of stock and left[*failed] the stock it has. DB_ERR_INVALID for n out of range.
 * db_orders_insert_cart: records the cart's orders, one row per item (fences[i] the token
 *   the item's goods row was claimed with, or NULL when has_fence is NULL or has_fence[i] is
 *   false; fence_source names their counter, recorded with each token), all in one
 *   statement, sharing one cart number: *cart_id, never the id of another order, and the
 *   client's request_id (NULL: none), recorded with every row as db_order_insert records it:
 *   what settles a recorded cart whose answer was lost. DB_ERR_INVALID for n out of range
 *   or a count < 1.
 * db_order_idempotency_claim / _store / _fetch: the Idempotency-Key records of carts, unique
 *   per (cart, key), where `cart` is the cart's canonical text (service/sale/cart.h); the claim
 *   also records the cart's goods (goods_ids, n), so that a reset of any of them deletes the
 *   record. The same contract as db_idempotency_claim / _store / _fetch below.
 */
#define DB_CART_MAX 16
int db_stock_take_cart(db_conn *conn, const int64_t *goods_ids, const int64_t *counts, size_t n,
                       int64_t *left, size_t *failed);
int db_orders_insert_cart(db_conn *conn, const int64_t *goods_ids, const int64_t *counts,
                          const int64_t *fences, const bool *has_fence, const char *fence_source,
                          size_t n, const char *mode, const char *instance, const char *request_id,
                          int64_t *cart_id);
int db_order_idempotency_claim(db_conn *conn, const char *cart, const int64_t *goods_ids, size_t n,
                               const char *key);
int db_order_idempotency_store(db_conn *conn, const char *cart, const char *key, int status,
                               const char *body);
int db_order_idempotency_fetch(db_conn *conn, const char *cart, const char *key, int *status,
                               char **body);

/* Creates the goods if needed, sets stock and initial to `stock` (the fencing token is
 * kept), empties its segments (their tokens kept), deletes its orders and idempotency
 * records (a cart's records too, when it holds the goods): one transaction of its own, so it
 * must be called outside one (DB_ERR_INVALID otherwise). */
int db_goods_reset(db_conn *conn, int64_t goods_id, int64_t stock);

typedef struct db_stock_report {
    int64_t initial; /* stock set by the last reset */
    int64_t stock;   /* what the row and its segments hold now */
    int64_t sold;    /* units sold since the last reset (the goods' counters) */
    int64_t orders;  /* orders since the last reset (the goods' counters) */
} db_stock_report;

/* The same two figures summed over the full ledger, the orders table. */
typedef struct db_stock_ledger {
    int64_t sold;   /* sum of count over the goods' orders */
    int64_t orders; /* number of the goods' orders */
} db_stock_ledger;

/*
 * db_stock_report_read: one statement, so the stock and the counts are read at the same
 *   instant. sold and orders come from the goods' counters, which the same transaction as
 *   each order moves (migrations/008_goods_sales.sql): the read costs the same at any number
 *   of orders. DB_ERR_NOT_FOUND for unknown goods.
 * db_stock_audit_read: the same figures and, in the same snapshot, *ledger: the sums over
 *   every order of the goods, which the counters must equal (they differ only if something
 *   bypassed the triggers, or they are wrong). Its cost grows with the orders (a scan of the
 *   goods' orders): for audits, not for polling. DB_ERR_INVALID when ledger is NULL.
 */
int db_stock_report_read(db_conn *conn, int64_t goods_id, db_stock_report *out);
int db_stock_audit_read(db_conn *conn, int64_t goods_id, db_stock_report *out,
                        db_stock_ledger *ledger);

/*
 * Migrations: files "NNN_name.sql" in `dir`, applied in order of NNN.
 * db_migrate: applies the pending ones, each in its own transaction, recording each in the
 *   schema_migrations table, under a PostgreSQL advisory lock so that several processes
 *   may run it at once. Does nothing when up to date. *applied (if not NULL) gets the
 *   number of files applied. On failure, msg gets one line saying what went wrong.
 *   Must be called outside a transaction. Returns DB_OK; DB_ERR_SCHEMA (unreadable or
 *   empty directory, two files with one number, a file that commits by itself);
 *   DB_ERR_QUERY (a file failed: nothing of it stays) or DB_ERR_UNAVAILABLE.
 * db_schema_check: DB_OK when every file in `dir` is recorded as applied; DB_ERR_SCHEMA
 *   otherwise, with msg naming the first pending file. Versions recorded in the database
 *   but absent from `dir` are not an error. msg may be NULL.
 */
int db_migrate(db_conn *conn, const char *dir, int *applied, char *msg, size_t msglen);
int db_schema_check(db_conn *conn, const char *dir, char *msg, size_t msglen);

#endif
