// CUTLASS's tensor-core fp32 GEMMs for benchmarks/fp32_rule.py: C = A . B, all row-major fp32.
//   gemm_3xtf32: OpMultiplyAddFastF32, each operand split into a TF32 big part and a TF32 small part,
//                three TF32 products accumulated in fp32 (the "fast accurate" SGEMM);
//   gemm_1xtf32: OpMultiplyAdd on the same tile shape, one TF32 product (operands rounded to TF32).
// Built with plain nvcc against the headers of the nvidia-cutlass wheel (cutlass_library/source/include).
#include <cutlass/gemm/device/gemm.h>

namespace {

template <typename MathOperator>
int run_gemm(const float* a, const float* b, float* c, int m, int n, int k) {
  using Gemm = cutlass::gemm::device::Gemm<
      float, cutlass::layout::RowMajor,            // A
      float, cutlass::layout::RowMajor,            // B
      float, cutlass::layout::RowMajor,            // C
      float,                                       // accumulator
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<128, 64, 16>,       // threadblock tile
      cutlass::gemm::GemmShape<64, 32, 16>,        // warp tile
      cutlass::gemm::GemmShape<16, 8, 8>,          // TF32 mma.sync
      cutlass::epilogue::thread::LinearCombination<float, 4, float, float>,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,
      3,                                           // pipeline stages
      4, 4,                                        // alignment of A and B (elements)
      false,                                       // no serial split-K
      MathOperator>;
  typename Gemm::Arguments args({m, n, k}, {a, k}, {b, n}, {c, n}, {c, n}, {1.0f, 0.0f});
  Gemm gemm;
  cutlass::Status status = gemm.can_implement(args);
  if (status != cutlass::Status::kSuccess) return static_cast<int>(status) + 100;
  status = gemm(args);
  return status == cutlass::Status::kSuccess ? 0 : static_cast<int>(status) + 200;
}

}  // namespace

extern "C" int gemm_3xtf32(const float* a, const float* b, float* c, int m, int n, int k) {
  return run_gemm<cutlass::arch::OpMultiplyAddFastF32>(a, b, c, m, n, k);
}

extern "C" int gemm_1xtf32(const float* a, const float* b, float* c, int m, int n, int k) {
  return run_gemm<cutlass::arch::OpMultiplyAdd>(a, b, c, m, n, k);
}
