import dataclasses
import json
import os
import re
import shlex

# Rules run `exec python -m prefpipe.<stage>` with the prefpipe installed in their environment (the local
# virtualenv's editable install, or workflow/envs/prefpipe.yaml under --use-conda): nothing is put on a path
# from here. `exec` makes the stage's parent Snakemake itself, so the stage gets SIGTERM when Snakemake dies,
# even by SIGKILL (prefpipe.common.interrupts.die_with_parent): it checkpoints and stops instead of running on.
from prefpipe.active import layout as al_layout
from prefpipe.active.select import acquisition
from prefpipe.common import model_ref, slurm_guard
from prefpipe.common.results import results_owner
from prefpipe.grpo.splits import HELDOUT_FILE, TRAIN_FILE
from prefpipe.settings import schema

# The schemas are this workflow's own (workflow/schemas), for this process and every job it starts.
schema.use_workflow(os.path.dirname(workflow.current_basedir))
from prefpipe.common.config import ConfigError
from prefpipe.config_checks import checked_pipeline
from prefpipe.report.inputs import Manifest, compare_roots

# The one settings layer: the merged config validated against workflow/schemas/config.schema.yaml and typed,
# built once. An unknown key, a wrong type or a missing value stops here, before anything runs, naming the key;
# so does a reward.only that drops a variant some GRPO run needs, or a name no registry knows (a head type, a
# verifier; prefpipe.config_checks).
# The optional packages a setting needs (vllm, gguf, deepspeed) are looked up here, where the rules run, unless
# the rules get their own software (--software-deployment-method conda / apptainer).
SETTINGS = checked_pipeline(
    config,
    packages=not getattr(
        getattr(workflow, "deployment_settings", None), "deployment_method", None
    ),
)
# results_dir: results/<experiment> unless a run gives itself another (scripts/seeds.sh)
RESULTS = SETTINGS.results_dir
# Another experiment's finished outputs in RESULTS stop the run here, before any job (nothing deleted); with
# replace_results: true they are deleted in onstart (a real run only, never a dry run).
REPLACED = results_owner.check(
    RESULTS, SETTINGS.raw["experiment"], SETTINGS.raw["replace_results"]
)
# report.compare: each entry another existing folder, not this run's own and not named twice (one-line error).
COMPARED = compare_roots(SETTINGS.report.compare, RESULTS) if SETTINGS.report else {}


def stage_config(settings, threads):
    """The JSON a stage module receives (`--config`): its settings with torch_threads = the rule's threads.

    Each rule also passes a `provenance` param, this JSON with threads=None (Snakemake does not record params
    computed from threads/input/output, so without it a changed config value would never rerun the stage).
    """
    return SETTINGS.stage_json(settings, threads)


def res(rule_name, key):
    """Per-rule resources, resources.default updated by resources.<rule_name>."""
    return SETTINGS.resources(rule_name)[key]


def placement(rule_name):
    """`slurm_partition` when config `resources` pins one for this rule (or for every rule under `default`);
    otherwise nothing, and the SLURM profile picks a partition that fits the job (profiles/slurm/partitions.yaml).
    Unpacked into `resources:`, so an unpinned rule carries no partition at all."""
    partition = SETTINGS.resources(rule_name).get("slurm_partition")
    return {"slurm_partition": partition} if partition else {}


def rule_resources(rule_name, gpu=False):
    """A rule's resources, the same way for every rule: config `resources.<rule>` over `resources.default`,
    memory and runtime times the attempt (a retried job asks for more), the pinned partition if any, and the
    GPU count for the rules whose stage can use one."""
    table = {
        **placement(rule_name),
        "mem_mb": lambda wildcards, attempt: res(rule_name, "mem_mb") * attempt,
        "runtime": lambda wildcards, attempt: res(rule_name, "runtime") * attempt,
    }
    if gpu:
        table["gpu"] = res(rule_name, "gpu")
    return table


def stage_params(settings_of, out_of="summary"):
    """The params of every stage: `cfg` (its --config, with the threads Snakemake gives the job), `provenance`
    (the same with threads None, so a changed setting reruns the stage and a changed thread count does not)
    and `out` (the folder of output `out_of`). `settings_of(wildcards)` is the stage's settings.
    """
    return {
        "cfg": lambda wildcards, threads: stage_config(settings_of(wildcards), threads),
        "provenance": lambda wildcards: stage_config(settings_of(wildcards), None),
        "out": lambda wildcards, output: os.path.dirname(output[out_of]),
    }


