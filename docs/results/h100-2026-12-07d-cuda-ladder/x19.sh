#!/bin/bash
# Device-side driver: bash .stage/x19.sh SECTION [args]; output under $OUT.
#   setup                        the small wheels (pydantic, ninja, NVML, CUTLASS) into /tmp/site
#   ladder MODE SECONDS [overrides]   ($TASKS: comma-separated task ids) benchmarks/ladder.py --backend cuda --mode MODE --jobs 16 (configs/h200.yaml)
#   laddertest SECONDS [EXPR]          the gpu ladder test (every cuda rung against the float64 reference), same extensions dir
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PATH=/tmp/site/bin:$PATH
export TORCH_EXTENSIONS_DIR=/tmp/ladder-ext
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sec=${1:?section}; shift
case $sec in
  setup)
    python3 -c "import cutlass_library, pydantic, pynvml" 2>/dev/null || python3 -m pip install -q --no-deps --no-index \
      --disable-pip-version-check --target /tmp/site .stage/wheels/*.whl 2>&1 | tail -3
    which ninja
    python3 -c "import cutlass_library, pydantic, torch, triton; print('pydantic', pydantic.VERSION, 'torch', torch.__version__, 'triton', triton.__version__)"
    nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv,noheader; nproc; git log --oneline -1;;
  ladder)
    mode=$1; secs=$2; shift 2
    timeout "$secs" python3 benchmarks/ladder.py --config configs/h200.yaml --backend cuda --mode "$mode" --jobs 16 ${TASKS:+--tasks $TASKS} \
      --out "$OUT/ladder-$mode.json" eval.build.cache_dir=/tmp/rlkc "$@" > "$OUT/ladder-$mode.log" 2>&1
    echo ".rc=$?" >> "$OUT/ladder-$mode.log"
    grep -E "^\| |build phase|rungs of|\.rc=" "$OUT/ladder-$mode.log" | cut -c1-200 | tail -60
    grep '^{' "$OUT/ladder-$mode.log" | grep -v '"verdict": "correct"' | cut -c1-600 | head -12;;
  laddertest)
    timeout "$1" python3 -m pytest -v -rA tests/unit/test_builtin_ladder.py -k "cuda_rung_matches and ${2:-cuda}" -p no:cacheprovider \
      --durations=5 > "$OUT/laddertest.txt" 2>&1; echo ".rc=$?" >> "$OUT/laddertest.txt"
    grep -E "FAILED|ERROR|^E  " "$OUT/laddertest.txt" | cut -c1-250 | head -30; tail -10 "$OUT/laddertest.txt" | cut -c1-250;;
  *) echo "unknown section $sec"; exit 2;;
esac
