/*
 * test_interleavings.c - two lock holders of one goods, in every order of their steps: the
 * older holder's R W C with the newer holder's R W C (20 interleavings), for the fenced
 * scripted guard and for the PostgreSQL rungs; the five steps named; pg-optimistic's and
 * pg-serializable's retries (out of retries; the Idempotency-Key kept across a retry).
 *
 * The holders, the scripted guard, the database: tests/deduct/deduct_support.h.
 */
#include "tests/deduct/deduct_support.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/sale/batch.h"

/* ---- one interleaving ----------------------------------------------------------------- */

/*
 * Runs the interleaving `plan` (6 letters, 'O' or 'N': whose next step to start) on goods
 * `goods` with stock 10 in mode m and checks the books. The older holder has token 10, the
 * newer 11 (scripted_mode hands them out; the PostgreSQL rungs take none). Writes what
 * happened into `trace`; returns how many of the two sold.
 */
static int run_interleaving(const char *plan, int64_t goods, const mode *m, char *trace,
                            size_t trace_len)
{
    holder *hs[2];
    bool in_flight[2] = {false, false};
    int next_step[2] = {0, 0};
    size_t used = 0;
    int64_t start = now_ms();
    int i, ok_count = 0;

    reset_goods(goods, 10);
    hs[0] = holder_start(0, 'O', 10, goods, m);
    hs[1] = holder_start(1, 'N', 11, goods, m);
    /* Both wait at their first gate, with their guard entered and a transaction open. */
    assert_true(holder_settle(hs[0], STEP_LIMIT_MS));
    assert_true(holder_settle(hs[1], STEP_LIMIT_MS));

    /* Walk the plan: start the planned holder's next step; a holder whose step is still in
     * flight (waiting in PostgreSQL) cannot start another, so its planned steps wait until
     * it settles, and the other holder's steps go first. */
    char pending[STEPS * 2 + 1];
    snprintf(pending, sizeof(pending), "%s", plan);
    while (pending[0] != '\0') {
        size_t k;
        int who = -1;

        assert_true(now_ms() - start < 4 * STEP_LIMIT_MS);
        for (i = 0; i < 2; i++)
            if (in_flight[i] && holder_settle(hs[i], 0))
                in_flight[i] = false;
        for (k = 0; pending[k] != '\0'; k++) {
            int w = pending[k] == 'O' ? 0 : 1;
            if (!in_flight[w] || holder_finished(hs[w])) {
                who = w;
                break;
            }
        }
        if (who < 0) {
            /* Both in flight: one must end (the database cannot block both for ever; the
             * check at the top of the loop fails the case if it does). */
            holder_settle(hs[0], 50);
            holder_settle(hs[1], 50);
            continue;
        }
        memmove(&pending[k], &pending[k + 1], strlen(&pending[k + 1]) + 1);
        if (holder_finished(hs[who]))
            continue; /* it ended early (refused): its remaining steps are void */
        in_flight[who] = !holder_step(hs[who], STEP_SETTLE_MS);
        used += (size_t)snprintf(trace + used, trace_len - used, "%c.%c%s ", hs[who]->name,
                                 step_names[next_step[who]], in_flight[who] ? "(waits)" : "");
        next_step[who]++;
        if (used >= trace_len)
            used = trace_len - 1;
    }
    holder_finish(0);
    holder_finish(1);

    for (i = 0; i < 2; i++) {
        holder *h = hs[i];
        assert_int_equal(h->rc, 0);
        used += (size_t)snprintf(trace + used, trace_len - used, "| %c(%lld): %d %s ", h->name,
                                 (long long)h->token, h->res.status,
                                 deduct_outcome_name(h->res.outcome));
        if (used >= trace_len)
            used = trace_len - 1;
        if (h->res.retries > 0) {
            used += (size_t)snprintf(trace + used, trace_len - used, "after %d retr%s ",
                                     h->res.retries, h->res.retries == 1 ? "y" : "ies");
            if (used >= trace_len)
                used = trace_len - 1;
        }
        if (h->res.status == 200)
            ok_count++;
        else if (h->res.status != 503 ||
                 (h->res.outcome != DEDUCT_LOCK_LOST && h->res.outcome != DEDUCT_CONFLICT))
            fail_msg("%s: holder %c answered %d %s (%s), want 200, or 503 lock_lost or conflict",
                     plan, h->name, h->res.status, deduct_outcome_name(h->res.outcome),
                     h->res.detail);
        free(h->res.body);
        h->res.body = NULL;
    }

    db_stock_report r = report_of(goods);
    int64_t oversold = r.sold - (r.initial - r.stock);
    printf("    %s: %s| stock %lld, sold %lld, oversold %lld\n", plan, trace, (long long)r.stock,
           (long long)r.sold, (long long)oversold);
    if (oversold != 0)
        fail_msg("%s: oversold %lld (stock %lld, sold %lld): the two holders' sections overlapped "
                 "and both sold from the same read",
                 plan, (long long)oversold, (long long)r.stock, (long long)r.sold);
    assert_int_equal(r.orders, ok_count);
    assert_int_equal(r.sold, ok_count);
    return ok_count;
}

