/* search.c - the Wing-Gong-Lowe search (search.h).
 *
 * The list is an array of nodes linked both ways (a head and a tail sentinel around them), so
 * that taking an operation's two nodes out and putting them back are O(1) each, in the
 * reverse order of the taking out, which the stack guarantees.
 *
 * The memo holds (set, state) pairs. The set is kept as a 128-bit Zobrist hash (each operation
 * has two random 64-bit words, XORed in when it is linearized and out when it is undone)
 * instead of a bitset of every operation: 24 bytes a pair instead of n/8, which is what lets a
 * history of 10^5 operations be checked in memory. Two different sets share a hash with a
 * probability of about p^2 / 2^128 for p pairs (10^-26 at 10^6 pairs); such a collision could
 * only make the search skip a branch it should have explored.
 *
 * The stock model's pruning (model.h, `need`): while no reset is left, an ok deduct that needs
 * the stock at r + count, or a read that needs s, can never be linearized once the stock is
 * below that. The operations are kept sorted by the state they need, with a cursor on the
 * highest one not linearized; a step that brings the state below it is refused at once
 * instead of being discovered dead many steps later (most choices the search can get wrong in
 * a load history, taking an info deduct too early above all, die here). */
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

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The memo: open addressing; h1 is never 0 (its low bit is forced), so 0 marks a free slot. */
struct memo_slot {
    uint64_t h1, h2;
    int64_t state;
};

struct memo {
    struct memo_slot *slots;
    size_t cap, n;
};

static size_t memo_index(const struct memo *mm, uint64_t h1, uint64_t h2, int64_t state)
{
    uint64_t x = h1 ^ (h2 * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)state * 0xC2B2AE3D27D4EB4Full);
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
static int memo_add(struct memo *mm, uint64_t h1, uint64_t h2, int64_t state)
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

struct frame {
    uint32_t op;
    int64_t state; /* before op */
    int32_t front; /* the list's first completion node when op was chosen */
};

/* The pruning on needed states (above). */
struct prune {
    bool on;
    uint32_t *byneed; /* required pinned operations, highest need first */
    size_t cnt, top;  /* byneed[top]: the highest not linearized (cnt: none) */
    size_t *pos;      /* op -> its place in byneed, SIZE_MAX if none */
    int64_t *need;    /* op -> the state it needs */
};

static int cmp_need_desc(const void *pa, const void *pb, void *arg)
{
    const int64_t *need = arg;
    int64_t a = need[*(const uint32_t *)pa], b = need[*(const uint32_t *)pb];
    return (a < b) - (a > b);
}

static void prune_advance(struct prune *p, const bool *lin)
{
    while (p->top < p->cnt && lin[p->byneed[p->top]])
        p->top++;
}

static void prune_undo(struct prune *p, uint32_t op)
{
    if (p->on && p->pos[op] != SIZE_MAX && p->pos[op] < p->top)
        p->top = p->pos[op];
}

/* Optional operations live outside the list, in classes of interchangeable ones (same f and
 * arguments), each in invocation order. Of a class only the first not linearized is a
 * candidate (search.h), so a class is a queue: cls_k[c] of its members are linearized. A
 * member is a candidate while its invocation precedes the list's first completion. Keeping
 * them out of the list spares every walk from passing over the optional operations that never
 * take effect, which in a load history are most of them. */
struct classes {
    uint32_t *members; /* every class' members, class after class */
    size_t *start;     /* class c: members[start[c] .. start[c + 1]) */
    size_t *k;         /* how many of class c are linearized */
    uint32_t *of;      /* op -> its class */
    size_t n;
};

static int build_classes(const struct hist_op *ops, size_t n, struct classes *cl)
{
    size_t nopt = 0, cap = 16;
    uint32_t *rep = malloc(cap * sizeof *rep), *count = NULL;
    cl->of = malloc(n * sizeof *cl->of);
    if (!rep || !cl->of)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].outcome != HIST_UNKNOWN)
            continue;
        nopt++;
        size_t c;
        for (c = 0; c < cl->n; c++) {
            const struct hist_op *o = &ops[rep[c]];
            if (o->f == ops[i].f && o->a == ops[i].a && o->b == ops[i].b)
                break;
        }
        if (c == cl->n) {
            if (cl->n == cap) {
                uint32_t *bigger = realloc(rep, 2 * cap * sizeof *rep);
                if (!bigger)
                    goto fail;
                rep = bigger;
                cap *= 2;
            }
            rep[cl->n++] = (uint32_t)i;
        }
        cl->of[i] = (uint32_t)c;
    }
    cl->members = malloc((nopt ? nopt : 1) * sizeof *cl->members);
    cl->start = calloc(cl->n + 1, sizeof *cl->start);
    cl->k = calloc(cl->n + 1, sizeof *cl->k);
    count = calloc(cl->n + 1, sizeof *count);
    if (!cl->members || !cl->start || !cl->k || !count)
        goto fail;
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
    free(rep);
    free(count);
    return 0;
