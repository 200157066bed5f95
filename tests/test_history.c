/* test_history.c - the history checker's pure parts: the loader's validation (with line
 * numbers), the models' steps, the search on tiny histories, the unexplained window, and the
 * search's cost on a generated load history. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "history/group.h"
#include "history/history.h"
#include "history/model.h"
#include "history/search.h"
#include "history/window.h"

#define RESET2                                                                                     \
    "{\"process\":0,\"type\":\"invoke\",\"f\":\"reset\",\"goods_id\":1,\"stock\":2,\"time\":0}\n"  \
    "{\"process\":0,\"type\":\"ok\",\"f\":\"reset\",\"goods_id\":1,\"time\":1}\n"
#define INV(p, t)                                                                                  \
    "{\"process\":" #p                                                                             \
    ",\"type\":\"invoke\",\"f\":\"deduct\",\"goods_id\":1,\"count\":1,\"time\":" #t "}\n"
#define OK(p, t, r)                                                                                \
    "{\"process\":" #p ",\"type\":\"ok\",\"f\":\"deduct\",\"goods_id\":1,\"remaining\":" #r        \
    ",\"order_id\":" #t ",\"time\":" #t "}\n"
/* A sale's completion of type T, its fields E (each after a comma), no others. */
#define DONE(p, t, T, E)                                                                           \
    "{\"process\":" #p ",\"time\":" #t ",\"type\":\"" T "\""                                       \
    ",\"f\":\"deduct\",\"goods_id\":1" E "}\n"

static enum hist_verdict check(const char *text, enum hist_model_kind kind)
{
    struct history h;
    struct hist_error err;
    assert_int_equal(history_load_string(text, "t", kind, &h, &err), 0);
    const struct hist_model *m = hist_model(kind);
    struct hist_search_result r;
    assert_int_equal(hist_search(m, false, 1, h.ops, h.n, NULL, &r), 0);
    history_free(&h);
    return r.verdict;
}

static void expect_malformed(const char *text, long line, const char *why)
{
    struct history h;
    struct hist_error err;
    assert_int_equal(history_load_string(text, "t", HIST_MODEL_STOCK, &h, &err), -1);
    assert_int_equal(err.line, line);
    assert_non_null(strstr(err.why, why));
}

static void test_malformed_lines(void **state)
{
    (void)state;
    expect_malformed(
        RESET2 "{\"type\":\"invoke\",\"f\":\"deduct\",\"goods_id\":1,\"count\":1,\"time\":1}\n", 3,
        "missing \"process\"");
    expect_malformed(RESET2 OK(1, 5, 1), 3, "no operation open");
    expect_malformed(RESET2 INV(1, 5) INV(1, 6), 4, "invokes while its operation of line 3");
    expect_malformed(RESET2 INV(1, 5) OK(1, 4, 1), 4, "before its invocation");
    expect_malformed(RESET2
                     "{\"process\":1,\"type\":\"x\",\"f\":\"deduct\",\"goods_id\":1,\"time\":1}\n",
                     3, "\"type\" must be");
    expect_malformed(RESET2 "not json\n", 3, "not JSON");
    expect_malformed(INV(1, 5) OK(1, 6, 1), 1, "neither an ok reset nor an ok read");
    /* HISTORY.md's fields by answer: an ok names its order, an info why it is unknown, and a
     * fail never says the sale may have happened. */
    expect_malformed(RESET2 INV(1, 5) DONE(1, 6, "ok", ",\"remaining\":1"), 4,
                     "missing \"order_id\"");
    expect_malformed(RESET2 INV(1, 5) DONE(1, 6, "ok", ",\"remaining\":1,\"order_id\":\"7\""), 4,
                     "\"order_id\" must be an integer");
    expect_malformed(RESET2 INV(1, 5) DONE(1, 6, "info", ""), 4, "an info needs \"error\"");
    expect_malformed(RESET2 INV(1, 5) DONE(1, 6, "info", ",\"error\":5"), 4,
                     "\"error\" must be a string");
    expect_malformed(RESET2 INV(1, 5) DONE(1, 6, "fail", ",\"error\":\"commit_unknown\""), 4,
                     "\"commit_unknown\" that it may have been: an info");
    expect_malformed(RESET2 INV(1, 5) DONE(1, 6, "fail", ",\"error\":\"timeout\""), 4, "an info");
}

