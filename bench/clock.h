/*
 * clock.h - the one clock of the benchmarks.
 *
 * Every duration a benchmark measures is read here, on CLOCK_MONOTONIC (a wall-clock jump
 * must not shorten or stretch a measured run); the wall clock is read here too, only for
 * the timestamps a benchmark prints for others to line up with their own records.
 */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H

#include <stdint.h>

/* Now, on CLOCK_MONOTONIC, in nanoseconds. */
int64_t bench_now_ns(void);

/* Now, on CLOCK_MONOTONIC, in whole milliseconds (the same clock as bench_now_ns()). */
int64_t bench_now_ms(void);

/* Now, on CLOCK_MONOTONIC, in seconds (the same clock as bench_now_ns()). */
double bench_now_s(void);

/* Now, on the wall clock (CLOCK_REALTIME), in milliseconds since the Unix epoch. */
int64_t bench_wall_ms(void);

#endif
