/*
 * test_sale.c - the one read-check-write (service/sale/sale.h, sale_run) run directly, against a
 * real PostgreSQL, in the shapes its three callers give it: several lines at once (the
 * batch), from the goods row with segments that hold stock (a mode after redis-sharded), from
 * one segment (redis-sharded's fast path). Each case that takes the goods row runs twice:
 * statement by statement and in two round trips (deduct_env.pipeline): the answers must be
 * the same. And when the guard is given back: in two round trips, as COMMIT is sent.
 *
 * The holding is a fenced one made here (source "test", as the scripted guard's): the sale
 * asks it still_held through scripted_mode, which never finds a loss.
 */
#include "tests/deduct/deduct_support.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards/guards.h"
#include "service/sale/sale.h"

#define LINES_MAX 4

/* One sale's lines and their answers. */
typedef struct lines {
    sale_line line[LINES_MAX];
    deduct_result out[LINES_MAX];
    size_t n;
} lines;

static void lines_init(lines *l, const int64_t *counts, const char *const *keys, size_t n)
{
    memset(l, 0, sizeof(*l));
    l->n = n;
    for (size_t i = 0; i < n; i++)
        l->line[i] = (sale_line){
            .count = counts[i], .key = keys != NULL ? keys[i] : NULL, .out = &l->out[i]};
}

static void lines_free(lines *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->out[i].body);
        l->out[i].body = NULL;
    }
}

/* Runs one sale of l's lines of goods from `source` (segment: which, or how many) under a
 * fenced holding with `token`, in mode m (scripted_mode, or one built on it), and leaves the
 * sale's `left` in *left when left is not NULL. Returns sale_run's answer. */
/* The stages of the last sale run_sale_in ran (sale.stage_ns, deduct.h's deduct_stage). */
static int64_t g_stage_ns[DEDUCT_STAGES_];

static int run_sale_in(const mode *m, bool pipeline, bool leave_after_commit, int64_t goods,
                       sale_source source, int segment, lines *l, int64_t token, bool *left)
{
    deduct_env env = deduct_test_env();
    guard_hold hold = {.fenced = true, .fence = token, .fence_source = "test"};
    sale s = {.env = &env,
              .mode = m,
              .goods_id = goods,
              .lines = l->line,
              .n = l->n,
              .source = source,
              .segment = segment,
              .holds = &hold,
              .n_holds = 1,
              .leave_after_commit = leave_after_commit};
    int rc;

    env.pipeline = pipeline;
    env.optimistic_retries = 16;
    assert_int_equal(db_pool_acquire(g_pool, 2000, &s.conn), DB_OK);
    rc = sale_run(&s);
    db_pool_release(g_pool, s.conn);
    if (left != NULL)
        *left = s.left;
    memcpy(g_stage_ns, s.stage_ns, sizeof(g_stage_ns));
    return rc;
}

static int run_sale(bool pipeline, int64_t goods, sale_source source, int segment, lines *l,
                    int64_t token)
{
    return run_sale_in(&scripted_mode, pipeline, false, goods, source, segment, l, token, NULL);
}

static void expect_answer(const deduct_result *out, int status, const char *outcome,
                          const char *in_body)
{
    assert_int_equal(out->status, status);
    assert_non_null(out->body);
    assert_string_equal(deduct_outcome_name(out->outcome), outcome);
    if (in_body != NULL && strstr(out->body, in_body) == NULL)
        fail_msg("body %s lacks %s", out->body, in_body);
}

/* Cuts goods' row into k segments (shares), as redis-sharded leaves a goods: the goods row 0. */
static void cut_into_segments(int64_t goods, int k, const int64_t *shares)
{
    int64_t goods_stock = 0, rest = 0, stocks[DB_SEGMENTS_MAX], fences[DB_SEGMENTS_MAX];
    db_conn *c = NULL;

    assert_int_equal(db_pool_acquire(g_pool, 2000, &c), DB_OK);
    assert_int_equal(db_begin(c), DB_OK);
    assert_int_equal(db_segments_gather(c, goods, k, &goods_stock, stocks, fences, &rest), DB_OK);
    assert_int_equal(db_segments_spread(c, goods, 0, k, shares, fences), DB_OK);
    assert_int_equal(db_commit(c), DB_OK);
    db_pool_release(g_pool, c);
}

