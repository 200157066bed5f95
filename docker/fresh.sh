#!/usr/bin/env bash
# docker/fresh.sh - `make test-fresh`: the README's set-up, followed to the letter on a machine
# that has nothing: a brand-new debian:bookworm-slim container holding a copy of the tree.
#
# Two containers, one after the other, each started from the bare image and removed after:
#   1. the README's prerequisite (`apt-get update && apt-get install -y make`), then
#      `make test`, then `make demo`;
#   2. the prerequisite, then `make demo` as the very first make command.
# Each command is timed; the run ends with one line per command (its exit status and
# seconds) and fails when any command failed. Inside the containers everything runs as root,
# as it would for someone who just started one: `make` installs the packages itself, and
# PostgreSQL runs as the user `postgres` (scripts/lib/pg.sh). The docker suite of `make
# test` answers SKIP there (docker/podman.sh does not nest podman), which counts as a skip.
#
# What is copied: the files git tracks (`git ls-files`), as they are in the working tree,
# uncommitted edits included, so a change can be checked before it is committed. Untracked
# files are left out, as a clone would lack them: a file someone forgot to `git add` fails
# here as it would for the next user. The copy goes to /src/stock in the container.
#
# The engine: a Docker engine when one answers (debian:bookworm-slim pulled if missing), else
# podman run directly, with the base image docker/podman.sh makes (`podman.sh base`:
# debootstrap, since no registry is reachable). The containers have a network namespace of
# their own, so the stack inside them binds 8080, 15432... without touching the host's; they
# reach the Debian mirror through the engine's network.
#
# Takes about 9 minutes on a 2-core machine (package downloads included): not part of
# `make test`. Settings: FRESH_ONLY=1 or FRESH_ONLY=2 runs one of the two containers;
# FRESH_KEEP=1 keeps each container (stopped) for a look afterwards. Logs: .run/fresh/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOG_DIR=$ROOT/.run/fresh
IMAGE=debian:bookworm-slim
PREREQ='apt-get update && apt-get install -y make'
T0=$SECONDS

ENGINE=()           # the command that runs containers: (docker) or (podman)
CONTAINER=""        # the one running now, removed on exit unless FRESH_KEEP=1
RESULTS=()          # one line per command run

say() { printf '==> [%3ds] %s\n' $((SECONDS - T0)) "$*"; }
die() {
    echo "fresh.sh: $*" >&2
    exit 1
}

on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$CONTAINER" ] && [ "${FRESH_KEEP:-0}" != 1 ]; then
        "${ENGINE[@]}" rm -f "$CONTAINER" >/dev/null 2>&1 || true
    fi
    rm -f "$LOG_DIR/tree.tar"
    exit $rc
}

choose_engine() {
    if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
        ENGINE=(docker)
        docker image inspect "$IMAGE" >/dev/null 2>&1 || docker pull -q "$IMAGE" >/dev/null ||
            die "no $IMAGE here, and it cannot be pulled"
        return 0
    fi
    # podman.sh base: the packages, a containers.conf (runtime, ulimits) and the base image.
    "$ROOT/docker/podman.sh" base || die "neither a Docker engine nor podman can run here"
    eval "$("$ROOT/docker/podman.sh" env)"
    ENGINE=(podman)
    IMAGE=docker.io/library/debian:bookworm-slim
}

# The tree: tracked files as they are now (a tracked file deleted in the working tree is
# left out, as the next commit would leave it out).
pack_tree() {
    local n
    { command -v git >/dev/null && git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; } ||
        die "this needs git and a git checkout: it copies the files git tracks"
    (cd "$ROOT" && git ls-files -z --cached | while IFS= read -r -d '' f; do
        [ -e "$f" ] && printf '%s\0' "$f"
    done | tar --null -T - -cf "$LOG_DIR/tree.tar")
    n=$(tar -tf "$LOG_DIR/tree.tar" | wc -l)
    say "tree: $n files of $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' plus uncommitted changes')"
}

