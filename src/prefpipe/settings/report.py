"""Stage 5 settings (`report`)."""

from __future__ import annotations

from dataclasses import dataclass

from prefpipe.settings.run import RunSettings


@dataclass
class AblationSettings:
    reference: str
    variants: list[str]
    baselines: list[str]
    ignore_keys: list[str]


@dataclass(frozen=True)
class Thresholds:
    """When a GRPO metric counts as unhealthy (see grpo/health.py for how each one is applied)."""

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
    baseline_window: int


@dataclass
class ReportSettings(RunSettings):
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
