/*
 * routes.c - the endpoints of API.md and the checks made before a body is read.
 *
 * Every handler starts from "unavailable" thinking: it fills the reply only once it knows
 * the outcome, and every reply is JSON except /metrics. Handlers never block without a
 * bound: pooled connections are waited for at most DB_WAIT_MS, the lock at most
 * LOCK_WAIT_MS, and every Redis or PostgreSQL round trip has its own timeout.
 */
#include "service/http/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lock/cache.h"
#include "service/guards/cache.h"
#include "service/clock.h"
#include "service/lab/faults.h"
#include "service/lab/lab.h"
#include "service/http/lab_routes.h"
#include "service/guards/lock_names.h"
#include "service/guards/outage.h"
#include "service/log.h"
#include "service/sale/batch.h"
#include "service/sale/deduct.h"
#include "service/sale/order.h"
#include "service/http/request.h"
#include "service/http/response.h"

#define JSON "application/json"
#define PROMETHEUS_TEXT "text/plain; version=0.0.4; charset=utf-8"
#define READYZ_DB_WAIT_MS 1000

typedef void (*handler_fn)(app *a, const http_request *req, http_reply *reply);

struct route {
    const char *path;   /* exact path, or a prefix when `prefix` */
    bool prefix;        /* the path ends in a parameter (/api/stock/{goods_id}) */
    const char *method; /* GET routes answer HEAD too */
    bool has_body;      /* POST with a JSON body: Content-Type and size are checked */
    bool admin;         /* needs the bearer token when ADMIN_TOKEN is set */
    metrics_route metric;
    handler_fn handle;
    bool waits;      /* may wait (a lock, PostgreSQL, Redis, a held request): run off the event
                        loop (routes_waits) */
    bool loop_first; /* tried on the event loop first (routes_loop_first) */
};

static void reply_json(http_reply *reply, int status, char *body)
{
    reply->status = status;
    reply->body = body;
    reply->content_type = JSON;
}

static void reply_error(http_reply *reply, int status, const char *error, const char *detail)
{
    reply_json(reply, status, response_error(error, detail));
}

/* ---- POST /api/deduct ---------------------------------------------------------------- */

/* The mode named by the body (body_mode; body_shown: as received, request_quote'd), else by
 * the query, else the replica's default. */
static const mode *choose_mode(app *a, const http_request *req, bool has_mode,
                               const char *body_mode, const char *body_shown, http_reply *reply)
{
    const char *name = has_mode ? body_mode : req->query(req->transport, "mode");
    const mode *m;
    char detail[600], known[400], shown[REQUEST_SHOWN_MAX];

    if (name == NULL)
        return a->default_mode;
    /* A row this replica does not serve (mode.needs) is unknown here, as if not built. */
    m = modes_find_served(a->core.guards, name);
    if (m == NULL) {
        char quoted[80];
        /* As received: a body's mode may hold a NUL, which `name` cannot. */
        snprintf(detail, sizeof(detail), "unknown mode %s; known modes: %s",
                 has_mode ? body_shown : request_quote(shown, sizeof(shown), name, strlen(name)),
                 modes_list_served(a->core.guards, known, sizeof(known)));
        reply_error(reply, 400, "unknown_mode", detail);
        log_event(LOG_DEBUG, "unknown_mode", "mode=%s", log_quote(quoted, sizeof(quoted), name));
    }
    return m;
}

/* Counts the deduction's answer and its waits; a sale timed stage by stage (deduct.h) also
 * counts where its time went, the handler's own since `began` beside its stages. */
static void record_deduction(app *a, const mode *m, const deduct_result *res, int64_t began)
{
    metrics_count_deduction(a->metrics, m->name, res->outcome);
    if (res->timed && res->outcome == DEDUCT_DEDUCTED) {
        int64_t json_ns = clock_now_ns() - began;
        for (int i = 0; i < DEDUCT_STAGES_; i++)
            json_ns -= res->stage_ns[i];
        metrics_observe_sale(a->metrics, m->name, res->stage_ns, json_ns);
    }
    if (res->waited)
        metrics_observe_lock_wait(a->metrics, res->wait_seconds);
    if (res->handed_off)
        metrics_observe_lock_handoff(a->metrics, res->handoff_seconds);
    if (res->batch_size > 0)
        metrics_observe_batch(a->metrics, res->batch_size);
    if (res->outcome == DEDUCT_LOCK_TIMEOUT)
        metrics_count_lock_timeout(a->metrics);
    metrics_count_optimistic_retries(a->metrics, res->retries);
    if (res->status >= 500) {
        char quoted[300];
        log_event(LOG_WARN, "deduct_failed", "mode=%s outcome=%s detail=%s", m->name,
                  deduct_outcome_name(res->outcome),
                  log_quote(quoted, sizeof(quoted), res->detail));
    }
}

/* Whether the Idempotency-Key (NULL: none) has the documented shape; answers 400 if not. */
static bool idempotency_key_ok(const char *key, http_reply *reply)
{
    if (key == NULL || request_idempotency_key_valid(key))
        return true;
    reply_error(reply, 400, "bad_request",
                "Idempotency-Key must be 1 to 128 characters of A-Za-z0-9_.:-");
    return false;
}

