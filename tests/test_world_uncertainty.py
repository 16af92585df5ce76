"""Opt-in uncertainty switches of the synthetic world (prefpipe.data.synthetic_noise, issue 33): annotator
disagreement by subset and unfamiliar subsets, recorded per pair; off, the world is unchanged."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
from support.settings import data_settings, world_settings

from prefpipe.common.config import ConfigError
from prefpipe.data.prepare import prepare
from prefpipe.data.synthetic_noise import FLIP_RATE, FLIPPED, UNFAMILIAR
from prefpipe.data.synthetic_world import SUBSETS, build_world

PAIRS = frozenset({"pairs"})


def _synthetic(**switches):
    base = world_settings(
        pairs=(40, 10), triples=(6, 3), rl_prompts=(16, 8), demonstrations=16, demo_error_rate=0.2
    )
    return dataclasses.replace(base, **switches)


@pytest.fixture(scope="module")
def plain():
    return build_world(_synthetic(), 0, PAIRS)


def test_defaults_are_off(plain):
    cfg = data_settings().synthetic
    assert cfg.label_noise == {} and cfg.unfamiliar_subsets == []
    assert all(FLIP_RATE not in r and UNFAMILIAR not in r for r in plain.pairs_train + plain.pairs_test)
    assert "uncertainty" not in plain.stats


def test_label_noise_flips_an_exact_share_of_training_pairs_only(plain):
    rates = {"chat-instruct": 0.2, "safety-refuse": 0.4, "chat-arith": 0.0}
    world = build_world(_synthetic(label_noise=rates), 0, PAIRS)
    assert len(world.pairs_train) == len(plain.pairs_train)
    flipped = Counter()
    for before, after in zip(plain.pairs_train, world.pairs_train, strict=True):
        assert after[FLIP_RATE] == rates.get(before["subset"], 0.0)
        core = {k: after[k] for k in before}
        if after[FLIPPED]:
            flipped[before["subset"]] += 1
            assert core == {**before, "chosen": before["rejected"], "rejected": before["chosen"]}
        else:
            assert core == before
    assert flipped == {"chat-instruct": 8, "safety-refuse": 16}  # round(40 * rate)
    for before, after in zip(plain.pairs_test, world.pairs_test, strict=True):
        assert {k: after[k] for k in before} == before  # test labels stay the majority preference
        assert after[FLIP_RATE] == rates.get(before["subset"], 0.0) and FLIPPED not in after
    assert world.stats["uncertainty"]["flipped_train_pairs"] == {
        "chat-arith": 0,
        "chat-instruct": 8,
        "safety-refuse": 16,
    }
    again = build_world(_synthetic(label_noise=rates), 0, PAIRS)
    assert again.pairs_train == world.pairs_train
    other_seed = build_world(_synthetic(label_noise=rates), 1, PAIRS)
    assert [r[FLIPPED] for r in other_seed.pairs_train] != [r[FLIPPED] for r in world.pairs_train]


def test_unfamiliar_subsets_never_occur_in_training(plain):
    held = ["safety-consent", "cyclic-rps"]
    world = build_world(_synthetic(unfamiliar_subsets=held), 0, PAIRS)
    assert world.pairs_train == [r for r in plain.pairs_train if r["subset"] not in held]
    assert [
        {k: r[k] for k in p} for r, p in zip(world.pairs_test, plain.pairs_test, strict=True)
    ] == plain.pairs_test
    assert all(r[UNFAMILIAR] == (r["subset"] in held) for r in world.pairs_test)
    assert world.stats["uncertainty"]["unfamiliar_test_pairs"] == 10 + 9
    # both switches: the noise of the familiar subsets is drawn as without held-out subsets
    noisy = build_world(_synthetic(label_noise={"chat-instruct": 0.3}), 0, PAIRS)
    both = build_world(_synthetic(label_noise={"chat-instruct": 0.3}, unfamiliar_subsets=held), 0, PAIRS)
    assert both.pairs_train == [r for r in noisy.pairs_train if r["subset"] not in held]


def test_bad_switches_name_the_key():
    with pytest.raises(ConfigError, match=r"label_noise\.chat-typo: unknown subset"):
        build_world(_synthetic(label_noise={"chat-typo": 0.2}), 0, PAIRS)
    with pytest.raises(ConfigError, match=r"unfamiliar_subsets: every subset"):
        build_world(_synthetic(unfamiliar_subsets=list(SUBSETS)), 0, PAIRS)
    with pytest.raises(ConfigError, match=r"data\.synthetic\.label_noise\.chat-arith: 0\.5"):
        data_settings({"synthetic": {"label_noise": {"chat-arith": 0.5}}})
    with pytest.raises(ConfigError, match=r"label_noise\.chat-typo: unknown subset"):  # before any stage runs
        data_settings({"synthetic": {"label_noise": {"chat-typo": 0.2}}})
    with pytest.raises(ConfigError, match=r"data\.source is 'jsonl'"):
        data_settings(
            {
                "source": "jsonl",
                "external": {"path": "x.jsonl"},
                "synthetic": {"unfamiliar_subsets": ["cyclic-rps"]},
            }
        )


def test_prepare_writes_the_per_pair_fields_and_the_summary(tmp_path):
    synthetic = dataclasses.asdict(
        _synthetic(label_noise={"chat-arith": 0.25}, unfamiliar_subsets=["cyclic-rps"])
    )
    summary = prepare(data_settings({"synthetic": synthetic}), tmp_path)
    test_rows = [json.loads(line) for line in (tmp_path / "pairs_test.jsonl").read_text().splitlines()]
    assert all(FLIP_RATE in r and UNFAMILIAR in r for r in test_rows)
    assert summary["uncertainty_world"]["flipped_train_pairs"] == {"chat-arith": 10}
    assert summary["uncertainty_world"]["unfamiliar_test_pairs"] == 9
    assert "cyclic-rps" not in summary["subsets"]["train"]
    assert "uncertainty_world" not in prepare(
        data_settings({"synthetic": dataclasses.asdict(_synthetic())}), tmp_path / "off"
    )
