/*
 * clock.c - sleeping and measuring, on the monotonic clock (clock.h).
 */
#include "service/clock.h"

#include <errno.h>

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

double clock_seconds_since(const struct timespec *start)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}
