/* search.c - the Wing-Gong-Lowe search (search.h).
 *
 * The list is an array of nodes linked both ways (a head and a tail sentinel around them), so
 * that taking an operation's two nodes out (lifting it) and putting them back (unlifting it)
 * are O(1) each, in the reverse order of the lifting, which the stack guarantees.
 *
 * The state is the group's vector (model.h): an operation changes only its own goods' slots,
 * so a step saves those words on an undo stack and an undo copies them back. The memo holds
 * (set, state) pairs as three 64-bit words. The set is a 128-bit Zobrist hash (each operation
 * has two random 64-bit words, XORed in when it is linearized and out when it is undone) and
 * the state a 64-bit hash of the vector kept the same way (each slot's words mixed with its
 * index, XORed in and out as the slot changes), instead of a bitset of every operation and
 * a copy of every stock: 24 bytes a pair, which is what lets a history of 10^5 operations be
 * checked in memory. Two different sets share a hash with a probability of about p^2 / 2^128
 * for p pairs (10^-26 at 10^6 pairs), and two states of one set share one with about q^2 /
 * 2^64 for the q states the search meets with that set (a handful); either collision could
 * only make the search skip a branch it should have explored.
 *
 * The stock model's pruning (model.h, `need`), per goods: while no reset of a goods is left,
 * an ok sale that needs its stock at r + count, or a read that needs s, can never be
 * linearized once the stock's ceiling is below that. Each goods keeps its needs sorted, with a
 * cursor on the highest one not linearized; a step that brings a goods' ceiling below it is
 * refused at once instead of being discovered dead many steps later (most choices the search
 * can get wrong in a load history, taking an info deduct too early above all, die here). */
#include "history/search.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double hist_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- the memo: open addressing; h1 is never 0 (its low bit is forced), so 0 marks a free
 * slot. */

struct memo_slot {
    uint64_t h1, h2, state;
};

struct memo {
    struct memo_slot *slots;
    size_t cap, n;
};

static size_t memo_index(const struct memo *mm, uint64_t h1, uint64_t h2, uint64_t state)
{
    uint64_t x = h1 ^ (h2 * 0x9E3779B97F4A7C15ull) ^ (state * 0xC2B2AE3D27D4EB4Full);
    x ^= x >> 29;
    return (size_t)x & (mm->cap - 1);
}

static int memo_grow(struct memo *mm)
{
    struct memo bigger = {.cap = mm->cap ? mm->cap * 2 : 1 << 12};
    bigger.slots = calloc(bigger.cap, sizeof *bigger.slots);
    if (!bigger.slots)
        return -1;
    for (size_t i = 0; i < mm->cap; i++) {
        const struct memo_slot *s = &mm->slots[i];
        if (!s->h1)
            continue;
        size_t j = memo_index(&bigger, s->h1, s->h2, s->state);
        while (bigger.slots[j].h1)
            j = (j + 1) & (bigger.cap - 1);
        bigger.slots[j] = *s;
        bigger.n++;
    }
    free(mm->slots);
    *mm = bigger;
    return 0;
}

/* 1: inserted (new), 0: was there, -1: out of memory. */
static int memo_add(struct memo *mm, uint64_t h1, uint64_t h2, uint64_t state)
{
    if ((mm->n + 1) * 2 > mm->cap && memo_grow(mm) != 0)
        return -1;
    h1 |= 1;
    size_t j = memo_index(mm, h1, h2, state);
    while (mm->slots[j].h1) {
        const struct memo_slot *s = &mm->slots[j];
        if (s->h1 == h1 && s->h2 == h2 && s->state == state)
            return 0;
        j = (j + 1) & (mm->cap - 1);
    }
    mm->slots[j] = (struct memo_slot){h1, h2, state};
    mm->n++;
    return 1;
}

/* ---- the list of the required operations' invocations and completions, in time order. */

