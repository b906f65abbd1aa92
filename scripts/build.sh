#!/bin/sh
# Installs what is missing, then configures (once) and builds in build/. Reuses an earlier build.
# BUILD_DIR and CONFIGURE_FLAGS select another configuration (scripts/check-sanitizers.sh).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/install-deps.sh"
cd "$top"
[ -x configure ] && [ configure -nt configure.ac ] && [ Makefile.in -nt Makefile.am ] || autoreconf -fi
mkdir -p "${BUILD_DIR:-build}"
cd "${BUILD_DIR:-build}"
# shellcheck disable=SC2086
[ -f Makefile ] && [ Makefile -nt ../configure ] || ../configure --quiet ${CONFIGURE_FLAGS:-}
make -j"$(nproc)" --no-print-directory >/dev/null
