"""Bad input gets a clear error naming the config key or the file and row."""

from __future__ import annotations

import json
import re

import pytest
from support.settings import reward_settings, tiny_reward_settings

from prefpipe.common.config import ConfigError
from prefpipe.reward.pairs import read_pairs
from prefpipe.settings.reward import accumulation_steps


def test_defaults_are_the_design_note_fixed_settings():
    bayes = reward_settings(variant="bgpm").head.bayes
    assert (bayes.kl_warmup_steps, bayes.max_kl_weight, bayes.prior_variance) == (48, 1e-4, 10.0)
    assert (bayes.kl_mean, bayes.logvar_init_scale, bayes.logvar_clamp) == ("normalized", 0.1, (-8.0, 2.0))
    head = reward_settings().head
    assert (head.type, head.tau, head.normalize, head.gate) == ("gpm", 0.1, True, True)
    assert head.bayes == bayes  # every head carries the defaults' bayes block; only bgpm reads it


def test_odd_head_dimension_names_the_key():
    with pytest.raises(ConfigError, match=r"head\.dim: 5 is not a multiple of 2"):
        reward_settings({"head": {"type": "gpm", "dim": 5}})
    with pytest.raises(ConfigError, match=r"head\.dim"):
        reward_settings({"head": {"type": "bgpm", "dim": 3}})


@pytest.mark.parametrize(
    ("variant", "overrides", "key", "message"),
    [
        (
            "gpm",
            {"head": {"type": "gpn"}},
            ".head.type",
            "unknown reward head 'gpn'; known heads: bgpm, bt, gpm",
        ),
        ("bgpm", {"head": {"bayes": {"kl_mean": "sphere"}}}, ".head.bayes.kl_mean", "'sphere' is not one of"),
        ("bgpm", {"head": {"bayes": {"prior_variance": 0}}}, ".head.bayes.prior_variance", "0 is less"),
        ("bgpm", {"head": {"bayes": {"logvar_clamp": [2, -8]}}}, ".head.bayes.logvar_clamp", "expected"),
        ("bgpm", {"head": {"bayes": {"warmup": 10}}}, ".head.bayes", ".*'warmup' was unexpected"),
        ("gpm", {"head": {"tau": 0}}, ".head.tau", "0 is less"),
        ("gpm", {"train": {"lr": 1e-3}}, ".train", ".*'lr' was unexpected"),
        ("gpm", {"train": {"lr_schedule": "step"}}, ".train.lr_schedule", "'step' is not one of"),
        ("gpm", {"data": {"padding_side": "middle"}}, ".data.padding_side", "'middle' is not one of"),
        ("gpm", {"backbone": {"pooling": "max"}}, ".backbone.pooling", "'max' is not one of"),
        ("gpm", {"rewards": {}}, "", ".*'rewards' was unexpected"),
    ],
)
def test_bad_values_and_typos_name_the_key(variant, overrides, key, message):
    with pytest.raises(ConfigError, match=rf"reward\.variants\.{variant}{re.escape(key)}: {message}"):
        reward_settings(overrides, variant=variant)


def test_batch_must_split_into_micro_batches_per_process():
    train = tiny_reward_settings(train={"batch_size": 12, "micro_batch_size": 4}).train
    assert accumulation_steps(train, 1) == 3
    with pytest.raises(
        ConfigError, match=r"train\.batch_size \(12\).*micro_batch_size \(4\) x processes \(2\)"
    ):
        accumulation_steps(train, 2)


def _write(path, rows):
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def test_pairs_missing_field_names_file_and_row(tmp_path):
    good = {"id": "a", "prompt": "p", "chosen": "x", "rejected": "y", "subset": "s"}
    path = _write(tmp_path / "pairs.jsonl", [good, {"id": "b", "prompt": "p", "rejected": "y"}])
    with pytest.raises(ValueError, match=r"pairs\.jsonl:2: missing field 'chosen'"):
        read_pairs(path)
    _write(path, [good, {**good, "rejected": 3}])
    with pytest.raises(ValueError, match=r"pairs\.jsonl:2: field 'rejected' must be a string"):
        read_pairs(path)
    _write(path, [good, "{not json"])
    with pytest.raises(ValueError, match=r"pairs\.jsonl:2: not valid JSON"):
        read_pairs(path)
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_pairs(tmp_path / "missing.jsonl")


def test_pairs_without_signal_are_skipped_and_counted_by_reason(tmp_path):
    rows = [
        {"prompt": "p", "chosen": "x", "rejected": "y"},
        {"prompt": "p", "chosen": "same", "rejected": "same"},
        {"prompt": "p", "chosen": "  ", "rejected": "y"},
    ]
    pairs, skipped = read_pairs(_write(tmp_path / "pairs.jsonl", rows))
    assert len(pairs) == 1 and pairs[0].subset == "all"
    assert skipped == {"chosen_equals_rejected": 1, "empty_response": 1}
