/*
 * app.h - one replica, wired: its configuration and the modules it owns. main.c builds
 * it, routes.c serves requests from it, http.c carries them. Nothing here is hidden
 * behind accessors: it is the plain record of what the replica is made of.
 */
#ifndef SERVICE_APP_H
#define SERVICE_APP_H

#include <stdatomic.h>
#include <stdbool.h>

#include "db/db.h"
#include "lock/lock.h"
#include "service/config.h"
#include "service/deduct.h"
#include "service/metrics.h"
#include "service/modes.h"

typedef struct app {
    const service_config *config;
    db_pool *db;
    lock_client *lock;
    guard_env *guards;
    metrics *metrics;
    deduct_env deduct;        /* what deduct_execute needs, filled from the above */
    const mode *default_mode; /* MODE, checked against the table at start-up */
    atomic_bool draining;     /* SIGTERM seen: answer with "Connection: close" */
    atomic_int in_flight;     /* requests between their first byte and their answer */
    atomic_int connections;   /* open client connections */
} app;

#endif
