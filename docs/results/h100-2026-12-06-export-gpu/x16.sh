#!/bin/bash
# Device-side driver for the export/op measurements: bash .stage/x16.sh SECTION [args]; output under $OUT.
#   setup                 nvidia-cutlass wheel into /tmp/site (pydantic etc. come from h200.sh vsetup's bundle)
#   tests SECONDS [-k EXPR]   tests/gpu/test_export_gpu.py and the evaluator's GPU tests selected by EXPR
#   export SECONDS        CUDA-L2 samples + the cuda seed through `rl-kernels export` (min_speedup 0, 20 more shapes)
#   bench SECONDS         benchmarks/export_op.py on that package
#   thr SECONDS           benchmarks/eval_throughput.py: beside_job+fork vs beside_job+fork+device (REPS, default 10)
#   evalgpu SECONDS [-k EXPR]  tests/gpu/test_evaluator_gpu.py (default: all but the four slow build/compile tests)
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SHAPES=1000_1024_1024,1024_1000_1000,960_1024_1024,100_128_128,120_128_128,128_100_128,4000_4096_4096,4096_4000_4096,4096_4096_4000,3900_4096_4096,4000_128_4096,4096_120_4096,4096_128_4000,1000_1000_1000,2000_2048_2048,1900_2048_2048,500_1024_1024,64_128_128,200_256_256,100_100_100
sec=${1:?section}; shift
case $sec in
  setup)   # the few wheels the export path needs (pydantic, ninja, NVML bindings, CUTLASS headers)
    python3 -c "import cutlass_library, pydantic, pynvml" 2>/dev/null || python3 -m pip install -q --no-deps --no-index \
      --disable-pip-version-check --target /tmp/site .stage/wheels/*.whl
    which ninja
    python3 -c "import cutlass_library, pydantic, torch; print('cutlass ok, pydantic', pydantic.VERSION, 'torch', torch.__version__)"
    nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv,noheader; nproc; git log --oneline -1;;
  tests)
    secs=$1; shift
    timeout "$secs" python3 -m pytest -q -rA tests/gpu/test_export_gpu.py "$@" -p no:cacheprovider --durations=8 \
      > "$OUT/tests.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests.txt"
    grep -E "^(PASSED|FAILED|ERROR)|^E  " "$OUT/tests.txt" | cut -c1-250 | tail -40; tail -14 "$OUT/tests.txt" | cut -c1-250;;
  export)
    timeout "$1" python3 -m rl_kernels.cli export --config configs/h200.yaml --backend cuda --from .stage/l2 \
      --out /tmp/exp --shapes $SHAPES eval.build.cache_dir=/tmp/rlkc export.min_speedup=0 > "$OUT/export.log" 2>&1
    echo ".rc=$?" >> "$OUT/export.log"
    cp /tmp/exp/rlk_hgemm_cuda/manifest.json "$OUT/" 2>/dev/null
    grep -v "^built" "$OUT/export.log" | cut -c1-260 | tail -50;;
  bench)
    timeout "$1" python3 benchmarks/export_op.py --package /tmp/exp/rlk_hgemm_cuda --reps 100 > "$OUT/export_op.txt" 2>&1
    echo ".rc=$?" >> "$OUT/export_op.txt"; cut -c1-300 "$OUT/export_op.txt" | tail -80;;
  thr)     # evaluations/min, workers forked ahead without vs with their CUDA contexts made ahead, same call
    timeout "$1" python3 benchmarks/eval_throughput.py --config configs/h200.yaml \
      --tasks ${TASKS:-hgemm/fp32/2048_2048_2048,builtin/softmax} --paths beside_job+fork,beside_job+fork+device \
      --repeats ${REPS:-10} --out "$OUT/thr.json" eval.build.cache_dir=/tmp/rlkc > "$OUT/thr.log" 2>&1
    echo ".rc=$?" >> "$OUT/thr.log"; cut -c1-400 "$OUT/thr.log" | tail -24
    timeout 60 python3 .stage/warmprobe.py /tmp/rlkc > "$OUT/warmprobe.txt" 2>&1; cat "$OUT/warmprobe.txt" | tail -20;;
  evalgpu) # the evaluator's GPU suite (hack verdicts under the per-thread-stream build, started workers)
    secs=$1; shift
    timeout "$secs" python3 -m pytest -q -rA tests/gpu/test_evaluator_gpu.py -k "${1:-not kept_between and not cuda_guard and not slim_headers and not compiled_baseline}" \
      -p no:cacheprovider --durations=6 > "$OUT/evalgpu.txt" 2>&1; echo ".rc=$?" >> "$OUT/evalgpu.txt"
    grep -E "^(PASSED|FAILED|ERROR)|^E  " "$OUT/evalgpu.txt" | cut -c1-250 | tail -60; tail -12 "$OUT/evalgpu.txt" | cut -c1-250;;
  nvtime)  # where a module build's seconds go (capture, binding, nvcc phases, link, evidence)
    timeout "$1" python3 .stage/nvtime.py /tmp/rlkc-nvt > "$OUT/nvtime.txt" 2>&1; echo ".rc=$?" >> "$OUT/nvtime.txt"
    cut -c1-400 "$OUT/nvtime.txt" | tail -20;;
  *) echo "unknown section $sec"; exit 2;;
esac
