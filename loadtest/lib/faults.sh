# faults.sh - the faults a load tool injects into a stack of its own while its load runs,
# and the books it reads after (sourced, bash): loadtest/chaos injects one per row,
# loadtest/soak many, at random moments. One copy of each fault, so that a soak's
# "replica-kill" is the chaos row's.
# shellcheck shell=bash
# shellcheck disable=SC2034,SC2153 # SOLD, OVERSOLD, BOOKS_OK and FAULT_MS are for the caller;
# BOOKS_T0 and BOOKS_T1 come from books.sh
#
# The caller sources loadtest/lib/stack.sh, books.sh, audit.sh, history.sh and
# scripts/lib/sentinel.sh, exports the stack's variables (RUN_DIR, HTTP_PORT,
# REPLICA_PORT_BASE, REDIS_PORT, REDIS_REPLICA_PORT, SENTINEL_PORT_BASE, ...) and sets ROOT
# (the project), OUT (its output folder), STACK_LOG (the log of its stack.sh commands),
# ROW_DIR (where the current load's history goes), RUN_ID and a function `say` (a line on
# stderr). The faults, by name (inject):
#   replica-kill, replica-stop, redis-restart, pg-restart, pg-freeze, failover,
#   redis-lost-reply, batch-pg-stuck, sentinel-silent, etcd-lost-reply: loadtest/chaos's
#       header says what each does;
#   redis-cut-reply, redis-cut-leave: with an extra replica behind the cut relay below
#       (loadtest/chaos), the lock taken by it and the reply that said so cut (cut_taken);
#       with one of the load's replicas behind it (loadtest/soak), for 1 s every reply to that
#       replica's acquire.lua (cut-reply) or leave.lua (cut-leave) is lost on the way back:
#       the command ran in Redis, the reply is discarded and its connection closed;
#   redis-late-reply: the same for 1 s, each acquire.lua reply held 1.5 s, past the replica's
#       REDIS_TIMEOUT_MS;
#   replica-sigkill, replica-sigstop: svc-2 killed (-9) at no chosen point and started again
#       1 s later, or stopped (SIGSTOP) for LOCK_LEASE_MS + 1 s, past its lease, and resumed;
#   etcd-stop, zookeeper-stop: the server stopped, started again 1 s later.

FAULT_RELAY=${FAULT_RELAY:-$ROOT/build/fault-relay}
FAULT_SEQ=0 # fault_request's count: each of its requests has a key and a process of its own

# books GOODS: waits until the books stop changing (two reads 500 ms apart agree), sets SOLD
# and OVERSOLD from the last read, which, timed on the history's clock, is the read of the
# settled stock that closes the row's history; then audits the ledger (stock_audit,
# BOOKS_OK=0 when the counters and the orders disagree).
books() {
    books_settle 0.5 60 "http://127.0.0.1:$HTTP_PORT" "$1" || true
    books_num "$BOOKS" sold
    SOLD=$REPLY
    books_num "$BOOKS" oversold
    OVERSOLD=$REPLY
    books_num "$BOOKS" stock
    history_read "$ROW_DIR/events.jsonl" 0 "$1" "$REPLY" "$BOOKS_T0" "$BOOKS_T1"
    BOOKS_OK=1
    stock_audit "http://127.0.0.1:$HTTP_PORT" "$1" || BOOKS_OK=0
}

