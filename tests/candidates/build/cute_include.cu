// CuTe include test in the CUDA-L2 ABI: builds a CuTe layout on the host and copies A to C.
#include <cute/tensor.hpp>
#include <torch/extension.h>
#include <torch/types.h>

__global__ void copy_kernel(const half* src, half* dst, int n) {
  using namespace cute;
  auto layout = make_layout(make_shape(n), make_stride(Int<1>{}));
  Tensor s = make_tensor(make_gmem_ptr(src), layout);
  Tensor d = make_tensor(make_gmem_ptr(dst), layout);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d(i) = s(i);
}

void cute_copy(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  int n = static_cast<int>(a.numel());
  copy_kernel<<<(n + 255) / 256, 256>>>(reinterpret_cast<half*>(a.data_ptr()),
                                        reinterpret_cast<half*>(c.data_ptr()), n);
}
