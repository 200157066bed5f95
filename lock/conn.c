/*
 * conn.c - a command connection with lazy reconnect and per-command deadlines (see conn.h).
 */
#include "lock/conn.h"
#include "lock/clock.h"
#include "lock/error.h"
#include "lock/result.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int lock__conn_address_init(lock__conn_address *a, const char *host, int port)
{
    if (strlen(host) >= sizeof(a->host))
        return LOCK_ERR_INVALID;
    if (pthread_mutex_init(&a->mu, NULL) != 0)
        return LOCK_ERR_NOMEM;
    snprintf(a->host, sizeof(a->host), "%s", host);
    a->port = port;
    atomic_init(&a->epoch, 0);
    return LOCK_OK;
}

void lock__conn_address_destroy(lock__conn_address *a)
{
    pthread_mutex_destroy(&a->mu);
}

unsigned lock__conn_address_get(lock__conn_address *a, char *host, int *port)
{
    unsigned epoch;

    pthread_mutex_lock(&a->mu);
    memcpy(host, a->host, sizeof(a->host));
    *port = a->port;
    epoch = atomic_load(&a->epoch);
    pthread_mutex_unlock(&a->mu);
    return epoch;
}

bool lock__conn_address_move(lock__conn_address *a, const char *host, int port)
{
    bool moved = false;

    if (strlen(host) >= sizeof(a->host))
        return false;
    pthread_mutex_lock(&a->mu);
    if (strcmp(a->host, host) != 0 || a->port != port) {
        snprintf(a->host, sizeof(a->host), "%s", host);
        a->port = port;
        atomic_fetch_add(&a->epoch, 1);
        moved = true;
    }
    pthread_mutex_unlock(&a->mu);
    return moved;
}

void lock__conn_init(lock__conn *conn, const lock__conn_config *cfg)
{
    conn->cfg = cfg;
    conn->ctx = NULL;
    conn->timeout_ns = -1;
    conn->follow_argc = 0;
    conn->follow_argv = NULL;
}

void lock__conn_set_follow_up(lock__conn *conn, int argc, const char **argv)
{
    conn->follow_argc = argc;
    conn->follow_argv = argc > 0 ? argv : NULL;
}

/* Writes the follow-up behind a command that got no reply (lock__conn_set_follow_up): one
 * non-blocking send of a few hundred bytes into an idle socket's buffer; a short write or
 * none at all leaves it unsent (Redis drops a command cut by the close). Written is not run:
 * the caller never counts on it. */
