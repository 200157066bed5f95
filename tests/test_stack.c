/*
 * test_stack.c - integration tests of the running stack: nginx in front of three replicas of
 * stockd, with PostgreSQL and Redis behind them, all real processes. tests/integration.sh
 * starts the stack on free ports and runs this program with where things listen:
 *
 *   STOCK_URL     nginx, e.g. http://127.0.0.1:18080 (what clients talk to)
 *   REPLICA_URLS  each replica directly, comma-separated
 *   ADMIN_TOKEN   the token the stack was started with (admin reset needs it)
 *   REDIS_PORT    Redis on 127.0.0.1, to hold a lock as another owner would (redis-cli)
 *   PG_PORT       PostgreSQL on 127.0.0.1 (database and user `stock`, as scripts/stack.sh
 *                 makes them): the idempotency case changes stock there, behind the
 *                 service's back, to show that a stored 409 or 404 is replayed, not redone
 *   RUN_DIR       and the other port variables: inherited by `scripts/stack.sh redis-stop`,
 *                 `redis-start`, `pg-stop` and `pg-start`, which the dependency-down cases
 *                 run from the project root (the current directory)
 *   LOCK_WAIT_MS  optional: the stack's lock wait bound (default 2000, the service's)
 *   SLOW_REPLICA_URL       one more replica, not behind nginx, that sleeps between its read
 *                          and its write for longer than its lock's lease (the lock_lost
 *                          cases need it, and fail without it)
 *   SLOW_REPLICA_LOG       its log file (to report which check refused a sale)
 *   SLOW_REPLICA_DELAY_MS  its BUSINESS_DELAY_MS
 *   SLOW_REPLICA_LEASE_MS  its LOCK_LEASE_MS
 *
 * A missing variable fails every case with a message naming it: a test run that cannot
 * reach its stack must not look like a pass.
 *
 * What the cases prove, in the order they run (see the array in main()):
 *   - the contract of ../shared/API.md, endpoint by endpoint: status, Content-Type and body;
 *   - the request target taken as sent: %00 is no NUL that cuts "redis%00x" down to a mode
 *     or "/api/stock/7%00junk" down to goods 7; the query key "mode" spelled exactly so
 *     (MODE is another key), "?mode" alone an empty, unknown mode;
 *   - the headers of the errors: Allow on a 405, WWW-Authenticate on a 401;
 *   - keep-alive: an early answer (404, 405, 401) to a request without a body leaves the
 *     connection open for the next request;
 *   - nginx's own answers to TRACE (405) and to an HTTP/2.0 request line (505) are JSON;
 *   - over 60 malformed deduct requests that each get their 4xx and change nothing;
 *   - idempotency: one key sent 20 times at once sells once, in every mode;
 *   - `redis` through nginx over three replicas: 3,000 deductions of 1 from 64 clients
 *     against 2,000 units sell exactly 2,000; `local` on one replica the same;
 *   - `none` and `local` over three replicas: whatever they oversell, the books agree with
 *     the answers (sold = the number of 200s);
 *   - admin reset refuses a missing or wrong token;
 *   - 503 lock_lost: a holder paused past its lease sells nothing, whether another client took
 *     the lock over and sold (Kleppmann's scenario: one sale in the books, not two), only the
 *     database knows of a newer holder (the fence alone refuses), or the lock merely vanished
 *     (the check before the commit alone refuses);
 *   - Redis down: `redis` mode answers 503 quickly, /readyz says 503, `none` still sells, and
 *     everything recovers without a restart once Redis is back;
 *   - PostgreSQL down: every mode, the stock and the reset answer 503 unavailable quickly,
 *     /readyz says 503, /healthz 200, and every mode sells again without a restart once it
 *     is back. These two run last; their teardowns bring the server back even when an
 *     assertion failed.
 *
 * Design:
 *   - http_do() makes one call (method, URL, headers, body -> status, body, Content-Type,
 *     header lines, whether a connection was opened) with a libcurl easy handle, always with
 *     connect and total timeouts, so that a hung replica fails a case instead of hanging the
 *     run. The main thread reuses one handle (keep-alive); each load thread has its own,
 *     since an easy handle must never be used by two threads at once. What libcurl will not
 *     send (a request line in HTTP/2.0 over plain TCP), raw_call() writes on a socket of its
 *     own.
 *   - cmocka's assertions longjmp out of a case, so everything a case allocates goes through
 *     own() and is freed by the case's teardown: a failed case leaks nothing, and
 *     LeakSanitizer does not bury the real failure under leak reports.
 *   - Load threads never assert (cmocka is not thread-safe): they count what they saw, and
 *     the main thread asserts on the totals and prints them.
 *   - Each case resets the goods it uses, with ids of its own, so no case depends on
 *     another's leftovers or on a previous run against the same database.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPLICAS 8
#define CONNECT_TIMEOUT_MS 3000L
#define TIMEOUT_MARGIN_MS 10000L      /* a request's timeout: the lock wait bound plus this */
#define MAX_REPLY_BYTES (1024 * 1024) /* no answer of the service is anywhere near this */
#define BODY_LIMIT 16384              /* API.md: a larger deduct body is a 413 */

#define LOAD_THREADS 64
#define LOAD_REQUESTS 3000
#define LOAD_STOCK 2000
#define IDEM_THREADS 20

#define READY_WAIT_S 10.0 /* how long Redis's return may take to show in /readyz */
#define DOWN_ANSWER_S 2.0 /* "quickly": a redis-mode deduct with Redis down answers within */
/* "Quickly" with PostgreSQL down: the service waits at most DB_WAIT_MS (2 s) for a pooled
 * connection, and a refused connect fails at once; this leaves a second for the rest. */
#define PG_DOWN_ANSWER_S 3.0
#define PG_READY_WAIT_S 15.0 /* how long PostgreSQL's return may take to show in /readyz */
/* The slow replica must be seen holding the lock, and then reading the stock, within this
 * (well inside its BUSINESS_DELAY_MS pause, so the takeover happens during the pause). */
#define SLOW_HOLD_WAIT_S 1.0

/* Goods ids, distinct per case. GOODS_UNKNOWN is never reset by anyone, so it stays unknown. */
#define GOODS_DEDUCT 3101LL
#define GOODS_MODES 3102LL
#define GOODS_LIMITS 3201LL
#define GOODS_MEDIA 3202LL
#define GOODS_LOCK 3301LL
#define GOODS_STOCK 3401LL
#define GOODS_METRICS 3402LL
#define GOODS_RESET 3501LL
#define GOODS_MALFORMED 3601LL
#define GM "3601" /* GOODS_MALFORMED as text, for the literal bodies of the malformed table */
#define GOODS_IDEM 3701LL /* 3701 .. 3710 */
#define GOODS_LOAD_REDIS 3801LL
#define GOODS_LOAD_LOCAL1 3802LL
#define GOODS_LOAD_NONE3 3803LL
#define GOODS_LOAD_LOCAL3 3804LL
#define GOODS_LOAD_PG 3805LL     /* 3805 .. 3807: one per PostgreSQL rung */
#define GOODS_PG_OUTCOMES 3808LL /* 3808 .. 3810 */
#define GOODS_LOAD_BATCH 3811LL
#define GOODS_BATCH_IDEM 3812LL /* 3812 .. 3813 */
#define GOODS_AUTH 3901LL
#define GOODS_DOWN 4001LL
#define GOODS_PG_DOWN 4002LL
#define GOODS_PG_FROZEN 4003LL
#define GOODS_LOST_TAKEOVER 4101LL
#define GOODS_LOST_FENCE 4102LL
#define GOODS_LOST_WATCHDOG 4103LL
#define GOODS_FIVE_STEPS 4104LL
#define GOODS_FIVE_STEPS_MIRROR 4105LL
#define GOODS_ENCODED 4201LL
#define GOODS_QUERY_KEY 4202LL
#define GOODS_KEEPALIVE 4203LL
#define GOODS_PG2_OUTCOMES 4301LL /* 4301 .. 4303: pg-optimistic, pg-lockrow, pg-lockrow-ttl */
#define GOODS_LOAD_OPTIMISTIC 4304LL
#define GOODS_LOAD_LOCKROW 4305LL
#define GOODS_LOCKROW_WEDGE 4306LL
#define GOODS_LOCKROW_TTL 4307LL
#define GOODS_PG_LOCK_WAIT 4308LL
#define GOODS_UNKNOWN 987654321LL
#define GOODS_MAX 9223372036854775807LL /* 2^63-1: valid, and never created */

/* ------------------------------------------------------------------------------------------
 * The environment the harness gives us
 * ------------------------------------------------------------------------------------------ */

typedef struct test_env {
    const char *stock_url;        /* nginx */
    char *replicas[MAX_REPLICAS]; /* each replica's URL (malloc'd) */
    size_t n_replicas;
    char instances[MAX_REPLICAS][64]; /* each replica's instance name, from its /healthz */
    const char *admin_token;
    const char *redis_port;
    const char *pg_port;
    const char *slow_url;  /* the slow replica (not behind nginx); NULL when not given */
    const char *slow_log;  /* its log file; NULL when not given */
    long slow_delay_ms;    /* its BUSINESS_DELAY_MS */
    long slow_lease_ms;    /* its LOCK_LEASE_MS */
    char *delayed_urls[2]; /* the two delayed replicas (long lease); NULL when not given */
    long delayed_delay_ms; /* their BUSINESS_DELAY_MS */
    long lock_wait_ms;
    long timeout_ms;       /* every request's: lock_wait_ms + TIMEOUT_MARGIN_MS */
    char auth_header[320]; /* "Authorization: Bearer <token>" */
    char run_tag[32];      /* makes this run's idempotency keys its own */
    char problem[512];     /* why the stack is unusable; "" when it is fine */
} test_env;

static test_env g_env;
static CURL *g_curl; /* the main thread's handle */
static const char *g_case_name = "";
static double g_case_start;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------------------------
 * What a case owns, freed by its teardown (so a failed assertion leaks nothing)
 * ------------------------------------------------------------------------------------------ */

typedef void (*release_fn)(void *);

typedef struct owned {
    void *ptr;
    release_fn release;
} owned;

static owned *g_owned;
static size_t g_n_owned, g_cap_owned;

/* Registers ptr to be released by release() at the end of the case; returns ptr. NULL is
 * returned as is (nothing to release). */
static void *own(void *ptr, release_fn release)
{
    if (ptr == NULL)
        return NULL;
    if (g_n_owned == g_cap_owned) {
        size_t cap = g_cap_owned ? 2 * g_cap_owned : 256;
        owned *grown = realloc(g_owned, cap * sizeof(*grown));
        if (grown == NULL) {
            release(ptr);
            fail_msg("out of memory");
            return NULL; /* not reached: fail_msg() leaves the case */
        }
        g_owned = grown;
        g_cap_owned = cap;
    }
    g_owned[g_n_owned].ptr = ptr;
    g_owned[g_n_owned].release = release;
    g_n_owned++;
    return ptr;
}

/* Releases everything the case owned, newest first. */
static void release_owned(void)
{
    while (g_n_owned > 0) {
        g_n_owned--;
        g_owned[g_n_owned].release(g_owned[g_n_owned].ptr);
    }
}

static void json_release(void *json)
{
    json_decref((json_t *)json);
}

/* ------------------------------------------------------------------------------------------
 * HTTP
 * ------------------------------------------------------------------------------------------ */

#define NO_CONTENT_TYPE "" /* http_request.content_type: send no Content-Type header at all */

typedef struct http_request {
    const char *method;       /* "GET", "POST", "DELETE", ... */
    const char *base;         /* "http://127.0.0.1:18080" */
    const char *path;         /* "/api/deduct?mode=redis" */
    const char *body;         /* NULL: no body */
    size_t body_len;          /* bytes of body; 0 means strlen(body) */
    const char *content_type; /* NULL: application/json when there is a body; NO_CONTENT_TYPE */
    const char *headers[4];   /* more "Name: value" lines ("Name;" sends it empty), NULL-ended */
    bool chunked;             /* send the body with Transfer-Encoding: chunked, no length */
    long timeout_ms;          /* 0: g_env.timeout_ms */
} http_request;

typedef struct http_reply {
    long status; /* 0 when no answer came (error says why) */
    char *body;  /* NUL-terminated, malloc'd ("" when empty) */
    size_t len;
    char content_type[128];      /* "" when absent */
    double seconds;              /* wall time of the call */
    char error[CURL_ERROR_SIZE]; /* libcurl's reason when status is 0 */
    char headers[1024];          /* the answer's header lines, "Name: value\r\n" each (cut short
                                    when longer: nothing the service sends comes near) */
    long connects;               /* connections opened for this call: 0 when one was reused */
    long local_port;             /* the local port of the connection the answer came on */
} http_reply;

typedef struct byte_buffer {
    char *data;
    size_t len, cap;
    bool overflow;
} byte_buffer;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    byte_buffer *b = userdata;
    size_t n = size * nmemb;

    if (b->len + n + 1 > MAX_REPLY_BYTES) {
        b->overflow = true;
        return 0; /* makes libcurl stop with an error */
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = 2 * (b->len + n + 1);
        char *grown = realloc(b->data, cap);
        if (grown == NULL)
            return 0;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* The body of a chunked upload, handed to libcurl piece by piece. */
typedef struct upload_cursor {
    const char *data;
    size_t left;
} upload_cursor;

static size_t on_upload(char *dest, size_t size, size_t nmemb, void *userdata)
{
    upload_cursor *c = userdata;
    size_t n = size * nmemb;

    if (n > c->left)
        n = c->left;
    if (n > 4096)
        n = 4096; /* several chunks, as a streaming client would send */
    memcpy(dest, c->data, n);
    c->data += n;
    c->left -= n;
    return n;
}

/* Keeps the header lines of the answer in reply->headers, the status line first. A status
 * line starts them over: only the last answer's are kept (an interim 1xx's are not). */
static size_t on_header(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    http_reply *r = userdata;
    size_t n = size * nmemb, used = strlen(r->headers);

    if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0)
        used = 0;
    if (used + n < sizeof(r->headers)) {
        memcpy(r->headers + used, ptr, n);
        r->headers[used + n] = '\0';
    }
    return n;
}

/*
 * Finds the header `name` (any case) in a block of "Name: value\r\n" lines and copies its
 * value, without the blanks around it, to out (len bytes, cut short when longer). Returns
 * whether the block has it; out is "" when not.
 */
static bool header_in(const char *block, const char *name, char *out, size_t len)
{
    size_t n = strlen(name);
    const char *line = block;

    out[0] = '\0';
    while (*line != '\0') {
        size_t line_len = strcspn(line, "\r\n");
        if (line_len > n && strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1, *end = line + line_len;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
                end--;
            snprintf(out, len, "%.*s", (int)(end - v), v);
            return true;
        }
        line += line_len;
        line += strspn(line, "\r\n");
    }
    return false;
}

/*
 * Makes one call on handle h and fills *out. The handle is reset first, so no option of a
 * previous call leaks into this one (the reset keeps its open connections: keep-alive still
 * works). out->body is malloc'd, "" when the answer had none; the caller frees it whether
 * the call succeeded or not. Returns 0 when an answer came, -1 when none did (out->error
 * says why). Thread-safe as long as no two threads share h.
 */
static int http_do(CURL *h, const http_request *rq, http_reply *out)
{
    char url[2048];
    char content_type[160];
    struct curl_slist *headers = NULL, *grown;
    byte_buffer buf = {0};
    upload_cursor cursor = {0};
    size_t body_len = 0;
    const char *ct = NULL;
    CURLcode res;
    double start;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    snprintf(url, sizeof(url), "%s%s", rq->base, rq->path);
    if (rq->body != NULL)
        body_len = rq->body_len ? rq->body_len : strlen(rq->body);

    /* Headers: never "Expect: 100-continue" (a body goes at once, as most clients send it),
     * the Content-Type asked for, and the caller's extra lines. */
    if (rq->content_type == NULL && rq->body != NULL) {
        ct = "Content-Type: application/json";
    } else if (rq->content_type != NULL && rq->content_type[0] == '\0') {
        ct = "Content-Type:"; /* removes the form type libcurl would add to a POST */
    } else if (rq->content_type != NULL) {
        snprintf(content_type, sizeof(content_type), "Content-Type: %s", rq->content_type);
        ct = content_type;
    }
    const char *lines[8] = {"Expect:", ct, rq->chunked ? "Transfer-Encoding: chunked" : NULL};
    for (size_t i = 0; i < 4 && rq->headers[i] != NULL; i++)
        lines[3 + i] = rq->headers[i];
    for (size_t i = 0; i < 8; i++) {
        if (lines[i] == NULL)
            continue;
        grown = curl_slist_append(headers, lines[i]);
        if (grown == NULL) {
            snprintf(out->error, sizeof(out->error), "out of memory");
            goto out;
        }
        headers = grown;
    }

    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, rq->timeout_ms ? rq->timeout_ms : g_env.timeout_ms);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, out);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, out->error);
    if (rq->body != NULL && rq->chunked) {
        cursor.data = rq->body;
        cursor.left = body_len;
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_upload);
        curl_easy_setopt(h, CURLOPT_READDATA, &cursor);
    } else if (rq->body != NULL) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)body_len);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body);
    }
    if (strcmp(rq->method, "GET") != 0 && !(strcmp(rq->method, "POST") == 0 && rq->body))
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);

    start = now_s();
    res = curl_easy_perform(h);
    out->seconds = now_s() - start;
    if (res != CURLE_OK) {
        if (buf.overflow)
            snprintf(out->error, sizeof(out->error), "answer larger than %d bytes",
                     MAX_REPLY_BYTES);
        else if (out->error[0] == '\0')
            snprintf(out->error, sizeof(out->error), "%s", curl_easy_strerror(res));
        goto out;
    }
    char *type = NULL;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &type);
    if (type != NULL)
        snprintf(out->content_type, sizeof(out->content_type), "%s", type);
    curl_easy_getinfo(h, CURLINFO_NUM_CONNECTS, &out->connects);
    curl_easy_getinfo(h, CURLINFO_LOCAL_PORT, &out->local_port);
    rc = 0;
out:
    /* The handle keeps pointers to these until its next reset: clear them now. */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    curl_slist_free_all(headers);
    out->body = buf.data ? buf.data : strdup("");
    out->len = buf.data ? buf.len : 0;
    if (out->body == NULL)
        rc = -1;
    return rc;
}

static void reply_release(void *p)
{
    http_reply *r = p;
    free(r->body);
    free(r);
}

/* Main thread: makes the call, fails the case when no answer came. The reply is owned by
 * the case. */
static http_reply *call(const http_request *rq)
{
    http_reply *r = own(calloc(1, sizeof(*r)), reply_release);
    if (r == NULL)
        fail_msg("out of memory");
    if (http_do(g_curl, rq, r) != 0)
        fail_msg("%s %s%s: no answer: %s", rq->method, rq->base, rq->path, r->error);
    return r;
}

static http_reply *get(const char *base, const char *path)
{
    http_request rq = {.method = "GET", .base = base, .path = path};
    return call(&rq);
}

/* The value of the answer's header `name` (any case) in out; false, out "", without one. */
static bool reply_header(const http_reply *r, const char *name, char *out, size_t len)
{
    return header_in(r->headers, name, out, len);
}

/* Whether the bytes read so far hold a whole answer: its header and the Content-Length
 * bytes after it. Without a length, only the end of the connection says so. */
static bool raw_answer_complete(const char *buf, size_t len)
{
    const char *end = strstr(buf, "\r\n\r\n");
    char length[32];

    if (end == NULL || !header_in(buf, "Content-Length", length, sizeof(length)))
        return false;
    return len - (size_t)(end + 4 - buf) >= strtoul(length, NULL, 10);
}

/*
 * Sends `request`, bytes as they are, on a new TCP connection to base ("http://HOST:PORT")
 * and reads the answer into buf (cap bytes, NUL-terminated, *len of them): up to its
 * Content-Length, or to the end of the connection. Every wait is bounded by
 * CONNECT_TIMEOUT_MS. Returns 0, or -1 with the reason in err.
 */
static int raw_exchange(const char *base, const char *request, char *buf, size_t cap, size_t *len,
                        char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *addr = NULL;
    struct timeval bound = {.tv_sec = CONNECT_TIMEOUT_MS / 1000,
                            .tv_usec = (CONNECT_TIMEOUT_MS % 1000) * 1000};
    char host[64], port[8];
    size_t sent = 0, want = strlen(request);
    int fd = -1, rc = -1, gai;

    *len = 0;
    buf[0] = '\0';
    if (sscanf(base, "http://%63[^:/]:%7[0-9]", host, port) != 2) {
        snprintf(err, errlen, "'%s' is not http://HOST:PORT", base);
        goto out;
    }
    if ((gai = getaddrinfo(host, port, &hints, &addr)) != 0) {
        snprintf(err, errlen, "%s:%s: %s", host, port, gai_strerror(gai));
        goto out;
    }
    fd = socket(addr->ai_family, addr->ai_socktype, addr->ai_protocol);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof(bound)) != 0 ||
        connect(fd, addr->ai_addr, addr->ai_addrlen) != 0) {
        snprintf(err, errlen, "connect to %s:%s: %s", host, port, strerror(errno));
        goto out;
    }
    while (sent < want) {
        ssize_t n = send(fd, request + sent, want - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "send: %s", n < 0 ? strerror(errno) : "nothing sent");
            goto out;
        }
        sent += (size_t)n;
    }
    while (*len + 1 < cap && !raw_answer_complete(buf, *len)) {
        ssize_t n = recv(fd, buf + *len, cap - 1 - *len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, errlen, "recv after %zu bytes: %s", *len, strerror(errno));
            goto out;
        }
        if (n == 0)
            break; /* the server closed: the answer is what came */
        *len += (size_t)n;
        buf[*len] = '\0';
    }
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    if (addr != NULL)
        freeaddrinfo(addr);
    return rc;
}

/* raw_exchange() on the main thread: the answer parsed into a reply owned by the case (its
 * status, header lines, Content-Type and body). Fails the case when no HTTP answer came. */
static http_reply *raw_call(const char *base, const char *request)
{
    char buf[16384];
    size_t len;
    http_reply *r = own(calloc(1, sizeof(*r)), reply_release);

    if (r == NULL)
        fail_msg("out of memory");
    if (raw_exchange(base, request, buf, sizeof(buf), &len, r->error, sizeof(r->error)) != 0)
        fail_msg("raw request to %s: no answer: %s", base, r->error);
    const char *head_end = strstr(buf, "\r\n\r\n");
    if (sscanf(buf, "HTTP/%*d.%*d %ld", &r->status) != 1 || head_end == NULL)
        fail_msg("raw request to %s: not an HTTP answer: %.300s", base, buf);
    snprintf(r->headers, sizeof(r->headers), "%.*s\r\n", (int)(head_end - buf), buf);
    reply_header(r, "Content-Type", r->content_type, sizeof(r->content_type));
    r->len = len - (size_t)(head_end + 4 - buf);
    r->body = malloc(r->len + 1);
    if (r->body == NULL)
        fail_msg("out of memory");
    memcpy(r->body, head_end + 4, r->len);
    r->body[r->len] = '\0';
    return r;
}

/* ------------------------------------------------------------------------------------------
 * JSON checks
 * ------------------------------------------------------------------------------------------ */

/* Whether a Content-Type value is `type`, optionally followed by parameters. */
static bool content_type_is(const char *value, const char *type)
{
    size_t n = strlen(type);
    return strncasecmp(value, type, n) == 0 &&
           (value[n] == '\0' || value[n] == ';' || value[n] == ' ');
}

/* Asserts that r has `status`, Content-Type application/json and a JSON object body (parsed
 * with duplicate keys refused); returns the object, owned by the case. */
static json_t *expect_json(const http_reply *r, long status, const char *what)
{
    json_error_t jerr;
    json_t *j;

    if (r->status != status)
        fail_msg("%s: status %ld, want %ld; body: %.400s", what, r->status, status, r->body);
    if (!content_type_is(r->content_type, "application/json"))
        fail_msg("%s: Content-Type '%s', want application/json; body: %.200s", what,
                 r->content_type, r->body);
    j = own(json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr), json_release);
    if (j == NULL)
        fail_msg("%s: the body is not JSON (%s): %.400s", what, jerr.text, r->body);
    if (!json_is_object(j))
        fail_msg("%s: the body is not a JSON object: %.400s", what, r->body);
    return j;
}

