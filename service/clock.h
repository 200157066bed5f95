/*
 * clock.h - the service's one reading of time. Waits, deadlines and measures are on the
 * monotonic clock, so a change of the wall clock neither cuts a sleep short nor stretches a
 * bound nor makes a wait look longer than it was; the wall clock is read only for timestamps
 * that leave the process (a log line, a lock row's expiry). Every file of service/ reads
 * time through here. (lock/ and db/ keep their own clocks: each module stands alone.)
 */
#ifndef SERVICE_CLOCK_H
#define SERVICE_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Now, on the monotonic clock, in nanoseconds: the start of a measure or of a deadline. */
int64_t clock_now_ns(void);

/* Seconds, or whole milliseconds, elapsed since start_ns (a clock_now_ns reading). */
double clock_seconds_since(int64_t start_ns);
int64_t clock_ms_since(int64_t start_ns);

/* The monotonic time ns (a clock_now_ns reading, or one plus a bound) as a struct timespec,
 * for pthread_cond_timedwait on a condition made by clock_cond_init. */
struct timespec clock_timespec(int64_t ns);

/* Initialises *cond to wait on the monotonic clock (its deadlines are clock_timespec's).
 * Returns pthread_cond_init's answer. */
int clock_cond_init(pthread_cond_t *cond);

/* The wall clock (CLOCK_REALTIME), for timestamps only: never for a wait or a measure. */
struct timespec clock_wall(void);

/* Sleeps ms milliseconds, or us microseconds (<= 0: returns at once), resuming after a
 * signal interrupts it. (The optimistic rung's first retry pauses are below a millisecond.) */
void clock_sleep_ms(int64_t ms);
void clock_sleep_us(int64_t us);

#endif
