/*
 * message.h - a request and its answer as the handlers see them (routes.c, lab_routes.c),
 * with no HTTP library: http.c fills the one from libmicrohttpd and sends the other.
 */
#ifndef SERVICE_HTTP_MESSAGE_H
#define SERVICE_HTTP_MESSAGE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct http_reply http_reply;
typedef struct http_request http_request;

/* A request whose handler returned before its answer was known (http_request.park): the
 * answer goes into *reply, and finish(p) sends it, from any thread, once; p and the
 * request are gone after. */
typedef struct http_parked {
    http_reply *reply; /* the handler's, with what it set before parking */
    void (*finish)(struct http_parked *p);
} http_parked;

/* A request as the handlers see it. */
struct http_request {
    const char *method;
    const char *path;
    /* Looks up a header (case-insensitive) or a query argument; NULL when absent. */
    const char *(*header)(void *transport, const char *name);
    const char *(*query)(void *transport, const char *name);
    void *transport;
    const char *body; /* not NUL-terminated */
    size_t body_len;
    /* Parks the request: its handler then returns without an answer and leaves `reply`
     * alone, and the answer is given later through the parked request. NULL where a request
     * cannot park (it is run on an event loop); the function's NULL: it cannot either. */
    http_parked *(*park)(const http_request *req);
    void *carrier; /* the carrier's own, for park */
    /* Run on an event loop (routes_loop_first): the handler must not wait; it parks, answers
     * at once, or sets reply->needs_worker and returns having changed nothing. */
    bool on_loop;
};

/* An answer. body is malloc'd (the carrier frees it); content_type is static. */
struct http_reply {
    int status;
    char *body;
    const char *content_type;
    const char *allow;     /* for a 405: the methods the path takes (the Allow header) */
    bool bearer_challenge; /* for a 401: ask for a bearer token (WWW-Authenticate) */
    /* For a deduction: the request's own valid Idempotency-Key, sent back in the header of
     * the same name, so that a client with many requests open on one connection pool (wrk)
     * can tell which one an answer is for. Points into the request; NULL: no header. */
    const char *idempotency_key;
    /* Likewise the request's X-Request-Id, when it has the API's shape and the deduction ran:
     * the id a recorder names its requests by (it costs the sale nothing, the key costs two
     * statements). Points into the request; NULL: no header. */
    const char *request_id;
    /* Set by a handler run on an event loop that would have to wait: the carrier runs it
     * again, from the start, on a worker. */
    bool needs_worker;
};

#endif
