# tests/history.sh - the shell steps of a history as a test (sourced by tests/run-all.sh; bash).
#
# run_history_lib BUILD_DIR checks the parts of loadtest/lib/history.sh that need no server:
# that an answer is put in the class the API promises for it (ok, fail or info, with its
# error), that the merged history is in time order, and that BUILD_DIR's history-clock is
# monotonic. The settling and the ledger need a database: loadtest/ladder runs them on
# every row (tests/ladder.sh), and run_history_settle checks them on the db suite's
# PostgreSQL: a deduction's and a cart's `info` settled (a sale's remaining counted over its
# own goods' orders up to it), a cart balanced, real phantoms kept.

run_history_lib() {
    local build=$1 dir
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-history.XXXXXX")
    HISTORY__TEST_DIR=$dir
    check_group_begin "history-lib"
    HISTORY_CLOCK=$build/history-clock
    # shellcheck source=loadtest/lib/history.sh
    source loadtest/lib/history.sh
    check "history-clock runs and does not go back" history__clock_monotonic
    check "200 with remaining and order_id: ok with both" history__class \
        200 '{"ok":true,"remaining":41,"order_id":7}' '"type":"ok","f":"deduct","goods_id":5,"remaining":41,"order_id":7'
    check "200 without its figures: info" history__class 200 '{"ok":true}' '"type":"info"'
    check "409 insufficient_stock: fail sold_out" history__class \
        409 '{"ok":false,"error":"insufficient_stock","remaining":0}' '"type":"fail","f":"deduct","goods_id":5,"error":"sold_out"'
    check "503 lock_timeout: fail" history__class 503 '{"ok":false,"error":"lock_timeout"}' '"type":"fail","f":"deduct","goods_id":5,"error":"lock_timeout"'
    check "503 lock_lost: fail" history__class 503 '{"ok":false,"error":"lock_lost"}' '"type":"fail","f":"deduct","goods_id":5,"error":"lock_lost"'
    check "503 commit_unknown: info" history__class 503 '{"ok":false,"error":"commit_unknown"}' '"type":"info","f":"deduct","goods_id":5,"error":"commit_unknown"'
    check "502 upstream_failed: info" history__class 502 '{"ok":false,"error":"upstream_failed"}' '"type":"info"'
    check "502 unavailable (no replica got it): fail" history__class 502 '{"ok":false,"error":"unavailable"}' '"type":"fail"'
    check "504: info" history__class 504 '{"ok":false,"error":"upstream_timeout"}' '"type":"info"'
    check "no answer: info timeout" history__class 000 '' '"type":"info","f":"deduct","goods_id":5,"error":"timeout"'
    check "400: fail" history__class 400 '{"ok":false,"error":"bad_request"}' '"type":"fail","f":"deduct","goods_id":5,"error":"bad_request"'
    check "500: info (it may have sold)" history__class 500 '{"ok":false,"error":"internal"}' '"type":"info"'
    check "cart 200: ok with the answer's items and the cart's order id" history__order_class \
        200 '{"ok":true,"order_id":9,"items":[{"goods_id":1,"count":2,"remaining":98},{"goods_id":7,"count":1,"remaining":0}],"mode":"redis"}' \
        '"type":"ok","f":"order","items":[{"goods_id":1,"count":2,"remaining":98},{"goods_id":7,"count":1,"remaining":0}],"order_id":9'
    check "cart 409 sold_out: fail sold_out naming its goods" history__order_class \
        409 '{"ok":false,"error":"sold_out","goods_id":7}' '"type":"fail","f":"order","error":"sold_out","goods_id":7'
    check "cart 503 lock_timeout: fail" history__order_class 503 '{"ok":false,"error":"lock_timeout"}' \
        '"type":"fail","f":"order","error":"lock_timeout"'
    check "cart 503 commit_unknown: info" history__order_class 503 '{"ok":false,"error":"commit_unknown"}' \
        '"type":"info","f":"order","error":"commit_unknown"'
    check "cart, no answer: info timeout" history__order_class 000 '' '"type":"info","f":"order","error":"timeout"'
    check "a recorded cart and a deduct of its goods are checked together" history__order_checked "$dir" "$build"
    check "merged lines are in time order, a process's own kept in order" history__merge_order "$dir"
    check_group_end
    rm -rf "$dir"
}

history__clock_monotonic() {
    local a b
    a=$(history_now) && b=$(history_now) && [[ $a =~ ^[0-9]+$ ]] && ((b >= a))
}

