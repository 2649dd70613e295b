"""Static checks of C++/CUDA candidate code (hgemm translation units and load_inline sources).

The checks are token scans over the code with comments and literal contents blanked out, so a
banned word in a comment or an error message never rejects, while code itself is always scanned
(the blanking is a real C++ lexer for comments, strings, raw strings, char literals and digit
separators, so a quote trick that fools it also changes what the compiler sees).  The scans are
deliberately a first line only: they catch the common idioms cheaply, before any build or GPU
time; macro indirection, runtime-built handles and every numerical trick are left to the dynamic
checks (fresh inputs, poisoned outputs, guard bytes, re-checked timed calls, dispatch tracing).
"""

from __future__ import annotations

import bisect
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

from rl_kernels.evaluation.reasons import Reason
from rl_kernels.evaluation.refusals import NO_SETTING, REASON_TEXT, finding_line

NativeBackend = Literal["cpu", "cuda"]

_CALL = r"(?<![\w.>])(?:::)?"  # a free-function call: not a member (`.x(` / `->x(`)

# Banned constructs, by the reason they are rejected with.  Each entry is a regular expression
# matched against the code with comments and literal contents blanked (see `blank_literals`).
NATIVE_BANNED: dict[Reason, tuple[str, ...]] = {
    Reason.PROCESS_SPAWN: (
        _CALL + r"(?:v?fork|system|popen|exec(?:l|lp|le|v|vp|ve|vpe)|posix_spawnp?|clone|"
        r"syscall|ptrace|kill|dlopen|dlmopen|dlsym|dlvsym)\s*\(",
        r"#\s*include\s*<(?:unistd\.h|dlfcn\.h|spawn\.h|sys/wait\.h|sys/syscall\.h|"
        r"sys/ptrace\.h|csignal|signal\.h)>",
    ),
    Reason.NETWORK_ACCESS: (
        _CALL + r"(?:socket|getaddrinfo|gethostbyname|inet_pton|inet_addr)\s*\(",
        r"\bsockaddr\w*",
        r"\bcurl_\w+",
        r"#\s*include\s*<(?:sys/socket\.h|netdb\.h|netinet/[\w/.]+|arpa/[\w/.]+|curl/[\w/.]+)>",
    ),
    Reason.FILE_ACCESS: (
        _CALL + r"(?:fopen\w*|freopen|fdopen|open|openat|creat|mmap\w*|write|pwrite|read|"
        r"pread|unlink|rename|truncate|ftruncate|mkdir|opendir|shm_open|memfd_create)\s*\(",
        r"\b(?:std::)?[io]?fstream\b",
        r"\bstd::filesystem\b",
        r"#\s*include\s*<(?:fstream|filesystem|fcntl\.h|sys/mman\.h|sys/stat\.h|dirent\.h)>",
    ),
    Reason.THREAD_SPAWN: (
        r"\bstd::(?:thread|jthread|async)\b",
        r"\bpthread_\w+",
        r"\bthrd_create\b",
        r"\b(?:at|c10)::(?:launch|intraop_launch)\b",
        r"#\s*include\s*<(?:thread|future|pthread\.h)>",
    ),
    Reason.MONKEYPATCH: (
        _CALL + r"(?:setenv|putenv|unsetenv)\s*\(",
    ),
    Reason.DYNAMIC_CODE: (
        r"\bPy(?:Run|Import|Eval|Object_Call)\w*",
        r"\b(?:py|pybind11)::(?:module_?::import|eval|exec|eval_file|globals)\b",
        r"\b(?:cudaGetDriverEntryPoint|cuGetProcAddress)\w*",
        # code loaded at run time (PTX, cubins, NVRTC, nvJitLink) is never scanned
        r"\b(?:cuModuleLoad|cuLibraryLoad|cudaLibraryLoad|cuLinkAdd|cuLinkCreate|nvrtc|nvJitLink)\w*",
        r"__attribute__\s*\(\(\s*constructor",
    ),
    Reason.SIDE_STREAM: (
        r"\bcudaStreamCreate\w*",
        r"\bcuStreamCreate\w*",
        r"\bgetStreamFromPool\b",
        r"\bgetStreamFromExternal\b",
        r"\bcudaStreamNonBlocking\b",
        r"\bCU_STREAM_NON_BLOCKING\b",
        r"\bcudaStreamPerThread\b",
        r"\bCU_STREAM_PER_THREAD\b",
        r"\bcu(?:da)?LaunchHostFunc\b",
        r"\bcudaStreamAddCallback\b",
        r"\bsetCurrentCUDAStream\b",
        r"\bCUDAStream\s*[({]",
        r"\bCUDAStream::UNCHECKED\b",
    ),
    Reason.CACHE_RESIDENCY: (
        # The limit calls are refused whole: the persisting set-aside's limit can be passed by number.
        r"\b(?:cudaDeviceSetLimit|cudaThreadSetLimit|cuCtxSetLimit)\b",
        r"\b(?:cudaLimitPersistingL2CacheSize|CU_LIMIT_PERSISTING_L2_CACHE_SIZE)\b",
        # Access-policy windows, by stream, launch or node attribute, and the fields that fill them.
        r"\b(?:cudaStreamSetAttribute|cuStreamSetAttribute)\b",
        r"\b(?:cudaAccessPolicyWindow|CUaccessPolicyWindow\w*|accessPolicyWindow|hitProp|missProp|hitRatio)\b",
        r"\b(?:cudaAccessProperty\w*|CU_ACCESS_PROPERTY_\w+|\w*ATTRIBUTE_ACCESS_POLICY_WINDOW|"
        r"cuda\w*AttributeAccessPolicyWindow)\b",
        # libcu++'s access properties and PTX cache policies spelled as identifiers (cuda::ptx, CuTe).
        r"\b(?:annotated_ptr|access_property|apply_access_property|associate_access_property|discard_memory|"
        r"__nv_associate_access_property\w*)\b",
        r"\b\w*(?:createpolicy|evict_last|EVICT_LAST|EvictLast)\w*",
    ),
    Reason.CUDA_GRAPH: (
        r"\bcudaGraph\w*",
        r"\bcuGraph\w*",
        r"\bcu(?:da)?Stream(?:Begin|End)Capture\w*",
        r"\bCUDAGraph\b",
    ),
}