# fault_request MODE GOODS FAULT: one deduction straight to svc-2 (svc-FAULT_REPLICA when
# set) with an X-Fault header (none when FAULT is empty);
# returns when it is answered, or when its process has gone. It is part of the row's history
# (process 100, 101, ... of $ROW_DIR/fault.jsonl, one per request: a request cut by a crash
# has an unknown outcome, and its process makes no other; its invocation written first, so
# that it is there even if the row is judged before the answer comes).
fault_request() {
    local key=$RUN_ID-$2-fault proc=$((100 + FAULT_SEQ)) status t1 xf=()
    [ -z "$3" ] || xf=(-H "X-Fault: $3")
    [ "$FAULT_SEQ" = 0 ] || key+=$FAULT_SEQ
    FAULT_SEQ=$((FAULT_SEQ + 1))
    history_invoke "$ROW_DIR/fault.jsonl" "$proc" "$2" 1 "$key" "$(history_now)"
    status=$(curl -s -m 20 -o "$ROW_DIR/fault.body" -w '%{http_code}' -X POST \
        -H 'Content-Type: application/json' "${xf[@]}" -H "Idempotency-Key: $key" \
        -d "{\"goods_id\":$2,\"count\":1,\"mode\":\"$1\"}" \
        "http://127.0.0.1:$((REPLICA_PORT_BASE + ${FAULT_REPLICA:-2} - 1))/api/deduct" || true)
    t1=$(history_now)
    history_answer "$ROW_DIR/fault.jsonl" "$proc" "$2" "$key" "$t1" "${status:-000}" \
        "$(cat "$ROW_DIR/fault.body" 2>/dev/null || true)"
}
# inject FAULT MODE GOODS: runs the fault from now; sets FAULT_MS (how long the fault itself
# lasted, in ms: for replica-kill, until the process was gone, its restart not included).
inject() {
    local start end
    start=$(date +%s%N)
    case $1 in
    replica-kill | replica-sigkill)
        if [ "$1" = replica-kill ]; then
            fault_request "$2" "$3" crash-in-section
        else
            kill -KILL "$(cat "$RUN_DIR/replicas/svc-2.pid")"
        fi
        end=$(date +%s%N)
        sleep 1
        replica_restart 2
        FAULT_MS=$(((end - start) / 1000000))
        return
        ;;
    replica-stop)
        fault_request "$2" "$3" stop-before-commit=3000
        ;;
    redis-restart)
        stack_run "$STACK_LOG" redis-stop
        stack_run "$STACK_LOG" redis-start
        ;;
    pg-restart)
        stack_run "$STACK_LOG" pg-stop
        stack_run "$STACK_LOG" pg-start
        ;;
    pg-freeze)
        stack_run "$STACK_LOG" pg-freeze
        sleep 8
        stack_run "$STACK_LOG" pg-thaw
        ;;
    redis-lost-reply)
        redis-cli -p "$REDIS_PORT" CLIENT PAUSE 1500 ALL
        sleep 1.5
        ;;
    batch-pg-stuck)
        inject pg-freeze "$2" "$3"
        return
        ;;
    sentinel-silent)
        sentinel_silent
        ;;
    etcd-lost-reply)
        local relay
        read -r relay <"$OUT/raw/relay.pid"
        kill -STOP -- "-$relay"
        sleep 1.5
        kill -CONT -- "-$relay"
        ;;
    failover)
        failover_lost_grant "$2" "$3"
        end=$(date +%s%N)
        # The operator's part: the killed master back, as a replica of the new one (the
        # Sentinels reconfigure it), so that LOCK_SYNC_REPLICAS=1 has a replica again.
        stack_run "$STACK_LOG" redis-start
        # With LOCK_SYNC_REPLICAS=N the lock grants nothing until N replicas acknowledge:
        # the fault lasts until the new master has them again, in sync (at most 30 s).
        if [ "${LOCK_SYNC_REPLICAS:-0}" -gt 0 ]; then
            replicas_online "$REDIS_REPLICA_PORT" "$LOCK_SYNC_REPLICAS" 30 ||
                say "chaos: the new master had no $LOCK_SYNC_REPLICAS replica in sync within 30 s"
            end=$(date +%s%N)
        fi
        FAULT_MS=$(((end - start) / 1000000))
        return
        ;;
    replica-sigstop)
        local pid
        pid=$(cat "$RUN_DIR/replicas/svc-2.pid")
        kill -STOP "$pid"
        sleep "$(((LOCK_LEASE_MS + 1000) / 1000))"
        kill -CONT "$pid"
        ;;
    redis-cut-reply | redis-cut-leave)
        if [ "${CUT_REPLICA:-0}" -gt "$REPLICAS" ]; then
            cut_taken "$@"
        else
            inject "$1-window" "$2" "$3"
            return
        fi
        ;;
    redis-cut-reply-window | redis-cut-leave-window | redis-late-reply)
        local sha=$CUT_ACQUIRE_SHA how=cut-reply
        [ "$1" != redis-cut-leave-window ] || sha=$CUT_LEAVE_SHA
        [ "$1" != redis-late-reply ] || how="delay 1500"
        scripts_load
        cut_relay "$how match=$sha"
        sleep 1
        cut_relay pass
        ;;
    etcd-stop | zookeeper-stop)
        stack_run "$STACK_LOG" "$1"
        sleep 1
        stack_run "$STACK_LOG" "${1%-stop}-start"
        ;;
    *)
        say "chaos: unknown fault '$1'"
        exit 2
        ;;
    esac
    end=$(date +%s%N)
    FAULT_MS=$(((end - start) / 1000000))
}

