# zookeeper.sh - a private standalone ZooKeeper under $ZK_DIR, for the zookeeper mode
# (sourced, bash; needs common.sh, config.sh). Started by `up` only with WITH_ZOOKEEPER=1, so
# a stack without the zookeeper mode needs no JVM; `down` stops it whenever it runs.
# shellcheck shell=bash
#
# Debian's zookeeperd would start it under systemd with the system's config; here the same
# server (ZooKeeperServerMain, from /usr/share/java/zookeeper.jar of libzookeeper-java) runs
# by hand: loopback only, client port ZK_PORT, its config and data under $ZK_DIR, no admin
# HTTP server (it would take port 8080). It is started in a session of its own (setsid),
# its PID recorded and stopped by that PID. Its data (the sessions and the lock nodes) is
# kept across restarts.
#
# Its tick is 500 ms, so it grants session timeouts from 1 s (2 ticks) to 60 s: LOCK_LEASE_MS
# is the replicas' session timeout, and must fall in that range to be granted as asked.

ZK_JAVA=${ZK_JAVA:-/usr/bin/java}
ZK_JAR=${ZK_JAR:-/usr/share/java/zookeeper.jar}

zookeeper__pattern() {
    echo "$ZK_DIR/zoo.cfg"
}

# Prints ZooKeeper's PID when it runs, else returns 1.
zookeeper_pid() {
    pidfile_alive "$ZK_DIR/zookeeper.pid" "$(zookeeper__pattern)"
}

# "ruok" answered "imok" (the config allows that one four-letter command).
zookeeper__healthy() {
    local answer=""
    answer=$(exec 2>/dev/null 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" && printf ruok >&3 &&
        timeout 1 head -c 4 <&3) || return 1
    [ "$answer" = imok ]
}

# Starts ZooKeeper unless it runs already; returns once it answers imok.
zookeeper_start() {
    local pid
    if pid=$(zookeeper_pid); then
        log "zookeeper already running (pid $pid, port $ZK_PORT)"
        return 0
    fi
    [ -x "$ZK_JAVA" ] && [ -r "$ZK_JAR" ] ||
        die "java or $ZK_JAR not found (scripts/deps.sh ensure zookeeper)"
    require_port_free "$ZK_PORT" zookeeper ZK_PORT
    mkdir -p "$ZK_DIR/data" "$LOG_DIR"
    cat >"$ZK_DIR/zoo.cfg" <<CFG
tickTime=500
dataDir=$ZK_DIR/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
minSessionTimeout=1000
maxSessionTimeout=60000
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,stat,cons
CFG
    setsid "$ZK_JAVA" -Xmx512m -XX:+UseSerialGC -cp "$ZK_JAR" \
        org.apache.zookeeper.server.ZooKeeperServerMain "$ZK_DIR/zoo.cfg" \
        </dev/null >>"$LOG_DIR/zookeeper.log" 2>&1 &
    echo $! >"$ZK_DIR/zookeeper.pid"
    if ! wait_until 60 zookeeper__healthy || ! pid=$(zookeeper_pid); then
        log_tail "$LOG_DIR/zookeeper.log"
        die "zookeeper did not answer imok on port $ZK_PORT"
    fi
    log "zookeeper started (pid $pid, 127.0.0.1:$ZK_PORT)"
}

# Stops ZooKeeper by its PID: SIGTERM is its clean shutdown.
zookeeper_stop() {
    stop_server zookeeper "$(zookeeper_pid)" "$(zookeeper__pattern)" TERM:10 KILL:5
}

zookeeper_status() {
    status_row zookeeper "$(zookeeper_pid)" "127.0.0.1:$ZK_PORT"
}
