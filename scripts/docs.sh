#!/usr/bin/env bash
# scripts/docs.sh - keeps the course (docs/course/) true to the code, and checks every
# document's references.
#
#   scripts/docs.sh --write          fill in what the build quotes (below), in place, and the
#                                    replay's rows (docs/replay/rows.js)
#   scripts/docs.sh --check [WHAT]   exit 1, saying where, when a document is wrong; WHAT is
#                                    one of the checks below (all of them by default)
#   scripts/docs.sh --files          the files of the tree the checks read, one a line (with
#                                    .git: git's; without: every file but the build's)
#
# What the build quotes, so that it cannot drift: in a chapter,
#   <!-- quote: FILE:FUNCTION -->            the function's definition, from its first line
#   <!-- quote: FILE:FUNCTION:A-B -->        lines A to B of it (1 = its first line)
#   <!-- quote: FILE:/REGEX/ -->             from the first line matching REGEX to the line
#                                            before the next blank one (a Lua script's body,
#                                            one statement of db/statements.c)
#   ``` ... ```
#   <!-- /quote -->
# and
#   <!-- ladder-row: RUNG SCENARIO -->       that row of the ladder table the timelines were
#   | ... |                                  drawn from (docs/course/timelines/table.md),
#   <!-- /ladder-row -->                     under the table's header
# and
#   <!-- rows: FILE#HEADING KEY; KEY... [cols: COLUMN, COLUMN...] -->
#   | ... |                                  the rows, under that heading of FILE (a lab
#   <!-- /rows -->                           note), whose first cells are KEY ("none | 3":
#                                            its first two), all from one table, under its
#                                            header; only the COLUMNs named, when named
# so that a figure a chapter quotes is pasted from the one record of its run.
#
# The checks (make docs-check runs them all; make test counts each as one case):
#   numbering   the chapters are docs/course/NN-*.md, 01 up without a gap, each titled
#               "# N. ..."
#   modes       every mode of service/guards/modes.c's table has a chapter (its name in a chapter's
#               title) and a line of README.md's table linking to it, under that number, and
#               a file service/guards/modes/<mode>.c ('-' as '_') that its chapter names
#   files       every path a document names in backticks (service/..., lock/..., ...) exists
#   names       every function, statement, setting or script name a chapter names in
#               backticks (snake_case with an underscore, DB__*, SETTING_NAMES) is a word of
#               the sources
#   quotes      every quote and ladder row is what the build would put there now
#   links       every link between files of the repository leads to a file, and a link to
#               a heading (#...) to a heading that exists
#   timelines   every drawing under docs/course/timelines/ (a ladder row's) and
#               docs/course/schematics/ (steps written by hand) is what loadtest/timeline
#               draws from its events, every row of the ladder's table has one, every
#               drawing is linked from a chapter, and the replay page's docs/replay/rows.js
#               holds every events file as it is
#   chapters    every chapter has a figure (![...](...svg|png)) and a **Try it.** paragraph that
#               runs one of its ladder rows (loadtest/ladder --only RUNG:SCENARIO), links the
#               lab's level of its rung (?level=ID, from web/lab/lab.js) and gives a command to
#               type; it links the next chapter (the last: flaws.md), and every "[Chapter N]"
#               link leads to chapter N
#   work-items  no file names the project's own work items (the word "issue" and a number)
# The file lists below are split on purpose (no path of the tree has a space), and the checks
# are called by name from --check.
# shellcheck disable=SC2046,SC2317,SC2086
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export LC_ALL=C # bytes, not characters: grep, sort and awk run several times faster

