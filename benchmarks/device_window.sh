#!/usr/bin/env bash
# What a 15-minute GPU window measures, as two device calls prepared here and smoke-tested on the CPU:
#
#   call 1  bash benchmarks/device_window.sh measure    (about 9 min)
#           reward training at speed against TRL (benchmarks/device_check.py --sides core: prefpipe BT/GPM/BGPM with
#           every lever together (packing, device-side metrics, bf16 master weights, Liger), against TRL RewardTrainer
#           as the issue ran it and at bf16; >= 2 rounds, MFU on real tokens, peak memory, the sync check), then
#           GRPO against TRL (benchmarks/gpu.py --sections grpo, 3 rounds, beta 0 and 0.04, with prefpipe's
#           per-phase shares of each step)
#   call 2  bash benchmarks/device_window.sh workflow   (about 5 min)
#           the workflow end to end on CUDA (benchmarks/gpu_workflow.sh: config/experiments/gpu_smoke.yaml, every
#           stage's versions.json `ran_on` checked, workflow.json)
#   later   bash benchmarks/device_window.sh levers     (about 9 min: each reward lever alone beside prefpipe_bt,
#           2 rounds: async metrics, bf16 master weights, packing, Liger's kernels, torch.compile; each side's
#           first-step agreement with the plain path)
#   later   bash benchmarks/device_window.sh paper      (about 6 min: the 2B step with grpo.logprob_chunk_tokens)
#   later   bash benchmarks/device_window.sh decode     (about 7 min: the compiled decode's CUDA check, then GRPO at
#           beta 0 against TRL, 3 rounds, with the prefpipe_compiled side: grpo.rollout.compile_decode
#           reduce-overhead, the decode step as a CUDA graph)
#
# Carry .whl, .gpu-assets (benchmarks/gpu_wheels.sh) and .whl-workflow (benchmarks/gpu_workflow_wheels.sh): about
# 44 MiB with the repository, under the 64 MiB a call carries. Each part writes under $OUT/<part>/; copy those
# folders into benchmarks/measured/<device>-<date>/. PREFPIPE_WINDOW_SMOKE=1 runs every part at tiny size on the
# CPU (its parts are the smoke-tested scripts of tests/test_benchmarks_smoke.py).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: device_window.sh measure|workflow|levers|paper|decode}
OUT=${OUT:-$(mktemp -d)}
dest="$OUT/$part"
mkdir -p "$dest"
smoke=${PREFPIPE_WINDOW_SMOKE:-0}
PY=${PREFPIPE_PYTHON:-python3}
if [ "$smoke" != "1" ] && [ -d .whl ] && [ ! -d /tmp/site ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:src${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"; } >"$dest/env.txt"
if [ "$smoke" = "1" ]; then
    size=(--device cpu --size tiny)
else
    size=()
fi
rc=0
case "$part" in
measure)
    "$PY" benchmarks/device_check.py "${size[@]}" --sides core --budget-s "${PREFPIPE_REWARD_BUDGET_S:-300}" \
        --out "$dest" || rc=1
    grpo_args=(--sections grpo --rounds 3 --budget-s "${PREFPIPE_GRPO_BUDGET_S:-210}" --grpo-compiled none)
    [ "$smoke" = "1" ] && grpo_args+=(--quick)
    "$PY" benchmarks/gpu.py "${size[@]}" "${grpo_args[@]}" --out "$dest/gpu_grpo.json" >"$dest/gpu_grpo.md" || rc=1
    ;;
levers)
    "$PY" benchmarks/device_check.py "${size[@]}" --sides levers --budget-s "${PREFPIPE_REWARD_BUDGET_S:-480}" \
        --out "$dest" || rc=1
    ;;
workflow)
    if [ "$smoke" = "1" ]; then
        export PREFPIPE_REQUIRE_CUDA=0 PREFPIPE_WORKFLOW_PYTHON=$PY
        export PREFPIPE_GPU_CONFIGS="config/experiments/gpu_smoke.yaml .test/config/tiny.yaml"
    fi
    OUT="$dest" PREFPIPE_WORKFLOW_BUDGET_S=${PREFPIPE_WORKFLOW_BUDGET_S:-270} bash benchmarks/gpu_workflow.sh || rc=1
    ;;
decode)
    # first the correctness check on CUDA (tests/test_grpo_compiled_decode.py's CUDA-graph case), where pytest is
    if "$PY" -c "import pytest" 2>/dev/null; then
        "$PY" -m pytest -q -p no:cacheprovider -k cuda tests/test_grpo_compiled_decode.py \
            >"$dest/compiled_decode_check.txt" 2>&1 || rc=1
    else
        echo "pytest is not installed here: the CUDA check did not run" >"$dest/compiled_decode_check.txt"
    fi
    grpo_args=(--sections grpo --grpo-betas 0 --rounds 3 --budget-s "${PREFPIPE_DECODE_BUDGET_S:-330}")
    [ "$smoke" = "1" ] && grpo_args+=(--quick)
    "$PY" benchmarks/gpu.py "${size[@]}" "${grpo_args[@]}" --out "$dest/gpu_decode.json" >"$dest/gpu_decode.md" || rc=1
    ;;
paper)
    [ "$smoke" = "1" ] && export PREFPIPE_PAPER_ARGS="--device cpu --size tiny"
    OUT="$dest" bash benchmarks/gpu_paper_chunk.sh || rc=1
    ;;
*)
    echo "unknown part: $part (measure | workflow | levers | paper | decode)" >&2
    exit 2
    ;;
esac
ls -la "$dest"
exit $rc
