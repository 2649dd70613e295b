// Test kernel for the cuda backend in the CUDA-L2 ABI (plain CUDA, no CuTe): C = A . B, fp32 acc.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <torch/extension.h>
#include <torch/types.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void naive_hgemm_kernel(const half* a, const half* bt, half* c, int m, int n, int k) {
  int row = blockIdx.y * blockDim.y + threadIdx.y;
  int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.f;
  for (int p = 0; p < k; ++p) acc += __half2float(a[row * k + p]) * __half2float(bt[col * k + p]);
  c[row * n + col] = __float2half(acc);
}

#define CHECK_TORCH_TENSOR_DTYPE(T, th_type)                      \
  if (((T).options().dtype() != (th_type))) {                     \
    std::cout << "Tensor Info:" << (T).options() << std::endl;    \
    throw std::runtime_error("values must be " #th_type);         \
  }

void test_hgemm_cuda(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& b_col_major,
                     const torch::Tensor& c) {
  CHECK_TORCH_TENSOR_DTYPE(a, torch::kHalf)
  CHECK_TORCH_TENSOR_DTYPE(b, torch::kHalf)
  CHECK_TORCH_TENSOR_DTYPE(c, torch::kHalf)
  TORCH_CHECK(a.is_cuda() && c.is_cuda(), "tensors must be on a CUDA device");
  const int M = a.size(0), K = a.size(1), N = b.size(1);
  dim3 block(16, 16), grid((N + 15) / 16, (M + 15) / 16);
  naive_hgemm_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<half*>(a.data_ptr()), reinterpret_cast<half*>(b_col_major.data_ptr()),
      reinterpret_cast<half*>(c.data_ptr()), M, N, K);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
