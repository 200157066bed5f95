/*
 * lock_support.c - the server, the fixtures and the tools of the Redis lock's test programs.
 * See lock_support.h.
 */
#include "tests/lock/lock_support.h"
#include "tests/support/cases.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

test_state g_state;
static const char *g_program = "test_lock"; /* the running program's name, for messages */

int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A command on the test's own connection, reconnected if Redis was restarted. */
static redisReply *redis_vcmd(const char *fmt, va_list ap)
{
    if (g_state.redis == NULL || g_state.redis->err != 0) {
        if (g_state.redis != NULL)
            redisFree(g_state.redis);
        g_state.redis = redisConnect("127.0.0.1", g_state.port);
    }
    return redisvCommand(g_state.redis, fmt, ap);
}

redisReply *redis_cmd(const char *fmt, ...)
{
    redisReply *r;
    va_list ap;

    va_start(ap, fmt);
    r = redis_vcmd(fmt, ap);
    va_end(ap);
    return r;
}

long long redis_int(const char *fmt, ...)
{
    redisReply *r;
    long long v = -1000;
    va_list ap;

    va_start(ap, fmt);
    r = redis_vcmd(fmt, ap);
    va_end(ap);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* Sends a command that answers +OK or a status; fails the test otherwise. */
void redis_ok(const char *cmd)
{
    redisReply *r = redis_cmd(cmd);

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* A client of the test's redis-server; 0 keeps an option's default. */
lock_client *new_client_with(int64_t watchdog_lease_ms, int command_timeout_ms)
{
    lock_options o;
    lock_client *c = NULL;

    lock_options_init(&o);
    o.redis_port = g_state.port;
    if (watchdog_lease_ms > 0)
        o.watchdog_lease_ms = watchdog_lease_ms;
    if (command_timeout_ms > 0)
        o.command_timeout_ms = command_timeout_ms;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

lock_client *new_client(int64_t watchdog_lease_ms)
{
    return new_client_with(watchdog_lease_ms, 0);
}

/* Subscribers to a channel, as Redis counts them. */
long long numsub(const char *channel)
{
    redisReply *r = redis_cmd("PUBSUB NUMSUB %s", channel);
    long long n = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        n = r->element[1]->integer;
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

/* Polls until numsub(channel) == want or timeout_ms; returns whether it got there. */
bool wait_numsub(const char *channel, long long want, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * MS;

    while (numsub(channel) != want) {
        if (now_ns() >= until)
            return false;
        sleep_ms(5);
    }
    return true;
}

/* The number that follows `prefix` in INFO <section>; -1 if the prefix is absent. */
long long info_number(const char *section, const char *prefix)
{
    redisReply *r = redis_cmd("INFO %s", section);
    const char *p;
    long long n = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, prefix)) != NULL)
        n = atoll(p + strlen(prefix));
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

/* EVALSHA commands Redis has run since it started (INFO commandstats); -1 if unknown. */
long long evalsha_calls(void)
{
    return info_number("commandstats", "cmdstat_evalsha:calls=");
}

/* Polls until evalsha_calls() >= want (5 s at most); returns whether it got there. */
bool wait_evalsha(long long want)
{
    int64_t until = now_ns() + 5000 * MS;

    while (evalsha_calls() < want) {
        if (now_ns() >= until)
            return false;
        sleep_ms(1);
    }
    return true;
}

/* Client connections Redis has open now. */
long long connected_clients(void)
{
    return info_number("clients", "connected_clients:");
}

/* The id of the (first) client in pub/sub mode, from CLIENT LIST; -1 if none. */
long long pubsub_client_id(void)
{
    redisReply *r = redis_cmd("CLIENT LIST TYPE pubsub");
    long long id = -1;

    if (r != NULL && r->type == REDIS_REPLY_STRING && strncmp(r->str, "id=", 3) == 0)
        id = atoll(r->str + 3);
    if (r != NULL)
        freeReplyObject(r);
    return id;
}

/* Whether CLIENT LIST mentions `needle`. */
bool client_list_has(const char *needle)
{
    redisReply *r = redis_cmd("CLIENT LIST");
    bool found = r != NULL && r->type == REDIS_REPLY_STRING && strstr(r->str, needle) != NULL;

    if (r != NULL)
        freeReplyObject(r);
    return found;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The median and the 99th percentile of v[0..n) (sorts v). */
int64_t percentile(int64_t *v, size_t n, int pct)
{
    size_t i;

    qsort(v, n, sizeof(*v), cmp_i64);
    i = n * (size_t)pct / 100;
    return v[i < n ? i : n - 1];
}

/* Another owner's call, on a thread of its own (lock_support.h). */
static void *bg_main(void *arg)
{
    bg_call *b = arg;

    b->started_ns = now_ns();
    if (b->unlock_only) {
        b->rc = lock_unlock(b->c, b->name);
    } else {
        b->rc = lock_try_lock(b->c, b->name, b->wait_ms, b->lease_ms, &b->token);
        b->done_ns = now_ns();
        b->handoff_us = lock_last_handoff_us();
        if (b->rc == LOCK_OK && b->unlock_after)
            b->unlock_rc = lock_unlock(b->c, b->name);
    }
    if (b->unlock_only)
        b->done_ns = now_ns();
    return NULL;
}

void bg_start(bg_call *b)
{
    assert_int_equal(pthread_create(&b->thread, NULL, bg_main, b), 0);
}

void bg_join(bg_call *b)
{
    assert_int_equal(pthread_join(b->thread, NULL), 0);
}

/* try_lock by another owner, waited for; returns its code (released again if unlock). */
int other_try_lock(lock_client *c, const char *name, int64_t wait_ms, bool unlock)
{
    bg_call b = {
        .c = c, .name = name, .wait_ms = wait_ms, .lease_ms = 10000, .unlock_after = unlock};

    bg_start(&b);
    bg_join(&b);
    if (b.rc == LOCK_OK && unlock)
        assert_int_equal(b.unlock_rc, LOCK_OK);
    return b.rc;
}

int other_unlock(lock_client *c, const char *name)
{
    bg_call b = {.c = c, .name = name, .unlock_only = true};

    bg_start(&b);
    bg_join(&b);
    return b.rc;
}


static int group_setup(void **state)
{
    /* hiredis writes with write(2): a write to a connection Redis closed must fail with
     * EPIPE, not kill the test (the service ignores SIGPIPE the same way). */
    signal(SIGPIPE, SIG_IGN);
    if (redis_server_start(&g_state.srv) != 0)
        return -1;
    g_state.port = redis_server_port(g_state.srv);
    *state = &g_state;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (g_state.redis != NULL)
        redisFree(g_state.redis);
    redis_server_destroy(g_state.srv);
    return 0;
}

int case_setup(void **state)
{
    lock_options o;
    redisReply *r;

    (void)state;
    r = redis_cmd("FLUSHALL");
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        return -1;
    freeReplyObject(r);
    lock_options_init(&o);
    o.redis_port = g_state.port;
    return lock_client_create(&o, &g_state.client) == LOCK_OK ? 0 : -1;
}

int case_teardown(void **state)
{
    (void)state;
    lock_client_destroy(g_state.client);
    g_state.client = NULL;
    /* A setting a case changed goes back to the value it read, even when an assertion
     * failed on the way (this runs all the same). Not a default written here: the server's
     * own value depends on the open-file limit it started under. */
    if (g_state.maxclients[0] != '\0') {
        redisReply *r = redis_cmd("CONFIG SET maxclients %s", g_state.maxclients);
        bool ok = r != NULL && r->type == REDIS_REPLY_STATUS;

        if (r != NULL)
            freeReplyObject(r);
        if (!ok) {
            fprintf(stderr, "%s: could not restore maxclients to %s\n", g_program,
                    g_state.maxclients);
            return -1;
        }
        g_state.maxclients[0] = '\0';
    }
    return 0;
}

/* Remembers maxclients as the server has it now, for case_teardown to restore. */
void save_maxclients(void)
{
    redisReply *r = redis_cmd("CONFIG GET maxclients");

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    snprintf(g_state.maxclients, sizeof(g_state.maxclients), "%s", r->element[1]->str);
    freeReplyObject(r);
}

pid_t spawn_role(const char *role, int fd)
{
    char port[16], fd_text[16];
    pid_t child;

    snprintf(port, sizeof(port), "%d", g_state.port);
    snprintf(fd_text, sizeof(fd_text), "%d", fd);
    child = fork();
    if (child == 0) {
        execl("/proc/self/exe", g_program, role, port, fd_text, (char *)NULL);
        _exit(127);
    }
    return child;
}

lock_client *child_client(int port)
{
    lock_options o;
    lock_client *cc = NULL;

    lock_options_init(&o);
    o.redis_port = port;
    return lock_client_create(&o, &cc) == LOCK_OK ? cc : NULL;
}

int lock_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                   char **argv)
{
    if (support_list_cases(tests, n, argc, argv))
        return 0;
    g_program = name;
    return support_run_cases(name, tests, n, argc, argv, group_setup, group_teardown);
}
