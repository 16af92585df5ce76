"""GRPO diagnostics: the first step of each unhealthy sign, checked against planted problems and brute force."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics

import pandas as pd
import pytest
from support.results_tree import PLANTED, read_results_tree, write_results_tree
from support.settings import report_settings

from prefpipe.grpo.analyses.health import REWARD_CHECKS, check_run, diagnose
from prefpipe.report import frames

DEFAULTS = report_settings().diagnostics  # report.diagnostics of the default config


def thresholds(**changed):
    """The default thresholds with `changed` values."""
    return dataclasses.replace(DEFAULTS, **changed)


def _by_check(flags):
    return {f.check: f for f in flags}


def test_planted_problems_are_found_at_their_first_step(tmp_path):
    root = tmp_path / "results"
    write_results_tree(root, reward_steps=4, grpo_steps=30)
    metrics = frames.metrics(read_results_tree(root), "grpo_metrics", "run")
    flags = diagnose(metrics, "run", thresholds())
    for run, planted in PLANTED.items():
        mine = {f.check: f for f in flags if f.run == run}
        flagged = {c: f.first_step for c, f in mine.items() if f.status == "flagged"}
        assert flagged == planted, run
        assert all(f.status in {"ok", "flagged"} for f in mine.values())  # every metric was recorded


def test_thresholds_come_from_config():
    frame = pd.DataFrame({"step": range(6), "truncated_ratio": [0.0, 0.1, 0.2, 0.3, 0.3, 0.0]})
    strict = _by_check(check_run("r", frame, thresholds(truncated_ratio_max=0.05), only=("truncation",)))
    loose = _by_check(check_run("r", frame, thresholds(truncated_ratio_max=0.25), only=("truncation",)))
    assert (strict["truncation"].first_step, strict["truncation"].n_steps) == (1, 4)
    assert (loose["truncation"].first_step, loose["truncation"].value, loose["truncation"].n_steps) == (
        3,
        0.3,
        2,
    )
    # a value equal to a strict ">" threshold does not fire; ">=" for zero-std groups does
    edge = pd.DataFrame({"step": [0, 1], "truncated_ratio": [0.25, 0.25], "frac_reward_zero_std": [0.4, 0.5]})
    flags = _by_check(check_run("r", edge, thresholds(), only=("truncation", "zero-std groups")))
    assert flags["truncation"].status == "ok"
    assert flags["zero-std groups"].first_step == 1


def test_spike_check_matches_brute_force_on_random_series():
    rng = random.Random(0)
    t = thresholds(kl_spike_factor=4.0, kl_spike_floor=0.01, baseline_window=5)
    for _ in range(30):
        values = [rng.lognormvariate(-3, 1.2) for _ in range(40)]
        frame = pd.DataFrame({"step": [10 * i for i in range(40)], "kl_k3_mean": values})
        flag = _by_check(check_run("r", frame, t, only=("KL spike",)))["KL spike"]
        expected = []
        for i, v in enumerate(values):
            history = values[max(0, i - 5) : i]
            if len(history) >= 3 and v > 4.0 * max(statistics.median(history), 0.01):
                expected.append(10 * i)
        assert flag.n_steps == len(expected)
        assert flag.first_step == (expected[0] if expected else None)


def test_missing_metric_is_not_recorded_and_nan_is_flagged():
    frame = pd.DataFrame(
        {"step": [0, 1, 2], "grad_norm": [1.0, math.nan, 2.0], "nonfinite": ["", "", "grad_norm"]}
    )
    flags = _by_check(check_run("r", frame, thresholds()))
    assert flags["entropy collapse"].status == "not recorded"
    assert flags["KL above limit"].status == "not recorded"
    assert flags["grad norm above limit"].status == "ok"  # a missing value (NaN in the table) is skipped
    assert (flags["non-finite"].status, flags["non-finite"].first_step, flags["non-finite"].metric) == (
        "flagged",
        2,
        "grad_norm",
    )


def test_steps_are_scanned_in_step_order_and_k2_is_the_fallback():
    frame = pd.DataFrame({"step": [3, 1, 2, 0], "kl_k2_mean": [5.0, 0.1, 2.0, 0.1]})
    flag = _by_check(check_run("r", frame, thresholds(kl_mean_max=1.0), only=("KL above limit",)))[
        "KL above limit"
    ]
    assert (flag.metric, flag.first_step, flag.value) == ("kl_k2_mean", 2, 2.0)


def test_reward_training_checks_only_apply_to_grad_norm_and_nan():
    frame = pd.DataFrame(
        {"variant": ["a"] * 5, "step": range(5), "grad_norm": [1, 1, 1, 1, 500.0], "nonfinite": [""] * 5}
    )
    flags = diagnose(frame, "variant", thresholds(), REWARD_CHECKS)
    assert {f.check for f in flags} == set(REWARD_CHECKS)
    assert _by_check(flags)["grad norm spike"].first_step == 4


@pytest.mark.parametrize("bad", [{"grad_norm_max": -1}, {"baseline_window": 2.5}, {"entropy_min": "low"}])
def test_bad_thresholds_name_the_key(bad):
    from prefpipe.common.config import ConfigError

    with pytest.raises(ConfigError, match=rf"report\.diagnostics\.{next(iter(bad))}: "):
        report_settings({"diagnostics": bad})


def test_kl_checks_without_reference_are_marked_not_applicable():
    from prefpipe.grpo.analyses.health import explain_unrecorded

    frame = pd.DataFrame({"run": ["r0"] * 3 + ["r1"] * 3, "step": [0, 1, 2] * 2, "entropy": [1.0] * 6})
    flags = explain_unrecorded(diagnose(frame, "run", thresholds()), {"r0": 0.0, "r1": 0.04})
    status = {(f.run, f.check): f.status for f in flags}
    assert status[("r0", "KL spike")] == "n/a (beta = 0, no reference)"
    assert status[("r1", "KL spike")] == "not recorded"  # beta > 0 but no KL logged: a real gap
    assert status[("r0", "entropy collapse")] == "ok"
