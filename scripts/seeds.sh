#!/usr/bin/env bash
# README: the reward side over several seeds in one command (config/experiments/seeds.yaml says what runs).
#   bash scripts/seeds.sh [snakemake args]     e.g. `bash scripts/seeds.sh -n` (dry run of every seed)
# PREFPIPE_SEEDS (default "0 1 2"), PREFPIPE_SEEDS_CONFIG (default config/experiments/seeds.yaml) and
# PREFPIPE_SEEDS_DIR (default: the experiment's results_dir, results/<experiment>) change the seeds, the
# experiment and the folder. Each seed runs through scripts/run.sh with its own overlay (seed,
# results_dir <dir>/seed-<N>); then prefpipe.seed_summary writes <dir>/summary.json + summary.md (mean ± sd
# over seeds), and the first seed's report is rebuilt comparing the others. A dry run (-n) stops after the
# seeds' dry runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh dev,slurm
# shellcheck disable=SC1091
source "${PREFPIPE_VENV:-.venv}/bin/activate"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" # this checkout's code, whatever the venv installed
config="${PREFPIPE_SEEDS_CONFIG:-config/experiments/seeds.yaml}"
dir="${PREFPIPE_SEEDS_DIR:-$(python -c 'import sys
from prefpipe.settings.pipeline import load_config, results_dir
print(results_dir(load_config(sys.argv[1], base="config/config.yaml")))' "$config")}"
read -r -a seeds <<<"${PREFPIPE_SEEDS:-0 1 2}"
dry=false
for arg in "$@"; do
    case "$arg" in -n | --dry-run | --dryrun) dry=true ;; esac
done
mkdir -p "$dir"

overlay() { # seed, with_compare: the seed's overlay file
    local seed="$1" file="$dir/seed-$1.yaml"
    printf 'seed: %s\nresults_dir: %s\n' "$seed" "$dir/seed-$seed" >"$file"
    if [ "$2" = yes ] && [ "${#seeds[@]}" -gt 1 ]; then
        printf 'report:\n  compare:\n' >>"$file"
        for other in "${seeds[@]:1}"; do
            printf '    seed-%s: %s\n' "$other" "$dir/seed-$other" >>"$file"
        done
    fi
    echo "$file"
}

for seed in "${seeds[@]}"; do
    echo "[seeds] seed $seed -> $dir/seed-$seed"
    bash scripts/run.sh "$@" --configfile "$config" "$(overlay "$seed" no)"
done
if [ "$dry" = true ]; then
    exit 0
fi
trees=()
for seed in "${seeds[@]}"; do trees+=("$dir/seed-$seed"); done
python -m prefpipe.seed_summary --configfile "$config" --out "$dir" "${trees[@]}"
first="${seeds[0]}"
echo "[seeds] report of seed $first with the others compared -> $dir/seed-$first/report"
bash scripts/run.sh "$@" --configfile "$config" "$(overlay "$first" yes)"