/* Every interleaving of the older holder's R W C with the newer holder's R W C. */
static void test_two_holders_every_interleaving(void **state)
{
    int mask, n = 0;
    char trace[512];

    (void)state;
    for (mask = 0; mask < (1 << (2 * STEPS)); mask++) {
        char plan[2 * STEPS + 1];
        int bit, olders = 0;

        for (bit = 0; bit < 2 * STEPS; bit++) {
            plan[bit] = (mask >> bit) & 1 ? 'O' : 'N';
            olders += (mask >> bit) & 1;
        }
        plan[2 * STEPS] = '\0';
        if (olders != STEPS)
            continue;
        run_interleaving(plan, 1000 + n, &scripted_mode, trace, sizeof(trace));
        n++;
    }
    assert_int_equal(n, 20);
}

/*
 * The five steps, named: the older holder reads, the newer one reads (its lock was
 * granted after the older one's vanished), the older writes and commits, then the newer
 * writes and commits. With the token checked only at the write, both sold from the same
 * stock. The claim makes the newer read wait for the older commit, and then read its result.
 */
static void test_the_five_steps(void **state)
{
    char trace[512];

    (void)state;
    run_interleaving("ONOONN", 2000, &scripted_mode, trace, sizeof(trace));
    assert_non_null(strstr(trace, "N.R(waits)"));
}

/*
 * The PostgreSQL rungs, with no guard at all, in every interleaving of two deductions' R W C:
 * the database keeps them apart by itself. Both sell (stock 10 is enough for two, and there
 * is no lock to lose), and neither sells from the other's stale read. In the five steps'
 * order the second read must wait for the first commit (the row lock of FOR UPDATE or of
 * the conditional UPDATE, or the advisory lock).
 */
static void test_pg_rungs_every_interleaving(void **state)
{
    const char *names[] = {"pg-for-update", "pg-atomic", "pg-advisory"};
    char trace[512];

    (void)state;
    for (int r = 0; r < 3; r++) {
        const mode *m = modes_find(names[r]);
        int n = 0;

        assert_non_null(m);
        printf("  %s:\n", names[r]);
        for (int mask = 0; mask < (1 << (2 * STEPS)); mask++) {
            char plan[2 * STEPS + 1];
            int olders = 0;

            for (int bit = 0; bit < 2 * STEPS; bit++) {
                plan[bit] = (mask >> bit) & 1 ? 'O' : 'N';
                olders += (mask >> bit) & 1;
            }
            plan[2 * STEPS] = '\0';
            if (olders != STEPS)
                continue;
            if (run_interleaving(plan, 3000 + 100 * r + n, m, trace, sizeof(trace)) != 2)
                fail_msg("%s %s: not both sold: %s", names[r], plan, trace);
            n++;
        }
        assert_int_equal(n, 20);
        run_interleaving("ONOONN", 3090 + 100 * r, m, trace, sizeof(trace));
        if (strstr(trace, "N.R(waits)") == NULL)
            fail_msg("%s ONOONN: the second read did not wait for the first commit: %s", names[r],
                     trace);
    }
}

