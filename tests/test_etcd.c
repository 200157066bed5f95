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

#define MX_THREADS 8
#define MX_ROUNDS 8

static etcd_server *server;

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

static etcd_lock_client *new_client(const char *endpoint, int64_t lease_ms)
{
    queue_lock_options opts;
    etcd_lock_client *c = NULL;

    queue_lock_options_init(&opts);
    opts.servers = endpoint;
    opts.lease_ms = lease_ms;
    opts.request_timeout_ms = 1000;
    if (etcd_lock_client_create(&opts, &c) != QUEUE_LOCK_OK)
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
    queue_lock_destroy(c);
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
    /* A later holding has a greater token. */
    assert_int_equal(queue_lock_acquire(c, "re", me(), 0, &t3), QUEUE_LOCK_OK);
    assert_true(t3 > t1);
    assert_int_equal(queue_lock_release(c, "re", me()), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(c, "a/b", me(), 0, NULL), QUEUE_LOCK_ERR_INVALID);
    queue_lock_destroy(c);
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

    w->rc = queue_lock_acquire(w->c, "wb", me(), w->wait_ms, NULL);
    w->done_at = now_ms();
    if (w->rc == QUEUE_LOCK_OK)
        queue_lock_release(w->c, "wb", me());
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
    assert_int_equal(queue_lock_acquire(c, "wb", me(), 0, NULL), QUEUE_LOCK_OK);
    w = (waiter){c, 400, 1, 0};
    start = now_ms();
    pthread_create(&t, NULL, wait_thread, &w);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, QUEUE_LOCK_ERR_TIMEOUT);
    assert_true(w.done_at - start >= 400);
    assert_true(w.done_at - start < 400 + 2 * 1000); /* wait + two request timeouts */
    assert_int_equal(queue_lock_release(c, "wb", me()), QUEUE_LOCK_OK);
    queue_lock_destroy(c);
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
    assert_int_equal(queue_lock_acquire(c, "wb", me(), 0, NULL), QUEUE_LOCK_OK);
    w = (waiter){c, 20000, 1, 0};
    pthread_create(&t, NULL, wait_thread, &w);
    sleep_ms(500); /* the waiter is queued and watching */
    released = now_ms();
    assert_int_equal(queue_lock_release(c, "wb", me()), QUEUE_LOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, QUEUE_LOCK_OK);
    print_message("wake-up after release: %" PRId64 " ms\n", w.done_at - released);
    assert_true(w.done_at - released < 1000);
    queue_lock_destroy(c);
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
    assert_int_equal(queue_lock_acquire(c, "ll", me(), 0, &t1), QUEUE_LOCK_OK);
    assert_int_equal(revoke_lease(etcd_server_endpoint(server), etcd_lock_lease_id(c)), 0);
    /* The keep-alive (every TTL/3 = 1 s) learns of it. */
    start = now_ms();
    while (queue_lock_is_held(c, "ll", me()) == QUEUE_LOCK_OK && now_ms() - start < 5000)
        sleep_ms(50);
    assert_int_equal(queue_lock_is_held(c, "ll", me()), QUEUE_LOCK_ERR_LOST);
    /* The key went with the lease: another owner takes it at once, with a greater token. */
    assert_int_equal(queue_lock_acquire(other, "ll", me(), 0, &t2), QUEUE_LOCK_OK);
    assert_true(t2 > t1);
    assert_int_equal(queue_lock_release(other, "ll", me()), QUEUE_LOCK_OK);
    /* The lost holding is cleared by its release; the client then works on a new lease. */
    queue_lock_release(c, "ll", me());
    assert_int_equal(queue_lock_acquire(c, "ll", me(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "ll", me()), QUEUE_LOCK_OK);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
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
    assert_int_equal(queue_lock_acquire(c, "down", me(), 500, NULL), QUEUE_LOCK_ERR_SERVER);
    assert_true(now_ms() - start < 3000);
    assert_true(queue_lock_last_error()[0] != '\0');
    assert_int_equal(etcd_server_restart(server), 0);
    assert_int_equal(queue_lock_acquire(c, "down", me(), 2000, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "down", me()), QUEUE_LOCK_OK);
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
    int64_t start = now_ms();

    a->rc = queue_lock_acquire(a->c, "hung", me(), HUNG_WAIT_MS, NULL);
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
    assert_int_equal(queue_lock_acquire(c, "hung", me(), 2000, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "hung", me()), QUEUE_LOCK_OK);
    queue_lock_destroy(c);
}

/* ---- lost answers to writes ---------------------------------------------------------- */

/*
 * A TCP proxy in front of etcd that loses what the test tells it to: PROXY_PASS forwards both
 * ways; PROXY_SWALLOW forwards requests (etcd applies them) and drops the answers;
 * PROXY_BLACKHOLE drops the requests (etcd never sees them). One thread per connection; a
 * connection whose client left is kept open towards etcd, so that etcd finishes the request
 * rather than cancel it.
 */
enum { PROXY_PASS, PROXY_SWALLOW, PROXY_BLACKHOLE };

static _Atomic int g_proxy_mode;
static _Atomic bool g_proxy_stop;
static int g_proxy_fd = -1, g_proxy_port, g_etcd_port;
static pthread_t g_proxy_thread;

