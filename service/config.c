/*
 * config.c - the service's settings, read from environment variables.
 *
 * Design: one table, settings[], says everything about every setting: the variable,
 * where it goes in service_config, its default, its bounds and its meaning. Loading, the
 * --help text and docs/configuration.md's table are all produced from it, so they cannot disagree.
 * Even the defaults are written as text and go through the same parser as a value from the
 * environment: a default that breaks its own bounds fails every start (and the tests).
 *
 * Numbers are parsed strictly, by hand rather than with strtol(): strtol accepts leading
 * spaces, a '+' sign and trailing garbage ("80x"), and silently clamps on overflow. Here a
 * value is digits only, with a leading '-' only where the bounds allow negatives, and must
 * fit in its bounds; anything else stops the start-up with one line naming the variable,
 * the rule and the value ("LOCK_WAIT_MS: must be an integer from 0 to 600000, got 'abc'").
 * Secrets (ADMIN_TOKEN, DATABASE_URL which may carry a password) are never echoed.
 */
#include "service/config.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lock/redlock.h"
#include "service/log.h"

enum setting_kind { KIND_INT, KIND_INT64, KIND_STRING };

typedef struct setting {
    const char *var;                  /* the environment variable */
    enum setting_kind kind;           /* how the field is stored */
    size_t offset;                    /* offsetof(service_config, field) */
    size_t size;                      /* strings: sizeof the field, terminator included */
    const char *def;                  /* the default, as text */
    int64_t min, max;                 /* numbers: the bounds; strings: the length bounds */
    bool (*valid)(const char *value); /* strings: an extra check, or NULL */
    const char *rule;                 /* strings: what a value must be, for errors and help;
                                         NULL: "<min> to <max> characters" */
    bool secret;                      /* never echo the value */
    const char *help;                 /* what it means */
} setting;

static bool valid_instance(const char *value);
static bool valid_ipv4(const char *value);
static bool valid_visible(const char *value);
static bool valid_log_level(const char *value);
static bool valid_on_off(const char *value);
static bool valid_redlock_nodes(const char *value);
static bool valid_etcd_endpoint(const char *value);
static bool valid_zookeeper_hosts(const char *value);

#define FIELD(f) offsetof(service_config, f), sizeof(((service_config *)0)->f)
#define NUMBER(var, kind, f, def, lo, hi, help)                                                    \
    {                                                                                              \
        var, kind, offsetof(service_config, f), 0, def, lo, hi, NULL, NULL, false, help            \
    }

