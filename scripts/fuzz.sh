#!/bin/sh
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/ and runs each for its
# seconds below (FUZZ_SECONDS sets them all) on the committed seeds plus the corpus kept in
# build-fuzz/corpus/; exits non-zero if any target crashes, leaks, times out or allocates over
# the limit.
# --merge then folds inputs that add coverage into tests/fuzz/corpus/ for committing.
# Outside Autotools on purpose: the targets need clang for every object, while configure
# builds with mpicc, and the readers need no MPI.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
merge=no
[ "${1:-}" = --merge ] && merge=yes
"$top/scripts/install-deps.sh" clang libclang-rt-14-dev zlib1g-dev
# TARGET:SECONDS, by what 60 s found beyond the committed corpus (docs/RELIABILITY.md,
# "Fuzzing record"): idx and npy nothing after their first 3 s, safetensors new edges until 38 s.
targets="idx:10 npy:10 safetensors:60"
out="$top/build-fuzz"
flags="-std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Wshadow -g -O1 -fno-omit-frame-pointer
-fsanitize=address,undefined -fno-sanitize-recover=all -I$top/include -I$top"
# The readers' modules: data and io depend only on core (docs/ARCHITECTURE.md), none on MPI.
library="$(cd "$top" && echo src/data/*.c src/io/*.c src/core/*.c) tests/fuzz/fuzz_input.c"

mkdir -p "$out/obj"
objects=""
for source in $library; do
    object="$out/obj/$(echo "$source" | tr / _).o"
    # shellcheck disable=SC2086
    clang $flags -fsanitize=fuzzer-no-link -c "$top/$source" -o "$object"
    objects="$objects $object"
done

status=0
for entry in $targets; do
    target=${entry%:*} seconds=${FUZZ_SECONDS:-${entry#*:}}
    # shellcheck disable=SC2086
    clang $flags -fsanitize=fuzzer "$top/tests/fuzz/fuzz_$target.c" $objects -lz -lm \
        -o "$out/fuzz_$target"
    corpus="$out/corpus/$target" crashes="$out/crashes/$target"
    mkdir -p "$corpus" "$crashes"
    dict=""
    [ -f "$top/tests/fuzz/$target.dict" ] && dict="-dict=$top/tests/fuzz/$target.dict"
    # New inputs go to the first directory; the committed seeds are only read.
    # shellcheck disable=SC2086
    if "$out/fuzz_$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=1024 \
        -malloc_limit_mb=16 -print_final_stats=1 -artifact_prefix="$crashes/" $dict \
        "$corpus" "$top/tests/fuzz/corpus/$target" >"$out/$target.log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$target.log")
        size=$(find "$corpus" -type f | wc -l)
        echo "fuzz $target: ok, $runs inputs in ${seconds} s, $size in build-fuzz/corpus/$target"
    else
        status=1
        echo "fuzz $target: FAILED; reproducer in $crashes/, log $out/$target.log:"
        grep -E -A 20 '^==[0-9]+==|^fuzz:|^SUMMARY' "$out/$target.log" | head -n 40
    fi
    if [ "$merge" = yes ]; then
        "$out/fuzz_$target" -merge=1 "$top/tests/fuzz/corpus/$target" "$corpus" \
            >"$out/$target-merge.log" 2>&1
        echo "fuzz $target: merged into tests/fuzz/corpus/$target"
    fi
done
exit "$status"
