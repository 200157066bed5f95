/*
 * test_deduct.c - the read-check-write of service/deduct.c against a real PostgreSQL, with
 * two lock holders ordered exactly.
 *
 * The case the fencing token exists for: two requests both believe they hold the lock for
 * the same goods (the older one's lease ran out, or Redis lost the key, while it was inside
 * its section) and both run their read-check-write. Whatever the order of their steps, the
 * books must balance: the later holder reads what the earlier one committed, or one of them
 * is refused (503 lock_lost) and sells nothing.
 *
 * How the order is made exact: each holder runs deduct_execute() in a thread of its own
 * with a scripted mode (its guard hands out a fixed token and never notices a loss, as a
 * holder inside a pause would not) and a deduct_hook that stops the thread at each named
 * point until the driver lets it go on. A holder's steps are R (read), W (write and record
 * the order) and C (commit); the driver walks every interleaving of the older holder's R W C
 * with the newer holder's R W C (20 of them), releasing one step at a time. PostgreSQL may
 * make a step wait (a claim waits for the row lock of a holder that has not committed):
 * such a step is left in flight and the driver goes on with the other holder's steps,
 * which is the only order the database allows.
 *
 * TEST_DATABASE_URL: a server the test may create a database on, as a key=value string
 * (the harness starts a throwaway one); TEST_MIGRATIONS_DIR: the migrations directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/db.h"
#include "lock/lock.h"
#include "service/batch.h"
#include "service/deduct.h"
#include "service/modes.h"
#include "tests/support/redis_server.h"

/* How long a released step may take before the driver calls it "waiting in PostgreSQL". */
#define STEP_SETTLE_MS 250
/* How long anything may take at all before the case fails rather than hangs. */
#define STEP_LIMIT_MS 10000

static const char *migrations_dir;
static char g_dbname[64];
static char *g_base_url;
static char *g_conninfo; /* the test database, for the test's own raw connections */
static db_pool *g_pool;
static guard_env *g_guards; /* the real guards (pg-lockrow needs the pool) */
/* What holder_run's deductions run with; cases that need other values set them first. */
static int64_t g_lock_wait_ms;        /* deduct_env.lock_wait_ms (0: no lock_timeout) */
static int g_optimistic_retries = 16; /* deduct_env.optimistic_retries */

/* ---- the scripted guard: a fixed token per thread, a loss it never notices ------------ */

static _Thread_local int64_t t_token;

static int scripted_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                          size_t detail_len)
{
    (void)env;
    (void)goods_id;
    (void)detail;
    (void)detail_len;
    memset(hold, 0, sizeof(*hold));
    hold->fenced = true;
    hold->fence = t_token;
    hold->fence_source = "test";
    return GUARD_OK;
}

static int scripted_still_held(guard_env *env, const guard_hold *hold)
{
    (void)env;
    (void)hold;
    return GUARD_OK; /* the holder has not found out: its watchdog has not looked yet */
}

static void scripted_leave(guard_env *env, guard_hold *hold)
{
    (void)env;
    (void)hold;
}

static const mode scripted_mode = {.name = "scripted",
                                   .safe = true,
                                   .summary = "a fixed token, a loss never noticed",
                                   .enter = scripted_enter,
                                   .still_held = scripted_still_held,
                                   .leave = scripted_leave};

/* ---- a holder: a thread that stops at each step until told to go on ------------------- */

enum { STEP_R, STEP_W, STEP_C, STEPS };
static const char step_names[STEPS] = {'R', 'W', 'C'};

