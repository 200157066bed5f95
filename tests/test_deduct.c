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
#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/db.h"
#include "service/deduct.h"
#include "service/modes.h"

/* How long a released step may take before the driver calls it "waiting in PostgreSQL". */
#define STEP_SETTLE_MS 250
/* How long anything may take at all before the case fails rather than hangs. */
#define STEP_LIMIT_MS 10000

static const char *migrations_dir;
static char g_dbname[64];
static char *g_base_url;
static db_pool *g_pool;

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

static const mode scripted_mode = {"scripted",
                                   true,
                                   "a fixed token, a loss never noticed",
                                   scripted_enter,
                                   scripted_still_held,
                                   scripted_leave,
                                   NULL,
                                   NULL};

/* ---- a holder: a thread that stops at each step until told to go on ------------------- */

enum { STEP_R, STEP_W, STEP_C, STEPS };
static const char step_names[STEPS] = {'R', 'W', 'C'};

typedef struct holder {
    char name;     /* 'O' (older token) or 'N' (newer) */
    int64_t token; /* its fencing token */
    int64_t goods;
    const mode *mode; /* scripted_mode, or a PostgreSQL rung of the table */
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

static void holder_at(void *arg, deduct_point point)
{
    holder *h = arg;
    int gate = gate_of(point);
    struct timespec limit = deadline_in(STEP_LIMIT_MS);

    if (gate < 0)
        return;
    pthread_mutex_lock(&h->mu);
    h->reached = gate + 1;
    pthread_cond_broadcast(&h->cv);
    while (h->allowed <= gate) {
        if (pthread_cond_timedwait(&h->cv, &h->mu, &limit) == ETIMEDOUT)
            break; /* the driver failed: go on, so that the case ends and reports */
    }
    pthread_mutex_unlock(&h->mu);
}

static void *holder_run(void *arg)
{
    holder *h = arg;
    deduct_env env = {.db = g_pool, .db_wait_ms = 2000, .guards = NULL, .instance = "test"};
    deduct_hook hook = {holder_at, h};
    int rc;

    t_token = h->token;
    rc = deduct_execute(&env, h->mode, h->goods, 1, NULL, &hook, &h->res);
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
static holder g_holders[2];
static bool g_started[2];

static holder *holder_start(int i, char name, int64_t token, int64_t goods, const mode *m)
{
    holder *h = &g_holders[i];
    pthread_condattr_t attr;

    memset(h, 0, sizeof(*h));
    h->name = name;
    h->token = token;
    h->goods = goods;
    h->mode = m;
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
    for (int i = 0; i < 2; i++) {
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
        if (h->res.status == 200)
            ok_count++;
        else if (h->res.status != 503 || strcmp(h->res.outcome, "lock_lost") != 0)
            fail_msg("%s: holder %c answered %d %s (%s), want 200 or 503 lock_lost", plan, h->name,
                     h->res.status, h->res.outcome ? h->res.outcome : "?", h->res.detail);
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
        const mode *m = modes_find(NULL, names[r]);
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
    db_pool_options_init(&opts);
    opts.conninfo = conninfo;
    opts.size = 4;
    if (db_pool_create(&opts, &g_pool) != DB_OK) {
        free(conninfo);
        return -1;
    }
    free(conninfo);
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
    db_pool_destroy(g_pool);
    g_pool = NULL;
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
