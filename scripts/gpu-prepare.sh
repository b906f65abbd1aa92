#!/usr/bin/env bash
# Fills .gpu-carry/ for a GPU machine that lacks dptrain's build dependencies and cannot reach
# a package registry (this project's lent GPU machines: CUDA, PyTorch and nvcc, but no Open MPI,
# OpenBLAS, Check or autotools). Run it here, on a Debian machine with apt, from the repository
# root; then carry .gpu-carry to the GPU machine and run scripts/gpu-check.sh there, which
# unpacks it. It holds:
#   dptrain-VERSION.tar.gz  the source with its generated configure (no autotools needed)
#   debs/*.deb              Debian's Open MPI, OpenBLAS, Check, zlib and pkg-config packages
#                           with the libraries they load, unpacked there into a side directory
#   wheels/*.whl            NVIDIA's compute-sanitizer (PyPI nvidia-cuda-sanitizer-api, for the
#                           CUDA major.minor of this machine's nvcc, else 13.0), for the
#                           sanitize phase where the GPU machine's toolkit lacks it
# The folder stays under the device tool's 64 MiB carry limit (about 36 MiB).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
carry="$root/.gpu-carry"
# What building and running dptrain needs beyond a CUDA + PyTorch image, dependencies included
# (apt-cache depends lists far more: compilers and Fortran alternatives the image has or we skip).
packages=(
    openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
    libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0
    libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libpsm2-2 libpsm-infinipath1 libmunge2
    libnuma1 libltdl7 libpciaccess0 libxnvctrl0
    libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev libgfortran5 libquadmath0
    check libsubunit0 libsubunit-dev zlib1g zlib1g-dev pkgconf pkgconf-bin libpkgconf3
)

mkdir -p "$carry/debs"

echo "gpu-prepare: downloading ${#packages[@]} Debian packages into $carry/debs"
apt-get -qq update
(cd "$carry/debs" && apt-get download "${packages[@]}")

cuda_version=$( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')
echo "gpu-prepare: downloading compute-sanitizer ${cuda_version:-13.0} into $carry/wheels"
rm -rf "$carry/wheels" && mkdir -p "$carry/wheels"
python3 -m pip download -q --no-deps --only-binary=:all: -d "$carry/wheels" "nvidia-cuda-sanitizer-api==${cuda_version:-13.0}.*" ||
    echo "gpu-prepare: warning: no compute-sanitizer wheel (pip failed): gpu-check.sh sanitize then needs the GPU machine's own" >&2

echo "gpu-prepare: making the source tarball (configure --without-cuda: only 'make dist' runs here)"
build="$root/build-gpu-prepare"
mkdir -p "$build"
[ -x "$root/configure" ] || (cd "$root" && autoreconf -fi)
(cd "$build" && "$root/configure" -q --without-cuda && make -s dist)
rm -f "$carry"/dptrain-*.tar.gz
mv "$build"/dptrain-*.tar.gz "$carry/"
du -sh "$carry"
echo "gpu-prepare: done. On the GPU machine: scripts/gpu-check.sh (carrying .gpu-carry)"
