#!/bin/sh
# Installs the Debian packages dptrain needs (or those named as arguments), only those
# missing; uses sudo when not root.
set -eu
packages=${*:-"build-essential autoconf automake libtool pkg-config openmpi-bin libopenmpi-dev
libopenblas-dev zlib1g-dev check dataset-fashion-mnist python3"}
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
if [ "$(id -u)" -eq 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
    echo "install-deps: need root or sudo to install:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing
