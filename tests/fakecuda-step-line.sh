# The step line on a GPU (the fake CUDA runtime) reports the device's own time per phase from
# CUDA events and says so, before the host's split; --metrics gets the same as device_*_ms;
# with --trace on (whose timeline shares the device timer) the line and the trace both come;
# more micro-batches than the clock's marks leave the device split out rather than wrong;
# the CPU's line has no device split. Exits 77 where not built.
. "$srcdir/tests/common.sh"
fake="$top_builddir/tests/fakecuda/dp_worker"
[ -x "$fake" ] || { echo "fake CUDA tests not built"; exit 77; }
export FAKECUDA_CHECK_LEAKS=1 FAKECUDA_DEVICES=gpu0
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-step-line-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cases=0 failures=0
train="--data synthetic:300,8,3 --layers 8,16,3 --batch 30 --steps 4 --log-every 2"
device_split="device time from CUDA events: forward [0-9.]*, backward [0-9.]*, wait for comm [0-9.]*, optimizer [0-9.]*; host: forward"

# expect NAME WANT(has|lacks) FILE: the step lines of FILE have or lack the device split.
expect() {
    cases=$((cases + 1))
    lines=$(grep -c '^step ' "$3")
    with=$(grep -c "^step .*($device_split" "$3")
    if { [ "$2" = has ] && [ "$lines" -gt 0 ] && [ "$with" = "$lines" ]; } || { [ "$2" = lacks ] && [ "$lines" -gt 0 ] && [ "$with" = 0 ]; }; then
        echo "ok   $1: $(grep -m1 '^step ' "$3")"
    else
        echo "FAIL $1: want the step lines to $2 the device split:"
        sed 's/^/    /' "$3"
        failures=$((failures + 1))
    fi
}

# shellcheck disable=SC2086
dp_mpirun 60 1 "$fake" $train --device cuda --metrics "$dir/m.jsonl" >"$dir/gpu" 2>&1 || { cat "$dir/gpu"; exit 1; }
expect "GPU" has "$dir/gpu"
cases=$((cases + 1))
if grep '"step":' "$dir/m.jsonl" | grep -q '"device_forward_ms":[0-9.]*,"device_backward_ms":[0-9.]*,"device_wait_ms":[0-9.]*,"device_optimizer_ms":'; then
    echo "ok   --metrics has the device split"
else
    echo "FAIL --metrics lacks the device split:"; sed 's/^/    /' "$dir/m.jsonl"; failures=$((failures + 1))
fi
# shellcheck disable=SC2086
dp_mpirun 60 1 "$fake" $train --device cuda --trace "$dir/t.json" >"$dir/traced" 2>&1 || { cat "$dir/traced"; exit 1; }
expect "GPU with --trace" has "$dir/traced"
cases=$((cases + 1))
if grep -q "\"tid\":2,\"name\":\"forward layers" "$dir/t.json"; then echo "ok   the trace has the device's spans of the passes"; else echo "FAIL the trace lacks the device's spans"; failures=$((failures + 1)); fi
# 40 micro-batches need 83 marks, more than the clock holds (the epoch's short 4th step would fit).
# shellcheck disable=SC2086
dp_mpirun 60 1 "$fake" --data synthetic:300,8,3 --layers 8,16,3 --batch 2 --accum 40 --steps 3 --log-every 3 \
    --device cuda >"$dir/accum" 2>&1 || { cat "$dir/accum"; exit 1; }
expect "GPU, 40 micro-batches" lacks "$dir/accum"
# shellcheck disable=SC2086
dp_mpirun 60 1 "$top_builddir/dp_worker" $train --device cpu >"$dir/cpu" 2>&1 || { cat "$dir/cpu"; exit 1; }
expect "CPU" lacks "$dir/cpu"
echo "$cases cases, $failures failed"
[ "$failures" -eq 0 ]
