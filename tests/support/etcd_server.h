/*
 * etcd_server.h - a throwaway etcd for tests: one member on two free loopback ports (client
 * and peer), its data in a temporary directory, stopped by its PID. Like redis_server.h,
 * it can be stopped and started again on the same ports (keeping its data, as a restarted
 * member does), to test a client while etcd is down and after it returns.
 *
 * Its output goes to <dir>/etcd.log.
 */
#ifndef TESTS_SUPPORT_ETCD_SERVER_H
#define TESTS_SUPPORT_ETCD_SERVER_H

typedef struct etcd_server etcd_server;

/* Starts /usr/bin/etcd (or $ETCD_BIN) and waits until /health answers (20 s at most).
 * Returns 0 and *out, or -1 with a message on stderr. */
int etcd_server_start(etcd_server **out);

/* "http://127.0.0.1:PORT", the client endpoint. */
const char *etcd_server_endpoint(const etcd_server *s);

/* Stops it (SIGTERM, SIGKILL after 5 s) and reaps it. 0, or -1 when not running. */
int etcd_server_stop(etcd_server *s);

/* Freezes it (SIGSTOP): it keeps its ports and connections but answers nothing, as a hung
 * server does; thaw (SIGCONT) resumes it. 0, or -1 when not running. */
int etcd_server_freeze(etcd_server *s);
int etcd_server_thaw(etcd_server *s);

/* Starts it again on the same ports and data. 0 or -1. */
int etcd_server_restart(etcd_server *s);

/* Stops it if running, removes its directory, frees s. NULL is a no-op. */
void etcd_server_destroy(etcd_server *s);

#endif