/*
 * A rung whose read takes no lock and whose lost race is run again (pg-optimistic: the version
 * moved on; pg-serializable: PostgreSQL's 40001), in every interleaving: both sell, from two
 * different stocks. In the five steps' order the second read does not wait: the second write
 * is refused, and that holder's transaction runs again (a retry), reads what the first
 * committed, and sells from it. Goods goods..goods+19 and goods+90.
 */
static void retrying_every_interleaving(const char *name, int64_t goods)
{
    const mode *m = modes_find(name);
    char trace[512];
    int n = 0;

    assert_non_null(m);
    for (int mask = 0; mask < (1 << (2 * STEPS)); mask++) {
        char plan[2 * STEPS + 1];
        int olders = 0;

        for (int bit = 0; bit < 2 * STEPS; bit++) {
            plan[bit] = (mask >> bit) & 1 ? 'O' : 'N';
            olders += (mask >> bit) & 1;
        }
        plan[2 * STEPS] = '\0';
        if (olders != STEPS)
            continue;
        if (run_interleaving(plan, goods + n, m, trace, sizeof(trace)) != 2)
            fail_msg("%s %s: not both sold: %s", name, plan, trace);
        n++;
    }
    assert_int_equal(n, 20);
    run_interleaving("ONOONN", goods + 90, m, trace, sizeof(trace));
    if (strstr(trace, "N.R(waits)") != NULL ||
        strstr(trace, "N(11): 200 deducted after 1 retry") == NULL)
        fail_msg("%s ONOONN: want the second read not to wait and the second holder to sell "
                 "after exactly one retry: %s",
                 name, trace);
}

static void test_pg_optimistic_every_interleaving(void **state)
{
    (void)state;
    retrying_every_interleaving("pg-optimistic", 5000);
}

static void test_pg_serializable_every_interleaving(void **state)
{
    (void)state;
    retrying_every_interleaving("pg-serializable", 3300);
}

/* With no retries allowed, the holder that lost the race answers 503 conflict and sells
 * nothing: the books still balance. Goods `goods`. */
static void retrying_out_of_retries(const char *name, int64_t goods)
{
    const mode *m = modes_find(name);
    char trace[512];

    g_optimistic_retries = 0;
    int sold = run_interleaving("ONOONN", goods, m, trace, sizeof(trace));
    g_optimistic_retries = 16;
    if (sold != 1 || strstr(trace, "N(11): 503 conflict") == NULL)
        fail_msg("%s ONOONN without retries: want the second holder to answer 503 conflict: %s",
                 name, trace);
}

static void test_pg_optimistic_out_of_retries(void **state)
{
    (void)state;
    retrying_out_of_retries("pg-optimistic", 5095);
}

static void test_pg_serializable_out_of_retries(void **state)
{
    (void)state;
    retrying_out_of_retries("pg-serializable", 3395);
}

/*
 * A retry keeps the Idempotency-Key's promise. A (key K) claims K and reads; its twin B (the
 * same key) waits behind A's claim; C (no key) sells and commits, so A's write loses the
 * race. A's transaction rolls back, its claim with it, and A runs again. Then one of two:
 *   - B's claim goes through first, B reads and stops before its write; A's second run
 *     claims K again and waits behind B. B sells and commits; A's claim then finds B's
 *     answer and replays it;
 *   - A's second run claims K first: B waited on A's first transaction, not in a queue for
 *     the row, so when that transaction ends B's backend still has to run to take K, and a
 *     busy machine has let A's new transaction in before it. A sells and commits; B's claim
 *     then finds A's answer and replays it.
 * K sold once, whatever the retry and whichever order.
 */
