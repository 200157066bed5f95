/*
 * test_config.c - configuration loading: the defaults, every bound of every number, strict
 * integer syntax, string lengths and shapes, and the one-line errors. The environment is
 * a table handed to config_load() through its lookup function, never setenv(): the tests
 * do not depend on (or change) the environment they run in.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/config.h"

typedef struct env_var {
    const char *name, *value;
} env_var;

/* ctx: an env_var array ended by {NULL, NULL}. */
static const char *lookup(const char *name, void *ctx)
{
    const env_var *vars = ctx;
    for (size_t i = 0; vars[i].name != NULL; i++) {
        if (strcmp(vars[i].name, name) == 0)
            return vars[i].value;
    }
    return NULL;
}

/* Loads with one variable set; returns config_load's result, err filled. */
static int load_one(const char *name, const char *value, service_config *cfg, char *err,
                    size_t errlen)
{
    env_var vars[] = {{name, value}, {NULL, NULL}};
    return config_load(cfg, lookup, vars, err, errlen);
}

static void assert_refused(const char *name, const char *value, const char *want_err)
{
    service_config cfg;
    char err[512];

    if (load_one(name, value, &cfg, err, sizeof(err)) != -1)
        fail_msg("%s='%s' accepted", name, value);
    if (want_err != NULL)
        assert_string_equal(err, want_err);
}

static void assert_accepted(const char *name, const char *value, service_config *cfg)
{
    char err[512] = "";

    if (load_one(name, value, cfg, err, sizeof(err)) != 0)
        fail_msg("%s='%s' refused: %s", name, value, err);
}

/* The numeric settings, their bounds and where each lands. */
typedef struct number_case {
    const char *var;
    int64_t min, max;
} number_case;

static const number_case numbers[] = {
    {"PORT", 1, 65535},
    {"REDIS_PORT", 1, 65535},
    {"WORKER_THREADS", 1, 1024},
    {"MAX_CONNECTIONS", 16, 65536},
    {"LOCK_WAIT_MS", 0, 600000},
    {"BATCH_WAIT_MS", 1, 600000}, /* 0 would answer every request but a batch's leader 503 */
    {"LOCK_LEASE_MS", 300, 600000},
    {"BUSINESS_DELAY_MS", 0, 60000},
    {"DB_POOL_SIZE", 1, 256},
    {"REDIS_POOL_SIZE", 1, 256},
    {"DB_WAIT_MS", 0, 600000},
    {"REDIS_TIMEOUT_MS", 10, 60000},
    {"CONNECTION_TIMEOUT_S", 1, 3600},
    {"ETCD_TIMEOUT_MS", 10, 60000},
    {"ZOOKEEPER_TIMEOUT_MS", 10, 60000},
};

static int64_t number_field(const service_config *c, const char *var)
{
    if (strcmp(var, "PORT") == 0)
        return c->port;
    if (strcmp(var, "REDIS_PORT") == 0)
        return c->redis_port;
    if (strcmp(var, "WORKER_THREADS") == 0)
        return c->worker_threads;
    if (strcmp(var, "MAX_CONNECTIONS") == 0)
        return c->max_connections;
    if (strcmp(var, "LOCK_WAIT_MS") == 0)
        return c->lock_wait_ms;
    if (strcmp(var, "BATCH_WAIT_MS") == 0)
        return c->batch_wait_ms;
    if (strcmp(var, "LOCK_LEASE_MS") == 0)
        return c->lock_lease_ms;
    if (strcmp(var, "BUSINESS_DELAY_MS") == 0)
        return c->business_delay_ms;
    if (strcmp(var, "DB_POOL_SIZE") == 0)
        return c->db_pool_size;
    if (strcmp(var, "REDIS_POOL_SIZE") == 0)
        return c->redis_pool_size;
    if (strcmp(var, "DB_WAIT_MS") == 0)
        return c->db_wait_ms;
    if (strcmp(var, "REDIS_TIMEOUT_MS") == 0)
        return c->redis_timeout_ms;
    if (strcmp(var, "CONNECTION_TIMEOUT_S") == 0)
        return c->connection_timeout_s;
    if (strcmp(var, "ETCD_TIMEOUT_MS") == 0)
        return c->etcd_timeout_ms;
    if (strcmp(var, "ZOOKEEPER_TIMEOUT_MS") == 0)
        return c->zookeeper_timeout_ms;
    fail_msg("no field for %s", var);
    return -1;
}

