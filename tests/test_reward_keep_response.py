"""data.keep_response: a too-long response keeps its start or its end, the same way on every path that cuts
reward inputs (per-row and batched tokenisation, the shared-prompt training form, scoring, the exported loader),
and a saved model truncates as it was trained (folders without the key keep the start)."""

from __future__ import annotations

import json
import random

import pytest
import torch
from support.export_runs import folder_module, reward_run
from support.models import build_reward, pair_tokenizer, save_tiny_base
from test_reward_fast_paths import mixed_pairs, rows_of
from test_reward_selected_last_layer import assert_same_outputs_loss_grads, outputs_loss_grads

from prefpipe.common.config import ConfigError
from prefpipe.export.run import export_reward
from prefpipe.reward.collate import PairEncoder, TokenizedRow, truncate_row
from prefpipe.reward.fast.shared_prompt import pack_pairs
from prefpipe.reward.model import load_reward_model
from prefpipe.reward.spec import HEAD_CONFIG

SPECIAL = {1, 2}  # <s>, </s> in the hand-made id lists below
KEEPS = ("start", "end")
LONG = ["alpha beta gamma delta " * 6 + "the final answer is five", "rock paper scissors " * 8 + "done"]


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    return save_tiny_base(tmp_path_factory.mktemp("keep_response_base"))


@pytest.mark.parametrize(
    ("ids", "prompt_len", "max_length", "keep", "want"),
    [
        # <s> p p r r r r r </s>: the prompt can give one token, the response loses two more
        ([1, 10, 11, 20, 21, 22, 23, 24, 2], 3, 6, "start", [1, 11, 20, 21, 22, 2]),
        ([1, 10, 11, 20, 21, 22, 23, 24, 2], 3, 6, "end", [1, 11, 22, 23, 24, 2]),
        # two leading specials, no trailing one
        ([1, 1, 10, 11, 20, 21, 22, 23], 4, 5, "start", [1, 1, 11, 20, 21]),
        ([1, 1, 10, 11, 20, 21, 22, 23], 4, 5, "end", [1, 1, 11, 22, 23]),
        # two trailing specials stay whole
        ([1, 10, 20, 21, 22, 23, 2, 2], 2, 6, "end", [1, 10, 22, 23, 2, 2]),
    ],
)
def test_hand_built_rows(ids, prompt_len, max_length, keep, want):
    row, cut = truncate_row(ids, prompt_len, max_length, SPECIAL, keep)
    assert (row.input_ids, cut, row.cut) == (want, "response", "response")
    assert row.input_ids[row.prompt_len - 1] == ids[prompt_len - 1]  # the last prompt token is kept


@pytest.mark.parametrize("keep", KEEPS)
def test_prompt_cut_is_the_same_for_both(keep):
    ids = [1, 10, 11, 12, 13, 14, 20, 21, 2]
    row, cut = truncate_row(ids, 6, 6, SPECIAL, keep)
    assert (row.input_ids, row.prompt_len, cut) == ([1, 13, 14, 20, 21, 2], 3, "prompt")
    assert truncate_row(ids, 6, 9, SPECIAL, keep) == (TokenizedRow(ids, 6), "")


def test_random_rows_keep_a_prefix_or_a_suffix_of_the_response():
    """Brute force: the kept response tokens are the longest prefix (start) / suffix (end) of the response
    body that fits beside the kept prompt tokens and the trailing specials, and the two options cut alike."""
    rng = random.Random(0)
    for _ in range(300):
        prompt = [1] * rng.randint(0, 2) + [rng.randint(10, 19) for _ in range(rng.randint(1, 6))]
        body = [rng.randint(20, 99) for _ in range(rng.randint(1, 12))]
        ids = prompt + body + [2] * rng.randint(0, 2)
        max_length = rng.randint(len(ids) - len(body) + 1 - (len(prompt) - 1), len(ids) + 1)
        max_length = max(max_length, ids.count(1) + 2 + ids.count(2))
        rows = {k: truncate_row(ids, len(prompt), max_length, SPECIAL, k) for k in KEEPS}
        assert rows["start"][1] == rows["end"][1]
        assert all(len(r.input_ids) == min(len(ids), max_length) for r, _ in rows.values())
        if rows["start"][1] != "response":
            assert rows["start"] == rows["end"]
            continue
        head = prompt[: prompt.count(1)] + prompt[-1:]
        room = max_length - len(head) - (len(ids) - len(prompt) - len(body))
        assert rows["start"][0].input_ids == head + body[:room] + ids[len(prompt) + len(body) :]
        assert rows["end"][0].input_ids == head + body[len(body) - room :] + ids[len(prompt) + len(body) :]


