/*
 * chaos_load.c - a load generator that remembers every request, for loadtest/chaos.
 *
 *   chaos-load --url http://127.0.0.1:8080 --mode redis --goods 7 [--threads 16]
 *              [--seconds 10] [--end-file FILE] [--timeout-ms 10000] --out FILE
 *              [--history FILE --key-prefix STR]
 *
 * wrk measures throughput and latency percentiles, but a fault report needs to know what
 * happened to each request and when: the first 200 after the fault, the longest answer,
 * the requests that never got one. So each of --threads threads (one keep-alive connection
 * each, libcurl) posts {"goods_id":G,"count":1,"mode":M} to URL/api/deduct in a loop for
 * --seconds, and records for every request when it was sent, how long it took, its status
 * (0: no answer within --timeout-ms, or the connection failed) and its "error" field.
 * The records are written to --out as CSV, one line per request:
 *
 *   sent_ms,took_ms,status,error
 *
 * sent_ms counts from the start of the run (the moment written to stdout as
 * "START <unix ms>", so that the caller can place its faults on the same time line).
 * With --end-file, --seconds is the longest the run may last, and it ends earlier at the
 * moment (unix ms) the caller writes into FILE once it knows it: a fault whose end cannot be
 * known in advance (a server whose restart takes as long as it takes) is then followed by
 * the same stretch of load every time.
 * Memory is bounded: at most MAX_RECORDS requests per thread are recorded; more are
 * counted as "unrecorded" in the summary line on stdout.
 *
 * With --history, every request also carries an Idempotency-Key of its own
 * (STR-thread-n) and the run is written to FILE as a history in the project's format
 * (loadtest/lib/history.sh says it all): per request an invocation and a completion stamped
 * with CLOCK_MONOTONIC in ns, one process per thread, the completion classified as
 * deduct.lua's record_answer does (classify() below). A thread whose records are full then
 * stops, so that the history holds every request sent.
 */
#include "bench/clock.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RECORDS 200000
#define BODY_MAX 1024

typedef struct record {
    int64_t sent_ms;
    int64_t sent_ns, done_ns;    /* CLOCK_MONOTONIC, for the history */
    int64_t remaining, order_id; /* of a 200; -1: not in the answer */
    int32_t took_ms;
    int16_t status;
    char error[24];
} record;

typedef struct worker {
    pthread_t thread;
    const char *url;
    const char *payload;
    long timeout_ms;
    const char *key_prefix; /* NULL: no history, no keys */
    long index;
    record *records;
    size_t count;
    size_t unrecorded;
} worker;

typedef struct body_buffer {
    char data[BODY_MAX];
    size_t len;
} body_buffer;

static int64_t g_start_ms;
/* When the workers stop (bench_now_ms()'s scale): start + --seconds, or earlier by --end-file. */
static _Atomic int64_t g_end_ms;

static size_t collect(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    body_buffer *b = userdata;
    size_t n = size * nmemb, room = sizeof(b->data) - 1 - b->len;

    memcpy(b->data + b->len, ptr, n < room ? n : room);
    b->len += n < room ? n : room;
    b->data[b->len] = '\0';
    return n; /* take it all, keep what fits */
}

/* The "error" field of a flat JSON answer, or "" (a 200 has none). */
static void error_of(const char *body, char *out, size_t len)
{
    const char *p = strstr(body, "\"error\":\"");
    size_t n = 0;

    out[0] = '\0';
    if (p == NULL)
        return;
    p += strlen("\"error\":\"");
    while (p[n] != '\0' && p[n] != '"' && n + 1 < len) {
        out[n] = p[n];
        n++;
    }
    out[n] = '\0';
}

/* The integer after "name": in a flat JSON answer, or -1. */
static int64_t int_field(const char *body, const char *name)
{
    char pattern[32];
    const char *p;

    snprintf(pattern, sizeof(pattern), "\"%s\":", name);
    p = strstr(body, pattern);
    return p == NULL ? -1 : strtoll(p + strlen(pattern), NULL, 10);
}

/* A completion's type and error, by what the API promises for the status and error: ok (a
 * 200 with its figures), fail (nothing sold: 409 is sold_out; 503 other than
 * commit_unknown, 502 unavailable, any 4xx) or info (may have sold: 503 commit_unknown,
 * 502 upstream_failed, 504, 500, no answer). */
static const char *classify(const record *r, const char **error)
{
    *error = r->error[0] != '\0' ? r->error : "unknown";
    if (r->status == 0) {
        *error = "timeout";
        return "info";
    }
    if (r->status == 200) {
        if (r->remaining >= 0 && r->order_id >= 0)
            return "ok";
        *error = "unreadable_200";
        return "info";
    }
    if (r->status == 409 && strcmp(r->error, "insufficient_stock") == 0) {
        *error = "sold_out";
        return "fail";
    }
    if (r->status == 503)
        return strcmp(r->error, "commit_unknown") == 0 ? "info" : "fail";
    if (r->status == 502)
        return strcmp(r->error, "unavailable") == 0 ? "fail" : "info";
    if (r->status >= 400 && r->status < 500)
        return "fail";
    return "info";
}

