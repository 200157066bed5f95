/*
 * cluster.c - the slot map and the routing of commands over a Redis Cluster (see cluster.h).
 *
 * The map is an array of 16384 small integers, each the index of a master in nodes[]; -1 for
 * a slot nobody is known to serve. A new map forgets the masters it does not name (a cluster
 * whose masters are replaced one by one, or move, would otherwise fill nodes[] and freeze the
 * map): a forgotten node leaves nodes[] at once (its place is reused), and is freed when the
 * last command that holds it (`users`, counted under the mutex from the lookup to the
 * connection's return) lets it go, so a pointer to it never dangles. The mutex guards the
 * array, the map and the counts, never a round trip.
 */
#include "lock/cluster.h"
#include "lock/clock.h"
#include "lock/error.h"
#include "lock/result.h"
#include "lock/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A full read of the map at most this often: after a failover every command to the dead
 * master fails at once, and each would otherwise ask again. */
#define REFRESH_MIN_MS 100

/* A map older than this is read again by the next command (within its bound): a change that
 * no command of this process stumbled on (its subscriber's node died, say) is seen anyway. */
#define REFRESH_MAX_AGE_MS 5000

/* Ranges of slots in one CLUSTER SLOTS answer at most: a cluster made with redis-cli has
 * one per master; migrations of single slots add a few. */
#define RANGES_MAX 1024

/* The pause before a command answered TRYAGAIN is sent again. */
#define TRYAGAIN_PAUSE_NS (10 * LOCK__NS_PER_MS)

typedef struct cluster_node {
    lock__conn_address addr; /* fixed: a master does not move, the map does */
    lock__conn_config cfg;
    lock__pool *pool;
    int users;    /* commands holding it now (under mu) */
    bool retired; /* forgotten by a map: freed by its last user (under mu) */
} cluster_node;

struct lock__cluster {
    pthread_mutex_t mu; /* guards slots, nodes and nnodes */
    int16_t slots[LOCK__SLOTS];
    cluster_node *nodes[LOCK__CLUSTER_NODES_MAX]; /* NULL: a free place */
    int nnodes;                                   /* places used so far (some may be NULL) */
    lock__sentinels seeds;                        /* the list given (its master name unused) */
    int pool_size;
    int connect_timeout_ms, command_timeout_ms;
    pthread_mutex_t refresh_mu;   /* one read of the map at a time */
    _Atomic int64_t refreshed_ns; /* when the map was last read (0: never) */
    _Atomic bool stale;           /* a read is owed: one was wanted and could not be made */
    /* Where the client's subscriber listens, kept on a master of the map (under refresh_mu;
     * NULL until lock__cluster_keep_listener). */
    lock__conn_address *listener;
    void (*listener_moved)(void *arg);
    void *listener_arg;
};

/* ---- CLUSTER SLOTS ---- */

static bool is_int(const redisReply *r, long long lo, long long hi)
{
    return r->type == REDIS_REPLY_INTEGER && r->integer >= lo && r->integer <= hi;
}

int lock__cluster_parse_slots(const redisReply *r, const char *asked_host, lock__slot_range *ranges,
                              int max, int *n)
{
    *n = 0;
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        lock__error_set("CLUSTER SLOTS: %s",
                        r != NULL && r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
        return LOCK_ERR_REDIS;
    }
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *m;
        const char *host;

        /* [first, last, [host, port, id, ...], replica, replica, ...] */
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            !is_int(e->element[0], 0, LOCK__SLOTS - 1) ||
            !is_int(e->element[1], e->element[0]->integer, LOCK__SLOTS - 1))
            goto bad;
        m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING || !is_int(m->element[1], 1, 65535))
            goto bad;
        host = m->element[0]->str;
        if (host[0] == '\0' || strcmp(host, "?") == 0)
            host = asked_host;
        if (*n == max || strlen(host) >= sizeof(ranges->master.host))
            goto bad;
        ranges[*n].first = (int)e->element[0]->integer;
        ranges[*n].last = (int)e->element[1]->integer;
        snprintf(ranges[*n].master.host, sizeof(ranges[*n].master.host), "%s", host);
        ranges[*n].master.port = (int)m->element[1]->integer;
        (*n)++;
    }
    return LOCK_OK;
