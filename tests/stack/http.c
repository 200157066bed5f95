/*
 * http.c - the stack's test programs' HTTP: http_do() makes one call with a libcurl easy
 * handle, always with connect and total timeouts, so that a hung replica fails a case instead
 * of hanging the run (the main thread reuses one handle, keep-alive; each load thread has its
 * own, since an easy handle must never be used by two threads at once). What libcurl will not
 * send (a request line in HTTP/2.0 over plain TCP), raw_call() writes on a socket of its own.
 */
#include "tests/stack/stack_support.h"

#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_MS 3000L
#define MAX_REPLY_BYTES (1024 * 1024) /* no answer of the service is anywhere near this */

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

bool header_in(const char *block, const char *name, char *out, size_t len)
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

int http_do(CURL *h, const http_request *rq, http_reply *out)
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

http_reply *call(const http_request *rq)
{
    http_reply *r = own(calloc(1, sizeof(*r)), reply_release);
    if (r == NULL)
        fail_msg("out of memory");
    if (http_do(g_curl, rq, r) != 0)
        fail_msg("%s %s%s: no answer: %s", rq->method, rq->base, rq->path, r->error);
    return r;
}

http_reply *get(const char *base, const char *path)
{
    http_request rq = {.method = "GET", .base = base, .path = path};
    return call(&rq);
}

bool reply_header(const http_reply *r, const char *name, char *out, size_t len)
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

http_reply *raw_call(const char *base, const char *request)
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
