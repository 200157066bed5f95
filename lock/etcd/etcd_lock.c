/*
 * etcd_lock.c - etcd's protocol for the queue lock (etcd_lock.h, lock/queue/backend.h): a
 * lease kept alive, a key per waiter ordered by create revision, a watch on one key.
 *
 * Every request is one POST of a JSON body to the gateway on a fresh curl easy handle: the
 * calls come from many threads and a handle may be used by one thread only; the gateway
 * is on loopback, so the cost of a new connection is small beside the lock's round trips.
 * The gateway speaks proto3 JSON: keys and values are base64, 64-bit numbers are strings.
 *
 * A lease is named by its id (etcd's ids are not reused), which is the recipe's session id.
 */
#include "lock/etcd/etcd_lock.h"
#include "lock/clock.h"
#include "lock/error.h"
#include "lock/queue/backend.h"
#include "lock/lease.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX_LEN 256
#define BODY_MAX (1 << 20) /* bound on an answer we buffer */

typedef struct etcd_be {
    queue_lock *q; /* the queue lock over this backend: its keeper is woken on a grant */
    char endpoint[256];
    int64_t ttl_s;
    int timeout_ms;

    pthread_mutex_t mu;    /* guards everything below; never held across a request */
    pthread_cond_t grants; /* a grant ended, with a lease or without one */
    bool granting;         /* a thread is asking etcd for a lease */
    int64_t lease_id;      /* 0: none */
    int64_t lease_until;   /* monotonic ns: the lease is surely alive until then */
    int64_t renew_at;      /* monotonic ns: the keeper's next renewal */
    uint64_t key_seq;      /* makes each waiter's key unique within the lease */
} etcd_be;

/* ---- base64 (the gateway's encoding of bytes) ------------------------------------------ */

static void base64(const char *in, size_t len, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *s = (const unsigned char *)in;
    size_t i;
    char *o = out;

    for (i = 0; i + 2 < len; i += 3) {
        *o++ = tab[s[i] >> 2];
        *o++ = tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
        *o++ = tab[((s[i + 1] & 15) << 2) | (s[i + 2] >> 6)];
        *o++ = tab[s[i + 2] & 63];
    }
    if (i < len) {
        *o++ = tab[s[i] >> 2];
        if (i + 1 < len) {
            *o++ = tab[((s[i] & 3) << 4) | (s[i + 1] >> 4)];
            *o++ = tab[(s[i + 1] & 15) << 2];
        } else {
            *o++ = tab[(s[i] & 3) << 4];
            *o++ = '=';
        }
        *o++ = '=';
    }
    *o = '\0';
}

/* The prefix end of etcd's range queries: the prefix with its last byte incremented
 * ("N/" -> "N0"), so [prefix, end) is every key under the prefix. */
static void prefix_end(const char *prefix, char *out, size_t outlen)
{
    size_t n = strlen(prefix);

    snprintf(out, outlen, "%s", prefix);
    out[n - 1]++;
}

/* ---- one POST ---------------------------------------------------------------------------- */

typedef struct buffer {
    char *data;
    size_t len;
    bool too_long;
} buffer;

