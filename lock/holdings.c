/*
 * holdings.c - this process's holdings, renewed on the watchdog's schedule (see holdings.h;
 * the schedule itself is lock/lease.h's).
 *
 * A singly linked list under one mutex. It holds one entry per lock held by a thread of
 * this process, so it is as long as the number of threads holding locks at once: a list
 * searched from the front is simple and fast enough for that.
 *
 * The watchdog sleeps on `due_cv` until the earliest renewal is due; `sleep_until_ns` says
 * until when, so that a new holding wakes it only when it is due before that (mostly it is
 * not: a new holding is due a third of a lease from now, later than those already there).
 */
#include "lock/holdings.h"
#include "lock/clock.h"
#include "lock/result.h"
#include "lock/lease.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct holding {
    struct holding *next;
    uint64_t id; /* unique for the registry's life: a new holding gets a new id */
    char *name;
    uint64_t thread;
    char owner[LOCK__OWNER_MAX];
    lock__script renew; /* the script the watchdog renews it with */
    int64_t count;
    int64_t token;
    int64_t lease_ms;   /* in force: the latest acquisition's, the watchdog's once renewed */
    bool watchdog;      /* renewed by the watchdog */
    bool lost;          /* the watchdog found it gone */
    int64_t expires_ns; /* end of lease as far as we know */
    int64_t due_ns;     /* next renewal (watchdog holdings) */
    int64_t since_ns;   /* when the holding began: its first acquisition was sent */
    bool capped;        /* held for max_hold: the watchdog renews it no more */
} holding;

struct lock__holdings {
    pthread_mutex_t mu;
    pthread_cond_t due_cv; /* the watchdog sleeps here */
    holding *list;
    uint64_t next_id;
    int64_t watchdog_lease_ms;
    int64_t max_hold_ms;    /* a holding is renewed for this long at most */
    int64_t sleep_until_ns; /* the watchdog's wake-up time; INT64_MAX: none, or awake */
    bool stopped;
};

int lock__holdings_create(int64_t watchdog_lease_ms, int64_t max_hold_ms, lock__holdings **out)
{
    lock__holdings *h;

    *out = NULL;
    h = calloc(1, sizeof(*h));
    if (h == NULL)
        goto fail;
    if (pthread_mutex_init(&h->mu, NULL) != 0)
        goto fail_free;
    if (lock__cond_init(&h->due_cv) != 0)
        goto fail_mutex;
    h->watchdog_lease_ms = watchdog_lease_ms;
    h->max_hold_ms = max_hold_ms;
    h->sleep_until_ns = INT64_MAX;
    h->next_id = 1;
    *out = h;
    return LOCK_OK;

fail_mutex:
    pthread_mutex_destroy(&h->mu);
fail_free:
    free(h);
fail:
    return LOCK_ERR_NOMEM;
}

static void holding_free(holding *e)
{
    free(e->name);
    free(e);
}

