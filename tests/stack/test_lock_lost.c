/*
 * test_lock_lost.c - 503 lock_lost through the running stack: a holder paused past its lease
 * sells nothing.
 *
 * The slow replica (SLOW_REPLICA_URL, not behind nginx) sleeps BUSINESS_DELAY_MS between its
 * read of the stock and its write, longer than its lock's lease (LOCK_LEASE_MS): the pause of
 * a garbage collector or a stalled machine, during which the lease can run out. Each case
 * sends it one redis-mode deduct from a thread of its own, waits until that request holds
 * lock:goods:N and has read the stock (its read claimed the goods row for its fencing token:
 * db_stock_claim), then acts while it sleeps:
 *   - takeover: the lock vanishes (deleted, as an expiry would) and another client takes it
 *     with a newer token: its claim waits for the sleeper's transaction; the sleeper's
 *     watchdog finds the lock gone, the last look before the commit refuses its sale, and
 *     the new holder then sells from the true stock;
 *   - fence: the database has seen a newer token of the lock before the holder reads, while
 *     Redis and the holder's watchdog see nothing wrong: the claim alone refuses the holder;
 *   - watchdog: the lock vanishes and nobody takes it: the last look before the commit (the
 *     watchdog found the lock gone) alone refuses the sale.
 * Every refused holder must answer 503 lock_lost and sell nothing.
 *
 * Then the two delayed replicas (DELAYED_REPLICA_URLS, not behind nginx: BUSINESS_DELAY_MS
 * but the default 30 s watchdog lease, so their watchdog does not look during the pause)
 * play the case the token in the write alone could not cover: a holder whose lock vanished
 * has read; a new holder reads before the first one writes; the first one writes and
 * commits (it has not noticed anything); the new one writes and commits. Both sold from one
 * read: one unit sold twice. With the claim, the new holder's read waits for the first one's
 * commit and reads its result, in both orders of the writes (the pause is shorter than the
 * lock wait bound, which bounds that wait too: a longer one would answer 503 lock_timeout).
 *
 * Run alone as tests/stack/test_contract.c says: STACK_PROGRAMS=lock_lost make
 * test-integration. It needs the slow and delayed replicas tests/integration.sh starts
 * (SLOW_REPLICA_*, DELAYED_REPLICA_*: see tests/stack/stack_support.h).
 */
#include "tests/stack/stack_support.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The slow replica must be seen holding the lock, and then reading the stock, within this
 * (well inside its BUSINESS_DELAY_MS pause, so the takeover happens during the pause). */
#define SLOW_HOLD_WAIT_S 1.0

/* Fails the case when the harness gave no slow replica, or one these cases cannot use. */
static void need_slow_replica(void)
{
    if (g_env.slow_url == NULL)
        fail_msg("SLOW_REPLICA_URL is not set: tests/integration.sh starts a slow replica for "
                 "the lock_lost cases (did scripts/stack.sh replica-start-extra fail?)");
    /* The pause must outlast the lease, and leave room after the wait for the holder. */
    if (g_env.slow_delay_ms <= g_env.slow_lease_ms ||
        g_env.slow_delay_ms < (long)(1000 * SLOW_HOLD_WAIT_S) + 400)
        fail_msg("the slow replica's pause (SLOW_REPLICA_DELAY_MS %ld) must outlast its lease "
                 "(SLOW_REPLICA_LEASE_MS %ld) and be at least %.0f ms",
                 g_env.slow_delay_ms, g_env.slow_lease_ms, 1000 * SLOW_HOLD_WAIT_S + 400);
}

/* The slow replica's counters that tell how a sale was refused. */
typedef struct lost_counters {
    double answered; /* stock_deductions_total{mode="redis",outcome="lock_lost"} */
    double watchdog; /* stock_lock_lost_total: holdings the watchdog found gone */
    double renewals; /* stock_lock_renewals_total */
} lost_counters;

static lost_counters lost_counters_read(void)
{
    lost_counters c;
    c.answered = metric_value(g_env.slow_url,
                              "stock_deductions_total{mode=\"redis\",outcome=\"lock_lost\"}");
    c.watchdog = metric_value(g_env.slow_url, "stock_lock_lost_total");
    c.renewals = metric_value(g_env.slow_url, "stock_lock_renewals_total");
    return c;
}

/*
 * The detail the slow replica logged with its last lock_lost answer (its deduct_failed
 * line), into out; "" when there is none. It names the check that refused the sale: the
 * fence in the UPDATE ("fencing token ... is older than the stored one") or the last look
 * before the commit ("the lock's lease was lost before the commit"). For the report only:
 * the cases assert on what the counters and the books show.
 */
