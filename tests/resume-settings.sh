# --resume compares every setting the checkpoint records: a different model, optimizer or
# sample order is refused naming the setting; a different learning rate, schedule length,
# world size, BLAS thread count, all-reduce or hier's inner all-reduce continues but says which
# settings changed and that the run is no longer bit-exact; the same settings continue
# bit-exactly, also for more steps at a constant rate, and --precision tf32 under --device
# auto's CPU fallback (no GPU arithmetic).
. "$srcdir/tests/common.sh"
worker="$top_builddir/dp_worker"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-resume-XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0 cases=0
# The device and BLAS threads pinned: bits and the recorded compute depend on them, and the
# defaults on the machine (a GPU, the core count). A later --threads overrides.
base="--data synthetic:300,8,3 --model linear(16),relu,linear(3) --batch 30 --seed 5 --device cpu --threads 1"

# resume NAME WANT PHRASE RANKS [options]: resumes the 10-step checkpoint with options.
resume() {
    name=$1 want=$2 phrase=$3 np=$4
    shift 4
    # shellcheck disable=SC2086
    dp_mpirun 60 "$np" "$worker" $base --resume "$dir/ckpt" "$@" >"$dir/out" 2>&1
    dp_check_outcome "$name" "$want" $? "$dir/out" "$phrase"
}

# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $base --steps 10 --lr-schedule cosine --checkpoint-dir "$dir/ckpt" --quiet >/dev/null 2>&1 ||
    { echo "FAIL could not write the checkpoint to resume"; failures=$((failures + 1)); }
resume "same settings" ok "continuing bit-exactly" 2 --steps 10 --lr-schedule cosine
resume "a changed learning rate" ok "not bit-exactly, because these settings changed: lr 0.05 -> 0.1" 2 --steps 10 --lr-schedule cosine --lr 0.1
resume "a longer cosine schedule" ok "total_steps 10 -> 20" 2 --steps 20 --lr-schedule cosine
resume "a constant schedule" ok "lr_schedule cosine -> constant" 2 --steps 10
resume "fewer ranks" ok "world_size 2 -> 1" 1 --steps 10 --lr-schedule cosine
# OpenBLAS rounds some products differently on another thread count.
resume "other BLAS threads" ok "compute cpu with 1 BLAS thread -> cpu with 2 BLAS threads" 2 --steps 10 \
    --lr-schedule cosine --threads 2
# A constant rate does not depend on the run's length: a longer run is still bit-exact.
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $base --steps 10 --checkpoint-dir "$dir/constant" --quiet >/dev/null 2>&1 ||
    { echo "FAIL could not write the constant-rate checkpoint"; failures=$((failures + 1)); }
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $base --steps 20 --resume "$dir/constant" >"$dir/out" 2>&1
dp_check_outcome "a longer constant-rate run" ok $? "$dir/out" "continuing bit-exactly"
resume "another model" fail "the checkpoint has model=sequential 8: linear(out=16,bias=1),relu,linear(out=3,bias=1) but this run has model=sequential 8: linear(out=17,bias=1)" 2 --steps 10 --model "linear(17),relu,linear(3)"
resume "another optimizer" fail "the checkpoint has optimizer=sgd but this run has optimizer=adamw" 2 --steps 10 --optimizer adamw
resume "another sample order" fail "seed=5 but this run has seed=6" 2 --steps 10 --seed 6
# --precision only changes a GPU's GEMMs: where --device auto trains on the CPU (no GPU
# visible), a tf32 checkpoint's compute is the CPU's, and resuming it on the CPU is bit-exact.
# shellcheck disable=SC2086
CUDA_VISIBLE_DEVICES= dp_mpirun 60 2 "$worker" $base --device auto --precision tf32 --steps 10 --checkpoint-dir "$dir/tf32" \
    --quiet >/dev/null 2>&1 || { echo "FAIL could not write the tf32 checkpoint"; failures=$((failures + 1)); }
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $base --steps 20 --resume "$dir/tf32" >"$dir/out" 2>&1
dp_check_outcome "a tf32 run that trained on the CPU" ok $? "$dir/out" "continuing bit-exactly"

# --allreduce hier records its inner algorithm as --allreduce is recorded: another inner one
# continues but says so; the same continues bit-exactly; leaving hier says both changed.
# shellcheck disable=SC2086
dp_mpirun 60 2 "$worker" $base --steps 10 --allreduce hier --hier-inner ring --checkpoint-dir "$dir/hier" --quiet \
    >/dev/null 2>&1 || { echo "FAIL could not write the hier checkpoint"; failures=$((failures + 1)); }
# resume_hier NAME PHRASE [options]: resumes the hier checkpoint on 2 ranks with options.
resume_hier() {
    name=$1 phrase=$2
    shift 2
    # shellcheck disable=SC2086
    dp_mpirun 60 2 "$worker" $base --steps 20 --resume "$dir/hier" "$@" >"$dir/out" 2>&1
    dp_check_outcome "$name" ok $? "$dir/out" "$phrase"
}
resume_hier "the same inner algorithm" "continuing bit-exactly" --allreduce hier --hier-inner ring
resume_hier "another inner algorithm" "not bit-exactly, because these settings changed: hier_inner ring -> rhd" \
    --allreduce hier --hier-inner rhd
resume_hier "hier left for ring" "these settings changed: allreduce hier -> ring, hier_inner ring -> (none)" \
    --allreduce ring

echo "resume settings: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
