"""The whole experiment's settings, built once from the merged and validated config.

The Snakefile builds one `PipelineSettings` from Snakemake's `config` and every rule asks it for what it
needs (targets, a stage's settings, resources); a stage process gets its stage's settings as JSON and rebuilds
the same dataclass with `from_stage_config` (prefpipe.settings.run; it schema-checks the stage's own keys
again, for a stage started by hand, against the part each settings class names). Tests build
theirs through `load_config` + `PipelineSettings`, so nothing anywhere falls back to a value written in code.
Checks that need a registry of a higher layer (reward heads, verifiers, GRPO reward sources) are not made
here: prefpipe.config_checks runs them on the built settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prefpipe.common import model_ref, secrets
from prefpipe.common.config import ConfigError, check_plain_tree, read_config_file
from prefpipe.settings import schema
from prefpipe.settings.ablation import AblationStageSettings
from prefpipe.settings.ablation_variants import fix_variant_names, with_ablation_variants
from prefpipe.settings.active import ActiveLearningSettings
from prefpipe.settings.base import BaseSettings
from prefpipe.settings.build import to_mapping
from prefpipe.settings.data import MULTIHOP, DataSettings
from prefpipe.settings.evaluation import SYNTHETIC_SOURCE, EvalSettings, benchmark_entries
from prefpipe.settings.grpo import GrpoSettings
from prefpipe.settings.hypotheses import HypothesesSettings
from prefpipe.settings.merge import check_overlay, deep_merge
from prefpipe.settings.models import ModelImportSettings
from prefpipe.settings.names import check_names
from prefpipe.settings.report import ReportSettings
from prefpipe.settings.reward import RewardSettings
from prefpipe.settings.run import RUN_WIDE_KEYS, build_stage

# The working directory's config/config.yaml (a deployed workflow's own), else the checkout's.
_CWD_CONFIG = Path("config/config.yaml").resolve()
DEFAULT_CONFIG = _CWD_CONFIG if _CWD_CONFIG.is_file() else schema.REPO_ROOT / "config" / "config.yaml"
T = TypeVar("T")


def load_config(*overlays: str | Path | dict[str, Any], base: str | Path = DEFAULT_CONFIG) -> dict[str, Any]:
    """config/config.yaml with each overlay (a file or a mapping) merged over it, as Snakemake merges
    `--configfile` (settings/merge.py). Not yet validated: `PipelineSettings` does that."""
    config = read_config_file(base)
    for overlay in overlays:
        values = overlay if isinstance(overlay, dict) else read_config_file(overlay)
        check_overlay(values, "overlay" if isinstance(overlay, dict) else str(overlay))
        config = deep_merge(config, values)
    return config


def results_dir(config: dict[str, Any]) -> str:
    """config `results_dir` with `{experiment}` replaced by the experiment's name (default results/<name>)."""
    return str(config["results_dir"]).replace("{experiment}", str(config["experiment"]))


def _narrow(names: list[str], only: list[str] | None, key: str, collection: str) -> list[str]:
    if only is None:
        return names
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise ConfigError(f"{key} names {unknown}, which are not in {collection} ({names})")
    return [name for name in names if name in only]


