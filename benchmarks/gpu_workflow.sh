#!/usr/bin/env bash
# The workflow end to end on a GPU machine, in one device call: every stage of config/experiments/gpu_smoke.yaml
# through Snakemake, then benchmarks/workflow_record.py writes $OUT/workflow.json (rc, wall seconds, jobs, each
# stage's device and seconds) and fails when a stage whose rule asks for a GPU ran off CUDA.
#
#   bash benchmarks/gpu_workflow_wheels.sh    # once, where the package index is reachable: .whl-workflow/
#   bash benchmarks/gpu_workflow.sh           # on the GPU machine, carrying .whl-workflow (no network needed)
#   # a CPU smoke of the same script (tests/test_benchmarks_smoke.py): the tiny overlay, no CUDA required
#   PREFPIPE_WORKFLOW_PYTHON=.venv/bin/python PREFPIPE_REQUIRE_CUDA=0 \
#       PREFPIPE_GPU_CONFIGS="config/experiments/gpu_smoke.yaml .test/config/tiny.yaml" bash benchmarks/gpu_workflow.sh
#
# The GPU image has torch, transformers, accelerate, peft, pandas and pyarrow but not Snakemake: a virtualenv that
# sees the image's packages (--system-site-packages) gets, from .whl-workflow, only the distributions the image
# lacks. PREFPIPE_WORKFLOW_PYTHON names a Python that already has everything (no virtualenv is made). The results
# go to the experiment's own folder under results/; $OUT (the device tool's folder, else a temporary one) receives
# workflow.json, env.txt, snakemake.log and the report. PREFPIPE_WORKFLOW_BUDGET_S bounds Snakemake (default 480 s);
# PREFPIPE_WORKFLOW_TARGETS (default: the whole workflow) names Snakemake targets, for a short smoke.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
CONFIGS=${PREFPIPE_GPU_CONFIGS:-config/experiments/gpu_smoke.yaml}
BUDGET_S=${PREFPIPE_WORKFLOW_BUDGET_S:-480}
REQUIRE_CUDA=${PREFPIPE_REQUIRE_CUDA:-1}
mkdir -p "$OUT"

if [ -n "${PREFPIPE_WORKFLOW_PYTHON:-}" ]; then
    PY=$PREFPIPE_WORKFLOW_PYTHON
else
    venv=/tmp/prefpipe-workflow-venv
    python3 -m venv --system-site-packages "$venv" || exit 1
    PY=$venv/bin/python
    # the wheels whose distribution this Python lacks (the folder is the whole closure: no dependency resolution)
    mapfile -t wheels < <("$PY" - <<'PYEOF'
import re
from importlib import metadata
from pathlib import Path
for wheel in sorted(Path(".whl-workflow").glob("*.whl")):
    dist = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        print(wheel)
PYEOF
    )
    if [ ${#wheels[@]} -gt 0 ]; then
        "$PY" -m pip install --quiet --no-index --no-deps --no-compile "${wheels[@]}" || exit 1
    fi
fi
export PATH="$(dirname "$PY"):$PATH" PYTHONPATH="$PWD/src" HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    "$PY" -c 'import torch, transformers, snakemake; print(torch.__version__, transformers.__version__, snakemake.__version__, torch.cuda.is_available())'
} >"$OUT/env.txt" 2>&1
# the run's results folder as the workflow resolves it: the last config file that sets results_dir (else
# results/{experiment}) and experiment wins, as Snakemake merges them
results=$("$PY" -c 'import sys, yaml
merged = {"results_dir": "results/{experiment}"}
for f in sys.argv[1:]:
    merged.update({k: v for k, v in (yaml.safe_load(open(f)) or {}).items() if k in ("experiment", "results_dir") and v})
print(merged["results_dir"].format(experiment=merged["experiment"]))' $CONFIGS) || exit 1
# one --configfile with every file: Snakemake merges them in order (a repeated flag would keep only the last)
read -r -a configfiles <<<"$CONFIGS"

start=$(date +%s.%N)
# shellcheck disable=SC2086  # targets are separate words
timeout "$BUDGET_S" snakemake ${PREFPIPE_WORKFLOW_TARGETS:-} --cores "$(nproc)" --configfile "${configfiles[@]}" \
    --resources gpu=4 >"$OUT/snakemake.log" 2>&1
rc=$?
wall=$(echo "$(date +%s.%N) - $start" | bc)
flags=()
[ "$REQUIRE_CUDA" = "1" ] && flags+=(--require-cuda)
"$PY" benchmarks/workflow_record.py --results "$results" --log "$OUT/snakemake.log" --rc "$rc" --wall "$wall" \
    --out "$OUT/workflow.json" "${flags[@]}"
status=$?
cp "$results"/report/report.html "$results"/report/report.md "$OUT/" 2>/dev/null
tail -5 "$OUT/snakemake.log"
exit $status
