/*
 * core.h - what a deduction runs on, built from the configuration: the PostgreSQL pool,
 * the Redis lock client, the guards of the mode table, and the deduct_env that ties them.
 *
 * The replica (main.c) and the ceiling benchmark (bench/ceiling_bench.c) build it the same
 * way, so the benchmark measures the very code path a replica runs, minus HTTP.
 */
#ifndef SERVICE_CORE_H
#define SERVICE_CORE_H

#include <stddef.h>

#include "db/db.h"
#include "lock/lock.h"
#include "service/config.h"
#include "service/sale/base.h"
#include "service/guards/modes.h"

typedef struct core {
    db_pool *db;
    lock_client *lock;
    guard_env *guards;
    deduct_env deduct; /* points at the three above */
} core;

/*
 * Builds the core with db_pool_size PostgreSQL connections and redis_pool_size Redis
 * command connections, recording orders under `instance` (not copied: it must outlive the
 * core) and writing the sales' answers with `bodies` (not copied either; the replica's are
 * http/response.h's response_sale_bodies). Nothing connects yet: both pools connect lazily. Returns
 * 0, or -1 with a reason in err; core_destroy() is safe either way.
 */
int core_create(const service_config *cfg, int db_pool_size, int redis_pool_size,
                const char *instance, const sale_bodies *bodies, core *out, char *err,
                size_t errlen);

/* Stops the lock client's threads and closes both pools. Every connection must have been
 * returned. Safe on a zeroed or half-built core. */
void core_destroy(core *c);

#endif