# history__class STATUS BODY WANT: history_answer's line for STATUS/BODY contains WANT.
history__class() {
    history__line_has "$3" history_answer "$HISTORY__TEST_DIR/answer.jsonl" 3 5 k-1 123 "$1" "$2"
}

# history__order_class STATUS BODY WANT: history_order_answer's line for STATUS/BODY contains
# WANT.
history__order_class() {
    history__line_has "$3" history_order_answer "$HISTORY__TEST_DIR/answer.jsonl" 3 k-1 123 "$1" "$2"
}

# history__line_has WANT COMMAND...: the line COMMAND appends to answer.jsonl (process 3, time
# 123) contains WANT.
history__line_has() {
    local want=$1 line
    shift
    "$@"
    line=$(<"$HISTORY__TEST_DIR/answer.jsonl")
    rm -f "$HISTORY__TEST_DIR/answer.jsonl"
    if [[ $line != *"$want"* ]] || [[ $line != '{"time":123,"process":3,'* ]]; then
        echo "    got: $line" >&2
        return 1
    fi
}

# Goods 5 and 6 of 1 unit each: a cart of both sold them, and a deduct of goods 6 that ran
# beside it was told 200 too (the same last unit). Goods 6 alone shows it: no.
history__order_checked() {
    local dir=$1 build=$2
    rm -f "$dir"/c.jsonl
    history_reset "$dir/c.jsonl" 0 5 1 10 20
    history_reset "$dir/c.jsonl" 0 6 1 30 40
    history_order_invoke "$dir/c.jsonl" 1 '[{"goods_id":5,"count":1},{"goods_id":6,"count":1}]' c-1 100
    history_invoke "$dir/c.jsonl" 2 6 1 d-1 110
    history_order_answer "$dir/c.jsonl" 1 c-1 200 200 \
        '{"ok":true,"order_id":4,"items":[{"goods_id":5,"count":1,"remaining":0},{"goods_id":6,"count":1,"remaining":0}]}'
    history_answer "$dir/c.jsonl" 2 6 d-1 210 200 '{"ok":true,"remaining":0,"order_id":5}'
    "$build/check-history" "$dir/c.jsonl" >"$dir/c.out"
    if [ $? -ne 1 ] || ! grep -q '^goods 5, 6 (goods 6 alone' "$dir/c.out"; then
        cat "$dir/c.out" >&2
        return 1
    fi
}

history__merge_order() {
    local dir=$1
    history_invoke "$dir/a.jsonl" 1 5 1 k-a 100
    history_answer "$dir/a.jsonl" 1 5 k-a 900 409 '{"error":"insufficient_stock"}'
    history_reset "$dir/b.jsonl" 0 5 10 10 20
    history_invoke "$dir/b.jsonl" 2 5 1 k-b 1000
    history_answer "$dir/b.jsonl" 2 5 k-b 1000 000 ''
    history_merge "$dir" "$dir/a.jsonl" "$dir/b.jsonl"
    [ "$(sed 's/^{"time":\([0-9]*\),"process":\([0-9]*\),"type":"\([a-z]*\)".*/\1 \2 \3/' "$dir/history.jsonl" | tr '\n' ' ')" = \
        "10 0 invoke 20 0 ok 100 1 invoke 900 1 fail 1000 2 invoke 1000 2 info " ] || {
        cat "$dir/history.jsonl" >&2
        return 1
    }
}