# cut_taken FAULT MODE GOODS: the lock taken by a request of the extra replica behind the cut
# relay (which is sent nothing else), and the reply that said so cut. nginx is held
# (SIGSTOP) meanwhile, until the lock is free and nobody waits (at most 3 s), so that the
# requests meet as planned:
#   redis-cut-reply  the extra replica's request finds the lock free and takes it; the reply
#                    of that acquire.lua is cut;
#   redis-cut-leave  a request to svc-1 holds the lock in its section for 350 ms
#                    (X-Fault: pause-in-section); 150 ms in, the extra replica's request
#                    (whose wait, LOCK_WAIT_MS, is 300 ms: loadtest/chaos) waits in line
#                    behind it, every reply to its acquire.lua held 400 ms: the release
#                    grants it the lock while that reply is on its way, the reply says
#                    "wait" and the wait is over, so leave.lua runs and finds the late grant;
#                    leave.lua's reply is cut.
# Then nginx resumes. Says on stderr how many replies were cut and the lock's PTTL after (a
# hold left with the extra replica's lease shows above the stack's LOCK_LEASE_MS).
cut_taken() {
    local lock=lock:goods:$3 holder taker pttl
    scripts_load
    nginx_signal STOP
    lock_quiet "$lock" 3 || say "  $1 / $2: the lock was not free within 3 s"
    if [ "$1" = redis-cut-reply ]; then
        cut_relay "cut-reply match=$CUT_ACQUIRE_SHA count=1"
        FAULT_REPLICA=$CUT_REPLICA fault_request "$2" "$3" ''
    else
        FAULT_REPLICA=1 fault_request "$2" "$3" pause-in-section=350 &
        holder=$!
        FAULT_SEQ=$((FAULT_SEQ + 1)) # the background request took the number before
        sleep 0.15
        cut_relay "delay 400 match=$CUT_ACQUIRE_SHA"
        FAULT_REPLICA=$CUT_REPLICA fault_request "$2" "$3" '' &
        taker=$!
        FAULT_SEQ=$((FAULT_SEQ + 1))
        sleep 0.25
        cut_relay "cut-reply match=$CUT_LEAVE_SHA count=1"
        wait "$taker" "$holder" || true
    fi
    cut_relay pass
    pttl=$(redis-cli -p "$REDIS_PORT" PTTL "$lock" 2>/dev/null || echo '?')
    cut_relay triggered || true
    nginx_signal CONT
    say "  $1 / $2: $REPLY replies of the relay faulted; the lock's PTTL after: $pttl ms"
}

# scripts_load: acquire.lua and leave.lua loaded into Redis (SCRIPT LOAD, the file's exact
# bytes: the SHA-1 EVALSHA sends), so that a cut meets the script's own reply: a script that
# nobody has run since Redis started is answered NOSCRIPT first, and cutting that answer
# loses a command that never ran.
scripts_load() {
    redis-cli -p "$REDIS_PORT" -x SCRIPT LOAD <"$ROOT/lock/acquire.lua" >/dev/null 2>&1 || true
    redis-cli -p "$REDIS_PORT" -x SCRIPT LOAD <"$ROOT/lock/leave.lua" >/dev/null 2>&1 || true
}

# nginx_signal SIG: SIG sent to the stack's nginx, its master and its workers, by PID.
nginx_signal() {
    local master
    read -r master <"$RUN_DIR/nginx/logs/nginx.pid" || return 1
    kill "-$1" "$master" $(pgrep -P "$master") 2>/dev/null || true
}

