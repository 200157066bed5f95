/*
 * zk_lock.c - ZooKeeper's protocol for the queue lock (zk_lock.h, lock/queue/backend.h): a
 * session kept alive by the client library, an ephemeral sequential node per waiter, a watch
 * on one node.
 *
 * The client library (libzookeeper_mt) runs two threads per handle: one does the network
 * (connects, pings, reconnects), one runs the watchers and the completions of requests. The
 * requests are its asynchronous calls, each awaited at most the request timeout (see
 * "requests" below), on a handle shared by every thread of the process.
 *
 * A session is one handle with a reference count: a thread that makes a request holds a
 * reference, so a handle is never closed under a call. A session found dead (expired, or
 * ended by this client) leaves the client and is closed by the keeper thread (keep_alive)
 * once its last request has returned: never by the watcher, which runs on the library's own
 * thread and must not close its handle.
 */
#include "lock/zookeeper/zk_lock.h"
#include "lock/clock.h"
#include "lock/error.h"
#include "lock/queue/backend.h"
#include "lock/lease.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* The synchronous calls exist only in the multi-threaded library, which says so by THREADED. */
#define THREADED
#include <zookeeper/zookeeper.h>

#define PATH_MAX_LEN 256
#define ROOT "/locks"

typedef struct zk_session {
    struct zk_session *next; /* in the client's list of retired sessions */
    struct zk_be *c;
    zhandle_t *zh;
    uint64_t id; /* this client's number for it: a holding names the session it was taken in */
    int refs;    /* threads using zh; the client's own use is not counted */
    struct zk_call *calls; /* requests sent whose completion has not run yet */
    bool connected;
    bool dead;               /* expired or ended: no request is made on it any more */
    int64_t pending_since;   /* monotonic ns: a look first found its connection attempt pending */
    int timeout_ms;          /* the timeout the server granted */
    int64_t confirmed_until; /* monotonic ns: the server surely keeps the session until then */
} zk_session;

/* A thread waiting for the deletion of its predecessor; on the waiter's stack. */
typedef struct waiter {
    struct waiter *next;
    const zk_session *s;
    char path[PATH_MAX_LEN];
    bool fired;
} waiter;

typedef struct zk_be {
    queue_lock *q; /* the queue lock over this backend: its keeper reaps retired sessions */
    char hosts[256];
    int session_ms;
    int timeout_ms;

    pthread_mutex_t mu; /* guards everything below and the sessions' fields but zh */
    pthread_cond_t cv;  /* a session event, a watched node changed, a retirement, stopping */
    zk_session *current;
    zk_session *retired;
    bool opening; /* a thread is creating the current session's handle */
    uint64_t next_session_id;
    waiter *waiters;
    bool stopping;
    int64_t confirm_at; /* monotonic ns: the keeper's next confirmation */
} zk_be;

/* ---- sessions ---------------------------------------------------------------------------- */

/* Takes the session out of use: its holdings are lost, the next acquire opens another, and
 * the keeper thread closes its handle once no request is in flight on it. Closing it
 * also makes the server delete its ephemeral nodes at once (if the server can be reached;
 * otherwise they go when the session expires there). Called with c->mu held. */
static void retire_locked(zk_session *s)
{
    zk_be *c = s->c;

    if (s->dead)
        return;
    s->dead = true;
    s->connected = false;
    if (c->current == s)
        c->current = NULL;
    s->next = c->retired;
    c->retired = s;
    pthread_cond_broadcast(&c->cv);
    queue_lock__wake(c->q); /* the keeper closes it */
}

/* The one watcher of every handle and every watch: session events and watched nodes. It
 * runs on the library's thread, so it only records and wakes. */