# Torch/library compute inside the native code (skipped when the task allows torch ops).
NATIVE_TORCH_COMPUTE: tuple[str, ...] = (
    r"\bcublas\w*",
    r"\bcudnn\w*",
    r"\bCUDABlas\b",
    r"\bblas::\w+",
    r"\bat::native::",
    r"\bat::_ops::",
    r"\btorch::nn::",
    r"\btorch::jit::",
    r"\bDispatcher\b",
    r"\bfindSchema\w*",
)

# Tensor methods that compute (called as `.name(` or `->name(`); allocation/views are not here.
TENSOR_COMPUTE_METHODS: frozenset[str] = frozenset(
    "matmul mm bmm addmm addmv addbmm baddbmm mv dot einsum linear conv1d conv2d conv3d "
    "conv_transpose1d conv_transpose2d softmax log_softmax relu relu_ gelu silu sigmoid tanh "
    "exp exp_ log sqrt rsqrt sum mean amax amin prod cumsum norm layer_norm var std add add_ "
    "sub sub_ mul mul_ div div_ pow clamp clamp_ clamp_min clamp_max where abs neg erf max min "
    "argmax argmin logsumexp masked_fill topk sort".split()
)

# `torch::f(` / `at::f(` calls that are not compute: allocation, streams, device queries.
TORCH_NATIVE_ALLOWED_CALLS: frozenset[str] = frozenset(
    "empty empty_like empty_strided zeros zeros_like ones ones_like full full_like from_blob "
    "tensor device dtype getCurrentCUDAStream getDefaultCUDAStream current_device "
    "getCurrentDeviceProperties getDeviceProperties parallel_for get_num_threads "
    "elementSize toString".split()
)

