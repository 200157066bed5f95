/*
 * sentinel.c - master discovery and +switch-master through Redis Sentinel (see sentinel.h).
 *
 * Each question opens its own short connection: discovery happens at start and after a
 * failover, rarely enough that keeping connections to every Sentinel would cost more (file
 * descriptors, reconnect logic) than it saves. The watch keeps one connection, subscribed.
 *
 * Timeouts: hiredis' blocking API waits as long as the socket timeout says, so every
 * connection here gets timeout_ms as its connect and socket timeout. The watch does not
 * block in hiredis at all while it waits for a message: it polls the socket for at most
 * wait_ms and only reads when bytes are there, so an idle wait does not break the
 * connection (a hiredis read timeout would: the context is unusable after one).
 */
#include "lock/sentinel.h"
#include "lock/clock.h"
#include "lock/conn.h"
#include "lock/error.h"
#include "lock/result.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Copies [start, end) into dst (NUL-terminated) without the spaces around it. */
static size_t copy_trimmed(char *dst, size_t cap, const char *start, const char *end)
{
    size_t len;

    while (start < end && *start == ' ')
        start++;
    while (end > start && end[-1] == ' ')
        end--;
    len = (size_t)(end - start);
    if (len >= cap)
        return cap; /* too long: the caller reports it */
    memcpy(dst, start, len);
    dst[len] = '\0';
    return len;
}

/* Parses one "host:port" entry of [start, end) into *a. */
static int parse_entry(lock__addr *a, const char *start, const char *end)
{
    char entry[LOCK_SENTINEL_HOST_MAX + 8];
    char *colon, *num_end;
    size_t len = copy_trimmed(entry, sizeof(entry), start, end);
    long port;

    if (len == 0 || len >= sizeof(entry)) {
        lock__error_set("sentinel list: empty or too long entry");
        return LOCK_ERR_INVALID;
    }
    colon = strrchr(entry, ':');
    if (colon == NULL || colon == entry || colon[1] == '\0') {
        lock__error_set("sentinel list: \"%s\" is not host:port", entry);
        return LOCK_ERR_INVALID;
    }
    *colon = '\0';
    if ((size_t)(colon - entry) >= sizeof(a->host)) {
        lock__error_set("sentinel list: host name too long");
        return LOCK_ERR_INVALID;
    }
    errno = 0;
    port = strtol(colon + 1, &num_end, 10);
    if (errno != 0 || *num_end != '\0' || port < 1 || port > 65535) {
        lock__error_set("sentinel list: \"%s\" is not a port (1..65535)", colon + 1);
        return LOCK_ERR_INVALID;
    }
    memcpy(a->host, entry, (size_t)(colon - entry) + 1);
    a->port = (int)port;
    return LOCK_OK;
}

