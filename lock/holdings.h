/*
 * holdings.h - what this process holds: the local record behind lock_is_held() and the
 * watchdog's schedule.
 *
 * Redis is the truth about who holds a lock, but asking it costs a round trip and the
 * answer can be stale by the time it arrives. The holder needs two things locally: a cheap
 * "do I still hold it?" before it commits (lock_is_held), and a list of the leases to renew
 * (the watchdog). Both live here, under one mutex.
 *
 * A holding is keyed by (lock name, thread number) and remembers its hold count, fencing
 * token, lease, whether the watchdog renews it, when its lease ends as far as we know, and
 * whether the watchdog found it lost.
 *
 * "As far as we know": the lease is counted from just before the acquiring (or renewing)
 * command was sent, which is no later than when Redis started it, so the local end of
 * lease is never later than Redis' own (clocks running at the same rate). When that time
 * passes without a renewal, is_held answers LOST without waiting for the watchdog to find
 * out: a fixed-lease holder that overran its lease is told so.
 */
#ifndef LOCK_HOLDINGS_H
#define LOCK_HOLDINGS_H

#include "lock/owner.h"
#include "lock/scripts.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct lock__holdings lock__holdings;

/* A copy of what the watchdog needs to renew one holding (it renews without the mutex). */
typedef struct lock__renewal {
    uint64_t id; /* the holding's id, to report the outcome */
    char *name;  /* owned: free with lock__renewal_clear() */
    char owner[LOCK__OWNER_MAX];
    lock__script renew; /* renew.lua, or rw_renew.lua for a side of a read-write lock */
    int64_t token;
    int64_t lease_ms;
} lock__renewal;

/* What a renewal found. */
typedef enum lock__renew_outcome {
    LOCK__RENEWED, /* the lease was extended */
    LOCK__GONE,    /* the holding is gone from Redis: lost */
    LOCK__FAILED,  /* Redis did not answer: try again soon */
} lock__renew_outcome;

/* Creates an empty registry; watchdog holdings are renewed every watchdog_lease_ms / 3, and
 * no longer once a holding has been held for max_hold_ms (> 0): its lease then runs out.
 * Returns LOCK_OK and *out, or LOCK_ERR_NOMEM. */
int lock__holdings_create(int64_t watchdog_lease_ms, int64_t max_hold_ms, lock__holdings **out);

/* Frees the registry and any holding left in it. NULL is a no-op. */
void lock__holdings_destroy(lock__holdings *h);

/*
 * Records that `owner` (thread number `thread`) holds `name` with `count` holds and
 * `token`, after a successful acquire whose command was sent at sent_ns with lease
 * lease_ms; `watchdog` if it was taken with LOCK_LEASE_WATCHDOG (lease_ms is then the
 * watchdog lease). A different token than the recorded one means a new holding (the old
 * one was lost): it replaces the record. Returns LOCK_OK or LOCK_ERR_NOMEM.
 */
int lock__holdings_acquired(lock__holdings *h, const char *name, uint64_t thread, const char *owner,
                            int64_t count, int64_t token, int64_t lease_ms, bool watchdog,
                            int64_t sent_ns);

/* As lock__holdings_acquired, for a holding the watchdog renews with script `renew` (keys: the
 * holding's name and its ":fence"; arguments: owner, lease, token) rather than renew.lua: one
 * side of a read-write lock (lock/rwlock.c) is recorded under that side's key. */
int lock__holdings_acquired_as(lock__holdings *h, lock__script renew, const char *name,
                               uint64_t thread, const char *owner, int64_t count, int64_t token,
                               int64_t lease_ms, bool watchdog, int64_t sent_ns);

/*
 * Records the outcome of an unlock. remaining >= 0: Redis' hold count after the release
 * (0 removes the record, so the watchdog stops renewing it). remaining < 0: the release
 * did not reach Redis; one hold is dropped locally all the same, so that a lock whose
 * unlock failed is not renewed for ever: its lease runs out.
 */
void lock__holdings_released(lock__holdings *h, const char *name, uint64_t thread,
                             int64_t remaining);

/* The hold count recorded for (name, thread); 0 when there is no record. The scripts set
 * Redis' count from it (see acquire.lua), so that Redis never keeps a count that this
 * process will not give back. *token (if not NULL) gets the holding's token (0: none). */
int64_t lock__holdings_count(lock__holdings *h, const char *name, uint64_t thread, int64_t *token);

/* Removes the record of (name, thread) if there is one: Redis says it is not held. */
void lock__holdings_forget(lock__holdings *h, const char *name, uint64_t thread);

/* LOCK_OK, LOCK_ERR_LOST or LOCK_ERR_NOT_HELD for (name, thread) at now_ns (see lock.h). */
int lock__holdings_state(lock__holdings *h, const char *name, uint64_t thread, int64_t now_ns);

/*
 * For the watchdog thread: sleeps until a watchdog holding is due for renewal, then fills
 * *out with a copy of it and returns 1; returns 0 once lock__holdings_stop() was called,
 * and LOCK_ERR_NOMEM if the copy could not be made.
 */
int lock__holdings_next_due(lock__holdings *h, lock__renewal *out);

/* Frees what a lock__renewal owns. */
void lock__renewal_clear(lock__renewal *r);

/*
 * Records the outcome of renewing holding `id`, whose command was sent at sent_ns. Returns
 * true if this marked the holding lost (it is still recorded and was not lost before).
 */
bool lock__holdings_renewed(lock__holdings *h, uint64_t id, lock__renew_outcome outcome,
                            int64_t sent_ns);

/* Makes lock__holdings_next_due() return 0 from now on. */
void lock__holdings_stop(lock__holdings *h);

#endif
