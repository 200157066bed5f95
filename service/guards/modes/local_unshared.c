/*
 * modes/local_unshared.c - the "local-unshared" rung: the first pitfall of in-process locking,
 * a lock object made per caller (`new ReentrantLock()` inside the method, a bean of prototype
 * scope). Each deduction makes a mutex of its own, locks it, and gives it back at the end:
 * nobody else ever sees it, so it excludes nothing, even inside one replica. Two requests of
 * one process each lock their own at once, and the lost update of `none` is back. `local`
 * (local.c) is the same idea done right: one lock per goods (a stripe) that every thread of
 * the process shares.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/guards/guards.h"

/* A holding's own state: the mutex this call made (malloc'd: a holding may be copied, a
 * mutex may not). */
typedef struct unshared_state {
    pthread_mutex_t *mine;
} unshared_state;
GUARD_STATE_FITS(unshared_state);

int guard_local_unshared_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                               size_t detail_len)
{
    pthread_mutex_t *mine = malloc(sizeof(*mine));

    (void)env;
    (void)goods_id;
    memset(hold, 0, sizeof(*hold));
    if (mine == NULL || pthread_mutex_init(mine, NULL) != 0) {
        free(mine);
        snprintf(detail, detail_len, "local-unshared: out of memory for its mutex");
        return GUARD_ERR_UNAVAILABLE;
    }
    pthread_mutex_lock(mine); /* never waits: no other thread knows this mutex */
    GUARD_STATE(unshared_state, hold)->mine = mine;
    return GUARD_OK;
}

void guard_local_unshared_leave(guard_env *env, guard_hold *hold)
{
    pthread_mutex_t *mine = GUARD_STATE(unshared_state, hold)->mine;

    (void)env;
    if (mine == NULL)
        return;
    pthread_mutex_unlock(mine);
    pthread_mutex_destroy(mine);
    free(mine);
    GUARD_STATE(unshared_state, hold)->mine = NULL;
}
