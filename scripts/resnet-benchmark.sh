#!/usr/bin/env bash
# The anchors' synthetic ResNet benchmark (Horovod's pytorch_synthetic_benchmark.py, PyTorch's DDP
# benchmark): images/s per rank and in total of dptrain and of PyTorch DDP, measured in the same run.
#
#   scripts/resnet-benchmark.sh [--model resnet18] [--size 32] [--batch 16] [--worlds "1 2"]
#       [--threads 1] [--warmup 3] [--steps 10] [--classes 10] [--device cpu|cuda] [--repeats 2]
#       [--bind auto|none] [--dptrain-args "..."] [--torch-args "..."]
#
# --batch is PER RANK (dp_worker gets --batch B*W, its global batch). Random images [3, S, S]
# (uniform in [-1, 1]) and labels (0 .. K-1, the last one set to K-1 so dp_worker, which counts
# the classes from the labels, builds the same K-class model as PyTorch) are made once with
# build/tests/npy_fixture in a temporary folder, enough rows for warmup + steps steps of the
# largest W, so dp_worker never starts a second epoch; .npy data has no test split and no
# --test-data is given, so dp_worker never evaluates. For each repeat and each W the two
# programs run alternately (which goes first alternates between repeats):
#   dptrain: mpirun -np W dp_worker --model M --data X.npy,Y.npy --batch B*W --threads T
#            --steps WARMUP+STEPS --log-every G --lr 0.01 (SGD momentum 0.9, dp_worker's default),
#            G = gcd(WARMUP, STEPS) (STEPS when WARMUP is 0): the progress lines after step WARMUP
#            cover exactly the measured steps (the last one alone when STEPS divides WARMUP); their
#            ms/step times G, summed, is the measured time (each line's time is rank 0's; its
#            samples are summed over the ranks). G = 1 (e.g. --warmup 3 --steps 10) prints a line,
#            one small all-reduce and a read of the loss, after every step, outside the timed
#            step: nothing measurable on the CPU, but on a GPU the read waits for the device, so
#            there prefer --warmup a multiple of --steps (G = STEPS, one line to measure).
#   PyTorch: scripts/torch_ddp_benchmark.py, the same model, size, per-rank batch, threads, W,
#            warm-up and steps, lr and momentum (DDP over gloo, nccl with --device cuda), started
#            by the same mpirun line (each process one rank).
# Binding, the same for both: mpirun binds nothing (OMPI_MCA_hwloc_base_binding_policy=none) and
# rank r runs under taskset on cores r*T .. r*T+T-1 of the cores this script may use (an MPMD
# line, one -np 1 per rank), when W*T of them exist (--bind auto); else, or with --bind none,
# nothing is bound (the table says which).
# Prints a markdown table (medians of --repeats runs; img/s per rank = total / W) after a header
# with the date, host, CPU, load average, versions and this command; progress goes to stderr.
# --dptrain-args and --torch-args add options to one side only (e.g. --torch-args
# "--channels-last"); the table's header repeats them.
# DP_WORKER names a built dp_worker (default build/dp_worker, built by scripts/build.sh when
# missing); NPY_FIXTURE the fixture writer (default: tests/npy_fixture beside DP_WORKER); PYTHON
# the Python with torch and torchvision (default: the first of python3, /usr/bin/python3 that
# imports both; without one the PyTorch columns say n/a). TMPDIR says where the images go.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
usage='usage: scripts/resnet-benchmark.sh [--model resnet18] [--size 32] [--batch 16 (per rank)] [--worlds "1 2"] [--threads 1] [--warmup 3] [--steps 10] [--classes 10] [--device cpu|cuda] [--repeats 2] [--bind auto|none] [--dptrain-args "..."] [--torch-args "..."]'
command_line="scripts/resnet-benchmark.sh"
for word in "$@"; do
    case $word in
    *[!A-Za-z0-9_./:=,+-]* | '') command_line="$command_line '$word'" ;;
    *) command_line="$command_line $word" ;;
    esac
