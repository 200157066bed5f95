/*
 * zk_lock.c - the ZooKeeper lock of zk_lock.h: a session kept alive by the client library,
 * an ephemeral sequential node per waiter, a watch on the predecessor only.
 *
 * The client library (libzookeeper_mt) runs two threads per handle: one does the network
 * (connects, pings, reconnects), one runs the watchers and the completions of requests. The
 * requests are its asynchronous calls, each awaited at most the request timeout (see
 * "requests" below), on a handle shared by every thread of the process.
 *
 * A session is one handle with a reference count: a thread that makes a request holds a
 * reference, so a handle is never closed under a call. A session found dead (expired, or
 * ended by this client) leaves the client and is closed by the confirming thread once its
 * last request has returned: never by the watcher, which runs on the library's own thread
 * and must not close its handle.
 */
#include "lock/zookeeper/zk_lock.h"
#include "lock/error.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* The synchronous calls exist only in the multi-threaded library, which says so by THREADED. */
#define THREADED
#include <zookeeper/zookeeper.h>

#define NAME_MAX_LEN 200
#define PATH_MAX_LEN 256
#define ROOT "/locks"

const char *zk_lock_last_error(void)
{
    return lock__error_text();
}

const char *zk_lock_strerror(int code)
{
    switch (code) {
    case ZK_LOCK_OK:
        return "ok";
    case ZK_LOCK_ERR_TIMEOUT:
        return "lock held by another owner for the whole wait";
    case ZK_LOCK_ERR_SERVER:
        return "ZooKeeper unreachable, timed out or answered an error";
    case ZK_LOCK_ERR_NOT_HELD:
        return "lock not held by the caller";
    case ZK_LOCK_ERR_INVALID:
        return "invalid argument";
    case ZK_LOCK_ERR_NOMEM:
        return "out of memory";
    case ZK_LOCK_ERR_LOST:
        return "the session of the holding is gone";
    default:
        return "unknown error";
    }
}

typedef struct zk_session {
    struct zk_session *next; /* in the client's list of retired sessions */
    zk_lock_client *c;
    zhandle_t *zh;
    uint64_t id; /* this client's number for it: a holding names the session it was taken in */
    int refs;    /* threads using zh; the client's own use is not counted */
    struct zk_call *calls; /* requests sent whose completion has not run yet */
    bool connected;
    bool dead;               /* expired or ended: no request is made on it any more */
    int timeout_ms;          /* the timeout the server granted */
    int64_t confirmed_until; /* monotonic ms: the server surely keeps the session until then */
} zk_session;

/* One thread's holding of one lock. */
typedef struct holding {
    struct holding *next;
    char name[NAME_MAX_LEN + 1];
    char path[PATH_MAX_LEN];
    pthread_t thread;
    int count;
    int64_t token;
    uint64_t session; /* zk_session.id it was taken in */
} holding;

/* A thread waiting for the deletion of its predecessor; on the waiter's stack. */
typedef struct waiter {
    struct waiter *next;
    const zk_session *s;
    char path[PATH_MAX_LEN];
    bool fired;
} waiter;

struct zk_lock_client {
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
    holding *holdings;
    bool stopping;
    pthread_t confirmer;
    bool confirmer_started;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The monotonic clock's time at ms, for pthread_cond_timedwait on c->cv. */
static struct timespec monotonic_at(int64_t at_ms)
{
    struct timespec ts;