bad:
    lock__error_set("CLUSTER SLOTS: unexpected reply");
    *n = 0;
    return LOCK_ERR_REDIS;
}

/* ---- the map ---- */

static void node_free(cluster_node *node)
{
    lock__pool_destroy(node->pool);
    lock__conn_address_destroy(&node->addr);
    free(node);
}

/* The index of the master at a, added if new; -1 when full or out of memory. Under mu. */
static int node_index_locked(lock__cluster *cl, const lock__addr *a)
{
    cluster_node *node;
    int place = -1;

    for (int i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i] == NULL) {
            if (place < 0)
                place = i;
            continue;
        }
        if (cl->nodes[i]->addr.port == a->port && strcmp(cl->nodes[i]->addr.host, a->host) == 0)
            return i;
    }
    if (place < 0 && cl->nnodes == LOCK__CLUSTER_NODES_MAX) {
        lock__error_set("redis cluster: more than %d nodes", LOCK__CLUSTER_NODES_MAX);
        return -1;
    }
    node = calloc(1, sizeof(*node));
    if (node == NULL)
        return -1;
    if (lock__conn_address_init(&node->addr, a->host, a->port) != LOCK_OK) {
        free(node);
        return -1;
    }
    node->cfg.addr = &node->addr;
    node->cfg.connect_timeout_ms = cl->connect_timeout_ms;
    node->cfg.command_timeout_ms = cl->command_timeout_ms;
    /* The pool connects lazily: adding a master costs no round trip. */
    if (lock__pool_create(&node->cfg, cl->pool_size, &node->pool) != LOCK_OK) {
        lock__conn_address_destroy(&node->addr);
        free(node);
        return -1;
    }
    if (place >= 0) {
        cl->nodes[place] = node;
        return place;
    }
    cl->nodes[cl->nnodes] = node;
    return cl->nnodes++;
}

/* Forgets every node that none of the n ranges names (and that no slot points at after
 * that): out of nodes[] now, freed now or by its last user. Under mu. */
static void forget_unnamed_locked(lock__cluster *cl, const lock__slot_range *ranges, int n)
{
    for (int i = 0; i < cl->nnodes; i++) {
        cluster_node *node = cl->nodes[i];
        bool named = false;

        for (int r = 0; node != NULL && r < n && !named; r++)
            named = ranges[r].master.port == node->addr.port &&
                    strcmp(ranges[r].master.host, node->addr.host) == 0;
        if (node == NULL || named)
            continue;
        for (int s = 0; s < LOCK__SLOTS; s++)
            if (cl->slots[s] == i)
                cl->slots[s] = -1;
        cl->nodes[i] = NULL;
        if (node->users == 0)
            node_free(node);
        else
            node->retired = true;
    }
}

/* A command is done with a node it got from node_of_slot or node_at. */
static void node_drop(lock__cluster *cl, cluster_node *node)
{
    bool last;

    pthread_mutex_lock(&cl->mu);
    last = --node->users == 0 && node->retired;
    pthread_mutex_unlock(&cl->mu);
    if (last)
        node_free(node);
}

int lock__cluster_apply(lock__cluster *cl, const lock__slot_range *ranges, int n)
{
    int16_t *next = malloc(sizeof(cl->slots));
    int rc = LOCK_OK;

    if (next == NULL)
        return LOCK_ERR_NOMEM;
    for (int s = 0; s < LOCK__SLOTS; s++)
        next[s] = -1;
    for (int i = 0; i < n; i++)
        if (ranges[i].first < 0 || ranges[i].last >= LOCK__SLOTS) {
            free(next);
            return LOCK_ERR_INVALID; /* checked first: a bad map forgets nothing */
        }
    pthread_mutex_lock(&cl->mu);
    forget_unnamed_locked(cl, ranges, n);
    for (int i = 0; i < n; i++) {
        int idx = node_index_locked(cl, &ranges[i].master);

        if (idx < 0 || ranges[i].first < 0 || ranges[i].last >= LOCK__SLOTS) {
            rc = idx < 0 ? LOCK_ERR_NOMEM : LOCK_ERR_INVALID;
            break;
        }
        for (int s = ranges[i].first; s <= ranges[i].last; s++)
            next[s] = (int16_t)idx;
    }
    if (rc == LOCK_OK)
        memcpy(cl->slots, next, sizeof(cl->slots));
    pthread_mutex_unlock(&cl->mu);
    free(next);
    return rc;
}

