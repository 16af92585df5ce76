"""The learner's KL weight for one round (`active_learning.kl_weight`). A Bayesian head's max_kl_weight is stated
for the full training set (about batch / dataset size); a round trains on a labelled subset of it, so
`labelled` multiplies the weight by (training pairs / labelled pairs) of that round, keeping the rule true for
the set actually trained on. `fixed` keeps the variant's value (the weight of the full-data model)."""

from __future__ import annotations

import dataclasses

from prefpipe.common.config import ConfigError
from prefpipe.reward.heads.registry import HEADS, get_head_class
from prefpipe.settings.reward import RewardSettings

MODES = ("fixed", "labelled")


def scaled_kl_weight(settings: RewardSettings, full_pairs: int, labelled_pairs: int) -> RewardSettings:
    """The settings with head.bayes.max_kl_weight times full_pairs / labelled_pairs."""
    bayes = settings.head.bayes
    if not get_head_class(settings.head.type).bayesian or bayes is None:
        raise ConfigError(
            f"active_learning.kl_weight = labelled: the learner's head is {settings.head.type}, not a Bayesian head "
            f"({', '.join(name for name, cls in HEADS.items() if cls.bayesian)})"
        )
    if not 0 < labelled_pairs <= full_pairs:
        raise ConfigError(f"active_learning: {labelled_pairs} labelled pairs of {full_pairs} training pairs")
    weight = bayes.max_kl_weight * full_pairs / labelled_pairs
    head = dataclasses.replace(settings.head, bayes=dataclasses.replace(bayes, max_kl_weight=weight))
    return dataclasses.replace(settings, head=head)
