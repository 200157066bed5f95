/*
 * clock.c - db/'s one reading of time (internal.h): the monotonic clock, in milliseconds,
 * that every deadline of the module is built on (a reply's bound, a wait for a pooled
 * connection), so that a change of the wall clock can neither stretch nor cut a bound.
 */
#include <time.h>

#include "db/internal.h"

int64_t db__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct timespec db__timespec_after(int64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int db__cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    int rc;

    if (pthread_condattr_init(&attr) != 0)
        return -1;
    rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                 pthread_cond_init(cond, &attr) == 0
             ? 0
             : -1;
    pthread_condattr_destroy(&attr);
    return rc;
}
