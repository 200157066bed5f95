# pg.sh - a private PostgreSQL under $PG_DIR (sourced, bash; needs common.sh, config.sh).
# shellcheck shell=bash
#
#   $PG_DIR/data    the cluster (initdb on first use; kept by pg_stop, it is the database)
#   $PG_DIR/sock    the unix socket directory
#   $PG_DIR/log/postgres.log
#
# PostgreSQL refuses to run as root, so when we are root the cluster belongs to the
# `postgres` user and every server command runs through runuser; otherwise it is ours.
# It listens on 127.0.0.1 only, with trust authentication: a development database that
# nobody else can reach (loopback) and that holds nothing secret. The durable defaults stay
# on (fsync, synchronous_commit, full_page_writes): a sale answered 200 survives a crash,
# which is a claim the project makes, so it is not traded for speed here.
#
# The service connects as the role `stock`, owner of the database `stock`, not as the
# superuser: it needs to create its tables (migrations) and nothing more.

# Debian 12's PostgreSQL is 15; should another major version be the one installed, take the
# newest found rather than fail (PG_BIN overrides).
if [ -z "${PG_BIN:-}" ]; then
    PG_BIN=/usr/lib/postgresql/15/bin
    if [ ! -x "$PG_BIN/postgres" ]; then
        PG_BIN=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin 2>/dev/null |
            sort -V | tail -n 1)
        PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
    fi
fi

pg__user() {
    if [ "$(id -u)" -eq 0 ]; then echo postgres; else id -un; fi
}

# Pattern that the postmaster's command line contains (pg_ctl starts it with -D DATA).
pg__pattern() {
    echo "$PG_BIN/postgres -D $PG_DIR/data"
}

# Prints the postmaster's PID when it runs, else returns 1.
pg_pid() {
    pidfile_alive "$PG_DIR/data/postmaster.pid" "$(pg__pattern)"
}

# max_connections: room for every replica's pool, plus migrate, the tests, psql and the
# benchmarks. Never below PostgreSQL's default of 100.
pg__max_connections() {
    local n=$((REPLICAS * ${DB_POOL_SIZE:-16} + 40))
    ((n < 100)) && n=100
    echo "$n"
}

# initdb on first use. Runs as the server user, so the files are that user's.
pg__init() {
    local user
    user=$(pg__user)
    [ -x "$PG_BIN/initdb" ] || die "PostgreSQL not found in $PG_BIN (scripts/deps.sh ensure)"
    mkdir -p "$PG_DIR"
    if [ "$(id -u)" -eq 0 ]; then
        getent passwd postgres >/dev/null || die "no 'postgres' user to run PostgreSQL as"
        chown postgres: "$PG_DIR"
        # Every directory above the data must be searchable by postgres (mktemp -d is 0700).
        as_user postgres test -x "$PG_DIR" ||
            die "user postgres cannot reach $PG_DIR: make its parent directories mode 755, or set RUN_DIR elsewhere (e.g. RUN_DIR=/var/tmp/stock-run)"
    fi
    [ -s "$PG_DIR/data/PG_VERSION" ] && return 0

    log "initdb: a new PostgreSQL cluster in $PG_DIR/data (as $user)"
    # C locale: the same collation everywhere (native, containers), no locale packages.
    as_user "$user" "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres --auth=trust \
        --encoding=UTF8 --locale=C --no-instructions >"$PG_DIR/initdb.log" 2>&1 || {
        log_tail "$PG_DIR/initdb.log"
        die "initdb failed"
    }
    # Settings that do not change between starts. Port, socket and max_connections may, so
    # they are written to stock-runtime.conf at each start (pg__write_runtime_conf).
    as_user "$user" tee -a "$PG_DIR/data/postgresql.conf" >/dev/null <<'EOF'

# ---- added by scripts/lib/pg.sh ----
listen_addresses = '127.0.0.1'
# Durability: these are PostgreSQL's defaults, spelled out so nobody "tunes" them away.
fsync = on
synchronous_commit = on
full_page_writes = on
log_line_prefix = '%m [%p] %q%u@%d '
include_if_exists = 'stock-runtime.conf'
EOF
}

pg__write_runtime_conf() {
    as_user "$(pg__user)" tee "$PG_DIR/data/stock-runtime.conf" >/dev/null <<EOF
# Written by scripts/lib/pg.sh at each start, from PG_PORT, RUN_DIR and REPLICAS.
port = $PG_PORT
unix_socket_directories = '$PG_DIR/sock'
max_connections = $(pg__max_connections)
EOF
}

