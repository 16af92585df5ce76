"""The lean scoring forward (prefpipe.reward.fast.lean_encode: fused RMSNorm and rotary, no transformers forward)
gives the transformers backbone's final states at the read positions, to float tolerance: under right and left
padding, without a mask, with grouped-query attention, LoRA adapters and in bfloat16; and encode_dataset's
scores match the plain path's while the transformers forward is never called. Anything it does not recognise
keeps the plain path."""

from __future__ import annotations

import pytest
import torch
from support.models import _llama_config, build_reward, lora_reward, pair_tokenizer, save_gqa_base
from test_reward_fast_paths import mixed_pairs, rows_of
from test_reward_selected_last_layer import equal_length_batch
from transformers import LlamaModel

from prefpipe.common.io import read_jsonl
from prefpipe.reward.fast.lean_encode import final_states_at, lean_core
from prefpipe.reward.fast.selected_last_layer import causal_allowed
from prefpipe.reward.model import POINT_POOLING


@pytest.fixture(scope="module")
def gqa_base(tmp_path_factory):
    return save_gqa_base(tmp_path_factory.mktemp("lean_encode_base"))


def _read_index(batch: dict, pooling: str = "last") -> torch.Tensor:
    mask = batch["attention_mask"]
    return torch.stack([POINT_POOLING[pooling](mask), batch["prompt_index"]], dim=1)


