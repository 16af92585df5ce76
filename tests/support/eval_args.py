"""The evaluation's config-key arguments as the eval stage passes them, from the default settings
(config/config.yaml): batch size, xstest convention, calibration bins, selective coverages, split, bad rows,
seed. Tests pass only what they vary; the Monte Carlo check samples fewer draws than the config asks for."""

from __future__ import annotations

from typing import Any

from prefpipe.evaluation.benchmark import evaluate_rows
from prefpipe.evaluation.sections import SectionTable, build_section_table
from support.settings import eval_settings

SETTINGS = eval_settings()  # the whole eval stage's settings: `eval`, `data` (sections, bad_rows), seed
EVAL = SETTINGS.eval  # batch_size 16, xstest_weights official, calibration_bins 10, coverages 1.0 .. 0.1
# Monte Carlo draws that check the probit probabilities in tests (the config's 10000 is slower for no gain)
MC_SAMPLES = 2000
# Bootstrap resamples of the length figures' intervals in tests (the config's 1000 is slower for no gain)
LENGTH_RESAMPLES = 200


def section_table(
    config_sections: dict[str, Any] | None = None, cyclic_subsets: list[str] | None = None
) -> SectionTable:
    """build_section_table with the configured xstest convention."""
    return build_section_table(config_sections, cyclic_subsets, xstest_weights=EVAL.xstest_weights)


def evaluate(model: Any, rows: list[dict], table: SectionTable, **overrides: Any):
    """evaluate_rows with the eval stage's arguments (MC_SAMPLES draws); `overrides` replace any of them."""
    arguments = {
        "batch_size": EVAL.batch_size,
        "n_bins": EVAL.calibration_bins,
        "coverages": EVAL.selective_coverages,
        "mc_samples": MC_SAMPLES,
        "seed": SETTINGS.seed,
        "length_resamples": LENGTH_RESAMPLES,
    }
    return evaluate_rows(model, rows, table, **{**arguments, **overrides})
