/*
 * conn.h - one blocking command connection to Redis that reconnects lazily and never waits
 * past a deadline.
 *
 * hiredis' blocking API waits on the socket as long as its timeout says; a lock must not:
 * try_lock promises to return within wait_ms plus one command timeout. So every command
 * here carries an absolute deadline, and the socket timeout is set to the smaller of the
 * configured command timeout and what is left before that deadline.
 *
 * After any failure (refused, timed out, closed) the hiredis context is freed: a reply that
 * arrives late would otherwise be read as the answer to the next command. The next command
 * connects again, so a restarted Redis is picked up without anyone asking. A connection
 * that Redis closed while it sat idle (a restart, a failover) is noticed before it is used
 * and replaced, so the restart costs the caller nothing.
 *
 * A lock__conn is used by one thread at a time (the pool hands it out; the watchdog has
 * its own).
 */
#ifndef LOCK_CONN_H
#define LOCK_CONN_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define LOCK__HOST_MAX 256

/*
 * Where Redis is. Fixed for a plain client; with Sentinel, a failover moves it
 * (lock__conn_address_move): every connection to the old address is then dropped before its
 * next use, because the epoch it connected at is no longer the current one.
 */
typedef struct lock__conn_address {
    pthread_mutex_t mu; /* guards host and port */
    char host[LOCK__HOST_MAX];
    int port;
    _Atomic unsigned epoch; /* +1 at every move */
} lock__conn_address;

/* Sets the first address; LOCK_ERR_INVALID if host is too long. */
int lock__conn_address_init(lock__conn_address *a, const char *host, int port);
void lock__conn_address_destroy(lock__conn_address *a);

/* Copies the current address into host (LOCK__HOST_MAX bytes) and *port; returns its epoch. */
unsigned lock__conn_address_get(lock__conn_address *a, char *host, int *port);

/* Moves to host:port (a no-op when that is where it is already). Returns true if it moved. */
bool lock__conn_address_move(lock__conn_address *a, const char *host, int port);

/* Where Redis is and how long to wait for it; shared by all connections of a client. */
typedef struct lock__conn_config {
    lock__conn_address *addr; /* shared; a failover changes what it holds */
    int connect_timeout_ms;
    int command_timeout_ms;
} lock__conn_config;

typedef struct lock__conn {
    const lock__conn_config *cfg; /* borrowed: must outlive the connection */
    redisContext *ctx;            /* NULL until connected and after any failure */
    int64_t timeout_ns;           /* the socket timeout set on ctx now */
    unsigned epoch;               /* the address epoch ctx was connected at */
    char host[LOCK__HOST_MAX];    /* where ctx is connected (for messages) */
    int port;
    /* A command to write behind one that got no reply, on the same connection, before it
     * is closed (lock__conn_set_follow_up); NULL: none. */
    int follow_argc;
    const char **follow_argv;
} lock__conn;

/*
 * Sets the command to write after the next command if that one is sent but gets no reply (a
 * timeout, a dropped answer), on the same connection, just before it is closed; argv (C
 * strings) must live until that command returns. Redis runs the commands of one connection
 * in the order they arrive, so the follow-up runs after the command whatever became of its
 * reply, if it runs at all: how a late answer to an acquire is undone without a race
 * (lock.c). Its own reply is not read, so nothing says it ran: a connection cut between the
 * client and Redis takes the written bytes with it. Cleared by the command, whatever it
 * returns. argc 0: none.
 */
void lock__conn_set_follow_up(lock__conn *conn, int argc, const char **argv);

/* Makes an unconnected connection; nothing to free until it has connected. */
void lock__conn_init(lock__conn *conn, const lock__conn_config *cfg);

/* Closes the connection if open. The conn can be used again (it reconnects). */
void lock__conn_close(lock__conn *conn);

/*
 * Connects if needed, sends argv and reads the reply, all before deadline_ns (monotonic).
 * lens may be NULL when every argument is a C string (hiredis then takes their strlen).
 * Returns LOCK_OK with *out set to the reply, which the caller frees with freeReplyObject();
 * the reply may be a Redis error reply (REDIS_REPLY_ERROR): the caller decides what that
 * means. Returns LOCK_ERR_REDIS, *out NULL and the thread's last error set when Redis could
 * not be reached or did not answer in time (the connection is then closed);
 * LOCK_ERR_NOMEM if hiredis could not allocate.
 */
int lock__conn_command(lock__conn *conn, int64_t deadline_ns, int argc, const char **argv,
                       const size_t *lens, redisReply **out);

#endif