static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zk_session *s = ctx;
    zk_be *c = s->c;
    waiter *w;

    (void)zh;
    pthread_mutex_lock(&c->mu);
    if (type == ZOO_SESSION_EVENT) {
        if (state == ZOO_CONNECTED_STATE && !s->dead) {
            s->connected = true;
            s->timeout_ms = zoo_recv_timeout(zh);
        } else if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) {
            retire_locked(s);
        } else {
            s->connected = false; /* reconnecting: the session may still live */
        }
    } else if (path != NULL) {
        /* Deleted (or changed): wake only the waiter whose predecessor this is. */
        for (w = c->waiters; w != NULL; w = w->next)
            if (w->s == s && strcmp(w->path, path) == 0)
                w->fired = true;
    }
    pthread_cond_broadcast(&c->cv);
    queue_lock__wake(c->q); /* connected: confirm it; expired: close it */
    pthread_mutex_unlock(&c->mu);
}

/* Records that the server heard from session s at or after `sent` (a request sent then was
 * answered): it keeps the session at least a timeout from then. */
static void confirm(zk_be *c, zk_session *s, int64_t sent)
{
    int64_t until = lock__add_ns(sent, lock__ms_to_ns(s->timeout_ms));

    pthread_mutex_lock(&c->mu);
    if (!s->dead && until > s->confirmed_until)
        s->confirmed_until = until;
    pthread_mutex_unlock(&c->mu);
}

static void unref(zk_be *c, zk_session *s)
{
    pthread_mutex_lock(&c->mu);
    if (--s->refs == 0 && s->dead)
        queue_lock__wake(c->q); /* the keeper may close it now */
    pthread_mutex_unlock(&c->mu);
}

/* A library answer that says the session is over retires it. */
static void note_answer(zk_be *c, zk_session *s, int zrc)
{
    if (zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE) {
        pthread_mutex_lock(&c->mu);
        retire_locked(s);
        pthread_mutex_unlock(&c->mu);
    }
}

/*
 * Whether session s's handle is stuck in one connection attempt: the TCP connect in progress,
 * or the handshake sent and unanswered (ZOO_CONNECTING_STATE, ZOO_ASSOCIATING_STATE), for a
 * request timeout. The library gives an attempt two thirds of the session timeout (20 s with
 * the service's 30 s lease) before it tries again, and a server that accepts a connection and
 * never answers it holds the handle all that time: ZooKeeper does so with a connection made
 * as it starts listening, before it serves (measured: the first connection after a restart,
 * unanswered for 25 s, the next ones closed at once, then answered). A server that is down
 * refuses at once, and the library tries again every sixtieth of the timeout: that is no
 * stuck attempt, and its session, which may still live on the server, is kept.
 *
 * The library tells no event per attempt, so the state is looked at by every thread that
 * waits for the session, at each look: "since" is when a look first found an attempt
 * pending, and a look that finds none starts it again. Called with c->mu held.
 */
static bool stalled_locked(zk_be *c, zk_session *s)
{
    int state = zoo_state(s->zh);
    int64_t now = lock__now_ns();

    if (state != ZOO_CONNECTING_STATE && state != ZOO_ASSOCIATING_STATE) {
        s->pending_since = 0;
        return false;
    }
    if (s->pending_since == 0)
        s->pending_since = now;
    return now - s->pending_since >= lock__ms_to_ns(c->timeout_ms);
}

/* Opens a handle as the current session; the library connects it on its own thread. Called
 * with c->mu held and no thread opening; drops it meanwhile. QUEUE_LOCK_OK, or
 * QUEUE_LOCK_ERR_NOMEM or QUEUE_LOCK_ERR_SERVER with the error set. */
