// Test kernel for the cpu backend in the CUDA-L2 ABI: C = A . B with fp32 accumulation.
// Reads B through b_col_major (B^T stored NxK, K-contiguous), as CUDA-L2 kernels do.
#include <torch/extension.h>
#include <torch/types.h>

#define CHECK_TORCH_TENSOR_DTYPE(T, th_type)                      \
  if (((T).options().dtype() != (th_type))) {                     \
    std::cout << "Tensor Info:" << (T).options() << std::endl;    \
    throw std::runtime_error("values must be " #th_type);         \
  }

static void gemm_rows(const at::Half* a, const at::Half* bt, at::Half* c, int64_t m0, int64_t m1,
                      int64_t n, int64_t k) {
  for (int64_t i = m0; i < m1; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.f;
      for (int64_t p = 0; p < k; ++p) acc += float(a[i * k + p]) * float(bt[j * k + p]);
      c[i * n + j] = at::Half(acc);
    }
  }
}

void test_hgemm_cpu(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  CHECK_TORCH_TENSOR_DTYPE(a, torch::kHalf)
  CHECK_TORCH_TENSOR_DTYPE(b, torch::kHalf)
  CHECK_TORCH_TENSOR_DTYPE(c, torch::kHalf)
  const int64_t M = a.size(0), K = a.size(1), N = b.size(-1);
  TORCH_CHECK(b_col_major.stride(0) == 1 && b_col_major.stride(1) == K, "b_col_major must be NxK K-contiguous");
  TORCH_CHECK(c.size(0) == M && c.size(1) == N, "c has shape ", c.sizes(), ", expected [", M, ", ", N, "]");
  const at::Half* pa = a.data_ptr<at::Half>();
  const at::Half* pbt = static_cast<const at::Half*>(b_col_major.data_ptr());
  at::Half* pc = c.data_ptr<at::Half>();
#pragma omp parallel for
  for (int64_t i = 0; i < M; ++i) gemm_rows(pa, pbt, pc, i, i + 1, N, K);
}
