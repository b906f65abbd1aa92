# The ZeRO stages' memory and files through dp_worker: --memory-plan reproduces the documents'
# and the ZeRO paper's tables; a model that --max-memory-mb stops under --zero 0 trains under
# --zero 3 with the same limit, and the memory each stage measured (allocation counter) equals
# its prediction; --checkpoint-shards writes a file per rank and an index, prunes old shards
# and resumes into another stage and world size; bad options are refused.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-zero-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0

# plan_totals NAME WANT ARGS...: the total column of --memory-plan's four rows, in order.
plan_totals() {
    name=$1 want=$2
    shift 2
    cases=$((cases + 1))
    "$worker" --memory-plan "$@" >"$dir/plan" 2>&1 || { dp_fail_case "$name: exit $?" "$dir/plan"; return; }
    got=$(awk '$1 == "--zero" { print ($3 == "(DDP)" ? $7 : $6) }' "$dir/plan" | tr '\n' ' ')
    if [ "$got" = "$want " ]; then echo "ok   $name: totals $got"; else dp_fail_case "$name: totals '$got', want '$want'" "$dir/plan"; fi
}
plan_totals "the documents' 70B on 8 GPUs (fp16, no master copy)" "840.0 350.0 227.5 105.0" \
    --params 70e9 --world 8 --optimizer adamw --precision fp16
plan_totals "the ZeRO paper's 7.5B on 64 GPUs (mixed precision)" "120.0 31.4 16.6 1.9" \
    --params 7.5e9 --world 64 --optimizer adamw --precision mixed
grep -q "it counts no gradient memory" "$dir/plan" || dp_fail_case "--memory-plan does not explain the ZeRO-2 row" "$dir/plan"

# A CNN on [1, 28, 28] images (issue 18): its parameters as PyTorch counts them, and activations
# per rank (conv2d's lowered inputs included) that grow with the rows a rank takes.
"$top_builddir/tests/npy_fixture" "$dir/images.npy" 64 1x28x28 1 &&
    "$top_builddir/tests/npy_fixture" --labels "$dir/labels.npy" 64 10 2 || fail "could not write the CNN's images"
cnn="conv2d(32,3,padding=1,bias=0),batchnorm,relu,maxpool(2),conv2d(64,3,padding=1,bias=0),batchnorm,relu,maxpool(2),flatten,linear(128),relu,dropout(0.3),linear(10)"
for batch in 128 256; do
    "$worker" --memory-plan --model "$cnn" --data "$dir/images.npy,$dir/labels.npy" --world 2 --batch $batch \
        >"$dir/plan-$batch" 2>&1 || fail "--memory-plan of a CNN: exit $?" "$dir/plan-$batch"
done
cases=$((cases + 1))
if grep -q "memory plan: 421738 parameters" "$dir/plan-128"; then echo "ok   a CNN's parameters as PyTorch counts them"
else fail "a CNN's parameter count is not PyTorch's 421738" "$dir/plan-128"; fi
activations() { sed -n 's/^activations per rank.*: \([0-9.]*\) MB for --batch.*/\1/p' "$1"; }
cases=$((cases + 1))
if awk -v a="$(activations "$dir/plan-128")" -v b="$(activations "$dir/plan-256")" 'BEGIN { exit !(a > 50 && b / a > 1.9 && b / a < 2.1) }'; then
    echo "ok   a CNN's activations per rank: $(activations "$dir/plan-128") MB for 64 rows, $(activations "$dir/plan-256") for 128"
else fail "a CNN's activations do not double with the rows" "$dir/plan-256"; fi

# Nine layers of 256: a stage-3 rank holds a quarter of the state and two layers' worth of
# working buffers, so 6.5 MiB stops DDP (7.6 MiB) and lets --zero 3 (5.0 MiB on 2 ranks) train,
# with mpi's all-reduce (no scratch; auto reserves what the largest of its picks needs).
model="linear(256),relu,linear(256),relu,linear(256),relu,linear(256),relu,linear(256),relu,linear(256),relu,linear(256),relu,linear(256),relu,linear(5)"
run() { dp_mpirun 60 "$1" "$worker" --data synthetic:2000,64,5 --model "$model" --optimizer adamw --batch 64 --steps 4 \
    --bucket-mb 0.25 --max-memory-mb 6.5 --log-every 0 --allreduce mpi --zero "$2" >"$dir/out" 2>&1; }
