/*
 * stack_support.h - what the stack's test programs (tests/stack/test_*.c) share: one running stack
 * (nginx in front of three replicas of stockd, with PostgreSQL and Redis behind them, all
 * real processes) and the tools to talk to it. tests/integration.sh starts the stack once on
 * free ports and runs each program against it, telling them where things listen:
 *
 *   STOCK_URL     nginx, e.g. http://127.0.0.1:18080 (what clients talk to)
 *   REPLICA_URLS  each replica directly, comma-separated
 *   ADMIN_TOKEN   the token the stack was started with (admin reset needs it)
 *   REDIS_PORT    Redis on 127.0.0.1, to hold a lock as another owner would (redis-cli)
 *   PG_PORT       PostgreSQL on 127.0.0.1 (database and user `stock`, as scripts/stack.sh
 *                 makes them), to change rows behind the service's back
 *   RUN_DIR       and the other port variables: inherited by `scripts/stack.sh redis-stop`,
 *                 `redis-start`, `pg-stop`, `pg-start`, `pg-freeze` and `pg-thaw`, which the
 *                 dependency cases run from the project root (the current directory)
 *   LOCK_WAIT_MS  optional: the stack's lock wait bound (default 2000, the service's)
 *   SLOW_REPLICA_URL, SLOW_REPLICA_LOG, SLOW_REPLICA_DELAY_MS, SLOW_REPLICA_LEASE_MS,
 *   DELAYED_REPLICA_URLS, DELAYED_REPLICA_DELAY_MS
 *                 the extra replicas of the lock-loss cases (tests/stack/test_lock_lost.c)
 *
 * A missing variable fails every case with a message naming it: a test run that cannot
 * reach its stack must not look like a pass.
 *
 * The pieces, one file each:
 *   env.c   the environment above, what a case owns, the case bookkeeping, and stack_main()
 *           (every program's main: the run, a PATTERN of cases, --list);
 *   http.c  the HTTP client (libcurl, always with connect and total timeouts, so that a hung
 *           replica fails a case instead of hanging the run) and the raw-socket client, for
 *           what libcurl will not send (a request line in HTTP/2.0 over plain TCP);
 *   api.c   the service's answers checked against ../shared/API.md: JSON, stock, reset,
 *           deduct, /metrics;
 *   ctl.c   other programs and the database: redis-cli, scripts/stack.sh, SQL;
 *   load.c  the load generator: many threads, each with its own libcurl handle.
 *
 * Rules every case follows:
 *   - cmocka's assertions longjmp out of a case, so everything a case allocates goes through
 *     own() and is freed by the case's teardown (case_teardown): a failed case leaks nothing,
 *     and LeakSanitizer does not bury the real failure under leak reports.
 *   - Load threads never assert (cmocka is not thread-safe): they count what they saw, and
 *     the main thread asserts on the totals and prints them.
 *   - Each case resets the goods it uses, with ids of its own (the table below, one for every
 *     program, since they share one database), so no case depends on another's leftovers or
 *     on a previous run against the same database.
 */
#ifndef TESTS_STACK_SUPPORT_H
#define TESTS_STACK_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#define MAX_REPLICAS 8

#define LOAD_THREADS 64 /* at most, per load plan (load.c) */

/* The load cases' size: requests sent, and the stock they sell out (test_oversell,
 * test_sharded_sales). */
#define LOAD_REQUESTS 3000
#define LOAD_STOCK 2000
/* A third of it, for the loads that do not test this project's own exclusion under the most
 * sales: the PostgreSQL rungs (the row lock, the advisory lock, the conditional UPDATE are
 * PostgreSQL's; pg-optimistic's and pg-lockrow's waiters also retry or poll, several round
 * trips per sale), and the unsafe modes (none, local over three replicas), whose books must
 * only balance. The Redis lock, the batch and the local mutex take the full load. Their 64
 * connections contend from the first request on, as the others' do. */
#define LOAD_SMALL_REQUESTS 1000
#define LOAD_SMALL_STOCK 400 /* room for pg-lockrow's lock_timeouts, as 3000 leave 2000 */