static void slow_log_last_lost(char *out, size_t len)
{
    char line[1024];
    FILE *f;

    out[0] = '\0';
    if (g_env.slow_log == NULL || (f = fopen(g_env.slow_log, "r")) == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *detail = strstr(line, "detail=");
        if (strstr(line, "outcome=lock_lost") != NULL && detail != NULL) {
            snprintf(out, len, "%s", detail + strlen("detail="));
            out[strcspn(out, "\n")] = '\0';
        }
    }
    fclose(f);
}

/* One redis-mode deduct of 1 sent to the slow replica by a thread of its own, so that the
 * case can act while the request sleeps in the replica. The thread never asserts: the case
 * joins it and asserts on the reply. Owned by the case, and its release joins the thread
 * first, so a case that failed midway never frees what the thread still uses. */
typedef struct slow_shot {
    const char *base; /* the replica it is sent to */
    long delay_ms;    /* that replica's BUSINESS_DELAY_MS */
    char body[160];
    http_reply reply;
    int rc; /* http_do's */
    atomic_bool done;
    bool joined;
    pthread_t thread;
    double start; /* now_s() when it was sent */
} slow_shot;

static void *slow_shot_thread(void *arg)
{
    slow_shot *s = arg;
    CURL *h = curl_easy_init();
    http_request rq = {.method = "POST", .base = s->base, .path = "/api/deduct", .body = s->body};

    if (h == NULL) {
        snprintf(s->reply.error, sizeof(s->reply.error), "curl_easy_init failed");
        s->rc = -1;
    } else {
        s->rc = http_do(h, &rq, &s->reply);
        curl_easy_cleanup(h);
    }
    atomic_store(&s->done, true);
    return NULL;
}

static void slow_shot_release(void *arg)
{
    slow_shot *s = arg;
    if (!s->joined)
        pthread_join(s->thread, NULL);
    free(s->reply.body);
    free(s);
}

/* Sends the deduct to `base`, a replica that pauses delay_ms inside its section. */
static slow_shot *shot_start(const char *base, long delay_ms, long long goods_id)
{
    slow_shot *s = calloc(1, sizeof(*s));

    if (s == NULL)
        fail_msg("out of memory");
    s->base = base;
    s->delay_ms = delay_ms;
    atomic_init(&s->done, false);
    deduct_body(s->body, sizeof(s->body), goods_id, 1, "redis");
    s->start = now_s();
    if (pthread_create(&s->thread, NULL, slow_shot_thread, s) != 0) {
        free(s);
        fail_msg("pthread_create failed");
    }
    own(s, slow_shot_release);
    return s;
}

static slow_shot *slow_shot_start(long long goods_id)
{
    return shot_start(g_env.slow_url, g_env.slow_delay_ms, goods_id);
}

/* Waits for the slow request's answer; fails the case when none came. */
static http_reply *slow_shot_join(slow_shot *s)
{
    pthread_join(s->thread, NULL);
    s->joined = true;
    if (s->rc != 0)
        fail_msg("deduct on %s: no answer: %s", s->base, s->reply.error);
    printf("    %s answered %ld after %.2f s: %.200s\n", s->base, s->reply.status, s->reply.seconds,
           s->reply.body);
    return &s->reply;
}

/* Fails the case when the slow request has answered already: what the case did was meant to
 * happen while it slept. */
static void expect_still_paused(const slow_shot *s, const char *what)
{
    if (atomic_load(&s->done))
        fail_msg("the slow replica answered before %s (%.2f s after its request): its pause of "
                 "%ld ms did not cover it",
                 what, now_s() - s->start, s->delay_ms);
}

/* The start of the claim's text (DB__STOCK_CLAIM: it raises the source's high-water mark in
 * goods_fences, then claims the row), as pg_stat_activity shows a session's last statement. */
#define CLAIM_SQL_PREFIX "WITH raised AS ( INSERT INTO goods_fences"

/*
 * Waits until the slow request holds `key` (the hash exists) and has read the stock (its
 * session sits in its transaction after the claim, seen in pg_stat_activity), at most
 * SLOW_HOLD_WAIT_S from its start. Returns the holding's fencing token: the lock's counter
 * (lock/lock.h: "<name>:fence"), which nobody else moves while the lock is held.
 */
