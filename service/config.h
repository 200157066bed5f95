/*
 * config.h - the service's configuration, read from environment variables.
 *
 * One table in config.c lists every setting: its variable, default, bounds and meaning;
 * `stockd --help` prints it and the README documents it. Numbers are parsed strictly
 * (digits only, within bounds); a bad value stops the start-up with one clear line.
 */
#ifndef SERVICE_CONFIG_H
#define SERVICE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef struct service_config {
    int port;                /* PORT: where the replica listens (127.0.0.1 unless BIND_ADDRESS) */
    char bind_address[64];   /* BIND_ADDRESS: default 127.0.0.1 (0.0.0.0 in containers) */
    char instance[64];       /* INSTANCE: this replica's name in answers and orders */
    char database_url[1024]; /* DATABASE_URL: libpq connection string */
    char redis_host[256];    /* REDIS_HOST */
    int redis_port;          /* REDIS_PORT */
    char redis_sentinels[1024];      /* REDIS_SENTINELS ("" = no Sentinel) */
    char redis_master_name[128];     /* REDIS_MASTER_NAME */
    char redis_cluster_nodes[1024];  /* REDIS_CLUSTER_NODES ("" = no cluster) */
    int lock_sync_replicas;          /* LOCK_SYNC_REPLICAS */
    char lock_fair[4];               /* LOCK_FAIR: "on" or "off" */
    int64_t lock_waiter_liveness_ms; /* LOCK_WAITER_LIVENESS_MS */
    char default_mode[32];           /* MODE: the mode used when a request names none */
    int worker_threads;          /* WORKER_THREADS: requests that may wait, run at once */
    int max_connections;         /* MAX_CONNECTIONS: client connections held at once */
    int64_t lock_wait_ms;        /* LOCK_WAIT_MS: bound on waiting for the lock */
    int batch_max;               /* BATCH_MAX: requests per redis-batch transaction at most */
    int batch_queue_max;         /* BATCH_QUEUE_MAX: requests queued per goods at most */
    int64_t batch_wait_ms;       /* BATCH_WAIT_MS: bound on waiting to be taken into a batch */
    int shard_segments;          /* SHARD_SEGMENTS: segments per goods in redis-sharded */
    int64_t shard_try_ms;        /* SHARD_TRY_MS: the short wait for a segment's lock */
    int64_t lock_lease_ms;       /* LOCK_LEASE_MS: watchdog lease (renewed every lease/3) */
    int64_t lock_max_hold_ms;    /* LOCK_MAX_HOLD_MS: no renewal past this hold time */
    int64_t lock_fixed_lease_ms; /* LOCK_FIXED_LEASE_MS: lease of the ladder's rungs that
                                    have no watchdog */
    char faults[4];              /* FAULTS: "on" lets requests inject faults (X-Fault) */
    int64_t lab_hold_ms;         /* LAB_HOLD_MS: a lab request's hold budget */
    int64_t lab_step_wait_ms;    /* LAB_STEP_WAIT_MS: bound on a step's wait */
    int optimistic_retries;      /* OPTIMISTIC_RETRIES: pg-optimistic's, pg-serializable's reruns */
    int64_t lockrow_ttl_ms;      /* LOCKROW_TTL_MS: pg-lockrow-ttl's row lease */
    char admin_token[256];       /* ADMIN_TOKEN: "" = admin endpoint open */
    int64_t business_delay_ms;   /* BUSINESS_DELAY_MS: sleep between the read and the write */
    char db_pipeline[4];         /* DB_PIPELINE: "on" or "off" */
    int db_pool_size;            /* DB_POOL_SIZE: PostgreSQL connections per replica */
    int redis_pool_size;         /* REDIS_POOL_SIZE: Redis command connections per replica */
    int64_t db_wait_ms;          /* DB_WAIT_MS: bound on waiting for a pooled connection */
    int db_reply_timeout_ms;     /* DB_REPLY_TIMEOUT_MS: client-side bound per round trip */
    int db_idle_in_tx_ms;        /* DB_IDLE_IN_TX_MS: the server ends a session idle in a tx */
    int64_t redis_timeout_ms;    /* REDIS_TIMEOUT_MS: connect and command timeout */
    int connection_timeout_s;    /* CONNECTION_TIMEOUT_S: idle/slow client limit */
    char migrations_dir[512];    /* MIGRATIONS_DIR: where the NNN_*.sql files are */
    char etcd_endpoint[256];     /* ETCD_ENDPOINT: etcd's client URL; "": no etcd mode */
    int64_t etcd_timeout_ms;     /* ETCD_TIMEOUT_MS: bound on each etcd request */
    char zookeeper_hosts[256];   /* ZOOKEEPER_HOSTS: "host:port,..."; "": no zookeeper mode */
    int zookeeper_timeout_ms;    /* ZOOKEEPER_TIMEOUT_MS: bound on waiting for a session */
    char log_level[16];          /* LOG_LEVEL: debug, info, warn, error */
    char redlock_nodes[1024];    /* REDLOCK_NODES: "host:port,..."; "" = no redlock mode */
    int redlock_timeout_ms;      /* REDLOCK_TIMEOUT_MS: connect and command timeout per node */
    int64_t redlock_lease_ms;    /* REDLOCK_LEASE_MS: redlock's lease; 0: LOCK_FIXED_LEASE_MS */
} service_config;

/* Looks up one variable; getenv() in the service, a table in the tests. */
typedef const char *(*config_lookup_fn)(const char *name, void *ctx);

/*
 * Fills *out from the defaults and the variables `lookup` finds (NULL: unset, so the
 * default; "" is a value like any other, so PORT="" is an error). Returns 0, or -1 with one
 * line in err naming the variable and what is wrong ("LOCK_WAIT_MS: must be an integer
 * from 0 to 600000, got 'abc'"); the first bad variable in table order is reported and *out
 * is then only partly filled. The values of ADMIN_TOKEN and DATABASE_URL are never copied
 * into err. Does not check that MODE names a known mode (the mode table does that); does
 * not set log_min_level (log_level_parse(out->log_level) gives it).
 */
int config_load(service_config *out, config_lookup_fn lookup, void *ctx, char *err, size_t errlen);

/* The lookup the service uses: getenv(name); ctx is unused. */
const char *config_lookup_env(const char *name, void *ctx);

/* Prints the table of settings (variable, default, allowed values, meaning) to `file` (a
 * FILE *), for --help. */
void config_print_help(void *file);

/* Prints the same table as a Markdown table to `file` (a FILE *), for the README. */
void config_print_markdown(void *file);

/* Internal, exposed for the tests. */

/* Parses text as a decimal integer within [min, max]: digits only, a leading '-' only when
 * min < 0, no spaces, no '+', no overflow. Returns 0 and sets *out, or -1. */
int config__parse_integer(const char *text, int64_t min, int64_t max, int64_t *out);

/* The number of rows in the settings table, and row i's variable, default, field size
 * (strings; 0 for numbers) and upper bound (numbers: the value; strings: the length).
 * config__describe returns 0, or -1 when i is out of range. */
size_t config__count(void);
int config__describe(size_t i, const char **var, const char **def, size_t *size, int64_t *max);

#endif
