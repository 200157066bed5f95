/*
 * http.c - libmicrohttpd with a pool of epoll threads, carrying requests to routes.c.
 *
 * libmicrohttpd calls on_request() several times per request: once when the headers are
 * in (*state is NULL), once per piece of body, and once more with no data when the body is
 * complete. The `exchange` below is what one request remembers between those calls.
 *
 * The event loops never wait: a handler that may (routes_waits: a sale waits for its lock and
 * for PostgreSQL, a lab step for a held request) runs on one of WORKER_THREADS workers. The
 * loop suspends the connection and queues the exchange; the worker runs the handler, keeps
 * the answer in the exchange and resumes the connection; the loop, called once more, sends
 * it. A request run on the loop itself would stop every other connection of that loop for as
 * long as it waits, and nginx sends requests on whichever idle connection it holds: a request
 * held by the lab for a minute would hold the step meant to release it behind itself.
 *
 * A handler may park its request (http_request.park, message.h): it returns with the
 * connection suspended, and whoever has the answer later fills the reply and calls finish,
 * which resumes the connection (libmicrohttpd allows that from any thread). On a worker, of
 * the worker's return and the finish the later resumes (`park_holders`): a finish that comes
 * before the handler has returned must not hand the exchange to the loop, which may free it,
 * while the worker still runs in it. A route tried on the loop first (routes_loop_first: a
 * sale) parks there, or asks for a worker (reply.needs_worker) before it has changed
 * anything: a redis-batch request waits so, with no thread and no worker (service/sale/
 * batch.h), and its batch's leader runs as a worker's job (http_run_later).
 *
 * An answer known from the headers alone (404, 405, 401, 415, 413) is sent at the first
 * call when a body is on its way, so that the body is never read: libmicrohttpd then closes
 * the connection. Without a body it waits for the last call, which keeps the connection
 * alive for the next request (nginx's keepalive pool would otherwise reconnect each time).
 */
#include "service/http/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "service/clock.h"
#include "service/log.h"
#include "service/http/request.h"
#include "service/http/routes.h"

/* A client that keeps sending a refused chunked body is cut off after this much. */
#define DISCARD_LIMIT (1024 * 1024)

/* Connections libmicrohttpd takes past MAX_CONNECTIONS at least, so that one more is answered
 * 503 (and closed) instead of being closed unanswered: a proxy takes a closed connection for a
 * dead replica, a 503 for a busy one. libmicrohttpd's own limit is split evenly over the
 * pool's threads, and a thread at its share closes what it accepts: so it is set to all the
 * descriptors allow, and the replica's limit is counted here, over all threads. */
#define SHED_HEADROOM 64

/* Descriptors kept for everything but client connections: the database and Redis pools, the
 * lock's subscriber and watchdog, logs, the listening socket, epoll's own. */
#define FD_RESERVE 128

typedef struct exchange exchange;

/* What a worker runs: an exchange's handler, or a job (http_run_later). */
typedef struct work {
    void (*run)(http_server *srv, struct work *w);
    struct work *next; /* in the workers' queue */
} work;

struct http_server {
    struct MHD_Daemon *daemon;
    MHD_socket listen_fd; /* closed after the daemon stops (MHD's rule after quiesce) */
    app *a;
    int max_connections; /* MAX_CONNECTIONS, or less when the open-file limit is lower */

    /* The workers and their queue of exchanges to run (suspended connections). */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    work *head, *tail; /* guarded by mu */
    bool stopping;     /* guarded by mu: the workers end once the queue is empty */
    pthread_t *workers;
    int n_workers;
};

struct exchange {
    work w;             /* first: the queue's entry is the exchange */
    const route *route; /* NULL once answered early */
    /* A request run by a worker: what the handler reads, its connection, its answer. */
    struct MHD_Connection *conn;
    const char *method, *url; /* libmicrohttpd's, valid until the request completes */
    http_reply reply;
    atomic_bool answered; /* the worker has set `reply` (release), the loop reads it (acquire) */
    int64_t queued_ns;    /* when it joined the queue (clock_now_ns) */
    /* A parked request (the top of this file): its answer's way back, and who resumes. */
    http_parked parked;
    bool is_parked;          /* set by the handler's thread (park_exchange) */
    atomic_int park_holders; /* the worker and the finish: the second to let go resumes */
    int64_t began_ns;        /* when its handler began */
    /* The replica's time for it (metrics_observe_http): from its headers in, waiting for a
     * worker, in its handler. A worker sets the last two before `answered`. */
    int64_t started_ns, queue_ns, handler_ns;
    bool shed;          /* answered 503 for a connection past MAX_CONNECTIONS: close after */
    bool early_pending; /* an early answer waits in `early` for the last call */
    http_reply early;
    metrics_route metric;
    bool wants_body;
    bool too_large;   /* the body passed REQUEST_MAX_BODY */
    size_t discarded; /* bytes dropped after that */
    char *body;
    size_t len, cap;
};

