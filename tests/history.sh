# tests/history.sh - the shell steps of a history as a test (sourced by tests/run-all.sh; bash).
#
# run_history_lib BUILD_DIR checks the parts of loadtest/lib/history.sh that need no server:
# that an answer is put in the class the API promises for it (ok, fail or info, with its
# error), that the merged history is in time order, and that BUILD_DIR's history-clock is
# monotonic. The settling and the ledger need a database: loadtest/ladder runs them on
# every row (tests/ladder.sh).

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
    local line
    history_answer "$HISTORY__TEST_DIR/answer.jsonl" 3 5 k-1 123 "$1" "$2"
    line=$(<"$HISTORY__TEST_DIR/answer.jsonl")
    rm -f "$HISTORY__TEST_DIR/answer.jsonl"
    [[ $line == *"$3"* ]] && [[ $line == '{"time":123,"process":3,'* ]] || {
        echo "    got: $line" >&2
        return 1
    }
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
