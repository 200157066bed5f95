/*
 * error.h - the calling thread's last error text, behind lock_last_error() (and the etcd and
 * ZooKeeper queue lock's queue_lock_last_error(): one buffer per thread
 * for every lock backend).
 *
 * lock/ does not log (the service decides what to log); instead every failure that has a
 * text worth showing (hiredis' errstr, a Redis error reply) is copied into a per-thread
 * buffer, like errno with a message. Every public call clears it first, so the text always
 * belongs to the caller's latest call.
 */
#ifndef LOCK_ERROR_H
#define LOCK_ERROR_H

/* Empties the calling thread's last error. */
void lock__error_clear(void);

/* Sets the calling thread's last error (printf-style, truncated to fit). */
void lock__error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Records what the calling thread's failing call met (lock_last_met); lock__error_clear
 * forgets it. timeout_ms: the command timeout, for LOCK_MET_NO_ANSWER. */
void lock__error_met(int met, long long timeout_ms);

/* The calling thread's last error ("" when none); valid until the thread's next call. */
const char *lock__error_text(void);

#endif
