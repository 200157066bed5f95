# ports.sh - is a loopback port taken, and free ports for throwaway servers (sourced, bash).
# shellcheck shell=bash
#
# Port 2024 belongs to something else on the project's machines and is never chosen nor
# probed. Free ports are drawn from 20000-32767: below Linux's ephemeral range (32768-60999),
# so an outgoing connection cannot take one between our check and the server's bind.

# True when something accepts TCP connections on 127.0.0.1:PORT.
port_listening() {
    local port=$1
    [ "$port" != 2024 ] || return 0
    # bash's /dev/tcp connects; on loopback a closed port refuses at once.
    timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" 2>/dev/null
}

# True when no socket at all (listening or connected) uses local PORT.
port_unused() {
    local port=$1
    [ "$port" != 2024 ] || return 1
    if command -v ss >/dev/null; then
        [ -z "$(ss -Htan "( sport = :$port )" 2>/dev/null)" ]
    else
        ! port_listening "$port"
    fi
}

# Describes what sits on local PORT, one line per socket (at most 10, then a count), from
# ss: the state, the addresses and the process. ss names the process to root only; sockets
# of a connection that is closing (TIME-WAIT, FIN-WAIT-2...) belong to no process any more.
# Prints nothing when ss is missing or sees no socket there.
port_owner() {
    local port=$1
    command -v ss >/dev/null || return 0
    ss -Htanp "( sport = :$port )" 2>/dev/null |
        awk '{
            who = "process unknown (ss names it to root only)"
            if ($1 ~ /^(TIME-WAIT|FIN-WAIT-1|FIN-WAIT-2|CLOSING|LAST-ACK)$/)
                who = "a connection closing, held by no process"
            if (match($0, /users:\(\("[^"]*",pid=[0-9]+/)) {
                u = substr($0, RSTART + 9, RLENGTH - 9)
                split(u, f, "\",pid=")
                who = f[1] " (pid " f[2] ")"
            }
            n++
            if (n > 10) next
            if ($1 == "LISTEN") print "    LISTEN " $4 ", " who
            else print "    " $1 " " $4 " -> " $5 ", " who
        }
        END { if (n > 10) print "    ... and " n - 10 " more" }'
}

# Dies with a clear line when PORT is taken: NAME says what wanted it, VAR how to move it.
# Taken means: something listens there, or a live connection's local end sits on it (an
# outgoing connection the kernel gave that port to), which makes a bind fail. Connections
# that are closing do not count: those a server of ours left on its own port when it last
# stopped (TIME-WAIT, FIN-WAIT-2) do not block its next bind (SO_REUSEADDR). Should one of
# another kind block it, the start fails, and port_explain, called on that path, says so.
require_port_free() {
    local port=$1 name=$2 var=$3 who
    [ "$port" != 2024 ] || die "$name: port 2024 is reserved; set $var to another port"
    who=$(port_owner "$port" | grep -E '^    (LISTEN|ESTAB|SYN-SENT|SYN-RECV|CLOSE-WAIT) ' || true)
    if [ -n "$who" ] || port_listening "$port"; then
        log "$name: port $port is taken:"
        echo "${who:-    (something accepts connections there; ss, from iproute2, would say what)}" >&2
        die "$name: port $port is already in use; stop what holds it, or set $var to another port"
    fi
}

# After a server failed to start on PORT: says what sits on that port, if anything, for the
# case where the port was taken after require_port_free looked, or by a closing connection
# it let by.
port_explain() {
    local port=$1 who
    who=$(port_owner "$port")
    [ -z "$who" ] || { log "port $port, which it wanted, is held by:"; echo "$who" >&2; }
}

# The ports handed out so far, when PICKED_PORTS_FILE names a file (the test harness sets it,
# in its log directory): a picked port is free when picked, but nothing listens on it until
# its server starts, so a later pick could hand it out again (a database port inside a block
# of replica ports picked next, say). A file, not a variable: picks run in subshells.
ports__picked() {
    [ -n "${PICKED_PORTS_FILE:-}" ] && [ -f "$PICKED_PORTS_FILE" ] && grep -qx "$1" "$PICKED_PORTS_FILE"
}

ports__remember() {
    [ -z "${PICKED_PORTS_FILE:-}" ] || echo "$1" >>"$PICKED_PORTS_FILE"
}

# Prints COUNT distinct unused ports, one per line, none handed out before by this shell.
pick_free_ports() {
    local count=$1 port tries=0
    local -A chosen=()
    while [ ${#chosen[@]} -lt "$count" ]; do
        ((tries++ < 500)) || die "no free port found in 20000-32767"
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 12768))
        [ -z "${chosen[$port]:-}" ] || continue
        port_unused "$port" || continue
        ports__picked "$port" && continue
        chosen[$port]=1
        ports__remember "$port"
        echo "$port"
    done
}

# Prints the first of COUNT consecutive unused ports (the replicas listen on BASE..BASE+N-1),
# none handed out before by this shell.
pick_port_block() {
    local count=$1 base i tries=0 ok
    while ((tries++ < 500)); do
        base=$((20000 + (RANDOM * 32768 + RANDOM) % (12768 - count)))
        ok=1
        for ((i = 0; i < count; i++)); do
            port_unused $((base + i)) && ! ports__picked $((base + i)) || { ok=0; break; }
        done
        if [ $ok -eq 1 ]; then
            for ((i = 0; i < count; i++)); do ports__remember $((base + i)); done
            echo "$base"
            return 0
        fi
    done
    die "no $count consecutive free ports found in 20000-32767"
}