typedef struct holder {
    char name;     /* 'O' (older token) or 'N' (newer) */
    int64_t token; /* its fencing token */
    int64_t goods;
    const mode *mode; /* scripted_mode, or a PostgreSQL rung of the table */
    const char *key;  /* its Idempotency-Key, or NULL */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int allowed;   /* steps it may start */
    int reached;   /* gates reached: the step after gate i is step i */
    bool finished; /* deduct_execute returned */
    int rc;
    deduct_result res;
} holder;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timespec deadline_in(int64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* The gates: before R (the transaction is open), before W (the stock was read), before C
 * (written and recorded). A step past the last is the commit, which ends at `finished`. */
static int gate_of(deduct_point point)
{
    switch (point) {
    case DEDUCT_AT_BEGUN:
        return STEP_R;
    case DEDUCT_AT_READ:
        return STEP_W;
    case DEDUCT_AT_WRITTEN:
        return STEP_C;
    default:
        return -1;
    }
}

static int holder_at(void *arg, deduct_point point, guard_hold *hold, char *why, size_t why_len)
{
    holder *h = arg;
    int gate = gate_of(point);
    struct timespec limit = deadline_in(STEP_LIMIT_MS);

    (void)hold;
    (void)why;
    (void)why_len;
    if (gate < 0)
        return GUARD_OK;
    pthread_mutex_lock(&h->mu);
    h->reached = gate + 1;
    pthread_cond_broadcast(&h->cv);
    while (h->allowed <= gate) {
        if (pthread_cond_timedwait(&h->cv, &h->mu, &limit) == ETIMEDOUT)
            break; /* the driver failed: go on, so that the case ends and reports */
    }
    pthread_mutex_unlock(&h->mu);
    return GUARD_OK;
}

static void *holder_run(void *arg)
{
    holder *h = arg;
    deduct_env env = {.db = g_pool,
                      .db_wait_ms = 2000,
                      .guards = g_guards,
                      .instance = "test",
                      .lock_wait_ms = g_lock_wait_ms,
                      .optimistic_retries = g_optimistic_retries};
    deduct_hook hook = {holder_at, h, NULL};
    int rc;

    t_token = h->token;
    rc = deduct_execute(&env, h->mode, h->goods, 1, h->key, &hook, &h->res);
    pthread_mutex_lock(&h->mu);
    h->rc = rc;
    h->finished = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Whether the step the holder was last allowed to start has ended: it reached the next
 * gate, or finished. */
static bool step_done(holder *h)
{
    return h->finished || h->reached > h->allowed;
}

/* Lets h start its next step and waits up to wait_ms for it to end. Returns whether it did. */
static bool holder_step(holder *h, int64_t wait_ms)
{
    struct timespec limit = deadline_in(wait_ms);
    bool done;

    pthread_mutex_lock(&h->mu);
    h->allowed++;
    pthread_cond_broadcast(&h->cv);
    while (!step_done(h) && pthread_cond_timedwait(&h->cv, &h->mu, &limit) != ETIMEDOUT)
        ;
    done = step_done(h);
    pthread_mutex_unlock(&h->mu);
    return done;
}

/* Waits up to wait_ms for h's step in flight to end (or for h to reach its first gate). */
static bool holder_settle(holder *h, int64_t wait_ms)
{
    struct timespec limit = deadline_in(wait_ms);
    bool done;

    pthread_mutex_lock(&h->mu);
    while (!step_done(h) && pthread_cond_timedwait(&h->cv, &h->mu, &limit) != ETIMEDOUT)
        ;
    done = step_done(h);
    pthread_mutex_unlock(&h->mu);
    return done;
}

static bool holder_finished(holder *h)
{
    bool f;

    pthread_mutex_lock(&h->mu);
    f = h->finished;
    pthread_mutex_unlock(&h->mu);
    return f;
}

/* The two holders of the case running now. Not on the driver's stack: when an assertion
 * fails, cmocka jumps out of the driver while the threads still run, and the teardown
 * (holders_finish) lets them end and joins them. */
#define MAX_HOLDERS 3
static holder g_holders[MAX_HOLDERS];
static bool g_started[MAX_HOLDERS];

static holder *holder_start_keyed(int i, char name, int64_t token, int64_t goods, const mode *m,
                                  const char *key)
{
    holder *h = &g_holders[i];
    pthread_condattr_t attr;

    memset(h, 0, sizeof(*h));
    h->name = name;
    h->token = token;
    h->goods = goods;
    h->mode = m;
    h->key = key;
    pthread_mutex_init(&h->mu, NULL);
    /* The deadlines are on the monotonic clock (deadline_in). */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cv, &attr);
    pthread_condattr_destroy(&attr);
    assert_int_equal(pthread_create(&h->thread, NULL, holder_run, h), 0);
    g_started[i] = true;
    return h;
}

static holder *holder_start(int i, char name, int64_t token, int64_t goods, const mode *m)
{
    return holder_start_keyed(i, name, token, goods, m, NULL);
}

/* Lets holder i run to its end (the driver is done with it, or failed) and joins it. */
static void holder_finish(int i)
{
    holder *h = &g_holders[i];

    if (!g_started[i])
        return;
    g_started[i] = false;
    pthread_mutex_lock(&h->mu);
    h->allowed = STEPS + 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

static int holders_finish(void **state)
{
    (void)state;
    for (int i = 0; i < MAX_HOLDERS; i++) {
        bool started = g_started[i];
        holder_finish(i);
        if (started)
            free(g_holders[i].res.body);
        g_holders[i].res.body = NULL;
    }
    return 0;
}

/* ---- the database ------------------------------------------------------------------- */

static void reset_goods(int64_t goods, int64_t stock)
{
    db_conn *c = NULL;

    assert_int_equal(db_pool_acquire(g_pool, 2000, &c), DB_OK);
    assert_int_equal(db_goods_reset(c, goods, stock), DB_OK);
    db_pool_release(g_pool, c);
}

static db_stock_report report_of(int64_t goods)
{
    db_stock_report r;
    db_conn *c = NULL;

    assert_int_equal(db_pool_acquire(g_pool, 2000, &c), DB_OK);
    assert_int_equal(db_stock_report_read(c, goods, &r), DB_OK);
    db_pool_release(g_pool, c);
    return r;
}

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
                                 (long long)h->token, h->res.status, h->res.outcome);
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
        else if (h->res.status != 503 || (strcmp(h->res.outcome, "lock_lost") != 0 &&
                                          strcmp(h->res.outcome, "conflict") != 0))
            fail_msg("%s: holder %c answered %d %s (%s), want 200, or 503 lock_lost or conflict",
                     plan, h->name, h->res.status, h->res.outcome ? h->res.outcome : "?",
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
 * pg-optimistic in every interleaving: both sell, from two different stocks. Its read takes
 * no lock, so in the five steps' order the second read does not wait: the second write finds
 * the version moved on, and that holder's transaction runs again (a retry), reads what the
 * first committed, and sells from it.
 */
static void test_pg_optimistic_every_interleaving(void **state)
{
    const mode *m = modes_find("pg-optimistic");
    char trace[512];
    int n = 0;

    (void)state;
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
        if (run_interleaving(plan, 5000 + n, m, trace, sizeof(trace)) != 2)
            fail_msg("pg-optimistic %s: not both sold: %s", plan, trace);
        n++;
    }
    assert_int_equal(n, 20);
    run_interleaving("ONOONN", 5090, m, trace, sizeof(trace));
    if (strstr(trace, "N.R(waits)") != NULL ||
        strstr(trace, "N(11): 200 deducted after 1 retry") == NULL)
        fail_msg("pg-optimistic ONOONN: want the second read not to wait and the second holder "
                 "to sell after exactly one retry: %s",
                 trace);
}

/* With no retries allowed, the holder that lost the race answers 503 conflict and sells
 * nothing: the books still balance. */
static void test_pg_optimistic_out_of_retries(void **state)
{
    const mode *m = modes_find("pg-optimistic");
    char trace[512];

    (void)state;
    g_optimistic_retries = 0;
    int sold = run_interleaving("ONOONN", 5095, m, trace, sizeof(trace));
    g_optimistic_retries = 16;
    if (sold != 1 || strstr(trace, "N(11): 503 conflict") == NULL)
        fail_msg("pg-optimistic ONOONN without retries: want the second holder to answer 503 "
                 "conflict: %s",
                 trace);
}

/*
 * A retry keeps the Idempotency-Key's promise. A (key K) claims K and reads; its twin B (the
 * same key) waits behind A's claim; C (no key) sells and commits, so A's write loses the
 * race. A's transaction rolls back, its claim with it: B's claim goes through, B reads and
 * stops before its write; A's second run claims K again and waits behind B. B sells and
 * commits; A's claim then finds B's answer and replays it. K sold once, whatever the retry.
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
    assert_false(holder_step(b, STEP_SETTLE_MS)); /* B's claim of K waits for A */

    holder *c = holder_start_keyed(2, 'C', 0, goods, m, NULL);
    holder_finish(2); /* C sells: the version moves on */
    assert_int_equal(c->res.status, 200);

    /* A writes, loses, rolls back (B's claim goes through, B reads and stops before its
     * write), runs again and waits behind B's claim */
    assert_false(holder_step(a, STEP_SETTLE_MS));
    assert_true(holder_settle(b, STEP_LIMIT_MS));
    assert_true(holder_step(b, STEP_LIMIT_MS)); /* B writes */
    holder_finish(1);                           /* B commits */
    holder_finish(0);                           /* A finds B's answer */

    printf("    A: %d %s after %d retr%s; B: %d %s; C: %d %s\n", a->res.status, a->res.outcome,
           a->res.retries, a->res.retries == 1 ? "y" : "ies", b->res.status, b->res.outcome,
           c->res.status, c->res.outcome);
    assert_int_equal(b->res.status, 200);
    assert_string_equal(b->res.outcome, "deducted");
    assert_int_equal(a->res.retries, 1);
    assert_int_equal(a->res.status, 200);
    assert_string_equal(a->res.outcome, "replayed");
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

/*
 * pg-lockrow excludes: while one holder is inside its section (stopped before its write),
 * a second deduction of the same goods waits its bound and answers 503 lock_timeout, having
 * sold nothing; once the first has committed and left, the lock row is gone and a deduction
 * enters at once.
 */
static void test_pg_lockrow_excludes(void **state)
{
    const mode *m = modes_find("pg-lockrow");
    const int64_t goods = 5101;

    (void)state;
    assert_non_null(m);
    reset_goods(goods, 10);
    holder *a = holder_start(0, 'O', 0, goods, m);
    assert_true(holder_settle(a, STEP_LIMIT_MS)); /* entered: the row is a's */
    assert_true(holder_step(a, STEP_LIMIT_MS));   /* a has read; it stops before writing */

    holder *b = holder_start(1, 'N', 0, goods, m);
    int64_t start = now_ms();
    holder_finish(1); /* b never gets past its guard: it must end by itself */
    int64_t took = now_ms() - start;
    printf("    a second taker while the row is held: %d %s after %lld ms (bound 300 ms)\n",
           b->res.status, b->res.outcome, (long long)took);
    assert_int_equal(b->res.status, 503);
    assert_string_equal(b->res.outcome, "lock_timeout");
    assert_true(took >= 290 && took < 3000);
    free(b->res.body);
    b->res.body = NULL;

    holder_finish(0);
    assert_int_equal(a->res.status, 200);
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 9);
    assert_int_equal(r.sold, 1);

    /* released: the next taker enters without waiting */
    holder *c = holder_start(1, 'N', 0, goods, m);
    holder_finish(1);
    assert_int_equal(c->res.status, 200);
    assert_true(c->res.wait_seconds < 0.25);
    r = report_of(goods);
    assert_int_equal(r.stock, 8);
    assert_int_equal(r.sold - (r.initial - r.stock), 0);
    free(a->res.body);
    a->res.body = NULL;
    free(c->res.body);
    c->res.body = NULL;
}

