# live_page.sh - the live page (web/) in a real browser: Debian's Chromium, headless, against
# the integration stack while a short load runs (sourced by tests/integration.sh; bash).
#
# it__live_page: three runs of `chromium --headless --dump-dom` (or --screenshot) on
# /live/?goods=G, each with a virtual-time budget (the page's timers run, and the budget waits
# for its fetches):
#   1. a screenshot, during the load, into the test logs (live-page.png);
#   2. during the load, while a sale holds the lock inside its section (the test locks the
#      goods' row, so the sale waits at its claim): the lock holder the page names is one of
#      the replicas behind nginx (svc-1..N), its chart has points, and no JavaScript error
#      happened;
#   3. after the books stopped changing: every figure the page shows equals GET /api/stock/G.
# Needs RUN_DIR's stack up, HTTP_PORT, PG_PORT, ADMIN_TOKEN, REPLICAS and HARNESS_LOG_DIR.
# shellcheck shell=bash

LIVE_GOODS=4301

# chromium, headless, as root too; a profile of its own; no traffic off this machine.
live__chromium() {
    local profile
    profile=$(mktemp -d "${TMPDIR:-/tmp}/stock-chromium.XXXXXX")
    timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-dev-shm-usage --user-data-dir="$profile" "$@" 2>>"$HARNESS_LOG_DIR/chromium.log"
    local rc=$?
    rm -rf "$profile"
    return $rc
}

# The value the page shows in element `id` of a dumped DOM.
live__shown() {
    sed -n "s/.*id=\"$2\"[^>]*>\([^<]*\)<.*/\1/p" "$1" | head -n 1
}

live__stock_json() {
    curl -sS -m 5 "http://127.0.0.1:$HTTP_PORT/api/stock/$LIVE_GOODS"
}

# live__psql SQL: one statement (or a list) as the stock role, on the stack's PostgreSQL.
live__psql() {
    PGAPPNAME=${LIVE_APP:-stock-live-test} psql -X -q -At -h 127.0.0.1 -p "$PG_PORT" -U stock \
        -d stock -c "$1"
}

# A sale that stays inside its section while the page looks: a transaction of the test's own
# locks the goods' row (20 s at most, in the background), so each redis-mode sale, once it has
# taken the Redis lock, waits at its claim of the row (its statement bound ends the wait) with
# the lock held. Without it a hold lasts a millisecond or two, and a page that samples five
# times a second may see none. live__release_row ends it.
live__hold_row() {
    LIVE_APP=stock-live-hold live__psql "BEGIN; SELECT 1 FROM goods WHERE id = $LIVE_GOODS FOR UPDATE; SELECT pg_sleep(20); ROLLBACK" \
        >/dev/null 2>&1 &
    LIVE_HOLD_PID=$!
}

live__release_row() {
    live__psql "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                WHERE application_name = 'stock-live-hold'" >/dev/null 2>&1 || true
    wait "$LIVE_HOLD_PID" 2>/dev/null || true
}

it__live_page() {
    local url=http://127.0.0.1:$HTTP_PORT/live/?goods=$LIVE_GOODS dom1 dom2 pids=() i
    command -v chromium >/dev/null || { echo "    chromium is not installed (scripts/deps.sh ensure installs it)" >&2; return 1; }
    dom1=$HARNESS_LOG_DIR/live-page-during.html
    dom2=$HARNESS_LOG_DIR/live-page-after.html
    curl -sS -m 5 -o /dev/null -X POST "http://127.0.0.1:$HTTP_PORT/api/admin/reset" \
        -H 'Content-Type: application/json' -H "Authorization: Bearer $ADMIN_TOKEN" \
        -d "{\"goods_id\":$LIVE_GOODS,\"stock\":100000}" || return 1

    # The load: 4 clients, redis mode, through nginx, for as long as the browser runs below
    # take (they must happen during it: a slow machine starts Chromium slowly), 120 s at most.
    local running
    running=$(mktemp "${TMPDIR:-/tmp}/stock-live-load.XXXXXX")
    for i in 1 2 3 4; do
        (
            end=$((SECONDS + 120))
            while [ -e "$running" ] && [ $SECONDS -lt $end ]; do
                curl -s -m 10 -o /dev/null -X POST "http://127.0.0.1:$HTTP_PORT/api/deduct" \
                    -H 'Content-Type: application/json' \
                    -d "{\"goods_id\":$LIVE_GOODS,\"count\":1,\"mode\":\"redis\"}"
            done
        ) &
        pids+=($!)
    done
    sleep 1
    live__chromium --virtual-time-budget=3000 --window-size=1280,820 \
        --screenshot="$HARNESS_LOG_DIR/live-page.png" "$url" >/dev/null
    # The page samples the lock five times a second, while a sale holds it at its claim of the
    # row (live__hold_row). Up to three page loads, until one of them has seen a holder (a
    # loaded machine starts Chromium slowly).
    live__hold_row
    for i in 1 2 3; do
        live__chromium --virtual-time-budget=4000 --dump-dom "$url" >"$dom1"
        grep -q 'data-seen="svc-' "$dom1" && break
    done
    live__release_row
    rm -f "$running"
    wait "${pids[@]}"

    # During the load: the holders the page named, its chart, its errors.
    local seen errors points name bad=0
    seen=$(sed -n 's/.*data-seen="\([^"]*\)".*/\1/p' "$dom1" | head -n 1)
    errors=$(sed -n 's/.*data-errors="\([0-9]*\)".*/\1/p' "$dom1" | head -n 1)
    points=$(sed -n 's/.*class="series-sold" data-points="\([0-9]*\)".*/\1/p' "$dom1" | head -n 1)
    echo "    during the load: holders named: ${seen:-none}; chart points: ${points:-0}; JavaScript errors: ${errors:-?}"
    [ -n "$seen" ] || { echo "    the page named no lock holder during the load" >&2; bad=1; }
    for name in $seen; do
        [[ $name =~ ^svc-([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= REPLICAS)) ||
            { echo "    the page named '$name' as a holder: not a replica behind nginx" >&2; bad=1; }
    done
    [ "${points:-0}" -ge 5 ] || { echo "    the chart has ${points:-0} points" >&2; bad=1; }
    [ "$errors" = 0 ] || { echo "    the page counted ${errors:-?} JavaScript errors" >&2; bad=1; }
    [ -s "$HARNESS_LOG_DIR/live-page.png" ] || { echo "    no screenshot was made" >&2; bad=1; }

    # After the load, once the books stop changing: the page shows what the API says.
    local before after
    after=$(live__stock_json)
    for i in 1 2 3 4 5 6 7 8 9 10; do
        sleep 0.5
        before=$after
        after=$(live__stock_json)
        [ "$after" = "$before" ] && break
    done
    live__chromium --virtual-time-budget=1500 --dump-dom "$url" >"$dom2"
    echo "    the books: $after"
    local field want shown
    for field in initial stock sold orders oversold; do
        want=$(sed -n "s/.*\"$field\":\([0-9-]*\).*/\1/p" <<<"$after")
        shown=$(live__shown "$dom2" "$field")
        [ -n "$want" ] && [ "$shown" = "$want" ] ||
            { echo "    the page shows $field '$shown', the API says '$want'" >&2; bad=1; }
    done
    errors=$(sed -n 's/.*data-errors="\([0-9]*\)".*/\1/p' "$dom2" | head -n 1)
    [ "$errors" = 0 ] || { echo "    the page counted ${errors:-?} JavaScript errors" >&2; bad=1; }
    return $bad
}
