/*
 * lease.h - when a lease is renewed: the schedule every keeper of a lease in lock/ follows,
 * alone, so that the holdings' registry (which keeps the schedule) and the watchdog (which
 * runs it) do not need each other for it, and etcd's and ZooKeeper's keepers share it.
 */
#ifndef LOCK_LEASE_H
#define LOCK_LEASE_H

#include <stdbool.h>
#include <stdint.h>

/*
 * The schedule, as pure functions of monotonic times (ns) and leases (ms), so that it can be
 * tested without a clock or a thread. Every keeper of a lease in lock/ uses it: the
 * watchdog's schedule of the Redis lock's holdings (lock/holdings.c), and the queue lock's keeper
 * for its etcd lease and ZooKeeper session (lock/queue/).
 *
 * A lease is renewed every third of itself: two renewals can fail (a blip, a slow answer)
 * before it runs out. Counted from when the acquiring or renewing command was sent, which is
 * no later than when the server started the lease.
 */

/* A third of lease_ms, in ns; at least 1 ms, so that a tiny lease does not spin. */
int64_t lock__lease_period_ns(int64_t lease_ms);

/* When a lease of lease_ms, (re)started by a command sent at sent_ns, is next due. */
int64_t lock__lease_renewal_due(int64_t sent_ns, int64_t lease_ms);

/* After a renewal that got no answer at now_ns: try again after a third of the period of
 * lease_ms, the lease in force (the first lease until a renewal succeeds), so that a blip is
 * absorbed well before that lease runs out. */
int64_t lock__lease_retry_due(int64_t now_ns, int64_t lease_ms);

/*
 * The maximum hold time: whether a holding held since since_ns is, at now_ns, past
 * max_hold_ms (> 0) and so renewed no more. A holder stuck inside its section (a database
 * that stopped answering, a thread that never returns) would otherwise be renewed for as
 * long as its process lives, and every other request for the lock would wait in vain.
 */
bool lock__lease_capped(int64_t since_ns, int64_t now_ns, int64_t max_hold_ms);

#endif
