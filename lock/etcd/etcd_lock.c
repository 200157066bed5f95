/*
 * etcd_lock.c - the etcd lock of etcd_lock.h: a lease kept alive by a thread, a key per
 * waiter ordered by create revision, a watch on the predecessor only.
 *
 * Every request is one POST of a JSON body to the gateway on a fresh curl easy handle: the
 * calls come from many threads and a handle may be used by one thread only; the gateway
 * is on loopback, so the cost of a new connection is small beside the lock's round trips.
 * The gateway speaks proto3 JSON: keys and values are base64, 64-bit numbers are strings.
 *
 * An unclear answer to a write (a put or a delete that timed out, or whose connection broke)
 * may still be applied, late: a waiter's key would then sit at the head of its lock's line
 * under the process's lease, which the keep-alive renews for ever, and every waiter of every
 * replica would wait on it. So such an answer ends the lease (abandon_lease): it is no longer
 * renewed and is revoked at once; a put that lands after the revoke is refused by etcd (its
 * lease is gone), and one that landed before goes with the lease. Bound: the revoke's answer,
 * or if etcd does not answer that either, the lease's TTL. The cost: this process's other
 * holdings go with the lease (is_held says lost), as a ZooKeeper session's would.
 */
#include "lock/etcd/etcd_lock.h"
#include "lock/error.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_MAX_LEN 200
#define KEY_MAX_LEN 256
#define BODY_MAX (1 << 20) /* bound on an answer we buffer */

const char *etcd_lock_last_error(void)
{
    return lock__error_text();
}

const char *etcd_lock_strerror(int code)
{
    switch (code) {
    case ETCD_LOCK_OK:
        return "ok";
    case ETCD_LOCK_ERR_TIMEOUT:
        return "lock held by another owner for the whole wait";
    case ETCD_LOCK_ERR_SERVER:
        return "etcd unreachable, timed out or answered an error";
    case ETCD_LOCK_ERR_NOT_HELD:
        return "lock not held by the caller";
    case ETCD_LOCK_ERR_INVALID:
        return "invalid argument";
    case ETCD_LOCK_ERR_NOMEM:
        return "out of memory";
    case ETCD_LOCK_ERR_LOST:
        return "the lease of the holding is gone";
    default:
        return "unknown error";
    }
}

/* One thread's holding of one lock. */
typedef struct holding {
    struct holding *next;
    char name[NAME_MAX_LEN + 1];
    char key[KEY_MAX_LEN];
    pthread_t thread;
    int count;
    int64_t token;
    int64_t lease;       /* the lease its key was put with */
    uint64_t generation; /* the lease generation it was taken under */
} holding;

struct etcd_lock_client {
    char endpoint[256];
    int64_t ttl_s;
    int timeout_ms;

    pthread_mutex_t mu;    /* guards everything below; never held across a request */
    pthread_cond_t wake;   /* the keep-alive thread's: a lease granted, or stopping */
    pthread_cond_t grants; /* a grant ended, with a lease or without one */
    bool granting;         /* a thread is asking etcd for a lease */
    bool stopping;
    int64_t lease_id;    /* 0: none */
    uint64_t generation; /* grows each time a lease is lost */
    int64_t lease_until; /* monotonic ms: the lease is surely alive until then */
    uint64_t key_seq;    /* makes each waiter's key unique within the lease */
    holding *holdings;
    pthread_t keepalive;
    bool keepalive_started;
};

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
 * Returns ETCD_LOCK_OK or ETCD_LOCK_ERR_SERVER / _NOMEM with the error text set. */