@dataclass
class PipelineSettings:
    """The merged config, validated against the schema, with every stage's settings typed and checked."""

    raw: dict[str, Any]
    data: DataSettings
    models: dict[str, ModelImportSettings]  # models.<name>: imported by the import_model rule
    base: BaseSettings
    reward: dict[str, RewardSettings]  # the variants this run trains (reward.only applied)
    eval: EvalSettings
    grpo: dict[str, GrpoSettings]  # the runs this run trains (grpo.enabled and grpo.only applied)
    # None when ablation.enabled is false or no ablation row has both of its variants trained
    ablation: AblationStageSettings | None
    active_learning: ActiveLearningSettings | None  # None when active_learning.enabled is false
    report: ReportSettings | None  # None when report.enabled is false
    hypotheses: HypothesesSettings | None  # grpo.hypotheses (None: no grid, or no GRPO runs)
    accelerate_config: (
        str | None
    )  # launch.accelerate_config: the accelerate file for multi-GPU reward training
    results_dir: str  # the folder every stage writes under, `{experiment}` filled in (a workflow key)

    @classmethod
    def from_config(cls, config: dict[str, Any], threads: int | None = None) -> PipelineSettings:
        raw = _validated(config)
        run = {key: raw[key] for key in RUN_WIDE_KEYS if key != "torch_threads"} | {"torch_threads": threads}

        def stage(cls_: type[T], section: dict[str, Any], key: str, **extra: Any) -> T:
            return build_stage(cls_, {**run, **extra, **section}, key)

        reward_section, grpo_section = raw["reward"], raw["grpo"]
        # grpo.only is checked against the declared runs even when grpo.enabled is false (then nothing runs)
        runs = _narrow(list(grpo_section["runs"]), grpo_section["only"], "grpo.only", "grpo.runs")
        runs = runs if grpo_section["enabled"] else []
        # data next: its checks (a test part that is the training part, a missing path) name data keys
        run_entries = _merged(raw, "grpo", "runs", runs)
        data = _data(stage, raw, run_entries)
        declared = list(reward_section["variants"])
        variants = _narrow(declared, reward_section["only"], "reward.only", "reward.variants")
        reward = _members(
            stage, _merged(raw, "reward", "variants", variants), RewardSettings, "reward.variants", "variant"
        )
        grpo = _members(stage, run_entries, GrpoSettings, "grpo.runs", "run")
        _check_result_cut(data, grpo)
        _check_reward_models(grpo, (variants, declared, raw["eval"]["ensembles"]), grpo_section["runs"])
        models = _models(stage, raw["models"])
        base = stage(BaseSettings, raw["base"], "base")
        _check_model_refs(base, reward, models)
        data_map = {
            key: raw["data"][key] for key in ("sections", "cyclic_subsets", "bad_rows", "max_overlap_share")
        }
        _check_ensembles(raw["eval"]["ensembles"], variants, declared)
        benchmarks = _benchmarks(raw["eval"]["benchmarks"], raw["data"]["source"])
        raw["eval"]["benchmarks"] = benchmarks
        report_section = _report_section(raw)
        hypotheses = None
        if grpo_section["hypotheses"] is not None and grpo:
            section = {**grpo_section["hypotheses"], "diagnostics": raw["report"]["diagnostics"]}
            hypotheses = stage(HypothesesSettings, section, "grpo.hypotheses")
            _check_hypothesis_runs(hypotheses, list(grpo))
        report = stage(ReportSettings, report_section, "report") if raw["report"]["enabled"] else None
        if report is not None:  # against the declared runs: an experiment may narrow some away (grpo.only)
            report.policy_comparison.check(list(grpo_section["runs"]))
        return cls(
            raw=raw,
            data=data,
            models=models,
            base=base,
            reward=reward,
            eval=stage(
                EvalSettings,
                {"eval": raw["eval"], "data": data_map, "benchmark_order": list(benchmarks)},
                "eval",
            ),
            grpo=grpo,
            ablation=_ablation(raw["ablation"], variants, declared, stage),
            active_learning=_active_learning(raw, variants, stage),
            report=report,
            hypotheses=hypotheses,
            accelerate_config=raw["launch"]["accelerate_config"],
            results_dir=results_dir(raw),
        )

    def needs_base(self) -> bool:
        """Whether anything this run builds starts from results/base/model: a GRPO run (its policy) or a
        reward variant whose backbone is `base`. Otherwise build_base is not part of the run."""
        return bool(self.grpo) or any(v.backbone.model == model_ref.BASE for v in self.reward.values())

    def resources(self, rule: str) -> dict[str, Any]:
        """`resources.default` updated by `resources.<rule>` (merge rule 3)."""
        table = self.raw["resources"]
        return {**table["default"], **(table.get(rule) or {})}

    def stage_json(self, settings: Any, threads: int | None) -> str:
        """What a rule passes to its stage (`--config`): the stage's settings with the rule's threads."""
        return json.dumps({**to_mapping(settings), "torch_threads": threads}, sort_keys=True)