run 2 0
dp_check_outcome "--zero 0 over --max-memory-mb" fail $? "$dir/out" "--max-memory-mb 6.5: "
grep -q -- "--memory-plan --model" "$dir/out" || dp_fail_case "the limit's message does not point at --memory-plan" "$dir/out"
for world in 2 4; do
    run "$world" 3
    dp_check_outcome "--zero 3 on $world ranks under the same limit" ok $? "$dir/out" "memory and communication (--strategy zero-3"
done

# The measured parameters + gradients + optimizer state and working buffers of each stage are
# its predicted row (the banner prints both for the stage that runs).
for stage in 0 1 2 3; do
    cases=$((cases + 1))
    dp_mpirun 60 2 "$worker" --data synthetic:500,64,5 --model "$model" --optimizer adamw --batch 64 --steps 2 \
        --bucket-mb 0.25 --log-every 0 --zero "$stage" >"$dir/out" 2>&1 || { dp_fail_case "--zero $stage run" "$dir/out"; continue; }
    row=$(grep "^  --zero $stage:.*this run, measured" "$dir/out")
    predicted=$(echo "$row" | awk '{ print $9, $11 }' | tr -d ')') measured=$(echo "$row" | awk '{ print $15, $17 }' | tr -d ')')
    if [ -n "$row" ] && [ "$predicted" = "$measured" ]; then
        echo "ok   --zero $stage: measured = predicted ($predicted MiB, + working)"
    else
        dp_fail_case "--zero $stage: predicted '$predicted', measured '$measured'" "$dir/out"
    fi
done

# --checkpoint-shards: every 2 steps on 2 ranks, keeping 2: steps 4 and 6 remain, each an
# index and two shards; then resumed on 3 ranks as --zero 2.
common="--data synthetic:500,20,5 --layers 20,32,5 --optimizer adamw --batch 60 --log-every 0"
dp_mpirun 60 2 "$worker" $common --steps 6 --zero 3 --checkpoint-dir "$dir/ckpt" --checkpoint-every 2 --keep 2 \
    --checkpoint-shards >"$dir/out" 2>&1
dp_check_outcome "--checkpoint-shards on 2 ranks" ok $? "$dir/out" "summary"
cases=$((cases + 1))
files=$(cd "$dir/ckpt" && ls | tr '\n' ' ')
want="step-000000004.rank-0-of-2.safetensors step-000000004.rank-1-of-2.safetensors step-000000004.safetensors step-000000006.rank-0-of-2.safetensors step-000000006.rank-1-of-2.safetensors step-000000006.safetensors "
[ "$files" = "$want" ] && echo "ok   shard files and indexes, older ones pruned" || dp_fail_case "checkpoint files: $files"
dp_mpirun 60 3 "$worker" $common --steps 8 --zero 2 --resume "$dir/ckpt" >"$dir/out" 2>&1
dp_check_outcome "resume the shards on 3 ranks as --zero 2" ok $? "$dir/out" "(sharded): continuing, but not bit-exactly, because these settings changed: world_size 2 -> 3"
rm "$dir/ckpt/step-000000006.rank-1-of-2.safetensors"
dp_mpirun 60 2 "$worker" $common --steps 8 --zero 3 --resume "$dir/ckpt/step-000000006.safetensors" >"$dir/out" 2>&1
dp_check_outcome "a missing shard of the index named" fail $? "$dir/out" "step-000000006.rank-1-of-2.safetensors"
# The directory: the newest complete checkpoint, as --resume auto finds it, naming what it passed over.
dp_mpirun 60 2 "$worker" $common --steps 8 --zero 3 --resume "$dir/ckpt" >"$dir/out" 2>&1
dp_check_outcome "a missing shard, the directory named" ok $? "$dir/out" "resume: $dir/ckpt/step-000000004.safetensors at step 4"
grep -q "passed over incomplete checkpoints: step-000000006.safetensors" "$dir/out" ||
    dp_fail_case "--resume DIR does not name the incomplete checkpoint it passed over" "$dir/out"

for bad in "--zero 4|--zero '4': must be one of 0, 1, 2, 3" "--precision fp8|--precision 'fp8'" \
    "--params 1e9|--params applies to --memory-plan" "--checkpoint-shards|--checkpoint-shards applies to --checkpoint-dir" \
    "--max-memory-mb 0|--max-memory-mb '0'"; do
    dp_mpirun 10 2 "$worker" ${bad%%|*} >"$dir/out" 2>&1
    dp_check_outcome "${bad%%|*}" fail $? "$dir/out" "${bad#*|}"
done

echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
