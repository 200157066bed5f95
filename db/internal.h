/*
 * internal.h - what the files of db/ share, and the rest of the project must not use.
 *
 *   pool.c        the bounded pool: who may borrow which connection, and when
 *   conn.c        one connection: bounded connect, the session's settings, transactions,
 *                 ping, and why the last connect failed
 *   exchange.c    a statement sent and its reply read, within the reply bound; errors mapped
 *   statements.c  every SQL text of the service (prepared on first use), parameters as text
 * Calls run one way: pool -> conn -> exchange -> statements; the files of the statements
 * (stock.c and the rest below) use exchange and statements.
 *   stock.c       the read-check-write statements, the reset and the stock report
 *   segments.c    the segments of a goods' stock (redis-sharded)
 *   cart.c        the statements of an order of several goods (POST /api/order)
 *   idempotency.c the Idempotency-Key records
 *   migrate.c     the schema migrations
 *   pipeline.c    the fenced sale in two round trips (libpq's pipeline mode)
 *
 * Names here are db__something: internal but not static, so that each file stays small.
 */
#ifndef DB_INTERNAL_H
#define DB_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <pthread.h>
#include <time.h>

#include "db/db.h"

/* Room for one error line; longer texts are cut. */
#define DB__ERR_LEN 512

/* A decimal int64 with its sign and the terminating NUL. */
#define DB__I64_LEN 24

/*
 * One pooled connection. Only the borrower touches pg, prepared, broken and err; the pool
 * touches in_use under its mutex.
 */
struct db_conn {
    db_pool *pool;
    PGconn *pg;            /* NULL while closed */
    uint64_t prepared;     /* bit i set: statement i is prepared on this session */
    bool broken;           /* the session is unusable: closed on release, reopened on use */
    bool in_use;           /* borrowed (guarded by pool->mu) */
    char err[DB__ERR_LEN]; /* the last error on this connection, "" if none */
    int no_answer_ms;      /* that error: no answer within this bound (0: another error) */
    bool cancelled;        /* that error: the statement cancelled at statement_timeout */
    bool budgeted;         /* this borrow's waits for answers are bounded as a whole: */
    int64_t budget_ms;     /* what is left of that bound (db_conn_set_budget); may be < 0 */
};

struct db_pool {
    pthread_mutex_t mu;
    pthread_cond_t freed; /* signalled when a connection is returned */
    char *conninfo;
    int connect_timeout_ms;
    int statement_timeout_ms;
    int reply_timeout_ms; /* client-side bound on each round trip */
    int idle_in_tx_ms;    /* the session's lease on a transaction (db_pool_options) */
    int size;
    int open;   /* connections with a session (guarded by mu) */
    int in_use; /* borrowed connections (guarded by mu) */
    db_conn *conns;
};

/*
 * The statements, by number. Their SQL text is in statements.c, in the same order.
 * DB__STMT_COUNT must stay below 64: db_conn.prepared is a bit set.
 */
