// rl_kernels shim: at::cuda::getCurrentCUDAStream() returns the stream rlk_hgemm's caller passed.
#pragma once
#include "c10/cuda/CUDAStream.h"

#ifdef __CUDACC__
namespace at {
namespace cuda {
using c10::cuda::CUDAStream;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
}  // namespace cuda
}  // namespace at
#endif
