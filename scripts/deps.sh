#!/usr/bin/env bash
# deps.sh - the project's Debian packages, from the one list in scripts/packages.txt.
#
#   scripts/deps.sh ensure [GROUP...]   install what is missing (default: every native group)
#   scripts/deps.sh missing [GROUP...]  print the missing packages, one per line; exit 0
#   scripts/deps.sh list GROUP...       print the packages of these groups, one per line
#   scripts/deps.sh groups              print every group the list names
#
# `ensure` is quiet when everything is installed, so `make test` pays one dpkg-query. When
# something is missing it installs it with apt-get if we are root; otherwise it prints the one
# command to run and exits 1 (asking for a password in the middle of `make` would be worse).
# The docker images call `list`, so the native machine and the images install the same names.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGES_FILE=${PACKAGES_FILE:-$here/packages.txt}

# What the native `make test` / `make demo` need: every group except those only images use.
NATIVE_GROUPS="build test runtime postgres redis sentinel nginx stack load"

die() {
    echo "deps.sh: $*" >&2
    exit 1
}

# Dies unless every argument names a group of the list. Called before list_packages runs in
# a process substitution, where a `die` would not stop the script.
check_groups() {
    local known g
    known=$(list_groups | tr '\n' ' ')
    [ $# -gt 0 ] || die "name at least one group (groups: $known)"
    for g in "$@"; do
        case " $known " in
        *" $g "*) ;;
        *) die "unknown group '$g' (groups: $known)" ;;
        esac
    done
}

# Prints the packages of the groups given (deduplicated, in file order).
list_packages() {
    # Strip comments, then keep a package when one of its groups is among the wanted ones.
    sed 's/#.*//' "$PACKAGES_FILE" | awk -v want="$*" '
        BEGIN { n = split(want, w, " "); for (i = 1; i <= n; i++) wanted[w[i]] = 1 }
        NF >= 2 && !seen[$1] {
            for (i = 2; i <= NF; i++) if ($i in wanted) { print $1; seen[$1] = 1; break }
        }'
}

list_groups() {
    sed 's/#.*//' "$PACKAGES_FILE" | awk '{ for (i = 2; i <= NF; i++) if (!s[$i]++) print $i }'
}

# Prints the packages among "$@" that dpkg does not report as installed ("ii").
missing_packages() {
    local pkg status
    declare -A installed=()
    # One dpkg-query for all: it exits 1 when it knows none of some name, which is fine here.
    while read -r pkg status; do
        [ "$status" = "ii" ] && installed[$pkg]=1
    done < <(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' "$@" 2>/dev/null || true)
    for pkg in "$@"; do
        [ -n "${installed[$pkg]:-}" ] || echo "$pkg"
    done
}

apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    local lists
    # A -slim image keeps no manual pages, and its /usr/share/man/man1 is missing; Java's
    # post-install (default-jre-headless, for the ZooKeeper server) links a page there and
    # fails without it.
    mkdir -p /usr/share/man/man1
    # A fresh image has no package lists at all: update first. Otherwise try the install with
    # the lists we have and update only if that fails (stale lists name versions since gone).
    lists=$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' 2>/dev/null | head -n 1)
    if [ -z "$lists" ]; then
        apt-get update -q || die "apt-get update failed"
    elif apt-get install -y -q --no-install-recommends "$@"; then
        return 0
    else
        echo "deps.sh: install failed with the current package lists; updating them" >&2
        apt-get update -q || die "apt-get update failed"
    fi
    apt-get install -y -q --no-install-recommends "$@" || die "apt-get install failed"
}

cmd_ensure() {
    # shellcheck disable=SC2086 # a list of words
    [ $# -gt 0 ] || set -- $NATIVE_GROUPS
    command -v dpkg-query >/dev/null || die "dpkg-query not found: this set-up is for Debian 12"
    check_groups "$@"
    local -a want missing
    mapfile -t want < <(list_packages "$@")
    mapfile -t missing < <(missing_packages "${want[@]}")
    [ ${#missing[@]} -eq 0 ] && return 0

    echo "deps.sh: missing packages: ${missing[*]}" >&2
    if [ "$(id -u)" -eq 0 ]; then
        apt_install "${missing[@]}"
        mapfile -t missing < <(missing_packages "${want[@]}")
        [ ${#missing[@]} -eq 0 ] || die "still missing after apt-get install: ${missing[*]}"
    else
        local sudo="sudo "
        command -v sudo >/dev/null || sudo="(as root) "
        echo "deps.sh: not root, so not installing; run this, then try again:" >&2
        echo "  ${sudo}apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
}

main() {
    local cmd=${1:-}
    [ $# -gt 0 ] && shift
    case "$cmd" in
    ensure) cmd_ensure "$@" ;;
    missing)
        # shellcheck disable=SC2086 # a list of words
        [ $# -gt 0 ] || set -- $NATIVE_GROUPS
        check_groups "$@"
        local -a want
        mapfile -t want < <(list_packages "$@")
        missing_packages "${want[@]}"
        ;;
    list)
        check_groups "$@"
        list_packages "$@"
        ;;
    groups) list_groups ;;
    *) die "usage: deps.sh ensure [GROUP...] | missing [GROUP...] | list GROUP... | groups" ;;
    esac
}

main "$@"