/*
 * pg-lockrow-ttl's flaw, made exact: holder A takes the row (lease 300 ms here) and reads
 * the stock, then is held up past the lease before its write (a pause, a slow statement).
 * Holder B finds the row expired, deletes it, takes the lock, and reads the same stock. Both
 * write the value they computed and both commit: one unit sold twice. Nothing in this rung
 * can notice: no renewal, no check before the commit, no fencing token on the goods row.
 */
static void test_pg_lockrow_ttl_two_holders_after_expiry(void **state)
{
    const mode *m = modes_find("pg-lockrow-ttl");
    const int64_t goods = 5102;

    (void)state;
    assert_non_null(m);
    reset_goods(goods, 10);
    holder *a = holder_start(0, 'O', 0, goods, m);
    assert_true(holder_settle(a, STEP_LIMIT_MS));
    assert_true(holder_step(a, STEP_LIMIT_MS)); /* A read 10 and stops before its write */
    usleep(400 * 1000);                         /* past A's lease of 300 ms */

    holder *b = holder_start(1, 'N', 0, goods, m);
    assert_true(holder_settle(b, STEP_LIMIT_MS)); /* B took the expired row over */
    assert_true(holder_step(b, STEP_LIMIT_MS));   /* B read 10 too */
    assert_true(holder_step(a, STEP_LIMIT_MS));   /* A writes 9 */
    holder_finish(0);                             /* A commits, releases (its row is gone) */
    assert_true(holder_step(b, STEP_LIMIT_MS));   /* B writes 9 */
    holder_finish(1);                             /* B commits */

    assert_int_equal(a->res.status, 200);
    assert_int_equal(b->res.status, 200);
    db_stock_report r = report_of(goods);
    int64_t oversold = r.sold - (r.initial - r.stock);
    printf("    pg-lockrow-ttl, A paused past its lease: both sold, stock %lld, sold %lld, "
           "oversold %lld\n",
           (long long)r.stock, (long long)r.sold, (long long)oversold);
    assert_int_equal(r.stock, 9);
    assert_int_equal(r.sold, 2);
    assert_int_equal(oversold, 1);
    free(a->res.body);
    a->res.body = NULL;
    free(b->res.body);
    b->res.body = NULL;
}