done
model=resnet18 size=32 batch=16 worlds="1 2" threads=1 warmup=3 steps=10 classes=10 device=cpu repeats=2
bind=auto dptrain_args="" torch_args=""
while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || case $1 in -h | --help) ;; *) echo "$usage" >&2; exit 2 ;; esac
    case $1 in
    --model) model=$2 ;;
    --size) size=$2 ;;
    --batch) batch=$2 ;;
    --worlds) worlds=$2 ;;
    --threads) threads=$2 ;;
    --warmup) warmup=$2 ;;
    --steps) steps=$2 ;;
    --classes) classes=$2 ;;
    --device) device=$2 ;;
    --repeats) repeats=$2 ;;
    --bind) bind=$2 ;;
    --dptrain-args) dptrain_args=$2 ;;
    --torch-args) torch_args=$2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift 2
done
fail() { echo "resnet-benchmark.sh: $*" >&2; exit 2; }
positive() { case $1 in '' | *[!0-9]* | 0*) return 1 ;; esac; }
for name in size batch threads steps classes repeats; do
    positive "${!name}" || fail "--$name '${!name}': a positive whole number"
done
case $warmup in '' | *[!0-9]*) fail "--warmup '$warmup': a whole number" ;; esac
warmup=$((10#$warmup))
[ -n "$worlds" ] || fail "--worlds: at least one W"
max_world=0
for w in $worlds; do
    positive "$w" || fail "--worlds: '$w' is not a positive whole number"
    [ "$w" -le "$max_world" ] || max_world=$w
done
case $device in cpu | cuda) ;; *) fail "--device '$device': cpu or cuda" ;; esac
case $bind in auto | none) ;; *) fail "--bind '$bind': auto or none" ;; esac
case $model in *[!A-Za-z0-9_]* | '') fail "--model '$model': a name such as resnet18" ;; esac
[ "$classes" -ge 2 ] || fail "--classes '$classes': at least 2"

if [ -z "${DP_WORKER:-}" ]; then
    [ -x "$top/build/dp_worker" ] || "$top/scripts/build.sh" >&2
    DP_WORKER=$top/build/dp_worker
fi
fixture=${NPY_FIXTURE:-$(dirname "$DP_WORKER")/tests/npy_fixture}
[ -x "$fixture" ] || fail "no npy_fixture at $fixture (make -C build tests/npy_fixture, or set NPY_FIXTURE)"
. "$top/scripts/mpi-env.sh"
export OMPI_MCA_hwloc_base_binding_policy=none # taskset binds, the same for both programs
python=""
for candidate in ${PYTHON:-python3 /usr/bin/python3}; do
    "$candidate" -c 'import torch, torchvision' 2>/dev/null && { python=$candidate; break; }
done
[ -n "$python" ] || echo "resnet-benchmark.sh: no python3 with torch and torchvision: the PyTorch columns say n/a" >&2
torch_version="PyTorch: none"
if [ -n "$python" ]; then
    torch_version=$("$python" -c 'import torch, torchvision; print("PyTorch", torch.__version__ + ", torchvision", torchvision.__version__)')
    "$python" -c "import sys, types, torchvision.models as m; sys.exit(not isinstance(getattr(m, '$model', None), types.FunctionType))" 2>/dev/null || {
        echo "resnet-benchmark.sh: torchvision has no model '$model': the PyTorch columns say n/a" >&2
        python="" torch_version="$torch_version (no model $model)"
    }
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/resnet-benchmark.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

# The data: rows for warmup + steps steps of the largest W, the last label K - 1.
rows=$(((warmup + steps) * batch * max_world))
mib=$(awk -v r="$rows" -v s="$size" 'BEGIN { printf "%.0f", r * 3 * s * s * 4 / 1048576 }')
echo "resnet-benchmark.sh: $rows random images 3x${size}x$size ($mib MiB) in $work" >&2
"$fixture" "$work/x.npy" "$rows" "3x${size}x$size" 1
"$fixture" --labels "$work/y.npy" "$rows" "$classes" 2
last=$((classes - 1)) bytes=$(stat -c %s "$work/y.npy")
# shellcheck disable=SC2059 # the format is the four bytes, octal escapes
printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((last & 255)) $((last >> 8 & 255)) $((last >> 16 & 255)) $((last >> 24 & 255)))" |
    dd of="$work/y.npy" bs=1 seek=$((bytes - 4)) conv=notrunc status=none