static int post(etcd_lock_client *c, const char *path, json_t *body, int timeout_ms,
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
    int rc = ETCD_LOCK_ERR_SERVER;

    *answer = NULL;
    text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    h = curl_easy_init();
    headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (text == NULL || h == NULL || headers == NULL) {
        rc = ETCD_LOCK_ERR_NOMEM;
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
    rc = ETCD_LOCK_OK;
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

/* ---- the lease ------------------------------------------------------------------------- */

/* Marks the lease lost: every holding under it is lost; the next acquire grants anew.
 * Called with c->mu held. */
static void lease_lost_locked(etcd_lock_client *c)
{
    c->lease_id = 0;
    c->generation++;
}

/* The monotonic clock's time ms from now, for pthread_cond_timedwait on a condition
 * variable made with CLOCK_MONOTONIC (etcd_lock_client_create). */
static struct timespec monotonic_in(int64_t ms)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/*
 * Makes sure the client has a lease; returns its id and generation.
 *
 * One thread at a time asks etcd for a lease (two would grant two), and it does so without
 * the mutex: a grant may take a whole request timeout (etcd hung), and is_held, the
 * keep-alive and the other threads must not queue behind it. The others wait for its
 * answer, up to one request timeout; if it got none, one of them asks in turn. So a call
 * returns within two request timeouts, however many threads arrive at once.
 */
static int ensure_lease(etcd_lock_client *c, int64_t *id, uint64_t *generation)
{
    json_t *ans = NULL;
    int64_t granted, ttl, sent;
    struct timespec until = monotonic_in(c->timeout_ms);
    int rc;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->lease_id != 0 && now_ms() >= c->lease_until)
            lease_lost_locked(c); /* ran out unrenewed: etcd has dropped it by now */
        if (c->lease_id != 0) {
            *id = c->lease_id;
            *generation = c->generation;
            pthread_mutex_unlock(&c->mu);
            return ETCD_LOCK_OK;
        }
        if (!c->granting)
            break;
        if (pthread_cond_timedwait(&c->grants, &c->mu, &until) == ETIMEDOUT && c->granting) {
            pthread_mutex_unlock(&c->mu);
            lock__error_set("lease grant: another thread's grant got no answer within %d ms",
                            c->timeout_ms);
            return ETCD_LOCK_ERR_SERVER;
        }
    }
    c->granting = true;
    pthread_mutex_unlock(&c->mu);

    sent = now_ms();
    rc = post(c, "/v3/lease/grant", json_pack("{sI}", "TTL", (json_int_t)c->ttl_s), c->timeout_ms,
              &ans);
    granted = rc == ETCD_LOCK_OK ? int64_field(ans, "ID") : 0;
    ttl = rc == ETCD_LOCK_OK ? int64_field(ans, "TTL") : 0;
    json_decref(ans);
    if (rc == ETCD_LOCK_OK && (granted == 0 || ttl <= 0)) {
        lock__error_set("lease grant: no lease in the answer");
        rc = ETCD_LOCK_ERR_SERVER;
    }

    pthread_mutex_lock(&c->mu);
    c->granting = false;
    if (rc == ETCD_LOCK_OK) {
        c->lease_id = granted;
        c->lease_until = sent + ttl * 1000;
        *id = granted;
        *generation = c->generation;
        pthread_cond_broadcast(&c->wake); /* the keep-alive has a lease to keep */
    }
    pthread_cond_broadcast(&c->grants);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* The watchdog: renews the lease every TTL/3. An answer with no TTL means etcd no longer
 * knows the lease (revoked or expired): the holdings are lost. A failed request changes
 * nothing until the lease's own deadline passes (ensure_lease and is_held check it). */
static void *keepalive_main(void *arg)
{
    etcd_lock_client *c = arg;

    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        /* On the monotonic clock: a change of the wall clock neither delays a renewal past
         * the lease nor hurries it. With no lease, it sleeps until a grant wakes it. */
        struct timespec until = monotonic_in(c->lease_id == 0 ? 3600000 : c->ttl_s * 1000 / 3);
        int64_t id, sent, ttl;
        json_t *ans = NULL, *result;
        int rc;

        pthread_cond_timedwait(&c->wake, &c->mu, &until);
        if (c->stopping || c->lease_id == 0)
            continue;
        id = c->lease_id;
        pthread_mutex_unlock(&c->mu);
        sent = now_ms();
        rc = post(c, "/v3/lease/keepalive", json_pack("{sI}", "ID", (json_int_t)id), c->timeout_ms,
                  &ans);
        pthread_mutex_lock(&c->mu);
        if (rc != ETCD_LOCK_OK || c->lease_id != id) {
            json_decref(ans);
            continue;
        }
        /* The gateway streams: the answer is {"result": {...}}. */
        result = json_object_get(ans, "result");
        ttl = int64_field(result ? result : ans, "TTL");
        if (ttl > 0)
            c->lease_until = sent + ttl * 1000;
        else
            lease_lost_locked(c);
        json_decref(ans);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int64_t etcd_lock_lease_id(etcd_lock_client *c)
{
    int64_t id;

    pthread_mutex_lock(&c->mu);
    id = c->lease_id;
    pthread_mutex_unlock(&c->mu);
    return id;
}

/* ---- client ---------------------------------------------------------------------------- */

void etcd_lock_options_init(etcd_lock_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->endpoint = "http://127.0.0.1:2379";
    opts->lease_ms = 10000;
    opts->request_timeout_ms = 1000;
}

int etcd_lock_client_create(const etcd_lock_options *opts, etcd_lock_client **out)
{
    etcd_lock_client *c;
    pthread_condattr_t cattr;

    if (opts == NULL || out == NULL || opts->endpoint == NULL || opts->endpoint[0] == '\0' ||
        strlen(opts->endpoint) >= sizeof(c->endpoint) || opts->lease_ms <= 0 ||
        opts->request_timeout_ms <= 0)
        return ETCD_LOCK_ERR_INVALID;
    /* Thread-safe in libcurl 7.84 and later (Debian 12 has 7.88); idempotent. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return ETCD_LOCK_ERR_NOMEM;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ETCD_LOCK_ERR_NOMEM;
    snprintf(c->endpoint, sizeof(c->endpoint), "%s", opts->endpoint);
    c->ttl_s = (opts->lease_ms + 999) / 1000;
    c->timeout_ms = opts->request_timeout_ms;
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC); /* timed waits: monotonic_in() */
    pthread_cond_init(&c->wake, &cattr);
    pthread_cond_init(&c->grants, &cattr);
    pthread_condattr_destroy(&cattr);
    if (pthread_create(&c->keepalive, NULL, keepalive_main, c) != 0) {
        etcd_lock_client_destroy(c);
        return ETCD_LOCK_ERR_NOMEM;
    }
    c->keepalive_started = true;
    *out = c;
    return ETCD_LOCK_OK;
}

void etcd_lock_client_destroy(etcd_lock_client *c)
{
    holding *h, *next;

    if (c == NULL)
        return;
    if (c->keepalive_started) {
        pthread_mutex_lock(&c->mu);
        c->stopping = true;
        pthread_cond_broadcast(&c->wake);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->keepalive, NULL);
    }
    for (h = c->holdings; h != NULL; h = next) {
        next = h->next;
        free(h);
    }
    pthread_cond_destroy(&c->grants);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->mu);
    free(c);
    curl_global_cleanup();
}