/* A connection of the test's own, outside the service's pool, that holds a lock the way a
 * stuck transaction of another process would. */
static PGconn *g_holder_conn;

static void holder_conn_exec(const char *sql)
{
    PGresult *res = PQexec(g_holder_conn, sql);
    ExecStatusType st = PQresultStatus(res);

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", PQresultErrorMessage(res));
        PQclear(res);
        fail_msg("%s: %s", sql, msg);
    }
    PQclear(res);
}

static int holder_conn_teardown(void **state)
{
    if (g_holder_conn != NULL) {
        PQfinish(g_holder_conn); /* ends its transaction: every lock it held goes */
        g_holder_conn = NULL;
    }
    g_lock_wait_ms = 0;
    return holders_finish(state);
}

/*
 * The PostgreSQL rungs wait for their locks inside PostgreSQL, and that wait is bounded like
 * a guard's: with the goods row locked by another transaction (and its advisory lock held),
 * each rung answers 503 lock_timeout after its lock wait bound (here 300 ms), having sold
 * nothing, rather than waiting until statement_timeout and answering "unavailable".
 */
static void test_pg_rungs_lock_wait_is_bounded(void **state)
{
    const char *names[] = {"pg-for-update", "pg-atomic", "pg-advisory", "pg-optimistic"};
    const int64_t goods = 5201;
    char sql[160];

    (void)state;
    reset_goods(goods, 10);
    g_holder_conn = PQconnectdb(g_conninfo);
    assert_int_equal(PQstatus(g_holder_conn), CONNECTION_OK);
    holder_conn_exec("BEGIN");
    snprintf(sql, sizeof(sql), "UPDATE goods SET updated = now() WHERE id = %lld",
             (long long)goods);
    holder_conn_exec(sql);
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%lld)", (long long)goods);
    holder_conn_exec(sql);

    g_lock_wait_ms = 300;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const mode *m = modes_find(names[i]);
        assert_non_null(m);
        holder *h = holder_start(0, 'O', 0, goods, m);
        int64_t start = now_ms();
        holder_finish(0);
        int64_t took = now_ms() - start;
        printf("    %s with the row and its advisory lock held elsewhere: %d %s after %lld ms\n",
               names[i], h->res.status, h->res.outcome, (long long)took);
        if (h->res.status != 503 || strcmp(h->res.outcome, "lock_timeout") != 0)
            fail_msg("%s: answered %d %s (%s), want 503 lock_timeout", names[i], h->res.status,
                     h->res.outcome, h->res.detail);
        assert_true(took >= 290 && took < 3000);
        free(h->res.body);
        h->res.body = NULL;
    }
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 10);
    assert_int_equal(r.sold, 0);

    holder_conn_exec("ROLLBACK"); /* the locks go: every rung sells again */
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        holder *h = holder_start(0, 'O', 0, goods, modes_find(names[i]));
        holder_finish(0);
        assert_int_equal(h->res.status, 200);
        free(h->res.body);
        h->res.body = NULL;
    }
    assert_int_equal(report_of(goods).stock, 6);
}

