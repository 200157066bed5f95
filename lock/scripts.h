/*
 * scripts.h - the Lua scripts (lock/'s .lua files, embedded in the binary) and how they run.
 *
 * A script runs with EVALSHA <sha1>, which sends 40 bytes instead of the script text.
 * Redis forgets its script cache when it restarts, fails over to a replica that never saw
 * the script, or is told SCRIPT FLUSH; EVALSHA then answers NOSCRIPT, and the script is
 * loaded with SCRIPT LOAD and run again, once.
 */
#ifndef LOCK_SCRIPTS_H
#define LOCK_SCRIPTS_H

#include "lock/conn.h"

#include <stdint.h>

typedef enum lock__script {
    LOCK__SCRIPT_ACQUIRE,         /* acquire.lua */
    LOCK__SCRIPT_RELEASE,         /* release.lua */
    LOCK__SCRIPT_LEAVE,           /* leave.lua: a waiter gives up its place in line */
    LOCK__SCRIPT_RENEW,           /* renew.lua */
    LOCK__SCRIPT_INSPECT,         /* inspect.lua: read only */
    LOCK__SCRIPT_DELETE_IF_VALUE, /* delete_if_value.lua: the ladder's owner-lua rung */
    LOCK__SCRIPT_FENCE_RAISE,     /* fence_raise.lua: the counter past a token seen stored */
    LOCK__SCRIPT_RW_READ,         /* rw_read.lua: the read side of a read-write lock */
    LOCK__SCRIPT_RW_WRITE,        /* rw_write.lua: its write side */
    LOCK__SCRIPT_RW_RELEASE,      /* rw_release.lua: either side given back */
    LOCK__SCRIPT_RW_LEAVE,        /* rw_leave.lua: a waiter of either side gives up */
    LOCK__SCRIPT_RW_RENEW,        /* rw_renew.lua: the watchdog's renewal of either side */
    LOCK__SCRIPT_COUNT
} lock__script;

/* Computes the scripts' SHA-1 names, once per process; safe to call from any thread. */
void lock__scripts_init(void);

/* The script's text (NUL-terminated, static) and its SHA-1 in hex (after scripts_init). */
const char *lock__script_text(lock__script s);
const char *lock__script_sha(lock__script s);

/*
 * Runs script s on conn with keys[0..nkeys) and args[0..nargs) (at most 5 keys and 6 arguments),
 * loading it on NOSCRIPT, everything before deadline_ns. Returns LOCK_OK and *out (a reply that is
 * not an error; the caller frees it with freeReplyObject()); or LOCK_ERR_REDIS with the
 * thread's last error set (unreachable, timed out, or the script failed), or
 * LOCK_ERR_NOMEM.
 */
int lock__script_run(lock__conn *conn, lock__script s, int64_t deadline_ns, int nkeys,
                     const char *const *keys, int nargs, const char *const *args, redisReply **out);

/* As lock__script_run, but an error reply other than NOSCRIPT (a cluster's MOVED or ASK, a
 * script error) is returned as LOCK_OK with *out that error reply, for the caller to read:
 * the cluster router (lock/cluster.c) follows redirections this way. */
int lock__script_run_reply(lock__conn *conn, lock__script s, int64_t deadline_ns, int nkeys,
                           const char *const *keys, int nargs, const char *const *args,
                           redisReply **out);

#endif
