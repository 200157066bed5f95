/*
 * test_fence.c - the fencing token's claim against a real PostgreSQL: an older token refused,
 * fences kept per source, a claim made behind another holder's uncommitted row (it reads
 * that holder's write, or is refused when the holder is newer); and the sale in two round
 * trips (pipeline mode): committed, fenced, or leaving nothing on an error, and a claim made
 * while its COMMIT is on the way reading what it left.
 *
 * The environment and the fixtures: tests/db/db_support.h.
 */
#include "tests/db/db_support.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_claim_refuses_an_older_token(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0;

    reset_ok(c, 1, 100);
    assert_int_equal(fence_of(f, 1), 0);

    assert_int_equal(db_stock_claim(c, 1, "redis", 5, &s), DB_OK);
    assert_int_equal(s, 100);
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(db_stock_write(c, 1, 90), DB_OK);
    /* older: refused, nothing changes */
    assert_int_equal(db_stock_claim(c, 1, "redis", 4, &s), DB_ERR_FENCED);
    assert_non_null(strstr(db_conn_error(c), "newer"));
    assert_int_equal(stock_of(c, 1), 90);
    assert_int_equal(fence_of(f, 1), 5);
    /* the same holding claiming again, then a newer one */
    assert_int_equal(db_stock_claim(c, 1, "redis", 5, &s), DB_OK);
    assert_int_equal(db_stock_claim(c, 1, "redis", 6, &s), DB_OK);
    assert_int_equal(s, 90);
    assert_int_equal(fence_of(f, 1), 6);
    /* the unfenced write leaves the token alone */
    assert_int_equal(db_stock_write(c, 1, 83), DB_OK);
    assert_int_equal(fence_of(f, 1), 6);
    /* unknown goods is not a fencing refusal */
    assert_int_equal(db_stock_claim(c, 2, "redis", 7, &s), DB_ERR_NOT_FOUND);
    /* a reset keeps the token: an old holder stays out */
    reset_ok(c, 1, 100);
    assert_int_equal(fence_of(f, 1), 6);
    assert_int_equal(db_stock_claim(c, 1, "redis", 5, &s), DB_ERR_FENCED);
    /* another source's numbers are not comparable: its token takes the row over, and
     * then the first source's next token is not compared with it either */
    assert_int_equal(db_stock_claim(c, 1, "other", 1, &s), DB_OK);
    assert_int_equal(fence_of(f, 1), 1);
    assert_int_equal(db_stock_claim(c, 1, "other", 0, &s), DB_ERR_FENCED);
    assert_int_equal(db_stock_claim(c, 1, "redis", 7, &s), DB_OK);
    assert_int_equal(fence_of(f, 1), 7);
    db_pool_release(f->pool, c);
}

/*
 * Fences across lock services: a redis holder with token 10 writes, an etcd holder (its own
 * counter) writes, then a stale redis holder with token 9 comes: it must be refused. Before,
 * the row kept only the last claim's source, the etcd claim replaced it, and the stale redis
 * token was compared with nothing: it passed, and lowered the stored redis fence. Each
 * order records its token's source.
 */
static void test_claim_fences_per_source(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0, redis10 = 10, etcd3 = 3;

    reset_ok(c, 3, 100);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "redis", 10, &s), DB_OK);
    assert_int_equal(db_stock_write(c, 3, 99), DB_OK);
    assert_int_equal(db_order_insert(c, 3, 1, "redis", "svc-1", &redis10, "redis", NULL, &id),
                     DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "etcd", 3, &s), DB_OK);
    assert_int_equal(db_stock_write(c, 3, 98), DB_OK);
    assert_int_equal(db_order_insert(c, 3, 1, "etcd", "svc-2", &etcd3, "etcd", NULL, &id), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);

    /* the stale redis holder: refused, nothing changes */
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "redis", 9, &s), DB_ERR_FENCED);
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(stock_of(c, 3), 98);
    /* each source still compares with its own: etcd's next token and redis' next pass */
    assert_int_equal(db_stock_claim(c, 3, "etcd", 2, &s), DB_ERR_FENCED);
    assert_int_equal(db_stock_claim(c, 3, "etcd", 4, &s), DB_OK);
    assert_int_equal(db_stock_claim(c, 3, "redis", 11, &s), DB_OK);
    assert_int_equal(
        raw_int(f->admin, "SELECT count(*) FROM orders WHERE goods = 3 AND fence_source = 'etcd'",
                0, NULL),
        1);
    db_pool_release(f->pool, c);
}