/* Writes worker w's requests as history lines: process w->index, goods `goods`. */
static void write_history(FILE *f, const worker *w, long goods)
{
    for (size_t k = 0; k < w->count; k++) {
        const record *r = &w->records[k];
        const char *error, *type = classify(r, &error);

        fprintf(f,
                "{\"time\":%" PRId64 ",\"process\":%ld,\"type\":\"invoke\",\"f\":\"deduct\","
                "\"goods_id\":%ld,\"count\":1,\"key\":\"%s-%ld-%zu\"}\n",
                r->sent_ns, w->index, goods, w->key_prefix, w->index, k);
        if (strcmp(type, "ok") == 0)
            fprintf(f,
                    "{\"time\":%" PRId64 ",\"process\":%ld,\"type\":\"ok\",\"f\":\"deduct\","
                    "\"goods_id\":%ld,\"remaining\":%" PRId64 ",\"order_id\":%" PRId64 ","
                    "\"key\":\"%s-%ld-%zu\",\"status\":200}\n",
                    r->done_ns, w->index, goods, r->remaining, r->order_id, w->key_prefix, w->index,
                    k);
        else
            fprintf(f,
                    "{\"time\":%" PRId64 ",\"process\":%ld,\"type\":\"%s\",\"f\":\"deduct\","
                    "\"goods_id\":%ld,\"error\":\"%s\",\"key\":\"%s-%ld-%zu\",\"status\":%d}\n",
                    r->done_ns, w->index, type, goods, error, w->key_prefix, w->index, k,
                    r->status);
    }
}

static void *run(void *arg)
{
    worker *w = arg;
    CURL *h = curl_easy_init();
    struct curl_slist *headers = NULL;
    body_buffer body;
    char url[512];

    if (h == NULL)
        return NULL;
    snprintf(url, sizeof(url), "%s/api/deduct", w->url);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, w->payload);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, w->timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);

    while (bench_now_ms() < atomic_load(&g_end_ms)) {
        int64_t sent = bench_now_ms(), sent_ns;
        long status = 0;
        CURLcode rc;
        struct curl_slist *with_key = NULL;
        if (w->key_prefix != NULL) {
            char key_header[128];
            if (w->count >= MAX_RECORDS)
                break; /* the history must hold every request sent */
            snprintf(key_header, sizeof(key_header), "Idempotency-Key: %s-%ld-%zu", w->key_prefix,
                     w->index, w->count);
            with_key = curl_slist_append(curl_slist_append(NULL, "Content-Type: application/json"),
                                         key_header);
            if (with_key == NULL)
                break;
            curl_easy_setopt(h, CURLOPT_HTTPHEADER, with_key);
        }
        body.len = 0;
        body.data[0] = '\0';
        sent_ns = bench_now_ns();
        rc = curl_easy_perform(h);
        if (rc == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (w->count < MAX_RECORDS) {
            record *r = &w->records[w->count++];
            r->done_ns = bench_now_ns();
            r->sent_ns = sent_ns;
            r->sent_ms = sent - g_start_ms;
            r->took_ms = (int32_t)(bench_now_ms() - sent);
            r->status = (int16_t)status;
            r->remaining = status == 200 ? int_field(body.data, "remaining") : -1;
            r->order_id = status == 200 ? int_field(body.data, "order_id") : -1;
            if (rc != CURLE_OK)
                snprintf(r->error, sizeof(r->error), "no_answer");
            else
                error_of(body.data, r->error, sizeof(r->error));
        } else {
            w->unrecorded++;
        }
        if (with_key != NULL) {
            curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
            curl_slist_free_all(with_key);
        }
        if (rc != CURLE_OK) {
            /* A refused connection returns at once: do not spin on a replica that is down. */
            struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000000L};
            nanosleep(&pause, NULL);
        }
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(h);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: chaos-load --url URL --mode MODE --goods N [--threads N] "
                    "[--seconds S] [--end-file FILE] [--timeout-ms MS] --out FILE\n"
                    "                  [--history FILE --key-prefix STR]\n");
    exit(2);
}

static long number(const char *text, long lo, long hi)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || end == text || v < lo || v > hi)
        usage();
    return v;
}

/* Until the run's end: polls PATH every 20 ms; once it holds a moment (unix ms), the run
 * ends then, if that is before the end it had. */
static void follow_end_file(const char *path, int64_t start_wall_ms)
{
    while (bench_now_ms() < atomic_load(&g_end_ms)) {
        FILE *f = fopen(path, "r");
        long long at = 0;
        if (f != NULL) {
            int got = fscanf(f, "%lld", &at);
            fclose(f);
            if (got == 1 && at > 0) {
                int64_t end = g_start_ms + ((int64_t)at - start_wall_ms);
                if (end < atomic_load(&g_end_ms))
                    atomic_store(&g_end_ms, end);
                return;
            }
        }
        struct timespec pause = {0, 20 * 1000000};
        nanosleep(&pause, NULL);
    }
}

