/*
 * load.c - the load generator of the stack's test programs: a plan's requests sent by many
 * threads, each with its own libcurl handle; the threads never assert (cmocka is not
 * thread-safe), they count what they saw, and the main thread asserts on the totals.
 *
 * Every load is also judged as the load tools judge theirs: what each request saw is
 * written as a history and build/check-history says whether some order of the sales
 * explains every answer. The books (sold, oversold) catch an oversell; the history catches
 * what they cannot: two sales told the same `remaining`, a 409 while stock was left. Each
 * request names itself by an X-Request-Id, which the service sends back and writes into the
 * order of a sale: an Idempotency-Key would do too, but it adds statements to every sale (and
 * takes the redis mode off its two-round-trip path), so the load would measure the key.
 */
#include "tests/stack/stack_support.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHECK_MAX_SECONDS "20" /* the checker's bound; past it the verdict is "unknown" */

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The integer after "name": in a flat JSON answer, or -1. */
static long long body_int(const char *body, const char *name)
{
    char pattern[32];
    const char *at;

    snprintf(pattern, sizeof(pattern), "\"%s\":", name);
    at = body != NULL ? strstr(body, pattern) : NULL;
    return at == NULL ? -1 : strtoll(at + strlen(pattern), NULL, 10);
}

/* What op's answer was, in the history's classes (loadtest/lib/history.sh's table): "ok",
 * "fail" (certainly nothing sold) or "info" (it may have sold); *error for the last two. */
static const char *op_class(const load_op *op, const char **error)
{
    *error = op->error[0] != '\0' ? op->error : "unknown";
    if (op->status <= 0 || op->status >= 600) {
        *error = "timeout";
        return "info";
    }
    if (op->status == 200) {
        if (op->remaining >= 0 && op->order_id >= 0)
            return "ok";
        *error = "unreadable_200";
        return "info";
    }
    if (op->status == 409 && strcmp(op->error, "insufficient_stock") == 0) {
        *error = "sold_out";
        return "fail";
    }
    if (op->status == 503)
        return strcmp(op->error, "commit_unknown") == 0 ? "info" : "fail";
    if (op->status == 502)
        return strcmp(op->error, "unavailable") == 0 ? "fail" : "info";
    if (op->status >= 400 && op->status < 500)
        return "fail";
    return "info";
}

/* Where the histories go: STACK_HISTORY_DIR, else a directory made once under TMPDIR (and
 * kept: it is what a failed case points at). NULL when neither can be had. */