/* Goods ids, distinct per case, over every program (they share the database). GOODS_UNKNOWN is
 * never reset by anyone, so it stays unknown. */
#define GOODS_DEDUCT 3101LL
#define GOODS_MODES 3102LL
#define GOODS_DRY 3103LL
#define GOODS_LIMITS 3201LL
#define GOODS_MEDIA 3202LL
#define GOODS_LOCK 3301LL
#define GOODS_STOCK 3401LL
#define GOODS_METRICS 3402LL
#define GOODS_RESET 3501LL
#define GOODS_MALFORMED 3601LL
#define GM "3601" /* GOODS_MALFORMED as text, for the literal bodies of the malformed table */
#define GOODS_IDEM 3701LL /* 3701 .. 3710 */
#define GOODS_LOAD_REDIS 3801LL
#define GOODS_LOAD_LOCAL1 3802LL
#define GOODS_LOAD_NONE3 3803LL
#define GOODS_LOAD_LOCAL3 3804LL
#define GOODS_LOAD_PG 3805LL     /* 3805 .. 3807: one per PostgreSQL rung */
#define GOODS_PG_OUTCOMES 3808LL /* 3808 .. 3810 */
#define GOODS_LOAD_BATCH 3811LL
#define GOODS_BATCH_IDEM 3812LL /* 3812 .. 3813 */
#define GOODS_AUTH 3901LL
#define GOODS_DOWN 4001LL
#define GOODS_PG_DOWN 4002LL
#define GOODS_PG_FROZEN 4003LL
#define GOODS_PG_FROZEN_PROBE 4004LL /* one sale alone while PostgreSQL is frozen */
#define GOODS_REDIS_FROZEN 4005LL
#define GOODS_LOST_TAKEOVER 4101LL
#define GOODS_LOST_FENCE 4102LL
#define GOODS_LOST_WATCHDOG 4103LL
#define GOODS_FIVE_STEPS 4104LL
#define GOODS_FIVE_STEPS_MIRROR 4105LL
#define GOODS_ENCODED 4201LL
#define GOODS_QUERY_KEY 4202LL
#define GOODS_KEEPALIVE 4203LL
#define GOODS_PG2_OUTCOMES 4301LL /* 4301 .. 4303: pg-optimistic, pg-lockrow, pg-lockrow-ttl */
#define GOODS_LOAD_OPTIMISTIC 4304LL
#define GOODS_LOAD_LOCKROW 4305LL
#define GOODS_LOCKROW_WEDGE 4306LL
#define GOODS_LOCKROW_TTL 4307LL
#define GOODS_PG_LOCK_WAIT 4308LL
#define GOODS_SERIALIZABLE 4309LL      /* pg-serializable's answers */
#define GOODS_LOAD_SERIALIZABLE 4310LL
#define GOODS_SHARD_LOAD 4401LL
#define GOODS_SHARD_LARGE 4402LL
#define GOODS_SHARD_SOLD_OUT 4403LL
#define GOODS_SHARD_IDEM 4404LL /* 4404 .. 4405 */
#define GOODS_SHARD_MIXED 4406LL
#define GOODS_ORDER 4500LL          /* 4500 .. 4509: test_order's answers */
#define GOODS_ORDER_DEADLOCK 4510LL /* 4510 .. 4511: the two opposite carts */
#define GOODS_ORDER_HTTP 4512LL     /* a cart's 413, 415, bad key and query mode */
#define GOODS_ORDER_LOAD 4520LL     /* 4520 .. 4534: 5 hot goods per safe cart mode */
#define GOODS_CACHE 4601LL          /* test_cache's answers */
#define GOODS_CACHE_HELD 4602LL     /* 4602 .. 4603: the held miss, cache-aside and rwlock */
#define GOODS_CACHE_MIXED 4611LL    /* 4611 .. 4613: loadtest/reads --judged-only's rows */
#define GOODS_UNKNOWN 987654321LL
#define GOODS_MAX 9223372036854775807LL /* 2^63-1: valid, and never created */

/* ------------------------------------------------------------------------------------------
 * env.c: the environment the harness gives us, what a case owns, the run
 * ------------------------------------------------------------------------------------------ */

