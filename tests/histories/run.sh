#!/usr/bin/env bash
# run.sh BUILD_DIR - runs BUILD_DIR/check-history on every committed history under
# tests/histories/ and requires the verdict its name states:
#   stock/*.yes.jsonl, *.no.jsonl, *.malformed.jsonl      the stock model (exit 0, 1, 2; a
#                                                          malformed one for the reason that
#                                                          malformed.tsv gives it)
#   orders/*.jsonl                                         the stock model with carts (`order`)
#   knossos/*.jsonl, porcupine/*.jsonl                     --model register, the published
#                                                          verdict (PROVENANCE)
# plus generated load histories (BUILD_DIR/history-gen): a legal one must say yes and an
# illegal one no, with a window of a few operations; the same for a load of carts over 5 goods.
# Each history is one case; the counts are printed in cmocka's summary form, so that the
# harness (tests/lib/harness.sh) counts them like a unit suite's.
set -uo pipefail

[ $# -eq 1 ] || { echo "usage: tests/histories/run.sh BUILD_DIR" >&2; exit 2; }
build=$1
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
checker=$build/check-history
[ -x "$checker" ] || { echo "run.sh: $checker missing (make B=$build tests)" >&2; exit 1; }
passed=0
failed=0
tmp=$(mktemp -d "${TMPDIR:-/tmp}/histories.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# expect NAME WANT COMMAND...: WANT is yes, no or malformed.
expect() {
    local name=$1 want=$2 rc last code
    shift 2
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    last=$(tail -n 1 "$tmp/out")
    case $want in
    yes) code=0 ;;
    no) code=1 ;;
    malformed) code=2 ;;
    esac
    if [ "$rc" -eq "$code" ] && { [ "$want" = malformed ] || [ "$last" = "linearizable: $want" ]; } &&
        { [ "$want" != malformed ] || { grep -q 'line [0-9]' "$tmp/out" && malformed_for "$name"; }; }; then
        passed=$((passed + 1))
        return 0
    fi
    failed=$((failed + 1))
    echo "[  FAILED  ] $name: wanted $want (exit $code), got exit $rc, last line: $last"
    sed 's/^/    /' "$tmp/out" | head -20
    return 1
}

# malformed_for NAME: the checker's reason ($tmp/out) holds the one malformed.tsv gives NAME.
malformed_for() {
    local why
    why=$(awk -F '\t' -v n="$1" '$1 == n { print $2 }' "$dir/malformed.tsv")
    [ -n "$why" ] || { echo "    no reason for $1 in tests/histories/malformed.tsv"; return 1; }
    grep -qF -- "$why" "$tmp/out" || { echo "    wanted the reason: $why"; return 1; }
}

verdict_of() { # NAME.VERDICT.jsonl -> VERDICT
    local b=${1%.jsonl}
    echo "${b##*.}"
}

for f in "$dir"/stock/*.jsonl "$dir"/orders/*.jsonl; do
    set=${f%/*}
    expect "${set##*/}/${f##*/}" "$(verdict_of "$f")" "$checker" "$f"
done
# The register histories in one run (--each: a verdict line per file), as a sanitizer
# build's start-up would otherwise cost more than the checks.
for set in knossos porcupine; do
    "$checker" --model register --each "$dir"/$set/*.jsonl >"$tmp/each" 2>&1
    for f in "$dir"/$set/*.jsonl; do
        want=$(verdict_of "$f")
        if grep -qxF "$f: linearizable: $want" "$tmp/each"; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
            echo "[  FAILED  ] $set/${f##*/}: wanted $want, got: $(grep -F "$f: " "$tmp/each")"
        fi
    done
done
# And one of each verdict alone, for the exit status and the last line.
expect "knossos/bad-analysis.no.jsonl alone" no "$checker" --model register "$dir/knossos/bad-analysis.no.jsonl"
expect "porcupine/etcd_002.yes.jsonl alone" yes "$checker" --model register "$dir/porcupine/etcd_002.yes.jsonl"

# Generated load histories: 64 processes, 5000 operations (a legal one and, with one
# answer changed, an illegal one whose window must be small).
if [ -x "$build/history-gen" ]; then
    "$build/history-gen" --ops 5000 --procs 64 --seed 7 >"$tmp/load.jsonl"
    expect "generated: 5000 operations, legal" yes "$checker" "$tmp/load.jsonl"
    for bad in dup read sold_out; do
        "$build/history-gen" --ops 5000 --procs 64 --seed 7 --bad $bad >"$tmp/bad.jsonl"
        if expect "generated: 5000 operations, --bad $bad" no "$checker" "$tmp/bad.jsonl"; then
            n=$(sed -n 's/.*no order explains these \([0-9]*\) operations.*/\1/p' "$tmp/out")
            if [ -z "$n" ] || [ "$n" -gt 100 ]; then
                passed=$((passed - 1))
                failed=$((failed + 1))
                echo "[  FAILED  ] generated --bad $bad: the window has ${n:-no} operations (wanted at most 100)"
            fi
        fi
    done
    # Carts over 5 goods (all tied), as the demo's cart row sends them: a legal load, and one
    # with a sale told the remaining of the sale before it.
    "$build/history-gen" --ops 5000 --procs 50 --goods 5 --stock 1000 --carts 100 --seed 7 >"$tmp/carts.jsonl"
    expect "generated: 5000 carts over 5 goods, legal" yes "$checker" "$tmp/carts.jsonl"
    "$build/history-gen" --ops 5000 --procs 50 --goods 5 --carts 50 --seed 7 --bad dup >"$tmp/carts.jsonl"
    expect "generated: carts and deducts over 5 goods, --bad dup" no "$checker" "$tmp/carts.jsonl"
else
    failed=$((failed + 1))
    echo "[  FAILED  ] $build/history-gen missing"
fi

echo "[==========] $((passed + failed)) histories checked."
echo "[  PASSED  ] $passed test(s)."
[ "$failed" -eq 0 ] || echo "[  FAILED  ] $failed test(s), listed above."
[ "$failed" -eq 0 ]
