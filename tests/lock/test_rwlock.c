/*
 * test_rwlock.c - the read-write lock (lock/rwlock.h), against a real redis-server:
 *   basics          readers share, a writer excludes both ways; the keys as Redis shows them;
 *                   arguments; a release by a non-holder changes nothing
 *   reentrancy      read in read, write in write, read in write; write in read refused at
 *                   once; each side freed at its own last release
 *   writer first    a writer in line shuts out new readers; the last reader out calls it
 *                   (pub/sub, not its lease); its release calls the readers it kept out
 *   exclusion       4 writers increment with GET+SET under the write side while 8 readers
 *                   read twice under the read side: no lost increment, no torn read
 *   leases          the watchdog keeps both sides past their lease; a fixed lease lapses
 *   read storm      64 reader threads whose holds overlap without end: a writer in line gets
 *                   in within a bound (figures printed); one that only tries never does
 *
 * The server, the fixtures and the tools: tests/lock/lock_support.h.
 */
#include "tests/lock/lock_support.h"

#include "lock/rwlock.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N "t:rw"

/* A call of another owner (a thread of its own), collected with rw_join. */
typedef struct rw_bg {
    lock_client *c;
    lock_rw_side side;
    int64_t wait_ms;
    int64_t hold_ms; /* held this long, then given back */
    int rc;
    int64_t got_ns; /* when the take returned */
    pthread_t thread;
} rw_bg;

static void *rw_bg_main(void *arg)
{
    rw_bg *b = arg;

    b->rc = lock_rw_lock(b->c, N, b->side, b->wait_ms, 10000, NULL);
    b->got_ns = now_ns();
    if (b->rc == LOCK_OK) {
        sleep_ms(b->hold_ms);
        lock_rw_unlock(b->c, N, b->side);
    }
    return NULL;
}

static void rw_start(rw_bg *b)
{
    assert_int_equal(pthread_create(&b->thread, NULL, rw_bg_main, b), 0);
}

static void rw_join(rw_bg *b)
{
    pthread_join(b->thread, NULL);
}

/* A single try by another owner, given back at once when it succeeds. */
static int other_try(lock_client *c, lock_rw_side side)
{
    rw_bg b = {.c = c, .side = side, .wait_ms = 0, .hold_ms = 0};

    rw_start(&b);
    rw_join(&b);
    return b.rc;
}

static void test_basics(void **state)
{
    lock_client *c = g_state.client;
    int64_t t1 = 0, t2 = 0;
    char name[600];

    (void)state;
    assert_int_equal(lock_rw_lock(NULL, N, LOCK_RW_READ, 0, 1000, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_rw_lock(c, "", LOCK_RW_READ, 0, 1000, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_READ, -1, 1000, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_WRITE, 0, 0, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_rw_lock(c, N, (lock_rw_side)7, 0, 1000, NULL), LOCK_ERR_INVALID);
    memset(name, 'x', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    assert_int_equal(lock_rw_lock(c, name, LOCK_RW_READ, 0, 1000, NULL), LOCK_ERR_INVALID);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_READ), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_rw_is_held(c, N, LOCK_RW_WRITE), LOCK_ERR_NOT_HELD);

    /* Readers share: two owners hold the read side at once, with one token. */
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_READ, 0, 5000, &t1), LOCK_OK);
    assert_true(t1 > INT64_C(1500000000000000));
    assert_int_equal(other_try(c, LOCK_RW_READ), LOCK_OK);
    assert_int_equal(redis_int("HLEN " N ":read"), 1); /* the other gave its hold back */
    assert_true(redis_int("PTTL " N ":read") > 4000);
    /* A reader keeps the writer out, and the writer's release by a non-holder is refused. */
    assert_int_equal(other_try(c, LOCK_RW_WRITE), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_WRITE), LOCK_ERR_NOT_HELD);
    assert_int_equal(lock_rw_is_held(c, N, LOCK_RW_READ), LOCK_OK);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_READ), LOCK_OK);
    assert_int_equal(redis_int("EXISTS " N ":read"), 0);

    /* A writer keeps readers and writers out; its tokens grow. */
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_WRITE, 0, 5000, &t1), LOCK_OK);
    assert_int_equal(redis_int("INCRBY " N ":write:fence 0"), t1);
    assert_int_equal(other_try(c, LOCK_RW_READ), LOCK_ERR_TIMEOUT);
    assert_int_equal(other_try(c, LOCK_RW_WRITE), LOCK_ERR_TIMEOUT);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_WRITE), LOCK_OK);
    assert_int_equal(redis_int("EXISTS " N ":write"), 0);
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_WRITE, 0, 5000, &t2), LOCK_OK);
    assert_true(t2 > t1);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_WRITE), LOCK_OK);
}

