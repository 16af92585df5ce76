"""The report's settings: a flat view of prefpipe.settings.report.ReportSettings (typed and checked there)."""

from __future__ import annotations

from dataclasses import dataclass

from prefpipe.settings.report import ReportSettings, Thresholds


@dataclass(frozen=True)
class Settings:
    experiment: str
    title: str
    compare: dict[str, str]
    strict: bool
    paper_reference_rows: bool
    primary_benchmark: str | None
    ablation_reference: str
    ablation_variants: list[str]
    ablation_baselines: list[str]
    ablation_ignore_keys: list[str]
    samples_per_run: int
    sample_max_chars: int
    smooth_window: int
    figure_dpi: int
    thresholds: Thresholds


def load_settings(cfg: ReportSettings) -> Settings:
    """The report's flat view of its typed settings (prefpipe.settings.report)."""
    ablation = cfg.ablation
    return Settings(
        experiment=cfg.experiment,
        title=cfg.title or f"prefpipe report: {cfg.experiment}",
        compare=dict(cfg.compare),
        strict=cfg.strict,
        paper_reference_rows=cfg.paper_reference_rows,
        primary_benchmark=cfg.primary_benchmark,
        ablation_reference=ablation.reference,
        ablation_variants=list(ablation.variants),
        ablation_baselines=list(ablation.baselines),
        ablation_ignore_keys=list(ablation.ignore_keys),
        samples_per_run=cfg.samples_per_run,
        sample_max_chars=cfg.sample_max_chars,
        smooth_window=cfg.smooth_window,
        figure_dpi=cfg.figure_dpi,
        thresholds=cfg.diagnostics,
    )
