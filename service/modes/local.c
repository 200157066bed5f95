/*
 * modes/local.c - the "local" rung: a mutex of this process. Requests of one replica take
 * turns, so one replica is right; but three replicas have three unrelated mutexes, and the
 * race is back.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards.h"

/*
 * The local guard keeps one lock per stripe, not per goods: goods ids range up to 2^63,
 * and a map that grew with every id a client names would be an unbounded allocation driven
 * by requests. Two goods that share a stripe merely take turns; correctness is unchanged.
 *
 * A stripe is a flag guarded by a mutex, with a condition variable to wait on, rather than a
 * bare mutex: the wait is bounded on the monotonic clock (a change of the wall clock must
 * neither cut it short nor stretch it), and pthread_cond_timedwait takes its clock from the
 * condition variable's attributes, where pthread_mutex_timedlock only knows the wall clock.
 */
#define LOCAL_STRIPES 256

typedef struct local_stripe {
    pthread_mutex_t mu;
    pthread_cond_t freed; /* signalled when `held` goes false */
    bool held;
} local_stripe;

struct local_stripes {
    local_stripe stripe[LOCAL_STRIPES];
};

/* A holding's own state: the stripe taken. */
typedef struct local_state {
    local_stripe *stripe;
} local_state;
GUARD_STATE_FITS(local_state);

int guard_local__init(guard_env *env)
{
    int i;

    env->local = calloc(1, sizeof(*env->local));
    if (env->local == NULL)
        return -1;
    for (i = 0; i < LOCAL_STRIPES; i++) {
        pthread_mutex_init(&env->local->stripe[i].mu, NULL);
        clock_cond_init(&env->local->stripe[i].freed);
    }
    return 0;
}

void guard_local__destroy(guard_env *env)
{
    int i;

    if (env->local == NULL)
        return;
    for (i = 0; i < LOCAL_STRIPES; i++) {
        pthread_cond_destroy(&env->local->stripe[i].freed);
        pthread_mutex_destroy(&env->local->stripe[i].mu);
    }
    free(env->local);
    env->local = NULL;
}

int64_t guard_local__stripe_of(int64_t goods_id)
{
    return (int64_t)((uint64_t)goods_id % LOCAL_STRIPES);
}

int guard_local__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len)
{
    local_stripe *stripe = &env->local->stripe[guard_local__stripe_of(goods_id)];
    int64_t start;
    struct timespec deadline;
    int rc = 0;

    memset(hold, 0, sizeof(*hold));
    start = clock_now_ns();
    deadline = clock_timespec(start + env->wait_ms * 1000000LL);
    pthread_mutex_lock(&stripe->mu);
    while (stripe->held && rc == 0)
        rc = env->wait_ms == 0 ? ETIMEDOUT
                               : pthread_cond_timedwait(&stripe->freed, &stripe->mu, &deadline);
    if (!stripe->held) {
        stripe->held = true; /* free after all (freed just as the wait timed out, too) */
        rc = 0;
    }
    pthread_mutex_unlock(&stripe->mu);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(start);
    if (rc == ETIMEDOUT) {
        snprintf(detail, detail_len, "local lock not had within %" PRId64 " ms", env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    }
    if (rc != 0) {
        snprintf(detail, detail_len, "local lock: %s", strerror(rc));
        return GUARD_ERR_UNAVAILABLE;
    }
    GUARD_STATE(local_state, hold)->stripe = stripe;
    return GUARD_OK;
}

void guard_local__leave(guard_env *env, guard_hold *hold)
{
    local_stripe *stripe = GUARD_STATE(local_state, hold)->stripe;

    (void)env;
    if (stripe == NULL)
        return;
    pthread_mutex_lock(&stripe->mu);
    stripe->held = false;
    pthread_cond_signal(&stripe->freed);
    pthread_mutex_unlock(&stripe->mu);
    GUARD_STATE(local_state, hold)->stripe = NULL;
}