/* clang-format off */
static const setting settings[] = {
    NUMBER("PORT", KIND_INT, port, "8081", 1, 65535,
           "TCP port this replica listens on"),
    {"BIND_ADDRESS", KIND_STRING, FIELD(bind_address), "127.0.0.1", 7, 15,
     valid_ipv4, "an IPv4 address such as 127.0.0.1 or 0.0.0.0", false,
     "address to listen on (0.0.0.0 inside a container)"},
    {"INSTANCE", KIND_STRING, FIELD(instance), "svc-1", 1, 63,
     valid_instance, "1 to 63 characters of A-Za-z0-9_.-", false,
     "this replica's name, reported in answers and recorded with each order"},
    {"DATABASE_URL", KIND_STRING, FIELD(database_url),
     "host=127.0.0.1 port=15432 user=stock dbname=stock", 1, 1023, NULL, NULL, true,
     "libpq connection string of the stock database"},
    {"REDIS_HOST", KIND_STRING, FIELD(redis_host), "127.0.0.1", 1, 255,
     valid_visible, "1 to 255 characters, no spaces", false,
     "Redis host name or address"},
    NUMBER("REDIS_PORT", KIND_INT, redis_port, "16379", 1, 65535,
           "Redis port"),
    {"REDIS_SENTINELS", KIND_STRING, FIELD(redis_sentinels), "", 0, 1023,
     valid_visible, "host:port,host:port,... with no spaces", false,
     "when set, the Redis master is found through these Sentinels and followed across a "
     "failover (REDIS_HOST/PORT are used only if none answers at start)"},
    {"REDIS_MASTER_NAME", KIND_STRING, FIELD(redis_master_name), "stock", 1, 127,
     valid_visible, "1 to 127 characters, no spaces", false,
     "the name the Sentinels know the master by"},
    {"REDIS_CLUSTER_NODES", KIND_STRING, FIELD(redis_cluster_nodes), "", 0, 1023,
     valid_visible, "host:port,host:port,... with no spaces", false,
     "when set, the redis lock runs on this Redis Cluster (any of its nodes: the slot map is "
     "read from them), its names carry a hash tag (lock:goods:{N}), and REDIS_HOST/PORT are "
     "not used; not with REDIS_SENTINELS nor LOCK_SYNC_REPLICAS"},
    NUMBER("LOCK_SYNC_REPLICAS", KIND_INT, lock_sync_replicas, "0", 0, 16,
           "after each lock acquisition, WAIT for this many Redis replicas (200 ms at most); "
           "fewer: the lock is released and the request answered 503"),
    {"MODE", KIND_STRING, FIELD(default_mode), "redis", 1, 31,
     valid_visible, "1 to 31 characters, no spaces", false,
     "default deduction mode when a request names none (see GET /api/modes)"},
    NUMBER("WORKER_THREADS", KIND_INT, worker_threads, "64", 1, 1024,
           "worker threads: requests that may wait (a sale, a lab step) run at once, each "
           "on one; more queue (their connections suspended) until one is free"),
    NUMBER("MAX_CONNECTIONS", KIND_INT, max_connections, "2048", 16, 65536,
           "client connections held at once; one more is answered 503 unavailable at once "
           "and closed (the open-file limit lowers it, with a warning at start)"),
    NUMBER("LOCK_WAIT_MS", KIND_INT64, lock_wait_ms, "2000", 0, 600000,
           "how long a request waits for a lock before answering 503 lock_timeout"),
    NUMBER("BATCH_MAX", KIND_INT, batch_max, "64", 1, 1024,
           "redis-batch: requests sold in one transaction at most"),
    NUMBER("BATCH_QUEUE_MAX", KIND_INT, batch_queue_max, "1024", 1, 100000,
           "redis-batch: requests waiting for a batch per goods at most; more answer 503 at once"),
    NUMBER("BATCH_WAIT_MS", KIND_INT64, batch_wait_ms, "2000", 1, 600000,
           "redis-batch: how long a request that does not lead a batch waits for its answer "
           "(in the queue, or in a batch not yet committing) before 503 lock_timeout, nothing "
           "sold; 0 would answer every such request 503"),
    NUMBER("SHARD_SEGMENTS", KIND_INT, shard_segments, "8", 1, 64,
           "redis-sharded: segments a goods' stock is split into (the same on every replica)"),
    NUMBER("SHARD_TRY_MS", KIND_INT64, shard_try_ms, "0", 0, 1000,
           "redis-sharded: how long a sale waits for a segment's lock before moving on to the "
           "next (0: one try)"),
    NUMBER("LOCK_LEASE_MS", KIND_INT64, lock_lease_ms, "30000", 300, 600000,
           "lease of a Redis lock; the watchdog renews it every lease/3 while held (a new "
           "holding starts with LOCK_WAITER_LIVENESS_MS, if shorter, until its first renewal)"),
    NUMBER("LOCK_MAX_HOLD_MS", KIND_INT64, lock_max_hold_ms, "60000", 1000, 3600000,
           "the watchdog stops renewing a lock held this long: a stuck holder's lease runs out"),
    {"LOCK_FAIR", KIND_STRING, FIELD(lock_fair), "on", 2, 3, valid_on_off, "on or off",
     false,
     "on: lock waiters of every replica stand in one line in Redis and a free lock goes to the "
     "longest waiting; off: to whichever replica's waiter reaches Redis first (every replica "
     "should agree)"},
    NUMBER("LOCK_WAITER_LIVENESS_MS", KIND_INT64, lock_waiter_liveness_ms, "1500", 30, 600000,
           "a lock waiter's place in line lapses this long after its last call (it calls every "
           "third of it): the waiters of a replica that died leave the line by themselves; also "
           "the first lease of a holding, so a holding whose taker never heard of it ends as soon"),
    NUMBER("LOCK_FIXED_LEASE_MS", KIND_INT64, lock_fixed_lease_ms, "2000", 100, 600000,
           "lease of the ladder's Redis rungs that have no watchdog (setnx-ttl ... "
           "redis-nowatchdog)"),
    {"FAULTS", KIND_STRING, FIELD(faults), "off", 2, 3, valid_on_off,
     "on or off", false,
     "on: a request may inject a fault with the X-Fault header (for the ladder's "
     "demonstrations; never in production); off: X-Fault answers 400"},
    NUMBER("LAB_HOLD_MS", KIND_INT64, lab_hold_ms, "60000", 100, 600000,
           "the lab (FAULTS=on): how long a request held with X-Fault: hold-at may stay held in "
           "all, from its start; then it runs to its answer by itself"),
    NUMBER("LAB_STEP_WAIT_MS", KIND_INT64, lab_step_wait_ms, "5000", 10, 60000,
           "the lab: how long POST /api/lab/step waits for the stepped request to hold again or "
           "answer before it answers \"running\""),
    NUMBER("OPTIMISTIC_RETRIES", KIND_INT, optimistic_retries, "16", 0, 1000,
           "pg-optimistic, pg-serializable: times a transaction that lost its race is run again "
           "before 503 conflict"),
    NUMBER("LOCKROW_TTL_MS", KIND_INT64, lockrow_ttl_ms, "30000", 100, 600000,
           "pg-lockrow-ttl: how long a lock row lives; a taker may delete one older than this"),
    {"ADMIN_TOKEN", KIND_STRING, FIELD(admin_token), "", 0, 255,
     valid_visible, "at most 255 visible ASCII characters, no spaces", true,
     "when set, POST /api/admin/reset requires 'Authorization: Bearer <token>'"},
    NUMBER("BUSINESS_DELAY_MS", KIND_INT64, business_delay_ms, "0", 0, 60000,
           "sleep between reading and writing the stock, to widen the race window"),
    {"DB_PIPELINE", KIND_STRING, FIELD(db_pipeline), "on", 2, 3, valid_on_off, "on or off",
     false,
     "on: a fenced holder's sale sends its statements to PostgreSQL in two round trips "
     "(libpq's pipeline mode), and so do the batched sale and the PostgreSQL rungs' fixed "
     "sequences; off: one statement per round trip (the same statements, for comparison)"},
    NUMBER("DB_POOL_SIZE", KIND_INT, db_pool_size, "16", 1, 256,
           "PostgreSQL connections per replica"),
    NUMBER("REDIS_POOL_SIZE", KIND_INT, redis_pool_size, "16", 1, 256,
           "Redis command connections per replica"),
    NUMBER("DB_WAIT_MS", KIND_INT64, db_wait_ms, "2000", 0, 600000,
           "how long a request waits for a pooled PostgreSQL connection before a 503"),
    NUMBER("DB_REPLY_TIMEOUT_MS", KIND_INT, db_reply_timeout_ms, "6000", 100, 600000,
           "how long any PostgreSQL round trip, and a sale's round trips together, may take "
           "before the request answers 503"),
    NUMBER("DB_IDLE_IN_TX_MS", KIND_INT, db_idle_in_tx_ms, "30000", 0, 3600000,
           "the database's lease on a transaction: PostgreSQL ends a session left idle inside "
           "one this long (idle_in_transaction_session_timeout), freeing its row locks, as when "
           "a replica frozen mid-sale never comes back; TCP keepalives end one whose host "
           "vanished; 0: no bound"),
    NUMBER("REDIS_TIMEOUT_MS", KIND_INT64, redis_timeout_ms, "500", 10, 60000,
           "Redis connect and command timeout"),
    NUMBER("CONNECTION_TIMEOUT_S", KIND_INT, connection_timeout_s, "30", 1, 3600,
           "an idle or slow client connection is closed after this many seconds"),
    {"MIGRATIONS_DIR", KIND_STRING, FIELD(migrations_dir), "migrations", 1, 511, NULL,
     NULL, false, "directory of the numbered NNN_*.sql schema files"},
    {"ETCD_ENDPOINT", KIND_STRING, FIELD(etcd_endpoint), "", 0, 255,
     valid_etcd_endpoint, "empty, or an http:// URL of at most 255 characters, no spaces",
     false, "client URL of etcd; empty: this replica neither offers nor lists the etcd mode "
     "(its lease is LOCK_LEASE_MS, in whole seconds)"},
    NUMBER("ETCD_TIMEOUT_MS", KIND_INT64, etcd_timeout_ms, "1000", 10, 60000,
           "bound on each etcd request (the lock's watch waits up to LOCK_WAIT_MS)"),
    {"ZOOKEEPER_HOSTS", KIND_STRING, FIELD(zookeeper_hosts), "", 0, 255,
     valid_zookeeper_hosts, "empty, or host:port,host:port,... (A-Za-z0-9.-_ hosts)",
     false, "the ZooKeeper ensemble; empty: this replica neither offers nor lists the zookeeper "
     "mode (its session timeout is LOCK_LEASE_MS, within the server's min/maxSessionTimeout)"},
    NUMBER("ZOOKEEPER_TIMEOUT_MS", KIND_INT, zookeeper_timeout_ms, "1000", 10, 60000,
           "how long a request waits for a connected ZooKeeper session before a 503"),
    {"LOG_LEVEL", KIND_STRING, FIELD(log_level), "info", 1, 15,
     valid_log_level, "one of debug, info, warn, error", false,
     "least important log lines written to stderr"},
    {"REDLOCK_NODES", KIND_STRING, FIELD(redlock_nodes), "", 0, 1023,
     valid_redlock_nodes, "empty, or host:port,host:port,... (1 to 9 distinct nodes)",
     false,
     "the independent Redis servers of the redlock mode; empty: the mode is not served"},
    NUMBER("REDLOCK_TIMEOUT_MS", KIND_INT, redlock_timeout_ms, "100", 1, 10000,
           "redlock: connect and command timeout per node (short beside the lease: a dead "
           "node must cost little of the validity)"),
    NUMBER("REDLOCK_LEASE_MS", KIND_INT64, redlock_lease_ms, "0", 0, 600000,
           "redlock: the lease it asks every node for; 0: LOCK_FIXED_LEASE_MS (the ladder "
           "gives it its own, longer than a server's restart on a busy machine)"),
};
/* clang-format on */