# CUDA runtime/driver (and timing) symbols a candidate must not define: a definition would shadow
# the real one for the timer if the symbol is interposed.
_INTERPOSED_SYMBOL = re.compile(
    r"\b((?:cuda|cu)(?:Event|Stream|Device|Ctx|Launch|Memcpy|Memset|Malloc|Free|Mem|Graph|Func|"
    r"Profiler|GetLastError|PeekAtLastError|Init|Module)\w*|clock_gettime|gettimeofday|dlsym|"
    r"__cxa_\w+)\s*\([^;{}()]*\)\s*(?:noexcept\s*)?\{"
)
_TORCH_NS_CALL = re.compile(r"\b(?:torch|at)::(?:\w+::)*([a-z_]\w*)\s*(?:<[^<>;]*>)?\s*\(")
_METHOD_CALL = re.compile(r"(?:\.|->)\s*([A-Za-z_]\w*)\s*\(")
# PTX cache policies in inline asm text: evict_last priorities, policies made by createpolicy, and
# loads/stores that take a policy operand (whose 64-bit value can be written out by number).
_ASM_CACHE_POLICY = re.compile(r"evict_last|createpolicy|L2::cache_hint", re.IGNORECASE)
_ASM_SYSCALL = re.compile(r"\b(?:asm|__asm__|__asm)\b[^;]*?\b(syscall|sysenter|int\s+\$?0x80)\b")
_SUSPICIOUS_PATHS = re.compile(r"(/proc/|/dev/|/sys/|/etc/|/tmp/|LD_PRELOAD)")
_INCLUDE_PATH = re.compile(r"#\s*include\s*\"((?:/|\.\./)[^\"]*)\"")

_LAUNCH = re.compile(r"<<<|\bcu(?:da)?LaunchKernel\w*|\bcudaLaunchCooperativeKernel\w*")
# CUTLASS / CuTe launch a kernel the candidate instantiates from inside their headers: the text then
# shows the device-level API, not `__global__` and `<<<>>>`.  The build's evidence (the object
# registers a kernel of its own) confirms it.
_CUTLASS_DEVICE_API = re.compile(
    r"\bcutlass::gemm::device::\w+|\bGemmUniversalAdapter\b|\bcutlass::conv::device::\w+"
    r"|\bcutlass::(?:launch_kernel_on_cluster|device_kernel|Kernel2?)\b|\bcutlass::launch_\w+")
_LOOP = re.compile(r"\b(?:for|while)\s*\(")
_RAW_POINTER = re.compile(r"\bdata_ptr\b|\bmutable_data_ptr\b|\.data\s*<|\b(?:packed_)?accessor\w*\s*<")
_STORE = re.compile(
    r"\]\s*(?:[-+*/%|&^]|<<|>>)?=(?!=)|\*\s*\w+\s*(?:\+\+\s*)?(?:[-+*/]?=)(?!=)|"
    r"\bmemcpy\s*\(|\bstd::(?:copy|fill|transform)\s*\("
)
_HGEMM_ENTRY = re.compile(
    r"\b\w+\s*\(((?:[^(),{};]*\bTensor\b[^(),{};]*,){3}[^(),{};]*\bTensor\b[^(),{};]*)\)\s*\{"
)

_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.MULTILINE)
_STATIC_DECL = re.compile(r"\bstatic\b([^;{}()=\[]*)")
_STATIC_EXEMPT = re.compile(r"\b(?:constexpr|__shared__|__device__|__constant__)\b")
_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")
# A brace opens a function body when the text before it ends like a declarator: `...) const {`.
_FUNCTION_HEAD = re.compile(
    r"\)\s*(?:const|noexcept|override|final|mutable|volatile|&&?|->\s*[\w:<>,\s*&]+)*\s*$"
)

# Order in which findings are reported: the most dangerous construct names the rejection.
REASON_PRIORITY: tuple[Reason, ...] = (
    Reason.MALFORMED,
    Reason.PROCESS_SPAWN,
    Reason.NETWORK_ACCESS,
    Reason.FILE_ACCESS,
    Reason.THREAD_SPAWN,
    Reason.FORBIDDEN_FLAG,
    Reason.FORBIDDEN_IMPORT,
    Reason.MONKEYPATCH,
    Reason.DYNAMIC_CODE,
    Reason.TENSOR_SUBCLASS,
    Reason.SIDE_STREAM,
    Reason.CUDA_GRAPH,
    Reason.CACHE_RESIDENCY,
    Reason.STALE_OUTPUT,
    Reason.NO_CUSTOM_KERNEL,
)


@dataclass(frozen=True)
class Finding:
    """One offending construct: the reason, the text that matched, where, why it is banned and what to
    do instead (empty `why`/`fix`: the reason's sentence in `refusals.REASON_TEXT`)."""

    reason: Reason
    token: str
    line: int
    where: str
    why: str = ""
    fix: str = ""

    def describe(self) -> str:
        return finding_line(self.reason, self.line, self.where, self.token, self.why, self.fix)