/* The command line. */
typedef struct options {
    const char *url, *mode, *out_path, *history_path, *key_prefix, *end_path;
    long goods, threads, seconds, timeout_ms;
} options;

/* Reads the command line into *o, or ends with the usage. */
static void parse_args(int argc, char **argv, options *o)
{
    *o = (options){.threads = 16, .seconds = 10, .timeout_ms = 10000};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--url") == 0)
            o->url = argv[i + 1];
        else if (strcmp(argv[i], "--mode") == 0)
            o->mode = argv[i + 1];
        else if (strcmp(argv[i], "--goods") == 0)
            o->goods = number(argv[i + 1], 1, LONG_MAX);
        else if (strcmp(argv[i], "--threads") == 0)
            o->threads = number(argv[i + 1], 1, 256);
        else if (strcmp(argv[i], "--seconds") == 0)
            o->seconds = number(argv[i + 1], 1, 3600);
        else if (strcmp(argv[i], "--end-file") == 0)
            o->end_path = argv[i + 1];
        else if (strcmp(argv[i], "--timeout-ms") == 0)
            o->timeout_ms = number(argv[i + 1], 100, 600000);
        else if (strcmp(argv[i], "--out") == 0)
            o->out_path = argv[i + 1];
        else if (strcmp(argv[i], "--history") == 0)
            o->history_path = argv[i + 1];
        else if (strcmp(argv[i], "--key-prefix") == 0)
            o->key_prefix = argv[i + 1];
        else
            usage();
    }
    if (argc % 2 == 0 || o->url == NULL || o->mode == NULL || o->goods == 0 ||
        o->out_path == NULL || strlen(o->mode) > 64)
        usage();
    /* A key is at most 128 characters: the prefix, two numbers and two dashes. */
    if ((o->history_path == NULL) != (o->key_prefix == NULL) ||
        (o->key_prefix != NULL &&
         (strlen(o->key_prefix) < 1 || strlen(o->key_prefix) > 64 ||
          strspn(o->key_prefix, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                "0123456789_.:-") != strlen(o->key_prefix))))
        usage();
}

/* Joins the workers and writes what each saw: a line per request into the output, and the
 * history when asked. 0, or 1 when a file could not be written (said on stderr). */
static int join_and_write(const options *o, worker *workers)
{
    FILE *out = fopen(o->out_path, "w"), *history = NULL;
    size_t total = 0, unrecorded = 0;

    if (o->history_path != NULL)
        history = fopen(o->history_path, "w");
    for (long i = 0; i < o->threads; i++) {
        worker *w = &workers[i];
        pthread_join(w->thread, NULL);
        if (history != NULL)
            write_history(history, w, o->goods);
        for (size_t k = 0; out != NULL && k < w->count; k++)
            fprintf(out, "%" PRId64 ",%d,%d,%s\n", w->records[k].sent_ms, w->records[k].took_ms,
                    w->records[k].status, w->records[k].error);
        total += w->count;
        unrecorded += w->unrecorded;
        free(w->records);
    }
    if (out == NULL || fclose(out) != 0) {
        fprintf(stderr, "chaos-load: cannot write %s\n", o->out_path);
        if (history != NULL)
            fclose(history);
        return 1;
    }
    if (o->history_path != NULL && (history == NULL || fclose(history) != 0)) {
        fprintf(stderr, "chaos-load: cannot write %s\n", o->history_path);
        return 1;
    }
    printf("DONE requests=%zu unrecorded=%zu\n", total, unrecorded);
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    int64_t start_wall_ms;
    char payload[256];
    worker *workers;
    int rc;

    parse_args(argc, argv, &o);
    snprintf(payload, sizeof(payload), "{\"goods_id\":%ld,\"count\":1,\"mode\":\"%s\"}", o.goods,
             o.mode);

    curl_global_init(CURL_GLOBAL_DEFAULT);
    workers = calloc((size_t)o.threads, sizeof(*workers));
    if (workers == NULL)
        return 1;
    g_start_ms = bench_now_ms();
    atomic_store(&g_end_ms, g_start_ms + o.seconds * 1000);
    start_wall_ms = bench_wall_ms();
    printf("START %" PRId64 "\n", start_wall_ms);
    fflush(stdout);
    for (long i = 0; i < o.threads; i++) {
        worker *w = &workers[i];
        w->url = o.url;
        w->payload = payload;
        w->timeout_ms = o.timeout_ms;
        w->key_prefix = o.key_prefix;
        w->index = i + 1;
        w->records = malloc(sizeof(record) * MAX_RECORDS);
        if (w->records == NULL || pthread_create(&w->thread, NULL, run, w) != 0) {
            fprintf(stderr, "chaos-load: cannot start thread %ld\n", i);
            return 1;
        }
    }
    if (o.end_path != NULL)
        follow_end_file(o.end_path, start_wall_ms);
    rc = join_and_write(&o, workers);
    free(workers);
    curl_global_cleanup();
    return rc;
}
