/*
 * result.h - what every call of the lock module returns: LOCK_OK, or a negative code.
 *
 * In a header of their own, as hiredis keeps its codes in read.h: the module's internal files
 * return these codes and need nothing else of the client's API (lock.h, which includes this
 * file), so they include only this. lock_strerror() (lock.h) names them.
 */
#ifndef LOCK_RESULT_H
#define LOCK_RESULT_H

/* Result codes. 0 is success; every failure is negative. */
enum {
    LOCK_OK = 0,
    LOCK_ERR_TIMEOUT = -1,  /* try_lock: the lock was held by another owner for the whole wait */
    LOCK_ERR_REDIS = -2,    /* Redis unreachable, timed out or answered an error: not acquired */
    LOCK_ERR_NOT_HELD = -3, /* unlock/is_held: the caller does not hold this lock */
    LOCK_ERR_INVALID = -4,  /* bad argument (empty name, lease 0 or < -1, wait < 0, ...) */
    LOCK_ERR_NOMEM = -5,
    LOCK_ERR_LOST = -6, /* is_held: the watchdog found the lock gone or taken by another */
    LOCK_ERR_BUSY = -7, /* no command connection could be had within the wait bound */
};

/* How the calling thread's last failed call met Redis, for a caller that says it to a client
 * in words of its own (lock_last_met(), lock.h; lock_last_error() is the library's text). */
typedef enum {
    LOCK_MET_OTHER = 0,   /* no failure, or one its code says alone, or an error reply */
    LOCK_MET_UNREACHABLE, /* no connection could be made, or it broke under a command */
    LOCK_MET_NO_ANSWER,   /* a command went unanswered for the command timeout */
} lock_met;

#endif
