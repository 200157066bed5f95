/*
 * test_lock.c - the Redis lock (lock/) against a real redis-server.
 *
 * The program starts its own redis-server on a free loopback port in a temporary directory
 * (tests/support/redis_server.c) and stops it at the end, so it runs by itself:
 *     build/san/tests/test_lock
 * Each case gets an empty Redis (FLUSHALL) and a fresh lock_client with default options;
 * cases that need a short watchdog lease make their own client.
 *
 * cmocka's assertions may only run on the main thread (they longjmp), so worker threads
 * and child processes record what they saw and the main thread asserts on it.
 *
 * The cases, in the order of the array at the bottom:
 *   basics              an acquire and release, as seen in Redis; arguments; ping; stats
 *   mutual exclusion    2 processes x 8 threads, 10,000 GET+SET increments under the lock
 *   reentrancy          3 takes, 2 releases: still held and exclusive; 1 more: free
 *   owner check         another thread's unlock fails and leaves the lock alone
 *   lease expiry        a child takes a 300 ms lease and dies: free after it, not before
 *   watchdog            3 x the lease held while others fail; after unlock, nothing renewed
 *   lost lock           the key deleted and retaken behind the holder: is_held says lost
 *   wait bound          try_lock(200 ms) times out in [200 ms, 200 ms + command timeout]
 *   wake-up             16 threads: release -> next acquisition median under 20 ms
 *   fair order          16 queued waiters and a thread barging in: they still acquire in
 *                       the order they queued (the oldest waiter is woken, keeps its place)
 *   fencing             1,000 acquisitions by 8 threads: tokens strictly increase, also
 *                       across a lease that expired in the middle
 *   NOSCRIPT            SCRIPT FLUSH between every step, the watchdog included
 *   subscriber          the pub/sub connection killed: waiters still woken by a release
 *   subscriber idle     one connection kept through quiet times (PING), reused later
 *   Redis down          try_lock errs within the timeout; after a restart all works again
 */
#include "lock/lock.h"
#include "lock/pool.h" /* white-box: the reserved release connection */
#include "tests/support/redis_server.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h> /* cmocka.h needs these three first */
#include <cmocka.h>

#define MS INT64_C(1000000)
#define COMMAND_TIMEOUT_MS 500 /* the default, which the time bounds below are made of */
#define SHORT_LEASE_MS 300     /* watchdog lease of the clients that test renewal */

typedef struct test_state {
    redis_server *srv;
    int port;
    redisContext *redis; /* the test's own connection, to look at and change keys */
    lock_client *client; /* default options, fresh for each case */
    char maxclients[32]; /* the value a case read before lowering it; "" when untouched */
} test_state;

static test_state g_state;

/* ---- helpers ---- */

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A command on the test's own connection (reconnected if Redis was restarted). */
static redisReply *redis_cmd(const char *fmt, ...)
{
    redisReply *r;
    va_list ap;

    if (g_state.redis == NULL || g_state.redis->err != 0) {
        if (g_state.redis != NULL)
            redisFree(g_state.redis);
        g_state.redis = redisConnect("127.0.0.1", g_state.port);
    }
    va_start(ap, fmt);
    r = redisvCommand(g_state.redis, fmt, ap);
    va_end(ap);
    return r;
}

/* A command whose reply is an integer; -1000 if it was not. */
static long long redis_int(const char *fmt, ...)
{
    redisReply *r;
    long long v = -1000;
    va_list ap;

    if (g_state.redis == NULL || g_state.redis->err != 0) {
        if (g_state.redis != NULL)
            redisFree(g_state.redis);
        g_state.redis = redisConnect("127.0.0.1", g_state.port);
    }
    va_start(ap, fmt);
    r = redisvCommand(g_state.redis, fmt, ap);
    va_end(ap);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

/* Sends a command that answers +OK or a status; fails the test otherwise. */
static void redis_ok(const char *cmd)
{
    redisReply *r = redis_cmd(cmd);

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
}

/* A client of the test's redis-server; 0 keeps an option's default. */
static lock_client *new_client_with(int64_t watchdog_lease_ms, int command_timeout_ms)
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

static lock_client *new_client(int64_t watchdog_lease_ms)
{
    return new_client_with(watchdog_lease_ms, 0);
}

/* Subscribers to a channel, as Redis counts them. */
static long long numsub(const char *channel)
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
static bool wait_numsub(const char *channel, long long want, int64_t timeout_ms)
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
static long long info_number(const char *section, const char *prefix)
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

/* Client connections Redis has open now. */
static long long connected_clients(void)
{
    return info_number("clients", "connected_clients:");
}

/* The id of the (first) client in pub/sub mode, from CLIENT LIST; -1 if none. */
static long long pubsub_client_id(void)
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
static bool client_list_has(const char *needle)
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
static int64_t percentile(int64_t *v, size_t n, int pct)
{
    size_t i;

    qsort(v, n, sizeof(*v), cmp_i64);
    i = n * (size_t)pct / 100;
    return v[i < n ? i : n - 1];
}

/*
 * Another owner: a call made from a new thread of this process (a different thread
 * number, so a different owner), started with bg_start and collected with bg_join.
 */
typedef struct bg_call {
    lock_client *c;
    const char *name;
    int64_t wait_ms;
    int64_t lease_ms;
    bool unlock_after; /* release right away if acquired (same thread) */
    bool unlock_only;  /* do not lock: just call unlock */
    int rc;
    int unlock_rc;
    int64_t token;
    int64_t handoff_us; /* lock_last_handoff_us() right after the take */
    int64_t started_ns;
    int64_t done_ns;
    pthread_t thread;
} bg_call;

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

static void bg_start(bg_call *b)
{
    assert_int_equal(pthread_create(&b->thread, NULL, bg_main, b), 0);
}

static void bg_join(bg_call *b)
{
    assert_int_equal(pthread_join(b->thread, NULL), 0);
}

/* try_lock by another owner, waited for; returns its code (released again if unlock). */
static int other_try_lock(lock_client *c, const char *name, int64_t wait_ms, bool unlock)
{
    bg_call b = {
        .c = c, .name = name, .wait_ms = wait_ms, .lease_ms = 10000, .unlock_after = unlock};

    bg_start(&b);
    bg_join(&b);
    if (b.rc == LOCK_OK && unlock)
        assert_int_equal(b.unlock_rc, LOCK_OK);
    return b.rc;
}

static int other_unlock(lock_client *c, const char *name)
{
    bg_call b = {.c = c, .name = name, .unlock_only = true};

    bg_start(&b);
    bg_join(&b);
    return b.rc;
}

/* ---- fixtures ---- */

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

static int case_setup(void **state)
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

static int case_teardown(void **state)
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
            fprintf(stderr, "test_lock: could not restore maxclients to %s\n", g_state.maxclients);
            return -1;
        }
        g_state.maxclients[0] = '\0';
    }
    return 0;
}

/* Remembers maxclients as the server has it now, for case_teardown to restore. */
static void save_maxclients(void)
{
    redisReply *r = redis_cmd("CONFIG GET maxclients");

    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    snprintf(g_state.maxclients, sizeof(g_state.maxclients), "%s", r->element[1]->str);
    freeReplyObject(r);
}

/* ---- basics ---- */

