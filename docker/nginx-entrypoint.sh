#!/bin/sh
# nginx-entrypoint.sh - renders the project's nginx configuration and runs nginx in front of
# the replicas; runs as the unprivileged user `nginx-stock`.
#
# The configuration is the native stack's, from the same two templates
# (nginx/nginx.conf.template around nginx/stock.conf.template) and the same renderer
# (nginx/render.sh). Only the values differ, and they come from the environment that
# docker/compose.yml passes (defaults in docker/.env):
#   NGINX_UPSTREAMS            the replicas by service name: "svc-1:8080 svc-2:8080 svc-3:8080"
#   NGINX_PROXY_READ_TIMEOUT   seconds; above LOCK_WAIT_MS + DB_WAIT_MS + BUSINESS_DELAY_MS
# and, fixed here: listen on 8080 (every interface of the container; compose publishes it on
# the host's loopback), access log to stdout, errors to stderr, workers = cores.
#
# nginx runs under the prefix /var/lib/stock-nginx as natively under .run/nginx (its pid and
# lock files in logs/, its temporary files in tmp/). It resolves the replicas' names once, at
# start: compose starts it only when all of them are healthy, and the renderer and
# `nginx -t` run first, so a bad setting stops here with nginx's own message.
set -eu

PREFIX=/var/lib/stock-nginx

NGINX_LISTEN=8080 NGINX_ACCESS_LOG="/dev/stdout stock" \
    /opt/stock/nginx/render.sh /opt/stock/nginx/stock.conf.template >"$PREFIX/conf/stock.conf"
NGINX_ERROR_LOG="stderr warn" \
    /opt/stock/nginx/render.sh /opt/stock/nginx/nginx.conf.template >"$PREFIX/conf/nginx.conf"

# nginx -t first, its verdict in the container's log ("test is successful": docker/test.sh
# looks for it). -e stderr: where nginx writes before it has read error_log from the file.
nginx -t -e stderr -p "$PREFIX/" -c "$PREFIX/conf/nginx.conf"
echo "nginx-entrypoint: upstreams ${NGINX_UPSTREAMS:-}, listening on 8080"
exec nginx -e stderr -p "$PREFIX/" -c "$PREFIX/conf/nginx.conf" -g 'daemon off;'
