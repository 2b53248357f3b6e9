// The epilogues' pointwise math on the device (commgemm.h "Epilogues"):
// the tanh form of GELU and its derivative in fp32, as the host
// reference (host_epilogue.c) computes them.
#ifndef COMMGEMM_DEVICE_EPILOGUE_CUH
#define COMMGEMM_DEVICE_EPILOGUE_CUH

// cgm_epilogue's values (device code does not include commgemm.h).
#define CGM_DEV_EPI_GELU 1
#define CGM_DEV_EPI_GELU_AUX 2
#define CGM_DEV_EPI_DGELU 3
#define CGM_DEV_EPI_DGELU_BGRAD 4

#define CGM_DEV_GELU_C 0.7978845608028654f /* sqrt(2 / pi) */
#define CGM_DEV_GELU_A 0.044715f

__device__ __forceinline__ float cgm_dev_gelu(float t) {
    return 0.5f * t *
           (1.0f + tanhf(CGM_DEV_GELU_C * (t + CGM_DEV_GELU_A * t * t * t)));
}

// 0.5 (1 + th) + 0.5 t (1 - th^2) c (1 + 3 a t^2); the second term is 0
// where th is +-1 (not 0 * inf for a huge t).
__device__ __forceinline__ float cgm_dev_dgelu(float t) {
    float th = tanhf(CGM_DEV_GELU_C * (t + CGM_DEV_GELU_A * t * t * t));
    float sech2 = 1.0f - th * th;
    float slope = sech2 == 0.0f ? 0.0f
                                : 0.5f * t * sech2 * CGM_DEV_GELU_C *
                                      (1.0f + 3.0f * CGM_DEV_GELU_A * t * t);
    return 0.5f * (1.0f + th) + slope;
}

#endif
