/*
 * sale_tally.c - the check's working state (sale_tally.h), and the pure arithmetic of the
 * check: the arrival-order allocation and the even split of what is left (sale.h).
 */
#include "service/sale/sale_tally.h"

#include <stdlib.h>
#include <string.h>

bool sale__pending(const sale_line *l)
{
    return !l->answered && l->twin == NULL;
}

bool sale__tally_init(sale_tally *t, const sale *s)
{
    size_t n = 0;

    memset(t, 0, sizeof(*t));
    for (size_t i = 0; i < s->n; i++)
        n += sale__pending(&s->lines[i]);
    if (n <= 1) {
        t->line = &t->one_line;
        t->counts = &t->one[0];
        t->left = &t->one[1];
        t->sold_counts = &t->one[2];
        t->order_ids = &t->one[3];
        t->sold_ids = &t->one_id;
        t->sold = &t->one_sold;
    } else {
        char *p = malloc(n * (sizeof(size_t) + 4 * sizeof(int64_t) + sizeof(char *) + 1));
        if (p == NULL)
            return false;
        t->heap = p;
        t->line = (size_t *)(void *)p;
        p += n * sizeof(size_t);
        t->counts = (int64_t *)(void *)p;
        t->left = t->counts + n;
        t->sold_counts = t->left + n;
        t->order_ids = t->sold_counts + n;
        p += 4 * n * sizeof(int64_t);
        t->sold_ids = (const char **)(void *)p;
        p += n * sizeof(char *);
        t->sold = (bool *)(void *)p;
    }
    for (size_t i = 0; i < s->n; i++)
        if (sale__pending(&s->lines[i])) {
            t->line[t->pending] = i;
            t->counts[t->pending++] = s->lines[i].count;
            t->asked += s->lines[i].count;
        }
    return true;
}

void sale__tally_free(sale_tally *t)
{
    free(t->heap);
    t->heap = NULL;
}

int64_t sale_allocate(int64_t stock, const int64_t *counts, size_t n, bool *sold, int64_t *left)
{
    size_t i;

    for (i = 0; i < n; i++) {
        sold[i] = counts[i] <= stock;
        if (sold[i])
            stock -= counts[i];
        left[i] = stock;
    }
    return stock;
}

void sale_split(int64_t total, int k, int64_t *shares)
{
    for (int i = 0; i < k; i++)
        shares[i] = total / k + (i < total % k ? 1 : 0);
}