static int open_locked(zk_be *c)
{
    zk_session *s = calloc(1, sizeof(*s));
    zhandle_t *zh;

    if (s == NULL) {
        lock__error_set("cannot create a ZooKeeper handle for %s", c->hosts);
        return QUEUE_LOCK_ERR_NOMEM;
    }
    s->c = c;
    s->timeout_ms = c->session_ms;
    /* The opener's reference until zh is in place: the watcher, which may run before
     * zookeeper_init returns, could end the session, and the keeper must not close it
     * before it has its handle. */
    s->refs = 1;
    c->opening = true;
    pthread_mutex_unlock(&c->mu);
    zh = zookeeper_init(c->hosts, watcher, c->session_ms, NULL, s, 0);
    pthread_mutex_lock(&c->mu);
    c->opening = false;
    pthread_cond_broadcast(&c->cv);
    if (zh == NULL) {
        free(s); /* no handle: no watcher ran, nothing else knows s */
        lock__error_set("cannot create a ZooKeeper handle for %s", c->hosts);
        return QUEUE_LOCK_ERR_NOMEM;
    }
    s->zh = zh;
    s->refs--;
    if (s->dead) {
        queue_lock__wake(c->q); /* retired already: the keeper closes it */
        lock__error_set("the new ZooKeeper session for %s ended at once", c->hosts);
        return QUEUE_LOCK_ERR_SERVER;
    }
    s->id = ++c->next_session_id;
    c->current = s;
    return QUEUE_LOCK_OK;
}

/*
 * A connected session with a reference taken (unref() it), opening one if there is none.
 * Waits at most one request timeout for it to connect: the library connects on its own
 * thread, and a server that is down must cost a request that bound, not more. A handle not
 * connected yet stays, and keeps trying, for the next call; one stuck in an attempt
 * (stalled_locked) is given up: its session leaves the client as an expired one does (its
 * holdings lost, its nodes gone when the server expires it), the keeper closes its handle,
 * and a new one is opened, by this call if its time is not spent, else by the next.
 */
static int get_session(zk_be *c, zk_session **out)
{
    int64_t until = lock__deadline_ns(c->timeout_ms);
    zk_session *s;
    int rc;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        s = c->current;
        if (s != NULL && s->connected) {
            /* An attempt found pending before this connection is over: a later one is timed
             * from its own first look, not from the old attempt's. */
            s->pending_since = 0;
            s->refs++;
            pthread_mutex_unlock(&c->mu);
            *out = s;
            return QUEUE_LOCK_OK;
        }
        if (s != NULL && stalled_locked(c, s)) {
            retire_locked(s);
            continue;
        }
        if (s == NULL && !c->opening) {
            rc = open_locked(c);
            if (rc != QUEUE_LOCK_OK) {
                pthread_mutex_unlock(&c->mu);
                return rc;
            }
            continue;
        }
        if (lock__cond_wait_until(&c->cv, &c->mu, until) == ETIMEDOUT)
            break;
    }
    /* A last look: an attempt stuck past its bound is given up now, for the next call. */
    s = c->current;
    if (s != NULL && !s->connected && stalled_locked(c, s))
        retire_locked(s);
    pthread_mutex_unlock(&c->mu);
    lock__error_set("no connected ZooKeeper session within %d ms (%s)", c->timeout_ms, c->hosts);
    return QUEUE_LOCK_ERR_SERVER;
}

/* ---- requests, each bounded by the request timeout -------------------------------------- */

/*
 * The library's synchronous calls wait for their answer until the library itself gives up on
 * the connection: two thirds of the session timeout (20 s with the service's 30 s lease) when
 * the server hangs. So every request here is the library's asynchronous call, whose answer
 * (the completion, run on the library's thread) is awaited at most the request timeout. A
 * request whose answer comes later finds its caller gone: the call record is shared by the
 * two, with a reference each, and freed by whichever lets go last.
 */
typedef struct zk_call {
    struct zk_call *next; /* in its session's list while the completion is pending */
    zk_be *c;
    zk_session *s;
    int refs; /* the caller's and the completion's; under c->mu */
    bool done;
    int rc;
    char path[PATH_MAX_LEN]; /* create: the path the server gave the node */
    int64_t czxid;           /* create: the node's czxid */
    char **names;            /* get_children: a copy of the names */
    int count;
} zk_call;

