#!/usr/bin/env bash
# Replays the lent GPU machine's situation here (make check-gpu-replay; as root): that machine
# has CUDA, nvcc and PyTorch but no Open MPI, PMIx, ssh/rsh, autotools, OpenBLAS, Check,
# pkg-config or zlib headers, and no package registry. In a private mount namespace those
# packages' files are hidden (overlay whiteouts over the directories that hold them), and
# scripts/gpu-check.sh tests --device cpu runs from a copy of the tree as the device tool
# carries it (tracked and unignored files plus .gpu-carry, filled by scripts/gpu-prepare.sh
# first, which downloads the Debian packages). It must build from the carried tarball and
# packages, start MPI jobs without a launch agent, print no missing-help-file blocks, and
# pass the device, kernel and fake-CUDA tests. GPU_REPLAY_KEEP=1 keeps the scratch folder.
set -euo pipefail

root=$(cd "${srcdir:-.}" && pwd)
[ "$(id -u)" = 0 ] || { echo "gpu-replay: needs root (a mount namespace)"; exit 77; }
command -v unshare >/dev/null && grep -qw overlay /proc/filesystems || { echo "gpu-replay: needs unshare and overlayfs"; exit 77; }
work=$(mktemp -d /tmp/gpu-replay-gpu-path.XXXXXX)
[ "${GPU_REPLAY_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
say() { printf 'gpu-replay: %s\n' "$*"; }

# What the GPU machine lacks (the packages gpu-prepare.sh carries, plus ssh and the autotools).
hidden_packages="openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libpmix-dev
    libhwloc15 libhwloc-dev libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-dev libfabric1 libucx0
    libpsm2-2 libpsm-infinipath1 openssh-client rsh-client autoconf automake libtool m4
    libopenblas0 libopenblas0-pthread libopenblas-dev libopenblas-pthread-dev check libsubunit0
    libsubunit-dev zlib1g-dev pkgconf pkgconf-bin pkg-config libpkgconf3"

say "filling .gpu-carry (scripts/gpu-prepare.sh)"
(cd "$root" && bash scripts/gpu-prepare.sh) >"$work/prepare.log" 2>&1 || { tail -n 20 "$work/prepare.log"; exit 1; }

say "copying the tree as the device tool carries it into $work/tree"
mkdir -p "$work/tree"
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -a -t "$work/tree")
cp -a "$root/.gpu-carry" "$work/tree/"

# Overlay whiteouts: every file of the hidden packages (a directory they fill entirely goes as
# a whole), and every link elsewhere that resolves to one (update-alternatives: mpirun, libblas).
python3 - "$work/whiteouts" $hidden_packages <<'EOF'
import os, subprocess, sys
out, packages = sys.argv[1], sys.argv[2:]
hidden = set()
for p in packages:
    r = subprocess.run(["dpkg", "-L", p], capture_output=True, text=True)
    hidden.update(path for path in r.stdout.split("\n") if os.path.lexists(path) and not os.path.isdir(path))
real_hidden = {os.path.realpath(h) for h in hidden if os.path.isfile(h) and not os.path.islink(h)}
for d in ["/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/pkgconfig", "/usr/include",
          "/usr/include/x86_64-linux-gnu", "/usr/share/pkgconfig"]:
    for name in os.listdir(d):
        path = os.path.join(d, name)
        if os.path.islink(path) and os.path.realpath(path) in real_hidden:
            hidden.add(path)
def fully_hidden(d):
    try:
        return all(fully_hidden(os.path.join(d, n)) if os.path.isdir(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n))
                   else os.path.join(d, n) in hidden for n in os.listdir(d))
    except PermissionError:
        return False
tops = set()
for path in hidden:
    path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    top, parent = path, os.path.dirname(path)
    while parent not in ("/", "/usr", "/usr/lib", "/usr/share", "/usr/include", "/etc") and fully_hidden(parent):
        top, parent = parent, os.path.dirname(parent)
    tops.add(top)
# One overlay per top-level folder (/usr/bin, /usr/lib, /etc, ...): whiteouts at any depth of
# its upper layer, since an overlay whose lower layer is another overlay may not stack.
with open(out, "w") as f:
    for t in sorted(tops):
        parts = t.strip("/").split("/")
        depth = 2 if parts[0] == "usr" else 1
        f.write("/" + "/".join(parts[:depth]) + "\t" + "/".join(parts[depth:]) + "\n")
EOF
say "hiding $(wc -l <"$work/whiteouts") files and folders of: $(echo $hidden_packages)"

# Inside the namespace: one overlay per top-level folder that loses entries.
cat >"$work/inside.sh" <<'EOF'
set -euo pipefail
work=$1
mount -t tmpfs tmpfs "$work/ns" 2>/dev/null || { mkdir -p "$work/ns" && mount -t tmpfs tmpfs "$work/ns"; }
n=0
for dir in $(cut -f1 "$work/whiteouts" | sort -u); do
    n=$((n + 1))
    mkdir -p "$work/ns/up$n" "$work/ns/work$n"
    awk -F '\t' -v d="$dir" '$1 == d { print $2 }' "$work/whiteouts" | while read -r rel; do
        mkdir -p "$work/ns/up$n/$(dirname "$rel")"
        mknod "$work/ns/up$n/$rel" c 0 0
    done
    mount -t overlay overlay -o "lowerdir=$dir,upperdir=$work/ns/up$n,workdir=$work/ns/work$n" "$dir"
done
for tool in mpirun mpicc ssh rsh autoreconf pkg-config; do
    if command -v "$tool" >/dev/null; then echo "gpu-replay: $tool is still visible" >&2; exit 1; fi
done
cd "$work/tree"
mkdir -p "$work/out"
OUT="$work/out" GPU_CHECK_BUILD="$work/build" GPU_CHECK_DEPS="$work/deps" scripts/gpu-check.sh tests --device cpu
EOF
mkdir -p "$work/ns"
say "scripts/gpu-check.sh tests --device cpu, in a mount namespace without them"
status=0
unshare --mount --propagation private bash "$work/inside.sh" "$work" >"$work/replay.log" 2>&1 || status=$?
cat "$work/replay.log"
failures=0
fail() { say "FAIL: $*"; failures=$((failures + 1)); }
[ "$status" = 0 ] || fail "gpu-check.sh exited $status"
grep -q "unpacking .* carried Debian packages" "$work/replay.log" || fail "the carried packages were not used"
grep -q "building from dptrain-" "$work/replay.log" || fail "did not build from the carried tarball"
if grep -E "plm_rsh_agent|could not be found|help file|PMIx was unable|Sorry!  You were supposed" "$work/replay.log" "$work"/build/obj/tests/*.log; then
    fail "Open MPI or PMIx complained (above)"
fi
for t in tests/device.sh tests/fakecuda.sh tests/fakecuda-binding.sh tests/fakecuda-train-w2.sh tests/test_kernel_math; do
    grep -q "^PASS: $t" "$work/replay.log" || fail "$t did not pass"
done
say "$([ $failures = 0 ] && echo "passed" || echo "$failures failure(s)")"
[ $failures = 0 ]