def blank_literals(code: str) -> tuple[str, list[tuple[int, str]]]:
    """Blank comments and literal contents (newlines kept, quotes kept); return the literals too.

    Offsets and line numbers of the result match the input, so a match can be reported by line.
    """
    out = list(code)
    literals: list[tuple[int, str]] = []
    i, n = 0, len(code)

    def blank(start: int, end: int) -> None:
        for j in range(start, end):
            if out[j] != "\n":
                out[j] = " "

    while i < n:
        ch = code[i]
        if code.startswith("//", i):
            j = i
            while j < n and code[j] != "\n":
                j += 2 if code[j] == "\\" and j + 1 < n else 1
            blank(i, j)
            i = j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif ch == '"':
            raw = re.search(r"(?:^|[^\w])(?:u8|[uUL])?R$", code[max(0, i - 3):i])
            if raw:
                m = re.match(r'"([^()\\\s]{0,16})\(', code[i:])
                delim = ")" + (m.group(1) if m else "") + '"'
                start = i + (m.end() if m else 1)
                j = code.find(delim, start)
                j = n if j < 0 else j
                literals.append((start, code[start:j]))
                blank(start, j)
                i = j + len(delim)
            else:
                j = i + 1
                while j < n and code[j] not in '"\n':
                    j += 2 if code[j] == "\\" else 1
                literals.append((i + 1, code[i + 1:j]))
                blank(i + 1, j)
                i = j + 1
        elif ch == "'" and not _is_digit_separator(code, i):
            j = i + 1
            while j < n and code[j] not in "'\n":
                j += 2 if code[j] == "\\" else 1
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out), literals


def _is_digit_separator(code: str, i: int) -> bool:
    """`1'000'000`: a quote inside a number token is a C++14 digit separator, not a char literal."""
    j = i
    while j > 0 and (code[j - 1].isalnum() or code[j - 1] in "_.'"):
        j -= 1
    token = code[j:i]
    return bool(token) and (token[0].isdigit() or (token[0] == "." and token[1:2].isdigit()))


class _Lines:
    """Offset -> 1-based line number."""

    def __init__(self, text: str):
        self._starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def __call__(self, offset: int) -> int:
        return bisect.bisect_right(self._starts, offset)


def _scan_banned(code: str, lines: _Lines, where: str, allow_torch_ops: bool) -> list[Finding]:
    found: list[Finding] = []
    for reason, patterns in NATIVE_BANNED.items():
        for pattern in patterns:
            for m in re.finditer(pattern, code):
                found.append(Finding(reason, m.group(0).strip(), lines(m.start()), where))
    for m in _INTERPOSED_SYMBOL.finditer(code):
        found.append(Finding(Reason.MONKEYPATCH, m.group(1), lines(m.start()), where,
                             "a definition of a CUDA runtime or timing symbol would shadow the real one the timer "
                             "calls", f"rename your function — {NO_SETTING}"))
    if not allow_torch_ops:
        found += _scan_torch_compute(code, lines, where)
    return found


def _scan_torch_compute(code: str, lines: _Lines, where: str) -> list[Finding]:
    why = "torch, ATen, cuBLAS or cuDNN does the work inside the extension instead of your kernel"
    found = [Finding(Reason.NO_CUSTOM_KERNEL, m.group(0), lines(m.start()), where, why)
             for pattern in NATIVE_TORCH_COMPUTE for m in re.finditer(pattern, code)]
    for m in _TORCH_NS_CALL.finditer(code):
        if m.group(1) not in TORCH_NATIVE_ALLOWED_CALLS:
            found.append(Finding(Reason.NO_CUSTOM_KERNEL, m.group(0).rstrip("( "), lines(m.start()),
                                 where, why))
    for m in _METHOD_CALL.finditer(code):
        if m.group(1) in TENSOR_COMPUTE_METHODS:
            found.append(Finding(Reason.NO_CUSTOM_KERNEL, m.group(0).rstrip("( "), lines(m.start()),
                                 where, why))
    return found


