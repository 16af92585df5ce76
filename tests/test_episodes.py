"""Multi-turn episodes on the plain engine (grpo/rollout/episodes/): the tag format, segments and owners, the
batched decode with the KV cache kept across turns against a full re-encode of every row, limits, and the
Rollout the trainer takes (environment tokens out of the loss mask)."""

from __future__ import annotations

import pytest
import torch
from support.episodes import DEMOS, PARAGRAPHS, demo_ids, reencode_episode, runner, teach
from support.models import chat_tokenizer, tiny_llama

from prefpipe.generation.tokens import eos_token_ids, tokenize_prompts
from prefpipe.grpo.environments.base import MALFORMED_CALL, ToolCall
from prefpipe.grpo.metric_names import EPISODE_ANSWERED, EPISODE_CALLS, EPISODE_ENV_TOKEN_SHARE
from prefpipe.grpo.rollout.episodes.decode import EpisodeLimits, Sampling
from prefpipe.grpo.rollout.episodes.episode import (
    ANSWERED,
    ENVIRONMENT,
    POLICY,
    TOKEN_LIMIT,
    TURN_LIMIT,
    Episode,
    Segment,
)
from prefpipe.grpo.rollout.episodes.format import ANSWER, CALL, NO_CALL, TagFormat
from prefpipe.grpo.rollout.episodes.generate import generate_episodes

ROW = {"question": "q", "paragraphs": PARAGRAPHS}
GREEDY = Sampling(None, 1.0, 0, 1.0)


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


@pytest.fixture(scope="module")
def taught(tok):
    return teach(tiny_llama(tok, hidden=64), tok)


def test_tag_format_reads_calls_answers_and_malformed_turns():
    fmt = TagFormat()
    assert fmt.turn_end("I will <search>dog", at_eos=False) is None
    assert fmt.turn_end("I will <search> dog park </search>", at_eos=False).call == ToolCall(
        "search", "dog park"
    )
    end = fmt.turn_end("<answer>Paris</answer>", at_eos=False)
    assert (end.kind, end.answer) == (ANSWER, "Paris")
    assert fmt.turn_end("<lookup>x</lookup>", at_eos=False).call == ToolCall(
        "lookup", "x"
    )  # unknown: env says so
    bad = fmt.turn_end("<calc>1 + 2", at_eos=True)
    assert bad.kind == CALL and bad.call.malformed.startswith("<calc> opened, never closed")
    assert fmt.turn_end("just text", at_eos=True).kind == NO_CALL
    assert (
        fmt.render(runner().run(ToolCall("", "", malformed="m")))
        == "\n<result>error: malformed tool call: m</result>\n"
    )
    assert runner().run(ToolCall("", "", malformed="m")).kind == MALFORMED_CALL


def test_segments_own_every_token_once():
    ep = Episode()
    ep.add(POLICY, [1, 2])
    ep.add(POLICY, [3])
    ep.add(ENVIRONMENT, [4, 5])
    ep.add(POLICY, [6])
    ep.add(ENVIRONMENT, [])
    assert ep.segments == [Segment(POLICY, 0, 0, 3), Segment(ENVIRONMENT, 0, 3, 5), Segment(POLICY, 1, 5, 6)]
    assert ep.owners == [POLICY] * 3 + [ENVIRONMENT] * 2 + [POLICY] and ep.turns == 2


def _run(model, tok, prompts, group, limits, sampling, make=runner):
    return generate_episodes(
        model, tok, [ROW] * len(prompts), prompts, group, make, TagFormat(), limits, sampling
    )


def test_a_taught_policy_searches_reads_and_answers(tok, taught):
    limits = EpisodeLimits(max_turns=3, max_turn_tokens=40, max_episode_tokens=150)
    out = _run(taught, tok, [p for p, _ in DEMOS], 2, limits, GREEDY)
    for row, ep in enumerate(out.episodes):
        prompt, turns = DEMOS[row // 2]
        _, want_ids, want_owners = demo_ids(tok, prompt, turns)
        assert ep.ids == want_ids and ep.owners == want_owners
        assert ep.finish == ANSWERED and ep.answer == turns[-1][len("<answer>") : -len("</answer>")]
        assert [s.owner for s in ep.segments] == [POLICY, ENVIRONMENT, POLICY]
        assert ep.observations[0].text.startswith("[1] ") and ep.calls[0].name == "search"
    ro = out.rollout
    for row, ep in enumerate(out.episodes):  # the trainer's view, walked token by token
        k = len(ep.ids)
        assert ro.completion_ids[row, :k].tolist() == ep.ids and int(ro.completion_mask[row].sum()) == k
        assert ro.env_mask[row, :k].tolist() == [int(o == POLICY) for o in ep.owners]
        assert ro.loss_mask[row, k:].sum() == 0
    m = out.metrics()
    assert m[EPISODE_ANSWERED] == 1.0 and m[EPISODE_CALLS] == 1.0 and 0 < m[EPISODE_ENV_TOKEN_SHARE] < 1


@pytest.mark.parametrize("which", ["taught", "random"])
@pytest.mark.parametrize("sampled", [False, True])
def test_kv_cache_across_turns_gives_the_tokens_of_a_full_reencode(tok, taught, which, sampled):
    """Rows decoded together (holes in the cache where a row waits or is shorter) against each row alone,
    re-encoded from scratch at every step."""
    model = taught if which == "taught" else tiny_llama(tok, seed=3, hidden=64).eval()
    limits = EpisodeLimits(max_turns=3, max_turn_tokens=40, max_episode_tokens=110)
    prompts, group = [p for p, _ in DEMOS] + ["Say yes."], 3
    n = len(prompts) * group
    uniforms = torch.rand(n, limits.max_episode_tokens, generator=torch.Generator().manual_seed(7))
    sampling = Sampling(uniforms if sampled else None, 1.0, 0, 1.0)
    out = _run(model, tok, prompts, group, limits, sampling)
    batch = tokenize_prompts(tok, prompts, None)
    eos = eos_token_ids(tok, model)
    for row, ep in enumerate(out.episodes):
        p = row // group
        prompt_ids = batch.input_ids[p][batch.attention_mask[p].bool()].tolist()
        u = uniforms[row] if sampled else None
        ids, owners = reencode_episode(model, tok, prompt_ids, ROW, runner(), limits, eos, u)
        assert ep.ids == ids and ep.owners == owners, f"row {row}"


def test_turn_and_token_limits_end_episodes(tok, taught):
    prompts = [DEMOS[0][0]]
    one_turn = _run(taught, tok, prompts, 2, EpisodeLimits(1, 40, 150), GREEDY)
    assert {e.finish for e in one_turn.episodes} == {TURN_LIMIT}
    assert all(e.owners.count(ENVIRONMENT) == 0 and not e.calls for e in one_turn.episodes)
    # a budget that the search result overflows: the result is cut to fit and the episode ends (H04)
    call_len = len(tok.encode(DEMOS[0][1][0], add_special_tokens=False))
    cut = _run(taught, tok, prompts, 2, EpisodeLimits(3, 40, call_len + 5), GREEDY)
    for ep in cut.episodes:
        assert ep.finish == TOKEN_LIMIT and ep.truncated and ep.context_cut > 0
        assert len(ep.ids) == call_len + 5 and ep.owners[-5:] == [ENVIRONMENT] * 5
    assert cut.rollout.truncated.all()
