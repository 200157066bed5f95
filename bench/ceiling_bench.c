/*
 * ceiling_bench.c - the serial ceiling of each mode: how many deductions per second one
 * client gets when nothing else competes, with no HTTP in the way.
 *
 *   ceiling-bench [--modes none,local,redis] [--seconds 3] [--goods-id 1]
 *                 [--stock 1000000000] [--database-url CONNINFO] [--redis-host HOST]
 *                 [--redis-port PORT] [--pipeline on|off|both] [--repeat 1]
 *
 * For each mode, in order: the goods is reset to a stock too large to run out, a few
 * deductions warm the connections up (they are opened lazily, and each statement is
 * prepared on first use), then one thread calls deduct_execute() in a loop for the given
 * time and one line is printed, after which the goods' books must say every unit sold and
 * nothing else (its stock the reset's less them, its counters as many sold; else the run
 * fails: another client moved them):
 *
 *   CEILING mode=redis ops=3712 seconds=3.001 per_sec=1236.9 failures=0 pipeline=on
 *
 * --pipeline says how the sale talks to PostgreSQL (DB_PIPELINE: the statements in two
 * batches, or one per round trip); `both` measures each mode both ways, one after the
 * other in the same process, against the same servers, so that their ratio is read within
 * one window of a shared machine rather than across two runs. --repeat runs each mode (or
 * each pair) that many times, the pair's order swapped every time (off-on, on-off, ...) so
 * that neither always runs first; with `both`, a last line per mode gives the medians and
 * the ratio of each pair:
 *
 *   COMPARE mode=redis off_median=812.4 on_median=1290.3 ratio_median=1.59 ratios=1.61,1.52,1.66
 *
 * deduct_execute() with the table's mode is the very code a replica runs for
 * POST /api/deduct (service/sale/deduct.c, service/guards/modes.c): guard -> BEGIN -> SELECT ->
 * UPDATE -> INSERT -> COMMIT -> unguard. So for `redis` this is the lock -> transaction ->
 * unlock loop of one client, and for `none` and `local` the same statements with no lock
 * (or an uncontended mutex). The load report (loadtest/run) divides each row's req/s by
 * its mode's figure: how much of one client's serial speed survives HTTP, nginx, three
 * replicas and fifty clients queueing on one lock.
 *
 * Configuration: the service's own variables and defaults (config_load: DATABASE_URL,
 * REDIS_HOST, REDIS_PORT, LOCK_WAIT_MS, LOCK_LEASE_MS, REDIS_TIMEOUT_MS, DB_WAIT_MS,
 * BUSINESS_DELAY_MS), so the benchmark and the replicas it is compared with agree; the
 * flags above override the first three. Exit status: 0 when every mode ran without a
 * failure, 1 when a deduction failed or the books did not balance, 2 on bad usage or
 * configuration.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/clock.h"
#include "db/db.h"
#include "lock/lock.h"
#include "service/config.h"
#include "service/core.h"
#include "service/http/response.h"
#include "service/sale/deduct.h"
#include "service/guards/modes.h"

#define WARMUP_OPS 20
#define MAX_MODES 16
#define MAX_REPEAT 50

enum pipeline_choice { PIPE_CONFIG, PIPE_ON, PIPE_OFF, PIPE_BOTH };

typedef struct bench_options {
    char modes[256]; /* comma-separated mode names */
    double seconds;  /* measured time per mode */
    int64_t goods_id;
    int64_t stock;                 /* the reset stock: must outlast the run */
    enum pipeline_choice pipeline; /* PIPE_CONFIG: DB_PIPELINE as configured */
    int repeat;                    /* measurements (or on/off pairs) per mode */
} bench_options;

static void usage(FILE *to)
{
    fprintf(to, "usage: ceiling-bench [--modes none,local,redis] [--seconds 3] [--goods-id 1]\n"
                "                     [--stock 1000000000] [--database-url CONNINFO]\n"
                "                     [--redis-host HOST] [--redis-port PORT]\n"
                "                     [--pipeline on|off|both] [--repeat 1]\n"
                "One client runs the service's deduction (deduct_execute) in a loop per mode\n"
                "and prints CEILING mode=.. ops=.. seconds=.. per_sec=.. failures=.. pipeline=..\n"
                "--pipeline both measures each mode with and without the pipelined sale, in\n"
                "pairs whose order alternates, and ends with COMPARE mode=.. off_median=..\n"
                "on_median=.. ratio_median=.. ratios=..\n"
                "The service's variables (DATABASE_URL, REDIS_HOST, REDIS_PORT, LOCK_WAIT_MS,\n"
                "...) configure it; the flags override them.\n");
}