static long long field_int(const json_t *obj, const char *key, const char *what)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        fail_msg("%s: field '%s' missing or not an integer", what, key);
    return (long long)json_integer_value(v);
}

static const char *field_str(const json_t *obj, const char *key, const char *what)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        fail_msg("%s: field '%s' missing or not a string", what, key);
    return json_string_value(v);
}

static bool field_bool(const json_t *obj, const char *key, const char *what)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_boolean(v))
        fail_msg("%s: field '%s' missing or not a boolean", what, key);
    return json_is_true(v);
}

static void expect_field_int(const json_t *obj, const char *key, long long want, const char *what)
{
    long long got = field_int(obj, key, what);
    if (got != want)
        fail_msg("%s: %s is %lld, want %lld", what, key, got, want);
}

static void expect_field_str(const json_t *obj, const char *key, const char *want, const char *what)
{
    const char *got = field_str(obj, key, what);
    if (strcmp(got, want) != 0)
        fail_msg("%s: %s is '%s', want '%s'", what, key, got, want);
}

/* Asserts an error answer: status, JSON, ok false and the error code. Returns the object. */
static json_t *expect_error(const http_reply *r, long status, const char *error, const char *what)
{
    json_t *j = expect_json(r, status, what);
    if (field_bool(j, "ok", what))
        fail_msg("%s: ok is true in an error answer: %.300s", what, r->body);
    const char *got = field_str(j, "error", what);
    if (strcmp(got, error) != 0)
        fail_msg("%s: error '%s', want '%s'; body: %.400s", what, got, error, r->body);
    return j;
}

/* The index of a replica's instance name, or -1. */
static int instance_index(const char *name)
{
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (strcmp(g_env.instances[i], name) == 0)
            return (int)i;
    return -1;
}

/* ------------------------------------------------------------------------------------------
 * The service's endpoints, with their answers checked
 * ------------------------------------------------------------------------------------------ */

typedef struct stock_view {
    long long initial, stock, sold, orders, oversold;
} stock_view;

/* GET /api/stock/{id} through nginx: asserts the 200 answer's six fields and the oversold
 * arithmetic, and returns the figures. */
static stock_view stock_get(long long goods_id)
{
    char path[64], what[96];
    stock_view v;

    snprintf(path, sizeof(path), "/api/stock/%lld", goods_id);
    snprintf(what, sizeof(what), "GET %s", path);
    json_t *j = expect_json(get(g_env.stock_url, path), 200, what);
    expect_field_int(j, "goods_id", goods_id, what);
    v.initial = field_int(j, "initial", what);
    v.stock = field_int(j, "stock", what);
    v.sold = field_int(j, "sold", what);
    v.orders = field_int(j, "orders", what);
    v.oversold = field_int(j, "oversold", what);
    if (v.oversold != v.sold - (v.initial - v.stock))
        fail_msg("%s: oversold %lld is not sold - (initial - stock) = %lld - (%lld - %lld)", what,
                 v.oversold, v.sold, v.initial, v.stock);
    return v;
}

/* The figures once they stop changing: the same twice, a second apart (a transaction whose
 * commit answer was lost may still land), at most 15 s. */
static stock_view stock_settled(long long goods_id)
{
    stock_view a = stock_get(goods_id), b;
    double start = now_s();

    for (;;) {
        usleep(1000 * 1000);
        b = stock_get(goods_id);
        if (b.stock == a.stock && b.orders == a.orders && b.sold == a.sold)
            return b;
        if (now_s() - start > 15)
            fail_msg("goods %lld: the books still change after 15 s", goods_id);
        a = b;
    }
}

static void expect_stock(long long goods_id, long long initial, long long stock, long long sold,
                         long long orders, const char *what)
{
    stock_view v = stock_get(goods_id);
    if (v.initial != initial || v.stock != stock || v.sold != sold || v.orders != orders)
        fail_msg("%s: goods %lld has initial %lld stock %lld sold %lld orders %lld, want "
                 "%lld %lld %lld %lld",
                 what, goods_id, v.initial, v.stock, v.sold, v.orders, initial, stock, sold,
                 orders);
}

static void expect_unchanged(long long goods_id, const stock_view *before, const char *what)
{
    expect_stock(goods_id, before->initial, before->stock, before->sold, before->orders, what);
}

/* POST /api/admin/reset through nginx with the token; asserts the 200 answer. */
static void reset_goods(long long goods_id, long long stock)
{
    char body[128], what[96];

    snprintf(body, sizeof(body), "{\"goods_id\":%lld,\"stock\":%lld}", goods_id, stock);
    snprintf(what, sizeof(what), "reset goods %lld to %lld", goods_id, stock);
    http_request rq = {.method = "POST",
                       .base = g_env.stock_url,
                       .path = "/api/admin/reset",
                       .body = body,
                       .headers = {g_env.auth_header}};
    json_t *j = expect_json(call(&rq), 200, what);
    if (!field_bool(j, "ok", what))
        fail_msg("%s: ok is false", what);
    expect_field_int(j, "goods_id", goods_id, what);
    expect_field_int(j, "initial", stock, what);
    expect_field_int(j, "stock", stock, what);
}

/* Writes a deduct body: {"goods_id":..,"count":..} plus "mode" when mode is not NULL. */
static void deduct_body(char *buf, size_t len, long long goods_id, long long count,
                        const char *mode)
{
    if (mode != NULL)
        snprintf(buf, len, "{\"goods_id\":%lld,\"count\":%lld,\"mode\":\"%s\"}", goods_id, count,
                 mode);
    else
        snprintf(buf, len, "{\"goods_id\":%lld,\"count\":%lld}", goods_id, count);
}

/* POST `path` (the deduct endpoint, maybe with a query) on base; `key`, when not NULL, is
 * sent as the Idempotency-Key. */
static http_reply *deduct_at(const char *base, const char *path, long long goods_id,
                             long long count, const char *mode, const char *key)
{
    char body[160], key_header[256];

    deduct_body(body, sizeof(body), goods_id, count, mode);
    if (key != NULL)
        snprintf(key_header, sizeof(key_header), "Idempotency-Key: %s", key);
    http_request rq = {.method = "POST",
                       .base = base,
                       .path = path,
                       .body = body,
                       .headers = {key != NULL ? key_header : NULL}};
    return call(&rq);
}

static http_reply *deduct(const char *base, long long goods_id, long long count, const char *mode,
                          const char *key)
{
    return deduct_at(base, "/api/deduct", goods_id, count, mode, key);
}

/* Asserts a 200 deduct answer with all its fields: remaining is checked unless it is -1, and
 * instance must be one of the replicas'. Returns the object. */
static json_t *expect_deducted(const http_reply *r, long long goods_id, long long count,
                               long long remaining, const char *mode, const char *what)
{
    json_t *j = expect_json(r, 200, what);
    if (!field_bool(j, "ok", what))
        fail_msg("%s: ok is false in a 200 answer", what);
    expect_field_int(j, "goods_id", goods_id, what);
    expect_field_int(j, "count", count, what);
    if (remaining >= 0)
        expect_field_int(j, "remaining", remaining, what);
    else
        (void)field_int(j, "remaining", what);
    if (field_int(j, "order_id", what) <= 0)
        fail_msg("%s: order_id is not positive: %.300s", what, r->body);
    expect_field_str(j, "mode", mode, what);
    const char *instance = field_str(j, "instance", what);
    if (instance_index(instance) < 0)
        fail_msg("%s: instance '%s' is none of the replicas'", what, instance);
    return j;
}

/* ------------------------------------------------------------------------------------------
 * Other programs: redis-cli and the stack script
 * ------------------------------------------------------------------------------------------ */

/*
 * Runs argv[0] (looked up on PATH unless it has a '/') in directory `dir` (NULL: here), with
 * the inherited environment; its standard output goes to the descriptor out_fd, or is ours
 * when out_fd is -1. Waits at most timeout_s, then kills it. Returns its exit status
 * (0..255), or -1 when it could not be run, died of a signal or overran.
 */
static int run_program(const char *dir, int out_fd, double timeout_s, const char *const *argv)
{
    size_t n = 0;
    char **copy = NULL;
    pid_t pid;
    int status = 0, rc = -1;

    /* execvp() wants char *const[]; copy before fork(), so the child allocates nothing. */
    while (argv[n] != NULL)
        n++;
    copy = calloc(n + 1, sizeof(*copy));
    if (copy == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((copy[i] = strdup(argv[i])) == NULL)
            goto out;

    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0)
        goto out;
    if (pid == 0) {
        if (dir != NULL && chdir(dir) != 0)
            _exit(126);
        if (out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0)
            _exit(126);
        execvp(copy[0], copy);
        _exit(127);
    }

    double deadline = now_s() + timeout_s;
    for (;;) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid)
            break;
        if (done < 0)
            goto out;
        if (now_s() > deadline) {
            kill(pid, SIGKILL); /* our own child, by its pid */
            waitpid(pid, &status, 0);
            fprintf(stderr, "%s: still running after %.0f s, killed\n", argv[0], timeout_s);
            goto out;
        }
        usleep(20 * 1000);
    }
    if (WIFEXITED(status))
        rc = WEXITSTATUS(status);
out:
    for (size_t i = 0; i < n; i++)
        free(copy[i]);
    free(copy);
    return rc;
}

/*
 * Runs `redis-cli -h 127.0.0.1 -p $REDIS_PORT <args>` (up to four; the first NULL ends them)
 * and returns its exit status. What it prints goes to out (when not NULL: its first line,
 * without the newline, "" when none) and nowhere else. redis-cli prints a reply and exits 0
 * even when the reply is an error: a caller that cares reads the reply.
 */
static int redis_cli_out(char *out, size_t out_len, const char *a1, const char *a2, const char *a3,
                         const char *a4)
{
    const char *argv[] = {"redis-cli", "-h", "127.0.0.1", "-p", g_env.redis_port,
                          a1,          a2,   a3,          a4,   NULL};
    FILE *capture = tmpfile();
    int rc;

    if (out != NULL && out_len > 0)
        out[0] = '\0';
    if (capture == NULL)
        return -1;
    rc = run_program(NULL, fileno(capture), 10.0, argv);
    if (out != NULL && out_len > 0) {
        rewind(capture);
        if (fgets(out, (int)out_len, capture) == NULL)
            out[0] = '\0';
        out[strcspn(out, "\r\n")] = '\0';
    }
    fclose(capture);
    return rc;
}

/* redis_cli_out() when the reply does not matter. */
static int redis_cli(const char *a1, const char *a2, const char *a3, const char *a4)
{
    return redis_cli_out(NULL, 0, a1, a2, a3, a4);
}

/* Runs `scripts/stack.sh <command>` from the project root (the current directory). */
static int stack_script(const char *command)
{
    const char *argv[] = {"scripts/stack.sh", command, NULL};
    printf("    running scripts/stack.sh %s\n", command);
    return run_program(NULL, -1, 60.0, argv);
}

/*
 * Runs one statement on the stack's database directly, outside the service: the database
 * and user scripts/stack.sh creates, on 127.0.0.1:$PG_PORT. Parameters are bigints, the
 * first n of a and b, passed as parameters (never written into the SQL). Sets *rows (when
 * not NULL) to the number of rows the statement changed. With value not NULL the statement
 * is a query, and *value is the first column of its first row (an integer; 0 when there is
 * no row). Returns 0, or -1 with the reason in err.
 */
static int sql_run(const char *sql, int n, long long a, long long b, long *rows, long long *value,
                   char *err, size_t errlen)
{
    char conninfo[256], text_a[24], text_b[24];
    const char *const values[2] = {text_a, text_b};
    PGconn *conn = NULL;
    PGresult *res = NULL;
    int rc = -1;

    snprintf(conninfo, sizeof(conninfo),
             "host=127.0.0.1 port=%s dbname=stock user=stock connect_timeout=5", g_env.pg_port);
    snprintf(text_a, sizeof(text_a), "%lld", a);
    snprintf(text_b, sizeof(text_b), "%lld", b);
    conn = PQconnectdb(conninfo);
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, errlen, "cannot connect with '%s': %s", conninfo, PQerrorMessage(conn));
        goto out;
    }
    res = PQexecParams(conn, sql, n, NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != (value != NULL ? PGRES_TUPLES_OK : PGRES_COMMAND_OK)) {
        snprintf(err, errlen, "%s: %s", sql, PQerrorMessage(conn));
        goto out;
    }
    if (rows != NULL)
        *rows = strtol(PQcmdTuples(res), NULL, 10);
    if (value != NULL)
        *value = PQntuples(res) > 0 ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
    rc = 0;
out:
    PQclear(res);
    PQfinish(conn);
    return rc;
}

/* sql_run() with two parameters that must change exactly one row; fails the case else. */
static void sql_exec(const char *sql, long long a, long long b)
{
    char err[512];
    long rows = 0;

    if (sql_run(sql, 2, a, b, &rows, NULL, err, sizeof(err)) != 0)
        fail_msg("SQL on the stack's database: %s", err);
    if (rows != 1)
        fail_msg("SQL on the stack's database: '%s' ($1=%lld, $2=%lld) changed %ld rows, want 1",
                 sql, a, b, rows);
}

/* sql_run() for a query with n (0 or 1) parameters and an integer answer; fails the case on
 * error. */
static long long sql_value(const char *sql, int n, long long a)
{
    char err[512];
    long long value = 0;

    if (sql_run(sql, n, a, 0, NULL, &value, err, sizeof(err)) != 0)
        fail_msg("SQL on the stack's database: %s", err);
    return value;
}

/* ------------------------------------------------------------------------------------------
 * Concurrent load: many threads, each with its own handle, sending one request each time
 * ------------------------------------------------------------------------------------------ */

typedef struct load_counts {
    int by_status[600]; /* index: HTTP status; [0]: no answer */
    int commit_unknown; /* 503s that say the sale may have happened */
    int allowed_503;    /* 503s with the plan's allowed_503 error (well-formed, sold nothing) */
    int bad_answer;     /* a 200 or 409 whose body is not the documented one */
    int per_instance[MAX_REPLICAS];
    char note[320]; /* the first surprising answer, for the report */
} load_counts;

typedef struct load_plan {
    const char *label;
    const char *base;
    char path[96];
    char body[160];
    long long goods_id;
    const char *mode; /* expected in every 200 */
    /* A 503 error this mode may answer under load by design, counted in allowed_503 (pg-
     * optimistic's "conflict" when a request runs out of retries); NULL: none. */
    const char *allowed_503;
    int total; /* requests over all threads */
    int threads;
    _Atomic double until; /* now_s() after which no request is started; 0: none (the case
                             may move it while the threads run) */
    long timeout_ms;      /* each request's; 0: g_env.timeout_ms */

    atomic_int next;              /* the next request number to claim */
    pthread_barrier_t start_line; /* every thread has its handle before the first request */
    pthread_mutex_t mu;           /* guards the merged counts below */
    load_counts counts;
    long long *order_ids; /* of the 200 answers, n_ok of them */
    long long *remaining;
    atomic_int n_ok;
    double *latency; /* of every answer, n_timed of them (seconds) */
    atomic_int n_timed;
    double seconds;
} load_plan;

static void note_once(load_counts *c, const char *fmt_what, long status, const char *body)
{
    if (c->note[0] == '\0')
        snprintf(c->note, sizeof(c->note), "%s (status %ld): %.200s", fmt_what, status, body);
}

/* Classifies one answer of a load run into the thread's own counts. */
static void load_record(load_plan *p, load_counts *c, const http_reply *r)
{
    json_error_t jerr;
    json_t *j = NULL;

    if (r->status <= 0 || r->status >= 600) {
        c->by_status[0]++;
        note_once(c, r->error, r->status, "");
        return;
    }
    c->by_status[r->status]++;
    if (r->status == 503 && r->body != NULL && strstr(r->body, "\"commit_unknown\"") != NULL)
        c->commit_unknown++;
    if (r->status == 503 && p->allowed_503 != NULL && r->body != NULL) {
        char want[80];
        snprintf(want, sizeof(want), "\"error\":\"%s\"", p->allowed_503);
        if (strstr(r->body, want) != NULL && strstr(r->body, "\"ok\":false") != NULL) {
            c->allowed_503++;
            return;
        }
    }
    if (r->status != 200 && r->status != 409) {
        note_once(c, "unexpected answer", r->status, r->body);
        return;
    }
    j = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &jerr);
    if (j == NULL || !content_type_is(r->content_type, "application/json")) {
        c->bad_answer++;
        note_once(c, "not a JSON answer", r->status, r->body);
        goto out;
    }
    const json_t *goods = json_object_get(j, "goods_id");
    if (!json_is_integer(goods) || json_integer_value(goods) != p->goods_id) {
        c->bad_answer++;
        note_once(c, "wrong goods_id", r->status, r->body);
        goto out;
    }
    if (r->status == 409) {
        const json_t *error = json_object_get(j, "error");
        if (!json_is_string(error) || strcmp(json_string_value(error), "insufficient_stock") != 0 ||
            !json_is_integer(json_object_get(j, "remaining")) ||
            !json_is_false(json_object_get(j, "ok"))) {
            c->bad_answer++;
            note_once(c, "malformed 409", r->status, r->body);
        }
        goto out;
    }
    const json_t *count = json_object_get(j, "count"), *mode = json_object_get(j, "mode");
    const json_t *order = json_object_get(j, "order_id"), *rest = json_object_get(j, "remaining");
    const json_t *instance = json_object_get(j, "instance");
    int who = json_is_string(instance) ? instance_index(json_string_value(instance)) : -1;
    if (!json_is_true(json_object_get(j, "ok")) || !json_is_integer(count) ||
        json_integer_value(count) != 1 || !json_is_string(mode) ||
        strcmp(json_string_value(mode), p->mode) != 0 || !json_is_integer(order) ||
        !json_is_integer(rest) || who < 0) {
        c->bad_answer++;
        note_once(c, "malformed 200", r->status, r->body);
        goto out;
    }
    c->per_instance[who]++;
    int k = atomic_fetch_add(&p->n_ok, 1);
    if (k < p->total) {
        p->order_ids[k] = (long long)json_integer_value(order);
        p->remaining[k] = (long long)json_integer_value(rest);
    }
out:
    json_decref(j);
}

static void *load_thread(void *arg)
{
    load_plan *p = arg;
    load_counts mine;
    CURL *h = curl_easy_init();

    memset(&mine, 0, sizeof(mine));
    pthread_barrier_wait(&p->start_line);
    for (;;) {
        double until = atomic_load(&p->until);
        if (until > 0 && now_s() > until)
            break;
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->total)
            break;
        http_request rq = {.method = "POST",
                           .base = p->base,
                           .path = p->path,
                           .body = p->body,
                           .timeout_ms = p->timeout_ms};
        http_reply r;
        if (h == NULL) {
            mine.by_status[0]++;
            note_once(&mine, "curl_easy_init failed", 0, "");
            continue;
        }
        http_do(h, &rq, &r);
        load_record(p, &mine, &r);
        p->latency[atomic_fetch_add(&p->n_timed, 1)] = r.seconds;
        free(r.body);
    }
    curl_easy_cleanup(h);

    pthread_mutex_lock(&p->mu);
    for (int s = 0; s < 600; s++)
        p->counts.by_status[s] += mine.by_status[s];
    p->counts.commit_unknown += mine.commit_unknown;
    p->counts.allowed_503 += mine.allowed_503;
    p->counts.bad_answer += mine.bad_answer;
    for (int k = 0; k < MAX_REPLICAS; k++)
        p->counts.per_instance[k] += mine.per_instance[k];
    if (p->counts.note[0] == '\0')
        memcpy(p->counts.note, mine.note, sizeof(mine.note));
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void load_plan_release(void *arg)
{
    load_plan *p = arg;
    pthread_barrier_destroy(&p->start_line);
    pthread_mutex_destroy(&p->mu);
    free(p->order_ids);
    free(p->remaining);
    free(p->latency);
    free(p);
}

/* A plan for `total` deductions of 1 of goods_id in `mode` (in the body), sent to base by
 * `threads` threads. Owned by the case. */
