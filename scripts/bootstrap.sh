#!/usr/bin/env bash
# Create (or reuse) the local virtualenv .venv and install prefpipe into it.
# Reinstalls only when pyproject.toml changed (stamp file), so repeated runs cost a second.
#
# torch is installed first, and only when the virtualenv has none (a torch already there is always kept):
#   PREFPIPE_TORCH_SPEC set       exactly that spec, from pip's configured indexes (your choice wins).
#   Linux without nvidia-smi      the CPU build, asked for explicitly: torch==2.13.0+cpu with PyTorch's CPU wheel
#                                 index (PREFPIPE_TORCH_CPU_INDEX) as an extra index. On Linux a plain
#                                 `torch==2.13.0` from PyPI is the CUDA build (several GB of nvidia-* wheels), which
#                                 a CPU machine or CI never uses. When that index does not answer within a few
#                                 seconds (offline, a proxy), one line says so and the plain `torch==2.13.0` is
#                                 installed from the configured indexes: a local CPU wheel where pip is set up with
#                                 one, the CUDA build on a stock PyPI.
#   Linux with nvidia-smi         plain `torch==2.13.0` from PyPI: the CUDA build. For another CUDA version, install
#                                 torch into the virtualenv yourself first (or set PREFPIPE_TORCH_SPEC).
#   macOS and others              plain `torch==2.13.0` (PyPI's wheel there is the CPU / Apple-GPU build).
# A probe with a short timeout, not pip's own retries, decides the fallback: pip spends minutes retrying an
# unreachable extra index before it falls back by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS="${1:-dev,slurm}"
VENV="${PREFPIPE_VENV:-.venv}"
TORCH_VERSION="2.13.0"
TORCH_CPU_INDEX="${PREFPIPE_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

pick_python() {
    for candidate in python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "prefpipe needs Python >= 3.11 (none found on PATH)" >&2
    return 1
}

if [ ! -x "$VENV/bin/python" ]; then
    PY=$(pick_python)
    echo "[bootstrap] creating $VENV with $PY"
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi

stamp="$VENV/.prefpipe-installed-$EXTRAS"
want=$(cat pyproject.toml | sha256sum | cut -c1-16)
# A virtualenv installed with more extras (scripts/test.sh asks for dev,slurm,deepspeed) serves a smaller set
# (run.sh asks for dev,slurm): reuse any current stamp whose extras include every wanted one.
covers() {
    local have=",$1," extra
    for extra in ${EXTRAS//,/ }; do
        case "$have" in *",$extra,"*) ;; *) return 1 ;; esac
    done
}
for existing in "$VENV"/.prefpipe-installed-*; do
    [ -f "$existing" ] && [ "$(cat "$existing")" = "$want" ] || continue
    covers "${existing##*/.prefpipe-installed-}" && exit 0
done

index_answers() {
    "$VENV/bin/python" - "$1" <<'PY' >/dev/null 2>&1
import sys
import urllib.request

urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5)
PY
}

install_torch() {
    local pip=("$VENV/bin/python" -m pip install --quiet)
    if [ -n "${PREFPIPE_TORCH_SPEC:-}" ]; then
        echo "[bootstrap] installing $PREFPIPE_TORCH_SPEC (PREFPIPE_TORCH_SPEC)"
        "${pip[@]}" "$PREFPIPE_TORCH_SPEC"
    elif [ "$(uname -s)" = "Linux" ] && ! command -v nvidia-smi >/dev/null 2>&1; then
        if index_answers "$TORCH_CPU_INDEX"; then
            echo "[bootstrap] no GPU: installing torch==$TORCH_VERSION+cpu (CPU build, index $TORCH_CPU_INDEX)"
            "${pip[@]}" --extra-index-url "$TORCH_CPU_INDEX" "torch==$TORCH_VERSION+cpu"
        else
            echo "[bootstrap] no GPU, and PyTorch's CPU index ($TORCH_CPU_INDEX) does not answer: installing" \
                "torch==$TORCH_VERSION from pip's configured indexes (on a stock PyPI that is the CUDA build)"
            "${pip[@]}" "torch==$TORCH_VERSION"
        fi
    else
        echo "[bootstrap] installing torch==$TORCH_VERSION from pip's configured indexes"
        "${pip[@]}" "torch==$TORCH_VERSION"
    fi
}

if ! "$VENV/bin/python" -c 'import torch' >/dev/null 2>&1; then
    install_torch
fi
echo "[bootstrap] installing prefpipe[$EXTRAS]"
"$VENV/bin/python" -m pip install --quiet -e ".[$EXTRAS]"
echo "$want" >"$stamp"
