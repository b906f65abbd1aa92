#!/bin/sh
# Installs what is missing, builds, and trains the default MLP on Fashion-MNIST with 2 MPI
# ranks. Extra arguments go to dp_worker (see: build/dp_worker --help).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/build.sh"
. "$top/scripts/mpi-env.sh"
exec mpirun -np "${RANKS:-2}" "$top/build/dp_worker" --data fashion-mnist "$@"
