"""Config checks that need a registry owned above the settings layer, run once on the whole experiment.

The settings layer (prefpipe.settings) checks what the config alone can say. These facts belong to higher
layers: the loss aggregations, rollout engines and reward sources a GRPO run may name
(prefpipe.grpo.algorithm.losses, prefpipe.grpo.rollout.engines, prefpipe.grpo.rewards; the schema takes any
string there), the subsets the synthetic world's uncertainty switches may name (prefpipe.data.synthetic_world),
the reward heads a `head.type` may name and what each accepts (prefpipe.reward.heads.registry), the verifiers
`data.prompts.verifier` may name (prefpipe.data.verifier), which GRPO rewards read prompt answers
(prefpipe.grpo.rewards) and which strategies active learning may name and the heads each reads
(prefpipe.active.select). This top-layer module asks each owner and names the config key. The workflow builds
its settings through `checked_pipeline` (workflow/rules/common.smk), as do the tests (tests/support/settings.py);
a stage started by hand asks its own owner again when it starts (build_reward_model, load_rl_prompt_rows,
grpo.train).
"""

from __future__ import annotations

from typing import Any

from prefpipe.active.select import check_strategies
from prefpipe.common.config import ConfigError
from prefpipe.common.registry import require_registered
from prefpipe.data.synthetic_noise import check_switches
from prefpipe.data.synthetic_world import SUBSETS
from prefpipe.data.verifier import check_verifier
from prefpipe.grpo.algorithm.losses import AGGREGATORS
from prefpipe.grpo.rewards import REWARD_SOURCES, answer_reward_keys
from prefpipe.grpo.risk_measures import RISK_MEASURES
from prefpipe.grpo.rollout.engines import ENGINES
from prefpipe.reward.heads.registry import check_head_settings, get_head_class
from prefpipe.settings.data import NO_VERIFIER
from prefpipe.settings.dependencies import check_dependencies
from prefpipe.settings.grpo import GrpoSettings
from prefpipe.settings.pipeline import PipelineSettings


def checked_pipeline(
    config: dict[str, Any], threads: int | None = None, packages: bool = True
) -> PipelineSettings:
    """`PipelineSettings.from_config` followed by `check_registered` and, with `packages` (the rules run in
    this environment), the optional packages the settings need (prefpipe.settings.dependencies)."""
    settings = check_registered(PipelineSettings.from_config(config, threads))
    if packages:
        check_dependencies(settings)
    return settings


def check_registered(settings: PipelineSettings) -> PipelineSettings:
    """The registry checks, in the order of the stages; ConfigError naming the key. Returns `settings`."""
    world = settings.data.synthetic
    if world.label_noise or world.unfamiliar_subsets:
        check_switches(world.label_noise, world.unfamiliar_subsets, SUBSETS, "data.synthetic")
    check_verifier(settings.data.prompts, "data.prompts")
    for name, variant in settings.reward.items():
        try:
            check_head_settings(variant.head)
        except ConfigError as err:
            raise ConfigError(f"reward.variants.{name}.{err}") from err
    if settings.data.prompts.verifier == NO_VERIFIER:
        _check_prompt_answers(settings)
    for name, run in settings.grpo.items():
        check_grpo_names(run, f"grpo.runs.{name}")
        _check_reward_heads(settings, name, run)
    if settings.active_learning is not None:
        check_strategies(
            settings.active_learning, lambda v: get_head_class(settings.reward[v].head.type).bayesian
        )
    return settings


def check_grpo_names(run: GrpoSettings, key: str) -> None:
    """The names a GRPO run gives that only a registry knows: its loss aggregation, engine, reward sources
    (`key`: the run's config key; also asked by the train_grpo stage when it is started by hand)."""
    require_registered(AGGREGATORS, run.loss_type, f"{key}.loss_type", "loss aggregation")
    require_registered(ENGINES, run.rollout.engine, f"{key}.rollout.engine", "rollout engine")
    for pos, spec in enumerate(run.rewards):
        require_registered(REWARD_SOURCES, spec["type"], f"{key}.rewards[{pos}].type", "reward source")


def _check_reward_heads(settings: PipelineSettings, name: str, run: GrpoSettings) -> None:
    """A deep ensemble a run is paid by has point-head members (as eval_ensemble requires), and a risk-averse
    reward-model reward needs a score uncertainty: a Bayesian head, or a deep ensemble's disagreement. The
    stage asks again when it loads the models (grpo.rewards.RewardModelReward, reward.ensemble)."""
    members = settings.eval.eval.ensembles.get(run.reward_model or "")
    for member in members or []:
        if get_head_class(settings.reward[member].head.type).bayesian:
            raise ConfigError(
                f"grpo.runs.{name}.reward_model = {run.reward_model!r}: member {member!r} of that eval.ensembles "
                "entry is a Bayesian head (deep ensembles are of point heads)"
            )
    for pos, spec in enumerate(run.rewards):
        if spec["type"] == "reward_model" and members and RISK_MEASURES[spec["risk_measure"]].bayesian_only:
            raise ConfigError(
                f"grpo.runs.{name}.rewards[{pos}].risk_measure = {spec['risk_measure']} reads a Bayesian head's "
                f"posterior; grpo.runs.{name}.reward_model = {run.reward_model!r} is a deep ensemble"
            )
        if spec["type"] != "reward_model" or not spec["risk_aversion"] or members:
            continue
        head = settings.reward[run.reward_model].head.type  # type: ignore[index]
        if not get_head_class(head).bayesian:
            raise ConfigError(
                f"grpo.runs.{name}.rewards[{pos}].risk_aversion = {spec['risk_aversion']} needs a Bayesian "
                "reward model (bgpm) or a deep ensemble (reward_model naming an eval.ensembles entry); "
                f"grpo.runs.{name}.reward_model = {run.reward_model!r} is a {head!r} head"
            )


def _check_prompt_answers(settings: PipelineSettings) -> None:
    """Prompts without answers (data.prompts.verifier: none) cannot feed a reward that reads answers."""
    for name, run in settings.grpo.items():
        keys = answer_reward_keys(run.rewards)
        if keys:
            where = ", ".join(f"grpo.runs.{name}.{key.removeprefix('grpo.')}" for key in keys)
            raise ConfigError(
                f"{where} needs prompt answers, but data.prompts.verifier is {NO_VERIFIER!r} (prompts "
                "without answers): use reward_model (or format) rewards only, or give the prompts answers"
            )
