# tests/replay.sh - the replay page as a test (sourced by tests/run-all.sh; bash).
#
# run_replay opens docs/replay/index.html?selftest=1 as a file in Debian's Chromium, headless:
# the page plays every row it holds (docs/replay/rows.js: every committed events file of the
# course) to its last step through its own buttons and writes one line per row, then the
# JavaScript errors it counted. One case per committed events file (played to its last step,
# its books at the end as the run reported them), one that no JavaScript error happened. No server, no stack: the seconds Chromium takes to start.

run_replay() {
    local log=$HARNESS_LOG_DIR/replay-page.log profile ev
    check_group_begin "replay-page"
    if ! command -v chromium >/dev/null; then
        check "chromium is installed (scripts/deps.sh ensure browser)" false
        check_group_end
        return 0
    fi
    profile=$(mktemp -d "${TMPDIR:-/tmp}/stock-replay.XXXXXX")
    timeout --kill-after=10 90 chromium --headless --no-sandbox --disable-gpu --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-dev-shm-usage --user-data-dir="$profile" \
        --dump-dom "file://$PWD/docs/replay/index.html?selftest=1" >"$log" 2>/dev/null || true
    rm -rf "$profile"
    sed -i 's/^.*<pre id="selftest">//; s/<\/pre>.*$//' "$log"
    # One case per committed events file: played to its end, its books as reported.
    for ev in docs/course/timelines/*.events docs/course/schematics/*.events; do
        [ -e "$ev" ] || continue
        check "replay: ${ev#docs/course/}" replay__played "$log" "${ev#docs/course/}"
    done
    check "replay: the page ran to its end with no JavaScript error" grep -qE '^done [0-9]+ rows, [0-9]+ failed, 0 errors$' "$log"
    check_group_end
}

replay__played() {
    grep -q "^ok $2 " "$1" && return 0
    grep "^FAIL $2:" "$1" >&2 || echo "    $2: not played (not in docs/replay/rows.js? make docs)" >&2
    return 1
}
