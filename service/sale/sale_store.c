/*
 * sale_store.c - the stored answers of a sale (sale_store.h), and their reading before any
 * guard is taken (sale_replay, sale.h).
 */
#include "service/sale/sale_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sets out to the stored answer (status, body: taken over) as a replay. */
static void replayed(deduct_result *out, int status, char *body)
{
    free(out->body);
    out->status = status;
    out->body = body;
    out->outcome = DEDUCT_REPLAYED;
}

int sale__claim_keys(sale *s, const char **what)
{
    for (size_t i = 0; i < s->n; i++) {
        sale_line *l = &s->lines[i];
        int status = 0, rc;
        char *body = NULL;

        if (l->key == NULL)
            continue;
        for (size_t j = 0; j < i && l->twin == NULL; j++)
            if (s->lines[j].key != NULL && strcmp(s->lines[j].key, l->key) == 0)
                l->twin = s->lines[j].twin != NULL ? s->lines[j].twin : &s->lines[j];
        if (l->twin != NULL)
            continue; /* answered as its twin is, at the end (sale_run) */
        rc = db_idempotency_claim(s->conn, s->goods_id, l->key);
        if (rc == DB_OK)
            continue;
        if (rc != DB_ERR_CONFLICT) {
            *what = "claim idempotency key";
            return rc;
        }
        rc = db_idempotency_fetch(s->conn, s->goods_id, l->key, &status, &body);
        if (rc != DB_OK) {
            *what = "fetch idempotent answer";
            return rc;
        }
        replayed(l->out, status, body);
        l->answered = true;
    }
    return DB_OK;
}

int sale__store_answers(sale *s, const sale_tally *t)
{
    for (size_t j = 0; j < t->pending; j++) {
        sale_line *l = &s->lines[t->line[j]];
        int rc;

        if (l->key == NULL)
            continue;
        rc = db_idempotency_store(s->conn, s->goods_id, l->key, l->out->status, l->out->body);
        if (rc != DB_OK)
            return rc;
    }
    return DB_OK;
}

void sale__forget_answers(sale *s)
{
    for (size_t i = 0; i < s->n; i++) {
        deduct_result *out = s->lines[i].out;
        free(out->body);
        out->body = NULL;
        out->status = 0;
        out->outcome = DEDUCT_NO_OUTCOME;
        s->lines[i].answered = false;
        s->lines[i].twin = NULL;
    }
}

void sale__answer_twins(sale *s)
{
    for (size_t i = 0; i < s->n; i++) {
        deduct_result *out = s->lines[i].out;
        const deduct_result *first;

        if (s->lines[i].twin == NULL)
            continue;
        first = s->lines[i].twin->out;
        free(out->body);
        snprintf(out->detail, sizeof(out->detail), "%s", first->detail);
        out->status = first->status;
        out->outcome = first->status < 500 ? DEDUCT_REPLAYED : first->outcome;
        out->body = first->body != NULL ? strdup(first->body) : NULL;
    }
}

bool sale_replay(db_conn *conn, int64_t goods_id, const char *key, deduct_result *out)
{
    char *body = NULL;
    int status = 0;

    if (db_idempotency_fetch(conn, goods_id, key, &status, &body) != DB_OK)
        return false;
    replayed(out, status, body);
    return true;
}