struct entry {
    int64_t time;
    uint32_t op;
    bool ret;
};

static int cmp_entries(const void *pa, const void *pb)
{
    const struct entry *a = pa, *b = pb;
    if (a->time != b->time)
        return a->time < b->time ? -1 : 1;
    if (a->ret != b->ret) /* at equal times the invocation first: equal means concurrent */
        return a->ret ? 1 : -1;
    return (a->op > b->op) - (a->op < b->op);
}

struct list {
    struct entry *ent;             /* entry k is node k + 1 */
    int32_t *next, *prev;          /* node 0 is the head, node ne + 1 the tail */
    int32_t *call_node, *ret_node; /* op -> its nodes (-1: optional, not in the list) */
    int32_t head, tail;
    size_t required;
};

static int list_build(struct list *l, const struct hist_op *ops, size_t n)
{
    size_t ne = 0;
    l->ent = malloc(2 * n * sizeof *l->ent);
    l->next = malloc((2 * n + 2) * sizeof *l->next);
    l->prev = malloc((2 * n + 2) * sizeof *l->prev);
    l->call_node = malloc(n * sizeof *l->call_node);
    l->ret_node = malloc(n * sizeof *l->ret_node);
    if (!l->ent || !l->next || !l->prev || !l->call_node || !l->ret_node)
        return -1;
    for (size_t i = 0; i < n; i++) {
        l->call_node[i] = l->ret_node[i] = -1;
        if (ops[i].outcome == HIST_UNKNOWN)
            continue;
        l->ent[ne++] = (struct entry){ops[i].call, (uint32_t)i, false};
        l->ent[ne++] = (struct entry){ops[i].ret, (uint32_t)i, true};
        l->required++;
    }
    qsort(l->ent, ne, sizeof *l->ent, cmp_entries);
    l->head = 0;
    l->tail = (int32_t)ne + 1;
    for (int32_t k = 0; k <= (int32_t)ne; k++) {
        l->next[k] = k + 1;
        l->prev[k + 1] = k;
    }
    for (size_t k = 0; k < ne; k++) {
        if (l->ent[k].ret)
            l->ret_node[l->ent[k].op] = (int32_t)k + 1;
        else
            l->call_node[l->ent[k].op] = (int32_t)k + 1;
    }
    return 0;
}

static void list_free(struct list *l)
{
    free(l->ent);
    free(l->next);
    free(l->prev);
    free(l->call_node);
    free(l->ret_node);
}

static void node_out(struct list *l, int32_t k)
{
    l->next[l->prev[k]] = l->next[k];
    l->prev[l->next[k]] = l->prev[k];
}

static void node_back(struct list *l, int32_t k)
{
    l->next[l->prev[k]] = k;
    l->prev[l->next[k]] = k;
}

/* ---- optional operations live outside the list, in classes of interchangeable ones (same
 * f, goods and arguments), each in invocation order. Of a class only the first not
 * linearized is a candidate (search.h), so a class is a queue: k[c] of its members are
 * linearized. A member is a candidate while its invocation precedes the list's first
 * completion. Keeping them out of the list spares every walk from passing over the optional
 * operations that never take effect, which in a load history are most of them. */

struct classes {
    uint32_t *members; /* every class' members, class after class */
    size_t *start;     /* class c: members[start[c] .. start[c + 1]) */
    size_t *k;         /* how many of class c are linearized */
    uint32_t *of;      /* op -> its class */
    size_t n;
};

/* Whether two optional operations have the same effect wherever they take it. */
static bool same_effect(const struct hist_op *x, const struct hist_op *y)
{
    if (x->f != y->f || x->a != y->a || x->b != y->b || x->slot != y->slot ||
        x->nitems != y->nitems)
        return false;
    for (uint32_t k = 0; k < x->nitems; k++)
        if (x->items[k].slot != y->items[k].slot || x->items[k].count != y->items[k].count)
            return false;
    return true;
}

