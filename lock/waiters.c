/*
 * waiters.c - one lock's queue of waiting threads, and who of them is called (waiters.h).
 */
#include "lock/waiters.h"
#include "lock/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lock__waiter *lock__waiter_new(const char *owner)
{
    lock__waiter *w = calloc(1, sizeof(*w));

    if (w == NULL)
        return NULL;
    if (lock__cond_init(&w->cv) != 0) {
        free(w);
        return NULL;
    }
    snprintf(w->owner, sizeof(w->owner), "%s", owner);
    return w;
}

void lock__waiter_free(lock__waiter *w)
{
    if (w == NULL)
        return;
    pthread_cond_destroy(&w->cv);
    free(w);
}

void lock__queue_init(lock__queue *q)
{
    memset(q, 0, sizeof(*q));
    q->tail = &q->oldest;
}

void lock__queue_join(lock__queue *q, lock__waiter *w)
{
    w->next = NULL;
    w->ticket = q->next_ticket++;
    *q->tail = w;
    q->tail = &w->next;
    q->count++;
}

/* Takes w out of q's list. */
static void unlink_waiter(lock__queue *q, lock__waiter *w)
{
    lock__waiter **link = &q->oldest;

    while (*link != w)
        link = &(*link)->next;
    *link = w->next;
    if (q->tail == &w->next)
        q->tail = link;
    q->count--;
}

/* Tells w to go and try (waiters.h: a flag and its own condition variable). */
static void call(lock__waiter *w)
{
    w->called = true;
    pthread_cond_signal(&w->cv);
}

void lock__queue_call_oldest(lock__queue *q)
{
    if (q->oldest != NULL)
        call(q->oldest);
    /* else nobody to tell: the next waiter tries the lock before it sleeps anyway */
}

/* A decimal integer of text[*at..len) up to a space or the end, > 0; advances *at past it. */
static int64_t parse_positive(const char *text, size_t len, size_t *at)
{
    int64_t v = 0;
    size_t start = *at;

    while (*at < len && text[*at] >= '0' && text[*at] <= '9') {
        if (v > (INT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (text[*at] - '0');
        (*at)++;
    }
    if (*at == start || (*at < len && text[*at] != ' '))
        return 0;
    return v;
}

void lock__release_message_parse(const char *text, size_t len, size_t *name_len,
                                 lock__grant *grant)
{
    const char *space = memchr(text, ' ', len);
    size_t at;
    int64_t token, released_us;

    memset(grant, 0, sizeof(*grant));
    *name_len = space != NULL ? (size_t)(space - text) : len;
    if (space == NULL)
        return;
    at = *name_len + 1;
    token = parse_positive(text, len, &at);
    if (token == 0 || at >= len)
        return;
    at++;
    released_us = parse_positive(text, len, &at);
    if (released_us == 0 || at != len)
        return;
    grant->token = token;
    grant->released_us = released_us;
}

void lock__queue_call_named(lock__queue *q, const char *name, size_t len, const lock__grant *grant)
{
    if (len == 0) {
        lock__queue_call_oldest(q);
        return;
    }
    for (lock__waiter *w = q->oldest; w != NULL; w = w->next)
        if (strlen(w->owner) == len && memcmp(w->owner, name, len) == 0) {
            if (grant != NULL && grant->token > 0)
                w->grant = *grant;
            call(w);
            return;
        }
}

bool lock__waiter_await_call(lock__waiter *w, pthread_mutex_t *mu, int64_t deadline_ns,
                             lock__grant *grant)
{
    /* Only w's own condition variable is signalled, and only when w is called, so the other
     * waiters sleep through releases until their turn (or their deadline). */
    while (!w->called) {
        if (lock__cond_wait_until(&w->cv, mu, deadline_ns) == ETIMEDOUT)
            break;
    }
    memset(grant, 0, sizeof(*grant));
    if (!w->called)
        return false;
    w->called = false; /* used: the next try sees every release until now */
    *grant = w->grant;
    memset(&w->grant, 0, sizeof(w->grant));
    return true;
}

void lock__queue_leave(lock__queue *q, lock__waiter *w, bool acquired, bool pass_on)
{
    unlink_waiter(q, w);
    if ((w->called && !acquired) || pass_on)
        lock__queue_call_oldest(q);
}