typedef struct test_env {
    const char *stock_url;        /* nginx */
    char *replicas[MAX_REPLICAS]; /* each replica's URL (malloc'd) */
    size_t n_replicas;
    char instances[MAX_REPLICAS][64]; /* each replica's instance name, from its /healthz */
    const char *admin_token;
    const char *redis_port;
    const char *pg_port;
    const char *slow_url;  /* the slow replica (not behind nginx); NULL when not given */
    const char *slow_log;  /* its log file; NULL when not given */
    long slow_delay_ms;    /* its BUSINESS_DELAY_MS */
    long slow_lease_ms;    /* its LOCK_LEASE_MS */
    char *delayed_urls[2]; /* the two delayed replicas (long lease); NULL when not given */
    long delayed_delay_ms; /* their BUSINESS_DELAY_MS */
    long lock_wait_ms;
    long timeout_ms;       /* every request's: lock_wait_ms + TIMEOUT_MARGIN_MS */
    char auth_header[320]; /* "Authorization: Bearer <token>" */
    char run_tag[32];      /* makes this run's idempotency keys its own */
    char problem[512];     /* why the stack is unusable; "" when it is fine */
} test_env;

/* The stack, as the environment describes it (env_load, env_learn_instances). */
extern test_env g_env;
/* The main thread's libcurl handle (keep-alive: the cases reuse its connections). */
extern CURL *g_curl;

/* How own() frees what it is given (free, json_release, ...). */
typedef void (*release_fn)(void *);

/* CLOCK_MONOTONIC in seconds: for durations only. */
double now_s(void);

/* Registers ptr to be released by release() at the end of the case; returns ptr. NULL is
 * returned as is (nothing to release). */
void *own(void *ptr, release_fn release);

/* Releases everything the case owned, newest first. */
void release_owned(void);

/* json_decref() as a release_fn. */
void json_release(void *json);

/* First line of every case: names it for the timing line, and fails it when the environment
 * is unusable. */
void begin_case(const char *name);

/* Every case's setup and teardown (a teardown of a case's own calls case_teardown last):
 * the teardown releases what the case owned and prints its "[ TIMING   ]" line. */
int case_setup(void **state);
int case_teardown(void **state);

/* Reads and checks the environment; on any problem, g_env.problem says what. */
void env_load(void);

/* Asks each replica its instance name (its /healthz says it), so that answers' instance
 * fields can be checked. */
void env_learn_instances(void);

/*
 * Every program's main(): reads the environment, learns the replicas' names, and runs the
 * cases of `tests` (n of them) as the cmocka group `name`. argv[1], when given, is a cmocka
 * pattern ('*' and '?': 'test_load_*') that runs only the cases it matches; `--list` prints
 * the cases' names, one a line, and runs nothing (tests/integration.sh uses it to run only
 * the programs a pattern matches). Returns main's exit status: 0 when every case passed.
 */
int stack_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc, char **argv);

/* ------------------------------------------------------------------------------------------
 * http.c: HTTP, with libcurl and on a raw socket
 * ------------------------------------------------------------------------------------------ */

#define NO_CONTENT_TYPE "" /* http_request.content_type: send no Content-Type header at all */

typedef struct http_request {
    const char *method;       /* "GET", "POST", "DELETE", ... */
    const char *base;         /* "http://127.0.0.1:18080" */
    const char *path;         /* "/api/deduct?mode=redis" */
    const char *body;         /* NULL: no body */
    size_t body_len;          /* bytes of body; 0 means strlen(body) */
    const char *content_type; /* NULL: application/json when there is a body; NO_CONTENT_TYPE */
    const char *headers[4];   /* more "Name: value" lines ("Name;" sends it empty), NULL-ended */
    bool chunked;             /* send the body with Transfer-Encoding: chunked, no length */
    long timeout_ms;          /* 0: g_env.timeout_ms */
} http_request;

typedef struct http_reply {
    long status; /* 0 when no answer came (error says why) */
    char *body;  /* NUL-terminated, malloc'd ("" when empty) */
    size_t len;
    char content_type[128];      /* "" when absent */
    double seconds;              /* wall time of the call */
    char error[CURL_ERROR_SIZE]; /* libcurl's reason when status is 0 */
    char headers[1024];          /* the answer's header lines, "Name: value\r\n" each (cut short
                                    when longer: nothing the service sends comes near) */
    long connects;               /* connections opened for this call: 0 when one was reused */
    long local_port;             /* the local port of the connection the answer came on */
} http_reply;

