/*
 * clock.c - sleeping and measuring, on the monotonic clock (clock.h).
 */
#include "service/clock.h"

#include <errno.h>

void clock_sleep_ms(int64_t ms)
{
    struct timespec ts;

    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    /* nanosleep writes what is left into ts when a signal interrupts it. */
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

double clock_seconds_since(const struct timespec *start)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}
