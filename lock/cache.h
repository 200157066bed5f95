/*
 * cache.h - an integer kept in Redis with a TTL: the product page's cached stock.
 *
 * Three commands on the lock client's pool (GET, SET PX, DEL), each one round trip within one
 * command timeout to borrow a connection and one more for the answer. What keeps the cached
 * value right is not here: it is the discipline around these calls (the read-write lock,
 * rwlock.h, in the service's cache-rwlock mode).
 */
#ifndef LOCK_CACHE_H
#define LOCK_CACHE_H

#include "lock/lock.h"

#include <stdbool.h>
#include <stdint.h>

/* Reads `key`: LOCK_OK with *hit (and *value when hit; a value that is not an integer counts as
 * a miss); LOCK_ERR_INVALID, LOCK_ERR_REDIS or LOCK_ERR_BUSY. */
int lock_cache_get(lock_client *c, const char *key, int64_t *value, bool *hit);

/* Writes `key` = value, living ttl_ms (> 0). LOCK_OK, LOCK_ERR_INVALID, LOCK_ERR_REDIS or
 * LOCK_ERR_BUSY. */
int lock_cache_set(lock_client *c, const char *key, int64_t value, int64_t ttl_ms);

/* Deletes `key` (absent is fine). LOCK_OK, LOCK_ERR_INVALID, LOCK_ERR_REDIS or LOCK_ERR_BUSY. */
int lock_cache_delete(lock_client *c, const char *key);

#endif
