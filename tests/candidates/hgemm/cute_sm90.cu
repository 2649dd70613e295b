// hgemm candidate built with CuTe (CUTLASS headers from the nvidia-cutlass wheel), fp32 accumulate.
//
// C[MxN] = A[MxK] . B[KxN] with the CUDA-L2 ABI. A is read as an (M,K) K-major tensor and
// b_col_major as an (N,K) K-major tensor (B^T stored contiguously), i.e. a "TN" GEMM, which is
// what the SM80 tensor-core instruction mma.sync.m16n8k16 (F32 += F16*F16) consumes directly.
//
// Structure: one 128x128 tile of C per CTA of 128 threads (2x2 warps), K in steps of 32.
//   global -> shared: cp.async 16-byte copies into a 3-stage swizzled shared-memory ring;
//   shared -> registers: ldmatrix (x4); registers: fp32 accumulators, rounded to half at the end.
// Compiled for sm_90a it runs the SM80 instructions (Hopper executes them natively).
//
// Assumptions (checked on entry, a clear error otherwise): M % 128 == 0, N % 128 == 0,
// K % 32 == 0; contiguous fp16 tensors; 16-byte aligned base pointers (torch allocations are).
#include <torch/extension.h>

#include <cute/tensor.hpp>
#include <cute/atom/copy_atom.hpp>
#include <cute/atom/mma_atom.hpp>

// A named namespace: nvcc's host stub cannot name a kernel inside an anonymous namespace when
// `using namespace cute` also brings CuTe's anonymous namespace into view.
namespace hgemm_cute {

using namespace cute;

constexpr int kThreads = 128;
using BM = Int<128>;
using BN = Int<128>;
using BK = Int<32>;
using Stages = Int<3>;

// 8 rows x 32 halves (64 bytes) K-major, XOR-swizzled so ldmatrix rows hit distinct banks;
// 8-element (16-byte) chunks stay contiguous for cp.async and ldmatrix.
using SmemAtom = decltype(composition(Swizzle<2, 3, 3>{}, Layout<Shape<_8, BK>, Stride<BK, _1>>{}));
using SmemLayoutA = decltype(tile_to_shape(SmemAtom{}, make_shape(BM{}, BK{}, Stages{})));
using SmemLayoutB = decltype(tile_to_shape(SmemAtom{}, make_shape(BN{}, BK{}, Stages{})));
constexpr int kSmemBytes = int(cosize_v<SmemLayoutA> + cosize_v<SmemLayoutB>) * int(sizeof(half_t));

// 2x2 warps of m16n8k16; the 32x32x16 permutation gives each warp 16 columns of N per step so
// that one ldmatrix.x4 feeds B as well as A.
using Mma = decltype(make_tiled_mma(SM80_16x8x16_F32F16F16F32_TN{}, Layout<Shape<_2, _2, _1>>{},
                                    Tile<_32, _32, _16>{}));

// 128 threads x 8 halves = a 32x32 slab per copy, K fastest (4 threads span BK).
using G2SCopy = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, half_t>{},
                                         Layout<Shape<_32, _4>, Stride<_4, _1>>{},
                                         Layout<Shape<_1, _8>>{}));
using S2RAtom = Copy_Atom<SM75_U32x4_LDSM_N, half_t>;

