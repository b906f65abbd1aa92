#!/usr/bin/env bash
# The GPU checks of the CUDA backend on a machine with an NVIDIA GPU, in phases that each fit
# in one 10-minute command (the device tool's limit); later phases reuse the first's build:
#
#   scripts/gpu-check.sh tests      build with CUDA (configure --with-cuda), then the GPU tests:
#                                   device choice, GEMM shapes, test_gpu (every operation against
#                                   the CPU), 2 ranks on one GPU for every algorithm (nccl too),
#                                   the PTX check and the fake-CUDA tests
#   scripts/gpu-check.sh bench      dp_worker against PyTorch (FP32, TF32, bf16 autocast; eager
#                                   and torch.compile) and against its own GEMMs timed alone,
#                                   and --fuse off against auto (cuBLASLt epilogues): the
#                                   tables for bench/RESULTS.md
#   scripts/gpu-check.sh sanitize   compute-sanitizer memcheck (with leak check) and racecheck
#                                   over test_gpu, memcheck over test_backend_ops (every op)
#                                   and over 2 ranks training with nccl
#                                   (API errors raised and handled inside libnccl ignored)
#   scripts/gpu-check.sh cpu        the host's cores: scripts/throughput.sh (dp_worker --device
#                                   cpu against PyTorch on the CPU) on every core for W = 1, 4
#                                   and the core count, batch 2048 (CPU_MODELS, CPU_WORLDS,
#                                   REPEATS change that): cpu-results.md
#   scripts/gpu-check.sh accuracy   the demo (10 epochs) and the README's BatchNorm recipe (30
#                                   epochs) on Fashion-MNIST at every precision, and the demo
#                                   replayed from a CUDA graph: test accuracy and training time
#                                   against FP32's (GPU_CHECK_DATA names the data, default
#                                   fashion-mnist; an IDX directory carried there works)
#   scripts/gpu-check.sh strategies ZeRO's peak memory per rank on the GPU (784,8192,8192,8192,10,
#                                   AdamW, W = 2 sharing it: scripts/zero-bench.sh), --exact's
#                                   cost against the ordinary step (the default model, W = 1, 2),
#                                   and W = 2 with nccl eager against its steps replayed from a
#                                   CUDA graph with the all-reduces inside: strategies.md
#   scripts/gpu-check.sh resnet     issue 36: ResNet-50 on random 224x224 images, batch 64 per rank
#                                   (scripts/resnet-benchmark.sh): dp_worker FP32 and --precision bf16
#                                   against PyTorch DDP eager FP32 and channels-last bf16 autocast,
#                                   and the README's ResNet recipe on Fashion-MNIST (15 epochs): resnet.md
#   scripts/gpu-check.sh [all]      tests, bench and sanitize in turn (where no time limit applies)
#
# Options: --device cpu runs the flow on the CPU backend with small models (a dry run without
# a GPU; tests/gpu-replay.sh runs it where Open MPI and ssh are hidden); --steps N timed steps
# per benchmark (default 60); --full-check all of make check in the tests phase; --skip-tests
# and --skip-bench leave a phase out of `all`. Results go to $OUT (the device tool's folder)
# or the build folder: gpu-results.md, check.out, the GPU tests' logs, sanitizer-*.log.
#
# Needs nvidia-smi, nvcc (PATH or /usr/local/cuda/bin), python3 with torch (bench), and
# dptrain's build dependencies: mpicc/mpirun, pkg-config, OpenBLAS, zlib, Check. This project's
# lent GPU machines have CUDA and PyTorch but not the rest, and no network: first run
# scripts/gpu-prepare.sh on a Debian machine with apt and carry the .gpu-carry folder it fills
# (Debian packages, the source tarball, compute-sanitizer); this script unpacks it beside the
# system. GPU_CHECK_BUILD (default build-gpu) is where it builds; GPU_CHECK_DEPS (default
# /opt/dptrain-deps) where the carried packages go. For a short call: GPU_CHECK_TESTS names the
# tests phase's tests instead of its list; GPU_CHECK_FUSION=0 and GPU_CHECK_CNN=0 leave the
# bench phase's --fuse table and CNN rows out; GPU_CHECK_MODELS (a bash regex: "^wide$|demo
# graph") keeps the bench rows whose model name matches ("demo", "4096 wide", "documents'
# example", "wide", "demo graph") and GPU_CHECK_PRECISIONS ("BF16") the precisions named, in
# the bench and accuracy phases.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build="${GPU_CHECK_BUILD:-$root/build-gpu}"
carry="$root/.gpu-carry"
deps="${GPU_CHECK_DEPS:-/opt/dptrain-deps}"
usage="usage: scripts/gpu-check.sh [tests|bench|sanitize|cpu|accuracy|strategies|resnet|all] [--device cuda|cpu] [--steps N] [--full-check] [--skip-tests] [--skip-bench]"
phase=all steps=60 device=cuda run_tests=1 run_bench=1 full_check=0
while [ $# -gt 0 ]; do
    case $1 in
    tests | bench | sanitize | cpu | accuracy | strategies | resnet | all) phase=$1 ;;
    --skip-tests) run_tests=0 ;;
    --skip-bench) run_bench=0 ;;
    --full-check) full_check=1 ;;
    --steps) steps=${2-}; shift ;;
    --device) device=${2-}; shift ;;
    *) echo "$usage" >&2; exit 2 ;;
    esac
    shift
