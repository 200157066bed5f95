/*
 * lock_names.c - the Redis names of the goods' locks (lock_names.h).
 */
#include "service/guards/lock_names.h"

#include <inttypes.h>
#include <stdio.h>

void goods_lock_name(const lock_client *lock, const char *prefix, int64_t goods_id, char *buf,
                     size_t len)
{
    if (lock_client_is_cluster(lock))
        snprintf(buf, len, "%s{%" PRId64 "}", prefix, goods_id);
    else
        snprintf(buf, len, "%s%" PRId64, prefix, goods_id);
}

void goods_segment_lock_name(const lock_client *lock, int64_t goods_id, int seg, char *buf,
                             size_t len)
{
    if (lock_client_is_cluster(lock))
        snprintf(buf, len, "lock:goods:{%" PRId64 ":seg:%d}", goods_id, seg);
    else
        snprintf(buf, len, "lock:goods:%" PRId64 ":seg:%d", goods_id, seg);
}
