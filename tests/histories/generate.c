/* generate.c - history-gen: writes a realistic load history for check-history, legal or not.
 *
 *   history-gen [--ops N] [--procs P] [--stock S] [--goods G] [--carts PCT] [--seed X]
 *               [--bad dup|read|sold_out]
 *
 * Simulates P clients each sending one request after another to one stock counter (a reset
 * by process 0 first), every request taking effect at a random instant between its
 * invocation and its completion, a few milliseconds apart, so that all P overlap, as a
 * 64-connection load row does. The mix: mostly deducts of 1 (ok with a distinct remaining,
 * sold_out once the stock is gone), a few reads, 1% whose answer is lost (info timeout, half
 * of them having sold), 0.5% refused (fail unavailable). With --bad, one answer in the middle
 * is changed so that no order explains it: dup, a sale told the remaining of the sale before
 * it; read, a read that goes back one sale in time; sold_out, a sold_out while stock remained.
 * With --carts, PCT of the requests are carts (`order`) of one unit of each of their goods, as
 * loadtest/order.lua sends them: half of one goods, the others of 2 to 4 goods (at most G) in
 * random order; a cart sells all of its goods or, when one is short, nothing, and its 409
 * names the first short one. Carts tie the goods: the checker then checks them together.
 * Events go to standard output in time order, JSON Lines as docs/history.md describes. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_DEDUCT, K_READ, K_RESET, K_ORDER };

#define CART_MAX 4

struct op {
    int64_t process, goods, call, lin, ret;
    enum kind kind;
    int outcome;   /* 0 ok, 1 sold_out, 2 info, 3 fail unavailable */
    int64_t value; /* remaining, or stock read; a cart's sold_out: the goods it names */
    int nitems;    /* a cart's goods: items[], and each one's remaining in rem[] */
    int64_t items[CART_MAX], rem[CART_MAX];
};

struct event {
    int64_t time;
    size_t op;
    int complete;
};

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int64_t uniform(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(next_rand() % (uint64_t)(hi - lo + 1));
}

static int cmp_lin(const void *pa, const void *pb)
{
    const struct op *a = *(struct op *const *)pa, *b = *(struct op *const *)pb;
    return (a->lin > b->lin) - (a->lin < b->lin);
}

static int cmp_event(const void *pa, const void *pb)
{
    const struct event *a = pa, *b = pb;
    if (a->time != b->time)
        return a->time < b->time ? -1 : 1;
    if (a->complete != b->complete)
        return a->complete - b->complete;
    return (a->op > b->op) - (a->op < b->op);
}

/* A cart's goods: one, or 2 to CART_MAX (at most goods_n), distinct, in the order drawn. */
static void cart_draw(struct op *o, long goods_n)
{
    o->kind = K_ORDER;
    o->nitems = 1;
    if (goods_n > 1 && next_rand() % 2)
        o->nitems = (int)uniform(2, goods_n < CART_MAX ? goods_n : CART_MAX);
    for (int i = 0; i < o->nitems; i++) {
        int fresh;
        do {
            o->items[i] = 1 + (int64_t)(next_rand() % (uint64_t)goods_n);
            fresh = 1;
            for (int j = 0; j < i; j++)
                fresh = fresh && o->items[j] != o->items[i];
        } while (!fresh);
    }
    o->goods = o->items[0];
}

/* A cart taking effect on stock (indexed by goods), r its draw of 1000 as for a deduct. */
static void cart_settle(struct op *o, int64_t *stock, uint64_t r)
{
    if (r < 5) {
        o->outcome = 3; /* refused: no effect */
        return;
    }
    for (int i = 0; i < o->nitems; i++)
        if (stock[o->items[i]] < 1) {
            o->outcome = 1;
            o->value = o->items[i]; /* the first short goods, as the 409 names it */
            return;
        }
    if (r < 15)
        o->outcome = r < 10 ? 2 : 2 | 4; /* answer lost; sold in half the cases */
    if (o->outcome == (2 | 4))
        return;
    for (int i = 0; i < o->nitems; i++)
        o->rem[i] = --stock[o->items[i]];
}