static load_plan *load_plan_new(const char *label, const char *base, long long goods_id,
                                const char *mode, int total, int threads)
{
    load_plan *p = calloc(1, sizeof(*p));
    if (p == NULL)
        fail_msg("out of memory");
    p->order_ids = calloc((size_t)total, sizeof(long long));
    p->remaining = calloc((size_t)total, sizeof(long long));
    p->latency = calloc((size_t)total, sizeof(double));
    if (p->order_ids == NULL || p->remaining == NULL || p->latency == NULL ||
        pthread_barrier_init(&p->start_line, NULL, (unsigned)threads) != 0) {
        free(p->order_ids);
        free(p->remaining);
        free(p->latency);
        free(p);
        fail_msg("out of memory");
        return NULL; /* not reached: fail_msg() leaves the case */
    }
    pthread_mutex_init(&p->mu, NULL);
    own(p, load_plan_release);
    p->label = label;
    p->base = base;
    snprintf(p->path, sizeof(p->path), "/api/deduct");
    deduct_body(p->body, sizeof(p->body), goods_id, 1, mode);
    p->goods_id = goods_id;
    p->mode = mode;
    p->total = total;
    p->threads = threads;
    atomic_init(&p->next, 0);
    atomic_init(&p->n_ok, 0);
    atomic_init(&p->n_timed, 0);
    atomic_init(&p->until, 0);
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs the plan's threads to the end and prints what they saw. */
static void load_run(load_plan *p)
{
    pthread_t tid[LOAD_THREADS];
    int started = 0;

    if (p->threads > LOAD_THREADS)
        fail_msg("%s: at most %d threads", p->label, LOAD_THREADS);
    double start = now_s();
    for (; started < p->threads; started++)
        if (pthread_create(&tid[started], NULL, load_thread, p) != 0)
            break;
    if (started < p->threads) {
        /* The barrier waits for all: the missing ones can't come, so start them here. */
        fprintf(stderr, "%s: could only start %d threads\n", p->label, started);
        abort();
    }
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    p->seconds = now_s() - start;

    const load_counts *c = &p->counts;
    int n = atomic_load(&p->n_timed);
    int other = n - c->by_status[200] - c->by_status[409] - c->by_status[503];
    printf("    %s: %d requests from %d threads in %.2f s (%.0f req/s): 200=%d 409=%d 503=%d "
           "other=%d (no answer=%d) malformed bodies=%d\n",
           p->label, n, p->threads, p->seconds, n / p->seconds, c->by_status[200],
           c->by_status[409], c->by_status[503], other, c->by_status[0], c->bad_answer);
    qsort(p->latency, (size_t)n, sizeof(double), cmp_double);
    if (n > 0)
        printf("    %s: latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", p->label,
               1000 * p->latency[n / 2], 1000 * p->latency[(n * 99) / 100],
               1000 * p->latency[n - 1]);
    printf("    %s: 200s by instance:", p->label);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        printf(" %s=%d", g_env.instances[i], c->per_instance[i]);
    printf("\n");
    if (c->note[0] != '\0')
        printf("    %s: first surprise: %s\n", p->label, c->note);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* How many values of v[0..n) are repeats of another (v is sorted in place). */
static int count_repeats(long long *v, int n)
{
    int repeats = 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_ll);
    for (int i = 1; i < n; i++)
        if (v[i] == v[i - 1])
            repeats++;
    return repeats;
}

/* Every answer of the plan was a 200 or a well-formed 409. */
static void expect_only_200_409(const load_plan *p)
{
    const load_counts *c = &p->counts;
    int other = p->total - c->by_status[200] - c->by_status[409];
    if (other != 0)
        fail_msg("%s: %d answers were neither 200 nor 409 (503=%d, no answer=%d); first: %s",
                 p->label, other, c->by_status[503], c->by_status[0], c->note);
    if (c->bad_answer != 0)
        fail_msg("%s: %d answers had a body off the contract; first: %s", p->label, c->bad_answer,
                 c->note);
}

/* The exact figures of a correct mode: `stock` units sold once each, the rest refused. */
static void expect_exact_sale(load_plan *p, long long stock)
{
    const load_counts *c = &p->counts;
    int n_ok = atomic_load(&p->n_ok);

    expect_only_200_409(p);
    if (c->by_status[200] != stock || c->by_status[409] != p->total - stock)
        fail_msg("%s: 200=%d 409=%d, want exactly %lld and %lld", p->label, c->by_status[200],
                 c->by_status[409], stock, p->total - stock);
    if (count_repeats(p->order_ids, n_ok) != 0)
        fail_msg("%s: two 200 answers carry the same order_id", p->label);
    /* Under a correct lock each sale sees the one before it: remaining runs through every
     * value from stock-1 down to 0 exactly once. */
    qsort(p->remaining, (size_t)n_ok, sizeof(long long), cmp_ll);
    for (int i = 0; i < n_ok; i++)
        if (p->remaining[i] != i)
            fail_msg("%s: the 200s' remaining values are not each of 0..%lld once (sorted, "
                     "position %d holds %lld)",
                     p->label, stock - 1, i, p->remaining[i]);
    stock_view v = stock_get(p->goods_id);
    printf("    %s: stock %lld sold %lld orders %lld oversold %lld\n", p->label, v.stock, v.sold,
           v.orders, v.oversold);
    if (v.initial != stock || v.stock != 0 || v.sold != stock || v.orders != stock ||
        v.oversold != 0)
        fail_msg("%s: initial %lld stock %lld sold %lld orders %lld oversold %lld, want %lld 0 "
                 "%lld %lld 0",
                 p->label, v.initial, v.stock, v.sold, v.orders, v.oversold, stock, stock, stock);
}

/* ------------------------------------------------------------------------------------------
 * Case bookkeeping
 * ------------------------------------------------------------------------------------------ */

/* First line of every case: names it for the timing line, and fails it when the environment
 * is unusable. */
static void begin_case(const char *name)
{
    g_case_name = name;
    if (g_env.problem[0] != '\0')
        fail_msg("the stack is not usable: %s", g_env.problem);
}

static int case_setup(void **state)
{
    (void)state;
    g_case_name = "";
    g_case_start = now_s();
    return 0;
}

static int case_teardown(void **state)
{
    (void)state;
    release_owned();
    printf("[ TIMING   ] %s: %.2f s\n", g_case_name, now_s() - g_case_start);
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * Cases: the contract
 * ------------------------------------------------------------------------------------------ */

/* POST /api/deduct: 200 with every field, 409, 404, 400 with a detail naming the field. */
static void test_deduct_outcomes(void **state)
{
    (void)state;
    begin_case("deduct_outcomes");
    reset_goods(GOODS_DEDUCT, 5);

    json_t *j = expect_deducted(deduct(g_env.stock_url, GOODS_DEDUCT, 2, "redis", NULL),
                                GOODS_DEDUCT, 2, 3, "redis", "deduct 2 of 5");
    long long first_order = field_int(j, "order_id", "deduct 2 of 5");
    expect_stock(GOODS_DEDUCT, 5, 3, 2, 1, "after deducting 2 of 5");

    j = expect_error(deduct(g_env.stock_url, GOODS_DEDUCT, 4, "redis", NULL), 409,
                     "insufficient_stock", "deduct 4 of 3");
    expect_field_int(j, "goods_id", GOODS_DEDUCT, "deduct 4 of 3");
    expect_field_int(j, "remaining", 3, "deduct 4 of 3");
    expect_stock(GOODS_DEDUCT, 5, 3, 2, 1, "after a 409");

    j = expect_deducted(deduct(g_env.stock_url, GOODS_DEDUCT, 3, "redis", NULL), GOODS_DEDUCT, 3, 0,
                        "redis", "deduct the last 3");
    if (field_int(j, "order_id", "deduct the last 3") == first_order)
        fail_msg("two sales got the same order_id %lld", first_order);
    j = expect_error(deduct(g_env.stock_url, GOODS_DEDUCT, 1, "redis", NULL), 409,
                     "insufficient_stock", "deduct 1 of 0");
    expect_field_int(j, "remaining", 0, "deduct 1 of 0");
    expect_stock(GOODS_DEDUCT, 5, 0, 5, 2, "sold out");

    /* Unknown goods, in each mode (each reads the goods its own way), and at the top of the
     * id range. */
    const char *modes[] = {"none", "local", "redis", "pg-for-update", "pg-atomic", "pg-advisory"};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        char what[96];
        snprintf(what, sizeof(what), "deduct unknown goods in mode %s", modes[i]);
        j = expect_error(deduct(g_env.stock_url, GOODS_UNKNOWN, 1, modes[i], NULL), 404,
                         "unknown_goods", what);
        expect_field_int(j, "goods_id", GOODS_UNKNOWN, what);
    }
    j = expect_error(deduct(g_env.stock_url, GOODS_MAX, 1, "redis", NULL), 404, "unknown_goods",
                     "deduct goods 2^63-1");
    expect_field_int(j, "goods_id", GOODS_MAX, "deduct goods 2^63-1");

    /* 400: the detail names what is wrong. */
    reset_goods(GOODS_DEDUCT, 5);
    j = expect_error(deduct(g_env.stock_url, GOODS_DEDUCT, 0, NULL, NULL), 400, "bad_request",
                     "count 0");
    if (strstr(field_str(j, "detail", "count 0"), "count") == NULL)
        fail_msg("count 0: the detail does not name count: %s", field_str(j, "detail", ""));
    j = expect_error(deduct(g_env.stock_url, 0, 1, NULL, NULL), 400, "bad_request", "goods_id 0");
    if (strstr(field_str(j, "detail", "goods_id 0"), "goods_id") == NULL)
        fail_msg("goods_id 0: the detail does not name goods_id: %s", field_str(j, "detail", ""));
    expect_stock(GOODS_DEDUCT, 5, 5, 0, 0, "after two 400s");
}

/* The mode: from the body, from the query, the body's winning, the default, and unknown. */
static void test_deduct_modes(void **state)
{
    (void)state;
    begin_case("deduct_modes");
    reset_goods(GOODS_MODES, 100);

    const char *modes[] = {"none", "local", "redis"};
    for (size_t i = 0; i < 3; i++) {
        char path[64], what[96];
        snprintf(what, sizeof(what), "body mode %s", modes[i]);
        expect_deducted(deduct(g_env.stock_url, GOODS_MODES, 1, modes[i], NULL), GOODS_MODES, 1, -1,
                        modes[i], what);
        snprintf(path, sizeof(path), "/api/deduct?mode=%s", modes[i]);
        snprintf(what, sizeof(what), "query mode %s, none in the body", modes[i]);
        expect_deducted(deduct_at(g_env.stock_url, path, GOODS_MODES, 1, NULL, NULL), GOODS_MODES,
                        1, -1, modes[i], what);
    }
    expect_deducted(
        deduct_at(g_env.stock_url, "/api/deduct?mode=none", GOODS_MODES, 1, "redis", NULL),
        GOODS_MODES, 1, -1, "redis", "body redis wins over query none");
    expect_deducted(
        deduct_at(g_env.stock_url, "/api/deduct?mode=redis", GOODS_MODES, 1, "local", NULL),
        GOODS_MODES, 1, -1, "local", "body local wins over query redis");
    long long sold = 8;

    /* Neither: each replica uses its default, the one its /api/modes names. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char what[160];
        snprintf(what, sizeof(what), "GET /api/modes on %s", g_env.replicas[i]);
        json_t *m = expect_json(get(g_env.replicas[i], "/api/modes"), 200, what);
        const char *def = field_str(m, "default", what);
        snprintf(what, sizeof(what), "no mode at all, on %s (default %s)", g_env.replicas[i], def);
        json_t *j = expect_deducted(deduct(g_env.replicas[i], GOODS_MODES, 1, NULL, NULL),
                                    GOODS_MODES, 1, -1, def, what);
        expect_field_str(j, "instance", g_env.instances[i], what);
        sold++;
    }

    /* Unknown modes, in the body and in the query: 400 unknown_mode with a detail. */
    json_t *j = expect_error(deduct(g_env.stock_url, GOODS_MODES, 1, "bogus", NULL), 400,
                             "unknown_mode", "body mode bogus");
    (void)field_str(j, "detail", "body mode bogus");
    j = expect_error(
        deduct_at(g_env.stock_url, "/api/deduct?mode=bogus", GOODS_MODES, 1, NULL, NULL), 400,
        "unknown_mode", "query mode bogus");
    (void)field_str(j, "detail", "query mode bogus");
    expect_stock(GOODS_MODES, 100, 100 - sold, sold, sold, "after the mode checks");
}

/* A deduct body of exactly `len` bytes: the JSON object padded with spaces (owned by the
 * case). */
static char *padded_body(long long goods_id, size_t len)
{
    char *body = own(malloc(len + 1), free);
    if (body == NULL)
        fail_msg("out of memory");
    int n = snprintf(body, len + 1, "{\"goods_id\":%lld,\"count\":1,\"mode\":\"redis\"}", goods_id);
    memset(body + n, ' ', len - (size_t)n);
    body[len] = '\0';
    return body;
}

/* 413 above 16384 bytes, through nginx and directly, with a length and chunked; 16384
 * itself is accepted. */
static void test_body_limits(void **state)
{
    (void)state;
    begin_case("body_limits");
    reset_goods(GOODS_LIMITS, 100);

    const char *bases[2] = {g_env.stock_url, g_env.replicas[0]};
    const char *names[2] = {"nginx", "a replica"};

    char *at_limit = padded_body(GOODS_LIMITS, BODY_LIMIT);
    char *over = padded_body(GOODS_LIMITS, BODY_LIMIT + 1);
    char *far_over = padded_body(GOODS_LIMITS, 4 * BODY_LIMIT);
    long long sold = 0;
    for (int i = 0; i < 2; i++) {
        char what[128];
        http_request rq = {.method = "POST", .base = bases[i], .path = "/api/deduct"};

        snprintf(what, sizeof(what), "%d-byte body via %s", BODY_LIMIT, names[i]);
        rq.body = at_limit;
        expect_deducted(call(&rq), GOODS_LIMITS, 1, -1, "redis", what);
        sold++;

        snprintf(what, sizeof(what), "%d-byte body via %s", BODY_LIMIT + 1, names[i]);
        rq.body = over;
        expect_error(call(&rq), 413, "payload_too_large", what);

        snprintf(what, sizeof(what), "%d-byte body via %s", 4 * BODY_LIMIT, names[i]);
        rq.body = far_over;
        expect_error(call(&rq), 413, "payload_too_large", what);

        snprintf(what, sizeof(what), "%d-byte chunked body (no length) via %s", 4 * BODY_LIMIT,
                 names[i]);
        rq.chunked = true;
        expect_error(call(&rq), 413, "payload_too_large", what);
    }
    expect_stock(GOODS_LIMITS, 100, 100 - sold, sold, sold, "after the size checks");
}

/* 415 for a Content-Type other than JSON; none at all is accepted, so is a charset. */
static void test_content_types(void **state)
{
    (void)state;
    begin_case("content_types");
    reset_goods(GOODS_MEDIA, 100);

    char body[128];
    deduct_body(body, sizeof(body), GOODS_MEDIA, 1, "redis");
    http_request rq = {
        .method = "POST", .base = g_env.stock_url, .path = "/api/deduct", .body = body};

    const char *refused[] = {"text/plain", "application/x-www-form-urlencoded", "application/jsonp",
                             "text/json"};
    for (size_t i = 0; i < 4; i++) {
        char what[96];
        snprintf(what, sizeof(what), "Content-Type %s", refused[i]);
        rq.content_type = refused[i];
        expect_error(call(&rq), 415, "unsupported_media_type", what);
    }
    expect_stock(GOODS_MEDIA, 100, 100, 0, 0, "after the 415s");

    rq.content_type = NO_CONTENT_TYPE;
    expect_deducted(call(&rq), GOODS_MEDIA, 1, 99, "redis", "no Content-Type");
    rq.content_type = "application/json; charset=utf-8";
    expect_deducted(call(&rq), GOODS_MEDIA, 1, 98, "redis", "application/json; charset=utf-8");
    rq.content_type = "Application/JSON";
    expect_deducted(call(&rq), GOODS_MEDIA, 1, 97, "redis", "Application/JSON");
    expect_stock(GOODS_MEDIA, 100, 97, 3, 3, "after the accepted types");
}

static char g_lock_key[64]; /* a lock this process holds as "another owner"; "" when none */

static int lock_case_teardown(void **state)
{
    if (g_lock_key[0] != '\0') {
        if (redis_cli("DEL", g_lock_key, NULL, NULL) != 0)
            fprintf(stderr, "could not delete %s: delete it by hand\n", g_lock_key);
        g_lock_key[0] = '\0';
    }
    return case_teardown(state);
}

/* 503 lock_timeout: with lock:goods:N held by another owner, a redis-mode deduct waits the
 * bound, gives up and sells nothing; a 5xx is not stored, so its key's retry sells. */
static void test_lock_timeout(void **state)
{
    (void)state;
    begin_case("lock_timeout");
    reset_goods(GOODS_LOCK, 10);

    char ttl[32], key[96];
    snprintf(g_lock_key, sizeof(g_lock_key), "lock:goods:%lld", GOODS_LOCK);
    snprintf(ttl, sizeof(ttl), "%ld", g_env.lock_wait_ms + 10000);
    if (redis_cli("HSET", g_lock_key, "test-stack:another-owner", "1") != 0 ||
        redis_cli("PEXPIRE", g_lock_key, ttl, NULL) != 0)
        fail_msg("redis-cli could not take %s on port %s", g_lock_key, g_env.redis_port);

    snprintf(key, sizeof(key), "lock-timeout-%s", g_env.run_tag);
    http_reply *r = deduct(g_env.stock_url, GOODS_LOCK, 1, "redis", key);
    printf("    redis-mode deduct with the lock held elsewhere: %ld after %.2f s (bound %ld ms)\n",
           r->status, r->seconds, g_env.lock_wait_ms);
    expect_error(r, 503, "lock_timeout", "deduct while another owner holds the lock");
    /* It waited the bound (not less: it did not give up early), and returned within it plus
     * one Redis command timeout and some scheduling slack. */
    if (r->seconds < 0.9 * (double)g_env.lock_wait_ms / 1000.0 ||
        r->seconds > (double)g_env.lock_wait_ms / 1000.0 + 2.0)
        fail_msg("lock_timeout came after %.2f s, want about %ld ms", r->seconds,
                 g_env.lock_wait_ms);
    expect_stock(GOODS_LOCK, 10, 10, 0, 0, "after the lock timeout");

    /* none and local do not take the Redis lock: they are not held up by it. */
    expect_deducted(deduct(g_env.stock_url, GOODS_LOCK, 1, "none", NULL), GOODS_LOCK, 1, 9, "none",
                    "none-mode deduct while the Redis lock is held");

    if (redis_cli("DEL", g_lock_key, NULL, NULL) != 0)
        fail_msg("redis-cli could not delete %s", g_lock_key);
    g_lock_key[0] = '\0';
    expect_deducted(deduct(g_env.stock_url, GOODS_LOCK, 1, "redis", key), GOODS_LOCK, 1, 8, "redis",
                    "the 503's key retried once the lock is free");
    expect_stock(GOODS_LOCK, 10, 8, 2, 2, "after the retry");
}

/* GET /api/stock/{id}: six fields, the oversold arithmetic, 404, and 400 for bad ids. */
static void test_stock_endpoint(void **state)
{
    (void)state;
    begin_case("stock_endpoint");
    reset_goods(GOODS_STOCK, 7);
    expect_stock(GOODS_STOCK, 7, 7, 0, 0, "fresh goods");
    expect_deducted(deduct(g_env.stock_url, GOODS_STOCK, 2, "redis", NULL), GOODS_STOCK, 2, 5,
                    "redis", "deduct 2");
    expect_deducted(deduct(g_env.stock_url, GOODS_STOCK, 1, "local", NULL), GOODS_STOCK, 1, 4,
                    "local", "deduct 1");
    stock_view v = stock_get(GOODS_STOCK);
    if (v.initial != 7 || v.stock != 4 || v.sold != 3 || v.orders != 2 || v.oversold != 0)
        fail_msg("stock after 2+1 of 7: initial %lld stock %lld sold %lld orders %lld oversold "
                 "%lld, want 7 4 3 2 0",
                 v.initial, v.stock, v.sold, v.orders, v.oversold);

    /* Every replica reads the same row. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char path[64], what[160];
        snprintf(path, sizeof(path), "/api/stock/%lld", GOODS_STOCK);
        snprintf(what, sizeof(what), "GET %s on %s", path, g_env.replicas[i]);
        json_t *j = expect_json(get(g_env.replicas[i], path), 200, what);
        expect_field_int(j, "stock", 4, what);
        expect_field_int(j, "sold", 3, what);
    }

    char path[64];
    snprintf(path, sizeof(path), "/api/stock/%lld", GOODS_UNKNOWN);
    json_t *j = expect_error(get(g_env.stock_url, path), 404, "unknown_goods", path);
    expect_field_int(j, "goods_id", GOODS_UNKNOWN, path);

    const char *bad[] = {
        "/api/stock/abc", "/api/stock/0",   "/api/stock/-1",   "/api/stock/1.0",
        "/api/stock/+1",  "/api/stock/1e3", "/api/stock/0x10", "/api/stock/9223372036854775808",
        "/api/stock/%201"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char what[96];
        snprintf(what, sizeof(what), "GET %s", bad[i]);
        expect_error(get(g_env.stock_url, bad[i]), 400, "bad_request", what);
    }
}

/* POST /api/admin/reset: the answer, what it resets, and 400 for bad bodies. */
static void test_admin_reset(void **state)
{
    (void)state;
    begin_case("admin_reset");
    reset_goods(GOODS_RESET, 10);
    expect_deducted(deduct(g_env.stock_url, GOODS_RESET, 3, "redis", NULL), GOODS_RESET, 3, 7,
                    "redis", "deduct before a reset");
    reset_goods(GOODS_RESET, 20); /* deletes the orders: sold and orders start again */
    expect_stock(GOODS_RESET, 20, 20, 0, 0, "after a reset of goods with orders");
    reset_goods(GOODS_RESET, 0);
    expect_stock(GOODS_RESET, 0, 0, 0, 0, "reset to 0");
    reset_goods(GOODS_RESET, 1000000000);
    expect_stock(GOODS_RESET, 1000000000, 1000000000, 0, 0, "reset to the maximum");
    reset_goods(GOODS_RESET, 50);

    const char *bad[] = {
        "{\"goods_id\":3501,\"stock\":-1}",
        "{\"goods_id\":3501,\"stock\":1000000001}",
        "{\"goods_id\":3501,\"stock\":\"5\"}",
        "{\"goods_id\":3501,\"stock\":5.0}",
        "{\"goods_id\":3501,\"stock\":null}",
        "{\"goods_id\":3501}",
        "{\"stock\":5}",
        "{\"goods_id\":0,\"stock\":5}",
        "{\"goods_id\":-3501,\"stock\":5}",
        "{\"goods_id\":\"3501\",\"stock\":5}",
        "{\"goods_id\":3501,\"stock\":5,\"extra\":1}",
        "{\"goods_id\":3501,\"stock\":5,\"stock\":6}",
        "[3501,5]",
        "not json",
        "",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char what[128];
        snprintf(what, sizeof(what), "reset with body '%s'", bad[i]);
        http_request rq = {.method = "POST",
                           .base = g_env.stock_url,
                           .path = "/api/admin/reset",
                           .body = bad[i],
                           .headers = {g_env.auth_header}};
        expect_error(call(&rq), 400, "bad_request", what);
        expect_stock(GOODS_RESET, 50, 50, 0, 0, what);
    }
}

/* GET /api/modes: the default and at least none/local/redis, with their safe flags. */
static void test_modes_endpoint(void **state)
{
    (void)state;
    begin_case("modes_endpoint");
    const char *want[] = {"none", "local", "redis", "pg-for-update", "pg-atomic", "pg-advisory"};
    const bool want_safe[] = {false, false, true, true, true, true};
    enum { N_WANT = sizeof(want) / sizeof(want[0]) };

    json_t *j = expect_json(get(g_env.stock_url, "/api/modes"), 200, "GET /api/modes");
    const char *def = field_str(j, "default", "GET /api/modes");
    const json_t *modes = json_object_get(j, "modes");
    if (!json_is_array(modes) || json_array_size(modes) < N_WANT)
        fail_msg("GET /api/modes: 'modes' is not an array of at least %d", (int)N_WANT);
    bool found[N_WANT] = {false}, default_listed = false;
    for (size_t i = 0; i < json_array_size(modes); i++) {
        const json_t *m = json_array_get(modes, i);
        char what[64];
        snprintf(what, sizeof(what), "GET /api/modes, modes[%zu]", i);
        if (!json_is_object(m))
            fail_msg("%s is not an object", what);
        const char *name = field_str(m, "name", what);
        bool safe = field_bool(m, "safe", what);
        if (field_str(m, "summary", what)[0] == '\0')
            fail_msg("%s (%s): empty summary", what, name);
        for (size_t k = 0; k < i; k++)
            if (strcmp(json_string_value(json_object_get(json_array_get(modes, k), "name")),
                       name) == 0)
                fail_msg("GET /api/modes: mode %s listed twice", name);
        if (strcmp(name, def) == 0)
            default_listed = true;
        for (size_t k = 0; k < N_WANT; k++) {
            if (strcmp(name, want[k]) != 0)
                continue;
            found[k] = true;
            if (safe != want_safe[k])
                fail_msg("GET /api/modes: %s has safe=%s, want %s", name, safe ? "true" : "false",
                         want_safe[k] ? "true" : "false");
        }
    }
    for (size_t k = 0; k < N_WANT; k++)
        if (!found[k])
            fail_msg("GET /api/modes: mode %s is not listed", want[k]);
    if (!default_listed)
        fail_msg("GET /api/modes: the default '%s' is not a listed mode", def);
    printf("    /api/modes: default %s, %zu modes\n", def, json_array_size(modes));
}

/* /healthz, /readyz (JSON, 200) and /metrics (text, the six families), on every replica. */
static void test_health_and_metrics(void **state)
{
    (void)state;
    begin_case("health_and_metrics");
    const char *families[] = {
        "stock_http_requests_total{",
        "stock_deductions_total{",
        "# TYPE stock_lock_wait_seconds histogram",
        "stock_lock_wait_seconds_bucket{",
        "stock_lock_wait_seconds_sum",
        "stock_lock_wait_seconds_count",
        "stock_lock_timeouts_total",
        "stock_lock_renewals_total",
        "stock_lock_lost_total",
    };
    /* Some traffic first, so the labelled families have series. */
    reset_goods(GOODS_METRICS, 7);
    expect_deducted(deduct(g_env.stock_url, GOODS_METRICS, 1, "redis", NULL), GOODS_METRICS, 1, 6,
                    "redis", "deduct before /metrics");

    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "GET /healthz on %s", base);
        expect_json(get(base, "/healthz"), 200, what);
        snprintf(what, sizeof(what), "GET /readyz on %s", base);
        expect_json(get(base, "/readyz"), 200, what);
        if (i == 0)
            continue; /* metrics are per replica: nginx would show a random one */

        snprintf(what, sizeof(what), "GET /metrics on %s", base);
        http_reply *r = get(base, "/metrics");
        if (r->status != 200)
            fail_msg("%s: status %ld", what, r->status);
        if (!content_type_is(r->content_type, "text/plain"))
            fail_msg("%s: Content-Type '%s', want text/plain", what, r->content_type);
        for (size_t k = 0; k < sizeof(families) / sizeof(families[0]); k++)
            if (strstr(r->body, families[k]) == NULL)
                fail_msg("%s: no '%s' in the exposition", what, families[k]);
        const char *line = strstr(r->body, "\nstock_http_requests_total{");
        if (line == NULL || strstr(line, "route=\"") == NULL || strstr(line, "status=\"") == NULL)
            fail_msg("%s: stock_http_requests_total lacks its route/status labels", what);
        line = strstr(r->body, "\nstock_deductions_total{");
        if (line == NULL || strstr(line, "mode=\"") == NULL || strstr(line, "outcome=\"") == NULL)
            fail_msg("%s: stock_deductions_total lacks its mode/outcome labels", what);
        if (strstr(r->body, "stock_lock_wait_seconds_bucket{le=\"+Inf\"}") == NULL)
            fail_msg("%s: the lock wait histogram has no +Inf bucket", what);
    }
}

