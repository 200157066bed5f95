#!/usr/bin/env bash
# docker/test.sh - `make test-docker`: proves that docker/compose.yml builds, starts and
# serves, on a Docker engine or, where there is none, on podman (docker/podman.sh).
#
# What it checks, in order, each step timed:
#   1. an engine: Docker (with `docker compose` or docker-compose), else podman set up by
#      docker/podman.sh; neither possible -> one line "SKIP docker: <reason>", exit 0;
#   2. the compose file validates (`compose config`), names the services it should, takes
#      every variable it uses from docker/.env, and publishes nginx only, on loopback;
#   3. the images build (docker/Dockerfile, all targets; cached layers make this quick);
#   4. `up -d` brings the stack up in order of health, and nginx answers /readyz;
#      the configuration nginx runs passes `nginx -t` inside its container; the seed made
#      goods 1; the admin endpoint refuses a reset without the token;
#   5. a short bounded load through nginx in `redis` mode, by the loadtest service itself
#      (`run --rm loadtest`: 1000 requests against a stock of 500): the books balance
#      (stock 0, 500 sold, oversold 0) and each of svc-1..3 recorded sales;
#   6. one at a time: the `instance` of 200 answers names all three replicas; with svc-3
#      stopped every answer is still a 200 from svc-1 or svc-2; with all three stopped,
#      nginx answers its own JSON error (502/503/504, "ok":false);
#   7. teardown: `down -v` (containers, network, the database volume), and the podman
#      engine stopped if this script started it; also when a step fails (trap). The built
#      images stay, so the next run's builds are cache hits.
#
# Settings (environment): DOCKER_TEST_HTTP_PORT (18080) where nginx is published on
# 127.0.0.1; DOCKER_TEST_PROJECT (stocktest) the compose project name; DOCKER_TEST=0 skips;
# DOCKER_TEST_REQUIRED=1 turns a SKIP into a failure; DOCKER_TEST_KEEP=1 leaves the stack
# (and the engine) up after a success, to look around. Logs: .run/docker-test/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMPOSE_FILE=$ROOT/docker/compose.yml
PROJECT=${DOCKER_TEST_PROJECT:-stocktest}
TEST_PORT=${DOCKER_TEST_HTTP_PORT:-18080}
LOG_DIR=$ROOT/.run/docker-test
BASE=http://127.0.0.1:$TEST_PORT
STOCK=500     # the load's stock ...
BUDGET=1000   # ... and requests: half must be refused with 409
T0=$SECONDS

ME=docker/test.sh
SKIP_NAME=docker
PROFILES=()
DOWN_ALSO=(--profile load --profile tools) # the loadtest and tools services, run with --rm

# The steps and messages, the engine, the environment and the teardown, as
# docker/test-pg-ha.sh has them too.
# shellcheck source=docker/lib.sh
source "$ROOT/docker/lib.sh"

# ---- small helpers -----------------------------------------------------------------------