/* The one hold count of a side's hash (one owner), or -1. */
static long long hval(const char *key)
{
    redisReply *r = redis_cmd("HVALS %s", key);
    long long v = -1;

    if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1)
        v = atoll(r->element[0]->str);
    if (r != NULL)
        freeReplyObject(r);
    return v;
}

static void test_reentrancy(void **state)
{
    lock_client *c = g_state.client;
    int64_t w = 0, again = 0;
    int64_t start;

    (void)state;
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_WRITE, 0, 5000, &w), LOCK_OK);
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_WRITE, 0, 5000, &again), LOCK_OK);
    assert_int_equal(again, w); /* the same holding */
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_READ, 1000, 5000, NULL), LOCK_OK); /* in write */
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_READ, 1000, 5000, NULL), LOCK_OK);
    assert_int_equal(hval(N ":write"), 2);
    assert_int_equal(hval(N ":read"), 2);
    /* The write side given back, the read side kept: readers may come, writers not. */
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_WRITE), LOCK_OK);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_WRITE), LOCK_OK);
    assert_int_equal(redis_int("EXISTS " N ":write"), 0);
    assert_int_equal(other_try(c, LOCK_RW_READ), LOCK_OK);
    assert_int_equal(other_try(c, LOCK_RW_WRITE), LOCK_ERR_TIMEOUT);
    /* The other way round: write asked while holding only the read side is refused at once,
     * however long the wait, and changes nothing. */
    start = now_ns();
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_WRITE, 2000, 5000, NULL), LOCK_ERR_INVALID);
    assert_true(now_ns() - start < 50 * MS);
    assert_non_null(strstr(lock_last_error(), "wait for itself"));
    assert_int_equal(redis_int("EXISTS " N ":writers"), 0);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_READ), LOCK_OK);
    assert_int_equal(lock_rw_is_held(c, N, LOCK_RW_READ), LOCK_OK); /* one hold left */
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_READ), LOCK_OK);
    assert_int_equal(redis_int("EXISTS " N ":read"), 0);
    assert_int_equal(lock_rw_is_held(c, N, LOCK_RW_READ), LOCK_ERR_NOT_HELD);
    assert_int_equal(other_try(c, LOCK_RW_WRITE), LOCK_OK);
}

static void test_writer_first(void **state)
{
    lock_client *c = g_state.client;
    rw_bg writer = {.c = c, .side = LOCK_RW_WRITE, .wait_ms = 5000, .hold_ms = 200};
    rw_bg late = {.c = c, .side = LOCK_RW_READ, .wait_ms = 5000, .hold_ms = 0};
    long long writers = 0, readers = 0;
    int barged, unlocked;
    int64_t released;

    (void)state;
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_READ, 0, 10000, NULL), LOCK_OK);
    /* Nothing is asserted while the two threads run (an assertion leaves the case, and their
     * state with it): what they saw is checked once both are joined. */
    rw_start(&writer);
    for (int i = 0; i < 200 && (writers = redis_int("ZCARD " N ":writers")) != 1; i++)
        sleep_ms(5);
    /* Only a reader holds the lock, yet a new reader is refused: a writer waits. */
    barged = other_try(c, LOCK_RW_READ);
    rw_start(&late); /* waits behind the writer */
    for (int i = 0; i < 200 && (readers = redis_int("ZCARD " N ":readers")) != 1; i++)
        sleep_ms(5);
    released = now_ns();
    unlocked = lock_rw_unlock(c, N, LOCK_RW_READ);
    rw_join(&writer);
    rw_join(&late);
    assert_int_equal(writers, 1);
    assert_int_equal(barged, LOCK_ERR_TIMEOUT);
    assert_int_equal(readers, 1);
    assert_int_equal(unlocked, LOCK_OK);
    assert_int_equal(writer.rc, LOCK_OK);
    assert_int_equal(late.rc, LOCK_OK);
    /* Called by the release (a lease of 10 s would be the other way), and the reader only
     * once the writer had gone, called by its release. */
    assert_true(writer.got_ns - released < 150 * MS);
    assert_true(late.got_ns - writer.got_ns >= 200 * MS);
    assert_true(late.got_ns - writer.got_ns < 350 * MS);
    assert_int_equal(redis_int("EXISTS " N ":writers " N ":readers"), 0);
}