/* Puts each optional operation in a class (cl->of), keeping each class' first member in rep. */
static int classes_assign(const struct hist_op *ops, size_t n, struct classes *cl)
{
    size_t cap = 16;
    uint32_t *rep = malloc(cap * sizeof *rep);
    cl->of = malloc(n * sizeof *cl->of);
    if (!rep || !cl->of) {
        free(rep);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (ops[i].outcome != HIST_UNKNOWN)
            continue;
        size_t c = 0;
        while (c < cl->n && !same_effect(&ops[rep[c]], &ops[i]))
            c++;
        if (c == cl->n) {
            if (cl->n == cap) {
                uint32_t *bigger = realloc(rep, 2 * cap * sizeof *rep);
                if (!bigger) {
                    free(rep);
                    return -1;
                }
                rep = bigger;
                cap *= 2;
            }
            rep[cl->n++] = (uint32_t)i;
        }
        cl->of[i] = (uint32_t)c;
    }
    free(rep);
    return 0;
}

static int classes_build(const struct hist_op *ops, size_t n, struct classes *cl)
{
    if (classes_assign(ops, n, cl) != 0)
        return -1;
    size_t *count = calloc(cl->n + 1, sizeof *count);
    cl->members = malloc((n ? n : 1) * sizeof *cl->members);
    cl->start = calloc(cl->n + 1, sizeof *cl->start);
    cl->k = calloc(cl->n + 1, sizeof *cl->k);
    if (!count || !cl->members || !cl->start || !cl->k) {
        free(count);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (ops[i].outcome == HIST_UNKNOWN)
            cl->start[cl->of[i] + 1]++;
    for (size_t c = 0; c < cl->n; c++)
        cl->start[c + 1] += cl->start[c];
    for (size_t i = 0; i < n; i++)
        if (ops[i].outcome == HIST_UNKNOWN) {
            uint32_t c = cl->of[i];
            cl->members[cl->start[c] + count[c]++] = (uint32_t)i;
        }
    free(count);
    return 0;
}

static void classes_free(struct classes *cl)
{
    free(cl->members);
    free(cl->start);
    free(cl->k);
    free(cl->of);
}

/* ---- the pruning on needed stocks (above). An entry is one goods of one operation: op i's
 * are first[i] .. first[i + 1]. */

struct prune {
    bool on;
    size_t *efirst;   /* op -> its first entry (n + 1 of them) */
    int64_t *need;    /* entry -> the stock it needs (HIST_STATE_ANY: none) */
    uint32_t *eop;    /* entry -> its op */
    uint32_t *byneed; /* the entries with a need, slot by slot, highest need first */
    size_t *sfirst;   /* slot s: byneed[sfirst[s] .. sfirst[s + 1]) */
    size_t *top;      /* slot s: byneed[top[s]], the highest not linearized (sfirst[s+1]: none) */
    size_t *pos;      /* entry -> its place in byneed, SIZE_MAX if none */
    size_t *raising;  /* slot -> operations left that raise it */
    const struct hist_op *ops;
};

static int cmp_byneed(const void *pa, const void *pb, void *arg)
{
    const struct prune *p = arg;
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    uint32_t sa = hist_op_slot(&p->ops[p->eop[a]], (uint32_t)(a - p->efirst[p->eop[a]]));
    uint32_t sb = hist_op_slot(&p->ops[p->eop[b]], (uint32_t)(b - p->efirst[p->eop[b]]));
    if (sa != sb)
        return sa < sb ? -1 : 1;
    return (p->need[a] < p->need[b]) - (p->need[a] > p->need[b]);
}

/* The entries and their needs; byneed unsorted (prune_build sorts it). */
static int prune_entries(struct prune *p, const struct hist_model *m, const struct hist_op *ops,
                         size_t n, size_t *cnt)
{
    p->efirst = malloc((n + 1) * sizeof *p->efirst);
    if (!p->efirst)
        return -1;
    p->efirst[0] = 0;
    for (size_t i = 0; i < n; i++)
        p->efirst[i + 1] = p->efirst[i] + hist_op_width(&ops[i]);
    size_t ne = p->efirst[n];
    p->need = malloc((ne ? ne : 1) * sizeof *p->need);
    p->eop = malloc((ne ? ne : 1) * sizeof *p->eop);
    p->byneed = malloc((ne ? ne : 1) * sizeof *p->byneed);
    p->pos = malloc((ne ? ne : 1) * sizeof *p->pos);
    if (!p->need || !p->eop || !p->byneed || !p->pos)
        return -1;
    *cnt = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t e = p->efirst[i]; e < p->efirst[i + 1]; e++) {
            p->eop[e] = (uint32_t)i;
            p->pos[e] = SIZE_MAX;
            p->need[e] = m->need(&ops[i], (uint32_t)(e - p->efirst[i]));
            if (p->need[e] != HIST_STATE_ANY)
                p->byneed[(*cnt)++] = (uint32_t)e;
        }
    return 0;
}

