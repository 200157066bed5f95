/*
 * test_etcd.c - the etcd lock (lock/etcd/) against a real etcd started for this program
 * (tests/support/etcd_server.c) on free loopback ports.
 *
 *
 * The cases every queue-lock backend passes (mutual exclusion, reentrancy and tokens, the
 * wait bound, the wake-up) are tests/support/queue_cases.c's; the cases here are etcd's own:
 * a revoked lease, etcd down and back, a hung etcd, answers lost on the way back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lock/etcd/etcd_lock.h"
#include "tests/support/etcd_server.h"
#include "tests/support/queue_cases.h"
#include "tests/support/relay.h"

static etcd_server *server;

/* ---- lease loss ------------------------------------------------------------------------ */

static size_t ignore(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

static int revoke_lease(const char *endpoint, int64_t id)
{
    char url[128], body[64];
    CURL *h = curl_easy_init();
    long status = 0;
    CURLcode cc;

    if (h == NULL)
        return -1;
    snprintf(url, sizeof(url), "%s/v3/lease/revoke", endpoint);
    snprintf(body, sizeof(body), "{\"ID\":\"%" PRId64 "\"}", id);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, ignore);
    cc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    return cc == CURLE_OK && status == 200 ? 0 : -1;
}

static void test_lease_lost(void **state)
{
    etcd_lock_client *c = queue_cases_client(3000);
    etcd_lock_client *other = queue_cases_client(3000);
    int64_t start, t1 = 0, t2 = 0;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(queue_lock_acquire(c, "ll", queue_cases_owner(), 0, &t1), QUEUE_LOCK_OK);
    assert_int_equal(revoke_lease(etcd_server_endpoint(server), etcd_lock_lease_id(c)), 0);
    /* The keep-alive (every TTL/3 = 1 s) learns of it. */
    start = queue_cases_now_ms();
    while (queue_lock_is_held(c, "ll", queue_cases_owner()) == QUEUE_LOCK_OK &&
           queue_cases_now_ms() - start < 5000)
        queue_cases_sleep_ms(50);
    assert_int_equal(queue_lock_is_held(c, "ll", queue_cases_owner()), QUEUE_LOCK_ERR_LOST);
    /* The key went with the lease: another owner takes it at once, with a greater token. */
    assert_int_equal(queue_lock_acquire(other, "ll", queue_cases_owner(), 0, &t2), QUEUE_LOCK_OK);
    assert_true(t2 > t1);
    assert_int_equal(queue_lock_release(other, "ll", queue_cases_owner()), QUEUE_LOCK_OK);
    /* The lost holding is cleared by its release; the client then works on a new lease. */
    queue_lock_release(c, "ll", queue_cases_owner());
    assert_int_equal(queue_lock_acquire(c, "ll", queue_cases_owner(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "ll", queue_cases_owner()), QUEUE_LOCK_OK);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
}

/* ---- server down, then back ------------------------------------------------------------ */

static void test_server_down(void **state)
{
    etcd_lock_client *c = queue_cases_client(5000);
    int64_t start;

    (void)state;
    assert_non_null(c);
    assert_int_equal(etcd_server_stop(server), 0);
    start = queue_cases_now_ms();
    assert_int_equal(queue_lock_acquire(c, "down", queue_cases_owner(), 500, NULL),
                     QUEUE_LOCK_ERR_SERVER);
    assert_true(queue_cases_now_ms() - start < 3000);
    assert_true(queue_lock_last_error()[0] != '\0');
    assert_int_equal(etcd_server_restart(server), 0);
    assert_int_equal(queue_lock_acquire(c, "down", queue_cases_owner(), 2000, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "down", queue_cases_owner()), QUEUE_LOCK_OK);
    queue_lock_destroy(c);
}

/* ---- a hung etcd: every caller returns within its bound ------------------------------- */

#define HUNG_THREADS 12
#define HUNG_TIMEOUT_MS 300
#define HUNG_WAIT_MS 200

typedef struct hung_arg {
    etcd_lock_client *c;
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
 * A fresh client (no lease yet) meets an etcd that accepts connections and answers nothing.
 * Its threads all need the lease first; one asks for it while the others wait for that
 * answer, none queueing behind another's request: each fails within the bound of
 * etcd_lock.h, wait + 8 request timeouts, however many arrive at once (a grant made under
 * the client's mutex made the twelfth wait for eleven timeouts).
 */
static void test_hung_server_bounded(void **state)
{
    queue_lock_options opts;
    etcd_lock_client *c = NULL;
    pthread_t t[HUNG_THREADS];
    hung_arg a[HUNG_THREADS];
    int64_t worst = 0;

    (void)state;
    queue_lock_options_init(&opts);
    opts.servers = etcd_server_endpoint(server);
    opts.lease_ms = 3000;
    opts.request_timeout_ms = HUNG_TIMEOUT_MS;
    assert_int_equal(etcd_lock_client_create(&opts, &c), QUEUE_LOCK_OK);
    assert_int_equal(etcd_server_freeze(server), 0);
    for (int i = 0; i < HUNG_THREADS; i++) {
        a[i].c = c;
        pthread_create(&t[i], NULL, hung_acquire, &a[i]);
    }
    for (int i = 0; i < HUNG_THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(etcd_server_thaw(server), 0);
    for (int i = 0; i < HUNG_THREADS; i++) {
        assert_int_equal(a[i].rc, QUEUE_LOCK_ERR_SERVER);
        if (a[i].ms > worst)
            worst = a[i].ms;
    }
    printf("hung etcd: the slowest of %d callers returned after %" PRId64 " ms\n", HUNG_THREADS,
           worst);
    assert_true(worst <= HUNG_WAIT_MS + 8 * HUNG_TIMEOUT_MS + 200); /* + scheduling slack */
    /* Thawed, it serves again. */
    assert_int_equal(queue_lock_acquire(c, "hung", queue_cases_owner(), 2000, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "hung", queue_cases_owner()), QUEUE_LOCK_OK);
    queue_lock_destroy(c);
}

/* ---- lost answers to writes ---------------------------------------------------------- */

/* Takes `name` with another client of its own within wait_ms: how long it took, or -1. */
static int64_t other_takes_within(const char *name, int64_t wait_ms)
{
    etcd_lock_client *o = queue_cases_client(5000);
    int64_t start = queue_cases_now_ms(), took = -1;

    if (o == NULL)
        return -1;
    if (queue_lock_acquire(o, name, queue_cases_owner(), wait_ms, NULL) == QUEUE_LOCK_OK) {
        took = queue_cases_now_ms() - start;
        queue_lock_release(o, name, queue_cases_owner());
    }
    queue_lock_destroy(o);
    return took;
}

/*
 * Through a relay (tests/support/relay.h): a put that etcd applies but whose answer is lost, then a
 * release whose delete never reaches etcd. Each time the client must leave nothing behind within
 * the lease's TTL (2 s here) at most: another client takes the lock. Before, the put's key sat at
 * the head of the line, and the undeleted key stayed, under a lease the keep-alive renewed
 * for ever: the other client timed out on it for as long as the first one lived.
 */
static void test_lost_answers_leave_nothing(void **state)
{
    queue_lock_options opts;
    etcd_lock_client *c = NULL;
    relay *proxy = NULL;
    char endpoint[64];
    int64_t took;

    (void)state;
    /* The relay in front of etcd loses what the test tells it to: a swallow forwards the
     * requests (etcd applies them) and drops the answers; a drop forwards nothing (etcd never
     * sees the request). */
    assert_int_equal(relay_start(0, atoi(strrchr(etcd_server_endpoint(server), ':') + 1), &proxy),
                     0);
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", relay_port(proxy));
    queue_lock_options_init(&opts);
    opts.servers = endpoint;
    opts.lease_ms = 2000;
    opts.request_timeout_ms = 300;
    assert_int_equal(etcd_lock_client_create(&opts, &c), QUEUE_LOCK_OK);
    /* A lease first, so that the put is the request whose answer is lost. */
    assert_int_equal(queue_lock_acquire(c, "lostput", queue_cases_owner(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "lostput", queue_cases_owner()), QUEUE_LOCK_OK);

    relay_set(proxy, RELAY_SWALLOW, 0, NULL, 0);
    assert_int_equal(queue_lock_acquire(c, "lostput", queue_cases_owner(), 0, NULL),
                     QUEUE_LOCK_ERR_SERVER);
    relay_set(proxy, RELAY_PASS, 0, NULL, 0);
    took = other_takes_within("lostput", 4000);
    printf("    a put whose answer was lost: another client took the lock after %" PRId64
           " ms (bound: the lease, 2000 ms)\n",
           took);
    assert_true(took >= 0 && took <= 2000 + 500);

    assert_int_equal(queue_lock_acquire(c, "lostdel", queue_cases_owner(), 0, NULL), QUEUE_LOCK_OK);
    relay_set(proxy, RELAY_DROP, 0, NULL, 0);
    assert_int_equal(queue_lock_release(c, "lostdel", queue_cases_owner()), QUEUE_LOCK_ERR_SERVER);
    relay_set(proxy, RELAY_PASS, 0, NULL, 0);
    took = other_takes_within("lostdel", 4000);
    printf("    a release whose delete never arrived: another client took the lock after %" PRId64
           " ms\n",
           took);
    assert_true(took >= 0 && took <= 2000 + 500);
    queue_lock_destroy(c);
    relay_stop(proxy);
}

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (etcd_server_start(&server) != 0)
        return -1;
    queue_cases_backend.servers = etcd_server_endpoint(server);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    etcd_server_destroy(server);
    curl_global_cleanup();
    return 0;
}

int main(int argc, char **argv)
{
    queue_cases_backend = (queue_backend){.program = "test_etcd",
                                          .create = etcd_lock_client_create,
                                          .request_timeout_ms = 1000,
                                          .timeouts_past_wait = 2};
    if (argc == 4 && strcmp(argv[1], "mx") == 0)
        return queue_cases_mx(argv[2], argv[3]) == 0 ? 0 : 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(queue_case_reentrancy_and_token),
        cmocka_unit_test(queue_case_mutual_exclusion),
        cmocka_unit_test(queue_case_bounded_wait),
        cmocka_unit_test(queue_case_wakeup),
        cmocka_unit_test(test_lease_lost),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_hung_server_bounded),
        cmocka_unit_test(test_lost_answers_leave_nothing),
    };
    return cmocka_run_group_tests_name("etcd", tests, group_setup, group_teardown);
}