/* Parses a whole decimal number within [min, max]. Returns 0 or -1. */
static int parse_int64(const char *text, int64_t min, int64_t max, int64_t *out)
{
    char *end = NULL;
    long long v;

    if (text == NULL || text[0] < '0' || text[0] > '9')
        return -1;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Copies src into a fixed-size field; -1 when it does not fit. */
static int copy_field(char *dst, size_t size, const char *src)
{
    if (strlen(src) >= size)
        return -1;
    memcpy(dst, src, strlen(src) + 1);
    return 0;
}

static bool known_flag(const char *flag)
{
    static const char *const flags[] = {"--modes",      "--seconds",      "--goods-id",
                                        "--stock",      "--database-url", "--redis-host",
                                        "--redis-port", "--pipeline",     "--repeat"};
    size_t i;

    for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        if (strcmp(flag, flags[i]) == 0)
            return true;
    return false;
}

/* Reads the flags into *opts and *cfg; *help is set by --help. Returns 0 or -1 (message
 * printed). */
static int parse_args(int argc, char **argv, bench_options *opts, service_config *cfg, bool *help)
{
    int64_t n = 0;
    int i;

    *help = false;
    for (i = 1; i < argc; i++) {
        const char *flag = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;

        if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) {
            *help = true;
            return 0;
        }
        if (!known_flag(flag)) {
            fprintf(stderr, "ceiling-bench: unknown flag %s\n", flag);
            return -1;
        }
        if (value == NULL) {
            fprintf(stderr, "ceiling-bench: %s needs a value\n", flag);
            return -1;
        }
        i++;
        if (strcmp(flag, "--modes") == 0) {
            if (copy_field(opts->modes, sizeof(opts->modes), value) != 0)
                goto bad;
        } else if (strcmp(flag, "--seconds") == 0) {
            if (parse_int64(value, 1, 3600, &n) != 0)
                goto bad;
            opts->seconds = (double)n;
        } else if (strcmp(flag, "--goods-id") == 0) {
            if (parse_int64(value, 1, INT64_MAX, &opts->goods_id) != 0)
                goto bad;
        } else if (strcmp(flag, "--stock") == 0) {
            if (parse_int64(value, 1, 1000000000, &opts->stock) != 0)
                goto bad;
        } else if (strcmp(flag, "--database-url") == 0) {
            if (copy_field(cfg->database_url, sizeof(cfg->database_url), value) != 0)
                goto bad;
        } else if (strcmp(flag, "--redis-host") == 0) {
            if (copy_field(cfg->redis_host, sizeof(cfg->redis_host), value) != 0)
                goto bad;
        } else if (strcmp(flag, "--redis-port") == 0) {
            if (parse_int64(value, 1, 65535, &n) != 0)
                goto bad;
            cfg->redis_port = (int)n;
        } else if (strcmp(flag, "--pipeline") == 0) {
            if (strcmp(value, "on") == 0)
                opts->pipeline = PIPE_ON;
            else if (strcmp(value, "off") == 0)
                opts->pipeline = PIPE_OFF;
            else if (strcmp(value, "both") == 0)
                opts->pipeline = PIPE_BOTH;
            else
                goto bad;
        } else if (strcmp(flag, "--repeat") == 0) {
            if (parse_int64(value, 1, MAX_REPEAT, &n) != 0)
                goto bad;
            opts->repeat = (int)n;
        } else {
            fprintf(stderr, "ceiling-bench: unknown flag %s\n", flag);
            return -1;
        }
        continue;
    bad:
        fprintf(stderr, "ceiling-bench: bad value for %s: '%s'\n", flag, value);
        return -1;
    }
    return 0;
}

/* Splits opts->modes and looks each name up among the modes `guards` offers (NULL: the
 * service's whole table). Returns the count, or -1 (message printed) for an unknown or not
 * offered name, or too many. */
static int resolve_modes(const bench_options *opts, const guard_env *guards, const mode **out,
                         int max)
{
    char list[sizeof(opts->modes)];
    char *save = NULL, *name;
    int n = 0;

    memcpy(list, opts->modes, sizeof(list));
    for (name = strtok_r(list, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save)) {
        const mode *m = guards != NULL ? modes_find_served(guards, name) : modes_find(name);
        if (m == NULL) {
            char missing[120] = "";
            if (guards != NULL && modes_find(name) != NULL)
                modes_missing(modes_find(name), guards, missing, sizeof(missing));
            fprintf(stderr, "ceiling-bench: unknown mode '%s'%s%s\n", name,
                    missing[0] != '\0' ? " here: it is served only with " : "", missing);
            return -1;
        }
        if (n == max) {
            fprintf(stderr, "ceiling-bench: at most %d modes\n", max);
            return -1;
        }
        out[n++] = m;
    }
    if (n == 0) {
        fprintf(stderr, "ceiling-bench: no mode given\n");
        return -1;
    }
    return n;
}

