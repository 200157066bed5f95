/*
 * modes/redlock.c - rung 13, "redlock": the lock is had when a majority of the independent
 * Redis servers of REDLOCK_NODES granted "SET key value NX PX lease" in time (lock/redlock.h).
 *
 * What it adds: no single Redis to lose. With 5 nodes, 2 may be down (or restarted empty)
 * and the lock still works; with 3 down, no request can have it: 503, never two holders.
 * What it keeps: no fencing token. Redlock has no single counter that every grant passes
 * through, so the database cannot refuse a holder whose validity ran out while it was
 * stopped (the ladder's gc-stop scenario oversells exactly as redis-nofence does). It is
 * also not reentrant and has no watchdog: the lease is REDLOCK_LEASE_MS (by default
 * LOCK_FIXED_LEASE_MS), and the section must finish within the validity (still_held checks
 * that on this process's clock just before COMMIT; a pause after the check is what fencing
 * would have caught).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lock/redlock.h"
#include "service/clock.h"
#include "service/guards/guards.h"
#include "service/guards/outage.h"
#include "service/log.h"

/* A holding's own state: until when it is trusted (the token, the value written, is
 * guard_hold.token). */
typedef struct redlock_state {
    int64_t valid_until_ns; /* CLOCK_MONOTONIC */
} redlock_state;
GUARD_STATE_FITS(redlock_state);

int guard_redlock_init(guard_env *env, const guard_env_options *opts)
{
    redlock_node nodes[REDLOCK_MAX_NODES];
    redlock_options ro;
    char why[128];

    if (opts->redlock_nodes == NULL || opts->redlock_nodes[0] == '\0')
        return 0; /* not configured: the mode is not served */
    /* The configuration checked REDLOCK_NODES: a parse error comes from another caller. */
    redlock_options_init(&ro);
    if (redlock_parse_nodes(opts->redlock_nodes, nodes, REDLOCK_MAX_NODES, &ro.n_nodes, why,
                            sizeof(why)) != 0)
        return -1;
    ro.nodes = nodes; /* copied */
    if (opts->redlock_timeout_ms > 0)
        ro.node_timeout_ms = opts->redlock_timeout_ms;
    env->redlock_lease_ms =
        opts->redlock_lease_ms > 0 ? opts->redlock_lease_ms : opts->fixed_lease_ms;
    if (redlock_create(&ro, &env->redlock) != LOCK_OK)
        return -1;
    env->has |= MODE_NEEDS_REDLOCK;
    return 0;
}

void guard_redlock_destroy(guard_env *env)
{
    redlock_destroy(env->redlock);
    env->redlock = NULL;
}

int guard_redlock_enter(guard_env *env, int64_t goods_id, guard_hold *hold, char *detail,
                        size_t detail_len)
{
    int64_t start;
    redlock_holding h;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (env->redlock == NULL) {
        /* Not reached through the mode table (the row is not served without REDLOCK_NODES),
         * but a caller that skips the table gets an answer, not a crash. */
        snprintf(detail, detail_len, "redlock: REDLOCK_NODES not configured");
        return GUARD_ERR_UNAVAILABLE;
    }
    snprintf(hold->name, sizeof(hold->name), "lock:redlock:goods:%" PRId64, goods_id);
    start = clock_now_ns();
    rc = redlock_lock(env->redlock, hold->name, env->wait_ms, env->redlock_lease_ms, &h);
    hold->waited = true;
    hold->wait_seconds = clock_seconds_since(start);
    switch (rc) {
    case LOCK_OK:
        snprintf(hold->token, sizeof(hold->token), "%s", h.value);
        GUARD_STATE(redlock_state, hold)->valid_until_ns = h.valid_until_ns;
        return GUARD_OK;
    case LOCK_ERR_TIMEOUT:
        snprintf(detail, detail_len, "%s not had on a majority of %d nodes within %" PRId64 " ms",
                 hold->name, redlock_nodes(env->redlock), env->wait_ms);
        return GUARD_ERR_TIMEOUT;
    default:
        outage_redlock(rc, redlock_nodes(env->redlock), "take lock", detail, detail_len);
        return GUARD_ERR_UNAVAILABLE;
    }
}

/* The holding as lock/redlock.h knows it, rebuilt from what guard_hold keeps. */
static void holding_of(const guard_hold *hold, redlock_holding *h)
{
    memset(h, 0, sizeof(*h));
    snprintf(h->name, sizeof(h->name), "%s", hold->name);
    /* The token is the value redlock_lock wrote (32 hex digits): it fits. */
    snprintf(h->value, sizeof(h->value), "%.39s", hold->token);
    h->valid_until_ns = GUARD_CSTATE(redlock_state, hold)->valid_until_ns;
}

int guard_redlock_still_held(guard_env *env, const guard_hold *hold)
{
    redlock_holding h;

    (void)env;
    holding_of(hold, &h);
    return redlock_is_held(&h) == LOCK_OK ? GUARD_OK : GUARD_ERR_LOST;
}

void guard_redlock_leave(guard_env *env, guard_hold *hold)
{
    redlock_holding h;
    int deleted;

    guards__pause_before_release(hold);
    holding_of(hold, &h);
    deleted = redlock_unlock(env->redlock, &h);
    /* Fewer than a majority deleted: the others had expired (a long section) or did not
     * answer; their leases free them. Worth a line, not an error. */
    if (deleted < redlock_quorum(redlock_nodes(env->redlock)))
        log_event(LOG_DEBUG, "redlock_release_partial", "lock=%s deleted=%d nodes=%d", hold->name,
                  deleted, redlock_nodes(env->redlock));
}
