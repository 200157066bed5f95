/*
 * http.h - the replica's HTTP server: libmicrohttpd carrying requests to routes.c.
 *
 * Threading: a few event loops (one per core, each an epoll thread over its share of the
 * connections) read requests and write answers and never wait; a request whose handler may
 * wait (routes_waits: a sale's lock and PostgreSQL, a lab step) is run by one of
 * WORKER_THREADS workers while its connection is suspended, and more such requests queue for
 * a worker. A redis-batch sale is tried on its event loop first and parks there, its
 * connection suspended until its batch's leader (a worker) answers it. At most
 * MAX_CONNECTIONS connections, one more answered 503 (docs/serving.md says why each is sized
 * as it is). Idle or slow clients are cut after CONNECTION_TIMEOUT_S.
 *
 * Bodies are read as they stream in and refused past REQUEST_MAX_BODY: a declared
 * Content-Length over the limit is answered 413 before a byte of the body is read; a
 * chunked body is counted and dropped past the limit, and the connection is closed if
 * the client keeps sending.
 */
#ifndef SERVICE_HTTP_H
#define SERVICE_HTTP_H

#include <stdint.h>

#include "service/app.h"

typedef struct http_server http_server;

/* Starts listening on config->bind_address:config->port. Returns 0, or -1 with a reason
 * in err. */
int http_start(app *a, http_server **out, char *err, size_t errlen);

/*
 * The graceful half of shutdown: stops accepting connections, answers every further
 * request with "Connection: close", and waits up to timeout_ms for requests in flight to
 * finish. Returns the number of requests still in flight (0 when drained).
 */
int http_drain(http_server *s, int64_t timeout_ms);

/* Runs fn(arg) on one of the workers, after what is queued for them (batch.h's
 * batch_runner, with the server as ctx). Returns 0, or -1 when the workers are stopping or
 * out of memory: the caller then runs it. */
int http_run_later(void *server, void (*fn)(void *arg), void *arg);

/* Closes every connection, joins the threads and frees the server. NULL is a no-op. */
void http_stop(http_server *s);

#endif
