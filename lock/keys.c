/*
 * keys.c - the Redis key and channel names of a lock (see keys.h).
 */
#include "lock/keys.h"
#include "lock/lock.h"

#include <string.h>

int lock__keys_init(lock__keys *k, const char *name)
{
    size_t len;

    if (name == NULL)
        return LOCK_ERR_INVALID;
    len = strnlen(name, LOCK__NAME_MAX + 1);
    if (len == 0 || len > LOCK__NAME_MAX)
        return LOCK_ERR_INVALID;
    k->name = name;
    memcpy(k->fence, name, len);
    memcpy(k->fence + len, ":fence", sizeof(":fence"));
    memcpy(k->channel, name, len);
    memcpy(k->channel + len, ":released", sizeof(":released"));
    return LOCK_OK;
}
