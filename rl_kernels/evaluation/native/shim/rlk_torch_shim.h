// rlk_torch_shim.h: a minimal stand-in for the torch C++ API, for hgemm candidates only.
//
// Why: hgemm candidates (CUDA-L2 layout) include <torch/extension.h> but only use a tensor's
// pointer, sizes and dtype.  Compiling them against real torch headers costs ~140 s on 2 cores and
// ties the artifact to one torch build; this shim compiles in well under a second and the
// artifact only sees the plain-C `rlk_tensor` from rlk_abi.h.
//
// Supported subset (anything else is a compile error, which is the honest outcome):
//   at::Tensor / torch::Tensor (a non-owning view of an rlk_tensor):
//     data_ptr(), data_ptr<T>(), const_data_ptr<T>(), mutable_data_ptr<T>() (typed access checks
//     the dtype), size(i) / stride(i) (negative i wraps), sizes(), strides(), dim(), ndimension(),
//     numel(), element_size(), nbytes(), scalar_type(), dtype(), options() (its .dtype() compares
//     with torch::kHalf etc. and options() prints with operator<<), is_contiguous(), is_cuda(),
//     is_cpu(), device(), get_device(), defined()
//   scalar types: torch::kByte kChar kShort kInt kLong kHalf kFloat kDouble kBool kBFloat16,
//     aliases kInt32 kInt64 kFloat16 kFloat32 kFloat64; at::ScalarType; device types kCPU kCUDA
//   at::Half / c10::Half: __half under nvcc, a 16-bit struct with float conversions otherwise;
//     at::BFloat16 / c10::BFloat16 likewise (__nv_bfloat16 under nvcc)
//   TORCH_CHECK(cond, msg...): throws std::runtime_error with the streamed message
//   (nvcc only) at::cuda::getCurrentCUDAStream(): the caller's stream (rlk_stream.h); C10_CUDA_CHECK,
//     C10_CUDA_KERNEL_LAUNCH_CHECK()
// Not supported: allocation (torch::empty, ...), any ATen operator, autograd, pybind11.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "rlk_abi.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

namespace rlk_detail {
inline void stream_all(std::ostringstream&) {}
template <typename T, typename... Rest>
void stream_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  stream_all(os, rest...);
}
template <typename... Args>
std::string check_message(const char* cond, const char* file, int line, const Args&... args) {
  std::ostringstream os;
  if (sizeof...(args) == 0) {
    os << "Expected " << cond << " to be true, but got false.";
  } else {
    stream_all(os, args...);
  }
  os << " (" << file << ":" << line << ")";
  return os.str();
}
}  // namespace rlk_detail

#define TORCH_CHECK(cond, ...)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      throw std::runtime_error(                                                             \
          ::rlk_detail::check_message(#cond, __FILE__, __LINE__, ##__VA_ARGS__));           \
    }                                                                                       \
  } while (0)

namespace c10 {

enum class ScalarType : int8_t {
  Byte = 0, Char = 1, Short = 2, Int = 3, Long = 4, Half = 5, Float = 6, Double = 7,
  Bool = 11, BFloat16 = 15, Undefined = -1,
};

inline const char* toString(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: return "Byte";
    case ScalarType::Char: return "Char";
    case ScalarType::Short: return "Short";
    case ScalarType::Int: return "Int";
    case ScalarType::Long: return "Long";
    case ScalarType::Half: return "Half";
    case ScalarType::Float: return "Float";
    case ScalarType::Double: return "Double";
    case ScalarType::Bool: return "Bool";
    case ScalarType::BFloat16: return "BFloat16";
    default: return "Undefined";
  }
}

inline std::size_t elementSize(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: case ScalarType::Char: case ScalarType::Bool: return 1;
    case ScalarType::Short: case ScalarType::Half: case ScalarType::BFloat16: return 2;
    case ScalarType::Int: case ScalarType::Float: return 4;
    case ScalarType::Long: case ScalarType::Double: return 8;
    default: return 0;
  }
}

inline std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << toString(t); }

constexpr ScalarType kByte = ScalarType::Byte;
constexpr ScalarType kChar = ScalarType::Char;
constexpr ScalarType kShort = ScalarType::Short;
constexpr ScalarType kInt = ScalarType::Int;
constexpr ScalarType kInt32 = ScalarType::Int;
constexpr ScalarType kLong = ScalarType::Long;
constexpr ScalarType kInt64 = ScalarType::Long;
constexpr ScalarType kHalf = ScalarType::Half;
constexpr ScalarType kFloat16 = ScalarType::Half;
constexpr ScalarType kFloat = ScalarType::Float;
constexpr ScalarType kFloat32 = ScalarType::Float;
constexpr ScalarType kDouble = ScalarType::Double;
constexpr ScalarType kFloat64 = ScalarType::Double;
constexpr ScalarType kBool = ScalarType::Bool;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;