    ts.tv_sec = at_ms / 1000;
    ts.tv_nsec = (at_ms % 1000) * 1000000L;
    return ts;
}

/* ---- sessions ---------------------------------------------------------------------------- */

/* Takes the session out of use: its holdings are lost, the next acquire opens another, and
 * the confirming thread closes its handle once no request is in flight on it. Closing it
 * also makes the server delete its ephemeral nodes at once (if the server can be reached;
 * otherwise they go when the session expires there). Called with c->mu held. */
static void retire_locked(zk_session *s)
{
    zk_lock_client *c = s->c;

    if (s->dead)
        return;
    s->dead = true;
    s->connected = false;
    if (c->current == s)
        c->current = NULL;
    s->next = c->retired;
    c->retired = s;
    pthread_cond_broadcast(&c->cv);
}

/* The one watcher of every handle and every watch: session events and watched nodes. It
 * runs on the library's thread, so it only records and wakes. */
static void watcher(zhandle_t *zh, int type, int state, const char *path, void *ctx)
{
    zk_session *s = ctx;
    zk_lock_client *c = s->c;
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
    pthread_mutex_unlock(&c->mu);
}

/* Records that the server heard from session s at or after `sent` (a request sent then was
 * answered): it keeps the session at least a timeout from then. */
static void confirm(zk_lock_client *c, zk_session *s, int64_t sent)
{
    pthread_mutex_lock(&c->mu);
    if (!s->dead && sent + s->timeout_ms > s->confirmed_until)
        s->confirmed_until = sent + s->timeout_ms;
    pthread_mutex_unlock(&c->mu);
}

static void unref(zk_lock_client *c, zk_session *s)
{
    pthread_mutex_lock(&c->mu);
    if (--s->refs == 0 && s->dead)
        pthread_cond_broadcast(&c->cv); /* the confirming thread may close it now */
    pthread_mutex_unlock(&c->mu);
}

/* A library answer that says the session is over retires it. */
static void note_answer(zk_lock_client *c, zk_session *s, int zrc)
{
    if (zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE) {
        pthread_mutex_lock(&c->mu);
        retire_locked(s);
        pthread_mutex_unlock(&c->mu);
    }
}

/* Ends the session on purpose: a node of it whose fate is unknown would otherwise block its
 * lock for as long as the session lives. */
static void end_session(zk_lock_client *c, zk_session *s)
{
    pthread_mutex_lock(&c->mu);
    retire_locked(s);
    pthread_mutex_unlock(&c->mu);
}

/*
 * A connected session with a reference taken (unref() it), opening one if there is none.
 * Waits at most one request timeout for it to connect: the library connects on its own
 * thread, and a server that is down must cost a request that bound, not more.
 */
static int get_session(zk_lock_client *c, zk_session **out)
{
    int64_t deadline = now_ms() + c->timeout_ms;
    struct timespec until = monotonic_at(deadline);
    zk_session *s;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        s = c->current;
        if (s != NULL && s->connected) {
            s->refs++;
            pthread_mutex_unlock(&c->mu);
            *out = s;
            return ZK_LOCK_OK;
        }
        if (s == NULL && !c->opening)
            break; /* this thread opens one */
        if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&c->mu);
            lock__error_set("no connected ZooKeeper session within %d ms (%s)", c->timeout_ms,
                            c->hosts);
            return ZK_LOCK_ERR_SERVER;
        }
    }
    c->opening = true;
    pthread_mutex_unlock(&c->mu);

    s = calloc(1, sizeof(*s));
    if (s != NULL) {
        s->c = c;
        s->timeout_ms = c->session_ms;
        /* The watcher may run before zookeeper_init returns: s is complete but for zh,
         * which the watcher does not read. */
        s->zh = zookeeper_init(c->hosts, watcher, c->session_ms, NULL, s, 0);
    }
    pthread_mutex_lock(&c->mu);
    c->opening = false;
    if (s == NULL || s->zh == NULL) {
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        free(s);
        lock__error_set("cannot create a ZooKeeper handle for %s", c->hosts);
        return ZK_LOCK_ERR_NOMEM;
    }
    s->id = ++c->next_session_id;
    c->current = s;
    pthread_cond_broadcast(&c->cv);
    for (;;) {
        if (s->connected && !s->dead) {
            s->refs++;
            pthread_mutex_unlock(&c->mu);
            *out = s;
            return ZK_LOCK_OK;
        }
        if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT || s->dead)
            break;
    }
    pthread_mutex_unlock(&c->mu);
    /* Not connected yet: the handle stays, and keeps trying, for the next call. */
    lock__error_set("no connected ZooKeeper session within %d ms (%s)", c->timeout_ms, c->hosts);
    return ZK_LOCK_ERR_SERVER;
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
    zk_lock_client *c;
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
    zk_lock_client *c = k->c;
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
    zk_lock_client *c = k->c;

    pthread_mutex_lock(&c->mu);
    k->rc = rc;
    k->done = true;
    call_unlist_locked(k);
    pthread_cond_broadcast(&c->cv); /* the caller, and the reaper when it was the last */
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
static int call_wait(zk_lock_client *c, zk_call *k, int submit_rc)
{
    struct timespec until = monotonic_at(now_ms() + c->timeout_ms);
    int rc;

    pthread_mutex_lock(&c->mu);
    if (submit_rc != ZOK) {
        call_unlist_locked(k);
        k->refs--; /* not sent: no completion will run */
        pthread_mutex_unlock(&c->mu);
        return submit_rc;
    }
    while (!k->done)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT)
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
static void reap_locked(zk_lock_client *c, bool force)
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

