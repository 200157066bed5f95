/*
 * test_order.c - POST /api/order through the running stack: a cart of several goods sold all
 * or nothing. Its answers (200 with every item, 409 sold_out naming the first item short, 404,
 * the 400s of a bad cart), its Idempotency-Key (scoped by the whole cart), the deadlock of two
 * carts taking the same two locks in opposite orders (multi-naive: both 503 after their bound,
 * nothing sold; pg-multi-naive: PostgreSQL's victim answers 503 conflict), the same two carts
 * sold one after the other by the safe modes, and 64 connections of carts over 5 hot goods
 * selling exactly each goods' stock, with no cart half sold, in every safe cart mode.
 *
 * The deadlock cases need a replica started with fault injection (X-Fault:
 * pause-between-locks): FAULT_REPLICA_URL, which tests/integration.sh starts beside the
 * others. Run alone: STACK_PROGRAMS=order make test-integration.
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_HOT 5           /* the load's hot goods */
#define LOAD_HOT_STOCK 40 /* units of each */
#define LOAD_CART_THREADS 64
#define DEADLOCK_PAUSE_MS 300

/* The safe modes that take carts, each with goods of its own in the load case. */
static const char *const safe_cart_modes[] = {"redis", "pg-for-update", "pg-atomic"};

/* An order body of n items (goods[i], counts[i]) plus "mode" when not NULL. */
static void order_body(char *buf, size_t len, const long long *goods, const long long *counts,
                       int n, const char *mode)
{
    size_t used = (size_t)snprintf(buf, len, "{\"items\":[");
    for (int i = 0; i < n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s{\"goods_id\":%lld,\"count\":%lld}",
                                 i > 0 ? "," : "", goods[i], counts[i]);
    if (used < len)
        snprintf(buf + used, len - used, "]%s%s%s}", mode ? ",\"mode\":\"" : "", mode ? mode : "",
                 mode ? "\"" : "");
}

/* POST /api/order on base with `body`; `key` and `fault`, when not NULL, as headers. */
static http_reply *order_raw(const char *base, const char *body, const char *key, const char *fault)
{
    char key_header[200] = "", fault_header[128] = "";
    http_request rq = {.method = "POST", .base = base, .path = "/api/order", .body = body};
    int h = 0;

    if (key != NULL) {
        snprintf(key_header, sizeof(key_header), "Idempotency-Key: %s", key);
        rq.headers[h++] = key_header;
    }
    if (fault != NULL) {
        snprintf(fault_header, sizeof(fault_header), "X-Fault: %s", fault);
        rq.headers[h++] = fault_header;
    }
    return call(&rq);
}

static http_reply *order(const long long *goods, const long long *counts, int n, const char *mode,
                         const char *key)
{
    char body[2048];

    order_body(body, sizeof(body), goods, counts, n, mode);
    return order_raw(g_env.stock_url, body, key, NULL);
}

/* Asserts a 200 order answer: ok, an order id, each item as asked with its remaining (checked
 * unless remaining is NULL), the mode and a replica's instance. Returns the order id. */
static long long expect_ordered(const http_reply *r, const long long *goods,
                                const long long *counts, const long long *remaining, int n,
                                const char *mode, const char *what)
{
    json_t *j = expect_json(r, 200, what), *items;
    long long id;

    if (!field_bool(j, "ok", what))
        fail_msg("%s: ok is false", what);
    id = field_int(j, "order_id", what);
    items = json_object_get(j, "items");
    if (!json_is_array(items) || (int)json_array_size(items) != n)
        fail_msg("%s: items is not an array of %d: %.400s", what, n, r->body);
    for (int i = 0; i < n; i++) {
        json_t *it = json_array_get(items, (size_t)i);
        expect_field_int(it, "goods_id", goods[i], what);
        expect_field_int(it, "count", counts[i], what);
        if (remaining != NULL)
            expect_field_int(it, "remaining", remaining[i], what);
        else
            field_int(it, "remaining", what);
    }
    expect_field_str(j, "mode", mode, what);
    if (instance_index(field_str(j, "instance", what)) < 0 &&
        strncmp(field_str(j, "instance", what), "svc-", 4) != 0)
        fail_msg("%s: instance '%s' is no replica's", what, field_str(j, "instance", what));
    return id;
}

/* The carts holding goods_id whose orders rows do not cover all their items. */
static long long half_sold_carts(long long goods_id)
{
    return sql_value("SELECT count(*) FROM (SELECT o.cart FROM orders o"
                     " WHERE o.cart IN (SELECT cart FROM orders WHERE goods = $1)"
                     " GROUP BY o.cart HAVING count(*) <> min(o.cart_items)) x",
                     1, goods_id);
}

/* ------------------------------------------------------------------------------------------
 * The answers
 * ------------------------------------------------------------------------------------------ */

/* Every cart mode sells a cart of three goods whole: each goods' books move by its item, the
 * rows of the order cover all three items, and the answer lists them in the order given. */
static void test_order_sells_every_item(void **state)
{
    static const char *const modes[] = {"redis", "pg-for-update", "pg-atomic",     "local",
                                        "none",  "multi-naive",   "pg-multi-naive"};
    const long long g[3] = {GOODS_ORDER + 2, GOODS_ORDER, GOODS_ORDER + 1};
    const long long c[3] = {3, 1, 2};

    (void)state;
    begin_case("order: every cart mode sells every item of a cart, in one order");
    for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        long long left[3] = {100 - 3, 100 - 1, 100 - 2}, id;
        char what[96];

        for (int i = 0; i < 3; i++)
            reset_goods(g[i], 100);
        snprintf(what, sizeof(what), "order in %s", modes[m]);
        id = expect_ordered(order(g, c, 3, modes[m], NULL), g, c, left, 3, modes[m], what);
        for (int i = 0; i < 3; i++)
            expect_stock(g[i], 100, 100 - c[i], c[i], 1, what);
        if (sql_value("SELECT count(*) FROM orders WHERE cart = $1 AND cart_items = 3", 1, id) != 3)
            fail_msg("%s: order %lld has not its 3 rows", what, id);
        if (half_sold_carts(g[0]) != 0)
            fail_msg("%s: a cart is half sold", what);
    }
}