/* One step of m from the slot [lo, hi] (the stock) or value lo (the register): whether it is
 * legal, and the slot after it in out. */
static bool step1(const struct hist_model *m, int64_t lo, int64_t hi, const struct hist_op *op,
                  int64_t out[2])
{
    out[0] = lo;
    out[1] = hi;
    return m->step(out, op);
}

static void test_stock_steps(void **state)
{
    (void)state;
    const struct hist_model *m = hist_model(HIST_MODEL_STOCK);
    struct hist_op op = {.f = HIST_F_DEDUCT, .outcome = HIST_OK, .a = 1, .b = 4};
    int64_t s[2];
    assert_true(step1(m, 5, 5, &op, s));
    assert_int_equal(s[0], 4);
    assert_int_equal(s[1], 4);
    assert_false(step1(m, 6, 6, &op, s));
    op.outcome = HIST_SOLD_OUT;
    assert_true(step1(m, 0, 0, &op, s));
    assert_false(step1(m, 1, 1, &op, s));
    op.outcome = HIST_UNKNOWN;
    assert_true(step1(m, 3, 3, &op, s));
    assert_int_equal(s[0], 2);
    assert_false(step1(m, 0, 0, &op, s));
    struct hist_op rd = {.f = HIST_F_READ, .outcome = HIST_OK, .a = 7};
    assert_false(step1(m, 6, 6, &rd, s));
    /* The start: one stock not yet said, which a read pins. */
    int64_t start[2];
    m->start(start, false);
    assert_true(step1(m, start[0], start[1], &rd, s));
    assert_int_equal(s[0], 7);
    assert_int_equal(s[1], 7);
    /* A sold_out of 2 from the start leaves 0 or 1: a sale told 5 after it is illegal. */
    op = (struct hist_op){.f = HIST_F_DEDUCT, .outcome = HIST_SOLD_OUT, .a = 2};
    assert_true(step1(m, start[0], start[1], &op, s));
    assert_int_equal(s[0], 0);
    assert_int_equal(s[1], 1);
    struct hist_op sale = {.f = HIST_F_DEDUCT, .outcome = HIST_OK, .a = 1, .b = 5};
    assert_false(step1(m, s[0], s[1], &sale, s));
    /* A lost sale of 3 from [2, 10]: the stock was 3 to 10, and is 0 to 7. */
    op = (struct hist_op){.f = HIST_F_DEDUCT, .outcome = HIST_UNKNOWN, .a = 3};
    assert_true(step1(m, 2, 10, &op, s));
    assert_int_equal(s[0], 0);
    assert_int_equal(s[1], 7);
}

static void test_register_steps(void **state)
{
    (void)state;
    const struct hist_model *m = hist_model(HIST_MODEL_REGISTER);
    int64_t v;
    m->start(&v, false);
    assert_int_equal(v, 0);
    struct hist_op cas = {.f = HIST_F_CAS, .outcome = HIST_OK, .a = 1, .b = 2};
    v = 1;
    assert_true(m->step(&v, &cas));
    assert_int_equal(v, 2);
    v = 0;
    assert_false(m->step(&v, &cas));
    assert_int_equal(
        check("{\"process\":0,\"type\":\"invoke\",\"f\":\"read\",\"time\":0}\n"
              "{\"process\":0,\"type\":\"ok\",\"f\":\"read\",\"value\":1,\"time\":1}\n",
              HIST_MODEL_REGISTER),
        HIST_NO);
    /* A read whose answer was not recorded constrains nothing. */
    assert_int_equal(
        check("{\"process\":0,\"type\":\"invoke\",\"f\":\"read\",\"time\":0}\n"
              "{\"process\":0,\"type\":\"ok\",\"f\":\"read\",\"value\":null,\"time\":1}\n",
              HIST_MODEL_REGISTER),
        HIST_YES);
}

