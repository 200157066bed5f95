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
#include "service/guards/guards.h"
#include "service/log.h"

/*
 * The local guard keeps one lock per stripe, not per goods: goods ids range up to 2^63,
 * and a map that grew with every id a client names would be an unbounded allocation driven
 * by requests. Two goods that share a stripe merely take turns; correctness is unchanged.
 *
 * A stripe is a flag guarded by a mutex, with a line of waiters, rather than a bare mutex,
 * for two reasons:
 * - the wait is bounded on the monotonic clock (a change of the wall clock must neither cut
 *   it short nor stretch it): pthread_cond_timedwait takes its clock from the condition
 *   variable's attributes, where pthread_mutex_timedlock only knows the wall clock;
 * - turns are taken in arrival order. A mutex, or one condition variable, promises no order:
 *   pthread_cond_signal wakes any of the waiters, and a thread that arrives just as the flag
 *   is cleared takes it before the woken one has run (barging). Under load an unlucky request
 *   can lose that race again and again until its bound passes, and answer 503 lock_timeout
 *   though the stripe was only ever busy with other requests' short sections. So leave never
 *   clears the flag while anyone waits: it hands the stripe to the oldest waiter, and a
 *   newcomer that finds the stripe held (as it is whenever anyone is in line) queues behind.
 *
 * A waiter is a node on its own stack with a condition variable of its own, and leave
 * signals that one only. A ticket counter with one shared condition variable would have to
 * broadcast at every leave (all the waiters woken so that one goes on: n wake-ups a turn),
 * and the ticket of a waiter that gave up would be a hole the others must learn to skip.
 * A waiter whose bound passes unlinks its own node, and the line closes behind it; if the
 * stripe was handed to it in the same instant, it finds `granted` set and takes the stripe
 * (it is its own now: dropping it would leave the stripe held by nobody, for ever).
 */
#define LOCAL_STRIPES 256

typedef struct local_waiter {
    struct local_waiter *next; /* the one who came after; NULL: the last */
    pthread_cond_t wake;       /* signalled when the stripe is handed to this waiter */
    bool granted;              /* the stripe is this waiter's: set by leave, under mu */
} local_waiter;

typedef struct local_stripe {
    pthread_mutex_t mu;
    bool held;            /* taken; stays true from one holder to the next in line */
    local_waiter *oldest; /* the line, oldest first; NULL: nobody waits */
    local_waiter **tail;  /* where the next arrival links itself */
    int64_t waiting;      /* the line's length */
} local_stripe;

struct local_stripes {
    local_stripe stripe[LOCAL_STRIPES];
};

/* A holding's own state: the stripe taken. */
typedef struct local_state {
    local_stripe *stripe;
} local_state;
GUARD_STATE_FITS(local_state);

int guard_local_init(guard_env *env)
{
    int i;

    env->local = calloc(1, sizeof(*env->local));
    if (env->local == NULL)
        return -1;
    for (i = 0; i < LOCAL_STRIPES; i++) {
        pthread_mutex_init(&env->local->stripe[i].mu, NULL);
        env->local->stripe[i].tail = &env->local->stripe[i].oldest;
    }
    return 0;
}

void guard_local_destroy(guard_env *env)
{
    int i;

    if (env->local == NULL)
        return;
    for (i = 0; i < LOCAL_STRIPES; i++)
        pthread_mutex_destroy(&env->local->stripe[i].mu);
    free(env->local);
    env->local = NULL;
}

int64_t guard_local_stripe_of(int64_t goods_id)
{
    return (int64_t)((uint64_t)goods_id % LOCAL_STRIPES);
}

int64_t guard_local_waiting(guard_env *env, int64_t goods_id)
{
    local_stripe *stripe = &env->local->stripe[guard_local_stripe_of(goods_id)];
    int64_t n;

    pthread_mutex_lock(&stripe->mu);
    n = stripe->waiting;
    pthread_mutex_unlock(&stripe->mu);
    return n;
}

/* Links w at the end of the stripe's line (stripe->mu held). */
static void line_join(local_stripe *stripe, local_waiter *w)
{
    w->next = NULL;
    *stripe->tail = w;
    stripe->tail = &w->next;
    stripe->waiting++;
}

/* Unlinks w from the stripe's line, wherever it stands (stripe->mu held). The line is as
 * long as the replica has threads waiting on this stripe, so a walk is bounded. */
static void line_leave(local_stripe *stripe, local_waiter *w)
{
    local_waiter **link = &stripe->oldest;

    while (*link != w)
        link = &(*link)->next;
    *link = w->next;
    if (stripe->tail == &w->next)
        stripe->tail = link;
    stripe->waiting--;
}

int guard_local_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                      size_t detail_len)
{
    local_stripe *stripe = &env->local->stripe[guard_local_stripe_of(goods_id)];
    local_waiter self = {.next = NULL, .granted = false};
    int64_t start;
    struct timespec deadline;
    int rc = 0;

    memset(hold, 0, sizeof(*hold));
    start = clock_now_ns();
    deadline = clock_timespec(start + env->wait_ms * 1000000LL);
    pthread_mutex_lock(&stripe->mu);
    if (!stripe->held) {
        stripe->held = true; /* free, so nobody is in line: ours */
    } else if (env->wait_ms == 0) {
        rc = ETIMEDOUT; /* try once */
    } else if ((rc = clock_cond_init(&self.wake)) == 0) {
        line_join(stripe, &self);
        while (!self.granted && rc == 0)
            rc = pthread_cond_timedwait(&self.wake, &stripe->mu, &deadline);
        if (self.granted)
            rc = 0; /* handed over, even if just as the wait timed out: ours now */
        else
            line_leave(stripe, &self); /* gave up: the ones behind move up */
        pthread_cond_destroy(&self.wake);
    }
    pthread_mutex_unlock(&stripe->mu);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(start);
    if (rc == ETIMEDOUT) {
        snprintf(detail, detail_len, "local lock not had within %" PRId64 " ms", env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    }
    if (rc != 0) {
        char quoted[120];
        log_event(LOG_WARN, "local_lock_failed", "error=%s",
                  log_quote(quoted, sizeof(quoted), strerror(rc)));
        snprintf(detail, detail_len, "the local lock failed");
        return GUARD_ERR_UNAVAILABLE;
    }
    GUARD_STATE(local_state, hold)->stripe = stripe;
    return GUARD_OK;
}

void guard_local_leave(guard_env *env, guard_hold *hold)
{
    local_stripe *stripe = GUARD_STATE(local_state, hold)->stripe;
    local_waiter *next;

    (void)env;
    if (stripe == NULL)
        return;
    pthread_mutex_lock(&stripe->mu);
    next = stripe->oldest;
    if (next != NULL) {
        /* Handed over: `held` stays true, so nobody can take it in between. Signalled under
         * mu, as the waiter destroys its node once it has seen `granted` under mu. */
        line_leave(stripe, next);
        next->granted = true;
        pthread_cond_signal(&next->wake);
    } else {
        stripe->held = false;
    }
    pthread_mutex_unlock(&stripe->mu);
    GUARD_STATE(local_state, hold)->stripe = NULL;
}
