#!/usr/bin/env bash
# run-connections.sh BUILD_DIR - tests/connections.sh alone (a thousand clients held through
# nginx on a stack of its own), as `make test` runs it in its lane of its own, under an
# open-file limit of CONN_FD_LIMIT (8192; the hard limit where lower). Logs:
# BUILD_DIR/test-logs-connections/.
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: tests/run-connections.sh BUILD_DIR" >&2; exit 2; }
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
source tests/connections.sh

HARNESS_LOG_DIR=$build/test-logs-connections
rm -rf "$HARNESS_LOG_DIR"
harness_init
harness_lane connections "$CONN_FD_LIMIT" run_connections "$build"
harness_lanes_wait
harness_summary