COURSE=docs/course
TIMELINES=$COURSE/timelines
SCHEMATICS=$COURSE/schematics
REPLAY_ROWS=docs/replay/rows.js
# The documents whose links and paths are checked; the chapters' names too.
docs_all() {
    ls README.md CONTRIBUTING.md tests/README.md lock/README.md service/README.md docker/README.md \
        docs/*.md "$COURSE"/*.md docs/lab/*.md 2>/dev/null
}
chapters() { ls "$COURSE"/[0-9][0-9]-*.md 2>/dev/null; }
# Where the names a chapter uses must be found.
SOURCES=(service lock db history migrations tests loadtest bench scripts web nginx docker Makefile)

FAILED=0
fail() {
    echo "docs-check: $*" >&2
    FAILED=1
}

# Every check runs a handful of processes, not one per item: on a busy machine a fork costs
# tens of milliseconds, and make test gives this script a few seconds.

# ---- the expansion of quotes and ladder rows (one awk per document) ----

# expand MODE FILE...: every FILE with its quotes and ladder rows filled in as they should be,
# in one awk. MODE "write": each FILE that changes is written again, and named on stdout.
# MODE "check": the FILEs that would change are named on stdout, nothing is written. A
# reference that cannot be filled is reported on stderr ("FILE: MISSING ...") and left marked.
expand() {
    local mode=$1
    shift
    awk -v table="$TIMELINES/table.md" -v mode="$mode" '
        function lang(f) {
            if (f ~ /\.[ch]$/) return "c"
            if (f ~ /\.lua$/) return "lua"
            if (f ~ /\.sql$/) return "sql"
            if (f ~ /\.sh$/) return "bash"
            return ""
        }
        # The lines of file that spec names, joined by newlines ("" when none).
        function extract(file, spec,    re, count, n, got, on, line, fn, from, to, k, out) {
            out = ""
            if (substr(spec, 1, 1) == "/") {
                re = substr(spec, 2)
                count = ""
                if (match(re, /\/:[0-9]+$/)) { count = substr(re, RSTART + 2) + 0; re = substr(re, 1, RSTART - 1) }
                else sub(/\/$/, "", re)
                on = 0; n = 0
                while ((getline line < file) > 0) {
                    if (!on && line ~ re) on = 1
                    if (on && count == "" && line ~ /^[ \t]*$/) break
                    if (on) { out = out (n ? "\n" : "") line; n++; if (count != "" && n >= count) break }
                }
            } else {
                fn = spec; from = 1; to = 999999
                if (index(spec, ":")) {
                    fn = substr(spec, 1, index(spec, ":") - 1)
                    k = substr(spec, index(spec, ":") + 1)
                    from = substr(k, 1, index(k, "-") - 1) + 0
                    to = substr(k, index(k, "-") + 1) + 0
                }
                on = 0; n = 0; got = 0
                while ((getline line < file) > 0) {
                    # A definition: the name at the start of a line, or after its type on the
                    # same line, followed by "(", and not a declaration (no ";" at the end).
                    if (!on && (line ~ ("^" fn "\\(") || line ~ ("^[A-Za-z].*[ *]" fn "\\(")) && line !~ /;[ \t]*$/) on = 1
                    if (on) {
                        n++
                        if (n >= from && n <= to) { out = out (got ? "\n" : "") line; got++ }
                        if (line ~ /^}/) break
                    }
                }
            }
            close(file)
            return out
        }
        function ladder_row(rung, scen,    line, h1, h2, out) {
            out = ""
            while ((getline line < table) > 0) {
                if (line ~ /^\| rung \|/) { h1 = line; getline h2 < table; continue }
                if (index(line, "| `" rung "` | " scen ":") == 1) { out = h1 "\n" h2 "\n" line; break }
            }
            close(table)
            return out
        }
        # The anchor of a heading, as check_links computes it.
        function anchor_of(h) {
            sub(/^#+ +/, "", h); h = tolower(h); gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
            return h
        }
        function trim(x) { gsub(/^ +| +$/, "", x); return x }
        # The cells of a table line, trimmed, in c[1..n]; returns n.
        function cells(line, c,    n, i, raw) {
            n = split(line, raw, "|")
            for (i = 2; i < n; i++) c[i - 1] = trim(raw[i])
            return n - 2
        }
        # A line of the chosen columns (idx[1..nc], positions in the full row).
        function pick(line, idx, nc,    c, n, i, out) {
            n = cells(line, c)
            if (nc == 0) return line
            out = "|"
            for (i = 1; i <= nc; i++) out = out " " c[idx[i]] " |"
            return out
        }
        function table_rows(spec,    file, anc, rest, keys, cols, nk, key, nc, colname, idx, line, on, h1, h2, hc, nh, i, j, out, c, k, kc, ok, got, n, row, a, seen, cur, curh2, al, fenced) {
            file = substr(spec, 1, index(spec, "#") - 1)
            rest = substr(spec, index(spec, "#") + 1)
            anc = substr(rest, 1, index(rest, " ") - 1)
            rest = substr(rest, index(rest, " ") + 1)
            cols = ""; keys = rest
            if (index(rest, " cols: ")) { cols = substr(rest, index(rest, " cols: ") + 7); keys = substr(rest, 1, index(rest, " cols: ") - 1) }
            nk = split(keys, key, /; */)
            nc = cols == "" ? 0 : split(cols, colname, /, */)
            on = 0; out = ""; got = 0
            while ((getline line < file) > 0) {
                # The anchor of a heading; the second of one name gets "-1", as check_links counts.
                if (line ~ /^#+ /) {
                    if (on) break
                    a = anchor_of(line); a = (seen[a]++ ? a "-" (seen[a] - 1) : a)
                    if (a == anc) on = 1
                    continue
                }
                if (!on) continue
                if (line ~ /^```/) { fenced = !fenced; cur = ""; continue }
                if (fenced) continue
                # Every table under the heading: a key is looked for in each, the first match
                # kept with its table header; the keys must all come from one table.
                if (line !~ /^\|/) { cur = ""; continue }
                if (cur == "") {
                    # A table starts with its header and a line of dashes; else it is none.
                    cur = line; getline curh2 < file
                    if (curh2 !~ /^\|[ :-]*-[ :|-]*$/) cur = ""
                    continue
                }
                n = cells(line, c)
                for (j = 1; j <= nk; j++) {
                    if (j in row) continue
                    k = split(key[j], kc, / *\| */)
                    ok = 1
                    for (i = 1; i <= k; i++) if (c[i] != trim(kc[i])) ok = 0
                    if (ok) {
                        row[j] = line; got++
                        if (h1 == "") { h1 = cur; h2 = curh2 } else if (h1 != cur) ok = -1
                    }
                    if (ok == -1) { close(file); return "" }
                }
            }
            close(file)
            if (h1 == "" || got < nk) return ""
            nh = cells(h1, hc)
            for (i = 1; i <= nc; i++) {
                idx[i] = 0
                for (j = 1; j <= nh; j++) if (hc[j] == trim(colname[i])) idx[i] = j
                # A header with a comma in it is named by its start ("lock wait per replica").
                if (!idx[i]) for (j = 1; j <= nh; j++) if (index(hc[j], trim(colname[i]) ",") == 1) idx[i] = j
                if (!idx[i]) return ""
            }
            out = pick(h1, idx, nc)
            if (nc) { cells(h2, al); out = out "\n|"; for (i = 1; i <= nc; i++) out = out al[idx[i]] "|" } else out = out "\n" h2
            for (j = 1; j <= nk; j++) { out = out "\n" pick(row[j], idx, nc); delete row[j] }
            return out
        }
        function emit(s) { now = now s "\n" }
        function done_file() {
            if (file == "" || now == was) return
            print file
            if (mode == "write") { printf "%s", now > file; close(file) }
        }
        FNR == 1 { done_file(); file = FILENAME; now = ""; was = ""; skip = 0 }
        { was = was $0 "\n" }
        END { done_file() }
        skip && $0 == endmark { skip = 0; next }
        skip { next }
        /^<!-- quote: .* -->$/ {
            spec = $0; sub(/^<!-- quote: /, "", spec); sub(/ -->$/, "", spec)
            src = substr(spec, 1, index(spec, ":") - 1)
            body = extract(src, substr(spec, index(spec, ":") + 1))
            if (body == "") { print FILENAME ": MISSING quote " spec > "/dev/stderr"; body = "(missing: " spec ")" }
            emit($0); emit("```" lang(src)); emit(body); emit("```"); emit("<!-- /quote -->")
            skip = 1; endmark = "<!-- /quote -->"; next
        }
        /^<!-- ladder-row: .* -->$/ {
            spec = $0; sub(/^<!-- ladder-row: /, "", spec); sub(/ -->$/, "", spec)
            body = ladder_row(substr(spec, 1, index(spec, " ") - 1), substr(spec, index(spec, " ") + 1))
            if (body == "") { print FILENAME ": MISSING ladder-row " spec > "/dev/stderr"; body = "(missing: ladder row " spec ")" }
            emit($0); emit(body); emit("<!-- /ladder-row -->")
            skip = 1; endmark = "<!-- /ladder-row -->"; next
        }
        /^<!-- rows: .* -->$/ {
            spec = $0; sub(/^<!-- rows: /, "", spec); sub(/ -->$/, "", spec)
            body = table_rows(spec)
            if (body == "") { print FILENAME ": MISSING rows " spec > "/dev/stderr"; body = "(missing: rows " spec ")" }
            emit($0); emit(body); emit("<!-- /rows -->")
            skip = 1; endmark = "<!-- /rows -->"; next
        }
        { emit($0) }' "$@"
}

# The documents that quote.
quoting() {
    grep -lE '^<!-- (quote|ladder-row|rows): ' README.md "$COURSE"/README.md $(chapters) docs/judging.md \
        docs/lab/*.md 2>/dev/null || true
}

# ---- the checks ----

check_numbering() {
    local out
    out=$(awk -v course="$COURSE/" 'FNR == 1 {
            n++
            num = FILENAME; sub(course, "", num); sub(/-.*/, "", num); num += 0
            if (num != n) print FILENAME ": chapter " num " where " n " was expected (numbered without a gap from 01)"
            if (index($0, "# " num ". ") != 1) print FILENAME ": its first line should be \"# " num ". ...\" (is: " $0 ")"
        }
        END { if (n == 0) print "no chapters in " course }' $(chapters))
    [ -z "$out" ] || fail "$out"
}

# The modes of service/guards/modes.c's table.
modes_of_table() {
    sed -n 's/^ *{\.name = "\([a-z0-9-]*\)".*/\1/p' service/guards/modes.c
}

check_modes() {
    local out
    out=$(modes_of_table | awk -v course="$COURSE/" '
        FILENAME == "-" { modes[++nm] = $0; next }
        FILENAME == "README.md" { readme[++nr] = $0; next }
        FNR == 1 { title[FILENAME] = $0 }
        { text[FILENAME] = text[FILENAME] "\n" $0 }
        END {
            for (i = 1; i <= nm; i++) {
                m = modes[i]; found = ""
                for (f in title) if (index(title[f], "`" m "`")) found = f
                if (found == "") { print "mode " m " (service/guards/modes.c) has no chapter: no " course "NN-*.md titled with `" m "`"; continue }
                # The file of the mode, by the one convention (CONTRIBUTING.md#the-files-of-the-modes).
                file = "service/guards/modes/" m ".c"; gsub(/-/, "_", file)
                if ((getline line < file) <= 0) print "mode " m ": no file " file " (its guard or transaction shape)"
                close(file)
                if (!index(text[found], "`" file "`")) print found ": names no `" file "` (the file of the mode)"
                num = found; sub(course, "", num); sub(/-.*/, "", num); num += 0
                ok = 0
                for (j = 1; j <= nr; j++)
                    if (readme[j] ~ ("^\\| *" num " *\\| *`" m "`") && index(readme[j], "(" found ")")) ok = 1
                if (!ok) print "README.md: the modes table has no line \"| " num " | `" m "` | ...\" linking " found
            }
        }' - README.md $(chapters))
    [ -z "$out" ] || fail "$out"
}

# Backticked tokens of the given files, one a line: "file<TAB>token".
backticked() {
    awk '/^```/ { fence = !fence; next } !fence {
        line = $0
        while (match(line, /`[^`]+`/)) {
            print FILENAME "\t" substr(line, RSTART + 1, RLENGTH - 2)
            line = substr(line, RSTART + RLENGTH)
        }
    }' "$@"
}

# Every file of the tree, one a line: in a git work tree the tracked ones and the new ones
# not ignored; in a tree without .git (an archive of the repository, as a packager builds
# from) every file but what .gitignore names at the root (the build, the runs, the results).
tree_files() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -co --exclude-standard
    else
        find . \( -name .git -o -path ./build -o -path ./results -o -path './.run' -o -path './.run-*' \) \
            -prune -o -type f ! -name '*.o' ! -name '*.d' -print | sed 's|^\./||'
    fi
}

# Every file and directory of the tree, one a line.
tree_paths() {
    tree_files | awk '{
        print
        p = $0
        while (sub(/\/[^\/]*$/, "", p)) print p
    }' | sort -u
}

check_files() {
    local out
    out=$(backticked $(docs_all) | awk -F'\t' '
        NR == FNR { have[$0] = 1; next }
        {
            tok = $2; path = tok
            gsub(/<[^>]*>/, "*", path) # a placeholder: service/guard_<name>.c
            sub(/ .*/, "", path)
            if (path !~ /^(service|lock|db|history|loadtest|tests|scripts|migrations|bench|web|nginx|docker|docs)\//) next
            sub(/[,:;)].*$/, "", path); sub(/\.$/, "", path); sub(/\/$/, "", path)
            if (path ~ /[*]/) {
                # A glob names at least one file.
                re = path; gsub(/\./, "\\.", re); gsub(/\*/, "[^/]*", re)
                ok = 0
                for (p in have) if (p ~ ("^" re "$")) { ok = 1; break }
                if (!ok) print $1 ": `" tok "`: no file matches " path
            } else if (!(path in have))
                print $1 ": `" tok "`: " path " does not exist"
        }' <(tree_paths) -)
    [ -z "$out" ] || fail "$out"
}

check_names() {
    local out
    # CONTRIBUTING.md from its tour of the code on (above it, placeholders: `module_verb_object`).
    out=$({
        backticked README.md "$COURSE"/README.md $(chapters)
        sed -n '/^## The files of the modes/,$p' CONTRIBUTING.md | backticked - | sed 's/^-\t/CONTRIBUTING.md\t/'
    } | awk -F'\t' '
        NR == FNR { word[$0] = 1; next }
        {
            name = $2; sub(/\(\)$/, "", name)
            if (name ~ /^[a-z][a-z0-9]*(_[a-z0-9]+)+$/ || name ~ /^[a-z][a-z0-9_]*__[a-z0-9_]+$/ ||
                name ~ /^[A-Z][A-Z0-9]*(_[A-Z0-9]+)+$/)
                if (!(name in word) && !seen[$1 "\t" name]++) print $1 ": `" $2 "`: no such name in the sources"
        }' <(grep -rhoE '[A-Za-z_][A-Za-z0-9_]*' "${SOURCES[@]}" 2>/dev/null | sort -u) -)
    [ -z "$out" ] || fail "$out"
}

check_quotes() {
    local changed err
    err=$(mktemp)
    changed=$(expand check $(quoting) 2>"$err")
    [ -s "$err" ] && fail "$(cat "$err") (is the file, the function or the row gone?)"
    rm -f "$err"
    [ -z "$changed" ] ||
        fail "a quote or ladder row differs from the source in: ${changed//$'\n'/ } (make docs brings them up to date)"
}

check_links() {
    local out
    # One awk: every heading's anchor of every document first, then every link.
    out=$(awk '
        NR == FNR { have[$0] = 1; next }
        FNR == 1 { fence = 0; split("", count) }
        /^```/ { fence = !fence; next }
        fence { next }
        /^#+ / {
            h = $0
            sub(/^#+ +/, "", h)
            h = tolower(h)
            gsub(/[^a-z0-9 _-]/, "", h)
            gsub(/ /, "-", h)
            n = count[h]++
            anchor[FILENAME "#" (n ? h "-" n : h)] = 1
        }
        {
            line = $0
            while (match(line, /\]\([^) ]+\)/)) {
                nl++
                lfile[nl] = FILENAME
                ltarget[nl] = substr(line, RSTART + 2, RLENGTH - 3)
                line = substr(line, RSTART + RLENGTH)
            }
        }
        # dir/../x -> x, ./x -> x
        function norm(p,    n, i, k, part, out, stack) {
            n = split(p, part, "/")
            k = 0
            for (i = 1; i <= n; i++) {
                if (part[i] == "." || part[i] == "") continue
                if (part[i] == ".." && k > 0) { k--; continue }
                stack[++k] = part[i]
            }
            out = ""
            for (i = 1; i <= k; i++) out = out (i > 1 ? "/" : "") stack[i]
            return out
        }
        END {
            for (i = 1; i <= nl; i++) {
                t = ltarget[i]
                if (t ~ /^(https?|mailto):/) continue
                path = t; a = ""
                if (index(t, "#")) { path = substr(t, 1, index(t, "#") - 1); a = substr(t, index(t, "#") + 1) }
                dir = lfile[i]; if (!sub(/\/[^\/]*$/, "", dir)) dir = "."
                full = (path == "") ? lfile[i] : norm(dir "/" path)
                if (!(full in have)) { print lfile[i] ": link (" t "): " full " does not exist"; continue }
                if (a != "" && full ~ /\.md$/ && !((full "#" a) in anchor))
                    print lfile[i] ": link (" t "): no heading #" a " in " full
            }
        }' <(tree_paths) $(docs_all))
    [ -z "$out" ] || fail "$out"
}

# The replay's rows (docs/replay/rows.js): every committed events file of the course, as the
# page reads them, so that it plays them opened as a file, with no server.
replay_rows() {
    echo "// rows.js - every events file of the course (docs/course/timelines/, docs/course/schematics/),"
    echo "// for the replay page. Made by scripts/docs.sh --write (make docs); do not edit."
    echo "const ROWS = ["
    awk 'FNR == 1 { if (NR > 1) print "\" },"; name = FILENAME; sub(/^docs\/course\//, "", name); printf "  { name: \"%s\", events: \"", name }
        { gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); printf "%s\\n", $0 }
        END { if (NR > 0) print "\" }," }' "$TIMELINES"/*.events "$SCHEMATICS"/*.events
    echo "];"
}

