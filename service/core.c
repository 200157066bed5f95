/*
 * core.c - builds the pool, the lock client and the guards from the configuration.
 */
#include "service/core.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "service/sale/batch.h"

int core_create(const service_config *cfg, int db_pool_size, int redis_pool_size,
                const char *instance, const sale_bodies *bodies, core *out, char *err,
                size_t errlen)
{
    db_pool_options db_opts;
    lock_options lock_opts;
    guard_env_options guard_opts = {0};

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

    lock_options_init(&lock_opts);
    lock_opts.redis_host = cfg->redis_host;
    lock_opts.redis_port = cfg->redis_port;
    if (cfg->redis_sentinels[0] != '\0') {
        lock_opts.sentinels = cfg->redis_sentinels;
        lock_opts.master_name = cfg->redis_master_name;
    }
    if (cfg->redis_cluster_nodes[0] != '\0') {
        /* A cluster's masters fail over by themselves, and WAIT is not routed (lock.h). */
        if (cfg->redis_sentinels[0] != '\0' || cfg->lock_sync_replicas > 0) {
            snprintf(err, errlen,
                     "REDIS_CLUSTER_NODES excludes REDIS_SENTINELS and "
                     "LOCK_SYNC_REPLICAS > 0");
            return -1;
        }
        lock_opts.cluster_nodes = cfg->redis_cluster_nodes;
    }
    lock_opts.sync_replicas = cfg->lock_sync_replicas;
    lock_opts.fair = strcmp(cfg->lock_fair, "on") == 0;
    lock_opts.waiter_liveness_ms = cfg->lock_waiter_liveness_ms;
    lock_opts.connect_timeout_ms = (int)cfg->redis_timeout_ms;
    lock_opts.command_timeout_ms = (int)cfg->redis_timeout_ms;
    lock_opts.watchdog_lease_ms = cfg->lock_lease_ms;
    lock_opts.max_hold_ms = cfg->lock_max_hold_ms;
    lock_opts.pool_size = redis_pool_size;
    if (lock_client_create(&lock_opts, &out->lock) != LOCK_OK) {
        snprintf(err, errlen, "cannot create the Redis lock client: %s",
                 lock_last_error()[0] != '\0' ? lock_last_error() : "bad options");
        return -1;
    }

    guard_opts.lock = out->lock;
    /* Without REDLOCK_NODES no Redlock, and so no redlock mode; with it, the mode's own file
     * builds the clients, which connect lazily. */
    guard_opts.redlock_nodes = cfg->redlock_nodes;
    guard_opts.redlock_timeout_ms = cfg->redlock_timeout_ms;
    guard_opts.redlock_lease_ms = cfg->redlock_lease_ms;
    /* Without ETCD_ENDPOINT (ZOOKEEPER_HOSTS) no client, and so no etcd (zookeeper) mode;
     * with it, the mode's own file builds a client that connects lazily. The session
     * timeout is the lease, as etcd's TTL is. */
    guard_opts.etcd_endpoint = cfg->etcd_endpoint;
    guard_opts.etcd_timeout_ms = cfg->etcd_timeout_ms;
    guard_opts.zookeeper_hosts = cfg->zookeeper_hosts;
    guard_opts.zookeeper_timeout_ms = cfg->zookeeper_timeout_ms;
    guard_opts.queue_lease_ms = cfg->lock_lease_ms;
    guard_opts.wait_ms = cfg->lock_wait_ms;
    /* Watchdog mode: the lease is renewed for as long as the transaction runs, however
     * long that is, and runs out within LOCK_LEASE_MS if the replica dies. */
    guard_opts.lease_ms = LOCK_LEASE_WATCHDOG;
    guard_opts.fixed_lease_ms = cfg->lock_fixed_lease_ms;
    guard_opts.db = out->db;
    guard_opts.db_wait_ms = cfg->db_wait_ms;
    guard_opts.row_lease_ms = cfg->lockrow_ttl_ms;
    if (guard_env_create(&guard_opts, &out->guards) != 0) {
        snprintf(err, errlen,
                 "cannot build the guards: out of memory, or no Redlock, etcd or ZooKeeper client");
        return -1;
    }

    out->deduct.db = out->db;
    out->deduct.db_wait_ms = cfg->db_wait_ms;
    out->deduct.guards = out->guards;
    out->deduct.instance = instance;
    out->deduct.bodies = bodies;
    out->deduct.business_delay_ms = cfg->business_delay_ms;
    out->deduct.pipeline = strcmp(cfg->db_pipeline, "on") == 0;
    /* LOCK_WAIT_MS=0 means "do not wait"; PostgreSQL's lock_timeout=0 means "wait for ever",
     * so the smallest bound it knows stands for it. */
    out->deduct.lock_wait_ms = cfg->lock_wait_ms > 0 ? cfg->lock_wait_ms : 1;
    out->deduct.optimistic_retries = cfg->optimistic_retries;
    out->deduct.shard_segments = cfg->shard_segments;
    out->deduct.shard_try_ms = cfg->shard_try_ms;

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