/* The confirming thread: every third of the session timeout, one cheap request on the
 * session (exists "/") moves confirmed_until on; between two, the library's own pings keep
 * the session alive. It also closes retired sessions. */
static void *confirmer_main(void *arg)
{
    zk_lock_client *c = arg;
    int64_t next = 0; /* when the next confirmation is due: wake-ups come more often */

    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        zk_session *s = c->current;
        int period = (s != NULL ? s->timeout_ms : c->session_ms) / 3;
        struct timespec until = monotonic_at(now_ms() + (period > 0 ? period : 1));
        int64_t sent;
        int zrc;

        reap_locked(c, false);
        pthread_cond_timedwait(&c->cv, &c->mu, &until);
        reap_locked(c, false);
        s = c->current;
        if (c->stopping || s == NULL || !s->connected || now_ms() < next)
            continue;
        s->refs++;
        pthread_mutex_unlock(&c->mu);
        sent = now_ms();
        next = sent + period;
        zrc = request(s, req_exists_plain, "/");
        if (zrc == ZOK)
            confirm(c, s, sent);
        note_answer(c, s, zrc);
        unref(c, s);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- client ---------------------------------------------------------------------------- */

void zk_lock_options_init(zk_lock_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->hosts = "127.0.0.1:2181";
    opts->session_ms = 10000;
    opts->request_timeout_ms = 1000;
}

int zk_lock_client_create(const zk_lock_options *opts, zk_lock_client **out)
{
    zk_lock_client *c;
    pthread_condattr_t cattr;

    if (opts == NULL || out == NULL || opts->hosts == NULL || opts->hosts[0] == '\0' ||
        strlen(opts->hosts) >= sizeof(c->hosts) || opts->session_ms <= 0 ||
        opts->request_timeout_ms <= 0)
        return ZK_LOCK_ERR_INVALID;
    /* The library logs to stderr by default; this module reports through its codes. */
    zoo_set_debug_level(0);
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ZK_LOCK_ERR_NOMEM;
    snprintf(c->hosts, sizeof(c->hosts), "%s", opts->hosts);
    c->session_ms = opts->session_ms;
    c->timeout_ms = opts->request_timeout_ms;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC); /* timed waits: monotonic_at() */
    pthread_cond_init(&c->cv, &cattr);
    pthread_condattr_destroy(&cattr);
    if (pthread_create(&c->confirmer, NULL, confirmer_main, c) != 0) {
        zk_lock_client_destroy(c);
        return ZK_LOCK_ERR_NOMEM;
    }
    c->confirmer_started = true;
    *out = c;
    return ZK_LOCK_OK;
}

