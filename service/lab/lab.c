/*
 * lab.c - the held requests and their traces (lab.h says what the lab is for).
 *
 * One mutex and one condition variable (on the monotonic clock) for the whole table: it has
 * LAB_SLOTS places and is touched a few times per lab request, so a finer scheme would buy
 * nothing. A held request waits on the condition until its `go` is set (a step, or the table
 * closing) or its hold budget runs out; a stepper waits on the same condition until the
 * request it let go holds again (its `holds` count grew) or has answered (its place is no
 * longer in flight under the same sequence number). Every wait is bounded.
 *
 * A place is taken by a request and kept by it until it answers; then it is a trace, which
 * the next request to need a place may take, the oldest first. So a trace stays readable
 * until LAB_SLOTS newer requests came by.
 */
#include "service/lab/lab.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "service/clock.h"

static const char *const point_names[LAB_POINTS_] = {
    "entered",   "begun",   "read",          "written",         "checked",
    "committed", "release", "between-locks", "cache-miss-read",
};

const char *lab_point_name(lab_point p)
{
    return (unsigned)p < LAB_POINTS_ ? point_names[p] : "?";
}

lab_point lab_point_of(deduct_point p)
{
    switch (p) {
    case DEDUCT_AT_ENTERED:
        return LAB_AT_ENTERED;
    case DEDUCT_AT_BEGUN:
        return LAB_AT_BEGUN;
    case DEDUCT_AT_READ:
        return LAB_AT_READ;
    case DEDUCT_AT_WRITTEN:
        return LAB_AT_WRITTEN;
    case DEDUCT_AT_CHECKED:
        return LAB_AT_CHECKED;
    case DEDUCT_AT_COMMITTED:
        return LAB_AT_COMMITTED;
    }
    return LAB_AT_ENTERED;
}

bool lab_request_id_valid(const char *id)
{
    size_t n = 0;

    if (id == NULL)
        return false;
    for (const char *p = id; *p != '\0'; p++, n++) {
        char c = *p;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return false;
    }
    return n >= 1 && n <= LAB_ID_MAX;
}

/* ---- X-Fault: hold-at=... ---- */

/* The point named [s, s+len), or -1. */
static int point_named(const char *s, size_t len)
{
    for (int i = 0; i < LAB_POINTS_; i++) {
        if (strlen(point_names[i]) == len && memcmp(point_names[i], s, len) == 0)
            return i;
    }
    return -1;
}

/* The known points, comma-separated, for a refusal's reason: from the one table of names. */
static const char *known_points(char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < LAB_POINTS_; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "", point_names[i]);
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
    }
    return buf;
}

/* Whether [s, s+len) is a fault faults_parse knows (with its value, if any). */
static bool is_fault(const char *s, size_t len)
{
    char item[80], detail[160];
    fault_plan plan;

    if (len == 0 || len >= sizeof(item))
        return false;
    memcpy(item, s, len);
    item[len] = '\0';
    return faults_parse(item, &plan, detail, sizeof(detail)) == 0;
}

/* Appends [s, s+len) to rest as one more comma-separated item; -1 when it does not fit. */
static int append_item(char *rest, size_t rest_len, const char *s, size_t len)
{
    size_t used = strlen(rest), need = len + (used > 0 ? 1 : 0);

    if (used + need + 1 > rest_len)
        return -1;
    if (used > 0)
        rest[used++] = ',';
    memcpy(rest + used, s, len);
    rest[used + len] = '\0';
    return 0;
}

