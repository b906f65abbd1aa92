# .npy features of 2, 3 and 4 dims holding the same values train to the same bits on 2 ranks:
# a model starting with a Linear sees a sample of shape [C, H, W] as its C*H*W features, and
# the shape only changes how the header describes the rows.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-npy-shapes-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0

"$top_builddir/tests/npy_fixture" "$dir/flat.npy" 300 16 3 &&
    "$top_builddir/tests/npy_fixture" --labels "$dir/labels.npy" 300 5 4 || exit 1
# The same file with another shape in its header: the header is ASCII, padded with spaces.
for shape in "300, 4, 4" "300, 1, 4, 4"; do
    name=$(echo "$shape" | tr -d ' ,')
    python3 - "$dir/flat.npy" "$dir/$name.npy" "($shape)" <<'PY' || exit 1
import sys
data = open(sys.argv[1], "rb").read()
end = data.index(b"\n")  # the header's padding spaces end there, 10 bytes after the preamble
header = data[10:end].decode().replace("(300, 16)", sys.argv[3]).rstrip().ljust(end - 10)
open(sys.argv[2], "wb").write(data[:10] + header.encode() + data[end:])
PY
done

for model in "--layers 16,8,5" "--model linear(8),relu,linear(5)"; do
    for name in flat 30044 300144; do
        # shellcheck disable=SC2086
        dp_mpirun 60 2 "$worker" --data "$dir/$name.npy,$dir/labels.npy" $model --epochs 2 --batch 32 \
            --device cpu --threads $dp_threads --quiet --save "$dir/$name.safetensors" >"$dir/out" 2>&1
        dp_check_outcome "train from $name.npy ($model)" ok $? "$dir/out" ""
    done
    for name in 30044 300144; do
        dp_check_same_bits "$name.npy trains to the bits of the flat file ($model)" "$dir/flat.safetensors" \
            "$dir/$name.safetensors"
    done
done
echo "npy shapes: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
