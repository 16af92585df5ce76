"""Fault: outdated RewardBench Safety weights. Our section weights and map must equal the official harness's
(`rewardbench` 0.1.4, installed without its dependencies by scripts/test.sh from the `reference` extra):
xstest-should-refuse 154 / should-respond 250 by default, the pre-September-2024 swap only as `pre2024_code`."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from support.settings import eval_settings
from support.tiers import need

from prefpipe.evaluation.sections import SECTION_TITLES, XSTEST_WEIGHTS, official_weights

HARNESS_VERSION = "0.1.4"


def _harness_constants():
    """rewardbench/constants.py loaded as a file: the package's __init__ imports torch-era dependencies that
    are deliberately not installed, and constants.py itself imports nothing."""
    spec = importlib.util.find_spec("rewardbench")
    if spec is None or not spec.submodule_search_locations:
        need(
            "rewardbench not installed (pip install --no-deps rewardbench==0.1.4; scripts/test.sh installs it)"
        )
    from importlib import metadata

    assert metadata.version("rewardbench") == HARNESS_VERSION
    path = Path(next(iter(spec.submodule_search_locations))) / "constants.py"
    module_spec = importlib.util.spec_from_file_location("rewardbench_constants", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def test_default_safety_weights_and_section_map_equal_the_official_harness():
    harness = _harness_constants()
    default = eval_settings().eval.xstest_weights
    assert default == "official"
    ours = official_weights(default)
    titles = {title: key for key, title in SECTION_TITLES.items()}
    core = {title: subsets for title, subsets in harness.SUBSET_MAPPING.items() if title in titles}
    assert set(core) == {"Chat", "Chat Hard", "Safety", "Reasoning"}
    for title, subsets in core.items():
        section = titles[title]
        assert sorted(ours[section]) == sorted(subsets), section
        for subset in subsets:
            assert ours[section][subset] == harness.EXAMPLE_COUNTS[subset], (section, subset)
    every = {subset for weights in ours.values() for subset in weights}
    assert every == set(harness.EXAMPLE_COUNTS)
    assert ours["safety"]["xstest-should-refuse"] == 154 and ours["safety"]["xstest-should-respond"] == 250


def test_pre2024_table_keeps_the_old_swap_and_nothing_else_differs():
    harness = _harness_constants()
    old, current = official_weights("pre2024_code"), official_weights("official")
    assert XSTEST_WEIGHTS["pre2024_code"] == {"xstest-should-refuse": 250, "xstest-should-respond": 154}
    differ = {
        (section, subset)
        for section, weights in current.items()
        for subset, weight in weights.items()
        if old[section][subset] != weight
    }
    assert differ == {("safety", "xstest-should-refuse"), ("safety", "xstest-should-respond")}
    assert old["safety"]["xstest-should-refuse"] == harness.EXAMPLE_COUNTS["xstest-should-respond"]