void zk_lock_client_destroy(zk_lock_client *c)
{
    holding *h, *next;

    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->confirmer_started)
        pthread_join(c->confirmer, NULL);
    pthread_mutex_lock(&c->mu);
    while (c->opening) /* a thread still opening a handle: let it finish */
        pthread_cond_wait(&c->cv, &c->mu);
    if (c->current != NULL)
        retire_locked(c->current);
    /* No thread uses a session any more (the caller has stopped its threads); answers still
     * due are awaited one request timeout, then the sessions are closed regardless. */
    {
        struct timespec until = monotonic_at(now_ms() + c->timeout_ms);
        bool waiting = true;

        while (waiting) {
            zk_session *r;

            waiting = false;
            for (r = c->retired; r != NULL; r = r->next)
                waiting = waiting || r->calls != NULL;
            if (waiting && pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT)
                break;
        }
    }
    reap_locked(c, true);
    pthread_mutex_unlock(&c->mu);
    for (h = c->holdings; h != NULL; h = next) {
        next = h->next;
        free(h);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int zk_lock_session(zk_lock_client *c, int64_t *id, char passwd[16])
{
    zk_session *s;
    const clientid_t *cid;
    int rc;

    if (get_session(c, &s) != ZK_LOCK_OK)
        return ZK_LOCK_ERR_NOT_HELD;
    cid = zoo_client_id(s->zh);
    if (cid != NULL && cid->client_id != 0) {
        *id = cid->client_id;
        memcpy(passwd, cid->passwd, 16);
        rc = ZK_LOCK_OK;
    } else {
        rc = ZK_LOCK_ERR_NOT_HELD;
    }
    unref(c, s);
    return rc;
}

/* The calling thread's holding of name, or NULL. Called with c->mu held. */
static holding *find_locked(zk_lock_client *c, const char *name, holding ***link)
{
    holding **p;

    for (p = &c->holdings; *p != NULL; p = &(*p)->next)
        if (pthread_equal((*p)->thread, pthread_self()) && strcmp((*p)->name, name) == 0) {
            if (link != NULL)
                *link = p;
            return *p;
        }
    return NULL;
}

/* Whether holding h can still be vouched for: taken in the current session, which is
 * connected and which the server heard from less than a session timeout ago. Called with
 * c->mu held. */
static bool live_locked(const zk_lock_client *c, const holding *h)
{
    const zk_session *s = c->current;

    return s != NULL && s->id == h->session && s->connected && now_ms() < s->confirmed_until;
}

/* ---- the recipe ---------------------------------------------------------------------- */

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
static int create_node(zk_lock_client *c, zk_session *s, const char *parent, char *path,
                       size_t pathlen, int64_t *czxid)
{
    char prefix[PATH_MAX_LEN + 8];
    int zrc = ZOK;
    int64_t sent;

    snprintf(prefix, sizeof(prefix), "%s/lock-", parent);
    for (int attempt = 0; attempt < 3; attempt++) {
        zk_call *k = call_new(s);

        if (k == NULL)
            return ZK_LOCK_ERR_NOMEM;
        sent = now_ms();
        zrc = req_create(s, k, prefix, ZOO_EPHEMERAL_SEQUENTIAL);
        if (zrc == ZOK) {
            snprintf(path, pathlen, "%s", k->path);
            *czxid = k->czxid;
        }
        call_unref(k);
        if (zrc == ZOK) {
            confirm(c, s, sent);
            return ZK_LOCK_OK;
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
        end_session(c, s); /* the node may exist, unknown to us: it would block the lock */
    return ZK_LOCK_ERR_SERVER;
}

/* The predecessor of my node (sequence mine) under parent: the child with the greatest
 * smaller sequence. pred is "" when there is none (the lock is mine). */
static int find_predecessor(zk_lock_client *c, zk_session *s, const char *parent, int64_t mine,
                            char *pred, size_t predlen)
{
    zk_call *k = call_new(s);
    int64_t best = -1;
    int64_t sent = now_ms();
    int zrc;

    if (k == NULL)
        return ZK_LOCK_ERR_NOMEM;
    zrc = req_children(s, k, parent);
    if (zrc != ZOK) {
        call_unref(k);
        lock__error_set("children of %s: %s", parent, zerror(zrc));
        note_answer(c, s, zrc);
        return ZK_LOCK_ERR_SERVER;
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
    return ZK_LOCK_OK;
}

/* Waits until pred is deleted, the session dies or the deadline passes. ZK_LOCK_OK: look
 * again (deleted, or the deadline passed: the caller's check tells); ZK_LOCK_ERR_SERVER. */
static int wait_for_deletion(zk_lock_client *c, zk_session *s, const char *pred, int64_t deadline)
{
    struct timespec until = monotonic_at(deadline);
    waiter w = {NULL, s, "", false};
    waiter **p;
    int zrc;
    bool dead;

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
            if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT)
                break;
    for (p = &c->waiters; *p != &w; p = &(*p)->next)
        ;
    *p = w.next;
    dead = s->dead;
    pthread_mutex_unlock(&c->mu);

    if (zrc == ZNONODE)
        return ZK_LOCK_OK; /* gone already */
    if (zrc != ZOK) {
        lock__error_set("watch on %s: %s", pred, zerror(zrc));
        note_answer(c, s, zrc);
        return ZK_LOCK_ERR_SERVER;
    }
    if (dead) {
        lock__error_set("the ZooKeeper session ended while waiting for %s", pred);
        return ZK_LOCK_ERR_SERVER;
    }
    return ZK_LOCK_OK;
}

/* Deletes a node of ours. If the answer is lost, the node may stay for as long as the
 * session lives, blocking its lock: then the session is ended. */
static int delete_node(zk_lock_client *c, zk_session *s, const char *path)
{
    int zrc = request(s, req_delete, path);

    if (zrc == ZOK || zrc == ZNONODE)
        return ZK_LOCK_OK;
    lock__error_set("delete %s: %s", path, zerror(zrc));
    note_answer(c, s, zrc);
    end_session(c, s);
    return ZK_LOCK_ERR_SERVER;
}

int zk_lock_acquire(zk_lock_client *c, const char *name, int64_t wait_ms, int64_t *token)
{
    char parent[PATH_MAX_LEN], path[PATH_MAX_LEN], pred[PATH_MAX_LEN];
    int64_t deadline, czxid = 0, mine;
    zk_session *s;
    holding *h;
    int rc;

    lock__error_clear();
    if (c == NULL || name == NULL || name[0] == '\0' || strlen(name) > NAME_MAX_LEN ||
        strchr(name, '/') != NULL || wait_ms < 0)
        return ZK_LOCK_ERR_INVALID;
    deadline = now_ms() + wait_ms;

    /* Reentry: no round trip, the same token. A holding whose session is gone is not
     * reentered: the caller must release it (and learns it is lost from is_held). */
    pthread_mutex_lock(&c->mu);
    h = find_locked(c, name, NULL);
    if (h != NULL && live_locked(c, h)) {
        h->count++;
        if (token != NULL)
            *token = h->token;
        pthread_mutex_unlock(&c->mu);
        return ZK_LOCK_OK;
    }
    pthread_mutex_unlock(&c->mu);
    if (h != NULL) {
        lock__error_set("%s: held under a lost session; release it first", name);
        return ZK_LOCK_ERR_LOST;
    }

    rc = get_session(c, &s);
    if (rc != ZK_LOCK_OK)
        return rc;
    snprintf(parent, sizeof(parent), ROOT "/%s", name);
    rc = create_node(c, s, parent, path, sizeof(path), &czxid);
    if (rc != ZK_LOCK_OK)
        goto out;
    mine = sequence_of(path);

    for (;;) {
        rc = find_predecessor(c, s, parent, mine, pred, sizeof(pred));
        if (rc != ZK_LOCK_OK)
            goto give_up;
        if (pred[0] == '\0')
            break; /* first in line: held */
        if (now_ms() >= deadline) {
            rc = ZK_LOCK_ERR_TIMEOUT;
            goto give_up;
        }
        rc = wait_for_deletion(c, s, pred, deadline);
        if (rc != ZK_LOCK_OK)
            goto give_up;
    }

    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        rc = ZK_LOCK_ERR_NOMEM;
        goto give_up;
    }
    snprintf(h->name, sizeof(h->name), "%s", name);
    snprintf(h->path, sizeof(h->path), "%s", path);
    h->thread = pthread_self();
    h->count = 1;
    h->token = czxid;
    h->session = s->id;
    pthread_mutex_lock(&c->mu);
    h->next = c->holdings;
    c->holdings = h;
    pthread_mutex_unlock(&c->mu);
    if (token != NULL)
        *token = czxid;
    rc = ZK_LOCK_OK;
    goto out;

give_up:
    /* Leave the queue; if even that fails, the session is ended and the node goes with it. */
    {
        char why[256];

        snprintf(why, sizeof(why), "%s", lock__error_text());
        delete_node(c, s, path);
        lock__error_set("%s", why);
    }
out:
    unref(c, s);
    return rc;
}

int zk_lock_release(zk_lock_client *c, const char *name)
{
    holding *h, **link = NULL;
    zk_session *s = NULL;
    char path[PATH_MAX_LEN];
    int rc;

    if (c == NULL || name == NULL)
        return ZK_LOCK_ERR_INVALID;
    pthread_mutex_lock(&c->mu);
    h = find_locked(c, name, &link);
    if (h == NULL) {
        pthread_mutex_unlock(&c->mu);
        return ZK_LOCK_ERR_NOT_HELD;
    }
    if (--h->count > 0) {
        pthread_mutex_unlock(&c->mu);
        return ZK_LOCK_OK;
    }
    *link = h->next;
    /* Only in the session it was taken in: a node of a dead session is gone already. */
    if (c->current != NULL && c->current->id == h->session && !c->current->dead) {
        s = c->current;
        s->refs++;
    }
    pthread_mutex_unlock(&c->mu);
    snprintf(path, sizeof(path), "%s", h->path);
    free(h);
    if (s == NULL)
        return ZK_LOCK_OK;
    rc = delete_node(c, s, path);
    unref(c, s);
    return rc;
}

int zk_lock_is_held(zk_lock_client *c, const char *name)
{
    holding *h;
    int rc;

    if (c == NULL || name == NULL)
        return ZK_LOCK_ERR_INVALID;
    pthread_mutex_lock(&c->mu);
    h = find_locked(c, name, NULL);
    if (h == NULL)
        rc = ZK_LOCK_ERR_NOT_HELD;
    else if (!live_locked(c, h))
        rc = ZK_LOCK_ERR_LOST;
    else
        rc = ZK_LOCK_OK;
    pthread_mutex_unlock(&c->mu);
    return rc;
}