static size_t collect(char *ptr, size_t size, size_t nmemb, void *ud)
{
    buffer *b = ud;
    size_t n = size * nmemb;
    char *grown;

    if (b->len + n > BODY_MAX) {
        b->too_long = true;
        return 0;
    }
    grown = realloc(b->data, b->len + n + 1);
    if (grown == NULL)
        return 0;
    b->data = grown;
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* POSTs `body` (stolen) to endpoint+path; on success *answer is the parsed JSON answer.
 * Returns QUEUE_LOCK_OK or QUEUE_LOCK_ERR_SERVER / _NOMEM with the error text set. */
static int post(etcd_be *c, const char *path, json_t *body, int timeout_ms,
                json_t **answer)
{
    char url[512];
    char *text = NULL;
    buffer b = {0};
    CURL *h = NULL;
    struct curl_slist *headers = NULL;
    long status = 0;
    CURLcode cc;
    json_error_t jerr;
    int rc = QUEUE_LOCK_ERR_SERVER;

    *answer = NULL;
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    h = curl_easy_init();
    headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (text == NULL || h == NULL || headers == NULL) {
        rc = QUEUE_LOCK_ERR_NOMEM;
        lock__error_set("out of memory");
        goto out;
    }
    snprintf(url, sizeof(url), "%s%s", c->endpoint, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        lock__error_set("%s: %s", path, curl_easy_strerror(cc));
        goto out;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        lock__error_set("%s: HTTP %ld: %.120s", path, status, b.data ? b.data : "");
        goto out;
    }
    *answer = json_loadb(b.data ? b.data : "", b.len, 0, &jerr);
    if (*answer == NULL) {
        lock__error_set("%s: bad JSON: %s", path, jerr.text);
        goto out;
    }
    rc = QUEUE_LOCK_OK;
out:
    curl_slist_free_all(headers);
    if (h != NULL)
        curl_easy_cleanup(h);
    free(text);
    free(b.data);
    return rc;
}

/* A proto3 int64 (a string in JSON; absent means 0). */
static int64_t int64_field(json_t *obj, const char *name)
{
    json_t *v = json_object_get(obj, name);

    if (json_is_string(v))
        return strtoll(json_string_value(v), NULL, 10);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    return 0;
}

static const queue_lock__backend etcd_backend;

/* ---- the lease ------------------------------------------------------------------------- */

/* Marks the lease lost: every holding under it is lost; the next acquire grants anew.
 * Called with c->mu held. */
static void lease_lost_locked(etcd_be *c)
{
    c->lease_id = 0;
}

/*
 * Makes sure the client has a lease (the backend's get_session): s->id is its id.
 *
 * One thread at a time asks etcd for a lease (two would grant two), and it does so without
 * the mutex: a grant may take a whole request timeout (etcd hung), and is_held, the
 * keep-alive and the other threads must not queue behind it. The others wait for its
 * answer, up to one request timeout; if it got none, one of them asks in turn. So a call
 * returns within two request timeouts, however many threads arrive at once.
 */
static int etcd_get_session(void *be, queue_lock__session *s)
{
    etcd_be *c = be;
    json_t *ans = NULL;
    int64_t granted, ttl, sent, until = lock__deadline_ns(c->timeout_ms);
    int rc;

    s->handle = NULL;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->lease_id != 0 && lock__now_ns() >= c->lease_until)
            lease_lost_locked(c); /* ran out unrenewed: etcd has dropped it by now */
        if (c->lease_id != 0) {
            s->id = (uint64_t)c->lease_id;
            pthread_mutex_unlock(&c->mu);
            return QUEUE_LOCK_OK;
        }
        if (!c->granting)
            break;
        if (lock__cond_wait_until(&c->grants, &c->mu, until) == ETIMEDOUT && c->granting) {
            pthread_mutex_unlock(&c->mu);
            lock__error_set("lease grant: another thread's grant got no answer within %d ms",
                            c->timeout_ms);
            return QUEUE_LOCK_ERR_SERVER;
        }
    }
    c->granting = true;
    pthread_mutex_unlock(&c->mu);

    sent = lock__now_ns();
    rc = post(c, "/v3/lease/grant", json_pack("{sI}", "TTL", (json_int_t)c->ttl_s), c->timeout_ms,
              &ans);
    granted = rc == QUEUE_LOCK_OK ? int64_field(ans, "ID") : 0;
    ttl = rc == QUEUE_LOCK_OK ? int64_field(ans, "TTL") : 0;
    json_decref(ans);
    if (rc == QUEUE_LOCK_OK && (granted == 0 || ttl <= 0)) {
        lock__error_set("lease grant: no lease in the answer");
        rc = QUEUE_LOCK_ERR_SERVER;
    }

    pthread_mutex_lock(&c->mu);
    c->granting = false;
    if (rc == QUEUE_LOCK_OK) {
        c->lease_id = granted;
        c->lease_until = lock__add_ns(sent, lock__ms_to_ns(ttl * 1000));
        c->renew_at = lock__lease_renewal_due(sent, c->ttl_s * 1000);
        s->id = (uint64_t)granted;
        queue_lock__wake(c->q); /* the keeper has a lease to keep */
    }
    pthread_cond_broadcast(&c->grants);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void etcd_put_session(void *be, queue_lock__session *s)
{
    (void)be;
    (void)s;
}

