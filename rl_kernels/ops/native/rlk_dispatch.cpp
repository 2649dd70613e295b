// rlk_dispatch.cpp: the exported op's dispatch in C++, so a call costs no Python.
//
// The same rules as runtime.py's KernelLibrary.choose/hgemm (that file is the reference; the
// export tests compare the two paths' choices and results): the plan's path for a 2-d, float16,
// contiguous call on the library's device type that export measured, torch.matmul otherwise, and,
// while the current CUDA stream is capturing a graph, the kernel only where export's probe captured
// it.  Python fills the plan once (set_entry, with each kernel's rlk_hgemm address from ctypes) and
// reads the call counts back (calls) for explain().
//
// Built by `rl-kernels export` against the exporting host's torch (-DRLK_NS=<package>_cpp, and
// -DRLK_WITH_CUDA for a cuda library); the runtime loads it only under that same torch version.
#include <ATen/ATen.h>
#include <torch/library.h>

#ifdef RLK_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#endif

#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "rlk_abi.h"

namespace {

using HgemmFn = int (*)(const rlk_tensor*, const rlk_tensor*, const rlk_tensor*, const rlk_tensor*, void*, char*, int);
using Key = std::tuple<int64_t, int64_t, int64_t, std::string>;   // (M, N, K, accumulator)

struct Entry {
  std::string path;            // "exact" | "pad" | "matmul"
  HgemmFn fn = nullptr;        // the kernel's rlk_hgemm (exact and pad)
  int64_t pm = 0, pn = 0, pk = 0;   // the kernel's shape: the call's own, or the padded one
  bool capturable = false;     // export's CUDA graph probe passed
  std::string reason;          // the plan's reason (a matmul decision's, or why a kernel is not capturable)
};

std::mutex mu;
std::map<Key, Entry> plan;
std::map<std::tuple<int64_t, int64_t, int64_t, std::string, std::string, std::string>, int64_t> counts;
#ifdef RLK_WITH_CUDA
constexpr bool kCuda = true;
#else
constexpr bool kCuda = false;
#endif

void count(int64_t m, int64_t n, int64_t k, const std::string& acc, const char* path, const std::string& reason) {
  std::lock_guard<std::mutex> hold(mu);
  ++counts[{m, n, k, acc, path, reason}];
}

// torch's Python names (float16, not Half), so both dispatches give a fallback the same reason.
std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    default: return c10::toString(t);
  }
}

