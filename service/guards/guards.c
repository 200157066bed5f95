/*
 * guards.c - what several guards share: the still_held of a guard that cannot be lost, and
 * the pause fault injection puts before a release. A helper of the mode files
 * (service/guards/modes/), not a mode; the environment they share is guards_env.c's.
 */
#include "service/clock.h"
#include "service/guards/guards.h"

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