/* A call record for one request on session s, listed as awaiting its completion. */
static zk_call *call_new(zk_session *s)
{
    zk_call *k = calloc(1, sizeof(*k));

    if (k != NULL) {
        k->c = s->c;
        k->s = s;
        k->refs = 2;
        pthread_mutex_lock(&s->c->mu);
        k->next = s->calls;
        s->calls = k;
        pthread_mutex_unlock(&s->c->mu);
    }
    return k;
}

/* Takes k off its session's list: its completion ran, or will never run. Under c->mu. */
static void call_unlist_locked(zk_call *k)
{
    zk_call **p;

    for (p = &k->s->calls; *p != NULL; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            return;
        }
}

static void call_free(zk_call *k)
{
    for (int i = 0; i < k->count; i++)
        free(k->names[i]);
    free(k->names);
    free(k);
}

/* Drops one reference; the last frees the record. */
static void call_unref(zk_call *k)
{
    zk_be *c = k->c;
    bool last;

    pthread_mutex_lock(&c->mu);
    last = --k->refs == 0;
    pthread_mutex_unlock(&c->mu);
    if (last)
        call_free(k);
}

/* The completion's end: records the answer, wakes the caller, lets go. */
static void call_finish(zk_call *k, int rc)
{
    zk_be *c = k->c;

    pthread_mutex_lock(&c->mu);
    k->rc = rc;
    k->done = true;
    call_unlist_locked(k);
    pthread_cond_broadcast(&c->cv); /* the caller */
    if (k->s->dead && k->s->calls == NULL)
        queue_lock__wake(c->q); /* the last answer of a retired session: the keeper closes it */
    pthread_mutex_unlock(&c->mu);
    call_unref(k);
}

/* The completions: data is the zk_call (the library passes it back as const). */
static void on_void(int rc, const void *data)
{
    call_finish((zk_call *)(uintptr_t)data, rc);
}

static void on_stat(int rc, const struct Stat *stat, const void *data)
{
    (void)stat;
    call_finish((zk_call *)(uintptr_t)data, rc);
}

static void on_create(int rc, const char *value, const struct Stat *stat, const void *data)
{
    zk_call *k = (zk_call *)(uintptr_t)data;

    if (rc == ZOK && value != NULL && stat != NULL) {
        snprintf(k->path, sizeof(k->path), "%s", value);
        k->czxid = stat->czxid;
    }
    call_finish(k, rc);
}

static void on_children(int rc, const struct String_vector *strings, const void *data)
{
    zk_call *k = (zk_call *)(uintptr_t)data;

    if (rc == ZOK && strings != NULL && strings->count > 0) {
        k->names = calloc((size_t)strings->count, sizeof(*k->names));
        if (k->names == NULL) {
            rc = ZSYSTEMERROR;
        } else {
            for (int i = 0; i < strings->count; i++) {
                k->names[i] = strdup(strings->data[i]);
                if (k->names[i] == NULL) {
                    rc = ZSYSTEMERROR;
                    break;
                }
                k->count = i + 1;
            }
        }
    }
    call_finish(k, rc);
}

/* Awaits the answer to a request sent (submit_rc: what the asynchronous call returned) for at
 * most the request timeout. Returns its code, or ZOPERATIONTIMEOUT when none came in time.
 * The caller reads k's results, then call_unref(k). */
