/*
 * history_clock.c - prints CLOCK_MONOTONIC in nanoseconds, for the shell parts of a history.
 *
 *   history-clock        ->  1234567890123
 *
 * A history's events must all be stamped on one monotonic clock (README, "How a run is
 * judged"; loadtest/lib/history.sh): the load generators read CLOCK_MONOTONIC themselves
 * (wrk's LuaJIT through its FFI, the C recorders with clock_gettime), and the shell steps
 * around them (the reset of the goods before a row, the read of the books after it, the
 * ladder's curl requests) read it through this program. `date +%s%N` would not do: it is the wall
 * clock, which may step. Starting a process costs about a millisecond; a step stamps its invocation
 * before it starts and its completion after it ends, so the recorded window only widens,
 * which never makes a linearizable history look otherwise.
 */
#include <stdio.h>
#include <time.h>

int main(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        perror("history-clock: clock_gettime");
        return 1;
    }
    printf("%lld%09ld\n", (long long)ts.tv_sec, ts.tv_nsec);
    return 0;
}
