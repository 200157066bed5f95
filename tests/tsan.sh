#!/usr/bin/env bash
# tsan.sh BUILD_DIR - the ThreadSanitizer run. BUILD_DIR holds a TSAN=1 build
# (make B=build/tsan TSAN=1 programs tests); `make test-tsan` makes it and runs this, and
# `make test` runs it as a stage of tests/run-all.sh (TSAN_BUILD=build/tsan).
#
# ThreadSanitizer reports data races between the threads of one process: here, the lock's
# (waiters, the watchdog that renews leases, the subscriber that wakes waiters on a release)
# and a replica's (one thread per HTTP connection, sharing the pools, the lock client, the
# local guard and the metrics). It sees only what runs, so it runs what is most concurrent:
#   1. the programs of tests/lock/, every case, on the TSan build of lock/, and test_redlock
#      (8 threads sharing one redlock over five servers); test_etcd, every case, on the TSan
#      build of lock/etcd/ (its keep-alive thread against 2 x 8 contending threads);
#      test_zookeeper likewise on lock/zookeeper/ (its confirming thread and the client
#      library's watcher thread); test_local (the local guard's line: threads handing one
#      stripe on while others time out);
#      test_sentinel (a client that follows a failover: its follower thread moves the address
#      under the pool, the watchdog and the subscriber); test_cluster (eight threads of two
#      clients sharing the cluster router's map and per-master pools, the watchdog renewing
#      through it, migrations followed);
#   2. the whole stack (tests/integration.sh) with TSan builds of stockd as its replicas, and
#      the programs of tests/stack/ against it (TSan builds too; TSAN_CLIENT_BUILD=DIR takes
#      them from another build: `make test` drives the TSan replicas with its ASan clients,
#      as the clients' own threads are test code and TSan would only make them slower): its load cases (64 clients through nginx, and
#      on one replica), the same Idempotency-Key 20 times at once, the lock_lost cases (the
#      watchdog against a holder that pauses past its lease), Redis and PostgreSQL stopped
#      and started under the replicas (their reconnecting threads) and the rest, all of it
#      (about 35 s, against 30 s for the ASan build; TSAN_CASES, a cmocka pattern such as
#      'test_load_*', narrows it); then the shutdown checks, whose "no sanitizer report in
#      the log" covers what TSan said in every replica, and "exit status 0" its exit code.
# A report fails the run twice over: the program exits with status 66 at its end (so its
# suite, or its replica's exit check, fails) and the report is in the log, with both stacks.
#
# Suppressions: tests/tsan.supp, each with the reason it is there.
#
# Run on its own it prints its own "N passed, N failed"; tests/run-all.sh sources it and
# calls run_tsan, so its cases join the total.
set -euo pipefail

# The cases of tests/stack/ run under TSan: a cmocka pattern; empty: every case (a program
# with no case it matches is not run).
TSAN_CASES=${TSAN_CASES:-}
# The cases left out (comma-separated patterns), each for a reason: the PostgreSQL rungs'
# loads (about 80 s under TSan) run the same replica threads as the redis load, their waits
# being in PostgreSQL; the unsafe modes' load (none, local over three replicas) runs the
# same threads as the redis load minus the lock, and local's guard is raced by
# test_load_local_one; the four-mode mix on one goods runs the threads of the cases before
# it at once, and its value is the books, which the ASan pass checks; the cache's mixed
# history, whose value is its verdict (test_held_miss runs the cache rungs' threads).
TSAN_SKIP_CASES=${TSAN_SKIP_CASES-test_load_pg_*,test_load_unsafe_three,test_sharded_mixed_modes,test_mixed_history}

# halt_on_error=0: every race of a run is reported, not just the first; exitcode: 66 at exit
# after any report (TSan's default, spelled out as it is what fails the suites);
# second_deadlock_stack: both stacks of a lock-order inversion. The replicas inherit it.
tsan__options() {
    export TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
}

run_tsan() {
    run_tsan_servers "$1"
    run_tsan_stack "$1"
}

run_tsan_servers() {
    local build=$1
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    if [ ! -d "$build/tests/lock" ]; then
        suite_broken tsan "$build/tests/lock missing (make B=$build TSAN=1 programs tests)"
        return 0
    fi
    tsan__options
    run_program_dir "$build/tests/lock" 600 -tsan
    # The lab's table: held requests, steppers and the hold budget, each on its own thread.
    if [ -x "$build/tests/test_lab" ]; then
        run_suite test_lab-tsan 60 "$build/tests/test_lab"
    else
        suite_broken test_lab-tsan "$build/tests/test_lab missing"
    fi
    # The local guard's line: hand-offs and time-outs of threads on one stripe.
    if [ -x "$build/tests/test_local" ]; then
        run_suite test_local-tsan 60 "$build/tests/test_local"
    else
        suite_broken test_local-tsan "$build/tests/test_local missing"
    fi
    if [ -x "$build/tests/test_redlock" ]; then
        run_suite test_redlock-tsan 120 "$build/tests/test_redlock"
    else
        suite_broken test_redlock-tsan "$build/tests/test_redlock missing"
    fi
    if [ -x "$build/tests/test_etcd" ]; then
        run_suite test_etcd-tsan 180 "$build/tests/test_etcd"
    else
        suite_broken test_etcd-tsan "$build/tests/test_etcd missing (make B=$build TSAN=1 $build/tests/test_etcd)"
    fi
    if [ -x "$build/tests/test_zookeeper" ]; then
        run_suite test_zookeeper-tsan 180 "$build/tests/test_zookeeper"
    else
        suite_broken test_zookeeper-tsan "$build/tests/test_zookeeper missing (make B=$build TSAN=1 $build/tests/test_zookeeper)"
    fi
    if [ -x "$build/tests/test_sentinel" ]; then
        run_suite test_sentinel-tsan 180 "$build/tests/test_sentinel"
    else
        suite_broken test_sentinel-tsan "$build/tests/test_sentinel missing"
    fi
    if [ -x "$build/tests/test_cluster" ]; then
        run_suite test_cluster-tsan 120 "$build/tests/test_cluster"
    else
        suite_broken test_cluster-tsan "$build/tests/test_cluster missing"
    fi
}

run_tsan_stack() {
    local build=$1
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    if [ ! -x "$build/stockd" ]; then
        suite_broken tsan-stack "$build/stockd missing (make B=$build TSAN=1 programs tests)"
        return 0
    fi
    tsan__options
    # Without etcd and ZooKeeper: their clients' threads are raced by test_etcd-tsan and
    # test_zookeeper-tsan, and the service's side of those modes is the queue guard's.
    IT_LOCK_SERVICES=0 run_integration "$build" -tsan "$TSAN_CASES" "$TSAN_SKIP_CASES" \
        "${TSAN_CLIENT_BUILD:-$build}"
}

# Run on its own: set up the harness, run, summarise.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    [ $# -eq 1 ] || { echo "usage: tests/tsan.sh BUILD_DIR" >&2; exit 2; }
    cd "$(dirname "${BASH_SOURCE[0]}")/.."
    LOG_PREFIX=tsan
    source scripts/lib/common.sh
    source scripts/lib/ports.sh
    source tests/lib/harness.sh
    source tests/integration.sh
    HARNESS_LOG_DIR=${HARNESS_LOG_DIR:-$1/test-logs}
    rm -rf "$HARNESS_LOG_DIR"
    harness_init
    run_tsan "$1"
    harness_summary
fi
