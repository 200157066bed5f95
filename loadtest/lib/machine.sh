# machine.sh - the machine a figure was measured on, and how busy it was (sourced, bash).
# shellcheck shell=bash
#
# A throughput figure means little without the load the machine carried meanwhile (other
# work shares its cores): every report prints the 1-minute load average before its load and
# the machine's busy share of its cores while the load ran. These read both one way.

# machine_ticks: prints "BUSY TOTAL", the machine's CPU ticks since boot over every core
# (/proc/stat's first line, user .. steal; guest time is counted in user already): busy is
# every state but idle and iowait.
machine_ticks() {
    awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9 && i <= NF; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat
}

# machine_busy BEFORE AFTER: prints the busy share of the cores between two machine_ticks
# readings, as 0.00 .. 1.00 (0.00 when no tick passed).
machine_busy() {
    awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ")
        t = y[2] - x[2]; printf "%.2f", (t > 0 ? (y[1] - x[1]) / t : 0) }'
}

# machine_load1: prints the 1-minute load average (/proc/loadavg's first field).
machine_load1() {
    cut -d' ' -f1 /proc/loadavg
}

# machine_describe ROOT: prints the machine and the software of the stack, one "name: value"
# line each (date, host, cpu, memory, os, nginx, PostgreSQL, Redis, wrk, gnuplot, commit,
# load before the run), for a report's machine.txt. Reads WRK and GNUPLOT (the programs the
# tool runs; wrk and gnuplot by default).
machine_describe() {
    local root=$1 cpu pg nginx dirty=''
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)
    pg=$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)
    [ -x "$pg" ] || pg=''
    nginx=$(command -v nginx || echo /usr/sbin/nginx)
    git -C "$root" diff --quiet HEAD 2>/dev/null || dirty=' (with uncommitted changes)'
    echo "date:       $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host:       $(uname -srm)"
    echo "cpu:        ${cpu:-unknown}, $(nproc) cores online"
    echo "memory:     $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "os:         $(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null)"
    echo "nginx:      $({ [ -x "$nginx" ] && "$nginx" -v 2>&1; } || echo 'not found here')"
    echo "postgresql: $({ [ -n "$pg" ] && "$pg" --version; } || psql --version 2>/dev/null || echo 'not found here')"
    echo "redis:      $(redis-server --version 2>/dev/null || echo 'not found here')"
    echo "etcd:       $(etcd --version 2>/dev/null | head -n 1 || echo 'not found here')"
    echo "zookeeper:  $(dpkg-query -W -f='libzookeeper-java ${Version}, libzookeeper-mt2 ' \
        libzookeeper-java 2>/dev/null || echo 'server not found here, ')$(dpkg-query -W \
        -f='${Version}' libzookeeper-mt2 2>/dev/null || echo 'client not found')"
    echo "wrk:        $("${WRK:-wrk}" -v 2>&1 | head -n 1)"
    echo "gnuplot:    $("${GNUPLOT:-gnuplot}" --version 2>/dev/null || echo 'not found')"
    echo "commit:     $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo 'none')$dirty"
    echo "load:       $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min, before the run)"
}