int lock__sentinels_parse(lock__sentinels *out, const char *list, const char *master_name,
                          int timeout_ms)
{
    const char *p = list, *comma;
    int rc;

    lock__error_clear();
    memset(out, 0, sizeof(*out));
    if (list == NULL || master_name == NULL || master_name[0] == '\0' ||
        strlen(master_name) >= sizeof(out->master_name) || timeout_ms < 1) {
        lock__error_set("sentinels: a list, a master name and a timeout >= 1 ms are needed");
        return LOCK_ERR_INVALID;
    }
    for (;;) {
        comma = strchr(p, ',');
        if (out->count == LOCK_SENTINEL_MAX) {
            lock__error_set("sentinel list: more than %d entries", LOCK_SENTINEL_MAX);
            return LOCK_ERR_INVALID;
        }
        rc = parse_entry(&out->addr[out->count], p, comma != NULL ? comma : p + strlen(p));
        if (rc != LOCK_OK)
            return rc;
        out->count++;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    snprintf(out->master_name, sizeof(out->master_name), "%s", master_name);
    out->timeout_ms = timeout_ms;
    return LOCK_OK;
}

/* A blocking connection with timeout_ms for connect and for every read and write. */
static int connect_to(const lock__addr *a, int timeout_ms, redisContext **out)
{
    struct timeval tv = lock__timeval(lock__ms_to_ns(timeout_ms));
    redisContext *ctx = redisConnectWithTimeout(a->host, a->port, tv);

    *out = NULL;
    if (ctx == NULL) {
        lock__error_set("%s:%d: cannot allocate a connection", a->host, a->port);
        return LOCK_ERR_NOMEM;
    }
    if (ctx->err != 0 || redisSetTimeout(ctx, tv) != REDIS_OK) {
        lock__error_set("%s:%d: connect: %s", a->host, a->port, ctx->errstr);
        redisFree(ctx);
        return LOCK_ERR_REDIS;
    }
    *out = ctx;
    return LOCK_OK;
}

/* One command on a fresh connection to a; the reply is the caller's to free. */
static int ask(const lock__addr *a, int timeout_ms, int argc, const char **argv, redisReply **out)
{
    redisContext *ctx;
    int rc = connect_to(a, timeout_ms, &ctx);

    *out = NULL;
    if (rc != LOCK_OK)
        return rc;
    *out = redisCommandArgv(ctx, argc, argv, NULL);
    if (*out == NULL) {
        lock__error_set("%s:%d: %s: %s", a->host, a->port, argv[0],
                        ctx->errstr[0] != '\0' ? ctx->errstr : "no reply");
        rc = ctx->err == REDIS_ERR_OOM ? LOCK_ERR_NOMEM : LOCK_ERR_REDIS;
    }
    redisFree(ctx);
    return rc;
}

/* Fills *a from a reply that should be [host, port]. */
static int addr_from_reply(const redisReply *r, const lock__addr *sentinel, const char *name,
                           lock__addr *a)
{
    char *end;
    long port;

    if (r->type == REDIS_REPLY_NIL) {
        lock__error_set("sentinel %s:%d does not know master \"%s\"", sentinel->host,
                        sentinel->port, name);
        return LOCK_ERR_REDIS;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len >= sizeof(a->host)) {
        lock__error_set("sentinel %s:%d: unexpected answer to get-master-addr-by-name",
                        sentinel->host, sentinel->port);
        return LOCK_ERR_REDIS;
    }
    port = strtol(r->element[1]->str, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535) {
        lock__error_set("sentinel %s:%d: bad port \"%s\"", sentinel->host, sentinel->port,
                        r->element[1]->str);
        return LOCK_ERR_REDIS;
    }
    snprintf(a->host, sizeof(a->host), "%s", r->element[0]->str);
    a->port = (int)port;
    return LOCK_OK;
}

/* Whether the server at a says, through ROLE, that it is a master. */
static int check_is_master(const lock__addr *a, int timeout_ms)
{
    const char *argv[] = {"ROLE"};
    redisReply *r;
    int rc = ask(a, timeout_ms, 1, argv, &r);

    if (rc != LOCK_OK)
        return rc;
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "master") != 0) {
        lock__error_set("%s:%d is not a master (ROLE says %s)", a->host, a->port,
                        r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                                r->element[0]->type == REDIS_REPLY_STRING
                            ? r->element[0]->str
                            : "something else");
        rc = LOCK_ERR_REDIS;
    }
    freeReplyObject(r);
    return rc;
}

int lock__sentinel_master(const lock__sentinels *s, lock__addr *master)
{
    const char *argv[] = {"SENTINEL", "get-master-addr-by-name", s->master_name};
    int rc = LOCK_ERR_REDIS;

    lock__error_set("no sentinel to ask");
    for (int i = 0; i < s->count; i++) {
        redisReply *r;

        rc = ask(&s->addr[i], s->timeout_ms, 3, argv, &r);
        if (rc == LOCK_ERR_NOMEM)
            return rc;
        if (rc != LOCK_OK)
            continue;
        if (r->type == REDIS_REPLY_ERROR) {
            lock__error_set("sentinel %s:%d: %s", s->addr[i].host, s->addr[i].port, r->str);
            rc = LOCK_ERR_REDIS;
        } else {
            rc = addr_from_reply(r, &s->addr[i], s->master_name, master);
        }
        freeReplyObject(r);
        if (rc == LOCK_OK)
            rc = check_is_master(master, s->timeout_ms);
        if (rc == LOCK_OK || rc == LOCK_ERR_NOMEM)
            return rc;
    }
    return rc;
}