static const char *lookup_header(void *transport, const char *name)
{
    return MHD_lookup_connection_value(transport, MHD_HEADER_KIND, name);
}

/* libmicrohttpd compares argument names without regard to case; the API's "mode" is
 * lower case, so the first argument spelled exactly so is the one taken. */
typedef struct query_match {
    const char *name;
    const char *value;
    bool found;
} query_match;

static enum MHD_Result match_argument(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    query_match *m = cls;

    (void)kind;
    if (m->found || strcmp(key, m->name) != 0)
        return MHD_YES;
    m->found = true;
    m->value = value != NULL ? value : ""; /* "?mode" names an empty mode */
    return MHD_NO;
}

static const char *lookup_query(void *transport, const char *name)
{
    query_match m = {.name = name};

    MHD_get_connection_values(transport, MHD_GET_ARGUMENT_KIND, match_argument, &m);
    return m.value;
}

/*
 * Decodes %HH escapes in the path and the query, in place, like libmicrohttpd's own
 * decoder, except %00: a NUL inside a C string would silently cut "redis%00x" down to
 * "redis" or "/api/stock/7%00junk" down to goods 7. Left encoded, such a value is
 * refused as what it is.
 */
static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static size_t unescape_without_nul(void *cls, struct MHD_Connection *conn, char *s)
{
    char *in = s, *out = s;

    (void)cls;
    (void)conn;
    while (*in != '\0') {
        int hi, lo;
        if (in[0] == '%' && (hi = hex_value(in[1])) >= 0 && (lo = hex_value(in[2])) >= 0 &&
            (hi | lo) != 0) {
            *out++ = (char)(hi * 16 + lo);
            in += 3;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
    return (size_t)(out - s);
}

/* Whether the request announces a body (a non-zero length, or chunks). */
static bool announces_body(struct MHD_Connection *conn)
{
    const char *length =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);

    if (MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) !=
        NULL)
        return true;
    return length != NULL && strspn(length, "0") != strlen(length);
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
        response = MHD_create_response_from_buffer(
            sizeof(internal) - 1, (void *)(uintptr_t)internal, MHD_RESPMEM_PERSISTENT);
    } else {
        response = MHD_create_response_from_buffer(strlen(reply->body), reply->body,
                                                   MHD_RESPMEM_MUST_FREE);
    }
    if (response == NULL) {
        free(reply->body);
        return MHD_NO;
    }
    MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, reply->content_type);
    if (reply->allow != NULL)
        MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, reply->allow);
    if (reply->bearer_challenge)
        MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (reply->idempotency_key != NULL)
        MHD_add_response_header(response, "Idempotency-Key", reply->idempotency_key);
    if (reply->request_id != NULL)
        MHD_add_response_header(response, "X-Request-Id", reply->request_id);
    if (atomic_load(&a->draining) || ex->shed)
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
    queued = MHD_queue_response(conn, (unsigned int)reply->status, response);
    MHD_destroy_response(response);
    metrics_count_request(a->metrics, ex->metric, reply->status);
    metrics_observe_http(a->metrics, ex->metric, ex->queue_ns, ex->handler_ns,
                         clock_now_ns() - ex->started_ns - ex->queue_ns - ex->handler_ns);
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

/* Under srv->mu: queues w for a worker. */
static void enqueue_work(http_server *srv, work *w)
{
    w->next = NULL;
    if (srv->tail != NULL)
        srv->tail->next = w;
    else
        srv->head = w;
    srv->tail = w;
    pthread_cond_signal(&srv->wake);
}

static void run_exchange(http_server *srv, work *w);