int lock__cluster_redirected(lock__cluster *cl, const lock__redirect *r)
{
    lock__addr a;
    int idx;

    if (r->ask)
        return LOCK_OK;
    if (r->slot < 0 || r->slot >= LOCK__SLOTS || strlen(r->host) >= sizeof(a.host))
        return LOCK_ERR_INVALID;
    snprintf(a.host, sizeof(a.host), "%s", r->host);
    a.port = r->port;
    pthread_mutex_lock(&cl->mu);
    idx = node_index_locked(cl, &a);
    if (idx >= 0)
        cl->slots[r->slot] = (int16_t)idx;
    pthread_mutex_unlock(&cl->mu);
    return idx >= 0 ? LOCK_OK : LOCK_ERR_NOMEM;
}

/* The master serving slot, or NULL; held until node_drop. */
static cluster_node *node_of_slot(lock__cluster *cl, int slot)
{
    cluster_node *node = NULL;

    pthread_mutex_lock(&cl->mu);
    if (cl->slots[slot] >= 0)
        node = cl->nodes[cl->slots[slot]];
    if (node != NULL)
        node->users++;
    pthread_mutex_unlock(&cl->mu);
    return node;
}

/* The master at host:port (an ASK target), added if new; NULL when full; held until
 * node_drop. */
static cluster_node *node_at(lock__cluster *cl, const char *host, int port)
{
    lock__addr a;
    cluster_node *node = NULL;
    int idx;

    snprintf(a.host, sizeof(a.host), "%.*s", (int)sizeof(a.host) - 1, host);
    a.port = port;
    pthread_mutex_lock(&cl->mu);
    idx = node_index_locked(cl, &a);
    if (idx >= 0) {
        node = cl->nodes[idx];
        node->users++;
    }
    pthread_mutex_unlock(&cl->mu);
    return node;
}

int lock__cluster_master_of(lock__cluster *cl, int slot, lock__addr *out)
{
    cluster_node *node;

    if (slot < 0 || slot >= LOCK__SLOTS)
        return LOCK_ERR_INVALID;
    node = node_of_slot(cl, slot);
    if (node == NULL)
        return LOCK_ERR_REDIS;
    snprintf(out->host, sizeof(out->host), "%s", node->addr.host);
    out->port = node->addr.port;
    node_drop(cl, node);
    return LOCK_OK;
}

/* After a read of the map (under refresh_mu): the subscriber's node must be a master of it.
 * A node the map no longer names (it died, and its slots went to its replica) would leave the
 * waiters deaf to releases, so the subscriber moves to the first range's master. */
static void keep_listener(lock__cluster *cl, const lock__slot_range *ranges, int n)
{
    char host[LOCK__HOST_MAX];
    int port;

    if (cl->listener == NULL || n == 0)
        return;
    (void)lock__conn_address_get(cl->listener, host, &port);
    for (int i = 0; i < n; i++)
        if (ranges[i].master.port == port && strcmp(ranges[i].master.host, host) == 0)
            return;
    if (lock__conn_address_move(cl->listener, ranges[0].master.host, ranges[0].master.port))
        cl->listener_moved(cl->listener_arg);
}

void lock__cluster_keep_listener(lock__cluster *cl, lock__conn_address *addr,
                                 void (*moved)(void *arg), void *arg)
{
    pthread_mutex_lock(&cl->refresh_mu);
    cl->listener = addr;
    cl->listener_moved = moved;
    cl->listener_arg = arg;
    pthread_mutex_unlock(&cl->refresh_mu);
    /* The seed it starts on may be a replica, or gone already: check it against a map. */
    if (addr != NULL)
        (void)lock__cluster_refresh(cl, true);
}

/* Asks one node for CLUSTER SLOTS on a connection of its own (closed after) and applies the
 * answer, within one command timeout and before deadline_ns. */
