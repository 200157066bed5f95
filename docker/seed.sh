#!/bin/sh
# seed.sh - the compose stack's `seed` one-shot: creates goods SEED_GOODS with SEED_STOCK
# units, as the native `make up` does, unless the goods exist already (so a second `up`
# keeps the figures of the last run). Talks to svc-1 directly, through the admin endpoint,
# with ADMIN_TOKEN when one is set. Exit status 0 when the goods exist afterwards.
set -eu

url=http://${SEED_REPLICA:-svc-1:8080}
goods=${SEED_GOODS:-1}
stock=${SEED_STOCK:-5000}

status=$(curl -sS -m 10 -o /dev/null -w '%{http_code}' "$url/api/stock/$goods")
case $status in
200)
    echo "seed: goods $goods exists, left as it is"
    ;;
404)
    if [ -n "${ADMIN_TOKEN:-}" ]; then
        set -- -H "Authorization: Bearer $ADMIN_TOKEN"
    else
        set --
    fi
    curl -sS -m 10 --fail-with-body -X POST -H 'Content-Type: application/json' "$@" \
        -d "{\"goods_id\":$goods,\"stock\":$stock}" "$url/api/admin/reset"
    echo
    echo "seed: goods $goods created with $stock units"
    ;;
*)
    echo "seed: GET /api/stock/$goods answered $status" >&2
    exit 1
    ;;
esac
