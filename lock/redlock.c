/*
 * redlock.c - Redlock over N independent Redis servers (redlock.h says what and why).
 *
 * The nodes are tried one after the other, not at once: each try is one SET on loopback or
 * a LAN (well under a millisecond), a dead node's connection is refused at once, and a hung
 * one costs at most two node timeouts. Whatever the tries cost is subtracted from the
 * validity, so slowness here can only make the lock shorter, never wrong.
 */
#include "lock/redlock.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "lock/clock.h"
#include "lock/error.h"
#include "lock/naive.h"

struct redlock {
    int n;
    lock_client *nodes[REDLOCK_MAX_NODES];
    char where[REDLOCK_MAX_NODES][280]; /* "host:port", for error messages */
    int64_t retry_base_ms;
    bool retry_fixed;
    void (*before_set)(void *arg, int attempt, int node);
    void *before_set_arg;
};

/* ---- parsing ---- */

static bool visible_host_char(char ch)
{
    return ch > 0x20 && ch < 0x7f && ch != ',' && ch != ':';
}

int redlock_parse_nodes(const char *spec, redlock_node *out, int max, int *n, char *err,
                        size_t errlen)
{
    const char *p = spec;
    int count = 0;

    *n = 0;
    if (spec == NULL || spec[0] == '\0') {
        snprintf(err, errlen, "no nodes");
        return -1;
    }
    for (;;) {
        const char *host = p, *colon;
        size_t hlen;
        int64_t port = 0;

        while (*p != '\0' && visible_host_char(*p))
            p++;
        colon = p;
        hlen = (size_t)(colon - host);
        if (*colon != ':' || hlen == 0 || hlen > 255) {
            snprintf(err, errlen, "node %d: expected host:port (host 1 to 255 characters)",
                     count + 1);
            return -1;
        }
        p++;
        if (*p < '0' || *p > '9') {
            snprintf(err, errlen, "node %d: the port must be digits", count + 1);
            return -1;
        }
        while (*p >= '0' && *p <= '9') {
            port = port * 10 + (*p - '0');
            if (port > 65535)
                break;
            p++;
        }
        if (port < 1 || port > 65535 || (*p != ',' && *p != '\0')) {
            snprintf(err, errlen, "node %d: the port must be a number from 1 to 65535", count + 1);
            return -1;
        }
        if (count >= max || count >= REDLOCK_MAX_NODES) {
            snprintf(err, errlen, "more than %d nodes",
                     max < REDLOCK_MAX_NODES ? max : REDLOCK_MAX_NODES);
            return -1;
        }
        memcpy(out[count].host, host, hlen);
        out[count].host[hlen] = '\0';
        out[count].port = (int)port;
        for (int i = 0; i < count; i++) {
            if (out[i].port == out[count].port && strcmp(out[i].host, out[count].host) == 0) {
                /* The same server twice would count one grant as two: no majority at all. */
                snprintf(err, errlen, "node %d repeats node %d", count + 1, i + 1);
                return -1;
            }
        }
        count++;
        if (*p == '\0')
            break;
        p++; /* the ',' */
    }
    *n = count;
    return 0;
}

/* ---- the arithmetic ---- */

int redlock_quorum(int n)
{
    return n / 2 + 1;
}

int64_t redlock_drift_ms(int64_t lease_ms)
{
    return lease_ms / 100 + 2;
}

int64_t redlock_validity_ms(int64_t lease_ms, int64_t elapsed_ms, int64_t drift_ms)
{
    return lease_ms - elapsed_ms - drift_ms;
}

bool redlock_acquired(int successes, int n, int64_t validity_ms)
{
    return n > 0 && successes >= redlock_quorum(n) && validity_ms > 0;
}

int64_t redlock_retry_delay_ms(int64_t base_ms, uint32_t random)
{
    return base_ms + (int64_t)(random % (uint32_t)(base_ms + 1));
}

/* ---- the lock ---- */

void redlock_options_init(redlock_options *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->node_timeout_ms = 100;
    opts->pool_size = 8;
    opts->retry_base_ms = 20;
}

int redlock_create(const redlock_options *opts, redlock **out)
{
    redlock *r;

    *out = NULL;
    if (opts == NULL || opts->nodes == NULL || opts->n_nodes < 1 ||
        opts->n_nodes > REDLOCK_MAX_NODES || opts->node_timeout_ms <= 0 || opts->pool_size <= 0 ||
        opts->retry_base_ms <= 0)
        return LOCK_ERR_INVALID;
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return LOCK_ERR_NOMEM;
    r->retry_base_ms = opts->retry_base_ms;
    r->retry_fixed = opts->retry_fixed;
    r->before_set = opts->before_set;
    r->before_set_arg = opts->before_set_arg;
    for (int i = 0; i < opts->n_nodes; i++) {
        lock_options lo;
        int rc;

        lock_options_init(&lo);
        lo.redis_host = opts->nodes[i].host;
        lo.redis_port = opts->nodes[i].port;
        lo.connect_timeout_ms = opts->node_timeout_ms;
        lo.command_timeout_ms = opts->node_timeout_ms;
        lo.pool_size = opts->pool_size;
        rc = lock_client_create(&lo, &r->nodes[i]);
        if (rc != LOCK_OK) {
            redlock_destroy(r);
            return rc;
        }
        snprintf(r->where[i], sizeof(r->where[i]), "%s:%d", opts->nodes[i].host,
                 opts->nodes[i].port);
        r->n = i + 1;
    }
    *out = r;
    return LOCK_OK;
}

