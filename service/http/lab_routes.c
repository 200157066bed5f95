/*
 * lab_routes.c - the lab's routes (lab_routes.h), each a thin layer over lab.h: check that
 * the lab is on, parse, ask the table, answer JSON.
 */
#include "service/http/lab_routes.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "lock/naive.h"

#include "service/lab/lab.h"
#include "service/guards/lock_names.h"
#include "service/guards/outage.h"
#include "service/http/request.h"
#include "service/http/response.h"

#define JSON "application/json"
#define LAB_TRACE_PREFIX "/api/lab/trace/"
#define LAB_LOCK_PREFIX "/api/lab/lock/"

static void reply_body(http_reply *reply, int status, char *body)
{
    reply->status = body != NULL ? status : 500;
    reply->body = body;
    reply->content_type = JSON;
}

/* Answers 400 and returns false when this replica runs without fault injection. */
static bool lab_on(const app *a, http_reply *reply)
{
    if (a->lab != NULL)
        return true;
    reply_body(reply, 400,
               response_error("bad_request", "the lab is off on this replica (it starts with "
                                             "FAULTS=on)"));
    return false;
}

void lab_routes_requests(app *a, const http_request *req, http_reply *reply)
{
    (void)req;
    if (lab_on(a, reply))
        reply_body(reply, 200, lab_requests_json(a->lab));
}

void lab_routes_step(app *a, const http_request *req, http_reply *reply)
{
    char id[LAB_ID_MAX + 1], point[16], detail[256];
    json_t *body;

    if (!lab_on(a, reply))
        return;
    if (request_parse_lab_step(req->body, req->body_len, id, sizeof(id), detail, sizeof(detail)) !=
        0) {
        reply_body(reply, 400, response_error("bad_request", detail));
        return;
    }
    if (lab_step(a->lab, id, point, sizeof(point)) != 0) {
        reply_body(reply, 404, response_error("not_found", "no request with this id is held here"));
        return;
    }
    body = json_pack("{s:s, s:s}", "id", id, "point", point);
    reply_body(reply, 200, body != NULL ? json_dumps(body, JSON_COMPACT) : NULL);
    json_decref(body);
}

void lab_routes_trace(app *a, const http_request *req, http_reply *reply)
{
    const char *id = req->path + strlen(LAB_TRACE_PREFIX);
    bool found = false;
    char *body;

    if (!lab_on(a, reply))
        return;
    if (!lab_request_id_valid(id)) {
        reply_body(
            reply, 400,
            response_error("bad_request", "the id must be 1 to 32 characters of A-Za-z0-9_-"));
        return;
    }
    body = lab_trace_json(a->lab, id, &found);
    if (!found)
        reply_body(reply, 404, response_error("not_found", "no trace of this id here"));
    else
        reply_body(reply, 200, body);
}

/* The rungs whose lock is a plain Redis string, lock:<rung>:goods:N (service/guards/guards_poll.c).
 */
static bool string_lock_rung(const char *name)
{
    static const char *const rungs[] = {"setnx", "setnx-ttl", "owner-get-del", "owner-lua"};

    for (size_t i = 0; i < sizeof(rungs) / sizeof(rungs[0]); i++) {
        if (strcmp(name, rungs[i]) == 0)
            return true;
    }
    return false;
}

void lab_routes_lock(app *a, const http_request *req, http_reply *reply)
{
    const char *rung = req->query(req->transport, "mode");
    char name[96], prefix[48], value[96];
    int64_t goods_id, ttl_ms = -2;
    bool found = false;
    json_t *body;
    int rc;

    if (!lab_on(a, reply))
        return;
    if (request_parse_goods_id(req->path + strlen(LAB_LOCK_PREFIX), &goods_id) != 0) {
        reply_body(reply, 400,
                   response_error("bad_request", "goods_id must be an integer from 1 to "
                                                 "9223372036854775807"));
        return;
    }
    if (rung == NULL || !string_lock_rung(rung)) {
        reply_body(reply, 400,
                   response_error("bad_request", "mode must be one of setnx, setnx-ttl, "
                                                 "owner-get-del, owner-lua (the redis rungs: "
                                                 "GET /api/lock/{goods_id})"));
        return;
    }
    snprintf(prefix, sizeof(prefix), "lock:%s:goods:", rung);
    goods_lock_name(a->core.lock, prefix, goods_id, name, sizeof(name));
    rc = naive_get(a->core.lock, name, value, sizeof(value), &found);
    if (rc == LOCK_OK && found)
        rc = naive_pttl(a->core.lock, name, &ttl_ms);
    if (rc != LOCK_OK) {
        char detail[160];
        reply_body(reply, 503,
                   response_error("unavailable",
                                  outage_redis("Redis", rc, "lab lock", detail, sizeof(detail))));
        return;
    }
    body = json_pack("{s:I, s:s, s:b, s:s?, s:I}", "goods_id", (json_int_t)goods_id, "lock", name,
                     "held", found && ttl_ms != -2, "value", found ? value : NULL, "ttl_ms",
                     (json_int_t)(found ? ttl_ms : -2));
    reply_body(reply, 200, body != NULL ? json_dumps(body, JSON_COMPACT) : NULL);
    json_decref(body);
}
