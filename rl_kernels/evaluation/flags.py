"""The compiler and linker flags a candidate may pass to load_inline: an allow list, not a deny list.

A flag is code on the build host: `-wrapper` runs a program per compiler pass, `-fplugin` loads one,
`-B` and `-specs` swap the toolchain, `@file` reads more flags, `-include` / `-imacros` pull in any
file, and `-D NAME=fork` hides a banned call from the source scan.  So only flags that tune code
generation are accepted, and macros only with numeric values.  Include paths are refused (builds
get torch's, CUDA's and CUTLASS's headers already), as are link flags beyond `-lcuda` / OpenMP
(`-lcublas` and friends would be a library doing the work).
"""

from __future__ import annotations

import re

_MACRO = r"-[DU][A-Za-z_]\w*(?:=-?[0-9][0-9.xXa-fA-FuUlLf]*)?"
# Host compiler (g++ / clang++) flags.
HOST_FLAGS: tuple[str, ...] = (
    r"-O[0-3sz]?", r"-Ofast", r"-g[0-3]?", r"-w", r"-W[a-z][\w=+-]*", r"-std=(?:c|gnu)\+\+(?:14|17|20|2a|23|2b)",
    r"-fopenmp", r"-fopenmp-simd", r"-ffast-math", r"-funroll(?:-all)?-loops", r"-fno-math-errno",
    r"-fno-trapping-math", r"-fno-strict-aliasing", r"-fomit-frame-pointer", r"-ftree-vectorize",
    r"-fno-tree-vectorize", r"-ffp-contract=(?:fast|on|off)", r"-fPIC", r"-fvisibility=(?:hidden|default)",
    r"-fno-exceptions", r"-fno-rtti", r"-fassociative-math", r"-freciprocal-math", r"-fno-signed-zeros",
    r"-march=[\w.-]+", r"-mtune=[\w.-]+", r"-mcpu=[\w.-]+", r"-m(?:no-)?(?:avx\w*|sse\w*|fma|f16c|bmi2?|popcnt|amx[\w-]*)",
    r"-mprefer-vector-width=(?:128|256|512)", _MACRO,
)
# nvcc flags (host flags go through -Xcompiler / --compiler-options and are checked as host flags).
NVCC_FLAGS: tuple[str, ...] = (
    r"-O[0-3]", r"-g", r"-G", r"-lineinfo", r"--?use_fast_math", r"--?std=c\+\+(?:14|17|20)",
    r"--expt-relaxed-constexpr", r"--expt-extended-lambda", r"--extended-lambda", r"-res-usage", r"--resource-usage",
    r"--?maxrregcount=\d+", r"--?ftz=(?:true|false)", r"--?prec-div=(?:true|false)", r"--?prec-sqrt=(?:true|false)",
    r"--?fmad=(?:true|false)", r"--restrict", r"--extra-device-vectorization", r"-w", r"--disable-warnings",
    r"(?:-Xptxas|--ptxas-options)=[-\w,=.]+", r"-Xptxas", r"--ptxas-options", r"-Xcompiler", r"--compiler-options",
    r"(?:-Xcompiler|--compiler-options)=[-\w,=.+]+", _MACRO,
)
LINK_FLAGS: tuple[str, ...] = (r"-lcuda", r"-lgomp", r"-fopenmp")
_PTXAS_ARGS = re.compile(r"-v|--verbose|-O[0-3]|--?warn-on-spills|--?warn-on-local-memory-usage|"
                         r"--?allow-expensive-optimizations=(?:true|false)|--?maxrregcount=\d+|-dlcm=(?:ca|cg|cs)")


def _matches(flag: str, patterns: tuple[str, ...]) -> bool:
    return any(re.fullmatch(p, flag) for p in patterns)


def _host_flags_ok(flags: list[str], where: str) -> str | None:
    for flag in flags:
        if not _matches(flag, HOST_FLAGS):
            return f"{where}: compiler flag {flag!r} is not on the allow list"
    return None


def _nvcc_flags_ok(flags: list[str]) -> str | None:
    expect: str | None = None   # what the next token must be: "host" or "ptxas"
    for flag in flags:
        if expect == "host":
            bad = _host_flags_ok(flag.split(","), "extra_cuda_cflags (host part)")
            if bad:
                return bad
            expect = None
            continue
        if expect == "ptxas":
            bad = [a for a in flag.split(",") if not _PTXAS_ARGS.fullmatch(a)]
            if bad:
                return f"extra_cuda_cflags: ptxas option {bad[0]!r} is not on the allow list"
            expect = None
            continue
        if not _matches(flag, NVCC_FLAGS):
            return f"extra_cuda_cflags: nvcc flag {flag!r} is not on the allow list"
        if flag in ("-Xcompiler", "--compiler-options"):
            expect = "host"
        elif flag in ("-Xptxas", "--ptxas-options"):
            expect = "ptxas"
        elif "=" in flag and flag.split("=", 1)[0] in ("-Xcompiler", "--compiler-options"):
            bad = _host_flags_ok(flag.split("=", 1)[1].split(","), "extra_cuda_cflags (host part)")
            if bad:
                return bad
        elif "=" in flag and flag.split("=", 1)[0] in ("-Xptxas", "--ptxas-options"):
            bad = [a for a in flag.split("=", 1)[1].split(",") if not _PTXAS_ARGS.fullmatch(a)]
            if bad:
                return f"extra_cuda_cflags: ptxas option {bad[0]!r} is not on the allow list"
    if expect is not None:
        return "extra_cuda_cflags: ends with an option that needs a value"
    return None


def check_flags(extra_cflags: list[str], extra_cuda_cflags: list[str], extra_ldflags: list[str],
                extra_include_paths: list[str]) -> str | None:
    """None when every flag is allowed, else a message naming the first one that is not."""
    if extra_include_paths:
        return f"extra_include_paths {extra_include_paths[:2]}: builds get torch, CUDA and CUTLASS headers already"
    for flag in extra_ldflags:
        if not _matches(flag, LINK_FLAGS):
            return f"extra_ldflags: link flag {flag!r} is not on the allow list (-lcuda, -lgomp, -fopenmp)"
    return _host_flags_ok(extra_cflags, "extra_cflags") or _nvcc_flags_ok(extra_cuda_cflags)
