/*
 * test_metrics.c - the counters and the lock-wait histogram, read back from the rendered
 * Prometheus text: every family with its HELP and TYPE, samples well formed, buckets
 * cumulative, counts adding up, and no update lost when threads record at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/sale/deduct.h"
#include "service/metrics.h"

static const char *const mode_names[] = {"none", "local", "redis"};

/* The value of the sample whose line starts with `series` followed by a space; fails the
 * test when there is none. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    const char *p = text;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    fail_msg("no sample %s", series);
    return NAN;
}

static bool has_series(const char *text, const char *series)
{
    char line[256];
    snprintf(line, sizeof(line), "\n%s ", series);
    return strstr(text, line) != NULL;
}

static metrics *make(void)
{
    metrics *m = metrics_create(mode_names, 3);
    assert_non_null(m);
    return m;
}

static void test_families_have_help_and_type(void **state)
{
    static const struct {
        const char *name, *type;
    } families[] = {
        {"stock_http_requests_total", "counter"},
        {"stock_deductions_total", "counter"},
        {"stock_lock_wait_seconds", "histogram"},
        {"stock_lock_timeouts_total", "counter"},
        {"stock_lock_renewals_total", "counter"},
        {"stock_lock_lost_total", "counter"},
        {"stock_db_pool_connections", "gauge"},
        {"stock_redis_pool_connections", "gauge"},
        {"stock_http_connections", "gauge"},
        {"stock_process_context_switches_total", "counter"},
        {"stock_sale_stage_seconds_total", "counter"},
        {"stock_sale_timed_total", "counter"},
        {"stock_http_seconds_total", "counter"},
    };
    metrics *m = make();
    char *text = metrics_render(m, NULL);
    char want[128];

    (void)state;
    assert_non_null(text);
    for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
        snprintf(want, sizeof(want), "# HELP %s ", families[i].name);
        if (strstr(text, want) == NULL)
            fail_msg("no HELP for %s", families[i].name);
        snprintf(want, sizeof(want), "# TYPE %s %s\n", families[i].name, families[i].type);
        if (strstr(text, want) == NULL)
            fail_msg("no TYPE %s for %s", families[i].type, families[i].name);
    }
    free(text);
    metrics_destroy(m);
}

/* Every line is a comment or "name[{labels}] value", the value a number, and each sample
 * belongs to a family whose TYPE line came before it. */
static void test_every_line_is_well_formed(void **state)
{
    metrics *m = make();
    metrics_external ext = {7, 1, 16, 5, 2, 16, 3, 9, 11, 12};
    char *text, *line, *save = NULL;
    char typed[2048] = "";

    (void)state;
    metrics_count_request(m, ROUTE_DEDUCT, 200);
    metrics_count_deduction(m, "redis", DEDUCT_DEDUCTED);
    metrics_observe_lock_wait(m, 0.003);
    text = metrics_render(m, &ext);
    assert_non_null(text);
    assert_true(strlen(text) > 0 && text[strlen(text) - 1] == '\n');
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# TYPE ", 7) == 0) {
            strncat(typed, line + 7, sizeof(typed) - strlen(typed) - 2);
            strcat(typed, "\n");
            continue;
        }
        if (line[0] == '#')
            continue;
        size_t name_len = strspn(line, "abcdefghijklmnopqrstuvwxyz_");
        assert_true(name_len > 0);
        const char *rest = line + name_len;
        if (*rest == '{') {
            rest = strchr(rest, '}');
            assert_non_null(rest);
            rest++;
        }
        assert_true(*rest == ' ');
        char *end;
        strtod(rest + 1, &end);
        if (end == rest + 1 || *end != '\0')
            fail_msg("bad value in '%s'", line);

        /* The family: the name, less a histogram's suffix. */
        char family[128];
        snprintf(family, sizeof(family), "%.*s", (int)name_len, line);
        char *suffix;
        if ((suffix = strstr(family, "_bucket")) != NULL || (suffix = strstr(family, "_sum")) ||
            (suffix = strstr(family, "_count")))
            *suffix = '\0';
        char want[160];
        snprintf(want, sizeof(want), "%s ", family);
        if (strstr(typed, want) == NULL)
            fail_msg("sample '%s' before its TYPE", line);
    }
    free(text);
    metrics_destroy(m);
}