static const char *history_dir(void)
{
    static char made[PATH_MAX];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    const char *dir = getenv("STACK_HISTORY_DIR");

    if (dir != NULL && dir[0] != '\0') {
        if (mkdir(dir, 0755) != 0 && errno != EEXIST)
            return NULL;
        return dir;
    }
    pthread_mutex_lock(&mu);
    if (made[0] == '\0') {
        const char *tmp = getenv("TMPDIR");
        snprintf(made, sizeof(made), "%s/stack-histories.XXXXXX",
                 tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
        if (mkdtemp(made) == NULL)
            made[0] = '\0';
    }
    pthread_mutex_unlock(&mu);
    return made[0] != '\0' ? made : NULL;
}

/* Writes the plan's history to <dir>/<label>.jsonl (see load_run) and names it in
 * p->history_path; false (and the path empty) when it could not be written. */
static bool write_history(load_plan *p, const char *dir)
{
    char name[128];
    size_t i;
    FILE *f;

    p->history_path[0] = '\0';
    snprintf(name, sizeof(name), "%s", p->label);
    for (i = 0; name[i] != '\0'; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= 'A' && name[i] <= 'Z') ||
              (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
            name[i] = '-';
    int w = snprintf(p->history_path, sizeof(p->history_path), "%s/%s.jsonl", dir, name);
    f = w > 0 && (size_t)w < sizeof(p->history_path) ? fopen(p->history_path, "w") : NULL;
    if (f == NULL) {
        printf("    %s: cannot write its history to %s\n", p->label, p->history_path);
        p->history_path[0] = '\0';
        return false;
    }
    /* The opening read, made before the first request: it gives the history its stock. */
    fprintf(f, "{\"time\":%lld,\"process\":0,\"type\":\"invoke\",\"f\":\"read\",\"goods_id\":%lld}\n",
            p->read_invoke, p->goods_id);
    fprintf(f, "{\"time\":%lld,\"process\":0,\"type\":\"ok\",\"f\":\"read\",\"goods_id\":%lld,\"stock\":%lld}\n",
            p->read_done, p->goods_id, p->stock_before);
    for (int k = 0; k < p->total; k++) {
        const load_op *op = &p->ops[k];
        const char *error, *type;
        if (op->t_invoke == 0)
            continue;
        type = op_class(op, &error);
        fprintf(f,
                "{\"time\":%lld,\"process\":%d,\"type\":\"invoke\",\"f\":\"deduct\",\"goods_id\":%lld,"
                "\"count\":1,\"request_id\":\"%s-%d\"}\n",
                op->t_invoke, op->process, p->goods_id, p->id_prefix, k);
        if (strcmp(type, "ok") == 0)
            fprintf(f,
                    "{\"time\":%lld,\"process\":%d,\"type\":\"ok\",\"f\":\"deduct\",\"goods_id\":%lld,"
                    "\"remaining\":%lld,\"order_id\":%lld,\"request_id\":\"%s-%d\",\"status\":200}\n",
                    op->t_done, op->process, p->goods_id, op->remaining, op->order_id,
                    p->id_prefix, k);
        else
            fprintf(f,
                    "{\"time\":%lld,\"process\":%d,\"type\":\"%s\",\"f\":\"deduct\",\"goods_id\":%lld,"
                    "\"error\":\"%s\",\"request_id\":\"%s-%d\",\"status\":%ld}\n",
                    op->t_done, op->process, type, p->goods_id, error, p->id_prefix, k,
                    op->status);
    }
    if (fclose(f) != 0) {
        printf("    %s: cannot write its history to %s\n", p->label, p->history_path);
        p->history_path[0] = '\0';
        return false;
    }
    return true;
}

/* The checker: CHECK_HISTORY, else <build>/check-history for this program at
 * <build>/tests/stack/<name>. "" when neither is found. */
static void checker_path(char *out, size_t len)
{
    const char *env = getenv("CHECK_HISTORY");
    char exe[PATH_MAX];
    ssize_t n;

    out[0] = '\0';
    if (env != NULL && env[0] != '\0') {
        snprintf(out, len, "%s", env);
        return;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (slash == NULL)
            return;
        *slash = '\0';
    }
    int w = snprintf(out, len, "%s/check-history", exe);
    if (w < 0 || (size_t)w >= len || access(out, X_OK) != 0)
        out[0] = '\0';
}

/* Runs the checker on p's history, its output to <history>.check.txt; sets p->verdict (the
 * exit status, checked against the last line it printed) and p->check_seconds. */
static void check_history(load_plan *p)
{
    char checker[PATH_MAX], out_path[600], line[256], last[256] = "";
    const char *argv[] = {checker, "--max-seconds", CHECK_MAX_SECONDS, p->history_path, NULL};
    double t0;
    FILE *f;
    int fd, rc;

    p->verdict = LOAD_LINEARIZABLE_ERROR;
    checker_path(checker, sizeof(checker));
    if (checker[0] == '\0') {
        printf("    %s: no build/check-history to check the history with (CHECK_HISTORY)\n",
               p->label);
        return;
    }
    snprintf(out_path, sizeof(out_path), "%s.check.txt", p->history_path);
    fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    t0 = now_s();
    rc = run_program(NULL, fd, 60, argv);
    p->check_seconds = now_s() - t0;
    close(fd);
    f = fopen(out_path, "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        snprintf(last, sizeof(last), "%s", line);
    if (f != NULL)
        fclose(f);
    last[strcspn(last, "\n")] = '\0';
    if (rc >= 0 && rc <= 3) {
        char want[64];
        snprintf(want, sizeof(want), "linearizable: %s", load_verdict_name(rc));
        /* malformed: the reason is on stderr, and no verdict line */
        if (rc == LOAD_LINEARIZABLE_MALFORMED || strcmp(last, want) == 0)
            p->verdict = rc;
    }
    printf("    %s: history in %s: linearizable %s (%.2f s)\n", p->label, p->history_path,
           load_verdict_name(p->verdict), p->check_seconds);
}

const char *load_verdict_name(int verdict)
{
    switch (verdict) {
    case LOAD_LINEARIZABLE_YES:
        return "yes";
    case LOAD_LINEARIZABLE_NO:
        return "no";
    case LOAD_LINEARIZABLE_MALFORMED:
        return "malformed";
    case LOAD_LINEARIZABLE_UNKNOWN:
        return "unknown";
    case LOAD_LINEARIZABLE_UNCHECKED:
        return "unchecked";
    default:
        return "error";
    }
}

/* The checker's output on p's history (its first lines: the window no order explains),
 * for a failure's message. */
static const char *check_output(const load_plan *p, char *buf, size_t len)
{
    char path[600];
    size_t n = 0;
    FILE *f;

    buf[0] = '\0';
    snprintf(path, sizeof(path), "%s.check.txt", p->history_path);
    f = fopen(path, "r");
    if (f == NULL)
        return buf;
    n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

void expect_linearizable(const load_plan *p)
{
    char out[1500];

    if (p->verdict != LOAD_LINEARIZABLE_YES)
        fail_msg("%s: its history is not linearizable (%s): %s\n%s", p->label,
                 load_verdict_name(p->verdict), p->history_path, check_output(p, out, sizeof(out)));
}

void expect_not_linearizable(const load_plan *p)
{
    if (p->verdict != LOAD_LINEARIZABLE_NO)
        fail_msg("%s: the books show an oversell, but the checker says linearizable %s of its "
                 "history %s",
                 p->label, load_verdict_name(p->verdict), p->history_path);
}

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
    int process;

    memset(&mine, 0, sizeof(mine));
    pthread_mutex_lock(&p->mu);
    process = ++p->started; /* the history's process: one per thread */
    pthread_mutex_unlock(&p->mu);
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
        char id_line[64];
        load_op *op = p->ops != NULL ? &p->ops[i] : NULL;
        if (h == NULL) {
            mine.by_status[0]++;
            note_once(&mine, "curl_easy_init failed", 0, "");
            continue;
        }
        if (op != NULL) {
            snprintf(id_line, sizeof(id_line), "X-Request-Id: %s-%d", p->id_prefix, i);
            rq.headers[0] = id_line;
            op->process = process;
            op->t_invoke = mono_ns();
        }
        http_do(h, &rq, &r);
        if (op != NULL) {
            const char *e = r.body != NULL ? strstr(r.body, "\"error\":\"") : NULL;
            size_t n = 0;
            op->t_done = mono_ns();
            op->status = r.status;
            op->remaining = r.status == 200 ? body_int(r.body, "remaining") : -1;
            op->order_id = r.status == 200 ? body_int(r.body, "order_id") : -1;
            if (e != NULL)
                for (e += strlen("\"error\":\""); e[n] != '\0' && e[n] != '"' && n + 1 < sizeof(op->error); n++)
                    op->error[n] = e[n];
            op->error[n] = '\0';
        }
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
    free(p->ops);
    free(p);
}

load_plan *load_plan_new(const char *label, const char *base, long long goods_id, const char *mode,
                         int total, int threads)
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
    p->verdict = LOAD_LINEARIZABLE_UNCHECKED;
    p->ops = calloc((size_t)total, sizeof(load_op));
    if (p->ops == NULL)
        fail_msg("out of memory");
    /* Unique across runs on one database: the process id and the moment (in µs), in hex, so
     * that "<prefix>-<n>" fits the API's 32 characters. */
    snprintf(p->id_prefix, sizeof(p->id_prefix), "s%lx-%llx", (unsigned long)getpid(),
             (unsigned long long)mono_ns() / 1000);
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

/* The goods' stock now, for the read that opens a load's history; -1 when no answer or no
 * stock came (the history then has no opening read to go by, and its check says so). With a
 * curl handle of its own, not the main thread's: load_run may run on several threads at
 * once (four modes on one goods, tests/stack/test_sharded_sales.c). */
static long long load_read_stock(long long goods_id)
{
    char path[64];
    http_reply r = {0};
    long long stock = -1;
    CURL *h = curl_easy_init();

    snprintf(path, sizeof(path), "/api/stock/%lld", goods_id);
    http_request rq = {.method = "GET", .base = g_env.stock_url, .path = path};
    if (h != NULL && http_do(h, &rq, &r) == 0 && r.status == 200) {
        json_t *j = json_loads(r.body, 0, NULL);
        json_t *v = j != NULL ? json_object_get(j, "stock") : NULL;
        if (json_is_integer(v))
            stock = json_integer_value(v);
        json_decref(j);
    }
    free(r.body);
    if (h != NULL)
        curl_easy_cleanup(h);
    return stock;
}

void load_run(load_plan *p)
{
    pthread_t tid[LOAD_THREADS];
    int started = 0;

    if (p->threads > LOAD_THREADS)
        fail_msg("%s: at most %d threads", p->label, LOAD_THREADS);
    p->read_invoke = mono_ns();
    p->stock_before = load_read_stock(p->goods_id);
    p->read_done = mono_ns();
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
    const char *dir = history_dir();
    if (dir == NULL)
        printf("    %s: no directory to write its history in (STACK_HISTORY_DIR)\n", p->label);
    else if (write_history(p, dir))
        check_history(p);
}

int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

int count_repeats(long long *v, int n)
{
    int repeats = 0;
    qsort(v, (size_t)n, sizeof(*v), cmp_ll);
    for (int i = 1; i < n; i++)
        if (v[i] == v[i - 1])
            repeats++;
    return repeats;
}

void expect_only_200_409(const load_plan *p)
{
    const load_counts *c = &p->counts;
    int other = p->total - c->by_status[200] - c->by_status[409] - c->allowed_503;
    if (other != 0)
        fail_msg("%s: %d answers were neither 200, 409 nor 503 %s (503=%d, no answer=%d); "
                 "first: %s",
                 p->label, other, p->allowed_503 ? p->allowed_503 : "(none allowed)",
                 c->by_status[503], c->by_status[0], c->note);
    if (c->bad_answer != 0)
        fail_msg("%s: %d answers had a body off the contract; first: %s", p->label, c->bad_answer,
                 c->note);
}

void expect_exact_sale(load_plan *p, long long stock)
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
    expect_linearizable(p);
}