# lock_quiet LOCK SECONDS: waits until LOCK is free and its line empty; 1 after SECONDS.
lock_quiet() {
    local i
    for ((i = 0; i < $2 * 20; i++)); do
        [ "$(redis-cli -p "$REDIS_PORT" EVAL "return redis.call('EXISTS', KEYS[1]) + redis.call('ZCARD', KEYS[2])" 2 "$1" "$1:waiters" 2>/dev/null)" = 0 ] && return 0
        sleep 0.05
    done
    return 1
}

# replicas_online PORT N SECONDS: waits until the Redis on PORT counts N replicas whose link
# is up and in sync (ha_online_replicas); 1 after SECONDS.
replicas_online() {
    local i
    for ((i = 0; i < $3 * 10; i++)); do
        [ "$(ha_online_replicas "$1" | wc -l)" -ge "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

# failover_lost_grant MODE GOODS: the forced lost grant (see the header); returns once a
# Sentinel names the promoted replica as the master.
failover_lost_grant() {
    local replica master i addr
    replica=$(cat "$RUN_DIR/redis-replica/pid")
    master=$(cat "$RUN_DIR/redis/redis.pid")
    kill -STOP "$replica"
    redis-cli -p "$REDIS_PORT" CLIENT KILL TYPE replica >/dev/null
    (fault_request "$1" "$2" pause-before-commit=6000 &)
    FAULT_SEQ=$((FAULT_SEQ + 1)) # the background request took the number before
    sleep 0.3
    kill -KILL "$master"
    kill -CONT "$replica"
    for ((i = 0; i < 150; i++)); do
        addr=$(redis-cli -p "$SENTINEL_PORT_BASE" SENTINEL get-master-addr-by-name stock 2>/dev/null | tail -1)
        [ "$addr" = "$REDIS_REPLICA_PORT" ] && return 0
        sleep 0.1
    done
    say "chaos: no failover within 15 s"
}

# sentinel_silent: the watched Sentinel stopped, the master killed; returns once another
# Sentinel names the promoted replica. The stopped one resumes 8 s later (in the background),
# or when the row's load has ended, whichever comes first (SILENT_PID: run_row resumes it
# then, so that the stack can stop).
sentinel_silent() {
    local watched master i addr
    watched=$(redis-cli -p "$SENTINEL_PORT_BASE" INFO server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
    master=$(cat "$RUN_DIR/redis/redis.pid")
    kill -STOP "$watched"
    kill -KILL "$master"
    for ((i = 0; i < 150; i++)); do
        addr=$(redis-cli -p "$((SENTINEL_PORT_BASE + 1))" SENTINEL get-master-addr-by-name stock 2>/dev/null | tail -1)
        [ "$addr" = "$REDIS_REPLICA_PORT" ] && break
        sleep 0.1
    done
    [ "$addr" = "$REDIS_REPLICA_PORT" ] || say "chaos: no failover within 15 s"
    SILENT_PID=$watched
    (
        sleep 8
        kill -CONT "$watched"
    ) &
}

# The longest a fault lasts, so that the load covers it and AFTER_MS more.
fault_span_ms() {
    case $1 in
    failover | sentinel-silent) echo 9000 ;;
    redis-lost-reply | etcd-lost-reply) echo 1500 ;;
    redis-cut-reply | redis-cut-leave) echo 6000 ;; # cut_taken: up to four requests
    redis-*-window | redis-late-reply | replica-sigkill) echo 1000 ;;
    batch-pg-stuck) echo 12000 ;; # the freeze takes a few seconds to begin under this load
    replica-kill) echo 2500 ;;
    replica-stop | replica-sigstop) echo 3500 ;;
    pg-freeze) echo 8500 ;;
    *) echo 4000 ;;
    esac
}

# The cut relay: build/fault-relay (tests/support/relay.h) between one replica (CUT_REPLICA)
# and Redis, on CUT_RELAY_PORT (REDIS_PORT + 60 unless set; its control port one above), so
# that a reply can be lost after its command ran. The scripts are matched by the SHA-1 that
# EVALSHA sends.
CUT_ACQUIRE_SHA=$(sha1sum "$ROOT/lock/acquire.lua" | cut -d' ' -f1)
CUT_LEAVE_SHA=$(sha1sum "$ROOT/lock/leave.lua" | cut -d' ' -f1)
CUT_REPLICA=''   # the replica behind the relay, while it runs
CUT_RELAY_ENV=() # its environment then (replica_restart)