static int call_wait(zk_be *c, zk_call *k, int submit_rc)
{
    int64_t until = lock__deadline_ns(c->timeout_ms);
    int rc;

    pthread_mutex_lock(&c->mu);
    if (submit_rc != ZOK) {
        call_unlist_locked(k);
        k->refs--; /* not sent: no completion will run */
        pthread_mutex_unlock(&c->mu);
        return submit_rc;
    }
    while (!k->done)
        if (lock__cond_wait_until(&c->cv, &c->mu, until) == ETIMEDOUT)
            break;
    rc = k->done ? k->rc : ZOPERATIONTIMEOUT;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Creates path with the given flags; the server's path and the czxid come back in k. */
static int req_create(zk_session *s, zk_call *k, const char *path, int flags)
{
    return call_wait(
        s->c, k, zoo_acreate2(s->zh, path, NULL, -1, &ZOO_OPEN_ACL_UNSAFE, flags, on_create, k));
}

static int req_children(zk_session *s, zk_call *k, const char *path)
{
    return call_wait(s->c, k, zoo_aget_children(s->zh, path, 0, on_children, k));
}

/* exists, with a watch (the one watcher, context s) when watch is true. */
static int req_exists(zk_session *s, zk_call *k, const char *path, bool watch)
{
    return call_wait(s->c, k,
                     watch ? zoo_awexists(s->zh, path, watcher, s, on_stat, k)
                           : zoo_aexists(s->zh, path, 0, on_stat, k));
}

static int req_create_persistent(zk_session *s, zk_call *k, const char *path)
{
    return req_create(s, k, path, ZOO_PERSISTENT);
}

static int req_create_container(zk_session *s, zk_call *k, const char *path)
{
    return req_create(s, k, path, ZOO_CONTAINER);
}

static int req_delete(zk_session *s, zk_call *k, const char *path)
{
    return call_wait(s->c, k, zoo_adelete(s->zh, path, -1, on_void, k));
}

/* One request on session s: a new call record, the request, the record let go. For the
 * requests whose results are the code alone. */
static int request(zk_session *s, int (*req)(zk_session *, zk_call *, const char *),
                   const char *path)
{
    zk_call *k = call_new(s);
    int rc;

    if (k == NULL)
        return ZSYSTEMERROR;
    rc = req(s, k, path);
    call_unref(k);
    return rc;
}

static int req_exists_plain(zk_session *s, zk_call *k, const char *path)
{
    return req_exists(s, k, path, false);
}

static int req_exists_watched(zk_session *s, zk_call *k, const char *path)
{
    return req_exists(s, k, path, true);
}

/*
 * Closes the retired sessions that no thread uses and that await no answer any more. Called
 * with c->mu held; drops it around zookeeper_close, which joins the library's threads.
 *
 * A request whose caller gave up still has its completion pending in the library. Closing
 * the handle then would free the library's record of it without running the completion (and
 * leak what both had allocated), so a session waits until every answer came, or until the
 * library itself fails them (it does, with a connection loss, once it gives up on a hung
 * server). With force (at destroy), it is closed all the same, and the call records the
 * library did not finish are freed here: its threads are gone by then.
 */
static void reap_locked(zk_be *c, bool force)
{
    zk_session **p = &c->retired;

    while (*p != NULL) {
        zk_session *s = *p;

        if (s->refs > 0 || (s->calls != NULL && !force)) {
            p = &s->next;
            continue;
        }
        *p = s->next;
        pthread_mutex_unlock(&c->mu);
        zookeeper_close(s->zh);
        pthread_mutex_lock(&c->mu);
        while (s->calls != NULL) {
            struct zk_call *k = s->calls;

            s->calls = k->next;
            if (--k->refs == 0)
                call_free(k);
        }
        free(s);
        p = &c->retired; /* the list may have changed meanwhile */
    }
}

/* ---- the line ------------------------------------------------------------------------ */

/* The sequence number the server appended to a node's name (its last ten digits). */
static int64_t sequence_of(const char *child)
{
    size_t n = strlen(child);

    return n >= 10 ? strtoll(child + n - 10, NULL, 10) : -1;
}

/* Creates the waiter's node: ephemeral (it goes with the session), sequential (its place in
 * the queue). The lock's parent is a container node, which the server deletes once it is
 * empty, so goods named by requests leave nothing behind; it is created on demand, and
 * again if the server reaped it between our create of it and of the child. */
static int zk_create(void *be, const queue_lock__session *sess, const char *name, char *path,
                     int64_t *czxid)
{
    zk_be *c = be;
    zk_session *s = sess->handle;
    char parent[PATH_MAX_LEN], prefix[PATH_MAX_LEN + 8];
    int zrc = ZOK;
    int64_t sent;

    snprintf(parent, sizeof(parent), ROOT "/%s", name);
    snprintf(prefix, sizeof(prefix), "%s/lock-", parent);
    for (int attempt = 0; attempt < 3; attempt++) {
        zk_call *k = call_new(s);

        if (k == NULL)
            return QUEUE_LOCK_ERR_NOMEM;
        sent = lock__now_ns();
        zrc = req_create(s, k, prefix, ZOO_EPHEMERAL_SEQUENTIAL);
        if (zrc == ZOK) {
            snprintf(path, QUEUE_LOCK__NODE_MAX, "%s", k->path);
            *czxid = k->czxid;
        }
        call_unref(k);
        if (zrc == ZOK) {
            confirm(c, s, sent);
            return QUEUE_LOCK_OK;
        }
        if (zrc != ZNONODE)
            break;
        zrc = request(s, req_create_persistent, ROOT);
        if (zrc != ZOK && zrc != ZNODEEXISTS)
            break;
        zrc = request(s, req_create_container, parent);
        if (zrc != ZOK && zrc != ZNODEEXISTS)
            break;
    }
    lock__error_set("create under %s: %s", parent, zerror(zrc));
    note_answer(c, s, zrc);
    if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT)
        return QUEUE_LOCK__UNCLEAR; /* the node may exist, unknown to us: the session ends */
    return QUEUE_LOCK_ERR_SERVER;
}

