/*
 * queue_lock.c - the queue-lock recipe of queue_lock.h over a backend of backend.h.
 *
 * The holdings are a list under one mutex, as long as the number of owners holding locks at
 * once. The mutex is never held across a request: a request may take a whole request
 * timeout (the service hung), and is_held and the other owners must not queue behind it.
 * The lock order is the recipe's mutex, then the backend's (alive() is called under it),
 * then the keeper's (queue_lock__wake), which is never held while another is taken.
 */
#include "lock/queue/queue_lock.h"
#include "lock/clock.h"
#include "lock/error.h"
#include "lock/owner.h"
#include "lock/queue/backend.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One owner's holding of one lock. */
typedef struct holding {
    struct holding *next;
    char name[QUEUE_LOCK_NAME_MAX + 1];
    char owner[QUEUE_LOCK_OWNER_MAX];
    char node[QUEUE_LOCK__NODE_MAX];
    int count;
    int64_t token;
    uint64_t session; /* the lease it was taken under */
} holding;

struct queue_lock {
    const queue_lock__backend *ops;
    void *be;

    pthread_mutex_t mu; /* guards holdings */
    holding *holdings;

    pthread_mutex_t keeper_mu; /* guards the three below; a leaf: nothing is taken under it */
    pthread_cond_t keeper_cv;
    bool woken;
    bool stopping;
    pthread_t keeper;
    bool keeper_started;
};

const char *queue_lock_last_error(void)
{
    return lock__error_text();
}

const char *queue_lock_strerror(int code)
{
    switch (code) {
    case QUEUE_LOCK_OK:
        return "ok";
    case QUEUE_LOCK_ERR_TIMEOUT:
        return "lock held by another owner for the whole wait";
    case QUEUE_LOCK_ERR_SERVER:
        return "lock service unreachable, timed out or answered an error";
    case QUEUE_LOCK_ERR_NOT_HELD:
        return "lock not held by the caller";
    case QUEUE_LOCK_ERR_INVALID:
        return "invalid argument";
    case QUEUE_LOCK_ERR_NOMEM:
        return "out of memory";
    case QUEUE_LOCK_ERR_LOST:
        return "the lease or session of the holding is gone";
    default:
        return "unknown error";
    }
}

void queue_lock_thread_owner(char out[QUEUE_LOCK_OWNER_MAX])
{
    snprintf(out, QUEUE_LOCK_OWNER_MAX, "thread-%" PRIu64, lock__thread_number());
}

void queue_lock_options_init(queue_lock_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->lease_ms = 10000;
    opts->request_timeout_ms = 1000;
}

/* ---- the keeper thread --------------------------------------------------------------- */

static void *keeper_main(void *arg)
{
    queue_lock *q = arg;

    pthread_mutex_lock(&q->keeper_mu);
    while (!q->stopping) {
        int64_t next;

        q->woken = false;
        pthread_mutex_unlock(&q->keeper_mu);
        next = q->ops->keep_alive(q->be);
        pthread_mutex_lock(&q->keeper_mu);
        while (!q->stopping && !q->woken)
            if (lock__cond_wait_until(&q->keeper_cv, &q->keeper_mu, next) == ETIMEDOUT)
                break;
    }
    pthread_mutex_unlock(&q->keeper_mu);
    return NULL;
}

void queue_lock__wake(queue_lock *q)
{
    pthread_mutex_lock(&q->keeper_mu);
    q->woken = true;
    pthread_cond_signal(&q->keeper_cv);
    pthread_mutex_unlock(&q->keeper_mu);
}

/* ---- client ---------------------------------------------------------------------------- */

int queue_lock__open(const queue_lock__backend *ops, const queue_lock_options *opts,
                     queue_lock **out)
{
    const char *servers;
    queue_lock *q;

    if (opts == NULL || out == NULL || opts->lease_ms <= 0 || opts->request_timeout_ms <= 0)
        return QUEUE_LOCK_ERR_INVALID;
    servers = opts->servers != NULL ? opts->servers : ops->default_servers;
    if (servers[0] == '\0' || strlen(servers) >= 256)
        return QUEUE_LOCK_ERR_INVALID;
    q = calloc(1, sizeof(*q));
    if (q == NULL || lock__cond_init(&q->keeper_cv) != 0) {
        free(q);
        return QUEUE_LOCK_ERR_NOMEM;
    }
    q->ops = ops;
    pthread_mutex_init(&q->mu, NULL);
    pthread_mutex_init(&q->keeper_mu, NULL);
    q->be = ops->open(q, servers, opts);
    if (q->be == NULL || pthread_create(&q->keeper, NULL, keeper_main, q) != 0) {
        queue_lock_destroy(q);
        return QUEUE_LOCK_ERR_NOMEM;
    }
    q->keeper_started = true;
    *out = q;
    return QUEUE_LOCK_OK;
}

