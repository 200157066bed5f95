/*
 * etcd_server.c - a throwaway etcd for tests (see etcd_server.h).
 *
 * Ports are drawn from 20000-32767, as scripts/lib/ports.sh draws them: below Linux's
 * ephemeral range (32768-60999), so no outgoing connection takes one between our check and
 * etcd's bind. A port is free when a bind to it succeeds; the socket is closed and the
 * number handed on, and a new pair is tried when etcd then fails to bind. The server is our
 * child (child.h: fork + exec, stopped by its PID). It is ready when GET /health answers
 * {"health":"true"}.
 */
#include "tests/support/etcd_server.h"
#include "tests/support/child.h"
#include "tests/support/files.h"
#include "tests/support/ports.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define START_TRIES 3
#define READY_WAIT_MS 20000
#define STOP_WAIT_MS 5000

struct etcd_server {
    char dir[64];
    char endpoint[64];
    int client_port, peer_port;
    pid_t pid;
};

static int spawn(etcd_server *s)
{
    char program[256], data[96], logfile[96], client[64], peer[64], cluster[96];
    const char *bin = getenv("ETCD_BIN");

    if (child_find_program(bin != NULL ? bin : "/usr/bin/etcd", "etcd-server", program,
                           sizeof(program)) != 0)
        return -1;
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(logfile, sizeof(logfile), "%s/etcd.log", s->dir);
    snprintf(client, sizeof(client), "http://127.0.0.1:%d", s->client_port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%d", s->peer_port);
    snprintf(cluster, sizeof(cluster), "test=%s", peer);
    const char *const argv[] = {"etcd",  "--name",
                                "test",  "--data-dir",
                                data,    "--listen-client-urls",
                                client,  "--advertise-client-urls",
                                client,  "--listen-peer-urls",
                                peer,    "--initial-advertise-peer-urls",
                                peer,    "--initial-cluster",
                                cluster, "--listen-metrics-urls",
                                "",      NULL};
    s->pid = child_spawn(program, argv, logfile);
    return s->pid > 0 ? 0 : -1;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    bool *healthy = ud;

    if (memmem(p, size * n, "\"true\"", 6) != NULL)
        *healthy = true;
    return size * n;
}

static bool healthy(const void *arg)
{
    const etcd_server *s = arg;
    char url[96];
    bool ok = false;
    CURL *h = curl_easy_init();

    if (h == NULL)
        return false;
    snprintf(url, sizeof(url), "%s/health", s->endpoint);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 500L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &ok);
    if (curl_easy_perform(h) != CURLE_OK)
        ok = false;
    curl_easy_cleanup(h);
    return ok;
}

static int wait_ready(etcd_server *s)
{
    return child_wait_ready(&s->pid, healthy, s, 50, READY_WAIT_MS);
}

int etcd_server_start(etcd_server **out)
{
    etcd_server *s;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    s->pid = -1;
    snprintf(s->dir, sizeof(s->dir), "/tmp/test-etcd.XXXXXX");
    if (mkdtemp(s->dir) == NULL) {
        free(s);
        return -1;
    }
    for (int i = 0; i < START_TRIES; i++) {
        s->client_port = support_free_port();
        s->peer_port = support_free_port();
        if (s->client_port <= 0 || s->peer_port <= 0 || s->client_port == s->peer_port)
            continue;
        snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d", s->client_port);
        if (spawn(s) == 0 && wait_ready(s) == 0) {
            *out = s;
            return 0;
        }
    }
    fprintf(stderr, "etcd_server: etcd did not start (see %s/etcd.log)\n", s->dir);
    etcd_server_destroy(s);
    return -1;
}

const char *etcd_server_endpoint(const etcd_server *s)
{
    return s->endpoint;
}

int etcd_server_stop(etcd_server *s)
{
    return child_stop(&s->pid, STOP_WAIT_MS);
}

int etcd_server_freeze(etcd_server *s)
{
    return child_freeze(s->pid);
}

int etcd_server_thaw(etcd_server *s)
{
    return child_thaw(s->pid);
}

int etcd_server_restart(etcd_server *s)
{
    for (int i = 0; i < START_TRIES; i++) {
        if (s->pid > 0)
            return 0;
        if (spawn(s) == 0 && wait_ready(s) == 0)
            return 0;
        child_sleep_ms(200);
    }
    return -1;
}

void etcd_server_destroy(etcd_server *s)
{
    if (s == NULL)
        return;
    if (s->pid > 0)
        etcd_server_stop(s);
    support_remove_dir(s->dir);
    free(s);
}
