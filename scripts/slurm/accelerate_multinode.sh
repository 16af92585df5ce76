#!/usr/bin/env bash
# One `accelerate launch` per node of a SLURM allocation, for training across several nodes. Start it with
# srun, one task per node, from the repository root:
#
#   srun --ntasks-per-node=1 scripts/slurm/accelerate_multinode.sh \
#       --config_file config/accelerate/deepspeed_zero3.yaml -m prefpipe.train_reward --config ... --out ...
#
# Every node reads its rank (SLURM_NODEID) and the node count (SLURM_NNODES) from its own environment, starts
# one process per GPU of its node, and meets the others at the first node of the allocation. Arguments are
# passed to `accelerate launch` after the multi-node flags (accelerate config, then -m module and its args).
#
# Environment:
#   GPUS_PER_NODE      processes per node (default: SLURM_GPUS_ON_NODE, which SLURM sets for --gpus-per-node)
#   MAIN_PROCESS_IP    rendezvous host (default: the first host of SLURM_JOB_NODELIST)
#   MAIN_PROCESS_PORT  rendezvous port (default 29500)
#   PREFPIPE_DRY_RUN   1: print the command this node would run, and exit
set -euo pipefail

die() {
    echo "[accelerate_multinode] ERROR: $*" >&2
    exit 2
}

[[ -n "${SLURM_NNODES:-}" && -n "${SLURM_NODEID:-}" ]] ||
    die "run me inside a SLURM allocation with srun (SLURM_NNODES / SLURM_NODEID are not set)"
gpus="${GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-}}"
[[ "$gpus" =~ ^[1-9][0-9]*$ ]] ||
    die "GPUs per node unknown: set GPUS_PER_NODE or allocate GPUs (--gpus-per-node); got '${gpus}'"
main_ip="${MAIN_PROCESS_IP:-}"
if [[ -z "$main_ip" ]]; then
    [[ -n "${SLURM_JOB_NODELIST:-}" ]] || die "SLURM_JOB_NODELIST is not set; set MAIN_PROCESS_IP"
    main_ip="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
fi
[[ $# -gt 0 ]] || die "no accelerate arguments (expected e.g. --config_file FILE -m prefpipe.train_reward ...)"

cmd=(
    accelerate launch
    --num_machines "$SLURM_NNODES"
    --num_processes "$((SLURM_NNODES * gpus))"
    --machine_rank "$SLURM_NODEID"
    --main_process_ip "$main_ip"
    --main_process_port "${MAIN_PROCESS_PORT:-29500}"
    "$@"
)
if [[ "${PREFPIPE_DRY_RUN:-0}" == "1" ]]; then
    printf '%q ' "${cmd[@]}"
    echo
    exit 0
fi
exec "${cmd[@]}"