def _validated(config: dict[str, Any]) -> dict[str, Any]:
    """A private, plain-JSON copy of `config`, checked against the schema (which fills its defaults in)."""
    check_plain_tree(config, "config")  # before the copy below, which would expand a shared (aliased) object
    raw = json.loads(json.dumps(config))
    # before the schema: a name that would escape results/ and a credential (which would reach rule params
    # and .snakemake/ metadata) are refused with their own message, naming the key
    check_names(raw)
    secrets.check_config(raw)
    # plain benchmark source strings -> mappings, so the schema fills the entries' defaults
    if isinstance(raw.get("eval"), dict):
        raw["eval"]["benchmarks"] = benchmark_entries(raw["eval"].get("benchmarks"))
    schema.validate(raw)  # the whole config once; the stages built from it are not validated again
    with_ablation_variants(raw)  # reward.variants gains the ablation's variants, derived from its fixes
    return raw


def _data(stage: Any, raw: dict[str, Any], runs: dict[str, dict[str, Any]]) -> DataSettings:
    """The data stage's settings with its derived keys: demonstrations when the base SFTs, the multi-hop world
    beside data.prompts when a run trains on it."""
    return stage(
        DataSettings,
        raw["data"],
        "data",
        demonstrations_needed=raw["base"]["sft"]["enabled"],
        multihop_alongside=_multihop_alongside(raw, runs),
    )


def _models(stage: Any, entries: dict[str, Any]) -> dict[str, ModelImportSettings]:
    return {
        name: stage(ModelImportSettings, entry, f"models.{name}", name=name)
        for name, entry in entries.items()
    }


def _multihop_alongside(raw: dict[str, Any], runs: dict[str, dict[str, Any]]) -> bool:
    """Whether the multi-hop world's questions are a second prompt set beside data.prompts: some run of these
    (merged entries) trains on them (grpo.<run>.prompts: multihop) and data.prompts is not already that world."""
    if raw["data"]["prompts"]["source"] == MULTIHOP:
        return False
    return any(entry["prompts"] == MULTIHOP for entry in runs.values())


def _merged(raw: dict[str, Any], section: str, members: str, names: list[str]) -> dict[str, dict[str, Any]]:
    """Each member (variant / run) is the section's defaults deep-merged with its own entry. A member's own
    `seed` (grpo runs) replaces the experiment's; null keeps the experiment's."""
    entries, defaults = raw[section][members], raw[section]["defaults"]
    merged = {name: deep_merge(defaults, entries[name]) for name in names}
    for entry in merged.values():
        if "seed" in entry and entry["seed"] is None:
            del entry["seed"]
    return merged


def _members(
    stage: Any, merged: dict[str, dict[str, Any]], cls: type[T], key: str, name_key: str
) -> dict[str, T]:
    """The typed settings of each merged member (_merged), named `key.<name>` in errors; its name passed as
    `name_key` (variant / run)."""
    return {name: stage(cls, entry, f"{key}.{name}", **{name_key: name}) for name, entry in merged.items()}


def _check_model_refs(
    base: BaseSettings, reward: dict[str, RewardSettings], models: dict[str, ModelImportSettings]
) -> None:
    """base.pretrained and every variant's backbone.model name a model that exists (_check_model_ref)."""
    if base.source == "pretrained" and base.pretrained:
        _check_model_ref(base.pretrained, "base.pretrained", models, allow_base=False)
    for name, settings in reward.items():
        _check_model_ref(
            settings.backbone.model, f"reward.variants.{name}.backbone.model", models, allow_base=True
        )