#undef NUMBER
#undef FIELD

#define CONFIG__N_SETTINGS (sizeof(settings) / sizeof(settings[0]))

static bool valid_instance(const char *value)
{
    for (const char *p = value; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '.' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

static bool valid_ipv4(const char *value)
{
    struct in_addr addr;
    /* inet_pton accepts only the dotted quad (no "127.1", no octal), which is what we want. */
    return inet_pton(AF_INET, value, &addr) == 1;
}

static bool valid_visible(const char *value)
{
    for (const unsigned char *p = (const unsigned char *)value; *p != '\0'; p++) {
        if (*p <= 0x20 || *p >= 0x7f)
            return false;
    }
    return true;
}

static bool valid_on_off(const char *value)
{
    return strcmp(value, "on") == 0 || strcmp(value, "off") == 0;
}

static bool valid_redlock_nodes(const char *value)
{
    redlock_node nodes[REDLOCK_MAX_NODES];
    char err[128];
    int n;

    return value[0] == '\0' ||
           redlock_parse_nodes(value, nodes, REDLOCK_MAX_NODES, &n, err, sizeof(err)) == 0;
}

static bool valid_log_level(const char *value)
{
    return log_level_parse(value) >= 0;
}

/* Empty (no etcd) or a plain-HTTP URL: the lock speaks etcd's gateway without TLS, so an
 * https:// endpoint, or a host alone, would only fail later, at the first etcd request. */
static bool valid_etcd_endpoint(const char *value)
{
    if (value[0] == '\0')
        return true;
    return strncmp(value, "http://", 7) == 0 && value[7] != '\0' && valid_visible(value);
}

/* Empty (no ZooKeeper) or a list of host:port the C client accepts: it would take a bad
 * list at start-up and only fail later, at every request. */
static bool valid_zookeeper_hosts(const char *value)
{
    const char *p = value;

    if (value[0] == '\0')
        return true;
    for (;;) {
        const char *host = p;
        int64_t port = 0;

        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
               *p == '.' || *p == '-' || *p == '_')
            p++;
        if (p == host || *p != ':')
            return false;
        p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9' && port <= 65535)
            port = port * 10 + (*p++ - '0');
        if (port < 1 || port > 65535)
            return false;
        if (*p == '\0')
            return true;
        if (*p++ != ',')
            return false;
    }
}

int config__parse_integer(const char *text, int64_t min, int64_t max, int64_t *out)
{
    const char *p = text;
    bool negative = false;
    int64_t v = 0;

    if (*p == '-' && min < 0) {
        negative = true;
        p++;
    }
    if (*p == '\0')
        return -1;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        int digit = *p - '0';
        /* Accumulate towards the sign's side so that INT64_MIN, whose magnitude does not
         * fit in an int64_t, parses too; the builtins catch any overflow. */
        if (__builtin_mul_overflow(v, 10, &v))
            return -1;
        if (negative ? __builtin_sub_overflow(v, digit, &v) : __builtin_add_overflow(v, digit, &v))
            return -1;
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Copies value into buf for an error line: control and non-ASCII bytes as '?', cut with
 * "..." after 40 characters so that one bad value cannot flood the line. */
static const char *printable_echo(char *buf, size_t len, const char *value)
{
    size_t i = 0, max = len > 44 ? 40 : (len > 4 ? len - 4 : 0);

    for (; value[i] != '\0' && i < max; i++) {
        unsigned char c = (unsigned char)value[i];
        buf[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    if (value[i] != '\0' && len >= 4) {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
    return buf;
}

static int load_number(const setting *s, const char *value, service_config *out, char *err,
                       size_t errlen)
{
    int64_t v;
    char echo[48];

    if (config__parse_integer(value, s->min, s->max, &v) < 0) {
        snprintf(err, errlen, "%s: must be an integer from %lld to %lld, got '%s'", s->var,
                 (long long)s->min, (long long)s->max, printable_echo(echo, sizeof(echo), value));
        return -1;
    }
    if (s->kind == KIND_INT)
        *(int *)(void *)((char *)out + s->offset) = (int)v; /* bounds fit an int */
    else
        *(int64_t *)(void *)((char *)out + s->offset) = v;
    return 0;
}

static void string_rule(const setting *s, char *buf, size_t len)
{
    if (s->rule != NULL)
        snprintf(buf, len, "%s", s->rule);
    else if (s->min > 0)
        snprintf(buf, len, "%lld to %lld characters", (long long)s->min, (long long)s->max);
    else
        snprintf(buf, len, "at most %lld characters", (long long)s->max);
}

static int load_string(const setting *s, const char *value, service_config *out, char *err,
                       size_t errlen)
{
    size_t n = strlen(value);
    char rule[96], echo[48];

    if ((int64_t)n < s->min || (int64_t)n > s->max || (s->valid != NULL && !s->valid(value))) {
        string_rule(s, rule, sizeof(rule));
        if (s->secret)
            snprintf(err, errlen, "%s: must be %s (the value is not shown, %zu characters)", s->var,
                     rule, n);
        else
            snprintf(err, errlen, "%s: must be %s, got '%s'", s->var, rule,
                     printable_echo(echo, sizeof(echo), value));
        return -1;
    }
    /* max < size is checked by the tests for every row, so this always fits. */
    memcpy((char *)out + s->offset, value, n + 1);
    return 0;
}

const char *config_lookup_env(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

int config_load(service_config *out, config_lookup_fn lookup, void *ctx, char *err, size_t errlen)
{
    int rc = 0;

    if (errlen > 0)
        err[0] = '\0';
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < CONFIG__N_SETTINGS && rc == 0; i++) {
        const setting *s = &settings[i];
        const char *value = lookup != NULL ? lookup(s->var, ctx) : NULL;
        if (value == NULL)
            value = s->def; /* unset; a variable set to "" is a value, and checked as one */
        if (s->kind == KIND_STRING)
            rc = load_string(s, value, out, err, errlen);
        else
            rc = load_number(s, value, out, err, errlen);
    }
    return rc;
}

/* What a value may be, for the help and the documentation. */
static void describe_allowed(const setting *s, char *buf, size_t len)
{
    if (s->kind == KIND_STRING)
        string_rule(s, buf, len);
    else
        snprintf(buf, len, "integer %lld..%lld", (long long)s->min, (long long)s->max);
}

void config_print_help(void *file)
{
    FILE *f = file;
    char allowed[96];

    fprintf(f, "Settings, from environment variables (unset means the default):\n\n");
    for (size_t i = 0; i < CONFIG__N_SETTINGS; i++) {
        const setting *s = &settings[i];
        describe_allowed(s, allowed, sizeof(allowed));
        const char *quote = strchr(s->def, ' ') != NULL ? "'" : ""; /* as a shell would need */
        fprintf(f, "  %s=%s%s%s\n      %s (%s)\n", s->var, quote, s->def, quote, s->help, allowed);
    }
}

void config_print_markdown(void *file)
{
    FILE *f = file;
    char allowed[96];

    fprintf(f, "| Variable | Default | Allowed | Meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < CONFIG__N_SETTINGS; i++) {
        const setting *s = &settings[i];
        describe_allowed(s, allowed, sizeof(allowed));
        fprintf(f, "| `%s` | %s%s%s | %s | %s |\n", s->var, s->def[0] ? "`" : "(empty)", s->def,
                s->def[0] ? "`" : "", allowed, s->help);
    }
}

size_t config__count(void)
{
    return CONFIG__N_SETTINGS;
}

int config__describe(size_t i, const char **var, const char **def, size_t *size, int64_t *max)
{
    if (i >= CONFIG__N_SETTINGS)
        return -1;
    const setting *s = &settings[i];
    *var = s->var;
    *def = s->def;
    *size = s->size;
    *max = s->max;
    return 0;
}
