/*
 * relay.c - a TCP relay that loses replies on purpose (see relay.h).
 *
 * One thread, one poll() over the listener, a wake-up pipe and both ends of every connection.
 * Each connection remembers the fault it triggered (a pair's fault is sticky: a client that
 * lost a reply on a connection normally drops that connection, and a new one passes again).
 * Delayed replies wait in the pair's queue, in order, until their time; poll() sleeps no
 * longer than the first of them.
 */
#include "tests/support/relay.h"
#include "tests/support/ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MATCH_MAX 128
#define PAIRS_MAX 512
#define CHUNK_MAX 65536

typedef struct chunk {
    struct chunk *next;
    int64_t due_ns;
    size_t len;
    char data[];
} chunk;

typedef struct pair {
    struct pair *next;
    int cfd;           /* the client's side */
    int sfd;           /* the server's side; -1: none (a hanging connection) */
    relay_fault fault; /* what this connection triggered; RELAY_PASS: nothing yet */
    int delay_ms;
    chunk *head, *tail; /* delayed replies, oldest first */
} pair;

struct relay {
    int listen_fd;
    int port;
    int target_port;
    int wake[2]; /* a byte written to wake[1] ends the thread's poll() */
    pthread_t thread;
    pthread_mutex_t mu; /* guards the fields below */
    relay_fault fault;
    int delay_ms;
    char match[MATCH_MAX];
    int count_left; /* triggers left; -1: no limit */
    struct {        /* the fault that follows once count_left reaches 0 (relay_then) */
        bool set;
        relay_fault fault;
        int delay_ms;
        char match[MATCH_MAX];
        int count;
    } then;
    int triggered;
    bool heal;    /* PASS was set: close the hanging connections */
    bool stopped; /* relay_stop was called */
    pair *pairs;  /* touched by the thread only */
};

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void wake_thread(relay *r)
{
    char b = 1;

    if (write(r->wake[1], &b, 1) < 0) {
        /* The pipe is full: the thread is awake already. */
    }
}

int relay_listen_loopback(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    if (fd < 0)
        return -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 128) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int connect_to(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    if (fd < 0)
        return -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Writes all of buf; false if the peer is gone. Loopback peers read promptly. */
static bool write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        buf += n;
        len -= (size_t)n;
    }
    return true;
}

static void pair_close(relay *r, pair *p)
{
    pair **at = &r->pairs;

    while (*at != p)
        at = &(*at)->next;
    *at = p->next;
    close(p->cfd);
    if (p->sfd >= 0)
        close(p->sfd);
    while (p->head != NULL) {
        chunk *c = p->head;

        p->head = c->next;
        free(c);
    }
    free(p);
}

static void pair_add(relay *r, int cfd, int sfd, relay_fault fault)
{
    pair *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        close(cfd);
        if (sfd >= 0)
            close(sfd);
        return;
    }
    p->cfd = cfd;
    p->sfd = sfd;
    p->fault = fault;
    p->next = r->pairs;
    r->pairs = p;
}

static void accept_one(relay *r)
{
    int cfd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC), sfd, one = 1;
    bool partitioned;

    if (cfd < 0)
        return;
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    pthread_mutex_lock(&r->mu);
    partitioned = r->fault == RELAY_DROP && r->count_left != 0;
    pthread_mutex_unlock(&r->mu);
    if (partitioned) {
        pair_add(r, cfd, -1, RELAY_DROP); /* accepted, never answered */
        return;
    }
    sfd = connect_to(r->target_port);
    if (sfd < 0) {
        close(cfd); /* the server is down: so is the way through */
        return;
    }
    pair_add(r, cfd, sfd, RELAY_PASS);
}

/* Whether a request of len bytes triggers the fault now; if so, counts it and returns the
 * fault and its delay. */