/* Suspends the connection and queues its exchange for a worker (the loop goes on with its
 * other connections). The suspension comes first, so that the worker's resume always finds
 * the connection suspended. False, the connection is then closed, when the workers have
 * stopped (the daemon is stopping too). */
static bool hand_to_worker(http_server *srv, exchange *ex)
{
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        return false;
    }
    MHD_suspend_connection(ex->conn);
    ex->w.run = run_exchange;
    ex->queued_ns = clock_now_ns();
    enqueue_work(srv, &ex->w);
    pthread_mutex_unlock(&srv->mu);
    return true;
}

/* Lets go of a parked exchange (the worker once its handler returned, and the finish): the
 * second resumes its connection, whose loop then sends the answer. */
static void park_release(exchange *ex)
{
    if (atomic_fetch_sub_explicit(&ex->park_holders, 1, memory_order_acq_rel) == 1)
        MHD_resume_connection(ex->conn);
}

/* A parked request's answer is in its reply (http_parked.finish). */
static void finish_parked(http_parked *p)
{
    exchange *ex = (exchange *)((char *)p - offsetof(exchange, parked));

    ex->handler_ns = clock_now_ns() - ex->began_ns;
    atomic_store_explicit(&ex->answered, true, memory_order_release);
    park_release(ex);
}

/* http_request.park. On a worker the connection is suspended already, and the worker holds
 * it too; on an event loop it is suspended here, and the finish alone resumes it: the loop
 * serves the resumed connection only once its handler has returned. */
static http_parked *park_exchange(const http_request *req)
{
    exchange *ex = req->carrier;

    ex->is_parked = true;
    if (req->on_loop)
        MHD_suspend_connection(ex->conn);
    atomic_store_explicit(&ex->park_holders, req->on_loop ? 1 : 2, memory_order_relaxed);
    ex->parked = (http_parked){.reply = &ex->reply, .finish = finish_parked};
    return &ex->parked;
}

/* Runs one queued exchange's handler, keeps the answer and resumes the connection, whose loop
 * then sends it (on_request); a parked one is resumed by the later of this and its finish. */
static void run_exchange(http_server *srv, work *w)
{
    exchange *ex = (exchange *)w;
    http_request req = {.method = ex->method,
                        .path = ex->url,
                        .header = lookup_header,
                        .query = lookup_query,
                        .transport = ex->conn,
                        .body = ex->body != NULL ? ex->body : "",
                        .body_len = ex->len,
                        .park = park_exchange,
                        .carrier = ex};

    int64_t began = clock_now_ns(), waited_ms = clock_ms_since(ex->queued_ns);

    ex->queue_ns = began - ex->queued_ns;
    ex->began_ns = began;
    memset(&ex->reply, 0, sizeof(ex->reply));
    /* Load shed: a request that waited for a worker past the lock's own wait bound is
     * answered 503 without being run (nothing sold), so that a queue longer than the workers
     * can serve in time costs its clients a fast refusal, not an unbounded wait. */
    if (waited_ms > srv->a->config->lock_wait_ms)
        routes_shed_queued(&ex->reply, waited_ms, srv->n_workers);
    else
        routes_finish(srv->a, ex->route, &req, &ex->reply);
    if (ex->is_parked) {
        park_release(ex); /* ex may be gone after this */
        return;
    }
    ex->handler_ns = clock_now_ns() - began;
    atomic_store_explicit(&ex->answered, true, memory_order_release);
    MHD_resume_connection(ex->conn);
}

static void *worker_main(void *arg)
{
    http_server *srv = arg;
    work *w;

    for (;;) {
        pthread_mutex_lock(&srv->mu);
        while (srv->head == NULL && !srv->stopping)
            pthread_cond_wait(&srv->wake, &srv->mu);
        w = srv->head;
        if (w == NULL) { /* stopping, and nothing left to run */
            pthread_mutex_unlock(&srv->mu);
            return NULL;
        }
        srv->head = w->next;
        if (srv->head == NULL)
            srv->tail = NULL;
        pthread_mutex_unlock(&srv->mu);
        w->run(srv, w);
    }
}

