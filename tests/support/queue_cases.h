/*
 * queue_cases.h - the cases every backend of the queue lock (lock/queue/: etcd, ZooKeeper)
 * must pass, written once: mutual exclusion across two processes, reentrancy and tokens, the
 * wait bound, the wake-up by watch. A backend's test program (tests/test_etcd.c,
 * tests/test_zookeeper.c) fills queue_cases_backend once its server runs, lists these cases
 * beside its own (what a lease or a session losing does, a server down or hung), and hands
 * its "mx" role to queue_cases_mx.
 *
 * Mutual exclusion is checked the way a lost update shows: every holder reads a counter from
 * a file, pauses, writes it back plus one; with two holders at once, increments are lost and
 * the final count falls short. Two processes of 8 threads each share the file; the second
 * process is the program re-executed with the role "mx" (a bare fork of a threaded process
 * could inherit a held libc lock).
 */
#ifndef TESTS_SUPPORT_QUEUE_CASES_H
#define TESTS_SUPPORT_QUEUE_CASES_H

#include <stdint.h>

#include "lock/queue/queue_lock.h"

typedef struct queue_backend {
    const char *program; /* the program's name, for its re-executed "mx" role */
    const char *servers; /* where its server listens, as the backend's client takes it */
    /* Its client's create (etcd_lock_client_create, zk_lock_client_create). */
    int (*create)(const queue_lock_options *opts, queue_lock **out);
    int request_timeout_ms; /* of the clients the cases make: their bounds are made of it */
    /* How many request timeouts past its wait a waiter that timed out may take to answer
     * (the backend's own leaving of the queue, after the deadline). */
    int timeouts_past_wait;
} queue_backend;

/* Set by the program before the cases run. */
extern queue_backend queue_cases_backend;

/* A client of the backend's server with this lease (session) length, or NULL. */
queue_lock *queue_cases_client(int64_t lease_ms);

/* The monotonic clock in ms; the calling thread's owner (the cases hold their locks per
 * thread, as the service does); a sleep. */
int64_t queue_cases_now_ms(void);
const char *queue_cases_owner(void);
void queue_cases_sleep_ms(int ms);

/* The "mx" role: 8 threads of one client add one to the counter in `file` 8 times each,
 * under the lock. Returns the number of failed calls (-1: no client). */
int queue_cases_mx(const char *servers, const char *file);

/* The cases (cmocka's signature; the group's state is not used). */
void queue_case_mutual_exclusion(void **state);
void queue_case_reentrancy_and_token(void **state);
void queue_case_bounded_wait(void **state);
void queue_case_wakeup(void **state);

#endif
