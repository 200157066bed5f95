#!/usr/bin/env bash
# check-includes.sh - the module boundaries, checked (CONTRIBUTING.md, "Modules"):
#   - service/ and bench/ include only the public headers of lock/ and db/;
#   - lock/ includes nothing of db/ or service/, and db/ nothing of lock/ or service/;
#   - history/ (the history checker) includes nothing of lock/, db/ or service/;
#   - the rooms of service/ include one way, down (service/README.md draws them):
#       main.c                                      the process: may include every room
#       http/     the server, routes, requests and answers' bodies: the sale, lab/, guards/,
#                 core.h, app.h, metrics.h and the ground floor
#       core.c/h, app.h, metrics.c/h  what a replica is built of, and what it counts: the
#                 sale, guards/, the ground floor
#       lab/      the held requests and X-Fault: the sale, guards/, the ground floor
#       sale/     every way of selling: guards/ and the ground floor
#       guards/   the mode table, the guards and modes/: the ground floor
#       config, log, clock                          the ground floor: nothing of service/
#     and the sale's internal header (service/sale/internal.h) is included by its two files
#     only (sale.c, stock.c): the other ways of selling use sale.h and stock.h.
# Prints each offending line and exits 1; silent and 0 when the tree keeps to them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PUBLIC='lock/lock.h|lock/result.h|lock/rwlock.h|lock/cache.h|lock/redlock.h|lock/naive.h|lock/queue/queue_lock.h|lock/etcd/etcd_lock.h|lock/zookeeper/zk_lock.h|db/db.h'
bad=0
check() { # check WHAT FILES... : prints the matches of the include pattern in $pattern
    local what=$1 hits
    shift
    hits=$(grep -HnE "$pattern" "$@" 2>/dev/null | grep -vE "\"($allowed)\"" || true)
    if [ -n "$hits" ]; then
        echo "check-includes: $what:" >&2
        echo "$hits" | sed 's/^/  /' >&2
        bad=1
    fi
}

shopt -s nullglob globstar
pattern='#include "(lock|db)/' allowed=$PUBLIC
check "service/ and bench/ may include only the public headers of lock/ and db/" \
    service/**/*.[ch] bench/*.[ch]
pattern='#include "(db|service)/' allowed='^$'
check "lock/ knows Redis, etcd and ZooKeeper, nothing of db/ or service/" lock/**/*.[ch]
pattern='#include "(lock|service)/' allowed='^$'
check "db/ knows PostgreSQL, nothing of lock/ or service/" db/*.[ch]
pattern='#include "(lock|db|service)/' allowed='^$'
check "history/ knows jansson, nothing of lock/, db/ or service/" history/*.[ch]
# The rooms of service/. Each check names what a room must not include.
room_files() { # room_files PATTERN...: the files of service/ that exist among the patterns
    local f
    for f in "$@"; do [ -e "$f" ] && echo "$f"; done
}
ground=$(room_files service/{config,log,clock}.[ch])
pattern='#include "service/(http|lab|sale|guards)/|#include "service/(app|core)\.h"' allowed='^$'
check "config, log and clock are the ground floor: they include nothing of service/'s rooms" \
    $ground
pattern='#include "service/(http|lab|sale)/|#include "service/(app|core)\.h"' allowed='^$'
check "guards/ (the mode table, the guards, modes/) include nothing of the sale, lab/, http/ or core" \
    service/guards/**/*.[ch]
pattern='#include "service/(http|lab)/|#include "service/(app|core)\.h"' allowed='^$'
check "sale/ includes nothing of http/ (the answers' bodies come in deduct_env.bodies), lab/ or core" \
    service/sale/*.[ch]
pattern='#include "service/http/|#include "service/(app|core)\.h"' allowed='^$'
check "lab/ includes nothing of http/ or core" service/lab/*.[ch]
pattern='#include "service/(http|lab)/' allowed='^$'
check "core, app.h and metrics include nothing of http/ or lab/" service/core.[ch] service/app.h \
    service/metrics.[ch]
pattern='#include "service/sale/internal\.h"' allowed='^$'
check "the sale's internal header is sale.c's and stock.c's alone" \
    $(ls service/**/*.[ch] bench/*.[ch] tests/**/*.[ch] |
        grep -vxE 'service/sale/(sale|stock)\.c|service/sale/internal\.h')
exit $bad