# Rank r's cores: r*T .. r*T+T-1 of the cores this script may use, when W*T of them exist.
cores=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status |
    awk -F, '{ for (i = 1; i <= NF; i++) { n = split($i, r, "-"); for (c = r[1]; c <= r[n]; c++) printf "%d ", c } }')
ncores=$(echo "$cores" | wc -w)
binding() { # W: how its ranks are bound
    if [ "$bind" = auto ] && [ $(($1 * threads)) -le "$ncores" ]; then
        echo "taskset, $threads core(s) each"
    else
        echo "unbound"
    fi
}
rank_cores() { # W r: rank r's core list for taskset
    echo "$cores" | tr ' ' '\n' | grep . | sed -n "$(($2 * threads + 1)),$((($2 + 1) * threads))p" | paste -sd, -
}
launch_line() { # W program args...: the mpirun command, one MPMD part per rank when bound
    local w=$1 r
    shift
    printf 'mpirun'
    if [ "$(binding "$w")" = unbound ]; then
        printf ' -np %s' "$w"
        printf ' %q' "$@"
    else
        for r in $(seq 0 $((w - 1))); do
            [ "$r" = 0 ] || printf ' :'
            printf ' -np 1 taskset -c %s' "$(rank_cores "$w" "$r")"
            printf ' %q' "$@"
        done
    fi
    echo
}

log_every=$steps
[ "$warmup" = 0 ] || log_every=$(awk -v a="$warmup" -v b="$steps" 'BEGIN { while (b) { t = b; b = a % b; a = t } print a }')
dptrain_line() { # W
    # shellcheck disable=SC2086 # --dptrain-args are words
    launch_line "$1" "$DP_WORKER" --model "$model" --data "$work/x.npy,$work/y.npy" --device "$device" \
        --batch $((batch * $1)) --threads "$threads" --steps $((warmup + steps)) --log-every "$log_every" \
        --lr 0.01 --momentum 0.9 $dptrain_args
}
torch_line() { # W
    # shellcheck disable=SC2086
    launch_line "$1" "$python" "$top/scripts/torch_ddp_benchmark.py" --model "$model" --size "$size" --batch "$batch" \
        --world "$1" --threads "$threads" --warmup "$warmup" --steps "$steps" --classes "$classes" --device "$device" \
        --bind none --lr 0.01 $torch_args
}

