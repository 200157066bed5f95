#!/usr/bin/env bash
# split-vote.sh [--trials 100] [--wait-ms 600] - runs build/split-vote (Redlock's split vote,
# counted: bench/split_vote.c) against five Redis servers of its own: scripts/stack.sh's Redlock
# nodes, started in a temporary run directory on SPLIT_VOTE_PORT_BASE .. +4 (16470 .. 16474) and
# stopped by their PIDs at exit (on failure and Ctrl-C too).
#   SPLIT_VOTE=path   the binary to run (default build/split-vote, built if missing)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bin=${SPLIT_VOTE:-build/split-vote}
[ -x "$bin" ] || make "$bin" >&2

export RUN_DIR REDLOCK_PORT_BASE=${SPLIT_VOTE_PORT_BASE:-16470} REDLOCK_SERVERS=5
RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/split-vote.XXXXXX")
unset REDLOCK_APPENDFSYNC REDLOCK_CLOCK_SHIFT
cleanup() {
    scripts/stack.sh redlock-stop 1 2 3 4 5 >/dev/null 2>&1 || true
    rm -rf "$RUN_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/stack.sh redlock-start 1 2 3 4 5 >"$RUN_DIR/start.log" 2>&1 ||
    { cat "$RUN_DIR/start.log" >&2; exit 1; }
ports=$(seq -s, "$REDLOCK_PORT_BASE" $((REDLOCK_PORT_BASE + 4)))
"$bin" --ports "$ports" "$@"
