// cuBLAS / cuBLASLt hgemm baselines behind a plain C ABI (no torch headers, loaded with ctypes).
//
// Every entry computes the row-major fp16 product C[MxN] = A[MxK] . B[KxN]. cuBLAS is
// column-major, and a row-major MxN matrix is the column-major NxM matrix of its transpose, so each
// call computes C^T[NxM] = B^T[NxK] . A^T[KxM] with no transposes: cuBLAS "A" is our B (ld N),
// cuBLAS "B" is our A (ld K), and C has ld N.
//
// acc32 != 0: CUBLAS_COMPUTE_32F with float alpha/beta (fp16 in/out, fp32 accumulate);
// acc32 == 0: CUBLAS_COMPUTE_16F with __half alpha/beta (fp16 accumulate).
//
// Handles, the Lt workspace and per-shape plans are created once and reused, so a timed call pays
// only for the GEMM, as a tuned production caller would. Everything runs on the legacy default
// stream (stream 0) so the caller's CUDA events bracket it. Handles belong to the device current at
// the first call: one process, one device. Every entry returns 0 on success, nonzero on error with
// the message in rlk_last_error().
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace {

thread_local std::string g_last_error;
std::mutex g_mutex;
cublasHandle_t g_blas = nullptr;
cublasLtHandle_t g_lt = nullptr;
void* g_workspace = nullptr;
size_t g_workspace_bytes = 32u << 20;
bool g_workspace_allocated = false;

int fail(const std::string& msg) {
  g_last_error = msg;
  return 1;
}

bool cuda_ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  g_last_error = std::string(what) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  return false;
}

bool blas_ok(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return true;
  g_last_error = std::string(what) + ": " + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) + ")";
  return false;
}

bool check_dims(int M, int N, int K) {
  if (M > 0 && N > 0 && K > 0) return true;
  g_last_error = "M, N, K must be positive, got " + std::to_string(M) + ", " + std::to_string(N) +
                 ", " + std::to_string(K);
  return false;
}

// Scalars for both compute types; pointers to the right member are passed as alpha/beta.
struct Scalars {
  float one_f = 1.0f, zero_f = 0.0f;
  __half one_h, zero_h;
  Scalars() : one_h(__float2half(1.0f)), zero_h(__float2half(0.0f)) {}
  const void* one(int acc32) const { return acc32 ? static_cast<const void*>(&one_f) : &one_h; }
  const void* zero(int acc32) const { return acc32 ? static_cast<const void*>(&zero_f) : &zero_h; }
};
const Scalars g_scalars;

bool ensure_blas() {
  if (g_blas) return true;
  if (!blas_ok(cublasCreate(&g_blas), "cublasCreate")) return false;
  return blas_ok(cublasSetStream(g_blas, 0), "cublasSetStream") &&
         blas_ok(cublasSetMathMode(g_blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
}

bool ensure_lt() {
  if (!g_lt && !blas_ok(cublasLtCreate(&g_lt), "cublasLtCreate")) return false;
  if (!g_workspace_allocated) {
    if (!cuda_ok(cudaMalloc(&g_workspace, g_workspace_bytes), "cudaMalloc(cuBLASLt workspace)")) return false;
    g_workspace_allocated = true;
  }
  return true;
}

// Descriptors and the chosen algorithm for one (M, N, K, acc) problem.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLAS operands: a=our B, b=our A
  cublasLtMatmulAlgo_t algo{};
};

using Key = std::tuple<int, int, int, int>;
std::map<Key, Plan> g_heuristic_plans;
std::map<Key, Plan> g_tuned_plans;

void destroy_plan(Plan& p) {
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  p = Plan{};
}

void clear_plans() {
  for (auto& kv : g_heuristic_plans) destroy_plan(kv.second);
  for (auto& kv : g_tuned_plans) destroy_plan(kv.second);
  g_heuristic_plans.clear();
  g_tuned_plans.clear();
}

bool make_descriptors(Plan& p, int M, int N, int K, int acc32) {
  const cublasComputeType_t compute = acc32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_16F;
  const cudaDataType_t scale = acc32 ? CUDA_R_32F : CUDA_R_16F;
  const cublasOperation_t no_trans = CUBLAS_OP_N;
  return blas_ok(cublasLtMatmulDescCreate(&p.op, compute, scale), "cublasLtMatmulDescCreate") &&
         blas_ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &no_trans, sizeof(no_trans)),
                 "set TRANSA") &&
         blas_ok(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &no_trans, sizeof(no_trans)),
                 "set TRANSB") &&
         blas_ok(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16F, N, K, N), "layout B^T (NxK, ld N)") &&
         blas_ok(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16F, K, M, K), "layout A^T (KxM, ld K)") &&
         blas_ok(cublasLtMatrixLayoutCreate(&p.c, CUDA_R_16F, N, M, N), "layout C^T (NxM, ld N)");
}

