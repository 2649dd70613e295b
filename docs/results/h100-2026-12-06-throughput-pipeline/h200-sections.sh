# The sections this session added to the device driver (.stage/h200.sh); the rest of the script is
# docs/results/h100-2026-12-06-magnified-check/h200.sh (same preamble: PYTHONPATH=/tmp/site:$PWD, OUT=${OUT:-/tmp/out}).
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