# psql as the superuser over the unix socket. Extra arguments follow.
pg_psql() {
    as_user "$(pg__user)" psql -X -q -v ON_ERROR_STOP=1 -h "$PG_DIR/sock" -p "$PG_PORT" \
        -U postgres "$@"
}

# Creates the role and the database `stock` when missing. Names are constants.
pg__ensure_database() {
    local have
    have=$(pg_psql -d postgres -Atc "SELECT 1 FROM pg_roles WHERE rolname = 'stock'") ||
        die "cannot query PostgreSQL on port $PG_PORT"
    [ "$have" = 1 ] || pg_psql -d postgres -c "CREATE ROLE stock LOGIN" ||
        die "cannot create the role stock"
    have=$(pg_psql -d postgres -Atc "SELECT 1 FROM pg_database WHERE datname = 'stock'")
    if [ "$have" != 1 ]; then
        log "creating the database stock"
        pg_psql -d postgres -c "CREATE DATABASE stock OWNER stock" ||
            die "cannot create the database stock"
    fi
}

# Starts PostgreSQL unless it runs already, then makes sure the database exists.
pg_start() {
    local pid user
    user=$(pg__user)
    if pid=$(pg_pid); then
        log "postgres already running (pid $pid, port $PG_PORT)"
        pg__ensure_database
        return 0
    fi
    require_port_free "$PG_PORT" postgres PG_PORT
    pg__init
    as_user "$user" mkdir -p "$PG_DIR/sock" "$PG_DIR/log"
    pg__write_runtime_conf
    # -w: return once it accepts connections. pg_ctl puts the postmaster in a session of its
    # own, so a Ctrl-C in this terminal later does not reach it.
    if ! as_user "$user" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log/postgres.log" \
        -w -t 60 start >"$PG_DIR/pg_ctl.log" 2>&1; then
        log_tail "$PG_DIR/log/postgres.log"
        port_explain "$PG_PORT"
        die "PostgreSQL did not start (see $PG_DIR/log/postgres.log)"
    fi
    pid=$(pg_pid) || die "PostgreSQL started but its PID file does not match"
    log "postgres started (pid $pid, 127.0.0.1:$PG_PORT, max_connections $(pg__max_connections))"
    pg__ensure_database
}

# Stops PostgreSQL by its PID: SIGINT is the "fast" shutdown (disconnects the clients,
# checkpoints, exits), SIGQUIT the immediate one (crash recovery at next start), SIGKILL
# last. SIGTERM would be "smart": wait for every client to leave, possibly forever.
pg_stop() {
    stop_server postgres "$(pg_pid)" "$(pg__pattern)" INT:60 QUIT:10 KILL:5
}

# The PIDs of the processes PID started (its children), from /proc: by PID, never by name.
pg__children() {
    local parent=$1 d stat rest ppid
    for d in /proc/[0-9]*; do
        # `read`, a builtin: no process started per entry (hundreds, on a loaded machine).
        read -r stat 2>/dev/null <"$d/stat" || continue
        rest=${stat##*) } # after the command name, which may hold spaces and parentheses
        rest=${rest#* }   # after the state
        ppid=${rest%% *}
        [ "$ppid" = "$parent" ] && echo "${d#/proc/}"
    done
    return 0
}

# Freezes PostgreSQL as a stopped host or a partition would look to its clients: SIGSTOP to
# the postmaster and every backend, by PID. Nothing is refused; nothing answers. pg_thaw
# undoes it. For tests and the chaos report: a server that hangs, not one that is down.
pg_freeze() {
    local pid
    pid=$(pg_pid) || die "postgres is not running"
    # shellcheck disable=SC2046 # one PID per word
    kill -STOP "$pid" $(pg__children "$pid")
    log "postgres frozen (SIGSTOP to pid $pid and its children)"
}

pg_thaw() {
    local pid
    pid=$(pg_pid) || die "postgres is not running"
    # shellcheck disable=SC2046 # one PID per word
    kill -CONT "$pid" $(pg__children "$pid")
    log "postgres thawed (SIGCONT to pid $pid and its children)"
}

pg_status() {
    status_row postgres "$(pg_pid)" "127.0.0.1:$PG_PORT  data $PG_DIR/data" \
        "(data $([ -s "$PG_DIR/data/PG_VERSION" ] && echo kept in "$PG_DIR/data" || echo none))"
}
