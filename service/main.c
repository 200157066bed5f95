/*
 * main.c - stockd, one replica of the stock service.
 *
 *   stockd            serve (configuration from the environment: stockd --help)
 *   stockd migrate    apply pending migrations and exit (safe to run from several
 *                     processes at once: they serialise on a PostgreSQL advisory lock)
 *   stockd --help     list every setting with its default
 *
 * Start-up order: configuration (a bad value stops here with one line), the schema check
 * (a database that is behind stops here too), the modules, then the listener. Shutdown
 * (SIGTERM or SIGINT): stop accepting, let requests in flight finish, then close the
 * listener, the lock client (its watchdog stops renewing) and the pool, and exit 0.
 *
 * Signals are blocked in every thread and taken by the main thread with sigwait(), so no
 * handler ever runs in the middle of a request.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/db.h"
#include "lock/lock.h"
#include "service/app.h"
#include "service/lab/lab.h"
#include "service/clock.h"
#include "service/config.h"
#include "service/http/http.h"
#include "service/http/response.h"
#include "service/log.h"
#include "service/metrics.h"
#include "service/sale/batch.h"
#include "service/guards/modes.h"

/* How long start-up and `migrate` wait for PostgreSQL to come up before giving up. */
#define DB_STARTUP_WAIT_MS 15000
/* Requests in flight get this long past the lock wait bound to finish at shutdown. */
#define DRAIN_SLACK_MS 5000

/* Borrows a connection, retrying while PostgreSQL is still starting. */
static int connect_with_patience(db_pool *pool, db_conn **conn)
{
    int waited = 0, rc;

    for (;;) {
        rc = db_pool_acquire(pool, 1000, conn);
        if (rc != DB_ERR_UNAVAILABLE || waited >= DB_STARTUP_WAIT_MS)
            return rc;
        clock_sleep_ms(500);
        waited += 500;
    }
}

static int open_pool(const service_config *cfg, int size, db_pool **pool)
{
    db_pool_options opts;

    db_pool_options_init(&opts);
    opts.conninfo = cfg->database_url;
    opts.size = size;
    return db_pool_create(&opts, pool);
}

/* `stockd migrate`: exit status 0 when the schema is up to date afterwards. */
static int run_migrate(const service_config *cfg)
{
    db_pool *pool = NULL;
    db_conn *conn = NULL;
    char msg[512] = "";
    int applied = 0, rc, status = 1;

    if (open_pool(cfg, 1, &pool) != DB_OK) {
        fprintf(stderr, "stockd: migrate: out of memory\n");
        return 1;
    }
    rc = connect_with_patience(pool, &conn);
    if (rc != DB_OK) {
        fprintf(stderr, "stockd: migrate: cannot reach PostgreSQL: %s\n", db_last_connect_error());
        goto out;
    }
    rc = db_migrate(conn, cfg->migrations_dir, &applied, msg, sizeof(msg));
    if (rc != DB_OK) {
        fprintf(stderr, "stockd: migrate: %s\n", msg[0] ? msg : db_strerror(rc));
        goto out;
    }
    log_event(LOG_INFO, "migrated", "applied=%d dir=%s", applied, cfg->migrations_dir);
    status = 0;
out:
    if (conn != NULL)
        db_pool_release(pool, conn);
    db_pool_destroy(pool);
    return status;
}

/* Refuses to serve on a schema that is behind the migrations this build ships. */
static int check_schema(const service_config *cfg, db_pool *pool)
{
    db_conn *conn = NULL;
    char msg[512] = "";
    int rc;

    rc = connect_with_patience(pool, &conn);
    if (rc != DB_OK) {
        fprintf(stderr, "stockd: cannot reach PostgreSQL to check the schema: %s\n",
                db_last_connect_error());
        return -1;
    }
    rc = db_schema_check(conn, cfg->migrations_dir, msg, sizeof(msg));
    db_pool_release(pool, conn);
    if (rc != DB_OK) {
        fprintf(stderr, "stockd: the database schema is behind (%s): run `stockd migrate`\n",
                msg[0] ? msg : db_strerror(rc));
        return -1;
    }
    return 0;
}

static metrics *create_metrics(void)
{
    const char *names[32];
    size_t n, i;
    const mode *all = modes_all(&n);

    if (n > sizeof(names) / sizeof(names[0]))
        n = sizeof(names) / sizeof(names[0]);
    for (i = 0; i < n; i++)
        names[i] = all[i].name;
    return metrics_create(names, n);
}

/* What the replica is made of, built from cfg into a (its default mode already checked
 * against the build's table): the core, the check that it serves that mode, the schema's
 * check, the metrics and, with FAULTS=on, the lab's table. 0, or the exit status (1; 2: a
 * configuration error) with the reason on stderr; a half-built a is freed by serve. */