static void test_pg_optimistic_retry_keeps_the_key(void **state)
{
    const mode *m = modes_find("pg-optimistic");
    const int64_t goods = 5096;

    (void)state;
    reset_goods(goods, 10);
    holder *a = holder_start_keyed(0, 'A', 0, goods, m, "same-key");
    assert_true(holder_settle(a, STEP_LIMIT_MS));
    assert_true(holder_step(a, STEP_LIMIT_MS)); /* A claimed K and read */

    holder *b = holder_start_keyed(1, 'B', 0, goods, m, "same-key");
    assert_true(holder_settle(b, STEP_LIMIT_MS));
    assert_false(holder_step(b, STEP_SETTLE_MS));   /* B's claim of K waits for A */
    assert_true(lock_waiter_within(STEP_LIMIT_MS)); /* in PostgreSQL's queue, not on its way */

    holder *c = holder_start_keyed(2, 'C', 0, goods, m, NULL);
    holder_finish(2); /* C sells: the version moves on */
    assert_int_equal(c->res.status, 200);

    /* A writes, loses, rolls back and runs again. Whoever claims K first, B (which then
     * reads and stops before its write) or A's second run (which reads and writes, and stops
     * before its commit), the other waits behind it: the first step to end says which. */
    bool a_first = holder_step(a, STEP_SETTLE_MS), b_first = false;
    for (int64_t waited = 0; !a_first && !b_first && waited < STEP_LIMIT_MS; waited += 50) {
        b_first = holder_settle(b, 50);
        a_first = !b_first && holder_settle(a, 0);
    }
    assert_true(a_first || b_first);
    holder *seller = a_first ? a : b, *replayer = a_first ? b : a;
    if (b_first) {
        assert_true(holder_step(b, STEP_LIMIT_MS)); /* B writes */
        holder_finish(1);                           /* B commits */
        holder_finish(0);                           /* A finds B's answer */
    } else {
        holder_finish(0); /* A commits */
        holder_finish(1); /* B finds A's answer */
    }

    printf("    A: %d %s after %d retr%s; B: %d %s; C: %d %s\n", a->res.status,
           deduct_outcome_name(a->res.outcome), a->res.retries, a->res.retries == 1 ? "y" : "ies",
           b->res.status, deduct_outcome_name(b->res.outcome), c->res.status,
           deduct_outcome_name(c->res.outcome));
    assert_int_equal(a->res.retries, 1);
    assert_int_equal(seller->res.status, 200);
    assert_string_equal(deduct_outcome_name(seller->res.outcome), "deducted");
    assert_int_equal(replayer->res.status, 200);
    assert_string_equal(deduct_outcome_name(replayer->res.outcome), "replayed");
    assert_string_equal(a->res.body, b->res.body);
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 8);
    assert_int_equal(r.sold, 2);
    assert_int_equal(r.orders, 2);
    for (int i = 0; i < 3; i++) {
        free(g_holders[i].res.body);
        g_holders[i].res.body = NULL;
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_the_five_steps, holders_finish),
        cmocka_unit_test_teardown(test_two_holders_every_interleaving, holders_finish),
        cmocka_unit_test_teardown(test_pg_rungs_every_interleaving, holders_finish),
        cmocka_unit_test_teardown(test_pg_optimistic_every_interleaving, holders_finish),
        cmocka_unit_test_teardown(test_pg_optimistic_out_of_retries, holders_finish),
        cmocka_unit_test_teardown(test_pg_optimistic_retry_keeps_the_key, holders_finish),
        cmocka_unit_test_teardown(test_pg_serializable_every_interleaving, holders_finish),
        cmocka_unit_test_teardown(test_pg_serializable_out_of_retries, holders_finish),
    };

    return deduct_test_main("test_interleavings", tests, sizeof(tests) / sizeof(tests[0]), argc,
                            argv);
}
