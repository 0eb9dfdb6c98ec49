#!/bin/sh
# Rebuild bpf/pyinspect.bpf.o from bpf/pyinspect.bpf.c. The object is
# committed (so that `cargo build` needs no clang); `bpf/build.sh --check`
# rebuilds it into a temporary file and fails if it differs from the
# committed one (run by .ci/run). Needs clang and llvm-strip (Debian:
# apt-get install clang llvm).
set -eu
cd "$(dirname "$0")"
out=pyinspect.bpf.o
if [ "${1:-}" = "--check" ]; then
	out=$(mktemp /tmp/pyinspect-bpf-XXXXXX.o)
	trap 'rm -f "$out"' EXIT
fi
# -g gives the BTF that the loader needs for the maps; the DWARF is then
# stripped (it names this directory, which would make the object differ
# from one checkout to the next). BTF is kept.
clang -target bpf -O2 -g -Wall -Werror -fdebug-prefix-map="$PWD"=. \
	-c pyinspect.bpf.c -o "$out"
llvm-strip -g "$out"
if [ "${1:-}" = "--check" ]; then
	if ! cmp -s "$out" pyinspect.bpf.o; then
		echo "bpf/pyinspect.bpf.o does not match bpf/pyinspect.bpf.c: run bpf/build.sh and commit" >&2
		exit 1
	fi
	echo "bpf/pyinspect.bpf.o matches its source"
fi
