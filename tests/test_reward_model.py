"""RewardModel API on a real tiny Llama: encode/compare, save/load round trip, batch-size invariance,
pad-token handling."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from safetensors.torch import load_file
from support.eval_args import EVAL
from support.models import build_reward, save_tiny_base

from prefpipe.common.config import ConfigError
from prefpipe.reward.model import load_reward_model, save_reward_model

PROMPTS = ["What is 2 plus 3?", "Play!", "Please be polite.", "Your move?"] * 4
RESPONSES = [
    "5",
    "rock",
    "I cannot help with that.",
    "paper, then scissors, then rock again and again",
    "The answer is 5.",
    "scissors",
    "Sure, here you go.",
    "no",
] * 2


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base"))


@pytest.fixture(scope="module")
def tiny_base_nopad(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("tiny_base_nopad"), pad=False)


@pytest.mark.parametrize("head", ["bt", "gpm", "bgpm"])
def test_scores_do_not_depend_on_batch_size_or_padding_side(tiny_base, head):
    rm, _ = build_reward(tiny_base, head)
    rm.eval()
    one = rm.encode(PROMPTS, RESPONSES, batch_size=1)
    sixteen = rm.encode(PROMPTS, RESPONSES, batch_size=16)
    rm.encoder.padding_side = "left"
    left = rm.encode(PROMPTS, RESPONSES, batch_size=5)
    for key in one:
        torch.testing.assert_close(one[key], sixteen[key], atol=1e-5, rtol=0)
        torch.testing.assert_close(one[key], left[key], atol=1e-5, rtol=0)
    score, var = rm.compare(one, {k: v.roll(1, 0) for k, v in one.items()})
    assert score.dtype == torch.float32 and score.shape == (16,)
    assert score.abs().max() > 0  # a real signal, not a constant
    assert (var is None) == (head != "bgpm")


@pytest.mark.parametrize("head", ["gpm", "bgpm"])
def test_model_level_skew_symmetry(tiny_base, head):
    rm, _ = build_reward(tiny_base, head)
    rm.eval()
    a = rm.encode(PROMPTS[:8], RESPONSES[:8], batch_size=EVAL.batch_size)
    b = rm.encode(PROMPTS[:8], RESPONSES[8:16][::-1], batch_size=EVAL.batch_size)
    s_ab, var_ab = rm.compare(a, b)
    s_ba, var_ba = rm.compare(b, a)
    torch.testing.assert_close(s_ab, -s_ba)
    assert torch.all(rm.compare(a, a)[0] == 0)
    if head == "bgpm":
        torch.testing.assert_close(var_ab, var_ba)
        assert torch.all(var_ab > 0)
        p_ab, p_ba = rm.preference_prob(a, b), rm.preference_prob(b, a)  # one integral, both directions
        torch.testing.assert_close(p_ab + p_ba, torch.ones(8, dtype=torch.float64), atol=1e-6, rtol=0)


def test_posterior_mean_evaluation_is_deterministic(tiny_base):
    rm, _ = build_reward(tiny_base, "bgpm")
    rm.eval()
    torch.manual_seed(1)
    first = rm.encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)
    torch.manual_seed(2)
    second = rm.encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)
    for key in first:
        assert torch.equal(first[key], second[key])
    rm.train()
    with pytest.raises(RuntimeError, match="eval mode"):
        rm.encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)


@pytest.mark.parametrize(
    ("head", "embedding_features"), [("bt", True), ("gpm", True), ("bgpm", True), ("gpm", False)]
)
def test_save_load_round_trip_gives_identical_scores(tiny_base, tmp_path, head, embedding_features):
    """Weights, standardisation buffers and the head's input width (2H with embedding_features) survive."""
    rm, _ = build_reward(tiny_base, head, backbone={"embedding_features": embedding_features})
    hidden = rm.spec.hidden_size
    width = 2 * hidden if embedding_features else hidden
    assert rm.head.value_head.in_features == width
    with torch.no_grad():  # move the head away from its init so the check covers trained weights
        for p in rm.head.parameters():
            p.add_(0.05 * torch.randn_like(p))
        rm.head.input_norm.fit(3.0 * torch.randn(50, width) + torch.linspace(-1, 1, width))
    assert not torch.equal(rm.head.input_norm.mean, torch.zeros(width))
    rm.eval()
    expected = rm.encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)
    folder = save_reward_model(rm, tmp_path / "model")
    loaded = load_reward_model(folder)
    assert loaded.head_type == head and loaded.tau == pytest.approx(0.1) and not loaded.training
    assert (
        loaded.head.value_head.in_features == width and loaded.spec.embedding_features is embedding_features
    )
    if getattr(loaded.head, "gate", None) is not None:  # the gate reads the prompt state: width H either way
        assert loaded.head.gate.prompt_head.in_features == hidden
    for name in ("mean", "inv_sd"):
        assert torch.equal(getattr(loaded.head.input_norm, name), getattr(rm.head.input_norm, name))
    got = loaded.encode(PROMPTS, RESPONSES, batch_size=3)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=0)
    config = json.loads((folder / "head_config.json").read_text())
    assert config["head_type"] == head and config["pooling"] == "last" and config["max_length"] == 64
    assert config["head_input_size"] == width and config["head"]["standardize"] is True
    assert (folder / "model.safetensors").exists() and (folder / "tokenizer.json").exists()
    assert (
        set(load_file(str(folder / "head.safetensors")))
        == {k[5:] for k in rm.state_dict() if k.startswith("head.")}
        >= {"input_norm.mean", "input_norm.inv_sd"}
    )
    assert not list(tmp_path.glob(".model.*"))  # no temp folder left behind


