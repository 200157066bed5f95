/*
 * modes.c - the strategy table and its lookups.
 *
 * Each row of `mode_table` is one way of guarding the read-check-write of sale.c. Every
 * mode's guard or transaction shape lives in a file named after the mode,
 * service/guards/modes/<mode>.c ('-' as '_'); what several modes share is a helper,
 * service/guards*.c (guards.h lists them):
 *
 *   none              modes/none.c              no guard at all: a lost update under load.
 *   local             modes/local.c             a mutex of this process: one replica only.
 *   redis             modes/redis.c             the Redis lock of lock/, fenced: right with
 *                                               any number of replicas (guards_redis.c).
 *   redis-batch       modes/redis_batch.c       redis's lock once per batch of a replica's
 *                                               requests for one goods (service/sale/batch.c).
 *   redis-sharded     modes/redis_sharded.c     the stock in segments, a lock per segment
 *                                               (service/sale/sharded.c).
 *
 * the ladder's Redis rungs, each missing one piece of `redis` (docs/course/, chapters 3 to 12):
 *
 *   setnx             modes/setnx.c             no expiry: a dead holder wedges the goods.
 *   setnx-ttl         modes/setnx_ttl.c         no owner: DEL frees another's lock.
 *   owner-get-del     modes/owner_get_del.c     a two-command release: a gap.
 *   owner-lua         modes/owner_lua.c         not reentrant, fixed lease.
 *   redis-nowatchdog  modes/redis_nowatchdog.c  fixed lease: a long section has two holders.
 *   redis-nofence     modes/redis_nofence.c     no token: a stopped process commits late.
 *   tx-inside         modes/tx_inside.c         left before COMMIT (mode.leaves_inside_tx).
 *   multi-naive       modes/multi_naive.c       a cart's locks in the cart's order: two carts
 *                                               deadlock (mode.cart, service/sale/order.c).
 *   cache-aside       modes/cache_aside.c       redis, and the cached stock deleted after the
 *                                               sale: a miss that read before it fills the
 *                                               cache with a stock gone (mode.cache).
 *   cache-rwlock      modes/cache_rwlock.c      the same under a read-write lock: a miss
 *                                               fills under the read side, the sale writes
 *                                               and deletes under the write side.
 *   redlock           modes/redlock.c           a quorum of 5 Redis servers, no token: served
 *                                               only with REDLOCK_NODES (mode.needs).
 *
 * the PostgreSQL rungs, which need no guard: the database closes the race, each in its own
 * transaction shape (mode_tx):
 *
 *   pg-for-update     modes/pg_for_update.c     SELECT ... FOR UPDATE: the row's lock.
 *   pg-optimistic     modes/pg_optimistic.c     a version column: write if unchanged, or retry.
 *   pg-serializable   modes/pg_serializable.c   the plain read-check-write, SERIALIZABLE: 40001
 *                                               and a retry.
 *   pg-atomic         modes/pg_atomic.c         one conditional UPDATE: check and write at once.
 *   pg-multi-naive    modes/pg_multi_naive.c    a cart's rows locked in the cart's order: 40P01.
 *   pg-advisory       modes/pg_advisory.c       pg_advisory_xact_lock on the goods id.
 *
 * a guard whose lock is a row of PostgreSQL's (guards_lockrow.c):
 *
 *   pg-lockrow        modes/pg_lockrow.c        no expiry: a dead holder wedges the goods.
 *   pg-lockrow-ttl    modes/pg_lockrow_ttl.c    an expiry: a long section has two holders.
 *
 * and the other lock services, served only by a replica configured with one (mode.needs):
 *
 *   etcd              modes/etcd.c              lease, key per waiter, revision as token.
 *   zookeeper         modes/zookeeper.c         session, node per waiter, czxid as token.
 *
 * Adding a mode means a row here and its file under modes/ (declared in guards.h). A mode
 * whose guard needs a backing service of its own also touches: guard_env_options and
 * guard_env (mode.h, guards.h: the client, handed in at start-up), config.c and core.c
 * (the setting that names the service, the client built from it), and a MODE_NEEDS_* bit
 * with its setting in needs_settings below (so that a replica without the service neither
 * lists nor serves the mode).
 */
#include "service/guards/modes.h"

#include <stdio.h>
#include <string.h>

#include "service/guards/guards.h"

/* ---- the table ----------------------------------------------------------------------- */