static void *proxy_pipe(void *arg)
{
    int cfd = (int)(intptr_t)arg, ufd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_etcd_port)};
    struct pollfd p[2];
    char buf[16384];
    bool client_open = true;
    int64_t linger_until = 0;

    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (ufd < 0 || connect(ufd, (struct sockaddr *)&to, sizeof(to)) != 0)
        goto out;
    while (!atomic_load(&g_proxy_stop)) {
        int n = 0;

        p[0] = (struct pollfd){.fd = client_open ? cfd : -1, .events = POLLIN};
        p[1] = (struct pollfd){.fd = ufd, .events = POLLIN};
        if (poll(p, 2, 50) < 0)
            break;
        if (!client_open && now_ms() >= linger_until)
            break;
        if (client_open && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t r = read(cfd, buf, sizeof(buf));
            if (r <= 0) {
                client_open = false; /* keep etcd's side a little: let it finish */
                linger_until = now_ms() + 3000;
            } else if (atomic_load(&g_proxy_mode) != PROXY_BLACKHOLE) {
                n = (int)write(ufd, buf, (size_t)r);
            }
        }
        if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = read(ufd, buf, sizeof(buf));
            if (r <= 0)
                break;
            if (client_open && atomic_load(&g_proxy_mode) == PROXY_PASS)
                n = (int)write(cfd, buf, (size_t)r);
        }
        (void)n;
    }
out:
    if (ufd >= 0)
        close(ufd);
    close(cfd);
    return NULL;
}

static void *proxy_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_proxy_stop)) {
        struct pollfd p = {.fd = g_proxy_fd, .events = POLLIN};
        pthread_t t;
        int cfd;

        if (poll(&p, 1, 50) <= 0)
            continue;
        cfd = accept(g_proxy_fd, NULL, NULL);
        if (cfd < 0)
            continue;
        if (pthread_create(&t, NULL, proxy_pipe, (void *)(intptr_t)cfd) == 0)
            pthread_detach(t);
        else
            close(cfd);
    }
    return NULL;
}

static int proxy_start(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);

    g_etcd_port = atoi(strrchr(etcd_server_endpoint(server), ':') + 1);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    g_proxy_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (g_proxy_fd < 0 || bind(g_proxy_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(g_proxy_fd, 64) != 0 || getsockname(g_proxy_fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    g_proxy_port = ntohs(a.sin_port);
    atomic_store(&g_proxy_mode, PROXY_PASS);
    atomic_store(&g_proxy_stop, false);
    return pthread_create(&g_proxy_thread, NULL, proxy_main, NULL);
}

static void proxy_stop(void)
{
    atomic_store(&g_proxy_stop, true);
    pthread_join(g_proxy_thread, NULL);
    close(g_proxy_fd);
    sleep_ms(150); /* the connection threads see the flag within one poll */
}

/* Takes `name` with another client of its own within wait_ms: how long it took, or -1. */
static int64_t other_takes_within(const char *name, int64_t wait_ms)
{
    etcd_lock_client *o = new_client(etcd_server_endpoint(server), 5000);
    int64_t start = now_ms(), took = -1;

    if (o == NULL)
        return -1;
    if (queue_lock_acquire(o, name, me(), wait_ms, NULL) == QUEUE_LOCK_OK) {
        took = now_ms() - start;
        queue_lock_release(o, name, me());
    }
    queue_lock_destroy(o);
    return took;
}

/*
 * Through the proxy: a put that etcd applies but whose answer is lost, then a release whose
 * delete never reaches etcd. Each time the client must leave nothing behind within the
 * lease's TTL (2 s here) at most: another client takes the lock. Before, the put's key sat at
 * the head of the line, and the undeleted key stayed, under a lease the keep-alive renewed
 * for ever: the other client timed out on it for as long as the first one lived.
 */
static void test_lost_answers_leave_nothing(void **state)
{
    queue_lock_options opts;
    etcd_lock_client *c = NULL;
    char endpoint[64];
    int64_t took;

    (void)state;
    assert_int_equal(proxy_start(), 0);
    snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", g_proxy_port);
    queue_lock_options_init(&opts);
    opts.servers = endpoint;
    opts.lease_ms = 2000;
    opts.request_timeout_ms = 300;
    assert_int_equal(etcd_lock_client_create(&opts, &c), QUEUE_LOCK_OK);
    /* A lease first, so that the put is the request whose answer is lost. */
    assert_int_equal(queue_lock_acquire(c, "lostput", me(), 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "lostput", me()), QUEUE_LOCK_OK);

    atomic_store(&g_proxy_mode, PROXY_SWALLOW);
    assert_int_equal(queue_lock_acquire(c, "lostput", me(), 0, NULL), QUEUE_LOCK_ERR_SERVER);
    atomic_store(&g_proxy_mode, PROXY_PASS);
    took = other_takes_within("lostput", 4000);
    printf("    a put whose answer was lost: another client took the lock after %" PRId64
           " ms (bound: the lease, 2000 ms)\n",
           took);
    assert_true(took >= 0 && took <= 2000 + 500);

    assert_int_equal(queue_lock_acquire(c, "lostdel", me(), 0, NULL), QUEUE_LOCK_OK);
    atomic_store(&g_proxy_mode, PROXY_BLACKHOLE);
    assert_int_equal(queue_lock_release(c, "lostdel", me()), QUEUE_LOCK_ERR_SERVER);
    atomic_store(&g_proxy_mode, PROXY_PASS);
    took = other_takes_within("lostdel", 4000);
    printf("    a release whose delete never arrived: another client took the lock after %" PRId64
           " ms\n",
           took);
    assert_true(took >= 0 && took <= 2000 + 500);
    queue_lock_destroy(c);
    proxy_stop();
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
        cmocka_unit_test(test_reentrancy_and_token),
        cmocka_unit_test(test_mutual_exclusion),
        cmocka_unit_test(test_bounded_wait),
        cmocka_unit_test(test_wakeup),
        cmocka_unit_test(test_lease_lost),
        cmocka_unit_test(test_server_down),
        cmocka_unit_test(test_hung_server_bounded),
        cmocka_unit_test(test_lost_answers_leave_nothing),
    };
    return cmocka_run_group_tests_name("etcd", tests, group_setup, group_teardown);
}
