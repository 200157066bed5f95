/*
 * guards.c - what every guard shares: the environment built once at start-up, the
 * still_held of a guard that cannot be lost, and the pause fault injection puts before a
 * release. A helper of the mode files (service/modes/), not a mode.
 */
#include <stdlib.h>
#include <string.h>

#include "service/clock.h"
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
    env->wait_ms = opts->wait_ms;
    env->lease_ms = opts->lease_ms;
    env->fixed_lease_ms = opts->fixed_lease_ms;
    env->db = opts->db;
    env->db_wait_ms = opts->db_wait_ms;
    env->row_lease_ms = opts->row_lease_ms;
    env->redlock = opts->redlock;
    if (env->redlock != NULL)
        env->has |= MODE_NEEDS_REDLOCK;
    if (guard_local__init(env) != 0 || guards_queue__init(env, opts) != 0) {
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
    guards_queue__destroy(env);
    guard_local__destroy(env);
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

int guards__always_held(guard_env *env, const guard_hold *hold)
{
    (void)env;
    (void)hold;
    return GUARD_OK;
}

void guards__pause_before_release(const guard_hold *hold)
{
    if (hold->before_release != NULL)
        hold->before_release(hold->before_release_arg);
    if (hold->release_pause_ms > 0)
        clock_sleep_ms(hold->release_pause_ms);
}
