/*
 * lab_routes.c - the lab's routes (lab_routes.h), each a thin layer over lab.h: check that
 * the lab is on, parse, ask the table, answer JSON.
 */
#include "service/lab_routes.h"

#include <jansson.h>
#include <string.h>

#include "service/lab.h"
#include "service/request.h"
#include "service/response.h"

#define JSON "application/json"
#define LAB_TRACE_PREFIX "/api/lab/trace/"

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
    if (request_parse_lab_step(req->body, req->body_len, id, sizeof(id), detail,
                               sizeof(detail)) != 0) {
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
        reply_body(reply, 400, response_error("bad_request",
                                              "the id must be 1 to 32 characters of A-Za-z0-9_-"));
        return;
    }
    body = lab_trace_json(a->lab, id, &found);
    if (!found)
        reply_body(reply, 404, response_error("not_found", "no trace of this id here"));
    else
        reply_body(reply, 200, body);
}
