/*
 * test_etcd.c - the etcd lock (lock/etcd/) against a real etcd started for this program
 * (tests/support/etcd_server.c) on free loopback ports.
 *
 * Mutual exclusion is checked the way a lost update shows: every holder reads a counter
 * from a file, pauses, writes it back plus one. With two holders at once, increments are
 * lost and the final count falls short. Two processes of 8 threads each share the file;
 * the second process is this binary re-executed with the role "mx" (a bare fork of a
 * threaded process could inherit a held libc lock).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lock/etcd/etcd_lock.h"
#include "tests/support/etcd_server.h"

#define MX_THREADS 8
#define MX_ROUNDS 8

static etcd_server *server;

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static etcd_lock_client *new_client(const char *endpoint, int64_t lease_ms)
{
    etcd_lock_options opts;
    etcd_lock_client *c = NULL;

    etcd_lock_options_init(&opts);
    opts.endpoint = endpoint;
    opts.lease_ms = lease_ms;
    opts.request_timeout_ms = 1000;
    if (etcd_lock_client_create(&opts, &c) != ETCD_LOCK_OK)
        return NULL;
    return c;
}

/* ---- mutual exclusion -------------------------------------------------------------- */

typedef struct mx_arg {
    etcd_lock_client *c;
    const char *file;
    int failures;
} mx_arg;

static void *mx_thread(void *p)
{
    mx_arg *a = p;

    for (int i = 0; i < MX_ROUNDS; i++) {
        long n = 0;
        FILE *f;

        if (etcd_lock_acquire(a->c, "mx", 30000, NULL) != ETCD_LOCK_OK) {
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
        if (etcd_lock_release(a->c, "mx") != ETCD_LOCK_OK)
            a->failures++;
    }
    return NULL;
}

/* Runs MX_THREADS threads on one client; returns the number of failed calls. */
static int run_mx(const char *endpoint, const char *file)
{
    pthread_t t[MX_THREADS];
    mx_arg a[MX_THREADS];
    etcd_lock_client *c = new_client(endpoint, 5000);
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
    etcd_lock_client_destroy(c);
    return failures;
}

static void test_mutual_exclusion(void **state)
{
    char file[] = "/tmp/test-etcd-mx.XXXXXX";
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
        execl("/proc/self/exe", "test_etcd", "mx", etcd_server_endpoint(server), file,
              (char *)NULL);
        _exit(127);
    }
    assert_int_equal(run_mx(etcd_server_endpoint(server), file), 0);
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
    etcd_lock_client *c = new_client(etcd_server_endpoint(server), 5000);
    int64_t t1 = 0, t2 = 0, t3 = 0;

    (void)state;
    assert_non_null(c);
    assert_int_equal(etcd_lock_acquire(c, "re", 0, &t1), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_acquire(c, "re", 0, &t2), ETCD_LOCK_OK);
    assert_true(t1 > 0);
    assert_int_equal(t1, t2);
    assert_int_equal(etcd_lock_is_held(c, "re"), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_release(c, "re"), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_is_held(c, "re"), ETCD_LOCK_OK); /* one hold left */
    assert_int_equal(etcd_lock_release(c, "re"), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_is_held(c, "re"), ETCD_LOCK_ERR_NOT_HELD);
    assert_int_equal(etcd_lock_release(c, "re"), ETCD_LOCK_ERR_NOT_HELD);
    /* A later holding has a greater token. */
    assert_int_equal(etcd_lock_acquire(c, "re", 0, &t3), ETCD_LOCK_OK);
    assert_true(t3 > t1);
    assert_int_equal(etcd_lock_release(c, "re"), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_acquire(c, "a/b", 0, NULL), ETCD_LOCK_ERR_INVALID);
    etcd_lock_client_destroy(c);
}

/* ---- bounded wait and wake-up ---------------------------------------------------------- */

typedef struct waiter {
    etcd_lock_client *c;
    int64_t wait_ms;
    int rc;
    int64_t done_at;
} waiter;

static void *wait_thread(void *p)
{
    waiter *w = p;

    w->rc = etcd_lock_acquire(w->c, "wb", w->wait_ms, NULL);
    w->done_at = now_ms();
    if (w->rc == ETCD_LOCK_OK)
        etcd_lock_release(w->c, "wb");
    return NULL;
}

static void test_bounded_wait(void **state)
{
    etcd_lock_client *c = new_client(etcd_server_endpoint(server), 5000);
    waiter w;
    pthread_t t;
    int64_t start;

    (void)state;
    assert_non_null(c);
    assert_int_equal(etcd_lock_acquire(c, "wb", 0, NULL), ETCD_LOCK_OK);
    w = (waiter){c, 400, 1, 0};
    start = now_ms();
    pthread_create(&t, NULL, wait_thread, &w);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, ETCD_LOCK_ERR_TIMEOUT);
    assert_true(w.done_at - start >= 400);
    assert_true(w.done_at - start < 400 + 2 * 1000); /* wait + two request timeouts */
    assert_int_equal(etcd_lock_release(c, "wb"), ETCD_LOCK_OK);
    etcd_lock_client_destroy(c);
}

/* A waiter is woken by the watch on its predecessor, not by a poll: it gets the lock
 * within a small time of the release, while its wait bound is long. */
