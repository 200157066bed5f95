/*
 * subscriber.h - one pub/sub connection per client, waking waiters when a lock is released.
 *
 * A waiter must not poll Redis ("is it free yet?" every few ms costs round trips and still
 * answers late) and must not sleep blindly until the holder's lease runs out (the holder
 * usually releases long before). release.lua publishes a message when a lock becomes free:
 * on "<lock>:released:<process id>" when it names a waiter (only that waiter's process hears
 * it), on "<lock>:released" when it names nobody (every process hears it). This module
 * listens on both for each lock this process waits on, with one connection for the whole
 * process, and wakes a waiter when a message comes.
 *
 * How a waiter uses it (lock_try_lock):
 *   join(channel, owner)    count me as waiting on this lock: subscribe if not yet; I get
 *                           a ticket, my place in this process's queue of its waiters
 *   wait_ready(...)         until Redis confirmed the subscription, so that a release
 *                           after this point cannot be missed
 *   try to acquire again    (it may have been released before we subscribed)
 *   wait_release(...)       sleep until I am called, or the deadline; then try again
 *   leave(...)              when done, acquired or not
 * When other threads of the process wait on the lock already, its channel is subscribed,
 * and a waiter joins before its first try instead (join_if_listening): every release after
 * that try reaches it, so it goes to sleep without the second try.
 *
 * Who is called: one thread per release, the one whose turn it is; waiters.h says how, and
 * keeps each lock's queue of this process's waiters.
 *
 * A release that granted the lock to the first waiter in line (release.lua) says so in its
 * message, and the call carries the grant to that waiter, which then needs no round trip.
 *
 * When the connection is down, waiters are not told about releases. They do not wait for
 * the subscription then, and sleep until the holder's TTL or their deadline, whichever is
 * first (they always do; the message only cuts it short). The subscriber reconnects with
 * a growing pause (50 ms doubling to 1 s), subscribes again, and wakes the oldest waiter of
 * each lock, since a release may have gone unheard while it was deaf. A connection that is silent
 * while a reply is owed for a command timeout is taken for dead; a PING every 5 s when idle
 * makes sure something is owed now and then.
 */
#ifndef LOCK_SUBSCRIBER_H
#define LOCK_SUBSCRIBER_H

#include "lock/conn.h"
#include "lock/waiters.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct lock__subscriber lock__subscriber;
typedef struct lock__channel lock__channel; /* the waiters of one lock */

/*
 * Starts the subscriber thread; it connects to *cfg (which must outlive the subscriber)
 * only when a first waiter joins. process_id (LOCK__PROCESS_ID_LEN hex digits, copied) is
 * the one in this process's owners (owner.h): it names the process's own channels. Returns
 * LOCK_OK and *out, or LOCK_ERR_NOMEM.
 */
int lock__subscriber_create(const lock__conn_config *cfg, const char *process_id,
                            lock__subscriber **out);

/* Tells the thread that the address moved (a failover): it drops its link and subscribes
 * again on the new master. Safe from any thread. */
void lock__subscriber_moved(lock__subscriber *s);

/* Stops the thread, closes the connection and frees everything. No waiter may be left
 * (every join was matched by a leave). NULL is a no-op. */
void lock__subscriber_destroy(lock__subscriber *s);

/*
 * Counts the caller as a waiter on `channel` ("<lock>:released"), gives it the channel's
 * next ticket (it is now the youngest waiter) and has the channel subscribed, with this
 * process's own ("<lock>:released:<process id>"). `owner` is the
 * name a release message calls it by (copied). Call it once
 * per lock_try_lock that must wait, not once per retry: the ticket is the caller's place
 * in line. Returns LOCK_OK and *out (owned by the subscriber; valid until, and freed by,
 * the matching lock__subscriber_leave()), or LOCK_ERR_NOMEM.
 */
int lock__subscriber_join(lock__subscriber *s, const char *channel, const char *owner,
                          lock__waiter **out);

/*
 * Like lock__subscriber_join, but only when the channel is subscribed already (Redis
 * confirmed it, and the link is up): then a release published from now on reaches w, and
 * the caller needs neither wait_ready nor the try after it. Otherwise joins nothing and
 * returns LOCK_OK with *out NULL. LOCK_ERR_NOMEM when out of memory.
 */
int lock__subscriber_join_if_listening(lock__subscriber *s, const char *channel,
                                       const char *owner, lock__waiter **out);

/*
 * Waits until Redis has confirmed the subscription to w's channels, or the connection is
 * down (no point waiting), or deadline_ns. Returns true if subscribed.
 */
bool lock__subscriber_wait_ready(lock__subscriber *s, lock__waiter *w, int64_t deadline_ns);

/* Sleeps until w is called (a release named it, or named nobody and w is the oldest) since
 * its last wake-up (returns true, having used up that call; at once if one is pending
 * already), or until deadline_ns (returns false). *grant gets the grant the call brought
 * (token 0: none; waiters.h says when one can be stale). */
bool lock__subscriber_wait_release(lock__subscriber *s, lock__waiter *w, int64_t deadline_ns,
                                   lock__grant *grant);

/*
 * The caller stops waiting and w is freed. acquired: the caller got the lock (a call
 * pending for it is spent: it stood for releases this acquisition used). Otherwise a
 * pending call goes to the oldest waiter left. pass_on: the caller used up a call but
 * leaves without the lock and without having seen it taken (an error), so a call goes to
 * the oldest instead of being lost.
 */
void lock__subscriber_leave(lock__subscriber *s, lock__waiter *w, bool acquired, bool pass_on);

#endif