static int prune_build(struct prune *p, const struct hist_model *m, const struct hist_op *ops,
                       size_t n, uint32_t nslots)
{
    size_t cnt;
    if (!m->need || !m->ceiling || !m->raises)
        return 0;
    p->on = true;
    p->ops = ops;
    p->sfirst = calloc(nslots + 1, sizeof *p->sfirst);
    p->top = calloc(nslots, sizeof *p->top);
    p->raising = calloc(nslots, sizeof *p->raising);
    if (!p->sfirst || !p->top || !p->raising || prune_entries(p, m, ops, n, &cnt) != 0)
        return -1;
    qsort_r(p->byneed, cnt, sizeof *p->byneed, cmp_byneed, p);
    for (size_t k = 0; k < cnt; k++) {
        uint32_t e = p->byneed[k], i = p->eop[e];
        p->pos[e] = k;
        p->sfirst[hist_op_slot(&ops[i], (uint32_t)(e - p->efirst[i])) + 1]++;
    }
    for (uint32_t s = 0; s < nslots; s++) {
        p->sfirst[s + 1] += p->sfirst[s];
        p->top[s] = p->sfirst[s];
    }
    for (size_t i = 0; i < n; i++)
        if (m->raises(&ops[i]))
            p->raising[ops[i].slot]++;
    return 0;
}

static void prune_free(struct prune *p)
{
    free(p->efirst);
    free(p->need);
    free(p->eop);
    free(p->byneed);
    free(p->sfirst);
    free(p->top);
    free(p->pos);
    free(p->raising);
}

/* op was just linearized (lin[op] set): moves the cursors past it. */
static void prune_take(struct prune *p, const struct hist_model *m, uint32_t op, const bool *lin)
{
    const struct hist_op *o = &p->ops[op];
    for (size_t e = p->efirst[op]; e < p->efirst[op + 1]; e++) {
        uint32_t s = hist_op_slot(o, (uint32_t)(e - p->efirst[op]));
        if (p->pos[e] == p->top[s])
            while (p->top[s] < p->sfirst[s + 1] && lin[p->eop[p->byneed[p->top[s]]]])
                p->top[s]++;
    }
    if (m->raises(o))
        p->raising[o->slot]--;
}

/* op is no longer linearized: its needs are pending again. */
static void prune_give_back(struct prune *p, const struct hist_model *m, uint32_t op)
{
    const struct hist_op *o = &p->ops[op];
    for (size_t e = p->efirst[op]; e < p->efirst[op + 1]; e++) {
        uint32_t s = hist_op_slot(o, (uint32_t)(e - p->efirst[op]));
        if (p->pos[e] != SIZE_MAX && p->pos[e] < p->top[s])
            p->top[s] = p->pos[e];
    }
    if (m->raises(o))
        p->raising[o->slot]++;
}