/* ---- the cases ------------------------------------------------------------------------ */

/* Four lines against a stock of 5, in arrival order: 3 sold (2 left), 4 refused against 2,
 * 2 sold (0 left), 1 refused against 0. One order per sold line; the books balance. */
static void test_lines_in_arrival_order(void **state)
{
    static const int64_t counts[] = {3, 4, 2, 1};
    (void)state;

    for (int pipeline = 0; pipeline <= 1; pipeline++) {
        int64_t goods = 6101 + pipeline;
        lines l;

        reset_goods(goods, 5);
        lines_init(&l, counts, NULL, 4);
        assert_int_equal(run_sale(pipeline, goods, SALE_FROM_GOODS, 0, &l, 10), SALE_DONE);
        expect_answer(&l.out[0], 200, "deducted", "\"remaining\":2");
        expect_answer(&l.out[1], 409, "insufficient_stock", "\"remaining\":2");
        expect_answer(&l.out[2], 200, "deducted", "\"remaining\":0");
        expect_answer(&l.out[3], 409, "insufficient_stock", "\"remaining\":0");
        db_stock_report r = report_of(goods);
        assert_int_equal(r.stock, 0);
        assert_int_equal(r.sold, 5);
        assert_int_equal(r.orders, 2);
        lines_free(&l);
    }
}

/* Keys: two lines with one key are one sale (the second gets the first's answer, replayed);
 * a later sale with a stored key replays it and sells only for the new key. */
static void test_keys_twins_and_replays(void **state)
{
    static const int64_t counts[] = {1, 1, 1}, later_counts[] = {5, 1};
    static const char *const keys[] = {"key-a", "key-b", "key-a"},
                             *later_keys[] = {"key-b", "key-c"};
    const int64_t goods = 6111;
    lines l, later;

    (void)state;
    reset_goods(goods, 10);
    lines_init(&l, counts, keys, 3);
    assert_int_equal(run_sale(true, goods, SALE_FROM_GOODS, 0, &l, 10), SALE_DONE);
    expect_answer(&l.out[0], 200, "deducted", "\"remaining\":9");
    expect_answer(&l.out[1], 200, "deducted", "\"remaining\":8");
    expect_answer(&l.out[2], 200, "replayed", NULL);
    assert_string_equal(l.out[2].body, l.out[0].body);

    lines_init(&later, later_counts, later_keys, 2);
    assert_int_equal(run_sale(true, goods, SALE_FROM_GOODS, 0, &later, 11), SALE_DONE);
    expect_answer(&later.out[0], 200, "replayed", NULL);
    assert_string_equal(later.out[0].body, l.out[1].body);
    expect_answer(&later.out[1], 200, "deducted", "\"remaining\":7");
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 7);
    assert_int_equal(r.orders, 3);
    lines_free(&l);
    lines_free(&later);
}

/* An unknown goods: every line 404, nothing written. */
static void test_unknown_goods(void **state)
{
    static const int64_t counts[] = {1, 2};
    (void)state;

    for (int pipeline = 0; pipeline <= 1; pipeline++) {
        lines l;
        lines_init(&l, counts, NULL, 2);
        assert_int_equal(run_sale(pipeline, 987654, SALE_FROM_GOODS, 0, &l, 10), SALE_DONE);
        expect_answer(&l.out[0], 404, "unknown_goods", NULL);
        expect_answer(&l.out[1], 404, "unknown_goods", NULL);
        lines_free(&l);
    }
}

/* The goods row is empty but redis-sharded's segments hold 10: the sale folds them back into
 * the row and sells from it; no 409 while the goods' stock covers the count. */
