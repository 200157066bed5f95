/*
 * watchdog.h - the thread that keeps watchdog-mode leases alive.
 *
 * A lease protects against a holder that dies: its lock frees itself when the lease runs
 * out. But a living holder whose work takes longer than the lease would lose the lock in
 * the middle of its work. With LOCK_LEASE_WATCHDOG the lease is short-ish (30 s by default)
 * and this thread extends it every lease/3 while the holder holds it: a crashed process
 * stops renewing and its lock is free within one lease; a slow but living one keeps it.
 *
 * One thread per client renews every watchdog holding of the process (Redisson schedules
 * renewals on its timer instead; the effect is the same). It has its own Redis connection, so a
 * busy pool never delays a renewal. It renews with renew.lua (owner- and token-checked),
 * and when that finds the holding gone, marks it lost (lock_is_held answers
 * LOCK_ERR_LOST) and stops renewing it.
 */
#ifndef LOCK_WATCHDOG_H
#define LOCK_WATCHDOG_H

#include "lock/cluster.h"
#include "lock/conn.h"

#include <stdbool.h>
#include <stdint.h>

/* The registry of holdings the watchdog renews (lock/holdings.h). */
typedef struct lock__holdings lock__holdings;

typedef struct lock__watchdog lock__watchdog;

/*
 * Starts the watchdog thread renewing the holdings in h, with connections made from *cfg
 * (both must outlive the watchdog). With a cluster (not NULL; it must outlive the watchdog
 * too) each renewal goes to the master of the lock's slot instead, on that master's pool: a
 * free connection, or the one reserved for releases (pool.h), so a busy pool does not delay
 * it either. Returns LOCK_OK and *out, or LOCK_ERR_NOMEM (no memory or no thread).
 */
int lock__watchdog_start(lock__holdings *h, const lock__conn_config *cfg, lock__cluster *cluster,
                         lock__watchdog **out);

/* Stops the thread (a renewal in flight finishes within one command timeout), closes its
 * connection and frees the watchdog. NULL is a no-op. */
void lock__watchdog_stop(lock__watchdog *w);

/* Successful renewals, and holdings found lost, since start (read without locking). */
uint64_t lock__watchdog_renewals(const lock__watchdog *w);
uint64_t lock__watchdog_lost(const lock__watchdog *w);

#endif
