#!/bin/sh
# render.sh - fills the @NAME@ placeholders of an nginx template and prints the result.
#
#   nginx/render.sh nginx/stock.conf.template > stock.conf
#   nginx/render.sh nginx/nginx.conf.template > nginx.conf
#
# POSIX sh and awk only, so a slim container runs it as well as the native stack. Settings
# come from the environment:
#   NGINX_UPSTREAMS          replicas, space-separated host:port (required for stock.conf)
#   NGINX_LISTEN             listen address or port             (default 127.0.0.1:8080)
#   NGINX_PROXY_READ_TIMEOUT seconds nginx waits for an answer  (default 30)
#   NGINX_ACCESS_LOG         access_log arguments               (default "logs/access.log stock")
#   NGINX_ERROR_LOG          error_log arguments                (default "logs/error.log warn")
#   NGINX_USER               worker user when root, e.g. www-data (default: no user line)
#   NGINX_WORKER_PROCESSES   (default auto)
#   NGINX_OPEN_FILES         each worker's open-file limit (default: this shell's hard limit,
#                            at most 65536); its worker_connections are half of it, at least
#                            1024 and at most 16384 (a proxied request holds two)
#   NGINX_MAX_FAILS / NGINX_FAIL_TIMEOUT  passive health check per replica (default 1 / 3s)
#   NGINX_WEB_ROOT           the live page's folder (web/)      (default /opt/stock/web)
#   NGINX_RESULTS_ROOT       the load reports (results/)        (default /opt/stock/results)
#   NGINX_LAB                1: the lab's stack (make lab): /lab/ serves web/lab/, and
#                            /replica/N/api/... reaches replica N alone, waiting
#                            NGINX_LAB_READ_TIMEOUT seconds (default 120)
#                            for a held request's answer                 (default 0: neither)
# A placeholder left unfilled is an error, so a template and this script cannot drift apart.
# Comment lines are copied unchanged (they name the placeholders).
set -eu

die() {
    echo "render.sh: $*" >&2
    exit 1
}

[ $# -eq 1 ] || die "usage: render.sh TEMPLATE"
template=$1
[ -r "$template" ] || die "cannot read $template"

listen=${NGINX_LISTEN:-127.0.0.1:8080}
read_timeout=${NGINX_PROXY_READ_TIMEOUT:-30}
access_log=${NGINX_ACCESS_LOG:-logs/access.log stock}
error_log=${NGINX_ERROR_LOG:-logs/error.log warn}
workers=${NGINX_WORKER_PROCESSES:-auto}
max_fails=${NGINX_MAX_FAILS:-1}
fail_timeout=${NGINX_FAIL_TIMEOUT:-3s}
web_root=${NGINX_WEB_ROOT:-/opt/stock/web}
results_root=${NGINX_RESULTS_ROOT:-/opt/stock/results}

open_files=${NGINX_OPEN_FILES:-$(ulimit -Hn)}
[ "$open_files" = unlimited ] && open_files=65536
case $open_files in
'' | *[!0-9]*) die "NGINX_OPEN_FILES must be a number, got '$open_files'" ;;
esac
[ "$open_files" -gt 65536 ] && open_files=65536
worker_connections=$((open_files / 2))
[ "$worker_connections" -lt 1024 ] && worker_connections=1024
[ "$worker_connections" -gt 16384 ] && worker_connections=16384

case $read_timeout in
'' | *[!0-9]*) die "NGINX_PROXY_READ_TIMEOUT must be a number of seconds, got '$read_timeout'" ;;
esac

# One `server` line per replica. max_fails/fail_timeout: see the upstream block's comment.
# And one location per replica, /replica/N/api/replica, for the live page to read each
# replica's own view (through the balancer it would get whichever replica answered).
servers=""
replica_locations=""
n=0
for s in ${NGINX_UPSTREAMS:-}; do
    case $s in
    *:*) ;;
    *) die "NGINX_UPSTREAMS: '$s' is not host:port" ;;
    esac
    n=$((n + 1))
    servers="${servers}    server $s max_fails=$max_fails fail_timeout=$fail_timeout;
"
    replica_locations="${replica_locations}    location = /replica/$n/api/replica {
        proxy_pass http://$s/api/replica;
    }
"
done