/* 405 for a wrong method on a known path, 404 for an unknown path: JSON, through nginx and
 * directly. */
static void test_methods_and_paths(void **state)
{
    (void)state;
    begin_case("methods_and_paths");
    static const struct {
        const char *method, *path;
    } wrong[] = {
        {"GET", "/api/deduct"},      {"PUT", "/api/deduct"},      {"DELETE", "/api/deduct"},
        {"DELETE", "/api/stock/1"},  {"POST", "/api/stock/1"},    {"PUT", "/api/stock/1"},
        {"GET", "/api/admin/reset"}, {"PUT", "/api/admin/reset"}, {"POST", "/api/modes"},
        {"POST", "/healthz"},        {"POST", "/readyz"},         {"POST", "/metrics"},
        {"DELETE", "/healthz"},
    };
    static const struct {
        const char *method, *path;
    } unknown[] = {
        {"GET", "/"},          {"GET", "/nope"},         {"GET", "/api"},
        {"GET", "/api/stock"}, {"POST", "/api/nothing"}, {"GET", "/api/deduct/1"},
        {"GET", "/healthz/x"}, {"POST", "/api/admin"},   {"GET", "/API/MODES"},
    };

    for (size_t b = 0; b < 2; b++) {
        const char *base = b == 0 ? g_env.stock_url : g_env.replicas[0];
        for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
            char what[160];
            snprintf(what, sizeof(what), "%s %s on %s", wrong[i].method, wrong[i].path, base);
            /* POSTs and PUTs carry an (empty) body with a length: nginx refuses a POST that
             * has neither a length nor chunks with 411, which is not what is tested here. */
            bool with_body =
                strcmp(wrong[i].method, "POST") == 0 || strcmp(wrong[i].method, "PUT") == 0;
            http_request rq = {.method = wrong[i].method,
                               .base = base,
                               .path = wrong[i].path,
                               .body = with_body ? "" : NULL};
            expect_error(call(&rq), 405, "method_not_allowed", what);
        }
        for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
            char what[160];
            snprintf(what, sizeof(what), "%s %s on %s", unknown[i].method, unknown[i].path, base);
            bool with_body = strcmp(unknown[i].method, "POST") == 0;
            http_request rq = {.method = unknown[i].method,
                               .base = base,
                               .path = unknown[i].path,
                               .body = with_body ? "{}" : NULL};
            expect_error(call(&rq), 404, "not_found", what);
        }
    }
}

/* ------------------------------------------------------------------------------------------
 * Cases: the request target as sent, the headers of the errors, keep-alive, nginx's own
 * ------------------------------------------------------------------------------------------ */

/* %00 stays what it was sent as: "redis%00x" is no mode and "4201%00" no goods id. Decoded
 * to a NUL, a C string would cut them down to "redis" and goods 4201, and sell or answer. */
static void test_encoded_nul(void **state)
{
    (void)state;
    begin_case("encoded_nul");
    reset_goods(GOODS_ENCODED, 10);

    const char *bases[2] = {g_env.stock_url, g_env.replicas[0]};
    const char *names[2] = {"nginx", "a replica"};
    const char *queries[] = {"/api/deduct?mode=redis%00x", "/api/deduct?mode=redis%00"};
    for (size_t b = 0; b < 2; b++) {
        for (size_t q = 0; q < sizeof(queries) / sizeof(queries[0]); q++) {
            char what[160];
            snprintf(what, sizeof(what), "POST %s (no mode in the body) via %s", queries[q],
                     names[b]);
            json_t *j = expect_error(deduct_at(bases[b], queries[q], GOODS_ENCODED, 1, NULL, NULL),
                                     400, "unknown_mode", what);
            (void)field_str(j, "detail", what);
            expect_stock(GOODS_ENCODED, 10, 10, 0, 0, what);
        }
    }
    /* The other escapes are still decoded: re%64is is redis. */
    expect_deducted(
        deduct_at(g_env.replicas[0], "/api/deduct?mode=re%64is", GOODS_ENCODED, 1, NULL, NULL),
        GOODS_ENCODED, 1, 9, "redis", "POST /api/deduct?mode=re%64is on a replica");

    const char *suffixes[] = {"%00", "%00junk"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        char path[64], what[160];
        snprintf(path, sizeof(path), "/api/stock/%lld%s", GOODS_ENCODED, suffixes[i]);
        snprintf(what, sizeof(what), "GET %s on a replica", path);
        expect_error(get(g_env.replicas[0], path), 400, "bad_request", what);

        /* nginx refuses a NUL in a path itself, before any replica: its own JSON 4xx. */
        snprintf(what, sizeof(what), "GET %s via nginx", path);
        http_reply *r = get(g_env.stock_url, path);
        if (r->status < 400 || r->status > 499)
            fail_msg("%s: status %ld, want a 4xx; body: %.300s", what, r->status, r->body);
        json_t *j = expect_json(r, r->status, what);
        if (field_bool(j, "ok", what))
            fail_msg("%s: ok is true in an error answer: %.300s", what, r->body);
        if (field_str(j, "error", what)[0] == '\0')
            fail_msg("%s: empty error: %.300s", what, r->body);
    }
    expect_stock(GOODS_ENCODED, 10, 9, 1, 1, "after the %00 requests");
}

/* The query key is "mode", spelled so: MODE and Mode are other keys, ignored as any other
 * unknown key is (the replica's default mode applies); "?mode" alone names an empty mode,
 * which no mode is. */
static void test_query_key(void **state)
{
    (void)state;
    begin_case("query_key");
    reset_goods(GOODS_QUERY_KEY, 20);

    const char *defaults[MAX_REPLICAS];
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char what[160];
        snprintf(what, sizeof(what), "GET /api/modes on %s", g_env.replicas[i]);
        defaults[i] = field_str(expect_json(get(g_env.replicas[i], "/api/modes"), 200, what),
                                "default", what);
    }

    const char *other_keys[] = {"/api/deduct?MODE=bogus", "/api/deduct?Mode=bogus"};
    long long sold = 0;
    for (size_t k = 0; k < sizeof(other_keys) / sizeof(other_keys[0]); k++) {
        for (size_t i = 0; i < g_env.n_replicas; i++) {
            char what[200];
            snprintf(what, sizeof(what), "POST %s on %s (default %s)", other_keys[k],
                     g_env.replicas[i], defaults[i]);
            json_t *j = expect_deducted(
                deduct_at(g_env.replicas[i], other_keys[k], GOODS_QUERY_KEY, 1, NULL, NULL),
                GOODS_QUERY_KEY, 1, -1, defaults[i], what);
            expect_field_str(j, "instance", g_env.instances[i], what);
            sold++;
        }
        /* Through nginx: the default of whichever replica answered. */
        char what[160];
        snprintf(what, sizeof(what), "POST %s via nginx", other_keys[k]);
        http_reply *r = deduct_at(g_env.stock_url, other_keys[k], GOODS_QUERY_KEY, 1, NULL, NULL);
        int who = instance_index(field_str(expect_json(r, 200, what), "instance", what));
        if (who < 0)
            fail_msg("%s: the instance is none of the replicas': %.300s", what, r->body);
        expect_deducted(r, GOODS_QUERY_KEY, 1, -1, defaults[who], what);
        sold++;
    }
    expect_stock(GOODS_QUERY_KEY, 20, 20 - sold, sold, sold, "after MODE and Mode");

    const char *empty[] = {"/api/deduct?mode", "/api/deduct?mode="};
    for (size_t k = 0; k < sizeof(empty) / sizeof(empty[0]); k++) {
        for (size_t b = 0; b < 2; b++) {
            const char *base = b == 0 ? g_env.replicas[0] : g_env.stock_url;
            char what[160];
            snprintf(what, sizeof(what), "POST %s on %s", empty[k], base);
            expect_error(deduct_at(base, empty[k], GOODS_QUERY_KEY, 1, NULL, NULL), 400,
                         "unknown_mode", what);
            expect_stock(GOODS_QUERY_KEY, 20, 20 - sold, sold, sold, what);
        }
    }
}

/* Asserts that r carries the header `name` with the value `want` (compared exactly). */
static void expect_header(const http_reply *r, const char *name, const char *want, const char *what)
{
    char got[256];

    if (!reply_header(r, name, got, sizeof(got)))
        fail_msg("%s: no %s header; headers:\n%s", what, name, r->headers);
    if (strcmp(got, want) != 0)
        fail_msg("%s: %s is '%s', want '%s'", what, name, got, want);
}

/* A 405 says which methods the path takes (Allow), a 401 which scheme it wants
 * (WWW-Authenticate: Bearer): directly and through nginx, which passes them on; with and
 * without a body (the replica answers those two at different moments). */
static void test_error_headers(void **state)
{
    (void)state;
    begin_case("error_headers");
    static const struct {
        const char *method, *path, *body, *allow;
    } wrong[] = {
        {"POST", "/api/modes", "", "GET, HEAD"},
        {"POST", "/metrics", "{}", "GET, HEAD"},
        {"DELETE", "/api/stock/1", NULL, "GET, HEAD"},
        {"PUT", "/healthz", "", "GET, HEAD"},
        {"GET", "/api/deduct", NULL, "POST"},
        {"PUT", "/api/deduct", "{\"goods_id\":1,\"count\":1}", "POST"},
        {"DELETE", "/api/admin/reset", NULL, "POST"},
    };
    const char *bases[2] = {g_env.replicas[0], g_env.stock_url};

    for (size_t b = 0; b < 2; b++) {
        for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
            char what[160];
            snprintf(what, sizeof(what), "%s %s%s on %s", wrong[i].method, wrong[i].path,
                     wrong[i].body != NULL && wrong[i].body[0] ? " with a body" : "", bases[b]);
            http_request rq = {.method = wrong[i].method,
                               .base = bases[b],
                               .path = wrong[i].path,
                               .body = wrong[i].body};
            http_reply *r = call(&rq);
            expect_error(r, 405, "method_not_allowed", what);
            expect_header(r, "Allow", wrong[i].allow, what);
        }
        /* No token, with a body that would reset nothing that exists, and with none. */
        const char *bodies[2] = {"{\"goods_id\":987654321,\"stock\":1}", ""};
        for (size_t k = 0; k < 2; k++) {
            char what[160];
            snprintf(what, sizeof(what), "reset without a token%s on %s",
                     bodies[k][0] ? "" : ", empty body", bases[b]);
            http_request rq = {
                .method = "POST", .base = bases[b], .path = "/api/admin/reset", .body = bodies[k]};
            http_reply *r = call(&rq);
            expect_error(r, 401, "unauthorized", what);
            expect_header(r, "WWW-Authenticate", "Bearer", what);
        }
    }
}

/* An early answer (known from the headers alone) to a request without a body leaves the
 * connection open: the next request on the handle reuses it, as nginx's keepalive pool
 * does. A POST with a body answered early may be closed (its body is never read). */
static void test_keep_alive(void **state)
{
    (void)state;
    begin_case("keep_alive");
    const char *base = g_env.replicas[0];
    static const struct {
        const char *method, *path, *body;
        long status;
        const char *error;
    } early[] = {
        {"GET", "/nope", NULL, 404, "not_found"},
        {"GET", "/api/deduct", NULL, 405, "method_not_allowed"},
        {"DELETE", "/api/stock/1", NULL, 405, "method_not_allowed"},
        {"POST", "/api/modes", "", 405, "method_not_allowed"},
        {"POST", "/api/admin/reset", "", 401, "unauthorized"},
    };

    expect_json(get(base, "/healthz"), 200, "GET /healthz, to open the connection");
    for (size_t i = 0; i < sizeof(early) / sizeof(early[0]); i++) {
        char what[160], next[200];
        snprintf(what, sizeof(what), "%s %s%s on %s", early[i].method, early[i].path,
                 early[i].body != NULL ? " (Content-Length: 0)" : "", base);
        http_request rq = {
            .method = early[i].method, .base = base, .path = early[i].path, .body = early[i].body};
        http_reply *r = call(&rq);
        expect_error(r, early[i].status, early[i].error, what);

        snprintf(next, sizeof(next), "GET /healthz after %s", what);
        http_reply *after = get(base, "/healthz");
        expect_json(after, 200, next);
        if (after->connects != 0 || after->local_port != r->local_port)
            fail_msg("%s: a new connection was opened (%ld opened; local port %ld, then %ld): "
                     "the replica closed the connection after its %ld",
                     next, after->connects, r->local_port, after->local_port, early[i].status);
    }

    /* A body refused unread: whatever becomes of the connection, the next call is answered
     * and nothing was sold. */
    reset_goods(GOODS_KEEPALIVE, 5);
    char body[128];
    deduct_body(body, sizeof(body), GOODS_KEEPALIVE, 1, "redis");
    http_request rq = {.method = "POST",
                       .base = base,
                       .path = "/api/deduct",
                       .body = body,
                       .content_type = "text/plain"};
    expect_error(call(&rq), 415, "unsupported_media_type", "a 415 to a POST with a body");
    http_reply *after = get(base, "/healthz");
    expect_json(after, 200, "GET /healthz after a 415 to a POST with a body");
    printf("    after a 415 to a POST with a body the connection was %s\n",
           after->connects == 0 ? "kept" : "closed (allowed)");
    expect_stock(GOODS_KEEPALIVE, 5, 5, 0, 0, "after the 415");
}

/* What nginx refuses before any replica sees it is JSON too: TRACE (405) and a request line
 * in HTTP/2.0 over plain TCP (505). */
static void test_nginx_own_errors(void **state)
{
    (void)state;
    begin_case("nginx_own_errors");

    http_request trace = {.method = "TRACE", .base = g_env.stock_url, .path = "/api/modes"};
    http_reply *r = call(&trace);
    json_t *j = expect_error(r, 405, "method_not_allowed", "TRACE /api/modes via nginx");
    if (json_object_size(j) != 2)
        fail_msg("TRACE /api/modes via nginx: want exactly {\"ok\":false,\"error\":"
                 "\"method_not_allowed\"}, got %.300s",
                 r->body);

    const char *what = "GET /api/modes HTTP/2.0 via nginx";
    r = raw_call(g_env.stock_url, "GET /api/modes HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n");
    j = expect_json(r, 505, what);
    if (field_bool(j, "ok", what))
        fail_msg("%s: ok is true in an error answer: %.300s", what, r->body);
    if (field_str(j, "error", what)[0] == '\0')
        fail_msg("%s: empty error: %.300s", what, r->body);
    printf("    HTTP/2.0 request line: %ld %s\n", r->status, r->body);
}

/* ------------------------------------------------------------------------------------------
 * Case: malformed deduct requests
 * ------------------------------------------------------------------------------------------ */

#define BODY_N(literal) literal, sizeof(literal) - 1 /* a body that may hold a NUL */
#define KEY_129                                                                                    \
    "Idempotency-Key: "                                                                            \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"   \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define VALID_BODY "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\"}"

typedef struct bad_request_case {
    const char *label;
    const char *body;
    size_t body_len;          /* 0: strlen(body) */
    const char *query;        /* appended to /api/deduct; NULL: none */
    const char *content_type; /* NULL: application/json */
    const char *header;       /* one more header line; NULL: none */
    long status;
    const char *error;
} bad_request_case;