enum db__stmt_id {
    /* transaction control: no parameters, sent as plain queries, never prepared */
    DB__BEGIN,
    DB__BEGIN_REPEATABLE_READ,
    DB__BEGIN_SERIALIZABLE,
    DB__COMMIT,
    DB__ROLLBACK,
    /* session */
    DB__SET_STATEMENT_TIMEOUT,
    DB__SET_SESSION_LEASE,
    DB__PING,
    DB__REPLICATION_MODE,
    /* the read-check-write */
    DB__STOCK_READ,
    DB__STOCK_CLAIM,
    DB__STOCK_WRITE,
    DB__STOCK_WRITE_FENCED,
    DB__STOCK_READ_FOR_UPDATE,
    DB__GOODS_ADVISORY_LOCK,
    DB__STOCK_TAKE,
    DB__STOCK_TAKE_CART,
    DB__SET_LOCK_TIMEOUT,
    DB__STOCK_READ_VERSIONED,
    DB__STOCK_WRITE_VERSIONED,
    DB__LOCKROW_TAKE,
    DB__LOCKROW_EXPIRE,
    DB__LOCKROW_RELEASE,
    DB__GOODS_EXISTS,
    DB__FENCE_OF,
    DB__ORDER_INSERT,
    DB__ORDERS_INSERT_MANY,
    DB__ORDERS_INSERT_CART,
    /* the segments of redis-sharded */
    DB__SEGMENTS_READ,
    DB__SEGMENT_CLAIM,
    DB__SEGMENT_EXISTS,
    DB__SEGMENT_WRITE,
    DB__GOODS_LOCK_NOKEY,
    DB__SEGMENTS_LOCK_ALL,
    DB__SEGMENTS_EMPTY,
    DB__SEGMENTS_SPREAD,
    /* idempotency */
    DB__IDEM_CLAIM,
    DB__IDEM_STORE,
    DB__IDEM_FETCH,
    DB__ORDER_IDEM_CLAIM,
    DB__ORDER_IDEM_STORE,
    DB__ORDER_IDEM_FETCH,
    /* reset and report */
    DB__GOODS_UPSERT,
    DB__ORDERS_DELETE,
    DB__IDEM_DELETE,
    DB__ORDER_IDEM_DELETE,
    DB__SALES_DELETE,
    DB__STOCK_REPORT,
    DB__STOCK_AUDIT,
    /* migrations */
    DB__MIGRATION_LOCK,
    DB__MIGRATION_UNLOCK,
    DB__MIGRATIONS_TABLE_EXISTS,
    DB__MIGRATIONS_TABLE_CREATE,
    DB__MIGRATIONS_APPLIED,
    DB__MIGRATION_RECORD,
    DB__STMT_COUNT
};

/* db/'s clock (db/clock.c). db__now_ms: CLOCK_MONOTONIC in milliseconds, the one clock every
 * deadline of db/ is built on. db__timespec_after: the monotonic time ms from now, for
 * pthread_cond_timedwait on a condition made by db__cond_init (0, or -1 on failure). */
int64_t db__now_ms(void);

/* When the answer to an exchange of c that starts now must have come: reply_timeout_ms from
 * now, or, sooner, what is left of c's budget (db_conn_set_budget; at least 1 ms). */
int64_t db__reply_deadline(const db_conn *c);

/* Takes the time since since_ms (a db__now_ms) off c's budget, when it has one. */
void db__spend(db_conn *c, int64_t since_ms);
struct timespec db__timespec_after(int64_t ms);
int db__cond_init(pthread_cond_t *cond);
/* Waits until pg's socket is ready for `events` (POLLIN, POLLOUT), or until deadline (from
 * db__now_ms). 1 when ready, 0 on timeout, -1 on a poll error; an interrupted poll is resumed. */
int db__wait_socket(PGconn *pg, short events, int64_t deadline);

/*
 * Runs statement `id` with its parameters (text format; NULL for an SQL NULL; the count is
 * the statement's own). The statement is prepared on this session the first time it is
 * used. On DB_OK, *res (if res is not NULL) gets the result, which the caller PQclear()s;
 * on failure nothing is returned, the error is kept in c->err, and the code says what
 * kind of failure it was (see db__check).
 */
int db__run(db_conn *c, enum db__stmt_id id, const char *const *params, PGresult **res);

/* The pieces of db__run, for pipeline.c, which sends several statements before reading:
 * db__prepare prepares statement id on c's session unless it was already (a round trip;
 * nothing for BEGIN/COMMIT/ROLLBACK); db__send_prepared queues it with its parameters
 * (libpq's 1 or 0, as PQsendQueryPrepared); db__want is the status its success has. */
int db__prepare(db_conn *c, enum db__stmt_id id);
int db__send_prepared(db_conn *c, enum db__stmt_id id, const char *const *params);
ExecStatusType db__want(enum db__stmt_id id);

/* After a claim (DB__STOCK_CLAIM) returned no row for the goods id_text: DB_ERR_NOT_FOUND
 * (no such goods) or DB_ERR_FENCED (a newer token of the source), with c->err saying so. */
int db__why_not_claimed(db_conn *c, const char *id_text);

/* The order ids of DB__ORDERS_INSERT_MANY's result res (not cleared here) for counts[0..n-1]:
 * order_ids[i] is a row of its own whose count is counts[i]. DB_ERR_QUERY (c->err says why)
 * when the rows do not match the counts. */