static relay_fault trigger(relay *r, const char *buf, size_t len, int *delay_ms)
{
    relay_fault f = RELAY_PASS;

    pthread_mutex_lock(&r->mu);
    if (r->fault != RELAY_PASS && r->count_left != 0 &&
        (r->match[0] == '\0' || memmem(buf, len, r->match, strlen(r->match)) != NULL)) {
        f = r->fault;
        *delay_ms = r->delay_ms;
        r->triggered++;
        if (r->count_left > 0 && --r->count_left == 0) {
            r->fault = r->then.set ? r->then.fault : RELAY_PASS;
            r->delay_ms = r->then.delay_ms;
            memcpy(r->match, r->then.match, sizeof(r->match));
            r->count_left = r->then.set ? r->then.count : 0;
            r->then.set = false;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return f;
}

/* A request from the client. Returns false when the pair was closed. */
static bool from_client(relay *r, pair *p)
{
    char buf[CHUNK_MAX];
    ssize_t n = recv(p->cfd, buf, sizeof(buf), 0);
    relay_fault f;
    int delay_ms = 0;

    if (n <= 0) {
        pair_close(r, p);
        return false;
    }
    if (p->fault == RELAY_DROP)
        return true; /* partitioned: lost */
    f = trigger(r, buf, (size_t)n, &delay_ms);
    if (f == RELAY_CUT_REQUEST) {
        pair_close(r, p);
        return false;
    }
    if (f != RELAY_PASS) {
        p->fault = f;
        p->delay_ms = delay_ms;
    }
    if (f == RELAY_DROP)
        return true;
    if (!write_all(p->sfd, buf, (size_t)n)) {
        pair_close(r, p);
        return false;
    }
    return true;
}

/* A reply from the server. Returns false when the pair was closed. */
static bool from_server(relay *r, pair *p)
{
    char buf[CHUNK_MAX];
    ssize_t n = recv(p->sfd, buf, sizeof(buf), 0);
    chunk *c;

    if (n <= 0 || p->fault == RELAY_CUT_REPLY) {
        pair_close(r, p); /* the server closed, or the reply is cut: both sides go */
        return false;
    }
    switch (p->fault) {
    case RELAY_SWALLOW:
    case RELAY_DROP:
        return true;
    case RELAY_DELAY:
        c = malloc(sizeof(*c) + (size_t)n);
        if (c == NULL) {
            pair_close(r, p);
            return false;
        }
        c->next = NULL;
        c->due_ns = now_ns() + (int64_t)p->delay_ms * 1000000;
        c->len = (size_t)n;
        memcpy(c->data, buf, (size_t)n);
        if (p->tail != NULL)
            p->tail->next = c;
        else
            p->head = c;
        p->tail = c;
        return true;
    default:
        if (!write_all(p->cfd, buf, (size_t)n)) {
            pair_close(r, p);
            return false;
        }
        return true;
    }
}

/* Passes on the delayed replies that are due; returns ms until the next one (-1: none). */
static int flush_due(relay *r)
{
    int64_t now = now_ns(), next = -1;
    pair *p = r->pairs, *following;

    for (; p != NULL; p = following) {
        following = p->next;
        while (p->head != NULL && p->head->due_ns <= now) {
            chunk *c = p->head;
            bool ok = write_all(p->cfd, c->data, c->len);

            p->head = c->next;
            if (p->head == NULL)
                p->tail = NULL;
            free(c);
            if (!ok) {
                pair_close(r, p);
                break;
            }
        }
    }
    for (p = r->pairs; p != NULL; p = p->next)
        if (p->head != NULL && (next < 0 || p->head->due_ns < next))
            next = p->head->due_ns;
    return next < 0 ? -1 : (int)((next - now) / 1000000 + 1);
}

static void heal_if_asked(relay *r)
{
    bool heal;
    pair *p, *following;

    pthread_mutex_lock(&r->mu);
    heal = r->heal;
    r->heal = false;
    pthread_mutex_unlock(&r->mu);
    if (!heal)
        return;
    for (p = r->pairs; p != NULL; p = following) {
        following = p->next;
        if (p->fault == RELAY_DROP)
            pair_close(r, p);
    }
}

static void *relay_main(void *arg)
{
    relay *r = arg;
    struct pollfd fds[2 + 2 * PAIRS_MAX];
    pair *owners[2 + 2 * PAIRS_MAX];

    for (;;) {
        int nfds = 0, timeout;
        bool stopped;

        pthread_mutex_lock(&r->mu);
        stopped = r->stopped;
        pthread_mutex_unlock(&r->mu);
        if (stopped)
            break;
        heal_if_asked(r);
        timeout = flush_due(r);
        fds[nfds++] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
        fds[nfds++] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
        for (pair *p = r->pairs; p != NULL && nfds < 2 + 2 * PAIRS_MAX - 1; p = p->next) {
            owners[nfds] = p;
            fds[nfds++] = (struct pollfd){.fd = p->cfd, .events = POLLIN};
            if (p->sfd >= 0) {
                owners[nfds] = p;
                fds[nfds++] = (struct pollfd){.fd = p->sfd, .events = POLLIN};
            }
        }
        if (poll(fds, (nfds_t)nfds, timeout < 0 ? 1000 : timeout) <= 0)
            continue;
        if (fds[0].revents != 0) {
            char drain[64];

            if (read(r->wake[0], drain, sizeof(drain)) < 0) {
                /* nothing to drain */
            }
            continue; /* the pair list may have changed meaning (heal, stop): look again */
        }
        if (fds[1].revents & POLLIN)
            accept_one(r);
        /* One event per pass: an event may close its pair, which the later entries of this
         * pass would still name. */
        for (int i = 2; i < nfds; i++) {
            if (fds[i].revents == 0)
                continue;
            if (fds[i].fd == owners[i]->cfd)
                from_client(r, owners[i]);
            else
                from_server(r, owners[i]);
            break;
        }
    }
    while (r->pairs != NULL)
        pair_close(r, r->pairs);
    return NULL;
}

int relay_start(int listen_port, int target_port, relay **out)
{
    relay *r = calloc(1, sizeof(*r));

    *out = NULL;
    if (r == NULL)
        return -1;
    r->target_port = target_port;
    r->count_left = 0;
    r->fault = RELAY_PASS;
    for (int tries = 0; tries < 20; tries++) {
        r->port = listen_port > 0 ? listen_port : support_free_port();
        r->listen_fd = r->port > 0 ? relay_listen_loopback(r->port) : -1;
        if (r->listen_fd >= 0 || listen_port > 0)
            break;
    }
    if (r->listen_fd < 0) {
        fprintf(stderr, "relay: cannot listen on 127.0.0.1:%d: %s\n", r->port, strerror(errno));
        free(r);
        return -1;
    }
    if (pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        close(r->listen_fd);
        free(r);
        return -1;
    }
    pthread_mutex_init(&r->mu, NULL);
    if (pthread_create(&r->thread, NULL, relay_main, r) != 0) {
        close(r->listen_fd);
        close(r->wake[0]);
        close(r->wake[1]);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

int relay_port(const relay *r)
{
    return r->port;
}

void relay_set(relay *r, relay_fault fault, int delay_ms, const char *match, int count)
{
    pthread_mutex_lock(&r->mu);
    r->fault = fault;
    r->delay_ms = delay_ms;
    snprintf(r->match, sizeof(r->match), "%s", match != NULL ? match : "");
    r->count_left = fault == RELAY_PASS ? 0 : count > 0 ? count : -1;
    r->heal = fault == RELAY_PASS;
    r->then.set = false;
    pthread_mutex_unlock(&r->mu);
    wake_thread(r);
}

void relay_then(relay *r, relay_fault fault, int delay_ms, const char *match, int count)
{
    pthread_mutex_lock(&r->mu);
    r->then.set = true;
    r->then.fault = fault;
    r->then.delay_ms = delay_ms;
    snprintf(r->then.match, sizeof(r->then.match), "%s", match != NULL ? match : "");
    r->then.count = count > 0 ? count : 1;
    pthread_mutex_unlock(&r->mu);
}

int relay_triggered(relay *r)
{
    int n;

    pthread_mutex_lock(&r->mu);
    n = r->triggered;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static const struct {
    const char *name;
    relay_fault fault;
} fault_names[] = {
    {"pass", RELAY_PASS},
    {"delay", RELAY_DELAY},
    {"swallow", RELAY_SWALLOW},
    {"cut-reply", RELAY_CUT_REPLY},
    {"cut-request", RELAY_CUT_REQUEST},
    {"drop", RELAY_DROP},
};

int relay_command(relay *r, const char *line, const char **why)
{
    char copy[512], *word, *save = NULL;
    const char *match = NULL;
    long delay = 0, count = 0;
    int found = -1;

    snprintf(copy, sizeof(copy), "%s", line);
    copy[strcspn(copy, "\r\n")] = '\0';
    word = strtok_r(copy, " ", &save);
    for (size_t i = 0; word != NULL && i < sizeof(fault_names) / sizeof(fault_names[0]); i++)
        if (strcmp(word, fault_names[i].name) == 0)
            found = (int)i;
    if (found < 0) {
        *why = "unknown fault (pass, delay MS, swallow, cut-reply, cut-request, drop)";
        return -1;
    }
    if (fault_names[found].fault == RELAY_DELAY) {
        char *ms = strtok_r(NULL, " ", &save), *end = NULL;

        delay = ms != NULL ? strtol(ms, &end, 10) : -1;
        if (ms == NULL || *end != '\0' || delay < 1 || delay > 600000) {
            *why = "delay needs a number of ms, 1 to 600000";
            return -1;
        }
    }
    while ((word = strtok_r(NULL, " ", &save)) != NULL) {
        char *end = NULL;

        if (strncmp(word, "match=", 6) == 0 && word[6] != '\0' && strlen(word + 6) < MATCH_MAX) {
            match = word + 6;
        } else if (strncmp(word, "count=", 6) == 0) {
            count = strtol(word + 6, &end, 10);
            if (*end != '\0' || count < 1 || count > 1000000) {
                *why = "count must be 1 to 1000000";
                return -1;
            }
        } else {
            *why = "unknown option (match=TEXT, count=N)";
            return -1;
        }
    }
    relay_set(r, fault_names[found].fault, (int)delay, match, (int)count);
    return 0;
}

void relay_stop(relay *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopped = true;
    pthread_mutex_unlock(&r->mu);
    wake_thread(r);
    pthread_join(r->thread, NULL);
    close(r->listen_fd);
    close(r->wake[0]);
    close(r->wake[1]);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
