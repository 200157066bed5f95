/*
 * subscriber.c - the release-message thread: one pub/sub connection per process, the channels
 * it keeps subscribed, and the hand-over of each message to the channel's queue of waiters
 * (waiters.c says which waiter a message calls).
 *
 * Threads and data:
 *   - the subscriber thread alone touches the hiredis context (connect, write, read), so it
 *     needs no lock for it;
 *   - the channels list, the link state and each channel's queue of waiters are shared
 *     with the waiters and guarded by `mu`;
 *   - each waiter sleeps on a condition variable of its own, so a wake-up meant for one
 *     waiter wakes that thread and no other;
 *   - a waiter that needs the thread (a new channel to subscribe, a reconnect to start)
 *     writes to an eventfd the thread polls next to its socket.
 * The thread uses the socket with poll() rather than blocking in redisGetReply(), so that a
 * waiter's request or destroy wakes it at once instead of after a read timeout.
 *
 * A channel here is two pub/sub channels of one lock, subscribed and unsubscribed together by
 * one command: "<lock>:released", where a release that names nobody is announced to every
 * process, and "<lock>:released:<process id>", where a message naming one of this process's
 * waiters comes (release.lua says why). Redis answers such a command with one reply per
 * pub/sub channel, so a state ends at the second reply.
 *
 * A channel's life on the connection (each state has at most one command in flight, and
 * Redis answers commands in order, so replies are never confused):
 *
 *   NEW --SUBSCRIBE--> SUBSCRIBING --reply--> ACTIVE --(idle 1 s) UNSUBSCRIBE--> UNSUBSCRIBING
 *                          ^                                                      |
 *                          +------------- reply, and waiters came back -----------+
 *                                         (reply and no waiters: freed)
 *
 * An ACTIVE channel with no waiters is kept subscribed for a second before it is dropped,
 * so that a lock contended in bursts is not subscribed and unsubscribed again and again.
 * When the connection is lost every channel with waiters goes back to NEW (and is
 * subscribed again on the next connection); the others are freed.
 *
 * Only the thread frees channels, and never one with waiters, so a waiter's lock__channel
 * pointer stays valid from join to leave.
 */
#include "lock/subscriber.h"
#include "lock/clock.h"
#include "lock/result.h"
#include "lock/waiters.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define SUB_LINGER_NS (1000 * LOCK__NS_PER_MS)
#define SUB_PING_EVERY_NS (5000 * LOCK__NS_PER_MS)
#define SUB_BACKOFF_MIN_NS (50 * LOCK__NS_PER_MS)
#define SUB_BACKOFF_MAX_NS (1000 * LOCK__NS_PER_MS)

typedef enum channel_state {
    CH_NEW,          /* not subscribed on this connection; nothing sent */
    CH_SUBSCRIBING,  /* SUBSCRIBE sent, reply awaited */
    CH_ACTIVE,       /* subscribed: messages arrive */
    CH_UNSUBSCRIBING /* UNSUBSCRIBE sent, reply awaited */
} channel_state;

typedef enum link_state {
    LINK_IDLE,       /* never needed yet */
    LINK_CONNECTING, /* a connection is being made, or about to be */
    LINK_UP,
    LINK_DOWN /* lost or refused; the next try is at retry_at_ns */
} link_state;

/* The two pub/sub channels of one lock (see the top of this file). */
enum { TOPIC_ALL, TOPIC_OURS, TOPICS };

struct lock__channel {
    lock__channel *next;
    char *topic[TOPICS]; /* "<lock>:released", "<lock>:released:<process id>" */
    size_t topic_len[TOPICS];
    lock__queue queue; /* this process's threads waiting on the lock (waiters.h) */
    channel_state state;
    int replies_due;         /* to the SUBSCRIBE or UNSUBSCRIBE in flight: one per topic */
    bool resync;             /* a release may have been missed: wake the oldest once subscribed */
    int64_t idle_since_ns;   /* when waiters became 0 */
    pthread_cond_t ready_cv; /* broadcast when subscribed, or when the link goes down */
};

struct lock__subscriber {
    const lock__conn_config *cfg;
    char process_id[LOCK__PROCESS_ID_LEN + 1]; /* names this process's own topics */
    pthread_mutex_t mu;
    lock__channel *channels;
    link_state link;
    bool stop;
    int64_t retry_at_ns;
    int64_t backoff_ns;
    int wake_fd;    /* eventfd: a write wakes the thread's poll() */
    unsigned epoch; /* the address epoch of the link (conn.h) */
    pthread_t thread;

