/*
 * test_zookeeper.c - the ZooKeeper lock (lock/zookeeper/) against a real ZooKeeper started
 * once for this program (tests/support/zk_server.c: the JVM is paid for once) on a free
 * loopback port.
 *
 * Mutual exclusion is checked as test_etcd.c checks it: every holder reads a counter from
 * a file, pauses, writes it back plus one; two holders at once lose increments. Two
 * processes of 8 threads each share the file; the second process is this binary
 * re-executed with the role "mx".
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* The test expires a session from a second handle of its own, with the library's calls. */
#define THREADED
#include <zookeeper/zookeeper.h>

#include "lock/zookeeper/zk_lock.h"
#include "tests/support/zk_server.h"

#define MX_THREADS 8
#define MX_ROUNDS 8
/* The request timeout of the tests' clients: generous, because the machine is shared and a
 * JVM starved of CPU answers late; the bounds asserted below are in terms of it. */
#define REQUEST_TIMEOUT_MS 2000

static zk_server *server;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The calling thread's owner: the tests hold their locks per thread, as the service does. */
static const char *me(void)
{
    static _Thread_local char owner[QUEUE_LOCK_OWNER_MAX];

    if (owner[0] == '\0')
        queue_lock_thread_owner(owner);
    return owner;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static zk_lock_client *new_client(const char *hosts, int session_ms)
{
    queue_lock_options opts;
    zk_lock_client *c = NULL;

    queue_lock_options_init(&opts);
    opts.servers = hosts;
    opts.lease_ms = session_ms;
    opts.request_timeout_ms = REQUEST_TIMEOUT_MS;
    if (zk_lock_client_create(&opts, &c) != QUEUE_LOCK_OK)
        return NULL;
    return c;
}

/* ---- mutual exclusion -------------------------------------------------------------- */

typedef struct mx_arg {
    zk_lock_client *c;
    const char *file;
    int failures;
} mx_arg;

static void *mx_thread(void *p)
{
    mx_arg *a = p;

    for (int i = 0; i < MX_ROUNDS; i++) {
        long n = 0;
        FILE *f;

        if (queue_lock_acquire(a->c, "mx", me(), 30000, NULL) != QUEUE_LOCK_OK) {
            a->failures++;
            continue;
        }
        f = fopen(a->file, "r");
        if (f != NULL) {
            if (fscanf(f, "%ld", &n) != 1)
                n = 0;
            fclose(f);
        }
        sleep_ms(1); /* widen the window a second holder would need */
        f = fopen(a->file, "w");
        if (f != NULL) {
            fprintf(f, "%ld\n", n + 1);
            fclose(f);
        }
        if (queue_lock_release(a->c, "mx", me()) != QUEUE_LOCK_OK)
            a->failures++;
    }
    return NULL;
}

/* Runs MX_THREADS threads on one client; returns the number of failed calls. */
static int run_mx(const char *hosts, const char *file)
{
    pthread_t t[MX_THREADS];
    mx_arg a[MX_THREADS];
    zk_lock_client *c = new_client(hosts, 5000);
    int failures = 0;

    if (c == NULL)
        return -1;
    for (int i = 0; i < MX_THREADS; i++) {
        a[i] = (mx_arg){c, file, 0};
        pthread_create(&t[i], NULL, mx_thread, &a[i]);
    }
    for (int i = 0; i < MX_THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += a[i].failures;
    }
    if (failures > 0)
        fprintf(stderr, "mx: %d failed calls, last: %s\n", failures, queue_lock_last_error());
    queue_lock_destroy(c);
    return failures;
}

static void test_mutual_exclusion(void **state)
{
    char file[] = "/tmp/test-zk-mx.XXXXXX";
    int fd = mkstemp(file), status = 0;
    long n = -1;
    pid_t child;
    FILE *f;

    (void)state;
    assert_true(fd >= 0);
    close(fd);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        execl("/proc/self/exe", "test_zookeeper", "mx", zk_server_hosts(server), file,
              (char *)NULL);
        _exit(127);
    }
    assert_int_equal(run_mx(zk_server_hosts(server), file), 0);
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    f = fopen(file, "r");
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld", &n), 1);
    fclose(f);
    unlink(file);
    assert_int_equal(n, 2 * MX_THREADS * MX_ROUNDS);
}

/* ---- reentrancy, tokens -------------------------------------------------------------- */