/* Whether the request's X-Request-Id was made by the proxy in front (nginx marks the id it
 * makes with X-Request-Id-Origin: proxy, nginx/stock.conf.template), not sent by the client:
 * such an id is fine to record and trace, but no client knows it to step a hold with. */
static bool request_id_made_by_proxy(const http_request *req)
{
    const char *origin = req->header(req->transport, "X-Request-Id-Origin");

    return origin != NULL && strcmp(origin, "proxy") == 0;
}

/* Parses an X-Fault header into *plan and the lab's hold points (*holds, lab.h); answers 400
 * and returns false when the replica was started without fault injection, the value names no
 * known fault or point, or hold-at comes without a valid X-Request-Id of the client's own
 * (one the proxy made is nobody's to step the hold with). */
static bool fault_plan_from_header(app *a, const http_request *req, const char *value,
                                   const char *request_id, fault_plan *plan, unsigned *holds,
                                   http_reply *reply)
{
    char detail[256], rest[256];

    if (strcmp(a->config->faults, "on") != 0) {
        reply_error(reply, 400, "bad_request",
                    "X-Fault: fault injection is off on this replica (it starts with FAULTS=on)");
        return false;
    }
    if (lab_split_fault(value, holds, rest, sizeof(rest), detail, sizeof(detail)) != 0) {
        reply_error(reply, 400, "bad_request", detail);
        return false;
    }
    if (*holds != 0 && !lab_request_id_valid(request_id)) {
        reply_error(reply, 400, "bad_request",
                    "X-Fault: hold-at needs X-Request-Id: 1 to 32 characters of A-Za-z0-9_-");
        return false;
    }
    if (*holds != 0 && request_id_made_by_proxy(req)) {
        reply_error(reply, 400, "bad_request",
                    "X-Fault: hold-at needs the client's own X-Request-Id (the proxy made this "
                    "request's, which no client knows to step it with)");
        return false;
    }
    if ((*holds == 0 || rest[0] != '\0') &&
        faults_parse(*holds == 0 ? value : rest, plan, detail, sizeof(detail)) != 0) {
        reply_error(reply, 400, "bad_request", detail);
        return false;
    }
    return true;
}

/* Takes the lab's place for a request with X-Fault and a valid X-Request-Id (its trace, and
 * its holds); answers and returns false when the id is in flight already or the table is
 * full. *lab_used says whether a place was taken (lab_finish it). */
static bool lab_enter(app *a, const char *request_id, const mode *m, int64_t goods_id,
                      unsigned holds, lab_run *run, bool *lab_used, http_reply *reply)
{
    int rc;

    *lab_used = false;
    if (a->lab == NULL || !lab_request_id_valid(request_id))
        return true;
    rc = lab_start(a->lab, request_id, m->name, goods_id, holds, run);
    if (rc == LAB_ERR_DUPLICATE) {
        reply_error(reply, 400, "bad_request", "X-Request-Id: a request with this id is in flight");
        return false;
    }
    if (rc == LAB_ERR_FULL) {
        reply_error(reply, 503, "unavailable", "the lab's table of requests in flight is full");
        return false;
    }
    *lab_used = true;
    return true;
}

/* After a sale ran (rc: deduct_execute_as's or order_execute's): closes its lab entry, if it
 * has one, with its answer. false when the sale could not build an answer (out of memory):
 * then the reply is a 500. */
static bool sale_answered(int rc, lab_run *lab, bool lab_used, const deduct_result *res,
                          http_reply *reply)
{
    if (lab_used)
        lab_finish(lab, rc != 0 ? 500 : res->status,
                   rc != 0 ? "internal" : deduct_outcome_name(res->outcome));
    if (rc == 0)
        return true;
    reply->status = 500;
    reply->body = NULL;
    return false;
}

/* After the answer: counts it and makes the reply. */
static void reply_deduction(app *a, const mode *m, const deduct_result *res, int64_t began,
                            http_reply *reply)
{
    record_deduction(a, m, res, began);
    reply_json(reply, res->status, res->body);
}

/* What a parked deduction keeps until its batch answers it. */
typedef struct parked_deduction {
    app *a;
    const mode *m;
    int64_t began;
    http_parked *parked;
} parked_deduction;

/* A parked deduction's answer (batch.h's batch_done), from the thread that has it. */
static void deduction_answered(void *arg, deduct_result *res)
{
    parked_deduction *p = arg;
    http_parked *parked = p->parked;

    if (res->body == NULL) /* out of memory: the carrier answers 500 */
        parked->reply->status = 500;
    else
        reply_deduction(p->a, p->m, res, p->began, parked->reply);
    free(p);
    parked->finish(parked);
}

/* A batched sale without a hook joins its batch and parks its request: no thread waits
 * for the batch (batch.h). false when it cannot park: the caller runs it as any other. */