    /* The thread's own; no lock needed (only the thread reads or writes them). */
    redisContext *ctx;
    int64_t last_heard_ns; /* when something last arrived on ctx */
    int owed;              /* replies owed to commands sent */
    int64_t owed_since_ns; /* when `owed` last went from 0 to 1 */
};

/* ---- channels (mu held) ---- */

/* The channel of lock topic `topic` ("<lock>:released") for this process. */
static int channel_new(const lock__subscriber *s, const char *topic, lock__channel **out)
{
    size_t len = strlen(topic);
    lock__channel *ch;

    *out = NULL;
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        goto fail;
    ch->topic[TOPIC_ALL] = strdup(topic);
    ch->topic[TOPIC_OURS] = malloc(len + 1 + LOCK__PROCESS_ID_LEN + 1);
    if (ch->topic[TOPIC_ALL] == NULL || ch->topic[TOPIC_OURS] == NULL)
        goto fail_topics;
    ch->topic_len[TOPIC_ALL] = len;
    ch->topic_len[TOPIC_OURS] =
        (size_t)sprintf(ch->topic[TOPIC_OURS], "%s:%s", topic, s->process_id);
    if (lock__cond_init(&ch->ready_cv) != 0)
        goto fail_topics;
    lock__queue_init(&ch->queue);
    ch->state = CH_NEW;
    *out = ch;
    return LOCK_OK;

fail_topics:
    free(ch->topic[TOPIC_ALL]);
    free(ch->topic[TOPIC_OURS]);
    free(ch);
fail:
    return LOCK_ERR_NOMEM;
}

static void channel_free(lock__channel *ch)
{
    pthread_cond_destroy(&ch->ready_cv);
    free(ch->topic[TOPIC_ALL]);
    free(ch->topic[TOPIC_OURS]);
    free(ch);
}

/* Removes *link from the list and frees it. */
static void channel_unlink(lock__channel **link)
{
    lock__channel *ch = *link;

    *link = ch->next;
    channel_free(ch);
}

static bool channel_has_topic(const lock__channel *ch, int which, const char *topic, size_t len)
{
    return ch->topic_len[which] == len && memcmp(ch->topic[which], topic, len) == 0;
}

/* The link to the channel that has topic (len bytes) as either of its topics, or to the
 * list's end. A lock's name finds its channel by the first ("<lock>:released"), a message by
 * either; no lock's first topic is another's second (that one ends in a process id, hex
 * digits, never in ":released"). */
static lock__channel **channel_find(lock__subscriber *s, const char *topic, size_t len)
{
    lock__channel **link = &s->channels;

    while (*link != NULL && !channel_has_topic(*link, TOPIC_ALL, topic, len) &&
           !channel_has_topic(*link, TOPIC_OURS, topic, len))
        link = &(*link)->next;
    return link;
}

static bool channels_wanted(const lock__subscriber *s)
{
    for (const lock__channel *ch = s->channels; ch != NULL; ch = ch->next)
        if (ch->queue.count > 0)
            return true;
    return false;
}

/* While no connection is up nothing is subscribed, so channels nobody waits on can go. */
static void channels_drop_unused(lock__subscriber *s)
{
    lock__channel **link = &s->channels;

    while (*link != NULL) {
        if ((*link)->queue.count == 0)
            channel_unlink(link);
        else
            link = &(*link)->next;
    }
}

/* ---- the link (thread, mu held) ---- */

static void subscriber_wake(lock__subscriber *s)
{
    uint64_t one = 1;

    /* Cannot fail in a way that matters: a full counter still makes the fd readable. */
    if (write(s->wake_fd, &one, sizeof(one)) < 0) {
    }
}

void lock__subscriber_moved(lock__subscriber *s)
{
    subscriber_wake(s); /* the thread sees the new epoch and reconnects */
}

static void broadcast_ready(lock__subscriber *s)
{
    for (lock__channel *ch = s->channels; ch != NULL; ch = ch->next)
        pthread_cond_broadcast(&ch->ready_cv);
}

/*
 * The connection failed or could not be made: forget what was subscribed on it, let
 * waiters stop waiting for a subscription, and plan the next try. The first failure after
 * a link that worked is retried at once (a blip, a killed connection); then the pause
 * doubles from 50 ms to 1 s, so a Redis that is down, or that accepts and drops
 * connections, is not hammered.
 */
