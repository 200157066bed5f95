# metrics.sh - what the replicas' /metrics say about a row (sourced, bash).
# shellcheck shell=bash
#
# Each reading is taken just before a row's load and just after it; the row's figure is the
# difference. A replica that does not answer reads as zero, so a row still gets its other
# figures (its column then says "-").

# metrics__get URL: the replica's /metrics text (nothing when it does not answer in 5 s).
metrics__get() {
    curl -s --max-time 5 "$1/metrics" || true
}

# metrics__sum_count NAME URL...: "sum count" of the histogram NAME for each replica base URL
# given, one line each, in the order given ("0 0" for one that does not answer).
metrics__sum_count() {
    local name=$1 url
    shift
    for url in "$@"; do
        metrics__get "$url" |
            awk -v n="$name" '$1 == n "_sum" { s = $2 } $1 == n "_count" { c = $2 }
                 END { printf "%s %s\n", s + 0, c + 0 }'
    done
}

# metrics_lock_waits URL...: prints "sum_seconds count" of stock_lock_wait_seconds for each
# replica base URL given, one line each, in the order given ("0 0" for one that does not
# answer).
metrics_lock_waits() {
    metrics__sum_count stock_lock_wait_seconds "$@"
}

# metrics_lock_wait_means BEFORE AFTER: the mean lock wait of each replica between two
# metrics_lock_waits readings, in ms, printed as "a/b/c" ("-" for a replica that waited for
# no lock).
metrics_lock_wait_means() {
    paste -d' ' <(echo "$1") <(echo "$2") |
        awk '{ n = $4 - $2; printf "%s%s", (NR > 1 ? "/" : ""), (n > 0 ? sprintf("%.1f", 1000 * ($3 - $1) / n) : "-") }'
}

# metrics_handoffs URL...: the stock_lock_handoff_seconds histogram summed over the replicas
# given, one "le count" line per bucket (cumulative) and "sum S": the gap from a release to
# the take by the head of the line.
metrics_handoffs() {
    local url
    for url in "$@"; do
        metrics__get "$url" |
            sed -n 's/^stock_lock_handoff_seconds_bucket{le="\([^"]*\)"} /\1 /p; s/^stock_lock_handoff_seconds_sum /sum /p'
    done | awk '{ if (!($1 in s)) o[n++] = $1; s[$1] += $2 } END { for (i = 0; i < n; i++) print o[i], s[o[i]] }'
}

# metrics_handoff_summary BEFORE AFTER: "N hand-offs, median <= X ms, mean Y ms" between two
# metrics_handoffs readings ("-" when there was none).
metrics_handoff_summary() {
    paste -d' ' <(echo "$1") <(echo "$2") | awk '
        $1 == "sum" { sum = $4 - $2; next }
        { le[n] = $1; c[n] = $4 - $2; n++ }
        END {
            total = n ? c[n - 1] : 0
            if (total <= 0) { print "-"; exit }
            for (i = 0; i < n && c[i] < total / 2; i++) ;
            printf "%d hand-offs, median <= %s ms, mean %.2f ms", total,
                (le[i] == "+Inf" ? "+Inf" : sprintf("%g", le[i] * 1000)), 1000 * sum / total }'
}

# metrics_batches URL...: "sum count" of stock_batch_requests summed over the replicas given
# (redis-batch's batches: requests answered, and holdings of the lock).
metrics_batches() {
    metrics__sum_count stock_batch_requests "$@" | awk '{ s += $1; c += $2 } END { printf "%d %d\n", s, c }'
}

# metrics_batch_summary BEFORE AFTER: "N batches, M requests each on average" between two
# metrics_batches readings ("-" when there was none).
metrics_batch_summary() {
    paste -d' ' <(echo "$1") <(echo "$2") |
        awk '{ n = $4 - $2; r = $3 - $1
               if (n <= 0) print "-"; else printf "%d batches, %.1f requests each on average", n, r / n }'
}

# metrics_retries URL...: stock_optimistic_retries_total summed over the replicas given (the
# transactions pg-optimistic and pg-serializable ran again after a lost race).
metrics_retries() {
    local url
    for url in "$@"; do
        metrics__get "$url"
    done | awk '$1 == "stock_optimistic_retries_total" { s += $2 } END { printf "%d\n", s }'
}

# metrics_retry_summary BEFORE AFTER SOLD: "N transactions run again, R per sale" between two
# metrics_retries readings, over SOLD sales ("-" when none ran again).
metrics_retry_summary() {
    awk -v b="$1" -v a="$2" -v s="$3" 'BEGIN {
        n = a - b
        if (n <= 0) print "-"
        else printf "%d transactions run again, %.2f per sale", n, (s > 0 ? n / s : 0) }'
}

# metrics_context_switches URL...: the context switches of the replicas given so far, both
# kinds of stock_process_context_switches_total summed over them (the whole process's, ended
# threads too); nothing when one of them does not answer (a sum without it is no figure).
metrics_context_switches() {
    local url n total=0
    for url in "$@"; do
        n=$(metrics__get "$url" |
            awk '$1 ~ /^stock_process_context_switches_total\{/ { s += $2; seen = 1 }
                 END { if (seen) printf "%d\n", s }')
        [ -n "$n" ] || return 0
        total=$((total + n))
    done
    echo "$total"
}
