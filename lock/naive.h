/*
 * naive.h - the course's first Redis locks, each missing on purpose one piece of the lock of
 * lock.h, so that the ladder's modes can show what that piece is for.
 *
 *   naive_setnx             SETNX key 1: no expiry and no owner. A holder that dies keeps
 *                           the lock for ever.
 *   naive_set_nx_px         SET key value NX PX lease: an expiry, and (when the value is an
 *                           owner token) an owner to check at release.
 *   naive_del               DEL key, whoever holds it: deletes another owner's lock once ours
 *                           has expired.
 *   naive_pttl              PTTL key: the lease left, for the lab's view of these locks.
 *   naive_get               GET key: the first half of a two-command "is it mine? delete
 *                           it" release (the second is naive_del), with a gap between the
 *                           two in which the lease can run out.
 *   naive_delete_if_value   the same check and delete in one Lua step (delete_if_value.lua).
 *
 * None of them is reentrant, renews a lease or hands out a fencing token, and none waits:
 * each is one attempt, one round trip on the client's command pool, bounded by two command
 * timeouts (one for the connection, one for the answer). The ladder's guards poll with
 * them. They share nothing with the lock of lock.h except the client's connections, and
 * their keys must not be the names of lock.h's locks (those are hashes; these are strings).
 *
 * Every function returns LOCK_OK, LOCK_ERR_INVALID, LOCK_ERR_BUSY, LOCK_ERR_REDIS (with
 * lock_last_error() saying why) or LOCK_ERR_NOMEM.
 */
#ifndef LOCK_NAIVE_H
#define LOCK_NAIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lock/lock.h"

/* SETNX key 1. *acquired: the key was set by this call. */
int naive_setnx(lock_client *c, const char *key, bool *acquired);

/* SET key value NX PX lease_ms (lease_ms > 0). *acquired: the key was set by this call. */
int naive_set_nx_px(lock_client *c, const char *key, const char *value, int64_t lease_ms,
                    bool *acquired);

/* GET key. *found: the key exists; its value is copied into buf (len > 0; truncated to
 * fit, always NUL-terminated). */
int naive_get(lock_client *c, const char *key, char *buf, size_t len, bool *found);

/* PTTL key: *ttl_ms the key's remaining lease in ms, -1 when it has none (setnx's), -2 when
 * there is no such key. For the lab's view of these locks (with naive_get: two reads, which
 * may straddle a change of holder; a display, never a decision). */
int naive_pttl(lock_client *c, const char *key, int64_t *ttl_ms);

/* DEL key, whatever it holds. */
int naive_del(lock_client *c, const char *key);

/* Deletes key only if its value is `value`, in one step. *deleted: it was, and is gone. */
int naive_delete_if_value(lock_client *c, const char *key, const char *value, bool *deleted);

/* The calling thread's owner token, "<client's process id>:<thread number>", the same form
 * as lock.h's owners, into out (len >= 64 holds it whole). */
void naive_owner(const lock_client *c, char *out, size_t len);

#endif
