# config.sh - the local stack's settings: defaults, overrides, derived paths (sourced, bash).
# shellcheck shell=bash
#
# Every setting comes from the environment with a default, so a test run can start a second
# stack beside a running one by changing RUN_DIR and the ports. The variables are listed in
# scripts/stack.sh's header. After stack_config, STACK_ROOT is the repository, the *_DIR
# variables are absolute paths, and the service's own variables are exported for stockd.

# shellcheck disable=SC2034 # the variables are used by the other libraries
stack_config() {
    STACK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

    RUN_DIR=${RUN_DIR:-$STACK_ROOT/.run}
    mkdir -p "$RUN_DIR" || die "cannot create RUN_DIR $RUN_DIR"
    RUN_DIR=$(cd "$RUN_DIR" && pwd)
    # pg_ctl -o and nginx's config take paths unquoted; a space would split them.
    case $RUN_DIR in
    *[[:space:]]*) die "RUN_DIR must not contain spaces: '$RUN_DIR'" ;;
    esac

    # Fixed ports, all below 32768: Linux hands out local ports for outgoing connections from
    # 32768-60999 (net.ipv4.ip_local_port_range), so a port in that range can be held by any
    # connection (a load run leaves thousands) just when `up` wants to listen on it.
    HTTP_PORT=${HTTP_PORT:-8080}
    REPLICA_PORT_BASE=${REPLICA_PORT_BASE:-8081}
    REPLICAS=${REPLICAS:-3}
    PG_PORT=${PG_PORT:-15432}
    REDIS_PORT=${REDIS_PORT:-16379}
    # The redlock mode's independent Redis servers: how many (0: none, and no redlock mode)
    # and the first one's port (node N listens on REDLOCK_PORT_BASE+N-1; REDIS_PORT+1.. is left
    # to the HA profile's Redis replica).
    REDLOCK_SERVERS=${REDLOCK_SERVERS:-5}
    REDLOCK_PORT_BASE=${REDLOCK_PORT_BASE:-$((REDIS_PORT + 11))}
    ETCD_PORT=${ETCD_PORT:-12379}
    ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
    # WITH_ETCD: as given; unset, as this run directory's `up` left it (the file with-etcd,
    # removed by `down`), so that a replica restarted later is configured as its siblings.
    if [ -z "${WITH_ETCD:-}" ]; then
        WITH_ETCD=0
        [ -e "$RUN_DIR/with-etcd" ] && WITH_ETCD=1
    fi
    [[ $WITH_ETCD =~ ^[01]$ ]] || die "WITH_ETCD must be 0 or 1, got '$WITH_ETCD'"
    # ZooKeeper likewise (the file with-zookeeper).
    ZK_PORT=${ZK_PORT:-12181}
    if [ -z "${WITH_ZOOKEEPER:-}" ]; then
        WITH_ZOOKEEPER=0
        [ -e "$RUN_DIR/with-zookeeper" ] && WITH_ZOOKEEPER=1
    fi
    [[ $WITH_ZOOKEEPER =~ ^[01]$ ]] || die "WITH_ZOOKEEPER must be 0 or 1, got '$WITH_ZOOKEEPER'"
    STOCKD=${STOCKD:-$STACK_ROOT/build/stockd}
    MODE=${MODE:-redis}
    SEED_GOODS=${SEED_GOODS:-1}
    SEED_STOCK=${SEED_STOCK:-5000}
    # HA=1: a Redis replica and three Sentinels beside the master (scripts/lib/sentinel.sh).
    HA=${HA:-0}
    REDIS_REPLICA_PORT=${REDIS_REPLICA_PORT:-16380}
    SENTINEL_PORT_BASE=${SENTINEL_PORT_BASE:-26379}
    REDIS_MASTER_NAME=${REDIS_MASTER_NAME:-stock}
    # CLUSTER=1: a Redis Cluster of three masters instead of the single Redis
    # (scripts/lib/cluster.sh); unset: as this run directory's `up` left it (the file
    # with-cluster, removed by `down`), so that a replica restarted later is configured as its
    # siblings.
    if [ -z "${CLUSTER:-}" ]; then
        CLUSTER=0
        [ -e "$RUN_DIR/with-cluster" ] && CLUSTER=1
    fi
    case $CLUSTER in 0 | 1) ;; *) die "CLUSTER must be 0 or 1, got '$CLUSTER'" ;; esac
    # PG_HA=1: three PostgreSQL nodes under Patroni instead of the single PostgreSQL
    # (scripts/lib/patroni.sh); unset: as this run directory's `up` left it (the file
    # with-pg-ha, removed by `down`). Node N listens on PGHA_PORT_BASE+N-1, its Patroni on
    # PGHA_API_PORT_BASE+N-1; Patroni's own etcd on PGHA_ETCD_PORT and PGHA_ETCD_PEER_PORT.
    if [ -z "${PG_HA:-}" ]; then
        PG_HA=0
        [ -e "$RUN_DIR/with-pg-ha" ] && PG_HA=1
    fi
    case $PG_HA in 0 | 1) ;; *) die "PG_HA must be 0 or 1, got '$PG_HA'" ;; esac
    PG_REPLICATION=${PG_REPLICATION:-async}
    case $PG_REPLICATION in async | sync | strict) ;;
    *) die "PG_REPLICATION must be async, sync or strict, got '$PG_REPLICATION'" ;;
    esac
    PGHA_PORT_BASE=${PGHA_PORT_BASE:-$PG_PORT}
    PGHA_API_PORT_BASE=${PGHA_API_PORT_BASE:-$((PG_PORT + 10))}
    PGHA_ETCD_PORT=${PGHA_ETCD_PORT:-$((PG_PORT + 20))}
    PGHA_ETCD_PEER_PORT=${PGHA_ETCD_PEER_PORT:-$((PG_PORT + 21))}
    CLUSTER_PORT_BASE=${CLUSTER_PORT_BASE:-$((REDIS_PORT + 100))}
    CLUSTER_BUS_PORT_BASE=${CLUSTER_BUS_PORT_BASE:-$((REDIS_PORT + 110))}

    local v
    for v in HTTP_PORT REPLICA_PORT_BASE REPLICAS PG_PORT REDIS_PORT REDLOCK_SERVERS \
        REDLOCK_PORT_BASE ETCD_PORT ETCD_PEER_PORT ZK_PORT SEED_GOODS SEED_STOCK REDIS_REPLICA_PORT \
        SENTINEL_PORT_BASE CLUSTER_PORT_BASE CLUSTER_BUS_PORT_BASE PGHA_PORT_BASE \
        PGHA_API_PORT_BASE PGHA_ETCD_PORT PGHA_ETCD_PEER_PORT; do
        [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
    done
    ((REPLICAS >= 1 && REPLICAS <= 32)) || die "REPLICAS must be from 1 to 32, got $REPLICAS"
    ((REDLOCK_SERVERS <= 9)) || die "REDLOCK_SERVERS must be from 0 to 9, got $REDLOCK_SERVERS"
    case $HA in 0 | 1) ;; *) die "HA must be 0 or 1, got '$HA'" ;; esac
    [ "$HA$CLUSTER" != 11 ] || die "HA=1 and CLUSTER=1 exclude each other (a cluster fails over by itself)"
    case $STOCKD in
    /*) ;;
    *) STOCKD=$PWD/$STOCKD ;;
    esac

    LOG_DIR=$RUN_DIR/logs
    PG_DIR=$RUN_DIR/pg
    PGHA_DIR=$RUN_DIR/pgha
    REDIS_DIR=$RUN_DIR/redis
    ETCD_DIR=$RUN_DIR/etcd
    ZK_DIR=$RUN_DIR/zookeeper
    NGINX_DIR=$RUN_DIR/nginx
    REPLICA_DIR=$RUN_DIR/replicas

    # What the replicas are given. The other service variables (LOCK_WAIT_MS, ADMIN_TOKEN,
    # BUSINESS_DELAY_MS, DB_POOL_SIZE, ...) pass through from our own environment unchanged.
    DATABASE_URL="host=127.0.0.1 port=$PG_PORT dbname=stock user=stock connect_timeout=5"
    # Under Patroni, libpq finds the primary itself: it tries the nodes in turn and keeps the
    # first that accepts writes (target_session_attrs=read-write), at every new session.
    if [ "$PG_HA" = 1 ]; then
        DATABASE_URL="host=127.0.0.1,127.0.0.1,127.0.0.1"
        DATABASE_URL+=" port=$PGHA_PORT_BASE,$((PGHA_PORT_BASE + 1)),$((PGHA_PORT_BASE + 2))"
        DATABASE_URL+=" dbname=stock user=stock connect_timeout=5 target_session_attrs=read-write"
    fi
    export DATABASE_URL MODE
    export REDIS_HOST=127.0.0.1 REDIS_PORT
    # The replicas serve the redlock mode only when given its nodes (redlock_nodes_of; each
    # replica is started with its own, replicas.sh).
    REDLOCK_NODES=$(redlock_nodes_of 0)
    export REDLOCK_NODES
    # A replica offers the etcd mode only when told where etcd is (service/guards/modes.h), so only
    # a stack that runs etcd tells it; an ETCD_ENDPOINT of our own environment (even empty:
    # a replica without etcd beside ones with) passes through like the variables above.
    if [ "$WITH_ETCD" = 1 ]; then
        export ETCD_ENDPOINT=${ETCD_ENDPOINT-http://127.0.0.1:$ETCD_PORT}
    fi
    # The zookeeper mode likewise, with ZOOKEEPER_HOSTS.
    if [ "$WITH_ZOOKEEPER" = 1 ]; then
        export ZOOKEEPER_HOSTS=${ZOOKEEPER_HOSTS-127.0.0.1:$ZK_PORT}
    fi
    # With HA=1 the replicas find the master through the Sentinels (and follow a failover);
    # REDIS_HOST/PORT are then only where the master starts.
    if [ "$HA" = 1 ]; then
        REDIS_SENTINELS=127.0.0.1:$SENTINEL_PORT_BASE,127.0.0.1:$((SENTINEL_PORT_BASE + 1)),127.0.0.1:$((SENTINEL_PORT_BASE + 2))
        export REDIS_SENTINELS REDIS_MASTER_NAME
    fi
    # With CLUSTER=1 the redis lock routes over the cluster's masters (lock/cluster.h), its
    # names tagged (lock:goods:{N}); REDIS_HOST/PORT are then not used by it.
    if [ "$CLUSTER" = 1 ]; then
        REDIS_CLUSTER_NODES=127.0.0.1:$CLUSTER_PORT_BASE,127.0.0.1:$((CLUSTER_PORT_BASE + 1)),127.0.0.1:$((CLUSTER_PORT_BASE + 2))
        export REDIS_CLUSTER_NODES
    fi
    export MIGRATIONS_DIR=${MIGRATIONS_DIR:-$STACK_ROOT/migrations}
}

# redlock_nodes_of R: REDLOCK_NODES as replica R reaches the Redlock nodes. REDLOCK_VIA
# ("4:PORT,5:PORT,1/2:PORT") has node N reached at PORT instead: a relay its caller runs in
# front of the node, "N:PORT" for every replica (the ladder's, which cuts a node off from one
# request at a time), "R/N:PORT" for replica R alone (the ladder's partition of one replica);
# R 0: every replica's.
redlock_nodes_of() {
    local v port list=""
    for ((v = 1; v <= REDLOCK_SERVERS; v++)); do
        port=$(via_port "${REDLOCK_VIA:-}" "$v" $((REDLOCK_PORT_BASE + v - 1)))
        port=$(via_port "${REDLOCK_VIA:-}" "$1/$v" "$port")
        list+="${list:+,}127.0.0.1:$port"
    done
    echo "$list"
}

# via_port SPEC N PORT: the port that SPEC ("N:PORT,...": where something is reached through
# a relay in front of it) gives for N, else PORT (REDLOCK_VIA, REDIS_VIA).
via_port() {
    local via port=$3
    for via in ${1:+${1//,/ }}; do
        [ "${via%%:*}" = "$2" ] && port=${via#*:}
    done
    echo "$port"
}

# Port of replica N (1-based).
replica_port() {
    echo $((REPLICA_PORT_BASE + $1 - 1))
}