int lab_split_fault(const char *value, unsigned *points, char *rest, size_t rest_len, char *detail,
                    size_t detail_len)
{
    static const char key[] = "hold-at=";
    const char *p = value;
    bool seen_hold = false, in_hold = false;
    char known[128];

    *points = 0;
    rest[0] = '\0';
    if (value == NULL)
        return -1;
    for (;;) {
        const char *item;
        size_t len;
        int pt;

        faults_next_item(&p, &item, &len);
        if (len >= sizeof(key) - 1 && memcmp(item, key, sizeof(key) - 1) == 0) {
            if (seen_hold) {
                snprintf(detail, detail_len, "X-Fault: hold-at given twice");
                return -1;
            }
            seen_hold = in_hold = true;
            item += sizeof(key) - 1;
            len -= sizeof(key) - 1;
            if (len == 0)
                break;
        }
        pt = point_named(item, len);
        if (in_hold && pt < 0 && !is_fault(item, len)) {
            snprintf(detail, detail_len, "X-Fault: hold-at: unknown point '%.*s'; known: %s",
                     (int)(len > 40 ? 40 : len), item, known_points(known, sizeof(known)));
            return -1;
        }
        if (in_hold && pt >= 0) {
            if (*points & (1u << pt)) {
                snprintf(detail, detail_len, "X-Fault: hold-at names '%s' twice", point_names[pt]);
                return -1;
            }
            *points |= 1u << pt;
        } else {
            if (in_hold && *points == 0)
                break;       /* "hold-at=nested": no point at all */
            in_hold = false; /* the first item that is not a point ends the list */
            if (append_item(rest, rest_len, item, len) != 0) {
                snprintf(detail, detail_len, "X-Fault: too long");
                return -1;
            }
        }
        if (*p == '\0')
            break;
        p++; /* the comma */
    }
    if (seen_hold && *points == 0) {
        snprintf(detail, detail_len, "X-Fault: hold-at needs one or more points: %s",
                 known_points(known, sizeof(known)));
        return -1;
    }
    return 0;
}

/* ---- the table ---- */

typedef struct lab_event {
    lab_point point;
    int64_t at_us;   /* since the request began (monotonic) */
    int64_t held_ms; /* how long it was held there (0: it was not) */
    lab_seen seen;
} lab_event;

typedef struct lab_slot {
    bool used;      /* holds a request in flight or a trace */
    bool in_flight; /* its request has not answered yet */
    uint64_t seq;   /* taken by the seq-th request: the oldest trace has the lowest */
    char id[LAB_ID_MAX + 1];
    char mode[32];
    int64_t goods_id;
    unsigned points;
    int64_t start_ns;      /* CLOCK_MONOTONIC */
    int64_t start_wall_us; /* CLOCK_REALTIME at the same moment: wall = this + monotonic since */
    int held;              /* the lab_point it holds at now, or -1 */
    int64_t held_since_ns;
    uint64_t holds; /* how many times it has held: a stepper waits for this to grow */
    bool go;        /* a step let it go on */
    int status;     /* its answer, once not in flight */
    char outcome[40];
    int64_t done_us; /* since the request began (monotonic) */
    int events;
    lab_event event[LAB_EVENTS_MAX];
} lab_slot;

struct lab_table {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t hold_ms;
    int64_t step_ms;
    uint64_t next_seq;
    bool closed;
    lab_slot slot[LAB_SLOTS];
};

lab_table *lab_table_create(int64_t hold_ms, int64_t step_ms)
{
    lab_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->hold_ms = hold_ms;
    t->step_ms = step_ms;
    pthread_mutex_init(&t->mu, NULL);
    clock_cond_init(&t->cv);
    return t;
}

