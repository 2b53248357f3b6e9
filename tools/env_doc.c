/* Prints docs/env.md: the library's parameters from its one table
 * (src/core/param.c), then the variables read outside the library (the
 * Python package, tests, benches, scripts) and other programs' variables
 * that commgemm reads, from the table below. The test docs.env_md_current
 * fails when the checked-in file is stale (regenerate it with
 * `build/tools/commgemm-env-doc > docs/env.md`); docs.env_md_complete fails
 * when a file of the repository reads a variable that is in neither table. */
#include <stdio.h>

#include "core/core.h"

typedef struct outside_var {
    const char *name;
    const char *reader; /* who reads it */
    const char *help;
} outside_var;

/* Read by the Python package (a user's setting). */
static const outside_var python_vars[] = {
    {"COMMGEMM_LIB", "python/commgemm", "Path of libcommgemm.so; unset: the package's own copy, the repository's build trees, then the system loader."},
    {"COMMGEMM_CUDA", "pip install ./python", "ON: build the GPU backends even where nvidia-smi lists no GPU; OFF: never; unset: where it lists one."},
};

/* Tests, benches and scripts only. */
static const outside_var test_vars[] = {
    {"COMMGEMM_TEST_RANKS", "tests/gpu", "Ranks of the multi-rank GPU tests (default: one per GPU); more ranks than GPUs share them (correctness only)."},
    {"COMMGEMM_TEST_BOOTSTRAP", "tests/gpu", "local: the GPU tests create p2p comms from a LOCAL bootstrap instead of an NCCL one."},
    {"COMMGEMM_TEST_RUNS", "tests/gpu", "Runs of an op case to run, e.g. 24-27,36 (default all)."},
    {"COMMGEMM_TEST_REQUIRE_CUBLASMP", "tests/cublasmp", "Set: a missing cuBLASMp fails the cuBLASMp GPU tests instead of skipping them."},
    {"TEST_TIMEOUT_SCALE", "tests/harness", "Multiplies every test case's timeout and the comms' timeouts (e.g. 10 under compute-sanitizer)."},
    {"COMMGEMM_SKIP_TORCH", "scripts/test.sh", "1: do not install torch for the Python tests (they skip)."},
    {"COMMGEMM_SKIP_SANITIZE", "scripts/test.sh", "1: skip the ASan + UBSan build and run of the CPU tests."},
    {"BUILD", "scripts/gpu-suite.sh", "Build tree of the GPU suite (default build-gpu)."},
    {"OUT", "scripts/gpu-suite.sh", "Folder of the GPU suite's logs (default /tmp/commgemm-out)."},
    {"CMAKE_ARGS", "scripts/gpu-suite.sh", "More arguments for the suite's cmake configure."},
    {"SANITIZE_CASES", "scripts/gpu-suite.sh", "The sanitize stage's cases: binary[:case] ..."},
    {"SANITIZE_TIME_SCALE", "scripts/gpu-suite.sh", "TEST_TIMEOUT_SCALE of the sanitize stage."},
    {"BENCH_BACKENDS", "scripts/gpu-suite.sh", "Backends of the bench stage (default \"p2p nccl\")."},
    {"BENCH_ARGS", "scripts/gpu-suite.sh", "More commgemm-bench options of the bench stage."},
    {"COMPARE_ARGS", "scripts/gpu-suite.sh", "bench/compare_torch.py options of the compare stage."},
    {"AB_ROUNDS", "scripts/gpu-suite.sh", "Rounds of the ab helper (default 3)."},
    {"AB_SHOW", "scripts/gpu-suite.sh", "Regular expression of the output lines the ab helper prints."},
    {"COMPARE_TORCH_TRACEBACK", "bench/compare_torch.py", "Set: print the traceback of a candidate that failed."},
    {"JAX_TP_MLP_GPUS", "examples/jax_tp_mlp.py", "GPUs the example uses (default: every visible one)."},
    {"CUOBJDUMP", "tests/gpu/sass_same.py", "The cuobjdump to run (default: the one on PATH)."},
    {"NCCL_HOME", "cmake/Dependencies.cmake", "Where to look for nccl.h and libnccl when configuring."},
};