# drawn_again DIR HOW: every DIR/*.svg is what loadtest/timeline draws from DIR/*.events now,
# and every events file has its drawing; HOW says what makes them.
drawn_again() {
    local ev dir out
    dir=$(mktemp -d)
    for ev in "$1"/*.events; do
        [ -e "$ev" ] || continue
        ev=${ev##*/}
        awk -f loadtest/timeline.awk "$1/$ev" >"$dir/${ev%.events}.svg" 2>/dev/null ||
            fail "$1/$ev: loadtest/timeline failed on it"
    done
    out=$(diff -rq "$dir" "$1" 2>&1 | grep -vE '\.events$|table\.md$' || true)
    [ -z "$out" ] || fail "$1: drawings not what loadtest/timeline draws from their events ($2):"$'\n'"$out"
    rm -rf "$dir"
}

check_timelines() {
    local out
    [ -r "$TIMELINES/table.md" ] || fail "$TIMELINES/table.md is missing (make ladder writes it)"
    drawn_again "$TIMELINES" "make ladder draws both"
    drawn_again "$SCHEMATICS" "loadtest/timeline F.events > F.svg draws one"
    out=$(for f in "$SCHEMATICS"/*.svg; do
        [ -e "$f" ] || continue
        grep -qF "(schematics/${f##*/})" $(chapters) || echo "$f: no chapter links it"
    done)
    [ -z "$out" ] || fail "$out"
    # Every drawing linked from a chapter, every row of the table drawn.
    out=$(awk -v tl="$TIMELINES/" '
        NR == FNR { svg[$0] = 1; next }
        FILENAME ~ /table\.md$/ {
            if ($0 !~ /^\| `/) next
            split($0, c, "|"); rung = c[2]; gsub(/[ `]/, "", rung)
            scen = c[3]; sub(/^ */, "", scen); sub(/:.*/, "", scen)
            ok = 0
            for (f in svg) if (f ~ ("^" tl "[0-9][0-9]-" rung "-" scen "\\.svg$")) ok = 1
            if (!ok) print FILENAME ": the row " rung " / " scen " has no drawing"
            next
        }
        { for (f in svg) { name = f; sub(tl, "timelines/", name); if (index($0, "(" name ")")) linked[f] = 1 } }
        END { for (f in svg) if (!(f in linked)) print f ": no chapter links it" }' \
        <(ls "$TIMELINES"/*.svg 2>/dev/null) "$TIMELINES/table.md" $(chapters))
    [ -z "$out" ] || fail "$out"
    replay_rows | cmp -s - "$REPLAY_ROWS" ||
        fail "$REPLAY_ROWS does not hold every events file as it is now (make docs writes it)"
}