void lab_table_destroy(lab_table *t)
{
    if (t == NULL)
        return;
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void lab_table_close(lab_table *t)
{
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    t->closed = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

int lab_start(lab_table *t, const char *id, const char *mode_name, int64_t goods_id,
              unsigned points, lab_run *run)
{
    lab_slot *s = NULL;

    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < LAB_SLOTS; i++) {
        lab_slot *c = &t->slot[i];
        if (c->in_flight && strcmp(c->id, id) == 0) {
            pthread_mutex_unlock(&t->mu);
            return LAB_ERR_DUPLICATE;
        }
        if (c->in_flight)
            continue;
        /* A free place first, else the oldest trace. */
        if (s == NULL || (s->used && (!c->used || c->seq < s->seq)))
            s = c;
    }
    if (s == NULL) {
        pthread_mutex_unlock(&t->mu);
        return LAB_ERR_FULL;
    }
    memset(s, 0, sizeof(*s));
    s->used = s->in_flight = true;
    s->seq = ++t->next_seq;
    snprintf(s->id, sizeof(s->id), "%s", id);
    snprintf(s->mode, sizeof(s->mode), "%s", mode_name);
    s->goods_id = goods_id;
    s->points = points;
    s->start_ns = clock_now_ns();
    struct timespec wall = clock_wall();
    s->start_wall_us = (int64_t)wall.tv_sec * 1000000 + wall.tv_nsec / 1000;
    s->held = -1;
    *run = (lab_run){.table = t, .slot = (int)(s - t->slot), .seq = s->seq};
    pthread_mutex_unlock(&t->mu);
    return 0;
}

void lab_reach(const lab_run *run, lab_point p, const lab_seen *seen)
{
    lab_table *t = run->table;
    lab_slot *s = &t->slot[run->slot];
    lab_event *e = NULL;
    int64_t now = clock_now_ns(), deadline;

    pthread_mutex_lock(&t->mu);
    if (s->events < LAB_EVENTS_MAX) {
        e = &s->event[s->events++];
        e->point = p;
        e->at_us = (now - s->start_ns) / 1000;
        e->held_ms = 0;
        if (seen != NULL)
            e->seen = *seen;
        else
            memset(&e->seen, 0, sizeof(e->seen));
    }
    deadline = s->start_ns + t->hold_ms * 1000000LL;
    if ((s->points & (1u << p)) != 0 && !t->closed && now < deadline) {
        struct timespec until = clock_timespec(deadline);
        s->held = (int)p;
        s->held_since_ns = now;
        s->holds++;
        s->go = false;
        pthread_cond_broadcast(&t->cv); /* a stepper waits for this */
        while (!s->go && !t->closed) {
            if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
                break; /* the budget is spent: on by itself */
        }
        s->held = -1;
        if (e != NULL)
            e->held_ms = (clock_now_ns() - now) / 1000000;
    }
    pthread_mutex_unlock(&t->mu);
}

void lab_finish(const lab_run *run, int status, const char *outcome)
{
    lab_table *t = run->table;
    lab_slot *s = &t->slot[run->slot];

    pthread_mutex_lock(&t->mu);
    s->in_flight = false;
    s->status = status;
    snprintf(s->outcome, sizeof(s->outcome), "%s", outcome != NULL ? outcome : "");
    s->done_us = (clock_now_ns() - s->start_ns) / 1000;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* guard_hold.before_release: the release's point. */
static void at_release(void *arg)
{
    lab_reach(arg, LAB_AT_RELEASE, NULL);
}

int lab_at(void *arg, deduct_point point, guard_hold *hold, char *why, size_t why_len)
{
    lab_run *run = arg;
    lab_seen seen;

    memset(&seen, 0, sizeof(seen));
    if (point == DEDUCT_AT_ENTERED) {
        hold->before_release = at_release;
        hold->before_release_arg = run;
    }
    if (hold->fenced) {
        seen.has_fence = true;
        seen.fence = hold->fence;
    }
    snprintf(seen.token, sizeof(seen.token), "%s", hold->token);
    if (point == DEDUCT_AT_READ || point == DEDUCT_AT_WRITTEN) {
        seen.has_stock = true;
        seen.stock = run->stock;
    }
    lab_reach(run, lab_point_of(point), &seen);
    if (run->faults != NULL)
        return faults_at(run->faults, point, hold, why, why_len);
    return GUARD_OK;
}

void lab_at_between_locks(void *arg)
{
    lab_reach(arg, LAB_AT_BETWEEN_LOCKS, NULL);
}

/* The place of the request `id` in flight, or NULL. */
static lab_slot *in_flight(lab_table *t, const char *id)
{
    for (int i = 0; i < LAB_SLOTS; i++) {
        if (t->slot[i].in_flight && strcmp(t->slot[i].id, id) == 0)
            return &t->slot[i];
    }
    return NULL;
}

int lab_step(lab_table *t, const char *id, char *point, size_t point_len)
{
    lab_slot *s;
    uint64_t seq, holds;
    struct timespec until = clock_timespec(clock_now_ns() + t->step_ms * 1000000LL);
    const char *where = "running";

    pthread_mutex_lock(&t->mu);
    s = in_flight(t, id);
    if (s == NULL || s->held < 0) {
        pthread_mutex_unlock(&t->mu);
        return -1;
    }
    seq = s->seq;
    holds = s->holds;
    s->go = true;
    pthread_cond_broadcast(&t->cv);
    for (;;) {
        if (s->seq != seq || !s->in_flight) {
            where = "done";
            break;
        }
        if (s->holds > holds && s->held >= 0) {
            where = lab_point_name((lab_point)s->held);
            break;
        }
        if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT)
            break;
    }
    snprintf(point, point_len, "%s", where);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

/* ---- JSON ---- */

static char *dump(json_t *o, int failed)
{
    char *out = NULL;

    if (o != NULL && !failed)
        out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return out;
}

char *lab_requests_json(lab_table *t)
{
    json_t *root = json_object(), *list = json_array();
    int failed = root == NULL || list == NULL;
    const lab_slot *order[LAB_SLOTS];
    int n = 0;
    int64_t now = clock_now_ns();

    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < LAB_SLOTS; i++) {
        const lab_slot *s = &t->slot[i];
        int k = n++;
        if (!s->in_flight || s->held < 0) {
            n--;
            continue;
        }
        while (k > 0 && order[k - 1]->seq > s->seq) { /* oldest first */
            order[k] = order[k - 1];
            k--;
        }
        order[k] = s;
    }
    for (int i = 0; i < n && !failed; i++) {
        const lab_slot *s = order[i];
        json_t *r = json_object();
        failed |= r == NULL;
        failed |= json_object_set_new(r, "id", json_string(s->id));
        failed |= json_object_set_new(r, "mode", json_string(s->mode));
        failed |= json_object_set_new(r, "goods_id", json_integer(s->goods_id));
        failed |= json_object_set_new(r, "point", json_string(lab_point_name((lab_point)s->held)));
        failed |=
            json_object_set_new(r, "held_ms", json_integer((now - s->held_since_ns) / 1000000));
        failed |= json_array_append_new(list, r);
    }
    pthread_mutex_unlock(&t->mu);
    failed |= json_object_set_new(root, "requests", list);
    return dump(root, failed);
}

char *lab_trace_json(lab_table *t, const char *id, bool *found)
{
    const lab_slot *s = NULL;
    json_t *root, *points;
    int failed;

    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < LAB_SLOTS; i++) {
        const lab_slot *c = &t->slot[i];
        if (c->used && strcmp(c->id, id) == 0 && (s == NULL || c->seq > s->seq))
            s = c;
    }
    *found = s != NULL;
    if (s == NULL) {
        pthread_mutex_unlock(&t->mu);
        return NULL;
    }
    root = json_object();
    points = json_array();
    failed = root == NULL || points == NULL;
    failed |= json_object_set_new(root, "id", json_string(s->id));
    failed |= json_object_set_new(root, "mode", json_string(s->mode));
    failed |= json_object_set_new(root, "goods_id", json_integer(s->goods_id));
    failed |= json_object_set_new(root, "started_wall_ms", json_integer(s->start_wall_us / 1000));
    failed |= json_object_set_new(root, "started_wall_us", json_integer(s->start_wall_us));
    failed |= json_object_set_new(root, "started_mono_ms", json_integer(s->start_ns / 1000000));
    for (int i = 0; i < s->events && !failed; i++) {
        const lab_event *e = &s->event[i];
        json_t *o = json_object();
        failed |= o == NULL;
        failed |= json_object_set_new(o, "point", json_string(lab_point_name(e->point)));
        failed |= json_object_set_new(o, "ms", json_integer(e->at_us / 1000));
        failed |= json_object_set_new(o, "wall_us", json_integer(s->start_wall_us + e->at_us));
        failed |= json_object_set_new(o, "held_ms", json_integer(e->held_ms));
        if (e->seen.has_stock)
            failed |= json_object_set_new(o, "stock", json_integer(e->seen.stock));
        if (e->seen.has_fence)
            failed |= json_object_set_new(o, "fence", json_integer(e->seen.fence));
        if (e->seen.token[0] != '\0')
            failed |= json_object_set_new(o, "token", json_string(e->seen.token));
        failed |= json_array_append_new(points, o);
    }
    failed |= json_object_set_new(root, "points", points);
    if (s->in_flight) {
        failed |= json_object_set_new(root, "done", json_false());
        failed |= json_object_set_new(root, "held_at",
                                      s->held >= 0 ? json_string(lab_point_name((lab_point)s->held))
                                                   : json_null());
    } else {
        failed |= json_object_set_new(root, "done", json_true());
        failed |= json_object_set_new(root, "status", json_integer(s->status));
        failed |= json_object_set_new(root, "outcome", json_string(s->outcome));
        failed |= json_object_set_new(root, "ms", json_integer(s->done_us / 1000));
        failed |= json_object_set_new(root, "answered_wall_us",
                                      json_integer(s->start_wall_us + s->done_us));
    }
    pthread_mutex_unlock(&t->mu);
    return dump(root, failed);
}