/* ---- exclusion under contention ---- */

static atomic_int torn;   /* reads that saw the value change under the read side */
static atomic_int failed; /* takes that did not succeed within their wait */

/* A GET of an integer key on a worker's own connection (cmocka's asserts are the main
 * thread's); -1 on any error. */
static long long get_on(redisContext *r, const char *key)
{
    redisReply *x = redisCommand(r, "GET %s", key);
    long long v = x != NULL && x->type == REDIS_REPLY_STRING ? atoll(x->str) : 0;

    if (x == NULL || x->type == REDIS_REPLY_ERROR)
        v = -1;
    if (x != NULL)
        freeReplyObject(x);
    return v;
}

static void *writer_main(void *arg)
{
    redisContext *r = redisConnect("127.0.0.1", g_state.port);

    for (int i = 0; i < 100; i++) {
        if (lock_rw_lock(arg, N, LOCK_RW_WRITE, 5000, LOCK_LEASE_WATCHDOG, NULL) != LOCK_OK) {
            atomic_fetch_add(&failed, 1);
            continue;
        }
        long long v = get_on(r, "t:value");
        freeReplyObject(redisCommand(r, "SET t:value %lld", v + 1));
        lock_rw_unlock(arg, N, LOCK_RW_WRITE);
    }
    redisFree(r);
    return NULL;
}

static void *reader_main(void *arg)
{
    redisContext *r = redisConnect("127.0.0.1", g_state.port);

    for (int i = 0; i < 100; i++) {
        if (lock_rw_lock(arg, N, LOCK_RW_READ, 5000, LOCK_LEASE_WATCHDOG, NULL) != LOCK_OK) {
            atomic_fetch_add(&failed, 1);
            continue;
        }
        long long a = get_on(r, "t:value");
        sleep_ms(1);
        if (get_on(r, "t:value") != a)
            atomic_fetch_add(&torn, 1);
        lock_rw_unlock(arg, N, LOCK_RW_READ);
    }
    redisFree(r);
    return NULL;
}

static void test_exclusion(void **state)
{
    lock_client *c2 = new_client(0); /* a second process, as far as Redis can tell */
    pthread_t t[12];

    (void)state;
    atomic_store(&torn, 0);
    atomic_store(&failed, 0);
    for (int i = 0; i < 12; i++)
        assert_int_equal(pthread_create(&t[i], NULL, i < 4 ? writer_main : reader_main,
                                        i % 2 ? g_state.client : c2),
                         0);
    for (int i = 0; i < 12; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&failed), 0);
    assert_int_equal(atomic_load(&torn), 0);
    assert_int_equal(redis_int("INCRBY t:value 0"), 400);
    lock_client_destroy(c2);
}

/* ---- leases ---- */

