/*
 * guards_env.c - the guards' environment (mode.h's guard_env), built once at start-up: the
 * settings every guard reads, and the state of the guards that have their own (the local
 * guard's mutexes, the Redlock clients, the queue-lock clients), each built and freed by
 * that guard's file. A file of its own so that the guards' helpers (guards.c), which the
 * mode files call, call no mode file back.
 */
#include <stdlib.h>
#include <string.h>

#include "service/guards/guards.h"

int guard_env_create(const guard_env_options *opts, guard_env **out)
{
    guard_env *env = NULL;

    if (opts == NULL || out == NULL || opts->wait_ms < 0)
        return -1;
    env = calloc(1, sizeof(*env));
    if (env == NULL)
        return -1;
    env->lock = opts->lock;
    env->wait_ms = opts->wait_ms;
    env->lease_ms = opts->lease_ms;
    env->fixed_lease_ms = opts->fixed_lease_ms;
    env->db = opts->db;
    env->db_wait_ms = opts->db_wait_ms;
    env->row_lease_ms = opts->row_lease_ms;
    if (guard_local_init(env) != 0 || guard_redlock_init(env, opts) != 0 ||
        guards__queue_init(env, opts) != 0) {
        guard_env_destroy(env);
        return -1;
    }
    *out = env;
    return 0;
}

void guard_env_destroy(guard_env *env)
{
    if (env == NULL)
        return;
    guards__queue_destroy(env);
    guard_redlock_destroy(env);
    guard_local_destroy(env);
    free(env);
}

unsigned guard_env_has(const guard_env *env)
{
    return env != NULL ? env->has : 0;
}

int64_t guard_env_wait_ms(const guard_env *env)
{
    return env->wait_ms;
}