static void test_requests_by_route_and_status(void **state)
{
    metrics *m = make();
    char *text;

    (void)state;
    for (int i = 0; i < 3; i++)
        metrics_count_request(m, ROUTE_DEDUCT, 200);
    metrics_count_request(m, ROUTE_DEDUCT, 409);
    metrics_count_request(m, ROUTE_STOCK, 404);
    metrics_count_request(m, ROUTE_METRICS, 200);
    metrics_count_request(m, ROUTE_RESET, 418);                       /* not in the table */
    metrics_count_request(m, ROUTE_RESET, 302);                       /* nor this */
    metrics_count_request(m, (metrics_route)(ROUTE_COUNT_ + 5), 404); /* no such route */
    metrics_count_request(NULL, ROUTE_DEDUCT, 200);                   /* ignored */

    text = metrics_render(m, NULL);
    assert_non_null(text);
    assert_true(sample(text, "stock_http_requests_total{route=\"/api/deduct\",status=\"200\"}") ==
                3);
    assert_true(sample(text, "stock_http_requests_total{route=\"/api/deduct\",status=\"409\"}") ==
                1);
    assert_true(sample(text, "stock_http_requests_total{route=\"/api/stock/{goods_id}\","
                             "status=\"404\"}") == 1);
    assert_true(sample(text, "stock_http_requests_total{route=\"/metrics\",status=\"200\"}") == 1);
    assert_true(sample(text, "stock_http_requests_total{route=\"/api/admin/reset\","
                             "status=\"other\"}") == 2);
    assert_true(sample(text, "stock_http_requests_total{route=\"other\",status=\"404\"}") == 1);
    /* Pairs never seen are not written. */
    assert_false(
        has_series(text, "stock_http_requests_total{route=\"/api/deduct\",status=\"503\"}"));
    assert_false(has_series(text, "stock_http_requests_total{route=\"/healthz\",status=\"200\"}"));
    free(text);
    metrics_destroy(m);
}

/* Each route is counted under a name of its own: one request on every route gives one
 * series per route, each counting 1 (two routes sharing a name would merge, or repeat, a
 * series), named as API.md names the paths; anything else is "other". */
static void test_each_route_counts_under_its_own_name(void **state)
{
    metrics *m = make();
    char series[160], *text;

    (void)state;
    for (int r = 0; r < ROUTE_COUNT_; r++)
        metrics_count_request(m, (metrics_route)r, 200);
    text = metrics_render(m, NULL);
    assert_non_null(text);
    for (int r = 0; r < ROUTE_COUNT_; r++) {
        const char *name = metrics_route_name((metrics_route)r);
        assert_non_null(name);
        snprintf(series, sizeof(series), "stock_http_requests_total{route=\"%s\",status=\"200\"}",
                 name);
        if (sample(text, series) != 1)
            fail_msg("%s counts %g after one request on route %d", series, sample(text, series), r);
        char *first = strstr(text, series);
        if (strstr(first + 1, series) != NULL)
            fail_msg("%s is written twice", series);
    }
    assert_string_equal(metrics_route_name(ROUTE_DEDUCT), "/api/deduct");
    assert_string_equal(metrics_route_name(ROUTE_READYZ), "/readyz");
    assert_string_equal(metrics_route_name((metrics_route)(ROUTE_COUNT_ + 1)), "other");
    free(text);
    metrics_destroy(m);
}

