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


def pool_readers(settings: ActiveLearningSettings, arm_name: str, round_: int) -> list[str]:
    """The variants whose pool scores a selection reads from this round: the scorers of the strategies that
    pick the next round's labels from it (none after the last round)."""
    if round_ + 1 >= settings.rounds:
        return []
    strategies = settings.strategies if arm_name == INITIAL else [arm_name]
    return list(dict.fromkeys(v for s in strategies for v in acquisition(s).scorers(settings)))


def trained(settings: ActiveLearningSettings, arm_name: str, round_: int) -> list[str]:
    """The variants a round trains: the learner (the curve) and the pool readers."""
    return list(dict.fromkeys([settings.learner, *pool_readers(settings, arm_name, round_)]))
