# floor.sh - the serial floor of a `redis` sale beside a serial sale stage by stage, as every
# report prints them (sourced, bash): loadtest/limits measures both (its LIMIT, FLOOR and
# BREAKDOWN lines), and loadtest/scale (`make scale`) and loadtest/run (`make demo`) print
# them with this one function, so that no two reports give one figure two ways.
# shellcheck shell=bash

# floor_report LIMITS CEILING [WHENCE]: Markdown on stdout. LIMITS is loadtest/limits'
# output; CEILING, redis's serial ceiling in sales a second (build/ceiling-bench: one client,
# no HTTP) measured in the same run, or "" when none was; WHENCE says which measurement it is
# (words after "one client, no HTTP, "). The table's first cells are its keys
# (scripts/docs.sh pastes rows by them): acquire, claim, commit, release, rest, the sale,
# the replica's HTTP, outside the replica, one request.
floor_report() {
    awk -v ceiling="${2:-}" -v whence="${3:-}" '
        function kv(line, into,    i, n, f, k) {
            n = split(line, f, " ")
            for (i = 2; i <= n; i++) { k = f[i]; sub(/=.*/, "", k); into[k] = substr(f[i], length(k) + 2) }
        }
        function rate(us) { return us > 0 ? sprintf(" (%.0f/s)", 1e6 / us) : "" }
        /^LIMIT / { delete l; kv($0, l); if (l["us"] != "") part[l["name"]] = l["us"] }
        /^FLOOR / { kv($0, fl); has_floor = fl["sale_us"] + 0 > 0 }
        /^BREAKDOWN / { kv($0, b); has_b = b["sales"] + 0 > 0 }
        END {
            print "The serial floor of one `redis` sale (`loadtest/limits`: each part alone, one client, in the"
            print "order the sale waits: the lock'\''s `EVALSHA`, `BEGIN` and the fenced claim in one PostgreSQL round"
            print "trip, the write, the order and `COMMIT` in one round trip with its flush, the release sent beside"
            print "`COMMIT`), beside a serial sale as the replica'\''s own clock saw it (its `/metrics`: one client"
            print "straight to one replica, one request at a time; each figure the mean over its sales, in µs)."
            print ""
            print "| stage | the floor, µs | a serial sale, µs |"
            print "|---|---:|---:|"
            f = has_floor; s = has_b
            printf "| acquire | %s | %s |\n", f ? fl["acquire_us"] : "-", s ? b["acquire_us"] : "-"
            printf "| claim | %s | %s |\n", f ? fl["claim_us"] : "-", s ? b["claim_us"] : "-"
            printf "| commit | %s | %s |\n", f ? fl["commit_us"] : "-", s ? b["commit_us"] : "-"
            printf "| release | %s | %s |\n", f ? fl["release_us"] : "-", s ? b["release_us"] : "-"
            printf "| rest | - | %s |\n", s ? b["rest_us"] : "-"
            printf "| the sale | %s | %s |\n", f ? fl["sale_us"] rate(fl["sale_us"]) : "-",
                s ? b["sale_us"] rate(b["sale_us"]) : "-"
            printf "| the replica'\''s HTTP | - | %s |\n",
                s ? sprintf("%.1f (worker %s, JSON %s, around %s)", b["queue_us"] + b["json_us"] + b["around_us"],
                    b["queue_us"], b["json_us"], b["around_us"]) : "-"
            printf "| outside the replica | - | %s |\n", s ? b["outside_us"] : "-"
            printf "| one request | - | %s |\n", s ? b["client_us"] rate(b["client_us"]) : "-"
            print ""
            print "acquire: the lock taken; claim: `BEGIN`, the fenced claim that reads the stock, the check in C;"
            print "commit: the write, the order, `COMMIT` and its flush (the floor: `pg-commit-1`); release: the lock"
            print "given back (in the sale, while `COMMIT` travels: counted here, not in commit; the floor counts only"
            print "what it takes past the commit); rest: a pooled connection, the answer built; the replica'\''s HTTP:"
            print "waiting for a worker, the handler'\''s JSON, and the rest of its handling (body read, hand-overs);"
            print "outside the replica: the loopback and the client. The parts alone: Redis `PING` " \
                (part["redis-ping-1"] != "" ? part["redis-ping-1"] : "-") " µs, `EVALSHA` " \
                (part["redis-evalsha-1"] != "" ? part["redis-evalsha-1"] : "-") " µs, PostgreSQL `SELECT 1` " \
                (part["pg-select1-1"] != "" ? part["pg-select1-1"] : "-") " µs, a commit " \
                (part["pg-commit-1"] != "" ? part["pg-commit-1"] : "-") " µs, `fdatasync` " \
                (part["fdatasync"] != "" ? part["fdatasync"] : "-") " µs" \
                (s ? "; the serial sale: " b["sales"] " sales, machine busy " b["busy"] ", load " b["load1"] : "") "."
            if (!has_floor) print "The floor was not measured" (fl["error"] != "" ? " (" fl["error"] ")" : "") "."
            if (!has_b) print "The serial sale was not measured" (b["error"] != "" ? " (" b["error"] ")" : "") "."
            if (ceiling + 0 > 0 && has_floor)
                printf "\nredis'\''s serial ceiling (`build/ceiling-bench`, one client, no HTTP%s): %.0f sales/s, %.1f µs a sale: %.2f of the floor'\''s %.0f sales/s.\n",
                    whence != "" ? ", " whence : "", ceiling, 1e6 / ceiling, ceiling / fl["sales_per_s"], fl["sales_per_s"]
        }' "$1"
}
