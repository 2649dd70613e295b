#!/bin/bash
# Device-side driver: bash .stage/x16.sh SECTION [args]; output under $OUT.
#   stage PART             copy a Ray bundle part into /tmp/rb (kept while the machine stays warm)
#   setup                  the small wheels (pydantic, ninja, NVML, CUTLASS) into /tmp/site
#   (x18: pipe also prints each verdict's count and one detail per reason)
#   rayslim                Ray without its Java jars and libraries (rllib, data, serve, llm, tune, train), xz, one call
#   ray                    join the Ray bundle parts in /tmp/rb and install them into /tmp/site
#   thr SECONDS            benchmarks/eval_throughput.py over $PATHS (default: +device vs +device+problem), REPS, TASKS
#   evalgpu SECONDS EXPR   tests/gpu/test_evaluator_gpu.py -k EXPR
#   pipe SECONDS NAME [overrides]  benchmarks/pipeline.py, one combo 1x1, 2 groups of 4 (hgemm 1024^3)
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PATH=/tmp/site/bin:$PATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
sec=${1:?section}; shift
case $sec in
  stage) mkdir -p /tmp/rb && cp .stage/rb/bundle.sha256 "$1" /tmp/rb/ && ls -la /tmp/rb;;
  setup)
    python3 -c "import cutlass_library, pydantic, pynvml" 2>/dev/null || python3 -m pip install -q --no-deps --no-index \
      --disable-pip-version-check --target /tmp/site .stage/wheels/*.whl 2>&1 | tail -3
    which ninja
    python3 -c "import cutlass_library, pydantic, torch; print('pydantic', pydantic.VERSION, 'torch', torch.__version__)"
    nvidia-smi --query-gpu=name,compute_cap,clocks.sm,clocks.max.sm --format=csv,noheader; nproc; git log --oneline -1;;
  rayslim)
    mkdir -p /tmp/site && tar xJf .stage/rs/rayslim.tar.xz -C /tmp/site && python3 -m pip install -q --no-deps --no-index \
      --disable-pip-version-check --target /tmp/site .stage/rs/*.whl 2>&1 | tail -3
    python3 -c "import ray; print('ray', ray.__version__, ray.__file__)";;
  ray)
    cd /tmp/rb && cat bundle.tar.part-* > bundle.tar && echo "$(cat bundle.sha256)  bundle.tar" | sha256sum -c - \
      && tar xf bundle.tar && python3 -m pip install -q --no-deps --no-index --disable-pip-version-check \
      --target /tmp/site bundle/wheels/*.whl 2>&1 | tail -3; cd - >/dev/null
    python3 -c "import ray; print('ray', ray.__version__)";;
  thr)
    timeout "$1" python3 benchmarks/eval_throughput.py --config configs/h200.yaml \
      --tasks ${TASKS:-builtin/softmax,hgemm/fp32/2048_2048_2048} \
      --paths ${PATHS:-beside_job+fork+device,beside_job+fork+device+problem} \
      --repeats ${REPS:-8} --out "$OUT/thr.json" eval.build.cache_dir=/tmp/rlkc > "$OUT/thr.log" 2>&1
    echo ".rc=$?" >> "$OUT/thr.log"; grep -v "^  " "$OUT/thr.log" | cut -c1-330 | tail -30;;
  evalgpu)
    timeout "$1" python3 -m pytest -v -rA tests/gpu/test_evaluator_gpu.py -k "$2" -p no:cacheprovider --durations=6 \
      > "$OUT/evalgpu.txt" 2>&1; echo ".rc=$?" >> "$OUT/evalgpu.txt"
    grep -E "PASSED|FAILED|ERROR|^E  |warm phase" "$OUT/evalgpu.txt" | cut -c1-250 | tail -60; tail -8 "$OUT/evalgpu.txt" | cut -c1-250;;
  pipe)
    secs=$1; name=$2; shift 2
    timeout "$secs" python3 benchmarks/pipeline.py --out "$OUT/pipe-$name" --config configs/h200.yaml \
      --task hgemm/fp32/1024_1024_1024 --combos 1x1 --groups 2 suite=hgemm/fp32 split.enabled=false policy.device=cuda \
      cluster.generator_num_gpus=0.5 eval.shared_device=true policy.group_size=4 policy.max_new_tokens=256 \
      eval.build.cache_dir=/tmp/rlkc-pipe-$name eval.timing.samples=30 eval.timing.warmup=5 "$@" \
      > "$OUT/pipe-$name.log" 2>&1
    echo ".rc=$?" >> "$OUT/pipe-$name.log"; tail -25 "$OUT/pipe-$name.log" | cut -c1-300
    rm -rf "$OUT/pipe-$name/policy" "$OUT/pipe-$name"/run_*/archive.sqlite* "$OUT/pipe-$name"/run_*/wandb
    python3 -c "import json,sys,collections; c=collections.Counter(); d={}
for l in open(sys.argv[1]):
    g=json.loads(l).get('group') or {}
    for t in g.get('trajectories',[]):
        m=t.get('measurement') or {}; r=m.get('rejected') or ('correct' if m.get('correct') else 'other'); c[r]+=1; d.setdefault(r,(m.get('detail') or '')[-600:])
print(dict(c)); [print(k,'::',v) for k,v in d.items()]" "$OUT/pipe-$name"/run_c1_t1/trajectories.jsonl 2>&1 | cut -c1-700
    cat "$OUT/pipe-$name/pipeline.md" 2>/dev/null;;
  *) echo "unknown section $sec"; exit 2;;
esac
