/*
 * routes.h - what each path of API.md does. No HTTP library here: a request arrives as a
 * plain record (method, path, a way to read headers and query arguments, the body), and a
 * handler answers with a status and a body. http.c carries both over libmicrohttpd.
 */
#ifndef SERVICE_ROUTES_H
#define SERVICE_ROUTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/app.h"
#include "service/http/message.h"
#include "service/metrics.h"

typedef struct route route;

/*
 * Called when the request line and headers are in, before any body is read: finds the
 * route, and answers at once what needs no body (404 unknown path, 405 wrong method,
 * 415 wrong Content-Type, 401 missing token, 413 declared length too large).
 * Returns the route (NULL if answered), sets *metric_route and *wants_body, and fills
 * *reply when it answered (reply->body NULL means out of memory: answer 500).
 */
const route *routes_begin(app *a, const http_request *req, metrics_route *metric_route,
                          bool *wants_body, http_reply *reply);

/* Whether the route's handler may wait (for a lock, PostgreSQL, Redis, a held request):
 * such a handler runs on a worker thread, never on the event loop that serves other
 * connections (http.c). /healthz, /metrics, /api/modes and the like answer from memory. */
bool routes_waits(const route *r);

/* Whether the route's handler is tried on the event loop first (http_request.on_loop): a
 * redis-batch sale parks there without a worker, anything else asks for one. */
bool routes_loop_first(const route *r);

/* Called with the whole body (at most REQUEST_MAX_BODY bytes): runs the handler. */
void routes_finish(app *a, const route *r, const http_request *req, http_reply *reply);

/* The 413 answer for a body that turned out too large while streaming in. */
void routes_too_large(http_reply *reply);

/* The 503 answer for a request on a connection past the replica's limit (max_connections):
 * nothing was run, nothing sold. */
void routes_shed(http_reply *reply, int max_connections);

/* The 503 answer for a request that waited waited_ms for one of the replica's `workers`,
 * longer than LOCK_WAIT_MS: nothing was run, nothing sold. */
void routes_shed_queued(http_reply *reply, int64_t waited_ms, int workers);

#endif
