/*
 * keys.h - the Redis names derived from a lock's name (the layout lock.h describes):
 *   N           the lock hash
 *   N:fence     the fencing counter
 *   N:released  the release channel
 *   N:waiters   the waiters' line (acquire.lua): owner -> arrival
 *   N:waiters:until  each waiter's liveness: owner -> when it is taken for dead
 * Kept in fixed buffers so that no call allocates for them.
 *
 * Every derived name is N plus a suffix, on purpose: in a Redis Cluster a script's keys must
 * all be in one slot, and when N carries a hash tag (slot.h: "lock:goods:{42}") N plus any
 * suffix hashes to that tag's slot ("lock:goods:{42}:fence"), so a key added here later
 * follows without more ado. The cluster topology therefore requires the tag in the name
 * (lock.h, cluster_nodes); the single-instance topology keeps its names untagged
 * ("lock:goods:42", "lock:goods:42:fence").
 */
#ifndef LOCK_KEYS_H
#define LOCK_KEYS_H

#define LOCK__NAME_MAX 512 /* bytes in a lock name, not counting the NUL */

typedef struct lock__keys {
    const char *name; /* borrowed from the caller */
    char fence[LOCK__NAME_MAX + sizeof(":fence")];
    char channel[LOCK__NAME_MAX + sizeof(":released")];
    char waiters[LOCK__NAME_MAX + sizeof(":waiters")];
    char waiters_until[LOCK__NAME_MAX + sizeof(":waiters:until")];
} lock__keys;

/* Fills *k for `name`. Returns LOCK_OK, or LOCK_ERR_INVALID for a NULL or empty name or one
 * longer than LOCK__NAME_MAX. */
int lock__keys_init(lock__keys *k, const char *name);

#endif
