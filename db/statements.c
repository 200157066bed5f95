/*
 * statements.c - every SQL text of the service, written once (exchange.c runs them), and
 * how their parameters are written as text.
 *
 * Each statement is prepared (PQprepare) on a session the first time that session runs it,
 * then executed by name (PQexecPrepared) with its values as separate text parameters. A
 * value is never part of the SQL text, so no value can change what a statement does, and
 * nothing needs quoting. Preparing costs one round trip per statement per session, once;
 * after that each run is one round trip, with the parsing and planning already done.
 *
 * A session keeps what it prepared until it closes (a transaction's rollback does not undo
 * a prepare), so db_conn.prepared is cleared only when the session is closed.
 *
 * BEGIN, COMMIT and ROLLBACK have no parameters and nothing to plan: they are sent as plain
 * queries, one round trip each, and never prepared. Every round trip waits for its answer
 * for the pool's reply_timeout_ms at most (db__await_result in exchange.c). The migration files are
 * run with PQexec too, by migrate.c: a file of SQL is the text itself, not a value.
 *
 * Parameter types are taken from the SQL (a column compared with $1 gives $1 its type);
 * where nothing does, the text says it with a cast ($3::bigint).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/internal.h"

/* The key of the migrations' advisory lock: any fixed number, the same in every process. */
#define DB__MIGRATION_LOCK_KEY "7340031001"

