"""Where the active-learning rules write, one owner for the workflow (workflow/rules/active.smk) and the stages:

    <root>/<arm>/seed<S>/round<R>/data/               the labelled set (prefpipe.active.labelled)
    <root>/<arm>/seed<S>/round<R>/reward/<variant>/   a model trained on it (prefpipe.train_reward)
    <root>/<arm>/seed<S>/round<R>/scores/<variant>/   its pool and test scores (prefpipe.active.pool_scores)
    <root>/summary.json                               the curves (prefpipe.active.curve)

<arm> is the strategy, except in round 0, whose labelled set (a seeded random sample) and models every strategy
shares: there it is `initial`, so round 0 is trained once per seed.
"""

from __future__ import annotations

from prefpipe.active.select import acquisition
from prefpipe.settings.active import ActiveLearningSettings

INITIAL = "initial"
FOLDER = "active_learning"  # under the results folder


def arm(strategy: str, round_: int) -> str:
    return INITIAL if round_ == 0 else strategy


def round_dir(root: str, strategy: str, seed: int, round_: int) -> str:
    return f"{root}/{arm(strategy, round_)}/seed{seed}/round{round_}"


def trained(settings: ActiveLearningSettings, arm_name: str, round_: int) -> list[str]:
    """The variants a round trains: the learner (the curve), and the scorers of the strategies that select the
    next round's labels from this one (none after the last round)."""
    names = [settings.learner]
    if round_ + 1 < settings.rounds:
        strategies = settings.strategies if arm_name == INITIAL else [arm_name]
        for strategy in strategies:
            names += acquisition(strategy).scorers(settings)
    return list(dict.fromkeys(names))