/* The predecessor of my node under the lock's parent: the child with the greatest smaller
 * sequence. pred is "" when there is none (the lock is mine). The watch needs no cursor: it
 * is set with an exists, which answers ZNONODE for a node deleted meanwhile. */
static int zk_predecessor(void *be, const queue_lock__session *sess, const char *name,
                          const char *node, int64_t token, char *pred, int64_t *cursor)
{
    zk_be *c = be;
    zk_session *s = sess->handle;
    zk_call *k = call_new(s);
    char parent[PATH_MAX_LEN];
    const size_t predlen = QUEUE_LOCK__NODE_MAX;
    int64_t best = -1, mine = sequence_of(node);
    int64_t sent = lock__now_ns();
    int zrc;

    (void)token;
    *cursor = 0;
    snprintf(parent, sizeof(parent), ROOT "/%s", name);
    if (k == NULL)
        return QUEUE_LOCK_ERR_NOMEM;
    zrc = req_children(s, k, parent);
    if (zrc != ZOK) {
        call_unref(k);
        lock__error_set("children of %s: %s", parent, zerror(zrc));
        note_answer(c, s, zrc);
        return QUEUE_LOCK_ERR_SERVER;
    }
    confirm(c, s, sent);
    pred[0] = '\0';
    for (int i = 0; i < k->count; i++) {
        int64_t seq = sequence_of(k->names[i]);

        if (seq >= 0 && seq < mine && seq > best) {
            int n = snprintf(pred, predlen, "%s/%s", parent, k->names[i]);

            if (n > 0 && (size_t)n < predlen)
                best = seq; /* a name too long is not ours: ours are lock-<10 digits> */
            else
                pred[0] = '\0';
        }
    }
    call_unref(k);
    return QUEUE_LOCK_OK;
}

/* Waits until pred is deleted, the session dies or the deadline passes. QUEUE_LOCK_OK: look
 * again (deleted, or the deadline passed: the caller's check tells); QUEUE_LOCK_ERR_SERVER. */
