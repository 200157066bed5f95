# loadtest/lib/history.sh - how every load of the project is judged: one row's history
# recorded, its unknowns settled from the database, checked for linearizability, and its
# books balanced against what the clients were told. Sourced (bash) by loadtest/run (and so
# make demo and loadtest/scale), loadtest/ladder and loadtest/chaos, so that each figure is
# made one way.
#
# A history is what the clients saw, in the project's HISTORY format (JSON Lines; README,
# "How a run is judged"): per request an invocation and a completion on CLOCK_MONOTONIC (ns),
# the completion `ok` (200, with `remaining` and `order_id`), `fail` (the sale certainly did
# not happen: 409 is `sold_out`, a 503 lock_timeout / unavailable / conflict / lock_lost and
# any 4xx carry their error) or `info` (the outcome is unknown: 503 commit_unknown, 502
# upstream_failed, 504, a 500, no answer at all). A cart (POST /api/order) is an `order`, its
# goods in `items`, its ok carrying the answer's items (each goods' remaining) and the cart's
# order id, its 409 a `fail` `sold_out` naming the goods the answer names. A row's history
# opens with the `reset` of its goods and may end with a `read` of the settled stock. The
# recorders that write it: loadtest/deduct.lua and loadtest/order.lua (wrk),
# bench/chaos_load.c, tests/stack/load.c and, for the ladder's few curl requests,
# history_answer and history_order_answer below. Each names every request uniquely, and writes the
# name on its lines (the format ignores extra fields): deduct.lua, order.lua, the ladder's
# carts and tests/stack/load.c by an X-Request-Id ("request_id"), which a sale writes into its
# order row (a cart into each of its rows) in the INSERT it runs anyway, so recording costs
# the service nothing; the others by an Idempotency-Key
# ("key"), which costs a sale two statements and settles a 409 too.
#
# A row's folder DIR ends up holding:
#   history.jsonl       the raw history, every recorder's lines merged in time order
#   resolved.jsonl      the same with each unknown settled from the database (history_resolve)
#   check-raw.txt, check-resolved.txt   build/check-history's output on each
#   counterexample.txt  for a `no`: the checker's smallest window no order explains
#   ledger.txt          the books against the history (history_ledger)
#
# Functions (each documented where it is defined):
#   history_now                      CLOCK_MONOTONIC in ns (build/history-clock)
#   history_reset FILE PROC GOODS STOCK T0 T1    a reset's invoke and ok
#   history_read FILE PROC GOODS STOCK T0 T1     a read's invoke and ok
#   history_answer FILE PROC GOODS KEY T STATUS BODY   a deduction's completion, classified
#   history_order_invoke FILE PROC ITEMS KEY T       a cart's invocation
#   history_order_answer FILE PROC KEY T STATUS BODY  a cart's completion, classified
#   history_merge DIR FILE...        DIR/history.jsonl from the recorders' files, by time
#   history_open FILE BASE STOCK FIRST [COUNT]   the goods reset, the history opened
#   history_close DIR BASE FIRST [COUNT [MODE]]  a read of the books closes it; merge, judge
#   history_judge DIR [MODE]         resolve, check both histories, balance the books; sets
#                                    HISTORY_LINEARIZABLE and HISTORY_LEDGER (the columns)
#   history_model_for MODE           the checker's model for a mode's histories
#
# Environment: CHECK_HISTORY (build/check-history), HISTORY_CLOCK (build/history-clock),
# HISTORY_DB (a libpq conninfo; default DATABASE_URL, else the stack's PG_PORT on loopback).
# jq and psql are needed for the judging.
# shellcheck shell=bash
# shellcheck disable=SC2034 # HISTORY_VERDICT and the other HISTORY_* are for the caller

HISTORY__ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# The process ids history_resolve gives the sales it settles from an info: above every
# recorder's (deduct.lua's are below 10^12: a base of N * 10^8 plus thread * 10^6).
HISTORY_SETTLED_PROCESS=1000000000000000
CHECK_HISTORY=${CHECK_HISTORY:-$HISTORY__ROOT/build/check-history}
HISTORY_CLOCK=${HISTORY_CLOCK:-$HISTORY__ROOT/build/history-clock}

# The database the judging reads, chosen when judging (the caller may set PG_PORT late).
history__db() {
    echo "${HISTORY_DB:-${DATABASE_URL:-host=127.0.0.1 port=${PG_PORT:-15432} dbname=stock user=stock connect_timeout=5}}"
}

