"""The report's sections, in reading order: a registry of modules, each with `build(ctx) -> Section | None`
(None: nothing to show, the section is left out) and optionally `claims(ctx) -> list[Claim]`, the sentences it
contributes to the answers at the top. A new section is one module added to SECTIONS; no other changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from prefpipe.report import frames, plots
from prefpipe.report.document import Figure, Paragraph
from prefpipe.report.inputs import Tree
from prefpipe.reward.heads.facts import HEAD_FACTS
from prefpipe.settings.report import ReportSettings


@dataclass
class Context:
    """What every section reads: the main tree, the compared trees, the settings and the tidy tables."""

    tree: Tree
    others: list[Tree]
    settings: ReportSettings
    scores: pd.DataFrame = field(init=False)
    policy: pd.DataFrame = field(init=False)
    bench: str | None = field(init=False)
    bench_source: str = field(init=False)
    colors: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.scores = frames.scores(self.tree)
        self.policy = frames.policy(self.tree)
        self.bench, self.bench_source = frames.headline(self.tree, self.settings.primary_benchmark)
        self.colors = plots.colors([*self.variants, *self.runs])

    @property
    def variants(self) -> list[str]:
        return self.tree.names("eval") or self.tree.names("reward")

    @property
    def runs(self) -> list[str]:
        return list(dict.fromkeys(self.tree.names("grpo") + self.tree.names("policy_eval")))

    @property
    def heads(self) -> list[str]:
        """The main comparison: the ablation baselines and the fixed Bayesian reference, where evaluated;
        variants named after a built-in head type first, in the heads' order (reward/heads/facts.py)."""
        ab = self.settings.ablation
        wanted = [*ab.baselines, ab.reference]
        main = [v for v in self.variants if v in wanted]
        order = list(HEAD_FACTS)
        return sorted(main, key=lambda v: (order.index(v) if v in order else len(order), v))

    def headline_scores(self) -> pd.DataFrame:
        return self.scores[self.scores["benchmark"] == self.bench]

    def figure(self, name: str, title: str, png: bytes | None, caption: str) -> list:
        """A figure with its one-line explanation, or nothing when there was nothing to draw."""
        if png is None:
            return []
        return [Figure(re.sub(r"[^A-Za-z0-9_.+-]", "_", name), title, png, caption)]


def note(text: str) -> Paragraph:
    return Paragraph(text, "note")


def _registry() -> list:
    from prefpipe.report.sections import (
        ablation,
        active_learning,
        appendix,
        calibration,
        compare,
        episodes,
        grpo_training,
        hacking,
        hypotheses,
        length_bias,
        paired,
        policy,
        policy_curve,
        prompt_overlap,
        reward_training,
        rewardbench,
        samples,
        uncertainty,
    )

    return [
        rewardbench,
        uncertainty,
        active_learning,
        ablation,
        policy,
        paired,
        policy_curve,
        episodes,
        hypotheses,
        hacking,
        length_bias,
        prompt_overlap,
        calibration,
        compare,
        reward_training,
        grpo_training,
        samples,
        appendix,
    ]


SECTIONS = _registry