def _scan_raw(original: str, literals: list[tuple[int, str]], lines: _Lines, where: str) -> list[Finding]:
    """Checks that need literal contents: asm syscalls, system paths, absolute includes."""
    found = [Finding(Reason.PROCESS_SPAWN, m.group(1), lines(m.start()), where,
                     "a raw system call in inline asm bypasses every library the sandbox vets")
             for m in _ASM_SYSCALL.finditer(original)]
    found += [Finding(Reason.FILE_ACCESS, m.group(1), lines(m.start()), where,
                      "an include by absolute or parent path reads files outside the build",
                      f"include headers by name (<...>) or paste the code in — {NO_SETTING}")
              for m in _INCLUDE_PATH.finditer(original)]
    for start, text in _joined_literals(original, literals):
        found += [Finding(Reason.CACHE_RESIDENCY, m.group(0), lines(start), where)
                  for m in _ASM_CACHE_POLICY.finditer(text)]
    for start, text in literals:
        for m in _SUSPICIOUS_PATHS.finditer(text):
            reason = Reason.MONKEYPATCH if m.group(1) == "LD_PRELOAD" else Reason.FILE_ACCESS
            found.append(Finding(reason, m.group(1), lines(start + m.start()), where,
                                 "a system path or LD_PRELOAD in a string reaches outside the build",
                                 f"remove the string — {NO_SETTING}"))
    return found


_BETWEEN_LITERALS = re.compile(r'^["\s]*(?:u8|[uUL])?R?"?$')