#define GUARD(prefix) .enter = prefix##_enter, .leave = prefix##_leave
#define NO_GUARD .enter = guard_none_enter, .leave = guard_none_leave
#define REDIS_LOCK(prefix)                                                                         \
    .enter = prefix##_enter, .leave = guards__redis_leave, .still_held = guards__redis_still_held, \
    .fence_refused = guards__redis_fence_refused

/* clang-format off */
static const mode mode_table[] = {
    /* The three the project exists to compare. */
    {.name = "none", .safe = false,
     .summary = "read, check and write with no lock at all: oversells under load",
     NO_GUARD, .still_held = guards__always_held, .cart = MODE_CART_SORTED},
    {.name = "local", .safe = false,
     .summary = "the same under a mutex of the process: right with one replica, oversells "
                "with several",
     GUARD(guard_local), .still_held = guards__always_held,
     .cart = MODE_CART_SORTED, .lock_of = guard_local_stripe_of},
    {.name = "redis", .safe = true,
     .summary = "the same under the Redis reentrant lock (owner, watchdog, bounded wait, "
                "fencing): right with any number of replicas",
     REDIS_LOCK(guard_redis), .cart = MODE_CART_SORTED},

    /* local's first pitfall: a lock object made per caller. */
    {.name = "local-unshared", .safe = false,
     .summary = "the same under a mutex each request makes for itself: excludes nothing, "
                "oversells even with one replica",
     GUARD(guard_local_unshared), .still_held = guards__always_held},

    /* Past the serial ceiling: one lock holding and one commit for many sales. */
    {.name = "redis-batch", .safe = true,
     .summary = "the redis lock taken once per batch: a replica's concurrent requests for one "
                "goods are checked in arrival order and sold in one fenced transaction, each "
                "answered after its commit: right with any number of replicas",
     REDIS_LOCK(guard_redis_batch), .batched = true},
    {.name = "redis-sharded", .safe = true,
     .summary = "the goods' stock split into SHARD_SEGMENTS segments, each a row with a redis "
                "lock and fencing token of its own: a sale takes one segment and moves on "
                "when it is busy or short; all segments at once for the last units: right "
                "with any number of replicas",
     REDIS_LOCK(guard_redis_sharded), .parts = &guard_redis_sharded_parts},

    /* The ladder's Redis rungs, in the order the course builds them: each fixes the flaw
     * of the one before and shows the next (loadtest/ladder provokes each). */
    {.name = "setnx", .safe = false,
     .summary = "SETNX key, DEL key, polling: no expiry, so a holder that dies wedges the "
                "goods for ever (503 lock_timeout until the key is deleted)",
     GUARD(guard_setnx), .still_held = guards__always_held},
    {.name = "setnx-ttl", .safe = false,
     .summary = "SET key NX PX lease, DEL key: a section longer than the lease has two "
                "holders, and the first one's DEL frees the second one's lock",
     GUARD(guard_setnx_ttl), .still_held = guards__always_held},
    {.name = "owner-get-del", .safe = false,
     .summary = "an owner token, released by GET, compare, DEL: the lease can run out "
                "between the GET and the DEL, which then frees another's lock",
     GUARD(guard_owner_get_del), .still_held = guards__always_held},
    {.name = "owner-lua", .safe = false,
     .summary = "an owner token released by one Lua compare-and-delete: not reentrant (a "
                "nested step waits for itself), and a fixed lease",
     GUARD(guard_owner_lua), .still_held = guards__always_held},
    {.name = "redis-nowatchdog", .safe = false,
     .summary = "the reentrant lock with a fixed lease and no renewal, no fencing: a "
                "section that outlasts the lease has a second holder beside it",
     REDIS_LOCK(guard_redis_nowatchdog)},
    {.name = "redis-nofence", .safe = false,
     .summary = "the reentrant lock with its watchdog, no fencing token: a process stopped "
                "past its lease (a GC pause) commits after the next holder read",
     REDIS_LOCK(guard_redis_nofence)},

    /* An application pitfall with a right lock. */
    {.name = "redis-fence-write", .safe = false,
     .summary = "the redis lock, its token checked only at the write: a newer holder that read "
                "before an older one wrote still sells from a stale stock",
     REDIS_LOCK(guard_redis_fence_write), .fence_at_write = true},
    {.name = "tx-inside", .safe = false,
     .summary = "the Redis lock (watchdog, no token) given back inside the transaction, "
                "before COMMIT: the next holder reads the stock not yet committed",
     REDIS_LOCK(guard_tx_inside), .leaves_inside_tx = true},

    /* Liveness, not safety: a cart's locks taken in the order it lists them. */
    {.name = "multi-naive", .safe = false,
     .summary = "a cart's Redis locks (the redis mode's, fenced) taken in the order the cart "
                "lists them: never oversells, but two carts naming the same goods in opposite "
                "orders each hold one lock and wait for the other's until both answer 503 "
                "lock_timeout, nothing sold (a single deduct is the redis mode's)",
     REDIS_LOCK(guard_multi_naive), .cart = MODE_CART_AS_LISTED},

    /* A cache of the stock beside the sale (service/guards/cache.c): the miss's fill against the
     * sale's delete. */
    {.name = "cache-aside", .safe = false,
     .summary = "the redis sale, then the cached stock deleted; a cached read that misses fills "
                "the cache from PostgreSQL with no lock: a miss that read before a sale and "
                "writes after its delete leaves the cache saying a stock the table no longer "
                "holds, until its TTL",
     GUARD(guard_cache_aside), .still_held = guards__redis_still_held,
     .fence_refused = guards__redis_fence_refused, .cache = MODE_CACHE_ASIDE},
    {.name = "cache-rwlock", .safe = true,
     .summary = "cache-aside with a Redis read-write lock: a miss reads PostgreSQL and fills "
                "the cache under the read side, the sale writes and deletes the entry under "
                "the write side, and a waiting writer shuts out new readers: the cache never "
                "says a stock gone",
     GUARD(guard_cache_rwlock), .still_held = guard_cache_rwlock_still_held,
     .fence_refused = guards__redis_fence_refused, .cache = MODE_CACHE_RWLOCK},

    /* Rung 8: a quorum of independent Redis servers; listed and served only by a replica
     * started with REDLOCK_NODES. */
    {.name = "redlock", .safe = false,
     .summary = "Redlock: SET NX PX on a majority of 5 independent Redis servers, fixed lease, "
                "no fencing token: survives 2 servers down, but a process stopped past its "
                "validity commits after the next holder read",
     GUARD(guard_redlock), .still_held = guard_redlock_still_held,
     .needs = MODE_NEEDS_REDLOCK},

    /* PostgreSQL alone: the database closes the race, each in its transaction shape. */
    {.name = "pg-for-update", .safe = true,
     .summary = "no guard: the read is SELECT ... FOR UPDATE, so PostgreSQL's row lock keeps "
                "the read-check-write apart: right with any number of replicas",
     NO_GUARD, .still_held = guards__always_held, .tx = &pg_for_update_tx,
     .cart = MODE_CART_SORTED},
    {.name = "pg-optimistic", .safe = true,
     .summary = "no lock: read the stock and its version, write only if the version is "
                "unchanged, and run the transaction again after a lost race (up to "
                "OPTIMISTIC_RETRIES, then 503 conflict): right with any number of replicas",
     NO_GUARD, .still_held = guards__always_held, .tx = &pg_optimistic_tx},
    {.name = "pg-serializable", .safe = true,
     .summary = "no lock: the plain read-check-write in a SERIALIZABLE transaction; PostgreSQL "
                "refuses the one of two concurrent sales it cannot order (SQLSTATE 40001), which "
                "runs again (up to OPTIMISTIC_RETRIES, then 503 conflict): right with any "
                "number of replicas",
     NO_GUARD, .still_held = guards__always_held, .tx = &pg_serializable_tx},
    {.name = "pg-atomic", .safe = true,
     .summary = "no guard and no read: one conditional UPDATE ... WHERE stock >= n checks and "
                "writes at once: right with any number of replicas",
     NO_GUARD, .still_held = guards__always_held, .tx = &pg_atomic_tx,
     .cart = MODE_CART_SORTED},
    {.name = "pg-multi-naive", .safe = false,
     .summary = "pg-for-update with a cart's rows locked in the order the cart lists them: two "
                "carts in opposite orders wait for each other, PostgreSQL finds the cycle and "
                "rolls one back (deadlock victim, 503 conflict), the other sells",
     NO_GUARD, .still_held = guards__always_held, .tx = &pg_multi_naive_tx,
     .cart = MODE_CART_AS_LISTED},
    {.name = "pg-advisory", .safe = true,
     .summary = "no guard: pg_advisory_xact_lock on the goods id inside the transaction, then "
                "the same read-check-write: right with any number of replicas",
     NO_GUARD, .still_held = guards__always_held, .tx = &pg_advisory_tx},

    /* PostgreSQL as a lock service: a row whose unique key is the lock, outliving the
     * transaction, as the Redis rungs' keys do. */
    {.name = "pg-lockrow", .safe = false,
     .summary = "a row of goods_locks as the lock (insert to take, delete to release, waiters "
                "poll): excludes across replicas, but a holder that dies leaves its row and the "
                "goods answers lock_timeout for ever",
     .enter = guard_pg_lockrow_enter, .leave = guards__lockrow_leave,
     .still_held = guards__always_held},
    {.name = "pg-lockrow-ttl", .safe = false,
     .summary = "the lock row with an expiry that a taker may delete: no more wedge, but a "
                "section longer than LOCKROW_TTL_MS lets a second holder in, with no fence to "
                "stop it: oversells",
     .enter = guard_pg_lockrow_ttl_enter, .leave = guards__lockrow_leave,
     .still_held = guards__always_held},

    /* The other lock services: listed and served only by a replica configured with one. */
    {.name = "etcd", .safe = true,
     .summary = "the same under an etcd lock (lease kept alive, key per waiter, watch on the "
                "predecessor, create revision as fencing token): right with any number of "
                "replicas",
     .enter = guard_etcd_enter, .leave = guards__queue_leave,
     .still_held = guards__queue_still_held, .needs = MODE_NEEDS_ETCD},
    {.name = "zookeeper", .safe = true,
     .summary = "the same under a ZooKeeper lock (ephemeral sequential node per waiter, watch "
                "on the predecessor, session as lease, node's czxid as fencing token): right "
                "with any number of replicas",
     .enter = guard_zookeeper_enter, .leave = guards__queue_leave,
     .still_held = guards__queue_still_held, .needs = MODE_NEEDS_ZOOKEEPER},
};
/* clang-format on */