static void test_deductions_by_mode_and_outcome(void **state)
{
    static const char *const outcomes[] = {"deducted",     "insufficient_stock", "unknown_goods",
                                           "lock_timeout", "lock_lost",          "unavailable",
                                           "replayed",     "commit_unknown",     "conflict"};
    metrics *m = make();
    char *text, series[160];

    (void)state;
    metrics_count_deduction(m, "redis", DEDUCT_DEDUCTED);
    metrics_count_deduction(m, "redis", DEDUCT_DEDUCTED);
    metrics_count_deduction(m, "none", DEDUCT_INSUFFICIENT_STOCK);
    metrics_count_deduction(m, "local", DEDUCT_REPLAYED);
    metrics_count_deduction(m, "local", DEDUCT_CONFLICT);
    metrics_count_deduction(m, "nosuch", DEDUCT_DEDUCTED);  /* ignored */
    metrics_count_deduction(m, "redis", DEDUCT_NO_OUTCOME); /* ignored */
    metrics_count_deduction(m, NULL, DEDUCT_DEDUCTED);      /* ignored */

    text = metrics_render(m, NULL);
    assert_non_null(text);
    /* Every (mode, outcome) pair is written, zeros included. */
    double total = 0;
    for (size_t i = 0; i < 3; i++) {
        for (size_t o = 0; o < sizeof(outcomes) / sizeof(outcomes[0]); o++) {
            snprintf(series, sizeof(series), "stock_deductions_total{mode=\"%s\",outcome=\"%s\"}",
                     mode_names[i], outcomes[o]);
            total += sample(text, series);
        }
    }
    assert_true(total == 5);
    assert_true(sample(text, "stock_deductions_total{mode=\"local\",outcome=\"conflict\"}") == 1);
    assert_true(sample(text, "stock_deductions_total{mode=\"redis\",outcome=\"deducted\"}") == 2);
    assert_true(
        sample(text, "stock_deductions_total{mode=\"none\",outcome=\"insufficient_stock\"}") == 1);
    assert_true(sample(text, "stock_deductions_total{mode=\"local\",outcome=\"replayed\"}") == 1);
    assert_true(sample(text, "stock_deductions_total{mode=\"redis\",outcome=\"lock_lost\"}") == 0);
    free(text);
    metrics_destroy(m);
}

static void test_lock_wait_histogram(void **state)
{
    static const double les[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                 0.1,    0.25,  0.5,    1,     2.5,  5};
    static const char *const le_text[] = {"0.0005", "0.001", "0.0025", "0.005", "0.01",
                                          "0.025",  "0.05",  "0.1",    "0.25",  "0.5",
                                          "1",      "2.5",   "5"};
    /* Observations and the sum they make (a negative or NaN wait counts as 0). */
    static const double waits[] = {0, 0.0005, 0.0006, 0.002, 0.003, 0.003, 0.7,
                                   2, 4.9,    5,      6,     120,   -1,    NAN};
    const double sum = 0.0005 + 0.0006 + 0.002 + 0.003 + 0.003 + 0.7 + 2 + 4.9 + 5 + 6 + 120;
    size_t n = sizeof(waits) / sizeof(waits[0]);
    metrics *m = make();
    char *text, series[96];
    double prev = 0;

    (void)state;
    for (size_t i = 0; i < n; i++)
        metrics_observe_lock_wait(m, waits[i]);
    text = metrics_render(m, NULL);
    assert_non_null(text);

    for (size_t b = 0; b < sizeof(les) / sizeof(les[0]); b++) {
        snprintf(series, sizeof(series), "stock_lock_wait_seconds_bucket{le=\"%s\"}", le_text[b]);
        double got = sample(text, series);
        /* Cumulative: the bucket holds every observation <= le (a negative or NaN wait is
         * counted as 0). */
        double want = 0;
        for (size_t i = 0; i < n; i++) {
            double w = waits[i] > 0 ? waits[i] : 0;
            if (w <= les[b])
                want++;
        }
        if (got != want)
            fail_msg("le=%s: %g, want %g", le_text[b], got, want);
        assert_true(got >= prev);
        prev = got;
    }
    assert_true(sample(text, "stock_lock_wait_seconds_bucket{le=\"+Inf\"}") == n);
    assert_true(sample(text, "stock_lock_wait_seconds_count") == n);
    assert_true(fabs(sample(text, "stock_lock_wait_seconds_sum") - sum) < 1e-6);
    free(text);
    metrics_destroy(m);
}

