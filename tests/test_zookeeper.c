/*
 * test_zookeeper.c - the ZooKeeper lock (lock/zookeeper/) against a real ZooKeeper started
 * once for this program (tests/support/zk_server.c: the JVM is paid for once) on a free
 * loopback port.
 *
 * The cases every queue-lock backend passes (mutual exclusion, reentrancy and tokens, the
 * wait bound, the wake-up) are tests/support/queue_cases.c's; the cases here are
 * ZooKeeper's own: an expired session, the server down and back, a hung server, a connection
 * attempt the server accepts and never answers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* The test expires a session from a second handle of its own, with the library's calls. */
#define THREADED
#include <zookeeper/zookeeper.h>

#include "lock/clock.h"
#include "lock/zookeeper/zk_lock.h"
#include "tests/support/zk_server.h"
#include "tests/support/queue_cases.h"
#include "tests/support/relay.h"

/* The request timeout of the tests' clients: generous, because the machine is shared and a
 * JVM starved of CPU answers late; the bounds asserted below are in terms of it. */
#define REQUEST_TIMEOUT_MS 2000

static zk_server *server;

/* ---- session expiry -------------------------------------------------------------------- */

/* The session events of expire_session's handle, as its watcher is given them. */
typedef struct session_events {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* the last session event's state; 0 before the first */
} session_events;

/* The handle's watcher, run by the library's completion thread: records and wakes. */
static void session_watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    session_events *e = ctx;

    (void)zh;
    (void)path;
    if (type != ZOO_SESSION_EVENT)
        return;
    pthread_mutex_lock(&e->mu);
    e->state = state;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Waits at most ms for a session event that says connected or expired; the state the last
 * event said. */
static int session_event_within(session_events *e, int ms)
{
    int64_t until = lock__deadline_ns(ms);
    int state;

    pthread_mutex_lock(&e->mu);
    while (e->state != ZOO_CONNECTED_STATE && e->state != ZOO_EXPIRED_SESSION_STATE)
        if (lock__cond_wait_until(&e->cv, &e->mu, until) == ETIMEDOUT)
            break;
    state = e->state;
    pthread_mutex_unlock(&e->mu);
    return state;
}

/*
 * Expires session `id` the way ZooKeeper's own tests do: a second handle opened with the
 * same id and password, then closed, ends the session on the server. Until a handle opened
 * with them is told the session expired: the owner's own handle, which lost its connection
 * to the second one, may reconnect with the session before the close arrives, and the server
 * then refuses a close from the connection the session moved away from (it stays alive).
 *
 * The handle is closed once its watcher has been given the event, not once zoo_state says
 * so: the library's network thread sets the state before it queues the event, and
 * zookeeper_close, in the multi-threaded library, frees nothing that thread queues after the
 * completion thread has stopped (ZOOKEEPER-2894). A handle closed on its state, a few
 * milliseconds after zookeeper_init, with a completion thread that had not run yet, lost its
 * "connected" event and the "connecting" one after it (704 bytes; 2 of 240 expiries under a
 * load of 12 on two cores, 1 of 360 closed on the event); tests/lsan.supp says what remains.
 */
static int expire_session(const char *hosts, int64_t id, const char passwd[16])
{
    clientid_t cid;

    cid.client_id = id;
    memcpy(cid.passwd, passwd, sizeof(cid.passwd));
    for (int attempt = 0; attempt < 5; attempt++) {
        session_events e = {.state = 0};
        zhandle_t *zh;
        int state, rc;

        if (lock__cond_init(&e.cv) != 0)
            return -1;
        pthread_mutex_init(&e.mu, NULL);
        zh = zookeeper_init(hosts, session_watcher, 5000, &cid, &e, 0);
        state = zh != NULL ? session_event_within(&e, 5000) : 0;
        /* After the close no watcher runs any more: e can go. */
        rc = zh != NULL ? zookeeper_close(zh) : ZSYSTEMERROR;
        pthread_cond_destroy(&e.cv);
        pthread_mutex_destroy(&e.mu);
        if (zh == NULL)
            return -1;
        if (state == ZOO_EXPIRED_SESSION_STATE)
            return 0;
        if (rc != ZOK || state != ZOO_CONNECTED_STATE)
            return -1;
    }
    return -1;
}

