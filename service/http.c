/*
 * http.c - libmicrohttpd in thread-per-connection mode, carrying requests to routes.c.
 *
 * libmicrohttpd calls on_request() several times per request: once when the headers are
 * in (*state is NULL), once per piece of body, and once more with no data when the body is
 * complete. The `exchange` below is what one request remembers between those calls.
 */
#include "service/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "service/log.h"
#include "service/request.h"
#include "service/routes.h"

/* A client that keeps sending a refused chunked body is cut off after this much. */
#define DISCARD_LIMIT (1024 * 1024)

struct http_server {
    struct MHD_Daemon *daemon;
    MHD_socket listen_fd; /* closed after the daemon stops (MHD's rule after quiesce) */
    app *a;
};

typedef struct exchange {
    const route *route;    /* NULL once answered early */
    metrics_route metric;
    bool wants_body;
    bool too_large;        /* the body passed REQUEST_MAX_BODY */
    size_t discarded;      /* bytes dropped after that */
    char *body;
    size_t len, cap;
} exchange;

static const char *lookup_header(void *transport, const char *name)
{
    return MHD_lookup_connection_value(transport, MHD_HEADER_KIND, name);
}

static const char *lookup_query(void *transport, const char *name)
{
    return MHD_lookup_connection_value(transport, MHD_GET_ARGUMENT_KIND, name);
}

/* Queues the reply (taking its body) and counts it. */
static enum MHD_Result send_reply(app *a, struct MHD_Connection *conn, const exchange *ex,
                                  http_reply *reply)
{
    static const char internal[] = "{\"ok\":false,\"error\":\"internal\"}";
    struct MHD_Response *response;
    enum MHD_Result queued;

    if (reply->body == NULL) { /* a builder ran out of memory */
        reply->status = 500;
        reply->content_type = "application/json";
        response = MHD_create_response_from_buffer(sizeof(internal) - 1, (void *)(uintptr_t)internal,
                                                   MHD_RESPMEM_PERSISTENT);
    } else {
        response = MHD_create_response_from_buffer(strlen(reply->body), reply->body,
                                                   MHD_RESPMEM_MUST_FREE);
    }
    if (response == NULL) {
        free(reply->body);
        return MHD_NO;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, reply->content_type);
    if (atomic_load(&a->draining))
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    queued = MHD_queue_response(conn, (unsigned int)reply->status, response);
    MHD_destroy_response(response);
    metrics_count_request(a->metrics, ex->metric, reply->status);
    return queued;
}

/* Keeps a piece of body, or counts it as dropped once the body is too large. */
static bool take_body(exchange *ex, const char *data, size_t size)
{
    if (!ex->too_large && ex->len + size > REQUEST_MAX_BODY) {
        ex->too_large = true;
        free(ex->body); /* nothing of a refused body is kept */
        ex->body = NULL;
        ex->len = ex->cap = 0;
    }
    if (ex->too_large) {
        ex->discarded += size;
        return ex->discarded <= DISCARD_LIMIT;
    }
    if (ex->len + size > ex->cap) {
        size_t cap = ex->cap ? ex->cap : 1024;
        char *grown;
        while (cap < ex->len + size)
            cap *= 2;
        if (cap > REQUEST_MAX_BODY)
            cap = REQUEST_MAX_BODY;
        grown = realloc(ex->body, cap);
        if (grown == NULL)
            return false;
        ex->body = grown;
        ex->cap = cap;
    }
    memcpy(ex->body + ex->len, data, size);
    ex->len += size;
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **state)
{
    app *a = cls;
    exchange *ex = *state;
    http_request req = {.method = method, .path = url, .header = lookup_header,
                        .query = lookup_query, .transport = conn};
    http_reply reply = {0};

    (void)version;
    if (ex == NULL) { /* headers are in; no body read yet */
        ex = calloc(1, sizeof(*ex));
        if (ex == NULL)
            return MHD_NO;
        *state = ex;
        atomic_fetch_add(&a->in_flight, 1);
        ex->route = routes_begin(a, &req, &ex->metric, &ex->wants_body, &reply);
        if (ex->route == NULL)
            return send_reply(a, conn, ex, &reply);
        return MHD_YES;
    }
    if (ex->route == NULL) /* answered early; libmicrohttpd closes the connection */
        return MHD_YES;
    if (*upload_data_size > 0) {
        size_t size = *upload_data_size;
        *upload_data_size = 0;
        if (!ex->wants_body)
            return MHD_YES; /* a body on a GET means nothing here: ignore it */
        return take_body(ex, upload_data, size) ? MHD_YES : MHD_NO;
    }
    if (ex->too_large) {
        routes_too_large(&reply);
    } else {
        req.body = ex->body != NULL ? ex->body : "";
        req.body_len = ex->len;
        routes_finish(a, ex->route, &req, &reply);
    }
    ex->route = NULL;
    return send_reply(a, conn, ex, &reply);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode code)
{
    app *a = cls;
    exchange *ex = *state;

    (void)conn;
    (void)code;
    if (ex == NULL)
        return;
    free(ex->body);
    free(ex);
    *state = NULL;
    atomic_fetch_sub(&a->in_flight, 1);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    app *a = cls;

    (void)conn;
    (void)socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        atomic_fetch_add(&a->connections, 1);
    else
        atomic_fetch_sub(&a->connections, 1);
}

static void on_mhd_error(void *cls, const char *fmt, va_list ap)
{
    char text[256], quoted[300];
    size_t n;

    (void)cls;
    vsnprintf(text, sizeof(text), fmt, ap);
    n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    log_event(LOG_WARN, "http_error", "detail=%s", log_quote(quoted, sizeof(quoted), text));
}

int http_start(app *a, http_server **out, char *err, size_t errlen)
{
    const service_config *cfg = a->config;
    struct sockaddr_in addr;
    http_server *s;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                         MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;

    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->bind_address, &addr.sin_addr) != 1) {
        snprintf(err, errlen, "BIND_ADDRESS: '%s' is not an IPv4 address", cfg->bind_address);
        return -1;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->a = a;
    s->listen_fd = MHD_INVALID_SOCKET;
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, a,
        /* first, so that libmicrohttpd's complaints about the options below reach it */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->worker_threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, a,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_END);
    if (s->daemon == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%d (port in use?)", cfg->bind_address,
                 cfg->port);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int http_drain(http_server *s, int64_t timeout_ms)
{
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000000L};
    int64_t waited = 0;
    int left;

    atomic_store(&s->a->draining, true);
    s->listen_fd = MHD_quiesce_daemon(s->daemon);
    while ((left = atomic_load(&s->a->in_flight)) > 0 && waited < timeout_ms) {
        nanosleep(&pause, NULL);
        waited += 20;
    }
    return left;
}

void http_stop(http_server *s)
{
    if (s == NULL)
        return;
    MHD_stop_daemon(s->daemon);
    if (s->listen_fd != MHD_INVALID_SOCKET)
        close(s->listen_fd);
    free(s);
}