/* Whether the state st, just stepped by op, leaves some goods of op below a need that
 * nothing can raise it to again. */
static bool prune_dead(const struct prune *p, const struct hist_model *m, uint32_t op,
                       const int64_t *st)
{
    const struct hist_op *o = &p->ops[op];
    for (uint32_t k = 0; k < hist_op_width(o); k++) {
        uint32_t s = hist_op_slot(o, k);
        if (p->raising[s] == 0 && p->top[s] < p->sfirst[s + 1] &&
            m->ceiling(st + (size_t)s * m->words) < p->need[p->byneed[p->top[s]]])
            return true;
    }
    return false;
}

/* ---- the search itself. */

struct frame {
    uint32_t op;
    int32_t front;  /* the list's first completion node when op was chosen */
    uint64_t state; /* the state's hash before op */
};

struct search {
    const struct hist_model *m;
    const struct hist_op *ops;
    size_t n;
    struct list l;
    struct classes cl;
    struct prune pr;
    struct memo mm;
    uint64_t *z; /* op i's two Zobrist words: z[2i], z[2i + 1] */
    bool *lin;   /* op -> linearized */
    struct frame *stack;
    size_t sp;
    int64_t *st;   /* the state, m->words per slot */
    int64_t *undo; /* the words each linearized op overwrote, stack order */
    size_t undo_top;
    uint64_t h1, h2, sh; /* the set's hash, the state's */
    size_t left;         /* required operations not linearized */
};

/* Where the walk is: list nodes from cur until the first completion (front), then the
 * optional classes from cls. */
struct walk {
    int32_t cur, front;
    size_t cls;
};

/* One slot's words, mixed with its index: the state's hash is the XOR of its slots'. */
static uint64_t slot_hash(const int64_t *words, unsigned nwords, uint32_t slot)
{
    uint64_t x = 0x243F6A8885A308D3ull ^ slot;
    for (unsigned w = 0; w < nwords; w++) {
        x ^= (uint64_t)words[w];
        x = splitmix(&x);
    }
    return x;
}

static int search_init(struct search *s, const struct hist_model *m, bool any, uint32_t nslots,
                       const struct hist_op *ops, size_t n)
{
    size_t words = 0;
    s->m = m;
    s->ops = ops;
    s->n = n;
    for (size_t i = 0; i < n; i++)
        words += (size_t)hist_op_width(&ops[i]) * m->words;
    s->z = malloc(2 * n * sizeof *s->z);
    s->lin = calloc(n, sizeof *s->lin);
    s->stack = malloc(n * sizeof *s->stack);
    s->st = malloc((size_t)nslots * m->words * sizeof *s->st);
    s->undo = malloc((words ? words : 1) * sizeof *s->undo);
    if (!s->z || !s->lin || !s->stack || !s->st || !s->undo || list_build(&s->l, ops, n) != 0 ||
        classes_build(ops, n, &s->cl) != 0 || prune_build(&s->pr, m, ops, n, nslots) != 0)
        return -1;
    uint64_t seed = 0x5EED5EED12345678ull;
    for (size_t i = 0; i < 2 * n; i++)
        s->z[i] = splitmix(&seed);
    for (uint32_t k = 0; k < nslots; k++) {
        m->start(s->st + (size_t)k * m->words, any);
        s->sh ^= slot_hash(s->st + (size_t)k * m->words, m->words, k);
    }
    s->left = s->l.required;
    return memo_add(&s->mm, 0, 0, s->sh) < 0 ? -1 : 0;
}

static void search_free(struct search *s)
{
    list_free(&s->l);
    classes_free(&s->cl);
    prune_free(&s->pr);
    free(s->mm.slots);
    free(s->z);
    free(s->lin);
    free(s->stack);
    free(s->st);
    free(s->undo);
}

