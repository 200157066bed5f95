/*
 * env.c - the environment tests/integration.sh gives the stack's test programs, what a case
 * owns (freed by its teardown, so a failed assertion leaks nothing), the case bookkeeping,
 * and stack_main(), the run every program shares. See stack_support.h.
 */
#include "tests/stack/stack_support.h"

#include <fnmatch.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MARGIN_MS 10000L /* a request's timeout: the lock wait bound plus this */

test_env g_env;
CURL *g_curl;
static const char *g_case_name = "";
static double g_case_start;

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------------------------
 * What a case owns, freed by its teardown (so a failed assertion leaks nothing)
 * ------------------------------------------------------------------------------------------ */

typedef struct owned {
    void *ptr;
    release_fn release;
} owned;

static owned *g_owned;
static size_t g_n_owned, g_cap_owned;

void *own(void *ptr, release_fn release)
{
    if (ptr == NULL)
        return NULL;
    if (g_n_owned == g_cap_owned) {
        size_t cap = g_cap_owned ? 2 * g_cap_owned : 256;
        owned *grown = realloc(g_owned, cap * sizeof(*grown));
        if (grown == NULL) {
            release(ptr);
            fail_msg("out of memory");
            return NULL; /* not reached: fail_msg() leaves the case */
        }
        g_owned = grown;
        g_cap_owned = cap;
    }
    g_owned[g_n_owned].ptr = ptr;
    g_owned[g_n_owned].release = release;
    g_n_owned++;
    return ptr;
}

void release_owned(void)
{
    while (g_n_owned > 0) {
        g_n_owned--;
        g_owned[g_n_owned].release(g_owned[g_n_owned].ptr);
    }
}

void json_release(void *json)
{
    json_decref((json_t *)json);
}

/* ------------------------------------------------------------------------------------------
 * Case bookkeeping
 * ------------------------------------------------------------------------------------------ */

void begin_case(const char *name)
{
    g_case_name = name;
    if (g_env.problem[0] != '\0')
        fail_msg("the stack is not usable: %s", g_env.problem);
}

int case_setup(void **state)
{
    (void)state;
    g_case_name = "";
    g_case_start = now_s();
    return 0;
}

int case_teardown(void **state)
{
    (void)state;
    release_owned();
    printf("[ TIMING   ] %s: %.2f s\n", g_case_name, now_s() - g_case_start);
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------------------------ */

void env_load(void)
{
    const char *urls = getenv("REPLICA_URLS");
    const char *wait = getenv("LOCK_WAIT_MS");
    const char *required[] = {"STOCK_URL",  "REPLICA_URLS", "ADMIN_TOKEN",
                              "REDIS_PORT", "PG_PORT",      "RUN_DIR"};

    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
        const char *v = getenv(required[i]);
        if (v == NULL || v[0] == '\0') {
            snprintf(g_env.problem, sizeof(g_env.problem),
                     "%s is not set (tests/integration.sh sets STOCK_URL, REPLICA_URLS, "
                     "ADMIN_TOKEN, REDIS_PORT, PG_PORT, RUN_DIR and the other ports "
                     "scripts/stack.sh needs)",
                     required[i]);
            return;
        }
    }
    g_env.stock_url = getenv("STOCK_URL");
    g_env.admin_token = getenv("ADMIN_TOKEN");
    g_env.redis_port = getenv("REDIS_PORT");
    g_env.pg_port = getenv("PG_PORT");
    if (strspn(g_env.redis_port, "0123456789") != strlen(g_env.redis_port) ||
        strspn(g_env.pg_port, "0123456789") != strlen(g_env.pg_port)) {
        snprintf(g_env.problem, sizeof(g_env.problem),
                 "REDIS_PORT '%s' or PG_PORT '%s' is not a number", g_env.redis_port,
                 g_env.pg_port);
        return;
    }
    g_env.lock_wait_ms = 2000;
    if (wait != NULL && wait[0] != '\0') {
        char *end;
        g_env.lock_wait_ms = strtol(wait, &end, 10);
        if (*end != '\0' || g_env.lock_wait_ms < 100 || g_env.lock_wait_ms > 20000) {
            snprintf(g_env.problem, sizeof(g_env.problem),
                     "LOCK_WAIT_MS '%s' is not a number from 100 to 20000", wait);
            return;
        }
    }
    g_env.timeout_ms = g_env.lock_wait_ms + TIMEOUT_MARGIN_MS;
    snprintf(g_env.auth_header, sizeof(g_env.auth_header), "Authorization: Bearer %s",
             g_env.admin_token);
    snprintf(g_env.run_tag, sizeof(g_env.run_tag), "%ld-%ld", (long)getpid(), (long)time(NULL));

    /* REPLICA_URLS: comma-separated, trailing slashes dropped. */
    const char *p = urls;
    while (*p != '\0' && g_env.n_replicas < MAX_REPLICAS) {
        size_t n = strcspn(p, ",");
        while (n > 0 && p[n - 1] == '/')
            n--;
        if (n > 0 && (g_env.replicas[g_env.n_replicas] = strndup(p, n)) != NULL)
            g_env.n_replicas++;
        p += strcspn(p, ",");
        if (*p == ',')
            p++;
    }
    if (g_env.n_replicas < 1) {
        snprintf(g_env.problem, sizeof(g_env.problem), "REPLICA_URLS '%s' names no URL", urls);
        return;
    }

    /* The slow replica: only the lock_lost cases need it, and they fail without it. */
    const char *slow = getenv("SLOW_REPLICA_URL");
    if (slow != NULL && slow[0] != '\0') {
        const char *delay = getenv("SLOW_REPLICA_DELAY_MS"),
                   *lease = getenv("SLOW_REPLICA_LEASE_MS");
        g_env.slow_url = slow;
        g_env.slow_log = getenv("SLOW_REPLICA_LOG");
        g_env.slow_delay_ms = delay != NULL ? strtol(delay, NULL, 10) : 0;
        g_env.slow_lease_ms = lease != NULL ? strtol(lease, NULL, 10) : 0;
    }
    /* The two delayed replicas: only the five-step cases need them. */
    const char *delayed = getenv("DELAYED_REPLICA_URLS");
    if (delayed != NULL && delayed[0] != '\0') {
        const char *comma = strchr(delayed, ',');
        const char *ddelay = getenv("DELAYED_REPLICA_DELAY_MS");
        if (comma != NULL) {
            g_env.delayed_urls[0] = strndup(delayed, (size_t)(comma - delayed));
            g_env.delayed_urls[1] = strdup(comma + 1);
        }
        g_env.delayed_delay_ms = ddelay != NULL ? strtol(ddelay, NULL, 10) : 0;
    }
    if (access("scripts/stack.sh", X_OK) != 0) {
        snprintf(g_env.problem, sizeof(g_env.problem),
                 "scripts/stack.sh is not here: run the test from the project root");
        return;
    }
}

