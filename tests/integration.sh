#!/usr/bin/env bash
# integration.sh BUILD_DIR - the whole stack, for real, on free ports: PostgreSQL, Redis,
# REPLICAS (3) replicas of BUILD_DIR/stockd (the sanitizer build) and nginx, started by
# scripts/stack.sh in a throwaway run directory, then:
#   1. nginx -t on the generated configuration (static check);
#   2. BUILD_DIR/tests/stack/test_*, the cmocka integration programs, one per concern (see
#      IT_STACK_PROGRAMS below), each run in turn against this one stack, told where things
#      listen (tests/stack/stack_support.h):
#        STOCK_URL     http://127.0.0.1:HTTP_PORT (nginx)
#        REPLICA_URLS  http://127.0.0.1:PORT of each replica, comma-separated
#        ADMIN_TOKEN   the token the stack runs with
#        RUN_DIR, HTTP_PORT, REPLICA_PORT_BASE, REPLICAS, PG_PORT, REDIS_PORT, STOCKD
#                      exported, so that its `scripts/stack.sh redis-stop` / `redis-start` /
#                      `pg-stop` / `pg-start` act on this stack and no other
#        SLOW_REPLICA_URL, SLOW_REPLICA_LOG, SLOW_REPLICA_DELAY_MS, SLOW_REPLICA_LEASE_MS
#                      one more replica, svc-4, started with `replica-start-extra` on a port
#                      of its own and NOT behind nginx, with BUSINESS_DELAY_MS=1500 and
#                      LOCK_LEASE_MS=600 (its watchdog renews every 200 ms): a holder that
#                      pauses past its lease, for the lock_lost cases; its log file, and
#                      those two settings
#        DELAYED_REPLICA_URLS, DELAYED_REPLICA_DELAY_MS
#                      two more, svc-5 and svc-6, also not behind nginx, with
#                      BUSINESS_DELAY_MS=1500, the default watchdog lease and a waiter
#                      liveness (a holding's first lease) of 30 s: their watchdog does not
#                      look during the pause: the holders of the five-step
#                      cases, whose lock vanishes while they are inside their section
#        FAULT_REPLICA_URL
#                      one more, svc-8, not behind nginx, started with FAULTS=on: the carts
#                      that pause between two locks (tests/stack/test_order.c)
#   3. nginx's own errors: a body over 16 KiB gets nginx's JSON 413; with every replica
#      stopped, requests get nginx's JSON 502;
#   4. the live page (web/) in headless Chromium during a short load (tests/live_page.sh);
#   4b. the etcd mode (etcd started by `up` with WITH_ETCD=1 on ports of its own): 64
#      connections over the 3 replicas sell exactly the stock; one goods sold under redis and
#      etcd in turn; a replica started without ETCD_ENDPOINT (svc-7, not behind nginx) lists
#      no etcd mode and answers 400 unknown_mode for it; a holder whose lease is revoked
#      while it pauses answers 503 lock_lost and sells nothing; with etcd down, 503
#      unavailable; after it is back, deductions go through again;
#   4c. the zookeeper mode (ZooKeeper started by `up` with WITH_ZOOKEEPER=1, on a port of its
#      own): 64 connections over the 3 replicas sell exactly the stock; a holder whose
#      replica is frozen (SIGSTOP) past its session timeout answers 503 lock_lost and sells
#      nothing; with ZooKeeper down, 503 unavailable; after it is back, deductions resume;
#   5. shutdown: every replica exits 0 on SIGTERM, and no replica log (nor the migrate log)
#      holds a sanitizer report: a leak, a crash or undefined behaviour fails the run.
# Everything started is stopped at exit, on failure too; the logs are copied to the test log
# directory before the run directory is removed (KEEP_RUN_DIR=1 keeps it).
#
# Run on its own (`make test-integration`) it prints its own "N passed, N failed";
# tests/run-all.sh sources it and calls run_integration, so its cases join the total.
# run_integration BUILD [SUFFIX [PATTERN [SKIP [CLIENT_BUILD]]]]: SUFFIX (e.g. "-tsan") is
# added to the name of each suite and log, so that two runs (the ThreadSanitizer one,
# tests/tsan.sh) can join one total; PATTERN (cmocka's, '*' and '?': 'test_load_*') runs only
# the cases it matches, and SKIP (the same kind of pattern) leaves out the cases it matches.
# The replicas are BUILD's stockd; the programs of tests/stack/ are CLIENT_BUILD's (BUILD's
# by default): the ThreadSanitizer pass of `make test` drives its TSan replicas with the ASan
# build of the clients, whose 64 load threads are test code, not what TSan is there to check.
set -euo pipefail

