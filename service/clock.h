/*
 * clock.h - the service's two uses of time: sleeping, and measuring how long something took.
 * Both on the monotonic clock, so a change of the wall clock neither cuts a sleep short nor
 * makes a wait look longer than it was. (lock/ and db/ keep their own clocks: each module
 * stands alone.)
 */
#ifndef SERVICE_CLOCK_H
#define SERVICE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Sleeps ms milliseconds, or us microseconds (<= 0: returns at once), resuming after a
 * signal interrupts it. (The optimistic rung's first retry pauses are below a millisecond.) */
void clock_sleep_ms(int64_t ms);
void clock_sleep_us(int64_t us);

/* Seconds elapsed on the monotonic clock since *start (taken with CLOCK_MONOTONIC). */
double clock_seconds_since(const struct timespec *start);

#endif
