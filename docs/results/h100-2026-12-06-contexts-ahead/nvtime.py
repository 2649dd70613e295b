"""Where a module build's seconds go: capture, binding compile (PCH), cuda.cu compile (nvcc --time phases), link,
evidence; then the same seed through build_candidate for the total.  python .stage/nvtime.py CACHE_DIR [TASK...]"""
import csv, subprocess, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))
from rl_kernels.config import load_config
from rl_kernels.evaluation import build as B, slim_torch
from rl_kernels.tasks import get_task

cache = sys.argv[1]
tasks = sys.argv[2:] or ["builtin/softmax", "builtin/layernorm", "builtin/gelu"]
cfg = load_config("configs/h200.yaml", [f"eval.build.cache_dir={cache}", "eval.backend=cuda"]).eval.build
for tid in tasks:
    task = get_task(tid)
    src = task.seeds["cuda"].replace('r"""', f'r"""\n// nvtime {time.time()}\n', 1)
    t0 = time.monotonic(); cap = B._capture(src, cfg); t_cap = time.monotonic() - t0
    call = cap.calls[0]
    work = Path(tempfile.mkdtemp(prefix="nvt-")); name = call["name"]; (work / name).mkdir()
    files = B._generated_files(call)
    for f, text in files.items():
        (work / name / f).write_text(text)
    t0 = time.monotonic()
    pch = B._ensure_pch(B._pch_flags(call, "cuda", cfg, True), cfg)
    t_pch = time.monotonic() - t0
    t0 = time.monotonic()
    slim_torch.write_headers(work / name / "slim", call["cuda_sources"], B._torch_include_dirs(False, cfg))
    t_slim = time.monotonic() - t0
    edges, _ = B._module_edges(call, files, "cuda", cfg, pch, link=True, slim=True)
    row = {"task": tid, "capture": t_cap, "pch(cached?)": t_pch, "slim_hdrs": t_slim}
    phases = {}
    for e in edges:
        cmd = list(e.command)
        if cmd[0].endswith("nvcc"):
            cmd = [cmd[0], "--time", str(work / "t.csv"), *cmd[1:]]
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        row[e.description.split()[0] + ":" + Path(e.outputs[0]).name] = time.monotonic() - t0
        if r.returncode:
            print(tid, e.description, "FAILED", r.stderr[-800:])
    if (work / "t.csv").exists():
        for rec in csv.reader(open(work / "t.csv")):
            if len(rec) >= 8 and rec[0].strip() not in ("source file name", ""):
                try:
                    phases[rec[1].strip()] = phases.get(rec[1].strip(), 0) + float(rec[6]) / 1000
                except ValueError:
                    pass
    objs = [work / e.outputs[0] for e in edges if e.outputs[0].endswith(".o")]
    t0 = time.monotonic()
    B._with_evidence(B._Outcome(True, "", None), objs, [work / f"{name}.so"], False, "cuda")
    row["evidence"] = time.monotonic() - t0
    src2 = task.seeds["cuda"].replace('r"""', f'r"""\n// nvtime2 {time.time()}\n', 1)
    t0 = time.monotonic(); b = B.build_candidate(task, src2, "cuda", cfg); row["build_candidate"] = time.monotonic() - t0
    row["bc_ok"] = b.ok
    print(" | ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
    print("   nvcc phases (s):", ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
