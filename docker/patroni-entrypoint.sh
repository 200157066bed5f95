#!/bin/bash
# patroni-entrypoint.sh - one PostgreSQL node under Patroni in the compose profile `pg-ha`
# (the native PG_HA=1 is scripts/lib/patroni.sh; its header says what Patroni does and why
# these timings). Runs as `postgres`; Patroni runs PostgreSQL.
#
# Settings (environment): PATRONI_NAME (pg-1, pg-2, pg-3: also the node's host name on the
# compose network), PG_REPLICATION (async, sync or strict; read by the node that creates the
# cluster), POSTGRES_USER, POSTGRES_DB, POSTGRES_PASSWORD (the service's role, created once
# by the first primary, post_bootstrap below), PGHA_TTL, PGHA_LOOP_WAIT, PGHA_RETRY_TIMEOUT.
# Access: the compose network, with a password (scram-sha-256), as the plain postgres image.
set -euo pipefail

: "${PATRONI_NAME:?}" "${POSTGRES_USER:=stock}" "${POSTGRES_DB:=stock}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (docker/.env)}"
: "${PG_REPLICATION:=async}" "${PGHA_TTL:=8}" "${PGHA_LOOP_WAIT:=1}" "${PGHA_RETRY_TIMEOUT:=3}"

# The bootstrap section, the same as the native cluster's (scripts/lib/patroni_bootstrap.sh).
# shellcheck source=scripts/lib/patroni_bootstrap.sh
source /usr/local/lib/stock/patroni_bootstrap.sh
bootstrap=$(patroni_bootstrap_yaml "$PG_REPLICATION" "$PGHA_TTL" "$PGHA_LOOP_WAIT" \
    "$PGHA_RETRY_TIMEOUT" 1048576) || {
    echo "patroni-entrypoint: PG_REPLICATION must be async, sync or strict" >&2
    exit 1
}

home=/var/lib/postgresql
cat >"$home/post-bootstrap.sh" <<SCRIPT
#!/bin/bash
# Run once by Patroni on the new primary, with a connection URL as \$1.
set -e
psql -X -v ON_ERROR_STOP=1 "\$1" -c "CREATE ROLE $POSTGRES_USER LOGIN PASSWORD '$POSTGRES_PASSWORD'" \
    -c "CREATE DATABASE $POSTGRES_DB OWNER $POSTGRES_USER"
SCRIPT
chmod 700 "$home/post-bootstrap.sh"

cat >"$home/patroni.yml" <<YAML
scope: stock
namespace: /stock-pgha/
name: $PATRONI_NAME
restapi:
  listen: 0.0.0.0:8008
  connect_address: $PATRONI_NAME:8008
etcd3:
  host: pgha-etcd:2379
$bootstrap
  post_bootstrap: $home/post-bootstrap.sh
postgresql:
  listen: 0.0.0.0:5432
  connect_address: $PATRONI_NAME:5432
  data_dir: $home/data
  bin_dir: /usr/lib/postgresql/15/bin
  pgpass: $home/pgpass
  # A new replica copies the primary with pg_basebackup, which by default waits for a spread
  # checkpoint (minutes: checkpoint_completion_target of checkpoint_timeout): ask for a fast one.
  basebackup:
  - checkpoint: fast
  authentication:
    superuser:
      username: postgres
      password: $POSTGRES_PASSWORD
    replication:
      username: replicator
      password: $POSTGRES_PASSWORD
  pg_hba:
  - local all all trust
  - host replication replicator 0.0.0.0/0 scram-sha-256
  - host all all 0.0.0.0/0 scram-sha-256
YAML
exec patroni "$home/patroni.yml"