static void test_goods_row_short_folds_segments(void **state)
{
    static const int64_t shares[] = {3, 3, 2, 2}, counts[] = {4};
    (void)state;

    for (int pipeline = 0; pipeline <= 1; pipeline++) {
        int64_t goods = 6121 + pipeline;
        lines l;

        reset_goods(goods, 10);
        cut_into_segments(goods, 4, shares);
        lines_init(&l, counts, NULL, 1);
        assert_int_equal(run_sale(pipeline, goods, SALE_FROM_GOODS, 0, &l, 10), SALE_DONE);
        expect_answer(&l.out[0], 200, "deducted", "\"remaining\":6");
        db_stock_report r = report_of(goods);
        assert_int_equal(r.stock, 6);
        assert_int_equal(r.sold, 4);
        lines_free(&l);
    }
}

/* A segment that does not cover the count is SALE_SHORT: no answer, nothing written; one that
 * does sells, and the answer names the goods' whole stock left. */
static void test_segment_short_then_sold(void **state)
{
    static const int64_t shares[] = {1, 1, 1, 1}, two[] = {2}, one[] = {1};
    const int64_t goods = 6131;
    lines l;

    (void)state;
    reset_goods(goods, 4);
    cut_into_segments(goods, 4, shares);
    lines_init(&l, two, NULL, 1);
    assert_int_equal(run_sale(false, goods, SALE_FROM_SEGMENT, 0, &l, 10), SALE_SHORT);
    assert_int_equal(l.out[0].status, 0);
    assert_null(l.out[0].body);
    assert_int_equal(report_of(goods).stock, 4);

    lines_init(&l, one, NULL, 1);
    assert_int_equal(run_sale(false, goods, SALE_FROM_SEGMENT, 2, &l, 10), SALE_DONE);
    expect_answer(&l.out[0], 200, "deducted", "\"remaining\":3");
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 3);
    assert_int_equal(r.sold, 1);
    lines_free(&l);
}

/* A holding whose token is older than one the row has seen sells nothing: 503 lock_lost. */
static void test_stale_token_sells_nothing(void **state)
{
    static const int64_t counts[] = {1, 1};
    (void)state;

    for (int pipeline = 0; pipeline <= 1; pipeline++) {
        int64_t goods = 6141 + pipeline;
        lines l;

        reset_goods(goods, 10);
        lines_init(&l, counts, NULL, 1);
        assert_int_equal(run_sale(pipeline, goods, SALE_FROM_GOODS, 0, &l, 50), SALE_DONE);
        expect_answer(&l.out[0], 200, "deducted", "\"remaining\":9");
        lines_free(&l);
        lines_init(&l, counts, NULL, 2);
        assert_int_equal(run_sale(pipeline, goods, SALE_FROM_GOODS, 0, &l, 40), SALE_DONE);
        expect_answer(&l.out[0], 503, "lock_lost", NULL);
        expect_answer(&l.out[1], 503, "lock_lost", NULL);
        assert_int_equal(report_of(goods).stock, 9);
        lines_free(&l);
    }
}

/* ---- when the guard is given back ---- */

/* When timed_mode's guard was left (clock_now_ns), 0 while it was not. */
static _Atomic int64_t g_left_ns;

#define RELEASE_MS 20 /* how long timed_mode's leave takes, as a release's round trip would */

static void timed_leave(guard_env *env, guard_hold *hold)
{
    atomic_store(&g_left_ns, clock_now_ns());
    clock_sleep_ms(RELEASE_MS);
    guard_none_leave(env, hold);
}

/* scripted_mode whose leave says when it ran. */
static const mode timed_mode = {.name = "timed",
                                .safe = true,
                                .summary = "scripted, its leave timed",
                                .enter = NULL,
                                .still_held = scripted_still_held,
                                .leave = timed_leave};

#define SLOW_COMMIT_MS 500 /* the trigger's pg_sleep(0.5) below */

/*
 * The sale in two round trips gives its guard back once COMMIT is sent, not once COMMIT is
 * answered (sale.h, "leave_after_commit"): what lets the next holder's hand-off overlap this
 * commit. Shown with a COMMIT made slow on purpose: a deferred constraint trigger on the
 * case's goods' orders sleeps SLOW_COMMIT_MS inside COMMIT. The guard is left at least most
 * of that before sale_run returns, the sale answers 200 and sells; statement by statement,
 * or when the caller asks for leave_after_commit, the sale leaves nothing (its caller does,
 * after the answer). The read that makes the early release safe (the claim's row lock) is
 * tests/db/test_fence.c's. The sale's clock (sale.stage_ns) puts the slow COMMIT in its
 * commit stage, and a release made while COMMIT travels in the release stage alone: the
 * stages never count a moment twice.
 */
