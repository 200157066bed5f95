/*
 * modes.h - the strategy table: every mode the build knows (modes.c), and which of them a
 * replica serves. What a mode is, is mode.h's.
 *
 * A new mode is one more row in the table (modes.c) and one file named after it
 * (service/guards/modes/<mode>.c, declared in service/guards/guards.h); the header of
 * modes.c says what else a mode whose guard needs a service of its own must touch, and why.
 *
 * The table is what the build knows; a replica offers the modes its configuration can
 * serve. A mode whose guard needs a service of its own (etcd) is offered only by a replica
 * told where that service is (ETCD_ENDPOINT): elsewhere it is neither listed by /api/modes
 * nor served (400 unknown_mode), so that a client trying every listed mode meets no mode
 * that could only answer 503.
 */
#ifndef SERVICE_MODES_H
#define SERVICE_MODES_H

#include <stdbool.h>
#include <stddef.h>

#include "service/guards/mode.h"

/* The whole table, every mode this build knows, in the order /api/modes lists them. */
const mode *modes_all(size_t *count);

/* The mode named `name`, or NULL. */
const mode *modes_find(const char *name);

/* Writes the table's names as "none, local, redis" into buf (truncated to fit); returns
 * buf. For messages that list the known modes. */
const char *modes_list(char *buf, size_t len);

/* Whether a replica with this environment serves mode m (its needs are all had). */
bool modes_served(const mode *m, const guard_env *env);

/* modes_find, but NULL for a row this environment does not serve. */
const mode *modes_find_served(const guard_env *env, const char *name);

/* Names the settings m needs that env lacks ("REDLOCK_NODES"), comma-separated, into buf;
 * "" when it lacks none. Returns buf. */
const char *modes_missing(const mode *m, const guard_env *env, char *buf, size_t len);

/* modes_list of the rows this environment serves. */
const char *modes_list_served(const guard_env *env, char *buf, size_t len);

#endif
