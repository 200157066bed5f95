/*
 * rwlock.h - a read-write lock on Redis over a lock_client: readers share, a writer excludes,
 * and a writer that waits shuts the door on new readers (no writer starvation).
 *
 * The lock named N lives in Redis as (every key N plus a suffix: one slot with a hash tag):
 *   N:write        a hash {owner -> hold count} with a TTL: the writer and its lease;
 *   N:write:fence  the writers' fencing counter (only grows, no TTL);
 *   N:read         a hash {owner -> hold count} with a TTL: the readers, and the longest of
 *                  their leases;
 *   N:read:fence   counts the times the read side was taken from free: a read holding's token,
 *                  which its renewals check;
 *   N:writers, N:readers  the writers and the readers in line, {owner -> ms their place
 *                  lapses}: a waiter calls again every third of the client's waiter liveness
 *                  to keep it, so a dead process's waiters leave by themselves;
 *   N:released     the channel a waiter is called on ("N:released:<process id>", with its
 *                  owner as the message, as the exclusive lock's releases call theirs).
 * The steps are one script each: rw_read.lua, rw_write.lua, rw_release.lua, rw_leave.lua,
 * rw_renew.lua (lock/README.md, "The read-write lock").
 *
 * Owners are the exclusive lock's (owner.h: per thread of a process), and so is everything
 * around the scripts: the client's pool, its watchdog (each side is a holding of its own,
 * renewed with rw_renew.lua), its subscriber (a waiter sleeps until a release calls it by
 * name, or its place needs keeping, or the holder's lease or its wait runs out).
 *
 * Reentrancy, per owner: the read side again while holding it; the write side again while
 * holding it; the read side while holding the write side (a writer reading what it writes,
 * as Redisson allows). Not the other way round: the write side while holding only the read
 * side would wait for its own read hold to go (Redisson's RReadWriteLock waits so, until its
 * wait runs out); here the client knows its holds and refuses at once (LOCK_ERR_INVALID).
 * Give the read side back first.
 *
 * Bounds: every call returns within its wait plus one command timeout (a release within two
 * command timeouts). A writer waits for the readers in when it came to leave, never for
 * readers that came after it: its place in N:writers refuses them (rw_read.lua).
 */
#ifndef LOCK_RWLOCK_H
#define LOCK_RWLOCK_H

#include "lock/lock.h"

#include <stdint.h>

typedef enum lock_rw_side {
    LOCK_RW_READ,
    LOCK_RW_WRITE,
} lock_rw_side;

/*
 * Takes `side` of the read-write lock `name` (1 to 500 bytes) for the calling thread.
 *   wait_ms >= 0: how long to wait in all; 0 tries once (and stands in no line);
 *   lease_ms > 0: the hold lapses after lease_ms unless given back; LOCK_LEASE_WATCHDOG: the
 *            client's watchdog lease, renewed while held (up to max_hold_ms, as lock.h says).
 * Returns LOCK_OK and *token (if not NULL): for the write side its fencing token (every
 * write holding's is larger than the one before), for the read side the read side's count
 * of takings (equal for readers that overlap). LOCK_ERR_TIMEOUT; LOCK_ERR_REDIS (never
 * "taken" on a lost answer: a take whose answer was lost is given back, best effort, on
 * another connection; if that is lost too, the lease ends it); LOCK_ERR_BUSY;
 * LOCK_ERR_INVALID (bad argument, or the write side asked while holding only the read side).
 * Thread-safe; returns within wait_ms plus one command timeout (plus one more when a lost
 * answer is given back).
 */
int lock_rw_lock(lock_client *c, const char *name, lock_rw_side side, int64_t wait_ms,
                 int64_t lease_ms, int64_t *token);

/*
 * Gives back one hold of `side`. At a side's last hold the side is freed and who may go on is
 * called (rw_release.lua: a writer in line once both sides are free; else every reader in
 * line once nobody writes). LOCK_OK; LOCK_ERR_NOT_HELD (the owner held nothing on that side:
 * nothing changed); LOCK_ERR_REDIS or LOCK_ERR_BUSY, after which the hold is dropped
 * locally all the same and its lease frees it. Takes at most two command timeouts.
 */
int lock_rw_unlock(lock_client *c, const char *name, lock_rw_side side);

/* Whether the calling thread holds `side`, as lock_is_held says it of the exclusive lock:
 * LOCK_OK, LOCK_ERR_LOST, LOCK_ERR_NOT_HELD, LOCK_ERR_INVALID. No round trip. */
int lock_rw_is_held(lock_client *c, const char *name, lock_rw_side side);

#endif
