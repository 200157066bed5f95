/*
 * queue_cases.c - the cases every queue-lock backend passes (see queue_cases.h).
 */
#include <setjmp.h> /* cmocka.h needs these four first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/support/queue_cases.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MX_THREADS 8
#define MX_ROUNDS 8

queue_backend queue_cases_backend;

int64_t queue_cases_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *queue_cases_owner(void)
{
    static _Thread_local char owner[QUEUE_LOCK_OWNER_MAX];

    if (owner[0] == '\0')
        queue_lock_thread_owner(owner);
    return owner;
}

void queue_cases_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

queue_lock *queue_cases_client(int64_t lease_ms)
{
    queue_lock_options opts;
    queue_lock *c = NULL;

    queue_lock_options_init(&opts);
    opts.servers = queue_cases_backend.servers;
    opts.lease_ms = lease_ms;
    opts.request_timeout_ms = queue_cases_backend.request_timeout_ms;
    if (queue_cases_backend.create(&opts, &c) != QUEUE_LOCK_OK)
        return NULL;
    return c;
}

/* ---- mutual exclusion -------------------------------------------------------------- */

typedef struct mx_arg {
    queue_lock *c;
    const char *file;
    int failures;
} mx_arg;

static void *mx_thread(void *p)
{
    mx_arg *a = p;
    const char *me = queue_cases_owner();

    for (int i = 0; i < MX_ROUNDS; i++) {
        long n = 0;
        FILE *f;

        if (queue_lock_acquire(a->c, "mx", me, 30000, NULL) != QUEUE_LOCK_OK) {
            a->failures++;
            continue;
        }
        f = fopen(a->file, "r");
        if (f != NULL) {
            if (fscanf(f, "%ld", &n) != 1)
                n = 0;
            fclose(f);
        }
        queue_cases_sleep_ms(1); /* widen the window a second holder would need */
        f = fopen(a->file, "w");
        if (f != NULL) {
            fprintf(f, "%ld\n", n + 1);
            fclose(f);
        }
        if (queue_lock_release(a->c, "mx", me) != QUEUE_LOCK_OK)
            a->failures++;
    }
    return NULL;
}

int queue_cases_mx(const char *servers, const char *file)
{
    pthread_t t[MX_THREADS];
    mx_arg a[MX_THREADS];
    queue_lock *c;
    int failures = 0;

    queue_cases_backend.servers = servers;
    c = queue_cases_client(5000);
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

void queue_case_mutual_exclusion(void **state)
{
    char file[] = "/tmp/test-queue-mx.XXXXXX";
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
        execl("/proc/self/exe", queue_cases_backend.program, "mx", queue_cases_backend.servers,
              file, (char *)NULL);
        _exit(127);
    }
    assert_int_equal(queue_cases_mx(queue_cases_backend.servers, file), 0);
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

void queue_case_reentrancy_and_token(void **state)
{
    queue_lock *c = queue_cases_client(5000);
    const char *me = queue_cases_owner();
    int64_t t1 = 0, t2 = 0, t3 = 0, t4 = 0;

    (void)state;
    assert_non_null(c);
    assert_int_equal(queue_lock_acquire(c, "re", me, 0, &t1), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(c, "re", me, 0, &t2), QUEUE_LOCK_OK);
    assert_true(t1 > 0);
    assert_int_equal(t1, t2);
    assert_int_equal(queue_lock_is_held(c, "re", me), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "re", me), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_is_held(c, "re", me), QUEUE_LOCK_OK); /* one hold left */
    assert_int_equal(queue_lock_release(c, "re", me), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_is_held(c, "re", me), QUEUE_LOCK_ERR_NOT_HELD);
    assert_int_equal(queue_lock_release(c, "re", me), QUEUE_LOCK_ERR_NOT_HELD);
    /* A later holding has a greater token, of this lock or of another (etcd's revision and
     * ZooKeeper's czxid are counted over the whole store). */
    assert_int_equal(queue_lock_acquire(c, "re", me, 0, &t3), QUEUE_LOCK_OK);
    assert_true(t3 > t1);
    assert_int_equal(queue_lock_acquire(c, "re-other", me, 0, &t4), QUEUE_LOCK_OK);
    assert_true(t4 > t3);
    assert_int_equal(queue_lock_release(c, "re-other", me), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(c, "re", me), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(c, "a/b", me, 0, NULL), QUEUE_LOCK_ERR_INVALID);
    assert_int_equal(queue_lock_acquire(c, "", me, 0, NULL), QUEUE_LOCK_ERR_INVALID);
    queue_lock_destroy(c);
}

/* ---- bounded wait and wake-up ---------------------------------------------------------- */

typedef struct waiter {
    queue_lock *c;
    int64_t wait_ms;
    int rc;
    int64_t done_at;
} waiter;

static void *wait_thread(void *p)
{
    waiter *w = p;
    const char *me = queue_cases_owner();

    w->rc = queue_lock_acquire(w->c, "wb", me, w->wait_ms, NULL);
    w->done_at = queue_cases_now_ms();
    if (w->rc == QUEUE_LOCK_OK)
        queue_lock_release(w->c, "wb", me);
    return NULL;
}

void queue_case_bounded_wait(void **state)
{
    queue_lock *c = queue_cases_client(5000);
    queue_lock *other = queue_cases_client(5000);
    const char *me = queue_cases_owner();
    waiter w;
    pthread_t t;
    int64_t start;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(queue_lock_acquire(c, "wb", me, 0, NULL), QUEUE_LOCK_OK);
    w = (waiter){other, 400, 1, 0};
    start = queue_cases_now_ms();
    pthread_create(&t, NULL, wait_thread, &w);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, QUEUE_LOCK_ERR_TIMEOUT);
    assert_true(w.done_at - start >= 400);
    assert_true(w.done_at - start < 400 + queue_cases_backend.timeouts_past_wait *
                                              queue_cases_backend.request_timeout_ms);
    /* The waiter left the queue: a try of the other client after the release gets it. */
    assert_int_equal(queue_lock_release(c, "wb", me), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_acquire(other, "wb", me, 0, NULL), QUEUE_LOCK_OK);
    assert_int_equal(queue_lock_release(other, "wb", me), QUEUE_LOCK_OK);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
}

/* A waiter is woken by the watch on its predecessor, not by a poll: it gets the lock
 * within a small time of the release, while its wait bound is long. */
void queue_case_wakeup(void **state)
{
    queue_lock *c = queue_cases_client(5000);
    queue_lock *other = queue_cases_client(5000);
    const char *me = queue_cases_owner();
    waiter w;
    pthread_t t;
    int64_t released;

    (void)state;
    assert_non_null(c);
    assert_non_null(other);
    assert_int_equal(queue_lock_acquire(c, "wb", me, 0, NULL), QUEUE_LOCK_OK);
    w = (waiter){other, 20000, 1, 0};
    pthread_create(&t, NULL, wait_thread, &w);
    queue_cases_sleep_ms(500); /* the waiter is queued and watching */
    released = queue_cases_now_ms();
    assert_int_equal(queue_lock_release(c, "wb", me), QUEUE_LOCK_OK);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, QUEUE_LOCK_OK);
    print_message("wake-up after release: %" PRId64 " ms\n", w.done_at - released);
    assert_true(w.done_at - released < 1000);
    queue_lock_destroy(other);
    queue_lock_destroy(c);
}