static long long wait_slow_holder(const slow_shot *s, const char *key)
{
    char reply[64], fence_key[96], *end;
    long long token;

    for (;;) {
        expect_still_paused(s, "its lock was seen");
        if (redis_cli_out(reply, sizeof(reply), "EXISTS", key, NULL, NULL) != 0)
            fail_msg("redis-cli EXISTS %s failed", key);
        if (strcmp(reply, "1") == 0)
            break;
        if (now_s() - s->start > SLOW_HOLD_WAIT_S)
            fail_msg("%s was not held within %.1f s of the slow request", key, SLOW_HOLD_WAIT_S);
        usleep(5 * 1000);
    }
    snprintf(fence_key, sizeof(fence_key), "%s:fence", key);
    if (redis_cli_out(reply, sizeof(reply), "GET", fence_key, NULL, NULL) != 0)
        fail_msg("redis-cli GET %s failed", fence_key);
    token = strtoll(reply, &end, 10);
    if (reply[0] == '\0' || *end != '\0' || token <= 0)
        fail_msg("GET %s answered '%s', not a fencing token", fence_key, reply);

    for (;;) {
        expect_still_paused(s, "its read was seen");
        if (sql_value("SELECT count(*) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND state = 'idle in transaction'"
                      " AND query LIKE '" CLAIM_SQL_PREFIX "%'",
                      0, 0) > 0)
            break;
        if (now_s() - s->start > SLOW_HOLD_WAIT_S)
            fail_msg("the slow request was not seen reading the stock within %.1f s",
                     SLOW_HOLD_WAIT_S);
        usleep(5 * 1000);
    }
    printf("    %s holds %s with token %lld and has read the stock (%.3f s in); it now sleeps "
           "%ld ms\n",
           s->base, key, token, now_s() - s->start, s->delay_ms);
    return token;
}

/* Waits, at most SLOW_HOLD_WAIT_S, until a claim waits for the goods row's lock: a second
 * holder's read queued behind the first holder's transaction. */
static void wait_claim_queued(const slow_shot *first, const char *what)
{
    double start = now_s();

    for (;;) {
        expect_still_paused(first, what);
        if (sql_value("SELECT count(*) FROM pg_stat_activity"
                      " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                      " AND query LIKE '" CLAIM_SQL_PREFIX "%'",
                      0, 0) > 0)
            break;
        if (now_s() - start > SLOW_HOLD_WAIT_S)
            fail_msg("%s: no claim was seen waiting for the row within %.1f s", what,
                     SLOW_HOLD_WAIT_S);
        usleep(5 * 1000);
    }
    printf("    %s: its read waits for the first holder's transaction\n", what);
}

/* After a lock_lost: prints how the slow replica's counters moved and the check its log
 * names, asserts that one more lock_lost answer was counted, and returns the counters. */
static lost_counters report_lost(const lost_counters *before, const char *label)
{
    lost_counters after = lost_counters_read();
    char detail[300];

    slow_log_last_lost(detail, sizeof(detail));
    printf("    %s: lock_lost answers +%.0f, watchdog losses +%.0f, renewals +%.0f; the "
           "replica logged: %s\n",
           label, after.answered - before->answered, after.watchdog - before->watchdog,
           after.renewals - before->renewals, detail[0] ? detail : "(no lock_lost line found)");
    if (strstr(detail, "fencing token") != NULL)
        printf("    %s: refused by the claim (a newer token on the row)\n", label);
    else if (strstr(detail, "lease was lost") != NULL)
        printf("    %s: refused by the last look before the commit (lock_is_held)\n", label);
    if (after.answered - before->answered != 1)
        fail_msg("%s: stock_deductions_total{mode=\"redis\",outcome=\"lock_lost\"} on the slow "
                 "replica went from %.0f to %.0f, want one more",
                 label, before->answered, after.answered);
    return after;
}

/*
 * The start every lost-lock case shares: goods g reset to 10, one redis-mode deduct sent to
 * `base` (a replica that pauses delay_ms inside its section), and, once it holds the lock
 * and has read, its key deleted, as an expiry or a Redis that lost it would. Returns the
 * request; *token is the holding's fencing token.
 */
static slow_shot *lose_lock_mid_section(const char *base, long delay_ms, long long g,
                                        long long *token)
{
    char key[64];

    snprintf(key, sizeof(key), "lock:goods:%lld", g);
    reset_goods(g, 10);
    slow_shot *s = shot_start(base, delay_ms, g);
    *token = wait_slow_holder(s, key);
    if (redis_cli("DEL", key, NULL, NULL) != 0)
        fail_msg("redis-cli DEL %s failed", key);
    printf("    %s deleted under the holder (token %lld)\n", key, *token);
    return s;
}