/* The next candidate of the walk: 1 with *op, 0 when every candidate was tried. */
static int next_candidate(const struct search *s, struct walk *w, uint32_t *op)
{
    const struct list *l = &s->l;
    if (w->front < 0) {
        if (w->cur != l->tail && !l->ent[w->cur - 1].ret) {
            *op = l->ent[w->cur - 1].op;
            w->cur = l->next[w->cur];
            return 1;
        }
        w->front = w->cur;
        w->cls = 0;
    }
    while (w->cls < s->cl.n) {
        size_t c = w->cls++, k = s->cl.start[c] + s->cl.k[c];
        if (k >= s->cl.start[c + 1])
            continue;
        *op = s->cl.members[k];
        if (w->front == l->tail || s->ops[*op].call <= l->ent[w->front - 1].time)
            return 1;
    }
    return 0;
}

/* Copies op's slots between the state and the undo stack's top (save: to the stack). */
static void slots_copy(struct search *s, uint32_t op, bool save)
{
    const struct hist_op *o = &s->ops[op];
    size_t at = s->undo_top, words = s->m->words;
    for (uint32_t k = 0; k < hist_op_width(o); k++, at += words) {
        int64_t *slot = s->st + (size_t)hist_op_slot(o, k) * words;
        if (save)
            memcpy(s->undo + at, slot, words * sizeof *slot);
        else
            memcpy(slot, s->undo + at, words * sizeof *slot);
    }
}

/* The state's hash once op's slots went from the words saved on the undo stack's top to the
 * current ones; *same: whether none of them changed. */
static uint64_t stepped_hash(const struct search *s, uint32_t op, bool *same)
{
    const struct hist_op *o = &s->ops[op];
    unsigned words = s->m->words;
    uint64_t h = s->sh;
    *same = true;
    for (uint32_t k = 0; k < hist_op_width(o); k++) {
        uint32_t slot = hist_op_slot(o, k);
        const int64_t *cur = s->st + (size_t)slot * words;
        const int64_t *old = s->undo + s->undo_top + (size_t)k * words;
        if (memcmp(cur, old, words * sizeof *cur) == 0)
            continue;
        *same = false;
        h ^= slot_hash(old, words, slot) ^ slot_hash(cur, words, slot);
    }
    return h;
}

/* Takes op out of what is left to linearize: its two nodes, or its place in its class. */
static void lift(struct search *s, uint32_t op)
{
    if (s->ops[op].outcome == HIST_UNKNOWN) {
        s->cl.k[s->cl.of[op]]++;
        return;
    }
    node_out(&s->l, s->l.call_node[op]);
    node_out(&s->l, s->l.ret_node[op]);
    s->left--;
}

/* Puts op back, the reverse of lift. */
static void unlift(struct search *s, uint32_t op)
{
    if (s->ops[op].outcome == HIST_UNKNOWN) {
        s->cl.k[s->cl.of[op]]--;
        return;
    }
    node_back(&s->l, s->l.ret_node[op]);
    node_back(&s->l, s->l.call_node[op]);
    s->left++;
}

/* Tries op as the next operation to take effect, chosen with the walk's front at front.
 * Returns 1 (linearized: pushed), 0 (refused: the state is as it was), 2 (the memo met
 * lim->max_states), -1 (out of memory). */