/* The batch sizes' histogram: counts of requests, powers of two, a sum in requests. */
static void test_batch_histogram(void **state)
{
    metrics *m = make();
    char *text;

    (void)state;
    metrics_observe_batch(m, 1);
    metrics_observe_batch(m, 17);
    metrics_observe_batch(m, 17);
    metrics_observe_batch(m, 64);
    metrics_observe_batch(m, 0); /* no batch answers nobody: counted as one */
    metrics_observe_batch(m, 5000);
    text = metrics_render(m, NULL);
    assert_non_null(text);
    assert_true(sample(text, "stock_batch_requests_bucket{le=\"1\"}") == 2);
    assert_true(sample(text, "stock_batch_requests_bucket{le=\"16\"}") == 2);
    assert_true(sample(text, "stock_batch_requests_bucket{le=\"32\"}") == 4);
    assert_true(sample(text, "stock_batch_requests_bucket{le=\"64\"}") == 5);
    assert_true(sample(text, "stock_batch_requests_bucket{le=\"1024\"}") == 5);
    assert_true(sample(text, "stock_batch_requests_bucket{le=\"+Inf\"}") == 6);
    assert_true(sample(text, "stock_batch_requests_count") == 6);
    assert_true(fabs(sample(text, "stock_batch_requests_sum") - 5100) < 1e-6);
    free(text);
    metrics_destroy(m);
}

/* The hand-off's histogram: its own buckets, down to 50 us, apart from the lock waits. */
static void test_lock_handoff_histogram(void **state)
{
    metrics *m = make();
    char *text;

    (void)state;
    metrics_observe_lock_handoff(m, 0.00004);
    metrics_observe_lock_handoff(m, 0.0003);
    metrics_observe_lock_handoff(m, 0.0003);
    metrics_observe_lock_handoff(m, 1.2);
    metrics_observe_lock_handoff(m, 9);
    text = metrics_render(m, NULL);
    assert_non_null(text);
    assert_true(sample(text, "stock_lock_handoff_seconds_bucket{le=\"5e-05\"}") == 1);
    assert_true(sample(text, "stock_lock_handoff_seconds_bucket{le=\"0.00025\"}") == 1);
    assert_true(sample(text, "stock_lock_handoff_seconds_bucket{le=\"0.0005\"}") == 3);
    assert_true(sample(text, "stock_lock_handoff_seconds_bucket{le=\"2.5\"}") == 4);
    assert_true(sample(text, "stock_lock_handoff_seconds_bucket{le=\"+Inf\"}") == 5);
    assert_true(sample(text, "stock_lock_handoff_seconds_count") == 5);
    assert_true(fabs(sample(text, "stock_lock_handoff_seconds_sum") - 10.20064) < 1e-6);
    assert_true(sample(text, "stock_lock_wait_seconds_count") == 0);
    free(text);
    metrics_destroy(m);
}