static const struct db__statement stmts[DB__STMT_COUNT] = {
    [DB__BEGIN] = {"begin", "BEGIN", 0, PGRES_COMMAND_OK, true},
    [DB__BEGIN_REPEATABLE_READ] = {"begin_repeatable_read", "BEGIN ISOLATION LEVEL REPEATABLE READ",
                                   0, PGRES_COMMAND_OK, true},
    [DB__BEGIN_SERIALIZABLE] = {"begin_serializable", "BEGIN ISOLATION LEVEL SERIALIZABLE", 0,
                                PGRES_COMMAND_OK, true},
    [DB__COMMIT] = {"commit", "COMMIT", 0, PGRES_COMMAND_OK, true},
    [DB__ROLLBACK] = {"rollback", "ROLLBACK", 0, PGRES_COMMAND_OK, true},

    /* set_config() takes the value as a parameter; SET would need it in the text. */
    [DB__SET_STATEMENT_TIMEOUT] = {"set_statement_timeout",
                                   "SELECT set_config('statement_timeout', $1, false)", 1,
                                   PGRES_TUPLES_OK, false},
    /* The database's lease on this session's transactions: a session idle inside one for
     * $1 ms is ended by the server, its row locks with it (a process frozen by the kernel
     * or a debugger, a host that answers TCP but runs nothing); the server's TCP keepalives
     * ($2 s idle, every $3 s, $4 misses) and tcp_user_timeout ($5 ms) end one whose host
     * vanished, which would otherwise stay "idle in transaction" until TCP gave up. */
    [DB__SET_SESSION_LEASE] =
        {"set_session_lease",
         "SELECT set_config('idle_in_transaction_session_timeout', $1, false),"
         " set_config('tcp_keepalives_idle', $2, false),"
         " set_config('tcp_keepalives_interval', $3, false),"
         " set_config('tcp_keepalives_count', $4, false),"
         " set_config('tcp_user_timeout', $5, false)",
         5, PGRES_TUPLES_OK, false},
    [DB__PING] = {"ping", "SELECT 1", 0, PGRES_TUPLES_OK, false},
    /* How this server replicates its commits, as the primary sees it now: 'sync' when a
     * commit waits for a standby (synchronous_standby_names, which Patroni sets in its
     * synchronous_mode, and empties when no standby is left unless strict), 'async' when
     * standbys stream but nobody waits for them, 'single' when none streams. A session of
     * an unprivileged role sees the rows of pg_stat_replication (their details hidden). */
    [DB__REPLICATION_MODE] = {"replication_mode",
                              "SELECT CASE WHEN current_setting('synchronous_standby_names') <> ''"
                              " THEN 'sync' WHEN EXISTS (SELECT 1 FROM pg_stat_replication)"
                              " THEN 'async' ELSE 'single' END",
                              0, PGRES_TUPLES_OK, false},

    /* The unfenced read: deliberately no FOR UPDATE, so two requests may read the same
     * stock. Closing that race is the guards' job, and what the modes compare. */
    [DB__STOCK_READ] = {"stock_read", "SELECT stock FROM goods WHERE id = $1", 1, PGRES_TUPLES_OK,
                        false},

    /*
     * The fenced read: a holder of a lock with token $2 (from source $3) claims the row for
     * that token and reads the stock, in one statement, before anything else touches the row.
     * The UPDATE takes the row's lock and keeps it until the transaction ends, so:
     *   - an older holder that claimed first is waited for; under READ COMMITTED the claim is
     *     then re-checked against the row as that holder committed it, and RETURNING gives
     *     the stock it left: the later holder reads what the earlier one wrote;
     *   - a claim that finds a newer token of the same source changes nothing and returns no
     *     row: the holder's lock was superseded, and it must sell nothing (lock_lost).
     * Each source's largest token is kept in goods_fences (006_goods_fences.sql), so a claim
     * under another source in between changes nothing in the comparison. The source's row is
     * raised first (INSERT ... ON CONFLICT locks it even when its WHERE refuses: a second
     * holder of the same source waits there, then sees the first one's committed token);
     * then the goods row is claimed only when that row was raised. Only a goods that exists
     * gets a row (no row driven by a request's id). Two sources' holders each lock their own
     * source's row and then the goods row: no cycle.
     */
    [DB__STOCK_CLAIM] = {"stock_claim",
                         "WITH raised AS ("
                         " INSERT INTO goods_fences (goods, source, fence)"
                         " SELECT id, $3, $2 FROM goods WHERE id = $1"
                         " ON CONFLICT (goods, source) DO UPDATE SET fence = EXCLUDED.fence"
                         " WHERE goods_fences.fence <= EXCLUDED.fence RETURNING 1)"
                         " UPDATE goods SET fence = $2, fence_source = $3"
                         " WHERE id = $1 AND EXISTS (SELECT 1 FROM raised) RETURNING stock",
                         3, PGRES_TUPLES_OK, false},

    /* The write of the read-check-write: the value computed from what was read. A fenced
     * holder claimed the row first (DB__STOCK_CLAIM) and holds its lock, so no token is
     * needed here: nobody else can have written the row since the claim. */
    [DB__STOCK_WRITE] = {"stock_write",
                         "UPDATE goods SET stock = $2, updated = now() WHERE id = $1", 2,
                         PGRES_COMMAND_OK, false},
    /* The redis-fence-write rung's write: the token checked (and raised) only here, as
     * DB__STOCK_CLAIM checks it, after a plain read. It refuses a holder whose token is
     * older than one already written, but not a newer holder whose read came before an
     * older holder's write: that is the rung's flaw (docs/course/10-redis-fence-write.md). */
    [DB__STOCK_WRITE_FENCED] = {"stock_write_fenced",
                                "WITH raised AS ("
                                " INSERT INTO goods_fences (goods, source, fence)"
                                " SELECT id, $3, $2 FROM goods WHERE id = $1"
                                " ON CONFLICT (goods, source) DO UPDATE SET fence = EXCLUDED.fence"
                                " WHERE goods_fences.fence <= EXCLUDED.fence RETURNING 1)"
                                " UPDATE goods SET stock = $4, fence = $2, fence_source = $3,"
                                " updated = now() WHERE id = $1 AND EXISTS (SELECT 1 FROM raised)",
                                4, PGRES_COMMAND_OK, false},
    /* The pg-for-update rung: the read takes the row's lock until the transaction ends, so a
     * second reader waits here and then reads what the first one committed. */
    [DB__STOCK_READ_FOR_UPDATE] = {"stock_read_for_update",
                                   "SELECT stock FROM goods WHERE id = $1 FOR UPDATE", 1,
                                   PGRES_TUPLES_OK, false},
    /* The pg-advisory rung: a lock on the number of the goods, not on its row, held until
     * the transaction ends. Advisory locks share one key space per database: the key of the
     * migrations' lock (DB__MIGRATION_LOCK_KEY) is taken only while a replica starts. */
    [DB__GOODS_ADVISORY_LOCK] = {"goods_advisory_lock", "SELECT pg_advisory_xact_lock($1::bigint)",
                                 1, PGRES_TUPLES_OK, false},
    /* The pg-atomic rung: check and write in one statement. The row's lock is taken by the
     * UPDATE itself, and under READ COMMITTED a waiting UPDATE re-checks "stock >= $2"
     * against the row as the other transaction committed it: no read to go stale. */
    [DB__STOCK_TAKE] = {"stock_take",
                        "UPDATE goods SET stock = stock - $2, updated = now()"
                        " WHERE id = $1 AND stock >= $2 RETURNING stock",
                        2, PGRES_TUPLES_OK, false},
    /*
     * pg-atomic's cart: every item's check and write in one statement ($1 the goods ids, $2
     * the counts, one array each, in the request's order), all or nothing. The inner subquery
     * takes the rows' locks in ascending id order (its ORDER BY runs below its FOR NO KEY
     * UPDATE), as every cart path here does, so two carts never wait for each other in a
     * cycle; it returns each row as committed after any wait. The window over them needs
     * every row, so every lock is taken before any row is written, and the rows are written
     * only when all the goods exist and each has enough stock: otherwise no row is returned
     * and nothing is written (the caller then asks which item stopped it).
     */
    [DB__STOCK_TAKE_CART] = {"stock_take_cart",
                             "UPDATE goods g SET stock = g.stock - w.n, updated = now()"
                             " FROM (SELECT l.id, u.n,"
                             " bool_and(l.stock >= u.n) OVER () AS enough,"
                             " count(*) OVER () AS found"
                             " FROM (SELECT id, stock FROM goods WHERE id = ANY ($1::bigint[])"
                             " ORDER BY id FOR NO KEY UPDATE) l"
                             " JOIN unnest($1::bigint[], $2::bigint[]) AS u (id, n)"
                             " ON u.id = l.id) w"
                             " WHERE g.id = w.id AND w.enough"
                             " AND w.found = cardinality($1::bigint[]) AND g.stock >= w.n"
                             " RETURNING g.id, g.stock",
                             2, PGRES_TUPLES_OK, false},
    /* Every PostgreSQL rung's transaction: bound its waits for locks by the replica's lock
     * wait bound. set_config(..., true) is SET LOCAL with the value as a parameter: it ends
     * with the transaction, so the pooled session goes back to the server's default (no
     * bound). A wait that runs out fails with SQLSTATE 55P03 (DB_ERR_LOCK_TIMEOUT). */
    [DB__SET_LOCK_TIMEOUT] = {"set_lock_timeout", "SELECT set_config('lock_timeout', $1, true)", 1,
                              PGRES_TUPLES_OK, false},
    /* The pg-optimistic rung: read the stock and the version it is at, without a lock... */
    [DB__STOCK_READ_VERSIONED] = {"stock_read_versioned",
                                  "SELECT stock, version FROM goods WHERE id = $1", 1,
                                  PGRES_TUPLES_OK, false},
    /* ...and write only if the row is still at that version. No row updated: another writer
     * committed in between, and this transaction lost the race. (The trigger of
     * 003_goods_version.sql also moves the version on for writers that do not say so.) */
    [DB__STOCK_WRITE_VERSIONED] = {"stock_write_versioned",
                                   "UPDATE goods SET stock = $2, version = version + 1,"
                                   " updated = now() WHERE id = $1 AND version = $3",
                                   3, PGRES_COMMAND_OK, false},
    /* The pg-lockrow rungs: the goods_locks row is the lock, its primary key the exclusion.
     * ON CONFLICT DO NOTHING turns "held" into "no row inserted" rather than a unique
     * violation: the same exclusion, without an error (and a line in the server's log) per
     * attempt of every waiter. $3 is the lease in ms, or NULL for a row that never expires
     * (now() + NULL is NULL). */
    [DB__LOCKROW_TAKE] = {"lockrow_take",
                          "INSERT INTO goods_locks (goods, owner, locked_until)"
                          " VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')"
                          " ON CONFLICT (goods) DO NOTHING",
                          3, PGRES_COMMAND_OK, false},
    /* pg-lockrow-ttl: a row whose expiry has passed, on PostgreSQL's clock (one clock for
     * every replica), is free: whoever finds it may delete it and take the lock. Rows with
     * no expiry (NULL) never match. */
    [DB__LOCKROW_EXPIRE] = {"lockrow_expire",
                            "DELETE FROM goods_locks WHERE goods = $1 AND locked_until < now()", 1,
                            PGRES_COMMAND_OK, false},
    /* Only the owner's row: a holder whose row expired and was taken over must not delete
     * the new holder's lock. */
    [DB__LOCKROW_RELEASE] = {"lockrow_release",
                             "DELETE FROM goods_locks WHERE goods = $1 AND owner = $2", 2,
                             PGRES_COMMAND_OK, false},
    /* After a claim was refused: the token it was refused against, for the lock service to
     * move its counter past (a counter left behind by a failover). */
    [DB__FENCE_OF] = {"fence_of", "SELECT fence FROM goods_fences WHERE goods = $1 AND source = $2",
                      2, PGRES_TUPLES_OK, false},
    /* Only run when a claim or a write changed no row, to tell "unknown goods" from
     * "fenced". */
    [DB__GOODS_EXISTS] = {"goods_exists", "SELECT 1 FROM goods WHERE id = $1", 1, PGRES_TUPLES_OK,
                          false},
    /* $7, the client's request id (NULL: none), rides in the INSERT the sale runs anyway:
     * what a recorded load settles its unknown outcomes by (migrations/009). */
    [DB__ORDER_INSERT] = {"order_insert",
                          "INSERT INTO orders (goods, count, mode, instance, fence, fence_source,"
                          " request_id)"
                          " VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                          7, PGRES_TUPLES_OK, false},
    /* A batch's orders in one round trip: one row per element of the counts array ($2, an
     * array literal of integers), inserted in the array's order, each with the request id
     * of the same place in $7 (a text array as long, NULL elements for requests without). */
    [DB__ORDERS_INSERT_MANY] = {"orders_insert_many",
                                "INSERT INTO orders (goods, count, mode, instance, fence,"
                                " fence_source, request_id)"
                                " SELECT $1::bigint, u.c, $3::text, $4::text, $5::bigint, $6::text,"
                                " u.r"
                                " FROM unnest($2::integer[], $7::text[]) WITH ORDINALITY"
                                " AS u (c, r, i)"
                                " ORDER BY u.i RETURNING id, count",
                                7, PGRES_TUPLES_OK, false},

    /* A cart's orders: one row per item ($1 goods, $2 counts, $5 fences, arrays in the
     * request's order; a fence may be NULL, and $6 names the counter of those that are not),
     * all in one statement, so that the rows of a cart
     * are all there or none is. They share one cart number, drawn once from the orders'
     * sequence (a MATERIALIZED CTE is evaluated once; a subquery in FROM could be evaluated
     * again for every row a nested loop joins to it), and the client's request id ($7, NULL:
     * none), as a single sale's row keeps it (migrations/009). */
    [DB__ORDERS_INSERT_CART] = {"orders_insert_cart",
                                "WITH c AS MATERIALIZED (SELECT nextval('orders_id_seq') AS id)"
                                " INSERT INTO orders"
                                " (goods, count, mode, instance, fence, fence_source, cart,"
                                " cart_items, request_id)"
                                " SELECT u.g, u.n, $3::text, $4::text, u.f,"
                                " CASE WHEN u.f IS NULL THEN NULL ELSE $6::text END, c.id,"
                                " cardinality($1::bigint[]), $7::text"
                                " FROM c, unnest($1::bigint[], $2::integer[], $5::bigint[])"
                                " WITH ORDINALITY AS u (g, n, f, i)"
                                " ORDER BY u.i RETURNING cart",
                                7, PGRES_TUPLES_OK, false},
    /*
     * redis-sharded's segments (migrations/005_goods_segments.sql). The hint: the goods row
     * (as segment -1) and every segment, read without a lock in one statement, so in one
     * snapshot: a total below the count there is a moment the goods was sold out.
     */
    [DB__SEGMENTS_READ] = {"segments_read",
                           "SELECT -1, stock FROM goods WHERE id = $1"
                           " UNION ALL SELECT seg, stock FROM goods_segments WHERE goods = $1",
                           1, PGRES_TUPLES_OK, false},
    /* A segment's fenced read, as DB__STOCK_CLAIM is the goods': the row's lock until the
     * transaction ends, and no row when it carries a newer token (or does not exist). */
    [DB__SEGMENT_CLAIM] = {"segment_claim",
                           "UPDATE goods_segments SET fence = $3"
                           " WHERE goods = $1 AND seg = $2 AND fence <= $3 RETURNING stock",
                           3, PGRES_TUPLES_OK, false},
    /* Only after a claim found no row: fenced, or no such segment? */
    [DB__SEGMENT_EXISTS] = {"segment_exists",
                            "SELECT 1 FROM goods_segments WHERE goods = $1 AND seg = $2", 2,
                            PGRES_TUPLES_OK, false},
    /* The write after a claim, returning the goods' total as this statement sees it: what
     * this segment keeps plus what the others and the goods row held at its snapshot. */
    [DB__SEGMENT_WRITE] = {"segment_write",
                           "UPDATE goods_segments SET stock = $3 WHERE goods = $1 AND seg = $2"
                           " RETURNING $3::bigint"
                           " + (SELECT COALESCE(sum(stock), 0) FROM goods_segments"
                           " WHERE goods = $1 AND seg <> $2)"
                           " + (SELECT stock FROM goods WHERE id = $1)",
                           3, PGRES_TUPLES_OK, false},
    /* The goods row's lock for moving units to or from the segments. FOR NO KEY UPDATE, not
     * FOR UPDATE: an order's foreign key check (FOR KEY SHARE) does not wait for it, so a
     * sale that holds a segment and records its order never waits for a mover that waits
     * for that segment. */
    [DB__GOODS_LOCK_NOKEY] = {"goods_lock_nokey",
                              "SELECT stock FROM goods WHERE id = $1 FOR NO KEY UPDATE", 1,
                              PGRES_TUPLES_OK, false},
    /* Every segment's lock, in ascending order (rows are locked in the order returned): every
     * statement that locks more than one segment takes them in this order, so no two wait
     * for each other in a cycle. */
    [DB__SEGMENTS_LOCK_ALL] = {"segments_lock_all",
                               "SELECT seg, stock, fence FROM goods_segments WHERE goods = $1"
                               " ORDER BY seg FOR NO KEY UPDATE",
                               1, PGRES_TUPLES_OK, false},
    /* Empties the segments from $2 up, after DB__SEGMENTS_LOCK_ALL locked them. */
    [DB__SEGMENTS_EMPTY] = {"segments_empty",
                            "UPDATE goods_segments SET stock = 0"
                            " WHERE goods = $1 AND seg >= $2 AND stock <> 0",
                            2, PGRES_COMMAND_OK, false},
    /* Sets segments 0..n-1 to the stocks of $2 with the tokens of $3 (arrays of one length),
     * creating the rows that do not exist yet; a stored token is never lowered. */
    [DB__SEGMENTS_SPREAD] =
        {"segments_spread",
         "INSERT INTO goods_segments (goods, seg, stock, fence)"
         " SELECT $1::bigint, (u.i - 1)::integer, u.s, u.f"
         " FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS u (s, f, i)"
         " ON CONFLICT (goods, seg) DO UPDATE SET stock = EXCLUDED.stock,"
         " fence = GREATEST(goods_segments.fence, EXCLUDED.fence)",
         3, PGRES_COMMAND_OK, false},

    /* ON CONFLICT DO NOTHING waits for a transaction that inserted the same key and has not
     * ended yet; then it inserts (that one rolled back) or does nothing (it committed). */
    [DB__IDEM_CLAIM] = {"idem_claim",
                        "INSERT INTO idempotency (goods, key) VALUES ($1, $2)"
                        " ON CONFLICT (goods, key) DO NOTHING",
                        2, PGRES_COMMAND_OK, false},
    [DB__IDEM_STORE] = {"idem_store",
                        "UPDATE idempotency SET status = $3, body = $4"
                        " WHERE goods = $1 AND key = $2 AND status = 0",
                        4, PGRES_COMMAND_OK, false},
    [DB__IDEM_FETCH] = {"idem_fetch",
                        "SELECT status, body FROM idempotency"
                        " WHERE goods = $1 AND key = $2 AND status <> 0",
                        2, PGRES_TUPLES_OK, false},

    /* A cart's Idempotency-Key records (migrations/007_order_carts.sql): the same three
     * steps as the single sale's, keyed by the cart's canonical text ($1) and the key. */
    [DB__ORDER_IDEM_CLAIM] = {"order_idem_claim",
                              "INSERT INTO order_idempotency (cart, key, goods)"
                              " VALUES ($1, $2, $3::bigint[]) ON CONFLICT (cart, key) DO NOTHING",
                              3, PGRES_COMMAND_OK, false},
    [DB__ORDER_IDEM_STORE] = {"order_idem_store",
                              "UPDATE order_idempotency SET status = $3, body = $4"
                              " WHERE cart = $1 AND key = $2 AND status = 0",
                              4, PGRES_COMMAND_OK, false},
    [DB__ORDER_IDEM_FETCH] = {"order_idem_fetch",
                              "SELECT status, body FROM order_idempotency"
                              " WHERE cart = $1 AND key = $2 AND status <> 0",
                              2, PGRES_TUPLES_OK, false},
    /* The fence is kept: tokens only grow, and a reset must not let an old holder in. */
    [DB__GOODS_UPSERT] = {"goods_upsert",
                          "INSERT INTO goods (id, stock, initial) VALUES ($1, $2, $2)"
                          " ON CONFLICT (id) DO UPDATE"
                          " SET stock = EXCLUDED.stock, initial = EXCLUDED.initial,"
                          " updated = now()",
                          2, PGRES_COMMAND_OK, false},
    [DB__ORDERS_DELETE] = {"orders_delete", "DELETE FROM orders WHERE goods = $1", 1,
                           PGRES_COMMAND_OK, false},
    [DB__IDEM_DELETE] = {"idem_delete", "DELETE FROM idempotency WHERE goods = $1", 1,
                         PGRES_COMMAND_OK, false},
    /* The goods' counters (migrations/008_goods_sales.sql), emptied with its orders. */
    [DB__SALES_DELETE] = {"sales_delete", "DELETE FROM goods_sales WHERE goods = $1", 1,
                          PGRES_COMMAND_OK, false},

    /* A reset deletes the records of every cart that holds the goods (its GIN index). */
    [DB__ORDER_IDEM_DELETE] = {"order_idem_delete",
                               "DELETE FROM order_idempotency WHERE goods @> ARRAY[$1::bigint]", 1,
                               PGRES_COMMAND_OK, false},
    /* One statement, so one snapshot: the stock and the counts of the orders are seen as of
     * the same moment. Read in two statements, a sale committed in between would show up as
     * units sold that the stock never gave up (or the other way round). The stock is the
     * goods row's plus its segments' (redis-sharded); sold and orders are the goods' counters,
     * a few stripes (migrations/008_goods_sales.sql), so the read costs the same at any
     * number of orders. */
    [DB__STOCK_REPORT] = {"stock_report",
                          "SELECT g.initial, g.stock + COALESCE((SELECT sum(stock)"
                          " FROM goods_segments WHERE goods = g.id), 0), s.sold, s.orders"
                          " FROM goods g,"
                          " LATERAL (SELECT COALESCE(sum(sold), 0) AS sold,"
                          " COALESCE(sum(orders), 0) AS orders"
                          " FROM goods_sales WHERE goods = g.id) s"
                          " WHERE g.id = $1",
                          1, PGRES_TUPLES_OK, false},
    /* The audit: the report's figures and, in the same snapshot, the sums over the full
     * ledger that the counters stand for. Its cost grows with the orders: run on demand. */
    [DB__STOCK_AUDIT] = {"stock_audit",
                         "SELECT g.initial, g.stock + COALESCE((SELECT sum(stock)"
                         " FROM goods_segments WHERE goods = g.id), 0), s.sold, s.orders,"
                         " o.sold, o.orders"
                         " FROM goods g,"
                         " LATERAL (SELECT COALESCE(sum(sold), 0) AS sold,"
                         " COALESCE(sum(orders), 0) AS orders"
                         " FROM goods_sales WHERE goods = g.id) s,"
                         " LATERAL (SELECT COALESCE(sum(count), 0) AS sold, count(*) AS orders"
                         " FROM orders WHERE goods = g.id) o"
                         " WHERE g.id = $1",
                         1, PGRES_TUPLES_OK, false},

    /* Session-level advisory lock: held until unlocked or the session ends, so a migrator
     * that dies mid-way releases it with its connection. */
    [DB__MIGRATION_LOCK] = {"migration_lock", "SELECT pg_advisory_lock(" DB__MIGRATION_LOCK_KEY ")",
                            0, PGRES_TUPLES_OK, false},
    [DB__MIGRATION_UNLOCK] = {"migration_unlock",
                              "SELECT pg_advisory_unlock(" DB__MIGRATION_LOCK_KEY ")", 0,
                              PGRES_TUPLES_OK, false},
    [DB__MIGRATIONS_TABLE_EXISTS] = {"migrations_table_exists",
                                     "SELECT to_regclass('schema_migrations') IS NOT NULL", 0,
                                     PGRES_TUPLES_OK, false},
    [DB__MIGRATIONS_TABLE_CREATE] = {"migrations_table_create",
                                     "CREATE TABLE IF NOT EXISTS schema_migrations ("
                                     " version bigint PRIMARY KEY,"
                                     " name text NOT NULL,"
                                     " applied_at timestamptz NOT NULL DEFAULT now())",
                                     0, PGRES_COMMAND_OK, false},
    [DB__MIGRATIONS_APPLIED] = {"migrations_applied",
                                "SELECT version FROM schema_migrations ORDER BY version", 0,
                                PGRES_TUPLES_OK, false},
    [DB__MIGRATION_RECORD] = {"migration_record",
                              "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", 2,
                              PGRES_COMMAND_OK, false},
};

_Static_assert(DB__STMT_COUNT <= 64, "db_conn.prepared is a 64-bit set");

const struct db__statement *db__statement(enum db__stmt_id id)
{
    return &stmts[id];
}

const char *db__sql(enum db__stmt_id id)
{
    return stmts[id].sql;
}

ExecStatusType db__want(enum db__stmt_id id)
{
    return stmts[id].want;
}

const char *db__i64(char *buf, int64_t v)
{
    snprintf(buf, DB__I64_LEN, "%" PRId64, v);
    return buf;
}

const char *const *db__nums_of(db__nums *p, size_t n, const int64_t *v)
{
    for (size_t i = 0; i < n && i < DB__NUMS_MAX; i++)
        p->params[i] = db__i64(p->text[i], v[i]);
    return p->params;
}

char *db__i64_array(const int64_t *v, const bool *null, size_t n)
{
    char *array = malloc(n * DB__I64_LEN + 3), *p;

    if (!array)
        return NULL;
    p = array;
    *p++ = '{';
    for (size_t i = 0; i < n; i++) {
        char num[DB__I64_LEN];
        const char *text = null != NULL && null[i] ? "NULL" : db__i64(num, v[i]);
        size_t len = strlen(text);
        if (i > 0)
            *p++ = ',';
        memcpy(p, text, len);
        p += len;
    }
    *p++ = '}';
    *p = '\0';
    return array;
}

char *db__text_array(const char *const *v, size_t n)
{
    size_t len = 3, i;
    char *array, *p;

    for (i = 0; i < n; i++)
        len += (v != NULL && v[i] != NULL ? 2 * strlen(v[i]) + 2 : 4) + 1;
    array = malloc(len);
    if (!array)
        return NULL;
    p = array;
    *p++ = '{';
    for (i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        if (v == NULL || v[i] == NULL) {
            memcpy(p, "NULL", 4);
            p += 4;
            continue;
        }
        *p++ = '"';
        for (const char *c = v[i]; *c != '\0'; c++) {
            if (*c == '"' || *c == '\\')
                *p++ = '\\';
            *p++ = *c;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = '\0';
    return array;
}