# HTTP through nginx: prints "STATUS BODY" on one line (BODY with no newline).
http() {
    local method=$1 path=$2
    shift 2
    local out
    out=$(curl -sS -m 20 -X "$method" -w '\n%{http_code} %{content_type}' "$@" "$BASE$path" 2>&1) ||
        { echo "000 curl-error: $out"; return 0; }
    # Last line: status and content type; before it: the body.
    local tail=${out##*$'\n'} body=${out%$'\n'*}
    echo "${tail%% *} ${tail#* } ${body//$'\n'/ }"
}

deduct() {
    http POST /api/deduct -H 'Content-Type: application/json' \
        -d "{\"goods_id\":$1,\"count\":1,\"mode\":\"redis\"}"
}

reset_goods() {
    local r
    r=$(http POST /api/admin/reset -H 'Content-Type: application/json' \
        -H "Authorization: Bearer $ADMIN_TOKEN" -d "{\"goods_id\":$1,\"stock\":$2}")
    [ "${r%% *}" = 200 ] || fail "reset of goods $1 answered: $r"
}

json_field() {
    sed -n 's/.*"'"$2"'":"\{0,1\}\([^",}]*\).*/\1/p' <<<"$1" | head -n 1
}

# Deducts 1 of goods G, one request after the other, until the 200 answers have come from
# every instance named in WANT (space-separated) or 30 requests were sent. (nginx's round
# robin is per worker process, so a few more requests than replicas may be needed.) Sets
# SEEN to "STATUS:instance" counts, e.g. "200:svc-1 x3  200:svc-2 x4", and SENT.
SEEN="" SENT=0
deduct_until_seen() {
    local g=$1 want=$2 r i w missing
    local -A count=()
    SENT=0
    for ((i = 0; i < 30; i++)); do
        r=$(deduct "$g")
        SENT=$((SENT + 1))
        w="${r%% *}:$(json_field "$r" instance)"
        count[$w]=$((${count[$w]:-0} + 1))
        missing=0
        for w in $want; do
            [ -n "${count[200:$w]:-}" ] || missing=1
        done
        [ $missing = 1 ] || break
    done
    SEEN=$(for w in "${!count[@]}"; do echo "$w x${count[$w]}"; done | sort | tr '\n' ' ')
}

# True when every answer counted in SEEN was a 200.
all_200() {
    [ "$(grep -o '[0-9]*:' <<<"$SEEN" | sort -u | tr -d '\n')" = "200:" ]
}

# ---- the test -------------------------------------------------------------------------------

main() {
    if [ "${DOCKER_TEST:-1}" = 0 ]; then
        skip "disabled by DOCKER_TEST=0"
    fi
    mkdir -p "$LOG_DIR"
    exec 9>"$LOG_DIR/lock"
    flock -n 9 || fail "another docker/test.sh runs (lock $LOG_DIR/lock)"
    trap on_exit EXIT
    trap 'exit 130' INT TERM

    choose_engine
    step "1. engine: $ENGINE"
    STEP_T=$T0
    printf '%s\n' "$ENGINE_INFO" | sed 's/^ */    /'
    clean_environment
    if (exec 3<>"/dev/tcp/127.0.0.1/$TEST_PORT") 2>/dev/null; then
        fail "127.0.0.1:$TEST_PORT is taken; set DOCKER_TEST_HTTP_PORT to a free port"
    fi

    step "2. static checks: compose config"
    local out
    out=$(compose config -q 2>&1) || { echo "$out" >&2; fail "compose config rejects $COMPOSE_FILE"; }
    # Every variable the file uses has its default in docker/.env.
    ! grep -i 'variable is not set' <<<"$out" >&2 || fail "docker/.env lacks a variable"
    local services
    services=$(compose --profile load --profile tools --profile etcd --profile ha --profile zookeeper --profile cluster --profile pg-ha config --services | sort | tr '\n' ' ')
    [ "$services" = "cluster-1 cluster-2 cluster-3 cluster-create etcd loadtest migrate nginx pg-1 pg-2 pg-3 pgha-etcd postgres psql redis redis-replica seed sentinel-1 sentinel-2 sentinel-3 svc-1 svc-2 svc-3 zookeeper " ] ||
        fail "unexpected services: $services"
    info "valid; services: $services"
    # Published: nginx only, on loopback. docker-compose 1.29 prints the short form
    # (127.0.0.1:PORT:8080), Compose v2 the long one (host_ip, published).
    local config
    config=$(compose config)
    [ "$(grep -c '^    ports:' <<<"$config")" = 1 ] || fail "more than one service publishes ports"
    grep -q "127\.0\.0\.1:$TEST_PORT:8080" <<<"$config" ||
        { grep -q 'host_ip: 127.0.0.1' <<<"$config" && grep -q "published: \"\{0,1\}$TEST_PORT" <<<"$config"; } ||
        fail "nginx is not published on 127.0.0.1:$TEST_PORT"

    step "3. build the images (log: $LOG_DIR/build.log)"
    # One build per image: svc-1..3 and seed use the image migrate builds (stock-service).
    if ! compose --profile load build postgres redis migrate nginx loadtest \
        >"$LOG_DIR/build.log" 2>&1; then
        tail -n 30 "$LOG_DIR/build.log" >&2
        fail "the images did not build"
    fi
    info "$(grep -c 'Using cache\|--> Using cache' "$LOG_DIR/build.log" || true) cached steps"

    step "4. up -d, in order of health"
    # Left over by an interrupted run of this project: start clean.
    compose --profile load --profile tools down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
    STACK_CREATED=1
    timeout 300 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" up -d \
        >"$LOG_DIR/up.log" 2>&1 || { cat "$LOG_DIR/up.log" >&2; fail "compose up failed"; }
    wait_ready 60 || fail "nginx on $BASE never answered /readyz with 200"
    info "ready: $(http GET /readyz)"
    # Every long-running container's HEALTHCHECK says healthy: postgres, redis, the three
    # replicas and nginx.
    local r healthy=0 deadline=$((SECONDS + 60))
    while [ $SECONDS -lt $deadline ]; do
        healthy=$(compose ps 2>/dev/null | grep -c '(healthy)' || true)
        [ "$healthy" -lt 6 ] || break
        sleep 1
    done
    [ "$healthy" -ge 6 ] || { compose ps >&2; fail "$healthy of 6 containers healthy after 60 s"; }
    info "6 containers healthy"
    # The service image runs as its unprivileged user. (Asked of migrate, which has the
    # image and no running container: docker-compose 1.29 links a one-off container to its
    # service's running ones, and podman supports no links.)
    r=$(compose run --rm --no-deps -T --entrypoint id migrate -un 2>>"$LOG_DIR/run.log" | tr -d '\r')
    [ "$r" = stock ] || fail "the service image runs as '$r', not as the user stock"
    info "the service runs as user $r"
    # The nginx container's entrypoint renders the configuration from the project's templates
    # and runs nginx -t on it before nginx starts; its verdict is in the log. (Read there
    # rather than with `exec`, whose helper processes podman keeps for 5 minutes.)
    # (Captured first: grep -q leaving early would break the pipe under pipefail.)
    r=$(compose logs --no-color nginx 2>&1)
    grep -q 'nginx.conf test is successful' <<<"$r" ||
        fail "no successful nginx -t in the nginx container's log"
    info "nginx -t on the rendered configuration: successful"
    r=$(http GET /api/stock/1)
    [ "${r%% *}" = 200 ] && [ "$(json_field "$r" initial)" = 5000 ] ||
        fail "the seed did not make goods 1 with 5000 units: $r"
    r=$(http POST /api/admin/reset -H 'Content-Type: application/json' -d '{"goods_id":1,"stock":1}')
    [ "${r%% *}" = 401 ] || fail "a reset without the admin token answered: $r"
    info "seeded goods 1 ($(json_field "$r" error) without the token, as it should)"
    # The default stack runs no etcd (profile "etcd"), so its replicas do not offer that mode.
    r=$(http GET /api/modes)
    [ "${r%% *}" = 200 ] && [[ $r == *'"name":"redis"'* ]] && [[ $r != *'"name":"etcd"'* ]] ||
        fail "GET /api/modes of the stack without etcd: $r"
    info "GET /api/modes lists no etcd mode: the stack runs no etcd"

    step "5. load through nginx: loadtest service, redis mode, $BUDGET requests, stock $STOCK"
    # --no-deps: the stack is up (without it, compose would run migrate again, a no-op).
    if ! timeout 240 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" run --rm --no-deps -T loadtest \
        --rows redis:3 --stock "$STOCK" --budget "$BUDGET" --connections 16 --threads 2 \
        --ceiling-seconds 1 --out /tmp/docker-test >"$LOG_DIR/loadtest.log" 2>&1; then
        tail -n 30 "$LOG_DIR/loadtest.log" >&2
        fail "the loadtest service failed"
    fi
    grep '^|' "$LOG_DIR/loadtest.log" | sed 's/^/    /'
    r=$(http GET /api/stock/1)
    info "books: $r"
    [ "$(json_field "$r" stock)" = 0 ] && [ "$(json_field "$r" sold)" = "$STOCK" ] &&
        [ "$(json_field "$r" oversold)" = 0 ] ||
        fail "the books do not balance after the load: $r"
    # Every 200 recorded an order carrying the instance that answered it.
    local per
    # The compose file's psql tool, as the service's role.
    per=$(compose run --rm --no-deps -T psql -X -q -At -F' ' \
        -c "SELECT instance, count(*) FROM orders WHERE goods = 1 GROUP BY instance ORDER BY 1" \
        2>>"$LOG_DIR/psql.log" | tr -d '\r')
    info "sales per replica: $(echo "$per" | tr '\n' ' ')"
    [ "$(echo "$per" | awk '$2 > 0 { print $1 }' | tr '\n' ' ')" = "svc-1 svc-2 svc-3 " ] ||
        fail "not every replica served: $per"
    [ "$(echo "$per" | awk '{ s += $2 } END { print s }')" = "$STOCK" ] ||
        fail "the orders do not add up to $STOCK: $per"

    step "6. replicas by the instance of 200 answers; one stopped; all stopped"
    reset_goods 2 100
    deduct_until_seen 2 "svc-1 svc-2 svc-3"
    info "all up:      $SEEN"
    all_200 && [[ $SEEN == *"200:svc-1 "* && $SEEN == *"200:svc-2 "* && $SEEN == *"200:svc-3 "* ]] ||
        fail "the 200 answers did not come from all three replicas: $SEEN"
    local sold=$SENT

    compose stop -t 10 svc-3 >/dev/null 2>&1 || fail "compose stop svc-3 failed"
    deduct_until_seen 2 "svc-1 svc-2"
    sold=$((sold + SENT))
    info "svc-3 down:  $SEEN"
    all_200 && [[ $SEEN == *"200:svc-1 "* && $SEEN == *"200:svc-2 "* && $SEEN != *svc-3* ]] ||
        fail "with svc-3 stopped, not every answer was a 200 from svc-1 or svc-2: $SEEN"
    r=$(http GET /api/stock/2)
    [ "$(json_field "$r" sold)" = $sold ] && [ "$(json_field "$r" oversold)" = 0 ] ||
        fail "goods 2 should show $sold sold, none oversold: $r"

    compose stop -t 10 svc-1 svc-2 >/dev/null 2>&1 || fail "compose stop svc-1 svc-2 failed"
    local t=$SECONDS
    r=$(deduct 2)
    info "all down:    $r ($((SECONDS - t)) s)"
    case ${r%% *} in
    502 | 503 | 504) ;;
    *) fail "with every replica stopped, nginx answered: $r" ;;
    esac
    [[ $r == *" application/json "* && $r == *'"ok":false'* && $r == *'"error":"'* ]] ||
        fail "nginx's own error is not the API's JSON: $r"
}

main "$@"