// The dtype as returned by Tensor::dtype() / options().dtype(): comparable with a ScalarType.
struct TypeMeta {
  ScalarType type;
  ScalarType toScalarType() const { return type; }
  const char* name() const { return toString(type); }
  std::size_t itemsize() const { return elementSize(type); }
};
inline bool operator==(TypeMeta a, TypeMeta b) { return a.type == b.type; }
inline bool operator!=(TypeMeta a, TypeMeta b) { return a.type != b.type; }
inline bool operator==(TypeMeta a, ScalarType b) { return a.type == b; }
inline bool operator!=(TypeMeta a, ScalarType b) { return a.type != b; }
inline bool operator==(ScalarType a, TypeMeta b) { return a == b.type; }
inline bool operator!=(ScalarType a, TypeMeta b) { return a != b.type; }
inline std::ostream& operator<<(std::ostream& os, TypeMeta t) { return os << t.name(); }

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
constexpr DeviceType kCPU = DeviceType::CPU;
constexpr DeviceType kCUDA = DeviceType::CUDA;

struct Device {
  DeviceType type_;
  int8_t index_;
  DeviceType type() const { return type_; }
  int8_t index() const { return index_; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  std::string str() const {
    return is_cuda() ? "cuda:" + std::to_string(static_cast<int>(index_)) : std::string("cpu");
  }
};
inline bool operator==(Device a, Device b) { return a.type_ == b.type_ && a.index_ == b.index_; }
inline bool operator!=(Device a, Device b) { return !(a == b); }
inline std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

struct TensorOptions {
  TypeMeta dtype_;
  Device device_;
  TypeMeta dtype() const { return dtype_; }
  Device device() const { return device_; }
};
inline std::ostream& operator<<(std::ostream& os, const TensorOptions& o) {
  return os << "TensorOptions(dtype=" << o.dtype() << ", device=" << o.device()
            << ", layout=Strided, requires_grad=false (default))";
}

// A read-only view of sizes or strides, like c10::IntArrayRef.
class IntArrayRef {
 public:
  IntArrayRef(const int64_t* data, std::size_t n) : data_(data), n_(n) {}
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  const int64_t* data() const { return data_; }
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + n_; }
  int64_t operator[](std::size_t i) const { return data_[i]; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

 private:
  const int64_t* data_;
  std::size_t n_;
};
inline std::ostream& operator<<(std::ostream& os, IntArrayRef r) {
  os << "[";
  for (std::size_t i = 0; i < r.size(); ++i) os << (i ? ", " : "") << r[i];
  return os << "]";
}

#ifdef __CUDACC__
using Half = __half;
using BFloat16 = __nv_bfloat16;
#else
// 16-bit storage types with float conversions, enough for CPU kernels to read and write fp16.
struct Half {
  uint16_t x;
  Half() = default;
  Half(float f) : x(from_float(f)) {}
  operator float() const { return to_float(x); }