typedef struct claimant {
    db_pool *pool;
    int64_t token;
    atomic_int done;
    int rc;
    int64_t stock; /* what the claim read */
} claimant;

static void *claim_run(void *arg)
{
    claimant *w = arg;
    db_conn *c = NULL;

    w->rc = db_pool_acquire(w->pool, 2000, &c);
    if (w->rc == DB_OK)
        w->rc = db_begin(c);
    if (w->rc == DB_OK)
        w->rc = db_stock_claim(c, 1, "redis", w->token, &w->stock);
    atomic_store(&w->done, 1);
    if (c)
        db_pool_release(w->pool, c); /* rolls back */
    return NULL;
}

/* A claim whose row another holder has claimed and not committed waits for it, and then,
 * by the token order: reads what the older holder committed, or is refused when the holder
 * it waited for is newer. The check is made against the committed row, not a snapshot. */
static void claim_behind(fixture *f, int64_t first, int64_t second, int want_rc, int64_t want_stock)
{
    db_conn *c = acquire(f->pool);
    claimant w = {f->pool, second, 0, -100, -1};
    pthread_t th;
    int64_t s = 0;

    reset_ok(c, 1, 100);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_stock_claim(c, 1, "redis", first, &s), DB_OK);
    assert_int_equal(db_stock_write(c, 1, 99), DB_OK);

    assert_int_equal(pthread_create(&th, NULL, claim_run, &w), 0);
    sleep_ms(300);
    assert_int_equal(atomic_load(&w.done), 0); /* waiting for our row lock */
    assert_int_equal(db_commit(c), DB_OK);
    pthread_join(th, NULL);
    assert_int_equal(w.rc, want_rc);
    if (want_rc == DB_OK)
        assert_int_equal(w.stock, want_stock);
    assert_int_equal(stock_of(c, 1), 99);
    assert_int_equal(fence_of(f, 1), first);
    db_pool_release(f->pool, c);
}

static void test_claim_behind_an_older_holder_reads_its_write(void **state)
{
    claim_behind(*state, 7, 8, DB_OK, 99);
}

static void test_claim_behind_a_newer_holder_is_refused(void **state)
{
    claim_behind(*state, 8, 7, DB_ERR_FENCED, 0);
}

/* ---- the sale in two round trips (pipeline mode) ------------------------------------ */

/* BEGIN + claim, then write + order + COMMIT: the sale is committed, with its order, its
 * token and its source, and the session is left out of pipeline mode and idle (plain
 * statements run on it after). */
static void test_pipelined_sale_commits(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0;

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, 0, &s), DB_OK);
    assert_int_equal(s, 10);
    assert_int_equal(db_sale_commit(c, 1, 7, 3, "redis", "svc-1", 5, "redis", NULL, NULL, &id),
                     DB_OK);
    assert_true(id > 0);
    assert_int_equal(stock_of(c, 1), 7); /* committed: seen outside the transaction */
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(orders_of(f, 1), 1);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE goods = 1 AND count = 3"
                             " AND fence = 5 AND fence_source = 'redis' AND mode = 'redis'",
                             0, NULL),
                     1);
    /* a second sale on the same session, then the plain statements still work */
    assert_int_equal(db_claim_begin(c, 1, "redis", 6, 0, &s), DB_OK);
    assert_int_equal(s, 7);
    assert_int_equal(db_sale_commit(c, 1, 6, 1, "redis", "svc-1", 6, "redis", NULL, NULL, &id),
                     DB_OK);
    assert_int_equal(db_ping(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 6);
    /* unknown goods: the claim says so; nothing to commit */
    assert_int_equal(db_claim_begin(c, 2, "redis", 7, 0, &s), DB_ERR_NOT_FOUND);
    assert_int_equal(db_rollback(c), DB_OK);
    db_pool_release(f->pool, c);
}

