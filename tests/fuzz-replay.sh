# Every fuzz corpus file, the crash regressions among them, through its fuzz target again;
# a crash, a sanitizer report or a broken reader promise (an abort) fails the test.
: "${srcdir:=.}" "${top_builddir:=.}"
for target in idx npy safetensors; do
    "$top_builddir/tests/fuzz/replay_$target" "$srcdir/tests/fuzz/corpus/$target" || exit 1
done