static void test_leases(void **state)
{
    lock_client *c = new_client(SHORT_LEASE_MS);

    (void)state;
    /* The watchdog renews both sides (each a holding of its own) past several leases. */
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_WRITE, 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_READ, 0, LOCK_LEASE_WATCHDOG, NULL), LOCK_OK);
    sleep_ms(4 * SHORT_LEASE_MS);
    assert_int_equal(redis_int("EXISTS " N ":write " N ":read"), 2);
    assert_int_equal(lock_rw_is_held(c, N, LOCK_RW_WRITE), LOCK_OK);
    assert_int_equal(lock_rw_is_held(c, N, LOCK_RW_READ), LOCK_OK);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_WRITE), LOCK_OK);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_READ), LOCK_OK);
    /* A fixed lease is not renewed: the read side lapses and a writer gets in. */
    assert_int_equal(lock_rw_lock(c, N, LOCK_RW_READ, 0, 200, NULL), LOCK_OK);
    assert_int_equal(other_try(c, LOCK_RW_WRITE), LOCK_ERR_TIMEOUT);
    sleep_ms(300);
    assert_int_equal(lock_rw_is_held(c, N, LOCK_RW_READ), LOCK_ERR_LOST);
    assert_int_equal(other_try(c, LOCK_RW_WRITE), LOCK_OK);
    assert_int_equal(lock_rw_unlock(c, N, LOCK_RW_READ), LOCK_ERR_NOT_HELD);
    lock_client_destroy(c);
}

/* ---- the read storm ---- */

#define STORM_READERS 64
#define STORM_WRITES 5

static atomic_bool storm_on;

/* A reader that takes the read side, holds it 2 ms, gives it back, and again, until the
 * storm ends: 64 of them keep the read side held without a gap. */
static void *storm_reader(void *arg)
{
    while (atomic_load(&storm_on)) {
        if (lock_rw_lock(arg, N, LOCK_RW_READ, 2000, LOCK_LEASE_WATCHDOG, NULL) == LOCK_OK) {
            sleep_ms(2);
            lock_rw_unlock(arg, N, LOCK_RW_READ);
        }
    }
    return NULL;
}

static lock_client *storm_client(void)
{
    lock_options o;
    lock_client *c = NULL;

    lock_options_init(&o);
    o.redis_port = g_state.port;
    o.pool_size = STORM_READERS / 2 + 1;
    assert_int_equal(lock_client_create(&o, &c), LOCK_OK);
    return c;
}

static void test_read_storm(void **state)
{
    lock_client *c[2] = {storm_client(), storm_client()};
    pthread_t t[STORM_READERS];
    int64_t waits[STORM_WRITES], start;
    int barged = 0, rc = LOCK_OK;

    (void)state;
    atomic_store(&storm_on, true);
    for (int i = 0; i < STORM_READERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, storm_reader, c[i % 2]), 0);
    sleep_ms(300);
    /* A writer that only tries (no place in line) finds the read side held every time. */
    for (int i = 0; i < 20; i++) {
        barged += other_try(g_state.client, LOCK_RW_WRITE) == LOCK_OK;
        sleep_ms(5);
    }
    /* A writer in line: the readers in drain, no new one comes in. */
    for (int i = 0; i < STORM_WRITES; i++) {
        start = now_ns();
        rc = lock_rw_lock(g_state.client, N, LOCK_RW_WRITE, 5000, LOCK_LEASE_WATCHDOG, NULL);
        waits[i] = now_ns() - start;
        if (rc != LOCK_OK)
            break; /* asserted once the readers are stopped */
        lock_rw_unlock(g_state.client, N, LOCK_RW_WRITE);
        sleep_ms(100);
    }
    atomic_store(&storm_on, false);
    for (int i = 0; i < STORM_READERS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(rc, LOCK_OK);
    print_message("read storm: %d readers holding 2 ms each; a writer that only tries got in "
                  "%d of 20 times; in line, waited median %.1f ms, max %.1f ms (%d writes)\n",
                  STORM_READERS, barged, (double)percentile(waits, STORM_WRITES, 50) / MS,
                  (double)percentile(waits, STORM_WRITES, 100) / MS, STORM_WRITES);
    assert_int_equal(barged, 0);
    /* The bound: the longest read in progress (2 ms) plus the hand-off, on a loaded 2-core
     * machine under sanitizers; without the line the wait has no bound at all (above). */
    assert_true(percentile(waits, STORM_WRITES, 100) < 500 * MS);
    lock_client_destroy(c[0]);
    lock_client_destroy(c[1]);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basics, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_reentrancy, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_writer_first, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_exclusion, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_leases, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_read_storm, case_setup, case_teardown),
    };

    return lock_test_main("test_rwlock", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