# history_now: prints CLOCK_MONOTONIC in ns, the clock of every recorder.
history_now() {
    "$HISTORY_CLOCK"
}

# history_reset FILE PROCESS GOODS STOCK T_INVOKE T_DONE: appends a reset of GOODS to STOCK,
# sent at T_INVOKE and answered (200) at T_DONE.
history_reset() {
    printf '{"time":%s,"process":%d,"type":"invoke","f":"reset","goods_id":%d,"stock":%d}\n{"time":%s,"process":%d,"type":"ok","f":"reset","goods_id":%d}\n' \
        "$5" "$2" "$3" "$4" "$6" "$2" "$3" >>"$1"
}

# history_read FILE PROCESS GOODS STOCK T_INVOKE T_DONE: appends a read of GOODS that
# answered STOCK.
history_read() {
    printf '{"time":%s,"process":%d,"type":"invoke","f":"read","goods_id":%d}\n{"time":%s,"process":%d,"type":"ok","f":"read","goods_id":%d,"stock":%d}\n' \
        "$5" "$2" "$3" "$6" "$2" "$3" "$4" >>"$1"
}

# history_invoke FILE PROCESS GOODS COUNT KEY T: appends a deduction's invocation.
history_invoke() {
    printf '{"time":%s,"process":%d,"type":"invoke","f":"deduct","goods_id":%d,"count":%d,"key":"%s"}\n' \
        "$6" "$2" "$3" "$4" "$5" >>"$1"
}

# history__kind STATUS BODY: sets HISTORY__TYPE and HISTORY__ERROR, the class (the top of
# this file) of an answer that is not a readable 200, the same as deduct.lua's record_answer
# and chaos_load.c's classify: a deduction's 409 insufficient_stock and a cart's 409
# sold_out are both a `fail` `sold_out`.
history__kind() {
    local status=$1 re_error='"error":"([A-Za-z0-9_]*)"' err=''
    [[ $2 =~ $re_error ]] && err=${BASH_REMATCH[1]}
    case $status in
    200) HISTORY__TYPE=info err=unreadable_200 ;;
    000) HISTORY__TYPE=info err=timeout ;;
    409)
        HISTORY__TYPE=fail
        [ "$err" != insufficient_stock ] || err=sold_out
        ;;
    503) if [ "$err" = commit_unknown ]; then HISTORY__TYPE=info; else HISTORY__TYPE=fail; fi ;;
    502) if [ "$err" = unavailable ]; then HISTORY__TYPE=fail; else HISTORY__TYPE=info; fi ;;
    504) HISTORY__TYPE=info ;;
    4??) HISTORY__TYPE=fail ;;
    *) HISTORY__TYPE=info ;;
    esac
    HISTORY__ERROR=${err:-http_$status}
}

# history_answer FILE PROCESS GOODS KEY T STATUS BODY: appends the completion of the
# deduction KEY, answered STATUS (000: no answer) with BODY at T (history__kind's classes).
history_answer() {
    local file=$1 proc=$2 goods=$3 key=$4 t=$5 status=$6 body=$7 remaining='' order=''
    local re_remaining='"remaining":(-?[0-9]+)' re_order='"order_id":([0-9]+)'
    if [ "$status" = 200 ]; then
        [[ $body =~ $re_remaining ]] && remaining=${BASH_REMATCH[1]}
        [[ $body =~ $re_order ]] && order=${BASH_REMATCH[1]}
        if [ -n "$remaining" ] && [ -n "$order" ]; then
            printf '{"time":%s,"process":%d,"type":"ok","f":"deduct","goods_id":%d,"remaining":%d,"order_id":%d,"key":"%s","status":200}\n' \
                "$t" "$proc" "$goods" "$remaining" "$order" "$key" >>"$file"
            return
        fi
    fi
    history__kind "$status" "$body"
    printf '{"time":%s,"process":%d,"type":"%s","f":"deduct","goods_id":%d,"error":"%s","key":"%s","status":%d}\n' \
        "$t" "$proc" "$HISTORY__TYPE" "$goods" "$HISTORY__ERROR" "$key" "$((10#$status))" >>"$file"
}