/*
 * Finds the header `name` (any case) in a block of "Name: value\r\n" lines and copies its
 * value, without the blanks around it, to out (len bytes, cut short when longer). Returns
 * whether the block has it; out is "" when not.
 */
bool header_in(const char *block, const char *name, char *out, size_t len);

/*
 * Makes one call on handle h and fills *out. The handle is reset first, so no option of a
 * previous call leaks into this one (the reset keeps its open connections: keep-alive still
 * works). out->body is malloc'd, "" when the answer had none; the caller frees it whether
 * the call succeeded or not. Returns 0 when an answer came, -1 when none did (out->error
 * says why). Thread-safe as long as no two threads share h.
 */
int http_do(CURL *h, const http_request *rq, http_reply *out);

/* Main thread: makes the call, fails the case when no answer came. The reply is owned by
 * the case. */
http_reply *call(const http_request *rq);

/* call() of GET base+path. */
http_reply *get(const char *base, const char *path);

/* The value of the answer's header `name` (any case) in out; false, out "", without one. */
bool reply_header(const http_reply *r, const char *name, char *out, size_t len);

/* raw_exchange() on the main thread: the answer parsed into a reply owned by the case (its
 * status, header lines, Content-Type and body). Fails the case when no HTTP answer came. */
http_reply *raw_call(const char *base, const char *request);

/* ------------------------------------------------------------------------------------------
 * api.c: the service's answers, checked
 * ------------------------------------------------------------------------------------------ */

typedef struct stock_view {
    long long initial, stock, sold, orders, oversold;
} stock_view;

/* Whether a Content-Type value is `type`, optionally followed by parameters. */
bool content_type_is(const char *value, const char *type);

/* Asserts that r has `status`, Content-Type application/json and a JSON object body (parsed
 * with duplicate keys refused); returns the object, owned by the case. */
json_t *expect_json(const http_reply *r, long status, const char *what);

/* A field of obj, of that type; fails the case (naming `what`) when it is missing or of
 * another type. */
long long field_int(const json_t *obj, const char *key, const char *what);
const char *field_str(const json_t *obj, const char *key, const char *what);
bool field_bool(const json_t *obj, const char *key, const char *what);

/* Asserts that obj's field `key` is `want`. */
void expect_field_int(const json_t *obj, const char *key, long long want, const char *what);
void expect_field_str(const json_t *obj, const char *key, const char *want, const char *what);

/* Asserts an error answer: status, JSON, ok false and the error code. Returns the object. */
json_t *expect_error(const http_reply *r, long status, const char *error, const char *what);

/* The index of a replica's instance name, or -1. */
int instance_index(const char *name);

/* GET /api/stock/{id} through nginx: asserts the 200 answer's six fields and the oversold
 * arithmetic, and returns the figures. */
stock_view stock_get(long long goods_id);

/* The figures once they stop changing: the same twice, a second apart (a transaction whose
 * commit answer was lost may still land), at most 15 s. */
stock_view stock_settled(long long goods_id);

/* Asserts goods_id's four figures (stock_get). */
void expect_stock(long long goods_id, long long initial, long long stock, long long sold,
                  long long orders, const char *what);

/* expect_stock() with the figures of `before`: nothing changed. */
void expect_unchanged(long long goods_id, const stock_view *before, const char *what);

/* POST /api/admin/reset through nginx with the token; asserts the 200 answer. */
void reset_goods(long long goods_id, long long stock);
/* The same reset, through nginx, its answer whatever it is. */
http_reply *reset_call(long long goods_id, long long stock);

/* Writes a deduct body: {"goods_id":..,"count":..} plus "mode" when mode is not NULL. */
void deduct_body(char *buf, size_t len, long long goods_id, long long count, const char *mode);

/* POST `path` (the deduct endpoint, maybe with a query) on base; `key`, when not NULL, is
 * sent as the Idempotency-Key. */