static void test_basics(void **state)
{
    lock_client *c = g_state.client;
    lock_client *bad = NULL;
    lock_options o;
    lock_stats st;
    int64_t token = 0, first;
    redisReply *r;
    char name[600];

    (void)state;
    /* Options and arguments. */
    lock_options_init(&o);
    assert_string_equal(o.redis_host, "127.0.0.1");
    assert_int_equal(o.redis_port, 6379);
    assert_int_equal(o.command_timeout_ms, COMMAND_TIMEOUT_MS);
    assert_int_equal(o.watchdog_lease_ms, 30000);
    o.pool_size = 0;
    assert_int_equal(lock_client_create(&o, &bad), LOCK_ERR_INVALID);
    assert_null(bad);
    lock_client_destroy(NULL);
    assert_int_equal(lock_try_lock(c, "", 0, 1000, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_try_lock(c, NULL, 0, 1000, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_try_lock(c, "t:basic", -1, 1000, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_try_lock(c, "t:basic", 0, 0, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_try_lock(c, "t:basic", 0, -2, NULL), LOCK_ERR_INVALID);
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(lock_try_lock(c, name, 0, 1000, NULL), LOCK_ERR_INVALID);
    for (int code = LOCK_ERR_BUSY; code <= LOCK_OK; code++)
        assert_true(strlen(lock_strerror(code)) > 0);
    assert_int_equal(lock_unlock(c, "t:basic"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_is_held(c, "t:basic"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_ping(c), LOCK_OK);

    /* One acquisition, as Redis shows it: a hash {owner: 1} with a TTL, and a fencing
     * counter started at Redis' clock in microseconds (after 2020: > 1.5e15). */
    assert_int_equal(lock_try_lock(c, "t:basic", 0, 5000, &token), LOCK_OK);
    assert_true(token > INT64_C(1500000000000000));
    first = token;
    assert_int_equal(lock_is_held(c, "t:basic"), LOCK_OK);
    r = redis_cmd("HGETALL t:basic");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    assert_non_null(strchr(r->element[0]->str, ':')); /* "<process id>:<thread number>" */
    assert_int_equal(strlen(strchr(r->element[0]->str, ':') + 1) > 0, 1);
    assert_string_equal(r->element[1]->str, "1");
    freeReplyObject(r);
    long long pttl = redis_int("PTTL t:basic");
    assert_true(pttl > 4000 && pttl <= 5000);
    assert_int_equal(redis_int("TTL t:basic:fence"), -1); /* no TTL: tokens only grow */
    assert_int_equal(redis_int("INCRBY t:basic:fence 0"), token);

    lock_get_stats(c, &st);
    assert_int_equal(st.pool_size, 16);
    assert_int_equal(st.pool_in_use, 0);

    assert_int_equal(lock_unlock(c, "t:basic"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:basic"), 0);
    assert_int_equal(lock_is_held(c, "t:basic"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_unlock(c, "t:basic"), LOCK_ERR_NOT_HELD);

    /* The next holding gets the next token. */
    assert_int_equal(lock_try_lock(c, "t:basic", 0, LOCK_LEASE_WATCHDOG, &token), LOCK_OK);
    assert_int_equal(token, first + 1);
    assert_int_equal(lock_unlock(c, "t:basic"), LOCK_OK);
}

/* ---- mutual exclusion ---- */

#define MX_LOCK "t:mx"
#define MX_COUNTER "t:mx:counter"
#define MX_THREADS 8
#define MX_PER_THREAD 625 /* 2 processes x 8 threads x 625 = 10,000 */

typedef struct mx_worker {
    lock_client *c;
    int port;
    int errors;   /* anything but a clean lock, GET, SET, unlock */
    int timeouts; /* try_lock timed out (retried: not an error) */
    pthread_t thread;
} mx_worker;

/* Increments the counter MX_PER_THREAD times with a GET and a SET under the lock. */
static void *mx_main(void *arg)
{
    mx_worker *w = arg;
    redisContext *r = redisConnect("127.0.0.1", w->port);

    if (r == NULL || r->err != 0) {
        w->errors++;
        goto out;
    }
    for (int i = 0; i < MX_PER_THREAD && w->errors == 0;) {
        redisReply *get, *set;
        long long n;
        int rc = lock_try_lock(w->c, MX_LOCK, 10000, LOCK_LEASE_WATCHDOG, NULL);

        if (rc == LOCK_ERR_TIMEOUT) {
            w->timeouts++;
            continue;
        }
        if (rc != LOCK_OK) {
            w->errors++;
            break;
        }
        get = redisCommand(r, "GET %s", MX_COUNTER);
        n = get != NULL && get->type == REDIS_REPLY_STRING ? atoll(get->str) : 0;
        if (get == NULL || (get->type != REDIS_REPLY_STRING && get->type != REDIS_REPLY_NIL))
            w->errors++;
        set = redisCommand(r, "SET %s %lld", MX_COUNTER, n + 1);
        if (set == NULL || set->type != REDIS_REPLY_STATUS)
            w->errors++;
        if (get != NULL)
            freeReplyObject(get);
        if (set != NULL)
            freeReplyObject(set);
        if (lock_unlock(w->c, MX_LOCK) != LOCK_OK)
            w->errors++;
        i++;
    }
out:
    if (r != NULL)
        redisFree(r);
    return NULL;
}

/* Runs MX_THREADS workers on c; returns their errors (and adds up their timeouts). */
static int mx_run(lock_client *c, int port, int *timeouts)
{
    mx_worker w[MX_THREADS];
    int errors = 0;

    for (int i = 0; i < MX_THREADS; i++) {
        w[i] = (mx_worker){.c = c, .port = port};
        if (pthread_create(&w[i].thread, NULL, mx_main, &w[i]) != 0)
            return 1;
    }
    for (int i = 0; i < MX_THREADS; i++) {
        pthread_join(w[i].thread, NULL);
        errors += w[i].errors;
        *timeouts += w[i].timeouts;
    }
    return errors;
}

/*
 * A second process for the cases that need one. It is this very program started again
 * (fork, then exec of /proc/self/exe with a role), never a bare fork: a child forked from a
 * process whose other threads (the lock client's, the sanitizer's) may hold a lock at that
 * instant could block forever on it. A fresh image inherits no such lock.
 */
static pid_t spawn_role(const char *role, int fd)
{
    char port[16], fd_text[16];
    pid_t child;

    snprintf(port, sizeof(port), "%d", g_state.port);
    snprintf(fd_text, sizeof(fd_text), "%d", fd);
    child = fork();
    if (child == 0) {
        execl("/proc/self/exe", "test_lock", role, port, fd_text, (char *)NULL);
        _exit(127);
    }
    return child;
}

static lock_client *child_client(int port)
{
    lock_options o;
    lock_client *cc = NULL;

    lock_options_init(&o);
    o.redis_port = port;
    return lock_client_create(&o, &cc) == LOCK_OK ? cc : NULL;
}

/* Role "mx": the other process of the mutual exclusion case. Exit 0 when no worker erred. */
static int role_mutual_exclusion(int port)
{
    lock_client *cc = child_client(port);
    int timeouts = 0, errors;

    if (cc == NULL)
        return 2;
    errors = mx_run(cc, port, &timeouts);
    lock_client_destroy(cc);
    return errors == 0 ? 0 : 1;
}

static void test_mutual_exclusion(void **state)
{
    int parent_timeouts = 0;
    int status = 0;
    int errors;
    pid_t child;

    (void)state;
    child = spawn_role("mx", -1);
    assert_true(child >= 0);
    errors = mx_run(g_state.client, g_state.port, &parent_timeouts);
    assert_int_equal(waitpid(child, &status, 0), child);

    assert_int_equal(errors, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(redis_int("EXISTS %s", MX_LOCK), 0);
    {
        redisReply *r = redis_cmd("GET %s", MX_COUNTER);

        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_int_equal(atoll(r->str), 2 * MX_THREADS * MX_PER_THREAD);
        freeReplyObject(r);
    }
    print_message("mutual exclusion: 10000 increments, %d timed-out waits retried\n",
                  parent_timeouts);
}

/* ---- reentrancy and owner check ---- */

static void test_reentrancy(void **state)
{
    lock_client *c = g_state.client;
    int64_t t1 = 0, t2 = 0, t3 = 0;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:re", 0, 10000, &t1), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:re", 0, 10000, &t2), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:re", 0, LOCK_LEASE_WATCHDOG, &t3), LOCK_OK);
    assert_int_equal(t1, t2); /* one holding, one token */
    assert_int_equal(t2, t3);
    assert_int_equal(redis_int("HLEN t:re"), 1);

    assert_int_equal(lock_unlock(c, "t:re"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:re"), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:re"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:re"), 1);
    assert_int_equal(other_try_lock(c, "t:re", 0, true), LOCK_ERR_TIMEOUT);

    assert_int_equal(lock_unlock(c, "t:re"), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:re"), LOCK_ERR_NOT_HELD);
    assert_int_equal(redis_int("EXISTS t:re"), 0);
    assert_int_equal(other_try_lock(c, "t:re", 0, true), LOCK_OK);
}

static void test_owner_check(void **state)
{
    lock_client *c = g_state.client;
    lock_client *c2 = new_client(0); /* another process id */

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:own", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(other_unlock(c, "t:own"), LOCK_ERR_NOT_HELD); /* another thread */
    assert_int_equal(lock_unlock(c2, "t:own"), LOCK_ERR_NOT_HELD); /* same thread number,
                                                                      another client id */
    assert_int_equal(redis_int("EXISTS t:own"), 1);
    assert_int_equal(redis_int("PTTL t:own") > 0, 1);
    assert_int_equal(lock_is_held(c, "t:own"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:own"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:own"), 0);
    lock_client_destroy(c2);
}

/* ---- lease expiry ---- */

typedef struct child_report {
    int rc;
    int64_t before_ns; /* just before the child's try_lock */
    int64_t after_ns;
    int64_t token;
} child_report;

/* Role "lease": takes "t:lease" with a 300 ms lease, reports on fd, and dies without
 * releasing it (nor destroying the client: as a crash would). */
static int role_lease(int port, int fd)
{
    child_report rep = {0};
    lock_client *cc = child_client(port);

    if (cc == NULL)
        return 2;
    rep.before_ns = now_ns();
    rep.rc = lock_try_lock(cc, "t:lease", 0, 300, &rep.token);
    rep.after_ns = now_ns();
    if (write(fd, &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
        return 3;
    _exit(0);
}

static void test_lease_expiry(void **state)
{
    child_report rep = {0};
    int fds[2];
    int status = 0;
    int64_t token = 0;
    bg_call waiter;
    pid_t child;

    (void)state;
    assert_int_equal(pipe(fds), 0);
    child = spawn_role("lease", fds[1]);
    assert_true(child >= 0);
    close(fds[1]);
    assert_int_equal(read(fds[0], &rep, sizeof(rep)), (ssize_t)sizeof(rep));
    close(fds[0]);
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(rep.rc, LOCK_OK);

    /* Waiting from now on (well within the lease), it gets the lock, not before 300 ms. */
    waiter = (bg_call){.c = g_state.client,
                       .name = "t:lease",
                       .wait_ms = 3000,
                       .lease_ms = 10000,
                       .unlock_after = true};
    bg_start(&waiter);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    assert_true(waiter.done_ns - rep.before_ns >= 300 * MS);
    assert_true(waiter.token > rep.token);
    print_message("lease expiry: acquired %.1f ms after the child's try_lock began\n",
                  (double)(waiter.done_ns - rep.before_ns) / 1e6);

    /* And a try made while the lease still runs fails. */
    assert_int_equal(lock_try_lock(g_state.client, "t:lease2", 0, 300, NULL), LOCK_OK);
    assert_int_equal(other_try_lock(g_state.client, "t:lease2", 0, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_try_lock(g_state.client, "t:lease2", 0, 300, &token), LOCK_OK);
    assert_int_equal(lock_unlock(g_state.client, "t:lease2"), LOCK_OK);
    assert_int_equal(lock_unlock(g_state.client, "t:lease2"), LOCK_OK);
}

/* ---- watchdog ---- */

static void test_watchdog(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);
    lock_stats st;
    uint64_t renewals;
    int64_t start;
    int tries = 0;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:wd", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_true(redis_int("PTTL t:wd") <= SHORT_LEASE_MS);
    start = now_ns();
    while (now_ns() - start < 3 * SHORT_LEASE_MS * MS) {
        assert_int_equal(other_try_lock(c, "t:wd", 0, true), LOCK_ERR_TIMEOUT);
        tries++;
        sleep_ms(30);
    }
    /* Still there, still ours, after three leases. */
    assert_true(redis_int("PTTL t:wd") > 0);
    assert_int_equal(lock_is_held(c, "t:wd"), LOCK_OK);
    lock_get_stats(c, &st);
    /* Alive at 3 leases means at least 3 renewals (each adds at most one lease). */
    assert_true(st.renewals >= 3);
    assert_int_equal(st.lost, 0);

    /* Taken again with a short fixed lease: that resets the TTL to 60 ms, and the watchdog
     * (renewing this holding until its last release) comes within a third of it. */
    assert_int_equal(lock_try_lock(c, "t:wd", 0, 60, NULL), LOCK_OK);
    sleep_ms(SHORT_LEASE_MS);
    assert_int_equal(other_try_lock(c, "t:wd", 0, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_is_held(c, "t:wd"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:wd"), LOCK_OK);

    assert_int_equal(lock_unlock(c, "t:wd"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:wd"), 0);
    lock_get_stats(c, &st);
    renewals = st.renewals;
    sleep_ms(SHORT_LEASE_MS); /* three renewal periods */
    lock_get_stats(c, &st);
    assert_int_equal(st.renewals, renewals);
    assert_int_equal(redis_int("EXISTS t:wd"), 0);
    print_message("watchdog: %d tries by another owner failed over %d ms, %llu renewals\n", tries,
                  3 * SHORT_LEASE_MS, (unsigned long long)renewals);
    lock_client_destroy(c);
}

static void test_lost_lock(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);
    lock_stats st;
    int64_t start, seen = -1;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:lost", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:lost"), LOCK_OK);

    /* Behind the holder's back: the key goes, and another owner takes the lock. */
    start = now_ns();
    assert_int_equal(redis_int("DEL t:lost"), 1);
    assert_int_equal(lock_try_lock(g_state.client, "t:lost", 0, 10000, NULL), LOCK_OK);

    /* The next renewal (every 100 ms) finds it gone. */
    while (now_ns() - start < 1000 * MS) {
        if (lock_is_held(c, "t:lost") == LOCK_ERR_LOST) {
            seen = now_ns() - start;
            break;
        }
        sleep_ms(5);
    }
    assert_true(seen >= 0);
    lock_get_stats(c, &st);
    assert_int_equal(st.lost, 1); /* found by the watchdog, not by the lease running out */

    /* Clearing the record never touches the new owner's lock. */
    assert_int_equal(lock_unlock(c, "t:lost"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_is_held(c, "t:lost"), LOCK_ERR_NOT_HELD);
    assert_int_equal(redis_int("EXISTS t:lost"), 1);
    assert_int_equal(lock_unlock(g_state.client, "t:lost"), LOCK_OK);
    print_message("lost lock: is_held said lost %.1f ms after the DEL\n", (double)seen / 1e6);
    lock_client_destroy(c);
}

/* ---- wait bound ---- */

static void test_wait_bound(void **state)
{
    lock_client *c = g_state.client;
    lock_stats st;
    bg_call b = {.c = c, .name = "t:wait", .wait_ms = 200, .lease_ms = 10000};
    int64_t took;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:wait", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    bg_start(&b);
    bg_join(&b);
    took = b.done_ns - b.started_ns;
    assert_int_equal(b.rc, LOCK_ERR_TIMEOUT);
    assert_true(took >= 200 * MS);
    assert_true(took <= (200 + COMMAND_TIMEOUT_MS) * MS);
    lock_get_stats(c, &st);
    assert_int_equal(st.timeouts, 1);
    /* wait 0 tries once and returns at once. */
    b.wait_ms = 0;
    bg_start(&b);
    bg_join(&b);
    assert_int_equal(b.rc, LOCK_ERR_TIMEOUT);
    assert_true(b.done_ns - b.started_ns <= COMMAND_TIMEOUT_MS * MS);
    assert_int_equal(lock_unlock(c, "t:wait"), LOCK_OK);
    print_message("wait bound: try_lock(200 ms) timed out after %.1f ms\n", (double)took / 1e6);
}

/* ---- wake-up ---- */

#define WAKE_THREADS 16
#define WAKE_ROUNDS 40

typedef struct wake_shared {
    lock_client *c;
    _Atomic int64_t last_release_ns; /* set by the holder just before it unlocks */
    _Atomic int last_holder;
    _Atomic int ngaps;
    int64_t gaps[WAKE_THREADS * WAKE_ROUNDS];
    int64_t cross[WAKE_THREADS * WAKE_ROUNDS]; /* gaps where another thread took over */
    _Atomic int ncross;
    _Atomic int errors;
} wake_shared;

typedef struct wake_worker {
    wake_shared *sh;
    int id;
    pthread_t thread;
} wake_worker;

static void *wake_main(void *arg)
{
    wake_worker *w = arg;
    wake_shared *sh = w->sh;

    for (int i = 0; i < WAKE_ROUNDS; i++) {
        int64_t got, prev;
        int rc = lock_try_lock(sh->c, "t:wake", 10000, LOCK_LEASE_WATCHDOG, NULL);

        if (rc != LOCK_OK) {
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        got = now_ns();
        prev = atomic_load(&sh->last_release_ns);
        if (prev != 0) {
            sh->gaps[atomic_fetch_add(&sh->ngaps, 1)] = got - prev;
            if (atomic_load(&sh->last_holder) != w->id)
                sh->cross[atomic_fetch_add(&sh->ncross, 1)] = got - prev;
        }
        atomic_store(&sh->last_holder, w->id);
        atomic_store(&sh->last_release_ns, now_ns());
        if (lock_unlock(sh->c, "t:wake") != LOCK_OK)
            atomic_fetch_add(&sh->errors, 1);
    }
    return NULL;
}

static void test_wakeup(void **state)
{
    static wake_shared sh;
    wake_worker w[WAKE_THREADS];
    int64_t median, p99, cross_median, start, took;
    int ngaps, ncross;

    (void)state;
    memset(&sh, 0, sizeof(sh));
    sh.c = g_state.client;
    atomic_store(&sh.last_holder, -1);
    start = now_ns();
    for (int i = 0; i < WAKE_THREADS; i++) {
        w[i] = (wake_worker){.sh = &sh, .id = i};
        assert_int_equal(pthread_create(&w[i].thread, NULL, wake_main, &w[i]), 0);
    }
    for (int i = 0; i < WAKE_THREADS; i++)
        pthread_join(w[i].thread, NULL);
    took = now_ns() - start;
    assert_int_equal(atomic_load(&sh.errors), 0);
    ngaps = atomic_load(&sh.ngaps);
    ncross = atomic_load(&sh.ncross);
    assert_int_equal(ngaps, WAKE_THREADS * WAKE_ROUNDS - 1);
    assert_true(ncross >= WAKE_THREADS - 1); /* each thread's first turn was handed over */
    median = percentile(sh.gaps, (size_t)ngaps, 50);
    p99 = percentile(sh.gaps, (size_t)ngaps, 99);
    cross_median = percentile(sh.cross, (size_t)ncross, 50);
    print_message("wake-up: %d acquisitions in %.0f ms; release->acquire median %.2f ms, "
                  "p99 %.2f ms; to another thread (%d): median %.2f ms\n",
                  ngaps + 1, (double)took / 1e6, (double)median / 1e6, (double)p99 / 1e6, ncross,
                  (double)cross_median / 1e6);
    assert_true(median < 20 * MS);
    assert_true(cross_median < 20 * MS);
}

/* ---- fair wake-up order ---- */

/*
 * Within one process, waiters are served in the order they started waiting, even when
 * the one whose turn it is loses a race. The scenario is built so that the order is known
 * without reading any clock:
 *   - the main thread holds the lock; FAIR_WAITERS threads start one after the other, and
 *     each is let in only once the previous one is queued: its two tries (the first, and
 *     the one after it subscribed) have run in Redis (INFO commandstats counts them), and
 *     it joined the queue before the second. So the queue order is the start order.
 *   - a "barger" thread of the same process then tries the lock with wait 0 in a loop,
 *     never queueing (a newcomer's first attempt, over and over), in the moments the lock
 *     is free between a release and the next waiter's take.
 *   - the main thread releases; each waiter, once it has the lock, notes its place, holds
 *     the lock FAIR_HOLD_MS and releases it for good.
 * With the line in Redis, the waiters acquire in exactly their start order and the barger
 * never gets the lock while anyone is in line (before the line, it won about 45 of those
 * races per run; before the oldest-waiter wake-up, a waiter that lost to it went back behind
 * the others and the order came out shuffled). Every lease is fixed and long (no watchdog
 * renewals in the command counts, no TTL fallback during the test).
 */
#define FAIR_WAITERS 16
#define FAIR_ROUNDS 3
#define FAIR_HOLD_MS 2
#define FAIR_LEASE_MS 60000

typedef struct fair_shared {
    lock_client *c;
    int order[FAIR_WAITERS]; /* order[k] = the waiter that acquired k-th */
    _Atomic int acquired;
    _Atomic int errors;
    _Atomic bool stop_barger;
    _Atomic int tries;  /* the barger's tries while waiters were queued */
    _Atomic int steals; /* its acquisitions while waiters were queued */
} fair_shared;

typedef struct fair_waiter {
    fair_shared *sh;
    int id;
    int64_t waited_ns;
    pthread_t thread;
} fair_waiter;

static void *fair_waiter_main(void *arg)
{
    fair_waiter *w = arg;
    fair_shared *sh = w->sh;
    int64_t start = now_ns();

    if (lock_try_lock(sh->c, "t:fair", 20000, FAIR_LEASE_MS, NULL) != LOCK_OK) {
        atomic_fetch_add(&sh->errors, 1);
        return NULL;
    }
    w->waited_ns = now_ns() - start;
    sh->order[atomic_fetch_add(&sh->acquired, 1)] = w->id; /* under the lock */
    sleep_ms(FAIR_HOLD_MS);
    if (lock_unlock(sh->c, "t:fair") != LOCK_OK)
        atomic_fetch_add(&sh->errors, 1);
    return NULL;
}

static void *fair_barger_main(void *arg)
{
    fair_shared *sh = arg;

    while (!atomic_load(&sh->stop_barger)) {
        bool in_line = atomic_load(&sh->acquired) < FAIR_WAITERS;
        int rc = lock_try_lock(sh->c, "t:fair", 0, FAIR_LEASE_MS, NULL);

        if (in_line)
            atomic_fetch_add(&sh->tries, 1);
        if (rc == LOCK_ERR_TIMEOUT)
            continue;
        if (rc != LOCK_OK) {
            atomic_fetch_add(&sh->errors, 1);
            break;
        }
        /* Waiters left after this take (acquired is counted under the lock): a steal. */
        if (atomic_load(&sh->acquired) < FAIR_WAITERS)
            atomic_fetch_add(&sh->steals, 1);
        sleep_ms(FAIR_HOLD_MS);
        if (lock_unlock(sh->c, "t:fair") != LOCK_OK)
            atomic_fetch_add(&sh->errors, 1);
        /* Out of the lock for a moment, as a thread doing other work: a waiter woken by
         * this release gets its chance, and the barger's next try races the next one. */
        sleep_ms(FAIR_HOLD_MS);
    }
    return NULL;
}

/* EVALSHA commands Redis has run since it started (INFO commandstats); -1 if unknown. */
static long long evalsha_calls(void)
{
    return info_number("commandstats", "cmdstat_evalsha:calls=");
}

/* Polls until evalsha_calls() >= want (5 s at most); returns whether it got there. */
static bool wait_evalsha(long long want)
{
    int64_t until = now_ns() + 5000 * MS;

    while (evalsha_calls() < want) {
        if (now_ns() >= until)
            return false;
        sleep_ms(1);
    }
    return true;
}

/* One round; returns how many waiters acquired out of their queue order. */
static int fair_round(fair_shared *sh, fair_waiter *w, int64_t *max_wait_ns)
{
    pthread_t barger;
    long long base;
    int out_of_order = 0;

    atomic_store(&sh->acquired, 0);
    atomic_store(&sh->stop_barger, false);
    assert_int_equal(lock_try_lock(sh->c, "t:fair", 0, FAIR_LEASE_MS, NULL), LOCK_OK);
    base = evalsha_calls();
    assert_true(base > 0);
    for (int i = 0; i < FAIR_WAITERS; i++) {
        w[i] = (fair_waiter){.sh = sh, .id = i};
        assert_int_equal(pthread_create(&w[i].thread, NULL, fair_waiter_main, &w[i]), 0);
        /* Queued: its try before joining and its try after subscribing have both run. */
        assert_true(wait_evalsha(base + 2 * (i + 1)));
    }
    assert_int_equal(evalsha_calls(), base + 2 * FAIR_WAITERS); /* nobody woke */
    assert_int_equal(pthread_create(&barger, NULL, fair_barger_main, sh), 0);
    assert_int_equal(lock_unlock(sh->c, "t:fair"), LOCK_OK);
    for (int i = 0; i < FAIR_WAITERS; i++)
        pthread_join(w[i].thread, NULL);
    atomic_store(&sh->stop_barger, true);
    pthread_join(barger, NULL);
    assert_int_equal(atomic_load(&sh->errors), 0);
    assert_int_equal(atomic_load(&sh->acquired), FAIR_WAITERS);
    for (int k = 0; k < FAIR_WAITERS; k++) {
        if (sh->order[k] != k)
            out_of_order++;
        if (w[k].waited_ns > *max_wait_ns)
            *max_wait_ns = w[k].waited_ns;
    }
    return out_of_order;
}

static void test_fair_order(void **state)
{
    static fair_shared sh;
    fair_waiter w[FAIR_WAITERS];
    int64_t max_wait = 0;
    int out_of_order = 0;
    char seen[FAIR_ROUNDS][FAIR_WAITERS * 4 + 1];

    (void)state;
    memset(&sh, 0, sizeof(sh));
    sh.c = g_state.client;
    atomic_store(&sh.steals, 0);
    atomic_store(&sh.tries, 0);
    for (int r = 0; r < FAIR_ROUNDS; r++) {
        int n = 0;

        out_of_order += fair_round(&sh, w, &max_wait);
        for (int k = 0; k < FAIR_WAITERS; k++)
            n += snprintf(seen[r] + n, sizeof(seen[r]) - (size_t)n, " %d", sh.order[k]);
        print_message("fair order: round %d acquired in order%s\n", r, seen[r]);
    }
    print_message("fair order: %d waiters x %d rounds, the barger tried %d times while they "
                  "waited and took the lock %d times; %d out of queue order; longest wait "
                  "%.1f ms\n",
                  FAIR_WAITERS, FAIR_ROUNDS, atomic_load(&sh.tries), atomic_load(&sh.steals),
                  out_of_order, (double)max_wait / 1e6);
    /* The races were run, and the line won them all. */
    assert_true(atomic_load(&sh.tries) > 0);
    assert_int_equal(atomic_load(&sh.steals), 0);
    assert_int_equal(out_of_order, 0);
    assert_int_equal(redis_int("EXISTS t:fair"), 0);
}

/* ---- the line shared by all clients (the fair lock across processes) ---- */

static lock_client *new_client_fair(bool fair, int64_t liveness_ms)
{
    lock_options o;
    lock_client *c = NULL;

    lock_options_init(&o);
    o.redis_port = g_state.port;
    o.fair = fair;
    if (liveness_ms > 0)
        o.waiter_liveness_ms = liveness_ms;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

/* Waits until the line of `lock` holds `want` waiters (ZCARD of "<lock>:waiters"). */
static bool wait_line(const char *lock, long long want, int64_t timeout_ms)
{
    int64_t until = now_ns() + timeout_ms * MS;

    while (redis_int("ZCARD %s:waiters", lock) != want) {
        if (now_ns() >= until)
            return false;
        sleep_ms(2);
    }
    return true;
}

/* Redis' clock in ms, as the scripts read it. */
static long long redis_now_ms(void)
{
    redisReply *r = redis_cmd("TIME");
    long long ms = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    if (r != NULL)
        freeReplyObject(r);
    return ms;
}

#define LINE_WAITERS 6

/*
 * Three clients stand for three processes (each has its own process id, subscriber and
 * pool). Six waiters queue in a known order, three from one client first: the order that
 * wins without the line is one waiter per client per release, whoever's script reaches
 * Redis first (the first client's second waiter would then come after the others' first).
 * With the line, the lock goes in arrival order whatever the client, which the tokens show:
 * each waiter takes and gives back the lock at once, so tokens grow in the order served.
 */
static void test_fair_across_clients(void **state)
{
    static const int client_of[LINE_WAITERS] = {0, 0, 0, 1, 2, 0};
    lock_client *c[3];
    bg_call b[LINE_WAITERS];

    (void)state;
    for (int i = 0; i < 3; i++)
        c[i] = new_client_fair(true, 0);
    assert_int_equal(lock_try_lock(g_state.client, "t:line", 0, 10000, NULL), LOCK_OK);
    for (int i = 0; i < LINE_WAITERS; i++) {
        b[i] = (bg_call){.c = c[client_of[i]],
                         .name = "t:line",
                         .wait_ms = 10000,
                         .lease_ms = 10000,
                         .unlock_after = true};
        bg_start(&b[i]);
        assert_true(wait_line("t:line", i + 1, 3000)); /* in line before the next comes */
    }
    assert_int_equal(lock_unlock(g_state.client, "t:line"), LOCK_OK);
    for (int i = 0; i < LINE_WAITERS; i++) {
        bg_join(&b[i]);
        assert_int_equal(b[i].rc, LOCK_OK);
        assert_int_equal(b[i].unlock_rc, LOCK_OK);
    }
    for (int i = 1; i < LINE_WAITERS; i++) {
        print_message("line: waiter %d (client %d) token +%lld\n", i, client_of[i],
                      (long long)(b[i].token - b[0].token));
        assert_true(b[i].token == b[i - 1].token + 1); /* served in arrival order */
    }
    assert_int_equal(redis_int("EXISTS t:line:waiters"), 0); /* an empty line is no key */
    for (int i = 0; i < 3; i++)
        lock_client_destroy(c[i]);
}

/*
 * A waiter whose process died (here: an entry written by hand, as its last call would have
 * left it) keeps its place only until its liveness lapses: a free lock waits for it that
 * long, no longer. A single try (wait 0) does not overtake it.
 */
static void test_fair_dead_waiter(void **state)
{
    lock_client *c = new_client_fair(true, 300);
    long long now_ms = redis_now_ms();
    int64_t start, waited_ms;

    (void)state;
    assert_true(now_ms > 0);
    assert_int_equal(redis_int("ZADD t:ghost:waiters 1 ghost:1"), 1);
    assert_int_equal(redis_int("ZADD t:ghost:waiters:until %lld ghost:1", now_ms + 400), 1);
    assert_int_equal(lock_try_lock(c, "t:ghost", 0, 10000, NULL), LOCK_ERR_TIMEOUT);
    start = now_ns();
    assert_int_equal(lock_try_lock(c, "t:ghost", 3000, 10000, NULL), LOCK_OK);
    waited_ms = (now_ns() - start) / MS;
    print_message("line: a dead waiter held a free lock up for %lld ms\n", (long long)waited_ms);
    assert_true(waited_ms >= 250); /* it did wait for the ghost's place to lapse */
    assert_true(waited_ms < 1500); /* and no longer than the lapse plus a keep-place period */
    assert_int_equal(redis_int("EXISTS t:ghost:waiters"), 0);
    assert_int_equal(lock_unlock(c, "t:ghost"), LOCK_OK);

    /* A place with no liveness at all (its end lost, or written by something else) counts as
     * lapsed: the next take drops it and goes on, with no error and no wait. */
    assert_int_equal(redis_int("ZADD t:ghost:waiters 1 orphan:1"), 1);
    start = now_ns();
    assert_int_equal(lock_try_lock(c, "t:ghost", 3000, 10000, NULL), LOCK_OK);
    assert_true(now_ns() - start < 200 * MS);
    assert_int_equal(redis_int("EXISTS t:ghost:waiters"), 0);
    assert_int_equal(lock_unlock(c, "t:ghost"), LOCK_OK);
    lock_client_destroy(c);
}

/*
 * A waiter that gives up leaves the line at once (leave.lua): the next waiter gets the lock
 * as soon as it is released, not a liveness later. A single try never joins the line, and a
 * client with fair = false does not either.
 */
static void test_fair_leave(void **state)
{
    lock_client *other = new_client_fair(true, 1500);
    lock_client *unfair = new_client_fair(false, 0);
    bg_call next = {
        .c = other, .name = "t:leave", .wait_ms = 5000, .lease_ms = 10000, .unlock_after = true};
    bg_call plain = {.c = unfair, .name = "t:leave", .wait_ms = 150, .lease_ms = 10000};
    int64_t released;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:leave", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(other_try_lock(other, "t:leave", 0, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("EXISTS t:leave:waiters"), 0);
    bg_start(&plain);
    bg_join(&plain);
    assert_int_equal(plain.rc, LOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("EXISTS t:leave:waiters"), 0);

    /* In line, then out of it when its 200 ms run out. */
    assert_int_equal(other_try_lock(other, "t:leave", 200, true), LOCK_ERR_TIMEOUT);
    assert_int_equal(redis_int("EXISTS t:leave:waiters"), 0);

    bg_start(&next);
    assert_true(wait_line("t:leave", 1, 3000));
    released = now_ns();
    assert_int_equal(lock_unlock(g_state.client, "t:leave"), LOCK_OK);
    bg_join(&next);
    assert_int_equal(next.rc, LOCK_OK);
    print_message("line: taken %.1f ms after the release\n",
                  (double)(next.done_ns - released) / 1e6);
    assert_true(next.done_ns - released < 400 * MS); /* a lapse would take 1000+ ms */
    lock_client_destroy(other);
    lock_client_destroy(unfair);
}

/*
 * The hand-off's gap (lock_last_handoff_us): a take from a release to the head of the line
 * says how long the lock served nobody, on Redis' clock, and that fits inside the time the
 * test saw from the release's start to the take's end; any other take says -1.
 */
static void test_handoff_gap(void **state)
{
    lock_client *other = new_client_fair(true, 1500);
    bg_call next = {
        .c = other, .name = "t:gap", .wait_ms = 5000, .lease_ms = 10000, .unlock_after = true};
    int64_t released;

    (void)state;
    assert_int_equal(lock_try_lock(g_state.client, "t:gap", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(lock_last_handoff_us(), -1); /* free, nobody in line */
    assert_int_equal(lock_try_lock(g_state.client, "t:gap", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(lock_last_handoff_us(), -1); /* reentrant */
    assert_int_equal(lock_unlock(g_state.client, "t:gap"), LOCK_OK);
    bg_start(&next);
    assert_true(wait_line("t:gap", 1, 3000));
    released = now_ns();
    assert_int_equal(lock_unlock(g_state.client, "t:gap"), LOCK_OK);
    bg_join(&next);
    assert_int_equal(next.rc, LOCK_OK);
    print_message("hand-off: %lld us on Redis' clock, %.0f us seen from here\n",
                  (long long)next.handoff_us, (double)(next.done_ns - released) / 1e3);
    assert_true(next.handoff_us >= 0);
    assert_true(next.handoff_us * 1000 <= next.done_ns - released + 2 * MS);
    /* the stamp is used once: a take after it, with nobody in line, measures nothing */
    assert_int_equal(lock_try_lock(g_state.client, "t:gap", 0, 10000, NULL), LOCK_OK);
    assert_int_equal(lock_last_handoff_us(), -1);
    assert_int_equal(lock_unlock(g_state.client, "t:gap"), LOCK_OK);
    lock_client_destroy(other);
}

/* ---- fencing ---- */

#define FENCE_THREADS 8
#define FENCE_PER_THREAD 125 /* 1,000 acquisitions */
#define FENCE_EXPIRING_AT 60 /* thread 0's 60th acquisition has a 100 ms lease, not released */

typedef struct fence_shared {
    lock_client *c;
    int64_t tokens[FENCE_THREADS * FENCE_PER_THREAD];
    _Atomic int n;
    _Atomic int errors;
    int expired_is_held; /* is_held after the lease ran out (expect LOCK_ERR_LOST) */
    int expired_unlock;  /* unlock after the lease ran out (expect LOCK_ERR_NOT_HELD) */
} fence_shared;

typedef struct fence_worker {
    fence_shared *sh;
    int id;
    pthread_t thread;
} fence_worker;

static void *fence_main(void *arg)
{
    fence_worker *w = arg;
    fence_shared *sh = w->sh;

    for (int i = 0; i < FENCE_PER_THREAD; i++) {
        bool expiring = w->id == 0 && i == FENCE_EXPIRING_AT;
        int64_t token = 0;
        int rc =
            lock_try_lock(sh->c, "t:fence", 20000, expiring ? 100 : LOCK_LEASE_WATCHDOG, &token);

        if (rc != LOCK_OK) {
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        /* Under the lock: the order of this array is the order of the holdings. */
        sh->tokens[atomic_fetch_add(&sh->n, 1)] = token;
        if (expiring) {
            /* A holder paused past its lease: the lock frees itself and others go on. */
            sleep_ms(250);
            sh->expired_is_held = lock_is_held(sh->c, "t:fence");
            sh->expired_unlock = lock_unlock(sh->c, "t:fence");
            continue;
        }
        if (lock_unlock(sh->c, "t:fence") != LOCK_OK)
            atomic_fetch_add(&sh->errors, 1);
    }
    return NULL;
}

static void test_fencing(void **state)
{
    static fence_shared sh;
    fence_worker w[FENCE_THREADS];
    int n;

    (void)state;
    memset(&sh, 0, sizeof(sh));
    sh.c = g_state.client;
    for (int i = 0; i < FENCE_THREADS; i++) {
        w[i] = (fence_worker){.sh = &sh, .id = i};
        assert_int_equal(pthread_create(&w[i].thread, NULL, fence_main, &w[i]), 0);
    }
    for (int i = 0; i < FENCE_THREADS; i++)
        pthread_join(w[i].thread, NULL);
    n = atomic_load(&sh.n);
    assert_int_equal(atomic_load(&sh.errors), 0);
    assert_int_equal(n, FENCE_THREADS * FENCE_PER_THREAD);
    assert_int_equal(sh.expired_is_held, LOCK_ERR_LOST);
    assert_int_equal(sh.expired_unlock, LOCK_ERR_NOT_HELD);
    for (int i = 1; i < n; i++)
        assert_true(sh.tokens[i] > sh.tokens[i - 1]);
    assert_int_equal(redis_int("EXISTS t:fence"), 0);
}

/* ---- NOSCRIPT ---- */

static void test_noscript(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);
    int64_t t1 = 0, t2 = 0;

    (void)state;
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_try_lock(c, "t:ns", 0, LOCK_LEASE_WATCHDOG, &t1), LOCK_OK);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_try_lock(c, "t:ns", 0, LOCK_LEASE_WATCHDOG, &t2), LOCK_OK);
    assert_int_equal(t1, t2);
    /* The watchdog renews through flushes too: held across two leases. */
    for (int i = 0; i < 6; i++) {
        redis_ok("SCRIPT FLUSH");
        sleep_ms(SHORT_LEASE_MS / 3);
    }
    assert_int_equal(lock_is_held(c, "t:ns"), LOCK_OK);
    assert_true(redis_int("PTTL t:ns") > 0);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_unlock(c, "t:ns"), LOCK_OK);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_unlock(c, "t:ns"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:ns"), 0);
    redis_ok("SCRIPT FLUSH");
    assert_int_equal(lock_unlock(c, "t:ns"), LOCK_ERR_NOT_HELD);
    lock_client_destroy(c);
}

/* ---- lost replies, an exhausted pool, the maximum hold ---- */

/* DEBUG SLEEP on a connection of its own, from a thread: Redis runs nothing else meanwhile,
 * so a command sent now runs after the sleep, and its reply comes too late for a client
 * whose command timeout is shorter. */
typedef struct sleeper {
    int port;
    double seconds;
    pthread_t thread;
} sleeper;

static void *sleeper_main(void *arg)
{
    sleeper *z = arg;
    redisContext *ctx = redisConnect("127.0.0.1", z->port);

    if (ctx != NULL && ctx->err == 0) {
        redisReply *r = redisCommand(ctx, "DEBUG SLEEP %f", z->seconds);
        if (r != NULL)
            freeReplyObject(r);
    }
    if (ctx != NULL)
        redisFree(ctx);
    return NULL;
}

/* Starts a DEBUG SLEEP of `seconds` and returns once Redis is asleep: a PING on a connection
 * of its own gets no answer within 50 ms (however slow the machine is to start the thread). */
static void sleeper_start(sleeper *z, double seconds)
{
    struct timeval tv = {.tv_sec = 0, .tv_usec = 50 * 1000};
    int64_t until = now_ns() + 2000 * MS;
    bool asleep = false;

    z->port = g_state.port;
    z->seconds = seconds;
    assert_int_equal(pthread_create(&z->thread, NULL, sleeper_main, z), 0);
    while (!asleep && now_ns() < until) {
        redisContext *probe = redisConnectWithTimeout("127.0.0.1", g_state.port, tv);
        redisReply *r = NULL;
        bool connected = probe != NULL && probe->err == 0 && redisSetTimeout(probe, tv) == REDIS_OK;

        if (connected)
            r = redisCommand(probe, "PING");
        asleep = connected && r == NULL; /* connected, and no answer in time */
        if (r != NULL)
            freeReplyObject(r);
        if (probe != NULL)
            redisFree(probe);
        if (!asleep)
            sleep_ms(5);
    }
    assert_true(asleep);
}

static lock_client *client_with_timeout(int command_timeout_ms)
{
    return new_client_with(0, command_timeout_ms);
}

/* The hold count Redis keeps for the only owner of `name` (-1: not held). */
static long long redis_hold_count(const char *name)
{
    redisReply *r = redis_cmd("HVALS %s", name);
    long long n = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1)
        n = atoll(r->element[0]->str);
    if (r != NULL)
        freeReplyObject(r);
    return n;
}

/*
 * A reentrant take whose reply is lost: the script ran after the client's timeout (Redis
 * counted 2 holds while the client counts 1). The client gives back what the take may have
 * added (release.lua sets the count to the client's own), so Redis and the client agree
 * again; the holder's one unlock frees the lock. (Before, Redis kept 2 until that unlock.)
 */
static void test_lost_reply_on_acquire(void **state)
{
    lock_client *c = client_with_timeout(200);
    sleeper z;
    int rc;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:lostacq", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleeper_start(&z, 0.6);
    rc = lock_try_lock(c, "t:lostacq", 0, LOCK_LEASE_WATCHDOG, NULL);
    pthread_join(z.thread, NULL);
    assert_int_equal(rc, LOCK_ERR_REDIS);
    /* The take ran after the sleep, and the give-back after it. */
    sleep_ms(50);
    assert_int_equal(redis_hold_count("t:lostacq"), 1);
    assert_int_equal(lock_is_held(c, "t:lostacq"), LOCK_OK);
    /* The holder gives back the one hold it knows of: the lock is free. */
    assert_int_equal(lock_unlock(c, "t:lostacq"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:lostacq"), 0);
    assert_int_equal(lock_is_held(c, "t:lostacq"), LOCK_ERR_NOT_HELD);
    assert_int_equal(other_try_lock(g_state.client, "t:lostacq", 0, true), LOCK_OK);
    lock_client_destroy(c);
}

/*
 * A first take whose reply is lost, once with an answer to the give-back (the sleep ends
 * before the release's own timeout) and once without: the script ran after the client's
 * timeout, so Redis held a lock that nobody owns. Before, it stayed for a whole lease (30 s
 * with the watchdog) and every other owner timed out; now the release that follows the
 * error frees it as soon as Redis runs it, and another owner takes it at once.
 */
static void test_lost_reply_on_first_acquire(void **state)
{
    static const double sleeps[] = {0.3, 0.6}; /* the release answered; lost as well */
    char name[32];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(sleeps) / sizeof(sleeps[0]); i++) {
        lock_client *c = client_with_timeout(200);
        int64_t t0;
        sleeper z;
        int rc;

        snprintf(name, sizeof(name), "t:lostfirst%zu", i);
        sleeper_start(&z, sleeps[i]);
        t0 = now_ns();
        rc = lock_try_lock(c, name, 0, LOCK_LEASE_WATCHDOG, NULL);
        /* The call's bound: its own command timeout, then one for a connection and one
         * for the release's answer. */
        assert_true(now_ns() - t0 < 3 * 200 * MS + 100 * MS);
        pthread_join(z.thread, NULL);
        assert_int_equal(rc, LOCK_ERR_REDIS);
        sleep_ms(50);
        assert_int_equal(redis_int("EXISTS %s", name), 0);
        assert_int_equal(lock_is_held(c, name), LOCK_ERR_NOT_HELD);
        assert_int_equal(other_try_lock(g_state.client, name, 0, true), LOCK_OK);
        lock_client_destroy(c);
    }
}

/* A release whose reply is lost: the client drops the hold all the same, Redis applied it
 * after the sleep, and the two agree; the last release frees the lock. */
static void test_lost_reply_on_release(void **state)
{
    lock_client *c = client_with_timeout(200);
    sleeper z;
    int rc;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:lostrel", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:lostrel", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleeper_start(&z, 0.6);
    rc = lock_unlock(c, "t:lostrel");
    pthread_join(z.thread, NULL);
    assert_int_equal(rc, LOCK_ERR_REDIS);
    sleep_ms(50);
    assert_int_equal(redis_hold_count("t:lostrel"), 1);
    assert_int_equal(lock_is_held(c, "t:lostrel"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:lostrel"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:lostrel"), 0);
    assert_int_equal(other_try_lock(g_state.client, "t:lostrel", 0, true), LOCK_OK);
    lock_client_destroy(c);
}

/* The pool with every connection out: an acquirer gets LOCK_ERR_BUSY at its deadline, a
 * release gets the reserved connection at once, and a second release waits for it. */
static void test_release_with_the_pool_exhausted(void **state)
{
    lock__conn_address addr;
    lock__conn_config cfg = {&addr, 500, 500};
    lock__pool *p = NULL;
    lock__conn *a = NULL, *b = NULL, *r1 = NULL, *r2 = NULL, *x = NULL;
    int64_t t0;

    (void)state;
    assert_int_equal(lock__conn_address_init(&addr, "127.0.0.1", g_state.port), LOCK_OK);
    assert_int_equal(lock__pool_create(&cfg, 2, &p), LOCK_OK);
    assert_int_equal(lock__pool_borrow(p, now_ns(), &a), LOCK_OK);
    assert_int_equal(lock__pool_borrow(p, now_ns(), &b), LOCK_OK);
    assert_int_equal(lock__pool_in_use(p), 2);
    t0 = now_ns();
    assert_int_equal(lock__pool_borrow(p, t0 + 100 * MS, &x), LOCK_ERR_BUSY);
    assert_true(now_ns() - t0 >= 90 * MS);
    /* The release does not wait. */
    t0 = now_ns();
    assert_int_equal(lock__pool_borrow_for_release(p, t0, &r1), LOCK_OK);
    assert_true(now_ns() - t0 < 50 * MS);
    assert_true(r1 != a && r1 != b);
    /* A second release at once waits for the reserved one, up to its deadline. */
    assert_int_equal(lock__pool_borrow_for_release(p, now_ns() + 50 * MS, &r2), LOCK_ERR_BUSY);
    lock__pool_return(p, r1);
    assert_int_equal(lock__pool_borrow_for_release(p, now_ns(), &r2), LOCK_OK);
    assert_ptr_equal(r2, r1);
    lock__pool_return(p, r2);
    /* With a pooled connection free, a release takes that one. */
    lock__pool_return(p, a);
    assert_int_equal(lock__pool_borrow_for_release(p, now_ns(), &r1), LOCK_OK);
    assert_ptr_equal(r1, a);
    lock__pool_return(p, r1);
    lock__pool_return(p, b);
    assert_int_equal(lock__pool_in_use(p), 0);
    lock__pool_destroy(p);
    lock__conn_address_destroy(&addr);
}

/* The watchdog renews a holding for max_hold_ms at most; then its lease runs out, the holder
 * is told it lost the lock, and another owner takes it. */
static void test_max_hold(void **state)
{
    lock_options o;
    lock_client *c = NULL;
    int64_t t0;

    (void)state;
    lock_options_init(&o);
    o.redis_port = g_state.port;
    o.watchdog_lease_ms = SHORT_LEASE_MS;
    o.max_hold_ms = 700;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    o.max_hold_ms = 0;
    lock_client *bad = NULL;
    assert_int_equal(lock_client_create(&o, &bad), LOCK_ERR_INVALID);

    t0 = now_ns();
    assert_int_equal(lock_try_lock(c, "t:maxhold", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    /* Renewed past its first lease (300 ms) ... */
    sleep_ms(500);
    assert_int_equal(lock_is_held(c, "t:maxhold"), LOCK_OK);
    assert_int_equal(redis_int("EXISTS t:maxhold"), 1);
    /* ... but not past max_hold + one lease. */
    while (redis_int("EXISTS t:maxhold") == 1 && now_ns() - t0 < 3000 * MS)
        sleep_ms(20);
    int64_t gone_ms = (now_ns() - t0) / MS;
    print_message("max hold: a 700 ms max hold with a 300 ms lease expired after %lld ms\n",
                  (long long)gone_ms);
    assert_true(gone_ms >= 700);
    assert_true(gone_ms < 700 + SHORT_LEASE_MS + 400);
    assert_int_equal(lock_is_held(c, "t:maxhold"), LOCK_ERR_LOST);
    assert_int_equal(other_try_lock(g_state.client, "t:maxhold", 0, true), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:maxhold"), LOCK_ERR_NOT_HELD);
    lock_client_destroy(c);
}

/* ---- the subscriber connection ---- */

static void test_subscriber_reconnect(void **state)
{
    lock_client *c = g_state.client;
    bg_call waiter = {
        .c = c, .name = "t:sub", .wait_ms = 5000, .lease_ms = 10000, .unlock_after = true};
    redisReply *r;
    long long subscribers;
    int64_t released;
    int rc;

    (void)state;
    /* A waiter, woken by a release after its subscription was killed and remade. */
    assert_int_equal(lock_try_lock(c, "t:sub", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    bg_start(&waiter);
    assert_true(wait_numsub("t:sub:released", 1, 2000));
    r = redis_cmd("CLIENT KILL TYPE pubsub");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_true(wait_numsub("t:sub:released", 1, 2000));
    released = now_ns();
    assert_int_equal(lock_unlock(c, "t:sub"), LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    /* Woken by the message: far sooner than its 5 s deadline or the 30 s TTL. */
    assert_true(waiter.done_ns - released < 250 * MS);
    print_message("subscriber: resubscribed waiter acquired %.2f ms after the release\n",
                  (double)(waiter.done_ns - released) / 1e6);

    /* A release while the subscriber is disconnected is not heard; when it is back and
     * subscribed again it wakes a waiter to look, instead of leaving it asleep until its
     * deadline. To hold the subscriber off for the release, Redis refuses new connections
     * (maxclients = those open now, minus the subscriber's) until the lock is released. */
    assert_int_equal(lock_try_lock(c, "t:sub", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    waiter.rc = waiter.unlock_rc = -100;
    waiter.wait_ms = 10000;
    bg_start(&waiter);
    assert_true(wait_numsub("t:sub:released", 1, 2000));
    save_maxclients();
    r = redis_cmd("CONFIG SET maxclients %lld", connected_clients() - 1);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redis_cmd("CLIENT KILL TYPE pubsub");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    sleep_ms(100); /* the subscriber tries, and is refused, a few times */
    subscribers = numsub("t:sub:released");
    released = now_ns();
    rc = lock_unlock(c, "t:sub");
    /* Back to the value read before, now (the subscriber must reconnect), and by the
     * teardown should an assertion above have failed. */
    r = redis_cmd("CONFIG SET maxclients %s", g_state.maxclients);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    g_state.maxclients[0] = '\0';
    assert_int_equal(subscribers, 0);
    assert_int_equal(rc, LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    /* Reconnecting pauses at most 1 s between tries; the waiter's deadline is 10 s. */
    assert_true(waiter.done_ns - released < 2000 * MS);
    print_message("subscriber: release while disconnected, waiter acquired after %.1f ms\n",
                  (double)(waiter.done_ns - released) / 1e6);

    /* With no waiter left, the channel is unsubscribed after lingering about a second. */
    assert_true(wait_numsub("t:sub:released", 0, 3000));
}

/*
 * The subscriber keeps one connection through quiet times: the channel is dropped a second
 * after its last waiter left, the idle link is PINGed after 5 s, and a later wait
 * subscribes again on the same connection and is woken by the release.
 */
static void test_subscriber_idle(void **state)
{
    lock_client *c = g_state.client;
    bg_call waiter = {
        .c = c, .name = "t:idle", .wait_ms = 10000, .lease_ms = 10000, .unlock_after = true};
    long long first_id, second_id;
    int64_t released, start;

    (void)state;
    assert_int_equal(lock_try_lock(c, "t:idle", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    bg_start(&waiter);
    assert_true(wait_numsub("t:idle:released", 1, 2000));
    first_id = pubsub_client_id();
    assert_int_equal(lock_unlock(c, "t:idle"), LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);

    /* Unsubscribed about 1 s after the waiter left; PINGed 5 s after that. */
    start = now_ns();
    while (!client_list_has("cmd=ping") && now_ns() - start < 8000 * MS)
        sleep_ms(100);
    assert_true(client_list_has("cmd=ping"));
    assert_int_equal(numsub("t:idle:released"), 0);

    assert_int_equal(lock_try_lock(c, "t:idle", 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    waiter.rc = waiter.unlock_rc = -100;
    bg_start(&waiter);
    assert_true(wait_numsub("t:idle:released", 1, 2000));
    second_id = pubsub_client_id();
    released = now_ns();
    assert_int_equal(lock_unlock(c, "t:idle"), LOCK_OK);
    bg_join(&waiter);
    assert_int_equal(waiter.rc, LOCK_OK);
    assert_int_equal(waiter.unlock_rc, LOCK_OK);
    assert_true(first_id > 0);
    assert_int_equal(second_id, first_id); /* never reconnected */
    assert_true(waiter.done_ns - released < 250 * MS);
}

/* ---- Redis down ---- */

static void test_redis_down(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);
    int64_t start, took, before = 0, after = 0;
    int rc;

    (void)state;
    /* Push the counter ahead a little, as a busy lock would. */
    for (int i = 0; i < 20; i++) {
        assert_int_equal(lock_try_lock(c, "t:down:held", 0, 1000, &before), LOCK_OK);
        assert_int_equal(lock_unlock(c, "t:down:held"), LOCK_OK);
    }
    assert_int_equal(lock_try_lock(c, "t:down:held", 0, LOCK_LEASE_WATCHDOG, &before), LOCK_OK);
    assert_int_equal(redis_server_stop(g_state.srv), 0);

    start = now_ns();
    rc = lock_try_lock(c, "t:down", 1000, LOCK_LEASE_WATCHDOG, NULL);
    took = now_ns() - start;
    assert_int_equal(rc, LOCK_ERR_REDIS);
    assert_true(took <= COMMAND_TIMEOUT_MS * MS);
    assert_true(strlen(lock_last_error()) > 0);
    print_message("redis down: try_lock failed in %.2f ms: %s\n", (double)took / 1e6,
                  lock_last_error());
    assert_int_equal(lock_ping(c), LOCK_ERR_REDIS);
    assert_int_equal(lock_unlock(c, "t:down"), LOCK_ERR_REDIS);
    /* Nothing renews the held lock now: once its lease has passed it counts as lost. */
    sleep_ms(SHORT_LEASE_MS + 50);
    assert_int_equal(lock_is_held(c, "t:down:held"), LOCK_ERR_LOST);

    assert_int_equal(redis_server_restart(g_state.srv), 0);
    /* A restarted Redis is empty (no persistence) and knows no scripts: all works. */
    assert_int_equal(lock_ping(c), LOCK_OK);
    assert_int_equal(lock_try_lock(c, "t:down", 1000, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:down"), LOCK_OK);
    assert_int_equal(lock_unlock(c, "t:down"), LOCK_OK);
    assert_int_equal(lock_is_held(c, "t:down:held"), LOCK_ERR_LOST);
    assert_int_equal(lock_unlock(c, "t:down:held"), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_is_held(c, "t:down:held"), LOCK_ERR_NOT_HELD);
    /* Redis lost the counter with everything else; tokens still grow past the old ones,
     * so a writer fenced with a token from before the restart stays refused. */
    assert_int_equal(lock_try_lock(c, "t:down:held", 0, 1000, &after), LOCK_OK);
    assert_true(after > before);
    assert_int_equal(lock_unlock(c, "t:down:held"), LOCK_OK);
    lock_client_destroy(c);
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "mx") == 0)
        return role_mutual_exclusion(atoi(argv[2]));
    if (argc == 4 && strcmp(argv[1], "lease") == 0)
        return role_lease(atoi(argv[2]), atoi(argv[3]));

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basics, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_mutual_exclusion, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_reentrancy, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_owner_check, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lease_expiry, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_watchdog, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_lock, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_wait_bound, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_wakeup, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fair_order, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fair_across_clients, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fair_dead_waiter, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fair_leave, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_handoff_gap, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_fencing, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_noscript, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_reply_on_acquire, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_reply_on_first_acquire, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_lost_reply_on_release, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_release_with_the_pool_exhausted, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_max_hold, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_subscriber_reconnect, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_subscriber_idle, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_redis_down, case_setup, case_teardown),
    };

    if (argc == 2) /* a pattern: run only the cases whose names match it */
        cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests_name("lock", tests, group_setup, group_teardown);
}