int db__order_ids(db_conn *c, const PGresult *res, const int64_t *counts, size_t n,
                  int64_t *order_ids);

/* A statement of statements.c's table: what exchange.c needs to prepare and run it. */
struct db__statement {
    const char *name; /* the prepared statement's name on the session */
    const char *sql;
    int nparams;
    ExecStatusType want; /* PGRES_TUPLES_OK for statements that return rows */
    bool plain;          /* sent with PQexec, never prepared */
};
const struct db__statement *db__statement(enum db__stmt_id id);

/* The SQL text of a statement (for messages and tests). */
const char *db__sql(enum db__stmt_id id);

/*
 * Takes ownership of res (clears it) unless it has the status `want`, in which case it
 * returns DB_OK and leaves res to the caller. Otherwise keeps the error text in c->err and
 * maps it: a failure of the connection itself (libpq lost the server, SQLSTATE class 08,
 * 57P01..57P03: the server is shutting down or starting, or 25006: it refuses writes, so it is
 * no longer the primary) is DB_ERR_UNAVAILABLE and marks the connection broken; 40P01 is
 * DB_ERR_DEADLOCK, 40001 DB_ERR_SERIALIZATION, 55P03 DB_ERR_LOCK_TIMEOUT; every other error is
 * DB_ERR_QUERY. Except for the first, the session stays usable.
 */
int db__check(db_conn *c, PGresult *res, ExecStatusType want);

/* The BEGIN statement (a DB__BEGIN* id) that opens a transaction at `isolation`; -1 for a
 * value outside the enum. */
int db__begin_statement(db_isolation isolation);

