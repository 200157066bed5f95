/*
 * keys.c - the Redis key and channel names of a lock (see keys.h).
 */
#include "lock/keys.h"
#include "lock/result.h"

#include <string.h>

/* out = name[0..len) followed by suffix; out has room for LOCK__NAME_MAX bytes and suffix. */
static void derive(char *out, const char *name, size_t len, const char *suffix)
{
    memcpy(out, name, len);
    memcpy(out + len, suffix, strlen(suffix) + 1);
}

int lock__keys_init(lock__keys *k, const char *name)
{
    size_t len;

    if (name == NULL)
        return LOCK_ERR_INVALID;
    len = strnlen(name, LOCK__NAME_MAX + 1);
    if (len == 0 || len > LOCK__NAME_MAX)
        return LOCK_ERR_INVALID;
    k->name = name;
    derive(k->fence, name, len, ":fence");
    derive(k->channel, name, len, ":released");
    derive(k->waiters, name, len, ":waiters");
    derive(k->waiters_until, name, len, ":waiters:until");
    return LOCK_OK;
}
