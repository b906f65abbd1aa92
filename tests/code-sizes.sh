# docs/ARCHITECTURE.md's size table equals the source tree's line counts
# (scripts/code-sizes.sh --check): a change that moves lines fails here until
# `scripts/code-sizes.sh --update docs/ARCHITECTURE.md` regenerates the table. Then the
# check itself, on copies of the file: a changed number, a missing row and a row of no folder
# each fail, named; --update repairs them and a second --update changes nothing. Reads only
# $srcdir (make distcheck's is read-only); its copies go to $TMPDIR.
: "${srcdir:=.}"
script=$srcdir/scripts/code-sizes.sh
doc=$srcdir/docs/ARCHITECTURE.md
failures=0 cases=0

# expect NAME WANT-STATUS PHRASE COMMAND...: COMMAND exits WANT-STATUS, printing PHRASE
# (PHRASE "": printing nothing).
expect() {
    name=$1 want=$2 phrase=$3
    shift 3
    cases=$((cases + 1))
    "$@" >"$tmp/out" 2>&1
    status=$?
    if [ -z "$phrase" ]; then found=$([ ! -s "$tmp/out" ] && echo yes); else found=$(grep -F -m1 -- "$phrase" "$tmp/out"); fi
    if [ "$status" -ne "$want" ] || [ -z "$found" ]; then
        echo "FAIL $name: exit $status (want $want), output (want $([ -n "$phrase" ] && echo "'$phrase'" || echo none)):"
        sed 's/^/    /' "$tmp/out"
        failures=$((failures + 1))
    else
        echo "ok   $name: $([ -n "$phrase" ] && echo "$found" || echo "no output")"
    fi
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-code-sizes-XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# The real table: any drift is this test's failure, its message the script's.
cases=$((cases + 1))
if sh "$script" --check "$doc"; then
    echo "ok   docs/ARCHITECTURE.md's size table matches the tree"
else
    echo "FAIL docs/ARCHITECTURE.md's size table (above)"
    failures=$((failures + 1))
fi

# A number off by one, on a copy.
copy=$tmp/ARCHITECTURE.md
# shellcheck disable=SC2016 # the backquotes are Markdown
sed 's/^\(| `src\/comm` |.*| \)\([0-9][0-9]*\) |$/\1999999 |/' "$doc" >"$copy"
expect "a changed number is named" 1 "src/comm: 999999 in the table" sh "$script" --check "$copy"
expect "the regenerating command is named" 1 "regenerate it: " sh "$script" --check "$copy"
expect "--update repairs it" 0 "src/comm: 999999 in the table" sh "$script" --update "$copy"
expect "then --check passes" 0 "" sh "$script" --check "$copy"
cp "$copy" "$tmp/once"
expect "a second --update changes nothing" 0 "" sh "$script" --update "$copy"
cases=$((cases + 1))
if cmp "$tmp/once" "$copy"; then echo "ok   --update is idempotent"; else echo "FAIL --update changed its own output"; failures=$((failures + 1)); fi

# A folder without a row and a row without a folder.
awk '/^\| `src\/core` \|/ { next } /^\| `src\/io` \|/ { print "| `src/nonesuch` | gone | 1 | 2 |" } { print }' "$doc" >"$copy"
expect "a folder without a row is named" 1 "src/core: no row" sh "$script" --check "$copy"
expect "a row without a folder is named" 1 "src/nonesuch: a row, but no such folder" sh "$script" --check "$copy"
sh "$script" --update "$copy" >/dev/null
expect "--update adds and drops rows" 0 "" sh "$script" --check "$copy"
cases=$((cases + 1))
# shellcheck disable=SC2016 # the backquotes are Markdown
if grep -q '^| `src/core` |' "$copy" && ! grep -q nonesuch "$copy"; then
    echo "ok   src/core's row added, src/nonesuch's dropped"
else
    echo "FAIL rows after --update:"
    sed -n '/^<!-- sizes/,/^<!-- \/sizes/p' "$copy" | sed 's/^/    /'
    failures=$((failures + 1))
fi

# No table.
printf '# nothing here\n' >"$copy"
expect "a file without the markers is refused" 2 "has no size table" sh "$script" --check "$copy"

echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