def test_unknown_option_names_the_key():
    with pytest.raises(ConfigError, match="data.keep_response='middle'"):
        PairEncoder(pair_tokenizer(), 16, "right", "middle")


@pytest.mark.parametrize("keep", KEEPS)
def test_per_row_and_batched_tokenisation_agree(keep):
    """tokenize (per row) and tokenize_batch (the batched call with each prompt tokenised once): same rows and
    counts; the kept response is the start or the end of the untruncated row's response."""
    tok = pair_tokenizer()
    prompts, responses = ["What is 2 plus 3?"] * 2 + ["Play!"], [*LONG, "rock"]
    one, many = (PairEncoder(tok, 20, "right", keep) for _ in range(2))
    rows = [one.tokenize(p, r) for p, r in zip(prompts, responses, strict=True)]
    assert many.tokenize_batch(prompts, responses) == rows
    assert one.truncated == many.truncated == {"response": 2}
    whole = PairEncoder(tok, 4096, "right", keep)
    for p, r, row in zip(prompts, responses, rows, strict=True):
        full = whole.tokenize(p, r)
        if not row.cut:
            assert row == full
            continue
        kept = row.input_ids[row.prompt_len : -1]  # the response without its EOS
        body = full.input_ids[full.prompt_len : -1]
        assert len(row.input_ids) == 20 and row.input_ids[-1] == full.input_ids[-1] == tok.eos_token_id
        assert kept == (body[: len(kept)] if keep == "start" else body[len(body) - len(kept) :])


def test_shared_prompt_form_matches_the_padded_rows_when_responses_keep_their_end(tiny_base):
    rm, _ = build_reward(tiny_base, "bt", data={"max_length": 12, "keep_response": "end"})
    assert rm.shares_prompts and rm.encoder.keep_response == "end"
    rm.eval().double()
    chosen, rejected = rows_of(rm, mixed_pairs())
    assert sum(r.cut == "response" for r in chosen + rejected) >= 4  # the option really acts
    n = len(chosen)
    shared = pack_pairs(chosen, rejected, rm.tokenizer.pad_token_id, 3, 0)
    padded = rm.encoder.pad(chosen + rejected)
    assert_same_outputs_loss_grads(outputs_loss_grads(rm, shared, n), outputs_loss_grads(rm, padded, n))


def test_saved_model_scores_and_exports_as_trained(tiny_base, tmp_path):
    """The folder records keep_response; loading restores it (fast and plain scoring agree, and differ from
    keeping the start); an old folder without the key keeps the start; the exported loader cuts alike."""
    rm, _ = build_reward(tiny_base, "bt", data={"max_length": 14, "keep_response": "end"})
    run = reward_run(tmp_path, rm)
    prompts = ["What is 2 plus 3?"] * 2
    scores = {}
    for fast in (True, False):
        loaded = load_reward_model(run / "model", fast_paths=fast)
        assert loaded.encoder.keep_response == "end"
        scores[fast] = loaded.encode(prompts, LONG, 2)["reward"]
        assert loaded.encoder.truncated == {"response": 2}
    torch.testing.assert_close(scores[True], scores[False], rtol=1e-5, atol=1e-5)

    export_reward(run, tmp_path / "export")
    loader = folder_module(tmp_path / "export", "reward_loader.py")
    exported = loader.ExportedRewardModel.from_folder(tmp_path / "export")
    rows = load_reward_model(run / "model").encoder.tokenize_many(prompts, LONG)
    assert exported.tokenize_many(prompts, LONG) == [(r.input_ids, r.prompt_len) for r in rows]

    config = json.loads((run / "model" / HEAD_CONFIG).read_text())
    del config["keep_response"]
    (run / "model" / HEAD_CONFIG).write_text(json.dumps(config))
    old = load_reward_model(run / "model", fast_paths=False)
    assert old.encoder.keep_response == "start"
    assert not torch.allclose(old.encode(prompts, LONG, 2)["reward"], scores[False])