/* ---- redis-batch: a leader stuck in PostgreSQL --------------------------------------- */

/* A guard that takes a while (so that the followers queue behind the leader) and hands out a
 * fixed token of a source of its own. */
static int batch_slow_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                            size_t detail_len)
{
    (void)env;
    (void)goods_id;
    (void)detail;
    (void)detail_len;
    usleep(150 * 1000);
    memset(hold, 0, sizeof(*hold));
    hold->fenced = true;
    hold->fence = 100;
    hold->fence_source = "batch-test";
    return GUARD_OK;
}

static const mode batch_slow_mode = {.name = "batch-slow",
                                     .safe = true,
                                     .summary = "a slow guard for the batch's bounds",
                                     .enter = batch_slow_enter,
                                     .still_held = scripted_still_held,
                                     .leave = scripted_leave,
                                     .batched = true};

typedef struct batch_shot {
    pthread_t thread;
    batch_queue *q;
    int64_t goods;
    int64_t started_ms, took_ms; /* took_ms: -1 until answered */
    _Atomic bool answered;
    deduct_result res;
} batch_shot;

static void *batch_shot_run(void *arg)
{
    batch_shot *b = arg;
    deduct_env env = {.db = g_pool, .db_wait_ms = 2000, .guards = g_guards, .instance = "test"};

    b->started_ms = now_ms();
    batch_execute(b->q, &env, &batch_slow_mode, b->goods, 1, NULL, NULL, &b->res);
    b->took_ms = now_ms() - b->started_ms;
    atomic_store(&b->answered, true);
    return NULL;
}