#undef GUARD
#undef NO_GUARD
#undef REDIS_LOCK

const mode *modes_all(size_t *count)
{
    *count = sizeof(mode_table) / sizeof(mode_table[0]);
    return mode_table;
}

const mode *modes_find(const char *name)
{
    size_t i;

    if (name == NULL)
        return NULL;
    for (i = 0; i < sizeof(mode_table) / sizeof(mode_table[0]); i++)
        if (strcmp(mode_table[i].name, name) == 0)
            return &mode_table[i];
    return NULL;
}

/* What each MODE_NEEDS_* bit stands for: the setting that gives it. */
static const struct {
    unsigned bit;
    const char *setting;
} needs_settings[] = {
    {MODE_NEEDS_REDLOCK, "REDLOCK_NODES"},
    {MODE_NEEDS_ETCD, "ETCD_ENDPOINT"},
    {MODE_NEEDS_ZOOKEEPER, "ZOOKEEPER_HOSTS"},
};

const char *modes_missing(const mode *m, const guard_env *env, char *buf, size_t len)
{
    unsigned lacking = m != NULL ? m->needs & ~env->has : 0;
    size_t used = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(needs_settings) / sizeof(needs_settings[0]); i++) {
        if ((lacking & needs_settings[i].bit) == 0)
            continue;
        int n = snprintf(buf + used, len - used, "%s%s", used > 0 ? ", " : "",
                         needs_settings[i].setting);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

bool modes_served(const mode *m, const guard_env *env)
{
    return m != NULL && (m->needs & ~env->has) == 0;
}

const mode *modes_find_served(const guard_env *env, const char *name)
{
    const mode *m = modes_find(name);

    return modes_served(m, env) ? m : NULL;
}

/* The names of the rows `env` serves (all rows when all_rows), comma-separated. */
static const char *list_names(const guard_env *env, bool all_rows, char *buf, size_t len)
{
    size_t i, used = 0;

    if (len == 0)
        return buf;
    buf[0] = '\0';
    for (i = 0; i < sizeof(mode_table) / sizeof(mode_table[0]); i++) {
        if (!all_rows && !modes_served(&mode_table[i], env))
            continue;
        int n = snprintf(buf + used, len - used, "%s%s", used > 0 ? ", " : "", mode_table[i].name);
        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0'; /* drop the name that did not fit whole */
            break;
        }
        used += (size_t)n;
    }
    return buf;
}

const char *modes_list(char *buf, size_t len)
{
    return list_names(NULL, true, buf, len);
}

const char *modes_list_served(const guard_env *env, char *buf, size_t len)
{
    return list_names(env, false, buf, len);
}
