# tests/docs.sh - the documents checked against the code, as a test (sourced by
# tests/run-all.sh and tests/run-unit.sh; bash).
#
# run_docs_check runs scripts/docs.sh --check once (what make docs-check runs) and counts one
# case per check it reports: the chapters numbered without a gap, a chapter and a line of
# README.md's table for every mode of service/guards/modes.c, every file and name a document gives
# existing, every quote equal to its source, every link leading somewhere, every timeline
# what its events draw, every chapter with a figure, a "try it" and a link to the next, and
# no mention of the project's own work items; then all of them again
# in a copy of the tree without .git (an archive of the repository, as a packager builds
# from). No server, no build: a few seconds, spent mostly waiting for a busy machine to run
# its few processes.

run_docs_check() {
    local log=$HARNESS_LOG_DIR/docs-check.log line name
    check_group_begin "docs-check"
    scripts/docs.sh --check >"$log" 2>&1 || true
    while IFS= read -r line; do
        case $line in
        'docs-check: '*': ok' | 'docs-check: '*': FAILED') ;;
        *) continue ;;
        esac
        name=${line#docs-check: }
        name=${name%: *}
        check "docs: $name" docs__passed "$log" "$name"
    done <"$log"
    # A script that stopped before reporting its checks must not pass.
    check "docs: every check reported" docs__all_reported "$log"
    check "docs: the same checks in a tree without .git" docs__without_git
    check_group_end
}

docs__passed() {
    grep -qxF "docs-check: $2: ok" "$1" && return 0
    grep -v '^docs-check: [a-z-]*: \(ok\|FAILED\)$' "$1" | sed 's/^/    /' >&2
    return 1
}

docs__all_reported() {
    [ "$(grep -cE '^docs-check: [a-z-]+: (ok|FAILED)$' "$1")" -eq 9 ] || {
        tail -5 "$1" >&2
        return 1
    }
}

# The tree's files copied without .git, and every check run there: none may lean on git.
docs__without_git() {
    local dir rc=0
    dir=$(mktemp -d)
    scripts/docs.sh --files | tar -cf - -T - | tar -xf - -C "$dir"
    if [ -e "$dir/.git" ] || ! (cd "$dir" && scripts/docs.sh --check) >"$dir.log" 2>&1; then
        rc=1
        grep -v ': ok$' "$dir.log" | head -20 | sed 's/^/    /' >&2
    fi
    rm -rf "$dir" "$dir.log"
    return "$rc"
}