static void test_wakeup(void **state)
{
    etcd_lock_client *c = new_client(etcd_server_endpoint(server), 5000);
    waiter w;
    pthread_t t;
    int64_t released;

    (void)state;
    assert_non_null(c);
    assert_int_equal(etcd_lock_acquire(c, "wb", 0, NULL), ETCD_LOCK_OK);
    w = (waiter){c, 20000, 1, 0};
    pthread_create(&t, NULL, wait_thread, &w);
    sleep_ms(500); /* the waiter is queued and watching */
    released = now_ms();
    assert_int_equal(etcd_lock_release(c, "wb"), ETCD_LOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, ETCD_LOCK_OK);
    print_message("wake-up after release: %" PRId64 " ms\n", w.done_at - released);
    assert_true(w.done_at - released < 1000);
    etcd_lock_client_destroy(c);
}

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
    etcd_lock_client *c = new_client(etcd_server_endpoint(server), 3000);
    etcd_lock_client *other = new_client(etcd_server_endpoint(server), 3000);
    int64_t start, t1 = 0, t2 = 0;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(etcd_lock_acquire(c, "ll", 0, &t1), ETCD_LOCK_OK);
    assert_int_equal(revoke_lease(etcd_server_endpoint(server), etcd_lock_lease_id(c)), 0);
    /* The keep-alive (every TTL/3 = 1 s) learns of it. */
    start = now_ms();
    while (etcd_lock_is_held(c, "ll") == ETCD_LOCK_OK && now_ms() - start < 5000)
        sleep_ms(50);
    assert_int_equal(etcd_lock_is_held(c, "ll"), ETCD_LOCK_ERR_LOST);
    /* The key went with the lease: another owner takes it at once, with a greater token. */
    assert_int_equal(etcd_lock_acquire(other, "ll", 0, &t2), ETCD_LOCK_OK);
    assert_true(t2 > t1);
    assert_int_equal(etcd_lock_release(other, "ll"), ETCD_LOCK_OK);
    /* The lost holding is cleared by its release; the client then works on a new lease. */
    etcd_lock_release(c, "ll");
    assert_int_equal(etcd_lock_acquire(c, "ll", 0, NULL), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_release(c, "ll"), ETCD_LOCK_OK);
    etcd_lock_client_destroy(other);
    etcd_lock_client_destroy(c);
}

/* ---- server down, then back ------------------------------------------------------------ */

static void test_server_down(void **state)
{
    etcd_lock_client *c = new_client(etcd_server_endpoint(server), 5000);
    int64_t start;

    (void)state;
    assert_non_null(c);
    assert_int_equal(etcd_server_stop(server), 0);
    start = now_ms();
    assert_int_equal(etcd_lock_acquire(c, "down", 500, NULL), ETCD_LOCK_ERR_SERVER);
    assert_true(now_ms() - start < 3000);
    assert_true(etcd_lock_last_error()[0] != '\0');
    assert_int_equal(etcd_server_restart(server), 0);
    assert_int_equal(etcd_lock_acquire(c, "down", 2000, NULL), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_release(c, "down"), ETCD_LOCK_OK);
    etcd_lock_client_destroy(c);
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
    int64_t start = now_ms();

    a->rc = etcd_lock_acquire(a->c, "hung", HUNG_WAIT_MS, NULL);
    a->ms = now_ms() - start;
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
    etcd_lock_options opts;
    etcd_lock_client *c = NULL;
    pthread_t t[HUNG_THREADS];
    hung_arg a[HUNG_THREADS];
    int64_t worst = 0;

    (void)state;
    etcd_lock_options_init(&opts);
    opts.endpoint = etcd_server_endpoint(server);
    opts.lease_ms = 3000;
    opts.request_timeout_ms = HUNG_TIMEOUT_MS;
    assert_int_equal(etcd_lock_client_create(&opts, &c), ETCD_LOCK_OK);
    assert_int_equal(etcd_server_freeze(server), 0);
    for (int i = 0; i < HUNG_THREADS; i++) {
        a[i].c = c;
        pthread_create(&t[i], NULL, hung_acquire, &a[i]);
    }
    for (int i = 0; i < HUNG_THREADS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(etcd_server_thaw(server), 0);
    for (int i = 0; i < HUNG_THREADS; i++) {
        assert_int_equal(a[i].rc, ETCD_LOCK_ERR_SERVER);
        if (a[i].ms > worst)
            worst = a[i].ms;
    }
    printf("hung etcd: the slowest of %d callers returned after %" PRId64 " ms\n", HUNG_THREADS,
           worst);
    assert_true(worst <= HUNG_WAIT_MS + 8 * HUNG_TIMEOUT_MS + 200); /* + scheduling slack */
    /* Thawed, it serves again. */
    assert_int_equal(etcd_lock_acquire(c, "hung", 2000, NULL), ETCD_LOCK_OK);
    assert_int_equal(etcd_lock_release(c, "hung"), ETCD_LOCK_OK);
    etcd_lock_client_destroy(c);
}

static int group_setup(void **state)
{
    (void)state;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return etcd_server_start(&server);
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
    if (argc == 4 && strcmp(argv[1], "mx") == 0)
        return run_mx(argv[2], argv[3]) == 0 ? 0 : 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reentrancy_and_token), cmocka_unit_test(test_mutual_exclusion),
        cmocka_unit_test(test_bounded_wait),         cmocka_unit_test(test_wakeup),
        cmocka_unit_test(test_lease_lost),           cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_hung_server_bounded),
    };
    return cmocka_run_group_tests_name("etcd", tests, group_setup, group_teardown);
}