# Every chapter: a figure, a "try it" with what it must hold, the next page linked.
check_chapters() {
    local out
    out=$(awk -v course="$COURSE/" -v last="$(chapters | tail -1)" '
        # The lab levels, by the rung they are played on: web/lab/lab.js LEVELS.
        FILENAME ~ /lab\.js$/ {
            if (match($0, /id: "[a-z]+", title: "[^"]*", rung: "[a-z0-9-]+"/)) {
                s = substr($0, RSTART, RLENGTH)
                split(s, q, "\"")
                level[q[6]] = q[2]
            }
            next
        }
        FNR == 1 {
            n++; file[n] = FILENAME; title[n] = $0; fig[n] = 0; try[n] = ""; rows[n] = ""; intry = 0
            num = FILENAME; sub(course, "", num); sub(/-.*/, "", num); number[n] = num + 0
        }
        /^!\[[^]]*\]\([^)]+\.(svg|png)\)/ { fig[n] = 1 }
        /^<!-- ladder-row: / { r = $0; sub(/^<!-- ladder-row: /, "", r); sub(/ -->$/, "", r); sub(/ /, ":", r); rows[n] = rows[n] " " r }
        /^\*\*Try it\.\*\*/ { intry = 1 }
        intry && /^(\*\*|#)/ && !/^\*\*Try it\.\*\*/ { intry = 0 }
        intry { try[n] = try[n] "\n" $0 }
        { text[n] = text[n] "\n" $0 }
        # A link "[Chapter N](NN-...)" names the number of the file it leads to.
        {
            line = $0
            while (match(line, /\[[Cc]hapter [0-9]+[^]]*\]\([0-9][0-9]-/)) {
                m = substr(line, RSTART, RLENGTH); line = substr(line, RSTART + RLENGTH)
                said = m; sub(/^\[[Cc]hapter /, "", said); sub(/[^0-9].*/, "", said)
                to = m; sub(/.*\(/, "", to); to = substr(to, 1, 2)
                if (said + 0 != to + 0) print FILENAME ": a link says chapter " said " and leads to " to "-*.md"
            }
        }
        END {
            for (i = 1; i <= n; i++) {
                f = file[i]
                if (!fig[i]) print f ": no figure (a timeline of a run, or a schematic from schematics/, as ![...](....svg))"
                if (try[i] == "") { print f ": no **Try it.** paragraph"; continue }
                k = split(rows[i], rw, " ")
                ok = (k == 0)
                for (j = 1; j <= k; j++) if (index(try[i], "loadtest/ladder --only " rw[j])) ok = 1
                if (!ok) print f ": its **Try it.** runs none of its rows (loadtest/ladder --only RUNG:SCENARIO)"
                for (m in level)
                    if (index(title[i], "`" m "`") && !index(try[i], "level=" level[m]))
                        print f ": its **Try it.** does not link the lab level of " m " (?level=" level[m] ")"
                if (!index(try[i], "curl") && !index(try[i], "make ") && !index(try[i], "scripts/"))
                    print f ": its **Try it.** gives no command to type (a curl, a make target)"
                # The chain: each chapter leads to the next, the last to the closing page.
                nextf = (f == last) ? "flaws.md" : sprintf("%02d-", number[i] + 1)
                if (!index(text[i], "](" nextf)) print f ": does not link the next page (" nextf "...)"
            }
        }' web/lab/lab.js $(chapters))
    [ -z "$out" ] || fail "$out"
}

check_work_items() {
    local hits
    hits=$(tree_files | grep -v '^\.ci/' | tr '\n' '\0' | xargs -0 grep -nIiE '\bissues? #?[0-9]+\b' -- 2>/dev/null || true)
    [ -z "$hits" ] || fail "files name the project's own work items:"$'\n'"$hits"
}

# ---- main ----

case ${1:-} in
--files)
    tree_files
    ;;
--write)
    replay_rows >"$REPLAY_ROWS.new"
    if cmp -s "$REPLAY_ROWS.new" "$REPLAY_ROWS"; then rm -f "$REPLAY_ROWS.new"; else
        mv "$REPLAY_ROWS.new" "$REPLAY_ROWS"
        echo "docs: brought up to date: $REPLAY_ROWS"
    fi
    err=$(mktemp)
    expand write $(quoting) 2>"$err" | sed 's/^/docs: brought up to date: /'
    [ -s "$err" ] && fail "$(cat "$err")"
    rm -f "$err"
    exit "$FAILED"
    ;;
--check)
    what=${2:-all}
    case $what in
    all)
        # One process, a status line per check (tests/docs.sh counts them).
        any=0
        for c in numbering modes files names quotes links timelines chapters work-items; do
            FAILED=0
            "check_${c//-/_}"
            if [ "$FAILED" = 0 ]; then echo "docs-check: $c: ok"; else echo "docs-check: $c: FAILED"; any=1; fi
        done
        exit "$any"
        ;;
    numbering | modes | files | names | quotes | links | timelines | chapters | work-items) "check_${what//-/_}" ;;
    *)
        echo "scripts/docs.sh: unknown check '$what'" >&2
        exit 2
        ;;
    esac
    [ "$FAILED" = 0 ] && echo "docs-check: $what: ok"
    exit "$FAILED"
    ;;
*)
    sed -n '2,/^# The file lists below/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
