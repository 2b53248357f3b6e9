// Device kernels of the GPU backends: epoch, signal, bounded wait, reduce.
// C-style CUDA; entry points are extern "C" (see device.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device/device.h"
#include "device/epilogue.cuh"
#include "device/fp8.h"
#include "device/flags.cuh"

namespace {

using cgm_flags::global_timer_ns;
using cgm_flags::load_acquire_sys;
using cgm_flags::store_release_sys;

/* The comm aborted: a wait of this rank expired, or a peer's notice came
 * (the first kernel to see it records it). */
__device__ __forceinline__ bool aborted(const cgm_dev_state *state) {
    if (*(volatile const unsigned int *)&state->abort != 0) return true;
    cgm_dev_state *s = const_cast<cgm_dev_state *>(state);
    return cgm_flags::notice_raised(&s->notice, &s->abort, s->record, s->rank);
}

/* Holds its stream for `ns` nanoseconds of device time (the autotuner's
 * head start: cgm_dev_hold). */
__global__ void hold_kernel(unsigned long long ns) {
    unsigned long long start = global_timer_ns();
    while (global_timer_ns() - start < ns) __nanosleep(1000);
}

__global__ void epoch_bump_kernel(cgm_dev_state *state) {
    state->epoch = state->epoch + 1;
    __threadfence();
}

__global__ void signal_kernel(const cgm_dev_state *state,
                              unsigned long long *remote_flag) {
    if (aborted(state)) return;
    unsigned long long epoch =
        *(volatile const unsigned long long *)&state->epoch;
    __threadfence_system();
    store_release_sys(remote_flag, epoch);
}

/* Spins until *flag >= epoch: true. False when the comm aborted, or when
 * timeout_ns passed (then the first expiry of the comm records who never
 * came and raises the abort word). One thread. */
__device__ bool bounded_wait(cgm_dev_state *state, const unsigned long long *flag,
                             cgm_dev_abort_record *record, int rank, int peer,
                             int flag_kind, int chunk, unsigned long long epoch,
                             unsigned long long timeout_ns) {
    unsigned long long start = global_timer_ns();
    for (;;) {
        unsigned long long v = load_acquire_sys(flag);
        if (v >= epoch) return true;
        if (aborted(state)) return false;
        unsigned long long now = global_timer_ns();
        if (now - start > timeout_ns) {
            cgm_flags::record_expiry(&state->abort, record,
                                     {rank, peer, flag_kind, chunk, epoch, v,
                                      now - start});
            return false;
        }
        __nanosleep(200);
    }
}

__global__ void wait_kernel(cgm_dev_state *state,
                            const unsigned long long *flag,
                            cgm_dev_abort_record *record, int rank, int peer,
                            int flag_kind, int chunk,
                            unsigned long long timeout_ns) {
    if (aborted(state)) return;
    unsigned long long epoch =
        *(volatile const unsigned long long *)&state->epoch;
    bounded_wait(state, flag, record, rank, peer, flag_kind, chunk, epoch,
                 timeout_ns);
}

/* cgm_dev_program_run: the ops in order, by one thread. A WAIT spins
 * (bounded, as wait_kernel); a SIGNAL stores the epoch after a
 * system-scope fence, so the peer that sees it sees what this rank's
 * earlier work on the stream wrote. */
__global__ void program_kernel(const __grid_constant__ cgm_dev_program prog,
                               cgm_dev_state *state) {
    if (aborted(state)) return;
    const unsigned long long epoch =
        *(volatile const unsigned long long *)&state->epoch;
    for (int i = 0; i < prog.nops; i++) {
        const cgm_dev_program_op &op = prog.ops[i];
        if (op.kind == CGM_DEV_OP_WAIT) {
            if (!bounded_wait(state, op.flag, prog.record, prog.rank, op.peer,
                              op.flag_kind, op.chunk, epoch, prog.timeout_ns))
                return;
        } else {
            __threadfence_system();
            store_release_sys(op.flag, epoch);
        }
    }
}

template <typename T> struct io;
template <> struct io<float> {
    static __device__ __forceinline__ float load(const void *p, int64_t i) {
        return static_cast<const float *>(p)[i];
    }
    static __device__ __forceinline__ void store(void *p, int64_t i, float v) {
        static_cast<float *>(p)[i] = v;
    }
    static __device__ __forceinline__ void load4(const void *p, int64_t i,
                                                 float out[4]) {
        float4 v = *reinterpret_cast<const float4 *>(
            static_cast<const float *>(p) + i);
        out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    }
    static __device__ __forceinline__ void store4(void *p, int64_t i,
                                                  const float in[4]) {
        *reinterpret_cast<float4 *>(static_cast<float *>(p) + i) =
            make_float4(in[0], in[1], in[2], in[3]);
    }
};
template <> struct io<__nv_bfloat16> {
    static __device__ __forceinline__ float load(const void *p, int64_t i) {
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    }
    static __device__ __forceinline__ void store(void *p, int64_t i, float v) {
        static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
    }
    static __device__ __forceinline__ void load4(const void *p, int64_t i,
                                                 float out[4]) {
        uint2 raw = *reinterpret_cast<const uint2 *>(
            static_cast<const __nv_bfloat16 *>(p) + i);
        __nv_bfloat162 a = *reinterpret_cast<__nv_bfloat162 *>(&raw.x);
        __nv_bfloat162 b = *reinterpret_cast<__nv_bfloat162 *>(&raw.y);
        float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
        out[0] = fa.x; out[1] = fa.y; out[2] = fb.x; out[3] = fb.y;
    }
    static __device__ __forceinline__ void store4(void *p, int64_t i,
                                                  const float in[4]) {
        __nv_bfloat162 a = __floats2bfloat162_rn(in[0], in[1]);
        __nv_bfloat162 b = __floats2bfloat162_rn(in[2], in[3]);
        uint2 raw;
        raw.x = *reinterpret_cast<unsigned int *>(&a);
        raw.y = *reinterpret_cast<unsigned int *>(&b);
        *reinterpret_cast<uint2 *>(static_cast<__nv_bfloat16 *>(p) + i) = raw;
    }
};
template <> struct io<__half> {
    static __device__ __forceinline__ float load(const void *p, int64_t i) {
        return __half2float(static_cast<const __half *>(p)[i]);
    }
    static __device__ __forceinline__ void store(void *p, int64_t i, float v) {
        static_cast<__half *>(p)[i] = __float2half_rn(v);
    }
    static __device__ __forceinline__ void load4(const void *p, int64_t i,
                                                 float out[4]) {
        uint2 raw = *reinterpret_cast<const uint2 *>(
            static_cast<const __half *>(p) + i);
        __half2 a = *reinterpret_cast<__half2 *>(&raw.x);
        __half2 b = *reinterpret_cast<__half2 *>(&raw.y);
        float2 fa = __half22float2(a), fb = __half22float2(b);
        out[0] = fa.x; out[1] = fa.y; out[2] = fb.x; out[3] = fb.y;
    }
    static __device__ __forceinline__ void store4(void *p, int64_t i,
                                                  const float in[4]) {
        __half2 a = __floats2half2_rn(in[0], in[1]);
        __half2 b = __floats2half2_rn(in[2], in[3]);
        uint2 raw;
        raw.x = *reinterpret_cast<unsigned int *>(&a);
        raw.y = *reinterpret_cast<unsigned int *>(&b);
        *reinterpret_cast<uint2 *>(static_cast<__half *>(p) + i) = raw;
    }
};

// The epilogue of cgm_dev_reduce on the fp32 values acc (row, col ..
// col + VEC - 1), before the one rounding; aux is of D's dtype.
template <typename D, int VEC>
__device__ __forceinline__ void apply_epilogue(const cgm_dev_reduce_args &a,
                                               int64_t row, int64_t col,
                                               float acc[VEC]) {
    const int64_t base = row * a.aux_ld + col;
    for (int v = 0; v < VEC; v++) {
        if (a.epilogue == CGM_DEV_EPI_GELU_AUX)
            io<D>::store(a.aux, base + v, acc[v]);
        if (a.epilogue == CGM_DEV_EPI_GELU ||
            a.epilogue == CGM_DEV_EPI_GELU_AUX)
            acc[v] = cgm_dev_gelu(acc[v]);
        else
            acc[v] *= cgm_dev_dgelu(io<D>::load(a.aux, base + v));
    }
}

// DGELU_BGRAD's column sums (cgm_dev_epilogue_colsum): one thread per
// column, rows in order; the sources summed as reduce_kernel sums them.
template <typename S, typename D>
__global__ void colsum_kernel(const cgm_dev_reduce_args args, float *out,
                              const cgm_dev_state *state) {
    if (aborted(state)) return;
    const int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (col >= args.cols) return;
    float sum = 0.0f;
    for (int64_t row = 0; row < args.rows; row++) {
        float t = 0.0f;
        for (int s = 0; s < args.nsources; s++)
            t += io<S>::load(args.src[s], row * args.src_ld[s] + col);
        sum += t * cgm_dev_dgelu(io<D>::load(args.aux, row * args.aux_ld + col));
    }
    out[col] = sum;
}

// Slot s starts s * stride floats into slots and holds S values.
template <typename S, typename D>
__global__ void sum_slots_kernel(const float *slots, int nslots,
                                 int64_t stride, int64_t n, void *dst,
                                 const cgm_dev_state *state) {
    if (state && aborted(state)) return;
    const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= n) return;
    float sum = 0.0f;
    for (int s = 0; s < nslots; s++) sum += io<S>::load(slots + s * stride, j);
    io<D>::store(dst, j, sum);
}

