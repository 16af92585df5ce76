"""Faults: a model that does not load. Each stage that loads one (build_base's base.pretrained, train_reward's
backbone, train_grpo's policy, the reward model evaluation and GRPO read) stops with exit 2 and one line
naming the setting, the path and what is wrong with it; no traceback, no output written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.models import build_reward, save_tiny_base, save_tiny_policy
from support.rows import write_reward_data
from support.settings import base_settings, grpo_settings, reward_settings, stage_json
from support.stages import run_main

from prefpipe import build_base, train_grpo, train_reward
from prefpipe.common.torch_runtime.model_errors import ModelLoadError
from prefpipe.reward.model import load_reward_model, save_reward_model


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


@pytest.fixture(scope="module")
def policy(tmp_path_factory) -> Path:
    return save_tiny_policy(tmp_path_factory.mktemp("models") / "policy", seed=1)


def _damaged(policy: Path, tmp_path: Path, damage: str) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(policy, folder)
    if damage == "truncated weights":
        _truncate(folder / "model.safetensors")
    elif damage == "garbled config":
        (folder / "config.json").write_text('{"model_type": "llama",, }')
    elif damage == "no weights":
        (folder / "model.safetensors").unlink()
    return folder


BASE_CASES = [
    ("truncated weights", "model.safetensors is truncated or corrupt"),
    ("garbled config", "config.json does not parse"),
    ("no weights", "no weights in the folder"),
]


@pytest.mark.parametrize(("damage", "says"), BASE_CASES, ids=[d for d, _ in BASE_CASES])
def test_build_base_names_base_pretrained_the_folder_and_the_damage(policy, tmp_path, caplog, damage, says):
    folder = _damaged(policy, tmp_path, damage)
    config = stage_json(base_settings({"source": "pretrained", "pretrained": str(folder)}))
    out = tmp_path / "out"
    code, errors = run_main(build_base.main, config, caplog, data=tmp_path, pretrained=folder, out=out)
    assert code == 2
    assert errors == [f"build_base: base.pretrained {folder}: {errors[0].split(': ', 2)[2]}"], errors
    assert says in errors[0], errors
    assert not (out / "model").exists()


def test_a_missing_base_path_that_reads_as_a_hub_id_says_the_hub_is_offline(tmp_path, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = "models/not-there"  # relative, one slash: what transformers would look up on the hub
    config = stage_json(base_settings({"source": "pretrained", "pretrained": missing}))
    code, errors = run_main(build_base.main, config, caplog, data=tmp_path, pretrained=missing, out="out")
    assert code == 2
    assert errors == [
        f"build_base: base.pretrained {missing}: no such local folder, and as a hub id it cannot be fetched: "
        "the hub is offline (HF_HUB_OFFLINE=1); give a model folder, or download the model first"
    ], errors


def test_train_reward_names_the_backbone_and_the_truncated_weights(tmp_path, caplog):
    base = save_tiny_base(tmp_path / "base")
    _truncate(base / "model.safetensors")
    data = write_reward_data(tmp_path / "data")
    out = tmp_path / "out"
    config = stage_json(reward_settings({"train": {"steps": 1}}))
    code, errors = run_main(train_reward.main, config, caplog, data=data, base=base, out=out)
    assert code == 2
    assert (
        len(errors) == 1 and f"backbone.model {base}: model.safetensors is truncated or corrupt" in errors[0]
    )
    assert not (out / "model").exists() and not (out / "metrics.jsonl").exists()


def test_train_grpo_names_the_policy_and_the_truncated_weights(policy, tmp_path, caplog):
    folder = _damaged(policy, tmp_path, "truncated weights")
    data = tmp_path / "data"
    data.mkdir()
    (data / "rl_prompts_train.jsonl").write_text(
        '{"id": "a", "prompt": "2+2?", "answer": "4", "kind": "add"}\n'
    )
    out = tmp_path / "out"
    config = stage_json(grpo_settings({"steps": 1}))
    code, errors = run_main(train_grpo.main, config, caplog, data=data, policy=folder, out=out)
    assert code == 2
    assert len(errors) == 1 and f"policy {folder}: model.safetensors is truncated or corrupt" in errors[0]
    assert not (out / "policy").exists()


def test_a_saved_reward_model_with_a_truncated_head_is_named(tmp_path):
    base = save_tiny_base(tmp_path / "base")
    folder = save_reward_model(build_reward(base, "bt")[0], tmp_path / "rm")
    _truncate(folder / "head.safetensors")
    with pytest.raises(ModelLoadError) as info:
        load_reward_model(folder)
    assert str(info.value).startswith(f"reward model {folder}: head.safetensors is truncated or corrupt")