/*
 * The sale's second batch gives its caller a moment once everything is sent (on_sent): the
 * service hands the lock over there, while COMMIT is on its way. This is why that is safe:
 * a next holder's claim made in that very moment, on another session, waits for the row
 * the first transaction claimed, then reads what it left: its write once it committed, the
 * old stock when its batch was refused and rolled back. Deterministic: the claim is made
 * before the first holder reads a single answer, whatever the timing.
 */
typedef struct next_holder {
    db_conn *conn;
    int64_t token;
    int calls;
    int rc;
    int64_t stock_seen;
} next_holder;

static void next_holder_claims(void *arg)
{
    next_holder *n = arg;

    n->calls++;
    n->rc = db_claim_begin(n->conn, 1, "redis", n->token, 0, &n->stock_seen);
    assert_int_equal(db_rollback(n->conn), DB_OK);
}

/* A sale of goods 1 under `token` (new_stock, count) on c, answering want_rc, with the next
 * holder's claim (token + 1, on other) made once its second batch is sent: that claim must
 * read want_seen. */
static void sell_with_a_claim_behind(db_conn *c, db_conn *other, int64_t token, int64_t new_stock,
                                     int64_t count, int want_rc, int64_t want_seen)
{
    next_holder n = {.conn = other, .token = token + 1, .stock_seen = -1};
    const db_on_sent on_sent = {next_holder_claims, &n};
    int64_t s = 0, id = 0;

    assert_int_equal(db_claim_begin(c, 1, "redis", token, 0, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, new_stock, count, "redis", "svc-1", token, "redis", NULL,
                                    &on_sent, &id),
                     want_rc);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.rc, DB_OK);
    assert_int_equal(n.stock_seen, want_seen);
}

static void test_claim_while_commit_travels_reads_its_outcome(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool), *other = acquire(f->pool);
    next_holder n = {.conn = other, .token = 10, .stock_seen = -1};
    const db_on_sent on_sent = {next_holder_claims, &n};
    const int64_t counts[2] = {1, 2};
    int64_t s = 0, ids[2];

    reset_ok(c, 1, 10);
    /* committed: the claim behind it reads the 7 it wrote */
    sell_with_a_claim_behind(c, other, 5, 7, 3, DB_OK, 7);
    /* refused (below zero) and rolled back: the claim behind it reads the old 7 */
    sell_with_a_claim_behind(c, other, 7, -1, 8, DB_ERR_QUERY, 7);

    /* the batched commit: the same moment, the same outcome */
    assert_int_equal(db_claim_begin(c, 1, "redis", 9, 0, &s), DB_OK);
    assert_int_equal(db_batch_commit(c, 1, 4, counts, 2, "redis-batch", "svc-1", 9, "redis", NULL,
                                     &on_sent, ids),
                     DB_OK);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.stock_seen, 4);

    /* nothing sent (no orders): no moment either */
    n = (next_holder){.conn = other, .token = 11, .stock_seen = -1};
    assert_int_equal(db_batch_commit(c, 1, 4, counts, 0, "redis-batch", "svc-1", 10, "redis", NULL,
                                     &on_sent, ids),
                     DB_ERR_INVALID);
    assert_int_equal(n.calls, 0);
    assert_int_equal(stock_of(c, 1), 4);
    assert_int_equal(orders_of(f, 1), 3);
    db_pool_release(f->pool, other);
    db_pool_release(f->pool, c);
}

/* An older token than the row's: refused (lock_lost for the caller), nothing changes. */
static void test_pipelined_claim_refuses_an_older_token(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0;

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, 0, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 9, 1, "redis", "svc-1", 5, "redis", NULL, NULL, &id),
                     DB_OK);
    assert_int_equal(db_claim_begin(c, 1, "redis", 4, 0, &s), DB_ERR_FENCED);
    assert_non_null(strstr(db_conn_error(c), "newer"));
    assert_int_equal(db_rollback(c), DB_OK);
    assert_int_equal(stock_of(c, 1), 9);
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(orders_of(f, 1), 1);
    db_pool_release(f->pool, c);
}