static void test_lock_timeouts_and_external_figures(void **state)
{
    metrics *m = make();
    metrics_external ext = {
        .lock_renewals = 12345678901ULL,
        .lock_lost = 2,
        .db_pool_size = 16,
        .db_pool_open = 5,
        .db_pool_in_use = 3,
        .redis_pool_size = 8,
        .redis_pool_in_use = 1,
        .http_connections = 42,
        .switches_voluntary = 9876543210ULL,
        .switches_involuntary = 77,
    };
    char *text;

    (void)state;
    metrics_count_lock_timeout(m);
    metrics_count_lock_timeout(m);
    metrics_count_lock_timeout(NULL);
    metrics_count_optimistic_retries(m, 3);
    metrics_count_optimistic_retries(m, 4);
    metrics_count_optimistic_retries(m, -1); /* ignored */
    metrics_count_optimistic_retries(NULL, 1);
    text = metrics_render(m, &ext);
    assert_non_null(text);
    assert_true(sample(text, "stock_lock_timeouts_total") == 2);
    assert_true(sample(text, "stock_optimistic_retries_total") == 7);
    assert_true(sample(text, "stock_lock_renewals_total") == 12345678901.0);
    assert_true(sample(text, "stock_lock_lost_total") == 2);
    assert_true(sample(text, "stock_db_pool_connections{state=\"size\"}") == 16);
    assert_true(sample(text, "stock_db_pool_connections{state=\"open\"}") == 5);
    assert_true(sample(text, "stock_db_pool_connections{state=\"in_use\"}") == 3);
    assert_true(sample(text, "stock_redis_pool_connections{state=\"size\"}") == 8);
    assert_true(sample(text, "stock_redis_pool_connections{state=\"in_use\"}") == 1);
    assert_true(sample(text, "stock_http_connections") == 42);
    assert_true(sample(text, "stock_process_context_switches_total{kind=\"voluntary\"}") ==
                9876543210.0);
    assert_true(sample(text, "stock_process_context_switches_total{kind=\"involuntary\"}") == 77);
    free(text);

    /* No external figures: zeros. */
    text = metrics_render(m, NULL);
    assert_non_null(text);
    assert_true(sample(text, "stock_lock_renewals_total") == 0);
    assert_true(sample(text, "stock_http_connections") == 0);
    free(text);
    metrics_destroy(m);
}

/* A timed sale's stages are summed per mode, exactly (nanoseconds), the handler's JSON time
 * beside them; a request's parts per route. Nothing is shown for a mode or a route never
 * timed, and an unknown mode or a negative time changes nothing. */
static void test_sale_stages_and_http_parts(void **state)
{
    static const char *const stages[] = {"acquire", "claim", "commit", "release", "rest"};
    const int64_t first[DEDUCT_STAGES_] = {41000, 120000, 250000, 30000, 9000};
    const int64_t second[DEDUCT_STAGES_] = {1000000001, 2, 3, 4, -5};
    metrics *m = make();
    char *text, series[128];

    (void)state;
    assert_int_equal(sizeof(stages) / sizeof(stages[0]), DEDUCT_STAGES_);
    metrics_observe_sale(m, "redis", first, 7000);
    metrics_observe_sale(m, "redis", second, 1);
    metrics_observe_sale(m, "no-such-mode", first, 7000);
    metrics_observe_http(m, ROUTE_DEDUCT, 2000, 500000, 60000);
    metrics_observe_http(m, ROUTE_DEDUCT, 0, 400000, -1);
    text = metrics_render(m, NULL);
    assert_non_null(text);
    for (int i = 0; i < DEDUCT_STAGES_; i++) {
        assert_string_equal(deduct_stage_name((deduct_stage)i), stages[i]);
        snprintf(series, sizeof(series),
                 "stock_sale_stage_seconds_total{mode=\"redis\",stage=\"%s\"}", stages[i]);
        int64_t ns = first[i] + (second[i] > 0 ? second[i] : 0);
        assert_true(fabs(sample(text, series) - (double)ns / 1e9) < 1e-12);
    }
    assert_true(
        has_series(text, "stock_sale_stage_seconds_total{mode=\"redis\",stage=\"acquire\"}"));
    assert_non_null(strstr(text, "stage=\"acquire\"} 1.000041001\n"));
    assert_true(fabs(sample(text, "stock_sale_stage_seconds_total{mode=\"redis\",stage=\"json\"}") -
                     7001e-9) < 1e-12);
    assert_true(sample(text, "stock_sale_timed_total{mode=\"redis\"}") == 2);
    assert_null(strstr(text, "mode=\"none\",stage="));
    assert_null(strstr(text, "stock_sale_timed_total{mode=\"none\"}"));
    assert_true(
        fabs(sample(text, "stock_http_seconds_total{route=\"/api/deduct\",part=\"queue\"}") -
             2e-6) < 1e-12);
    assert_true(
        fabs(sample(text, "stock_http_seconds_total{route=\"/api/deduct\",part=\"handler\"}") -
             900e-6) < 1e-12);
    assert_true(
        fabs(sample(text, "stock_http_seconds_total{route=\"/api/deduct\",part=\"around\"}") -
             60e-6) < 1e-12);
    assert_null(strstr(text, "stock_http_seconds_total{route=\"/healthz\""));
    free(text);
    metrics_destroy(m);
}

