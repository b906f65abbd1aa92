# Residual models against PyTorch: checkpoints of --model resnet18 and resnet50 (trained on 2
# ranks) load into torchvision.models.resnetNN(num_classes=K) with strict=True and compute what
# dp_worker --predict computes; torchvision's own initial weights (scripts/torchvision_weights.py)
# go the other way, into --predict and training; a hand-written spec with labels, nested blocks,
# an identity shortcut, relu=0 and padded pooling loads into the model torch_interop.py builds
# from the same text. Skipped (77) where no Python has PyTorch and torchvision.
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
fixture="$top_builddir/tests/npy_fixture"
interop="$srcdir/scripts/torch_interop.py"

# The first Python with PyTorch and torchvision (Debian's python3-torch lives under /usr/bin).
python=
for candidate in python3 /usr/bin/python3; do
    "$candidate" -c 'import torch, torchvision' 2>/dev/null && { python=$candidate; break; }
done
if [ -z "$python" ]; then
    echo "skip: no Python with PyTorch and torchvision (tried python3, /usr/bin/python3)"
    exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-resnet-interop-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0

# --device cpu: with --device auto one rank would take a GPU where two ranks fall back to the CPU.
run() { np=$1; shift; dp_mpirun 60 "$np" "$@" --device cpu >"$dir/out" 2>&1; }
check() { dp_check_outcome "$1" ok "$2" "$dir/out" "$3"; }
fixtures() { "$fixture" "$@" || dp_fail_case "npy_fixture $*"; }
# compare WHAT SPEC CHECKPOINT INPUTS OUTPUTS: PyTorch's eval outputs within 1e-5 of OUTPUTS.
compare() {
    status=0
    timeout 60 "$python" "$interop" --model "$2" --tolerance 1e-5 "$3" "$4" "$5" >"$dir/out" 2>&1 || status=$?
    check "PyTorch loads $1 (strict) and computes the same outputs" "$status" "load_state_dict(strict=True)"
}
# finite_loss WHAT: the last loss the run printed (step or epoch line) is a finite number.
finite_loss() {
    cases=$((cases + 1))
    loss=$(awk '{ for (i = 1; i < NF; i++) if ($i == "loss") v = $(i + 1) } END { print v }' "$dir/out")
    if printf '%s\n' "$loss" | grep -E -q '^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'; then
        echo "ok   $1: loss $loss"
    else
        dp_fail_case "$1: the last loss printed is '$loss', not a finite number" "$dir/out"
    fi
}

# (a) resnet18 on 3x32x32 images, 10 classes: 2 steps on 2 ranks, predicted on 1 rank.
fixtures "$dir/images.npy" 96 3x32x32 11
fixtures --labels "$dir/labels.npy" 96 10 12
fixtures "$dir/inputs.npy" 40 3x32x32 13
run 2 "$worker" --data "$dir/images.npy,$dir/labels.npy" --model resnet18 --steps 2 --batch 32 --threads 1 \
    --save "$dir/resnet18.safetensors"
check "train resnet18 for 2 steps on 2 ranks" $? "summary:"
run 1 "$worker" --predict "$dir/inputs.npy" --init "$dir/resnet18.safetensors" --model resnet18 \
    --output "$dir/resnet18.npy" --threads "$dp_threads"
check "predict with resnet18 on 1 rank" $? "wrote $dir/resnet18.npy"
compare "the resnet18 checkpoint as torchvision.models.resnet18(num_classes=10)" resnet18 \
    "$dir/resnet18.safetensors" "$dir/inputs.npy" "$dir/resnet18.npy"

# (b) resnet50 (Bottleneck blocks), kept small: 16 rows, 1 step on 2 ranks, 8 rows predicted.
run 2 "$worker" --data "$dir/images.npy,$dir/labels.npy" --model resnet50 --steps 1 --batch 16 --threads 1 \
    --save "$dir/resnet50.safetensors"
check "train resnet50 for 1 step on 2 ranks" $? "summary:"
fixtures "$dir/inputs8.npy" 8 3x32x32 14
run 1 "$worker" --predict "$dir/inputs8.npy" --init "$dir/resnet50.safetensors" --model resnet50 \
    --output "$dir/resnet50.npy" --threads "$dp_threads"
check "predict with resnet50 on 1 rank" $? "wrote $dir/resnet50.npy"
compare "the resnet50 checkpoint as torchvision.models.resnet50(num_classes=10)" resnet50 \
    "$dir/resnet50.safetensors" "$dir/inputs8.npy" "$dir/resnet50.npy"

# (c) the other way: torchvision's initial resnet18 weights into --predict and into training.
status=0
timeout 60 "$python" "$srcdir/scripts/torchvision_weights.py" resnet18 10 3 "$dir/init.safetensors" --seed 5 \
    >"$dir/out" 2>&1 || status=$?
check "write torchvision's initial resnet18 weights" "$status" "wrote $dir/init.safetensors"
run 1 "$worker" --predict "$dir/inputs.npy" --init "$dir/init.safetensors" --model resnet18 \
    --output "$dir/init.npy" --threads "$dp_threads"
check "predict from torchvision's weights" $? "wrote $dir/init.npy"
compare "torchvision's own weights" resnet18 "$dir/init.safetensors" "$dir/inputs.npy" "$dir/init.npy"
run 2 "$worker" --data "$dir/images.npy,$dir/labels.npy" --model resnet18 --init "$dir/init.safetensors" \
    --steps 2 --batch 32 --threads 1
check "train 2 steps from torchvision's weights on 2 ranks" $? "summary:"
finite_loss "training from torchvision's weights"

# (d) a spec written by hand on 1x12x12 images: an identity block (layers.3), a labelled block
# without its final ReLU (blk: blk.c, blk.body.1, blk.shortcut.0) holding a labelled block
# (blk.inner.body.0, blk.inner.bn) with a projection under a dotted label (blk.inner.proj.0),
# padded max and average pooling, SyncBatchNorm on 2 ranks.
spec="conv2d(4,3,padding=1,bias=0),batchnorm,relu,residual{conv2d(4,3,padding=1,bias=0),batchnorm,relu,\
conv2d(4,3,padding=1,bias=0),batchnorm},blk:residual(relu=0){c:conv2d(8,3,stride=2,padding=1,bias=0),batchnorm,\
inner:residual{conv2d(8,3,padding=1,bias=0),bn:batchnorm|proj.0:conv2d(8,1,bias=0),proj.1:batchnorm},relu\
|conv2d(8,1,stride=2,bias=0),batchnorm},maxpool(3,stride=2,padding=1),avgpool(3,stride=1,padding=1),\
globalavgpool,flatten,linear(5)"
fixtures "$dir/small.npy" 96 1x12x12 15
fixtures --labels "$dir/small-labels.npy" 96 5 16
fixtures "$dir/small-inputs.npy" 40 1x12x12 17
run 2 "$worker" --data "$dir/small.npy,$dir/small-labels.npy" --model "$spec" --steps 3 --batch 32 --threads 1 \
    --sync-bn --save "$dir/small.safetensors"
check "train the hand-written residual spec for 3 steps on 2 ranks (--sync-bn)" $? "summary:"
run 1 "$worker" --predict "$dir/small-inputs.npy" --init "$dir/small.safetensors" --model "$spec" \
    --output "$dir/small-out.npy" --threads "$dp_threads"
check "predict with the hand-written residual spec" $? "wrote $dir/small-out.npy"
compare "the hand-written residual spec's checkpoint" "$spec" "$dir/small.safetensors" "$dir/small-inputs.npy" \
    "$dir/small-out.npy"

echo "resnet-interop: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