static const bad_request_case bad_requests[] = {
    /* types and ranges */
    {"goods_id a string", "{\"goods_id\":\"" GM "\",\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count a string", "{\"goods_id\":" GM ",\"count\":\"1\"}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1.5", "{\"goods_id\":" GM ",\"count\":1.5}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1.0", "{\"goods_id\":" GM ",\"count\":1.0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1e0", "{\"goods_id\":" GM ",\"count\":1e0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 1E0", "{\"goods_id\":" GM ",\"count\":1E0}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id " GM ".0", "{\"goods_id\":" GM ".0,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count -1", "{\"goods_id\":" GM ",\"count\":-1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 0", "{\"goods_id\":" GM ",\"count\":0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count -0", "{\"goods_id\":" GM ",\"count\":-0}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 10001", "{\"goods_id\":" GM ",\"count\":10001}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 2^63", "{\"goods_id\":" GM ",\"count\":9223372036854775808}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"count 1e400", "{\"goods_id\":" GM ",\"count\":1e400}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id 0", "{\"goods_id\":0,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id negative", "{\"goods_id\":-" GM ",\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id 2^63", "{\"goods_id\":9223372036854775808,\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"goods_id 2^64+" GM, "{\"goods_id\":18446744073709555217,\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"goods_id 1e30", "{\"goods_id\":1e30,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count 01", "{\"goods_id\":" GM ",\"count\":01}", 0, 0, 0, 0, 400, "bad_request"},
    {"count +1", "{\"goods_id\":" GM ",\"count\":+1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count null", "{\"goods_id\":" GM ",\"count\":null}", 0, 0, 0, 0, 400, "bad_request"},
    {"count true", "{\"goods_id\":" GM ",\"count\":true}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id false", "{\"goods_id\":false,\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count an array", "{\"goods_id\":" GM ",\"count\":[1]}", 0, 0, 0, 0, 400, "bad_request"},
    {"goods_id an object", "{\"goods_id\":{\"id\":" GM "},\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    /* fields */
    {"goods_id missing", "{\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"count missing", "{\"goods_id\":" GM "}", 0, 0, 0, 0, 400, "bad_request"},
    {"empty object", "{}", 0, 0, 0, 0, 400, "bad_request"},
    {"unknown field", "{\"goods_id\":" GM ",\"count\":1,\"price\":5}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"field name in another case", "{\"goods_id\":" GM ",\"Count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"duplicate count", "{\"goods_id\":" GM ",\"count\":1,\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"duplicate goods_id", "{\"goods_id\":" GM ",\"goods_id\":" GM ",\"count\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    {"duplicate mode", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\",\"mode\":\"redis\"}", 0,
     0, 0, 0, 400, "bad_request"},
    {"nested request", "{\"order\":{\"goods_id\":" GM ",\"count\":1}}", 0, 0, 0, 0, 400,
     "bad_request"},
    /* not one JSON object */
    {"an array", "[{\"goods_id\":" GM ",\"count\":1}]", 0, 0, 0, 0, 400, "bad_request"},
    {"null", "null", 0, 0, 0, 0, 400, "bad_request"},
    {"a number", "1", 0, 0, 0, 0, 400, "bad_request"},
    {"a string", "\"goods_id\"", 0, 0, 0, 0, 400, "bad_request"},
    {"empty body", "", 0, 0, 0, 0, 400, "bad_request"},
    {"whitespace only", " \n\t ", 0, 0, 0, 0, 400, "bad_request"},
    {"a form", "goods_id=" GM "&count=1", 0, 0, 0, 0, 400, "bad_request"},
    {"single quotes", "{'goods_id':" GM ",'count':1}", 0, 0, 0, 0, 400, "bad_request"},
    {"a comment", "{\"goods_id\":" GM ",/* one */\"count\":1}", 0, 0, 0, 0, 400, "bad_request"},
    {"trailing garbage", VALID_BODY " x", 0, 0, 0, 0, 400, "bad_request"},
    {"two objects", VALID_BODY VALID_BODY, 0, 0, 0, 0, 400, "bad_request"},
    {"truncated", "{\"goods_id\":" GM ",\"count\":", 0, 0, 0, 0, 400, "bad_request"},
    {"trailing comma", "{\"goods_id\":" GM ",\"count\":1,}", 0, 0, 0, 0, 400, "bad_request"},
    {"a NUL byte after the object", BODY_N(VALID_BODY "\0"), 0, 0, 0, 400, "bad_request"},
    {"a NUL byte inside", BODY_N("{\"goods_id\":" GM ",\0\"count\":1}"), 0, 0, 0, 400,
     "bad_request"},
    /* "\u0000" is valid JSON: as a mode it names no mode; in a key it names no field */
    {"\\u0000 in the mode", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"re\\u0000dis\"}", 0, 0, 0,
     0, 400, "unknown_mode"},
    {"\\u0000 after a mode's name", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\\u0000\"}",
     0, 0, 0, 0, 400, "unknown_mode"},
    {"\\u0000 in a key", "{\"goods_id\":" GM ",\"count\":1,\"mo\\u0000de\":\"redis\"}", 0, 0, 0, 0,
     400, "bad_request"},
    {"invalid UTF-8 in a string", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redis\xC0\"}", 0, 0,
     0, 0, 400, "bad_request"},
    {"invalid UTF-8 in a key", "{\"goods_id\":" GM ",\"count\":1,\"\xFF\xFE\":1}", 0, 0, 0, 0, 400,
     "bad_request"},
    /* the mode */
    {"unknown mode in the body", "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"fast\"}", 0, 0, 0, 0,
     400, "unknown_mode"},
    {"overlong mode name",
     "{\"goods_id\":" GM ",\"count\":1,\"mode\":\"redisredisredisredisredisredisredisredisredis"
     "redisredisredisredisredisredis\"}",
     0, 0, 0, 0, 400, "unknown_mode"},
    {"unknown mode in the query", "{\"goods_id\":" GM ",\"count\":1}", 0, "?mode=fast", 0, 0, 400,
     "unknown_mode"},
    /* the Idempotency-Key */
    {"empty Idempotency-Key", VALID_BODY, 0, 0, 0, "Idempotency-Key;", 400, "bad_request"},
    {"129-character Idempotency-Key", VALID_BODY, 0, 0, 0, KEY_129, 400, "bad_request"},
    {"Idempotency-Key with a space", VALID_BODY, 0, 0, 0, "Idempotency-Key: a b", 400,
     "bad_request"},
    {"Idempotency-Key with a slash", VALID_BODY, 0, 0, 0, "Idempotency-Key: a/b", 400,
     "bad_request"},
    {"Idempotency-Key with a star", VALID_BODY, 0, 0, 0, "Idempotency-Key: key*1", 400,
     "bad_request"},
    {"Idempotency-Key not ASCII", VALID_BODY, 0, 0, 0, "Idempotency-Key: cl\xC3\xA9", 400,
     "bad_request"},
    /* fault injection: this stack's replicas run without it (FAULTS=off, the default), so
     * any X-Fault is refused, a known fault as much as an unknown one */
    {"X-Fault on a replica without fault injection", VALID_BODY, 0, 0, 0,
     "X-Fault: crash-in-section", 400, "bad_request"},
    {"X-Fault pause on a replica without fault injection", VALID_BODY, 0, 0, 0,
     "X-Fault: pause-in-section=10", 400, "bad_request"},
    {"unknown X-Fault", VALID_BODY, 0, 0, 0, "X-Fault: explode", 400, "bad_request"},
    /* the media type */
    {"Content-Type text/plain", VALID_BODY, 0, 0, "text/plain", 0, 415, "unsupported_media_type"},
    {"Content-Type form", VALID_BODY, 0, 0, "application/x-www-form-urlencoded", 0, 415,
     "unsupported_media_type"},
};

/* Each malformed request gets its 4xx with the right error, as JSON, and sells nothing. */
static void test_malformed_requests(void **state)
{
    (void)state;
    begin_case("malformed_requests");
    reset_goods(GOODS_MALFORMED, 100);
    stock_view before = stock_get(GOODS_MALFORMED);
    size_t n = sizeof(bad_requests) / sizeof(bad_requests[0]);

    for (size_t i = 0; i < n; i++) {
        const bad_request_case *c = &bad_requests[i];
        char path[64], what[160];
        snprintf(path, sizeof(path), "/api/deduct%s", c->query ? c->query : "");
        snprintf(what, sizeof(what), "malformed #%zu (%s)", i + 1, c->label);
        http_request rq = {.method = "POST",
                           .base = g_env.stock_url,
                           .path = path,
                           .body = c->body,
                           .body_len = c->body_len,
                           .content_type = c->content_type,
                           .headers = {c->header}};
        expect_error(call(&rq), c->status, c->error, what);
        expect_unchanged(GOODS_MALFORMED, &before, what);
    }

    /* The same valid body does sell, so the rejections above were about what was wrong. */
    http_request ok = {.method = "POST",
                       .base = g_env.stock_url,
                       .path = "/api/deduct",
                       .body = VALID_BODY,
                       .headers = {"Idempotency-Key: Az09_.:-"}};
    expect_deducted(call(&ok), GOODS_MALFORMED, 1, 99, "redis", "the valid body, for contrast");
    printf("    %zu malformed requests refused, none sold\n", n);
}

/* ------------------------------------------------------------------------------------------
 * Case: idempotency
 * ------------------------------------------------------------------------------------------ */

typedef struct idem_shot {
    pthread_t thread;
    pthread_barrier_t *barrier;
    const char *base;
    char body[160];
    char key_header[200];
    http_reply reply;
} idem_shot;

static void *idem_thread(void *arg)
{
    idem_shot *s = arg;
    CURL *h = curl_easy_init();

    /* Every thread has its handle before any request leaves: the requests go out together. */
    pthread_barrier_wait(s->barrier);
    http_request rq = {.method = "POST",
                       .base = s->base,
                       .path = "/api/deduct",
                       .body = s->body,
                       .headers = {s->key_header}};
    if (h == NULL) {
        snprintf(s->reply.error, sizeof(s->reply.error), "curl_easy_init failed");
        s->reply.body = strdup("");
        return NULL;
    }
    http_do(h, &rq, &s->reply);
    curl_easy_cleanup(h);
    return NULL;
}

static void idem_shots_release(void *arg)
{
    idem_shot *shots = arg;
    for (int i = 0; i < IDEM_THREADS; i++)
        free(shots[i].reply.body);
    free(shots);
}

/* Sends one deduct with `key` from IDEM_THREADS threads at once, spread over nginx and every
 * replica directly (so that several replicas race for the key), asserts they all answered
 * the same 200 and that one unit was sold; returns the (case-owned) body of the answer. */
static json_t *idem_burst(long long goods_id, const char *mode, const char *key)
{
    pthread_barrier_t barrier;
    idem_shot *shots = calloc(IDEM_THREADS, sizeof(*shots));
    char what[160];
    int started = 0;

    if (shots == NULL)
        fail_msg("out of memory");
    own(shots, idem_shots_release);
    snprintf(what, sizeof(what), "%d concurrent deducts with one key in mode %s", IDEM_THREADS,
             mode);
    pthread_barrier_init(&barrier, NULL, IDEM_THREADS);
    for (int i = 0; i < IDEM_THREADS; i++) {
        shots[i].barrier = &barrier;
        size_t target = (size_t)i % (g_env.n_replicas + 1);
        shots[i].base = target == 0 ? g_env.stock_url : g_env.replicas[target - 1];
        deduct_body(shots[i].body, sizeof(shots[i].body), goods_id, 1, mode);
        snprintf(shots[i].key_header, sizeof(shots[i].key_header), "Idempotency-Key: %s", key);
    }
    for (; started < IDEM_THREADS; started++)
        if (pthread_create(&shots[started].thread, NULL, idem_thread, &shots[started]) != 0)
            abort(); /* the barrier would wait forever for the missing threads */
    for (int i = 0; i < started; i++)
        pthread_join(shots[i].thread, NULL);
    pthread_barrier_destroy(&barrier);

    int n_ok = 0;
    json_t *first = NULL;
    for (int i = 0; i < IDEM_THREADS; i++) {
        const http_reply *r = &shots[i].reply;
        if (r->status == 0)
            fail_msg("%s: request %d got no answer: %s", what, i, r->error);
        json_t *j = expect_deducted(r, goods_id, 1, -1, mode, what);
        n_ok++;
        if (first == NULL)
            first = j;
        else if (!json_equal(first, j))
            fail_msg("%s: two answers differ:\n  %s\n  %s", what, shots[0].reply.body, r->body);
    }
    printf("    %s (spread over nginx and %zu replicas): %d x 200, one body, made by %s\n", what,
           g_env.n_replicas, n_ok, field_str(first, "instance", what));
    stock_view v = stock_get(goods_id);
    if (v.sold != 1 || v.orders != 1 || v.stock != v.initial - 1)
        fail_msg("%s: sold %lld orders %lld stock %lld of %lld: the key sold more than once", what,
                 v.sold, v.orders, v.stock, v.initial);
    return first;
}

/* Replays `key` on goods_id (in `mode`) on nginx and on every replica: each answer must be
 * `status` with the stored body. */
static void expect_replayed(long long goods_id, const char *mode, const char *key, long status,
                            const json_t *stored, const char *what)
{
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char label[256];
        snprintf(label, sizeof(label), "%s, replayed on %s", what, base);
        http_reply *r = deduct(base, goods_id, 1, mode, key);
        json_t *j = expect_json(r, status, label);
        if (!json_equal(stored, j))
            fail_msg("%s: not the stored answer: %s", label, r->body);
    }
}

static long long g_fresh_goods; /* goods the idempotency case created in SQL; 0: none */

/* Removes the goods the idempotency case made behind the service's back (with its orders
 * and records), so that a long-lived stack does not collect them. */
static int idempotency_teardown(void **state)
{
    if (g_fresh_goods != 0) {
        static const char *const cleanup[] = {
            "DELETE FROM idempotency WHERE goods = $1",
            "DELETE FROM orders WHERE goods = $1",
            "DELETE FROM goods WHERE id = $1",
        };
        char err[512];
        for (size_t i = 0; i < 3; i++)
            if (sql_run(cleanup[i], 1, g_fresh_goods, 0, NULL, NULL, err, sizeof(err)) != 0)
                fprintf(stderr, "clean-up of goods %lld: %s\n", g_fresh_goods, err);
        g_fresh_goods = 0;
    }
    return case_teardown(state);
}

static void test_idempotency(void **state)
{
    (void)state;
    begin_case("idempotency");
    const char *modes[] = {"redis", "none", "local"};
    char key[128], other_key[128];

    /* One key, 20 requests at once, in each mode: one sale, one answer; a retry later (on
     * every replica) gets that same answer, with the first replica's instance. */
    for (size_t m = 0; m < 3; m++) {
        long long goods = GOODS_IDEM + (long long)m;
        char what[96];
        reset_goods(goods, 100);
        snprintf(key, sizeof(key), "burst-%s-%s", modes[m], g_env.run_tag);
        json_t *stored = idem_burst(goods, modes[m], key);
        snprintf(what, sizeof(what), "key of the %s burst", modes[m]);
        expect_replayed(goods, modes[m], key, 200, stored, what);
        expect_stock(goods, 100, 99, 1, 1, what);
    }

    /* The same key on other goods is another request: it sells there. */
    snprintf(key, sizeof(key), "burst-redis-%s", g_env.run_tag);
    reset_goods(GOODS_IDEM + 3, 100);
    json_t *j = expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 3, 1, "redis", key),
                                GOODS_IDEM + 3, 1, 99, "redis", "the burst's key on other goods");
    (void)j;
    expect_stock(GOODS_IDEM + 3, 100, 99, 1, 1, "the burst's key on other goods");
    expect_stock(GOODS_IDEM, 100, 99, 1, 1, "the burst's goods, untouched by the other sale");

    /* A stored 200 stays a 200 after the stock ran out. */
    reset_goods(GOODS_IDEM + 4, 1);
    snprintf(key, sizeof(key), "last-unit-%s", g_env.run_tag);
    j = expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 4, 1, "redis", key), GOODS_IDEM + 4, 1,
                        0, "redis", "sell the last unit with a key");
    expect_replayed(GOODS_IDEM + 4, "redis", key, 200, j, "the last unit's key, now sold out");

    /* A 409 is stored: once stock is back, its key still answers the 409 and sells nothing,
     * while a new key sells. Stock is put back behind the service's back, in SQL, because a
     * reset would delete the very records under test. */
    snprintf(other_key, sizeof(other_key), "too-late-%s", g_env.run_tag);
    j = expect_error(deduct(g_env.stock_url, GOODS_IDEM + 4, 1, "redis", other_key), 409,
                     "insufficient_stock", "a new key on sold-out goods");
    sql_exec("UPDATE goods SET stock = $2 WHERE id = $1", GOODS_IDEM + 4, 5);
    expect_replayed(GOODS_IDEM + 4, "redis", other_key, 409, j, "the 409's key, stock back");
    expect_stock(GOODS_IDEM + 4, 1, 5, 1, 1, "after replaying the 409 with stock back");
    snprintf(key, sizeof(key), "restocked-%s", g_env.run_tag);
    expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 4, 1, "redis", key), GOODS_IDEM + 4, 1, 4,
                    "redis", "a new key once stock is back");

    /* A 404 is stored the same way: the goods created afterwards (in SQL: a reset would
     * delete the record) do not change its key's answer. The goods id is this run's own. */
    long long fresh = 5000000000000LL + (long long)getpid() * 100000LL + time(NULL) % 100000;
    snprintf(key, sizeof(key), "unknown-%s", g_env.run_tag);
    j = expect_error(deduct(g_env.stock_url, fresh, 1, "redis", key), 404, "unknown_goods",
                     "a key on unknown goods");
    g_fresh_goods = fresh;
    sql_exec("INSERT INTO goods (id, stock, initial) VALUES ($1, $2, $2)", fresh, 5);
    expect_replayed(fresh, "redis", key, 404, j, "the 404's key, goods created since");
    snprintf(other_key, sizeof(other_key), "created-%s", g_env.run_tag);
    expect_deducted(deduct(g_env.stock_url, fresh, 1, "redis", other_key), fresh, 1, 4, "redis",
                    "a new key on the goods created since");

    /* The longest key (128 characters, every allowed kind) is accepted. */
    reset_goods(GOODS_IDEM + 5, 10);
    char longest[129];
    memset(longest, 'k', 128);
    memcpy(longest, "Az09_.:-", 8);
    longest[128] = '\0';
    j = expect_deducted(deduct(g_env.stock_url, GOODS_IDEM + 5, 1, "redis", longest),
                        GOODS_IDEM + 5, 1, 9, "redis", "a 128-character key");
    expect_replayed(GOODS_IDEM + 5, "redis", longest, 200, j, "the 128-character key");
    expect_stock(GOODS_IDEM + 5, 10, 9, 1, 1, "after the 128-character key");
}

/* redis-batch: a request whose key another request of the same batch carries, or a request
 * committed earlier, gets the one stored answer. Twenty requests at once with one key sell
 * once; then twenty at once over five keys (four requests each) on 3 units: three keys sell,
 * two are refused, every request of a key gets its key's one answer, and each key replays it
 * later on every replica. */
static void test_batch_idempotency(void **state)
{
    (void)state;
    begin_case("batch_idempotency");
    char key[128], keys[5][128], what[200];

    reset_goods(GOODS_BATCH_IDEM, 100);
    snprintf(key, sizeof(key), "batch-burst-%s", g_env.run_tag);
    json_t *stored = idem_burst(GOODS_BATCH_IDEM, "redis-batch", key);
    expect_replayed(GOODS_BATCH_IDEM, "redis-batch", key, 200, stored, "the redis-batch burst");
    expect_stock(GOODS_BATCH_IDEM, 100, 99, 1, 1, "the redis-batch burst");

    long long goods = GOODS_BATCH_IDEM + 1;
    reset_goods(goods, 3);
    idem_shot *shots = calloc(IDEM_THREADS, sizeof(*shots));
    pthread_barrier_t barrier;
    if (shots == NULL)
        fail_msg("out of memory");
    own(shots, idem_shots_release);
    for (int k = 0; k < 5; k++)
        snprintf(keys[k], sizeof(keys[k]), "batch-mix-%d-%s", k, g_env.run_tag);
    pthread_barrier_init(&barrier, NULL, IDEM_THREADS);
    for (int i = 0; i < IDEM_THREADS; i++) {
        size_t target = (size_t)i % (g_env.n_replicas + 1);
        shots[i].barrier = &barrier;
        shots[i].base = target == 0 ? g_env.stock_url : g_env.replicas[target - 1];
        deduct_body(shots[i].body, sizeof(shots[i].body), goods, 1, "redis-batch");
        snprintf(shots[i].key_header, sizeof(shots[i].key_header), "Idempotency-Key: %s",
                 keys[i % 5]);
    }
    for (int i = 0; i < IDEM_THREADS; i++)
        if (pthread_create(&shots[i].thread, NULL, idem_thread, &shots[i]) != 0)
            abort(); /* the barrier would wait forever for the missing threads */
    for (int i = 0; i < IDEM_THREADS; i++)
        pthread_join(shots[i].thread, NULL);
    pthread_barrier_destroy(&barrier);

    json_t *answer[5] = {NULL};
    long status[5] = {0};
    int sold = 0, refused = 0;
    for (int i = 0; i < IDEM_THREADS; i++) {
        const http_reply *r = &shots[i].reply;
        int k = i % 5;
        snprintf(what, sizeof(what), "redis-batch, 5 keys at once on 3 units, key %d", k);
        if (r->status != 200 && r->status != 409)
            fail_msg("%s: status %ld, want 200 or 409: %.300s", what, r->status, r->body);
        json_t *j = expect_json(r, r->status, what);
        if (answer[k] == NULL) {
            answer[k] = j;
            status[k] = r->status;
        } else if (r->status != status[k] || !json_equal(answer[k], j)) {
            fail_msg("%s: two answers for one key differ: %ld vs %ld: %.300s", what, status[k],
                     r->status, r->body);
        }
    }
    for (int k = 0; k < 5; k++) {
        snprintf(what, sizeof(what), "redis-batch, 5 keys at once on 3 units, key %d", k);
        if (status[k] == 200) {
            sold++;
            expect_field_str(answer[k], "mode", "redis-batch", what);
            if (field_int(answer[k], "order_id", what) <= 0)
                fail_msg("%s: a 200 without an order", what);
        } else {
            refused++;
        }
        expect_replayed(goods, "redis-batch", keys[k], status[k], answer[k], what);
    }
    printf("    redis-batch, %d requests over 5 keys on 3 units: %d keys sold, %d refused\n",
           IDEM_THREADS, sold, refused);
    if (sold != 3 || refused != 2)
        fail_msg("redis-batch, 5 keys on 3 units: %d keys sold and %d refused, want 3 and 2", sold,
                 refused);
    expect_stock(goods, 3, 0, 3, 3, "redis-batch, 5 keys at once on 3 units");
}

/* ------------------------------------------------------------------------------------------
 * Cases: load
 * ------------------------------------------------------------------------------------------ */

/* redis through nginx over every replica: exactly the stock is sold, by all replicas. */
static void test_load_redis_three(void **state)
{
    (void)state;
    begin_case("load_redis_three");
    reset_goods(GOODS_LOAD_REDIS, LOAD_STOCK);
    load_plan *p = load_plan_new("redis via nginx", g_env.stock_url, GOODS_LOAD_REDIS, "redis",
                                 LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_STOCK);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (p->counts.per_instance[i] == 0)
            fail_msg("redis via nginx: replica %s sold nothing: nginx did not balance over all",
                     g_env.instances[i]);
}

/* redis-batch through nginx over every replica: each replica's concurrent requests are sold
 * in batches, one transaction each under the redis lock, and exactly the stock is sold, each
 * 200 with its own remaining value, by all replicas. */
static void test_load_redis_batch_three(void **state)
{
    (void)state;
    begin_case("load_redis_batch_three");
    reset_goods(GOODS_LOAD_BATCH, LOAD_STOCK);
    load_plan *p = load_plan_new("redis-batch via nginx", g_env.stock_url, GOODS_LOAD_BATCH,
                                 "redis-batch", LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_STOCK);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (p->counts.per_instance[i] == 0)
            fail_msg("redis-batch via nginx: replica %s sold nothing", g_env.instances[i]);
}

/* The PostgreSQL rungs answer like every mode: 200 with the stock left, 409 with the stock
 * there is (pg-atomic finds it with its conditional UPDATE, which wrote nothing), sold out. */
static void test_pg_rung_outcomes(void **state)
{
    (void)state;
    begin_case("pg_rung_outcomes");
    const char *modes[] = {"pg-for-update", "pg-atomic", "pg-advisory"};
    for (size_t i = 0; i < 3; i++) {
        long long g = GOODS_PG_OUTCOMES + (long long)i;
        char what[96];
        reset_goods(g, 5);
        snprintf(what, sizeof(what), "%s: deduct 2 of 5", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 2, modes[i], NULL), g, 2, 3, modes[i], what);
        snprintf(what, sizeof(what), "%s: deduct 4 of 3", modes[i]);
        json_t *j = expect_error(deduct(g_env.stock_url, g, 4, modes[i], NULL), 409,
                                 "insufficient_stock", what);
        expect_field_int(j, "remaining", 3, what);
        expect_stock(g, 5, 3, 2, 1, what);
        snprintf(what, sizeof(what), "%s: deduct the last 3", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 3, modes[i], NULL), g, 3, 0, modes[i], what);
        expect_stock(g, 5, 0, 5, 2, what);
    }
}

/* A PostgreSQL rung under the load of test_load_redis_three, through nginx over every
 * replica, with no Redis lock: the database alone sells exactly the stock. One case per
 * rung, so that one rung's failure does not hide the others' figures. */
static void load_pg_three(const char *mode_name, const char *label, long long goods)
{
    reset_goods(goods, LOAD_STOCK);
    load_plan *p =
        load_plan_new(label, g_env.stock_url, goods, mode_name, LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_STOCK);
    for (size_t k = 0; k < g_env.n_replicas; k++)
        if (p->counts.per_instance[k] == 0)
            fail_msg("%s: replica %s sold nothing: nginx did not balance over all", label,
                     g_env.instances[k]);
}

static void test_load_pg_for_update_three(void **state)
{
    (void)state;
    begin_case("load_pg_for_update_three");
    load_pg_three("pg-for-update", "pg-for-update via nginx", GOODS_LOAD_PG);
}

static void test_load_pg_atomic_three(void **state)
{
    (void)state;
    begin_case("load_pg_atomic_three");
    load_pg_three("pg-atomic", "pg-atomic via nginx", GOODS_LOAD_PG + 1);
}

static void test_load_pg_advisory_three(void **state)
{
    (void)state;
    begin_case("load_pg_advisory_three");
    load_pg_three("pg-advisory", "pg-advisory via nginx", GOODS_LOAD_PG + 2);
}

/* local on one replica (its mutex is enough there): the same exact figures. */
static void test_load_local_one(void **state)
{
    (void)state;
    begin_case("load_local_one");
    reset_goods(GOODS_LOAD_LOCAL1, LOAD_STOCK);
    load_plan *p = load_plan_new("local on one replica", g_env.replicas[0], GOODS_LOAD_LOCAL1,
                                 "local", LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sale(p, LOAD_STOCK);
    if (p->counts.per_instance[0] != LOAD_STOCK)
        fail_msg("local on one replica: %d sales by %s, want all %d", p->counts.per_instance[0],
                 g_env.instances[0], LOAD_STOCK);
}

/* none and local over three replicas: they may oversell (not asserted: that would be luck),
 * but the books must agree with the answers. */
static void test_load_unsafe_three(void **state)
{
    (void)state;
    begin_case("load_unsafe_three");
    const char *modes[] = {"none", "local"};
    const long long goods[] = {GOODS_LOAD_NONE3, GOODS_LOAD_LOCAL3};

    for (size_t m = 0; m < 2; m++) {
        char label[64];
        snprintf(label, sizeof(label), "%s via nginx", modes[m]);
        reset_goods(goods[m], LOAD_STOCK);
        load_plan *p = load_plan_new(m == 0 ? "none via nginx" : "local via nginx", g_env.stock_url,
                                     goods[m], modes[m], LOAD_REQUESTS, LOAD_THREADS);
        load_run(p);
        expect_only_200_409(p);
        int n_ok = atomic_load(&p->n_ok);
        if (count_repeats(p->order_ids, n_ok) != 0)
            fail_msg("%s: two 200 answers carry the same order_id", label);
        int lost = count_repeats(p->remaining, n_ok);
        stock_view v = stock_get(goods[m]);
        printf("    %s: OVERSOLD %lld (stock %lld sold %lld orders %lld; %d sales saw a "
               "'remaining' another sale saw too)\n",
               label, v.oversold, v.stock, v.sold, v.orders, lost);
        if (v.sold != p->counts.by_status[200] || v.orders != p->counts.by_status[200])
            fail_msg("%s: sold %lld orders %lld, but %d answers were 200", label, v.sold, v.orders,
                     p->counts.by_status[200]);
        if (v.initial != LOAD_STOCK || v.stock < 0 || v.stock > LOAD_STOCK || v.oversold < 0)
            fail_msg("%s: initial %lld stock %lld oversold %lld: stock out of bounds or lost",
                     label, v.initial, v.stock, v.oversold);
    }
}

/* ------------------------------------------------------------------------------------------
 * Cases: pg-optimistic, pg-lockrow, pg-lockrow-ttl, and the PostgreSQL rungs' lock wait bound
 * ------------------------------------------------------------------------------------------ */

static double metric_value(const char *base, const char *series);

/* The sum of one series over every replica's /metrics. */
static double metric_sum(const char *series)
{
    double sum = 0;
    for (size_t i = 0; i < g_env.n_replicas; i++)
        sum += metric_value(g_env.replicas[i], series);
    return sum;
}

/* The three rungs answer like every mode: 200 with the stock left, 409 with the stock there
 * is, sold out, and 404 for unknown goods. */
static void test_pg_rungs_more_outcomes(void **state)
{
    (void)state;
    begin_case("pg_rungs_more_outcomes");
    const char *modes[] = {"pg-optimistic", "pg-lockrow", "pg-lockrow-ttl"};
    for (size_t i = 0; i < 3; i++) {
        long long g = GOODS_PG2_OUTCOMES + (long long)i;
        char what[96];
        reset_goods(g, 5);
        snprintf(what, sizeof(what), "%s: deduct 2 of 5", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 2, modes[i], NULL), g, 2, 3, modes[i], what);
        snprintf(what, sizeof(what), "%s: deduct 4 of 3", modes[i]);
        json_t *j = expect_error(deduct(g_env.stock_url, g, 4, modes[i], NULL), 409,
                                 "insufficient_stock", what);
        expect_field_int(j, "remaining", 3, what);
        snprintf(what, sizeof(what), "%s: deduct the last 3", modes[i]);
        expect_deducted(deduct(g_env.stock_url, g, 3, modes[i], NULL), g, 3, 0, modes[i], what);
        expect_stock(g, 5, 0, 5, 2, what);
        snprintf(what, sizeof(what), "%s: unknown goods", modes[i]);
        expect_error(deduct(g_env.stock_url, GOODS_UNKNOWN, 1, modes[i], NULL), 404,
                     "unknown_goods", what);
    }
    /* The lock rows are gone once their requests are done (the 404 ones too). */
    if (sql_value("SELECT count(*) FROM goods_locks WHERE goods = $1", 1, GOODS_UNKNOWN) != 0 ||
        sql_value("SELECT count(*) FROM goods_locks WHERE goods = $1", 1, GOODS_PG2_OUTCOMES + 1) !=
            0)
        fail_msg("a lock row outlived its request");
}

/* The books of a load whose plan allows its mode's 503 (allowed_503): exactly `stock` sales,
 * each once, and every other answer a 409 or that 503, which sold nothing. */
