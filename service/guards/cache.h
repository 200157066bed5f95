/*
 * cache.h - the product page's cached stock (GET /api/stock/{id}?cached=1&mode=MODE): read
 * from Redis, filled from PostgreSQL on a miss with a TTL, and the sale's side of it.
 *
 * The race a cache invites: a read misses, reads 10 from PostgreSQL and stalls; a sale writes
 * 9 and deletes the entry; the read wakes and writes its 10, and the cache says 10 until the
 * entry expires, though the table holds 9. cache-aside runs that way. cache-rwlock closes it
 * with the read-write lock of lock/rwlock.h: the miss holds the read side from its database
 * read to its cache write, the sale holds the write side from before its write to after its
 * delete, so a fill is either wholly before a sale (which then deletes it) or wholly after
 * (and reads the new stock).
 */
#ifndef SERVICE_CACHE_H
#define SERVICE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "db/db.h"
#include "lock/lock.h"
#include "service/guards/mode.h"

#define CACHE_TTL_MS 60000 /* a filled entry lives this long unless a sale deletes it */
/* The rung a cached read follows when its mode keeps no cache (or it names none): the safe one.
 * GET /api/modes says it ("cache_default"). */
#define CACHE_DEFAULT_MODE "cache-rwlock"

enum {
    CACHE_OK = 0,
    CACHE_ERR_NOT_FOUND = -1,   /* no such goods: 404 */
    CACHE_ERR_UNAVAILABLE = -2, /* Redis or PostgreSQL failed: 503 unavailable (detail) */
    CACHE_ERR_TIMEOUT = -3,     /* the read side not had within the wait: 503 lock_timeout */
};

/* What a cached read needs: the clients and the bounds, not owned. */
typedef struct cache_env {
    lock_client *lock;
    db_pool *db;
    int64_t db_wait_ms;   /* bound on waiting for a pooled connection */
    int64_t lock_wait_ms; /* bound on waiting for the read side */
} cache_env;

/* Called on a miss after the database read and before the cache write (the lab's
 * cache-miss-read point) with the stock read. */
typedef struct cache_hook {
    void (*miss_read)(void *arg, int64_t stock);
    void *arg;
} cache_hook;

/*
 * The stock of goods_id as the cache has it, under `how`'s discipline (MODE_CACHE_RWLOCK: the
 * miss under the read side; anything else: no lock). *stock and *from_cache (false: a miss,
 * filled from PostgreSQL). hook may be NULL. CACHE_OK or a CACHE_ERR_* with detail filled.
 * Bounded: the waits above plus one command timeout per Redis round trip (at most four).
 */
int cache_read_stock(const cache_env *env, mode_cache how, int64_t goods_id, const cache_hook *hook,
                     int64_t *stock, bool *from_cache, char *detail, size_t detail_len);

/* The cache entry's key and the read-write lock's name for goods_id (with the cluster's hash
 * tag when the client routes over a Redis Cluster, as lock_names.h does). */
void cache_key(const lock_client *lock, int64_t goods_id, char *buf, size_t len);
void cache_rwlock_name(const lock_client *lock, int64_t goods_id, char *buf, size_t len);

/* Deletes goods_id's entry: a sale's, after its commit, and a reset's. LOCK_OK, or the lock
 * client's code; a failure is logged (the entry then lives until its TTL), and the calling
 * thread's lock_last_met() says what it met. */
int cache_forget(lock_client *lock, int64_t goods_id);

#endif
