/*
 * waiters.h - the threads of this process waiting on one lock, in the order they came, and
 * which of them a release calls.
 *
 * A data structure with no thread and no mutex of its own: the subscriber (subscriber.h)
 * keeps one queue per lock it listens for and guards all of them with its mutex, which every
 * function here expects held, except lock__waiter_new and lock__waiter_free.
 *
 * Who is called (the reasoning lives here, where the code is):
 *   - a release names the waiter first in Redis' line (release.lua, the line every process
 *     shares): that waiter is called if it is in this queue, and nobody else;
 *   - a release that names nobody (no line: a client that does not queue, or a line Redis
 *     lost), or one that may have gone unheard (the subscriber was disconnected), calls the
 *     queue's oldest waiter: the smallest ticket, drawn when it joined and kept across its
 *     retries, so that waiters of one process take turns in the order they came.
 * One release wakes one thread, never all of them: only one can get the lock, and waking
 * sixteen threads to have fifteen fail again is a stampede. (Redisson's LockPubSub wakes one
 * waiter per message with a semaphore and leaves the choice to it; its fair lock names the
 * next waiter, as release.lua does.)
 *
 * A call is a flag and a signal on the waiter's own condition variable. A waiter that is
 * busy (in a round trip, not asleep) when it is called finds the flag set at its next wait,
 * which returns at once: no call is lost. A second call before it acted adds nothing: its
 * next try starts after both messages arrived, so it sees the lock as the later one left it.
 */
#ifndef LOCK_WAITERS_H
#define LOCK_WAITERS_H

#include "lock/owner.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lock__channel;

/* A grant, as a release message tells it (release.lua): the lock already belongs to the
 * named waiter, which may start its section without a round trip of its own. */
typedef struct lock__grant {
    int64_t token;       /* the holding's fencing token; 0: the message granted nothing */
    int64_t released_us; /* the release's moment on Redis' clock, us since the epoch */
} lock__grant;

/*
 * Splits a release message (text, len bytes; not NUL-terminated): "" names nobody,
 * "<owner>" names a waiter, "<owner> <token> <release time in us>" names it and grants it
 * the lock. Sets *name_len to the owner's length (0: nobody) and *grant (token 0: none).
 * A message whose grant part does not parse names its owner without a grant, so that the
 * waiter still wakes and takes the lock its own way.
 */
void lock__release_message_parse(const char *text, size_t len, size_t *name_len,
                                 lock__grant *grant);

/* One thread waiting in lock_try_lock, from the subscriber's join to its leave. */
typedef struct lock__waiter {
    struct lock__waiter *next;   /* the next younger waiter (larger ticket) of the queue */
    struct lock__channel *ch;    /* the subscriber's channel the waiter is queued on */
    uint64_t ticket;             /* its place in this process's queue: its seniority */
    char owner[LOCK__OWNER_MAX]; /* as release.lua names it when it is its turn */
    bool called;                 /* a call it has not acted on yet */
    lock__grant grant;           /* the grant that came with a call (token 0: none) */
    pthread_cond_t cv;           /* signalled when it is called */
} lock__waiter;

/* The waiters of one lock, oldest (smallest ticket) first. Waiters join at the tail with the
 * next ticket, so the list is in ticket order without ever being sorted. */
typedef struct lock__queue {
    lock__waiter *oldest;
    lock__waiter **tail; /* &last->next, or &oldest when empty */
    uint64_t next_ticket;
    int count;
} lock__queue;

/* Makes a waiter named `owner` (copied), not in any queue; NULL when out of memory. */
lock__waiter *lock__waiter_new(const char *owner);

/* Frees a waiter that is in no queue. */
void lock__waiter_free(lock__waiter *w);

/* An empty queue. */
void lock__queue_init(lock__queue *q);

/* w joins q as its youngest: the next ticket, at the tail. */
void lock__queue_join(lock__queue *q, lock__waiter *w);

/* A release named `name` (len bytes; 0: nobody): calls that waiter if it is in q, the oldest
 * if the name is empty, nobody otherwise (the named waiter lives in another process, or has
 * just left: leave.lua then calls the next one). A grant (token > 0) goes with the call to
 * the named waiter. */
void lock__queue_call_named(lock__queue *q, const char *name, size_t len, const lock__grant *grant);

/* A release may have gone unheard: calls the oldest waiter, if any. */
void lock__queue_call_oldest(lock__queue *q);

/* Sleeps on w's condition variable (mu held, and released while asleep) until w is called
 * (returns true, having used up the call; at once if one is pending) or deadline_ns (false).
 * *grant gets the grant that came with the call, and is cleared otherwise. A grant may be
 * stale (a message about an earlier call of the same thread): lock_try_lock checks its
 * token before it believes it. */
bool lock__waiter_await_call(lock__waiter *w, pthread_mutex_t *mu, int64_t deadline_ns,
                             lock__grant *grant);

/*
 * w leaves q. acquired: it got the lock, and a call pending for it is spent (it stood for
 * releases that very acquisition used: nobody can release the lock while it holds it).
 * Otherwise a pending call goes to the oldest waiter left, since the lock may be free.
 * pass_on: w used up a call for a try that failed on an error, not on another holder, so it
 * owes one to the oldest. Calls are for waiters, never banked for later ones.
 */
void lock__queue_leave(lock__queue *q, lock__waiter *w, bool acquired, bool pass_on);

#endif