def stage_shell(module, args="", launch="python -m"):
    """A stage rule's command: the installed `prefpipe.<module>` with --config, the rule's own arguments and
    --out, one OpenMP thread per rule thread, everything it prints to the rule's log."""
    return (
        f"OMP_NUM_THREADS={{threads}} exec {launch} prefpipe.{module} --config {{params.cfg:q}} {args}"
        " --out {params.out:q} > {log:q} 2>&1"
    )


def reward_variants():
    """The variants this run trains (reward.variants narrowed by reward.only)."""
    return list(SETTINGS.reward)


def grpo_runs():
    """The GRPO runs this run trains (none when grpo.enabled is false; narrowed by grpo.only)."""
    return list(SETTINGS.grpo)


def name_pattern(names, empty):
    """A wildcard constraint matching exactly these names."""
    return "|".join(re.escape(name) for name in names) or empty


def imported_models():
    """The `models` entries (import_model builds each one that something references)."""
    return list(SETTINGS.models)


def movable(path):
    """A resolved path as params and inputs record it: relative when it lies under the working directory (a
    package in a virtualenv inside the checkout), so a moved checkout records the same value and plans no
    job; anything else (a path outside, a hub id) unchanged."""
    if os.path.isabs(path) and not os.path.relpath(path).startswith(os.pardir):
        return os.path.relpath(path)
    return path


def gguf_input(name):
    """models.<name>.gguf as a file (pkg: references resolved inside the installed package)."""
    return movable(
        model_ref.resolve(SETTINGS.models[name].gguf, f"models.{name}.gguf", RESULTS)
    )


def base_summary():
    """results/base/summary.json when something this run builds starts from the base model (a GRPO run, a
    reward variant on backbone `base`); otherwise nothing, and build_base is not part of the run.
    """
    return [f"{RESULTS}/base/summary.json"] if SETTINGS.needs_base() else []


def model_input(ref, key):
    """The Snakemake input a model reference needs: the base model's folder for `base`, the imported folder
    for `import:<name>`; nothing for a local folder, a package folder or a hub id."""
    parsed = model_ref.parse(ref, key)
    if parsed.kind == "base":
        return {"backbone": f"{RESULTS}/base/model"}
    if parsed.kind == "import":
        return {"backbone": str(model_ref.imported_model_dir(RESULTS, parsed.value))}
    return {}


def model_path(ref, key, input):
    """The path or hub id a stage receives for a model reference (its input folder when it has one)."""
    if "backbone" in input.keys():
        return input.backbone
    return movable(model_ref.resolve(ref, key, RESULTS))


def reward_backbone_ref(variant):
    return (
        SETTINGS.reward[variant].backbone.model,
        f"reward.variants.{variant}.backbone.model",
    )


def base_pretrained_ref():
    """base.pretrained and its key when build_base loads a pretrained model, else None."""
    base = SETTINGS.base
    if base.source == "pretrained" and base.pretrained:
        return base.pretrained, "base.pretrained"
    return None


def base_inputs():
    """build_base's inputs beyond the data: the demonstrations only when it runs SFT, and the imported model
    folder when base.pretrained is import:<name>."""
    inputs = {}
    if SETTINGS.base.sft.enabled:
        inputs["demonstrations"] = f"{RESULTS}/data/demonstrations.jsonl"
    if SETTINGS.data.multihop_built and SETTINGS.base.source == "scratch":
        inputs["whole_words"] = f"{RESULTS}/data/whole_words.json"
    ref = base_pretrained_ref()
    if ref is not None:
        inputs |= model_input(*ref)
    return inputs


def pretrained_flag(input):
    """build_base's --pretrained: base.pretrained resolved (import: and pkg: references become folders)."""
    ref = base_pretrained_ref()
    if ref is None:
        return ""
    return f"--pretrained {shlex.quote(model_path(*ref, input))}"