/* A cart's event: its invocation, or its completion. */
static void print_cart(const struct op *o, size_t id, int64_t time, int complete)
{
    printf("{\"process\":%" PRId64 ",\"f\":\"order\",\"time\":%" PRId64, o->process, time);
    if (complete && o->outcome == 1) {
        printf(",\"type\":\"fail\",\"error\":\"sold_out\",\"goods_id\":%" PRId64 "}\n", o->value);
        return;
    }
    if (complete && o->outcome != 0) {
        printf(",\"type\":\"%s\",\"error\":\"%s\"}\n", o->outcome == 3 ? "fail" : "info",
               o->outcome == 3 ? "unavailable" : "timeout");
        return;
    }
    printf(",\"type\":\"%s\",\"items\":[", complete ? "ok" : "invoke");
    for (int i = 0; i < o->nitems; i++) {
        printf("%s{\"goods_id\":%" PRId64 ",\"count\":1", i ? "," : "", o->items[i]);
        if (complete)
            printf(",\"remaining\":%" PRId64, o->rem[i]);
        printf("}");
    }
    if (complete)
        printf("],\"order_id\":%zu}\n", id);
    else
        printf("]}\n");
}

int main(int argc, char **argv)
{
    long nops = 100000, procs = 64, goods_n = 1, carts = 0;
    int64_t stock0 = -1;
    const char *bad = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ops"))
            nops = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--procs"))
            procs = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--stock"))
            stock0 = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--goods"))
            goods_n = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--carts"))
            carts = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            rng = strtoull(argv[i + 1], NULL, 10) * 2654435761u + 1;
        else if (!strcmp(argv[i], "--bad"))
            bad = argv[i + 1];
        else {
            fprintf(stderr, "usage: history-gen [--ops N] [--procs P] [--stock S] [--goods G] "
                            "[--carts PCT] [--seed X] [--bad dup|read|sold_out]\n");
            return 2;
        }
    }
    if (nops < 10 || procs < 1 || goods_n < 1)
        return 2;
    if (stock0 < 0)
        stock0 = nops * 95 / 100 / goods_n; /* sold out near the end, as a load row is */
    struct op *ops = calloc((size_t)nops + (size_t)goods_n, sizeof *ops);
    struct op **bylin = calloc((size_t)nops + (size_t)goods_n, sizeof *bylin);
    struct event *ev = calloc(2 * ((size_t)nops + (size_t)goods_n), sizeof *ev);
    int64_t *clock = calloc((size_t)procs, sizeof *clock);
    if (!ops || !bylin || !ev || !clock)
        return 1;
    size_t n = 0;
    for (long g = 1; g <= goods_n; g++) /* the resets, before any load */
        ops[n++] = (struct op){.process = 0,
                               .goods = g,
                               .call = g * 10,
                               .lin = g * 10 + 1,
                               .ret = g * 10 + 2,
                               .kind = K_RESET,
                               .value = stock0};
    for (long p = 0; p < procs; p++)
        clock[p] = 1000000 + uniform(0, 100000);
    /* Each process' requests follow one another: invocation, effect, completion, a pause. */
    for (long k = 0; k < nops; k++) {
        long p = k % procs;
        struct op *o = &ops[n++];
        o->process = p + 1;
        o->goods = 1 + (int64_t)(next_rand() % (uint64_t)goods_n);
        o->call = clock[p];
        o->lin = o->call + uniform(200000, 2000000);
        o->ret = o->lin + uniform(200000, 2000000);
        uint64_t pick = next_rand() % 100;
        o->kind = pick < 2 ? K_READ : K_DEDUCT;
        if (pick >= 2 && (long)(next_rand() % 100) < carts)
            cart_draw(o, goods_n);
        clock[p] = o->ret + uniform(1000, 50000);
    }
    for (size_t i = 0; i < n; i++)
        bylin[i] = &ops[i];
    qsort(bylin, n, sizeof *bylin, cmp_lin);
    int64_t *stock = calloc((size_t)goods_n + 1, sizeof *stock);
    if (!stock)
        return 1;
    for (size_t i = 0; i < n; i++) {
        struct op *o = bylin[i];
        int64_t *s = &stock[o->goods];
        if (o->kind == K_ORDER) {
            cart_settle(o, stock, next_rand() % 1000);
        } else if (o->kind == K_RESET) {
            *s = o->value;
        } else if (o->kind == K_READ) {
            o->value = *s;
        } else {
            uint64_t r = next_rand() % 1000;
            if (r < 5) {
                o->outcome = 3; /* refused: no effect */
            } else if (*s < 1) {
                o->outcome = 1;
            } else if (r < 15) {
                o->outcome = 2; /* answer lost; sold in half the cases */
                if (r < 10)
                    (*s)--;
                else
                    o->outcome = 2 | 4; /* marked: did not sell */
            } else {
                (*s)--;
                o->value = *s;
            }
        }
    }
    if (bad) {
        /* The change goes to an op in the middle of the effect order, with an ok deduct of the
         * same goods before it. */
        size_t mid = n / 2, prev = SIZE_MAX;
        for (size_t i = mid; i < n && prev == SIZE_MAX; i++) {
            struct op *o = bylin[i];
            if (o->kind != K_DEDUCT || o->outcome != 0)
                continue;
            for (size_t j = i; j-- > 0;) {
                struct op *q = bylin[j];
                if (q->goods == o->goods && q->kind == K_DEDUCT && q->outcome == 0) {
                    prev = j;
                    break;
                }
            }
            if (prev == SIZE_MAX)
                continue;
            if (!strcmp(bad, "dup")) {
                o->value = bylin[prev]->value;
            } else if (!strcmp(bad, "read")) {
                /* The first read from here on reads the stock as it was before a sale that
                 * had completed before the read began. */
                for (size_t j = i; j < n; j++) {
                    struct op *r = bylin[j];
                    if (r->kind != K_READ || r->goods != o->goods)
                        continue;
                    for (size_t q = j; q-- > 0;)
                        if (bylin[q]->goods == o->goods && bylin[q]->kind == K_DEDUCT &&
                            bylin[q]->outcome == 0 && bylin[q]->ret < r->call) {
                            r->value = bylin[q]->value + 1;
                            break;
                        }
                    break;
                }
            } else if (!strcmp(bad, "sold_out")) {
                o->outcome = 1;
                /* the stock it claims was gone stays: the sales after it are one higher */
                for (size_t j = i + 1; j < n; j++)
                    if (bylin[j]->goods == o->goods && bylin[j]->kind == K_DEDUCT &&
                        bylin[j]->outcome == 0)
                        bylin[j]->value++;
            } else {
                fprintf(stderr, "history-gen: --bad dup|read|sold_out\n");
                return 2;
            }
        }
    }
    size_t ne = 0;
    for (size_t i = 0; i < n; i++) {
        ev[ne++] = (struct event){ops[i].call, i, 0};
        ev[ne++] = (struct event){ops[i].ret, i, 1};
    }
    qsort(ev, ne, sizeof *ev, cmp_event);
    for (size_t i = 0; i < ne; i++) {
        const struct op *o = &ops[ev[i].op];
        if (o->kind == K_ORDER) {
            print_cart(o, ev[i].op, ev[i].time, ev[i].complete);
            continue;
        }
        const char *f = o->kind == K_RESET ? "reset" : o->kind == K_READ ? "read" : "deduct";
        printf("{\"process\":%" PRId64 ",\"f\":\"%s\",\"goods_id\":%" PRId64 ",\"time\":%" PRId64,
               o->process, f, o->goods, ev[i].time);
        if (!ev[i].complete) {
            if (o->kind == K_RESET)
                printf(",\"type\":\"invoke\",\"stock\":%" PRId64 "}\n", o->value);
            else if (o->kind == K_DEDUCT)
                printf(",\"type\":\"invoke\",\"count\":1}\n");
            else
                printf(",\"type\":\"invoke\"}\n");
            continue;
        }
        if (o->kind == K_RESET)
            printf(",\"type\":\"ok\"}\n");
        else if (o->kind == K_READ)
            printf(",\"type\":\"ok\",\"stock\":%" PRId64 "}\n", o->value);
        else if (o->outcome == 0)
            printf(",\"type\":\"ok\",\"remaining\":%" PRId64 ",\"order_id\":%zu}\n", o->value,
                   ev[i].op);
        else if (o->outcome == 1)
            printf(",\"type\":\"fail\",\"error\":\"sold_out\"}\n");
        else if (o->outcome == 3)
            printf(",\"type\":\"fail\",\"error\":\"unavailable\"}\n");
        else
            printf(",\"type\":\"info\",\"error\":\"timeout\"}\n");
    }
    free(ops);
    free(bylin);
    free(ev);
    free(clock);
    free(stock);
    return 0;
}