// One block row per matrix row (grid-stride over rows), threads over
// columns, VEC consecutive columns per thread.
template <typename S, typename D, int VEC>
__global__ void reduce_kernel(const cgm_dev_reduce_args args,
                              const cgm_dev_state *state) {
    if (aborted(state)) return;
    const int64_t vec_cols = args.cols / VEC;
    for (int64_t row = blockIdx.y; row < args.rows; row += gridDim.y) {
        for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
             c < vec_cols; c += (int64_t)gridDim.x * blockDim.x) {
            const int64_t col = c * VEC;
            float acc[VEC];
            if (args.accumulate) {
                if (VEC == 4) {
                    io<D>::load4(args.dst, row * args.dst_ld + col, acc);
                } else {
                    for (int v = 0; v < VEC; v++)
                        acc[v] = io<D>::load(args.dst,
                                             row * args.dst_ld + col + v);
                }
            } else {
                for (int v = 0; v < VEC; v++) acc[v] = 0.0f;
            }
            for (int s = 0; s < args.nsources; s++) {
                float x[VEC];
                if (VEC == 4) {
                    io<S>::load4(args.src[s], row * args.src_ld[s] + col, x);
                } else {
                    for (int v = 0; v < VEC; v++)
                        x[v] = io<S>::load(args.src[s],
                                           row * args.src_ld[s] + col + v);
                }
                for (int v = 0; v < VEC; v++) acc[v] += x[v];
            }
            if (args.bias) {
                for (int v = 0; v < VEC; v++)
                    acc[v] += io<D>::load(args.bias, col + v);
            }
            if (args.epilogue) apply_epilogue<D, VEC>(args, row, col, acc);
            if (VEC == 4) {
                io<D>::store4(args.dst, row * args.dst_ld + col, acc);
            } else {
                for (int v = 0; v < VEC; v++)
                    io<D>::store(args.dst, row * args.dst_ld + col + v,
                                 acc[v]);
            }
        }
    }
}

