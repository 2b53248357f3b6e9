/* Built against an installed commgemm (find_package and pkg-config): one
 * single-rank AG+GEMM on the host backend, checked. */
#include <commgemm.h>
#include <stdio.h>

int main(void) {
    char name[64];
    snprintf(name, sizeof name, "consumer-%d", cgm_version());
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.rank = 0;
    b.nranks = 1;
    b.rendezvous = name;
    cgm_comm *comm = NULL;
    if (cgm_comm_create(&b, NULL, &comm) != CGM_SUCCESS) {
        fprintf(stderr, "cgm_comm_create: %s\n", cgm_last_error());
        return 1;
    }
    float x[2 * 3] = {1, 2, 3, 4, 5, 6}, w[2 * 3] = {1, 0, 0, 0, 1, 0}, y[2 * 2] = {0};
    cgm_matrix X = cgm_matrix_make(x, CGM_DTYPE_FP32, 2, 3);
    cgm_matrix W = cgm_matrix_make(w, CGM_DTYPE_FP32, 2, 3);
    cgm_matrix Y = cgm_matrix_make(y, CGM_DTYPE_FP32, 2, 2);
    cgm_status st = cgm_all_gather_gemm(comm, &X, &W, NULL, &Y, NULL, NULL, NULL);
    cgm_comm_destroy(comm);
    if (st != CGM_SUCCESS || y[0] != 1 || y[1] != 2 || y[2] != 4 || y[3] != 5) {
        fprintf(stderr, "status %s, y = %g %g %g %g, expected 1 2 4 5\n", cgm_status_string(st), y[0], y[1],
                y[2], y[3]);
        return 1;
    }
    printf("consumer OK (commgemm %d)\n", cgm_version());
    return 0;
}