# run_history_settle BUILD_DIR PORT: history_resolve and history_ledger against the
# PostgreSQL on PORT (the db suite's, superuser postgres), in a database of its own with every
# migration applied: an `info` whose sale the orders table proves is settled as that sale,
# completed when the books are read and not when its client gave up; an unknown cart settled
# from its rows; an ok cart balanced item by item; the rows no client was told of still
# counted phantom.
run_history_settle() {
    local build=$1 port=$2 dir db=history_settle
    case $build in /*) ;; *) build=$PWD/$build ;; esac
    dir=$(mktemp -d "${TMPDIR:-/tmp}/stock-settle.XXXXXX")
    check_group_begin "history-settle"
    HISTORY_CLOCK=$build/history-clock CHECK_HISTORY=$build/check-history
    HISTORY_DB="host=127.0.0.1 port=$port dbname=$db user=postgres connect_timeout=5"
    # shellcheck source=loadtest/lib/history.sh
    source loadtest/lib/history.sh
    check "a settled sale that committed after its client gave up is linearizable" \
        history__settled_late "$dir" "$port" "$db"
    check "an ok cart balances item by item against its order rows; a missing row is lost" \
        history__cart_ledger "$dir" "$port" "$db"
    check "an unknown cart is settled from its rows by request id: taken, or not; no phantom" \
        history__cart_settled "$dir"
    check "a settled sale's remaining counts its own goods' orders up to it, not the others'" \
        history__settled_remaining "$dir"
    check "a cart's row no request was told of is a phantom: a failed cart's, an unsent one's, half a cart" \
        history__cart_phantom "$dir"
    check_group_end
    psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c "DROP DATABASE IF EXISTS $db" \
        >/dev/null 2>&1 || true
    rm -rf "$dir"
}

# The client of rs-1 gave up at 20; a read at 30 still saw 10 units; the sale committed
# after it (its order is in the table), and the stock read at 50 is 9. Process 1 sends its
# next request (the read at 50) after giving up.
history__settled_late() {
    local dir=$1 port=$2 db=$3 sql
    sql="host=127.0.0.1 port=$port user=postgres connect_timeout=5"
    PGOPTIONS="-c client_min_messages=warning" psql -X -q -d "$sql dbname=postgres" \
        -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" ||
        return 1
    cat migrations/*.sql <(echo "INSERT INTO goods (id, stock, initial) VALUES (1, 9, 10);
        INSERT INTO orders (goods, count, mode, instance, request_id)
        VALUES (1, 1, 'redis', 'svc-1', 'rs-1');") |
        psql -X -q -v ON_ERROR_STOP=1 -d "$sql dbname=$db" >/dev/null || return 1
    history_reset "$dir/events.jsonl" 0 1 10 1 2
    printf '%s\n' '{"time":10,"process":1,"type":"invoke","f":"deduct","goods_id":1,"count":1,"request_id":"rs-1"}' \
        '{"time":20,"process":1,"type":"info","f":"deduct","goods_id":1,"error":"timeout","request_id":"rs-1"}' \
        >>"$dir/events.jsonl"
    history_read "$dir/events.jsonl" 2 1 10 30 31
    history_read "$dir/events.jsonl" 1 1 9 50 51
    history_merge "$dir" "$dir/events.jsonl"
    history__scan "$dir/history.jsonl" "$dir/.scan"
    history_resolve "$dir" >/dev/null || return 1
    if ! grep '"rs-1"' "$dir/resolved.jsonl" | grep -q '"type":"ok"' ||
        ! "$CHECK_HISTORY" "$dir/resolved.jsonl" >"$dir/check.txt" 2>&1; then
        cat "$dir/resolved.jsonl" "$dir/check.txt" >&2 2>/dev/null
        return 1
    fi
}

# Goods 2 and 3: cart 500 sold one of each (two order rows naming cart 500); the history's
# ok for it balances. Without goods 3's row, that item is lost.
history__cart_ledger() {
    local dir=$1 port=$2 db=$3 sql ledger
    sql="host=127.0.0.1 port=$port user=postgres connect_timeout=5 dbname=$db"
    psql -X -q -v ON_ERROR_STOP=1 -d "$sql" >/dev/null <<'SQL' || return 1
INSERT INTO goods (id, stock, initial) VALUES (2, 4, 5), (3, 4, 5);
INSERT INTO orders (goods, count, mode, instance, cart, cart_items)
VALUES (2, 1, 'redis', 'svc-1', 500, 2), (3, 1, 'redis', 'svc-1', 500, 2);
SQL
    mkdir -p "$dir/cart"
    history_reset "$dir/cart/events.jsonl" 0 2 5 1 2
    history_reset "$dir/cart/events.jsonl" 0 3 5 3 4
    history_order_invoke "$dir/cart/events.jsonl" 1 '[{"goods_id":2,"count":1},{"goods_id":3,"count":1}]' c-1 10
    history_order_answer "$dir/cart/events.jsonl" 1 c-1 20 200 \
        '{"ok":true,"order_id":500,"items":[{"goods_id":2,"count":1,"remaining":4},{"goods_id":3,"count":1,"remaining":4}]}'
    history_merge "$dir/cart" "$dir/cart/events.jsonl"
    history__scan "$dir/cart/history.jsonl" "$dir/cart/.scan"
    ledger=$(history_ledger "$dir/cart")
    [ "$ledger" = ok ] || { echo "    ledger: $ledger" >&2; return 1; }
    psql -X -q -d "$sql" -c "DELETE FROM orders WHERE goods = 3" >/dev/null || return 1
    ledger=$(history_ledger "$dir/cart")
    [ "$ledger" = "lost 1 units 2/1" ] || { echo "    ledger: $ledger" >&2; return 1; }
}

# history__settle_case DIR SQL: a row's folder DIR (made afresh), and SQL run on the test's
# database (HISTORY_DB) before its history is written.
history__settle_case() {
    rm -rf "$1" && mkdir -p "$1" &&
        psql -X -q -v ON_ERROR_STOP=1 -d "$HISTORY_DB" -c "$2" >/dev/null
}

# history__judged DIR LEDGER COUNT...: judges DIR/events.jsonl (history_merge, history_judge)
# and wants linearizable yes, the ledger LEDGER, and each COUNT ("1 taken") among the
# settling's counts.
history__judged() {
    local dir=$1 ledger=$2 settled c
    shift 2
    history_merge "$dir" "$dir/events.jsonl"
    history_judge "$dir"
    settled=$(sed -n 's/^unknown outcomes settled: //p' "$dir/verdict.txt")
    for c in "$@"; do
        [[ ", $settled," == *", $c,"* ]] || settled=wrong
    done
    if [ "$HISTORY_LEDGER" != "$ledger" ] || [ "$HISTORY_VERDICT" != yes ] || [ "$settled" = wrong ]; then
        cat "$dir/verdict.txt" "$dir/resolved.jsonl" >&2
        return 1
    fi
}

# Goods 10 and 11 of 5 units: cart cs-1 (two of goods 11, one of 10) timed out, and its rows
# (cart 700, request id cs-1) say it sold; cart cs-2 never answered and has no row. Both are
# settled, cs-1 as an ok (its cart, each goods' remaining, on a process of its own), cs-2 as
# not taken; the rows balance (no phantom) and the reads after them are explained.
history__cart_settled() {
    local dir=$1/cart-settled
    history__settle_case "$dir" "INSERT INTO goods (id, stock, initial) VALUES (10, 4, 5), (11, 3, 5);
        INSERT INTO orders (goods, count, mode, instance, cart, cart_items, request_id)
        VALUES (10, 1, 'redis', 'svc-1', 700, 2, 'cs-1'), (11, 2, 'redis', 'svc-1', 700, 2, 'cs-1')" ||
        return 1
    history_reset "$dir/events.jsonl" 0 10 5 1 2
    history_reset "$dir/events.jsonl" 0 11 5 3 4
    history_order_invoke "$dir/events.jsonl" 1 '[{"goods_id":11,"count":2},{"goods_id":10,"count":1}]' cs-1 10
    history_order_answer "$dir/events.jsonl" 1 cs-1 20 000 ''
    history_order_invoke "$dir/events.jsonl" 2 '[{"goods_id":10,"count":1}]' cs-2 15
    history_read "$dir/events.jsonl" 3 10 4 50 51
    history_read "$dir/events.jsonl" 3 11 3 52 53
    history__judged "$dir" ok "1 taken" "1 not_taken" || return 1
    jq -e -s --argjson base "$HISTORY_SETTLED_PROCESS" '
        (map(select(.request_id == "cs-1" and .resolved)) as $a
         | $a | length == 1 and $a[0].type == "ok" and $a[0].order_id == 700
           and $a[0].process >= $base
           and $a[0].items == [{goods_id: 11, count: 2, remaining: 3},
                               {goods_id: 10, count: 1, remaining: 4}])
        and (map(select(.request_id == "cs-2" and .resolved and .type == "fail"
                        and .error == "not_taken")) | length == 1)' "$dir/resolved.jsonl" \
        >/dev/null || { cat "$dir/resolved.jsonl" >&2; return 1; }
}

# Goods 20 and 21 of 10 units, their orders interleaved (ids 901 to 905): ra-1 (2 units of goods 20), rb-1 (1
# of goods 21), ra-2 (1 of 20), rb-2 (3 of 21), ra-3 (1 of 20). ra-1 and rb-1 were answered;
# ra-2 and rb-2 timed out and ra-3 never answered, and their rows say they sold: settled with
# each goods' stock after them, 7, 6 and 6 (the initial less the units of that goods' orders
# up to each), which the reads of 6 and 6 then explain.
history__settled_remaining() {
    local dir=$1/settled-remaining
    history__settle_case "$dir" "INSERT INTO goods (id, stock, initial) VALUES (20, 6, 10), (21, 6, 10);
        INSERT INTO orders (id, goods, count, mode, instance, request_id)
        VALUES (901, 20, 2, 'redis', 'svc-1', 'ra-1'), (902, 21, 1, 'redis', 'svc-1', 'rb-1'),
               (903, 20, 1, 'redis', 'svc-1', 'ra-2'), (904, 21, 3, 'redis', 'svc-1', 'rb-2'),
               (905, 20, 1, 'redis', 'svc-1', 'ra-3')" || return 1
    history_reset "$dir/events.jsonl" 0 20 10 1 2
    history_reset "$dir/events.jsonl" 0 21 10 3 4
    printf '%s\n' '{"time":10,"process":1,"type":"invoke","f":"deduct","goods_id":20,"count":2,"request_id":"ra-1"}' \
        '{"time":12,"process":2,"type":"invoke","f":"deduct","goods_id":21,"count":1,"request_id":"rb-1"}' \
        '{"time":14,"process":1,"type":"ok","f":"deduct","goods_id":20,"remaining":8,"order_id":901,"request_id":"ra-1"}' \
        '{"time":16,"process":2,"type":"ok","f":"deduct","goods_id":21,"remaining":9,"order_id":902,"request_id":"rb-1"}' \
        '{"time":20,"process":1,"type":"invoke","f":"deduct","goods_id":20,"count":1,"request_id":"ra-2"}' \
        '{"time":22,"process":2,"type":"invoke","f":"deduct","goods_id":21,"count":3,"request_id":"rb-2"}' \
        '{"time":30,"process":1,"type":"info","f":"deduct","goods_id":20,"error":"timeout","request_id":"ra-2"}' \
        '{"time":32,"process":2,"type":"info","f":"deduct","goods_id":21,"error":"timeout","request_id":"rb-2"}' \
        '{"time":40,"process":3,"type":"invoke","f":"deduct","goods_id":20,"count":1,"request_id":"ra-3"}' \
        >>"$dir/events.jsonl"
    history_read "$dir/events.jsonl" 4 20 6 50 51
    history_read "$dir/events.jsonl" 4 21 6 52 53
    history__judged "$dir" ok "3 taken" || return 1
    jq -e -s 'map(select(.resolved) | {(.request_id): .remaining}) | add
              == {"ra-2": 7, "rb-2": 6, "ra-3": 6}' "$dir/resolved.jsonl" >/dev/null ||
        { cat "$dir/resolved.jsonl" >&2; return 1; }
}

# Real phantoms stay phantoms. Goods 12 and 13: cart cp-1 answered 503 lock_timeout (nothing
# sold, the API says) and yet has its rows; a row of goods 12 carries a request id that no
# request of the history had. Goods 14 and 15: cart cp-2 timed out and only its goods-14 row
# is there (a cart of two items): its rows disagree with it, so it stays unknown, and the row
# is acknowledged to nobody.
history__cart_phantom() {
    local dir=$1/cart-phantom
    history__settle_case "$dir" "INSERT INTO goods (id, stock, initial) VALUES (12, 3, 5), (13, 4, 5);
        INSERT INTO orders (goods, count, mode, instance, cart, cart_items, request_id)
        VALUES (12, 1, 'redis', 'svc-1', 800, 2, 'cp-1'), (13, 1, 'redis', 'svc-1', 800, 2, 'cp-1'),
               (12, 1, 'redis', 'svc-1', NULL, NULL, 'nobody')" || return 1
    history_reset "$dir/events.jsonl" 0 12 5 1 2
    history_reset "$dir/events.jsonl" 0 13 5 3 4
    history_order_invoke "$dir/events.jsonl" 1 '[{"goods_id":12,"count":1},{"goods_id":13,"count":1}]' cp-1 10
    history_order_answer "$dir/events.jsonl" 1 cp-1 20 503 '{"ok":false,"error":"lock_timeout"}'
    history__judged "$dir" "phantom 3 units 0/3" none || return 1

    dir=$1/cart-half
    history__settle_case "$dir" "INSERT INTO goods (id, stock, initial) VALUES (14, 4, 5), (15, 5, 5);
        INSERT INTO orders (goods, count, mode, instance, cart, cart_items, request_id)
        VALUES (14, 1, 'redis', 'svc-1', 900, 2, 'cp-2')" || return 1
    history_reset "$dir/events.jsonl" 0 14 5 1 2
    history_reset "$dir/events.jsonl" 0 15 5 3 4
    history_order_invoke "$dir/events.jsonl" 1 '[{"goods_id":14,"count":1},{"goods_id":15,"count":1}]' cp-2 10
    history_order_answer "$dir/events.jsonl" 1 cp-2 20 000 ''
    history__judged "$dir" "phantom 1 units 0/1" "1 disagreeing" || return 1
    grep -q '"type":"info","f":"order".*"cp-2"' "$dir/resolved.jsonl" ||
        { cat "$dir/resolved.jsonl" >&2; return 1; }
}