static void test_search_tiny(void **state)
{
    (void)state;
    /* Overlapping: either order; the answers fix it. */
    assert_int_equal(
        check(RESET2 INV(1, 10) INV(2, 11) OK(1, 20, 0) OK(2, 21, 1), HIST_MODEL_STOCK), HIST_YES);
    /* One after the other: the order is fixed, and the answers contradict it. */
    assert_int_equal(
        check(RESET2 INV(1, 10) OK(1, 11, 0) INV(2, 12) OK(2, 13, 1), HIST_MODEL_STOCK), HIST_NO);
    /* Two sales told the same remaining. */
    assert_int_equal(
        check(RESET2 INV(1, 10) INV(2, 11) OK(1, 20, 1) OK(2, 21, 1), HIST_MODEL_STOCK), HIST_NO);
    /* A sale with no answer may explain the gap, once. */
    assert_int_equal(check(RESET2 INV(1, 10) INV(2, 12) OK(2, 13, 0), HIST_MODEL_STOCK), HIST_YES);
    assert_int_equal(
        check(
            RESET2 INV(1, 10) INV(2, 12) OK(
                2, 13,
                0) "{\"process\":3,\"type\":\"invoke\",\"f\":\"read\",\"goods_id\":1,\"time\":14}\n"
                   "{\"process\":3,\"type\":\"ok\",\"f\":\"read\",\"goods_id\":1,\"stock\":1,"
                   "\"time\":15}\n",
            HIST_MODEL_STOCK),
        HIST_NO);
}

/* The units model: the told `remaining` is not judged, every unit still is. */
static void test_units_model(void **state)
{
    (void)state;
    /* Two overlapping sales told the same remaining: no for the stock, yes for the units. */
    assert_int_equal(
        check(RESET2 INV(1, 10) INV(2, 11) OK(1, 20, 1) OK(2, 21, 1), HIST_MODEL_STOCK), HIST_NO);
    assert_int_equal(
        check(RESET2 INV(1, 10) INV(2, 11) OK(1, 20, 1) OK(2, 21, 1), HIST_MODEL_UNITS), HIST_YES);
    /* Three sales of a stock of two: no model explains the third unit. */
    assert_int_equal(check(RESET2 INV(1, 10) INV(2, 11) INV(3, 12) OK(1, 20, 1) OK(2, 21, 1)
                               OK(3, 22, 0),
                           HIST_MODEL_UNITS),
                     HIST_NO);
    /* A sold_out while a unit was certainly left (both sales came after it) is no. */
    assert_int_equal(check(RESET2 "{\"process\":3,\"type\":\"invoke\",\"f\":\"deduct\",\"goods_"
                                  "id\":1,\"count\":1,\"time\":2}\n"
                                  "{\"process\":3,\"type\":\"fail\",\"f\":\"deduct\",\"goods_id\":"
                                  "1,\"error\":\"sold_out\",\"time\":3}\n" INV(1, 10) OK(1, 11, 1),
                           HIST_MODEL_UNITS),
                     HIST_NO);
    /* A read still needs the exact stock: after both sales, 0, whatever they told. */
    assert_int_equal(
        check(
            RESET2 INV(1, 10) INV(2, 11) OK(1, 20, 1) OK(
                2, 21,
                1) "{\"process\":3,\"type\":\"invoke\",\"f\":\"read\",\"goods_id\":1,\"time\":30}\n"
                   "{\"process\":3,\"type\":\"ok\",\"f\":\"read\",\"goods_id\":1,\"stock\":1,"
                   "\"time\":31}\n",
            HIST_MODEL_UNITS),
        HIST_NO);
}

