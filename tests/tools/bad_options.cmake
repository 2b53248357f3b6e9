# commgemm-bench must reject each bad option with exit code 2 and a message
# naming the option, before starting any rank.  -DBENCH=path
set(cases
  "--dtype|fp64" "--dtype: expected fp32, bf16, fp16 or fp8, got 'fp64'"
  "--scaling|row" "--scaling: expected tensor or block, got 'row'"
  "--scaling|block" "--scaling block: scales are for --dtype fp8, got --dtype fp32"
  "--dtype|fp8|--layout|NN" "--layout NN with --dtype fp8: fp8 takes layout TN only"
  "--op|foo" "--op: expected ag_gemm"
  "-m|0" "-m: expected a size >= 1"
  "-m|10:5" "-m: expected a size"
  "-k|8:1024:1" "-k: expected a size"
  "-n|abc" "-n: expected"
  "--layout|XY" "--layout: expected TN, NN or NT"
  "--backend|gpu" "--backend: expected auto, host, p2p, nccl or cublasmp"
  "--algo|bulk" "--algo: expected auto, split, ring, no_overlap or fused"
  "--algo|lead" "--algo: expected auto, split, ring, no_overlap or fused"
  "--iters|0" "--iters: expected an integer from 1"
  "--ranks|-3" "--ranks: expected an integer from 1 to 1024 or auto, got '-3'"
  "--timeout-ms|soon" "--timeout-ms: expected"
  "--bogus" "unknown option '--bogus'"
  "--json" "option '--json' needs a value"
  "extra" "unexpected argument 'extra'"
  "--shapes|64x32" "--shapes: expected MxNxK"
  "--shapes|64x32x0" "--shapes: expected MxNxK"
  "--comm-baseline|nccl" "--comm-baseline: expected env or library, got 'nccl'")
list(LENGTH cases n)
math(EXPR last "${n} - 1")
set(failures "")
foreach(i RANGE 0 ${last} 2)
  math(EXPR j "${i} + 1")
  list(GET cases ${i} args)
  list(GET cases ${j} want)
  string(REPLACE "|" ";" argv "${args}")
  execute_process(COMMAND ${BENCH} ${argv} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err TIMEOUT 20)
  string(FIND "${err}" "${want}" at)
  if(NOT rc EQUAL 2 OR at EQUAL -1)
    string(APPEND failures "  commgemm-bench ${argv}: exit ${rc}, stderr: ${err}\n")
  else()
    message("ok: commgemm-bench ${argv} -> ${err}")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "bad options not rejected as expected:\n${failures}")
endif()
