/*
 * cache.c - the cached stock's read and the sale's delete (see cache.h).
 */
#include "service/guards/cache.h"

#include <inttypes.h>
#include <stdio.h>

#include "lock/cache.h"
#include "lock/rwlock.h"
#include "service/guards/lock_names.h"
#include "service/guards/outage.h"
#include "service/log.h"

void cache_key(const lock_client *lock, int64_t goods_id, char *buf, size_t len)
{
    goods_lock_name(lock, "cache:goods:", goods_id, buf, len);
}

void cache_rwlock_name(const lock_client *lock, int64_t goods_id, char *buf, size_t len)
{
    goods_lock_name(lock, "rwlock:goods:", goods_id, buf, len);
}

int cache_forget(lock_client *lock, int64_t goods_id)
{
    char key[96];
    int rc;

    cache_key(lock, goods_id, key, sizeof(key));
    rc = lock_cache_delete(lock, key);
    if (rc != LOCK_OK)
        log_event(LOG_WARN, "cache_delete_failed", "key=%s error=%s", key, lock_strerror(rc));
    return rc;
}

static int redis_failed(int rc, char *detail, size_t detail_len)
{
    outage_redis("Redis", rc, "cached read", detail, detail_len);
    return CACHE_ERR_UNAVAILABLE;
}

/* The miss: the stock from PostgreSQL, then (after the hook) into the cache. */
static int fill(const cache_env *env, const char *key, int64_t goods_id, const cache_hook *hook,
                int64_t *stock, char *detail, size_t detail_len)
{
    db_stock_report report;
    db_conn *conn = NULL;
    int rc = db_pool_acquire(env->db, (int)env->db_wait_ms, &conn);

    if (rc == DB_OK) {
        rc = db_stock_report_read(conn, goods_id, &report);
        if (rc != DB_OK && rc != DB_ERR_NOT_FOUND)
            outage_postgresql(rc, conn, "cache fill", detail, detail_len);
        db_pool_release(env->db, conn);
    } else {
        outage_postgresql(rc, NULL, "cache fill", detail, detail_len);
    }
    if (rc == DB_ERR_NOT_FOUND)
        return CACHE_ERR_NOT_FOUND;
    if (rc != DB_OK)
        return CACHE_ERR_UNAVAILABLE;
    *stock = report.stock;
    if (hook != NULL && hook->miss_read != NULL)
        hook->miss_read(hook->arg, report.stock);
    rc = lock_cache_set(env->lock, key, report.stock, CACHE_TTL_MS);
    return rc == LOCK_OK ? CACHE_OK : redis_failed(rc, detail, detail_len);
}

int cache_read_stock(const cache_env *env, mode_cache how, int64_t goods_id, const cache_hook *hook,
                     int64_t *stock, bool *from_cache, char *detail, size_t detail_len)
{
    char key[96], name[96];
    bool hit = false;
    int rc;

    *from_cache = false;
    if (env->lock == NULL) {
        snprintf(detail, detail_len, "redis lock client not configured");
        return CACHE_ERR_UNAVAILABLE;
    }
    cache_key(env->lock, goods_id, key, sizeof(key));
    rc = lock_cache_get(env->lock, key, stock, &hit);
    if (rc != LOCK_OK)
        return redis_failed(rc, detail, detail_len);
    if (hit) {
        *from_cache = true;
        return CACHE_OK;
    }
    if (how != MODE_CACHE_RWLOCK)
        return fill(env, key, goods_id, hook, stock, detail, detail_len);
    cache_rwlock_name(env->lock, goods_id, name, sizeof(name));
    rc = lock_rw_lock(env->lock, name, LOCK_RW_READ, env->lock_wait_ms, LOCK_LEASE_WATCHDOG, NULL);
    if (rc == LOCK_ERR_TIMEOUT) {
        snprintf(detail, detail_len, "%s (read side) not had within %" PRId64 " ms", name,
                 env->lock_wait_ms);
        return CACHE_ERR_TIMEOUT;
    }
    if (rc != LOCK_OK)
        return redis_failed(rc, detail, detail_len);
    rc = fill(env, key, goods_id, hook, stock, detail, detail_len);
    if (lock_rw_unlock(env->lock, name, LOCK_RW_READ) != LOCK_OK)
        log_event(LOG_WARN, "unlock_failed", "lock=%s side=read", name);
    return rc;
}
