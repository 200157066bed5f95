#!/bin/bash
# postgres-entrypoint.sh - PostgreSQL 15 (Debian's) in the compose stack; runs as `postgres`.
#
# On the first start (an empty data volume) it makes the cluster: initdb with the C locale
# and UTF-8 (the same as the native stack, scripts/lib/pg.sh), then, on a server that
# listens on its unix socket only, the role $POSTGRES_USER with $POSTGRES_PASSWORD and the
# database $POSTGRES_DB it owns. The service connects as that role, not as the superuser:
# it creates its tables (stockd migrate) and needs nothing more. Later starts find the
# cluster in the volume and go straight to the server.
#
# Access: the compose network only (5432 is not published), and a password on it
# (scram-sha-256); the superuser can log in through the unix socket inside the container
# only (peer). The durable defaults stay on (fsync, synchronous_commit, full_page_writes):
# a sale answered 200 survives a crash, as natively.
#
# The server runs as PID 1 (exec): `docker stop` sends SIGINT (STOPSIGNAL in the
# Dockerfile), PostgreSQL's fast shutdown.
set -euo pipefail

: "${PGDATA:?}" "${POSTGRES_USER:=stock}" "${POSTGRES_DB:=stock}"
: "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set (docker/.env)}"

init_cluster() {
    echo "postgres-entrypoint: initdb in $PGDATA"
    initdb -D "$PGDATA" -U postgres --encoding=UTF8 --locale=C --no-instructions \
        --auth-local=peer --auth-host=scram-sha-256 >/dev/null
    # Containers reach us over the network: password logins from anywhere on it.
    {
        echo "host all all 0.0.0.0/0 scram-sha-256"
        echo "host all all ::/0 scram-sha-256"
    } >>"$PGDATA/pg_hba.conf"

    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w -s start
    # psql quotes the :'variables' itself, so no value is pasted into the SQL text.
    psql -v ON_ERROR_STOP=1 -q -U postgres -d postgres \
        -v user="$POSTGRES_USER" -v password="$POSTGRES_PASSWORD" -v db="$POSTGRES_DB" <<'SQL'
CREATE ROLE :"user" LOGIN PASSWORD :'password';
CREATE DATABASE :"db" OWNER :"user";
SQL
    pg_ctl -D "$PGDATA" -m fast -w -s stop
    echo "postgres-entrypoint: role '$POSTGRES_USER' and database '$POSTGRES_DB' created"
}

[ -s "$PGDATA/PG_VERSION" ] || init_cluster

# Listen on every interface of the container; the rest are PostgreSQL's defaults.
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