static void expect_exact_sale_allowing_503(load_plan *p, long long stock)
{
    const load_counts *c = &p->counts;
    int n_ok = atomic_load(&p->n_ok);
    int other = p->total - c->by_status[200] - c->by_status[409] - c->allowed_503;

    if (other != 0 || c->bad_answer != 0)
        fail_msg("%s: %d answers neither 200, 409 nor 503 %s, %d off the contract; first: %s",
                 p->label, other, p->allowed_503, c->bad_answer, c->note);
    if (c->by_status[200] != stock)
        fail_msg("%s: 200=%d, want exactly %lld (409=%d, 503 %s=%d)", p->label, c->by_status[200],
                 stock, c->by_status[409], p->allowed_503, c->allowed_503);
    if (count_repeats(p->order_ids, n_ok) != 0)
        fail_msg("%s: two 200 answers carry the same order_id", p->label);
    qsort(p->remaining, (size_t)n_ok, sizeof(long long), cmp_ll);
    for (int i = 0; i < n_ok; i++)
        if (p->remaining[i] != i)
            fail_msg("%s: the 200s' remaining values are not each of 0..%lld once (sorted, "
                     "position %d holds %lld)",
                     p->label, stock - 1, i, p->remaining[i]);
    stock_view v = stock_get(p->goods_id);
    printf("    %s: stock %lld sold %lld orders %lld oversold %lld; 503 %s: %d\n", p->label,
           v.stock, v.sold, v.orders, v.oversold, p->allowed_503, c->allowed_503);
    if (v.initial != stock || v.stock != 0 || v.sold != stock || v.orders != stock ||
        v.oversold != 0)
        fail_msg("%s: initial %lld stock %lld sold %lld orders %lld oversold %lld, want %lld 0 "
                 "%lld %lld 0",
                 p->label, v.initial, v.stock, v.sold, v.orders, v.oversold, stock, stock, stock);
}

/*
 * pg-optimistic under the load of test_load_redis_three: it sells exactly the stock, never
 * a unit twice. A request that loses its race OPTIMISTIC_RETRIES + 1 times answers 503
 * conflict and sells nothing (that is its contract under contention, so it is allowed, and
 * counted); the retries per sale, from the replicas' stock_optimistic_retries_total, show
 * what the contention cost.
 */
static void test_load_pg_optimistic_three(void **state)
{
    (void)state;
    begin_case("load_pg_optimistic_three");
    reset_goods(GOODS_LOAD_OPTIMISTIC, LOAD_STOCK);
    double retries = metric_sum("stock_optimistic_retries_total");
    load_plan *p = load_plan_new("pg-optimistic via nginx", g_env.stock_url, GOODS_LOAD_OPTIMISTIC,
                                 "pg-optimistic", LOAD_REQUESTS, LOAD_THREADS);
    p->allowed_503 = "conflict";
    load_run(p);
    expect_exact_sale_allowing_503(p, LOAD_STOCK);
    retries = metric_sum("stock_optimistic_retries_total") - retries;
    printf("    pg-optimistic via nginx: %.0f transactions run again, %.2f per sale\n", retries,
           retries / LOAD_STOCK);
    for (size_t k = 0; k < g_env.n_replicas; k++)
        if (p->counts.per_instance[k] == 0)
            fail_msg("pg-optimistic: replica %s sold nothing", g_env.instances[k]);
}

/*
 * pg-lockrow under the same load: the lock row excludes across replicas, so exactly the
 * stock is sold. Its waiters poll, and polling is not fair: on a loaded machine one may miss
 * the row's release until its wait bound runs out, and answer 503 lock_timeout, selling
 * nothing; allowed, and counted.
 */
static void test_load_pg_lockrow_three(void **state)
{
    (void)state;
    begin_case("load_pg_lockrow_three");
    reset_goods(GOODS_LOAD_LOCKROW, LOAD_STOCK);
    load_plan *p = load_plan_new("pg-lockrow via nginx", g_env.stock_url, GOODS_LOAD_LOCKROW,
                                 "pg-lockrow", LOAD_REQUESTS, LOAD_THREADS);
    p->allowed_503 = "lock_timeout";
    load_run(p);
    expect_exact_sale_allowing_503(p, LOAD_STOCK);
    for (size_t k = 0; k < g_env.n_replicas; k++)
        if (p->counts.per_instance[k] == 0)
            fail_msg("pg-lockrow: replica %s sold nothing", g_env.instances[k]);
    if (sql_value("SELECT count(*) FROM goods_locks WHERE goods = $1", 1, GOODS_LOAD_LOCKROW) != 0)
        fail_msg("pg-lockrow: a lock row is left after the load");
}

static void lockrow_rows_teardown_delete(long long goods)
{
    char err[256];
    if (sql_run("DELETE FROM goods_locks WHERE goods = $1", 1, goods, 0, NULL, NULL, err,
                sizeof(err)) != 0)
        fprintf(stderr, "could not delete the lock row of goods %lld: %s\n", goods, err);
}

static int lockrow_case_teardown(void **state)
{
    lockrow_rows_teardown_delete(GOODS_LOCKROW_WEDGE);
    lockrow_rows_teardown_delete(GOODS_LOCKROW_TTL);
    return case_teardown(state);
}

/* A deduct that must answer 503 lock_timeout after about the lock wait bound. */
static void expect_lock_timeout_after_bound(const char *mode, long long goods, const char *what)
{
    http_reply *r = deduct(g_env.stock_url, goods, 1, mode, NULL);
    printf("    %s: %ld after %.2f s (bound %ld ms)\n", what, r->status, r->seconds,
           g_env.lock_wait_ms);
    expect_error(r, 503, "lock_timeout", what);
    if (r->seconds < 0.9 * (double)g_env.lock_wait_ms / 1000.0 ||
        r->seconds > (double)g_env.lock_wait_ms / 1000.0 + 2.0)
        fail_msg("%s: lock_timeout came after %.2f s, want about %ld ms", what, r->seconds,
                 g_env.lock_wait_ms);
}

/*
 * pg-lockrow's flaw: a holder that dies between its insert and its delete leaves the row,
 * and nothing ever removes it. The row is written here by hand, as the dead holder left it;
 * every request for the goods then waits its bound and answers 503 lock_timeout, selling
 * nothing, however many come, until someone deletes the row; then the goods sells again.
 */
static void test_lockrow_dead_holder_wedges(void **state)
{
    (void)state;
    begin_case("lockrow_dead_holder_wedges");
    reset_goods(GOODS_LOCKROW_WEDGE, 10);
    sql_exec("INSERT INTO goods_locks (goods, owner) VALUES ($1, 'a holder that died, pid ' ||"
             " $2::text)",
             GOODS_LOCKROW_WEDGE, 4242);
    for (int i = 0; i < 2; i++)
        expect_lock_timeout_after_bound("pg-lockrow", GOODS_LOCKROW_WEDGE,
                                        "pg-lockrow deduct behind a dead holder's row");
    expect_stock(GOODS_LOCKROW_WEDGE, 10, 10, 0, 0, "while the dead holder's row stays");
    sql_exec("DELETE FROM goods_locks WHERE goods = $1 AND owner = 'a holder that died, pid ' ||"
             " $2::text",
             GOODS_LOCKROW_WEDGE, 4242);
    expect_deducted(deduct(g_env.stock_url, GOODS_LOCKROW_WEDGE, 1, "pg-lockrow", NULL),
                    GOODS_LOCKROW_WEDGE, 1, 9, "pg-lockrow", "once the row is deleted by hand");
}

/*
 * pg-lockrow-ttl fixes the wedge: the same dead holder's row, with an expiry that has passed,
 * is taken over by the next request, which sells at once. A row whose expiry is still ahead
 * holds the goods until then: a request waits for the expiry (well inside its bound) and
 * sells.
 */
static void test_lockrow_ttl_takes_over_an_expired_row(void **state)
{
    (void)state;
    begin_case("lockrow_ttl_takes_over_an_expired_row");
    reset_goods(GOODS_LOCKROW_TTL, 10);
    sql_exec("INSERT INTO goods_locks (goods, owner, locked_until) VALUES ($1, 'a holder that "
             "died', now() - $2::bigint * interval '1 millisecond')",
             GOODS_LOCKROW_TTL, 1000);
    http_reply *r = deduct(g_env.stock_url, GOODS_LOCKROW_TTL, 1, "pg-lockrow-ttl", NULL);
    printf("    pg-lockrow-ttl behind an expired row: %ld after %.2f s\n", r->status, r->seconds);
    expect_deducted(r, GOODS_LOCKROW_TTL, 1, 9, "pg-lockrow-ttl", "behind an expired row");
    if (r->seconds > 1.0)
        fail_msg("pg-lockrow-ttl behind an expired row: took %.2f s, want at once", r->seconds);

    long long ahead_ms = g_env.lock_wait_ms / 2;
    sql_exec("INSERT INTO goods_locks (goods, owner, locked_until) VALUES ($1, 'a holder that "
             "died', now() + $2::bigint * interval '1 millisecond')",
             GOODS_LOCKROW_TTL, ahead_ms);
    r = deduct(g_env.stock_url, GOODS_LOCKROW_TTL, 1, "pg-lockrow-ttl", NULL);
    printf("    pg-lockrow-ttl behind a row expiring in %lld ms: %ld after %.2f s\n", ahead_ms,
           r->status, r->seconds);
    expect_deducted(r, GOODS_LOCKROW_TTL, 1, 8, "pg-lockrow-ttl", "behind a row that expires");
    if (r->seconds < 0.8 * (double)ahead_ms / 1000.0)
        fail_msg("pg-lockrow-ttl: sold after %.2f s, before the row expired (%lld ms)", r->seconds,
                 ahead_ms);
    expect_stock(GOODS_LOCKROW_TTL, 10, 8, 2, 2, "after the two takeovers");
}

/* A connection of this test that holds a lock, as a stuck transaction of another client
 * would; the teardown closes it, which releases whatever it held. */
static PGconn *g_pg_holder;

static void pg_holder_exec(const char *sql, long long a)
{
    char text[24];
    const char *const values[1] = {text};

    snprintf(text, sizeof(text), "%lld", a);
    PGresult *res = PQexecParams(g_pg_holder, sql, a != 0 ? 1 : 0, NULL, values, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", PQresultErrorMessage(res));
        PQclear(res);
        fail_msg("%s: %s", sql, msg);
    }
    PQclear(res);
}

static int pg_holder_teardown(void **state)
{
    if (g_pg_holder != NULL) {
        PQfinish(g_pg_holder);
        g_pg_holder = NULL;
    }
    return case_teardown(state);
}

/*
 * The PostgreSQL rungs' own lock is bounded like a guard's: with the goods row locked by
 * another transaction (a stuck client's SELECT ... FOR UPDATE), pg-for-update waits
 * LOCK_WAIT_MS and answers 503 lock_timeout; with the goods' advisory lock held, so does
 * pg-advisory. Before, they waited until statement_timeout and answered "unavailable".
 * Nothing is sold meanwhile, and both sell once the other transaction ends.
 */
static void test_pg_rungs_lock_wait_bound(void **state)
{
    (void)state;
    begin_case("pg_rungs_lock_wait_bound");
    reset_goods(GOODS_PG_LOCK_WAIT, 10);
    char conninfo[256];
    snprintf(conninfo, sizeof(conninfo),
             "host=127.0.0.1 port=%s dbname=stock user=stock connect_timeout=5", g_env.pg_port);
    g_pg_holder = PQconnectdb(conninfo);
    if (PQstatus(g_pg_holder) != CONNECTION_OK)
        fail_msg("cannot connect with '%s': %s", conninfo, PQerrorMessage(g_pg_holder));
    pg_holder_exec("BEGIN", 0);
    pg_holder_exec("SELECT stock FROM goods WHERE id = $1 FOR UPDATE", GOODS_PG_LOCK_WAIT);
    pg_holder_exec("SELECT pg_advisory_xact_lock($1::bigint)", GOODS_PG_LOCK_WAIT);

    expect_lock_timeout_after_bound("pg-for-update", GOODS_PG_LOCK_WAIT,
                                    "pg-for-update with the row locked elsewhere");
    expect_lock_timeout_after_bound("pg-advisory", GOODS_PG_LOCK_WAIT,
                                    "pg-advisory with the advisory lock held elsewhere");
    expect_stock(GOODS_PG_LOCK_WAIT, 10, 10, 0, 0, "while the locks are held elsewhere");

    pg_holder_exec("ROLLBACK", 0);
    expect_deducted(deduct(g_env.stock_url, GOODS_PG_LOCK_WAIT, 1, "pg-for-update", NULL),
                    GOODS_PG_LOCK_WAIT, 1, 9, "pg-for-update", "once the row is free");
    expect_deducted(deduct(g_env.stock_url, GOODS_PG_LOCK_WAIT, 1, "pg-advisory", NULL),
                    GOODS_PG_LOCK_WAIT, 1, 8, "pg-advisory", "once the advisory lock is free");
}

/* ------------------------------------------------------------------------------------------
 * Case: admin without its token
 * ------------------------------------------------------------------------------------------ */

static void test_admin_unauthorized(void **state)
{
    (void)state;
    begin_case("admin_unauthorized");
    reset_goods(GOODS_AUTH, 5);
    expect_deducted(deduct(g_env.stock_url, GOODS_AUTH, 1, "redis", NULL), GOODS_AUTH, 1, 4,
                    "redis", "deduct before the refused resets");

    char wrong[340], longer[340], basic[340], bare[340];
    snprintf(wrong, sizeof(wrong), "Authorization: Bearer not-%s", g_env.admin_token);
    snprintf(longer, sizeof(longer), "%sx", g_env.auth_header);
    snprintf(basic, sizeof(basic), "Authorization: Basic %s", g_env.admin_token);
    snprintf(bare, sizeof(bare), "Authorization: %s", g_env.admin_token);
    const char *headers[] = {
        NULL, wrong, longer, basic, bare, "Authorization: Bearer", "Authorization: Bearer "};
    const char *labels[] = {
        "no Authorization",         "a wrong token", "the token plus one character",
        "Basic instead of Bearer",  "no scheme",     "Bearer and no token",
        "Bearer and an empty token"};
    for (size_t i = 0; i < sizeof(headers) / sizeof(headers[0]); i++) {
        char what[96];
        snprintf(what, sizeof(what), "reset with %s", labels[i]);
        http_request rq = {.method = "POST",
                           .base = g_env.stock_url,
                           .path = "/api/admin/reset",
                           .body = "{\"goods_id\":3901,\"stock\":77}",
                           .headers = {headers[i]}};
        expect_error(call(&rq), 401, "unauthorized", what);
        expect_stock(GOODS_AUTH, 5, 4, 1, 1, what); /* nothing reset, the order kept */
    }
    /* Directly to a replica too: the token is the replica's check, not nginx's. */
    http_request rq = {.method = "POST",
                       .base = g_env.replicas[0],
                       .path = "/api/admin/reset",
                       .body = "{\"goods_id\":3901,\"stock\":77}"};
    expect_error(call(&rq), 401, "unauthorized", "reset without a token, on a replica");
    expect_stock(GOODS_AUTH, 5, 4, 1, 1, "after the refused resets");
}

/* ------------------------------------------------------------------------------------------
 * Cases: lock_lost, a holder paused past its lease
 *
 * The slow replica (SLOW_REPLICA_URL, not behind nginx) sleeps BUSINESS_DELAY_MS between its
 * read of the stock and its write, longer than its lock's lease (LOCK_LEASE_MS): the pause of
 * a garbage collector or a stalled machine, during which the lease can run out. Each case
 * sends it one redis-mode deduct from a thread of its own, waits until that request holds
 * lock:goods:N and has read the stock (its read claimed the goods row for its fencing token:
 * db_stock_claim), then acts while it sleeps:
 *   - takeover: the lock vanishes (deleted, as an expiry would) and another client takes it
 *     with a newer token: its claim waits for the sleeper's transaction; the sleeper's
 *     watchdog finds the lock gone, the last look before the commit refuses its sale, and
 *     the new holder then sells from the true stock;
 *   - fence: the database has seen a newer token of the lock before the holder reads, while
 *     Redis and the holder's watchdog see nothing wrong: the claim alone refuses the holder;
 *   - watchdog: the lock vanishes and nobody takes it: the last look before the commit (the
 *     watchdog found the lock gone) alone refuses the sale.
 * Every refused holder must answer 503 lock_lost and sell nothing.
 *
 * Then the two delayed replicas (DELAYED_REPLICA_URLS, not behind nginx: BUSINESS_DELAY_MS
 * but the default 30 s watchdog lease, so their watchdog does not look during the pause)
 * play the case the token in the write alone could not cover: a holder whose lock vanished
 * has read; a new holder reads before the first one writes; the first one writes and
 * commits (it has not noticed anything); the new one writes and commits. Both sold from one
 * read: one unit sold twice. With the claim, the new holder's read waits for the first one's
 * commit and reads its result, in both orders of the writes.
 * ------------------------------------------------------------------------------------------ */

/* Fails the case when the harness gave no slow replica, or one these cases cannot use. */
static void need_slow_replica(void)
{
    if (g_env.slow_url == NULL)
        fail_msg("SLOW_REPLICA_URL is not set: tests/integration.sh starts a slow replica for "
                 "the lock_lost cases (did scripts/stack.sh replica-start-extra fail?)");
    /* The pause must outlast the lease, and leave room after the wait for the holder. */
    if (g_env.slow_delay_ms <= g_env.slow_lease_ms ||
        g_env.slow_delay_ms < (long)(1000 * SLOW_HOLD_WAIT_S) + 400)
        fail_msg("the slow replica's pause (SLOW_REPLICA_DELAY_MS %ld) must outlast its lease "
                 "(SLOW_REPLICA_LEASE_MS %ld) and be at least %.0f ms",
                 g_env.slow_delay_ms, g_env.slow_lease_ms, 1000 * SLOW_HOLD_WAIT_S + 400);
}

/* The value of one series of a replica's /metrics, named as the exposition writes it
 * (labels included). Fails the case when the series is missing. */
