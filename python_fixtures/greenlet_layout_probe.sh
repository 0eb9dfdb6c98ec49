#!/usr/bin/env bash
# Prints the offsets of src/cpython_layouts/greenlet.rs for one greenlet
# release and one interpreter: fetches the release's source distribution
# (from $PYINSPECT_GREENLET_SDIST, default /opt/pyinspect-greenlet, where
# .ci/gevent-deps keeps them, else from PyPI) and compiles the probes against its headers and the
# interpreter's include dir and the one above it, where Debian keeps
# pyconfig.h (to assembly only: nothing is linked or run).
#   python_fixtures/greenlet_layout_probe.sh 3.5.6 ~/.pyenv/versions/3.12.1/bin/python
set -euo pipefail
release=$1 py=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sdist="${PYINSPECT_GREENLET_SDIST:-/opt/pyinspect-greenlet}/greenlet-$release.tar.gz"
if [ ! -f "$sdist" ]; then
  "$py" -m pip download -q --no-binary :all: --no-deps "greenlet==$release" -d "$work"
  sdist="$work/greenlet-$release.tar.gz"
fi
tar xzf "$sdist" -C "$work"
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
{
  g++ -std=c++11 -w -I"$inc" -I"$(dirname "$inc")" -I"$work/greenlet-$release/src/greenlet" -S "$here/greenlet_layout_probe.cpp" -o -
  gcc -w -I"$inc" -I"$(dirname "$inc")" -S "$here/greenlet_gc_probe.c" -o -
} | awk '/^probe_[a-z_]*:/ { n = $1 } /\.quad/ && n { print n, $2; n = "" } /\.zero/ && n { print n, 0; n = "" }' |
  sed 's/^probe_//; s/:$//; s/: / /'
