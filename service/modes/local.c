/*
 * modes/local.c - the "local" rung: a mutex of this process. Requests of one replica take
 * turns, so one replica is right; but three replicas have three unrelated mutexes, and the
 * race is back.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "service/clock.h"
#include "service/guards.h"

void guard_local__init(guard_env *env)
{
    int i;

    for (i = 0; i < LOCAL_STRIPES; i++) {
        pthread_condattr_t attr;

        pthread_mutex_init(&env->stripes[i].mu, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&env->stripes[i].freed, &attr);
        pthread_condattr_destroy(&attr);
    }
}

void guard_local__destroy(guard_env *env)
{
    int i;

    for (i = 0; i < LOCAL_STRIPES; i++) {
        pthread_cond_destroy(&env->stripes[i].freed);
        pthread_mutex_destroy(&env->stripes[i].mu);
    }
}

int64_t guard_local__stripe_of(int64_t goods_id)
{
    return (int64_t)((uint64_t)goods_id % LOCAL_STRIPES);
}

int guard_local__enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len)
{
    local_stripe *stripe = &env->stripes[guard_local__stripe_of(goods_id)];
    struct timespec start, deadline;
    int rc = 0;

    memset(hold, 0, sizeof(*hold));
    clock_gettime(CLOCK_MONOTONIC, &start);
    deadline = start;
    deadline.tv_sec += env->wait_ms / 1000;
    deadline.tv_nsec += (env->wait_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
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
    hold->wait_seconds = clock_seconds_since(&start);
    if (rc == ETIMEDOUT) {
        snprintf(detail, detail_len, "local lock not had within %" PRId64 " ms", env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    }
    if (rc != 0) {
        snprintf(detail, detail_len, "local lock: %s", strerror(rc));
        return GUARD_ERR_UNAVAILABLE;
    }
    hold->local = stripe;
    return GUARD_OK;
}

void guard_local__leave(guard_env *env, guard_hold *hold)
{
    local_stripe *stripe = hold->local;

    (void)env;
    if (stripe == NULL)
        return;
    pthread_mutex_lock(&stripe->mu);
    stripe->held = false;
    pthread_cond_signal(&stripe->freed);
    pthread_mutex_unlock(&stripe->mu);
    hold->local = NULL;
}
