/*
 * redis_server.h - a throwaway redis-server for tests: started on a free loopback port in a
 * temporary directory, persistence off, stopped by its PID.
 *
 * The tests talk to a real Redis (no mocks): this starts one per test program, so the
 * program needs nothing around it and cannot disturb a Redis someone else runs. It can also
 * be stopped and started again on the same port, to test what a client does while Redis
 * is down and after it comes back (empty, as after a restart without persistence).
 *
 *   redis_server *srv;
 *   if (redis_server_start(&srv) != 0) ...;      // running, answering PING
 *   ... connect to 127.0.0.1:redis_server_port(srv) ...
 *   redis_server_stop(srv);                       // down (port kept)
 *   redis_server_restart(srv);                    // up again, same port, no data
 *   redis_server_destroy(srv);                    // down, directory removed, freed
 *
 * Its log goes to <dir>/redis.log, not to the test's output.
 */
#ifndef TESTS_SUPPORT_REDIS_SERVER_H
#define TESTS_SUPPORT_REDIS_SERVER_H

#include <stdbool.h>

typedef struct redis_server redis_server;

/* Starts redis-server (found on PATH) and waits until it answers PING (5 s at most).
 * Returns 0 and *out, to be freed with redis_server_destroy(); or -1 (a message on
 * stderr says why). */
int redis_server_start(redis_server **out);

/* As redis_server_start, with conf written to <dir>/redis.conf and given as the first
 * argument (the port, bind address, directory and log file are still set on the command
 * line), and --sentinel when sentinel is true: a replica ("replicaof 127.0.0.1 <port>") or
 * a Sentinel ("sentinel monitor ..."). */
int redis_server_start_conf(redis_server **out, const char *conf, bool sentinel);

/* The port it listens on, on 127.0.0.1. */
int redis_server_port(const redis_server *s);

/* The PID of the running server, or -1 while stopped. */
int redis_server_pid(const redis_server *s);

/* Stops the server (SIGTERM, then SIGKILL after 5 s) and waits for it to exit. Returns 0, or
 * -1 if it was not running. */
int redis_server_stop(redis_server *s);

/* Kills it with SIGKILL (no shutdown, nothing saved: a crash) and waits for it to exit.
 * Returns 0, or -1 if it was not running. */
int redis_server_kill(redis_server *s);

/* Starts it again on the same port and directory; waits for PING as start does. Returns 0
 * or -1. */
int redis_server_restart(redis_server *s);

/* Stops it if running, removes its directory and frees s. NULL is a no-op. */
void redis_server_destroy(redis_server *s);

#endif
