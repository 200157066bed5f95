/*
 * deduct_support.c - the scripted guard, the holders, the database and the main of the programs of
 * tests/deduct/. See deduct_support.h.
 */
#include "tests/deduct/deduct_support.h"
#include "service/clock.h"
#include "service/guards/guards.h"
#include "service/http/response.h"
#include "tests/support/cases.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *g_program = "test_deduct"; /* the running program, for messages */
static const char *migrations_dir;
static char g_dbname[64];
static char *g_base_url;
char *g_conninfo;
db_pool *g_pool;
guard_env *g_guards;
int64_t g_lock_wait_ms;
int g_optimistic_retries = 16;
const char step_names[STEPS] = {'R', 'W', 'C'};

static _Thread_local int64_t t_token;

/* none's guard (nothing to take), with the holder's token. */
static int scripted_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                          size_t detail_len)
{
    int rc = guard_none_enter(env, goods_id, hold, detail, detail_len);

    hold->fenced = true;
    hold->fence = t_token;
    hold->fence_source = "test";
    return rc;
}

int scripted_still_held(guard_env *env, const guard_hold *hold)
{
    (void)env;
    (void)hold;
    return GUARD_OK; /* the holder has not found out: its watchdog has not looked yet */
}

const mode scripted_mode = {.name = "scripted",
                            .safe = true,
                            .summary = "a fixed token, a loss never noticed",
                            .enter = scripted_enter,
                            .still_held = scripted_still_held,
                            .leave = guard_none_leave};

int64_t now_ms(void)
{
    return clock_now_ns() / 1000000;
}

struct timespec deadline_in(int64_t ms)
{
    return clock_timespec(clock_now_ns() + ms * 1000000);
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

deduct_env deduct_test_env(void)
{
    return (deduct_env){.db = g_pool,
                        .db_wait_ms = 2000,
                        .guards = g_guards,
                        .instance = "test",
                        .bodies = &response_sale_bodies};
}

static void *holder_run(void *arg)
{
    holder *h = arg;
    deduct_env env = deduct_test_env();
    deduct_hook hook = {holder_at, h, NULL};
    int rc;

    env.lock_wait_ms = g_lock_wait_ms;
    env.optimistic_retries = g_optimistic_retries;
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
bool holder_step(holder *h, int64_t wait_ms)
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
bool holder_settle(holder *h, int64_t wait_ms)
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

bool holder_finished(holder *h)
{
    bool f;

    pthread_mutex_lock(&h->mu);
    f = h->finished;
    pthread_mutex_unlock(&h->mu);
    return f;
}

holder g_holders[MAX_HOLDERS];
static bool g_started[MAX_HOLDERS];

holder *holder_start_keyed(int i, char name, int64_t token, int64_t goods, const mode *m,
                           const char *key)
{
    holder *h = &g_holders[i];

    memset(h, 0, sizeof(*h));
    h->name = name;
    h->token = token;
    h->goods = goods;
    h->mode = m;
    h->key = key;
    pthread_mutex_init(&h->mu, NULL);
    /* The deadlines are on the monotonic clock (deadline_in). */
    clock_cond_init(&h->cv);
    assert_int_equal(pthread_create(&h->thread, NULL, holder_run, h), 0);
    g_started[i] = true;
    return h;
}

holder *holder_start(int i, char name, int64_t token, int64_t goods, const mode *m)
{
    return holder_start_keyed(i, name, token, goods, m, NULL);
}

/* Lets holder i run to its end (the driver is done with it, or failed) and joins it. */
void holder_finish(int i)
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

int holders_finish(void **state)
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

bool lock_waiter_within(int64_t wait_ms)
{
    PGconn *pg = PQconnectdb(g_conninfo);
    int64_t until = now_ms() + wait_ms;
    bool found = false;

    while (!found && PQstatus(pg) == CONNECTION_OK) {
        PGresult *res = PQexec(pg, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                   "current_database() AND wait_event_type = 'Lock'");

        found = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
                strtoll(PQgetvalue(res, 0, 0), NULL, 10) > 0;
        PQclear(res);
        if (found || now_ms() >= until)
            break;
        usleep(10 * 1000);
    }
    PQfinish(pg);
    return found;
}

void reset_goods(int64_t goods, int64_t stock)
{
    db_conn *c = NULL;

    assert_int_equal(db_pool_acquire(g_pool, 2000, &c), DB_OK);
    assert_int_equal(db_goods_reset(c, goods, stock), DB_OK);
    db_pool_release(g_pool, c);
}

db_stock_report report_of(int64_t goods)
{
    db_stock_report r;
    db_conn *c = NULL;

    assert_int_equal(db_pool_acquire(g_pool, 2000, &c), DB_OK);
    assert_int_equal(db_stock_report_read(c, goods, &r), DB_OK);
    db_pool_release(g_pool, c);
    return r;
}

/* A connection of the test's own, outside the service's pool, that holds a lock the way a
 * stuck transaction of another process would. */
PGconn *g_holder_conn;

void holder_conn_exec(const char *sql)
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

int holder_conn_teardown(void **state)
{
    if (g_holder_conn != NULL) {
        PQfinish(g_holder_conn); /* ends its transaction: every lock it held goes */
        g_holder_conn = NULL;
    }
    g_lock_wait_ms = 0;
    return holders_finish(state);
}

static void admin_exec(const char *conninfo, const char *sql)
{
    PGconn *pg = PQconnectdb(conninfo);
    PGresult *res;

    if (PQstatus(pg) != CONNECTION_OK) {
        fprintf(stderr, "%s: cannot connect: %s", g_program, PQerrorMessage(pg));
        PQfinish(pg);
        exit(1);
    }
    res = PQexec(pg, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        fprintf(stderr, "%s: %s: %s", g_program, sql, PQerrorMessage(pg));
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
        fprintf(stderr, "%s: migrate: %s\n", g_program, msg);
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

int deduct_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                     char **argv)
{
    if (support_list_cases(tests, n, argc, argv))
        return 0;
    g_program = name;
    g_base_url = getenv("TEST_DATABASE_URL");
    migrations_dir = getenv("TEST_MIGRATIONS_DIR");
    if (!migrations_dir || !migrations_dir[0])
        migrations_dir = "migrations";
    if (!g_base_url || !g_base_url[0] || strstr(g_base_url, "://") != NULL) {
        fprintf(stderr,
                "%s: FAIL: TEST_DATABASE_URL must name, as a key=value string, "
                "a PostgreSQL server the test may create a database on (tests/run-all.sh "
                "starts one)\n",
                name);
        return 1;
    }
    return support_run_cases(name, tests, n, argc, argv, setup_database, teardown_database);
}
