/*
 * watchdog.c - the renewal thread (see watchdog.h).
 *
 * The loop: ask the holdings registry for the next renewal due (it sleeps until then),
 * run renew.lua for it, report the outcome back. The registry does the scheduling; this
 * file only does the Redis side, without holding the registry's mutex during the round
 * trip, so that try_lock and unlock never wait for a renewal.
 */
#include "lock/watchdog.h"
#include "lock/clock.h"
#include "lock/holdings.h"
#include "lock/keys.h"
#include "lock/result.h"
#include "lock/scripts.h"

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct lock__watchdog {
    lock__holdings *holdings;
    lock__conn conn;
    lock__cluster *cluster; /* NULL: renew on conn */
    pthread_t thread;
    _Atomic uint64_t renewals;
    _Atomic uint64_t lost;
};

/* Runs r's renewal script (renew.lua, or rw_renew.lua) for r; returns what it found. */
static lock__renew_outcome watchdog_renew(lock__watchdog *w, const lock__renewal *r)
{
    lock__keys k;
    char lease[24];
    char token[24];
    const char *keys[2] = {r->name, k.fence};
    const char *args[3] = {r->owner, lease, token};
    int64_t deadline = lock__now_ns() + lock__ms_to_ns(w->conn.cfg->command_timeout_ms);
    redisReply *reply = NULL;
    lock__renew_outcome outcome = LOCK__FAILED;

    if (lock__keys_init(&k, r->name) != LOCK_OK)
        goto out; /* cannot happen: the name was checked when the lock was taken */
    snprintf(lease, sizeof(lease), "%" PRId64, r->lease_ms);
    snprintf(token, sizeof(token), "%" PRId64, r->token);
    if (w->cluster != NULL) {
        if (lock__cluster_script(w->cluster, r->renew, true, deadline, deadline, 2, keys, 3, args,
                                 NULL, &reply) != LOCK_OK)
            goto out;
    } else if (lock__script_run(&w->conn, r->renew, deadline, 2, keys, 3, args, &reply) != LOCK_OK)
        goto out;
    if (reply->type == REDIS_REPLY_INTEGER)
        outcome = reply->integer == 1 ? LOCK__RENEWED : LOCK__GONE;
out:
    if (reply != NULL)
        freeReplyObject(reply);
    return outcome;
}

static void *watchdog_main(void *arg)
{
    lock__watchdog *w = arg;
    lock__renewal r;
    sigset_t pipe_set;
    int rc;

    /* A write to a connection Redis has closed raises SIGPIPE, which kills the process by
     * default. This thread is ours: keep it from ever receiving one (write then fails with
     * EPIPE, which hiredis reports). */
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);

    while ((rc = lock__holdings_next_due(w->holdings, &r)) != 0) {
        int64_t sent_ns;
        lock__renew_outcome outcome;

        if (rc < 0)
            continue; /* no memory for the copy: the registry retries it later */
        sent_ns = lock__now_ns();
        outcome = watchdog_renew(w, &r);
        if (outcome == LOCK__RENEWED)
            atomic_fetch_add(&w->renewals, 1);
        if (lock__holdings_renewed(w->holdings, r.id, outcome, sent_ns))
            atomic_fetch_add(&w->lost, 1);
        lock__renewal_clear(&r);
    }
    return NULL;
}

int lock__watchdog_start(lock__holdings *h, const lock__conn_config *cfg, lock__cluster *cluster,
                         lock__watchdog **out)
{
    lock__watchdog *w;

    *out = NULL;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        goto fail;
    w->holdings = h;
    w->cluster = cluster;
    lock__conn_init(&w->conn, cfg);
    atomic_init(&w->renewals, 0);
    atomic_init(&w->lost, 0);
    if (pthread_create(&w->thread, NULL, watchdog_main, w) != 0)
        goto fail_free;
    *out = w;
    return LOCK_OK;

fail_free:
    free(w);
fail:
    return LOCK_ERR_NOMEM;
}

void lock__watchdog_stop(lock__watchdog *w)
{
    if (w == NULL)
        return;
    lock__holdings_stop(w->holdings);
    pthread_join(w->thread, NULL);
    lock__conn_close(&w->conn);
    free(w);
}

uint64_t lock__watchdog_renewals(const lock__watchdog *w)
{
    return atomic_load(&w->renewals);
}

uint64_t lock__watchdog_lost(const lock__watchdog *w)
{
    return atomic_load(&w->lost);
}
