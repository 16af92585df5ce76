"""backbone.likelihood_features: the frozen starting backbone's response log-likelihood as two head inputs, checked
against a causal LM's own log-softmax on a real tiny tied Llama; frozen through training; saved and reloaded."""

from __future__ import annotations

import pytest
import torch
from support.eval_args import EVAL
from support.models import build_reward, save_tiny_base, save_tiny_tied_base
from transformers import AutoModelForCausalLM

from prefpipe.common.config import ConfigError
from prefpipe.reward import likelihood
from prefpipe.reward.model import load_reward_model, save_reward_model

PROMPTS = ["What is 2 plus 3?", "Play!", "Please be polite.", "Your move?"]
RESPONSES = ["5", "rock, then paper", "I cannot help with that.", "scissors and rock again"]
ON = {"backbone": {"likelihood_features": True}}


@pytest.fixture(scope="module")
def tied_base(tmp_path_factory):
    return save_tiny_tied_base(tmp_path_factory.mktemp("tied_base"))


def _batch(rm):
    return rm.encoder.pad(rm.encoder.tokenize_many(PROMPTS, RESPONSES))


def test_features_end_with_mean_and_min_response_log_prob_of_the_causal_lm(tied_base):
    rm, _ = build_reward(tied_base, "bt", **ON)
    rm.eval()
    batch = _batch(rm)
    with torch.no_grad():
        pooled, _ = rm.features(**batch)
        logits = AutoModelForCausalLM.from_pretrained(tied_base)(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).logits
    assert pooled.shape[1] == 2 * rm.spec.hidden_size + likelihood.WIDTH == rm.spec.head_input_size
    for row in range(len(PROMPTS)):
        ids, mask, start = (
            batch["input_ids"][row],
            batch["attention_mask"][row],
            int(batch["prompt_index"][row]),
        )
        lps = [
            torch.log_softmax(logits[row, t - 1].double(), -1)[ids[t]].item()
            for t in range(start + 1, len(ids))
            if mask[t]
        ]
        assert pooled[row, -2].item() == pytest.approx(sum(lps) / len(lps), abs=1e-4)
        assert pooled[row, -1].item() == pytest.approx(min(lps), abs=1e-4)


def test_summarise_hand_computed_and_empty_rows():
    log_probs = torch.tensor([[0.0, -1.0, -3.0, -2.0], [0.0, -5.0, -1.0, -1.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])
    assert likelihood.summarise(log_probs, mask).tolist() == [[-2.0, -3.0], [0.0, 0.0]]


def test_the_likelihood_model_is_frozen_while_the_backbone_trains(tied_base):
    rm, _ = build_reward(tied_base, "bt", **ON)
    before = {k: v.clone() for k, v in rm.likelihood_model.state_dict().items()}
    rm.train()
    assert not rm.likelihood_model.training and rm.backbone.training
    trainable = [p for p in rm.parameters() if p.requires_grad]
    assert not any(p.requires_grad for p in rm.likelihood_model.parameters())
    opt = torch.optim.SGD(trainable, lr=0.5)
    out = rm(**_batch(rm))
    out["reward"].sum().backward()
    opt.step()
    assert all(torch.equal(v, rm.likelihood_model.state_dict()[k]) for k, v in before.items())
    moved = rm.backbone.get_input_embeddings().weight
    assert not torch.equal(moved, rm.likelihood_model.get_input_embeddings().weight)


@pytest.mark.parametrize("head", ["bt", "gpm", "bgpm"])
def test_save_load_round_trip_keeps_the_frozen_copy(tied_base, tmp_path, head):
    rm, _ = build_reward(tied_base, head, **ON)
    with torch.no_grad():  # the fine-tuned backbone drifts from the frozen copy; the folder must keep both
        for p in rm.backbone.parameters():
            p.add_(0.05 * torch.randn_like(p))
    rm.eval()
    expected = rm.encode(PROMPTS, RESPONSES, batch_size=EVAL.batch_size)
    folder = save_reward_model(rm, tmp_path / "model")
    assert (folder / likelihood.FOLDER / "model.safetensors").exists()
    loaded = load_reward_model(folder)
    assert loaded.spec.likelihood_features and not loaded.likelihood_model.training
    got = loaded.encode(PROMPTS, RESPONSES, batch_size=3)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], atol=1e-6, rtol=0)


def test_an_untied_backbone_is_refused_naming_the_key(tmp_path):
    untied = save_tiny_base(tmp_path / "untied")
    with pytest.raises(ConfigError, match="likelihood_features"):
        build_reward(untied, "bt", **ON)


def test_auto_is_on_for_a_tied_decoder_and_off_for_an_untied_one_or_lora(tied_base, tmp_path):
    auto = {"backbone": {"likelihood_features": "auto"}}
    assert build_reward(tied_base, "gpm", **auto)[0].spec.likelihood_features
    untied, _ = build_reward(save_tiny_base(tmp_path / "untied"), "gpm", **auto)
    assert not untied.spec.likelihood_features and untied.likelihood_model is None
    assert untied.spec.head_input_size == 2 * untied.spec.hidden_size
    with_lora, _ = build_reward(
        tied_base, "gpm", lora={"enabled": True, "target_modules": ["q_proj"]}, **auto
    )
    assert not with_lora.spec.likelihood_features


@pytest.mark.parametrize("head", ["bt", "gpm", "bgpm"])
def test_cached_summaries_give_what_the_frozen_model_computes(tied_base, head):
    """cache_likelihood fixes one summary per row (computed in length-sorted batches); head outputs from the
    cached rows equal those computed with the frozen model on the batch, to float tolerance."""
    rm, _ = build_reward(tied_base, head, **ON)
    rm.eval()
    rows = rm.encoder.tokenize_many(PROMPTS * 3, RESPONSES * 3)
    plain = rm.encoder.pad(rows)
    assert "likelihood_stats" not in plain
    rm.cache_likelihood(rows, batch_size=5)
    cached = rm.encoder.pad(rows)
    with torch.no_grad():
        expected = likelihood.response_stats(
            rm.likelihood_model, plain["input_ids"], plain["attention_mask"], plain["prompt_index"], {}
        )
        torch.testing.assert_close(cached["likelihood_stats"], expected, rtol=1e-5, atol=1e-5)
        got, want = rm(**cached), rm(**plain)
    for key in want:
        torch.testing.assert_close(got[key], want[key], rtol=1e-5, atol=1e-5)
    rows[0].likelihood = None
    with pytest.raises(ValueError, match="mix cached and uncached"):
        rm.encoder.pad(rows)


def test_models_without_likelihood_features_cache_nothing(tied_base):
    rm, _ = build_reward(tied_base, "gpm", backbone={"likelihood_features": False})
    rows = rm.encoder.tokenize_many(PROMPTS, RESPONSES)
    rm.cache_likelihood(rows, batch_size=2)
    assert all(r.likelihood is None for r in rows) and "likelihood_stats" not in rm.encoder.pad(rows)
