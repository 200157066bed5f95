/*
 * lab_routes.h - the lab's HTTP side (service/lab/lab.h is the table): its three routes, and
 * what POST /api/deduct does with X-Fault: hold-at and X-Request-Id. Only on a replica
 * started with FAULTS=on (app.lab set); otherwise every route answers 400 bad_request, as
 * X-Fault does.
 */
#ifndef SERVICE_LAB_ROUTES_H
#define SERVICE_LAB_ROUTES_H

#include "service/app.h"
#include "service/http/message.h"

/* GET /api/lab/requests */
void lab_routes_requests(app *a, const http_request *req, http_reply *reply);
/* POST /api/lab/step */
void lab_routes_step(app *a, const http_request *req, http_reply *reply);
/* GET /api/lab/lock/{goods_id}?mode=RUNG: the string lock of the ladder's first rungs
 * (setnx ... owner-lua), its value and lease left; GET /api/lock/N shows the redis rungs'. */
void lab_routes_lock(app *a, const http_request *req, http_reply *reply);
/* GET /api/lab/trace/{id} */
void lab_routes_trace(app *a, const http_request *req, http_reply *reply);

#endif