static bool park_deduction(app *a, const http_request *req, const mode *m, const deduct_request *dr,
                           const char *key, const char *request_id, int64_t began)
{
    parked_deduction *p;

    if (!deduct_batches(&a->core.deduct, m) || req->park == NULL)
        return false;
    p = malloc(sizeof(*p));
    if (p == NULL)
        return false;
    *p = (parked_deduction){.a = a, .m = m, .began = began, .parked = req->park(req)};
    if (p->parked == NULL) {
        free(p);
        return false;
    }
    if (batch_submit(a->core.deduct.batch, &a->core.deduct, m, dr->goods_id, dr->count, key,
                     request_id, deduction_answered, p) != 0) {
        http_parked *parked = p->parked;
        parked->reply->status = 500; /* out of memory */
        free(p);
        parked->finish(parked);
    }
    return true;
}

/* On an event loop only a plain batched sale goes on, to park; anything else asks for a
 * worker, which runs the handler again from the top (nothing was changed so far). true when
 * it asked. */
static bool ask_for_worker(app *a, const http_request *req, const mode *m, bool plain,
                           http_reply *reply)
{
    if (!req->on_loop || (plain && deduct_batches(&a->core.deduct, m)))
        return false;
    reply->needs_worker = true;
    return true;
}

static void handle_deduct(app *a, const http_request *req, http_reply *reply)
{
    deduct_request dr;
    deduct_result res;
    const char *key = req->header(req->transport, "Idempotency-Key");
    const char *fault = req->header(req->transport, "X-Fault");
    const char *request_id = req->header(req->transport, "X-Request-Id");
    const char *trace = req->header(req->transport, "X-Trace");
    fault_plan plan = {0};
    fault_run run;
    lab_run lab = {0};
    unsigned holds = 0;
    bool lab_used = false;
    deduct_hook hook = {faults_at, &run, NULL};
    const mode *m;
    char detail[256], quoted[160];
    int64_t began = clock_now_ns();
    int rc;

    if (request_parse_deduct(req->body, req->body_len, &dr, detail, sizeof(detail)) != 0) {
        reply_error(reply, 400, "bad_request", detail);
        return;
    }
    if (!idempotency_key_ok(key, reply))
        return;
    reply->idempotency_key = key; /* every answer from here on carries it back */
    if (fault != NULL && !fault_plan_from_header(a, req, fault, request_id, &plan, &holds, reply))
        return;
    if ((holds & LAB_CART_POINTS) != 0) {
        /* Refused, not ignored: a hold asked for and never made would leave the learner (or
         * the ladder) waiting for a request that runs on. */
        reply_error(reply, 400, "bad_request",
                    "X-Fault: hold-at=between-locks is a cart's point (POST /api/order); a "
                    "deduction takes one lock");
        return;
    }
    if ((holds & LAB_CACHE_POINTS) != 0) {
        reply_error(reply, 400, "bad_request",
                    "X-Fault: hold-at=cache-miss-read is a cached read's point (GET "
                    "/api/stock/{goods_id}?cached=1)");
        return;
    }
    m = choose_mode(a, req, dr.has_mode, dr.mode, dr.mode_shown, reply);
    if (m == NULL)
        return;
    if (ask_for_worker(a, req, m, fault == NULL && trace == NULL, reply))
        return;
    run = (fault_run){.plan = &plan, .mode = m, .guards = a->core.guards, .goods_id = dr.goods_id};
    if (fault != NULL && !lab_enter(a, request_id, m, dr.goods_id, holds, &lab, &lab_used, reply))
        return;
    /* Without X-Fault, `X-Trace: on` with an id asks for a trace (lab.h): best effort, never
     * a refusal. Only when asked: a traced request takes the single-request path, and an id
     * alone (a load recorder's, or the one nginx makes) must not move a request off the
     * batch, the segments or the pipelined statements. */
    if (fault == NULL && a->lab != NULL && trace != NULL && strcmp(trace, "on") == 0 &&
        lab_request_id_valid(request_id))
        lab_used = lab_start(a->lab, request_id, m->name, dr.goods_id, 0, &lab) == 0;
    if (lab_used) {
        lab.faults = fault != NULL ? &run : NULL;
        hook = (deduct_hook){lab_at, &lab, &lab.stock};
    }
    if (fault != NULL)
        log_event(LOG_WARN, "fault_requested", "mode=%s goods_id=%lld fault=%s", m->name,
                  (long long)dr.goods_id, log_quote(quoted, sizeof(quoted), fault));
    /* A request id of the API's shape goes with the order (an other is no id of ours). */
    if (!lab_request_id_valid(request_id))
        request_id = NULL;
    reply->request_id = request_id; /* and, for a recorder, back with every answer */
    if (fault == NULL && !lab_used && park_deduction(a, req, m, &dr, key, request_id, began))
        return; /* answered later, by its batch (deduction_answered) */
    if (ask_for_worker(a, req, m, false, reply)) /* it could not park (out of memory) */
        return;
    rc = deduct_execute_as(&a->core.deduct, m, dr.goods_id, dr.count, key, request_id,
                           fault != NULL || lab_used ? &hook : NULL, &res);
    if (sale_answered(rc, &lab, lab_used, &res, reply))
        reply_deduction(a, m, &res, began, reply);
}

