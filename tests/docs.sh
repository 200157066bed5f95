# tests/docs.sh - the documents checked against the code, as a test (sourced by
# tests/run-all.sh and tests/run-unit.sh; bash).
#
# run_docs_check counts one case per check of scripts/docs.sh (make docs-check runs them all
# at once): the chapters numbered without a gap, a chapter and a line of README.md's table
# for every mode of service/modes.c, every file and name a document gives existing, every
# quote equal to its source, every link leading somewhere, every timeline what its events
# draw, and no mention of the project's own work items. A few seconds: no server, no build.

run_docs_check() {
    local c
    check_group_begin "docs-check"
    for c in numbering modes files names quotes links timelines work-items; do
        check "docs: $c" scripts/docs.sh --check "$c"
    done
    check_group_end
}
