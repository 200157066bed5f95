/*
 * ports.h - a free loopback port for a server a test starts.
 */
#ifndef TESTS_SUPPORT_PORTS_H
#define TESTS_SUPPORT_PORTS_H

/*
 * A port of 20000-32767 on 127.0.0.1 that could be bound a moment ago (never 2024), or -1.
 * Drawn below Linux's ephemeral range (32768-60999), as tests/lib and scripts/lib/ports.sh
 * draw theirs: a server on an ephemeral port can lose it, between this check and its bind,
 * to any outgoing connection; and once it is stopped, a client that keeps reconnecting to it
 * (a Sentinel watching a killed master) can be handed that very port as its own local end
 * and connect to itself. Another program may still take the port before the server binds
 * it: callers retry with a new port when the server fails to start.
 */
int support_free_port(void);

#endif