/* Starts n workers; false (none left running) when a thread cannot be made. */
static bool start_workers(http_server *srv, int n)
{
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->wake, NULL);
    srv->workers = calloc((size_t)n, sizeof(*srv->workers));
    if (srv->workers == NULL)
        return false;
    for (srv->n_workers = 0; srv->n_workers < n; srv->n_workers++) {
        if (pthread_create(&srv->workers[srv->n_workers], NULL, worker_main, srv) != 0)
            break;
    }
    if (srv->n_workers == n)
        return true;
    log_event(LOG_ERROR, "workers_failed", "started=%d wanted=%d", srv->n_workers, n);
    return false;
}

/* A job for a worker (http_run_later). */
typedef struct job {
    work w; /* first */
    void (*fn)(void *arg);
    void *arg;
} job;

static void run_job(http_server *srv, work *w)
{
    job *j = (job *)w;

    (void)srv;
    j->fn(j->arg);
    free(j);
}

int http_run_later(void *server, void (*fn)(void *arg), void *arg)
{
    http_server *srv = server;
    job *j = malloc(sizeof(*j));

    if (j == NULL)
        return -1;
    *j = (job){.w = {.run = run_job}, .fn = fn, .arg = arg};
    pthread_mutex_lock(&srv->mu);
    if (srv->stopping) {
        pthread_mutex_unlock(&srv->mu);
        free(j);
        return -1;
    }
    enqueue_work(srv, &j->w);
    pthread_mutex_unlock(&srv->mu);
    return 0;
}

/* Lets the workers run what is queued, then ends and joins them; frees what start_workers
 * made. Every suspended connection has been resumed once this returns: a parked request's
 * batch runs on a worker, or on the thread that is refused a worker's job. */
static void stop_workers(http_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->stopping = true;
    pthread_cond_broadcast(&srv->wake);
    pthread_mutex_unlock(&srv->mu);
    for (int i = 0; i < srv->n_workers; i++)
        pthread_join(srv->workers[i], NULL);
    free(srv->workers);
    pthread_cond_destroy(&srv->wake);
    pthread_mutex_destroy(&srv->mu);
}

/* Runs a handler on the event loop: one that never waits, or one tried here first
 * (routes_loop_first), which answers, parks, or asks for a worker. */
static enum MHD_Result run_on_loop(http_server *srv, exchange *ex, http_request *req)
{
    int64_t began = clock_now_ns();

