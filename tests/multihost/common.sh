# Sourced (bash) by check-multihost.sh and ../slurm/check-slurm.sh: the paths, the root check,
# the training run both compare across launches, and the namespace hosts (netns.sh).
set -u
: "${srcdir:=.}" "${top_builddir:=.}"
srcdir=$(cd "$srcdir" && pwd)
. "$srcdir/tests/multihost/netns.sh"
DP_WORKER=$(cd "$top_builddir" && pwd)/dp_worker
export DP_WORKER

# Two epochs of Fashion-MNIST (470 steps at batch 256) with the default MLP: 84.31% test
# accuracy on 2 ranks of an AMD EPYC, 84.41% on an Intel Xeon (OpenBLAS's kernels differ), bitwise the same for every launch of 2 ranks (deterministic) with
# the same BLAS threads per rank: one node's 2 ranks would get 1 each and one rank per node 2,
# and OpenBLAS rounds the 10-class layer's products differently on 2 threads.
train_options=(--steps 470 --lr-schedule cosine --log-every 235 --threads 1)

require_root() { # NAME WHAT_NEEDS_IT
    if [ "$(id -u)" -ne 0 ]; then
        echo "$1: must run as root: $2" >&2
        exit 1
    fi
}

accuracy_of() { # FILE: the final test accuracy in dp_worker's summary line
    sed -n 's/^summary: .*accuracy \([0-9.]*\)%.*/\1/p' "$1"
}