def _check_ensembles(ensembles: dict[str, list[str]], trained: list[str], declared: list[str]) -> None:
    """Every member of a deep ensemble (eval.ensembles) is a variant this run trains."""
    for name, members in ensembles.items():
        for member in members:
            if member not in trained:
                why = "narrowed away by reward.only" if member in declared else "not in reward.variants"
                raise ConfigError(f"eval.ensembles.{name}: member {member!r} is {why} (trained: {trained})")


def _ablation(
    section: dict[str, Any], trained: list[str], declared: list[str], stage: Any
) -> AblationStageSettings | None:
    """The ablation stage's settings, or None when it is switched off or has no row to compute (reward.only
    narrowed its variants away). Every variant it names must be a reward.variants key."""
    own = {
        k: v for k, v in section.items() if k not in ("enabled", "head")
    }  # a workflow switch; the variants'
    own["fixes"] = fix_variant_names(section["head"], section["fixes"])  # head type names the fixes' variants
    settings = stage(AblationStageSettings, own, "ablation", variants=trained)
    if not section["enabled"]:
        return None
    settings.check_names(declared)
    return settings if settings.contrasts() else None


def _active_learning(raw: dict[str, Any], trained: list[str], stage: Any) -> ActiveLearningSettings | None:
    """The active-learning rules' settings, or None when switched off. Its learner is a trained variant and its
    ensemble an eval.ensembles entry (whose members are trained: _check_ensembles)."""
    section, ensembles = raw["active_learning"], raw["eval"]["ensembles"]
    own = {k: v for k, v in section.items() if k != "enabled"}  # a workflow switch
    name = own["ensemble"]
    if section["enabled"] and name is not None and name not in ensembles:
        raise ConfigError(
            f"active_learning.ensemble = {name!r} is not an eval.ensembles entry ({sorted(ensembles)})"
        )
    members = list(ensembles[name]) if section["enabled"] and name is not None else []
    settings = stage(ActiveLearningSettings, own, "active_learning", members=members)
    if not section["enabled"]:
        return None
    if settings.learner not in trained:
        raise ConfigError(
            f"active_learning.learner = {settings.learner!r} is not a trained variant ({trained})"
        )
    return settings


def _report_section(raw: dict[str, Any]) -> dict[str, Any]:
    """The report's keys without the workflow switch `enabled`, and the ablation reference it describes rows
    against and the broken variant, taken from their one owner, `ablation.reference` / `ablation.broken` (the
    report's settings carry them under the same names; the config has no report key for them)."""
    section = {k: v for k, v in raw["report"].items() if k != "enabled"}
    owned = {k: raw["ablation"][k] for k in ("reference", "broken")}
    section["ablation"] = {**owned, **section["ablation"]}
    return section


def _check_model_ref(ref: str, key: str, models: dict[str, ModelImportSettings], allow_base: bool) -> None:
    """A model reference names what exists: `base` only where allowed, `import:<name>` a `models` entry."""
    parsed = model_ref.parse(ref, key)
    if parsed.kind == "base" and not allow_base:
        raise ConfigError(f"{key}: 'base' is the pipeline's own base model and cannot be its source")
    if parsed.kind == "import" and parsed.value not in models:
        raise ConfigError(f"{key} = {ref!r}: no models.{parsed.value} entry (models: {sorted(models)})")


def _benchmarks(entries: dict[str, Any], data_source: str) -> dict[str, Any]:
    """The benchmarks this run evaluates, in config order: null entries removed, and a `synthetic` source
    removed unless the synthetic world makes the pairs (data.source: synthetic)."""
    kept = {
        name: entry
        for name, entry in entries.items()
        if entry is not None and (entry["source"] != SYNTHETIC_SOURCE or data_source == SYNTHETIC_SOURCE)
    }
    if not kept:
        raise ConfigError(
            "eval.benchmarks: every benchmark is null or dropped (a `synthetic` source needs data.source: "
            f"synthetic; data.source is {data_source!r}); keep at least one"
        )
    return kept