template <typename S, typename D>
cudaError_t launch_reduce(const cgm_dev_reduce_args *a,
                          const cgm_dev_state *state, cudaStream_t stream,
                          bool vec4) {
    const int threads = 256;
    int64_t per_row = vec4 ? a->cols / 4 : a->cols;
    int64_t bx = (per_row + threads - 1) / threads;
    if (bx > 64) bx = 64;
    if (bx < 1) bx = 1;
    int64_t by = a->rows < 65535 ? a->rows : 65535;
    int64_t max_blocks = 132 * 16;
    if (bx * by > max_blocks) by = max_blocks / bx > 0 ? max_blocks / bx : 1;
    dim3 grid((unsigned)bx, (unsigned)by);
    if (vec4)
        reduce_kernel<S, D, 4><<<grid, threads, 0, stream>>>(*a, state);
    else
        reduce_kernel<S, D, 1><<<grid, threads, 0, stream>>>(*a, state);
    return cudaGetLastError();
}

template <typename S>
cudaError_t launch_reduce_dst(const cgm_dev_reduce_args *a,
                              const cgm_dev_state *state, cudaStream_t stream,
                              bool vec4) {
    switch (a->dst_dtype) {
    case 0: return launch_reduce<S, float>(a, state, stream, vec4);
    case 1: return launch_reduce<S, __nv_bfloat16>(a, state, stream, vec4);
    case 2: return launch_reduce<S, __half>(a, state, stream, vec4);
    default: return cudaErrorInvalidValue;
    }
}