// Up to `wanted` heuristic algorithms that fit the workspace, in cuBLASLt's preference order.
bool heuristic_algos(const Plan& p, int wanted, std::vector<cublasLtMatmulHeuristicResult_t>& out) {
  cublasLtMatmulPreference_t pref = nullptr;
  if (!blas_ok(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) return false;
  const size_t ws = g_workspace_bytes;
  bool ok = blas_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                         sizeof(ws)),
                    "set MAX_WORKSPACE_BYTES");
  out.assign(wanted, cublasLtMatmulHeuristicResult_t{});
  int returned = 0;
  ok = ok && blas_ok(cublasLtMatmulAlgoGetHeuristic(g_lt, p.op, p.a, p.b, p.c, p.c, pref, wanted, out.data(),
                                                    &returned),
                     "cublasLtMatmulAlgoGetHeuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  if (!ok) return false;
  out.resize(returned);
  out.erase(std::remove_if(out.begin(), out.end(),
                           [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; }),
            out.end());
  if (out.empty()) {
    g_last_error = "cublasLtMatmulAlgoGetHeuristic returned no usable algorithm";
    return false;
  }
  return true;
}

cublasStatus_t run_plan(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, void* C,
                        int acc32) {
  return cublasLtMatmul(g_lt, p.op, g_scalars.one(acc32), B, p.a, A, p.b, g_scalars.zero(acc32), C, p.c, C, p.c,
                        &algo, g_workspace, g_workspace_bytes, 0);
}

// Median time in ms of `repeats` calls of one algorithm after `warmups`; negative if it fails.
float time_algo(const Plan& p, const cublasLtMatmulAlgo_t& algo, const void* A, const void* B, void* C, int acc32,
                cudaEvent_t start, cudaEvent_t stop) {
  constexpr int warmups = 3;
  constexpr int repeats = 10;
  for (int i = 0; i < warmups; ++i) {
    if (run_plan(p, algo, A, B, C, acc32) != CUBLAS_STATUS_SUCCESS) return -1.0f;
  }
  std::vector<float> ms(repeats);
  for (int i = 0; i < repeats; ++i) {
    cudaEventRecord(start, 0);
    if (run_plan(p, algo, A, B, C, acc32) != CUBLAS_STATUS_SUCCESS) return -1.0f;
    cudaEventRecord(stop, 0);
    if (cudaEventSynchronize(stop) != cudaSuccess) return -1.0f;
    cudaEventElapsedTime(&ms[i], start, stop);
  }
  std::nth_element(ms.begin(), ms.begin() + repeats / 2, ms.end());
  return ms[repeats / 2];
}

