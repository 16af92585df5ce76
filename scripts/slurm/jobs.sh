#!/usr/bin/env bash
# Your SLURM jobs with what each one runs: the plugin names every job of a run after the run (it polls by that
# name) and puts the rule and its wildcards in the comment (%k): "rule_train_reward_model_wildcards_gpm".
#   bash scripts/slurm/jobs.sh            # your jobs
#   bash scripts/slurm/jobs.sh <run id>   # one run's jobs (the "SLURM run ID" Snakemake prints at the start)
set -euo pipefail
FORMAT="%.10i %.9P %.45k %.10T %.10M %.6D %R"
if [[ $# -ge 1 ]]; then
    exec squeue --name "$1" --format "$FORMAT"
fi
exec squeue --me --format "$FORMAT"