bool aligned(const void *p, int64_t bytes) {
    return p == nullptr || (reinterpret_cast<uintptr_t>(p) % bytes) == 0;
}

}  // namespace

namespace {

template <typename F> cudaError_t load(F *kernel) {
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, kernel);
}

template <typename S, typename D> cudaError_t load_reduce() {
    cudaError_t e = load(reduce_kernel<S, D, 4>);
    if (e == cudaSuccess) e = load(colsum_kernel<S, D>);
    if (e == cudaSuccess) e = load(sum_slots_kernel<S, D>);
    return e != cudaSuccess ? e : load(reduce_kernel<S, D, 1>);
}

template <typename S> cudaError_t load_reduce_dst() {
    cudaError_t e = load_reduce<S, float>();
    if (e == cudaSuccess) e = load_reduce<S, __nv_bfloat16>();
    return e != cudaSuccess ? e : load_reduce<S, __half>();
}

}  // namespace

/* cudaFuncGetAttributes needs the loaded function, so it loads it. */
extern "C" cudaError_t cgm_dev_preload(void) {
    cudaError_t e = load(epoch_bump_kernel);
    if (e == cudaSuccess) e = load(signal_kernel);
    if (e == cudaSuccess) e = load(wait_kernel);
    if (e == cudaSuccess) e = load(hold_kernel);
    if (e == cudaSuccess) e = load(program_kernel);
    if (e == cudaSuccess) e = load_reduce_dst<float>();
    if (e == cudaSuccess) e = load_reduce_dst<__nv_bfloat16>();
    if (e == cudaSuccess) e = load_reduce_dst<__half>();
    if (e == cudaSuccess) e = cgm_dev_fp8_preload();
    return e;
}

