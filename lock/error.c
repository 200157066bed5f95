/*
 * error.c - result code names and the per-thread last error text (see error.h, lock.h).
 */
#include "lock/error.h"
#include "lock/lock.h"

#include <stdarg.h>
#include <stdio.h>

/* Long enough for hiredis' errstr (128 bytes) plus a short prefix naming the step. */
static _Thread_local char last_error[256];
static _Thread_local int last_met;              /* a lock_met */
static _Thread_local long long last_timeout_ms; /* for LOCK_MET_NO_ANSWER */

void lock__error_clear(void)
{
    last_error[0] = '\0';
    last_met = LOCK_MET_OTHER;
    last_timeout_ms = 0;
}

void lock__error_met(int met, long long timeout_ms)
{
    last_met = met;
    last_timeout_ms = timeout_ms;
}

lock_met lock_last_met(int64_t *timeout_ms)
{
    if (timeout_ms != NULL)
        *timeout_ms = last_met == LOCK_MET_NO_ANSWER ? (int64_t)last_timeout_ms : 0;
    return (lock_met)last_met;
}

void lock__error_set(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
}

const char *lock__error_text(void)
{
    return last_error;
}

const char *lock_last_error(void)
{
    return last_error;
}

const char *lock_strerror(int code)
{
    switch (code) {
    case LOCK_OK:
        return "ok";
    case LOCK_ERR_TIMEOUT:
        return "lock held by another owner for the whole wait";
    case LOCK_ERR_REDIS:
        return "redis unreachable, timed out or answered an error";
    case LOCK_ERR_NOT_HELD:
        return "lock not held by the caller";
    case LOCK_ERR_INVALID:
        return "invalid argument";
    case LOCK_ERR_NOMEM:
        return "out of memory";
    case LOCK_ERR_LOST:
        return "lock lost: its lease ran out or another owner has it";
    case LOCK_ERR_BUSY:
        return "no redis connection free within the wait";
    default:
        return "unknown lock error";
    }
}
