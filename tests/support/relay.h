/*
 * relay.h - a TCP relay on loopback that loses replies on purpose: the fault between a client
 * and its server that a test, the chaos rows and the soak provoke.
 *
 * A lost reply comes in kinds that a client cannot tell apart and that end differently: the
 * reply is late (the command ran, the answer comes after the client gave up), swallowed (the
 * command ran, no answer ever comes, the connection stays open), cut (the command ran, then
 * the connection closes without the answer), or the connection closes before the command
 * reaches the server (it never ran). A paused server (CLIENT PAUSE, DEBUG SLEEP) makes only
 * the first. The relay makes each of them, on the connections that pass through it:
 *
 *   client --> 127.0.0.1:listen_port [relay] --> 127.0.0.1:target_port (the server)
 *
 * A fault is triggered by a request: a chunk of bytes from the client that contains the
 * fault's match text (any chunk when there is none). The connection it came on then keeps
 * the fault for the rest of its life: a cut closes it, a swallow discards every later reply
 * on it, a delay holds every later reply for the delay (in order). Other connections pass
 * until they trigger too. `count` triggers at most, then the relay passes again (0: every
 * matching request). `drop` is a partition: nothing is forwarded either way on a connection
 * that triggered it, and while it is the fault, new connections are accepted and left
 * hanging; setting `pass` again closes those hanging connections, as a peer would reset them
 * after a long partition.
 *
 * One thread serves every connection with poll(); thread-safe setters. For tests and the
 * load tools only: nothing in the service uses it.
 */
#ifndef TESTS_SUPPORT_RELAY_H
#define TESTS_SUPPORT_RELAY_H

#include <stdbool.h>

typedef enum relay_fault {
    RELAY_PASS,        /* forward both ways */
    RELAY_DELAY,       /* forward; hold each later reply delay_ms before passing it on */
    RELAY_SWALLOW,     /* forward; discard every later reply, keep the connection open */
    RELAY_CUT_REPLY,   /* forward; discard the reply and close both sides when it comes */
    RELAY_CUT_REQUEST, /* close both sides at once; the request never reaches the server */
    RELAY_DROP,        /* forward nothing either way; new connections hang (a partition) */
} relay_fault;

typedef struct relay relay;

/* Starts a relay on 127.0.0.1:listen_port (0: a free port of 20000-32767) to
 * 127.0.0.1:target_port, in PASS. Returns 0 and *out, or -1 (a message on stderr). */
int relay_start(int listen_port, int target_port, relay **out);

/* A socket listening on 127.0.0.1:port (SO_REUSEADDR), or -1 with errno set: the relay's own
 * listener, and fault-relay's control port. */
int relay_listen_loopback(int port);

/* The port it listens on. */
int relay_port(const relay *r);

/* Sets the fault for the requests from now on: `match` NULL or "" for any request (copied;
 * at most 127 bytes), count 0 for no limit, delay_ms for RELAY_DELAY. Connections that
 * triggered an earlier fault keep it (PASS closes those that DROP left hanging). */
void relay_set(relay *r, relay_fault fault, int delay_ms, const char *match, int count);

/* Sets the fault that follows the current one once its count is spent (count >= 1 triggers
 * of it, then PASS): two faults in a row, as a test needs for a command and the one that
 * settles it. Cleared by relay_set. */
void relay_then(relay *r, relay_fault fault, int delay_ms, const char *match, int count);

/* How many requests triggered a fault since the relay started. */
int relay_triggered(relay *r);

/* Parses "pass", "delay MS", "swallow", "cut-reply", "cut-request", "drop", each optionally
 * followed by " match=TEXT" and " count=N", and sets it. Returns 0, or -1 with why (a static
 * text) in *why. */
int relay_command(relay *r, const char *line, const char **why);

/* Stops the thread, closes every connection, frees r. NULL is a no-op. */
void relay_stop(relay *r);

#endif