static void link_down(lock__subscriber *s)
{
    int64_t pause = s->backoff_ns;

    if (s->ctx != NULL)
        redisFree(s->ctx);
    s->ctx = NULL;
    s->owed = 0;
    s->link = LINK_DOWN;
    s->backoff_ns = pause == 0 ? SUB_BACKOFF_MIN_NS : 2 * pause;
    if (s->backoff_ns > SUB_BACKOFF_MAX_NS)
        s->backoff_ns = SUB_BACKOFF_MAX_NS;
    s->retry_at_ns = lock__now_ns() + pause;
    channels_drop_unused(s);
    for (lock__channel *ch = s->channels; ch != NULL; ch = ch->next) {
        ch->state = CH_NEW;
        ch->resync = true;
    }
    broadcast_ready(s);
}

/* Connects without the mutex (it can take up to the connect timeout). */
static void link_connect(lock__subscriber *s)
{
    const lock__conn_config *cfg = s->cfg;
    char host[LOCK__HOST_MAX];
    int port;
    redisContext *ctx;
    struct timeval connect_tv = lock__timeval(lock__ms_to_ns(cfg->connect_timeout_ms));
    struct timeval command_tv = lock__timeval(lock__ms_to_ns(cfg->command_timeout_ms));

    s->link = LINK_CONNECTING;
    pthread_mutex_unlock(&s->mu);
    s->epoch = lock__conn_address_get(cfg->addr, host, &port);
    ctx = redisConnectWithTimeout(host, port, connect_tv);
    /* The socket timeout only bounds writes here (reads wait in poll()). */
    if (ctx != NULL && ctx->err == 0 && redisSetTimeout(ctx, command_tv) != REDIS_OK)
        ctx->err = REDIS_ERR_IO;
    pthread_mutex_lock(&s->mu);
    if (ctx == NULL || ctx->err != 0) {
        if (ctx != NULL)
            redisFree(ctx);
        link_down(s);
        return;
    }
    s->ctx = ctx;
    s->link = LINK_UP;
    s->owed = 0;
    s->last_heard_ns = lock__now_ns();
    /* The channels are all NEW (link_down made them so): link_plan subscribes them. */
}

static int ms_until(int64_t at_ns, int64_t now_ns)
{
    int64_t ms = (at_ns - now_ns + LOCK__NS_PER_MS - 1) / LOCK__NS_PER_MS;

    if (ms < 0)
        return 0;
    return ms > 60000 ? 60000 : (int)ms;
}

/* Appends a command for the thread to write, owed `replies` replies; false if hiredis
 * could not. */
static bool link_append(lock__subscriber *s, int rc, int replies)
{
    if (rc != REDIS_OK)
        return false;
    if (s->owed == 0)
        s->owed_since_ns = lock__now_ns();
    s->owed += replies;
    return true;
}

/* PING, outside a channel. */
static bool link_send_ping(lock__subscriber *s)
{
    return link_append(s, redisAppendCommand(s->ctx, "PING"), 1);
}

/* SUBSCRIBE or UNSUBSCRIBE ch's two topics in one command (one reply each), and ch is in
 * state `next` until both replies came. */
static bool link_send_channel(lock__subscriber *s, const char *cmd, lock__channel *ch,
                              channel_state next)
{
    int rc =
        redisAppendCommand(s->ctx, "%s %b %b", cmd, ch->topic[TOPIC_ALL], ch->topic_len[TOPIC_ALL],
                           ch->topic[TOPIC_OURS], ch->topic_len[TOPIC_OURS]);

    if (!link_append(s, rc, TOPICS))
        return false;
    ch->state = next;
    ch->replies_due = TOPICS;
    return true;
}

/*
 * With the link up: queues the SUBSCRIBE / UNSUBSCRIBE / PING commands due now and returns
 * how long poll() may sleep, in ms (-1: until woken). Returns -2 when the link is dead
 * (no answer for a command timeout, or hiredis could not queue a command).
 */