http_reply *deduct_at(const char *base, const char *path, long long goods_id, long long count,
                      const char *mode, const char *key);

/* deduct_at() on /api/deduct. */
http_reply *deduct(const char *base, long long goods_id, long long count, const char *mode,
                   const char *key);

/* Asserts a 200 deduct answer with all its fields: remaining is checked unless it is -1, and
 * instance must be one of the replicas'. Returns the object. */
json_t *expect_deducted(const http_reply *r, long long goods_id, long long count,
                        long long remaining, const char *mode, const char *what);

/* The value of one series of a replica's /metrics, named as the exposition writes it
 * (labels included). Fails the case when the series is missing. */
double metric_value(const char *base, const char *series);

/* ------------------------------------------------------------------------------------------
 * ctl.c: other programs (redis-cli, the stack script) and the database
 * ------------------------------------------------------------------------------------------ */

/*
 * Runs argv[0] (looked up on PATH unless it has a '/') in directory `dir` (NULL: here), with
 * the inherited environment; its standard output goes to the descriptor out_fd, or is ours
 * when out_fd is -1. Waits at most timeout_s, then kills it. Returns its exit status
 * (0..255), or -1 when it could not be run, died of a signal or overran.
 */
int run_program(const char *dir, int out_fd, double timeout_s, const char *const *argv);

/*
 * Runs `redis-cli -h 127.0.0.1 -p $REDIS_PORT <args>` (up to four; the first NULL ends them)
 * and returns its exit status. What it prints goes to out (when not NULL: its first line,
 * without the newline, "" when none) and nowhere else. redis-cli prints a reply and exits 0
 * even when the reply is an error: a caller that cares reads the reply.
 */
int redis_cli_out(char *out, size_t out_len, const char *a1, const char *a2, const char *a3,
                  const char *a4);

/* redis_cli_out() when the reply does not matter. */
int redis_cli(const char *a1, const char *a2, const char *a3, const char *a4);

/* Runs `scripts/stack.sh <command>` from the project root (the current directory). */
int stack_script(const char *command);

/*
 * Runs one statement on the stack's database directly, outside the service: the database
 * and user scripts/stack.sh creates, on 127.0.0.1:$PG_PORT. Parameters are bigints, the
 * first n of a and b, passed as parameters (never written into the SQL). Sets *rows (when
 * not NULL) to the number of rows the statement changed. With value not NULL the statement
 * is a query, and *value is the first column of its first row (an integer; 0 when there is
 * no row). Returns 0, or -1 with the reason in err.
 */
int sql_run(const char *sql, int n, long long a, long long b, long *rows, long long *value,
            char *err, size_t errlen);

/* sql_run() with two parameters that must change exactly one row; fails the case else. */
void sql_exec(const char *sql, long long a, long long b);

/* sql_run() for a query with n (0 or 1) parameters and an integer answer; fails the case on
 * error. */
long long sql_value(const char *sql, int n, long long a);

/* ------------------------------------------------------------------------------------------
 * load.c: concurrent load, many threads, each with its own handle, one request at a time
 * ------------------------------------------------------------------------------------------ */

typedef struct load_counts {
    int by_status[600]; /* index: HTTP status; [0]: no answer */
    int commit_unknown; /* 503s that say the sale may have happened */
    int allowed_503;    /* 503s with the plan's allowed_503 error (well-formed, sold nothing) */
    int bad_answer;     /* a 200 or 409 whose body is not the documented one */
    int per_instance[MAX_REPLICAS];
    char note[320]; /* the first surprising answer, for the report */
} load_counts;

/* One request of a plan, as its history records it (load.c). */
typedef struct load_op {
    long long t_invoke, t_done; /* CLOCK_MONOTONIC ns; t_invoke 0: never sent */
    int process;                /* the thread that sent it, from 1 */
    long status;                /* 0: no answer */
    long long remaining, order_id; /* of a 200; -1: absent */
    char error[24];                /* the answer's "error" field, or "" */
} load_op;