/* Other programs' variables that commgemm reads. */
static const outside_var foreign_vars[] = {
    {"RANK", "cgm_bootstrap_from_env", "torchrun's rank (with WORLD_SIZE)."},
    {"WORLD_SIZE", "cgm_bootstrap_from_env", "torchrun's number of ranks."},
    {"TORCHELASTIC_RUN_ID", "cgm_bootstrap_from_env", "torchrun's run id: part of the rendezvous name."},
    {"MASTER_ADDR", "cgm_bootstrap_from_env", "torchrun's rendezvous address: part of the rendezvous name without a run id."},
    {"MASTER_PORT", "cgm_bootstrap_from_env", "torchrun's rendezvous port: part of the rendezvous name."},
    {"LOCAL_RANK", "commgemm-bench, bench/compare_torch.py, examples, tests/python", "torchrun's rank on this machine: the GPU to use."},
    {"SLURM_LOCALID", "commgemm-bench", "Slurm's rank on this machine: the GPU to use."},
    {"OMPI_COMM_WORLD_RANK", "cgm_bootstrap_from_env", "Open MPI's rank (with OMPI_COMM_WORLD_SIZE)."},
    {"OMPI_COMM_WORLD_SIZE", "cgm_bootstrap_from_env", "Open MPI's number of ranks."},
    {"OMPI_COMM_WORLD_LOCAL_RANK", "commgemm-bench", "Open MPI's rank on this machine: the GPU to use."},
    {"OMPI_MCA_ess_base_jobid", "cgm_bootstrap_from_env", "Open MPI's job id: the rendezvous name (or PMIX_NAMESPACE, OMPI_MCA_orte_hnp_uri)."},
    {"PMIX_NAMESPACE", "cgm_bootstrap_from_env", "PMIx's job namespace: the rendezvous name under Open MPI 5."},
    {"OMPI_MCA_orte_hnp_uri", "cgm_bootstrap_from_env", "Open MPI 4's launcher address: the rendezvous name when no job id is set."},
    {"NCCL_NVLS_ENABLE", "nccl backend, tests, scripts", "NCCL's NVLink multicast switch: the tests and scripts set 0; the nccl backend logs when it is not 0."},
    {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "bench/compare_torch.py, scripts", "Set to 1 beside NCCL_NVLS_ENABLE=0: no multicast in PyTorch's fused ops either."},
    {"NVSHMEM_DISABLE_NVLS", "bench/compare_torch.py, scripts", "Set to 1 likewise for NVSHMEM."},
    {"CUDA_VISIBLE_DEVICES", "tests, examples", "The GPUs a process sees."},
    {"VIRTUAL_ENV", "cublasmp backend", "Where pip put cuBLASMp, searched when COMMGEMM_CUBLASMP_LIB is unset (so are CONDA_PREFIX, PYTHONPATH, HOME)."},
    {"CONDA_PREFIX", "cublasmp backend", "As VIRTUAL_ENV."},
    {"PYTHONPATH", "cublasmp backend, scripts", "As VIRTUAL_ENV; the scripts add carried packages to it."},
    {"HOME", "cublasmp backend", "~/.local is searched as VIRTUAL_ENV."},
    {"LD_LIBRARY_PATH", "scripts", "The GPU suite adds carried OpenBLAS and PyTorch's NCCL to it."},
    {"CUBLASMP_LOG_FILE", "tests/cublasmp", "cuBLASMp's own log file: the tests name one per rank."},
    {"JAX_PLATFORMS", "tests/python, scripts/test.sh", "cpu: JAX on the CPU (the host backend's JAX tests)."},
    {"XLA_PYTHON_CLIENT_PREALLOCATE", "tests/python, examples", "false: JAX does not take most of the GPU's memory at start."},
    {"OPENBLAS_NUM_THREADS", "commgemm-run, commgemm-bench", "OpenBLAS threads per GEMM (unset: one per core): counted by -n auto and the bench's oversubscription warning; -n auto sets 1 for the ranks when it and OMP_NUM_THREADS are unset."},
    {"OMP_NUM_THREADS", "commgemm-run, commgemm-bench", "Counted as OPENBLAS_NUM_THREADS when that is unset."},
};

static void outside_table(const char *title, const cgm_param *t, int count, const outside_var *v, size_t n) {
    printf("\n## %s\n\n| variable | read by | meaning |\n|---|---|---|\n", title);
    for (int i = 0; i < count; i++)
        if (t[i].section == CGM_PARAM_TESTING) printf("| `%s` | the library | %s |\n", t[i].name, t[i].help);
    for (size_t i = 0; i < n; i++) printf("| `%s` | %s | %s |\n", v[i].name, v[i].reader, v[i].help);
}

static void param_table(const cgm_param *t, int count, cgm_param_section section) {
    printf("| variable | type | default | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < count; i++)
        if (t[i].section == section)
            printf("| `%s` | %s | %s | %s |\n", t[i].name, t[i].type == CGM_PARAM_INT ? "integer" : "string",
                   t[i].default_value ? t[i].default_value : "(unset)", t[i].help);
}

int main(void) {
    int count = 0;
    const cgm_param *t = cgm_param_table(&count);
    printf("# Environment variables\n\n"
           "Generated by `commgemm-env-doc` from the library's parameter table (`src/core/param.c`)\n"
           "and the table of variables read outside the library (`tools/env_doc.c`); do not edit\n"
           "by hand. Every variable a file of this repository reads is listed (the test\n"
           "docs.env_md_complete checks it).\n\n"
           "## Settings\n\n"
           "The library reads them once, at first use, and caches them. A `cgm_config` field or\n"
           "per-call option that is set wins over its variable; an unset one falls back to the\n"
           "variable, then to the default. `COMMGEMM_DEBUG=INFO` logs every effective value and\n"
           "where it came from.\n\n");
    param_table(t, count, CGM_PARAM_SETTING);
    for (size_t i = 0; i < sizeof python_vars / sizeof python_vars[0]; i++)
        printf("| `%s` | string | (unset) | %s (%s) |\n", python_vars[i].name, python_vars[i].help,
               python_vars[i].reader);
    printf("\n## Set by commgemm-run\n\n"
           "`cgm_bootstrap_from_env` reads them (and torchrun's or Open MPI's, below).\n\n");
    param_table(t, count, CGM_PARAM_LAUNCHER);
    outside_table("Tests, benches and scripts only", t, count, test_vars, sizeof test_vars / sizeof test_vars[0]);
    outside_table("Other programs' variables that commgemm reads", t, 0, foreign_vars,
                  sizeof foreign_vars / sizeof foreign_vars[0]);
    return 0;
}