extern "C" cudaError_t cgm_dev_epoch_bump(cgm_dev_state *state,
                                          cudaStream_t stream) {
    epoch_bump_kernel<<<1, 1, 0, stream>>>(state);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_hold(unsigned long long ns,
                                    cudaStream_t stream) {
    hold_kernel<<<1, 1, 0, stream>>>(ns);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_signal(const cgm_dev_state *state,
                                      unsigned long long *remote_flag,
                                      cudaStream_t stream) {
    signal_kernel<<<1, 1, 0, stream>>>(state, remote_flag);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_wait(cgm_dev_state *state,
                                    const unsigned long long *flag,
                                    cgm_dev_abort_record *record, int rank,
                                    int peer, int flag_kind, int chunk,
                                    unsigned long long timeout_ns,
                                    cudaStream_t stream) {
    wait_kernel<<<1, 1, 0, stream>>>(state, flag, record, rank, peer,
                                     flag_kind, chunk, timeout_ns);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_program_run(const cgm_dev_program *prog,
                                           cgm_dev_state *state,
                                           cudaStream_t stream) {
    if (prog->nops < 1 || prog->nops > CGM_DEV_PROGRAM_MAX)
        return cudaErrorInvalidValue;
    for (int i = 0; i < prog->nops; i++) {
        const cgm_dev_program_op *op = &prog->ops[i];
        if ((op->kind != CGM_DEV_OP_SIGNAL && op->kind != CGM_DEV_OP_WAIT) ||
            !op->flag)
            return cudaErrorInvalidValue;
    }
    program_kernel<<<1, 1, 0, stream>>>(*prog, state);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_reduce(const cgm_dev_reduce_args *a,
                                      const cgm_dev_state *state,
                                      cudaStream_t stream) {
    if (a->rows <= 0 || a->cols <= 0) return cudaSuccess;
    if (a->nsources < 0 || a->nsources > CGM_DEV_MAX_SOURCES)
        return cudaErrorInvalidValue;
    // Four columns per thread when every row start is 4-element aligned.
    bool vec4 = a->cols % 4 == 0 && a->dst_ld % 4 == 0;
    int64_t dst_es = a->dst_dtype == 0 ? 4 : 2;
    int64_t src_es = a->src_dtype == 0 ? 4 : 2;
    vec4 = vec4 && aligned(a->dst, 4 * dst_es) && aligned(a->bias, 4 * dst_es);
    for (int s = 0; s < a->nsources && vec4; s++)
        vec4 = a->src_ld[s] % 4 == 0 && aligned(a->src[s], 4 * src_es);
    switch (a->src_dtype) {
    case 0: return launch_reduce_dst<float>(a, state, stream, vec4);
    case 1: return launch_reduce_dst<__nv_bfloat16>(a, state, stream, vec4);
    case 2: return launch_reduce_dst<__half>(a, state, stream, vec4);
    default: return cudaErrorInvalidValue;
    }
}

namespace {

template <typename S, typename D>
cudaError_t launch_colsum(const cgm_dev_reduce_args *a, float *out,
                          const cgm_dev_state *state, cudaStream_t stream) {
    const int threads = 256;
    unsigned blocks = (unsigned)((a->cols + threads - 1) / threads);
    colsum_kernel<S, D><<<blocks, threads, 0, stream>>>(*a, out, state);
    return cudaGetLastError();
}

template <typename S>
cudaError_t launch_colsum_dst(const cgm_dev_reduce_args *a, float *out,
                              const cgm_dev_state *state,
                              cudaStream_t stream) {
    switch (a->dst_dtype) {
    case 0: return launch_colsum<S, float>(a, out, state, stream);
    case 1: return launch_colsum<S, __nv_bfloat16>(a, out, state, stream);
    case 2: return launch_colsum<S, __half>(a, out, state, stream);
    default: return cudaErrorInvalidValue;
    }
}

}  // namespace

extern "C" cudaError_t cgm_dev_epilogue_colsum(const cgm_dev_reduce_args *a,
                                               float *out,
                                               const cgm_dev_state *state,
                                               cudaStream_t stream) {
    if (a->cols <= 0) return cudaSuccess;
    if (a->nsources < 0 || a->nsources > CGM_DEV_MAX_SOURCES ||
        a->epilogue != CGM_DEV_EPI_DGELU_BGRAD || !a->aux || a->accumulate ||
        a->bias)
        return cudaErrorInvalidValue;
    switch (a->src_dtype) {
    case 0: return launch_colsum_dst<float>(a, out, state, stream);
    case 1: return launch_colsum_dst<__nv_bfloat16>(a, out, state, stream);
    case 2: return launch_colsum_dst<__half>(a, out, state, stream);
    default: return cudaErrorInvalidValue;
    }
}

namespace {
template <typename S>
cudaError_t launch_sum_slots(const float *slots, int nslots, int64_t stride, int64_t n, void *dst,
                             int dst_dtype, const cgm_dev_state *state, cudaStream_t stream) {
    const int threads = 256;
    unsigned blocks = (unsigned)((n + threads - 1) / threads);
    switch (dst_dtype) {
    case 0:
        sum_slots_kernel<S, float><<<blocks, threads, 0, stream>>>(slots, nslots, stride, n, dst, state);
        break;
    case 1:
        sum_slots_kernel<S, __nv_bfloat16><<<blocks, threads, 0, stream>>>(slots, nslots, stride, n, dst,
                                                                           state);
        break;
    case 2:
        sum_slots_kernel<S, __half><<<blocks, threads, 0, stream>>>(slots, nslots, stride, n, dst, state);
        break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
}  // namespace

extern "C" cudaError_t cgm_dev_sum_slots(const float *slots, int slot_dtype, int nslots,
                                         int64_t stride, int64_t n, void *dst,
                                         int dst_dtype,
                                         const cgm_dev_state *state,
                                         cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (nslots < 0 || (nslots > 0 && !slots) || !dst)
        return cudaErrorInvalidValue;
    switch (slot_dtype) {
    case 0: return launch_sum_slots<float>(slots, nslots, stride, n, dst, dst_dtype, state, stream);
    case 1: return launch_sum_slots<__nv_bfloat16>(slots, nslots, stride, n, dst, dst_dtype, state, stream);
    case 2: return launch_sum_slots<__half>(slots, nslots, stride, n, dst, dst_dtype, state, stream);
    default: return cudaErrorInvalidValue;
    }
}