typedef struct load_plan {
    const char *label;
    const char *base;
    char path[96];
    char body[160];
    long long goods_id;
    const char *mode; /* expected in every 200 */
    /* A 503 error this mode may answer under load by design, counted in allowed_503 (pg-
     * optimistic's "conflict" when a request runs out of retries); NULL: none. */
    const char *allowed_503;
    int total; /* requests over all threads */
    int threads;
    _Atomic double until; /* now_s() after which no request is started; 0: none (the case
                             may move it while the threads run) */
    long timeout_ms;      /* each request's; 0: g_env.timeout_ms */

    atomic_int next;              /* the next request number to claim */
    pthread_barrier_t start_line; /* every thread has its handle before the first request */
    pthread_mutex_t mu;           /* guards the merged counts below */
    load_counts counts;
    long long *order_ids; /* of the 200 answers, n_ok of them */
    long long *remaining;
    atomic_int n_ok;
    double *latency; /* of every answer, n_timed of them (seconds) */
    atomic_int n_timed;
    double seconds;
    /* The history: every request carries an X-Request-Id "<id_prefix>-<n>" (which the sale
     * writes into its order row, at no cost: what settles an unknown outcome) and is
     * recorded in ops[n]. */
    load_op *ops;
    char id_prefix[24];
    long long stock_before; /* the read that opens the history, */
    long long read_invoke, read_done; /* sent and answered then (CLOCK_MONOTONIC ns) */
    int started;            /* threads that took a process number (under mu) */
    /* The checker's verdict on the history (load_run): LOAD_LINEARIZABLE_* */
    int verdict;
    double check_seconds;   /* what the check took */
    char history_path[512]; /* the history; its checker's output is beside it, ".check.txt" */
} load_plan;

/* load_plan.verdict: build/check-history's exit status, or one of the last two. */
enum {
    LOAD_LINEARIZABLE_YES = 0,
    LOAD_LINEARIZABLE_NO = 1,
    LOAD_LINEARIZABLE_MALFORMED = 2,
    LOAD_LINEARIZABLE_UNKNOWN = 3,
    LOAD_LINEARIZABLE_ERROR = 4,     /* the checker could not be run, or died */
    LOAD_LINEARIZABLE_UNCHECKED = 5, /* no history written */
};

/* A plan for `total` deductions of 1 of goods_id in `mode` (in the body), sent to base by
 * `threads` threads. Owned by the case. */
load_plan *load_plan_new(const char *label, const char *base, long long goods_id, const char *mode,
                         int total, int threads);

/* Runs the plan's threads to the end and prints what they saw. Then writes the run's
 * history, in the project's history format (docs/history.md: a read of the stock, then every
 * request's invocation and completion, with a "request_id" each), to
 * STACK_HISTORY_DIR/<label>.jsonl (the label's odd characters as '-'; without
 * STACK_HISTORY_DIR, a directory of its own under TMPDIR, named once), runs build/check-history
 * on it (CHECK_HISTORY, else the check-history beside this program's build: <build>/tests/
 * stack/test_x -> <build>/check-history; 20 s of search at most, then "unknown"), and sets
 * p->verdict. Asserts nothing about the verdict: the expect_ functions below do. */
void load_run(load_plan *p);

/* The verdict's word: "yes", "no", "malformed", "unknown", "error", "unchecked". */
const char *load_verdict_name(int verdict);

/* The history of a mode meant to be safe is linearizable: fails the case else, naming the
 * history and the checker's window that no order explains. */
void expect_linearizable(const load_plan *p);

/* The history of a load whose books broke (an oversell) is not linearizable: a checker that
 * says yes there cannot see what the books see. Fails the case else. */
void expect_not_linearizable(const load_plan *p);

/* qsort()'s comparison of two long longs. */
int cmp_ll(const void *a, const void *b);

/* How many values of v[0..n) are repeats of another (v is sorted in place). */
int count_repeats(long long *v, int n);

/* Every answer of the plan was a 200, a well-formed 409, or a 503 with the plan's allowed_503
 * error (counted in counts.allowed_503; a plan without one allows none). */
void expect_only_200_409(const load_plan *p);

/* The exact figures of a correct mode: `stock` units sold once each, the rest refused, and
 * its history linearizable (expect_linearizable). */
void expect_exact_sale(load_plan *p, long long stock);

#endif
