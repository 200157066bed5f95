/* group.c - the goods checked together (group.h): a union-find over the goods. */
#include "history/group.h"

#include <stdlib.h>
#include <string.h>

/* What the grouping works with: the distinct goods, ascending, and per goods its union-find
 * parent, then its group and its slot in it. */
struct goods_set {
    int64_t *id;
    size_t n;
    size_t *parent, *group, *slot;
    size_t ngroups;
    size_t *size; /* group -> its goods */
};

static int cmp_i64(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static size_t goods_index(const struct goods_set *gs, int64_t goods)
{
    const int64_t *p = bsearch(&goods, gs->id, gs->n, sizeof *gs->id, cmp_i64);
    return (size_t)(p - gs->id);
}

static size_t find_root(struct goods_set *gs, size_t x)
{
    while (gs->parent[x] != x) {
        gs->parent[x] = gs->parent[gs->parent[x]];
        x = gs->parent[x];
    }
    return x;
}

/* The distinct goods of h, ascending, each its own set. */
static int goods_collect(const struct history *h, struct goods_set *gs)
{
    size_t n = 0;
    gs->id = malloc((h->n + h->nitems + 1) * sizeof *gs->id);
    if (!gs->id)
        return -1;
    for (size_t i = 0; i < h->n; i++)
        if (h->ops[i].f != HIST_F_ORDER)
            gs->id[n++] = h->ops[i].goods;
    for (size_t i = 0; i < h->nitems; i++)
        gs->id[n++] = h->items[i].goods;
    qsort(gs->id, n, sizeof *gs->id, cmp_i64);
    for (size_t i = 0; i < n; i++)
        if (gs->n == 0 || gs->id[gs->n - 1] != gs->id[i])
            gs->id[gs->n++] = gs->id[i];
    gs->parent = malloc((gs->n + 1) * sizeof *gs->parent);
    gs->group = malloc((gs->n + 1) * sizeof *gs->group);
    gs->slot = malloc((gs->n + 1) * sizeof *gs->slot);
    gs->size = calloc(gs->n + 1, sizeof *gs->size);
    if (!gs->parent || !gs->group || !gs->slot || !gs->size)
        return -1;
    for (size_t i = 0; i < gs->n; i++)
        gs->parent[i] = i;
    return 0;
}

/* Joins the goods of every order, then numbers the groups by their smallest goods, and each
 * goods' slot in its group by ascending id. */
static void goods_tie(const struct history *h, struct goods_set *gs)
{
    for (size_t i = 0; i < h->n; i++) {
        const struct hist_op *op = &h->ops[i];
        if (op->f != HIST_F_ORDER)
            continue;
        size_t first = find_root(gs, goods_index(gs, op->items[0].goods));
        for (uint32_t k = 1; k < op->nitems; k++) {
            size_t r = find_root(gs, goods_index(gs, op->items[k].goods));
            if (r != first)
                gs->parent[r] = first;
        }
    }
    for (size_t i = 0; i < gs->n; i++)
        gs->group[i] = SIZE_MAX;
    for (size_t i = 0; i < gs->n; i++) {
        size_t r = find_root(gs, i);
        if (gs->group[r] == SIZE_MAX)
            gs->group[r] = gs->ngroups++;
        gs->group[i] = gs->group[r];
        gs->slot[i] = gs->size[gs->group[i]]++;
    }
}

/* The goods an operation is grouped by: its own, or an order's first item's. */
static size_t op_goods(const struct goods_set *gs, const struct hist_op *op)
{
    return goods_index(gs, op->f == HIST_F_ORDER ? op->items[0].goods : op->goods);
}

static void slots_set(const struct goods_set *gs, struct hist_op *op)
{
    if (op->f != HIST_F_ORDER)
        op->slot = (uint32_t)gs->slot[goods_index(gs, op->goods)];
    for (uint32_t k = 0; k < op->nitems; k++)
        op->items[k].slot = (uint32_t)gs->slot[goods_index(gs, op->items[k].goods)];
}

/* Sorts h->ops by group, stably (a counting sort), and fills out's groups. */
static int ops_by_group(struct history *h, const struct goods_set *gs, struct hist_groups *out)
{
    size_t *at = calloc(gs->ngroups + 1, sizeof *at);
    struct hist_op *sorted = malloc((h->n ? h->n : 1) * sizeof *sorted);
    out->g = calloc(gs->ngroups + 1, sizeof *out->g);
    out->goods = malloc((gs->n + 1) * sizeof *out->goods);
    if (!at || !sorted || !out->g || !out->goods) {
        free(at);
        free(sorted);
        return -1;
    }
    for (size_t i = 0; i < h->n; i++)
        at[gs->group[op_goods(gs, &h->ops[i])] + 1]++;
    /* The goods of group g from out->goods[first[g]]: first[g] is its first goods' index, as
     * the goods are numbered in ascending id and each group's first is met first. */
    for (size_t g = 0; g < gs->ngroups; g++)
        at[g + 1] += at[g];
    for (size_t i = 0, first = 0; i < gs->n; i++) {
        size_t g = gs->group[i];
        if (gs->slot[i] == 0) {
            out->g[g] =
                (struct hist_group){at[g], at[g + 1], (uint32_t)gs->size[g], out->goods + first};
            first += gs->size[g];
        }
        out->goods[out->g[g].goods - out->goods + gs->slot[i]] = gs->id[i];
    }
    for (size_t i = 0; i < h->n; i++) {
        struct hist_op *op = &sorted[at[gs->group[op_goods(gs, &h->ops[i])]]++];
        *op = h->ops[i];
        slots_set(gs, op);
    }
    free(h->ops);
    h->ops = sorted;
    out->n = gs->ngroups;
    free(at);
    return 0;
}

int hist_group(struct history *h, struct hist_groups *out)
{
    struct goods_set gs = {0};
    int rc = -1;
    memset(out, 0, sizeof *out);
    if (goods_collect(h, &gs) == 0) {
        goods_tie(h, &gs);
        rc = ops_by_group(h, &gs, out);
    }
    free(gs.id);
    free(gs.parent);
    free(gs.group);
    free(gs.slot);
    free(gs.size);
    if (rc != 0)
        hist_groups_free(out);
    return rc;
}

void hist_groups_free(struct hist_groups *gs)
{
    free(gs->g);
    free(gs->goods);
    memset(gs, 0, sizeof *gs);
}

/* op's item of slot, or -1. */
static int item_of(const struct hist_op *op, uint32_t slot)
{
    for (uint32_t k = 0; k < op->nitems; k++)
        if (op->items[k].slot == slot)
            return (int)k;
    return -1;
}

long hist_project(const struct hist_op *ops, size_t n, uint32_t slot, struct hist_op **out,
                  struct hist_item **items)
{
    long k = 0;
    *out = malloc((n ? n : 1) * sizeof **out);
    *items = malloc((n ? n : 1) * sizeof **items);
    if (!*out || !*items) {
        free(*out);
        free(*items);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const struct hist_op *op = &ops[i];
        if (op->f != HIST_F_ORDER) {
            if (op->slot == slot)
                (*out)[k++] = *op;
            continue;
        }
        int at = item_of(op, slot);
        if (at < 0 || (op->outcome == HIST_SOLD_OUT && op->a != at))
            continue;
        (*items)[k] = op->items[at];
        (*out)[k] = *op;
        (*out)[k].nitems = 1;
        (*out)[k].items = &(*items)[k];
        (*out)[k].a = 0;
        k++;
    }
    return k;
}