/* The calling thread's holding of name, or NULL. Called with c->mu held. */
static holding *find_locked(etcd_lock_client *c, const char *name, holding ***link)
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

/* An unclear answer to a write made under `lease` (see the top of the file): the lease is
 * marked lost (the keep-alive stops renewing it, the next acquire grants a new one) and
 * revoked, best effort; if the revoke gets no answer either, the lease ends by its TTL. */
static void abandon_lease(etcd_lock_client *c, int64_t lease)
{
    json_t *ans = NULL;
    char why[256];

    snprintf(why, sizeof(why), "%s", lock__error_text());
    pthread_mutex_lock(&c->mu);
    if (c->lease_id == lease)
        lease_lost_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (post(c, "/v3/lease/revoke", json_pack("{sI}", "ID", (json_int_t)lease), c->timeout_ms,
             &ans) == ETCD_LOCK_OK)
        json_decref(ans);
    lock__error_set("%s (unclear answer: the lease was given up)", why);
}

static int delete_key(etcd_lock_client *c, const char *key)
{
    char k64[KEY_MAX_LEN * 2];
    json_t *ans = NULL;
    int rc;

    base64(key, strlen(key), k64);
    rc = post(c, "/v3/kv/deleterange", json_pack("{ss}", "key", k64), c->timeout_ms, &ans);
    json_decref(ans);
    return rc;
}

/*
 * The predecessor of the key created at my_rev under prefix: the key with the greatest
 * create revision below my_rev. Sets pred (base64, "" when none) and *at_rev, the store
 * revision the answer was read at (a watch from at_rev+1 misses no deletion after it).
 */