struct lock__sentinel_watch {
    const lock__sentinels *s;
    redisContext *ctx; /* subscribed to +switch-master; NULL when not connected */
    int next;          /* the Sentinel to try on the next connect */
};

lock__sentinel_watch *lock__sentinel_watch_create(const lock__sentinels *s)
{
    lock__sentinel_watch *w = calloc(1, sizeof(*w));

    if (w != NULL)
        w->s = s;
    return w;
}

static void watch_close(lock__sentinel_watch *w)
{
    if (w->ctx != NULL)
        redisFree(w->ctx);
    w->ctx = NULL;
}

void lock__sentinel_watch_destroy(lock__sentinel_watch *w)
{
    if (w == NULL)
        return;
    watch_close(w);
    free(w);
}

/* Connects to the next Sentinel and subscribes; the confirmation is read here. */
static int watch_connect(lock__sentinel_watch *w)
{
    const lock__addr *a = &w->s->addr[w->next];
    const char *argv[] = {"SUBSCRIBE", "+switch-master"};
    redisReply *r;
    int rc;

    w->next = (w->next + 1) % w->s->count;
    rc = connect_to(a, w->s->timeout_ms, &w->ctx);
    if (rc != LOCK_OK)
        return rc;
    r = redisCommandArgv(w->ctx, 2, argv, NULL);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        lock__error_set("sentinel %s:%d: SUBSCRIBE failed: %s", a->host, a->port,
                        r == NULL ? w->ctx->errstr : "unexpected reply");
        if (r != NULL)
            freeReplyObject(r);
        watch_close(w);
        return LOCK_ERR_REDIS;
    }
    freeReplyObject(r);
    return LOCK_OK;
}

/*
 * Reads "<name> <old-ip> <old-port> <new-ip> <new-port>" from a pub/sub message. Returns
 * LOCK_OK for our master, LOCK_ERR_TIMEOUT for another message (skipped), LOCK_ERR_REDIS for a
 * malformed one.
 */
static int parse_switch(const lock__sentinel_watch *w, const redisReply *r, lock__addr *master)
{
    char name[128], host[LOCK_SENTINEL_HOST_MAX];
    int port;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "message") != 0 ||
        r->element[2]->type != REDIS_REPLY_STRING)
        return LOCK_ERR_TIMEOUT;
    if (sscanf(r->element[2]->str, "%127s %*s %*d %255s %d", name, host, &port) != 3 || port < 1 ||
        port > 65535) {
        lock__error_set("sentinel: malformed +switch-master \"%s\"", r->element[2]->str);
        return LOCK_ERR_REDIS;
    }
    if (strcmp(name, w->s->master_name) != 0)
        return LOCK_ERR_TIMEOUT;
    snprintf(master->host, sizeof(master->host), "%s", host);
    master->port = port;
    return LOCK_OK;
}

int lock__sentinel_watch_wait(lock__sentinel_watch *w, int wait_ms, lock__addr *master)
{
    int64_t deadline = lock__add_ns(lock__now_ns(), lock__ms_to_ns(wait_ms < 0 ? 0 : wait_ms));
    int rc;

    lock__error_clear();
    if (w->ctx == NULL) {
        rc = watch_connect(w);
        if (rc != LOCK_OK)
            return rc;
    }
    for (;;) {
        void *reply = NULL;
        struct pollfd pfd = {.fd = w->ctx->fd, .events = POLLIN};
        int64_t left;

        /* A message already read into hiredis' buffer comes first. */
        if (redisReaderGetReply(w->ctx->reader, &reply) != REDIS_OK) {
            lock__error_set("sentinel: protocol error: %s", w->ctx->reader->errstr);
            watch_close(w);
            return LOCK_ERR_REDIS;
        }
        if (reply == NULL) {
            left = deadline - lock__now_ns();
            if (left <= 0)
                return LOCK_ERR_TIMEOUT;
            left = (left + LOCK__NS_PER_MS - 1) / LOCK__NS_PER_MS;
            rc = poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left);
            if (rc < 0 && errno == EINTR)
                continue;
            if (rc == 0)
                return LOCK_ERR_TIMEOUT;
            /* Readable: at least one byte (or EOF) is there, so this read does not wait
             * longer than the socket timeout for the rest of a message. */
            if (rc < 0 || redisGetReply(w->ctx, &reply) != REDIS_OK) {
                lock__error_set("sentinel: subscription lost: %s",
                                rc < 0 ? strerror(errno) : w->ctx->errstr);
                watch_close(w);
                return LOCK_ERR_REDIS;
            }
        }
        rc = parse_switch(w, reply, master);
        freeReplyObject(reply);
        if (rc != LOCK_ERR_TIMEOUT)
            return rc;
    }
}