static void test_defaults(void **state)
{
    env_var none[] = {{NULL, NULL}};
    service_config cfg;
    char err[256] = "";

    (void)state;
    assert_int_equal(config_load(&cfg, lookup, none, err, sizeof(err)), 0);
    assert_string_equal(err, "");
    assert_int_equal(cfg.port, 8081);
    assert_string_equal(cfg.bind_address, "127.0.0.1");
    assert_string_equal(cfg.instance, "svc-1");
    assert_string_equal(cfg.database_url, "host=127.0.0.1 port=15432 user=stock dbname=stock");
    assert_string_equal(cfg.redis_host, "127.0.0.1");
    assert_int_equal(cfg.redis_port, 16379);
    assert_string_equal(cfg.default_mode, "redis");
    assert_int_equal(cfg.worker_threads, 64);
    assert_int_equal(cfg.max_connections, 2048);
    assert_int_equal(cfg.lock_wait_ms, 2000);
    assert_int_equal(cfg.lock_lease_ms, 30000);
    assert_string_equal(cfg.admin_token, "");
    assert_int_equal(cfg.business_delay_ms, 0);
    assert_int_equal(cfg.db_pool_size, 16);
    assert_int_equal(cfg.redis_pool_size, 16);
    assert_int_equal(cfg.db_wait_ms, 2000);
    assert_int_equal(cfg.redis_timeout_ms, 500);
    assert_int_equal(cfg.connection_timeout_s, 30);
    assert_string_equal(cfg.migrations_dir, "migrations");
    assert_string_equal(cfg.etcd_endpoint, ""); /* no etcd: the etcd mode is not offered */
    assert_int_equal(cfg.etcd_timeout_ms, 1000);
    assert_string_equal(cfg.zookeeper_hosts, ""); /* no ZooKeeper: no zookeeper mode */
    assert_int_equal(cfg.zookeeper_timeout_ms, 1000);
    assert_string_equal(cfg.log_level, "info");

    /* No lookup at all: the same defaults. */
    memset(&cfg, 0x5a, sizeof(cfg));
    assert_int_equal(config_load(&cfg, NULL, NULL, err, sizeof(err)), 0);
    assert_int_equal(cfg.port, 8081);
    assert_string_equal(cfg.instance, "svc-1");
}

static void test_table_rows_fit_their_fields(void **state)
{
    const char *var, *def;
    size_t size;
    int64_t max;

    (void)state;
    assert_true(config__count() >= 19);
    for (size_t i = 0; i < config__count(); i++) {
        assert_int_equal(config__describe(i, &var, &def, &size, &max), 0);
        assert_non_null(var);
        assert_non_null(def);
        if (size > 0) {
            /* A string of the longest allowed length still fits with its terminator. */
            if ((uint64_t)max >= size)
                fail_msg("%s: max length %lld does not fit %zu bytes", var, (long long)max, size);
        } else {
            /* The int fields are stored as int: their bounds must fit. */
            assert_true(max <= INT_MAX);
        }
        for (size_t j = i + 1; j < config__count(); j++) {
            const char *var2, *def2;
            size_t size2;
            int64_t max2;
            assert_int_equal(config__describe(j, &var2, &def2, &size2, &max2), 0);
            assert_string_not_equal(var, var2);
        }
    }
    assert_int_equal(config__describe(config__count(), &var, &def, &size, &max), -1);
}

static void test_every_number_bound(void **state)
{
    service_config cfg;
    char text[32], want[160];

    (void)state;
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
        const number_case *n = &numbers[i];

        snprintf(text, sizeof(text), "%lld", (long long)n->min);
        assert_accepted(n->var, text, &cfg);
        assert_int_equal(number_field(&cfg, n->var), n->min);

        snprintf(text, sizeof(text), "%lld", (long long)n->max);
        assert_accepted(n->var, text, &cfg);
        assert_int_equal(number_field(&cfg, n->var), n->max);

        snprintf(text, sizeof(text), "%lld", (long long)(n->min - 1));
        snprintf(want, sizeof(want), "%s: must be an integer from %lld to %lld, got '%s'", n->var,
                 (long long)n->min, (long long)n->max, text);
        assert_refused(n->var, text, want);

        snprintf(text, sizeof(text), "%lld", (long long)(n->max + 1));
        snprintf(want, sizeof(want), "%s: must be an integer from %lld to %lld, got '%s'", n->var,
                 (long long)n->min, (long long)n->max, text);
        assert_refused(n->var, text, want);
    }
}

