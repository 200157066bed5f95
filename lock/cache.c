/*
 * cache.c - GET, SET PX and DEL of an integer (see cache.h), on the lock client's pool.
 */
#include "lock/cache.h"
#include "lock/client.h"
#include "lock/naive.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

int lock_cache_get(lock_client *c, const char *key, int64_t *value, bool *hit)
{
    const char *argv[2] = {"GET", key};
    redisReply *r = NULL;
    char *end = NULL;
    int rc;

    *hit = false;
    rc = lock__client_key_command(c, 2, argv, &r);
    if (rc != LOCK_OK)
        return rc;
    if (r->type == REDIS_REPLY_STRING) {
        long long v = strtoll(r->str, &end, 10);

        *hit = end != r->str && *end == '\0';
        *value = *hit ? (int64_t)v : 0;
    }
    freeReplyObject(r);
    return LOCK_OK;
}

int lock_cache_set(lock_client *c, const char *key, int64_t value, int64_t ttl_ms)
{
    char v[24], ttl[24];
    const char *argv[5] = {"SET", key, v, "PX", ttl};
    redisReply *r = NULL;
    int rc;

    if (ttl_ms <= 0)
        return LOCK_ERR_INVALID;
    snprintf(v, sizeof(v), "%" PRId64, value);
    snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_ms);
    rc = lock__client_key_command(c, 5, argv, &r);
    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

int lock_cache_delete(lock_client *c, const char *key)
{
    return naive_del(c, key); /* the ladder's DEL: one command, absent is fine */
}