static void test_session_expired_is_lost(void **state)
{
    zk_lock_client *c = queue_cases_client(2000);
    zk_lock_client *other = queue_cases_client(2000);
    char passwd[16];
    int64_t id = 0, start, t1 = 0, t2 = 0;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(queue_lock_acquire(c, "ll", queue_cases_owner(), 0, &t1), QUEUE_LOCK_OK);
    assert_int_equal(zk_lock_session(c, &id, passwd), QUEUE_LOCK_OK);
    assert_int_equal(expire_session(zk_server_hosts(server), id, passwd), 0);
    /* The client hears of it (the library's session event) and reports the holding lost. */
    start = queue_cases_now_ms();
    while (queue_lock_is_held(c, "ll", queue_cases_owner()) == QUEUE_LOCK_OK &&
           queue_cases_now_ms() - start < 5000)
        queue_cases_sleep_ms(20);
    print_message("session expiry seen after %" PRId64 " ms\n", queue_cases_now_ms() - start);
    assert_int_equal(queue_lock_is_held(c, "ll", queue_cases_owner()), QUEUE_LOCK_ERR_LOST);
    /* A lost holding is not reentered. */
    assert_int_equal(queue_lock_acquire(c, "ll", queue_cases_owner(), 0, NULL),
                     QUEUE_LOCK_ERR_LOST);
    /* The node goes with the session: another owner takes it, with a greater token, as soon
     * as the server has ended the session. c hears of its loss when its connection is taken
     * over, which can be before the server has processed the close (on a busy machine it
     * was): so the other waits. Up to 5 s, not the session timeout (2 s): a server as busy
     * as a full make test under ThreadSanitizer once took longer to close it, and this wait
     * is for the server, not a bound the lock promises. */
    start = queue_cases_now_ms();
    assert_int_equal(queue_lock_acquire(other, "ll", queue_cases_owner(), 5000, &t2),
                     QUEUE_LOCK_OK);
    print_message("the other owner had the lock %" PRId64 " ms later\n",
                  queue_cases_now_ms() - start);
    assert_true(t2 > t1);
    assert_int_equal(queue_lock_release(other, "ll", queue_cases_owner()), QUEUE_LOCK_OK);
    /* The lost holding is cleared by its release (whose delete may fail: the session is
     * gone); the client then works on a new session. */
    queue_lock_release(c, "ll", queue_cases_owner());
    assert_int_equal(queue_lock_release(c, "ll", queue_cases_owner()), QUEUE_LOCK_ERR_NOT_HELD);
    assert_int_equal(queue_lock_acquire(c, "ll", queue_cases_owner(), 1000, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_is_held(c, "ll", queue_cases_owner()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "ll", queue_cases_owner()), QUEUE_LOCK_OK);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
}

/* ---- server down, then back ------------------------------------------------------------ */

static void test_server_down(void **state)
{
    zk_lock_client *c = queue_cases_client(4000);
    int64_t start;

    (void)state;
    assert_non_null(c);
    assert_int_equal(queue_lock_acquire(c, "down", queue_cases_owner(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(zk_server_stop(server), 0);
    /* Disconnected: the holding can no longer be vouched for. */
    start = queue_cases_now_ms();
    while (queue_lock_is_held(c, "down", queue_cases_owner()) == QUEUE_LOCK_OK &&
           queue_cases_now_ms() - start < 5000)
        queue_cases_sleep_ms(20);
    assert_int_equal(queue_lock_is_held(c, "down", queue_cases_owner()), QUEUE_LOCK_ERR_LOST);
    start = queue_cases_now_ms();
    assert_int_equal(queue_lock_acquire(c, "down-2", queue_cases_owner(), 500, NULL),
                     QUEUE_LOCK_ERR_SERVER);
    assert_true(queue_cases_now_ms() - start <
                REQUEST_TIMEOUT_MS + 500); /* a request timeout, and slack */
    assert_true(queue_lock_last_error()[0] != '\0');
    queue_lock_release(c, "down", queue_cases_owner());
    assert_int_equal(zk_server_restart(server), 0);
    /* Back: the client reconnects by itself (the session, kept in the server's data,
     * survives a quick restart, or a new one is opened). */
    start = queue_cases_now_ms();
    while (queue_lock_acquire(c, "down-2", queue_cases_owner(), 2000, NULL) != QUEUE_LOCK_OK &&
           queue_cases_now_ms() - start < 10000)
        queue_cases_sleep_ms(100);
    print_message("back after the restart: the lock had in %" PRId64 " ms\n",
                  queue_cases_now_ms() - start);
    assert_int_equal(queue_lock_is_held(c, "down-2", queue_cases_owner()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "down-2", queue_cases_owner()), QUEUE_LOCK_OK);
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
    int64_t start = queue_cases_now_ms();

    a->rc = queue_lock_acquire(a->c, "hung", queue_cases_owner(), HUNG_WAIT_MS, NULL);
    a->ms = queue_cases_now_ms() - start;
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
    assert_int_equal(queue_lock_acquire(c, "hung", queue_cases_owner(), 0, NULL),
                     QUEUE_LOCK_OK); /* connected */
    assert_int_equal(queue_lock_release(c, "hung", queue_cases_owner()), QUEUE_LOCK_OK);
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
    start = queue_cases_now_ms();
    while (queue_lock_acquire(c, "hung", queue_cases_owner(), 2000, NULL) != QUEUE_LOCK_OK &&
           queue_cases_now_ms() - start < 10000)
        queue_cases_sleep_ms(100);
    assert_int_equal(queue_lock_is_held(c, "hung", queue_cases_owner()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "hung", queue_cases_owner()), QUEUE_LOCK_OK);
    queue_lock_destroy(c);
}

/* ---- a connection attempt the server never answers ------------------------------------ */

/* This case's session timeout: the service's default lease, under which the library gives
 * one connection attempt two thirds of it (20 s) to be answered. */
#define STUCK_LEASE_MS 30000

/* The first connection on a listening socket within wait_ms, or -1. */
static int accept_within(int listener, int wait_ms)
{
    struct pollfd p = {.fd = listener, .events = POLLIN};

    return poll(&p, 1, wait_ms) == 1 ? accept(listener, NULL, NULL) : -1;
}

/* "ruok" answers as soon as the server listens, but a JVM just started (and sharing the cores
 * with other work) can take seconds more to open its first sessions. Waits, at most 30 s,
 * until a session of a fresh client has taken and released a lock, so that a case's own
 * bounds (2 s per request) time the lock and not the server's warm-up. 0 once it has. */
static int server_warm_up(void)
{
    zk_lock_client *c = queue_cases_client(10000);
    int64_t start = queue_cases_now_ms();
    int rc = QUEUE_LOCK_ERR_TIMEOUT;

    while (c != NULL &&
           (rc = queue_lock_acquire(c, "warm-up", queue_cases_owner(), 2000, NULL)) !=
               QUEUE_LOCK_OK &&
           queue_cases_now_ms() - start < 30000)
        queue_cases_sleep_ms(100);
    if (rc == QUEUE_LOCK_OK)
        queue_lock_release(c, "warm-up", queue_cases_owner());
    print_message("zookeeper: a first session had a lock %" PRId64
                  " ms after the server said imok\n",
                  queue_cases_now_ms() - start);
    if (c != NULL)
        queue_lock_destroy(c);
    return rc == QUEUE_LOCK_OK ? 0 : -1;
}

/*
 * ZooKeeper restarted, and the client's first connection attempt fell in the moment the
 * server listens but does not serve yet: the server accepts it and never answers it (seen on
 * a loaded machine, every replica stuck at once, since they all try on the same beat). The
 * test holds that moment open: its own socket on the server's port accepts the attempt and
 * answers nothing, then the server starts there again. The library alone would wait 20 s on
 * the attempt; the client gives it up within a request timeout of first finding it pending,
 * opens a new handle, and has the lock within two request timeouts of the restarted server
 * serving (on the old client: 20 s).
 */
static void test_unanswered_attempt_replaced(void **state)
{
    zk_lock_client *c = queue_cases_client(STUCK_LEASE_MS);
    int listener, attempt;
    int64_t start, took;

    (void)state;
    assert_non_null(c);
    assert_int_equal(queue_lock_acquire(c, "stuck", queue_cases_owner(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "stuck", queue_cases_owner()), QUEUE_LOCK_OK);
    assert_int_equal(zk_server_stop(server), 0);
    listener = relay_listen_loopback(zk_server_port(server));
    assert_true(listener >= 0);
    /* The library tries again every sixtieth of the session timeout (500 ms). */
    attempt = accept_within(listener, 5000);
    close(listener);
    assert_true(attempt >= 0);
    assert_int_equal(zk_server_restart(server), 0);
    /* The server warmed up by another client first: the bound below times this client's
     * giving up of its stuck attempt, not the JVM's first sessions (seconds on a busy
     * machine). The stuck attempt stays pending meanwhile: nothing of c looks at it. */
    assert_int_equal(server_warm_up(), 0);
    start = queue_cases_now_ms();
    while (queue_lock_acquire(c, "stuck", queue_cases_owner(), 0, NULL) != QUEUE_LOCK_OK &&
           queue_cases_now_ms() - start < 25000)
        queue_cases_sleep_ms(100);
    took = queue_cases_now_ms() - start;
    close(attempt);
    print_message("a connection attempt left unanswered: the lock had %" PRId64
                  " ms after the restart\n",
                  took);
    assert_int_equal(queue_lock_is_held(c, "stuck", queue_cases_owner()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "stuck", queue_cases_owner()), QUEUE_LOCK_OK);
    assert_true(took <= 2 * REQUEST_TIMEOUT_MS + 1000); /* + the new handle's connect */
    queue_lock_destroy(c);
}

static int group_setup(void **state)
{
    (void)state;
    if (zk_server_start(&server) != 0)
        return -1;
    queue_cases_backend.servers = zk_server_hosts(server);
    return server_warm_up();
}

static int group_teardown(void **state)
{
    (void)state;
    zk_server_destroy(server);
    return 0;
}

int main(int argc, char **argv)
{
    queue_cases_backend = (queue_backend){.program = "test_zookeeper",
                                          .create = zk_lock_client_create,
                                          .request_timeout_ms = REQUEST_TIMEOUT_MS,
                                          .timeouts_past_wait = 1};
    zoo_set_debug_level(0);
    if (argc == 4 && strcmp(argv[1], "mx") == 0)
        return queue_cases_mx(argv[2], argv[3]) == 0 ? 0 : 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(queue_case_reentrancy_and_token),
        cmocka_unit_test(queue_case_mutual_exclusion),
        cmocka_unit_test(queue_case_bounded_wait),
        cmocka_unit_test(queue_case_wakeup),
        cmocka_unit_test(test_session_expired_is_lost),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_hung_server_bounded),
        cmocka_unit_test(test_unanswered_attempt_replaced),
    };
    return cmocka_run_group_tests_name("zookeeper", tests, group_setup, group_teardown);
}
