/*
 * core.c - builds the pool, the lock client and the guards from the configuration.
 */
#include "service/core.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "service/sale/batch.h"

/* The Redis lock client's options from the configuration: 0, or -1 with err filled for a
 * combination lock.h refuses. */
static int lock_options_of(const service_config *cfg, int redis_pool_size, lock_options *o,
                           char *err, size_t errlen)
{
    lock_options_init(o);
    o->redis_host = cfg->redis_host;
    o->redis_port = cfg->redis_port;
    if (cfg->redis_sentinels[0] != '\0') {
        o->sentinels = cfg->redis_sentinels;
        o->master_name = cfg->redis_master_name;
    }
    if (cfg->redis_cluster_nodes[0] != '\0') {
        /* A cluster's masters fail over by themselves, and WAIT is not routed (lock.h). */
        if (cfg->redis_sentinels[0] != '\0' || cfg->lock_sync_replicas > 0) {
            snprintf(err, errlen,
                     "REDIS_CLUSTER_NODES excludes REDIS_SENTINELS and "
                     "LOCK_SYNC_REPLICAS > 0");
            return -1;
        }
        o->cluster_nodes = cfg->redis_cluster_nodes;
    }
    o->sync_replicas = cfg->lock_sync_replicas;
    o->fair = strcmp(cfg->lock_fair, "on") == 0;
    o->waiter_liveness_ms = cfg->lock_waiter_liveness_ms;
    o->connect_timeout_ms = (int)cfg->redis_timeout_ms;
    o->command_timeout_ms = (int)cfg->redis_timeout_ms;
    o->watchdog_lease_ms = cfg->lock_lease_ms;
    o->max_hold_ms = cfg->lock_max_hold_ms;
    o->pool_size = redis_pool_size;
    return 0;
}

/* The guards' options from the configuration, on the core's pool and lock client. */
static void guard_options_of(const service_config *cfg, const core *c, guard_env_options *o)
{
    *o = (guard_env_options){0};
    o->lock = c->lock;
    /* Without REDLOCK_NODES no Redlock, and so no redlock mode; with it, the mode's own file
     * builds the clients, which connect lazily. */
    o->redlock_nodes = cfg->redlock_nodes;
    o->redlock_timeout_ms = cfg->redlock_timeout_ms;
    o->redlock_lease_ms = cfg->redlock_lease_ms;
    /* Without ETCD_ENDPOINT (ZOOKEEPER_HOSTS) no client, and so no etcd (zookeeper) mode;
     * with it, the mode's own file builds a client that connects lazily. The session
     * timeout is the lease, as etcd's TTL is. */
    o->etcd_endpoint = cfg->etcd_endpoint;
    o->etcd_timeout_ms = cfg->etcd_timeout_ms;
    o->zookeeper_hosts = cfg->zookeeper_hosts;
    o->zookeeper_timeout_ms = cfg->zookeeper_timeout_ms;
    o->queue_lease_ms = cfg->lock_lease_ms;
    o->wait_ms = cfg->lock_wait_ms;
    /* Watchdog mode: the lease is renewed for as long as the transaction runs, however
     * long that is, and runs out within LOCK_LEASE_MS if the replica dies. */
    o->lease_ms = LOCK_LEASE_WATCHDOG;
    o->fixed_lease_ms = cfg->lock_fixed_lease_ms;
    o->db = c->db;
    o->db_wait_ms = cfg->db_wait_ms;
    o->row_lease_ms = cfg->lockrow_ttl_ms;
}

/* The sale's environment from the configuration, on the core's pool and guards. */
static void deduct_env_of(const service_config *cfg, const char *instance,
                          const sale_bodies *bodies, core *c)
{
    c->deduct.db = c->db;
    c->deduct.db_wait_ms = cfg->db_wait_ms;
    c->deduct.db_deadline_ms = cfg->db_reply_timeout_ms;
    c->deduct.guards = c->guards;
    c->deduct.instance = instance;
    c->deduct.bodies = bodies;
    c->deduct.business_delay_ms = cfg->business_delay_ms;
    c->deduct.pipeline = strcmp(cfg->db_pipeline, "on") == 0;
    /* LOCK_WAIT_MS=0 means "do not wait"; PostgreSQL's lock_timeout=0 means "wait for ever",
     * so the smallest bound it knows stands for it. */
    c->deduct.lock_wait_ms = cfg->lock_wait_ms > 0 ? cfg->lock_wait_ms : 1;
    c->deduct.optimistic_retries = cfg->optimistic_retries;
    c->deduct.shard_segments = cfg->shard_segments;
    c->deduct.shard_try_ms = cfg->shard_try_ms;
}

int core_create(const service_config *cfg, int db_pool_size, int redis_pool_size,
                const char *instance, const sale_bodies *bodies, core *out, char *err,
                size_t errlen)
{
    db_pool_options db_opts;
    lock_options lock_opts;
    guard_env_options guard_opts;

    memset(out, 0, sizeof(*out));
    db_pool_options_init(&db_opts);
    db_opts.conninfo = cfg->database_url;
    db_opts.size = db_pool_size;
    db_opts.reply_timeout_ms = cfg->db_reply_timeout_ms;
    db_opts.idle_in_tx_ms = cfg->db_idle_in_tx_ms;
    if (db_pool_create(&db_opts, &out->db) != DB_OK) {
        snprintf(err, errlen, "cannot create the PostgreSQL pool");
        return -1;
    }

    if (lock_options_of(cfg, redis_pool_size, &lock_opts, err, errlen) != 0)
        return -1;
    if (lock_client_create(&lock_opts, &out->lock) != LOCK_OK) {
        snprintf(err, errlen, "cannot create the Redis lock client: %s",
                 lock_last_error()[0] != '\0' ? lock_last_error() : "bad options");
        return -1;
    }

    guard_options_of(cfg, out, &guard_opts);
    if (guard_env_create(&guard_opts, &out->guards) != 0) {
        snprintf(err, errlen,
                 "cannot build the guards: out of memory, or no Redlock, etcd or ZooKeeper client");
        return -1;
    }

    deduct_env_of(cfg, instance, bodies, out);
    batch_options batch_opts = {.max_batch = cfg->batch_max,
                                .max_queued = cfg->batch_queue_max,
                                .wait_ms = cfg->batch_wait_ms};
    if (batch_queue_create(&batch_opts, &out->deduct.batch) != 0) {
        snprintf(err, errlen, "cannot create the redis-batch queues");
        return -1;
    }
    return 0;
}

void core_destroy(core *c)
{
    batch_queue_destroy(c->deduct.batch);
    guard_env_destroy(c->guards);
    lock_client_destroy(c->lock);
    db_pool_destroy(c->db);
    memset(c, 0, sizeof(*c));
}