# history_order_invoke FILE PROCESS ITEMS KEY T: appends a cart's invocation, ITEMS its JSON
# array of {"goods_id","count"}, KEY its name (written as request_id, the X-Request-Id the
# cart was sent with: each of its order rows keeps it, which settles an unknown outcome).
history_order_invoke() {
    printf '{"time":%s,"process":%d,"type":"invoke","f":"order","items":%s,"request_id":"%s"}\n' \
        "$5" "$2" "$3" "$4" >>"$1"
}

# history_order_answer FILE PROCESS KEY T STATUS BODY: appends the completion of the cart KEY:
# an ok with the answer's items (each goods' remaining) and order id, a sold_out with the
# goods its 409 names, else history__kind's class.
history_order_answer() {
    local file=$1 proc=$2 key=$3 t=$4 status=$5 body=$6 items='' extra=''
    local re_items='"items":(\[[^]]*\])' re_order='"order_id":([0-9]+)' re_goods='"goods_id":([0-9]+)'
    [[ $body =~ $re_items ]] && items=${BASH_REMATCH[1]}
    if [ "$status" = 200 ] && [ -n "$items" ] && [[ $body =~ $re_order ]]; then
        printf '{"time":%s,"process":%d,"type":"ok","f":"order","items":%s,"order_id":%d,"request_id":"%s","status":200}\n' \
            "$t" "$proc" "$items" "${BASH_REMATCH[1]}" "$key" >>"$file"
        return
    fi
    history__kind "$status" "$body"
    if [ "$HISTORY__ERROR" = sold_out ] && [[ $body =~ $re_goods ]]; then
        extra=",\"goods_id\":${BASH_REMATCH[1]}"
    fi
    printf '{"time":%s,"process":%d,"type":"%s","f":"order","error":"%s"%s,"request_id":"%s","status":%d}\n' \
        "$t" "$proc" "$HISTORY__TYPE" "$HISTORY__ERROR" "$extra" "$key" "$((10#$status))" >>"$file"
}

# history_open FILE BASE STOCK FIRST [COUNT]: resets goods FIRST .. FIRST+COUNT-1 to STOCK
# through BASE (books_reset, loadtest/lib/books.sh) and appends each reset, timed, to FILE
# (process 0 for FIRST, 1 for the next, ...): a recorded load on those goods opens here.
# Returns 1 when a reset failed.
history_open() {
    local file=$1 base=$2 stock=$3 first=$4 count=${5:-1} g t0 t1
    t0=$(history_now)
    books_reset "$base" "$stock" "$first" "$count" || return 1
    t1=$(history_now)
    for ((g = first; g < first + count; g++)); do
        history_reset "$file" $((g - first)) "$g" "$stock" "$t0" "$t1"
    done
}

# history_close DIR BASE FIRST [COUNT [MODE]]: closes the load recorded into DIR (the
# recorders' DIR/wrk*.jsonl, and DIR/events.jsonl that history_open began) with one more read
# of the books, timed (books_read), merges it and judges it (history_judge DIR MODE). Call it
# once the books have settled. Returns 1 when the read failed.
history_close() {
    local dir=$1 base=$2 first=$3 count=${4:-1} mode=${5:-} t0 t1 books g s
    t0=$(history_now)
    books=$(books_read "$base" "$first" "$count") || return 1
    t1=$(history_now)
    while read -r g s; do
        history_read "$dir/events.jsonl" $((g - first)) "$g" "$s" "$t0" "$t1"
    done < <(jq -r '"\(.goods_id) \(.stock)"' <<<"$books")
    history_merge "$dir" "$dir"/wrk*.jsonl "$dir/events.jsonl"
    history_judge "$dir" "$mode"
}

# history_merge DIR FILE...: writes DIR/history.jsonl, the lines of every FILE in time order
# (every recorder writes "time" first; a stable sort keeps a process's lines in order).
history_merge() {
    local dir=$1
    shift
    mkdir -p "$dir"
    cat "$@" | LC_ALL=C sort -s -t: -k2,2n >"$dir/history.jsonl"
}

# history__seconds_since T: the seconds from T (an $EPOCHREALTIME) to now, "%.2f". A
# duration on the wall clock is good enough here, and costs no process.
history__seconds_since() {
    local now=${EPOCHREALTIME/[.,]/} then=${1/[.,]/}
    printf '%d.%02d' $(((now - then) / 1000000)) $(((now - then) % 1000000 / 10000))
}

