#!/usr/bin/env bash
# run-all.sh BUILD_DIR - every test, against real servers, as `make test` runs it, in two
# lanes that run side by side (tests/lib/harness.sh says how; TEST_LANES=serial runs them one
# after the other). Each lane runs its suites in order:
#   stacks       the whole stack on free ports (tests/integration.sh); then, with
#                TSAN_BUILD=DIR (as `make test` sets it: build/tsan), the whole stack again
#                with ThreadSanitizer builds of the replicas, driven by BUILD_DIR's programs
#                of tests/stack/ (tests/tsan.sh); then the ladder (tests/ladder.sh), each rung's
#                flaw provoked at fixed moments on a stack of its own. Nearly all of this
#                lane is computing: 64 connections of load against sanitizer builds;
#   servers      the pure unit tests (tests/run-unit.sh's suites) and the committed
#                histories; the documents checked against the code (tests/docs.sh: make
#                docs-check); the programs of tests/lock/, each starting a redis-server of
#                its own; test_redlock, five of them; test_etcd, an etcd of its own;
#                test_zookeeper, a ZooKeeper of its own; test_sentinel, a master, a replica
#                and three Sentinels; test_cluster, a Redis Cluster of three masters; the
#                programs of tests/db/ and tests/deduct/ (two lock holders in every
#                interleaving) against a throwaway PostgreSQL started here on a free port in
#                a temporary directory (TEST_DATABASE_URL names its superuser: the tests
#                create databases); loadtest/lib/history.sh's checks; with TSAN_BUILD, the
#                same lock-server suites built with ThreadSanitizer (tests/tsan.sh); the stack
#                on PostgreSQL under Patroni through a failover (tests/pg_ha.sh); the lab
#                (tests/lab.sh: its stack, its API, its page played in headless Chromium); the
#                replay page playing every committed events file (tests/replay.sh).
#                Most of this lane is waiting: for a lease to run out, a failover, a server.
#   connections  a thousand clients held through nginx for a few seconds on a stack of its
#                own (tests/connections.sh), about 15 s, under an open-file limit of
#                CONN_FD_LIMIT (8192): wrk's 1024 and nginx's twice that do not fit in
#                FD_LIMIT; skipped where the hard limit is under 4096;
#   docker       only with WITH_DOCKER=1, after both (`make test-docker` runs it alone):
#                docker/test.sh, the compose stack (Docker, or podman set up by the script;
#                where neither can run it says SKIP and counts as such).
# Every lane but docker and connections runs under an open-file limit of FD_LIMIT, servers
# included: see below.
# Prints each lane's output when the lane ends, a line per suite and, last, exactly
# "N passed, N failed" (test cases: cmocka's counts, plus the shell checks; a suite that
# crashes or times out counts as a failure). Exits 1 on any failure. Whatever it started is
# stopped at exit, on failure or Ctrl-C too. Logs: BUILD_DIR/test-logs/ (lane-NAME.out: what
# a lane printed). HARNESS_CPU=1 adds each suite's CPU-seconds to its line (tests/lib/harness.sh).
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: tests/run-all.sh BUILD_DIR" >&2; exit 2; }
build=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case $build in /*) ;; *) build=$PWD/$build ;; esac

LOG_PREFIX=tests
# shellcheck source=scripts/lib/common.sh
source scripts/lib/common.sh
source scripts/lib/ports.sh
source tests/lib/harness.sh
source tests/integration.sh
source tests/ladder.sh
source tests/history.sh
source tests/loadtest_lib.sh
source tests/lab.sh
source tests/replay.sh
source tests/tsan.sh
source tests/pg_ha.sh
source tests/docs.sh
source tests/connections.sh

HARNESS_LOG_DIR=$build/test-logs
rm -rf "$HARNESS_LOG_DIR"
harness_init
started=$(date +%s)

# --- the PostgreSQL of tests/db/ and tests/deduct/: pg.sh's functions, with their own
# directory and port ---

DB_TMP=""

db__stop() {
    [ -n "$DB_TMP" ] || return 0
    (
        PG_DIR=$DB_TMP/pg
        source scripts/lib/pg.sh
        pg_stop
    ) >>"$HARNESS_LOG_DIR/db-postgres.log" 2>&1 || true
    cp "$DB_TMP/pg/log/postgres.log" "$HARNESS_LOG_DIR/db-postgres-server.log" 2>/dev/null || true
    rm -rf "$DB_TMP"
    DB_TMP=""
}

run_db_suite() {
    local port
    [ -d "$build/tests/db" ] || { suite_broken db "$build/tests/db missing"; return 0; }
    DB_TMP=$(mktemp -d "${TMPDIR:-/tmp}/stock-db.XXXXXX")
    chmod 755 "$DB_TMP" # the postgres user must reach its data directory
    harness_on_exit db__stop
    port=$(pick_free_ports 1)
    # In a subshell: pg.sh dies on error, and that must fail this suite, not the run.
    if ! (
        PG_DIR=$DB_TMP/pg PG_PORT=$port REPLICAS=1
        source scripts/lib/pg.sh
        pg_start
    ) >"$HARNESS_LOG_DIR/db-postgres.log" 2>&1; then
        cat "$HARNESS_LOG_DIR/db-postgres.log" >&2
        suite_broken db "the throwaway PostgreSQL did not start"
        db__stop
        return 0
    fi
    TEST_DATABASE_URL="host=127.0.0.1 port=$port user=postgres dbname=postgres" \
        TEST_MIGRATIONS_DIR=$PWD/migrations run_program_dir "$build/tests/db" 240
    TEST_DATABASE_URL="host=127.0.0.1 port=$port user=postgres dbname=postgres" \
        TEST_MIGRATIONS_DIR=$PWD/migrations run_program_dir "$build/tests/deduct" 120
    run_history_settle "$build" "$port"
    db__stop
}

# --- the suites that start servers ---

# They run under an open-file limit of FD_LIMIT, soft and hard (harness_lane), the
# servers they start too, whatever the limit of the machine running them: 1024 is a common
# default (a login shell, a container, a CI runner). What the code and the tests need must
# fit in it; a test that depends on a higher one (a Redis that accepts `CONFIG SET maxclients
# 10000`, say) fails here, on every machine, and not on the next user's only. Running them
# once, under the low limit, costs nothing: nothing here needs more. (Redis lowers its own
# maxclients to fit, and says so in its log; nginx's worker_connections is 1024.)
FD_LIMIT=${FD_LIMIT:-1024}

# The suites that start servers of their own, one after the other.
server_suites() {
    run_program_dir "$build/tests/lock" 180
    if [ -x "$build/tests/test_redlock" ]; then
        run_suite test_redlock 120 "$build/tests/test_redlock"
    else
        suite_broken test_redlock "$build/tests/test_redlock missing"
    fi
    # test_etcd starts an etcd of its own (etcd-server, the "etcd" group of packages.txt).
    if [ -x "$build/tests/test_etcd" ]; then
        run_suite test_etcd 120 "$build/tests/test_etcd"
    else
        suite_broken test_etcd "$build/tests/test_etcd missing"
    fi
    # test_zookeeper starts a ZooKeeper of its own (a JVM: the "zookeeper" group), once. Its
    # allocation stacks are unwound in full, for tests/lsan.supp to name the library's frames.
    if [ -x "$build/tests/test_zookeeper" ]; then
        run_suite test_zookeeper 120 env ASAN_OPTIONS="$ASAN_OPTIONS:fast_unwind_on_malloc=0" \
            "$build/tests/test_zookeeper"
    else
        suite_broken test_zookeeper "$build/tests/test_zookeeper missing"
    fi
    # test_sentinel starts a master, a replica and three Sentinels of its own, and fails over.
    if [ -x "$build/tests/test_sentinel" ]; then
        run_suite test_sentinel 120 "$build/tests/test_sentinel"
    else
        suite_broken test_sentinel "$build/tests/test_sentinel missing"
    fi
    # test_cluster starts three cluster-enabled redis-servers of its own, joins them with
    # redis-cli --cluster create, and migrates slots (~5 s).
    if [ -x "$build/tests/test_cluster" ]; then
        run_suite test_cluster 120 "$build/tests/test_cluster"
    else
        suite_broken test_cluster "$build/tests/test_cluster missing"
    fi
    run_db_suite
    run_history_lib "$build"
    run_loadtest_lib
    if [ -n "${TSAN_BUILD:-}" ]; then
        run_tsan_servers "$TSAN_BUILD"
    fi
}

# The lanes. Most of the servers lane is waiting (leases running out, failovers, servers
# starting), and most of the stacks lane is computing (64 connections of load against
# sanitizer builds): measured with HARNESS_CPU=1, the first keeps about a tenth of the two
# cores busy, the second nearly all of them. So they run side by side, and the quiet work
# (Patroni's failover, the lab's stepped requests) follows the servers, while the ladder, whose
# rows are timed, follows the stacks, when the loads are over.
lane_servers() {
    run_unit_suites "$build"
    run_docs_check
    server_suites
    # PostgreSQL under Patroni: start, a sale, the primary killed, a sale after the failover.
    run_pg_ha "$build"
    run_lab "$build"
    run_replay
}

# A thousand clients through nginx: more open files than the other lanes' limit allows.
lane_connections() {
    run_connections "$build"
}

lane_stacks() {
    run_integration "$build"
    if [ -n "${TSAN_BUILD:-}" ]; then
        # The first stack stops before the second starts (and it__cleanup knows one only).
        harness__cleanup
        TSAN_CLIENT_BUILD=$build run_tsan_stack "$TSAN_BUILD"
    fi
    harness__cleanup
    run_ladder "$build"
}

# The compose stack (docker/test.sh): Docker, or podman set up by the script; where neither
# can run it says SKIP and counts as such.
lane_docker() {
    local docker_log=$HARNESS_LOG_DIR/docker.log docker_start docker_rc docker_note
    echo
    echo "== docker: docker/test.sh"
    docker_start=$(date +%s)
    set +e
    timeout --foreground --kill-after=30 1800 docker/test.sh 2>&1 | tee "$docker_log"
    docker_rc=${PIPESTATUS[0]}
    set -e
    docker_note="($(($(date +%s) - docker_start))s)"
    if [ "$docker_rc" -ne 0 ]; then
        harness__record docker 0 1 "$docker_note failed (see $docker_log)"
    elif grep -q '^SKIP docker' "$docker_log"; then
        HARNESS_SKIPPED=$((${HARNESS_SKIPPED:-0} + 1))
        harness__record docker 0 0 "$docker_note $(grep -m1 '^SKIP docker' "$docker_log")"
    else
        harness__record docker 1 0 "$docker_note"
    fi
}

# --- the run ---

# TEST_LANES=serial runs the lanes one after the other (a machine where the waiting suites'
# bounds do not hold beside a load, say); the default runs them side by side.
case ${TEST_LANES:-parallel} in
parallel | serial) ;;
*) die "TEST_LANES: parallel or serial, not '${TEST_LANES}'" ;;
esac
lanes__next() {
    [ "${TEST_LANES:-parallel}" = parallel ] || harness_lanes_wait
}
harness_lane stacks "$FD_LIMIT" lane_stacks
lanes__next
harness_lane servers "$FD_LIMIT" lane_servers
lanes__next
harness_lane connections "$CONN_FD_LIMIT" lane_connections
lanes__next
harness_lanes_wait
# The compose stack last, alone: its image builds would slow every timed scenario.
if [ "${WITH_DOCKER:-0}" = 1 ]; then
    harness_lane docker "$(ulimit -Hn)" lane_docker
    harness_lanes_wait
fi

echo
echo "(all suites: $(($(date +%s) - started))s)"
harness_summary
