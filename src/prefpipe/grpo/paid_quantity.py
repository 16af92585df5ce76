"""What a reward-model reward pays at k = 0, read from its spec (grpo.rewards[]): the seed summary and the
report's what-to-use-when board both pair a risk-averse run with its k = 0 control by it. Torch-free, so the
report can import it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def paid_quantity(spec: Mapping[str, Any]) -> tuple[str, str]:
    """(risk measure, transform): the score, sigmoid(score / tau) or the predictive probability. A risk-averse
    run's control is the run of the same reward model paying the same quantity without aversion. The fallbacks
    read run configs written before these keys existed, whose rewards paid the score."""
    return spec.get("risk_measure") or "sd", spec.get("transform") or "none"
