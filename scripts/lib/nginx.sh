# nginx.sh - nginx in front of the replicas, under $NGINX_DIR (sourced, bash; needs
# shellcheck shell=bash
# common.sh, config.sh).
#
# nginx runs with its own prefix, `nginx -p $NGINX_DIR/`, so its PID file, logs and
# temporary files all live there and it runs as root or not alike. The configuration is
# rendered from the one template shared with docker (nginx/stock.conf.template) into
# $NGINX_DIR/conf/. When we are root the master keeps root (to bind and to open its logs)
# and the workers run as www-data, which is why the prefix is made readable by them.

NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}

# shellcheck disable=SC2153 # NGINX_DIR is set by config.sh
nginx__pattern() {
    # The master's title is "nginx: master process /usr/sbin/nginx -p PREFIX/ -c ...".
    echo "nginx: master process $NGINX_BIN -p $NGINX_DIR/"
}

# Prints the master's PID when it runs, else returns 1.
nginx_pid() {
    pidfile_alive "$NGINX_DIR/logs/nginx.pid" "$(nginx__pattern)"
}

# nginx must wait longer than a replica may legitimately take to answer: the lock wait,
# the wait for a database connection and the teaching delay, plus a margin.
nginx__read_timeout() {
    local ms=$((${LOCK_WAIT_MS:-2000} + ${DB_WAIT_MS:-2000} + ${BUSINESS_DELAY_MS:-0}))
    echo $((ms / 1000 + 10))
}

# Renders conf/nginx.conf and conf/stock.conf from the templates; the upstream lists the
# replicas 1..REPLICAS.
nginx_render() {
    local n upstreams="" user=""
    for ((n = 1; n <= REPLICAS; n++)); do
        upstreams+="127.0.0.1:$(replica_port "$n") "
    done
    [ "$(id -u)" -eq 0 ] && user="www-data www-data"
    mkdir -p "$NGINX_DIR/conf" "$NGINX_DIR/logs" "$NGINX_DIR/tmp"
    # The workers (www-data when root) must reach the prefix and write the temp directories
    # (nginx creates and chowns these at start) and any parent that is 0700 would stop them.
    chmod 755 "$NGINX_DIR" "$NGINX_DIR/conf" "$NGINX_DIR/tmp"
    NGINX_LISTEN=127.0.0.1:$HTTP_PORT NGINX_UPSTREAMS=$upstreams NGINX_WEB_ROOT=$STACK_ROOT/web \
        NGINX_RESULTS_ROOT=$STACK_ROOT/results NGINX_LAB=${NGINX_LAB:-0} \
        NGINX_PROXY_READ_TIMEOUT=$(nginx__read_timeout) \
        NGINX_ACCESS_LOG="logs/access.log stock buffer=32k flush=1s" \
        "$STACK_ROOT/nginx/render.sh" "$STACK_ROOT/nginx/stock.conf.template" \
        >"$NGINX_DIR/conf/stock.conf.new" || die "cannot render the nginx configuration"
    NGINX_USER=$user "$STACK_ROOT/nginx/render.sh" "$STACK_ROOT/nginx/nginx.conf.template" \
        >"$NGINX_DIR/conf/nginx.conf.new" || die "cannot render the nginx configuration"
}

# nginx -t on the files nginx_render just wrote (conf/*.new). stock.conf is included by
# name, so the pair is tested in a scratch directory. Prints nginx's messages on failure.
nginx_test() {
    local scratch=$NGINX_DIR/conf/test conf out
    mkdir -p "$scratch"
    cp "$NGINX_DIR/conf/nginx.conf.new" "$scratch/nginx.conf"
    cp "$NGINX_DIR/conf/stock.conf.new" "$scratch/stock.conf"
    conf=$scratch/nginx.conf
    if ! out=$("$NGINX_BIN" -t -q -p "$NGINX_DIR/" -c "$conf" -e "$NGINX_DIR/logs/error.log" 2>&1); then
        echo "$out" >&2
        return 1
    fi
}

# Moves the rendered files in place. Returns 0 when they changed.
nginx__install() {
    local f changed=1
    for f in nginx.conf stock.conf; do
        if ! cmp -s "$NGINX_DIR/conf/$f.new" "$NGINX_DIR/conf/$f"; then
            mv "$NGINX_DIR/conf/$f.new" "$NGINX_DIR/conf/$f"
            changed=0
        else
            rm -f "$NGINX_DIR/conf/$f.new"
        fi
    done
    return $changed
}

# Starts nginx, or reloads it when it runs and its configuration changed (other ports or
# another number of replicas).
nginx_start() {
    local pid
    [ -x "$NGINX_BIN" ] || die "nginx not found (scripts/deps.sh ensure)"
    nginx_render
    nginx_test || die "nginx -t refused the generated configuration ($NGINX_DIR/conf)"
    if pid=$(nginx_pid); then
        if nginx__install; then
            log "nginx configuration changed: reloading (pid $pid)"
            kill -HUP "$pid"
        else
            log "nginx already running (pid $pid, port $HTTP_PORT)"
        fi
        return 0
    fi
    nginx__install || true
    require_port_free "$HTTP_PORT" nginx HTTP_PORT
    rm -f "$NGINX_DIR/logs/nginx.pid"
    # nginx daemonizes itself (a session of its own) and writes logs/nginx.pid.
    if ! "$NGINX_BIN" -p "$NGINX_DIR/" -c "$NGINX_DIR/conf/nginx.conf" \
        -e "$NGINX_DIR/logs/error.log"; then
        log_tail "$NGINX_DIR/logs/error.log"
        port_explain "$HTTP_PORT"
        die "nginx did not start (see $NGINX_DIR/logs/error.log)"
    fi
    if ! pid=$(wait_until 10 nginx_pid) || ! wait_until 10 port_listening "$HTTP_PORT"; then
        log_tail "$NGINX_DIR/logs/error.log"
        port_explain "$HTTP_PORT"
        die "nginx did not come up on port $HTTP_PORT"
    fi
    log "nginx started (pid $pid, http://127.0.0.1:$HTTP_PORT)"
}

# Stops nginx by the master's PID: SIGQUIT is the graceful stop (finish the requests in
# flight), SIGTERM the fast one, SIGKILL last.
nginx_stop() {
    stop_server nginx "$(nginx_pid)" "$(nginx__pattern)" QUIT:10 TERM:5 KILL:5
}

nginx_status() {
    status_row nginx "$(nginx_pid)" "http://127.0.0.1:$HTTP_PORT"
}
