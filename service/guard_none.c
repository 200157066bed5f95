/*
 * guard_none.c - the "none" rung: no guard at all. Two requests can both read stock 10, both
 * write 9, and both record an order: one unit sold twice (a lost update). Also home of what
 * every guard shares: the environment and the "cannot be lost" still_held.
 */
#include <stdlib.h>
#include <string.h>

#include "service/guards.h"

int guard_env_create(const guard_env_options *opts, guard_env **out)
{
    guard_env *env = NULL;

    if (opts == NULL || out == NULL || opts->wait_ms < 0)
        return -1;
    env = calloc(1, sizeof(*env));
    if (env == NULL)
        return -1;
    env->lock = opts->lock;
    env->etcd = opts->etcd;
    env->zk = opts->zk;
    env->wait_ms = opts->wait_ms;
    env->lease_ms = opts->lease_ms;
    env->fixed_lease_ms = opts->fixed_lease_ms;
    env->db = opts->db;
    env->db_wait_ms = opts->db_wait_ms;
    env->row_lease_ms = opts->row_lease_ms;
    env->redlock = opts->redlock;
    if (env->redlock != NULL)
        env->has |= MODE_NEEDS_REDLOCK;
    if (env->etcd != NULL)
        env->has |= MODE_NEEDS_ETCD;
    if (env->zk != NULL)
        env->has |= MODE_NEEDS_ZOOKEEPER;
    guard_local__init(env);
    *out = env;
    return 0;
}

void guard_env_destroy(guard_env *env)
{
    if (env == NULL)
        return;
    guard_local__destroy(env);
    free(env);
}

unsigned guard_env_has(const guard_env *env)
{
    return env != NULL ? env->has : 0;
}

int guard_none__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len)
{
    (void)env;
    (void)goods_id;
    (void)detail;
    (void)detail_len;
    memset(hold, 0, sizeof(*hold));
    return GUARD_OK;
}

int guards__always_held(guard_env *env, const guard_hold *hold)
{
    (void)env;
    (void)hold;
    return GUARD_OK;
}

void guard_none__leave(guard_env *env, guard_hold *hold)
{
    (void)env;
    (void)hold;
}
