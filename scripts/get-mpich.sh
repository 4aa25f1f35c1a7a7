#!/usr/bin/env bash
# get-mpich.sh [DIR]: MPICH with ch4:ofi for the MPI tests over the omx provider.
# Debian's MPICH is built for UCX only; the `mpich` wheel on PyPI (built by the mpi4py
# project) has ch4:ofi on a bundled libfabric 2.x that loads external providers from
# FI_PROVIDER_PATH. The wheel is unpacked (not installed, so its mpicc and mpirun never
# shadow Open MPI's) into DIR (default build/mpich): DIR/bin/mpicc, DIR/bin/mpiexec.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build/mpich}
version=${MPICH_WHEEL_VERSION:-5.0.2}
if [ -x "$dir/bin/mpiexec" ] && [ "$(cat "$dir/.version" 2>/dev/null)" = "$version" ]; then
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: "mpich==$version" -d "$tmp"
python3 -m zipfile -e "$tmp"/mpich-*.whl "$tmp/x"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
mv "$tmp/x/mpich-$version.data/data" "$dir"
chmod +x "$dir"/bin/*
echo "$version" > "$dir/.version"
echo "MPICH $version in $dir"
