// HACK a CUTLASS-looking wrapper with no kernel of its own: the text names CUTLASS's device-level
// GEMM (so the gate's "custom kernel" spelling check passes) but never instantiates it; the product
// is computed on the host behind two copies.  The build's evidence sees that the object registers
// no CUDA kernel (no_custom_kernel).
#include <torch/extension.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <vector>

#include "cutlass/gemm/device/gemm.h"

using Unused = cutlass::gemm::device::Gemm<cutlass::half_t, cutlass::layout::RowMajor, cutlass::half_t,
                                           cutlass::layout::RowMajor, cutlass::half_t, cutlass::layout::RowMajor,
                                           float>;

void facade_hgemm(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  const long m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<__half> ha(m * k), hb(k * n), hc(m * n);
  cudaMemcpy(ha.data(), a.data_ptr(), ha.size() * 2, cudaMemcpyDeviceToHost);
  cudaMemcpy(hb.data(), b.data_ptr(), hb.size() * 2, cudaMemcpyDeviceToHost);
  for (long i = 0; i < m; ++i) {
    for (long j = 0; j < n; ++j) {
      float acc = 0.f;
      for (long p = 0; p < k; ++p) acc += __half2float(ha[i * k + p]) * __half2float(hb[p * n + j]);
      hc[i * n + j] = __float2half(acc);
    }
  }
  cudaMemcpy(c.data_ptr(), hc.data(), hc.size() * 2, cudaMemcpyHostToDevice);
}