/* One item short: 409 sold_out names the first short item in the request's order (not the
 * lowest goods id), and nothing of the cart is sold, in every safe cart mode. */
static void test_order_sold_out_sells_nothing(void **state)
{
    const long long g[3] = {GOODS_ORDER + 5, GOODS_ORDER + 4, GOODS_ORDER + 3};
    const long long c[3] = {5, 5, 5};
    const long long stock[3] = {10, 2, 1};

    (void)state;
    begin_case("order: a cart with an item short of stock answers 409 and sells nothing");
    for (size_t m = 0; m < sizeof(safe_cart_modes) / sizeof(safe_cart_modes[0]); m++) {
        char what[96];
        json_t *j;

        for (int i = 0; i < 3; i++)
            reset_goods(g[i], stock[i]);
        snprintf(what, sizeof(what), "sold-out order in %s", safe_cart_modes[m]);
        j = expect_error(order(g, c, 3, safe_cart_modes[m], NULL), 409, "sold_out", what);
        expect_field_int(j, "goods_id", g[1], what); /* the first short one as listed */
        for (int i = 0; i < 3; i++)
            expect_stock(g[i], stock[i], stock[i], 0, 0, what);
    }
}

static void test_order_unknown_goods(void **state)
{
    const long long g[2] = {GOODS_ORDER + 6, GOODS_UNKNOWN}, c[2] = {1, 1};

    (void)state;
    begin_case("order: a cart with an unknown goods answers 404 and sells nothing");
    for (size_t m = 0; m < sizeof(safe_cart_modes) / sizeof(safe_cart_modes[0]); m++) {
        json_t *j;
        reset_goods(g[0], 10);
        j = expect_error(order(g, c, 2, safe_cart_modes[m], NULL), 404, "unknown_goods",
                         safe_cart_modes[m]);
        expect_field_int(j, "goods_id", GOODS_UNKNOWN, safe_cart_modes[m]);
        expect_stock(g[0], 10, 10, 0, 0, safe_cart_modes[m]);
    }
}