def _check_reward_models(grpo: dict[str, GrpoSettings], names: tuple, entries: dict[str, Any]) -> None:
    for name, settings in grpo.items():
        _check_reward_model(name, settings, names, entries[name] or {})


def _check_reward_model(
    run: str, settings: GrpoSettings, names: tuple[list[str], list[str], dict[str, Any]], own: dict[str, Any]
) -> None:
    """The reward model a run names must be trained: a variant of `names` (trained, declared) or an entry of
    eval.ensembles (a deep ensemble, whose members _check_ensembles checks). A run that only inherits
    `reward_model` from grpo.defaults and has no reward_model reward uses it for nothing but the RM scores of
    its policy evaluation: when reward.only narrows that variant away, the run goes on without it (no error,
    and no reward model to train for it)."""
    trained, declared, ensembles = names
    variant = settings.reward_model
    if settings.uses_reward_model() and not variant:
        raise ConfigError(f"grpo.runs.{run}: a reward_model reward needs grpo.runs.{run}.reward_model")
    if variant in ensembles:
        if variant in declared:
            raise ConfigError(
                f"grpo.runs.{run}.reward_model = {variant!r} names both a reward variant and an eval.ensembles "
                "entry; rename one"
            )
        return
    if variant and variant not in trained and not settings.uses_reward_model() and "reward_model" not in own:
        settings.reward_model = None
        return
    if variant and variant not in declared:
        raise ConfigError(
            f"grpo.runs.{run}.reward_model = {variant!r} is not in reward.variants ({declared}) nor in "
            f"eval.ensembles ({sorted(ensembles)}): name one of them, or define reward.variants.{variant}"
        )
    if variant and variant not in trained:
        raise ConfigError(
            f"grpo.runs.{run}.reward_model = {variant!r} is narrowed away by reward.only (variants trained: "
            f"{trained}); add it to reward.only or leave run {run!r} out with grpo.only"
        )


def _check_result_cut(data: DataSettings, grpo: dict[str, GrpoSettings]) -> None:
    """Tool-use demonstrations from a file show results cut as the runs' environments cut them, so the base
    learns the `[cut]` the policy will read: the two lengths must agree (each stage reads its own key)."""
    demos = data.prompts.demonstrations
    if demos.path is None:
        return
    for name, run in grpo.items():
        if run.episodes.enabled and run.episodes.max_result_chars != demos.max_result_chars:
            raise ConfigError(
                f"grpo.runs.{name}.episodes.max_result_chars = {run.episodes.max_result_chars} differs from "
                f"data.prompts.demonstrations.max_result_chars = {demos.max_result_chars}: the base's "
                "demonstrations would show results cut elsewhere than the episodes cut them; set them equal"
            )


def _check_hypothesis_runs(settings: HypothesesSettings, runs: list[str]) -> None:
    """Every run the grid compares is trained in this configuration (grpo.runs narrowed by grpo.only)."""
    if settings.baseline not in runs:
        raise ConfigError(f"grpo.hypotheses.baseline = {settings.baseline!r} is not a trained run ({runs})")
    for name, test in settings.tests.items():
        missing = [r for r in test.runs if r not in runs]
        if missing:
            raise ConfigError(f"grpo.hypotheses.tests.{name}.runs: {missing} are not trained runs ({runs})")
        if settings.baseline in test.runs:
            raise ConfigError(f"grpo.hypotheses.tests.{name}.runs holds the baseline {settings.baseline!r}")


def load_stage(cls: type[T], values: dict[str, Any], key: str) -> T:
    """`cls.from_stage_config(values, key)` (prefpipe.settings.run): a stage's settings from its --config."""
    return cls.from_stage_config(values, key)
