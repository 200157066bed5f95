/*
 * naive.c - the ladder's deliberately incomplete locks: one Redis command (or one small
 * script) each. naive.h says what each one lacks.
 */
#include "lock/naive.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lock/client.h"
#include "lock/error.h"
#include "lock/owner.h"

int naive_setnx(lock_client *c, const char *key, bool *acquired)
{
    const char *argv[3] = {"SETNX", key, "1"};
    redisReply *r = NULL;
    int rc = lock__client_key_command(c, 3, argv, &r);

    *acquired = false;
    if (rc != LOCK_OK)
        return rc;
    *acquired = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return LOCK_OK;
}

int naive_set_nx_px(lock_client *c, const char *key, const char *value, int64_t lease_ms,
                    bool *acquired)
{
    char lease[24];
    const char *argv[6] = {"SET", key, value, "NX", "PX", lease};
    redisReply *r = NULL;
    int rc;

    *acquired = false;
    if (lease_ms <= 0 || value == NULL)
        return LOCK_ERR_INVALID;
    snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
    rc = lock__client_key_command(c, 6, argv, &r);
    if (rc != LOCK_OK)
        return rc;
    /* "OK" when set; a nil reply when the key exists (NX). */
    *acquired = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;
    freeReplyObject(r);
    return LOCK_OK;
}

int naive_get(lock_client *c, const char *key, char *buf, size_t len, bool *found)
{
    const char *argv[2] = {"GET", key};
    redisReply *r = NULL;
    int rc;

    *found = false;
    if (len == 0)
        return LOCK_ERR_INVALID;
    buf[0] = '\0';
    rc = lock__client_key_command(c, 2, argv, &r);
    if (rc != LOCK_OK)
        return rc;
    if (r->type == REDIS_REPLY_STRING) {
        *found = true;
        snprintf(buf, len, "%s", r->str);
    }
    freeReplyObject(r);
    return LOCK_OK;
}

int naive_pttl(lock_client *c, const char *key, int64_t *ttl_ms)
{
    const char *argv[2] = {"PTTL", key};
    redisReply *r = NULL;
    int rc = lock__client_key_command(c, 2, argv, &r);

    *ttl_ms = -2;
    if (rc != LOCK_OK)
        return rc;
    if (r->type == REDIS_REPLY_INTEGER)
        *ttl_ms = (int64_t)r->integer;
    freeReplyObject(r);
    return LOCK_OK;
}

int naive_del(lock_client *c, const char *key)
{
    const char *argv[2] = {"DEL", key};
    redisReply *r = NULL;
    int rc = lock__client_key_command(c, 2, argv, &r);

    if (r != NULL)
        freeReplyObject(r);
    return rc;
}

int naive_delete_if_value(lock_client *c, const char *key, const char *value, bool *deleted)
{
    const char *keys[1] = {key};
    const char *args[1] = {value};
    redisReply *r = NULL;
    int rc;

    lock__error_clear();
    *deleted = false;
    if (c == NULL || key == NULL || key[0] == '\0' || value == NULL)
        return LOCK_ERR_INVALID;
    rc = lock__client_script(c, LOCK__SCRIPT_DELETE_IF_VALUE, 1, keys, 1, args, &r);
    if (rc != LOCK_OK)
        return rc;
    *deleted = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return LOCK_OK;
}

void naive_owner(const lock_client *c, char *out, size_t len)
{
    char owner[LOCK__OWNER_MAX];

    lock__owner_format(lock_client_process_id(c), owner);
    snprintf(out, len, "%s", owner);
}