/* The bad carts of API.md: 400 with the JSON error shape, nothing sold. */
static void test_order_bad_carts(void **state)
{
    char seventeen[2048], *p = seventeen;
    const long long g = GOODS_ORDER + 7;
    struct {
        const char *label, *body, *error;
    } bad[] = {
        {"no items", "{\"items\":[],\"mode\":\"redis\"}", "bad_request"},
        {"17 items", seventeen, "bad_request"},
        {"a goods twice",
         "{\"items\":[{\"goods_id\":4507,\"count\":1},{\"goods_id\":4507,\"count\":1}]}",
         "bad_request"},
        {"a zero count", "{\"items\":[{\"goods_id\":4507,\"count\":0}]}", "bad_request"},
        {"a count over 10000", "{\"items\":[{\"goods_id\":4507,\"count\":10001}]}", "bad_request"},
        {"an unknown field", "{\"items\":[{\"goods_id\":4507,\"count\":1}],\"x\":1}",
         "bad_request"},
        {"an unknown field in an item", "{\"items\":[{\"goods_id\":4507,\"count\":1,\"price\":2}]}",
         "bad_request"},
        {"a duplicate key", "{\"items\":[{\"goods_id\":4507,\"count\":1,\"count\":1}]}",
         "bad_request"},
        {"no items field", "{\"goods_id\":4507,\"count\":1}", "bad_request"},
        {"an unknown mode", "{\"items\":[{\"goods_id\":4507,\"count\":1}],\"mode\":\"nope\"}",
         "unknown_mode"},
        {"a mode that takes no carts",
         "{\"items\":[{\"goods_id\":4507,\"count\":1}],\"mode\":\"pg-optimistic\"}",
         "unknown_mode"},
    };
    stock_view before;

    (void)state;
    begin_case("order: bad carts answer 400 with the JSON error shape and sell nothing");
    _Static_assert(GOODS_ORDER + 7 == 4507, "the literal bodies name GOODS_ORDER + 7");
    p += sprintf(p, "{\"items\":[");
    for (int i = 0; i < 17; i++)
        p += sprintf(p, "%s{\"goods_id\":%lld,\"count\":1}", i > 0 ? "," : "", g + i);
    sprintf(p, "]}");
    reset_goods(g, 10);
    before = stock_get(g);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_t *j = expect_error(order_raw(g_env.stock_url, bad[i].body, NULL, NULL), 400,
                                 bad[i].error, bad[i].label);
        field_str(j, "detail", bad[i].label);
    }
    /* A fault on a replica without fault injection is refused too. */
    expect_error(order_raw(g_env.stock_url, "{\"items\":[{\"goods_id\":4507,\"count\":1}]}", NULL,
                           "pause-between-locks=10"),
                 400, "bad_request", "X-Fault without fault injection");
    expect_unchanged(g, &before, "after the bad carts");
}

/* Where API.md gives a cart "every other answer as for /api/deduct": a body over 16384 bytes
 * is 413 (nginx's and the replica's own), a Content-Type not JSON 415, a key of the wrong
 * shape 400, the mode taken from the query when the body names none (the body's wins), an
 * unknown one 400 unknown_mode; nothing sold by a refusal. */
static void test_order_answers_as_deduct(void **state)
{
    const long long g = GOODS_ORDER_HTTP, one = 1;
    const size_t big_len = 16385;
    char body[160], with_mode[200], *big = own(malloc(big_len + 1), free);
    http_request rq = {.method = "POST", .base = g_env.stock_url, .path = "/api/order"};
    int n;

    (void)state;
    begin_case("order: a cart's 413, 415, bad key and query mode answer as a deduct's");
    if (big == NULL)
        fail_msg("out of memory");
    snprintf(body, sizeof(body), "{\"items\":[{\"goods_id\":%lld,\"count\":1}]}", g);
    snprintf(with_mode, sizeof(with_mode),
             "{\"items\":[{\"goods_id\":%lld,\"count\":1}],\"mode\":\"redis\"}", g);
    n = snprintf(big, big_len + 1, "{\"items\":[{\"goods_id\":%lld,\"count\":1}]", g);
    memset(big + n, ' ', big_len - 1 - (size_t)n);
    big[big_len - 1] = '}';
    big[big_len] = '\0';
    reset_goods(g, 10);

    rq.body = big;
    expect_error(call(&rq), 413, "payload_too_large", "a cart of 16385 bytes via nginx");
    rq.base = g_env.replicas[0];
    expect_error(call(&rq), 413, "payload_too_large", "a cart of 16385 bytes via a replica");
    rq.chunked = true;
    expect_error(call(&rq), 413, "payload_too_large", "a chunked cart of 16385 bytes");
    rq = (http_request){.method = "POST", .base = g_env.stock_url, .path = "/api/order"};
    rq.body = body;
    rq.content_type = "text/plain";
    expect_error(call(&rq), 415, "unsupported_media_type", "a cart sent as text/plain");
    rq.content_type = NULL;
    rq.headers[0] = "Idempotency-Key: two words";
    expect_error(call(&rq), 400, "bad_request", "a cart with a key of the wrong shape");
    rq.headers[0] = NULL;
    rq.path = "/api/order?mode=nope";
    expect_error(call(&rq), 400, "unknown_mode", "a cart with ?mode=nope");
    expect_stock(g, 10, 10, 0, 0, "after the refused carts");

    rq.path = "/api/order?mode=pg-atomic";
    expect_ordered(call(&rq), &g, &one, (const long long[]){9}, 1, "pg-atomic", "?mode=pg-atomic");
    rq.body = with_mode;
    expect_ordered(call(&rq), &g, &one, (const long long[]){8}, 1, "redis",
                   "the body's mode beside ?mode=pg-atomic");
    expect_stock(g, 10, 8, 2, 2, "after the two carts");
}

