"""Settings of the ablation rule (`ablation`): the Bayesian GPM ablation as paired bootstrap contrasts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prefpipe.common.config import ConfigError
from prefpipe.settings.run import RunSettings


@dataclass
class FixVariants:
    """The two variants that isolate one fix: broken + only this fix, and the reference without only this fix."""

    added: str
    removed: str


@dataclass
class AblationStageSettings(RunSettings):
    stage_schema: ClassVar[str] = "ablation.schema.yaml#/$defs/stage"
    derived_keys: ClassVar[tuple[str, ...]] = ("variants",)

    reference: str  # the fixed variant (every fix on)
    broken: str  # every fix off
    fixes: dict[str, FixVariants]  # derived from ablation.fixes (prefpipe.settings.ablation_variants)
    benchmark: str | None  # null = the primary benchmark the evaluation recorded
    bootstrap_resamples: int
    confidence: float
    # The reward variants this run trains (reward.only applied), in config order. Derived by PipelineSettings,
    # not a config key: a row is computed only where both of its variants are among them.
    variants: list[str]

    def contrasts(self) -> list[tuple[str, str, str, str]]:
        """(fix, kind, variant, baseline) for every row whose two variants are trained: kind `added` compares
        broken + fix with broken, kind `removed` compares reference - fix with the reference."""
        rows = []
        for kind in ("added", "removed"):
            for fix, pair in self.fixes.items():
                variant, baseline = (
                    (pair.added, self.broken) if kind == "added" else (pair.removed, self.reference)
                )
                if variant in self.variants and baseline in self.variants:
                    rows.append((fix, kind, variant, baseline))
        return rows

    def check_names(self, declared: list[str]) -> None:
        """Every variant named here is a reward.variants key (a typo would silently drop its rows)."""
        named = {"reference": self.reference, "broken": self.broken}
        for fix, pair in self.fixes.items():
            named |= {f"fixes.{fix}.added": pair.added, f"fixes.{fix}.removed": pair.removed}
        for key, name in named.items():
            if name not in declared:
                raise ConfigError(f"ablation.{key} = {name!r} is not in reward.variants ({declared})")