static double metric_value(const char *base, const char *series)
{
    char what[160];
    size_t n = strlen(series);

    snprintf(what, sizeof(what), "GET %s/metrics", base);
    http_reply *r = get(base, "/metrics");
    if (r->status != 200)
        fail_msg("%s: status %ld", what, r->status);
    for (const char *line = r->body; line != NULL && *line != '\0';) {
        if (strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    fail_msg("%s: no series %s", what, series);
    return 0; /* not reached */
}

/* The slow replica's counters that tell how a sale was refused. */
typedef struct lost_counters {
    double answered; /* stock_deductions_total{mode="redis",outcome="lock_lost"} */
    double watchdog; /* stock_lock_lost_total: holdings the watchdog found gone */
    double renewals; /* stock_lock_renewals_total */
} lost_counters;

static lost_counters lost_counters_read(void)
{
    lost_counters c;
    c.answered = metric_value(g_env.slow_url,
                              "stock_deductions_total{mode=\"redis\",outcome=\"lock_lost\"}");
    c.watchdog = metric_value(g_env.slow_url, "stock_lock_lost_total");
    c.renewals = metric_value(g_env.slow_url, "stock_lock_renewals_total");
    return c;
}

/*
 * The detail the slow replica logged with its last lock_lost answer (its deduct_failed
 * line), into out; "" when there is none. It names the check that refused the sale: the
 * fence in the UPDATE ("fencing token ... is older than the stored one") or the last look
 * before the commit ("the lock's lease was lost before the commit"). For the report only:
 * the cases assert on what the counters and the books show.
 */
static void slow_log_last_lost(char *out, size_t len)
{
    char line[1024];
    FILE *f;

    out[0] = '\0';
    if (g_env.slow_log == NULL || (f = fopen(g_env.slow_log, "r")) == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *detail = strstr(line, "detail=");
        if (strstr(line, "outcome=lock_lost") != NULL && detail != NULL) {
            snprintf(out, len, "%s", detail + strlen("detail="));
            out[strcspn(out, "\n")] = '\0';
        }
    }
    fclose(f);
}

/* One redis-mode deduct of 1 sent to the slow replica by a thread of its own, so that the
 * case can act while the request sleeps in the replica. The thread never asserts: the case
 * joins it and asserts on the reply. Owned by the case, and its release joins the thread
 * first, so a case that failed midway never frees what the thread still uses. */
typedef struct slow_shot {
    const char *base; /* the replica it is sent to */
    long delay_ms;    /* that replica's BUSINESS_DELAY_MS */
    char body[160];
    http_reply reply;
    int rc; /* http_do's */
    atomic_bool done;
    bool joined;
    pthread_t thread;
    double start; /* now_s() when it was sent */
} slow_shot;

static void *slow_shot_thread(void *arg)
{
    slow_shot *s = arg;
    CURL *h = curl_easy_init();
    http_request rq = {.method = "POST", .base = s->base, .path = "/api/deduct", .body = s->body};

    if (h == NULL) {
        snprintf(s->reply.error, sizeof(s->reply.error), "curl_easy_init failed");
        s->rc = -1;
    } else {
        s->rc = http_do(h, &rq, &s->reply);
        curl_easy_cleanup(h);
    }
    atomic_store(&s->done, true);
    return NULL;
}

static void slow_shot_release(void *arg)
{
    slow_shot *s = arg;
    if (!s->joined)
        pthread_join(s->thread, NULL);
    free(s->reply.body);
    free(s);
}

/* Sends the deduct to `base`, a replica that pauses delay_ms inside its section. */
static slow_shot *shot_start(const char *base, long delay_ms, long long goods_id)
{
    slow_shot *s = calloc(1, sizeof(*s));

    if (s == NULL)
        fail_msg("out of memory");
    s->base = base;
    s->delay_ms = delay_ms;
    atomic_init(&s->done, false);
    deduct_body(s->body, sizeof(s->body), goods_id, 1, "redis");
    s->start = now_s();
    if (pthread_create(&s->thread, NULL, slow_shot_thread, s) != 0) {
        free(s);
        fail_msg("pthread_create failed");
    }
    own(s, slow_shot_release);
    return s;
}

static slow_shot *slow_shot_start(long long goods_id)
{
    return shot_start(g_env.slow_url, g_env.slow_delay_ms, goods_id);
}

/* Waits for the slow request's answer; fails the case when none came. */
static http_reply *slow_shot_join(slow_shot *s)
{
    pthread_join(s->thread, NULL);
    s->joined = true;
    if (s->rc != 0)
        fail_msg("deduct on %s: no answer: %s", s->base, s->reply.error);
    printf("    %s answered %ld after %.2f s: %.200s\n", s->base, s->reply.status, s->reply.seconds,
           s->reply.body);
    return &s->reply;
}

/* Fails the case when the slow request has answered already: what the case did was meant to
 * happen while it slept. */
static void expect_still_paused(const slow_shot *s, const char *what)
{
    if (atomic_load(&s->done))
        fail_msg("the slow replica answered before %s (%.2f s after its request): its pause of "
                 "%ld ms did not cover it",
                 what, now_s() - s->start, s->delay_ms);
}

/* The start of the claim's text (DB__STOCK_CLAIM), as pg_stat_activity shows a session's last
 * statement. */
#define CLAIM_SQL_PREFIX "UPDATE goods SET fence = $2"

/*
 * Waits until the slow request holds `key` (the hash exists) and has read the stock (its
 * session sits in its transaction after the claim, seen in pg_stat_activity), at most
 * SLOW_HOLD_WAIT_S from its start. Returns the holding's fencing token: the lock's counter
 * (lock/lock.h: "<name>:fence"), which nobody else moves while the lock is held.
 */
static long long wait_slow_holder(const slow_shot *s, const char *key)
{
    char reply[64], fence_key[96], *end;
    long long token;

    for (;;) {
        expect_still_paused(s, "its lock was seen");
        if (redis_cli_out(reply, sizeof(reply), "EXISTS", key, NULL, NULL) != 0)
            fail_msg("redis-cli EXISTS %s failed", key);
        if (strcmp(reply, "1") == 0)
            break;
        if (now_s() - s->start > SLOW_HOLD_WAIT_S)
            fail_msg("%s was not held within %.1f s of the slow request", key, SLOW_HOLD_WAIT_S);
        usleep(5 * 1000);
    }
    snprintf(fence_key, sizeof(fence_key), "%s:fence", key);
    if (redis_cli_out(reply, sizeof(reply), "GET", fence_key, NULL, NULL) != 0)
        fail_msg("redis-cli GET %s failed", fence_key);
    token = strtoll(reply, &end, 10);
    if (reply[0] == '\0' || *end != '\0' || token <= 0)
        fail_msg("GET %s answered '%s', not a fencing token", fence_key, reply);

    for (;;) {
        expect_still_paused(s, "its read was seen");
        if (sql_value("SELECT count(*) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND state = 'idle in transaction'"
                      " AND query LIKE '" CLAIM_SQL_PREFIX "%'",
                      0, 0) > 0)
            break;
        if (now_s() - s->start > SLOW_HOLD_WAIT_S)
            fail_msg("the slow request was not seen reading the stock within %.1f s",
                     SLOW_HOLD_WAIT_S);
        usleep(5 * 1000);
    }
    printf("    %s holds %s with token %lld and has read the stock (%.3f s in); it now sleeps "
           "%ld ms\n",
           s->base, key, token, now_s() - s->start, s->delay_ms);
    return token;
}

/* Waits, at most SLOW_HOLD_WAIT_S, until a claim waits for the goods row's lock: a second
 * holder's read queued behind the first holder's transaction. */
static void wait_claim_queued(const slow_shot *first, const char *what)
{
    double start = now_s();

    for (;;) {
        expect_still_paused(first, what);
        if (sql_value("SELECT count(*) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                      " AND query LIKE '" CLAIM_SQL_PREFIX "%'",
                      0, 0) > 0)
            break;
        if (now_s() - start > SLOW_HOLD_WAIT_S)
            fail_msg("%s: no claim was seen waiting for the row within %.1f s", what,
                     SLOW_HOLD_WAIT_S);
        usleep(5 * 1000);
    }
    printf("    %s: its read waits for the first holder's transaction\n", what);
}

/* After a lock_lost: prints how the slow replica's counters moved and the check its log
 * names, asserts that one more lock_lost answer was counted, and returns the counters. */
static lost_counters report_lost(const lost_counters *before, const char *label)
{
    lost_counters after = lost_counters_read();
    char detail[300];

    slow_log_last_lost(detail, sizeof(detail));
    printf("    %s: lock_lost answers +%.0f, watchdog losses +%.0f, renewals +%.0f; the "
           "replica logged: %s\n",
           label, after.answered - before->answered, after.watchdog - before->watchdog,
           after.renewals - before->renewals, detail[0] ? detail : "(no lock_lost line found)");
    if (strstr(detail, "fencing token") != NULL)
        printf("    %s: refused by the claim (a newer token on the row)\n", label);
    else if (strstr(detail, "lease was lost") != NULL)
        printf("    %s: refused by the last look before the commit (lock_is_held)\n", label);
    if (after.answered - before->answered != 1)
        fail_msg("%s: stock_deductions_total{mode=\"redis\",outcome=\"lock_lost\"} on the slow "
                 "replica went from %.0f to %.0f, want one more",
                 label, before->answered, after.answered);
    return after;
}

/*
 * The start every lost-lock case shares: goods g reset to 10, one redis-mode deduct sent to
 * `base` (a replica that pauses delay_ms inside its section), and, once it holds the lock
 * and has read, its key deleted, as an expiry or a Redis that lost it would. Returns the
 * request; *token is the holding's fencing token.
 */
static slow_shot *lose_lock_mid_section(const char *base, long delay_ms, long long g,
                                        long long *token)
{
    char key[64];

    snprintf(key, sizeof(key), "lock:goods:%lld", g);
    reset_goods(g, 10);
    slow_shot *s = shot_start(base, delay_ms, g);
    *token = wait_slow_holder(s, key);
    if (redis_cli("DEL", key, NULL, NULL) != 0)
        fail_msg("redis-cli DEL %s failed", key);
    printf("    %s deleted under the holder (token %lld)\n", key, *token);
    return s;
}

/* The takeover: Kleppmann's scenario, end to end. */
static void test_lock_lost_takeover(void **state)
{
    const long long g = GOODS_LOST_TAKEOVER;
    long long token;

    (void)state;
    begin_case("lock_lost_takeover");
    need_slow_replica();
    lost_counters before = lost_counters_read();
    /* The lease runs out under the sleeping holder: its key is gone, as after an expiry. */
    slow_shot *s = lose_lock_mid_section(g_env.slow_url, g_env.slow_delay_ms, g, &token);

    /* Another client takes the lock, with a newer token; its read waits for the sleeper's
     * transaction (a replica behind nginx: it does not pause). */
    slow_shot *next = shot_start(g_env.stock_url, 0, g);
    wait_claim_queued(s, "the new holder");

    /* The sleeper wakes and would write 10 - 1 = 9: its watchdog found the lock gone, and the
     * last look before the commit refuses the sale. */
    expect_error(slow_shot_join(s), 503, "lock_lost", "the paused holder's deduct");
    report_lost(&before, "takeover");
    expect_deducted(slow_shot_join(next), g, 1, 9, "redis", "the new holder's deduct");
    long long fence = sql_value("SELECT fence FROM goods WHERE id = $1", 1, g);
    printf("    the new holder sold with token %lld (the sleeper's is %lld)\n", fence, token);
    if (fence <= token)
        fail_msg("the new holder's sale stored fence %lld, not above the sleeper's %lld", fence,
                 token);
    expect_stock(g, 10, 9, 1, 1, "after the takeover: one sale, the new holder's");
    if (stock_get(g).oversold != 0)
        fail_msg("after the takeover: oversold is not 0");
}

/* The claim alone: the database has seen a newer token than the holder's, which the holder
 * (and its watchdog, and Redis) know nothing of. */
static void test_lock_lost_fence(void **state)
{
    const long long g = GOODS_LOST_FENCE;
    char key[64], fence_key[96], reply[64];

    (void)state;
    begin_case("lock_lost_fence");
    need_slow_replica();
    snprintf(key, sizeof(key), "lock:goods:%lld", g);
    snprintf(fence_key, sizeof(fence_key), "%s:fence", key);
    /* One sale makes the lock's counter exist; the reset keeps the row's token. */
    reset_goods(g, 10);
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, 9, "redis",
                    "a first sale, to start the lock's counter");
    reset_goods(g, 10);
    if (redis_cli_out(reply, sizeof(reply), "GET", fence_key, NULL, NULL) != 0)
        fail_msg("redis-cli GET %s failed", fence_key);
    long long counter = strtoll(reply, NULL, 10);
    if (counter <= 0)
        fail_msg("GET %s answered '%s', not a fencing token", fence_key, reply);
    /* A newer holder's claim, as it would be stamped: the token after the next one. The next
     * holder (the slow replica's request) gets counter + 1, which is older. */
    sql_exec("UPDATE goods SET fence = $2 WHERE id = $1", g, counter + 2);
    printf("    goods %lld stamped with fence %lld; the lock's counter is at %lld\n", g,
           counter + 2, counter);
    lost_counters before = lost_counters_read();

    slow_shot *s = slow_shot_start(g);
    expect_error(slow_shot_join(s), 503, "lock_lost", "the fenced holder's deduct");
    lost_counters after = report_lost(&before, "fence");
    if (after.watchdog != before.watchdog)
        fail_msg("the watchdog counted %.0f lost holdings: this case needs it to see none",
                 after.watchdog - before.watchdog);
    if (s->reply.seconds * 1000 >= g_env.slow_delay_ms)
        fail_msg("the fenced holder answered after %.2f s: it was refused after its pause, not "
                 "at its read",
                 s->reply.seconds);
    expect_stock(g, 10, 10, 0, 0, "after the refused claim: nothing sold");

    /* The next holder gets exactly the stamped token, which the claim lets through. */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, 9, "redis",
                    "the next holder's deduct");
    long long fence = sql_value("SELECT fence FROM goods WHERE id = $1", 1, g);
    if (fence != counter + 2)
        fail_msg("the next holder wrote fence %lld, want %lld (the stamped token)", fence,
                 counter + 2);
    expect_stock(g, 10, 9, 1, 1, "after the next holder's sale");
}

/* The last look before the commit alone: the lock is gone, nobody newer wrote. */
static void test_lock_lost_watchdog(void **state)
{
    const long long g = GOODS_LOST_WATCHDOG;
    long long token;

    (void)state;
    begin_case("lock_lost_watchdog");
    need_slow_replica();
    lost_counters before = lost_counters_read();
    slow_shot *s = lose_lock_mid_section(g_env.slow_url, g_env.slow_delay_ms, g, &token);

    expect_error(slow_shot_join(s), 503, "lock_lost", "the holder whose lock vanished");
    lost_counters after = report_lost(&before, "watchdog");
    if (after.watchdog <= before.watchdog)
        fail_msg("the watchdog counted no lost holding, yet the sale was refused");
    /* Nothing newer than the holder's own token reached the row: the fence could not refuse. */
    long long fence = sql_value("SELECT fence FROM goods WHERE id = $1", 1, g);
    if (fence >= token)
        fail_msg("goods %lld holds fence %lld, not below the holder's %lld: the rolled-back "
                 "write left its token, or someone else wrote",
                 g, fence, token);
    expect_stock(g, 10, 10, 0, 0, "after the refused commit: nothing sold");

    /* The lock is free again (the holder's unlock found nothing of its own to delete). */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, 9, "redis",
                    "a deduct after the lost holding");
    expect_stock(g, 10, 9, 1, 1, "after the next sale");
}

/*
 * The five steps: a holder reads; its lock vanishes; a new holder takes the lock and reads
 * before the first one writes; the first one writes and commits, unaware; the new one writes
 * and commits. `second` is where the new holder's request goes: a delayed replica (its write
 * comes after the first holder's: the five steps as told) or a replica behind nginx (its
 * write would come first: the mirror). Either way the new holder's read must wait for the
 * first holder's commit and read what it left: two sales, two units, oversold 0.
 */
static void five_steps(long long g, const char *second, long second_delay_ms, const char *label)
{
    long long token;

    if (g_env.delayed_urls[0] == NULL || g_env.delayed_urls[1] == NULL)
        fail_msg("DELAYED_REPLICA_URLS is not set: tests/integration.sh starts two delayed "
                 "replicas for these cases");
    slow_shot *first =
        lose_lock_mid_section(g_env.delayed_urls[0], g_env.delayed_delay_ms, g, &token);

    slow_shot *next = shot_start(second, second_delay_ms, g);
    wait_claim_queued(first, label);

    /* The delayed replicas are not behind nginx: their instance is none of the replicas'. */
    json_t *j = expect_json(slow_shot_join(first), 200, "the first holder's deduct");
    expect_field_int(j, "remaining", 9, "the first holder's deduct");
    j = expect_json(slow_shot_join(next), 200, "the second holder's deduct");
    expect_field_int(j, "remaining", 8, "the second holder's deduct, after the first's commit");
    expect_stock(g, 10, 8, 2, 2, "after both holders sold: two units");
    if (stock_get(g).oversold != 0)
        fail_msg("%s: oversold is not 0", label);
}

static void test_five_steps(void **state)
{
    (void)state;
    begin_case("five_steps");
    five_steps(GOODS_FIVE_STEPS, g_env.delayed_urls[1], g_env.delayed_delay_ms, "the five steps");
}

static void test_five_steps_mirror(void **state)
{
    (void)state;
    begin_case("five_steps_mirror");
    five_steps(GOODS_FIVE_STEPS_MIRROR, g_env.stock_url, 0, "the mirror");
}

/* ------------------------------------------------------------------------------------------
 * Case: PostgreSQL frozen under load, and thawed
 *
 * A database host that stops answering (a partition, a frozen VM: here SIGSTOP of the
 * postmaster and every backend) refuses nothing: without a client-side bound a request would
 * wait for TCP to give up, minutes later, holding its Redis lock (renewed by the watchdog)
 * all the while. The replicas bound every round trip by DB_REPLY_TIMEOUT_MS (the default,
 * 6000), so every request answers within LOCK_WAIT_MS + DB_WAIT_MS + the connect bound +
 * DB_REPLY_TIMEOUT_MS, the lock is given back, and nothing is sold without a 200, but for a
 * commit whose answer was lost, which says so (commit_unknown).
 * ------------------------------------------------------------------------------------------ */

/* Frozen for longer than a request's database bound (DB_REPLY_TIMEOUT_MS, 6 s); an answer
 * comes within 2 s lock wait + 2 s pool wait + 2 s connect + 6 s reply, plus a margin. */
#define PG_FROZEN_FOR_S 7.0
#define PG_FROZEN_ANSWER_S 15.0

static bool g_pg_frozen; /* this process froze PostgreSQL and has not thawed it yet */

static int pg_frozen_teardown(void **state)
{
    if (g_pg_frozen) {
        if (stack_script("pg-thaw") != 0)
            fprintf(stderr, "scripts/stack.sh pg-thaw failed: PostgreSQL stays frozen\n");
        g_pg_frozen = false;
    }
    return case_teardown(state);
}

static void *load_run_thread(void *arg)
{
    load_run(arg);
    return NULL;
}

static void test_postgres_frozen(void **state)
{
    const long long g = GOODS_PG_FROZEN;
    pthread_t runner;

    (void)state;
    begin_case("postgres_frozen");
    reset_goods(g, 5000);
    load_plan *p = load_plan_new("frozen", g_env.stock_url, g, "redis", 100000, 16);
    /* The load runs until 1.5 s after the thaw, however long freezing takes on a busy
     * machine; this bound is a backstop. */
    atomic_store(&p->until, now_s() + 120);
    p->timeout_ms = (long)(1000 * (PG_FROZEN_ANSWER_S + 10));
    if (pthread_create(&runner, NULL, load_run_thread, p) != 0)
        fail_msg("pthread_create failed");
    usleep(500 * 1000);
    g_pg_frozen = true; /* set first: a half-done freeze is undone by the teardown too */
    int rc = stack_script("pg-freeze");
    if (rc == 0)
        usleep((useconds_t)(PG_FROZEN_FOR_S * 1e6));
    if (stack_script("pg-thaw") == 0)
        g_pg_frozen = false;
    atomic_store(&p->until, now_s() + 1.5);
    pthread_join(runner, NULL);
    if (rc != 0)
        fail_msg("scripts/stack.sh pg-freeze failed");

    const load_counts *c = &p->counts;
    int n = atomic_load(&p->n_timed);
    double longest = n > 0 ? p->latency[n - 1] : 0; /* load_run sorted them */
    printf("    frozen: %d answers, %d commit_unknown, the longest %.2f s\n", n, c->commit_unknown,
           longest);
    if (c->by_status[0] != 0)
        fail_msg("%d requests got no answer at all: %s", c->by_status[0], c->note);
    if (c->by_status[200] + c->by_status[409] + c->by_status[503] != n)
        fail_msg("answers other than 200, 409 and 503: %s", c->note);
    if (c->by_status[503] == 0)
        fail_msg("no request answered 503 while PostgreSQL was frozen for %.0f s", PG_FROZEN_FOR_S);
    if (longest > PG_FROZEN_ANSWER_S)
        fail_msg("an answer took %.2f s, past the bound of %.0f s", longest, PG_FROZEN_ANSWER_S);

    /* The books settle; every unit sold had a 200, or a commit_unknown that said it might. */
    stock_view r = stock_settled(g);
    printf("    frozen: stock %lld, sold %lld in %lld orders, oversold %lld; 200s %d\n", r.stock,
           r.sold, r.orders, r.oversold, c->by_status[200]);
    if (r.oversold != 0)
        fail_msg("oversold %lld after the freeze", r.oversold);
    if (r.orders < c->by_status[200] || r.orders > c->by_status[200] + c->commit_unknown)
        fail_msg("%lld orders for %d answers 200 and %d commit_unknown: a sale without a 200",
                 r.orders, c->by_status[200], c->commit_unknown);

    /* Recovered, and the lock was given back or expired: a sale goes through. */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, -1, "redis",
                    "a deduct after the thaw");
}

/* ------------------------------------------------------------------------------------------
 * Case: Redis down, and back
 * ------------------------------------------------------------------------------------------ */

static bool g_redis_stopped; /* this process stopped Redis and has not restarted it yet */

static int redis_case_teardown(void **state)
{
    if (g_redis_stopped) {
        if (stack_script("redis-start") != 0)
            fprintf(stderr, "scripts/stack.sh redis-start failed: Redis stays down\n");
        g_redis_stopped = false;
    }
    return case_teardown(state);
}

/* Polls /readyz on every replica until all say `status`; returns the seconds it took, or a
 * negative number when limit_s ran out. */
static double wait_ready(long status, double limit_s)
{
    double start = now_s();
    for (;;) {
        size_t ready = 0;
        for (size_t i = 0; i < g_env.n_replicas; i++) {
            http_reply r;
            http_request rq = {
                .method = "GET", .base = g_env.replicas[i], .path = "/readyz", .timeout_ms = 3000};
            if (http_do(g_curl, &rq, &r) == 0 && r.status == status)
                ready++;
            free(r.body);
        }
        if (ready == g_env.n_replicas)
            return now_s() - start;
        if (now_s() - start > limit_s)
            return -1.0;
        usleep(100 * 1000);
    }
}

static void test_redis_down(void **state)
{
    (void)state;
    begin_case("redis_down");
    reset_goods(GOODS_DOWN, 100);
    expect_deducted(deduct(g_env.stock_url, GOODS_DOWN, 1, "redis", NULL), GOODS_DOWN, 1, 99,
                    "redis", "redis-mode deduct before Redis stops");

    g_redis_stopped = true; /* set first: a half-done stop is undone by the teardown too */
    if (stack_script("redis-stop") != 0)
        fail_msg("scripts/stack.sh redis-stop failed");

    /* Every replica, and nginx: 503 unavailable, quickly, and nothing sold. */
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "redis-mode deduct with Redis down, via %s", base);
        http_reply *r = deduct(base, GOODS_DOWN, 1, "redis", NULL);
        printf("    %s: %ld in %.3f s\n", what, r->status, r->seconds);
        json_t *j = expect_error(r, 503, "unavailable", what);
        (void)field_str(j, "detail", what);
        if (r->seconds >= DOWN_ANSWER_S)
            fail_msg("%s: answered after %.2f s, want under %.1f s", what, r->seconds,
                     DOWN_ANSWER_S);
    }
    expect_stock(GOODS_DOWN, 100, 99, 1, 1, "after the 503s");

    /* Not ready, but alive. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        char what[160];
        snprintf(what, sizeof(what), "GET /readyz on %s with Redis down", g_env.replicas[i]);
        expect_json(get(g_env.replicas[i], "/readyz"), 503, what);
        snprintf(what, sizeof(what), "GET /healthz on %s with Redis down", g_env.replicas[i]);
        expect_json(get(g_env.replicas[i], "/healthz"), 200, what);
    }

    /* none needs no Redis: it still sells, directly and through nginx. */
    long long stock = 99, sold = 1;
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "none-mode deduct with Redis down, via %s", base);
        expect_deducted(deduct(base, GOODS_DOWN, 1, "none", NULL), GOODS_DOWN, 1, stock - 1, "none",
                        what);
        stock--;
        sold++;
    }

    if (stack_script("redis-start") != 0)
        fail_msg("scripts/stack.sh redis-start failed");
    g_redis_stopped = false;
    double took = wait_ready(200, READY_WAIT_S);
    printf("    every replica ready again %.2f s after redis-start\n", took);
    if (took < 0)
        fail_msg("the replicas' /readyz did not all return to 200 within %.0f s of redis-start",
                 READY_WAIT_S);

    /* redis mode works again on every replica, without any restart. */
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        char what[160];
        snprintf(what, sizeof(what), "redis-mode deduct after Redis is back, via %s", base);
        expect_deducted(deduct(base, GOODS_DOWN, 1, "redis", NULL), GOODS_DOWN, 1, stock - 1,
                        "redis", what);
        stock--;
        sold++;
    }
    expect_stock(GOODS_DOWN, 100, stock, sold, sold, "after Redis came back");
}

/* ------------------------------------------------------------------------------------------
 * Case: PostgreSQL down, and back
 * ------------------------------------------------------------------------------------------ */

static bool g_pg_stopped; /* this process stopped PostgreSQL and has not restarted it yet */

static int pg_case_teardown(void **state)
{
    if (g_pg_stopped) {
        if (stack_script("pg-start") != 0)
            fprintf(stderr, "scripts/stack.sh pg-start failed: PostgreSQL stays down\n");
        g_pg_stopped = false;
    }
    return case_teardown(state);
}

/* Asserts a 503 unavailable whose detail names PostgreSQL. */
static void expect_pg_unavailable(const http_reply *r, const char *what)
{
    json_t *j = expect_error(r, 503, "unavailable", what);
    const char *detail = field_str(j, "detail", what);
    if (strstr(detail, "postgresql") == NULL)
        fail_msg("%s: the detail does not name postgresql: %s", what, detail);
}

static void test_postgres_down(void **state)
{
    const char *modes[] = {"none", "local", "redis"};
    const long long g = GOODS_PG_DOWN;
    char what[200], path[64], body[96], key[64];

    (void)state;
    begin_case("postgres_down");
    reset_goods(g, 100);
    /* A sale on every replica first, so each pool holds sessions the stop will cut. */
    long long stock = 100, sold = 0;
    for (size_t i = 0; i < g_env.n_replicas; i++, stock--, sold++) {
        snprintf(what, sizeof(what), "deduct before PostgreSQL stops, via %s", g_env.replicas[i]);
        expect_deducted(deduct(g_env.replicas[i], g, 1, "redis", NULL), g, 1, stock - 1, "redis",
                        what);
    }

    g_pg_stopped = true; /* set first: a half-done stop is undone by the teardown too */
    if (stack_script("pg-stop") != 0)
        fail_msg("scripts/stack.sh pg-stop failed");

    /* Every mode, on every replica and through nginx: 503 unavailable naming PostgreSQL,
     * quickly. */
    double slowest = 0;
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        for (size_t m = 0; m < 3; m++) {
            snprintf(what, sizeof(what), "%s-mode deduct with PostgreSQL down, via %s", modes[m],
                     base);
            http_reply *r = deduct(base, g, 1, modes[m], NULL);
            printf("    %s: %ld in %.3f s\n", what, r->status, r->seconds);
            expect_pg_unavailable(r, what);
            if (r->seconds >= PG_DOWN_ANSWER_S)
                fail_msg("%s: answered after %.2f s, want under %.1f s", what, r->seconds,
                         PG_DOWN_ANSWER_S);
            if (r->seconds > slowest)
                slowest = r->seconds;
        }
    }
    printf("    slowest 503 with PostgreSQL down: %.3f s\n", slowest);
    /* The redis-mode requests took the lock and gave it back, though their sale failed. */
    snprintf(key, sizeof(key), "lock:goods:%lld", g);
    char reply[16];
    if (redis_cli_out(reply, sizeof(reply), "EXISTS", key, NULL, NULL) != 0 ||
        strcmp(reply, "0") != 0)
        fail_msg("%s is still held after the failed redis-mode deducts (EXISTS says '%s')", key,
                 reply);

    /* The other endpoints that need the database: 503 as well. */
    snprintf(path, sizeof(path), "/api/stock/%lld", g);
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        snprintf(what, sizeof(what), "GET %s with PostgreSQL down, via %s", path, base);
        expect_pg_unavailable(get(base, path), what);
    }
    snprintf(body, sizeof(body), "{\"goods_id\":%lld,\"stock\":5}", g);
    http_request reset = {.method = "POST",
                          .base = g_env.stock_url,
                          .path = "/api/admin/reset",
                          .body = body,
                          .headers = {g_env.auth_header}};
    expect_pg_unavailable(call(&reset), "admin reset with PostgreSQL down");

    /* Not ready, but alive. */
    for (size_t i = 0; i < g_env.n_replicas; i++) {
        snprintf(what, sizeof(what), "GET /readyz on %s with PostgreSQL down", g_env.replicas[i]);
        expect_pg_unavailable(get(g_env.replicas[i], "/readyz"), what);
        snprintf(what, sizeof(what), "GET /healthz on %s with PostgreSQL down", g_env.replicas[i]);
        expect_json(get(g_env.replicas[i], "/healthz"), 200, what);
    }

    if (stack_script("pg-start") != 0)
        fail_msg("scripts/stack.sh pg-start failed");
    g_pg_stopped = false;
    double took = wait_ready(200, PG_READY_WAIT_S);
    printf("    every replica ready again %.2f s after pg-start\n", took);
    if (took < 0)
        fail_msg("the replicas' /readyz did not all return to 200 within %.0f s of pg-start",
                 PG_READY_WAIT_S);

    /* Every mode sells again, on every replica, with no restart; the outage sold nothing and
     * the reset refused during it changed nothing. */
    for (size_t i = 0; i <= g_env.n_replicas; i++) {
        const char *base = i == 0 ? g_env.stock_url : g_env.replicas[i - 1];
        for (size_t m = 0; m < 3; m++, stock--, sold++) {
            snprintf(what, sizeof(what), "%s-mode deduct after PostgreSQL is back, via %s",
                     modes[m], base);
            expect_deducted(deduct(base, g, 1, modes[m], NULL), g, 1, stock - 1, modes[m], what);
        }
    }
    expect_stock(g, 100, stock, sold, sold, "after PostgreSQL came back");
}