# The integration stack's settings: fixed here so that a developer's own environment
# (a MODE or BUSINESS_DELAY_MS exported for a demo) cannot change what the tests see.
IT_REPLICAS=3
IT_LOCK_WAIT_MS=2000
# Each PostgreSQL round trip, bounded on the client side (the frozen-PostgreSQL case waits it
# out): the default, above the server's statement_timeout (5 s), so that a legitimately slow
# statement (50 transactions queued on one row in `none` mode, on a busy machine) gets the
# server's answer, never the client's.
IT_DB_REPLY_TIMEOUT_MS=6000
# The slow replica: it sleeps between its read and its write for longer than its lock's
# lease, the pause (a GC, a stall) in which a lease can run out under a holder.
IT_SLOW_REPLICA=$((IT_REPLICAS + 1))
IT_SLOW_DELAY_MS=1500
IT_SLOW_LEASE_MS=600
# The delayed replicas: a pause inside the section with a lease far longer than it, and
# shorter than the lock wait bound (IT_LOCK_WAIT_MS): the new holder's claim waits for the
# paused holder's row at most that long (a fenced sale's lock_timeout), then answers 503.
IT_DELAYED_REPLICAS="$((IT_REPLICAS + 2)) $((IT_REPLICAS + 3))"
IT_DELAYED_DELAY_MS=1500
# Their first lease (a holding starts with the waiter liveness, lock/README.md) as long as the
# watchdog's, so that the watchdog does not look within the pause either.
IT_DELAYED_LIVENESS_MS=30000
# The fault replica: started with FAULTS=on, not behind nginx, for the cart cases that pause
# between two locks (X-Fault: pause-between-locks, tests/stack/test_order.c).
IT_FAULT_REPLICA=$((IT_REPLICAS + 5))
# The stack's test programs (tests/stack/test_NAME.c), in the order they run, each with its
# time limit in seconds (about four times what each takes under the sanitizers). deps_down
# runs last: it stops and freezes the stack's servers, which must not disturb the others.
IT_STACK_PROGRAMS="contract:120 lab_routes:60 cache:150 http_edges:120 idempotency:120 oversell:360 sharded_sales:240 order:150 lock_lost:180 deps_down:180"
# STACK_PROGRAMS="NAME ...", when set, runs only those of them (e.g. STACK_PROGRAMS=lock_lost
# make test-integration): one concern against a stack of its own, the rest of this file as
# always.
STACK_PROGRAMS=${STACK_PROGRAMS:-}

# True when FILE holds no sanitizer report.
it__no_sanitizer_report() {
    local file=$1
    [ -f "$file" ] || return 0
    if grep -E -n 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' \
        "$file" >&2; then
        echo "    (sanitizer report in $file)" >&2
        return 1
    fi
}