/*
 * A batch whose leader is stuck in PostgreSQL (the goods row locked by another session, so
 * its fenced read waits): every follower it took answers within its own deadline
 * (BATCH_WAIT_MS, 400 ms here), 503 lock_timeout, and that 503 sold nothing: once the row is
 * free the leader finds them gone and rolls the batch back. Before, the followers waited
 * untimed for the leader, and were sold once the row lock went.
 */
static void test_batch_leader_stuck_in_postgresql(void **state)
{
    enum { FOLLOWERS = 5 };
    const int64_t goods = 5301, wait_ms = 400;
    batch_shot leader = {0}, followers[FOLLOWERS];
    batch_queue *q = NULL;
    char sql[160];
    int64_t until;
    bool all;

    (void)state;
    reset_goods(goods, 10);
    assert_int_equal(batch_queue_create(&(batch_options){64, 1024, wait_ms}, &q), 0);
    g_holder_conn = PQconnectdb(g_conninfo);
    assert_int_equal(PQstatus(g_holder_conn), CONNECTION_OK);
    holder_conn_exec("BEGIN");
    snprintf(sql, sizeof(sql), "UPDATE goods SET updated = now() WHERE id = %lld",
             (long long)goods);
    holder_conn_exec(sql);

    leader = (batch_shot){.q = q, .goods = goods, .took_ms = -1};
    assert_int_equal(pthread_create(&leader.thread, NULL, batch_shot_run, &leader), 0);
    usleep(30 * 1000); /* the leader is in its (slow) guard: the others queue behind it */
    for (int i = 0; i < FOLLOWERS; i++) {
        followers[i] = (batch_shot){.q = q, .goods = goods, .took_ms = -1};
        assert_int_equal(pthread_create(&followers[i].thread, NULL, batch_shot_run, &followers[i]),
                         0);
    }
    /* Every follower should answer by its deadline; give them 3 s before the row is freed
     * (on a follower that waits for its leader, that is when it would answer). */
    until = now_ms() + 3000;
    do {
        usleep(10 * 1000);
        all = true;
        for (int i = 0; i < FOLLOWERS; i++)
            all = all && atomic_load(&followers[i].answered);
    } while (!all && now_ms() < until);
    holder_conn_exec("ROLLBACK"); /* the row is free: the leader goes on */
    pthread_join(leader.thread, NULL);
    for (int i = 0; i < FOLLOWERS; i++)
        pthread_join(followers[i].thread, NULL);

    for (int i = 0; i < FOLLOWERS; i++) {
        batch_shot *f = &followers[i];
        printf("    follower %d: %d %s after %lld ms\n", i, f->res.status,
               f->res.outcome != NULL ? f->res.outcome : "-", (long long)f->took_ms);
        assert_int_equal(f->res.status, 503);
        assert_string_equal(f->res.outcome, "lock_timeout");
        assert_true(f->took_ms >= wait_ms - 10 && f->took_ms < wait_ms + 300);
        free(f->res.body);
    }
    printf("    leader: %d %s after %lld ms\n", leader.res.status, leader.res.outcome,
           (long long)leader.took_ms);
    assert_int_equal(leader.res.status, 503);
    free(leader.res.body);
    /* No 503 sold anything: the batch was rolled back. */
    db_stock_report r = report_of(goods);
    assert_int_equal(r.stock, 10);
    assert_int_equal(r.sold, 0);

    /* The queue is whole again: the next request leads a batch of its own and sells. */
    leader = (batch_shot){.q = q, .goods = goods, .took_ms = -1};
    batch_shot_run(&leader);
    assert_int_equal(leader.res.status, 200);
    free(leader.res.body);
    assert_int_equal(report_of(goods).stock, 9);
    batch_queue_destroy(q);
}