static int refresh_from(lock__cluster *cl, const lock__addr *a, int64_t deadline_ns)
{
    int64_t by = lock__now_ns() + lock__ms_to_ns(cl->command_timeout_ms);
    lock__conn_address addr;
    lock__conn_config cfg;
    lock__conn conn;
    lock__slot_range *ranges;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    redisReply *r = NULL;
    int n = 0, rc;

    if (lock__conn_address_init(&addr, a->host, a->port) != LOCK_OK)
        return LOCK_ERR_INVALID;
    cfg.addr = &addr;
    cfg.connect_timeout_ms = cl->connect_timeout_ms;
    cfg.command_timeout_ms = cl->command_timeout_ms;
    lock__conn_init(&conn, &cfg);
    ranges = malloc(sizeof(*ranges) * RANGES_MAX);
    rc = ranges == NULL
             ? LOCK_ERR_NOMEM
             : lock__conn_command(&conn, by < deadline_ns ? by : deadline_ns, 2, argv, NULL, &r);
    if (rc == LOCK_OK)
        rc = lock__cluster_parse_slots(r, a->host, ranges, RANGES_MAX, &n);
    /* A node that answers with no slot at all (a cluster still being made) is no map. */
    if (rc == LOCK_OK && n == 0) {
        lock__error_set("redis %s:%d: CLUSTER SLOTS: no slot served yet", a->host, a->port);
        rc = LOCK_ERR_REDIS;
    }
    if (rc == LOCK_OK)
        rc = lock__cluster_apply(cl, ranges, n);
    if (rc == LOCK_OK)
        keep_listener(cl, ranges, n);
    if (r != NULL)
        freeReplyObject(r);
    free(ranges);
    lock__conn_close(&conn);
    lock__conn_address_destroy(&addr);
    return rc;
}

/*
 * Reads the map, at most once per REFRESH_MIN_MS unless forced, giving up at deadline_ns.
 * LOCK_OK: read; LOCK_ERR_BUSY: not now (read very recently, or another thread is reading
 * it); LOCK_ERR_REDIS: no node answered in time. Whenever it was not read, the router stays
 * `stale`, and the next command reads it first.
 */
static int refresh_until(lock__cluster *cl, bool force, int64_t deadline_ns)
{
    lock__addr known[LOCK__CLUSTER_NODES_MAX];
    int nknown, rc = LOCK_ERR_REDIS;
    int64_t now = lock__now_ns();
    int64_t last = atomic_load(&cl->refreshed_ns);

    if (!force && last != 0 && now - last < lock__ms_to_ns(REFRESH_MIN_MS))
        return LOCK_ERR_BUSY;
    /* Another thread reading the map now does the same work: use its result. */
    if (pthread_mutex_trylock(&cl->refresh_mu) != 0)
        return LOCK_ERR_BUSY;
    pthread_mutex_lock(&cl->mu);
    nknown = 0;
    for (int i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i] == NULL)
            continue;
        snprintf(known[nknown].host, sizeof(known[nknown].host), "%s", cl->nodes[i]->addr.host);
        known[nknown++].port = cl->nodes[i]->addr.port;
    }
    pthread_mutex_unlock(&cl->mu);
    /* The masters known first (they are the cluster as it was), then the seeds (a cluster
     * whose every known master is gone, or a first read). */
    for (int i = 0; i < nknown && rc != LOCK_OK && lock__now_ns() < deadline_ns; i++)
        rc = refresh_from(cl, &known[i], deadline_ns);
    for (int i = 0; i < cl->seeds.count && rc != LOCK_OK && lock__now_ns() < deadline_ns; i++)
        rc = refresh_from(cl, &cl->seeds.addr[i], deadline_ns);
    atomic_store(&cl->refreshed_ns, lock__now_ns());
    if (rc == LOCK_OK)
        atomic_store(&cl->stale, false);
    pthread_mutex_unlock(&cl->refresh_mu);
    return rc;
}

int lock__cluster_refresh(lock__cluster *cl, bool force)
{
    int rc = refresh_until(cl, force, INT64_MAX);

    return rc == LOCK_ERR_BUSY ? LOCK_OK : rc;
}

