/*
 * split_vote.c - Redlock's split vote, counted (a program that prints, not a test).
 *
 *   build/split-vote --ports P1,P2,P3,P4,P5 [--host 127.0.0.1] [--trials 100] [--wait-ms 600]
 *   bench/split-vote.sh [--trials 100] [--wait-ms 600]   (starts five throwaway redis-servers)
 *
 * Five clients ask for one lock at the same instant, each through lock/redlock.c over the same
 * five servers, each asking them in its own order: client i asks server i first, then the next
 * ones round (their network: what each reaches first). Their first attempt is held in step
 * (redlock_options.before_set: a barrier before each SET of attempt 1, as the ladder holds
 * requests at a point and releases them together), so each wins the server it asked first and
 * finds the others taken: five votes of one, nobody holds the majority of three (a split
 * vote, every trial), and each gives back what it won and tries again after its retry delay,
 * no longer held. With the random part of that delay (base 20 ms plus 0 to
 * 20 ms, redlock_retry_delay_ms), the one that comes back first finds every server free and
 * wins; without it (retry_fixed: exactly 20 ms), the five come back together, as in step as
 * they left, and split again, until the machine's own noise parts them.
 *
 * A trial ends when every client has returned (a winner gives its lock back at once, so the
 * others win after it). Its figure is the attempts of the first client to hold the lock (1:
 * no split; 2: one split round, then a holder), or none when nobody held it within --wait-ms.
 * One table, a line per retry policy: trials, trials whose first round was split (all: it is
 * held so), those whose second round was split too, and the rounds to the first holder
 * (median, mean, max). Both policies run the same trials, in turns
 * (a trial of one, then of the other), so that the machine's load weighs on both alike.
 */
#include "bench/clock.h"
#include "lock/redlock.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLIENTS 5
#define LEASE_MS 2000

typedef struct opts {
    char host[256];
    int ports[CLIENTS];
    int trials;
    int64_t wait_ms;
} opts;

/* One retry policy: its five clients, each with the servers in its own order, and what its
 * trials came to. */
typedef struct policy {
    const char *name;
    bool fixed;
    redlock *clients[CLIENTS];
    int *rounds; /* per trial: the first holder's attempts, 0 when nobody held */
} policy;

/* One trial of one policy, shared by its five threads. */
typedef struct trial {
    policy *p;
    char key[64];
    int64_t wait_ms;
    pthread_barrier_t step;     /* the five clients' SETs of attempt 1, one node at a time */
    _Atomic int first_attempts; /* the first holder's attempts; 0 until someone holds */
    _Atomic int errors;
} trial;

typedef struct client_arg {
    trial *t;
    int i;
} client_arg;

static int parse_ports(const char *s, int *ports)
{
    int n = 0;
    char *end;

    while (n < CLIENTS) {
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 65535)
            return -1;
        ports[n++] = (int)v;
        if (*end == '\0')
            break;
        if (*end != ',')
            return -1;
        s = end + 1;
    }
    return n == CLIENTS && *end == '\0' ? 0 : -1;
}

static int parse_args(int argc, char **argv, opts *o)
{
    bool have_ports = false;

    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->trials = 100;
    o->wait_ms = 600;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--ports") == 0 && v != NULL) {
            if (parse_ports(v, o->ports) != 0)
                return -1;
            have_ports = true;
        } else if (strcmp(argv[i], "--host") == 0 && v != NULL && strlen(v) < sizeof(o->host)) {
            snprintf(o->host, sizeof(o->host), "%s", v);
        } else if (strcmp(argv[i], "--trials") == 0 && v != NULL) {
            o->trials = atoi(v);
        } else if (strcmp(argv[i], "--wait-ms") == 0 && v != NULL) {
            o->wait_ms = atoi(v);
        } else {
            return -1;
        }
        i++;
    }
    return have_ports && o->trials >= 1 && o->trials <= 100000 && o->wait_ms >= 100 &&
                   o->wait_ms <= 60000
               ? 0
               : -1;
}

/* The trial of the moment, which the clients' before_set reads (one trial runs at a time). */
static trial *_Atomic current;

/* redlock_options.before_set: every SET of the first attempt waits for the other four
 * clients' SET of the same step; later attempts run free. */
static void in_step(void *arg, int attempt, int node)
{
    (void)arg;
    (void)node;
    if (attempt == 1)
        pthread_barrier_wait(&atomic_load(&current)->step);
}

/* Client i's Redlock: the five servers from server i on, round. */
static int make_client(const opts *o, bool fixed, int i, redlock **out)
{
    redlock_node nodes[CLIENTS];
    redlock_options ro;

    for (int k = 0; k < CLIENTS; k++) {
        snprintf(nodes[k].host, sizeof(nodes[k].host), "%s", o->host);
        nodes[k].port = o->ports[(i + k) % CLIENTS];
    }
    redlock_options_init(&ro);
    ro.nodes = nodes;
    ro.n_nodes = CLIENTS;
    ro.retry_fixed = fixed;
    ro.before_set = in_step;
    return redlock_create(&ro, out);
}