/* ---- the follower ---- */

#define FOLLOW_WAIT_MS 200 /* one wait of the watch: how soon stop is noticed */

struct lock__sentinel_follower {
    const lock__sentinels *s;
    lock__conn_address *addr;
    void (*moved)(void *arg);
    void *arg;
    lock__sentinel_watch *watch;
    pthread_t thread;
    atomic_bool stop;
    atomic_bool nudged; /* the lock's connections met an error: ask at the next wait */
};

/* Asks the Sentinels and moves the address when the checked master is elsewhere. Returns
 * false when no checked master was found (no Sentinel answered, or the server named did not
 * say "master" to ROLE: a promotion still under way, say). */
static bool follow_master(lock__sentinel_follower *f)
{
    lock__addr master;

    if (lock__sentinel_master(f->s, &master) != LOCK_OK)
        return false;
    if (lock__conn_address_move(f->addr, master.host, master.port))
        f->moved(f->arg);
    return true;
}

static void *follower_main(void *arg)
{
    lock__sentinel_follower *f = arg;
    sigset_t pipe_set;

    /* See watchdog.c: a write to a closed connection must not kill the process. */
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);

    /* unsure: the last ask found no checked master, so the address may be stale; ask again
     * after every wait until one is found, not only on the next +switch-master (which may
     * never come: the switch that moved the master has been announced already). */
    bool unsure = !follow_master(f);
    int64_t asked = lock__now_ns();

    while (!atomic_load(&f->stop)) {
        lock__addr heard;
        int rc = lock__sentinel_watch_wait(f->watch, FOLLOW_WAIT_MS, &heard);
        /* The watch proves nothing while its Sentinel is silent: ask anyway now and then,
         * and when the lock's connections said something is wrong (sentinel.h). */
        bool due = lock__now_ns() - asked >= lock__ms_to_ns(LOCK_SENTINEL_RECHECK_MS) ||
                   atomic_exchange(&f->nudged, false);

        if (rc == LOCK_ERR_TIMEOUT && !unsure && !due)
            continue;
        asked = lock__now_ns();
        /* A switch (check it before trusting it), a broken watch (one may have been
         * missed), or still unsure: ask. After an error, pause so a dead Sentinel list does
         * not spin. */
        unsure = !follow_master(f);
        if (rc != LOCK_OK && rc != LOCK_ERR_TIMEOUT) {
            struct timespec pause = {0, FOLLOW_WAIT_MS * 1000000L};
            nanosleep(&pause, NULL);
        }
    }
    return NULL;
}

int lock__sentinel_follower_start(const lock__sentinels *s, lock__conn_address *addr,
                                  void (*moved)(void *arg), void *arg,
                                  lock__sentinel_follower **out)
{
    lock__sentinel_follower *f = calloc(1, sizeof(*f));

    *out = NULL;
    if (f == NULL)
        return LOCK_ERR_NOMEM;
    f->s = s;
    f->addr = addr;
    f->moved = moved;
    f->arg = arg;
    atomic_init(&f->stop, false);
    atomic_init(&f->nudged, false);
    f->watch = lock__sentinel_watch_create(s);
    if (f->watch == NULL || pthread_create(&f->thread, NULL, follower_main, f) != 0) {
        lock__sentinel_watch_destroy(f->watch);
        free(f);
        return LOCK_ERR_NOMEM;
    }
    *out = f;
    return LOCK_OK;
}

void lock__sentinel_follower_nudge(lock__sentinel_follower *f)
{
    if (f != NULL)
        atomic_store(&f->nudged, true);
}

void lock__sentinel_follower_stop(lock__sentinel_follower *f)
{
    if (f == NULL)
        return;
    atomic_store(&f->stop, true);
    pthread_join(f->thread, NULL);
    lock__sentinel_watch_destroy(f->watch);
    free(f);
}