static int build(const service_config *cfg, app *a)
{
    char err[256];

    if (core_create(cfg, cfg->db_pool_size, cfg->redis_pool_size, cfg->instance,
                    &response_sale_bodies, &a->core, err, sizeof(err)) != 0) {
        fprintf(stderr, "stockd: %s\n", err);
        return 1;
    }
    if (!modes_served(a->default_mode, a->core.guards)) {
        char missing[120];
        fprintf(stderr, "stockd: MODE: the mode '%s' is served only with %s set\n",
                cfg->default_mode,
                modes_missing(a->default_mode, a->core.guards, missing, sizeof(missing)));
        return 2; /* a configuration error, like a bad variable */
    }
    if (check_schema(cfg, a->core.db) != 0)
        return 1;
    a->metrics = create_metrics();
    if (a->metrics == NULL) {
        fprintf(stderr, "stockd: out of memory\n");
        return 1;
    }
    if (strcmp(cfg->faults, "on") == 0) {
        a->lab = lab_table_create(cfg->lab_hold_ms, cfg->lab_step_wait_ms);
        if (a->lab == NULL) {
            fprintf(stderr, "stockd: out of memory\n");
            return 1;
        }
    }
    return 0;
}

static int serve(const service_config *cfg)
{
    app a;
    http_server *server = NULL;
    sigset_t stop_signals;
    char err[256];
    int sig = 0, left, status;

    memset(&a, 0, sizeof(a));
    a.config = cfg;
    /* Checked against the build's table now, before anything starts, and against what
     * this replica offers once its guards exist (build). */
    a.default_mode = modes_find(cfg->default_mode);
    if (a.default_mode == NULL) {
        char known[600];
        fprintf(stderr, "stockd: MODE: unknown mode '%s' (known: %s)\n", cfg->default_mode,
                modes_list(known, sizeof(known)));
        return 2;
    }

    /* Block the stop signals before any thread starts, so every thread inherits the mask
     * and only sigwait() below sees them. */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

    status = build(cfg, &a);
    if (status != 0)
        goto out;
    status = 1;
    if (http_start(&a, &server, err, sizeof(err)) != 0) {
        fprintf(stderr, "stockd: %s\n", err);
        goto out;
    }
    /* A batch's next leader runs as a worker's job, as fair as any request (batch.h). */
    batch_queue_set_runner(a.core.deduct.batch, http_run_later, server);
    log_event(LOG_INFO, "listening", "address=%s port=%d instance=%s mode=%s workers=%d",
              cfg->bind_address, cfg->port, cfg->instance, cfg->default_mode, cfg->worker_threads);

    while (sigwait(&stop_signals, &sig) != 0)
        ;
    log_event(LOG_INFO, "stopping", "signal=%s in_flight=%d", sig == SIGTERM ? "TERM" : "INT",
              atomic_load(&a.in_flight));
    lab_table_close(a.lab); /* held requests go on, so that they answer before the drain ends */
    left = http_drain(server, cfg->lock_wait_ms + cfg->db_wait_ms + DRAIN_SLACK_MS);
    if (left > 0)
        log_event(LOG_WARN, "drain_incomplete", "in_flight=%d", left);
    /* From here a batch's leader runs the batches after its own: no job outlives the
     * workers. */
    batch_queue_set_runner(a.core.deduct.batch, NULL, NULL);
    status = 0;

out:
    lab_table_close(a.lab);
    http_stop(server);
    lab_table_destroy(a.lab);
    core_destroy(&a.core);
    metrics_destroy(a.metrics);
    if (status == 0)
        log_event(LOG_INFO, "stopped", "instance=%s", cfg->instance);
    return status;
}

static void usage(FILE *to)
{
    fprintf(to, "usage: stockd [migrate | --help | --help-markdown]\n"
                "Serves the stock service; `migrate` applies pending migrations.\n"
                "Settings come from the environment:\n\n");
    config_print_help(to);
}

int main(int argc, char **argv)
{
    service_config cfg;
    char err[256];
    int level;

    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--help-markdown") == 0) { /* docs/configuration.md's table */
        config_print_markdown(stdout);
        return 0;
    }
    if (argc > 2 ||
        (argc == 2 && strcmp(argv[1], "migrate") != 0 && strcmp(argv[1], "serve") != 0)) {
        usage(stderr);
        return 2;
    }
    if (config_load(&cfg, config_lookup_env, NULL, err, sizeof(err)) != 0) {
        fprintf(stderr, "stockd: %s\n", err);
        return 2;
    }
    level = log_level_parse(cfg.log_level);
    log_min_level = level >= 0 ? level : LOG_INFO;
    /* A peer that hangs up must not kill the process: writes then fail with EPIPE. */
    signal(SIGPIPE, SIG_IGN);

    if (argc == 2 && strcmp(argv[1], "migrate") == 0)
        return run_migrate(&cfg);
    return serve(&cfg);
}
