import json
import os
import shlex
import sys

from snakemake.utils import validate

# Stop before anything runs if the config has an unknown key, a wrong type or a missing value;
# the error names the key (e.g. "On instance['reward']['variants']['gpm']['tau']").
validate(config, schema="../schemas/config.schema.yaml")

# Rules run `python -m prefpipe.<stage>` with PYTHONPATH={SRC}: a job always imports the code next to this
# Snakefile (also under --use-conda or on a cluster node where the package is not installed).
SRC = os.path.join(workflow.basedir, "src")
sys.path.insert(0, SRC)

from prefpipe.common.config import deep_merge  # the same merge the stage modules use

RESULTS = "results"


def stage_json(settings, threads):
    """The JSON a stage module receives (`--config`): its settings plus the run-wide ones.

    torch_threads is the rule's `threads`, so parallel jobs never oversubscribe the cores. Every rule also
    has a `provenance` param, this JSON with threads=None: Snakemake does not record params computed from
    threads/input/output, so without it a changed config value would never rerun the stage.
    """
    cfg = {
        "experiment": config["experiment"],
        "seed": config["seed"],
        "wandb": config["wandb"],
        "torch_threads": threads,
        **settings,
    }
    return json.dumps(cfg, sort_keys=True)


def stage_config(section, threads):
    return stage_json(config[section], threads)


def res(rule_name, key):
    """Per-rule resources from config `resources` (defaults first, then the rule's own entry)."""
    table = config["resources"]
    return table.get(rule_name, {}).get(key, table["default"][key])


def placement(rule_name):
    """`slurm_partition` when config `resources` pins one for this rule (or for every rule under `default`);
    otherwise nothing, and the SLURM profile picks a partition that fits the job (profiles/slurm/partitions.yaml).
    Unpacked into `resources:`, so an unpinned rule carries no partition at all."""
    table = config["resources"]
    partition = table.get(rule_name, {}).get("slurm_partition") or table["default"].get(
        "slurm_partition"
    )
    return {"slurm_partition": partition} if partition else {}


def all_targets():
    targets = [
        f"{RESULTS}/data/summary.json",
        f"{RESULTS}/base/summary.json",
        f"{RESULTS}/report/report.html",
    ]
    return targets


def reward_variants():
    """The variants this run trains: all of reward.variants, or the ones reward.only lists (an experiment's
    --configfile is merged over the default, so it cannot delete the default's variants; it selects).
    """
    names = list(config["reward"]["variants"])
    only = config["reward"].get("only")
    if only is None:
        return names
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise ValueError(
            f"reward.only names {unknown}, which are not in reward.variants ({names})"
        )
    return [name for name in names if name in only]


def grpo_runs():
    return list(config["grpo"]["runs"])


def reward_config(variant, threads):
    """reward.defaults deep-merged with reward.variants.<variant>."""
    merged = deep_merge(
        config["reward"]["defaults"], config["reward"]["variants"][variant] or {}
    )
    return stage_json({"variant": variant, **merged}, threads)


def grpo_settings(run):
    return deep_merge(config["grpo"]["defaults"], config["grpo"]["runs"][run] or {})


def grpo_config(run, threads):
    return stage_json({"run": run, **grpo_settings(run)}, threads)


def eval_settings():
    """The eval stage reads `eval` and, for the data it scores, data.sections / cyclic_subsets / bad_rows."""
    data = {
        key: config["data"][key] for key in ("sections", "cyclic_subsets", "bad_rows")
    }
    return {"eval": config["eval"], "data": data}


def eval_config(threads):
    return stage_json(eval_settings(), threads)


def benchmark_files():
    """Local benchmark files that exist, as inputs of eval_rewardbench (editing one reruns it).

    A configured file that is missing is not an input, so a dry run works on a machine without it; the
    eval job then fails with an error naming eval.benchmarks.<name> and the path.
    """
    files = []
    for source in config["eval"]["benchmarks"].values():
        local = os.path.splitext(source)[1].lower() in (".jsonl", ".json", ".parquet")
        if local and os.path.isfile(source):
            files.append(source)
    return files


def grpo_reward_input(run):
    """The reward model a GRPO run (and its evaluation) uses, if its config names one."""
    variant = grpo_settings(run).get("reward_model")
    if not variant:
        return {}
    if variant not in reward_variants():
        raise ValueError(
            f"grpo.runs.{run}.reward_model = {variant!r} is not a reward variant of this run "
            f"(reward.variants, narrowed by reward.only: {reward_variants()})"
        )
    return {"reward_model": f"{RESULTS}/reward/{variant}/model"}


def reward_model_flag(input):
    return (
        f"--reward-model {shlex.quote(input.reward_model)}"
        if "reward_model" in input.keys()
        else ""
    )


def single_process(rule_name, gpus):
    """`python -m` for a stage that runs one process: asking it for several GPUs is an error (they would sit
    idle), raised while Snakemake builds the job, so even a dry run shows it."""
    if gpus and int(gpus) > 1:
        raise ValueError(
            f"{rule_name} asks for gpu={gpus}, but its stage runs one process on one GPU; "
            "only train_reward_model spreads over several GPUs (accelerate launch)"
        )
    return "python -m"


def launcher(gpus):
    """`python -m` for one process; `accelerate launch` with one process per GPU when a rule gets several."""
    if gpus and int(gpus) > 1:
        accelerate_cfg = config["launch"]["accelerate_config"]
        cfg_flag = (
            f" --config_file {shlex.quote(accelerate_cfg)}"
            if accelerate_cfg
            else " --multi_gpu"
        )
        return f"accelerate launch{cfg_flag} --num_processes {int(gpus)} -m"
    return "python -m"
