#!/bin/bash
# Device-side driver: bash .stage/h200.sh SECTION [args]; every section writes under $OUT and prints a tail.
#   stage PART...                       copy .gpu_bundle/PART (carried files) into /tmp/gb
#   vsetup                              check + untar gb.tar, run gb_install.sh into /tmp/site, install the repo
#                                       (editable, no deps) so rl_kernels.{cluster,actors,learner} import; idempotent
#   vtests SECONDS                      tests/gpu/test_vllm_backend.py
#   vbench SECONDS [args...]            benchmarks/vllm_generation.py args  -> $OUT/vllm-<tag>.json (TAG=... to name it)
#   vtrain SECONDS NAME CONFIG [overrides...]   rl-kernels train -> /tmp/runs/NAME; small files to $OUT/NAME/
#   vstart SECONDS NAME CONFIG [overrides...]   the same, detached (outlives the call); vwait SECONDS NAME collects it
#   alive PATTERN                       processes still running from an earlier call
#   info                                GPU, torch, cores, date, commit (one block on stdout)
#   thr SECONDS TAG PATHS REPEATS [TASKS]   benchmarks/eval_throughput.py (configs/h200.yaml, cache /tmp/rlkc)
#                                       -> $OUT/thr-TAG.{json,log}; prints its table rows
#   builds SECONDS TAG PATHS [TASKS]    benchmarks/module_builds.py --backend cuda (a fresh cache each)
#                                       -> $OUT/builds-TAG.{json,log}
#   pipe SECONDS TAG [args...]          benchmarks/pipeline.py --out /tmp/pipe-TAG args -> $OUT/pipe-TAG.log and
#                                       $OUT/pipe-TAG/ (pipeline.json, each combo's rollout_summary.json)
set -u
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 RAY_USAGE_STATS_ENABLED=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
GB=/tmp/gb; SITE=/tmp/site