static void test_bad_numbers(void **state)
{
    static const char *const bad[] = {
        "",
        "abc",
        " 2000",
        "2000 ",
        "+2000",
        "2000.0",
        "2e3",
        "0x7d0",
        "2,000",
        "2_000",
        "--1",
        "-",
        "-0",
        "1-",
        "\t1",
        "1\n",
        "２",
        "20 00",
        "99999999999999999999",
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775808",
        "18446744073709551616",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_refused("LOCK_WAIT_MS", bad[i], NULL);
    assert_refused("LOCK_WAIT_MS", "abc",
                   "LOCK_WAIT_MS: must be an integer from 0 to 600000, got 'abc'");
    assert_refused("PORT", "", "PORT: must be an integer from 1 to 65535, got ''");
    assert_refused("PORT", "99999999999999999999",
                   "PORT: must be an integer from 1 to 65535, got '99999999999999999999'");
}

static void test_leading_zeros_are_digits(void **state)
{
    service_config cfg;

    (void)state;
    /* Digits only, so "0080" is 80: a decimal number, never octal. */
    assert_accepted("PORT", "0080", &cfg);
    assert_int_equal(cfg.port, 80);
}

static void test_bad_value_is_echoed_safely(void **state)
{
    char value[200], want[200];

    (void)state;
    memset(value, '7', 100);
    value[0] = 'x';
    value[100] = '\0';
    snprintf(want, sizeof(want), "PORT: must be an integer from 1 to 65535, got '%.40s...'", value);
    assert_refused("PORT", value, want);
    assert_refused("PORT", "8\n1\x1b", "PORT: must be an integer from 1 to 65535, got '8?1?'");
}

static void test_parse_integer_signs(void **state)
{
    int64_t v = 0;

    (void)state;
    assert_int_equal(config__parse_integer("-5", -10, 10, &v), 0);
    assert_int_equal(v, -5);
    assert_int_equal(config__parse_integer("-10", -10, 10, &v), 0);
    assert_int_equal(v, -10);
    assert_int_equal(config__parse_integer("-11", -10, 10, &v), -1);
    assert_int_equal(config__parse_integer("-", -10, 10, &v), -1);
    assert_int_equal(config__parse_integer("--5", -10, 10, &v), -1);
    assert_int_equal(config__parse_integer("+5", -10, 10, &v), -1);
    assert_int_equal(config__parse_integer("-5", 0, 10, &v), -1); /* no sign when min >= 0 */
    assert_int_equal(config__parse_integer("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
    assert_true(v == INT64_MIN);
    assert_int_equal(config__parse_integer("9223372036854775807", INT64_MIN, INT64_MAX, &v), 0);
    assert_true(v == INT64_MAX);
    assert_int_equal(config__parse_integer("-9223372036854775809", INT64_MIN, INT64_MAX, &v), -1);
    assert_int_equal(config__parse_integer("9223372036854775808", INT64_MIN, INT64_MAX, &v), -1);
    v = 42;
    assert_int_equal(config__parse_integer("x", INT64_MIN, INT64_MAX, &v), -1);
    assert_int_equal(v, 42); /* untouched on failure */
}

static void test_instance(void **state)
{
    service_config cfg;
    char name[80];

    (void)state;
    assert_accepted("INSTANCE", "a.b_c-D9", &cfg);
    assert_string_equal(cfg.instance, "a.b_c-D9");
    memset(name, 'i', 63);
    name[63] = '\0';
    assert_accepted("INSTANCE", name, &cfg);
    assert_string_equal(cfg.instance, name);
    name[63] = 'i';
    name[64] = '\0';
    assert_refused("INSTANCE", name, NULL);
    assert_refused("INSTANCE", "", "INSTANCE: must be 1 to 63 characters of A-Za-z0-9_.-, got ''");
    assert_refused("INSTANCE", "svc 1",
                   "INSTANCE: must be 1 to 63 characters of A-Za-z0-9_.-, got 'svc 1'");
    assert_refused("INSTANCE", "svc/1", NULL);
    assert_refused("INSTANCE", "svc=1", NULL);
    assert_refused("INSTANCE", "svc\"1", NULL);
    assert_refused("INSTANCE", "svc-\xc3\xa9", NULL);
}

static void test_log_level(void **state)
{
    service_config cfg;

    (void)state;
    assert_accepted("LOG_LEVEL", "debug", &cfg);
    assert_string_equal(cfg.log_level, "debug");
    assert_accepted("LOG_LEVEL", "WARN", &cfg);
    assert_accepted("LOG_LEVEL", "error", &cfg);
    assert_refused("LOG_LEVEL", "loud",
                   "LOG_LEVEL: must be one of debug, info, warn, error, got 'loud'");
    assert_refused("LOG_LEVEL", "", NULL);
    assert_refused("LOG_LEVEL", "info ", NULL);
    assert_refused("LOG_LEVEL", "verbose-debugging-everything", NULL);
}

static void test_bind_address(void **state)
{
    service_config cfg;

    (void)state;
    assert_accepted("BIND_ADDRESS", "0.0.0.0", &cfg);
    assert_string_equal(cfg.bind_address, "0.0.0.0");
    assert_accepted("BIND_ADDRESS", "10.1.2.3", &cfg);
    assert_refused("BIND_ADDRESS", "localhost",
                   "BIND_ADDRESS: must be an IPv4 address such as 127.0.0.1 or 0.0.0.0, "
                   "got 'localhost'");
    assert_refused("BIND_ADDRESS", "", NULL);
    assert_refused("BIND_ADDRESS", "256.0.0.1", NULL);
    assert_refused("BIND_ADDRESS", "127.1", NULL);
    assert_refused("BIND_ADDRESS", "127.0.0.1 ", NULL);
    assert_refused("BIND_ADDRESS", "::1", NULL);
}

static void test_secrets_are_not_echoed(void **state)
{
    service_config cfg;
    char err[512], value[1100];

    (void)state;
    assert_accepted("ADMIN_TOKEN", "s3cret-token_1", &cfg);
    assert_string_equal(cfg.admin_token, "s3cret-token_1");

    assert_int_equal(load_one("ADMIN_TOKEN", "my s3cret", &cfg, err, sizeof(err)), -1);
    assert_true(strncmp(err, "ADMIN_TOKEN: ", 13) == 0);
    assert_null(strstr(err, "s3cret"));

    memset(value, 'p', 256);
    value[256] = '\0';
    assert_int_equal(load_one("ADMIN_TOKEN", value, &cfg, err, sizeof(err)), -1);
    assert_null(strstr(err, "ppp"));
    value[255] = '\0';
    assert_accepted("ADMIN_TOKEN", value, &cfg);

    /* A connection string may carry a password. */
    memset(value, 'w', 1024);
    memcpy(value, "password=", 9);
    value[1024] = '\0';
    assert_int_equal(load_one("DATABASE_URL", value, &cfg, err, sizeof(err)), -1);
    assert_true(strncmp(err, "DATABASE_URL: ", 14) == 0);
    assert_null(strstr(err, "password"));
    value[1023] = '\0';
    assert_accepted("DATABASE_URL", value, &cfg);
    assert_int_equal(strlen(cfg.database_url), 1023);
    assert_refused("DATABASE_URL", "", NULL);
}

static void test_string_lengths(void **state)
{
    service_config cfg;
    char value[600];

    (void)state;
    memset(value, 'm', 31);
    value[31] = '\0';
    assert_accepted("MODE", value, &cfg);
    assert_string_equal(cfg.default_mode, value);
    value[31] = 'm';
    value[32] = '\0';
    assert_refused("MODE", value, NULL);
    assert_refused("MODE", "", NULL);
    assert_refused("MODE", "red is", NULL);

    memset(value, 'h', 256);
    value[256] = '\0';
    assert_refused("REDIS_HOST", value, NULL);
    value[255] = '\0';
    assert_accepted("REDIS_HOST", value, &cfg);
    assert_refused("REDIS_HOST", "", NULL);

    memset(value, 'd', 512);
    value[512] = '\0';
    assert_refused("MIGRATIONS_DIR", value, NULL);
    value[511] = '\0';
    assert_accepted("MIGRATIONS_DIR", value, &cfg);
    assert_accepted("MIGRATIONS_DIR", "/opt/stock service/migrations", &cfg);
}

static void test_etcd_endpoint(void **state)
{
    service_config cfg;
    char value[300];

    (void)state;
    assert_accepted("ETCD_ENDPOINT", "", &cfg);
    assert_string_equal(cfg.etcd_endpoint, "");
    assert_accepted("ETCD_ENDPOINT", "http://127.0.0.1:12379", &cfg);
    assert_string_equal(cfg.etcd_endpoint, "http://127.0.0.1:12379");
    assert_refused("ETCD_ENDPOINT", "127.0.0.1:12379",
                   "ETCD_ENDPOINT: must be empty, or an http:// URL of at most 255 characters, "
                   "no spaces, got '127.0.0.1:12379'");
    assert_refused("ETCD_ENDPOINT", "https://etcd:2379", NULL); /* no TLS in the client */
    assert_refused("ETCD_ENDPOINT", "http://", NULL);
    assert_refused("ETCD_ENDPOINT", "http://etcd :2379", NULL);
    memcpy(value, "http://", 7);
    memset(value + 7, 'e', 249);
    value[256] = '\0';
    assert_refused("ETCD_ENDPOINT", value, NULL);
    value[255] = '\0';
    assert_accepted("ETCD_ENDPOINT", value, &cfg);
}

static void test_zookeeper_hosts(void **state)
{
    service_config cfg;

    (void)state;
    assert_accepted("ZOOKEEPER_HOSTS", "", &cfg);
    assert_string_equal(cfg.zookeeper_hosts, "");
    assert_accepted("ZOOKEEPER_HOSTS", "127.0.0.1:12181", &cfg);
    assert_string_equal(cfg.zookeeper_hosts, "127.0.0.1:12181");
    assert_accepted("ZOOKEEPER_HOSTS", "zk-1:2181,zk-2:2181,zk_3.local:2181", &cfg);
    assert_refused("ZOOKEEPER_HOSTS", "127.0.0.1",
                   "ZOOKEEPER_HOSTS: must be empty, or host:port,host:port,... (A-Za-z0-9.-_ "
                   "hosts), got '127.0.0.1'");
    assert_refused("ZOOKEEPER_HOSTS", "zk:0", NULL);
    assert_refused("ZOOKEEPER_HOSTS", "zk:65536", NULL);
    assert_refused("ZOOKEEPER_HOSTS", "zk:2181,", NULL);
    assert_refused("ZOOKEEPER_HOSTS", ":2181", NULL);
    assert_refused("ZOOKEEPER_HOSTS", "zk :2181", NULL);
    assert_refused("ZOOKEEPER_HOSTS", "zk:2181/chroot", NULL);
}

static void test_first_bad_variable_is_reported(void **state)
{
    env_var vars[] = {
        {"LOG_LEVEL", "loud"},
        {"PORT", "0"},
        {"INSTANCE", "svc-2"},
        {NULL, NULL},
    };
    service_config cfg;
    char err[256];

    (void)state;
    assert_int_equal(config_load(&cfg, lookup, vars, err, sizeof(err)), -1);
    assert_string_equal(err, "PORT: must be an integer from 1 to 65535, got '0'");
}

static void test_several_variables(void **state)
{
    env_var vars[] = {
        {"PORT", "8083"},        {"INSTANCE", "svc-3"},  {"MODE", "local"},
        {"LOCK_WAIT_MS", "0"},   {"ADMIN_TOKEN", "t0k"}, {"BUSINESS_DELAY_MS", "5"},
        {"REDIS_HOST", "redis"}, {NULL, NULL},
    };
    service_config cfg;
    char err[256] = "";

    (void)state;
    assert_int_equal(config_load(&cfg, lookup, vars, err, sizeof(err)), 0);
    assert_int_equal(cfg.port, 8083);
    assert_string_equal(cfg.instance, "svc-3");
    assert_string_equal(cfg.default_mode, "local");
    assert_int_equal(cfg.lock_wait_ms, 0);
    assert_string_equal(cfg.admin_token, "t0k");
    assert_int_equal(cfg.business_delay_ms, 5);
    assert_string_equal(cfg.redis_host, "redis");
    assert_int_equal(cfg.redis_port, 16379); /* untouched ones keep their default */
}

static void test_small_error_buffer(void **state)
{
    service_config cfg;
    char err[12];

    (void)state;
    memset(err, 'x', sizeof(err));
    assert_int_equal(load_one("PORT", "abc", &cfg, err, sizeof(err)), -1);
    assert_string_equal(err, "PORT: must "); /* 11 characters and the terminator */
    assert_int_equal(load_one("PORT", "abc", &cfg, NULL, 0), -1);
}

static void test_help_and_markdown_list_every_setting(void **state)
{
    char *help = NULL, *md = NULL;
    size_t help_len = 0, md_len = 0, rows = 0;
    const char *var, *def;
    size_t size;
    int64_t max;
    FILE *f;

    (void)state;
    f = open_memstream(&help, &help_len);
    assert_non_null(f);
    config_print_help(f);
    fclose(f);
    f = open_memstream(&md, &md_len);
    assert_non_null(f);
    config_print_markdown(f);
    fclose(f);

    for (size_t i = 0; i < config__count(); i++) {
        char want[64];
        assert_int_equal(config__describe(i, &var, &def, &size, &max), 0);
        snprintf(want, sizeof(want), "  %s=", var);
        if (strstr(help, want) == NULL)
            fail_msg("--help lacks %s", var);
        snprintf(want, sizeof(want), "| `%s` |", var);
        if (strstr(md, want) == NULL)
            fail_msg("markdown lacks %s", var);
    }
    assert_non_null(strstr(help, "LOCK_WAIT_MS=2000\n"));
    assert_non_null(strstr(help, "integer 0..600000"));
    assert_non_null(strstr(help, "DATABASE_URL='host=127.0.0.1 port=15432 user=stock "
                                 "dbname=stock'"));
    for (const char *p = md; (p = strchr(p, '\n')) != NULL; p++)
        rows++;
    assert_int_equal(rows, config__count() + 2); /* header, rule, one row each */
    free(help);
    free(md);
}

/*
 * docs/configuration.md, the reference the README links to, holds the table --help-markdown
 * prints, as the code has it now: a setting added, renamed or given another default without
 * the document made anew (build/stockd --help-markdown) fails here. The tests run from the
 * repository's root (TEST_DOCS_DIR overrides where docs/ is).
 */
static void test_configuration_document_is_current(void **state)
{
    const char *dir = getenv("TEST_DOCS_DIR");
    char path[512], *md = NULL, *doc;
    size_t md_len = 0, doc_len;
    FILE *f;
    long size;

    (void)state;
    snprintf(path, sizeof(path), "%s/configuration.md", dir != NULL ? dir : "docs");
    f = open_memstream(&md, &md_len);
    assert_non_null(f);
    config_print_markdown(f);
    fclose(f);
    f = fopen(path, "r");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    size = ftell(f);
    assert_true(size > 0);
    rewind(f);
    doc_len = (size_t)size;
    doc = malloc(doc_len + 1);
    assert_non_null(doc);
    assert_int_equal(fread(doc, 1, doc_len, f), doc_len);
    doc[doc_len] = '\0';
    fclose(f);
    if (strstr(doc, md) == NULL)
        fail_msg("%s is not the table build/stockd --help-markdown prints: make it anew", path);
    free(doc);
    free(md);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_table_rows_fit_their_fields),
        cmocka_unit_test(test_every_number_bound),
        cmocka_unit_test(test_bad_numbers),
        cmocka_unit_test(test_leading_zeros_are_digits),
        cmocka_unit_test(test_bad_value_is_echoed_safely),
        cmocka_unit_test(test_parse_integer_signs),
        cmocka_unit_test(test_instance),
        cmocka_unit_test(test_log_level),
        cmocka_unit_test(test_bind_address),
        cmocka_unit_test(test_secrets_are_not_echoed),
        cmocka_unit_test(test_string_lengths),
        cmocka_unit_test(test_etcd_endpoint),
        cmocka_unit_test(test_zookeeper_hosts),
        cmocka_unit_test(test_first_bad_variable_is_reported),
        cmocka_unit_test(test_several_variables),
        cmocka_unit_test(test_small_error_buffer),
        cmocka_unit_test(test_help_and_markdown_list_every_setting),
        cmocka_unit_test(test_configuration_document_is_current),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