static void test_window(void **state)
{
    (void)state;
    /* Legal sales, then two told the same remaining: the window is those two. */
    const char *text =
        "{\"process\":0,\"type\":\"invoke\",\"f\":\"reset\",\"goods_id\":1,\"stock\":9,\"time\":0}"
        "\n"
        "{\"process\":0,\"type\":\"ok\",\"f\":\"reset\",\"goods_id\":1,\"time\":1}\n" INV(1, 10)
            OK(1, 11, 8) INV(1, 12) OK(1, 13, 7) INV(1, 14) OK(1, 15, 6) INV(1, 20) INV(2, 21)
                OK(1, 30, 5) OK(2, 31, 5) INV(1, 40) OK(1, 41, 4);
    struct history h;
    struct hist_error err;
    assert_int_equal(history_load_string(text, "t", HIST_MODEL_STOCK, &h, &err), 0);
    const struct hist_model *m = hist_model(HIST_MODEL_STOCK);
    struct hist_search_result r;
    assert_int_equal(hist_search(m, false, 1, h.ops, h.n, NULL, &r), 0);
    assert_int_equal(r.verdict, HIST_NO);
    struct hist_window w;
    assert_int_equal(hist_find_window(m, 1, h.ops, h.n, r.fail_op, NULL, &w), 0);
    assert_true(w.proven);
    assert_int_equal(w.hi - w.lo + 1, 2);
    assert_int_equal(h.ops[w.lo].call, 20);
    assert_int_equal(h.ops[w.hi].call, 21);
    history_free(&h);
}

/* The search bound: a state budget met says so instead of an answer. */
static void test_bound(void **state)
{
    (void)state;
    struct history h;
    struct hist_error err;
    assert_int_equal(history_load_string(RESET2 INV(1, 10) OK(1, 11, 1) INV(1, 12) OK(1, 13, 0),
                                         "t", HIST_MODEL_STOCK, &h, &err),
                     0);
    const struct hist_model *m = hist_model(HIST_MODEL_STOCK);
    struct hist_search_limits lim = {2, 0};
    struct hist_search_result r;
    assert_int_equal(hist_search(m, false, 1, h.ops, h.n, &lim, &r), 0);
    assert_int_equal(r.verdict, HIST_BOUND_STATES);
    history_free(&h);
}

/* A load-like history built in memory: 64 processes, 30000 sales of 1 each taking effect in
 * call order within overlapping intervals, 1% unanswered. It must be linearizable, and the
 * search must not wander: about one memoized state per operation. */
static void test_load_cost(void **state)
{
    (void)state;
    size_t n = 30000;
    struct hist_op *ops = calloc(n + 1, sizeof *ops);
    assert_non_null(ops);
    ops[0] = (struct hist_op){.process = 0,
                              .goods = 1,
                              .call = 0,
                              .ret = 1,
                              .f = HIST_F_RESET,
                              .outcome = HIST_OK,
                              .a = (int64_t)n};
    int64_t stock = (int64_t)n;
    for (size_t i = 1; i <= n; i++) {
        struct hist_op *o = &ops[i];
        o->process = (int64_t)(i % 64) + 1;
        o->goods = 1;
        o->call = 10 + (int64_t)i * 10; /* takes effect at call + 5, answers 64 sales later */
        o->ret = o->call + 640;
        o->f = HIST_F_DEDUCT;
        o->a = 1;
        stock--;
        if (i % 100 == 0) {
            o->outcome = HIST_UNKNOWN;
            o->ret = HIST_TIME_INF;
        } else {
            o->outcome = HIST_OK;
            o->b = stock;
        }
    }
    const struct hist_model *m = hist_model(HIST_MODEL_STOCK);
    struct hist_search_result r;
    assert_int_equal(hist_search(m, false, 1, ops, n + 1, NULL, &r), 0);
    assert_int_equal(r.verdict, HIST_YES);
    assert_true(r.states < 3 * n);
    free(ops);
}