/*
 * POST /api/deduct/dry: the HTTP side of a sale and nothing else. The body is parsed and
 * the mode chosen as for /api/deduct, and the answer is built and sent, but neither
 * PostgreSQL nor Redis is touched: what a replica (and nginx in front of it) can answer
 * per second with no lock and no transaction, the ceiling the load reports divide by
 * (loadtest/scale). Served only with FAULTS=on, like every other tool that is not a sale.
 */
static void handle_deduct_dry(app *a, const http_request *req, http_reply *reply)
{
    deduct_request dr;
    const mode *m;
    char detail[256];

    if (strcmp(a->config->faults, "on") != 0) {
        reply_error(reply, 404, "not_found",
                    "POST /api/deduct/dry is served only by a replica started with FAULTS=on");
        return;
    }
    if (request_parse_deduct(req->body, req->body_len, &dr, detail, sizeof(detail)) != 0) {
        reply_error(reply, 400, "bad_request", detail);
        return;
    }
    m = choose_mode(a, req, dr.has_mode, dr.mode, dr.mode_shown, reply);
    if (m == NULL)
        return;
    reply_json(reply, 200,
               response_dry_deduct(dr.goods_id, dr.count, m->name, a->config->instance));
}

/* ---- POST /api/order ------------------------------------------------------------------ */

/* The names of the modes this replica serves that take carts, comma-separated. */
static const char *cart_modes(app *a, char *buf, size_t len)
{
    size_t n, used = 0;
    const mode *all = modes_all(&n);

    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (all[i].cart == MODE_CART_NONE || !modes_served(&all[i], a->core.guards))
            continue;
        int w = snprintf(buf + used, len - used, "%s%s", used > 0 ? ", " : "", all[i].name);
        if (w < 0 || (size_t)w >= len - used)
            break;
        used += (size_t)w;
    }
    return buf;
}

/* A cart may carry pause-between-locks (faults.h) and hold at between-locks (lab.h), with a
 * valid request_id for the hold; answers 400 for anything else. */
static bool order_fault(app *a, const http_request *req, const char *value, const char *request_id,
                        int64_t *pause_ms, unsigned *holds, http_reply *reply)
{
    fault_plan plan;

    memset(&plan, 0, sizeof(plan)); /* faults_cart_only compares it whole */
    if (!fault_plan_from_header(a, req, value, request_id, &plan, holds, reply))
        return false;
    if ((*holds & ~LAB_CART_POINTS) != 0 || !faults_cart_only(&plan)) {
        reply_error(reply, 400, "bad_request",
                    "X-Fault: POST /api/order takes only pause-between-locks=MS and "
                    "hold-at=between-locks");
        return false;
    }
    *pause_ms = plan.pause_between_locks_ms;
    return true;
}

static void handle_order(app *a, const http_request *req, http_reply *reply)
{
    order_request orq;
    deduct_result res;
    const char *key = req->header(req->transport, "Idempotency-Key");
    const char *fault = req->header(req->transport, "X-Fault");
    const char *request_id = req->header(req->transport, "X-Request-Id");
    order_faults faults = {0, NULL, NULL};
    lab_run lab = {0};
    unsigned holds = 0;
    bool lab_used = false;
    const mode *m;
    char detail[600], known[400];
    int rc;

    /* A request id of the API's shape goes back with every answer and is kept with the
     * cart's orders, for a recorder, as a deduction's is (another is no id of ours). */
    if (lab_request_id_valid(request_id))
        reply->request_id = request_id;
    if (request_parse_order(req->body, req->body_len, &orq, detail, sizeof(detail)) != 0) {
        reply_error(reply, 400, "bad_request", detail);
        return;
    }
    if (!idempotency_key_ok(key, reply))
        return;
    if (fault != NULL &&
        !order_fault(a, req, fault, request_id, &faults.pause_between_locks_ms, &holds, reply))
        return;
    m = choose_mode(a, req, orq.has_mode, orq.mode, orq.mode_shown, reply);
    if (m == NULL)
        return;
    if (m->cart == MODE_CART_NONE) {
        snprintf(detail, sizeof(detail),
                 "mode '%s' does not take orders of several goods; "
                 "modes that do: %s",
                 m->name, cart_modes(a, known, sizeof(known)));
        reply_error(reply, 400, "unknown_mode", detail);
        return;
    }
    /* As a deduction with X-Fault: a place in the lab's table (listed and traced under its
     * first goods), where it holds between its locks when asked to. */
    if (fault != NULL &&
        !lab_enter(a, request_id, m, orq.items[0].goods_id, holds, &lab, &lab_used, reply))
        return;
    if (lab_used) {
        faults.between_locks = lab_at_between_locks;
        faults.arg = &lab;
    }
    /* reply->request_id: the client's id when it has the API's shape (above), else NULL. */
    rc = order_execute(&a->core.deduct, m, orq.items, orq.n_items, key, reply->request_id,
                       fault != NULL ? &faults : NULL, &res);
    if (!sale_answered(rc, &lab, lab_used, &res, reply))
        return;
    record_deduction(a, m, &res, 0); /* a cart is not timed */
    reply_json(reply, res.status, res.body);
}