cut_relay_port() { echo "${CUT_RELAY_PORT:-$((REDIS_PORT + 60))}"; }

# cut_relay_start N [VAR=VALUE...]: the relay started (to REDIS_PORT; its PID in
# $RUN_DIR/fault-relay.pid, its output in $RUN_DIR/fault-relay.log), and replica N started
# (again) to reach Redis through it, with VAR=VALUE added to its environment, and without
# the Sentinels: it keeps to the relay, which keeps to REDIS_PORT. N above REPLICAS is an
# extra replica (scripts/stack.sh replica-start-extra, on REPLICA_PORT_BASE+N-1), which
# nginx sends nothing: only requests sent to it straight. Returns 1 when either failed.
cut_relay_start() {
    local n=$1 port i
    shift
    port=$(cut_relay_port)
    [ -x "$FAULT_RELAY" ] || { say "faults: $FAULT_RELAY missing: make $FAULT_RELAY"; return 1; }
    "$FAULT_RELAY" "$port" "$REDIS_PORT" $((port + 1)) >>"$RUN_DIR/fault-relay.log" 2>&1 &
    echo $! >"$RUN_DIR/fault-relay.pid"
    for ((i = 0; i < 50; i++)); do
        cut_relay triggered 2>/dev/null && break
        sleep 0.1
    done
    CUT_REPLICA=$n
    CUT_RELAY_ENV=(HA=0 REDIS_SENTINELS= REDIS_PORT="$port" "$@")
    [ "$n" -gt "$REPLICAS" ] || stack_run "$STACK_LOG" replica-stop "$n" || true
    replica_restart "$n"
}

# cut_relay COMMAND: one command to the relay's control port (relay.h: pass, delay MS,
# swallow, cut-reply, cut-request, drop, each with match=TEXT and count=N; triggered); its
# answer in REPLY. Returns 1 unless the answer is "ok" (or a number, for triggered).
cut_relay() {
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$(($(cut_relay_port) + 1))" || return 1
    printf '%s\n' "$1" >&"$fd"
    REPLY=''
    read -r -t 5 REPLY <&"$fd" || true
    exec {fd}>&-
    [[ $REPLY == ok || $REPLY =~ ^[0-9]+$ ]] || { say "faults: the relay answered '$REPLY' to '$1'"; return 1; }
}

# cut_relay_stop: the replica behind the relay started again straight to Redis, as the
# stack started it (an extra one stopped), and the relay stopped. cut_relay_kill: the relay
# stopped, nothing else (a stack going down).
cut_relay_stop() {
    local n=$CUT_REPLICA
    [ -n "$n" ] || return 0
    stack_run "$STACK_LOG" replica-stop "$n" || true
    CUT_REPLICA='' CUT_RELAY_ENV=()
    [ "$n" -gt "$REPLICAS" ] || replica_restart "$n"
    cut_relay_kill
}
cut_relay_kill() {
    local pid
    [ -r "$RUN_DIR/fault-relay.pid" ] || return 0
    read -r pid <"$RUN_DIR/fault-relay.pid"
    kill -TERM "$pid" 2>/dev/null || true
    rm -f "$RUN_DIR/fault-relay.pid"
}

# replica_restart N: replica N started (again), through the cut relay when it is the one
# behind it (with CUT_RELAY_ENV).
replica_restart() {
    local cmd=(replica-start "$1")
    [ "$1" -le "$REPLICAS" ] || cmd=(replica-start-extra "$1" $((REPLICA_PORT_BASE + $1 - 1)))
    if [ "$1" = "$CUT_REPLICA" ]; then
        env "${CUT_RELAY_ENV[@]}" "$STACK_SH" "${cmd[@]}" >>"$STACK_LOG" 2>&1
    else
        stack_run "$STACK_LOG" "${cmd[@]}"
    fi
}
