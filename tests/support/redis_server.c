/*
 * redis_server.c - a throwaway redis-server for tests (see redis_server.h).
 *
 * The port: draw one from 20000-32767 (below the ephemeral range; see free_port), check that
 * it can be bound on 127.0.0.1, and hand the number to redis-server. Another program could
 * take the port in between; then redis-server fails to start and a new port is tried (a few
 * times).
 *
 * The server runs in the foreground as our child (child.h: fork + exec, stopped by its PID,
 * never by name). It is ready when PING answers PONG.
 */
#include "tests/support/redis_server.h"
#include "tests/support/child.h"
#include "tests/support/files.h"
#include "tests/support/ports.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define START_TRIES 5
#define READY_WAIT_MS 5000
#define STOP_WAIT_MS 5000

struct redis_server {
    char dir[64];
    int port;
    pid_t pid;     /* -1 while stopped */
    bool conf;     /* started with <dir>/redis.conf as its first argument */
    bool sentinel; /* ... and --sentinel */
};

/* Starts redis-server in the foreground on s->port with s->dir; with a config file
 * first when s->conf (a Sentinel needs one: it rewrites it), and --sentinel when asked. */
static int spawn(redis_server *s)
{
    char port[16];
    char logfile[96];
    char program[512];
    char conf[96];
    const char *argv[32];
    int n = 0;

    snprintf(port, sizeof(port), "%d", s->port);
    snprintf(logfile, sizeof(logfile), "%s/redis.log", s->dir);
    snprintf(conf, sizeof(conf), "%s/redis.conf", s->dir);
    if (child_find_program("redis-server", "redis-server", program, sizeof(program)) != 0)
        return -1;
    argv[n++] = "redis-server";
    if (s->conf)
        argv[n++] = conf; /* the file comes first; the options below override it */
    if (s->sentinel)
        argv[n++] = "--sentinel";
    argv[n++] = "--port", argv[n++] = port;
    argv[n++] = "--bind", argv[n++] = "127.0.0.1";
    argv[n++] = "--dir", argv[n++] = s->dir;
    argv[n++] = "--save", argv[n++] = "";
    argv[n++] = "--appendonly", argv[n++] = "no";
    argv[n++] = "--daemonize", argv[n++] = "no";
    argv[n++] = "--logfile", argv[n++] = logfile;
    /* DEBUG SLEEP stands in for a Redis that runs a command but whose reply comes too late
     * (Redis 7 refuses DEBUG unless enabled). A Sentinel has no use for it. */
    if (!s->sentinel)
        argv[n++] = "--enable-debug-command", argv[n++] = "yes";
    /* A replica's full sync starts at once, not after the default 5 s that lets a master
     * serve several replicas with one transfer (the tests have one). */
    if (!s->sentinel)
        argv[n++] = "--repl-diskless-sync-delay", argv[n++] = "0";
    argv[n] = NULL;
    s->pid = child_spawn(program, argv, NULL); /* it writes its own log (--logfile) */
    return s->pid > 0 ? 0 : -1;
}

/* Whether PING answers PONG right now (arg: the redis_server). */
static bool answers_ping(const void *arg)
{
    int port = ((const redis_server *)arg)->port;
    struct timeval tv = {0, 200000};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    bool ok = false;

    if (ctx == NULL || ctx->err != 0)
        goto out;
    r = redisCommand(ctx, "PING");
    ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
out:
    if (r != NULL)
        freeReplyObject(r);
    if (ctx != NULL)
        redisFree(ctx);
    return ok;
}

/* Waits for the child to answer PING; -1 if it exits or takes too long (then it is gone). */
static int wait_ready(redis_server *s)
{
    return child_wait_ready(&s->pid, answers_ping, s, 10, READY_WAIT_MS);
}

int redis_server_start(redis_server **out)
{
    return redis_server_start_conf(out, NULL, false);
}

/* Writes text to <dir>/redis.conf. */
static int write_conf(const redis_server *s, const char *text)
{
    char path[96];
    FILE *f;

    snprintf(path, sizeof(path), "%s/redis.conf", s->dir);
    f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fputs(text, f);
    return fclose(f) == 0 ? 0 : -1;
}

int redis_server_start_conf(redis_server **out, const char *conf, bool sentinel)
{
    redis_server *s;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    s->pid = -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/test-redis.XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        fprintf(stderr, "redis_server: mkdtemp: %s\n", strerror(errno));
        free(s);
        return -1;
    }
    s->conf = conf != NULL;
    s->sentinel = sentinel;
    if (s->conf && write_conf(s, conf) != 0) {
        fprintf(stderr, "redis_server: cannot write %s/redis.conf\n", s->dir);
        redis_server_destroy(s);
        return -1;
    }
    for (int i = 0; i < START_TRIES; i++) {
        s->port = support_free_port();
        if (s->port <= 0)
            continue;
        if (spawn(s) == 0 && wait_ready(s) == 0) {
            *out = s;
            return 0;
        }
    }
    fprintf(stderr, "redis_server: redis-server did not start (see %s/redis.log)\n", s->dir);
    redis_server_destroy(s);
    return -1;
}

int redis_server_port(const redis_server *s)
{
    return s->port;
}

int redis_server_pid(const redis_server *s)
{
    return s->pid;
}

int redis_server_kill(redis_server *s)
{
    return child_kill(&s->pid);
}

int redis_server_stop(redis_server *s)
{
    return child_stop(&s->pid, STOP_WAIT_MS);
}

int redis_server_restart(redis_server *s)
{
    /* The port is free again as soon as the old server is gone (redis-server binds with
     * SO_REUSEADDR), but allow for a slow exit. */
    for (int i = 0; i < START_TRIES; i++) {
        if (s->pid > 0)
            return 0;
        if (spawn(s) == 0 && wait_ready(s) == 0)
            return 0;
        child_sleep_ms(100);
    }
    return -1;
}

void redis_server_destroy(redis_server *s)
{
    if (s == NULL)
        return;
    if (s->pid > 0)
        redis_server_stop(s);
    support_remove_dir(s->dir);
    free(s);
}