/* The map may be out of date (a MOVED, a connection failure, CLUSTERDOWN): read it again if
 * it may be read now and time allows; if not, the next command will. */
static void map_doubted(lock__cluster *cl, int64_t deadline_ns)
{
    atomic_store(&cl->stale, true);
    (void)refresh_until(cl, false, deadline_ns);
}

/* ---- create, destroy ---- */

int lock__cluster_create(const char *seeds, int pool_size, int connect_timeout_ms,
                         int command_timeout_ms, lock__cluster **out)
{
    lock__cluster *cl;
    int rc;

    *out = NULL;
    if (seeds == NULL || pool_size < 1 || connect_timeout_ms < 1 || command_timeout_ms < 1)
        return LOCK_ERR_INVALID;
    cl = calloc(1, sizeof(*cl));
    if (cl == NULL)
        return LOCK_ERR_NOMEM;
    /* The Sentinel list has the same form, host:port,...; its parser serves here too (the
     * master name it wants is not used). */
    rc = lock__sentinels_parse(&cl->seeds, seeds, "cluster", command_timeout_ms);
    if (rc != LOCK_OK) {
        free(cl);
        return rc;
    }
    if (pthread_mutex_init(&cl->mu, NULL) != 0) {
        free(cl);
        return LOCK_ERR_NOMEM;
    }
    if (pthread_mutex_init(&cl->refresh_mu, NULL) != 0) {
        pthread_mutex_destroy(&cl->mu);
        free(cl);
        return LOCK_ERR_NOMEM;
    }
    for (int s = 0; s < LOCK__SLOTS; s++)
        cl->slots[s] = -1;
    cl->pool_size = pool_size;
    cl->connect_timeout_ms = connect_timeout_ms;
    cl->command_timeout_ms = command_timeout_ms;
    atomic_init(&cl->refreshed_ns, 0);
    atomic_init(&cl->stale, false);
    /* A cluster that is down now is asked again by the first command. */
    (void)lock__cluster_refresh(cl, true);
    lock__error_clear();
    *out = cl;
    return LOCK_OK;
}

void lock__cluster_destroy(lock__cluster *cl)
{
    if (cl == NULL)
        return;
    for (int i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i] != NULL)
            node_free(cl->nodes[i]);
    pthread_mutex_destroy(&cl->refresh_mu);
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

const lock__addr *lock__cluster_first_seed(const lock__cluster *cl)
{
    return &cl->seeds.addr[0];
}

void lock__cluster_pool_stats(lock__cluster *cl, int *size, int *in_use)
{
    *size = *in_use = 0;
    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < cl->nnodes; i++) {
        if (cl->nodes[i] == NULL)
            continue;
        *size += lock__pool_size(cl->nodes[i]->pool);
        *in_use += lock__pool_in_use(cl->nodes[i]->pool);
    }
    pthread_mutex_unlock(&cl->mu);
}

/* ---- routing ---- */

/* What to send: a command, or a script. */
typedef struct request {
    int argc; /* command */
    const char **argv;
    lock__script script; /* script, when is_script */
    bool is_script, urgent;
    int nkeys, nargs;
    const char *const *keys;
    const char *const *args;
} request;

/* After ASKING, a script is sent with EVAL and its text: the target may not have the script
 * cached, and a NOSCRIPT there would cost the one command ASKING allows. */
static int send_asking(lock__conn *conn, const request *q, int64_t hard_by, redisReply **out)
{
    const char *asking[1] = {"ASKING"};
    const char *argv[3 + 8 + 8];
    char numkeys[12];
    redisReply *r = NULL;
    int argc = 0, rc;

    rc = lock__conn_command(conn, hard_by, 1, asking, NULL, &r);
    if (rc != LOCK_OK)
        return rc;
    freeReplyObject(r);
    if (!q->is_script)
        return lock__conn_command(conn, hard_by, q->argc, q->argv, NULL, out);
    if (q->nkeys > 8 || q->nargs > 8)
        return LOCK_ERR_INVALID;
    snprintf(numkeys, sizeof(numkeys), "%d", q->nkeys);
    argv[argc++] = "EVAL";
    argv[argc++] = lock__script_text(q->script);
    argv[argc++] = numkeys;
    for (int i = 0; i < q->nkeys; i++)
        argv[argc++] = q->keys[i];
    for (int i = 0; i < q->nargs; i++)
        argv[argc++] = q->args[i];
    return lock__conn_command(conn, hard_by, argc, argv, NULL, out);
}

