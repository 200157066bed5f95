# audit.sh - the ledger audit every load tool runs after each row (sourced, bash).
# shellcheck shell=bash
#
#   stock_audit BASE_URL GOODS [COUNT]
#
# GET /api/stock/N?audit=1 for goods GOODS .. GOODS+COUNT-1 (COUNT 1 by default): the
# report's sold and orders come from counters kept beside the orders
# (migrations/008_goods_sales.sql), and the audit sums the orders themselves in the same
# snapshot. Returns 0 when every goods' two agree; otherwise prints one line per goods that
# does not (or whose audit could not be read) on stderr and returns 1: the row's figures are
# not to be trusted. Its cost grows with the orders (a scan of each goods' orders), which is
# why it runs once per row and not while the load runs.
stock_audit() {
    local base=$1 first=$2 count=${3:-1} g body failed=0
    for ((g = first; g < first + count; g++)); do
        if ! body=$(curl -sS --fail --max-time 30 "$base/api/stock/$g?audit=1" 2>&1); then
            echo "audit of goods $g: no answer: $body" >&2
            failed=1
        elif [[ $body != *'"agrees":true'* ]]; then
            echo "audit of goods $g: the counters and the orders disagree: $body" >&2
            failed=1
        fi
    done
    return "$failed"
}
