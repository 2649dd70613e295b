"""The static gate: manifests of hack/honest candidates, plus focused cases of what must pass/fail.

Hack candidates marked `static: false` must PASS the gate: that documents what the dynamic checks
(correctness, timing, sandbox) are responsible for.  Candidate files are data, read as text only.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_kernels.evaluation.guards import extract_native_sources, static_check
from rl_kernels.evaluation.reasons import Reason
from rl_kernels.tasks.hgemm import hgemm_task
from rl_kernels.tasks.module import load_module_task, parse_module_task
from rl_kernels.types import Task

CANDIDATES = Path(__file__).resolve().parents[1] / "candidates"
HACKS = CANDIDATES / "hacks"
HONEST = CANDIDATES / "honest"
MODULE_TASK = parse_module_task((HONEST / "tasks" / "relu.py").read_text(), "test/relu", "relu.py")
HGEMM_TASK = hgemm_task("hgemm/fp32/1024_1024_1024")


def _entries(manifest: Path, key: str) -> list[dict[str, Any]]:
    return yaml.safe_load(manifest.read_text())[key]


def _task(entry: dict[str, Any], root: Path) -> Task:
    if "task" in entry:
        return hgemm_task(entry["task"])
    return load_module_task(root / entry["task_file"])


HACK_ENTRIES = _entries(HACKS / "manifest.yaml", "hacks")
HONEST_ENTRIES = _entries(HONEST / "manifest.yaml", "candidates")


def test_manifest_is_complete_and_uses_known_reasons() -> None:
    listed = {e["file"] for e in HACK_ENTRIES}
    on_disk = {str(p.relative_to(HACKS)) for p in HACKS.glob("*/*") if p.parent.name != "tasks"}
    assert listed == on_disk
    known = {r.value for r in Reason}
    for e in HACK_ENTRIES:
        assert set(e["expected"]) <= known, e["file"]
        assert e["backend"] in ("cpu", "cuda")
        assert isinstance(e["static"], bool)


@pytest.mark.parametrize("entry", [e for e in HACK_ENTRIES if e["static"]], ids=lambda e: e["file"])
def test_static_hacks_are_rejected(entry: dict[str, Any]) -> None:
    verdict = static_check(_task(entry, HACKS), (HACKS / entry["file"]).read_text(), entry["backend"])
    assert verdict.reason is not None, f"{entry['file']} passed the static gate"
    assert verdict.reason.value in entry["expected"], verdict.detail
    assert "line" in verdict.detail


@pytest.mark.parametrize("entry", [e for e in HACK_ENTRIES if not e["static"]], ids=lambda e: e["file"])
def test_dynamic_hacks_get_past_the_static_gate(entry: dict[str, Any]) -> None:
    """These are the dynamic layer's job; if the gate starts catching one, move it to static: true."""
    verdict = static_check(_task(entry, HACKS), (HACKS / entry["file"]).read_text(), entry["backend"])
    assert verdict.reason is None, verdict.detail


@pytest.mark.parametrize("entry", HONEST_ENTRIES, ids=lambda e: e["file"])
def test_honest_candidates_pass(entry: dict[str, Any]) -> None:
    verdict = static_check(_task(entry, HONEST), (HONEST / entry["file"]).read_text(), entry["backend"])
    assert verdict.ok, verdict.detail


@pytest.mark.parametrize("acc", ["fp16", "fp32"])
@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_builtin_hgemm_seeds_pass(acc: str, backend: str) -> None:
    task = hgemm_task(f"hgemm/{acc}/256_256_256")
    assert static_check(task, task.seeds[backend], backend).ok  # type: ignore[arg-type]


def test_gate_is_fast() -> None:
    source = (HONEST / "hgemm_cuda_fp32.cu").read_text()
    start = time.perf_counter()
    for _ in range(10):
        static_check(HGEMM_TASK, source, "cuda")
    assert (time.perf_counter() - start) / 10 < 0.05


# --- hgemm (native) focused cases ---------------------------------------------------------------

_KERNEL = """
#include <torch/extension.h>
#include <cuda_fp16.h>
__global__ void k(half* c) { c[threadIdx.x] = __float2half(0.f); }
void entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  BODY
  k<<<1, 32>>>(reinterpret_cast<half*>(c.data_ptr()));
}
"""