  static float to_float(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
      bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
      bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static uint16_t from_float(float f) {  // round to nearest even
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    uint32_t sign = (bits >> 16) & 0x8000u, absb = bits & 0x7fffffffu;
    if (absb >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absb > 0x7f800000u ? 0x200u : 0));
    if (absb >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to inf
    if (absb < 0x38800000u) {  // result is subnormal or zero
      if (absb < 0x33000000u) return static_cast<uint16_t>(sign);
      uint32_t e = absb >> 23, man = (absb & 0x7fffffu) | 0x800000u, shift = 126 - e;
      uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
      if (rem > half || (rem == half && (h & 1u))) ++h;
      return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = ((absb - 0x38000000u) >> 13), rem = absb & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
};

struct BFloat16 {
  uint16_t x;
  BFloat16() = default;
  BFloat16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    x = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
  operator float() const {
    uint32_t bits = static_cast<uint32_t>(x) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};
#endif

template <typename T> struct ScalarTypeOf { static constexpr ScalarType value = ScalarType::Undefined; };
template <> struct ScalarTypeOf<uint8_t> { static constexpr ScalarType value = ScalarType::Byte; };
template <> struct ScalarTypeOf<int8_t> { static constexpr ScalarType value = ScalarType::Char; };
template <> struct ScalarTypeOf<int16_t> { static constexpr ScalarType value = ScalarType::Short; };
template <> struct ScalarTypeOf<int32_t> { static constexpr ScalarType value = ScalarType::Int; };
template <> struct ScalarTypeOf<int64_t> { static constexpr ScalarType value = ScalarType::Long; };
template <> struct ScalarTypeOf<Half> { static constexpr ScalarType value = ScalarType::Half; };
template <> struct ScalarTypeOf<float> { static constexpr ScalarType value = ScalarType::Float; };
template <> struct ScalarTypeOf<double> { static constexpr ScalarType value = ScalarType::Double; };
template <> struct ScalarTypeOf<bool> { static constexpr ScalarType value = ScalarType::Bool; };
template <> struct ScalarTypeOf<BFloat16> { static constexpr ScalarType value = ScalarType::BFloat16; };
template <typename T> struct ScalarTypeOf<const T> : ScalarTypeOf<T> {};

}  // namespace c10

namespace at {
using c10::BFloat16;
using c10::Device;
using c10::DeviceType;
using c10::Half;
using c10::IntArrayRef;
using c10::ScalarType;
using c10::TensorOptions;
using c10::TypeMeta;
using c10::kBFloat16;
using c10::kBool;
using c10::kByte;
using c10::kChar;
using c10::kCPU;
using c10::kCUDA;
using c10::kDouble;
using c10::kFloat;
using c10::kFloat16;
using c10::kFloat32;
using c10::kFloat64;
using c10::kHalf;
using c10::kInt;
using c10::kInt32;
using c10::kInt64;
using c10::kLong;
using c10::kShort;
using c10::toString;

// A non-owning view of the caller's tensor; copying it copies the view, never the data.
class Tensor {
 public:
  explicit Tensor(const rlk_tensor& t) : t_(t) {
    TORCH_CHECK(t.dim >= 0 && t.dim <= RLK_MAX_DIM, "tensor dim ", t.dim, " out of range");
  }

  void* data_ptr() const { return t_.data; }
  template <typename T> T* data_ptr() const { return static_cast<T*>(checked_data<T>()); }
  template <typename T> const T* const_data_ptr() const { return static_cast<const T*>(checked_data<T>()); }
  template <typename T> T* mutable_data_ptr() const { return static_cast<T*>(checked_data<T>()); }
  const void* const_data_ptr() const { return t_.data; }
  void* mutable_data_ptr() const { return t_.data; }

  int64_t dim() const { return t_.dim; }
  int64_t ndimension() const { return t_.dim; }
  int64_t size(int64_t i) const { return t_.sizes[wrap(i)]; }
  int64_t stride(int64_t i) const { return t_.strides[wrap(i)]; }
  IntArrayRef sizes() const { return IntArrayRef(t_.sizes, static_cast<std::size_t>(t_.dim)); }
  IntArrayRef strides() const { return IntArrayRef(t_.strides, static_cast<std::size_t>(t_.dim)); }
  int64_t numel() const {
    int64_t n = 1;
    for (int32_t i = 0; i < t_.dim; ++i) n *= t_.sizes[i];
    return n;
  }
  int64_t element_size() const { return static_cast<int64_t>(c10::elementSize(scalar_type())); }
  int64_t itemsize() const { return element_size(); }
  int64_t nbytes() const { return numel() * element_size(); }
  bool defined() const { return true; }

  ScalarType scalar_type() const { return static_cast<ScalarType>(t_.dtype); }
  TypeMeta dtype() const { return TypeMeta{scalar_type()}; }
  Device device() const {
    return Device{t_.device_type == 1 ? DeviceType::CUDA : DeviceType::CPU,
                  static_cast<int8_t>(t_.device_type == 1 ? t_.device_index : -1)};
  }
  TensorOptions options() const { return TensorOptions{dtype(), device()}; }
  bool is_cuda() const { return t_.device_type == 1; }
  bool is_cpu() const { return t_.device_type == 0; }
  int64_t get_device() const { return is_cuda() ? t_.device_index : -1; }

  bool is_contiguous() const {
    int64_t expected = 1;
    for (int32_t i = t_.dim - 1; i >= 0; --i) {
      if (t_.sizes[i] == 1) continue;
      if (t_.strides[i] != expected) return false;
      expected *= t_.sizes[i];
    }
    return true;
  }

 private:
  int64_t wrap(int64_t i) const {
    int64_t j = i < 0 ? i + t_.dim : i;
    TORCH_CHECK(j >= 0 && j < t_.dim, "Dimension out of range (expected to be in range of [",
                -t_.dim, ", ", t_.dim - 1, "], but got ", i, ")");
    return j;
  }
  template <typename T> void* checked_data() const {
    constexpr ScalarType want = c10::ScalarTypeOf<T>::value;
    TORCH_CHECK(want == scalar_type(), "expected scalar type ", toString(want), " but found ",
                toString(scalar_type()));
    return t_.data;
  }

  rlk_tensor t_;
};

}  // namespace at

namespace torch {
using namespace at;
}  // namespace torch