done
case $device in cuda | cpu) ;; *) echo "gpu-check: --device must be cuda or cpu" >&2; exit 2 ;; esac
[ "$steps" -ge 3 ] 2>/dev/null || { echo "gpu-check: --steps must be an integer >= 3" >&2; exit 2; }
mkdir -p "$build"
out="${OUT:-$build}"
system_ld_path="${LD_LIBRARY_PATH-}"
obj="$build/obj"

say() { printf 'gpu-check: %s\n' "$*"; }
die() { printf 'gpu-check: error: %s\n' "$*" >&2; exit 1; }

# Debian packages carried in .gpu-carry/debs, unpacked into $deps (never over the system).
use_carried_packages() {
    [ -d "$carry/debs" ] || return 0
    if [ ! -e "$deps/.unpacked" ]; then
        say "unpacking $(ls "$carry"/debs/*.deb | wc -l) carried Debian packages into $deps"
        mkdir -p "$deps/bin"
        for deb in "$carry"/debs/*.deb; do dpkg-deb -x "$deb" "$deps" || die "cannot unpack $deb"; done
        # Absolute links (libz.so -> /lib/...) point into the unpacked tree instead.
        find "$deps" -type l -lname '/*' | while read -r link; do ln -sfn "$deps$(readlink "$link")" "$link"; done
        # Debian names mpicc and mpirun through update-alternatives, which unpacking skips.
        for tool in mpicc mpirun mpiexec; do ln -sfn "$deps/usr/bin/$tool.openmpi" "$deps/bin/$tool"; done
        find "$deps" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$deps/usr|; s|=/usr/|=$deps/usr/|g" {} +
        touch "$deps/.unpacked"
    fi
    local lib="$deps/usr/lib/x86_64-linux-gnu"
    export PATH="$deps/bin:$deps/usr/bin:$PATH"
    # Open MPI and its PMIx look for their plugins and help files where they were installed,
    # which unpacking moved: OPAL_PREFIX relocates Open MPI; PMIx needs both paths named (its
    # PMIX_PREFIX does not move them; without them every job prints PMIx help-file blocks).
    export OPAL_PREFIX="$deps/usr" OMPI_MCA_mca_base_component_show_load_errors=0
    export PMIX_PKGDATADIR="$lib/pmix2/share/pmix" PMIX_MCA_mca_base_component_path="$lib/pmix2/lib/pmix"
    export PKG_CONFIG_PATH="$lib/pkgconfig:$lib/openblas-pthread/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
    export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread:$deps/lib/x86_64-linux-gnu${system_ld_path:+:$system_ld_path}"
}

# compute-sanitizer: the toolkit's, else the one gpu-prepare.sh carried as a wheel.
find_sanitizer() {
    sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
    [ -n "$sanitizer" ] && return 0
    local wheel
    wheel=$(ls "$carry"/wheels/nvidia_cuda_sanitizer_api-*.whl 2>/dev/null | tail -n 1)
    [ -n "$wheel" ] || return 1
    [ -d "$deps/sanitizer" ] || python3 -m zipfile -e "$wheel" "$deps/sanitizer" || return 1
    sanitizer=$(find "$deps/sanitizer" -name compute-sanitizer -type f | head -n 1)
    chmod +x "$sanitizer"
}

check_tools() {
    local missing=()
    if [ "$device" = cuda ]; then
        command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || missing+=("a GPU (nvidia-smi -L fails)")
        export PATH="$PATH:/usr/local/cuda/bin"
        command -v nvcc >/dev/null || missing+=("nvcc")
    fi
    if [ "$phase" = bench ] || [ "$phase" = cpu ] || { [ "$phase" = all ] && [ "$run_bench" = 1 ]; }; then
        LD_LIBRARY_PATH="$system_ld_path" python3 -c 'import torch' 2>/dev/null || missing+=("python3 with torch")
    fi
    if [ "$phase" = sanitize ] && [ "$device" = cuda ]; then find_sanitizer || missing+=("compute-sanitizer"); fi
    for tool in mpicc mpirun pkg-config; do command -v $tool >/dev/null || missing+=("$tool"); done
    for module in openblas zlib check; do
        command -v pkg-config >/dev/null && pkg-config --exists $module || missing+=("pkg-config module $module")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    printf 'gpu-check: missing: %s\n' "${missing[@]}" >&2
    die "on a machine with apt run scripts/gpu-prepare.sh, then carry .gpu-carry here (Open MPI, OpenBLAS, Check, zlib and pkg-config are Debian packages there; compute-sanitizer a wheel)"
}

# MPI on one node with no ssh or rsh: Open MPI 4.1 still wants a launch agent, even for a
# singleton MPI_Init ("plm_rsh_agent: ssh : rsh ... could not be found"); none is needed.
set_launch_agent() {
    command -v ssh >/dev/null || command -v rsh >/dev/null || export OMPI_MCA_plm_rsh_agent=false
}

# The source tree with a generated configure: the checkout, autoreconf'd if need be (with
# libtool: an autoreconf without it writes a configure that fails), or the tarball
# gpu-prepare.sh carried.
find_source() {
    if [ -x "$root/configure" ]; then
        src="$root"
    elif command -v autoreconf >/dev/null && command -v libtoolize >/dev/null; then
        (cd "$root" && autoreconf -fi >/dev/null) || die "autoreconf failed"
        src="$root"
    else
        local tarball
        tarball=$(ls "$carry"/dptrain-*.tar.gz 2>/dev/null | tail -n 1)
        [ -n "$tarball" ] || die "no configure, no autoreconf and no .gpu-carry/dptrain-*.tar.gz: run scripts/gpu-prepare.sh where apt works and carry .gpu-carry"
        if [ ! -e "$build/source/.from" ] || [ "$tarball" -nt "$build/source/.from" ]; then
            rm -rf "$build/source" "$obj" && mkdir -p "$build/source" && tar -xzf "$tarball" -C "$build/source" || die "cannot unpack $tarball"
            touch "$build/source/.from"
        fi
        src=$(ls -d "$build"/source/dptrain-*)
        say "building from $(basename "$tarball") (made by gpu-prepare.sh: re-run it after changing the tree)"
    fi
}

# NCCL from the toolkit (configure finds it), else from PyTorch's nvidia-nccl wheel.
nccl_option() {
    local cuda_include dir
    cuda_include="$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")/include"
    [ -f "$cuda_include/nccl.h" ] && return 0
    dir=$(LD_LIBRARY_PATH="$system_ld_path" python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null) || return 0
    [ -f "$dir/include/nccl.h" ] && echo "--with-nccl=$dir"
}

# Configures once per source and device, then builds (incrementally in later phases).
build_dptrain() {
    local cuda_flag=--with-cuda cuda_arch
    [ "$device" = cpu ] && cuda_flag=""
    # Kernels for this machine's GPU alone (9.0 where nvidia-smi names none): the default's five
    # capabilities would cost the device a minute of nvcc. CUDA_ARCH overrides.
    cuda_arch=${CUDA_ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d '.')}
    local flags="$cuda_flag $(nccl_option) CUDA_ARCH=${cuda_arch:-90}"
    mkdir -p "$obj"
    if [ ! -f "$obj/Makefile" ] || [ "$(cat "$obj/.flags" 2>/dev/null)" != "$src $flags" ]; then
        say "configure $flags"
        (cd "$obj" && "$src/configure" $flags >configure.out 2>&1) || { tail -n 20 "$obj/configure.out"; die "configure failed (see $obj/config.log)"; }
        echo "$src $flags" >"$obj/.flags"
        sed -n '/^  dptrain /,/sanitizers/p' "$obj/configure.out"
    fi
    say "make -j$(nproc)"
    (cd "$obj" && make -j"$(nproc)" >make.out 2>&1) || { tail -n 30 "$obj/make.out"; die "build failed"; }
}

run_gpu_tests() {
    local tests="tests/device.sh tests/gemm-bench.sh tests/test_backend_ops tests/test_exact_device tests/gpu.sh tests/gpu-train-w2.sh tests/gpu-graph.sh tests/ptx-check.sh"
    tests="${GPU_CHECK_TESTS:-$tests tests/test_kernel_math tests/fakecuda.sh tests/fakecuda-train-w2.sh tests/fakecuda-binding.sh}"
    local status=0
    say "make check ($([ "$full_check" = 1 ] && echo "all tests" || echo "$tests"))"
    if [ "$full_check" = 1 ]; then
        (cd "$obj" && make -j"$(nproc)" check >check.out 2>&1) || status=1
    else
        (cd "$obj" && make -j"$(nproc)" check TESTS="$tests" >check.out 2>&1) || status=1
    fi
    grep -E '^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):' "$obj/check.out"
    grep -E '^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$obj/check.out"
    grep -h -E 'relative error|Checks:' "$obj/tests/gpu.log" "$obj/tests/gpu-train-w2.log" "$obj/tests/test_backend_ops.log" 2>/dev/null
    if [ "$device" = cuda ] && grep -q '^SKIP: tests/gpu' "$obj/check.out"; then
        say "a GPU test skipped on a GPU machine: the build or the driver does not see the GPU"
        status=1
    fi
    cp "$obj/check.out" "$obj"/tests/*.log "$out/" 2>/dev/null
    [ "$status" = 0 ] || { say "GPU tests FAILED (logs: $obj/tests/*.log)"; return 1; }
}

# The errors a sanitizer log reports that are not API errors raised inside libnccl: NCCL's
# ncclCommInitRank probes kernels with calls that fail (cudaErrorNoKernelImageForDevice) and
# handles the failure. A report is a block from "========= Program hit ..." (an API error) or
# any other error line to a bare "=========" line; an API error whose host backtrace has a
# libnccl frame is NCCL's own. Prints the count of the rest (ours).
errors_outside_nccl() {
    awk '
        /^========= (ERROR|LEAK|RACECHECK) SUMMARY/ { next }
        /^========= [^ ]/ && !/^========= (COMPUTE-SANITIZER|Saved|Host Frame|Device Frame)/ {
            if (open) finish()
            open = 1; api = ($0 ~ /^========= Program hit/); nccl = 0; next }
        open && /libnccl/ { nccl = 1 }
        open && /^=========$/ { finish() }
        function finish() { if (!(api && nccl)) ours++; else theirs++; open = 0 }
        END { if (open) finish(); printf "%d %d\n", ours, theirs }' "$1"
}

# sanitize NAME TOOL NP PROGRAM [ARGS]: PROGRAM on NP ranks under compute-sanitizer's TOOL;
# fails on any error but API errors raised and handled inside libnccl.
sanitize() {
    local name=$1 tool=$2 np=$3 log="$out/sanitizer-$1.log"
    shift 3
    local extra=()
    [ "$tool" = memcheck ] && extra=(--leak-check full)
    say "compute-sanitizer --tool $tool: $name"
    (cd "$obj" && timeout 280 mpirun -np "$np" "$sanitizer" --tool "$tool" "${extra[@]}" --error-exitcode 9 \
        --print-limit 1000 "$@") >"$log" 2>&1
    local status=$? counts ours theirs
    grep -E '========= (ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY)|Checks:' "$log" | sort | uniq -c
    counts=$(errors_outside_nccl "$log")
    ours=${counts% *} theirs=${counts#* }
    [ "$theirs" = 0 ] || say "$name: $theirs API error(s) raised and handled inside libnccl, ignored"
    # Exit 9 is the sanitizer's for any error: NCCL's own alone do not fail the run.
    if [ "$status" = 9 ] && [ "$ours" = 0 ] && [ "$theirs" != 0 ]; then
        status=0
    fi
    [ "$status" = 0 ] && [ "$ours" = 0 ] || { say "$name under $tool FAILED (exit $status, $ours error(s) of ours; $log)"; return 1; }
}

run_sanitizers() {
    [ "$device" = cuda ] || { say "sanitize: compute-sanitizer needs a GPU (--device cuda)"; return 0; }
    find_sanitizer || die "no compute-sanitizer: run scripts/gpu-prepare.sh where pip works and carry .gpu-carry"
    local status=0 train=(./dp_worker --device cuda --share-gpu --data synthetic:2048,64,10 --layers 64,128,10
                          --batch 256 --steps 20 --allreduce nccl)
    (cd "$obj" && make -j"$(nproc)" tests/test_gpu tests/test_backend_ops >/dev/null 2>&1) || die "cannot build tests/test_gpu"
    export CK_FORK=no
    sanitize test_gpu-memcheck memcheck 1 ./tests/test_gpu || status=1
    # Every backend op (gather_rows, the bf16 operand copies' GEMMs among them) on the GPU.
    sanitize test_backend_ops-memcheck memcheck 1 ./tests/test_backend_ops || status=1
    sanitize test_gpu-racecheck racecheck 1 ./tests/test_gpu || status=1
    NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 sanitize train-w2-nccl-memcheck memcheck 2 \
        sh -c 'NCCL_HOSTID="sanitize-$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' "${train[@]}" || status=1
    return $status
}

# field NAME FILE: the value of NAME=VALUE in FILE's last line that has it.
field() { sed -n "s/.*$1=\\([0-9.]*\\).*/\\1/p" "$2" | tail -n 1; }

# progress_rate FILE: samples/s of dp_worker's last progress line (the final third: warm-up excluded).
progress_rate() { awk '/^step / { for (i = 1; i < NF; i++) if ($(i + 1) == "samples/s") r = $i } END { print r }' "$1"; }

# One model, one precision (FP32, TF32, BF16: dptrain's --precision, PyTorch's TF32 matmuls or
# bf16 autocast): dp_worker, its GEMMs alone, PyTorch eager (the faster of its permuted-batch
# loop and a plain loop over one batch) and PyTorch with torch.compile where that finishes in
# COMPILE_SECONDS (default 0: left out, so that the phase fits in 10 minutes; 240 in a call of
# its own: COMPILE_SECONDS=240 scripts/gpu-check.sh bench). dp_worker runs eagerly
# (--cuda-graph off) unless the sixth argument is "on": its full steps then replay one CUDA
# graph, and the row's name says so. Appends a table row.
compare() {
    local name=$1 layers=$2 loss=$3 batch=$4 precision=$5 graph=${6:-off} samples=$((4 * $4))
    [ "$graph" = on ] && name="$name, CUDA graph"
    local widths=(${layers//,/ }) log="$build/bench-${name//[ ,]/-}-$precision"
    local p=(--precision "$(echo "$precision" | tr 'A-Z' 'a-z')")
    [ "$device" = cpu ] && p=()
    local data="synthetic:$samples,${widths[0]},${widths[${#widths[@]} - 1]}"
    local worker=(mpirun -np 1 "$obj/dp_worker" --device "$device" --data "$data" --loss "$loss" --layers "$layers"
                  --batch "$batch" --steps "$steps" --log-every $((steps / 3)) --cuda-graph "$graph" "${p[@]}")
    local gemm=("$obj/dp_gemm_bench" --device "$device" --layers "$layers" --batch "$batch" --repeat 20 "${p[@]}")
    local torch=(python3 "$root/scripts/torch_baseline.py" --device "$device" --layers "$layers" --batch "$batch"
                 --loss "$loss" --samples "$samples" --steps "$steps" --warmup 20 "${p[@]}")
    say "$name $precision: ${worker[*]}"
    "${worker[@]}" >"$log.dptrain" 2>&1 || { tail -n 20 "$log.dptrain"; die "dp_worker failed"; }
    say "$name $precision: ${gemm[*]}"
    "${gemm[@]}" >"$log.gemm" 2>&1 || { tail -n 20 "$log.gemm"; die "dp_gemm_bench failed"; }
    say "$name $precision: ${torch[*]}"
    LD_LIBRARY_PATH="$system_ld_path" "${torch[@]}" >"$log.torch" 2>&1 || { tail -n 20 "$log.torch"; die "the PyTorch baseline failed"; }
    grep -h '^torch ' "$log.torch"
    local compiled_ms="-"
    if [ "${COMPILE_SECONDS:-0}" -gt 0 ]; then
        say "$name $precision: ${torch[*]} --compile (at most ${COMPILE_SECONDS:-0} s)"
        LD_LIBRARY_PATH="$system_ld_path" timeout "${COMPILE_SECONDS:-0}" "${torch[@]}" --compile >"$log.compiled" 2>&1 &&
            compiled_ms=$(field torch_ms_per_step "$log.compiled")
        [ -n "$compiled_ms" ] || compiled_ms="-"
        [ "$compiled_ms" != "-" ] || say "torch.compile did not finish or failed ($log.compiled): no compiled number"
    fi
    # dp_worker's last progress line covers the last third of the steps: warm-up excluded.
    local rate gemm_ms torch_rate
    rate=$(progress_rate "$log.dptrain")
    gemm_ms=$(field gemm_ms_per_step "$log.gemm")
    torch_rate=$(field torch_samples_per_s "$log.torch")
    [ -n "$rate" ] && [ -n "$gemm_ms" ] && [ -n "$torch_rate" ] || die "could not read the results of $name $precision (logs: $log.*)"
    awk -v name="$name" -v layers="$layers" -v batch="$batch" -v p="$precision" -v r="$rate" -v g="$gemm_ms" -v t="$torch_rate" \
        -v c="$compiled_ms" 'BEGIN {
        ms = 1e3 * batch / r; tms = 1e3 * batch / t; ratio = r / t; share = 100 * g / ms
        printf "| %s `%s` | %d | %s | %.3f | %.0f | %.3f | %.0f | %s | %.2fx %s | %.3f | %.0f%% %s |\n",
               name, layers, batch, p, ms, r, tms, t, c, ratio, (ratio >= 1.0 ? "(met)" : "(NOT met)"),
               g, share, (share >= 85 ? "(met)" : "(NOT met)") }' >>"$build/rows.md"
}

# One model, one precision on the GPU: dp_worker with --fuse off then --fuse auto (cuBLASLt
# epilogues: bias, ReLU and its mask forward, the ReLU's backward and the bias gradient in the
# GEMMs), the same data and steps. Appends a row to the fusion table.
compare_fusion() {
    local name=$1 layers=$2 loss=$3 batch=$4 precision=$5 samples=$((4 * $4))
    local widths=(${layers//,/ }) log="$build/bench-fuse-${name// /-}-$precision" rates=()
    local data="synthetic:$samples,${widths[0]},${widths[${#widths[@]} - 1]}"
    for fuse in off auto; do
        local worker=(mpirun -np 1 "$obj/dp_worker" --device cuda --data "$data" --loss "$loss" --layers "$layers"
                      --batch "$batch" --steps "$steps" --log-every $((steps / 3))
                      --precision "$(echo "$precision" | tr 'A-Z' 'a-z')" --fuse "$fuse")
        say "$name $precision --fuse $fuse: ${worker[*]}"
        "${worker[@]}" >"$log.$fuse" 2>&1 || { tail -n 20 "$log.$fuse"; die "dp_worker --fuse $fuse failed"; }
        rates+=("$(progress_rate "$log.$fuse")")
    done
    [ -n "${rates[0]}" ] && [ -n "${rates[1]}" ] || die "could not read the fusion results of $name $precision (logs: $log.*)"
    awk -v name="$name" -v layers="$layers" -v batch="$batch" -v p="$precision" -v off="${rates[0]}" -v on="${rates[1]}" 'BEGIN {
        printf "| %s `%s` | %d | %s | %.3f | %.3f | %.3fx |\n", name, layers, batch, p, 1e3 * batch / off, 1e3 * batch / on, on / off }' \
        >>"$build/fusion.md"
}

# The README's CNN on images [1, 28, 28] (issue 18): dp_worker (im2col + cuBLAS) against PyTorch
# eager (cuDNN), the same batch, xent, SGD; no GEMMs-alone column. Appends a table row.
cnn_model="conv2d(32,3,padding=1,bias=0),batchnorm,relu,maxpool(2),conv2d(64,3,padding=1,bias=0),batchnorm,relu,maxpool(2),flatten,linear(128),relu,dropout(0.3),linear(10)"
compare_cnn() {
    local batch=$1 precision=$2 samples=$((4 * $1)) log="$build/bench-cnn-$precision"
    local p=(--precision "$(echo "$precision" | tr 'A-Z' 'a-z')")
    (cd "$obj" && make tests/npy_fixture >/dev/null 2>&1) || die "cannot build tests/npy_fixture"
    "$obj/tests/npy_fixture" "$build/cnn-images.npy" "$samples" 1x28x28 1 &&
        "$obj/tests/npy_fixture" --labels "$build/cnn-labels.npy" "$samples" 10 2 || die "cannot write the CNN's data"
    local worker=(mpirun -np 1 "$obj/dp_worker" --device "$device" --data "$build/cnn-images.npy,$build/cnn-labels.npy"
                  --model "$cnn_model" --batch "$batch" --steps "$steps" --log-every $((steps / 3)) "${p[@]}")
    local torch=(python3 "$root/scripts/torch_baseline.py" --device "$device" --model "$cnn_model" --image 1,28,28
                 --classes 10 --batch "$batch" --loss xent --samples "$samples" --steps "$steps" --warmup 10 "${p[@]}")
    say "CNN $precision: ${worker[*]}"
    "${worker[@]}" >"$log.dptrain" 2>&1 || { tail -n 20 "$log.dptrain"; die "dp_worker failed"; }
    say "CNN $precision: ${torch[*]}"
    LD_LIBRARY_PATH="$system_ld_path" "${torch[@]}" >"$log.torch" 2>&1 || { tail -n 20 "$log.torch"; die "the PyTorch baseline failed"; }
    local rate torch_rate
    rate=$(progress_rate "$log.dptrain")
    torch_rate=$(field torch_samples_per_s "$log.torch")
    [ -n "$rate" ] && [ -n "$torch_rate" ] || die "could not read the results of the CNN $precision (logs: $log.*)"
    awk -v batch="$batch" -v p="$precision" -v r="$rate" -v t="$torch_rate" 'BEGIN {
        ms = 1e3 * batch / r; tms = 1e3 * batch / t; ratio = r / t
        printf "| CNN (README recipe) on [1, 28, 28] | %d | %s | %.3f | %.0f | %.3f | %.0f | - | %.2fx %s | - | - |\n",
               batch, p, ms, r, tms, t, ratio, (ratio >= 1.0 ? "(met)" : "(NOT met)") }' >>"$build/rows.md"
}

run_benchmarks() {
    rm -f "$build/rows.md"
    local precisions=(${GPU_CHECK_PRECISIONS:-FP32 TF32 BF16}) models=${GPU_CHECK_MODELS:-.}
    if [ "$device" = cpu ]; then
        precisions=(FP32)
        set -- "small" "64,32,64" mse 256 "wide" "128,128,128,10" xent 128
    else
        set -- "demo" "784,256,256,10" xent 256 "4096 wide" "784,4096,4096,10" xent 1024 \
            "documents' example" "2048,1024,2048" mse 5120 "wide" "8192,8192,8192,10" xent 4096
    fi
    rm -f "$build/fusion.md"
    while [ $# -gt 0 ]; do
        [[ $1 =~ $models ]] || { shift 4; continue; }
        for precision in "${precisions[@]}"; do
            compare "$1" "$2" "$3" "$4" "$precision"
            [ "$device" = cpu ] || [ "${GPU_CHECK_FUSION:-1}" = 0 ] || compare_fusion "$1" "$2" "$3" "$4" "$precision"
        done
        shift 4
    done
    # The demo model with its steps replayed from a CUDA graph (issue 19: <= 0.10 ms per step).
    if [ "$device" = cuda ] && [[ "demo graph" =~ $models ]]; then
        for precision in "${precisions[@]}"; do compare "demo" "784,256,256,10" xent 256 "$precision" on; done
    fi
    [ "${GPU_CHECK_CNN:-1}" = 0 ] || for precision in "${precisions[@]}"; do compare_cnn 128 "$precision"; done
    local gpu torch_version commit
    gpu=$([ "$device" = cuda ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1 || echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)")
    torch_version=$(LD_LIBRARY_PATH="$system_ld_path" python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')
    commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "unknown")
    {
        echo "GPU check of $(date -u '+%Y-%m-%d %H:%M UTC') on $gpu; $(command -v nvcc >/dev/null && nvcc --version | sed -n 's/.*\(release [0-9.]*\).*/CUDA \1/p'); PyTorch $torch_version; dptrain at $commit (plus the working tree)."
        echo "One rank, one GPU; synthetic data of 4 batches held on the device by both; SGD lr 0.05 momentum 0.9; $steps timed steps"
        echo "(dp_worker: its last progress interval, the final third; PyTorch eager: the faster of its permuted-batch loop and a plain"
        echo "loop over one batch, after 20 warm-up steps each; BF16: dptrain --precision bf16, PyTorch bf16 autocast; dptrain eager (--cuda-graph off)"
        echo "except the rows named \"CUDA graph\" (--cuda-graph on: full steps replayed from one graph)). Command: scripts/gpu-check.sh bench"
        echo
        echo "| model | batch | precision | dptrain ms/step | dptrain samples/s | PyTorch ms/step | PyTorch samples/s | torch.compile ms/step | dptrain / PyTorch eager (target >= 1.0x) | GEMMs alone ms/step | GEMM share of the step (target >= 85%) |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|"
        cat "$build/rows.md"
        if [ -f "$build/fusion.md" ]; then
            echo
            echo "Fused GEMM epilogues (cuBLASLt), dp_worker alone, the same runs otherwise: --fuse off then --fuse auto."
            echo
            echo "| model | batch | precision | --fuse off ms/step | --fuse auto ms/step | speed-up |"
            echo "|---|---|---|---|---|---|"
            cat "$build/fusion.md"
        fi
    } | tee "$out/gpu-results.md"
    say "table written to $out/gpu-results.md"
}

# dp_worker and PyTorch on the host's cores (issue 20's targets): scripts/throughput.sh's table.
run_cpu_throughput() {
    local cores worlds
    cores=$(nproc)
    worlds=${CPU_WORLDS:-"1 4 $cores"}
    say "scripts/throughput.sh --cores $cores --batch 2048 $worlds ($steps steps, ${REPEATS:-3} repeats)"
    DP_WORKER="$obj/dp_worker" PYTHON="env LD_LIBRARY_PATH=$system_ld_path python3" STEPS=$steps \
        MODELS="${CPU_MODELS:-784,1024,1024,10 784,4096,4096,10}" \
        "$root/scripts/throughput.sh" --cores "$cores" --batch 2048 $worlds | tee "$out/cpu-results.md"
}

# One Fashion-MNIST run: NAME, then dp_worker's options; appends the row "NAME | acc | seconds".
train_to_accuracy() {
    local name=$1 log="$build/accuracy-${1//[ ,()]/-}"
    shift
    local worker=(mpirun -np 1 "$obj/dp_worker" --device "$device" --data "${GPU_CHECK_DATA:-fashion-mnist}" --log-every 0 "$@")
    say "$name: ${worker[*]}"
    "${worker[@]}" >"$log" 2>&1 || { tail -n 20 "$log"; die "dp_worker failed"; }
    local acc seconds
    acc=$(sed -n 's/^summary:.*accuracy \([0-9.]*\)%.*/\1/p' "$log")
    seconds=$(sed -n 's/^summary: .* samples in \([0-9.]*\) s .*/\1/p' "$log")
    [ -n "$acc" ] && [ -n "$seconds" ] || die "could not read the accuracy of $name ($log)"
    echo "$name|$acc|$seconds" >>"$build/accuracy.rows"
}

# The demo and the README's BatchNorm recipe at each precision (issue 19: bf16 within 0.3 pp of FP32).
run_accuracy() {
    local precisions=($(echo "${GPU_CHECK_PRECISIONS:-fp32 tf32 bf16}" | tr 'A-Z' 'a-z')) recipe="linear(1024,bias=0),batchnorm,relu,dropout(0.3),linear(512,bias=0),batchnorm,relu,dropout(0.3),linear(10)"
    [ "$device" = cpu ] && precisions=(fp32)
    rm -f "$build/accuracy.rows"
    for precision in "${precisions[@]}"; do
        train_to_accuracy "demo, 10 epochs, $precision" --layers 784,256,256,10 --epochs 10 --precision "$precision"
        [ "$device" = cpu ] || train_to_accuracy "demo, 10 epochs, $precision, CUDA graph" --layers 784,256,256,10 --epochs 10 --precision "$precision" --cuda-graph on
        train_to_accuracy "BatchNorm recipe, 30 epochs, $precision" --model "$recipe" --sync-bn --optimizer adamw --lr 1e-3 \
            --weight-decay 0.05 --epochs 30 --lr-schedule cosine --precision "$precision"
        # The recipe's steps replay from a CUDA graph by default (auto): the eager run beside it.
        [ "$device" = cpu ] || train_to_accuracy "BatchNorm recipe, 30 epochs, $precision, eager" --model "$recipe" --sync-bn \
            --optimizer adamw --lr 1e-3 --weight-decay 0.05 --epochs 30 --lr-schedule cosine --precision "$precision" --cuda-graph off
    done
    {
        echo "Fashion-MNIST on one rank, $([ "$device" = cuda ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 || echo CPU), $(date -u '+%Y-%m-%d'); command: scripts/gpu-check.sh accuracy"
        echo
        echo "| run | test accuracy | against the same run at fp32 | training seconds |"
        echo "|---|---|---|---|"
        awk -F'|' '{ key = $1; sub(/, (fp32|tf32|bf16)/, "", key); if ($1 ~ /, fp32/) base[key] = $2
                     d = (key in base) ? sprintf("%+.2f pp", $2 - base[key]) : "-"
                     printf "| %s | %.2f%% | %s | %.2f |\n", $1, $2, d, $3 }' "$build/accuracy.rows"
    } | tee "$out/accuracy.md"
}

# The strategies on the GPU: ZeRO's peak memory per rank (issue 21's H100 row: the
# 784,8192,8192,8192,10 MLP with AdamW, W = 2 sharing the GPU, scripts/zero-bench.sh) and what
# --exact costs against the ordinary step (issue 22: the default model on Fashion-MNIST, W = 1
# and 2). Appends to strategies.md.
run_strategies() {
    [ "$device" = cuda ] || { say "strategies: the GPU's numbers need --device cuda"; return 0; }
    local gpu=(--device cuda --share-gpu) data=(--data "${GPU_CHECK_DATA:-fashion-mnist}")
    {
        echo "Strategies on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), $(date -u '+%Y-%m-%d %H:%M UTC'); command: scripts/gpu-check.sh strategies"
        echo
        DP_WORKER="$obj/dp_worker" "$root/scripts/zero-bench.sh" -n 2 -r 1 -- "${gpu[@]}" --layers 784,8192,8192,8192,10 \
            --optimizer adamw --data synthetic:4096,784,10 --batch 1024 --steps 20 || die "zero-bench.sh failed"
        echo
        echo "The default model (784,256,256,10, batch 256) on Fashion-MNIST, 2 epochs, steady-state samples/s:"
        echo
        echo "| W | ordinary | --exact | --exact / ordinary |"
        echo "|---|---|---|---|"
        local w rates
        for w in 1 2; do
            rates=()
            for mode in "" --exact; do
                mpirun -np "$w" "$obj/dp_worker" "${gpu[@]}" "${data[@]}" --epochs 2 --log-every 100 $mode \
                    >"$build/strategies-exact-$w$mode.log" 2>&1 || { tail -n 20 "$build/strategies-exact-$w$mode.log"; die "dp_worker $mode failed"; }
                rates+=("$(progress_rate "$build/strategies-exact-$w$mode.log")")
            done
            awk -v w="$w" -v a="${rates[0]}" -v b="${rates[1]}" 'BEGIN { printf "| %d | %.0f | %.0f | %.2fx |\n", w, a, b, b / a }'
        done
        # NCCL refuses two ranks on one GPU of one host: each rank gets its own NCCL_HOSTID and
        # NCCL moves the data over loopback sockets (with a GPU per rank, drop --share-gpu).
        echo
        echo "The same model and data, W = 2 sharing the GPU with --allreduce nccl (loopback sockets), steady-state samples/s, eager against full steps replayed from one CUDA graph with the buckets' all-reduces inside:"
        echo
        echo "| W | eager | CUDA graph | graph / eager |"
        echo "|---|---|---|---|"
        rates=()
        for graph in off on; do
            NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 mpirun -np 2 sh -c 'NCCL_HOSTID="gpu-check-$OMPI_COMM_WORLD_RANK" exec "$0" "$@"' \
                "$obj/dp_worker" "${gpu[@]}" "${data[@]}" --allreduce nccl --epochs 2 --log-every 100 --cuda-graph $graph \
                >"$build/strategies-graph-w2-$graph.log" 2>&1 || { tail -n 20 "$build/strategies-graph-w2-$graph.log"; die "dp_worker --cuda-graph $graph on 2 ranks failed"; }
            rates+=("$(progress_rate "$build/strategies-graph-w2-$graph.log")")
        done
        awk -v a="${rates[0]}" -v b="${rates[1]}" 'BEGIN { printf "| 2 | %.0f | %.0f | %.2fx |\n", a, b, b / a }'
    } | tee -a "$out/strategies.md"
}

# Issue 36 on the GPU: the anchors' synthetic benchmark at ImageNet's shape, and the ResNet recipe.
run_resnet() {
    [ "$device" = cuda ] || { say "resnet: the GPU's numbers need --device cuda"; return 0; }
    local bench=("$root/scripts/resnet-benchmark.sh" --device cuda --model resnet50 --size 224 --batch 64
        --worlds 1 --classes 1000 --warmup 10 --steps 20 --repeats 1)
    {
        echo "ResNet-50 on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1), $(date -u '+%Y-%m-%d %H:%M UTC'); command: scripts/gpu-check.sh resnet"
        echo
        DP_WORKER="$obj/dp_worker" "${bench[@]}" || die "resnet-benchmark.sh (FP32) failed"
        echo
        DP_WORKER="$obj/dp_worker" "${bench[@]}" --dptrain-args "--precision bf16" \
            --torch-args "--channels-last --bf16" || die "resnet-benchmark.sh (bf16) failed"
        echo
    } | tee -a "$out/resnet.md"
    rm -f "$build/accuracy.rows"
    train_to_accuracy "ResNet recipe, 15 epochs, fp32" --model resnet --sync-bn --optimizer sgd --lr 0.1 --momentum 0.9 \
        --weight-decay 5e-4 --lr-schedule cosine --warmup-steps 200 --epochs 15 --batch 128
    awk -F'|' '{ printf "| %s | %.2f%% | %.2f s |\n", $1, $2, $3 }' "$build/accuracy.rows" | tee -a "$out/resnet.md"
}

use_carried_packages
check_tools
set_launch_agent
. "$root/scripts/mpi-env.sh"
# Virtual machines may refuse cross-memory attach between ranks; copying through shared memory works anywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
find_source
build_dptrain
status=0
case $phase in
tests) run_gpu_tests || status=1 ;;
bench) run_benchmarks ;;
sanitize) run_sanitizers || status=1 ;;
cpu) run_cpu_throughput || status=1 ;;
accuracy) run_accuracy ;;
strategies) run_strategies ;;
resnet) run_resnet ;;
all)
    [ "$run_tests" = 0 ] || run_gpu_tests || status=1
    [ "$run_bench" = 0 ] || run_benchmarks
    [ "$device" = cpu ] || run_sanitizers || status=1
    ;;
esac
exit $status
