"""Rollouts, masks and log-probs on a real tiny Llama with a tokenizer trained in the test."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.models import chat_tokenizer, tiny_llama

from prefpipe.common.chat import format_prompt
from prefpipe.generation.tokens import tokenize_prompts
from prefpipe.grpo.algorithm.diagnostics import length_metrics, token_audit, token_roles
from prefpipe.grpo.logprobs import completion_logprobs
from prefpipe.grpo.rollout.completions import GenerationSettings, completion_mask, generate


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return tiny_llama(tok).eval()


def test_completion_mask_stops_after_first_eos():
    eos = 2
    ids = torch.tensor([[5, 6, 2, 0, 0], [5, 2, 7, 2, 9], [5, 6, 7, 8, 9], [2, 0, 0, 0, 0]])
    mask, has_eos = completion_mask(ids, [eos])
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]
    assert has_eos.tolist() == [True, True, False, True]
    # several EOS ids (e.g. <|im_end|> and <|endoftext|>): the first of any ends the completion
    mask2, _ = completion_mask(torch.tensor([[4, 9, 3, 2]]), [2, 3])
    assert mask2.tolist() == [[1, 1, 1, 0]]


def test_prompts_are_left_padded_and_left_truncated(tok):
    batch = tokenize_prompts(
        tok, ["Say yes.", "the quick brown fox jumps over the lazy dog"], max_prompt_length=6
    )
    assert batch.truncated.tolist() == [False, True]
    short = tok(format_prompt(tok, "Say yes."))["input_ids"]
    long_ids = tok(format_prompt(tok, "the quick brown fox jumps over the lazy dog"))["input_ids"]
    assert batch.input_ids[1].tolist() == long_ids[-6:]  # the end (where generation starts) is kept
    assert batch.input_ids[0, -len(short) :].tolist() == short
    assert batch.attention_mask[0].tolist() == [0] * (6 - len(short)) + [1] * len(short)
    assert (batch.input_ids[0, : 6 - len(short)] == tok.pad_token_id).all()


def test_chat_template_prompts_are_not_given_a_second_bos():
    chat_tok = chat_tokenizer(chat_template=True)
    batch = tokenize_prompts(chat_tok, ["Say yes."], None)
    ids = batch.input_ids[0].tolist()
    assert ids.count(chat_tok.bos_token_id) == 1 and ids[0] == chat_tok.bos_token_id


def _manual_logprobs(model, ids: list[int], n_completion: int) -> list[float]:
    """Independent computation: one unpadded sequence, explicit loop over completion positions."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    out = []
    for pos in range(len(ids) - n_completion, len(ids)):
        out.append(float(F.log_softmax(logits[pos - 1], dim=-1)[ids[pos]]))
    return out


def test_left_padded_logprobs_equal_unpadded_loop(tok, model):
    a = tok("What is 2 plus 3?")["input_ids"]
    b = tok("Say no.")["input_ids"]
    comp_a, comp_b = [40, 41, 42], [43, 44, 45]
    width = len(a)
    ids = torch.full((2, width + 3), tok.pad_token_id)
    att = torch.zeros_like(ids)
    ids[0] = torch.tensor(a + comp_a)
    att[0] = 1
    ids[1, width - len(b) :] = torch.tensor(b + comp_b)
    att[1, width - len(b) :] = 1
    with torch.no_grad():
        got, ent = completion_logprobs(
            model, ids, att, 3, temperature=1.0, with_entropy=True, micro_batch_size=1
        )
    assert got.dtype == torch.float32
    assert got[0].tolist() == pytest.approx(_manual_logprobs(model, a + comp_a, 3), abs=1e-5)
    assert got[1].tolist() == pytest.approx(_manual_logprobs(model, b + comp_b, 3), abs=1e-5)
    # entropy of the next-token distribution, checked against torch.distributions
    with torch.no_grad():
        logits = model(torch.tensor([b + comp_b])).logits[0, len(b) - 1]
    want = float(torch.distributions.Categorical(logits=logits.float()).entropy())
    assert float(ent[1, 0]) == pytest.approx(want, abs=1e-5)


def test_temperature_scales_the_scored_distribution(tok, model):
    ids = torch.tensor([tok("Say yes. yes")["input_ids"]])
    att = torch.ones_like(ids)
    with torch.no_grad():
        hot, _ = completion_logprobs(model, ids, att, 2, temperature=0.5)
        logits = model(ids).logits[0].float() / 0.5
    want = [float(F.log_softmax(logits[p - 1], -1)[ids[0, p]]) for p in (ids.shape[1] - 2, ids.shape[1] - 1)]
    assert hot[0].tolist() == pytest.approx(want, abs=1e-5)


def test_generate_masks_prompt_padding_and_post_eos(tok):
    model = tiny_llama(tok, seed=3).eval()
    head = torch.nn.Linear(32, len(tok), bias=True)  # a bias on EOS: some completions end early, some run out
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tok.eos_token_id] = 3.5
    model.lm_head = head
    torch.manual_seed(0)
    settings = GenerationSettings(max_new_tokens=12, temperature=1.0, fast=True)
    ro = generate(
        model,
        tok,
        ["Say yes.", "the quick brown fox jumps over the lazy dog"],
        4,
        settings,
        max_prompt_length=8,
    )
    assert model.training is False  # restored to what it was (eval), and generation ran in eval mode
    n = ro.completion_ids.shape[0]
    assert n == 8 and ro.prompt_truncated.tolist() == [False] * 4 + [True] * 4
    assert ro.truncated.any() and (~ro.truncated).any()  # both branches below are exercised
    for i in range(n):
        comp = ro.completion_ids[i].tolist()
        mask = ro.loss_mask[i].tolist()
        if tok.eos_token_id in comp:
            first = comp.index(tok.eos_token_id)
            assert mask == [1] * (first + 1) + [0] * (len(comp) - first - 1)
            assert not ro.truncated[i]
        else:
            assert mask == [1] * len(comp) and ro.truncated[i]
        roles = token_roles(ro, i)
        assert roles.count("trained") == sum(mask)
        assert roles.count("prompt") == int(ro.prompt_mask[i].sum())
        assert roles.count("pad") == int((1 - ro.prompt_mask[i]).sum())
        # the loss never touches prompt or padding: the loss mask only spans completion columns
        assert ro.attention_mask[i, : ro.prompt_ids.shape[1]].tolist() == ro.prompt_mask[i].tolist()
    lm = length_metrics(ro)
    assert lm["prompt_truncation_rate"] == 0.5
    assert lm["truncated_ratio"] == pytest.approx(float(ro.truncated.float().mean()))
    audit = token_audit(tok, ro, 0)
    assert audit["n_trained"] == int(ro.loss_mask[0].sum()) and "[[" in audit["marked"]


def test_generate_restores_training_mode(tok):
    model = tiny_llama(tok, seed=1).train()
    torch.manual_seed(0)
    generate(model, tok, ["Say no."], 2, GenerationSettings(max_new_tokens=3, fast=True), None)
    assert model.training