/* ---- GET /api/stock/{goods_id} and POST /api/admin/reset ------------------------------ */

/* Answers 503 for a PostgreSQL failure at `step`; conn is the connection it happened on, or
 * NULL when none could be borrowed. */
static void reply_db_failure(http_reply *reply, const db_conn *conn, const char *step, int rc)
{
    char detail[160];

    reply_error(reply, 503, "unavailable",
                outage_postgresql(rc, conn, step, detail, sizeof(detail)));
}

/* Borrows a connection within wait_ms or answers 503. */
static db_conn *borrow_connection(app *a, int64_t wait_ms, http_reply *reply)
{
    db_conn *conn = NULL;
    int rc = db_pool_acquire(a->core.db, (int)wait_ms, &conn);

    if (rc != DB_OK)
        reply_db_failure(reply, NULL, "borrow a connection", rc);
    return conn;
}

/* The {goods_id} at the end of a path that starts with `prefix`; answers 400 and returns
 * false when it is not one. */
static bool path_goods_id(const http_request *req, const char *prefix, int64_t *goods_id,
                          http_reply *reply)
{
    if (request_parse_goods_id(req->path + strlen(prefix), goods_id) != 0) {
        reply_error(reply, 400, "bad_request",
                    "goods_id must be an integer from 1 to 9223372036854775807");
        return false;
    }
    return true;
}

/* Answers 503 for a failed call of the lock client (rc) at `step`. */
static void reply_redis_failure(http_reply *reply, const char *step, int rc)
{
    char detail[160];

    reply_error(reply, 503, "unavailable", outage_redis("Redis", rc, step, detail, sizeof(detail)));
}

/* ?audit=1 adds the full ledger's sums to the report (db_stock_audit_read); absent or 0, the
 * counters alone. Anything else is refused, so that a typo does not skip an audit. */
static bool stock_audit_wanted(const http_request *req, bool *audit, http_reply *reply)
{
    const char *v = req->query(req->transport, "audit");

    *audit = v != NULL && strcmp(v, "1") == 0;
    if (v == NULL || strcmp(v, "0") == 0 || *audit)
        return true;
    reply_error(reply, 400, "bad_request", "audit must be 0 or 1");
    return false;
}

/* The cached read's miss-read point, for the lab: recorded with the stock read, held there
 * when asked (lab_reach). */
static void cache_miss_read_at(void *arg, int64_t stock)
{
    lab_seen seen = {.has_stock = true, .stock = stock};

    lab_reach(arg, LAB_AT_CACHE_MISS_READ, &seen);
}

/* A cached read takes X-Fault: hold-at=cache-miss-read and nothing else (400 otherwise). */
static bool cached_fault(app *a, const http_request *req, const char *value, const char *request_id,
                         unsigned *holds, http_reply *reply)
{
    fault_plan plan, none;

    memset(&plan, 0, sizeof(plan));
    memset(&none, 0, sizeof(none));
    if (!fault_plan_from_header(a, req, value, request_id, &plan, holds, reply))
        return false;
    if ((*holds & ~LAB_CACHE_POINTS) != 0 || memcmp(&plan, &none, sizeof(plan)) != 0) {
        reply_error(reply, 400, "bad_request",
                    "X-Fault: a cached read takes only hold-at=cache-miss-read");
        return false;
    }
    return true;
}

/* GET /api/stock/{goods_id}?cached=1&mode=MODE: the stock as the cache has it (cache.h), under
 * the mode's discipline; a mode that keeps no cache reads as CACHE_DEFAULT_MODE's. */
static void handle_cached_stock(app *a, const http_request *req, int64_t goods_id,
                                http_reply *reply)
{
    const char *fault = req->header(req->transport, "X-Fault");
    const char *request_id = req->header(req->transport, "X-Request-Id");
    cache_env env = {a->core.lock, a->core.db, a->config->db_wait_ms, a->config->lock_wait_ms};
    lab_run lab = {0};
    cache_hook hook = {cache_miss_read_at, &lab};
    unsigned holds = 0;
    bool lab_used = false, from_cache = false;
    int64_t stock = 0;
    char detail[400];
    const mode *m;
    int rc;

    if (fault != NULL && !cached_fault(a, req, fault, request_id, &holds, reply))
        return;
    m = choose_mode(a, req, false, NULL, NULL, reply);
    if (m == NULL)
        return;
    if (fault != NULL && !lab_enter(a, request_id, m, goods_id, holds, &lab, &lab_used, reply))
        return;
    if (m->cache == MODE_CACHE_NONE)
        m = modes_find(CACHE_DEFAULT_MODE);
    rc = cache_read_stock(&env, m->cache, goods_id, lab_used ? &hook : NULL, &stock, &from_cache,
                          detail, sizeof(detail));
    if (rc == CACHE_OK)
        reply_json(reply, 200, response_cached_stock(goods_id, stock, from_cache));
    else if (rc == CACHE_ERR_NOT_FOUND)
        reply_json(reply, 404, response_unknown_goods(goods_id));
    else
        reply_error(reply, 503, rc == CACHE_ERR_TIMEOUT ? "lock_timeout" : "unavailable", detail);
    if (lab_used)
        lab_finish(&lab, reply->status, rc == CACHE_OK ? (from_cache ? "cache" : "db") : "error");
}