static int link_plan(lock__subscriber *s, int64_t now)
{
    int64_t wake_at = INT64_MAX;
    int64_t reply_timeout = lock__ms_to_ns(s->cfg->command_timeout_ms);
    lock__channel **link = &s->channels;

    while (*link != NULL) {
        lock__channel *ch = *link;

        if (ch->state == CH_NEW && ch->queue.count == 0) {
            channel_unlink(link);
            continue;
        }
        if (ch->state == CH_NEW) {
            if (!link_send_channel(s, "SUBSCRIBE", ch, CH_SUBSCRIBING))
                return -2;
        } else if (ch->state == CH_ACTIVE && ch->queue.count == 0) {
            if (now - ch->idle_since_ns >= SUB_LINGER_NS) {
                if (!link_send_channel(s, "UNSUBSCRIBE", ch, CH_UNSUBSCRIBING))
                    return -2;
            } else if (ch->idle_since_ns + SUB_LINGER_NS < wake_at) {
                wake_at = ch->idle_since_ns + SUB_LINGER_NS;
            }
        }
        link = &ch->next;
    }

    if (s->owed == 0 && now - s->last_heard_ns >= SUB_PING_EVERY_NS) {
        if (!link_send_ping(s))
            return -2;
    }
    if (s->owed > 0) {
        /* A reply is owed: a command timeout of silence since it was asked for (or since
         * the last thing heard, if later) means the link is dead. */
        int64_t since = s->owed_since_ns > s->last_heard_ns ? s->owed_since_ns : s->last_heard_ns;

        if (now - since >= reply_timeout)
            return -2;
        if (since + reply_timeout < wake_at)
            wake_at = since + reply_timeout;
    } else if (s->last_heard_ns + SUB_PING_EVERY_NS < wake_at) {
        wake_at = s->last_heard_ns + SUB_PING_EVERY_NS;
    }
    return wake_at == INT64_MAX ? -1 : ms_until(wake_at, now);
}

/* ---- replies (thread, mu held) ---- */

static bool reply_is(const redisReply *r, const char *what)
{
    return r->type == REDIS_REPLY_STRING && strcasecmp(r->str, what) == 0;
}

/* A reply to one of our commands arrived (messages are not replies). */
static void link_answered(lock__subscriber *s)
{
    if (s->owed > 0)
        s->owed--;
    s->backoff_ns = 0; /* the link works: its next failure is retried at once */
}

