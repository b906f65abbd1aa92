#!/bin/sh
# Lines of code per folder, and docs/ARCHITECTURE.md's size table kept equal to them.
#
#   scripts/code-sizes.sh                 the counts as a Markdown table body: | `FOLDER` | LINES |
#   scripts/code-sizes.sh --check FILE    exit 1, naming the folders, where FILE's table differs
#   scripts/code-sizes.sh --update FILE   rewrite FILE's table with the counts (idempotent)
#
# A folder is each folder of src/, then include/ and tests/: every line of their .c, .h, .cu
# and .cuh files, subfolders included; and scripts/: every line of its .sh files. Counted in
# the source tree this script lies in (its parent folder), whatever the working directory, so
# make check and make distcheck read $srcdir; .libs and .deps folders (an in-tree build's)
# are skipped, and no other build output has those suffixes.
#
# FILE's table lies between a line starting "<!-- sizes:" and a line "<!-- /sizes -->": a
# header row, the |---| row, then one row per folder, found by the first `quoted` word of its
# first cell. Only each row's last cell is generated; the other cells are hand-written text
# that --update keeps, row by row. --update also drops the rows of folders that are gone and
# appends a row, its hand-written cells empty, for each new folder.
set -eu
LC_ALL=C
export LC_ALL

usage() {
    echo "usage: $0 [--check FILE | --update FILE]" >&2
    exit 2
}

root=$(cd "$(dirname "$0")/.." && pwd)

# The folders in table order, one per line: src/*, include, tests, scripts.
folders() {
    for dir in "$root"/src/*/; do
        [ -d "$dir" ] || continue
        dir=${dir%/}
        echo "src/${dir##*/}"
    done
    echo include
    echo tests
    echo scripts
}

# count FOLDER: its lines, as described above.
count() {
    case $1 in
    scripts) set -- "$1" -name '*.sh' ;;
    *) set -- "$1" \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) ;;
    esac
    dir=$1
    shift
    find "$root/$dir" \( -name .libs -o -name .deps \) -prune -o -type f "$@" -exec cat {} + | wc -l |
        tr -d ' '
}

# counts: "FOLDER<tab>LINES" per line.
counts() {
    folders | while read -r folder; do
        printf '%s\t%s\n' "$folder" "$(count "$folder")"
    done
}

# render COUNTS FILE REPORT: FILE with its table's last column from COUNTS, on stdout; what
# differs, one line per folder, into REPORT. Exit 3 where FILE has no table between markers.
render() {
    awk -v counts="$1" -v report="$3" '
    BEGIN {
        FS = "\t"
        while ((getline line < counts) > 0) {
            split(line, f, "\t")
            n++; order[n] = f[1]; lines[f[1]] = f[2]
        }
        FS = " "
    }
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    # The first `quoted` word of a row, its folder.
    function key(row,    k) {
        if (!match(row, /`[^`]*`/)) return ""
        k = substr(row, RSTART + 1, RLENGTH - 2)
        sub(/\/$/, "", k)
        return k
    }
    function flush(    i, j, k, last, row, cells, empty) {
        last = 0
        for (i = 1; i <= nblock; i++) if (block[i] ~ /^\|/) last = i
        for (i = 1; i <= nblock; i++) {
            row = block[i]
            if (row ~ /^\|/ && i > header + 1) {
                k = key(row)
                if (!(k in lines)) {
                    printf "  %s: a row, but no such folder (dropped)\n", (k == "" ? row : k) > report
                } else {
                    seen[k] = 1
                    old = row
                    sub(/\|[ \t]*$/, "", old)
                    old = trim(substr(old, match(old, /[^|]*$/)))
                    sub(/[^|]*\|[ \t]*$/, " " lines[k] " |", row)
                    if (old != lines[k])
                        printf "  %s: %s in the table, %s in the tree\n", k, (old == "" ? "nothing" : old), lines[k] > report
                    print row
                }
            } else
                print row
            if (i == last) {
                empty = ""
                for (j = 1; j <= ncols - 2; j++) empty = empty "  |"
                for (j = 1; j <= n; j++) if (!(order[j] in seen)) {
                    printf "| `%s` |%s %s |\n", order[j], empty, lines[order[j]]
                    printf "  %s: no row (a new folder: %s lines; fill in its other cells)\n", order[j], lines[order[j]] > report
                }
            }
        }
    }
    state == 0 && /^<!-- sizes:/ { state = 1; print; next }
    state == 1 && /^<!-- \/sizes -->/ {
        if (header == 0) { print "no header row between the markers" > report; exit 3 }
        flush(); state = 2; print; next
    }
    state == 1 {
        block[++nblock] = $0
        if (header == 0 && $0 ~ /^\|/) {
            header = nblock
            ncols = gsub(/\|/, "|", $0) - 1
        }
        next
    }
    { print }
    END { if (state != 2 && !failed) exit 3 }
    ' "$2"
}

mode=print
case $# in
0) ;;
2)
    case $1 in
    --check) mode=check ;;
    --update) mode=update ;;
    *) usage ;;
    esac
    file=$2
    ;;
*) usage ;;
esac

if [ "$mode" = print ]; then
    counts | while IFS="$(printf '\t')" read -r folder lines; do
        # shellcheck disable=SC2016 # the backquotes are Markdown
        printf '| `%s` | %s |\n' "$folder" "$lines"
    done
    exit 0
fi

[ -r "$file" ] || { echo "$0: cannot read $file" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/code-sizes-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
counts > "$tmp/counts"
: > "$tmp/report"
if ! render "$tmp/counts" "$file" "$tmp/report" > "$tmp/new"; then
    echo "$0: $file has no size table between a '<!-- sizes: ...' line and a '<!-- /sizes -->' line" >&2
    cat "$tmp/report" >&2
    exit 2
fi

if cmp -s "$file" "$tmp/new"; then
    exit 0
fi
if [ "$mode" = update ]; then
    cat "$tmp/new" > "$file"
    echo "$file: size table updated:"
    cat "$tmp/report"
    exit 0
fi

# The regenerating command, from the source tree's top where FILE lies inside it.
abs=$(cd "$(dirname "$file")" && pwd)/$(basename "$file")
case $abs in
"$root"/*) command="scripts/code-sizes.sh --update ${abs#"$root"/}  (in $root)" ;;
*) command="$root/scripts/code-sizes.sh --update $file" ;;
esac
{
    echo "$file: the size table has drifted from the tree:"
    if [ -s "$tmp/report" ]; then cat "$tmp/report"; else echo "  (its last cells are not in the generated form)"; fi
    echo "regenerate it: $command"
} >&2
exit 1