# history_model_for MODE: the model (check-history --model) a mode's histories are checked
# against. `units` for redis-sharded: its sales commit side by side, one per segment, and a 200
# tells the rest as its own transaction saw it, so two sales may tell the same figure; what it
# promises is every unit sold while the stock covered it, a sold_out only while it did not,
# and exact reads (docs/course/31-redis-sharded.md). `stock`, the exact counter, for every
# other mode.
history_model_for() {
    case $1 in
    redis-sharded) echo units ;;
    *) echo stock ;;
    esac
}

# history__check FILE OUT MODEL: runs the checker on FILE with MODEL, its output to OUT;
# prints "VERDICT SECONDS" (VERDICT yes, no, unknown, malformed or error).
history__check() {
    local file=$1 out=$2 model=$3 t0=$EPOCHREALTIME rc=0 v last=''
    "$CHECK_HISTORY" --model "$model" "$file" >"$out" 2>&1 || rc=$?
    case $rc in
    0) v=yes ;; 1) v=no ;; 2) v=malformed ;; 3) v=unknown ;; *) v=error ;;
    esac
    # The verdict is the last line's; an exit status that disagrees with it is an error.
    while IFS= read -r line || [ -n "$line" ]; do last=$line; done <"$out"
    case $v in yes | no | unknown)
        [ "$last" = "linearizable: $v" ] || v=error ;;
    esac
    echo "$v $(history__seconds_since "$t0")"
}

