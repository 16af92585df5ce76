"""Settings of the report rule (`report`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from prefpipe.settings.run import RunSettings


@dataclass
class AblationSettings:
    reference: str
    broken: str  # ablation.broken, carried like the reference
    variants: list[str]
    baselines: list[str]
    ignore_keys: list[str]


@dataclass
class PolicyComparisonSettings:
    """Paired comparisons of GRPO runs (prefpipe.grpo.analyses.paired): arms pool the seeds of one setting; each
    contrast [A, B] is A - B. A run in no arm is an arm of its own, under its own name."""

    arms: dict[str, list[str]]
    contrasts: list[list[str]]

    def arm_runs(self, runs: list[str]) -> dict[str, list[str]]:
        """{arm: its runs among `runs`}: the declared arms, then every other run as its own arm."""
        arms = {name: [r for r in members if r in runs] for name, members in self.arms.items()}
        grouped = {r for members in self.arms.values() for r in members}
        arms |= {r: [r] for r in runs if r not in grouped}
        return {name: members for name, members in arms.items() if members}

    def check(self, runs: list[str]) -> None:
        """Arms name trained runs and contrasts name arms or runs (a one-line error naming the key)."""
        from prefpipe.common.config import ConfigError

        for name, members in self.arms.items():
            unknown = [r for r in members if r not in runs]
            if unknown:
                raise ConfigError(
                    f"report.policy_comparison.arms.{name}: {unknown} are not GRPO runs ({runs})"
                )
        known = set(self.arms) | set(runs)
        for i, pair in enumerate(self.contrasts):
            if len(pair) != 2 or not set(pair) <= known:
                raise ConfigError(
                    f"report.policy_comparison.contrasts[{i}] = {pair}: name two arms or runs ({sorted(known)})"
                )


@dataclass(frozen=True)
class Thresholds:
    """When a GRPO metric counts as unhealthy (see grpo/analyses/health.py for how each one is applied)."""

    kl_mean_max: float
    kl_spike_factor: float
    kl_spike_floor: float
    log_ratio_abs_max: float
    zero_std_frac_max: float
    grad_norm_max: float
    grad_norm_spike_factor: float
    truncated_ratio_max: float
    entropy_min: float
    prompt_loss_share_max: float
    env_loss_share_max: float
    baseline_window: int


@dataclass
class ReportSettings(RunSettings):
    stage_schema: ClassVar[str] = "report.schema.yaml"
    derived_keys: ClassVar[tuple[str, ...]] = ("ablation.reference", "ablation.broken")

    title: str | None
    compare: dict[str, str]
    strict: bool
    paper_reference_rows: bool
    primary_benchmark: str | None
    ablation: AblationSettings
    samples_per_run: int
    sample_max_chars: int
    smooth_window: int
    figure_dpi: int
    diagnostics: Thresholds
    policy_comparison: PolicyComparisonSettings
