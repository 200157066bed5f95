#!/usr/bin/env bash
# run-unit.sh BUILD_DIR - runs every pure unit test binary of BUILD_DIR/tests (all test_*
# but test_redlock, test_etcd, test_zookeeper, test_sentinel and test_cluster, which need
# servers, and the programs of tests/lock/, tests/db/ and tests/deduct/, which need Redis or
# PostgreSQL, and of tests/stack/, which need the whole stack; tests/run-all.sh runs those),
# and the documents checked against the code
# (tests/docs.sh).
# Prints a line per suite and, last, "N passed, N failed" (test cases); exits 1 on any
# failure. `make test-unit` builds the sanitizer binaries and calls this on build/san.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: tests/run-unit.sh BUILD_DIR" >&2; exit 2; }
build=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=tests/lib/harness.sh
source tests/lib/harness.sh
# shellcheck source=tests/docs.sh
source tests/docs.sh

HARNESS_LOG_DIR=${HARNESS_LOG_DIR:-$build/test-logs}
rm -rf "$HARNESS_LOG_DIR"
harness_init
run_unit_suites "$build"
run_docs_check
harness_summary