# history__scan FILE OUT: one pass over a history, its deduction, order and invocation lines
# as tab-separated "f type process goods count order_id key request_id": what settling and
# balancing read. An order's invocation and its ok give one line per item (its goods and
# count; the ok's order_id is the cart's, which each of its order rows names in `cart`); its
# other completions one line, with goods 0 (settling reads only that the order ended, or how).
history__scan() {
    jq -r 'select(.type == "invoke" or .f == "deduct" or .f == "order")
           | if .f == "order" and (.type == "invoke" or .type == "ok") then . as $o | (.items // [])[]
                 | [$o.f, $o.type, $o.process, .goods_id, (.count // 0), ($o.order_id // 0),
                    ($o.key // ""), ($o.request_id // "")]
             elif .f == "order" then [.f, .type, .process, 0, 0, 0, (.key // ""), (.request_id // "")]
             else [.f, .type, .process, .goods_id, (.count // 0), (.order_id // 0), (.key // ""),
                   (.request_id // "")] end
           | @tsv' "$1" >"$2"
}

# history__open SCAN: the operations a history's scan leaves open, as tab-separated lines
# "f goods count item key request_id how process", `how` being `info` (an info completion)
# or `open` (an invocation with none): a deduction named by its key or request id, one line;
# an order named by its request id (its rows keep no key), one line per item (its goods,
# count and place in the invocation). A process has one operation open at a time, so an
# invocation's lines are those of its process since its last completion.
history__open() {
    awk -F'\t' -v OFS='\t' '
        function emit(p, how, i) { for (i = 1; i <= n[p]; i++) print line[p, i], how, p }
        $1 != "deduct" && $1 != "order" { next }
        $2 == "invoke" {
            if (!open[$3]) { n[$3] = 0; open[$3] = 1 }
            n[$3]++
            line[$3, n[$3]] = $1 OFS $4 OFS $5 OFS n[$3] OFS $7 OFS $8
            named[$3] = $8 != "" || ($1 == "deduct" && $7 != "")
            next
        }
        open[$3] {
            if ($2 == "info" && named[$3]) emit($3, "info")
            open[$3] = 0
        }
        END { for (p in open) if (open[p] && named[p]) emit(p, "open") }' "$1"
}

# history__settle_sql OPEN: the query that settles the operations of OPEN (history__open's
# lines) from the database, one JSON object per operation: its name (the request id, or else
# the key), f, how, process and, for a deduction, goods, key, rid and the answer its client
# would have been told (status 200, 409, another refusal, or none: body); for an order, the
# status 200 (every item's row there: items with each goods' remaining, and order_id the
# cart), 0 (no row: never taken) or -1 (rows that disagree with the cart: not settled).
history__settle_sql() {
    # No JIT: the temporary tables have no statistics, their estimates cross the JIT's
    # threshold, and compiling costs seconds where the query itself takes milliseconds.
    echo 'SET jit = off;'
    echo 'CREATE TEMP TABLE open_ops (f text, goods bigint, count bigint, item int, key text,'
    echo '                            rid text, how text, process bigint);'
    echo 'COPY open_ops FROM STDIN;'
    cat "$1"
    echo '\.'
    cat <<'SQL'
-- The order rows that name an open operation's request id, each with the stock after it (the
-- goods' initial less the units of its orders up to that one): one running sum over each
-- goods' orders, in one pass. (A sum per row, its own scan of the goods' orders, cost every
-- open operation a scan of them all: 14.5 s for 1,081 open over 22,861 orders.)
CREATE TEMP TABLE named AS
SELECT * FROM (
    SELECT x.id, x.goods, x.count, x.cart, x.cart_items, x.request_id,
           g.initial - sum(x.count) OVER (PARTITION BY x.goods ORDER BY x.id) AS remaining
      FROM orders x JOIN goods g ON g.id = x.goods
     WHERE x.goods IN (SELECT goods FROM open_ops WHERE rid <> '')) a
 WHERE a.request_id IN (SELECT rid FROM open_ops WHERE rid <> '');
CREATE INDEX ON named (goods, request_id);
ANALYZE named;
SELECT json_build_object('name', CASE WHEN o.rid <> '' THEN o.rid ELSE o.key END, 'f', o.f,
       'key', o.key, 'rid', o.rid, 'how', o.how, 'process', o.process, 'goods', o.goods,
       'status', CASE WHEN o.rid = '' THEN i.status WHEN r.id IS NOT NULL THEN 200 END,
       'body', CASE WHEN o.rid = '' THEN i.body WHEN r.id IS NOT NULL THEN
                   json_build_object('remaining', r.remaining, 'order_id', r.id)::text END)
  FROM open_ops o
  LEFT JOIN idempotency i ON o.rid = '' AND i.goods = o.goods AND i.key = o.key
  LEFT JOIN LATERAL (
        SELECT x.id, x.remaining FROM named x
         WHERE o.rid <> '' AND x.goods = o.goods AND x.request_id = o.rid
         LIMIT 1) r ON true
 WHERE o.f = 'deduct';
-- An order settles as taken when each of its items has exactly one row with its request id,
-- of its count, every row of one cart, and that cart has as many rows as the order has items
-- (the statement that writes them writes all or none); as never taken when no item has one.
SELECT json_build_object('name', o.rid, 'f', 'order', 'rid', o.rid, 'how', o.how,
       'process', o.process, 'order_id', min(x.cart),
       'status', CASE WHEN count(x.id) = 0 THEN 0
                      WHEN count(x.id) = count(*) AND count(*) = count(DISTINCT o.item)
                       AND count(x.cart) = count(*) AND count(DISTINCT x.cart) = 1
                       AND bool_and(x.count = o.count)
                       AND min(x.cart_items) = count(*) AND max(x.cart_items) = count(*)
                       AND min(x.cart_rows) = count(*) AND max(x.cart_rows) = count(*)
                      THEN 200 ELSE -1 END,
       'items', json_agg(json_build_object('goods_id', o.goods, 'count', o.count,
                                           'remaining', x.remaining) ORDER BY o.item))
  FROM open_ops o
  LEFT JOIN LATERAL (
        SELECT x.id, x.count, x.cart, x.cart_items,
               (SELECT count(*) FROM orders z WHERE z.cart = x.cart) AS cart_rows, x.remaining
          FROM named x
         WHERE x.goods = o.goods AND x.request_id = o.rid) x ON true
 WHERE o.f = 'order'
 GROUP BY o.rid, o.how, o.process;
SQL
}

# history_resolve DIR: writes DIR/resolved.jsonl from DIR/history.jsonl (and its scan,
# DIR/.scan, from history__scan). Once the books have stopped changing (the caller waited
# for that), every transaction of the row has ended, so an unknown outcome is settled from
# the database, by the request's name:
#   - a request_id (X-Request-Id): a sale writes it into its order row, in its own
#     transaction, so an order with it means the sale happened (an ok, with that order's id,
#     and as remaining the goods' initial stock less every unit its orders up to that one
#     sold: the stock after it in commit order, which is id order wherever the order is
#     written while the goods' row or lock is held, every safe mode; an unsafe mode's
#     remaining is the ledger's, not the one the client would have been told), and no order
#     that it never will ("not_taken", a fail that constrains nothing: a 409 left no trace);
#   - a cart's request_id: the cart writes it into each of its rows, all in one statement,
#     so its rows, one per item and all of one cart, mean it sold (an ok, its order_id that
#     cart, each item's remaining as a sale's above), and no row that it never will; rows
#     that disagree with the cart (an item missing or twice, another count, two carts, a cart
#     of other items) leave it unsettled: a cart is all or nothing, and the ledger finds
#     those rows acknowledged to nobody (phantom);
#   - a key (Idempotency-Key): the idempotency record is written in the sale's own
#     transaction (200, and the refusals 404/409), so a record with 200 means the sale
#     happened (an ok, with the remaining and order id its stored answer says), one with 409
#     a sold_out, and none that it never will ("not_taken").
# An `info` completion is replaced; an invocation that never completed gets its completion,
# stamped now (a moment after its effect, if it had one). An `info` settled as a sale is
# stamped now too, not at the moment its client gave up: the sale committed at some instant
# the client never saw, possibly after it gave up (a frozen server, a synchronous standby), and
# only "before the books settled" is certain; its invocation and completion move to a process
# of their own (HISTORY_SETTLED_PROCESS and up), as its client's later requests come before
# that completion. Prints how many were settled each way ("none": nothing was open, and
# resolved.jsonl is the raw history; "disagreeing": carts left unsettled).
history_resolve() {
    local dir=$1 now open=$1/.open res=$1/.settled
    history__open "$dir/.scan" >"$open"
    if [ ! -s "$open" ]; then
        cp "$dir/history.jsonl" "$dir/resolved.jsonl"
        rm -f "$open"
        echo none
        return 0
    fi
    now=$(history_now)
    history__settle_sql "$open" | psql -X -q -At -v ON_ERROR_STOP=1 -d "$(history__db)" >"$res" ||
        { rm -f "$open" "$res"; return 1; }
    history__settle "$dir/history.jsonl" "$res" "$now" | LC_ALL=C sort -s -t: -k2,2n \
        >"$dir/resolved.jsonl"
    # The scan of the settled history, for the ledger.
    history__scan "$dir/resolved.jsonl" "$dir/.scan"
    awk '{ n[/"status" *: *200[,}]/ ? "taken" : /"status" *: *-1[,}]/ ? "disagreeing" : "not_taken"]++ }
         END { s = ""; for (k in n) s = s (s == "" ? "" : ", ") n[k] " " k; print s }' "$res"
    rm -f "$open" "$res"
}

# history__settle HISTORY SETTLED NOW: HISTORY's lines with the outcomes of SETTLED
# (history__settle_sql's answers) in: the info lines replaced, the never-completed ones
# completed at NOW; a cart whose rows disagree is left as it was.
history__settle() {
    jq -c --slurpfile r <(jq -s --argjson base "$HISTORY_SETTLED_PROCESS" \
        'to_entries | map({(.value.name): (.value + {settled_process: ($base + .key)})}) | add // {}' "$2") \
        --arg now "$3" '
        def deduct($o):
            { goods_id: $o.goods }
            + (if $o.rid != "" then { request_id: $o.rid } else { key: $o.key } end)
            + (if $o.status == 200 then
                   ($o.body | fromjson) as $b
                   | { type: "ok", remaining: $b.remaining, order_id: $b.order_id }
               elif $o.status == 409 then { type: "fail", error: "sold_out" }
               elif $o.status != null and $o.status != 0 then
                   { type: "fail", error: (($o.body | fromjson? | .error) // "refused") }
               else { type: "fail", error: "not_taken" } end);
        def order($o):
            { request_id: $o.rid }
            + (if $o.status == 200 then { type: "ok", items: $o.items, order_id: $o.order_id }
               else { type: "fail", error: "not_taken" } end);
        def settled($o; $time):
            { time: $time, process: $o.process, f: $o.f, resolved: true }
            + (if $o.f == "order" then order($o) else deduct($o) end);
        ($r[0]) as $m
        | (.request_id // .key) as $name
        | (if $name == null then null else $m[$name] end) as $o
        | ($o != null and $o.f == .f and $o.status != -1) as $known
        | ($known and $o.how == "info" and $o.status == 200) as $sold
        | if .type == "info" and $sold
          then settled($o; ($now | tonumber)) | .process = $o.settled_process
          elif .type == "info" and $known then settled($o; .time)
          elif .type == "invoke" and $sold then .process = $o.settled_process
          else . end,
          (if .type == "invoke" and $known and $o.how == "open"
           then settled($o; ($now | tonumber)) else empty end)' "$1"
}

# history_ledger DIR: balances the books of each goods of the row (every goods it names) against
# DIR/resolved.jsonl (through its scan, DIR/.scan), writes DIR/ledger.txt and prints "ok"
# or what is wrong:
# An ok cart counts as one acknowledged order per item: its goods' row of that cart.
#   lost N       acknowledged orders (ok, or settled as taken) absent from the orders table
#   phantom N    orders in the table that no client was told of (a "failed" request that sold)
#   dup N        order ids told to two clients
#   units A/B    the units the history sold (A) differ from the orders' sum (B)
#   fence N      orders of one mode whose token went back in commit (id) order: a holder
#                with an older token wrote after a newer one (fenced modes only). The orders
#                do not name the token's source, and a token of a new source (Redis started
#                again empty, a failover) legitimately starts low: a row that changed the
#                source on purpose says how many times in HISTORY_SOURCE_CHANGES (default
#                0), and that many steps back are not counted. redis-sharded is left out:
#                each segment has a lock and a token counter of its own, and an order does
#                not say which segment's token it carries, so its tokens interleave.
history_ledger() {
    local dir=$1 out
    out=$({
        # (goods, order_id, count, cart) of every ok deduction (the count from its
        # invocation) and of every item of an ok order (its order_id the cart's, its count
        # the answer's), then every goods the history names. No JIT (see history_resolve).
        # A sale and a cart item are matched each by its own column (orders.id, orders.cart),
        # in an anti-join of its own: one match on a CASE of the two cannot use a hash or an
        # index, and compared every order with every answer (90,000 of each: over ten minutes).
        echo 'SET jit = off;'
        echo 'CREATE TEMP TABLE acked (goods bigint, order_id bigint, count bigint, cart boolean);'
        echo 'COPY acked FROM STDIN;'
        awk -F'\t' '$1 == "deduct" && $2 == "invoke" { n[$3] = $5; next }
                    $1 == "deduct" && $2 == "ok" { print $4 "\t" $6 "\t" n[$3] "\tf" }
                    $1 == "order" && $2 == "ok" { print $4 "\t" $6 "\t" $5 "\tt" }' "$dir/.scan"
        echo '\.'
        echo 'CREATE TEMP TABLE row_goods (goods bigint);'
        echo 'COPY row_goods FROM STDIN;'
        awk -F'\t' '$2 == "invoke" && !($4 in seen) { seen[$4] = 1; print $4 }' "$dir/.scan"
        echo '\.'
        cat <<'SQL'
SELECT g.goods,
       (SELECT count(*) FROM acked a WHERE a.goods = g.goods
           AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.goods = a.goods
                             AND NOT a.cart AND o.id = a.order_id)
           AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.goods = a.goods
                             AND a.cart AND o.cart = a.order_id)),
       (SELECT count(*) FROM orders o WHERE o.goods = g.goods
           AND NOT EXISTS (SELECT 1 FROM acked a WHERE a.goods = o.goods
                             AND NOT a.cart AND a.order_id = o.id)
           AND NOT EXISTS (SELECT 1 FROM acked a WHERE a.goods = o.goods
                             AND a.cart AND a.order_id = o.cart)),
       (SELECT count(*) - count(DISTINCT order_id) FROM acked a WHERE a.goods = g.goods),
       (SELECT coalesce(sum(count), 0) FROM acked a WHERE a.goods = g.goods),
       (SELECT coalesce(sum(count), 0) FROM orders o WHERE o.goods = g.goods),
       (SELECT count(*) FROM (SELECT fence, lag(fence) OVER (PARTITION BY mode ORDER BY id) AS prev
                                FROM orders o WHERE o.goods = g.goods AND fence IS NOT NULL
                                  AND o.mode <> 'redis-sharded') f
         WHERE f.fence < f.prev)
  FROM row_goods g ORDER BY g.goods;
SQL
    } | psql -X -q -At -F ' ' -v ON_ERROR_STOP=1 -d "$(history__db)") || {
        echo "error (psql failed)"
        return 1
    }
    printf '# goods lost phantom dup history_units order_units fence_back\n%s\n' "$out" \
        >"$dir/ledger.txt"
    awk -v allowed="${HISTORY_SOURCE_CHANGES:-0}" '{ lost += $2; phantom += $3; dup += $4; hu += $5; ou += $6; fence += $7 }
         END {
             fence = fence > allowed ? fence - allowed : 0
             s = ""
             if (lost) s = s sprintf(" lost %d", lost)
             if (phantom) s = s sprintf(" phantom %d", phantom)
             if (dup) s = s sprintf(" dup %d", dup)
             if (hu != ou) s = s sprintf(" units %d/%d", hu, ou)
             if (fence) s = s sprintf(" fence %d", fence)
             if (NR == 0 || $1 == "") s = " no goods"
             print (s == "" ? "ok" : substr(s, 2))
         }' <<<"$out"
}

# history_judge DIR [MODE]: the whole judgement of one row whose DIR/history.jsonl is written
# and whose books have settled: resolve, check the raw and the resolved history (against the
# model of MODE, history_model_for; the exact stock when no MODE is given), balance the
# books. Sets HISTORY_LINEARIZABLE ("yes (0.12 s)", "no (raw yes; resolved no; 0.30 s)",
# "yes (units model; 0.20 s)", "unchecked (no build/check-history)") and HISTORY_LEDGER
# ("ok", "lost 2", ...), and
# HISTORY_VERDICT (the first word: yes, no, unknown, malformed, error, unchecked) for the
# callers' --check. Writes DIR/verdict.txt with all three and the resolution's counts. When
# nothing was left open, the settled history is the raw one and is checked once.
history_judge() {
    local dir=$1 model raw resolved rv rs vv settled secs shown=''
    model=$(history_model_for "${2:-}")
    [ "$model" = stock ] || shown="$model model; "
    HISTORY_LINEARIZABLE='error' HISTORY_LEDGER='error' HISTORY_VERDICT=error
    if [ ! -s "$dir/history.jsonl" ]; then
        HISTORY_LINEARIZABLE='error (no history recorded)'
        return 0
    fi
    history__scan "$dir/history.jsonl" "$dir/.scan"
    settled=$(history_resolve "$dir") || settled="resolution failed (psql)"
    [ -s "$dir/resolved.jsonl" ] || cp "$dir/history.jsonl" "$dir/resolved.jsonl"
    HISTORY_LEDGER=$(history_ledger "$dir") || true
    rm -f "$dir/.scan"
    if [ ! -x "$CHECK_HISTORY" ]; then
        HISTORY_VERDICT=unchecked
        HISTORY_LINEARIZABLE="unchecked (no ${CHECK_HISTORY#"$HISTORY__ROOT"/})"
    else
        raw=$(history__check "$dir/history.jsonl" "$dir/check-raw.txt" "$model")
        if [ "$settled" = none ]; then
            resolved=$raw
            cp "$dir/check-raw.txt" "$dir/check-resolved.txt"
        else
            resolved=$(history__check "$dir/resolved.jsonl" "$dir/check-resolved.txt" "$model")
        fi
        rv=${raw% *} rs=${resolved% *}
        # The worse of the two: error, malformed, no, unknown, yes.
        for vv in error malformed no unknown yes; do
            if [ "$rv" = "$vv" ] || [ "$rs" = "$vv" ]; then break; fi
        done
        HISTORY_VERDICT=$vv
        if [ "$settled" = none ]; then
            secs=${raw#* }
        else
            secs=$(awk -v a="${raw#* }" -v b="${resolved#* }" 'BEGIN { printf "%.2f", a + b }')
        fi
        if [ "$rv" = "$rs" ]; then
            HISTORY_LINEARIZABLE="$vv ($shown$secs s)"
        else
            HISTORY_LINEARIZABLE="$vv (${shown}raw $rv; resolved $rs; $secs s)"
        fi
        rm -f "$dir/counterexample.txt"
        if [ "$rs" = no ]; then
            cp "$dir/check-resolved.txt" "$dir/counterexample.txt"
        elif [ "$rv" = no ]; then
            cp "$dir/check-raw.txt" "$dir/counterexample.txt"
        fi
    fi
    printf 'linearizable: %s\nledger: %s\nunknown outcomes settled: %s\n' \
        "$HISTORY_LINEARIZABLE" "$HISTORY_LEDGER" "$settled" >"$dir/verdict.txt"
}

# history_ok VERDICT LEDGER: true when a row that must be correct is: linearizable yes and
# the books balanced.
history_ok() {
    [ "${1%% *}" = yes ] && [ "$2" = ok ]
}