def _hgemm(body: str, allow: bool = False) -> Any:
    return static_check(HGEMM_TASK, _KERNEL.replace("BODY", body), "cuda", allow_torch_ops=allow)


def test_banned_words_in_comments_and_strings_pass() -> None:
    body = ('// cudaStreamCreate, std::thread, fork(), torch::matmul\n'
            '  /* cudaGraphLaunch(g, s); popen("x") */\n'
            '  TORCH_CHECK(true, "do not use cudaStreamCreate or std::thread or system(\\"ls\\")");\n'
            '  const char* raw = R"x(fopen("f"); cudaStreamCreate(&s);)x";\n'
            "  const long big = 1'000'000; const char q = '\"';")
    assert _hgemm(body).ok, _hgemm(body).detail


def test_string_trick_does_not_hide_code() -> None:
    # The quote inside a char literal must not open a string that swallows the next line.
    body = "const char q = '\"';\n  cudaStream_t s; cudaStreamCreate(&s); const char r = '\"';"
    assert _hgemm(body).reason is Reason.SIDE_STREAM


def test_default_and_streaming_cache_operators_are_legit() -> None:
    """Per-load caching that keeps nothing across calls (read-only path, streaming, evict_first) passes."""
    body = ("float x = __ldg(p); float y = __ldcs(p); __stcs(q, x + y);\n"
            "  asm volatile(\"ld.global.L1::evict_first.f32 %0, [%1];\" : \"=f\"(x) : \"l\"(p));\n"
            "  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 16);\n"
            "  const char* note = \"keep the last tile\";")
    verdict = _hgemm(body)
    assert verdict.reason is None, verdict.detail


def test_current_stream_is_legit() -> None:
    body = ("cudaStream_t stream = at::cuda::getCurrentCUDAStream();\n"
            "  at::cuda::CUDAStream s2 = at::cuda::getCurrentCUDAStream();")
    assert _hgemm(body).ok, _hgemm(body).detail


def test_reason_names_token_and_line() -> None:
    verdict = _hgemm("cudaStream_t s;\n  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);")
    assert verdict.reason is Reason.SIDE_STREAM
    assert "cudaStreamCreateWithFlags" in verdict.detail and "line 7" in verdict.detail


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("std::thread t([]{}); t.detach();", Reason.THREAD_SPAWN),
        ("pthread_t t; pthread_create(&t, nullptr, nullptr, nullptr);", Reason.THREAD_SPAWN),
        ("auto f = std::async([]{ return 1; });", Reason.THREAD_SPAWN),
        ("system(\"ls\");", Reason.PROCESS_SPAWN),
        ("if (fork() == 0) {}", Reason.PROCESS_SPAWN),
        ("void* h = dlopen(\"libcublas.so\", 1);", Reason.PROCESS_SPAWN),
        ("asm volatile(\"syscall\");", Reason.PROCESS_SPAWN),
        ("FILE* f = fopen(\"x\", \"w\");", Reason.FILE_ACCESS),
        ("std::ofstream out(\"x\");", Reason.FILE_ACCESS),
        ("const char* p = \"/proc/self/maps\";", Reason.FILE_ACCESS),
        ("int s = socket(2, 1, 0);", Reason.NETWORK_ACCESS),
        ("cudaGraph_t g; cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal);", Reason.CUDA_GRAPH),
        ("auto s = at::cuda::getStreamFromPool();", Reason.SIDE_STREAM),
        ("cudaLaunchHostFunc(0, nullptr, nullptr);", Reason.SIDE_STREAM),
        ("static torch::Tensor cached;", Reason.STALE_OUTPUT),
        ("static void* last_ptr = nullptr;", Reason.STALE_OUTPUT),
        ("static bool computed = false;", Reason.STALE_OUTPUT),
        ("static std::unordered_map<const void*, int> seen;", Reason.STALE_OUTPUT),
        ("c.copy_(torch::matmul(a, b));", Reason.NO_CUSTOM_KERNEL),
        ("c.copy_(a.mm(b));", Reason.NO_CUSTOM_KERNEL),
        ("at::mm_out(c, a, b);", Reason.NO_CUSTOM_KERNEL),
        ("cublasHandle_t h; cublasCreate(&h);", Reason.NO_CUSTOM_KERNEL),
        ("auto y = torch::nn::functional::relu(a);", Reason.NO_CUSTOM_KERNEL),
        ("setenv(\"CUDA_LAUNCH_BLOCKING\", \"1\", 1);", Reason.MONKEYPATCH),
        ("auto m = py::module_::import(\"torch\");", Reason.DYNAMIC_CODE),
        ("nvrtcProgram prog; nvrtcCreateProgram(&prog, src, 0, 0, 0, 0);", Reason.DYNAMIC_CODE),
        ("CUmodule mod; cuModuleLoadData(&mod, ptx);", Reason.DYNAMIC_CODE),
        ("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);", Reason.CACHE_RESIDENCY),
        ("cudaDeviceSetLimit(static_cast<cudaLimit>(6), 1 << 20);", Reason.CACHE_RESIDENCY),
        ("cudaStreamAttrValue v = {}; v.accessPolicyWindow.hitRatio = 1.0f;", Reason.CACHE_RESIDENCY),
        ("cudaLaunchAttribute at; at.id = cudaLaunchAttributeAccessPolicyWindow;", Reason.CACHE_RESIDENCY),
        ("cuda::annotated_ptr<const float, cuda::access_property::persisting> p(ptr);", Reason.CACHE_RESIDENCY),
        ("auto hint = cute::TMA::CacheHintSm90::EVICT_LAST;", Reason.CACHE_RESIDENCY),
        ("asm volatile(\"prefetch.global.L2::evict_last [%0];\" :: \"l\"(p));", Reason.CACHE_RESIDENCY),
        ("asm volatile(\"ld.global.L2::\" \"evi\" \"ct_last.f32 %0, [%1];\" : \"=f\"(x) : \"l\"(p));",
         Reason.CACHE_RESIDENCY),
        ("asm volatile(\"ld.global.L2::cache_hint.f32 %0, [%1], %2;\" : \"=f\"(x) : \"l\"(p), \"l\"(pol));",
         Reason.CACHE_RESIDENCY),
    ],
)
def test_native_banned_constructs(body: str, reason: Reason) -> None:
    verdict = _hgemm(body)
    assert verdict.reason is reason, verdict.detail