def ablation_inputs(name):
    """results/eval/<variant>/<name> of every variant an ablation row compares (none without the stage)."""
    if SETTINGS.ablation is None:
        return []
    variants = dict.fromkeys(
        v
        for _, _, variant, baseline in SETTINGS.ablation.contrasts()
        for v in (baseline, variant)
    )
    return [f"{RESULTS}/eval/{v}/{name}" for v in variants]


def ensembles():
    """The deep ensembles this run scores (eval.ensembles; every member is a trained variant)."""
    return list(SETTINGS.eval.eval.ensembles)


def ensemble_inputs(ensemble, name):
    """results/eval/<member>/<name> of every member of one deep ensemble."""
    return [
        f"{RESULTS}/eval/{v}/{name}" for v in SETTINGS.eval.eval.ensembles[ensemble]
    ]


def ensemble_summaries():
    """results/eval_ensemble/<name>/summary.json of every deep ensemble (the report reads them)."""
    return [f"{RESULTS}/eval_ensemble/{e}/summary.json" for e in ensembles()]


def ablation_summary():
    """results/ablation/summary.json when this run has the ablation stage (ablation.enabled and some row
    whose two variants are trained), else nothing."""
    return [f"{RESULTS}/ablation/summary.json"] if SETTINGS.ablation is not None else []


# results/active_learning (layout: prefpipe.active.layout; rules: active.smk); None when it is off
AL = SETTINGS.active_learning
AL_ROOT = f"{RESULTS}/{al_layout.FOLDER}"
AL_ROUND = f"{AL_ROOT}/{{arm}}/seed{{seed}}/round{{round}}"


def active_learning_summary():
    """results/active_learning/summary.json when active_learning.enabled (the report reads it)."""
    return [f"{AL_ROOT}/summary.json"] if SETTINGS.active_learning is not None else []


def al_reward_settings(variant, seed):
    """A variant's settings trained on a round's labels: its seed plus the active-learning seed."""
    settings = SETTINGS.reward[variant]
    return dataclasses.replace(settings, seed=settings.seed + int(seed))


def al_kl_weight(variant):
    """active_learning.kl_weight for the learner, `fixed` for the ensemble's members (a recorded param, so a
    changed mode retrains the learner)."""
    return AL.kl_weight if variant == AL.learner else "fixed"


def al_kl_reference(variant, pairs_full):
    """al_train's --kl-reference (the experiment's data folder) when the learner's KL weight is rescaled to
    the round's labelled set (prefpipe.active.kl_weight), else nothing."""
    if al_kl_weight(variant) == "fixed":
        return ""
    return f"--kl-reference {shlex.quote(os.path.dirname(pairs_full))}"


def al_params(out_of, *keys):
    """stage_params of an active-learning stage whose `provenance` holds only the settings that change its
    output (`keys`, with the run-wide ones), so adding a round or a seed reruns no finished round.
    """
    params = stage_params(lambda wildcards: AL, out_of)
    wanted = {"experiment", "seed", "fast_paths", *keys}
    params["provenance"] = lambda wildcards: json.dumps(
        {k: v for k, v in json.loads(stage_config(AL, None)).items() if k in wanted},
        sort_keys=True,
    )
    return params


def al_previous(wildcards):
    """The previous round's labelled set and the pool scores its strategy reads."""
    round_ = int(wildcards.round) - 1
    folder = al_layout.round_dir(AL_ROOT, wildcards.arm, int(wildcards.seed), round_)
    return {
        "previous": f"{folder}/data/selection.json",
        "scores": [
            f"{folder}/scores/{v}/scores.parquet"
            for v in acquisition(wildcards.arm).scorers(AL)
        ],
    }


def al_curve_inputs():
    """The learner's scores and the labelled set of every strategy, seed and round."""
    files = []
    for strategy in AL.strategies if AL is not None else []:
        for seed in AL.seeds:
            for round_ in range(AL.rounds):
                folder = al_layout.round_dir(AL_ROOT, strategy, seed, round_)
                files += [
                    f"{folder}/scores/{AL.learner}/scores.parquet",
                    f"{folder}/data/selection.json",
                ]
    return list(dict.fromkeys(files))