static int zk_watch_deletion(void *be, const queue_lock__session *sess, const char *pred,
                             int64_t cursor, int64_t until)
{
    zk_be *c = be;
    zk_session *s = sess->handle;
    waiter w = {NULL, s, "", false};
    waiter **p;
    int zrc;
    bool dead;

    (void)cursor;
    snprintf(w.path, sizeof(w.path), "%s", pred);
    /* Registered before the watch is set, so a deletion that comes at once is not missed. */
    pthread_mutex_lock(&c->mu);
    w.next = c->waiters;
    c->waiters = &w;
    pthread_mutex_unlock(&c->mu);

    zrc = request(s, req_exists_watched, pred);
    pthread_mutex_lock(&c->mu);
    if (zrc == ZOK)
        while (!w.fired && !s->dead && !c->stopping)
            if (lock__cond_wait_until(&c->cv, &c->mu, until) == ETIMEDOUT)
                break;
    for (p = &c->waiters; *p != &w; p = &(*p)->next)
        ;
    *p = w.next;
    dead = s->dead;
    pthread_mutex_unlock(&c->mu);

    if (zrc == ZNONODE)
        return QUEUE_LOCK_OK; /* gone already */
    if (zrc != ZOK) {
        lock__error_set("watch on %s: %s", pred, zerror(zrc));
        note_answer(c, s, zrc);
        return QUEUE_LOCK_ERR_SERVER;
    }
    if (dead) {
        lock__error_set("the ZooKeeper session ended while waiting for %s", pred);
        return QUEUE_LOCK_ERR_SERVER;
    }
    return QUEUE_LOCK_OK;
}

/* Deletes a node of the session numbered `session`. A node of a session that is no longer
 * the current one went with it (or goes when the keeper closes it): nothing to do. */
static int zk_remove(void *be, uint64_t session, const char *path)
{
    zk_be *c = be;
    zk_session *s = NULL;
    int zrc;

    pthread_mutex_lock(&c->mu);
    if (c->current != NULL && c->current->id == session && !c->current->dead) {
        s = c->current;
        s->refs++;
    }
    pthread_mutex_unlock(&c->mu);
    if (s == NULL)
        return QUEUE_LOCK_OK;
    zrc = request(s, req_delete, path);
    if (zrc != ZOK && zrc != ZNONODE) {
        lock__error_set("delete %s: %s", path, zerror(zrc));
        note_answer(c, s, zrc);
    }
    unref(c, s);
    return zrc == ZOK || zrc == ZNONODE ? QUEUE_LOCK_OK : QUEUE_LOCK_ERR_SERVER;
}

/* ---- the session, as the recipe sees it ------------------------------------------------ */

static int zk_get_session(void *be, queue_lock__session *sess)
{
    zk_session *s;
    int rc = get_session(be, &s);

    if (rc == QUEUE_LOCK_OK) {
        sess->id = s->id;
        sess->handle = s;
    }
    return rc;
}

static void zk_put_session(void *be, queue_lock__session *sess)
{
    unref(be, sess->handle);
}

/* Ends the session on purpose: a node of it whose fate is unknown would otherwise block its
 * lock for as long as the session lives. Closing it (the keeper does) deletes its nodes. */
static void zk_end(void *be, uint64_t session)
{
    zk_be *c = be;

    pthread_mutex_lock(&c->mu);
    if (c->current != NULL && c->current->id == session)
        retire_locked(c->current);
    pthread_mutex_unlock(&c->mu);
}

/* Whether a holding of session `session` can still be vouched for: it is the current
 * session, connected, and the server heard from it less than a session timeout ago. */
static bool zk_alive(void *be, uint64_t session)
{
    zk_be *c = be;
    const zk_session *s;
    bool alive;

    pthread_mutex_lock(&c->mu);
    s = c->current;
    alive = s != NULL && s->id == session && s->connected && lock__now_ns() < s->confirmed_until;
    pthread_mutex_unlock(&c->mu);
    return alive;
}

/* The keeper's round: closes the retired sessions it can, and every third of the session
 * timeout (lock/watchdog.h) one cheap request on the session (exists "/") moves
 * confirmed_until on; between two, the library's own pings keep the session alive. */
