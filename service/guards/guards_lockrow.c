/*
 * guards_lockrow.c - a row as the lock, the "unique index as a lock" design: the guard of
 * the pg-lockrow and pg-lockrow-ttl modes (modes/pg_lockrow.c, modes/pg_lockrow_ttl.c), which
 * differ only in the row's expiry. A helper of those modes, not a mode.
 *
 * goods_locks has the goods id as its primary key (migrations/004_goods_locks.sql). To take
 * the lock of goods N, insert the row N with an owner token of our own; the key lets one such
 * row exist, so a taker that finds it there holds nothing and tries again after a fixed pause
 * (polling: PostgreSQL has no "tell me when this row is deleted" that would reach every
 * replica), until LOCK_WAIT_MS has passed: 503 lock_timeout. To release, delete the row, if it
 * is still ours. Insert and delete are each a transaction of their own, on a connection
 * borrowed for that one statement, so every replica sees the lock at once and no connection
 * is held while a request waits; the deduction then runs its plain read-check-write under
 * the lock, as under the Redis one.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "service/clock.h"
#include "service/guards/guards.h"
#include "service/guards/outage.h"
#include "service/log.h"

/* A waiter tries again this often. Fixed on purpose (the lesson is polling): shorter costs
 * the database more failed inserts per second, longer leaves the lock idle after a release
 * until the next try. */
#define LOCKROW_POLL_MS 5

/* A holding's own state: the row it took. */
typedef struct lockrow_state {
    int64_t goods_id;
    char owner[40]; /* the random owner token the row carries: 32 hex digits */
} lockrow_state;
GUARD_STATE_FITS(lockrow_state);

/* A random owner token, 32 hex digits: the release deletes only the row that carries it. */
static void new_owner(char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];
    size_t i, got = 0;

    while (got < sizeof(raw)) {
        ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0)
            got += (size_t)n;
    }
    if (got < sizeof(raw)) { /* no entropy (not seen on Linux >= 3.17): time and address */
        struct timespec ts = clock_wall();
        snprintf(buf, len, "%016llx%016llx", (unsigned long long)ts.tv_nsec ^ (uintptr_t)buf,
                 (unsigned long long)ts.tv_sec);
        return;
    }
    for (i = 0; i < sizeof(raw) && 2 * i + 2 < len; i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15];
    }
    buf[2 * i] = '\0';
}

/* One try: borrow a connection, insert the row, give the connection back. */
static int take_once(guard_env *env, int64_t goods_id, const char *owner, int64_t ttl_ms,
                     bool *took_over, char *detail, size_t detail_len)
{
    db_conn *conn = NULL;
    int rc;

    rc = db_pool_acquire(env->db, (int)env->db_wait_ms, &conn);
    if (rc != DB_OK) {
        outage_postgresql(rc, NULL, "take lock row", detail, detail_len);
        return rc;
    }
    rc = db_lockrow_take(conn, goods_id, owner, ttl_ms, took_over);
    if (rc != DB_OK && rc != DB_ERR_HELD)
        outage_postgresql(rc, conn, "take lock row", detail, detail_len);
    db_pool_release(env->db, conn);
    return rc;
}

int guards__lockrow_enter(guard_env *env, int64_t goods_id, int64_t ttl_ms, guard_hold *hold,
                          char *detail, size_t detail_len)
{
    lockrow_state *st = GUARD_STATE(lockrow_state, hold);
    int64_t start;
    bool took_over = false;
    int rc;

    memset(hold, 0, sizeof(*hold));
    if (env->db == NULL) {
        snprintf(detail, detail_len, "postgresql pool not configured for the lock row");
        return GUARD_ERR_UNAVAILABLE;
    }
    st->goods_id = goods_id;
    new_owner(st->owner, sizeof(st->owner));
    start = clock_now_ns();
    hold->waited = true;
    for (;;) {
        rc = take_once(env, goods_id, st->owner, ttl_ms, &took_over, detail, detail_len);
        if (rc == DB_OK)
            break;
        if (rc != DB_ERR_HELD) {
            hold->wait_seconds = clock_seconds_since(start);
            return GUARD_ERR_UNAVAILABLE;
        }
        int64_t left = env->wait_ms - clock_ms_since(start);
        if (left <= 0) {
            hold->wait_seconds = clock_seconds_since(start);
            snprintf(detail, detail_len,
                     "lock row of goods %" PRId64 " not had within %" PRId64 " ms", goods_id,
                     env->wait_ms);
            return GUARD_ERR_TIMEOUT;
        }
        clock_sleep_ms(left < LOCKROW_POLL_MS ? left : LOCKROW_POLL_MS);
    }
    hold->wait_seconds = clock_seconds_since(start);
    /* Worth a line: the previous holder outlived its lease (or died), and may still be in
     * its section. */
    if (took_over)
        log_event(LOG_INFO, "lockrow_taken_over", "goods=%" PRId64 " ttl_ms=%" PRId64, goods_id,
                  ttl_ms);
    return GUARD_OK;
}

void guards__lockrow_leave(guard_env *env, guard_hold *hold)
{
    const lockrow_state *st = GUARD_STATE(lockrow_state, hold);
    db_conn *conn = NULL;
    char why[200], quoted[300];
    int rc;

    rc = db_pool_acquire(env->db, (int)env->db_wait_ms, &conn);
    if (rc == DB_OK) {
        rc = db_lockrow_release(conn, st->goods_id, st->owner);
        if (rc != DB_OK)
            db_describe_error(rc, conn, why, sizeof(why));
        db_pool_release(env->db, conn);
    } else {
        db_describe_error(rc, NULL, why, sizeof(why));
    }
    /* A row not deleted here stays: pg-lockrow's until someone deletes it (the same wedge
     * as a crash), -ttl's until it expires. A row already gone was taken over. */
    if (rc != DB_OK)
        log_event(LOG_WARN, "lockrow_release_failed", "goods=%" PRId64 " error=%s", st->goods_id,
                  log_quote(quoted, sizeof(quoted), why));
}
