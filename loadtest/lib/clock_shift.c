/*
 * clock_shift.c - a preloaded library that moves one process's wall clock by an offset read
 * from a file, so that a driver can make that process's clock jump while everything else on
 * the machine keeps the real time (the ladder's clock-jump row: a Redlock node whose clock
 * jumps forward expires its keys early, since Redis expires keys by its wall clock).
 *
 *   LD_PRELOAD=build/libclock-shift.so CLOCK_SHIFT_FILE=FILE redis-server ...
 *
 * FILE holds a whole number of milliseconds, optionally negative ("0", "5000"): the offset
 * added to CLOCK_REALTIME (clock_gettime, gettimeofday, time). It is read again at every call,
 * so rewriting it is a jump of the process's clock at once; a missing or unreadable file is
 * an offset of 0. The monotonic clocks are left alone, as a stepped wall clock leaves them.
 *
 * Why not libfaketime (Debian's faketime package): Debian's redis-server allocates with
 * jemalloc, which reads the clock while it initialises, inside libfaketime's own
 * initialisation; libfaketime then gives up ("Unexpected recursive calls to clock_gettime()")
 * and the server never starts (a known clash of libfaketime with jemalloc). This library
 * allocates nothing, resolves nothing (the clock comes from the clock_gettime system call
 * itself, not from the next library's function) and needs no initialisation, so it cannot
 * recurse.
 *
 * Built without sanitizers in every build (the Makefile says so): it is loaded into a
 * program that is not.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_S 1000000000LL

/* The offset in ns that CLOCK_SHIFT_FILE holds now; 0 when it holds none. Only system calls
 * and getenv (which reads the environment in place): nothing that may allocate or read the
 * clock. */
static int64_t shift_ns(void)
{
    const char *path = getenv("CLOCK_SHIFT_FILE");
    char buf[32];
    int64_t ms = 0;
    ssize_t n;
    int fd, saved = errno;
    size_t i = 0;
    int neg = 0;

    if (path == NULL)
        return 0;
    fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return 0;
    }
    n = (ssize_t)syscall(SYS_read, fd, buf, sizeof(buf) - 1);
    syscall(SYS_close, fd);
    errno = saved;
    if (n <= 0)
        return 0;
    if (buf[0] == '-') {
        neg = 1;
        i = 1;
    }
    for (; i < (size_t)n && buf[i] >= '0' && buf[i] <= '9' && ms < 1000000000; i++)
        ms = ms * 10 + (buf[i] - '0');
    return (neg ? -ms : ms) * 1000000;
}

int clock_gettime(clockid_t id, struct timespec *ts)
{
    int64_t ns;

    if (syscall(SYS_clock_gettime, id, ts) != 0)
        return -1;
    if (id != CLOCK_REALTIME && id != CLOCK_REALTIME_COARSE)
        return 0;
    ns = (int64_t)ts->tv_sec * NS_PER_S + ts->tv_nsec + shift_ns();
    ts->tv_sec = (time_t)(ns / NS_PER_S);
    ts->tv_nsec = (long)(ns % NS_PER_S);
    return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz)
{
    struct timespec ts;

    (void)tz; /* obsolete: never filled by Linux's either */
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *tloc)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (tloc != NULL)
        *tloc = ts.tv_sec;
    return ts.tv_sec;
}
