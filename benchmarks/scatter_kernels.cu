// The scatter form of the gradient of a 1-D correlation, for benchmarks/gpu.py.
//
//     forward:   y[i] = sum[k](x[i + k] * w[k]),   i in 0..m-1, k in 0..K-1, m = n - K + 1
//     gradient:  dx[i + k] += dy[i] * w[k]         for every i and k
//
// This is the derivative as reverse mode writes it: each forward output
// element pushes its contribution to the K inputs it read.  Different
// threads hit the same dx element (K of them per element), so every update
// is an atomicAdd and dx must be zeroed before the launch.  tcc's
// derivative of the same program is the gather form instead -- one thread
// per dx element summing over the dy elements that read it, no atomics, no
// zeroing -- and the benchmark compares the two on the same GPU.
//
// One thread per forward output element i (no grid-stride loop: the launch
// covers m).  float64 atomicAdd needs sm_60 or newer.
//
//     nvcc -ptx -arch=sm_80 benchmarks/scatter_kernels.cu     (what gpu.py --check-scatter-ptx runs)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 600
#error "atomicAdd on double needs sm_60 or newer"
#endif

template <typename T>
__device__ __forceinline__ void correlation_dx_scatter(const T* __restrict__ dy, const T* __restrict__ w,
                                                       T* __restrict__ dx, long long m, int K) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) {
        return;
    }
    const T g = dy[i];
    T* out = dx + i;
    for (int k = 0; k < K; ++k) {
        atomicAdd(out + k, g * w[k]);
    }
}

extern "C" __global__ void correlation_dx_scatter_f64(const double* __restrict__ dy, const double* __restrict__ w,
                                                      double* __restrict__ dx, long long m, int K) {
    correlation_dx_scatter<double>(dy, w, dx, m, K);
}

extern "C" __global__ void correlation_dx_scatter_f32(const float* __restrict__ dy, const float* __restrict__ w,
                                                      float* __restrict__ dx, long long m, int K) {
    correlation_dx_scatter<float>(dy, w, dx, m, K);
}
