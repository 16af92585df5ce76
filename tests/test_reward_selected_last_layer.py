"""The last decoder layer run at the read positions only (prefpipe.reward.fast.selected_last_layer) gives what
the full last layer gives, to float tolerance: features, head outputs, per-pair losses and every parameter's
gradient; under right and left padding, with no mask, with grouped-query attention, LoRA, first-token
pooling, and through encode_dataset (evaluation's path). Architectures it does not know keep the plain
path."""

from __future__ import annotations

import pytest
import torch
from support.models import _llama_config, build_reward, lora_reward, pair_tokenizer, save_gqa_base
from test_reward_fast_paths import mixed_pairs, per_pair_loss, rows_of
from transformers import LlamaModel

from prefpipe.reward.fast.selected_last_layer import last_layer

HEADS = ("bt", "gpm", "bgpm")


@pytest.fixture(scope="module")
def gqa_base(tmp_path_factory):
    return save_gqa_base(tmp_path_factory.mktemp("selected_last_layer_base"))


def both_paths(rm, fn):
    """fn() on the selected-positions path, then on the plain path (same model, same inputs)."""
    assert rm.selected_last_layer, "the reward model did not pick the selected-positions path"
    fast = fn()
    rm.selected_last_layer = False
    try:
        plain = fn()
    finally:
        rm.selected_last_layer = True
    return fast, plain


def close(a: torch.Tensor, b: torch.Tensor, what: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def outputs_loss_grads(rm, batch: dict, n: int) -> tuple[dict, torch.Tensor, dict]:
    """Head outputs, per-pair losses and every parameter's gradient of one forward/backward on `batch`."""
    rm.zero_grad(set_to_none=True)
    out = rm(**batch)
    loss = per_pair_loss(rm, out, n)
    loss.mean().backward()
    grads = {k: p.grad.clone() for k, p in rm.named_parameters() if p.grad is not None}
    return {k: v.detach() for k, v in out.items()}, loss.detach(), grads


def assert_same_outputs_loss_grads(fast: tuple, plain: tuple) -> None:
    (out_f, loss_f, grad_f), (out_p, loss_p, grad_p) = fast, plain
    assert out_f.keys() == out_p.keys()
    for k in out_f:
        close(out_f[k], out_p[k], k)
    close(loss_f, loss_p, "per-pair loss")
    assert grad_f.keys() == grad_p.keys() and len(grad_f) > 10
    for k in grad_f:
        close(grad_f[k], grad_p[k], f"grad {k}")


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("side", ["right", "left"])
def test_outputs_losses_and_gradients_match_the_full_last_layer(gqa_base, head, side):
    rm, _ = build_reward(gqa_base, head, data={"padding_side": side})
    rm.eval()  # deterministic head (the Bayesian head samples in train mode)
    rm.double()  # float64: the two forms sum in different orders, and float32 noise differs by CPU kernel
    chosen, rejected = rows_of(rm, mixed_pairs())
    n = len(chosen)
    batch = rm.encoder.pad(chosen + rejected)
    assert (batch["attention_mask"] == 0).sum() > 50  # padding on both paths

    fast, plain = both_paths(rm, lambda: outputs_loss_grads(rm, batch, n))
    assert_same_outputs_loss_grads(fast, plain)
    grad_f = fast[2]
    last = [k for k in grad_f if ".layers.2.mlp." in k]
    assert last and all(grad_f[k].abs().sum() > 0 for k in last)  # the last layer is trained, not skipped


def equal_length_batch(rm) -> dict:
    """pad() of the largest group of mixed_pairs() rows that share one length: a batch without padding."""
    chosen, rejected = rows_of(rm, mixed_pairs())
    by_length: dict[int, list] = {}
    for row in chosen + rejected:
        by_length.setdefault(len(row.input_ids), []).append(row)
    rows = max(by_length.values(), key=len)
    assert len(rows) >= 2
    batch = rm.encoder.pad(rows)
    assert batch["attention_mask"].all()
    return batch


def test_equal_lengths_run_without_a_mask(gqa_base):
    rm, _ = build_reward(gqa_base, "gpm")
    rm.eval()
    batch = equal_length_batch(rm)
    ids, prompt_index = batch["input_ids"], batch["prompt_index"]
    with torch.no_grad():
        fast, plain = both_paths(rm, lambda: rm.features(ids, None, prompt_index))
    close(fast[0], plain[0], "pooled")
    close(fast[1], plain[1], "prompt state")


def test_lora_and_first_token_pooling(gqa_base):
    rm, _ = lora_reward(gqa_base, "gpm", backbone={"pooling": "first"})
    rm.eval()
    chosen, rejected = rows_of(rm, mixed_pairs(6))
    batch = rm.encoder.pad(chosen + rejected)
    with torch.no_grad():
        fast, plain = both_paths(rm, lambda: rm(**batch))
    for k in fast:
        close(fast[k], plain[k], k)


def test_encode_dataset_scores_match(gqa_base):
    rm, _ = build_reward(gqa_base, "bgpm")
    rm.eval()
    pairs = mixed_pairs(10)
    prompts = [p.prompt for p in pairs] * 2
    responses = [p.chosen for p in pairs] + [p.rejected for p in pairs]
    fast, plain = both_paths(rm, lambda: rm.encode_dataset(prompts, responses, batch_size=4)[0])
    for k in fast:
        close(fast[k], plain[k], k)


def test_unknown_architectures_keep_the_plain_path(tmp_path):
    from transformers import BertConfig, BertModel

    bert = BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    )
    assert last_layer(bert) is None
    llama = LlamaModel(_llama_config(pair_tokenizer(), 32, 2, 2, 2, 64))
    assert last_layer(llama) is llama.layers[-1]
    llama.config.num_hidden_layers = 1  # the model would stop before its last listed layer
    assert last_layer(llama) is None
