#!/usr/bin/env bash
# podman.sh - a Docker-compatible engine made of podman, for machines with no Docker engine.
#
#   docker/podman.sh start    set up what is missing and start the engine (idempotent)
#   docker/podman.sh base     only the packages, the configuration and the base image, for
#                             podman used directly (make test-fresh, docker/fresh.sh)
#   docker/podman.sh stop     stop what `start` started, by PID
#   docker/podman.sh env      print the export line a shell needs to use the engine
#   docker/podman.sh status   say whether the engine runs
#
# docker-compose 1.29 (Debian's) speaks the Docker API; `podman system service` serves that
# API on a unix socket. With DOCKER_HOST pointing at that socket, docker/compose.yml runs
# unchanged. Four things about this kind of host need handling, and each is done here:
#
#   1. crun, podman's default runtime, fails on this host's cgroups ("cgroups in hybrid
#      mode not supported"): a private containers.conf selects runc.
#   2. root may not raise its own limits here, while podman's default ulimits (nofile
#      1048576) are higher than the hard limits: the same file sets 4096.
#   3. No container registry is reachable, so `debian:bookworm-slim`, the only base image
#      the project's Dockerfile uses, is made locally: debootstrap --variant=minbase from
#      the apt mirror the host uses, trimmed like the official -slim image, then
#      `podman import`. The tarball is kept under the run directory for the next time.
#   4. podman runs health checks from systemd timers; with no systemd (a container, a CI
#      runner) no check ever runs, every container stays "starting", and compose, which
#      starts services in order of health, waits forever. A small loop started here (the
#      "health ticker") runs `podman healthcheck run` on the running containers instead.
# Containers find each other by service name through the CNI dnsname plugin.
#
# Everything lives under $PODMAN_RUN_DIR (default <project>/.run/podman, git-ignored).
# Images go to podman's usual store (/var/lib/containers), so layers built once are reused by
# every later run, from this clone or another.
#
# Exit status of `start`: 0 when the engine answers; 3 when podman cannot run on this
# machine (not root, inside a container, packages not installable, no base image possible, a
# container does not start), with one line on stderr saying why; 1 for anything else.
# Inside a container it stops at once: podman there would have to run nested, which needs
# privileges a container is not normally given (the import of the base image fails), and
# finding that out would cost minutes of package installs and a debootstrap first.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUN_DIR=${PODMAN_RUN_DIR:-$ROOT/.run/podman}
SOCK=$RUN_DIR/podman.sock
CONF=$RUN_DIR/containers.conf
SERVICE_PID=$RUN_DIR/service.pid
TICKER_PID=$RUN_DIR/health-ticker.pid
TARBALL=$RUN_DIR/debian-bookworm-minbase.tar
BASE_IMAGE=docker.io/library/debian:bookworm-slim
HOST_PACKAGES="podman runc docker-compose debootstrap golang-github-containernetworking-plugin-dnsname curl"

# What a shell needs: podman reads CONTAINERS_CONF, docker-compose and docker read DOCKER_HOST;
# the last two keep docker-compose building through the API (podman has no buildx).
export CONTAINERS_CONF=$CONF
export DOCKER_HOST=unix://$SOCK
export COMPOSE_DOCKER_CLI_BUILD=0 DOCKER_BUILDKIT=0

info() { printf '    %s\n' "$*"; }
cannot() {
    echo "podman.sh: cannot run podman here: $*" >&2
    exit 3
}
die() {
    echo "podman.sh: $*" >&2
    exit 1
}

# Is the process in pid file $1 alive and is its command line matching $2? (A pid file left
# by a crash may name a pid reused since by something else: that one is not ours.)
pid_alive() {
    local pid
    [ -s "$1" ] || return 1
    pid=$(cat "$1")
    kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

# Stops the process of pid file $1 (TERM, then KILL after 10 s) and removes the file.
stop_pid() {
    local pid
    if pid_alive "$1" "$2"; then
        pid=$(cat "$1")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 40); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.25
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
        info "stopped $2 (pid $pid)"
    fi
    rm -f "$1"
}

engine_answers() {
    curl -sf -m 2 --unix-socket "$SOCK" http://d/_ping >/dev/null 2>&1
}