# it__expect_json METHOD STATUS ERROR [CURL ARGS...]: a request through nginx answers STATUS
# with Content-Type application/json and "error":"ERROR".
it__expect_json() {
    local method=$1 want=$2 error=$3 out got ctype
    shift 3
    out=$(mktemp)
    got=$(curl -sS -m 10 -o "$out" -w '%{http_code} %{content_type}' -X "$method" "$@" \
        "http://127.0.0.1:$HTTP_PORT/api/deduct" 2>/dev/null) || true
    ctype=${got#* }
    got=${got%% *}
    if [ "$got" != "$want" ] || [[ $ctype != application/json* ]] ||
        ! grep -q "\"error\":\"$error\"" "$out"; then
        echo "    expected $want application/json \"$error\", got $got $ctype: $(head -c 200 "$out")" >&2
        rm -f "$out"
        return 1
    fi
    rm -f "$out"
}

it__413() {
    local big
    big=$(mktemp)
    # 20 KiB of a valid-looking JSON prefix: nginx must refuse it by its size alone.
    { printf '{"goods_id":1,"count":1,"pad":"'; head -c 20480 /dev/zero | tr '\0' x; printf '"}'; } >"$big"
    it__expect_json POST 413 payload_too_large -H 'Content-Type: application/json' \
        --data-binary "@$big" || { rm -f "$big"; return 1; }
    rm -f "$big"
}

# it__redlock URL served|unserved: the redlock row is listed by URL's /api/modes and sells one
# unit of a fresh goods (served), or is neither listed nor served: 400 unknown_mode, the
# stock untouched (unserved: a replica started without REDLOCK_NODES).
it__redlock() {
    local url=$1 want=$2 goods=990001 modes status body
    curl -s -m 10 -o /dev/null -X POST -H "Authorization: Bearer $ADMIN_TOKEN" \
        -H 'Content-Type: application/json' --data "{\"goods_id\":$goods,\"stock\":10}" \
        "http://127.0.0.1:$HTTP_PORT/api/admin/reset" || return 1
    modes=$(curl -s -m 10 "$url/api/modes") || return 1
    body=$(mktemp)
    status=$(curl -s -m 10 -o "$body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
        --data "{\"goods_id\":$goods,\"count\":1,\"mode\":\"redlock\"}" "$url/api/deduct")
    local stock
    stock=$(curl -s -m 10 "http://127.0.0.1:$HTTP_PORT/api/stock/$goods" |
        sed -n 's/.*"stock":\([0-9]*\).*/\1/p')
    if [ "$want" = served ]; then
        [[ $modes == *'"redlock"'* ]] && [ "$status" = 200 ] && [ "$stock" = 9 ]
    else
        [[ $modes != *'"redlock"'* ]] && [ "$status" = 400 ] &&
            grep -q '"unknown_mode"' "$body" && [ "$stock" = 10 ]
    fi || {
        echo "    $url: modes ${modes:0:80}...; deduct $status $(cat "$body"); stock $stock" >&2
        rm -f "$body"
        return 1
    }
    rm -f "$body"
}

it__502() {
    it__expect_json POST 502 unavailable -H 'Content-Type: application/json' \
        --data '{"goods_id":1,"count":1}'
}

it__exit_zero() {
    local n=$1 rc=""
    [ -r "$RUN_DIR/replicas/svc-$n.exit" ] && read -r rc <"$RUN_DIR/replicas/svc-$n.exit"
    [ "$rc" = 0 ] || { echo "    svc-$n exit status: ${rc:-unknown}" >&2; return 1; }
}

# Stops the stack (quietly when it is down already), keeps its logs, removes the run dir.
IT_SUFFIX=""
it__cleanup() {
    local keep=$HARNESS_LOG_DIR/integration$IT_SUFFIX
    [ -n "${RUN_DIR:-}" ] && [ -d "$RUN_DIR" ] || return 0
    if ! scripts/stack.sh down >>"$HARNESS_LOG_DIR/integration$IT_SUFFIX-down.log" 2>&1; then
        echo "integration: stack.sh down reported problems (see $HARNESS_LOG_DIR/integration$IT_SUFFIX-down.log)" >&2
    fi
    mkdir -p "$keep"
    cp -r "$RUN_DIR/logs/." "$keep/" 2>/dev/null || true
    cp "$RUN_DIR/nginx/logs/error.log" "$keep/nginx-error.log" 2>/dev/null || true
    cp "$RUN_DIR/pg/log/postgres.log" "$keep/postgres.log" 2>/dev/null || true
    if [ "${KEEP_RUN_DIR:-0}" = 1 ]; then
        echo "integration: run directory kept: $RUN_DIR" >&2
    elif scripts/stack.sh status 2>/dev/null | grep -q ' running '; then
        echo "integration: something still runs; run directory kept: $RUN_DIR" >&2
    else
        rm -rf "$RUN_DIR"
    fi
}

# --- the etcd mode's cases ---

# A goods of its own, so that these cases' books are theirs alone (and tests/stack's too).
IT_ETCD_GOODS=7001
# The replica without etcd: not behind nginx, started with ETCD_ENDPOINT empty.
IT_NO_ETCD_REPLICA=$((IT_REPLICAS + 4))

it__reset() { # GOODS STOCK
    curl -sS -m 10 -f -o /dev/null -X POST -H "Authorization: Bearer $ADMIN_TOKEN" \
        -H 'Content-Type: application/json' -d "{\"goods_id\":$1,\"stock\":$2}" \
        "http://127.0.0.1:$HTTP_PORT/api/admin/reset"
}

it__deduct_code() { # URL GOODS: prints the status and the body of one etcd-mode deduction
    curl -sS -m 30 -w ' %{http_code}' -X POST -H 'Content-Type: application/json' \
        -d "{\"goods_id\":$2,\"count\":1}" "$1/api/deduct?mode=etcd" 2>/dev/null || true
}

it__stock_field() { # GOODS FIELD
    curl -sS -m 10 "http://127.0.0.1:$HTTP_PORT/api/stock/$1" | sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p"
}

it__etcd_exact() {
    local codes ok
    it__reset $IT_ETCD_GOODS 100 || return 1
    codes=$(seq 160 | xargs -P 64 -I{} curl -sS -m 30 -o /dev/null -w '%{http_code}\n' \
        -X POST -H 'Content-Type: application/json' -d "{\"goods_id\":$IT_ETCD_GOODS,\"count\":1}" \
        "http://127.0.0.1:$HTTP_PORT/api/deduct?mode=etcd")
    ok=$(grep -c '^200$' <<<"$codes" || true)
    echo "    200s: $ok; stock $(it__stock_field $IT_ETCD_GOODS stock); sold $(it__stock_field $IT_ETCD_GOODS sold)" >&2
    [ "$ok" = 100 ] && [ "$(it__stock_field $IT_ETCD_GOODS stock)" = 0 ] && [ "$(it__stock_field $IT_ETCD_GOODS sold)" = 100 ]
}

it__etcd_lease_lost() {
    local url=$1 out pid lease
    it__reset $IT_ETCD_GOODS 10 || return 1
    out=$(mktemp)
    it__deduct_code "$url" $IT_ETCD_GOODS >"$out" &
    pid=$!
    # The slow replica holds the lock for BUSINESS_DELAY_MS (1500 ms): revoke every lease
    # meanwhile (this etcd serves this stack only).
    sleep 0.7
    for lease in $(ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$ETCD_PORT" lease list |
        tail -n +2); do
        ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$ETCD_PORT" lease revoke "$lease" \
            >/dev/null 2>&1 || true
    done
    wait "$pid" || true
    echo "    answer: $(cat "$out")" >&2
    grep -q '"lock_lost".* 503$' "$out" && [ "$(it__stock_field $IT_ETCD_GOODS stock)" = 10 ] &&
        [ "$(it__stock_field $IT_ETCD_GOODS sold)" = 0 ]
    local rc=$?
    rm -f "$out"
    return $rc
}

# The same goods sold under redis, then etcd, then redis: the goods row compares a fencing
# token only with the last one of the same source (etcd's revisions are far below the Redis
# lock's tokens, which start at Redis' clock in microseconds), so no sale is refused.
it__etcd_and_redis_on_one_goods() {
    local m answer
    it__reset $IT_ETCD_GOODS 10 || return 1
    for m in redis etcd redis etcd; do
        answer=$(curl -sS -m 30 -w ' %{http_code}' -X POST -H 'Content-Type: application/json' \
            -d "{\"goods_id\":$IT_ETCD_GOODS,\"count\":1}" \
            "http://127.0.0.1:$HTTP_PORT/api/deduct?mode=$m" 2>/dev/null || true)
        grep -q ' 200$' <<<"$answer" || { echo "    $m: $answer" >&2; return 1; }
    done
    [ "$(it__stock_field $IT_ETCD_GOODS stock)" = 6 ] && [ "$(it__stock_field $IT_ETCD_GOODS sold)" = 4 ]
}

# /api/modes through nginx (replicas with ETCD_ENDPOINT) lists etcd; the replica without
# it (URL) neither lists it nor serves it: 400 unknown_mode, and the goods is untouched.
it__etcd_offered_only_with_endpoint() {
    local url=$1 modes answer
    modes=$(curl -sS -m 10 "http://127.0.0.1:$HTTP_PORT/api/modes")
    grep -q '"name":"etcd"' <<<"$modes" || { echo "    with etcd: $modes" >&2; return 1; }
    modes=$(curl -sS -m 10 "$url/api/modes")
    grep -q '"name":"redis"' <<<"$modes" && ! grep -q '"name":"etcd"' <<<"$modes" ||
        { echo "    without etcd: $modes" >&2; return 1; }
    it__reset $IT_ETCD_GOODS 10 || return 1
    answer=$(it__deduct_code "$url" $IT_ETCD_GOODS)
    echo "    without etcd, mode=etcd: $answer" >&2
    grep -q '"unknown_mode".* 400$' <<<"$answer" && ! grep -q 'etcd, \|, etcd' <<<"$answer" &&
        [ "$(it__stock_field $IT_ETCD_GOODS stock)" = 10 ]
}

# MODE=etcd on a replica without ETCD_ENDPOINT stops its start-up: exit 2, saying why (and,
# under the sanitizers, with nothing leaked on that path).
it__etcd_mode_refused_at_start() {
    local out rc=0
    out=$(MODE=etcd ETCD_ENDPOINT="" PORT=$(pick_free_ports 1) INSTANCE=svc-no-etcd \
        timeout 30 "$STOCKD" 2>&1) || rc=$?
    echo "    exit $rc: $out" >&2
    [ "$rc" = 2 ] && grep -q "the mode 'etcd' is served only with ETCD_ENDPOINT set" <<<"$out" && it__no_sanitizer_report_in "$out"
}

it__no_sanitizer_report_in() {
    ! grep -E -q 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: [A-Za-z]+Sanitizer' <<<"$1"
}

it__etcd_down() {
    local answer
    it__reset $IT_ETCD_GOODS 10 || return 1
    scripts/stack.sh etcd-stop >/dev/null 2>&1 || return 1
    answer=$(it__deduct_code "http://127.0.0.1:$HTTP_PORT" $IT_ETCD_GOODS)
    echo "    etcd down: $answer" >&2
    scripts/stack.sh etcd-start >/dev/null 2>&1 || return 1
    grep -q '"unavailable".* 503$' <<<"$answer" || return 1
    answer=$(it__deduct_code "http://127.0.0.1:$HTTP_PORT" $IT_ETCD_GOODS)
    echo "    etcd back: $answer" >&2
    grep -q ' 200$' <<<"$answer" && [ "$(it__stock_field $IT_ETCD_GOODS stock)" = 9 ]
}

# --- the zookeeper mode's cases ---

IT_ZK_GOODS=7002

it__deduct_mode() { # URL GOODS MODE: prints the status and the body of one deduction
    curl -sS -m 30 -w ' %{http_code}' -X POST -H 'Content-Type: application/json' \
        -d "{\"goods_id\":$2,\"count\":1}" "$1/api/deduct?mode=$3" 2>/dev/null || true
}

it__zk_exact() {
    local codes ok
    it__reset $IT_ZK_GOODS 100 || return 1
    codes=$(seq 160 | xargs -P 64 -I{} curl -sS -m 30 -o /dev/null -w '%{http_code}\n' \
        -X POST -H 'Content-Type: application/json' -d "{\"goods_id\":$IT_ZK_GOODS,\"count\":1}" \
        "http://127.0.0.1:$HTTP_PORT/api/deduct?mode=zookeeper")
    ok=$(grep -c '^200$' <<<"$codes" || true)
    echo "    200s: $ok; stock $(it__stock_field $IT_ZK_GOODS stock); sold $(it__stock_field $IT_ZK_GOODS sold)" >&2
    [ "$ok" = 100 ] && [ "$(it__stock_field $IT_ZK_GOODS stock)" = 0 ] && [ "$(it__stock_field $IT_ZK_GOODS sold)" = 100 ]
}

# The slow replica (URL, svc-N) holds the lock for BUSINESS_DELAY_MS (1500 ms) with a session
# timeout of LOCK_LEASE_MS (600 ms, which the server raises to its minimum, 1 s). A slow
# holder alone keeps its session (the client library pings on its own thread), so the
# replica is frozen whole, as a GC pause or a stopped VM freezes it, for 2.5 s: ZooKeeper
# expires the session and deletes the node; thawed, the holder must see it lost.
it__zk_paused_replica() {
    local url=$1 n=$2 out pid svc
    it__reset $IT_ZK_GOODS 10 || return 1
    # The first zookeeper request of this replica opens its session: one sale before.
    grep -q ' 200$' <<<"$(it__deduct_mode "$url" $IT_ZK_GOODS zookeeper)" || return 1
    svc=$(cat "$RUN_DIR/replicas/svc-$n.pid") || return 1
    out=$(mktemp)
    it__deduct_mode "$url" $IT_ZK_GOODS zookeeper >"$out" &
    pid=$!
    sleep 0.5
    kill -STOP "$svc"
    sleep 2.5
    kill -CONT "$svc"
    wait "$pid" || true
    echo "    answer: $(cat "$out")" >&2
    grep -q '"lock_lost".* 503$' "$out" && [ "$(it__stock_field $IT_ZK_GOODS stock)" = 9 ] &&
        [ "$(it__stock_field $IT_ZK_GOODS sold)" = 1 ]
    local rc=$?
    rm -f "$out"
    return $rc
}

it__zk_down() {
    local answer i
    it__reset $IT_ZK_GOODS 10 || return 1
    scripts/stack.sh zookeeper-stop >/dev/null 2>&1 || return 1
    answer=$(it__deduct_mode "http://127.0.0.1:$HTTP_PORT" $IT_ZK_GOODS zookeeper)
    echo "    zookeeper down: $answer" >&2
    scripts/stack.sh zookeeper-start >/dev/null 2>&1 || return 1
    grep -q '"unavailable".* 503$' <<<"$answer" || return 1
    # Back: each replica's client reconnects on its own (measured well under a second on an
    # idle machine); a request meanwhile waits at most ZOOKEEPER_TIMEOUT_MS for it.
    for i in 1 2 3 4 5; do
        answer=$(it__deduct_mode "http://127.0.0.1:$HTTP_PORT" $IT_ZK_GOODS zookeeper)
        grep -q ' 200$' <<<"$answer" && break
        sleep 1
    done
    echo "    zookeeper back: $answer" >&2
    grep -q ' 200$' <<<"$answer" && [ "$(it__stock_field $IT_ZK_GOODS stock)" = 9 ]
}

# it__program_has_case BIN PATTERN [SKIP]: true when one of BIN's cases (BIN --list) matches
# PATTERN and none of SKIP's comma-separated patterns (cmocka's '*' and '?', which mean the
# same in the shell's [[ == ]]; tests/stack/env.c reads STACK_SKIP_CASES the same way).
it__program_has_case() {
    local case_name skip
    local -a skips=()
    [ -z "${3:-}" ] || IFS=, read -r -a skips <<<"$3"
    while read -r case_name; do
        # shellcheck disable=SC2053 # the patterns are meant as ones
        [[ $case_name == $2 ]] || continue
        for skip in "${skips[@]}"; do
            [[ $case_name == $skip ]] && continue 2
        done
        return 0
    done < <("$1" --list)
    return 1
}

# it__lock_services SLOW_URL UP_LOG: the etcd and ZooKeeper modes on the stack's own etcd and
# ZooKeeper (run_integration's, which sets all_replicas, IT_NO_ETCD_REPLICA, sx and the rest).
it__lock_services() {
    local slow_url=$1 up_log=$2
    # A replica told no ETCD_ENDPOINT, beside the others, for the case that it offers no etcd.
    local no_etcd_port no_etcd_url=""
    no_etcd_port=$(pick_free_ports 1)
    if ETCD_ENDPOINT="" scripts/stack.sh replica-start-extra "$IT_NO_ETCD_REPLICA" \
        "$no_etcd_port" 2>&1 | tee -a "$up_log"; then
        no_etcd_url=http://127.0.0.1:$no_etcd_port
        all_replicas+=" $IT_NO_ETCD_REPLICA"
    else
        suite_broken "no-etcd-replica$sx" "scripts/stack.sh replica-start-extra failed (see $up_log)"
    fi

    check_group_begin "etcd$sx"
    check "etcd mode: 64 connections over $REPLICAS replicas sell exactly the stock" it__etcd_exact
    check "etcd and redis modes sell one goods in turn (tokens compared per source)" \
        it__etcd_and_redis_on_one_goods
    if [ -n "$no_etcd_url" ]; then
        check "a replica without ETCD_ENDPOINT neither lists nor serves etcd (400 unknown_mode)" \
            it__etcd_offered_only_with_endpoint "$no_etcd_url"
    fi
    check "MODE=etcd without ETCD_ENDPOINT stops the start-up (exit 2)" it__etcd_mode_refused_at_start
    if [ -n "$slow_url" ]; then
        check "etcd mode: a holder whose lease is revoked answers 503 lock_lost, sells nothing" \
            it__etcd_lease_lost "$slow_url"
    fi
    check "etcd mode: etcd down gives 503 unavailable, and back, deductions resume" it__etcd_down
    check_group_end

    check_group_begin "zookeeper$sx"
    check "zookeeper mode: 64 connections over $REPLICAS replicas sell exactly the stock" it__zk_exact
    if [ -n "$slow_url" ]; then
        check "zookeeper mode: a holder frozen past its session answers 503 lock_lost, sells nothing" \
            it__zk_paused_replica "$slow_url" "$IT_SLOW_REPLICA"
    fi
    check "zookeeper mode: ZooKeeper down gives 503 unavailable, and back, deductions resume" \
        it__zk_down
    check_group_end
}

run_integration() {
    # shellcheck source=tests/live_page.sh
    source tests/live_page.sh
    local build=$1 n urls="" up_log sx pattern=${3:-} skip=${4:-} client=${5:-$1}
    IT_SUFFIX=${2:-}
    sx=$IT_SUFFIX
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    case $client in /*) ;; *) client=$PWD/$client ;; esac
    if [ ! -x "$build/stockd" ] || [ ! -x "$client/tests/stack/test_contract" ]; then
        suite_broken "integration$sx" "$build/stockd or $client/tests/stack/test_contract missing (make B=... programs tests)"
        return 0
    fi

    # A run directory and ports of our own, beside any stack already running. The run dir
    # must be searchable by the postgres user (mktemp makes it 0700).
    RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/stock-it.XXXXXX")
    chmod 755 "$RUN_DIR"
    harness_on_exit it__cleanup
    local -a ports
    mapfile -t ports < <(pick_free_ports 6)
    HTTP_PORT=${ports[0]} PG_PORT=${ports[1]} REDIS_PORT=${ports[2]}
    # The etcd and ZooKeeper modes' servers, unless IT_LOCK_SERVICES=0 (the ThreadSanitizer
    # pass: their clients' threads are raced by test_etcd-tsan and test_zookeeper-tsan).
    local services=${IT_LOCK_SERVICES:-1}
    ETCD_PORT=${ports[3]} ETCD_PEER_PORT=${ports[4]} WITH_ETCD=$services
    ZK_PORT=${ports[5]} WITH_ZOOKEEPER=$services
    REPLICA_PORT_BASE=$(pick_port_block $IT_REPLICAS)
    REDLOCK_SERVERS=5 # the redlock mode's servers, so the stack runs as `make up` does
    REDLOCK_PORT_BASE=$(pick_port_block $REDLOCK_SERVERS)
    REPLICAS=$IT_REPLICAS
    STOCKD=$build/stockd
    ADMIN_TOKEN=it-$RANDOM$RANDOM$RANDOM
    LOCK_WAIT_MS=$IT_LOCK_WAIT_MS
    DB_REPLY_TIMEOUT_MS=$IT_DB_REPLY_TIMEOUT_MS
    MODE=redis
    export RUN_DIR HTTP_PORT PG_PORT REDIS_PORT REPLICA_PORT_BASE REPLICAS STOCKD ADMIN_TOKEN \
        LOCK_WAIT_MS DB_REPLY_TIMEOUT_MS MODE REDLOCK_SERVERS REDLOCK_PORT_BASE ETCD_PORT \
        ETCD_PEER_PORT WITH_ETCD ZK_PORT WITH_ZOOKEEPER
    unset BUSINESS_DELAY_MS LOCK_LEASE_MS LOCK_FIXED_LEASE_MS FAULTS WORKER_THREADS MAX_CONNECTIONS DB_POOL_SIZE \
        REDIS_POOL_SIZE DB_WAIT_MS REDIS_TIMEOUT_MS CONNECTION_TIMEOUT_S DATABASE_URL \
        REDLOCK_TIMEOUT_MS ETCD_ENDPOINT ETCD_TIMEOUT_MS ZOOKEEPER_HOSTS ZOOKEEPER_TIMEOUT_MS
    for ((n = 0; n < REPLICAS; n++)); do
        urls+="${urls:+,}http://127.0.0.1:$((REPLICA_PORT_BASE + n))"
    done
    echo
    echo "== integration stack: RUN_DIR=$RUN_DIR nginx :$HTTP_PORT, replicas :$REPLICA_PORT_BASE.., postgres :$PG_PORT, redis :$REDIS_PORT"

    check_group_begin "nginx-config$sx"
    check "nginx -t accepts the generated configuration" scripts/stack.sh nginx-test
    check_group_end

    up_log=$HARNESS_LOG_DIR/integration$sx-up.log
    if ! scripts/stack.sh up 2>&1 | tee "$up_log"; then
        suite_broken "stack$sx" "scripts/stack.sh up failed (see $up_log)"
        return 0
    fi

    # The slow replica, beside the others. Should it not start, its cases fail (the suite is
    # told no SLOW_REPLICA_URL) and this says why. It is also the replica without
    # REDLOCK_NODES (REDLOCK_SERVERS=0 gives it none), for the redlock-mode checks.
    local slow_port slow_url="" all_replicas
    slow_port=$(pick_free_ports 1)
    if BUSINESS_DELAY_MS=$IT_SLOW_DELAY_MS LOCK_LEASE_MS=$IT_SLOW_LEASE_MS REDLOCK_SERVERS=0 \
        scripts/stack.sh replica-start-extra "$IT_SLOW_REPLICA" "$slow_port" 2>&1 | tee -a "$up_log"; then
        slow_url=http://127.0.0.1:$slow_port
    else
        suite_broken "slow-replica$sx" "scripts/stack.sh replica-start-extra failed (see $up_log)"
    fi
    all_replicas=$(seq 1 "$REPLICAS")
    [ -z "$slow_url" ] || all_replicas+=" $IT_SLOW_REPLICA"

    local dn dport delayed_urls="" delayed_ok=1
    for dn in $IT_DELAYED_REPLICAS; do
        dport=$(pick_free_ports 1)
        if BUSINESS_DELAY_MS=$IT_DELAYED_DELAY_MS LOCK_WAITER_LIVENESS_MS=$IT_DELAYED_LIVENESS_MS \
            scripts/stack.sh replica-start-extra "$dn" "$dport" 2>&1 | tee -a "$up_log"; then
            delayed_urls+="${delayed_urls:+,}http://127.0.0.1:$dport"
            all_replicas+=" $dn"
        else
            delayed_ok=0
        fi
    done
    if [ $delayed_ok = 0 ]; then
        suite_broken "delayed-replicas$sx" "scripts/stack.sh replica-start-extra failed (see $up_log)"
        delayed_urls=""
    fi

    local fault_port fault_url=""
    fault_port=$(pick_free_ports 1)
    if FAULTS=on scripts/stack.sh replica-start-extra "$IT_FAULT_REPLICA" "$fault_port" 2>&1 |
        tee -a "$up_log"; then
        fault_url=http://127.0.0.1:$fault_port
        all_replicas+=" $IT_FAULT_REPLICA"
    else
        suite_broken "fault-replica$sx" "scripts/stack.sh replica-start-extra failed (see $up_log)"
    fi

    local prog name limit bin
    for prog in $IT_STACK_PROGRAMS; do
        name=${prog%%:*} limit=${prog##*:} bin=$client/tests/stack/test_${prog%%:*}
        if [ ! -x "$bin" ]; then
            suite_broken "stack-$name$sx" "$bin missing (make B=$build ... tests)"
            continue
        fi
        if [ -n "$STACK_PROGRAMS" ] && [[ " $STACK_PROGRAMS " != *" $name "* ]]; then
            continue
        fi
        # With a pattern, only the programs with a case it matches (cmocka's '*' and '?' are
        # the shell's): one that runs no case would count as a failure.
        if ! it__program_has_case "$bin" "${pattern:-*}" "$skip"; then
            continue
        fi
        STOCK_URL=http://127.0.0.1:$HTTP_PORT REPLICA_URLS=$urls SLOW_REPLICA_URL=$slow_url \
            SLOW_REPLICA_LOG=$RUN_DIR/logs/svc-$IT_SLOW_REPLICA.log \
            SLOW_REPLICA_DELAY_MS=$IT_SLOW_DELAY_MS SLOW_REPLICA_LEASE_MS=$IT_SLOW_LEASE_MS \
            DELAYED_REPLICA_URLS=$delayed_urls DELAYED_REPLICA_DELAY_MS=$IT_DELAYED_DELAY_MS \
            FAULT_REPLICA_URL=$fault_url STACK_SKIP_CASES=$skip \
            STACK_HISTORY_DIR=$HARNESS_LOG_DIR/histories$sx \
            run_suite "stack-$name$sx${pattern:+:$pattern}" "$limit" "$bin" ${pattern:+"$pattern"}
    done

    check_group_begin "redlock-mode$sx"
    check "svc-1, started with REDLOCK_NODES, lists redlock and sells with it" \
        it__redlock "http://127.0.0.1:$REPLICA_PORT_BASE" served
    if [ -n "$slow_url" ]; then
        check "svc-$IT_SLOW_REPLICA, without REDLOCK_NODES, neither lists nor serves redlock (400)" \
            it__redlock "$slow_url" unserved
    fi
    check_group_end

    # The live page in a real browser, once (not again in the ThreadSanitizer pass).
    if [ -z "$sx" ]; then
        check_group_begin "live-page"
        check "the live page in headless Chromium: a replica holds the lock, the books match the API" \
            it__live_page
        check_group_end
    fi

    if [ "$services" = 1 ]; then
        it__lock_services "$slow_url" "$up_log"
    fi

    check_group_begin "nginx-errors+shutdown$sx"
    check "nginx refuses a 20 KiB body with its JSON 413" it__413
    # shellcheck disable=SC2086 # replica numbers
    check "every replica stops on SIGTERM with status 0" \
        scripts/stack.sh replica-stop $all_replicas
    check "with no replica up, nginx answers its JSON 502" it__502
    check "scripts/stack.sh down stops the rest" scripts/stack.sh down
    for n in $all_replicas; do
        check "svc-$n exited with status 0" it__exit_zero "$n"
        check "svc-$n log holds no sanitizer report" it__no_sanitizer_report "$RUN_DIR/logs/svc-$n.log"
    done
    check "the migrate log holds no sanitizer report" it__no_sanitizer_report "$RUN_DIR/logs/migrate.log"
    check_group_end
}

# Run on its own: set up the harness, run, summarise.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    [ $# -eq 1 ] || { echo "usage: tests/integration.sh BUILD_DIR" >&2; exit 2; }
    cd "$(dirname "${BASH_SOURCE[0]}")/.."
    LOG_PREFIX=integration
    source scripts/lib/common.sh
    source scripts/lib/ports.sh
    source tests/lib/harness.sh
    HARNESS_LOG_DIR=${HARNESS_LOG_DIR:-$1/test-logs}
    rm -rf "$HARNESS_LOG_DIR"
    harness_init
    run_integration "$1"
    harness_summary
fi
