/*
 * client.h - what the other files of lock/ may use of a lock_client (internal to lock/).
 *
 * lock.c owns the client's layout; the ladder's deliberately simpler locks (naive.c) need
 * only a command connection and the client's process id, and get them through here.
 */
#ifndef LOCK_CLIENT_H
#define LOCK_CLIENT_H

#include <hiredis/hiredis.h>

#include "lock/cluster.h"
#include "lock/holdings.h"
#include "lock/lock.h"
#include "lock/pool.h"
#include "lock/scripts.h"
#include "lock/subscriber.h"

/*
 * Sends one command (argv[0..argc), NUL-terminated strings) on a pooled connection: waits
 * one command timeout at most for the connection and one more for the answer. Returns
 * LOCK_OK and *out (possibly an error reply: the caller decides; free it with
 * freeReplyObject), or LOCK_ERR_BUSY / LOCK_ERR_REDIS / LOCK_ERR_NOMEM with the thread's
 * last error set.
 */
int lock__client_command(lock_client *c, int argc, const char **argv, redisReply **out);

/* As lock__client_command for a command whose argv[1] is a key (not empty: LOCK_ERR_INVALID),
 * with the thread's last error cleared first, and an error reply turned into LOCK_ERR_REDIS
 * (its text the last error; *out NULL). The one-command calls of naive.c and cache.c. */
int lock__client_key_command(lock_client *c, int argc, const char **argv, redisReply **out);

/* Runs script s on a pooled connection within the same bounds; as lock__script_run. */
int lock__client_script(lock_client *c, lock__script s, int nkeys, const char *const *keys,
                        int nargs, const char *const *args, redisReply **out);

/* The parts of a client that another lock built on it (the read-write lock, rwlock.c) runs
 * on: the same pool, watchdog registry, subscriber and options, so that it starts no thread
 * of its own. Every pointer lives as long as the client. */
typedef struct lock__client_parts {
    const lock_options *opts;
    const char *process_id;
    lock__pool *pool;
    lock__holdings *holdings;
    lock__subscriber *subscriber;
    lock__cluster *cluster; /* NULL without Redis Cluster */
} lock__client_parts;

/* Fills *out with c's parts. */
void lock__client_parts_get(lock_client *c, lock__client_parts *out);

#endif