# The checkout's actors/ learner/ cluster/ install as rl_kernels.{actors,learner,cluster} (setup.py's
# package_dir), so PYTHONPATH=$PWD alone does not import them: an editable install (no deps, no index)
# maps them; Ray's workers see it through the venv's .pth. Redone when the repo copy moved.
ensure_repo() {
  local where
  where=$(cd /tmp && python3 -c "import rl_kernels.cluster as c; print(c.__file__)" 2>/dev/null)
  case $where in "$PWD"/*) return 0;; esac
  python3 -m pip install -q --no-deps --no-index --no-build-isolation --disable-pip-version-check -e . \
    > "$OUT/repo-install.txt" 2>&1
  where=$(cd /tmp && python3 -c "import rl_kernels.cluster as c; print(c.__file__)" 2>&1 | tail -1)
  echo "rl_kernels.cluster -> $where" | tee -a "$OUT/repo-install.txt"
}

collect() {   # a run's small files to $OUT/NAME/, the log's tail, its summary
  local name=$1 run=/tmp/runs/$1 log=$OUT/train-$1.log
  mkdir -p "$OUT/$name"
  for f in "$run"/metrics.jsonl "$run"/train_summary.json "$run"/config*.yaml; do
    [ -f "$f" ] || continue
    if [ "$(stat -c %s "$f")" -le 20000000 ]; then cp "$f" "$OUT/$name/"; else tail -2000 "$f" > "$OUT/$name/$(basename "$f").tail"; fi
  done
  tail -200 "$log" > "$OUT/$name/train.log.tail"
  ls -la "$run" 2>/dev/null | head -30
  grep -v "Loading weights\|it/s\]" "$log" | cut -c1-300 | tail -30
  [ -f "$run/train_summary.json" ] && python3 -c "import json, sys
s = json.load(open(sys.argv[1]))
for k in ('steps', 'version', 'groups', 'wall_s', 'steps_per_hour', 'learner_idle_ratio', 'completions', 'parsed',
          'compiled', 'correct', 'reward_trend', 'best_speedup_per_task'):
    if k in s: print(f'{k}: {s[k]}')" "$run/train_summary.json"
}

sec=${1:?section}; shift
case $sec in
  stage)
    mkdir -p "$GB"
    for p in "$@"; do cp ".gpu_bundle/$p" "$GB/" || echo "MISSING .gpu_bundle/$p"; done
    ls -la "$GB";;
  vsetup)
    {
      if [ -f "$SITE/.gb_ok" ]; then
        echo "bundle already installed in $SITE"
      else
        sum=$(cat "$GB"/gb.tar.part-* | sha256sum | cut -d' ' -f1)
        if [ "$sum" != "$(cat "$GB/gb.sha256")" ]; then
          echo "sha256 MISMATCH over $(ls "$GB"/gb.tar.part-* | wc -l) parts: one is missing or damaged"; ls -la "$GB"
        else
          echo "gb.tar sha256 OK over $(ls "$GB"/gb.tar.part-* | wc -l) parts"
          rm -rf "$GB/x"; mkdir -p "$GB/x"
          cat "$GB"/gb.tar.part-* | tar -C "$GB/x" -xf - \
            && bash "$GB/x/gb/gb_install.sh" "$GB/x/gb" "$SITE" && touch "$SITE/.gb_ok"
        fi
      fi
      ensure_repo
      nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.sm,clocks.max.sm --format=csv
      (cd /tmp && python3 -c "import vllm, ray, deepspeed, pydantic, gguf, torch, transformers, importlib.metadata as m
print('vllm', vllm.__version__, '| ray', ray.__version__, '| deepspeed', deepspeed.__version__, '| pydantic',
      pydantic.VERSION, '| gguf', m.version('gguf'), '| torch', torch.__version__, '| transformers',
      transformers.__version__, '| gpus', torch.cuda.device_count())") 2>&1 | grep -v "^\[" | tail -3
      nproc; date; git log --oneline -1 2>/dev/null
      [ -f "$SITE/.gb_ok" ] && echo "vsetup OK" || echo "vsetup FAILED"
    } > "$OUT/vsetup.txt" 2>&1
    tail -30 "$OUT/vsetup.txt";;
  vtests)
    ensure_repo > /dev/null
    timeout "$1" python3 -m pytest -q -rA tests/gpu/test_vllm_backend.py -p no:cacheprovider --durations=10 \
      > "$OUT/tests-vllm.txt" 2>&1; echo ".rc=$?" >> "$OUT/tests-vllm.txt"
    grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|^E  " "$OUT/tests-vllm.txt" | cut -c1-300 | tail -30
    tail -16 "$OUT/tests-vllm.txt" | cut -c1-300;;
  vbench)
    secs=$1; shift
    tag=${TAG:-$(echo "$*" | tr -s -c 'A-Za-z0-9.=\n' '_' | sed 's/^_*//; s/_*$//')}; tag=${tag:-default}
    timeout "$secs" python3 benchmarks/vllm_generation.py --out "$OUT/vllm-$tag.json" "$@" \
      > "$OUT/vbench-$tag.log" 2>&1; echo ".rc=$?" >> "$OUT/vbench-$tag.log"
    grep -v "Loading weights\|it/s\]" "$OUT/vbench-$tag.log" | cut -c1-300 | tail -40;;
  vtrain)
    secs=$1; name=$2; cfg=$3; shift 3
    ensure_repo > /dev/null
    run=/tmp/runs/$name; log=$OUT/train-$name.log
    timeout "$secs" python3 -m rl_kernels.cli train --config "$cfg" "run_dir=$run" "$@" > "$log" 2>&1
    echo ".rc=$?" >> "$log"
    collect "$name";;
  vstart)   # vtrain in the background, detached from this call: vwait collects it
    secs=$1; name=$2; cfg=$3; shift 3
    ensure_repo > /dev/null
    mkdir -p /tmp/bg; run=/tmp/runs/$name; log=/tmp/bg/train-$name.log
    setsid nohup bash -c "timeout $secs python3 -m rl_kernels.cli train --config $cfg run_dir=$run $* > $log 2>&1; echo .rc=\$? >> $log" \
      > /dev/null 2>&1 < /dev/null &
    sleep 20; tail -5 "$log";;
  vwait)    # wait up to SECONDS for a vstart run to end, then collect it
    secs=$1; name=$2; log=/tmp/bg/train-$name.log
    end=$((SECONDS + secs))
    while [ $SECONDS -lt $end ] && ! grep -q "^\.rc=" "$log" 2>/dev/null; do sleep 5; done
    cp "$log" "$OUT/train-$name.log"
    grep -q "^\.rc=" "$log" || echo "still running after $secs s"
    collect "$name";;
  alive)    # did a background process of an earlier call survive?
    pgrep -af "$1" || echo "none alive matching $1";;
  info)
    nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
    (cd /tmp && python3 -c "import torch; print('torch', torch.__version__, '| cuda', torch.version.cuda, '|', torch.cuda.get_device_name(0))")
    echo "cores $(nproc)"; date; git log --oneline -1 2>/dev/null;;
  thr)      # evaluations per minute, per path, one run of the script per call of this section
    secs=$1 tag=$2 paths=$3 reps=$4 tasks=${5:-hgemm/fp32/2048_2048_2048,builtin/softmax}
    log=$OUT/thr-$tag.log
    timeout "$secs" python3 benchmarks/eval_throughput.py --config configs/h200.yaml --tasks "$tasks" --paths "$paths" \
      --repeats "$reps" --out "$OUT/thr-$tag.json" eval.build.cache_dir=/tmp/rlkc > "$log" 2>&1; echo ".rc=$?" >> "$log"
    echo "== thr $tag"; grep -E "^\| |^\.rc=|Error|Traceback" "$log" | cut -c1-700 | tail -20;;
  builds)   # module builds on a cache miss, per header path (module_builds.py uses its own scratch cache per path)
    secs=$1 tag=$2 paths=$3 tasks=${4:-}
    log=$OUT/builds-$tag.log
    timeout "$secs" python3 benchmarks/module_builds.py --backend cuda --paths "$paths" ${tasks:+--tasks "$tasks"} \
      --out "$OUT/builds-$tag.json" "eval.build.cache_dir=/tmp/rlkc-builds-$RANDOM" > "$log" 2>&1; echo ".rc=$?" >> "$log"
    echo "== builds $tag"; grep -v "^$" "$log" | cut -c1-300 | tail -25;;
  pipe)     # the rollout pipeline benchmark; its policy and run dirs stay in /tmp (too many files for $OUT)
    secs=$1 tag=$2; shift 2
    ensure_repo > /dev/null; rm -f "$OUT/repo-install.txt"
    log=$OUT/pipe-$tag.log; mkdir -p "$OUT/pipe-$tag"
    timeout "$secs" python3 benchmarks/pipeline.py --out "/tmp/pipe-$tag" "$@" > "$log" 2>&1; echo ".rc=$?" >> "$log"
    cp "/tmp/pipe-$tag/pipeline.json" "$OUT/pipe-$tag/" 2>/dev/null
    for d in /tmp/pipe-$tag/run_c*; do
      [ -f "$d/rollout_summary.json" ] && cp "$d/rollout_summary.json" "$OUT/pipe-$tag/$(basename "$d")-summary.json"
    done
    [ "$(stat -c %s "$log")" -le 8000000 ] || { tail -c 4000000 "$log" > "$log.t"; mv "$log.t" "$log"; }
    echo "== pipe $tag"; grep -v "Loading weights\|it/s\]" "$log" | cut -c1-300 | tail -25;;
  *) echo "unknown section $sec"; exit 2;;
esac