def test_a_folder_saved_before_the_new_head_keys_loads_as_before(tiny_base, tmp_path):
    """head_config.json without embedding_features / head.standardize / head_input_size: pooled state only."""
    rm, _ = build_reward(
        tiny_base, "gpm", backbone={"embedding_features": False}, head={"standardize": False}
    )
    rm.eval()
    expected = rm.encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)
    folder = save_reward_model(rm, tmp_path / "model")
    config = json.loads((folder / "head_config.json").read_text())
    for key in ("embedding_features", "head_input_size"):
        del config[key]
    del config["head"]["standardize"]
    (folder / "head_config.json").write_text(json.dumps(config))
    loaded = load_reward_model(folder)
    assert loaded.spec.head_input_size == loaded.spec.hidden_size and "input_norm" not in dict(
        loaded.head.named_modules()
    )
    got = loaded.encode(PROMPTS, RESPONSES, batch_size=3)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=0)


def test_lora_backbone_saves_adapter_and_reference_to_base(tiny_base, tmp_path):
    rm, _ = build_reward(tiny_base, "gpm", lora={"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0})
    trainable = {n for n, p in rm.named_parameters() if p.requires_grad}
    assert any("lora_" in n for n in trainable) and not any(
        n.endswith("q_proj.base_layer.weight") for n in trainable
    )
    with torch.no_grad():  # LoRA B starts at zero; perturb it so the adapter matters
        for n, p in rm.named_parameters():
            if "lora_B" in n:
                p.add_(0.1 * torch.randn_like(p))
    rm.eval()
    expected = rm.encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)
    folder = save_reward_model(rm, tmp_path / "model")
    assert (folder / "adapter_model.safetensors").exists() and not (folder / "model.safetensors").exists()
    config = json.loads((folder / "head_config.json").read_text())
    assert config["backbone_format"] == "lora" and config["base_model"] == str(tiny_base)
    got = load_reward_model(folder).encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=0)


def test_tokenizer_without_pad_token_uses_eos_deliberately_or_errors(tiny_base_nopad, caplog):
    with caplog.at_level(logging.WARNING):
        rm, _ = build_reward(tiny_base_nopad, "gpm")
    assert rm.tokenizer.pad_token == rm.tokenizer.eos_token and rm.spec.pad_token_fix == "eos"
    assert "no pad token" in caplog.text
    rm.eval()
    one, many = rm.encode(PROMPTS, RESPONSES, batch_size=1), rm.encode(PROMPTS, RESPONSES, batch_size=16)
    torch.testing.assert_close(one["embedding"], many["embedding"], atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match="pad_token_fix"):
        build_reward(tiny_base_nopad, "gpm", backbone={"pad_token_fix": "error"})
    with pytest.raises(ConfigError, match="no pad token"):
        build_reward(tiny_base_nopad, "gpm", backbone={"kind": "encoder", "pooling": "mean"})


def test_compare_rejects_encodings_of_another_head(tiny_base):
    rm, _ = build_reward(tiny_base, "bgpm")
    with pytest.raises(ValueError, match="enc_a lacks"):
        rm.compare({"embedding": torch.zeros(1, 4), "gate": torch.ones(1, 2)}, {})


def test_load_rejects_a_folder_without_head_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="head_config.json"):
        load_reward_model(tmp_path)