void redlock_destroy(redlock *r)
{
    if (r == NULL)
        return;
    for (int i = 0; i < r->n; i++)
        lock_client_destroy(r->nodes[i]);
    free(r);
}

int redlock_nodes(const redlock *r)
{
    return r->n;
}

static uint32_t random32(void)
{
    uint32_t v = 0;

    /* getrandom() of 4 bytes does not block once the pool is initialised, and cannot come
     * back short; if it fails anyway, the clock's nanoseconds are random enough for a
     * jitter. */
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = (uint32_t)lock__now_ns();
    return v;
}

/* 128 random bits in hex: the value that says "this acquisition" on every node. */
static int random_value(char *out, size_t len)
{
    unsigned char bytes[16];
    size_t got = 0;

    while (got < sizeof(bytes)) {
        ssize_t k = getrandom(bytes + got, sizeof(bytes) - got, 0);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof(bytes) && 2 * i + 2 < len; i++)
        snprintf(out + 2 * i, 3, "%02x", bytes[i]);
    return 0;
}

static void sleep_ms(int64_t ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Deletes our key on every node, whatever the node said when we set it. Returns the nodes
 * that deleted one. */
static int release_all(redlock *r, const char *name, const char *value)
{
    int deleted_on = 0;

    for (int i = 0; i < r->n; i++) {
        bool deleted = false;
        if (naive_delete_if_value(r->nodes[i], name, value, &deleted) == LOCK_OK && deleted)
            deleted_on++;
    }
    return deleted_on;
}

/* One attempt (the n-th): SET NX PX on every node. Counts the grants and the nodes that
 * answered. */
static void attempt(redlock *r, int n, const char *name, const char *value, int64_t lease_ms,
                    int *granted, int *answered, char *why, size_t why_len)
{
    *granted = 0;
    *answered = 0;
    for (int i = 0; i < r->n; i++) {
        bool acquired = false;
        if (r->before_set != NULL)
            r->before_set(r->before_set_arg, n, i);
        int rc = naive_set_nx_px(r->nodes[i], name, value, lease_ms, &acquired);
        if (rc == LOCK_OK) {
            (*answered)++;
            if (acquired)
                (*granted)++;
        } else if (why[0] == '\0') {
            snprintf(why, why_len, "%s: %s", r->where[i],
                     lock_last_error()[0] ? lock_last_error() : lock_strerror(rc));
        }
    }
}

int redlock_lock(redlock *r, const char *name, int64_t wait_ms, int64_t lease_ms,
                 redlock_holding *out)
{
    int64_t drift = redlock_drift_ms(lease_ms);
    int64_t deadline;
    int answered = 0, quorum;
    char why[256];

    lock__error_clear();
    memset(out, 0, sizeof(*out));
    if (r == NULL || name == NULL || name[0] == '\0' || strlen(name) >= sizeof(out->name) ||
        wait_ms < 0 || lease_ms <= 2 * drift)
        return LOCK_ERR_INVALID;
    quorum = redlock_quorum(r->n);
    snprintf(out->name, sizeof(out->name), "%s", name);
    deadline = lock__add_ns(lock__now_ns(), lock__ms_to_ns(wait_ms));
    for (;;) {
        int64_t start = lock__now_ns(), elapsed_ms, validity, delay;
        int granted;

        out->attempts++;
        /* A fresh value per attempt: a late grant of a failed attempt (a reply that came
         * after we gave up on the node) can then never pass for this attempt's. */
        if (random_value(out->value, sizeof(out->value)) != 0)
            return LOCK_ERR_NOMEM;
        why[0] = '\0';
        attempt(r, out->attempts, name, out->value, lease_ms, &granted, &answered, why,
                sizeof(why));
        elapsed_ms = (lock__now_ns() - start) / LOCK__NS_PER_MS;
        validity = redlock_validity_ms(lease_ms, elapsed_ms, drift);
        if (redlock_acquired(granted, r->n, validity)) {
            out->granted = granted;
            out->validity_ms = validity;
            out->valid_until_ns = start + lock__ms_to_ns(validity);
            lock__error_clear();
            return LOCK_OK;
        }
        /* Not had: give back what was granted, at once, so that another client is not
         * kept out for a lease by our minority. */
        release_all(r, name, out->value);
        delay = r->retry_fixed ? r->retry_base_ms
                               : redlock_retry_delay_ms(r->retry_base_ms, random32());
        if (lock__now_ns() + lock__ms_to_ns(delay) >= deadline)
            break;
        sleep_ms(delay);
    }
    out->value[0] = '\0';
    if (answered < quorum) {
        lock__error_set("%d of %d nodes answered, %d needed (%s)", answered, r->n, quorum,
                        why[0] ? why : "no reason given");
        return LOCK_ERR_REDIS;
    }
    return LOCK_ERR_TIMEOUT;
}

int redlock_unlock(redlock *r, const redlock_holding *h)
{
    if (r == NULL || h == NULL || h->value[0] == '\0')
        return 0;
    return release_all(r, h->name, h->value);
}

int redlock_is_held(const redlock_holding *h)
{
    if (h == NULL || h->value[0] == '\0')
        return LOCK_ERR_NOT_HELD;
    return lock__now_ns() < h->valid_until_ns ? LOCK_OK : LOCK_ERR_LOST;
}
