/*
 * clock.c - the service's reading of time (clock.h).
 */
#include "service/clock.h"

#include <errno.h>

#define NS_PER_S 1000000000LL

int64_t clock_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

double clock_seconds_since(int64_t start_ns)
{
    return (double)(clock_now_ns() - start_ns) / 1e9;
}

int64_t clock_ms_since(int64_t start_ns)
{
    return (clock_now_ns() - start_ns) / 1000000;
}

struct timespec clock_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / NS_PER_S), .tv_nsec = (long)(ns % NS_PER_S)};
    return ts;
}

int clock_cond_init(pthread_cond_t *cond)
{
    pthread_condattr_t attr;
    int rc;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cond, &attr);
    pthread_condattr_destroy(&attr);
    return rc;
}

struct timespec clock_wall(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ts;
}

void clock_sleep_us(int64_t us)
{
    struct timespec ts;

    if (us <= 0)
        return;
    ts.tv_sec = us / 1000000;
    ts.tv_nsec = (us % 1000000) * 1000L;
    /* nanosleep writes what is left into ts when a signal interrupts it. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void clock_sleep_ms(int64_t ms)
{
    clock_sleep_us(ms * 1000);
}
