#!/usr/bin/env bash
# run-lab.sh BUILD_DIR - the lab's tests alone (tests/lab.sh), as make test runs them:
# `make test-lab`. Prints the harness's table and exits 1 when a case failed.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: tests/run-lab.sh BUILD_DIR" >&2; exit 2; }
build=$1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
case $build in /*) ;; *) build=$PWD/$build ;; esac

LOG_PREFIX=tests
source scripts/lib/common.sh
source scripts/lib/ports.sh
source tests/lib/harness.sh
source tests/integration.sh
source tests/ladder.sh
source tests/lab.sh

HARNESS_LOG_DIR=$build/test-logs-lab
rm -rf "$HARNESS_LOG_DIR"
harness_init
started=$(date +%s)
run_lab "$build"
echo "(the lab's tests took $(($(date +%s) - started)) s; logs in $HARNESS_LOG_DIR)"
harness_summary