/* Handles one reply or message. Returns false if the link is unusable. */
static bool link_handle(lock__subscriber *s, const redisReply *r)
{
    lock__channel **link;
    lock__channel *ch;
    const redisReply *topic;

    if (r->type == REDIS_REPLY_STATUS && strcasecmp(r->str, "PONG") == 0) {
        link_answered(s); /* PING, answered outside subscribed mode */
        return true;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        return false; /* an error reply, or something no command of ours asks for */
    if (reply_is(r->element[0], "pong")) {
        link_answered(s); /* PING, answered in subscribed mode */
        return true;
    }
    topic = r->element[1];
    if (r->elements < 3 || topic->type != REDIS_REPLY_STRING)
        return false;
    link = channel_find(s, topic->str, topic->len);
    ch = *link;

    if (reply_is(r->element[0], "message")) {
        /* A message read after the address moved (a failover) comes from the deposed master:
         * a grant it made may be one the new master never saw, while it grants the lock to
         * someone else. Dropped; the link goes down at the loop's next look, and the waiters
         * try again on the new master (resync). */
        if (s->epoch != atomic_load(&s->cfg->addr->epoch))
            return true;
        if (ch != NULL && r->element[2]->type == REDIS_REPLY_STRING) {
            size_t name_len;
            lock__grant grant;

            lock__release_message_parse(r->element[2]->str, r->element[2]->len, &name_len, &grant);
            lock__queue_call_named(&ch->queue, r->element[2]->str, name_len, &grant);
        } else if (ch != NULL)
            lock__queue_call_oldest(&ch->queue);
        return true;
    }
    if (reply_is(r->element[0], "subscribe")) {
        link_answered(s);
        if (ch == NULL || ch->state != CH_SUBSCRIBING || --ch->replies_due > 0)
            return true;
        ch->state = CH_ACTIVE;
        if (ch->queue.count == 0)
            ch->idle_since_ns = lock__now_ns();
        if (ch->resync)
            lock__queue_call_oldest(&ch->queue);
        ch->resync = false;
        pthread_cond_broadcast(&ch->ready_cv);
        return true;
    }
    if (reply_is(r->element[0], "unsubscribe")) {
        link_answered(s);
        if (ch == NULL || ch->state != CH_UNSUBSCRIBING || --ch->replies_due > 0)
            return true;
        if (ch->queue.count == 0) {
            channel_unlink(link);
            return true;
        }
        /* Waiters came back while it was being dropped: subscribe again. */
        return link_send_channel(s, "SUBSCRIBE", ch, CH_SUBSCRIBING);
    }
    return false;
}

/* Reads what poll() said is there and handles every complete reply. Returns false if the
 * link is unusable. */
static bool link_read(lock__subscriber *s)
{
    void *reply = NULL;
    bool ok = true;

    if (redisBufferRead(s->ctx) != REDIS_OK)
        return false; /* EOF (Redis closed it) or a socket error */
    s->last_heard_ns = lock__now_ns();
    while (ok) {
        if (redisGetReplyFromReader(s->ctx, &reply) != REDIS_OK)
            return false; /* protocol error */
        if (reply == NULL)
            break;
        ok = link_handle(s, reply);
        freeReplyObject(reply);
    }
    return ok;
}

/* ---- the thread ---- */

/*
 * Writes the queued commands and sleeps in poll() until data, a wake-up or timeout_ms.
 * Runs without the mutex. Returns -1 if the link failed, 1 if there is data to read, 0
 * otherwise.
 */
static int link_wait(lock__subscriber *s, int timeout_ms)
{
    struct pollfd fds[2] = {{.fd = s->wake_fd, .events = POLLIN}};
    nfds_t nfds = 1;
    uint64_t count;
    int done = 0;

    if (s->ctx != NULL) {
        while (!done)
            if (redisBufferWrite(s->ctx, &done) != REDIS_OK)
                return -1;
        fds[1].fd = s->ctx->fd;
        fds[1].events = POLLIN;
        nfds = 2;
    }
    if (poll(fds, nfds, timeout_ms) < 0)
        return 0; /* EINTR: the loop looks again */
    if (fds[0].revents & POLLIN) {
        if (read(s->wake_fd, &count, sizeof(count)) < 0) {
            /* EAGAIN: someone else drained it; nothing to do */
        }
    }
    if (nfds == 2 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
        return 1;
    return 0;
}

static void *subscriber_main(void *arg)
{
    lock__subscriber *s = arg;
    sigset_t pipe_set;

    /* See watchdog.c: a write to a closed connection must not kill the process. */
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);

    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        int64_t now = lock__now_ns();
        int timeout_ms = -1;
        int io;

        if (s->link != LINK_UP) {
            channels_drop_unused(s);
            if (s->link == LINK_CONNECTING && !channels_wanted(s))
                s->link = LINK_IDLE; /* the waiter that asked for it has left */
            if (channels_wanted(s) && (s->link != LINK_DOWN || now >= s->retry_at_ns)) {
                link_connect(s);
                continue;
            }
            if (s->link == LINK_DOWN && channels_wanted(s))
                timeout_ms = ms_until(s->retry_at_ns, now);
        } else if (s->epoch != atomic_load(&s->cfg->addr->epoch)) {
            link_down(s); /* the master moved (Sentinel): subscribe on the new one */
            s->retry_at_ns = now;
            continue;
        } else {
            timeout_ms = link_plan(s, now);
            if (timeout_ms == -2) {
                link_down(s);
                continue;
            }
        }
        pthread_mutex_unlock(&s->mu);
        io = link_wait(s, timeout_ms);
        pthread_mutex_lock(&s->mu);
        if (io == 1 && !link_read(s))
            io = -1;
        if (io < 0)
            link_down(s);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- the waiters' side ---- */

int lock__subscriber_create(const lock__conn_config *cfg, const char *process_id,
                            lock__subscriber **out)
{
    lock__subscriber *s;

    *out = NULL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto fail;
    s->cfg = cfg;
    snprintf(s->process_id, sizeof(s->process_id), "%s", process_id);
    s->link = LINK_IDLE;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0)
        goto fail_free;
    if (pthread_mutex_init(&s->mu, NULL) != 0)
        goto fail_fd;
    if (pthread_create(&s->thread, NULL, subscriber_main, s) != 0)
        goto fail_mutex;
    *out = s;
    return LOCK_OK;

fail_mutex:
    pthread_mutex_destroy(&s->mu);
fail_fd:
    close(s->wake_fd);
fail_free:
    free(s);
fail:
    return LOCK_ERR_NOMEM;
}

void lock__subscriber_destroy(lock__subscriber *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_mutex_unlock(&s->mu);
    subscriber_wake(s);
    pthread_join(s->thread, NULL);
    if (s->ctx != NULL)
        redisFree(s->ctx);
    while (s->channels != NULL)
        channel_unlink(&s->channels);
    pthread_mutex_destroy(&s->mu);
    close(s->wake_fd);
    free(s);
}

/* join and join_if_listening: only_if_listening joins only a channel that is subscribed
 * (CH_ACTIVE on a link that is up) and otherwise returns LOCK_OK with *out NULL. */
static int subscriber_join(lock__subscriber *s, const char *channel, const char *owner,
                           bool only_if_listening, lock__waiter **out)
{
    lock__channel **link;
    lock__channel *ch;
    lock__waiter *w;
    bool wake = false;
    int rc = LOCK_OK;

    *out = NULL;
    w = lock__waiter_new(owner);
    if (w == NULL)
        return LOCK_ERR_NOMEM;
    pthread_mutex_lock(&s->mu);
    link = channel_find(s, channel, strlen(channel));
    if (only_if_listening && (*link == NULL || (*link)->state != CH_ACTIVE || s->link != LINK_UP)) {
        pthread_mutex_unlock(&s->mu);
        lock__waiter_free(w);
        return LOCK_OK;
    }
    if (*link == NULL) {
        rc = channel_new(s, channel, link);
        if (rc != LOCK_OK)
            goto out;
    }
    ch = *link;
    /* The newest waiter: the next ticket, at the tail of the queue. */
    w->ch = ch;
    lock__queue_join(&ch->queue, w);
    /* The thread must act if the channel is not subscribed yet, or if there is no link. */
    if (ch->state == CH_NEW || s->link != LINK_UP)
        wake = true;
    if (s->link == LINK_IDLE || (s->link == LINK_DOWN && lock__now_ns() >= s->retry_at_ns)) {
        /* Connecting now (the thread will): make wait_ready wait for it. */
        s->link = LINK_CONNECTING;
        wake = true;
    }
    *out = w;
out:
    pthread_mutex_unlock(&s->mu);
    if (rc != LOCK_OK)
        lock__waiter_free(w);
    if (wake)
        subscriber_wake(s);
    return rc;
}

int lock__subscriber_join(lock__subscriber *s, const char *channel, const char *owner,
                          lock__waiter **out)
{
    return subscriber_join(s, channel, owner, false, out);
}

int lock__subscriber_join_if_listening(lock__subscriber *s, const char *channel, const char *owner,
                                       lock__waiter **out)
{
    return subscriber_join(s, channel, owner, true, out);
}

bool lock__subscriber_wait_ready(lock__subscriber *s, lock__waiter *w, int64_t deadline_ns)
{
    lock__channel *ch = w->ch;
    bool ready;

    pthread_mutex_lock(&s->mu);
    while (ch->state != CH_ACTIVE && (s->link == LINK_CONNECTING || s->link == LINK_UP) &&
           !s->stop) {
        if (lock__cond_wait_until(&ch->ready_cv, &s->mu, deadline_ns) == ETIMEDOUT)
            break;
    }
    ready = ch->state == CH_ACTIVE;
    if (!ready)
        ch->resync = true; /* going on without it: wake someone once it is there */
    pthread_mutex_unlock(&s->mu);
    return ready;
}

bool lock__subscriber_wait_release(lock__subscriber *s, lock__waiter *w, int64_t deadline_ns,
                                   lock__grant *grant)
{
    bool woken;

    pthread_mutex_lock(&s->mu);
    woken = lock__waiter_await_call(w, &s->mu, deadline_ns, grant);
    pthread_mutex_unlock(&s->mu);
    return woken;
}

void lock__subscriber_leave(lock__subscriber *s, lock__waiter *w, bool acquired, bool pass_on)
{
    lock__channel *ch = w->ch;
    bool last;

    pthread_mutex_lock(&s->mu);
    /* (A waiter that leaves Redis' line tells the next one in line itself: leave.lua.) */
    lock__queue_leave(&ch->queue, w, acquired, pass_on);
    last = ch->queue.count == 0;
    if (last) {
        ch->idle_since_ns = lock__now_ns();
        ch->resync = false;
    }
    pthread_mutex_unlock(&s->mu);
    lock__waiter_free(w);
    /* The thread plans the unsubscription (after the linger) or frees the channel. */
    if (last)
        subscriber_wake(s);
}
