/*
 * lock_support.h - what the Redis lock's test programs (tests/lock/test_*.c, one per concern)
 * share: one redis-server per program run, a fresh lock client per case, the test's own
 * look at Redis, and other owners.
 *
 * Each program starts its own redis-server on a free loopback port in a temporary directory
 * (tests/support/redis_server.c), once for all its cases (lock_test_main's group setup), and
 * stops it at the end, so it runs by itself: build/san/tests/lock/test_lease
 * Each case gets an empty Redis (FLUSHALL) and a fresh lock_client with default options
 * (g_state.client); cases that need a short watchdog lease make their own client.
 *
 * cmocka's assertions may only run on the main thread (they longjmp), so worker threads
 * and child processes record what they saw and the main thread asserts on it.
 */
#ifndef TESTS_LOCK_SUPPORT_H
#define TESTS_LOCK_SUPPORT_H

#include <setjmp.h> /* cmocka.h needs these four first */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "lock/lock.h"
#include "tests/support/redis_server.h"

#define MS INT64_C(1000000)
#define COMMAND_TIMEOUT_MS 500 /* the default, which the time bounds are made of */
#define SHORT_LEASE_MS 300     /* watchdog lease of the clients that test renewal */

typedef struct test_state {
    redis_server *srv;
    int port;
    redisContext *redis; /* the test's own connection, to look at and change keys */
    lock_client *client; /* default options, fresh for each case */
    char maxclients[32]; /* the value a case read before lowering it; "" when untouched */
} test_state;

extern test_state g_state;

int64_t now_ns(void);
void sleep_ms(int64_t ms);

/* A command on the test's own connection (reconnected if Redis was restarted); the reply
 * (NULL on an I/O error) is the caller's to free. */
redisReply *redis_cmd(const char *fmt, ...);
/* A command whose reply is an integer; -1000 if it was not. */
long long redis_int(const char *fmt, ...);
/* Sends a command that answers +OK or a status; fails the case otherwise. */
void redis_ok(const char *cmd);

/* A client of the test's redis-server; 0 keeps an option's default. Destroy it. */
lock_client *new_client_with(int64_t watchdog_lease_ms, int command_timeout_ms);
lock_client *new_client(int64_t watchdog_lease_ms);

/* Subscribers to a channel, as Redis counts them; and a poll until it is `want` (false if
 * not within timeout_ms). */
long long numsub(const char *channel);
bool wait_numsub(const char *channel, long long want, int64_t timeout_ms);
/* The number that follows `prefix` in INFO <section>; -1 if the prefix is absent. */
long long info_number(const char *section, const char *prefix);
/* Client connections Redis has open now. */
long long connected_clients(void);
/* EVALSHA commands Redis has run since it started (INFO commandstats); -1 if unknown. A
 * waiter that must wait runs acquire.lua twice before it sleeps (lock.c's steps 1 and 3):
 * the count tells a test when it is asleep. */
long long evalsha_calls(void);
/* Polls until evalsha_calls() >= want (5 s at most); returns whether it got there. */
bool wait_evalsha(long long want);
/* The id of the (first) client in pub/sub mode, from CLIENT LIST; -1 if none. */
long long pubsub_client_id(void);
/* Whether CLIENT LIST mentions `needle`. */
bool client_list_has(const char *needle);
/* The pct-th percentile of v[0..n) (sorts v). */
int64_t percentile(int64_t *v, size_t n, int pct);

/*
 * Another owner: a call made from a new thread of this process (a different thread
 * number, so a different owner), started with bg_start and collected with bg_join.
 */
typedef struct bg_call {
    lock_client *c;
    const char *name;
    int64_t wait_ms;
    int64_t lease_ms;
    bool unlock_after; /* release right away if acquired (same thread) */
    bool unlock_only;  /* do not lock: just call unlock */
    int rc;
    int unlock_rc;
    int64_t token;
    int64_t handoff_us; /* lock_last_handoff_us() right after the take */
    int64_t started_ns;
    int64_t done_ns;
    pthread_t thread;
} bg_call;

void bg_start(bg_call *b);
void bg_join(bg_call *b);
/* try_lock by another owner, waited for; returns its code (released again if unlock). */
int other_try_lock(lock_client *c, const char *name, int64_t wait_ms, bool unlock);
/* unlock by another owner; returns its code. */
int other_unlock(lock_client *c, const char *name);

/* The per-case setup and teardown (FLUSHALL, a fresh g_state.client; maxclients restored
 * if the case saved it). */
int case_setup(void **state);
int case_teardown(void **state);
/* Remembers maxclients as the server has it now, for case_teardown to restore. */
void save_maxclients(void);

/*
 * A second process for the cases that need one: this very program started again (fork,
 * then exec of /proc/self/exe as `PROGRAM ROLE PORT FD`), never a bare fork: a child
 * forked from a process whose other threads (the lock client's, the sanitizer's) may hold
 * a lock at that instant could block forever on it. A fresh image inherits no such lock.
 * The program's main runs the role when it sees it. Returns the child's pid (-1: no fork).
 */
pid_t spawn_role(const char *role, int fd);
/* A lock client of the server on `port`, for a role's process; NULL if it cannot be made. */
lock_client *child_client(int port);

/* Every program's main: --list prints the case names; otherwise argv[1], if given, is a
 * cmocka PATTERN of cases; the cases run with one redis-server for all of them. Returns the
 * exit status. */
int lock_test_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc,
                   char **argv);

#endif