results=$work/results log=$work/log banner=""
load() { cut -d' ' -f1 /proc/loadavg; }
run_dptrain() { # W repeat: appends "dp W total" to the results
    local w=$1 before total
    before=$(load)
    eval "$(dptrain_line "$w")" >"$log" 2>&1 || { tail -n 20 "$log" >&2; echo "resnet-benchmark.sh: dptrain failed: $(dptrain_line "$w")" >&2; exit 1; }
    [ -n "$banner" ] || banner=$(sed -n '1s/^dptrain [^:]*: [^,]*, [^,]*, //p' "$log")
    # The lines after the warm-up: their steps, time (ms/step x G), and the samples/s they print.
    total=$(awk -v warm="$warmup" -v every="$log_every" -v want="$steps" -v global=$((batch * w)) '
        /^step / {
            split($2, at, "/")
            if (at[1] + 0 <= warm) next
            rate = ms = ""
            for (i = 2; i < NF; i++) { # the first of each: "slowest rank ... ms/step" follows on W > 1
                if ($(i + 1) == "samples/s" && rate == "") rate = $i
                if ($(i + 1) == "ms/step" && ms == "") ms = $i
            }
            n += every; seconds += every * ms / 1e3; printed += rate * every * ms / 1e3
        }
        END {
            if (n != want) { printf "covered %d of %d measured steps\n", n, want > "/dev/stderr"; exit 1 }
            total = want * global / seconds
            if (printed > 0 && (printed / seconds / total > 1.02 || printed / seconds / total < 0.98))
                printf "resnet-benchmark.sh: dp_worker printed %.1f samples/s, its ms/step say %.1f\n", printed / seconds, total > "/dev/stderr"
            printf "%.2f\n", total
        }' "$log") || { tail -n 5 "$log" >&2; exit 1; }
    echo "dp $w $total $before" >>"$results"
    echo "resnet-benchmark.sh: W=$w repeat $2: dptrain $total img/s total" >&2
}
run_torch() { # W repeat: appends "pt W total" to the results
    local w=$1 before total
    [ -n "$python" ] || return 0
    before=$(load)
    (
        export MASTER_ADDR=127.0.0.1
        MASTER_PORT=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        export MASTER_PORT
        eval "$(torch_line "$w")"
    ) >"$log" 2>&1 || { tail -n 20 "$log" >&2; echo "resnet-benchmark.sh: PyTorch failed: $(torch_line "$w")" >&2; exit 1; }
    total=$(sed -n 's/^torch-ddp: .* img\/s per rank, \([0-9.]*\) img\/s total .*/\1/p' "$log")
    [ -n "$total" ] || { tail -n 20 "$log" >&2; exit 1; }
    echo "pt $w $total $before" >>"$results"
    echo "resnet-benchmark.sh: W=$w repeat $2: PyTorch DDP $total img/s total" >&2
}

start_load=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$repeats"); do
    for w in $worlds; do
        if [ $((r % 2)) = 1 ]; then
            run_dptrain "$w" "$r"
            run_torch "$w" "$r"
        else
            run_torch "$w" "$r"
            run_dptrain "$w" "$r"
        fi
    done
done

median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
cell() { awk -v k="$1" -v w="$2" '$1 == k && $2 == w { print $3 }' "$results" | median; }
runs() { awk -v k="$1" -v w="$2" '$1 == k && $2 == w { print $3 }' "$results" | paste -sd' ' -; }
echo "## $model on random ${size}x$size images: dptrain against PyTorch DDP"
echo
echo "- date: $(date -u '+%F %H:%M UTC'); host: $(uname -n); CPU: $(lscpu | sed -n 's/^Model name: *//p') ($ncores cores this run may use, $(nproc --all) online)"
echo "- load average at start: $start_load; 1-minute load before each run in the table"
echo "- versions: $("$DP_WORKER" --version | head -n 1)${banner:+ ($banner)}; $(mpirun --version | head -n 1); $torch_version"
echo "- command: \`$command_line\`"
echo "- settings: $model, $classes classes, images 3x${size}x$size, $batch per rank, $threads thread(s) per rank, --device $device," \
    "$warmup warm-up + $steps measured steps, SGD lr 0.01 momentum 0.9, medians of $repeats alternating" \
    "run(s)${dptrain_args:+; dptrain also: $dptrain_args}${torch_args:+; PyTorch also: $torch_args}"
echo
echo "| W | binding | dptrain img/s per rank | dptrain img/s total | PyTorch DDP img/s per rank | PyTorch DDP img/s total | dptrain / PyTorch | load before runs |"
echo "|---|---|---|---|---|---|---|---|"
for w in $worlds; do
    dp=$(cell dp "$w") pt=$(cell pt "$w")
    loads=$(awk -v w="$w" '$2 == w { print $4 }' "$results" | sort -n | sed -n '1p;$p' | paste -sd- -)
    awk -v w="$w" -v b="$(binding "$w")" -v d="$dp" -v p="$pt" -v l="$loads" 'BEGIN {
        if (p != "") printf "| %d | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %s |\n", w, b, d / w, d, p / w, p, d / p, l
        else printf "| %d | %s | %.1f | %.1f | n/a | n/a | n/a | %s |\n", w, b, d / w, d, l }'
done
echo
echo "Runs (img/s total, in order):"
for w in $worlds; do
    echo "- W=$w: dptrain $(runs dp "$w"); PyTorch DDP $(runs pt "$w" | sed 's/^$/n\/a/')"
done
echo
echo "Command lines (the data folder is temporary):"
echo
echo '```sh'
for w in $worlds; do
    dptrain_line "$w"
    [ -z "$python" ] || echo "MASTER_ADDR=127.0.0.1 MASTER_PORT=<free port> $(torch_line "$w")"
done
echo '```'
