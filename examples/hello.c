/* Hello, commgemm: one all-gather + GEMM on the host backend, on every rank,
 * checked against a plain loop.
 *
 *   cc -std=c11 examples/hello.c $(pkg-config --cflags --libs commgemm) -o hello
 *   commgemm-run -n 2 ./hello
 *
 * Y[m, n] = allgather(X_r) . W^T: rank r gives its m_r = cgm_shard_rows(m,
 * r, P) rows of X [m, k] and its own weight shard W [n, k] (in a
 * column-parallel layer, its n output features of the full weight); every
 * rank gets all m rows of its Y. config.max_m caps m (the comm's workspaces
 * are sized from max_m, max_n and max_k).
 */
#include <commgemm.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Prints what failed with the library's own detail (what it expected, what
 * it found, what to do) and returns the exit status. */
static int fail(const char *what, cgm_status status) {
    const char *detail = cgm_last_error();
    fprintf(stderr, "hello: %s failed: %s\n", what, detail && *detail ? detail : cgm_status_string(status));
    return 1;
}

/* Element (i, j) of the full X: every rank can compute any row of it. */
static float x_at(int64_t i, int64_t j) { return (float)((i * 7 + j * 3) % 11) - 5.0f; }

int main(void) {
    const int64_t m = 100, n = 48, k = 64; /* any sizes: uneven shards are fine */

    /* Ranks from the launcher: commgemm-run, torchrun or mpirun. */
    cgm_bootstrap boot = CGM_BOOTSTRAP_INIT;
    cgm_status status = cgm_bootstrap_from_env(&boot);
    if (status != CGM_SUCCESS) return fail("cgm_bootstrap_from_env", status);

    cgm_config config = CGM_CONFIG_INIT; /* unset fields: the environment, then the default */
    config.backend = CGM_BACKEND_HOST;   /* CPU: ops run with a NULL stream, done on return */
    config.max_m = m;                    /* largest m of any call */
    config.max_n = n;
    config.max_k = k;
    cgm_comm *comm = NULL;
    status = cgm_comm_create(&boot, &config, &comm);
    if (status != CGM_SUCCESS) return fail("cgm_comm_create", status);
    int rank = 0, nranks = 1;
    cgm_comm_rank(comm, &rank);
    cgm_comm_size(comm, &nranks);

    /* This rank's rows of X, its weight shard, and the full output. */
    int64_t m_r = cgm_shard_rows(m, rank, nranks), first = cgm_shard_offset(m, rank, nranks);
    float *x_r = malloc(sizeof(float) * (size_t)(m_r > 0 ? m_r : 1) * (size_t)k);
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    float *y = malloc(sizeof(float) * (size_t)(m * n));
    int exit_code = 1;
    if (!x_r || !w || !y) {
        fprintf(stderr, "hello: out of host memory\n");
        goto done;
    }
    for (int64_t i = 0; i < m_r; i++)
        for (int64_t j = 0; j < k; j++) x_r[i * k + j] = x_at(first + i, j);
    for (int64_t i = 0; i < n * k; i++) w[i] = (float)((i + rank) % 5) - 2.0f; /* differs per rank */

    cgm_matrix X = cgm_matrix_make(x_r, CGM_DTYPE_FP32, m_r, k);
    cgm_matrix W = cgm_matrix_make(w, CGM_DTYPE_FP32, n, k);
    cgm_matrix Y = cgm_matrix_make(y, CGM_DTYPE_FP32, m, n);
    status = cgm_all_gather_gemm(comm, &X, &W, NULL, &Y, NULL, NULL, NULL);
    if (status != CGM_SUCCESS) {
        fail("cgm_all_gather_gemm", status);
        goto done;
    }
    double worst = 0; /* against Y = X . W^T over the full X */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double want = 0;
            for (int64_t l = 0; l < k; l++) want += (double)x_at(i, l) * w[j * k + l];
            worst = fmax(worst, fabs(y[i * n + j] - want));
        }
    exit_code = worst <= 1e-3 ? 0 : 1;
    printf("rank %d/%d: Y [%lld x %lld] = allgather(X_r [%lld x %lld]) . W^T: max error %g: %s\n", rank, nranks,
           (long long)m, (long long)n, (long long)m_r, (long long)k, worst, exit_code == 0 ? "OK" : "WRONG");
done:
    free(x_r);
    free(w);
    free(y);
    status = cgm_comm_destroy(comm); /* collective, like the create */
    if (status != CGM_SUCCESS) exit_code = fail("cgm_comm_destroy", status);
    return exit_code;
}
