/* clock.c - the one clock of the benchmarks: see clock.h. */
#include "bench/clock.h"

#include <time.h>

static int64_t read_ns(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t bench_now_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

int64_t bench_now_ms(void)
{
    return bench_now_ns() / 1000000;
}

double bench_now_s(void)
{
    return (double)bench_now_ns() / 1e9;
}

int64_t bench_wall_ms(void)
{
    return read_ns(CLOCK_REALTIME) / 1000000;
}
