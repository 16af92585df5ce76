#!/usr/bin/env bash
# grpo.logprob_chunk_tokens on the 2B paper step (issue 47, item 2), in one device call: the four GRPO cases of
# docs/findings/BENCHMARKS.md's 2026-11-27 table (micro-batch 128 / 32, each without and with gradient checkpointing) run
# again by benchmarks/gpu_paper.py with --grpo-logprob-chunk (default 1024), one JSON each in $OUT
# (g128_c1024.json, g128_gc_c1024.json, g32_c1024.json, g32_gc_c1024.json), to set beside
# benchmarks/measured/h200-2026-11-27/g*.json. About 1.5-2 min a case on an H200 (the 2B build included).
#
#   benchmarks/gpu_wheels.sh                 # once, where there is network: .whl/ and .gpu-assets/ (gpu.py)
#   bash benchmarks/gpu_paper_chunk.sh       # on the GPU machine, .whl and .gpu-assets carried
#   PREFPIPE_PAPER_ARGS="--device cpu --size tiny" bash benchmarks/gpu_paper_chunk.sh   # CPU smoke of the script
#
# PREFPIPE_LOGPROB_CHUNK sets the chunk, PREFPIPE_PYTHON the interpreter (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
CHUNK=${PREFPIPE_LOGPROB_CHUNK:-1024}
PY=${PREFPIPE_PYTHON:-python3}
read -r -a EXTRA <<< "${PREFPIPE_PAPER_ARGS:-}"
mkdir -p "$OUT"
if [ -d .whl ] && [ ! -d /tmp/site ]; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:src${PYTHONPATH:+:$PYTHONPATH}
rc=0
for case in "g128 --grpo-micro-batch 128" "g128_gc --grpo-micro-batch 128 --grpo-gradient-checkpointing" \
    "g32" "g32_gc --grpo-gradient-checkpointing"; do
    read -r -a words <<< "$case"
    name=${words[0]}
    "$PY" benchmarks/gpu_paper.py --sections grpo "${words[@]:1}" --grpo-logprob-chunk "$CHUNK" "${EXTRA[@]}" \
        --out "$OUT/${name}_c$CHUNK.json" || rc=1
done
echo "written: $(ls "$OUT" | tr "\n" " ")"
exit $rc
