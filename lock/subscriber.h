/*
 * subscriber.h - one pub/sub connection per client, waking waiters when a lock is released.
 *
 * A waiter must not poll Redis ("is it free yet?" every few ms costs round trips and still
 * answers late) and must not sleep blindly until the holder's lease runs out (the holder
 * usually releases long before). release.lua publishes on "<lock>:released" when a lock
 * becomes free; this module listens on those channels with one connection for the whole
 * process and wakes a waiter when a message comes.
 *
 * How a waiter uses it (lock_try_lock):
 *   join(channel)           count me as waiting on this lock: subscribe if not yet
 *   wait_ready(...)         until Redis confirmed the subscription, so that a release
 *                           after this point cannot be missed
 *   try to acquire again    (it may have been released before we subscribed)
 *   wait_release(...)       sleep until a release message or the deadline, then try again
 *   leave(channel)          when done, acquired or not
 *
 * One release wakes one waiter of the process, not all of them: only one can get the lock,
 * and waking sixteen threads to have fifteen fail is a stampede. Each channel counts
 * wake-ups like a semaphore's permits (Redisson's LockPubSub does the same), so a message
 * that arrives while every waiter is busy retrying is not lost: the next one to sleep
 * consumes it and retries at once.
 *
 * When the connection is down, waiters are not told about releases. They do not wait for
 * the subscription then, and sleep until the holder's TTL or their deadline, whichever is
 * first (they always do; the message only cuts it short). The subscriber reconnects with
 * a growing pause (50 ms doubling to 1 s), subscribes again, and wakes one waiter per lock
 * since a release may have gone unheard while it was deaf. A connection that is silent
 * while a reply is owed for a command timeout is taken for dead; a PING every 5 s when idle
 * makes sure something is owed now and then.
 */
#ifndef LOCK_SUBSCRIBER_H
#define LOCK_SUBSCRIBER_H

#include "lock/conn.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct lock__subscriber lock__subscriber;
typedef struct lock__channel lock__channel; /* the waiters of one lock */

/*
 * Starts the subscriber thread; it connects to *cfg (which must outlive the subscriber)
 * only when a first waiter joins. Returns LOCK_OK and *out, or LOCK_ERR_NOMEM.
 */
int lock__subscriber_create(const lock__conn_config *cfg, lock__subscriber **out);

/* Stops the thread, closes the connection and frees everything. No waiter may be left
 * (every join was matched by a leave). NULL is a no-op. */
void lock__subscriber_destroy(lock__subscriber *s);

/*
 * Counts the caller as a waiter on `channel` ("<lock>:released") and has it subscribed.
 * Returns LOCK_OK and *out (valid until the matching lock__subscriber_leave()), or
 * LOCK_ERR_NOMEM.
 */
int lock__subscriber_join(lock__subscriber *s, const char *channel, lock__channel **out);

/*
 * Waits until Redis has confirmed the subscription to ch, or the connection is down (no
 * point waiting), or deadline_ns. Returns true if subscribed.
 */
bool lock__subscriber_wait_ready(lock__subscriber *s, lock__channel *ch, int64_t deadline_ns);

/* Sleeps until a release of ch is announced (returns true, having used up that wake-up)
 * or until deadline_ns (returns false). */
bool lock__subscriber_wait_release(lock__subscriber *s, lock__channel *ch, int64_t deadline_ns);

/*
 * The caller stops waiting on ch. pass_on: the caller used up a wake-up but leaves without
 * the lock and without having seen it taken (an error), so the wake-up goes to another
 * waiter instead of being lost.
 */
void lock__subscriber_leave(lock__subscriber *s, lock__channel *ch, bool pass_on);

#endif