/* The takeover: Kleppmann's scenario, end to end. */
static void test_lock_lost_takeover(void **state)
{
    const long long g = GOODS_LOST_TAKEOVER;
    long long token;

    (void)state;
    begin_case("lock_lost_takeover");
    need_slow_replica();
    lost_counters before = lost_counters_read();
    /* The lease runs out under the sleeping holder: its key is gone, as after an expiry. */
    slow_shot *s = lose_lock_mid_section(g_env.slow_url, g_env.slow_delay_ms, g, &token);

    /* Another client takes the lock, with a newer token; its read waits for the sleeper's
     * transaction (a replica behind nginx: it does not pause). */
    slow_shot *next = shot_start(g_env.stock_url, 0, g);
    wait_claim_queued(s, "the new holder");

    /* The sleeper wakes and would write 10 - 1 = 9: its watchdog found the lock gone, and the
     * last look before the commit refuses the sale. */
    expect_error(slow_shot_join(s), 503, "lock_lost", "the paused holder's deduct");
    report_lost(&before, "takeover");
    expect_deducted(slow_shot_join(next), g, 1, 9, "redis", "the new holder's deduct");
    long long fence = sql_value("SELECT fence FROM goods WHERE id = $1", 1, g);
    printf("    the new holder sold with token %lld (the sleeper's is %lld)\n", fence, token);
    if (fence <= token)
        fail_msg("the new holder's sale stored fence %lld, not above the sleeper's %lld", fence,
                 token);
    expect_stock(g, 10, 9, 1, 1, "after the takeover: one sale, the new holder's");
    if (stock_get(g).oversold != 0)
        fail_msg("after the takeover: oversold is not 0");
}

/* The claim alone: the database has seen a newer token than the holder's, which the holder
 * (and its watchdog, and Redis) know nothing of. */
static void test_lock_lost_fence(void **state)
{
    const long long g = GOODS_LOST_FENCE;
    char key[64], fence_key[96], reply[64];

    (void)state;
    begin_case("lock_lost_fence");
    need_slow_replica();
    snprintf(key, sizeof(key), "lock:goods:%lld", g);
    snprintf(fence_key, sizeof(fence_key), "%s:fence", key);
    /* One sale makes the lock's counter exist; the reset keeps the row's token. */
    reset_goods(g, 10);
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, 9, "redis",
                    "a first sale, to start the lock's counter");
    reset_goods(g, 10);
    if (redis_cli_out(reply, sizeof(reply), "GET", fence_key, NULL, NULL) != 0)
        fail_msg("redis-cli GET %s failed", fence_key);
    long long counter = strtoll(reply, NULL, 10);
    if (counter <= 0)
        fail_msg("GET %s answered '%s', not a fencing token", fence_key, reply);
    /* A newer holder's claim, as it would be stamped: a token a minute ahead. The next holder
     * (the slow replica's request) gets one past the counter and Redis' clock in us
     * (lock/acquire.lua's next_token), which is older. */
    const long long newer = counter + 60LL * 1000 * 1000;

    sql_exec("UPDATE goods SET fence = $2, fence_source = 'redis' WHERE id = $1", g, newer);
    /* The claim compares with the source's own high-water mark (migrations/006_goods_fences.sql).
     */
    sql_exec("INSERT INTO goods_fences (goods, source, fence) VALUES ($1, 'redis', $2)"
             " ON CONFLICT (goods, source) DO UPDATE SET fence = EXCLUDED.fence",
             g, newer);
    printf("    goods %lld stamped with fence %lld; the lock's counter is at %lld\n", g, newer,
           counter);
    lost_counters before = lost_counters_read();

    slow_shot *s = slow_shot_start(g);
    expect_error(slow_shot_join(s), 503, "lock_lost", "the fenced holder's deduct");
    lost_counters after = report_lost(&before, "fence");
    if (after.watchdog != before.watchdog)
        fail_msg("the watchdog counted %.0f lost holdings: this case needs it to see none",
                 after.watchdog - before.watchdog);
    if (s->reply.seconds * 1000 >= g_env.slow_delay_ms)
        fail_msg("the fenced holder answered after %.2f s: it was refused after its pause, not "
                 "at its read",
                 s->reply.seconds);
    expect_stock(g, 10, 10, 0, 0, "after the refused claim: nothing sold");

    /* The refusal raised the lock's counter to the stamped token (lock_fence_raise), so the
     * next holder gets the token after it, which the claim lets through: one refused sale, not
     * one per token the counter was behind. */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, 9, "redis",
                    "the next holder's deduct");
    long long fence = sql_value("SELECT fence FROM goods WHERE id = $1", 1, g);
    if (fence != newer + 1)
        fail_msg("the next holder wrote fence %lld, want %lld (the counter raised to the stamped "
                 "token, then taken)",
                 fence, newer + 1);
    expect_stock(g, 10, 9, 1, 1, "after the next holder's sale");
}