    req->body = ex->body != NULL ? ex->body : "";
    req->body_len = ex->len;
    req->on_loop = routes_waits(ex->route);
    req->park = req->on_loop ? park_exchange : NULL;
    req->carrier = ex;
    ex->began_ns = began;
    memset(&ex->reply, 0, sizeof(ex->reply));
    routes_finish(srv->a, ex->route, req, &ex->reply);
    if (ex->is_parked)
        return MHD_YES; /* answered by finish_parked; the loop sends it once resumed */
    if (ex->reply.needs_worker)
        return hand_to_worker(srv, ex) ? MHD_YES : MHD_NO;
    ex->handler_ns = clock_now_ns() - began;
    ex->route = NULL;
    return send_reply(srv->a, ex->conn, ex, &ex->reply);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **state)
{
    http_server *srv = cls;
    app *a = srv->a;
    exchange *ex = *state;
    http_request req = {.method = method,
                        .path = url,
                        .header = lookup_header,
                        .query = lookup_query,
                        .transport = conn};
    http_reply reply = {0};

    (void)version;
    if (ex == NULL) { /* headers are in; no body read yet */
        ex = calloc(1, sizeof(*ex));
        if (ex == NULL)
            return MHD_NO;
        *state = ex;
        ex->started_ns = clock_now_ns();
        atomic_fetch_add(&a->in_flight, 1);
        ex->route = routes_begin(a, &req, &ex->metric, &ex->wants_body, &reply);
        if (ex->route != NULL && atomic_load(&a->connections) > srv->max_connections) {
            routes_shed(&reply, srv->max_connections);
            ex->route = NULL;
            ex->shed = true;
        }
        if (ex->route != NULL)
            return MHD_YES;
        if (announces_body(conn))
            return send_reply(a, conn, ex, &reply);
        ex->early = reply;
        ex->early_pending = true;
        return MHD_YES;
    }
    if (atomic_load_explicit(&ex->answered, memory_order_acquire)) { /* resumed by its worker */
        atomic_store_explicit(&ex->answered, false, memory_order_relaxed);
        ex->route = NULL;
        return send_reply(a, conn, ex, &ex->reply);
    }
    if (ex->early_pending) {
        *upload_data_size = 0;
        ex->early_pending = false;
        return send_reply(a, conn, ex, &ex->early);
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
    ex->conn = conn;
    ex->method = method;
    ex->url = url;
    if (ex->too_large)
        routes_too_large(&reply);
    else if (routes_waits(ex->route) && !routes_loop_first(ex->route))
        return hand_to_worker(srv, ex) ? MHD_YES : MHD_NO;
    else
        return run_on_loop(srv, ex, &req);
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
    if (ex->early_pending) /* the connection ended before the answer went out */
        free(ex->early.body);
    if (atomic_load_explicit(&ex->answered, memory_order_acquire)) /* likewise a worker's */
        free(ex->reply.body);
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

/* libmicrohttpd's limit: every descriptor the open-file limit leaves after FD_RESERVE (the
 * soft limit is raised to the hard one first, as Redis does for its clients). Sets *shed_at,
 * the replica's own limit: MAX_CONNECTIONS, lowered to leave SHED_HEADROOM below that (with a
 * warning when lowered). */
static unsigned int connection_limit(const service_config *cfg, int *shed_at)
{
    struct rlimit rl;
    rlim_t fit;

    *shed_at = cfg->max_connections;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return (unsigned int)cfg->max_connections + SHED_HEADROOM;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
        (void)getrlimit(RLIMIT_NOFILE, &rl);
    }
    fit = rl.rlim_cur > FD_RESERVE + SHED_HEADROOM + 16 ? rl.rlim_cur - FD_RESERVE
                                                        : 16 + SHED_HEADROOM;
    if (fit > 65536)
        fit = 65536;
    if ((rlim_t)cfg->max_connections + SHED_HEADROOM > fit) {
        *shed_at = (int)(fit - SHED_HEADROOM);
        log_event(LOG_WARN, "connections_lowered", "max_connections=%d open_files=%llu now=%d",
                  cfg->max_connections, (unsigned long long)rl.rlim_cur, *shed_at);
    }
    return (unsigned int)fit;
}

/* Event loops: one per core, at most EVENT_LOOPS_MAX. They only read, parse and write (what
 * waits is the workers'), so more than the cores would only take turns. */
#define EVENT_LOOPS_MAX 8

static unsigned int event_loops(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    return cores < 1 ? 1 : cores > EVENT_LOOPS_MAX ? EVENT_LOOPS_MAX : (unsigned int)cores;
}

int http_start(app *a, http_server **out, char *err, size_t errlen)
{
    const service_config *cfg = a->config;
    struct sockaddr_in addr;
    http_server *s;
    unsigned int limit;
    /* A few event loops, each an epoll thread over its share of the connections; what waits
     * runs on the workers (see the top of this file). */
    unsigned int flags =
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;

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
    if (!start_workers(s, cfg->worker_threads)) {
        snprintf(err, errlen, "cannot start %d worker threads", cfg->worker_threads);
        stop_workers(s);
        free(s);
        return -1;
    }
    limit = connection_limit(cfg, &s->max_connections);
    /* One option and its arguments per line. */
    /* clang-format off */
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s,
        /* first, so that libmicrohttpd's complaints about the options below reach it */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_UNESCAPE_CALLBACK, unescape_without_nul, NULL,
        MHD_OPTION_THREAD_POOL_SIZE, event_loops(),
        MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->connection_timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, a,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, a,
        /* A proxy opening connections in a burst must not see one dropped (a SYN lost is a
         * second's wait, and a proxy's connect timeout: a replica taken for dead); the kernel
         * caps it at net.core.somaxconn (4096 on Debian 12). */
        MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)s->max_connections,
        MHD_OPTION_END);
    /* clang-format on */
    if (s->daemon == NULL) {
        snprintf(err, errlen, "cannot listen on %s:%d (port in use?)", cfg->bind_address,
                 cfg->port);
        stop_workers(s);
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
    /* The workers first: each answers what it runs and resumes its connection, so that no
     * connection is suspended when the daemon stops, and no worker touches one after. */
    stop_workers(s);
    MHD_stop_daemon(s->daemon);
    if (s->listen_fd != MHD_INVALID_SOCKET)
        close(s->listen_fd);
    free(s);
}
