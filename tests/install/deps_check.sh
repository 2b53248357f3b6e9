#!/usr/bin/env bash
# scripts/deps.sh on made-up machines: OpenBLAS is found in each layout the
# distributions use (one present path is enough), is missing when its header
# or its library is, a machine that has every package runs no apt-get, and
# the bench builds CPU-only where no GPU is visible.
#
#   tests/install/deps_check.sh scripts/deps.sh WORK_DIR
set -uo pipefail
deps=$1 work=$2
rm -rf "$work" && mkdir -p "$work" || exit 1
failures=0 checks=0

# fake_bin DIR NAME EXIT_CODE: a program NAME in DIR that exits with EXIT_CODE
# and records its arguments in DIR/NAME.called.
fake_bin() {
    mkdir -p "$1"
    printf '#!/bin/sh\necho "$*" >>"%s/%s.called"\nexit %s\n' "$1" "$2" "$3" >"$1/$2"
    chmod +x "$1/$2"
}

# make_root DIR FILE...: an empty file system root holding FILEs.
make_root() {
    local dir=$1 f
    shift
    mkdir -p "$dir"
    for f in "$@"; do mkdir -p "$dir/$(dirname "$f")" && : >"$dir/$f"; done
}

# verdict WHAT GOT EXPECTED: counts and prints one check.
verdict() {
    checks=$((checks + 1))
    if [ "$2" != "$3" ]; then
        echo "FAIL: $1: got '$2', expected '$3'"
        failures=$((failures + 1))
    else
        echo "ok: $1: $2"
    fi
}

# expect_openblas WHAT yes|no ROOT PATH
expect_openblas() {
    local got=no
    (source "$deps" && PATH=$4 && commgemm_have_openblas "$3") && got=yes
    verdict "$1 (commgemm_have_openblas, root $3, PATH $4)" "$got" "$2"
}

nopc=$work/bin-none && mkdir -p "$nopc"
pc_no=$work/bin-pc-no && fake_bin "$pc_no" pkg-config 1
pc_yes=$work/bin-pc-yes && fake_bin "$pc_yes" pkg-config 0

debian=$work/debian
make_root "$debian" usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h \
    usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so
arm=$work/arm
make_root "$arm" usr/include/aarch64-linux-gnu/openblas-pthread/cblas.h usr/lib/aarch64-linux-gnu/libopenblas.so
fedora=$work/fedora
make_root "$fedora" usr/include/openblas/cblas.h usr/lib64/libopenblas.so
header_only=$work/header-only
make_root "$header_only" usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h
lib_only=$work/lib-only
make_root "$lib_only" usr/lib/x86_64-linux-gnu/libopenblas.so
empty=$work/empty && mkdir -p "$empty"

expect_openblas "Debian x86-64 layout alone, no pkg-config" yes "$debian" "$nopc"
expect_openblas "Debian x86-64 layout, pkg-config without openblas.pc" yes "$debian" "$pc_no"
expect_openblas "aarch64 layout alone" yes "$arm" "$nopc"
expect_openblas "Fedora layout alone" yes "$fedora" "$nopc"
expect_openblas "pkg-config knows openblas" yes "$empty" "$pc_yes"
expect_openblas "header without library" no "$header_only" "$pc_no"
expect_openblas "library without header" no "$lib_only" "$pc_no"
expect_openblas "nothing installed" no "$empty" "$nopc"

# Every package present (pkg-config knows openblas): nothing is missing and
# commgemm_install_deps neither runs apt-get nor exits, as root or not.
all=$work/bin-all
for p in cmake cc make python3; do fake_bin "$all" "$p" 0; done
fake_bin "$all" pkg-config 0
fake_bin "$all" apt-get 0
for uid in 0 1000; do
    printf '#!/bin/sh\necho %s\n' "$uid" >"$all/id" && chmod +x "$all/id"
    rm -f "$all/apt-get.called"
    out=$(source "$deps" && PATH=$all && commgemm_install_deps && echo returned 2>&1)
    [ -e "$all/apt-get.called" ] && out="$out, ran apt-get $(head -1 "$all/apt-get.called")"
    verdict "uid $uid, every package present (commgemm_install_deps)" "$out" returned
done

# The bench's build tree: build-cpu/ without the GPU backends unless
# nvidia-smi lists a GPU.
expect_tree() { # WHAT EXPECTED PATH
    verdict "$1 (commgemm_bench_tree)" "$(source "$deps" && PATH=$3 && commgemm_bench_tree)" "$2"
}
gpu=$work/bin-gpu && mkdir -p "$gpu"
printf '#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"\n' >"$gpu/nvidia-smi" && chmod +x "$gpu/nvidia-smi"
nogpu=$work/bin-nogpu && mkdir -p "$nogpu"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$nogpu/nvidia-smi" && chmod +x "$nogpu/nvidia-smi"
ln -s "$(command -v grep)" "$gpu/grep" && ln -s "$(command -v grep)" "$nogpu/grep"
expect_tree "no nvidia-smi" "build-cpu -DCOMMGEMM_CUDA=OFF" "$nopc"
expect_tree "nvidia-smi finds no device" "build-cpu -DCOMMGEMM_CUDA=OFF" "$nogpu"
expect_tree "nvidia-smi lists a GPU" "build" "$gpu"

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" = 0 ]
