/*
 * clock.c - monotonic time for deadlines, and the wall clock for figures (see clock.h).
 */
#include "lock/clock.h"

#include <errno.h>

int64_t lock__now_ns(void)
{
    struct timespec ts;

    /* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t lock__wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t lock__ms_to_ns(int64_t ms)
{
    if (ms > INT64_MAX / LOCK__NS_PER_MS / 4)
        return INT64_MAX / 4; /* "forever", with room left to add to it */
    return ms * LOCK__NS_PER_MS;
}

int64_t lock__add_ns(int64_t a, int64_t b)
{
    if (b > 0 && a > INT64_MAX - b)
        return INT64_MAX;
    return a + b;
}

int64_t lock__deadline_ns(int64_t ms)
{
    return lock__add_ns(lock__now_ns(), lock__ms_to_ns(ms > 0 ? ms : 0));
}

int64_t lock__ms_left(int64_t at_ns)
{
    int64_t left = at_ns - lock__now_ns();

    return left > 0 ? left / LOCK__NS_PER_MS : 0;
}

struct timespec lock__timespec_at(int64_t at_ns)
{
    struct timespec ts;

    if (at_ns < 0)
        at_ns = 0;
    ts.tv_sec = at_ns / 1000000000;
    ts.tv_nsec = at_ns % 1000000000;
    return ts;
}

struct timeval lock__timeval(int64_t ns)
{
    struct timeval tv;
    int64_t us = ns / 1000;

    if (us < 1)
        us = 1;
    tv.tv_sec = us / 1000000;
    tv.tv_usec = us % 1000000;
    return tv;
}

int lock__cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t attr;
    int rc;

    rc = pthread_condattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(cv, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

int lock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ns)
{
    struct timespec ts;

    if (lock__now_ns() >= at_ns)
        return ETIMEDOUT;
    ts = lock__timespec_at(at_ns);
    return pthread_cond_timedwait(cv, mu, &ts) == ETIMEDOUT ? ETIMEDOUT : 0;
}
