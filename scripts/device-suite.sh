#!/usr/bin/env bash
# The GPU suite on the device machine (nvidia-h200-x2), from the repo root:
#   bash scripts/device-suite.sh STAGE...   (carry .carry and .whl)
# Stages: build, gpu (p2p + nccl + mixed GPU tests, NCCL defaults),
# nccl-net (nccl tests over NCCL's socket transport on loopback: two-node
# stand-in), cublasmp (with the carried wheel), sanitize (compute-sanitizer
# memcheck + racecheck), torch (torchrun pytest + the TP MLP example), jax
# (tests/python/test_jax_host.py's GPU variants + examples/jax_tp_mlp.py on NGPU ranks),
# perf (bench/perf_on_device.sh on this build; PERF_TABLES), hopper
# (tests/gpu/hopper_on_device.sh), compare, compare-graph,
# compare-graph-outpartial, compare-sweep (bench/compare_on_device.sh:
# eager, CUDA graphs, graphs with output-dtype partials, the sweep alone with
# graphs, p2p and output-dtype partials), compare-sweep-aligned and
# compare-graph-outpartial-aligned (the same with --pad-us 300 --align: the
# GPUs meet in an all_reduce before each start event), compare-contested
# (CONTESTED_SHAPES, 40 rounds, p2p, without and with --align),
# hopper-bench (the kernel bench only),
# cublasmp-cases (tests/cublasmp/run_on_device.sh, case by case), timeline
# (p2p step traces, COMMGEMM_TIMELINE, of the PERFORMANCE shapes, split and
# fused), fused
# (the p2p GPU tests with COMMGEMM_ALGO=fused, case by case), sanitize-fused
# (memcheck + racecheck with it forced), shared (every test_gpu_ops case with
# SHARED_RANKS ranks, default "2 4 8", sharing the GPUs over a LOCAL bootstrap,
# default and fused: correctness on fewer GPUs than ranks), compare-fused (p2p's tuner pick,
# fused and split side by side, graphs, the four shapes), compare-fused-outpartial
# (the same for GEMM+RS with output-dtype partials), algos (one op, ALGOS_OP
# default gemm_rs, at each entry of ALGOS_LIST, algo:splits, on ALGOS_SHAPES;
# graphs, bf16 partials, the tuner's TUNE log for auto:0; the A/Bs run with
# COMMGEMM_PARTIAL_DTYPE from AB_PARTIAL_DTYPE, default output), compare-sweep-aligned (the sweep with --pad-us 300 --align:
# the GPUs start each measurement together), sanitize-cases (memcheck and
# racecheck, or SANITIZE_TOOLS, on the cases in SANITIZE_CASES of SANITIZE_BIN, default test_gpu_ops), fused-splits
# (commgemm-bench with fused at 1, 2, 4 and 8 pieces per shard, graphs and
# eager, split and the tuner beside it unless FUSED_BASELINES=0, bf16 partials;
# FUSED_SHAPES; FUSED_TAG names a second run), hopper-ab (the kernel bench of
# this tree against the tree at HOPPER_AB_BASE, alternating, two rounds; HOPPER_AB_BENCHES: the
# test_hopper_gemm benches to run, default bench), single-bench (test_hopper_gemm singlebench:
# the one-kernel GEMM+RS's kernel on one GPU against cuBLASLt; SINGLE_SHAPES),
# comm-alone (commgemm-bench --comm-baseline library: the p2p backend's own
# collectives timed without a GEMM, and an eager trace), copybench (GPU0<->GPU1 copy rates: one way,
# both ways, streams per direction, pieces with the flag signal on the copy
# stream or beside it, and beside a GEMM or an HBM-bound memset on each GPU;
# tests/gpu/copybench.c), ipcbench (the same between two processes, one GPU each: legacy
# IPC against VMM fds, push and pull, 2D rows, pieces, priority, offset; what sits between pieces;
# a ping-pong of signalled pushes; IPCBENCH_MIB, default "32 128"; tests/gpu/ipcbench.c),
# gemmbeside (the split GEMM+RS's GEMM pieces in one process: whole, pieces, a skeleton
# with ideal event waits, beside a copy flood; GEMMBESIDE_SHAPES m x n x k : S, tests/gpu/gemmbeside.c),
# addend-bench (test_hopper_gemm addendbench: an epilogue addend, cuBLASLt's C against
# cgm_hgemm's, COMMGEMM_LT_SEARCH 8 and 16 or ADDEND_SEARCH; ADDEND_SHAPES), small (the latency-bound sweep
# shapes: every p2p algorithm with graphs, the tuner's log, eager traces of
# 2048x2048x2048; SMALL_SHAPES), max-conn (CUDA_DEVICE_MAX_CONNECTIONS 8, the
# default, against 32: do the p2p queues share hardware queues?), gpu-some (the
# GPU tests matching GPU_TESTS, a ctest -R regex; after a full build: ctest
# needs every test binary, which BUILD_TARGETS leaves out), lt-search
# (COMMGEMM_LT_SEARCH 1 against 8: cuBLASLt's first heuristic algorithm or the
# fastest of 8 timed; LTSEARCH_SHAPES), lt-algos
# (bench/lt_algos.c: cuBLASLt's top heuristic algorithms and cublasGemmEx
# timed per GEMM shape, on every GPU at once; LT_SHAPES), pack
# (everything but summary.txt into $OUT/commgemm-logs.tar.gz; run it last).
# The sanitizer stages run the tests with TEST_TIMEOUT_SCALE=SANITIZE_TIME_SCALE
# (default 10): their comm timeouts, rank bounds and waits stretched;
# sanitize-fused's racecheck runs the op cases' runs SANITIZE_RUNS only
# (COMMGEMM_TEST_RUNS, default 24: a bf16 TN run). Racecheck skips the
# tests' reference GEMM (RACE_SKIP, a --kernel-name-exclude on
# tref_reference_gemm: no library kernel's name contains it, while a
# pattern such as gemm_kernel would also skip the library's hgemm_kernel).
# cuBLASLt's kernels cannot be skipped: with nvjet excluded, CUDA 13.0's
# compute-sanitizer fails with "failed to handle a hardware exception", even
# in test_gpu_lt (one process; 2026-12-02).
# Logs go to $OUT; a summary line per stage is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/commgemm-out}
mkdir -p "$OUT"
# DEVICE_BUILD: a build made elsewhere and carried (an absolute path, e.g.
# $PWD/.devc/build holding tests/gpu/test_gpu_ops and libcommgemm.so), for
# the stages that run its binaries directly (fused, sanitize-fused, shared,
# sanitize-cases) without the build stage; ctest stages need a whole tree.
B=${DEVICE_BUILD:-$PWD/build-device}
source scripts/device-env.sh
# EXTRA_CMAKE_ARGS: more configure arguments, e.g. the kernel trace build
# (-DCMAKE_CUDA_FLAGS=-DCGM_HGEMM_TRACE, docs/HOPPER_GEMM.md: diagnostic only).
read -r -a extra <<<"${EXTRA_CMAKE_ARGS:-}"
args+=("${extra[@]}")
# Ranks = visible GPUs (2 on nvidia-h200-x2; 4 or 8 on the larger kinds, issue 9).
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
[ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
summary=()
note() { summary+=("$1"); echo "== $1"; echo "$1" >>"$OUT/summary.txt"; } # appended at once: a cut-off run keeps what it measured

stage_build() {
    cmake -S . -B "$B" -G Ninja "${args[@]}" >"$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; note "build: configure FAILED"; return 1; }
    cmake --build "$B" -j16 ${BUILD_TARGETS:+--target $BUILD_TARGETS} >"$OUT/build.log" 2>&1
    local rc=$? warnings
    warnings=$(grep -c "warning:" "$OUT/build.log")
    [ $rc -eq 0 ] || tail -30 "$OUT/build.log"
    note "build: rc=$rc, $warnings compiler warnings (gcc $(gcc -dumpversion), nvcc $(nvcc --version | grep -o 'release [0-9.]*'))"
}
stage_gpu() {
    (cd "$B" && ctest -L gpu -E cublasmp --timeout 300 --output-on-failure) >"$OUT/gpu.log" 2>&1
    note "gpu (p2p, nccl, mixed; NCCL defaults): $(grep -E 'tests passed' "$OUT/gpu.log")"
    grep -E "Failed|\(Skipped\)" "$OUT/gpu.log" | head -20
}
stage_nccl_net() {
    (cd "$B" && NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo \
        ctest -R test_gpu_nccl --timeout 300 --output-on-failure) >"$OUT/nccl-net.log" 2>&1
    note "nccl over the socket transport (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1): $(grep -E 'tests passed' "$OUT/nccl-net.log")"
    grep -E "Failed|\(Skipped\)" "$OUT/nccl-net.log" | head -20
}
stage_cublasmp() {
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/nvidia_cublasmp_cu13-0.7.0.125-*.whl >"$OUT/cublasmp-install.log" 2>&1
    local sp
    sp=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    (export COMMGEMM_CUBLASMP_LIB=/tmp/site/nvidia/cublasmp/cu13/lib/libcublasmp.so.0 \
        LD_LIBRARY_PATH=$sp/nvidia/nvshmem/lib:$sp/nvidia/cu13/lib:$sp/nvidia/cublas/lib:$LD_LIBRARY_PATH \
        NVSHMEM_REMOTE_TRANSPORT=none NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo COMMGEMM_TEST_REQUIRE_CUBLASMP=1 \
        CUBLASMP_LOG_LEVEL=2 CUBLASMP_LOG_FILE=$OUT/cublasmp-lib.log
     cd "$B" && ctest -R cublasmp --timeout 300 --output-on-failure) >"$OUT/cublasmp.log" 2>&1
    note "cublasmp 0.7.0.125: $(grep -E 'tests passed' "$OUT/cublasmp.log")"
    grep -E "Failed|# .*(ok|wrong)" "$OUT/cublasmp.log" | head -20
}
# Under compute-sanitizer the tests' waits and comm timeouts are stretched
# (TEST_TIMEOUT_SCALE, tests/harness/harness.h): a rank's start and a
# cuBLASLt search run 10-50x slower there.
SAN_SCALE=${SANITIZE_TIME_SCALE:-10}
RACE_SKIP=${RACE_SKIP---kernel-name-exclude kns=tref_reference_gemm} # RACE_SKIP= checks every kernel
# san SECONDS TOOL ARGS...: compute-sanitizer's TOOL on ARGS with the suite's
# options, bounded (racecheck also skips RACE_SKIP)
san() {
    local lim=$1 t=$2 skip=()
    shift 2
    [ "$t" = racecheck ] && read -ra skip <<<"$RACE_SKIP"
    timeout "$lim" env TEST_TIMEOUT_SCALE="$SAN_SCALE" compute-sanitizer --tool "$t" "${skip[@]}" \
        --target-processes all --report-api-errors no --error-exitcode 99 "$@"
}
stage_sanitize() {
    local t
    for t in memcheck racecheck; do
        san 600 $t "$B/tests/gpu/test_gpu_ops" graph_capture_replay >"$OUT/sanitize-$t.log" 2>&1
        note "compute-sanitizer $t (test_gpu_ops graph_capture_replay): rc=$? $(grep -hE '(ERROR|RACECHECK) SUMMARY' "$OUT/sanitize-$t.log" | sort -u | tr '\n' ' ')"
    done
}
stage_sanitize_cases() { # SANITIZE_TOOLS (memcheck racecheck) on the cases of SANITIZE_CASES of SANITIZE_BIN (default test_gpu_ops; no setting forced)
    local t c
    for t in ${SANITIZE_TOOLS:-memcheck racecheck}; do
        for c in ${SANITIZE_CASES:?SANITIZE_CASES: test_gpu_ops case names}; do
            san "${SANITIZE_TIMEOUT:-200}" $t "$B/tests/gpu/${SANITIZE_BIN:-test_gpu_ops}" $c >"$OUT/sanitize-$t-$c.log" 2>&1
            note "compute-sanitizer $t ($c): rc=$? $(grep -hE '(ERROR|RACECHECK) SUMMARY' "$OUT/sanitize-$t-$c.log" | sort -u | tr '\n' ' ')"
        done
    done
}
stage_fused() { # every test_gpu_ops case (p2p) with the fused algorithm forced
    local log=$OUT/fused.log rc=0 t c
    : >"$log"
    for t in $("$B/tests/gpu/test_gpu_ops" --list | cut -d' ' -f1); do
        COMMGEMM_ALGO=fused COMMGEMM_DEBUG=INFO COMMGEMM_DEBUG_SUBSYS=P2P timeout 300 \
            "$B/tests/gpu/test_gpu_ops" "$t" >>"$log" 2>&1
        c=$?
        echo "== case $t rc=$c" >>"$log"
        [ $c -eq 0 ] || [ $c -eq 77 ] || { rc=1; grep -m5 -E "FAIL|fail|error" "$log" | tail -5; }
    done
    note "fused forced (test_gpu_ops case by case, COMMGEMM_ALGO=fused): rc=$rc, $(grep -c '^== case .* rc=0' "$log") ok, $(grep -c '^== case .* rc=77' "$log") skipped, $(grep -E '^== case .* rc=' "$log" | grep -cvE 'rc=(0|77)$') failed; $(grep -c 'p2p: fused' "$log") fused shapes made, $(grep -c 'runs split' "$log") calls run split"
    grep -E '^== case .* rc=[1-9]' "$log" | grep -v 'rc=77' | head
}
stage_shared() { # test_gpu_ops with ranks sharing the GPUs (LOCAL bootstrap, p2p): SHARED_RANKS, default and fused
    local log R mode t c rc=0
    for R in ${SHARED_RANKS:-2 4 8}; do
        for mode in default fused; do
            log=$OUT/shared-r$R-$mode.log
            : >"$log"
            for t in $("$B/tests/gpu/test_gpu_ops" --list | cut -d' ' -f1); do
                if [ $mode = fused ]; then
                    COMMGEMM_ALGO=fused COMMGEMM_TEST_RANKS=$R timeout 300 "$B/tests/gpu/test_gpu_ops" "$t" >>"$log" 2>&1
                else
                    COMMGEMM_TEST_RANKS=$R timeout 300 "$B/tests/gpu/test_gpu_ops" "$t" >>"$log" 2>&1
                fi
                c=$?
                echo "== case $t rc=$c" >>"$log"
                [ $c -eq 0 ] || [ $c -eq 77 ] || rc=1
            done
            note "shared GPUs, $R ranks, $mode: $(grep -c '^== case .* rc=0' "$log") ok, $(grep -c '^== case .* rc=77' "$log") skipped, $(grep -E '^== case .* rc=' "$log" | grep -cvE 'rc=(0|77)$') failed"
            grep -E '^== case .* rc=[1-9]' "$log" | grep -v 'rc=77' | head
        done
    done
    return $rc
}
stage_sanitize_fused() {
    local t c
    for t in memcheck racecheck; do
        for c in ${SANITIZE_FUSED_CASES:-ag_gemm_all_gpus gemm_rs_all_gpus graph_capture_replay_fused gemm_rs_all_gpus_output_partials}; do
            # racecheck: the op cases' 60 runs do not finish in 250 s
            # there, nor did the 4 bf16 TN runs 24-27 of the RS case in 200 s
            # (two ranks sharing one H200); SANITIZE_RUNS (COMMGEMM_TEST_RUNS,
            # default 24: a bf16 TN run, which the fused kernels take) selects
            local runs=
            [ $t = racecheck ] && [ "${c#graph_capture_replay}" = "$c" ] && runs=${SANITIZE_RUNS:-24}
            COMMGEMM_ALGO=fused COMMGEMM_TEST_RUNS=$runs san "${SANITIZE_TIMEOUT:-200}" $t \
                "$B/tests/gpu/test_gpu_ops" $c >"$OUT/sanitize-fused-$t-$c.log" 2>&1
            note "compute-sanitizer $t, fused forced ($c): rc=$? $(grep -hE '(ERROR|RACECHECK) SUMMARY' "$OUT/sanitize-fused-$t-$c.log" | sort -u | tr '\n' ' ')"
        done
    done
}
stage_torch() {
    (COMMGEMM_LIB=$B/libcommgemm.so timeout 400 torchrun --nproc-per-node $NGPU -m pytest -q -x tests/python/test_torch.py) >"$OUT/torch.log" 2>&1
    note "torch tests (torchrun x2): $(grep -E 'passed|failed|error' "$OUT/torch.log" | tail -1)"
    (COMMGEMM_LIB=$B/libcommgemm.so timeout 200 torchrun --nproc-per-node $NGPU examples/torch_tp_mlp.py --compare) >"$OUT/torch-mlp.log" 2>&1
    note "examples/torch_tp_mlp.py --compare: rc=$? $(tail -1 "$OUT/torch-mlp.log")"
}

stage_jax() { # commgemm.jax on the GPUs: every test's GPU variant (ranks on GPU r % NGPU), the example on NGPU ranks
    (unset JAX_PLATFORMS; COMMGEMM_LIB=$B/libcommgemm.so timeout 400 python3 -m pytest -q -rs tests/python/test_jax_host.py) \
        >"$OUT/jax.log" 2>&1
    note "jax tests: $(grep -E 'passed|failed|error' "$OUT/jax.log" | tail -1)"
    local sp dt
    for sp in "" --no-sequence-parallel; do for dt in float32 bfloat16; do
        (unset JAX_PLATFORMS; COMMGEMM_LIB=$B/libcommgemm.so timeout 120 "$B/tools/commgemm-run" -n $NGPU \
            python3 examples/jax_tp_mlp.py --device gpu --compare --dtype $dt $sp) >"$OUT/jax-mlp-$dt$sp.log" 2>&1
        note "examples/jax_tp_mlp.py --compare --dtype $dt $sp: rc=$? $(tail -1 "$OUT/jax-mlp-$dt$sp.log")"
    done; done
}

stage_perf() { # the PERFORMANCE.md tables from this build (PERF_TABLES picks them)
    mkdir -p "$OUT/perf"
    PERF_REUSE_BUILD=1 timeout 560 bash bench/perf_on_device.sh "$OUT/perf" "$B" >"$OUT/perf.log" 2>&1
    note "perf (${PERF_TABLES:-default tables}): rc=$? $(grep -hE '^# (Out of bounds|Avg ratio)' "$OUT"/perf/tables.txt 2>/dev/null | tr '\n' ' ')"
}
stage_hopper() {
    HOPPER_BUILD=$B timeout 400 bash tests/gpu/hopper_on_device.sh >"$OUT/hopper.log" 2>&1
    note "hopper GEMM: rc=$? $(tail -3 "$OUT/hopper.txt" 2>/dev/null | tr '\n' ' ')"
}
stage_compare() { # tag [VAR=value...]: bench/compare_on_device.sh into $OUT/compare-<tag>
    local tag=$1; shift
    mkdir -p "$OUT/compare-$tag"
    env "$@" OUT="$OUT/compare-$tag" COMMGEMM_LIB=$B/libcommgemm.so timeout 560 \
        bash bench/compare_on_device.sh >"$OUT/compare-$tag.log" 2>&1
    note "compare_torch $tag ($*): rc=$? $(grep -hE '^# wrong' "$OUT/compare-$tag"/compare*.txt 2>/dev/null | tr '\n' ' ')"
}
stage_sweep() { # tag [VAR=value...]: the p2p sweep (graphs, bf16 partials); later VAR=value override these
    stage_compare "$1" COMPARE_ARGS=--graph COMPARE_SWEEP=only "COMPARE_SWEEP_ARGS=--backends p2p" \
        COMMGEMM_PARTIAL_DTYPE=output COMPARE_SWEEP_TIMEOUT=${SWEEP_TIMEOUT:-240} "${@:2}"
}
stage_cublasmp_cases() {
    timeout 560 bash tests/cublasmp/run_on_device.sh >"$OUT/cublasmp-cases.log" 2>&1
    note "cublasmp cases: rc=$? $(tail -4 "$OUT/cublasmp-summary.txt" 2>/dev/null | tr '\n' ' ')"
}
# commgemm-bench on the p2p backend, bf16, AG and RS, a rank per GPU: out-file seconds bench-args...
bench_p2p() {
    local out=$1 secs=$2; shift 2
    timeout "$secs" "$B/tools/commgemm-run" -n $NGPU "$B/bench/commgemm-bench" --backend p2p --dtype bf16 \
        --op ag_gemm,gemm_rs "$@" >"$out" 2>&1
}
# The runs of a directory's rc.txt and the wrong values in bench outputs: "N of M runs ok; wrong: W".
runs_summary() {
    local d=$1; shift
    echo "$(grep -c '^rc=0' "$d/rc.txt") of $(wc -l <"$d/rc.txt") runs ok; wrong: $(cat "$@" | awk '$1 ~ /^(ag_gemm|gemm_rs|gemm_ar)$/ {w += $NF} END {print w+0}')"
}
# One line per bench row: file tag, op, shape, then the given columns (e.g. '$8, $13': time, ratio).
bench_rows() {
    local cols=$1 f; shift
    for f; do
        [ -f "$f" ] && awk -v t="$(basename "$f" .txt)" '$1 ~ /^(ag_gemm|gemm_rs|gemm_ar)$/ {print t, $1, $2"x"$3"x"$4, '"$cols"'}' "$f"
    done
}
stage_timeline() { # p2p step timelines of the PERFORMANCE shapes (bench/timeline_summary.py reads them)
    # TIMELINE_TAG names the folder (timeline-TAG), TIMELINE_SHAPES, TIMELINE_ALGOS and
    # TIMELINE_ARGS (more bench arguments) change what is traced.
    local d=$OUT/timeline${TIMELINE_TAG:+-$TIMELINE_TAG} sh algo
    mkdir -p "$d"
    for sh in ${TIMELINE_SHAPES:-16384x2048x8192 8192x4096x4096 16384x8192x2048}; do
        for algo in ${TIMELINE_ALGOS:-auto fused}; do # <prefix>.<op>.<algo>.r<rank>.json
            COMMGEMM_TIMELINE=$d/$sh COMMGEMM_DEBUG=INFO COMMGEMM_DEBUG_SUBSYS=P2P \
                bench_p2p "$d/$sh.$algo.txt" 120 --shapes $sh --algo $algo -w 3 -i 2 ${TIMELINE_ARGS:-}
        done
    done
    python3 bench/timeline_summary.py "$d"/*.json >"$d/summary.md" 2>&1
    note "timeline${TIMELINE_TAG:+ $TIMELINE_TAG}: $(ls "$d"/*.json 2>/dev/null | wc -l) traces; bench/timeline_summary.py: $(basename "$d")/summary.md"
    grep -E 'r0.json' "$d/summary.md" | head -12
}
stage_fused_splits() { # fused AG/RS per piece count, graphs and eager, split beside it (bf16 partials)
    local d=$OUT/fused-splits${FUSED_TAG:+-$FUSED_TAG} sh=${FUSED_SHAPES:-16384x2048x8192,8192x4096x4096,16384x8192x2048} run
    mkdir -p "$d"
    run() { # tag, bench args...
        local tag=$1; shift
        COMMGEMM_PARTIAL_DTYPE=output bench_p2p "$d/$tag.txt" 150 --shapes "$sh" -w 5 -i 20 "$@"
        echo "rc=$? $tag" >>"$d/rc.txt"
    }
    for s in 1 2 4 8; do run fused-s$s-graph --algo fused --splits $s --graph; done
    run fused-s2-eager --algo fused --splits 2
    if [ "${FUSED_BASELINES:-1}" = 1 ]; then # FUSED_BASELINES=0: fused only
        run split-graph --algo split --graph
        run auto-graph --graph
    fi
    note "fused-splits: $(runs_summary "$d" "$d"/*.txt)"
    bench_rows '$8, $13' "$d"/f*.txt "$d"/[as]*.txt
}
stage_algos() { # one op, every algorithm and split count (ALGOS_LIST: algo:splits; graphs, bf16 partials), the tuner's log for auto
    local d=$OUT/algos${ALGOS_TAG:+-$ALGOS_TAG} sh=${ALGOS_SHAPES:-4096x4096x4096,16384x4096x4096,8192x14336x4096} e algo s
    mkdir -p "$d"
    for e in ${ALGOS_LIST:-split:1 split:2 split:4 fused:2 fused:4 fused:8 auto:0}; do
        algo=${e%%:*} s=${e#*:}
        COMMGEMM_PARTIAL_DTYPE=output COMMGEMM_DEBUG=INFO COMMGEMM_DEBUG_SUBSYS=TUNE bench_p2p "$d/$algo-$s.txt" 150 \
            --shapes "$sh" --op "${ALGOS_OP:-gemm_rs}" -w 5 -i 20 --graph --algo "$algo" --splits "$s"
        echo "rc=$? $algo-$s" >>"$d/rc.txt"
    done
    note "algos (${ALGOS_OP:-gemm_rs}): $(runs_summary "$d" "$d"/*.txt)"
    bench_rows '$8, $13' "$d"/*.txt | sort -k2,3 -s
    grep -h "tune .*->" "$d"/auto-0.txt | head -12
}
stage_comm_alone() { # the p2p backend's collectives alone (--comm-baseline library): comm_us of its pushes without a GEMM beside, and eager traces
    local d=$OUT/comm-alone sh=${COMMALONE_SHAPES:-16384x2048x8192,8192x4096x4096,16384x8192x2048,4096x4096x4096}
    mkdir -p "$d"
    COMMGEMM_PARTIAL_DTYPE=output bench_p2p "$d/graph.txt" 150 --shapes "$sh" -w 5 -i 20 --graph --comm-baseline library
    echo "rc=$? graph" >>"$d/rc.txt"
    COMMGEMM_PARTIAL_DTYPE=output COMMGEMM_TIMELINE=$d/trace bench_p2p "$d/trace.txt" 120 \
        --shapes 8192x4096x4096 -w 3 -i 2 --comm-baseline library
    echo "rc=$? trace" >>"$d/rc.txt"
    python3 bench/timeline_summary.py "$d"/*.json >"$d/summary.md" 2>&1
    note "comm-alone (--comm-baseline library, bf16 partials): $(runs_summary "$d" "$d"/*.txt); comm_us = p2p's own collective"
    bench_rows '$8, $11, $13' "$d"/graph.txt
}
stage_copybench() { # peer copy rates: one way, both ways, streams, pieces, where the signal runs, beside a GEMM or a memset
    timeout 200 "$B/tests/gpu/copybench" ${COPYBENCH_MIB:-128} 15 >"$OUT/copybench.txt" 2>&1
    note "copybench: rc=$? (copybench.txt)"
    cat "$OUT/copybench.txt"
}
stage_ipcbench() { # peer copies between two processes: legacy IPC against VMM fds, push/pull, rows, priority, offset
    local mib
    for mib in ${IPCBENCH_MIB:-32 128}; do
        timeout 120 "$B/tests/gpu/ipcbench" "$mib" 21 >"$OUT/ipcbench-$mib.txt" 2>&1
        note "ipcbench $mib MiB: rc=$? (ipcbench-$mib.txt)"
        cat "$OUT/ipcbench-$mib.txt"
    done
}
stage_gemmbeside() { # the split GEMM+RS's GEMM pieces: whole, pieces, ideal-wait skeleton, beside a copy flood; SM clocks and power sampled
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 100 >"$OUT/gemmbeside-smi.csv" 2>&1 &
    local smi=$!
    timeout 200 "$B/tests/gpu/gemmbeside" ${GEMMBESIDE_ROUNDS:-9} ${GEMMBESIDE_SHAPES:-} >"$OUT/gemmbeside.txt" 2>&1
    note "gemmbeside: rc=$? (gemmbeside.txt, gemmbeside-smi.csv)"
    kill $smi 2>/dev/null
    cat "$OUT/gemmbeside.txt"
}
stage_addend_bench() { # an epilogue addend: cuBLASLt's C against cgm_hgemm's addends (test_hopper_gemm addendbench), COMMGEMM_LT_SEARCH 8 and 16
    local v
    for v in ${ADDEND_SEARCH:-8 16}; do
        COMMGEMM_LT_SEARCH=$v timeout 150 "$B/tests/gpu/test_hopper_gemm" addendbench ${ADDEND_SHAPES:-} >"$OUT/addendbench-search$v.txt" 2>&1
        note "addendbench (COMMGEMM_LT_SEARCH=$v): rc=$? (addendbench-search$v.txt)"
        cat "$OUT/addendbench-search$v.txt"
    done
}
stage_small() { # the latency-bound shapes: each algorithm, the tuner's search (TUNE log), eager step traces
    local d=$OUT/small sh=${SMALL_SHAPES:-1024x1024x1024,2048x2048x2048,1024x4096x4096,1024x28672x8192} a
    mkdir -p "$d"
    for a in auto split no_overlap fused; do
        COMMGEMM_PARTIAL_DTYPE=output COMMGEMM_DEBUG=INFO COMMGEMM_DEBUG_SUBSYS=TUNE \
            bench_p2p "$d/$a-graph.txt" 120 --shapes "$sh" -w 5 -i 20 --graph --algo $a
        echo "rc=$? $a" >>"$d/rc.txt"
        COMMGEMM_TIMELINE=$d/trace COMMGEMM_DEBUG=INFO COMMGEMM_DEBUG_SUBSYS=P2P \
            bench_p2p "$d/$a-trace.txt" 60 --shapes 2048x2048x2048 -w 3 -i 2 --algo $a
    done
    python3 bench/timeline_summary.py "$d"/*.json >"$d/timeline.md" 2>&1
    note "small shapes: $(runs_summary "$d" "$d"/*-graph.txt)"
    bench_rows '$8, $10, $11, $13' "$d"/*-graph.txt
    grep -hE "tune .*->" "$d"/auto-graph.txt | cut -c1-400 | head -20
    head -40 "$d/timeline.md"
}
# A/B of one environment variable in alternating processes: NAME VAR "VALUES" SHAPES ALGOS [bench args].
# Two rounds of each algorithm but auto (one), bf16 partials, graphs; rows "algo-value-rN op shape µs ratio".
stage_hopper_ab() { # the kernel bench, this tree against HOPPER_AB_BASE (another source tree), alternating, two rounds
    local base=${HOPPER_AB_BASE:?HOPPER_AB_BASE: a source tree to compare with} bb r
    bb=$base/build-ab
    (cd "$base" && cmake -S . -B "$bb" -G Ninja "${args[@]}" >"$OUT/hopper-ab-configure.log" 2>&1 &&
        cmake --build "$bb" --target test_hopper_gemm -j16 >"$OUT/hopper-ab-build.log" 2>&1) ||
        { note "hopper-ab: the base build FAILED"; tail -20 "$OUT/hopper-ab-build.log"; return 1; }
    local sub
    for sub in ${HOPPER_AB_BENCHES:-bench}; do # test_hopper_gemm benches: bench, fusedbench, addendbench
        local f=hopper-ab; [ "$sub" = bench ] || f=hopper-ab-$sub
        for r in 1 2; do
            timeout 120 "$bb/tests/gpu/test_hopper_gemm" $sub >"$OUT/$f-base-r$r.txt" 2>&1
            timeout 120 "$B/tests/gpu/test_hopper_gemm" $sub >"$OUT/$f-tree-r$r.txt" 2>&1
        done
        note "$f: $(grep -cE '^ +[0-9]' "$OUT/$f-tree-r1.txt") rows per run ($f-{base,tree}-r{1,2}.txt)"
        for r in base-r1 base-r2 tree-r1 tree-r2; do echo "# $f-$r"; grep -hE '^ +[0-9]' "$OUT/$f-$r.txt"; done | head -44
    done
}
stage_ab() {
    local name=$1 var=$2 values=$3 sh=$4 algos=$5 d=$OUT/$1 v a r
    shift 5
    mkdir -p "$d"
    for r in 1 2; do
        for a in $algos; do
            [ $r = 2 ] && [ $a = auto ] && continue
            for v in $values; do
                (export "$var=$v" COMMGEMM_PARTIAL_DTYPE=${AB_PARTIAL_DTYPE:-output}
                 bench_p2p "$d/$a-$v-r$r.txt" 100 --shapes "$sh" -w 5 -i 20 --graph --algo $a "$@")
                echo "rc=$? $a-$v-r$r" >>"$d/rc.txt"
            done
        done
    done
    note "$name ($var: $values): $(runs_summary "$d" "$d"/*-r?.txt)"
    bench_rows '$8, $13' "$d"/*-r?.txt | sort -k2,3 -s
}
stage_lt_algos() { # cuBLASLt heuristic picks against the others and cublasGemmEx, one process per GPU
    local cu=${CUDA_HOME:-/usr/local/cuda} g pids=()
    gcc -std=c11 -O2 -Wall -Wextra -Werror -I"$cu/include" bench/lt_algos.c -L"$cu/lib64" \
        -lcublasLt -lcublas -lcudart -o "$B/lt_algos" >"$OUT/lt-algos-build.log" 2>&1 || { note "lt-algos: build FAILED"; return 1; }
    for ((g = 0; g < NGPU; g++)); do
        CUDA_VISIBLE_DEVICES=$g timeout 240 "$B/lt_algos" ${LT_SHAPES:-4096x28672x8192 2048x28672x8192 \
            32768x28672x8192 16384x28672x8192 4096x8192x28672 2048x8192x28672 8192x4096x4096 4096x4096x4096 \
            16384x2048x8192 8192x2048x8192 16384x8192x2048 8192x8192x2048 16384x2048x4096 8192x4096x2048 \
            16384x8192x1024 2048x2048x2048} >"$OUT/lt-algos-gpu$g.txt" 2>&1 &
        pids+=($!)
    done
    local rc=0 p
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    note "lt-algos: rc=$rc; GPU0: $(grep -c '^shape' "$OUT/lt-algos-gpu0.txt") shapes"
    grep -h '^shape' "$OUT"/lt-algos-gpu*.txt
}
stage_pack() { # the device returns few files: everything but the top summary into one tarball
    local t=/tmp/commgemm-logs.tar.gz
    tar -C "$OUT" --exclude=./summary.txt -czf $t . || { note "pack: tar FAILED"; return 1; }
    # Files first, then the directories they leave empty (a nested summary.txt
    # once kept its directory, the delete failed and the tarball stayed in /tmp).
    find "$OUT" -mindepth 1 -type f ! -path "$OUT/summary.txt" -delete
    find "$OUT" -mindepth 1 -type d -empty -delete
    mv $t "$OUT/"
}

for s in "$@"; do
    case $s in
    build) stage_build ;; gpu) stage_gpu ;; nccl-net) stage_nccl_net ;; cublasmp) stage_cublasmp ;;
    sanitize) stage_sanitize ;; torch) stage_torch ;; jax) stage_jax ;; perf) stage_perf ;; hopper) stage_hopper ;;
    compare) stage_compare eager ;;
    compare-graph) stage_compare graph COMPARE_ARGS=--graph ;;
    compare-graph-outpartial) stage_compare graph-outpartial COMPARE_ARGS=--graph COMMGEMM_PARTIAL_DTYPE=output ;;
    compare-graph-outpartial-aligned) stage_compare graph-outpartial-aligned "COMPARE_ARGS=--graph --pad-us 300 --align" \
        COMMGEMM_PARTIAL_DTYPE=output ;;
    compare-contested) for a in plain aligned; do # the rows that flipped between sweeps, 40 rounds, without and with --align
        stage_compare contested-$a "COMPARE_ARGS=--graph $([ $a = aligned ] && echo --pad-us 300 --align) --backends p2p -i 40 --shapes ${CONTESTED_SHAPES:-1024x1024x1024,2048x2048x2048,1024x4096x4096,16384x8192x2048,16384x28672x8192,32768x28672x8192}" \
            COMMGEMM_PARTIAL_DTYPE=output; done ;;
    compare-sweep-aligned) stage_sweep sweep-aligned "COMPARE_ARGS=--graph --pad-us 300 --align" ;;
    compare-sweep) stage_sweep sweep ;;
    compare-sweep-aligned) stage_sweep sweep-aligned "COMPARE_ARGS=--graph --pad-us 300 --align" ;;
    sanitize-cases) stage_sanitize_cases ;; shared) stage_shared ;;
    hopper-bench) (timeout 120 "$B/tests/gpu/test_hopper_gemm" bench >"$OUT/hopper-bench.txt" 2>&1)
        note "hopper bench: rc=$? $(grep -cE '^ +[0-9]' "$OUT/hopper-bench.txt") rows" ;; cublasmp-cases) stage_cublasmp_cases ;; pack) stage_pack ;;
    single-bench) timeout 150 "$B/tests/gpu/test_hopper_gemm" singlebench ${SINGLE_SHAPES:-} >"$OUT/singlebench.txt" 2>&1
        note "singlebench: rc=$? (singlebench.txt)"; cat "$OUT/singlebench.txt" ;;
    timeline) stage_timeline ;; lt-algos) stage_lt_algos ;; hopper-ab) stage_hopper_ab ;;
    comm-alone) stage_comm_alone ;;
    gpu-some) (cd "$B" && ctest -L gpu -R "${GPU_TESTS:?GPU_TESTS: a ctest -R regex}" --timeout 300 --output-on-failure) >"$OUT/gpu-some.log" 2>&1
        note "gpu-some (-R $GPU_TESTS): $(grep -E 'tests passed' "$OUT/gpu-some.log" ||
            echo "ctest ran nothing${BUILD_TARGETS:+ (BUILD_TARGETS=$BUILD_TARGETS: ctest needs every test binary)}")"
        grep -E "Failed|\(Skipped\)|^FAIL" "$OUT/gpu-some.log" | head -20 ;;
    lt-search) stage_ab lt-search COMMGEMM_LT_SEARCH "1 8" \
        "${LTSEARCH_SHAPES:-16384x8192x2048,8192x4096x4096,16384x2048x8192,4096x28672x8192,1024x8192x28672,2048x2048x2048}" "split auto" ;;
    small) stage_small ;;
    max-conn) stage_ab max-conn CUDA_DEVICE_MAX_CONNECTIONS "8 32" \
        "${SMPUSH_SHAPES:-2048x2048x2048,16384x2048x8192,8192x4096x4096,4096x28672x8192}" "split" ;;
    fused) stage_fused ;; sanitize-fused) stage_sanitize_fused ;; fused-splits) stage_fused_splits ;; algos) stage_algos ;; copybench) stage_copybench ;; gemmbeside) stage_gemmbeside ;; addend-bench) stage_addend_bench ;; ipcbench) stage_ipcbench ;;
    compare-fused) stage_compare fused "COMPARE_ARGS=--graph --backends p2p,p2p-fused,p2p-split" ;;
    compare-fused-outpartial) stage_compare fused-outpartial "COMPARE_ARGS=--graph --ops gemm_rs --backends p2p,p2p-fused,p2p-split" \
        COMMGEMM_PARTIAL_DTYPE=output ;;
    *) echo "unknown stage $s"; exit 2 ;;
    esac
done
printf '%s\n' "${summary[@]}"
