# docker/lib.sh - what docker/test.sh and docker/test-pg-ha.sh share (sourced, bash): the
# timed steps and messages, the engine (Docker, else podman), the clean environment, and the
# teardown on every exit.
# shellcheck shell=bash
#
# The sourcing script sets, before it calls anything here:
#   ROOT, COMPOSE_FILE, PROJECT, LOG_DIR, BASE, T0   as their names say;
#   ME          its name in messages ("docker/test.sh");
#   SKIP_NAME   the word after SKIP ("docker"): the one line a machine without an engine prints;
#   PROFILES    (array) the compose profiles every compose command names (the services under
#               test belong to them);
#   DOWN_ALSO   (array) the profiles teardown names besides, for containers of `run --rm`
#               services that a failed step may leave;
#   TEST_PORT   the loopback port nginx is published on (HTTP_PORT in the compose file).
# and then `trap on_exit EXIT`.

COMPOSE=()       # the compose command, once chosen
ENGINE=""        # docker or podman
STARTED_PODMAN=0 # 1: this run started the podman engine, so it stops it
STACK_CREATED=0  # 1: `up` was attempted, so `down` is due
SKIPPED=0        # 1: nothing to test here; the SKIP line says why, and is all we print
ENGINE_INFO=""   # what runs the containers, for the log

# ---- messages --------------------------------------------------------------------------

STEP_T=$SECONDS
STEP_OPEN=0
# Closes the step under way with its duration, then opens the next one.
step_done() {
    [ "$STEP_OPEN" = 0 ] || printf '    (took %d s)\n' $((SECONDS - STEP_T))
    STEP_OPEN=0
}
step() {
    step_done
    STEP_OPEN=1
    STEP_T=$SECONDS
    printf '==> [%3ds] %s\n' $((SECONDS - T0)) "$1"
}
info() { printf '    %s\n' "$*"; }
fail() {
    echo "$ME: FAIL: $*" >&2
    exit 1
}
skip() {
    [ "${DOCKER_TEST_REQUIRED:-0}" != 1 ] || fail "would skip ($*) but DOCKER_TEST_REQUIRED=1"
    echo "SKIP $SKIP_NAME: $*"
    SKIPPED=1
    exit 0
}

compose() {
    "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" "${PROFILES[@]}" "$@"
}

# ---- teardown, on every exit -------------------------------------------------------------

on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "$STACK_CREATED" = 1 ] && [ $rc -eq 0 ] && [ "${DOCKER_TEST_KEEP:-0}" = 1 ]; then
        step_done
        echo "DOCKER_TEST_KEEP=1: the stack stays up on $BASE. To stop it:"
        [ "$ENGINE" != podman ] || echo "  eval \"\$(docker/podman.sh env)\""
        echo "  ${COMPOSE[*]} -p $PROJECT -f docker/compose.yml ${PROFILES[*]:+${PROFILES[*]} }down -v"
        [ "$STARTED_PODMAN" = 0 ] || echo "  docker/podman.sh stop"
        exit 0
    fi
    if [ "$STACK_CREATED" = 1 ]; then
        if [ $rc -ne 0 ]; then
            echo "---- compose ps, and the last log lines of each service ----" >&2
            compose ps >&2 || true
            compose logs --no-color --tail=25 >&2 || true
        fi
        step "teardown: down -v"
        timeout 180 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" "${PROFILES[@]}" \
            "${DOWN_ALSO[@]}" down -v --remove-orphans -t 10 >"$LOG_DIR/down.log" 2>&1 ||
            { info "down failed (log: $LOG_DIR/down.log)"; [ $rc -ne 0 ] || rc=1; }
    fi
    if [ "$STARTED_PODMAN" = 1 ]; then
        "$ROOT/docker/podman.sh" stop || true
    fi
    step_done
    if [ "$SKIPPED" = 1 ]; then
        :
    elif [ $rc -eq 0 ]; then
        echo "$ME: OK in $((SECONDS - T0)) s"
    else
        echo "$ME: FAILED (exit $rc) after $((SECONDS - T0)) s; logs in $LOG_DIR" >&2
    fi
    exit $rc
}

# ---- the engine --------------------------------------------------------------------------

# Sets ENGINE, COMPOSE and ENGINE_INFO: Docker when one answers, else podman behind its
# Docker-compatible socket (docker/podman.sh, started here when it does not run: then
# STARTED_PODMAN=1 and on_exit stops it). Neither possible: skip.
choose_engine() {
    if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
        ENGINE=docker
        if docker compose version >/dev/null 2>&1; then
            COMPOSE=(docker compose)
        elif command -v docker-compose >/dev/null; then
            COMPOSE=(docker-compose)
        else
            skip "a Docker engine runs but neither 'docker compose' nor docker-compose is installed"
        fi
        ENGINE_INFO="Docker engine $(docker version -f '{{.Server.Version}}' 2>/dev/null), ${COMPOSE[*]}"
        # The one base image every target starts from: pulled when missing.
        docker image inspect debian:bookworm-slim >/dev/null 2>&1 ||
            timeout 300 docker pull -q debian:bookworm-slim >/dev/null 2>&1 ||
            skip "a Docker engine runs, but debian:bookworm-slim is neither here nor pullable"
        return 0
    fi

    local why rc=0
    "$ROOT/docker/podman.sh" status >/dev/null 2>&1 || STARTED_PODMAN=1
    why=$("$ROOT/docker/podman.sh" start 2>&1) || rc=$?
    case $rc in
    0) ;;
    3) STARTED_PODMAN=0; skip "no Docker engine, and $(printf '%s\n' "$why" | tail -n 1 | sed 's/^podman.sh: //')" ;;
    *) fail "docker/podman.sh start failed: $why" ;;
    esac
    eval "$("$ROOT/docker/podman.sh" env)"
    ENGINE=podman
    COMPOSE=(docker-compose)
    # shellcheck disable=SC2034 # docker/test.sh prints it
    ENGINE_INFO="${why:+$why
}podman $(podman version -f '{{.Client.Version}}'), docker-compose $(docker-compose version --short) on $DOCKER_HOST"
}

# The variables docker/.env sets come from that file only, never from the caller's shell
# (make test may run with MODE, HTTP_PORT... set for the native stack); then ours.
clean_environment() {
    local name
    for name in $(sed -n 's/^\([A-Z_][A-Z0-9_]*\)=.*/\1/p' "$ROOT/docker/.env"); do
        unset "$name"
    done
    export HTTP_PORT=$TEST_PORT
    # A token, so the test also proves the admin endpoint's check through the stack.
    export ADMIN_TOKEN=docker-test-$RANDOM$RANDOM
}

# wait_ready SECONDS: until nginx answers /readyz with 200 (the script's own `http`, which
# prints the status first); 1 when SECONDS pass without one.
wait_ready() {
    local deadline=$((SECONDS + $1))
    while [ $SECONDS -lt $deadline ]; do
        [ "$(http GET /readyz | cut -d' ' -f1)" = 200 ] && return 0
        sleep 1
    done
    return 1
}