@pytest.mark.parametrize("body, reason", [
    ("cudaStream_t s; CAT(cudaStream, Create)(&s);", Reason.SIDE_STREAM),
    ("#if 0\n  CAT(sys, tem)(\"true\");\n#endif", Reason.PROCESS_SPAWN),      # every #if branch is scanned
    ("#define OPEN \\\n  CAT(po, pen)\n  OPEN(\"true\", \"r\");", Reason.PROCESS_SPAWN),
    ("CAT(cub, lasCreate)(nullptr);", Reason.NO_CUSTOM_KERNEL),
    ("int CAT(tile_, 128) = 0; using T = cute::Shape<cute::CAT(_, 64)>;", None),  # CUTLASS-style pasting
])
def test_token_pasting_is_scanned_after_expansion(body: str, reason: Reason | None) -> None:
    source = "#define CAT(a, b) a##b\n" + _KERNEL.replace("BODY", body)
    verdict = static_check(HGEMM_TASK, source, "cuda")
    assert verdict.reason is reason, verdict.detail


def test_token_pasting_without_a_preprocessor_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    source = "#define CAT(a, b) a##b\n" + _KERNEL.replace("BODY", "int CAT(tile_, 128) = 0;")
    verdict = static_check(HGEMM_TASK, source, "cuda")
    assert verdict.reason is Reason.DYNAMIC_CODE and "could not expand" in verdict.detail


def test_legit_statics_pass() -> None:
    source = """
#include <torch/extension.h>
#include <cuda_fp16.h>
static const float kScale[4] = {1.f, 2.f, 3.f, 4.f};
static int helper(int x) { return x * 2; }
__global__ void k(half* c) {
  static __shared__ float tile[32];
  tile[threadIdx.x] = kScale[threadIdx.x % 4];
  c[threadIdx.x] = __float2half(tile[threadIdx.x]);
}
void entry(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  static constexpr int kThreads = 32;
  static const int kTable[2] = {1, 2};
  const float lim = std::numeric_limits<float>::max();
  auto tmp = torch::empty({4}, c.options());
  k<<<helper(kTable[0]) / 2, kThreads>>>(reinterpret_cast<half*>(c.data_ptr()));
}
"""
    assert static_check(HGEMM_TASK, source, "cuda").ok, static_check(HGEMM_TASK, source, "cuda").detail