/* Ties chain: carts [1,2] and [3,2] put goods 1, 2, 3 in one group; goods 4 stays alone. */
static void test_groups(void **state)
{
    (void)state;
    const char *text =
        "{\"process\":0,\"type\":\"invoke\",\"f\":\"read\",\"goods_id\":4,\"time\":0}\n"
        "{\"process\":0,\"type\":\"ok\",\"f\":\"read\",\"goods_id\":4,\"stock\":1,\"time\":1}\n"
        "{\"process\":1,\"type\":\"invoke\",\"f\":\"read\",\"goods_id\":3,\"time\":0}\n"
        "{\"process\":1,\"type\":\"ok\",\"f\":\"read\",\"goods_id\":3,\"stock\":1,\"time\":1}\n"
        "{\"process\":2,\"type\":\"invoke\",\"f\":\"order\",\"items\":[{\"goods_id\":1,\"count\":1}"
        ","
        "{\"goods_id\":2,\"count\":1}],\"time\":2}\n"
        "{\"process\":3,\"type\":\"invoke\",\"f\":\"order\",\"items\":[{\"goods_id\":3,\"count\":1}"
        ","
        "{\"goods_id\":2,\"count\":1}],\"time\":3}\n"
        "{\"process\":4,\"type\":\"invoke\",\"f\":\"read\",\"goods_id\":1,\"time\":4}\n"
        "{\"process\":4,\"type\":\"ok\",\"f\":\"read\",\"goods_id\":1,\"stock\":0,\"time\":5}\n"
        "{\"process\":5,\"type\":\"invoke\",\"f\":\"read\",\"goods_id\":2,\"time\":4}\n"
        "{\"process\":5,\"type\":\"ok\",\"f\":\"read\",\"goods_id\":2,\"stock\":0,\"time\":5}\n";
    struct history h;
    struct hist_error err;
    assert_int_equal(history_load_string(text, "t", HIST_MODEL_STOCK, &h, &err), 0);
    struct hist_groups gs;
    assert_int_equal(hist_group(&h, &gs), 0);
    assert_int_equal(gs.n, 2);
    assert_int_equal(gs.g[0].nslots, 3);
    assert_int_equal(gs.g[0].goods[0], 1);
    assert_int_equal(gs.g[0].goods[2], 3);
    assert_int_equal(gs.g[0].hi - gs.g[0].lo, 5);
    assert_int_equal(gs.g[1].nslots, 1);
    assert_int_equal(gs.g[1].goods[0], 4);
    /* Every operation's goods at the slot its group gives it. */
    for (size_t i = gs.g[0].lo; i < gs.g[0].hi; i++) {
        const struct hist_op *op = &h.ops[i];
        for (uint32_t k = 0; k < hist_op_width(op); k++)
            assert_int_equal(gs.g[0].goods[hist_op_slot(op, k)],
                             op->f == HIST_F_ORDER ? op->items[k].goods : op->goods);
    }
    /* The two open carts both taken would sell goods 2 twice; one is enough for the reads. */
    const struct hist_model *m = hist_model(HIST_MODEL_STOCK);
    struct hist_search_result r;
    assert_int_equal(hist_search(m, false, gs.g[0].nslots, h.ops + gs.g[0].lo, 5, NULL, &r), 0);
    assert_int_equal(r.verdict, HIST_YES);
    hist_groups_free(&gs);
    history_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_malformed_lines), cmocka_unit_test(test_stock_steps),
        cmocka_unit_test(test_register_steps),  cmocka_unit_test(test_search_tiny),
        cmocka_unit_test(test_units_model),     cmocka_unit_test(test_window),
        cmocka_unit_test(test_bound),           cmocka_unit_test(test_load_cost),
        cmocka_unit_test(test_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
