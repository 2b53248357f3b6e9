/* GELU's tanh form and its derivative in double, from their formulas
 * (commgemm.h "Epilogues"), for the epilogue tests' references (the host
 * backend's and the GPU backends'). */
#ifndef COMMGEMM_TEST_GELU_H
#define COMMGEMM_TEST_GELU_H

#include <math.h>

static inline double ref_gelu(double t) {
    const double c = sqrt(2.0 / M_PI);
    return 0.5 * t * (1.0 + tanh(c * (t + 0.044715 * t * t * t)));
}

static inline double ref_dgelu(double t) {
    const double c = sqrt(2.0 / M_PI);
    double th = tanh(c * (t + 0.044715 * t * t * t));
    return 0.5 * (1.0 + th) + 0.5 * t * (1.0 - th * th) * c * (1.0 + 3.0 * 0.044715 * t * t);
}

#endif