# The lab (make lab): its page, and each replica's whole API under /replica/N/, so that the
# page sends A to svc-1, B to svc-2, C to svc-3; a held request may take long to answer. A
# location that sets one proxy_set_header inherits none: all are repeated.
if [ "${NGINX_LAB:-0}" = 1 ]; then
    lab_timeout=${NGINX_LAB_READ_TIMEOUT:-120}
    case $lab_timeout in
    '' | *[!0-9]*) die "NGINX_LAB_READ_TIMEOUT must be a number of seconds, got '$lab_timeout'" ;;
    esac
    n=0
    for s in ${NGINX_UPSTREAMS:-}; do
        n=$((n + 1))
        replica_locations="${replica_locations}    location ^~ /replica/$n/api/ {
        proxy_pass http://$s/api/;
        proxy_set_header Connection \"\";
        proxy_set_header Host \$host;
        proxy_set_header X-Request-Id \$stock_request_id;
        proxy_set_header X-Request-Id-Origin \$stock_request_id_origin;
        proxy_read_timeout ${lab_timeout}s;
        proxy_next_upstream off;
    }
"
    done
    replica_locations="${replica_locations}    location ^~ /lab/ {
        alias $web_root/lab/;
        index index.html;
        types {
            text/html html;
            text/css css;
            application/javascript js;
            image/png png;
        }
        add_header Cache-Control \"no-cache\";
    }
"
fi

if [ -n "${NGINX_USER:-}" ]; then
    user_directive="user ${NGINX_USER};"
else
    user_directive="# no user directive: the master does not run as root"
fi

# Values go through ENVIRON rather than awk -v, which would interpret backslashes; the
# replacement is done with index/substr, so '&' and '\' in a value are taken literally.
R_LISTEN=$listen R_SERVERS=$servers R_TIMEOUT="${read_timeout}s" R_ACCESS_LOG=$access_log \
R_ERROR_LOG=$error_log \
R_USER=$user_directive R_WORKERS=$workers R_HAVE_SERVERS=${NGINX_UPSTREAMS:+yes} \
R_OPEN_FILES=$open_files R_WORKER_CONNECTIONS=$worker_connections \
R_REPLICA_LOCATIONS=$replica_locations R_WEB_ROOT=$web_root R_RESULTS_ROOT=$results_root \
awk '
    function fill(line, name, value,    i) {
        while ((i = index(line, "@" name "@")) > 0)
            line = substr(line, 1, i - 1) value substr(line, i + length(name) + 2)
        return line
    }
    # Comments are copied as they are: they name the placeholders.
    /^[ \t]*#/ { print; next }
    {
        if (index($0, "@UPSTREAM_SERVERS@") && ENVIRON["R_HAVE_SERVERS"] != "yes") {
            print "render.sh: NGINX_UPSTREAMS is empty" > "/dev/stderr"
            bad = 1
        }
        line = $0
        line = fill(line, "LISTEN", ENVIRON["R_LISTEN"])
        line = fill(line, "PROXY_READ_TIMEOUT", ENVIRON["R_TIMEOUT"])
        line = fill(line, "ACCESS_LOG", ENVIRON["R_ACCESS_LOG"])
        line = fill(line, "ERROR_LOG", ENVIRON["R_ERROR_LOG"])
        line = fill(line, "USER_DIRECTIVE", ENVIRON["R_USER"])
        line = fill(line, "WORKER_PROCESSES", ENVIRON["R_WORKERS"])
        line = fill(line, "OPEN_FILES", ENVIRON["R_OPEN_FILES"])
        line = fill(line, "WORKER_CONNECTIONS", ENVIRON["R_WORKER_CONNECTIONS"])
        line = fill(line, "WEB_ROOT", ENVIRON["R_WEB_ROOT"])
        line = fill(line, "RESULTS_ROOT", ENVIRON["R_RESULTS_ROOT"])
        # The server lines end with a newline of their own.
        if (line ~ /^[ \t]*@UPSTREAM_SERVERS@[ \t]*$/) {
            printf "%s", ENVIRON["R_SERVERS"]
            next
        }
        if (line ~ /^[ \t]*@REPLICA_LOCATIONS@[ \t]*$/) {
            printf "%s", ENVIRON["R_REPLICA_LOCATIONS"]
            next
        }
        if (match(line, /@[A-Z_]+@/)) {
            print "render.sh: unknown placeholder " substr(line, RSTART, RLENGTH) \
                " in line " NR > "/dev/stderr"
            bad = 1
        }
        print line
    }
    END { exit bad }
' "$template"