static bool etcd_alive(void *be, uint64_t session)
{
    etcd_be *c = be;
    bool alive;

    pthread_mutex_lock(&c->mu);
    alive = c->lease_id != 0 && (uint64_t)c->lease_id == session &&
            lock__now_ns() < c->lease_until;
    pthread_mutex_unlock(&c->mu);
    return alive;
}

/* The keeper's round: renews the lease when due (lock/watchdog.h: every TTL/3). An answer
 * with no TTL means etcd no longer knows the lease (revoked or expired): the holdings are
 * lost. A failed request changes nothing until the lease's own deadline passes (alive and
 * get_session check it). With no lease, it sleeps until a grant wakes it. */
static int64_t etcd_keep_alive(void *be)
{
    etcd_be *c = be;
    int64_t id, sent, ttl, period_ns = lock__lease_period_ns(c->ttl_s * 1000);
    json_t *ans = NULL, *result;
    int rc;

    pthread_mutex_lock(&c->mu);
    id = c->lease_id;
    if (id == 0 || lock__now_ns() < c->renew_at) {
        int64_t next = id == 0 ? lock__deadline_ns(3600000) : c->renew_at;

        pthread_mutex_unlock(&c->mu);
        return next;
    }
    pthread_mutex_unlock(&c->mu);
    sent = lock__now_ns();
    rc = post(c, "/v3/lease/keepalive", json_pack("{sI}", "ID", (json_int_t)id), c->timeout_ms,
              &ans);
    pthread_mutex_lock(&c->mu);
    if (c->lease_id == id) {
        c->renew_at = lock__add_ns(sent, period_ns);
        if (rc == QUEUE_LOCK_OK) {
            /* The gateway streams: the answer is {"result": {...}}. */
            result = json_object_get(ans, "result");
            ttl = int64_field(result ? result : ans, "TTL");
            if (ttl > 0)
                c->lease_until = lock__add_ns(sent, lock__ms_to_ns(ttl * 1000));
            else
                lease_lost_locked(c);
        }
    }
    pthread_mutex_unlock(&c->mu);
    json_decref(ans);
    return lock__add_ns(sent, period_ns);
}

/* The lease is given up (an unclear write under it, lock/queue/queue_lock.h): marked lost
 * (no longer renewed, the next acquire grants a new one) and revoked, best effort; if the
 * revoke gets no answer either, the lease ends by its TTL. */
static void etcd_end(void *be, uint64_t session)
{
    etcd_be *c = be;
    json_t *ans = NULL;

    pthread_mutex_lock(&c->mu);
    if ((uint64_t)c->lease_id == session)
        lease_lost_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (post(c, "/v3/lease/revoke", json_pack("{sI}", "ID", (json_int_t)session), c->timeout_ms,
             &ans) == QUEUE_LOCK_OK)
        json_decref(ans);
}

int64_t etcd_lock_lease_id(etcd_lock_client *q)
{
    etcd_be *c = queue_lock__backend_of(q, &etcd_backend);
    int64_t id;

    if (c == NULL)
        return 0;
    pthread_mutex_lock(&c->mu);
    id = c->lease_id;
    pthread_mutex_unlock(&c->mu);
    return id;
}

/* ---- the line ------------------------------------------------------------------------ */

/* The waiter's key "<name>/<lease>/<n>", put with the lease: its create revision is the
 * put's revision. "lease not found" is the one answer that says the put was not applied
 * (etcd dropped the lease before the keeper noticed): STALE; any other failure may hide an
 * applied put: UNCLEAR. */
