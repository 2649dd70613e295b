#!/bin/bash
# Device-side driver: bash .stage/h200.sh SECTION [args]; every section writes under $OUT.
set -u
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
setup() {
  if [ ! -f /tmp/site/.ok ]; then
    bash .whl/offline_install.sh .whl /tmp/site > "$OUT/setup.txt" 2>&1 && touch /tmp/site/.ok
  fi
  { nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
    python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)"
    nproc; date; git log --oneline -1 2>/dev/null; } >> "$OUT/setup.txt" 2>&1
}
sec=$1; shift
setup
case $sec in
  setup) cat "$OUT/setup.txt";;
  probe) timeout "$1" python3 .stage/probe.py "${@:2}" > "$OUT/probe.txt" 2>&1; echo ".rc=$?" >> "$OUT/probe.txt"; cat "$OUT/probe.txt";;
  tests) timeout "$1" python3 -m pytest -q -x tests/gpu -k "$2" --durations=20 -p no:cacheprovider > "$OUT/tests-${3:-gpu}.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-${3:-gpu}.txt"; tail -25 "$OUT/tests-${3:-gpu}.txt";;
  throughput) timeout "$1" python3 benchmarks/eval_throughput.py --config configs/h200.yaml --tasks "$2" --repeats "${3:-5}" --paths "${PATHS:-off,after_job,beside_job}" \
      --out "$OUT/throughput.json" eval.build.cache_dir=/tmp/rlkc > "$OUT/throughput.log" 2>&1; echo ".rc=$?" >> "$OUT/throughput.log"; tail -12 "$OUT/throughput.log";;
  repro) timeout "$1" python3 benchmarks/reproducibility.py --config configs/h200.yaml --backend cuda --repeats "${REPEATS:-10}" \
      --baselines "$2" --tasks "$3" --out "$OUT/repro-$4.json" eval.launches.enabled=false eval.build.cache_dir=/tmp/rlkc \
      > "$OUT/repro-$4.log" 2>&1; echo ".rc=$?" >> "$OUT/repro-$4.log"; tail -20 "$OUT/repro-$4.log";;
  ladder) timeout "$1" python3 benchmarks/ladder.py --config configs/h200.yaml --backend cuda --jobs 16 --out "$OUT/ladder.json" \
      eval.build.cache_dir=/tmp/rlkc > "$OUT/ladder.log" 2>&1; echo ".rc=$?" >> "$OUT/ladder.log"; tail -30 "$OUT/ladder.log";;
  callA) timeout "$1" python3 -m pytest -q tests/gpu -k "not kept_between and not cuda_guard" --durations=25 -p no:cacheprovider > "$OUT/tests-all.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-all.txt"; tail -40 "$OUT/tests-all.txt"
         timeout "$2" python3 -m pytest -q tests/gpu -k "cuda_guard or kept_between" --durations=5 -p no:cacheprovider > "$OUT/tests-slow.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-slow.txt"; tail -8 "$OUT/tests-slow.txt";;
  rest) timeout "$1" python3 .stage/rest.py "$(( $1 - 10 ))"; for f in "$OUT"/repro-*.log; do echo "== $f"; grep -E "^\{\"task|Error" "$f" | cut -c1-400 | tail -20; tail -n 2 "$f" | cut -c1-300; done;;
  fork) timeout "$1" python3 -m pytest -q -x tests/gpu -k "started_worker_holds or corrupts" --durations=5 -p no:cacheprovider > "$OUT/tests-fork.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-fork.txt"; tail -15 "$OUT/tests-fork.txt";;
  callB) bash .stage/h200.sh throughput "$1" hgemm/fp32/2048_2048_2048,builtin/softmax 4;;
  v1) timeout "$1" python3 -m pytest -q tests/gpu -k "started_worker_holds or corrupts or compiled_baseline_runs_in_a_forked or slim_headers or cuda_guard" --durations=8 -p no:cacheprovider > "$OUT/tests-v1.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-v1.txt"; tail -30 "$OUT/tests-v1.txt"
      PATHS=off,off+fork,beside_job+fork bash .stage/h200.sh throughput "$2" hgemm/fp32/2048_2048_2048,builtin/softmax 5;;
  builds) timeout "$1" python3 benchmarks/module_builds.py --backend cuda --paths slim --config configs/h200.yaml --out "$OUT/builds-slim.json" > "$OUT/builds-slim.log" 2>&1; echo ".rc=$?" >> "$OUT/builds-slim.log"; tail -8 "$OUT/builds-slim.log"
      timeout "$2" python3 benchmarks/module_builds.py --backend cuda --paths torch --tasks "$3" --config configs/h200.yaml --out "$OUT/builds-torch.json" > "$OUT/builds-torch.log" 2>&1; echo ".rc=$?" >> "$OUT/builds-torch.log"; tail -8 "$OUT/builds-torch.log";;
  dbg) PATHS=off+fork timeout "$1" python3 benchmarks/eval_throughput.py --config configs/h200.yaml --tasks builtin/softmax --repeats 1 --paths off+fork \
      --out "$OUT/dbg.json" eval.build.cache_dir=/tmp/rlkc > "$OUT/dbg.log" 2>&1; echo ".rc=$?" >> "$OUT/dbg.log"; grep -v "^|" "$OUT/dbg.log" | tail -40
      timeout "$2" python3 -m pytest -q -x tests/gpu -k "compiled_baseline_runs_in_a_forked or corrupts" -p no:cacheprovider > "$OUT/tests-dbg.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-dbg.txt"; tail -60 "$OUT/tests-dbg.txt" | cut -c1-400;;
  fsprobe) timeout "$1" python3 .stage/fsprobe.py > "$OUT/fsprobe.txt" 2>&1; echo ".rc=$?" >> "$OUT/fsprobe.txt"; cut -c1-300 "$OUT/fsprobe.txt" | tail -80;;
  diag) bash .stage/h200.sh fsprobe 100; timeout "$2" python3 -m pytest -q -x tests/gpu -k "compiled_baseline_runs_in_a_forked or started_worker_holds" -p no:cacheprovider > "$OUT/tests-diag.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-diag.txt"; grep -E "^E |rc=|passed|failed" "$OUT/tests-diag.txt" | cut -c1-1500 | tail -20; cat /tmp/rlk-forkserver-*/stderr.txt 2>/dev/null | tail -20;;
  export) SH=1000_1024_1024,1024_1000_1000,960_1024_1024,100_128_128,120_128_128,128_100_128,4000_4096_4096,4096_4000_4096,4096_4096_4000,3900_4096_4096,4000_128_4096,4096_120_4096,4096_128_4000,1000_1000_1000,2000_2048_2048,1900_2048_2048,500_1024_1024,64_128_128,200_256_256,100_100_100
      timeout "$1" python3 -m rl_kernels.cli export --config configs/h200.yaml --backend cuda --from .stage/l2 --out /tmp/exp --shapes $SH eval.build.cache_dir=/tmp/rlkc > "$OUT/export.log" 2>&1; echo ".rc=$?" >> "$OUT/export.log"; tail -30 "$OUT/export.log" | cut -c1-250
      cp /tmp/exp/rlk_hgemm_cuda/manifest.json "$OUT/manifest.json" 2>/dev/null
      timeout "$2" python3 benchmarks/export_op.py --package /tmp/exp/rlk_hgemm_cuda > "$OUT/export_op.txt" 2>&1; echo ".rc=$?" >> "$OUT/export_op.txt"; cat "$OUT/export_op.txt";;
  *) echo "unknown section $sec"; exit 2;;
esac
