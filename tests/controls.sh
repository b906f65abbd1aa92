# Issue 35's training controls through dp_worker on 1-3 ranks: --clip-grad-norm under DDP,
# ZeRO-1/2/3, --accum and bf16 gradients (to rounding), under --exact bitwise on W = 1, 2, 3; a
# warm-up + cosine + clipping run resumed bit-exactly, and on another W at the same global step;
# --eval-every, --keep-best (the best checkpoints kept beside --keep's, listed in the newest) and
# --early-stop (exit 0 with a final checkpoint, its patience carried through --resume);
# --tensorboard read by TensorBoard's own EventAccumulator where the tensorboard package is
# installed (skipped, saying so, where not); --csv; a straggling rank named; bad values refused.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-controls-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
# The sanitizer build (scripts/check-sanitizers.sh) runs each control once, not every strategy and
# world size again: those are the same code paths, and ASan makes each launch several times slower.
quick=0
ldd "$worker" 2>/dev/null | grep -q libasan && quick=1
common="--device cpu --threads $dp_threads --data synthetic:1200,16,4 --layers 16,32,4 --batch 60 --seed 7"

# train NAME NP [options...]: dp_worker on NP ranks, output in $dir/NAME.out; 0 when it succeeded.
train() {
    name=$1 np=$2
    shift 2
    if dp_mpirun 60 "$np" "$worker" $common "$@" >"$dir/$name.out" 2>&1; then
        return 0
    fi
    dp_fail_case "$name: dp_worker failed" "$dir/$name.out"
    return 1
}

# close NAME A B TOL: two --save files within TOL relative.
close() {
    cases=$((cases + 1))
    if out=$(python3 "$srcdir/tests/params_close.py" "$2" "$3" "$4" 2>&1); then
        echo "ok   $1: $out"
    else
        echo "FAIL $1: $out"
        failures=$((failures + 1))
    fi
}

# expect NAME FILE PHRASE: FILE holds PHRASE.
expect() {
    cases=$((cases + 1))
    if grep -F -q -- "$3" "$2"; then
        echo "ok   $1: $(grep -F -m1 -- "$3" "$2" | cut -c1-160)"
    else
        dp_fail_case "$1: lacks '$3'" "$2"
    fi
}

clipped() { sed -n "s/.*; \([0-9]*\) steps' gradients clipped.*/\1/p" "$1"; }

echo "--- --clip-grad-norm"
clip="--steps 20 --log-every 5 --clip-grad-norm 0.05"
train clip-w1 1 $clip --save "$dir/clip-w1.st" && train clip-ddp 2 $clip --save "$dir/clip-ddp.st" --metrics "$dir/clip-ddp.jsonl"
stages="1 2 3"
[ "$quick" -eq 0 ] || stages=3
for stage in $stages; do
    train "clip-zero$stage" 2 $clip --zero "$stage" --save "$dir/clip-zero$stage.st" --metrics "$dir/clip-zero$stage.jsonl" &&
        close "ZeRO-$stage clips like DDP" "$dir/clip-zero$stage.st" "$dir/clip-ddp.st" 1e-5
done
close "2 ranks clip like 1" "$dir/clip-ddp.st" "$dir/clip-w1.st" 1e-5
cases=$((cases + 1))
n=$(clipped "$dir/clip-ddp.out")
if [ "${n:-0}" -ge 15 ] && python3 - "$dir/clip-ddp.jsonl" "$dir/clip-zero3.jsonl" <<'EOF'; then
import json, sys
runs = [[m for m in map(json.loads, open(p)) if "grad_norm" in m] for p in sys.argv[1:]]
assert all(len(r) == 4 for r in runs), [len(r) for r in runs]
for ddp, zero3 in zip(*runs):
    assert abs(zero3["grad_norm"] - ddp["grad_norm"]) <= 1e-6 * ddp["grad_norm"], (ddp, zero3)
EOF
    echo "ok   $n of 20 steps clipped; the metrics' norms of ZeRO-3 (its shards' squares all-reduced) within 1e-6 of DDP's"
else
    dp_fail_case "clipping: $n steps clipped, or ZeRO's norms differ from DDP's" "$dir/clip-ddp.out"
