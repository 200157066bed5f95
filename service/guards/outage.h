/*
 * outage.h - what a 503's detail says when a dependency failed: a sentence in the service's
 * own words that names the dependency and what the request met there ("PostgreSQL is
 * unreachable", "Redis did not answer within 500 ms"), from a small fixed vocabulary.
 * API.md: "An error's detail speaks of the request, never of a library's internals".
 *
 * The library's own text (libpq's, PostgreSQL's with its SQLSTATE, hiredis', a Redis error
 * reply, etcd's or ZooKeeper's) is what an operator needs, so each function also writes it
 * to the replica's log, one line per failure:
 *   event=dependency_failed dependency=postgresql step=begin said="..." error="..."
 * `step` names the service's step that failed (for that line only).
 *
 * Each writes the sentence into buf (len bytes, cut to fit) and returns buf. Thread-safe; it
 * reads the calling thread's last error of the lock module, so call it right after the
 * failed call, on its thread.
 */
#ifndef SERVICE_GUARDS_OUTAGE_H
#define SERVICE_GUARDS_OUTAGE_H

#include "db/db.h"

#include <stddef.h>

/* PostgreSQL failed with rc (a DB_ERR_* code) on conn, or before any connection was had
 * (conn NULL: a failed db_pool_acquire). */
const char *outage_postgresql(int rc, const db_conn *conn, const char *step, char *buf, size_t len);

/* A Redis lock client's call failed with rc (a LOCK_ERR_* code). `service` names the servers
 * as the client knows them: "Redis", or "the Redlock servers". */
const char *outage_redis(const char *service, int rc, const char *step, char *buf, size_t len);

/* redlock_lock failed with rc over `nodes` servers: for LOCK_ERR_REDIS, fewer than a
 * majority answered; otherwise as outage_redis. */
const char *outage_redlock(int rc, int nodes, const char *step, char *buf, size_t len);

/* A queue lock's call failed with rc (a QUEUE_LOCK_ERR_* code); `service` is "etcd" or
 * "ZooKeeper". */
const char *outage_queue(const char *service, int rc, const char *step, char *buf, size_t len);

#endif