static int find_predecessor(etcd_lock_client *c, const char *prefix, int64_t my_rev, char *pred,
                            size_t predlen, int64_t *at_rev)
{
    char p64[KEY_MAX_LEN * 2], end[KEY_MAX_LEN], e64[KEY_MAX_LEN * 2];
    json_t *ans = NULL, *kvs, *key;
    int rc;

    base64(prefix, strlen(prefix), p64);
    prefix_end(prefix, end, sizeof(end));
    base64(end, strlen(end), e64);
    rc = post(c, "/v3/kv/range",
              json_pack("{ss ss sI ss ss sI sb}", "key", p64, "range_end", e64, "limit",
                        (json_int_t)1, "sort_order", "DESCEND", "sort_target", "CREATE",
                        "max_create_revision", (json_int_t)(my_rev - 1), "keys_only", 1),
              c->timeout_ms, &ans);
    if (rc != ETCD_LOCK_OK)
        return rc;
    *at_rev = int64_field(json_object_get(ans, "header"), "revision");
    kvs = json_object_get(ans, "kvs");
    key = json_object_get(json_array_get(kvs, 0), "key");
    snprintf(pred, predlen, "%s", json_is_string(key) ? json_string_value(key) : "");
    json_decref(ans);
    return ETCD_LOCK_OK;
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

/* Waits up to timeout_ms for the deletion of key64 (base64) after revision from_rev.
 * Returns ETCD_LOCK_OK when it was deleted; ETCD_LOCK_ERR_TIMEOUT when the time ran out or
 * etcd ended the stream (the caller looks again); ETCD_LOCK_ERR_SERVER. */
static int watch_deletion(etcd_lock_client *c, const char *key64, int64_t from_rev,
                          int64_t timeout_ms)
{
    char url[512];
    char *text = NULL;
    watch_state w = {{0}, false};
    CURL *h = NULL;
    struct curl_slist *headers = NULL;
    CURLcode cc;
    json_t *body;
    int rc = ETCD_LOCK_ERR_SERVER;

    body = json_pack("{s{ss sI s[s]}}", "create_request", "key", key64, "start_revision",
                     (json_int_t)from_rev, "filters", "NOPUT");
    text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    h = curl_easy_init();
    headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (text == NULL || h == NULL || headers == NULL) {
        lock__error_set("out of memory");
        rc = ETCD_LOCK_ERR_NOMEM;
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
    if (w.deleted)
        rc = ETCD_LOCK_OK;
    else if (cc == CURLE_OPERATION_TIMEDOUT || cc == CURLE_OK)
        rc = ETCD_LOCK_ERR_TIMEOUT; /* out of time, or etcd ended the watch: look again */
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

int etcd_lock_acquire(etcd_lock_client *c, const char *name, int64_t wait_ms, int64_t *token)
{
    char prefix[NAME_MAX_LEN + 2], key[KEY_MAX_LEN], k64[KEY_MAX_LEN * 2], pred[KEY_MAX_LEN * 2];
    int64_t deadline, lease = 0, my_rev, at_rev;
    uint64_t generation = 0;
    holding *h;
    json_t *ans = NULL;
    int rc;

    lock__error_clear();
    if (c == NULL || name == NULL || name[0] == '\0' || strlen(name) > NAME_MAX_LEN ||
        strchr(name, '/') != NULL || wait_ms < 0)
        return ETCD_LOCK_ERR_INVALID;
    deadline = now_ms() + wait_ms;

    /* Reentry: no round trip, the same token. A holding whose lease is gone is not
     * reentered: the caller must release it (and learns it is lost from is_held). */
    pthread_mutex_lock(&c->mu);
    h = find_locked(c, name, NULL);
    if (h != NULL && h->generation == c->generation && c->lease_id != 0) {
        h->count++;
        if (token != NULL)
            *token = h->token;
        pthread_mutex_unlock(&c->mu);
        return ETCD_LOCK_OK;
    }
    pthread_mutex_unlock(&c->mu);
    if (h != NULL) {
        lock__error_set("%s: held under a lost lease; release it first", name);
        return ETCD_LOCK_ERR_LOST;
    }

    /* The waiter's key, with the lease: its create revision is the put's revision. A
     * lease etcd has dropped (revoked, or expired while etcd was away) before the
     * keep-alive noticed makes the put fail with "lease not found": then the lease is
     * marked lost and the put tried once more on a new one. */
    for (int attempt = 0;; attempt++) {
        rc = ensure_lease(c, &lease, &generation);
        if (rc != ETCD_LOCK_OK)
            return rc;
        pthread_mutex_lock(&c->mu);
        snprintf(prefix, sizeof(prefix), "%s/", name);
        snprintf(key, sizeof(key), "%s%016" PRIx64 "/%" PRIu64, prefix, (uint64_t)lease,
                 ++c->key_seq);
        pthread_mutex_unlock(&c->mu);
        base64(key, strlen(key), k64);
        rc = post(c, "/v3/kv/put",
                  json_pack("{ss ss sI}", "key", k64, "value", "", "lease", (json_int_t)lease),
                  c->timeout_ms, &ans);
        if (rc == ETCD_LOCK_OK)
            break;
        if (attempt > 0 || strstr(lock__error_text(), "lease not found") == NULL) {
            /* Only "lease not found" says the put was not applied. */
            if (rc == ETCD_LOCK_ERR_SERVER)
                abandon_lease(c, lease);
            return rc;
        }
        pthread_mutex_lock(&c->mu);
        if (c->lease_id == lease)
            lease_lost_locked(c);
        pthread_mutex_unlock(&c->mu);
    }
    my_rev = int64_field(json_object_get(ans, "header"), "revision");
    json_decref(ans);
    if (my_rev <= 0) {
        lock__error_set("put: no revision in the answer");
        rc = ETCD_LOCK_ERR_SERVER;
        goto give_up;
    }

    for (;;) {
        int64_t left;

        rc = find_predecessor(c, prefix, my_rev, pred, sizeof(pred), &at_rev);
        if (rc != ETCD_LOCK_OK)
            goto give_up;
        if (pred[0] == '\0')
            break; /* first in line: held */
        left = deadline - now_ms();
        if (left <= 0) {
            rc = ETCD_LOCK_ERR_TIMEOUT;
            goto give_up;
        }
        rc = watch_deletion(c, pred, at_rev + 1, left);
        if (rc == ETCD_LOCK_ERR_TIMEOUT)
            continue; /* one last look, then the deadline check gives up */
        if (rc != ETCD_LOCK_OK)
            goto give_up;
    }

    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        rc = ETCD_LOCK_ERR_NOMEM;
        goto give_up;
    }
    snprintf(h->name, sizeof(h->name), "%s", name);
    snprintf(h->key, sizeof(h->key), "%s", key);
    h->thread = pthread_self();
    h->count = 1;
    h->token = my_rev;
    h->lease = lease;
    h->generation = generation;
    pthread_mutex_lock(&c->mu);
    h->next = c->holdings;
    c->holdings = h;
    pthread_mutex_unlock(&c->mu);
    if (token != NULL)
        *token = my_rev;
    return ETCD_LOCK_OK;

give_up:
    /* Leave the queue; if even that gets no clear answer, the key goes with the lease. */
    if (delete_key(c, key) == ETCD_LOCK_ERR_SERVER)
        abandon_lease(c, lease);
    return rc;
}

int etcd_lock_release(etcd_lock_client *c, const char *name)
{
    holding *h, **link = NULL;
    char key[KEY_MAX_LEN];
    int64_t lease;
    int rc;

    if (c == NULL || name == NULL)
        return ETCD_LOCK_ERR_INVALID;
    pthread_mutex_lock(&c->mu);
    h = find_locked(c, name, &link);
    if (h == NULL) {
        pthread_mutex_unlock(&c->mu);
        return ETCD_LOCK_ERR_NOT_HELD;
    }
    if (--h->count > 0) {
        pthread_mutex_unlock(&c->mu);
        return ETCD_LOCK_OK;
    }
    *link = h->next;
    pthread_mutex_unlock(&c->mu);
    snprintf(key, sizeof(key), "%s", h->key);
    lease = h->lease;
    free(h);
    rc = delete_key(c, key);
    if (rc == ETCD_LOCK_ERR_SERVER)
        abandon_lease(c, lease); /* the key may still be there: it goes with the lease */
    return rc;
}

int etcd_lock_is_held(etcd_lock_client *c, const char *name)
{
    holding *h;
    int rc;

    if (c == NULL || name == NULL)
        return ETCD_LOCK_ERR_INVALID;
    pthread_mutex_lock(&c->mu);
    h = find_locked(c, name, NULL);
    if (h == NULL)
        rc = ETCD_LOCK_ERR_NOT_HELD;
    else if (h->generation != c->generation || c->lease_id == 0 || now_ms() >= c->lease_until)
        rc = ETCD_LOCK_ERR_LOST;
    else
        rc = ETCD_LOCK_OK;
    pthread_mutex_unlock(&c->mu);
    return rc;
}