/* A statement refused inside the second batch (the write below zero; the order's count 0):
 * what follows it in the batch, COMMIT too, is skipped, the transaction is rolled back, and
 * the session is usable at once. Nothing of the sale remains, the claim's token neither. */
static void test_pipelined_error_leaves_nothing(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0;

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, 0, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, -1, 11, "redis", "svc-1", 5, "redis", NULL, NULL, &id),
                     DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "write stock"));
    assert_int_equal(stock_of(c, 1), 10);
    assert_int_equal(orders_of(f, 1), 0);
    assert_int_equal(fence_of(f, 1), 0);

    assert_int_equal(db_claim_begin(c, 1, "redis", 6, 0, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 10, 0, "redis", "svc-1", 6, "redis", NULL, NULL, &id),
                     DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "record order"));
    assert_int_equal(stock_of(c, 1), 10);
    assert_int_equal(orders_of(f, 1), 0);
    assert_int_equal(fence_of(f, 1), 0);

    /* the session is idle and out of pipeline mode: a whole sale goes through */
    assert_int_equal(db_claim_begin(c, 1, "redis", 7, 0, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 8, 2, "redis", "svc-1", 7, "redis", NULL, NULL, &id),
                     DB_OK);
    assert_int_equal(stock_of(c, 1), 8);
    assert_int_equal(orders_of(f, 1), 1);
    db_pool_release(f->pool, c);
}

/* The batched sale's second round trip: the write, n orders in one statement and COMMIT.
 * Each count gets an order of its own with that count, token and source; a refused write
 * leaves nothing; bad arguments send nothing. */
static void test_pipelined_batch_commits(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t counts[3] = {2, 1, 2};
    int64_t s = 0, ids[3] = {0, 0, 0};

    reset_ok(c, 1, 10);
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, 0, &s), DB_OK);
    const char *rids[3] = {"b-1", NULL, "b-3"};
    assert_int_equal(
        db_batch_commit(c, 1, 5, counts, 3, "redis-batch", "svc-1", 5, "redis", rids, NULL, ids),
        DB_OK);
    assert_int_equal(raw_int(f->admin,
                             "SELECT count(*) FROM orders WHERE goods = 1"
                             " AND request_id IN ('b-1', 'b-3')",
                             0, NULL),
                     2);
    assert_true(ids[0] > 0 && ids[1] > 0 && ids[2] > 0);
    assert_true(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    assert_int_equal(stock_of(c, 1), 5);
    assert_int_equal(fence_of(f, 1), 5);
    assert_int_equal(orders_of(f, 1), 3);
    for (int i = 0; i < 3; i++) {
        char id[24], count[24];
        const char *params[2] = {id, count};
        snprintf(id, sizeof(id), "%lld", (long long)ids[i]);
        snprintf(count, sizeof(count), "%lld", (long long)counts[i]);
        assert_int_equal(raw_int(f->admin,
                                 "SELECT count(*) FROM orders WHERE id = $1 AND count = $2"
                                 " AND goods = 1 AND fence = 5 AND fence_source = 'redis'"
                                 " AND mode = 'redis-batch'",
                                 2, params),
                         1);
    }

    /* the write refused (below zero): the orders and COMMIT skipped, rolled back */
    assert_int_equal(db_claim_begin(c, 1, "redis", 6, 0, &s), DB_OK);
    assert_int_equal(
        db_batch_commit(c, 1, -1, counts, 3, "redis-batch", "svc-1", 6, "redis", NULL, NULL, ids),
        DB_ERR_QUERY);
    assert_non_null(strstr(db_conn_error(c), "write stock"));
    assert_int_equal(stock_of(c, 1), 5);
    assert_int_equal(orders_of(f, 1), 3);
    assert_int_equal(fence_of(f, 1), 5);

    /* nothing to send: no orders, or a count below one */
    assert_int_equal(
        db_batch_commit(c, 1, 5, counts, 0, "redis-batch", "svc-1", 6, "redis", NULL, NULL, ids),
        DB_ERR_INVALID);
    assert_int_equal(db_batch_commit(c, 1, 5, (const int64_t[]){1, 0}, 2, "redis-batch", "svc-1", 6,
                                     "redis", NULL, NULL, ids),
                     DB_ERR_INVALID);
    assert_int_equal(db_ping(c), DB_OK);
    db_pool_release(f->pool, c);
}