static int etcd_create(void *be, const queue_lock__session *s, const char *name, char *node,
                       int64_t *token)
{
    etcd_be *c = be;
    char k64[KEY_MAX_LEN * 2];
    json_t *ans = NULL;
    int rc;

    pthread_mutex_lock(&c->mu);
    snprintf(node, QUEUE_LOCK__NODE_MAX, "%s/%016" PRIx64 "/%" PRIu64, name, s->id, ++c->key_seq);
    pthread_mutex_unlock(&c->mu);
    base64(node, strlen(node), k64);
    rc = post(c, "/v3/kv/put",
              json_pack("{ss ss sI}", "key", k64, "value", "", "lease", (json_int_t)s->id),
              c->timeout_ms, &ans);
    if (rc == QUEUE_LOCK_ERR_SERVER && strstr(lock__error_text(), "lease not found") != NULL) {
        pthread_mutex_lock(&c->mu);
        if ((uint64_t)c->lease_id == s->id)
            lease_lost_locked(c);
        pthread_mutex_unlock(&c->mu);
        return QUEUE_LOCK__STALE;
    }
    if (rc != QUEUE_LOCK_OK)
        return rc == QUEUE_LOCK_ERR_SERVER ? QUEUE_LOCK__UNCLEAR : rc;
    *token = int64_field(json_object_get(ans, "header"), "revision");
    json_decref(ans);
    if (*token <= 0) {
        lock__error_set("put: no revision in the answer");
        return QUEUE_LOCK__UNCLEAR; /* the key may be there: it goes with the lease */
    }
    return QUEUE_LOCK_OK;
}

static int etcd_remove(void *be, uint64_t session, const char *node)
{
    etcd_be *c = be;
    char k64[KEY_MAX_LEN * 2];
    json_t *ans = NULL;
    int rc;

    (void)session; /* a key is deleted by its name, whichever lease it has */
    base64(node, strlen(node), k64);
    rc = post(c, "/v3/kv/deleterange", json_pack("{ss}", "key", k64), c->timeout_ms, &ans);
    json_decref(ans);
    return rc;
}

/*
 * The predecessor of the key created at revision token under "<name>/": the key with the
 * greatest create revision below it. Sets pred (base64, "" when none) and *cursor, the store
 * revision the answer was read at (a watch from cursor+1 misses no deletion after it).
 */
static int etcd_predecessor(void *be, const queue_lock__session *s, const char *name,
                            const char *node, int64_t token, char *pred, int64_t *cursor)
{
    etcd_be *c = be;
    char prefix[KEY_MAX_LEN], p64[KEY_MAX_LEN * 2], end[KEY_MAX_LEN], e64[KEY_MAX_LEN * 2];
    json_t *ans = NULL, *kvs, *key;
    int rc;

    (void)s;
    (void)node;
    snprintf(prefix, sizeof(prefix), "%s/", name);
    base64(prefix, strlen(prefix), p64);
    prefix_end(prefix, end, sizeof(end));
    base64(end, strlen(end), e64);
    rc = post(c, "/v3/kv/range",
              json_pack("{ss ss sI ss ss sI sb}", "key", p64, "range_end", e64, "limit",
                        (json_int_t)1, "sort_order", "DESCEND", "sort_target", "CREATE",
                        "max_create_revision", (json_int_t)(token - 1), "keys_only", 1),
              c->timeout_ms, &ans);
    if (rc != QUEUE_LOCK_OK)
        return rc;
    *cursor = int64_field(json_object_get(ans, "header"), "revision");
    kvs = json_object_get(ans, "kvs");
    key = json_object_get(json_array_get(kvs, 0), "key");
    snprintf(pred, QUEUE_LOCK__NODE_MAX, "%s", json_is_string(key) ? json_string_value(key) : "");
    json_decref(ans);
    return QUEUE_LOCK_OK;
}

/* The state of a watch's stream: the bytes not yet parsed, and whether the predecessor's
 * deletion has been seen. */
typedef struct watch_state {
    buffer b;
    bool deleted;
} watch_state;