def all_targets():
    targets = [f"{RESULTS}/data/summary.json", *base_summary()]
    targets += [f"{RESULTS}/eval/{v}/summary.json" for v in reward_variants()]
    targets += ablation_summary()
    targets += ensemble_summaries()
    targets += active_learning_summary()
    targets += [f"{RESULTS}/policy_eval/{r}/summary.json" for r in grpo_runs()]
    targets += hypotheses_summary()
    if SETTINGS.report is not None:
        targets.append(f"{RESULTS}/report/report.html")
    return targets


def hypothesis_runs():
    """The runs the GRPO hypothesis grid compares (grpo.hypotheses), none without a grid."""
    return SETTINGS.hypotheses.runs() if SETTINGS.hypotheses is not None else []


def hypotheses_summary():
    """results/grpo_hypotheses/summary.json when the config declares a grid (the report reads it)."""
    if SETTINGS.hypotheses is None:
        return []
    return [f"{RESULTS}/grpo_hypotheses/summary.json"]


def benchmark_files():
    """Local benchmark files that exist, as inputs of eval_rewardbench (editing one reruns it).

    A configured file that is missing is not an input, so a dry run works on a machine without it; the
    eval job then fails with an error naming eval.benchmarks.<name> and the path.
    """
    files = []
    for bench in SETTINGS.eval.eval.benchmarks.values():
        source = bench.source
        local = os.path.splitext(source)[1].lower() in (".jsonl", ".json", ".parquet")
        if local and os.path.isfile(source):
            files.append(source)
    return files


def grpo_reward_variants(run):
    """The reward variants a GRPO run (and its evaluation) reads: the one its `reward_model` names, or every
    member of the eval.ensembles entry it names (a deep ensemble); none without one. The settings layer
    checked that they are trained."""
    name = SETTINGS.grpo[run].reward_model
    if not name:
        return []
    return list(SETTINGS.eval.eval.ensembles.get(name, [name]))


def grpo_reward_input(run):
    """Every reward model folder a GRPO run reads (one, or a deep ensemble's members in their order)."""
    variants = grpo_reward_variants(run)
    return (
        {"reward_model": [f"{RESULTS}/reward/{v}/model" for v in variants]}
        if variants
        else {}
    )


def rl_priority(variant):
    """Scheduling priority of a reward variant: the ones GRPO runs use train first, so the (longer) RL chain
    starts early and runs beside the other variants instead of after them. Order only: results do not change.
    """
    used = {v for run in SETTINGS.grpo for v in grpo_reward_variants(run)}
    return RL_PRIORITY if variant in used else 0


RL_PRIORITY = 10


def reward_model_flag(input):
    """--reward-model with every reward model folder of the rule's input (one, or an ensemble's members)."""
    if "reward_model" not in input.keys():
        return ""
    folders = input.reward_model
    folders = [folders] if isinstance(folders, str) else list(folders)
    return "--reward-model " + " ".join(shlex.quote(f) for f in folders)


def single_process(rule_name, gpus):
    """`python -m` for a stage that runs one process: asking it for several GPUs is an error (they would sit
    idle), raised while Snakemake builds the job, so even a dry run shows it."""
    if gpus and int(gpus) > 1:
        raise ValueError(
            f"{rule_name} asks for gpu={gpus}, but its stage runs one process on one GPU; "
            "only train_reward_model and train_grpo spread over several GPUs (accelerate launch)"
        )
    return "python -m"


def launcher(gpus, accelerate_cfg=None):
    """`python -m` for one process; `accelerate launch` with one process per GPU when a rule gets several
    (train_reward_model: launch.accelerate_config's DDP or DeepSpeed; train_grpo: plain data parallel).
    """
    if gpus and int(gpus) > 1:
        cfg_flag = (
            f" --config_file {shlex.quote(accelerate_cfg)}"
            if accelerate_cfg
            else " --multi_gpu"
        )
        # The launcher is not ours: start it through prefpipe.common.interrupts, which makes it die with
        # Snakemake (PR_SET_PDEATHSIG), and accelerate then stops its stage processes.
        return (
            f"python -m prefpipe.common.interrupts accelerate launch{cfg_flag}"
            f" --num_processes {int(gpus)} -m"
        )
    return "python -m"


