"""Padding-free packing (train.packing, prefpipe.reward.fast.packed) gives what the padded rows give: head
outputs, per-pair losses and every gradient to float64 tolerance (rtol 1e-5, atol 1e-6) for the BT, GPM and
Bayesian GPM heads, with and without embedding / likelihood features, in one packed row and in several, with
the last layer at the read positions and without; the attention inside a packed row is transformers' own
block-diagonal mask built from the restarting position_ids (the selected-last-layer-off case reads every
layer through it); the layout places every token once at its own position; whole training runs (float64) agree."""

from __future__ import annotations

import pytest
import torch
from support.models import build_reward, save_tiny_base, save_tiny_tied_base
from test_reward_fast_paths import mixed_pairs, rows_of
from test_reward_selected_last_layer import assert_same_outputs_loss_grads, close, outputs_loss_grads

from prefpipe.reward.collate import TokenizedRow
from prefpipe.reward.fast import packed as packing
from prefpipe.reward.trainer import RewardTrainer

HEADS = ("bt", "gpm", "bgpm")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("packing_base"))


@pytest.fixture(scope="module")
def tied_base(tmp_path_factory):
    return save_tiny_tied_base(tmp_path_factory.mktemp("packing_tied_base"))


def _model(base, head, features):
    with_likelihood = features == "words+likelihood"
    backbone = {"embedding_features": features != "hidden", "likelihood_features": with_likelihood}
    rm, _ = build_reward(base, head, backbone=backbone)
    assert packing.applies(rm)
    rm.eval()  # deterministic head (the Bayesian head samples in train mode)
    rm.double()  # float64: the two forms sum in different orders
    return rm


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("features", ["hidden", "words", "words+likelihood"])
@pytest.mark.parametrize("row_tokens", [0, 40])
def test_outputs_losses_and_gradients_match_the_padded_rows(tiny_base, tied_base, head, features, row_tokens):
    rm = _model(tied_base if features == "words+likelihood" else tiny_base, head, features)
    chosen, rejected = rows_of(rm, mixed_pairs())
    rows, n = chosen + rejected, len(chosen)
    pad = rm.tokenizer.pad_token_id
    if features == "words+likelihood":
        with pytest.raises(ValueError, match="cached likelihood"):
            rm(packed=packing.pack_rows(rows, pad, row_tokens))
        rm.cache_likelihood(rows, batch_size=8)
    packed = packing.pack_rows(rows, pad, row_tokens)
    assert (packed["input_ids"].shape[0] == 1) == (row_tokens == 0)
    padded = rm.encoder.pad(rows)
    assert (padded["attention_mask"] == 0).sum() > 50  # the padded path computes padding; the packed one not
    fast = outputs_loss_grads(rm, {"packed": packed}, n)
    assert_same_outputs_loss_grads(fast, outputs_loss_grads(rm, padded, n))


@pytest.mark.parametrize("head", HEADS)
def test_every_layer_through_transformers_packed_mask(tiny_base, head):
    """selected_last_layer off: every layer, the last one included, attends through the block-diagonal
    mask transformers builds from the position_ids (attention_mask None)."""
    rm = _model(tiny_base, head, "words")
    rm.set_fast_paths(False)
    chosen, rejected = rows_of(rm, mixed_pairs())
    rows, n = chosen + rejected, len(chosen)
    packed = packing.pack_rows(rows, rm.tokenizer.pad_token_id, 0)
    fast = outputs_loss_grads(rm, {"packed": packed}, n)
    assert_same_outputs_loss_grads(fast, outputs_loss_grads(rm, rm.encoder.pad(rows), n))


def test_layout_places_each_token_once_at_its_own_position():
    rows = [TokenizedRow([5, 6, 7], 2), TokenizedRow([8, 9], 1), TokenizedRow([1, 2, 3, 4, 5], 3),
            TokenizedRow([7], 1)]  # fmt: skip
    for row_tokens in (0, 5, 6):
        p = packing.pack_rows(rows, pad_id=0, row_tokens=row_tokens)
        ids, pos = p["input_ids"].flatten(), p["position_ids"].flatten()
        width = p["input_ids"].shape[1]
        if row_tokens:
            assert all(
                sum(len(rows[i].input_ids) for i in m) <= row_tokens
                for m in packing.place([3, 2, 5, 1], row_tokens)
            )
        for i, row in enumerate(rows):
            last, prompt_end = p["read"][i].tolist()
            n = len(row.input_ids)
            start = last - (n - 1)
            assert last // width == start // width  # one sequence never spans two packed rows
            assert ids[start : last + 1].tolist() == row.input_ids
            assert pos[start : last + 1].tolist() == list(range(n))
            assert prompt_end == start + row.prompt_len - 1
            assert (p["word"] == i).nonzero().flatten().tolist() == list(
                range(start + row.prompt_len, last + 1)
            )
            r, s = divmod(int(p["slot"][i, 0]), p["index"].shape[1])
            assert r * width + int(p["index"][r, s]) == last
            keys = p["allowed"][r, s].nonzero().flatten().tolist()  # the last token sees its own row only
            assert [r * width + k for k in keys] == list(range(start, last + 1))
        assert int((p["input_ids"] != 0).sum()) == sum(len(r.input_ids) for r in rows)


@pytest.mark.parametrize("head", ["bt", "bgpm"])
def test_training_runs_agree_with_and_without_packing(tiny_base, tmp_path, head):
    pairs = mixed_pairs(16)
    losses = {}
    for pack in (True, False):
        rm, settings = build_reward(
            tiny_base, head,
            # a small learning rate: Adam turns float rounding into visible loss changes on a chaotic run
            train={"steps": 4, "batch_size": 8, "micro_batch_size": 4, "packing": pack, "share_prompt": False,
                   "learning_rate": 1e-4, "head_learning_rate": 1e-4, "head_fit": {"after_steps": 0}},
        )  # fmt: skip
        rm.double()  # float64: Adam turns float32 rounding (which differs by CPU kernel) into loss changes
        trainer = RewardTrainer(rm, settings, pairs, tmp_path / f"run_{pack}")
        assert ("packed" in trainer._micro_batch(*rows_of(rm, pairs[:4]))) == pack
        losses[pack] = torch.tensor([row["loss"] for row in trainer.train().history])
    close(losses[True], losses[False], "training losses", rtol=1e-4, atol=1e-5)
