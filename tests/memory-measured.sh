# What --memory-plan plans is what a run holds, for every strategy (issue 37, root cause 5): the
# banner's predicted row (parameters + gradients + optimizer state, + working buffers, the
# strategy's own included) equals the allocation counter's, the plan's activations equal the
# activations the run holds (evaluation included: it reuses the training slice's rows), and the
# plan's line for a strategy's own buffers (--exact's accumulator, local SGD's copies) is the
# working memory the run measures. A --max-memory-mb twice the plan trains.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-memory-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0

"$top_builddir/tests/npy_fixture" "$dir/images.npy" 96 1x12x12 1 &&
    "$top_builddir/tests/npy_fixture" --labels "$dir/labels.npy" 96 10 2 || { echo "FAIL could not write images"; exit 1; }
mlp="linear(256),batchnorm,relu,linear(256),relu,linear(5)"
cnn="conv2d(16,3,padding=1,bias=0),batchnorm,relu,maxpool(2),flatten,linear(32),relu,linear(10)"
# Issue 36: residual blocks keep their input's and their sum's gradients besides the outputs.
resnet="conv2d(8,3,padding=1,bias=0),batchnorm,relu,maxpool(3,stride=2,padding=1),residual{conv2d(8,3,padding=1,bias=0),batchnorm,relu,conv2d(8,3,padding=1,bias=0),batchnorm},residual{conv2d(16,3,stride=2,padding=1,bias=0),batchnorm|conv2d(16,1,stride=2,bias=0),batchnorm},globalavgpool,flatten,linear(10)"

# measured NAME MODEL DATA TEST STRATEGY: plan and run (2 ranks), then compare.
measured() {
    name=$1 model=$2 data=$3 test=$4 strategy=$5
    cases=$((cases + 1))
    common="--model $model --data $data --optimizer adamw --batch 12 --strategy $strategy"
    "$worker" --memory-plan $common --world 2 >"$dir/plan" 2>&1 || { dp_fail_case "$name: --memory-plan exit $?" "$dir/plan"; return; }
    dp_mpirun 120 2 "$worker" $common $test --steps 2 --device cpu --threads "$dp_threads" --log-every 0 \
        >"$dir/out" 2>&1 || { dp_fail_case "$name: run exit $?" "$dir/out"; return; }
    row=$(grep "this run, measured" "$dir/out")
    predicted=$(echo "$row" | awk '{ print $9, $11 }' | tr -d ')') held=$(echo "$row" | awk '{ print $15, $17 }' | tr -d ')')
    planned=$(sed -n 's/^activations per rank.* (\([0-9.]*\) MiB) for --batch.*/\1/p' "$dir/plan")
    activations=$(sed -n 's/^memory: rank 0 holds.* activations \([0-9.]*\).*/\1/p' "$dir/out" | tr -d ',')
    own=$(sed -n 's/^working buffers of .* (\([0-9.]*\) MiB) on a CPU rank.*/\1/p' "$dir/plan")
    working=$(echo "$held" | awk '{ print $2 }')
    if [ -z "$row" ] || [ "$predicted" != "$held" ]; then
        dp_fail_case "$name: predicted '$predicted', measured '$held'" "$dir/out"
    elif [ -z "$planned" ] || [ "$planned" != "$activations" ]; then
        dp_fail_case "$name: activations planned '$planned' MiB, held '$activations'" "$dir/plan"
    elif [ -n "$own" ] && [ "$own" != "$working" ]; then
        dp_fail_case "$name: the plan's own working buffers $own MiB, the run's $working" "$dir/plan"
    else
        echo "ok   $name: measured = predicted ($held MiB), activations $activations MiB as planned${own:+, own working $own MiB}"
    fi
}
for strategy in ddp zero-1 zero-2 zero-3 exact exact:rows=5 local-sgd bf16-compress; do
    measured "$strategy, an MLP with BatchNorm" "$mlp" synthetic:300,64,5 "" "$strategy"
done
for strategy in ddp zero-3 exact; do
    measured "$strategy, a CNN evaluated on a test set" "$cnn" "$dir/images.npy,$dir/labels.npy" \
        "--test-data $dir/images.npy,$dir/labels.npy" "$strategy"
done

for strategy in ddp zero-3; do
    measured "$strategy, a ResNet evaluated on a test set" "$resnet" "$dir/images.npy,$dir/labels.npy" \
        "--test-data $dir/images.npy,$dir/labels.npy" "$strategy"
done

# The plan's total held (rank 0) is a working limit: twice it trains, evaluation included.
"$worker" --memory-plan --model "$cnn" --data "$dir/images.npy,$dir/labels.npy" --batch 12 --world 2 >"$dir/plan" 2>&1
max_mb=$(awk '$1 == "--zero" && $2 == "0" { total = $7 } /^activations per rank/ { sub(/.*\(/, ""); act = $1 }
    END { printf "%.2f", 2 * (total + act * 1.048576) / 1.048576 }' "$dir/plan")
dp_mpirun 120 2 "$worker" --model "$cnn" --data "$dir/images.npy,$dir/labels.npy" --test-data "$dir/images.npy,$dir/labels.npy" \
    --batch 12 --steps 2 --device cpu --threads "$dp_threads" --max-memory-mb "$max_mb" >"$dir/out" 2>&1
dp_check_outcome "a CNN under --max-memory-mb $max_mb, twice its plan" ok $? "$dir/out" "final test loss"

echo "$((cases - failures)) of $cases cases passed"
[ "$failures" -eq 0 ]
