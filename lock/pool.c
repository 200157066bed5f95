/*
 * pool.c - a bounded pool of command connections (see pool.h).
 *
 * The free connections are a stack (free_stack[0 .. nfree)): return pushes, borrow pops, so
 * the connection borrowed is the one used last, which is the most likely to be connected.
 * One mutex guards the stack; one condition variable wakes a borrower when a connection
 * comes back. The reserved connection has a flag of its own under the same mutex.
 */
#include "lock/pool.h"
#include "lock/clock.h"
#include "lock/error.h"
#include "lock/result.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct lock__pool {
    pthread_mutex_t mu;
    pthread_cond_t returned; /* signalled when a connection is returned */
    int size;
    lock__conn *conns;       /* size connections */
    lock__conn **free_stack; /* the free ones; the top is the last returned */
    int nfree;
    _Atomic int in_use;           /* copy of size - nfree for lock-free reading */
    lock__conn reserved;          /* for releases only (lock__pool_borrow_for_release) */
    bool reserved_out;            /* borrowed right now */
    pthread_cond_t reserved_back; /* signalled when the reserved connection comes back */
};

int lock__pool_create(const lock__conn_config *cfg, int size, lock__pool **out)
{
    lock__pool *p;

    *out = NULL;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        goto fail;
    p->conns = calloc((size_t)size, sizeof(*p->conns));
    if (p->conns == NULL)
        goto fail_pool;
    p->free_stack = calloc((size_t)size, sizeof(*p->free_stack));
    if (p->free_stack == NULL)
        goto fail_conns;
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        goto fail_stack;
    if (lock__cond_init(&p->returned) != 0)
        goto fail_mutex;
    if (lock__cond_init(&p->reserved_back) != 0) {
        pthread_cond_destroy(&p->returned);
        goto fail_mutex;
    }
    lock__conn_init(&p->reserved, cfg);
    p->size = size;
    /* Pushed in reverse so that conns[0] is on top and is the first one used. */
    for (int i = size - 1; i >= 0; i--) {
        lock__conn_init(&p->conns[i], cfg);
        p->free_stack[p->nfree++] = &p->conns[i];
    }
    atomic_init(&p->in_use, 0);
    *out = p;
    return LOCK_OK;

fail_mutex:
    pthread_mutex_destroy(&p->mu);
fail_stack:
    free(p->free_stack);
fail_conns:
    free(p->conns);
fail_pool:
    free(p);
fail:
    return LOCK_ERR_NOMEM;
}

void lock__pool_destroy(lock__pool *p)
{
    if (p == NULL)
        return;
    for (int i = 0; i < p->size; i++)
        lock__conn_close(&p->conns[i]);
    lock__conn_close(&p->reserved);
    pthread_cond_destroy(&p->reserved_back);
    pthread_cond_destroy(&p->returned);
    pthread_mutex_destroy(&p->mu);
    free(p->free_stack);
    free(p->conns);
    free(p);
}

int lock__pool_borrow(lock__pool *p, int64_t deadline_ns, lock__conn **out)
{
    int rc = LOCK_OK;

    *out = NULL;
    pthread_mutex_lock(&p->mu);
    while (p->nfree == 0) {
        if (lock__cond_wait_until(&p->returned, &p->mu, deadline_ns) == ETIMEDOUT &&
            p->nfree == 0) {
            lock__error_set("all %d redis connections busy for the whole wait", p->size);
            rc = LOCK_ERR_BUSY;
            goto out;
        }
    }
    *out = p->free_stack[--p->nfree];
    atomic_fetch_add(&p->in_use, 1);
out:
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int lock__pool_borrow_for_release(lock__pool *p, int64_t deadline_ns, lock__conn **out)
{
    int rc = LOCK_OK;

    *out = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->nfree > 0) {
        *out = p->free_stack[--p->nfree];
        atomic_fetch_add(&p->in_use, 1);
        goto out;
    }
    while (p->reserved_out) {
        if (lock__cond_wait_until(&p->reserved_back, &p->mu, deadline_ns) == ETIMEDOUT &&
            p->reserved_out) {
            lock__error_set("all %d redis connections and the reserved one busy for the whole "
                            "wait",
                            p->size);
            rc = LOCK_ERR_BUSY;
            goto out;
        }
    }
    p->reserved_out = true;
    *out = &p->reserved;
out:
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void lock__pool_return(lock__pool *p, lock__conn *conn)
{
    pthread_mutex_lock(&p->mu);
    if (conn == &p->reserved) {
        p->reserved_out = false;
        pthread_cond_signal(&p->reserved_back);
        pthread_mutex_unlock(&p->mu);
        return;
    }
    p->free_stack[p->nfree++] = conn;
    atomic_fetch_sub(&p->in_use, 1);
    pthread_cond_signal(&p->returned);
    pthread_mutex_unlock(&p->mu);
}

int lock__pool_size(const lock__pool *p)
{
    return p->size;
}

int lock__pool_in_use(const lock__pool *p)
{
    return atomic_load(&p->in_use);
}