static int64_t zk_keep_alive(void *be)
{
    zk_be *c = be;
    zk_session *s;
    int64_t now, sent, period;
    int zrc;

    pthread_mutex_lock(&c->mu);
    reap_locked(c, false);
    s = c->current;
    period = lock__lease_period_ns(s != NULL ? s->timeout_ms : c->session_ms);
    now = lock__now_ns();
    if (c->stopping || s == NULL || !s->connected || now < c->confirm_at) {
        int64_t next = s != NULL && s->connected && c->confirm_at > now ? c->confirm_at
                                                                        : lock__add_ns(now, period);

        pthread_mutex_unlock(&c->mu);
        return next;
    }
    s->refs++;
    sent = now;
    c->confirm_at = lock__add_ns(sent, period);
    pthread_mutex_unlock(&c->mu);
    zrc = request(s, req_exists_plain, "/");
    if (zrc == ZOK)
        confirm(c, s, sent);
    note_answer(c, s, zrc);
    unref(c, s);
    return lock__add_ns(sent, period);
}

/* ---- client ---------------------------------------------------------------------------- */

/* Closes the session (the server deletes its nodes at once) and frees the backend. */
static void zk_destroy(void *be)
{
    zk_be *c = be;

    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->cv);
    while (c->opening) /* a thread still opening a handle: let it finish */
        pthread_cond_wait(&c->cv, &c->mu);
    if (c->current != NULL)
        retire_locked(c->current);
    /* No thread uses a session any more (the caller has stopped its threads); answers still
     * due are awaited one request timeout, then the sessions are closed regardless. */
    {
        int64_t until = lock__deadline_ns(c->timeout_ms);
        bool waiting = true;

        while (waiting) {
            zk_session *r;

            waiting = false;
            for (r = c->retired; r != NULL; r = r->next)
                waiting = waiting || r->calls != NULL;
            if (waiting && lock__cond_wait_until(&c->cv, &c->mu, until) == ETIMEDOUT)
                break;
        }
    }
    reap_locked(c, true);
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* The backend's open: the client's state, with no session yet (the first acquire opens it). */
static void *zk_open(queue_lock *q, const char *servers, const queue_lock_options *opts)
{
    zk_be *c = calloc(1, sizeof(*c));

    if (c == NULL || lock__cond_init(&c->cv) != 0) {
        free(c);
        return NULL;
    }
    /* The library logs to stderr by default; this module reports through its codes. */
    zoo_set_debug_level(0);
    pthread_mutex_init(&c->mu, NULL);
    c->q = q;
    snprintf(c->hosts, sizeof(c->hosts), "%s", servers);
    c->timeout_ms = opts->request_timeout_ms;
    c->session_ms = opts->lease_ms > INT32_MAX ? INT32_MAX : (int)opts->lease_ms; /* an int */
    return c;
}

static const queue_lock__backend zk_backend =
    QUEUE_LOCK__BACKEND(zk, "ZooKeeper", "127.0.0.1:2181");

int zk_lock_client_create(const queue_lock_options *opts, zk_lock_client **out)
{
    return queue_lock__open(&zk_backend, opts, out);
}

int zk_lock_session(zk_lock_client *q, int64_t *id, char passwd[16])
{
    zk_be *c = queue_lock__backend_of(q, &zk_backend);
    zk_session *s;
    const clientid_t *cid;
    int rc;

    if (c == NULL)
        return QUEUE_LOCK_ERR_INVALID;
    if (get_session(c, &s) != QUEUE_LOCK_OK)
        return QUEUE_LOCK_ERR_NOT_HELD;
    cid = zoo_client_id(s->zh);
    if (cid != NULL && cid->client_id != 0) {
        *id = cid->client_id;
        memcpy(passwd, cid->passwd, 16);
        rc = QUEUE_LOCK_OK;
    } else {
        rc = QUEUE_LOCK_ERR_NOT_HELD;
    }
    unref(c, s);
    return rc;
}
