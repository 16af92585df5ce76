"""Settings of the active-learning rules (`active_learning`; docs/findings/ACTIVE_LEARNING.md): rounds of train -> score the
unlabelled pool -> add the most uncertain pairs -> retrain, per acquisition strategy and seed, at equal label
budgets. Which strategies exist (and what each one scores) is the active layer's registry
(prefpipe.active.select); the names are checked against it by prefpipe.config_checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prefpipe.common.config import ConfigError
from prefpipe.settings.run import RunSettings


@dataclass
class ActiveLearningSettings(RunSettings):
    stage_schema: ClassVar[str] = "active_learning.schema.yaml"
    derived_keys: ClassVar[tuple[str, ...]] = ("members",)

    strategies: list[str]  # acquisition strategies (prefpipe.active.select.ACQUISITIONS keys)
    learner: str  # the reward variant trained each round; its test accuracy is the curve
    ensemble: str | None  # the eval.ensembles entry whose members' disagreement the `ensemble` strategy reads
    seeds: list[int]  # each seed: its own initial labelled set, training seeds and random draws
    rounds: int  # trained rounds per strategy and seed (round 0: the initial labelled set)
    initial_labels: int  # labelled pairs of round 0 (a seeded random sample, shared by every strategy)
    labels_per_round: int  # pairs added before each later round
    batch_size: int  # sequences per forward pass when scoring the pool and the test pairs
    # fixed: the learner keeps its variant's max_kl_weight; labelled: times (training pairs / labelled pairs) of
    # the round, so "batch / dataset size" holds for the set it trains on (prefpipe.active.kl_weight)
    kl_weight: str
    # the curve's anchor target: this fraction of the last round's accuracy (the full-data accuracy when the
    # last round labels every training pair), prefpipe.active.curve.fraction_table
    target_fraction: float
    posterior_samples: int  # seeded posterior draws of P(a > b) per pool pair (a Bayesian learner; 0: none)
    joint_configs: int  # BatchBALD: joint labels enumerated up to this count, then as many sampled
    epig_targets: int  # EPIG: target pairs, a seeded sample of the pool
    diversity_weight: float  # BAL-PM: weight of the prompt features' entropy gain beside the BALD
    diversity_neighbours: int  # BAL-PM: k of the k-th-neighbour entropy estimate
    # The ensemble's members (eval.ensembles[ensemble]); derived by PipelineSettings, not a config key.
    members: list[str]

    def labels(self, round_: int) -> int:
        """Labelled pairs after round `round_`'s selection (the budget is the same for every strategy)."""
        return self.initial_labels + round_ * self.labels_per_round

    def check(self) -> None:
        if len(set(self.strategies)) != len(self.strategies):
            raise ConfigError(f"strategies: {self.strategies} names a strategy twice")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(f"seeds: {self.seeds} names a seed twice")
