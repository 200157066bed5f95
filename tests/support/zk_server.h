/*
 * zk_server.h - a throwaway ZooKeeper for tests: one standalone server (the JVM of Debian's
 * zookeeper package, ZooKeeperServerMain) on a free loopback port, its data and config in a
 * temporary directory, stopped by its PID. Like etcd_server.h, it can be stopped and started
 * again on the same port and data, to test a client while ZooKeeper is down and after.
 *
 * Its tick is 200 ms and it grants session timeouts from 400 ms to 60 s, so tests can
 * expire sessions quickly. Its output goes to <dir>/zookeeper.log.
 */
#ifndef TESTS_SUPPORT_ZK_SERVER_H
#define TESTS_SUPPORT_ZK_SERVER_H

typedef struct zk_server zk_server;

/* Starts java ($JAVA or /usr/bin/java) with /usr/share/java/zookeeper.jar ($ZOOKEEPER_JAR)
 * and waits until it answers "ruok" with "imok" (30 s at most: a JVM starts slowly on a
 * loaded machine). Returns 0 and *out, or -1 with a message on stderr. */
int zk_server_start(zk_server **out);

/* "127.0.0.1:PORT", the client's host string. */
const char *zk_server_hosts(const zk_server *s);

/* Its port, which a test may hold while the server is stopped (restart starts it there). */
int zk_server_port(const zk_server *s);

/* Stops it (SIGTERM, SIGKILL after 5 s) and reaps it. 0, or -1 when not running. */
int zk_server_stop(zk_server *s);

/* Freezes it (SIGSTOP): it keeps its port and connections but answers nothing, as a hung
 * server does; thaw (SIGCONT) resumes it. 0, or -1 when not running. */
int zk_server_freeze(zk_server *s);
int zk_server_thaw(zk_server *s);

/* Starts it again on the same port and data. 0 or -1. */
int zk_server_restart(zk_server *s);

/* Stops it if running, removes its directory, frees s. NULL is a no-op. */
void zk_server_destroy(zk_server *s);

#endif
