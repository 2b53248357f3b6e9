# GPU tests of the nccl backend (included from tests/gpu/CMakeLists.txt).
commgemm_add_test(test_gpu_nccl SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_nccl.c
  ${CMAKE_CURRENT_LIST_DIR}/test_gpu_nccl_cases.c
  LABELS gpu LIBS commgemm_test_gpu_ref CUDA::cudart commgemm_nccl)
# The nccl backend's fp8 calls (every op, both recipes) against a host reference.
commgemm_add_test(test_gpu_nccl_fp8 SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_nccl_fp8.c
  ${CMAKE_CURRENT_LIST_DIR}/test_gpu_nccl.c ${CMAKE_CURRENT_LIST_DIR}/fp8_cases.c
  LABELS gpu LIBS commgemm_test_gpu_ref CUDA::cudart commgemm_nccl)
# The nccl backend's epilogues (every op, every epilogue, bf16/fp16/fp32) against a host reference.
commgemm_add_test(test_gpu_nccl_epilogue SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpu_nccl_epilogue.c
  ${CMAKE_CURRENT_LIST_DIR}/test_gpu_nccl.c ${CMAKE_CURRENT_LIST_DIR}/epi_cases.c
  LABELS gpu LIBS commgemm_test_gpu_ref CUDA::cudart commgemm_nccl)
