#!/usr/bin/env bash
# check-includes.sh - the module boundaries, checked (CONTRIBUTING.md, "Modules"):
#   - service/ and bench/ include only the public headers of lock/ and db/;
#   - lock/ includes nothing of db/ or service/, and db/ nothing of lock/ or service/;
#   - history/ (the history checker) includes nothing of lock/, db/ or service/.
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
exit $bad