fail:
    free(rep);
    free(count);
    return -1;
}

static void free_classes(struct classes *cl)
{
    free(cl->members);
    free(cl->start);
    free(cl->k);
    free(cl->of);
}

int hist_search(const struct hist_model *m, int64_t init, const struct hist_op *ops, size_t n,
                const struct hist_search_limits *lim, struct hist_search_result *res)
{
    int rc = -1;
    size_t ne = 0, required = 0;
    struct entry *ent = NULL;
    int32_t *next = NULL, *prev = NULL, *call_node = NULL;
    uint64_t *z = NULL;
    bool *lin = NULL;
    struct frame *stack = NULL;
    struct memo mm = {0};
    struct prune pr = {0};
    struct classes cl = {0};
    size_t raising = 0;
    bool *raises = NULL;

    memset(res, 0, sizeof *res);
    if (n == 0) {
        res->verdict = HIST_YES;
        return 0;
    }
    ent = malloc(2 * n * sizeof *ent);
    next = malloc((2 * n + 2) * sizeof *next);
    prev = malloc((2 * n + 2) * sizeof *prev);
    call_node = malloc(n * sizeof *call_node);
    z = malloc(2 * n * sizeof *z);
    lin = calloc(n, sizeof *lin);
    stack = malloc(n * sizeof *stack);
    if (!ent || !next || !prev || !call_node || !z || !lin || !stack)
        goto out;
    if (build_classes(ops, n, &cl) != 0)
        goto out;

    /* The list: the required operations' invocations and completions. */
    for (size_t i = 0; i < n; i++) {
        call_node[i] = -1;
        if (ops[i].outcome == HIST_UNKNOWN)
            continue;
        ent[ne++] = (struct entry){ops[i].call, (uint32_t)i, false};
        ent[ne++] = (struct entry){ops[i].ret, (uint32_t)i, true};
        required++;
    }
    qsort(ent, ne, sizeof *ent, cmp_entries);
    /* Node 0 is the head, node ne + 1 the tail; entry k is node k + 1. */
    int32_t head = 0, tail = (int32_t)ne + 1;
    for (int32_t k = 0; k <= (int32_t)ne; k++) {
        next[k] = k + 1;
        prev[k + 1] = k;
    }
    int32_t *ret_node = malloc((n ? n : 1) * sizeof *ret_node);
    if (!ret_node)
        goto out;
    for (size_t k = 0; k < ne; k++) {
        if (ent[k].ret)
            ret_node[ent[k].op] = (int32_t)k + 1;
        else
            call_node[ent[k].op] = (int32_t)k + 1;
    }

    uint64_t seed = 0x5EED5EED12345678ull;
    for (size_t i = 0; i < 2 * n; i++)
        z[i] = splitmix(&seed);

    /* The pruning holds once every operation that can raise the state is linearized: until
     * then `raising` counts those left. */
    if (m->need && m->raises) {
        pr.on = true;
        raises = calloc(n, sizeof *raises);
        if (!raises)
            goto out_ret;
        for (size_t i = 0; i < n; i++)
            if (m->raises(&ops[i])) {
                raises[i] = true;
                raising++;
            }
        pr.byneed = malloc(n * sizeof *pr.byneed);
        pr.pos = malloc(n * sizeof *pr.pos);
        pr.need = malloc(n * sizeof *pr.need);
        if (!pr.byneed || !pr.pos || !pr.need)
            goto out_ret;
        for (size_t i = 0; i < n; i++) {
            pr.need[i] = m->need(&ops[i]);
            pr.pos[i] = SIZE_MAX;
            if (pr.need[i] != HIST_STATE_ANY)
                pr.byneed[pr.cnt++] = (uint32_t)i;
        }
        qsort_r(pr.byneed, pr.cnt, sizeof *pr.byneed, cmp_need_desc, pr.need);
        for (size_t k = 0; k < pr.cnt; k++)
            pr.pos[pr.byneed[k]] = k;
    }

    int64_t state = init;
    uint64_t h1 = 0, h2 = 0;
    size_t sp = 0, left = required, best = 0;
    bool have_fail = false;
    uint64_t iter = 0;
    /* The walk: list nodes from cur until the first completion (front), then the optional
     * classes from cls. */
    int32_t cur = next[head], front = -1;
    size_t cls = 0;
    if (memo_add(&mm, h1, h2, state) < 0)
        goto out_ret;
    while (left > 0) {
        if ((++iter & 1023) == 0 && lim && lim->deadline > 0 && hist_now() > lim->deadline) {
            res->verdict = HIST_BOUND_TIME;
            goto done;
        }
        uint32_t op;
        if (front < 0) {
            if (cur != tail && !ent[cur - 1].ret) {
                op = ent[cur - 1].op;
                cur = next[cur];
            } else {
                front = cur;
                cls = 0;
                continue;
            }
        } else if (cls < cl.n) {
            size_t c = cls++;
            size_t k = cl.start[c] + cl.k[c];
            if (k >= cl.start[c + 1])
                continue;
            op = cl.members[k];
            if (front != tail && ops[op].call > ent[front - 1].time)
                continue;
        } else {
            /* Every candidate tried: undo the last choice. */
            if (front != tail && (!have_fail || sp > best)) {
                best = sp;
                res->fail_op = ent[front - 1].op;
                have_fail = true;
            }
            if (sp == 0) {
                res->verdict = HIST_NO;
                goto done;
            }
            struct frame f = stack[--sp];
            state = f.state;
            h1 ^= z[2 * f.op];
            h2 ^= z[2 * f.op + 1];
            lin[f.op] = false;
            prune_undo(&pr, f.op);
            if (raises && raises[f.op])
                raising++;
            if (ops[f.op].outcome == HIST_UNKNOWN) {
                cl.k[cl.of[f.op]]--;
                front = f.front;
                cls = cl.of[f.op] + 1;
            } else {
                int32_t r = ret_node[f.op], c = call_node[f.op];
                next[prev[r]] = r;
                prev[next[r]] = r;
                next[prev[c]] = c;
                prev[next[c]] = c;
                left++;
                cur = next[c];
                front = -1;
            }
            continue;
        }
        int64_t ns;
        /* An optional operation that would leave "any state" as it is changes nothing but
         * the set: not taking it (now) keeps every possibility open, so it is not tried. */
        if (!m->step(state, &ops[op], &ns) ||
            (state == HIST_STATE_ANY && ns == HIST_STATE_ANY && ops[op].outcome == HIST_UNKNOWN))
            continue;
        lin[op] = true;
        if (pr.on) {
            if (pr.pos[op] == pr.top)
                prune_advance(&pr, lin);
            if (raising - (raises[op] ? 1 : 0) == 0 && ns != HIST_STATE_ANY && pr.top < pr.cnt &&
                ns < pr.need[pr.byneed[pr.top]]) {
                lin[op] = false;
                prune_undo(&pr, op);
                continue;
            }
        }
        uint64_t n1 = h1 ^ z[2 * op], n2 = h2 ^ z[2 * op + 1];
        int added = memo_add(&mm, n1, n2, ns);
        if (added < 0)
            goto out_ret;
        if (added == 0) {
            lin[op] = false;
            prune_undo(&pr, op);
            continue;
        }
        if (lim && lim->max_states && mm.n > lim->max_states) {
            res->verdict = HIST_BOUND_STATES;
            goto done;
        }
        if (raises && raises[op])
            raising--;
        /* front: for an optional op, the walk it interrupted resumes there when undone. */
        stack[sp++] = (struct frame){op, state, front};
        if (sp > res->max_depth)
            res->max_depth = sp;
        state = ns;
        h1 = n1;
        h2 = n2;
        if (ops[op].outcome == HIST_UNKNOWN) {
            cl.k[cl.of[op]]++;
        } else {
            int32_t c = call_node[op], r = ret_node[op];
            next[prev[c]] = next[c];
            prev[next[c]] = prev[c];
            next[prev[r]] = next[r];
            prev[next[r]] = prev[r];
            left--;
        }
        cur = next[head];
        front = -1;
    }
    res->verdict = HIST_YES;
done:
    res->states = mm.n;
    rc = 0;
out_ret:
    free(ret_node);
out:
    free(ent);
    free(next);
    free(prev);
    free(call_node);
    free(z);
    free(lin);
    free(stack);
    free(mm.slots);
    free(pr.byneed);
    free(pr.pos);
    free(pr.need);
    free(raises);
    free_classes(&cl);
    return rc;
}
