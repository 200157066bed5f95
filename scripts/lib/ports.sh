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

# Dies with a clear line when PORT is taken: NAME says what wanted it, VAR how to move it.
require_port_free() {
    local port=$1 name=$2 var=$3
    [ "$port" != 2024 ] || die "$name: port 2024 is reserved; set $var to another port"
    if port_listening "$port"; then
        die "$name: port $port is already in use by another process; set $var to another port"
    fi
}

# Prints COUNT distinct unused ports, one per line.
pick_free_ports() {
    local count=$1 port tries=0
    local -A chosen=()
    while [ ${#chosen[@]} -lt "$count" ]; do
        ((tries++ < 500)) || die "no free port found in 20000-32767"
        port=$((20000 + (RANDOM * 32768 + RANDOM) % 12768))
        [ -z "${chosen[$port]:-}" ] || continue
        port_unused "$port" || continue
        chosen[$port]=1
        echo "$port"
    done
}

# Prints the first of COUNT consecutive unused ports (the replicas listen on BASE..BASE+N-1).
pick_port_block() {
    local count=$1 base i tries=0 ok
    while ((tries++ < 500)); do
        base=$((20000 + (RANDOM * 32768 + RANDOM) % (12768 - count)))
        ok=1
        for ((i = 0; i < count; i++)); do
            port_unused $((base + i)) || { ok=0; break; }
        done
        [ $ok -eq 1 ] && { echo "$base"; return 0; }
    done
    die "no $count consecutive free ports found in 20000-32767"
}
