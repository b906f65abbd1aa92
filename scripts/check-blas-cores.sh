#!/bin/sh
# The BLAS-core matrix (docs/TESTING.md, "The BLAS-core matrix"): the tests whose bits depend
# on the BLAS, under every OpenBLAS core of Prescott, Haswell, Zen, SkylakeX and Cooperlake
# that this CPU runs (the rest skipped, saying why), at 1 and 3 BLAS threads per rank, and under
# each narrower build of the CPU loops than the widest this CPU runs; then one run saved under
# every loops build, which must give the same bytes. A failure names its cell. Reuses the build
# of scripts/test.sh (BUILD_DIR); BLAS_TESTS replaces the list. Exits 0 only if every cell passed.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build="$top/${BUILD_DIR:-build}"
"$top/scripts/build.sh"
# Every test that asserts equal bits of something a GEMM computed: found by grep for cmp,
# memcmp and dp_check_same_bits in the tests that train or predict, then confirmed by running
# the whole of make check under each core (docs/TESTING.md lists them with what each promises).
tests=${BLAS_TESTS:-"tests/predict.sh tests/exact.sh tests/zero-w2.sh tests/zero-w3.sh tests/mpi-train-w3.sh \
tests/strategy-w2.sh tests/local-sgd-w2.sh tests/reliability-w3.sh tests/grad-dtype.sh tests/zero3-files.sh"}
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() {
    for flag; do
        case $flags in *" $flag "*) ;; *) return 1 ;; esac
    done
}
# The instructions each core's kernels use: OpenBLAS runs SkylakeX's anyway and dies of SIGILL
# where they are missing, and quietly swaps Cooperlake for Haswell.
core_needs() {
    case $1 in
    Prescott) echo pni ;;
    Haswell | Zen) echo avx2 fma ;;
    SkylakeX) echo avx512f avx512vl avx512bw avx512dq avx512cd ;;
    Cooperlake) echo avx512f avx512vl avx512bw avx512dq avx512cd avx512_bf16 ;;
    esac
}
# The loops' builds this CPU runs, widest first (src/backend/cpu_isa.c).
loops_builds() {
    if has avx512f avx512vl avx512bw avx512dq; then echo avx512 avx2 generic
    elif has avx2; then echo avx2 generic
    else echo generic; fi
}
widest=$(loops_builds | cut -d' ' -f1)
# The banner's core for one tiny run under OPENBLAS_CORETYPE=$1: what OpenBLAS really runs.
core_run() {
    if [ -n "$1" ]; then export OPENBLAS_CORETYPE="$1"; else unset OPENBLAS_CORETYPE; fi
    "$build/dp_worker" --device cpu --threads 1 --data synthetic:64,4,2 --layers 4,2 \
        --steps 1 2>&1 | sed -n 's/.*OpenBLAS [^,]*, core \([A-Za-z0-9_]*\).*/\1/p' | head -n 1
    unset OPENBLAS_CORETYPE
}
own=$(core_run "")
failed="" cells=0
# cell CORE THREADS LOOPS: the list under them; a failure is named and its logs' FAIL lines shown.
cell() {
    name="OPENBLAS_CORETYPE=$1 DP_TEST_THREADS=$2 DPTRAIN_CPU_LOOPS=$3"
    cells=$((cells + 1))
    start=$(date +%s)
    status=0
    OPENBLAS_CORETYPE=$1 DP_TEST_THREADS=$2 DPTRAIN_CPU_LOOPS=$3 \
        make -C "$build" -j"$(nproc)" check TESTS="$tests" --no-print-directory >"$build/blas-cell.log" 2>&1 || status=$?
    if [ "$status" -eq 0 ]; then
        echo "blas-cores: ok   $name ($(($(date +%s) - start)) s)"
        return
    fi
    echo "blas-cores: FAIL $name:"
    grep -E '^(FAIL|ERROR):' "$build/blas-cell.log" | sed 's/^/    /'
    for log in $(sed -n 's/^\(FAIL\|ERROR\): \(.*\)$/\2.log/p' "$build/blas-cell.log"); do
        grep -E '^FAIL|:F:|:E:' "$build/$log" | head -n 10 | sed "s|^|    $log: |"
    done
    failed="$failed
    $name"
}
for core in Prescott Haswell Zen SkylakeX Cooperlake; do
    if ! has $(core_needs "$core"); then
        echo "blas-cores: skip OPENBLAS_CORETYPE=$core: this CPU lacks $(core_needs "$core" | tr ' ' '\n' |
            while read -r f; do has "$f" || printf '%s ' "$f"; done)"
        continue
    fi
    ran=$(core_run "$core")
    if [ "$ran" != "$core" ]; then
        echo "blas-cores: skip OPENBLAS_CORETYPE=$core: OpenBLAS runs its ${ran:-unknown} kernels instead"
        continue
    fi
    for threads in 1 3; do
        # make check ran this cell already: the machine's own core, one thread, the widest loops.
        if [ "$core" = "$own" ] && [ "$threads" = 1 ]; then
            echo "blas-cores: ok   OPENBLAS_CORETYPE=$core DP_TEST_THREADS=1 DPTRAIN_CPU_LOOPS=$widest (make check)"
            continue
        fi
        cell "$core" "$threads" "$widest"
    done
done
for loops in $(loops_builds); do
    [ "$loops" = "$widest" ] || cell "$own" 1 "$loops"
done
# The loops give the same bits whatever their build: one run with BatchNorm, dropout and AdamW.
dir=$(mktemp -d "${TMPDIR:-/tmp}/dptrain-loops-XXXXXX")
trap 'rm -rf "$dir"' EXIT
. "$top/scripts/mpi-env.sh"
before=$failed
for loops in $(loops_builds); do
    DPTRAIN_CPU_LOOPS=$loops timeout 60 mpirun -np 2 --bind-to none "$build/dp_worker" --device cpu --threads 1 \
        --data synthetic:600,12,5 --model "linear(16,bias=0),batchnorm,relu,dropout(0.2),linear(5)" \
        --optimizer adamw --steps 20 --save "$dir/$loops.safetensors" >"$dir/out" 2>&1 ||
        { sed 's/^/    /' "$dir/out"; failed="$failed
    the run under DPTRAIN_CPU_LOOPS=$loops"; }
    if [ -f "$dir/$loops.safetensors" ] && ! cmp -s "$dir/$widest.safetensors" "$dir/$loops.safetensors"; then
        failed="$failed
    DPTRAIN_CPU_LOOPS=$loops saves other bytes than $widest"
    fi
done
[ "$failed" != "$before" ] || echo "blas-cores: ok   the same bytes saved under the loops $(loops_builds | tr ' ' ',')"
if [ -n "$failed" ]; then
    echo "blas-cores: $cells cells; failed:$failed"
    exit 1
fi
echo "blas-cores: $cells cells passed"
