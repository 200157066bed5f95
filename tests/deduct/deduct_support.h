/*
 * deduct_support.h - what the programs of tests/deduct/ share: the read-check-write of
 * service/sale/sale.c (through deduct_execute) run by lock holders whose steps a driver orders
 * exactly, against a real PostgreSQL.
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
 * the order) and C (commit). PostgreSQL may make a step wait (a claim waits for the row lock
 * of a holder that has not committed): such a step is left in flight and the driver goes on
 * with the other holder's steps, which is the only order the database allows.
 *
 * TEST_DATABASE_URL: a server the programs may create a database on, as a key=value string
 * (tests/run-all.sh starts a throwaway one); TEST_MIGRATIONS_DIR: the migrations directory.
 * Each program makes one database, migrated, for all its cases (deduct_test_main), with a
 * pool of 4 and the real guards on it (pg-lockrow needs the pool).
 */
#ifndef TESTS_DEDUCT_SUPPORT_H
#define TESTS_DEDUCT_SUPPORT_H

#include <setjmp.h> /* cmocka.h needs these four first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <libpq-fe.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

#include "db/db.h"
#include "service/sale/deduct.h"
#include "service/guards/modes.h"

/* How long a released step may take before the driver calls it "waiting in PostgreSQL". */
#define STEP_SETTLE_MS 250
/* How long anything may take at all before the case fails rather than hangs. */
#define STEP_LIMIT_MS 10000

extern char *g_conninfo; /* the test database, for the cases' own raw connections */
extern db_pool *g_pool;
extern guard_env *g_guards; /* the real guards */
/* What holder_run's deductions run with; cases that need other values set them first. */
extern int64_t g_lock_wait_ms;   /* deduct_env.lock_wait_ms (0: no lock_timeout) */
extern int g_optimistic_retries; /* deduct_env.optimistic_retries (16) */

/* What every case's deductions run with: the test database's pool, the real guards, the
 * replica's answers; a case sets the rest (pipeline, lock_wait_ms...) on its copy. */
deduct_env deduct_test_env(void);

/* The scripted guard: the token of the holder's thread, a loss it never notices; none's
 * leave (nothing to give back). Its still_held is public for modes built on it. */
extern const mode scripted_mode;
int scripted_still_held(guard_env *env, const guard_hold *hold);

/* A holder: a thread that runs one deduction and stops at each step until told to go on. */
enum { STEP_R, STEP_W, STEP_C, STEPS };
extern const char step_names[STEPS];

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

int64_t now_ms(void);
/* A deadline ms from now on the monotonic clock (the holders' condition variables'). */
struct timespec deadline_in(int64_t ms);

/* Starts holder i (0..MAX_HOLDERS-1) with its token, goods, mode and Idempotency-Key (may be
 * NULL); it runs until its first gate. */
#define MAX_HOLDERS 3
/* The holders of the case running now. Not on the driver's stack: when an assertion fails,
 * cmocka jumps out of the driver while the threads still run, and the teardown
 * (holders_finish) lets them end and joins them. */
extern holder g_holders[MAX_HOLDERS];
holder *holder_start_keyed(int i, char name, int64_t token, int64_t goods, const mode *m,
                           const char *key);
holder *holder_start(int i, char name, int64_t token, int64_t goods, const mode *m);
/* Lets h start its next step and waits up to wait_ms for it to end. Returns whether it did. */
bool holder_step(holder *h, int64_t wait_ms);
/* Waits up to wait_ms for h's step in flight to end (or for h to reach its first gate). */
bool holder_settle(holder *h, int64_t wait_ms);
bool holder_finished(holder *h);
/* Lets holder i run to its end (the driver is done with it, or failed) and joins it. */
void holder_finish(int i);
/* The teardown of a case with holders: every holder finished, joined and freed. */
int holders_finish(void **state);

/* Whether a session of the test database waits for a lock (a claim queued behind another
 * holder's, say) within wait_ms: what a driver checks before it counts on that wait, rather
 * than on a pause long enough for the holder's statement to reach PostgreSQL. */
bool lock_waiter_within(int64_t wait_ms);

/* The goods reset to `stock`, and its report, through the pool (both must succeed). */
void reset_goods(int64_t goods, int64_t stock);
db_stock_report report_of(int64_t goods);

/* A connection of the case's own that holds locks as another transaction would
 * (g_holder_conn, opened by the case); holder_conn_exec fails the case if SQL is refused;
 * holder_conn_teardown closes it (its locks go), resets g_lock_wait_ms, finishes holders. */
extern PGconn *g_holder_conn;
void holder_conn_exec(const char *sql);
int holder_conn_teardown(void **state);

/* Every program's main: reads the environment (a missing or URI TEST_DATABASE_URL fails the
 * run), takes a cmocka PATTERN of cases as argv[1], or --list, and runs tests[0..n) on one
 * database made for the run. Returns the exit status. */
int deduct_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                     char **argv);

#endif