static void test_guard_left_as_commit_is_sent(void **state)
{
    static const int64_t counts[] = {1};
    static const struct {
        bool pipeline, leave_after_commit, left_early;
    } runs[] = {{true, false, true}, {false, false, false}, {true, true, false}};
    const int64_t goods0 = 6151;

    (void)state;
    g_holder_conn = PQconnectdb(g_conninfo);
    assert_int_equal(PQstatus(g_holder_conn), CONNECTION_OK);
    holder_conn_exec("CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ "
                     "BEGIN IF NEW.goods BETWEEN 6151 AND 6153 THEN PERFORM pg_sleep(0.5); "
                     "END IF; RETURN NULL; END $$");
    holder_conn_exec("CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON orders "
                     "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()");
    for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
        int64_t goods = goods0 + (int64_t)i, start, end, left_ns;
        bool left = false;
        lines l;

        reset_goods(goods, 10);
        lines_init(&l, counts, NULL, 1);
        atomic_store(&g_left_ns, 0);
        start = clock_now_ns();
        assert_int_equal(run_sale_in(&timed_mode, runs[i].pipeline, runs[i].leave_after_commit,
                                     goods, SALE_FROM_GOODS, 0, &l, 60, &left),
                         SALE_DONE);
        end = clock_now_ns();
        left_ns = atomic_load(&g_left_ns);
        expect_answer(&l.out[0], 200, "deducted", "\"remaining\":9");
        assert_int_equal(report_of(goods).stock, 9);
        /* The sale waited for the slow COMMIT in every run. */
        assert_true(end - start >= (SLOW_COMMIT_MS - 50) * 1000000LL);
        assert_int_equal(left, runs[i].left_early);
        if (runs[i].left_early) {
            assert_true(left_ns > start);
            printf("    two round trips: the guard left %.1f ms before the sale returned "
                   "(COMMIT slowed by %d ms)\n",
                   (double)(end - left_ns) / 1e6, SLOW_COMMIT_MS);
            assert_true(end - left_ns >= (SLOW_COMMIT_MS - 100) * 1000000LL);
        } else {
            assert_int_equal(left_ns, 0); /* the caller leaves, after the answer */
        }
        assert_true(g_stage_ns[DEDUCT_STAGE_COMMIT] >= (SLOW_COMMIT_MS - 100) * 1000000LL);
        assert_true(g_stage_ns[DEDUCT_STAGE_CLAIM] > 0);
        assert_true(g_stage_ns[DEDUCT_STAGE_CLAIM] < SLOW_COMMIT_MS / 2 * 1000000LL);
        if (runs[i].left_early)
            assert_true(g_stage_ns[DEDUCT_STAGE_RELEASE] >= RELEASE_MS * 1000000LL);
        else
            assert_int_equal(g_stage_ns[DEDUCT_STAGE_RELEASE], 0);
        assert_true(g_stage_ns[DEDUCT_STAGE_CLAIM] + g_stage_ns[DEDUCT_STAGE_COMMIT] +
                        g_stage_ns[DEDUCT_STAGE_RELEASE] <=
                    end - start);
        lines_free(&l);
    }
    holder_conn_exec("DROP TRIGGER slow_commit ON orders");
    holder_conn_exec("DROP FUNCTION slow_commit()");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines_in_arrival_order),
        cmocka_unit_test(test_keys_twins_and_replays),
        cmocka_unit_test(test_unknown_goods),
        cmocka_unit_test(test_goods_row_short_folds_segments),
        cmocka_unit_test(test_segment_short_then_sold),
        cmocka_unit_test(test_stale_token_sells_nothing),
        cmocka_unit_test_teardown(test_guard_left_as_commit_is_sent, holder_conn_teardown),
    };
    return deduct_test_main("test_sale", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