/* ?cached=1 reads through the cache (handle_cached_stock); absent or 0, the table. */
static bool stock_cached_wanted(const http_request *req, bool *cached, http_reply *reply)
{
    const char *v = req->query(req->transport, "cached");

    *cached = v != NULL && strcmp(v, "1") == 0;
    if (v == NULL || strcmp(v, "0") == 0 || *cached)
        return true;
    reply_error(reply, 400, "bad_request", "cached must be 0 or 1");
    return false;
}

static void handle_stock(app *a, const http_request *req, http_reply *reply)
{
    db_stock_report report;
    db_stock_ledger ledger;
    db_conn *conn;
    int64_t goods_id;
    bool audit, cached;
    int rc;

    if (!path_goods_id(req, "/api/stock/", &goods_id, reply) ||
        !stock_cached_wanted(req, &cached, reply) || !stock_audit_wanted(req, &audit, reply))
        return;
    if (cached && audit) {
        reply_error(reply, 400, "bad_request", "cached=1 and audit=1 do not go together");
        return;
    }
    if (cached) {
        handle_cached_stock(a, req, goods_id, reply);
        return;
    }
    conn = borrow_connection(a, a->config->db_wait_ms, reply);
    if (conn == NULL)
        return;
    rc = audit ? db_stock_audit_read(conn, goods_id, &report, &ledger)
               : db_stock_report_read(conn, goods_id, &report);
    if (rc == DB_OK && audit)
        reply_json(reply, 200,
                   response_stock_audit(goods_id, report.initial, report.stock, report.sold,
                                        report.orders, ledger.sold, ledger.orders));
    else if (rc == DB_OK)
        reply_json(
            reply, 200,
            response_stock(goods_id, report.initial, report.stock, report.sold, report.orders));
    else if (rc == DB_ERR_NOT_FOUND)
        reply_json(reply, 404, response_unknown_goods(goods_id));
    else
        reply_db_failure(reply, conn, "read stock", rc);
    db_pool_release(a->core.db, conn);
}

static void handle_reset(app *a, const http_request *req, http_reply *reply)
{
    reset_request rr;
    db_conn *conn;
    char detail[256];
    int rc;

    if (request_parse_reset(req->body, req->body_len, &rr, detail, sizeof(detail)) != 0) {
        reply_error(reply, 400, "bad_request", detail);
        return;
    }
    conn = borrow_connection(a, a->config->db_wait_ms, reply);
    if (conn == NULL)
        return;
    rc = db_goods_reset(conn, rr.goods_id, rr.stock);
    if (rc != DB_OK)
        reply_db_failure(reply, conn, "reset", rc);
    db_pool_release(a->core.db, conn);
    if (rc != DB_OK)
        return;
    /* The cached stock (cache.h) would say the stock before the reset until its TTL, and a
     * cached read would answer it: the reset is not done until the entry is gone. Its
     * database part is, and sets the same values again when retried. */
    if (a->core.lock != NULL && (rc = cache_forget(a->core.lock, rr.goods_id)) != LOCK_OK) {
        char said[160];
        outage_redis("Redis", rc, "reset's cache delete", said, sizeof(said));
        snprintf(detail, sizeof(detail),
                 "%s: the stock was reset in PostgreSQL, but its cached stock could not be "
                 "cleared; retry the reset",
                 said);
        reply_error(reply, 503, "unavailable", detail);
        return;
    }
    reply_json(reply, 200, response_reset(rr.goods_id, rr.stock));
    log_event(LOG_INFO, "reset", "goods_id=%lld stock=%lld", (long long)rr.goods_id,
              (long long)rr.stock);
}

/* ---- GET /api/modes, /healthz, /readyz, /metrics -------------------------------------- */

static void handle_modes(app *a, const http_request *req, http_reply *reply)
{
    response_mode listed[32];
    size_t n, i, k = 0;
    const mode *all = modes_all(&n);

    (void)req;
    for (i = 0; i < n && k < sizeof(listed) / sizeof(listed[0]); i++) {
        if (!modes_served(&all[i], a->core.guards))
            continue;
        listed[k].name = all[i].name;
        listed[k].safe = all[i].safe;
        listed[k].summary = all[i].summary;
        k++;
    }
    reply_json(reply, 200, response_modes(a->default_mode->name, CACHE_DEFAULT_MODE, listed, k));
}

static void handle_healthz(app *a, const http_request *req, http_reply *reply)
{
    (void)req;
    reply_json(reply, 200, response_health(true, "alive", a->config->instance, NULL));
}

