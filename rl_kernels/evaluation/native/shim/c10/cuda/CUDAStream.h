// rl_kernels shim: the current CUDA stream is the stream rlk_hgemm's caller passed (rlk_stream.h).
// Why: artifacts are called from Python through ctypes, outside torch's stream machinery, so the
// caller hands its stream over with each call (torch's current stream in the op; the default
// stream in the evaluator, which times on it).
#pragma once
#include "rlk_torch_shim.h"
#ifdef __CUDACC__
#include "rlk_stream.h"
#endif

#ifdef __CUDACC__
namespace c10 {
namespace cuda {
class CUDAStream {
 public:
  cudaStream_t stream() const { return rlk::current_stream; }
  operator cudaStream_t() const { return stream(); }
  Device device() const { return Device{DeviceType::CUDA, static_cast<int8_t>(device_index())}; }
  int device_index() const {
    int d = 0;
    cudaGetDevice(&d);
    return d;
  }
};
inline CUDAStream getCurrentCUDAStream(int8_t /*device_index*/ = -1) { return CUDAStream(); }
inline CUDAStream getDefaultCUDAStream(int8_t /*device_index*/ = -1) { return CUDAStream(); }
}  // namespace cuda
}  // namespace c10

#define C10_CUDA_CHECK(expr)                                                           \
  do {                                                                                 \
    cudaError_t rlk_err_ = (expr);                                                     \
    TORCH_CHECK(rlk_err_ == cudaSuccess, "CUDA error: ", cudaGetErrorString(rlk_err_)); \
  } while (0)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
#endif