static void test_reentrancy_and_token(void **state)
{
    zk_lock_client *c = new_client(zk_server_hosts(server), 5000);
    int64_t t1 = 0, t2 = 0, t3 = 0, t4 = 0;

    (void)state;
    assert_non_null(c);
    assert_int_equal(queue_lock_acquire(c, "re", me(), 0, &t1), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(c, "re", me(), 0, &t2), QUEUE_LOCK_OK);
    assert_true(t1 > 0);
    assert_int_equal(t1, t2);
    assert_int_equal(queue_lock_is_held(c, "re", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "re", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_is_held(c, "re", me()), QUEUE_LOCK_OK); /* one hold left */
    assert_int_equal(queue_lock_release(c, "re", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_is_held(c, "re", me()), QUEUE_LOCK_ERR_NOT_HELD);
    assert_int_equal(queue_lock_release(c, "re", me()), QUEUE_LOCK_ERR_NOT_HELD);
    /* A later holding has a greater token, of this lock or of another (czxid is global). */
    assert_int_equal(queue_lock_acquire(c, "re", me(), 0, &t3), QUEUE_LOCK_OK);
    assert_true(t3 > t1);
    assert_int_equal(queue_lock_acquire(c, "re-other", me(), 0, &t4), QUEUE_LOCK_OK);
    assert_true(t4 > t3);
    assert_int_equal(queue_lock_release(c, "re-other", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "re", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(c, "a/b", me(), 0, NULL), QUEUE_LOCK_ERR_INVALID);
    assert_int_equal(queue_lock_acquire(c, "", me(), 0, NULL), QUEUE_LOCK_ERR_INVALID);
    queue_lock_destroy(c);
}

/* ---- bounded wait and wake-up ---------------------------------------------------------- */

typedef struct waiter {
    zk_lock_client *c;
    int64_t wait_ms;
    int rc;
    int64_t done_at;
} waiter;

static void *wait_thread(void *p)
{
    waiter *w = p;

    w->rc = queue_lock_acquire(w->c, "wb", me(), w->wait_ms, NULL);
    w->done_at = now_ms();
    if (w->rc == QUEUE_LOCK_OK)
        queue_lock_release(w->c, "wb", me());
    return NULL;
}

static void test_bounded_wait(void **state)
{
    zk_lock_client *c = new_client(zk_server_hosts(server), 5000);
    zk_lock_client *other = new_client(zk_server_hosts(server), 5000);
    waiter w;
    pthread_t t;
    int64_t start;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(queue_lock_acquire(c, "wb", me(), 0, NULL), QUEUE_LOCK_OK);
    w = (waiter){other, 400, 1, 0};
    start = now_ms();
    pthread_create(&t, NULL, wait_thread, &w);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, QUEUE_LOCK_ERR_TIMEOUT);
    assert_true(w.done_at - start >= 400);
    assert_true(w.done_at - start < 400 + REQUEST_TIMEOUT_MS); /* wait + a request timeout */
    /* The waiter left the queue: a try of the other client after the release gets it. */
    assert_int_equal(queue_lock_release(c, "wb", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(other, "wb", me(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(other, "wb", me()), QUEUE_LOCK_OK);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
}

/* A waiter is woken by the watch on its predecessor, not by a poll: it gets the lock
 * within a small time of the release, while its wait bound is long. */
static void test_wakeup(void **state)
{
    zk_lock_client *c = new_client(zk_server_hosts(server), 5000);
    zk_lock_client *other = new_client(zk_server_hosts(server), 5000);
    waiter w;
    pthread_t t;
    int64_t released;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(queue_lock_acquire(c, "wb", me(), 0, NULL), QUEUE_LOCK_OK);
    w = (waiter){other, 20000, 1, 0};
    pthread_create(&t, NULL, wait_thread, &w);
    sleep_ms(500); /* the waiter is queued and watching */
    released = now_ms();
    assert_int_equal(queue_lock_release(c, "wb", me()), QUEUE_LOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, QUEUE_LOCK_OK);
    print_message("wake-up after release: %" PRId64 " ms\n", w.done_at - released);
    assert_true(w.done_at - released < 1000);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
}

/* ---- session expiry -------------------------------------------------------------------- */

/* Expires session `id` the way ZooKeeper's own tests do: a second handle opened with the
 * same id and password, then closed, ends the session on the server. Until a handle opened
 * with them is told the session expired: the owner's own handle, which lost its connection
 * to the second one, may reconnect with the session before the close arrives, and the server
 * then refuses a close from the connection the session moved away from (it stays alive). */
static int expire_session(const char *hosts, int64_t id, const char passwd[16])
{
    clientid_t cid;
    zhandle_t *zh;

    cid.client_id = id;
    memcpy(cid.passwd, passwd, sizeof(cid.passwd));
    for (int attempt = 0; attempt < 5; attempt++) {
        int state = 0;

        zh = zookeeper_init(hosts, NULL, 5000, &cid, NULL, 0);
        if (zh == NULL)
            return -1;
        for (int waited = 0; waited <= 5000; waited += 10) {
            state = zoo_state(zh);
            if (state == ZOO_CONNECTED_STATE || state == ZOO_EXPIRED_SESSION_STATE)
                break;
            sleep_ms(10);
        }
        if (zookeeper_close(zh) != ZOK && state != ZOO_EXPIRED_SESSION_STATE)
            return -1;
        if (state == ZOO_EXPIRED_SESSION_STATE)
            return 0;
        if (state != ZOO_CONNECTED_STATE)
            return -1;
    }
    return -1;
}

static void test_session_expired_is_lost(void **state)
{
    zk_lock_client *c = new_client(zk_server_hosts(server), 2000);
    zk_lock_client *other = new_client(zk_server_hosts(server), 2000);
    char passwd[16];
    int64_t id = 0, start, t1 = 0, t2 = 0;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(queue_lock_acquire(c, "ll", me(), 0, &t1), QUEUE_LOCK_OK);
    assert_int_equal(zk_lock_session(c, &id, passwd), QUEUE_LOCK_OK);
    assert_int_equal(expire_session(zk_server_hosts(server), id, passwd), 0);
    /* The client hears of it (the library's session event) and reports the holding lost. */
    start = now_ms();
    while (queue_lock_is_held(c, "ll", me()) == QUEUE_LOCK_OK && now_ms() - start < 5000)
        sleep_ms(20);
    print_message("session expiry seen after %" PRId64 " ms\n", now_ms() - start);
    assert_int_equal(queue_lock_is_held(c, "ll", me()), QUEUE_LOCK_ERR_LOST);
    /* A lost holding is not reentered. */
    assert_int_equal(queue_lock_acquire(c, "ll", me(), 0, NULL), QUEUE_LOCK_ERR_LOST);
    /* The node goes with the session: another owner takes it, with a greater token, as soon
     * as the server has ended the session. c hears of its loss when its connection is taken
     * over, which can be before the server has processed the close (on a busy machine it
     * was): so the other waits. Up to 5 s, not the session timeout (2 s): a server as busy
     * as a full make test under ThreadSanitizer once took longer to close it, and this wait
     * is for the server, not a bound the lock promises. */
    start = now_ms();
    assert_int_equal(queue_lock_acquire(other, "ll", me(), 5000, &t2), QUEUE_LOCK_OK);
    print_message("the other owner had the lock %" PRId64 " ms later\n", now_ms() - start);
    assert_true(t2 > t1);
    assert_int_equal(queue_lock_release(other, "ll", me()), QUEUE_LOCK_OK);
    /* The lost holding is cleared by its release (whose delete may fail: the session is
     * gone); the client then works on a new session. */
    queue_lock_release(c, "ll", me());
    assert_int_equal(queue_lock_release(c, "ll", me()), QUEUE_LOCK_ERR_NOT_HELD);
    assert_int_equal(queue_lock_acquire(c, "ll", me(), 1000, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_is_held(c, "ll", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "ll", me()), QUEUE_LOCK_OK);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
}

/* ---- server down, then back ------------------------------------------------------------ */

static void test_server_down(void **state)
{
    zk_lock_client *c = new_client(zk_server_hosts(server), 4000);
    int64_t start;

    (void)state;
    assert_non_null(c);
    assert_int_equal(queue_lock_acquire(c, "down", me(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(zk_server_stop(server), 0);
    /* Disconnected: the holding can no longer be vouched for. */
    start = now_ms();
    while (queue_lock_is_held(c, "down", me()) == QUEUE_LOCK_OK && now_ms() - start < 5000)
        sleep_ms(20);
    assert_int_equal(queue_lock_is_held(c, "down", me()), QUEUE_LOCK_ERR_LOST);
    start = now_ms();
    assert_int_equal(queue_lock_acquire(c, "down-2", me(), 500, NULL), QUEUE_LOCK_ERR_SERVER);
    assert_true(now_ms() - start < REQUEST_TIMEOUT_MS + 500); /* a request timeout, and slack */
    assert_true(queue_lock_last_error()[0] != '\0');
    queue_lock_release(c, "down", me());
    assert_int_equal(zk_server_restart(server), 0);
    /* Back: the client reconnects by itself (the session, kept in the server's data,
     * survives a quick restart, or a new one is opened). */
    start = now_ms();
    while (queue_lock_acquire(c, "down-2", me(), 2000, NULL) != QUEUE_LOCK_OK && now_ms() - start < 10000)
        sleep_ms(100);
    print_message("back after the restart: the lock had in %" PRId64 " ms\n", now_ms() - start);
    assert_int_equal(queue_lock_is_held(c, "down-2", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "down-2", me()), QUEUE_LOCK_OK);
    queue_lock_destroy(c);
}

/* ---- a hung server: every caller returns within its bound ------------------------------ */

#define HUNG_THREADS 12
#define HUNG_TIMEOUT_MS 300
#define HUNG_WAIT_MS 200

typedef struct hung_arg {
    zk_lock_client *c;
    int rc;
    int64_t ms;
} hung_arg;

static void *hung_acquire(void *p)
{
    hung_arg *a = p;
    int64_t start = now_ms();

    a->rc = queue_lock_acquire(a->c, "hung", me(), HUNG_WAIT_MS, NULL);
    a->ms = now_ms() - start;
    return NULL;
}

/*
 * A client with a connected session meets a server that keeps its connections and answers
 * nothing. The library would notice only after two thirds of the session timeout (here 6 s);
 * each request is cut at the request timeout instead, the session whose create went
 * unanswered is ended, and a new one cannot connect within a request timeout: every caller
 * returns within wait + 3 request timeouts, however many arrive at once.
 */
static void test_hung_server_bounded(void **state)
{
    queue_lock_options opts;
    zk_lock_client *c = NULL;
    pthread_t t[HUNG_THREADS];
    hung_arg a[HUNG_THREADS];
    int64_t worst = 0, start;

    (void)state;
    queue_lock_options_init(&opts);
    opts.servers = zk_server_hosts(server);
    opts.lease_ms = 9000;
    opts.request_timeout_ms = HUNG_TIMEOUT_MS;
    assert_int_equal(zk_lock_client_create(&opts, &c), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(c, "hung", me(), 0, NULL), QUEUE_LOCK_OK); /* connected */
    assert_int_equal(queue_lock_release(c, "hung", me()), QUEUE_LOCK_OK);
    assert_int_equal(zk_server_freeze(server), 0);
    for (int i = 0; i < HUNG_THREADS; i++) {
        a[i].c = c;
        pthread_create(&t[i], NULL, hung_acquire, &a[i]);
    }
    for (int i = 0; i < HUNG_THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(zk_server_thaw(server), 0);
    for (int i = 0; i < HUNG_THREADS; i++) {
        assert_int_equal(a[i].rc, QUEUE_LOCK_ERR_SERVER);
        if (a[i].ms > worst)
            worst = a[i].ms;
    }
    print_message("hung ZooKeeper: the slowest of %d callers returned after %" PRId64 " ms\n",
                  HUNG_THREADS, worst);
    assert_true(worst <= HUNG_WAIT_MS + 3 * HUNG_TIMEOUT_MS + 200); /* + scheduling slack */
    /* Thawed, it serves again. */
    start = now_ms();
    while (queue_lock_acquire(c, "hung", me(), 2000, NULL) != QUEUE_LOCK_OK && now_ms() - start < 10000)
        sleep_ms(100);
    assert_int_equal(queue_lock_is_held(c, "hung", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "hung", me()), QUEUE_LOCK_OK);
    queue_lock_destroy(c);
}

static int group_setup(void **state)
{
    (void)state;
    if (zk_server_start(&server) != 0)
        return -1;
    /* "ruok" answers as soon as the server listens, but a JVM just started (and sharing the
     * cores with other work) can take seconds more to open its first sessions. Wait, at most
     * 30 s, until one session has taken and released a lock, so that the cases' own bounds
     * (2 s per request) time the lock and not the server's warm-up. */
    zk_lock_client *c = new_client(zk_server_hosts(server), 10000);
    int64_t start = now_ms();
    int rc = QUEUE_LOCK_ERR_TIMEOUT;

    while (c != NULL && (rc = queue_lock_acquire(c, "warm-up", me(), 2000, NULL)) != QUEUE_LOCK_OK &&
           now_ms() - start < 30000)
        sleep_ms(100);
    if (rc == QUEUE_LOCK_OK)
        queue_lock_release(c, "warm-up", me());
    print_message("zookeeper: a first session had a lock %" PRId64 " ms after the server said imok\n",
                  now_ms() - start);
    if (c != NULL)
        queue_lock_destroy(c);
    return rc == QUEUE_LOCK_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    zk_server_destroy(server);
    return 0;
}

int main(int argc, char **argv)
{
    zoo_set_debug_level(0);
    if (argc == 4 && strcmp(argv[1], "mx") == 0)
        return run_mx(argv[2], argv[3]) == 0 ? 0 : 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reentrancy_and_token),
        cmocka_unit_test(test_mutual_exclusion),
        cmocka_unit_test(test_bounded_wait),
        cmocka_unit_test(test_wakeup),
        cmocka_unit_test(test_session_expired_is_lost),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_hung_server_bounded),
    };
    return cmocka_run_group_tests_name("zookeeper", tests, group_setup, group_teardown);
}