/*
 * Sends q to the master of `slot` (-1: of slot 0), following at most
 * LOCK__CLUSTER_REDIRECTS_MAX redirections. *out may be an error reply that is not a
 * redirection.
 */
/* The node for this turn: the redirection's (asking) or the slot's master, read from the
 * map again once if unknown. Held until node_drop. LOCK_OK, or LOCK_ERR_NOMEM /
 * LOCK_ERR_REDIS (no master known). */
static int pick_node(lock__cluster *cl, int slot, const lock__redirect *asking, int64_t hard_by,
                     cluster_node **node)
{
    if (asking != NULL) {
        /* Held from here to the connection's return, as node_of_slot's is. */
        *node = node_at(cl, asking->host, asking->port);
        return *node != NULL ? LOCK_OK : LOCK_ERR_NOMEM;
    }
    *node = node_of_slot(cl, slot);
    if (*node == NULL) {
        map_doubted(cl, hard_by);
        *node = node_of_slot(cl, slot);
    }
    if (*node == NULL) {
        lock__error_set("redis cluster: no master known for slot %d", slot);
        return LOCK_ERR_REDIS;
    }
    return LOCK_OK;
}

/* Sends q once on a connection of node's pool, borrowed by borrow_by (ASKING first when
 * asking), and lets go of the connection and of node. LOCK_OK with *r, or the failure's
 * code: a Redis failure makes the map doubted (a failover may have moved the master), and
 * the command is not retried: it may have run. */
static int send_once(lock__cluster *cl, cluster_node *node, const request *q, bool asking,
                     int64_t borrow_by, int64_t hard_by, int64_t *sent_ns, redisReply **r)
{
    lock__conn *conn = NULL;
    int rc;

    if (q->urgent)
        rc = lock__pool_borrow_for_release(node->pool, borrow_by, &conn);
    else
        rc = lock__pool_borrow(node->pool, borrow_by, &conn);
    if (rc != LOCK_OK) {
        node_drop(cl, node);
        return rc;
    }
    if (sent_ns != NULL)
        *sent_ns = lock__now_ns();
    if (asking)
        rc = send_asking(conn, q, hard_by, r);
    else if (q->is_script)
        rc = lock__script_run_reply(conn, q->script, hard_by, q->nkeys, q->keys, q->nargs, q->args,
                                    r);
    else
        rc = lock__conn_command(conn, hard_by, q->argc, q->argv, NULL, r);
    lock__pool_return(node->pool, conn);
    node_drop(cl, node);
    if (rc == LOCK_ERR_REDIS)
        map_doubted(cl, hard_by);
    return rc;
}

