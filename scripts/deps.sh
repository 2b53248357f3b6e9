#!/usr/bin/env bash
# Installs (as root, with apt-get) or names (otherwise) the system packages
# commgemm needs to build and test. Sourced by build.sh, bench.sh, test.sh.
set -euo pipefail

commgemm_missing_packages() {
    local missing=()
    command -v cmake >/dev/null 2>&1 || missing+=(cmake)
    command -v cc >/dev/null 2>&1 || missing+=(gcc)
    command -v make >/dev/null 2>&1 || missing+=(make)
    command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
    commgemm_have_openblas || missing+=(libopenblas-dev)
    if ! command -v python3 >/dev/null 2>&1; then
        missing+=(python3)
    elif ! commgemm_python_installs && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        missing+=(python3-venv) # test.sh's Python packages then go into a venv
    fi
    echo "${missing[@]:-}"
}

# True when python3's pip can install into its own site-packages (root, a
# virtual environment, a Python of the user's own) and no distribution marks
# it as managed by the system's package manager (PEP 668).
commgemm_python_installs() {
    python3 -m pip --version >/dev/null 2>&1 && python3 -c '
import os, sys, sysconfig
p = sysconfig.get_paths()
sys.exit(not os.access(p["purelib"], os.W_OK) or os.path.exists(os.path.join(p["stdlib"], "EXTERNALLY-MANAGED")))'
}

# The Python that test.sh installs its test packages into and runs pytest
# with: python3 where it can install (above), else the virtual environment DIR
# over python3's packages (--system-site-packages: what the system already
# has, torch say, is used as it is), made on first use.
commgemm_python() {
    local dir=$1
    if commgemm_python_installs; then echo python3; return 0; fi
    if [ ! -x "$dir/bin/python" ] && ! python3 -m venv --system-site-packages "$dir" >&2; then
        echo "commgemm: python3 cannot install packages here and python3 -m venv failed;" \
            "install python3-venv as root (apt-get install -y python3-venv)" >&2
        return 1
    fi
    echo "$dir/bin/python"
}

# True when OpenBLAS's cblas.h and libopenblas.so are installed: pkg-config
# knows openblas, or a header and a library lie where Debian, Ubuntu or
# Fedora put them (each path checked on its own). ROOT (default /) is the
# file system root to look under.
commgemm_have_openblas() {
    local root=${1:-} header='' lib='' f
    if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openblas 2>/dev/null; then
        return 0
    fi
    for f in "$root"/usr/include/*-linux-gnu/openblas*/cblas.h "$root"/usr/include/openblas/cblas.h; do
        [ -f "$f" ] && header=$f && break
    done
    for f in "$root"/usr/lib/*-linux-gnu/libopenblas.so "$root"/usr/lib/*-linux-gnu/openblas*/libopenblas.so \
        "$root"/usr/lib64/libopenblas.so "$root"/usr/lib/libopenblas.so; do
        [ -e "$f" ] && lib=$f && break
    done
    [ -n "$header" ] && [ -n "$lib" ]
}

commgemm_install_deps() {
    local missing
    missing=$(commgemm_missing_packages)
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "commgemm: installing $missing" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # shellcheck disable=SC2086
        apt-get install -y -qq $missing >/dev/null
    else
        echo "commgemm: missing system packages: $missing" >&2
        echo "  install them as root: apt-get install -y $missing" >&2
        exit 1
    fi
}

# True when a CUDA GPU is visible (the bench then uses the GPU backends).
commgemm_have_gpu() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

# The bench's build tree and its extra configure argument: build/ (the GPU
# backends where nvcc and NCCL are found) when a GPU is visible; otherwise
# build-cpu/ with -DCOMMGEMM_CUDA=OFF, since kernels that cannot run there
# would take minutes of nvcc (test.sh still compiles them in build/).
commgemm_bench_tree() {
    if commgemm_have_gpu; then echo build; else echo "build-cpu -DCOMMGEMM_CUDA=OFF"; fi
}

commgemm_gpu_count() {
    nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
}
