"""Settings of the grpo_hypotheses stage (`grpo.hypotheses`, with the report's diagnostic thresholds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prefpipe.settings.report import Thresholds
from prefpipe.settings.run import RunSettings


@dataclass
class HypothesisTest:
    factor: str  # the one factor changed against the baseline, in words
    runs: list[str]  # GRPO runs (grpo.runs keys) that change it


@dataclass
class HypothesesSettings(RunSettings):
    stage_schema: ClassVar[str] = "grpo.schema.yaml#/$defs/hypotheses"
    derived_keys: ClassVar[tuple[str, ...]] = ("diagnostics",)

    baseline: str
    bootstrap_samples: int
    confidence: float
    tail_steps: int
    tests: dict[str, HypothesisTest]
    diagnostics: Thresholds  # report.diagnostics: the checks that say which diagnostics fired and when

    def runs(self) -> list[str]:
        """The baseline and every test's runs, once each, in order."""
        return list(dict.fromkeys([self.baseline, *(r for t in self.tests.values() for r in t.runs)]))