def prep_data_outputs():
    """The data files this config uses: demonstrations only when base.sft.enabled (nothing else reads them)."""
    outputs = {
        "pairs_train": f"{RESULTS}/data/pairs_train.jsonl",
        "pairs_test": f"{RESULTS}/data/pairs_test.jsonl",
        **prompt_files(f"{RESULTS}/data"),
    }
    if SETTINGS.data.demonstrations_needed:
        outputs["demonstrations"] = f"{RESULTS}/data/demonstrations.jsonl"
    if SETTINGS.data.multihop_alongside:
        world = prompt_files(f"{RESULTS}/data/multihop")
        outputs |= {f"multihop_{key}": path for key, path in world.items()}
    if SETTINGS.data.multihop_built:
        outputs["whole_words"] = f"{RESULTS}/data/whole_words.json"
    return outputs


def prompt_files(folder):
    """The RL prompt files prep_data writes in `folder`, {rl_train, rl_heldout} (the names GRPO reads)."""
    return {
        "rl_train": f"{folder}/{TRAIN_FILE}",
        "rl_heldout": f"{folder}/{HELDOUT_FILE}",
    }


def run_prompts(run):
    """A GRPO run's RL prompt files: data.prompts', or the multi-hop world's (grpo.<run>.prompts: multihop)
    where prep_data writes them beside data.prompts' (results/data/multihop)."""
    alongside = (
        SETTINGS.grpo[run].prompts == "multihop" and SETTINGS.data.multihop_alongside
    )
    return prompt_files(f"{RESULTS}/data/multihop" if alongside else f"{RESULTS}/data")


def data_files():
    """The local files prep_data reads (data.external.path / test_split for file sources, data.prompts.path /
    test_path for file prompt sources, a local dataset folder for source hf): its inputs, so editing one reruns
    prep_data and everything after it. A missing one stops the dry run naming its key and the path.
    """
    data = SETTINGS.data
    files = []
    for key, source, paths in (
        (
            "data.external",
            data.source,
            {"path": data.external.path, "test_split": data.external.test_split},
        ),
        (
            "data.prompts",
            data.prompts.source,
            {"path": data.prompts.path, "test_path": data.prompts.test_path},
        ),
    ):
        for name, path in paths.items():
            if (
                not path
                or source == "synthetic"
                or (source == "hf" and not os.path.isdir(path))
            ):
                continue  # a hub id or split name: nothing local to read
            if not os.path.exists(path):
                raise ConfigError(
                    f"{key}.{name}: {path} does not exist (prep_data reads it)"
                )
            files.append(path)
    return files


def compared_files():
    """The files the report reads from each report.compare folder (the same manifest as this run's, where
    present): inputs, so a compared tree rebuilt later rebuilds the report."""
    manifest = Manifest.standard(reward_variants(), grpo_runs(), ensembles())
    files = []
    for root in COMPARED.values():
        for rels in manifest.files.values():
            for rel in rels.values():
                for path in (root / rel, (root / rel).with_name("config.json")):
                    if path.is_file() and str(path) not in files:
                        files.append(str(path))
    return files


def report_manifest(input):
    """The report's declared inputs as {kind: {name: path relative to the results folder}}: the report reads
    these files and no others (prefpipe.report.inputs)."""
    results = os.path.dirname(os.path.dirname(input.data))
    names = {
        "data": [""],
        "base": [""] if input.base else [],
        "ablation": [""] if input.ablation else [],
        "active_learning": [""] if input.active_learning else [],
        "grpo_hypotheses": [""] if input.grpo_hypotheses else [],
    }
    for kind in ("reward", "reward_metrics", "eval"):
        names[kind] = reward_variants()
    names["eval_ensemble"] = ensembles()
    for kind in (
        "grpo",
        "grpo_metrics",
        "grpo_samples",
        "grpo_curve",
        "policy_eval",
        "policy_examples",
    ):
        names[kind] = grpo_runs()
    files = {}
    for kind, keys in names.items():
        paths = input[kind] if isinstance(input[kind], list) else [input[kind]]
        files[kind] = {
            k: os.path.relpath(p, results) for k, p in zip(keys, paths, strict=True)
        }
    return json.dumps(files)


onstart:
    # SLURM runs: a missing account stops before the first submission; a lost controller ends the run.
    slurm_guard.start(workflow)
    results_owner.remove(REPLACED)