/* The key's scope is the whole cart: the same cart (listed in any order) replays the first
 * answer and sells once; the same key on another cart is another order. */
static void test_order_idempotent_replay(void **state)
{
    const long long g[2] = {GOODS_ORDER + 8, GOODS_ORDER + 9}, c[2] = {2, 1};
    const long long g_rev[2] = {GOODS_ORDER + 9, GOODS_ORDER + 8}, c_rev[2] = {1, 2};
    const long long c_other[2] = {1, 1};
    char key[96];
    http_reply *first, *again, *reordered, *other;

    (void)state;
    begin_case("order: an Idempotency-Key replays the cart's first answer, sells once");
    snprintf(key, sizeof(key), "order-%s", g_env.run_tag);
    for (int i = 0; i < 2; i++)
        reset_goods(g[i], 10);
    first = order(g, c, 2, "redis", key);
    expect_ordered(first, g, c, NULL, 2, "redis", "first");
    again = order(g, c, 2, "pg-atomic", key);
    reordered = order(g_rev, c_rev, 2, "redis", key);
    if (strcmp(first->body, again->body) != 0 || strcmp(first->body, reordered->body) != 0)
        fail_msg("the replays differ from the first answer:\n%s\n%s\n%s", first->body, again->body,
                 reordered->body);
    expect_stock(g[0], 10, 8, 2, 1, "after the replays");
    expect_stock(g[1], 10, 9, 1, 1, "after the replays");
    other = order(g, c_other, 2, "redis", key);
    expect_ordered(other, g, c_other, (const long long[]){7, 8}, 2, "redis", "another cart");
    /* A stored 409 is replayed too, even once the stock (changed behind the service's back:
     * a reset would delete the key's record with the goods') would cover the cart. */
    {
        const long long big[2] = {100, 1};
        char key2[100];
        snprintf(key2, sizeof(key2), "order-409-%s", g_env.run_tag);
        http_reply *no = order(g, big, 2, "redis", key2);
        expect_error(no, 409, "sold_out", "a cart too big");
        sql_exec("UPDATE goods SET stock = $2 WHERE id = $1", g[0], 500);
        http_reply *still = order(g, big, 2, "redis", key2);
        if (strcmp(no->body, still->body) != 0)
            fail_msg("the stored 409 was not replayed: %s", still->body);
        if (sql_value("SELECT stock FROM goods WHERE id = $1", 1, g[0]) != 500)
            fail_msg("the replayed 409 sold");
    }
}

/* ------------------------------------------------------------------------------------------
 * Two carts in opposite orders at the same moment (A: 1 then 7; B: 7 then 1), each pausing
 * between its first lock and its second (X-Fault: pause-between-locks), on the fault replica
 * ------------------------------------------------------------------------------------------ */

typedef struct cart_shot {
    pthread_t thread;
    pthread_barrier_t *barrier;
    const char *base;
    char body[512];
    char fault_header[96];
    http_reply reply;
} cart_shot;

static void *cart_shot_thread(void *arg)
{
    cart_shot *s = arg;
    CURL *h = curl_easy_init();
    http_request rq = {.method = "POST",
                       .base = s->base,
                       .path = "/api/order",
                       .body = s->body,
                       .headers = {s->fault_header}};

    pthread_barrier_wait(s->barrier);
    if (h == NULL) {
        snprintf(s->reply.error, sizeof(s->reply.error), "curl_easy_init failed");
        s->reply.body = strdup("");
        return NULL;
    }
    http_do(h, &rq, &s->reply);
    curl_easy_cleanup(h);
    return NULL;
}

static void cart_shots_release(void *arg)
{
    cart_shot *shots = arg;
    free(shots[0].reply.body);
    free(shots[1].reply.body);
    free(shots);
}