void env_learn_instances(void)
{
    for (size_t i = 0; i < g_env.n_replicas && g_env.problem[0] == '\0'; i++) {
        http_reply r;
        http_request rq = {.method = "GET", .base = g_env.replicas[i], .path = "/healthz"};
        json_t *j = NULL;
        if (http_do(g_curl, &rq, &r) == 0 && r.status == 200)
            j = json_loadb(r.body, r.len, 0, NULL);
        const json_t *name = json_object_get(j, "instance");
        if (json_is_string(name))
            snprintf(g_env.instances[i], sizeof(g_env.instances[i]), "%s", json_string_value(name));
        else
            snprintf(g_env.problem, sizeof(g_env.problem),
                     "GET %s/healthz did not answer 200 with an \"instance\" (status %ld%s%s): "
                     "is the stack up?",
                     g_env.replicas[i], r.status, r.error[0] ? ", " : "", r.error);
        json_decref(j);
        free(r.body);
    }
    for (size_t i = 0; i < g_env.n_replicas && g_env.problem[0] == '\0'; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp(g_env.instances[i], g_env.instances[k]) == 0)
                snprintf(g_env.problem, sizeof(g_env.problem),
                         "replicas %s and %s both call themselves %s", g_env.replicas[k],
                         g_env.replicas[i], g_env.instances[i]);
}


/* Whether NAME matches one of the comma-separated patterns of LIST (NULL or "": none). */
static bool case_skipped(const char *name, const char *list)
{
    char pattern[128];

    while (list != NULL && *list != '\0') {
        size_t len = strcspn(list, ",");
        if (len > 0 && len < sizeof(pattern)) {
            memcpy(pattern, list, len);
            pattern[len] = '\0';
            if (fnmatch(pattern, name, 0) == 0)
                return true;
        }
        list += len + (list[len] == ',');
    }
    return false;
}

int stack_main(const char *name, const struct CMUnitTest *tests, size_t n, int argc, char **argv)
{
    int failed;

    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "%s: curl_global_init failed\n", name);
        return 1;
    }
    json_object_seed(0); /* once, before any thread makes an object */
    g_curl = curl_easy_init();
    if (g_curl == NULL)
        snprintf(g_env.problem, sizeof(g_env.problem), "curl_easy_init failed");
    else
        env_load();
    if (g_env.problem[0] == '\0')
        env_learn_instances();
    if (g_env.problem[0] != '\0')
        fprintf(stderr, "%s: FAILING every case: %s\n", name, g_env.problem);
    else
        printf("%s: nginx %s, %zu replicas, lock wait %ld ms\n", name, g_env.stock_url,
               g_env.n_replicas, g_env.lock_wait_ms);

    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    /* STACK_SKIP_CASES: a comma-separated list of patterns (fnmatch's '*' and '?', as
     * cmocka's filter) of cases not to run: the ThreadSanitizer pass leaves out the load
     * cases that exercise no thread of the replica the others do not. */
    struct CMUnitTest *kept = calloc(n > 0 ? n : 1, sizeof(*kept));
    size_t n_kept = 0;
    if (kept == NULL) {
        fprintf(stderr, "%s: out of memory\n", name);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        if (!case_skipped(tests[i].name, getenv("STACK_SKIP_CASES")))
            kept[n_kept++] = tests[i];
    double start = now_s();
    failed = _cmocka_run_group_tests(name, kept, n_kept, NULL, NULL);
    printf("%s: %.1f s in all\n", name, now_s() - start);
    free(kept);

    release_owned();
    free(g_owned);
    for (size_t i = 0; i < g_env.n_replicas; i++)
        free(g_env.replicas[i]);
    free(g_env.delayed_urls[0]);
    free(g_env.delayed_urls[1]);
    curl_easy_cleanup(g_curl);
    curl_global_cleanup();
    return failed == 0 ? 0 : 1;
}
