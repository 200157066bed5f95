/*
 * test_exclusion.c - the Redis lock (lock/) excludes, against a real redis-server:
 *   basics              an acquire and release, as seen in Redis; arguments; ping; stats
 *   mutual exclusion    2 processes x 8 threads, 10,000 GET+SET increments under the lock
 *   reentrancy          3 takes, 2 releases: still held and exclusive; 1 more: free
 *   owner check         another thread's unlock fails and leaves the lock alone
 *
 * The server, the fixtures and the tools: tests/lock/lock_support.h.
 */
#include "tests/lock/lock_support.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

    /* The next holding gets a larger token (past the counter and Redis' clock in us). */
    assert_int_equal(lock_try_lock(c, "t:basic", 0, LOCK_LEASE_WATCHDOG, &token), LOCK_OK);
    assert_true(token > first);
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

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "mx") == 0)
        return role_mutual_exclusion(atoi(argv[2]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basics, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_mutual_exclusion, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_reentrancy, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_owner_check, case_setup, case_teardown),
    };

    return lock_test_main("test_exclusion", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