/* Ready means: not shutting down, PostgreSQL answers a query and Redis answers PING. */
static void handle_readyz(app *a, const http_request *req, http_reply *reply)
{
    db_conn *conn = NULL;
    int rc;

    (void)req;
    if (atomic_load(&a->draining)) {
        reply_error(reply, 503, "unavailable", "shutting down");
        return;
    }
    /* A readiness probe answers quickly: it does not queue behind busy requests. */
    conn = borrow_connection(a, READYZ_DB_WAIT_MS, reply);
    if (conn == NULL)
        return;
    rc = db_ping(conn);
    if (rc != DB_OK)
        reply_db_failure(reply, conn, "readiness", rc);
    db_pool_release(a->core.db, conn);
    if (rc != DB_OK)
        return;
    rc = lock_ping(a->core.lock);
    if (rc != LOCK_OK) {
        reply_redis_failure(reply, "readiness", rc);
        return;
    }
    reply_json(reply, 200, response_health(true, "ready", a->config->instance, NULL));
}

static void handle_metrics(app *a, const http_request *req, http_reply *reply)
{
    metrics_external ext = {0};
    lock_stats ls;
    db_pool_stats ds;
    struct rusage usage;

    (void)req;
    lock_get_stats(a->core.lock, &ls);
    db_pool_get_stats(a->core.db, &ds);
    ext.lock_renewals = ls.renewals;
    ext.lock_lost = ls.lost;
    ext.redis_pool_size = ls.pool_size;
    ext.redis_pool_in_use = ls.pool_in_use;
    ext.db_pool_size = ds.size;
    ext.db_pool_open = ds.open;
    ext.db_pool_in_use = ds.in_use;
    ext.http_connections = atomic_load(&a->connections);
    /* The whole process's: a connection thread that ended keeps its count here (a thread's
     * own /proc/<pid>/task/<tid>/status goes with it, and a load tool's clients cut many). */
    if (getrusage(RUSAGE_SELF, &usage) == 0) {
        ext.switches_voluntary = (uint64_t)usage.ru_nvcsw;
        ext.switches_involuntary = (uint64_t)usage.ru_nivcsw;
    }
    reply->status = 200;
    reply->body = metrics_render(a->metrics, &ext);
    reply->content_type = PROMETHEUS_TEXT;
}

/* ---- GET /api/replica, /api/lock/{goods_id}: what the live page reads ------------------ */

/* This replica's own view: its name, the process id in its Redis lock owners (so that a
 * holder seen in Redis can be told to be this replica), and its counters. No I/O. */
/* This replica's own view. pg_replication is asked of the primary itself (what Patroni has
 * set there now, not what it was told at start), waiting REPLICA_DB_WAIT_MS at most for a
 * connection (the live page polls 5 times a second and must not queue behind the sales):
 * "unknown" when none came or the statement failed. */
#define REPLICA_DB_WAIT_MS 100

static void handle_replica(app *a, const http_request *req, http_reply *reply)
{
    const char *pg_replication = "unknown";
    db_conn *conn = NULL;

    (void)req;
    if (db_pool_acquire(a->core.db, REPLICA_DB_WAIT_MS, &conn) == DB_OK) {
        (void)db_replication_mode(conn, &pg_replication);
        db_pool_release(a->core.db, conn);
    }
    reply_json(reply, 200,
               response_replica(a->config->instance, lock_client_process_id(a->core.lock),
                                a->default_mode->name, pg_replication,
                                metrics_to_json(a->metrics)));
}

/* Who holds lock:goods:N now, read from Redis in one step; one round trip, bounded by the
 * Redis command timeout. */
static void handle_lock(app *a, const http_request *req, http_reply *reply)
{
    char name[64];
    lock_holder h;
    int64_t goods_id;
    int rc;

    if (!path_goods_id(req, "/api/lock/", &goods_id, reply))
        return;
    goods_lock_name(a->core.lock, "lock:goods:", goods_id, name, sizeof(name));
    rc = lock_inspect(a->core.lock, name, &h);
    if (rc != LOCK_OK) {
        reply_redis_failure(reply, "inspect lock", rc);
        return;
    }
    reply_json(reply, 200,
               response_lock(goods_id, name, h.held, h.owner, h.count, h.ttl_ms, h.fence));
}

/* GET /api/cache/{goods_id}: what the cache holds for the goods now, for the live page: a look
 * that never fills it (a cached read's miss would). */
static void handle_cache(app *a, const http_request *req, http_reply *reply)
{
    char key[96];
    int64_t goods_id, stock = 0;
    bool hit = false;
    int rc;

    if (!path_goods_id(req, "/api/cache/", &goods_id, reply))
        return;
    cache_key(a->core.lock, goods_id, key, sizeof(key));
    rc = lock_cache_get(a->core.lock, key, &stock, &hit);
    if (rc != LOCK_OK) {
        reply_redis_failure(reply, "peek cache", rc);
        return;
    }
    reply_json(reply, 200, response_cache_peek(goods_id, key, hit, stock));
}

/* ---- the table and the checks before the body ---------------------------------------- */