# What runs inside: unpack the tree from stdin, then each command in turn, timed, from the
# tree's root, whatever the previous one answered. The lines starting "fresh:" are ours.
# shellcheck disable=SC2016 # expanded inside the container
INSIDE='
set -u
mkdir -p /src/stock && tar -x -C /src/stock || { echo "fresh: could not unpack the tree"; exit 1; }
cd /src/stock
for cmd in "$@"; do
    echo "fresh: ---- $cmd"
    t=$SECONDS
    bash -c "$cmd" </dev/null
    echo "fresh: done: $cmd: exit $? after $((SECONDS - t)) s"
done
'

# run_container N COMMAND...: a fresh container from the bare image; its output goes to
# LOG_DIR/N.log, with the suites' headers, our lines and make's errors shown as they come.
run_container() {
    local n=$1 log=$LOG_DIR/container-$1.log line
    shift
    CONTAINER=stock-fresh-$$-$n
    say "container $n ($IMAGE, ${ENGINE[0]}): $(printf '%s; ' "$@")log $log"
    "${ENGINE[@]}" run -i --name "$CONTAINER" --hostname stock-fresh "$IMAGE" \
        bash -c "$INSIDE" fresh "$@" <"$LOG_DIR/tree.tar" >"$log" 2>&1 &
    local pid=$!
    # Follow the log while the container runs: show the lines that tell where it is.
    tail -n +1 -F --pid=$pid "$log" 2>/dev/null |
        grep --line-buffered -E '^(fresh: |== |deps\.sh: |make(\[[0-9]+\])?: \*\*\*|SKIP docker)' |
        sed -u 's/^/    /' || true
    wait $pid || true
    if [ "${FRESH_KEEP:-0}" = 1 ]; then
        say "FRESH_KEEP=1: container $CONTAINER kept (${ENGINE[0]} start -ai $CONTAINER; ${ENGINE[0]} rm $CONTAINER)"
    else
        "${ENGINE[@]}" rm -f "$CONTAINER" >/dev/null 2>&1 || true
    fi
    CONTAINER=""
    # Each command's verdict, for the summary, and its last lines (make test's counts,
    # make demo's table).
    while IFS= read -r line; do
        RESULTS+=("container $n: ${line#fresh: done: }")
    done < <(grep '^fresh: done: ' "$log")
    awk -v tail=14 '
        /^fresh: ---- / { cmd = substr($0, 13); k = 0; next }
        /^fresh: done: / {
            t = cmd ~ /^apt-get/ ? 1 : tail
            printf "    ---- container '"$n"': the last lines of %s ----\n", cmd
            for (i = (k > t ? k - t : 0); i < k; i++) print "    " buf[i % tail]
            next
        }
        { buf[k % tail] = $0; k++ }' "$log"
}

main() {
    mkdir -p "$LOG_DIR"
    trap on_exit EXIT
    trap 'exit 130' INT TERM
    choose_engine
    pack_tree
    case ${FRESH_ONLY:-} in
    '' | 1 | 2) ;;
    *) die "FRESH_ONLY must be 1 or 2, got '$FRESH_ONLY'" ;;
    esac
    [ "${FRESH_ONLY:-1}" != 1 ] || run_container 1 "$PREREQ" "make test" "make demo"
    [ "${FRESH_ONLY:-2}" != 2 ] || run_container 2 "$PREREQ" "make demo"
    echo
    echo "==================== make test-fresh ===================="
    local r failed=0
    for r in "${RESULTS[@]}"; do
        echo "$r"
        [[ $r == *": exit 0 after "* ]] || failed=1
    done
    echo "(total $((SECONDS - T0)) s; logs in $LOG_DIR)"
    [ ${#RESULTS[@]} -gt 0 ] || failed=1
    return $failed
}

main "$@"
