/* group.h - the goods checked together: each goods alone, or the goods orders tie.
 *
 * HISTORY: goods that no order ties are checked alone (each goods' stock constrains no other's,
 * P-compositionality), and goods tied by orders (two goods are tied when one order names both,
 * and ties chain) are checked together, their state the vector of their stocks. The groups
 * are the classes of a union-find over the goods, each order joining its items' goods. A
 * group's goods are numbered 0, 1, ... in ascending id: its slots (history.h). */
#ifndef HISTORY_GROUP_H
#define HISTORY_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "history/history.h"

struct hist_group {
    size_t lo, hi;        /* its operations: ops[lo .. hi) */
    uint32_t nslots;      /* its goods */
    const int64_t *goods; /* their ids, ascending: goods[slot] */
};

struct hist_groups {
    struct hist_group *g; /* by their smallest goods id */
    size_t n;
    int64_t *goods; /* every group's goods, group after group */
};

/* Reorders h->ops group by group (within a group, the order they had), sets every
 * operation's and every item's slot, and fills *out (free it with hist_groups_free). A
 * register history (goods 0 everywhere) is one group of one slot. Returns 0, or -1 when out
 * of memory (h unchanged then). */
int hist_group(struct history *h, struct hist_groups *out);

void hist_groups_free(struct hist_groups *gs);

/* The projection of a group's operations ops[0..n) on one of its goods (slot): the operations
 * that act on it, an order reduced to its item of that goods (an order refused for another
 * goods' shortage left out: it changed nothing here). Any order of the group's operations
 * gives an order of the projection, so a projection that no order explains proves the group
 * has none; checking each goods' projection first finds such a goods at the cost of a goods
 * checked alone. Fills *out (n operations at most) and *items (one per order), both to be
 * freed by the caller; returns the count, or -1 when out of memory. */
long hist_project(const struct hist_op *ops, size_t n, uint32_t slot, struct hist_op **out,
                  struct hist_item **items);

#endif