__global__ void __launch_bounds__(kThreads)
hgemm_cute_kernel(const half_t* __restrict__ a_ptr, const half_t* __restrict__ bt_ptr,
                  half_t* __restrict__ c_ptr, int m, int n, int k) {
  extern __shared__ __align__(128) unsigned char smem[];
  half_t* smem_a = reinterpret_cast<half_t*>(smem);
  half_t* smem_b = smem_a + cosize_v<SmemLayoutA>;

  Tensor mA = make_tensor(make_gmem_ptr(a_ptr), make_shape(m, k), make_stride(k, _1{}));   // (M,K)
  Tensor mB = make_tensor(make_gmem_ptr(bt_ptr), make_shape(n, k), make_stride(k, _1{}));  // (N,K)
  Tensor mC = make_tensor(make_gmem_ptr(c_ptr), make_shape(m, n), make_stride(n, _1{}));   // (M,N)

  auto tiler = make_shape(BM{}, BN{}, BK{});
  auto coord = make_coord(blockIdx.x, blockIdx.y, _);
  Tensor gA = local_tile(mA, tiler, coord, Step<_1, X, _1>{});  // (BM,BK,k_tiles)
  Tensor gB = local_tile(mB, tiler, coord, Step<X, _1, _1>{});  // (BN,BK,k_tiles)
  Tensor gC = local_tile(mC, tiler, coord, Step<_1, _1, X>{});  // (BM,BN)

  Tensor sA = make_tensor(make_smem_ptr(smem_a), SmemLayoutA{});  // (BM,BK,Stages)
  Tensor sB = make_tensor(make_smem_ptr(smem_b), SmemLayoutB{});  // (BN,BK,Stages)

  G2SCopy g2s;
  auto g2s_thr = g2s.get_slice(threadIdx.x);
  Tensor tAgA = g2s_thr.partition_S(gA);  // (CPY,CPY_M,CPY_K,k_tiles)
  Tensor tAsA = g2s_thr.partition_D(sA);  // (CPY,CPY_M,CPY_K,Stages)
  Tensor tBgB = g2s_thr.partition_S(gB);
  Tensor tBsB = g2s_thr.partition_D(sB);

  Mma mma;
  auto thr_mma = mma.get_slice(threadIdx.x);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA,MMA_M,MMA_K) half registers
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA,MMA_N,MMA_K)
  Tensor tCrC = partition_fragment_C(mma, Shape<BM, BN>{});  // (MMA,MMA_M,MMA_N) float registers
  Tensor tCgC = thr_mma.partition_C(gC);                     // (MMA,MMA_M,MMA_N) in global
  clear(tCrC);

  auto s2r_a = make_tiled_copy_A(S2RAtom{}, mma);
  auto s2r_a_thr = s2r_a.get_slice(threadIdx.x);
  Tensor tXsA = s2r_a_thr.partition_S(sA);  // (CPY,CPY_M,CPY_K,Stages)
  Tensor tXrA = s2r_a_thr.retile_D(tCrA);   // (CPY,CPY_M,CPY_K)
  auto s2r_b = make_tiled_copy_B(S2RAtom{}, mma);
  auto s2r_b_thr = s2r_b.get_slice(threadIdx.x);
  Tensor tXsB = s2r_b_thr.partition_S(sB);
  Tensor tXrB = s2r_b_thr.retile_D(tCrB);

  const int k_tiles = size<3>(tAgA);
  int k_tile_next = 0;
  // Prologue: fill Stages-1 stages; one cp.async group per stage, empty groups past the end keep
  // the group count uniform so the wait below is always correct.
  CUTE_UNROLL
  for (int s = 0; s < Stages{} - 1; ++s) {
    if (k_tile_next < k_tiles) {
      copy(g2s, tAgA(_, _, _, k_tile_next), tAsA(_, _, _, s));
      copy(g2s, tBgB(_, _, _, k_tile_next), tBsB(_, _, _, s));
    }
    cp_async_fence();
    ++k_tile_next;
  }

  int read_stage = 0;
  int write_stage = Stages{} - 1;
  constexpr int k_blocks = decltype(size<2>(tCrA))::value;
  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    // Groups committed so far: (Stages-1) + k_tile; tile k_tile's group is done once at most
    // Stages-2 remain in flight. The barrier also means every thread has finished reading
    // write_stage (it was read_stage last iteration), so it may be overwritten now.
    cp_async_wait<Stages{} - 2>();
    __syncthreads();
    if (k_tile_next < k_tiles) {
      copy(g2s, tAgA(_, _, _, k_tile_next), tAsA(_, _, _, write_stage));
      copy(g2s, tBgB(_, _, _, k_tile_next), tBsB(_, _, _, write_stage));
    }
    cp_async_fence();
    ++k_tile_next;

    CUTE_UNROLL
    for (int kb = 0; kb < k_blocks; ++kb) {
      copy(s2r_a, tXsA(_, _, kb, read_stage), tXrA(_, _, kb));
      copy(s2r_b, tXsB(_, _, kb, read_stage), tXrB(_, _, kb));
      gemm(mma, tCrC, tCrA(_, _, kb), tCrB(_, _, kb), tCrC);
    }
    write_stage = read_stage;
    read_stage = (read_stage + 1) % Stages{};
  }

  CUTE_STATIC_ASSERT_V(size(tCrC) == size(tCgC));
  CUTE_UNROLL
  for (int i = 0; i < size(tCrC); ++i) {
    tCgC(i) = static_cast<half_t>(tCrC(i));
  }
}

}  // namespace hgemm_cute

using hgemm_cute::BK;
using hgemm_cute::BM;
using hgemm_cute::BN;

void hgemm_cute_sm90(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  TORCH_CHECK(a.options().dtype() == torch::kHalf && b_col_major.options().dtype() == torch::kHalf &&
                  c.options().dtype() == torch::kHalf,
              "hgemm_cute_sm90: a, b_col_major and c must be fp16");
  const int m = a.size(0);
  const int k = a.size(1);
  const int n = b.size(1);
  TORCH_CHECK(b.size(0) == k && c.size(0) == m && c.size(1) == n, "hgemm_cute_sm90: shape mismatch");
  TORCH_CHECK(m % BM::value == 0 && n % BN::value == 0 && k % BK::value == 0,
              "hgemm_cute_sm90: needs M % 128 == 0, N % 128 == 0 and K % 32 == 0");
  constexpr int smem_bytes = hgemm_cute::kSmemBytes;
  TORCH_CHECK(cudaFuncSetAttribute(hgemm_cute::hgemm_cute_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   smem_bytes) == cudaSuccess,
              "hgemm_cute_sm90: cannot reserve shared memory");
  const dim3 grid(m / BM::value, n / BN::value);
  using cute::half_t;
  hgemm_cute::hgemm_cute_kernel<<<grid, hgemm_cute::kThreads, smem_bytes>>>(
      reinterpret_cast<const half_t*>(a.data_ptr()), reinterpret_cast<const half_t*>(b_col_major.data_ptr()),
      reinterpret_cast<half_t*>(c.data_ptr()), m, n, k);
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "hgemm_cute_sm90: kernel launch failed");
}