/* ------------------------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------------------------ */

/* Reads and checks the environment; on any problem, g_env.problem says what. */
static void env_load(void)
{
    const char *urls = getenv("REPLICA_URLS");
    const char *wait = getenv("LOCK_WAIT_MS");
    const char *required[] = {"STOCK_URL",  "REPLICA_URLS", "ADMIN_TOKEN",
                              "REDIS_PORT", "PG_PORT",      "RUN_DIR"};

    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        const char *v = getenv(required[i]);
        if (v == NULL || v[0] == '\0') {
            snprintf(g_env.problem, sizeof(g_env.problem),
                     "%s is not set (tests/integration.sh sets STOCK_URL, REPLICA_URLS, "
                     "ADMIN_TOKEN, REDIS_PORT, PG_PORT, RUN_DIR and the other ports "
                     "scripts/stack.sh needs)",
                     required[i]);
            return;
        }
    }
    g_env.stock_url = getenv("STOCK_URL");
    g_env.admin_token = getenv("ADMIN_TOKEN");
    g_env.redis_port = getenv("REDIS_PORT");
    g_env.pg_port = getenv("PG_PORT");
    if (strspn(g_env.redis_port, "0123456789") != strlen(g_env.redis_port) ||
        strspn(g_env.pg_port, "0123456789") != strlen(g_env.pg_port)) {
        snprintf(g_env.problem, sizeof(g_env.problem),
                 "REDIS_PORT '%s' or PG_PORT '%s' is not a number", g_env.redis_port,
                 g_env.pg_port);
        return;
    }
    g_env.lock_wait_ms = 2000;
    if (wait != NULL && wait[0] != '\0') {
        char *end;
        g_env.lock_wait_ms = strtol(wait, &end, 10);
        if (*end != '\0' || g_env.lock_wait_ms < 100 || g_env.lock_wait_ms > 20000) {
            snprintf(g_env.problem, sizeof(g_env.problem),
                     "LOCK_WAIT_MS '%s' is not a number from 100 to 20000", wait);
            return;
        }
    }
    g_env.timeout_ms = g_env.lock_wait_ms + TIMEOUT_MARGIN_MS;
    snprintf(g_env.auth_header, sizeof(g_env.auth_header), "Authorization: Bearer %s",
             g_env.admin_token);
    snprintf(g_env.run_tag, sizeof(g_env.run_tag), "%ld-%ld", (long)getpid(), (long)time(NULL));

    /* REPLICA_URLS: comma-separated, trailing slashes dropped. */
    const char *p = urls;
    while (*p != '\0' && g_env.n_replicas < MAX_REPLICAS) {
        size_t n = strcspn(p, ",");
        while (n > 0 && p[n - 1] == '/')
            n--;
        if (n > 0 && (g_env.replicas[g_env.n_replicas] = strndup(p, n)) != NULL)
            g_env.n_replicas++;
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    if (g_env.n_replicas < 1) {
        snprintf(g_env.problem, sizeof(g_env.problem), "REPLICA_URLS '%s' names no URL", urls);
        return;
    }

    /* The slow replica: only the lock_lost cases need it, and they fail without it. */
    const char *slow = getenv("SLOW_REPLICA_URL");
    if (slow != NULL && slow[0] != '\0') {
        const char *delay = getenv("SLOW_REPLICA_DELAY_MS"),
                   *lease = getenv("SLOW_REPLICA_LEASE_MS");
        g_env.slow_url = slow;
        g_env.slow_log = getenv("SLOW_REPLICA_LOG");
        g_env.slow_delay_ms = delay != NULL ? strtol(delay, NULL, 10) : 0;
        g_env.slow_lease_ms = lease != NULL ? strtol(lease, NULL, 10) : 0;
    }
    /* The two delayed replicas: only the five-step cases need them. */
    const char *delayed = getenv("DELAYED_REPLICA_URLS");
    if (delayed != NULL && delayed[0] != '\0') {
        const char *comma = strchr(delayed, ',');
        const char *ddelay = getenv("DELAYED_REPLICA_DELAY_MS");
        if (comma != NULL) {
            g_env.delayed_urls[0] = strndup(delayed, (size_t)(comma - delayed));
            g_env.delayed_urls[1] = strdup(comma + 1);
        }
        g_env.delayed_delay_ms = ddelay != NULL ? strtol(ddelay, NULL, 10) : 0;
    }
    if (access("scripts/stack.sh", X_OK) != 0) {
        snprintf(g_env.problem, sizeof(g_env.problem),
                 "scripts/stack.sh is not here: run the test from the project root");
        return;
    }
}

/* Asks each replica its instance name (its /healthz says it), so that answers' instance
 * fields can be checked. */
static void env_learn_instances(void)
{
    for (size_t i = 0; i < g_env.n_replicas && g_env.problem[0] == '\0'; i++) {
        http_reply r;
        http_request rq = {.method = "GET", .base = g_env.replicas[i], .path = "/healthz"};
        json_t *j = NULL;
        if (http_do(g_curl, &rq, &r) == 0 && r.status == 200)
            j = json_loadb(r.body, r.len, 0, NULL);
        const json_t *name = json_object_get(j, "instance");
        if (json_is_string(name))
            snprintf(g_env.instances[i], sizeof(g_env.instances[i]), "%s", json_string_value(name));
        else
            snprintf(g_env.problem, sizeof(g_env.problem),
                     "GET %s/healthz did not answer 200 with an \"instance\" (status %ld%s%s): "
                     "is the stack up?",
                     g_env.replicas[i], r.status, r.error[0] ? ", " : "", r.error);
        json_decref(j);
        free(r.body);
    }
    for (size_t i = 0; i < g_env.n_replicas && g_env.problem[0] == '\0'; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp(g_env.instances[i], g_env.instances[k]) == 0)
                snprintf(g_env.problem, sizeof(g_env.problem),
                         "replicas %s and %s both call themselves %s", g_env.replicas[k],
                         g_env.replicas[i], g_env.instances[i]);
}

/* ------------------------------------------------------------------------------------------
 * Cases: redis-sharded (one block, to be moved as a whole when this file is split)
 * ------------------------------------------------------------------------------------------ */

#define GOODS_SHARD_LOAD 4401LL
#define GOODS_SHARD_LARGE 4402LL
#define GOODS_SHARD_SOLD_OUT 4403LL
#define GOODS_SHARD_IDEM 4404LL /* 4404 .. 4405 */
#define GOODS_SHARD_MIXED 4406LL
/* The stack's SHARD_SEGMENTS (the service's default). */
#define SHARD_K 8

/* Each segment's stored fencing token (0 for a segment with no row). Tokens stay across
 * resets (an old holder must stay out), so a case compares them before and after. */
static void segment_fences(long long goods_id, long long *fences)
{
    char err[512];

    for (int k = 0; k < SHARD_K; k++) {
        fences[k] = 0;
        if (sql_run("SELECT fence FROM goods_segments WHERE goods = $1 AND seg = $2", 2, goods_id,
                    k, NULL, &fences[k], err, sizeof(err)) != 0)
            fail_msg("SQL on the stack's database: %s", err);
    }
}

/* How many segments got a new token since `before` (segment_fences): taken by a sale. */
static int segments_taken_since(long long goods_id, const long long *before)
{
    long long now[SHARD_K];
    int n = 0;

    segment_fences(goods_id, now);
    for (int k = 0; k < SHARD_K; k++)
        n += now[k] != before[k];
    return n;
}

/* How many segments of goods_id hold stock now. */
static long long segments_holding(long long goods_id)
{
    char err[512];
    long long n = 0;

    if (sql_run("SELECT count(*) FROM goods_segments WHERE goods = $1 AND stock > 0", 1, goods_id,
                0, NULL, &n, err, sizeof(err)) != 0)
        fail_msg("SQL on the stack's database: %s", err);
    return n;
}

/* The books of a load that sold exactly `stock`: one order per 200, none oversold. In
 * redis-sharded a 200's `remaining` is the total as its own statement saw the other
 * segments, so two sales on two segments may report the same value: unlike
 * expect_exact_sale, the remaining values are not required to be each of 0..stock-1. */
static void expect_exact_sharded_sale(load_plan *p, long long stock)
{
    const load_counts *c = &p->counts;

    expect_only_200_409(p);
    if (c->by_status[200] != stock || c->by_status[409] != p->total - stock)
        fail_msg("%s: 200=%d 409=%d, want exactly %lld and %lld", p->label, c->by_status[200],
                 c->by_status[409], stock, p->total - stock);
    if (count_repeats(p->order_ids, atomic_load(&p->n_ok)) != 0)
        fail_msg("%s: two 200 answers carry the same order_id", p->label);
    expect_stock(p->goods_id, stock, 0, stock, stock, p->label);
}

/* 64 threads through nginx over the 3 replicas sell exactly the stock of one goods, spread
 * over its segments (more than one segment's lock was taken), by every replica. */
static void test_sharded_load_three(void **state)
{
    (void)state;
    begin_case("sharded_load_three");
    long long before[SHARD_K];
    reset_goods(GOODS_SHARD_LOAD, LOAD_STOCK);
    segment_fences(GOODS_SHARD_LOAD, before);
    load_plan *p = load_plan_new("redis-sharded via nginx", g_env.stock_url, GOODS_SHARD_LOAD,
                                 "redis-sharded", LOAD_REQUESTS, LOAD_THREADS);
    load_run(p);
    expect_exact_sharded_sale(p, LOAD_STOCK);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        if (p->counts.per_instance[i] == 0)
            fail_msg("redis-sharded via nginx: replica %s sold nothing", g_env.instances[i]);
    int used = segments_taken_since(GOODS_SHARD_LOAD, before);
    printf("    redis-sharded via nginx: %d of %d segments taken by a fenced sale\n", used,
           SHARD_K);
    if (used < 2)
        fail_msg("redis-sharded via nginx: only %d segment(s) locked: no spread", used);
}

/* A count larger than any one segment sells when the segments together have it (the slow
 * path takes every segment's lock and gathers them), and a 409 says the whole stock. 80
 * units: the first sale cuts them 10 a segment and sells 1 from one. */
static void test_sharded_large_count(void **state)
{
    (void)state;
    begin_case("sharded_large_count");
    const long long g = GOODS_SHARD_LARGE;
    long long before[SHARD_K];
    reset_goods(g, 80);
    segment_fences(g, before);
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), g, 1, 79, "redis-sharded",
                    "redis-sharded: the first sale cuts the stock");
    if (segments_holding(g) != SHARD_K || segments_taken_since(g, before) != 1)
        fail_msg("redis-sharded: after the first sale %lld segments hold stock and %d got a new "
                 "token, want %d and 1 (the cut, then one segment's sale)",
                 segments_holding(g), segments_taken_since(g, before), SHARD_K);
    segment_fences(g, before);
    expect_deducted(deduct(g_env.stock_url, g, 50, "redis-sharded", NULL), g, 50, 29,
                    "redis-sharded", "redis-sharded: 50 units, more than any segment holds");
    if (segments_taken_since(g, before) != SHARD_K) /* it held every segment's lock */
        fail_msg("redis-sharded: the 50-unit sale gave %d segments a new token, want %d",
                 segments_taken_since(g, before), SHARD_K);
    json_t *j = expect_error(deduct(g_env.stock_url, g, 30, "redis-sharded", NULL), 409,
                             "insufficient_stock", "redis-sharded: 30 units of 29");
    expect_field_int(j, "remaining", 29, "redis-sharded: 30 units of 29");
    expect_deducted(deduct(g_env.stock_url, g, 29, "redis-sharded", NULL), g, 29, 0,
                    "redis-sharded", "redis-sharded: the last 29 units at once");
    j = expect_error(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), 409,
                     "insufficient_stock", "redis-sharded: sold out");
    expect_field_int(j, "remaining", 0, "redis-sharded: sold out");
    expect_stock(g, 80, 0, 80, 3, "redis-sharded: a count larger than a segment");
}

/* Sold out only at zero: 64 threads at once (each twice, over nginx and each replica) ask
 * for 1 unit of 20 spread over 8 segments: exactly 20 sell, and every 409 says 0 left:
 * stock only falls, so a 409 that saw any unit left would be one refused while a segment
 * still held stock. */
#define SHARD_SHOTS 64
typedef struct shard_shot {
    pthread_barrier_t *barrier;
    const char *base;
    char body[160];
    long status[2];
    long long remaining[2];
    char note[256];
} shard_shot;

static void *shard_shot_thread(void *arg)
{
    shard_shot *s = arg;
    CURL *h = curl_easy_init();

    pthread_barrier_wait(s->barrier);
    for (int i = 0; i < 2; i++) {
        http_request rq = {
            .method = "POST", .base = s->base, .path = "/api/deduct", .body = s->body};
        http_reply r;
        json_t *j = NULL;
        memset(&r, 0, sizeof(r));
        if (h == NULL) {
            snprintf(s->note, sizeof(s->note), "curl_easy_init failed");
            break;
        }
        http_do(h, &rq, &r);
        s->status[i] = r.status;
        if (r.body != NULL)
            j = json_loadb(r.body, r.len, 0, NULL);
        const json_t *rest = json_object_get(j, "remaining");
        s->remaining[i] = json_is_integer(rest) ? (long long)json_integer_value(rest) : -1;
        if (r.status != 200 && r.status != 409 && s->note[0] == '\0')
            snprintf(s->note, sizeof(s->note), "status %ld: %.200s", r.status,
                     r.body != NULL ? r.body : r.error);
        json_decref(j);
        free(r.body);
    }
    curl_easy_cleanup(h);
    return NULL;
}

static void test_sharded_sold_out_only_at_zero(void **state)
{
    (void)state;
    begin_case("sharded_sold_out_only_at_zero");
    const long long g = GOODS_SHARD_SOLD_OUT;
    shard_shot *shots = calloc(SHARD_SHOTS, sizeof(*shots));
    pthread_barrier_t barrier;
    if (shots == NULL)
        fail_msg("out of memory");
    own(shots, free);

    reset_goods(g, 21);
    /* One sale first, so that the 20 left are spread over the segments: 3 or 2 each. */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), g, 1, 20, "redis-sharded",
                    "redis-sharded: the sale that spreads 20 units");
    pthread_barrier_init(&barrier, NULL, SHARD_SHOTS);
    for (int i = 0; i < SHARD_SHOTS; i++) {
        size_t target = (size_t)i % (g_env.n_replicas + 1);
        shots[i].barrier = &barrier;
        shots[i].base = target == 0 ? g_env.stock_url : g_env.replicas[target - 1];
        deduct_body(shots[i].body, sizeof(shots[i].body), g, 1, "redis-sharded");
    }
    pthread_t tid[SHARD_SHOTS];
    for (int i = 0; i < SHARD_SHOTS; i++)
        if (pthread_create(&tid[i], NULL, shard_shot_thread, &shots[i]) != 0)
            abort(); /* the barrier would wait forever for the missing threads */
    for (int i = 0; i < SHARD_SHOTS; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);

    int sold = 0, refused = 0;
    for (int i = 0; i < SHARD_SHOTS; i++)
        for (int k = 0; k < 2; k++) {
            if (shots[i].status[k] == 200) {
                sold++;
            } else if (shots[i].status[k] == 409) {
                refused++;
                if (shots[i].remaining[k] != 0)
                    fail_msg("redis-sharded: a 409 with %lld units left: refused while a segment "
                             "held stock",
                             shots[i].remaining[k]);
            } else {
                fail_msg("redis-sharded: neither 200 nor 409: %s", shots[i].note);
            }
        }
    printf("    redis-sharded, %d requests of 1 on 20 units over %d segments: %d sold, %d "
           "refused\n",
           2 * SHARD_SHOTS, SHARD_K, sold, refused);
    if (sold != 20 || refused != 2 * SHARD_SHOTS - 20)
        fail_msg("redis-sharded: %d sold and %d refused, want 20 and %d", sold, refused,
                 2 * SHARD_SHOTS - 20);
    expect_stock(g, 21, 0, 21, 21, "redis-sharded: sold out only at zero");
}

/* Idempotency as in the single path: 20 requests at once with one key, over nginx and every
 * replica, sell once and all get the one answer, which every replica replays; a stored 409
 * replays after stock is back. */
static void test_sharded_idempotency(void **state)
{
    (void)state;
    begin_case("sharded_idempotency");
    char key[128];

    reset_goods(GOODS_SHARD_IDEM, 100);
    snprintf(key, sizeof(key), "sharded-burst-%s", g_env.run_tag);
    json_t *stored = idem_burst(GOODS_SHARD_IDEM, "redis-sharded", key);
    expect_replayed(GOODS_SHARD_IDEM, "redis-sharded", key, 200, stored, "the redis-sharded burst");
    expect_stock(GOODS_SHARD_IDEM, 100, 99, 1, 1, "the redis-sharded burst");

    const long long g = GOODS_SHARD_IDEM + 1;
    reset_goods(g, 1);
    snprintf(key, sizeof(key), "sharded-last-%s", g_env.run_tag);
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis-sharded", key), g, 1, 0, "redis-sharded",
                    "redis-sharded: the last unit with a key");
    snprintf(key, sizeof(key), "sharded-late-%s", g_env.run_tag);
    json_t *j = expect_error(deduct(g_env.stock_url, g, 1, "redis-sharded", key), 409,
                             "insufficient_stock", "redis-sharded: a new key on sold-out goods");
    /* Stock back behind the service's back (a reset would delete the record under test). */
    sql_exec("UPDATE goods SET stock = $2 WHERE id = $1", g, 5);
    expect_replayed(g, "redis-sharded", key, 409, j, "redis-sharded: the 409's key, stock back");
    expect_stock(g, 1, 5, 1, 1, "redis-sharded: after replaying the 409");
}

/* Mixing modes on one goods stays exact: redis-sharded, redis, redis-batch and pg-atomic at
 * once, 16 threads each through nginx, on a stock that runs out: units move between the
 * goods row and the segments as each mode needs them, and the books still say exactly the
 * stock was sold, once per order. */
static void *mixed_run(void *arg)
{
    load_run(arg);
    return NULL;
}

static void test_sharded_mixed_modes(void **state)
{
    (void)state;
    begin_case("sharded_mixed_modes");
    const char *modes[] = {"redis-sharded", "redis", "redis-batch", "pg-atomic"};
    const long long g = GOODS_SHARD_MIXED, stock = 600;
    load_plan *plans[4];
    pthread_t tid[4];
    int sold = 0, refused = 0;

    reset_goods(g, stock);
    for (int i = 0; i < 4; i++)
        plans[i] = load_plan_new(modes[i], g_env.stock_url, g, modes[i], 200, 16);
    for (int i = 0; i < 4; i++)
        if (pthread_create(&tid[i], NULL, mixed_run, plans[i]) != 0)
            abort();
    for (int i = 0; i < 4; i++)
        pthread_join(tid[i], NULL);
    for (int i = 0; i < 4; i++) {
        expect_only_200_409(plans[i]);
        sold += plans[i]->counts.by_status[200];
        refused += plans[i]->counts.by_status[409];
    }
    printf("    4 modes at once on %lld units: %d sold, %d refused\n", stock, sold, refused);
    if (sold != stock || refused != 800 - stock)
        fail_msg("4 modes at once on %lld units: %d sold and %d refused, want %lld and %lld", stock,
                 sold, refused, stock, 800 - stock);
    expect_stock(g, stock, 0, stock, stock, "4 modes at once on one goods");

    /* After the mix, each mode still sells what another left behind. */
    reset_goods(g, 10);
    expect_deducted(deduct(g_env.stock_url, g, 4, "redis-sharded", NULL), g, 4, 6, "redis-sharded",
                    "the mix: redis-sharded cuts 10 units");
    expect_deducted(deduct(g_env.stock_url, g, 6, "redis", NULL), g, 6, 0, "redis",
                    "the mix: redis sells the 6 left in the segments");
    expect_error(deduct(g_env.stock_url, g, 1, "redis-sharded", NULL), 409, "insufficient_stock",
                 "the mix: sold out");
    expect_stock(g, 10, 0, 10, 2, "the mix, in turn");
}

/* Usage: test_stack [PATTERN] - PATTERN (cmocka's: '*' and '?') runs only the cases whose
 * names match, e.g. 'test_load_*'. */
int main(int argc, char **argv)
{
    /* The order matters only for the last two: a dependency down must not disturb the
     * others. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_deduct_outcomes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_deduct_modes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_body_limits, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_content_types, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lock_timeout, case_setup, lock_case_teardown),
        cmocka_unit_test_setup_teardown(test_stock_endpoint, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_admin_reset, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_modes_endpoint, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_health_and_metrics, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_methods_and_paths, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_encoded_nul, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_query_key, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_error_headers, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_keep_alive, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_nginx_own_errors, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_malformed_requests, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_idempotency, case_setup, idempotency_teardown),
        cmocka_unit_test_setup_teardown(test_load_redis_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_redis_batch_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_batch_idempotency, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_pg_rung_outcomes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_for_update_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_atomic_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_advisory_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_pg_rungs_more_outcomes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_optimistic_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_pg_lockrow_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lockrow_dead_holder_wedges, case_setup,
                                        lockrow_case_teardown),
        cmocka_unit_test_setup_teardown(test_lockrow_ttl_takes_over_an_expired_row, case_setup,
                                        lockrow_case_teardown),
        cmocka_unit_test_setup_teardown(test_pg_rungs_lock_wait_bound, case_setup,
                                        pg_holder_teardown),
        cmocka_unit_test_setup_teardown(test_load_local_one, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_load_unsafe_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_admin_unauthorized, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lock_lost_takeover, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lock_lost_fence, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lock_lost_watchdog, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_five_steps, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_five_steps_mirror, case_setup, case_teardown),
        /* redis-sharded, before the cases that take a dependency down */
        cmocka_unit_test_setup_teardown(test_sharded_load_three, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_large_count, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_sold_out_only_at_zero, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_idempotency, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_sharded_mixed_modes, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_redis_down, case_setup, redis_case_teardown),
        cmocka_unit_test_setup_teardown(test_postgres_down, case_setup, pg_case_teardown),
        cmocka_unit_test_setup_teardown(test_postgres_frozen, case_setup, pg_frozen_teardown),
    };
    int failed;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "test_stack: curl_global_init failed\n");
        return 1;
    }
    json_object_seed(0); /* once, before any thread makes an object */
    g_curl = curl_easy_init();
    if (g_curl == NULL)
        snprintf(g_env.problem, sizeof(g_env.problem), "curl_easy_init failed");
    else
        env_load();
    if (g_env.problem[0] == '\0')
        env_learn_instances();
    if (g_env.problem[0] != '\0')
        fprintf(stderr, "test_stack: FAILING every case: %s\n", g_env.problem);
    else
        printf("test_stack: nginx %s, %zu replicas, lock wait %ld ms\n", g_env.stock_url,
               g_env.n_replicas, g_env.lock_wait_ms);

    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    double start = now_s();
    failed = cmocka_run_group_tests_name("stack", tests, NULL, NULL);
    printf("test_stack: %.1f s in all\n", now_s() - start);

    release_owned();
    free(g_owned);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        free(g_env.replicas[i]);
    free(g_env.delayed_urls[0]);
    free(g_env.delayed_urls[1]);
    curl_easy_cleanup(g_curl);
    curl_global_cleanup();
    return failed == 0 ? 0 : 1;
}