def test_openmp_schedule_static_is_not_a_static_variable() -> None:
    source = hgemm_task("hgemm/fp32/64_64_64").seeds["cpu"]
    assert "schedule(static)" in source
    assert static_check(HGEMM_TASK, source, "cpu").ok


def test_cute_heavy_kernel_passes() -> None:
    """CUDA-L2 idioms: CuTe templates, dynamic smem attribute, static constexpr, cout/throw, casts."""
    source = r"""
#include <cuda.h>
#include <cute/tensor.hpp>
#include <float.h>
#include <stdlib.h>
template <typename T, int BM, int BN, typename SmemLayoutA>
__global__ void cute_kernel(T* Aptr, T* Dptr, int m, int n, int k) {
  using namespace cute;
  extern __shared__ T shm_data[];
  Tensor A = make_tensor(make_gmem_ptr(Aptr), make_shape(m, k), make_stride(k, Int<1>{}));
  auto sA = make_tensor(make_smem_ptr(shm_data), SmemLayoutA{});
  cute::copy(A(_, 0), sA(_, 0));
  cp_async_fence();
  cp_async_wait<0>();
  __syncthreads();
  Dptr[threadIdx.x] = Aptr[threadIdx.x];
}
template <typename T, const int Stages = 4>
void launch_cute(T* a, T* c, int M, int N, int K) {
  using namespace cute;
  using SmemLayoutA = Layout<Shape<Int<128>, Int<32>>, Stride<Int<32>, Int<1>>>;
  static constexpr int kShm = cute::max(128 * 32, 64) * sizeof(T);
  int shm_size = kShm;
  cudaFuncSetAttribute(cute_kernel<T, 128, 128, SmemLayoutA>,
                       cudaFuncAttributeMaxDynamicSharedMemorySize, shm_size);
  cute_kernel<T, 128, 128, SmemLayoutA><<<dim3(N / 128, M / 128), 128, shm_size>>>(a, c, M, N, K);
}
#include <torch/extension.h>
#define CHECK_DTYPE(T, th_type)                               \
  if (((T).options().dtype() != (th_type))) {                 \
    std::cout << "Tensor Info:" << (T).options() << std::endl; \
    throw std::runtime_error("values must be " #th_type);     \
  }
void cuda_l2_kernel(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c) {
  CHECK_DTYPE(a, torch::kHalf)
  const int M = 4096, N = 4096, K = 4096;
  launch_cute<half, 4>(reinterpret_cast<half*>(a.data_ptr()), reinterpret_cast<half*>(c.data_ptr()),
                       M, N, K);
}
"""
    verdict = static_check(hgemm_task("hgemm/fp16/4096_4096_4096"), source, "cuda")
    assert verdict.ok, verdict.detail


def test_hgemm_needs_entry_and_kernel() -> None:
    assert static_check(HGEMM_TASK, "int main() { return 0; }", "cuda").reason is Reason.MALFORMED
    no_launch = "#include <torch/extension.h>\nvoid e(torch::Tensor a, torch::Tensor b, torch::Tensor bc, torch::Tensor c) {}"
    assert static_check(HGEMM_TASK, no_launch, "cuda").reason is Reason.NO_CUSTOM_KERNEL
    assert static_check(HGEMM_TASK, no_launch, "cpu").reason is Reason.NO_CUSTOM_KERNEL


def test_torch_ops_allowed_when_opted_in() -> None:
    assert _hgemm("c.copy_(torch::matmul(a, b));", allow=True).ok
    assert _hgemm("cudaStream_t s; cudaStreamCreate(&s);", allow=True).reason is Reason.SIDE_STREAM


# --- module (Python) focused cases --------------------------------------------------------------

_MODULE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_src = """
__global__ void relu_kernel(const float* x, float* y, long n) {
  long i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
"""
ext = load_inline(name="m", cpp_sources="torch::Tensor relu(torch::Tensor x);", cuda_sources=cuda_src,
                  functions=["relu"])
PRELUDE

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = ext
        self.weight = nn.Parameter(torch.randn(4))
        INIT

    def forward(self, x):
        FORWARD
