/*
 * app.h - one replica, wired: its configuration and the modules it owns. main.c builds
 * it, routes.c serves requests from it, http.c carries them. Nothing here is hidden
 * behind accessors: it is the plain record of what the replica is made of.
 */
#ifndef SERVICE_APP_H
#define SERVICE_APP_H

#include <stdatomic.h>
#include <stdbool.h>

#include "service/config.h"
#include "service/core.h"
#include "service/metrics.h"
#include "service/guards/modes.h"

typedef struct app {
    const service_config *config;
    core core; /* the pool, the lock client, the guards, deduct_execute's env */
    metrics *metrics;
    const mode *default_mode; /* MODE, checked against the table at start-up */
    struct lab_table *lab;    /* the lab's held requests and traces (FAULTS=on); else NULL */
    atomic_bool draining;     /* SIGTERM seen: answer with "Connection: close" */
    atomic_int in_flight;     /* requests between their first byte and their answer */
    atomic_int connections;   /* open client connections */
} app;

#endif