/* Sets the goods' stock (and creates it if needed). Returns 0 or -1 (message printed). */
static int reset_goods(core *env, int64_t goods_id, int64_t stock)
{
    db_conn *conn = NULL;
    int rc;

    rc = db_pool_acquire(env->db, 5000, &conn);
    if (rc != DB_OK) {
        fprintf(stderr, "ceiling-bench: cannot reach PostgreSQL: %s: %s\n", db_strerror(rc),
                db_last_connect_error());
        return -1;
    }
    rc = db_goods_reset(conn, goods_id, stock);
    if (rc != DB_OK)
        fprintf(stderr, "ceiling-bench: reset of goods %" PRId64 " failed: %s: %s\n", goods_id,
                db_strerror(rc), db_conn_error(conn));
    db_pool_release(env->db, conn);
    return rc == DB_OK ? 0 : -1;
}

/* Whether the goods' books are what its reset and this run's sales make them: every 200 of
 * one client is one unit gone and one unit recorded sold, and nothing else may have moved
 * them (another client on the goods makes the figure no serial ceiling). The stock is the
 * goods' whole, its segments' included (db_stock_report_read), as the modes that split it
 * keep it. Returns 0, or -1 (message printed). */
static int check_books(core *env, const mode *m, int64_t goods_id, int64_t reset, uint64_t sold)
{
    db_conn *conn = NULL;
    db_stock_report r;
    int rc = db_pool_acquire(env->db, 5000, &conn);

    if (rc == DB_OK) {
        rc = db_stock_report_read(conn, goods_id, &r);
        db_pool_release(env->db, conn);
    }
    if (rc != DB_OK) {
        fprintf(stderr, "ceiling-bench: mode %s: the books could not be read: %s\n", m->name,
                db_strerror(rc));
        return -1;
    }
    if (r.stock != reset - (int64_t)sold || r.sold != (int64_t)sold) {
        fprintf(stderr,
                "ceiling-bench: mode %s: the books do not balance: %" PRIu64
                " units sold from %" PRId64 ", the books say stock %" PRId64 " and %" PRId64
                " sold\n",
                m->name, sold, reset, r.stock, r.sold);
        return -1;
    }
    return 0;
}

/* One deduction of one unit; *sold says whether it answered 200 (the first other answer
 * is printed, once per mode through *reported). Returns 0, or -1 when out of memory. */
static int deduct_once(core *env, const mode *m, int64_t goods_id, bool *sold, bool *reported)
{
    deduct_result res;

    if (deduct_execute(&env->deduct, m, goods_id, 1, NULL, NULL, &res) != 0)
        return -1;
    *sold = res.status == 200;
    if (!*sold && !*reported) {
        fprintf(stderr, "ceiling-bench: mode %s: answer %d %s%s%s\n", m->name, res.status,
                res.body != NULL ? res.body : "", res.detail[0] ? " " : "", res.detail);
        *reported = true;
    }
    free(res.body);
    return 0;
}

/* Measures one mode with env's current DB_PIPELINE and prints its CEILING line; *rate gets
 * its sales per second. Returns 0; BENCH_FAILURES when some deductions did not sell or the
 * books do not balance (the line is printed all the same); -1 when the mode could not be
 * measured (message printed). */