static void test_no_modes_and_null(void **state)
{
    metrics *m = metrics_create(NULL, 0);
    char *text;

    (void)state;
    assert_non_null(m);
    metrics_count_deduction(m, "redis", DEDUCT_DEDUCTED);
    text = metrics_render(m, NULL);
    assert_non_null(text);
    assert_non_null(strstr(text, "# TYPE stock_deductions_total counter\n"));
    assert_null(strstr(text, "stock_deductions_total{"));
    free(text);
    metrics_destroy(m);
    metrics_destroy(NULL);
    assert_null(metrics_render(NULL, NULL));
}

#define THREADS 4
#define PER_THREAD 50000

static void *record(void *arg)
{
    metrics *m = arg;
    for (int i = 0; i < PER_THREAD; i++) {
        metrics_count_request(m, ROUTE_DEDUCT, 200);
        metrics_count_deduction(m, "redis", DEDUCT_DEDUCTED);
        metrics_observe_lock_wait(m, 0.001);
        metrics_observe_sale(m, "redis", (const int64_t[DEDUCT_STAGES_]){1, 2, 3, 4, 5}, 6);
        metrics_observe_http(m, ROUTE_DEDUCT, 1, 2, 3);
    }
    return NULL;
}

static void test_concurrent_updates_are_not_lost(void **state)
{
    metrics *m = make();
    pthread_t threads[THREADS];
    char *text;

    (void)state;
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, record, m), 0);
    /* Rendering while they record must be safe too (ThreadSanitizer-clean by design). */
    for (int i = 0; i < 5; i++) {
        text = metrics_render(m, NULL);
        assert_non_null(text);
        free(text);
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);

    text = metrics_render(m, NULL);
    assert_non_null(text);
    const double total = (double)THREADS * PER_THREAD;
    assert_true(sample(text, "stock_http_requests_total{route=\"/api/deduct\",status=\"200\"}") ==
                total);
    assert_true(sample(text, "stock_deductions_total{mode=\"redis\",outcome=\"deducted\"}") ==
                total);
    assert_true(sample(text, "stock_lock_wait_seconds_bucket{le=\"0.001\"}") == total);
    assert_true(sample(text, "stock_lock_wait_seconds_count") == total);
    assert_true(fabs(sample(text, "stock_lock_wait_seconds_sum") - total * 0.001) < 1e-6);
    assert_true(sample(text, "stock_sale_timed_total{mode=\"redis\"}") == total);
    assert_true(fabs(sample(text, "stock_sale_stage_seconds_total{mode=\"redis\",stage=\"json\"}") -
                     total * 6e-9) < 1e-12);
    assert_true(
        fabs(sample(text, "stock_http_seconds_total{route=\"/api/deduct\",part=\"around\"}") -
             total * 3e-9) < 1e-12);
    free(text);
    metrics_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_families_have_help_and_type),
        cmocka_unit_test(test_every_line_is_well_formed),
        cmocka_unit_test(test_requests_by_route_and_status),
        cmocka_unit_test(test_each_route_counts_under_its_own_name),
        cmocka_unit_test(test_deductions_by_mode_and_outcome),
        cmocka_unit_test(test_lock_wait_histogram),
        cmocka_unit_test(test_lock_handoff_histogram),
        cmocka_unit_test(test_batch_histogram),
        cmocka_unit_test(test_lock_timeouts_and_external_figures),
        cmocka_unit_test(test_sale_stages_and_http_parts),
        cmocka_unit_test(test_no_modes_and_null),
        cmocka_unit_test(test_concurrent_updates_are_not_lost),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
