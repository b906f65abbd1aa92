# dp_worker --average-every 3 on 2 ranks for 7 steps: averagings after steps 3, 6 and the last
# (7), each in --metrics with a positive divergence and in the step lines; the banner says
# local-sgd; the summary's bytes are the averagings' (python3's json module reads the metrics);
# refused combinations exit promptly naming the problem.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-local-sgd-XXXXXX")
trap 'rm -rf "$dir"' EXIT
command -v python3 >/dev/null || { echo "skip: no python3"; exit 77; }
failures=0 cases=0
train="--data synthetic:2000,20,5 --layers 20,32,5 --batch 64 --threads 1 --device cpu"
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $train --steps 7 --log-every 1 --average-every 3 --metrics "$dir/m.jsonl" >"$dir/out" 2>&1
dp_check_outcome "train with --average-every 3" ok $? "$dir/out" "local-sgd: every 3 steps"
dp_check_outcome "the step line of an averaging" ok 0 "$dir/out" "divergence"
cases=$((cases + 1))
if python3 - "$dir/m.jsonl" >"$dir/check" 2>&1 <<'PYTHON'
import json, sys
lines = [json.loads(line) for line in open(sys.argv[1])]
averages = [line["average"] for line in lines if "average" in line]
assert [a["step"] for a in averages] == [3, 6, 7], averages
assert all(0 < a["divergence"] < 1 for a in averages), averages
steps = {line["step"]: line for line in lines if "step" in line}
assert steps[3]["averagings"] == 1 and abs(steps[3]["divergence"] / averages[0]["divergence"] - 1) < 1e-5, steps[3]
assert "averagings" not in steps[2], steps[2]
# SGD with momentum: parameters and momentum, 2 x 837 floats, of which a ring all-reduce over
# 2 ranks sends 2 (W - 1) / W = all per averaging; no gradient is sent.
assert lines[-1]["summary"]["sent_bytes"] == 3 * 2 * 837 * 4, lines[-1]
print("ok")
PYTHON
then
    echo "ok   --metrics: one object per averaging, at steps 3, 6 and 7, the bytes of 3 averagings"
else
    echo "FAIL --metrics:"
    sed 's/^/    /' "$dir/check"
    failures=$((failures + 1))
fi
for refused in "--zero 2" "--checkpoint-dir $dir/ck --checkpoint-every 4" "--check-replicas 5"; do
    # shellcheck disable=SC2086
    dp_mpirun 60 2 "$worker" $train --steps 7 --average-every 3 $refused >"$dir/out" 2>&1
    dp_check_outcome "--average-every 3 with $refused" fail $? "$dir/out" "--average-every 3"
done
[ ! -e "$dir/ck" ] || { echo "FAIL a refused run created its --checkpoint-dir"; failures=$((failures + 1)); }
echo "local-sgd-worker: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