#define BENCH_FAILURES (-2)
static int measure_mode(core *env, const mode *m, const bench_options *opts, double *rate)
{
    uint64_t ops = 0, failures = 0;
    bool reported = false, sold = false;
    double start, elapsed;
    int i;

    if (reset_goods(env, opts->goods_id, opts->stock) != 0)
        return -1;
    for (i = 0; i < WARMUP_OPS; i++) {
        if (deduct_once(env, m, opts->goods_id, &sold, &reported) != 0)
            return -1;
        if (!sold) {
            fprintf(stderr, "ceiling-bench: mode %s fails during the warm-up\n", m->name);
            return -1;
        }
    }

    start = bench_now_s();
    do {
        if (deduct_once(env, m, opts->goods_id, &sold, &reported) != 0)
            return -1;
        if (sold)
            ops++;
        else
            failures++;
        elapsed = bench_now_s() - start;
    } while (elapsed < opts->seconds);

    *rate = (double)ops / elapsed;
    printf("CEILING mode=%s ops=%" PRIu64 " seconds=%.3f per_sec=%.1f failures=%" PRIu64
           " pipeline=%s\n",
           m->name, ops, elapsed, *rate, failures, env->deduct.pipeline ? "on" : "off");
    fflush(stdout);
    if (check_books(env, m, opts->goods_id, opts->stock, WARMUP_OPS + ops) != 0)
        return BENCH_FAILURES;
    return failures == 0 ? 0 : BENCH_FAILURES;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The median of v[0..n-1] (n >= 1); sorts v. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(v[0]), cmp_double);
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* Measures one mode opts->repeat times (or pairs) as opts->pipeline says, and prints the
 * COMPARE line for `both`. Returns as measure_mode. */
static int measure_repeated(core *env, const mode *m, const bench_options *opts)
{
    double on[MAX_REPEAT] = {0}, off[MAX_REPEAT] = {0}, ratio[MAX_REPEAT] = {0};
    bool configured = env->deduct.pipeline;
    int r, k, rc, status = 0;

    for (r = 0; r < opts->repeat; r++) {
        int runs = opts->pipeline == PIPE_BOTH ? 2 : 1;
        for (k = 0; k < runs; k++) {
            double rate = 0.0;
            bool with = opts->pipeline == PIPE_BOTH     ? ((r + k) % 2 == 1)
                        : opts->pipeline == PIPE_CONFIG ? configured
                                                        : opts->pipeline == PIPE_ON;
            env->deduct.pipeline = with;
            rc = measure_mode(env, m, opts, &rate);
            if (rc == BENCH_FAILURES)
                status = rc;
            else if (rc != 0)
                return rc;
            (with ? on : off)[r] = rate;
        }
    }
    env->deduct.pipeline = configured;
    if (opts->pipeline != PIPE_BOTH)
        return status;
    for (r = 0; r < opts->repeat; r++)
        ratio[r] = off[r] > 0.0 ? on[r] / off[r] : 0.0;
    printf("COMPARE mode=%s", m->name);
    {
        double o[MAX_REPEAT], n[MAX_REPEAT], q[MAX_REPEAT];
        memcpy(o, off, sizeof(o));
        memcpy(n, on, sizeof(n));
        memcpy(q, ratio, sizeof(q));
        printf(" off_median=%.1f on_median=%.1f ratio_median=%.2f ratios=", median(o, opts->repeat),
               median(n, opts->repeat), median(q, opts->repeat));
    }
    for (r = 0; r < opts->repeat; r++)
        printf("%s%.2f", r > 0 ? "," : "", ratio[r]);
    printf("\n");
    fflush(stdout);
    return status;
}

int main(int argc, char **argv)
{
    bench_options opts = {.modes = "none,local,redis",
                          .seconds = 3.0,
                          .goods_id = 1,
                          .stock = 1000000000,
                          .pipeline = PIPE_CONFIG,
                          .repeat = 1};
    service_config cfg;
    core env = {0};
    const mode *modes[MAX_MODES];
    char err[256];
    bool help = false;
    int n, i, rc, status = 2;

    if (config_load(&cfg, config_lookup_env, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "ceiling-bench: %s\n", err);
        return 2;
    }
    if (parse_args(argc, argv, &opts, &cfg, &help) != 0) {
        usage(stderr);
        return 2;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    n = resolve_modes(&opts, NULL, modes, MAX_MODES);
    if (n < 0)
        return 2;

    /* What a replica builds (service/core.c), with one client's worth of connections. */
    if (core_create(&cfg, 1, 2, "ceiling-bench", &response_sale_bodies, &env, err, sizeof(err)) !=
        0) {
        fprintf(stderr, "ceiling-bench: %s\n", err);
        goto out;
    }
    /* Again, against what this configuration offers (etcd needs ETCD_ENDPOINT). */
    if (resolve_modes(&opts, env.guards, modes, MAX_MODES) < 0)
        goto out;
    status = 0;
    for (i = 0; i < n; i++) {
        rc = measure_repeated(&env, modes[i], &opts);
        if (rc == BENCH_FAILURES) {
            status = 1; /* measured, but say so in the exit status */
        } else if (rc != 0) {
            status = 1;
            goto out;
        }
    }

out:
    core_destroy(&env);
    return status;
}
