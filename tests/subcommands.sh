# dp_worker predict and dp_worker plan: the same outputs as the old flags --predict and
# --memory-plan, their own --help, and every option they do not take, like every option of
# another mode (issue 37), refused with exit status 2 (usage) and one line naming both.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-subcommands-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
model="--layers 12,16,5"

# expect_usage NAME PHRASE [dp_worker arguments...]: 2 ranks end within 10 s with status 2 and PHRASE.
expect_usage() {
    name=$1 phrase=$2
    shift 2
    dp_mpirun 10 2 "$worker" "$@" >"$dir/out" 2>&1
    status=$?
    if [ "$status" -ne 2 ]; then
        cases=$((cases + 1))
        dp_fail_case "$name: exit status $status (want 2, usage)" "$dir/out"
    else
        dp_check_outcome "$name" fail "$status" "$dir/out" "$phrase"
    fi
}

dp_mpirun 60 2 "$worker" --device cpu --data synthetic:600,12,5 $model --steps 5 --save "$dir/model.safetensors" \
    >"$dir/out" 2>&1
dp_check_outcome "train the model to run" ok $? "$dir/out" "summary:"
"$top_builddir/tests/npy_fixture" "$dir/inputs.npy" 700 12 5 || failures=$((failures + 1))
for classes in "" --predict-classes; do
    dp_mpirun 60 2 "$worker" predict "$dir/inputs.npy" --init "$dir/model.safetensors" $model --device cpu \
        --output "$dir/sub$classes.npy" $classes >"$dir/out" 2>&1
    dp_check_outcome "dp_worker predict ${classes:-(outputs)}" ok $? "$dir/out" "wrote $dir/sub$classes.npy"
    dp_mpirun 60 2 "$worker" --predict "$dir/inputs.npy" --init "$dir/model.safetensors" $model --device cpu \
        --output "$dir/flag$classes.npy" $classes >"$dir/out" 2>&1
    dp_check_outcome "dp_worker --predict ${classes:-(outputs)}" ok $? "$dir/out" "wrote $dir/flag$classes.npy"
    dp_check_same_bits "dp_worker predict writes --predict's bytes ${classes:-(outputs)}" "$dir/sub$classes.npy" \
        "$dir/flag$classes.npy"
done

plan="--layers 784,1024,1024,10 --world 4 --optimizer adamw --zero-live-mb 2 --batch 512"
# shellcheck disable=SC2086
"$worker" plan $plan >"$dir/plan-sub" 2>&1
dp_check_outcome "dp_worker plan" ok $? "$dir/plan-sub" "memory plan: "
# shellcheck disable=SC2086
"$worker" --memory-plan $plan >"$dir/plan-flag" 2>&1
cases=$((cases + 1))
if cmp -s "$dir/plan-sub" "$dir/plan-flag"; then
    echo "ok   dp_worker plan prints --memory-plan's table"
else
    dp_fail_case "dp_worker plan differs from --memory-plan" "$dir/plan-flag"
fi

for program in predict plan; do
    "$worker" "$program" --help >"$dir/help" 2>&1
    dp_check_outcome "dp_worker $program --help" ok $? "$dir/help" "dp_worker $program"
    grep -q -- "--steps" "$dir/help" && dp_fail_case "dp_worker $program --help lists --steps" "$dir/help"
done

# A subcommand with another program's option, without what it needs, or with a stray argument.
expect_usage "predict with a training option" "--steps does not apply to dp_worker predict" \
    predict "$dir/inputs.npy" --init "$dir/model.safetensors" --output "$dir/p.npy" --steps 2
expect_usage "plan with a training option" "--save does not apply to dp_worker plan" plan --save "$dir/m.safetensors"
expect_usage "predict without its inputs" "dp_worker predict needs INPUTS.npy" predict --init "$dir/model.safetensors"
expect_usage "predict with two inputs" "'$dir/b.npy': unexpected argument" predict "$dir/a.npy" "$dir/b.npy"
expect_usage "plan with a --world of 0" "--world '0': must be an integer >= 1" plan --world 0
[ ! -e "$dir/p.npy" ] || dp_fail_case "a refused dp_worker predict wrote $dir/p.npy"

# Options of another mode (issue 37), each refused before any work.
long="--data synthetic:600,12,5 $model --steps 10000000"
# shellcheck disable=SC2086
{
    expect_usage "--hier-inner without hier" "--hier-inner applies to --allreduce hier, but --allreduce is auto" \
        $long --hier-inner rhd
    expect_usage "--segment-bytes without ring-pipelined" "--segment-bytes applies to --allreduce ring-pipelined or auto" \
        $long --allreduce ring --segment-bytes 4096
    expect_usage "--keep without --checkpoint-dir" "--keep applies to --checkpoint-dir, but --checkpoint-dir is not given" \
        $long --keep 2
    expect_usage "--sync-bn without a BatchNorm" "--sync-bn applies to a model with batchnorm, but --layers '12,16,5' has none" \
        $long --sync-bn
    expect_usage "--bucket-mb with --no-overlap" "--bucket-mb applies to buckets reduced during backward, but --no-overlap is given" \
        $long --no-overlap --bucket-mb 4
    expect_usage "--auto-table without auto" "--auto-table applies to --allreduce auto, but --allreduce is mpi" \
        $long --allreduce mpi --auto-table "$dir/auto.table"
    expect_usage "--zero-live-mb with --zero 1" "--zero-live-mb applies to the strategies zero-2, zero-3, but the run's is zero-1" \
        $long --zero 1 --zero-live-mb 4
}

echo "subcommands: $((cases - failures)) of $cases passed"
[ "$failures" -eq 0 ]