def _plain_states(backbone, batch: dict, index: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The whole transformers forward, then its last_hidden_state at `index`."""
    kwargs = {"position_ids": batch["position_ids"]} if "position_ids" in batch else {}
    hidden = backbone(input_ids=batch["input_ids"], attention_mask=mask, use_cache=False, **kwargs)
    rows = torch.arange(index.shape[0])[:, None]
    return hidden.last_hidden_state[rows, index]


def _lean_states(core, batch: dict, index: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    allowed = causal_allowed(index, mask, batch["input_ids"].shape[1])
    return final_states_at(core, batch["input_ids"], mask, batch.get("position_ids"), index, allowed)


@pytest.mark.parametrize("side", ["right", "left"])
def test_final_states_equal_the_transformers_forward(gqa_base, side):
    rm, _ = build_reward(gqa_base, "gpm", data={"padding_side": side})
    # float64, where the two forms' different rounding is tiny; transformers' RMSNorm still normalises in
    # float32 (it casts to float32 whatever the model's dtype), hence the float32-sized tolerance
    rm.eval().double()
    chosen, rejected = rows_of(rm, mixed_pairs())
    batch = rm.encoder.pad(chosen + rejected)
    assert (batch["attention_mask"] == 0).sum() > 50  # padding, and (left) padded queries with no real key
    index = _read_index(batch)
    core = lean_core(rm.backbone)
    assert core is not None
    with torch.inference_mode():
        lean = _lean_states(core, batch, index, batch["attention_mask"])
        plain = _plain_states(rm.backbone, batch, index, batch["attention_mask"])
    assert torch.isfinite(lean).all()
    torch.testing.assert_close(lean, plain, rtol=1e-5, atol=1e-6)


def test_no_mask_and_float32(gqa_base):
    """Rows of one length run with SDPA's causal flag; float32 agrees to float32 rounding."""
    rm, _ = build_reward(gqa_base, "bt")
    rm.eval()
    batch = equal_length_batch(rm)
    batch.pop("position_ids")
    index = _read_index(batch)
    with torch.inference_mode():
        lean = _lean_states(lean_core(rm.backbone), batch, index, None)
        plain = _plain_states(rm.backbone, batch, index, None)
    torch.testing.assert_close(lean, plain, rtol=1e-5, atol=1e-5)


def test_bfloat16_within_its_rounding(gqa_base):
    rm, _ = build_reward(gqa_base, "bt")
    rm.eval().to(torch.bfloat16)
    chosen, rejected = rows_of(rm, mixed_pairs())
    batch = rm.encoder.pad(chosen + rejected)
    index = _read_index(batch)
    with torch.inference_mode():
        lean = _lean_states(lean_core(rm.backbone), batch, index, batch["attention_mask"]).float()
        plain = _plain_states(rm.backbone, batch, index, batch["attention_mask"]).float()
    # states are O(1) after the final norm; bf16 keeps 8 bits of mantissa through 3 layers
    assert (lean - plain).abs().max() < 0.1
    assert torch.nn.functional.cosine_similarity(lean, plain, dim=-1).min() > 0.999


def _scores_both_ways(rm, prompts, responses, batch_size=4):
    """encode_dataset with the lean forward, then with transformers' forward; and how many times the
    transformers backbone forward ran in each."""
    calls = []
    hook = rm.backbone.register_forward_pre_hook(lambda *_: calls.append(1))
    try:
        lean = rm.encode_dataset(prompts, responses, batch_size)[0]
        lean_calls = len(calls)
        rm.lean_scoring = False
        plain = rm.encode_dataset(prompts, responses, batch_size)[0]
    finally:
        rm.lean_scoring = True
        hook.remove()
    return lean, plain, lean_calls, len(calls) - lean_calls


@pytest.mark.parametrize("head", ["bt", "gpm", "bgpm"])
def test_encode_dataset_scores_match_on_real_rows(gqa_base, shared_data, head):
    rm, _ = build_reward(gqa_base, head, data={"max_length": 48})
    rm.eval()
    rows = read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")[:20]
    rows += read_jsonl(shared_data / "rewardbench_real_subsets.jsonl")[-20:]  # long LLMBar, short XSTest
    prompts = [r["prompt"] for r in rows] * 2
    responses = [r["chosen"] for r in rows] + [r["rejected"] for r in rows]
    lean, plain, lean_calls, plain_calls = _scores_both_ways(rm, prompts, responses)
    assert lean_calls == 0 and plain_calls > 0  # the lean path really ran instead of transformers'
    assert lean.keys() == plain.keys()
    for k in lean:
        torch.testing.assert_close(lean[k], plain[k], rtol=1e-5, atol=1e-5, msg=lambda m, k=k: f"{k}: {m}")


def test_lora_adapters_apply(gqa_base):
    rm, _ = lora_reward(gqa_base, "gpm", backbone={"pooling": "first"})
    rm.eval()
    pairs = mixed_pairs(8)
    prompts = [p.prompt for p in pairs] * 2
    responses = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    lean, plain, lean_calls, _ = _scores_both_ways(rm, prompts, responses)
    assert lean_calls == 0
    for k in lean:
        torch.testing.assert_close(lean[k], plain[k], rtol=1e-5, atol=1e-5)
    rm.backbone.disable_adapter_layers()  # the adapters moved the scores: they were not skipped
    without = rm.encode_dataset(prompts, responses, 4)[0]
    assert not torch.allclose(without["embedding"], lean["embedding"], atol=1e-3)


def test_unrecognised_models_and_train_mode_keep_the_plain_path(gqa_base):
    from transformers import BertConfig, BertModel

    bert = BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    )
    assert lean_core(bert) is None
    llama = LlamaModel(_llama_config(pair_tokenizer(), 32, 2, 2, 2, 64))
    assert lean_core(llama) is llama
    llama.norm = torch.nn.LayerNorm(32)  # not the RMSNorm formula F.rms_norm computes
    assert lean_core(llama) is None
    rm, _ = build_reward(gqa_base, "gpm", backbone={"pooling": "mean"})
    assert rm._lean_core() is None  # mean pooling reads every position: no selected last layer
    rm, _ = build_reward(gqa_base, "gpm")
    core = rm._lean_core()
    assert core is not None
    batch = rm.encoder.pad(rows_of(rm, mixed_pairs(2))[0])
    with pytest.raises(RuntimeError, match="inference"):
        _lean_states(core.train(), batch, _read_index(batch), batch["attention_mask"])