static void *client_main(void *arg)
{
    client_arg *a = arg;
    trial *t = a->t;
    redlock_holding h;
    int rc, none = 0;

    rc = redlock_lock(t->p->clients[a->i], t->key, t->wait_ms, LEASE_MS, &h);
    if (rc == LOCK_OK) {
        /* The first to hold it says how many rounds it took; then it lets the others in. */
        atomic_compare_exchange_strong(&t->first_attempts, &none, h.attempts);
        redlock_unlock(t->p->clients[a->i], &h);
    } else if (rc != LOCK_ERR_TIMEOUT) {
        atomic_fetch_add(&t->errors, 1);
        fprintf(stderr, "split-vote: client %d: %s (%s)\n", a->i + 1, lock_strerror(rc),
                lock_last_error());
    }
    return NULL;
}

/* Runs trial `n` of policy p. 0, or -1 when a client failed for another reason than the
 * wait. */
static int run_trial(policy *p, int n, int64_t wait_ms)
{
    trial t = {.p = p, .wait_ms = wait_ms};
    client_arg args[CLIENTS];
    pthread_t th[CLIENTS];
    int started = 0;

    snprintf(t.key, sizeof(t.key), "split-vote:%s:%lld:%d", p->name, (long long)bench_wall_ms(), n);
    atomic_init(&t.first_attempts, 0);
    atomic_init(&t.errors, 0);
    if (pthread_barrier_init(&t.step, NULL, CLIENTS) != 0)
        return -1;
    atomic_store(&current, &t);
    for (int i = 0; i < CLIENTS; i++) {
        args[i] = (client_arg){&t, i};
        if (pthread_create(&th[i], NULL, client_main, &args[i]) != 0)
            break;
        started++;
    }
    if (started < CLIENTS) { /* the barrier would never open: nothing to join but exit */
        fprintf(stderr, "split-vote: cannot start a thread\n");
        exit(1);
    }
    for (int i = 0; i < CLIENTS; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&t.step);
    p->rounds[n] = atomic_load(&t.first_attempts);
    return atomic_load(&t.errors) == 0 ? 0 : -1;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The policy's line of the table. */
static void report(const policy *p, int trials)
{
    int *held = malloc(sizeof(int) * (size_t)trials);
    int n = 0, split = 0, again = 0, never = 0;
    long sum = 0;

    if (held == NULL)
        return;
    for (int i = 0; i < trials; i++) {
        if (p->rounds[i] == 0) {
            never++;
            split++;
            again++;
            continue;
        }
        split += p->rounds[i] > 1;
        again += p->rounds[i] > 2;
        held[n++] = p->rounds[i];
        sum += p->rounds[i];
    }
    qsort(held, (size_t)n, sizeof(int), cmp_int);
    if (n > 0)
        printf("| %s | %d | %d | %d | %d | %.2f | %d | %d |\n", p->name, trials, split, again,
               held[n / 2], (double)sum / n, held[n - 1], never);
    else
        printf("| %s | %d | %d | %d | - | - | - | %d |\n", p->name, trials, split, again, never);
    free(held);
}

int main(int argc, char **argv)
{
    policy ps[2] = {{.name = "random delay (20 to 40 ms)", .fixed = false},
                    {.name = "fixed delay (20 ms)", .fixed = true}};
    opts o;
    int failed = 0;

    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: split-vote --ports P1,P2,P3,P4,P5 [--host H] [--trials 100] "
                        "[--wait-ms 600]\n");
        return 2;
    }
    for (int k = 0; k < 2; k++) {
        ps[k].rounds = calloc((size_t)o.trials, sizeof(int));
        if (ps[k].rounds == NULL)
            return 1;
        for (int i = 0; i < CLIENTS; i++)
            if (make_client(&o, ps[k].fixed, i, &ps[k].clients[i]) != LOCK_OK) {
                fprintf(stderr, "split-vote: cannot make client %d\n", i + 1);
                return 1;
            }
    }
    for (int n = 0; n < o.trials; n++)
        for (int k = 0; k < 2; k++)
            if (run_trial(&ps[(n + k) % 2], n, o.wait_ms) != 0)
                failed = 1;

    printf("Five clients ask for one lock at once, each asking the five servers from its own "
           "first, their first attempt held in step; %d trials of each policy, in turns, each "
           "client waiting %lld ms at most.\n\n",
           o.trials, (long long)o.wait_ms);
    printf("| retry after a failed attempt | trials | first round split | second round split "
           "too | rounds to the first holder: median | mean | max | nobody held |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int k = 0; k < 2; k++) {
        report(&ps[k], o.trials);
        for (int i = 0; i < CLIENTS; i++)
            redlock_destroy(ps[k].clients[i]);
        free(ps[k].rounds);
    }
    return failed;
}
