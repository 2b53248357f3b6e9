#!/usr/bin/env bash
# Run HERE (not on the device): unpacks Debian's OpenBLAS into .carry/root
# (git-ignored) for the device image, which has no OpenBLAS; the device runs
# name ".carry" in `carry`. Also fetches the cuBLASMp wheel into .whl.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/debs .carry/root .whl
(cd .carry/debs && apt-get download libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev)
for f in .carry/debs/*.deb; do dpkg -x "$f" .carry/root; done
rm -rf .carry/debs
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d .whl nvidia-cublasmp-cu13==0.7.0.125
du -sh .carry .whl
