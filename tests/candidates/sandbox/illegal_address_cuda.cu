// Corrupts its CUDA context: the kernel writes far beyond any allocation, a sticky illegal-address
// error after which nothing in that process can use the device again. The evaluation after it
// (in another worker) must not notice.
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <c10/cuda/CUDAStream.h>

namespace {

__global__ void wild_write(half* c, long long offset) {
  c[offset + threadIdx.x] = __float2half(1.f);
}

}  // namespace

void wild_write_entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  wild_write<<<1, 32, 0, stream>>>(reinterpret_cast<half*>(c.data_ptr()), 1LL << 40);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch failed");
}
