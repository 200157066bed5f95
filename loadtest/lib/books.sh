# books.sh - the goods' books as every load tool reads them (sourced, bash).
# shellcheck shell=bash
# shellcheck disable=SC2034 # BOOKS, BOOKS_T0, BOOKS_T1 are for the caller
#
# A row of any load tool resets its goods, applies load, waits until the books stop
# changing (a request still in flight when the load stops keeps writing), then reads them.
# These are those steps, once. The service's answers are flat JSON objects, which is why a
# pattern match is enough to read a field. Nothing here exits: each function says by its
# status whether it did its job, and the tool decides what that means for its row.

# books_num JSON NAME: sets REPLY to the first value NAME has in JSON: a number, true/false,
# or a string's text; "" when absent. No process is started (a fork costs a tenth of a
# second on a loaded machine, and the tools call this in loops).
books_num() {
    local re="\"$2\":(-?[0-9]+(\\.[0-9]+)?|true|false|\"[^\"]*\")"
    REPLY=''
    if [[ $1 =~ $re ]]; then
        REPLY=${BASH_REMATCH[1]}
        REPLY=${REPLY#\"}
        REPLY=${REPLY%\"}
    fi
}

# books_sum JSON NAME: prints the sum of every integer NAME has in JSON (several stock
# reports concatenated: one figure over a row's goods).
books_sum() {
    grep -o "\"$2\":-\{0,1\}[0-9]\{1,\}" <<<"$1" | awk -F: '{ s += $2 } END { printf "%d", s }'
}

# books_reset BASE STOCK FIRST [COUNT]: POST BASE/api/admin/reset for goods FIRST ..
# FIRST+COUNT-1 (COUNT 1 by default), each to STOCK units, eight at a time (one after the
# other, 100 goods took 8 s of a short row). Sends ADMIN_TOKEN as a bearer token when it is
# set. Returns 0 when every reset answered {"ok":true...}; otherwise prints the goods that
# failed and its answer on stderr and returns 1.
books_reset() {
    local base=$1 stock=$2 first=$3 count=${4:-1} g pid failed=0 body
    local auth=() dir
    local -A running=() # pid -> goods
    [ -z "${ADMIN_TOKEN:-}" ] || auth=(-H "Authorization: Bearer $ADMIN_TOKEN")
    dir=$(mktemp -d) || return 1
    for ((g = first; g < first + count; g++)); do
        curl -sS --max-time 10 -X POST -H 'Content-Type: application/json' "${auth[@]}" \
            -d "{\"goods_id\":$g,\"stock\":$stock}" "$base/api/admin/reset" >"$dir/$g" 2>&1 &
        running[$!]=$g
        if [ ${#running[@]} -ge 8 ] || [ $((g + 1)) -eq $((first + count)) ]; then
            for pid in "${!running[@]}"; do
                wait "$pid" || true
                body=$(<"$dir/${running[$pid]}")
                if [[ $body != *'"ok":true'* ]]; then
                    echo "reset of goods ${running[$pid]} failed: $body" >&2
                    failed=1
                fi
            done
            running=()
        fi
    done
    rm -rf "$dir"
    return "$failed"
}

# books_read BASE FIRST [COUNT]: prints GET BASE/api/stock/N for goods FIRST ..
# FIRST+COUNT-1, concatenated: one read of the books. Returns 1 when a read failed.
books_read() {
    local base=$1 first=$2 count=${3:-1} g urls=()
    for ((g = first; g < first + count; g++)); do
        urls+=("$base/api/stock/$g")
    done
    curl -sS --fail --max-time 10 "${urls[@]}"
}

# books_settle INTERVAL TRIES BASE FIRST [COUNT]: reads the books (books_read) until two
# non-empty reads INTERVAL seconds apart agree, at most TRIES more reads. Sets BOOKS to the
# last read, and BOOKS_T0 / BOOKS_T1 to the history clock just before and just after it
# (history_now, when loadtest/lib/history.sh is sourced; empty otherwise): that last read
# is the one a history closes with. Returns 1 when the books were still changing (or never
# answered) after TRIES reads; BOOKS then holds the last read. Runs in the caller's shell
# (no subshell), so the variables stay set.
books_settle() {
    local interval=$1 tries=$2 base=$3 first=$4 count=${5:-1} before i timed=0
    declare -F history_now >/dev/null && timed=1
    BOOKS_T0='' BOOKS_T1=''
    before=$(books_read "$base" "$first" "$count" 2>/dev/null) || before=''
    for ((i = 0; i < tries; i++)); do
        sleep "$interval"
        [ "$timed" = 0 ] || BOOKS_T0=$(history_now)
        BOOKS=$(books_read "$base" "$first" "$count" 2>/dev/null) || BOOKS=''
        [ "$timed" = 0 ] || BOOKS_T1=$(history_now)
        [ -z "$BOOKS" ] || [ "$BOOKS" != "$before" ] || return 0
        before=$BOOKS
    done
    return 1
}