/* Keeps a printf-style error text in c->err. */
void db__set_error(db_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies a libpq message into buf (len bytes) on one line: libpq may put one line per
 * address tried. */
void db__copy_line(char *buf, size_t len, const char *msg);

/* Writes v in decimal into buf (DB__I64_LEN bytes) and returns buf. */
const char *db__i64(char *buf, int64_t v);

/* The parameters of a statement that takes only numbers (up to DB__NUMS_MAX): text[i] is
 * the decimal text of the i-th, params[i] points at it. */
#define DB__NUMS_MAX 3
typedef struct db__nums {
    char text[DB__NUMS_MAX][DB__I64_LEN];
    const char *params[DB__NUMS_MAX];
} db__nums;

/* Fills *p with the n (1 to DB__NUMS_MAX) numbers v and returns p->params:
 * db__run_i64(c, id, db__nums_of(&p, 2, (int64_t[]){goods_id, count}), &out). */
const char *const *db__nums_of(db__nums *p, size_t n, const int64_t *v);

/* The n values of v as a PostgreSQL array literal, "{3,NULL,2}" (an element i with null[i]
 * true is NULL; null may be NULL: none is): a parameter's text, never part of the SQL.
 * malloc'd, the caller frees it; NULL when out of memory. */
char *db__i64_array(const int64_t *v, const bool *null, size_t n);

/* The n strings of v as a PostgreSQL text array literal, each element double-quoted with its
 * '"' and '\\' escaped ({"a","b\\"c",NULL}; a NULL v[i], or v itself NULL, is a NULL
 * element): a parameter's text, never part of the SQL. malloc'd, the caller frees it; NULL
 * when out of memory. */
char *db__text_array(const char *const *v, size_t n);

/* DB__ORDERS_INSERT_MANY's parameters for n orders of goods_id (the single statement path
 * and the pipelined batch both insert with it). */
typedef struct db__orders_params {
    char id[DB__I64_LEN], fence[DB__I64_LEN];
    char *counts, *ids; /* the two arrays, malloc'd */
    const char *v[7];   /* the statement's parameters, in its order */
} db__orders_params;

/* Checks n (1..DB_ORDERS_MAX) and every count (1..INT32_MAX) and fills p; fence NULL: an
 * unfenced order (fence_source ignored). DB_OK (free with db__orders_params_free),
 * DB_ERR_INVALID or DB_ERR_NOMEM (nothing to free). */
int db__orders_params_make(db__orders_params *p, int64_t goods_id, const int64_t *counts, size_t n,
                           const char *mode, const char *instance, const int64_t *fence,
                           const char *fence_source, const char *const *request_ids);
void db__orders_params_free(db__orders_params *p);

/* The end of a many-orders insert run with p's parameters, rc its outcome and, on DB_OK, res
 * its result: frees p and then, on DB_OK, reads the order ids (db__order_ids) and clears res.
 * Returns rc when it is not DB_OK, else db__order_ids's. */
int db__orders_done(db_conn *c, int rc, db__orders_params *p, PGresult *res, const int64_t *counts,
                    size_t n, int64_t *order_ids);

/* DB__STOCK_CLAIM's parameters (the single claim and the pipelined BEGIN + claim both send
 * it); id is the goods id as text, for db__why_not_claimed. */
typedef struct db__claim_params {
    char id[DB__I64_LEN], token[DB__I64_LEN];
    const char *v[3]; /* the statement's parameters, in its order; v[2] is source itself */
} db__claim_params;

/* Fills p for a claim of goods_id by token of source (not copied: it must outlive p). */
void db__claim_params_make(db__claim_params *p, int64_t goods_id, int64_t token,
                           const char *source);

/* Parses the text value at (row, col) as an int64; DB_ERR_QUERY if it is not one. */
int db__get_i64(db_conn *c, const PGresult *res, int row, int col, int64_t *out);

/* Runs statement id (db__run) and reads the integer in column 0 of its first row into *out:
 * DB_OK; DB_ERR_NOT_FOUND when it returned no row (*out untouched: the caller says why); or the
 * statement's own error. For the statements that answer one number or nothing. */
int db__run_i64(db_conn *c, enum db__stmt_id id, const char *const *params, int64_t *out);

/* db__run_i64's reading of a result: the integer in column 0 of res's first row into *out
 * (DB_OK), DB_ERR_NOT_FOUND when it has no row, DB_ERR_QUERY when it is not one. Clears res. */
int db__first_i64(db_conn *c, PGresult *res, int64_t *out);

/* Runs statement id (db__run; res may be NULL) whose params include the n array literals
 * `arrays` (db__i64_array(), db__text_array(): malloc'd, each NULL when its allocation
 * failed), and frees those arrays, run or not: DB_ERR_NOMEM without running when one is
 * NULL. One place for the build-run-free of every statement that takes arrays. */
int db__run_arrays(db_conn *c, enum db__stmt_id id, const char *const *params, char *const *arrays,
                   size_t n, PGresult **res);

/* After a fenced claim or write changed no row: runs statement id (an existence check of the
 * row, db__run) and tells why. DB_ERR_NOT_FOUND when the row is missing, DB_ERR_FENCED when it
 * is there (so its fence is newer than the holder's token: the caller sets the message), or
 * the statement's own error. */
int db__missing_or_fenced(db_conn *c, enum db__stmt_id id, const char *const *params);

/*
 * Opens c's session: connects within connect_timeout_ms (the whole handshake, not only the
 * TCP connect) and sets statement_timeout. On failure c stays closed and err gets one
 * line. DB_OK, DB_ERR_UNAVAILABLE or DB_ERR_NOMEM.
 */
int db__conn_open(db_conn *c, const char *conninfo, int connect_timeout_ms,
                  int statement_timeout_ms, char *err, size_t errlen);

/* Closes c's session (if any) and forgets what was prepared on it. */
void db__conn_close(db_conn *c);

/* This thread's buffer (DB__ERR_LEN bytes) of why its last db_pool_acquire failed, which
 * db_last_connect_error() returns. */
char *db__connect_error(void);

/*
 * Whether an open, idle connection still looks alive, found without a round trip: if the
 * server has closed it (restart, pg_terminate_backend), the socket is readable and libpq
 * notices the end when it reads.
 */
bool db__conn_alive(db_conn *c);

/*
 * Waits for the answer to what was just sent on c (PQsend...), reading it as it comes, for
 * reply_timeout_ms at most. Returns the last result (as PQexec would; the caller passes it
 * to db__check), or NULL when the connection failed or no complete answer came in time:
 * then c is marked broken (it is closed on release and never reused: a late answer must not
 * be read as the answer to the next statement) and c->err says why.
 */
PGresult *db__await_result(db_conn *c);

/* Sets this session's statement_timeout (0: none). */
int db__set_statement_timeout(db_conn *c, int ms);

#endif