/* ---- the fencing counter after a failover --------------------------------------------- */

/*
 * A failover to a replica whose fencing counter is behind the database (it had not received
 * the last increments) is made by setting the counter back by 5 after a sale. Each sale
 * after it under the real `redis` mode is refused (lock_lost) while its token is at or below
 * the stored one; the refusal must move the counter past the stored token, so it costs one
 * refused sale, not five. Before, every sale was refused until INCR caught up.
 */
static void test_fence_counter_behind_after_failover(void **state)
{
    const int64_t goods = 5401;
    redis_server *srv = NULL;
    lock_options lo;
    lock_client *lock = NULL;
    guard_env *guards = NULL;
    const mode *m = modes_find("redis");
    deduct_result res;
    redisContext *raw;
    redisReply *r;
    int refused = 0, sold = 0;

    (void)state;
    assert_non_null(m);
    assert_int_equal(redis_server_start(&srv), 0);
    lock_options_init(&lo);
    lo.redis_port = redis_server_port(srv);
    assert_int_equal(lock_client_create(&lo, &lock), LOCK_OK);
    guard_env_options gopts = {.lock = lock,
                               .wait_ms = 1000,
                               .lease_ms = LOCK_LEASE_WATCHDOG,
                               .db = g_pool,
                               .db_wait_ms = 2000};
    assert_int_equal(guard_env_create(&gopts, &guards), 0);
    deduct_env env = {.db = g_pool, .db_wait_ms = 2000, .guards = guards, .instance = "test"};
    reset_goods(goods, 100);

    assert_int_equal(deduct_execute(&env, m, goods, 1, NULL, NULL, &res), 0);
    assert_int_equal(res.status, 200);
    free(res.body);
    raw = redisConnect("127.0.0.1", redis_server_port(srv));
    assert_non_null(raw);
    r = redisCommand(raw, "DECRBY lock:goods:%lld:fence 5", (long long)goods);
    assert_non_null(r);
    freeReplyObject(r);

    for (int i = 0; i < 8; i++) {
        assert_int_equal(deduct_execute(&env, m, goods, 1, NULL, NULL, &res), 0);
        if (res.status == 200)
            sold++;
        else if (res.status == 503 && strcmp(res.outcome, "lock_lost") == 0)
            refused++;
        free(res.body);
    }
    printf("    counter 5 behind the stored fence: %d of 8 sales refused, %d sold\n", refused,
           sold);
    assert_int_equal(refused, 1);
    assert_int_equal(sold, 7);
    assert_int_equal(report_of(goods).stock, 100 - 1 - 7);

    redisFree(raw);
    guard_env_destroy(guards);
    lock_client_destroy(lock);
    redis_server_destroy(srv);
}