bool tune_plan(Plan& p, const void* A, const void* B, void* C, int acc32, int max_algos) {
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  if (!heuristic_algos(p, max_algos, algos)) return false;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (!cuda_ok(cudaEventCreate(&start), "cudaEventCreate") || !cuda_ok(cudaEventCreate(&stop), "cudaEventCreate")) {
    if (start) cudaEventDestroy(start);
    return false;
  }
  float best_ms = -1.0f;
  for (const auto& r : algos) {
    const float ms = time_algo(p, r.algo, A, B, C, acc32, start, stop);
    if (ms >= 0.0f && (best_ms < 0.0f || ms < best_ms)) {
      best_ms = ms;
      p.algo = r.algo;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  // An algorithm that failed to launch leaves a CUDA error behind: report it here rather than let
  // it be blamed on the caller's next kernel.
  if (!cuda_ok(cudaGetLastError(), "cuBLASLt autotuning")) return false;
  if (best_ms < 0.0f) {
    g_last_error = "no cuBLASLt algorithm ran successfully during autotuning";
    return false;
  }
  return true;
}

// The cached plan for a key, building it (heuristic first choice, or autotuned) on first use.
const Plan* get_plan(std::map<Key, Plan>& cache, int M, int N, int K, int acc32, const void* A, const void* B,
                     void* C, int max_algos) {
  const Key key{M, N, K, acc32 ? 1 : 0};
  auto it = cache.find(key);
  if (it != cache.end()) return &it->second;
  Plan p;
  bool ok = make_descriptors(p, M, N, K, acc32);
  if (ok && max_algos <= 0) {
    std::vector<cublasLtMatmulHeuristicResult_t> algos;
    ok = heuristic_algos(p, 1, algos);
    if (ok) p.algo = algos[0].algo;
  } else if (ok) {
    ok = tune_plan(p, A, B, C, acc32, max_algos);
  }
  if (!ok) {
    destroy_plan(p);
    return nullptr;
  }
  return &cache.emplace(key, p).first->second;
}

int lt_matmul(std::map<Key, Plan>& cache, const void* A, const void* B, void* C, int M, int N, int K, int acc32,
              int max_algos) {
  if (!check_dims(M, N, K)) return 1;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!ensure_lt()) return 1;
  const Plan* p = get_plan(cache, M, N, K, acc32, A, B, C, max_algos);
  if (!p) return 1;
  return blas_ok(run_plan(*p, p->algo, A, B, C, acc32), "cublasLtMatmul") ? 0 : 1;
}

}  // namespace

extern "C" {

const char* rlk_last_error() { return g_last_error.c_str(); }

int rlk_gemmex(const void* A, const void* B, void* C, int M, int N, int K, int acc32) {
  if (!check_dims(M, N, K)) return 1;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!ensure_blas()) return 1;
  const cublasComputeType_t compute = acc32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_16F;
  const cublasStatus_t st =
      cublasGemmEx(g_blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, g_scalars.one(acc32), B, CUDA_R_16F, N, A, CUDA_R_16F,
                   K, g_scalars.zero(acc32), C, CUDA_R_16F, N, compute, CUBLAS_GEMM_DEFAULT);
  return blas_ok(st, "cublasGemmEx") ? 0 : 1;
}

int rlk_lt_heuristic(const void* A, const void* B, void* C, int M, int N, int K, int acc32) {
  return lt_matmul(g_heuristic_plans, A, B, C, M, N, K, acc32, 0);
}

int rlk_lt_autotune(const void* A, const void* B, void* C, int M, int N, int K, int acc32, int max_algos) {
  if (max_algos <= 0) return fail("max_algos must be positive, got " + std::to_string(max_algos));
  return lt_matmul(g_tuned_plans, A, B, C, M, N, K, acc32, max_algos);
}

// Changing the workspace drops every cached plan: algorithms were chosen under the old limit.
int rlk_lt_set_workspace(size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_workspace_allocated && bytes == g_workspace_bytes) return 0;
  clear_plans();
  if (g_workspace_allocated) {
    g_workspace_allocated = false;
    if (!cuda_ok(cudaFree(g_workspace), "cudaFree(cuBLASLt workspace)")) return 1;
  }
  g_workspace = nullptr;
  g_workspace_bytes = bytes;
  return 0;
}

}  // extern "C"
