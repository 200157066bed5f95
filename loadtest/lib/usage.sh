# usage.sh - a load tool's --help (sourced, bash).
# shellcheck shell=bash
#
# Each tool documents itself in the comment block at its top, from its second line down to
# its `set -euo pipefail`: that block is its help, so the two never disagree.

# usage_print SCRIPT: prints SCRIPT's header comment without the comment marks.
usage_print() {
    sed -n '2,/^set -euo/p' "$1" | sed '$d; s/^# \{0,1\}//'
}
