# NVTX ranges in the CUDA build (include/dp/nvtx.h), checked on the fake CUDA runtime: its
# dp_worker links a static NVTX injection (tests/fakecuda/nvtx_record.c) that writes every range
# the library opens and closes, so the ranges Nsight Systems shows are checked without Nsight: per
# step, a forward and a backward range per module, an "update", and every bucket's all-reduce
# started and ended, on 2 ranks. Skipped (77) where the build has no nvtx3 (no CUDA toolkit).
. "$srcdir/tests/common.sh"
worker="$top_builddir/tests/fakecuda/dp_worker"
grep -q '^#define HAVE_NVTX 1' "$top_builddir/config.h" 2>/dev/null || {
    echo "skip: this build has no NVTX ranges (configure found no CUDA toolkit with nvtx3)"
    exit 77
}
export FAKECUDA_DEVICES=gpu0
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-nvtx-XXXXXX")
trap 'rm -rf "$dir"' EXIT
DP_NVTX_RECORD=$dir/ranges dp_mpirun 120 2 "$worker" --device cuda --share-gpu --data synthetic:400,16,4 \
    --model "linear(32),relu,linear(4)" --batch 40 --steps 3 --log-every 0 --bucket-mb 0.001 >"$dir/out" 2>&1 ||
    { sed 's/^/    /' "$dir/out"; echo "FAIL the fake-runtime run"; exit 1; }
status=0
for file in "$dir"/ranges.*; do
    python3 - "$file" <<'PYEOF' || status=1
import collections, sys
lines = [line.rstrip("\n") for line in open(sys.argv[1])]
pushes = collections.Counter(line[5:] for line in lines if line.startswith("push "))
depth = 0
for line in lines:
    depth += line.startswith("push ") - (line == "pop")
    assert depth >= 0, "a pop without its push"
assert depth == 0, f"{depth} ranges left open"
for module in range(3):
    for way in ("forward", "backward"):
        assert pushes[f"{way} module {module}"] == 3, (way, module, pushes)
assert pushes["update"] == 3, pushes
started = {line.split()[1]: line.split(" ", 2)[2] for line in lines if line.startswith("start ")}
ended = {line.split()[1] for line in lines if line.startswith("end ")}
buckets = sorted({name for name in started.values() if name.startswith("all-reduce bucket")})
assert len(buckets) >= 2 and set(started) == ended, (buckets, set(started) - ended)
print(f"ok   {sys.argv[1].rsplit('/', 1)[1]}: 3 steps of forward and backward ranges for 3 modules, "
      f"3 updates, {len(started)} collectives started and ended ({', '.join(buckets)})")
PYEOF
done
[ "$(ls "$dir"/ranges.* | wc -l)" -eq 2 ] || { echo "FAIL not one record per rank: $(ls "$dir")"; status=1; }
exit "$status"