fi
expect "the step line shows the norm" "$dir/clip-ddp.out" "grad norm "
[ "$quick" -eq 0 ] && train clip-accum 2 --steps 20 --clip-grad-norm 0.05 --batch 30 --accum 2 --save "$dir/clip-accum.st" &&
    close "--accum 2 clips like the whole batch" "$dir/clip-accum.st" "$dir/clip-ddp.st" 1e-5
[ "$quick" -eq 0 ] && train clip-bf16 2 $clip --grad-dtype bf16 --save "$dir/clip-bf16.st" &&
    close "bf16 gradients clip like FP32 ones, within bf16's error" "$dir/clip-bf16.st" "$dir/clip-ddp.st" 2e-2
ranks="1 2 3"
[ "$quick" -eq 0 ] || ranks="1 3"
for np in $ranks; do
    train "exact-w$np" "$np" --exact --steps 20 --clip-grad-norm 0.05 --accum 2 --batch 30 --save "$dir/exact-w$np.st"
done
for np in ${ranks#1 }; do
    dp_check_same_bits "--exact with clipping: W = $np the same bits as W = 1" "$dir/exact-w1.st" "$dir/exact-w$np.st"
done
expect "--exact clipped" "$dir/exact-w3.out" "steps' gradients clipped"

echo "--- schedules: resumed bit-exactly, and on another W at the same global step"
sched="--steps 40 --warmup-steps 8 --warmup-start-factor 0.1 --lr-schedule cosine --lr-min 0.001 --clip-grad-norm 0.08 --log-every 1"
train sched 2 $sched --checkpoint-dir "$dir/sched.ckpt" --checkpoint-every 20 --save "$dir/sched.st" --metrics "$dir/sched.jsonl"
mkdir -p "$dir/half" && cp "$dir/sched.ckpt/step-000000020.safetensors" "$dir/half/"
train sched-resumed 2 $sched --resume "$dir/half" --save "$dir/sched-resumed.st"
dp_check_same_bits "a warm-up + cosine + clipping run resumed at step 20 gives the uninterrupted run's bits" \
    "$dir/sched.st" "$dir/sched-resumed.st"
train sched-w3 3 $sched --resume "$dir/half" --metrics "$dir/sched-w3.jsonl"
cases=$((cases + 1))
if python3 - "$dir/sched.jsonl" "$dir/sched-w3.jsonl" <<'EOF'; then
import json, sys
lr = [{m["step"]: m["lr"] for m in map(json.loads, open(p)) if "lr" in m} for p in sys.argv[1:]]
assert sorted(lr[1]) == list(range(21, 41)), sorted(lr[1])
assert all(lr[1][s] == lr[0][s] for s in lr[1]), [(s, lr[0][s], lr[1][s]) for s in lr[1] if lr[0][s] != lr[1][s]]
assert lr[0][1] < lr[0][8] and lr[0][9] == max(lr[0].values()) and lr[0][40] < lr[0][30], lr[0]
EOF
    echo "ok   resumed on 3 ranks, steps 21-40 take the 2-rank run's rates (warm-up to step 8, cosine after)"
else
    dp_fail_case "the 3-rank resume's rates differ from the 2-rank run's" "$dir/sched-w3.out"
fi

echo "--- --eval-every, --keep-best, --early-stop"
# The parameters frozen after step 1 (the rate times 1e-30): every evaluation ties with the first,
# so the best two stay steps 5 and 10 while --keep 1 prunes everything else but the newest.
frozen="--lr-schedule step:1,1e-30"
train best 2 --steps 60 $frozen --eval-every 5 --checkpoint-dir "$dir/best.ckpt" --checkpoint-every 5 --keep 1 \
    --keep-best 2 --metrics "$dir/best.jsonl"
cases=$((cases + 1))
if python3 - "$dir/best.ckpt" "$dir/best.jsonl" <<'EOF'; then
import json, os, struct, sys
ckpt = sys.argv[1]
files = sorted(f for f in os.listdir(ckpt) if f.startswith("step-"))
def meta(f):
    with open(os.path.join(ckpt, f), "rb") as h:
        n = struct.unpack("<Q", h.read(8))[0]
        return json.loads(h.read(n))["__metadata__"]
newest = meta(files[-1])
best = [int(e.split("=")[0]) for e in newest["best_steps"].split(",")]
evals = [m["eval"] for m in map(json.loads, open(sys.argv[2])) if "eval" in m]
assert [e["step"] for e in evals] == list(range(5, 61, 5)), evals
top = sorted(evals, key=lambda e: (e["test_loss"], e["step"]))[:2]
assert best == [e["step"] for e in top] == [5, 10], (best, top)
expected = sorted({60} | set(best))
assert [int(f[5:14]) for f in files] == expected, (files, expected)
assert newest["best_metric"] == "test_loss" and int(newest["best_step"]) == best[0]
print(f"kept {files}: the newest and the best 2 ({best})")
EOF
    echo "ok   --keep 1 --keep-best 2: the newest checkpoint and the two best evaluations' (listed in its best_steps), no other"
else
    dp_fail_case "--keep-best kept the wrong checkpoints" "$dir/best.out"
fi
# Resumed with --keep-best 1: the best one of the two listed, and pruning lets step 10's go.
train best-shrunk 2 --steps 70 $frozen --eval-every 5 --checkpoint-dir "$dir/best.ckpt" --checkpoint-every 5 \
    --keep 1 --keep-best 1 --resume auto
cases=$((cases + 1))
kept=$(ls "$dir/best.ckpt" | grep '^step-' | tr '\n' ' ')
if [ "$kept" = "step-000000005.safetensors step-000000070.safetensors " ]; then
    echo "ok   resumed with --keep-best 1: the best (step 5) and the newest kept, step 10's pruned"
else
    dp_fail_case "resumed with --keep-best 1, kept: $kept" "$dir/best-shrunk.out"
fi
# Frozen parameters again: no evaluation improves on the first.
frozen="$frozen --eval-every 5 --early-stop 3 --checkpoint-dir $dir/stop.ckpt"
train stop 2 --steps 1000 $frozen --save "$dir/stop.st"
expect "--early-stop 3 stops after three evaluations without improvement, exit 0" "$dir/stop.out" \
    "early stop: 3 evaluations without a better test_loss than"
expect "... after step 20, checkpointed" "$dir/stop.out" "stopped after step 20 of 1000, checkpointed in"
cases=$((cases + 1))
if [ -f "$dir/stop.ckpt/step-000000020.safetensors" ] && [ -f "$dir/stop.st" ]; then
    echo "ok   the final checkpoint (step 20) and --save written"
else
    dp_fail_case "no final checkpoint or --save after the early stop" "$dir/stop.out"
fi
train stop-part 2 --steps 10 $frozen --checkpoint-dir "$dir/stop2.ckpt" && \
    train stop-resumed 2 --steps 1000 $frozen --checkpoint-dir "$dir/stop2.ckpt" --resume auto
expect "the patience survives --resume: two evaluations before it, one after" "$dir/stop-resumed.out" \
    "stopped after step 20 of 1000"
train csv 1 --data "synthetic:600,16,4" --test-data "synthetic:60,16,4" --steps 4 --eval-every 2 --csv "$dir/run.csv" \
    --log-every 2 --clip-grad-norm 1
cases=$((cases + 1))
rows=$(wc -l <"$dir/run.csv")
if head -1 "$dir/run.csv" | grep -q '^step,epoch,loss,samples_per_s,.*,lr,grad_norm,.*,test_loss,test_accuracy$' && [ "$rows" -eq 5 ]; then
    echo "ok   --csv: a header, 2 progress rows (steps 2, 4) and 2 evaluation rows"
else
    dp_fail_case "--csv: header or $rows lines" "$dir/run.csv"
fi

echo "--- --tensorboard"
train tb 2 --steps 30 --log-every 5 --eval-every 10 --clip-grad-norm 0.05 --tensorboard "$dir/tb2"
reader=""
for python in python3 /usr/bin/python3; do
    if command -v "$python" >/dev/null && "$python" -c "import tensorboard.backend.event_processing.event_accumulator" 2>/dev/null; then
        reader=$python
        break
    fi
done
if [ -z "$reader" ]; then
    echo "skip --tensorboard through TensorBoard's EventAccumulator: the tensorboard package is not installed" \
        "(pip install tensorboard; test_tensorboard checked the format)"
else
    cases=$((cases + 1))
    if "$reader" - "$dir/tb2" <<'EOF'; then
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(sys.argv[1])
acc.Reload()
tags = set(acc.Tags()["scalars"])
want = {"train/loss", "train/lr", "train/grad_norm", "train/samples_per_s", "time/forward_ms", "time/ms_per_step",
        "ranks/step_ms_max", "ranks/slowest_rank", "memory/backend_mib", "test/loss", "test/accuracy"}
assert want <= tags, want - tags
assert [e.step for e in acc.Scalars("train/loss")] == [5, 10, 15, 20, 25, 30]
assert [e.step for e in acc.Scalars("test/loss")] == [10, 20, 30]
assert all(abs(e.value - 0.05) < 1e-9 for e in acc.Scalars("train/lr"))
print(f"{len(tags)} scalar tags")
EOF
        echo "ok   TensorBoard's EventAccumulator reads the file: every tag, the steps of losses and evaluations"
    else
        dp_fail_case "TensorBoard's EventAccumulator could not read $dir/tb2" "$dir/tb.out"
    fi
fi

echo "--- the slowest rank"
train straggle 3 --steps 10 --log-every 5 --debug-straggle 1:40 --metrics "$dir/straggle.jsonl"
expect "a rank sleeping 40 ms a step is named" "$dir/straggle.out" "slowest rank 1 +"
cases=$((cases + 1))
if python3 -c "
import json, sys
lines = [m for m in map(json.loads, open(sys.argv[1])) if 'step' in m]
assert len(lines) == 2 and all(m['slowest_rank'] == 1 and m['rank_step_ms_max'] > 35 > m['rank_step_ms_median'] for m in lines), lines
" "$dir/straggle.jsonl"; then
    echo "ok   --metrics: slowest_rank 1, its compute above 35 ms/step, the median below"
else
    dp_fail_case "--metrics does not name rank 1" "$dir/straggle.jsonl"
fi

echo "--- bad values: one line, exit 2 (options) or 1 (the run)"
# refused NAME STATUS PHRASE [options...]
refused() {
    name=$1 want=$2 phrase=$3
    shift 3
    dp_mpirun 20 2 "$worker" $common --steps 10000000 "$@" >"$dir/refused.out" 2>&1
    status=$?
    cases=$((cases + 1))
    if [ "$status" -eq "$want" ] && grep -F -q -- "$phrase" "$dir/refused.out" && [ "$(grep -c 'error:' "$dir/refused.out")" -eq 1 ]; then
        echo "ok   $name (exit $status): $(grep -F -m1 -- "$phrase" "$dir/refused.out")"
    else
        dp_fail_case "$name: exit $status (want $want) or not one line with '$phrase'" "$dir/refused.out"
    fi
}
refused "--clip-grad-norm nan" 2 "--clip-grad-norm 'nan': must be a finite number > 0" --clip-grad-norm nan
refused "--warmup-steps -3" 2 "--warmup-steps '-3': must be an integer >= 1" --warmup-steps -3
refused "--lr-schedule step:0,0.1" 2 "--lr-schedule 'step:0,0.1'" --lr-schedule step:0,0.1
refused "--keep-best without --checkpoint-dir" 2 "--keep-best applies to --checkpoint-dir" --keep-best 2
refused "--early-stop 1e99" 2 "--early-stop '1e99'" --early-stop 1e99
refused "--tensorboard with --predict" 2 "--tensorboard does not apply to --predict" --predict x.npy --tensorboard tb
refused "--warmup-steps beyond the run" 1 "--warmup-steps 50: the run has 40 steps" --steps 40 --warmup-steps 50
refused "--debug-straggle of a rank beyond the world" 2 "--debug-straggle names rank 2, but the run has 2 ranks (0 to 1)" --debug-straggle 2:10
refused "--debug-corrupt of a rank beyond the world" 2 "--debug-corrupt names rank 7, but the run has 2 ranks (0 to 1)" --debug-corrupt 7:1
# A .npy pair has no test split.
python3 - "$dir" <<'EOF'
import struct, sys
def npy(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
npy(sys.argv[1] + "/x.npy", "<f4", "(60, 16)", struct.pack("<960f", *[(i % 7) / 7 for i in range(960)]))
npy(sys.argv[1] + "/y.npy", "<i8", "(60,)", struct.pack("<60q", *[i % 4 for i in range(60)]))
EOF
refused "--eval-every without a test set" 1 "--eval-every needs a test set" --data "$dir/x.npy,$dir/y.npy" --eval-every 5
echo "controls: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