/* The last look before the commit alone: the lock is gone, nobody newer wrote. */
static void test_lock_lost_watchdog(void **state)
{
    const long long g = GOODS_LOST_WATCHDOG;
    long long token;

    (void)state;
    begin_case("lock_lost_watchdog");
    need_slow_replica();
    lost_counters before = lost_counters_read();
    slow_shot *s = lose_lock_mid_section(g_env.slow_url, g_env.slow_delay_ms, g, &token);

    expect_error(slow_shot_join(s), 503, "lock_lost", "the holder whose lock vanished");
    lost_counters after = report_lost(&before, "watchdog");
    if (after.watchdog <= before.watchdog)
        fail_msg("the watchdog counted no lost holding, yet the sale was refused");
    /* Nothing newer than the holder's own token reached the row: the fence could not refuse. */
    long long fence = sql_value("SELECT fence FROM goods WHERE id = $1", 1, g);
    if (fence >= token)
        fail_msg("goods %lld holds fence %lld, not below the holder's %lld: the rolled-back "
                 "write left its token, or someone else wrote",
                 g, fence, token);
    expect_stock(g, 10, 10, 0, 0, "after the refused commit: nothing sold");

    /* The lock is free again (the holder's unlock found nothing of its own to delete). */
    expect_deducted(deduct(g_env.stock_url, g, 1, "redis", NULL), g, 1, 9, "redis",
                    "a deduct after the lost holding");
    expect_stock(g, 10, 9, 1, 1, "after the next sale");
}

/*
 * The five steps: a holder reads; its lock vanishes; a new holder takes the lock and reads
 * before the first one writes; the first one writes and commits, unaware; the new one writes
 * and commits. `second` is where the new holder's request goes: a delayed replica (its write
 * comes after the first holder's: the five steps as told) or a replica behind nginx (its
 * write would come first: the mirror). Either way the new holder's read must wait for the
 * first holder's commit and read what it left: two sales, two units, oversold 0.
 */
static void five_steps(long long g, const char *second, long second_delay_ms, const char *label)
{
    long long token;

    if (g_env.delayed_urls[0] == NULL || g_env.delayed_urls[1] == NULL)
        fail_msg("DELAYED_REPLICA_URLS is not set: tests/integration.sh starts two delayed "
                 "replicas for these cases");
    slow_shot *first =
        lose_lock_mid_section(g_env.delayed_urls[0], g_env.delayed_delay_ms, g, &token);

    slow_shot *next = shot_start(second, second_delay_ms, g);
    wait_claim_queued(first, label);

    /* The delayed replicas are not behind nginx: their instance is none of the replicas'. */
    json_t *j = expect_json(slow_shot_join(first), 200, "the first holder's deduct");
    expect_field_int(j, "remaining", 9, "the first holder's deduct");
    j = expect_json(slow_shot_join(next), 200, "the second holder's deduct");
    expect_field_int(j, "remaining", 8, "the second holder's deduct, after the first's commit");
    expect_stock(g, 10, 8, 2, 2, "after both holders sold: two units");
    if (stock_get(g).oversold != 0)
        fail_msg("%s: oversold is not 0", label);
}

static void test_five_steps(void **state)
{
    (void)state;
    begin_case("five_steps");
    five_steps(GOODS_FIVE_STEPS, g_env.delayed_urls[1], g_env.delayed_delay_ms, "the five steps");
}

static void test_five_steps_mirror(void **state)
{
    (void)state;
    begin_case("five_steps_mirror");
    five_steps(GOODS_FIVE_STEPS_MIRROR, g_env.stock_url, 0, "the mirror");
}
/* Usage: test_lock_lost [PATTERN | --list] (stack_main in tests/stack/env.c). */
int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lock_lost_takeover, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lock_lost_fence, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_lock_lost_watchdog, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_five_steps, case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_five_steps_mirror, case_setup, case_teardown),
    };
    return stack_main("lock-lost", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
