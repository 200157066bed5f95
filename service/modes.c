/*
 * modes.c - the strategy table and its guards.
 *
 * Each row of `mode_table` is one way of guarding the read-check-write of deduct.c:
 *
 *   none   no guard at all. Two requests can both read stock 10, both write 9, and both
 *          record an order: one unit sold twice (a lost update).
 *   local  a mutex of this process. Requests of one replica take turns, so one replica is
 *          right; but three replicas have three unrelated mutexes, and the race is back.
 *   redis  the Redis lock of lock/ on "lock:goods:<id>", with a bounded wait and watchdog
 *          renewal. Every replica asks the same Redis, so it holds across replicas. Its
 *          fencing token claims the goods row at the read (db_stock_claim), so a holder that
 *          lost its lock mid-section cannot sell from a stock another holder also read.
 *
 * Adding a mode means adding a row and its guard functions here; nothing else changes.
 */
#include "service/modes.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/log.h"

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

struct guard_env {
    lock_client *lock;
    int64_t wait_ms;
    int64_t lease_ms;
    local_stripe stripes[LOCAL_STRIPES];
};

int guard_env_create(const guard_env_options *opts, guard_env **out)
{
    guard_env *env = NULL;
    int i;

    if (opts == NULL || out == NULL || opts->wait_ms < 0)
        return -1;
    env = calloc(1, sizeof(*env));
    if (env == NULL)
        return -1;
    env->lock = opts->lock;
    env->wait_ms = opts->wait_ms;
    env->lease_ms = opts->lease_ms;
    for (i = 0; i < LOCAL_STRIPES; i++) {
        pthread_condattr_t attr;

        pthread_mutex_init(&env->stripes[i].mu, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&env->stripes[i].freed, &attr);
        pthread_condattr_destroy(&attr);
    }
    *out = env;
    return 0;
}

void guard_env_destroy(guard_env *env)
{
    int i;

    if (env == NULL)
        return;
    for (i = 0; i < LOCAL_STRIPES; i++) {
        pthread_cond_destroy(&env->stripes[i].freed);
        pthread_mutex_destroy(&env->stripes[i].mu);
    }
    free(env);
}

static double seconds_since(const struct timespec *start)
{
    struct timespec now;

    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* ---- none: no guard ------------------------------------------------------------------ */

static int none_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len)
{
    (void)env;
    (void)goods_id;
    (void)detail;
    (void)detail_len;
    memset(hold, 0, sizeof(*hold));
    return GUARD_OK;
}

static int always_held(guard_env *env, const guard_hold *hold)
{
    (void)env;
    (void)hold;
    return GUARD_OK;
}

static void none_leave(guard_env *env, guard_hold *hold)
{
    (void)env;
    (void)hold;
}

/* ---- local: a mutex of this process --------------------------------------------------- */

static int local_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len)
{
    local_stripe *stripe = &env->stripes[(uint64_t)goods_id % LOCAL_STRIPES];
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
    hold->wait_seconds = seconds_since(&start);
    if (rc == ETIMEDOUT) {
        snprintf(detail, detail_len, "local lock not had within %" PRId64 " ms", env->wait_ms);
        return GUARD_TIMEOUT;
    }
    if (rc != 0) {
        snprintf(detail, detail_len, "local lock: %s", strerror(rc));
        return GUARD_UNAVAILABLE;
    }
    hold->local = stripe;
    return GUARD_OK;
}

static void local_leave(guard_env *env, guard_hold *hold)
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

/* ---- redis: the lock of lock/ --------------------------------------------------------- */

static int redis_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                       size_t detail_len)
{
    struct timespec start;
    int64_t token = 0;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (env->lock == NULL) {
        snprintf(detail, detail_len, "redis lock client not configured");
        return GUARD_UNAVAILABLE;
    }
    snprintf(hold->name, sizeof(hold->name), "lock:goods:%" PRId64, goods_id);
    clock_gettime(CLOCK_MONOTONIC, &start);
    rc = lock_try_lock(env->lock, hold->name, env->wait_ms, env->lease_ms, &token);
    hold->waited = true;
    hold->wait_seconds = seconds_since(&start);
    switch (rc) {
    case LOCK_OK:
        hold->fenced = true;
        hold->fence = token;
        hold->fence_source = "redis";
        return GUARD_OK;
    case LOCK_TIMEOUT:
        snprintf(detail, detail_len, "%s not had within %" PRId64 " ms", hold->name, env->wait_ms);
        return GUARD_TIMEOUT;
    case LOCK_ERR_BUSY:
        snprintf(detail, detail_len, "redis: no connection free within the wait bound");
        return GUARD_UNAVAILABLE;
    default:
        snprintf(detail, detail_len, "redis: %s%s%s", lock_strerror(rc),
                 lock_last_error()[0] ? ": " : "", lock_last_error());
        return GUARD_UNAVAILABLE;
    }
}

static int redis_still_held(guard_env *env, const guard_hold *hold)
{
    return lock_is_held(env->lock, hold->name) == LOCK_OK ? GUARD_OK : GUARD_LOST;
}

static void redis_leave(guard_env *env, guard_hold *hold)
{
    int rc = lock_unlock(env->lock, hold->name);

    /* A failed unlock leaves the key to its lease: the watchdog has stopped renewing it
     * (lock_unlock forgets the holding either way), so it expires within one lease. */
    if (rc != LOCK_OK) {
        char quoted[160];
        log_event(LOG_WARN, "unlock_failed", "lock=%s error=%s", hold->name,
                  log_quote(quoted, sizeof(quoted), lock_strerror(rc)));
    }
}

/* ---- the table ----------------------------------------------------------------------- */

static const mode mode_table[] = {
    {"none", false, "read, check and write with no lock at all: oversells under load", none_enter,
     always_held, none_leave},
    {"local", false,
     "the same under a mutex of the process: right with one replica, oversells with several",
     local_enter, always_held, local_leave},
    {"redis", true,
     "the same under the Redis reentrant lock (owner, watchdog, bounded wait, fencing): "
     "right with any number of replicas",
     redis_enter, redis_still_held, redis_leave},
};

const mode *modes_all(size_t *count)
{
    *count = sizeof(mode_table) / sizeof(mode_table[0]);
    return mode_table;
}

const mode *modes_find(const char *name)
{
    size_t i;

    if (name == NULL)
        return NULL;
    for (i = 0; i < sizeof(mode_table) / sizeof(mode_table[0]); i++)
        if (strcmp(mode_table[i].name, name) == 0)
            return &mode_table[i];
    return NULL;
}

const char *modes_list(char *buf, size_t len)
{
    size_t i, used = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (i = 0; i < sizeof(mode_table) / sizeof(mode_table[0]); i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "", mode_table[i].name);
        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0'; /* drop the name that did not fit whole */
            break;
        }
        used += (size_t)n;
    }
    return buf;
}
