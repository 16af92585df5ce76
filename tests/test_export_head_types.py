"""Export asks the head registry, and the standalone loader's own table of head types refuses a type it cannot
score: built from the folder's `reward_head.json` before any model is read, with a message naming the type and
the types it knows; the export refuses such a head before writing anything."""

from __future__ import annotations

import json

import pytest

from prefpipe.export import reward_loader
from prefpipe.export.card import _head_math
from prefpipe.export.sequence_classification import exportable_config, linear_reward_heads
from prefpipe.reward.heads.facts import HEAD_FACTS
from prefpipe.reward.heads.registry import HEADS


def test_the_loaders_table_scores_every_built_in_head_as_the_registry_describes_it():
    assert set(reward_loader.HEAD_TYPES) == set(HEAD_FACTS)
    for name, kind in reward_loader.HEAD_TYPES.items():
        cls = HEADS[name]
        assert (kind.scalar_reward, kind.bayesian) == (cls.scalar_reward, cls.bayesian), name


def test_an_unknown_head_type_is_refused_by_the_exported_loader(tmp_path):
    (tmp_path / reward_loader.HEAD_JSON).write_text(
        json.dumps({"format": reward_loader.FORMAT, "head_type": "mystery"})
    )
    with pytest.raises(ValueError) as err:
        reward_loader.ExportedRewardModel.from_folder(tmp_path)
    message = str(err.value)
    print(message)
    assert (
        f"{tmp_path / reward_loader.HEAD_JSON}: head_type 'mystery' is not a head type this loader" in message
    )
    assert "it knows bt, gpm, bgpm" in message


def test_export_forms_and_card_ask_the_registry():
    """The sequence-classification form is for heads with a linear reward (BT: the registry's own answer), and
    the card's head math comes from the head facts (a head without facts is named, not guessed)."""
    assert linear_reward_heads() == ["bt"]
    assert "head.type: bt on a decoder backbone" in exportable_config()
    assert _head_math("gpm") == HEAD_FACTS["gpm"].math
    assert _head_math("mystery") == "A 'mystery' reward head."