install_packages() {
    local p need=()
    for p in $HOST_PACKAGES; do
        dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii' || need+=("$p")
    done
    [ ${#need[@]} -eq 0 ] && return 0
    [ "$(id -u)" -eq 0 ] || cannot "not root and missing ${need[*]}"
    info "apt-get install ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Wait for another apt (a helper, unattended-upgrades) rather than fail on its lock.
    apt-get -q -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need[@]}" \
        >"$RUN_DIR/apt.log" 2>&1 ||
        { apt-get -q -o DPkg::Lock::Timeout=300 update >>"$RUN_DIR/apt.log" 2>&1 &&
            apt-get -q -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${need[@]}" \
                >>"$RUN_DIR/apt.log" 2>&1; } ||
        cannot "apt-get install ${need[*]} failed (log: $RUN_DIR/apt.log)"
}

# The first mirror apt uses on this host (deb822 sources first, then the one-line format).
apt_mirror() {
    local m=""
    [ -f /etc/apt/sources.list.d/debian.sources ] &&
        m=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
    [ -z "$m" ] && [ -f /etc/apt/sources.list ] &&
        m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' \
            /etc/apt/sources.list)
    echo "$m"
}

# Writes the minbase root file system as a tarball, trimmed the way the official -slim image
# is (no apt caches, docs, man pages or locales; services never started by dpkg).
make_tarball() {
    local rf=$RUN_DIR/rootfs m t0
    m=$(apt_mirror)
    [ -n "$m" ] || cannot "no Debian mirror in apt's sources for debootstrap"
    t0=$SECONDS
    info "debootstrap --variant=minbase bookworm from $m (about 25 s)"
    rm -rf "$rf"
    debootstrap --variant=minbase bookworm "$rf" "$m" >"$RUN_DIR/debootstrap.log" 2>&1 ||
        cannot "debootstrap failed (log: $RUN_DIR/debootstrap.log)"
    # The image's apt uses the host's sources, and the host's view of their dates: a dated
    # snapshot mirror has Release files apt would call expired.
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        cp /etc/apt/sources.list.d/debian.sources "$rf/etc/apt/sources.list.d/"
        rm -f "$rf/etc/apt/sources.list"
    else
        cp /etc/apt/sources.list "$rf/etc/apt/sources.list"
    fi
    if grep -q 'Acquire::Check-Valid-Until "false"' <<<"$(apt-config dump)"; then
        printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' \
            >"$rf/etc/apt/apt.conf.d/99no-check-valid-until"
    fi
    local clean='rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true'
    printf 'DPkg::Post-Invoke { "%s"; };\nAPT::Update::Post-Invoke { "%s"; };\nDir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n' \
        "$clean" "$clean" >"$rf/etc/apt/apt.conf.d/docker-clean"
    printf 'Acquire::GzipIndexes "true";\nAcquire::Languages "none";\n' \
        >"$rf/etc/apt/apt.conf.d/docker-lists"
    printf '#!/bin/sh\nexit 101\n' >"$rf/usr/sbin/policy-rc.d"
    chmod 755 "$rf/usr/sbin/policy-rc.d"
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
        'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
        >"$rf/etc/dpkg/dpkg.cfg.d/docker-slim"
    rm -rf "$rf"/var/lib/apt/lists/* "$rf"/var/cache/apt/*.bin "$rf"/var/cache/apt/archives/*.deb \
        "$rf"/usr/share/man/* "$rf"/usr/share/info/*
    find "$rf/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$rf/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
    tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
        -C "$rf" -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
    rm -rf "$rf"
    info "made $TARBALL ($(du -h "$TARBALL" | cut -f1)) in $((SECONDS - t0)) s"
}

ensure_base_image() {
    if podman image exists "$BASE_IMAGE"; then
        return 0
    fi
    [ -s "$TARBALL" ] || make_tarball
    podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["bash"]' "$TARBALL" "$BASE_IMAGE" >"$RUN_DIR/import.log" 2>&1 ||
        cannot "podman import of $TARBALL failed (log: $RUN_DIR/import.log)"
    info "imported $BASE_IMAGE from $TARBALL"
}

write_conf() {
    cat >"$CONF" <<'EOF'
# Written by docker/podman.sh; podman reads it (and only it) through CONTAINERS_CONF.
[containers]
# podman's default limits (nofile 1048576) exceed this host's hard limits, and root may not
# raise them: runc would fail with "error setting rlimit type 7: operation not permitted".
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]

[engine]
# crun, the default, fails on this host's cgroups; runc works.
runtime = "runc"
EOF
}

start_service() {
    if engine_answers; then
        return 0
    fi
    rm -f "$SOCK"
    # setsid: the service must not die with the shell that started it, nor get its signals.
    setsid podman system service --time=0 "unix://$SOCK" >"$RUN_DIR/service.log" 2>&1 </dev/null &
    echo $! >"$SERVICE_PID"
    for _ in $(seq 1 80); do
        engine_answers && break
        sleep 0.25
    done
    engine_answers || die "podman system service did not answer (log: $RUN_DIR/service.log)"
    info "podman system service on $SOCK (pid $(cat "$SERVICE_PID"))"
}

# The health ticker (point 4 above). Every 2 s it runs the check of each running container
# whose health is still "starting" (so that compose's start order moves at once), and every
# 10 s the check of all of them (so a replica that dies turns "unhealthy" as under Docker).
# It stops by itself when the engine has gone.
start_ticker() {
    pid_alive "$TICKER_PID" "podman.sh health-ticker" && return 0
    setsid "$ROOT/docker/podman.sh" health-ticker >"$RUN_DIR/health-ticker.log" 2>&1 </dev/null &
    echo $! >"$TICKER_PID"
    info "health ticker (pid $(cat "$TICKER_PID"))"
}

# The ticker's loop: it ends when the engine stops answering.
health_ticker() {
    local n=0 filter c
    while engine_answers; do
        filter=(--filter health=starting)
        [ $((n % 5)) -eq 0 ] && filter=()
        for c in $(podman ps -q "${filter[@]}" 2>/dev/null); do
            podman healthcheck run "$c" >/dev/null 2>&1 || true
        done
        n=$((n + 1))
        sleep 2
    done
}

# Proves a container runs at all here, before any project image is built.
smoke_test() {
    podman run --rm --net=none "$BASE_IMAGE" true >"$RUN_DIR/smoke.log" 2>&1 ||
        cannot "a container does not start: $(tail -1 "$RUN_DIR/smoke.log")"
}

# Prints what shows we are inside a container: podman's marker file, or the `container`
# variable podman, LXC and systemd-nspawn give PID 1; returns 1 when neither does. (Not
# Docker's /.dockerenv: it is also left in machines made from a Docker image, such as the
# project's own, where podman runs fine. Inside Docker, the import fails later instead.)
in_container() {
    local f
    [ -e /run/.containerenv ] && { echo "/run/.containerenv exists"; return 0; }
    f=$(tr '\0' '\n' 2>/dev/null </proc/1/environ | sed -n 's/^container=//p' | head -n 1)
    [ -n "$f" ] && { echo "PID 1 has container=$f"; return 0; }
    return 1
}

cmd_base() {
    local why
    mkdir -p "$RUN_DIR"
    [ "$(id -u)" -eq 0 ] || cannot "not root (podman runs rootful in this set-up)"
    if why=$(in_container); then
        cannot "inside a container ($why), where podman would have to run nested"
    fi
    install_packages
    write_conf
    ensure_base_image
}

cmd_start() {
    cmd_base
    [ -x /usr/lib/cni/dnsname ] || cannot "the CNI dnsname plugin is missing"
    smoke_test
    start_service
    start_ticker
    print_env >"$RUN_DIR/env"
}

cmd_stop() {
    stop_pid "$TICKER_PID" "podman.sh health-ticker"
    stop_pid "$SERVICE_PID" "system service"
    rm -f "$SOCK"
}

print_env() {
    printf 'export DOCKER_HOST=%s CONTAINERS_CONF=%s COMPOSE_DOCKER_CLI_BUILD=0 DOCKER_BUILDKIT=0\n' \
        "$DOCKER_HOST" "$CONTAINERS_CONF"
}

case "${1:-}" in
start) cmd_start ;;
base) cmd_base ;;
stop) cmd_stop ;;
env) print_env ;;
health-ticker) health_ticker ;;
status)
    if engine_answers; then echo "podman engine answers on $SOCK"; else echo "podman engine not running"; exit 1; fi
    ;;
*) die "usage: docker/podman.sh start|base|stop|env|status" ;;
esac