static int try_op(struct search *s, uint32_t op, int32_t front,
                  const struct hist_search_limits *lim)
{
    const struct hist_op *o = &s->ops[op];
    bool same;
    slots_copy(s, op, true);
    if (!s->m->step(s->st, o))
        return 0;
    uint64_t sh = stepped_hash(s, op, &same);
    /* An optional operation that changes nothing but the set is not taken (now): not taking
     * it keeps every possibility open. */
    if (same && o->outcome == HIST_UNKNOWN)
        goto refused;
    s->lin[op] = true;
    if (s->pr.on) {
        prune_take(&s->pr, s->m, op, s->lin);
        if (prune_dead(&s->pr, s->m, op, s->st))
            goto given_back;
    }
    uint64_t h1 = s->h1 ^ s->z[2 * op], h2 = s->h2 ^ s->z[2 * op + 1];
    int added = memo_add(&s->mm, h1, h2, sh);
    if (added < 0)
        return -1;
    if (added == 0)
        goto given_back;
    if (lim && lim->max_states && s->mm.n > lim->max_states)
        return 2;
    s->stack[s->sp++] = (struct frame){op, front, s->sh};
    s->undo_top += (size_t)hist_op_width(o) * s->m->words;
    s->h1 = h1;
    s->h2 = h2;
    s->sh = sh;
    lift(s, op);
    return 1;
given_back:
    s->lin[op] = false;
    if (s->pr.on)
        prune_give_back(&s->pr, s->m, op);
refused:
    slots_copy(s, op, false);
    return 0;
}

/* Undoes the last choice, and sets the walk to go on after it. */
static void undo_last(struct search *s, struct walk *w)
{
    struct frame f = s->stack[--s->sp];
    const struct hist_op *o = &s->ops[f.op];
    s->undo_top -= (size_t)hist_op_width(o) * s->m->words;
    slots_copy(s, f.op, false);
    s->sh = f.state;
    s->h1 ^= s->z[2 * f.op];
    s->h2 ^= s->z[2 * f.op + 1];
    s->lin[f.op] = false;
    if (s->pr.on)
        prune_give_back(&s->pr, s->m, f.op);
    unlift(s, f.op);
    if (o->outcome == HIST_UNKNOWN) {
        w->front = f.front;
        w->cls = s->cl.of[f.op] + 1;
    } else {
        w->cur = s->l.next[s->l.call_node[f.op]];
        w->front = -1;
    }
}

/* The walk until every required operation is linearized, or a completion is reached with
 * nothing left to undo, or a bound is met: sets res. -1 when out of memory. */
static int search_run(struct search *s, const struct hist_search_limits *lim,
                      struct hist_search_result *res)
{
    struct walk w = {s->l.next[s->l.head], -1, 0};
    size_t best = 0;
    bool have_fail = false;
    uint64_t iter = 0;
    res->verdict = HIST_YES;
    while (s->left > 0) {
        if ((++iter & 1023) == 0 && lim && lim->deadline > 0 && hist_now() > lim->deadline) {
            res->verdict = HIST_BOUND_TIME;
            break;
        }
        uint32_t op;
        if (!next_candidate(s, &w, &op)) {
            /* Where the search got furthest: the completion that stopped it there. */
            if (w.front != s->l.tail && (!have_fail || s->sp > best)) {
                best = s->sp;
                res->fail_op = s->l.ent[w.front - 1].op;
                have_fail = true;
            }
            if (s->sp == 0) {
                res->verdict = HIST_NO;
                break;
            }
            undo_last(s, &w);
            continue;
        }
        int rc = try_op(s, op, w.front, lim);
        if (rc < 0)
            return -1;
        if (rc == 2) {
            res->verdict = HIST_BOUND_STATES;
            break;
        }
        if (rc == 1) {
            if (s->sp > res->max_depth)
                res->max_depth = s->sp;
            w = (struct walk){s->l.next[s->l.head], -1, 0};
        }
    }
    res->states = s->mm.n;
    return 0;
}

int hist_search(const struct hist_model *m, bool any, uint32_t nslots, const struct hist_op *ops,
                size_t n, const struct hist_search_limits *lim, struct hist_search_result *res)
{
    struct search s = {0};
    int rc = -1;
    memset(res, 0, sizeof *res);
    if (n == 0) {
        res->verdict = HIST_YES;
        return 0;
    }
    if (search_init(&s, m, any, nslots, ops, n) == 0)
        rc = search_run(&s, lim, res);
    search_free(&s);
    return rc;
}
