/*
 * pool.h - a bounded pool of command connections shared by the caller threads.
 *
 * A hiredis context must never be used by two threads at once, and a connection per
 * caller thread would grow without bound with the service's connection threads. So a
 * call borrows one of pool_size connections for the length of its round trips and gives it
 * back before it sleeps (a waiter never sits on a connection). When all are out, a caller
 * waits, but not past its own deadline: then it gets LOCK_ERR_BUSY.
 *
 * Connections are created on first use (lock__conn reconnects lazily) and handed out most
 * recently returned first, so a light load keeps reusing the few already connected.
 *
 * One more connection is kept aside for releases (lock__pool_borrow_for_release): when
 * every pooled connection is out with acquirers, a release still gets through instead of
 * waiting behind them and giving up, which would leave the lock to its lease.
 */
#ifndef LOCK_POOL_H
#define LOCK_POOL_H

#include "lock/conn.h"

#include <stdint.h>

typedef struct lock__pool lock__pool;

/* Creates a pool of `size` (>= 1) unconnected connections using *cfg, which must outlive
 * the pool. Returns LOCK_OK and *out, or LOCK_ERR_NOMEM. */
int lock__pool_create(const lock__conn_config *cfg, int size, lock__pool **out);

/* Closes every connection and frees the pool; all must have been returned. NULL is a
 * no-op. */
void lock__pool_destroy(lock__pool *p);

/*
 * Borrows a connection, waiting for one until deadline_ns at most (a deadline already past
 * means "only if one is free now"). Returns LOCK_OK and *out, to be given back with
 * lock__pool_return(); or LOCK_ERR_BUSY (the thread's last error says so).
 */
int lock__pool_borrow(lock__pool *p, int64_t deadline_ns, lock__conn **out);

/*
 * For a release: a free pooled connection if there is one now, else the reserved one,
 * waiting for it (only other releases use it) until deadline_ns at most. Returns LOCK_OK and
 * *out, to be given back with lock__pool_return(); or LOCK_ERR_BUSY.
 */
int lock__pool_borrow_for_release(lock__pool *p, int64_t deadline_ns, lock__conn **out);

/* Gives a borrowed connection back (pooled or reserved), and wakes one thread waiting for
 * one. */
void lock__pool_return(lock__pool *p, lock__conn *conn);

/* Connections in the pool (the reserved one not counted), and borrowed right now (read
 * without locking, for metrics). */
int lock__pool_size(const lock__pool *p);
int lock__pool_in_use(const lock__pool *p);

#endif
