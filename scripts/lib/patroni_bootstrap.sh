# patroni_bootstrap.sh - the `bootstrap:` section of a Patroni node's patroni.yml, one text
# for the native cluster (patroni.sh, PG_HA=1) and the compose profile pg-ha
# (docker/patroni-entrypoint.sh, which the image carries it for) (sourced, bash; needs
# nothing else).
# shellcheck shell=bash
#
# bootstrap.dcs is read only by the node that initialises the cluster and kept in Patroni's
# store afterwards; what is the same for both deployments lives here: the replication
# settings each PG_REPLICATION stands for, the slots and pg_rewind a failed-over primary
# needs to rejoin, the WAL a standby may lag by, and initdb's encoding and locale.

# patroni_bootstrap_yaml REPLICATION TTL LOOP_WAIT RETRY_TIMEOUT MAX_LAG [PARAMETERS]
# Prints the section. REPLICATION: async (Patroni's default: a commit is acknowledged once
# the primary has flushed it), sync (synchronous_mode) or strict (synchronous_mode_strict);
# returns 1, printing nothing, for anything else. PARAMETERS: more lines of
# bootstrap.dcs.postgresql.parameters, each indented by eight spaces (the deployment's own).
patroni_bootstrap_yaml() {
    local sync strict
    case $1 in
    async) sync=false strict=false ;;
    sync) sync=true strict=false ;;
    strict) sync=true strict=true ;;
    *) return 1 ;;
    esac
    cat <<YAML
bootstrap:
  dcs:
    ttl: $2
    loop_wait: $3
    retry_timeout: $4
    maximum_lag_on_failover: $5
    synchronous_mode: $sync
    synchronous_mode_strict: $strict
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
${6:+$6
}        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
  initdb:
  - encoding: UTF8
  - locale: C
YAML
}