rlk_tensor view(const at::Tensor& t) {
  rlk_tensor v{};
  v.data = t.data_ptr();
  v.dim = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    v.sizes[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  v.dtype = static_cast<int32_t>(t.scalar_type());
  v.device_type = t.is_cuda() ? 1 : 0;
  v.device_index = t.is_cuda() ? t.device().index() : 0;
  return v;
}

void* current_stream(const at::Tensor& t, bool* capturing) {
  *capturing = false;
#ifdef RLK_WITH_CUDA
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TORCH_CHECK(cudaStreamIsCapturing(stream, &status) == cudaSuccess, "cudaStreamIsCapturing failed");
  *capturing = status != cudaStreamCaptureStatusNone;
  return stream;
#else
  (void)t;
  return nullptr;
#endif
}

// Runs the kernel on a [M, K] x [K, N] product (b_col_major: b's [N, K] transpose, contiguous).
void run(const Entry& e, const at::Tensor& a, const at::Tensor& b, const at::Tensor& b_col_major, const at::Tensor& c,
         void* stream) {
  // The ABI's as_col_major: B^T's storage seen with B's shape, strides (1, K).
  at::Tensor bc = b_col_major.as_strided({b.size(0), b.size(1)}, {1, b.size(0)});
  rlk_tensor ta = view(a), tb = view(b), tbc = view(bc), tc = view(c);
  char err[2048] = {0};
  int rc = e.fn(&ta, &tb, &tbc, &tc, stream, err, static_cast<int>(sizeof err));
  TORCH_CHECK(rc == 0, "hgemm kernel failed: ", err);
}

at::Tensor hgemm(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>& b_col_major,
                 c10::string_view accumulator) {
  const std::string acc(accumulator);
  const bool two_d = a.dim() == 2 && b.dim() == 2;
  const int64_t m = two_d ? a.size(0) : -1, n = two_d ? b.size(1) : -1, k = a.dim() ? a.size(-1) : -1;
  auto fallback = [&](const std::string& reason) {
    count(m, n, k, acc, "matmul", reason);
    return at::matmul(a, b);
  };
  if (a.dim() != 2 || b.dim() != 2) {
    return fallback(std::to_string(a.dim()) + "-d @ " + std::to_string(b.dim()) + "-d: the kernels take 2-d operands");
  }
  if (a.size(1) != b.size(0)) return fallback("shapes do not multiply (torch.matmul raises)");
  if (a.scalar_type() != at::kHalf || b.scalar_type() != at::kHalf) {
    return fallback(dtype_name(a.scalar_type()) + " @ " + dtype_name(b.scalar_type()) + ": the kernels take float16");
  }
  if (a.is_cuda() != kCuda || b.device() != a.device()) {
    return fallback("operands on " + a.device().str() + " and " + b.device().str() + ": the kernels are " +
                    (kCuda ? "cuda" : "cpu") + " kernels");
  }
  if (!a.is_contiguous() || !b.is_contiguous()) return fallback("non-contiguous operand (a transposed view, a slice)");
  const Entry* e = nullptr;
  {
    std::lock_guard<std::mutex> hold(mu);
    auto found = plan.find({m, n, k, acc});
    if (found != plan.end()) e = &found->second;   // entries are filled before the first call, never moved
  }
  const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  if (e == nullptr) return fallback(shape + " (" + acc + ") was not measured at export");
  if (e->path == "matmul") return fallback(e->reason);
  bool capturing = false;
  void* stream = current_stream(a, &capturing);
  if (capturing && !e->capturable) return fallback(e->reason);
  count(m, n, k, acc, e->path.c_str(), "");
  if (e->path == "exact") {
    at::Tensor bt = b_col_major.has_value() && b_col_major->dim() == 2 && b_col_major->size(0) == n &&
                            b_col_major->size(1) == k && b_col_major->is_contiguous()
                        ? *b_col_major
                        : b.t().contiguous();
    at::Tensor c = at::empty({m, n}, a.options());
    run(*e, a, b, bt, c, stream);
    return c;
  }
  at::Tensor a_p = at::zeros({e->pm, e->pk}, a.options());
  a_p.narrow(0, 0, m).narrow(1, 0, k).copy_(a);
  at::Tensor b_p = at::zeros({e->pk, e->pn}, b.options());
  b_p.narrow(0, 0, k).narrow(1, 0, n).copy_(b);
  at::Tensor c_p = at::empty({e->pm, e->pn}, a.options());
  run(*e, a_p, b_p, b_p.t().contiguous(), c_p, stream);
  return c_p.narrow(0, 0, m).narrow(1, 0, n).contiguous();
}

at::Tensor hgemm_meta(const at::Tensor& a, const at::Tensor& b, const std::optional<at::Tensor>&, c10::string_view) {
  return at::matmul(a, b);   // on meta tensors: the shape torch.matmul gives, or its error
}

// One plan entry; the caller (runtime.py) passes the kernel's rlk_hgemm address and keeps its library loaded.
void set_entry(int64_t m, int64_t n, int64_t k, c10::string_view acc, c10::string_view path, int64_t fn,
               int64_t pm, int64_t pn, int64_t pk, bool capturable, c10::string_view reason) {
  TORCH_CHECK(path == "exact" || path == "pad" || path == "matmul", "unknown path ", path);
  TORCH_CHECK(path == "matmul" || fn != 0, "a kernel path needs the kernel's address");
  std::lock_guard<std::mutex> hold(mu);
  plan[{m, n, k, std::string(acc)}] = Entry{std::string(path), reinterpret_cast<HgemmFn>(fn), pm, pn, pk, capturable,
                                            std::string(reason)};
}

// Every (M, N, K, accumulator, path, reason) the calls took, with its count, as tab-separated lines.
std::vector<std::string> calls() {
  std::lock_guard<std::mutex> hold(mu);
  std::vector<std::string> out;
  for (const auto& [key, count] : counts) {
    const auto& [m, n, k, acc, path, reason] = key;
    out.push_back(std::to_string(m) + "\t" + std::to_string(n) + "\t" + std::to_string(k) + "\t" + acc + "\t" + path +
                  "\t" + std::to_string(count) + "\t" + reason);
  }
  return out;
}

}  // namespace

// TORCH_LIBRARY stringifies its namespace argument unexpanded: one more macro level expands RLK_NS first.
#define RLK_LIBRARY(ns, lib) TORCH_LIBRARY(ns, lib)
#define RLK_LIBRARY_IMPL(ns, key, lib) TORCH_LIBRARY_IMPL(ns, key, lib)

RLK_LIBRARY(RLK_NS, lib) {
  lib.def("hgemm(Tensor a, Tensor b, Tensor? b_col_major=None, str accumulator='fp32') -> Tensor");
  lib.def("set_entry(int m, int n, int k, str accumulator, str path, int fn, int pm, int pn, int pk, bool capturable, "
          "str reason) -> ()", &set_entry);
  lib.def("calls() -> str[]", &calls);
}

RLK_LIBRARY_IMPL(RLK_NS, CompositeExplicitAutograd, lib) { lib.impl("hgemm", &hgemm); }

RLK_LIBRARY_IMPL(RLK_NS, Meta, lib) { lib.impl("hgemm", &hgemm_meta); }