static const route route_table[] = {
    {"/api/deduct", false, "POST", true, false, ROUTE_DEDUCT, handle_deduct, true, true},
    {"/api/deduct/dry", false, "POST", true, false, ROUTE_OTHER, handle_deduct_dry, false, false},
    {"/api/order", false, "POST", true, false, ROUTE_ORDER, handle_order, true, false},
    {"/api/stock/", true, "GET", false, false, ROUTE_STOCK, handle_stock, true, false},
    {"/api/admin/reset", false, "POST", true, true, ROUTE_RESET, handle_reset, true, false},
    {"/api/modes", false, "GET", false, false, ROUTE_MODES, handle_modes, false, false},
    {"/healthz", false, "GET", false, false, ROUTE_HEALTHZ, handle_healthz, false, false},
    {"/readyz", false, "GET", false, false, ROUTE_READYZ, handle_readyz, true, false},
    {"/metrics", false, "GET", false, false, ROUTE_METRICS, handle_metrics, false, false},
    {"/api/replica", false, "GET", false, false, ROUTE_REPLICA, handle_replica, true, false},
    {"/api/lock/", true, "GET", false, false, ROUTE_LOCK, handle_lock, true, false},
    {"/api/cache/", true, "GET", false, false, ROUTE_OTHER, handle_cache, true, false},
    {"/api/lab/requests", false, "GET", false, false, ROUTE_OTHER, lab_routes_requests, false,
     false},
    {"/api/lab/step", false, "POST", true, false, ROUTE_OTHER, lab_routes_step, true, false},
    {"/api/lab/trace/", true, "GET", false, false, ROUTE_OTHER, lab_routes_trace, false, false},
    {"/api/lab/lock/", true, "GET", false, false, ROUTE_OTHER, lab_routes_lock, true, false},
};

static const route *find_route(const char *path)
{
    size_t i;

    for (i = 0; i < sizeof(route_table) / sizeof(route_table[0]); i++) {
        const route *r = &route_table[i];
        if (r->prefix ? strncmp(path, r->path, strlen(r->path)) == 0 : strcmp(path, r->path) == 0)
            return r;
    }
    return NULL;
}

static bool method_allowed(const route *r, const char *method)
{
    if (strcmp(method, r->method) == 0)
        return true;
    return strcmp(r->method, "GET") == 0 && strcmp(method, "HEAD") == 0;
}

/* Whether the declared Content-Length already exceeds the limit. */
static bool declared_too_large(const http_request *req)
{
    const char *text = req->header(req->transport, "Content-Length");
    unsigned long long declared;
    char *end;

    if (text == NULL)
        return false;
    declared = strtoull(text, &end, 10);
    return end != text && declared > REQUEST_MAX_BODY;
}

const route *routes_begin(app *a, const http_request *req, metrics_route *metric_route,
                          bool *wants_body, http_reply *reply)
{
    const route *r = find_route(req->path);
    const char *content_type;

    *wants_body = false;
    *metric_route = r != NULL ? r->metric : ROUTE_OTHER;
    if (r == NULL) {
        reply_error(reply, 404, "not_found", NULL);
        return NULL;
    }
    if (!method_allowed(r, req->method)) {
        reply_error(reply, 405, "method_not_allowed", NULL);
        reply->allow = strcmp(r->method, "GET") == 0 ? "GET, HEAD" : r->method;
        return NULL;
    }
    if (r->admin && a->config->admin_token[0] != '\0' &&
        !request_bearer_matches(req->header(req->transport, "Authorization"),
                                a->config->admin_token)) {
        reply_error(reply, 401, "unauthorized", NULL);
        reply->bearer_challenge = true;
        return NULL;
    }
    if (r->has_body) {
        content_type = req->header(req->transport, "Content-Type");
        if (content_type != NULL && !request_content_type_is_json(content_type)) {
            reply_error(reply, 415, "unsupported_media_type", NULL);
            return NULL;
        }
        if (declared_too_large(req)) {
            routes_too_large(reply);
            return NULL;
        }
        *wants_body = true;
    }
    return r;
}

void routes_finish(app *a, const route *r, const http_request *req, http_reply *reply)
{
    r->handle(a, req, reply);
}

void routes_too_large(http_reply *reply)
{
    reply_error(reply, 413, "payload_too_large", NULL);
}

void routes_shed(http_reply *reply, int max_connections)
{
    char detail[160];

    snprintf(detail, sizeof(detail),
             "this replica holds %d client connections already (MAX_CONNECTIONS); nothing was "
             "sold: try again",
             max_connections);
    reply_error(reply, 503, "unavailable", detail);
}

bool routes_waits(const route *r)
{
    return r->waits;
}

bool routes_loop_first(const route *r)
{
    return r->loop_first;
}

void routes_shed_queued(http_reply *reply, int64_t waited_ms, int workers)
{
    char detail[192];

    snprintf(detail, sizeof(detail),
             "waited %lld ms for one of this replica's %d workers, past LOCK_WAIT_MS; nothing "
             "was run, nothing sold: try again",
             (long long)waited_ms, workers);
    reply_error(reply, 503, "unavailable", detail);
}
