#!/usr/bin/env bash
# configure and make against the two CUDA layouts that broke the build before (make
# check-cuda-layouts; as root, where /usr/local/cuda holds a toolkit): a distribution's
# (nvcc in /usr/bin, headers in /usr/include, libraries in /usr/lib/x86_64-linux-gnu; made in
# a mount namespace by overlays that link the toolkit's files there), where -isystem
# /usr/include broke libstdc++'s #include_next; and NVIDIA's wheels (DIR/bin, DIR/include,
# DIR/lib with only libcublas.so.13-style names), where the cuBLAS check failed. Each must
# configure with the CUDA backend and build dp_worker and the kernels. Then the default
# CUDA_ARCH: the kernels hold code for each GPU it names (tests/fatbin_archs.py reads them).
set -euo pipefail

root=$(cd "${srcdir:-.}" && pwd)
cuda=/usr/local/cuda
[ "$(id -u)" = 0 ] || { echo "cuda-layouts: needs root (a mount namespace)"; exit 77; }
[ -x "$cuda/bin/nvcc" ] && [ -x "$root/configure" ] || { echo "cuda-layouts: needs $cuda/bin/nvcc and a generated configure"; exit 77; }
work=$(mktemp -d /tmp/cuda-layouts-gpu-path.XXXXXX)
trap 'rm -rf "$work"' EXIT
# What the compilers would find on their own here (LIBRARY_PATH holds the toolkit's stubs) is
# not part of either layout.
unset LIBRARY_PATH CPATH CUDA_HOME
major=$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
failures=0

# build NAME [configure options]: configure (must find CUDA) and build the CUDA objects and dp_worker.
# One compute capability: the layouts decide how the toolkit is found, not which GPUs run it.
build() {
    local name=$1
    shift
    mkdir -p "$work/$name" && cd "$work/$name"
    if ! "$root/configure" CUDA_ARCH=90 "$@" >configure.out 2>&1 || ! grep -q "CUDA backend: *yes" configure.out; then
        echo "FAIL $name: configure $* (CUDA backend: $(sed -n 's/.*CUDA backend: *//p' configure.out))"
        failures=$((failures + 1))
        return
    fi
    if make -j2 dp_worker >make.out 2>&1; then
        echo "ok   $name: $(sed -n 's/.*CUDA backend: *//p' configure.out)"
    else
        echo "FAIL $name: make dp_worker"
        tail -n 15 make.out
        failures=$((failures + 1))
    fi
}

# isolated NAME MOUNTS [configure options]: build NAME in a private mount namespace after the
# overlay mounts MOUNTS (lines "LOWER UPPER"), with the toolkit's own folder out of PATH.
isolated() {
    local name=$1 mounts=$2
    shift 2
    {
        echo "set -e"
        echo "$mounts" | while read -r lower upper; do
            [ -n "$lower" ] || continue
            mkdir -p "$upper.work"
            echo "mount -t overlay overlay -o lowerdir=$lower,upperdir=$upper,workdir=$upper.work $lower"
        done
        echo "export PATH=/usr/bin:/bin"
        declare -f build
        echo "root=$root work=$work failures=0"
        printf 'build %s' "$name"
        printf ' %q' "$@"
        printf '\nexit $failures\n'
    } >"$work/$name.sh"
    unshare --mount --propagation private bash "$work/$name.sh" || failures=$((failures + 1))
}

# A distribution's layout: the toolkit's files linked into /usr/bin, /usr/include and
# /usr/lib/x86_64-linux-gnu by overlays.
up="$work/distribution-up"
mkdir -p "$up/bin" "$up/include" "$up/lib"
printf '#!/bin/sh\nexec %s/bin/nvcc "$@"\n' "$cuda" >"$up/bin/nvcc" && chmod +x "$up/bin/nvcc"
for f in "$cuda"/include/*; do [ -e "/usr/include/$(basename "$f")" ] || ln -s "$f" "$up/include/"; done
for f in "$cuda"/lib64/libcublas* "$cuda"/lib64/libcudart* "$cuda"/lib64/libnccl*; do ln -s "$f" "$up/lib/"; done
isolated distribution "/usr/bin $up/bin
/usr/include $up/include
/usr/lib/x86_64-linux-gnu $up/lib" --with-cuda
[ -f "$work/distribution/Makefile" ] && ! grep -q '^CUDA_CPPFLAGS = .*-isystem' "$work/distribution/Makefile" ||
    { echo "FAIL distribution: -isystem in CUDA_CPPFLAGS"; failures=$((failures + 1)); }

# NVIDIA's wheels: one folder with bin/, include/ and lib/, versioned library names only; the
# unversioned links this machine has in the linker's default folders are hidden.
wheel="$work/wheel/cu$major"
mkdir -p "$wheel/bin" "$wheel/lib"
printf '#!/bin/sh\nexec %s/bin/nvcc "$@"\n' "$cuda" >"$wheel/bin/nvcc" && chmod +x "$wheel/bin/nvcc"
ln -s "$cuda/include" "$wheel/include"
for f in "$cuda"/lib64/lib{cublas,cublasLt,cudart}.so."$major" "$cuda"/lib64/libnccl.so.2; do ln -s "$f" "$wheel/lib/"; done
hide=""
for dir in "$(readlink -f "$cuda/lib64")" /usr/local/lib /usr/lib/x86_64-linux-gnu; do
    names=$(cd "$dir" && ls libcublas.so libcublasLt.so libcudart.so libnccl.so 2>/dev/null || true)
    [ -n "$names" ] || continue
    mkdir -p "$work/hide$dir"
    for n in $names; do mknod "$work/hide$dir/$n" c 0 0; done
    hide="$hide$dir $work/hide$dir
"
done
isolated wheel "$hide" --with-cuda="$wheel"
grep -q -- "-l:libcublas.so.$major -l:libcudart.so.$major" "$work/wheel/configure.out" ||
    { echo "FAIL wheel: not linked by versioned names"; failures=$((failures + 1)); }
# The default CUDA_ARCH, in the toolkit's own layout: Volta to Hopper less what this nvcc no
# longer builds (CUDA 13 dropped 7.0), each in the kernels as code for its GPU, and PTX for the
# newest. One kernel file is enough to see the gencode flags at work.
mkdir -p "$work/default" && cd "$work/default"
expected=""
for cc in 70 75 80 86 89 90; do
    "$cuda/bin/nvcc" --list-gpu-arch 2>/dev/null | grep -qx "compute_$cc" && expected="$expected $cc"
done
if "$root/configure" --with-cuda="$cuda" >configure.out 2>&1 &&
    grep -q "GPU code for compute capabilities ${expected# } (CUDA_ARCH), PTX for 90" configure.out &&
    make src/backend/cuda_exact_kernels.lo >make.out 2>&1; then
    found=$(python3 "$root/tests/fatbin_archs.py" src/backend/cuda_exact_kernels.o)
    want="$(for cc in $expected; do printf 'elf:sm_%s ' "$cc"; done)ptx:sm_90"
    if [ "$found" = "$want" ]; then
        echo "ok   default CUDA_ARCH: $found ($(sed -n 's/.*left out: //p' configure.out | cut -d';' -f1))"
    else
        echo "FAIL default CUDA_ARCH: the kernels hold '$found', want '$want'"
        failures=$((failures + 1))
    fi
else
    echo "FAIL default CUDA_ARCH: configure's summary or the kernel's build ($(sed -n 's/.*CUDA backend: *//p' configure.out))"
    tail -n 15 make.out 2>/dev/null
    failures=$((failures + 1))
fi
echo "$failures layout(s) failed"
[ "$failures" = 0 ]