def _joined_literals(original: str, literals: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Adjacent string literals joined as the compiler joins them (`"evict_" "last"` is one string),
    each run with the offset of its first literal."""
    runs: list[tuple[int, str]] = []
    end = -1
    for start, text in literals:
        if runs and _BETWEEN_LITERALS.match(original[end:start]):
            runs[-1] = (runs[-1][0], runs[-1][1] + text)
        else:
            runs.append((start, text))
        end = start + len(text)
    return runs


def _function_scopes(code: str) -> list[tuple[int, int]]:
    """(open, close) offsets of brace blocks that are function bodies or blocks inside them."""
    stack: list[tuple[int, bool]] = []  # (offset of '{', is-function-scope)
    spans: list[tuple[int, int]] = []
    last_boundary = 0
    for i, ch in enumerate(code):
        if ch == "{":
            in_function = bool(stack and stack[-1][1])
            is_function = in_function or _FUNCTION_HEAD.search(code[last_boundary:i]) is not None
            stack.append((i, is_function))
            last_boundary = i + 1
        elif ch == "}":
            if stack:
                start, is_function = stack.pop()
                if is_function and not (stack and stack[-1][1]):
                    spans.append((start, i))
            last_boundary = i + 1
        elif ch == ";":
            last_boundary = i + 1
    return spans


def _scan_persistent_state(code: str, lines: _Lines, where: str) -> list[Finding]:
    """Mutable function-local statics: the idiom behind output caching and batch-and-skip."""
    code = _DIRECTIVE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), code)  # `schedule(static)`
    spans = _function_scopes(code)
    found = []
    for m in _STATIC_DECL.finditer(code):
        if not any(start < m.start() < end for start, end in spans):
            continue
        decl = m.group(1)
        if _STATIC_EXEMPT.search(decl) or _is_const_object(decl):
            continue  # const tables, constexpr sizes, __shared__ buffers
        found.append(Finding(Reason.STALE_OUTPUT, f"static{decl}".strip(), lines(m.start()), where))
    return found


def _is_const_object(decl: str) -> bool:
    """`static const T x` / `static T* const p` yes; `static const T* p` and `map<const K, V>` no."""
    while _TEMPLATE_ARGS.search(decl):
        decl = _TEMPLATE_ARGS.sub(" ", decl)
    return re.search(r"\bconst\b", decl.rpartition("*")[2]) is not None


# Directives dropped before the candidate's own macros are expanded: no file is read (#include,
# #embed), every #if branch is kept (all of them are scanned), nothing stops the expansion (#error).
_NOT_EXPANDED = re.compile(r"^[ \t]*#[ \t]*(?:include|include_next|import|embed|if|ifdef|ifndef|elif|elifdef|"
                           r"elifndef|else|endif|error|warning|line)\b[^\n]*$", re.MULTILINE)
_PASTE_TIMEOUT_S = 10.0
_PASTE_MAX_CHARS = 8 << 20


def expand_own_macros(code: str) -> str | None:
    """The source with its own macros expanded by the host's C preprocessor, every `#if` branch kept
    and no header read: identifiers built by token pasting (`a##b`) become visible to the scans.
    None when no preprocessor is installed or it refuses the text (the caller then refuses the
    pasting itself).  Macros of headers stay unexpanded; what they could build is left to the
    dynamic checks, like any other indirection."""
    compiler = shutil.which("cpp") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        return None
    text = _NOT_EXPANDED.sub("", code.replace("\\\n", " "))
    argv = [compiler] + ([] if compiler.endswith("cpp") else ["-E"]) + ["-P", "-w", "-nostdinc", "-x", "c++", "-"]
    try:
        res = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=_PASTE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0 or len(res.stdout) > _PASTE_MAX_CHARS:
        return None
    return res.stdout


def _scan_pasted(code: str, blanked: str, lines: _Lines, where: str, allow_torch_ops: bool) -> list[Finding]:
    """Token pasting is scanned after expansion (the banned constructs it builds), or refused when
    it cannot be expanded here."""
    first = blanked.find("##")
    if first < 0:
        return []
    expanded = expand_own_macros(code)
    if expanded is None:
        return [Finding(Reason.DYNAMIC_CODE, "##", lines(first), where,
                        "token pasting builds identifiers the scan cannot see, and the preprocessor here could "
                        "not expand it", f"write the identifiers out — {NO_SETTING}")]
    text, _ = blank_literals(expanded)
    return [Finding(f.reason, f.token, lines(first), where,
                    f"built by a macro: {f.why or REASON_TEXT[f.reason][0]}", f.fix)
            for f in _scan_banned(text, _Lines(text), where, allow_torch_ops)]


def check_native(code: str, where: str, allow_torch_ops: bool) -> list[Finding]:
    """All banned-construct findings in one C++/CUDA source (no kernel-existence requirement)."""
    blanked, literals = blank_literals(code)
    lines = _Lines(code)
    return (_scan_banned(blanked, lines, where, allow_torch_ops)
            + _scan_pasted(code, blanked, lines, where, allow_torch_ops)
            + _scan_raw(code, literals, lines, where)
            + _scan_persistent_state(blanked, lines, where))


def has_custom_kernel(sources: list[str], backend: NativeBackend) -> bool:
    """cuda: a `__global__` function and a launch, or a CUTLASS/CuTe device-level launch of a kernel
    instantiated here; cpu: a loop storing through a raw pointer."""
    code = "\n".join(blank_literals(s)[0] for s in sources)
    if backend == "cuda":
        own = "__global__" in code and _LAUNCH.search(code) is not None
        return own or _CUTLASS_DEVICE_API.search(code) is not None
    return all(p.search(code) for p in (_LOOP, _RAW_POINTER, _STORE))


def has_hgemm_entry(code: str) -> bool:
    """A function taking the four tensors of the CUDA-L2 ABI (a, b, b_col_major, c)."""
    return _HGEMM_ENTRY.search(blank_literals(code)[0]) is not None


_TENSOR_FUNCTION = re.compile(r"\b(\w+)\s+(\w+)\s*\(([^()]*\bTensor\b[^()]*)\)\s*\{")


def hgemm_entry_diagnosis(code: str) -> str:
    """Why no function matches the entry point: the functions taking tensors that come closest."""
    want = "the entry point is `void NAME(torch::Tensor a, torch::Tensor b, torch::Tensor b_col_major, torch::Tensor c)`"
    close = []
    for ret, name, params in _TENSOR_FUNCTION.findall(blank_literals(code)[0]):
        tensors = len(re.findall(r"\bTensor\b", params))
        others = len([p for p in params.split(",") if p.strip()]) - tensors
        close.append(f"`{name}` returns {ret} and takes {tensors} tensor(s)" + (f" and {others} other parameter(s)"
                                                                               if others else ""))
    if not close:
        return f"no function taking torch::Tensor arguments; {want}"
    return f"{want}; found {'; '.join(close[:4])}"


def by_priority(findings: list[Finding]) -> list[Finding]:
    """Findings in the order a refusal lists them: most dangerous reason first, then earliest line."""
    rank = {r: i for i, r in enumerate(REASON_PRIORITY)}
    return sorted(findings, key=lambda f: (rank.get(f.reason, len(rank)), f.where, f.line))


def first_by_priority(findings: list[Finding]) -> Finding | None:
    """The finding that names the rejection (its reason is the refusal's code)."""
    ordered = by_priority(findings)
    return ordered[0] if ordered else None