/* The fault replica's URL; fails the case without one. */
static const char *fault_replica(void)
{
    const char *url = getenv("FAULT_REPLICA_URL");
    if (url == NULL || url[0] == '\0')
        fail_msg("FAULT_REPLICA_URL is not set: the deadlock cases need a replica with FAULTS=on");
    return url;
}

/* Sends the two opposite carts in `mode` at once; the answers in shots[0] (A) and [1] (B). */
static cart_shot *opposite_carts(const char *mode, double *seconds)
{
    const long long a[2] = {GOODS_ORDER_DEADLOCK, GOODS_ORDER_DEADLOCK + 1};
    const long long b[2] = {GOODS_ORDER_DEADLOCK + 1, GOODS_ORDER_DEADLOCK}, c[2] = {1, 1};
    cart_shot *shots = own(calloc(2, sizeof(*shots)), cart_shots_release);
    pthread_barrier_t barrier;
    double start;

    if (shots == NULL)
        fail_msg("out of memory");
    pthread_barrier_init(&barrier, NULL, 2);
    for (int i = 0; i < 2; i++) {
        shots[i].barrier = &barrier;
        shots[i].base = fault_replica();
        order_body(shots[i].body, sizeof(shots[i].body), i == 0 ? a : b, c, 2, mode);
        snprintf(shots[i].fault_header, sizeof(shots[i].fault_header),
                 "X-Fault: pause-between-locks=%d", DEADLOCK_PAUSE_MS);
    }
    start = now_s();
    for (int i = 0; i < 2; i++)
        pthread_create(&shots[i].thread, NULL, cart_shot_thread, &shots[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(shots[i].thread, NULL);
    *seconds = now_s() - start;
    pthread_barrier_destroy(&barrier);
    for (int i = 0; i < 2; i++) {
        if (shots[i].reply.status == 0)
            fail_msg("cart %c: no answer: %s", 'A' + i, shots[i].reply.error);
        print_message("%s cart %c: %ld %s\n", mode, 'A' + i, shots[i].reply.status,
                      shots[i].reply.body);
    }
    return shots;
}

/* On the fault replica a cart takes pause-between-locks and the lab's hold-at=between-locks,
 * with an X-Request-Id, and nothing else: another fault or point is 400 bad_request saying
 * what a cart takes, and nothing is sold. */
static void test_order_fault_refusals(void **state)
{
    static const char *const bad[] = {"nested", "pause-between-locks=10,pause-in-section=10",
                                      "hold-at=read", "hold-at=between-locks,checked"};
    const long long g[2] = {GOODS_ORDER_DEADLOCK, GOODS_ORDER_DEADLOCK + 1}, c[2] = {1, 1};
    char body[256], fault_header[128];
    http_request rq = {.method = "POST",
                       .path = "/api/order",
                       .body = body,
                       .headers = {fault_header, "X-Request-Id: cart-refused"}};
    stock_view before;

    (void)state;
    begin_case("order: a cart refuses a fault it does not carry out (400) and sells nothing");
    rq.base = fault_replica();
    reset_goods(g[0], 10);
    before = stock_get(g[0]);
    order_body(body, sizeof(body), g, c, 2, "multi-naive");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *detail;
        snprintf(fault_header, sizeof(fault_header), "X-Fault: %s", bad[i]);
        detail = field_str(expect_error(call(&rq), 400, "bad_request", bad[i]), "detail", bad[i]);
        if (strstr(detail, "takes only pause-between-locks=MS and hold-at=between-locks") == NULL)
            fail_msg("X-Fault: %s: the reason '%s' does not say what a cart takes", bad[i], detail);
    }
    expect_unchanged(g[0], &before, "after the refused faults");
}

/* multi-naive takes the locks as listed: each cart holds its first and waits for the other's
 * until its bound; both answer 503 lock_timeout, and nothing is sold. */
static void test_order_deadlock_multi_naive(void **state)
{
    double seconds;
    cart_shot *s;

    (void)state;
    begin_case("order: two opposite carts on multi-naive deadlock: both 503 after the bound");
    reset_goods(GOODS_ORDER_DEADLOCK, 10);
    reset_goods(GOODS_ORDER_DEADLOCK + 1, 10);
    s = opposite_carts("multi-naive", &seconds);
    for (int i = 0; i < 2; i++)
        expect_error(&s[i].reply, 503, "lock_timeout", i == 0 ? "cart A" : "cart B");
    if (seconds * 1000 < DEADLOCK_PAUSE_MS + g_env.lock_wait_ms)
        fail_msg("the carts answered after %.2f s, before the pause and the lock wait bound "
                 "(%d + %ld ms): they did not wait for each other",
                 seconds, DEADLOCK_PAUSE_MS, g_env.lock_wait_ms);
    expect_stock(GOODS_ORDER_DEADLOCK, 10, 10, 0, 0, "after the deadlock");
    expect_stock(GOODS_ORDER_DEADLOCK + 1, 10, 10, 0, 0, "after the deadlock");
}

/* The safe modes take the two goods in one order (ascending id): the second cart waits for
 * the first and then sells; both 200, each goods sold twice. */
static void test_order_opposite_carts_sell_in_safe_modes(void **state)
{
    (void)state;
    begin_case("order: the same opposite carts sell one after the other in the safe modes");
    for (size_t m = 0; m < sizeof(safe_cart_modes) / sizeof(safe_cart_modes[0]); m++) {
        double seconds;
        cart_shot *s;
        reset_goods(GOODS_ORDER_DEADLOCK, 10);
        reset_goods(GOODS_ORDER_DEADLOCK + 1, 10);
        s = opposite_carts(safe_cart_modes[m], &seconds);
        for (int i = 0; i < 2; i++)
            expect_json(&s[i].reply, 200, safe_cart_modes[m]);
        expect_stock(GOODS_ORDER_DEADLOCK, 10, 8, 2, 2, safe_cart_modes[m]);
        expect_stock(GOODS_ORDER_DEADLOCK + 1, 10, 8, 2, 2, safe_cart_modes[m]);
        if (seconds * 1000 >= g_env.lock_wait_ms)
            fail_msg("%s: the carts took %.2f s, a lock wait bound: one waited it out",
                     safe_cart_modes[m], seconds);
    }
}

/* pg-multi-naive locks the rows as listed: PostgreSQL finds the cycle and rolls one
 * transaction back (40P01), answered 503 conflict saying so in the service's words; the
 * other sells. */
static void test_order_deadlock_victim_pg(void **state)
{
    double seconds;
    cart_shot *s;
    int ok = 0, victims = 0;

    (void)state;
    begin_case("order: two opposite carts on pg-multi-naive: one deadlock victim, one sale");
    reset_goods(GOODS_ORDER_DEADLOCK, 10);
    reset_goods(GOODS_ORDER_DEADLOCK + 1, 10);
    s = opposite_carts("pg-multi-naive", &seconds);
    for (int i = 0; i < 2; i++) {
        if (s[i].reply.status == 200) {
            ok++;
        } else {
            expect_error(&s[i].reply, 503, "conflict", "the victim");
            if (strstr(s[i].reply.body, "deadlock") == NULL)
                fail_msg("the victim's answer does not say deadlock: %s", s[i].reply.body);
            victims++;
        }
    }
    if (ok != 1 || victims != 1)
        fail_msg("want one sale and one victim, got %d and %d", ok, victims);
    expect_stock(GOODS_ORDER_DEADLOCK, 10, 9, 1, 1, "after the victim");
    expect_stock(GOODS_ORDER_DEADLOCK + 1, 10, 9, 1, 1, "after the victim");
}

/* ------------------------------------------------------------------------------------------
 * Load: 64 connections of carts (1 to 4 items, random order, count 1) over 5 hot goods
 * ------------------------------------------------------------------------------------------ */

typedef struct cart_load {
    const char *mode;
    long long goods[N_HOT];
    atomic_bool sold_out[N_HOT]; /* a 409 named it: its stock is 0 (counts are 1) */
    atomic_int sold[N_HOT];      /* units the 200 answers sold, per goods */
    atomic_int ok, refused, timed_out, other, bad_answer;
    atomic_int sent;
    pthread_barrier_t start_line;
    pthread_mutex_t mu;
    char note[320];
    double deadline;
} cart_load;

typedef struct cart_load_thread {
    pthread_t thread;
    cart_load *load;
    unsigned seed;
} cart_load_thread;

/* Keeps the first surprising answer: "what: a b". */
static void load_note(cart_load *l, const char *what, const char *a, const char *b)
{
    pthread_mutex_lock(&l->mu);
    if (l->note[0] == '\0')
        snprintf(l->note, sizeof(l->note), "%s: %s %s", what, a, b);
    pthread_mutex_unlock(&l->mu);
}

/* Reads a 200's items into sold[]; false when the answer is not the documented one. */
static bool count_sale(cart_load *l, const char *body, const long long *goods, int n)
{
    json_t *j = json_loads(body, JSON_REJECT_DUPLICATES, NULL), *items;
    bool good = json_is_object(j) && json_is_true(json_object_get(j, "ok")) &&
                json_is_integer(json_object_get(j, "order_id"));

    items = json_object_get(j, "items");
    good = good && json_is_array(items) && (int)json_array_size(items) == n;
    for (int i = 0; good && i < n; i++) {
        json_t *it = json_array_get(items, (size_t)i);
        good = json_integer_value(json_object_get(it, "goods_id")) == goods[i] &&
               json_integer_value(json_object_get(it, "count")) == 1;
    }
    for (int i = 0; good && i < n; i++)
        for (int k = 0; k < N_HOT; k++)
            if (l->goods[k] == goods[i])
                atomic_fetch_add(&l->sold[k], 1);
    json_decref(j);
    return good;
}

static void *cart_load_run(void *arg)
{
    cart_load_thread *t = arg;
    cart_load *l = t->load;
    CURL *h = curl_easy_init();

    pthread_barrier_wait(&l->start_line);
    while (h != NULL && now_s() < l->deadline) {
        long long goods[4], counts[4] = {1, 1, 1, 1};
        int open[N_HOT], n_open = 0, n;
        char body[512];
        http_reply r = {0};

        for (int k = 0; k < N_HOT; k++)
            if (!atomic_load(&l->sold_out[k]))
                open[n_open++] = k;
        if (n_open == 0)
            break;
        /* Half the carts hold one item, the rest 2 to 4, in random order. */
        n = rand_r(&t->seed) % 2 == 0 ? 1 : 2 + rand_r(&t->seed) % 3;
        if (n > n_open)
            n = n_open;
        for (int i = 0; i < n; i++) {
            int pick = i + rand_r(&t->seed) % (n_open - i);
            int tmp = open[i];
            open[i] = open[pick];
            open[pick] = tmp;
            goods[i] = l->goods[open[i]];
        }
        order_body(body, sizeof(body), goods, counts, n, l->mode);
        http_request rq = {
            .method = "POST", .base = g_env.stock_url, .path = "/api/order", .body = body};
        atomic_fetch_add(&l->sent, 1);
        http_do(h, &rq, &r);
        if (r.status == 200) {
            atomic_fetch_add(&l->ok, 1);
            if (!count_sale(l, r.body, goods, n)) {
                atomic_fetch_add(&l->bad_answer, 1);
                load_note(l, "bad 200", r.body, "");
            }
        } else if (r.status == 409) {
            json_t *j = json_loads(r.body, 0, NULL);
            long long named = json_integer_value(json_object_get(j, "goods_id"));
            bool known = false;
            for (int k = 0; k < N_HOT; k++)
                if (l->goods[k] == named) {
                    atomic_store(&l->sold_out[k], true);
                    known = true;
                }
            if (!known ||
                strcmp(json_string_value(json_object_get(j, "error")) ?: "", "sold_out") != 0) {
                atomic_fetch_add(&l->bad_answer, 1);
                load_note(l, "bad 409", r.body, "");
            }
            atomic_fetch_add(&l->refused, 1);
            json_decref(j);
        } else if (r.status == 503 &&
                   (strstr(r.body, "\"error\":\"lock_timeout\"") != NULL ||
                    strstr(r.body, "\"detail\":\"PostgreSQL is unreachable\"") != NULL ||
                    strstr(r.body, "\"detail\":\"no PostgreSQL connection was free") != NULL ||
                    strstr(r.body, "\"detail\":\"PostgreSQL did not finish a statement") != NULL)) {
            /* A bound ran out under this load: a lock wait (LOCK_WAIT_MS), a statement that
             * waited behind the others' row locks one wait after another past PostgreSQL's
             * statement_timeout, or a session a replica's pool opened lazily in a burst of 64
             * on a busy machine: well-formed answers that sold nothing (the books below say
             * whether they did). Any other 503 fails the case. */
            atomic_fetch_add(&l->timed_out, 1);
        } else {
            atomic_fetch_add(&l->other, 1);
            load_note(l, "unexpected answer", r.status == 0 ? r.error : "", r.body);
        }
        free(r.body);
    }
    curl_easy_cleanup(h);
    return NULL;
}

static void cart_load_release(void *arg)
{
    free(arg);
}

static void run_cart_load(const char *mode, long long first_goods)
{
    cart_load *l = own(calloc(1, sizeof(*l)), cart_load_release);
    cart_load_thread *threads = own(calloc(LOAD_CART_THREADS, sizeof(*threads)), cart_load_release);
    double start;

    if (l == NULL || threads == NULL)
        fail_msg("out of memory");
    l->mode = mode;
    for (int k = 0; k < N_HOT; k++) {
        l->goods[k] = first_goods + k;
        reset_goods(l->goods[k], LOAD_HOT_STOCK);
    }
    pthread_barrier_init(&l->start_line, NULL, LOAD_CART_THREADS);
    pthread_mutex_init(&l->mu, NULL);
    start = now_s();
    l->deadline = start + 60;
    for (int i = 0; i < LOAD_CART_THREADS; i++) {
        threads[i].load = l;
        threads[i].seed = (unsigned)(i * 7919 + 17);
        pthread_create(&threads[i].thread, NULL, cart_load_run, &threads[i]);
    }
    for (int i = 0; i < LOAD_CART_THREADS; i++)
        pthread_join(threads[i].thread, NULL);
    pthread_barrier_destroy(&l->start_line);
    pthread_mutex_destroy(&l->mu);
    print_message("%s: %d carts in %.1f s: %d sold, %d sold out, %d 503 past a bound, "
                  "%d other%s%s\n",
                  mode, atomic_load(&l->sent), now_s() - start, atomic_load(&l->ok),
                  atomic_load(&l->refused), atomic_load(&l->timed_out), atomic_load(&l->other),
                  l->note[0] ? "; " : "", l->note);
    if (atomic_load(&l->other) != 0 || atomic_load(&l->bad_answer) != 0)
        fail_msg("%s: %d answers neither 200, 409 sold_out nor a 503 that sold nothing, %d "
                 "malformed: %s",
                 mode, atomic_load(&l->other), atomic_load(&l->bad_answer), l->note);
    for (int k = 0; k < N_HOT; k++) {
        /* Every answer is in (none was commit_unknown): nothing can still land. */
        stock_view v = stock_get(l->goods[k]);
        if (!atomic_load(&l->sold_out[k]))
            fail_msg("%s: goods %lld was never sold out within the minute", mode, l->goods[k]);
        if (v.stock != 0 || v.sold != LOAD_HOT_STOCK || v.oversold != 0 ||
            v.orders != LOAD_HOT_STOCK)
            fail_msg("%s: goods %lld: stock %lld sold %lld orders %lld oversold %lld, want 0 %d "
                     "%d 0",
                     mode, l->goods[k], v.stock, v.sold, v.orders, v.oversold, LOAD_HOT_STOCK,
                     LOAD_HOT_STOCK);
        if (atomic_load(&l->sold[k]) != LOAD_HOT_STOCK)
            fail_msg("%s: the 200 answers sold %d of goods %lld, the books %d", mode,
                     atomic_load(&l->sold[k]), l->goods[k], LOAD_HOT_STOCK);
        if (half_sold_carts(l->goods[k]) != 0)
            fail_msg("%s: a cart holding goods %lld is half sold", mode, l->goods[k]);
    }
}

static void test_order_load_redis(void **state)
{
    (void)state;
    begin_case("order load: redis, 64 connections of carts over 5 hot goods sell each stock");
    run_cart_load("redis", GOODS_ORDER_LOAD);
}

static void test_order_load_pg_for_update(void **state)
{
    (void)state;
    begin_case("order load: pg-for-update, 64 connections of carts over 5 hot goods");
    run_cart_load("pg-for-update", GOODS_ORDER_LOAD + N_HOT);
}

static void test_order_load_pg_atomic(void **state)
{
    (void)state;
    begin_case("order load: pg-atomic, 64 connections of carts over 5 hot goods");
    run_cart_load("pg-atomic", GOODS_ORDER_LOAD + 2 * N_HOT);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_order_sells_every_item, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_sold_out_sells_nothing, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_order_unknown_goods, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_bad_carts, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_answers_as_deduct, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_idempotent_replay, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_fault_refusals, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_deadlock_multi_naive, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_opposite_carts_sell_in_safe_modes, case_setup,
                                        case_teardown),
        cmocka_unit_test_setup_teardown(test_order_deadlock_victim_pg, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_load_redis, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_load_pg_for_update, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_order_load_pg_atomic, case_setup, case_teardown),
    };
    return stack_main("order", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