void *queue_lock__backend_of(queue_lock *q, const queue_lock__backend *ops)
{
    return q != NULL && q->ops == ops ? q->be : NULL;
}

void queue_lock_destroy(queue_lock *q)
{
    holding *h, *next;

    if (q == NULL)
        return;
    if (q->keeper_started) {
        pthread_mutex_lock(&q->keeper_mu);
        q->stopping = true;
        pthread_cond_signal(&q->keeper_cv);
        pthread_mutex_unlock(&q->keeper_mu);
        pthread_join(q->keeper, NULL);
    }
    if (q->be != NULL)
        q->ops->destroy(q->be);
    for (h = q->holdings; h != NULL; h = next) {
        next = h->next;
        free(h);
    }
    pthread_cond_destroy(&q->keeper_cv);
    pthread_mutex_destroy(&q->keeper_mu);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

/* ---- the recipe ------------------------------------------------------------------------ */

/* The owner's holding of name, or NULL; *link (if asked) points at it. Under q->mu. */
static holding *find_locked(queue_lock *q, const char *name, const char *owner, holding ***link)
{
    holding **p;

    for (p = &q->holdings; *p != NULL; p = &(*p)->next)
        if (strcmp((*p)->owner, owner) == 0 && strcmp((*p)->name, name) == 0) {
            if (link != NULL)
                *link = p;
            return *p;
        }
    return NULL;
}

/* A write under `session` got an unclear answer: the lease is ended so that whatever the
 * write left goes with it (queue_lock.h). The error text keeps the write's, and says so. */
static void end_unclear(queue_lock *q, uint64_t session)
{
    char why[256];

    snprintf(why, sizeof(why), "%s", lock__error_text());
    q->ops->end(q->be, session);
    lock__error_set("%s (unclear answer: the %s lease was given up)", why, q->ops->service);
}

static bool valid(const char *name, const char *owner)
{
    size_t n = name != NULL ? strlen(name) : 0, o = owner != NULL ? strlen(owner) : 0;

    return n > 0 && n <= QUEUE_LOCK_NAME_MAX && strchr(name, '/') == NULL && o > 0 &&
           o < QUEUE_LOCK_OWNER_MAX;
}

/* Creates the waiter's node under a live lease: once more on a new lease if the service
 * had already dropped the one we had (nothing was written then). On success s is the lease
 * the node was made under (put_session it). */
static int join_line(queue_lock *q, const char *name, queue_lock__session *s, char *node,
                     int64_t *token)
{
    int rc;

    for (int attempt = 0;; attempt++) {
        rc = q->ops->get_session(q->be, s);
        if (rc != QUEUE_LOCK_OK)
            return rc;
        rc = q->ops->create(q->be, s, name, node, token);
        if (rc == QUEUE_LOCK_OK)
            return rc;
        if (rc == QUEUE_LOCK__UNCLEAR)
            end_unclear(q, s->id);
        q->ops->put_session(q->be, s);
        if (rc == QUEUE_LOCK__STALE && attempt == 0)
            continue;
        return rc == QUEUE_LOCK__UNCLEAR || rc == QUEUE_LOCK__STALE ? QUEUE_LOCK_ERR_SERVER : rc;
    }
}

/* Reentry: no round trip, the same token. A holding whose lease is gone is not reentered:
 * the owner must release it (and learns it is lost from is_held). QUEUE_LOCK_OK when
 * reentered, QUEUE_LOCK_ERR_LOST for a lost one, 1 when owner holds no such lock. */
static int reenter(queue_lock *q, const char *name, const char *owner, int64_t *token)
{
    holding *h;

    pthread_mutex_lock(&q->mu);
    h = find_locked(q, name, owner, NULL);
    if (h != NULL && q->ops->alive(q->be, h->session)) {
        h->count++;
        if (token != NULL)
            *token = h->token;
        pthread_mutex_unlock(&q->mu);
        return QUEUE_LOCK_OK;
    }
    pthread_mutex_unlock(&q->mu);
    if (h != NULL) {
        lock__error_set("%s: held under a lost %s lease; release it first", name, q->ops->service);
        return QUEUE_LOCK_ERR_LOST;
    }
    return 1;
}

/* Waits in line until node (order number mine) is first: QUEUE_LOCK_OK, or the failure's
 * code (QUEUE_LOCK_ERR_TIMEOUT at the deadline). */
static int wait_first(queue_lock *q, queue_lock__session *s, const char *name, const char *node,
                      int64_t mine, int64_t deadline)
{
    char pred[QUEUE_LOCK__NODE_MAX];
    int64_t cursor = 0;
    int rc;

    for (;;) {
        rc = q->ops->predecessor(q->be, s, name, node, mine, pred, &cursor);
        if (rc != QUEUE_LOCK_OK || pred[0] == '\0')
            return rc; /* pred empty: first in line, held */
        if (lock__now_ns() >= deadline)
            return QUEUE_LOCK_ERR_TIMEOUT;
        rc = q->ops->watch_deletion(q->be, s, pred, cursor, deadline);
        if (rc != QUEUE_LOCK_OK)
            return rc;
    }
}

/* Records the holding of name by owner (node, token mine, under session `session`):
 * QUEUE_LOCK_OK, or QUEUE_LOCK_ERR_NOMEM. */
static int keep_holding(queue_lock *q, const char *name, const char *owner, const char *node,
                        int64_t mine, uint64_t session)
{
    holding *h = calloc(1, sizeof(*h));

    if (h == NULL)
        return QUEUE_LOCK_ERR_NOMEM;
    snprintf(h->name, sizeof(h->name), "%s", name);
    snprintf(h->owner, sizeof(h->owner), "%s", owner);
    snprintf(h->node, sizeof(h->node), "%s", node);
    h->count = 1;
    h->token = mine;
    h->session = session;
    pthread_mutex_lock(&q->mu);
    h->next = q->holdings;
    q->holdings = h;
    pthread_mutex_unlock(&q->mu);
    return QUEUE_LOCK_OK;
}

int queue_lock_acquire(queue_lock *q, const char *name, const char *owner, int64_t wait_ms,
                       int64_t *token)
{
    char node[QUEUE_LOCK__NODE_MAX];
    queue_lock__session s;
    int64_t deadline, mine = 0;
    int rc;

    lock__error_clear();
    if (q == NULL || !valid(name, owner) || wait_ms < 0)
        return QUEUE_LOCK_ERR_INVALID;
    deadline = lock__deadline_ns(wait_ms);
    rc = reenter(q, name, owner, token);
    if (rc != 1)
        return rc;

    rc = join_line(q, name, &s, node, &mine);
    if (rc != QUEUE_LOCK_OK)
        return rc;
    rc = wait_first(q, &s, name, node, mine, deadline);
    if (rc == QUEUE_LOCK_OK)
        rc = keep_holding(q, name, owner, node, mine, s.id);
    if (rc == QUEUE_LOCK_OK) {
        q->ops->put_session(q->be, &s);
        if (token != NULL)
            *token = mine;
        return QUEUE_LOCK_OK;
    }

    /* Leave the line; if even that gets no clear answer, the node goes with the lease. The
     * caller learns why it gave up, not how the delete went. */
    {
        char why[256];

        snprintf(why, sizeof(why), "%s", lock__error_text());
        if (q->ops->remove(q->be, s.id, node) != QUEUE_LOCK_OK)
            end_unclear(q, s.id);
        lock__error_set("%s", why);
    }
    q->ops->put_session(q->be, &s);
    return rc;
}

int queue_lock_release(queue_lock *q, const char *name, const char *owner)
{
    holding *h, **link = NULL;
    int rc;

    lock__error_clear();
    if (q == NULL || name == NULL || owner == NULL)
        return QUEUE_LOCK_ERR_INVALID;
    pthread_mutex_lock(&q->mu);
    h = find_locked(q, name, owner, &link);
    if (h == NULL) {
        pthread_mutex_unlock(&q->mu);
        return QUEUE_LOCK_ERR_NOT_HELD;
    }
    if (--h->count > 0) {
        pthread_mutex_unlock(&q->mu);
        return QUEUE_LOCK_OK;
    }
    *link = h->next;
    pthread_mutex_unlock(&q->mu);
    rc = q->ops->remove(q->be, h->session, h->node);
    if (rc != QUEUE_LOCK_OK)
        end_unclear(q, h->session); /* the node may still be there: it goes with the lease */
    free(h);
    return rc;
}

int queue_lock_is_held(queue_lock *q, const char *name, const char *owner)
{
    holding *h;
    int rc;

    if (q == NULL || name == NULL || owner == NULL)
        return QUEUE_LOCK_ERR_INVALID;
    pthread_mutex_lock(&q->mu);
    h = find_locked(q, name, owner, NULL);
    if (h == NULL)
        rc = QUEUE_LOCK_ERR_NOT_HELD;
    else if (!q->ops->alive(q->be, h->session))
        rc = QUEUE_LOCK_ERR_LOST;
    else
        rc = QUEUE_LOCK_OK;
    pthread_mutex_unlock(&q->mu);
    return rc;
}