void lock__holdings_destroy(lock__holdings *h)
{
    if (h == NULL)
        return;
    while (h->list != NULL) {
        holding *e = h->list;

        h->list = e->next;
        holding_free(e);
    }
    pthread_cond_destroy(&h->due_cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* The link pointing at the holding of (name, thread), or at the list's terminating NULL. */
static holding **holding_find(lock__holdings *h, const char *name, uint64_t thread)
{
    holding **link = &h->list;

    while (*link != NULL && ((*link)->thread != thread || strcmp((*link)->name, name) != 0))
        link = &(*link)->next;
    return link;
}

static void holding_unlink(holding **link)
{
    holding *e = *link;

    *link = e->next;
    holding_free(e);
}

int lock__holdings_acquired(lock__holdings *h, const char *name, uint64_t thread, const char *owner,
                            int64_t count, int64_t token, int64_t lease_ms, bool watchdog,
                            int64_t sent_ns)
{
    return lock__holdings_acquired_as(h, LOCK__SCRIPT_RENEW, name, thread, owner, count, token,
                                      lease_ms, watchdog, sent_ns);
}

int lock__holdings_acquired_as(lock__holdings *h, lock__script renew, const char *name,
                               uint64_t thread, const char *owner, int64_t count, int64_t token,
                               int64_t lease_ms, bool watchdog, int64_t sent_ns)
{
    holding **link;
    holding *e;
    int rc = LOCK_OK;

    pthread_mutex_lock(&h->mu);
    link = holding_find(h, name, thread);
    e = *link;
    if (e != NULL && e->token != token) {
        /* The old holding was lost and this is a new one: start afresh. */
        holding_unlink(link);
        e = NULL;
    }
    if (e == NULL) {
        e = calloc(1, sizeof(*e));
        if (e == NULL || (e->name = strdup(name)) == NULL) {
            free(e);
            rc = LOCK_ERR_NOMEM;
            goto out;
        }
        e->id = h->next_id++;
        e->thread = thread;
        memcpy(e->owner, owner, sizeof(e->owner));
        e->renew = renew;
        e->token = token;
        e->since_ns = sent_ns;
        e->next = h->list;
        h->list = e;
    }
    e->count = count;
    e->lost = false;
    e->lease_ms = lease_ms;
    e->expires_ns = lock__add_ns(sent_ns, lock__ms_to_ns(lease_ms));
    if (watchdog || e->watchdog) {
        /* Once any hold of a holding asked for the watchdog, it renews the holding (with
         * the watchdog lease) until the last hold is given back. This acquisition just set
         * the TTL to lease_ms, so the next renewal must come within a third of that. */
        int64_t due = lock__lease_renewal_due(sent_ns, lease_ms);

        if (!e->watchdog || due < e->due_ns)
            e->due_ns = due;
        e->watchdog = true;
        if (e->due_ns < h->sleep_until_ns)
            pthread_cond_signal(&h->due_cv);
    }
out:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void lock__holdings_released(lock__holdings *h, const char *name, uint64_t thread,
                             int64_t remaining)
{
    holding **link;

    pthread_mutex_lock(&h->mu);
    link = holding_find(h, name, thread);
    if (*link == NULL)
        goto out;
    if (remaining < 0)
        remaining = (*link)->count - 1;
    if (remaining <= 0)
        holding_unlink(link);
    else
        (*link)->count = remaining;
out:
    pthread_mutex_unlock(&h->mu);
}

int64_t lock__holdings_count(lock__holdings *h, const char *name, uint64_t thread, int64_t *token)
{
    holding *e;
    int64_t count;

    pthread_mutex_lock(&h->mu);
    e = *holding_find(h, name, thread);
    count = e != NULL ? e->count : 0;
    if (token != NULL)
        *token = e != NULL ? e->token : 0;
    pthread_mutex_unlock(&h->mu);
    return count;
}

void lock__holdings_forget(lock__holdings *h, const char *name, uint64_t thread)
{
    holding **link;

    pthread_mutex_lock(&h->mu);
    link = holding_find(h, name, thread);
    if (*link != NULL)
        holding_unlink(link);
    pthread_mutex_unlock(&h->mu);
}

int lock__holdings_state(lock__holdings *h, const char *name, uint64_t thread, int64_t now_ns)
{
    holding *e;
    int rc;

    pthread_mutex_lock(&h->mu);
    e = *holding_find(h, name, thread);
    if (e == NULL)
        rc = LOCK_ERR_NOT_HELD;
    else if (e->lost || now_ns >= e->expires_ns)
        rc = LOCK_ERR_LOST;
    else
        rc = LOCK_OK;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* The watchdog holding due first, or NULL when there is none to renew. */
static holding *holding_earliest_due(lock__holdings *h)
{
    holding *best = NULL;

    for (holding *e = h->list; e != NULL; e = e->next)
        if (e->watchdog && !e->lost && !e->capped && (best == NULL || e->due_ns < best->due_ns))
            best = e;
    return best;
}

int lock__holdings_next_due(lock__holdings *h, lock__renewal *out)
{
    holding *e;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (h->stopped)
            goto out;
        e = holding_earliest_due(h);
        if (e == NULL) {
            pthread_cond_wait(&h->due_cv, &h->mu);
            continue;
        }
        if (e->due_ns <= lock__now_ns()) {
            /* Past the maximum hold time the watchdog lets the lease run out;
             * lock_is_held then answers LOST once it has, and the holder's commit is
             * refused. */
            if (lock__lease_capped(e->since_ns, lock__now_ns(), h->max_hold_ms)) {
                e->capped = true;
                continue;
            }
            break;
        }
        /* Woken early (stop, an earlier holding, spuriously) or not: look again, since
         * while we slept the holding may have been released and freed. */
        h->sleep_until_ns = e->due_ns;
        lock__cond_wait_until(&h->due_cv, &h->mu, e->due_ns);
        h->sleep_until_ns = INT64_MAX;
    }
    out->name = strdup(e->name);
    if (out->name == NULL) {
        /* Try this one again a little later rather than spin on it. */
        e->due_ns = lock__lease_retry_due(lock__now_ns(), e->lease_ms);
        rc = LOCK_ERR_NOMEM;
        goto out;
    }
    out->id = e->id;
    memcpy(out->owner, e->owner, sizeof(out->owner));
    out->renew = e->renew;
    out->token = e->token;
    out->lease_ms = h->watchdog_lease_ms;
    /* Not due again until the outcome is known (lock__holdings_renewed sets the next). */
    e->due_ns = INT64_MAX;
    rc = 1;
out:
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void lock__renewal_clear(lock__renewal *r)
{
    free(r->name);
    r->name = NULL;
}

bool lock__holdings_renewed(lock__holdings *h, uint64_t id, lock__renew_outcome outcome,
                            int64_t sent_ns)
{
    bool marked_lost = false;
    holding *e;

    pthread_mutex_lock(&h->mu);
    for (e = h->list; e != NULL && e->id != id; e = e->next)
        ;
    if (e == NULL)
        goto out; /* released while the renewal was on its way: nothing to record */
    switch (outcome) {
    case LOCK__RENEWED:
        e->lease_ms = h->watchdog_lease_ms; /* the lease in force now */
        e->expires_ns = lock__add_ns(sent_ns, lock__ms_to_ns(h->watchdog_lease_ms));
        e->due_ns = lock__lease_renewal_due(sent_ns, h->watchdog_lease_ms);
        break;
    case LOCK__GONE:
        marked_lost = !e->lost;
        e->lost = true;
        break;
    case LOCK__FAILED:
        /* Redis did not answer. The lease is still running in Redis (if Redis is up): try
         * again sooner than the regular interval, so that a blip is absorbed. Sooner by the
         * lease in force, not the watchdog's: a first lease (a grant, a new holding) is the
         * waiter liveness, and a retry on the 30 s schedule would come after it ran out. */
        e->due_ns = lock__lease_retry_due(lock__now_ns(), e->lease_ms);
        break;
    }
out:
    pthread_mutex_unlock(&h->mu);
    return marked_lost;
}

void lock__holdings_stop(lock__holdings *h)
{
    pthread_mutex_lock(&h->mu);
    h->stopped = true;
    pthread_cond_broadcast(&h->due_cv);
    pthread_mutex_unlock(&h->mu);
}
