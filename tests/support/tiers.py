"""Which skips CI accepts (issue 52): a tier CI must run either runs or fails the run, naming what is missing.

Under CI=true (`.ci/run`), `need(...)` turns a missing requirement into a failure instead of a skip, and
tests/conftest.py fails the session when any test skipped for a reason outside OPTIONAL_TIERS (the skips are
listed by reason). Outside CI nothing changes: a missing Chromium, SLURM or ../shared/data skips, naming why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest


def in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab and .ci/run's callers set it; 1/yes accepted)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class OptionalTier:
    name: str
    reason_starts: str  # the skip reason's opening words, as the skip site writes them
    why_optional: str
    required_when: str = ""  # an environment switch that makes the tier required (its skips then fail CI)

    def matches(self, reason: str) -> bool:
        if self.required_when and os.environ.get(self.required_when) == "1":
            return False
        return reason.startswith(self.reason_starts)


# The skips CI may show; every other skip fails a CI run. Each reason_starts is the exact text its site writes.
OPTIONAL_TIERS = (
    OptionalTier(
        "slow tier",
        "slow tier: set PREFPIPE_SLOW=1 to run",
        "pretrained backbones and long training (PREFPIPE_SLOW=1): tens of minutes on 2 cores",
        required_when="PREFPIPE_SLOW",
    ),
    OptionalTier(
        "vLLM tier",
        "vllm does not import here",
        "vLLM lives in its own virtualenv (scripts/vllm_env.sh, about 2.9 GB); "
        "PREFPIPE_VLLM=1 bash scripts/test.sh runs it",
        required_when="PREFPIPE_VLLM",
    ),
    OptionalTier(
        "vLLM virtualenv only",
        "vllm is installed here: nothing to refuse",
        "checks that the main virtualenv refuses rollout.engine: vllm; inside the vLLM virtualenv there is none",
    ),
    OptionalTier(
        "GPU tier",
        "needs a CUDA device:",
        "CI has no GPU; benchmarks/device_window.sh runs these checks in a GPU window",
    ),
    OptionalTier(
        "CPU-only answers",
        "asserts the CPU-only answers",
        "on a CUDA machine the device helpers answer differently; CI is CPU-only",
    ),
)


def declared(reason: str) -> OptionalTier | None:
    """The optional tier a skip reason belongs to, or None (a skip CI must not accept)."""
    return next((tier for tier in OPTIONAL_TIERS if tier.matches(reason)), None)


def need(missing: str | None, *, allow_module_level: bool = False) -> None:
    """Skip (outside CI) or fail (CI=true) naming what is missing; no-op when `missing` is None."""
    if missing is None:
        return
    if in_ci():
        pytest.fail(f"CI=true requires it: {missing}", pytrace=False)
    pytest.skip(missing, allow_module_level=allow_module_level)