static int send_to_slot(lock__cluster *cl, int slot, const request *q, int64_t borrow_by,
                        int64_t hard_by, int64_t *sent_ns, redisReply **out)
{
    cluster_node *node = NULL;
    bool asking = false;
    lock__redirect redirect;
    int rc;

    *out = NULL;
    if (slot < 0)
        slot = 0;
    /* A read of the map owed by an earlier command that had no time left for it, or an old
     * map. */
    if (atomic_load(&cl->stale) ||
        lock__now_ns() - atomic_load(&cl->refreshed_ns) > lock__ms_to_ns(REFRESH_MAX_AGE_MS))
        (void)refresh_until(cl, false, borrow_by > lock__now_ns() ? borrow_by : hard_by);
    for (int hops = 0;; hops++) {
        redisReply *r = NULL;

        rc = pick_node(cl, slot, asking ? &redirect : NULL, hard_by, &node);
        if (rc != LOCK_OK)
            return rc;
        /* The first borrow waits as the caller allows; one after a redirection has only
         * what is left of the command's own bound. */
        rc = send_once(cl, node, q, asking, hops == 0 ? borrow_by : hard_by, hard_by, sent_ns, &r);
        if (rc != LOCK_OK)
            return rc;
        if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "TRYAGAIN", 8) == 0) {
            /* A slot half-way through a migration, with some of the script's keys moved and
             * some not: nothing ran. The migration ends soon; try again shortly, within the
             * command's bound (this is not a redirection: it does not count as one). */
            if (lock__now_ns() + TRYAGAIN_PAUSE_NS >= hard_by) {
                lock__error_set("redis cluster: slot %d: %s (until the deadline)", slot, r->str);
                freeReplyObject(r);
                return LOCK_ERR_REDIS;
            }
            freeReplyObject(r);
            nanosleep(&(struct timespec){0, TRYAGAIN_PAUSE_NS}, NULL);
            hops--;
            continue;
        }
        if (r->type != REDIS_REPLY_ERROR || lock__parse_redirect(r->str, &redirect) != 0) {
            /* The cluster lost a master and has not promoted a replica yet: the map will
             * change. The error goes to the caller. */
            if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "CLUSTERDOWN", 11) == 0)
                map_doubted(cl, hard_by);
            *out = r;
            return LOCK_OK;
        }
        /* A redirection: the command did not run there. */
        if (hops == LOCK__CLUSTER_REDIRECTS_MAX) {
            lock__error_set("redis cluster: more than %d redirections for slot %d (last: %s)",
                            LOCK__CLUSTER_REDIRECTS_MAX, slot, r->str);
            freeReplyObject(r);
            return LOCK_ERR_REDIS;
        }
        freeReplyObject(r);
        if (redirect.ask) {
            asking = true; /* the next turn asks redirect.host:port */
        } else {
            rc = lock__cluster_redirected(cl, &redirect);
            if (rc != LOCK_OK)
                return rc;
            /* One slot moved: others probably did too (a failover moves all of a master's).
             * The corrected slot stands even if this read is skipped or fails. */
            map_doubted(cl, hard_by);
            (void)lock__cluster_redirected(cl, &redirect);
            asking = false;
            slot = redirect.slot;
        }
    }
}

int lock__cluster_command(lock__cluster *cl, int64_t borrow_by, int64_t hard_by, int argc,
                          const char **argv, redisReply **out)
{
    request q = {.argc = argc, .argv = argv};
    int slot = argc > 1 ? lock__key_slot(argv[1], strlen(argv[1])) : -1;

    *out = NULL;
    if (argc < 1)
        return LOCK_ERR_INVALID;
    return send_to_slot(cl, slot, &q, borrow_by, hard_by, NULL, out);
}

int lock__cluster_script(lock__cluster *cl, lock__script s, bool urgent, int64_t borrow_by,
                         int64_t hard_by, int nkeys, const char *const *keys, int nargs,
                         const char *const *args, int64_t *sent_ns, redisReply **out)
{
    request q = {.script = s,
                 .is_script = true,
                 .urgent = urgent,
                 .nkeys = nkeys,
                 .nargs = nargs,
                 .keys = keys,
                 .args = args};
    int slot = -1;
    int rc;

    *out = NULL;
    /* A lock's keys are its name plus suffixes (keys.h): they share a slot because the name
     * carries a hash tag, not by chance, and only then do keys added later follow. */
    if (nkeys > 1 && !lock__key_has_tag(keys[0], strlen(keys[0]))) {
        lock__error_set("redis cluster: lock name %s has no hash tag {...}", keys[0]);
        return LOCK_ERR_INVALID;
    }
    for (int i = 0; i < nkeys; i++) {
        int ks = lock__key_slot(keys[i], strlen(keys[i]));

        if (i == 0)
            slot = ks;
        else if (ks != slot) {
            lock__error_set("redis cluster: keys %s and %s are in different slots (a lock name "
                            "needs a hash tag, keys.h)",
                            keys[0], keys[i]);
            return LOCK_ERR_INVALID;
        }
    }
    rc = send_to_slot(cl, slot, &q, borrow_by, hard_by, sent_ns, out);
    if (rc == LOCK_OK && (*out)->type == REDIS_REPLY_ERROR) {
        lock__error_set("script: %s", (*out)->str);
        freeReplyObject(*out);
        *out = NULL;
        rc = LOCK_ERR_REDIS;
    }
    return rc;
}
