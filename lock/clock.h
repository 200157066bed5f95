/*
 * clock.h - monotonic time for deadlines, and the conversions the waits need.
 *
 * Every deadline in lock/ is a point on CLOCK_MONOTONIC in nanoseconds (an int64_t: it
 * lasts 292 years). The wall clock is never used for a deadline: it can jump (NTP, an
 * administrator) and a jump must not make a wait end early or last forever.
 */
#ifndef LOCK_CLOCK_H
#define LOCK_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

#define LOCK__NS_PER_MS INT64_C(1000000)

/* Now, on CLOCK_MONOTONIC, in nanoseconds. */
int64_t lock__now_ns(void);

/* Now, on the wall clock (CLOCK_REALTIME), in microseconds since the epoch: the clock Redis'
 * TIME reads, so that a moment Redis stamped can be compared with it on the same host (on
 * two hosts, the difference includes their clocks' offset). For figures only, never for a
 * deadline. */
int64_t lock__wall_us(void);

/* ms milliseconds in nanoseconds, saturating instead of overflowing for huge ms. */
int64_t lock__ms_to_ns(int64_t ms);

/* a + b without overflow (both >= 0 or the result stays in range). */
int64_t lock__add_ns(int64_t a, int64_t b);

/* The deadline ms milliseconds from now (saturating: a huge ms is "forever"). */
int64_t lock__deadline_ns(int64_t ms);

/* Whole milliseconds left until the deadline at_ns; 0 once it has passed. */
int64_t lock__ms_left(int64_t at_ns);

/* The absolute deadline `at_ns` as a timespec for pthread_cond_timedwait() on a condition
 * variable made by lock__cond_init(). */
struct timespec lock__timespec_at(int64_t at_ns);

/* A duration of `ns` as a timeval for hiredis; never {0, 0}, which would mean "no timeout". */
struct timeval lock__timeval(int64_t ns);

/* Initialises *cv to measure its timeouts on CLOCK_MONOTONIC. Returns 0 or an errno value. */
int lock__cond_init(pthread_cond_t *cv);

/*
 * Waits on cv (mu held) until signalled or until at_ns. Returns 0 when woken (perhaps
 * spuriously: callers re-check their condition) and ETIMEDOUT when at_ns has passed.
 */
int lock__cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t at_ns);

#endif
