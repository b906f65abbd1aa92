#!/bin/sh
# Installs what is missing, then configures (once) and builds in build/. Reuses an earlier build.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
cd "$top"
[ -x configure ] && [ configure -nt configure.ac ] && [ Makefile.in -nt Makefile.am ] || autoreconf -fi
mkdir -p build
cd build
[ -f Makefile ] && [ Makefile -nt ../configure ] || ../configure --quiet
make -j"$(nproc)" --no-print-directory >/dev/null
