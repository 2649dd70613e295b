#!/bin/bash
# One device call for the evaluator's GPU evidence (not run yet): bash .stage/e46.sh [SECS for the gpu suite] [1: hang_cost too]
# Carry .stage/runcode (git archive of the commit), this script as .stage/e46.sh and .gpu_bundle/e46 (pydantic,
# pydantic-core, annotated-types, typing-inspection wheels; cutlass_site.tar.gz: cutlass_library + its dist-info).
set -u
cd .stage/runcode 2>/dev/null && B=../.. || B=.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/site
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
{
  python3 -m pip install -q --no-index --no-deps --target /tmp/site $B/.gpu_bundle/e46/*.whl
  tar -C /tmp/site -xzf $B/.gpu_bundle/e46/cutlass_site.tar.gz
  nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,driver_version --format=csv,noheader
  python3 -c "import torch, pydantic, cutlass_library; print(torch.__version__, pydantic.__version__)"
  git log --oneline -1 2>/dev/null; date -u
} > "$OUT/setup.txt" 2>&1; cat "$OUT/setup.txt"
el "fp32 rule"
timeout 100 python3 benchmarks/fp32_rule.py --device cuda --n 1024 2048 4096 --sets 2 --out "$OUT/fp32_rule.json" \
  > "$OUT/fp32_rule.txt" 2>&1; tail -25 "$OUT/fp32_rule.txt"
el "hang tests (cuda twins)"
timeout 200 python3 -m pytest -q tests/gpu/test_evaluator_gpu.py -k "hang_on_the_device or slow_honest_kernel_on_the_device or later_calls_are_not_on_the_device" \
  --durations=10 > "$OUT/hang_tests.txt" 2>&1; tail -22 "$OUT/hang_tests.txt"
[ "${2:-1}" = 1 ] && { el "hang cost (cuda)"
timeout 150 python3 benchmarks/hang_cost.py --config configs/h200.yaml --task hgemm/fp32/2048_2048_2048 eval.backend=cuda \
  > "$OUT/hang_cost.txt" 2>&1; tail -12 "$OUT/hang_cost.txt"; }
[ "${1:-0}" -gt 0 ] && { el "gpu suite"
timeout "${1:-0}" python3 -m pytest -q tests/gpu -k "not hang_on_the_device and not slow_honest_kernel_on_the_device" --durations=15 \
  > "$OUT/gpu_suite.txt" 2>&1; tail -40 "$OUT/gpu_suite.txt"; }
el done