/* ---- set-up --------------------------------------------------------------------------- */

static void admin_exec(const char *conninfo, const char *sql)
{
    PGconn *pg = PQconnectdb(conninfo);
    PGresult *res;

    if (PQstatus(pg) != CONNECTION_OK) {
        fprintf(stderr, "test_deduct: cannot connect: %s", PQerrorMessage(pg));
        PQfinish(pg);
        exit(1);
    }
    res = PQexec(pg, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "test_deduct: %s: %s", sql, PQerrorMessage(pg));
        PQclear(res);
        PQfinish(pg);
        exit(1);
    }
    PQclear(res);
    PQfinish(pg);
}

static int setup_database(void **state)
{
    char sql[160], *conninfo = NULL;
    db_pool_options opts;
    db_conn *c = NULL;
    char msg[256] = "";

    (void)state;
    snprintf(g_dbname, sizeof(g_dbname), "deduct_test_%ld", (long)getpid());
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", g_dbname);
    admin_exec(g_base_url, sql);
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", g_dbname);
    admin_exec(g_base_url, sql);

    /* In a key=value string the last setting of a keyword wins. */
    if (asprintf(&conninfo, "%s dbname=%s", g_base_url, g_dbname) < 0)
        return -1;
    g_conninfo = conninfo;
    db_pool_options_init(&opts);
    opts.conninfo = conninfo;
    opts.size = 4;
    if (db_pool_create(&opts, &g_pool) != DB_OK)
        return -1;
    guard_env_options gopts = {.lock = NULL,
                               .wait_ms = 300,
                               .lease_ms = 0,
                               .db = g_pool,
                               .db_wait_ms = 2000,
                               .row_lease_ms = 300};
    if (guard_env_create(&gopts, &g_guards) != 0)
        return -1;
    if (db_pool_acquire(g_pool, 5000, &c) != DB_OK)
        return -1;
    if (db_migrate(c, migrations_dir, NULL, msg, sizeof(msg)) != DB_OK) {
        fprintf(stderr, "test_deduct: migrate: %s\n", msg);
        db_pool_release(g_pool, c);
        return -1;
    }
    db_pool_release(g_pool, c);
    return 0;
}

static int teardown_database(void **state)
{
    char sql[160];

    (void)state;
    guard_env_destroy(g_guards);
    g_guards = NULL;
    db_pool_destroy(g_pool);
    g_pool = NULL;
    free(g_conninfo);
    g_conninfo = NULL;
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", g_dbname);
    admin_exec(g_base_url, sql);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_the_five_steps, holders_finish),
        cmocka_unit_test_teardown(test_two_holders_every_interleaving, holders_finish),
        cmocka_unit_test_teardown(test_pg_rungs_every_interleaving, holders_finish),
        cmocka_unit_test_teardown(test_pg_optimistic_every_interleaving, holders_finish),
        cmocka_unit_test_teardown(test_pg_optimistic_out_of_retries, holders_finish),
        cmocka_unit_test_teardown(test_pg_optimistic_retry_keeps_the_key, holders_finish),
        cmocka_unit_test_teardown(test_pg_lockrow_excludes, holders_finish),
        cmocka_unit_test_teardown(test_pg_lockrow_ttl_two_holders_after_expiry, holders_finish),
        cmocka_unit_test_teardown(test_pg_rungs_lock_wait_is_bounded, holder_conn_teardown),
        cmocka_unit_test_teardown(test_batch_leader_stuck_in_postgresql, holder_conn_teardown),
        cmocka_unit_test(test_fence_counter_behind_after_failover),
    };

    g_base_url = getenv("TEST_DATABASE_URL");
    migrations_dir = getenv("TEST_MIGRATIONS_DIR");
    if (!migrations_dir || !migrations_dir[0])
        migrations_dir = "migrations";
    if (!g_base_url || !g_base_url[0] || strstr(g_base_url, "://") != NULL) {
        fprintf(stderr, "test_deduct: FAIL: TEST_DATABASE_URL must name, as a key=value string, "
                        "a PostgreSQL server the test may create a database on (tests/run-all.sh "
                        "starts one)\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, setup_database, teardown_database);
}