static size_t watch_collect(char *ptr, size_t size, size_t nmemb, void *ud)
{
    watch_state *w = ud;
    size_t n = size * nmemb, off = 0;

    if (collect(ptr, size, nmemb, &w->b) != n)
        return 0;
    /* The gateway writes one JSON message after another; parse every whole one. */
    while (off < w->b.len) {
        json_error_t jerr;
        json_t *msg = json_loadb(w->b.data + off, w->b.len - off, JSON_DISABLE_EOF_CHECK, &jerr);
        json_t *events, *ev;
        size_t i;

        if (msg == NULL)
            break; /* incomplete: wait for more */
        off += jerr.position;
        events = json_object_get(json_object_get(msg, "result"), "events");
        json_array_foreach(events, i, ev)
        {
            json_t *type = json_object_get(ev, "type");
            if (json_is_string(type) && strcmp(json_string_value(type), "DELETE") == 0)
                w->deleted = true;
        }
        json_decref(msg);
        while (off < w->b.len &&
               (w->b.data[off] == '\n' || w->b.data[off] == ' ' || w->b.data[off] == '\r'))
            off++;
    }
    memmove(w->b.data, w->b.data + off, w->b.len - off);
    w->b.len -= off;
    return w->deleted ? 0 : n; /* 0 ends the transfer: the awaited event came */
}

/* Waits until deadline_ns for the deletion of key64 (base64) after revision cursor (the
 * backend's watch_deletion). QUEUE_LOCK_OK when it was deleted, the time ran out or etcd
 * ended the stream: the recipe looks at the line again; QUEUE_LOCK_ERR_SERVER. */
static int etcd_watch_deletion(void *be, const queue_lock__session *s, const char *key64,
                               int64_t cursor, int64_t deadline_ns)
{
    etcd_be *c = be;
    int64_t from_rev = cursor + 1, timeout_ms = lock__ms_left(deadline_ns);
    char url[512];
    char *text = NULL;
    watch_state w = {{0}, false};
    CURL *h = NULL;
    struct curl_slist *headers = NULL;
    CURLcode cc;
    json_t *body;
    int rc = QUEUE_LOCK_ERR_SERVER;

    body = json_pack("{s{ss sI s[s]}}", "create_request", "key", key64, "start_revision",
                     (json_int_t)from_rev, "filters", "NOPUT");
    text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    h = curl_easy_init();
    headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (text == NULL || h == NULL || headers == NULL) {
        lock__error_set("out of memory");
        rc = QUEUE_LOCK_ERR_NOMEM;
        goto out;
    }
    snprintf(url, sizeof(url), "%s/v3/watch", c->endpoint);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch_collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_ms > 0 ? timeout_ms : 1));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    cc = curl_easy_perform(h);
    (void)s;
    if (w.deleted || cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_OK)
        rc = QUEUE_LOCK_OK; /* deleted, out of time, or etcd ended the watch: look again */
    else
        lock__error_set("/v3/watch: %s", curl_easy_strerror(cc));
out:
    curl_slist_free_all(headers);
    if (h != NULL)
        curl_easy_cleanup(h);
    free(text);
    free(w.b.data);
    return rc;
}

/* ---- client ---------------------------------------------------------------------------- */

/* Holdings are not released: their keys go with the lease, by its TTL. */
static void etcd_destroy(void *be)
{
    etcd_be *c = be;

    pthread_cond_destroy(&c->grants);
    pthread_mutex_destroy(&c->mu);
    free(c);
    curl_global_cleanup();
}

/* The backend's open: the client's state, with no lease yet (the first acquire grants it). */
static void *etcd_open(queue_lock *q, const char *servers, const queue_lock_options *opts)
{
    etcd_be *c;

    /* Thread-safe in libcurl 7.84 and later (Debian 12 has 7.88); idempotent, counted. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return NULL;
    c = calloc(1, sizeof(*c));
    if (c == NULL || lock__cond_init(&c->grants) != 0) {
        free(c);
        curl_global_cleanup();
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    c->q = q;
    snprintf(c->endpoint, sizeof(c->endpoint), "%s", servers);
    c->timeout_ms = opts->request_timeout_ms;
    c->ttl_s = (opts->lease_ms + 999) / 1000; /* etcd's TTLs are whole seconds */
    return c;
}

static const queue_lock__backend etcd_backend =
    QUEUE_LOCK__BACKEND(etcd, "etcd", "http://127.0.0.1:2379");

int etcd_lock_client_create(const queue_lock_options *opts, etcd_lock_client **out)
{
    return queue_lock__open(&etcd_backend, opts, out);
}