static void write_follow_up(lock__conn *conn)
{
    char *cmd = NULL;
    long long len;

    len = redisFormatCommandArgv(&cmd, conn->follow_argc, conn->follow_argv, NULL);
    if (len <= 0 || cmd == NULL)
        return;
    if (send(conn->ctx->fd, cmd, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
        /* unsent: the first lease bounds what the command left */
    }
    redisFreeCommand(cmd);
}

void lock__conn_close(lock__conn *conn)
{
    if (conn->ctx != NULL)
        redisFree(conn->ctx);
    conn->ctx = NULL;
    conn->timeout_ns = -1;
}

static int64_t min_ns(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Connects, waiting no longer than the connect timeout nor past the deadline. */
static int conn_connect(lock__conn *conn, int64_t deadline_ns)
{
    int64_t left = deadline_ns - lock__now_ns();
    redisContext *ctx;

    conn->epoch = lock__conn_address_get(conn->cfg->addr, conn->host, &conn->port);
    if (left <= 0) {
        lock__error_set("redis %s:%d: no time left to connect", conn->host, conn->port);
        return LOCK_ERR_REDIS;
    }
    left = min_ns(left, lock__ms_to_ns(conn->cfg->connect_timeout_ms));
    ctx = redisConnectWithTimeout(conn->host, conn->port, lock__timeval(left));
    if (ctx == NULL) {
        lock__error_set("redis %s:%d: cannot allocate a connection", conn->host, conn->port);
        return LOCK_ERR_NOMEM;
    }
    if (ctx->err != 0) {
        lock__error_set("redis %s:%d: connect: %s", conn->host, conn->port, ctx->errstr);
        lock__error_met(LOCK_MET_UNREACHABLE, 0);
        redisFree(ctx);
        return LOCK_ERR_REDIS;
    }
    conn->ctx = ctx;
    conn->timeout_ns = -1; /* unknown: set before the first command */
    return LOCK_OK;
}

/*
 * Whether an idle connection was closed by the other side while it sat in the pool (Redis
 * restarted, a failover, CLIENT KILL, an idle timeout). Between commands nothing should be
 * waiting to be read: if the socket is readable, it holds an EOF (or stray bytes), and the
 * connection is not worth a command. Checking costs one poll() with no wait, and saves the
 * caller an error after every Redis restart.
 */
static bool conn_is_stale(const lock__conn *conn)
{
    struct pollfd pfd = {.fd = conn->ctx->fd, .events = POLLIN | POLLRDHUP};

    return poll(&pfd, 1, 0) != 0;
}

/*
 * Sets the socket timeout for the next round trip: the configured command timeout, or what
 * is left before the deadline if that is shorter. setsockopt() is a syscall, so the value
 * is rounded down to a whole millisecond and left alone while it is within
 * TIMEOUT_SLACK_NS under the target: a stream of try_lock(wait 0) calls, each with a
 * deadline just under one command timeout away, then sets it once rather than every call.
 * The timeout never ends after the deadline.
 */
#define TIMEOUT_SLACK_NS (5 * LOCK__NS_PER_MS)

static int conn_set_timeout(lock__conn *conn, int64_t deadline_ns)
{
    int64_t left = deadline_ns - lock__now_ns();
    int64_t want = lock__ms_to_ns(conn->cfg->command_timeout_ms);

    if (left <= 0) {
        lock__error_set("redis %s:%d: no time left for the command", conn->host, conn->port);
        return LOCK_ERR_REDIS;
    }
    if (left < want)
        want = left;
    if (conn->timeout_ns > 0 && conn->timeout_ns <= want &&
        conn->timeout_ns >= want - TIMEOUT_SLACK_NS)
        return LOCK_OK;
    if (want > LOCK__NS_PER_MS)
        want -= want % LOCK__NS_PER_MS;
    if (redisSetTimeout(conn->ctx, lock__timeval(want)) != REDIS_OK) {
        lock__error_set("redis %s:%d: set timeout: %s", conn->host, conn->port, conn->ctx->errstr);
        return LOCK_ERR_REDIS;
    }
    conn->timeout_ns = want;
    return LOCK_OK;
}

int lock__conn_command(lock__conn *conn, int64_t deadline_ns, int argc, const char **argv,
                       const size_t *lens, redisReply **out)
{
    redisReply *reply;
    int rc;

    *out = NULL;
    /* A connection to where Redis was before a failover is dropped, open or not. */
    if (conn->ctx != NULL &&
        (conn->epoch != atomic_load(&conn->cfg->addr->epoch) || conn_is_stale(conn)))
        lock__conn_close(conn);
    if (conn->ctx == NULL) {
        rc = conn_connect(conn, deadline_ns);
        if (rc != LOCK_OK)
            goto fail;
    }
    rc = conn_set_timeout(conn, deadline_ns);
    if (rc != LOCK_OK)
        goto fail;
    reply = redisCommandArgv(conn->ctx, argc, argv, lens);
    if (reply == NULL) {
        /* I/O error, timeout or EOF: the context is unusable (a late reply could still
         * arrive on it), so it is closed and the next command reconnects. A timeout is said
         * as one: hiredis reports it as the read's errno, "Resource temporarily
         * unavailable", which tells a reader of the 503 nothing. */
        int read_errno = errno;
        if (conn->ctx->err == REDIS_ERR_IO && (read_errno == EAGAIN || read_errno == EWOULDBLOCK)) {
            lock__error_set("redis %s:%d: %s: no answer within %lld ms", conn->host, conn->port,
                            argv[0], (long long)(conn->timeout_ns / LOCK__NS_PER_MS));
            lock__error_met(LOCK_MET_NO_ANSWER, (long long)(conn->timeout_ns / LOCK__NS_PER_MS));
        } else {
            lock__error_set("redis %s:%d: %s: %s", conn->host, conn->port, argv[0],
                            conn->ctx->errstr[0] != '\0' ? conn->ctx->errstr : "no reply");
            lock__error_met(LOCK_MET_UNREACHABLE, 0);
        }
        rc = conn->ctx->err == REDIS_ERR_OOM ? LOCK_ERR_NOMEM : LOCK_ERR_REDIS;
        if (conn->follow_argc > 0)
            write_follow_up(conn);
        goto fail;
    }
    conn->follow_argc = 0;
    *out = reply;
    return LOCK_OK;

fail:
    conn->follow_argc = 0;
    lock__conn_close(conn);
    return rc;
}