/* A row trigger `before` (e.g. "BEFORE UPDATE ON goods") whose plpgsql body is body, made
 * on the admin connection, which must accept it. */
static void trigger_ok(fixture *f, const char *before, const char *body)
{
    char fn[256], trigger[256];
    snprintf(fn, sizeof fn,
             "CREATE FUNCTION t_fn() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN %s END$$", body);
    snprintf(trigger, sizeof trigger, "CREATE TRIGGER t %s FOR EACH ROW EXECUTE FUNCTION t_fn()",
             before);
    PQclear(raw_exec(f->admin, fn, 0, NULL)); /* raw_exec fails the case on a refusal */
    PQclear(raw_exec(f->admin, trigger, 0, NULL));
}

/* COMMIT ran, but the write found no row (a trigger skips every change of the stock): the
 * order is in the table, so the sale is not one that did not happen. It is reported
 * DB_ERR_COMMIT_UNKNOWN, never an error that promises nothing was sold. */
static void test_pipelined_commit_with_a_missed_write_is_unknown(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    int64_t s = 0, id = 0;

    reset_ok(c, 1, 10);
    trigger_ok(f, "BEFORE UPDATE ON goods",
               "IF NEW.stock <> OLD.stock THEN RETURN NULL; END IF; RETURN NEW;");
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, 0, &s), DB_OK);
    assert_int_equal(db_sale_commit(c, 1, 7, 3, "redis", "svc-1", 5, "redis", NULL, NULL, &id),
                     DB_ERR_COMMIT_UNKNOWN);
    assert_non_null(strstr(db_conn_error(c), "found no row"));
    assert_int_equal(orders_of(f, 1), 1); /* committed */
    assert_int_equal(db_ping(c), DB_OK);
    db_pool_release(f->pool, c);
}

/* COMMIT ran, but the batch's order ids cannot be matched to its counts (a trigger changes
 * each order's count): every sale of the batch happened, and is reported unknown. */
static void test_pipelined_batch_with_unmatched_ids_is_unknown(void **state)
{
    fixture *f = *state;
    db_conn *c = acquire(f->pool);
    const int64_t counts[2] = {2, 1};
    int64_t s = 0, ids[2] = {0, 0};

    reset_ok(c, 1, 10);
    trigger_ok(f, "BEFORE INSERT ON orders", "NEW.count := NEW.count + 100; RETURN NEW;");
    assert_int_equal(db_claim_begin(c, 1, "redis", 5, 0, &s), DB_OK);
    assert_int_equal(
        db_batch_commit(c, 1, 7, counts, 2, "redis-batch", "svc-1", 5, "redis", NULL, NULL, ids),
        DB_ERR_COMMIT_UNKNOWN);
    assert_int_equal(orders_of(f, 1), 2); /* committed */
    assert_int_equal(stock_of(c, 1), 7);
    db_pool_release(f->pool, c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_claim_fences_per_source, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_claim_refuses_an_older_token, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_claim_behind_an_older_holder_reads_its_write,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_claim_behind_a_newer_holder_is_refused, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_sale_commits, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_claim_while_commit_travels_reads_its_outcome,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_claim_refuses_an_older_token, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_error_leaves_nothing, setup_migrated,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_batch_commits, setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_commit_with_a_missed_write_is_unknown,
                                        setup_migrated, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_batch_with_unmatched_ids_is_unknown,
                                        setup_migrated, teardown),
    };

    return db_test_main("test_fence", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
