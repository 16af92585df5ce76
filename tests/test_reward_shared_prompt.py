"""Chosen and rejected behind one copy of their prompt (prefpipe.reward.fast.shared_prompt) give what the two padded
rows give, to float tolerance: head outputs, per-pair losses and every gradient, for each head, with and without
embedding features; the 4-D mask lets each token see exactly what it sees in its own row; pairs that share
nothing still score alike, and models it does not fit keep the padded rows; whole training runs with and
without it agree."""

from __future__ import annotations

import pytest
import torch
from support.models import build_reward, save_tiny_base, save_tiny_tied_base
from test_reward_fast_paths import mixed_pairs, rows_of
from test_reward_selected_last_layer import assert_same_outputs_loss_grads, close, outputs_loss_grads

from prefpipe.reward.collate import TokenizedRow
from prefpipe.reward.fast.shared_prompt import pack_chunk, pack_pairs
from prefpipe.reward.trainer import RewardTrainer

HEADS = ("bt", "gpm", "bgpm")


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("shared_prompt_base"))


def shared_batch(rm, chosen, rejected, chunks: int = 3):
    batch = pack_pairs(chosen, rejected, rm.tokenizer.pad_token_id, chunks, 0)
    assert len(batch["shared"]) == min(chunks, len(chosen))
    return batch


@pytest.fixture(scope="module")
def tied_base(tmp_path_factory):
    return save_tiny_tied_base(tmp_path_factory.mktemp("shared_prompt_tied_base"))


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("features", ["hidden", "words", "words+likelihood"])
def test_outputs_losses_and_gradients_match_the_padded_rows(tiny_base, tied_base, head, features):
    """Likelihood features read each row's cached summary in both forms (the trainer caches them)."""
    with_likelihood = features == "words+likelihood"
    backbone = {"embedding_features": features != "hidden", "likelihood_features": with_likelihood}
    rm, _ = build_reward(tied_base if with_likelihood else tiny_base, head, backbone=backbone)
    assert rm.shares_prompts
    rm.eval()  # deterministic head
    rm.double()  # float64: the two forms sum in different orders, and float32 noise differs by CPU kernel
    chosen, rejected = rows_of(rm, mixed_pairs())
    n = len(chosen)
    if with_likelihood:
        with pytest.raises(ValueError, match="cached likelihood"):
            rm(**shared_batch(rm, chosen, rejected))
        rm.cache_likelihood(chosen + rejected, batch_size=8)
    padded = rm.encoder.pad(chosen + rejected)
    shared = shared_batch(rm, chosen, rejected)

    assert_same_outputs_loss_grads(outputs_loss_grads(rm, shared, n), outputs_loss_grads(rm, padded, n))


def test_each_token_sees_what_it_sees_in_its_own_row():
    """Brute force: every row's every token appears once in the packed sequence at its own position, and
    the (token, position) pairs it may attend to there are exactly its row's causal prefix; the read columns
    hold each row's last token and prompt end; padding sees itself only."""
    chosen = [TokenizedRow([1, 2, 3, 10, 11], 3), TokenizedRow([4, 5, 20], 2), TokenizedRow([1, 2, 7, 8], 3)]
    rejected = [
        TokenizedRow([1, 2, 3, 12], 3),
        TokenizedRow([4, 5, 21, 22, 23], 2),
        TokenizedRow([1, 2, 9], 2),
    ]
    chunk = pack_chunk(chosen, rejected, pad_id=0)
    ids, pos, allowed = chunk["input_ids"], chunk["position_ids"], chunk["attention_mask"][:, 0]
    for i, rows in enumerate(zip(chosen, rejected, strict=True)):
        real = set()
        for side, row in enumerate(rows):
            prefix = [(t, j) for j, t in enumerate(row.input_ids)]
            cols = []
            for token, position in prefix:  # the column holding this token of this row
                col = next(
                    c for c in range(ids.shape[1])
                    if (int(ids[i, c]), int(pos[i, c])) == (token, position)
                    and c not in cols and {(int(ids[i, x]), int(pos[i, x])) for x in torch.nonzero(allowed[i, c]).flatten()} == set(prefix[: position + 1])
                )  # fmt: skip
                cols.append(col)
            real |= set(cols)
            assert int(chunk["read"][i, side]) == cols[-1]
            assert int(chunk["read"][i, 2 + side]) == cols[row.prompt_len - 1]
            assert chunk["response"][i, side].nonzero().flatten().tolist() == sorted(cols[row.prompt_len :])
        for c in set(range(ids.shape[1])) - real:  # padding attends to itself only
            assert torch.nonzero(allowed[i, c]).flatten().tolist() == [c]
    assert chunk["input_ids"].shape[1] == 6  # pair 1: 5 + 4 - 3 shared tokens; pair 3 shares only [1, 2]


def test_pairs_without_a_shared_start_and_unfit_models(tiny_base):
    rm, _ = build_reward(tiny_base, "gpm")
    rm.eval()
    chosen, rejected = rows_of(rm, mixed_pairs(4))
    odd = TokenizedRow([9] + rejected[0].input_ids[1:], rejected[0].prompt_len)  # nothing shared
    rejected = [odd] + rejected[1:]
    with torch.no_grad():
        shared = rm(**shared_batch(rm, chosen, rejected, chunks=2))
        padded = rm(**rm.encoder.pad(chosen + rejected))
    for k in shared:
        close(shared[k], padded[k], k)
    rm_mean, _ = build_reward(tiny_base, "gpm", backbone={"pooling": "mean"})
    assert not rm_mean.shares_prompts


@pytest.mark.parametrize(("head", "with_likelihood"), [("bt", False), ("gpm", False), ("gpm", True)])
def test_training_runs_agree_with_and_without_the_shared_prompt(
    tiny_base, tied_base, tmp_path, head, with_likelihood
):
    pairs = mixed_pairs(16)
    losses = {}
    for share in (True, False):
        rm, settings = build_reward(
            tied_base if with_likelihood else tiny_base,
            head,
            backbone={"likelihood_features": with_likelihood},
            # a small learning rate: Adam turns float rounding into visible loss changes on a chaotic run
            train={"steps": 4, "batch_size": 8, "micro_batch_size": 4, "share_prompt": share,
                   "learning_rate": 1e-4, "head_learning_rate": 1e-4, "head_fit": {"after_steps": 0}},
        )  # fmt: skip
        trainer = RewardTrainer(rm, settings, pairs, tmp_path / f"run_{share}")
        rows = rows_of(rm, pairs[:4])
        rm.cache_likelihood(rows[0] + rows[1], batch_size=4)  # what train() does
        assert (trainer._micro_batch(*rows).get("shared") is not None) == share
        result = trainer.train()
        losses[share] = torch.tensor([row["loss"] for row in result.history])
    close(losses[True], losses[False], "training losses", rtol=1e-4, atol=1e-5)