'''


def _module(forward: str = "return self.ext.relu(x.contiguous())", init: str = "pass",
            prelude: str = "", allow: bool = False, backend: str = "cuda") -> Any:
    source = _MODULE.replace("FORWARD", forward).replace("INIT", init).replace("PRELUDE", prelude)
    return static_check(MODULE_TASK, source, backend, allow_torch_ops=allow)  # type: ignore[arg-type]


def test_module_baseline_passes() -> None:
    verdict = _module()
    assert verdict.ok, verdict.detail


def test_ext_function_named_like_a_torch_op_passes() -> None:
    assert _module("y = ext.relu(x)\n        return y.view(x.shape)").ok


def test_matmul_in_forward_rejected_unless_allowed() -> None:
    verdict = _module("return torch.matmul(x, x)")
    assert verdict.reason is Reason.NO_CUSTOM_KERNEL and "torch.matmul" in verdict.detail
    assert "line" in verdict.detail
    assert _module("return torch.matmul(x, x)", allow=True).ok
    task = parse_module_task(MODULE_TASK.source + "\nALLOW_TORCH_OPS = True\n", "t/allow", "allow.py")
    assert task.allow_torch_ops
    source = _MODULE.replace("FORWARD", "return torch.matmul(x, x)").replace("INIT", "pass").replace("PRELUDE", "")
    assert static_check(task, source, "cuda").ok


@pytest.mark.parametrize(
    "forward",
    ["return F.relu(x)", "return x.softmax(-1)", "return x @ x", "return self.ext.relu(x).sum()",
     "return getattr(torch, 'relu')(x)"],
)
def test_torch_compute_in_forward_rejected(forward: str) -> None:
    assert _module(forward).reason is Reason.NO_CUSTOM_KERNEL


def test_torch_layer_called_in_forward_rejected() -> None:
    assert _module("return self.lin(x)", init="self.lin = nn.Linear(4, 4)").reason is Reason.NO_CUSTOM_KERNEL
    assert _module("return self.act(x)", init="self.act = torch.relu").reason is Reason.NO_CUSTOM_KERNEL
    # A layer used only for its parameters is fine.
    assert _module("return self.ext.relu(self.lin.weight)", init="self.lin = nn.Linear(4, 4)").ok


def test_allocation_views_and_precision_casts_pass() -> None:
    forward = ("x = x.contiguous().view(-1).half().float()\n"
               "        out = torch.empty_like(x)\n"
               "        n = x.numel() + x.size(0) + x.dim()\n"
               "        return self.ext.relu(x.to(torch.float32)).reshape(out.shape)")
    verdict = _module(forward)
    assert verdict.ok, verdict.detail


@pytest.mark.parametrize(
    ("prelude", "reason"),
    [
        ("import os", Reason.FORBIDDEN_IMPORT),
        ("import ctypes", Reason.FORBIDDEN_IMPORT),
        ("import subprocess", Reason.PROCESS_SPAWN),
        ("import socket", Reason.NETWORK_ACCESS),
        ("import threading", Reason.THREAD_SPAWN),
        ("from torch.utils.cpp_extension import load", Reason.FORBIDDEN_IMPORT),
        ("data = open('/etc/passwd').read()", Reason.FILE_ACCESS),
        ("eval('1 + 1')", Reason.DYNAMIC_CODE),
        ("m = __import__('os')", Reason.DYNAMIC_CODE),
        ("g = globals()", Reason.DYNAMIC_CODE),
        ("name = 'sync'\nf = getattr(torch.cuda, name)", Reason.DYNAMIC_CODE),
        ("subs = object.__subclasses__()", Reason.DYNAMIC_CODE),
        ("torch.cuda.synchronize = lambda: None", Reason.MONKEYPATCH),
        ("torch.cuda.Event.elapsed_time = lambda s, e: 0.0", Reason.MONKEYPATCH),
        ("torch.allclose = lambda *a, **k: True", Reason.MONKEYPATCH),
        ("setattr(torch, 'allclose', lambda *a, **k: True)", Reason.MONKEYPATCH),
        ("cuda = torch.cuda\ncuda.synchronize = lambda: None", Reason.MONKEYPATCH),
        ("torch.backends.cuda.matmul.allow_tf32 = True", Reason.MONKEYPATCH),
        ("torch.manual_seed(0)", Reason.MONKEYPATCH),
        ("class T(torch.Tensor):\n    pass", Reason.TENSOR_SUBCLASS),
        ("class P(nn.Parameter):\n    pass", Reason.TENSOR_SUBCLASS),
        ("def __torch_function__(cls, f, t, a=(), k=None):\n    return f(*a)", Reason.TENSOR_SUBCLASS),
        ("s = torch.cuda.Stream()", Reason.SIDE_STREAM),
        ("e = torch.cuda.ExternalStream(0)", Reason.SIDE_STREAM),
        ("g = torch.cuda.CUDAGraph()", Reason.CUDA_GRAPH),
        ("f = torch.compile(lambda t: t, mode='reduce-overhead')", Reason.CUDA_GRAPH),
        ("f = torch.compile(lambda t: t)", Reason.NO_CUSTOM_KERNEL),
        ("f = torch.jit.script", Reason.NO_CUSTOM_KERNEL),
        ("import torch.multiprocessing", Reason.FORBIDDEN_IMPORT),
        ("p = torch.multiprocessing.Process", Reason.PROCESS_SPAWN),
    ],
)
def test_python_banned_constructs(prelude: str, reason: Reason) -> None:
    verdict = _module(prelude=prelude)
    assert verdict.reason is reason, verdict.detail


_MAKE = "load_inline(name='m2', cpp_sources='torch::Tensor relu(torch::Tensor x);', cuda_sources=src, functions=['relu'])"


@pytest.mark.parametrize("prelude", [
    f"src = '// module'\ndef make(src):\n    return {_MAKE}",                              # a parameter
    f"src = '// module'\ndef make():\n    src = ''.join(['x'])\n    def inner():\n        return {_MAKE}\n"
    "    return inner()",                                                                     # the closure's
])
def test_a_name_a_function_or_its_closure_binds_is_not_the_module_constant(prelude: str) -> None:
    """`src` is a module constant here, but the call reads a parameter, or the enclosing function's
    own `src`: the gate must not scan the module's text in their place."""
    assert _module(prelude=prelude).reason is Reason.DYNAMIC_CODE


def test_a_literal_the_enclosing_function_assigns_once_is_seen_in_its_closure() -> None:
    prelude = f"def make():\n    src = cuda_src + '// outer'\n    def inner():\n        return {_MAKE}\n    return inner()"
    source = _MODULE.replace("FORWARD", "return self.ext.relu(x)").replace("INIT", "pass").replace("PRELUDE", prelude)
    assert static_check(MODULE_TASK, source, "cuda").ok
    assert any(text.endswith("// outer") for text in extract_native_sources(source))


@pytest.mark.parametrize("prelude", [
    "def helper(input):\n    return input * 2",
    "def helper(x):\n    input = x.contiguous()\n    return input",
    "scale = lambda input: input * 2",
])
def test_a_local_named_like_a_builtin_is_not_the_builtin(prelude: str) -> None:
    verdict = _module(prelude=prelude)
    assert verdict.ok, verdict.detail


@pytest.mark.parametrize("prelude", [
    "def helper(x, open=open):\n    return open",                      # the default is the builtin
    "def helper(x):\n    return input",                                 # not bound here
    "def helper(x):\n    global open\n    open = 1\n    return open",  # declared global
    "def helper(x, reader=lambda: input()):\n    return reader",
])
def test_the_builtin_is_refused_wherever_the_name_is_not_local(prelude: str) -> None:
    assert _module(prelude=prelude).reason is Reason.FILE_ACCESS


def test_non_literal_native_source_rejected() -> None:
    source = _MODULE.replace("cuda_sources=cuda_src", "cuda_sources=cuda_src.replace('x', 'x')")
    source = source.replace("FORWARD", "return self.ext.relu(x)").replace("INIT", "pass").replace("PRELUDE", "")
    assert static_check(MODULE_TASK, source, "cuda").reason is Reason.DYNAMIC_CODE


def _built_in_constructor(body: str) -> str:
    """The module above with its extension built in ModelNew's constructor, as CUDA-L1's released
    solutions do; `body` replaces the constructor's source assignment."""
    source = _MODULE.replace("ext = load_inline(", "_unused = dict(").replace("self.ext = ext", (
        body + "\n        self.ext = load_inline(name='m', cpp_sources='torch::Tensor relu(torch::Tensor x);', "
        "cuda_sources=src, functions=['relu'])"))
    return source.replace("FORWARD", "return self.ext.relu(x)").replace("INIT", "pass").replace("PRELUDE", "")


def test_a_source_the_constructor_assigns_once_is_seen_and_scanned() -> None:
    source = _built_in_constructor("src = cuda_src + '// built here'")
    assert static_check(MODULE_TASK, source, "cuda").ok
    assert any(text.endswith("// built here") for text in extract_native_sources(source))
    spawning = source.replace("// built here", "void spawn() { std::thread t([]{}); }")
    assert static_check(MODULE_TASK, spawning, "cuda").reason is Reason.THREAD_SPAWN


@pytest.mark.parametrize("body", [
    "src = cuda_src\n        src = src + '// more'",                         # assigned twice
    "src = cuda_src.upper()",                                                # not a literal
    "for src in [cuda_src]:\n            pass",                             # bound by a loop
])
def test_a_source_the_constructor_computes_is_dynamic_code(body: str) -> None:
    assert static_check(MODULE_TASK, _built_in_constructor(body), "cuda").reason is Reason.DYNAMIC_CODE


def _built_from_attribute(body: str, method: str = "") -> str:
    """The constructor stores the source on the instance (`body`) and a method builds the extension
    from `self.src`; `method` adds more to the class."""
    source = _MODULE.replace("ext = load_inline(", "_unused = dict(").replace(
        "self.ext = ext", body + "\n        self.make()")
    make = ("    def make(self):\n        self.ext = load_inline(name='m', cpp_sources='torch::Tensor relu(torch::Tensor x);', "
            "cuda_sources=self.src, functions=['relu'])\n\n" + method + "\n")
    source = source.replace("    def forward(", make + "    def forward(", 1)
    return source.replace("FORWARD", "return self.ext.relu(x)").replace("INIT", "pass").replace("PRELUDE", "")


def test_a_source_the_class_stores_on_the_instance_once_is_seen_and_scanned() -> None:
    """CUDA-L1's released kernels keep their CUDA source in an attribute the constructor sets and a
    helper method passes to load_inline."""
    source = _built_from_attribute("self.src = cuda_src + '// on the instance'")
    verdict = static_check(MODULE_TASK, source, "cuda")
    assert verdict.ok, verdict.detail
    assert any(text.endswith("// on the instance") for text in extract_native_sources(source))
    spawning = source.replace("// on the instance", "void spawn() { std::thread t([]{}); }")
    assert static_check(MODULE_TASK, spawning, "cuda").reason is Reason.THREAD_SPAWN


@pytest.mark.parametrize("body, method", [
    ("self.src = cuda_src", "    def other(self):\n        self.src = '// swapped'\n"),          # stored twice
    ("self.src = cuda_src", "    src = '// a class attribute'\n"),                                # the class's too
    ("self.src = cuda_src", "    def other(self):\n        setattr(self, 'src', '// swapped')\n"),  # setattr
    ("self.src = cuda_src.upper()", ""),                                                          # not a literal
])
def test_a_source_on_the_instance_that_may_change_is_dynamic_code(body: str, method: str) -> None:
    verdict = static_check(MODULE_TASK, _built_from_attribute(body, method), "cuda")
    assert verdict.reason is Reason.DYNAMIC_CODE and "load_inline sources" in verdict.detail, verdict.detail


def test_an_attribute_of_a_rebound_self_is_not_the_instance_constant() -> None:
    source = _built_from_attribute("self.src = cuda_src").replace(
        "    def make(self):\n", "    def make(self):\n        self = self.holder\n", 1)
    assert "self = self.holder" in source
    verdict = static_check(MODULE_TASK, source, "cuda")
    assert verdict.reason is Reason.DYNAMIC_CODE and "load_inline sources" in verdict.detail, verdict.detail


def test_storing_into_a_builtin_does_not_make_it_local() -> None:
    """`open.x = 1` stores into the builtin `open`; it binds no local name `open`."""
    assert _module(prelude="def helper(x):\n    open.mode = x\n    return open").reason is Reason.FILE_ACCESS


@pytest.mark.parametrize("call, reason", [
    ("torch.nn.init._calculate_fan_in_and_fan_out(self.weight)", None),     # shape arithmetic
    ("torch.nn.init._no_grad_uniform_(self.weight, -1, 1)", Reason.DYNAMIC_CODE),
])
def test_only_the_shape_helpers_of_torch_nn_init_are_allowed(call: str, reason: Reason | None) -> None:
    source = _MODULE.replace("FORWARD", "return self.ext.relu(x)").replace("PRELUDE", "").replace(
        "INIT", f"self.weight = torch.nn.Parameter(torch.empty(4, 4))\n        {call}")
    verdict = static_check(MODULE_TASK, source, "cuda")
    assert verdict.reason is reason, verdict.detail


def test_a_function_local_name_hides_the_module_constant_of_that_name() -> None:
    """`cuda_src` is a module constant, but the constructor binds its own: the gate must not scan
    the module's text in its place."""
    body = "cuda_src = ''.join(['x'])\n        src = cuda_src"
    assert static_check(MODULE_TASK, _built_in_constructor(body), "cuda").reason is Reason.DYNAMIC_CODE


def test_native_code_of_module_is_scanned_with_location() -> None:
    source = _MODULE.replace("auto y = torch::empty_like(x);", "auto y = torch::empty_like(x);\n  std::thread t([]{});")
    source = source.replace("FORWARD", "return self.ext.relu(x)").replace("INIT", "pass").replace("PRELUDE", "")
    verdict = static_check(MODULE_TASK, source, "cuda")
    assert verdict.reason is Reason.THREAD_SPAWN
    assert "cuda_sources[0]" in verdict.detail and "line 8" in verdict.detail


def test_module_needs_a_kernel() -> None:
    no_ext = "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    assert static_check(MODULE_TASK, no_ext, "cpu").reason is Reason.NO_CUSTOM_KERNEL
    assert static_check(MODULE_TASK, no_ext, "cpu", allow_torch_ops=True).ok
    assert static_check(MODULE_TASK, "class Model: pass", "cpu").reason is Reason.MALFORMED
    assert static_check(MODULE_TASK, "def (:", "cpu").reason is Reason.MALFORMED


def test_cpu_module_needs_a_raw_pointer_loop() -> None:
    source = (HONEST / "relu_cpu.py").read_text()
    assert static_check(MODULE_TASK, source, "cpu").ok
    no_loop = source.replace("for (int64_t i = 0; i < n; ++i) {", "{ int64_t i = 0;")
    assert static_check(MODULE_TASK, no_loop, "cpu").reason is Reason.NO_CUSTOM_KERNEL


def test_extract_native_sources() -> None:
    sources = extract_native_sources((HONEST / "relu_cuda.py").read_text())
    assert len(sources) == 2
    assert sources[0].startswith("torch::Tensor relu_forward") and "__global__" in sources[1]
    assert extract_native_sources("def (:") == []
    fstring = 'from torch.utils.cpp_extension import load_inline\nB = 256\nload_inline("n", f"int k = {B};")\n'
    assert extract_native_sources(fstring) == ["int k = 256;"]


def test_link_flags() -> None:
    base = (HONEST / "relu_cpu.py").read_text()
    blas = base.replace('extra_cflags=["-O3"],', 'extra_cflags=["-O3"], extra_ldflags=["-lcublas"],')
    assert static_check(MODULE_TASK, blas, "cpu").reason is Reason.NO_CUSTOM_KERNEL
    other = base.replace('extra_cflags=["-O3"],', 'extra_cflags=["-O3"], extra_ldflags=["-lmylib"],')
    assert static_check(MODULE_TASK, other, "cpu").reason is Reason.FORBIDDEN_FLAG


def test_a_wrong_entry_signature_is_named_in_the_refusal() -> None:
    from rl_kernels.evaluation.guards import static_check
    from rl_kernels.tasks import get_task

    three = "#include <torch/extension.h>\nvoid gemm(torch::Tensor a, torch::Tensor b, torch::Tensor c) { }\n"
    verdict = static_check(get_task("hgemm/fp32/128_128_128"), three, "cpu")
    assert verdict.reason == "malformed"
    assert "`gemm` returns void and takes 3 tensor(s)" in verdict.detail and "b_col_major" in verdict.detail
    prose = static_check(get_task("hgemm/fp32/128_128_128"), "hello world\n", "cpu")
    assert prose.reason == "malformed" and "no function taking torch::Tensor" in prose.detail
